// Sites compiled for bench/bench_decode.py: paged decode over caches
// [num_pages, page_size, Hkv, 128] (bf16) with pages of 16 and 64 for GQA
// 32/8 and 8/1, and one contiguous site with dynamic heads and lengths.
// Build with: kilnc bench/decode_sites.mlir -o PKG

func.func @paged_h32_8_p16(%q: tensor<?x32x?x128xbf16>, %kc: tensor<?x16x8x128xbf16>, %vc: tensor<?x16x8x128xbf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) -> tensor<?x32x?x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {causal, scale = 0.0883883461 : f32} : tensor<?x32x?x128xbf16>, tensor<?x16x8x128xbf16>, tensor<?x16x8x128xbf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x32x?x128xbf16>
  return %o : tensor<?x32x?x128xbf16>
}

func.func @paged_h32_8_p64(%q: tensor<?x32x?x128xbf16>, %kc: tensor<?x64x8x128xbf16>, %vc: tensor<?x64x8x128xbf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) -> tensor<?x32x?x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {causal, scale = 0.0883883461 : f32} : tensor<?x32x?x128xbf16>, tensor<?x64x8x128xbf16>, tensor<?x64x8x128xbf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x32x?x128xbf16>
  return %o : tensor<?x32x?x128xbf16>
}

func.func @paged_h8_1_p16(%q: tensor<?x8x?x128xbf16>, %kc: tensor<?x16x1x128xbf16>, %vc: tensor<?x16x1x128xbf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) -> tensor<?x8x?x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {causal, scale = 0.0883883461 : f32} : tensor<?x8x?x128xbf16>, tensor<?x16x1x128xbf16>, tensor<?x16x1x128xbf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x8x?x128xbf16>
  return %o : tensor<?x8x?x128xbf16>
}

func.func @paged_h8_1_p64(%q: tensor<?x8x?x128xbf16>, %kc: tensor<?x64x1x128xbf16>, %vc: tensor<?x64x1x128xbf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) -> tensor<?x8x?x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {causal, scale = 0.0883883461 : f32} : tensor<?x8x?x128xbf16>, tensor<?x64x1x128xbf16>, tensor<?x64x1x128xbf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x8x?x128xbf16>
  return %o : tensor<?x8x?x128xbf16>
}

func.func @contiguous(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.0883883461 : f32} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>
  return %o : tensor<?x?x?x128xbf16>
}
