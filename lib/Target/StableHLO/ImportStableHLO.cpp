//===- ImportStableHLO.cpp - StableHLO to Kiln's TOSA graph ---------------===//
//
// The module's public `main` is converted op by op into a new function over
// TOSA, written with the same helpers (GraphBuilder) as the ONNX importer so
// that the fusion passes meet one form:
//
// - calls (JAX's `tril`, `_where` ...) are inlined first;
// - ops whose operands are all constants are folded (iota, compare, select,
//   broadcast ...: the causal masks JAX builds from `iota`);
// - `broadcast_in_dim` is kept lazy: it becomes a reshape that inserts unit
//   axes, and elementwise users broadcast it as TOSA does; a user that needs
//   the full tensor (a matmul, a reshape) gets it tiled;
// - `dot_general` becomes transposes into [batch, rows, contraction] and
//   [batch, contraction, columns], a `tosa.matmul` and reshapes back; the
//   operand whose contracted axes are innermost goes on the left (JAX writes
//   P·V as `dot_general(V, P)`), the product then transposed;
// - consecutive reshapes and transposes are composed, and
//   `maximum(x, -inf)` (JAX's softmax guard) is `x`.
//
// Each op created keeps the location of the StableHLO op it comes from.
//
//===----------------------------------------------------------------------===//

#include "kiln/Target/StableHLO/ImportStableHLO.h"

#include "GraphBuilder.h"
#include "Lit.h"
#include "Reader.h"

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Target/ONNX/ImportONNX.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/SourceMgr.h"

#include <cmath>
#include <limits>
#include <numeric>

using namespace mlir;
using namespace mlir::kiln;
using namespace mlir::kiln::graph;
using namespace mlir::kiln::stablehlo_import;

namespace {

/// Constants up to this many elements are folded at import time.
constexpr int64_t kFoldLimit = int64_t(1) << 22;

using Perm = SmallVector<int64_t, 6>;

Perm intsOf(Operation *op, StringRef name) {
  auto attr = op->getAttrOfType<DenseI64ArrayAttr>(name);
  return attr ? Perm(attr.asArrayRef()) : Perm();
}

StringRef opName(Operation *op) {
  StringRef name = op->getName().getStringRef();
  name.consume_front("stablehlo.");
  return name;
}

/// `lit` broadcast to `shape` (numpy's rules).
Lit expand(const Lit &lit, ArrayRef<int64_t> shape) {
  Lit out = Lit::make(shape, lit.elementType);
  std::vector<int64_t> from = broadcastIndices(lit.shape, shape);
  for (int64_t k = 0, e = out.size(); k < e; ++k)
    out.set(k, lit.getF(from[k]), lit.getI(from[k]));
  return out;
}

/// Ops that fold at their operands' broadcast shape as well as at their
/// own (their values depend on the operands' elements only).
bool isLazyElementwise(StringRef name) {
  return llvm::is_contained(
      {"add", "subtract", "multiply", "divide", "maximum", "minimum", "compare",
       "select", "convert", "and", "or", "xor", "not", "negate", "abs"},
      name);
}

class Importer : public GraphBuilder {
public:
  Importer(MLIRContext *ctx, StringRef fileName)
      : GraphBuilder(ctx, fileName) {}

  OwningOpRef<ModuleOp> run(ModuleOp input);

private:
  InFlightDiagnostic error() override {
    InFlightDiagnostic diag = emitError(loc);
    if (current)
      diag << "'" << current->getName() << "': ";
    return diag;
  }

  LogicalResult inlineCalls(func::FuncOp main, ModuleOp input);
  LogicalResult convert(Operation *op);
  LogicalResult convertOp(Operation *op, Value &result);
  /// Counts the ops (constants aside) of `body` by their location's name.
  void countNames(Block &body);
  /// Names `result`, the TOSA value of StableHLO `op`, for the report (the
  /// attribute the ONNX importer sets from value names) where `op`'s
  /// location name is no other op's and `result` has `op`'s own type (not a
  /// lazy form of it), so that a frontend that gave each of its ops a name
  /// of its own (kiln.jax.jit) finds the site's operands among its values.
  /// `folded`: `result` is the constant `op` folded to (a fresh one).
  void nameValue(Operation *op, Value result, bool folded = false);
  /// `op` on constant operands, at its result shape or at `shape` (an
  /// elementwise op's lazy shape: see convert).
  std::optional<Lit> fold(Operation *op, ArrayRef<Lit> operands,
                          std::optional<ArrayRef<int64_t>> shape = {});

  /// The TOSA value of a StableHLO value: its shape, with unit axes where
  /// a broadcast is still lazy.
  Value lazy(Value v) { return values.lookup(v); }
  /// The TOSA value with the StableHLO value's full shape.
  Value full(Value v);
  /// The constant behind `v`'s TOSA value, if any.
  std::optional<Lit> constantOf(Value v);

  Value composedReshape(Value value, ArrayRef<int64_t> shape);
  Value composedTranspose(Value value, ArrayRef<int64_t> perm);
  Value broadcastInDim(Value x, ArrayRef<int64_t> dims,
                       RankedTensorType resultType);
  Value laidOut(Value value, ArrayRef<int64_t> perm);
  Value dotGeneral(Operation *op);
  Value reduce(Operation *op);
  Value stridedSlice(Operation *op);
  Value compare(Operation *op);
  /// An i1 select between two constant booleans: its predicate (or its
  /// negation), in `result`; false for any other select.
  bool selectOfBooleans(Operation *op, Value &result);
  /// Imports `op` as an opaque op of the same results (an unregistered
  /// `hlo_opaque.<name>` op on the full operands, regions dropped), with a
  /// warning; its one result in `single` where given.
  LogicalResult keepOpaque(Operation *op, Value *single = nullptr);
  /// and(x, true) or or(x, false): x, in `result`.
  bool logicalIdentity(Operation *op, bool isAnd, Value &result);
  Value elementwise(Operation *op);

