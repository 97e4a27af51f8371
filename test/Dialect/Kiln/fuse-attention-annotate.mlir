// RUN: kiln-opt %s --split-input-file --kiln-fuse-attention="annotate-only" | FileCheck %s

// annotate-only rewrites nothing: the op producing the site's result (here
// the P·V matmul) is tagged with its site number, everything else stays.
// CHECK-LABEL: func.func @two_sites
// CHECK-NOT:     kiln.attention
// CHECK:         tosa.reduce_max
// CHECK:         tosa.matmul {{.*}} {kiln.site_root = 0 : i64}
// CHECK:         tosa.reduce_max
// CHECK:         tosa.matmul {{.*}} {kiln.site_root = 1 : i64}
// CHECK:         return
func.func @two_sites(%q: tensor<4x16x8xf32>, %kt: tensor<4x8x16xf32>, %v: tensor<4x16x8xf32>) -> tensor<4x16x8xf32> {
  %zp = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %s = tosa.matmul %q, %kt, %zp, %zp : (tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x16x16xf32>
  %max = tosa.reduce_max %s {axis = 2 : i32} : (tensor<4x16x16xf32>) -> tensor<4x16x1xf32>
  %d = tosa.sub %s, %max : (tensor<4x16x16xf32>, tensor<4x16x1xf32>) -> tensor<4x16x16xf32>
  %e = tosa.exp %d : (tensor<4x16x16xf32>) -> tensor<4x16x16xf32>
  %sum = tosa.reduce_sum %e {axis = 2 : i32} : (tensor<4x16x16xf32>) -> tensor<4x16x1xf32>
  %r = tosa.reciprocal %sum : (tensor<4x16x1xf32>) -> tensor<4x16x1xf32>
  %p = tosa.mul %e, %r, %shift : (tensor<4x16x16xf32>, tensor<4x16x1xf32>, tensor<1xi8>) -> tensor<4x16x16xf32>
  %o = tosa.matmul %p, %v, %zp, %zp : (tensor<4x16x16xf32>, tensor<4x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x16x8xf32>
  %s2 = tosa.matmul %o, %kt, %zp, %zp : (tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x16x16xf32>
  %max2 = tosa.reduce_max %s2 {axis = 2 : i32} : (tensor<4x16x16xf32>) -> tensor<4x16x1xf32>
  %d2 = tosa.sub %s2, %max2 : (tensor<4x16x16xf32>, tensor<4x16x1xf32>) -> tensor<4x16x16xf32>
  %e2 = tosa.exp %d2 : (tensor<4x16x16xf32>) -> tensor<4x16x16xf32>
  %sum2 = tosa.reduce_sum %e2 {axis = 2 : i32} : (tensor<4x16x16xf32>) -> tensor<4x16x1xf32>
  %r2 = tosa.reciprocal %sum2 : (tensor<4x16x1xf32>) -> tensor<4x16x1xf32>
  %p2 = tosa.mul %e2, %r2, %shift : (tensor<4x16x16xf32>, tensor<4x16x1xf32>, tensor<1xi8>) -> tensor<4x16x16xf32>
  %o2 = tosa.matmul %p2, %v, %zp, %zp : (tensor<4x16x16xf32>, tensor<4x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<4x16x8xf32>
  return %o2 : tensor<4x16x8xf32>
}

// -----

// A softmax that is not attention gets no tag.
// CHECK-LABEL: func.func @not_attention
// CHECK-NOT: kiln.site_root
func.func @not_attention(%x: tensor<2x4x4xf32>) -> tensor<2x4x4xf32> {
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %max = tosa.reduce_max %x {axis = 2 : i32} : (tensor<2x4x4xf32>) -> tensor<2x4x1xf32>
  %d = tosa.sub %x, %max : (tensor<2x4x4xf32>, tensor<2x4x1xf32>) -> tensor<2x4x4xf32>
  %e = tosa.exp %d : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %sum = tosa.reduce_sum %e {axis = 2 : i32} : (tensor<2x4x4xf32>) -> tensor<2x4x1xf32>
  %r = tosa.reciprocal %sum : (tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
  %p = tosa.mul %e, %r, %shift : (tensor<2x4x4xf32>, tensor<2x4x1xf32>, tensor<1xi8>) -> tensor<2x4x4xf32>
  return %p : tensor<2x4x4xf32>
}
