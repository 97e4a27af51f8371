//===- FakeCudaDriver.h - State of the unit tests' stand-in libcuda -------===//

#ifndef KILN_TEST_UNIT_FAKECUDADRIVER_H
#define KILN_TEST_UNIT_FAKECUDADRIVER_H

#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

constexpr int kFakeMaxParams = 64;

/// What the last cuLaunchKernel received.
struct FakeLaunch {
  unsigned grid[3] = {0, 0, 0};
  unsigned block[3] = {0, 0, 0};
  unsigned sharedBytes = 0;
  CUstream stream = nullptr;
  CUfunction function = nullptr;
  bool hasExtra = false;
  /// Launched through cuLaunchKernelEx with programmatic stream
  /// serialization allowed.
  bool programmatic = false;
  /// Launched through cuLaunchKernelEx in clusters of this many blocks
  /// along z (0: no cluster attribute), and with this placement policy.
  unsigned clusterZ = 0;
  int clusterPolicy = -1;
  /// The first 8 bytes behind each kernelParams entry.
  uint64_t params[kFakeMaxParams] = {};
};

struct FakeCudaState {
  int major = 9;
  int minor = 0;
  /// Id of the context current on the (single) test thread; 0 = none.
  uintptr_t currentContext = 1;
  /// Id of the context cuStreamGetCtx reports.
  uintptr_t streamContext = 7;
  int initCalls = 0;
  int moduleLoads = 0;
  int moduleUnloads = 0;
  /// The PTX of the last module loaded (each one's: modulePtx).
  std::string loadedPtx;
  int maxDynamicShared = 0;
  int expectedParams = 0;
  int launches = 0;
  /// What the occupancy and SM-count queries answer.
  int blocksPerSM = 2;
  int smCount = 132;
  /// What cuOccupancyMaxActiveClusters answers; -1: the SMs' blocks over
  /// the cluster's size. Its calls are counted.
  int activeClusters = -1;
  int clusterQueries = 0;
  FakeLaunch lastLaunch;
  /// The launch before the last (a split-KV launch's attention kernel).
  FakeLaunch previousLaunch;
  /// cuTensorMapEncodeTiled: what it answers, and its last five calls
  /// (each map's first 8 bytes become the global address it describes).
  CUresult tensorMapResult = CUDA_SUCCESS;
  int tensorMaps = 0;
  struct TensorMapCall {
    CUtensorMapDataType type;
    unsigned rank;
    uintptr_t address;
    cuuint64_t dims[5];
    cuuint64_t strides[4];
    cuuint32_t box[5];
    CUtensorMapSwizzle swizzle;
  } tensorMapCalls[5] = {};
  /// The PTX of each module in the order loaded (module handle 0x2001 is
  /// the first). Last: launch_fp8_fake_driver.py mirrors the fields above.
  std::vector<std::string> modulePtx;
};

extern "C" FakeCudaState *fakeCudaState();

#endif // KILN_TEST_UNIT_FAKECUDADRIVER_H
