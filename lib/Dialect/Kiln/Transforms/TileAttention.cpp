//===- TileAttention.cpp - Tiled online-softmax lowering --------*- C++ -*-===//
//
// Lowers kiln.attention and kiln.paged_attention to upstream dialects on
// tensors, in two forms:
//
// - kiln-tile-attention: the tiled online-softmax form the back ends share.
//   Loops over (batch, query head, query block, KV split, KV block); the KV
//   loop carries the running row max, row sum and f32 accumulator; scores are
//   kept in base 2 so the softmax is one exp2 per score.
// - kiln-decompose-attention: a plain softmax over whole rows, the reference
//   the tiled form is checked against.
//
// Both give kiln.attention's log-sum-exp when it has an lse result, and
// both lower kiln.attention_grad in one reference form: whole rows per
// (batch, query head), the probabilities recomputed from the forward's lse.
//
// Both read K/V of KV head h / G in place (extract_slice, or a gather through
// the page table for the paged op): K and V are never copied per query head.
// An f8E4M3FN cache is decoded to f32 in the gather, with integer ops (the
// CPU pipeline ends in LLVM, which has no f8 type to extend from), and
// multiplied by the KV head's scale there.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Dialect/Kiln/Transforms/Float8.h"
#include "kiln/Dialect/Kiln/Transforms/Passes.h"
#include "kiln/Dialect/Kiln/Transforms/TileAttention.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>

namespace mlir::kiln {
#define GEN_PASS_DEF_KILNTILEATTENTION
#define GEN_PASS_DEF_KILNDECOMPOSEATTENTION
#include "kiln/Dialect/Kiln/Transforms/Passes.h.inc"
} // namespace mlir::kiln

using namespace mlir;
using namespace mlir::kiln;

namespace {

constexpr int64_t kDyn = ShapedType::kDynamic;
constexpr double kLog2E = 1.4426950408889634;

/// Small builder helpers over one insertion point and location.
struct IR {
  OpBuilder &b;
  Location loc;

  Value idx(int64_t value) {
    return arith::ConstantIndexOp::create(b, loc, value);
  }
  Value f32(double value) {
    return arith::ConstantOp::create(b, loc,
                                     b.getF32FloatAttr(static_cast<float>(value)));
  }
  Value negInf() { return f32(-std::numeric_limits<double>::infinity()); }
  Value add(Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); }
  Value sub(Value x, Value y) { return arith::SubIOp::create(b, loc, x, y); }
  Value mul(Value x, Value y) { return arith::MulIOp::create(b, loc, x, y); }
  Value div(Value x, Value y) { return arith::DivSIOp::create(b, loc, x, y); }
  Value rem(Value x, Value y) { return arith::RemSIOp::create(b, loc, x, y); }
  Value ceilDiv(Value x, Value y) {
    return arith::CeilDivSIOp::create(b, loc, x, y);
  }
  Value min(Value x, Value y) { return arith::MinSIOp::create(b, loc, x, y); }
  Value max(Value x, Value y) { return arith::MaxSIOp::create(b, loc, x, y); }
  Value clamp(Value x, Value lo, Value hi) { return min(max(x, lo), hi); }
  Value cmp(arith::CmpIPredicate pred, Value x, Value y) {
    return arith::CmpIOp::create(b, loc, pred, x, y);
  }
  Value cmpf(arith::CmpFPredicate pred, Value x, Value y) {
    return arith::CmpFOp::create(b, loc, pred, x, y);
  }
  Value select(Value cond, Value x, Value y) {
    return arith::SelectOp::create(b, loc, cond, x, y);
  }
  Value addf(Value x, Value y) { return arith::AddFOp::create(b, loc, x, y); }
  Value subf(Value x, Value y) { return arith::SubFOp::create(b, loc, x, y); }
  Value mulf(Value x, Value y) { return arith::MulFOp::create(b, loc, x, y); }
  Value divf(Value x, Value y) { return arith::DivFOp::create(b, loc, x, y); }
  Value maxf(Value x, Value y) {
    return arith::MaximumFOp::create(b, loc, x, y);
  }
  Value dim(Value tensor, int64_t axis) {
    return tensor::DimOp::create(b, loc, tensor, axis);
  }
  Value index(int64_t loopDim) {
    return linalg::IndexOp::create(b, loc, loopDim);
  }
  /// Converts a scalar of any float type to f32.
  Value toF32(Value value) {
    if (value.getType().isF32())
      return value;
    return arith::ExtFOp::create(b, loc, b.getF32Type(), value);
  }
  Value toIndex(Value value) {
    return arith::IndexCastOp::create(b, loc, b.getIndexType(), value);
  }
  /// The f32 value of an f8E4M3FN scalar, exactly (Float8.h).
  Value decodeE4M3(Value element) {
    return kiln::decodeE4M3(b, loc, element);
  }
  /// A fully dynamic tensor of `sizes.size()` dims.
  Value empty(ArrayRef<Value> sizes, Type elementType) {
    return tensor::EmptyOp::create(
        b, loc, SmallVector<int64_t>(sizes.size(), kDyn), elementType, sizes);
  }
  Value full(ArrayRef<Value> sizes, Value fillValue) {
    Value init = empty(sizes, fillValue.getType());
    return linalg::FillOp::create(b, loc, ValueRange{fillValue},
                                  ValueRange{init})
        .getResult(0);
  }
  AffineMap map(unsigned numDims, ArrayRef<unsigned> dims) {
    SmallVector<AffineExpr> exprs;
    for (unsigned d : dims)
      exprs.push_back(b.getAffineDimExpr(d));
    return AffineMap::get(numDims, 0, exprs, b.getContext());
  }
  /// linalg.generic with one result.
  Value generic(ValueRange inputs, Value init, ArrayRef<AffineMap> maps,
                ArrayRef<utils::IteratorType> iterators,
                function_ref<Value(IR &, ValueRange)> body) {
    auto op = linalg::GenericOp::create(
        b, loc, TypeRange{init.getType()}, inputs, ValueRange{init}, maps,
        iterators, [&](OpBuilder &nested, Location nestedLoc, ValueRange args) {
          IR inner{nested, nestedLoc};
          Value result = body(inner, args);
          linalg::YieldOp::create(nested, nestedLoc, result);
        });
    return op.getResult(0);
  }
};

constexpr utils::IteratorType kPar = utils::IteratorType::parallel;
constexpr utils::IteratorType kRed = utils::IteratorType::reduction;

/// One attention op, with its sizes as index values computed once before the
/// loops.
struct Site {
  /// Of Q and the result (and of K/V unless the cache is FP8).
  Type elementType;
  RankedTensorType resultType;
  Value query, key, value;
  bool paged = false;
  bool bshd = false;
  Value pageTable, kvLens, mask, bias;
  /// FP8 caches only: the f32 factors of K and V, `[1]` or `[Hkv]`.
  Value keyScale, valueScale;
  float scale = 1.0f;
  /// The op's run-time scale_factor (a one-element f32 tensor, or `[Hq]`:
  /// one a query head), or null.
  Value scaleFactor;
  bool causal = false;
  std::optional<int64_t> window;
  /// Keys past the diagonal by more than this are hidden; 0 for causal.
  std::optional<int64_t> rightBound;
  std::optional<float> softcap;
  /// kiln.attention's prob_scale: the normalised probabilities quantised to
  /// e4m3 with this scale before P·V (the decomposed form only).
  std::optional<float> probScale;
  /// The score of a hidden key (masked_score); -inf when unset.
  std::optional<float> maskedScore;

  /// headDim: of Q and K; valueHeadDim: of V and the result (they differ in
  /// multi-head latent attention).
  Value batch, numQueryHeads, queryLength, headDim, valueHeadDim, groupSize;
  /// Keys of every sequence (contiguous K/V only).
  Value kvLength;
  /// Paged K/V only.
  Value pageSize, maxPages, numPages;
  /// For mask and bias: per operand axis, whether it broadcasts (size 1).
  SmallVector<Value> maskBroadcast, biasBroadcast;
  /// The type of the log-sum-exp result (`[B, Hq, Sq]` f32), when the op
  /// has one.
  RankedTensorType lseType;
  /// kiln.attention_grad only: the forward's result and log-sum-exp
  /// (`[B, Hq, Sq]`), the result's gradient, and whether the bias's
  /// gradient is wanted.
  Value out, lse, gradOut;
  bool biasGrad = false;

  static Site fromOp(IR &ir, AttentionOp op) {
    Site site =
        fromUniform(ir, op, cast<RankedTensorType>(op.getResult().getType()));
    if (Value lse = op.getLse())
      site.lseType = cast<RankedTensorType>(lse.getType());
    return site;
  }

  static Site fromOp(IR &ir, AttentionGradOp op) {
    Site site =
        fromUniform(ir, op, cast<RankedTensorType>(op.getOut().getType()));
    site.out = op.getOut();
    site.lse = op.getLse();
    site.gradOut = op.getGradOut();
    site.biasGrad = op.getBiasGrad();
    return site;
  }

  /// The site of a kiln.attention or kiln.attention_grad that is not packed,
  /// whose forward result has type `resultType`.
  template <typename OpT>
  static Site fromUniform(IR &ir, OpT op, RankedTensorType resultType) {
    Site site;
    site.elementType = op.getElementType();
    site.resultType = resultType;
    site.query = op.getQuery();
    site.key = op.getKey();
    site.value = op.getValue();
    site.bshd = op.getLayout() == Layout::bshd;
    site.mask = op.getMask();
    site.bias = op.getBias();
    site.copyAttrs(op);
    int64_t headAxis = op.getHeadAxis(), seqAxis = op.getSeqAxis();
    site.batch = ir.dim(site.query, 0);
    site.numQueryHeads = ir.dim(site.query, headAxis);
    site.queryLength = ir.dim(site.query, seqAxis);
    site.headDim = ir.dim(site.query, 3);
    site.valueHeadDim = ir.dim(site.value, 3);
    site.groupSize =
        ir.div(site.numQueryHeads, ir.max(ir.dim(site.key, headAxis), ir.idx(1)));
    site.kvLength = ir.dim(site.key, seqAxis);
    site.computeBroadcasts(ir);
    return site;
  }

  /// The uniform site of one sequence of a packed op: its `[1, rows, H,
  /// D]` (bshd) slices of Q, K and V, and `op`'s attributes.
  template <typename OpT>
  static Site fromPacked(IR &ir, OpT op, Value query, Value key, Value value,
                         RankedTensorType resultType) {
    Site site;
    site.elementType = op.getElementType();
    site.resultType = resultType;
    site.query = query;
    site.key = key;
    site.value = value;
    site.bshd = true;
    site.copyAttrs(op);
    site.batch = ir.dim(query, 0);
    site.numQueryHeads = ir.dim(query, 2);
    site.queryLength = ir.dim(query, 1);
    site.headDim = ir.dim(query, 3);
    site.valueHeadDim = ir.dim(value, 3);
    site.groupSize =
        ir.div(site.numQueryHeads, ir.max(ir.dim(key, 2), ir.idx(1)));
    site.kvLength = ir.dim(key, 1);
    return site;
  }

  static Site fromOp(IR &ir, PagedAttentionOp op) {
    return fromPaged(ir, op, op.getQuery(), op.getPageTable(), op.getKvLens(),
                     cast<RankedTensorType>(op.getResult().getType()));
  }

