// RUN: kiln-opt %s --kiln-fuse-attention -mlir-print-debuginfo | FileCheck %s

// The fused op's location is a FusedLoc of every matched op's location (the
// importer's ONNX node names), in program order; the constants are not
// listed.
// CHECK-LABEL: func.func @named_locations
// CHECK:         kiln.attention {{.*}} loc(#[[FUSED:loc[0-9]+]])
// CHECK-DAG:     #[[R1:loc[0-9]+]] = loc("/attn/Reshape_1")
// CHECK-DAG:     #[[T1:loc[0-9]+]] = loc("/attn/Transpose_1")
// CHECK-DAG:     #[[R2:loc[0-9]+]] = loc("/attn/Reshape_2")
// CHECK-DAG:     #[[M1:loc[0-9]+]] = loc("/attn/MatMul_1")
// CHECK-DAG:     #[[R3:loc[0-9]+]] = loc("/attn/Reshape_3")
// CHECK-DAG:     #[[MUL:loc[0-9]+]] = loc("/attn/Mul_1")
// CHECK-DAG:     #[[ADD:loc[0-9]+]] = loc("/attn/Add_1")
// CHECK-DAG:     #[[SM:loc[0-9]+]] = loc("/attn/Softmax")
// CHECK-DAG:     #[[R4:loc[0-9]+]] = loc("/attn/Reshape_4")
// CHECK-DAG:     #[[R5:loc[0-9]+]] = loc("/attn/Reshape_5")
// CHECK-DAG:     #[[M2:loc[0-9]+]] = loc("/attn/MatMul_2")
// CHECK-DAG:     #[[R6:loc[0-9]+]] = loc("/attn/Reshape_6")
// CHECK:         #[[FUSED]] = loc(fused[#[[R1]], #[[T1]], #[[R2]], #[[M1]], #[[R3]], #[[MUL]], #[[ADD]], #[[SM]], #[[R4]], #[[R5]], #[[M2]], #[[R6]]])
func.func @named_locations(%q: tensor<1x2x16x8xf32>, %k: tensor<1x2x16x8xf32>, %mask: tensor<1x1x1x16xf32>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x2x16x8xf32>) {
  %sh2x16x8 = tosa.const_shape {values = dense<[2, 16, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v2 = tosa.reshape %q, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32> loc("/attn/Reshape_1")
  %v3 = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x8xf32>) -> tensor<1x2x8x16xf32> loc("/attn/Transpose_1")
  %sh2x8x16 = tosa.const_shape {values = dense<[2, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v5 = tosa.reshape %v3, %sh2x8x16 : (tensor<1x2x8x16xf32>, !tosa.shape<3>) -> tensor<2x8x16xf32> loc("/attn/Reshape_2")
  %zp_f32 = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %v7 = tosa.matmul %v2, %v5, %zp_f32, %zp_f32 : (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32> loc("/attn/MatMul_1")
  %sh1x2x16x16 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v9 = tosa.reshape %v7, %sh1x2x16x16 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32> loc("/attn/Reshape_3")
  %scale = "tosa.const"() {values = dense<0.35355339> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %v12 = tosa.mul %v9, %scale, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32> loc("/attn/Mul_1")
  %v13 = tosa.add %v12, %mask : (tensor<1x2x16x16xf32>, tensor<1x1x1x16xf32>) -> tensor<1x2x16x16xf32> loc("/attn/Add_1")
  %max = tosa.reduce_max %v13 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32> loc("/attn/Softmax")
  %v15 = tosa.sub %v13, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32> loc("/attn/Softmax")
  %v16 = tosa.exp %v15 : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32> loc("/attn/Softmax")
  %v17 = tosa.reduce_sum %v16 {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32> loc("/attn/Softmax")
  %v18 = tosa.reciprocal %v17 : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32> loc("/attn/Softmax")
  %v19 = tosa.mul %v16, %v18, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32> loc("/attn/Softmax")
  %sh2x16x16 = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %v21 = tosa.reshape %v19, %sh2x16x16 : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32> loc("/attn/Reshape_4")
  %v22 = tosa.reshape %v, %sh2x16x8 : (tensor<1x2x16x8xf32>, !tosa.shape<3>) -> tensor<2x16x8xf32> loc("/attn/Reshape_5")
  %v23 = tosa.matmul %v21, %v22, %zp_f32, %zp_f32 : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x8xf32> loc("/attn/MatMul_2")
  %sh1x2x16x8 = tosa.const_shape {values = dense<[1, 2, 16, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %v25 = tosa.reshape %v23, %sh1x2x16x8 : (tensor<2x16x8xf32>, !tosa.shape<4>) -> tensor<1x2x16x8xf32> loc("/attn/Reshape_6")
  return %v25 : tensor<1x2x16x8xf32>
}
