//===- Driver.cpp - The kilnc compile flow ----------------------*- C++ -*-===//
//
// Input → fusion → kernel generation → PTX → package, as kilnc runs it.
//
//===----------------------------------------------------------------------===//

#include "kiln/Driver/Driver.h"

#include "kiln/Conversion/KilnToGPU/KilnToGPU.h"
#include "kiln/Conversion/KilnToGPU/Selection.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Dialect/Kiln/Transforms/Passes.h"
#include "kiln/Driver/Report.h"
#include "kiln/Pipelines/Pipelines.h"
#include "kiln/Target/ONNX/ImportONNX.h"
#include "kiln/Target/StableHLO/ImportStableHLO.h"
#include "kiln/Target/Package/Package.h"
#include "kiln/Verify/Verify.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;
using namespace mlir::kiln;

namespace {

OwningOpRef<ModuleOp> readMLIR(StringRef path, MLIRContext &context) {
  std::string errorMessage;
  std::unique_ptr<llvm::MemoryBuffer> buffer =
      openInputFile(path, &errorMessage);
  if (!buffer) {
    emitError(FileLineColLoc::get(&context, path, 0, 0))
        << "cannot read input: " << errorMessage;
    return nullptr;
  }
  // Boolean constants in hex one byte an element (newer MLIR's printing,
  // JAX's) are rewritten one bit an element, as this MLIR reads them.
  if (std::optional<std::string> repacked =
          repackBooleanHex(buffer->getBuffer()))
    buffer = llvm::MemoryBuffer::getMemBufferCopy(
        *repacked, buffer->getBufferIdentifier());
  auto sourceMgr = std::make_shared<llvm::SourceMgr>();
  sourceMgr->AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
  // StableHLO text (JAX's) parses beside Kiln's own dialects and is
  // converted to the TOSA graph the passes take.
  loadStableHLOReader(&context);
  OwningOpRef<ModuleOp> module =
      parseSourceFile<ModuleOp>(sourceMgr, ParserConfig(&context));
  if (!module || !containsStableHLO(*module))
    return module;
  return importStableHLO(*module);
}

/// Writes `text` to `path` ("-" is stdout).
LogicalResult writeText(Location loc, StringRef path, StringRef text,
                        llvm::raw_ostream &stdoutStream) {
  if (path.empty() || path == "-") {
    stdoutStream << text;
    return success();
  }
  std::string errorMessage;
  std::unique_ptr<llvm::ToolOutputFile> file =
      openOutputFile(path, &errorMessage);
  if (!file)
    return emitError(loc) << "cannot write '" << path << "': " << errorMessage;
  file->os() << text;
  file->keep();
  return success();
}

/// Accepts `sm_NN`, `sm_NNa` and `sm_NNf` chips from sm_80 on that LLVM's
/// NVPTX back end knows; the kernels use sm_80 instructions.
LogicalResult checkTarget(Location loc, StringRef chip) {
  auto fail = [&]() {
    return emitError(loc) << "unknown GPU target '" << chip
                          << "': expected sm_80 or newer (sm_80, sm_86, "
                             "sm_89, sm_90, sm_90a, ...)";
  };
  StringRef rest = chip;
  if (!rest.consume_front("sm_"))
    return fail();
  StringRef digits = rest.take_while([](char c) { return llvm::isDigit(c); });
  StringRef suffix = rest.drop_front(digits.size());
  unsigned number = 0;
  if (digits.getAsInteger(10, number) || number < 80 ||
      !(suffix.empty() || suffix == "a" || suffix == "f"))
    return fail();
  llvm::Triple triple("nvptx64-nvidia-cuda");
  std::string error;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return emitError(loc) << "the NVPTX back end is not available: " << error;
  std::unique_ptr<llvm::MCSubtargetInfo> subtarget(
      target->createMCSubtargetInfo(triple, chip, ""));
  if (!subtarget || !subtarget->isCPUStringValid(chip))
    return fail();
  return success();
}

/// Marks the entry arguments named in `names` (by their `onnx.name`)
/// `kiln.finite` in every function; a name no argument carries is an error.
LogicalResult declareFiniteInputs(ModuleOp module,
                                  ArrayRef<std::string> names, Location loc) {
  for (const std::string &name : names) {
    bool found = false;
    module.walk([&](FunctionOpInterface func) {
      for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
        auto argName = func.getArgAttrOfType<StringAttr>(i, "onnx.name");
        if (!argName || argName.getValue() != name)
          continue;
        func.setArgAttr(i, kFiniteArgAttr, UnitAttr::get(module.getContext()));
        found = true;
      }
    });
    if (!found)
      return emitError(loc) << "--finite-inputs: the graph has no input named '"
                            << name << "'";
  }
  return success();
}

