//===- Lit.cpp - Constant tensors folded at import time -------------------===//
//
// Conversion between Lit and DenseElementsAttr, and broadcasting helpers.
//
//===----------------------------------------------------------------------===//

#include "Lit.h"

#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/APInt.h"
#include "llvm/ADT/SmallVector.h"

#include <vector>

using namespace mlir;
using namespace mlir::kiln::graph;

static double roundToFloatType(double value, FloatType type) {
  if (type.isF64())
    return value;
  // The machine's own rounding (to nearest, ties to even), as APFloat's:
  // folded masks and biases hold millions of f32 elements.
  if (type.isF32())
    return static_cast<double>(static_cast<float>(value));
  llvm::APFloat f(value);
  bool losesInfo = false;
  f.convert(type.getFloatSemantics(), llvm::APFloat::rmNearestTiesToEven,
            &losesInfo);
  f.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven,
            &losesInfo);
  return f.convertToDouble();
}

static int64_t wrapToIntType(int64_t value, IntegerType type) {
  unsigned width = type.getWidth();
  if (width == 1)
    return value != 0;
  if (width >= 64)
    return value;
  llvm::APInt v(64, (uint64_t)value, /*isSigned=*/true);
  llvm::APInt t = v.trunc(width);
  return type.isUnsigned() ? (int64_t)t.getZExtValue() : t.getSExtValue();
}

void Lit::normalize() {
  if (auto ft = dyn_cast<FloatType>(elementType)) {
    if (!ft.isF64())
      for (double &v : floats)
        v = roundToFloatType(v, ft);
    return;
  }
  if (auto it = dyn_cast<IntegerType>(elementType))
    for (int64_t &v : ints)
      v = wrapToIntType(v, it);
}

std::optional<Lit> Lit::fromAttr(DenseElementsAttr attr) {
  auto type = cast<ShapedType>(attr.getType());
  Lit lit;
  lit.shape.assign(type.getShape().begin(), type.getShape().end());
  lit.elementType = type.getElementType();
  int64_t n = type.getNumElements();
  if (isa<FloatType>(lit.elementType)) {
    lit.floats.reserve(n);
    if (attr.isSplat()) {
      APFloat v = attr.getSplatValue<APFloat>();
      bool losesInfo;
      v.convert(llvm::APFloat::IEEEdouble(),
                llvm::APFloat::rmNearestTiesToEven, &losesInfo);
      lit.floats.assign(n, v.convertToDouble());
      return lit;
    }
    // f32 and f64 read natively: no APFloat per element.
    if (lit.elementType.isF32()) {
      for (float v : attr.getValues<float>())
        lit.floats.push_back(v);
      return lit;
    }
    if (lit.elementType.isF64()) {
      for (double v : attr.getValues<double>())
        lit.floats.push_back(v);
      return lit;
    }
    for (APFloat v : attr.getValues<APFloat>()) {
      bool losesInfo;
      v.convert(llvm::APFloat::IEEEdouble(),
                llvm::APFloat::rmNearestTiesToEven, &losesInfo);
      lit.floats.push_back(v.convertToDouble());
    }
    return lit;
  }
  auto intType = dyn_cast<IntegerType>(lit.elementType);
  if (!intType)
    return std::nullopt;
  auto toInt = [&](const APInt &v) -> int64_t {
    if (intType.getWidth() == 1 || intType.isUnsigned())
      return (int64_t)v.getZExtValue();
    return v.getSExtValue();
  };
  if (attr.isSplat()) {
    lit.ints.assign(n, toInt(attr.getSplatValue<APInt>()));
    return lit;
  }
  lit.ints.reserve(n);
  if (intType.getWidth() == 64 && !intType.isUnsigned()) {
    for (int64_t v : attr.getValues<int64_t>())
      lit.ints.push_back(v);
    return lit;
  }
  if (intType.getWidth() == 32 && !intType.isUnsigned()) {
    for (int32_t v : attr.getValues<int32_t>())
      lit.ints.push_back(v);
    return lit;
  }
  for (APInt v : attr.getValues<APInt>())
    lit.ints.push_back(toInt(v));
  return lit;
}

