//===- Driver.h - The kilnc compile flow ------------------------*- C++ -*-===//
//
// Everything kilnc does, as a library: read a graph, fuse attention, generate
// and serialize kernels, and write what was asked for.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DRIVER_DRIVER_H
#define KILN_DRIVER_DRIVER_H

#include "mlir/Support/LLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
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
  int64_t kvBlockSize = 32;
  int64_t rowsPerWarp = 4;
  /// f16 and bf16 sites get the mma.sync kernel (`--tensor-cores`).
  bool tensorCores = true;
  /// sm_90a gets the wgmma variant of the tensor-core kernel (`--wgmma`).
  bool wgmma = true;
  /// With wgmma: sm_90a also gets the warp-specialised kernels
  /// (`--warp-specialize`).
  bool warpSpecialize = true;
  /// The warp-specialised kernels' schedule, forced for tuning: consumer
  /// warpgroups (`--warp-specialize-consumers`), keys a tile
  /// (`--warp-specialize-tile-keys`), each tile's softmax overlapping the
  /// previous tile's P·V (`--warp-specialize-overlap`, 0 or 1), the two
  /// consumers' turns (`--warp-specialize-ping-pong`, 0 or 1), one block
  /// an SM over the work items (`--warp-specialize-persistent`, 0 or 1);
  /// -1 takes the schedule table's or the rules'.
  int64_t warpSpecializeConsumers = -1;
  int64_t warpSpecializeTileKeys = -1;
  int64_t warpSpecializeOverlap = -1;
  int64_t warpSpecializePingPong = -1;
  int64_t warpSpecializePersistent = -1;
  /// f32 sites run one TF32 product per product rather than three with
  /// split operands (`--allow-tf32`).
  bool allowTf32 = false;
  /// Forces the sm_90a variant ("wgmma", "mma") and the blocks per SM
  /// (>= 0) instead of the schedule table, for tuning.
  std::string schedule = "table";
  int64_t blocksPerSM = -1;
  /// Rows that see no key may differ from the graph (`--padded-rows=free`).
  bool paddedRowsFree = false;
  /// Graph inputs (ONNX input names, or MLIR arguments' `onnx.name`) that the
  /// caller promises hold no infinity or NaN (`--finite-inputs`), e.g.
  /// weights a framework lifted into inputs: a bias computed from them
  /// cannot hide keys, so it may be fused beside a finite-fill mask.
  std::vector<std::string> finiteInputs;
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
