// RUN: kiln-opt %s -split-input-file -kiln-tile-attention -cse | FileCheck %s
// RUN: kiln-opt %s -split-input-file -kiln-tile-attention="num-splits=3" -cse | FileCheck %s
// RUN: kiln-opt %s -split-input-file -kiln-decompose-attention -cse | FileCheck %s
// RUN: kiln-opt %s -split-input-file -kiln-tile-attention -kiln-decompose-attention | FileCheck %s --check-prefix=NOEXT

// The lowering of kiln.paged_attention over f8E4M3FN caches: the gather
// decodes each e4m3 element from its bits to f32 (the CPU pipeline ends in
// LLVM, which has no f8 type, so there is no arith.extf from f8) and
// multiplies it by the scale of its KV head.
// NOEXT-NOT: arith.extf {{.*}} : f8E4M3FN

// Per-KV-head scales: the K tile is gathered through the page table from
// KV head h / G, decoded (sign bit 7 to bit 31; exponent bits 6..3 rebiased
// by 120 to bits 30..23; mantissa bits 2..0 to bits 22..20; exponent 0 as
// m·2^-9; S.1111.111 as NaN) and scaled by k_scale[min(h / G, Hkv - 1)];
// the V tile alike with v_scale.
// CHECK-LABEL: func.func @per_head
// CHECK-SAME: %[[KC:[^:]*]]: tensor<8x4x2x16xf8E4M3FN>, %[[VC:[^:]*]]: tensor<8x4x2x16xf8E4M3FN>, %{{[^:]*}}: tensor<2x4xi32>, %{{[^:]*}}: tensor<2xi32>, %[[KS:[^:]*]]: tensor<2xf32>, %[[VS:[^:]*]]: tensor<2xf32>
// CHECK: %[[GROUP:.*]] = arith.divsi
// CHECK: scf.for %{{[^ ]*}} = %c0
// CHECK: scf.for %[[H:[^ ]*]] = %c0
// CHECK-NEXT: %[[KV_HEAD:.*]] = arith.divsi %[[H]], %[[GROUP]] : index
// CHECK: %[[K_AT:.*]] = arith.minsi %[[KV_HEAD]], %{{.*}} : index
// CHECK: %[[K_SCALE:.*]] = tensor.extract %[[KS]][%[[K_AT]]] : tensor<2xf32>
// CHECK: linalg.generic
// CHECK-SAME: outs(%{{.*}} : tensor<?x?xf32>)
// CHECK: %[[K_ELEM:.*]] = tensor.extract %[[KC]][%{{.*}}, %{{.*}}, %[[KV_HEAD]], %{{.*}}] : tensor<8x4x2x16xf8E4M3FN>
// CHECK: %[[BYTE:.*]] = arith.bitcast %[[K_ELEM]] : f8E4M3FN to i8
// CHECK: %[[BITS:.*]] = arith.extui %[[BYTE]] : i8 to i32
// CHECK: %[[SHIFTED:.*]] = arith.shrui %[[BITS]], %c3_i32 : i32
// CHECK: %[[EXP:.*]] = arith.andi %[[SHIFTED]], %c15_i32 : i32
// CHECK: %[[MANT:.*]] = arith.andi %[[BITS]], %c7_i32 : i32
// CHECK: %[[SIGN_BIT:.*]] = arith.andi %[[BITS]], %c128_i32 : i32
// CHECK: %[[SIGN:.*]] = arith.shli %[[SIGN_BIT]], %c24_i32 : i32
// CHECK: %[[MANT_F32:.*]] = arith.shli %[[MANT]], %c20_i32 : i32
// CHECK: %[[EXP_F32:.*]] = arith.addi %[[EXP]], %c120_i32 : i32
// CHECK: %[[EXP_BITS:.*]] = arith.shli %[[EXP_F32]], %c23_i32 : i32
// CHECK: %[[NORMAL:.*]] = arith.ori %[[EXP_BITS]], %[[MANT_F32]] : i32
// CHECK: %[[MANT_FLOAT:.*]] = arith.uitofp %[[MANT]] : i32 to f32
// CHECK: %[[SUB:.*]] = arith.mulf %[[MANT_FLOAT]], %{{.*}} : f32
// CHECK: %[[SUB_BITS:.*]] = arith.bitcast %[[SUB]] : f32 to i32
// CHECK: %[[IS_SUB:.*]] = arith.cmpi eq, %[[EXP]], %c0_i32 : i32
// CHECK: %[[MAG:.*]] = arith.select %[[IS_SUB]], %[[SUB_BITS]], %[[NORMAL]] : i32
// CHECK: %[[SIGNED:.*]] = arith.ori %[[MAG]], %[[SIGN]] : i32
// CHECK: %[[VALUE:.*]] = arith.bitcast %[[SIGNED]] : i32 to f32
// CHECK: %[[LOW7:.*]] = arith.andi %[[BITS]], %c127_i32 : i32
// CHECK: %[[IS_NAN:.*]] = arith.cmpi eq, %[[LOW7]], %c127_i32 : i32
// CHECK: %[[DECODED:.*]] = arith.select %[[IS_NAN]], %{{.*}}, %[[VALUE]] : f32
// CHECK: %[[SCALED:.*]] = arith.mulf %[[DECODED]], %[[K_SCALE]] : f32
// CHECK: linalg.yield %[[SCALED]] : f32
// CHECK: %[[V_AT:.*]] = arith.minsi %[[KV_HEAD]], %{{.*}} : index
// CHECK: %[[V_SCALE:.*]] = tensor.extract %[[VS]][%[[V_AT]]] : tensor<2xf32>
// CHECK: tensor.extract %[[VC]][%{{.*}}, %{{.*}}, %[[KV_HEAD]], %{{.*}}] : tensor<8x4x2x16xf8E4M3FN>
// CHECK: arith.mulf %{{.*}}, %[[V_SCALE]] : f32
// CHECK: arith.truncf %{{.*}} : f32 to bf16
func.func @per_head(%q: tensor<2x4x1x16xbf16>, %kc: tensor<8x4x2x16xf8E4M3FN>,
                    %vc: tensor<8x4x2x16xf8E4M3FN>, %pt: tensor<2x4xi32>,
                    %lens: tensor<2xi32>, %ks: tensor<2xf32>,
                    %vs: tensor<2xf32>) -> tensor<2x4x1x16xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens
      scales(%ks, %vs : tensor<2xf32>, tensor<2xf32>) {scale = 0.25 : f32}
      : tensor<2x4x1x16xbf16>, tensor<8x4x2x16xf8E4M3FN>,
        tensor<8x4x2x16xf8E4M3FN>, tensor<2x4xi32>, tensor<2xi32>
      -> tensor<2x4x1x16xbf16>
  return %o : tensor<2x4x1x16xbf16>
}

