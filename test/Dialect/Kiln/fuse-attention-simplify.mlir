// RUN: kiln-opt %s -split-input-file -kiln-fuse-attention | FileCheck %s

// An imported kiln.attention whose K and V are repeated per query head
// (reshape → tile → reshape, as exporters write repeat_kv) reads the
// unrepeated tensors instead: the group count comes from the shapes.
// CHECK-LABEL: func.func @kv_repeat
// CHECK-SAME: (%[[Q:.*]]: tensor<1x4x8x16xf32>, %[[K:.*]]: tensor<1x2x8x16xf32>, %[[V:.*]]: tensor<1x2x8x16xf32>)
// CHECK-NOT: tosa.tile
// CHECK: kiln.attention %[[Q]], %[[K]], %[[V]] {scale = 2.500000e-01 : f32} : tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>
func.func @kv_repeat(%q: tensor<1x4x8x16xf32>, %k: tensor<1x2x8x16xf32>, %v: tensor<1x2x8x16xf32>) -> tensor<1x4x8x16xf32> {
  %s5 = tosa.const_shape {values = dense<[1, 2, 1, 8, 16]> : tensor<5xindex>} : () -> !tosa.shape<5>
  %m = tosa.const_shape {values = dense<[1, 1, 2, 1, 1]> : tensor<5xindex>} : () -> !tosa.shape<5>
  %s4 = tosa.const_shape {values = dense<[1, 4, 8, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %k5 = tosa.reshape %k, %s5 : (tensor<1x2x8x16xf32>, !tosa.shape<5>) -> tensor<1x2x1x8x16xf32>
  %kt = tosa.tile %k5, %m : (tensor<1x2x1x8x16xf32>, !tosa.shape<5>) -> tensor<1x2x2x8x16xf32>
  %k4 = tosa.reshape %kt, %s4 : (tensor<1x2x2x8x16xf32>, !tosa.shape<4>) -> tensor<1x4x8x16xf32>
  %v5 = tosa.reshape %v, %s5 : (tensor<1x2x8x16xf32>, !tosa.shape<5>) -> tensor<1x2x1x8x16xf32>
  %vt = tosa.tile %v5, %m : (tensor<1x2x1x8x16xf32>, !tosa.shape<5>) -> tensor<1x2x2x8x16xf32>
  %v4 = tosa.reshape %vt, %s4 : (tensor<1x2x2x8x16xf32>, !tosa.shape<4>) -> tensor<1x4x8x16xf32>
  %o = kiln.attention %q, %k4, %v4 {scale = 0.25 : f32} : tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32> -> tensor<1x4x8x16xf32>
  return %o : tensor<1x4x8x16xf32>
}

// -----

// A constant boolean lower-triangular mask is the causal attribute, and the
// mask operand goes away.
// CHECK-LABEL: func.func @causal_constant
// CHECK: kiln.attention %{{.*}}, %{{.*}}, %{{.*}} {causal, scale = 1.000000e+00 : f32} : tensor<1x1x4x8xf32>
// CHECK-NOT: mask(
func.func @causal_constant(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32> {
  %mask = "tosa.const"() {values = dense<[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]> : tensor<4x4xi1>} : () -> tensor<4x4xi1>
  %o = kiln.attention %q, %k, %v mask(%mask : tensor<4x4xi1>) {scale = 1.0 : f32} : tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32> -> tensor<1x1x4x8xf32>
  return %o : tensor<1x1x4x8xf32>
}

// -----

// A banded additive mask (0 inside, -inf outside) is causal with a window.
// CHECK-LABEL: func.func @window_constant
// CHECK: kiln.attention %{{.*}}, %{{.*}}, %{{.*}} {causal, scale = 1.000000e+00 : f32, window = 2 : i64}
func.func @window_constant(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32> {
  %mask = "tosa.const"() {values = dense<[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0xFF800000, 0.0, 0.0, 0xFF800000], [0xFF800000, 0xFF800000, 0.0, 0.0]]> : tensor<4x4xf32>} : () -> tensor<4x4xf32>
  %o = kiln.attention %q, %k, %v mask(%mask : tensor<4x4xf32>) {scale = 1.0 : f32} : tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32> -> tensor<1x1x4x8xf32>
  return %o : tensor<1x1x4x8xf32>
}

// -----

// An upper-triangular mask (each query sees itself and every later key) is
// not causal but a band: window 1 on the left, 3 keys on the right.
// CHECK-LABEL: func.func @not_causal
// CHECK: kiln.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.000000e+00 : f32, window = 1 : i64, window_right = 3 : i64}
func.func @not_causal(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32> {
  %mask = "tosa.const"() {values = dense<[[true, true, true, true], [false, true, true, true], [false, false, true, true], [false, false, false, true]]> : tensor<4x4xi1>} : () -> tensor<4x4xi1>
  %o = kiln.attention %q, %k, %v mask(%mask : tensor<4x4xi1>) {scale = 1.0 : f32} : tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32> -> tensor<1x1x4x8xf32>
  return %o : tensor<1x1x4x8xf32>
}

// -----

// K repeated but V not: the heads do not line up the same way, nothing folds.
// CHECK-LABEL: func.func @k_only
// CHECK: tosa.tile
// CHECK: kiln.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 2.500000e-01 : f32} : tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>
func.func @k_only(%q: tensor<1x4x8x16xf32>, %k: tensor<1x2x8x16xf32>, %v: tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32> {
  %s5 = tosa.const_shape {values = dense<[1, 2, 1, 8, 16]> : tensor<5xindex>} : () -> !tosa.shape<5>
  %m = tosa.const_shape {values = dense<[1, 1, 2, 1, 1]> : tensor<5xindex>} : () -> !tosa.shape<5>
  %s4 = tosa.const_shape {values = dense<[1, 4, 8, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %k5 = tosa.reshape %k, %s5 : (tensor<1x2x8x16xf32>, !tosa.shape<5>) -> tensor<1x2x1x8x16xf32>
  %kt = tosa.tile %k5, %m : (tensor<1x2x1x8x16xf32>, !tosa.shape<5>) -> tensor<1x2x2x8x16xf32>
  %k4 = tosa.reshape %kt, %s4 : (tensor<1x2x2x8x16xf32>, !tosa.shape<4>) -> tensor<1x4x8x16xf32>
  %o = kiln.attention %q, %k4, %v {scale = 0.25 : f32} : tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32> -> tensor<1x4x8x16xf32>
  return %o : tensor<1x4x8x16xf32>
}

// -----

// Q, K and V transposed from [B, S, H, D] and the result transposed back:
// the op takes the bshd layout and every transpose goes away.
// CHECK-LABEL: func.func @bshd_transposes
// CHECK-SAME: (%[[Q:.*]]: tensor<1x8x4x16xf32>, %[[K:.*]]: tensor<1x8x2x16xf32>, %[[V:.*]]: tensor<1x8x2x16xf32>)
// CHECK-NOT: tosa.transpose
// CHECK: %[[O:.*]] = kiln.attention %[[Q]], %[[K]], %[[V]] {causal, layout = #kiln.layout<bshd>, scale = 2.500000e-01 : f32} : tensor<1x8x4x16xf32>, tensor<1x8x2x16xf32>, tensor<1x8x2x16xf32> -> tensor<1x8x4x16xf32>
// CHECK-NEXT: return %[[O]]
func.func @bshd_transposes(%q: tensor<1x8x4x16xf32>, %k: tensor<1x8x2x16xf32>, %v: tensor<1x8x2x16xf32>) -> tensor<1x8x4x16xf32> {
  %qt = tosa.transpose %q {perms = array<i32: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
  %kt = tosa.transpose %k {perms = array<i32: 0, 2, 1, 3>} : (tensor<1x8x2x16xf32>) -> tensor<1x2x8x16xf32>
  %vt = tosa.transpose %v {perms = array<i32: 0, 2, 1, 3>} : (tensor<1x8x2x16xf32>) -> tensor<1x2x8x16xf32>
  %o = kiln.attention %qt, %kt, %vt {causal, scale = 0.25 : f32} : tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32> -> tensor<1x4x8x16xf32>
  %ot = tosa.transpose %o {perms = array<i32: 0, 2, 1, 3>} : (tensor<1x4x8x16xf32>) -> tensor<1x8x4x16xf32>
  return %ot : tensor<1x8x4x16xf32>
}

// -----

// The result is also used in the bhsd layout: nothing changes.
// CHECK-LABEL: func.func @bhsd_result_used
// CHECK-COUNT-3: tosa.transpose
// CHECK: kiln.attention
// CHECK-NOT: layout
// CHECK: tosa.transpose
func.func @bhsd_result_used(%q: tensor<1x8x4x16xf32>, %k: tensor<1x8x4x16xf32>, %v: tensor<1x8x4x16xf32>) -> (tensor<1x8x4x16xf32>, tensor<1x4x8x16xf32>) {
  %qt = tosa.transpose %q {perms = array<i32: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
  %kt = tosa.transpose %k {perms = array<i32: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
  %vt = tosa.transpose %v {perms = array<i32: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
  %o = kiln.attention %qt, %kt, %vt {scale = 0.25 : f32} : tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32> -> tensor<1x4x8x16xf32>
  %ot = tosa.transpose %o {perms = array<i32: 0, 2, 1, 3>} : (tensor<1x4x8x16xf32>) -> tensor<1x8x4x16xf32>
  return %ot, %o : tensor<1x8x4x16xf32>, tensor<1x4x8x16xf32>
}