/// Reads an ONNX model (by extension) or MLIR text; opaque ONNX nodes are
/// added to `report`. An ONNX graph whose shape computations cannot be
/// imported with dynamic dimensions is imported with every unbound symbolic
/// dimension given a size, with a warning naming them. The file is read
/// once.
OwningOpRef<ModuleOp> readInput(const CompileOptions &options,
                                MLIRContext &context, FusionReport &report) {
  StringRef path = options.inputPath;
  if (!path.ends_with_insensitive(".onnx"))
    return readMLIR(path, context);

  ImportOptions importOptions;
  importOptions.dimBindings = options.dimBindings;
  // The JSON report names the graph values each site reads and replaces.
  importOptions.recordValueNames = options.report == ReportKind::JSON;
  importOptions.staticSizesOnFailure = true;
  // --verify runs the whole graph on the CPU, where an opaque node stops it.
  // Nodes kept opaque only for a dynamic size (a strided 1-D Conv over a
  // dynamic length, say) import with the symbolic dimensions bound.
  importOptions.staticSizesForOpaqueNodes = options.verify;
  ImportReport importReport;
  OwningOpRef<ModuleOp> module =
      importONNXFile(path, &context, &importReport, importOptions);
  if (!module)
    return nullptr;

  std::string boundList;
  llvm::raw_string_ostream os(boundList);
  llvm::interleaveComma(importReport.boundDims, os, [&](auto &dim) {
    os << dim.first << "=" << dim.second;
  });
  Location fileLoc = FileLineColLoc::get(&context, path, 0, 0);
  switch (importReport.staticSizes) {
  case ImportReport::StaticSizes::None:
    break;
  case ImportReport::StaticSizes::ForShapeComputations:
    emitWarning(fileLoc) << "the graph's shape computations need static "
                            "sizes; compiled with "
                         << boundList << " (choose them with --bind-dims)";
    break;
  case ImportReport::StaticSizes::ForOpaqueNodes:
    emitWarning(fileLoc)
        << importReport.opaqueWithDynamicSizes -
               importReport.unsupportedOps.size()
        << " node(s) import only with static sizes; --verify runs the graph "
           "with "
        << boundList << " (choose them with --bind-dims)";
    break;
  }
  for (const ImportReport::UnsupportedOp &op : importReport.unsupportedOps)
    report.opaque.push_back({op.nodeName, op.opType, op.reason});
  report.boundDims = importReport.boundDims;
  return module;
}

/// --verify runs the graph on the CPU, where an operation of no registered
/// dialect (an ONNX node the importer kept opaque) has no lowering. Each one
/// is named, with the importer's reason, before anything is lowered.
LogicalResult checkNoOpaqueOps(ModuleOp module, const FusionReport &report) {
  bool found = false;
  module.walk([&](Operation *op) {
    if (op->isRegistered())
      return;
    found = true;
    std::vector<std::string> names = nodeNames(op->getLoc());
    std::string node = names.empty() ? std::string() : names.front();
    StringRef opType = op->getName().getStringRef();
    opType.consume_front("onnx.");
    std::string reason = "Kiln has no lowering for it";
    for (const OpaqueNode &entry : report.opaque) {
      if (entry.opType == opType &&
          (entry.node == node || entry.node.empty())) {
        reason = entry.reason;
        break;
      }
    }
    InFlightDiagnostic diag = emitError(op->getLoc())
                              << "--verify cannot run the graph on the CPU: ";
    if (node.empty())
      diag << "operation '" << op->getName() << "'";
    else
      diag << "node '" << node << "' (" << opType << ")";
    diag << " is opaque: " << reason;
  });
  return failure(found);
}

