//===- FuseAttention.cpp - Fuse attention into kiln.attention ---*- C++ -*-===//
//
// Matches softmax(scale·QKᵀ + mask)·V in TOSA and rewrites it into one
// kiln.attention op.
//
// The match is anchored on the softmax's first op (`tosa.reduce_max`) and
// walks outwards: forwards from the softmax to the product with V and the
// value that carries the result, backwards from the softmax input through
// masks, soft-capping and scaling to the product QKᵀ, and from each matmul
// operand through reshapes, transposes, scale factors and KV-head repeats to
// the Q, K and V the fused op takes. Nothing in the IR changes until the
// whole site has matched; every failure carries a reason, which the pattern
// reports through notifyMatchFailure and the pass as a remark on the softmax.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/Transforms/Passes.h"

#include "AttentionMatchers.h"

#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <functional>
#include <optional>

namespace mlir::kiln {
#define GEN_PASS_DEF_KILNFUSEATTENTION
#include "kiln/Dialect/Kiln/Transforms/Passes.h.inc"
} // namespace mlir::kiln

using namespace mlir;
using namespace mlir::kiln;
using mlir::kiln::detail::Band;
using mlir::kiln::detail::getSplatFloat;
using mlir::kiln::detail::isAbsorbingMask;
using mlir::kiln::detail::MaskTerm;
using mlir::kiln::detail::matchCausalConstant;
using mlir::kiln::detail::matchKvRepeat;

namespace {

//===----------------------------------------------------------------------===//
// Shape and constant helpers
//===----------------------------------------------------------------------===//

/// The most negative fill that still counts as "hidden" in a mask. HF uses
/// finfo.min, older exports -1e4 or -1e9; after the max subtraction any of
/// these makes exp() underflow to exactly 0 for realistic score ranges.
constexpr double kMaskingThreshold = -1.0e4;

/// True when `value` hides a key in an additive mask or a select fill.
bool isMaskingValue(double value) {
  return (std::isinf(value) && value < 0) || value <= kMaskingThreshold;
}

RankedTensorType getRankedType(Value value) {
  return dyn_cast<RankedTensorType>(value.getType());
}

/// Two sizes that are known to be the same (both static and equal, or both
/// dynamic and therefore carried through from the same source).
bool sameSize(int64_t lhs, int64_t rhs) { return lhs == rhs; }

/// True when `merged` is `source` with axes [first, last] merged into one,
/// keeping the element order (a collapse reshape). At most one dynamic size
/// in `merged` keeps the reshape unambiguous.
bool isMergeOfAxes(RankedTensorType source, RankedTensorType merged,
                   int64_t first, int64_t last) {
  if (!source || !merged ||
      merged.getRank() != source.getRank() - (last - first) ||
      last >= source.getRank())
    return false;
  if (llvm::count_if(merged.getShape(), ShapedType::isDynamic) > 1)
    return false;
  for (int64_t axis = 0; axis < first; ++axis)
    if (!sameSize(source.getDimSize(axis), merged.getDimSize(axis)))
      return false;
  int64_t product = 1;
  for (int64_t axis = first; axis <= last; ++axis) {
    if (ShapedType::isDynamic(source.getDimSize(axis))) {
      product = ShapedType::kDynamic;
      break;
    }
    product *= source.getDimSize(axis);
  }
  if (!sameSize(product, merged.getDimSize(first)))
    return false;
  for (int64_t axis = last + 1; axis < source.getRank(); ++axis)
    if (!sameSize(source.getDimSize(axis),
                  merged.getDimSize(axis - (last - first))))
      return false;
  return true;
}

/// The static values of a `tosa.const_shape`.
std::optional<SmallVector<int64_t>> getConstShape(Value shape) {
  auto constShape = shape.getDefiningOp<tosa::ConstShapeOp>();
  if (!constShape)
    return std::nullopt;
  return llvm::to_vector(
      llvm::map_range(constShape.getValues().getValues<APInt>(),
                      [](const APInt &v) { return v.getSExtValue(); }));
}

/// True when `perms` swaps the two innermost axes and keeps the others.
bool swapsInnermostAxes(ArrayRef<int32_t> perms) {
  int64_t rank = perms.size();
  if (rank < 2 || perms[rank - 2] != rank - 1 || perms[rank - 1] != rank - 2)
    return false;
  for (int64_t axis = 0; axis < rank - 2; ++axis)
    if (perms[axis] != axis)
      return false;
  return true;
}

/// Whether `value` is computed from a `tosa.matmul` through elementwise and
/// layout ops. Tells the scores apart from the mask in an `add` or `select`.
bool reachesMatmul(Value value, int depth = 16) {
  Operation *def = value.getDefiningOp();
  if (!def)
    return false;
  if (isa<tosa::MatMulOp>(def))
    return true;
  if (depth == 0 || !isa<tosa::CastOp, tosa::ReshapeOp, tosa::TransposeOp,
                         tosa::MulOp, tosa::AddOp, tosa::SubOp, tosa::SelectOp,
                         tosa::TanhOp, tosa::ExpOp, tosa::ReciprocalOp>(def))
    return false;
  return llvm::any_of(def->getOperands(), [&](Value operand) {
    return reachesMatmul(operand, depth - 1);
  });
}

bool isFloatCast(Operation *op) {
  auto cast = dyn_cast_or_null<tosa::CastOp>(op);
  return cast && isa<FloatType>(getElementTypeOrSelf(cast.getInput())) &&
         isa<FloatType>(getElementTypeOrSelf(cast.getOutput()));
}

/// Whether every value of `from` is one of `to`: at least its precision
/// and exponent range (bf16 or f16 to f32). A float cast between them
/// keeps values exactly (isWideningFloatCast).
bool widensExactly(FloatType from, FloatType to) {
  const llvm::fltSemantics &source = from.getFloatSemantics();
  const llvm::fltSemantics &result = to.getFloatSemantics();
  return llvm::APFloat::semanticsPrecision(result) >=
             llvm::APFloat::semanticsPrecision(source) &&
         llvm::APFloat::semanticsMaxExponent(result) >=
             llvm::APFloat::semanticsMaxExponent(source) &&
         llvm::APFloat::semanticsMinExponent(result) <=
             llvm::APFloat::semanticsMinExponent(source);
}

bool isWideningFloatCast(Operation *op) {
  return isFloatCast(op) &&
         widensExactly(cast<FloatType>(getElementTypeOrSelf(op->getOperand(0))),
                       cast<FloatType>(getElementTypeOrSelf(op->getResult(0))));
}

/// A binary op's splat-constant operand and its other operand, the
/// constant on either side; nothing when neither is a splat constant.
std::optional<std::pair<double, Value>> splatSide(Value lhs, Value rhs) {
  if (std::optional<double> splat = getSplatFloat(rhs))
    return std::pair(*splat, lhs);
  if (std::optional<double> splat = getSplatFloat(lhs))
    return std::pair(*splat, rhs);
  return std::nullopt;
}

/// The float values of a `tosa.const`, or null where `value` is none.
DenseFPElementsAttr floatConstant(Value value) {
  auto constant = value.getDefiningOp<tosa::ConstOp>();
  return constant ? dyn_cast<DenseFPElementsAttr>(constant.getValues())
                  : nullptr;
}

/// Whether every element of `value` is zero: a zero splat, or one
/// broadcast, reshaped or cast (ONNX `Expand` of a scalar 0 imports as a
/// reshape and a tile: torch's `zeros` exported with its sizes).
bool isZeroTensor(Value value, int depth = 8) {
  if (std::optional<double> splat = getSplatFloat(value))
    return *splat == 0.0;
  Operation *def = value.getDefiningOp();
  if (!def || depth == 0)
    return false;
  if (isa<tosa::TileOp, tosa::ReshapeOp>(def) || isFloatCast(def))
    return isZeroTensor(def->getOperand(0), depth - 1);
  return false;
}

/// Whether every element of `value` is an integer (or ±inf, or NaN): an
/// integer tensor cast to float, integer constants, and sums, differences
/// and products of such values. A float format represents every integer
/// below its precision exactly and has no fractions above it, so casts keep
/// the property.
bool isIntegerValued(Value value, int depth = 8) {
  if (isa<IntegerType>(getElementTypeOrSelf(value.getType())))
    return true;
  if (std::optional<double> splat = getSplatFloat(value))
    return std::isfinite(*splat) && *splat == std::trunc(*splat);
  Operation *def = value.getDefiningOp();
  if (!def || depth == 0 ||
      !isa<tosa::CastOp, tosa::AddOp, tosa::SubOp, tosa::MulOp>(def))
    return false;
  // tosa.mul's third operand is the shift of integer products.
  unsigned operands = isa<tosa::MulOp>(def) ? 2 : def->getNumOperands();
  return llvm::all_of(def->getOperands().take_front(operands),
                      [&](Value operand) {
                        return isIntegerValued(operand, depth - 1);
                      });
}

/// Whether `value` adds only zeros or fills that absorb a score (`fill`
/// with isAbsorbingMask, an integer times such a fill, a select between
/// such values): added to a score s and a bias b, it gives the same in
/// either order, s + (b + m) == (s + b) + m, for every finite s and b far
/// below the fill (under half its ulp: about 4e22 at 1e30 in f32). Zero
/// times an infinite fill is NaN in both orders.
bool addsZeroOrAbsorbing(Value value, int depth = 8) {
  if (std::optional<double> splat = getSplatFloat(value))
    return *splat == 0.0 || isAbsorbingMask(*splat);
  Operation *def = value.getDefiningOp();
  if (!def || depth == 0)
    return false;
  if (isFloatCast(def))
    return addsZeroOrAbsorbing(def->getOperand(0), depth - 1);
  if (auto select = dyn_cast<tosa::SelectOp>(def))
    return addsZeroOrAbsorbing(select.getOnTrue(), depth - 1) &&
           addsZeroOrAbsorbing(select.getOnFalse(), depth - 1);
  if (auto mul = dyn_cast<tosa::MulOp>(def))
    for (auto [factor, fill] : {std::pair(mul.getInput1(), mul.getInput2()),
                                std::pair(mul.getInput2(), mul.getInput1())}) {
      std::optional<double> fillValue = getSplatFloat(fill);
      if (fillValue && isAbsorbingMask(*fillValue) && isIntegerValued(factor))
        return true;
    }
  return false;
}

//===----------------------------------------------------------------------===//
// The match
//===----------------------------------------------------------------------===//

/// A matmul operand traced back to the tensor the fused op takes.
struct OperandSource {
  /// The traced tensor: rank 4 `[b, h, x, y]` or rank 3 `[b·h, x, y]`.
  Value base;
  /// Whether an odd number of innermost-axis swaps lie between `base` and
  /// the matmul operand.
  bool transposed = false;
  /// Query heads per head of `base`, from a provable KV-head repeat.
  int64_t groups = 1;
  /// Product of the splat factors peeled off on the way.
  double scale = 1.0;
};

/// A splat factor applied to Q or K before layout ops the trace does not walk
/// (`q_proj(x) · c`, then the split into heads): folds into `scale` when
/// every value from the factor to the matmul operand feeds only the next op,
/// so removing the factor changes nothing but the site.
struct OuterScale {
  tosa::MulOp mul;
  Value input;
  double factor;
};

/// Everything the rewrite needs about one attention site.
struct AttentionMatch {
  OperandSource query, key, value;
  /// Logical [B, Hq, Sq, Sk] of the scores.
  SmallVector<int64_t, 4> scoresShape;
  double scale = 1.0;
  /// A one-element tensor the scores are multiplied by (a run-time scale:
  /// a learned temperature, 1/sqrt of a size the graph computes), or with
  /// `scaleFactorPerHead` one value a query head laid along the scores'
  /// head axis; null when every factor is a constant.
  Value scaleFactor;
  bool scaleFactorPerHead = false;
  /// The element type the site runs in when Q, K and V differ (Q computed
  /// in f32, K and V in bf16): the narrower ones are widened to it, which
  /// is exact. Null when they agree.
  Type widenedTo;
  std::optional<double> softcap;
  bool causal = false;
  std::optional<int64_t> window;
  /// Keys past the diagonal by more than this are hidden (not with causal).
  std::optional<int64_t> windowRight;
  /// The score of a hidden key (the op's masked_score); -inf when unset.
  std::optional<double> maskedScore;
  /// How the masks were taken, for the report (empty when nothing hides).
  std::string masking;
  /// Factors on Q or K before the split into heads, folded into `scale`.
  SmallVector<OuterScale, 2> outerScales;
  MaskTerm maskTerm, biasTerm;
  /// The permutation of the scores' leading axes between Q·Kᵀ and the
  /// softmax (einsum's "bqhd,bkhd->bqhk": the queries before the heads),
  /// undone on the probabilities before P·V; empty when there is none.
  SmallVector<int32_t, 4> scoresPerms;
  /// [B, H, Sq, Sk] scores merged back to [B·H, Sq, Sk] right before the
  /// softmax (bmm scores viewed as rank 4 to add a mask, then viewed back:
  /// OPT's and BART's older eager code): the rank-4 type, else null.
  RankedTensorType mergedScoresType;
  /// The probabilities quantised to e4m3 with this scale before P·V (the
  /// op's prob_scale).
  std::optional<double> probScale;
  /// The value the fused op replaces, and its defining op.
  Value result;
  /// Every op of the site, for the fused location and the cleanup.
  llvm::SetVector<Operation *> ops;
};

/// The keys a select keeps of its value operand: `pred` true keeps them,
/// or, with `hides`, hides them.
struct KeyPredicate {
  Value pred;
  bool hides = false;
};

/// The softmax ops, forwards from its first op.
struct SoftmaxOps {
  Value input;
  Value output;
  tosa::SubOp sub;
  tosa::ExpOp exp;
  tosa::ReduceSumOp sum;
  tosa::ReciprocalOp reciprocal;
  tosa::MulOp normalize;
  /// A sum taken in a wider float type: the cast of the exponentials to it
  /// and the cast of the row sum back (JAX's softmax in bf16), else null.
  tosa::CastOp widen, narrow;
  /// `x - reduce_max(x)` written before the softmax ("stable softmax" by
  /// hand): the subtraction and its row max, else null; `input` is then x.
  tosa::SubOp shift;
  tosa::ReduceMaxOp shiftMax;
  /// A softmax restricted to a mask (`jax.nn.softmax(x, where=m)`): the
  /// exponentials summed through `select(m, exp, 0)`, else null.
  tosa::SelectOp sumGuard;
  /// Where the scores are `select(m, s, -inf)` (or `select(h, -inf, s)`):
  /// the keys a row sees (the probabilities of the others are 0, or NaN on
  /// a row that sees none), else a null predicate.
  KeyPredicate seen;
  /// The fill of `seen`'s select: -inf, or a finite fill that hides a key
  /// as -inf does where the row sees another (finfo.min), which only a
  /// guard after the softmax (`select(seen, p, 0)`) makes exact.
  double seenFill = -std::numeric_limits<double>::infinity();
};

/// The other operand of `select` when one of its value operands is
/// `special(value)` and the other is not; `kept` says which predicate keeps
/// it.
Value selectAround(tosa::SelectOp select,
                   llvm::function_ref<bool(Value)> special,
                   KeyPredicate &kept) {
  if (special(select.getOnFalse()) && !special(select.getOnTrue())) {
    kept = {select.getPred(), false};
    return select.getOnTrue();
  }
  if (special(select.getOnTrue()) && !special(select.getOnFalse())) {
    kept = {select.getPred(), true};
    return select.getOnFalse();
  }
  return {};
}

/// Whether `a` and `b` compute the same value: the same value, or the same
/// op on operands that do (up to `depth` ops deep), whatever names the
/// importer gave them (discardable attributes). Each `jnp.where` of one mask
/// broadcasts it anew; the copies are equivalent.
bool sameValue(Value a, Value b, int depth) {
  if (a == b)
    return true;
  Operation *x = a.getDefiningOp();
  Operation *y = b.getDefiningOp();
  if (depth == 0 || !x || !y || x->getNumResults() != 1 ||
      y->getNumResults() != 1)
    return false;
  return OperationEquivalence::isEquivalentTo(
      x, y,
      [&](Value l, Value r) { return success(sameValue(l, r, depth - 1)); },
      /*markEquivalent=*/nullptr,
      OperationEquivalence::IgnoreLocations |
          OperationEquivalence::IgnoreDiscardableAttrs);
}

bool samePredicate(const KeyPredicate &a, const KeyPredicate &b) {
  return a.pred && b.pred && a.hides == b.hides && sameValue(a.pred, b.pred, 4);
}

bool isZero(Value value) { return isZeroTensor(value); }

/// Recognises `x - reduce_max(x)` feeding an exp: every softmax the pass
/// reports on starts this way.
bool looksLikeSoftmax(tosa::ReduceMaxOp maxOp) {
  return llvm::any_of(maxOp->getUsers(), [](Operation *user) {
    return isa<tosa::SubOp>(user) &&
           llvm::any_of(user->getUsers(),
                        [](Operation *u) { return isa<tosa::ExpOp>(u); });
  });
}

/// Reads a softmax starting at `maxOp` or says why it is not one.
FailureOr<SoftmaxOps> matchSoftmax(tosa::ReduceMaxOp maxOp,
                                   std::string &whyNot) {
  auto fail = [&](const Twine &reason) {
    whyNot = reason.str();
    return failure();
  };
  SoftmaxOps softmax;
  softmax.input = maxOp.getInput();
  if (!maxOp->hasOneUse())
    return fail("the row max has other users");
  softmax.sub = dyn_cast<tosa::SubOp>(*maxOp->user_begin());
  if (!softmax.sub || softmax.sub.getInput1() != softmax.input ||
      softmax.sub.getInput2() != maxOp.getOutput())
    return fail("the row max is not subtracted from the softmax input");
  if (!softmax.sub->hasOneUse() ||
      !(softmax.exp = dyn_cast<tosa::ExpOp>(*softmax.sub->user_begin())))
    return fail("the shifted scores do not feed only an exp");

  Value exp = softmax.exp.getOutput();
  // exp -> cast to a wider float -> reduce_sum (-> cast back): the sum
  // taken in f32. The fused op sums in f32 whatever the type.
  // A cast of the exponentials to a wider float type, with one user.
  auto widens = [&](tosa::CastOp cast) {
    auto from = dyn_cast<FloatType>(getElementTypeOrSelf(exp.getType()));
    auto to = dyn_cast<FloatType>(getElementTypeOrSelf(cast.getType()));
    return from && to && to.getWidth() > from.getWidth() && cast->hasOneUse();
  };
  auto widerSum = [&](tosa::CastOp cast) -> tosa::ReduceSumOp {
    if (!widens(cast))
      return {};
    return dyn_cast<tosa::ReduceSumOp>(*cast->user_begin());
  };
  // exp -> select(m, exp, 0) (-> cast) -> reduce_sum, or exp -> cast ->
  // select -> reduce_sum: a sum restricted to the keys a mask keeps.
  KeyPredicate summed;
  auto guardedSum = [&](Operation *user, Value from) -> tosa::ReduceSumOp {
    auto select = dyn_cast<tosa::SelectOp>(user);
    if (!select || !select->hasOneUse() ||
        selectAround(select, isZero, summed) != from)
      return {};
    Operation *next = *select->user_begin();
    if (auto sum = dyn_cast<tosa::ReduceSumOp>(next)) {
      softmax.sumGuard = select;
      return sum;
    }
    if (auto cast = dyn_cast<tosa::CastOp>(next))
      if (tosa::ReduceSumOp sum = widerSum(cast)) {
        softmax.sumGuard = select;
        softmax.widen = cast;
        return sum;
      }
    return {};
  };
  for (Operation *user : exp.getUsers()) {
    tosa::ReduceSumOp sum = dyn_cast<tosa::ReduceSumOp>(user);
    auto cast = dyn_cast<tosa::CastOp>(user);
    if (!sum && !cast && !softmax.sumGuard)
      sum = guardedSum(user, exp);
    if (cast && !softmax.sumGuard && widens(cast) &&
        isa<tosa::SelectOp>(*cast->user_begin())) {
      if ((sum = guardedSum(*cast->user_begin(), cast.getOutput())))
        softmax.widen = cast;
    } else if (cast && (sum = widerSum(cast))) {
      softmax.widen = cast;
    }
    if (sum) {
      if (softmax.sum)
        return fail("the exponentials are summed twice");
      softmax.sum = sum;
    } else if (auto mul = dyn_cast<tosa::MulOp>(user)) {
      if (softmax.normalize)
        return fail("the exponentials have other users");
      softmax.normalize = mul;
    } else {
      return fail("the exponentials have other users");
    }
  }
  if (!softmax.sum)
    return fail("the exponentials are not summed");
  if (!softmax.normalize)
    return fail("the exponentials are not normalised by a product");
  if (softmax.sum.getAxis() != maxOp.getAxis())
    return fail(llvm::formatv("reduce_sum axis {0} differs from reduce_max "
                              "axis {1}",
                              softmax.sum.getAxis(), maxOp.getAxis()));
  Operation *sumUser =
      softmax.sum->hasOneUse() ? *softmax.sum->user_begin() : nullptr;
  if (softmax.widen && sumUser && isa<tosa::CastOp>(sumUser) &&
      getElementTypeOrSelf(sumUser->getResult(0).getType()) ==
          getElementTypeOrSelf(exp.getType())) {
    softmax.narrow = cast<tosa::CastOp>(sumUser);
    sumUser = sumUser->hasOneUse() ? *sumUser->user_begin() : nullptr;
  }
  if (!sumUser || !(softmax.reciprocal = dyn_cast<tosa::ReciprocalOp>(sumUser)))
    return fail("the row sum does not feed only a reciprocal");
  Value normalizer = softmax.reciprocal.getOutput();
  if (!softmax.reciprocal->hasOneUse() ||
      !((softmax.normalize.getInput1() == exp &&
         softmax.normalize.getInput2() == normalizer) ||
        (softmax.normalize.getInput2() == exp &&
         softmax.normalize.getInput1() == normalizer)))
    return fail("the exponentials are not divided by their row sum");
  softmax.output = softmax.normalize.getOutput();

  // softmax(x - reduce_max(x)): every score of a row shifted by the same
  // amount, which the softmax's own row max undoes (a row whose maximum is
  // infinite is NaN either way), so the scores are x. Taken only where x
  // and the shift serve nothing else.
  if (auto shift = softmax.input.getDefiningOp<tosa::SubOp>()) {
    auto inner = shift.getInput2().getDefiningOp<tosa::ReduceMaxOp>();
    Value x = shift.getInput1();
    if (inner && inner.getInput() == x && inner.getAxis() == maxOp.getAxis() &&
        inner->hasOneUse() &&
        std::distance(softmax.input.use_begin(), softmax.input.use_end()) == 2 &&
        std::distance(x.use_begin(), x.use_end()) == 2) {
      softmax.shift = shift;
      softmax.shiftMax = inner;
      softmax.input = x;
    }
  }

  // Scores hidden with -inf by a select: the keys each row sees. A sum
  // restricted to the same mask adds only zeros more (exp(-inf) = 0 where
  // the row sees a key; on a row that sees none the graph's probabilities
  // are NaN, 0 after a guard, and the fused op's output is 0).
  if (auto hidden = softmax.input.getDefiningOp<tosa::SelectOp>()) {
    auto hides = [](Value value) {
      std::optional<double> fill = getSplatFloat(value);
      return fill && isAbsorbingMask(*fill);
    };
    KeyPredicate kept;
    if (Value scores = selectAround(hidden, hides, kept)) {
      softmax.seen = kept;
      softmax.seenFill =
          *getSplatFloat(scores == hidden.getOnTrue() ? hidden.getOnFalse()
                                                      : hidden.getOnTrue());
    }
  }
  if (softmax.sumGuard && (!samePredicate(summed, softmax.seen) ||
                           !std::isinf(softmax.seenFill)))
    return fail("the row sum is restricted to keys other than those the "
                "scores hide with -inf");

  auto inputType = getRankedType(softmax.input);
  if (!inputType)
    return fail("the softmax input is unranked");
  if (static_cast<int64_t>(maxOp.getAxis()) != inputType.getRank() - 1)
    return fail(llvm::formatv("softmax over axis {0}, not the last axis {1}",
                              maxOp.getAxis(), inputType.getRank() - 1));
  if (inputType.getRank() != 3 && inputType.getRank() != 4)
    return fail(llvm::formatv("the scores have rank {0}, not 3 or 4",
                              inputType.getRank()));
  if (std::distance(softmax.input.use_begin(), softmax.input.use_end()) != 2)
    return fail("the scores have other users");
  return softmax;
}

} // namespace

