// Sites whose kernels read an additive term or a mask from memory, for
// bench/bench_terms.py: 16 heads, bf16, head dims 64 and 128; no term (the
// floor), a dense [B, H, q, k] bias, T5's [1, H, q, k] bias, a [B, 1, 1, k]
// key-padding mask, both, a [B, 1, q, k] f32 additive mask and a [B, 1, q, k]
// boolean mask.

func.func @d64_none(%q: tensor<?x16x?x64xbf16>, %k: tensor<?x16x?x64xbf16>, %v: tensor<?x16x?x64xbf16>) -> tensor<?x16x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.125000000 : f32} : tensor<?x16x?x64xbf16>, tensor<?x16x?x64xbf16>, tensor<?x16x?x64xbf16> -> tensor<?x16x?x64xbf16>
  return %o : tensor<?x16x?x64xbf16>
}

func.func @d64_bias_dense(%q: tensor<?x16x?x64xbf16>, %k: tensor<?x16x?x64xbf16>, %v: tensor<?x16x?x64xbf16>, %b: tensor<?x16x?x?xbf16>) -> tensor<?x16x?x64xbf16> {
  %o = kiln.attention %q, %k, %v bias(%b : tensor<?x16x?x?xbf16>) {scale = 0.125000000 : f32} : tensor<?x16x?x64xbf16>, tensor<?x16x?x64xbf16>, tensor<?x16x?x64xbf16> -> tensor<?x16x?x64xbf16>
  return %o : tensor<?x16x?x64xbf16>
}

func.func @d64_bias_heads(%q: tensor<?x16x?x64xbf16>, %k: tensor<?x16x?x64xbf16>, %v: tensor<?x16x?x64xbf16>, %b: tensor<1x16x?x?xbf16>) -> tensor<?x16x?x64xbf16> {
  %o = kiln.attention %q, %k, %v bias(%b : tensor<1x16x?x?xbf16>) {scale = 0.125000000 : f32} : tensor<?x16x?x64xbf16>, tensor<?x16x?x64xbf16>, tensor<?x16x?x64xbf16> -> tensor<?x16x?x64xbf16>
  return %o : tensor<?x16x?x64xbf16>
}

func.func @d64_key_mask(%q: tensor<?x16x?x64xbf16>, %k: tensor<?x16x?x64xbf16>, %v: tensor<?x16x?x64xbf16>, %m: tensor<?x1x1x?xi1>) -> tensor<?x16x?x64xbf16> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x1x1x?xi1>) {scale = 0.125000000 : f32} : tensor<?x16x?x64xbf16>, tensor<?x16x?x64xbf16>, tensor<?x16x?x64xbf16> -> tensor<?x16x?x64xbf16>
  return %o : tensor<?x16x?x64xbf16>
}

func.func @d64_bias_heads_key_mask(%q: tensor<?x16x?x64xbf16>, %k: tensor<?x16x?x64xbf16>, %v: tensor<?x16x?x64xbf16>, %m: tensor<?x1x1x?xi1>, %b: tensor<1x16x?x?xbf16>) -> tensor<?x16x?x64xbf16> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x1x1x?xi1>) bias(%b : tensor<1x16x?x?xbf16>) {masked_score = -3.40282347E+38 : f32, scale = 0.125000000 : f32} : tensor<?x16x?x64xbf16>, tensor<?x16x?x64xbf16>, tensor<?x16x?x64xbf16> -> tensor<?x16x?x64xbf16>
  return %o : tensor<?x16x?x64xbf16>
}

func.func @d64_mask_rows_f32(%q: tensor<?x16x?x64xbf16>, %k: tensor<?x16x?x64xbf16>, %v: tensor<?x16x?x64xbf16>, %m: tensor<?x1x?x?xf32>) -> tensor<?x16x?x64xbf16> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x1x?x?xf32>) {scale = 0.125000000 : f32} : tensor<?x16x?x64xbf16>, tensor<?x16x?x64xbf16>, tensor<?x16x?x64xbf16> -> tensor<?x16x?x64xbf16>
  return %o : tensor<?x16x?x64xbf16>
}

func.func @d64_bool_mask_dense(%q: tensor<?x16x?x64xbf16>, %k: tensor<?x16x?x64xbf16>, %v: tensor<?x16x?x64xbf16>, %m: tensor<?x1x?x?xi1>) -> tensor<?x16x?x64xbf16> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x1x?x?xi1>) {scale = 0.125000000 : f32} : tensor<?x16x?x64xbf16>, tensor<?x16x?x64xbf16>, tensor<?x16x?x64xbf16> -> tensor<?x16x?x64xbf16>
  return %o : tensor<?x16x?x64xbf16>
}

