//===- PtxParts.h - A package's PTX cut into one module per kernel -*- C++ -*-=//
//
// The driver JIT-compiles a whole PTX module at once, and a package's module
// holds every kernel of its target: the portable and the warp-specialised
// attention kernel, split-KV combines, backward passes. A launch needs one of
// them, so the runtime loads each kernel from a module of its own (the PTX's
// declarations and that kernel's entry), compiled when the kernel is first
// needed, or all of them at once by kiln_package_prepare.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_RUNTIME_PTXPARTS_H
#define KILN_LIB_RUNTIME_PTXPARTS_H

#include <string>
#include <vector>

namespace kiln {
namespace rt {

/// A target's PTX as the modules its kernels are loaded from.
struct PtxParts {
  /// Each module's PTX text.
  std::vector<std::string> texts;
  /// Per kernel name asked for, the index of its module in `texts`.
  std::vector<size_t> partOfKernel;
  /// False where the PTX could not be cut and is the one module.
  bool cut = false;
};

/// `ptx` cut into one module per name of `kernels`: every top-level statement
/// that is not a kernel entry (the version, target and address size, shared
/// and global declarations, device functions) followed by that kernel's
/// entry. Where the text does not read as expected (an entry named in
/// `kernels` missing, unbalanced braces or an unterminated comment), the
/// result is the whole PTX as one module that every kernel maps to, which is
/// always correct, only slower to compile.
PtxParts splitPtxByKernel(const std::string &ptx,
                          const std::vector<std::string> &kernels);

} // namespace rt
} // namespace kiln

#endif // KILN_LIB_RUNTIME_PTXPARTS_H