namespace {
bool regroupsLeadingAxes(RankedTensorType source, RankedTensorType result);
} // namespace

std::vector<std::string> mlir::kiln::nodeNames(Location loc) {
  llvm::SetVector<StringRef> names;
  loc->walk([&](Location inner) {
    if (auto named = dyn_cast<NameLoc>(inner))
      names.insert(named.getName().getValue());
    return WalkResult::advance();
  });
  return std::vector<std::string>(names.begin(), names.end());
}

/// Adds the file:line entries of `loc` to `lines`; of a call site only the
/// callee's (the line that wrote the op, not the lines that called it).
static void collectSourceLines(Location loc, std::vector<std::string> &lines,
                               llvm::StringSet<> &seen) {
  if (auto fused = dyn_cast<FusedLoc>(loc)) {
    for (Location inner : fused.getLocations())
      collectSourceLines(inner, lines, seen);
  } else if (auto named = dyn_cast<NameLoc>(loc)) {
    collectSourceLines(named.getChildLoc(), lines, seen);
  } else if (auto call = dyn_cast<CallSiteLoc>(loc)) {
    collectSourceLines(call.getCallee(), lines, seen);
  } else if (auto file = dyn_cast<FileLineColRange>(loc)) {
    std::string line =
        (file.getFilename().getValue() + ":" + Twine(file.getStartLine()))
            .str();
    if (file.getStartLine() > 0 && seen.insert(line).second)
      lines.push_back(line);
  }
}

std::vector<std::string> mlir::kiln::sourceLines(Location loc) {
  std::vector<std::string> lines;
  llvm::StringSet<> seen;
  collectSourceLines(loc, lines, seen);
  return lines;
}

std::optional<double> mlir::kiln::detail::getSplatFloat(Value value) {
  if (auto reciprocal = value.getDefiningOp<tosa::ReciprocalOp>()) {
    std::optional<double> inner = getSplatFloat(reciprocal.getInput1());
    if (!inner || *inner == 0.0)
      return std::nullopt;
    return 1.0 / *inner;
  }
  auto constant = value.getDefiningOp<tosa::ConstOp>();
  if (!constant)
    return std::nullopt;
  auto attr = dyn_cast<DenseFPElementsAttr>(constant.getValues());
  if (!attr || !attr.isSplat())
    return std::nullopt;
  return attr.getSplatValue<APFloat>().convertToDouble();
}

bool mlir::kiln::detail::isAbsorbingMask(double value) {
  return value < 0 && (std::isinf(value) || value <= -1.0e30);
}

/// Matches `reshape(tile(reshape(kv, [B, Hkv, 1, S, D]), [1, 1, G, 1, 1]))`
/// (or a tile of a single KV head): query head `h` then reads KV head
/// `h / G`, which is what the fused op does with the unrepeated tensor.
std::optional<std::pair<Value, int64_t>>
mlir::kiln::detail::matchKvRepeat(Value value,
                                  SmallVectorImpl<Operation *> &ops) {
  auto outType = getRankedType(value);
  if (!outType)
    return std::nullopt;
  // A single KV head tiled over the head axis (MQA).
  if (auto tile = value.getDefiningOp<tosa::TileOp>()) {
    auto inType = getRankedType(tile.getInput1());
    std::optional<SmallVector<int64_t>> multiples =
        getConstShape(tile.getMultiples());
    if (!inType || inType.getRank() != 4 || !multiples ||
        inType.getDimSize(1) != 1 ||
        *multiples != SmallVector<int64_t>{1, (*multiples)[1], 1, 1})
      return std::nullopt;
    ops.push_back(tile);
    return std::make_pair(tile.getInput1(), (*multiples)[1]);
  }
  auto collapse = value.getDefiningOp<tosa::ReshapeOp>();
  if (!collapse)
    return std::nullopt;
  auto tile = collapse.getInput1().getDefiningOp<tosa::TileOp>();
  if (!tile)
    return std::nullopt;
  auto tiledType = getRankedType(tile.getOutput());
  if (!tiledType || tiledType.getRank() != 5 ||
      !(isMergeOfAxes(tiledType, outType, 1, 2) ||
        isMergeOfAxes(tiledType, outType, 0, 2)))
    return std::nullopt;
  std::optional<SmallVector<int64_t>> multiples =
      getConstShape(tile.getMultiples());
  if (!multiples || multiples->size() != 5 || (*multiples)[0] != 1 ||
      (*multiples)[1] != 1 || (*multiples)[3] != 1 || (*multiples)[4] != 1)
    return std::nullopt;
  auto expand = tile.getInput1().getDefiningOp<tosa::ReshapeOp>();
  if (!expand)
    return std::nullopt;
  auto expandedType = getRankedType(expand.getOutput());
  auto kvType = getRankedType(expand.getInput1());
  if (!kvType || expandedType.getDimSize(2) != 1)
    return std::nullopt;
  // The expand inserts the unit axis into [B, Hkv, S, D], or (reshapes
  // folded together) straight into a tensor whose leading axes group the
  // same way, e.g. V of a single KV head as [B, S, D].
  if (!(kvType.getRank() == 4 && isMergeOfAxes(expandedType, kvType, 1, 2))) {
    SmallVector<int64_t> unitDropped(expandedType.getShape());
    unitDropped.erase(unitDropped.begin() + 2);
    auto grouped =
        RankedTensorType::get(unitDropped, expandedType.getElementType());
    if (!regroupsLeadingAxes(kvType, grouped))
      return std::nullopt;
  }
  ops.append(
      {collapse.getOperation(), tile.getOperation(), expand.getOperation()});
  return std::make_pair(expand.getInput1(), (*multiples)[2]);
}