func.func @d128_none(%q: tensor<?x16x?x128xbf16>, %k: tensor<?x16x?x128xbf16>, %v: tensor<?x16x?x128xbf16>) -> tensor<?x16x?x128xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.088388348 : f32} : tensor<?x16x?x128xbf16>, tensor<?x16x?x128xbf16>, tensor<?x16x?x128xbf16> -> tensor<?x16x?x128xbf16>
  return %o : tensor<?x16x?x128xbf16>
}

func.func @d128_bias_dense(%q: tensor<?x16x?x128xbf16>, %k: tensor<?x16x?x128xbf16>, %v: tensor<?x16x?x128xbf16>, %b: tensor<?x16x?x?xbf16>) -> tensor<?x16x?x128xbf16> {
  %o = kiln.attention %q, %k, %v bias(%b : tensor<?x16x?x?xbf16>) {scale = 0.088388348 : f32} : tensor<?x16x?x128xbf16>, tensor<?x16x?x128xbf16>, tensor<?x16x?x128xbf16> -> tensor<?x16x?x128xbf16>
  return %o : tensor<?x16x?x128xbf16>
}

func.func @d128_bias_heads(%q: tensor<?x16x?x128xbf16>, %k: tensor<?x16x?x128xbf16>, %v: tensor<?x16x?x128xbf16>, %b: tensor<1x16x?x?xbf16>) -> tensor<?x16x?x128xbf16> {
  %o = kiln.attention %q, %k, %v bias(%b : tensor<1x16x?x?xbf16>) {scale = 0.088388348 : f32} : tensor<?x16x?x128xbf16>, tensor<?x16x?x128xbf16>, tensor<?x16x?x128xbf16> -> tensor<?x16x?x128xbf16>
  return %o : tensor<?x16x?x128xbf16>
}

func.func @d128_key_mask(%q: tensor<?x16x?x128xbf16>, %k: tensor<?x16x?x128xbf16>, %v: tensor<?x16x?x128xbf16>, %m: tensor<?x1x1x?xi1>) -> tensor<?x16x?x128xbf16> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x1x1x?xi1>) {scale = 0.088388348 : f32} : tensor<?x16x?x128xbf16>, tensor<?x16x?x128xbf16>, tensor<?x16x?x128xbf16> -> tensor<?x16x?x128xbf16>
  return %o : tensor<?x16x?x128xbf16>
}

func.func @d128_bias_heads_key_mask(%q: tensor<?x16x?x128xbf16>, %k: tensor<?x16x?x128xbf16>, %v: tensor<?x16x?x128xbf16>, %m: tensor<?x1x1x?xi1>, %b: tensor<1x16x?x?xbf16>) -> tensor<?x16x?x128xbf16> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x1x1x?xi1>) bias(%b : tensor<1x16x?x?xbf16>) {masked_score = -3.40282347E+38 : f32, scale = 0.088388348 : f32} : tensor<?x16x?x128xbf16>, tensor<?x16x?x128xbf16>, tensor<?x16x?x128xbf16> -> tensor<?x16x?x128xbf16>
  return %o : tensor<?x16x?x128xbf16>
}

func.func @d128_mask_rows_f32(%q: tensor<?x16x?x128xbf16>, %k: tensor<?x16x?x128xbf16>, %v: tensor<?x16x?x128xbf16>, %m: tensor<?x1x?x?xf32>) -> tensor<?x16x?x128xbf16> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x1x?x?xf32>) {scale = 0.088388348 : f32} : tensor<?x16x?x128xbf16>, tensor<?x16x?x128xbf16>, tensor<?x16x?x128xbf16> -> tensor<?x16x?x128xbf16>
  return %o : tensor<?x16x?x128xbf16>
}

func.func @d128_bool_mask_dense(%q: tensor<?x16x?x128xbf16>, %k: tensor<?x16x?x128xbf16>, %v: tensor<?x16x?x128xbf16>, %m: tensor<?x1x?x?xi1>) -> tensor<?x16x?x128xbf16> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x1x?x?xi1>) {scale = 0.088388348 : f32} : tensor<?x16x?x128xbf16>, tensor<?x16x?x128xbf16>, tensor<?x16x?x128xbf16> -> tensor<?x16x?x128xbf16>
  return %o : tensor<?x16x?x128xbf16>
}
