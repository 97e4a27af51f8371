// RUN: kiln-opt %s | FileCheck %s
// RUN: kiln-opt %s --mlir-print-op-generic | kiln-opt | FileCheck %s

// The plainest form: static shapes, no mask, the default layout is elided.
// CHECK-LABEL: func.func @plain
// CHECK: kiln.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.250000e-01 : f32} : tensor<2x8x128x64xbf16>, tensor<2x8x128x64xbf16>, tensor<2x8x128x64xbf16> -> tensor<2x8x128x64xbf16>
func.func @plain(%q: tensor<2x8x128x64xbf16>, %k: tensor<2x8x128x64xbf16>, %v: tensor<2x8x128x64xbf16>) -> tensor<2x8x128x64xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<2x8x128x64xbf16>, tensor<2x8x128x64xbf16>, tensor<2x8x128x64xbf16> -> tensor<2x8x128x64xbf16>
  return %o : tensor<2x8x128x64xbf16>
}

// GQA with dynamic batch and lengths, causal, and a broadcast padding mask.
// CHECK-LABEL: func.func @gqa_causal_mask
// CHECK-SAME: (%[[Q:.*]]: tensor<?x8x?x128xf16>, %[[K:.*]]: tensor<?x2x?x128xf16>, %[[V:.*]]: tensor<?x2x?x128xf16>, %[[M:.*]]: tensor<?x1x1x?xf32>)
// CHECK: kiln.attention %[[Q]], %[[K]], %[[V]] mask(%[[M]] : tensor<?x1x1x?xf32>) {causal, scale = 0.0883883461 : f32}
func.func @gqa_causal_mask(%q: tensor<?x8x?x128xf16>, %k: tensor<?x2x?x128xf16>, %v: tensor<?x2x?x128xf16>, %m: tensor<?x1x1x?xf32>) -> tensor<?x8x?x128xf16> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x1x1x?xf32>) {causal, scale = 0.0883883461 : f32} : tensor<?x8x?x128xf16>, tensor<?x2x?x128xf16>, tensor<?x2x?x128xf16> -> tensor<?x8x?x128xf16>
  return %o : tensor<?x8x?x128xf16>
}

// Boolean mask, position bias, sliding window and soft-capping together.
// CHECK-LABEL: func.func @everything
// CHECK: kiln.attention %{{.*}}, %{{.*}}, %{{.*}} mask(%{{.*}} : tensor<1x1x16x16xi1>) bias(%{{.*}} : tensor<4x16x16xf32>) {causal, scale = 1.000000e+00 : f32, softcap = 5.000000e+01 : f32, window = 4 : i64}
func.func @everything(%q: tensor<1x4x16x32xf32>, %k: tensor<1x4x16x32xf32>, %v: tensor<1x4x16x32xf32>, %m: tensor<1x1x16x16xi1>, %b: tensor<4x16x16xf32>) -> tensor<1x4x16x32xf32> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<1x1x16x16xi1>) bias(%b : tensor<4x16x16xf32>) {causal, window = 4 : i64, softcap = 50.0 : f32, scale = 1.0 : f32} : tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32> -> tensor<1x4x16x32xf32>
  return %o : tensor<1x4x16x32xf32>
}

// The bshd layout: heads on axis 2, sequence on axis 1 (MQA: one KV head).
// CHECK-LABEL: func.func @bshd
// CHECK: {layout = #kiln.layout<bshd>, scale = 1.250000e-01 : f32} : tensor<1x100x8x64xbf16>, tensor<1x100x1x64xbf16>
func.func @bshd(%q: tensor<1x100x8x64xbf16>, %k: tensor<1x100x1x64xbf16>, %v: tensor<1x100x1x64xbf16>) -> tensor<1x100x8x64xbf16> {
  %o = kiln.attention %q, %k, %v {layout = #kiln.layout<bshd>, scale = 0.125 : f32} : tensor<1x100x8x64xbf16>, tensor<1x100x1x64xbf16>, tensor<1x100x1x64xbf16> -> tensor<1x100x8x64xbf16>
  return %o : tensor<1x100x8x64xbf16>
}

// A padding mask with causal, hidden keys scoring the graph's finite fill.
// CHECK-LABEL: func.func @masked_score
// CHECK: kiln.attention %{{.*}}, %{{.*}}, %{{.*}} mask(%{{.*}} : tensor<2x1x1x64xi1>) {causal, masked_score = -3.40282347E+38 : f32, scale = 1.250000e-01 : f32}
func.func @masked_score(%q: tensor<2x2x64x64xf32>, %k: tensor<2x2x64x64xf32>, %v: tensor<2x2x64x64xf32>, %m: tensor<2x1x1x64xi1>) -> tensor<2x2x64x64xf32> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<2x1x1x64xi1>) {causal, masked_score = -3.40282347E+38 : f32, scale = 0.125 : f32} : tensor<2x2x64x64xf32>, tensor<2x2x64x64xf32>, tensor<2x2x64x64xf32> -> tensor<2x2x64x64xf32>
  return %o : tensor<2x2x64x64xf32>
}