// -----

// Ragged, per-tensor scales: each sequence's uniform lowering reads the one
// scale (index min(h / G, 0)) and decodes in its gathers.
// CHECK-LABEL: func.func @ragged_per_tensor
// CHECK-SAME: %[[KC:[^:]*]]: tensor<?x4x2x24xf8E4M3FN>, %[[VC:[^:]*]]: tensor<?x4x2x24xf8E4M3FN>, %{{[^:]*}}: tensor<3x?xi32>, %{{[^:]*}}: tensor<3xi32>, %{{[^:]*}}: tensor<4xi32>, %[[KS:[^:]*]]: tensor<1xf32>, %[[VS:[^:]*]]: tensor<1xf32>
// CHECK: scf.for
// CHECK: %[[K_SCALE:.*]] = tensor.extract %[[KS]][%{{.*}}] : tensor<1xf32>
// CHECK: tensor.extract %[[KC]]
// CHECK: arith.bitcast %{{.*}} : f8E4M3FN to i8
// CHECK: arith.mulf %{{.*}}, %[[K_SCALE]] : f32
// CHECK: %[[V_SCALE:.*]] = tensor.extract %[[VS]][%{{.*}}] : tensor<1xf32>
// CHECK: tensor.extract %[[VC]]
// CHECK: arith.bitcast %{{.*}} : f8E4M3FN to i8
// CHECK: arith.mulf %{{.*}}, %[[V_SCALE]] : f32
func.func @ragged_per_tensor(%q: tensor<?x6x24xf16>,
                             %kc: tensor<?x4x2x24xf8E4M3FN>,
                             %vc: tensor<?x4x2x24xf8E4M3FN>,
                             %pt: tensor<3x?xi32>, %lens: tensor<3xi32>,
                             %offs: tensor<4xi32>, %ks: tensor<1xf32>,
                             %vs: tensor<1xf32>) -> tensor<?x6x24xf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens q_offsets %offs
      scales(%ks, %vs : tensor<1xf32>, tensor<1xf32>)
      {causal, scale = 0.2 : f32}
      : tensor<?x6x24xf16>, tensor<?x4x2x24xf8E4M3FN>,
        tensor<?x4x2x24xf8E4M3FN>, tensor<3x?xi32>, tensor<3xi32>,
        tensor<4xi32> -> tensor<?x6x24xf16>
  return %o : tensor<?x6x24xf16>
}