  /// The uniform paged site of `op`'s caches and attributes with these
  /// query, page table and key counts (one sequence of a ragged op).
  static Site fromPaged(IR &ir, PagedAttentionOp op, Value query,
                        Value pageTable, Value kvLens,
                        RankedTensorType resultType) {
    Site site;
    site.elementType = op.getElementType();
    site.resultType = resultType;
    site.query = query;
    site.key = op.getKeyCache();
    site.value = op.getValueCache();
    site.paged = true;
    site.pageTable = pageTable;
    site.kvLens = kvLens;
    site.keyScale = op.getKScale();
    site.valueScale = op.getVScale();
    site.copyAttrs(op);
    site.batch = ir.dim(site.query, 0);
    site.numQueryHeads = ir.dim(site.query, 1);
    site.queryLength = ir.dim(site.query, 2);
    site.headDim = ir.dim(site.query, 3);
    site.valueHeadDim = ir.dim(site.value, 3);
    site.groupSize =
        ir.div(site.numQueryHeads, ir.max(ir.dim(site.key, 2), ir.idx(1)));
    site.numPages = ir.dim(site.key, 0);
    site.pageSize = ir.dim(site.key, 1);
    site.maxPages = ir.dim(site.pageTable, 1);
    return site;
  }

  template <typename OpT>
  void copyAttrs(OpT op) {
    scale = op.getScale().convertToFloat();
    causal = op.getCausal();
    window = op.getWindow();
    if (std::optional<APFloat> cap = op.getSoftcap())
      softcap = cap->convertToFloat();
    if (causal)
      rightBound = 0;
    if constexpr (!std::is_same_v<OpT, PagedAttentionOp>) {
      scaleFactor = op.getScaleFactor();
      rightBound = op.getRightBound();
      if (std::optional<APFloat> fill = op.getMaskedScore())
        maskedScore = fill->convertToFloat();
    }
    if constexpr (std::is_same_v<OpT, AttentionOp>)
      if (std::optional<APFloat> quantum = op.getProbScale())
        probScale = quantum->convertToFloat();
  }

  void computeBroadcasts(IR &ir) {
    auto of = [&](Value operand, SmallVector<Value> &flags) {
      if (!operand)
        return;
      int64_t rank = cast<RankedTensorType>(operand.getType()).getRank();
      for (int64_t axis = 0; axis < rank; ++axis)
        flags.push_back(ir.cmp(arith::CmpIPredicate::eq, ir.dim(operand, axis),
                               ir.idx(1)));
    };
    of(mask, maskBroadcast);
    of(bias, biasBroadcast);
  }

  /// Keys of sequence `b`: the K/V length, or kv_lens[b] clamped to the
  /// pages the table can address.
  Value keysOf(IR &ir, Value b) const {
    if (!paged)
      return kvLength;
    Value length = ir.toIndex(tensor::ExtractOp::create(
        ir.b, ir.loc, kvLens, ValueRange{b}));
    return ir.clamp(length, ir.idx(0), ir.mul(maxPages, pageSize));
  }

  /// The `[rows, D]` query tile of batch `b`, head `h` from row `row0`.
  Value queryTile(IR &ir, Value b, Value h, Value row0, Value rows) const {
    return sliceRows(ir, query, b, h, row0, rows);
  }

  /// Rows [row0, row0 + rows) of `tensor` (`[B, H, S, D]` or `[B, S, H, D]`)
  /// as a `[rows, D]` tensor.
  Value sliceRows(IR &ir, Value tensor, Value b, Value h, Value row0,
                  Value rows) const {
    OpFoldResult one = ir.b.getIndexAttr(1);
    SmallVector<OpFoldResult> offsets, sizes;
    if (bshd) {
      offsets = {b, row0, h, ir.b.getIndexAttr(0)};
      sizes = {one, rows, one, ir.dim(tensor, 3)};
    } else {
      offsets = {b, h, row0, ir.b.getIndexAttr(0)};
      sizes = {one, one, rows, ir.dim(tensor, 3)};
    }
    auto type = RankedTensorType::get({kDyn, kDyn}, elementType);
    return tensor::ExtractSliceOp::create(ir.b, ir.loc, type, tensor, offsets,
                                          sizes,
                                          SmallVector<OpFoldResult>(4, one));
  }

  /// Keys [key0, key0 + rows) of KV head `kvHead` of sequence `b`.
  Value keyTile(IR &ir, Value b, Value kvHead, Value key0, Value rows) const {
    return kvTile(ir, key, keyScale, b, kvHead, key0, rows);
  }

  /// Values [key0, key0 + rows) of KV head `kvHead` of sequence `b`.
  Value valueTile(IR &ir, Value b, Value kvHead, Value key0, Value rows) const {
    return kvTile(ir, value, valueScale, b, kvHead, key0, rows);
  }

  /// Keys (or values) [key0, key0 + rows) of KV head `kvHead` of sequence
  /// `b` as a `[rows, D]` tensor: a slice of contiguous K/V, or a gather of
  /// just this tile through the page table. With `scaleTensor` (an FP8
  /// cache) the tile is f32, decoded and multiplied by the head's scale.
  Value kvTile(IR &ir, Value source, Value scaleTensor, Value b, Value kvHead,
               Value key0, Value rows) const {
    if (!paged)
      return sliceRows(ir, source, b, kvHead, key0, rows);
    Value factor;
    if (scaleTensor) {
      // Per tensor ([1]) or per KV head; the index is clamped so a scale
      // tensor shorter than Hkv cannot read out of bounds.
      Value lastScale = ir.sub(ir.dim(scaleTensor, 0), ir.idx(1));
      factor = tensor::ExtractOp::create(ir.b, ir.loc, scaleTensor,
                                         ValueRange{ir.min(kvHead, lastScale)});
    }
    Type tileType = factor ? ir.b.getF32Type() : elementType;
    Value init = ir.empty({rows, ir.dim(source, 3)}, tileType);
    Value lastPage = ir.sub(numPages, ir.idx(1));
    Value lastTableEntry = ir.sub(maxPages, ir.idx(1));
    return ir.generic(
        {}, init, {ir.map(2, {0, 1})}, {kPar, kPar},
        [&](IR &in, ValueRange) -> Value {
          Value key = in.add(key0, in.index(0));
          Value entry = in.clamp(in.div(key, pageSize), in.idx(0),
                                 lastTableEntry);
          Value page = in.toIndex(tensor::ExtractOp::create(
              in.b, in.loc, pageTable, ValueRange{b, entry}));
          page = in.clamp(page, in.idx(0), lastPage);
          Value slot = in.rem(key, pageSize);
          Value element = tensor::ExtractOp::create(
              in.b, in.loc, source,
              ValueRange{page, slot, kvHead, in.index(1)});
          if (!factor)
            return element;
          return in.mulf(in.decodeE4M3(element), factor);
        });
  }

  /// `operand[b, h, row, key]` broadcast numpy-style, as f32 (for a boolean
  /// mask: whether the key takes part, as i1).
  Value broadcastRead(IR &in, Value operand, ArrayRef<Value> broadcast,
                      ArrayRef<Value> logical) const {
    int64_t rank = broadcast.size();
    SmallVector<Value> indices;
    for (int64_t axis = 0; axis < rank; ++axis)
      indices.push_back(in.select(broadcast[axis], in.idx(0),
                                  logical[4 - rank + axis]));
    Value element =
        tensor::ExtractOp::create(in.b, in.loc, operand, indices);
    if (element.getType().isInteger(1))
      return element;
    return in.toF32(element);
  }

  /// The `[rows, keys]` f32 dot products of a query tile and a key tile.
  Value dots(IR &ir, Value queryTile, Value keyTile, Value rows,
             Value keys) const {
    Value zero = ir.full({rows, keys}, ir.f32(0.0));
    return ir.generic(
        {queryTile, keyTile}, zero,
        {ir.map(3, {0, 2}), ir.map(3, {1, 2}), ir.map(3, {0, 1})},
        {kPar, kPar, kRed}, [&](IR &in, ValueRange args) -> Value {
          return in.addf(args[2],
                         in.mulf(in.toF32(args[0]), in.toF32(args[1])));
        });
  }

  /// The run-time scale factor of query head `h` as an f32 scalar: its one
  /// element, or element `h` of a per-head `[Hq]` factor; null when the op
  /// has none.
  Value runtimeFactor(IR &ir, Value h) const {
    if (!scaleFactor)
      return Value();
    auto type = cast<RankedTensorType>(scaleFactor.getType());
    bool perHead = llvm::any_of(type.getShape(),
                                [](int64_t size) { return size != 1; });
    if (perHead)
      return tensor::ExtractOp::create(ir.b, ir.loc, scaleFactor,
                                       ValueRange{h});
    return tensor::ExtractOp::create(ir.b, ir.loc, scaleFactor,
                                     SmallVector<Value>(type.getRank(),
                                                        ir.idx(0)));
  }

  /// One score, with what the backward pass needs of how it was made.
  struct Score {
    /// The final score, in output units.
    Value value;
    /// Whether the key is hidden (null when nothing hides keys).
    Value hidden;
    /// tanh of the scaled dot product over the soft-cap (null without
    /// softcap).
    Value capped;
  };

  /// The score of query row `row0 + index(0)` against key `key0 + index(1)`
  /// from their dot product, inside a linalg body: `scale·dot` (times the
  /// run-time `factor`), soft-capped, plus bias and mask, the hidden score
  /// where the key is hidden, all multiplied by `outScale`.
  Score scoreOf(IR &in, Value dot, Value factor, Value b, Value h, Value row0,
                Value key0, Value diagonal, double outScale) const {
    Score result;
    Value score = dot;
    if (factor)
      score = in.mulf(score, factor);
    bool additive = bias || (mask && !isBoolMask());
    // With additive terms the score is built in natural units, as the
    // graph adds them, and converted to the output units after.
    double unitScale = additive ? 1.0 : outScale;
    if (softcap) {
      Value capped = math::TanhOp::create(
          in.b, in.loc, in.mulf(score, in.f32(scale / *softcap)));
      result.capped = capped;
      score = in.mulf(capped, in.f32(*softcap * unitScale));
    } else {
      score = in.mulf(score, in.f32(scale * unitScale));
    }
    Value row = in.add(row0, in.index(0));
    Value key = in.add(key0, in.index(1));
    SmallVector<Value> logical = {b, h, row, key};
    if (additive) {
      if (bias)
        score = in.addf(score, broadcastRead(in, bias, biasBroadcast, logical));
      if (mask && !isBoolMask())
        score = in.addf(score, broadcastRead(in, mask, maskBroadcast, logical));
      score = toOutputUnits(in, score, outScale);
    }
    Value hidden;
    auto orHidden = [&](Value cond) {
      hidden =
          hidden ? arith::OrIOp::create(in.b, in.loc, hidden, cond).getResult()
                 : cond;
    };
    if (mask && isBoolMask())
      orHidden(arith::XOrIOp::create(
          in.b, in.loc, broadcastRead(in, mask, maskBroadcast, logical),
          arith::ConstantIntOp::create(in.b, in.loc, 1, 1)));
    if (rightBound) {
      Value edge = in.add(row, diagonal);
      orHidden(in.cmp(arith::CmpIPredicate::sgt, key,
                      in.add(edge, in.idx(*rightBound))));
      if (window)
        orHidden(in.cmp(arith::CmpIPredicate::sle, key,
                        in.sub(edge, in.idx(*window))));
    }
    if (hidden) {
      Value hiddenScore = maskedScore
                              ? in.f32(saturatedProduct(*maskedScore, outScale))
                              : in.negInf();
      score = in.select(hidden, hiddenScore, score);
    }
    result.value = score;
    result.hidden = hidden;
    return result;
  }

