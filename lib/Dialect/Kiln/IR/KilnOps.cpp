//===- KilnOps.cpp - Kiln operations ----------------------------*- C++ -*-===//
//
// Verifiers of the kiln dialect's ops.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnOps.h"

#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"

#include <cmath>

using namespace mlir;
using namespace mlir::kiln;

#include "kiln/Dialect/Kiln/IR/KilnEnums.cpp.inc"

#define GET_OP_CLASSES
#include "kiln/Dialect/Kiln/IR/KilnOps.cpp.inc"

std::string mlir::kiln::getElementTypeName(Type type) {
  std::string text;
  llvm::raw_string_ostream os(text);
  type.print(os);
  return text;
}

namespace {
/// Two static sizes disagree; dynamic sizes agree with everything.
bool sizesConflict(int64_t a, int64_t b) {
  return !ShapedType::isDynamic(a) && !ShapedType::isDynamic(b) && a != b;
}

std::string sizeString(int64_t size) {
  return ShapedType::isDynamic(size) ? std::string("?")
                                     : std::to_string(size);
}
} // namespace

/// The attribute rules shared by the attention ops.
static LogicalResult
verifyAttentionAttributes(Operation *op, APFloat scale, bool causal,
                          std::optional<uint64_t> window,
                          std::optional<APFloat> softcap) {
  if (!std::isfinite(scale.convertToFloat()))
    return op->emitOpError() << "scale must be finite, got "
                             << scale.convertToFloat();
  if (window && !causal)
    return op->emitOpError() << "window requires causal";
  if (softcap) {
    float cap = softcap->convertToFloat();
    if (!std::isfinite(cap) || cap <= 0.0f)
      return op->emitOpError() << "softcap must be positive and finite, got "
                               << cap;
  }
  return success();
}

/// Grouped-query attention: every KV head serves the same number of query
/// heads.
static LogicalResult verifyHeadGroups(Operation *op, int64_t numQueryHeads,
                                      int64_t numKvHeads) {
  if (ShapedType::isDynamic(numQueryHeads) ||
      ShapedType::isDynamic(numKvHeads) ||
      (numKvHeads != 0 && numQueryHeads % numKvHeads == 0))
    return success();
  return op->emitOpError() << "query heads (" << numQueryHeads
                           << ") must be a multiple of the key/value heads ("
                           << numKvHeads << ")";
}

/// Checks that `operand` broadcasts numpy-style to `[B, Hq, Sq, Sk]`.
template <typename OpT>
static LogicalResult verifyBroadcastable(OpT op, Value operand, StringRef name,
                                         ArrayRef<int64_t> target) {
  auto type = cast<RankedTensorType>(operand.getType());
  if (type.getRank() > 4)
    return op.emitOpError() << name << " must have rank at most 4, got rank "
                            << type.getRank();
  static const char *const axisNames[] = {"batch", "query heads",
                                          "query length", "kv length"};
  int64_t offset = 4 - type.getRank();
  for (int64_t axis = 0; axis < type.getRank(); ++axis) {
    int64_t size = type.getDimSize(axis);
    int64_t wanted = target[axis + offset];
    if (size == 1 || !sizesConflict(size, wanted))
      continue;
    return op.emitOpError()
           << name << " axis " << axis << " has size " << size
           << ", which does not broadcast to the " << axisNames[axis + offset]
           << " size " << sizeString(wanted);
  }
  return success();
}

/// The packed form's offsets: both or neither, rank 1, and of one batch.
template <typename OpT>
static LogicalResult verifyPackedOffsets(OpT op) {
  if (static_cast<bool>(op.getQOffsets()) !=
      static_cast<bool>(op.getKvOffsets()))
    return op.emitOpError() << "q_offsets and kv_offsets come together";
  if (!op.isPacked())
    return success();
  auto qType = cast<RankedTensorType>(op.getQOffsets().getType());
  auto kvType = cast<RankedTensorType>(op.getKvOffsets().getType());
  for (auto [name, type] : {std::make_pair(StringRef("q_offsets"), qType),
                            std::make_pair(StringRef("kv_offsets"), kvType)}) {
    if (type.getRank() != 1)
      return op.emitOpError() << name << " must have rank 1, got rank "
                              << type.getRank();
    if (type.getDimSize(0) == 0)
      return op.emitOpError() << name << " must hold batch + 1 entries, got 0";
  }
  if (sizesConflict(qType.getDimSize(0), kvType.getDimSize(0)))
    return op.emitOpError() << "q_offsets (" << qType.getDimSize(0)
                            << " entries) and kv_offsets ("
                            << kvType.getDimSize(0)
                            << ") must describe one batch";
  if (op.getMask() || op.getBias())
    return op.emitOpError() << "the packed form (offsets) takes no mask or "
                               "bias";
  if (op.getMaskedScore())
    return op.emitOpError() << "the packed form (offsets) takes no "
                               "masked_score";
  if (op.getLayout() != Layout::bhsd)
    return op.emitOpError() << "the packed form (offsets) takes no layout: "
                               "its operands are [rows, heads, dim]";
  return success();
}

