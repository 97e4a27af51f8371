//===- Report.h - The fusion report -----------------------------*- C++ -*-===//
//
// What kilnc --report prints: every fused attention site in graph order, and
// every softmax left unfused with the reason the fusion pass gave.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DRIVER_REPORT_H
#define KILN_DRIVER_REPORT_H

#include "kiln/Conversion/Passes.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace mlir::kiln {

/// A softmax the fusion pass did not fuse.
struct UnfusedSoftmax {
  std::string node;
  std::string reason;
  /// The node whose op stopped the match (empty: the softmax's own, or
  /// unknown).
  std::string stoppedAt;
  /// The softmax's source lines, where the input records them (StableHLO
  /// from JAX).
  std::vector<std::string> source = {};
};

/// A node the importer kept as an opaque op.
struct OpaqueNode {
  std::string node;
  std::string opType;
  std::string reason;
};

/// Collects the report of a fused module.
struct FusionReport {
  std::vector<UnfusedSoftmax> unfused;
  std::vector<OpaqueNode> opaque;
  /// The symbolic input dimensions given static sizes to import the graph
  /// (`--bind-dims`, or kilnc's own choice when shape computations need
  /// them): every size in the report is then for those values only.
  std::vector<std::pair<std::string, int64_t>> boundDims;
  /// The inputs declared finite (`--finite-inputs`): the fusion assumed it.
  std::vector<std::string> finiteInputs;
  /// The targets whose kernel choice each site states (a chip, and the
  /// kernel generation's options for it), in order.
  std::vector<std::pair<std::string, ConvertKilnToGPUOptions>> kernelTargets;

  /// The report as JSON: {"sites": [...], "kernels": [{"site": N,
  /// "targets": {chip: choice}}, ...], "unfused": [...], "opaque": [...],
  /// "bound_dims": {name: size}, "finite_inputs": [name, ...]}.
  llvm::json::Object toJSON(ModuleOp fused) const;
  /// The report as readable tables.
  void printText(ModuleOp fused, llvm::raw_ostream &os) const;
};

/// The prefix of the fusion pass's remarks on unfused softmaxes.
inline constexpr char kUnfusedRemarkPrefix[] = "softmax not fused: ";

} // namespace mlir::kiln

#endif // KILN_DRIVER_REPORT_H