  /// The `[rows, keys]` f32 score tile of query rows [row0, ...) against keys
  /// [key0, ...): `scale·QKᵀ`, soft-capped, plus bias and mask, -inf where
  /// the key is hidden, all multiplied by `outScale` (log2(e) for the exp2
  /// form, 1 for the exp form). Without a soft-cap, scale and outScale are
  /// one multiplication.
  Value scores(IR &ir, Value queryTile, Value keyTile, Value b, Value h,
               Value row0, Value key0, Value rows, Value keys, Value keyCount,
               double outScale) const {
    Value products = dots(ir, queryTile, keyTile, rows, keys);
    // Bottom-right aligned causal diagonal: key j is visible to query i when
    // j <= i + (keys - queries).
    Value diagonal = ir.sub(keyCount, queryLength);
    Value init = ir.empty({rows, keys}, ir.b.getF32Type());
    // The run-time factor (the row's head's) multiplies the dot products
    // before anything else.
    Value factor = runtimeFactor(ir, h);
    return ir.generic({products}, init, {ir.map(2, {0, 1}), ir.map(2, {0, 1})},
                      {kPar, kPar}, [&](IR &in, ValueRange args) -> Value {
                        return scoreOf(in, args[0], factor, b, h, row0, key0,
                                       diagonal, outScale)
                            .value;
                      });
  }

  /// `value`·`factor` in f32, the most negative finite f32 where the
  /// product of a finite value overflows.
  static float saturatedProduct(float value, double factor) {
    double product = double(value) * factor;
    return float(
        std::max(product, double(std::numeric_limits<float>::lowest())));
  }

  /// A natural-units score in output units (·outScale). A finite fill such
  /// as finfo.min stays finite (the product would overflow to -inf), so a
  /// row hidden entirely by finite fills averages its keys as the graph
  /// does; -inf stays -inf.
  static Value toOutputUnits(IR &in, Value score, double outScale) {
    if (outScale == 1.0)
      return score;
    Value scaled = arith::MaximumFOp::create(
        in.b, in.loc, in.mulf(score, in.f32(outScale)),
        in.f32(std::numeric_limits<float>::lowest()));
    Value isNegInf = arith::CmpFOp::create(
        in.b, in.loc, arith::CmpFPredicate::OEQ, score, in.negInf());
    return in.select(isNegInf, in.negInf(), scaled);
  }

  bool isBoolMask() const {
    return mask &&
           cast<RankedTensorType>(mask.getType()).getElementType().isInteger(1);
  }

  /// The range [begin, end) of keys any of the query rows [row0, row0 + rows)
  /// can see: all keys, cut by the causal diagonal and the window. `begin`
  /// is aligned down to a KV block, so whole blocks outside are skipped and
  /// the blocks visited are the ones a GPU kernel visits.
  std::pair<Value, Value> visibleKeys(IR &ir, Value row0, Value rows,
                                      Value keyCount,
                                      int64_t kvBlockSize) const {
    Value begin = ir.idx(0), end = keyCount;
    // With masked_score, hidden keys still count for a row that sees no key:
    // no block is skipped.
    if (rightBound && !maskedScore) {
      Value diagonal = ir.sub(keyCount, queryLength);
      end = ir.clamp(
          ir.add(ir.add(ir.add(row0, rows), diagonal), ir.idx(*rightBound)),
          ir.idx(0), keyCount);
      if (window) {
        Value first = ir.add(ir.sub(ir.add(row0, diagonal), ir.idx(*window)),
                             ir.idx(1));
        first = ir.clamp(first, ir.idx(0), end);
        Value block = ir.idx(kvBlockSize);
        begin = ir.mul(ir.div(first, block), block);
      }
    }
    return {begin, end};
  }

  /// The result tensor of the op from `[B, Hq, Sq, D]` f32 values computed by
  /// `element(b, h, i, d)` (in the bhsd order), cast and laid out.
  Value emitResult(IR &ir, ValueRange inputs, ArrayRef<AffineMap> inputMaps,
                   function_ref<Value(IR &, ValueRange)> element) const {
    SmallVector<Value> dynamicSizes;
    for (int64_t axis = 0; axis < resultType.getRank(); ++axis)
      if (resultType.isDynamicDim(axis))
        dynamicSizes.push_back(ir.dim(query, axis));
    Value init = tensor::EmptyOp::create(ir.b, ir.loc, resultType.getShape(),
                                         elementType, dynamicSizes);
    // Loops run over the result's axes; inputs are indexed in bhsd order.
    SmallVector<AffineMap> maps;
    for (AffineMap inputMap : inputMaps) {
      if (!bshd) {
        maps.push_back(inputMap);
        continue;
      }
      // Result loop (b, s, h, d) -> bhsd loop (b, h, s, d).
      AffineMap swap = ir.map(4, {0, 2, 1, 3});
      maps.push_back(inputMap.compose(swap));
    }
    maps.push_back(ir.map(4, {0, 1, 2, 3}));
    return ir.generic(inputs, init, maps, {kPar, kPar, kPar, kPar},
                      [&](IR &in, ValueRange args) -> Value {
                        Value value = element(in, args);
                        if (elementType.isF32())
                          return value;
                        return arith::TruncFOp::create(in.b, in.loc,
                                                       elementType, value);
                      });
  }
};

/// Runs `body(iv, iterArgs) -> yielded` as an scf.for from lb to ub.
SmallVector<Value>
forLoop(IR &ir, Value lb, Value ub, Value step, ValueRange inits,
        function_ref<SmallVector<Value>(IR &, Value, ValueRange)> body) {
  auto loop = scf::ForOp::create(ir.b, ir.loc, lb, ub, step, inits);
  OpBuilder::InsertionGuard guard(ir.b);
  ir.b.setInsertionPointToStart(loop.getBody());
  IR in{ir.b, ir.loc};
  SmallVector<Value> yielded =
      body(in, loop.getInductionVar(), loop.getRegionIterArgs());
  if (loop.getBody()->empty() ||
      !loop.getBody()->back().hasTrait<OpTrait::IsTerminator>())
    scf::YieldOp::create(ir.b, ir.loc, yielded);
  return SmallVector<Value>(loop.getResults());
}

/// A lowered kiln.attention: its result and, when the op has one, its
/// log-sum-exp.
struct Lowered {
  Value result;
  Value lse;
};

/// The op's log-sum-exp result from `[B, Hq, Sq]` f32 values in base 2
/// (`base2`, natural = base2·ln 2) or natural units, in the op's lse type.
/// A hidden key's score saturates at the most negative f32 in base 2 when
/// masked_score·log2(e) overflows, so a row that sees no key gets
/// masked_score back there: the fill plus ln(Sk), rounded to f32, is the
/// fill for so large a fill.
Value emitLse(IR &ir, const Site &site, Value lse, bool base2) {
  if (base2) {
    double fill = site.maskedScore ? double(*site.maskedScore) : 0.0;
    bool saturated =
        site.maskedScore && Site::saturatedProduct(*site.maskedScore, kLog2E) !=
                                float(fill * kLog2E);
    float hidden2 = site.maskedScore
                        ? Site::saturatedProduct(*site.maskedScore, kLog2E)
                        : 0.0f;
    lse =
        ir.generic({lse},
                   ir.empty({site.batch, site.numQueryHeads, site.queryLength},
                            ir.b.getF32Type()),
                   {ir.map(3, {0, 1, 2}), ir.map(3, {0, 1, 2})},
                   {kPar, kPar, kPar}, [&](IR &in, ValueRange a) -> Value {
                     Value natural = in.mulf(a[0], in.f32(1.0 / kLog2E));
                     if (!saturated)
                       return natural;
                     Value noKey = in.cmpf(arith::CmpFPredicate::OLE, a[0],
                                           in.f32(hidden2));
                     return in.select(noKey, in.f32(fill), natural);
                   });
  }
  if (lse.getType() == site.lseType)
    return lse;
  return tensor::CastOp::create(ir.b, ir.loc, site.lseType, lse);
}

