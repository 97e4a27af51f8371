func.func @packed_f32(%q: tensor<?x8x64xf32>, %k: tensor<?x2x64xf32>, %v: tensor<?x2x64xf32>, %qo: tensor<?xi32>, %ko: tensor<?xi32>) -> tensor<?x8x64xf32> {
  %o = kiln.attention %q, %k, %v offsets(%qo, %ko : tensor<?xi32>, tensor<?xi32>) {causal, scale = 0.125 : f32} : tensor<?x8x64xf32>, tensor<?x2x64xf32>, tensor<?x2x64xf32> -> tensor<?x8x64xf32>
  return %o : tensor<?x8x64xf32>
}
