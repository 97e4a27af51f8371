func.func @packed(%q: tensor<?x8x64xbf16>, %k: tensor<?x2x64xbf16>, %v: tensor<?x2x64xbf16>, %qo: tensor<?xi32>, %ko: tensor<?xi32>) -> tensor<?x8x64xbf16> {
  %o = kiln.attention %q, %k, %v offsets(%qo, %ko : tensor<?xi32>, tensor<?xi32>) {causal, scale = 0.125 : f32} : tensor<?x8x64xbf16>, tensor<?x2x64xbf16>, tensor<?x2x64xbf16> -> tensor<?x8x64xbf16>
  return %o : tensor<?x8x64xbf16>
}