/// The tiled online-softmax form.
Lowered lowerTiled(IR &ir, const Site &site, const AttentionTiling &tiling) {
  Type f32 = ir.b.getF32Type();
  Value zero = ir.idx(0), one = ir.idx(1);
  Value qBlock = ir.idx(tiling.qBlockSize);
  Value kvBlock = ir.idx(tiling.kvBlockSize);
  int64_t numSplits = tiling.numSplits;
  Value splits = ir.idx(numSplits);

  // Each split's normalised output and base-2 log-sum-exp:
  // [N, B, Hq, Sq, D] and [N, B, Hq, Sq].
  Value partialOut = ir.empty({splits, site.batch, site.numQueryHeads,
                               site.queryLength, site.valueHeadDim},
                              f32);
  Value partialLse = ir.empty(
      {splits, site.batch, site.numQueryHeads, site.queryLength}, f32);

  SmallVector<Value> partials = forLoop(
      ir, zero, site.batch, one, {partialOut, partialLse},
      [&](IR &ir, Value b, ValueRange args) -> SmallVector<Value> {
        Value keyCount = site.keysOf(ir, b);
        return forLoop(
            ir, zero, site.numQueryHeads, one, args,
            [&](IR &ir, Value h, ValueRange args) -> SmallVector<Value> {
              Value kvHead = ir.div(h, site.groupSize);
              return forLoop(
                  ir, zero, site.queryLength, qBlock, args,
                  [&](IR &ir, Value row0, ValueRange args)
                      -> SmallVector<Value> {
                    Value rows = ir.min(qBlock, ir.sub(site.queryLength, row0));
                    Value queryTile = site.queryTile(ir, b, h, row0, rows);
                    auto [begin, end] = site.visibleKeys(
                        ir, row0, rows, keyCount, tiling.kvBlockSize);
                    // Whole KV blocks per split.
                    Value numBlocks =
                        ir.ceilDiv(ir.max(ir.sub(end, begin), zero), kvBlock);
                    Value splitKeys =
                        ir.mul(ir.ceilDiv(numBlocks, splits), kvBlock);
                    return forLoop(
                        ir, zero, splits, one, args,
                        [&](IR &ir, Value split, ValueRange args)
                            -> SmallVector<Value> {
                          Value splitBegin = ir.min(
                              ir.add(begin, ir.mul(split, splitKeys)), end);
                          Value splitEnd = ir.min(
                              ir.add(splitBegin, splitKeys), end);
                          Value rowMax = ir.full({rows}, ir.negInf());
                          Value rowSum = ir.full({rows}, ir.f32(0.0));
                          Value acc =
                              ir.full({rows, site.valueHeadDim}, ir.f32(0.0));
                          SmallVector<Value> state = forLoop(
                              ir, splitBegin, splitEnd, kvBlock,
                              {rowMax, rowSum, acc},
                              [&](IR &ir, Value key0, ValueRange state)
                                  -> SmallVector<Value> {
                                Value keys =
                                    ir.min(kvBlock, ir.sub(splitEnd, key0));
                                Value keyTile =
                                    site.keyTile(ir, b, kvHead, key0, keys);
                                Value valueTile =
                                    site.valueTile(ir, b, kvHead, key0, keys);
                                Value s = site.scores(ir, queryTile, keyTile,
                                                      b, h, row0, key0, rows,
                                                      keys, keyCount, kLog2E);
                                // m' = max(m, rowmax(s)).
                                Value newMax = ir.generic(
                                    {s}, state[0],
                                    {ir.map(2, {0, 1}), ir.map(2, {0})},
                                    {kPar, kRed},
                                    [&](IR &in, ValueRange a) -> Value {
                                      return in.maxf(a[1], a[0]);
                                    });
                                // exp2 is taken relative to m', or to 0 while
                                // the row has seen no key (m' = -inf), so
                                // -inf - -inf never happens.
                                auto safe = [](IR &in, Value m) {
                                  Value isNegInf = in.cmpf(
                                      arith::CmpFPredicate::OEQ, m,
                                      in.negInf());
                                  return in.select(isNegInf, in.f32(0.0), m);
                                };
                                Value rowsInit = ir.empty({rows}, f32);
                                Value correction = ir.generic(
                                    {state[0], newMax}, rowsInit,
                                    {ir.map(1, {0}), ir.map(1, {0}),
                                     ir.map(1, {0})},
                                    {kPar},
                                    [&](IR &in, ValueRange a) -> Value {
                                      return math::Exp2Op::create(
                                          in.b, in.loc,
                                          in.subf(a[0], safe(in, a[1])));
                                    });
                                Value probs = ir.generic(
                                    {s, newMax}, ir.empty({rows, keys}, f32),
                                    {ir.map(2, {0, 1}), ir.map(2, {0}),
                                     ir.map(2, {0, 1})},
                                    {kPar, kPar},
                                    [&](IR &in, ValueRange a) -> Value {
                                      return math::Exp2Op::create(
                                          in.b, in.loc,
                                          in.subf(a[0], safe(in, a[1])));
                                    });
                                // l' = l·c + rowsum(p).
                                Value scaledSum = ir.generic(
                                    {state[1], correction}, rowsInit,
                                    {ir.map(1, {0}), ir.map(1, {0}),
                                     ir.map(1, {0})},
                                    {kPar},
                                    [&](IR &in, ValueRange a) -> Value {
                                      return in.mulf(a[0], a[1]);
                                    });
                                Value newSum = ir.generic(
                                    {probs}, scaledSum,
                                    {ir.map(2, {0, 1}), ir.map(2, {0})},
                                    {kPar, kRed},
                                    [&](IR &in, ValueRange a) -> Value {
                                      return in.addf(a[1], a[0]);
                                    });
                                // acc' = acc·c + p·V.
                                Value scaledAcc = ir.generic(
                                    {state[2], correction},
                                    ir.empty({rows, site.valueHeadDim}, f32),
                                    {ir.map(2, {0, 1}), ir.map(2, {0}),
                                     ir.map(2, {0, 1})},
                                    {kPar, kPar},
                                    [&](IR &in, ValueRange a) -> Value {
                                      return in.mulf(a[0], a[1]);
                                    });
                                Value newAcc = ir.generic(
                                    {probs, valueTile}, scaledAcc,
                                    {ir.map(3, {0, 2}), ir.map(3, {2, 1}),
                                     ir.map(3, {0, 1})},
                                    {kPar, kPar, kRed},
                                    [&](IR &in, ValueRange a) -> Value {
                                      return in.addf(
                                          a[2],
                                          in.mulf(a[0], in.toF32(a[1])));
                                    });
                                return {newMax, newSum, newAcc};
                              });
                          // This split's normalised output (0 where the row
                          // saw no key) and log-sum-exp (-inf there).
                          Value out = ir.generic(
                              {state[2], state[1]},
                              ir.empty({rows, site.valueHeadDim}, f32),
                              {ir.map(2, {0, 1}), ir.map(2, {0}),
                               ir.map(2, {0, 1})},
                              {kPar, kPar}, [&](IR &in, ValueRange a) -> Value {
                                Value seen = in.cmpf(arith::CmpFPredicate::OGT,
                                                     a[1], in.f32(0.0));
                                return in.select(seen, in.divf(a[0], a[1]),
                                                 in.f32(0.0));
                              });
                          Value lse = ir.generic(
                              {state[0], state[1]}, ir.empty({rows}, f32),
                              {ir.map(1, {0}), ir.map(1, {0}),
                               ir.map(1, {0})},
                              {kPar}, [&](IR &in, ValueRange a) -> Value {
                                Value seen = in.cmpf(arith::CmpFPredicate::OGT,
                                                     a[1], in.f32(0.0));
                                Value log = math::Log2Op::create(in.b, in.loc,
                                                                 a[1]);
                                return in.select(seen, in.addf(a[0], log),
                                                 in.negInf());
                              });
                          OpFoldResult unit = ir.b.getIndexAttr(1);
                          Value newOut = tensor::InsertSliceOp::create(
                              ir.b, ir.loc, out, args[0],
                              ArrayRef<OpFoldResult>{split, b, h, row0,
                                                     ir.b.getIndexAttr(0)},
                              ArrayRef<OpFoldResult>{unit, unit, unit, rows,
                                                     site.valueHeadDim},
                              SmallVector<OpFoldResult>(5, unit));
                          Value newLse = tensor::InsertSliceOp::create(
                              ir.b, ir.loc, lse, args[1],
                              ArrayRef<OpFoldResult>{split, b, h, row0},
                              ArrayRef<OpFoldResult>{unit, unit, unit, rows},
                              SmallVector<OpFoldResult>(4, unit));
                          return {newOut, newLse};
                        });
                  });
            });
      });

  if (numSplits == 1) {
    OpFoldResult unit = ir.b.getIndexAttr(1);
    OpFoldResult zeroAttr = ir.b.getIndexAttr(0);
    Value out = tensor::ExtractSliceOp::create(
        ir.b, ir.loc, RankedTensorType::get({kDyn, kDyn, kDyn, kDyn}, f32),
        partials[0],
        ArrayRef<OpFoldResult>{zeroAttr, zeroAttr, zeroAttr, zeroAttr,
                               zeroAttr},
        ArrayRef<OpFoldResult>{unit, site.batch, site.numQueryHeads,
                               site.queryLength, site.valueHeadDim},
        SmallVector<OpFoldResult>(5, unit));
    Lowered lowered;
    lowered.result = site.emitResult(ir, {out}, {ir.map(4, {0, 1, 2, 3})},
                                     [](IR &, ValueRange a) { return a[0]; });
    if (site.lseType) {
      Value lse = tensor::ExtractSliceOp::create(
          ir.b, ir.loc, RankedTensorType::get({kDyn, kDyn, kDyn}, f32),
          partials[1],
          ArrayRef<OpFoldResult>{zeroAttr, zeroAttr, zeroAttr, zeroAttr},
          ArrayRef<OpFoldResult>{unit, site.batch, site.numQueryHeads,
                                 site.queryLength},
          SmallVector<OpFoldResult>(4, unit));
      lowered.lse = emitLse(ir, site, lse, /*base2=*/true);
    }
    return lowered;
  }

  // Combine: weight split s by exp2(lse_s - max_s lse_s).
  SmallVector<Value> rowSizes = {site.batch, site.numQueryHeads,
                                 site.queryLength};
  Value maxLse = ir.generic(
      {partials[1]}, ir.full(rowSizes, ir.negInf()),
      {ir.map(4, {0, 1, 2, 3}), ir.map(4, {1, 2, 3})},
      {kRed, kPar, kPar, kPar},
      [](IR &in, ValueRange a) { return in.maxf(a[1], a[0]); });
  Value weights = ir.generic(
      {partials[1], maxLse},
      ir.empty({splits, site.batch, site.numQueryHeads, site.queryLength},
               f32),
      {ir.map(4, {0, 1, 2, 3}), ir.map(4, {1, 2, 3}), ir.map(4, {0, 1, 2, 3})},
      {kPar, kPar, kPar, kPar}, [](IR &in, ValueRange a) -> Value {
        Value noKey =
            in.cmpf(arith::CmpFPredicate::OEQ, a[1], in.negInf());
        Value weight =
            math::Exp2Op::create(in.b, in.loc, in.subf(a[0], a[1]));
        return in.select(noKey, in.f32(0.0), weight);
      });
  Value total = ir.generic(
      {weights}, ir.full(rowSizes, ir.f32(0.0)),
      {ir.map(4, {0, 1, 2, 3}), ir.map(4, {1, 2, 3})},
      {kRed, kPar, kPar, kPar},
      [](IR &in, ValueRange a) { return in.addf(a[1], a[0]); });
  Value weighted = ir.generic(
      {partials[0], weights},
      ir.full({site.batch, site.numQueryHeads, site.queryLength, site.valueHeadDim},
              ir.f32(0.0)),
      {ir.map(5, {4, 0, 1, 2, 3}), ir.map(5, {4, 0, 1, 2}),
       ir.map(5, {0, 1, 2, 3})},
      {kPar, kPar, kPar, kPar, kRed}, [](IR &in, ValueRange a) -> Value {
        return in.addf(a[2], in.mulf(a[0], a[1]));
      });
  Lowered lowered;
  lowered.result = site.emitResult(
      ir, {weighted, total}, {ir.map(4, {0, 1, 2, 3}), ir.map(4, {0, 1, 2})},
      [](IR &in, ValueRange a) -> Value {
        Value seen = in.cmpf(arith::CmpFPredicate::OGT, a[1], in.f32(0.0));
        return in.select(seen, in.divf(a[0], a[1]), in.f32(0.0));
      });
  if (site.lseType) {
    // The combined log-sum-exp: max_s lse_s + log2(Σ_s weight_s).
    Value lse = ir.generic(
        {maxLse, total}, ir.empty(rowSizes, f32),
        {ir.map(3, {0, 1, 2}), ir.map(3, {0, 1, 2}), ir.map(3, {0, 1, 2})},
        {kPar, kPar, kPar}, [](IR &in, ValueRange a) -> Value {
          Value seen = in.cmpf(arith::CmpFPredicate::OGT, a[1], in.f32(0.0));
          Value log = math::Log2Op::create(in.b, in.loc, a[1]);
          return in.select(seen, in.addf(a[0], log), in.negInf());
        });
    lowered.lse = emitLse(ir, site, lse, /*base2=*/true);
  }
  return lowered;
}