// A two-sided local window (ModernBERT): 3 keys up to the diagonal, 2 after.
// CHECK-LABEL: func.func @two_sided_window
// CHECK: kiln.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.250000e-01 : f32, window = 3 : i64, window_right = 2 : i64}
func.func @two_sided_window(%q: tensor<2x2x64x64xf32>, %k: tensor<2x2x64x64xf32>, %v: tensor<2x2x64x64xf32>) -> tensor<2x2x64x64xf32> {
  %o = kiln.attention %q, %k, %v {window = 3 : i64, window_right = 2 : i64, scale = 0.125 : f32} : tensor<2x2x64x64xf32>, tensor<2x2x64x64xf32>, tensor<2x2x64x64xf32> -> tensor<2x2x64x64xf32>
  return %o : tensor<2x2x64x64xf32>
}

// Packed sequences (the varlen form): [rows, heads, dim] with offsets.
// CHECK-LABEL: func.func @packed
// CHECK: kiln.attention %{{.*}}, %{{.*}}, %{{.*}} offsets(%{{.*}}, %{{.*}} : tensor<?xi32>, tensor<?xi32>) {causal, scale = 1.250000e-01 : f32} : tensor<?x8x64xbf16>, tensor<?x2x64xbf16>, tensor<?x2x32xbf16> -> tensor<?x8x32xbf16>
func.func @packed(%q: tensor<?x8x64xbf16>, %k: tensor<?x2x64xbf16>, %v: tensor<?x2x32xbf16>, %qo: tensor<?xi32>, %ko: tensor<?xi32>) -> tensor<?x8x32xbf16> {
  %o = kiln.attention %q, %k, %v offsets(%qo, %ko : tensor<?xi32>, tensor<?xi32>) {causal, scale = 0.125 : f32} : tensor<?x8x64xbf16>, tensor<?x2x64xbf16>, tensor<?x2x32xbf16> -> tensor<?x8x32xbf16>
  return %o : tensor<?x8x32xbf16>
}

// A run-time scale: one f32 element that multiplies the scale (a learned
// temperature), of rank 0 or with every size 1.
// CHECK-LABEL: func.func @scale_factor
// CHECK: kiln.attention %{{.*}}, %{{.*}}, %{{.*}} mask(%{{.*}} : tensor<1x1x1x16xi1>) scale_factor(%{{.*}} : tensor<f32>) {causal, scale = 1.250000e-01 : f32}
// CHECK: kiln.attention %{{.*}}, %{{.*}}, %{{.*}} scale_factor(%{{.*}} : tensor<1x1x1x1xf32>) {scale = 1.000000e+00 : f32}
func.func @scale_factor(%q: tensor<1x4x16x32xbf16>, %k: tensor<1x4x16x32xbf16>, %v: tensor<1x4x16x32xbf16>, %m: tensor<1x1x1x16xi1>, %t: tensor<f32>, %u: tensor<1x1x1x1xf32>) -> (tensor<1x4x16x32xbf16>, tensor<1x4x16x32xbf16>) {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<1x1x1x16xi1>) scale_factor(%t : tensor<f32>) {causal, scale = 0.125 : f32} : tensor<1x4x16x32xbf16>, tensor<1x4x16x32xbf16>, tensor<1x4x16x32xbf16> -> tensor<1x4x16x32xbf16>
  %p = kiln.attention %q, %k, %v scale_factor(%u : tensor<1x1x1x1xf32>) {scale = 1.0 : f32} : tensor<1x4x16x32xbf16>, tensor<1x4x16x32xbf16>, tensor<1x4x16x32xbf16> -> tensor<1x4x16x32xbf16>
  return %o, %p : tensor<1x4x16x32xbf16>, tensor<1x4x16x32xbf16>
}

