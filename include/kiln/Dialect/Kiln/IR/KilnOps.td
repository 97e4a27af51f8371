//===- KilnOps.td - Kiln operations ------------------------*- tablegen -*-===//
//
// Operations of the kiln dialect.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_KILN_IR_KILNOPS_TD
#define KILN_DIALECT_KILN_IR_KILNOPS_TD

include "kiln/Dialect/Kiln/IR/KilnDialect.td"
include "kiln/Dialect/Kiln/IR/KilnAttrs.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Kiln_FloatTensor : RankedTensorOf<[F16, BF16, F32]>;
// Q, K and V of kiln.attention: a float type, or e4m3 (FP8) with descales.
def Kiln_AttentionInput : RankedTensorOf<[F16, BF16, F32, F8E4M3FN]>;
// A paged cache: the query's float type, or e4m3 (FP8) with scales.
def Kiln_CacheTensor : RankedTensorOf<[F16, BF16, F32, F8E4M3FN]>;

// Accessors shared by kiln.attention and kiln.attention_grad, whose
// operands and attributes describe the same attention.
defvar Kiln_AttentionAccessors = [{
    /// Whether the sequences are packed (q_offsets and kv_offsets).
    bool isPacked() { return static_cast<bool>(getQOffsets()); }
    /// Axis of the heads in Q, K, V and the result for this op's layout
    /// (1 in the packed form).
    int64_t getHeadAxis() {
      return isPacked() || getLayout() == Layout::bhsd ? 1 : 2;
    }
    /// Axis of the sequence in Q, K, V and the result for this op's layout
    /// (the packed rows' axis 0 in the packed form).
    int64_t getSeqAxis() {
      return isPacked() ? 0 : getLayout() == Layout::bhsd ? 2 : 1;
    }
    /// Axis of the head dim in Q, K, V and the result.
    int64_t getDimAxis() { return isPacked() ? 2 : 3; }
    /// Size of `axis` of `value`'s type (ShapedType::kDynamic when dynamic).
    static int64_t dimOf(::mlir::Value value, int64_t axis) {
      return ::llvm::cast<::mlir::RankedTensorType>(value.getType())
          .getDimSize(axis);
    }
    /// The batch: Q's axis 0, or q_offsets' size less one when packed.
    int64_t getBatchSize() {
      if (!isPacked())
        return dimOf(getQuery(), 0);
      int64_t offsets = dimOf(getQOffsets(), 0);
      return ::mlir::ShapedType::isDynamic(offsets) ? offsets : offsets - 1;
    }
    int64_t getNumQueryHeads() { return dimOf(getQuery(), getHeadAxis()); }
    int64_t getNumKvHeads() { return dimOf(getKey(), getHeadAxis()); }
    int64_t getQueryLength() { return dimOf(getQuery(), getSeqAxis()); }
    int64_t getKvLength() { return dimOf(getKey(), getSeqAxis()); }
    int64_t getHeadDim() { return dimOf(getQuery(), getDimAxis()); }
    /// Head dim of V and the result (differs from Q's and K's in MLA).
    int64_t getValueHeadDim() { return dimOf(getValue(), getDimAxis()); }
    /// Element type of the result, and of Q, K and V unless they are FP8.
    ::mlir::Type getElementType() {
      return ::llvm::cast<::mlir::RankedTensorType>(
                 getOperation()->getResult(0).getType())
          .getElementType();
    }
    /// Whether keys past the diagonal are hidden, and how far past:
    /// 0 for causal, R for window_right = R.
    std::optional<int64_t> getRightBound() {
      if (getCausal())
        return 0;
      if (std::optional<uint64_t> right = getWindowRight())
        return static_cast<int64_t>(*right);
      return std::nullopt;
    }
    /// "none", "additive" (a float mask) or "boolean" (an i1 mask).
    ::llvm::StringRef getMaskKind() {
      if (!getMask())
        return "none";
      return ::llvm::cast<::mlir::ShapedType>(getMask().getType())
                     .getElementType()
                     .isInteger(1)
                 ? "boolean"
                 : "additive";
    }
    /// Whether `scale_factor` holds one value a query head (`[Hq]`, each
    /// row's factor that of its head) rather than one element.
    bool hasPerHeadScaleFactor() {
      ::mlir::Value factor = getScaleFactor();
      return factor &&
             ::llvm::any_of(
                 ::llvm::cast<::mlir::RankedTensorType>(factor.getType())
                     .getShape(),
                 [](int64_t size) { return size != 1; });
    }
  }];

