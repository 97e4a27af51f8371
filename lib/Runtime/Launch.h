//===- Launch.h - Launching a checked launch --------------------*- C++ -*-===//
//
// A checked launch becomes one or more kernel launches: the site's
// warp-specialised kernel where it fits, else its portable kernel with the
// split count of the split model and, when that splits, the combine kernel
// after it (or clusters that reduce the splits themselves). The grid and the
// kernel parameters come from the manifest's rules and argument list; a
// batch larger than one grid holds is folded into launches of consecutive
// sequences.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_RUNTIME_LAUNCH_H
#define KILN_LIB_RUNTIME_LAUNCH_H

#include "CudaDriver.h"
#include "LaunchChecks.h"

#include <cstdint>

namespace kiln {
namespace rt {

/// The launch configuration a check reports: the forced split count, else
/// one split (the choice at launch needs the device).
Error checkedConfig(const Site &s, const CheckedLaunch &launch,
                    kiln_launch_config *config);

/// A checked backward launch's configurations: the query pass's and the
/// key pass's (zeros for an empty launch).
Error gradConfigs(const Manifest &manifest, const Site &s,
                  const CheckedLaunch &launch, kiln_launch_config configs[2]);
/// Launches a checked backward launch's two passes on `stream`.
Error launchGrad(kiln_package &package, const Site &s,
                 const CheckedLaunch &launch, void *stream);

/// Launches a checked launch, as several launches of consecutive sequences
/// where its batch is more than one grid holds (each on the same stream,
/// so they may share the workspace). A batch of 0 launches nothing.
Error launchFolded(kiln_package &package, const Site &s,
                   const CheckedLaunch &launch, void *stream);

/// A launch's cluster attributes: clusters of `size` blocks along grid z,
/// placed by the hardware's load balancing (the default policy spreads a
/// cluster's blocks and fits fewer of them: 62 clusters of 4 of the paged
/// decode kernel on the H200, against 66 balanced, which hold a grid of 256
/// blocks in one wave).
void setClusterAttributes(CUlaunchAttribute attributes[2], int64_t size);

/// cuLaunchKernelEx's configuration of launch configuration `c` on `stream`
/// with `count` `attributes`.
CUlaunchConfig extendedConfig(const kiln_launch_config &c, CUstream stream,
                              CUlaunchAttribute *attributes, unsigned count);

} // namespace rt
} // namespace kiln

#endif // KILN_LIB_RUNTIME_LAUNCH_H