namespace {

/// True when `source` and `result` (rank 3 or 4) differ only in how the
/// leading (batch and head) axes are grouped: the innermost two axes are kept
/// and the element order is unchanged, so every [S, D] matrix keeps its flat
/// batch·head index, which is all the fused op's indexing depends on.
bool regroupsLeadingAxes(RankedTensorType source, RankedTensorType result) {
  if (!source || !result || source.getRank() < 3 || source.getRank() > 4 ||
      result.getRank() < 3 || result.getRank() > 4)
    return false;
  if (isMergeOfAxes(source, result, 0, 1) ||
      isMergeOfAxes(result, source, 0, 1))
    return true;
  if (!sameSize(source.getShape().take_back(2)[0],
                result.getShape().take_back(2)[0]) ||
      !sameSize(source.getShape().back(), result.getShape().back()))
    return false;
  auto leadingProduct = [](RankedTensorType type) -> int64_t {
    int64_t product = 1;
    for (int64_t size : type.getShape().drop_back(2)) {
      if (ShapedType::isDynamic(size))
        return ShapedType::kDynamic;
      product *= size;
    }
    return product;
  };
  int64_t sourceLeading = leadingProduct(source);
  return !ShapedType::isDynamic(sourceLeading) &&
         sourceLeading == leadingProduct(result);
}

/// Traces a matmul operand back through reshapes of the leading axes,
/// innermost-axis transposes, KV-head repeats and (when `foldScale`) splat
/// factors.
OperandSource traceOperand(Value value, bool foldScale,
                           SmallVectorImpl<Operation *> &ops) {
  OperandSource source;
  while (Operation *def = value.getDefiningOp()) {
    if (auto mul = dyn_cast<tosa::MulOp>(def); mul && foldScale) {
      auto outType = getRankedType(mul.getOutput());
      bool peeled = false;
      for (auto [operand, factor] :
           {std::pair(mul.getInput1(), mul.getInput2()),
            std::pair(mul.getInput2(), mul.getInput1())}) {
        std::optional<double> splat = getSplatFloat(factor);
        if (!splat || getRankedType(operand) != outType)
          continue;
        source.scale *= *splat;
        ops.push_back(mul);
        value = operand;
        peeled = true;
        break;
      }
      if (peeled)
        continue;
      break;
    }
    if (auto transpose = dyn_cast<tosa::TransposeOp>(def)) {
      if (!swapsInnermostAxes(transpose.getPerms()))
        break;
      source.transposed = !source.transposed;
      ops.push_back(transpose);
      value = transpose.getInput1();
      continue;
    }
    if (std::optional<std::pair<Value, int64_t>> repeat =
            matchKvRepeat(value, ops)) {
      source.groups *= repeat->second;
      value = repeat->first;
      continue;
    }
    if (auto reshape = dyn_cast<tosa::ReshapeOp>(def)) {
      if (!regroupsLeadingAxes(getRankedType(reshape.getInput1()),
                               getRankedType(value)))
        break;
      ops.push_back(reshape);
      value = reshape.getInput1();
      continue;
    }
    break;
  }
  source.base = value;
  return source;
}

/// Whether every value from `operand` back to `base` (a traced operand) has
/// one use, following the traced ops' data operand.
bool tracedChainHasOneUse(Value operand, Value base) {
  Value current = operand;
  for (int depth = 0; current != base; ++depth) {
    Operation *def = current.getDefiningOp();
    if (depth > 32 || !def || !current.hasOneUse())
      return false;
    Value next;
    for (Value input : def->getOperands())
      if (getRankedType(input) && !getSplatFloat(input) &&
          !input.getDefiningOp<tosa::ConstShapeOp>()) {
        next = input;
        break;
      }
    if (!next)
      return false;
    current = next;
  }
  return true;
}

std::optional<OuterScale> findOuterScale(Value base) {
  Value current = base;
  for (int depth = 0; depth < 8; ++depth) {
    if (!current.hasOneUse())
      return std::nullopt;
    Operation *def = current.getDefiningOp();
    if (!def)
      return std::nullopt;
    if (isa<tosa::ReshapeOp, tosa::TransposeOp>(def)) {
      current = def->getOperand(0);
      continue;
    }
    auto mul = dyn_cast<tosa::MulOp>(def);
    if (!mul)
      return std::nullopt;
    for (auto [operand, factor] : {std::pair(mul.getInput1(), mul.getInput2()),
                                   std::pair(mul.getInput2(), mul.getInput1())})
      if (std::optional<double> splat = getSplatFloat(factor);
          splat && getRankedType(operand) == getRankedType(mul.getOutput()))
        return OuterScale{mul, operand, *splat};
    return std::nullopt;
  }
  return std::nullopt;
}

/// How a traced operand becomes a rank-4 `[B, H, x, y]` tensor.
enum class LeadingFit { AsIs, Reshape, Impossible };

LeadingFit fitLeading(RankedTensorType type, int64_t batch, int64_t heads) {
  if (type.getRank() == 4 && sameSize(type.getDimSize(0), batch) &&
      sameSize(type.getDimSize(1), heads))
    return LeadingFit::AsIs;
  if (type.getRank() != 3 && type.getRank() != 4)
    return LeadingFit::Impossible;
  int64_t leading = type.getDimSize(0);
  if (type.getRank() == 4)
    leading = ShapedType::isDynamic(leading) ||
                      ShapedType::isDynamic(type.getDimSize(1))
                  ? ShapedType::kDynamic
                  : leading * type.getDimSize(1);
  ArrayRef<int64_t> trailing = type.getShape().take_back(2);
  if (ShapedType::isDynamic(leading) || ShapedType::isDynamic(batch) ||
      ShapedType::isDynamic(heads) || leading != batch * heads ||
      llvm::count_if(trailing, ShapedType::isDynamic) > 1)
    return LeadingFit::Impossible;
  return LeadingFit::Reshape;
}

/// A float term `b + m` (neither reaching the scores) where `m` adds only
/// zeros or absorbing fills and `b` does not: (b, m).
std::optional<std::pair<Value, Value>> splitBiasAndMask(Value term) {
  auto sum = term.getDefiningOp<tosa::AddOp>();
  if (!sum || reachesMatmul(sum.getInput1()) || reachesMatmul(sum.getInput2()))
    return std::nullopt;
  for (auto [bias, mask] : {std::pair(sum.getInput1(), sum.getInput2()),
                            std::pair(sum.getInput2(), sum.getInput1())})
    if (addsZeroOrAbsorbing(mask) && !addsZeroOrAbsorbing(bias))
      return std::pair(bias, mask);
  return std::nullopt;
}

/// The axis of scores of type `scores` that is the fused op's query heads:
/// 1 of [B, H, q, k]; 0 of [B·H, q, k] when the softmax reads those scores
/// as they are (the op's batch is then 1), none when they are split into
/// [B, H] after (`split`), where axis 0 runs over batch and head together.
std::optional<int64_t> scoresHeadAxis(RankedTensorType scores, bool split) {
  if (scores.getRank() == 4)
    return 1;
  if (scores.getRank() == 3 && !split)
    return 0;
  return std::nullopt;
}

/// Whether a static `factor` broadcast against `scores` (numpy-style, from
/// the right) holds one value a query head: every size 1 but that of the
/// head axis, which is the scores' own. Failure where the scores have no
/// head axis of their own (see scoresHeadAxis).
FailureOr<bool> factorAlongHeads(RankedTensorType factor,
                                 RankedTensorType scores, bool split) {
  std::optional<int64_t> headAxis = scoresHeadAxis(scores, split);
  if (!headAxis || factor.getRank() > scores.getRank() ||
      ShapedType::isDynamic(scores.getDimSize(*headAxis)))
    return failure();
  int64_t lead = scores.getRank() - factor.getRank();
  for (auto [axis, size] : llvm::enumerate(factor.getShape())) {
    bool isHeadAxis = static_cast<int64_t>(axis) + lead == *headAxis;
    if (size != (isHeadAxis ? scores.getDimSize(*headAxis) : 1))
      return false;
  }
  return true;
}

/// Why a factor of several values is not one a query head: the axes of
/// the scores it varies along ("a scale per query is not fused").
std::string factorVariesAlong(RankedTensorType factor,
                              RankedTensorType scores, bool split) {
  int64_t rank = scores.getRank();
  if (factor.getRank() > rank)
    return "it has more axes than the scores";
  SmallVector<StringRef> names =
      rank == 4 ? SmallVector<StringRef>{"batch", "head", "query", "key"}
      : split   ? SmallVector<StringRef>{"(batch, head) pair", "query", "key"}
                : SmallVector<StringRef>{"head", "query", "key"};
  if (rank != 4 && rank != 3)
    return "a scale of several values is not fused";
  std::optional<int64_t> headAxis = scoresHeadAxis(scores, split);
  int64_t lead = rank - factor.getRank();
  SmallVector<StringRef> along;
  for (auto [axis, size] : llvm::enumerate(factor.getShape())) {
    int64_t scoresAxis = static_cast<int64_t>(axis) + lead;
    if (size == 1 || (headAxis && scoresAxis == *headAxis &&
                      size == scores.getDimSize(scoresAxis)))
      continue;
    along.push_back(names[scoresAxis]);
  }
  if (along.empty())
    return "the number of heads is not known";
  std::string result = "a scale per ";
  llvm::raw_string_ostream os(result);
  llvm::interleave(along, os, " and per ");
  return result + " is not fused";
}

/// Reads the scores backwards from the softmax input to the QKᵀ matmul.
LogicalResult matchScores(Value scores, AttentionMatch &match,
                          tosa::MatMulOp &scoresMatmul,
                          SmallVectorImpl<MaskTerm> &terms,
                          std::string &whyNot, Operation **stoppedAt) {
  auto fail = [&](const Twine &reason) {
    whyNot = reason.str();
    return failure();
  };
  enum Phase { Masks, AfterSoftcap, Scale } phase = Masks;
  // XGLM's `torch.max(scores, finfo.min)` after its masks: the bound every
  // hidden key's score is raised to (see the maximum below).
  std::optional<double> clampBelow;
  bool split = false;
  Value current = scores;
  for (bool first = true;; first = false) {
    Operation *def = current.getDefiningOp();
    // Where a failure below stops the walk: the op it was reading.
    if (stoppedAt)
      *stoppedAt = def;
    if (!def)
      return fail("the scores do not come from a matmul");
    if (!first && !current.hasOneUse())
      return fail(llvm::formatv("the scores have other users (at '{0}')",
                                def->getName()));
    if (auto matmul = dyn_cast<tosa::MatMulOp>(def)) {
      scoresMatmul = matmul;
      match.ops.insert(matmul);
      return success();
    }
    auto resultType = getRankedType(current);
    // The operand of `def` that carries the scores; the other is a mask,
    // a factor or a fill.
    auto scoresOperand = [&](Value lhs, Value rhs) -> FailureOr<Value> {
      bool lhsScores = reachesMatmul(lhs), rhsScores = reachesMatmul(rhs);
      if (lhsScores && rhsScores)
        return fail(llvm::formatv("both operands of '{0}' derive from a "
                                  "matmul",
                                  def->getName()));
      if (!lhsScores && !rhsScores)
        return fail("the scores do not come from a matmul");
      Value chosen = lhsScores ? lhs : rhs;
      if (getRankedType(chosen) != resultType)
        return fail(llvm::formatv("'{0}' broadcasts the scores to a larger "
                                  "shape (the mask shape does not broadcast "
                                  "to the scores)",
                                  def->getName()));
      return chosen;
    };

    if (isFloatCast(def)) {
      match.ops.insert(def);
      current = def->getOperand(0);
      continue;
    }
    if (auto transpose = dyn_cast<tosa::TransposeOp>(def)) {
      // The scores' leading axes permuted (the keys stay last, so the
      // softmax commutes with it); matchAttention checks that the
      // probabilities are permuted back. Terms after it would be laid out
      // in the permuted order: none is taken.
      ArrayRef<int32_t> perms = transpose.getPerms();
      if (!match.scoresPerms.empty() || perms.size() != 4 || perms.back() != 3)
        return fail("the scores are transposed other than among their "
                    "leading axes");
      if (!terms.empty() || match.scaleFactor)
        return fail("a mask or a run-time scale is applied to transposed "
                    "scores");
      match.scoresPerms.assign(perms.begin(), perms.end());
      match.ops.insert(def);
      current = transpose.getInput1();
      continue;
    }
    if (auto reshape = dyn_cast<tosa::ReshapeOp>(def);
        reshape && !split && !match.mergedScoresType && terms.empty() &&
        phase == Masks && resultType.getRank() == 3 &&
        isMergeOfAxes(getRankedType(reshape.getInput1()), resultType, 0, 1)) {
      // [B, H, Sq, Sk] → [B·H, Sq, Sk] nearest the softmax, before any term:
      // the terms further back are laid out in rank 4, and a split back to
      // rank 4 must follow (else the merge is the product's own layout).
      match.mergedScoresType = getRankedType(reshape.getInput1());
      match.ops.insert(def);
      current = reshape.getInput1();
      continue;
    }
    if (auto reshape = dyn_cast<tosa::ReshapeOp>(def)) {
      if (split ||
          !isMergeOfAxes(resultType, getRankedType(reshape.getInput1()), 0, 1))
        return fail("the scores are reshaped other than by splitting the "
                    "batch into [batch, heads]");
      split = true;
      match.ops.insert(def);
      current = reshape.getInput1();
      continue;
    }
    // A boolean mask met after a scale (`(QKᵀ + where(keep, 0, fill)) · c`,
    // CodeGen's order): the scale reaches the fill only, as the op adds
    // masks after scaling, so the fill becomes fill · c. Only a positive
    // constant scale keeps a hiding fill hiding; a float mask (each value
    // would need scaling) stays unfused.
    auto scaleFill = [&](MaskTerm &term, StringRef applied) -> LogicalResult {
      if (phase != Scale)
        return success();
      if (!term.isBoolean) {
        // The op adds the term scaled, `c·s + c·t`, which is `(s + t)·c`
        // for any constant c: a term computed at run time (Transformer-XL's
        // and Conformer's shifted position scores, `(AC + BD) / sqrt(d)`)
        // is multiplied in the fused graph before the op, a constant when
        // compiled. A constant that holds masking values is taken only
        // where each stays a hiding fill once scaled: the band and mask
        // readings see its values as masks.
        if (match.scaleFactor)
          return fail(Twine("a mask is ") + applied +
                      " before a run-time scale");
        DenseFPElementsAttr values = floatConstant(term.value);
        bool masks =
            values && llvm::any_of(values.getValues<APFloat>(), [](const APFloat &v) {
              return isMaskingValue(v.convertToDouble());
            });
        if (masks &&
            (!(match.scale > 0.0) ||
             llvm::any_of(values.getValues<APFloat>(), [&](const APFloat &v) {
               double value = v.convertToDouble();
               return value != 0.0 && !isAbsorbingMask(value * match.scale);
             })))
          return fail(Twine("a mask is ") + applied + " before the scale");
        term.scale = match.scale;
        return success();
      }
      if (match.scaleFactor)
        return fail(Twine("a mask is ") + applied + " before a run-time scale");
      if (!(match.scale > 0.0))
        return fail(Twine("a mask is ") + applied +
                    " before a scale that is not positive");
      term.fill *= match.scale;
      return success();
    };
    // A key hidden under the clamp scores exactly the bound, whichever
    // terms hide it: each boolean term's fill becomes the bound, replacing
    // the score. A constant whose fills already equal the bound is kept;
    // other float masks would need their values clamped.
    auto clampFill = [&](MaskTerm &term) -> LogicalResult {
      if (!clampBelow)
        return success();
      if (term.isBoolean) {
        term.fill = *clampBelow;
        term.replaces = true;
        return success();
      }
      DenseFPElementsAttr values = floatConstant(term.value);
      if (!values || term.scale != 1.0 ||
          llvm::any_of(values.getValues<APFloat>(), [&](const APFloat &v) {
            double value = v.convertToDouble();
            return value != 0.0 && value != *clampBelow;
          }))
        return fail("a float mask is clamped below by max(x, c)");
      return success();
    };
    if (auto add = dyn_cast<tosa::AddOp>(def)) {
      if (phase == AfterSoftcap)
        return fail("a mask is added before the softcap");
      FailureOr<Value> chain = scoresOperand(add.getInput1(), add.getInput2());
      if (failed(chain))
        return failure();
      MaskTerm term;
      term.value =
          *chain == add.getInput1() ? add.getInput2() : add.getInput1();
      term.scoresRank = resultType.getRank();
      if (isZeroTensor(term.value)) {
        // Adding zeros changes nothing.
        match.ops.insert(def);
        current = *chain;
        continue;
      }
      // An additive mask built as select(keep, 0, -inf) is that boolean
      // (seen through reshapes that only add leading unit axes: a [Sq, Sk]
      // mask added to [B, H, Sq, Sk] scores).
      // Widening casts keep both values exactly (CodeGen's bf16
      // where(keep, 0, finfo.min) cast to its f32 scores).
      Value built = term.value;
      SmallVector<Operation *> reshapes;
      while (true) {
        if (Operation *cast = built.getDefiningOp();
            cast && isWideningFloatCast(cast)) {
          reshapes.push_back(cast);
          built = cast->getOperand(0);
          continue;
        }
        auto reshape = built.getDefiningOp<tosa::ReshapeOp>();
        if (!reshape)
          break;
        auto from = dyn_cast<RankedTensorType>(reshape.getInput1().getType());
        auto to = dyn_cast<RankedTensorType>(reshape.getType());
        if (!from || !to || from.getRank() > to.getRank() ||
            from.getShape() !=
                to.getShape().drop_front(to.getRank() - from.getRank()) ||
            llvm::any_of(to.getShape().take_front(to.getRank() - from.getRank()),
                         [](int64_t size) { return size != 1; }))
          break;
        reshapes.push_back(reshape);
        built = reshape.getInput1();
      }
      if (auto build = built.getDefiningOp<tosa::SelectOp>()) {
        std::optional<double> onTrue = getSplatFloat(build.getOnTrue());
        std::optional<double> onFalse = getSplatFloat(build.getOnFalse());
        // Added, a finite fill equals a replacement only when it absorbs
        // every score (s + fill == fill in f32, as for finfo.min); other
        // finite fills (-1e4, -1e9) stay an additive mask, which is exact.
        if (onTrue && onFalse &&
            ((*onTrue == 0.0 && isAbsorbingMask(*onFalse)) ||
             (isAbsorbingMask(*onTrue) && *onFalse == 0.0))) {
          term.isBoolean = true;
          term.inverted = *onTrue != 0.0;
          term.value = build.getPred();
          term.fill = term.inverted ? *onTrue : *onFalse;
          term.replaces = false;
          match.ops.insert(build);
          match.ops.insert(reshapes.begin(), reshapes.end());
        }
      }
      if (failed(scaleFill(term, "added")))
        return failure();
      if (term.isBoolean && !isAbsorbingMask(term.fill))
        return fail("a mask's fill, scaled, no longer hides a key");
      if (failed(clampFill(term)))
        return failure();
      terms.push_back(term);
      match.ops.insert(def);
      current = *chain;
      continue;
    }
    if (auto select = dyn_cast<tosa::SelectOp>(def)) {
      if (phase == AfterSoftcap)
        return fail("a mask is applied before the softcap");
      FailureOr<Value> chain =
          scoresOperand(select.getOnTrue(), select.getOnFalse());
      if (failed(chain))
        return failure();
      MaskTerm term;
      term.isBoolean = true;
      term.inverted = *chain == select.getOnFalse();
      Value fill = term.inverted ? select.getOnTrue() : select.getOnFalse();
      std::optional<double> fillValue = getSplatFloat(fill);
      if (!fillValue || !isMaskingValue(*fillValue))
        return fail("the select fill is not -inf or a large negative "
                    "constant");
      term.value = select.getPred();
      term.fill = *fillValue;
      term.scoresRank = resultType.getRank();
      if (failed(scaleFill(term, "applied")))
        return failure();
      if (!isMaskingValue(term.fill))
        return fail("a mask's fill, scaled, no longer hides a key");
      if (failed(clampFill(term)))
        return failure();
      terms.push_back(term);
      match.ops.insert(def);
      current = *chain;
      continue;
    }
    if (auto mul = dyn_cast<tosa::MulOp>(def)) {
      // Soft-capping: c · tanh(x · (1/c)).
      for (auto [tanhValue, capValue] :
           {std::pair(mul.getInput1(), mul.getInput2()),
            std::pair(mul.getInput2(), mul.getInput1())}) {
        auto tanh = tanhValue.getDefiningOp<tosa::TanhOp>();
        std::optional<double> cap = getSplatFloat(capValue);
        if (!tanh || !cap)
          continue;
        if (phase != Masks)
          return fail(phase == Scale ? "the softcap is applied before the "
                                       "scale"
                                     : "the scores are soft-capped twice");
        auto inner = tanh.getInput().getDefiningOp<tosa::MulOp>();
        if (!tanh->hasOneUse() || !inner || !inner->hasOneUse())
          return fail("tanh is not part of a softcap c·tanh(x/c)");
        std::optional<double> inverse;
        Value chain;
        if (auto side = splatSide(inner.getInput1(), inner.getInput2()))
          std::tie(inverse, chain) = *side;
        // 1/c is a constant of the scores' type (an exporter's x / c is
        // imported as x · (1/c), folded in that type): c and it agree to
        // that type's rounding, which the graph's own x · (1/c) rounds
        // away again, and no closer.
        double tolerance = 1e-6;
        if (auto floatType = dyn_cast<FloatType>(resultType.getElementType()))
          tolerance = std::max(
              tolerance,
              std::ldexp(1.0, -static_cast<int>(llvm::APFloat::semanticsPrecision(
                                  floatType.getFloatSemantics()))));
        if (!inverse || *cap <= 0.0 || !std::isfinite(*cap) ||
            std::abs(*inverse * *cap - 1.0) > tolerance)
          return fail("tanh is not part of a softcap c·tanh(x/c) with one "
                      "positive constant c");
        if (getRankedType(chain) != resultType)
          return fail("the softcap broadcasts the scores");
        match.softcap = *cap;
        match.ops.insert(mul);
        match.ops.insert(tanh);
        match.ops.insert(inner);
        phase = AfterSoftcap;
        current = chain;
        break;
      }
      if (phase == AfterSoftcap && match.ops.contains(mul))
        continue;
      std::optional<double> factor;
      Value chain;
      if (auto side = splatSide(mul.getInput1(), mul.getInput2()))
        std::tie(factor, chain) = *side;
      if (!factor) {
        // A run-time scale: a one-element float tensor that does not come
        // from the scores.
        bool lhsScores = reachesMatmul(mul.getInput1());
        bool rhsScores = reachesMatmul(mul.getInput2());
        Value factorValue = lhsScores ? mul.getInput2() : mul.getInput1();
        auto factorType = getRankedType(factorValue);
        bool staticFloat = factorType && factorType.hasStaticShape() &&
                           isa<FloatType>(factorType.getElementType());
        // A factor of several values: one a query head (Swin-v2's learned
        // logit scale, [H, 1, 1]) is the op's [Hq] scale_factor; one that
        // varies along any other axis is named with its shape, which the
        // user wrote.
        bool perHead = false;
        if (lhsScores != rhsScores && staticFloat &&
            factorType.getNumElements() > 1) {
          FailureOr<bool> headAxis =
              factorAlongHeads(factorType, resultType, split);
          if (failed(headAxis) || !*headAxis) {
            std::string shape;
            llvm::raw_string_ostream os(shape);
            llvm::interleave(factorType.getShape(), os, "x");
            return fail("the scale is a tensor of " +
                        Twine(factorType.getNumElements()) +
                        " values (shape " + shape +
                        "), not one value or one a query head: " +
                        factorVariesAlong(factorType, resultType, split));
          }
          perHead = true;
        }
        if (lhsScores == rhsScores || !staticFloat ||
            (!perHead && factorType.getNumElements() != 1))
          return fail("the scale is neither a splat constant nor a "
                      "one-element tensor");
        if (match.scaleFactor)
          return fail("the scores are scaled by two run-time factors");
        match.scaleFactor = factorValue;
        match.scaleFactorPerHead = perHead;
        chain = lhsScores ? mul.getInput1() : mul.getInput2();
        factor = 1.0;
      }
      if (getRankedType(chain) != resultType)
        return fail("the scale broadcasts the scores");
      match.scale *= *factor;
      match.ops.insert(mul);
      phase = Scale;
      current = chain;
      continue;
    }
    if (auto maximum = dyn_cast<tosa::MaximumOp>(def)) {
      // `max(scores, c)` with c a hiding fill (XGLM: finfo.min, so that no
      // score is -inf): every score a key keeps is above c and unchanged; a
      // hidden key's score becomes c (clampFill). Only once, over the masks.
      auto side = splatSide(maximum.getInput1(), maximum.getInput2());
      if (!side || !std::isfinite(side->first) || !isAbsorbingMask(side->first))
        return fail("the scores are clamped below by max(x, c) with c not a "
                    "finite hiding fill, which changes scores the op keeps");
      if (phase != Masks || clampBelow || !terms.empty())
        return fail("the scores are clamped below other than once, over "
                    "every mask");
      if (getRankedType(side->second) != resultType)
        return fail("the clamp broadcasts the scores");
      clampBelow = side->first;
      match.ops.insert(maximum);
      current = side->second;
      continue;
    }
    return fail(llvm::formatv("the scores come from '{0}', which is not part "
                              "of attention",
                              def->getName()));
  }
}

} // namespace

namespace {

/// The values of an index vector laid along one of the scores' last two
/// axes: a constant of shape [1.., n, 1] (`alongKeys` false) or [1.., 1, n]
/// (true), integers or floats.
std::optional<SmallVector<double>> indexVector(Value value, int64_t length,
                                               bool alongKeys) {
  auto constant = value.getDefiningOp<tosa::ConstOp>();
  auto attr =
      constant ? dyn_cast<DenseElementsAttr>(constant.getValues()) : nullptr;
  auto type = attr ? dyn_cast<RankedTensorType>(attr.getType()) : nullptr;
  if (!type || type.getRank() < 2)
    return std::nullopt;
  int64_t rank = type.getRank();
  if (llvm::any_of(type.getShape().drop_back(2),
                   [](int64_t size) { return size != 1; }) ||
      type.getDimSize(rank - (alongKeys ? 1 : 2)) != length ||
      type.getDimSize(rank - (alongKeys ? 2 : 1)) != 1)
    return std::nullopt;
  SmallVector<double> values;
  if (auto floats = dyn_cast<DenseFPElementsAttr>(attr)) {
    for (const APFloat &value : floats.getValues<APFloat>())
      values.push_back(value.convertToDouble());
  } else if (auto ints = dyn_cast<DenseIntElementsAttr>(attr)) {
    if (ints.getElementType().getIntOrFloatBitWidth() == 1)
      return std::nullopt;
    for (const APInt &value : ints.getValues<APInt>())
      values.push_back(double(value.getSExtValue()));
  } else {
    return std::nullopt;
  }
  if (attr.isSplat())
    values.assign(length, values.front());
  return values;
}

/// The sizes of the last two axes of `value` where every other axis is 1.
std::optional<std::pair<int64_t, int64_t>> lastTwoAxes(Value value) {
  auto t = getRankedType(value);
  if (!t || t.getRank() < 2 ||
      llvm::any_of(t.getShape().drop_back(2),
                   [](int64_t size) { return size != 1; }))
    return std::nullopt;
  return std::pair(t.getDimSize(t.getRank() - 2), t.getDimSize(t.getRank() - 1));
}

/// Whether `reshape` keeps the last two axes of a value whose other axes
/// are all 1, changing only those leading unit axes.
bool movesLeadingUnitAxes(tosa::ReshapeOp reshape) {
  std::optional<std::pair<int64_t, int64_t>> in = lastTwoAxes(reshape.getInput1());
  return in && in == lastTwoAxes(reshape.getOutput());
}

/// Recognises a boolean mask computed, not given: query positions compared
/// with key positions, `keys <= queries` (`greater_equal(queries, keys)`,
/// or `greater` for `<`), each a constant vector along its axis, the key
/// positions rising. That is how exporters write causal masks, and at long
/// sequences the [Sq, Sk] comparison is too large for the importer to fold
/// into a constant. Each row then sees a prefix of the keys; the prefixes
/// must follow one causal band, checked row by row from the two vectors
/// without building the [Sq, Sk] table. Looks through reshapes that only
/// change leading unit dimensions.
std::optional<mlir::kiln::detail::Band>
matchCausalComparison(Value value, int64_t queryLength, int64_t keyLength,
                      bool hides) {
  // Through reshapes, negations and a boolean written as numbers and
  // compared with zero (`where(mask, s, -big)` on a float mask compares it
  // with 0: Flax's make_causal_mask), each negation swapping what the
  // comparison says.
  auto isBoolean = [](Value v) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    return type && type.getElementType().isInteger(1);
  };
  for (;;) {
    if (auto reshape = value.getDefiningOp<tosa::ReshapeOp>()) {
      if (!movesLeadingUnitAxes(reshape))
        return std::nullopt;
      value = reshape.getInput1();
    } else if (auto negation = value.getDefiningOp<tosa::LogicalNotOp>()) {
      value = negation.getInput1();
      hides = !hides;
    } else if (auto equal = value.getDefiningOp<tosa::EqualOp>()) {
      Value numbers = equal.getInput1(), zero = equal.getInput2();
      if (getSplatFloat(numbers) == 0.0)
        std::swap(numbers, zero);
      if (getSplatFloat(zero) != 0.0)
        return std::nullopt;
      if (auto cast = numbers.getDefiningOp<tosa::CastOp>();
          cast && isBoolean(cast.getInput())) {
        value = cast.getInput(); // `b == 0` is `not b`
        hides = !hides;
        continue;
      }
      // `select(b, c, 0) == 0` is `not b` for c != 0, and `select(b, 0, c)
      // == 0` is `b`: a float tril of ones compared with zero
      // (`masked_fill(ones(S, S).tril() == 0, -inf)`), which the importer
      // writes as a select at lengths too large to fold.
      auto select = numbers.getDefiningOp<tosa::SelectOp>();
      std::optional<double> onTrue =
          select ? getSplatFloat(select.getOnTrue()) : std::nullopt;
      std::optional<double> onFalse =
          select ? getSplatFloat(select.getOnFalse()) : std::nullopt;
      if (!onTrue || !onFalse || (*onTrue == 0.0) == (*onFalse == 0.0))
        return std::nullopt;
      value = select.getPred();
      if (*onFalse == 0.0)
        hides = !hides;
    } else {
      break;
    }
  }
  Operation *compare = value.getDefiningOp();
  if (!compare || !isa<tosa::GreaterEqualOp, tosa::GreaterOp>(compare) ||
      lastTwoAxes(value) != std::pair(queryLength, keyLength))
    return std::nullopt;
  // A comparison that says which keys are hidden (`masked_fill(future)`,
  // future = `keys > queries`) keeps the others: `keys > q` hides exactly
  // what `q >= keys` keeps, and `keys >= q` what `q > keys` keeps.
  bool strict = isa<tosa::GreaterOp>(compare) != hides;
  std::optional<SmallVector<double>> queries = indexVector(
      compare->getOperand(hides ? 1 : 0), queryLength, /*alongKeys=*/false);
  std::optional<SmallVector<double>> keys = indexVector(
      compare->getOperand(hides ? 0 : 1), keyLength, /*alongKeys=*/true);
  if (!queries || !keys)
    return std::nullopt;
  for (int64_t j = 1; j < keyLength; ++j)
    if (!((*keys)[j] > (*keys)[j - 1]))
      return std::nullopt;
  // Row i sees keys [0, last(i)]: the band is `j <= i + (Sk - Sq) + right`
  // for one `right`; a row that sees every key (clipped) needs only that
  // its band reaches the last key.
  SmallVector<int64_t> last;
  for (double query : *queries) {
    const double *end =
        strict ? std::lower_bound(keys->begin(), keys->end(), query)
               : std::upper_bound(keys->begin(), keys->end(), query);
    last.push_back((end - keys->begin()) - 1);
  }
  int64_t offset = keyLength - queryLength;
  std::optional<int64_t> right;
  for (int64_t i = 0; i < queryLength; ++i) {
    int64_t diagonal = i + offset;
    if (last[i] < diagonal)
      return std::nullopt; // a row that does not see its own position
    if (last[i] == keyLength - 1)
      continue;
    if (right && *right != last[i] - diagonal)
      return std::nullopt;
    right = last[i] - diagonal;
  }
  if (!right)
    return std::nullopt; // every key visible: not a mask at all
  for (int64_t i = 0; i < queryLength; ++i)
    if (last[i] == keyLength - 1 && i + offset + *right < keyLength - 1)
      return std::nullopt;
  return mlir::kiln::detail::Band{0, *right};
}

