//===- AttentionMatchers.h - Matchers shared by Kiln's passes ---*- C++ -*-===//
//
// Recognisers of attention building blocks in TOSA, shared by the fusion
// pattern and the simplification of kiln.attention operands.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_DIALECT_KILN_TRANSFORMS_ATTENTIONMATCHERS_H
#define KILN_LIB_DIALECT_KILN_TRANSFORMS_ATTENTIONMATCHERS_H

#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/SmallVector.h"

#include <limits>
#include <optional>
#include <utility>

namespace mlir::kiln::detail {

/// A mask or bias term added to (or selected into) the scores.
struct MaskTerm {
  Value value;
  /// An i1 condition (through select) rather than an additive float tensor.
  bool isBoolean = false;
  /// The condition selects the fill, not the scores: `true` hides the key.
  bool inverted = false;
  /// Rank of the scores where the term is applied (3 before the split of
  /// the batch into [B, H], 4 after).
  int64_t scoresRank = 4;
  /// Boolean terms: the score a hidden key takes (-inf or a finite fill).
  double fill = -std::numeric_limits<double>::infinity();
  /// Boolean terms: the fill replaces the score (`select(keep, s, fill)`)
  /// rather than being added to it (`s + select(keep, 0, fill)`).
  bool replaces = true;
  /// Additive constant masks met after a scale (`(QKᵀ + m) · c`): the
  /// positive c the graph multiplies the term by, so the op adds m · c.
  double scale = 1.0;
};

/// The value of a splat float constant, looking through `tosa.reciprocal`
/// (a division by a constant becomes a product with its reciprocal).
std::optional<double> getSplatFloat(Value value);

/// True when `value` hides a key even when added to a score: -inf, or a
/// finite fill so large that `s + fill` rounds to `fill` for any score
/// below 2^70 (finfo.min of f32 and bf16).
bool isAbsorbingMask(double value);

/// Matches `reshape(tile(reshape(kv, [B, Hkv, 1, S, D]), [1, 1, G, 1, 1]))`
/// (or a tile of a single KV head): query head `h` then reads KV head
/// `h / G`. Returns the unrepeated tensor and G, and adds the repeat's ops.
std::optional<std::pair<Value, int64_t>>
matchKvRepeat(Value value, SmallVectorImpl<Operation *> &ops);

/// A band of visible keys around the bottom-right aligned diagonal
/// `d = i + (Sk - Sq)`: key j is visible when `d - window < j <= d + right`.
struct Band {
  /// 0: no bound on the left.
  int64_t window = 0;
  /// 0: causal.
  int64_t right = 0;
};

/// Recognises a constant band mask over logical scores `[B, Hq, Sq, Sk]`
/// (causal, sliding-window causal, or a two-sided local window), every
/// element checked; every row must see its diagonal key.
std::optional<Band> matchCausalConstant(const MaskTerm &term,
                                        ArrayRef<int64_t> scoresShape);

} // namespace mlir::kiln::detail

#endif // KILN_LIB_DIALECT_KILN_TRANSFORMS_ATTENTIONMATCHERS_H
