//===- Package.h - The C API's package and site handles ---------*- C++ -*-===//
//
// What a kiln_package handle holds: the parsed manifest, a handle for each of
// its sites, and the modules loaded from its PTX.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_RUNTIME_PACKAGE_H
#define KILN_LIB_RUNTIME_PACKAGE_H

#include "kiln-c/Runtime.h"

#include "Manifest.h"
#include "ModuleCache.h"

#include <cstddef>
#include <string>
#include <vector>

struct kiln_site {
  kiln_package *package = nullptr;
  size_t index = 0;
};

struct kiln_package {
  kiln::rt::Manifest manifest;
  std::vector<kiln_site> sites;
  kiln::rt::ModuleCache modules{manifest};
};

namespace kiln {
namespace rt {
/// Sets the calling thread's kiln_last_error() (Runtime.cpp), for C entry
/// points defined in other units.
void setLastError(std::string message);
} // namespace rt
} // namespace kiln

#endif // KILN_LIB_RUNTIME_PACKAGE_H
