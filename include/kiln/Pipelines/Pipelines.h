//===- Pipelines.h - Kiln pass pipelines ------------------------*- C++ -*-===//
//
// The pass pipelines shared by kiln-opt, kilnc and the C API.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PIPELINES_PIPELINES_H
#define KILN_PIPELINES_PIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

#include <string>

namespace mlir::kiln {

/// Options of the GPU pipelines.
struct GPUPipelineOptions
    : public PassPipelineOptions<GPUPipelineOptions> {
  ListOption<std::string> targets{
      *this, "targets",
      llvm::cl::desc("GPU targets to emit PTX for (sm_80, sm_90a, ...)"),
      llvm::cl::list_init<std::string>({"sm_90a"})};
  Option<int64_t> kvBlockSize{
      *this, "kv-block-size",
      llvm::cl::desc("Keys staged in shared memory per iteration"),
      llvm::cl::init(32)};
  Option<int64_t> rowsPerWarp{
      *this, "rows-per-warp",
      llvm::cl::desc("Query rows each warp of the scalar kernel owns"),
      llvm::cl::init(4)};
  Option<bool> tensorCores{
      *this, "tensor-cores",
      llvm::cl::desc("Use the tensor-core kernels (mma.sync/wgmma for f16 "
                     "and bf16 sites, TF32 for f32 sites)"),
      llvm::cl::init(true)};
  Option<bool> allowTf32{
      *this, "allow-tf32",
      llvm::cl::desc("Run f32 sites on one TF32 product per product "
                     "(rather than three, with split operands)"),
      llvm::cl::init(false)};
  Option<bool> hopper{
      *this, "hopper",
      llvm::cl::desc("Build the sm_90a (wgmma) variants of the tensor-core "
                     "kernel; the module then serves sm_90a only"),
      llvm::cl::init(false)};
  Option<bool> warpSpecialize{
      *this, "warp-specialize",
      llvm::cl::desc("With hopper: also build the warp-specialised (TMA, "
                     "producer warp, two wgmma consumer warpgroups, three at "
                     "head dim 64) kernels"),
      llvm::cl::init(true)};
  Option<int64_t> warpSpecializeConsumers{
      *this, "warp-specialize-consumers",
      llvm::cl::desc("Consumer warpgroups of the warp-specialised kernels "
                     "(-1: from the schedule table or the rules)"),
      llvm::cl::init(-1)};
  Option<int64_t> warpSpecializeTileKeys{
      *this, "warp-specialize-tile-keys",
      llvm::cl::desc("Keys a K/V tile of the warp-specialised kernels (-1: "
                     "from the schedule table or the rules)"),
      llvm::cl::init(-1)};
  Option<int64_t> warpSpecializeOverlap{
      *this, "warp-specialize-overlap",
      llvm::cl::desc("1/0: overlap each tile's softmax with the previous "
                     "tile's P·V in the warp-specialised kernels or not "
                     "(-1: from the schedule table or the rules)"),
      llvm::cl::init(-1)};
  Option<int64_t> warpSpecializePingPong{
      *this, "warp-specialize-ping-pong",
      llvm::cl::desc("1/0: the warp-specialised kernels' consumers take "
                     "turns to issue their products or not (-1: from the "
                     "schedule table or the rules)"),
      llvm::cl::init(-1)};
  Option<int64_t> warpSpecializePersistent{
      *this, "warp-specialize-persistent",
      llvm::cl::desc("1/0: the warp-specialised kernels run one block an SM "
                     "over the work items or a block an item (-1: from the "
                     "rules)"),
      llvm::cl::init(-1)};
  Option<std::string> schedule{
      *this, "schedule",
      llvm::cl::desc("sm_90a tensor-core variant: table, wgmma or mma"),
      llvm::cl::init("table")};
  Option<int64_t> blocksPerSM{
      *this, "blocks-per-sm",
      llvm::cl::desc("Blocks per SM of the tensor-core kernel (-1: from "
                     "the schedule)"),
      llvm::cl::init(-1)};
};

/// Options of the fusion pipeline.
struct FusionPipelineOptions
    : public PassPipelineOptions<FusionPipelineOptions> {
  Option<std::string> paddedRows{
      *this, "padded-rows",
      llvm::cl::desc("'exact' or 'free': whether rows that see no key must "
                     "give what the graph gives (see kiln-fuse-attention)"),
      llvm::cl::init("exact")};
};

/// Graph clean-up and attention fusion (`kiln-fusion-pipeline`).
void buildFusionPipeline(OpPassManager &pm,
                         const FusionPipelineOptions &options = {});

/// kiln.attention → gpu.func kernels (`convert-kiln-to-gpu`).
void buildKernelGenerationPipeline(OpPassManager &pm,
                                   const GPUPipelineOptions &options);

/// gpu.module kernels → NVVM → gpu.binary holding PTX, one object per
/// target.
void buildPTXPipeline(OpPassManager &pm,
                      const GPUPipelineOptions &options);

/// The whole GPU path (`kiln-gpu-pipeline`): kernel generation, then PTX.
void buildGPUPipeline(OpPassManager &pm,
                      const GPUPipelineOptions &options);

/// Registers the pipelines above with the pass registry.
void registerPipelines();

} // namespace mlir::kiln

#endif // KILN_PIPELINES_PIPELINES_H
