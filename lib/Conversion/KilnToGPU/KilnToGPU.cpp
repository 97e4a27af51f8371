//===- KilnToGPU.cpp - kiln.attention to GPU kernels ------------*- C++ -*-===//
//
// Builds a tiled online-softmax kernel (gpu.func) for every kiln.attention
// specialisation in a module. The host IR keeps its kiln.attention ops, each
// tagged with the kernel and site name the package manifest describes.
//
//===----------------------------------------------------------------------===//

#include "kiln/Conversion/KilnToGPU/KilnToGPU.h"
#include "Selection.h"
#include "kiln/Conversion/Passes.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/SymbolTable.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <limits>

namespace mlir::kiln {
#define GEN_PASS_DEF_CONVERTKILNTOGPU
#define GEN_PASS_DEF_MARKTENSORMAPARGUMENTS
#include "kiln/Conversion/Passes.h.inc"
} // namespace mlir::kiln

using namespace mlir;
using namespace mlir::kiln;
using namespace mlir::kiln::detail;

namespace {

struct ConvertKilnToGPUPass
    : public kiln::impl::ConvertKilnToGPUBase<ConvertKilnToGPUPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    ConvertKilnToGPUOptions options;
#define KILN_KERNEL_OPTION(FIELD, FLAG, TYPE, DEFAULT, KILNC, DESCRIPTION)     \
  options.FIELD = FIELD;
#include "kiln/Conversion/KernelOptions.def"
    if (failed(verifyConvertKilnToGPUOptions(
            options, [&] { return module.emitError(); })))
      return signalPassFailure();
    SmallVector<Operation *> sites;
    module.walk([&](Operation *op) {
      if (isa<AttentionOp, PagedAttentionOp, AttentionGradOp>(op))
        sites.push_back(op);
    });
    if (sites.empty())
      return;

    OpBuilder builder(module.getContext());
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                    builder.getUnitAttr());
    auto gpuModule = module.lookupSymbol<gpu::GPUModuleOp>(kKernelModuleName);
    if (!gpuModule) {
      builder.setInsertionPointToEnd(module.getBody());
      gpuModule =
          gpu::GPUModuleOp::create(builder, module.getLoc(), kKernelModuleName);
    }
    SymbolTable kernels(gpuModule);

    int64_t siteIndex = 0;
    for (Operation *op : sites) {
      FailureOr<KernelChoice> choice =
          selectKernel(op, options, KernelTarget{hopper});
      if (failed(choice))
        return signalPassFailure();
      const KernelSpec &spec = choice->spec;
      std::string name = spec.name();
      if (!kernels.lookup(name)) {
        std::unique_ptr<AttentionKernelBuilder> kernel = choice->createKernel();
        OpBuilder kernelBuilder = OpBuilder::atBlockEnd(gpuModule.getBody());
        gpu::GPUFuncOp func = kernel->build(kernelBuilder, op->getLoc());
        kernels.insert(func);
        KernelContract contract = kernel->contract();
        if (const std::optional<Schedule> &schedule = choice->schedule)
          contract.schedule = MmaScheduleFacts{
              schedule->wgmma ? "wgmma" : "mma.sync", schedule->blocksPerSM,
              schedule->from};
        contract.why = choice->why;
        // A companion kernel shared by every kernel with the same `name`
        // (built once, with its own contract); returns that name.
        auto companion = [&](const std::string &name,
                             function_ref<gpu::GPUFuncOp()> build,
                             function_ref<KernelContract()> companionContract) {
          if (!kernels.lookup(name)) {
            gpu::GPUFuncOp kernel = build();
            kernels.insert(kernel);
            kernel->setAttr(kKernelInfoAttrName,
                            companionContract().toAttr(builder.getContext()));
          }
          return name;
        };
        const AttentionProblem &problem = spec.problem;
        // The kernel that reduces its splits, by output type.
        if (choice->combineKernel)
          contract.combineKernel = companion(
              *choice->combineKernel,
              [&] {
                return buildSplitCombineKernel(
                    kernelBuilder, op->getLoc(), problem.elementType,
                    problem.valueDim(), spec.launch.waitForGrid,
                    problem.ragged);
              },
              [&] {
                return splitCombineContract(problem.elementType,
                                            problem.valueDim(), problem.ragged);
              });
        // The cache append of the site's caches, by element type and head
        // dims.
        if (choice->appendKernel)
          contract.appendKernel = companion(
              *choice->appendKernel,
              [&] {
                return buildPagedAppendKernel(
                    kernelBuilder, op->getLoc(), problem.elementType,
                    problem.headDim, problem.valueDim(), problem.fp8Cache,
                    problem.perHeadScales);
              },
              [&] {
                return pagedAppendContract(problem.elementType,
                                           problem.headDim, problem.valueDim(),
                                           problem.fp8Cache);
              });
        func->setAttr(kKernelInfoAttrName,
                      contract.toAttr(builder.getContext()));
      }
      if (choice->gradKeyValue) {
        // The backward's key pass, launched after the query pass.
        std::string keyPass = choice->gradKeyValue->name();
        if (!kernels.lookup(keyPass)) {
          std::unique_ptr<AttentionKernelBuilder> kernel =
              choice->createGradKeyValueKernel();
          OpBuilder kernelBuilder = OpBuilder::atBlockEnd(gpuModule.getBody());
          gpu::GPUFuncOp func = kernel->build(kernelBuilder, op->getLoc());
          kernels.insert(func);
          KernelContract contract = kernel->contract();
          contract.why = choice->why;
          func->setAttr(kKernelInfoAttrName,
                        contract.toAttr(builder.getContext()));
        }
        op->setAttr(kGradKeyValueKernelAttrName,
                    SymbolRefAttr::get(
                        builder.getStringAttr(kKernelModuleName),
                        {FlatSymbolRefAttr::get(
                            builder.getStringAttr(keyPass))}));
      }
      if (choice->warpSpecialized) {
        std::string wsName = buildWarpSpecialized(*choice, op, gpuModule,
                                                  kernels);
        op->setAttr(kWarpSpecializedKernelAttrName,
                    SymbolRefAttr::get(builder.getStringAttr(kKernelModuleName),
                                       {FlatSymbolRefAttr::get(
                                           builder.getStringAttr(wsName))}));
      }
      op->setAttr(kKernelAttrName,
                  SymbolRefAttr::get(
                      builder.getStringAttr(kKernelModuleName),
                      {FlatSymbolRefAttr::get(builder.getStringAttr(name))}));
      if (!op->hasAttr(kSiteAttrName))
        op->setAttr(kSiteAttrName,
                    builder.getStringAttr(
                        llvm::formatv(isa<AttentionGradOp>(op)
                                          ? "attention_grad_{0}"
                                          : "attention_{0}",
                                      siteIndex)
                            .str()));
      ++siteIndex;
    }
  }

  /// Builds (once) the warp-specialised kernel `choice` chose for a site;
  /// returns its name.
  std::string buildWarpSpecialized(const KernelChoice &choice, Operation *op,
                                   gpu::GPUModuleOp gpuModule,
                                   SymbolTable &kernels) {
    const KernelSpec &spec = *choice.warpSpecialized;
    std::string name = spec.name();
    if (kernels.lookup(name))
      return name;
    std::unique_ptr<AttentionKernelBuilder> kernel =
        choice.createWarpSpecializedKernel();
    OpBuilder kernelBuilder = OpBuilder::atBlockEnd(gpuModule.getBody());
    gpu::GPUFuncOp func = kernel->build(kernelBuilder, op->getLoc());
    kernels.insert(func);
    KernelContract contract = kernel->contract();
    contract.targets = {"sm_90a"};
    // Its schedule, for the manifest: the table's, the rules' or forced.
    WarpSpecializedSchedule built = warpSpecializedSchedule(spec);
    contract.warpSchedule =
        WarpScheduleFacts{built.consumers, built.tileKeys, built.overlap,
                          built.pingPong, choice.warpSchedule.from};
    contract.why = choice.warpSpecializedWhy;
    func->setAttr(kKernelInfoAttrName,
                  contract.toAttr(op->getContext()));
    return name;
  }
};

} // namespace

