// kiln.attention's log-sum-exp and kiln.attention_grad on the CPU: for
// every site below, kiln-cpu-runner --check-grad runs the forward (with its
// lse) and the backward on seeded random inputs and compares out and lse
// with a float64 forward, and each gradient with float64 central finite
// differences along random directions. The forward is lowered tiled (one
// split and three, so the split log-sum-exps are combined) and decomposed.
// RUN: kiln-cpu-runner %s --check-grad | FileCheck %s
// RUN: kiln-cpu-runner %s --check-grad --kv-block-size=2 --q-block-size=3 --num-splits=3 --seed=7 | FileCheck %s
// RUN: kiln-cpu-runner %s --check-grad --attention-lowering=decomposed --seed=3 | FileCheck %s

// CHECK-NOT: FAILED
// CHECK: gradient check: [[N:[0-9]+]] of [[N]] sites passed

// Causal, GQA (4 query heads over 2 KV heads), f32.
func.func @causal_gqa(%q: tensor<2x4x12x8xf32>, %k: tensor<2x2x12x8xf32>, %v: tensor<2x2x12x8xf32>) -> tensor<2x4x12x8xf32> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.35 : f32} : tensor<2x4x12x8xf32>, tensor<2x2x12x8xf32>, tensor<2x2x12x8xf32> -> tensor<2x4x12x8xf32>
  return %o : tensor<2x4x12x8xf32>
}

// A two-sided local window (3 keys back, 2 ahead) over a chunk that follows
// cached keys, f32.
func.func @window_both_sides(%q: tensor<1x2x10x8xf32>, %k: tensor<1x2x14x8xf32>, %v: tensor<1x2x14x8xf32>) -> tensor<1x2x10x8xf32> {
  %o = kiln.attention %q, %k, %v {window = 3 : i64, window_right = 2 : i64, scale = 0.35 : f32} : tensor<1x2x10x8xf32>, tensor<1x2x14x8xf32>, tensor<1x2x14x8xf32> -> tensor<1x2x10x8xf32>
  return %o : tensor<1x2x10x8xf32>
}

// Soft-capped (a small cap, so tanh bends) under a causal sliding window,
// f16.
func.func @softcap_window(%q: tensor<1x2x12x16xf16>, %k: tensor<1x2x12x16xf16>, %v: tensor<1x2x12x16xf16>) -> tensor<1x2x12x16xf16> {
  %o = kiln.attention %q, %k, %v {causal, window = 5 : i64, softcap = 2.0 : f32, scale = 0.5 : f32} : tensor<1x2x12x16xf16>, tensor<1x2x12x16xf16>, tensor<1x2x12x16xf16> -> tensor<1x2x12x16xf16>
  return %o : tensor<1x2x12x16xf16>
}

// A boolean mask per batch and query row, bf16.
func.func @boolean_mask(%q: tensor<2x2x8x16xbf16>, %k: tensor<2x2x10x16xbf16>, %v: tensor<2x2x10x16xbf16>, %m: tensor<2x1x8x10xi1>) -> tensor<2x2x8x16xbf16> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<2x1x8x10xi1>) {scale = 0.25 : f32} : tensor<2x2x8x16xbf16>, tensor<2x2x10x16xbf16>, tensor<2x2x10x16xbf16> -> tensor<2x2x8x16xbf16>
  return %o : tensor<2x2x8x16xbf16>
}

// An additive mask and a bias broadcast over the batch (rank 3), whose
// gradient is summed over it, f32.
func.func @additive_mask_bias(%q: tensor<2x3x8x8xf32>, %k: tensor<2x3x9x8xf32>, %v: tensor<2x3x9x8xf32>, %m: tensor<2x1x1x9xf32>, %b: tensor<3x8x9xf32>) -> tensor<2x3x8x8xf32> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<2x1x1x9xf32>) bias(%b : tensor<3x8x9xf32>) {scale = 0.35 : f32} : tensor<2x3x8x8xf32>, tensor<2x3x9x8xf32>, tensor<2x3x9x8xf32> -> tensor<2x3x8x8xf32>
  return %o : tensor<2x3x8x8xf32>
}

// A bias broadcast over the batch and the heads (size-1 axes), causal,
// bf16.
func.func @bias_broadcast_heads(%q: tensor<2x4x8x16xbf16>, %k: tensor<2x2x8x16xbf16>, %v: tensor<2x2x8x16xbf16>, %b: tensor<1x1x8x8xbf16>) -> tensor<2x4x8x16xbf16> {
  %o = kiln.attention %q, %k, %v bias(%b : tensor<1x1x8x8xbf16>) {causal, scale = 0.25 : f32} : tensor<2x4x8x16xbf16>, tensor<2x2x8x16xbf16>, tensor<2x2x8x16xbf16> -> tensor<2x4x8x16xbf16>
  return %o : tensor<2x4x8x16xbf16>
}