  DenseMap<Value, Value> values;
  /// How many ops (constants aside) each location name has.
  llvm::StringMap<int64_t> nameCounts;
  Operation *current = nullptr;
};

//===----------------------------------------------------------------------===//
// Values
//===----------------------------------------------------------------------===//

Value Importer::full(Value v) {
  Value value = lazy(v);
  auto want = cast<RankedTensorType>(v.getType());
  auto have = rankedOf(value);
  if (have.getShape() == want.getShape())
    return value;
  if (std::optional<Lit> lit = constantOf(v))
    if (numElements(want.getShape()) <= kFoldLimit)
      return constant(expand(*lit, want.getShape()).toAttr());
  Shape multiples;
  for (auto [h, w] : llvm::zip(have.getShape(), want.getShape()))
    multiples.push_back(h == w ? 1 : w);
  return tile(value, multiples);
}

std::optional<Lit> Importer::constantOf(Value v) {
  Value value = lazy(v);
  Operation *def = value ? value.getDefiningOp() : nullptr;
  if (!def || def->getName().getStringRef() != "tosa.const")
    return std::nullopt;
  auto attr = def->getAttrOfType<DenseElementsAttr>("values");
  if (!attr)
    return std::nullopt;
  return Lit::fromAttr(attr);
}

Value Importer::composedReshape(Value value, ArrayRef<int64_t> shape) {
  while (Operation *def = value.getDefiningOp()) {
    if (def->getName().getStringRef() != "tosa.reshape")
      break;
    value = def->getOperand(0);
  }
  // A reshape of the value to this shape that exists already (a step's
  // own, which carries its name: `(x @ w).reshape(b, s, h, d)` before a
  // repeat composed past it) is taken rather than made again unnamed.
  Block *block = builder.getInsertionBlock();
  Block::iterator point = builder.getInsertionPoint();
  for (Operation *user : value.getUsers())
    if (user->getName().getStringRef() == "tosa.reshape" &&
        user->getOperand(0) == value &&
        cast<RankedTensorType>(user->getResult(0).getType()).getShape() ==
            ArrayRef<int64_t>(shape) &&
        user->getBlock() == block &&
        (point == block->end() || user->isBeforeInBlock(&*point)))
      return user->getResult(0);
  return reshape(value, shape);
}

/// `value` as a repeat of each element of one axis of a tensor G times
/// (`jnp.repeat(x, G, axis)`, as a broadcast into a new unit axis and a
/// reshape that merges it): reshape(tile(reshape(x, insert 1 after axis),
/// G on it), merge). Returns x, the axis and G.
struct AxisRepeat {
  /// The repeated value, and the shape it is read in (its own, or a
  /// reshape of it where the repeat's expand also regroups its axes).
  Value source;
  Shape shape;
  int64_t axis;
  int64_t times;
};
static std::optional<AxisRepeat> asAxisRepeat(Value value) {
  auto merge = value.getDefiningOp<tosa::ReshapeOp>();
  auto tile = merge ? merge.getInput1().getDefiningOp<tosa::TileOp>()
                    : tosa::TileOp();
  auto expand = tile ? tile.getInput1().getDefiningOp<tosa::ReshapeOp>()
                     : tosa::ReshapeOp();
  if (!expand)
    return std::nullopt;
  auto expanded = cast<RankedTensorType>(expand.getOutput().getType());
  auto tiled = cast<RankedTensorType>(tile.getOutput().getType());
  auto out = cast<RankedTensorType>(merge.getOutput().getType());
  int64_t rank = out.getRank();
  if (expanded.getRank() != rank + 1)
    return std::nullopt;
  // The expand inserts a unit axis after `axis` (and may regroup the
  // others: the importer composes the reshape before a repeat with the
  // repeat's own, `(x @ w).reshape(b, s, h, d)` then `jnp.repeat`).
  for (int64_t axis = 0; axis < rank; ++axis) {
    if (expanded.getDimSize(axis + 1) != 1)
      continue;
    Shape source(expanded.getShape());
    source.erase(source.begin() + axis + 1);
    int64_t times = tiled.getDimSize(axis + 1);
    Shape tiledShape(expanded.getShape());
    tiledShape[axis + 1] = times;
    Shape merged(source);
    merged[axis] *= times;
    if (ArrayRef<int64_t>(tiledShape) == tiled.getShape() &&
        ArrayRef<int64_t>(merged) == out.getShape())
      return AxisRepeat{expand.getInput1(), source, axis, times};
  }
  return std::nullopt;
}

Value Importer::composedTranspose(Value value, ArrayRef<int64_t> perm) {
  // No move at all: the value itself, whose op may carry a graph value's
  // name (re-creating it would drop that name; Flax's attention output is
  // a transpose that the next dot_general reads in place).
  if (llvm::equal(perm, llvm::seq<int64_t>(0, perm.size())))
    return value;
  // A transpose of a repeat is the repeat of the transpose: the repeat is
  // moved after it, where the fusion reads a KV-head repeat (GQA written
  // with jnp.repeat in [B, S, H, D] order).
  if (std::optional<AxisRepeat> repeat = asAxisRepeat(value)) {
    int64_t axis = llvm::find(perm, repeat->axis) - perm.begin();
    Value moved =
        composedTranspose(composedReshape(repeat->source, repeat->shape), perm);
    auto type = rankedOf(moved);
    Shape withUnit(type.getShape());
    withUnit.insert(withUnit.begin() + axis + 1, 1);
    Shape multiples(withUnit.size(), 1);
    multiples[axis + 1] = repeat->times;
    Shape merged(type.getShape());
    merged[axis] *= repeat->times;
    return reshape(tile(reshape(moved, withUnit), multiples), merged);
  }
  Perm composed(perm.begin(), perm.end());
  if (Operation *def = value.getDefiningOp())
    if (auto inner = dyn_cast<tosa::TransposeOp>(def)) {
      ArrayRef<int32_t> first = inner.getPerms();
      for (int64_t &p : composed)
        p = first[p];
      value = inner.getInput1();
    }
  // A transpose that moves only unit axes keeps every element in place: a
  // reshape (JAX's vmap moves a group axis of size 1 about).
  auto type = rankedOf(value);
  Shape shape;
  Perm nonUnit;
  for (int64_t p : composed) {
    shape.push_back(type.getDimSize(p));
    if (type.getDimSize(p) != 1)
      nonUnit.push_back(p);
  }
  if (llvm::is_sorted(nonUnit))
    return composedReshape(value, shape);
  return transpose(value, composed);
}

//===----------------------------------------------------------------------===//
// Folding
//===----------------------------------------------------------------------===//

/// Fills `out` (shaped `shape`) from `x`: the element at indices (i_d)
/// reads x at the sum over d of offset(d, i_d, x's row-major strides).
static void gatherInto(
    Lit &out, ArrayRef<int64_t> shape, const Lit &x,
    llvm::function_ref<int64_t(int64_t, int64_t, ArrayRef<int64_t>)> offset) {
  Shape strides(x.shape.size(), 1);
  for (int64_t d = (int64_t)x.shape.size() - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * x.shape[d + 1];
  for (int64_t k = 0, e = out.size(); k < e; ++k) {
    int64_t rest = k, index = 0;
    for (int64_t d = (int64_t)shape.size() - 1; d >= 0; --d) {
      int64_t i = rest % shape[d];
      rest /= shape[d];
      index += offset(d, i, strides);
    }
    out.set(k, x.getF(index), x.getI(index));
  }
}

std::optional<Lit> Importer::fold(Operation *op, ArrayRef<Lit> operands,
                                  std::optional<ArrayRef<int64_t>> shape) {
  auto type = cast<RankedTensorType>(op->getResult(0).getType());
  if (shape)
    type = RankedTensorType::get(*shape, type.getElementType());
  if (!type.hasStaticShape() || type.getNumElements() > kFoldLimit)
    return std::nullopt;
  StringRef name = opName(op);
  Type elemType = type.getElementType();
  Lit out = Lit::make(type.getShape(), elemType);
  int64_t n = out.size();
  std::vector<std::vector<int64_t>> from;
  auto elementwise = [&]() {
    for (const Lit &lit : operands)
      from.push_back(broadcastIndices(lit.shape, type.getShape()));
  };
  auto isFloat = [](const Lit &lit) { return lit.isFloat(); };

  if (name == "iota") {
    int64_t axis = op->getAttrOfType<IntegerAttr>("iota_dimension").getInt();
    int64_t inner = 1;
    for (int64_t d = axis + 1; d < type.getRank(); ++d)
      inner *= type.getDimSize(d);
    for (int64_t k = 0; k < n; ++k) {
      int64_t i = (k / inner) % type.getDimSize(axis);
      out.set(k, (double)i, i);
    }
  } else if (name == "broadcast_in_dim") {
    Perm dims = intsOf(op, "dims");
    const Lit &x = operands[0];
    gatherInto(out, type.getShape(), x, [&](int64_t d, int64_t i,
                                            ArrayRef<int64_t> strides) {
      int64_t offset = 0;
      for (auto [src, dst] : llvm::enumerate(dims))
        if (dst == d && x.shape[src] != 1)
          offset += i * strides[src];
      return offset;
    });
  } else if (name == "reshape" || name == "convert") {
    if (name == "convert" && operands[0].isFloat() && !out.isFloat())
      return std::nullopt; // float -> int rounding: left to the graph
    for (int64_t k = 0; k < n; ++k)
      out.set(k, operands[0].getF(k), operands[0].getI(k));
  } else if (name == "transpose") {
    Perm perm = intsOf(op, "dims");
    gatherInto(out, type.getShape(), operands[0],
               [&](int64_t d, int64_t i, ArrayRef<int64_t> strides) {
                 return i * strides[perm[d]];
               });
  } else if (name == "slice") {
    Perm starts = intsOf(op, "starts"), steps = intsOf(op, "strides");
    gatherInto(out, type.getShape(), operands[0],
               [&](int64_t d, int64_t i, ArrayRef<int64_t> strides) {
                 return (starts[d] + i * steps[d]) * strides[d];
               });
  } else if (name == "compare") {
    elementwise();
    StringRef dir = op->getAttrOfType<StringAttr>("direction").getValue();
    bool floats = llvm::any_of(operands, isFloat);
    for (int64_t k = 0; k < n; ++k) {
      const Lit &a = operands[0], &b = operands[1];
      int c;
      if (floats) {
        double x = a.getF(from[0][k]), y = b.getF(from[1][k]);
        if (std::isnan(x) || std::isnan(y))
          c = 2; // unordered
        else
          c = x < y ? -1 : x > y ? 1 : 0;
      } else {
        int64_t x = a.getI(from[0][k]), y = b.getI(from[1][k]);
        c = x < y ? -1 : x > y ? 1 : 0;
      }
      bool r = dir == "EQ"   ? c == 0
               : dir == "NE" ? c != 0
               : dir == "LT" ? c == -1
               : dir == "LE" ? (c == -1 || c == 0)
               : dir == "GT" ? c == 1
                             : (c == 1 || c == 0);
      out.set(k, r, r);
    }
  } else if (name == "select") {
    elementwise();
    for (int64_t k = 0; k < n; ++k) {
      const Lit &pick = operands[0].getI(from[0][k]) ? operands[1] : operands[2];
      int64_t i = operands[0].getI(from[0][k]) ? from[1][k] : from[2][k];
      out.set(k, pick.getF(i), pick.getI(i));
    }
  } else {
    // Arithmetic, elementwise.
    elementwise();
    bool floats = out.isFloat();
    for (int64_t k = 0; k < n; ++k) {
      auto f = [&](int a) { return operands[a].getF(from[a][k]); };
      auto i = [&](int a) { return operands[a].getI(from[a][k]); };
      double fr = 0;
      int64_t ir = 0;
      if (name == "add") {
        fr = f(0) + f(1);
        ir = (int64_t)((uint64_t)i(0) + (uint64_t)i(1));
      } else if (name == "subtract") {
        fr = f(0) - f(1);
        ir = (int64_t)((uint64_t)i(0) - (uint64_t)i(1));
      } else if (name == "multiply") {
        fr = f(0) * f(1);
        ir = (int64_t)((uint64_t)i(0) * (uint64_t)i(1));
      } else if (name == "divide") {
        fr = f(0) / f(1);
        if (!floats && (i(1) == 0 || (i(1) == -1 && i(0) == INT64_MIN)))
          return std::nullopt;
        ir = floats ? 0 : i(0) / i(1);
      } else if (name == "maximum") {
        fr = std::isnan(f(0)) || std::isnan(f(1)) ? NAN : std::max(f(0), f(1));
        ir = std::max(i(0), i(1));
      } else if (name == "minimum") {
        fr = std::isnan(f(0)) || std::isnan(f(1)) ? NAN : std::min(f(0), f(1));
        ir = std::min(i(0), i(1));
      } else if (name == "and") {
        ir = i(0) & i(1);
      } else if (name == "or") {
        ir = i(0) | i(1);
      } else if (name == "xor") {
        ir = i(0) ^ i(1);
      } else if (name == "not") {
        ir = elemType.isInteger(1) ? !i(0) : ~i(0);
      } else if (name == "negate") {
        fr = -f(0);
        ir = (int64_t)(0 - (uint64_t)i(0));
      } else if (name == "abs") {
        fr = std::fabs(f(0));
        ir = i(0) < 0 ? (int64_t)(0 - (uint64_t)i(0)) : i(0);
      } else if (floats && name == "exponential") {
        fr = std::exp(f(0));
      } else if (floats && name == "log") {
        fr = std::log(f(0));
      } else if (floats && name == "sqrt") {
        fr = std::sqrt(f(0));
      } else if (floats && name == "rsqrt") {
        fr = 1.0 / std::sqrt(f(0));
      } else if (floats && name == "power") {
        fr = std::pow(f(0), f(1));
      } else if (floats && name == "tanh") {
        fr = std::tanh(f(0));
      } else if (floats && name == "floor") {
        fr = std::floor(f(0));
      } else if (floats && name == "ceil") {
        fr = std::ceil(f(0));
      } else {
        return std::nullopt;
      }
      out.set(k, fr, ir);
    }
  }
  out.normalize();
  return out;
}

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

Value Importer::broadcastInDim(Value x, ArrayRef<int64_t> dims,
                               RankedTensorType resultType) {
  Value value = lazy(x);
  // Operand axes in result order.
  Perm order(dims.size());
  std::iota(order.begin(), order.end(), 0);
  llvm::stable_sort(order, [&](int64_t a, int64_t b) {
    return dims[a] < dims[b];
  });
  value = composedTranspose(value, order);
  auto have = rankedOf(value);
  Shape shape(resultType.getRank(), 1);
  for (auto [k, src] : llvm::enumerate(order))
    shape[dims[src]] = have.getDimSize(k);
  return composedReshape(value, shape);
}

/// `value` transposed by `perm` with its unit axes dropped first (they move
/// no element): a query given a unit group axis ([B, S, H, 1, D], XLA's
/// dot_product_attention) reaches the product through the plain
/// [B, S, H, D] -> [B, H, S, D] transpose the fusion reads as `bshd`.
Value Importer::laidOut(Value value, ArrayRef<int64_t> perm) {
  auto type = rankedOf(value);
  Shape squeezed;
  Perm renumber(type.getRank(), -1);
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (type.getDimSize(d) != 1) {
      renumber[d] = squeezed.size();
      squeezed.push_back(type.getDimSize(d));
    }
  if ((int64_t)squeezed.size() == type.getRank())
    return composedTranspose(value, perm);
  Perm squeezedPerm;
  for (int64_t p : perm)
    if (renumber[p] >= 0)
      squeezedPerm.push_back(renumber[p]);
  return composedTranspose(composedReshape(value, squeezed), squeezedPerm);
}

/// Whether `value` is (a conversion of) a quotient or product one of whose
/// operands is (a broadcast of) a reduction: probabilities, a softmax's
/// exponentials divided by their row sums.
static bool normalizedBySum(Value value) {
  Operation *op = value.getDefiningOp();
  while (op && opName(op) == "convert" && op->getNumOperands() == 1)
    op = op->getOperand(0).getDefiningOp();
  if (!op || (opName(op) != "divide" && opName(op) != "multiply"))
    return false;
  return llvm::any_of(op->getOperands(), [](Value operand) {
    Operation *inner = operand.getDefiningOp();
    while (inner && inner->getNumOperands() == 1 &&
           (opName(inner) == "broadcast_in_dim" || opName(inner) == "reshape" ||
            opName(inner) == "convert"))
      inner = inner->getOperand(0).getDefiningOp();
    return inner && opName(inner) == "reduce";
  });
}

Value Importer::dotGeneral(Operation *op) {
  Value lhs = op->getOperand(0), rhs = op->getOperand(1);
  auto lt = cast<RankedTensorType>(lhs.getType());
  auto rt = cast<RankedTensorType>(rhs.getType());
  auto resultType = cast<RankedTensorType>(op->getResult(0).getType());
  Perm lb = intsOf(op, "lhs_batch"), rb = intsOf(op, "rhs_batch");
  Perm lc = intsOf(op, "lhs_contract"), rc = intsOf(op, "rhs_contract");
  if (lb.size() != rb.size() || lc.size() != rc.size()) {
    error() << "batch or contracting dimensions differ in number";
    return {};
  }
  if (lt.getElementType() != rt.getElementType()) {
    error() << "operands of different element types (" << lt.getElementType()
            << ", " << rt.getElementType() << ")";
    return {};
  }
  auto freeOf = [](int64_t rank, ArrayRef<int64_t> batch,
                   ArrayRef<int64_t> contract) {
    Perm free;
    for (int64_t d = 0; d < rank; ++d)
      if (!llvm::is_contained(batch, d) && !llvm::is_contained(contract, d))
        free.push_back(d);
    return free;
  };
  Perm lf = freeOf(lt.getRank(), lb, lc), rf = freeOf(rt.getRank(), rb, rc);
  int64_t nbatch = lb.size(), nlf = lf.size(), nrf = rf.size();

  // Where the result's axes end up: through the one transpose that uses it,
  // if that is its only user. `final[k]` is the result axis that becomes
  // axis k.
  Perm final(resultType.getRank());
  std::iota(final.begin(), final.end(), 0);
  if (op->getResult(0).hasOneUse() && opName(*op->user_begin()) == "transpose")
    final = intsOf(*op->user_begin(), "dims");
  // The product is written so that the axis which ends up innermost is its
  // column: attention's P·V comes out with P on the left wherever JAX wrote
  // `dot_general(V, P)`, and QKᵀ with Q on the left where it wrote K first.
  int64_t last = final.empty() ? -1 : final.back();
  bool swap = nlf > 0 && last >= nbatch && last < nbatch + nlf;
  // Free axes in the order they end up in, so that the transpose after the
  // product composes away.
  auto finalOrder = [&](Perm freeDims, int64_t firstResultAxis) {
    Perm order(freeDims.size());
    std::iota(order.begin(), order.end(), 0);
    auto position = [&](int64_t k) {
      return llvm::find(final, firstResultAxis + k) - final.begin();
    };
    llvm::stable_sort(order, [&](int64_t x, int64_t y) {
      return position(x) < position(y);
    });
    Perm sorted;
    for (int64_t k : order)
      sorted.push_back(freeDims[k]);
    return std::make_pair(sorted, order);
  };
  auto [lfSorted, lfOrder] = finalOrder(lf, nbatch);
  auto [rfSorted, rfOrder] = finalOrder(rf, nbatch + nlf);
  // The left operand keeps its own order of free axes where it is laid out
  // [batch, free, contracted] already (P, straight from the softmax): its
  // rows are then read without a transpose.
  auto inPlace = [](ArrayRef<int64_t> batchDims, ArrayRef<int64_t> freeDims,
                    ArrayRef<int64_t> contractDims) {
    Perm all(batchDims);
    all.append(freeDims.begin(), freeDims.end());
    all.append(contractDims.begin(), contractDims.end());
    return llvm::equal(all, llvm::seq<int64_t>(0, all.size()));
  };
  auto natural = [](ArrayRef<int64_t> freeDims) {
    Perm order(freeDims.size());
    std::iota(order.begin(), order.end(), 0);
    return std::make_pair(Perm(freeDims), order);
  };
  // Where the rows have two axes over one column axis, the outer row axis
  // becomes a batch axis (below): it must be the heads, outer in the
  // scores' layout. That is the product's own layout for Q·Kᵀ (MQA's
  // `bqhd,bkd->bhqk` puts the heads first, Q laid out [b, q, h, d]), and
  // the probabilities' layout for P·V.
  bool twoRowAxes = nbatch > 0 && (swap ? nrf == 2 && nlf == 1
                                        : nlf == 2 && nrf == 1);
  auto keepsOwnRows = [&](Value rows) {
    return !twoRowAxes || normalizedBySum(rows);
  };
  if (!swap && keepsOwnRows(lhs) && inPlace(lb, lf, lc))
    std::tie(lfSorted, lfOrder) = natural(lf);
  if (swap && keepsOwnRows(rhs) && inPlace(rb, rf, rc))
    std::tie(rfSorted, rfOrder) = natural(rf);

  Value a = lhs, b = rhs;
  Perm ab = lb, ac = lc, af = lfSorted, bb = rb, bc = rc, bf = rfSorted;
  // The axis of dot_general's result ([batch, lhs free, rhs free]) that
  // each sorted free axis becomes.
  Perm afResult, bfResult;
  for (int64_t k : lfOrder)
    afResult.push_back(nbatch + k);
  for (int64_t k : rfOrder)
    bfResult.push_back(nbatch + nlf + k);
  if (swap) {
    std::swap(a, b);
    std::swap(ab, bb);
    std::swap(ac, bc);
    std::swap(af, bf);
    std::swap(afResult, bfResult);
  }
  Value ta = full(a), tb = full(b);
  if (!ta || !tb)
    return {};
  auto sizes = [](Value v, ArrayRef<int64_t> dims) {
    auto t = cast<RankedTensorType>(v.getType());
    Shape s;
    for (int64_t d : dims)
      s.push_back(t.getDimSize(d));
    return s;
  };
  Perm batchResult(nbatch);
  std::iota(batchResult.begin(), batchResult.end(), 0);
  // Column axes that end up before every row axis (the batch of the inputs
  // where latent queries without one attend over them, `lhd,bshd->bhls`)
  // become batch axes, the rows repeated over them: the product is then
  // batched as the scores are laid out.
  auto position = [&](int64_t resultAxis) {
    return llvm::find(final, resultAxis) - final.begin();
  };
  Perm promoted;
  if (!af.empty()) {
    int64_t firstRow = position(afResult.front());
    for (int64_t r : afResult)
      firstRow = std::min<int64_t>(firstRow, position(r));
    for (auto [i, r] : llvm::enumerate(bfResult))
      if (position(r) < firstRow)
        promoted.push_back(i);
  }
  int64_t repeats = 1;
  for (int64_t i : promoted)
    repeats *= sizes(tb, {bf[i]}).front();
  if (!promoted.empty() && promoted.size() < bf.size() &&
      repeats * rankedOf(ta).getNumElements() <= kFoldLimit * 16) {
    llvm::stable_sort(promoted, [&](int64_t x, int64_t y) {
      return position(bfResult[x]) < position(bfResult[y]);
    });
    int64_t np = promoted.size();
    Shape unit(np, 1), multiples;
    unit.append(rankedOf(ta).getShape().begin(), rankedOf(ta).getShape().end());
    for (int64_t i : promoted)
      multiples.push_back(sizes(tb, {bf[i]}).front());
    multiples.append(rankedOf(ta).getRank(), 1);
    ta = tile(reshape(ta, unit), multiples);
    auto shifted = [&](ArrayRef<int64_t> dims) {
      Perm out;
      for (int64_t d : dims)
        out.push_back(d + np);
      return out;
    };
    Perm newAb(llvm::seq<int64_t>(0, np).begin(), llvm::seq<int64_t>(0, np).end());
    Perm oldAb = shifted(ab);
    newAb.append(oldAb.begin(), oldAb.end());
    ab = newAb;
    af = shifted(af);
    ac = shifted(ac);
    Perm newBb, newBf, newBfResult, newBatchResult;
    for (int64_t i : promoted) {
      newBb.push_back(bf[i]);
      newBatchResult.push_back(bfResult[i]);
    }
    newBb.append(bb.begin(), bb.end());
    newBatchResult.append(batchResult.begin(), batchResult.end());
    for (auto [i, d] : llvm::enumerate(bf))
      if (!llvm::is_contained(promoted, int64_t(i))) {
        newBf.push_back(d);
        newBfResult.push_back(bfResult[i]);
      }
    bb = newBb;
    bf = newBf;
    bfResult = newBfResult;
    batchResult = newBatchResult;
  }
  Shape batch = sizes(ta, ab), rows = sizes(ta, af), cols = sizes(tb, bf),
        inner = sizes(ta, ac);
  if (sizes(tb, bb) != batch || sizes(tb, bc) != inner) {
    error() << "batch or contracting sizes differ";
    return {};
  }
  Perm pa(ab), pb(bb);
  pa.append(af);
  pa.append(ac);
  pb.append(bc);
  pb.append(bf);
  int64_t nb = product(batch), k = product(inner), n = product(cols);
  Type elemType = lt.getElementType();
  Value zp = zeroPoint(elemType);
  Value a3, b3;
  int64_t groups = 1;
  if (!ab.empty() && rows.size() == 2 && cols.size() == 1 && rows[0] > 1 &&
      rows[1] > 1) {
    // Rows of two axes over one shared right side (GQA written with a group
    // axis: queries [.., G, S, D] over keys [.., S, D]): the outer row axis
    // becomes a batch axis and the right side is repeated over it, the
    // KV-head repeat the fusion reads as GQA.
    groups = rows[0];
    Shape repeated(batch);
    repeated.push_back(1);
    repeated.push_back(k);
    repeated.push_back(n);
    Shape multiples(repeated.size(), 1);
    multiples[batch.size()] = groups;
    a3 = composedReshape(composedTranspose(ta, pa), {nb * groups, rows[1], k});
    Value b4 = composedReshape(composedTranspose(tb, pb), repeated);
    b3 = b4 ? reshape(tile(b4, multiples), {nb * groups, k, n}) : Value();
  } else {
    int64_t m = product(rows);
    a3 = composedReshape(laidOut(ta, pa), {nb, m, k});
    b3 = composedReshape(laidOut(tb, pb), {nb, k, n});
  }
  if (!a3 || !b3)
    return {};
  auto a3Type = rankedOf(a3);
  Value mm = create1("tosa.matmul", {a3, b3, zp, zp},
                     RankedTensorType::get({a3Type.getDimSize(0),
                                            a3Type.getDimSize(1), n},
                                           elemType));
  Shape shape(batch);
  shape.append(rows);
  shape.append(cols);
  Value result = reshape(mm, shape);
  // Back to dot_general's [batch, lhs free, rhs free]: result axis k is
  // the product's axis where `laid` holds k.
  Perm laid(batchResult);
  laid.append(afResult);
  laid.append(bfResult);
  Perm perm;
  for (int64_t axis = 0; axis < (int64_t)laid.size(); ++axis)
    perm.push_back(llvm::find(laid, axis) - laid.begin());
  result = composedTranspose(result, perm);
  return castTo(result, resultType.getElementType());
}

Value Importer::stridedSlice(Operation *op) {
  Perm starts = intsOf(op, "starts"), strides = intsOf(op, "strides");
  auto resultType = cast<RankedTensorType>(op->getResult(0).getType());
  Value x = full(op->getOperand(0));
  // Each strided axis (RoPE's x[..., ::2]) is split into [n / k, k] and the
  // slice takes one column of the inner axis: the same elements, and TOSA
  // has no strided slice.
  for (int64_t axis = (int64_t)strides.size() - 1; axis >= 0; --axis) {
    int64_t stride = strides[axis];
    if (stride == 1)
      continue;
    auto type = rankedOf(x);
    int64_t size = type.getDimSize(axis), count = resultType.getDimSize(axis);
    if (stride <= 0 || size % stride != 0 ||
        starts[axis] / stride + count > size / stride) {
      error() << "a slice with stride " << stride << " over " << size
              << " elements is not supported";
      return {};
    }
    Shape split(type.getShape());
    split[axis] = size / stride;
    split.insert(split.begin() + axis + 1, stride);
    Shape begin(split.size(), 0), sizes(split);
    begin[axis] = starts[axis] / stride;
    sizes[axis] = count;
    begin[axis + 1] = starts[axis] % stride;
    sizes[axis + 1] = 1;
    Value picked = slice(reshape(x, split), begin, sizes);
    Shape merged(type.getShape());
    merged[axis] = count;
    x = reshape(picked, merged);
    starts[axis] = 0;
  }
  return slice(x, starts, resultType.getShape());
}

Value Importer::reduce(Operation *op) {
  if (op->getNumOperands() != 2) {
    error() << "a reduction of several tensors at once is not supported";
    return {};
  }
  StringRef reducer;
  if (auto applies = op->getAttrOfType<StringAttr>("applies")) {
    reducer = applies.getValue();
  } else {
    Block &body = op->getRegion(0).front();
    Operation *first = &body.front();
    if (body.getOperations().size() != 2 || first->getNumOperands() != 2 ||
        first->getOperand(0) != body.getArgument(0) ||
        first->getOperand(1) != body.getArgument(1)) {
      error() << "the reducer is not one op of its two arguments";
      return {};
    }
    reducer = first->getName().getStringRef();
  }
  reducer.consume_front("stablehlo.");
  StringRef tosaName;
  double identity;
  if (reducer == "add")
    tosaName = "tosa.reduce_sum", identity = 0;
  else if (reducer == "maximum")
    tosaName = "tosa.reduce_max", identity = -INFINITY;
  else if (reducer == "minimum")
    tosaName = "tosa.reduce_min", identity = INFINITY;
  else if (reducer == "multiply")
    tosaName = "tosa.reduce_product", identity = 1;
  else {
    error() << "reduction by '" << reducer << "' is not supported";
    return {};
  }
  Value x = full(op->getOperand(0));
  Perm dims = intsOf(op, "dims");
  llvm::sort(dims);
  for (int64_t d : llvm::reverse(dims))
    x = GraphBuilder::reduce(tosaName, x, d);
  auto resultType = cast<RankedTensorType>(op->getResult(0).getType());
  Value result = reshape(x, resultType.getShape());
  std::optional<Lit> init = constantOf(op->getOperand(1));
  // An init that is the reduction's identity changes nothing; another is
  // combined with the result.
  bool isIdentity = init && init->size() == 1 &&
                    (init->isFloat() ? init->getF(0) == identity
                                     : std::isfinite(identity) &&
                                           init->getI(0) == (int64_t)identity);
  if (isIdentity)
    return result;
  StringRef combine = reducer == "add"       ? "tosa.add"
                      : reducer == "maximum" ? "tosa.maximum"
                      : reducer == "minimum" ? "tosa.minimum"
                                             : "tosa.mul";
  return GraphBuilder::elementwise(combine, {result, lazy(op->getOperand(1))},
                                   resultType.getElementType());
}

Value Importer::compare(Operation *op) {
  StringRef dir = op->getAttrOfType<StringAttr>("direction").getValue();
  if (auto type = op->getAttrOfType<StringAttr>("compare_type"))
    if (type.getValue() == "TOTALORDER") {
      error() << "TOTALORDER comparisons are not supported";
      return {};
    }
  Value a = lazy(op->getOperand(0)), b = lazy(op->getOperand(1));
  Type i1 = builder.getI1Type();
  if (dir == "LT" || dir == "LE")
    std::swap(a, b);
  StringRef name = dir == "EQ" || dir == "NE"   ? "tosa.equal"
                   : dir == "GE" || dir == "LE" ? "tosa.greater_equal"
                                                : "tosa.greater";
  Value result = GraphBuilder::elementwise(name, {a, b}, i1);
  if (result && dir == "NE")
    result = unary("tosa.logical_not", result);
  return result;
}

Value Importer::elementwise(Operation *op) {
  StringRef name = opName(op);
  auto resultType = cast<RankedTensorType>(op->getResult(0).getType());
  Type elemType = resultType.getElementType();
  bool isFloat = isa<FloatType>(elemType), isBool = elemType.isInteger(1);
  SmallVector<Value> xs;
  for (Value v : op->getOperands())
    xs.push_back(lazy(v));
  static const std::pair<StringRef, StringRef> binary[] = {
      {"add", "tosa.add"},         {"subtract", "tosa.sub"},
      {"maximum", "tosa.maximum"}, {"minimum", "tosa.minimum"},
      {"power", "tosa.pow"},
  };
  for (auto [hlo, tosa] : binary)
    if (name == hlo)
      return GraphBuilder::elementwise(tosa, xs, elemType);
  if (name == "multiply")
    return GraphBuilder::elementwise("tosa.mul", xs, elemType);
  if (name == "divide") {
    if (isFloat)
      return GraphBuilder::elementwise(
          "tosa.mul", {xs[0], unary("tosa.reciprocal", xs[1])}, elemType);
    return GraphBuilder::elementwise("tosa.intdiv", xs, elemType);
  }
  if (name == "and" || name == "or" || name == "xor") {
    std::string tosa = (Twine(isBool ? "tosa.logical_" : "tosa.bitwise_") +
                        name)
                           .str();
    return GraphBuilder::elementwise(tosa, xs, elemType);
  }
  if (name == "not")
    return unary(isBool ? "tosa.logical_not" : "tosa.bitwise_not", xs[0]);
  if (name == "select")
    return GraphBuilder::elementwise("tosa.select", xs, elemType);
  if (name == "clamp") {
    // clamp(lo, x, hi) = min(max(x, lo), hi)
    Value low = GraphBuilder::elementwise("tosa.maximum", {xs[1], xs[0]},
                                          elemType);
    return low ? GraphBuilder::elementwise("tosa.minimum", {low, xs[2]},
                                           elemType)
               : Value();
  }
  if (name == "convert")
    return castTo(xs[0], elemType);
  if (name == "negate") {
    Value zp = zeroPoint(elemType);
    return create1("tosa.negate", {xs[0], zp, zp}, xs[0].getType());
  }
  if (name == "sqrt" && isFloat)
    return unary("tosa.reciprocal", unary("tosa.rsqrt", xs[0]));
  static const std::pair<StringRef, StringRef> unaryOps[] = {
      {"exponential", "tosa.exp"}, {"log", "tosa.log"},
      {"rsqrt", "tosa.rsqrt"},     {"tanh", "tosa.tanh"},
      {"logistic", "tosa.sigmoid"}, {"abs", "tosa.abs"},
      {"floor", "tosa.floor"},     {"ceil", "tosa.ceil"},
      {"sine", "tosa.sin"},        {"cosine", "tosa.cos"},
  };
  for (auto [hlo, tosa] : unaryOps)
    if (name == hlo && (isFloat || name == "abs"))
      return unary(tosa, xs[0]);
  Value opaque;
  if (failed(keepOpaque(op, &opaque)))
    return {};
  return opaque;
}

LogicalResult Importer::keepOpaque(Operation *op, Value *single) {
  for (Value result : op->getResults()) {
    auto type = dyn_cast<RankedTensorType>(result.getType());
    if (!type || !type.hasStaticShape())
      return error() << "dynamic shapes are not supported";
  }
  SmallVector<Value> operands;
  for (Value v : op->getOperands()) {
    if (!lazy(v))
      return error() << "an operand was not imported";
    operands.push_back(full(v));
  }
  // An op the fusion need not see through (a gather, a loop, a custom
  // call): its results are values the graph computes some other way.
  Operation *opaque = create(("hlo_opaque." + opName(op)).str(), operands,
                             op->getResultTypes(), op->getAttrs());
  emitWarning(loc) << "'" << op->getName() << "' is kept opaque";
  for (auto [from, to] : llvm::zip(op->getResults(), opaque->getResults()))
    values[from] = to;
  if (single)
    *single = opaque->getResult(0);
  else if (op->getNumResults() == 1)
    nameValue(op, opaque->getResult(0));
  return success();
}

bool Importer::logicalIdentity(Operation *op, bool isAnd, Value &result) {
  // and(x, true) and or(x, false) are x (XLA's attention ands its causal
  // mask with a mask of all true).
  auto resultType = cast<RankedTensorType>(op->getResult(0).getType());
  for (int k = 0; k < 2; ++k) {
    std::optional<Lit> c = constantOf(op->getOperand(k));
    Value other = lazy(op->getOperand(1 - k));
    if (c && c->size() == 1 && (c->getI(0) != 0) == isAnd &&
        rankedOf(other).getRank() == resultType.getRank()) {
      result = other;
      return true;
    }
  }
  return false;
}

bool Importer::selectOfBooleans(Operation *op, Value &result) {
  std::optional<Lit> onTrue = constantOf(op->getOperand(1));
  std::optional<Lit> onFalse = constantOf(op->getOperand(2));
  if (!onTrue || !onFalse || onTrue->size() != 1 || onFalse->size() != 1 ||
      onTrue->getI(0) == onFalse->getI(0))
    return false;
  // select(p, true, false) is p; select(p, false, true) is not p (jnp.tril
  // of a matrix of ones: its mask where the ones were).
  Value predicate = lazy(op->getOperand(0));
  auto resultType = cast<RankedTensorType>(op->getResult(0).getType());
  if (rankedOf(predicate).getRank() != resultType.getRank())
    return false;
  result = onTrue->getI(0) ? predicate : unary("tosa.logical_not", predicate);
  return true;
}

LogicalResult Importer::convertOp(Operation *op, Value &result) {
  StringRef name = opName(op);
  auto resultType = cast<RankedTensorType>(op->getResult(0).getType());
  if (name == "constant") {
    auto attr = dyn_cast<DenseElementsAttr>(op->getAttr("value"));
    if (!attr)
      return error() << "the constant is not a dense tensor";
    result = constant(attr);
    return success();
  }
  if (name == "iota") {
    // Too large to fold whole: the index vector along its axis, unit axes
    // elsewhere (a lazy broadcast).
    int64_t axis = op->getAttrOfType<IntegerAttr>("iota_dimension").getInt();
    int64_t size = resultType.getDimSize(axis);
    if (size > kFoldLimit)
      return error() << "an iota of " << size << " positions along one axis "
                     << "is not supported";
    Shape shape(resultType.getRank(), 1);
    shape[axis] = size;
    Lit index = Lit::make(shape, resultType.getElementType());
    for (int64_t i = 0; i < size; ++i)
      index.set(i, (double)i, i);
    result = constant(index.toAttr());
    return success();
  }
  if (name == "broadcast_in_dim") {
    result = broadcastInDim(op->getOperand(0), intsOf(op, "dims"), resultType);
  } else if (name == "reshape") {
    result = composedReshape(full(op->getOperand(0)), resultType.getShape());
  } else if (name == "transpose") {
    result = composedTranspose(lazy(op->getOperand(0)), intsOf(op, "dims"));
  } else if (name == "dot_general" || name == "dot") {
    result = dotGeneral(op);
  } else if (name == "reduce") {
    result = reduce(op);
  } else if (name == "compare") {
    result = compare(op);
  } else if (name == "slice") {
    result = stridedSlice(op);
  } else if (name == "concatenate") {
    SmallVector<Value> parts;
    for (Value v : op->getOperands())
      parts.push_back(full(v));
    result = create1("tosa.concat", parts, resultType,
                     {builder.getNamedAttr(
                         "axis", builder.getI32IntegerAttr(
                                     intsOf(op, "dims").front()))});
  } else if (name == "select" && resultType.getElementType().isInteger(1) &&
             selectOfBooleans(op, result)) {
    return success();
  } else if ((name == "and" || name == "or") &&
             resultType.getElementType().isInteger(1) &&
             logicalIdentity(op, name == "and", result)) {
    return success();
  } else if (name == "maximum" && op->getNumOperands() == 2) {
    // max(x, -inf) is x, NaN included: JAX's softmax writes it.
    for (int k = 0; k < 2; ++k) {
      std::optional<Lit> c = constantOf(op->getOperand(k));
      Value other = op->getOperand(1 - k);
      if (c && c->isFloat() && c->size() == 1 && c->getF(0) == -INFINITY &&
          other.getType() == resultType) {
        result = lazy(other);
        return success();
      }
    }
    result = elementwise(op);
  } else {
    result = elementwise(op);
  }
  return success(result != nullptr);
}

LogicalResult Importer::convert(Operation *op) {
  current = op;
  loc = op->getLoc();
  if (op->getNumResults() != 1 ||
      (op->getNumRegions() && !opName(op).starts_with("reduce")))
    return keepOpaque(op);
  auto resultType = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  if (!resultType || !resultType.hasStaticShape())
    return error() << "dynamic shapes are not supported";
  for (Value v : op->getOperands())
    if (!lazy(v))
      return error() << "an operand was not imported";

  // Operands that are all constants (at their full shapes) fold.
  StringRef name = opName(op);
  SmallVector<Lit> lits, lazyLits;
  for (Value v : op->getOperands()) {
    std::optional<Lit> lit = constantOf(v);
    if (!lit)
      break;
    lazyLits.push_back(*lit);
    auto type = cast<RankedTensorType>(v.getType());
    if (type.getNumElements() > kFoldLimit)
      continue;
    lits.push_back(lit->shape == type.getShape() ? std::move(*lit)
                                                 : expand(*lit, type.getShape()));
  }
  // A broadcast stays lazy (a reshape of the constant), so that splats and
  // masks reach the fusion in their own shapes.
  if (lits.size() == op->getNumOperands() && name != "constant" &&
      name != "broadcast_in_dim" && name != "reduce" &&
      name != "dot_general" && name != "dot")
    if (std::optional<Lit> folded = fold(op, lits)) {
      Value result = constant(folded->toAttr());
      values[op->getResult(0)] = result;
      // Folded, it is still the function's value (an ALiBi bias computed
      // from iota and constants): named, a site can read it by its name.
      nameValue(op, result, /*folded=*/true);
      return success();
    }
  // An elementwise op of constants too large to fold at its own shape
  // (index arithmetic on a large iota: a causal mask of thousands of
  // positions) folds at the shape its lazy operands broadcast to, and
  // stays lazy: a row index [S, 1] plus an offset is still [S, 1].
  if (lazyLits.size() == op->getNumOperands() && isLazyElementwise(name)) {
    FailureOr<Shape> shape = Shape(lazyLits.front().shape);
    for (const Lit &lit : lazyLits)
      if (succeeded(shape))
        shape = broadcastShape(*shape, lit.shape);
    if (succeeded(shape))
      if (std::optional<Lit> folded = fold(op, lazyLits, ArrayRef(*shape))) {
        values[op->getResult(0)] = constant(folded->toAttr());
        return success();
      }
  }

  Value result;
  if (failed(convertOp(op, result)))
    return failure();
  values[op->getResult(0)] = result;
  nameValue(op, result);
  return success();
}

/// The name a StableHLO op's location gives it (JAX's name stack and
/// primitive, "jit(f)/attn/dot_general"), if any.
static std::optional<StringRef> locationName(Location loc) {
  if (auto named = dyn_cast<NameLoc>(loc))
    return named.getName().getValue();
  if (auto call = dyn_cast<CallSiteLoc>(loc))
    return locationName(call.getCallee());
  if (auto fused = dyn_cast<FusedLoc>(loc))
    for (Location inner : fused.getLocations())
      if (std::optional<StringRef> name = locationName(inner))
        return name;
  return std::nullopt;
}

/// An op JAX writes for another op's operand under that op's location: a
/// constant, the broadcast of a scalar (`1.0 - x` broadcasts its 1.0), or
/// a broadcast used only by ops of its own location (`x + bias` broadcasts
/// the bias under the add's). It names no value of its own.
static bool isHelper(Operation &op) {
  if (op.hasTrait<OpTrait::ConstantLike>() || opName(&op) == "constant")
    return true;
  if (opName(&op) != "broadcast_in_dim" || op.getNumOperands() != 1)
    return false;
  auto type = dyn_cast<ShapedType>(op.getOperand(0).getType());
  if (type && type.hasRank() && type.getRank() == 0)
    return true;
  std::optional<StringRef> name = locationName(op.getLoc());
  if (!name || op.getResult(0).use_empty())
    return false;
  return llvm::all_of(op.getResult(0).getUsers(), [&](Operation *user) {
    return locationName(user->getLoc()) == name;
  });
}

void Importer::countNames(Block &body) {
  for (Operation &op : body.without_terminator())
    if (!isHelper(op))
      if (std::optional<StringRef> name = locationName(op.getLoc()))
        ++nameCounts[*name];
}

void Importer::nameValue(Operation *op, Value result, bool folded) {
  if (isHelper(*op))
    return;
  std::optional<StringRef> name = locationName(op->getLoc());
  Operation *producer = result.getDefiningOp();
  if (!name || nameCounts.lookup(*name) != 1 || !producer ||
      producer->getNumResults() != 1 ||
      producer->hasAttr(kOnnxValueAttrName) ||
      (!folded && producer->hasTrait<OpTrait::ConstantLike>()) ||
      result.getType() != op->getResult(0).getType())
    return;
  producer->setAttr(kOnnxValueAttrName, builder.getStringAttr(*name));
}

//===----------------------------------------------------------------------===//
// Module
//===----------------------------------------------------------------------===//

LogicalResult Importer::inlineCalls(func::FuncOp main, ModuleOp input) {
  // Calls are inlined until none is left; a call chain deeper than this is
  // taken for recursion.
  for (int round = 0; round < 64; ++round) {
    SmallVector<func::CallOp> calls;
    main.walk([&](func::CallOp call) { calls.push_back(call); });
    if (calls.empty())
      return success();
    for (func::CallOp call : calls) {
      auto callee = input.lookupSymbol<func::FuncOp>(call.getCallee());
      if (!callee || callee.isExternal())
        return emitError(call.getLoc())
               << "call to '" << call.getCallee()
               << "', which the module does not define";
      Block &body = callee.getBody().front();
      IRMapping mapping;
      for (auto [arg, operand] :
           llvm::zip(body.getArguments(), call.getOperands()))
        mapping.map(arg, operand);
      OpBuilder b(call);
      for (Operation &op : body.without_terminator())
        b.clone(op, mapping);
      Operation *ret = body.getTerminator();
      for (auto [result, value] :
           llvm::zip(call.getResults(), ret->getOperands()))
        result.replaceAllUsesWith(mapping.lookupOrDefault(value));
      call.erase();
    }
  }
  return emitError(main.getLoc()) << "calls nested more than 64 deep";
}

OwningOpRef<ModuleOp> Importer::run(ModuleOp input) {
  auto source = input.lookupSymbol<func::FuncOp>("main");
  if (!source || source.isExternal() || source.isPrivate()) {
    emitError(input.getLoc()) << "the StableHLO module has no public 'main'";
    return nullptr;
  }
  // Work on a copy: the input module keeps its calls.
  OwningOpRef<func::FuncOp> main(source.clone());
  if (failed(inlineCalls(*main, input)))
    return nullptr;
  Block &body = main->getBody().front();

  OwningOpRef<ModuleOp> module(ModuleOp::create(input.getLoc()));
  builder.setInsertionPointToEnd(module->getBody());
  auto func = func::FuncOp::create(builder, source.getLoc(), "main",
                                   source.getFunctionType());
  Block *entry = func.addEntryBlock();
  builder.setInsertionPointToEnd(entry);
  for (auto [k, arg] : llvm::enumerate(body.getArguments())) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type || !type.hasStaticShape()) {
      emitError(arg.getLoc()) << "argument " << k
                              << " has a dynamic shape, which is not supported";
      return nullptr;
    }
    values[arg] = entry->getArgument(k);
    std::string name = "arg" + std::to_string(k);
    if (auto named = dyn_cast<NameLoc>(arg.getLoc()))
      name = named.getName().str();
    func.setArgAttr(k, "onnx.name", builder.getStringAttr(name));
  }
  countNames(body);
  for (Operation &op : body.without_terminator())
    if (failed(convert(&op)))
      return nullptr;
  Operation *ret = body.getTerminator();
  loc = ret->getLoc();
  current = nullptr;
  SmallVector<Value> results;
  for (Value v : ret->getOperands())
    results.push_back(full(v));
  func::ReturnOp::create(builder, loc, results);

