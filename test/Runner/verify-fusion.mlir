// verifyFusion through kiln-cpu-runner --verify-fusion: the graph below is
// fused by kiln-fuse-attention and both forms run on the CPU on the same
// seeded inputs; the output and the site (the fused op against the value it
// replaced) agree. A fused module with a wrong scale is caught.
// RUN: kiln-opt %s --kiln-fuse-attention -o %t.fused.mlir
// RUN: kiln-cpu-runner %s --func=canonical --verify-fusion=%t.fused.mlir | FileCheck %s
// RUN: kiln-cpu-runner %s --func=canonical --verify-fusion=%t.fused.mlir --num-splits=3 --kv-block-size=4 | FileCheck %s
// RUN: not kiln-cpu-runner %s --func=canonical --verify-fusion=%S/Inputs/wrong-scale.mlir | FileCheck %s --check-prefix=WRONG
// RUN: not kiln-cpu-runner %s --func=canonical --verify-fusion=%S/Inputs/wrong-scale.mlir --no-sites 2>&1 | FileCheck %s --check-prefix=WRONG-OUT

// CHECK: input arg2 tensor<1x1x1x16xf32> normal(0, 1)
// CHECK: PASS output 0 tensor<1x2x16x8xf32>
// CHECK: PASS site 0 tensor<1x2x16x8xf32>
// CHECK: fusion verified: 1 outputs, 1 sites

// WRONG: FAIL output 0
// WRONG: FAIL site 0
// WRONG: fusion MISMATCH: 1 outputs, 1 sites
// WRONG-OUT: FAIL output 0
// WRONG-OUT-NOT: site
// WRONG-OUT: fusion MISMATCH: 1 outputs, 0 sites
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
