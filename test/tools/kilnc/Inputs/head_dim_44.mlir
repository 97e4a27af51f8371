// A head dim the GPU kernels do not support (used by errors.test).
func.func @odd(%q: tensor<1x4x16x44xf32>, %k: tensor<1x4x16x44xf32>, %v: tensor<1x4x16x44xf32>) -> tensor<1x4x16x44xf32> {
  %o = kiln.attention %q, %k, %v {scale = 1.0 : f32} : tensor<1x4x16x44xf32>, tensor<1x4x16x44xf32>, tensor<1x4x16x44xf32> -> tensor<1x4x16x44xf32>
  return %o : tensor<1x4x16x44xf32>
}
