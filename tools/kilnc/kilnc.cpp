//===- kilnc.cpp - The Kiln compiler driver ---------------------*- C++ -*-===//
//
// Parses options and runs the compile flow of lib/Driver. Exit status 0 on
// success, 1 on any error (each printed with its location).
//
//===----------------------------------------------------------------------===//

#include "kiln/Conversion/Passes.h"
#include "kiln/Driver/Driver.h"
#include "kiln/InitAll.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

#include "llvm/ADT/Statistic.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>

using namespace mlir;
namespace cl = llvm::cl;

static cl::OptionCategory kilncCategory("kilnc options");

static cl::opt<std::string> inputPath(cl::Positional,
                                      cl::desc("<model.onnx | graph.mlir>"),
                                      cl::Required, cl::cat(kilncCategory));

static cl::opt<std::string>
    outputPath("o", cl::desc("Output: a package directory, or a file for "
                             "--emit=mlir|ptx (default: stdout)"),
               cl::value_desc("path"), cl::init("-"), cl::cat(kilncCategory));

static cl::opt<kiln::EmitKind> emitKind(
    "emit", cl::desc("What to produce"), cl::init(kiln::EmitKind::Package),
    cl::values(clEnumValN(kiln::EmitKind::Package, "package",
                          "PTX per target and manifest.json in -o DIR"),
               clEnumValN(kiln::EmitKind::MLIR, "mlir",
                          "the graph after attention fusion"),
               clEnumValN(kiln::EmitKind::PTX, "ptx",
                          "PTX (-o FILE gets one FILE.<chip>.ptx per "
                          "target)")),
    cl::cat(kilncCategory));

static cl::opt<kiln::ReportKind> reportKind(
    "report",
    cl::desc("Print the fusion report on stdout (alone, unless -o DIR)"),
    cl::init(kiln::ReportKind::None), cl::ValueOptional,
    cl::values(clEnumValN(kiln::ReportKind::Text, "text", "readable tables"),
               clEnumValN(kiln::ReportKind::Text, "", "readable tables"),
               clEnumValN(kiln::ReportKind::JSON, "json", "JSON")),
    cl::cat(kilncCategory));

static cl::opt<bool> verify(
    "verify",
    cl::desc("Run the original and the fused graph on the CPU on the same "
             "random inputs and compare every output and fused site; exit 1 "
             "beyond tolerance (f32 1e-4, f16/bf16 2e-2)"),
    cl::cat(kilncCategory));

static cl::opt<uint64_t> seed("seed",
                              cl::desc("Seed of --verify's random inputs"),
                              cl::init(0), cl::cat(kilncCategory));

static cl::opt<unsigned> jobs(
    "jobs",
    cl::desc("Threads that compile kernels (and run passes) at once: 0 for "
             "every core the process may use, 1 for the main thread alone"),
    cl::init(0), cl::cat(kilncCategory));

static cl::list<std::string> bindDims(
    "bind-dims",
    cl::desc("Static sizes for symbolic ONNX input dimensions "
             "(default: keep them dynamic where the graph allows)"),
    cl::CommaSeparated, cl::value_desc("name=N,..."), cl::cat(kilncCategory));

static cl::list<std::string>
    targets("target", cl::desc("GPU targets (default: sm_90a,sm_80)"),
            cl::CommaSeparated, cl::value_desc("sm_XX,..."),
            cl::cat(kilncCategory));

static cl::opt<bool>
    wgmma("wgmma",
          cl::desc("For sm_90a, the Hopper (wgmma) variant of the tensor-core "
                   "kernel (default on; "
                   "=0 for mma.sync on every target)"),
          cl::init(true), cl::cat(kilncCategory));

// The kernel generation's flags, bound to the options kilnc compiles with:
// one per entry of KernelOptions.def.
static kiln::ConvertKilnToGPUOptions kernelOptions;
#define KILNC_Flag(FIELD, FLAG, TYPE, DEFAULT, DESCRIPTION)                    \
  static cl::opt<TYPE, true> FIELD##Flag(                                      \
      FLAG, cl::desc(DESCRIPTION), cl::location(kernelOptions.FIELD),          \
      cl::init(DEFAULT), cl::cat(kilncCategory));
#define KILNC_HiddenFlag(FIELD, FLAG, TYPE, DEFAULT, DESCRIPTION)              \
  static cl::opt<TYPE, true> FIELD##Flag(                                      \
      FLAG, cl::desc(DESCRIPTION), cl::location(kernelOptions.FIELD),          \
      cl::init(DEFAULT), cl::Hidden, cl::cat(kilncCategory));
// A tuning switch: -1 (the schedule table's or the rules' choice) unless
// given; `--FLAG` alone or `=1` is 1, `=0` is 0.
#define KILNC_HiddenSwitch(FIELD, FLAG, TYPE, DEFAULT, DESCRIPTION)            \
  static cl::opt<bool> FIELD##Flag(                                            \
      FLAG, cl::desc(DESCRIPTION), cl::Hidden, cl::cat(kilncCategory),         \
      cl::cb<void, bool>([](bool given) { kernelOptions.FIELD = given; }));
#define KILNC_NotAFlag(FIELD, FLAG, TYPE, DEFAULT, DESCRIPTION)
#define KILN_KERNEL_OPTION(FIELD, FLAG, TYPE, DEFAULT, KILNC, DESCRIPTION)     \
  KILNC_##KILNC(FIELD, FLAG, TYPE, DEFAULT, DESCRIPTION)
#include "kiln/Conversion/KernelOptions.def"