  // Ops left without users (the inner transposes of a composed pair, ...).
  bool changed = true;
  while (changed) {
    changed = false;
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(*entry)))
      if (op.use_empty() && isMemoryEffectFree(&op) &&
          !op.hasTrait<OpTrait::IsTerminator>()) {
        op.erase();
        changed = true;
      }
  }
  if (failed(verify(*module)))
    return nullptr;
  return module;
}

} // namespace

void mlir::kiln::loadStableHLOReader(MLIRContext *ctx) {
  ctx->getOrLoadDialect<ReaderDialect>();
  ctx->getOrLoadDialect<ChloReaderDialect>();
}

std::optional<std::string> mlir::kiln::repackBooleanHex(StringRef text) {
  static constexpr StringLiteral kOpen = "dense<\"0x";
  std::string out;
  size_t copied = 0, at = 0;
  auto hexValue = [](char c) -> int {
    if (c >= '0' && c <= '9')
      return c - '0';
    if (c >= 'a' && c <= 'f')
      return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
      return c - 'A' + 10;
    return -1;
  };
  while ((at = text.find(kOpen, at)) != StringRef::npos) {
    size_t hexBegin = at + kOpen.size();
    at = hexBegin;
    size_t hexEnd = text.find('"', hexBegin);
    if (hexEnd == StringRef::npos)
      break;
    // `"> : tensor<AxBxi1>` after the digits.
    StringRef rest = text.substr(hexEnd + 1);
    if (!rest.consume_front(">"))
      continue;
    rest = rest.ltrim();
    if (!rest.consume_front(":"))
      continue;
    rest = rest.ltrim();
    if (!rest.consume_front("tensor<"))
      continue;
    StringRef shape = rest.take_until([](char c) { return c == '>'; });
    if (!shape.consume_back("i1") || (!shape.empty() && !shape.consume_back("x")))
      continue;
    int64_t elements = 1;
    bool known = true;
    SmallVector<StringRef> dims;
    if (!shape.empty())
      shape.split(dims, 'x');
    for (StringRef dim : dims) {
      int64_t size;
      if (dim.getAsInteger(10, size) || size < 0) {
        known = false;
        break;
      }
      elements *= size;
    }
    size_t digits = hexEnd - hexBegin;
    if (!known || elements <= 1 || digits != size_t(2 * elements) ||
        (elements + 7) / 8 == elements)
      continue;
    // One byte an element: pack element i into bit i % 8 of byte i / 8.
    std::vector<uint8_t> packed((elements + 7) / 8, 0);
    bool valid = true;
    for (int64_t i = 0; i < elements && valid; ++i) {
      int high = hexValue(text[hexBegin + 2 * i]);
      int low = hexValue(text[hexBegin + 2 * i + 1]);
      valid = high >= 0 && low >= 0;
      if (valid && (high | low))
        packed[i / 8] |= uint8_t(1u << (i % 8));
    }
    if (!valid)
      continue;
    out.append(text.data() + copied, hexBegin - copied);
    static constexpr char kDigits[] = "0123456789ABCDEF";
    for (uint8_t byte : packed) {
      out.push_back(kDigits[byte >> 4]);
      out.push_back(kDigits[byte & 15]);
    }
    copied = hexEnd;
    at = hexEnd;
  }
  if (copied == 0)
    return std::nullopt;
  out.append(text.data() + copied, text.size() - copied);
  return out;
}

