//===- CudaDriver.cpp - CUDA driver entry points loaded at run time -------===//

#include "CudaDriver.h"

#include <fmt/format.h>

#include <cstdlib>
#include <dlfcn.h>
#include <mutex>

namespace kiln {
namespace rt {

namespace {

struct DriverState {
  CudaDriver driver{};
  Error error;
};

template <typename Fn>
bool resolve(void *library, const char *name, Fn &slot, Error &error) {
  void *symbol = ::dlsym(library, name);
  slot = reinterpret_cast<Fn>(symbol);
  if (!symbol && !error) {
    const char *reason = ::dlerror();
    error = {KILN_CUDA_ERROR,
             fmt::format("the CUDA driver lacks {}: {}", name,
                         reason ? reason : "symbol not found")};
  }
  return symbol != nullptr;
}

void loadDriver(DriverState &state) {
  const char *override = std::getenv("KILN_CUDA_DRIVER_LIB");
  const char *name = override && *override ? override : "libcuda.so.1";
  void *library = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char *reason = ::dlerror();
    state.error = {KILN_CUDA_ERROR,
                   fmt::format("cannot load the CUDA driver ({}): {}; is an "
                               "NVIDIA driver installed?",
                               name, reason ? reason : "unknown reason")};
    return;
  }
  CudaDriver &d = state.driver;
  Error &e = state.error;
  resolve(library, "cuInit", d.cuInit, e);
  resolve(library, "cuDriverGetVersion", d.cuDriverGetVersion, e);
  resolve(library, "cuGetErrorName", d.cuGetErrorName, e);
  resolve(library, "cuGetErrorString", d.cuGetErrorString, e);
  resolve(library, "cuCtxGetCurrent", d.cuCtxGetCurrent, e);
  resolve(library, "cuCtxSetCurrent", d.cuCtxSetCurrent, e);
  resolve(library, "cuCtxGetDevice", d.cuCtxGetDevice, e);
  resolve(library, "cuStreamGetCtx", d.cuStreamGetCtx, e);
  resolve(library, "cuDeviceGetAttribute", d.cuDeviceGetAttribute, e);
  resolve(library, "cuModuleLoadDataEx", d.cuModuleLoadDataEx, e);
  resolve(library, "cuModuleUnload", d.cuModuleUnload, e);
  resolve(library, "cuModuleGetFunction", d.cuModuleGetFunction, e);
  resolve(library, "cuFuncSetAttribute", d.cuFuncSetAttribute, e);
  resolve(library, "cuLaunchKernel", d.cuLaunchKernel, e);
  resolve(library, "cuOccupancyMaxActiveBlocksPerMultiprocessor",
          d.cuOccupancyMaxActiveBlocksPerMultiprocessor, e);
  if (e)
    return;
  Error optional;
  resolve(library, "cuCtxGetId", d.cuCtxGetId, optional);
  resolve(library, "cuLaunchKernelEx", d.cuLaunchKernelEx, optional);
  resolve(library, "cuOccupancyMaxActiveClusters",
          d.cuOccupancyMaxActiveClusters, optional);
  resolve(library, "cuTensorMapEncodeTiled", d.cuTensorMapEncodeTiled,
          optional);
  // The names cuda.h maps these to (the _v2 entry points).
  resolve(library, "cuMemAlloc_v2", d.cuMemAlloc, optional);
  resolve(library, "cuMemFree_v2", d.cuMemFree, optional);
  resolve(library, "cuMemcpyDtoH_v2", d.cuMemcpyDtoH, optional);
  resolve(library, "cuMemsetD32Async", d.cuMemsetD32Async, optional);
  resolve(library, "cuStreamSynchronize", d.cuStreamSynchronize, optional);
  resolve(library, "cuStreamIsCapturing", d.cuStreamIsCapturing, optional);
  CUresult result = d.cuInit(0);
  if (result != CUDA_SUCCESS)
    e = {KILN_CUDA_ERROR, describeCudaError(d, "cuInit", result)};
  // The library stays loaded for the life of the process, as libcudart does.
}

} // namespace

Error getCudaDriver(const CudaDriver *&driver) {
  static DriverState state;
  static std::once_flag once;
  std::call_once(once, [] { loadDriver(state); });
  driver = state.error ? nullptr : &state.driver;
  return state.error;
}

std::string describeCudaError(const CudaDriver &driver, const char *call,
                              CUresult result) {
  const char *name = nullptr;
  const char *text = nullptr;
  if (driver.cuGetErrorName)
    driver.cuGetErrorName(result, &name);
  if (driver.cuGetErrorString)
    driver.cuGetErrorString(result, &text);
  std::string error =
      name ? name : fmt::format("CUDA error {}", static_cast<int>(result));
  if (!text)
    return fmt::format("{} failed: {}", call, error);
  return fmt::format("{} failed: {} ({})", call, error, text);
}

namespace {

/// The NULL, legacy and per-thread default stream handles, which belong to
/// whatever context is current.
bool isSpecialStream(CUstream stream) {
  return stream == nullptr || stream == CU_STREAM_LEGACY ||
         stream == CU_STREAM_PER_THREAD;
}

} // namespace

Error currentContext(const CudaDriver &driver, CUstream stream,
                     CUcontext &context) {
  context = nullptr;
  CUresult result = driver.cuCtxGetCurrent(&context);
  if (result != CUDA_SUCCESS)
    return {KILN_CUDA_ERROR,
            describeCudaError(driver, "cuCtxGetCurrent", result)};
  if (!context && !isSpecialStream(stream)) {
    result = driver.cuStreamGetCtx(stream, &context);
    if (result != CUDA_SUCCESS)
      return {KILN_CUDA_ERROR,
              describeCudaError(driver, "cuStreamGetCtx", result)};
    if (context && (result = driver.cuCtxSetCurrent(context)) != CUDA_SUCCESS)
      return {KILN_CUDA_ERROR,
              describeCudaError(driver, "cuCtxSetCurrent", result)};
  }
  if (!context)
    return {KILN_CUDA_ERROR,
            "no CUDA context is current on this thread (create or activate "
            "one first, e.g. by any torch.cuda call or cudaSetDevice)"};
  return Error::ok();
}

unsigned long long contextIdOf(const CudaDriver &driver, CUcontext context) {
  unsigned long long id = 0;
  if (driver.cuCtxGetId && driver.cuCtxGetId(context, &id) == CUDA_SUCCESS)
    return id;
  return static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(context));
}

} // namespace rt
} // namespace kiln