// A run-time scale per query head: rank 1, [Hq] (Swin-v2's logit scale),
// with grouped-query heads too, and on the backward.
// CHECK-LABEL: func.func @scale_factor_per_head
// CHECK: kiln.attention %{{.*}}, %{{.*}}, %{{.*}} scale_factor(%{{.*}} : tensor<8xf32>) {scale = 1.000000e+00 : f32} : tensor<1x8x16x32xbf16>, tensor<1x2x16x32xbf16>, tensor<1x2x16x32xbf16> -> tensor<1x8x16x32xbf16>
// CHECK: kiln.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} scale_factor(%{{.*}} : tensor<8xf32>)
func.func @scale_factor_per_head(%q: tensor<1x8x16x32xbf16>, %k: tensor<1x2x16x32xbf16>, %v: tensor<1x2x16x32xbf16>, %f: tensor<8xf32>, %lse: tensor<1x8x16xf32>) -> (tensor<1x8x16x32xbf16>, tensor<1x8x16x32xbf16>) {
  %o = kiln.attention %q, %k, %v scale_factor(%f : tensor<8xf32>) {scale = 1.0 : f32} : tensor<1x8x16x32xbf16>, tensor<1x2x16x32xbf16>, tensor<1x2x16x32xbf16> -> tensor<1x8x16x32xbf16>
  %dq, %dk, %dv = kiln.attention_grad %q, %k, %v, %o, %lse, %o scale_factor(%f : tensor<8xf32>) {scale = 1.0 : f32} : tensor<1x8x16x32xbf16>, tensor<1x2x16x32xbf16>, tensor<1x2x16x32xbf16>, tensor<1x8x16x32xbf16>, tensor<1x8x16xf32>, tensor<1x8x16x32xbf16> -> tensor<1x8x16x32xbf16>, tensor<1x2x16x32xbf16>, tensor<1x2x16x32xbf16>
  return %o, %dq : tensor<1x8x16x32xbf16>, tensor<1x8x16x32xbf16>
}