/// The plain reference form: whole rows, exp, no running statistics.
Lowered lowerDecomposed(IR &ir, const Site &site) {
  Type f32 = ir.b.getF32Type();
  Value zero = ir.idx(0), one = ir.idx(1);
  Value outInit = ir.empty(
      {site.batch, site.numQueryHeads, site.queryLength, site.valueHeadDim}, f32);
  SmallVector<Value> inits = {outInit};
  if (site.lseType)
    inits.push_back(
        ir.empty({site.batch, site.numQueryHeads, site.queryLength}, f32));
  SmallVector<Value> out = forLoop(
      ir, zero, site.batch, one, inits,
      [&](IR &ir, Value b, ValueRange args) -> SmallVector<Value> {
        Value keyCount = site.keysOf(ir, b);
        return forLoop(
            ir, zero, site.numQueryHeads, one, args,
            [&](IR &ir, Value h, ValueRange args) -> SmallVector<Value> {
              Value kvHead = ir.div(h, site.groupSize);
              Value rows = site.queryLength;
              Value queryTile = site.queryTile(ir, b, h, zero, rows);
              Value keyTile = site.keyTile(ir, b, kvHead, zero, keyCount);
              Value valueTile = site.valueTile(ir, b, kvHead, zero, keyCount);
              Value s = site.scores(ir, queryTile, keyTile, b, h, zero, zero,
                                    rows, keyCount, keyCount, 1.0);
              Value rowMax = ir.generic(
                  {s}, ir.full({rows}, ir.negInf()),
                  {ir.map(2, {0, 1}), ir.map(2, {0})}, {kPar, kRed},
                  [](IR &in, ValueRange a) { return in.maxf(a[1], a[0]); });
              Value probs = ir.generic(
                  {s, rowMax}, ir.empty({rows, keyCount}, f32),
                  {ir.map(2, {0, 1}), ir.map(2, {0}), ir.map(2, {0, 1})},
                  {kPar, kPar}, [](IR &in, ValueRange a) -> Value {
                    // A row that sees no key has max -inf: its
                    // probabilities are 0, not NaN.
                    Value noKey = in.cmpf(arith::CmpFPredicate::OEQ, a[1],
                                          in.negInf());
                    Value p = math::ExpOp::create(in.b, in.loc,
                                                  in.subf(a[0], a[1]));
                    return in.select(noKey, in.f32(0.0), p);
                  });
              Value rowSum = ir.generic(
                  {probs}, ir.full({rows}, ir.f32(0.0)),
                  {ir.map(2, {0, 1}), ir.map(2, {0})}, {kPar, kRed},
                  [](IR &in, ValueRange a) { return in.addf(a[1], a[0]); });
              std::optional<float> probScale = site.probScale;
              Value normalised = ir.generic(
                  {probs, rowSum}, ir.empty({rows, keyCount}, f32),
                  {ir.map(2, {0, 1}), ir.map(2, {0}), ir.map(2, {0, 1})},
                  {kPar, kPar}, [&](IR &in, ValueRange a) -> Value {
                    Value seen = in.cmpf(arith::CmpFPredicate::OGT, a[1],
                                         in.f32(0.0));
                    Value p =
                        in.select(seen, in.divf(a[0], a[1]), in.f32(0.0));
                    if (!probScale)
                      return p;
                    // e4m3(clamp(p · (1/s), ±448)) · s, as the graph's
                    // QuantizeLinear and DequantizeLinear of P.
                    Value scaled = in.mulf(
                        p, in.f32(1.0 / static_cast<double>(*probScale)));
                    Value clamped = arith::MaximumFOp::create(
                        in.b, in.loc,
                        arith::MinimumFOp::create(in.b, in.loc, scaled,
                                                  in.f32(448.0)),
                        in.f32(-448.0));
                    Value rounded = in.decodeE4M3(
                        encodeE4M3(in.b, in.loc, clamped));
                    return in.mulf(rounded, in.f32(*probScale));
                  });
              Value headOut = ir.generic(
                  {normalised, valueTile},
                  ir.full({rows, site.valueHeadDim}, ir.f32(0.0)),
                  {ir.map(3, {0, 2}), ir.map(3, {2, 1}), ir.map(3, {0, 1})},
                  {kPar, kPar, kRed}, [](IR &in, ValueRange a) -> Value {
                    return in.addf(a[2], in.mulf(a[0], in.toF32(a[1])));
                  });
              OpFoldResult unit = ir.b.getIndexAttr(1);
              OpFoldResult zeroAttr = ir.b.getIndexAttr(0);
              Value inserted = tensor::InsertSliceOp::create(
                  ir.b, ir.loc, headOut, args[0],
                  ArrayRef<OpFoldResult>{b, h, zeroAttr, zeroAttr},
                  ArrayRef<OpFoldResult>{unit, unit, rows, site.valueHeadDim},
                  SmallVector<OpFoldResult>(4, unit));
              if (!site.lseType)
                return {inserted};
              // lse = max + ln(sum); -inf where the row saw no key.
              Value lse = ir.generic(
                  {rowMax, rowSum}, ir.empty({rows}, f32),
                  {ir.map(1, {0}), ir.map(1, {0}), ir.map(1, {0})}, {kPar},
                  [](IR &in, ValueRange a) -> Value {
                    Value seen =
                        in.cmpf(arith::CmpFPredicate::OGT, a[1], in.f32(0.0));
                    Value log = math::LogOp::create(in.b, in.loc, a[1]);
                    return in.select(seen, in.addf(a[0], log), in.negInf());
                  });
              Value lseInserted = tensor::InsertSliceOp::create(
                  ir.b, ir.loc, lse, args[1],
                  ArrayRef<OpFoldResult>{b, h, zeroAttr},
                  ArrayRef<OpFoldResult>{unit, unit, rows},
                  SmallVector<OpFoldResult>(3, unit));
              return {inserted, lseInserted};
            });
      });
  Lowered lowered;
  lowered.result = site.emitResult(ir, {out[0]}, {ir.map(4, {0, 1, 2, 3})},
                                   [](IR &, ValueRange a) { return a[0]; });
  if (site.lseType)
    lowered.lse = emitLse(ir, site, out[1], /*base2=*/false);
  return lowered;
}

/// A size of `tensor` as an attribute where its type has it, else a
/// tensor.dim.
OpFoldResult sizeOf(IR &ir, Value tensor, int64_t axis) {
  int64_t size = cast<RankedTensorType>(tensor.getType()).getDimSize(axis);
  if (!ShapedType::isDynamic(size))
    return ir.b.getIndexAttr(size);
  return ir.dim(tensor, axis);
}

/// The static shape and dynamic sizes of an empty tensor of `sizes`.
std::pair<SmallVector<int64_t>, SmallVector<Value>>
emptyOf(ArrayRef<OpFoldResult> sizes) {
  SmallVector<int64_t> shape;
  SmallVector<Value> dynamic;
  for (OpFoldResult size : sizes) {
    if (auto attr = dyn_cast<Attribute>(size)) {
      shape.push_back(cast<IntegerAttr>(attr).getInt());
      continue;
    }
    shape.push_back(kDyn);
    dynamic.push_back(cast<Value>(size));
  }
  return {shape, dynamic};
}

/// The clamped row range of sequence `b` in `offsets` ([batch + 1]): each
/// offset clamped into [0, rows], the end at least the start.
std::pair<Value, Value> sequenceRows(IR &in, Value offsets, Value b,
                                     Value rows) {
  auto offsetAt = [&](Value index) {
    Value raw = in.toIndex(
        tensor::ExtractOp::create(in.b, in.loc, offsets, ValueRange{index}));
    return in.clamp(raw, in.idx(0), rows);
  };
  Value start = offsetAt(b);
  Value end = in.max(offsetAt(in.add(b, in.idx(1))), start);
  return {start, end};
}

/// Rows [start, start + rows) of a packed `[total, H, D]` tensor as the
/// `[1, rows, H, D]` tensor of one sequence (bshd).
Value sequenceSlice(IR &in, Value packed, Value start, Value rows) {
  OpFoldResult one = in.b.getIndexAttr(1), zero = in.b.getIndexAttr(0);
  auto type = cast<RankedTensorType>(packed.getType());
  OpFoldResult heads = sizeOf(in, packed, 1), dim = sizeOf(in, packed, 2);
  auto [shape, dynamic] = emptyOf({rows, heads, dim});
  (void)dynamic;
  Value slice = tensor::ExtractSliceOp::create(
      in.b, in.loc, RankedTensorType::get(shape, type.getElementType()),
      packed, ArrayRef<OpFoldResult>{start, zero, zero},
      ArrayRef<OpFoldResult>{rows, heads, dim},
      SmallVector<OpFoldResult>(3, one));
  auto [wideShape, wideDynamic] = emptyOf({one, rows, heads, dim});
  (void)wideDynamic;
  return tensor::ExpandShapeOp::create(
      in.b, in.loc, RankedTensorType::get(wideShape, type.getElementType()),
      slice, SmallVector<ReassociationIndices>{{0, 1}, {2}, {3}});
}

/// A packed result `[total_q, Hq, Dv]` computed one sequence at a time:
/// `rowsOf(in, b, start, rows)` gives sequence b's rows [start, start +
/// rows) of it as `[rows, Hq, Dv]`, with its range read from `qOffsets`
/// (clamped into [0, total_q] and made non-decreasing, so bad offsets
/// never read outside Q). Rows no sequence owns are zeros. With `lseType`
/// (`[Hq, total_q]`), `rowsOf` also gives the sequence's log-sum-exp as
/// `[Hq, rows]`, and rows no sequence owns hold -inf.
Lowered
lowerPerSequence(IR &ir, Value query, Value qOffsets, Value batch,
                 RankedTensorType resultType, OpFoldResult valueDim,
                 RankedTensorType lseType,
                 function_ref<Lowered(IR &, Value, Value, Value)> rowsOf) {
  Type element = resultType.getElementType();
  Value totalRows = ir.dim(query, 0);
  Value zero =
      arith::ConstantOp::create(ir.b, ir.loc, ir.b.getZeroAttr(element));
  auto [outShape, outDynamic] =
      emptyOf({sizeOf(ir, query, 0), sizeOf(ir, query, 1), valueDim});
  Value init = linalg::FillOp::create(
                   ir.b, ir.loc, ValueRange{zero},
                   ValueRange{tensor::EmptyOp::create(
                       ir.b, ir.loc, outShape, element, outDynamic)})
                   .getResult(0);
  if (init.getType() != resultType)
    init = tensor::CastOp::create(ir.b, ir.loc, resultType, init);
  SmallVector<Value> inits = {init};
  if (lseType) {
    auto [lseShape, lseDynamic] =
        emptyOf({sizeOf(ir, query, 1), sizeOf(ir, query, 0)});
    Value lseInit =
        linalg::FillOp::create(
            ir.b, ir.loc, ValueRange{ir.negInf()},
            ValueRange{tensor::EmptyOp::create(ir.b, ir.loc, lseShape,
                                               ir.b.getF32Type(), lseDynamic)})
            .getResult(0);
    if (lseInit.getType() != lseType)
      lseInit = tensor::CastOp::create(ir.b, ir.loc, lseType, lseInit);
    inits.push_back(lseInit);
  }
  OpFoldResult one = ir.b.getIndexAttr(1), zeroAttr = ir.b.getIndexAttr(0);
  auto loop = scf::ForOp::create(
      ir.b, ir.loc, ir.idx(0), batch, ir.idx(1), inits,
      [&](OpBuilder &nested, Location loc, Value b, ValueRange args) {
        IR in{nested, loc};
        auto [start, end] = sequenceRows(in, qOffsets, b, totalRows);
        Value rows = in.sub(end, start);
        Lowered packed = rowsOf(in, b, start, rows);
        SmallVector<Value> yielded = {tensor::InsertSliceOp::create(
            in.b, loc, packed.result, args[0],
            ArrayRef<OpFoldResult>{start, zeroAttr, zeroAttr},
            ArrayRef<OpFoldResult>{rows, sizeOf(in, query, 1), valueDim},
            SmallVector<OpFoldResult>(3, one))};
        // The lse of the sequence is [?, rows], its heads dynamic.
        if (lseType)
          yielded.push_back(tensor::InsertSliceOp::create(
              in.b, loc, packed.lse, args[1],
              ArrayRef<OpFoldResult>{zeroAttr, start},
              ArrayRef<OpFoldResult>{in.dim(query, 1), rows},
              SmallVector<OpFoldResult>(2, one)));
        scf::YieldOp::create(in.b, loc, yielded);
      });
  Lowered lowered;
  lowered.result = loop.getResult(0);
  if (lseType)
    lowered.lse = loop.getResult(1);
  return lowered;
}

