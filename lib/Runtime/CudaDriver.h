//===- CudaDriver.h - CUDA driver entry points loaded at run time ---------===//
//
// libkilnrt never links libcuda: the driver is opened with dlopen at first
// need and the few entry points the runtime calls are resolved with dlsym.
// Only cuda.h's types are used, so that machines without a GPU can load the
// library, open packages and check arguments.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_RUNTIME_CUDADRIVER_H
#define KILN_LIB_RUNTIME_CUDADRIVER_H

#include "Manifest.h"

#include <cuda.h>

namespace kiln {
namespace rt {

/// The driver entry points libkilnrt calls.
struct CudaDriver {
  CUresult (*cuInit)(unsigned int);
  CUresult (*cuDriverGetVersion)(int *);
  CUresult (*cuGetErrorName)(CUresult, const char **);
  CUresult (*cuGetErrorString)(CUresult, const char **);
  CUresult (*cuCtxGetCurrent)(CUcontext *);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxGetDevice)(CUdevice *);
  CUresult (*cuStreamGetCtx)(CUstream, CUcontext *);
  CUresult (*cuDeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
  CUresult (*cuModuleLoadDataEx)(CUmodule *, const void *, unsigned int,
                                 CUjit_option *, void **);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*cuFuncSetAttribute)(CUfunction, CUfunction_attribute, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned int, unsigned int,
                             unsigned int, unsigned int, unsigned int,
                             unsigned int, unsigned int, CUstream, void **,
                             void **);
  CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *, CUfunction,
                                                          int, size_t);
  /// Optional (CUDA 12+): encodes a TMA tensor map (the warp-specialised
  /// kernels' parameters); without it those kernels are not launched.
  CUresult (*cuTensorMapEncodeTiled)(CUtensorMap *, CUtensorMapDataType,
                                     cuuint32_t, void *, const cuuint64_t *,
                                     const cuuint64_t *, const cuuint32_t *,
                                     const cuuint32_t *, CUtensorMapInterleave,
                                     CUtensorMapSwizzle, CUtensorMapL2promotion,
                                     CUtensorMapFloatOOBfill);
  /// Optional (CUDA 12+): a context id that is never reused.
  CUresult (*cuCtxGetId)(CUcontext, unsigned long long *);
  /// Optional (CUDA 12+): a launch with attributes (the combine kernels'
  /// programmatic stream serialization); without it they launch plainly.
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **,
                               void **);
  /// Optional (CUDA 12+): clusters of a launch configuration that fit on
  /// the device at once; without it split kernels are not launched in
  /// clusters.
  CUresult (*cuOccupancyMaxActiveClusters)(int *, CUfunction,
                                           const CUlaunchConfig *);
  /// Optional: what the debug check of paged launches (KILN_CHECK) needs to
  /// run its kernel and read its answer; without them that check reports
  /// that it cannot run. A launch never calls them.
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned int, size_t, CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamIsCapturing)(CUstream, CUstreamCaptureStatus *);
};

/// Loads and initialises the driver once per process. On failure every call
/// returns the same error (the message names the library and the reason).
Error getCudaDriver(const CudaDriver *&driver);

/// "cuModuleLoadDataEx failed: CUDA_ERROR_INVALID_PTX (a PTX JIT compilation
/// failed)" for a failed call.
std::string describeCudaError(const CudaDriver &driver, const char *call,
                              CUresult result);

/// The context launches on `stream` run in: the current one, else (none
/// current on this thread) the stream's, made current as the CUDA runtime
/// would. An error when neither exists.
Error currentContext(const CudaDriver &driver, CUstream stream,
                     CUcontext &context);

/// An id of `context` that the driver never reuses for another context
/// (CUDA 12+), else its address.
unsigned long long contextIdOf(const CudaDriver &driver, CUcontext context);

} // namespace rt
} // namespace kiln

#endif // KILN_LIB_RUNTIME_CUDADRIVER_H
