// FP8 (e4m3) paged sites for test/gpu/check_fp8.py, with bf16 twins of
// the first two (the same shapes over bf16 caches) for the accuracy
// comparison. Build with: kilnc test/gpu/fp8_sites.mlir -o PKG

func.func @fp8_bf16_d128_heads(%q: tensor<?x32x?x128xbf16>, %kc: tensor<?x16x8x128xf8E4M3FN>, %vc: tensor<?x16x8x128xf8E4M3FN>, %pt: tensor<?x?xi32>, %l: tensor<?xi32>, %ks: tensor<8xf32>, %vs: tensor<8xf32>) -> tensor<?x32x?x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %l scales(%ks, %vs : tensor<8xf32>, tensor<8xf32>) {causal, scale = 0.125 : f32} : tensor<?x32x?x128xbf16>, tensor<?x16x8x128xf8E4M3FN>, tensor<?x16x8x128xf8E4M3FN>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x32x?x128xbf16>
  return %o : tensor<?x32x?x128xbf16>
}

func.func @bf16_d128(%q: tensor<?x32x?x128xbf16>, %kc: tensor<?x16x8x128xbf16>, %vc: tensor<?x16x8x128xbf16>, %pt: tensor<?x?xi32>, %l: tensor<?xi32>) -> tensor<?x32x?x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %l {causal, scale = 0.125 : f32} : tensor<?x32x?x128xbf16>, tensor<?x16x8x128xbf16>, tensor<?x16x8x128xbf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x32x?x128xbf16>
  return %o : tensor<?x32x?x128xbf16>
}

func.func @fp8_f16_d64_tensor_window_cap(%q: tensor<?x8x?x64xf16>, %kc: tensor<?x32x2x64xf8E4M3FN>, %vc: tensor<?x32x2x64xf8E4M3FN>, %pt: tensor<?x?xi32>, %l: tensor<?xi32>, %ks: tensor<1xf32>, %vs: tensor<1xf32>) -> tensor<?x8x?x64xf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %l scales(%ks, %vs : tensor<1xf32>, tensor<1xf32>) {causal, scale = 0.125 : f32, softcap = 30.0 : f32, window = 100 : i64} : tensor<?x8x?x64xf16>, tensor<?x32x2x64xf8E4M3FN>, tensor<?x32x2x64xf8E4M3FN>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x8x?x64xf16>
  return %o : tensor<?x8x?x64xf16>
}

func.func @fp8_bf16_d256_tensor(%q: tensor<?x16x?x256xbf16>, %kc: tensor<?x16x4x256xf8E4M3FN>, %vc: tensor<?x16x4x256xf8E4M3FN>, %pt: tensor<?x?xi32>, %l: tensor<?xi32>, %ks: tensor<1xf32>, %vs: tensor<1xf32>) -> tensor<?x16x?x256xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %l scales(%ks, %vs : tensor<1xf32>, tensor<1xf32>) {causal, scale = 0.125 : f32} : tensor<?x16x?x256xbf16>, tensor<?x16x4x256xf8E4M3FN>, tensor<?x16x4x256xf8E4M3FN>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x16x?x256xbf16>
  return %o : tensor<?x16x?x256xbf16>
}

func.func @fp8_f16_d80_heads(%q: tensor<?x8x?x80xf16>, %kc: tensor<?x16x8x80xf8E4M3FN>, %vc: tensor<?x16x8x80xf8E4M3FN>, %pt: tensor<?x?xi32>, %l: tensor<?xi32>, %ks: tensor<8xf32>, %vs: tensor<8xf32>) -> tensor<?x8x?x80xf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %l scales(%ks, %vs : tensor<8xf32>, tensor<8xf32>) {causal, scale = 0.125 : f32} : tensor<?x8x?x80xf16>, tensor<?x16x8x80xf8E4M3FN>, tensor<?x16x8x80xf8E4M3FN>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x8x?x80xf16>
  return %o : tensor<?x8x?x80xf16>
}

func.func @fp8_bf16_d128_heads_ragged(%q: tensor<?x32x128xbf16>, %kc: tensor<?x16x8x128xf8E4M3FN>, %vc: tensor<?x16x8x128xf8E4M3FN>, %pt: tensor<?x?xi32>, %l: tensor<?xi32>, %offs: tensor<?xi32>, %ks: tensor<8xf32>, %vs: tensor<8xf32>) -> tensor<?x32x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %l q_offsets %offs scales(%ks, %vs : tensor<8xf32>, tensor<8xf32>) {causal, scale = 0.125 : f32} : tensor<?x32x128xbf16>, tensor<?x16x8x128xf8E4M3FN>, tensor<?x16x8x128xf8E4M3FN>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x32x128xbf16>
  return %o : tensor<?x32x128xbf16>
}

func.func @fp8_bf16_mla_192_128_heads(%q: tensor<?x16x?x192xbf16>, %kc: tensor<?x64x1x192xf8E4M3FN>, %vc: tensor<?x64x1x128xf8E4M3FN>, %pt: tensor<?x?xi32>, %l: tensor<?xi32>, %ks: tensor<1xf32>, %vs: tensor<1xf32>) -> tensor<?x16x?x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %l scales(%ks, %vs : tensor<1xf32>, tensor<1xf32>) {causal, scale = 0.125 : f32} : tensor<?x16x?x192xbf16>, tensor<?x64x1x192xf8E4M3FN>, tensor<?x64x1x128xf8E4M3FN>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x16x?x128xbf16>
  return %o : tensor<?x16x?x128xbf16>
}