/// The rules of kiln.attention's operands and attributes, shared by
/// kiln.attention_grad; `resultType` is the forward's result type (the
/// backward's `out`).
template <typename OpT>
static LogicalResult verifyAttentionForm(OpT op, RankedTensorType resultType,
                                         StringRef resultName) {
  auto queryType = cast<RankedTensorType>(op.getQuery().getType());
  auto keyType = cast<RankedTensorType>(op.getKey().getType());
  auto valueType = cast<RankedTensorType>(op.getValue().getType());

  if (failed(verifyPackedOffsets(op)))
    return failure();
  bool packed = op.isPacked();
  int64_t rank = packed ? 3 : 4;
  const std::pair<StringRef, RankedTensorType> operands[] = {
      {"query", queryType},
      {"key", keyType},
      {"value", valueType},
      {resultName, resultType}};
  for (auto [name, type] : operands) {
    if (type.getRank() != rank)
      return op.emitOpError()
             << name << " must have rank " << rank
             << (packed ? " (packed)" : "") << ", got rank " << type.getRank();
    // FP8 (e4m3) Q, K and V give a float result (AttentionOp::verify).
    bool fp8Result = name == resultName &&
                     isa<Float8E4M3FNType>(queryType.getElementType());
    if (!fp8Result && type.getElementType() != queryType.getElementType())
      return op.emitOpError()
             << name << " element type " << type.getElementType()
             << " differs from the query element type "
             << queryType.getElementType();
  }

  int64_t headAxis = op.getHeadAxis(), seqAxis = op.getSeqAxis();
  auto checkSame = [&](StringRef what, int64_t axis, StringRef lhsName,
                       RankedTensorType lhs, StringRef rhsName,
                       RankedTensorType rhs) -> LogicalResult {
    if (!sizesConflict(lhs.getDimSize(axis), rhs.getDimSize(axis)))
      return success();
    return op.emitOpError() << what << " of " << lhsName << " ("
                            << lhs.getDimSize(axis) << ") differs from "
                            << rhsName << " (" << rhs.getDimSize(axis) << ")";
  };
  int64_t dimAxis = op.getDimAxis();
  if ((!packed &&
       (failed(checkSame("batch size", 0, "key", keyType, "query",
                         queryType)) ||
        failed(checkSame("batch size", 0, "value", valueType, "query",
                         queryType)))) ||
      failed(checkSame("head dim", dimAxis, "key", keyType, "query",
                       queryType)) ||
      failed(checkSame("number of heads", headAxis, "value", valueType, "key",
                       keyType)) ||
      failed(checkSame("sequence length", seqAxis, "value", valueType, "key",
                       keyType)))
    return failure();
  // The result is Q's shape with V's head dim (they differ in multi-head
  // latent attention).
  SmallVector<int64_t> expected(queryType.getShape());
  expected[dimAxis] = valueType.getDimSize(dimAxis);
  if (failed(verifyCompatibleShape(resultType.getShape(), expected)))
    return op.emitOpError() << resultName << " shape " << resultType
                            << " differs from the query shape " << queryType
                            << " with the value head dim ("
                            << sizeString(valueType.getDimSize(dimAxis)) << ")";

  int64_t numQueryHeads = queryType.getDimSize(headAxis);
  int64_t numKvHeads = keyType.getDimSize(headAxis);
  if (failed(verifyHeadGroups(op.getOperation(), numQueryHeads, numKvHeads)))
    return failure();

  int64_t logicalShape[4] = {op.getBatchSize(), numQueryHeads,
                             queryType.getDimSize(seqAxis),
                             keyType.getDimSize(seqAxis)};
  if (op.getMask() &&
      failed(verifyBroadcastable(op, op.getMask(), "mask", logicalShape)))
    return failure();
  if (op.getBias() &&
      failed(verifyBroadcastable(op, op.getBias(), "bias", logicalShape)))
    return failure();

  // A run-time factor is one element, or one a query head: `[Hq]`, whose
  // size must be known to match the heads (a kernel reads it by head).
  if (op.hasPerHeadScaleFactor()) {
    auto factorType = cast<RankedTensorType>(op.getScaleFactor().getType());
    if (factorType.getRank() != 1 || factorType.isDynamicDim(0))
      return op.emitOpError() << "scale_factor must hold one element (every "
                                 "size 1) or one a query head ([Hq], rank 1), "
                                 "got "
                              << factorType;
    if (factorType.getDimSize(0) != numQueryHeads)
      return op.emitOpError()
             << "a per-head scale_factor holds one value a query head: "
             << factorType << " for " << sizeString(numQueryHeads)
             << " query heads";
  }

  if (std::optional<APFloat> fill = op.getMaskedScore()) {
    float value = fill->convertToFloat();
    if (!std::isfinite(value) || value > -1.0e4f)
      return op.emitOpError()
             << "masked_score must be finite and at most -1e4, "
                "got "
             << value;
    if (!op.getRightBound() && op.getMaskKind() != "boolean")
      return op.emitOpError() << "masked_score needs a boolean mask, causal or "
                                 "window_right";
  }
  if (op.getCausal() && op.getWindowRight())
    return op.emitOpError() << "window_right and causal are exclusive (causal "
                               "is window_right = 0)";
  if (op.getWindow() && !op.getRightBound())
    return op.emitOpError() << "window requires causal or window_right";
  return verifyAttentionAttributes(op.getOperation(), op.getScale(),
                                   /*causal=*/true, op.getWindow(),
                                   op.getSoftcap());
}

