//===- GradCheck.h - Check kiln.attention_grad on the CPU -------*- C++ -*-===//
//
// The gradient check of the training path: for each kiln.attention op of a
// module, runs the forward (with its log-sum-exp) and kiln.attention_grad
// on the CPU on fresh random inputs and a random cotangent, and compares
// each gradient with central finite differences of a float64 forward along
// random directions.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNNER_GRADCHECK_H
#define KILN_RUNNER_GRADCHECK_H

#include "kiln/Runner/Runner.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <utility>

namespace mlir::kiln {

struct GradCheckOptions {
  /// Seed of the random inputs, directions and cotangents (site `n` draws
  /// from `seed + n`).
  uint64_t seed = 0;
  /// Random directions per operand.
  int64_t directions = 3;
  /// Largest relative error that passes; 0 for the element type's default
  /// (f32 1e-3, f16 1e-2, bf16 4e-2; the lse 1e-4 whatever the type).
  double tolerance = 0;
  /// Test only: the backward is built with its scale multiplied by
  /// 1 + this, a wrong gradient the check must reject.
  double perturbScale = 0;
  /// How the forward and the backward are lowered and run.
  CPURunOptions run;
};

/// One kiln.attention op's errors, worst over elements (out, lse) or over
/// directions (the gradients).
struct GradCheckSite {
  std::string location;
  std::string elementType;
  /// (name, worst relative error, tolerance), in the order checked.
  SmallVector<std::tuple<std::string, double, double>> errors;
  bool passed = true;
};

struct GradCheckReport {
  SmallVector<GradCheckSite> sites;
  bool passed = true;
  void print(llvm::raw_ostream &os) const;
};

/// Checks the gradient of every kiln.attention op of `module` (static
/// shapes only; an operand defined by a constant keeps its value, every
/// other operand is drawn at random). A site above its tolerance is
/// reported as an error at its location and makes the report fail; a site
/// that cannot be checked (dynamic shapes, a failed run) is an error
/// and a failure of the call.
FailureOr<GradCheckReport>
checkAttentionGradients(ModuleOp module, const GradCheckOptions &options);

} // namespace mlir::kiln

#endif // KILN_RUNNER_GRADCHECK_H
