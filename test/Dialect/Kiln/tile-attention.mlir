// RUN: kiln-opt %s -split-input-file -kiln-tile-attention="kv-block-size=64 q-block-size=32" -cse | FileCheck %s
// RUN: kiln-opt %s -split-input-file -kiln-tile-attention="num-splits=4" -cse | FileCheck %s --check-prefix=SPLIT
// RUN: kiln-opt %s -split-input-file -kiln-decompose-attention -cse | FileCheck %s --check-prefix=DECOMP

// Dynamic causal attention: sizes come from tensor.dim; loops over batch,
// heads, query blocks, one split and KV blocks; the KV loop ends at the
// causal edge of the query block; exp2 with scale·log2(e) folded in; the
// running max is guarded against -inf - -inf.
// CHECK-LABEL: func.func @causal_dynamic
// CHECK-SAME: (%[[Q:.*]]: tensor<?x?x?x?xf32>, %[[K:.*]]: tensor<?x?x?x?xf32>, %[[V:.*]]: tensor<?x?x?x?xf32>)
// CHECK-NOT: kiln.attention
// CHECK-DAG: %[[C64:.*]] = arith.constant 64 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK-DAG: %[[SQ:.*]] = tensor.dim %[[Q]], %c2
// CHECK-DAG: %[[SK:.*]] = tensor.dim %[[K]], %c2
// CHECK: scf.for %[[B:.*]] = %c0 to
// CHECK: scf.for %[[H:.*]] = %c0 to
// GQA: KV head h / G.
// CHECK: %[[KVH:.*]] = arith.divsi %[[H]],
// CHECK: scf.for %[[ROW0:.*]] = %c0 to %[[SQ]] step %[[C32]]
// CHECK: %[[QT:.*]] = tensor.extract_slice %[[Q]][%[[B]], %[[H]], %[[ROW0]], 0]
// CHECK: %[[DIAG:.*]] = arith.subi %[[SK]], %[[SQ]]
// CHECK: %[[END:.*]] = arith.minsi %{{.*}}, %[[SK]]
// CHECK: scf.for %[[PART:.*]] = %c0 to %c1 step %c1
// CHECK: scf.for %[[KEY0:.*]] = %{{.*}} to %{{.*}} step %[[C64]] iter_args(%[[M:.*]] = %{{.*}}, %[[L:.*]] = %{{.*}}, %[[ACC:.*]] = %{{.*}})
// CHECK: tensor.extract_slice %[[K]][%[[B]], %[[KVH]], %[[KEY0]], 0]
// CHECK: tensor.extract_slice %[[V]][%[[B]], %[[KVH]], %[[KEY0]], 0]
// 0.125 · log2(e)
// CHECK: arith.constant 0.180336878 : f32
// CHECK: arith.cmpi sgt
// CHECK: math.exp2
// CHECK: scf.yield
// Normalised output (0 where no key was seen) and base-2 log-sum-exp.
// CHECK: arith.cmpf ogt
// CHECK: arith.divf
// CHECK: math.log2
// CHECK: tensor.insert_slice
// SPLIT-LABEL: func.func @causal_dynamic
// SPLIT: scf.for %{{.*}} = %c0 to %c4 step %c1
// Combine: max of the splits' lse, weights exp2(lse - max), weighted sum.
// SPLIT: linalg.generic {{.*}}iterator_types = ["reduction", "parallel", "parallel", "parallel"]
// SPLIT: arith.maximumf
// SPLIT: math.exp2
// SPLIT: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]
// SPLIT: arith.divf
// DECOMP-LABEL: func.func @causal_dynamic
// DECOMP-NOT: math.exp2
// DECOMP: scf.for
// DECOMP: scf.for
// DECOMP-NOT: scf.for
// DECOMP: math.exp
// DECOMP-NOT: kiln.attention
func.func @causal_dynamic(%q: tensor<?x?x?x?xf32>, %k: tensor<?x?x?x?xf32>,
                          %v: tensor<?x?x?x?xf32>) -> tensor<?x?x?x?xf32> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.125 : f32}
      : tensor<?x?x?x?xf32>, tensor<?x?x?x?xf32>, tensor<?x?x?x?xf32>
      -> tensor<?x?x?x?xf32>
  return %o : tensor<?x?x?x?xf32>
}

// -----

