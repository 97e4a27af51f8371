//===- Pipelines.h - Kiln pass pipelines ------------------------*- C++ -*-===//
//
// The pass pipelines shared by kiln-opt, kilnc and the C API.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PIPELINES_PIPELINES_H
#define KILN_PIPELINES_PIPELINES_H

#include "kiln/Conversion/Passes.h"

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
  // convert-kiln-to-gpu's options, under the same names.
#define KILN_KERNEL_OPTION(FIELD, FLAG, TYPE, DEFAULT, KILNC, DESCRIPTION)     \
  Option<TYPE> FIELD{*this, FLAG, llvm::cl::desc(DESCRIPTION),                 \
                     llvm::cl::init(DEFAULT)};
#include "kiln/Conversion/KernelOptions.def"

  /// The options of convert-kiln-to-gpu these hold.
  ConvertKilnToGPUOptions kernelOptions() const;
};

/// Options of the fusion pipeline.
struct FusionPipelineOptions
    : public PassPipelineOptions<FusionPipelineOptions> {
  Option<std::string> paddedRows{
      *this, "padded-rows",
      llvm::cl::desc("'exact' or 'free': whether rows that see no key must "
                     "give what the graph gives (see kiln-fuse-attention)"),
      llvm::cl::init("exact")};
  Option<bool> foldFp8{
      *this, "fold-fp8",
      llvm::cl::desc("Fold e4m3 operands dequantised in the graph into "
                     "FP8 kiln.attention operands (see kiln-fuse-attention)"),
      llvm::cl::init(true)};
};

/// Graph clean-up and attention fusion (`kiln-fusion-pipeline`).
void buildFusionPipeline(OpPassManager &pm,
                         const FusionPipelineOptions &options = {});

/// kiln.attention → gpu.func kernels (`convert-kiln-to-gpu`).
void buildKernelGenerationPipeline(OpPassManager &pm,
                                   const ConvertKilnToGPUOptions &options);

/// gpu.module kernels → NVVM → gpu.binary holding PTX, one object per
/// target chip.
void buildPTXPipeline(OpPassManager &pm, ArrayRef<std::string> targets);

/// The whole GPU path (`kiln-gpu-pipeline`): kernel generation, then PTX.
void buildGPUPipeline(OpPassManager &pm,
                      const GPUPipelineOptions &options);

/// Registers the pipelines above with the pass registry.
void registerPipelines();

} // namespace mlir::kiln

#endif // KILN_PIPELINES_PIPELINES_H
