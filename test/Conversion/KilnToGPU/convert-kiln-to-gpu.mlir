// The scalar kernel (for every element type); convert-kiln-to-gpu-mma.mlir
// tests the tensor-core kernel f16 and bf16 sites get by default.
// RUN: kiln-opt %s -split-input-file -convert-kiln-to-gpu="tensor-cores=0" -verify-diagnostics | FileCheck %s

// One causal GQA site: the op is tagged with its kernel and site name, and the
// kernel is a gpu.func over raw pointers with i32 sizes, an f32 scale and i64
// strides, Q/K/V tiles in workgroup memory (K padded by one column), a loop
// over key blocks carrying max, sum and accumulators per row, warp shuffles
// for the row reductions, and exp2 for the exponentials.
// CHECK-LABEL: module attributes {gpu.container_module}
// CHECK: func.func @causal
// CHECK: kiln.attention {{.*}}kiln.kernel = @kiln_kernels::@kiln_attention_bf16_d64_causal, kiln.site = "attention_0"
// CHECK: gpu.module @kiln_kernels
// CHECK: gpu.func @kiln_attention_bf16_d64_causal(
// CHECK-SAME: %{{[a-z0-9]+}}: !llvm.ptr<1>, %{{[a-z0-9]+}}: !llvm.ptr<1>, %{{[a-z0-9]+}}: !llvm.ptr<1>, %{{[a-z0-9]+}}: !llvm.ptr<1>,
// CHECK-SAME: %{{[a-z0-9]+}}: i32, %{{[a-z0-9]+}}: i32, %{{[a-z0-9]+}}: i32, %{{[a-z0-9]+}}: i32, %{{[a-z0-9]+}}: i32, %{{[a-z0-9]+}}: f32, %{{[a-z0-9]+}}: i64
// CHECK-SAME: workgroup(%[[QS:[a-z0-9]+]] : memref<16x64xf32, #gpu.address_space<workgroup>>, %[[KS:[a-z0-9]+]] : memref<32x65xf32, #gpu.address_space<workgroup>>, %[[VS:[a-z0-9]+]] : memref<32x64xf32, #gpu.address_space<workgroup>>)
// CHECK-SAME: kernel attributes
// CHECK-SAME: kiln.kernel_info = {{{.*}}arg_names = ["q", "k", "v", "out", "batch", "q_heads", "kv_heads", "q_len", "kv_len", "scale", "q_stride_batch"
// CHECK-SAME: rows_per_block = 16 : i64, static_shared_bytes = 20608 : i64, threads_per_block = 128 : i64
// CHECK: llvm.load {{.*}} -> bf16
// CHECK: %{{.*}}:16 = scf.for {{.*}} iter_args(
// CHECK: gpu.barrier
// CHECK: memref.store {{.*}}, %[[KS]]
// CHECK: memref.store {{.*}}, %[[VS]]
// CHECK: gpu.barrier
// CHECK: memref.load %[[QS]]
// CHECK: gpu.shuffle  xor
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// CHECK: gpu.shuffle  idx
// CHECK: scf.if
// CHECK: arith.truncf {{.*}} : f32 to bf16
// CHECK: llvm.store {{.*}} : bf16, !llvm.ptr<1>
func.func @causal(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}

// -----

