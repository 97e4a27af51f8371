// A run-time scale per query head (scale_factor [Hq]): each kernel reads
// the element of its block's head after griddepcontrol.wait, where a block
// has one query head; grouped-query sites take a kernel whose blocks have
// one, or are rejected where there is none.
// RUN: kiln-opt %s -split-input-file -convert-kiln-to-gpu="hopper=1" -verify-diagnostics | FileCheck %s
// RUN: not kiln-opt %s -split-input-file -convert-kiln-to-gpu="hopper=1 warp-specialize-persistent=1" 2>&1 | FileCheck %s --check-prefix=PERSISTENT

// Heads not grouped: the tensor-core kernel (its block a KV head's group
// of one query head) reads the factor at grid y; so does the
// warp-specialised kernel (grid y over query heads, ordered heaviest first
// under causal before the read), which is then not persistent.
// CHECK-LABEL: func.func @mha
// CHECK: kiln.attention {{.*}}kiln.kernel = @kiln_kernels::@kiln_attention_mma_bf16_d64_causal_sfh{{.*}}kiln.warp_specialized_kernel = @kiln_kernels::@kiln_attention_ws_bf16_d64_causal_sfh
// CHECK: gpu.func @kiln_attention_mma_bf16_d64_causal_sfh({{.*}}, %[[FACTOR:.*]]: !llvm.ptr<1>) kernel
// CHECK-SAME: arg_names = [{{.*}}"scale_factor"]
// CHECK-SAME: grid = {blocks = "packed_query_blocks"
// CHECK: %[[HEAD:.*]] = gpu.block_id  y
// CHECK: nvvm.griddepcontrol  wait
// CHECK-NEXT: %[[INDEX:.*]] = arith.index_cast %[[HEAD]] : index to i64
// CHECK-NEXT: %[[ADDRESS:.*]] = llvm.getelementptr %[[FACTOR]][%[[INDEX]]] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, f32
// CHECK-NEXT: %[[F:.*]] = llvm.load %[[ADDRESS]] : !llvm.ptr<1> -> f32
// CHECK-NEXT: arith.mulf %{{.*}}, %[[F]] : f32
// CHECK: gpu.func @kiln_attention_ws_bf16_d64_causal_sfh({{.*}}, %[[WFACTOR:.*]]: !llvm.ptr<1>) kernel
// CHECK-SAME: grid = {blocks = "query_blocks"
// CHECK-SAME: "not persistent: a per-head scale_factor is read at the block's head, once"
// CHECK: nvvm.griddepcontrol  wait
// CHECK-NEXT: arith.index_cast %{{.*}} : index to i64
// CHECK-NEXT: llvm.getelementptr %[[WFACTOR]][%{{.*}}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, f32
// PERSISTENT: error: 'kiln.attention' op warp-specialised kernel: a persistent kernel takes no per-head scale_factor (it reads the factor once for items of every head)
func.func @mha(%q: tensor<2x4x128x64xbf16>, %k: tensor<2x4x128x64xbf16>, %v: tensor<2x4x128x64xbf16>, %f: tensor<4xf32>) -> tensor<2x4x128x64xbf16> {
  %o = kiln.attention %q, %k, %v scale_factor(%f : tensor<4xf32>) {causal, scale = 1.0 : f32} : tensor<2x4x128x64xbf16>, tensor<2x4x128x64xbf16>, tensor<2x4x128x64xbf16> -> tensor<2x4x128x64xbf16>
  return %o : tensor<2x4x128x64xbf16>
}

// -----

// Grouped-query heads: the tensor-core kernel's block spans a group's query
// heads, so the site takes the scalar kernel, a query head a block (grid y),
// and no warp-specialised kernel (it exists beside the tensor-core one only).
// CHECK-LABEL: func.func @grouped
// CHECK: kiln.attention {{.*}}kiln.kernel = @kiln_kernels::@kiln_attention_bf16_d64_sfh
// CHECK-NOT: kiln.warp_specialized_kernel
// CHECK: gpu.func @kiln_attention_bf16_d64_sfh({{.*}}, %[[FACTOR:[a-z0-9]+]]: !llvm.ptr<1>) workgroup(
// CHECK-SAME: grid = {blocks = "query_blocks"
// CHECK-SAME: "the scalar kernel: bf16 head dim 64 on f32 FMAs (a per-head scale_factor with grouped-query heads: the tensor-core kernel's blocks span a group's query heads)"
// CHECK: %[[HEAD:.*]] = gpu.block_id  y
// CHECK: nvvm.griddepcontrol  wait
// CHECK-NEXT: %[[INDEX:.*]] = arith.index_cast %[[HEAD]] : index to i64
// CHECK-NEXT: llvm.getelementptr %[[FACTOR]][%[[INDEX]]] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, f32
func.func @grouped(%q: tensor<2x8x128x64xbf16>, %k: tensor<2x2x128x64xbf16>, %v: tensor<2x2x128x64xbf16>, %f: tensor<8xf32>) -> tensor<2x8x128x64xbf16> {
  %o = kiln.attention %q, %k, %v scale_factor(%f : tensor<8xf32>) {scale = 1.0 : f32} : tensor<2x8x128x64xbf16>, tensor<2x2x128x64xbf16>, tensor<2x2x128x64xbf16> -> tensor<2x8x128x64xbf16>
  return %o : tensor<2x8x128x64xbf16>
}

// -----

