//===- Verify.h - Check a fusion on the CPU ---------------------*- C++ -*-===//
//
// Runs an unfused graph and its fused form on the same seeded random inputs
// through the CPU path and compares every output, and every fused attention
// site with the value it replaced.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_VERIFY_VERIFY_H
#define KILN_VERIFY_VERIFY_H

#include "kiln/Runner/Runner.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace mlir::kiln {

struct VerifyOptions {
  /// The function to compare; empty: `main` when there is one, else the
  /// first public function with a body.
  std::string funcName;
  /// Seed of the random inputs.
  uint64_t seed = 0;
  /// Size given to every dynamic input dim.
  int64_t dynamicDimSize = 8;
  /// Upper bound (exclusive) of integer inputs whose range nothing implies.
  int64_t defaultIntHigh = 2;
  /// Compare each fused site with the unfused value it replaced.
  bool compareSites = true;
  /// The fused graph was built with --padded-rows=free: only padding that
  /// leaves every query row a key is drawn.
  bool paddedRowsFree = false;
  /// The fused graph was built folding FP8 (the fusion's fold-fp8): sites
  /// that quantise their probabilities are paired only then.
  bool foldFp8 = true;
  /// Relative tolerances by element type of the reference.
  double f32Tolerance = 1e-4;
  double halfTolerance = 2e-2;
  /// How the fused module's attention ops are lowered.
  CPURunOptions run;
};

/// One compared tensor.
struct TensorComparison {
  /// `output N` or `site N`.
  std::string name;
  std::string type;
  int64_t numElements = 0;
  double maxAbsError = 0;
  /// Largest |fused - ref| / |ref| over elements with |ref| > 1e-6·max|ref|.
  double maxRelError = 0;
  /// ||fused - ref||₂ / ||ref||₂.
  double relativeL2 = 0;
  /// Max error over max |ref|: what is checked against the tolerance.
  double normalizedMaxError = 0;
  double tolerance = 0;
  /// Elements that are NaN/Inf in the fused result but finite in the
  /// reference (always a failure).
  int64_t newNonFinite = 0;
  /// Elements that are NaN/Inf in the reference; the fused value must be the
  /// same there (NaN for NaN, the same infinity), and a reference that is
  /// NaN/Inf everywhere fails as inconclusive.
  int64_t referenceNonFinite = 0;
  int64_t nonFiniteMismatch = 0;
  /// NaN elements of the reference left uncompared: the graph's 0/0 on rows
  /// that see no key under a -inf fill (graphs with 0/1 mask inputs).
  int64_t undefinedInReference = 0;
  bool passed = false;
  /// Why it failed or was not compared, when it did.
  std::string note;
};

struct VerifyReport {
  SmallVector<TensorComparison> outputs;
  SmallVector<TensorComparison> sites;
  /// How the inputs were drawn, one line per argument.
  SmallVector<std::string> inputs;
  /// Set when sites could not be paired (counts differ).
  std::string siteNote;
  bool passed = false;

  void print(llvm::raw_ostream &os) const;
};

/// Runs `unfused` and `fused` (the same function signature) on seeded random
/// inputs of the graph's own input types and compares them. Integer inputs
/// that feed a tosa.gather (through casts and reshapes) get values in
/// [0, table rows); inputs whose name (`onnx.name` or the argument's
/// location) contains "mask" get 0/1, and so do other integers when
/// defaultIntHigh is 2; other integers [0, defaultIntHigh); floats
/// normal(0, 1). When there are 0/1 inputs, the graphs run once per padding
/// trial (random 0/1, left and right padding, a row all padding) and every
/// comparison names its trial. Returns failure only when the modules cannot be
/// run (diagnostics say why); a mismatch is a report with `passed == false`.
FailureOr<VerifyReport> verifyFusion(ModuleOp unfused, ModuleOp fused,
                                     const VerifyOptions &options);

} // namespace mlir::kiln

#endif // KILN_VERIFY_VERIFY_H
