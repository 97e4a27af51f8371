//===- Passes.h - Kiln conversion passes ------------------------*- C++ -*-===//
//
// Declares the passes that lower the kiln dialect.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CONVERSION_PASSES_H
#define KILN_CONVERSION_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Pass/Pass.h"

namespace mlir::kiln {

#define GEN_PASS_DECL
#include "kiln/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "kiln/Conversion/Passes.h.inc"

/// Checks the options of convert-kiln-to-gpu that need no site: the one
/// place they are checked (by the pass before anything else, and by kilnc
/// before it reads its input). Each message names the option as
/// `flagPrefix` followed by its name ("--" for kilnc's flags).
LogicalResult
verifyConvertKilnToGPUOptions(const ConvertKilnToGPUOptions &options,
                              function_ref<InFlightDiagnostic()> emitError,
                              StringRef flagPrefix = "");

} // namespace mlir::kiln

#endif // KILN_CONVERSION_PASSES_H