// MQA (one KV head for four query heads) in the bshd layout, with a
// run-time scale factor, f32.
func.func @mqa_bshd(%q: tensor<2x9x4x8xf32>, %k: tensor<2x11x1x8xf32>, %v: tensor<2x11x1x8xf32>, %f: tensor<1xf32>) -> tensor<2x9x4x8xf32> {
  %o = kiln.attention %q, %k, %v scale_factor(%f : tensor<1xf32>) {causal, layout = #kiln.layout<bshd>, scale = 0.35 : f32} : tensor<2x9x4x8xf32>, tensor<2x11x1x8xf32>, tensor<2x11x1x8xf32> -> tensor<2x9x4x8xf32>
  return %o : tensor<2x9x4x8xf32>
}

// MLA: a value head dim (6) other than the query's (12), GQA, f16.
func.func @mla(%q: tensor<1x4x8x12xf16>, %k: tensor<1x2x8x12xf16>, %v: tensor<1x2x8x6xf16>) -> tensor<1x4x8x6xf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.3 : f32} : tensor<1x4x8x12xf16>, tensor<1x2x8x12xf16>, tensor<1x2x8x6xf16> -> tensor<1x4x8x6xf16>
  return %o : tensor<1x4x8x6xf16>
}

// Packed sequences (random offsets, possibly empty sequences), causal, GQA,
// f32; the lse is [Hq, total_q].
func.func @packed(%q: tensor<20x4x8xf32>, %k: tensor<26x2x8xf32>, %v: tensor<26x2x8xf32>, %qo: tensor<4xi32>, %ko: tensor<4xi32>) -> tensor<20x4x8xf32> {
  %o = kiln.attention %q, %k, %v offsets(%qo, %ko : tensor<4xi32>, tensor<4xi32>) {causal, scale = 0.35 : f32} : tensor<20x4x8xf32>, tensor<26x2x8xf32>, tensor<26x2x8xf32> -> tensor<20x4x8xf32>
  return %o : tensor<20x4x8xf32>
}

// Packed sequences with fixed offsets (an empty one, rows past the last
// offset), soft-capped, bf16.
func.func @packed_fixed(%q: tensor<14x2x8xbf16>, %k: tensor<14x2x8xbf16>, %v: tensor<14x2x8xbf16>) -> tensor<14x2x8xbf16> {
  %qo = arith.constant dense<[0, 5, 5, 12]> : tensor<4xi32>
  %ko = arith.constant dense<[0, 6, 6, 14]> : tensor<4xi32>
  %o = kiln.attention %q, %k, %v offsets(%qo, %ko : tensor<4xi32>, tensor<4xi32>) {softcap = 3.0 : f32, scale = 0.35 : f32} : tensor<14x2x8xbf16>, tensor<14x2x8xbf16>, tensor<14x2x8xbf16> -> tensor<14x2x8xbf16>
  return %o : tensor<14x2x8xbf16>
}

// masked_score with fully hidden rows: causal with more queries (8) than
// keys (5), so rows 0-2 see no key and average V uniformly; V gets their
// gradient, Q and K none through them, f32.
func.func @masked_score_hidden_rows(%q: tensor<1x2x8x8xf32>, %k: tensor<1x2x5x8xf32>, %v: tensor<1x2x5x8xf32>) -> tensor<1x2x8x8xf32> {
  %o = kiln.attention %q, %k, %v {causal, masked_score = -1.0e4 : f32, scale = 0.35 : f32} : tensor<1x2x8x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32> -> tensor<1x2x8x8xf32>
  return %o : tensor<1x2x8x8xf32>
}

// masked_score = finfo.min with a boolean mask that hides row 1 entirely
// (and some keys of the others), with a bias whose gradient is wanted, bf16.
func.func @masked_score_finfo_min(%q: tensor<1x2x4x8xbf16>, %k: tensor<1x2x6x8xbf16>, %v: tensor<1x2x6x8xbf16>, %b: tensor<1x2x4x6xbf16>) -> tensor<1x2x4x8xbf16> {
  %m = arith.constant dense<[[[[true, false, true, true, false, true], [false, false, false, false, false, false], [true, true, true, true, true, true], [false, true, false, false, false, true]]]]> : tensor<1x1x4x6xi1>
  %o = kiln.attention %q, %k, %v mask(%m : tensor<1x1x4x6xi1>) bias(%b : tensor<1x2x4x6xbf16>) {masked_score = -3.40282347E+38 : f32, scale = 0.35 : f32} : tensor<1x2x4x8xbf16>, tensor<1x2x6x8xbf16>, tensor<1x2x6x8xbf16> -> tensor<1x2x4x8xbf16>
  return %o : tensor<1x2x4x8xbf16>
}

// The same hidden rows without masked_score: zeros, lse -inf, no gradient
// through them, f16.
func.func @hidden_rows(%q: tensor<1x2x8x8xf16>, %k: tensor<1x2x5x8xf16>, %v: tensor<1x2x5x8xf16>) -> tensor<1x2x8x8xf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.35 : f32} : tensor<1x2x8x8xf16>, tensor<1x2x5x8xf16>, tensor<1x2x5x8xf16> -> tensor<1x2x8x8xf16>
  return %o : tensor<1x2x8x8xf16>
}