/// A value of a mask's computation over the query row i and key column j,
/// from constant index vectors: affine, `ai·i + aj·j + c`, while only added,
/// subtracted and negated; past any other op a function of the distance
/// d = i - j alone (its operands must then be), which `at` evaluates.
struct DistanceFunction {
  bool affine = true;
  double ai = 0, aj = 0, c = 0;
  std::function<double(int64_t)> at;

  /// Whether the value depends on i and j through i - j only.
  bool ofDistance() const { return !affine || ai == -aj; }
  double operator()(int64_t d) const { return affine ? ai * d + c : at(d); }
};

/// Reads `value` as a DistanceFunction over [Sq, Sk] scores (leading unit
/// axes aside), or nothing: a leaf that is not a constant splat or an
/// affine index vector along one axis, or an op not listed.
std::optional<DistanceFunction> readDistance(Value value, int64_t queryLength,
                                             int64_t keyLength, int depth) {
  if (depth == 0)
    return std::nullopt;
  auto read = [&](Value operand) {
    return readDistance(operand, queryLength, keyLength, depth - 1);
  };
  auto function = [](std::function<double(int64_t)> at) {
    DistanceFunction f;
    f.affine = false;
    f.at = std::move(at);
    return f;
  };
  if (std::optional<double> splat = getSplatFloat(value)) {
    DistanceFunction f;
    f.c = *splat;
    return f;
  }
  Operation *op = value.getDefiningOp();
  if (!op)
    return std::nullopt;
  if (auto constant = dyn_cast<tosa::ConstOp>(op)) {
    if (auto attr = dyn_cast<DenseIntElementsAttr>(constant.getValues());
        attr && attr.isSplat()) {
      DistanceFunction f;
      f.c = attr.getElementType().isInteger(1)
                ? (attr.getSplatValue<bool>() ? 1.0 : 0.0)
                : double(attr.getSplatValue<APInt>().getSExtValue());
      return f;
    }
    // An index vector along the queries or the keys, affine in its index.
    for (bool alongKeys : {false, true}) {
      std::optional<SmallVector<double>> values = indexVector(
          value, alongKeys ? keyLength : queryLength, alongKeys);
      if (!values || values->size() < 2)
        continue;
      double slope = (*values)[1] - (*values)[0], first = (*values)[0];
      for (size_t n = 0; n < values->size(); ++n)
        if ((*values)[n] != first + slope * double(n))
          return std::nullopt;
      DistanceFunction f;
      (alongKeys ? f.aj : f.ai) = slope;
      f.c = first;
      return f;
    }
    return std::nullopt;
  }
  if (auto reshape = dyn_cast<tosa::ReshapeOp>(op)) {
    if (!movesLeadingUnitAxes(reshape))
      return std::nullopt;
    return read(reshape.getInput1());
  }
  if (auto cast = dyn_cast<tosa::CastOp>(op)) {
    std::optional<DistanceFunction> x = read(cast.getInput());
    if (!x || !getElementTypeOrSelf(cast.getType()).isInteger(1))
      return x; // numbers keep their values (indices are small integers)
    if (!x->ofDistance())
      return std::nullopt;
    return function([x = *x](int64_t d) { return x(d) != 0.0 ? 1.0 : 0.0; });
  }
  if (isa<tosa::AddOp, tosa::SubOp>(op)) {
    std::optional<DistanceFunction> x = read(op->getOperand(0));
    std::optional<DistanceFunction> y = read(op->getOperand(1));
    if (!x || !y)
      return std::nullopt;
    double sign = isa<tosa::SubOp>(op) ? -1.0 : 1.0;
    if (x->affine && y->affine) {
      DistanceFunction f;
      f.ai = x->ai + sign * y->ai;
      f.aj = x->aj + sign * y->aj;
      f.c = x->c + sign * y->c;
      return f;
    }
    if (!x->ofDistance() || !y->ofDistance())
      return std::nullopt;
    return function([x = *x, y = *y, sign](int64_t d) { return x(d) + sign * y(d); });
  }
  if (auto negate = dyn_cast<tosa::NegateOp>(op)) {
    std::optional<DistanceFunction> x = read(negate.getInput1());
    if (!x)
      return std::nullopt;
    if (x->affine) {
      x->ai = -x->ai;
      x->aj = -x->aj;
      x->c = -x->c;
      return x;
    }
    return function([x = *x](int64_t d) { return -x(d); });
  }
  // Every other op needs its operands to be functions of the distance.
  SmallVector<DistanceFunction> operands;
  for (Value operand : op->getOperands()) {
    if (isa<tosa::shapeType>(operand.getType()))
      continue;
    std::optional<DistanceFunction> x = read(operand);
    if (!x || !x->ofDistance())
      return std::nullopt;
    operands.push_back(*x);
  }
  auto unary = [&](auto f) -> std::optional<DistanceFunction> {
    if (operands.size() != 1)
      return std::nullopt;
    return function([x = operands[0], f](int64_t d) { return f(x(d)); });
  };
  auto binary = [&](auto f) -> std::optional<DistanceFunction> {
    if (operands.size() != 2)
      return std::nullopt;
    return function([x = operands[0], y = operands[1], f](int64_t d) {
      return f(x(d), y(d));
    });
  };
  if (isa<tosa::AbsOp>(op))
    return unary([](double x) { return std::abs(x); });
  if (isa<tosa::LogicalNotOp>(op))
    return unary([](double x) { return x != 0.0 ? 0.0 : 1.0; });
  if (isa<tosa::GreaterEqualOp>(op))
    return binary([](double x, double y) { return x >= y ? 1.0 : 0.0; });
  if (isa<tosa::GreaterOp>(op))
    return binary([](double x, double y) { return x > y ? 1.0 : 0.0; });
  if (isa<tosa::EqualOp>(op))
    return binary([](double x, double y) { return x == y ? 1.0 : 0.0; });
  if (isa<tosa::LogicalAndOp>(op))
    return binary([](double x, double y) { return x != 0.0 && y != 0.0 ? 1.0 : 0.0; });
  if (isa<tosa::LogicalOrOp>(op))
    return binary([](double x, double y) { return x != 0.0 || y != 0.0 ? 1.0 : 0.0; });
  if (isa<tosa::SelectOp>(op) && operands.size() == 3)
    return function([p = operands[0], x = operands[1], y = operands[2]](int64_t d) {
      return p(d) != 0.0 ? x(d) : y(d);
    });
  return std::nullopt;
}

/// Recognises a boolean mask computed from query and key positions whose
/// value depends on their distance only (an encoder's local band
/// `|i - j| <= w`, a window `0 <= i - j < w`), at lengths too large to fold:
/// the keys each row sees, evaluated once per distance, must be one
/// interval around the row's own position, which is a band.
std::optional<mlir::kiln::detail::Band>
matchDistanceBand(Value value, int64_t queryLength, int64_t keyLength,
                  bool hides) {
  std::optional<DistanceFunction> mask =
      readDistance(value, queryLength, keyLength, /*depth=*/24);
  if (!mask || !mask->ofDistance() || keyLength < queryLength)
    return std::nullopt;
  // Key j of row i sits at e = j - (i + Sk - Sq) from the row's own
  // position; d = i - j = -e - (Sk - Sq).
  int64_t offset = keyLength - queryLength;
  int64_t first = -(keyLength - 1), last = keyLength - 1 - offset;
  auto visible = [&](int64_t e) { return ((*mask)(-e - offset) != 0.0) != hides; };
  if (!visible(0))
    return std::nullopt;
  int64_t left = 0, right = 0;
  while (left > first && visible(left - 1))
    --left;
  while (right < last && visible(right + 1))
    ++right;
  for (int64_t e = first; e <= last; ++e)
    if ((e < left || e > right) && visible(e))
      return std::nullopt; // not one interval
  if (left == first && right == last)
    return std::nullopt; // every key visible: not a mask at all
  return mlir::kiln::detail::Band{left == first ? 0 : 1 - left, right};
}

} // namespace

/// Recognises a constant causal (or sliding-window causal) mask: hidden
/// exactly when `j > i + (Sk - Sq)` (or `j <= i + (Sk - Sq) - W`), every
/// element checked. Returns the window (0 for plain causal) or nothing.
/// A boolean mask computed by comparing query and key positions is
/// recognised from the comparison (matchCausalComparison).
std::optional<mlir::kiln::detail::Band>
mlir::kiln::detail::matchCausalConstant(const MaskTerm &term,
                                        ArrayRef<int64_t> scoresShape) {
  // A constant tiled over leading axes (GPT-Neo's band buffer expanded to
  // [B, 1, S, S] at a batch too large to fold) holds the same planes.
  Value source = term.value;
  while (auto tile = source.getDefiningOp<tosa::TileOp>())
    source = tile.getInput1();
  auto constant = source.getDefiningOp<tosa::ConstOp>();
  if (!constant) {
    int64_t queryLength = scoresShape[2], keyLength = scoresShape[3];
    if (!term.isBoolean || ShapedType::isDynamic(queryLength) ||
        ShapedType::isDynamic(keyLength))
      return std::nullopt;
    if (std::optional<mlir::kiln::detail::Band> band = matchCausalComparison(
            term.value, queryLength, keyLength, term.inverted))
      return band;
    return matchDistanceBand(term.value, queryLength, keyLength,
                             term.inverted);
  }
  auto attr = dyn_cast<DenseElementsAttr>(constant.getValues());
  if (!attr || attr.isSplat())
    return std::nullopt;
  auto type = cast<RankedTensorType>(attr.getType());
  int64_t rank = type.getRank();
  int64_t queryLength = scoresShape[2], keyLength = scoresShape[3];
  if (rank < 2 || ShapedType::isDynamic(queryLength) ||
      ShapedType::isDynamic(keyLength) || keyLength < queryLength ||
      type.getDimSize(rank - 2) != queryLength ||
      type.getDimSize(rank - 1) != keyLength ||
      !type.hasStaticShape())
    return std::nullopt;

  // Leading dimensions (batch, heads) may hold copies of one [Sq, Sk] mask:
  // the importer folds an Expand of a small comparison into a constant over
  // the batch. Every copy must equal the first, element by element.
  int64_t plane = queryLength * keyLength;
  SmallVector<bool> visible;
  visible.reserve(plane);
  auto take = [&](int64_t index, bool keep) {
    if (index < plane) {
      visible.push_back(keep);
      return true;
    }
    return visible[index % plane] == keep;
  };
  int64_t index = 0;
  if (term.isBoolean) {
    if (!attr.getElementType().isInteger(1))
      return std::nullopt;
    for (bool keep : attr.getValues<bool>())
      if (!take(index++, keep != term.inverted))
        return std::nullopt;
  } else {
    auto floats = dyn_cast<DenseFPElementsAttr>(attr);
    if (!floats)
      return std::nullopt;
    // One fill for every hidden key (hiddenFill reads the first).
    std::optional<double> fill;
    for (const APFloat &value : floats.getValues<APFloat>()) {
      double v = value.convertToDouble();
      if (v != 0.0 && (!isMaskingValue(v) || (fill && *fill != v)))
        return std::nullopt;
      if (v != 0.0)
        fill = v;
      if (!take(index++, v == 0.0))
        return std::nullopt;
    }
  }

  // Every row sees an interval of keys around its diagonal; its bounds give
  // the window and the right bound, which every element must then follow.
  int64_t offset = keyLength - queryLength;
  int64_t window = 0, right = -1;
  bool rightClipped = true;
  for (int64_t i = 0; i < queryLength; ++i) {
    ArrayRef<bool> row = ArrayRef<bool>(visible).slice(i * keyLength, keyLength);
    int64_t diagonal = i + offset;
    if (!row[diagonal])
      return std::nullopt;
    int64_t first = diagonal, last = diagonal;
    while (first > 0 && row[first - 1])
      --first;
    while (last + 1 < keyLength && row[last + 1])
      ++last;
    if (first > 0)
      window = std::max(window, diagonal - first + 1);
    if (last + 1 < keyLength) {
      rightClipped = false;
      right = std::max(right, last - diagonal);
    }
  }
  if (rightClipped)
    right = std::max<int64_t>(queryLength - 1, 0);
  if (rightClipped && window == 0)
    return std::nullopt; // everything visible: not a mask at all
  for (int64_t i = 0; i < queryLength; ++i) {
    int64_t diagonal = i + offset;
    for (int64_t j = 0; j < keyLength; ++j) {
      bool expected = j <= diagonal + right &&
                      (window == 0 || j > diagonal - window);
      if (visible[i * keyLength + j] != expected)
        return std::nullopt;
    }
  }
  return mlir::kiln::detail::Band{window, right};
}

