// RUN: kiln-opt %s -split-input-file -kiln-fuse-attention | FileCheck %s

// exp(s - logsumexp(s)) weighing V is the softmax of an attention site: it
// fuses. The same form not weighing anything (a log-probability's exp, say)
// is left exactly as written.

// CHECK-LABEL: func.func @weighs_values
// CHECK: kiln.attention
// CHECK-NOT: tosa.log
func.func @weighs_values(%q: tensor<2x8x16xf32>, %kt: tensor<2x16x8xf32>, %v: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %s = tosa.matmul %q, %kt, %zp, %zp : (tensor<2x8x16xf32>, tensor<2x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x8x8xf32>
  %m = tosa.reduce_max %s {axis = 2 : i32} : (tensor<2x8x8xf32>) -> tensor<2x8x1xf32>
  %d = tosa.sub %s, %m : (tensor<2x8x8xf32>, tensor<2x8x1xf32>) -> tensor<2x8x8xf32>
  %e = tosa.exp %d : (tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
  %t = tosa.reduce_sum %e {axis = 2 : i32} : (tensor<2x8x8xf32>) -> tensor<2x8x1xf32>
  %a = tosa.abs %t : (tensor<2x8x1xf32>) -> tensor<2x8x1xf32>
  %l = tosa.log %a : (tensor<2x8x1xf32>) -> tensor<2x8x1xf32>
  %lse = tosa.add %l, %m : (tensor<2x8x1xf32>, tensor<2x8x1xf32>) -> tensor<2x8x1xf32>
  %c = tosa.sub %s, %lse : (tensor<2x8x8xf32>, tensor<2x8x1xf32>) -> tensor<2x8x8xf32>
  %p = tosa.exp %c : (tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
  %o = tosa.matmul %p, %v, %zp, %zp : (tensor<2x8x8xf32>, tensor<2x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x8x16xf32>
  return %o : tensor<2x8x16xf32>
}

// -----

// CHECK-LABEL: func.func @weighs_nothing
// CHECK: tosa.log
// CHECK-NOT: kiln.attention
func.func @weighs_nothing(%s: tensor<2x8x8xf32>) -> tensor<2x8x8xf32> {
  %m = tosa.reduce_max %s {axis = 2 : i32} : (tensor<2x8x8xf32>) -> tensor<2x8x1xf32>
  %d = tosa.sub %s, %m : (tensor<2x8x8xf32>, tensor<2x8x1xf32>) -> tensor<2x8x8xf32>
  %e = tosa.exp %d : (tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
  %t = tosa.reduce_sum %e {axis = 2 : i32} : (tensor<2x8x8xf32>) -> tensor<2x8x1xf32>
  %l = tosa.log %t : (tensor<2x8x1xf32>) -> tensor<2x8x1xf32>
  %lse = tosa.add %l, %m : (tensor<2x8x1xf32>, tensor<2x8x1xf32>) -> tensor<2x8x1xf32>
  %c = tosa.sub %s, %lse : (tensor<2x8x8xf32>, tensor<2x8x1xf32>) -> tensor<2x8x8xf32>
  %p = tosa.exp %c : (tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
  return %p : tensor<2x8x8xf32>
}