/// A ragged kiln.paged_attention as what it means: a loop over the
/// sequences, each one's rows [q_offsets[b], q_offsets[b + 1]) taken out as
/// a `[1, Hq, Sq_b, D]` query for the uniform op on its row of the page
/// table and its key count, lowered by `lowerUniform`, and its result put
/// back into rows of the packed `[total_q, Hq, Dv]` result.
Value lowerRagged(IR &ir, PagedAttentionOp op,
                  function_ref<Value(IR &, const Site &)> lowerUniform) {
  Value query = op.getQuery();
  auto resultType = cast<RankedTensorType>(op.getResult().getType());
  Type element = op.getElementType();
  OpFoldResult heads = sizeOf(ir, query, 1), dim = sizeOf(ir, query, 2),
               valueDim = sizeOf(ir, op.getValueCache(), 3);
  OpFoldResult one = ir.b.getIndexAttr(1), zeroAttr = ir.b.getIndexAttr(0);
  auto rowsOf = [&](IR &in, Value b, Value start, Value rows) -> Lowered {
    Location loc = in.loc;
    // Q rows [start, end) as [1, Hq, rows, D].
    auto [sliceShape, sliceDynamic] = emptyOf({rows, heads, dim});
    (void)sliceDynamic;
    Value rowsOfQ = tensor::ExtractSliceOp::create(
        in.b, loc, RankedTensorType::get(sliceShape, element), query,
        ArrayRef<OpFoldResult>{start, zeroAttr, zeroAttr},
        ArrayRef<OpFoldResult>{rows, heads, dim},
        SmallVector<OpFoldResult>(3, one));
    auto [qShape, qDynamic] = emptyOf({one, heads, rows, dim});
    Value uniformQuery = in.generic(
        {rowsOfQ},
        tensor::EmptyOp::create(in.b, loc, qShape, element, qDynamic),
        {in.map(4, {2, 1, 3}), in.map(4, {0, 1, 2, 3})},
        {kPar, kPar, kPar, kPar}, [](IR &, ValueRange a) { return a[0]; });
    // The sequence's row of the page table and its key count.
    Value table = op.getPageTable();
    auto [rowShape, rowDynamic] = emptyOf({one, sizeOf(in, table, 1)});
    (void)rowDynamic;
    Value tableRow = tensor::ExtractSliceOp::create(
        in.b, loc, RankedTensorType::get(rowShape, in.b.getI32Type()), table,
        ArrayRef<OpFoldResult>{b, zeroAttr},
        ArrayRef<OpFoldResult>{one, sizeOf(in, table, 1)},
        ArrayRef<OpFoldResult>{one, one});
    Value keyCount = tensor::ExtractSliceOp::create(
        in.b, loc, RankedTensorType::get({1}, in.b.getI32Type()),
        op.getKvLens(), ArrayRef<OpFoldResult>{b},
        ArrayRef<OpFoldResult>{one}, ArrayRef<OpFoldResult>{one});
    auto [uniformShape, uniformDynamic] = emptyOf({one, heads, rows, valueDim});
    (void)uniformDynamic;
    Site site = Site::fromPaged(in, op, uniformQuery, tableRow, keyCount,
                                RankedTensorType::get(uniformShape, element));
    Value result = lowerUniform(in, site);
    // [1, Hq, rows, Dv] back to [rows, Hq, Dv].
    Value collapsed = tensor::CollapseShapeOp::create(
        in.b, loc, result, SmallVector<ReassociationIndices>{{0, 1}, {2}, {3}});
    auto [packedShape, packedDynamic] = emptyOf({rows, heads, valueDim});
    return {in.generic({collapsed},
                       tensor::EmptyOp::create(in.b, loc, packedShape, element,
                                               packedDynamic),
                       {in.map(3, {1, 0, 2}), in.map(3, {0, 1, 2})},
                       {kPar, kPar, kPar},
                       [](IR &, ValueRange a) { return a[0]; }),
            Value()};
  };
  return lowerPerSequence(ir, query, op.getQOffsets(),
                          ir.dim(op.getKvLens(), 0), resultType, valueDim,
                          /*lseType=*/nullptr, rowsOf)
      .result;
}

/// A packed kiln.attention (offsets) as what it means: a loop over the
/// sequences, each one's query rows and key/value rows taken out as a
/// `[1, rows, H, D]` (bshd) uniform site, lowered by `lowerUniform`, and
/// its result put back into rows of the packed result. Key offsets are
/// clamped into [0, total_kv] and made non-decreasing like the query's.
Lowered lowerPacked(IR &ir, AttentionOp op,
                    function_ref<Lowered(IR &, const Site &)> lowerUniform) {
  Value query = op.getQuery();
  auto resultType = cast<RankedTensorType>(op.getResult().getType());
  Type element = op.getElementType();
  OpFoldResult heads = sizeOf(ir, query, 1),
               valueDim = sizeOf(ir, op.getValue(), 2);
  OpFoldResult one = ir.b.getIndexAttr(1);
  Value totalKeys = ir.dim(op.getKey(), 0);
  RankedTensorType lseType;
  if (Value lse = op.getLse())
    lseType = cast<RankedTensorType>(lse.getType());
  auto rowsOf = [&](IR &in, Value b, Value start, Value rows) -> Lowered {
    auto [keyStart, keyEnd] = sequenceRows(in, op.getKvOffsets(), b, totalKeys);
    Value keys = in.sub(keyEnd, keyStart);
    auto [shape, dynamic] = emptyOf({one, rows, heads, valueDim});
    (void)dynamic;
    Site site = Site::fromPacked(
        in, op, sequenceSlice(in, query, start, rows),
        sequenceSlice(in, op.getKey(), keyStart, keys),
        sequenceSlice(in, op.getValue(), keyStart, keys),
        RankedTensorType::get(shape, element));
    if (lseType)
      site.lseType = RankedTensorType::get({1, kDyn, kDyn}, in.b.getF32Type());
    Lowered uniform = lowerUniform(in, site);
    // [1, rows, Hq, Dv] (bshd) to [rows, Hq, Dv]; the lse [1, Hq, rows] to
    // [Hq, rows].
    Lowered packed;
    packed.result = tensor::CollapseShapeOp::create(
        in.b, in.loc, uniform.result,
        SmallVector<ReassociationIndices>{{0, 1}, {2}, {3}});
    if (lseType)
      packed.lse = tensor::CollapseShapeOp::create(
          in.b, in.loc, uniform.lse,
          SmallVector<ReassociationIndices>{{0, 1}, {2}});
    return packed;
  };
  // Sequences: q_offsets' entries less one (none where it has none).
  Value batch = ir.max(ir.sub(ir.dim(op.getQOffsets(), 0), ir.idx(1)),
                       ir.idx(0));
  return lowerPerSequence(ir, query, op.getQOffsets(), batch, resultType,
                          valueDim, lseType, rowsOf);
}

/// The gradients a lowered kiln.attention_grad gives: of Q, K, V (their
/// types) and, when asked, of the bias (null otherwise).
struct LoweredGrad {
  Value query, key, value, bias;
};

/// `accumulated` (`[B, H, S, D]` f32, bhsd) as a tensor of `like`'s type
/// and sizes: laid out as the site's layout and cast to its element type.
Value emitLike(IR &ir, const Site &site, Value accumulated, Value like) {
  auto type = cast<RankedTensorType>(like.getType());
  SmallVector<Value> dynamicSizes;
  for (int64_t axis = 0; axis < type.getRank(); ++axis)
    if (type.isDynamicDim(axis))
      dynamicSizes.push_back(ir.dim(like, axis));
  Value init = tensor::EmptyOp::create(ir.b, ir.loc, type.getShape(),
                                       type.getElementType(), dynamicSizes);
  AffineMap input =
      site.bshd ? ir.map(4, {0, 2, 1, 3}) : ir.map(4, {0, 1, 2, 3});
  Type element = type.getElementType();
  return ir.generic(
      {accumulated}, init, {input, ir.map(4, {0, 1, 2, 3})},
      {kPar, kPar, kPar, kPar}, [&](IR &in, ValueRange a) -> Value {
        if (element.isF32())
          return a[0];
        return arith::TruncFOp::create(in.b, in.loc, element, a[0]);
      });
}

/// The bias's gradient from the scores' `[B, Hq, Sq, Sk]` f32 gradient:
/// summed over the axes the bias broadcasts along (its static size-1 axes
/// and the leading axes a lower rank leaves out), in the bias's type.
Value reduceToBias(IR &ir, Value scoreGrads, Value bias) {
  auto biasType = cast<RankedTensorType>(bias.getType());
  int64_t rank = biasType.getRank();
  // The logical axes the bias keeps, and how its own axes group around
  // them (a size-1 axis joins the kept axis after it, or the last one).
  SmallVector<unsigned> kept;
  SmallVector<Value> keptSizes;
  SmallVector<int64_t> keptShape;
  SmallVector<ReassociationIndices> groups;
  ReassociationIndices pending;
  for (int64_t axis = 0; axis < rank; ++axis) {
    pending.push_back(axis);
    if (biasType.getDimSize(axis) == 1)
      continue;
    kept.push_back(4 - rank + axis);
    keptShape.push_back(biasType.getDimSize(axis));
    if (biasType.isDynamicDim(axis))
      keptSizes.push_back(ir.dim(bias, axis));
    groups.push_back(pending);
    pending.clear();
  }
  if (!pending.empty() && !groups.empty())
    groups.back().append(pending.begin(), pending.end());
  SmallVector<utils::IteratorType> iterators(4, kRed);
  for (unsigned axis : kept)
    iterators[axis] = kPar;
  Type f32 = ir.b.getF32Type();
  Value zeros =
      linalg::FillOp::create(ir.b, ir.loc, ValueRange{ir.f32(0.0)},
                             ValueRange{tensor::EmptyOp::create(
                                 ir.b, ir.loc, keptShape, f32, keptSizes)})
          .getResult(0);
  Value sums = ir.generic(
      {scoreGrads}, zeros, {ir.map(4, {0, 1, 2, 3}), ir.map(4, kept)},
      iterators, [](IR &in, ValueRange a) { return in.addf(a[1], a[0]); });
  auto wideType = RankedTensorType::get(biasType.getShape(), f32);
  Value wide = sums;
  if (static_cast<int64_t>(kept.size()) != rank)
    wide = tensor::ExpandShapeOp::create(ir.b, ir.loc, wideType, sums, groups);
  Type element = biasType.getElementType();
  if (element.isF32())
    return wide;
  SmallVector<Value> dynamicSizes;
  for (int64_t axis = 0; axis < rank; ++axis)
    if (biasType.isDynamicDim(axis))
      dynamicSizes.push_back(ir.dim(bias, axis));
  SmallVector<unsigned> identity;
  for (int64_t axis = 0; axis < rank; ++axis)
    identity.push_back(axis);
  return ir.generic({wide},
                    tensor::EmptyOp::create(ir.b, ir.loc, biasType.getShape(),
                                            element, dynamicSizes),
                    {ir.map(rank, identity), ir.map(rank, identity)},
                    SmallVector<utils::IteratorType>(rank, kPar),
                    [&](IR &in, ValueRange a) -> Value {
                      return arith::TruncFOp::create(in.b, in.loc, element,
                                                     a[0]);
                    });
}

