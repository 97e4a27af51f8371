//===- Selection.cpp - Which tensor-core kernel a site runs ---------------===//
//
// The head dims each tensor-core kernel supports, and the schedule (mma.sync
// or wgmma, blocks per SM) of a site: the shipped table of measured
// schedules where it has a row, the rules otherwise.
//
//===----------------------------------------------------------------------===//

#include "AttentionKernel.h"
#include "Wgmma.h"

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
    // (Head dim 0 matches nothing: the table may have no rows.)
    {0, false, false, 0},
};
} // namespace

Schedule mlir::kiln::detail::chooseSchedule(const KernelSpec &spec,
                                            bool hopper) {
  // The rules: up to head dim 64 three blocks fit at 168 registers a thread
  // (ptxas would otherwise take a few more, for the decode path, and fit
  // two); larger head dims use up to 255 registers, two blocks whatever is
  // asked. wgmma where it pads the head dims by at most a third.
  Schedule schedule;
  schedule.blocksPerSM = spec.headDim <= 64 ? 3 : 0;
  if (!hopper)
    return schedule;
  schedule.wgmma = wgmmaKernelSupports(spec.headDim, spec.valueDim());
  // The table, measured on an H200 (bench/tune_schedules.py): rows for
  // equal head dims, causal or not; masks, windows and paged sites take
  // the row of their causality.
  if (spec.valueDim() != spec.headDim)
    return schedule;
  for (const ScheduleRow &row : kScheduleTable) {
    if (row.headDim != spec.headDim || row.causal != spec.causal)
      continue;
    schedule.wgmma =
        row.wgmma && wgmmaKernelSupports(spec.headDim, spec.valueDim());
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
