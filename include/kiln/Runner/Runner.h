//===- Runner.h - Run Kiln and TOSA functions on the CPU --------*- C++ -*-===//
//
// Lowers a function (TOSA graph ops, kiln attention ops, upstream tensor
// dialects) to LLVM and runs it in-process with MLIR's ExecutionEngine. This
// is how fusions and tilings are checked without a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNNER_RUNNER_H
#define KILN_RUNNER_RUNNER_H

#include "kiln/Dialect/Kiln/Transforms/TileAttention.h"
#include "kiln/Runner/HostTensor.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"

namespace mlir::kiln {

/// How kiln attention ops are lowered for the CPU.
enum class AttentionLowering {
  /// kiln-tile-attention: the tiled online-softmax form.
  Tiled,
  /// kiln-decompose-attention: plain softmax over whole rows.
  Decomposed,
};

struct CPURunOptions {
  AttentionLowering attentionLowering = AttentionLowering::Tiled;
  AttentionTiling tiling;
  /// LLVM optimisation level of the JIT (0-3).
  unsigned optLevel = 2;
};

/// Runs `funcName` of a clone of `module` on `inputs` (one per argument, each
/// a ranked tensor of the argument's element type and a shape compatible
/// with it): dynamic argument dims are specialised to the inputs' shapes,
/// the clone is lowered to LLVM and run in-process. Returns the results in
/// order. Failures are reported as diagnostics on `module`'s context.
FailureOr<SmallVector<HostTensor>> runOnCPU(ModuleOp module, StringRef funcName,
                                            ArrayRef<HostTensor> inputs);

/// As above, with explicit options.
FailureOr<SmallVector<HostTensor>> runOnCPU(ModuleOp module, StringRef funcName,
                                            ArrayRef<HostTensor> inputs,
                                            const CPURunOptions &options);

/// Rewrites `func`'s argument types to the inputs' static shapes (the
/// specialisation runOnCPU performs), refining TOSA shapes through the body.
LogicalResult specializeFunction(ModuleOp module, StringRef funcName,
                                 ArrayRef<HostTensor> inputs);

/// Lowers `module` (already specialised) to the LLVM dialect as runOnCPU
/// does.
LogicalResult lowerToLLVM(ModuleOp module, const CPURunOptions &options);

} // namespace mlir::kiln

#endif // KILN_RUNNER_RUNNER_H