/// The log-sum-exp's type: f32 `[B, Hq, Sq]`, or `[Hq, total_q]` packed.
template <typename OpT>
static LogicalResult verifyLseType(OpT op, Type type, StringRef name) {
  auto lseType = cast<RankedTensorType>(type);
  SmallVector<int64_t> expected;
  if (op.isPacked())
    expected = {op.getNumQueryHeads(), op.getQueryLength()};
  else
    expected = {op.getBatchSize(), op.getNumQueryHeads(), op.getQueryLength()};
  if (succeeded(verifyCompatibleShape(lseType.getShape(), expected)))
    return success();
  std::string wanted;
  llvm::raw_string_ostream os(wanted);
  os << "[";
  llvm::interleave(
      expected, os, [&](int64_t size) { os << sizeString(size); }, ", ");
  os << "]";
  return op.emitOpError() << name << " must be f32 " << wanted
                          << (op.isPacked() ? " ([heads, total_q], packed)"
                                            : " ([batch, heads, query length])")
                          << ", got " << lseType;
}

LogicalResult AttentionOp::verify() {
  if (failed(verifyAttentionForm(
          *this, cast<RankedTensorType>(getResult().getType()), "result")))
    return failure();
  if (std::optional<APFloat> probScale = getProbScale()) {
    double value = probScale->convertToDouble();
    if (!(value > 0) || std::isinf(value))
      return emitOpError() << "prob_scale must be positive and finite, got "
                           << value;
  }
  // FP8 operands and their descales: all or nothing, one element or one a
  // head each.
  bool fp8 = isa<Float8E4M3FNType>(
      cast<RankedTensorType>(getQuery().getType()).getElementType());
  int descales = static_cast<bool>(getQDescale()) +
                 static_cast<bool>(getKDescale()) +
                 static_cast<bool>(getVDescale());
  if (descales != 0 && descales != 3)
    return emitOpError() << "q_descale, k_descale and v_descale come together";
  if (fp8 != (descales == 3))
    return emitOpError() << (fp8 ? "f8E4M3FN operands need descales"
                                 : "descales apply to f8E4M3FN operands only");
  if (fp8) {
    const std::tuple<StringRef, Value, int64_t> scales[] = {
        {"q_descale", getQDescale(), getNumQueryHeads()},
        {"k_descale", getKDescale(), getNumKvHeads()},
        {"v_descale", getVDescale(), getNumKvHeads()}};
    for (auto [name, scale, heads] : scales) {
      auto type = cast<RankedTensorType>(scale.getType());
      int64_t size = type.getRank() == 1 ? type.getDimSize(0) : -1;
      if (size == -1 || (size != 1 && !ShapedType::isDynamic(size) &&
                         !ShapedType::isDynamic(heads) && size != heads))
        return emitOpError() << name << " must be [1] or one a head ["
                             << sizeString(heads) << "], got " << type;
    }
  }
  if (Value lse = getLse())
    return verifyLseType(*this, lse.getType(), "lse");
  return success();
}

