// Sites compiled for bench/bench_decode_fp8.py: paged decode (GQA 32/8 and
// 8/1, head dim 128, pages of 16) over bf16 caches and over e4m3 caches
// with per-KV-head scales. Build with: kilnc bench/decode_fp8_sites.mlir -o PKG

func.func @bf16_h32_8(%q: tensor<?x32x?x128xbf16>, %kc: tensor<?x16x8x128xbf16>, %vc: tensor<?x16x8x128xbf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) -> tensor<?x32x?x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {causal, scale = 0.0883883461 : f32} : tensor<?x32x?x128xbf16>, tensor<?x16x8x128xbf16>, tensor<?x16x8x128xbf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x32x?x128xbf16>
  return %o : tensor<?x32x?x128xbf16>
}

func.func @fp8_h32_8(%q: tensor<?x32x?x128xbf16>, %kc: tensor<?x16x8x128xf8E4M3FN>, %vc: tensor<?x16x8x128xf8E4M3FN>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>, %ks: tensor<8xf32>, %vs: tensor<8xf32>) -> tensor<?x32x?x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens scales(%ks, %vs : tensor<8xf32>, tensor<8xf32>) {causal, scale = 0.0883883461 : f32} : tensor<?x32x?x128xbf16>, tensor<?x16x8x128xf8E4M3FN>, tensor<?x16x8x128xf8E4M3FN>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x32x?x128xbf16>
  return %o : tensor<?x32x?x128xbf16>
}

func.func @bf16_h8_1(%q: tensor<?x8x?x128xbf16>, %kc: tensor<?x16x1x128xbf16>, %vc: tensor<?x16x1x128xbf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) -> tensor<?x8x?x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {causal, scale = 0.0883883461 : f32} : tensor<?x8x?x128xbf16>, tensor<?x16x1x128xbf16>, tensor<?x16x1x128xbf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x8x?x128xbf16>
  return %o : tensor<?x8x?x128xbf16>
}

func.func @fp8_h8_1(%q: tensor<?x8x?x128xbf16>, %kc: tensor<?x16x1x128xf8E4M3FN>, %vc: tensor<?x16x1x128xf8E4M3FN>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>, %ks: tensor<1xf32>, %vs: tensor<1xf32>) -> tensor<?x8x?x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens scales(%ks, %vs : tensor<1xf32>, tensor<1xf32>) {causal, scale = 0.0883883461 : f32} : tensor<?x8x?x128xbf16>, tensor<?x16x1x128xf8E4M3FN>, tensor<?x16x1x128xf8E4M3FN>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x8x?x128xbf16>
  return %o : tensor<?x8x?x128xbf16>
}
