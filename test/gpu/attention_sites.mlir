// Attention sites compiled for the GPU checks (test/gpu/check_attention.py):
// every dtype, head dim and causal combination the kernels must cover, with
// batch and sequence lengths dynamic, 8 query heads over 2 KV heads.
// Build with: kilnc test/gpu/attention_sites.mlir -o PKG

func.func @bf16_d64_full(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}

func.func @bf16_d64_causal(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}

func.func @bf16_d128_full(%q: tensor<?x8x?x128xbf16>, %k: tensor<?x2x?x128xbf16>, %v: tensor<?x2x?x128xbf16>) -> tensor<?x8x?x128xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.08838834764831843 : f32} : tensor<?x8x?x128xbf16>, tensor<?x2x?x128xbf16>, tensor<?x2x?x128xbf16> -> tensor<?x8x?x128xbf16>
  return %o : tensor<?x8x?x128xbf16>
}

func.func @bf16_d128_causal(%q: tensor<?x8x?x128xbf16>, %k: tensor<?x2x?x128xbf16>, %v: tensor<?x2x?x128xbf16>) -> tensor<?x8x?x128xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.08838834764831843 : f32} : tensor<?x8x?x128xbf16>, tensor<?x2x?x128xbf16>, tensor<?x2x?x128xbf16> -> tensor<?x8x?x128xbf16>
  return %o : tensor<?x8x?x128xbf16>
}

func.func @f32_d64_full(%q: tensor<?x8x?x64xf32>, %k: tensor<?x2x?x64xf32>, %v: tensor<?x2x?x64xf32>) -> tensor<?x8x?x64xf32> {
  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32> -> tensor<?x8x?x64xf32>
  return %o : tensor<?x8x?x64xf32>
}

func.func @f32_d64_causal(%q: tensor<?x8x?x64xf32>, %k: tensor<?x2x?x64xf32>, %v: tensor<?x2x?x64xf32>) -> tensor<?x8x?x64xf32> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.125 : f32} : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32> -> tensor<?x8x?x64xf32>
  return %o : tensor<?x8x?x64xf32>
}

func.func @f32_d128_full(%q: tensor<?x8x?x128xf32>, %k: tensor<?x2x?x128xf32>, %v: tensor<?x2x?x128xf32>) -> tensor<?x8x?x128xf32> {
  %o = kiln.attention %q, %k, %v {scale = 0.08838834764831843 : f32} : tensor<?x8x?x128xf32>, tensor<?x2x?x128xf32>, tensor<?x2x?x128xf32> -> tensor<?x8x?x128xf32>
  return %o : tensor<?x8x?x128xf32>
}

func.func @f32_d128_causal(%q: tensor<?x8x?x128xf32>, %k: tensor<?x2x?x128xf32>, %v: tensor<?x2x?x128xf32>) -> tensor<?x8x?x128xf32> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.08838834764831843 : f32} : tensor<?x8x?x128xf32>, tensor<?x2x?x128xf32>, tensor<?x2x?x128xf32> -> tensor<?x8x?x128xf32>
  return %o : tensor<?x8x?x128xf32>
}

func.func @f16_d64_full(%q: tensor<?x8x?x64xf16>, %k: tensor<?x2x?x64xf16>, %v: tensor<?x2x?x64xf16>) -> tensor<?x8x?x64xf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<?x8x?x64xf16>, tensor<?x2x?x64xf16>, tensor<?x2x?x64xf16> -> tensor<?x8x?x64xf16>
  return %o : tensor<?x8x?x64xf16>
}

func.func @bf16_d64_additive_mask(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>, %m: tensor<?x1x1x?xf32>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x1x1x?xf32>) {scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}

func.func @bf16_d64_boolean_mask_causal(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>, %m: tensor<?x?x?x?xi1>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x?x?x?xi1>) {causal, scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}