LogicalResult AttentionGradOp::verify() {
  auto outType = cast<RankedTensorType>(getOut().getType());
  if (failed(verifyAttentionForm(*this, outType, "out")) ||
      failed(verifyLseType(*this, getLse().getType(), "lse")))
    return failure();
  // A gradient has its operand's element type and a shape compatible with
  // its operand's (dynamic sizes agree with everything, as elsewhere).
  auto sameType = [](Type lhs, Type rhs) {
    auto lhsType = cast<RankedTensorType>(lhs);
    auto rhsType = cast<RankedTensorType>(rhs);
    return lhsType.getElementType() == rhsType.getElementType() &&
           succeeded(verifyCompatibleShape(lhsType, rhsType));
  };
  if (!sameType(getGradOut().getType(), outType))
    return emitOpError() << "grad_out type " << getGradOut().getType()
                         << " differs from the out type " << outType;
  const std::tuple<StringRef, Value, StringRef, Value> gradients[] = {
      {"grad_query", getGradQuery(), "query", getQuery()},
      {"grad_key", getGradKey(), "key", getKey()},
      {"grad_value", getGradValue(), "value", getValue()}};
  for (auto [name, gradient, of, operand] : gradients)
    if (!sameType(gradient.getType(), operand.getType()))
      return emitOpError() << name << " type " << gradient.getType()
                           << " differs from the " << of << " type "
                           << operand.getType();
  if (getBiasGrad() && !getBias())
    return emitOpError() << "bias_grad needs a bias";
  if (getBiasGrad() != static_cast<bool>(getGradBias()))
    return emitOpError() << (getBiasGrad()
                                 ? "bias_grad needs a grad_bias result"
                                 : "a grad_bias result needs bias_grad");
  if (Value gradBias = getGradBias())
    if (!sameType(gradBias.getType(), getBias().getType()))
      return emitOpError() << "grad_bias type " << gradBias.getType()
                           << " differs from the bias type "
                           << getBias().getType();
  return success();
}

