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
// Both read K/V of KV head h / G in place (extract_slice, or a gather through
// the page table for the paged op): K and V are never copied per query head.
// An f8E4M3FN cache is decoded to f32 in the gather, with integer ops (the
// CPU pipeline ends in LLVM, which has no f8 type to extend from), and
// multiplied by the KV head's scale there.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnOps.h"
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
  Value i32(int64_t value) {
    return arith::ConstantIntOp::create(b, loc, b.getI32Type(), value);
  }
  Value andi(Value x, Value y) { return arith::AndIOp::create(b, loc, x, y); }
  Value ori(Value x, Value y) { return arith::OrIOp::create(b, loc, x, y); }
  Value shl(Value x, Value y) { return arith::ShLIOp::create(b, loc, x, y); }
  Value shrui(Value x, Value y) { return arith::ShRUIOp::create(b, loc, x, y); }
  Value bitcast(Type type, Value value) {
    return arith::BitcastOp::create(b, loc, type, value);
  }
  /// The f32 value of an f8E4M3FN scalar, exactly. e4m3 "FN" has bias 7, no
  /// infinities and NaN at S.1111.111; it is decoded from its bits because
  /// arith.extf from f8 has no LLVM lowering.
  Value decodeE4M3(Value element) {
    Value bits = arith::ExtUIOp::create(b, loc, b.getI32Type(),
                                        bitcast(b.getI8Type(), element));
    Value exponent = andi(shrui(bits, i32(3)), i32(0xF));
    Value mantissa = andi(bits, i32(0x7));
    Value sign = shl(andi(bits, i32(0x80)), i32(24));
    // Normal: rebias 7 -> 127 and move the 3 mantissa bits to the top of
    // f32's 23.
    Value normal =
        ori(shl(add(exponent, i32(127 - 7)), i32(23)), shl(mantissa, i32(20)));
    // Subnormal (and zero): m·2^-9, exact in f32.
    Value subnormal =
        bitcast(b.getI32Type(),
                mulf(arith::UIToFPOp::create(b, loc, b.getF32Type(), mantissa),
                     f32(std::ldexp(1.0, -9))));
    Value magnitude = select(cmp(arith::CmpIPredicate::eq, exponent, i32(0)),
                             subnormal, normal);
    Value value = bitcast(b.getF32Type(), ori(magnitude, sign));
    Value isNaN =
        cmp(arith::CmpIPredicate::eq, andi(bits, i32(0x7F)), i32(0x7F));
    return select(isNaN, f32(std::numeric_limits<double>::quiet_NaN()), value);
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
  /// The op's run-time scale_factor (a one-element f32 tensor), or null.
  Value scaleFactor;
  bool causal = false;
  std::optional<int64_t> window;
  /// Keys past the diagonal by more than this are hidden; 0 for causal.
  std::optional<int64_t> rightBound;
  std::optional<float> softcap;
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

  static Site fromOp(IR &ir, AttentionOp op) {
    Site site;
    site.elementType = op.getElementType();
    site.resultType = cast<RankedTensorType>(op.getResult().getType());
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
  static Site fromPacked(IR &ir, AttentionOp op, Value query, Value key,
                         Value value, RankedTensorType resultType) {
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
    if constexpr (std::is_same_v<OpT, AttentionOp>) {
      scaleFactor = op.getScaleFactor();
      rightBound = op.getRightBound();
      if (std::optional<APFloat> fill = op.getMaskedScore())
        maskedScore = fill->convertToFloat();
    }
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

  /// The `[rows, keys]` f32 score tile of query rows [row0, ...) against keys
  /// [key0, ...): `scale·QKᵀ`, soft-capped, plus bias and mask, -inf where
  /// the key is hidden, all multiplied by `outScale` (log2(e) for the exp2
  /// form, 1 for the exp form). Without a soft-cap, scale and outScale are
  /// one multiplication.
  Value scores(IR &ir, Value queryTile, Value keyTile, Value b, Value h,
               Value row0, Value key0, Value rows, Value keys, Value keyCount,
               double outScale) const {
    Value zero = ir.full({rows, keys}, ir.f32(0.0));
    Value dots = ir.generic(
        {queryTile, keyTile}, zero,
        {ir.map(3, {0, 2}), ir.map(3, {1, 2}), ir.map(3, {0, 1})},
        {kPar, kPar, kRed}, [&](IR &in, ValueRange args) -> Value {
          return in.addf(args[2],
                         in.mulf(in.toF32(args[0]), in.toF32(args[1])));
        });

    // Bottom-right aligned causal diagonal: key j is visible to query i when
    // j <= i + (keys - queries).
    Value diagonal = ir.sub(keyCount, queryLength);
    Value init = ir.empty({rows, keys}, ir.b.getF32Type());
    // The run-time factor multiplies the dot products before anything else.
    Value factor;
    if (scaleFactor) {
      int64_t rank = cast<RankedTensorType>(scaleFactor.getType()).getRank();
      factor = tensor::ExtractOp::create(ir.b, ir.loc, scaleFactor,
                                         SmallVector<Value>(rank, ir.idx(0)));
    }
    return ir.generic(
        {dots}, init, {ir.map(2, {0, 1}), ir.map(2, {0, 1})}, {kPar, kPar},
        [&](IR &in, ValueRange args) -> Value {
          Value score = args[0];
          if (factor)
            score = in.mulf(score, factor);
          bool additive = bias || (mask && !isBoolMask());
          // With additive terms the score is built in natural units, as the
          // graph adds them, and converted to the output units after.
          double unitScale = additive ? 1.0 : outScale;
          if (softcap) {
            Value capped = math::TanhOp::create(
                in.b, in.loc, in.mulf(score, in.f32(scale / *softcap)));
            score = in.mulf(capped, in.f32(*softcap * unitScale));
          } else {
            score = in.mulf(score, in.f32(scale * unitScale));
          }
          Value row = in.add(row0, in.index(0));
          Value key = in.add(key0, in.index(1));
          SmallVector<Value> logical = {b, h, row, key};
          if (additive) {
            if (bias)
              score = in.addf(score,
                              broadcastRead(in, bias, biasBroadcast, logical));
            if (mask && !isBoolMask())
              score = in.addf(score,
                              broadcastRead(in, mask, maskBroadcast, logical));
            score = toOutputUnits(in, score, outScale);
          }
          Value hidden;
          auto orHidden = [&](Value cond) {
            hidden = hidden ? arith::OrIOp::create(in.b, in.loc, hidden, cond)
                                  .getResult()
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
            Value hiddenScore =
                maskedScore ? in.f32(saturatedProduct(*maskedScore, outScale))
                            : in.negInf();
            score = in.select(hidden, hiddenScore, score);
          }
          return score;
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

/// The tiled online-softmax form.
Value lowerTiled(IR &ir, const Site &site, const AttentionTiling &tiling) {
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
    return site.emitResult(ir, {out}, {ir.map(4, {0, 1, 2, 3})},
                           [](IR &, ValueRange a) { return a[0]; });
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
  return site.emitResult(
      ir, {weighted, total}, {ir.map(4, {0, 1, 2, 3}), ir.map(4, {0, 1, 2})},
      [](IR &in, ValueRange a) -> Value {
        Value seen = in.cmpf(arith::CmpFPredicate::OGT, a[1], in.f32(0.0));
        return in.select(seen, in.divf(a[0], a[1]), in.f32(0.0));
      });
}

/// The plain reference form: whole rows, exp, no running statistics.
Value lowerDecomposed(IR &ir, const Site &site) {
  Type f32 = ir.b.getF32Type();
  Value zero = ir.idx(0), one = ir.idx(1);
  Value outInit = ir.empty(
      {site.batch, site.numQueryHeads, site.queryLength, site.valueHeadDim}, f32);
  SmallVector<Value> out = forLoop(
      ir, zero, site.batch, one, {outInit},
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
              Value normalised = ir.generic(
                  {probs, rowSum}, ir.empty({rows, keyCount}, f32),
                  {ir.map(2, {0, 1}), ir.map(2, {0}), ir.map(2, {0, 1})},
                  {kPar, kPar}, [](IR &in, ValueRange a) -> Value {
                    Value seen = in.cmpf(arith::CmpFPredicate::OGT, a[1],
                                         in.f32(0.0));
                    return in.select(seen, in.divf(a[0], a[1]), in.f32(0.0));
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
              return {inserted};
            });
      });
  return site.emitResult(ir, {out[0]}, {ir.map(4, {0, 1, 2, 3})},
                         [](IR &, ValueRange a) { return a[0]; });
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
/// never read outside Q). Rows no sequence owns are zeros.
Value lowerPerSequence(
    IR &ir, Value query, Value qOffsets, Value batch,
    RankedTensorType resultType, OpFoldResult valueDim,
    function_ref<Value(IR &, Value, Value, Value)> rowsOf) {
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
  OpFoldResult one = ir.b.getIndexAttr(1), zeroAttr = ir.b.getIndexAttr(0);
  auto loop = scf::ForOp::create(
      ir.b, ir.loc, ir.idx(0), batch, ir.idx(1), ValueRange{init},
      [&](OpBuilder &nested, Location loc, Value b, ValueRange args) {
        IR in{nested, loc};
        auto [start, end] = sequenceRows(in, qOffsets, b, totalRows);
        Value rows = in.sub(end, start);
        Value packed = rowsOf(in, b, start, rows);
        Value inserted = tensor::InsertSliceOp::create(
            in.b, loc, packed, args[0],
            ArrayRef<OpFoldResult>{start, zeroAttr, zeroAttr},
            ArrayRef<OpFoldResult>{rows, sizeOf(in, query, 1), valueDim},
            SmallVector<OpFoldResult>(3, one));
        scf::YieldOp::create(in.b, loc, inserted);
      });
  return loop.getResult(0);
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
  auto rowsOf = [&](IR &in, Value b, Value start, Value rows) -> Value {
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
    return in.generic(
        {collapsed},
        tensor::EmptyOp::create(in.b, loc, packedShape, element,
                                packedDynamic),
        {in.map(3, {1, 0, 2}), in.map(3, {0, 1, 2})}, {kPar, kPar, kPar},
        [](IR &, ValueRange a) { return a[0]; });
  };
  return lowerPerSequence(ir, query, op.getQOffsets(),
                          ir.dim(op.getKvLens(), 0), resultType, valueDim,
                          rowsOf);
}

/// A packed kiln.attention (offsets) as what it means: a loop over the
/// sequences, each one's query rows and key/value rows taken out as a
/// `[1, rows, H, D]` (bshd) uniform site, lowered by `lowerUniform`, and
/// its result put back into rows of the packed result. Key offsets are
/// clamped into [0, total_kv] and made non-decreasing like the query's.
Value lowerPacked(IR &ir, AttentionOp op,
                  function_ref<Value(IR &, const Site &)> lowerUniform) {
  Value query = op.getQuery();
  auto resultType = cast<RankedTensorType>(op.getResult().getType());
  Type element = op.getElementType();
  OpFoldResult heads = sizeOf(ir, query, 1),
               valueDim = sizeOf(ir, op.getValue(), 2);
  OpFoldResult one = ir.b.getIndexAttr(1);
  Value totalKeys = ir.dim(op.getKey(), 0);
  auto rowsOf = [&](IR &in, Value b, Value start, Value rows) -> Value {
    auto [keyStart, keyEnd] = sequenceRows(in, op.getKvOffsets(), b, totalKeys);
    Value keys = in.sub(keyEnd, keyStart);
    auto [shape, dynamic] = emptyOf({one, rows, heads, valueDim});
    (void)dynamic;
    Site site = Site::fromPacked(
        in, op, sequenceSlice(in, query, start, rows),
        sequenceSlice(in, op.getKey(), keyStart, keys),
        sequenceSlice(in, op.getValue(), keyStart, keys),
        RankedTensorType::get(shape, element));
    // [1, rows, Hq, Dv] (bshd) to [rows, Hq, Dv].
    return tensor::CollapseShapeOp::create(
        in.b, in.loc, lowerUniform(in, site),
        SmallVector<ReassociationIndices>{{0, 1}, {2}, {3}});
  };
  // Sequences: q_offsets' entries less one (none where it has none).
  Value batch = ir.max(ir.sub(ir.dim(op.getQOffsets(), 0), ir.idx(1)),
                       ir.idx(0));
  return lowerPerSequence(ir, query, op.getQOffsets(), batch, resultType,
                          valueDim, rowsOf);
}

/// Lowers `op` with `lowerUniform`, through lowerRagged when its queries are
/// packed per sequence.
template <typename OpT>
Value lowerSite(IR &ir, OpT op,
                function_ref<Value(IR &, const Site &)> lowerUniform) {
  if constexpr (std::is_same_v<OpT, PagedAttentionOp>)
    if (op.isRagged())
      return lowerRagged(ir, op, lowerUniform);
  if constexpr (std::is_same_v<OpT, AttentionOp>)
    if (op.isPacked())
      return lowerPacked(ir, op, lowerUniform);
  Site site = Site::fromOp(ir, op);
  return lowerUniform(ir, site);
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
    IR ir{rewriter, op.getLoc()};
    rewriter.replaceOp(op, lowerSite(ir, op, [&](IR &in, const Site &site) {
                         return lowerTiled(in, site, tiling);
                       }));
    return success();
  }

  AttentionTiling tiling;
};

template <typename OpT>
struct DecomposeAttentionPattern : public OpRewritePattern<OpT> {
  using OpRewritePattern<OpT>::OpRewritePattern;

  LogicalResult matchAndRewrite(OpT op,
                                PatternRewriter &rewriter) const override {
    IR ir{rewriter, op.getLoc()};
    rewriter.replaceOp(op, lowerSite(ir, op, [](IR &in, const Site &site) {
                         return lowerDecomposed(in, site);
                       }));
    return success();
  }
};

/// Fails when an attention op is left (a pattern refused it).
LogicalResult checkAllLowered(Operation *root) {
  WalkResult result = root->walk([](Operation *op) {
    if (isa<AttentionOp, PagedAttentionOp>(op)) {
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
}

void mlir::kiln::populateDecomposeAttentionPatterns(
    RewritePatternSet &patterns) {
  patterns.add<DecomposeAttentionPattern<AttentionOp>,
               DecomposeAttentionPattern<PagedAttentionOp>>(
      patterns.getContext());
}
