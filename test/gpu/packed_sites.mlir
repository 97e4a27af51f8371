// Sites of packed sequences (kiln.attention's varlen form: q [total_q, Hq,
// D], k and v [total_kv, Hkv, D] with q_offsets and kv_offsets [B + 1]) for
// test/gpu/check_packed.py and test/tools/kilnc/package-packed.test.
// Build with: kilnc test/gpu/packed_sites.mlir -o PKG

// Llama-3-8B-shaped prompts: GQA 32/8, head dim 128, causal.
func.func @packed_bf16_d128_causal(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>, %v: tensor<?x8x128xbf16>, %qo: tensor<?xi32>, %ko: tensor<?xi32>) -> tensor<?x32x128xbf16> {
  %o = kiln.attention %q, %k, %v offsets(%qo, %ko : tensor<?xi32>, tensor<?xi32>) {causal, scale = 0.0883883461 : f32} : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
  return %o : tensor<?x32x128xbf16>
}

// A BERT-shaped encoder served without padding: MHA 12/12, head dim 64,
// not causal, f16.
func.func @packed_f16_d64_encoder(%q: tensor<?x12x64xf16>, %k: tensor<?x12x64xf16>, %v: tensor<?x12x64xf16>, %qo: tensor<?xi32>, %ko: tensor<?xi32>) -> tensor<?x12x64xf16> {
  %o = kiln.attention %q, %k, %v offsets(%qo, %ko : tensor<?xi32>, tensor<?xi32>) {scale = 0.125 : f32} : tensor<?x12x64xf16>, tensor<?x12x64xf16>, tensor<?x12x64xf16> -> tensor<?x12x64xf16>
  return %o : tensor<?x12x64xf16>
}

// A two-sided window with soft-capping, MQA 8/1, head dim 96 (padded to
// the tensor cores' 16), bf16.
func.func @packed_bf16_d96_window(%q: tensor<?x8x96xbf16>, %k: tensor<?x1x96xbf16>, %v: tensor<?x1x96xbf16>, %qo: tensor<?xi32>, %ko: tensor<?xi32>) -> tensor<?x8x96xbf16> {
  %o = kiln.attention %q, %k, %v offsets(%qo, %ko : tensor<?xi32>, tensor<?xi32>) {window = 40 : i64, window_right = 8 : i64, softcap = 30.0 : f32, scale = 0.102062076 : f32} : tensor<?x8x96xbf16>, tensor<?x1x96xbf16>, tensor<?x1x96xbf16> -> tensor<?x8x96xbf16>
  return %o : tensor<?x8x96xbf16>
}

// MLA-shaped: query/key head dim 192, value head dim 128, 16 heads, causal.
func.func @packed_bf16_mla_causal(%q: tensor<?x16x192xbf16>, %k: tensor<?x16x192xbf16>, %v: tensor<?x16x128xbf16>, %qo: tensor<?xi32>, %ko: tensor<?xi32>) -> tensor<?x16x128xbf16> {
  %o = kiln.attention %q, %k, %v offsets(%qo, %ko : tensor<?xi32>, tensor<?xi32>) {causal, scale = 0.0721687824 : f32} : tensor<?x16x192xbf16>, tensor<?x16x192xbf16>, tensor<?x16x128xbf16> -> tensor<?x16x128xbf16>
  return %o : tensor<?x16x128xbf16>
}

// Gemma-shaped: head dim 256, GQA 8/4, causal, f16.
func.func @packed_f16_d256_causal(%q: tensor<?x8x256xf16>, %k: tensor<?x4x256xf16>, %v: tensor<?x4x256xf16>, %qo: tensor<?xi32>, %ko: tensor<?xi32>) -> tensor<?x8x256xf16> {
  %o = kiln.attention %q, %k, %v offsets(%qo, %ko : tensor<?xi32>, tensor<?xi32>) {causal, scale = 0.0625 : f32} : tensor<?x8x256xf16>, tensor<?x4x256xf16>, tensor<?x4x256xf16> -> tensor<?x8x256xf16>
  return %o : tensor<?x8x256xf16>
}
