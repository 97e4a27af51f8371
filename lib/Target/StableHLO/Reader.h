//===- Reader.h - The dialect that parses StableHLO's text ------*- C++ -*-===//
//
// See Reader.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_TARGET_STABLEHLO_READER_H
#define KILN_LIB_TARGET_STABLEHLO_READER_H

#include "mlir/IR/ExtensibleDialect.h"

namespace mlir::kiln::stablehlo_import {

/// `stablehlo.*` ops, parsed from their pretty form into generic ops.
class ReaderDialect : public ExtensibleDialect {
public:
  explicit ReaderDialect(MLIRContext *ctx);
  static constexpr StringLiteral getDialectNamespace() {
    return StringLiteral("stablehlo");
  }
  Attribute parseAttribute(DialectAsmParser &parser, Type type) const override;
  void printAttribute(Attribute attr, DialectAsmPrinter &printer) const override;
};

/// `chlo.*` ops (CHLO, StableHLO's client ops), parsed the same way; the
/// importer keeps them opaque.
class ChloReaderDialect : public ExtensibleDialect {
public:
  explicit ChloReaderDialect(MLIRContext *ctx);
  static constexpr StringLiteral getDialectNamespace() {
    return StringLiteral("chlo");
  }
};

} // namespace mlir::kiln::stablehlo_import

MLIR_DECLARE_EXPLICIT_TYPE_ID(mlir::kiln::stablehlo_import::ReaderDialect)
MLIR_DECLARE_EXPLICIT_TYPE_ID(mlir::kiln::stablehlo_import::ChloReaderDialect)

#endif // KILN_LIB_TARGET_STABLEHLO_READER_H
