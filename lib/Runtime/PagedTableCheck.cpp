//===- PagedTableCheck.cpp - Debug check of paged launches' tables --------===//

#include "PagedTableCheck.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <utility>
#include <vector>

namespace kiln {
namespace rt {
namespace {

/// The check kernel's PTX (PagedTableCheck.ptx, embedded by CMake).
const char kCheckPtx[] =
#include "PagedTableCheckPtx.inc"
    ;

constexpr unsigned kCheckThreads = 128;

/// The check kernel per context, loaded on first use and kept for the life
/// of the process (a few hundred bytes of code per context).
Error checkFunction(const CudaDriver &driver, CUcontext context,
                    CUfunction &function) {
  static std::mutex mutex;
  static std::vector<std::pair<unsigned long long, CUfunction>> loaded;
  unsigned long long id = contextIdOf(driver, context);
  std::lock_guard<std::mutex> lock(mutex);
  for (auto &[contextId, cached] : loaded)
    if (contextId == id) {
      function = cached;
      return Error::ok();
    }
  CUmodule module = nullptr;
  CUresult result =
      driver.cuModuleLoadDataEx(&module, kCheckPtx, 0, nullptr, nullptr);
  if (result != CUDA_SUCCESS)
    return {
        KILN_CUDA_ERROR,
        fmt::format("{} loading the paged-table check",
                    describeCudaError(driver, "cuModuleLoadDataEx", result))};
  result =
      driver.cuModuleGetFunction(&function, module, "kiln_check_paged_tables");
  if (result != CUDA_SUCCESS)
    return {
        KILN_CUDA_ERROR,
        fmt::format("{} for the paged-table check",
                    describeCudaError(driver, "cuModuleGetFunction", result))};
  loaded.emplace_back(id, function);
  return Error::ok();
}

/// Frees a device buffer when it goes out of scope.
struct DeviceBuffer {
  const CudaDriver &driver;
  CUdeviceptr pointer = 0;
  ~DeviceBuffer() {
    if (pointer)
      driver.cuMemFree(pointer);
  }
};

Error cudaFailure(const CudaDriver &driver, const char *call, CUresult result) {
  return {KILN_CUDA_ERROR,
          fmt::format("{} in the paged-table check",
                      describeCudaError(driver, call, result))};
}

/// One int32 of device memory, read back synchronously.
Error readInt(const CudaDriver &driver, const int32_t *address,
              int32_t &value) {
  CUresult result = driver.cuMemcpyDtoH(
      &value, reinterpret_cast<CUdeviceptr>(address), sizeof(value));
  return result == CUDA_SUCCESS ? Error::ok()
                                : cudaFailure(driver, "cuMemcpyDtoH", result);
}

} // namespace

bool pagedChecksEnabled() {
  static const bool enabled = [] {
    const char *value = std::getenv("KILN_CHECK");
    return value && *value && std::strcmp(value, "0") != 0;
  }();
  return enabled;
}

Error checkPagedTables(const CudaDriver &driver, const PagedTables &tables,
                       CUstream stream, const std::string &where) {
  if (!driver.cuMemAlloc || !driver.cuMemFree || !driver.cuMemcpyDtoH ||
      !driver.cuMemsetD32Async || !driver.cuStreamSynchronize)
    return {KILN_UNSUPPORTED,
            fmt::format("{}the paged-table check needs the driver's "
                        "cuMemAlloc, cuMemFree, cuMemcpyDtoH, "
                        "cuMemsetD32Async and cuStreamSynchronize",
                        where)};
  if (tables.batch <= 0)
    return Error::ok();
  if (driver.cuStreamIsCapturing) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (driver.cuStreamIsCapturing(stream, &status) == CUDA_SUCCESS &&
        status != CU_STREAM_CAPTURE_STATUS_NONE)
      return Error::ok();
  }
  CUcontext context = nullptr;
  if (Error error = currentContext(driver, stream, context))
    return error;
  CUfunction function = nullptr;
  if (Error error = checkFunction(driver, context, function))
    return error;

  DeviceBuffer result{driver};
  CUresult status = driver.cuMemAlloc(&result.pointer, sizeof(uint64_t));
  if (status != CUDA_SUCCESS)
    return cudaFailure(driver, "cuMemAlloc", status);
  if ((status = driver.cuMemsetD32Async(result.pointer, 0xffffffffu, 2,
                                        stream)) != CUDA_SUCCESS)
    return cudaFailure(driver, "cuMemsetD32Async", status);
  uint64_t table = reinterpret_cast<uint64_t>(tables.pageTable);
  uint64_t kvLens = reinterpret_cast<uint64_t>(tables.kvLens);
  uint64_t stride = static_cast<uint64_t>(tables.pageTableStride);
  uint32_t maxPages = static_cast<uint32_t>(tables.maxPages);
  uint32_t pageSize = static_cast<uint32_t>(tables.pageSize);
  uint32_t numPages = static_cast<uint32_t>(
      std::min<int64_t>(tables.numPages, std::numeric_limits<int32_t>::max()));
  uint32_t qLen = static_cast<uint32_t>(tables.qLen);
  uint32_t window = static_cast<uint32_t>(tables.window);
  uint64_t answer = result.pointer;
  void *params[] = {&table,    &stride,   &kvLens, &maxPages, &pageSize,
                    &numPages, &qLen,     &window, &answer};
  if ((status = driver.cuLaunchKernel(
           function, static_cast<unsigned>(tables.batch), 1, 1, kCheckThreads,
           1, 1, 0, stream, params, nullptr)) != CUDA_SUCCESS)
    return cudaFailure(driver, "cuLaunchKernel", status);
  if ((status = driver.cuStreamSynchronize(stream)) != CUDA_SUCCESS)
    return cudaFailure(driver, "cuStreamSynchronize", status);
  uint64_t key = 0;
  if ((status = driver.cuMemcpyDtoH(&key, result.pointer, sizeof(key))) !=
      CUDA_SUCCESS)
    return cudaFailure(driver, "cuMemcpyDtoH", status);
  if (key == ~uint64_t(0))
    return Error::ok();

  // The first bad place: sequence b, and its kv_len (0) or an entry.
  int64_t sequence = static_cast<int64_t>(key / (tables.maxPages + 1));
  int64_t place = static_cast<int64_t>(key % (tables.maxPages + 1));
  int32_t kvLen = 0;
  if (Error error = readInt(driver, tables.kvLens + sequence, kvLen))
    return error;
  int64_t capacity = tables.maxPages * tables.pageSize;
  if (place == 0)
    return {KILN_INVALID_ARGUMENT,
            fmt::format("{}sequence {}: kv_lens[{}] = {} is outside [0, {}] "
                        "(max_pages {} x page_size {}{}",
                        where, sequence, sequence, kvLen, capacity,
                        tables.maxPages, tables.pageSize,
                        kvLen < 0 ? ")" : "): past the table")};
  int64_t position = place - 1;
  int32_t entry = 0;
  if (Error error = readInt(
          driver,
          tables.pageTable + sequence * tables.pageTableStride + position,
          entry))
    return error;
  int64_t lastKey =
      std::min<int64_t>(kvLen, (position + 1) * tables.pageSize) - 1;
  return {KILN_INVALID_ARGUMENT,
          fmt::format("{}sequence {}: page_table[{}][{}] = {} is outside the "
                      "cache's pages [0, {}) (the entry holds keys {}..{} of "
                      "kv_lens[{}] = {})",
                      where, sequence, sequence, position, entry,
                      tables.numPages, position * tables.pageSize, lastKey,
                      sequence, kvLen)};
}

} // namespace rt
} // namespace kiln
