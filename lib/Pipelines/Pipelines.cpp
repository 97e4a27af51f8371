//===- Pipelines.cpp - Kiln pass pipelines ----------------------*- C++ -*-===//
//
// Pipelines as C++ functions, registered once for every tool.
//
//===----------------------------------------------------------------------===//

#include "kiln/Pipelines/Pipelines.h"

#include "kiln/Conversion/Passes.h"
#include "kiln/Dialect/Kiln/Transforms/Passes.h"

#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/Transforms/Passes.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void mlir::kiln::buildFusionPipeline(OpPassManager &pm,
                                     const FusionPipelineOptions &options) {
  pm.addPass(createCanonicalizerPass());
  KilnFuseAttentionOptions fuseOptions;
  fuseOptions.paddedRows = options.paddedRows;
  fuseOptions.foldFp8 = options.foldFp8;
  pm.addPass(createKilnFuseAttention(fuseOptions));
  pm.addPass(createCanonicalizerPass());
}

kiln::ConvertKilnToGPUOptions
mlir::kiln::GPUPipelineOptions::kernelOptions() const {
  ConvertKilnToGPUOptions options;
#define KILN_KERNEL_OPTION(FIELD, FLAG, TYPE, DEFAULT, KILNC, DESCRIPTION)     \
  options.FIELD = FIELD;
#include "kiln/Conversion/KernelOptions.def"
  return options;
}

void mlir::kiln::buildKernelGenerationPipeline(
    OpPassManager &pm, const ConvertKilnToGPUOptions &options) {
  pm.addPass(createConvertKilnToGPU(options));
}

void mlir::kiln::buildPTXPipeline(OpPassManager &pm,
                                  ArrayRef<std::string> targets) {
  for (const std::string &chip : targets) {
    GpuNVVMAttachTargetOptions attach;
    attach.chip = chip;
    // PTX ISA 8.0 is what sm_90a first needs and what CUDA 12.0+ accepts.
    attach.features = "+ptx80";
    attach.optLevel = 3;
    pm.addPass(createGpuNVVMAttachTarget(attach));
  }
  OpPassManager &gpuPm = pm.nest<gpu::GPUModuleOp>();
  gpuPm.addPass(createSCFToControlFlowPass());
  ConvertGpuOpsToNVVMOpsOptions nvvmOptions;
  nvvmOptions.indexBitwidth = 64;
  gpuPm.addPass(createConvertGpuOpsToNVVMOps(nvvmOptions));
  gpuPm.addPass(kiln::createMarkTensorMapArguments());
  gpuPm.addPass(createCanonicalizerPass());
  gpuPm.addPass(createCSEPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  // Each kernel compiled by the NVPTX back end apart, all at once.
  pm.addPass(kiln::createSerializeKernels());
}

void mlir::kiln::buildGPUPipeline(OpPassManager &pm,
                            const GPUPipelineOptions &options) {
  buildKernelGenerationPipeline(pm, options.kernelOptions());
  buildPTXPipeline(pm, options.targets);
}

void mlir::kiln::registerPipelines() {
  PassPipelineRegistration<FusionPipelineOptions>(
      "kiln-fusion-pipeline",
      "Canonicalize the graph and fuse attention into kiln.attention",
      [](OpPassManager &pm, const FusionPipelineOptions &options) {
        buildFusionPipeline(pm, options);
      });
  PassPipelineRegistration<GPUPipelineOptions>(
      "kiln-gpu-pipeline",
      "Lower kiln.attention to GPU kernels and serialize them to PTX",
      buildGPUPipeline);
}
