//===- PagedTableCheck.h - Debug check of paged launches' tables ----------===//
//
// A paged launch clamps kv_lens and page-table entries on the GPU, so a bad
// table never reads outside the cache but gives plausible wrong answers.
// The debug check (KILN_CHECK=1, or kiln_site_validate_paged_attention)
// validates both on the device before the launch and names the first bad
// place. It synchronises the stream and allocates: debug use only.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_RUNTIME_PAGEDTABLECHECK_H
#define KILN_LIB_RUNTIME_PAGEDTABLECHECK_H

#include "CudaDriver.h"

#include <cstdint>
#include <string>

namespace kiln {
namespace rt {

/// What the check reads: a paged launch's table and lengths, and the sizes
/// that bound them.
struct PagedTables {
  const int32_t *pageTable = nullptr;
  /// Entries between two sequences' rows (0: one row shared by all).
  int64_t pageTableStride = 0;
  const int32_t *kvLens = nullptr;
  int64_t batch = 0, maxPages = 0, pageSize = 0, numPages = 0, qLen = 0;
  /// The site's compiled sliding window (0: none): entries before the first
  /// page it reaches are never read, and may hold anything.
  int64_t window = 0;
};

/// Whether KILN_CHECK is set (to anything but "" or "0"): every paged
/// launch is then checked first. Read once per process.
bool pagedChecksEnabled();

/// Checks `tables` on the device on `stream` (in the current context, or
/// the stream's), waits for the answer, and returns KILN_INVALID_ARGUMENT
/// naming the first bad place (sequence, position, value, the valid range)
/// prefixed by `where`. Skipped (no error) while `stream` is being captured
/// into a CUDA graph, where nothing can be waited for.
Error checkPagedTables(const CudaDriver &driver, const PagedTables &tables,
                       CUstream stream, const std::string &where);

} // namespace rt
} // namespace kiln

#endif // KILN_LIB_RUNTIME_PAGEDTABLECHECK_H
