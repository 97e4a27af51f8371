//===- ModuleCache.cpp - A package's PTX modules per CUDA context ---------===//

#include "ModuleCache.h"

#include "Launch.h"

#include <fmt/format.h>

#include <algorithm>

namespace kiln {
namespace rt {

Error ModuleCache::load(const CudaDriver &driver, CUcontext context,
                        unsigned long long contextId, LoadedModule *&loaded) {
  CUdevice device;
  CUresult result = driver.cuCtxGetDevice(&device);
  if (result != CUDA_SUCCESS)
    return {KILN_CUDA_ERROR,
            describeCudaError(driver, "cuCtxGetDevice", result)};
  int major = 0, minor = 0;
  result = driver.cuDeviceGetAttribute(
      &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
  if (result == CUDA_SUCCESS)
    result = driver.cuDeviceGetAttribute(
        &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
  if (result != CUDA_SUCCESS)
    return {KILN_CUDA_ERROR,
            describeCudaError(driver, "cuDeviceGetAttribute", result)};
  int targetIndex = selectTarget(manifest, major, minor);
  if (targetIndex < 0) {
    std::vector<std::string> chips;
    for (const Target &target : manifest.targets)
      chips.push_back(target.chip);
    return {KILN_UNSUPPORTED,
            fmt::format("package {} has no PTX for a device of compute "
                        "capability {}.{} (targets: {})",
                        manifest.directory, major, minor,
                        fmt::join(chips, ", "))};
  }
  const Target &target = manifest.targets[targetIndex];

  // Check the shared memory of every kernel before anything launches.
  int sharedOptIn = 0;
  driver.cuDeviceGetAttribute(
      &sharedOptIn, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
      device);
  for (const Kernel &kernel : manifest.kernels) {
    if (!kernel.inTarget(target.chip))
      continue;
    int64_t shared = kernel.staticSharedBytes + kernel.dynamicSharedBytes;
    if (sharedOptIn > 0 && shared > sharedOptIn)
      return {KILN_UNSUPPORTED,
              fmt::format("kernel \"{}\" needs {} bytes of shared memory; the "
                          "device allows {}",
                          kernel.name, shared, sharedOptIn)};
  }
  modules.push_back({});
  loaded = &modules.back();
  loaded->contextId = contextId;
  loaded->context = context;
  loaded->targetIndex = static_cast<size_t>(targetIndex);
  loaded->chip = target.chip;
  loaded->major = major;
  loaded->minor = minor;
  loaded->parts.assign(partsOf(loaded->targetIndex).parts.texts.size(),
                       nullptr);
  loaded->gridDependency = target.gridDependency;
  loaded->attentionGridDependency = target.attentionGridDependency;
  loaded->clusterSplits = target.clusterSplits;
  loaded->functions.assign(manifest.kernels.size(), nullptr);
  loaded->activeClusters.assign(manifest.kernels.size(), {});
  return Error::ok();
}

const ModuleCache::TargetParts &ModuleCache::partsOf(size_t targetIndex) {
  if (targetParts.size() < manifest.targets.size())
    targetParts.resize(manifest.targets.size());
  std::optional<TargetParts> &cut = targetParts[targetIndex];
  if (!cut) {
    const Target &target = manifest.targets[targetIndex];
    std::vector<std::string> names;
    for (const Kernel &kernel : manifest.kernels)
      if (kernel.inTarget(target.chip))
        names.push_back(kernel.name);
    cut.emplace();
    cut->parts = splitPtxByKernel(target.ptx, names);
    cut->partOfKernel.assign(manifest.kernels.size(), 0);
    size_t position = 0;
    for (size_t i = 0; i < manifest.kernels.size(); ++i)
      if (manifest.kernels[i].inTarget(target.chip))
        cut->partOfKernel[i] = cut->parts.partOfKernel[position++];
  }
  return *cut;
}

Error ModuleCache::compilePart(const CudaDriver &driver, LoadedModule &loaded,
                               size_t part,
                               std::unique_lock<std::mutex> &lock) {
  if (loaded.parts[part])
    return Error::ok();
  const Target &target = manifest.targets[loaded.targetIndex];
  const std::string &ptx = partsOf(loaded.targetIndex).parts.texts[part];
  lock.unlock();
  std::vector<char> errorLog(16384, '\0');
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER,
                            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *optionValues[] = {
      errorLog.data(),
      reinterpret_cast<void *>(static_cast<uintptr_t>(errorLog.size() - 1))};
  CUmodule module = nullptr;
  CUresult result = driver.cuModuleLoadDataEx(&module, ptx.c_str(), 2, options,
                                              optionValues);
  lock.lock();
  if (result != CUDA_SUCCESS) {
    std::string log(errorLog.data());
    return {KILN_CUDA_ERROR,
            fmt::format("{} loading {} ({}) on a compute capability {}.{} "
                        "device{}{}",
                        describeCudaError(driver, "cuModuleLoadDataEx", result),
                        target.ptxFile, target.chip, loaded.major, loaded.minor,
                        log.empty() ? "" : "; JIT log:\n", log)};
  }
  if (loaded.parts[part]) // another thread compiled it meanwhile
    driver.cuModuleUnload(module);
  else
    loaded.parts[part] = module;
  return Error::ok();
}

Error ModuleCache::loadedIn(const CudaDriver &driver, CUstream stream,
                            LoadedModule *&loaded) {
  CUcontext context = nullptr;
  if (Error error = currentContext(driver, stream, context))
    return error;
  unsigned long long contextId = contextIdOf(driver, context);
  loaded = nullptr;
  for (LoadedModule &candidate : modules)
    if (candidate.contextId == contextId && candidate.context == context)
      loaded = &candidate;
  if (!loaded)
    return load(driver, context, contextId, loaded);
  return Error::ok();
}

Error ModuleCache::getFunction(const CudaDriver &driver, size_t kernelIndex,
                               CUstream stream, CUfunction &function,
                               Residency *residency, LoadedModule **module) {
  std::unique_lock<std::mutex> lock(mutex);
  LoadedModule *loaded = nullptr;
  if (Error error = loadedIn(driver, stream, loaded))
    return error;
  if (kernelIndex >= loaded->functions.size())
    return Error::ok();
  if (!manifest.kernels[kernelIndex].inTarget(loaded->chip)) {
    function = nullptr;
    return Error::ok();
  }
  CUresult result;
  CUfunction &cached = loaded->functions[kernelIndex];
  if (!cached) {
    const Kernel &kernel = manifest.kernels[kernelIndex];
    size_t part = partsOf(loaded->targetIndex).partOfKernel[kernelIndex];
    if (Error error = compilePart(driver, *loaded, part, lock))
      return error;
    CUfunction found = nullptr;
    result = driver.cuModuleGetFunction(&found, loaded->parts[part],
                                        kernel.name.c_str());
    if (result != CUDA_SUCCESS)
      return {
          KILN_CUDA_ERROR,
          fmt::format("{} for kernel \"{}\"",
                      describeCudaError(driver, "cuModuleGetFunction", result),
                      kernel.name)};
    if (kernel.dynamicSharedBytes > 48 * 1024) {
      result = driver.cuFuncSetAttribute(
          found, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
          static_cast<int>(kernel.dynamicSharedBytes));
      if (result != CUDA_SUCCESS)
        return {KILN_CUDA_ERROR,
                fmt::format(
                    "{} setting {} bytes of dynamic shared memory for kernel "
                    "\"{}\"",
                    describeCudaError(driver, "cuFuncSetAttribute", result),
                    kernel.dynamicSharedBytes, kernel.name)};
    }
    cached = found;
  }
  function = cached;
  if (module)
    *module = loaded;
  if (residency) {
    // The SM count, and resident blocks of this kernel per SM.
    if (!loaded->smCount) {
      CUdevice device;
      int count = 0;
      if ((result = driver.cuCtxGetDevice(&device)) != CUDA_SUCCESS ||
          (result = driver.cuDeviceGetAttribute(
               &count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device)) !=
              CUDA_SUCCESS)
        return {KILN_CUDA_ERROR,
                fmt::format(
                    "{} reading the SM count",
                    describeCudaError(driver, "cuDeviceGetAttribute", result))};
      loaded->smCount = count;
      loaded->blocksPerSM.assign(manifest.kernels.size(), 0);
    }
    int &blocks = loaded->blocksPerSM[kernelIndex];
    if (!blocks) {
      const Kernel &kernel = manifest.kernels[kernelIndex];
      result = driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(
          &blocks, cached, kernel.block[0] * kernel.block[1] * kernel.block[2],
          static_cast<size_t>(kernel.dynamicSharedBytes));
      if (result != CUDA_SUCCESS)
        return {KILN_CUDA_ERROR,
                fmt::format("{} for kernel \"{}\"",
                            describeCudaError(
                                driver,
                                "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                                result),
                            kernel.name)};
      blocks = std::max(blocks, 1);
    }
    residency->smCount = loaded->smCount;
    residency->blocksPerSM = blocks;
  }
  return Error::ok();
}

Error ModuleCache::clusterOfSplits(const CudaDriver &driver, size_t kernelIndex,
                                   const kiln_launch_config &launchConfig,
                                   CUstream stream, int64_t splits,
                                   int64_t &cluster) {
  cluster = 0;
  if (splits < 2 || !driver.cuLaunchKernelEx ||
      !driver.cuOccupancyMaxActiveClusters)
    return Error::ok();
  CUfunction function = nullptr;
  LoadedModule *loaded = nullptr;
  if (Error error =
          getFunction(driver, kernelIndex, stream, function, nullptr, &loaded))
    return error;
  if (!function || splits > std::min(loaded->clusterSplits, kMaxClusterBlocks))
    return Error::ok();
  // The module's caches are shared by every thread that launches it.
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<int> &active = loaded->activeClusters[kernelIndex];
  if (active.empty())
    active.assign(kMaxClusterBlocks + 1, -1);
  int &clusters = active[splits];
  if (clusters < 0) {
    CUlaunchAttribute attributes[2];
    setClusterAttributes(attributes, splits);
    // Asked for a grid of one cluster along z: how many fit at once does
    // not depend on the grid's size.
    kiln_launch_config oneCluster = launchConfig;
    oneCluster.grid[2] = static_cast<uint32_t>(splits);
    CUlaunchConfig config = extendedConfig(oneCluster, stream, attributes, 2);
    if (driver.cuOccupancyMaxActiveClusters(&clusters, function, &config) !=
        CUDA_SUCCESS)
      clusters = 0;
  }
  int64_t blocks = int64_t(launchConfig.grid[0]) * launchConfig.grid[1] *
                   launchConfig.grid[2];
  if (blocks <= int64_t(clusters) * splits)
    cluster = splits;
  return Error::ok();
}

Error ModuleCache::loadedChip(const CudaDriver &driver, std::string &chip) {
  std::unique_lock<std::mutex> lock(mutex);
  LoadedModule *loaded = nullptr;
  if (Error error = loadedIn(driver, nullptr, loaded))
    return error;
  chip = loaded->chip;
  return Error::ok();
}

Error ModuleCache::prepare(const CudaDriver &driver,
                           const std::vector<size_t> *only) {
  auto wanted = [&](size_t kernel) {
    return !only || std::find(only->begin(), only->end(), kernel) != only->end();
  };
  // One module after another: the driver compiles one module at a time in a
  // process (docs/design.md), so threads would gain nothing.
  for (size_t i = 0; i < manifest.kernels.size(); ++i) {
    if (!wanted(i))
      continue;
    CUfunction function = nullptr; // stays null for a kernel the target lacks
    if (Error error = getFunction(driver, i, nullptr, function))
      return error;
  }
  return Error::ok();
}

void ModuleCache::unloadAll() {
  if (modules.empty())
    return;
  const CudaDriver *driver = nullptr;
  if (!getCudaDriver(driver))
    for (LoadedModule &loaded : modules)
      for (CUmodule module : loaded.parts)
        if (module)
          driver->cuModuleUnload(module); // fails harmlessly if the context
                                          // is gone
}

} // namespace rt
} // namespace kiln
