// Sites whose manifest entries carry the keys examples/gqa_causal.mlir's do
// not: a boolean mask with a finite fill, a bias, a two-sided window, and an
// f32 site on TF32 tensor cores (its kernel's `math`).
func.func @bf16_d64_mask_bias_window(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>, %m: tensor<?x1x1x?xi1>, %b: tensor<1x8x?x?xbf16>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x1x1x?xi1>) bias(%b : tensor<1x8x?x?xbf16>) {window = 65 : i64, window_right = 64 : i64, masked_score = -1.0e+4 : f32, scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}

func.func @f32_d64_causal(%q: tensor<?x8x?x64xf32>, %k: tensor<?x2x?x64xf32>, %v: tensor<?x2x?x64xf32>) -> tensor<?x8x?x64xf32> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.125 : f32} : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32> -> tensor<?x8x?x64xf32>
  return %o : tensor<?x8x?x64xf32>
}
