//===- Translation.cpp - The --import-onnx translation --------------------===//
//
// Registers ONNX import with mlir-translate style tools.
//
//===----------------------------------------------------------------------===//

#include "kiln/Target/ONNX/ImportONNX.h"

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/Support/SourceMgr.h"

using namespace mlir;

void mlir::kiln::registerONNXImportTranslation() {
  static TranslateToMLIRRegistration registration(
      "import-onnx", "import an ONNX model (.onnx) as TOSA and kiln ops",
      [](const std::shared_ptr<llvm::SourceMgr> &sourceMgr,
         MLIRContext *ctx) -> OwningOpRef<Operation *> {
        const llvm::MemoryBuffer *buffer =
            sourceMgr->getMemoryBuffer(sourceMgr->getMainFileID());
        OwningOpRef<ModuleOp> module = importONNXBuffer(
            buffer->getBuffer(), buffer->getBufferIdentifier(), ctx);
        return OwningOpRef<Operation *>(module.release());
      },
      [](DialectRegistry &registry) {
        registry.insert<func::FuncDialect, tosa::TosaDialect,
                        kiln::KilnDialect>();
      });
}
