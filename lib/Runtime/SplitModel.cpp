//===- SplitModel.cpp - How many key splits a launch takes ----------------===//

#include "SplitModel.h"

#include "Package.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace kiln {
namespace rt {

namespace {

/// Splits of a block's keys never go below this many key blocks each.
constexpr int64_t kMinBlocksPerSplit = 1;
/// A block's fixed cost (prologue, Q load, epilogue, combine share), in the
/// time of one key block.
constexpr int64_t kBlockOverhead = 2;

/// Resident blocks of a kernel per SM that reach an SM's share of the
/// memory bandwidth, measured on the H200 with forced split counts: one
/// block of the contiguous kernels (a second one on the same SM only
/// shares the bandwidth: 8/1 x 128 x 2k ran 2.81 TB/s at one split, 2.54 at
/// two), two of the paged kernels on grids that leave SMs idle (32/8 x 8 x
/// 1k: 1.38 TB/s at two splits, one block an SM, 1.40 at four; a ragged
/// 8/1 batch of 32 sequences 2.30 with two, 2.01 with one). Grids that fill
/// the SMs are not split at all (chooseSplits).
int64_t saturatingBlocks(const Kernel &kernel) { return kernel.paged ? 2 : 1; }

/// Whether a grid of one block on (nearly) every SM reaches the bandwidth.
/// Not over FP8 caches: their blocks convert each tile through shared
/// memory, and one a SM read 1.6 TB/s of e4m3 on the H200 (32/8 x 16 x
/// 16k, 128 blocks) where two a SM read 2.7 (docs/perf-log/
/// 2026-12-03-ragged.md, "FP8 decode: stages and the profile").
bool fullGridSaturates(const Kernel &kernel) {
  return kernel.cacheDtype != KILN_DTYPE_F8E4M3;
}

/// The split count that minimises a model of a launch's time: `blocks`
/// blocks of `kvBlocks` key blocks each, spread evenly over `smCount` SMs
/// that hold `blocksPerSM` at a time. An SM's time is its blocks' key blocks
/// (plus a fixed overhead each) at the SM's bandwidth, which takes
/// `saturating` blocks at once to reach: with fewer, each block runs at its
/// own rate. The smallest count wins a tie; grid z (batch x splits) stays
/// within CUDA's limit.
/// A batch of uneven lengths (`meanKvBlocks`, the sequences' mean, below
/// `kvBlocks`, the longest) is costed at its mean, plus the longest
/// sequence's excess over the mean, a split's share of it: the part that
/// runs after the rest of the batch is done, which more splits shorten.
/// Fitted to forced split counts on the H200 (docs/perf-log/
/// 2026-12-01-decode-paged-copies.md, "decode: split counts for batches of
/// uneven lengths").
int64_t chooseSplits(int64_t blocks, int64_t smCount, int64_t blocksPerSM,
                     int64_t kvBlocks, int64_t batch, int64_t saturating,
                     int64_t meanKvBlocks, bool fullGridSaturates) {
  if (blocks <= 0 || smCount <= 0 || blocksPerSM <= 0 || kvBlocks <= 0)
    return 1;
  if (meanKvBlocks <= 0 || meanKvBlocks > kvBlocks)
    meanKvBlocks = kvBlocks;
  int64_t excess = kvBlocks - meanKvBlocks;
  // A grid that already puts a block on all but a sixteenth of the SMs runs
  // unsplit: splitting could gain at most the idle SMs' share and pays the
  // combine and each split's prologue. Measured on the H200 with the paged
  // kernel, whose saturating count would split it: 8/1 x 128 x 2k ran
  // 2.70 TB/s at one split and 2.49 at two, 32/8 x 16 x 16k 4.07 and 4.10.
  if (fullGridSaturates && !excess && blocks <= smCount &&
      blocks * 16 >= smCount * 15)
    return 1;
  saturating = std::clamp<int64_t>(saturating, 1, blocksPerSM);
  int64_t most = std::min<int64_t>(
      {kMaxSplits, std::max<int64_t>(1, kvBlocks / kMinBlocksPerSplit),
       std::max<int64_t>(1, 65535 / batch)});
  int64_t best = 1, bestCost = std::numeric_limits<int64_t>::max();
  for (int64_t splits = 1; splits <= most; ++splits) {
    // No count from here on can cost less: an SM's share is at least
    // blocks·splits / smCount blocks, each at least mean / splits + the
    // overhead key blocks, which grows with the count.
    if (splits > 1 &&
        blocks * (meanKvBlocks + kBlockOverhead * splits) >= bestCost * smCount)
      break;
    int64_t perSM = (blocks * splits + smCount - 1) / smCount;
    int64_t waves = (perSM + blocksPerSM - 1) / blocksPerSM;
    int64_t share = std::max(perSM, saturating * waves);
    int64_t cost =
        share * ((meanKvBlocks + splits - 1) / splits + kBlockOverhead) +
        (excess + splits - 1) / splits;
    if (cost < bestCost) {
      best = splits;
      bestCost = cost;
    }
  }
  return best;
}

/// Blocks of a launch with one split: the product of the grid rules (a
/// ragged launch's grid x is its `planItems`).
int64_t gridBlocks(const Kernel &kernel, const kiln_attention_args &args,
                   int64_t planItems = 0) {
  int64_t blocks = 1;
  for (const GridRule &rule : kernel.grid) {
    int64_t value = rule.planItems ? planItems : rule.constant;
    for (Dim dim : rule.dims)
      value *= dimValue(args, dim);
    for (Dim dim : rule.perDims)
      value /= std::max<int64_t>(dimValue(args, dim), 1);
    blocks *= (value + rule.ceilDiv - 1) / rule.ceilDiv;
  }
  return blocks;
}

} // namespace

Error decideSplits(kiln_package &package, const CudaDriver &driver,
                   const Site &s, const CheckedLaunch &launch, CUstream stream,
                   int64_t &splits) {
  const kiln_attention_args &args = launch.args;
  splits = 1;
  if (args.num_splits > 0) {
    splits = args.num_splits;
    return Error::ok();
  }
  const Kernel &kernel = *launch.kernel;
  if (!kernel.combineIndex || !args.workspace)
    return Error::ok();
  CUfunction function = nullptr;
  Residency residency;
  if (Error error = package.modules.getFunction(driver, s.kernelIndex, stream,
                                                function, &residency))
    return error;
  int64_t kvBlocks =
      (launch.maxKvLen + kernel.kvBlockSize - 1) / kernel.kvBlockSize;
  int64_t meanKvBlocks = 0;
  // A ragged launch: its sequences, and blocks from its plan (whose empty
  // items exit at once: a fixed-capacity plan is costed at its capacity,
  // which only lowers the split count).
  int64_t sequences = args.batch, planItems = 0;
  if (launch.paged && kernel.ragged) {
    sequences = launch.paged->sequences;
    planItems = launch.paged->planItems;
  }
  if (launch.totalKvLen > 0 && sequences > 0) {
    int64_t meanKvLen = (launch.totalKvLen + sequences - 1) / sequences;
    meanKvBlocks = (meanKvLen + kernel.kvBlockSize - 1) / kernel.kvBlockSize;
  }
  splits = chooseSplits(gridBlocks(kernel, args, planItems), residency.smCount,
                        residency.blocksPerSM, kvBlocks, args.batch,
                        saturatingBlocks(kernel), meanKvBlocks,
                        fullGridSaturates(kernel));
  while (splits > 1 && splitWorkspaceBytes(args, launch.valueHeadDim, splits) >
                           args.workspace_bytes)
    --splits;
  return Error::ok();
}

Error splitsOfLaunch(kiln_package &package, const Site &s,
                     const CheckedLaunch &launch, int64_t &splits) {
  if (launch.empty) {
    splits = 1;
    return Error::ok();
  }
  const CudaDriver *driver = nullptr;
  if (Error error = getCudaDriver(driver))
    return error;
  // A launch the warp-specialised kernel takes does not split.
  if (s.warpSpecializedIndex && launch.args.num_splits <= 1 &&
      warpSpecializedFits(package.manifest.kernels[*s.warpSpecializedIndex],
                          launch.args, *driver)) {
    CUfunction function = nullptr;
    if (Error error = package.modules.getFunction(
            *driver, *s.warpSpecializedIndex, nullptr, function))
      return error;
    if (function) {
      splits = 1;
      return Error::ok();
    }
  }
  return decideSplits(package, *driver, s, launch, nullptr, splits);
}

Error workspaceBytes(kiln_package &package, const Site &s, int64_t batch,
                     int64_t qHeads, int64_t kvHeads, int64_t qLen,
                     int64_t maxKvLen, int64_t &bytes) {
  const Kernel &kernel = package.manifest.kernels[s.kernelIndex];
  bytes = 0;
  if (!kernel.combineIndex)
    return Error::ok();
  const CudaDriver *driver = nullptr;
  if (Error error = getCudaDriver(driver))
    return error;
  CUfunction function = nullptr;
  Residency residency;
  if (Error error = package.modules.getFunction(*driver, s.kernelIndex, nullptr,
                                                function, &residency))
    return error;
  int64_t valueHeadDim = kernel.valueHeadDim ? *kernel.valueHeadDim
                         : s.valueHeadDim    ? *s.valueHeadDim
                         : kernel.headDim    ? *kernel.headDim
                                             : 0;
  int64_t kvBlocks = (maxKvLen + kernel.kvBlockSize - 1) / kernel.kvBlockSize;
  // The largest workspace any launch within the bounds chooses: fewer
  // sequences or queries can mean more splits. Of the query counts with
  // the same grid, the largest has the most rows.
  kiln_attention_args args{};
  args.q_heads = qHeads;
  args.kv_heads = kvHeads;
  args.kv_len = maxKvLen;
  args.head_dim = kernel.headDim ? *kernel.headDim : 1;
  // The mean lengths (in key blocks) a launch may have: the longest, and
  // for paged and packed launches, which give their batch's total length,
  // uneven batches at means halving from it.
  std::vector<int64_t> means = {kvBlocks};
  if (kernel.paged || kernel.ragged)
    for (int64_t mean = kvBlocks / 2; mean >= 1; mean /= 2)
      means.push_back(mean);
  int64_t largest = 0;
  if (kernel.ragged) {
    // The packed rows stand as one sequence (batch 1, q_len total_q); a
    // launch of `queries` rows has at least the plan items its rows fill,
    // and fewer items mean more splits: for each item count, the most rows
    // it holds.
    args.batch = 1;
    int64_t group = std::max<int64_t>(qHeads / std::max<int64_t>(kvHeads, 1),
                                      1);
    int64_t rows = kernel.rowsPerBlock;
    for (int64_t items = (qLen * group + rows - 1) / rows; items >= 1;
         --items) {
      args.q_len = std::min<int64_t>(qLen, std::max<int64_t>(
                                               items * rows / group, 1));
      int64_t blocks = gridBlocks(kernel, args, items);
      for (int64_t mean : means) {
        int64_t splits =
            chooseSplits(blocks, residency.smCount, residency.blocksPerSM,
                         kvBlocks, 1, saturatingBlocks(kernel), mean,
                         fullGridSaturates(kernel));
        largest =
            std::max(largest, splitWorkspaceBytes(args, valueHeadDim, splits));
      }
    }
    bytes = largest;
    return Error::ok();
  }
  for (int64_t queries = qLen; queries >= 1; --queries) {
    args.batch = 1;
    args.q_len = queries + 1;
    int64_t nextGrid = queries < qLen ? gridBlocks(kernel, args) : -1;
    args.q_len = queries;
    if (gridBlocks(kernel, args) == nextGrid)
      continue;
    for (int64_t sequences = 1; sequences <= batch; ++sequences) {
      args.batch = sequences;
      int64_t blocks = gridBlocks(kernel, args);
      for (int64_t mean : means) {
        int64_t splits =
            chooseSplits(blocks, residency.smCount, residency.blocksPerSM,
                         kvBlocks, sequences, saturatingBlocks(kernel), mean,
                         fullGridSaturates(kernel));
        largest =
            std::max(largest, splitWorkspaceBytes(args, valueHeadDim, splits));
      }
    }
  }
  bytes = largest;
  return Error::ok();
}

} // namespace rt
} // namespace kiln