// Sliding window: the KV loop starts at the first block the window reaches
// (the first visible key rounded down to a block), and keys before the
// window's edge are hidden per tile.
// CHECK-LABEL: func.func @window
// CHECK: scf.for %[[ROW0:.*]] = %c0 to %{{.*}} step %c32
// CHECK: %[[FIRST:.*]] = arith.addi %{{.*}}, %c1
// CHECK: arith.divsi %{{.*}}, %c64
// CHECK: %[[BEGIN:.*]] = arith.muli %{{.*}}, %c64
// CHECK: arith.cmpi sle
func.func @window(%q: tensor<1x2x128x16xf32>, %k: tensor<1x2x128x16xf32>,
                  %v: tensor<1x2x128x16xf32>) -> tensor<1x2x128x16xf32> {
  %o = kiln.attention %q, %k, %v {causal, window = 16 : i64, scale = 0.25 : f32}
      : tensor<1x2x128x16xf32>, tensor<1x2x128x16xf32>, tensor<1x2x128x16xf32>
      -> tensor<1x2x128x16xf32>
  return %o : tensor<1x2x128x16xf32>
}

// -----

// Soft-cap, bias and a boolean mask are applied per tile: tanh of the scaled
// score, then the bias read with broadcasting, then masked keys set to -inf;
// bf16 operands are extended to f32 and the result truncated.
// CHECK-LABEL: func.func @softcap_bias_mask
// CHECK: math.tanh
// CHECK: tensor.extract %{{.*}} : tensor<4x4xbf16>
// CHECK: tensor.extract %{{.*}} : tensor<2x1x4x4xi1>
// CHECK: arith.xori
// CHECK: arith.select
// CHECK: arith.truncf %{{.*}} : f32 to bf16
func.func @softcap_bias_mask(%q: tensor<2x2x4x8xbf16>, %k: tensor<2x2x4x8xbf16>,
                             %v: tensor<2x2x4x8xbf16>, %m: tensor<2x1x4x4xi1>,
                             %b: tensor<4x4xbf16>) -> tensor<2x2x4x8xbf16> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<2x1x4x4xi1>)
      bias(%b : tensor<4x4xbf16>) {scale = 0.5 : f32, softcap = 20.0 : f32}
      : tensor<2x2x4x8xbf16>, tensor<2x2x4x8xbf16>, tensor<2x2x4x8xbf16>
      -> tensor<2x2x4x8xbf16>
  return %o : tensor<2x2x4x8xbf16>
}

// -----

// Paged K/V: each tile is gathered through the page table (page = table[b,
// key / P], slot = key % P), both clamped to the cache; the key count of
// each sequence comes from kv_lens.
// CHECK-LABEL: func.func @paged
// CHECK-SAME: %[[PT:[^:]*]]: tensor<?x?xi32>, %[[LENS:[^:]*]]: tensor<?xi32>
// CHECK: scf.for %[[B:.*]] = %c0 to
// CHECK: tensor.extract %[[LENS]][%[[B]]]
// CHECK: linalg.generic
// CHECK: arith.divsi
// CHECK: tensor.extract %[[PT]][%[[B]], %{{.*}}]
// CHECK: arith.remsi
// DECOMP-LABEL: func.func @paged
// DECOMP: tensor.extract %{{.*}} : tensor<?x?xi32>
func.func @paged(%q: tensor<?x8x1x64xf16>, %kc: tensor<?x16x2x64xf16>,
                 %vc: tensor<?x16x2x64xf16>, %pt: tensor<?x?xi32>,
                 %lens: tensor<?xi32>) -> tensor<?x8x1x64xf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {causal, scale = 0.125 : f32}
      : tensor<?x8x1x64xf16>, tensor<?x16x2x64xf16>, tensor<?x16x2x64xf16>,
        tensor<?x?xi32>, tensor<?xi32> -> tensor<?x8x1x64xf16>
  return %o : tensor<?x8x1x64xf16>
}

// -----

