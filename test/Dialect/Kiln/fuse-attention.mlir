// RUN: kiln-opt %s --split-input-file --kiln-fuse-attention | FileCheck %s
// RUN: kiln-opt %s --split-input-file --kiln-fuse-attention -verify-diagnostics -mlir-print-op-on-diagnostic=false -o /dev/null

// The importer's canonical form: 4-D MatMul collapsed to rank 3 and split back, scale as a splat Mul, an additive float mask. The mask stays broadcastable; no S×S tensor appears.
// CHECK-LABEL: func.func @canonical
// CHECK-SAME:    %[[Q:[^:]+]]: tensor<1x2x16x8xf32>, %[[K:[^:]+]]: tensor<1x2x16x8xf32>, %[[MASK:[^:]+]]: tensor<1x1x1x16xf32>, %[[V:[^:]+]]: tensor<1x2x16x8xf32>
// CHECK-NOT:     tosa.
// CHECK:         %[[O:.*]] = kiln.attention %[[Q]], %[[K]], %[[V]] mask(%[[MASK]] : tensor<1x1x1x16xf32>) {scale = 0.353553385 : f32}
// CHECK-NOT:     tosa.
// CHECK:         return %[[O]]
func.func @canonical(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %mask: tensor<1x1x1x16xf32>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v12 = tosa.mul %v9, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %v13 = tosa.add %v12, %mask : (tensor<1x2x16x16xf32>, tensor<1x1x1x16xf32>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v13 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v15 = tosa.sub %v13, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v16 = tosa.exp %v15 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v17 = tosa.reduce_sum %v16 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v18 = tosa.reciprocal %v17 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v19 = tosa.mul %v16, %v18, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v21 = tosa.reshape %v19, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v22 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v23 = tosa.matmul %v21, %v22, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v25 = tosa.reshape %v23, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v25 : tensor<1x2x16x8xf32>
}

// -----

// No scale and no mask: scale defaults to 1.
// CHECK-LABEL: func.func @no_scale_no_mask
// CHECK-NOT:     tosa.
// CHECK:         kiln.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.000000e+00 : f32}
// CHECK-NOT:     mask(
func.func @no_scale_no_mask(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v9 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v11 = tosa.sub %v9, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v12 = tosa.exp %v11 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v13 = tosa.reduce_sum %v12 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v14 = tosa.reciprocal %v13 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v16 = tosa.mul %v12, %v14, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v18 = tosa.reshape %v16, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v19 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v20 = tosa.matmul %v18, %v19, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v22 = tosa.reshape %v20, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v22 : tensor<1x2x16x8xf32>
}

// -----

// A Div by a constant, as TOSA writes it (Mul by reciprocal(const)), folds to 1/c.
// CHECK-LABEL: func.func @div_scale
// CHECK-NOT:     tosa.reciprocal
// CHECK:         kiln.attention {{.*}} {scale = 1.250000e-01 : f32}
func.func @div_scale(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %denom = "tosa.const"() {values = dense<8.0> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %v11 = tosa.reciprocal %denom : (tensor<1x1x1x1xf32>) -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v13 = tosa.mul %v9, %v11, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v13 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v15 = tosa.sub %v13, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v16 = tosa.exp %v15 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v17 = tosa.reduce_sum %v16 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v18 = tosa.reciprocal %v17 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v19 = tosa.mul %v16, %v18, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v21 = tosa.reshape %v19, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v22 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v23 = tosa.matmul %v21, %v22, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v25 = tosa.reshape %v23, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v25 : tensor<1x2x16x8xf32>
}

// -----

// The scale applied to Q before the product folds into `scale`.
// CHECK-LABEL: func.func @scale_on_q
// CHECK-SAME:    %[[Q:[^:]+]]: tensor<1x2x16x8xf32>
// CHECK-NOT:     tosa.mul
// CHECK:         kiln.attention %[[Q]], {{.*}} {scale = 1.250000e-01 : f32}
func.func @scale_on_q(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %cq = "tosa.const"() {values = dense<0.125> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v3 = tosa.mul %q, %cq, %shift : (tensor<1x2x16x8xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x8xf32>
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v6 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v8 = tosa.reshape %v6, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v10 = tosa.matmul %v5, %v8, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v12 = tosa.reshape %v10, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v12 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v14 = tosa.sub %v12, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v15 = tosa.exp %v14 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v16 = tosa.reduce_sum %v15 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v17 = tosa.reciprocal %v16 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v18 = tosa.mul %v15, %v17, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v20 = tosa.reshape %v18, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v21 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v22 = tosa.matmul %v20, %v21, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v24 = tosa.reshape %v22, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v24 : tensor<1x2x16x8xf32>
}

// -----

// √scale on both Q and K (times the Mul after QKᵀ): every factor multiplies into `scale`.
// CHECK-LABEL: func.func @split_scale
// CHECK-SAME:    %[[Q:[^:]+]]: tensor<1x2x16x8xf32>, %[[K:[^:]+]]: tensor<1x2x16x8xf32>
// CHECK-NOT:     tosa.mul
// CHECK:         kiln.attention %[[Q]], %[[K]], {{.*}} {scale = 0.353553355 : f32}
func.func @split_scale(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %cq = "tosa.const"() {values = dense<0.59460355> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v3 = tosa.mul %q, %cq, %shift : (tensor<1x2x16x8xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x8xf32>
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %ck = "tosa.const"() {values = dense<0.59460355> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %v7 = tosa.mul %k, %ck, %shift : (tensor<1x2x16x8xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x8xf32>
  %v8 = tosa.transpose %v7 {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v10 = tosa.reshape %v8, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v12 = tosa.matmul %v5, %v10, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v14 = tosa.reshape %v12, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v14 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v16 = tosa.sub %v14, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v17 = tosa.exp %v16 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v18 = tosa.reduce_sum %v17 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v19 = tosa.reciprocal %v18 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v20 = tosa.mul %v17, %v19, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v22 = tosa.reshape %v20, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v23 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v24 = tosa.matmul %v22, %v23, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v26 = tosa.reshape %v24, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v26 : tensor<1x2x16x8xf32>
}

// -----

// K arrives already transposed ([B,H,D,S], as GPT-2's TorchScript export writes it): K is transposed back for the op.
// CHECK-LABEL: func.func @k_pre_transposed
// CHECK-SAME:    %[[Q:[^:]+]]: tensor<1x2x16x8xf32>, %[[KT:[^:]+]]: tensor<1x2x8x16xf32>, %[[V:[^:]+]]: tensor<1x2x16x8xf32>
// CHECK:         %[[K:.*]] = tosa.transpose %[[KT]] {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x8x16xf32>) -> tensor<1x2x16x8xf32>
// CHECK-NEXT:    kiln.attention %[[Q]], %[[K]], %[[V]]
// CHECK-NOT:     tosa.matmul
func.func @k_pre_transposed(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x8x16xf32>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v4 = tosa.reshape %k, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v6 = tosa.matmul %v2, %v4, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v8 = tosa.reshape %v6, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v11 = tosa.mul %v8, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v11 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v13 = tosa.sub %v11, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v14 = tosa.exp %v13 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v15 = tosa.reduce_sum %v14 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v16 = tosa.reciprocal %v15 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v17 = tosa.mul %v14, %v16, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v19 = tosa.reshape %v17, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v20 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v21 = tosa.matmul %v19, %v20, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v23 = tosa.reshape %v21, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v23 : tensor<1x2x16x8xf32>
}

// -----

// A rank-3 MatMul: the batch is the heads (B = 1); reshapes to rank 4 are inserted around the op.
// CHECK-LABEL: func.func @rank3
// CHECK-SAME:    %[[Q:[^:]+]]: tensor<4x16x8xf32>, %[[K:[^:]+]]: tensor<4x16x8xf32>, %[[V:[^:]+]]: tensor<4x16x8xf32>
// CHECK:         %[[Q4:.*]] = tosa.reshape %[[Q]], %{{.*}} -> tensor<1x4x16x8xf32>
// CHECK:         %[[K4:.*]] = tosa.reshape %[[K]], %{{.*}} -> tensor<1x4x16x8xf32>
// CHECK:         %[[V4:.*]] = tosa.reshape %[[V]], %{{.*}} -> tensor<1x4x16x8xf32>
// CHECK:         %[[O4:.*]] = kiln.attention %[[Q4]], %[[K4]], %[[V4]] {scale = 0.353553385 : f32}
// CHECK:         %[[O:.*]] = tosa.reshape %[[O4]], %{{.*}} -> tensor<4x16x8xf32>
// CHECK-NOT:     tosa.transpose
// CHECK:         return %[[O]]
func.func @rank3(%q: tensor<4x16x8xf32>, %k: tensor<4x16x8xf32>, %v: tensor<4x16x8xf32>) -> (tensor<4x16x8xf32>) {
  %v1 = tosa.transpose %k {perms = array<i32: 0, 2, 1>} : (tensor<4x16x8xf32>) -> tensor<4x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v3 = tosa.matmul %q, %v1, %zp_f32, %zp_f32 : (tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1xf32>} : () -> tensor<1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v6 = tosa.mul %v3, %scale, %shift : (tensor<4x16x16xf32>, tensor<1x1x1xf32>, tensor<1xi8>) -> tensor<4x16x16xf32>
  %max = tosa.reduce_max %v6 {axis = 2 : i32} : (tensor<4x16x16xf32>) -> tensor<4x16x1xf32>
  %v8 = tosa.sub %v6, %max : (tensor<4x16x16xf32>, tensor<4x16x1xf32>) -> tensor<4x16x16xf32>
  %v9 = tosa.exp %v8 : (tensor<4x16x16xf32>) -> tensor<4x16x16xf32>
  %v10 = tosa.reduce_sum %v9 {axis = 2 : i32} : (tensor<4x16x16xf32>) -> tensor<4x16x1xf32>
  %v11 = tosa.reciprocal %v10 : (tensor<4x16x1xf32>) -> tensor<4x16x1xf32>
  %v12 = tosa.mul %v9, %v11, %shift : (tensor<4x16x16xf32>, tensor<4x16x1xf32>, tensor<1xi8>) -> tensor<4x16x16xf32>
  %v13 = tosa.matmul %v12, %v, %zp_f32, %zp_f32 : (tensor<4x16x16xf32>, tensor<4x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x16x8xf32>
  return %v13 : tensor<4x16x8xf32>
}

// -----

// A boolean mask through select(cond, x, -inf) becomes an i1 `mask` operand.
// CHECK-LABEL: func.func @bool_mask
// CHECK-SAME:    %[[COND:[^:]+]]: tensor<1x1x1x16xi1>
// CHECK-NOT:     tosa.select
// CHECK:         kiln.attention {{.*}} mask(%[[COND]] : tensor<1x1x1x16xi1>)
func.func @bool_mask(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %cond: tensor<1x1x1x16xi1>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v12 = tosa.mul %v9, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %fill = "tosa.const"() {values = dense<0xFF800000> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %v14 = tosa.select %cond, %v12, %fill : (tensor<1x1x1x16xi1>, tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v14 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v16 = tosa.sub %v14, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v17 = tosa.exp %v16 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v18 = tosa.reduce_sum %v17 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v19 = tosa.reciprocal %v18 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v20 = tosa.mul %v17, %v19, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v22 = tosa.reshape %v20, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v23 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v24 = tosa.matmul %v22, %v23, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v26 = tosa.reshape %v24, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v26 : tensor<1x2x16x8xf32>
}

// -----

// select(cond, -1e9, x): `true` hides the key, so the mask is the negated condition.
// CHECK-LABEL: func.func @bool_mask_inverted
// CHECK-SAME:    %[[COND:[^:]+]]: tensor<1x1x16x16xi1>
// CHECK:         %[[KEEP:.*]] = tosa.logical_not %[[COND]]
// CHECK-NEXT:    kiln.attention {{.*}} mask(%[[KEEP]] : tensor<1x1x16x16xi1>)
// CHECK-NOT:     tosa.select
func.func @bool_mask_inverted(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %cond: tensor<1x1x16x16xi1>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v12 = tosa.mul %v9, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %fill = "tosa.const"() {values = dense<-1.0e+09> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %v14 = tosa.select %cond, %fill, %v12 : (tensor<1x1x16x16xi1>, tensor<1x1x1x1xf32>, tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v14 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v16 = tosa.sub %v14, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v17 = tosa.exp %v16 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v18 = tosa.reduce_sum %v17 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v19 = tosa.reciprocal %v18 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v20 = tosa.mul %v17, %v19, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v22 = tosa.reshape %v20, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v23 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v24 = tosa.matmul %v22, %v23, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v26 = tosa.reshape %v24, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v26 : tensor<1x2x16x8xf32>
}

// -----

// A constant lower-triangular 0/-inf additive mask is exactly causal: an attribute, no mask operand, no constant.
// CHECK-LABEL: func.func @causal_additive
// CHECK-NOT:     tosa.const
// CHECK:         kiln.attention %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} {causal, scale = 0.353553385 : f32}
// CHECK-NOT:     tosa.
func.func @causal_additive(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>) {
  %sh2x4x8 = tosa.const_shape {values = dense<[2, 4, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x4x8 : (tensor<1x2x4x8xf32>, !tosa.shape<3>) -> tensor<2x4x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x4x8xf32>) -> tensor<1x2x8x4xf32>
  %sh2x8x4 = tosa.const_shape {values = dense<[2, 8, 4]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x4 : (tensor<1x2x8x4xf32>, !tosa.shape<3>) -> tensor<2x8x4xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x4x8xf32>, tensor<2x8x4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x4x4xf32>
  %sh1x2x4x4 = tosa.const_shape {values = dense<[1, 2, 4, 4]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x4x4 : (tensor<2x4x4xf32>, !tosa.shape<4>) -> tensor<1x2x4x4xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v12 = tosa.mul %v9, %scale, %shift : (tensor<1x2x4x4xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x4x4xf32>
  %mc = "tosa.const"() {values = dense<[[[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>} : () -> tensor<1x1x4x4xf32>
  %v14 = tosa.add %v12, %mc : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %max = tosa.reduce_max %v14 {axis = 3 : i32} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x1xf32>
  %v16 = tosa.sub %v14, %max : (tensor<1x2x4x4xf32>, tensor<1x2x4x1xf32>) -> tensor<1x2x4x4xf32>
  %v17 = tosa.exp %v16 : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %v18 = tosa.reduce_sum %v17 {axis = 3 : i32} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x1xf32>
  %v19 = tosa.reciprocal %v18 : (tensor<1x2x4x1xf32>) -> tensor<1x2x4x1xf32>
  %v20 = tosa.mul %v17, %v19, %shift : (tensor<1x2x4x4xf32>, tensor<1x2x4x1xf32>, tensor<1xi8>) -> tensor<1x2x4x4xf32>
  %sh2x4x4 = tosa.const_shape {values = dense<[2, 4, 4]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v22 = tosa.reshape %v20, %sh2x4x4 : (tensor<1x2x4x4xf32>, !tosa.shape<3>) -> tensor<2x4x4xf32>
  %v23 = tosa.reshape %v, %sh2x4x8 : (tensor<1x2x4x8xf32>, !tosa.shape<3>) -> tensor<2x4x8xf32>
  %v24 = tosa.matmul %v22, %v23, %zp_f32, %zp_f32 : (tensor<2x4x4xf32>, tensor<2x4x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x4x8xf32>
  %sh1x2x4x8 = tosa.const_shape {values = dense<[1, 2, 4, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v26 = tosa.reshape %v24, %sh1x2x4x8 : (tensor<2x4x8xf32>, !tosa.shape<4>) -> tensor<1x2x4x8xf32>
  return %v26 : tensor<1x2x4x8xf32>
}

// -----

// Sq = 2 < Sk = 4 with the diagonal at the bottom-right corner and finfo.min fill: causal.
// CHECK-LABEL: func.func @causal_offset
// CHECK-NOT:     tosa.const
// CHECK:         kiln.attention %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} {causal, scale = 0.353553385 : f32} : tensor<1x2x2x8xf32>, tensor<1x2x4x8xf32>
func.func @causal_offset(%q: tensor<1x2x2x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> (tensor<1x2x2x8xf32>) {
  %sh2x2x8 = tosa.const_shape {values = dense<[2, 2, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x2x8 : (tensor<1x2x2x8xf32>, !tosa.shape<3>) -> tensor<2x2x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x4x8xf32>) -> tensor<1x2x8x4xf32>
  %sh2x8x4 = tosa.const_shape {values = dense<[2, 8, 4]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x4 : (tensor<1x2x8x4xf32>, !tosa.shape<3>) -> tensor<2x8x4xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x2x8xf32>, tensor<2x8x4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x2x4xf32>
  %sh1x2x2x4 = tosa.const_shape {values = dense<[1, 2, 2, 4]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x2x4 : (tensor<2x2x4xf32>, !tosa.shape<4>) -> tensor<1x2x2x4xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v12 = tosa.mul %v9, %scale, %shift : (tensor<1x2x2x4xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x2x4xf32>
  %mc = "tosa.const"() {values = dense<[[[[0.0, 0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x2x4xf32>} : () -> tensor<1x1x2x4xf32>
  %v14 = tosa.add %v12, %mc : (tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<1x2x2x4xf32>
  %max = tosa.reduce_max %v14 {axis = 3 : i32} : (tensor<1x2x2x4xf32>) -> tensor<1x2x2x1xf32>
  %v16 = tosa.sub %v14, %max : (tensor<1x2x2x4xf32>, tensor<1x2x2x1xf32>) -> tensor<1x2x2x4xf32>
  %v17 = tosa.exp %v16 : (tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  %v18 = tosa.reduce_sum %v17 {axis = 3 : i32} : (tensor<1x2x2x4xf32>) -> tensor<1x2x2x1xf32>
  %v19 = tosa.reciprocal %v18 : (tensor<1x2x2x1xf32>) -> tensor<1x2x2x1xf32>
  %v20 = tosa.mul %v17, %v19, %shift : (tensor<1x2x2x4xf32>, tensor<1x2x2x1xf32>, tensor<1xi8>) -> tensor<1x2x2x4xf32>
  %sh2x2x4 = tosa.const_shape {values = dense<[2, 2, 4]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v22 = tosa.reshape %v20, %sh2x2x4 : (tensor<1x2x2x4xf32>, !tosa.shape<3>) -> tensor<2x2x4xf32>
  %sh2x4x8 = tosa.const_shape {values = dense<[2, 4, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v24 = tosa.reshape %v, %sh2x4x8 : (tensor<1x2x4x8xf32>, !tosa.shape<3>) -> tensor<2x4x8xf32>
  %v25 = tosa.matmul %v22, %v24, %zp_f32, %zp_f32 : (tensor<2x2x4xf32>, tensor<2x4x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x2x8xf32>
  %sh1x2x2x8 = tosa.const_shape {values = dense<[1, 2, 2, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v27 = tosa.reshape %v25, %sh1x2x2x8 : (tensor<2x2x8xf32>, !tosa.shape<4>) -> tensor<1x2x2x8xf32>
  return %v27 : tensor<1x2x2x8xf32>
}

// -----

// A boolean band matrix (each query sees its 2 most recent keys) becomes causal with window = 2.
// CHECK-LABEL: func.func @causal_bool_window
// CHECK-NOT:     tosa.select
// CHECK:         kiln.attention %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} {causal, scale = 0.353553385 : f32, window = 2 : i64}
func.func @causal_bool_window(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>) {
  %sh2x4x8 = tosa.const_shape {values = dense<[2, 4, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x4x8 : (tensor<1x2x4x8xf32>, !tosa.shape<3>) -> tensor<2x4x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x4x8xf32>) -> tensor<1x2x8x4xf32>
  %sh2x8x4 = tosa.const_shape {values = dense<[2, 8, 4]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x4 : (tensor<1x2x8x4xf32>, !tosa.shape<3>) -> tensor<2x8x4xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x4x8xf32>, tensor<2x8x4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x4x4xf32>
  %sh1x2x4x4 = tosa.const_shape {values = dense<[1, 2, 4, 4]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x4x4 : (tensor<2x4x4xf32>, !tosa.shape<4>) -> tensor<1x2x4x4xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v12 = tosa.mul %v9, %scale, %shift : (tensor<1x2x4x4xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x4x4xf32>
  %cond = "tosa.const"() {values = dense<[[[[true, false, false, false], [true, true, false, false], [false, true, true, false], [false, false, true, true]]]]> : tensor<1x1x4x4xi1>} : () -> tensor<1x1x4x4xi1>
  %fill = "tosa.const"() {values = dense<0xFF800000> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %v15 = tosa.select %cond, %v12, %fill : (tensor<1x1x4x4xi1>, tensor<1x2x4x4xf32>, tensor<1x1x1x1xf32>) -> tensor<1x2x4x4xf32>
  %max = tosa.reduce_max %v15 {axis = 3 : i32} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x1xf32>
  %v17 = tosa.sub %v15, %max : (tensor<1x2x4x4xf32>, tensor<1x2x4x1xf32>) -> tensor<1x2x4x4xf32>
  %v18 = tosa.exp %v17 : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %v19 = tosa.reduce_sum %v18 {axis = 3 : i32} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x1xf32>
  %v20 = tosa.reciprocal %v19 : (tensor<1x2x4x1xf32>) -> tensor<1x2x4x1xf32>
  %v21 = tosa.mul %v18, %v20, %shift : (tensor<1x2x4x4xf32>, tensor<1x2x4x1xf32>, tensor<1xi8>) -> tensor<1x2x4x4xf32>
  %sh2x4x4 = tosa.const_shape {values = dense<[2, 4, 4]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v23 = tosa.reshape %v21, %sh2x4x4 : (tensor<1x2x4x4xf32>, !tosa.shape<3>) -> tensor<2x4x4xf32>
  %v24 = tosa.reshape %v, %sh2x4x8 : (tensor<1x2x4x8xf32>, !tosa.shape<3>) -> tensor<2x4x8xf32>
  %v25 = tosa.matmul %v23, %v24, %zp_f32, %zp_f32 : (tensor<2x4x4xf32>, tensor<2x4x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x4x8xf32>
  %sh1x2x4x8 = tosa.const_shape {values = dense<[1, 2, 4, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v27 = tosa.reshape %v25, %sh1x2x4x8 : (tensor<2x4x8xf32>, !tosa.shape<4>) -> tensor<1x2x4x8xf32>
  return %v27 : tensor<1x2x4x8xf32>
}

// -----

// A constant that differs from causal in one element is kept as a mask operand, not turned into `causal`.
// CHECK-LABEL: func.func @almost_causal
// CHECK:         %[[MASK:.*]] = "tosa.const"() <{values = dense<{{.*}}> : tensor<1x1x4x4xf32>}>
// CHECK:         kiln.attention {{.*}} mask(%[[MASK]] : tensor<1x1x4x4xf32>) {scale = 0.353553385 : f32}
// CHECK-NOT:     causal
func.func @almost_causal(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>) {
  %sh2x4x8 = tosa.const_shape {values = dense<[2, 4, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x4x8 : (tensor<1x2x4x8xf32>, !tosa.shape<3>) -> tensor<2x4x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x4x8xf32>) -> tensor<1x2x8x4xf32>
  %sh2x8x4 = tosa.const_shape {values = dense<[2, 8, 4]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x4 : (tensor<1x2x8x4xf32>, !tosa.shape<3>) -> tensor<2x8x4xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x4x8xf32>, tensor<2x8x4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x4x4xf32>
  %sh1x2x4x4 = tosa.const_shape {values = dense<[1, 2, 4, 4]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x4x4 : (tensor<2x4x4xf32>, !tosa.shape<4>) -> tensor<1x2x4x4xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v12 = tosa.mul %v9, %scale, %shift : (tensor<1x2x4x4xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x4x4xf32>
  %mc = "tosa.const"() {values = dense<[[[[0.0, 0xFF800000, 0.0, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>} : () -> tensor<1x1x4x4xf32>
  %v14 = tosa.add %v12, %mc : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %max = tosa.reduce_max %v14 {axis = 3 : i32} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x1xf32>
  %v16 = tosa.sub %v14, %max : (tensor<1x2x4x4xf32>, tensor<1x2x4x1xf32>) -> tensor<1x2x4x4xf32>
  %v17 = tosa.exp %v16 : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %v18 = tosa.reduce_sum %v17 {axis = 3 : i32} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x1xf32>
  %v19 = tosa.reciprocal %v18 : (tensor<1x2x4x1xf32>) -> tensor<1x2x4x1xf32>
  %v20 = tosa.mul %v17, %v19, %shift : (tensor<1x2x4x4xf32>, tensor<1x2x4x1xf32>, tensor<1xi8>) -> tensor<1x2x4x4xf32>
  %sh2x4x4 = tosa.const_shape {values = dense<[2, 4, 4]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v22 = tosa.reshape %v20, %sh2x4x4 : (tensor<1x2x4x4xf32>, !tosa.shape<3>) -> tensor<2x4x4xf32>
  %v23 = tosa.reshape %v, %sh2x4x8 : (tensor<1x2x4x8xf32>, !tosa.shape<3>) -> tensor<2x4x8xf32>
  %v24 = tosa.matmul %v22, %v23, %zp_f32, %zp_f32 : (tensor<2x4x4xf32>, tensor<2x4x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x4x8xf32>
  %sh1x2x4x8 = tosa.const_shape {values = dense<[1, 2, 4, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v26 = tosa.reshape %v24, %sh1x2x4x8 : (tensor<2x4x8xf32>, !tosa.shape<4>) -> tensor<1x2x4x8xf32>
  return %v26 : tensor<1x2x4x8xf32>
}

// -----

// Logit soft-capping c·tanh(x/c) after the scale becomes the softcap attribute.
// CHECK-LABEL: func.func @softcap
// CHECK-NOT:     tosa.tanh
// CHECK:         kiln.attention {{.*}} {scale = 0.353553385 : f32, softcap = 5.000000e+01 : f32}
func.func @softcap(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v12 = tosa.mul %v9, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %inv_cap = "tosa.const"() {values = dense<0.02> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %cap = "tosa.const"() {values = dense<50.0> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %v15 = tosa.mul %v12, %inv_cap, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %v16 = tosa.tanh %v15 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v17 = tosa.mul %v16, %cap, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v17 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v19 = tosa.sub %v17, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v20 = tosa.exp %v19 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v21 = tosa.reduce_sum %v20 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v22 = tosa.reciprocal %v21 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v23 = tosa.mul %v20, %v22, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v25 = tosa.reshape %v23, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v26 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v27 = tosa.matmul %v25, %v26, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v29 = tosa.reshape %v27, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v29 : tensor<1x2x16x8xf32>
}

// -----

// bf16 MatMuls with f32 results, casts back to bf16 after the softmax and the output: one bf16 op, no cast left.
// CHECK-LABEL: func.func @bf16_accumulate_f32
// CHECK-NOT:     tosa.cast
// CHECK:         %[[O:.*]] = kiln.attention {{.*}} mask(%{{.*}} : tensor<1x1x1x16xf32>) {{.*}} -> tensor<1x2x16x8xbf16>
// CHECK-NOT:     tosa.cast
// CHECK:         return %[[O]] : tensor<1x2x16x8xbf16>
func.func @bf16_accumulate_f32(%q: tensor<1x2x16x8xbf16>, %k: tensor<1x2x16x8xbf16>, %mask: tensor<1x1x1x16xf32>, %v: tensor<1x2x16x8xbf16>) -> (tensor<1x2x16x8xbf16>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xbf16>, !tosa.shape<3>) -> tensor<2x16x8xbf16>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xbf16>) -> tensor<1x2x8x16xbf16>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xbf16>, !tosa.shape<3>) -> tensor<2x8x16xbf16>
  %zp_bf16 = "tosa.const"() {values = dense<0.0> : tensor<1xbf16>} : () -> tensor<1xbf16>
  %v7 = tosa.matmul %v2, %v5, %zp_bf16, %zp_bf16 : (tensor<2x16x8xbf16>, tensor<2x8x16xbf16>, tensor<1xbf16>, tensor<1xbf16>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v12 = tosa.mul %v9, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %v13 = tosa.add %v12, %mask : (tensor<1x2x16x16xf32>, tensor<1x1x1x16xf32>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v13 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v15 = tosa.sub %v13, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v16 = tosa.exp %v15 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v17 = tosa.reduce_sum %v16 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v18 = tosa.reciprocal %v17 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v19 = tosa.mul %v16, %v18, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %v20 = tosa.cast %v19 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xbf16>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v22 = tosa.reshape %v20, %sh2x16x16 : (tensor<1x2x16x16xbf16>, !tosa.shape<3>) -> tensor<2x16x16xbf16>
  %v23 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xbf16>, !tosa.shape<3>) -> tensor<2x16x8xbf16>
  %v24 = tosa.matmul %v22, %v23, %zp_bf16, %zp_bf16 : (tensor<2x16x16xbf16>, tensor<2x16x8xbf16>, tensor<1xbf16>, tensor<1xbf16>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v26 = tosa.reshape %v24, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  %v27 = tosa.cast %v26 : (tensor<1x2x16x8xf32>) -> tensor<1x2x16x8xbf16>
  return %v27 : tensor<1x2x16x8xbf16>
}

// -----

// A bf16 graph that upcasts the scores to f32 for the softmax and casts the probabilities back.
// CHECK-LABEL: func.func @bf16_softmax_upcast
// CHECK-NOT:     tosa.cast
// CHECK:         kiln.attention {{.*}} {scale = 0.353515625 : f32} : tensor<1x2x16x8xbf16>
func.func @bf16_softmax_upcast(%q: tensor<1x2x16x8xbf16>, %k: tensor<1x2x16x8xbf16>, %v: tensor<1x2x16x8xbf16>) -> (tensor<1x2x16x8xbf16>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xbf16>, !tosa.shape<3>) -> tensor<2x16x8xbf16>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xbf16>) -> tensor<1x2x8x16xbf16>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xbf16>, !tosa.shape<3>) -> tensor<2x8x16xbf16>
  %zp_bf16 = "tosa.const"() {values = dense<0.0> : tensor<1xbf16>} : () -> tensor<1xbf16>
  %v7 = tosa.matmul %v2, %v5, %zp_bf16, %zp_bf16 : (tensor<2x16x8xbf16>, tensor<2x8x16xbf16>, tensor<1xbf16>, tensor<1xbf16>) -> tensor<2x16x16xbf16>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xbf16>, !tosa.shape<4>) -> tensor<1x2x16x16xbf16>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xbf16>} : () -> tensor<1x1x1x1xbf16>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v12 = tosa.mul %v9, %scale, %shift : (tensor<1x2x16x16xbf16>, tensor<1x1x1x1xbf16>, tensor<1xi8>) -> tensor<1x2x16x16xbf16>
  %v13 = tosa.cast %v12 : (tensor<1x2x16x16xbf16>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v13 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v15 = tosa.sub %v13, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v16 = tosa.exp %v15 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v17 = tosa.reduce_sum %v16 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v18 = tosa.reciprocal %v17 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v19 = tosa.mul %v16, %v18, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %v20 = tosa.cast %v19 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xbf16>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v22 = tosa.reshape %v20, %sh2x16x16 : (tensor<1x2x16x16xbf16>, !tosa.shape<3>) -> tensor<2x16x16xbf16>
  %v23 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xbf16>, !tosa.shape<3>) -> tensor<2x16x8xbf16>
  %v24 = tosa.matmul %v22, %v23, %zp_bf16, %zp_bf16 : (tensor<2x16x16xbf16>, tensor<2x16x8xbf16>, tensor<1xbf16>, tensor<1xbf16>) -> tensor<2x16x8xbf16>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v26 = tosa.reshape %v24, %sh1x2x16x8 : (tensor<2x16x8xbf16>, !tosa.shape<4>) -> tensor<1x2x16x8xbf16>
  return %v26 : tensor<1x2x16x8xbf16>
}

// -----

// Q and K widened to f32 before their product, V left in bf16 (so P is rounded to bf16 for P·V): the widening is exact and one bf16 op reads Q and K as they were.
// CHECK-LABEL: func.func @bf16_qk_widened
// CHECK-SAME:    %[[Q:[^:]+]]: tensor<1x2x16x8xbf16>, %[[K:[^:]+]]: tensor<1x2x16x8xbf16>, %[[V:[^:]+]]: tensor<1x2x16x8xbf16>
// CHECK-NOT:     tosa.cast
// CHECK:         kiln.attention %[[Q]], %[[K]], %[[V]] {scale = 0.353553385 : f32} : tensor<1x2x16x8xbf16>
func.func @bf16_qk_widened(%q: tensor<1x2x16x8xbf16>, %k: tensor<1x2x16x8xbf16>, %v: tensor<1x2x16x8xbf16>) -> (tensor<1x2x16x8xbf16>) {
  %qf = tosa.cast %q : (tensor<1x2x16x8xbf16>) -> tensor<1x2x16x8xf32>
  %kf = tosa.cast %k : (tensor<1x2x16x8xbf16>) -> tensor<1x2x16x8xf32>
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %qf, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %kf {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %zp_bf16 = "tosa.const"() {values = dense<0.0> : tensor<1xbf16>} : () -> tensor<1xbf16>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v12 = tosa.mul %v9, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v12 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v15 = tosa.sub %v12, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v16 = tosa.exp %v15 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v17 = tosa.reduce_sum %v16 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v18 = tosa.reciprocal %v17 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v19 = tosa.mul %v16, %v18, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %v20 = tosa.cast %v19 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xbf16>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v22 = tosa.reshape %v20, %sh2x16x16 : (tensor<1x2x16x16xbf16>, !tosa.shape<3>) -> tensor<2x16x16xbf16>
  %v23 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xbf16>, !tosa.shape<3>) -> tensor<2x16x8xbf16>
  %v24 = tosa.matmul %v22, %v23, %zp_bf16, %zp_bf16 : (tensor<2x16x16xbf16>, tensor<2x16x8xbf16>, tensor<1xbf16>, tensor<1xbf16>) -> tensor<2x16x8xbf16>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v26 = tosa.reshape %v24, %sh1x2x16x8 : (tensor<2x16x8xbf16>, !tosa.shape<4>) -> tensor<1x2x16x8xbf16>
  return %v26 : tensor<1x2x16x8xbf16>
}

// -----

// GQA written as reshape [B,Hkv,1,S,D] → tile G → reshape [B,Hq,S,D]: head h reads KV head h / G, so K and V stay unexpanded.
// CHECK-LABEL: func.func @gqa
// CHECK-SAME:    %[[Q:[^:]+]]: tensor<1x4x16x8xf32>, %[[K:[^:]+]]: tensor<1x2x16x8xf32>, %[[V:[^:]+]]: tensor<1x2x16x8xf32>
// CHECK-NOT:     tosa.tile
// CHECK:         kiln.attention %[[Q]], %[[K]], %[[V]] {{.*}} : tensor<1x4x16x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32> -> tensor<1x4x16x8xf32>
func.func @gqa(%q: tensor<1x4x16x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x4x16x8xf32>) {
  %sh4x16x8 = tosa.const_shape {values = dense<[4, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh4x16x8 : (tensor<1x4x16x8xf32>, !tosa.shape<3>) -> tensor<4x16x8xf32>
  %sh1x2x1x16x8 = tosa.const_shape {values = dense<[1, 2, 1, 16, 8]> : tensor<5xindex>} : () -> !tosa.shape<5>
  %v4 = tosa.reshape %k, %sh1x2x1x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<5>) -> tensor<1x2x1x16x8xf32>
  %sh1x1x2x1x1 = tosa.const_shape {values = dense<[1, 1, 2, 1, 1]> : tensor<5xindex>} : () -> !tosa.shape<5>
  %v6 = tosa.tile %v4, %sh1x1x2x1x1 : (tensor<1x2x1x16x8xf32>, !tosa.shape<5>) -> tensor<1x2x2x16x8xf32>
  %sh1x4x16x8 = tosa.const_shape {values = dense<[1, 4, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v8 = tosa.reshape %v6, %sh1x4x16x8 : (tensor<1x2x2x16x8xf32>, !tosa.shape<4>) -> tensor<1x4x16x8xf32>
  %v9 = tosa.transpose %v8 {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x4x16x8xf32>) -> tensor<1x4x8x16xf32>
  %sh4x8x16 = tosa.const_shape {values = dense<[4, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v11 = tosa.reshape %v9, %sh4x8x16 : (tensor<1x4x8x16xf32>, !tosa.shape<3>) -> tensor<4x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v13 = tosa.matmul %v2, %v11, %zp_f32, %zp_f32 : (tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x16x16xf32>
  %sh1x4x16x16 = tosa.const_shape {values = dense<[1, 4, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v15 = tosa.reshape %v13, %sh1x4x16x16 : (tensor<4x16x16xf32>, !tosa.shape<4>) -> tensor<1x4x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v18 = tosa.mul %v15, %scale, %shift : (tensor<1x4x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x4x16x16xf32>
  %max = tosa.reduce_max %v18 {axis = 3 : i32} : (tensor<1x4x16x16xf32>) -> tensor<1x4x16x1xf32>
  %v20 = tosa.sub %v18, %max : (tensor<1x4x16x16xf32>, tensor<1x4x16x1xf32>) -> tensor<1x4x16x16xf32>
  %v21 = tosa.exp %v20 : (tensor<1x4x16x16xf32>) -> tensor<1x4x16x16xf32>
  %v22 = tosa.reduce_sum %v21 {axis = 3 : i32} : (tensor<1x4x16x16xf32>) -> tensor<1x4x16x1xf32>
  %v23 = tosa.reciprocal %v22 : (tensor<1x4x16x1xf32>) -> tensor<1x4x16x1xf32>
  %v24 = tosa.mul %v21, %v23, %shift : (tensor<1x4x16x16xf32>, tensor<1x4x16x1xf32>, tensor<1xi8>) -> tensor<1x4x16x16xf32>
  %sh4x16x16 = tosa.const_shape {values = dense<[4, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v26 = tosa.reshape %v24, %sh4x16x16 : (tensor<1x4x16x16xf32>, !tosa.shape<3>) -> tensor<4x16x16xf32>
  %v27 = tosa.reshape %v, %sh1x2x1x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<5>) -> tensor<1x2x1x16x8xf32>
  %v28 = tosa.tile %v27, %sh1x1x2x1x1 : (tensor<1x2x1x16x8xf32>, !tosa.shape<5>) -> tensor<1x2x2x16x8xf32>
  %v29 = tosa.reshape %v28, %sh1x4x16x8 : (tensor<1x2x2x16x8xf32>, !tosa.shape<4>) -> tensor<1x4x16x8xf32>
  %v30 = tosa.reshape %v29, %sh4x16x8 : (tensor<1x4x16x8xf32>, !tosa.shape<3>) -> tensor<4x16x8xf32>
  %v31 = tosa.matmul %v26, %v30, %zp_f32, %zp_f32 : (tensor<4x16x16xf32>, tensor<4x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x16x8xf32>
  %v32 = tosa.reshape %v31, %sh1x4x16x8 : (tensor<4x16x8xf32>, !tosa.shape<4>) -> tensor<1x4x16x8xf32>
  return %v32 : tensor<1x4x16x8xf32>
}

// -----

// MQA: a single KV head tiled over the heads; any repeat of one head is h / G.
// CHECK-LABEL: func.func @mqa
// CHECK-NOT:     tosa.tile
// CHECK:         kiln.attention {{.*}} : tensor<1x4x16x8xf32>, tensor<1x1x16x8xf32>, tensor<1x1x16x8xf32>
func.func @mqa(%q: tensor<1x4x16x8xf32>, %k: tensor<1x1x16x8xf32>, %v: tensor<1x1x16x8xf32>) -> (tensor<1x4x16x8xf32>) {
  %sh4x16x8 = tosa.const_shape {values = dense<[4, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh4x16x8 : (tensor<1x4x16x8xf32>, !tosa.shape<3>) -> tensor<4x16x8xf32>
  %sh1x4x1x1 = tosa.const_shape {values = dense<[1, 4, 1, 1]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v4 = tosa.tile %k, %sh1x4x1x1 : (tensor<1x1x16x8xf32>, !tosa.shape<4>) -> tensor<1x4x16x8xf32>
  %v5 = tosa.transpose %v4 {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x4x16x8xf32>) -> tensor<1x4x8x16xf32>
  %sh4x8x16 = tosa.const_shape {values = dense<[4, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v7 = tosa.reshape %v5, %sh4x8x16 : (tensor<1x4x8x16xf32>, !tosa.shape<3>) -> tensor<4x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v9 = tosa.matmul %v2, %v7, %zp_f32, %zp_f32 : (tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x16x16xf32>
  %sh1x4x16x16 = tosa.const_shape {values = dense<[1, 4, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v11 = tosa.reshape %v9, %sh1x4x16x16 : (tensor<4x16x16xf32>, !tosa.shape<4>) -> tensor<1x4x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v14 = tosa.mul %v11, %scale, %shift : (tensor<1x4x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x4x16x16xf32>
  %max = tosa.reduce_max %v14 {axis = 3 : i32} : (tensor<1x4x16x16xf32>) -> tensor<1x4x16x1xf32>
  %v16 = tosa.sub %v14, %max : (tensor<1x4x16x16xf32>, tensor<1x4x16x1xf32>) -> tensor<1x4x16x16xf32>
  %v17 = tosa.exp %v16 : (tensor<1x4x16x16xf32>) -> tensor<1x4x16x16xf32>
  %v18 = tosa.reduce_sum %v17 {axis = 3 : i32} : (tensor<1x4x16x16xf32>) -> tensor<1x4x16x1xf32>
  %v19 = tosa.reciprocal %v18 : (tensor<1x4x16x1xf32>) -> tensor<1x4x16x1xf32>
  %v20 = tosa.mul %v17, %v19, %shift : (tensor<1x4x16x16xf32>, tensor<1x4x16x1xf32>, tensor<1xi8>) -> tensor<1x4x16x16xf32>
  %sh4x16x16 = tosa.const_shape {values = dense<[4, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v22 = tosa.reshape %v20, %sh4x16x16 : (tensor<1x4x16x16xf32>, !tosa.shape<3>) -> tensor<4x16x16xf32>
  %v23 = tosa.tile %v, %sh1x4x1x1 : (tensor<1x1x16x8xf32>, !tosa.shape<4>) -> tensor<1x4x16x8xf32>
  %v24 = tosa.reshape %v23, %sh4x16x8 : (tensor<1x4x16x8xf32>, !tosa.shape<3>) -> tensor<4x16x8xf32>
  %v25 = tosa.matmul %v22, %v24, %zp_f32, %zp_f32 : (tensor<4x16x16xf32>, tensor<4x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x16x8xf32>
  %sh1x4x16x8 = tosa.const_shape {values = dense<[1, 4, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v27 = tosa.reshape %v25, %sh1x4x16x8 : (tensor<4x16x8xf32>, !tosa.shape<4>) -> tensor<1x4x16x8xf32>
  return %v27 : tensor<1x4x16x8xf32>
}

// -----

// A tile of 2 KV heads along the head axis repeats them as h % Hkv, not h / G: fused, but with the tiled K (no GQA claimed).
// CHECK-LABEL: func.func @tile_heads
// CHECK:         %[[KREP:.*]] = tosa.tile
// CHECK:         kiln.attention %{{[^,]*}}, %[[KREP]], {{.*}} : tensor<1x4x16x8xf32>, tensor<1x4x16x8xf32>, tensor<1x4x16x8xf32>
func.func @tile_heads(%q: tensor<1x4x16x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x4x16x8xf32>) -> (tensor<1x4x16x8xf32>) {
  %sh4x16x8 = tosa.const_shape {values = dense<[4, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh4x16x8 : (tensor<1x4x16x8xf32>, !tosa.shape<3>) -> tensor<4x16x8xf32>
  %sh1x2x1x1 = tosa.const_shape {values = dense<[1, 2, 1, 1]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v4 = tosa.tile %k, %sh1x2x1x1 : (tensor<1x2x16x8xf32>, !tosa.shape<4>) -> tensor<1x4x16x8xf32>
  %v5 = tosa.transpose %v4 {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x4x16x8xf32>) -> tensor<1x4x8x16xf32>
  %sh4x8x16 = tosa.const_shape {values = dense<[4, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v7 = tosa.reshape %v5, %sh4x8x16 : (tensor<1x4x8x16xf32>, !tosa.shape<3>) -> tensor<4x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v9 = tosa.matmul %v2, %v7, %zp_f32, %zp_f32 : (tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x16x16xf32>
  %sh1x4x16x16 = tosa.const_shape {values = dense<[1, 4, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v11 = tosa.reshape %v9, %sh1x4x16x16 : (tensor<4x16x16xf32>, !tosa.shape<4>) -> tensor<1x4x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v14 = tosa.mul %v11, %scale, %shift : (tensor<1x4x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x4x16x16xf32>
  %max = tosa.reduce_max %v14 {axis = 3 : i32} : (tensor<1x4x16x16xf32>) -> tensor<1x4x16x1xf32>
  %v16 = tosa.sub %v14, %max : (tensor<1x4x16x16xf32>, tensor<1x4x16x1xf32>) -> tensor<1x4x16x16xf32>
  %v17 = tosa.exp %v16 : (tensor<1x4x16x16xf32>) -> tensor<1x4x16x16xf32>
  %v18 = tosa.reduce_sum %v17 {axis = 3 : i32} : (tensor<1x4x16x16xf32>) -> tensor<1x4x16x1xf32>
  %v19 = tosa.reciprocal %v18 : (tensor<1x4x16x1xf32>) -> tensor<1x4x16x1xf32>
  %v20 = tosa.mul %v17, %v19, %shift : (tensor<1x4x16x16xf32>, tensor<1x4x16x1xf32>, tensor<1xi8>) -> tensor<1x4x16x16xf32>
  %sh4x16x16 = tosa.const_shape {values = dense<[4, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v22 = tosa.reshape %v20, %sh4x16x16 : (tensor<1x4x16x16xf32>, !tosa.shape<3>) -> tensor<4x16x16xf32>
  %v23 = tosa.reshape %v, %sh4x16x8 : (tensor<1x4x16x8xf32>, !tosa.shape<3>) -> tensor<4x16x8xf32>
  %v24 = tosa.matmul %v22, %v23, %zp_f32, %zp_f32 : (tensor<4x16x16xf32>, tensor<4x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x16x8xf32>
  %sh1x4x16x8 = tosa.const_shape {values = dense<[1, 4, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v26 = tosa.reshape %v24, %sh1x4x16x8 : (tensor<4x16x8xf32>, !tosa.shape<4>) -> tensor<1x4x16x8xf32>
  return %v26 : tensor<1x4x16x8xf32>
}

// -----

// Q, K, V from transpose [0,2,1,3] of [B,S,H,D]: the head transposes stay, the K transpose for QKᵀ goes.
// CHECK-LABEL: func.func @bshd
// CHECK:         %[[Q:.*]] = tosa.transpose %{{.*}} {perms = array<i32: 0, 2, 1, 3>}
// CHECK:         %[[K:.*]] = tosa.transpose %{{.*}} {perms = array<i32: 0, 2, 1, 3>}
// CHECK:         %[[V:.*]] = tosa.transpose %{{.*}} {perms = array<i32: 0, 2, 1, 3>}
// CHECK-NOT:     array<i32: 0, 1, 3, 2>
// CHECK:         kiln.attention %[[Q]], %[[K]], %[[V]]
func.func @bshd(%q: tensor<1x16x2x8xf32>, %k: tensor<1x16x2x8xf32>, %v: tensor<1x16x2x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %v1 = tosa.transpose %q {perms = array<i32: 0, 2, 1, 3>} : (tensor<1x16x2x8xf32>) -> tensor<1x2x16x8xf32>
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v3 = tosa.reshape %v1, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v4 = tosa.transpose %k {perms = array<i32: 0, 2, 1, 3>} : (tensor<1x16x2x8xf32>) -> tensor<1x2x16x8xf32>
  %v5 = tosa.transpose %v4 {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v7 = tosa.reshape %v5, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v9 = tosa.matmul %v3, %v7, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v11 = tosa.reshape %v9, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v14 = tosa.mul %v11, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v14 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v16 = tosa.sub %v14, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v17 = tosa.exp %v16 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v18 = tosa.reduce_sum %v17 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v19 = tosa.reciprocal %v18 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v20 = tosa.mul %v17, %v19, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v22 = tosa.reshape %v20, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v23 = tosa.transpose %v {perms = array<i32: 0, 2, 1, 3>} : (tensor<1x16x2x8xf32>) -> tensor<1x2x16x8xf32>
  %v24 = tosa.reshape %v23, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v25 = tosa.matmul %v22, %v24, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v27 = tosa.reshape %v25, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v27 : tensor<1x2x16x8xf32>
}

// -----

// Two additive terms: the one nearer the product (a per-head bias) is `bias`, the other `mask`.
// CHECK-LABEL: func.func @bias_and_mask
// CHECK-SAME:    %[[BIAS:[^:]+]]: tensor<1x2x16x16xf32>, %[[MASK:[^:]+]]: tensor<1x1x1x16xf32>
// CHECK-NOT:     tosa.add
// CHECK:         kiln.attention {{.*}} mask(%[[MASK]] : tensor<1x1x1x16xf32>) bias(%[[BIAS]] : tensor<1x2x16x16xf32>)
func.func @bias_and_mask(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %bias: tensor<1x2x16x16xf32>, %mask: tensor<1x1x1x16xf32>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v12 = tosa.mul %v9, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %v13 = tosa.add %v12, %bias : (tensor<1x2x16x16xf32>, tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v14 = tosa.add %v13, %mask : (tensor<1x2x16x16xf32>, tensor<1x1x1x16xf32>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v14 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v16 = tosa.sub %v14, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v17 = tosa.exp %v16 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v18 = tosa.reduce_sum %v17 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v19 = tosa.reciprocal %v18 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v20 = tosa.mul %v17, %v19, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v22 = tosa.reshape %v20, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v23 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v24 = tosa.matmul %v22, %v23, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v26 = tosa.reshape %v24, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v26 : tensor<1x2x16x8xf32>
}

// -----

// An additive bias and a boolean select mask: the boolean is `mask`, the float is `bias`.
// CHECK-LABEL: func.func @bool_mask_and_bias
// CHECK-SAME:    %[[BIAS:[^:]+]]: tensor<1x2x16x16xf32>, %[[COND:[^:]+]]: tensor<1x1x1x16xi1>
// CHECK:         kiln.attention {{.*}} mask(%[[COND]] : tensor<1x1x1x16xi1>) bias(%[[BIAS]] : tensor<1x2x16x16xf32>)
func.func @bool_mask_and_bias(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %bias: tensor<1x2x16x16xf32>, %cond: tensor<1x1x1x16xi1>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v12 = tosa.mul %v9, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %v13 = tosa.add %v12, %bias : (tensor<1x2x16x16xf32>, tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %fill = "tosa.const"() {values = dense<0xFF800000> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %v15 = tosa.select %cond, %v13, %fill : (tensor<1x1x1x16xi1>, tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v15 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v17 = tosa.sub %v15, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v18 = tosa.exp %v17 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v19 = tosa.reduce_sum %v18 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v20 = tosa.reciprocal %v19 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v21 = tosa.mul %v18, %v20, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v23 = tosa.reshape %v21, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v24 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v25 = tosa.matmul %v23, %v24, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v27 = tosa.reshape %v25, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v27 : tensor<1x2x16x8xf32>
}

// -----

// PyTorch's SDPA decomposition as exported: Q/K/V from [B,S,H,D] (K through [0,2,3,1]), a scale on Q, an additive mask built as select(keep, 0, -inf), and the NaN guard select(isnan(p), 0, p) after the softmax (the op's zeros for a row that sees no key). The mask becomes the boolean `keep`; the K transposes compose into one [0,2,1,3].
// CHECK-LABEL: func.func @sdpa_export
// CHECK-SAME:    %[[QS:[^:]+]]: tensor<1x16x2x8xf32>, %[[KS:[^:]+]]: tensor<1x16x2x8xf32>, %[[KEEP:[^:]+]]: tensor<1x1x16x16xi1>, %[[VS:[^:]+]]: tensor<1x16x2x8xf32>
// CHECK-DAG:     %[[Q:.*]] = tosa.transpose %[[QS]] {perms = array<i32: 0, 2, 1, 3>}
// CHECK-DAG:     %[[V:.*]] = tosa.transpose %[[VS]] {perms = array<i32: 0, 2, 1, 3>}
// CHECK-DAG:     %[[K:.*]] = tosa.transpose %[[KS]] {perms = array<i32: 0, 2, 1, 3>}
// CHECK-NOT:     tosa.select
// CHECK:         kiln.attention %[[Q]], %[[K]], %[[V]] mask(%[[KEEP]] : tensor<1x1x16x16xi1>) {scale = 0.594603539 : f32}
// CHECK-NOT:     tosa.equal
func.func @sdpa_export(%q: tensor<1x16x2x8xf32>, %k: tensor<1x16x2x8xf32>, %keep: tensor<1x1x16x16xi1>, %v: tensor<1x16x2x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %v1 = tosa.transpose %q {perms = array<i32: 0, 2, 1, 3>} : (tensor<1x16x2x8xf32>) -> tensor<1x2x16x8xf32>
  %cq = "tosa.const"() {values = dense<0.59460355> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v4 = tosa.mul %v1, %cq, %shift : (tensor<1x2x16x8xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x8xf32>
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v6 = tosa.reshape %v4, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v7 = tosa.transpose %k {perms = array<i32: 0, 2, 3, 1>} : (tensor<1x16x2x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v9 = tosa.reshape %v7, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v11 = tosa.matmul %v6, %v9, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v13 = tosa.reshape %v11, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %zero = "tosa.const"() {values = dense<0.0> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %neg_inf = "tosa.const"() {values = dense<0xFF800000> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %v16 = tosa.select %keep, %zero, %neg_inf : (tensor<1x1x16x16xi1>, tensor<1x1x1x1xf32>, tensor<1x1x1x1xf32>) -> tensor<1x1x16x16xf32>
  %v17 = tosa.add %v13, %v16 : (tensor<1x2x16x16xf32>, tensor<1x1x16x16xf32>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v17 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v19 = tosa.sub %v17, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v20 = tosa.exp %v19 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v21 = tosa.reduce_sum %v20 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v22 = tosa.reciprocal %v21 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v23 = tosa.mul %v20, %v22, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %v24 = tosa.equal %v23, %v23 : (tensor<1x2x16x16xf32>, tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xi1>
  %v25 = tosa.logical_not %v24 : (tensor<1x2x16x16xi1>) -> tensor<1x2x16x16xi1>
  %zero_p = "tosa.const"() {values = dense<0.0> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %v27 = tosa.select %v25, %zero_p, %v23 : (tensor<1x2x16x16xi1>, tensor<1x1x1x1xf32>, tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v29 = tosa.reshape %v27, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v30 = tosa.transpose %v {perms = array<i32: 0, 2, 1, 3>} : (tensor<1x16x2x8xf32>) -> tensor<1x2x16x8xf32>
  %v31 = tosa.reshape %v30, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v32 = tosa.matmul %v29, %v31, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v34 = tosa.reshape %v32, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v34 : tensor<1x2x16x8xf32>
}

// -----

// Adding a splat-zero mask (ViT's export) changes nothing and is dropped.
// CHECK-LABEL: func.func @zero_mask
// CHECK-NOT:     tosa.const
// CHECK:         kiln.attention %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} {scale = 0.353553385 : f32}
func.func @zero_mask(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v12 = tosa.mul %v9, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %mc = "tosa.const"() {values = dense<0.0> : tensor<1x1x16x16xf32>} : () -> tensor<1x1x16x16xf32>
  %v14 = tosa.add %v12, %mc : (tensor<1x2x16x16xf32>, tensor<1x1x16x16xf32>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v14 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v16 = tosa.sub %v14, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v17 = tosa.exp %v16 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v18 = tosa.reduce_sum %v17 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v19 = tosa.reciprocal %v18 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v20 = tosa.mul %v17, %v19, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v22 = tosa.reshape %v20, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v23 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v24 = tosa.matmul %v22, %v23, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v26 = tosa.reshape %v24, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v26 : tensor<1x2x16x8xf32>
}

// -----

// A softmax over axis 2 (the queries) is not attention.
// CHECK-LABEL: func.func @softmax_axis
// CHECK-NOT:     kiln.attention
// CHECK:         tosa.reduce_max
func.func @softmax_axis(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v12 = tosa.mul %v9, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v12 {axis = 2 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x1x16xf32>
  // expected-remark @above {{softmax not fused: softmax over axis 2, not the last axis 3}}
  %v14 = tosa.sub %v12, %max : (tensor<1x2x16x16xf32>, tensor<1x2x1x16xf32>) -> tensor<1x2x16x16xf32>
  %v15 = tosa.exp %v14 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v16 = tosa.reduce_sum %v15 {axis = 2 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x1x16xf32>
  %v17 = tosa.reciprocal %v16 : (tensor<1x2x1x16xf32>) -> tensor<1x2x1x16xf32>
  %v18 = tosa.mul %v15, %v17, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x1x16xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v20 = tosa.reshape %v18, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v21 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v22 = tosa.matmul %v20, %v21, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v24 = tosa.reshape %v22, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v24 : tensor<1x2x16x8xf32>
}

// -----

// Max over the keys but sum over the queries is not a softmax at all.
// CHECK-LABEL: func.func @sum_axis
// CHECK-NOT:     kiln.attention
// CHECK:         tosa.reduce_max
func.func @sum_axis(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v12 = tosa.mul %v9, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v12 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  // expected-remark @above {{softmax not fused: reduce_sum axis 2 differs from reduce_max axis 3}}
  %v14 = tosa.sub %v12, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v15 = tosa.exp %v14 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v16 = tosa.reduce_sum %v15 {axis = 2 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x1x16xf32>
  %v17 = tosa.reciprocal %v16 : (tensor<1x2x1x16xf32>) -> tensor<1x2x1x16xf32>
  %v18 = tosa.mul %v15, %v17, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x1x16xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v20 = tosa.reshape %v18, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v21 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v22 = tosa.matmul %v20, %v21, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v24 = tosa.reshape %v22, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v24 : tensor<1x2x16x8xf32>
}

// -----

// The product on the wrong side (V·P) is not attention.
// CHECK-LABEL: func.func @pv_swapped
// CHECK-NOT:     kiln.attention
// CHECK:         tosa.reduce_max
func.func @pv_swapped(%q: tensor<1x2x8x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) -> (tensor<1x2x8x8xf32>) {
  %sh2x8x8 = tosa.const_shape {values = dense<[2, 8, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x8x8 : (tensor<1x2x8x8xf32>, !tosa.shape<3>) -> tensor<2x8x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32>
  %v4 = tosa.reshape %v3, %sh2x8x8 : (tensor<1x2x8x8xf32>, !tosa.shape<3>) -> tensor<2x8x8xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v6 = tosa.matmul %v2, %v4, %zp_f32, %zp_f32 : (tensor<2x8x8xf32>, tensor<2x8x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x8x8xf32>
  %sh1x2x8x8 = tosa.const_shape {values = dense<[1, 2, 8, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v8 = tosa.reshape %v6, %sh1x2x8x8 : (tensor<2x8x8xf32>, !tosa.shape<4>) -> tensor<1x2x8x8xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v11 = tosa.mul %v8, %scale, %shift : (tensor<1x2x8x8xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x8x8xf32>
  %max = tosa.reduce_max %v11 {axis = 3 : i32} : (tensor<1x2x8x8xf32>) -> tensor<1x2x8x1xf32>
  // expected-remark @above {{softmax not fused: the probabilities are the right-hand side of the product (V·P)}}
  %v13 = tosa.sub %v11, %max : (tensor<1x2x8x8xf32>, tensor<1x2x8x1xf32>) -> tensor<1x2x8x8xf32>
  %v14 = tosa.exp %v13 : (tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32>
  %v15 = tosa.reduce_sum %v14 {axis = 3 : i32} : (tensor<1x2x8x8xf32>) -> tensor<1x2x8x1xf32>
  %v16 = tosa.reciprocal %v15 : (tensor<1x2x8x1xf32>) -> tensor<1x2x8x1xf32>
  %v17 = tosa.mul %v14, %v16, %shift : (tensor<1x2x8x8xf32>, tensor<1x2x8x1xf32>, tensor<1xi8>) -> tensor<1x2x8x8xf32>
  %v18 = tosa.reshape %v17, %sh2x8x8 : (tensor<1x2x8x8xf32>, !tosa.shape<3>) -> tensor<2x8x8xf32>
  %v19 = tosa.reshape %v, %sh2x8x8 : (tensor<1x2x8x8xf32>, !tosa.shape<3>) -> tensor<2x8x8xf32>
  %v20 = tosa.matmul %v19, %v18, %zp_f32, %zp_f32 : (tensor<2x8x8xf32>, tensor<2x8x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x8x8xf32>
  %v21 = tosa.reshape %v20, %sh1x2x8x8 : (tensor<2x8x8xf32>, !tosa.shape<4>) -> tensor<1x2x8x8xf32>
  return %v21 : tensor<1x2x8x8xf32>
}

// -----

// The probabilities are also returned (attention weights as an output): fusing would lose them.
// CHECK-LABEL: func.func @probs_returned
// CHECK-NOT:     kiln.attention
// CHECK:         tosa.reduce_max
func.func @probs_returned(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>, tensor<1x2x16x16xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v12 = tosa.mul %v9, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v12 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  // expected-remark @above {{softmax not fused: the probabilities have other users}}
  %v14 = tosa.sub %v12, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v15 = tosa.exp %v14 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v16 = tosa.reduce_sum %v15 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v17 = tosa.reciprocal %v16 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v18 = tosa.mul %v15, %v17, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v20 = tosa.reshape %v18, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v21 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v22 = tosa.matmul %v20, %v21, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v24 = tosa.reshape %v22, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v24, %v18 : tensor<1x2x16x8xf32>, tensor<1x2x16x16xf32>
}

// -----

// The masked scores are also returned.
// CHECK-LABEL: func.func @scores_returned
// CHECK-NOT:     kiln.attention
// CHECK:         tosa.reduce_max
func.func @scores_returned(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>, tensor<1x2x16x16xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v12 = tosa.mul %v9, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v12 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  // expected-remark @above {{softmax not fused: the scores have other users}}
  %v14 = tosa.sub %v12, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v15 = tosa.exp %v14 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v16 = tosa.reduce_sum %v15 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v17 = tosa.reciprocal %v16 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v18 = tosa.mul %v15, %v17, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v20 = tosa.reshape %v18, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v21 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v22 = tosa.matmul %v20, %v21, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v24 = tosa.reshape %v22, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v24, %v12 : tensor<1x2x16x8xf32>, tensor<1x2x16x16xf32>
}

// -----

// A constant scale per head ([1, H, 1, 1], not a splat) is a per-head
// scale_factor: the op's [Hq] f32 operand.
// CHECK-LABEL: func.func @nonsplat_scale
// CHECK:         %[[F:.*]] = tosa.reshape %{{.*}}, %{{.*}} : (tensor<1x2x1x1xf32>, !tosa.shape<1>) -> tensor<2xf32>
// CHECK:         kiln.attention %{{.*}}, %{{.*}}, %{{.*}} scale_factor(%[[F]] : tensor<2xf32>) {scale = 1.000000e+00 : f32}
// CHECK-NOT:     tosa.reduce_max
func.func @nonsplat_scale(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %scale = "tosa.const"() {values = dense<[[[[0.5]], [[0.25]]]]> : tensor<1x2x1x1xf32>} : () -> tensor<1x2x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v12 = tosa.mul %v9, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v12 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v14 = tosa.sub %v12, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v15 = tosa.exp %v14 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v16 = tosa.reduce_sum %v15 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v17 = tosa.reciprocal %v16 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v18 = tosa.mul %v15, %v17, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v20 = tosa.reshape %v18, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v21 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v22 = tosa.matmul %v20, %v21, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v24 = tosa.reshape %v22, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v24 : tensor<1x2x16x8xf32>
}

// -----

// A scale computed at run time (one element) is the op's scale_factor.
// CHECK-LABEL: func.func @runtime_scale
// CHECK-SAME:    %[[SCALE:[a-z0-9]+]]: tensor<1x1x1x1xf32>
// CHECK:         kiln.attention %{{.*}}, %{{.*}}, %{{.*}} scale_factor(%[[SCALE]] : tensor<1x1x1x1xf32>) {scale = 1.000000e+00 : f32}
// CHECK-NOT:     tosa.reduce_max
func.func @runtime_scale(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %scale: tensor<1x1x1x1xf32>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v11 = tosa.mul %v9, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v11 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v13 = tosa.sub %v11, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v14 = tosa.exp %v13 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v15 = tosa.reduce_sum %v14 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v16 = tosa.reciprocal %v15 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v17 = tosa.mul %v14, %v16, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v19 = tosa.reshape %v17, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v20 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v21 = tosa.matmul %v19, %v20, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v23 = tosa.reshape %v21, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v23 : tensor<1x2x16x8xf32>
}

// -----

// select(cond, x, 0) does not hide keys.
// CHECK-LABEL: func.func @select_fill_zero
// CHECK-NOT:     kiln.attention
// CHECK:         tosa.reduce_max
func.func @select_fill_zero(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %cond: tensor<1x1x1x16xi1>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v12 = tosa.mul %v9, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %fill = "tosa.const"() {values = dense<0.0> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %v14 = tosa.select %cond, %v12, %fill : (tensor<1x1x1x16xi1>, tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v14 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  // expected-remark @above {{softmax not fused: the select fill is not -inf or a large negative constant}}
  %v16 = tosa.sub %v14, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v17 = tosa.exp %v16 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v18 = tosa.reduce_sum %v17 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v19 = tosa.reciprocal %v18 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v20 = tosa.mul %v17, %v19, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v22 = tosa.reshape %v20, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v23 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v24 = tosa.matmul %v22, %v23, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v26 = tosa.reshape %v24, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v26 : tensor<1x2x16x8xf32>
}

// -----

// A static causal mask the importer folded to a constant of zeros and
// finfo.min, added before the scale (CodeGen exported): still a band.
// CHECK-LABEL: func.func @causal_constant_before_scale
// CHECK:         kiln.attention %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} {causal, scale = 0.353553385 : f32}
func.func @causal_constant_before_scale(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %mask = "tosa.const"() {values = dense<[[[[0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0, 0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x16x16xf32>} : () -> tensor<1x1x16x16xf32>
  %v10 = tosa.add %v9, %mask : (tensor<1x2x16x16xf32>, tensor<1x1x16x16xf32>) -> tensor<1x2x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %v13 = tosa.mul %v10, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v13 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v16 = tosa.sub %v13, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v17 = tosa.exp %v16 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v18 = tosa.reduce_sum %v17 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v19 = tosa.reciprocal %v18 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v20 = tosa.mul %v17, %v19, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v22 = tosa.reshape %v20, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v23 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v24 = tosa.matmul %v22, %v23, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v26 = tosa.reshape %v24, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v26 : tensor<1x2x16x8xf32>
}

// -----

// A constant mask that is no band, added before a scale of 1/4: the op's
// mask operand holds its values scaled.
// CHECK-LABEL: func.func @constant_mask_before_scale
// CHECK:         %[[SCALED:.*]] = "tosa.const"() <{values = dense<{{\[\[\[\[}}0.000000e+00, {{.*}}, -8.50705867E+37]]]]>
// CHECK:         kiln.attention {{.*}} mask(%[[SCALED]] : tensor<1x1x1x16xf32>)
func.func @constant_mask_before_scale(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %mask = "tosa.const"() {values = dense<[[[[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38]]]]> : tensor<1x1x1x16xf32>} : () -> tensor<1x1x1x16xf32>
  %v10 = tosa.add %v9, %mask : (tensor<1x2x16x16xf32>, tensor<1x1x1x16xf32>) -> tensor<1x2x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.25> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %v13 = tosa.mul %v10, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v13 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v16 = tosa.sub %v13, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v17 = tosa.exp %v16 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v18 = tosa.reduce_sum %v17 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v19 = tosa.reciprocal %v18 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v20 = tosa.mul %v17, %v19, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v22 = tosa.reshape %v20, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v23 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v24 = tosa.matmul %v22, %v23, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v26 = tosa.reshape %v24, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v26 : tensor<1x2x16x8xf32>
}

// GPT-Neo at a batch too large to fold: where(band, s, f32 min) plus the
// model's own causal mask, the band constant tiled over the scores' leading
// axes and built into where(keep, 0, bf16 min). Two finite fills combine
// exactly only where both are one band.
// CHECK-LABEL: func.func @tiled_band_constant
// CHECK:         kiln.attention %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} {causal, scale = 1.000000e+00 : f32}
func.func @tiled_band_constant(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %band = "tosa.const"() {values = dense<[[[[true, false, false, false, false, false, false, false, false, false, false, false, false, false, false, false], [true, true, false, false, false, false, false, false, false, false, false, false, false, false, false, false], [true, true, true, false, false, false, false, false, false, false, false, false, false, false, false, false], [true, true, true, true, false, false, false, false, false, false, false, false, false, false, false, false], [true, true, true, true, true, false, false, false, false, false, false, false, false, false, false, false], [true, true, true, true, true, true, false, false, false, false, false, false, false, false, false, false], [true, true, true, true, true, true, true, false, false, false, false, false, false, false, false, false], [true, true, true, true, true, true, true, true, false, false, false, false, false, false, false, false], [true, true, true, true, true, true, true, true, true, false, false, false, false, false, false, false], [true, true, true, true, true, true, true, true, true, true, false, false, false, false, false, false], [true, true, true, true, true, true, true, true, true, true, true, false, false, false, false, false], [true, true, true, true, true, true, true, true, true, true, true, true, false, false, false, false], [true, true, true, true, true, true, true, true, true, true, true, true, true, false, false, false], [true, true, true, true, true, true, true, true, true, true, true, true, true, true, false, false], [true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, false], [true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true]]]]> : tensor<1x1x16x16xi1>} : () -> tensor<1x1x16x16xi1>
  %multiples = tosa.const_shape {values = dense<[1, 2, 1, 1]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %keep = tosa.tile %band, %multiples : (tensor<1x1x16x16xi1>, !tosa.shape<4>) -> tensor<1x2x16x16xi1>
  %zero = "tosa.const"() {values = dense<0.0> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %min = "tosa.const"() {values = dense<-3.40282347E+38> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %bf16min = "tosa.const"() {values = dense<-3.38953139E+38> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %hidden = tosa.select %band, %v9, %min : (tensor<1x1x16x16xi1>, tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>) -> tensor<1x2x16x16xf32>
  %mask = tosa.select %keep, %zero, %bf16min : (tensor<1x2x16x16xi1>, tensor<1x1x1x1xf32>, tensor<1x1x1x1xf32>) -> tensor<1x2x16x16xf32>
  %v13 = tosa.add %hidden, %mask : (tensor<1x2x16x16xf32>, tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v13 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v16 = tosa.sub %v13, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v17 = tosa.exp %v16 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v18 = tosa.reduce_sum %v17 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v19 = tosa.reciprocal %v18 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v20 = tosa.mul %v17, %v19, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v22 = tosa.reshape %v20, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v23 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v24 = tosa.matmul %v22, %v23, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v26 = tosa.reshape %v24, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v26 : tensor<1x2x16x8xf32>
}

// CodeGen's order, (QKᵀ + where(keep, 0, finfo.min)) · c: the scale reaches
// the fill only, so the boolean mask fuses with the fill scaled.
// CHECK-LABEL: func.func @bool_mask_before_scale
// CHECK-SAME:    %[[KEEP:[^:]+]]: tensor<1x1x1x16xi1>
// CHECK-NOT:     tosa.select
// CHECK:         kiln.attention {{.*}} mask(%[[KEEP]] : tensor<1x1x1x16xi1>) {{.*}}masked_score = -1.20{{[0-9]*}}E+38 : f32, scale = 0.353553385 : f32}
func.func @bool_mask_before_scale(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %keep: tensor<1x1x1x16xi1>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %zero = "tosa.const"() {values = dense<0.0> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %min = "tosa.const"() {values = dense<-3.40282347E+38> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %mask = tosa.select %keep, %zero, %min : (tensor<1x1x1x16xi1>, tensor<1x1x1x1xf32>, tensor<1x1x1x1xf32>) -> tensor<1x1x1x16xf32>
  %v10 = tosa.add %v9, %mask : (tensor<1x2x16x16xf32>, tensor<1x1x1x16xf32>) -> tensor<1x2x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %v13 = tosa.mul %v10, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v13 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v16 = tosa.sub %v13, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v17 = tosa.exp %v16 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v18 = tosa.reduce_sum %v17 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v19 = tosa.reciprocal %v18 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v20 = tosa.mul %v17, %v19, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v22 = tosa.reshape %v20, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v23 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v24 = tosa.matmul %v22, %v23, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v26 = tosa.reshape %v24, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v26 : tensor<1x2x16x8xf32>
}

// -----

// where(keep, QKᵀ, -inf) · c: -inf · c hides the key still.
// CHECK-LABEL: func.func @select_before_scale
// CHECK-SAME:    %[[KEEP:[^:]+]]: tensor<1x1x1x16xi1>
// CHECK-NOT:     tosa.select
// CHECK:         kiln.attention {{.*}} mask(%[[KEEP]] : tensor<1x1x1x16xi1>) {scale = 0.353553385 : f32}
func.func @select_before_scale(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %keep: tensor<1x1x1x16xi1>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %fill = "tosa.const"() {values = dense<0xFF800000> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %v10 = tosa.select %keep, %v9, %fill : (tensor<1x1x1x16xi1>, tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>) -> tensor<1x2x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %v13 = tosa.mul %v10, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v13 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v16 = tosa.sub %v13, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v17 = tosa.exp %v16 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v18 = tosa.reduce_sum %v17 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v19 = tosa.reciprocal %v18 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v20 = tosa.mul %v17, %v19, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v22 = tosa.reshape %v20, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v23 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v24 = tosa.matmul %v22, %v23, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v26 = tosa.reshape %v24, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v26 : tensor<1x2x16x8xf32>
}

// -----

// A negative scale turns a hiding fill into the largest score: not fused.
// CHECK-LABEL: func.func @select_before_negative_scale
// CHECK-NOT:     kiln.attention
func.func @select_before_negative_scale(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %keep: tensor<1x1x1x16xi1>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %fill = "tosa.const"() {values = dense<0xFF800000> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %v10 = tosa.select %keep, %v9, %fill : (tensor<1x1x1x16xi1>, tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>) -> tensor<1x2x16x16xf32>
  %scale = "tosa.const"() {values = dense<-0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %v13 = tosa.mul %v10, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v13 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  // expected-remark @above {{softmax not fused: a mask is applied before a scale that is not positive}}
  %v16 = tosa.sub %v13, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v17 = tosa.exp %v16 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v18 = tosa.reduce_sum %v17 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v19 = tosa.reciprocal %v18 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v20 = tosa.mul %v17, %v19, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v22 = tosa.reshape %v20, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v23 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v24 = tosa.matmul %v22, %v23, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v26 = tosa.reshape %v24, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v26 : tensor<1x2x16x8xf32>
}

// -----

// (QKᵀ + mask)·c scales the mask too; the op adds the mask after the scale,
// so the fused graph multiplies a mask known only at run time by c first.
// CHECK-LABEL: func.func @mask_before_scale
// CHECK:         %[[C:.*]] = "tosa.const"() <{values = dense<0.353553385> : tensor<1x1x1x1xf32>}>
// CHECK:         %[[SCALED:.*]] = tosa.mul %arg2, %[[C]]
// CHECK:         kiln.attention %arg0, %arg1, %arg3 mask(%[[SCALED]] : tensor<1x1x1x16xf32>) {scale = 0.353553385 : f32}
// CHECK-NOT:     tosa.reduce_max
func.func @mask_before_scale(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %mask: tensor<1x1x1x16xf32>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %v10 = tosa.add %v9, %mask : (tensor<1x2x16x16xf32>, tensor<1x1x1x16xf32>) -> tensor<1x2x16x16xf32>
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v13 = tosa.mul %v10, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v13 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v15 = tosa.sub %v13, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v16 = tosa.exp %v15 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v17 = tosa.reduce_sum %v16 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v18 = tosa.reciprocal %v17 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v19 = tosa.mul %v16, %v18, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v21 = tosa.reshape %v19, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v22 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v23 = tosa.matmul %v21, %v22, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v25 = tosa.reshape %v23, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v25 : tensor<1x2x16x8xf32>
}

// -----

// Llama SDPA export: K repeated (reshape/tile) and collapsed straight to rank 3, transposed there with [0,2,1], split back to rank 4 and scaled; V repeated to rank 4 and collapsed. Both trace to the unrepeated 2-head tensors.
// CHECK-LABEL: func.func @gqa_rank3_transpose
// CHECK-SAME:    %[[Q:[^:]+]]: tensor<1x4x16x8xf32>, %[[K:[^:]+]]: tensor<1x2x16x8xf32>, %[[V:[^:]+]]: tensor<1x2x16x8xf32>
// CHECK-NOT:     tosa.
// CHECK:         kiln.attention %[[Q]], %[[K]], %[[V]] {scale = 0.124999993 : f32}
// CHECK-NOT:     tosa.tile
func.func @gqa_rank3_transpose(%q: tensor<1x4x16x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) -> tensor<1x4x16x8xf32> {
  %sh5 = tosa.const_shape {values = dense<[1, 2, 1, 16, 8]> : tensor<5xindex>} : () -> !tosa.shape<5>
  %rep = tosa.const_shape {values = dense<[1, 1, 2, 1, 1]> : tensor<5xindex>} : () -> !tosa.shape<5>
  %sh3 = tosa.const_shape {values = dense<[4, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %sh3t = tosa.const_shape {values = dense<[4, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %sh4 = tosa.const_shape {values = dense<[1, 4, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %sh4t = tosa.const_shape {values = dense<[1, 4, 8, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %sh4s = tosa.const_shape {values = dense<[1, 4, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %sh3s = tosa.const_shape {values = dense<[4, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %zp = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %k5 = tosa.reshape %k, %sh5 : (tensor<1x2x16x8xf32>, !tosa.shape<5>) -> tensor<1x2x1x16x8xf32>
  %kt5 = tosa.tile %k5, %rep : (tensor<1x2x1x16x8xf32>, !tosa.shape<5>) -> tensor<1x2x2x16x8xf32>
  %v5 = tosa.reshape %v, %sh5 : (tensor<1x2x16x8xf32>, !tosa.shape<5>) -> tensor<1x2x1x16x8xf32>
  %vt5 = tosa.tile %v5, %rep : (tensor<1x2x1x16x8xf32>, !tosa.shape<5>) -> tensor<1x2x2x16x8xf32>
  %v4 = tosa.reshape %vt5, %sh4 : (tensor<1x2x2x16x8xf32>, !tosa.shape<4>) -> tensor<1x4x16x8xf32>
  %k3 = tosa.reshape %kt5, %sh3 : (tensor<1x2x2x16x8xf32>, !tosa.shape<3>) -> tensor<4x16x8xf32>
  %kt3 = tosa.transpose %k3 {perms = array<i32: 0, 2, 1>} : (tensor<4x16x8xf32>) -> tensor<4x8x16xf32>
  %kt4 = tosa.reshape %kt3, %sh4t : (tensor<4x8x16xf32>, !tosa.shape<4>) -> tensor<1x4x8x16xf32>
  %c = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %qs = tosa.mul %q, %c, %shift : (tensor<1x4x16x8xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x4x16x8xf32>
  %kts = tosa.mul %kt4, %c, %shift : (tensor<1x4x8x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x4x8x16xf32>
  %q3 = tosa.reshape %qs, %sh3 : (tensor<1x4x16x8xf32>, !tosa.shape<3>) -> tensor<4x16x8xf32>
  %kts3 = tosa.reshape %kts, %sh3t : (tensor<1x4x8x16xf32>, !tosa.shape<3>) -> tensor<4x8x16xf32>
  %s = tosa.matmul %q3, %kts3, %zp, %zp : (tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x16x16xf32>
  %s4 = tosa.reshape %s, %sh4s : (tensor<4x16x16xf32>, !tosa.shape<4>) -> tensor<1x4x16x16xf32>
  %max = tosa.reduce_max %s4 {axis = 3 : i32} : (tensor<1x4x16x16xf32>) -> tensor<1x4x16x1xf32>
  %d = tosa.sub %s4, %max : (tensor<1x4x16x16xf32>, tensor<1x4x16x1xf32>) -> tensor<1x4x16x16xf32>
  %e = tosa.exp %d : (tensor<1x4x16x16xf32>) -> tensor<1x4x16x16xf32>
  %sum = tosa.reduce_sum %e {axis = 3 : i32} : (tensor<1x4x16x16xf32>) -> tensor<1x4x16x1xf32>
  %r = tosa.reciprocal %sum : (tensor<1x4x16x1xf32>) -> tensor<1x4x16x1xf32>
  %p = tosa.mul %e, %r, %shift : (tensor<1x4x16x16xf32>, tensor<1x4x16x1xf32>, tensor<1xi8>) -> tensor<1x4x16x16xf32>
  %p3 = tosa.reshape %p, %sh3s : (tensor<1x4x16x16xf32>, !tosa.shape<3>) -> tensor<4x16x16xf32>
  %v3 = tosa.reshape %v4, %sh3 : (tensor<1x4x16x8xf32>, !tosa.shape<3>) -> tensor<4x16x8xf32>
  %o = tosa.matmul %p3, %v3, %zp, %zp : (tensor<4x16x16xf32>, tensor<4x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x16x8xf32>
  %o4 = tosa.reshape %o, %sh4 : (tensor<4x16x8xf32>, !tosa.shape<4>) -> tensor<1x4x16x8xf32>
  return %o4 : tensor<1x4x16x8xf32>
}

// -----

// MQA left to MatMul's broadcasting, as the importer writes it: both products
// pack the 4 query heads into their rows ([1, 4·8, D] × [1, D, 8]) over the
// one KV head. The products are unpacked into the batch·heads form with K and
// V tiled over the heads, and the tile folds into kv_heads = 1: K and V reach
// the op untouched, no matmul or tile is left.
// CHECK-LABEL: func.func @mqa_broadcast
// CHECK-SAME: %[[Q:[a-z0-9]+]]: tensor<1x4x8x16xf32>, %[[K:[a-z0-9]+]]: tensor<1x1x8x16xf32>, %[[V:[a-z0-9]+]]: tensor<1x1x8x16xf32>
// CHECK-NOT: tosa.matmul
// CHECK-NOT: tosa.tile
// CHECK: kiln.attention %[[Q]], %[[K]], %[[V]] {scale = 2.500000e-01 : f32} : tensor<1x4x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32> -> tensor<1x4x8x16xf32>
// CHECK-NOT: tosa.matmul
func.func @mqa_broadcast(%q: tensor<1x4x8x16xf32>, %k: tensor<1x1x8x16xf32>, %v: tensor<1x1x8x16xf32>) -> tensor<1x4x8x16xf32> {
  %s4 = tosa.const_shape {values = dense<[1, 4, 8, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v3s = tosa.const_shape {values = dense<[1, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %p3s = tosa.const_shape {values = dense<[1, 32, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %sc4 = tosa.const_shape {values = dense<[1, 4, 8, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %k3s = tosa.const_shape {values = dense<[1, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %q3s = tosa.const_shape {values = dense<[1, 32, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %zp = "tosa.const"() <{values = dense<0.000000e+00> : tensor<1xf32>}> : () -> tensor<1xf32>
  %kt = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x1x8x16xf32>) -> tensor<1x1x16x8xf32>
  %q3 = tosa.reshape %q, %q3s : (tensor<1x4x8x16xf32>, !tosa.shape<3>) -> tensor<1x32x16xf32>
  %k3 = tosa.reshape %kt, %k3s : (tensor<1x1x16x8xf32>, !tosa.shape<3>) -> tensor<1x16x8xf32>
  %qk = tosa.matmul %q3, %k3, %zp, %zp : (tensor<1x32x16xf32>, tensor<1x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x32x8xf32>
  %qk4 = tosa.reshape %qk, %sc4 : (tensor<1x32x8xf32>, !tosa.shape<4>) -> tensor<1x4x8x8xf32>
  %c = "tosa.const"() <{values = dense<2.500000e-01> : tensor<1x1x1x1xf32>}> : () -> tensor<1x1x1x1xf32>
  %scaled = tosa.mul %qk4, %c, %shift : (tensor<1x4x8x8xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x4x8x8xf32>
  %max = tosa.reduce_max %scaled {axis = 3 : i32} : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x1xf32>
  %sub = tosa.sub %scaled, %max : (tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) -> tensor<1x4x8x8xf32>
  %exp = tosa.exp %sub : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %sum = tosa.reduce_sum %exp {axis = 3 : i32} : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x1xf32>
  %rcp = tosa.reciprocal %sum : (tensor<1x4x8x1xf32>) -> tensor<1x4x8x1xf32>
  %p = tosa.mul %exp, %rcp, %shift : (tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>, tensor<1xi8>) -> tensor<1x4x8x8xf32>
  %p3 = tosa.reshape %p, %p3s : (tensor<1x4x8x8xf32>, !tosa.shape<3>) -> tensor<1x32x8xf32>
  %v3 = tosa.reshape %v, %v3s : (tensor<1x1x8x16xf32>, !tosa.shape<3>) -> tensor<1x8x16xf32>
  %pv = tosa.matmul %p3, %v3, %zp, %zp : (tensor<1x32x8xf32>, tensor<1x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x32x16xf32>
  %o = tosa.reshape %pv, %s4 : (tensor<1x32x16xf32>, !tosa.shape<4>) -> tensor<1x4x8x16xf32>
  return %o : tensor<1x4x8x16xf32>
}

// -----

// Swin-v2's cosine attention: a learned logit scale per head ([H, 1, 1]),
// clamped to log(100) and exponentiated, reshaped by the importer to
// [1, H, 1, 1] for the Mul, before the relative position bias. The op
// takes it as a [Hq] f32 scale_factor reshaped from the graph's [H, 1, 1].
// CHECK-LABEL: func.func @cosine_scale
// CHECK-SAME:    %[[LS:[a-z0-9_]+]]: tensor<4x1x1xf32>
// CHECK:         %[[CLAMP:.*]] = tosa.clamp %[[LS]]
// CHECK:         %[[EXP:.*]] = tosa.exp %[[CLAMP]]
// CHECK:         %[[F:.*]] = tosa.reshape %[[EXP]], %{{.*}} : (tensor<4x1x1xf32>, !tosa.shape<1>) -> tensor<4xf32>
// CHECK:         kiln.attention %{{.*}}, %{{.*}}, %{{.*}} mask(%{{.*}} : tensor<1x4x16x16xf32>) scale_factor(%[[F]] : tensor<4xf32>) {scale = 1.000000e+00 : f32}
// CHECK-NOT:     tosa.reduce_max
func.func @cosine_scale(%q: tensor<1x4x16x8xf32>, %k: tensor<1x4x16x8xf32>, %v: tensor<1x4x16x8xf32>, %ls: tensor<4x1x1xf32>, %bias: tensor<1x4x16x16xf32>) -> (tensor<1x4x16x8xf32>) {
  %sh_q = tosa.const_shape {values = dense<[4, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh_q : (tensor<1x4x16x8xf32>, !tosa.shape<3>) -> tensor<4x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x4x16x8xf32>) -> tensor<1x4x8x16xf32>
  %sh_k = tosa.const_shape {values = dense<[4, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh_k : (tensor<1x4x8x16xf32>, !tosa.shape<3>) -> tensor<4x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x16x16xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %clamped = tosa.clamp %ls {max_val = 4.60517025 : f32, min_val = -3.40282347E+38 : f32} : (tensor<4x1x1xf32>) -> tensor<4x1x1xf32>
  %scale = tosa.exp %clamped : (tensor<4x1x1xf32>) -> tensor<4x1x1xf32>
  %sh_f = tosa.const_shape {values = dense<[1, 4, 1, 1]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %f = tosa.reshape %scale, %sh_f : (tensor<4x1x1xf32>, !tosa.shape<4>) -> tensor<1x4x1x1xf32>
  %sh_s = tosa.const_shape {values = dense<[1, 4, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh_s : (tensor<4x16x16xf32>, !tosa.shape<4>) -> tensor<1x4x16x16xf32>
  %v11 = tosa.mul %v9, %f, %shift : (tensor<1x4x16x16xf32>, tensor<1x4x1x1xf32>, tensor<1xi8>) -> tensor<1x4x16x16xf32>
  %v12 = tosa.add %v11, %bias : (tensor<1x4x16x16xf32>, tensor<1x4x16x16xf32>) -> tensor<1x4x16x16xf32>
  %max = tosa.reduce_max %v12 {axis = 3 : i32} : (tensor<1x4x16x16xf32>) -> tensor<1x4x16x1xf32>
  %v13 = tosa.sub %v12, %max : (tensor<1x4x16x16xf32>, tensor<1x4x16x1xf32>) -> tensor<1x4x16x16xf32>
  %v14 = tosa.exp %v13 : (tensor<1x4x16x16xf32>) -> tensor<1x4x16x16xf32>
  %v15 = tosa.reduce_sum %v14 {axis = 3 : i32} : (tensor<1x4x16x16xf32>) -> tensor<1x4x16x1xf32>
  %v16 = tosa.reciprocal %v15 : (tensor<1x4x16x1xf32>) -> tensor<1x4x16x1xf32>
  %v17 = tosa.mul %v14, %v16, %shift : (tensor<1x4x16x16xf32>, tensor<1x4x16x1xf32>, tensor<1xi8>) -> tensor<1x4x16x16xf32>
  %sh_p = tosa.const_shape {values = dense<[4, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v19 = tosa.reshape %v17, %sh_p : (tensor<1x4x16x16xf32>, !tosa.shape<3>) -> tensor<4x16x16xf32>
  %v20 = tosa.reshape %v, %sh_q : (tensor<1x4x16x8xf32>, !tosa.shape<3>) -> tensor<4x16x8xf32>
  %v21 = tosa.matmul %v19, %v20, %zp_f32, %zp_f32 : (tensor<4x16x16xf32>, tensor<4x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x16x8xf32>
  %sh_o = tosa.const_shape {values = dense<[1, 4, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v23 = tosa.reshape %v21, %sh_o : (tensor<4x16x8xf32>, !tosa.shape<4>) -> tensor<1x4x16x8xf32>
  return %v23 : tensor<1x4x16x8xf32>
}

// -----

// scores / t with t one a head (a learned temperature per head): the
// reciprocal is taken in f32 from t, reshaped to [Hq].
// CHECK-LABEL: func.func @scale_per_head_div
// CHECK-SAME:    %[[T:[a-z0-9_]+]]: tensor<1x2x1x1xf32>
// CHECK:         %[[FLAT:.*]] = tosa.reshape %[[T]], %{{.*}} : (tensor<1x2x1x1xf32>, !tosa.shape<1>) -> tensor<2xf32>
// CHECK:         %[[F:.*]] = tosa.reciprocal %[[FLAT]] : (tensor<2xf32>) -> tensor<2xf32>
// CHECK:         kiln.attention %{{.*}}, %{{.*}}, %{{.*}} scale_factor(%[[F]] : tensor<2xf32>) {scale = 1.000000e+00 : f32}
func.func @scale_per_head_div(%q: tensor<2x2x16x8xf32>, %k: tensor<2x2x16x8xf32>, %v: tensor<2x2x16x8xf32>, %t: tensor<1x2x1x1xf32>) -> (tensor<2x2x16x8xf32>) {
  %sh_q = tosa.const_shape {values = dense<[4, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh_q : (tensor<2x2x16x8xf32>, !tosa.shape<3>) -> tensor<4x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<2x2x16x8xf32>) -> tensor<2x2x8x16xf32>
  %sh_k = tosa.const_shape {values = dense<[4, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh_k : (tensor<2x2x8x16xf32>, !tosa.shape<3>) -> tensor<4x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x16x16xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %f = tosa.reciprocal %t : (tensor<1x2x1x1xf32>) -> tensor<1x2x1x1xf32>
  %sh_s = tosa.const_shape {values = dense<[2, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh_s : (tensor<4x16x16xf32>, !tosa.shape<4>) -> tensor<2x2x16x16xf32>
  %v11 = tosa.mul %v9, %f, %shift : (tensor<2x2x16x16xf32>, tensor<1x2x1x1xf32>, tensor<1xi8>) -> tensor<2x2x16x16xf32>
  %max = tosa.reduce_max %v11 {axis = 3 : i32} : (tensor<2x2x16x16xf32>) -> tensor<2x2x16x1xf32>
  %v13 = tosa.sub %v11, %max : (tensor<2x2x16x16xf32>, tensor<2x2x16x1xf32>) -> tensor<2x2x16x16xf32>
  %v14 = tosa.exp %v13 : (tensor<2x2x16x16xf32>) -> tensor<2x2x16x16xf32>
  %v15 = tosa.reduce_sum %v14 {axis = 3 : i32} : (tensor<2x2x16x16xf32>) -> tensor<2x2x16x1xf32>
  %v16 = tosa.reciprocal %v15 : (tensor<2x2x16x1xf32>) -> tensor<2x2x16x1xf32>
  %v17 = tosa.mul %v14, %v16, %shift : (tensor<2x2x16x16xf32>, tensor<2x2x16x1xf32>, tensor<1xi8>) -> tensor<2x2x16x16xf32>
  %sh_p = tosa.const_shape {values = dense<[4, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v19 = tosa.reshape %v17, %sh_p : (tensor<2x2x16x16xf32>, !tosa.shape<3>) -> tensor<4x16x16xf32>
  %v20 = tosa.reshape %v, %sh_q : (tensor<2x2x16x8xf32>, !tosa.shape<3>) -> tensor<4x16x8xf32>
  %v21 = tosa.matmul %v19, %v20, %zp_f32, %zp_f32 : (tensor<4x16x16xf32>, tensor<4x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x16x8xf32>
  %sh_o = tosa.const_shape {values = dense<[2, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v23 = tosa.reshape %v21, %sh_o : (tensor<4x16x8xf32>, !tosa.shape<4>) -> tensor<2x2x16x8xf32>
  return %v23 : tensor<2x2x16x8xf32>
}

// -----

// A factor per query row is not one a head: refused, named with its shape.
// CHECK-LABEL: func.func @scale_per_query
// CHECK-NOT:     kiln.attention
// CHECK:         tosa.reduce_max
func.func @scale_per_query(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>, %f: tensor<1x1x16x1xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh_q = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh_q : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh_k = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh_k : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %sh_s = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh_s : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %v11 = tosa.mul %v9, %f, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v11 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  // expected-remark @above {{softmax not fused: the scale is a tensor of 16 values (shape 1x1x16x1), not one value or one a query head: a scale per query is not fused}}
  %v13 = tosa.sub %v11, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v14 = tosa.exp %v13 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v15 = tosa.reduce_sum %v14 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v16 = tosa.reciprocal %v15 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v17 = tosa.mul %v14, %v16, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh_p = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v19 = tosa.reshape %v17, %sh_p : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v20 = tosa.reshape %v, %sh_q : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v21 = tosa.matmul %v19, %v20, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh_o = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v23 = tosa.reshape %v21, %sh_o : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v23 : tensor<1x2x16x8xf32>
}

// -----

// A factor per key: refused.
// CHECK-LABEL: func.func @scale_per_key
// CHECK-NOT:     kiln.attention
// CHECK:         tosa.reduce_max
func.func @scale_per_key(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>, %f: tensor<1x2x1x16xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh_q = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh_q : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh_k = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh_k : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %sh_s = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh_s : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %v11 = tosa.mul %v9, %f, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x1x16xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %v11 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  // expected-remark @above {{softmax not fused: the scale is a tensor of 32 values (shape 1x2x1x16), not one value or one a query head: a scale per key is not fused}}
  %v13 = tosa.sub %v11, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v14 = tosa.exp %v13 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v15 = tosa.reduce_sum %v14 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v16 = tosa.reciprocal %v15 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %v17 = tosa.mul %v14, %v16, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh_p = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v19 = tosa.reshape %v17, %sh_p : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v20 = tosa.reshape %v, %sh_q : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v21 = tosa.matmul %v19, %v20, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh_o = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v23 = tosa.reshape %v21, %sh_o : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v23 : tensor<1x2x16x8xf32>
}

// -----

// A factor per batch entry: refused.
// CHECK-LABEL: func.func @scale_per_batch
// CHECK-NOT:     kiln.attention
// CHECK:         tosa.reduce_max
func.func @scale_per_batch(%q: tensor<2x2x16x8xf32>, %k: tensor<2x2x16x8xf32>, %v: tensor<2x2x16x8xf32>, %f: tensor<2x1x1x1xf32>) -> (tensor<2x2x16x8xf32>) {
  %sh_q = tosa.const_shape {values = dense<[4, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh_q : (tensor<2x2x16x8xf32>, !tosa.shape<3>) -> tensor<4x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<2x2x16x8xf32>) -> tensor<2x2x8x16xf32>
  %sh_k = tosa.const_shape {values = dense<[4, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh_k : (tensor<2x2x8x16xf32>, !tosa.shape<3>) -> tensor<4x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x16x16xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %sh_s = tosa.const_shape {values = dense<[2, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh_s : (tensor<4x16x16xf32>, !tosa.shape<4>) -> tensor<2x2x16x16xf32>
  %v11 = tosa.mul %v9, %f, %shift : (tensor<2x2x16x16xf32>, tensor<2x1x1x1xf32>, tensor<1xi8>) -> tensor<2x2x16x16xf32>
  %max = tosa.reduce_max %v11 {axis = 3 : i32} : (tensor<2x2x16x16xf32>) -> tensor<2x2x16x1xf32>
  // expected-remark @above {{softmax not fused: the scale is a tensor of 2 values (shape 2x1x1x1), not one value or one a query head: a scale per batch is not fused}}
  %v13 = tosa.sub %v11, %max : (tensor<2x2x16x16xf32>, tensor<2x2x16x1xf32>) -> tensor<2x2x16x16xf32>
  %v14 = tosa.exp %v13 : (tensor<2x2x16x16xf32>) -> tensor<2x2x16x16xf32>
  %v15 = tosa.reduce_sum %v14 {axis = 3 : i32} : (tensor<2x2x16x16xf32>) -> tensor<2x2x16x1xf32>
  %v16 = tosa.reciprocal %v15 : (tensor<2x2x16x1xf32>) -> tensor<2x2x16x1xf32>
  %v17 = tosa.mul %v14, %v16, %shift : (tensor<2x2x16x16xf32>, tensor<2x2x16x1xf32>, tensor<1xi8>) -> tensor<2x2x16x16xf32>
  %sh_p = tosa.const_shape {values = dense<[4, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v19 = tosa.reshape %v17, %sh_p : (tensor<2x2x16x16xf32>, !tosa.shape<3>) -> tensor<4x16x16xf32>
  %v20 = tosa.reshape %v, %sh_q : (tensor<2x2x16x8xf32>, !tosa.shape<3>) -> tensor<4x16x8xf32>
  %v21 = tosa.matmul %v19, %v20, %zp_f32, %zp_f32 : (tensor<4x16x16xf32>, tensor<4x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x16x8xf32>
  %sh_o = tosa.const_shape {values = dense<[2, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v23 = tosa.reshape %v21, %sh_o : (tensor<4x16x8xf32>, !tosa.shape<4>) -> tensor<2x2x16x8xf32>
  return %v23 : tensor<2x2x16x8xf32>
}

// -----

// A factor on [B·H, q, k] scores before they are split into [B, H]: its
// 4 values are one a (batch, head) pair, not one of the 2 query heads.
// CHECK-LABEL: func.func @scale_per_batch_head
// CHECK-NOT:     kiln.attention
// CHECK:         tosa.reduce_max
func.func @scale_per_batch_head(%q: tensor<2x2x16x8xf32>, %k: tensor<2x2x16x8xf32>, %v: tensor<2x2x16x8xf32>, %f: tensor<4x1x1xf32>) -> (tensor<2x2x16x8xf32>) {
  %sh_q = tosa.const_shape {values = dense<[4, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh_q : (tensor<2x2x16x8xf32>, !tosa.shape<3>) -> tensor<4x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<2x2x16x8xf32>) -> tensor<2x2x8x16xf32>
  %sh_k = tosa.const_shape {values = dense<[4, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh_k : (tensor<2x2x8x16xf32>, !tosa.shape<3>) -> tensor<4x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x16x16xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %sh_s = tosa.const_shape {values = dense<[2, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v8 = tosa.mul %v7, %f, %shift : (tensor<4x16x16xf32>, tensor<4x1x1xf32>, tensor<1xi8>) -> tensor<4x16x16xf32>
  %v11 = tosa.reshape %v8, %sh_s : (tensor<4x16x16xf32>, !tosa.shape<4>) -> tensor<2x2x16x16xf32>
  %max = tosa.reduce_max %v11 {axis = 3 : i32} : (tensor<2x2x16x16xf32>) -> tensor<2x2x16x1xf32>
  // expected-remark @above {{softmax not fused: the scale is a tensor of 4 values (shape 4x1x1), not one value or one a query head: a scale per (batch, head) pair is not fused}}
  %v13 = tosa.sub %v11, %max : (tensor<2x2x16x16xf32>, tensor<2x2x16x1xf32>) -> tensor<2x2x16x16xf32>
  %v14 = tosa.exp %v13 : (tensor<2x2x16x16xf32>) -> tensor<2x2x16x16xf32>
  %v15 = tosa.reduce_sum %v14 {axis = 3 : i32} : (tensor<2x2x16x16xf32>) -> tensor<2x2x16x1xf32>
  %v16 = tosa.reciprocal %v15 : (tensor<2x2x16x1xf32>) -> tensor<2x2x16x1xf32>
  %v17 = tosa.mul %v14, %v16, %shift : (tensor<2x2x16x16xf32>, tensor<2x2x16x1xf32>, tensor<1xi8>) -> tensor<2x2x16x16xf32>
  %sh_p = tosa.const_shape {values = dense<[4, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v19 = tosa.reshape %v17, %sh_p : (tensor<2x2x16x16xf32>, !tosa.shape<3>) -> tensor<4x16x16xf32>
  %v20 = tosa.reshape %v, %sh_q : (tensor<2x2x16x8xf32>, !tosa.shape<3>) -> tensor<4x16x8xf32>
  %v21 = tosa.matmul %v19, %v20, %zp_f32, %zp_f32 : (tensor<4x16x16xf32>, tensor<4x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x16x8xf32>
  %sh_o = tosa.const_shape {values = dense<[2, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v23 = tosa.reshape %v21, %sh_o : (tensor<4x16x8xf32>, !tosa.shape<4>) -> tensor<2x2x16x8xf32>
  return %v23 : tensor<2x2x16x8xf32>
}

// -----

// "Stable softmax" by hand: the row's maximum subtracted before the softmax,
// whose own maximum undoes it. The scores are the product's; the shift and
// its maximum go with the site.
// CHECK-LABEL: func.func @row_max_shift
// CHECK-NOT:     tosa.reduce_max
// CHECK:         kiln.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.000000e+00 : f32}
// CHECK-NOT:     tosa.
func.func @row_max_shift(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %stable = tosa.reduce_max %v9 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %shifted = tosa.sub %v9, %stable : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %shifted {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v11 = tosa.sub %shifted, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v12 = tosa.exp %v11 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v13 = tosa.reduce_sum %v12 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v14 = tosa.reciprocal %v13 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v15 = tosa.mul %v12, %v14, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v21 = tosa.reshape %v15, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v22 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v23 = tosa.matmul %v21, %v22, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v25 = tosa.reshape %v23, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v25 : tensor<1x2x16x8xf32>
}

// -----

// The same shift, its row maximum also returned: the maximum is a value the
// graph keeps, so the site is not fused.
// CHECK-LABEL: func.func @row_max_shift_kept
// CHECK-NOT:     kiln.attention
func.func @row_max_shift_kept(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>, tensor<1x2x16x1xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32>
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32>
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %stable = tosa.reduce_max %v9 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %shifted = tosa.sub %v9, %stable : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  // expected-remark @below {{softmax not fused: the scores come from 'tosa.sub', which is not part of attention}}
  %max = tosa.reduce_max %shifted {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v11 = tosa.sub %shifted, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %v12 = tosa.exp %v11 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %v13 = tosa.reduce_sum %v12 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %v14 = tosa.reciprocal %v13 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v15 = tosa.mul %v12, %v14, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v21 = tosa.reshape %v15, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v22 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32>
  %v23 = tosa.matmul %v21, %v22, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32>
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v25 = tosa.reshape %v23, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32>
  return %v25, %stable : tensor<1x2x16x8xf32>, tensor<1x2x16x1xf32>
}
