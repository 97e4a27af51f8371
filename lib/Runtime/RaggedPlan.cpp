//===- RaggedPlan.cpp - The work items of a ragged paged launch -----------===//

#include "RaggedPlan.h"

#include "LaunchChecks.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace kiln {
namespace rt {

int64_t planCapacity(int64_t batch, int64_t totalQ, int64_t group,
                     int64_t rowsPerBlock) {
  // Each sequence's blocks cover its rows, one partial block at most each.
  return (totalQ * group + rowsPerBlock - 1) / rowsPerBlock + batch;
}

Error buildPlan(const std::string &where, const int32_t *qOffsets,
                const int32_t *kvLens, int64_t batch, int64_t group,
                int64_t rowsPerBlock, int32_t *plan, int64_t capacity,
                int64_t &items, bool lensCountQueries) {
  items = 0;
  if (batch < 0 || batch > std::numeric_limits<int32_t>::max() - 1)
    return invalid("{}batch must be 0 to 2^31 - 2, got {}", where, batch);
  if (batch > 0 && !qOffsets)
    return invalid("{}q_offsets is NULL", where);
  if (!plan && capacity > 0)
    return invalid("{}plan is NULL", where);
  if (capacity < 0)
    return invalid("{}capacity must not be negative, got {}", where, capacity);
  if (group <= 0 || rowsPerBlock <= 0)
    return invalid("{}q_heads must be a positive multiple of kv_heads", where);
  if (batch > 0 && qOffsets[0] != 0)
    return invalid("{}q_offsets[0] must be 0, got {}", where, qOffsets[0]);
  struct Item {
    int64_t cost;
    int32_t sequence, block;
  };
  std::vector<Item> list;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t queries = int64_t(qOffsets[b + 1]) - qOffsets[b];
    if (queries < 0)
      return invalid("{}q_offsets decrease at sequence {}: q_offsets[{}] = "
                     "{} > q_offsets[{}] = {}",
                     where, b, b, qOffsets[b], b + 1, qOffsets[b + 1]);
    if (kvLens && lensCountQueries && kvLens[b] < queries)
      return invalid("{}kv_lens[{}] = {} is less than the sequence's {} new "
                     "queries (kv_lens counts them)",
                     where, b, kvLens[b], queries);
    int64_t rows = queries * group;
    int64_t blocks = (rows + rowsPerBlock - 1) / rowsPerBlock;
    int64_t keys = kvLens ? kvLens[b] : queries;
    for (int64_t block = 0; block < blocks; ++block) {
      // The keys the block's last query sees (bottom-right causal or not:
      // a heavier block first either way), times its rows.
      int64_t lastQuery = std::min(queries, (block + 1) * rowsPerBlock / group);
      int64_t seen = keys - queries + std::max<int64_t>(lastQuery, 1);
      int64_t blockRows = std::min(rowsPerBlock, rows - block * rowsPerBlock);
      list.push_back({std::max<int64_t>(seen, 1) * blockRows + rowsPerBlock,
                      static_cast<int32_t>(b), static_cast<int32_t>(block)});
    }
  }
  if (int64_t(list.size()) > capacity)
    return invalid("{}the batch has {} work items but the plan holds {} "
                   "(kiln_site_plan_capacity)",
                   where, list.size(), capacity);
  std::stable_sort(list.begin(), list.end(), [](const Item &a, const Item &b) {
    return a.cost > b.cost;
  });
  for (size_t i = 0; i < list.size(); ++i) {
    plan[2 * i] = list[i].sequence;
    plan[2 * i + 1] = list[i].block;
  }
  for (int64_t i = list.size(); i < capacity; ++i) {
    plan[2 * i] = -1;
    plan[2 * i + 1] = 0;
  }
  items = list.size();
  return Error::ok();
}

Error keyCountsOf(const std::string &where, const int32_t *kvOffsets,
                  int64_t batch, std::vector<int32_t> &kvLens) {
  kvLens.clear();
  if (batch <= 0)
    return Error::ok();
  if (!kvOffsets)
    return invalid("{}kv_offsets is NULL", where);
  if (kvOffsets[0] != 0)
    return invalid("{}kv_offsets[0] must be 0, got {}", where, kvOffsets[0]);
  for (int64_t b = 0; b < batch; ++b) {
    if (kvOffsets[b + 1] < kvOffsets[b])
      return invalid("{}kv_offsets decrease at sequence {}: kv_offsets[{}] "
                     "= {} > kv_offsets[{}] = {}",
                     where, b, b, kvOffsets[b], b + 1, kvOffsets[b + 1]);
    kvLens.push_back(kvOffsets[b + 1] - kvOffsets[b]);
  }
  return Error::ok();
}

} // namespace rt
} // namespace kiln
