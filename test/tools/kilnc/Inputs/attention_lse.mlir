// A forward that keeps its log-sum-exp for training.
func.func @forward(%q: tensor<1x4x64x64xf16>, %k: tensor<1x4x64x64xf16>, %v: tensor<1x4x64x64xf16>) -> (tensor<1x4x64x64xf16>, tensor<1x4x64xf32>) {
  %o, %lse = kiln.attention %q, %k, %v {causal, scale = 0.125 : f32} : tensor<1x4x64x64xf16>, tensor<1x4x64x64xf16>, tensor<1x4x64x64xf16> -> tensor<1x4x64x64xf16>, tensor<1x4x64xf32>
  return %o, %lse : tensor<1x4x64x64xf16>, tensor<1x4x64xf32>
}
