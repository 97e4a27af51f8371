// RUN: kiln-opt %s -convert-kiln-to-gpu="hopper=1" | FileCheck %s

// At head dim 64 a row is one 128-byte line: a thread copies a 16-byte chunk
// of four consecutive rows (four cp.async a tile) and, on sm_90a, carries
// those rows' four table entries a tile ahead like the head dim 128 kernel
// (convert-kiln-to-gpu-paged.mlir), with no branch around their loads.
// CHECK-LABEL: gpu.func @kiln_paged_attention_mma_bf16_d64_causal
// CHECK: scf.for {{.*}} -> (f32, {{.*}}, f32, i32, i32, i32, i32) {
// CHECK-NOT: scf.if
// CHECK-COUNT-4: llvm.load {{.*}} : !llvm.ptr<1> -> i32
// CHECK-NOT: llvm.load {{.*}} -> i32
// CHECK: scf.yield {{.*}} : f32, {{.*}}, f32, i32, i32, i32, i32
func.func @paged(%q: tensor<?x32x?x64xbf16>, %kc: tensor<?x16x8x64xbf16>, %vc: tensor<?x16x8x64xbf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) -> tensor<?x32x?x64xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {causal, scale = 0.125 : f32} : tensor<?x32x?x64xbf16>, tensor<?x16x8x64xbf16>, tensor<?x16x8x64xbf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x32x?x64xbf16>
  return %o : tensor<?x32x?x64xbf16>
}
