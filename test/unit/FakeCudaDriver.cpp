//===- FakeCudaDriver.cpp - A stand-in for libcuda in unit tests ----------===//
//
// Implements the driver entry points libkilnrt resolves, recording what it is
// asked to do, so that module loading, kernel parameter marshalling and
// launch configuration are tested without a GPU. Tests point
// KILN_CUDA_DRIVER_LIB at this library and reach its state through
// fakeCudaState().
//
//===----------------------------------------------------------------------===//

#include "FakeCudaDriver.h"

#include <cstring>
#include <mutex>
#include <string>

namespace {
FakeCudaState state;
std::mutex moduleMutex;

CUcontext fakeContext(uintptr_t id) {
  return reinterpret_cast<CUcontext>(0x1000 + id);
}
} // namespace

extern "C" {

__attribute__((visibility("default"))) FakeCudaState *fakeCudaState() {
  return &state;
}

__attribute__((visibility("default"))) CUresult cuInit(unsigned int) {
  ++state.initCalls;
  return CUDA_SUCCESS;
}
__attribute__((visibility("default"))) CUresult cuDriverGetVersion(int *v) {
  *v = 13000;
  return CUDA_SUCCESS;
}
__attribute__((visibility("default"))) CUresult
cuGetErrorName(CUresult error, const char **name) {
  *name = error == CUDA_ERROR_INVALID_PTX ? "CUDA_ERROR_INVALID_PTX"
          : error == CUDA_ERROR_NOT_FOUND ? "CUDA_ERROR_NOT_FOUND"
                                          : "CUDA_ERROR_UNKNOWN";
  return CUDA_SUCCESS;
}
__attribute__((visibility("default"))) CUresult
cuGetErrorString(CUresult, const char **text) {
  *text = "fake driver error";
  return CUDA_SUCCESS;
}
__attribute__((visibility("default"))) CUresult
cuCtxGetCurrent(CUcontext *context) {
  *context = state.currentContext ? fakeContext(state.currentContext)
                                  : nullptr;
  return CUDA_SUCCESS;
}
__attribute__((visibility("default"))) CUresult
cuCtxSetCurrent(CUcontext context) {
  state.currentContext = reinterpret_cast<uintptr_t>(context) - 0x1000;
  return CUDA_SUCCESS;
}
__attribute__((visibility("default"))) CUresult cuCtxGetDevice(CUdevice *d) {
  *d = 0;
  return CUDA_SUCCESS;
}
__attribute__((visibility("default"))) CUresult
cuStreamGetCtx(CUstream, CUcontext *context) {
  *context = fakeContext(state.streamContext);
  return CUDA_SUCCESS;
}
__attribute__((visibility("default"))) CUresult
cuCtxGetId(CUcontext context, unsigned long long *id) {
  *id = reinterpret_cast<uintptr_t>(context) - 0x1000;
  return CUDA_SUCCESS;
}
__attribute__((visibility("default"))) CUresult
cuDeviceGetAttribute(int *value, CUdevice_attribute attribute, CUdevice) {
  switch (attribute) {
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
    *value = state.major;
    break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
    *value = state.minor;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
    *value = 232448;
    break;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
    *value = state.smCount;
    break;
  default:
    *value = 0;
  }
  return CUDA_SUCCESS;
}
__attribute__((visibility("default"))) CUresult
cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int count,
                   CUjit_option *options, void **values) {
  // The runtime compiles modules without its cache's lock held, so launches
  // from several threads may load at once.
  std::lock_guard<std::mutex> lock(moduleMutex);
  ++state.moduleLoads;
  state.loadedPtx = static_cast<const char *>(image);
  state.modulePtx.push_back(state.loadedPtx);
  if (state.loadedPtx.find("INVALID") != std::string::npos) {
    for (unsigned i = 0; i < count; ++i)
      if (options[i] == CU_JIT_ERROR_LOG_BUFFER)
        std::strcpy(static_cast<char *>(values[i]),
                    "ptxas fatal: fake syntax error");
    return CUDA_ERROR_INVALID_PTX;
  }
  *module = reinterpret_cast<CUmodule>(0x2000 + state.moduleLoads);
  return CUDA_SUCCESS;
}
__attribute__((visibility("default"))) CUresult cuModuleUnload(CUmodule) {
  ++state.moduleUnloads;
  return CUDA_SUCCESS;
}
__attribute__((visibility("default"))) CUresult
cuModuleGetFunction(CUfunction *function, CUmodule module, const char *name) {
  std::lock_guard<std::mutex> lock(moduleMutex);
  size_t index = reinterpret_cast<uintptr_t>(module) - 0x2001;
  if (index >= state.modulePtx.size() ||
      state.modulePtx[index].find(name) == std::string::npos)
    return CUDA_ERROR_NOT_FOUND;
  *function = reinterpret_cast<CUfunction>(0x3000 + std::strlen(name));
  return CUDA_SUCCESS;
}
__attribute__((visibility("default"))) CUresult
cuFuncSetAttribute(CUfunction, CUfunction_attribute attribute, int value) {
  if (attribute == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
    state.maxDynamicShared = value;
  return CUDA_SUCCESS;
}
__attribute__((visibility("default"))) CUresult
cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, CUfunction, int,
                                            size_t) {
  *blocks = state.blocksPerSM;
  return CUDA_SUCCESS;
}
__attribute__((visibility("default"))) CUresult cuTensorMapEncodeTiled(
    CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *address,
    const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
    const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle swizzle,
    CUtensorMapL2promotion, CUtensorMapFloatOOBfill) {
  if (state.tensorMapResult != CUDA_SUCCESS)
    return state.tensorMapResult;
  FakeCudaState::TensorMapCall &call =
      state.tensorMapCalls[state.tensorMaps++ % 5];
  call = {};
  call.type = type;
  call.rank = rank;
  call.address = reinterpret_cast<uintptr_t>(address);
  for (cuuint32_t i = 0; i < rank && i < 5; ++i) {
    call.dims[i] = dims[i];
    call.box[i] = box[i];
    if (i + 1 < rank)
      call.strides[i] = strides[i];
  }
  call.swizzle = swizzle;
  std::memset(map, 0, sizeof(*map));
  std::memcpy(map, &call.address, 8);
  return CUDA_SUCCESS;
}
__attribute__((visibility("default"))) CUresult
cuLaunchKernel(CUfunction function, unsigned gx, unsigned gy, unsigned gz,
               unsigned bx, unsigned by, unsigned bz, unsigned shared,
               CUstream stream, void **params, void **extra) {
  state.previousLaunch = state.lastLaunch;
  FakeLaunch &launch = state.lastLaunch;
  launch = FakeLaunch();
  launch.function = function;
  launch.grid[0] = gx;
  launch.grid[1] = gy;
  launch.grid[2] = gz;
  launch.block[0] = bx;
  launch.block[1] = by;
  launch.block[2] = bz;
  launch.sharedBytes = shared;
  launch.stream = stream;
  launch.hasExtra = extra != nullptr;
  // The runtime stores every parameter in an 8-byte slot.
  // (A launch with fewer parameters leaves the rest of the runtime's
  // zeroed array null.)
  for (int i = 0; i < state.expectedParams && i < kFakeMaxParams; ++i)
    if (params[i])
      std::memcpy(&launch.params[i], params[i], 8);
  ++state.launches;
  return CUDA_SUCCESS;
}
__attribute__((visibility("default"))) CUresult
cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction function,
                 void **params, void **extra) {
  CUresult result = cuLaunchKernel(
      function, config->gridDimX, config->gridDimY, config->gridDimZ,
      config->blockDimX, config->blockDimY, config->blockDimZ,
      config->sharedMemBytes, config->hStream, params, extra);
  for (unsigned i = 0; i < config->numAttrs; ++i)
    if (config->attrs[i].id ==
        CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
      state.lastLaunch.programmatic =
          config->attrs[i].value.programmaticStreamSerializationAllowed != 0;
    else if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
      state.lastLaunch.clusterZ = config->attrs[i].value.clusterDim.z;
    else if (config->attrs[i].id ==
             CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE)
      state.lastLaunch.clusterPolicy =
          config->attrs[i].value.clusterSchedulingPolicyPreference;
  return result;
}
__attribute__((visibility("default"))) CUresult
cuOccupancyMaxActiveClusters(int *clusters, CUfunction,
                             const CUlaunchConfig *config) {
  ++state.clusterQueries;
  unsigned size = 1;
  for (unsigned i = 0; i < config->numAttrs; ++i)
    if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
      size = config->attrs[i].value.clusterDim.z;
  *clusters = state.activeClusters >= 0
                  ? state.activeClusters
                  : state.smCount * state.blocksPerSM / int(size);
  return CUDA_SUCCESS;
}

} // extern "C"
