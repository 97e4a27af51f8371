// The gradient check fails on a wrong gradient: with the backward built
// with its scale 1% off, every gradient is off and the check says which,
// at the op's location, and exits non-zero. The same site passes with the
// right scale.
// RUN: kiln-cpu-runner %s --check-grad | FileCheck %s --check-prefix=RIGHT
// RUN: not kiln-cpu-runner %s --check-grad --check-grad-perturb-scale=0.01 2>&1 | FileCheck %s

// RIGHT: site 0 {{.*}} f32: out {{.*}} ok
// RIGHT: gradient check: 1 of 1 sites passed

// CHECK: attention-grad-wrong.mlir:19:8: error: gradient check failed: dQ relative error
// CHECK: attention-grad-wrong.mlir:19:8: error: gradient check failed: dK relative error
// CHECK: attention-grad-wrong.mlir:19:8: error: gradient check failed: dV relative error
// CHECK: site 0 {{.*}} FAILED
// CHECK: gradient check: 0 of 1 sites passed

// Causal, GQA, f32.
func.func @site(%q: tensor<1x4x12x8xf32>, %k: tensor<1x2x12x8xf32>, %v: tensor<1x2x12x8xf32>) -> tensor<1x4x12x8xf32> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.35 : f32} : tensor<1x4x12x8xf32>, tensor<1x2x12x8xf32>, tensor<1x2x12x8xf32> -> tensor<1x4x12x8xf32>
  return %o : tensor<1x4x12x8xf32>
}
