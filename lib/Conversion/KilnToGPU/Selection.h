//===- Selection.h - The kernel a site runs, and why ------------*- C++ -*-===//
//
// selectKernel: every decision about a site's kernel in one place (the
// family, the schedule, the register cap, the launch protocol, the
// companions and the warp-specialised kernel), with the reasons for each.
// convert-kiln-to-gpu builds what it returns; the report and the manifest
// show its reasons.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_CONVERSION_KILNTOGPU_SELECTION_H
#define KILN_LIB_CONVERSION_KILNTOGPU_SELECTION_H

#include "AttentionKernel.h"

#include "kiln/Conversion/Passes.h"

namespace mlir::kiln::detail {

/// The target a module's kernels are built for, as far as the choice of a
/// kernel depends on it.
struct KernelTarget {
  /// sm_90a's own kernels (the pass's `hopper`): wgmma variants, the
  /// warp-specialised kernels and sm_90's launch protocol; otherwise the
  /// portable kernels every target runs.
  bool hopper = false;
};

/// The builder a site's kernel comes from.
enum class KernelFamily { Mma, Tf32, Scalar, Backward };

/// Everything selectKernel decided about a site's kernel.
struct KernelChoice {
  /// The kernel: the problem, the variant (wgmma, the register cap) and the
  /// launch protocol (griddepcontrol, cluster splits).
  KernelSpec spec;
  KernelFamily family = KernelFamily::Scalar;
  /// The tensor-core kernel's schedule, for the manifest.
  std::optional<Schedule> schedule;
  /// The scalar kernel's keys a tile and rows a warp (the options').
  int64_t scalarKvBlockSize = 0;
  int64_t scalarRowsPerWarp = 0;
  /// The builder's tile: query rows a block, keys a tile.
  int64_t rowsPerBlock = 0;
  int64_t kvBlockSize = 0;
  /// The companions: the combine kernel reducing the splits (split-KV
  /// kernels) and the append kernel of the caches (paged sites).
  std::optional<std::string> combineKernel;
  std::optional<std::string> appendKernel;
  /// sm_90a: the warp-specialised kernel the runtime launches instead
  /// where the views allow, and its schedule.
  std::optional<KernelSpec> warpSpecialized;
  WarpSpecializedSchedule warpSchedule;
  /// kiln.attention_grad sites: `spec` is the query pass, this the key
  /// pass launched after it.
  std::optional<KernelSpec> gradKeyValue;
  /// Why: the kernel's reasons, then those about the warp-specialised
  /// kernel (built or not), one a line.
  SmallVector<std::string> why;
  SmallVector<std::string> warpSpecializedWhy;

  /// The builder of the chosen kernel, and of the warp-specialised one;
  /// they refer to this choice's specs.
  std::unique_ptr<AttentionKernelBuilder> createKernel() const;
  std::unique_ptr<AttentionKernelBuilder> createWarpSpecializedKernel() const;
  /// The key pass's builder (gradKeyValue).
  std::unique_ptr<AttentionKernelBuilder> createGradKeyValueKernel() const;
};

/// Chooses the kernel of `site` (kiln.attention, kiln.paged_attention or
/// kiln.attention_grad, whose choice holds both passes)
/// under `options` for `target`. Fails, with a diagnostic on the site, where
/// no kernel can run it as asked.
FailureOr<KernelChoice> selectKernel(Operation *site,
                                     const ConvertKilnToGPUOptions &options,
                                     KernelTarget target);

} // namespace mlir::kiln::detail

#endif // KILN_LIB_CONVERSION_KILNTOGPU_SELECTION_H
