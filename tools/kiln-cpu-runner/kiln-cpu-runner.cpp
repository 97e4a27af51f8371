//===- kiln-cpu-runner.cpp - Run a function on the CPU ----------*- C++ -*-===//
//
// Runs one function of an .mlir file through the CPU path (kiln ops tiled or
// decomposed, TOSA through linalg, JIT) on .npy inputs or seeded random
// ones, and writes the results as .npy files or prints a checksum of each;
// or, with --check-grad, checks the gradient of every kiln.attention op.
//
//===----------------------------------------------------------------------===//

#include "kiln/InitAll.h"
#include "kiln/Runner/GradCheck.h"
#include "kiln/Runner/Runner.h"
#include "kiln/Verify/Verify.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

using namespace mlir;
using namespace mlir::kiln;
namespace cl = llvm::cl;

static cl::opt<std::string> inputFile(cl::Positional, cl::desc("<input.mlir>"),
                                      cl::Required);
static cl::opt<std::string> funcName("func", cl::desc("Function to run"),
                                     cl::init("main"));
static cl::list<std::string>
    inputFiles("input", cl::desc("An .npy file per argument, in order "
                                 "(converted to the argument's element type; "
                                 "an f8E4M3FN argument takes its raw bytes "
                                 "as uint8)"));
static cl::list<std::string>
    shapes("shape", cl::desc("Shape of a random argument, in order, e.g. "
                             "2x4x16x8 (needed for dynamic dims only)"));
static cl::opt<uint64_t> seed("seed", cl::desc("Seed of random inputs"),
                              cl::init(0));
static cl::opt<int64_t> intHigh("int-high",
                                cl::desc("Random integers are in [0, N)"),
                                cl::init(2));
static cl::list<std::string>
    outputFiles("output", cl::desc("An .npy file per result, in order"));
static cl::opt<std::string> lowering(
    "attention-lowering",
    cl::desc("Lowering of kiln attention ops: tiled or decomposed"),
    cl::init("tiled"));
static cl::opt<int64_t> kvBlockSize("kv-block-size", cl::init(32),
                                    cl::desc("Keys per KV block"));
static cl::opt<int64_t> qBlockSize("q-block-size", cl::init(16),
                                   cl::desc("Query rows per query block"));
static cl::opt<int64_t> numSplits("num-splits", cl::init(1),
                                  cl::desc("Split-KV parts"));
static cl::opt<std::string> verifyAgainst(
    "verify-fusion",
    cl::desc("Treat the input as the unfused graph and verify this fused "
             "module against it on seeded random inputs"),
    cl::value_desc("fused.mlir"));
static cl::opt<bool> noSites("no-sites",
                             cl::desc("With --verify-fusion, compare only "
                                      "the outputs, not every site"));
static cl::opt<int64_t> dynamicDimSize(
    "dynamic-dim-size", cl::init(8),
    cl::desc("With --verify-fusion, the size of every dynamic input dim"));

static cl::opt<bool> checkGrad(
    "check-grad",
    cl::desc("Check the gradient of every kiln.attention op: the forward "
             "with its lse and kiln.attention_grad on seeded random inputs, "
             "against float64 finite differences along random directions"));
static cl::opt<double> checkGradTolerance(
    "check-grad-tolerance", cl::init(0),
    cl::desc("With --check-grad, the largest relative error that passes (0: "
             "the element type's default)"));
static cl::opt<int64_t> checkGradDirections(
    "check-grad-directions", cl::init(3),
    cl::desc("With --check-grad, random directions per operand"));
static cl::opt<double> checkGradPerturbScale(
    "check-grad-perturb-scale", cl::init(0), cl::Hidden,
    cl::desc("Testing the check: build the backward with its scale times "
             "1 + this, a wrong gradient"));

