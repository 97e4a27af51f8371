//===- KilnToGPU.cpp - kiln.attention to GPU kernels ------------*- C++ -*-===//
//
// Builds a tiled online-softmax kernel (gpu.func) for every kiln.attention
// specialisation in a module. The host IR keeps its kiln.attention ops, each
// tagged with the kernel and site name the package manifest describes.
//
//===----------------------------------------------------------------------===//

#include "kiln/Conversion/KilnToGPU/KilnToGPU.h"
#include "AttentionKernel.h"
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

/// Checks that `op` is something the kernel generator supports.
LogicalResult checkSupported(AttentionOp op, bool tensorCores,
                             bool allowTf32) {
  int64_t headDim = op.getHeadDim();
  if (ShapedType::isDynamic(headDim))
    return op.emitOpError("GPU lowering needs a static head dim");
  int64_t valueHeadDim = op.getValueHeadDim();
  if (ShapedType::isDynamic(valueHeadDim))
    return op.emitOpError("GPU lowering needs a static value head dim");
  // Packed sequences take their work items from a plan, which only the
  // tensor-core kernel reads.
  if (op.isPacked() &&
      !(tensorCores &&
        mmaKernelSupports(op.getElementType(), headDim, valueHeadDim)))
    return op.emitOpError("packed sequences (offsets) run on the "
                          "tensor-core kernel only: f16/bf16, head dims "
                          "multiples of 8 up to 256, got ")
           << op.getElementType() << " with head dims " << headDim << "/"
           << valueHeadDim
           << (tensorCores ? "" : " (tensor cores are off)");
  if (tensorCores &&
      mmaKernelSupports(op.getElementType(), headDim, valueHeadDim))
    return success();
  if ((tensorCores || allowTf32) && op.getElementType().isF32() &&
      tf32KernelSupports(headDim, valueHeadDim))
    return success();
  if (valueHeadDim != headDim)
    return op.emitOpError("a value head dim (")
           << valueHeadDim << ") other than the query/key one (" << headDim
           << ") runs on the tensor-core kernels only: both multiples of 8 "
              "up to 256";
  if (headDim % kWarpSize != 0 || headDim > 128)
    return op.emitOpError("GPU lowering supports head dims that are "
                          "multiples of 32 up to 128 (with tensor cores: "
                          "multiples of 8 up to 256), got ")
           << headDim;
  return success();
}

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
      if (isa<AttentionOp, PagedAttentionOp>(op))
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
    for (Operation *site : sites) {
      KernelSpec spec;
      Operation *op = site;
      if (auto paged = dyn_cast<PagedAttentionOp>(site)) {
        if (failed(pagedSpec(paged, spec)))
          return signalPassFailure();
      } else if (failed(attentionSpec(cast<AttentionOp>(site), spec))) {
        return signalPassFailure();
      }
      Schedule chosen;
      if (spec.variant.tensorCores) {
        chosen = chooseSchedule(spec, hopper);
        if (schedule != "table") {
          chosen.wgmma = hopper && schedule == "wgmma" &&
                         wgmmaKernelSupports(spec.problem.headDim,
                                             spec.problem.valueDim());
          chosen.from = "option";
        }
        if (blocksPerSM >= 0) {
          chosen.blocksPerSM = blocksPerSM;
          chosen.from = "option";
        }
        // A register cap below what wgmma's accumulators hold (the value
        // head dim's, padded, over two, beside about 32 others) does not
        // assemble.
        if (chosen.wgmma && chosen.blocksPerSM > 0) {
          int64_t cap = 65536 / (kThreadsPerBlock * chosen.blocksPerSM);
          int64_t needed = llvm::alignTo(spec.problem.valueDim(), 64) / 2 + 32;
          if (cap < needed) {
            op->emitOpError("blocks-per-sm ")
                << chosen.blocksPerSM << " leaves " << cap
                << " registers a thread; the wgmma kernel's accumulators "
                   "need at least "
                << needed;
            return signalPassFailure();
          }
        }
        // FP8 caches convert their tiles to the padded mma.sync layout.
        if (spec.problem.fp8Cache)
          chosen.wgmma = false;
        spec.variant.wgmma = chosen.wgmma;
        spec.variant.blocksPerSM = chosen.blocksPerSM;
      }
      spec.launch.launchDependents = hopper && spec.launch.splitKV;
      // A ragged launch's blocks come from its plan, whose empty items
      // leave no cluster whole: its splits go to the combine kernel.
      spec.launch.clusterSplits =
          hopper && spec.launch.splitKV && !spec.problem.ragged;
      spec.launch.waitForGrid = hopper;
      spec.variant.fp8HardwareConvert = hopper && spec.problem.fp8Cache;
      std::string name = spec.name();
      if (!kernels.lookup(name)) {
        std::unique_ptr<AttentionKernelBuilder> kernel =
            spec.variant.tensorCores ? createMmaKernel(spec)
            : spec.variant.tf32
                ? createTf32Kernel(spec)
                : createScalarKernel(spec, kvBlockSize, rowsPerWarp);
        if (kernel->sharedBytes() > kStaticSharedLimit ||
            kernel->sharedBytes() + kernel->dynamicSharedBytes() >
                kDynamicSharedLimit) {
          op->emitOpError("kernel needs ")
              << kernel->sharedBytes() + kernel->dynamicSharedBytes()
              << " bytes of shared memory; lower kv-block-size or "
                 "rows-per-warp";
          return signalPassFailure();
        }
        OpBuilder kernelBuilder = OpBuilder::atBlockEnd(gpuModule.getBody());
        gpu::GPUFuncOp func = kernel->build(kernelBuilder, op->getLoc());
        kernels.insert(func);
        KernelContract contract = kernel->contract();
        if (spec.variant.tensorCores)
          contract.schedule = MmaScheduleFacts{
              chosen.wgmma ? "wgmma" : "mma.sync", chosen.blocksPerSM,
              chosen.from};
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
        // The kernel that reduces its splits, by output type.
        if (spec.launch.splitKV)
          contract.combineKernel = companion(
              splitCombineKernelName(spec.problem.elementType,
                                     spec.problem.valueDim(),
                                     spec.problem.ragged),
              [&] {
                return buildSplitCombineKernel(
                    kernelBuilder, op->getLoc(), spec.problem.elementType,
                    spec.problem.valueDim(), /*waitForGrid=*/hopper,
                    spec.problem.ragged);
              },
              [&] {
                return splitCombineContract(spec.problem.elementType,
                                            spec.problem.valueDim(),
                                            spec.problem.ragged);
              });
        // The cache append of the site's caches, by element type and head
        // dims.
        if (spec.problem.paged)
          contract.appendKernel = companion(
              pagedAppendKernelName(
                  spec.problem.elementType, spec.problem.headDim,
                  spec.problem.valueDim(), spec.problem.fp8Cache,
                  spec.problem.perHeadScales),
              [&] {
                return buildPagedAppendKernel(
                    kernelBuilder, op->getLoc(), spec.problem.elementType,
                    spec.problem.headDim, spec.problem.valueDim(),
                    spec.problem.fp8Cache, spec.problem.perHeadScales);
              },
              [&] {
                return pagedAppendContract(
                    spec.problem.elementType, spec.problem.headDim,
                    spec.problem.valueDim(), spec.problem.fp8Cache);
              });
        func->setAttr(kKernelInfoAttrName,
                      contract.toAttr(builder.getContext()));
      }
      // The warp-specialised kernel folds the scale into its exponents'
      // FMAs, which takes a positive scale (a row's largest score then
      // comes from its largest dot product): one known when the kernel is
      // built, so not a run-time scale_factor, whose sign is the graph's.
      auto attention = dyn_cast<AttentionOp>(site);
      if (hopper && warpSpecialize && spec.variant.tensorCores && attention &&
          attention.getScale().convertToFloat() > 0.0f &&
          !attention.getScaleFactor() &&
          warpSpecializedKernelSupports(spec)) {
        FailureOr<std::string> wsName =
            buildWarpSpecialized(spec, op, builder, gpuModule, kernels);
        if (failed(wsName))
          return signalPassFailure();
        op->setAttr(kWarpSpecializedKernelAttrName,
                    SymbolRefAttr::get(builder.getStringAttr(kKernelModuleName),
                                       {FlatSymbolRefAttr::get(
                                           builder.getStringAttr(*wsName))}));
      }
      op->setAttr(kKernelAttrName,
                  SymbolRefAttr::get(
                      builder.getStringAttr(kKernelModuleName),
                      {FlatSymbolRefAttr::get(builder.getStringAttr(name))}));
      if (!op->hasAttr(kSiteAttrName))
        op->setAttr(kSiteAttrName,
                    builder.getStringAttr(
                        llvm::formatv("attention_{0}", siteIndex).str()));
      ++siteIndex;
    }
  }

  /// Builds (once) the warp-specialised kernel of a site whose portable
  /// kernel is `siteSpec`; returns its name.
  FailureOr<std::string> buildWarpSpecialized(const KernelSpec &siteSpec,
                                              Operation *op, OpBuilder &builder,
                                              gpu::GPUModuleOp gpuModule,
                                              SymbolTable &kernels) {
    KernelSpec spec = siteSpec;
    spec.launch.packQueryHeads = false;
    spec.launch.splitKV = false;
    spec.launch.launchDependents = false;
    spec.launch.clusterSplits = false;
    spec.variant.wgmma = false;
    spec.variant.blocksPerSM = 0;
    spec.variant.warpSpecialized = true;
    // The table's schedule or the rules', then what the options force.
    WarpSpecializedSchedule schedule = chooseWarpSpecializedSchedule(spec);
    auto force = [&](int64_t option, auto &field) {
      if (option < 0)
        return;
      field = option;
      schedule.from = "option";
    };
    force(warpSpecializeConsumers, schedule.consumers);
    force(warpSpecializeTileKeys, schedule.tileKeys);
    force(warpSpecializeOverlap, schedule.overlap);
    force(warpSpecializePingPong, schedule.pingPong);
    force(warpSpecializePersistent, schedule.persistent);
    // (Forced on, it walks at every length.)
    if (warpSpecializePersistent >= 0)
      schedule.persistentUpToKeys = 0;
    std::string why;
    if (!warpSpecializedScheduleFits(spec, schedule, why))
      return op->emitOpError("warp-specialised kernel: ") << why;
    spec.variant.warpConsumers = schedule.consumers;
    spec.variant.warpTileKeys = schedule.tileKeys;
    spec.variant.overlapSoftmax = schedule.overlap;
    spec.variant.pingPong = schedule.pingPong;
    spec.variant.persistent = schedule.persistent;
    spec.variant.persistentUpToKeys = schedule.persistentUpToKeys;
    std::string name = spec.name();
    if (kernels.lookup(name))
      return name;
    std::unique_ptr<AttentionKernelBuilder> kernel =
        createWarpSpecializedKernel(spec);
    if (kernel->dynamicSharedBytes() > warpSpecializedSharedLimit())
      return op->emitOpError("warp-specialised kernel needs ")
             << kernel->dynamicSharedBytes() << " bytes of shared memory";
    OpBuilder kernelBuilder = OpBuilder::atBlockEnd(gpuModule.getBody());
    gpu::GPUFuncOp func = kernel->build(kernelBuilder, op->getLoc());
    kernels.insert(func);
    KernelContract contract = kernel->contract();
    contract.targets = {"sm_90a"};
    // Its schedule, for the manifest: the table's, the rules' or forced.
    WarpSpecializedSchedule built = warpSpecializedSchedule(spec);
    contract.warpSchedule =
        WarpScheduleFacts{built.consumers, built.tileKeys, built.overlap,
                          built.pingPong, schedule.from};
    func->setAttr(kKernelInfoAttrName, contract.toAttr(builder.getContext()));
    return name;
  }

  /// The kernel of a kiln.attention site.
  LogicalResult attentionSpec(AttentionOp op, KernelSpec &spec) {
    if (failed(checkSupported(op, tensorCores, allowTf32)))
      return failure();
    AttentionProblem &problem = spec.problem;
    problem.elementType = op.getElementType();
    problem.headDim = op.getHeadDim();
    if (op.getValueHeadDim() != problem.headDim)
      problem.valueHeadDim = op.getValueHeadDim();
    problem.causal = op.getCausal();
    problem.window = op.getWindow();
    if (std::optional<uint64_t> right = op.getWindowRight())
      problem.windowRight = static_cast<int64_t>(*right);
    if (std::optional<APFloat> cap = op.getSoftcap())
      problem.softcap = cap->convertToFloat();
    if (std::optional<APFloat> fill = op.getMaskedScore())
      problem.maskedScore = fill->convertToFloat();
    if (Value mask = op.getMask())
      problem.maskType = cast<ShapedType>(mask.getType()).getElementType();
    if (Value bias = op.getBias())
      problem.biasType = cast<ShapedType>(bias.getType()).getElementType();
    problem.scaleFactor = static_cast<bool>(op.getScaleFactor());

    spec.variant.tensorCores =
        tensorCores && mmaKernelSupports(problem.elementType, problem.headDim,
                                         problem.valueDim());
    // f32 sites on tensor cores: TF32 products with operands split into a
    // high and a low part (f32's accuracy) by default, plain TF32 when
    // allowed.
    spec.variant.tf32 = (tensorCores || allowTf32) &&
                        problem.elementType.isF32() &&
                        tf32KernelSupports(problem.headDim, problem.valueDim());
    spec.variant.tf32Split = spec.variant.tf32 && !allowTf32;
    // The tensor-core kernel serves a KV head's whole query group per
    // block.
    spec.launch.packQueryHeads = spec.variant.tensorCores;
    // Keys split over blocks, except where a row that sees no key in the
    // band revisits the keys outside it (masked_score with a band).
    spec.launch.splitKV = spec.variant.tensorCores &&
                          !(problem.maskedScore && problem.rightBound());
    // The packed form: its blocks from a plan, K and V by kv_offsets.
    problem.ragged = op.isPacked();

    return success();
  }

  /// The kernel of a kiln.paged_attention site: the tensor-core kernel with K
  /// and V read through the page table.
  LogicalResult pagedSpec(PagedAttentionOp op, KernelSpec &spec) {
    AttentionProblem &problem = spec.problem;
    auto queryType = cast<RankedTensorType>(op.getQuery().getType());
    auto valueType = cast<RankedTensorType>(op.getValueCache().getType());
    problem.elementType = op.getElementType();
    problem.headDim = queryType.getDimSize(op.isRagged() ? 2 : 3);
    int64_t valueHeadDim = valueType.getDimSize(3);
    if (ShapedType::isDynamic(problem.headDim) ||
        ShapedType::isDynamic(valueHeadDim))
      return op.emitOpError("GPU lowering needs static head dims");
    if (!tensorCores ||
        !mmaKernelSupports(problem.elementType, problem.headDim, valueHeadDim))
      return op.emitOpError("paged attention runs on the tensor-core kernel "
                            "only: f16/bf16 caches, head dims multiples of 8 "
                            "up to 256, got ")
             << problem.elementType << " with head dims " << problem.headDim
             << "/" << valueHeadDim;
    if (valueHeadDim != problem.headDim)
      problem.valueHeadDim = valueHeadDim;
    if (op.isFp8Cache()) {
      // Rows of FP8 keys are copied in 16-byte chunks of 16 elements.
      if (problem.headDim % 16 || valueHeadDim % 16)
        return op.emitOpError("f8E4M3FN caches need head dims that are "
                              "multiples of 16 on the GPU, got ")
               << problem.headDim << "/" << valueHeadDim;
      problem.fp8Cache = true;
      problem.perHeadScales =
          cast<RankedTensorType>(op.getKScale().getType()).getDimSize(0) != 1;
    }
    int64_t pageSize =
        cast<RankedTensorType>(op.getKeyCache().getType()).getDimSize(1);
    if (!ShapedType::isDynamic(pageSize) && !llvm::isPowerOf2_64(pageSize))
      return op.emitOpError("the GPU kernels take pages of a power of two "
                            "keys, got ")
             << pageSize;
    problem.causal = op.getCausal();
    problem.window = op.getWindow();
    if (std::optional<APFloat> cap = op.getSoftcap())
      problem.softcap = cap->convertToFloat();
    problem.paged = true;
    problem.ragged = op.isRagged();
    spec.variant.tensorCores = true;
    spec.launch.packQueryHeads = true;
    spec.launch.splitKV = true;
    return success();
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