def Kiln_AttentionOp : Kiln_Op<"attention",
    [Pure, AttrSizedOperandSegments]> {
  let summary = "Fused scaled dot-product attention";
  let description = [{
    Computes, for every batch `b`, query head `h` and query row `i`,

    ```
    s[j]   = scale · f · dot(Q[b, h, i, :], K[b, h / G, j, :])
    s[j]   = softcap · tanh(s[j] / softcap)          (when `softcap` is set)
    s[j]  += bias[b, h, i, j] + mask[b, h, i, j]      (when present)
    s[j]   = -inf when j is hidden by `causal`/`window`
    out[b, h, i, :] = Σ_j softmax(s)[j] · V[b, h / G, j, :]
    ```

    where `f` is the run-time `scale_factor` (a one-element f32 tensor: a
    learned temperature, a scale computed from sizes at run time; or a
    rank-1 `[Hq]` f32 tensor, one factor a query head, `f = scale_factor[h]`:
    Swin-v2's learned logit scale) or 1 when the op has none, and with `G = Hq / Hkv` query heads per KV head (grouped-query attention:
    K and V are never copied per query head). Operands, in the `bhsd` layout:
    Q `[B, Hq, Sq, D]`, K `[B, Hkv, Sk, D]`, V `[B, Hkv, Sk, Dv]` and the
    result `[B, Hq, Sq, Dv]` (Dv may differ from D: multi-head latent
    attention, e.g. D = 192, Dv = 128); the `bshd` layout swaps the head and
    sequence axes of Q, K, V and the result. Every dimension may be dynamic.

    `mask` is either additive (a float tensor) or boolean (`i1`, `true` means
    the key takes part); `bias` is an additive float tensor (T5 relative
    position bias, ALiBi). Both are indexed `[B, Hq, Sq, Sk]` whatever the
    layout and broadcast numpy-style from a lower rank or size-1 axes.

    `causal` keeps key `j` for query `i` when `j <= i + (Sk - Sq)`: the causal
    diagonal is aligned to the bottom-right corner, so a query chunk that
    follows `Sk - Sq` cached keys sees all of them (decode, chunked prefill).
    `window = W` also hides keys with `j <= i + (Sk - Sq) - W`: under
    `causal`, each query sees its W most recent keys, itself included.
    `window_right = R` (instead of `causal`) hides keys with
    `j > i + (Sk - Sq) + R`: with `window`, a two-sided local window (each
    query sees W - 1 keys before its diagonal and R after, FlashAttention's
    `window_size = (W - 1, R)`; ModernBERT's local layers). `causal` is
    `window_right = 0`. `window` needs `causal` or `window_right`.

    A hidden key (by the boolean mask, `causal` or `window`) takes the score
    -inf, or `masked_score` when that attribute is set: the finite fill
    (`finfo.min`, `-1e4`, ...) a graph writes into the scores of hidden keys
    with `where(keep, s, fill)` (or adds, when the fill absorbs any score).
    Rows that see at least one key give the same result either way (`exp`
    of the fill minus the row max is 0); a row whose every key is hidden
    averages V over all `Sk` keys with `masked_score`, as the graph's softmax
    over equal fills does, and produces zeros without it. Additive masks and
    biases are added in f32 exactly as given: two fills that add up to -inf
    give -inf, a finite `finfo.min` stays finite, so a row that an additive
    mask hides completely gives what the graph gives too.

    Softmax statistics and the `P·V` product are accumulated in f32 whatever
    the element type.

    FP8 operands (`descale(%qs, %ks, %vs)`): Q, K and V may all be
    `f8E4M3FN` (e4m3) with f32 descales, each one element (per tensor) or
    one a head (`[Hq]` for Q, `[Hkv]` for K and V); the op then computes
    what it computes on `Q' = f32(Q) · qs[h]`, `K' = f32(K) · ks[h / G]`
    and `V' = f32(V) · vs[h / G]`, each rounded to the result's element
    type (f16, bf16 or f32): the dequantisation an ONNX graph writes with
    `DequantizeLinear` before each matmul, up to the order of products
    (an implementation may apply the descales to the f32 products). The
    result type is given (the element type the graph's matmuls produce).
    Descales come with e4m3 operands only, and all three together.

    Quantised probabilities (`prob_scale = s`, TensorRT-style FP8 graphs
    that quantise the softmax's output before `P·V`): each normalised
    probability `p` becomes `e4m3(clamp(p · (1/s), ±448)) · s` (`1/s`
    rounded to f32, e4m3 rounding to nearest even) before the product with
    V: the graph's `QuantizeLinear`/`DequantizeLinear` of P exactly. The
    rounding needs each row's final maximum and sum before any `P·V`.

    Packed sequences (`offsets(q_offsets, kv_offsets)`, FlashAttention's
    varlen form: an encoder or a prefill batch served without padding):
    Q `[total_q, Hq, D]`, K `[total_kv, Hkv, D]`, V `[total_kv, Hkv, Dv]`
    and the result `[total_q, Hq, Dv]`, with `q_offsets` and `kv_offsets`
    `[B + 1]` (i32). Sequence `b` owns query rows
    `[q_offsets[b], q_offsets[b + 1])` and key/value rows
    `[kv_offsets[b], kv_offsets[b + 1])`, and attends over its own keys
    only, as a `[1, Hq, Sq_b, D]` query over `[1, Hkv, Sk_b, D]` keys with
    every attribute meaning what it means above (`causal` bottom-right per
    sequence). Offsets start at 0, never decrease and end at `total_q`
    (`total_kv`); the lowerings clamp them into range and make them
    non-decreasing, so bad offsets never read outside Q, K or V, and rows
    no sequence owns come out as zeros, as do the rows of a sequence with
    no keys. The packed form takes no mask, bias or `masked_score` (there is
    no `[B, Hq, Sq, Sk]` for them to index) and no `layout`.

    The log-sum-exp (`lse`, an optional second result, for training): the
    natural log of each row's softmax denominator over the final scores
    `s` (after scale, soft-cap, bias and mask), so that
    `out[b, h, i, :] = Σ_j exp(s[j] - lse[b, h, i]) · V[b, h / G, j, :]`;
    `kiln.attention_grad` recomputes the probabilities from it. It is f32,
    `[B, Hq, Sq]` in both the `bhsd` and `bshd` layouts, and `[Hq, total_q]`
    in the packed form (FlashAttention's varlen `softmax_lse`), where rows
    no sequence owns hold -inf. A row that sees no key has `lse = -inf`
    (its output is zeros), unless `masked_score` is set: then every score
    of the row is the fill and `lse = masked_score + ln(Sk)` (rounded to
    f32; the fill itself for a fill as large as `finfo.min`). A row that an
    additive mask hides completely with -inf also has `lse = -inf`.

    Example:

    ```mlir
    %o = kiln.attention %q, %k, %v mask(%m : tensor<2x1x1x128xf32>)
           {causal, scale = 0.125 : f32}
           : tensor<2x8x128x64xbf16>, tensor<2x2x128x64xbf16>,
             tensor<2x2x128x64xbf16> -> tensor<2x8x128x64xbf16>
    // The same, keeping the log-sum-exp for the backward pass.
    %o2, %lse = kiln.attention %q, %k, %v {causal, scale = 0.125 : f32}
           : tensor<2x8x128x64xbf16>, tensor<2x2x128x64xbf16>,
             tensor<2x2x128x64xbf16>
             -> tensor<2x8x128x64xbf16>, tensor<2x8x128xf32>
    ```
  }];

  let arguments = (ins
    Kiln_AttentionInput:$query,
    Kiln_AttentionInput:$key,
    Kiln_AttentionInput:$value,
    Optional<RankedTensorOf<[F16, BF16, F32, I1]>>:$mask,
    Optional<Kiln_FloatTensor>:$bias,
    Optional<RankedTensorOf<[I32]>>:$q_offsets,
    Optional<RankedTensorOf<[I32]>>:$kv_offsets,
    Optional<RankedTensorOf<[F32]>>:$scale_factor,
    Optional<RankedTensorOf<[F32]>>:$q_descale,
    Optional<RankedTensorOf<[F32]>>:$k_descale,
    Optional<RankedTensorOf<[F32]>>:$v_descale,
    F32Attr:$scale,
    UnitAttr:$causal,
    OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$window,
    OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$window_right,
    OptionalAttr<F32Attr>:$softcap,
    OptionalAttr<F32Attr>:$masked_score,
    DefaultValuedAttr<Kiln_LayoutAttr, "::mlir::kiln::Layout::bhsd">:$layout,
    OptionalAttr<F32Attr>:$prob_scale
  );
  let assemblyFormat = [{
    $query `,` $key `,` $value
    (`mask` `(` $mask^ `:` type($mask) `)`)?
    (`bias` `(` $bias^ `:` type($bias) `)`)?
    (`offsets` `(` $q_offsets^ `,` $kv_offsets `:` type($q_offsets) `,`
     type($kv_offsets) `)`)?
    (`scale_factor` `(` $scale_factor^ `:` type($scale_factor) `)`)?
    (`descale` `(` $q_descale^ `,` $k_descale `,` $v_descale `:`
     type($q_descale) `,` type($k_descale) `,` type($v_descale) `)`)?
    attr-dict `:` type($query) `,` type($key) `,` type($value)
    `->` type($result) (`,` type($lse)^)?
  }];

  let results = (outs Kiln_FloatTensor:$result,
                      Optional<RankedTensorOf<[F32]>>:$lse);
  let extraClassDeclaration = Kiln_AttentionAccessors;
  let builders = [
    // The op without its log-sum-exp, as every fusion creates it.
    OpBuilder<(ins "::mlir::Type":$result, "::mlir::Value":$query,
      "::mlir::Value":$key, "::mlir::Value":$value, "::mlir::Value":$mask,
      "::mlir::Value":$bias, "::mlir::Value":$q_offsets,
      "::mlir::Value":$kv_offsets, "::mlir::Value":$scale_factor,
      "::mlir::FloatAttr":$scale, "::mlir::UnitAttr":$causal,
      "::mlir::IntegerAttr":$window, "::mlir::IntegerAttr":$window_right,
      "::mlir::FloatAttr":$softcap, "::mlir::FloatAttr":$masked_score,
      CArg<"::mlir::kiln::LayoutAttr", "nullptr">:$layout), [{
      build($_builder, $_state, result, /*lse=*/::mlir::Type(), query, key,
            value, mask, bias, q_offsets, kv_offsets, scale_factor,
            /*q_descale=*/::mlir::Value(), /*k_descale=*/::mlir::Value(),
            /*v_descale=*/::mlir::Value(), scale, causal, window,
            window_right, softcap, masked_score, layout,
            /*prob_scale=*/::mlir::FloatAttr());
    }]>
  ];

  let hasVerifier = 1;
}

def Kiln_AttentionGradOp : Kiln_Op<"attention_grad",
    [Pure, AttrSizedOperandSegments]> {
  let summary = "Gradient of kiln.attention";
  let description = [{
    The backward pass of `kiln.attention`: given the forward's operands and
    attributes, its result `out` and log-sum-exp `lse`, and the gradient
    `grad_out` of a loss with respect to `out`, computes the gradients with
    respect to Q, K and V (same shapes and element type), and, with
    `bias_grad`, with respect to the bias (the bias operand's shape and
    element type: summed over the axes along which the bias broadcasts).
    Every operand and attribute means what it means on `kiln.attention`,
    and `out`, `grad_out` have the forward result's type, `lse` its `lse`
    type (`[B, Hq, Sq]`, or `[Hq, total_q]` packed).

    With `P[j] = exp(s[j] - lse)` recomputed from the scores and
    `D = Σ_d grad_out[d] · out[d]` per query row (FlashAttention's form):

    ```
    dV[j]  += P[j] · grad_out                       (per query row)
    dS[j]   = P[j] · (dot(grad_out, V[j]) - D)
    dBias  += dS                                    (summed over broadcasts)
    dX[j]   = dS[j] · scale · f · (1 - (c[j] / softcap)^2)   (c: the capped
                                      score; the factor is 1 without softcap)
    dQ     += dX[j] · K[j],   dK[j] += dX[j] · Q
    ```

    Grouped-query and multi-query attention: dK and dV of a KV head are the
    sums over the `G` query heads that read it. Hidden keys (a boolean
    mask, `causal`, `window`) get no gradient: their score is a constant.
    A row that sees no key contributes nothing without `masked_score`;
    with `masked_score` its scores are all the fill, its output the
    uniform average of V over the `Sk` keys, so V receives
    `grad_out / Sk` from each key and nothing reaches Q, K or the bias
    through it (such rows are recognised from the masks, not from `lse`).
    A row whose `lse` is -inf (hidden completely by an additive -inf mask)
    contributes nothing. There is no gradient for `mask` or `scale_factor`.
    Statistics and products are accumulated in f32.

    Example:

    ```mlir
    %dq, %dk, %dv, %db = kiln.attention_grad %q, %k, %v, %o, %lse, %do
           bias(%bias : tensor<1x8x128x128xf32>)
           {bias_grad, causal, scale = 0.125 : f32}
           : tensor<2x8x128x64xf32>, tensor<2x2x128x64xf32>,
             tensor<2x2x128x64xf32>, tensor<2x8x128x64xf32>,
             tensor<2x8x128xf32>, tensor<2x8x128x64xf32>
             -> tensor<2x8x128x64xf32>, tensor<2x2x128x64xf32>,
                tensor<2x2x128x64xf32>, tensor<1x8x128x128xf32>
    ```
  }];

  let arguments = (ins
    Kiln_FloatTensor:$query,
    Kiln_FloatTensor:$key,
    Kiln_FloatTensor:$value,
    Kiln_FloatTensor:$out,
    RankedTensorOf<[F32]>:$lse,
    Kiln_FloatTensor:$grad_out,
    Optional<RankedTensorOf<[F16, BF16, F32, I1]>>:$mask,
    Optional<Kiln_FloatTensor>:$bias,
    Optional<RankedTensorOf<[I32]>>:$q_offsets,
    Optional<RankedTensorOf<[I32]>>:$kv_offsets,
    Optional<RankedTensorOf<[F32]>>:$scale_factor,
    F32Attr:$scale,
    UnitAttr:$causal,
    OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$window,
    OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$window_right,
    OptionalAttr<F32Attr>:$softcap,
    OptionalAttr<F32Attr>:$masked_score,
    DefaultValuedAttr<Kiln_LayoutAttr, "::mlir::kiln::Layout::bhsd">:$layout,
    UnitAttr:$bias_grad
  );
  let results = (outs Kiln_FloatTensor:$grad_query,
                      Kiln_FloatTensor:$grad_key,
                      Kiln_FloatTensor:$grad_value,
                      Optional<Kiln_FloatTensor>:$grad_bias);

  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $out `,` $lse `,` $grad_out
    (`mask` `(` $mask^ `:` type($mask) `)`)?
    (`bias` `(` $bias^ `:` type($bias) `)`)?
    (`offsets` `(` $q_offsets^ `,` $kv_offsets `:` type($q_offsets) `,`
     type($kv_offsets) `)`)?
    (`scale_factor` `(` $scale_factor^ `:` type($scale_factor) `)`)?
    attr-dict `:` type($query) `,` type($key) `,` type($value) `,`
    type($out) `,` type($lse) `,` type($grad_out)
    `->` type($grad_query) `,` type($grad_key) `,` type($grad_value)
    (`,` type($grad_bias)^)?
  }];

  let extraClassDeclaration = Kiln_AttentionAccessors;

  let hasVerifier = 1;
}

def Kiln_PagedAttentionOp : Kiln_Op<"paged_attention",
                                    [Pure, AttrSizedOperandSegments]> {
  let summary = "Attention over a paged key/value cache";
  let description = [{
    `kiln.attention` with K and V read through a page table, the form decode
    and chunked prefill use over a paged KV cache. For batch `b`, key `j`
    (`0 <= j < kv_lens[b]`) lives at

    ```
    K[b, h, j, :] = key_cache[page_table[b, j / P], j % P, h, :]
    ```

    with `P` the page size (`key_cache` axis 1), and V likewise. Operands:
    Q `[B, Hq, Sq, D]`; `key_cache` `[num_pages, P, Hkv, D]`, `value_cache`
    `[num_pages, P, Hkv, Dv]` (Dv may differ from D), the result
    `[B, Hq, Sq, Dv]`; `page_table` `[B, max_pages]` (i32);
    `kv_lens` `[B]` (i32), the number of keys of each sequence. Every
    dimension may be dynamic.

    `scale`, `causal`, `window` and `softcap` mean what they mean on
    `kiln.attention`, per sequence: `causal` keeps key `j` for query `i`
    when `j <= i + (kv_lens[b] - Sq)` (bottom-right aligned), `window = W`
    also hides `j <= i + (kv_lens[b] - Sq) - W`, and a query row that sees
    no key produces zeros. Grouped-query attention reads KV head `h / G`,
    `G = Hq / Hkv`. Statistics and `P·V` are accumulated in f32.

    `kv_lens[b]` must not exceed `max_pages · P` and page table entries
    must lie in `[0, num_pages)`; the CPU lowering clamps both, so a bad
    table never reads outside the cache.

    Ragged batches (`q_offsets`): with the optional operand `q_offsets`
    `[B + 1]` (i32), the queries of every sequence are packed along one axis,
    Q `[total_q, Hq, D]` and the result `[total_q, Hq, Dv]`, the form serving
    engines build with continuous batching and chunked prefill: sequence `b`
    owns query rows `[q_offsets[b], q_offsets[b + 1])`, its own number of new
    queries `Sq_b = q_offsets[b + 1] - q_offsets[b]` (a decode step's one, a
    prompt chunk's hundreds, or none), against its `kv_lens[b]` keys, which
    include them. Every per-sequence rule above holds with `Sq_b` for `Sq`:
    the op is, sequence by sequence, the uniform op on that sequence's rows.
    `q_offsets[0]` is 0, the offsets never decrease and `q_offsets[B]` is
    `total_q`; the CPU lowering clamps them into `[0, total_q]` (rows no
    sequence owns come out as zeros), so bad offsets never read outside Q.

    FP8 caches (`scales`): `key_cache` and `value_cache` may hold
    `f8E4M3FN` (e4m3) with f16 or bf16 queries; then `scales(%ks, %vs)`
    gives their f32 dequantisation factors, `[1]` (per tensor) or `[Hkv]`
    (per KV head), and the op reads
    `K[b, h, j, :] = f32(key_cache[...]) · ks[h or 0]` (V likewise with
    `vs`), every product in f32 as for the other types. A float cache takes
    no scales. The scales must be finite and positive; the CPU lowering
    reads them as given.

    Example:

    ```mlir
    %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {scale = 0.125 : f32}
           : tensor<4x32x1x128xbf16>, tensor<512x16x8x128xbf16>,
             tensor<512x16x8x128xbf16>, tensor<4x64xi32>, tensor<4xi32>
             -> tensor<4x32x1x128xbf16>
    // A ragged batch: a chunk of 500 prompt tokens and three decodes.
    %r = kiln.paged_attention %qp, %kc, %vc, %pt, %lens q_offsets %offs
           {causal, scale = 0.125 : f32}
           : tensor<503x32x128xbf16>, tensor<512x16x8x128xbf16>,
             tensor<512x16x8x128xbf16>, tensor<4x64xi32>, tensor<4xi32>,
             tensor<5xi32> -> tensor<503x32x128xbf16>
    // Four decodes over an e4m3 cache with per-KV-head scales.
    %f = kiln.paged_attention %q, %kc8, %vc8, %pt, %lens
           scales(%ks, %vs : tensor<8xf32>, tensor<8xf32>)
           {scale = 0.125 : f32}
           : tensor<4x32x1x128xbf16>, tensor<512x16x8x128xf8E4M3FN>,
             tensor<512x16x8x128xf8E4M3FN>, tensor<4x64xi32>, tensor<4xi32>
             -> tensor<4x32x1x128xbf16>
    ```
  }];

  let arguments = (ins
    Kiln_FloatTensor:$query,
    Kiln_CacheTensor:$key_cache,
    Kiln_CacheTensor:$value_cache,
    RankedTensorOf<[I32]>:$page_table,
    RankedTensorOf<[I32]>:$kv_lens,
    Optional<RankedTensorOf<[I32]>>:$q_offsets,
    Optional<RankedTensorOf<[F32]>>:$k_scale,
    Optional<RankedTensorOf<[F32]>>:$v_scale,
    F32Attr:$scale,
    UnitAttr:$causal,
    OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$window,
    OptionalAttr<F32Attr>:$softcap
  );
  let results = (outs Kiln_FloatTensor:$result);

  let assemblyFormat = [{
    $query `,` $key_cache `,` $value_cache `,` $page_table `,` $kv_lens
    (`q_offsets` $q_offsets^)?
    (`scales` `(` $k_scale^ `,` $v_scale `:` type($k_scale) `,`
     type($v_scale) `)`)?
    attr-dict `:` type($query) `,` type($key_cache) `,` type($value_cache)
    `,` type($page_table) `,` type($kv_lens) (`,` type($q_offsets)^)?
    `->` type($result)
  }];

  let extraClassDeclaration = [{
    /// Element type of Q and the result (and of a float cache).
    ::mlir::Type getElementType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getQuery().getType())
          .getElementType();
    }
    /// Element type of the caches: the query's, or f8E4M3FN.
    ::mlir::Type getCacheElementType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getKeyCache().getType())
          .getElementType();
    }
    /// Whether the caches are FP8 with scales.
    bool isFp8Cache() {
      return ::llvm::isa<::mlir::Float8E4M3FNType>(getCacheElementType());
    }
    /// Whether queries are packed per sequence (`q_offsets`).
    bool isRagged() { return static_cast<bool>(getQOffsets()); }
  }];

  let hasVerifier = 1;
}

#endif // KILN_DIALECT_KILN_IR_KILNOPS_TD
