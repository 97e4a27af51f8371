//===- GraphBuilder.cpp - TOSA graph building shared by the importers -----===//
//
// See GraphBuilder.h.
//
//===----------------------------------------------------------------------===//

#include "GraphBuilder.h"
#include "kiln/Dialect/Kiln/Transforms/Passes.h"

#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Sequence.h"

using namespace mlir;
using namespace mlir::kiln::graph;

static constexpr int64_t kDynamic = ShapedType::kDynamic;

GraphBuilder::GraphBuilder(MLIRContext *ctx, StringRef fileName)
    : ctx(ctx), builder(ctx), fileName(fileName.str()),
      fileLoc(FileLineColLoc::get(ctx, fileName, 0, 0)), loc(fileLoc) {}

Operation *GraphBuilder::create(StringRef name, ValueRange operands,
                            TypeRange results, ArrayRef<NamedAttribute> attrs) {
  OperationState state(loc, name);
  state.addOperands(operands);
  state.addTypes(results);
  state.addAttributes(attrs);
  return builder.create(state);
}

Value GraphBuilder::constant(DenseElementsAttr attr) {
  return create1("tosa.const", {}, attr.getType(),
                 {builder.getNamedAttr("values", attr)});
}

Value GraphBuilder::constShape(ArrayRef<int64_t> values) {
  auto key = std::vector<int64_t>(values.begin(), values.end());
  auto it = cachedShapes.find(key);
  if (it != cachedShapes.end())
    return it->second;
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToStart(builder.getInsertionBlock());
  Location saved = loc;
  loc = fileLoc;
  auto type = RankedTensorType::get({(int64_t)values.size()},
                                    builder.getIndexType());
  auto attr = DenseIntElementsAttr::get(type, values);
  Value shape = create1("tosa.const_shape", {},
                        tosa::shapeType::get(ctx, values.size()),
                        {builder.getNamedAttr("values", attr)});
  loc = saved;
  cachedShapes[key] = shape;
  return shape;
}

Value GraphBuilder::scalarConstant(Type elemType, double value, int64_t rank) {
  Lit lit = Lit::make(Shape(rank, 1), elemType);
  lit.set(0, value, toInt64(value));
  lit.normalize();
  return constant(lit.toAttr());
}

Value GraphBuilder::zeroPoint(Type elemType) {
  auto it = cachedZeroPoints.find(elemType);
  if (it != cachedZeroPoints.end())
    return it->second;
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToStart(builder.getInsertionBlock());
  Value zp = scalarConstant(elemType, 0, 1);
  cachedZeroPoints[elemType] = zp;
  return zp;
}

Value GraphBuilder::shiftZero() {
  if (cachedShift)
    return cachedShift;
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToStart(builder.getInsertionBlock());
  cachedShift = scalarConstant(builder.getI8Type(), 0, 1);
  return cachedShift;
}

Value GraphBuilder::reshape(Value value, ArrayRef<int64_t> shape) {
  auto type = rankedOf(value);
  if (!type) {
    unsupportedReason = "operand of unknown rank";
    return {};
  }
  if (type.getShape() == shape)
    return value;
  Shape target(shape.begin(), shape.end());
  int numDynamic = llvm::count(target, kDynamic);
  if (numDynamic > 1) {
    unsupportedReason = "reshape to more than one dynamic dimension";
    return {};
  }
  for (int64_t &d : target)
    if (d == kDynamic)
      d = -1;
  auto resultType = RankedTensorType::get(shape, type.getElementType());
  // Constants are reshaped here rather than in the IR. A named constant's
  // reshape keeps the name as where it comes from (a report then names the
  // graph value and the reshape, as it would for a tosa.reshape).
  if (Operation *def = value.getDefiningOp())
    if (def->getName().getStringRef() == "tosa.const" &&
        resultType.hasStaticShape())
      if (auto attr = def->getAttrOfType<DenseElementsAttr>("values")) {
        Value reshaped = constant(attr.reshape(resultType));
        auto name = def->getAttrOfType<StringAttr>(kiln::kGraphValueAttrName);
        if (!name)
          name = def->getAttrOfType<StringAttr>(kiln::kGraphValueReshapedAttrName);
        if (name)
          reshaped.getDefiningOp()->setAttr(kiln::kGraphValueReshapedAttrName, name);
        return reshaped;
      }
  return create1("tosa.reshape", {value, constShape(target)}, resultType);
}

