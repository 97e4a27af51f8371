// The backward pass of a site with a bias that needs its gradient.
func.func @backward(%q: tensor<1x4x64x64xf16>, %k: tensor<1x4x64x64xf16>, %v: tensor<1x4x64x64xf16>, %o: tensor<1x4x64x64xf16>, %lse: tensor<1x4x64xf32>, %do: tensor<1x4x64x64xf16>, %bias: tensor<1x4x64x64xf16>) -> (tensor<1x4x64x64xf16>, tensor<1x4x64x64xf16>, tensor<1x4x64x64xf16>, tensor<1x4x64x64xf16>) {
  %dq, %dk, %dv, %db = kiln.attention_grad %q, %k, %v, %o, %lse, %do bias(%bias : tensor<1x4x64x64xf16>) {bias_grad, scale = 0.125 : f32} : tensor<1x4x64x64xf16>, tensor<1x4x64x64xf16>, tensor<1x4x64x64xf16>, tensor<1x4x64x64xf16>, tensor<1x4x64xf32>, tensor<1x4x64x64xf16> -> tensor<1x4x64x64xf16>, tensor<1x4x64x64xf16>, tensor<1x4x64x64xf16>, tensor<1x4x64x64xf16>
  return %dq, %dk, %dv, %db : tensor<1x4x64x64xf16>, tensor<1x4x64x64xf16>, tensor<1x4x64x64xf16>, tensor<1x4x64x64xf16>
}
