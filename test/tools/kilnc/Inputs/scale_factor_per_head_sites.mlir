// Sites with a run-time scale per query head (scale_factor [Hq]: Swin-v2's
// logit scale), for package-scale-factor-per-head.test: bf16 with a bias
// (the tensor-core kernels, a KV head's group of one query head a block),
// bf16 with grouped-query heads (the scalar kernel, a query head a block),
// f32 (the TF32 kernel) and a backward.
func.func @cosine(%q: tensor<?x4x?x64xbf16>, %k: tensor<?x4x?x64xbf16>, %v: tensor<?x4x?x64xbf16>, %b: tensor<1x4x?x?xbf16>, %f: tensor<4xf32>) -> tensor<?x4x?x64xbf16> {
  %o = kiln.attention %q, %k, %v bias(%b : tensor<1x4x?x?xbf16>) scale_factor(%f : tensor<4xf32>) {scale = 1.0 : f32} : tensor<?x4x?x64xbf16>, tensor<?x4x?x64xbf16>, tensor<?x4x?x64xbf16> -> tensor<?x4x?x64xbf16>
  return %o : tensor<?x4x?x64xbf16>
}

func.func @grouped(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>, %f: tensor<8xf32>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v scale_factor(%f : tensor<8xf32>) {causal, scale = 1.0 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}

func.func @single(%q: tensor<?x4x?x64xf32>, %k: tensor<?x4x?x64xf32>, %v: tensor<?x4x?x64xf32>, %f: tensor<4xf32>) -> tensor<?x4x?x64xf32> {
  %o = kiln.attention %q, %k, %v scale_factor(%f : tensor<4xf32>) {scale = 1.0 : f32} : tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32> -> tensor<?x4x?x64xf32>
  return %o : tensor<?x4x?x64xf32>
}

func.func @backward(%q: tensor<?x4x?x64xbf16>, %o: tensor<?x4x?x64xbf16>, %lse: tensor<?x4x?xf32>, %f: tensor<4xf32>) -> (tensor<?x4x?x64xbf16>, tensor<?x4x?x64xbf16>, tensor<?x4x?x64xbf16>) {
  %dq, %dk, %dv = kiln.attention_grad %q, %q, %q, %o, %lse, %o scale_factor(%f : tensor<4xf32>) {causal, scale = 1.0 : f32} : tensor<?x4x?x64xbf16>, tensor<?x4x?x64xbf16>, tensor<?x4x?x64xbf16>, tensor<?x4x?x64xbf16>, tensor<?x4x?xf32>, tensor<?x4x?x64xbf16> -> tensor<?x4x?x64xbf16>, tensor<?x4x?x64xbf16>, tensor<?x4x?x64xbf16>
  return %dq, %dk, %dv : tensor<?x4x?x64xbf16>, tensor<?x4x?x64xbf16>, tensor<?x4x?x64xbf16>
}