namespace {

/// Matches `select(seen, p, 0)` after a softmax whose scores were
/// `select(seen, s, -inf)` (`jax.nn.softmax(x, where=m)`): the hidden keys'
/// probabilities are 0 already, and a row that sees no key becomes zeros,
/// what the fused op gives it. Returns the guarded value and adds the op.
std::optional<Value> matchSeenGuard(Value probs, const KeyPredicate &seen,
                                    llvm::SetVector<Operation *> &ops) {
  if (!seen.pred || !probs.hasOneUse())
    return std::nullopt;
  auto select = dyn_cast<tosa::SelectOp>(*probs.user_begin());
  KeyPredicate kept;
  if (!select || select.getOutput().getType() != probs.getType() ||
      selectAround(select, isZero, kept) != probs ||
      !samePredicate(kept, seen))
    return std::nullopt;
  ops.insert(select);
  return select.getOutput();
}

/// Matches the guard exporters put after a softmax over masked scores,
/// `select(isnan(p), 0, p)` (written with `equal(p, p)`), which turns a row
/// that sees no key into zeros: what the fused op does for such a row.
/// Returns the guarded value and adds the guard's ops.
std::optional<Value> matchNanGuard(Value probs,
                                   llvm::SetVector<Operation *> &ops) {
  tosa::EqualOp isOrdered;
  tosa::SelectOp select;
  for (Operation *user : probs.getUsers()) {
    if (auto equal = dyn_cast<tosa::EqualOp>(user);
        equal && equal.getInput1() == probs && equal.getInput2() == probs &&
        (!isOrdered || isOrdered == equal))
      isOrdered = equal;
    else if (auto candidate = dyn_cast<tosa::SelectOp>(user);
             candidate && (!select || select == candidate))
      select = candidate;
    else
      return std::nullopt;
  }
  if (!isOrdered || !select || !isOrdered->hasOneUse() ||
      select.getOutput().getType() != probs.getType())
    return std::nullopt;
  auto isZero = [](Value value) {
    std::optional<double> splat = getSplatFloat(value);
    return splat && *splat == 0.0;
  };
  Operation *condition = *isOrdered->user_begin();
  if (condition == select && select.getPred() == isOrdered.getOutput() &&
      select.getOnTrue() == probs && isZero(select.getOnFalse())) {
    ops.insert(isOrdered);
    ops.insert(select);
    return select.getOutput();
  }
  auto isNan = dyn_cast<tosa::LogicalNotOp>(condition);
  if (isNan && isNan->hasOneUse() && *isNan->user_begin() == select &&
      select.getPred() == isNan.getOutput() && select.getOnFalse() == probs &&
      isZero(select.getOnTrue())) {
    ops.insert(isOrdered);
    ops.insert(isNan);
    ops.insert(select);
    return select.getOutput();
  }
  return std::nullopt;
}

/// Whether a function argument is declared finite (`kiln.finite`): the
/// caller promises it holds no infinity or NaN, e.g. a weight that a
/// framework lifted into an input and checked when it compiled the graph.
bool isDeclaredFinite(BlockArgument argument) {
  auto func = dyn_cast<FunctionOpInterface>(argument.getOwner()->getParentOp());
  return func && argument.getOwner()->isEntryBlock() &&
         func.getArgAttr(argument.getArgNumber(), kFiniteArgAttr);
}

/// Whether an additive float term can hide keys: its computation involves a
/// masking constant (-inf or a large negative fill) or a float value the
/// graph does not know (an argument not declared finite). Position biases
/// computed from weights and ranges (T5, ALiBi) cannot, nor can anything
/// computed from integers (BLOOM's ALiBi counts positions over the padding
/// mask), whatever computed those.
bool mayHideKeys(Value value, int depth = 24) {
  // An integer tensor holds no infinity or NaN.
  if (isa<IntegerType>(getElementTypeOrSelf(value.getType())))
    return false;
  Operation *def = value.getDefiningOp();
  // Converted to f32 or bf16 an integer stays finite (|x| < 2^64, far below
  // their largest value); to f16, one wider than 16 bits may not.
  if (auto cast = dyn_cast_or_null<tosa::CastOp>(def))
    if (auto from = dyn_cast<IntegerType>(
            getElementTypeOrSelf(cast.getInput().getType())))
      return isa<Float16Type>(getElementTypeOrSelf(value.getType())) &&
             from.getWidth() > 16;
  if (!def) {
    auto argument = cast<BlockArgument>(value);
    return !isDeclaredFinite(argument);
  }
  // A gather's indices only choose among its values' elements.
  if (auto gather = dyn_cast<tosa::GatherOp>(def))
    return depth == 0 || mayHideKeys(gather.getValues(), depth - 1);
  if (auto constant = dyn_cast<tosa::ConstOp>(def)) {
    auto floats = dyn_cast<DenseFPElementsAttr>(constant.getValues());
    if (!floats)
      return false;
    if (floats.isSplat())
      return isMaskingValue(floats.getSplatValue<APFloat>().convertToDouble());
    return llvm::any_of(floats.getValues<APFloat>(), [](const APFloat &v) {
      return isMaskingValue(v.convertToDouble());
    });
  }
  if (depth == 0 || def->getNumOperands() == 0)
    return def->getNumOperands() != 0 || !isa<tosa::ConstShapeOp>(def);
  return llvm::any_of(def->getOperands(), [&](Value operand) {
    return mayHideKeys(operand, depth - 1);
  });
}

/// The value that a constant mask writes for hidden keys: the select's
/// fill for a boolean, the masking value for an additive constant.
double hiddenFill(const MaskTerm &term) {
  if (term.isBoolean)
    return term.fill;
  auto floats = cast<DenseFPElementsAttr>(
      term.value.getDefiningOp<tosa::ConstOp>().getValues());
  for (const APFloat &value : floats.getValues<APFloat>())
    if (value.convertToDouble() != 0.0)
      return value.convertToDouble() * term.scale;
  return 0.0;
}

/// Something that hides keys in a site: a band (causal, window) found in a
/// constant, a boolean term, or an additive term that may hide.
struct Hider {
  /// Where it applies: the term's index (0 is nearest the softmax), plus 0.5
  /// for an additive term inside a select that a band replaces. Larger is
  /// applied earlier.
  double position;
  /// A band pattern (the op's causal/window/window_right).
  std::optional<Band> band;
  /// The score of a hidden key; NaN when unknown (an additive term).
  double fill = std::nan("");
  /// Whether the fill replaces the score rather than being added to it.
  bool replaces = true;
};

/// Turns the site's mask and bias terms into the op's causal, window,
/// window_right, masked_score, mask and bias, keeping what the graph
/// computes on every row, fully hidden ones included (see the op's
/// masked_score); with `paddedRowsFree`, rows that see no key may differ.
LogicalResult resolveMasks(ArrayRef<MaskTerm> terms, AttentionMatch &match,
                           bool paddedRowsFree, std::string &whyNot) {
  auto fail = [&](const Twine &reason) {
    whyNot = reason.str();
    return failure();
  };
  int64_t batch = match.scoresShape[0], numHeads = match.scoresShape[1];

  // Pass 1: band patterns, in a constant term, in one side of a boolean term
  // that combines it with another (And of keeps, Or of hides), or selecting
  // between an additive mask and a fill (ModernBERT's local window).
  SmallVector<MaskTerm> remaining(terms.begin(), terms.end());
  SmallVector<Hider> hiders;
  SmallVector<Operation *> bandOps;
  SmallVector<bool> isBandTerm(terms.size(), false);
  SmallVector<bool> isInsideSelect(terms.size(), false);
  for (auto [index, term] : llvm::enumerate(terms)) {
    if (std::optional<Band> band =
            matchCausalConstant(term, match.scoresShape)) {
      hiders.push_back({double(index), band, hiddenFill(term),
                        term.isBoolean && term.replaces});
      isBandTerm[index] = true;
      continue;
    }
    Operation *combiner = term.value.getDefiningOp();
    if (!combiner)
      continue;
    if (!term.isBoolean) {
      if (auto minimum = dyn_cast<tosa::MinimumOp>(combiner)) {
        // Min of a band constant (0 / fill) and a mask that is 0 or the same
        // fill by construction (select(keep, 0, fill)): a key takes the fill
        // when either hides it, which is the band plus the keep, one fill.
        for (unsigned side = 0; side < 2; ++side) {
          MaskTerm pattern = term;
          pattern.value = minimum->getOperand(side);
          std::optional<Band> band =
              matchCausalConstant(pattern, match.scoresShape);
          auto keep =
              minimum->getOperand(1 - side).getDefiningOp<tosa::SelectOp>();
          if (!band || !keep)
            continue;
          std::optional<double> onTrue = getSplatFloat(keep.getOnTrue());
          std::optional<double> onFalse = getSplatFloat(keep.getOnFalse());
          double fill = hiddenFill(pattern);
          bool inverted = onTrue && *onTrue == fill && onFalse && *onFalse == 0;
          if (!isAbsorbingMask(fill) ||
              !(inverted || (onTrue && *onTrue == 0 && onFalse &&
                             *onFalse == fill)))
            continue;
          hiders.push_back({double(index), band, fill, false});
          MaskTerm rest = term;
          rest.isBoolean = true;
          rest.inverted = inverted;
          rest.value = keep.getPred();
          rest.fill = fill;
          rest.replaces = false;
          remaining[index] = rest;
          bandOps.append({minimum, keep});
          if (Operation *def = pattern.value.getDefiningOp())
            bandOps.push_back(def);
          break;
        }
        continue;
      }
      auto select = dyn_cast<tosa::SelectOp>(combiner);
      if (!select)
        continue;
      for (bool inverted : {false, true}) {
        Value fillValue = inverted ? select.getOnTrue() : select.getOnFalse();
        Value inner = inverted ? select.getOnFalse() : select.getOnTrue();
        std::optional<double> fill = getSplatFloat(fillValue);
        MaskTerm pattern = term;
        pattern.value = select.getPred();
        pattern.isBoolean = true;
        pattern.inverted = inverted;
        if (!fill || !isAbsorbingMask(*fill) ||
            getRankedType(inner) != getRankedType(term.value))
          continue;
        std::optional<Band> band =
            matchCausalConstant(pattern, match.scoresShape);
        if (!band)
          continue;
        hiders.push_back({double(index), band, *fill, true});
        remaining[index].value = inner;
        isInsideSelect[index] = true;
        bandOps.push_back(select);
        if (Operation *def = pattern.value.getDefiningOp())
          bandOps.push_back(def);
        break;
      }
      continue;
    }
    if (!(term.inverted ? isa<tosa::LogicalOrOp>(combiner)
                        : isa<tosa::LogicalAndOp>(combiner)))
      continue;
    for (unsigned side = 0; side < 2; ++side) {
      MaskTerm pattern = term;
      pattern.value = combiner->getOperand(side);
      std::optional<Band> band =
          matchCausalConstant(pattern, match.scoresShape);
      if (!band)
        continue;
      hiders.push_back({double(index), band, term.fill, term.replaces});
      remaining[index].value = combiner->getOperand(1 - side);
      bandOps.push_back(combiner);
      if (Operation *def = pattern.value.getDefiningOp())
        bandOps.push_back(def);
      break;
    }
  }

  // Every query row has a diagonal key (j = i + Sk - Sq >= 0) when there
  // are no more queries than keys.
  int64_t queryLength = match.scoresShape[2], keyLength = match.scoresShape[3];
  bool diagonalAlwaysInside = !ShapedType::isDynamic(queryLength) &&
                              !ShapedType::isDynamic(keyLength) &&
                              queryLength <= keyLength;

  // The decision, with or without the bands taken as attributes.
  auto decide = [&](bool useBands, std::optional<double> &maskedScore,
                    bool &exact) {
    SmallVector<Hider> all;
    if (useBands)
      all.append(hiders.begin(), hiders.end());
    for (auto [index, term] : llvm::enumerate(remaining)) {
      if (useBands && isBandTerm[index])
        continue;
      const MaskTerm &current = useBands ? term : terms[index];
      double position = index + (useBands && isInsideSelect[index] ? 0.5 : 0);
      if (current.isBoolean)
        all.push_back({position, std::nullopt, current.fill, current.replaces});
      else if (mayHideKeys(current.value))
        all.push_back({position, std::nullopt, std::nan(""), false});
    }
    maskedScore.reset();
    exact = true;
    auto finite = [](const Hider &h) {
      return !std::isnan(h.fill) && !std::isinf(h.fill);
    };
    SmallVector<Hider> finiteHiders;
    for (const Hider &hider : all)
      if (finite(hider))
        finiteHiders.push_back(hider);
    if (finiteHiders.empty())
      return; // -inf fills and additive terms: exact as they are.
    // Bands alone (one, or several written one over the other: GPT-Neo's
    // local window replaced by finfo.min, the model's causal mask added on
    // top): every row sees its diagonal key, which every band keeps, so no
    // fill (nor fills summed to -inf) decides a row.
    if (llvm::all_of(all, [](const Hider &h) { return h.band.has_value(); }) &&
        (all.size() == 1 || diagonalAlwaysInside))
      return;
    double fill = finiteHiders.front().fill;
    double innermost = 0;
    for (const Hider &hider : all)
      innermost = std::max(innermost, hider.position);
    for (const Hider &hider : all) {
      // One fill for every hidden key: the op adds the additive terms, then
      // writes masked_score over every hidden key. So each hider must write
      // the same finite fill by replacing the score, except the innermost,
      // which may add it or be an additive mask of its own.
      bool ok = hider.position == innermost
                    ? (finite(hider) && hider.fill == fill) ||
                          std::isnan(hider.fill)
                    : finite(hider) && hider.fill == fill && hider.replaces;
      if (!ok) {
        exact = false;
        return;
      }
    }
    maskedScore = fill;
  };

  std::optional<double> maskedScore;
  bool exact = false;
  bool useBands = !hiders.empty();
  std::string masking;
  decide(useBands, maskedScore, exact);
  if (!exact && useBands && !paddedRowsFree) {
    decide(/*useBands=*/false, maskedScore, exact);
    if (exact) {
      useBands = false;
      masking = "causal kept in the mask: its finite fill adds to another "
                "mask's, and a row with no visible key depends on both "
                "(--padded-rows=free takes causal)";
    }
  }
  if (paddedRowsFree && (maskedScore || !exact)) {
    // Speed over rows that see no key: no fill, so blocks past the causal
    // diagonal are skipped.
    maskedScore.reset();
    exact = true;
    masking = "padded rows free: a row that sees no key gives zeros, not the "
              "graph's average over filled scores (--padded-rows=free)";
  }
  if (!exact) {
    if (!paddedRowsFree)
      return fail("finite-fill masks combine in a way the op cannot express "
                  "for rows that see no key (--padded-rows=free fuses them, "
                  "giving such rows zeros)");
  } else if (maskedScore && masking.empty()) {
    masking = llvm::formatv("exact: hidden keys score {0:e} as in the graph "
                            "(masked_score); a row that sees no key averages "
                            "V over every key",
                            *maskedScore)
                  .str();
  }

  // Apply: causal attributes, then the remaining terms as operands.
  SmallVector<MaskTerm> kept;
  if (useBands) {
    // Several bands hide what any of them hides: the narrowest bounds.
    std::optional<int64_t> right;
    for (const Hider &hider : hiders) {
      right = right ? std::min(*right, hider.band->right) : hider.band->right;
      if (hider.band->window > 0)
        match.window = match.window
                           ? std::min(*match.window, hider.band->window)
                           : hider.band->window;
    }
    if (*right == 0)
      match.causal = true;
    else
      match.windowRight = *right;
    for (Operation *op : bandOps)
      match.ops.insert(op);
  }
  for (auto [index, term] : llvm::enumerate(terms)) {
    if (useBands && isBandTerm[index]) {
      if (Operation *def = term.value.getDefiningOp())
        match.ops.insert(def);
      continue;
    }
    if (useBands && isInsideSelect[index] &&
        isZeroTensor(remaining[index].value))
      continue; // the select's other side adds nothing
    const MaskTerm &operand = useBands ? remaining[index] : term;
    // A zero tensor added to the scores (T5's cross-attention adds a
    // `zeros` position bias) changes nothing: no bias operand for it.
    if (!operand.isBoolean && isZeroTensor(operand.value))
      continue;
    kept.push_back(operand);
  }
  match.maskedScore = maskedScore;
  match.masking = masking;

  // One float term that is a bias plus a mask adding only zeros or
  // absorbing fills (T5: position_bias + the extended padding mask):
  // s + (b + m) equals (s + b) + m, the op's order, so the two become the
  // op's bias and mask and the dense sum is not read (the sum stays in the
  // graph for its other users; unused, it is dropped with the site).
  if (kept.size() == 1 && !kept[0].isBoolean)
    if (std::optional<std::pair<Value, Value>> parts =
            splitBiasAndMask(kept[0].value)) {
      MaskTerm bias = kept[0];
      bias.value = parts->first;
      kept[0].value = parts->second;
      kept.push_back(bias); // nearest the matmul: last before the reverse
    }
  // A mask the graph broadcast to [.., Sq, Sk] itself (Expand of a padding
  // mask): the op broadcasts, so it takes the unexpanded tensor.
  for (MaskTerm &term : kept)
    while (auto tile = term.value.getDefiningOp<tosa::TileOp>()) {
      auto inputType = getRankedType(tile.getInput1());
      std::optional<SmallVector<int64_t>> multiples =
          getConstShape(tile.getMultiples());
      if (!inputType || !multiples || term.scoresRank != 4 ||
          llvm::any_of(llvm::enumerate(*multiples), [&](auto entry) {
            return entry.value() != 1 &&
                   inputType.getDimSize(entry.index()) != 1;
          }))
        break;
      match.ops.insert(tile);
      term.value = tile.getInput1();
    }

  for (const MaskTerm &term : kept) {
    auto type = getRankedType(term.value);
    if (!type)
      return fail("a mask is unranked");
    if (term.scoresRank == 3 && batch != 1) {
      int64_t leading = type.getDimSize(0);
      if (leading != 1 &&
          (ShapedType::isDynamic(leading) ||
           fitLeading(type, batch, numHeads) != LeadingFit::Reshape))
        return fail("a mask applied before the split into [batch, heads] "
                    "cannot be split the same way");
    }
    if (term.scoresRank == 3 &&
        llvm::count_if(type.getShape(), ShapedType::isDynamic) > 1)
      return fail("a rank-3 mask has more than one dynamic size");
  }
  // Terms are collected from the softmax backwards: the one nearest the
  // matmul comes last.
  std::reverse(kept.begin(), kept.end());
  unsigned numBoolean =
      llvm::count_if(kept, [](const MaskTerm &term) { return term.isBoolean; });
  if (numBoolean > 1)
    return fail("more than one boolean mask");
  if (kept.size() > 2)
    return fail("more than two masks and biases");
  if (numBoolean == 1) {
    // The boolean term is the mask; a float term next to it is the bias.
    for (const MaskTerm &term : kept)
      (term.isBoolean ? match.maskTerm : match.biasTerm) = term;
  } else if (kept.size() == 2) {
    match.biasTerm = kept[0];
    match.maskTerm = kept[1];
  } else if (kept.size() == 1) {
    match.maskTerm = kept[0];
  }
  if (match.maskedScore && !match.causal && !match.windowRight &&
      !match.maskTerm.isBoolean)
    match.maskedScore.reset();
  return success();
}

/// The probabilities quantised to e4m3 and back as ONNX's saturating
/// QuantizeLinear/DequantizeLinear are imported: `p · r`, clamped to
/// ±448, cast to f8E4M3FN, cast back to p's type, times `s`, with r the
/// f32 rounding of 1/s and every value used once. Gives the dequantised
/// value and s, and adds the ops to `ops`.
std::optional<std::pair<Value, double>>
matchProbQuantisation(Value probs, llvm::SetVector<Operation *> &ops) {
  SmallVector<Operation *> chain;
  Value value = probs;
  auto next = [&]() -> Operation * {
    if (!value.hasOneUse())
      return nullptr;
    Operation *user = *value.user_begin();
    chain.push_back(user);
    value = user->getResult(0);
    return user;
  };
  auto splatOther = [&](Operation *op, Value known) -> std::optional<double> {
    for (Value operand : op->getOperands())
      if (operand != known && getRankedType(operand))
        return getSplatFloat(operand);
    return std::nullopt;
  };
  Value in = value;
  auto scaleUp = dyn_cast_or_null<tosa::MulOp>(next());
  if (!scaleUp)
    return std::nullopt;
  std::optional<double> inverse = splatOther(scaleUp, in);
  in = value;
  auto low = dyn_cast_or_null<tosa::MinimumOp>(next());
  std::optional<double> high = low ? splatOther(low, in) : std::nullopt;
  in = value;
  auto clampLow = dyn_cast_or_null<tosa::MaximumOp>(next());
  std::optional<double> floor =
      clampLow ? splatOther(clampLow, in) : std::nullopt;
  auto narrow = dyn_cast_or_null<tosa::CastOp>(next());
  auto widen = dyn_cast_or_null<tosa::CastOp>(next());
  in = value;
  auto scaleDown = dyn_cast_or_null<tosa::MulOp>(next());
  if (!inverse || !high || *high != 448.0 || !floor || *floor != -448.0 ||
      !narrow || !widen || !scaleDown ||
      !isa<Float8E4M3FNType>(getElementTypeOrSelf(narrow.getType())) ||
      widen.getType() != probs.getType() ||
      scaleDown.getType() != probs.getType())
    return std::nullopt;
  std::optional<double> scale = splatOther(scaleDown, in);
  if (!scale || !(*scale > 0) ||
      static_cast<float>(*inverse) != static_cast<float>(1.0 / *scale))
    return std::nullopt;
  ops.insert(chain.begin(), chain.end());
  return std::pair(value, *scale);
}

/// Whether `value` reaches a cast to f8E4M3FN through a few elementwise
/// ops of one use each (QuantizeLinear's divide and clamp).
bool quantizesToFloat8(Value value) {
  for (int depth = 0; depth < 4 && value.hasOneUse(); ++depth) {
    Operation *user = *value.user_begin();
    if (auto cast = dyn_cast<tosa::CastOp>(user))
      return isa<Float8E4M3FNType>(getElementTypeOrSelf(cast.getType()));
    if (!isa<tosa::MulOp, tosa::MinimumOp, tosa::MaximumOp, tosa::ClampOp>(
            user))
      return false;
    value = user->getResult(0);
  }
  return false;
}

/// Reads a whole attention site around the softmax starting at `maxOp`.
FailureOr<AttentionMatch> matchAttention(tosa::ReduceMaxOp maxOp,
                                         std::string &whyNot,
                                         bool paddedRowsFree = false,
                                         Operation **stoppedAt = nullptr,
                                         bool quantisedProbs = false) {
  auto fail = [&](const Twine &reason) {
    whyNot = reason.str();
    return failure();
  };
  FailureOr<SoftmaxOps> softmax = matchSoftmax(maxOp, whyNot);
  if (failed(softmax))
    return failure();
  AttentionMatch match;
  for (Operation *op :
       {maxOp.getOperation(), softmax->sub.getOperation(),
        softmax->exp.getOperation(), softmax->sum.getOperation(),
        softmax->reciprocal.getOperation(), softmax->normalize.getOperation(),
        softmax->widen.getOperation(), softmax->narrow.getOperation(),
        softmax->shift.getOperation(), softmax->shiftMax.getOperation(),
        softmax->sumGuard.getOperation()})
    if (op)
      match.ops.insert(op);

  // Forwards: the probabilities must feed only the left side of P·V.
  Value probs = softmax->output;
  bool guardedFiniteFill = false;
  tosa::MatMulOp outputMatmul;
  bool collapsed = false;
  SmallVector<int32_t, 4> probsPerms;
  while (!outputMatmul) {
    if (std::optional<Value> guarded = matchNanGuard(probs, match.ops)) {
      probs = *guarded;
      continue;
    }
    if (std::optional<Value> guarded =
            matchSeenGuard(probs, softmax->seen, match.ops)) {
      probs = *guarded;
      guardedFiniteFill = !std::isinf(softmax->seenFill);
      continue;
    }
    if (quantisedProbs && !match.probScale)
      if (std::optional<std::pair<Value, double>> quantised =
              matchProbQuantisation(probs, match.ops)) {
        probs = quantised->first;
        match.probScale = quantised->second;
        continue;
      }
    if (!probs.hasOneUse())
      return fail("the probabilities have other users");
    Operation *user = *probs.user_begin();
    if (auto matmul = dyn_cast<tosa::MatMulOp>(user)) {
      if (matmul.getA() != probs)
        return fail("the probabilities are the right-hand side of the "
                    "product (V·P)");
      outputMatmul = matmul;
    } else if (isFloatCast(user)) {
      probs = user->getResult(0);
    } else if (auto transpose = dyn_cast<tosa::TransposeOp>(user)) {
      ArrayRef<int32_t> perms = transpose.getPerms();
      if (collapsed || !probsPerms.empty() || perms.size() != 4 ||
          perms.back() != 3)
        return fail("the probabilities are transposed other than among "
                    "their leading axes");
      probsPerms.assign(perms.begin(), perms.end());
      probs = transpose.getOutput();
    } else if (auto reshape = dyn_cast<tosa::ReshapeOp>(user)) {
      if (collapsed || !isMergeOfAxes(getRankedType(probs),
                                      getRankedType(reshape.getOutput()), 0, 1))
        return fail("the probabilities are reshaped other than by merging "
                    "[batch, heads]");
      collapsed = true;
      probs = reshape.getOutput();
    } else {
      if (quantizesToFloat8(probs))
        return fail("the probabilities are quantised to float8 before P·V "
                    "(QuantizeLinear): the op does not quantise them");
      return fail(llvm::formatv("the probabilities feed '{0}', not a matmul "
                                "with V",
                                user->getName()));
    }
    match.ops.insert(user);
  }

  // Backwards: masks, softcap and scale down to QKᵀ.
  tosa::MatMulOp scoresMatmul;
  SmallVector<MaskTerm> terms;
  if (failed(matchScores(softmax->input, match, scoresMatmul, terms, whyNot,
                         stoppedAt)))
    return failure();
  if (stoppedAt)
    *stoppedAt = nullptr;
  // ESPnet's `softmax(s.masked_fill(m, finfo.min)).masked_fill(m, 0)`: a
  // key the mask hides scores 0 where its row sees another (exp(min - max)
  // is 0) and the guard zeroes a row that sees none, which is what the op
  // gives a mask of -inf. Taken for a site of that one mask only: with
  // other terms that may hide keys a row could be hidden by them, which
  // the guard does not cover.
  if (guardedFiniteFill) {
    if (terms.empty() || !terms.front().isBoolean ||
        terms.front().fill != softmax->seenFill ||
        llvm::any_of(llvm::drop_begin(terms), [](const MaskTerm &term) {
          return term.isBoolean || mayHideKeys(term.value);
        }))
      return fail("the probabilities are zeroed after a softmax whose "
                  "scores other terms may hide too");
    terms.front().fill = -std::numeric_limits<double>::infinity();
  }
  // A permutation of the scores' leading axes must be undone on the
  // probabilities: P·V then reads them as Q·Kᵀ wrote them.
  if (match.scoresPerms.empty() != probsPerms.empty())
    return fail(probsPerms.empty()
                    ? "the scores are transposed but the probabilities are "
                      "not transposed back"
                    : "the probabilities are transposed but the scores were "
                      "not");
  for (size_t i = 0; i < probsPerms.size(); ++i)
    if (match.scoresPerms[probsPerms[i]] != static_cast<int32_t>(i))
      return fail("the probabilities are not transposed back to the "
                  "scores' order");

  auto scoresType = getRankedType(softmax->input);
  if (match.mergedScoresType) {
    // The scores were merged to rank 3 only for the softmax: the split back
    // to rank 4 must be in the chain, the terms being laid out in it.
    if (!scoresMatmul || getRankedType(scoresMatmul.getOutput()).getRank() != 3)
      return fail("the scores are merged to rank 3 before the softmax but "
                  "not computed in rank 3");
    scoresType = match.mergedScoresType;
  }
  if (!probsPerms.empty())
    match.scoresShape = llvm::to_vector(llvm::map_range(
        probsPerms, [&](int32_t axis) { return scoresType.getDimSize(axis); }));
  else if (scoresType.getRank() == 4)
    match.scoresShape = llvm::to_vector(scoresType.getShape());
  else
    match.scoresShape = {1, scoresType.getDimSize(0), scoresType.getDimSize(1),
                         scoresType.getDimSize(2)};
  int64_t batch = match.scoresShape[0], numHeads = match.scoresShape[1];

  // Q, K and V.
  SmallVector<Operation *> operandOps;
  match.query =
      traceOperand(scoresMatmul.getA(), /*foldScale=*/true, operandOps);
  match.key = traceOperand(scoresMatmul.getB(), /*foldScale=*/true, operandOps);
  match.value =
      traceOperand(outputMatmul.getB(), /*foldScale=*/false, operandOps);
  match.ops.insert(operandOps.begin(), operandOps.end());
  match.scale *= match.query.scale * match.key.scale;
  for (auto [operand, source] :
       {std::pair(scoresMatmul.getA(), &match.query),
        std::pair(scoresMatmul.getB(), &match.key)})
    if (std::optional<OuterScale> outer = findOuterScale(source->base))
      if (tracedChainHasOneUse(operand, source->base)) {
        match.scale *= outer->factor;
        match.outerScales.push_back(*outer);
      }
  if (match.query.groups != 1)
    return fail("the query is repeated across heads");
  if (match.key.groups != match.value.groups)
    return fail("the keys and the values are repeated differently across "
                "heads");
  int64_t groups = match.key.groups;
  if (groups > 1 && (ShapedType::isDynamic(numHeads) || numHeads % groups))
    return fail("the KV-head repeat does not divide the query heads");
  int64_t numKvHeads = groups > 1 ? numHeads / groups : numHeads;

  // Q and K widened to f32 from V's 16-bit type before their product
  // (`q.float() @ k.float().T`, V left in bf16, so the probabilities are
  // rounded to bf16 for P·V): the widening is exact, and the product of
  // widened values is the 16-bit product accumulated in f32, which is what
  // the 16-bit kernels compute. The op takes the values before the cast.
  Type valueType = getElementTypeOrSelf(match.value.base);
  if (isa<Float16Type, BFloat16Type>(valueType))
    for (OperandSource *source : {&match.query, &match.key})
      if (auto widen = source->base.getDefiningOp<tosa::CastOp>())
        if (getElementTypeOrSelf(widen.getInput()) == valueType &&
            getElementTypeOrSelf(widen.getOutput()).isF32())
          source->base = widen.getInput();

  // Q computed in f32 beside K and V in a 16-bit type (CodeGen's rotary
  // query in f32, its key rounded to bf16 and widened, V in bf16): the site
  // runs in the widest type, the others widened exactly. Rounding Q instead
  // would change what the graph computes.
  Type elementType = getElementTypeOrSelf(match.query.base);
  for (Value base : {match.key.base, match.value.base}) {
    Type type = getElementTypeOrSelf(base);
    if (type == elementType)
      continue;
    // f16, bf16 and f32 only: an e4m3 operand carries descales of its own.
    auto plainFloat = [](Type t) -> FloatType {
      return isa<Float16Type, BFloat16Type, Float32Type>(t) ? cast<FloatType>(t)
                                                             : FloatType();
    };
    FloatType from = plainFloat(type), to = plainFloat(elementType);
    if (from && to && widensExactly(to, from))
      elementType = type;
    else if (!from || !to || !widensExactly(from, to))
      return fail("Q, K and V have different element types");
  }
  for (Value base : {match.query.base, match.key.base, match.value.base})
    if (getElementTypeOrSelf(base) != elementType)
      match.widenedTo = elementType;
  if (!isa<Float16Type, BFloat16Type, Float32Type>(elementType))
    return fail("Q, K and V are not f16, bf16 or f32");
  for (auto [name, source, heads] :
       {std::tuple("query", &match.query, numHeads),
        std::tuple("key", &match.key, numKvHeads),
        std::tuple("value", &match.value, numKvHeads)}) {
    auto type = getRankedType(source->base);
    if (!type || fitLeading(type, batch, heads) == LeadingFit::Impossible)
      return fail(llvm::formatv("the {0} cannot be viewed as [batch, heads, "
                                "seq, dim] without dynamic sizes",
                                name));
  }
  // The value head dim may differ from the query/key one (multi-head latent
  // attention): the op takes both.

  // The value that carries the result: the split back to rank 4 and a cast
  // back to the element type, when present.
  Value result = outputMatmul.getOutput();
  match.ops.insert(outputMatmul);
  if (result.hasOneUse())
    if (auto reshape = dyn_cast<tosa::ReshapeOp>(*result.user_begin())) {
      auto splitType = getRankedType(reshape.getOutput());
      if (splitType.getRank() == 4 &&
          isMergeOfAxes(splitType, getRankedType(result), 0, 1) &&
          fitLeading(splitType, batch, numHeads) == LeadingFit::AsIs) {
        result = reshape.getOutput();
        match.ops.insert(reshape);
      }
    }
  if (getElementTypeOrSelf(result) != elementType && result.hasOneUse())
    if (Operation *user = *result.user_begin();
        isFloatCast(user) &&
        getElementTypeOrSelf(user->getResult(0)) == elementType) {
      result = user->getResult(0);
      match.ops.insert(user);
    }
  match.result = result;

  if (failed(resolveMasks(terms, match, paddedRowsFree, whyNot)))
    return failure();

  // The fused op goes right before the op that defines the result; every
  // op of the site must live in that block for the operands to dominate it.
  Block *block = maxOp->getBlock();
  if (llvm::any_of(match.ops,
                   [&](Operation *op) { return op->getBlock() != block; }))
    return fail("the attention spans several blocks");
  return match;
}

//===----------------------------------------------------------------------===//
// The rewrite
//===----------------------------------------------------------------------===//

Value createReshape(PatternRewriter &rewriter, Location loc, Value input,
                    ArrayRef<int64_t> shape) {
  auto inputType = cast<RankedTensorType>(input.getType());
  SmallVector<int64_t> values =
      llvm::to_vector(llvm::map_range(shape, [](int64_t size) {
        return ShapedType::isDynamic(size) ? int64_t(-1) : size;
      }));
  auto shapeAttr = DenseIntElementsAttr::get(
      RankedTensorType::get({static_cast<int64_t>(values.size())},
                            rewriter.getIndexType()),
      values);
  Value shapeValue = tosa::ConstShapeOp::create(
      rewriter, loc, tosa::shapeType::get(rewriter.getContext(), values.size()),
      shapeAttr);
  return tosa::ReshapeOp::create(rewriter, loc, inputType.clone(shape), input,
                                 shapeValue);
}

Value createSwapInnermost(PatternRewriter &rewriter, Location loc,
                          Value input) {
  auto type = cast<RankedTensorType>(input.getType());
  SmallVector<int64_t> shape(type.getShape());
  std::swap(shape[2], shape[3]);
  return tosa::TransposeOp::create(rewriter, loc, type.clone(shape), input,
                                   rewriter.getDenseI32ArrayAttr({0, 1, 3, 2}));
}

/// Builds the rank-4 `[B, H, S, D]` operand from a traced source.
Value materialize(PatternRewriter &rewriter, Location loc,
                  const OperandSource &source, bool wantSwapped, int64_t batch,
                  int64_t heads) {
  Value value = source.base;
  auto type = cast<RankedTensorType>(value.getType());
  if (fitLeading(type, batch, heads) == LeadingFit::Reshape) {
    ArrayRef<int64_t> trailing = type.getShape().take_back(2);
    value = createReshape(rewriter, loc, value,
                          {batch, heads, trailing[0], trailing[1]});
  }
  if (source.transposed == wantSwapped)
    return value;
  // Fold the swap into a transpose that produced the base (e.g. an
  // exporter's [0,2,3,1] from [B,S,H,D] to Kᵀ) rather than stacking two.
  if (auto producer = value.getDefiningOp<tosa::TransposeOp>();
      producer && producer.getPerms().size() == 4) {
    ArrayRef<int32_t> perms = producer.getPerms();
    SmallVector<int32_t> composed = {perms[0], perms[1], perms[3], perms[2]};
    auto type = cast<RankedTensorType>(value.getType());
    SmallVector<int64_t> shape(type.getShape());
    std::swap(shape[2], shape[3]);
    Value result = tosa::TransposeOp::create(
        rewriter, loc, type.clone(shape), producer.getInput1(),
        rewriter.getDenseI32ArrayAttr(composed));
    return result;
  }
  return createSwapInnermost(rewriter, loc, value);
}

/// The shift operand of a floating-point tosa.mul (zero).
Value zeroShift(PatternRewriter &rewriter, Location loc) {
  auto type = RankedTensorType::get({1}, rewriter.getI8Type());
  return tosa::ConstOp::create(
      rewriter, loc, type,
      DenseElementsAttr::get(type, rewriter.getI8IntegerAttr(0)));
}

/// Brings a mask term to the fused op's `[B, Hq, Sq, Sk]` indexing.
Value materializeMask(PatternRewriter &rewriter, Location loc,
                      const MaskTerm &term, int64_t batch, int64_t heads) {
  Value value = term.value;
  if (term.inverted)
    value = tosa::LogicalNotOp::create(rewriter, loc, value.getType(), value);
  if (term.scale != 1.0 && !floatConstant(value)) {
    // A term computed at run time met after the scale (matchScores): the
    // fused graph scales it, in its own type.
    auto type = cast<RankedTensorType>(value.getType());
    auto splatType = RankedTensorType::get(
        SmallVector<int64_t>(type.getRank(), 1), type.getElementType());
    Value factor = tosa::ConstOp::create(
        rewriter, loc, splatType,
        DenseElementsAttr::get(
            splatType, rewriter.getFloatAttr(type.getElementType(), term.scale)));
    value = tosa::MulOp::create(rewriter, loc, type, value, factor,
                                zeroShift(rewriter, loc));
  } else if (term.scale != 1.0) {
    // A constant mask met after the scale (matchScores): its values scaled.
    DenseFPElementsAttr values = floatConstant(value);
    const llvm::fltSemantics &semantics =
        cast<FloatType>(values.getElementType()).getFloatSemantics();
    SmallVector<APFloat> scaled;
    for (const APFloat &element : values.getValues<APFloat>()) {
      APFloat product(element.convertToDouble() * term.scale);
      bool lost = false;
      product.convert(semantics, APFloat::rmNearestTiesToEven, &lost);
      scaled.push_back(product);
    }
    value = tosa::ConstOp::create(
        rewriter, loc, values.getType(),
        DenseElementsAttr::get(cast<ShapedType>(values.getType()), scaled));
  }
  auto type = cast<RankedTensorType>(value.getType());
  if (term.scoresRank == 3) {
    ArrayRef<int64_t> shape = type.getShape();
    if (batch == 1)
      value = createReshape(rewriter, loc, value,
                            {1, shape[0], shape[1], shape[2]});
    else if (shape[0] == 1)
      value = createReshape(rewriter, loc, value, {1, 1, shape[1], shape[2]});
    else
      value = createReshape(rewriter, loc, value,
                            {batch, heads, shape[1], shape[2]});
  }
  return value;
}

/// A run-time scale as the op's f32 `scale_factor`: the graph's
/// one-element factor cast to f32; a reciprocal (how the importer writes
/// `x / y`) is taken in f32 from its input, so the factor is not rounded
/// to a narrower type first.
Value materializeScaleFactor(PatternRewriter &rewriter, Location loc,
                             Value factor, bool perHead) {
  // One value a query head: the op's [Hq], reshaped from the graph's value
  // before the importer's reshapes for the broadcast (the values are in
  // head order either way), so that a report names the graph's [H, 1, 1].
  auto toOperandShape = [&](Value value) -> Value {
    if (!perHead)
      return value;
    while (auto reshape = value.getDefiningOp<tosa::ReshapeOp>()) {
      auto from = dyn_cast<RankedTensorType>(reshape.getInput1().getType());
      if (!from || !from.hasStaticShape())
        break;
      value = reshape.getInput1();
    }
    auto type = cast<RankedTensorType>(value.getType());
    if (type.getRank() == 1)
      return value;
    return createReshape(rewriter, loc, value, {type.getNumElements()});
  };
  auto toF32 = [&](Value value) -> Value {
    auto type = cast<RankedTensorType>(value.getType());
    if (type.getElementType().isF32())
      return value;
    return tosa::CastOp::create(rewriter, loc,
                                type.clone(rewriter.getF32Type()), value);
  };
  if (auto reciprocal = factor.getDefiningOp<tosa::ReciprocalOp>()) {
    Value wide = toF32(toOperandShape(reciprocal.getInput1()));
    return tosa::ReciprocalOp::create(rewriter, loc, wide.getType(), wide);
  }
  return toF32(toOperandShape(factor));
}

struct FuseAttentionPattern : public OpRewritePattern<tosa::ReduceMaxOp> {
  FuseAttentionPattern(MLIRContext *context, bool paddedRowsFree, bool foldFp8)
      : OpRewritePattern(context), paddedRowsFree(paddedRowsFree),
        foldFp8(foldFp8) {}

