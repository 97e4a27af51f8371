//===- Selection.h - The kernel convert-kiln-to-gpu chooses -----*- C++ -*-===//
//
// What the kernel generator chooses for a site and for a target, for those
// that show it or depend on it: the fusion report states each site's kernel
// and why, and the package writer the launch protocol of each target's
// kernels.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CONVERSION_KILNTOGPU_SELECTION_H
#define KILN_CONVERSION_KILNTOGPU_SELECTION_H

#include "kiln/Conversion/Passes.h"

#include "llvm/ADT/SmallVector.h"

#include <optional>
#include <string>

namespace mlir::kiln {

/// What the kernels built for a target expect of their launches: the flags
/// of the manifest's target.
struct TargetLaunchFacts {
  /// Split kernels signal their combine kernels, which wait for them, so
  /// the runtime may launch those early (LaunchProtocol::launchDependents).
  bool gridDependency = false;
  /// Attention kernels wait for the grids before them
  /// (LaunchProtocol::waitForGrid).
  bool attentionGridDependency = false;
  /// Split kernels reduce up to this many splits in a thread-block cluster
  /// (LaunchProtocol::clusterSplits); 0: never.
  int clusterSplits = 0;
};
/// Those of the kernels convert-kiln-to-gpu builds with `hopper` (sm_90a's
/// own kernels) or without.
TargetLaunchFacts targetLaunchFacts(bool hopper);

/// The kernel convert-kiln-to-gpu chooses for a site, and why.
struct KernelChoiceFacts {
  /// The kernel's symbol.
  std::string kernel;
  /// "mma.sync", "wgmma", "3xtf32", "tf32" or "scalar".
  std::string variant;
  /// The register cap (ptxas's .minnctapersm; 0: none) and where the
  /// schedule came from ("table", "rule" or "option"; tensor-core kernels).
  int64_t blocksPerSM = 0;
  std::string from;
  /// Query rows a block, keys a tile.
  int64_t rowsPerBlock = 0;
  int64_t kvBlockSize = 0;
  /// The launch protocol: keys split over blocks, the splits' combine
  /// launched early (griddepcontrol), the splits reduced in a cluster, the
  /// kernel waiting for the grids before it.
  bool splitKV = false;
  bool launchDependents = false;
  bool clusterSplits = false;
  bool waitForGrid = false;
  /// The companions and the warp-specialised kernel, where there are.
  std::optional<std::string> combineKernel;
  std::optional<std::string> appendKernel;
  std::optional<std::string> warpSpecializedKernel;
  /// The reasons, one a line.
  llvm::SmallVector<std::string> why;
};
/// The choice for `site` (kiln.attention or kiln.paged_attention) under
/// `options` (`options.hopper`: for sm_90a's own kernels); failure, after a
/// diagnostic on the site, where no kernel can run it as asked.
FailureOr<KernelChoiceFacts>
describeKernelChoice(Operation *site, const ConvertKilnToGPUOptions &options);

} // namespace mlir::kiln

#endif // KILN_CONVERSION_KILNTOGPU_SELECTION_H
