//===- Passes.td - Kiln conversion passes ------------------*- tablegen -*-===//
//
// Passes that lower kiln.attention to kernels.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CONVERSION_PASSES_TD
#define KILN_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"
// Generated from KernelOptions.def (CMakeLists.txt).
include "kiln/Conversion/KernelOptions.td"

def ConvertKilnToGPU : Pass<"convert-kiln-to-gpu", "::mlir::ModuleOp"> {
  let summary = "Generate a tiled online-softmax GPU kernel per attention site";
  let description = [{
    For every `kiln.attention` in the module, builds (or reuses, when an
    identical specialisation exists) a `gpu.func` kernel in the
    `gpu.module @kiln_kernels` of the module, and tags the op with
    `kiln.kernel = @kiln_kernels::@name` and `kiln.site = "attention_N"`.
    The host side stays as it is: kernels are launched by the runtime from
    the package manifest, not from host IR.

    Both kernels are FlashAttention-style: a block of query rows per CTA, a
    loop over blocks of keys staged in shared memory, a running max and sum
    per row, `exp2` with `scale·log2(e)` folded into the scores, and key
    blocks past the causal diagonal (or before a sliding window) never
    visited. f16 and bf16 sites use the tensor-core kernel (with
    `tensor-cores`): 64 rows per CTA, 16 per warp, each row a (query, head)
    pair of one KV head's query group (grid y over KV heads); 64-key tiles
    copied with `cp.async` into two stages of dynamic shared memory; Q·Kᵀ
    and P·V as m16n8k16 `mma.sync` with f32 accumulators, operands read by
    `ldmatrix`, and the probabilities kept in registers between the two
    products; decode shapes (`q_len · group ≤ 16`) split each tile's keys
    across the warps and merge at the end. f32 sites use the scalar kernel:
    `4 × rows-per-warp` rows per CTA and `kv-block-size` keys per tile,
    staged as f32, f32 FMAs. Pointers are
    `!llvm.ptr<1>`; sizes are i32 and strides i64 kernel arguments, so one
    kernel serves every dynamic shape and both layouts.

    Kernel arguments, in order: `q, k, v, out` pointers, then `mask` and
    `bias` pointers when the op has them; `batch, q_heads, kv_heads, q_len,
    kv_len` (i32); `scale` (f32); then the batch, head and sequence strides
    (i64, in elements) of q, k, v and out, then the four strides of mask and
    bias (`[B, Hq, Sq, Sk]`, 0 for a broadcast axis).
  }];
  let dependentDialects = [
    "::mlir::gpu::GPUDialect", "::mlir::scf::SCFDialect",
    "::mlir::arith::ArithDialect", "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect", "::mlir::LLVM::LLVMDialect",
    "::mlir::NVVM::NVVMDialect"
  ];
  // KernelOptions.def: the one list of these options, which
  // kiln-gpu-pipeline and kilnc offer too.
  let options = KilnKernelOptions;
}

def MarkTensorMapArguments
    : Pass<"kiln-mark-tensor-map-args", "::mlir::gpu::GPUModuleOp"> {
  let summary = "Make the tensor-map arguments of lowered kernels grid "
                "constants";
  let description = [{
    After the lowering to NVVM: every `llvm.func` kernel with a
    `kiln.tensor_map_args` attribute gets, on each argument listed there,
    `llvm.byval = !llvm.array<128 x i8>`, `llvm.align = 64` and
    `nvvm.grid_constant`, so that the PTX parameter is the 128-byte
    CUtensorMap itself (`.param .align 64 .b8 name[128]`) and its generic
    address (`cvta.param`) is what TMA instructions read. gpu.func cannot
    carry these attributes through the lowering.
  }];
  let dependentDialects = [
    "::mlir::LLVM::LLVMDialect", "::mlir::NVVM::NVVMDialect"
  ];
}

def SerializeKernels : Pass<"kiln-serialize-kernels", "::mlir::ModuleOp"> {
  let summary = "Serialise each gpu.module to PTX, one kernel per LLVM module, "
                "compiled in parallel";
  let description = [{
    Replaces every `gpu.module` (lowered to the LLVM and NVVM dialects, with
    `#nvvm.target`s attached) by a `gpu.binary` of the same name holding one
    PTX object per target, as `gpu-module-to-binary` with `format=isa`
    does, but the NVPTX back end compiles each kernel from a module of its
    own (the kernel and the symbols it uses), the kernels of all targets in
    parallel (the context's threads), and each target's PTX is the kernels'
    modules joined: the header once, each declaration once, the entries in
    the module's order. Where the back end's texts do not join as expected
    (a device function, a multi-line declaration, one name declared two
    ways), that target's PTX is compiled from the whole module instead.
  }];
  let dependentDialects = ["::mlir::gpu::GPUDialect"];
}

#endif // KILN_CONVERSION_PASSES_TD
