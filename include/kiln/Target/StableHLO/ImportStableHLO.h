//===- ImportStableHLO.h - StableHLO text to Kiln's TOSA graph -*- C++ -*-===//
//
// Reads a StableHLO module as JAX prints it (`jax.jit(f).lower(...)
// .as_text()`) into the `func.func @main` over TOSA that Kiln's ONNX importer
// also produces, so that the fusion passes, `--verify` and the CPU runner
// take it unchanged. See docs/stablehlo.md.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TARGET_STABLEHLO_IMPORTSTABLEHLO_H
#define KILN_TARGET_STABLEHLO_IMPORTSTABLEHLO_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace mlir::kiln {

/// Loads the dialect that parses StableHLO's printed ops (`stablehlo.*`)
/// into `ctx`: after this, MLIR text holding them parses.
void loadStableHLOReader(MLIRContext *ctx);

/// `text` with every boolean constant written in hex one byte an element
/// (`dense<"0x0100..."> : tensor<NxMxi1>`, as newer MLIR prints them, JAX's
/// included) rewritten one bit an element, the form this MLIR parses; null
/// where `text` holds none.
std::optional<std::string> repackBooleanHex(StringRef text);

/// Whether `module` holds StableHLO ops (as the reader parsed them).
bool containsStableHLO(ModuleOp module);

/// Converts a parsed StableHLO module into a TOSA graph: its public `main`
/// with every call inlined. Each op keeps its location (JAX's source lines).
/// Returns null, with a diagnostic naming the op and its location, for a
/// construct Kiln cannot read.
OwningOpRef<ModuleOp> importStableHLO(ModuleOp input);

void registerStableHLOImportTranslation();

} // namespace mlir::kiln

#endif // KILN_TARGET_STABLEHLO_IMPORTSTABLEHLO_H
