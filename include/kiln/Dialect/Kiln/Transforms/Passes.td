//===- Passes.td - Kiln transformation passes --------------*- tablegen -*-===//
//
// Passes that find and rewrite attention in graph dialects.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_KILN_TRANSFORMS_PASSES_TD
#define KILN_DIALECT_KILN_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def KilnFuseAttention : Pass<"kiln-fuse-attention"> {
  let summary = "Fuse softmax(scale·QKᵀ + mask)·V subgraphs into kiln.attention";
  let description = [{
    Matches attention written in the TOSA graph dialect (as Kiln's ONNX
    importer and other frontends emit it) and replaces each site with one
    `kiln.attention` op. The matched family, on `[B, H, S, D]` tensors or on
    their `[B·H, S, D]` collapsed forms:

    ```
    scores = matmul(Q, transpose(K))        // or K given already transposed
    scores = scores · c  |  scores · reciprocal(c)   // optional, c a splat
    scores = scores + mask                  // optional additive mask
    probs  = softmax(scores) over the last axis, written as
             exp(x - reduce_max(x)) · reciprocal(reduce_sum(...))
    out    = matmul(probs, V)
    ```

    A fusion never changes what the graph computes: when any intermediate
    (the scores or the probabilities) is used outside the chain, or the
    softmax runs over another axis, nothing is fused. Every softmax that is
    not fused gets a remark (`emitRemark`) that says why; run with
    `-mlir-print-op-on-diagnostic=false` to keep them short.

    Example:

    ```mlir
    %s = tosa.matmul %q, %kt, %zp, %zp : ... -> tensor<8x128x128xf32>
    ...softmax...
    %o = tosa.matmul %p, %v, %zp, %zp : ... -> tensor<8x128x64xf32>
    // becomes
    %o = kiln.attention %q4, %k4, %v4 {scale = 1.0 : f32} : ...
    ```
  }];
  let dependentDialects = ["::mlir::kiln::KilnDialect",
                           "::mlir::tosa::TosaDialect"];
  let options = [
    Option<"annotateOnly", "annotate-only", "bool", "false",
           "Rewrite nothing: tag the op that produces each matched site's "
           "result with `kiln.site_root = N` (N counts sites in program "
           "order, the order of the kiln.attention ops a fusion creates)">,
    Option<"paddedRows", "padded-rows", "std::string", "\"exact\"",
           "'exact' (default): every fusion computes what the graph computes "
           "on every row, rows whose keys are all masked included (finite "
           "fills become masked_score; a finite-fill causal mask added to "
           "another mask stays a mask operand). 'free': such combinations "
           "fuse into causal/window plus the padding mask, and rows that "
           "see no key give zeros (outputs a model discards, e.g. padded "
           "queries)">,
    Option<"foldFp8", "fold-fp8", "bool", "true",
           "Fold Q, K and V dequantised from e4m3 in the graph "
           "(DequantizeLinear) into the op's FP8 operands with descales; "
           "off, the op takes the dequantised values">
  ];
  let statistics = [
    Statistic<"numFused", "num-fused", "Attention sites fused">,
    Statistic<"numUnfused", "num-unfused", "Softmaxes left unfused">
  ];
}

def KilnTileAttention : Pass<"kiln-tile-attention"> {
  let summary = "Lower kiln.attention and kiln.paged_attention to the tiled "
                "online-softmax form";
  let description = [{
    Rewrites every `kiln.attention` and `kiln.paged_attention` into the tiled
    online-softmax form that the CPU and GPU back ends share, in upstream
    dialects (`scf`, `tensor`, `linalg`, `arith`, `math`) on tensors:

    - loops over the batch, the query heads and blocks of `q-block-size`
      query rows; for each, the range of visible keys is computed from
      `causal`/`window` (per sequence for the paged op), so whole KV blocks
      outside it are never visited;
    - that range is cut into `num-splits` parts (split-KV); each part runs a
      loop over blocks of `kv-block-size` keys carrying the running row max
      `m`, row sum `l` and the f32 accumulator, with scores in base 2
      (`exp2`, `scale·log2(e)` folded into the score scaling), soft-capping,
      bias, mask and the causal/window edge applied per tile, and
      `-inf - -inf` guarded so rows that see no key give 0;
    - each part writes its normalised partial output and its base-2
      log-sum-exp; with more than one part, a combine step weights the parts
      by `exp2(lse_s - max_s lse_s)`;
    - K and V are read from KV head `h / G` (grouped-query attention never
      copies K/V); the paged op gathers each K/V tile through the page table.

    Every dimension may be dynamic (sizes come from `tensor.dim`). Lengths
    need not be multiples of the block sizes.

    A `kiln.attention` with an `lse` result gets its log-sum-exp from the
    parts' base-2 statistics, in natural units. `kiln.attention_grad` is
    lowered in the reference form of `kiln-decompose-attention` (it
    recomputes the probabilities from the forward's `lse`, so it keeps no
    running statistics of its own).

    Example:

    ```mlir
    %o = kiln.attention %q, %k, %v {causal, scale = 0.125 : f32} : ...
    // becomes scf.for loops over b, h, query blocks and KV blocks, with
    // linalg.generic ops computing each tile.
    ```
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::linalg::LinalgDialect",
    "::mlir::math::MathDialect", "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect"
  ];
  let options = [
    Option<"kvBlockSize", "kv-block-size", "int64_t", "32",
           "Keys per KV block">,
    Option<"qBlockSize", "q-block-size", "int64_t", "16",
           "Query rows per query block">,
    Option<"numSplits", "num-splits", "int64_t", "1",
           "Parts the visible KV range is split into (split-KV); more than "
           "one adds a combine step over the parts' log-sum-exp">
  ];
}

def KilnExpandFloat8 : Pass<"kiln-expand-f8"> {
  let summary = "Expand float8 e4m3fn conversions into integer arithmetic";
  let description = [{
    Rewrites scalar `arith.extf` from and `arith.truncf` to `f8E4M3FN` into
    integer arithmetic on the bits (LLVM has no float8 type): decoding is
    exact; encoding rounds to nearest, ties to even, and gives NaN for NaN,
    infinities and magnitudes that round past 448 (a saturating conversion
    clamps before it). Runs after the loops are formed, before the lowering
    to LLVM.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def KilnDecomposeAttention : Pass<"kiln-decompose-attention"> {
  let summary = "Lower kiln attention ops to a plain, untiled softmax";
  let description = [{
    The reference lowering: for each batch and query head, the whole score
    matrix `scale·QKᵀ` (soft-capped, plus bias and mask, with hidden keys
    set to -inf), `exp(s - max)`, its row sums and `P·V`, in `linalg` on
    tensors, all in f32. Rows that see no key give 0. It shares no
    statistics or block logic with `kiln-tile-attention`, so the two can be
    compared; the paged op gathers its whole K/V through the page table.
    An `lse` result is `max + ln(sum)` per row. `kiln.attention_grad` is
    lowered per batch and query head from the recomputed probabilities
    `exp(s - lse)`: `dS = P·(dOut·Vᵀ - rowsum(dOut ∘ out))`, then dQ, dK, dV
    (dK, dV summed over each KV head's query heads) and the bias's gradient
    (dS summed over the bias's broadcast axes).

    Example:

    ```mlir
    %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : ...
    // becomes scf.for loops over b and h around linalg.generic ops.
    ```
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::linalg::LinalgDialect",
    "::mlir::math::MathDialect", "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect"
  ];
}

#endif // KILN_DIALECT_KILN_TRANSFORMS_PASSES_TD