static cl::opt<std::string> paddedRows(
    "padded-rows",
    cl::desc("exact (default): fused sites compute what the graph computes on "
             "every query row, rows whose keys are all masked included; "
             "free: a causal mask combined with a padding mask always "
             "becomes causal + the padding mask, and rows that see no key "
             "give zeros (rows a model discards, e.g. padded queries)"),
    cl::init("exact"), cl::cat(kilncCategory));

static cl::list<std::string> finiteInputs(
    "finite-inputs",
    cl::desc("Graph inputs (by name) that hold no infinity or NaN, e.g. "
             "weights lifted into inputs: a bias computed from them is "
             "fused beside a finite-fill mask, which a bias that may hold "
             "-inf prevents. The caller keeps the promise; the report lists "
             "it (finite_inputs)"),
    cl::CommaSeparated, cl::value_desc("name,..."), cl::cat(kilncCategory));

static cl::opt<std::string> fp8Operands(
    "fp8",
    cl::desc("Q, K and V dequantised from float8 e4m3 in the graph: fold "
             "(the op's FP8 operands, as a report shows them by default), "
             "dequantised (the sites read the dequantised values, as a package "
             "compiles them: no GPU kernel reads e4m3 Q, K and V yet) or auto "
             "(default: fold unless a package is emitted)"),
    cl::init("auto"), cl::cat(kilncCategory));

static cl::opt<std::string> kvCache(
    "kv-cache",
    cl::desc("paged:N (N a power of two from 1 to 256): beside each causal "
             "self-attention site, compile a paged decode/chunked-prefill "
             "site over a KV cache of pages of N keys (attention_K_paged)"),
    cl::init(""), cl::cat(kilncCategory));

static cl::opt<bool> statistics(
    "statistics",
    cl::desc("Print the compile's counters on stderr at exit (ONNX models "
             "read, graphs converted)"),
    cl::Hidden, cl::cat(kilncCategory));

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << "kilnc " KILN_VERSION_STRING " (LLVM/MLIR " LLVM_VERSION_STRING
          ")\n";
  });
  cl::HideUnrelatedOptions(kilncCategory);
  cl::ParseCommandLineOptions(
      argc, argv,
      "kilnc: find attention in a model graph, fuse it and compile it to GPU "
      "kernels\n");

  // Release builds of LLVM ignore -stats; these counters are kept regardless.
  if (statistics)
    llvm::EnableStatistics(/*DoPrintOnExit=*/false);
  kiln::initializeTargets();
  DialectRegistry registry;
  kiln::registerAllDialects(registry);
  // The context's own pool takes every core; a pool is made here (before
  // the context, which must not outlive it) only to take fewer.
  std::optional<llvm::DefaultThreadPool> threadPool;
  if (jobs > 1)
    threadPool.emplace(llvm::hardware_concurrency(jobs));
  MLIRContext context(registry, jobs == 0 ? MLIRContext::Threading::ENABLED
                                             : MLIRContext::Threading::DISABLED);
  if (threadPool)
    context.setThreadPool(*threadPool);
  context.loadAllAvailableDialects();
  // Diagnostics name the place; dumping whole ops helps nobody reading them.
  context.printOpOnDiagnostic(false);

  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context, llvm::errs());

  // Errors in the options are reported at the input, like every other.
  Location inputLoc = FileLineColLoc::get(&context, inputPath, 0, 0);
  kiln::CompileOptions options;
  options.inputPath = inputPath;
  options.outputPath = outputPath;
  options.emit = emitKind;
  options.report = reportKind;
  options.verify = verify;
  options.seed = seed;
  if (paddedRows != "exact" && paddedRows != "free") {
    emitError(inputLoc) << "--padded-rows expects 'exact' or 'free', got '"
                        << paddedRows << "'";
    return 1;
  }
  options.paddedRowsFree = paddedRows == "free";
  options.finiteInputs.assign(finiteInputs.begin(), finiteInputs.end());
  if (fp8Operands == "fold" || fp8Operands == "dequantised") {
    options.foldFp8 = fp8Operands == "fold";
  } else if (fp8Operands != "auto") {
    emitError(inputLoc) << "--fp8 expects 'auto', 'fold' or 'dequantised', "
                           "got '"
                        << fp8Operands << "'";
    return 1;
  }
  if (!kvCache.empty()) {
    StringRef spec = kvCache;
    int64_t pageSize = 0;
    if (!spec.consume_front("paged:") || spec.getAsInteger(10, pageSize) ||
        pageSize < 1 || pageSize > 256 || (pageSize & (pageSize - 1))) {
      emitError(inputLoc) << "--kv-cache expects paged:N with N a power of "
                             "two from 1 to 256, got '"
                          << kvCache << "'";
      return 1;
    }
    options.pagedKvPageSize = pageSize;
  }
  for (StringRef binding : ::bindDims) {
    auto [name, value] = binding.split('=');
    int64_t size = 0;
    if (name.empty() || value.getAsInteger(10, size) || size <= 0) {
      emitError(inputLoc) << "--bind-dims expects name=N with N > 0, got '"
                          << binding << "'";
      return 1;
    }
    options.dimBindings[name.str()] = size;
  }
  if (!targets.empty())
    options.targets.assign(targets.begin(), targets.end());
  options.wgmma = wgmma;
  options.kernel = kernelOptions;
  bool compiled = succeeded(kiln::compile(options, context, llvm::outs()));
  if (statistics)
    llvm::PrintStatistics(llvm::errs());
  return compiled ? 0 : 1;
}