Value GraphBuilder::transpose(Value value, ArrayRef<int64_t> perm) {
  auto type = rankedOf(value);
  if (llvm::equal(perm, llvm::seq<int64_t>(0, perm.size())))
    return value;
  Shape shape;
  SmallVector<int32_t> perms;
  for (int64_t p : perm) {
    shape.push_back(type.getDimSize(p));
    perms.push_back((int32_t)p);
  }
  return create1("tosa.transpose", value,
                 RankedTensorType::get(shape, type.getElementType()),
                 {builder.getNamedAttr("perms",
                                       builder.getDenseI32ArrayAttr(perms))});
}

Value GraphBuilder::padRank(Value value, int64_t rank) {
  auto type = rankedOf(value);
  if (!type) {
    unsupportedReason = "operand of unknown rank";
    return {};
  }
  if (type.getRank() >= rank)
    return value;
  Shape shape(rank - type.getRank(), 1);
  llvm::append_range(shape, type.getShape());
  return reshape(value, shape);
}

FailureOr<Shape> GraphBuilder::broadcastShape(ArrayRef<int64_t> a,
                                          ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  Shape result(rank);
  for (size_t k = 0; k < rank; ++k) {
    int64_t da = k < rank - a.size() ? 1 : a[k - (rank - a.size())];
    int64_t db = k < rank - b.size() ? 1 : b[k - (rank - b.size())];
    if (da == 1)
      result[k] = db;
    else if (db == 1)
      result[k] = da;
    else if (da == kDynamic)
      result[k] = db;
    else if (db == kDynamic || da == db)
      result[k] = da;
    else
      return failure();
  }
  return result;
}

Value GraphBuilder::elementwise(StringRef name, ArrayRef<Value> operands,
                            Type elemType) {
  int64_t rank = 0;
  for (Value v : operands) {
    auto type = rankedOf(v);
    if (!type) {
      unsupportedReason = "operand of unknown rank";
      return {};
    }
    rank = std::max(rank, type.getRank());
  }
  SmallVector<Value> padded;
  Shape shape;
  for (Value v : operands) {
    Value p = padRank(v, rank);
    if (!p)
      return {};
    padded.push_back(p);
    FailureOr<Shape> s = broadcastShape(shape, rankedOf(p).getShape());
    if (failed(s)) {
      error() << "operand shapes do not broadcast";
      unsupportedReason.clear();
      return {};
    }
    shape = *s;
  }
  auto resultType = RankedTensorType::get(shape, elemType);
  if (name == "tosa.mul")
    padded.push_back(shiftZero());
  return create1(name, padded, resultType);
}

Value GraphBuilder::mul(Value a, Value b) {
  return elementwise("tosa.mul", {a, b}, elemOf(a));
}

Value GraphBuilder::castTo(Value value, Type elemType) {
  if (elemOf(value) == elemType)
    return value;
  auto type = cast<TensorType>(value.getType()).clone(elemType);
  return create1("tosa.cast", value, type);
}

Value GraphBuilder::reduce(StringRef name, Value value, int64_t axis) {
  auto type = rankedOf(value);
  Shape shape(type.getShape());
  shape[axis] = 1;
  return create1(name, value,
                 RankedTensorType::get(shape, type.getElementType()),
                 {builder.getNamedAttr("axis",
                                       builder.getI32IntegerAttr(axis))});
}

Value GraphBuilder::tile(Value value, ArrayRef<int64_t> multiples) {
  auto type = rankedOf(value);
  if (llvm::all_of(multiples, [](int64_t m) { return m == 1; }))
    return value;
  Shape shape;
  for (auto [d, m] : llvm::zip(type.getShape(), multiples))
    shape.push_back(d == kDynamic ? kDynamic : d * m);
  return create1("tosa.tile", {value, constShape(multiples)},
                 RankedTensorType::get(shape, type.getElementType()));
}

Value GraphBuilder::slice(Value value, ArrayRef<int64_t> starts,
                      ArrayRef<int64_t> sizes) {
  auto type = rankedOf(value);
  if (type.getShape() == sizes)
    return value;
  Shape target(sizes.begin(), sizes.end());
  for (int64_t &d : target)
    if (d == kDynamic)
      d = -1;
  return create1("tosa.slice", {value, constShape(starts), constShape(target)},
                 RankedTensorType::get(sizes, type.getElementType()));
}

int64_t mlir::kiln::graph::product(ArrayRef<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d == kDynamic)
      return kDynamic;
    if (__builtin_mul_overflow(n, d, &n))
      return INT64_MAX;
  }
  return n;
}

