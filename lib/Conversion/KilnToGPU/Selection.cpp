//===- Selection.cpp - Which tensor-core kernel a site runs ---------------===//
//
// The head dims each tensor-core kernel supports, the schedule (mma.sync or
// wgmma, blocks per SM) of a site, and the schedule of its warp-specialised
// kernel (consumers, tile keys, overlap, turns): the shipped tables of
// measured schedules where they have a row, the rules otherwise.
//
//===----------------------------------------------------------------------===//

#include "AttentionKernel.h"
#include "Products/Wgmma.h"

using namespace mlir;
using namespace mlir::kiln::detail;

bool mlir::kiln::detail::wgmmaKernelSupports(int64_t headDim,
                                             int64_t valueHeadDim) {
  // Head dims of the mma.sync kernel, padded to a multiple of 64 (up to 256,
  // still one wgmma N), where that pads at most a third more than mma.sync's
  // multiple of 16: measured on the H200, 96, 136, 160 and 200 ran 4-30%
  // faster padded on wgmma, 40 (a third) the same, and 80 (three fifths
  // more, to 128) 10% slower; 16 and 32 would double.
  auto fits = [](int64_t dim) {
    return dim % 8 == 0 && dim >= 16 && dim <= 256 &&
           3 * llvm::alignTo(dim, kSwizzleElements) <=
               4 * llvm::alignTo(dim, 16);
  };
  return fits(headDim) && fits(valueHeadDim);
}

namespace {
/// A row of the table of measured sm_90a schedules.
struct ScheduleRow {
  int64_t headDim;
  bool causal;
  bool wgmma;
  int64_t blocksPerSM;
};
constexpr ScheduleRow kScheduleTable[] = {
#define KILN_SCHEDULE(headDim, causal, wgmma, blocksPerSM, ...)                \
  {headDim, causal, wgmma, blocksPerSM},
#include "ScheduleTable.inc"
#undef KILN_SCHEDULE
};
} // namespace

Schedule mlir::kiln::detail::chooseSchedule(const KernelSpec &spec,
                                            bool hopper) {
  // The rules: up to head dim 64 three blocks fit at 168 registers a thread
  // (ptxas would otherwise take a few more, for the decode path, and fit
  // two); larger head dims use up to 255 registers, two blocks whatever is
  // asked. wgmma where it pads the head dims by at most a third.
  Schedule schedule;
  schedule.blocksPerSM = spec.problem.headDim <= 64 ? 3 : 0;
  if (!hopper)
    return schedule;
  schedule.wgmma =
      wgmmaKernelSupports(spec.problem.headDim, spec.problem.valueDim());
  // The table, measured on an H200 (bench/tune_schedules.py): rows for
  // equal head dims, causal or not; masks, windows and paged sites take
  // the row of their causality.
  if (spec.problem.valueDim() != spec.problem.headDim)
    return schedule;
  for (const ScheduleRow &row : kScheduleTable) {
    if (row.headDim != spec.problem.headDim ||
        row.causal != spec.problem.causal)
      continue;
    schedule.wgmma = row.wgmma && wgmmaKernelSupports(spec.problem.headDim,
                                                      spec.problem.valueDim());
    schedule.blocksPerSM = row.blocksPerSM;
    schedule.from = "table";
  }
  return schedule;
}

bool mlir::kiln::detail::mmaKernelSupports(Type elementType, int64_t headDim,
                                           int64_t valueHeadDim) {
  if (!(elementType.isF16() || elementType.isBF16()))
    return false;
  auto fits = [](int64_t dim, int64_t most) {
    return dim % 8 == 0 && dim >= 16 && dim <= most;
  };
  // Multiples of 8 up to 256, for the query/key head dim and the value one
  // alike (multi-head latent attention has them differ).
  return fits(headDim, 256) && fits(valueHeadDim, 256);
}

namespace {
/// A measured schedule: KILN_WARP_SCHEDULE(head dim, causal, consumers, tile
/// keys, overlap, ping-pong, TFLOP/s of the choice, of the rules' schedule).
struct WarpScheduleRow {
  int64_t headDim;
  bool causal;
  int64_t consumers;
  int64_t tileKeys;
  bool overlap;
  bool pingPong;
};
constexpr WarpScheduleRow kWarpScheduleTable[] = {
#define KILN_WARP_SCHEDULE(headDim, causal, consumers, tileKeys, overlap,      \
                           pingPong, ...)                                      \
  {headDim, causal, consumers, tileKeys, overlap, pingPong},
#include "WarpScheduleTable.inc"
#undef KILN_WARP_SCHEDULE
};
} // namespace

WarpSpecializedSchedule
mlir::kiln::detail::chooseWarpSpecializedSchedule(const KernelSpec &spec) {
  // The rules: 128-key tiles while two stages of K and V fit beside Q (64
  // past head dim 128 when V's is Q's; MLA's 192/128 keeps 128, +4-8% from
  // 4k tokens); three consumers of 160 registers at head dim 64 (+11%),
  // two of 240 past it (of Q's or V's) for their accumulators; the overlap past head dim
  // 64 (+6-8% at 128, -3 to -5% at 64); no turns (neutral).
  WarpSpecializedSchedule schedule;
  schedule.consumers =
      std::max(spec.problem.headDim, spec.problem.valueDim()) <= 64 ? 3 : 2;
  schedule.overlap = spec.problem.headDim > 64;
  schedule.pingPong = false;
  // One block an SM walking the items where their costs are alike (no
  // causal mask): +1-17% from 512 to 16k tokens. Causal items differ by
  // up to the whole row of tiles, and a static walk loses the balance the
  // hardware's block scheduler gives a grid (-10 to -32% from 4k): causal
  // kernels with 128-key tiles walk only up to 1k keys (+7-19% at 512 and
  // 1k), and launch a block an item past that.
  schedule.persistent =
      !spec.problem.causal ||
      std::max(spec.problem.headDim, spec.problem.valueDim()) <= 128;
  if (spec.problem.causal)
    schedule.persistentUpToKeys = 1024;
  schedule.tileKeys = 128;
  std::string why;
  if (!warpSpecializedScheduleFits(spec, schedule, why))
    schedule.tileKeys = 64;
  // Rows for the head dim and causality (measured with V's head dim equal
  // to Q's); windows, masks and the rest take the row of their causality.
  for (const WarpScheduleRow &row : kWarpScheduleTable) {
    if (row.headDim != spec.problem.headDim ||
        row.causal != spec.problem.causal || spec.problem.valueHeadDim)
      continue;
    WarpSpecializedSchedule measured;
    measured.consumers = row.consumers;
    measured.tileKeys = row.tileKeys;
    measured.overlap = row.overlap;
    measured.pingPong = row.pingPong;
    measured.persistent = schedule.persistent;
    measured.persistentUpToKeys = schedule.persistentUpToKeys;
    measured.from = "table";
    if (warpSpecializedScheduleFits(spec, measured, why))
      schedule = measured;
  }
  return schedule;
}

WarpSpecializedSchedule
mlir::kiln::detail::warpSpecializedSchedule(const KernelSpec &spec) {
  WarpSpecializedSchedule schedule;
  schedule.tileKeys = spec.variant.warpTileKeys;
  schedule.consumers = spec.variant.warpConsumers;
  schedule.overlap = spec.variant.overlapSoftmax;
  schedule.pingPong =
      schedule.overlap && spec.variant.pingPong && schedule.consumers == 2;
  schedule.persistent = spec.variant.persistent;
  return schedule;
}
