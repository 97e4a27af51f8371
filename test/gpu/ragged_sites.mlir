// Ragged paged-attention sites (packed queries [total_q, Hq, D] with
// q_offsets [B + 1]) for test/gpu/check_ragged.py and bench/bench_serving.py,
// beside the uniform paged sites the benchmark compares them with.
// Build with: kilnc test/gpu/ragged_sites.mlir -o PKG

// Llama-3-8B-shaped: GQA 32/8, head dim 128, pages of 16.
func.func @ragged_bf16_d128_p16_causal(%q: tensor<?x32x128xbf16>, %kc: tensor<?x16x8x128xbf16>, %vc: tensor<?x16x8x128xbf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>, %offs: tensor<?xi32>) -> tensor<?x32x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens q_offsets %offs {causal, scale = 0.0883883461 : f32} : tensor<?x32x128xbf16>, tensor<?x16x8x128xbf16>, tensor<?x16x8x128xbf16>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x32x128xbf16>
  return %o : tensor<?x32x128xbf16>
}

// Llama-3.2-1B-shaped: GQA 32/8, head dim 64, pages of 16.
func.func @ragged_bf16_d64_p16_causal(%q: tensor<?x32x64xbf16>, %kc: tensor<?x16x8x64xbf16>, %vc: tensor<?x16x8x64xbf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>, %offs: tensor<?xi32>) -> tensor<?x32x64xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens q_offsets %offs {causal, scale = 0.125 : f32} : tensor<?x32x64xbf16>, tensor<?x16x8x64xbf16>, tensor<?x16x8x64xbf16>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x32x64xbf16>
  return %o : tensor<?x32x64xbf16>
}

// f16, MQA 8/1, pages of 1, a sliding window.
func.func @ragged_f16_d64_p1_window(%q: tensor<?x8x64xf16>, %kc: tensor<?x1x1x64xf16>, %vc: tensor<?x1x1x64xf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>, %offs: tensor<?xi32>) -> tensor<?x8x64xf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens q_offsets %offs {causal, window = 100 : i64, scale = 0.125 : f32} : tensor<?x8x64xf16>, tensor<?x1x1x64xf16>, tensor<?x1x1x64xf16>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x8x64xf16>
  return %o : tensor<?x8x64xf16>
}

// Non-causal with soft-capping, head dim 256, GQA 8/4, pages of 64.
func.func @ragged_bf16_d256_p64_softcap(%q: tensor<?x8x256xbf16>, %kc: tensor<?x64x4x256xbf16>, %vc: tensor<?x64x4x256xbf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>, %offs: tensor<?xi32>) -> tensor<?x8x256xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens q_offsets %offs {softcap = 30.0 : f32, scale = 0.0625 : f32} : tensor<?x8x256xbf16>, tensor<?x64x4x256xbf16>, tensor<?x64x4x256xbf16>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x8x256xbf16>
  return %o : tensor<?x8x256xbf16>
}

// The uniform sites the benchmark compares with (q [B, Hq, Sq, D]).
func.func @uniform_bf16_d128_p16_causal(%q: tensor<?x32x?x128xbf16>, %kc: tensor<?x16x8x128xbf16>, %vc: tensor<?x16x8x128xbf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) -> tensor<?x32x?x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {causal, scale = 0.0883883461 : f32} : tensor<?x32x?x128xbf16>, tensor<?x16x8x128xbf16>, tensor<?x16x8x128xbf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x32x?x128xbf16>
  return %o : tensor<?x32x?x128xbf16>
}
