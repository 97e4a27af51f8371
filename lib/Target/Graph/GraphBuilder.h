//===- GraphBuilder.h - TOSA graph building shared by the importers -*- C++ -*-===//
//
// The IR helpers with which Kiln's importers (ONNX, StableHLO) write a graph
// in the TOSA form the fusion passes read: one place that decides how a
// reshape, a broadcast, a matmul or a softmax is spelled, so that a site
// imported from either front end reaches `kiln-fuse-attention` in the same
// form.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_TARGET_GRAPH_GRAPHBUILDER_H
#define KILN_LIB_TARGET_GRAPH_GRAPHBUILDER_H

#include "Lit.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/DenseMap.h"

#include <map>
#include <string>
#include <vector>

namespace mlir::kiln::graph {

/// Product of `dims`, ShapedType::kDynamic when any is dynamic (INT64_MAX
/// when it overflows).
int64_t product(llvm::ArrayRef<int64_t> dims);

class GraphBuilder {
public:
  GraphBuilder(MLIRContext *ctx, llvm::StringRef fileName);
  virtual ~GraphBuilder() = default;

  /// An error at the current location, prefixed with what is being imported.
  virtual InFlightDiagnostic error() { return emitError(loc); }

  static RankedTensorType rankedOf(Value value) {
    return dyn_cast<RankedTensorType>(value.getType());
  }
  static Type elemOf(Value value) {
    return cast<ShapedType>(value.getType()).getElementType();
  }

  Operation *create(llvm::StringRef name, ValueRange operands,
                    TypeRange results, llvm::ArrayRef<NamedAttribute> attrs = {});
  Value create1(llvm::StringRef name, ValueRange operands, Type result,
                llvm::ArrayRef<NamedAttribute> attrs = {}) {
    return create(name, operands, TypeRange(result), attrs)->getResult(0);
  }
  Value constant(DenseElementsAttr attr);
  Value constShape(llvm::ArrayRef<int64_t> values);
  /// A tensor<1x..x1xT> (rank `rank`) holding `value`.
  Value scalarConstant(Type elemType, double value, int64_t rank);
  Value zeroPoint(Type elemType);
  Value shiftZero();
  /// Reshape; null (with unsupportedReason) when TOSA cannot express it.
  Value reshape(Value value, llvm::ArrayRef<int64_t> shape);
  Value transpose(Value value, llvm::ArrayRef<int64_t> perm);
  /// Left-pads `value`'s shape with 1s up to `rank`.
  Value padRank(Value value, int64_t rank);
  /// Broadcast-compatible result shape, or failure on a static mismatch.
  FailureOr<Shape> broadcastShape(llvm::ArrayRef<int64_t> a,
                                  llvm::ArrayRef<int64_t> b);
  /// Emits a TOSA elementwise op, equalising operand ranks first.
  Value elementwise(llvm::StringRef name, llvm::ArrayRef<Value> operands,
                    Type elemType);
  Value add(Value a, Value b) {
    return elementwise("tosa.add", {a, b}, elemOf(a));
  }
  Value sub(Value a, Value b) {
    return elementwise("tosa.sub", {a, b}, elemOf(a));
  }
  Value mul(Value a, Value b);
  Value unary(llvm::StringRef name, Value value) {
    return create1(name, value, value.getType());
  }
  Value castTo(Value value, Type elemType);
  /// A TOSA reduction over `axis`, which it keeps with size 1.
  Value reduce(llvm::StringRef name, Value value, int64_t axis);
  /// numpy's matmul: batch axes broadcast, rank-1 operands as vectors.
  Value matmul(Value a, Value b);
  /// exp(x - max) / sum(exp(x - max)) over `axis`, as the fusion reads it.
  Value softmax(Value value, int64_t axis);
  Value tile(Value value, llvm::ArrayRef<int64_t> multiples);
  Value slice(Value value, llvm::ArrayRef<int64_t> starts,
              llvm::ArrayRef<int64_t> sizes);

  MLIRContext *ctx;
  OpBuilder builder;
  std::string fileName;
  Location fileLoc;
  /// Location of the ops being created.
  Location loc;
  /// Set by a helper that returns null for a construct TOSA cannot express.
  std::string unsupportedReason;

private:
  Value cachedShift;
  llvm::DenseMap<Type, Value> cachedZeroPoints;
  std::map<std::vector<int64_t>, Value> cachedShapes;
};

} // namespace mlir::kiln::graph

#endif // KILN_LIB_TARGET_GRAPH_GRAPHBUILDER_H