Value GraphBuilder::matmul(Value a, Value b) {
  auto ta = rankedOf(a), tb = rankedOf(b);
  if (!ta || !tb) {
    unsupportedReason = "operand of unknown rank";
    return {};
  }
  if (ta.getRank() == 0 || tb.getRank() == 0) {
    error() << "MatMul operands must have rank >= 1";
    return {};
  }
  bool vecA = ta.getRank() == 1, vecB = tb.getRank() == 1;
  if (vecA && !(a = reshape(a, {1, ta.getDimSize(0)})))
    return {};
  if (vecB && !(b = reshape(b, {tb.getDimSize(0), 1})))
    return {};
  ta = rankedOf(a);
  tb = rankedOf(b);
  ArrayRef<int64_t> sa = ta.getShape(), sb = tb.getShape();
  int64_t m = sa[sa.size() - 2], k = sa.back(), k2 = sb[sb.size() - 2],
          n = sb.back();
  if (k != kDynamic && k2 != kDynamic && k != k2) {
    error() << "MatMul contraction sizes differ (" << k << " vs " << k2 << ")";
    return {};
  }
  ArrayRef<int64_t> batchA = sa.drop_back(2), batchB = sb.drop_back(2);
  FailureOr<Shape> batch = broadcastShape(batchA, batchB);
  if (failed(batch)) {
    error() << "MatMul batch dimensions do not broadcast";
    return {};
  }
  Type elemType = ta.getElementType();
  Value zp = zeroPoint(elemType);
  Shape outShape(*batch);
  outShape.push_back(m);
  outShape.push_back(n);
  auto isOne = [](int64_t d) { return d == 1; };
  Value a3, b3;
  int64_t rows;
  if (llvm::all_of(batchB, isOne)) {
    // A weight (or a batch of one): fold A's batch into its rows.
    rows = product(batchA);
    rows = rows == kDynamic || m == kDynamic ? kDynamic : rows * m;
    if (!(a3 = reshape(a, {1, rows, k})) || !(b3 = reshape(b, {1, k2, n})))
      return {};
    a3 = a3;
    auto resultType = RankedTensorType::get({1, rows, n}, elemType);
    Value mm = create1("tosa.matmul", {a3, b3, zp, zp}, resultType);
    Shape full(*batch);
    full.push_back(m);
    full.push_back(n);
    if (vecA || vecB) {
      Shape dropped(*batch);
      if (!vecA)
        dropped.push_back(m);
      if (!vecB)
        dropped.push_back(n);
      return reshape(mm, dropped);
    }
    return reshape(mm, full);
  }
  // Batched on both sides (or only on B): broadcast size-1 batch axes by
  // tiling, then fold the batch into one axis.
  int64_t rank = batch->size() + 2;
  Value pa = padRank(a, rank), pb = padRank(b, rank);
  if (!pa || !pb)
    return {};
  auto tileTo = [&](Value v) -> Value {
    auto t = rankedOf(v);
    Shape multiples(rank, 1);
    for (int64_t axis = 0; axis < rank - 2; ++axis) {
      int64_t have = t.getDimSize(axis), want = (*batch)[axis];
      if (have == want)
        continue;
      if (have != 1 || want == kDynamic) {
        unsupportedReason = "MatMul batch broadcast to a dynamic size";
        return {};
      }
      multiples[axis] = want;
    }
    return tile(v, multiples);
  };
  if (!(pa = tileTo(pa)) || !(pb = tileTo(pb)))
    return {};
  int64_t batchSize = product(*batch);
  if (!(a3 = reshape(pa, {batchSize, m, k})) ||
      !(b3 = reshape(pb, {batchSize, k2, n})))
    return {};
  auto resultType = RankedTensorType::get({batchSize, m, n}, elemType);
  Value mm = create1("tosa.matmul", {a3, b3, zp, zp}, resultType);
  if (vecA || vecB) {
    Shape dropped(*batch);
    if (!vecA)
      dropped.push_back(m);
    if (!vecB)
      dropped.push_back(n);
    return reshape(mm, dropped);
  }
  return reshape(mm, outShape);
}

Value GraphBuilder::softmax(Value x, int64_t axis) {
  Value max = reduce("tosa.reduce_max", x, axis);
  Value shifted = sub(x, max);
  Value exp = unary("tosa.exp", shifted);
  Value sum = reduce("tosa.reduce_sum", exp, axis);
  Value inv = unary("tosa.reciprocal", sum);
  return mul(exp, inv);
}