func.func @bf16_d64_bias_softcap(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>, %b: tensor<1x8x?x?xbf16>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v bias(%b : tensor<1x8x?x?xbf16>) {scale = 0.125 : f32, softcap = 30.0 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}

func.func @bf16_d128_window(%q: tensor<?x8x?x128xbf16>, %k: tensor<?x2x?x128xbf16>, %v: tensor<?x2x?x128xbf16>) -> tensor<?x8x?x128xbf16> {
  %o = kiln.attention %q, %k, %v {causal, window = 256 : i64, scale = 0.08838834764831845 : f32} : tensor<?x8x?x128xbf16>, tensor<?x2x?x128xbf16>, tensor<?x2x?x128xbf16> -> tensor<?x8x?x128xbf16>
  return %o : tensor<?x8x?x128xbf16>
}

func.func @bf16_d64_bshd(%q: tensor<?x?x8x64xbf16>, %k: tensor<?x?x2x64xbf16>, %v: tensor<?x?x2x64xbf16>) -> tensor<?x?x8x64xbf16> {
  %o = kiln.attention %q, %k, %v {layout = #kiln.layout<bshd>, scale = 0.125 : f32} : tensor<?x?x8x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16> -> tensor<?x?x8x64xbf16>
  return %o : tensor<?x?x8x64xbf16>
}

func.func @f16_d128_causal(%q: tensor<?x8x?x128xf16>, %k: tensor<?x2x?x128xf16>, %v: tensor<?x2x?x128xf16>) -> tensor<?x8x?x128xf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.08838834764831845 : f32} : tensor<?x8x?x128xf16>, tensor<?x2x?x128xf16>, tensor<?x2x?x128xf16> -> tensor<?x8x?x128xf16>
  return %o : tensor<?x8x?x128xf16>
}

// Head dims only the tensor-core kernel supports (multiples of 16).
func.func @bf16_d96_causal(%q: tensor<?x8x?x96xbf16>, %k: tensor<?x2x?x96xbf16>, %v: tensor<?x2x?x96xbf16>) -> tensor<?x8x?x96xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.10206207261596575 : f32} : tensor<?x8x?x96xbf16>, tensor<?x2x?x96xbf16>, tensor<?x2x?x96xbf16> -> tensor<?x8x?x96xbf16>
  return %o : tensor<?x8x?x96xbf16>
}

func.func @f16_d80_full(%q: tensor<?x8x?x80xf16>, %k: tensor<?x2x?x80xf16>, %v: tensor<?x2x?x80xf16>) -> tensor<?x8x?x80xf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.11180339887498948 : f32} : tensor<?x8x?x80xf16>, tensor<?x2x?x80xf16>, tensor<?x2x?x80xf16> -> tensor<?x8x?x80xf16>
  return %o : tensor<?x8x?x80xf16>
}

// Heads left dynamic: the check tries groups of 1, 3, 4, 5 and 7.
func.func @bf16_d128_causal_any_heads(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.08838834764831845 : f32} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>
  return %o : tensor<?x?x?x128xbf16>
}

// Causal and a padding mask with the graph's finite fill (masked_score):
// rows that see no key average V over every key; no key block is skipped.
func.func @bf16_d128_causal_padding_fill(%q: tensor<?x8x?x128xbf16>, %k: tensor<?x2x?x128xbf16>, %v: tensor<?x2x?x128xbf16>, %m: tensor<?x1x1x?xi1>) -> tensor<?x8x?x128xbf16> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x1x1x?xi1>) {causal, masked_score = -3.40282347E+38 : f32, scale = 0.0883883461 : f32} : tensor<?x8x?x128xbf16>, tensor<?x2x?x128xbf16>, tensor<?x2x?x128xbf16> -> tensor<?x8x?x128xbf16>
  return %o : tensor<?x8x?x128xbf16>
}

func.func @bf16_d64_window_padding_fill(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>, %m: tensor<?x1x1x?xi1>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x1x1x?xi1>) {causal, window = 100 : i64, masked_score = -1.0e+4 : f32, scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}

func.func @f32_d64_causal_padding_fill(%q: tensor<?x8x?x64xf32>, %k: tensor<?x2x?x64xf32>, %v: tensor<?x2x?x64xf32>, %m: tensor<?x1x1x?xi1>) -> tensor<?x8x?x64xf32> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x1x1x?xi1>) {causal, masked_score = -3.40282347E+38 : f32, scale = 0.125 : f32} : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32> -> tensor<?x8x?x64xf32>
  return %o : tensor<?x8x?x64xf32>
}

// Two-sided local windows (window_right): ModernBERT's local layers, plain
// and over a padding mask with the graph's fill.
func.func @bf16_d64_two_sided_window(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {window = 65 : i64, window_right = 64 : i64, scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}

func.func @bf16_d128_two_sided_window_padding_fill(%q: tensor<?x8x?x128xbf16>, %k: tensor<?x2x?x128xbf16>, %v: tensor<?x2x?x128xbf16>, %m: tensor<?x1x1x?xi1>) -> tensor<?x8x?x128xbf16> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x1x1x?xi1>) {window = 129 : i64, window_right = 128 : i64, masked_score = -3.40282347E+38 : f32, scale = 0.0883883461 : f32} : tensor<?x8x?x128xbf16>, tensor<?x2x?x128xbf16>, tensor<?x2x?x128xbf16> -> tensor<?x8x?x128xbf16>
  return %o : tensor<?x8x?x128xbf16>
}

