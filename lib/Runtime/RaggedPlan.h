//===- RaggedPlan.h - The work items of a ragged paged launch ---*- C++ -*-===//
//
// A ragged launch (packed queries, q_offsets) runs one block per work item
// and KV head (and split): an item is a query block of one sequence, the
// block's rows (query, head) pairs of a KV head's group as in every paged
// kernel. The plan lists the items heaviest first, so that a long prompt
// chunk's blocks start first and decodes fill the tail, and is computed on
// the host once per batch (every layer of a step reuses it).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_RUNTIME_RAGGEDPLAN_H
#define KILN_LIB_RUNTIME_RAGGEDPLAN_H

#include "Manifest.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {
namespace rt {

/// The items a ragged launch of at most `batch` sequences and `totalQ`
/// queries needs at most, with `group` query heads per KV head and
/// `rowsPerBlock` rows a block.
int64_t planCapacity(int64_t batch, int64_t totalQ, int64_t group,
                     int64_t rowsPerBlock);

/// Writes the plan of a batch (host arrays: `qOffsets` [batch + 1],
/// `kvLens` [batch] or null) to `plan` (capacity int32 pairs, empty items
/// after the last) and its item count to `items`. `where` starts messages.
/// With `lensCountQueries` (paged launches) each kv_lens[b] counts the
/// sequence's queries and is at least their number.
Error buildPlan(const std::string &where, const int32_t *qOffsets,
                const int32_t *kvLens, int64_t batch, int64_t group,
                int64_t rowsPerBlock, int32_t *plan, int64_t capacity,
                int64_t &items, bool lensCountQueries = true);

/// The key counts of a packed batch from its host `kvOffsets` ([batch +
/// 1], starting at 0 and never decreasing, or an error naming the first
/// bad entry).
Error keyCountsOf(const std::string &where, const int32_t *kvOffsets,
                  int64_t batch, std::vector<int32_t> &kvLens);

} // namespace rt
} // namespace kiln

#endif // KILN_LIB_RUNTIME_RAGGEDPLAN_H
