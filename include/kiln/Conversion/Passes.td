//===- Passes.td - Kiln conversion passes ------------------*- tablegen -*-===//
//
// Passes that lower kiln.attention to kernels.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CONVERSION_PASSES_TD
#define KILN_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

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
  let options = [
    Option<"kvBlockSize", "kv-block-size", "int64_t", "32",
           "Keys staged in shared memory per iteration (a multiple of 32)">,
    Option<"rowsPerWarp", "rows-per-warp", "int64_t", "4",
           "Query rows each warp of the scalar kernel owns">,
    Option<"tensorCores", "tensor-cores", "bool", "true",
           "Use the mma.sync kernel for f16 and bf16 sites whose head dim "
           "it supports (a multiple of 8 up to 256), and the TF32 kernel "
           "with split operands (3xTF32, f32's accuracy) for f32 sites "
           "whose head dims are multiples of 8 up to 256; the scalar kernel "
           "otherwise">,
    Option<"allowTf32", "allow-tf32", "bool", "false",
           "Run f32 sites on one TF32 product per product (mma.sync "
           "m16n8k8: Q, K, P and V rounded to TF32, f32 accumulation and "
           "softmax) where the TF32 kernel supports the head dims "
           "(multiples of 8 up to 256, V's its own), rather than on the "
           "split-operand default">,
    Option<"hopper", "hopper", "bool", "false",
           "Build the sm_90a variant of the tensor-core kernel (wgmma on "
           "swizzled shared tiles) where a site's head dims are multiples of "
           "64; the module then serves sm_90a only">,
    Option<"warpSpecialize", "warp-specialize", "bool", "true",
           "With hopper: also build the warp-specialised kernel (TMA "
           "producer warp, two wgmma consumer warpgroups, three at head dim "
           "64) for kiln.attention "
           "f16/bf16 sites (masks, bias and softcap included) whose head "
           "dims (Q's and K's, and V's) are multiples of 8 from 16 to 256; "
           "the runtime launches it for prefill shapes whose views TMA can "
           "describe">,
    Option<"warpSpecializeConsumers", "warp-specialize-consumers",
           "int64_t", "-1",
           "Consumer warpgroups of the warp-specialised kernels, 2 or 3 "
           "(-1: from the schedule table or the rules), for tuning">,
    Option<"warpSpecializeTileKeys", "warp-specialize-tile-keys", "int64_t",
           "-1",
           "Keys a K/V tile of the warp-specialised kernels, 64 or 128 (-1: "
           "from the schedule table or the rules), for tuning">,
    Option<"warpSpecializeOverlap", "warp-specialize-overlap", "int64_t",
           "-1",
           "1: in the warp-specialised kernels, run each tile's softmax "
           "while the previous tile's P·V product runs; 0: one tile after "
           "another (-1: from the schedule table or the rules), for tuning">,
    Option<"warpSpecializePingPong", "warp-specialize-ping-pong", "int64_t",
           "-1",
           "1: in the warp-specialised kernels with the overlap and two "
           "consumers, make the consumers take turns to issue their "
           "products (named barriers); 0: not (-1: from the schedule table "
           "or the rules), for tuning">,
    Option<"warpSpecializePersistent", "warp-specialize-persistent",
           "int64_t", "-1",
           "1: the warp-specialised kernels run one block an SM over the "
           "work items (query block, head, sequence); 0: a block an item "
           "(-1: from the rules), for tuning">,
    Option<"schedule", "schedule", "std::string", "\"table\"",
           "Tensor-core kernel variant on sm_90a: 'table' (the shipped "
           "table of measured schedules, else the rules), 'wgmma' or 'mma' "
           "(forced, for tuning)">,
    Option<"blocksPerSM", "blocks-per-sm", "int64_t", "-1",
           "Blocks per SM the tensor-core kernel's registers leave room for "
           "(-1: from the schedule; 0: as ptxas allocates), for tuning">
  ];
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

#endif // KILN_CONVERSION_PASSES_TD