/// The backward pass in the reference form: per (batch, query head), whole
/// rows; the probabilities recomputed from the scores and the forward's
/// log-sum-exp, `D = rowsum(dOut ∘ out)`, `dS = P·(dOut·Vᵀ - D)`, then dQ,
/// dK, dV as products, dK and dV accumulated over the query heads of a
/// group.
LoweredGrad lowerGradDecomposed(IR &ir, const Site &site) {
  Type f32 = ir.b.getF32Type();
  Value zero = ir.idx(0), one = ir.idx(1);
  Value numKvHeads = ir.dim(site.key, site.bshd ? 2 : 1);
  SmallVector<Value> inits = {
      ir.full({site.batch, site.numQueryHeads, site.queryLength, site.headDim},
              ir.f32(0.0)),
      ir.full({site.batch, numKvHeads, site.kvLength, site.headDim},
              ir.f32(0.0)),
      ir.full({site.batch, numKvHeads, site.kvLength, site.valueHeadDim},
              ir.f32(0.0))};
  bool biasGrad = site.biasGrad && site.bias;
  if (biasGrad)
    inits.push_back(ir.full(
        {site.batch, site.numQueryHeads, site.queryLength, site.kvLength},
        ir.f32(0.0)));
  OpFoldResult unit = ir.b.getIndexAttr(1);
  OpFoldResult zeroAttr = ir.b.getIndexAttr(0);
  SmallVector<Value> grads = forLoop(
      ir, zero, site.batch, one, inits,
      [&](IR &ir, Value b, ValueRange args) -> SmallVector<Value> {
        return forLoop(
            ir, zero, site.numQueryHeads, one, args,
            [&](IR &ir, Value h, ValueRange args) -> SmallVector<Value> {
              Value kvHead = ir.div(h, site.groupSize);
              Value rows = site.queryLength, keys = site.kvLength;
              Value queryTile = site.queryTile(ir, b, h, zero, rows);
              Value keyTile = site.keyTile(ir, b, kvHead, zero, keys);
              Value valueTile = site.valueTile(ir, b, kvHead, zero, keys);
              Value outTile = site.sliceRows(ir, site.out, b, h, zero, rows);
              Value gradOutTile =
                  site.sliceRows(ir, site.gradOut, b, h, zero, rows);
              Value lseRow = tensor::ExtractSliceOp::create(
                  ir.b, ir.loc, RankedTensorType::get({kDyn}, f32), site.lse,
                  ArrayRef<OpFoldResult>{b, h, zeroAttr},
                  ArrayRef<OpFoldResult>{unit, unit, rows},
                  SmallVector<OpFoldResult>(3, unit));
              Value dots = site.dots(ir, queryTile, keyTile, rows, keys);
              Value diagonal = ir.sub(keys, site.queryLength);
              Value factor = site.runtimeFactor(ir, h);
              auto scoreAt = [&](IR &in, Value dot) {
                return site.scoreOf(in, dot, factor, b, h, zero, zero, diagonal,
                                    1.0);
              };
              AffineMap tile = ir.map(2, {0, 1}), row = ir.map(2, {0});
              // dP = dOut·Vᵀ and D = rowsum(dOut ∘ out).
              Value gradProbs = ir.generic(
                  {gradOutTile, valueTile}, ir.full({rows, keys}, ir.f32(0.0)),
                  {ir.map(3, {0, 2}), ir.map(3, {1, 2}), ir.map(3, {0, 1})},
                  {kPar, kPar, kRed}, [](IR &in, ValueRange a) -> Value {
                    return in.addf(a[2],
                                   in.mulf(in.toF32(a[0]), in.toF32(a[1])));
                  });
              Value rowDots =
                  ir.generic({gradOutTile, outTile},
                             ir.full({rows}, ir.f32(0.0)), {tile, tile, row},
                             {kPar, kRed}, [](IR &in, ValueRange a) -> Value {
                               return in.addf(a[2], in.mulf(in.toF32(a[0]),
                                                            in.toF32(a[1])));
                             });
              // With masked_score, whether each row sees a key: a row that
              // sees none averages V uniformly, whatever its lse.
              Value seen;
              if (site.maskedScore)
                seen = ir.generic(
                    {dots}, ir.full({rows}, ir.f32(0.0)), {tile, row},
                    {kPar, kRed}, [&](IR &in, ValueRange a) -> Value {
                      Value hidden = scoreAt(in, a[0]).hidden;
                      return in.maxf(
                          a[1], in.select(hidden, in.f32(0.0), in.f32(1.0)));
                    });
              Value uniform;
              if (site.maskedScore)
                uniform =
                    ir.divf(ir.f32(1.0),
                            arith::UIToFPOp::create(
                                ir.b, ir.loc, f32,
                                arith::IndexCastUIOp::create(
                                    ir.b, ir.loc, ir.b.getI64Type(), keys)));
              // P = exp(s - lse): 0 where lse is -inf (the row saw no key),
              // and, with masked_score, 0 for a hidden key of a row that sees
              // a key and 1/Sk for every key of a row that sees none.
              SmallVector<Value> probInputs = {dots, lseRow};
              SmallVector<AffineMap> probMaps = {tile, row};
              if (seen) {
                probInputs.push_back(seen);
                probMaps.push_back(row);
              }
              probMaps.push_back(tile);
              Value probs = ir.generic(
                  probInputs, ir.empty({rows, keys}, f32), probMaps,
                  {kPar, kPar}, [&](IR &in, ValueRange a) -> Value {
                    Site::Score score = scoreAt(in, a[0]);
                    Value noKey =
                        in.cmpf(arith::CmpFPredicate::OEQ, a[1], in.negInf());
                    Value p = math::ExpOp::create(in.b, in.loc,
                                                  in.subf(score.value, a[1]));
                    p = in.select(noKey, in.f32(0.0), p);
                    if (!seen)
                      return p;
                    Value rowSees =
                        in.cmpf(arith::CmpFPredicate::OGT, a[2], in.f32(0.0));
                    Value hiddenProb = in.select(rowSees, in.f32(0.0), uniform);
                    return in.select(score.hidden, hiddenProb, p);
                  });
              // dS = P·(dP - D), 0 for hidden keys (constant scores).
              Value scoreGrads = ir.generic(
                  {dots, probs, gradProbs, rowDots},
                  ir.empty({rows, keys}, f32), {tile, tile, tile, row, tile},
                  {kPar, kPar}, [&](IR &in, ValueRange a) -> Value {
                    Value grad = in.mulf(a[1], in.subf(a[2], a[3]));
                    Value hidden = scoreAt(in, a[0]).hidden;
                    if (!hidden)
                      return grad;
                    return in.select(hidden, in.f32(0.0), grad);
                  });
              // The gradient of the dot products: through the soft-cap
              // (d/dx c·tanh(x/c) = 1 - tanh²), the scale and the run-time
              // factor.
              Value dotGrads = ir.generic(
                  {dots, scoreGrads}, ir.empty({rows, keys}, f32),
                  {tile, tile, tile}, {kPar, kPar},
                  [&](IR &in, ValueRange a) -> Value {
                    Value grad = in.mulf(a[1], in.f32(site.scale));
                    if (Value capped = scoreAt(in, a[0]).capped)
                      grad = in.mulf(
                          grad, in.subf(in.f32(1.0), in.mulf(capped, capped)));
                    if (factor)
                      grad = in.mulf(grad, factor);
                    return grad;
                  });
              // dQ = dX·K, dK = dXᵀ·Q, dV = Pᵀ·dOut.
              auto product = [&](Value lhs, ArrayRef<unsigned> lhsDims,
                                 Value rhs, Value outRows, Value width) {
                return ir.generic(
                    {lhs, rhs}, ir.full({outRows, width}, ir.f32(0.0)),
                    {ir.map(3, lhsDims), ir.map(3, {2, 1}), ir.map(3, {0, 1})},
                    {kPar, kPar, kRed}, [](IR &in, ValueRange a) -> Value {
                      return in.addf(a[2],
                                     in.mulf(in.toF32(a[0]), in.toF32(a[1])));
                    });
              };
              Value queryGrad =
                  product(dotGrads, {0, 2}, keyTile, rows, site.headDim);
              Value keyGrad =
                  product(dotGrads, {2, 0}, queryTile, keys, site.headDim);
              Value valueGrad =
                  product(probs, {2, 0}, gradOutTile, keys, site.valueHeadDim);
              auto insert = [&](Value tileValue, Value into, Value head,
                                Value tileRows, Value width) {
                return tensor::InsertSliceOp::create(
                    ir.b, ir.loc, tileValue, into,
                    ArrayRef<OpFoldResult>{b, head, zeroAttr, zeroAttr},
                    ArrayRef<OpFoldResult>{unit, unit, tileRows, width},
                    SmallVector<OpFoldResult>(4, unit));
              };
              // K and V of a group accumulate over its query heads.
              auto accumulate = [&](Value tileValue, Value into, Value width) {
                Value current = tensor::ExtractSliceOp::create(
                    ir.b, ir.loc, RankedTensorType::get({kDyn, kDyn}, f32),
                    into, ArrayRef<OpFoldResult>{b, kvHead, zeroAttr, zeroAttr},
                    ArrayRef<OpFoldResult>{unit, unit, keys, width},
                    SmallVector<OpFoldResult>(4, unit));
                Value sum = ir.generic(
                    {current}, tileValue, {tile, tile}, {kPar, kPar},
                    [](IR &in, ValueRange a) { return in.addf(a[0], a[1]); });
                return insert(sum, into, kvHead, keys, width);
              };
              SmallVector<Value> results = {
                  insert(queryGrad, args[0], h, rows, site.headDim),
                  accumulate(keyGrad, args[1], site.headDim),
                  accumulate(valueGrad, args[2], site.valueHeadDim)};
              if (biasGrad)
                results.push_back(insert(scoreGrads, args[3], h, rows, keys));
              return results;
            });
      });
  LoweredGrad lowered;
  lowered.query = emitLike(ir, site, grads[0], site.query);
  lowered.key = emitLike(ir, site, grads[1], site.key);
  lowered.value = emitLike(ir, site, grads[2], site.value);
  if (biasGrad)
    lowered.bias = reduceToBias(ir, grads[3], site.bias);
  return lowered;
}