namespace {

struct MarkTensorMapArgumentsPass
    : public kiln::impl::MarkTensorMapArgumentsBase<
          MarkTensorMapArgumentsPass> {
  void runOnOperation() override {
    getOperation().walk([](LLVM::LLVMFuncOp func) {
      auto indices =
          func->getAttrOfType<DenseI64ArrayAttr>(kTensorMapArgsAttrName);
      if (!indices)
        return;
      MLIRContext *ctx = func.getContext();
      Builder builder(ctx);
      auto tensorMapType =
          LLVM::LLVMArrayType::get(IntegerType::get(ctx, 8), 128);
      for (int64_t index : indices.asArrayRef()) {
        func.setArgAttr(index, LLVM::LLVMDialect::getByValAttrName(),
                        TypeAttr::get(tensorMapType));
        func.setArgAttr(index, LLVM::LLVMDialect::getAlignAttrName(),
                        builder.getI64IntegerAttr(64));
        func.setArgAttr(index, NVVM::NVVMDialect::getGridConstantAttrName(),
                        builder.getUnitAttr());
      }
      func->removeAttr(kTensorMapArgsAttrName);
    });
  }
};

} // namespace

LogicalResult mlir::kiln::verifyConvertKilnToGPUOptions(
    const ConvertKilnToGPUOptions &options,
    function_ref<InFlightDiagnostic()> emitError, StringRef flagPrefix) {
  if (options.kvBlockSize <= 0 || options.kvBlockSize % kWarpSize != 0)
    return emitError() << flagPrefix
                       << "kv-block-size must be a positive multiple of 32";
  if (options.rowsPerWarp <= 0)
    return emitError() << flagPrefix << "rows-per-warp must be positive";
  if (options.schedule != "table" && options.schedule != "wgmma" &&
      options.schedule != "mma")
    return emitError() << flagPrefix
                       << "schedule must be 'table', 'wgmma' or 'mma', got '"
                       << options.schedule << "'";
  return success();
}
