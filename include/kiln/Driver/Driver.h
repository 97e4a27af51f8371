//===- Driver.h - The kilnc compile flow ------------------------*- C++ -*-===//
//
// Everything kilnc does, as a library: read a graph, fuse attention, generate
// and serialize kernels, and write what was asked for.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DRIVER_DRIVER_H
#define KILN_DRIVER_DRIVER_H

#include "kiln/Conversion/Passes.h"

#include "mlir/Support/LLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace mlir::kiln {

/// What kilnc produces.
enum class EmitKind { Package, MLIR, PTX };

/// Whether and how kilnc prints the fusion report (on stdout).
enum class ReportKind { None, Text, JSON };

/// Options of one compilation.
struct CompileOptions {
  std::string inputPath;
  /// A directory for packages; a file (or "-" for stdout) otherwise.
  std::string outputPath;
  EmitKind emit = EmitKind::Package;
  /// With a report and no output path, kilnc stops after the report.
  ReportKind report = ReportKind::None;
  std::vector<std::string> targets = {"sm_90a", "sm_80"};
  /// Run the unfused and the fused graph on the CPU on the same seeded random
  /// inputs and compare every output and every fused site (`--verify`).
  bool verify = false;
  uint64_t seed = 0;
  /// Static sizes for symbolic ONNX input dimensions (`--bind-dims`).
  std::map<std::string, int64_t> dimBindings;
  /// sm_90a gets the wgmma variants of the tensor-core kernels (`--wgmma`):
  /// its kernels are generated with `kernel.hopper`.
  bool wgmma = true;
  /// The kernel generation's options (KernelOptions.def; kilnc's flags of
  /// the same names).
  ConvertKilnToGPUOptions kernel;
  /// Rows that see no key may differ from the graph (`--padded-rows=free`).
  bool paddedRowsFree = false;
  /// Graph inputs (ONNX input names, or MLIR arguments' `onnx.name`) that the
  /// caller promises hold no infinity or NaN (`--finite-inputs`), e.g.
  /// weights a framework lifted into inputs: a bias computed from them
  /// cannot hide keys, so it may be fused beside a finite-fill mask.
  std::vector<std::string> finiteInputs;
  /// FP8 operands (`--fp8`): true folds dequantised e4m3 Q, K and V into
  /// the op's FP8 operands, false leaves the sites on the dequantised values
  /// (what a GPU kernel reads today); unset folds unless a package is
  /// emitted.
  std::optional<bool> foldFp8;
  /// `--kv-cache=paged:N`: beside each causal self-attention site, a paged
  /// decode/chunked-prefill site over a cache of pages of N keys (0: none).
  int64_t pagedKvPageSize = 0;
};

/// Runs one compilation; diagnostics go to the context's handler (kilnc
/// prints them with their locations). Fails on any error.
LogicalResult compile(const CompileOptions &options, MLIRContext &context,
                      llvm::raw_ostream &stdoutStream);

} // namespace mlir::kiln

#endif // KILN_DRIVER_DRIVER_H