bool mlir::kiln::containsStableHLO(ModuleOp module) {
  bool found = false;
  module.walk([&](Operation *op) {
    if (isa_and_nonnull<ReaderDialect>(op->getDialect())) {
      found = true;
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return found;
}

OwningOpRef<ModuleOp> mlir::kiln::importStableHLO(ModuleOp input) {
  MLIRContext *ctx = input.getContext();
  // Ops kept opaque are of the unregistered dialect hlo_opaque.
  ctx->allowUnregisteredDialects();
  ctx->loadDialect<func::FuncDialect, tosa::TosaDialect, kiln::KilnDialect>();
  StringRef fileName = "<stablehlo>";
  if (auto file = dyn_cast<FileLineColLoc>(input.getLoc()))
    fileName = file.getFilename();
  Importer importer(ctx, fileName);
  return importer.run(input);
}

void mlir::kiln::registerStableHLOImportTranslation() {
  static TranslateToMLIRRegistration registration(
      "import-stablehlo",
      "import a StableHLO module (JAX's printed text) as TOSA",
      [](const std::shared_ptr<llvm::SourceMgr> &sourceMgr,
         MLIRContext *ctx) -> OwningOpRef<Operation *> {
        loadStableHLOReader(ctx);
        std::shared_ptr<llvm::SourceMgr> source = sourceMgr;
        const llvm::MemoryBuffer *main =
            source->getMemoryBuffer(source->getMainFileID());
        if (std::optional<std::string> repacked =
                repackBooleanHex(main->getBuffer())) {
          source = std::make_shared<llvm::SourceMgr>();
          source->AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(
                                         *repacked, main->getBufferIdentifier()),
                                     llvm::SMLoc());
        }
        OwningOpRef<ModuleOp> input =
            parseSourceFile<ModuleOp>(source, ParserConfig(ctx));
        if (!input)
          return nullptr;
        return OwningOpRef<Operation *>(importStableHLO(*input).release());
      },
      [](DialectRegistry &registry) {
        registry.insert<func::FuncDialect, tosa::TosaDialect,
                        kiln::KilnDialect>();
      });
}