static bool parseShape(StringRef text, SmallVectorImpl<int64_t> &shape) {
  SmallVector<StringRef> parts;
  text.split(parts, 'x', -1, /*KeepEmpty=*/false);
  for (StringRef part : parts) {
    int64_t size;
    if (part.getAsInteger(10, size) || size < 0)
      return false;
    shape.push_back(size);
  }
  return true;
}

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  cl::ParseCommandLineOptions(argc, argv, "Kiln CPU runner\n");

  DialectRegistry registry;
  registerAllDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  OwningOpRef<ModuleOp> module =
      parseSourceFile<ModuleOp>(inputFile, sourceMgr, ParserConfig(&context));
  if (!module)
    return 1;
  CPURunOptions options;
  if (lowering == "decomposed")
    options.attentionLowering = AttentionLowering::Decomposed;
  else if (lowering != "tiled") {
    llvm::errs() << "error: --attention-lowering is tiled or decomposed\n";
    return 1;
  }
  options.tiling = {kvBlockSize, qBlockSize, numSplits};

  if (checkGrad) {
    GradCheckOptions gradOptions;
    gradOptions.seed = seed;
    gradOptions.directions = checkGradDirections;
    gradOptions.tolerance = checkGradTolerance;
    gradOptions.perturbScale = checkGradPerturbScale;
    gradOptions.run = options;
    FailureOr<GradCheckReport> report =
        checkAttentionGradients(*module, gradOptions);
    if (failed(report))
      return 1;
    report->print(llvm::outs());
    return report->passed ? 0 : 1;
  }

  if (!verifyAgainst.empty()) {
    OwningOpRef<ModuleOp> fused =
        parseSourceFile<ModuleOp>(verifyAgainst, ParserConfig(&context));
    if (!fused)
      return 1;
    VerifyOptions verifyOptions;
    verifyOptions.funcName = funcName;
    verifyOptions.seed = seed;
    verifyOptions.compareSites = !noSites;
    verifyOptions.dynamicDimSize = dynamicDimSize;
    verifyOptions.run = options;
    FailureOr<VerifyReport> report =
        verifyFusion(*module, *fused, verifyOptions);
    if (failed(report))
      return 1;
    report->print(llvm::outs());
    return report->passed ? 0 : 1;
  }

  auto func = module->lookupSymbol<func::FuncOp>(funcName);
  if (!func) {
    llvm::errs() << "error: no function @" << funcName << "\n";
    return 1;
  }

  SmallVector<HostTensor> inputs;
  std::mt19937_64 rng(seed);
  for (auto [index, type] : llvm::enumerate(func.getArgumentTypes())) {
    auto tensorType = dyn_cast<RankedTensorType>(type);
    if (!tensorType) {
      llvm::errs() << "error: argument " << index << " is not a ranked tensor\n";
      return 1;
    }
    if (!inputFiles.empty()) {
      if (index >= inputFiles.size()) {
        llvm::errs() << "error: no --input for argument " << index << "\n";
        return 1;
      }
      auto tensor = readNpy(&context, inputFiles[index]);
      if (!tensor) {
        llvm::errs() << "error: " << llvm::toString(tensor.takeError()) << "\n";
        return 1;
      }
      auto argument = asArgument(*tensor, tensorType.getElementType());
      if (!argument) {
        llvm::errs() << "error: argument " << index << " (" << tensorType
                     << ", --input=" << inputFiles[index]
                     << "): " << llvm::toString(argument.takeError()) << "\n";
        return 1;
      }
      inputs.push_back(std::move(*argument));
      continue;
    }
    SmallVector<int64_t> shape(tensorType.getShape());
    if (index < shapes.size()) {
      shape.clear();
      if (!parseShape(shapes[index], shape)) {
        llvm::errs() << "error: bad --shape '" << shapes[index] << "'\n";
        return 1;
      }
    } else if (!tensorType.hasStaticShape()) {
      llvm::errs() << "error: argument " << index
                   << " has dynamic dims; give its --shape\n";
      return 1;
    }
    HostTensor tensor(tensorType.getElementType(), shape);
    fillRandom(tensor, rng, 0, intHigh);
    inputs.push_back(std::move(tensor));
  }

  FailureOr<SmallVector<HostTensor>> results =
      runOnCPU(*module, funcName, inputs, options);
  if (failed(results))
    return 1;

  for (auto [index, result] : llvm::enumerate(*results)) {
    if (index < outputFiles.size()) {
      if (llvm::Error error = writeNpy(result, outputFiles[index])) {
        llvm::errs() << "error: " << llvm::toString(std::move(error)) << "\n";
        return 1;
      }
      continue;
    }
    double sum = 0, absSum = 0;
    int64_t nonFinite = 0;
    for (int64_t i = 0, e = result.getNumElements(); i < e; ++i) {
      double value = result.getAsDouble(i);
      if (!std::isfinite(value)) {
        ++nonFinite;
        continue;
      }
      sum += value;
      absSum += std::fabs(value);
    }
    llvm::outs() << "result " << index << ": " << result.getTypeString()
                 << " sum " << llvm::format("%.6g", sum) << " abs-sum "
                 << llvm::format("%.6g", absSum) << " non-finite "
                 << nonFinite << "\n";
  }
  return 0;
}
