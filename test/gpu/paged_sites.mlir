// Paged-attention sites compiled for test/gpu/check_paged.py: caches
// [num_pages, page_size, Hkv, D], pages of 1, 16, 64 and 256 keys.
// Build with: kilnc test/gpu/paged_sites.mlir -o PKG

func.func @bf16_d128_p16_causal(%q: tensor<?x32x?x128xbf16>, %kc: tensor<?x16x8x128xbf16>, %vc: tensor<?x16x8x128xbf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) -> tensor<?x32x?x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {causal, scale = 0.0883883461 : f32} : tensor<?x32x?x128xbf16>, tensor<?x16x8x128xbf16>, tensor<?x16x8x128xbf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x32x?x128xbf16>
  return %o : tensor<?x32x?x128xbf16>
}

func.func @bf16_d128_p64_causal(%q: tensor<?x32x?x128xbf16>, %kc: tensor<?x64x8x128xbf16>, %vc: tensor<?x64x8x128xbf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) -> tensor<?x32x?x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {causal, scale = 0.0883883461 : f32} : tensor<?x32x?x128xbf16>, tensor<?x64x8x128xbf16>, tensor<?x64x8x128xbf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x32x?x128xbf16>
  return %o : tensor<?x32x?x128xbf16>
}

func.func @f16_d64_p1_causal_window(%q: tensor<?x8x?x64xf16>, %kc: tensor<?x1x1x64xf16>, %vc: tensor<?x1x1x64xf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) -> tensor<?x8x?x64xf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {causal, window = 100 : i64, scale = 0.125 : f32} : tensor<?x8x?x64xf16>, tensor<?x1x1x64xf16>, tensor<?x1x1x64xf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x8x?x64xf16>
  return %o : tensor<?x8x?x64xf16>
}

func.func @bf16_d128_p256_softcap(%q: tensor<?x8x?x128xbf16>, %kc: tensor<?x256x1x128xbf16>, %vc: tensor<?x256x1x128xbf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) -> tensor<?x8x?x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {softcap = 30.0 : f32, scale = 0.0883883461 : f32} : tensor<?x8x?x128xbf16>, tensor<?x256x1x128xbf16>, tensor<?x256x1x128xbf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x8x?x128xbf16>
  return %o : tensor<?x8x?x128xbf16>
}

// Head dim 256 (Gemma), pages of 16, GQA 8/4.
func.func @bf16_d256_p16_causal(%q: tensor<?x8x?x256xbf16>, %kc: tensor<?x16x4x256xbf16>, %vc: tensor<?x16x4x256xbf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) -> tensor<?x8x?x256xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {causal, scale = 0.0625 : f32} : tensor<?x8x?x256xbf16>, tensor<?x16x4x256xbf16>, tensor<?x16x4x256xbf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x8x?x256xbf16>
  return %o : tensor<?x8x?x256xbf16>
}
