//===- kilnc.cpp - The Kiln compiler driver ---------------------*- C++ -*-===//
//
// Parses options and runs the compile flow of lib/Driver. Exit status 0 on
// success, 1 on any error (each printed with its location).
//
//===----------------------------------------------------------------------===//

#include "kiln/Driver/Driver.h"
#include "kiln/InitAll.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

#include "llvm/ADT/Statistic.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

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

static cl::list<std::string> bindDims(
    "bind-dims",
    cl::desc("Static sizes for symbolic ONNX input dimensions "
             "(default: keep them dynamic where the graph allows)"),
    cl::CommaSeparated, cl::value_desc("name=N,..."), cl::cat(kilncCategory));

static cl::list<std::string>
    targets("target", cl::desc("GPU targets (default: sm_90a,sm_80)"),
            cl::CommaSeparated, cl::value_desc("sm_XX,..."),
            cl::cat(kilncCategory));

static cl::opt<int64_t> kvBlockSize("kv-block-size",
                                    cl::desc("Keys per shared-memory stage"),
                                    cl::init(32), cl::Hidden,
                                    cl::cat(kilncCategory));
static cl::opt<int64_t> rowsPerWarp("rows-per-warp",
                                    cl::desc("Query rows per warp"),
                                    cl::init(4), cl::Hidden,
                                    cl::cat(kilncCategory));
static cl::opt<bool>
    tensorCores("tensor-cores",
                cl::desc("Use the tensor-core kernels: mma.sync/wgmma for f16 "
                         "and bf16 sites, TF32 with split operands for f32 "
                         "sites (default on; =0 for the scalar kernel)"),
                cl::init(true), cl::cat(kilncCategory));
static cl::opt<bool>
    wgmma("wgmma",
          cl::desc("For sm_90a, the Hopper (wgmma) variant of the tensor-core "
                   "kernel (default on; "
                   "=0 for mma.sync on every target)"),
          cl::init(true), cl::cat(kilncCategory));
static cl::opt<bool> warpSpecialize(
    "warp-specialize",
    cl::desc("For sm_90a, also the warp-specialised prefill kernel (TMA "
             "copies from a producer warp, two wgmma consumer warpgroups, "
             "three at head dim 64) "
             "for f16 and bf16 sites whose head dims are equal multiples of "
             "64 up to 256, with their masks, bias and softcap; the runtime "
             "launches it where TMA can describe the views (default on)"),
    cl::init(true), cl::cat(kilncCategory));
static cl::opt<int64_t> warpSpecializeConsumers(
    "warp-specialize-consumers",
    cl::desc("Consumer warpgroups of the warp-specialised kernels, 2 or 3 "
             "(default: from the schedule table or the rules; for tuning)"),
    cl::init(-1), cl::Hidden, cl::cat(kilncCategory));
static cl::opt<int64_t> warpSpecializeTileKeys(
    "warp-specialize-tile-keys",
    cl::desc("Keys a K/V tile of the warp-specialised kernels, 64 or 128 "
             "(default: from the schedule table or the rules; for tuning)"),
    cl::init(-1), cl::Hidden, cl::cat(kilncCategory));
static cl::opt<bool> warpSpecializeOverlap(
    "warp-specialize-overlap",
    cl::desc("In the warp-specialised kernels, run each tile's softmax "
             "while the previous tile's P·V runs (=0: one tile after "
             "another; default: from the schedule table or the rules; for "
             "tuning)"),
    cl::init(true), cl::Hidden, cl::cat(kilncCategory));
static cl::opt<bool> warpSpecializePingPong(
    "warp-specialize-ping-pong",
    cl::desc("In the warp-specialised kernels with the overlap and two "
             "consumer warpgroups, make them take turns to issue their "
             "products (default: from the schedule table or the rules; for "
             "tuning)"),
    cl::init(false), cl::Hidden, cl::cat(kilncCategory));
static cl::opt<bool> warpSpecializePersistent(
    "warp-specialize-persistent",
    cl::desc("Run the warp-specialised kernels as one block an SM walking "
             "the work items (query block, head, sequence) rather than a "
             "block an item (default: from the rules; for tuning)"),
    cl::init(false), cl::Hidden, cl::cat(kilncCategory));
static cl::opt<bool> allowTf32(
    "allow-tf32",
    cl::desc("Run f32 sites on one TF32 product per product: Q, K, V and "
             "the probabilities rounded to TF32 (10 mantissa bits), f32 "
             "accumulation and softmax; about 4e-4 relative error instead of "
             "about 1e-6 (default off: three TF32 products with split "
             "operands, f32's accuracy)"),
    cl::init(false), cl::cat(kilncCategory));
static cl::opt<std::string>
    schedule("schedule",
             cl::desc("sm_90a tensor-core variant: table (default: the "
                      "shipped table of measured schedules), wgmma or mma"),
             cl::init("table"), cl::Hidden, cl::cat(kilncCategory));
static cl::opt<int64_t> blocksPerSM(
    "blocks-per-sm",
    cl::desc("Blocks per SM the tensor-core kernels' registers leave room "
             "for (default -1: from the schedule)"),
    cl::init(-1), cl::Hidden, cl::cat(kilncCategory));

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
  MLIRContext context(registry);
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
  for (StringRef binding : bindDims) {
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
  options.kvBlockSize = kvBlockSize;
  options.rowsPerWarp = rowsPerWarp;
  options.tensorCores = tensorCores;
  options.wgmma = wgmma;
  options.warpSpecialize = warpSpecialize;
  // Unset schedule options leave the choice to the table or the rules.
  auto given = [](const cl::opt<bool> &option) -> int64_t {
    return option.getNumOccurrences() ? int64_t(option) : -1;
  };
  options.warpSpecializeConsumers = warpSpecializeConsumers;
  options.warpSpecializeTileKeys = warpSpecializeTileKeys;
  options.warpSpecializeOverlap = given(warpSpecializeOverlap);
  options.warpSpecializePingPong = given(warpSpecializePingPong);
  options.warpSpecializePersistent = given(warpSpecializePersistent);
  options.allowTf32 = allowTf32;
  options.schedule = schedule;
  options.blocksPerSM = blocksPerSM;
  bool compiled = succeeded(kiln::compile(options, context, llvm::outs()));
  if (statistics)
    llvm::PrintStatistics(llvm::errs());
  return compiled ? 0 : 1;
}