/// For `--kv-cache=paged:N`: every causal self-attention site (its own keys,
/// Sq = Sk) gets a paged twin in a function of its own,
/// `@<site>_paged(q, key_cache, value_cache, page_table, kv_lens)`, with the
/// site's heads, head dims, scale, window and softcap, so that a serving
/// stack runs decode and chunked prefill over its paged KV cache with the
/// same attention. Sites are named first (attention_N, in program order); a
/// twin is attention_N_paged and its manifest entry says `decode_of`.
void addPagedDecodeSites(ModuleOp module, int64_t pageSize) {
  SmallVector<AttentionOp> sites;
  module.walk([&](AttentionOp op) { sites.push_back(op); });
  OpBuilder builder(module.getContext());
  for (auto [index, op] : llvm::enumerate(sites)) {
    std::string name = llvm::formatv("attention_{0}", index).str();
    op->setAttr(kSiteAttrName, builder.getStringAttr(name));
    if (!op.getCausal() || op.getMask() || op.getBias() ||
        op.getScaleFactor() || op.getMaskedScore() ||
        ShapedType::isDynamic(op.getNumQueryHeads()) ||
        ShapedType::isDynamic(op.getNumKvHeads()) ||
        ShapedType::isDynamic(op.getHeadDim()) ||
        ShapedType::isDynamic(op.getValueHeadDim()) ||
        (!ShapedType::isDynamic(op.getQueryLength()) &&
         op.getQueryLength() != op.getKvLength()))
      continue;
    Type element = op.getElementType();
    if (!isa<Float16Type, BFloat16Type>(element)) {
      emitWarning(op.getLoc())
          << "site " << name << " is " << element
          << ": no paged twin (--kv-cache needs f16 or bf16 attention)";
      continue;
    }
    int64_t kDyn = ShapedType::kDynamic;
    auto queryType = RankedTensorType::get(
        {kDyn, op.getNumQueryHeads(), kDyn, op.getHeadDim()}, element);
    auto keyCacheType = RankedTensorType::get(
        {kDyn, pageSize, op.getNumKvHeads(), op.getHeadDim()}, element);
    auto valueCacheType = RankedTensorType::get(
        {kDyn, pageSize, op.getNumKvHeads(), op.getValueHeadDim()}, element);
    auto i32 = builder.getI32Type();
    auto tableType = RankedTensorType::get({kDyn, kDyn}, i32);
    auto lensType = RankedTensorType::get({kDyn}, i32);
    auto resultType = RankedTensorType::get(
        {kDyn, op.getNumQueryHeads(), kDyn, op.getValueHeadDim()}, element);
    builder.setInsertionPointToEnd(module.getBody());
    auto func = func::FuncOp::create(
        builder, op.getLoc(), name + "_paged",
        builder.getFunctionType(
            {queryType, keyCacheType, valueCacheType, tableType, lensType},
            {resultType}));
    Block *body = func.addEntryBlock();
    builder.setInsertionPointToStart(body);
    auto paged = PagedAttentionOp::create(
        builder, op.getLoc(), resultType, body->getArgument(0),
        body->getArgument(1), body->getArgument(2), body->getArgument(3),
        body->getArgument(4), /*q_offsets=*/Value(), /*k_scale=*/Value(),
        /*v_scale=*/Value(), op.getScaleAttr(),
        builder.getUnitAttr(),
        op.getWindowAttr(), op.getSoftcapAttr());
    paged->setAttr(kSiteAttrName, builder.getStringAttr(name + "_paged"));
    paged->setAttr(kDecodeOfAttrName, builder.getStringAttr(name));
    func::ReturnOp::create(builder, op.getLoc(), paged.getResult());
  }
}

LogicalResult runPipeline(ModuleOp module,
                          function_ref<void(OpPassManager &)> build) {
  PassManager pm(module.getContext());
  build(pm);
  return pm.run(module);
}

} // namespace

