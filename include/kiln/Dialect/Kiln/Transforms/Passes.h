//===- Passes.h - Kiln transformation passes --------------------*- C++ -*-===//
//
// Declares the passes of the kiln dialect.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_KILN_TRANSFORMS_PASSES_H
#define KILN_DIALECT_KILN_TRANSFORMS_PASSES_H

#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"

#include <string>
#include <vector>

namespace mlir::kiln {

#define GEN_PASS_DECL
#include "kiln/Dialect/Kiln/Transforms/Passes.h.inc"

/// Adds the patterns that fuse TOSA attention subgraphs into kiln.attention.
/// `paddedRowsFree`: fuse finite-fill mask combinations that are exact only
/// on rows that see at least one key (see the pass's padded-rows option).
void populateFuseAttentionPatterns(RewritePatternSet &patterns,
                                   bool paddedRowsFree = false,
                                   bool foldFp8 = true);

/// The discardable attribute on a fused kiln.attention that says how the
/// graph's masks were taken (for the report).
inline constexpr llvm::StringLiteral kMaskingAttrName = "kiln.masking";
/// On a fused kiln.attention: the name of the graph value the site's result
/// replaced, where the importer named it (ImportOptions::recordValueNames).
inline constexpr llvm::StringLiteral kReplacesAttrName = "kiln.replaces";
/// The discardable attribute the importer puts on the operation producing a
/// named graph value (mirrors ImportONNX.h's kOnnxValueAttrName).
inline constexpr llvm::StringLiteral kGraphValueAttrName = "kiln.onnx_value";
/// On a constant the importer reshaped from a named constant (a rank padded
/// for broadcasting, folded rather than written as a reshape): that name, so
/// a report reaches the graph value through the reshape.
inline constexpr llvm::StringLiteral kGraphValueReshapedAttrName =
    "kiln.onnx_value_reshaped";

/// The names of the graph nodes behind `loc`: every NameLoc inside it, in
/// order, without repeats.
std::vector<std::string> nodeNames(Location loc);

/// The source lines (`file:line`) inside `loc`, in order, each once: where
/// JAX's StableHLO text keeps the Python line of each op. Line 0 (an
/// importer's whole-file location) is left out.
std::vector<std::string> sourceLines(Location loc);

/// What follows an unfused softmax's reason in the fusion pass's remark
/// when another node's op stopped the match: " [at NAME]" (the report's
/// stopped_at).
inline constexpr llvm::StringLiteral kStoppedAtMarker = " [at ";

/// The unit attribute on a function argument that declares it finite (no
/// infinity or NaN): an additive term computed from it cannot hide keys, so
/// a site adding it beside a finite-fill mask can still fuse exactly. Set by
/// `kilnc --finite-inputs` (by ONNX input name) or written in MLIR text.
inline constexpr llvm::StringLiteral kFiniteArgAttr = "kiln.finite";

/// Adds the patterns that fold K/V head repeats and constant causal masks on
/// existing kiln.attention ops into the op's group count and attributes;
/// with `foldFp8`, also e4m3 operands dequantised in the graph into the
/// op's FP8 operands and descales.
void populateSimplifyAttentionPatterns(RewritePatternSet &patterns,
                                       bool paddedRowsFree = false,
                                       bool foldFp8 = true);

#define GEN_PASS_REGISTRATION
#include "kiln/Dialect/Kiln/Transforms/Passes.h.inc"

} // namespace mlir::kiln

#endif // KILN_DIALECT_KILN_TRANSFORMS_PASSES_H
