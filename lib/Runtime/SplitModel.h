//===- SplitModel.h - How many key splits a launch takes --------*- C++ -*-===//
//
// Split-KV: a launch whose grid leaves SMs idle (decode, small batches) runs
// each block's keys as several splits, reduced afterwards, in the caller's
// workspace. The split count is forced by the caller or chosen at launch by
// a model of the launch's time on the current device; the workspace a site
// needs is the largest any launch within given bounds chooses.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_RUNTIME_SPLITMODEL_H
#define KILN_LIB_RUNTIME_SPLITMODEL_H

#include "CudaDriver.h"
#include "LaunchChecks.h"

#include <cstdint>

namespace kiln {
namespace rt {

/// The split count of a checked launch: the forced one, or the modelled best
/// on the current device, bounded by the workspace (1 without one, or for a
/// kernel that does not split).
Error decideSplits(kiln_package &package, const CudaDriver &driver,
                   const Site &s, const CheckedLaunch &launch, CUstream stream,
                   int64_t &splits);

/// The split count a checked launch uses on the current device.
Error splitsOfLaunch(kiln_package &package, const Site &s,
                     const CheckedLaunch &launch, int64_t &splits);

/// The largest workspace a launch of site `s` within the bounds chooses on
/// the current device (0 for a kernel that does not split keys). The bounds
/// are checked already (checkWorkspaceBounds).
Error workspaceBytes(kiln_package &package, const Site &s, int64_t batch,
                     int64_t qHeads, int64_t kvHeads, int64_t qLen,
                     int64_t maxKvLen, int64_t &bytes);

} // namespace rt
} // namespace kiln

#endif // KILN_LIB_RUNTIME_SPLITMODEL_H