/// A packed kiln.attention_grad as what it means: per sequence, its rows of
/// Q, out, dOut and lse and its rows of K and V taken out as a uniform
/// (bshd) site, the backward lowered for it, and its gradients put back
/// into the same rows of packed gradients (zeros for rows no sequence
/// owns).
LoweredGrad lowerGradPacked(IR &ir, AttentionGradOp op) {
  Value query = op.getQuery(), key = op.getKey(), value = op.getValue();
  Value totalRows = ir.dim(query, 0), totalKeys = ir.dim(key, 0);
  auto zerosLike = [&](Value packed) {
    auto type = cast<RankedTensorType>(packed.getType());
    auto [shape, dynamic] = emptyOf(
        {sizeOf(ir, packed, 0), sizeOf(ir, packed, 1), sizeOf(ir, packed, 2)});
    Value zero = arith::ConstantOp::create(
        ir.b, ir.loc, ir.b.getZeroAttr(type.getElementType()));
    Value init = linalg::FillOp::create(
                     ir.b, ir.loc, ValueRange{zero},
                     ValueRange{tensor::EmptyOp::create(
                         ir.b, ir.loc, shape, type.getElementType(), dynamic)})
                     .getResult(0);
    if (init.getType() != type)
      init = tensor::CastOp::create(ir.b, ir.loc, type, init);
    return init;
  };
  OpFoldResult one = ir.b.getIndexAttr(1), zeroAttr = ir.b.getIndexAttr(0);
  Value batch =
      ir.max(ir.sub(ir.dim(op.getQOffsets(), 0), ir.idx(1)), ir.idx(0));
  auto loop = scf::ForOp::create(
      ir.b, ir.loc, ir.idx(0), batch, ir.idx(1),
      ValueRange{zerosLike(query), zerosLike(key), zerosLike(value)},
      [&](OpBuilder &nested, Location loc, Value b, ValueRange args) {
        IR in{nested, loc};
        auto [start, end] = sequenceRows(in, op.getQOffsets(), b, totalRows);
        auto [keyStart, keyEnd] =
            sequenceRows(in, op.getKvOffsets(), b, totalKeys);
        Value rows = in.sub(end, start), keys = in.sub(keyEnd, keyStart);
        auto [shape, dynamic] =
            emptyOf({one, rows, sizeOf(in, query, 1), sizeOf(in, value, 2)});
        (void)dynamic;
        Site site =
            Site::fromPacked(in, op, sequenceSlice(in, query, start, rows),
                             sequenceSlice(in, key, keyStart, keys),
                             sequenceSlice(in, value, keyStart, keys),
                             RankedTensorType::get(shape, op.getElementType()));
        site.out = sequenceSlice(in, op.getOut(), start, rows);
        site.gradOut = sequenceSlice(in, op.getGradOut(), start, rows);
        // The sequence's lse columns [Hq, rows] as [1, Hq, rows].
        Value lse = op.getLse();
        Value lseColumns = tensor::ExtractSliceOp::create(
            in.b, loc, RankedTensorType::get({kDyn, kDyn}, in.b.getF32Type()),
            lse, ArrayRef<OpFoldResult>{zeroAttr, start},
            ArrayRef<OpFoldResult>{in.dim(lse, 0), rows},
            ArrayRef<OpFoldResult>{one, one});
        site.lse = tensor::ExpandShapeOp::create(
            in.b, loc,
            RankedTensorType::get({1, kDyn, kDyn}, in.b.getF32Type()),
            lseColumns, SmallVector<ReassociationIndices>{{0, 1}, {2}});
        LoweredGrad grads = lowerGradDecomposed(in, site);
        auto putBack = [&](Value grad, Value into, Value rowStart, Value count,
                           Value like) {
          Value collapsed = tensor::CollapseShapeOp::create(
              in.b, loc, grad,
              SmallVector<ReassociationIndices>{{0, 1}, {2}, {3}});
          return tensor::InsertSliceOp::create(
              in.b, loc, collapsed, into,
              ArrayRef<OpFoldResult>{rowStart, zeroAttr, zeroAttr},
              ArrayRef<OpFoldResult>{count, sizeOf(in, like, 1),
                                     sizeOf(in, like, 2)},
              SmallVector<OpFoldResult>(3, one));
        };
        scf::YieldOp::create(
            in.b, loc,
            ValueRange{putBack(grads.query, args[0], start, rows, query),
                       putBack(grads.key, args[1], keyStart, keys, key),
                       putBack(grads.value, args[2], keyStart, keys, value)});
      });
  return {loop.getResult(0), loop.getResult(1), loop.getResult(2), Value()};
}

/// Lowers `op` with `lowerUniform`, through lowerRagged when its queries are
/// packed per sequence; the values that replace the op's results.
template <typename OpT>
SmallVector<Value>
lowerSite(IR &ir, OpT op,
          function_ref<Lowered(IR &, const Site &)> lowerUniform) {
  Lowered lowered;
  if constexpr (std::is_same_v<OpT, PagedAttentionOp>) {
    if (op.isRagged())
      return {lowerRagged(ir, op, [&](IR &in, const Site &site) {
        return lowerUniform(in, site).result;
      })};
  }
  if constexpr (std::is_same_v<OpT, AttentionOp>) {
    if (op.isPacked())
      lowered = lowerPacked(ir, op, lowerUniform);
  }
  if (!lowered.result) {
    Site site = Site::fromOp(ir, op);
    lowered = lowerUniform(ir, site);
  }
  SmallVector<Value> results = {lowered.result};
  if (lowered.lse)
    results.push_back(lowered.lse);
  return results;
}

/// `x` (e4m3) dequantised: `f32(x) · scale[h]` rounded to `elementType`,
/// with h the index along `headAxis` (clamped, so a one-element scale
/// serves every head).
Value dequantize(IR &ir, Value x, Value scale, int64_t headAxis,
                 Type elementType) {
  auto type = cast<RankedTensorType>(x.getType());
  int64_t rank = type.getRank();
  SmallVector<Value> sizes;
  for (int64_t axis = 0; axis < rank; ++axis)
    sizes.push_back(ir.dim(x, axis));
  Value last = ir.sub(ir.dim(scale, 0), ir.idx(1));
  SmallVector<unsigned> all;
  for (int64_t axis = 0; axis < rank; ++axis)
    all.push_back(axis);
  AffineMap identity = ir.map(rank, all);
  return ir.generic(
      {x}, ir.empty(sizes, elementType), {identity, identity},
      SmallVector<utils::IteratorType>(rank, utils::IteratorType::parallel),
      [&](IR &in, ValueRange args) {
        Value head = in.min(in.index(headAxis), last);
        Value factor = tensor::ExtractOp::create(in.b, in.loc, scale, head);
        Value value = arith::MulFOp::create(in.b, in.loc,
                                            in.decodeE4M3(args[0]), factor);
        if (elementType.isF32())
          return value;
        return arith::TruncFOp::create(in.b, in.loc, elementType, value)
            .getResult();
      });
}

/// An FP8 kiln.attention as the op on its dequantised operands (its
/// definition), built beside it; the op itself otherwise.
AttentionOp dequantizedForm(IR &ir, AttentionOp op) {
  if (!op.getQDescale())
    return op;
  Type elementType = op.getElementType();
  int64_t headAxis = op.getHeadAxis();
  Value q = dequantize(ir, op.getQuery(), op.getQDescale(), headAxis,
                       elementType);
  Value k = dequantize(ir, op.getKey(), op.getKDescale(), headAxis,
                       elementType);
  Value v = dequantize(ir, op.getValue(), op.getVDescale(), headAxis,
                       elementType);
  Type lseType = op.getLse() ? op.getLse().getType() : Type();
  return AttentionOp::create(
      ir.b, op.getLoc(), op.getResult().getType(), lseType, q, k, v,
      op.getMask(), op.getBias(), op.getQOffsets(), op.getKvOffsets(),
      op.getScaleFactor(), Value(), Value(), Value(), op.getScaleAttr(),
      op.getCausalAttr(), op.getWindowAttr(), op.getWindowRightAttr(),
      op.getSoftcapAttr(), op.getMaskedScoreAttr(), op.getLayoutAttr(),
      op.getProbScaleAttr());
}

/// Lowers `op` with `lower` (FP8 operands dequantised first).
template <typename OpT, typename LowerFn>
LogicalResult lowerAttention(OpT op, PatternRewriter &rewriter,
                             LowerFn lower) {
  IR ir{rewriter, op.getLoc()};
  if constexpr (std::is_same_v<OpT, AttentionOp>) {
    AttentionOp form = dequantizedForm(ir, op);
    rewriter.replaceOp(op, lowerSite(ir, form, lower));
    if (form != op)
      rewriter.eraseOp(form);
  } else {
    rewriter.replaceOp(op, lowerSite(ir, op, lower));
  }
  return success();
}

template <typename OpT>
struct TileAttentionPattern : public OpRewritePattern<OpT> {
  TileAttentionPattern(MLIRContext *context, AttentionTiling tiling)
      : OpRewritePattern<OpT>(context), tiling(tiling) {}

  LogicalResult matchAndRewrite(OpT op,
                                PatternRewriter &rewriter) const override {
    if (tiling.kvBlockSize <= 0 || tiling.qBlockSize <= 0 ||
        tiling.numSplits <= 0)
      return rewriter.notifyMatchFailure(op, "block sizes and split count "
                                             "must be positive");
    return lowerAttention(op, rewriter, [&](IR &in, const Site &site) {
      // Quantised probabilities need each row's final statistics before
      // any P·V: the decomposed form.
      if (site.probScale)
        return lowerDecomposed(in, site);
      return lowerTiled(in, site, tiling);
    });
  }

  AttentionTiling tiling;
};

template <typename OpT>
struct DecomposeAttentionPattern : public OpRewritePattern<OpT> {
  using OpRewritePattern<OpT>::OpRewritePattern;

  LogicalResult matchAndRewrite(OpT op,
                                PatternRewriter &rewriter) const override {
    return lowerAttention(op, rewriter, [](IR &in, const Site &site) {
      return lowerDecomposed(in, site);
    });
  }
};

/// kiln.attention_grad in the reference form, for both lowerings: the
/// backward recomputes the probabilities from the forward's log-sum-exp,
/// so it needs no running statistics of its own.
struct AttentionGradPattern : public OpRewritePattern<AttentionGradOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AttentionGradOp op,
                                PatternRewriter &rewriter) const override {
    IR ir{rewriter, op.getLoc()};
    LoweredGrad grads;
    if (op.isPacked()) {
      grads = lowerGradPacked(ir, op);
    } else {
      grads = lowerGradDecomposed(ir, Site::fromOp(ir, op));
    }
    SmallVector<Value> results = {grads.query, grads.key, grads.value};
    if (grads.bias)
      results.push_back(grads.bias);
    // The gradients take their operands' types, which may be more static
    // than the op's results (the runner refines argument types).
    for (auto [value, result] : llvm::zip(results, op->getResults()))
      if (value.getType() != result.getType())
        value = tensor::CastOp::create(rewriter, op.getLoc(), result.getType(),
                                       value);
    rewriter.replaceOp(op, results);
    return success();
  }
};

/// Fails when an attention op is left (a pattern refused it).
LogicalResult checkAllLowered(Operation *root) {
  WalkResult result = root->walk([](Operation *op) {
    if (isa<AttentionOp, AttentionGradOp, PagedAttentionOp>(op)) {
      op->emitError("could not lower this attention op");
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return failure(result.wasInterrupted());
}

struct KilnTileAttentionPass
    : public kiln::impl::KilnTileAttentionBase<KilnTileAttentionPass> {
  using KilnTileAttentionBase::KilnTileAttentionBase;

  void runOnOperation() override {
    if (kvBlockSize <= 0 || qBlockSize <= 0 || numSplits <= 0) {
      getOperation()->emitError()
          << "kiln-tile-attention: kv-block-size, q-block-size and num-splits "
             "must be positive";
      return signalPassFailure();
    }
    AttentionTiling tiling{kvBlockSize, qBlockSize, numSplits};
    RewritePatternSet patterns(&getContext());
    populateTileAttentionPatterns(patterns, tiling);
    walkAndApplyPatterns(getOperation(), std::move(patterns));
    if (failed(checkAllLowered(getOperation())))
      signalPassFailure();
  }
};

struct KilnDecomposeAttentionPass
    : public kiln::impl::KilnDecomposeAttentionBase<
          KilnDecomposeAttentionPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateDecomposeAttentionPatterns(patterns);
    walkAndApplyPatterns(getOperation(), std::move(patterns));
    if (failed(checkAllLowered(getOperation())))
      signalPassFailure();
  }
};

} // namespace

void mlir::kiln::populateTileAttentionPatterns(RewritePatternSet &patterns,
                                               const AttentionTiling &tiling) {
  patterns.add<TileAttentionPattern<AttentionOp>,
               TileAttentionPattern<PagedAttentionOp>>(patterns.getContext(),
                                                       tiling);
  patterns.add<AttentionGradPattern>(patterns.getContext());
}

void mlir::kiln::populateDecomposeAttentionPatterns(
    RewritePatternSet &patterns) {
  patterns
      .add<DecomposeAttentionPattern<AttentionOp>,
           DecomposeAttentionPattern<PagedAttentionOp>, AttentionGradPattern>(
          patterns.getContext());
}
