//===- kiln-opt.cpp - Kiln's mlir-opt ---------------------------*- C++ -*-===//
//
// Runs any Kiln or upstream pass on MLIR text, for lit tests and debugging.
//
//===----------------------------------------------------------------------===//

#include "kiln/InitAll.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::kiln::initializeTargets();
  mlir::kiln::registerAllPasses();
  mlir::DialectRegistry registry;
  mlir::kiln::registerAllDialects(registry);
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "Kiln optimizer driver\n", registry));
}
