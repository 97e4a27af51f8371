//===- InitAll.h - Register everything Kiln uses ----------------*- C++ -*-===//
//
// The one registration header shared by kiln-opt, kilnc and the libraries.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_INITALL_H
#define KILN_INITALL_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace mlir::kiln {

/// Adds every dialect (and dialect extension) Kiln's pipelines use.
void registerAllDialects(DialectRegistry &registry);

/// Registers Kiln's passes and pipelines, and the upstream passes the
/// pipelines are made of, for command-line use.
void registerAllPasses();

/// Initialises the LLVM targets the GPU back end emits code for (NVPTX).
void initializeTargets();

} // namespace mlir::kiln

#endif // KILN_INITALL_H
