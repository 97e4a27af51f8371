//===- PagedAppend.h - The paged cache append launch ------------*- C++ -*-===//
//
// kiln_site_append_paged_kv: a paged site's new keys and values written into
// its caches by the package's append kernel (kind "paged_append"), one
// block a new token. The arguments are checked against the site and the
// kernel before the driver is touched.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_RUNTIME_PAGEDAPPEND_H
#define KILN_LIB_RUNTIME_PAGEDAPPEND_H

#include "Package.h"

namespace kiln {
namespace rt {

/// Checks an append to the caches of `site`; `config` gets the launch's
/// configuration (a grid of 0 blocks where nothing is appended). Never
/// touches the CUDA driver.
Error checkAppend(const Manifest &manifest, const Site &site,
                  const kiln_paged_append_args *args,
                  kiln_launch_config &config);

/// Checks and launches an append on `stream`.
Error launchAppend(kiln_package &package, const Site &site,
                   const kiln_paged_append_args *args, void *stream);

} // namespace rt
} // namespace kiln

#endif // KILN_LIB_RUNTIME_PAGEDAPPEND_H