func.func @f32_d64_two_sided_window(%q: tensor<?x8x?x64xf32>, %k: tensor<?x2x?x64xf32>, %v: tensor<?x2x?x64xf32>) -> tensor<?x8x?x64xf32> {
  %o = kiln.attention %q, %k, %v {window = 17 : i64, window_right = 3 : i64, scale = 0.125 : f32} : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32> -> tensor<?x8x?x64xf32>
  return %o : tensor<?x8x?x64xf32>
}

// Multi-head latent attention: the value head dim differs from the
// query/key one (DeepSeek's 192/128; 96/64 with GQA).
func.func @bf16_mla_192_128_causal(%q: tensor<?x8x?x192xbf16>, %k: tensor<?x2x?x192xbf16>, %v: tensor<?x2x?x128xbf16>) -> tensor<?x8x?x128xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.0721687824 : f32} : tensor<?x8x?x192xbf16>, tensor<?x2x?x192xbf16>, tensor<?x2x?x128xbf16> -> tensor<?x8x?x128xbf16>
  return %o : tensor<?x8x?x128xbf16>
}

func.func @f16_mla_96_64(%q: tensor<?x8x?x96xf16>, %k: tensor<?x2x?x96xf16>, %v: tensor<?x2x?x64xf16>) -> tensor<?x8x?x64xf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.102062076 : f32} : tensor<?x8x?x96xf16>, tensor<?x2x?x96xf16>, tensor<?x2x?x64xf16> -> tensor<?x8x?x64xf16>
  return %o : tensor<?x8x?x64xf16>
}

// Head dims that are multiples of 8 but not of 16 (padded inside the
// tensor-core kernel): 40 causal, 72 with GQA and a padding mask, 120.
func.func @bf16_d40_causal(%q: tensor<?x8x?x40xbf16>, %k: tensor<?x2x?x40xbf16>, %v: tensor<?x2x?x40xbf16>) -> tensor<?x8x?x40xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.158113882 : f32} : tensor<?x8x?x40xbf16>, tensor<?x2x?x40xbf16>, tensor<?x2x?x40xbf16> -> tensor<?x8x?x40xbf16>
  return %o : tensor<?x8x?x40xbf16>
}

func.func @f16_d72_boolean_mask(%q: tensor<?x8x?x72xf16>, %k: tensor<?x2x?x72xf16>, %v: tensor<?x2x?x72xf16>, %m: tensor<?x1x1x?xi1>) -> tensor<?x8x?x72xf16> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x1x1x?xi1>) {scale = 0.117851130 : f32} : tensor<?x8x?x72xf16>, tensor<?x2x?x72xf16>, tensor<?x2x?x72xf16> -> tensor<?x8x?x72xf16>
  return %o : tensor<?x8x?x72xf16>
}

func.func @bf16_d120_full(%q: tensor<?x8x?x120xbf16>, %k: tensor<?x2x?x120xbf16>, %v: tensor<?x2x?x120xbf16>) -> tensor<?x8x?x120xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.0912870929 : f32} : tensor<?x8x?x120xbf16>, tensor<?x2x?x120xbf16>, tensor<?x2x?x120xbf16> -> tensor<?x8x?x120xbf16>
  return %o : tensor<?x8x?x120xbf16>
}

func.func @bf16_mla_88_40(%q: tensor<?x4x?x88xbf16>, %k: tensor<?x4x?x88xbf16>, %v: tensor<?x4x?x40xbf16>) -> tensor<?x4x?x40xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.106600358 : f32} : tensor<?x4x?x88xbf16>, tensor<?x4x?x88xbf16>, tensor<?x4x?x40xbf16> -> tensor<?x4x?x40xbf16>
  return %o : tensor<?x4x?x40xbf16>
}

