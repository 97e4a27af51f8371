//===- Package.h - Kiln package emission ------------------------*- C++ -*-===//
//
// A package is a directory: one PTX file per GPU target and manifest.json,
// which describes every kernel (entry name, argument ABI, launch rule, shared
// memory) and every attention site (its attributes and kernel). The format
// is specified in docs/package.md.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TARGET_PACKAGE_PACKAGE_H
#define KILN_TARGET_PACKAGE_PACKAGE_H

#include "kiln-c/Runtime.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/JSON.h"

#include <string>
#include <vector>

namespace mlir::kiln {

class AttentionOp;

/// A static size as JSON, or null for a dynamic one.
llvm::json::Value sizeToJSON(int64_t size);
/// The op's window and softcap as JSON numbers, or null when absent.
llvm::json::Value windowToJSON(AttentionOp op);
llvm::json::Value softcapToJSON(AttentionOp op);
/// The op's window_right, or null.
llvm::json::Value windowRightToJSON(AttentionOp op);
/// The op's masked_score, or null.
llvm::json::Value maskedScoreToJSON(AttentionOp op);
/// What a site computes, as the fusion report and the manifest both give it:
/// layout, dtype, scale, causal, window, softcap, the sizes (null when
/// dynamic), the mask kind and whether a bias remains.
llvm::json::Object siteAttributesToJSON(AttentionOp op);

/// Version of the manifest format this writer produces: the one the
/// runtime reads, defined once in its C header.
inline constexpr int64_t kManifestFormatVersion = KILN_MANIFEST_FORMAT_VERSION;

/// PTX assembly of one target.
struct TargetPTX {
  std::string chip;
  std::string assembly;
  /// Its combine kernels wait for their split kernel (griddepcontrol), so
  /// the runtime may launch them early: the manifest's "grid_dependency".
  bool gridDependency = false;
  /// Its attention kernels wait for the grids before them (griddepcontrol)
  /// before their first global memory access, so the runtime may launch
  /// them early: the manifest's "attention_grid_dependency".
  bool attentionGridDependency = false;
  /// Its split kernels reduce their splits themselves when launched with a
  /// thread-block cluster of this many blocks or fewer along grid z (0:
  /// never): the manifest's "cluster_splits".
  int clusterSplits = 0;
};

/// Describes the kernels and sites of `module`, which must have been through
/// convert-kiln-to-gpu (and not yet through serialization: the kernel facts
/// live on the gpu.func ops). Emits a diagnostic and fails on missing facts.
FailureOr<llvm::json::Object> describeKernelsAndSites(ModuleOp module);

/// The schedule of each tensor-core kernel of `module` (after
/// convert-kiln-to-gpu, before serialization), by kernel name: {variant,
/// blocks_per_sm, from}.
llvm::StringMap<llvm::json::Value> describeSchedules(ModuleOp module);

/// Gives each kernel of `description` that has a schedule a "schedule"
/// object with one entry per target chip: `sm_90a`'s from `hopper` when
/// given (the module its PTX came from), every other chip's from `portable`.
/// Adds to `description` (the portable module's) the kernels of
/// `targetDescription` (the sm_90a module's) that only some targets have,
/// and each site's "warp_specialized_kernel" from it.
void addTargetOnlyKernels(llvm::json::Object &description,
                          llvm::json::Object targetDescription);

void addSchedules(llvm::json::Object &description,
                  llvm::ArrayRef<std::string> chips,
                  const llvm::StringMap<llvm::json::Value> &portable,
                  const llvm::StringMap<llvm::json::Value> *hopper);

/// The reasons the kernel selection gave for each kernel of `module` that
/// every target has, by kernel name (an array of strings each).
llvm::StringMap<llvm::json::Value> describeReasons(ModuleOp module);

/// Gives each kernel of `description` that has reasons a "why" object with
/// one entry per target chip, taken as addSchedules takes the schedules.
void addReasons(llvm::json::Object &description,
                llvm::ArrayRef<std::string> chips,
                const llvm::StringMap<llvm::json::Value> &portable,
                const llvm::StringMap<llvm::json::Value> *hopper);

/// Reads the PTX of every target from the serialized `gpu.binary` of the
/// kernels in `module`.
FailureOr<std::vector<TargetPTX>> extractPTX(ModuleOp module);

/// Writes `dir`/manifest.json and one `kernels.<chip>.ptx` per target.
/// `description` comes from describeKernelsAndSites; the target list and the
/// producer fields are added here.
LogicalResult writePackage(Location loc, llvm::StringRef dir,
                           llvm::json::Object description,
                           const std::vector<TargetPTX> &ptx,
                           llvm::StringRef source);

} // namespace mlir::kiln

#endif // KILN_TARGET_PACKAGE_PACKAGE_H
