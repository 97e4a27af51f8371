// An attention op whose K head dim differs from Q's (used by errors.test).
func.func @mismatched(%q: tensor<1x8x16x64xf32>, %k: tensor<1x8x16x32xf32>,
                      %v: tensor<1x8x16x64xf32>) -> tensor<1x8x16x64xf32> {
  %o = kiln.attention %q, %k, %v {scale = 1.0 : f32} : tensor<1x8x16x64xf32>, tensor<1x8x16x32xf32>, tensor<1x8x16x64xf32> -> tensor<1x8x16x64xf32>
  return %o : tensor<1x8x16x64xf32>
}