// Head dims past 128 (Q resident in shared memory, one stage of K and V):
// Gemma's 256 causal and with a sliding window, 160 with a padding mask,
// 200 (not a multiple of 16), 136 with GQA, and MLA 256/128.
func.func @bf16_d256_causal(%q: tensor<?x8x?x256xbf16>, %k: tensor<?x2x?x256xbf16>, %v: tensor<?x2x?x256xbf16>) -> tensor<?x8x?x256xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.0625 : f32} : tensor<?x8x?x256xbf16>, tensor<?x2x?x256xbf16>, tensor<?x2x?x256xbf16> -> tensor<?x8x?x256xbf16>
  return %o : tensor<?x8x?x256xbf16>
}

func.func @bf16_d256_full(%q: tensor<?x8x?x256xbf16>, %k: tensor<?x2x?x256xbf16>, %v: tensor<?x2x?x256xbf16>) -> tensor<?x8x?x256xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.0625 : f32} : tensor<?x8x?x256xbf16>, tensor<?x2x?x256xbf16>, tensor<?x2x?x256xbf16> -> tensor<?x8x?x256xbf16>
  return %o : tensor<?x8x?x256xbf16>
}

func.func @f16_d256_window_softcap(%q: tensor<?x8x?x256xf16>, %k: tensor<?x2x?x256xf16>, %v: tensor<?x2x?x256xf16>) -> tensor<?x8x?x256xf16> {
  %o = kiln.attention %q, %k, %v {causal, window = 37 : i64, softcap = 30.0 : f32, scale = 0.0625 : f32} : tensor<?x8x?x256xf16>, tensor<?x2x?x256xf16>, tensor<?x2x?x256xf16> -> tensor<?x8x?x256xf16>
  return %o : tensor<?x8x?x256xf16>
}

func.func @f16_d160_boolean_mask(%q: tensor<?x8x?x160xf16>, %k: tensor<?x2x?x160xf16>, %v: tensor<?x2x?x160xf16>, %m: tensor<?x1x1x?xi1>) -> tensor<?x8x?x160xf16> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x1x1x?xi1>) {scale = 0.0790569415 : f32} : tensor<?x8x?x160xf16>, tensor<?x2x?x160xf16>, tensor<?x2x?x160xf16> -> tensor<?x8x?x160xf16>
  return %o : tensor<?x8x?x160xf16>
}

func.func @bf16_d200_causal(%q: tensor<?x8x?x200xbf16>, %k: tensor<?x2x?x200xbf16>, %v: tensor<?x2x?x200xbf16>) -> tensor<?x8x?x200xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.0707106781 : f32} : tensor<?x8x?x200xbf16>, tensor<?x2x?x200xbf16>, tensor<?x2x?x200xbf16> -> tensor<?x8x?x200xbf16>
  return %o : tensor<?x8x?x200xbf16>
}

func.func @bf16_d136_full(%q: tensor<?x8x?x136xbf16>, %k: tensor<?x2x?x136xbf16>, %v: tensor<?x2x?x136xbf16>) -> tensor<?x8x?x136xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.0857492926 : f32} : tensor<?x8x?x136xbf16>, tensor<?x2x?x136xbf16>, tensor<?x2x?x136xbf16> -> tensor<?x8x?x136xbf16>
  return %o : tensor<?x8x?x136xbf16>
}

func.func @bf16_mla_256_128_causal(%q: tensor<?x8x?x256xbf16>, %k: tensor<?x2x?x256xbf16>, %v: tensor<?x2x?x128xbf16>) -> tensor<?x8x?x128xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.0625 : f32} : tensor<?x8x?x256xbf16>, tensor<?x2x?x256xbf16>, tensor<?x2x?x128xbf16> -> tensor<?x8x?x128xbf16>
  return %o : tensor<?x8x?x128xbf16>
}

// MLA 192/128 without the causal mask (DeepSeek-V2-Lite: 16 heads), and a
// value head dim above the query/key one (V's tiles wider than K's).
func.func @bf16_mla_192_128_full(%q: tensor<?x16x?x192xbf16>, %k: tensor<?x16x?x192xbf16>, %v: tensor<?x16x?x128xbf16>) -> tensor<?x16x?x128xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.0721687824 : f32} : tensor<?x16x?x192xbf16>, tensor<?x16x?x192xbf16>, tensor<?x16x?x128xbf16> -> tensor<?x16x?x128xbf16>
  return %o : tensor<?x16x?x128xbf16>
}

func.func @bf16_qk64_v128_causal(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x128xbf16>) -> tensor<?x8x?x128xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x128xbf16> -> tensor<?x8x?x128xbf16>
  return %o : tensor<?x8x?x128xbf16>
}