  LogicalResult matchAndRewrite(tosa::ReduceMaxOp maxOp,
                                PatternRewriter &rewriter) const override {
    std::string whyNot;
    FailureOr<AttentionMatch> match =
        matchAttention(maxOp, whyNot, paddedRowsFree, nullptr, foldFp8);
    if (failed(match))
      return rewriter.notifyMatchFailure(maxOp, whyNot);

    // The fused location lists the site's ops in program order.
    SmallVector<Operation *> siteOps(match->ops.begin(), match->ops.end());
    llvm::sort(siteOps, [](Operation *lhs, Operation *rhs) {
      return lhs->isBeforeInBlock(rhs);
    });
    SmallVector<Location> locs = llvm::to_vector(
        llvm::map_range(siteOps, [](Operation *op) { return op->getLoc(); }));
    Location loc = rewriter.getFusedLoc(locs);
    Operation *resultOp = match->result.getDefiningOp();
    rewriter.setInsertionPoint(resultOp);

    int64_t batch = match->scoresShape[0], numHeads = match->scoresShape[1];
    int64_t numKvHeads = numHeads;
    if (match->key.groups > 1)
      numKvHeads = numHeads / match->key.groups;
    Value query =
        materialize(rewriter, loc, match->query, false, batch, numHeads);
    Value key = materialize(rewriter, loc, match->key, true, batch, numKvHeads);
    Value value =
        materialize(rewriter, loc, match->value, false, batch, numKvHeads);
    if (match->widenedTo)
      for (Value *operand : {&query, &key, &value}) {
        auto type = cast<RankedTensorType>(operand->getType());
        if (type.getElementType() != match->widenedTo)
          *operand = tosa::CastOp::create(
              rewriter, loc, type.clone(match->widenedTo), *operand);
      }
    Value mask, bias;
    if (match->maskTerm.value)
      mask = materializeMask(rewriter, loc, match->maskTerm, batch, numHeads);
    Value scaleFactor;
    if (match->scaleFactor)
      scaleFactor = materializeScaleFactor(rewriter, loc, match->scaleFactor,
                                           match->scaleFactorPerHead);
    if (match->biasTerm.value)
      bias = materializeMask(rewriter, loc, match->biasTerm, batch, numHeads);

    auto queryType = cast<RankedTensorType>(query.getType());
    auto resultType = cast<RankedTensorType>(match->result.getType());
    // Q's shape with V's head dim.
    SmallVector<int64_t> fusedShape(queryType.getShape());
    fusedShape[3] = cast<RankedTensorType>(value.getType()).getDimSize(3);
    RankedTensorType fusedType =
        resultType.getRank() == 4 ? resultType.clone(queryType.getElementType())
                                  : queryType.clone(fusedShape);
    auto fused = AttentionOp::create(
        rewriter, loc, fusedType, query, key, value, mask, bias,
        /*q_offsets=*/Value(), /*kv_offsets=*/Value(), scaleFactor,
        rewriter.getF32FloatAttr(static_cast<float>(match->scale)),
        match->causal ? rewriter.getUnitAttr() : UnitAttr(),
        match->window ? rewriter.getI64IntegerAttr(*match->window)
                      : IntegerAttr(),
        match->windowRight ? rewriter.getI64IntegerAttr(*match->windowRight)
                           : IntegerAttr(),
        match->softcap
            ? rewriter.getF32FloatAttr(static_cast<float>(*match->softcap))
            : FloatAttr(),
        match->maskedScore
            ? rewriter.getF32FloatAttr(static_cast<float>(*match->maskedScore))
            : FloatAttr());
    if (match->probScale)
      fused.setProbScaleAttr(
          rewriter.getF32FloatAttr(static_cast<float>(*match->probScale)));
    if (!match->masking.empty())
      fused->setAttr(kMaskingAttrName, rewriter.getStringAttr(match->masking));

    Value replacement = fused.getResult();
    if (resultType.getRank() != 4)
      replacement =
          createReshape(rewriter, loc, replacement, resultType.getShape());
    if (resultType.getElementType() != queryType.getElementType())
      replacement =
          tosa::CastOp::create(rewriter, loc, resultType, replacement);
    // The graph value the site replaces: the fused op's result, or the
    // reshape or cast of it that now computes that value.
    if (auto replaced =
            resultOp->getAttrOfType<StringAttr>(kGraphValueAttrName)) {
      if (replacement == fused.getResult())
        fused->setAttr(kReplacesAttrName, replaced);
      else
        replacement.getDefiningOp()->setAttr(kGraphValueAttrName, replaced);
    }
    rewriter.replaceOp(resultOp, replacement);

    // Factors folded into the scale: their products now feed the layout
    // ops that lead to the site directly. Those ops no longer compute the
    // graph values they are named after (a reshape of q·c is now one of
    // q), so they lose the names; the report then names q.
    for (OuterScale outer : match->outerScales) {
      for (Value value = outer.mul.getOutput(); value.hasOneUse();) {
        Operation *user = *value.user_begin();
        if (!isa<tosa::ReshapeOp, tosa::TransposeOp>(user))
          break;
        rewriter.modifyOpInPlace(user,
                                 [&] { user->removeAttr(kGraphValueAttrName); });
        value = user->getResult(0);
      }
      rewriter.replaceAllUsesWith(outer.mul.getOutput(), outer.input);
      rewriter.eraseOp(outer.mul);
    }

    // Erase what the site leaves dead, constants included.
    SmallVector<Operation *> worklist(match->ops.begin(), match->ops.end());
    for (const OperandSource *source :
         {&match->query, &match->key, &match->value})
      if (Operation *def = source->base.getDefiningOp())
        worklist.push_back(def);
    llvm::SmallPtrSet<Operation *, 32> erased;
    erased.insert(resultOp);
    while (!worklist.empty()) {
      Operation *op = worklist.pop_back_val();
      if (erased.contains(op) || !op->use_empty() || !isPure(op))
        continue;
      for (Value operand : op->getOperands())
        if (Operation *def = operand.getDefiningOp())
          worklist.push_back(def);
      erased.insert(op);
      rewriter.eraseOp(op);
    }
    return success();
  }