// bshd layout: tiles are sliced along the sequence axis 1 and the result is
// written back in bshd order.
// CHECK-LABEL: func.func @bshd
// CHECK: tensor.extract_slice %arg0[%{{.*}}, %{{.*}}, %{{.*}}, 0] [1, %{{.*}}, 1, %{{.*}}]
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #{{.*}}], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
// CHECK-SAME: outs(%{{.*}} : tensor<1x7x2x8xf32>)
func.func @bshd(%q: tensor<1x7x2x8xf32>, %k: tensor<1x9x2x8xf32>,
                %v: tensor<1x9x2x8xf32>) -> tensor<1x7x2x8xf32> {
  %o = kiln.attention %q, %k, %v {scale = 0.5 : f32, layout = #kiln.layout<bshd>}
      : tensor<1x7x2x8xf32>, tensor<1x9x2x8xf32>, tensor<1x9x2x8xf32>
      -> tensor<1x7x2x8xf32>
  return %o : tensor<1x7x2x8xf32>
}

// -----

// The log-sum-exp: the tiled form's base-2 lse (max + log2 sum) is returned
// in natural units (times ln 2), the decomposed form's is max + ln sum; with
// splits, the combined lse is the max over splits plus log2 of the weights'
// sum.
// CHECK-LABEL: func.func @lse
// CHECK: math.log2
// CHECK: arith.mulf %{{.*}}, %{{.*}} : f32
// CHECK: return %{{.*}}, %{{.*}} : tensor<1x2x8x4xf32>, tensor<1x2x8xf32>
// SPLIT-LABEL: func.func @lse
// SPLIT: math.log2
// SPLIT: math.log2
// DECOMP-LABEL: func.func @lse
// DECOMP: math.log
// DECOMP: return %{{.*}}, %{{.*}} : tensor<1x2x8x4xf32>, tensor<1x2x8xf32>
func.func @lse(%q: tensor<1x2x8x4xf32>, %k: tensor<1x2x8x4xf32>,
               %v: tensor<1x2x8x4xf32>) -> (tensor<1x2x8x4xf32>, tensor<1x2x8xf32>) {
  %o, %lse = kiln.attention %q, %k, %v {causal, scale = 0.5 : f32}
      : tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>
      -> tensor<1x2x8x4xf32>, tensor<1x2x8xf32>
  return %o, %lse : tensor<1x2x8x4xf32>, tensor<1x2x8xf32>
}

// -----

// The backward in the reference form under both passes: P = exp(s - lse),
// through the soft-cap's 1 - tanh^2, dK accumulated per KV head (extract,
// add, insert), the bias's gradient summed over its broadcast batch and
// heads and expanded back to its shape.
// CHECK-LABEL: func.func @grad
// CHECK-NOT: kiln.attention_grad
// CHECK: math.exp
// CHECK: math.tanh
// CHECK: tensor.extract_slice
// CHECK: tensor.insert_slice
// CHECK: tensor.expand_shape %{{.*}} {{\[\[}}0, 1, 2], [3]]
// CHECK-SAME: tensor<4x4xf32> into tensor<1x1x4x4xf32>
// DECOMP-LABEL: func.func @grad
// DECOMP-NOT: kiln.attention_grad
// DECOMP: math.exp
func.func @grad(%q: tensor<2x4x4x8xf32>, %k: tensor<2x2x4x8xf32>,
                %v: tensor<2x2x4x8xf32>, %o: tensor<2x4x4x8xf32>,
                %lse: tensor<2x4x4xf32>, %do: tensor<2x4x4x8xf32>,
                %b: tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32> {
  %dq, %dk, %dv, %db = kiln.attention_grad %q, %k, %v, %o, %lse, %do
      bias(%b : tensor<1x1x4x4xf32>) {bias_grad, causal, softcap = 5.0 : f32, scale = 0.5 : f32}
      : tensor<2x4x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>,
        tensor<2x4x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x4x8xf32>
      -> tensor<2x4x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>,
         tensor<1x1x4x4xf32>
  return %db : tensor<1x1x4x4xf32>
}

// -----

// A per-head scale_factor ([Hq]): each query head reads its own element,
// which multiplies the dot products before the scale, the softcap and the
// row maximum (grouped-query heads: by query head, not KV head).
// CHECK-LABEL: func.func @scale_factor_per_head
// CHECK-SAME: %[[F:[a-z0-9]+]]: tensor<4xf32>
// CHECK: scf.for %{{.*}} = %c0 to
// CHECK: scf.for %[[H:.*]] = %c0 to
// CHECK: %[[FH:.*]] = tensor.extract %[[F]][%[[H]]] : tensor<4xf32>
// CHECK: linalg.generic
// CHECK: arith.mulf %{{.*}}, %[[FH]] : f32
// CHECK: math.tanh
// CHECK: arith.maximumf
// DECOMP-LABEL: func.func @scale_factor_per_head
// DECOMP: scf.for %{{.*}} = %c0 to
// DECOMP: scf.for %[[H:.*]] = %c0 to
// DECOMP: tensor.extract %{{.*}}[%[[H]]] : tensor<4xf32>
func.func @scale_factor_per_head(%q: tensor<2x4x16x8xf32>, %k: tensor<2x2x16x8xf32>,
                                 %v: tensor<2x2x16x8xf32>, %f: tensor<4xf32>) -> tensor<2x4x16x8xf32> {
  %o = kiln.attention %q, %k, %v scale_factor(%f : tensor<4xf32>) {causal, scale = 0.25 : f32, softcap = 30.0 : f32}
      : tensor<2x4x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>
      -> tensor<2x4x16x8xf32>
  return %o : tensor<2x4x16x8xf32>
}