// The forward keeping its log-sum-exp: [B, Hq, Sq] f32, in the bshd layout
// too.
// CHECK-LABEL: func.func @lse
// CHECK: %{{.*}}, %{{.*}} = kiln.attention %{{.*}}, %{{.*}}, %{{.*}} {causal, layout = #kiln.layout<bshd>, scale = 1.250000e-01 : f32} : tensor<2x16x8x64xbf16>, tensor<2x16x2x64xbf16>, tensor<2x16x2x64xbf16> -> tensor<2x16x8x64xbf16>, tensor<2x8x16xf32>
func.func @lse(%q: tensor<2x16x8x64xbf16>, %k: tensor<2x16x2x64xbf16>, %v: tensor<2x16x2x64xbf16>) -> (tensor<2x16x8x64xbf16>, tensor<2x8x16xf32>) {
  %o, %lse = kiln.attention %q, %k, %v {causal, layout = #kiln.layout<bshd>, scale = 0.125 : f32} : tensor<2x16x8x64xbf16>, tensor<2x16x2x64xbf16>, tensor<2x16x2x64xbf16> -> tensor<2x16x8x64xbf16>, tensor<2x8x16xf32>
  return %o, %lse : tensor<2x16x8x64xbf16>, tensor<2x8x16xf32>
}

// The packed form's log-sum-exp: [Hq, total_q].
// CHECK-LABEL: func.func @packed_lse
// CHECK: kiln.attention %{{.*}}, %{{.*}}, %{{.*}} offsets(%{{.*}}, %{{.*}} : tensor<4xi32>, tensor<4xi32>) {scale = 1.250000e-01 : f32} : tensor<40x8x64xf16>, tensor<48x2x64xf16>, tensor<48x2x64xf16> -> tensor<40x8x64xf16>, tensor<8x40xf32>
func.func @packed_lse(%q: tensor<40x8x64xf16>, %k: tensor<48x2x64xf16>, %v: tensor<48x2x64xf16>, %qo: tensor<4xi32>, %ko: tensor<4xi32>) -> tensor<8x40xf32> {
  %o, %lse = kiln.attention %q, %k, %v offsets(%qo, %ko : tensor<4xi32>, tensor<4xi32>) {scale = 0.125 : f32} : tensor<40x8x64xf16>, tensor<48x2x64xf16>, tensor<48x2x64xf16> -> tensor<40x8x64xf16>, tensor<8x40xf32>
  return %lse : tensor<8x40xf32>
}

// The backward with the bias's gradient (the bias broadcast over the
// batch), a boolean mask, masked_score, GQA and an MLA value head dim.
// CHECK-LABEL: func.func @grad
// CHECK-SAME: (%[[Q:.*]]: tensor<2x8x16x64xf32>, %[[K:.*]]: tensor<2x2x16x64xf32>, %[[V:.*]]: tensor<2x2x16x32xf32>, %[[O:.*]]: tensor<2x8x16x32xf32>, %[[L:.*]]: tensor<2x8x16xf32>, %[[DO:.*]]: tensor<2x8x16x32xf32>, %[[M:.*]]: tensor<2x1x16x16xi1>, %[[B:.*]]: tensor<8x16x16xf32>)
// CHECK: kiln.attention_grad %[[Q]], %[[K]], %[[V]], %[[O]], %[[L]], %[[DO]] mask(%[[M]] : tensor<2x1x16x16xi1>) bias(%[[B]] : tensor<8x16x16xf32>) {bias_grad, causal, masked_score = -1.000000e+04 : f32, scale = 1.250000e-01 : f32}
// CHECK-SAME: -> tensor<2x8x16x64xf32>, tensor<2x2x16x64xf32>, tensor<2x2x16x32xf32>, tensor<8x16x16xf32>
func.func @grad(%q: tensor<2x8x16x64xf32>, %k: tensor<2x2x16x64xf32>, %v: tensor<2x2x16x32xf32>, %o: tensor<2x8x16x32xf32>, %lse: tensor<2x8x16xf32>, %do: tensor<2x8x16x32xf32>, %m: tensor<2x1x16x16xi1>, %b: tensor<8x16x16xf32>) -> tensor<8x16x16xf32> {
  %dq, %dk, %dv, %db = kiln.attention_grad %q, %k, %v, %o, %lse, %do mask(%m : tensor<2x1x16x16xi1>) bias(%b : tensor<8x16x16xf32>) {bias_grad, causal, masked_score = -1.0e4 : f32, scale = 0.125 : f32} : tensor<2x8x16x64xf32>, tensor<2x2x16x64xf32>, tensor<2x2x16x32xf32>, tensor<2x8x16x32xf32>, tensor<2x8x16xf32>, tensor<2x8x16x32xf32> -> tensor<2x8x16x64xf32>, tensor<2x2x16x64xf32>, tensor<2x2x16x32xf32>, tensor<8x16x16xf32>
  return %db : tensor<8x16x16xf32>
}

// The packed backward, with a run-time scale factor and a window.
// CHECK-LABEL: func.func @packed_grad
// CHECK: kiln.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} offsets(%{{.*}}, %{{.*}} : tensor<3xi32>, tensor<3xi32>) scale_factor(%{{.*}} : tensor<1xf32>) {causal, scale = 1.000000e+00 : f32, window = 8 : i64} : tensor<40x4x64xbf16>, tensor<40x4x64xbf16>, tensor<40x4x64xbf16>, tensor<40x4x64xbf16>, tensor<4x40xf32>, tensor<40x4x64xbf16> -> tensor<40x4x64xbf16>, tensor<40x4x64xbf16>, tensor<40x4x64xbf16>
func.func @packed_grad(%q: tensor<40x4x64xbf16>, %k: tensor<40x4x64xbf16>, %v: tensor<40x4x64xbf16>, %o: tensor<40x4x64xbf16>, %lse: tensor<4x40xf32>, %do: tensor<40x4x64xbf16>, %qo: tensor<3xi32>, %ko: tensor<3xi32>, %f: tensor<1xf32>) -> tensor<40x4x64xbf16> {
  %dq, %dk, %dv = kiln.attention_grad %q, %k, %v, %o, %lse, %do offsets(%qo, %ko : tensor<3xi32>, tensor<3xi32>) scale_factor(%f : tensor<1xf32>) {causal, window = 8 : i64, scale = 1.0 : f32} : tensor<40x4x64xbf16>, tensor<40x4x64xbf16>, tensor<40x4x64xbf16>, tensor<40x4x64xbf16>, tensor<4x40xf32>, tensor<40x4x64xbf16> -> tensor<40x4x64xbf16>, tensor<40x4x64xbf16>, tensor<40x4x64xbf16>
  return %dq : tensor<40x4x64xbf16>
}

// FP8 operands: e4m3 Q, K, V with descales per tensor or per head, a float
// result.
// CHECK-LABEL: func.func @fp8_operands
// CHECK: kiln.attention %{{.*}}, %{{.*}}, %{{.*}} descale(%{{.*}}, %{{.*}}, %{{.*}} : tensor<4xf32>, tensor<1xf32>, tensor<2xf32>) {causal, scale = 1.250000e-01 : f32} : tensor<1x4x16x32xf8E4M3FN>, tensor<1x2x16x32xf8E4M3FN>, tensor<1x2x16x32xf8E4M3FN> -> tensor<1x4x16x32xbf16>
func.func @fp8_operands(%q: tensor<1x4x16x32xf8E4M3FN>, %k: tensor<1x2x16x32xf8E4M3FN>, %v: tensor<1x2x16x32xf8E4M3FN>, %qs: tensor<4xf32>, %ks: tensor<1xf32>, %vs: tensor<2xf32>) -> tensor<1x4x16x32xbf16> {
  %o = kiln.attention %q, %k, %v descale(%qs, %ks, %vs : tensor<4xf32>, tensor<1xf32>, tensor<2xf32>) {causal, scale = 0.125 : f32} : tensor<1x4x16x32xf8E4M3FN>, tensor<1x2x16x32xf8E4M3FN>, tensor<1x2x16x32xf8E4M3FN> -> tensor<1x4x16x32xbf16>
  return %o : tensor<1x4x16x32xbf16>
}
