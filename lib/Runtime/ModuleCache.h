//===- ModuleCache.h - A package's PTX modules per CUDA context -*- C++ -*-===//
//
// A package's PTX is loaded in each CUDA context it is launched in (the
// target chosen for that context's device), each kernel from a module of its
// own (PtxParts.h) JIT-compiled when the kernel is first needed, and each
// context's modules cache what launches ask of them: functions, occupancy,
// and the clusters of split kernels the device holds at once.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_RUNTIME_MODULECACHE_H
#define KILN_LIB_RUNTIME_MODULECACHE_H

#include "CudaDriver.h"
#include "Manifest.h"
#include "PtxParts.h"

#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace kiln {
namespace rt {

/// Most blocks of a cluster the runtime launches a split kernel in. Measured
/// on the H200 (paged decode, forced split counts, clusters against the
/// combine kernel): clusters of 2 to 4 gain 1.5-5%; clusters of 8 and 16
/// lose up to 12% (8/1 x 16 x 16k at 8 splits, 32/8 x 1 x 32k at 16), with
/// the balanced or the spread placement: a cluster must fit in one GPC, and
/// the GPCs' SM counts do not divide into such clusters evenly, so some SMs
/// take a second block while others idle.
constexpr int64_t kMaxClusterBlocks = 4;

/// A package's target loaded in one CUDA context: its modules compiled and
/// functions looked up so far.
struct LoadedModule {
  unsigned long long contextId = 0;
  CUcontext context = nullptr;
  /// The target loaded (an index of Manifest::targets), and its chip
  /// ("sm_90a").
  size_t targetIndex = 0;
  std::string chip;
  /// The device's compute capability.
  int major = 0, minor = 0;
  /// Per module of the target's PTX (ModuleCache::partsOf), the module
  /// JIT-compiled in this context; null until a kernel in it is needed.
  std::vector<CUmodule> parts;
  /// That target's combine kernels wait for their split kernel (see
  /// Target::gridDependency).
  bool gridDependency = false;
  /// That target's attention kernels wait for the grids before them (see
  /// Target::attentionGridDependency).
  bool attentionGridDependency = false;
  /// That target's split kernels reduce their splits in clusters of up to
  /// this many blocks (see Target::clusterSplits).
  int64_t clusterSplits = 0;
  std::vector<CUfunction> functions; // per kernel index; null until needed
  /// Per kernel and cluster size (up to kMaxClusterBlocks), the clusters of
  /// its blocks the device holds at once (-1 until asked; empty until a
  /// launch of the kernel first asks).
  std::vector<std::vector<int>> activeClusters;
  /// The device's SM count, and per kernel the blocks an SM holds at once
  /// (0 until asked).
  int smCount = 0;
  std::vector<int> blocksPerSM;
};

/// Where a kernel's blocks live on the current device.
struct Residency {
  int64_t smCount = 0;
  int64_t blocksPerSM = 0;
};

/// The modules of one package, loaded on first need in each CUDA context.
/// Safe to use from several threads: one mutex guards the modules and every
/// cache inside them.
class ModuleCache {
public:
  /// A cache of `manifest`'s PTX; `manifest` must outlive it.
  explicit ModuleCache(const Manifest &manifest) : manifest(manifest) {}
  ModuleCache(const ModuleCache &) = delete;
  ModuleCache &operator=(const ModuleCache &) = delete;

  /// The function of `kernelIndex` in the current context (or, when none is
  /// current, `stream`'s), compiling its module the first time; null when
  /// the loaded target's PTX does not have the kernel. With `residency`, also
  /// where the kernel's blocks live on the device; with `module`, the
  /// loaded module.
  Error getFunction(const CudaDriver &driver, size_t kernelIndex,
                    CUstream stream, CUfunction &function,
                    Residency *residency = nullptr,
                    LoadedModule **module = nullptr);

  /// The cluster a split launch of `splits` splits, configured as
  /// `launchConfig`, goes in: `splits` where the loaded PTX's split kernels
  /// reduce their splits in clusters of that many (Target::clusterSplits),
  /// and the launch's clusters all fit on the device at once; else 0 (the
  /// combine kernel reduces the splits). A grid of clusters that does not
  /// fit runs in two waves, which costs far more than the combine kernel
  /// saves (docs/perf-log/2026-12-01-decode-clusters.md, "decode: splits
  /// that reduce themselves in a cluster").
  Error clusterOfSplits(const CudaDriver &driver, size_t kernelIndex,
                        const kiln_launch_config &launchConfig, CUstream stream,
                        int64_t splits, int64_t &cluster);

  /// Compiles the kernels of the target the current context loads (those of
  /// `only` where given, else every one) before anything launches.
  Error prepare(const CudaDriver &driver,
                const std::vector<size_t> *only = nullptr);

  /// The chip of the target the current context loads ("sm_90a").
  Error loadedChip(const CudaDriver &driver, std::string &chip);

  /// Unloads every module loaded so far (each fails harmlessly where its
  /// context is gone). Only for a package being closed: nothing may use the
  /// cache concurrently.
  void unloadAll();

private:
  /// Chooses the target the current context's device loads and checks its
  /// kernels' shared memory; compiles nothing. Called with `mutex` held.
  Error load(const CudaDriver &driver, CUcontext context,
             unsigned long long contextId, LoadedModule *&loaded);

  /// The context's loaded target (loaded first where it is not). Called with
  /// `mutex` held.
  Error loadedIn(const CudaDriver &driver, CUstream stream,
                 LoadedModule *&loaded);

  /// Target `targetIndex`'s PTX cut into modules, and the module of each
  /// kernel of the manifest (made on first need). Called with `mutex` held.
  struct TargetParts {
    PtxParts parts;
    /// Per manifest kernel, its module's index in parts.texts (meaningless
    /// for a kernel the target lacks).
    std::vector<size_t> partOfKernel;
  };
  const TargetParts &partsOf(size_t targetIndex);

  /// Compiles module `part` of `loaded`'s target in the current context
  /// unless it is already; takes `lock` (held on entry and on return) off
  /// while the driver compiles, so that other kernels compile meanwhile.
  Error compilePart(const CudaDriver &driver, LoadedModule &loaded,
                    size_t part, std::unique_lock<std::mutex> &lock);

  const Manifest &manifest;
  /// Guards `modules` and every cache inside them (functions, occupancy,
  /// clusters).
  std::mutex mutex;
  /// A deque: a module's address stays valid while other threads load the
  /// package into other contexts.
  std::deque<LoadedModule> modules;
  /// Per target, its PTX cut into modules (made on first need).
  std::vector<std::optional<TargetParts>> targetParts;
};

} // namespace rt
} // namespace kiln

#endif // KILN_LIB_RUNTIME_MODULECACHE_H
