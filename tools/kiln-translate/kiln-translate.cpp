//===- kiln-translate.cpp - Kiln's mlir-translate ---------------*- C++ -*-===//
//
// Translates external formats into MLIR: `kiln-translate --import-onnx
// model.onnx` (or `--import-stablehlo jax.mlir`) prints the imported module.
//
//===----------------------------------------------------------------------===//

#include "kiln/Target/ONNX/ImportONNX.h"
#include "kiln/Target/StableHLO/ImportStableHLO.h"

#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"

int main(int argc, char **argv) {
  mlir::kiln::registerONNXImportTranslation();
  mlir::kiln::registerStableHLOImportTranslation();
  return mlir::failed(
             mlir::mlirTranslateMain(argc, argv, "Kiln translation driver\n"))
             ? 1
             : 0;
}
