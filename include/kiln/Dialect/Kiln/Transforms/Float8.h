//===- Float8.h - float8 e4m3fn conversions in integer arithmetic -*- C++ -*-===//
//
// The CPU pipeline ends in LLVM, which has no float8 type to extend from or
// truncate to: e4m3fn values are converted with integer arithmetic on their
// bits. Shared by the attention lowerings (FP8 operands and caches) and the
// pass that expands the graph's own float8 conversions.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_KILN_TRANSFORMS_FLOAT8_H
#define KILN_DIALECT_KILN_TRANSFORMS_FLOAT8_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::kiln {

/// The f32 value of an f8E4M3FN scalar, exactly. e4m3 "FN" has bias 7, no
/// infinities and NaN at S.1111.111.
Value decodeE4M3(OpBuilder &b, Location loc, Value element);

/// The f8E4M3FN nearest to an f32 scalar (ties to even), without
/// saturation: a magnitude past 464 (the midpoint between 448 and the
/// missing 480), an infinity or a NaN gives NaN.
Value encodeE4M3(OpBuilder &b, Location loc, Value value);

/// Rewrites `arith.extf` from and `arith.truncf` to f8E4M3FN on scalars
/// into integer arithmetic (decodeE4M3/encodeE4M3).
void populateExpandFloat8Patterns(RewritePatternSet &patterns);

} // namespace mlir::kiln

#endif // KILN_DIALECT_KILN_TRANSFORMS_FLOAT8_H