  bool paddedRowsFree;
  /// Quantised probabilities fuse (into prob_scale) only where FP8 folds.
  bool foldFp8;
};

/// A product whose rows pack several heads over one shared right-hand side:
/// `matmul(reshape(X : [B, H, M, K] → [B, H·M, K]), Y : [B, K, N])` whose
/// result is split back to `[B, H, M, N]`. This is how a MatMul that
/// broadcasts one KV head over H query heads (MQA) is imported.
struct RowPackedProduct {
  tosa::MatMulOp matmul;
  Value rows; // X
  tosa::ReshapeOp split;
  int64_t heads;
};

std::optional<RowPackedProduct> matchRowPackedProduct(tosa::MatMulOp matmul) {
  auto merge = matmul.getA().getDefiningOp<tosa::ReshapeOp>();
  if (!merge || !matmul.getOutput().hasOneUse())
    return std::nullopt;
  auto split = dyn_cast<tosa::ReshapeOp>(*matmul.getOutput().user_begin());
  auto rowsType = getRankedType(merge.getInput1());
  auto rhsType = getRankedType(matmul.getB());
  auto resultType = getRankedType(matmul.getOutput());
  if (!split || !rowsType || !rhsType || rowsType.getRank() != 4 ||
      rhsType.getRank() != 3 ||
      !isMergeOfAxes(rowsType, getRankedType(matmul.getA()), 1, 2) ||
      !isMergeOfAxes(getRankedType(split.getOutput()), resultType, 1, 2))
    return std::nullopt;
  int64_t heads = rowsType.getDimSize(1);
  if (ShapedType::isDynamic(heads) || heads < 2 ||
      !sameSize(rowsType.getDimSize(0), rhsType.getDimSize(0)))
    return std::nullopt;
  // The reshapes the rewrite creates hold at most one dynamic size each.
  auto dynamicCount = [](ArrayRef<int64_t> shape) {
    return llvm::count_if(shape, ShapedType::isDynamic);
  };
  int64_t batch = rowsType.getDimSize(0);
  if (dynamicCount({batch, rowsType.getDimSize(2), rowsType.getDimSize(3)}) >
          1 ||
      dynamicCount(rhsType.getShape()) > 1 ||
      dynamicCount({batch, rowsType.getDimSize(2), rhsType.getDimSize(2)}) > 1)
    return std::nullopt;
  return RowPackedProduct{matmul, merge.getInput1(), split, heads};
}

/// Rewrites a row-packed product into the batch·heads form the matcher
/// reads: `matmul(reshape(X → [B·H, M, K]), reshape(tile(reshape(Y →
/// [B, 1, K, N]), [1, H, 1, 1]) → [B·H, K, N]))`, reshaped to
/// `[B, H, M, N]`. Every output element is the same dot product as before;
/// the tile is the KV-head repeat the fusion folds away.
void unpackRowHeads(RowPackedProduct product, PatternRewriter &rewriter) {
  tosa::MatMulOp matmul = product.matmul;
  Location loc = matmul.getLoc();
  rewriter.setInsertionPoint(product.split);
  auto rowsType = getRankedType(product.rows);
  auto rhsType = getRankedType(matmul.getB());
  int64_t batch = rowsType.getDimSize(0), heads = product.heads;
  int64_t flat =
      ShapedType::isDynamic(batch) ? ShapedType::kDynamic : batch * heads;
  Value rows =
      createReshape(rewriter, loc, product.rows,
                    {flat, rowsType.getDimSize(2), rowsType.getDimSize(3)});
  Value rhs4 =
      createReshape(rewriter, loc, matmul.getB(),
                    {batch, 1, rhsType.getDimSize(1), rhsType.getDimSize(2)});
  auto multiplesAttr = DenseIntElementsAttr::get(
      RankedTensorType::get({4}, rewriter.getIndexType()),
      ArrayRef<int64_t>{1, heads, 1, 1});
  Value multiples = tosa::ConstShapeOp::create(
      rewriter, loc, tosa::shapeType::get(rewriter.getContext(), 4),
      multiplesAttr);
  auto tiledType = rhsType.clone(
      {batch, heads, rhsType.getDimSize(1), rhsType.getDimSize(2)});
  Value tiled = tosa::TileOp::create(rewriter, loc, tiledType, rhs4, multiples);
  Value rhs =
      createReshape(rewriter, loc, tiled,
                    {flat, rhsType.getDimSize(1), rhsType.getDimSize(2)});
  auto outType =
      getRankedType(matmul.getOutput())
          .clone({flat, rowsType.getDimSize(2), rhsType.getDimSize(2)});
  Value product3 = tosa::MatMulOp::create(rewriter, loc, outType, rows, rhs,
                                          matmul.getAZp(), matmul.getBZp());
  Value result = createReshape(
      rewriter, loc, product3,
      llvm::to_vector(getRankedType(product.split.getOutput()).getShape()));
  // The graph value keeps its name on the op that now computes it.
  if (auto name = product.split->getAttrOfType<StringAttr>(kGraphValueAttrName))
    result.getDefiningOp()->setAttr(kGraphValueAttrName, name);
  rewriter.replaceOp(product.split, result);
  rewriter.eraseOp(matmul);
}

/// The product, among the ops that compute `value`, whose split result it
/// is computed from: the scores' QKᵀ.
std::optional<RowPackedProduct> findScoresProduct(Value value) {
  for (int depth = 0; depth < 32; ++depth) {
    Operation *def = value.getDefiningOp();
    if (!def)
      return std::nullopt;
    if (auto reshape = dyn_cast<tosa::ReshapeOp>(def))
      if (auto matmul = reshape.getInput1().getDefiningOp<tosa::MatMulOp>())
        return matchRowPackedProduct(matmul);
    auto next = llvm::find_if(def->getOperands(), [](Value operand) {
      return reachesMatmul(operand);
    });
    if (next == def->operand_end())
      return std::nullopt;
    value = *next;
  }
  return std::nullopt;
}

/// MQA written as MatMul broadcasting: for a softmax whose scores and
/// probabilities go through row-packed products (and only then), rewrites
/// both products into the batch·heads form, so that the fusion finds a
/// KV-head repeat. Leaves everything else as it is; returns whether it
/// rewrote anything.
bool unpackRowPackedAttention(tosa::ReduceMaxOp maxOp,
                              PatternRewriter &rewriter) {
  std::string whyNot;
  FailureOr<SoftmaxOps> softmax = matchSoftmax(maxOp, whyNot);
  if (failed(softmax))
    return false;
  // Forwards: probabilities, casts, the merge, the product with V.
  Value probs = softmax->output;
  while (probs.hasOneUse() && isFloatCast(*probs.user_begin()))
    probs = probs.user_begin()->getResult(0);
  if (!probs.hasOneUse())
    return false;
  auto merge = dyn_cast<tosa::ReshapeOp>(*probs.user_begin());
  if (!merge || !merge.getOutput().hasOneUse())
    return false;
  auto valueMatmul = dyn_cast<tosa::MatMulOp>(*merge.getOutput().user_begin());
  if (!valueMatmul || valueMatmul.getA() != merge.getOutput())
    return false;
  std::optional<RowPackedProduct> values = matchRowPackedProduct(valueMatmul);
  std::optional<RowPackedProduct> scores = findScoresProduct(softmax->input);
  if (!values || !scores || values->heads != scores->heads ||
      values->matmul == scores->matmul)
    return false;
  unpackRowHeads(*scores, rewriter);
  unpackRowHeads(*values, rewriter);
  return true;
}

/// The elementwise ops a region rewritten at another rank may hold: each
/// computes the same numbers whatever the rank its operands are viewed at,
/// as long as they are all viewed alike.
static bool isRankFreeElementwise(Operation *op) {
  static const llvm::StringSet<> elementwise = {
      "tosa.add",        "tosa.sub",         "tosa.mul",
      "tosa.select",     "tosa.cast",        "tosa.exp",
      "tosa.reciprocal", "tosa.tanh",        "tosa.maximum",
      "tosa.minimum",    "tosa.negate",      "tosa.logical_not",
      "tosa.logical_and", "tosa.logical_or", "tosa.equal",
      "tosa.greater",    "tosa.greater_equal", "tosa.abs"};
  return elementwise.contains(op->getName().getStringRef());
}

/// Whether `value` is computed inside the rewritten region (or by one of
/// its starts).
static bool mapsInRegion(Value value,
                         const llvm::SetVector<Operation *> &region,
                         const llvm::SetVector<Operation *> &starts) {
  Operation *def = value.getDefiningOp();
  return def && (region.contains(def) || starts.contains(def));
}

/// A rank-5 term `v` tiled over whichever of axes `axis` and `axis + 1` it
/// broadcasts over alone, so that their sizes are (outer, inner) or (1, 1):
/// two adjacent axes merge only where both broadcast or neither does.
static Value tileAxisPair(PatternRewriter &rewriter, Location loc, Value v,
                          int64_t axis, int64_t outer, int64_t inner) {
  auto t = getRankedType(v);
  int64_t o = t.getDimSize(axis), i = t.getDimSize(axis + 1);
  if ((o == 1 && i == 1) || (o == outer && i == inner))
    return v;
  SmallVector<int64_t> multiples(5, 1), shape(t.getShape());
  multiples[axis] = o == 1 ? outer : 1;
  multiples[axis + 1] = i == 1 ? inner : 1;
  shape[axis] = outer;
  shape[axis + 1] = inner;
  Value multiplesValue = tosa::ConstShapeOp::create(
      rewriter, loc, tosa::shapeType::get(rewriter.getContext(), 5),
      DenseIntElementsAttr::get(
          RankedTensorType::get({5}, rewriter.getIndexType()), multiples));
  return tosa::TileOp::create(rewriter, loc, t.clone(shape), v,
                              multiplesValue);
}

/// `v` reshaped to `target`; a constant is reshaped in place, so that a
/// splat stays a constant.
static Value reshapeTerm(PatternRewriter &rewriter, Location loc, Value v,
                         RankedTensorType target) {
  if (auto constant = v.getDefiningOp<tosa::ConstOp>())
    if (auto values = dyn_cast<DenseElementsAttr>(constant.getValues()))
      if (target.hasStaticShape())
        return tosa::ConstOp::create(rewriter, loc, target,
                                     values.reshape(target));
  return createReshape(rewriter, loc, v, target.getShape());
}

/// GQA written with a group axis: scores of rank 5, `[B, Hkv, G, Sq, Sk]`,
/// from a product whose batch holds the groups (`[B·Hkv·G, Sq, Sk]`, K and V
/// repeated over G). The softmax and everything between the split of the
/// product and the merge before P·V are rewritten at rank 4,
/// `[B, Hkv·G, Sq, Sk]`: merging two adjacent axes is a reshape that keeps
/// every element where it is, so each op computes the same numbers; terms of
/// rank 5 that broadcast over only one of the two axes are tiled over it
/// first. With `computedTerms`, a rank-5 operand that does not derive from
/// a product's scores (a bias gathered from a table and a mask, added
/// together at rank 5, as LongT5's local attention computes them) is a term
/// taken whole rather than a part of the region; without it every rank-5
/// value on the way is. Returns whether it rewrote anything.
bool mergeGroupAxes(tosa::ReduceMaxOp maxOp, PatternRewriter &rewriter,
                    bool computedTerms) {
  auto scoresType = getRankedType(maxOp.getInput());
  if (!scoresType || scoresType.getRank() != 5 || maxOp.getAxis() != 4)
    return false;
  // What derives from the products' scores: everything after a reshape of a
  // matmul's result to rank 5.
  llvm::SmallPtrSet<Operation *, 32> fromScores;
  if (computedTerms) {
    SmallVector<Operation *> forward;
    for (Operation &op : *maxOp->getBlock())
      if (auto reshape = dyn_cast<tosa::ReshapeOp>(&op))
        if (reshape.getInput1().getDefiningOp<tosa::MatMulOp>() &&
            getRankedType(reshape.getOutput()).getRank() == 5)
          forward.push_back(&op);
    while (!forward.empty()) {
      Operation *op = forward.pop_back_val();
      if (fromScores.insert(op).second)
        forward.append(op->getUsers().begin(), op->getUsers().end());
    }
  }
  int64_t heads = scoresType.getDimSize(1), groups = scoresType.getDimSize(2);
  if (ShapedType::isDynamic(heads) || ShapedType::isDynamic(groups))
    return false;
  auto rank5 = [](Value v) {
    auto t = getRankedType(v);
    return t && t.getRank() == 5;
  };
  auto lowRank = [](Value v) {
    auto t = getRankedType(v);
    return t && t.getRank() < 5;
  };
  auto nonUnit = [](RankedTensorType t) {
    SmallVector<int64_t> sizes;
    for (int64_t size : t.getShape())
      if (size != 1)
        sizes.push_back(size);
    return sizes;
  };
  llvm::SetVector<Operation *> region, starts, ends, passThrough;
  SmallVector<Operation *> worklist = {maxOp};
  while (!worklist.empty()) {
    Operation *op = worklist.pop_back_val();
    if (region.contains(op) || starts.contains(op) || ends.contains(op))
      continue;
    if (op->getBlock() != maxOp->getBlock())
      return false;
    auto reshape = dyn_cast<tosa::ReshapeOp>(op);
    if (reshape && lowRank(reshape.getInput1()) && rank5(reshape.getOutput())) {
      starts.insert(op);
    } else if (reshape && rank5(reshape.getInput1()) &&
               lowRank(reshape.getOutput())) {
      ends.insert(op);
      if (Operation *def = reshape.getInput1().getDefiningOp())
        worklist.push_back(def);
      continue;
    } else if (reshape && rank5(reshape.getInput1()) &&
               rank5(reshape.getOutput())) {
      // Only unit axes move (XLA's dot_product_attention moves its unit
      // group axis in front): the same elements in the same order.
      if (nonUnit(getRankedType(reshape.getInput1())) !=
          nonUnit(getRankedType(reshape.getOutput())))
        return false;
      region.insert(op);
      passThrough.insert(op);
    } else if (isa<tosa::ReduceMaxOp, tosa::ReduceSumOp>(op)) {
      if (op->getAttrOfType<IntegerAttr>("axis").getInt() != 4)
        return false;
      region.insert(op);
    } else if (isRankFreeElementwise(op) && rank5(op->getResult(0))) {
      region.insert(op);
    } else {
      return false;
    }
    // Rank-5 results flow only into the region or its ends.
    for (Operation *user : op->getResult(0).getUsers())
      worklist.push_back(user);
    if (starts.contains(op))
      continue;
    for (Value operand : op->getOperands())
      if (rank5(operand))
        if (Operation *def = operand.getDefiningOp())
          if (!isa<tosa::ConstOp>(def) &&
              (!computedTerms || fromScores.contains(def)))
            worklist.push_back(def);
  }
  if (starts.empty() || ends.empty())
    return false;
  // A value with the scores' sizes, unit axes aside, takes the merged
  // scores' shape whatever its layout; others merge axes 1 and 2.
  SmallVector<int64_t> scoresSizes = nonUnit(scoresType);
  auto merged = [&](RankedTensorType t) {
    if (nonUnit(t) == scoresSizes)
      return t.clone({scoresType.getDimSize(0), heads * groups,
                      scoresType.getDimSize(3), scoresType.getDimSize(4)});
    int64_t b = t.getDimSize(1), c = t.getDimSize(2);
    return t.clone({t.getDimSize(0), b * c, t.getDimSize(3), t.getDimSize(4)});
  };
  // Ahead of a unit-axis move the layout differs from the scores': there
  // only values of the scores' sizes and all-unit terms are taken.
  llvm::SmallPtrSet<Operation *, 16> ahead;
  SmallVector<Operation *> back;
  for (Operation *move : passThrough)
    back.push_back(move->getOperand(0).getDefiningOp());
  while (!back.empty()) {
    Operation *op = back.pop_back_val();
    if (!op || !(region.contains(op) || starts.contains(op)) ||
        !ahead.insert(op).second)
      continue;
    if (!starts.contains(op))
      for (Value operand : op->getOperands())
        back.push_back(operand.getDefiningOp());
  }
  auto allUnit = [&](RankedTensorType t) { return nonUnit(t).empty(); };
  // Every value of the region merges: (1, 1) or (Hkv, G) on the two axes,
  // or the scores' sizes.
  auto mergeable = [&](Value v, bool isAhead) {
    auto t = getRankedType(v);
    if (nonUnit(t) == scoresSizes || allUnit(t))
      return true;
    int64_t b = t.getDimSize(1), c = t.getDimSize(2);
    return !isAhead && ((b == 1 && c == 1) || (b == heads && c == groups));
  };
  for (Operation *op : llvm::concat<Operation *const>(region, starts)) {
    bool isAhead = ahead.contains(op);
    if (!mergeable(op->getResult(0), isAhead))
      return false;
    if (isAhead && !starts.contains(op))
      for (Value operand : op->getOperands())
        if (rank5(operand) && !mapsInRegion(operand, region, starts) &&
            !(nonUnit(getRankedType(operand)) == scoresSizes ||
              allUnit(getRankedType(operand))))
          return false;
  }
  IRMapping mapping;
  // A term from outside the region, at rank 4.
  auto term = [&](Value v, Location loc) -> Value {
    v = tileAxisPair(rewriter, loc, v, 1, heads, groups);
    return reshapeTerm(rewriter, loc, v, merged(getRankedType(v)));
  };
  SmallVector<Operation *> ordered(region.begin(), region.end());
  ordered.append(starts.begin(), starts.end());
  llvm::sort(ordered, [](Operation *x, Operation *y) {
    return x->isBeforeInBlock(y);
  });
  for (Operation *op : ordered) {
    rewriter.setInsertionPoint(op);
    auto type = getRankedType(op->getResult(0));
    if (starts.contains(op)) {
      mapping.map(op->getResult(0),
                  createReshape(rewriter, op->getLoc(), op->getOperand(0),
                                merged(type).getShape()));
      continue;
    }
    if (passThrough.contains(op)) {
      Value input = mapping.lookup(op->getOperand(0));
      if (getRankedType(input).getShape() != merged(type).getShape())
        input = createReshape(rewriter, op->getLoc(), input,
                              merged(type).getShape());
      mapping.map(op->getResult(0), input);
      continue;
    }
    OperationState state(op->getLoc(), op->getName());
    for (Value operand : op->getOperands()) {
      if (Value mappedValue = mapping.lookupOrNull(operand))
        state.addOperands(mappedValue);
      else if (rank5(operand))
        state.addOperands(term(operand, op->getLoc()));
      else
        state.addOperands(operand);
    }
    NamedAttrList attrs(op->getAttrs());
    if (isa<tosa::ReduceMaxOp, tosa::ReduceSumOp>(op))
      attrs.set("axis", rewriter.getI32IntegerAttr(3));
    state.addAttributes(attrs);
    state.addTypes(merged(type));
    mapping.map(op->getResult(0), rewriter.create(state)->getResult(0));
  }
  for (Operation *end : ends)
    rewriter.modifyOpInPlace(end, [&] {
      end->setOperand(0, mapping.lookup(end->getOperand(0)));
    });
  for (Operation *op : llvm::reverse(ordered))
    rewriter.eraseOp(op);
  return true;
}

/// Swin's window mask: scores `[B·W, H, N, N]` viewed as `[B, W, H, N, N]`
/// so that a term broadcast over B (the shifted windows' mask
/// `[1, W, 1, N, N]`) can be added, then viewed back before the softmax.
/// Generally: a reshape splitting axis `a` of rank-4 scores into two, only
/// elementwise ops, and reshapes merging the two back to the same shape,
/// whose result reaches a softmax. The ops are rewritten at rank 4 (merging
/// two adjacent axes keeps every element where it is, so each op computes
/// the same numbers); a term broadcast over only one of the two axes is
/// tiled over it first. Returns whether it rewrote anything.
bool foldSplitAxis(tosa::ReshapeOp start, PatternRewriter &rewriter) {
  auto inType = getRankedType(start.getInput1());
  auto splitType = getRankedType(start.getOutput());
  if (!inType || !splitType || inType.getRank() != 4 ||
      splitType.getRank() != 5 || !inType.hasStaticShape() ||
      !splitType.hasStaticShape())
    return false;
  int64_t axis = -1;
  for (int64_t a = 0; a < 3 && axis < 0; ++a)
    if (isMergeOfAxes(splitType, inType, a, a + 1))
      axis = a;
  if (axis < 0)
    return false;
  int64_t outer = splitType.getDimSize(axis);
  int64_t inner = splitType.getDimSize(axis + 1);
  // Every user of the split, transitively, is an elementwise op of rank 5
  // or a reshape merging the two axes back to `inType`.
  llvm::SetVector<Operation *> region, ends;
  SmallVector<Operation *> worklist(start->getUsers().begin(),
                                    start->getUsers().end());
  while (!worklist.empty()) {
    Operation *op = worklist.pop_back_val();
    if (region.contains(op) || ends.contains(op))
      continue;
    if (op->getBlock() != start->getBlock())
      return false;
    if (auto reshape = dyn_cast<tosa::ReshapeOp>(op)) {
      if (getRankedType(reshape.getOutput()) != inType ||
          getRankedType(reshape.getInput1()).getShape() !=
              splitType.getShape())
        return false;
      ends.insert(op);
      continue;
    }
    auto type = getRankedType(op->getNumResults() == 1 ? op->getResult(0)
                                                       : Value());
    if (!isRankFreeElementwise(op) || !type ||
        type.getShape() != splitType.getShape())
      return false;
    region.insert(op);
    worklist.append(op->getUsers().begin(), op->getUsers().end());
  }
  if (ends.empty())
    return false;
  // Only where the scores go on to a softmax: this pass rewrites nothing
  // but attention.
  auto reachesSoftmax = [](Value value) {
    for (Operation *user : value.getUsers()) {
      if (isFloatCast(user) && user->getNumResults() == 1)
        for (Operation *next : user->getResult(0).getUsers())
          if (auto maxOp = dyn_cast<tosa::ReduceMaxOp>(next))
            if (looksLikeSoftmax(maxOp))
              return true;
      if (auto maxOp = dyn_cast<tosa::ReduceMaxOp>(user))
        if (looksLikeSoftmax(maxOp))
          return true;
    }
    return false;
  };
  if (!llvm::any_of(ends, [&](Operation *end) {
        return reachesSoftmax(end->getResult(0));
      }))
    return false;
  // A term from outside: sizes (1 or outer, 1 or inner) on the two axes.
  auto termAllowed = [&](Value v) {
    auto t = getRankedType(v);
    if (!t || t.getRank() != 5 || !t.hasStaticShape())
      return false;
    int64_t o = t.getDimSize(axis), i = t.getDimSize(axis + 1);
    return (o == 1 || o == outer) && (i == 1 || i == inner);
  };
  // tosa.mul's shift (a rank-1 i8 constant) is no term: kept as it is.
  auto isShift = [](Operation *op, Value operand) {
    return isa<tosa::MulOp>(op) && operand == op->getOperand(2);
  };
  for (Operation *op : region)
    for (Value operand : op->getOperands())
      if (operand.getDefiningOp() != start.getOperation() &&
          !mapsInRegion(operand, region, {}) && !isShift(op, operand) &&
          !termAllowed(operand))
        return false;
  auto merged = [&](RankedTensorType t) {
    SmallVector<int64_t> shape;
    for (int64_t a = 0; a < 5; ++a) {
      if (a == axis + 1)
        continue;
      shape.push_back(a == axis ? t.getDimSize(a) * t.getDimSize(a + 1)
                                : t.getDimSize(a));
    }
    return t.clone(shape);
  };
  auto term = [&](Value v, Location loc) -> Value {
    v = tileAxisPair(rewriter, loc, v, axis, outer, inner);
    return reshapeTerm(rewriter, loc, v, merged(getRankedType(v)));
  };
  SmallVector<Operation *> ordered(region.begin(), region.end());
  llvm::sort(ordered, [](Operation *x, Operation *y) {
    return x->isBeforeInBlock(y);
  });
  IRMapping mapping;
  mapping.map(start.getOutput(), start.getInput1());
  // Each rewritten op keeps the reshapes' graph nodes in its location: the
  // site's nodes still name them.
  SmallVector<Location> views = {start.getLoc()};
  for (Operation *end : ends)
    views.push_back(end->getLoc());
  for (Operation *op : ordered) {
    rewriter.setInsertionPoint(op);
    SmallVector<Location> locs = {op->getLoc()};
    locs.append(views);
    OperationState state(rewriter.getFusedLoc(locs), op->getName());
    for (Value operand : op->getOperands()) {
      if (Value mappedValue = mapping.lookupOrNull(operand))
        state.addOperands(mappedValue);
      else if (isShift(op, operand))
        state.addOperands(operand);
      else
        state.addOperands(term(operand, op->getLoc()));
    }
    state.addAttributes(op->getAttrs());
    state.addTypes(merged(getRankedType(op->getResult(0))));
    mapping.map(op->getResult(0), rewriter.create(state)->getResult(0));
  }
  for (Operation *end : ends)
    rewriter.replaceOp(end, mapping.lookup(end->getOperand(0)));
  for (Operation *op : llvm::reverse(ordered))
    rewriter.eraseOp(op);
  if (start->use_empty())
    rewriter.eraseOp(start);
  return true;
}

/// Applies foldSplitAxis to every reshape that splits an axis of scores.
struct FoldSplitAxis : public OpRewritePattern<tosa::ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tosa::ReshapeOp reshape,
                                PatternRewriter &rewriter) const override {
    return success(foldSplitAxis(reshape, rewriter));
  }
};

