//===- Lit.h - Constant tensors folded at import time -----------*- C++ -*-===//
//
// A small host-side tensor used to constant-fold the shape and mask
// computations of ONNX and StableHLO graphs while importing them.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_TARGET_GRAPH_LIT_H
#define KILN_LIB_TARGET_GRAPH_LIT_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace mlir::kiln::graph {

using Shape = llvm::SmallVector<int64_t, 6>;

/// Number of elements of a static shape (-1 when a dim is dynamic; INT64_MAX
/// when the product overflows).
inline int64_t numElements(llvm::ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return -1;
    if (__builtin_mul_overflow(n, d, &n))
      return INT64_MAX;
  }
  return n;
}

/// Largest dimension and element count the importer accepts.
constexpr int64_t kMaxDim = int64_t(1) << 40;
constexpr int64_t kMaxElements = int64_t(1) << 48;

/// Whether a shape is beyond what the importer accepts (dynamic dims count
/// as 1).
inline bool isShapeTooLarge(llvm::ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      continue;
    if (d > kMaxDim || __builtin_mul_overflow(n, d, &n) || n > kMaxElements)
      return true;
  }
  return false;
}

/// Converts a double to int64 without undefined behaviour (NaN -> 0,
/// saturating out-of-range values).
inline int64_t toInt64(double v) {
  if (std::isnan(v))
    return 0;
  if (v >= 9.2e18)
    return INT64_MAX;
  if (v <= -9.2e18)
    return INT64_MIN;
  return (int64_t)v;
}

/// A constant tensor held as doubles (float element types) or int64s
/// (integer and i1 element types).
struct Lit {
  Shape shape;
  Type elementType;
  std::vector<double> floats;
  std::vector<int64_t> ints;

  bool isFloat() const { return isa<FloatType>(elementType); }
  int64_t size() const {
    return isFloat() ? (int64_t)floats.size() : (int64_t)ints.size();
  }
  double getF(int64_t k) const {
    return isFloat() ? floats[k] : (double)ints[k];
  }
  int64_t getI(int64_t k) const {
    return isFloat() ? toInt64(floats[k]) : ints[k];
  }

  /// An empty tensor of the given shape and element type.
  static Lit make(llvm::ArrayRef<int64_t> shape, Type elementType) {
    Lit lit;
    lit.shape.assign(shape.begin(), shape.end());
    lit.elementType = elementType;
    int64_t n = numElements(shape);
    if (lit.isFloat())
      lit.floats.assign(n, 0.0);
    else
      lit.ints.assign(n, 0);
    return lit;
  }
  void set(int64_t k, double f, int64_t i) {
    if (isFloat())
      floats[k] = f;
    else
      ints[k] = i;
  }
  /// Rounds the values to what `elementType` can hold.
  void normalize();

  static std::optional<Lit> fromAttr(DenseElementsAttr attr);
  DenseElementsAttr toAttr() const;
};

/// Maps each linear index of `out` to the linear index of `in` under numpy
/// broadcasting (`in` is left-padded with 1s to the rank of `out`).
std::vector<int64_t> broadcastIndices(llvm::ArrayRef<int64_t> in,
                                      llvm::ArrayRef<int64_t> out);

} // namespace mlir::kiln::graph

#endif // KILN_LIB_TARGET_GRAPH_LIT_H
