//===- fuzz-onnx-import.cpp - libFuzzer target for the ONNX importer ------===//
//
// Feeds arbitrary bytes to importONNXBuffer: every input must either import
// or be rejected through a diagnostic, never crash. Built by
// utils/fuzz-onnx.sh with -fsanitize=fuzzer,address,undefined.
//
//===----------------------------------------------------------------------===//

#include "kiln/Target/ONNX/ImportONNX.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // A fresh context per input keeps memory bounded and runs independent.
  mlir::MLIRContext ctx(mlir::MLIRContext::Threading::DISABLED);
  mlir::ScopedDiagnosticHandler silence(
      &ctx, [](mlir::Diagnostic &) { return mlir::success(); });
  mlir::kiln::ImportReport report;
  mlir::kiln::ImportOptions options;
  options.warnOnUnsupported = false;
  (void)mlir::kiln::importONNXBuffer(
      llvm::StringRef(reinterpret_cast<const char *>(data), size), "fuzz.onnx",
      &ctx, &report, options);
  return 0;
}