/// `exp(x' - reduce_max(x))` where x' is a copy of x (the same op on the
/// same operands: `jax.nn.softmax(s, where=m)` selects the hidden scores
/// out once for the maximum and again for the exponent) → the exponent
/// reads x, so that the softmax is read as one.
struct ShareSoftmaxInput : public OpRewritePattern<tosa::ReduceMaxOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tosa::ReduceMaxOp maxOp,
                                PatternRewriter &rewriter) const override {
    if (!maxOp->hasOneUse())
      return failure();
    auto sub = dyn_cast<tosa::SubOp>(*maxOp->user_begin());
    Value input = maxOp.getInput();
    if (!sub || sub.getInput2() != maxOp.getOutput() ||
        sub.getInput1() == input || !sameValue(sub.getInput1(), input, 4) ||
        sub.getInput1().getType() != input.getType() ||
        !llvm::any_of(sub->getUsers(),
                      [](Operation *user) { return isa<tosa::ExpOp>(user); }))
      return failure();
    rewriter.modifyOpInPlace(sub, [&] { sub->setOperand(0, input); });
    return success();
  }
};

/// `exp(x - (log(sum(exp(x - c))) + c))` over the last axis, c one value a
/// row, weighing values (`exp(s - logsumexp(s))`; JAX's logsumexp takes c the row max where
/// it is finite, 0 elsewhere, and the sum through `abs`) → the softmax as
/// the fusion reads it, `exp(x - max) · 1 / sum(exp(x - max))`: the same
/// value for any c (NaN on a row whose max is infinite, either way).
/// Whether `value` reaches the left side of a matmul through at most four
/// reshapes, transposes and casts: probabilities that weigh values (P·V).
/// Softmaxes elsewhere are not this pass's to rewrite.
bool weighsAProduct(Value value, int depth = 4) {
  for (Operation *user : value.getUsers()) {
    if (auto matmul = dyn_cast<tosa::MatMulOp>(user))
      if (matmul.getA() == value)
        return true;
    if (depth > 0 && isa<tosa::ReshapeOp, tosa::TransposeOp, tosa::CastOp>(user) &&
        weighsAProduct(user->getResult(0), depth - 1))
      return true;
  }
  return false;
}

struct ReadLogSumExpSoftmax : public OpRewritePattern<tosa::ExpOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tosa::ExpOp exp,
                                PatternRewriter &rewriter) const override {
    auto sub = exp.getInput1().getDefiningOp<tosa::SubOp>();
    if (!sub)
      return failure();
    Value x = sub.getInput1();
    auto type = dyn_cast<RankedTensorType>(x.getType());
    auto add = sub.getInput2().getDefiningOp<tosa::AddOp>();
    if (!type || !isa<FloatType>(type.getElementType()) || !add ||
        type.getRank() < 2 || !weighsAProduct(exp.getOutput()))
      return failure();
    int64_t axis = type.getRank() - 1;
    for (int side = 0; side < 2; ++side) {
      auto log = add->getOperand(side).getDefiningOp<tosa::LogOp>();
      Value c = add->getOperand(1 - side);
      if (!log)
        continue;
      Value summed = log.getInput1();
      if (auto abs = summed.getDefiningOp<tosa::AbsOp>())
        summed = abs.getInput1();
      auto sum = summed.getDefiningOp<tosa::ReduceSumOp>();
      if (!sum || sum.getAxis() != axis)
        continue;
      auto inner = sum.getInput().getDefiningOp<tosa::ExpOp>();
      auto shifted = inner ? inner.getInput1().getDefiningOp<tosa::SubOp>()
                           : tosa::SubOp();
      if (!shifted || !sameValue(shifted.getInput1(), x, 2) ||
          !sameValue(shifted.getInput2(), c, 2))
        continue;
      auto rowType = dyn_cast<RankedTensorType>(c.getType());
      if (!rowType || rowType.getRank() != type.getRank() ||
          rowType.getDimSize(axis) != 1)
        continue;
      Location loc = exp.getLoc();
      SmallVector<int64_t> rowShape(type.getShape());
      rowShape[axis] = 1;
      auto row = RankedTensorType::get(rowShape, type.getElementType());
      Value max = tosa::ReduceMaxOp::create(rewriter, loc, row, x,
                                            static_cast<uint32_t>(axis));
      Value centred = tosa::SubOp::create(rewriter, loc, type, x, max);
      Value e = tosa::ExpOp::create(rewriter, loc, type, centred);
      Value total = tosa::ReduceSumOp::create(rewriter, loc, row, e,
                                              static_cast<uint32_t>(axis));
      Value inverse = tosa::ReciprocalOp::create(rewriter, loc, row, total);
      Value p = tosa::MulOp::create(rewriter, loc, type, e, inverse,
                                    zeroShift(rewriter, loc));
      rewriter.replaceOp(exp, p);
      return success();
    }
    return failure();
  }
};

/// Applies mergeGroupAxes to every softmax over rank-5 scores.
struct MergeGroupAxes : public OpRewritePattern<tosa::ReduceMaxOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tosa::ReduceMaxOp maxOp,
                                PatternRewriter &rewriter) const override {
    if (!looksLikeSoftmax(maxOp))
      return failure();
    return success(mergeGroupAxes(maxOp, rewriter, /*computedTerms=*/false) ||
                   mergeGroupAxes(maxOp, rewriter, /*computedTerms=*/true));
  }
};

/// Applies unpackRowPackedAttention to every softmax of a region.
struct UnpackRowPackedAttention : public OpRewritePattern<tosa::ReduceMaxOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tosa::ReduceMaxOp maxOp,
                                PatternRewriter &rewriter) const override {
    std::string whyNot;
    if (!looksLikeSoftmax(maxOp) ||
        succeeded(matchAttention(maxOp, whyNot)))
      return failure();
    return success(unpackRowPackedAttention(maxOp, rewriter));
  }
};

struct KilnFuseAttentionPass
    : public kiln::impl::KilnFuseAttentionBase<KilnFuseAttentionPass> {
  using KilnFuseAttentionBase::KilnFuseAttentionBase;

  /// The rewrite driver's settings: no folding and no region simplification,
  /// which would rewrite the unfused parts of the graph too; this pass only
  /// replaces attention sites.
  static GreedyRewriteConfig sitesOnly() {
    GreedyRewriteConfig config;
    config.enableFolding(false).enableConstantCSE(false);
    config.setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled);
    return config;
  }

  /// Tags the op producing each matched site's result with
  /// `kiln.site_root = N`, numbering the sites in program order (the order
  /// of the kiln.attention ops a fusion would create). It rewrites nothing
  /// but what changes no value: an exponent that reads a copy of the row
  /// max's input reads the input itself (ShareSoftmaxInput).
  void annotateSites(Operation *root) {
    {
      RewritePatternSet shared(&getContext());
      shared.add<ShareSoftmaxInput>(&getContext());
      (void)applyPatternsGreedily(root, std::move(shared), sitesOnly());
    }
    llvm::SmallPtrSet<Operation *, 8> roots;
    root->walk([&](tosa::ReduceMaxOp maxOp) {
      std::string whyNot;
      FailureOr<AttentionMatch> match =
          matchAttention(maxOp, whyNot, false, nullptr, foldFp8);
      if (succeeded(match))
        if (Operation *resultOp = match->result.getDefiningOp())
          roots.insert(resultOp);
    });
    int64_t site = 0;
    root->walk([&](Operation *op) {
      if (roots.contains(op))
        op->setAttr(
            "kiln.site_root",
            IntegerAttr::get(IntegerType::get(op->getContext(), 64), site++));
    });
  }

  void runOnOperation() override {
    Operation *root = getOperation();
    auto countFused = [&] {
      int64_t count = 0;
      root->walk([&](AttentionOp) { ++count; });
      return count;
    };
    int64_t before = countFused();

    if (annotateOnly) {
      annotateSites(root);
      return;
    }

    RewritePatternSet patterns(&getContext());
    if (paddedRows != "exact" && paddedRows != "free") {
      emitError(root->getLoc())
          << "padded-rows must be 'exact' or 'free', got '" << paddedRows
          << "'";
      return signalPassFailure();
    }
    populateFuseAttentionPatterns(patterns, paddedRows == "free", foldFp8);
    populateSimplifyAttentionPatterns(patterns, paddedRows == "free", foldFp8);
    if (failed(applyPatternsGreedily(root, std::move(patterns), sitesOnly())))
      return signalPassFailure();
    numFused += countFused() - before;

    root->walk([&](tosa::ReduceMaxOp maxOp) {
      if (!looksLikeSoftmax(maxOp))
        return;
      std::string whyNot;
      Operation *stoppedAt = nullptr;
      if (succeeded(matchAttention(maxOp, whyNot, paddedRows == "free",
                                   &stoppedAt, foldFp8))) {
        whyNot = "the rewrite did not apply";
        stoppedAt = nullptr;
      }
      // The graph node whose op stopped the walk from the softmax to Q·Kᵀ,
      // where it is another node: " [at NAME]" (the report's stopped_at).
      std::string at;
      if (stoppedAt && stoppedAt != maxOp.getOperation()) {
        std::vector<std::string> here = nodeNames(stoppedAt->getLoc());
        std::vector<std::string> softmax = nodeNames(maxOp->getLoc());
        if (!here.empty() && (softmax.empty() || here.front() != softmax.front()))
          at = (kStoppedAtMarker + here.front() + "]").str();
      }
      maxOp->emitRemark("softmax not fused: ") << whyNot << at;
      ++numUnfused;
    });
  }
};

} // namespace

void mlir::kiln::populateFuseAttentionPatterns(RewritePatternSet &patterns,
                                               bool paddedRowsFree,
                                               bool foldFp8) {
  patterns.add<FuseAttentionPattern>(patterns.getContext(), paddedRowsFree,
                                     foldFp8);
  patterns.add<UnpackRowPackedAttention>(patterns.getContext());
  patterns.add<MergeGroupAxes>(patterns.getContext());
  patterns.add<FoldSplitAxis>(patterns.getContext());
  patterns.add<ShareSoftmaxInput>(patterns.getContext());
  patterns.add<ReadLogSumExpSoftmax>(patterns.getContext());
}
