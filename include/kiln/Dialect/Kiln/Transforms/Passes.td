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
  let statistics = [
    Statistic<"numFused", "num-fused", "Attention sites fused">,
    Statistic<"numUnfused", "num-unfused", "Softmaxes left unfused">
  ];
}

#endif // KILN_DIALECT_KILN_TRANSFORMS_PASSES_TD