DenseElementsAttr Lit::toAttr() const {
  auto type = RankedTensorType::get(shape, elementType);
  if (auto ft = dyn_cast<FloatType>(elementType)) {
    bool splat = !floats.empty() && llvm::all_equal(floats);
    if (ft.isF32() || ft.isF64()) {  // natively, as fromAttr reads them
      auto given = splat ? llvm::ArrayRef<double>(floats).take_front(1)
                         : llvm::ArrayRef<double>(floats);
      if (ft.isF64())
        return DenseElementsAttr::get(type, given);
      std::vector<float> narrow(given.begin(), given.end());
      return DenseElementsAttr::get(type, llvm::ArrayRef<float>(narrow));
    }
    llvm::SmallVector<APFloat> values;
    for (double v : splat ? llvm::ArrayRef<double>(floats).take_front(1)
                          : llvm::ArrayRef<double>(floats)) {
      APFloat f(v);
      bool losesInfo;
      f.convert(ft.getFloatSemantics(), llvm::APFloat::rmNearestTiesToEven,
                &losesInfo);
      values.push_back(f);
    }
    return DenseElementsAttr::get(type, values);
  }
  auto it = cast<IntegerType>(elementType);
  bool splat = !ints.empty() && llvm::all_equal(ints);
  auto given = splat ? llvm::ArrayRef<int64_t>(ints).take_front(1)
                     : llvm::ArrayRef<int64_t>(ints);
  if (it.getWidth() == 64 && !it.isUnsigned())
    return DenseElementsAttr::get(type, given);
  if (it.getWidth() == 32 && !it.isUnsigned()) {
    std::vector<int32_t> narrow(given.begin(), given.end());
    return DenseElementsAttr::get(type, llvm::ArrayRef<int32_t>(narrow));
  }
  if (it.getWidth() == 1) {
    llvm::SmallVector<bool> truth(given.size());
    for (size_t k = 0; k < given.size(); ++k)
      truth[k] = given[k] != 0;
    return DenseElementsAttr::get(type, llvm::ArrayRef<bool>(truth));
  }
  llvm::SmallVector<APInt> values;
  for (int64_t v : splat ? llvm::ArrayRef<int64_t>(ints).take_front(1)
                         : llvm::ArrayRef<int64_t>(ints))
    values.push_back(APInt(it.getWidth(), (uint64_t)v,
                           /*isSigned=*/it.getWidth() > 1 && !it.isUnsigned(),
                           /*implicitTrunc=*/true));
  return DenseElementsAttr::get(type, values);
}

std::vector<int64_t>
mlir::kiln::graph::broadcastIndices(llvm::ArrayRef<int64_t> in,
                                          llvm::ArrayRef<int64_t> out) {
  size_t rank = out.size();
  Shape padded(rank - in.size(), 1);
  padded.append(in.begin(), in.end());
  // Strides of `in`, zero along broadcast axes.
  Shape strides(rank, 0);
  int64_t stride = 1;
  for (int64_t axis = rank - 1; axis >= 0; --axis) {
    strides[axis] = padded[axis] == 1 ? 0 : stride;
    stride *= padded[axis];
  }
  int64_t n = numElements(out);
  std::vector<int64_t> result(n);
  Shape index(rank, 0);
  int64_t offset = 0;
  for (int64_t k = 0; k < n; ++k) {
    result[k] = offset;
    for (int64_t axis = rank - 1; axis >= 0; --axis) {
      ++index[axis];
      offset += strides[axis];
      if (index[axis] < out[axis])
        break;
      offset -= strides[axis] * index[axis];
      index[axis] = 0;
    }
  }
  return result;
}