// KV heads not known statically may be grouped: the same.
// CHECK-LABEL: func.func @dynamic_kv_heads
// CHECK: kiln.kernel = @kiln_kernels::@kiln_attention_bf16_d64_sfh
func.func @dynamic_kv_heads(%q: tensor<2x8x128x64xbf16>, %k: tensor<2x?x128x64xbf16>, %v: tensor<2x?x128x64xbf16>, %f: tensor<8xf32>) -> tensor<2x8x128x64xbf16> {
  %o = kiln.attention %q, %k, %v scale_factor(%f : tensor<8xf32>) {scale = 1.0 : f32} : tensor<2x8x128x64xbf16>, tensor<2x?x128x64xbf16>, tensor<2x?x128x64xbf16> -> tensor<2x8x128x64xbf16>
  return %o : tensor<2x8x128x64xbf16>
}

// -----

// Grouped at a head dim only the tensor-core kernels take: no kernel.
func.func @grouped_head_dim(%q: tensor<2x8x128x48xbf16>, %k: tensor<2x2x128x48xbf16>, %v: tensor<2x2x128x48xbf16>, %f: tensor<8xf32>) -> tensor<2x8x128x48xbf16> {
  // expected-error @+1 {{no kernel for a per-head scale_factor with grouped-query heads at head dims 48/48: the tensor-core kernel's blocks span a group's query heads, and the scalar kernel takes head dims that are multiples of 32 up to 128 (the same for V)}}
  %o = kiln.attention %q, %k, %v scale_factor(%f : tensor<8xf32>) {scale = 1.0 : f32} : tensor<2x8x128x48xbf16>, tensor<2x2x128x48xbf16>, tensor<2x2x128x48xbf16> -> tensor<2x8x128x48xbf16>
  return %o : tensor<2x8x128x48xbf16>
}

// -----

// Packed sequences run on the tensor-core kernel only: grouped, no kernel.
func.func @packed_grouped(%q: tensor<40x8x64xbf16>, %k: tensor<40x2x64xbf16>, %v: tensor<40x2x64xbf16>, %qo: tensor<3xi32>, %ko: tensor<3xi32>, %f: tensor<8xf32>) -> tensor<40x8x64xbf16> {
  // expected-error @+1 {{no kernel for packed sequences with a per-head scale_factor and grouped-query heads (8 query heads, 2 KV heads): the tensor-core kernel's blocks span a group's query heads}}
  %o = kiln.attention %q, %k, %v offsets(%qo, %ko : tensor<3xi32>, tensor<3xi32>) scale_factor(%f : tensor<8xf32>) {causal, scale = 1.0 : f32} : tensor<40x8x64xbf16>, tensor<40x2x64xbf16>, tensor<40x2x64xbf16> -> tensor<40x8x64xbf16>
  return %o : tensor<40x8x64xbf16>
}

// -----

// The backward's key pass sums a KV head's group: grouped, no kernel; not
// grouped, both passes read the factor at their block's head.
func.func @grad_grouped(%q: tensor<1x8x64x64xbf16>, %k: tensor<1x2x64x64xbf16>, %o: tensor<1x8x64x64xbf16>, %lse: tensor<1x8x64xf32>, %f: tensor<8xf32>) -> tensor<1x8x64x64xbf16> {
  // expected-error @+1 {{no backward kernel for a per-head scale_factor with grouped-query heads: the key pass's blocks sum over a group's query heads (the CPU lowering computes it)}}
  %dq, %dk, %dv = kiln.attention_grad %q, %k, %k, %o, %lse, %o scale_factor(%f : tensor<8xf32>) {scale = 1.0 : f32} : tensor<1x8x64x64xbf16>, tensor<1x2x64x64xbf16>, tensor<1x2x64x64xbf16>, tensor<1x8x64x64xbf16>, tensor<1x8x64xf32>, tensor<1x8x64x64xbf16> -> tensor<1x8x64x64xbf16>, tensor<1x2x64x64xbf16>, tensor<1x2x64x64xbf16>
  return %dq : tensor<1x8x64x64xbf16>
}

// -----

// CHECK-LABEL: func.func @grad
// CHECK: gpu.func @kiln_attention_grad_q_mma_bf16_d64_sfh_lse({{.*}}) kernel
// CHECK: llvm.getelementptr %{{.*}}[%{{.*}}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, f32
// CHECK: gpu.func @kiln_attention_grad_kv_mma_bf16_d64_sfh_lse({{.*}}) kernel
// CHECK-SAME: grid = {blocks = "key_blocks"
// CHECK: llvm.getelementptr %{{.*}}[%{{.*}}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, f32
func.func @grad(%q: tensor<1x4x64x64xbf16>, %o: tensor<1x4x64x64xbf16>, %lse: tensor<1x4x64xf32>, %f: tensor<4xf32>) -> tensor<1x4x64x64xbf16> {
  %dq, %dk, %dv = kiln.attention_grad %q, %q, %q, %o, %lse, %o scale_factor(%f : tensor<4xf32>) {scale = 1.0 : f32} : tensor<1x4x64x64xbf16>, tensor<1x4x64x64xbf16>, tensor<1x4x64x64xbf16>, tensor<1x4x64x64xbf16>, tensor<1x4x64xf32>, tensor<1x4x64x64xbf16> -> tensor<1x4x64x64xbf16>, tensor<1x4x64x64xbf16>, tensor<1x4x64x64xbf16>
  return %dq : tensor<1x4x64x64xbf16>
}