LogicalResult PagedAttentionOp::verify() {
  auto queryType = cast<RankedTensorType>(getQuery().getType());
  auto keyCacheType = cast<RankedTensorType>(getKeyCache().getType());
  auto valueCacheType = cast<RankedTensorType>(getValueCache().getType());
  auto pageTableType = cast<RankedTensorType>(getPageTable().getType());
  auto kvLensType = cast<RankedTensorType>(getKvLens().getType());
  auto resultType = cast<RankedTensorType>(getResult().getType());

  // Ragged batches pack the queries: [total_q, Hq, D] rather than
  // [B, Hq, Sq, D].
  bool ragged = isRagged();
  int64_t queryRank = ragged ? 3 : 4;
  const std::tuple<StringRef, RankedTensorType, int64_t> ranks[] = {
      {"query", queryType, queryRank},    {"key_cache", keyCacheType, 4},
      {"value_cache", valueCacheType, 4}, {"result", resultType, queryRank},
      {"page_table", pageTableType, 2},   {"kv_lens", kvLensType, 1}};
  for (auto [name, type, rank] : ranks)
    if (type.getRank() != rank)
      return emitOpError() << name << " must have rank " << rank
                           << ", got rank " << type.getRank();
  if (resultType.getElementType() != queryType.getElementType())
    return emitOpError() << "result element type "
                         << resultType.getElementType()
                         << " differs from the query element type "
                         << queryType.getElementType();
  if (keyCacheType.getElementType() != valueCacheType.getElementType())
    return emitOpError() << "key_cache element type "
                         << keyCacheType.getElementType()
                         << " differs from the value_cache element type "
                         << valueCacheType.getElementType();
  bool fp8 = isFp8Cache();
  if (!fp8 && keyCacheType.getElementType() != queryType.getElementType())
    return emitOpError() << "key_cache element type "
                         << keyCacheType.getElementType()
                         << " differs from the query element type "
                         << queryType.getElementType()
                         << " (a cache of another type must be f8E4M3FN)";
  if (fp8 && !queryType.getElementType().isF16() &&
      !queryType.getElementType().isBF16())
    return emitOpError() << "an f8E4M3FN cache needs f16 or bf16 queries, got "
                         << queryType.getElementType();
  if (static_cast<bool>(getKScale()) != static_cast<bool>(getVScale()))
    return emitOpError() << "k_scale and v_scale come together";
  if (fp8 && !getKScale())
    return emitOpError() << "an f8E4M3FN cache needs scales (k_scale and "
                            "v_scale)";
  if (!fp8 && getKScale())
    return emitOpError() << "scales apply to f8E4M3FN caches only, not to "
                         << keyCacheType.getElementType();
  if (fp8) {
    // Per tensor ([1]) or per KV head ([Hkv]); a dynamic head count takes
    // any static size, which the runtime checks against the cache.
    int64_t kvHeads = keyCacheType.getDimSize(2);
    for (auto [name, value] :
         {std::make_pair(StringRef("k_scale"), getKScale()),
          std::make_pair(StringRef("v_scale"), getVScale())}) {
      auto type = cast<RankedTensorType>(value.getType());
      int64_t size = type.getRank() == 1 ? type.getDimSize(0) : ShapedType::kDynamic;
      bool fits = !ShapedType::isDynamic(size) &&
                  (size == 1 || size == kvHeads ||
                   (ShapedType::isDynamic(kvHeads) && size > 0));
      if (!fits)
        return emitOpError()
               << name << " must be tensor<1xf32> (per tensor) or tensor<"
               << sizeString(kvHeads) << "xf32> (per KV head), got " << type;
    }
    if (getKScale().getType() != getVScale().getType())
      return emitOpError() << "k_scale and v_scale must have one layout, got "
                           << getKScale().getType() << " and "
                           << getVScale().getType();
  }

  // The value head dim may differ from the query/key one (MLA); the rest of
  // the caches' shapes must agree.
  for (int64_t axis = 0; axis < 3; ++axis)
    if (sizesConflict(keyCacheType.getDimSize(axis),
                      valueCacheType.getDimSize(axis)))
      return emitOpError() << "key_cache shape " << keyCacheType
                           << " differs from the value_cache shape "
                           << valueCacheType << " before the head dim";
  int64_t dimAxis = queryRank - 1;
  if (sizesConflict(keyCacheType.getDimSize(3),
                    queryType.getDimSize(dimAxis)))
    return emitOpError() << "head dim of key_cache ("
                         << keyCacheType.getDimSize(3)
                         << ") differs from query ("
                         << queryType.getDimSize(dimAxis) << ")";
  SmallVector<int64_t> expected(queryType.getShape());
  expected[dimAxis] = valueCacheType.getDimSize(3);
  if (failed(verifyCompatibleShape(resultType.getShape(), expected)))
    return emitOpError() << "result shape " << resultType
                         << " differs from the query shape " << queryType
                         << " with the value head dim ("
                         << sizeString(valueCacheType.getDimSize(3)) << ")";
  // The batch: the query's axis 0, or q_offsets' size less one.
  int64_t batch = queryType.getDimSize(0);
  StringRef batchOf = "query";
  if (ragged) {
    auto offsetsType = cast<RankedTensorType>(getQOffsets().getType());
    if (offsetsType.getRank() != 1)
      return emitOpError() << "q_offsets must have rank 1, got rank "
                           << offsetsType.getRank();
    int64_t offsets = offsetsType.getDimSize(0);
    if (offsets == 0)
      return emitOpError() << "q_offsets must hold batch + 1 entries, got 0";
    batch = ShapedType::isDynamic(offsets) ? offsets : offsets - 1;
    batchOf = "q_offsets (less one)";
  }
  if (sizesConflict(pageTableType.getDimSize(0), batch))
    return emitOpError() << "batch size of page_table ("
                         << pageTableType.getDimSize(0) << ") differs from "
                         << batchOf << " (" << batch << ")";
  if (sizesConflict(kvLensType.getDimSize(0), batch))
    return emitOpError() << "batch size of kv_lens ("
                         << kvLensType.getDimSize(0) << ") differs from "
                         << batchOf << " (" << batch << ")";

  int64_t numQueryHeads = queryType.getDimSize(1);
  int64_t numKvHeads = keyCacheType.getDimSize(2);
  if (failed(verifyHeadGroups(getOperation(), numQueryHeads, numKvHeads)))
    return failure();
  if (keyCacheType.getDimSize(1) == 0)
    return emitOpError() << "page size must be positive";

  return verifyAttentionAttributes(getOperation(), getScale(), getCausal(),
                                   getWindow(), getSoftcap());
}
