// Paged sites over FP8 (e4m3) caches, for package-fp8.test: scales per KV
// head and per tensor, and a bf16 twin of the first (a float cache).

// Scales per KV head: GQA 32/8, head dim 128, pages of 16.
func.func @fp8_heads(%q: tensor<?x32x1x128xbf16>, %kc: tensor<?x16x8x128xf8E4M3FN>, %vc: tensor<?x16x8x128xf8E4M3FN>, %pt: tensor<?x?xi32>, %l: tensor<?xi32>, %ks: tensor<8xf32>, %vs: tensor<8xf32>) -> tensor<?x32x1x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %l scales(%ks, %vs : tensor<8xf32>, tensor<8xf32>) {causal, scale = 0.125 : f32} : tensor<?x32x1x128xbf16>, tensor<?x16x8x128xf8E4M3FN>, tensor<?x16x8x128xf8E4M3FN>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x32x1x128xbf16>
  return %o : tensor<?x32x1x128xbf16>
}

// Scales per tensor: f16 queries, GQA 8/2, head dim 64, pages of 32.
func.func @fp8_tensor(%q: tensor<?x8x1x64xf16>, %kc: tensor<?x32x2x64xf8E4M3FN>, %vc: tensor<?x32x2x64xf8E4M3FN>, %pt: tensor<?x?xi32>, %l: tensor<?xi32>, %ks: tensor<1xf32>, %vs: tensor<1xf32>) -> tensor<?x8x1x64xf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %l scales(%ks, %vs : tensor<1xf32>, tensor<1xf32>) {causal, scale = 0.125 : f32} : tensor<?x8x1x64xf16>, tensor<?x32x2x64xf8E4M3FN>, tensor<?x32x2x64xf8E4M3FN>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x8x1x64xf16>
  return %o : tensor<?x8x1x64xf16>
}

// The first site over bf16 caches: no scales.
func.func @bf16(%q: tensor<?x32x1x128xbf16>, %kc: tensor<?x16x8x128xbf16>, %vc: tensor<?x16x8x128xbf16>, %pt: tensor<?x?xi32>, %l: tensor<?xi32>) -> tensor<?x32x1x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %l {causal, scale = 0.125 : f32} : tensor<?x32x1x128xbf16>, tensor<?x16x8x128xbf16>, tensor<?x16x8x128xbf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x32x1x128xbf16>
  return %o : tensor<?x32x1x128xbf16>
}