LogicalResult mlir::kiln::compile(const CompileOptions &options,
                                  MLIRContext &context,
                                  llvm::raw_ostream &stdoutStream) {
  Location inputLoc = FileLineColLoc::get(&context, options.inputPath, 0, 0);
  if (options.targets.empty())
    return emitError(inputLoc) << "no GPU target given";
  // Option errors are the input's: every error names a place.
  for (const std::string &chip : options.targets)
    if (failed(checkTarget(inputLoc, chip)))
      return failure();
  if (failed(verifyConvertKilnToGPUOptions(
          options.kernel, [&] { return emitError(inputLoc); }, "--")))
    return failure();
  FusionReport report;
  // The report states each site's kernel for every target, as the kernel
  // generation below chooses it (sm_90a's own kernels as `hopper` below).
  for (const std::string &chip : options.targets) {
    ConvertKilnToGPUOptions kernelOptions = options.kernel;
    kernelOptions.hopper =
        options.wgmma && options.kernel.tensorCores && chip == "sm_90a";
    report.kernelTargets.emplace_back(chip, kernelOptions);
  }
  OwningOpRef<ModuleOp> module = readInput(options, context, report);
  if (!module)
    return failure();
  if (failed(declareFiniteInputs(*module, options.finiteInputs, inputLoc)))
    return failure();
  report.finiteInputs = options.finiteInputs;
  // The graph as imported: the reference of --verify.
  OwningOpRef<ModuleOp> unfused;
  if (options.verify)
    unfused = module->clone();
  bool foldFp8 = true;
  {
    // The fusion pass explains each softmax it leaves alone with a remark;
    // those go into the report instead of onto the terminal.
    ScopedDiagnosticHandler collectRemarks(&context, [&](Diagnostic &diag) {
      if (diag.getSeverity() != DiagnosticSeverity::Remark)
        return failure();
      std::string message = diag.str();
      StringRef text(message);
      if (!text.consume_front(kUnfusedRemarkPrefix))
        return failure();
      std::vector<std::string> names = nodeNames(diag.getLocation());
      // " [at NAME]": the node whose op stopped the match.
      std::string stoppedAt;
      if (text.ends_with("]")) {
        size_t at = text.rfind(kStoppedAtMarker);
        if (at != StringRef::npos) {
          stoppedAt = text.substr(at + kStoppedAtMarker.size()).drop_back().str();
          text = text.take_front(at);
        }
      }
      report.unfused.push_back(
          {names.empty() ? std::string() : names.front(), text.str(),
           stoppedAt, sourceLines(diag.getLocation())});
      return success();
    });
    FusionPipelineOptions fusionOptions;
    fusionOptions.paddedRows = options.paddedRowsFree ? "free" : "exact";
    // FP8 operands have no GPU kernel: a package takes the dequantised
    // values; a report, --verify or MLIR shows the FP8 op.
    bool reportOnly = (options.report != ReportKind::None || options.verify) &&
                      (options.outputPath.empty() || options.outputPath == "-");
    foldFp8 = options.foldFp8.value_or(options.emit != EmitKind::Package ||
                                       reportOnly);
    fusionOptions.foldFp8 = foldFp8;
    if (failed(runPipeline(*module, [&](OpPassManager &pm) {
          buildFusionPipeline(pm, fusionOptions);
        })))
      return failure();
  }

  if (options.report == ReportKind::JSON)
    stdoutStream << llvm::formatv("{0:2}",
                                  llvm::json::Value(report.toJSON(*module)))
                 << "\n";
  else if (options.report == ReportKind::Text)
    report.printText(*module, stdoutStream);
  if (options.verify) {
    if (failed(checkNoOpaqueOps(*unfused, report)))
      return failure();
    VerifyOptions verifyOptions;
    verifyOptions.seed = options.seed;
    verifyOptions.paddedRowsFree = options.paddedRowsFree;
    verifyOptions.foldFp8 = foldFp8;
    FailureOr<VerifyReport> verified =
        verifyFusion(*unfused, *module, verifyOptions);
    if (failed(verified))
      return failure();
    verified->print(stdoutStream);
    if (!verified->passed)
      return emitError(inputLoc)
             << "verification failed: the fused graph does not compute what "
                "the original graph computes within tolerance";
  }
  bool toStdout = options.outputPath.empty() || options.outputPath == "-";
  if ((options.report != ReportKind::None || options.verify) &&
      options.emit == EmitKind::Package && toStdout)
    return success();

  if (options.emit == EmitKind::MLIR) {
    std::string text;
    llvm::raw_string_ostream os(text);
    module->print(os);
    return writeText(inputLoc, options.outputPath, text, stdoutStream);
  }

  bool hasSites = false;
  module->walk([&](Operation *op) {
    hasSites |= isa<AttentionOp, PagedAttentionOp, AttentionGradOp>(op);
  });
  if (!hasSites)
    return emitError(inputLoc) << "no attention site to compile";

  if (options.pagedKvPageSize > 0)
    addPagedDecodeSites(*module, options.pagedKvPageSize);

  // sm_90a's kernels are generated from a copy of the sites with the wgmma
  // variants; they keep the portable kernels' names, arguments, grids and
  // shared memory, so the manifest (described from the portable module)
  // holds for both. Each target's PTX is serialised once: sm_90a's from the
  // copy, every other target's from the portable module.
  bool hopper = options.wgmma && options.kernel.tensorCores &&
                llvm::is_contained(options.targets, "sm_90a");
  std::vector<std::string> portableChips;
  for (const std::string &chip : options.targets)
    if (!hopper || chip != "sm_90a")
      portableChips.push_back(chip);
  OwningOpRef<ModuleOp> hopperModule;
  if (hopper)
    hopperModule = module->clone();

  // Generates `target`'s kernels (the portable ones, or the sm_90a
  // variants), records their schedules (the kernel facts live on the
  // gpu.funcs until serialisation) and serialises them to PTX for `chips`.
  auto generate = [&](ModuleOp target, ArrayRef<std::string> chips,
                      bool hopperVariant,
                      llvm::StringMap<llvm::json::Value> &schedules,
                      llvm::StringMap<llvm::json::Value> &reasons,
                      function_ref<LogicalResult()> describe)
      -> FailureOr<std::vector<TargetPTX>> {
    ConvertKilnToGPUOptions kernelOptions = options.kernel;
    kernelOptions.hopper = hopperVariant;
    if (failed(runPipeline(target,
                           [&](OpPassManager &pm) {
                             buildKernelGenerationPipeline(pm, kernelOptions);
                           })) ||
        failed(describe()))
      return failure();
    schedules = describeSchedules(target);
    reasons = describeReasons(target);
    if (chips.empty())
      return std::vector<TargetPTX>();
    if (failed(runPipeline(
            target, [&](OpPassManager &pm) { buildPTXPipeline(pm, chips); })))
      return failure();
    return extractPTX(target);
  };

  FailureOr<llvm::json::Object> description = failure();
  llvm::StringMap<llvm::json::Value> portableSchedules, hopperSchedules;
  llvm::StringMap<llvm::json::Value> portableReasons, hopperReasons;
  FailureOr<std::vector<TargetPTX>> ptx = generate(
      *module, portableChips, /*hopperVariant=*/false, portableSchedules,
      portableReasons, [&] {
        description = describeKernelsAndSites(*module);
        return LogicalResult(description);
      });
  if (failed(ptx))
    return failure();
  if (hopper) {
    FailureOr<llvm::json::Object> hopperDescription = failure();
    FailureOr<std::vector<TargetPTX>> hopperPTX =
        generate(*hopperModule, {"sm_90a"}, /*hopperVariant=*/true,
                 hopperSchedules, hopperReasons, [&] {
                   hopperDescription = describeKernelsAndSites(*hopperModule);
                   return LogicalResult(hopperDescription);
                 });
    if (failed(hopperPTX))
      return failure();
    addTargetOnlyKernels(*description, std::move(*hopperDescription));
    // The targets in the order given.
    std::vector<TargetPTX> ordered;
    auto portable = ptx->begin();
    for (const std::string &chip : options.targets) {
      if (chip == "sm_90a")
        ordered.push_back(hopperPTX->front());
      else if (portable != ptx->end() && portable->chip == chip)
        ordered.push_back(std::move(*portable++));
    }
    *ptx = std::move(ordered);
  }
  // What each target's kernels expect of their launches, as the kernel
  // generation decided it for the module the target's PTX came from.
  for (TargetPTX &target : *ptx) {
    TargetLaunchFacts launch =
        targetLaunchFacts(hopper && target.chip == "sm_90a");
    target.gridDependency = launch.gridDependency;
    target.attentionGridDependency = launch.attentionGridDependency;
    target.clusterSplits = launch.clusterSplits;
  }
  addSchedules(*description, options.targets, portableSchedules,
               hopper ? &hopperSchedules : nullptr);
  addReasons(*description, options.targets, portableReasons,
             hopper ? &hopperReasons : nullptr);

  if (options.emit == EmitKind::PTX) {
    if (ptx->size() == 1)
      return writeText(inputLoc, options.outputPath, ptx->front().assembly,
                       stdoutStream);
    if (options.outputPath.empty() || options.outputPath == "-")
      return emitError(inputLoc)
             << "--emit=ptx to stdout needs exactly one --target";
    // out.ptx → out.sm_90a.ptx, out.sm_80.ptx
    for (const TargetPTX &target : *ptx) {
      llvm::SmallString<256> path(options.outputPath);
      llvm::sys::path::replace_extension(path, target.chip + ".ptx");
      if (failed(writeText(inputLoc, path, target.assembly, stdoutStream)))
        return failure();
    }
    return success();
  }

  if (options.outputPath.empty() || options.outputPath == "-")
    return emitError(inputLoc) << "a package needs an output directory (-o)";
  return writePackage(inputLoc, options.outputPath, std::move(*description),
                      *ptx, options.inputPath);
}
