//===- ImportONNX.h - ONNX model to MLIR importer ---------------*- C++ -*-===//
//
// Reads an ONNX model (default domain, opsets 13-23) into a `func.func @main`
// over TOSA, with `kiln.attention` for the opset-23 `Attention` op.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TARGET_ONNX_IMPORTONNX_H
#define KILN_TARGET_ONNX_IMPORTONNX_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"

#include <map>
#include <string>
#include <vector>

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace mlir::kiln {

/// What an import left opaque: ONNX nodes that were kept as generic
/// `onnx.<OpType>` operations because Kiln has no lowering for them (or for
/// the way they were used).
struct ImportReport {
  struct UnsupportedOp {
    /// The ONNX node name (may be empty when the exporter wrote none).
    std::string nodeName;
    /// The ONNX op type, e.g. `Conv`.
    std::string opType;
    /// Why the node was kept opaque.
    std::string reason;
  };
  std::vector<UnsupportedOp> unsupportedOps;
  /// Opset version of the default domain the model was exported with.
  int64_t opsetVersion = 0;
  /// Number of ONNX nodes in the main graph.
  size_t numNodes = 0;
  /// Symbolic dimensions imported as static sizes (name, or `?` for an
  /// unnamed one, and the size), in the order they were met.
  std::vector<std::pair<std::string, int64_t>> boundDims;
  /// Why the import gave the unbound symbolic dimensions static sizes
  /// (ImportOptions::staticSizesOnFailure, staticSizesForOpaqueNodes).
  enum class StaticSizes {
    /// It did not: they are dynamic.
    None,
    /// The graph's shape computations cannot be imported without them.
    ForShapeComputations,
    /// Fewer nodes are kept opaque with them.
    ForOpaqueNodes,
  };
  StaticSizes staticSizes = StaticSizes::None;
  /// With StaticSizes::ForOpaqueNodes: the nodes kept opaque with the
  /// dimensions dynamic.
  size_t opaqueWithDynamicSizes = 0;
};

/// The static size a symbolic dimension without a binding gets where one is
/// needed: 1 for batch-like names, else 128.
int64_t defaultStaticSize(llvm::StringRef dimName);

/// Options of the importer.
struct ImportOptions {
  /// Emit a warning diagnostic for each node kept opaque.
  bool warnOnUnsupported = true;
  /// Import the opset-23 `Attention` op as `kiln.attention` (true) or as the
  /// decomposed TOSA matmul/softmax/matmul graph (false).
  bool attentionAsKilnOp = true;
  /// Static sizes for symbolic dimensions (ONNX `dim_param` names): a bound
  /// dimension is imported as that size, so shape computations over it fold.
  std::map<std::string, int64_t> dimBindings;
  /// Give every symbolic or unknown dimension without a binding its
  /// defaultStaticSize; false keeps such dimensions dynamic.
  bool bindAllDims = false;
  /// Where the graph cannot be imported with its unbound symbolic dimensions
  /// dynamic, import it again, from the model already parsed, with
  /// bindAllDims (the report says so). The first attempt's diagnostics are
  /// shown only where the second does not help.
  bool staticSizesOnFailure = false;
  /// Where the import keeps nodes opaque, import the model again with
  /// bindAllDims, silently, and keep that graph if it has fewer opaque nodes
  /// (a strided 1-D Conv over a dynamic length, say).
  bool staticSizesForOpaqueNodes = false;
  /// Mark the operation that produces each node output with that ONNX
  /// tensor's name (kOnnxValueAttrName), so that a fusion report can name
  /// the graph values a site reads and replaces.
  bool recordValueNames = false;
};

/// The discardable attribute naming the ONNX tensor an operation's single
/// result is (set with ImportOptions::recordValueNames).
inline constexpr llvm::StringLiteral kOnnxValueAttrName = "kiln.onnx_value";

/// Imports the ONNX model in the file `path`. Errors (unreadable or malformed
/// files, unsupported opsets or element types, inconsistent graphs) are
/// reported through `ctx`'s diagnostic engine, located at the file and the
/// ONNX node, and give a null result. Registers and loads the dialects the
/// result uses. When `report` is given, it receives the nodes kept opaque.
/// The file is read and parsed once, whatever the options (the statistics
/// the models read and the graphs converted from them).
OwningOpRef<ModuleOp> importONNXFile(llvm::StringRef path, MLIRContext *ctx,
                                     ImportReport *report = nullptr,
                                     const ImportOptions &options = {});

/// Same, from the bytes of a serialised `ModelProto`; `bufferName` names the
/// source in locations and diagnostics.
OwningOpRef<ModuleOp> importONNXBuffer(llvm::StringRef bytes,
                                       llvm::StringRef bufferName,
                                       MLIRContext *ctx,
                                       ImportReport *report = nullptr,
                                       const ImportOptions &options = {});

/// Registers the `--import-onnx` translation (for mlir-translate style tools).
void registerONNXImportTranslation();

} // namespace mlir::kiln

#endif // KILN_TARGET_ONNX_IMPORTONNX_H