// Two sites that need the same kernel share it (the scale is an argument);
// a site with a mask gets its own kernel with a mask pointer and four mask
// strides.
// CHECK-LABEL: func.func @shared
// CHECK: kiln.attention {{.*}}kiln.kernel = @kiln_kernels::@kiln_attention_f32_d128, kiln.site = "attention_0"
// CHECK: kiln.attention {{.*}}kiln.kernel = @kiln_kernels::@kiln_attention_f32_d128, kiln.site = "attention_1"
// CHECK: kiln.attention {{.*}}kiln.kernel = @kiln_kernels::@kiln_attention_f32_d128_maskf16, kiln.site = "attention_2"
// CHECK: gpu.func @kiln_attention_f32_d128(
// CHECK-NOT: gpu.func @kiln_attention_f32_d128(
// CHECK: gpu.func @kiln_attention_f32_d128_maskf16(
// CHECK-SAME: arg_names = ["q", "k", "v", "out", "mask", {{.*}}"mask_stride_batch", "mask_stride_head", "mask_stride_q", "mask_stride_k"]
func.func @shared(%q: tensor<1x4x100x128xf32>, %k: tensor<1x4x100x128xf32>, %v: tensor<1x4x100x128xf32>, %m: tensor<1x1x100x100xf16>) -> (tensor<1x4x100x128xf32>, tensor<1x4x100x128xf32>, tensor<1x4x100x128xf32>) {
  %0 = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<1x4x100x128xf32>, tensor<1x4x100x128xf32>, tensor<1x4x100x128xf32> -> tensor<1x4x100x128xf32>
  %1 = kiln.attention %q, %k, %v {scale = 0.5 : f32} : tensor<1x4x100x128xf32>, tensor<1x4x100x128xf32>, tensor<1x4x100x128xf32> -> tensor<1x4x100x128xf32>
  %2 = kiln.attention %q, %k, %v mask(%m : tensor<1x1x100x100xf16>) {scale = 0.125 : f32} : tensor<1x4x100x128xf32>, tensor<1x4x100x128xf32>, tensor<1x4x100x128xf32> -> tensor<1x4x100x128xf32>
  return %0, %1, %2 : tensor<1x4x100x128xf32>, tensor<1x4x100x128xf32>, tensor<1x4x100x128xf32>
}

// -----

// Sliding window and soft-capping are baked into the kernel: the window
// bounds the key loop from below, the cap goes through tanh.
// CHECK-LABEL: func.func @window_softcap
// CHECK: gpu.func @kiln_attention_f16_d64_causal_w128_cap0x41f00000(
// CHECK: arith.maxsi
// CHECK: scf.for
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
func.func @window_softcap(%q: tensor<1x4x?x64xf16>, %k: tensor<1x4x?x64xf16>, %v: tensor<1x4x?x64xf16>) -> tensor<1x4x?x64xf16> {
  %o = kiln.attention %q, %k, %v {causal, window = 128 : i64, softcap = 30.0 : f32, scale = 0.125 : f32} : tensor<1x4x?x64xf16>, tensor<1x4x?x64xf16>, tensor<1x4x?x64xf16> -> tensor<1x4x?x64xf16>
  return %o : tensor<1x4x?x64xf16>
}

// -----

// Head dims that are not a multiple of the warp size are rejected with a
// diagnostic, not miscompiled.
func.func @odd_head_dim(%q: tensor<1x4x16x48xf32>, %k: tensor<1x4x16x48xf32>, %v: tensor<1x4x16x48xf32>) -> tensor<1x4x16x48xf32> {
  // expected-error @+1 {{GPU lowering supports head dims that are multiples of 32 up to 128 (with tensor cores: multiples of 8 up to 256), got 48}}
  %o = kiln.attention %q, %k, %v {scale = 1.0 : f32} : tensor<1x4x16x48xf32>, tensor<1x4x16x48xf32>, tensor<1x4x16x48xf32> -> tensor<1x4x16x48xf32>
  return %o : tensor<1x4x16x48xf32>
}

// -----

// Without tensor cores, f16 at head dim 48 (a tensor-core-only size) is
// rejected too.
func.func @odd_head_dim_f16(%q: tensor<1x4x16x48xf16>, %k: tensor<1x4x16x48xf16>, %v: tensor<1x4x16x48xf16>) -> tensor<1x4x16x48xf16> {
  // expected-error @+1 {{GPU lowering supports head dims that are multiples of 32 up to 128 (with tensor cores: multiples of 8 up to 256), got 48}}
  %o = kiln.attention %q, %k, %v {scale = 1.0 : f32} : tensor<1x4x16x48xf16>, tensor<1x4x16x48xf16>, tensor<1x4x16x48xf16> -> tensor<1x4x16x48xf16>
  return %o : tensor<1x4x16x48xf16>
}
