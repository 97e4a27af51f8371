//===- Runtime.cpp - Kiln runtime C API -----------------------------------===//
//
// Packages, sites, argument checks and launches. Every C entry point catches
// everything: a failure becomes a status and a thread-local message.
//
//===----------------------------------------------------------------------===//

#include "kiln-c/Runtime.h"

#include "CudaDriver.h"
#include "Manifest.h"
#include "PagedTableCheck.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

using namespace kiln::rt;

namespace {

/// One module loaded in one CUDA context, with the functions looked up so far.
struct LoadedModule {
  unsigned long long contextId = 0;
  CUcontext context = nullptr;
  CUmodule module = nullptr;
  /// The target whose PTX the module holds ("sm_90a").
  std::string chip;
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

} // namespace

struct kiln_site {
  kiln_package *package = nullptr;
  size_t index = 0;
};

struct kiln_package {
  Manifest manifest;
  std::vector<kiln_site> sites;
  /// Guards `modules` and every cache inside them (functions, occupancy,
  /// clusters). A deque: a module's address stays valid while other
  /// threads load the package into other contexts.
  std::mutex mutex;
  std::deque<LoadedModule> modules;
};

namespace {

thread_local std::string lastError;

kiln_status fail(const Error &error) {
  lastError = error.message;
  return error.status;
}

kiln_status fail(kiln_status status, std::string message) {
  lastError = std::move(message);
  return status;
}

/// Runs `body` and turns any escaping exception into a status.
template <typename Fn> kiln_status guarded(const char *function, Fn &&body) {
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return fail(KILN_INTERNAL_ERROR,
                std::string(function) + ": out of host memory");
  } catch (const std::exception &error) {
    return fail(KILN_INTERNAL_ERROR,
                std::string(function) + ": unexpected error: " + error.what());
  } catch (...) {
    return fail(KILN_INTERNAL_ERROR,
                std::string(function) + ": unexpected error");
  }
}

const char *tensorName(Tensor tensor) {
  static const char *names[] = {"q", "k", "v", "out", "mask", "bias"};
  return names[static_cast<int>(tensor)];
}

const void *tensorPointer(const kiln_attention_args &args, Tensor tensor) {
  switch (tensor) {
  case Tensor::Q:
    return args.q;
  case Tensor::K:
    return args.k;
  case Tensor::V:
    return args.v;
  case Tensor::Out:
    return args.out;
  case Tensor::Mask:
    return args.mask;
  case Tensor::Bias:
    return args.bias;
  }
  return nullptr;
}

kiln_dtype tensorDtype(const kiln_attention_args &args, Tensor tensor) {
  const kiln_dtype dtypes[] = {args.q_dtype,    args.k_dtype,
                               args.v_dtype,    args.out_dtype,
                               args.mask_dtype, args.bias_dtype};
  return dtypes[static_cast<int>(tensor)];
}

const int64_t *tensorStrides(const kiln_attention_args &args, Tensor tensor) {
  const int64_t *strides[] = {args.q_strides,    args.k_strides,
                              args.v_strides,    args.out_strides,
                              args.mask_strides, args.bias_strides};
  return strides[static_cast<int>(tensor)];
}

int64_t dimValue(const kiln_attention_args &args, Dim dim) {
  const int64_t values[] = {args.batch, args.q_heads, args.kv_heads,
                            args.q_len, args.kv_len,  args.head_dim};
  return values[static_cast<int>(dim)];
}

std::string str(int64_t value) { return std::to_string(value); }

/// Everything a launch needs once the arguments are checked.
struct LaunchPlan {
  kiln_launch_config config{};
  union Value {
    uint64_t pointer;
    int32_t i32;
    int64_t i64;
    float f32;
  };
  Value values[kMaxKernelArgs];
  /// Tensor-map parameters (passed by value, 64-byte aligned).
  CUtensorMap maps[3];
  size_t numMaps = 0;
  void *params[kMaxKernelArgs] = {};
  size_t numParams = 0;
};

Error invalid(std::string message) {
  return {KILN_INVALID_ARGUMENT, std::move(message)};
}

/// The checks of an attention launch's dimensions, pointers, dtypes and
/// strides against its site and kernel.
Error checkAttention(const Kernel &kernel, const Site &site,
                     const std::string &where,
                     const kiln_attention_args &args) {
  // Dimensions.
  for (int i = 0; i < kNumDims; ++i) {
    Dim dim = static_cast<Dim>(i);
    int64_t value = dimValue(args, dim);
    if (value <= 0)
      return invalid(where + dimName(dim) + " must be positive, got " +
                     str(value));
    if (site.dims[i] && *site.dims[i] != value)
      return invalid(where + dimName(dim) + " is " + str(value) +
                     " but the site was compiled for " + dimName(dim) + " = " +
                     str(*site.dims[i]));
  }
  if (kernel.headDim && *kernel.headDim != args.head_dim)
    return invalid(where + "head_dim is " + str(args.head_dim) +
                   " but kernel \"" + kernel.name + "\" is compiled for " +
                   str(*kernel.headDim));
  if (args.v_head_dim < 0)
    return invalid(where + "v_head_dim must be positive (or 0 for head_dim), "
                           "got " +
                   str(args.v_head_dim));
  int64_t valueHeadDim = args.v_head_dim ? args.v_head_dim : args.head_dim;
  std::optional<int64_t> expectedValueHeadDim =
      kernel.valueHeadDim ? kernel.valueHeadDim : site.valueHeadDim;
  if (expectedValueHeadDim && *expectedValueHeadDim != valueHeadDim)
    return invalid(where + "the head dim of v and out is " +
                   str(valueHeadDim) + " but kernel \"" + kernel.name +
                   "\" is compiled for " + str(*expectedValueHeadDim) +
                   (args.v_head_dim ? "" : " (v_head_dim is 0: head_dim)"));
  if (args.q_heads % args.kv_heads != 0)
    return invalid(where + "q_heads (" + str(args.q_heads) +
                   ") is not a multiple of kv_heads (" + str(args.kv_heads) +
                   ")");

  // Pointers and dtypes.
  for (Tensor tensor : {Tensor::Q, Tensor::K, Tensor::V, Tensor::Out}) {
    const void *pointer = tensorPointer(args, tensor);
    kiln_dtype dtype = tensorDtype(args, tensor);
    if (!pointer)
      return invalid(where + tensorName(tensor) + " is NULL");
    if (dtype != site.dtype)
      return invalid(where + tensorName(tensor) + " has dtype " +
                     dtypeName(dtype) + " but the site takes " +
                     dtypeName(site.dtype));
  }
  if (site.mask == KILN_MASK_NONE && args.mask)
    return invalid(where + "a mask was given but the site has no mask");
  if (site.mask != KILN_MASK_NONE && !args.mask)
    return invalid(where + "the site needs a " +
                   (site.mask == KILN_MASK_BOOLEAN ? "boolean" : "additive") +
                   " mask (" + dtypeName(site.maskDtype) +
                   ") but none was given");
  if (args.mask && args.mask_dtype != site.maskDtype)
    return invalid(where + "mask has dtype " + dtypeName(args.mask_dtype) +
                   " but the site takes " + dtypeName(site.maskDtype));
  if (!site.bias && args.bias)
    return invalid(where + "a bias was given but the site has no bias");
  if (site.bias && !args.bias)
    return invalid(where + "the site needs a bias (" +
                   dtypeName(site.biasDtype) + ") but none was given");
  if (args.bias && args.bias_dtype != site.biasDtype)
    return invalid(where + "bias has dtype " + dtypeName(args.bias_dtype) +
                   " but the site takes " + dtypeName(site.biasDtype));
  for (int i = 0; i < kNumTensors; ++i) {
    Tensor tensor = static_cast<Tensor>(i);
    const void *pointer = tensorPointer(args, tensor);
    int64_t size = kiln_dtype_size(tensorDtype(args, tensor));
    if (pointer && size > 1 &&
        reinterpret_cast<uintptr_t>(pointer) % static_cast<uintptr_t>(size))
      return invalid(where + tensorName(tensor) + " is not aligned to its " +
                     str(size) + "-byte elements");
  }

  // Strides.
  static const char *qkvAxes[] = {"batch", "head", "seq", "head_dim"};
  static const char *maskAxes[] = {"batch", "head", "q", "k"};
  for (Tensor tensor : {Tensor::Q, Tensor::K, Tensor::V, Tensor::Out}) {
    const int64_t *strides = tensorStrides(args, tensor);
    if (strides[3] != 1)
      return invalid(where + tensorName(tensor) +
                     " must be contiguous along head_dim (stride 1), got "
                     "head_dim stride " +
                     str(strides[3]));
    bool isKv = tensor == Tensor::K || tensor == Tensor::V;
    int64_t extents[3] = {args.batch, isKv ? args.kv_heads : args.q_heads,
                          isKv ? args.kv_len : args.q_len};
    for (int axis = 0; axis < 3; ++axis) {
      if (strides[axis] < 0)
        return invalid(where + tensorName(tensor) + " has a negative " +
                       qkvAxes[axis] + " stride (" + str(strides[axis]) + ")");
      if (tensor == Tensor::Out && strides[axis] == 0 && extents[axis] > 1)
        return invalid(where + "out has a zero " + std::string(qkvAxes[axis]) +
                       " stride: its elements would overlap");
    }
  }
  for (Tensor tensor : {Tensor::Mask, Tensor::Bias}) {
    if (!tensorPointer(args, tensor))
      continue;
    const int64_t *strides = tensorStrides(args, tensor);
    for (int axis = 0; axis < 4; ++axis)
      if (strides[axis] < 0)
        return invalid(where + tensorName(tensor) + " has a negative " +
                       maskAxes[axis] + " stride (" + str(strides[axis]) + ")");
  }

  return Error::ok();
}

/// The values of a paged launch that kiln_attention_args has no place for.
struct PagedValues {
  const int32_t *pageTable = nullptr;
  const int32_t *kvLens = nullptr;
  int64_t maxPages = 0, numPages = 0, pageSize = 0, pageTableStride = 0;
};

/// A checked launch, in the terms of an attention launch: a paged launch's
/// caches stand as k and v, with its own values beside.
struct CheckedLaunch {
  const Kernel *kernel = nullptr;
  kiln_attention_args args{};
  std::optional<PagedValues> paged;
  /// The most keys a sequence may have (kv_len, or max_pages x page_size).
  int64_t maxKvLen = 0;
  /// The sum of the sequences' key counts where the caller gave it (paged
  /// launches' total_kv_len), else 0.
  int64_t totalKvLen = 0;
  int64_t valueHeadDim = 0;
  /// A batch of 0: nothing to check further, compute or launch (an empty
  /// tensor's data pointer may be NULL).
  bool empty = false;
};

/// The f32 workspace `splits` splits of a launch need: partial outputs and
/// two statistics per row and split.
int64_t splitWorkspaceBytes(const kiln_attention_args &args,
                            int64_t valueHeadDim, int64_t splits) {
  if (splits <= 1)
    return 0;
  return splits * args.batch * args.q_heads * args.q_len * (valueHeadDim + 2) *
         int64_t(sizeof(float));
}

/// The grid and the kernel parameters of a checked launch with `splits`
/// splits of its keys.
Error encodeTensorMap(const CudaDriver *driver, const Kernel &kernel,
                      const KernelArg &arg, const kiln_attention_args &args,
                      const std::string &where, CUtensorMap &map);

Error fillPlan(const Kernel &kernel, const Site &site, const std::string &where,
               const CheckedLaunch &launch, int64_t splits, LaunchPlan &plan,
               const CudaDriver *driver = nullptr) {
  const kiln_attention_args &args = launch.args;
  const PagedValues *paged = launch.paged ? &*launch.paged : nullptr;
  // Launch configuration.
  static const int64_t gridLimits[3] = {std::numeric_limits<int32_t>::max(),
                                        65535, 65535};
  static const char *axisNames[3] = {"x", "y", "z"};
  for (int axis = 0; axis < 3; ++axis) {
    const GridRule &rule = kernel.grid[axis];
    int64_t value = rule.constant;
    std::string formula = rule.dims.empty() ? str(rule.constant) : "";
    for (Dim dim : rule.dims) {
      int64_t factor = dimValue(args, dim);
      if (value > std::numeric_limits<int64_t>::max() / factor)
        return invalid(where + "grid." + axisNames[axis] + " overflows");
      value *= factor;
      formula += (formula.empty() ? "" : "*") + std::string(dimName(dim));
    }
    for (Dim dim : rule.perDims) {
      int64_t divisor = dimValue(args, dim);
      if (divisor <= 0 || value % divisor != 0)
        return invalid(where + "grid." + axisNames[axis] + ": " + formula +
                       " = " + str(value) + " is not a multiple of " +
                       dimName(dim) + " = " + str(divisor));
      value /= divisor;
      formula += "/" + std::string(dimName(dim));
    }
    value = (value + rule.ceilDiv - 1) / rule.ceilDiv;
    if (rule.timesSplits) {
      value *= splits;
      formula += "*num_splits";
    }
    if (value > gridLimits[axis])
      return invalid(where + "grid." + axisNames[axis] + " = ceil(" + formula +
                     " / " + str(rule.ceilDiv) + ") = " + str(value) +
                     " is over CUDA's limit of " + str(gridLimits[axis]));
    plan.config.grid[axis] = static_cast<uint32_t>(value);
    plan.config.block[axis] = static_cast<uint32_t>(kernel.block[axis]);
  }
  plan.config.dynamic_shared_bytes =
      static_cast<uint32_t>(kernel.dynamicSharedBytes);

  // Parameters, in the kernel's order.
  plan.numParams = kernel.args.size();
  for (size_t i = 0; i < kernel.args.size(); ++i) {
    const KernelArg &arg = kernel.args[i];
    LaunchPlan::Value &value = plan.values[i];
    plan.params[i] = &value;
    int64_t integer = 0;
    std::string what;
    switch (arg.source) {
    case ArgSource::Pointer: {
      if (arg.dtype != KILN_DTYPE_NONE &&
          tensorDtype(args, arg.tensor) != arg.dtype)
        return invalid(where + arg.name + " has dtype " +
                       dtypeName(tensorDtype(args, arg.tensor)) +
                       " but kernel \"" + kernel.name + "\" takes " +
                       dtypeName(arg.dtype));
      value.pointer = static_cast<uint64_t>(
          reinterpret_cast<uintptr_t>(tensorPointer(args, arg.tensor)));
      continue;
    }
    case ArgSource::Scale:
      value.f32 = site.scale;
      continue;
    case ArgSource::Softcap:
      value.f32 = site.softcap ? *site.softcap : 0.0f;
      continue;
    case ArgSource::Window:
      integer = site.window ? *site.window : 0;
      what = "window";
      break;
    case ArgSource::Dim:
      integer = dimValue(args, arg.dim);
      what = dimName(arg.dim);
      break;
    case ArgSource::Stride:
      integer = tensorStrides(args, arg.tensor)[arg.axis];
      what = arg.name;
      break;
    case ArgSource::PagedPointer:
      if (!paged)
        return invalid(where + "kernel \"" + kernel.name + "\" is paged");
      value.pointer = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(
          arg.paged == 0 ? paged->pageTable : paged->kvLens));
      continue;
    case ArgSource::PagedDim: {
      if (!paged)
        return invalid(where + "kernel \"" + kernel.name + "\" is paged");
      const int64_t values[] = {paged->maxPages, paged->numPages,
                                paged->pageSize};
      integer = values[arg.paged];
      what = arg.name;
      break;
    }
    case ArgSource::PageTableStride:
      if (!paged)
        return invalid(where + "kernel \"" + kernel.name + "\" is paged");
      integer = paged->pageTableStride;
      what = arg.name;
      break;
    case ArgSource::NumSplits:
      integer = splits;
      what = arg.name;
      break;
    case ArgSource::Workspace:
      value.pointer = static_cast<uint64_t>(
          reinterpret_cast<uintptr_t>(splits > 1 ? args.workspace : nullptr));
      continue;
    case ArgSource::TensorMap: {
      if (plan.numMaps == std::size(plan.maps))
        return invalid(where + "kernel \"" + kernel.name +
                       "\" takes more than 3 tensor maps");
      CUtensorMap &map = plan.maps[plan.numMaps++];
      if (Error error = encodeTensorMap(driver, kernel, arg, args, where, map))
        return error;
      plan.params[i] = &map;
      continue;
    }
    }
    if (arg.kind == ArgKind::I32) {
      if (integer > std::numeric_limits<int32_t>::max() ||
          integer < std::numeric_limits<int32_t>::min())
        return invalid(where + what + " = " + str(integer) +
                       " does not fit kernel \"" + kernel.name +
                       "\"'s 32-bit argument \"" + arg.name + "\"");
      value.i32 = static_cast<int32_t>(integer);
    } else {
      value.i64 = integer;
    }
  }
  return Error::ok();
}

/// Encodes the TMA tensor map of `arg` for this launch: the tensor as
/// {head dim, sequence, heads, batch} with its strides in bytes, boxes of
/// the argument's (columns, rows), 128-byte swizzle, zeros outside. Fails
/// with KILN_UNSUPPORTED where the driver cannot encode it (the caller then
/// takes the portable kernel).
Error encodeTensorMap(const CudaDriver *driver, const Kernel &kernel,
                      const KernelArg &arg, const kiln_attention_args &args,
                      const std::string &where, CUtensorMap &map) {
  if (!driver || !driver->cuTensorMapEncodeTiled)
    return {KILN_UNSUPPORTED, where + "kernel \"" + kernel.name +
                                  "\" needs cuTensorMapEncodeTiled (CUDA 12+)"};
  Tensor tensor = arg.tensor;
  kiln_dtype dtype = tensorDtype(args, tensor);
  if (dtype != KILN_DTYPE_F16 && dtype != KILN_DTYPE_BF16)
    return invalid(where + tensorName(tensor) + " has dtype " +
                   dtypeName(dtype) + " but kernel \"" + kernel.name +
                   "\" takes f16 or bf16");
  const int64_t *strides = tensorStrides(args, tensor);
  bool isQuery = tensor == Tensor::Q;
  int64_t columns =
      tensor == Tensor::V && args.v_head_dim ? args.v_head_dim : args.head_dim;
  cuuint64_t dims[4] = {cuuint64_t(columns),
                        cuuint64_t(isQuery ? args.q_len : args.kv_len),
                        cuuint64_t(isQuery ? args.q_heads : args.kv_heads),
                        cuuint64_t(args.batch)};
  // Strides of dims 1..3 in bytes: sequence, head, batch.
  cuuint64_t byteStrides[3] = {cuuint64_t(strides[2]) * 2,
                               cuuint64_t(strides[1]) * 2,
                               cuuint64_t(strides[0]) * 2};
  cuuint32_t box[4] = {cuuint32_t(arg.boxColumns), cuuint32_t(arg.boxRows), 1,
                       1};
  cuuint32_t elementStrides[4] = {1, 1, 1, 1};
  CUresult result = driver->cuTensorMapEncodeTiled(
      &map,
      dtype == KILN_DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                               : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
      4, const_cast<void *>(tensorPointer(args, tensor)), dims, byteStrides,
      box, elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS)
    return {KILN_UNSUPPORTED,
            where +
                describeCudaError(*driver, "cuTensorMapEncodeTiled", result) +
                " for " + tensorName(tensor)};
  return Error::ok();
}

/// Checks the split-KV fields of a launch: a forced split count must be one
/// the kernel can run and the workspace hold.
Error checkSplits(const std::string &where, const CheckedLaunch &launch) {
  const kiln_attention_args &args = launch.args;
  const Kernel &kernel = *launch.kernel;
  if (args.num_splits < 0 || args.num_splits > kMaxSplits)
    return invalid(where + "num_splits must be 0 (chosen at launch) to " +
                   str(kMaxSplits) + ", got " + str(args.num_splits));
  if (args.workspace_bytes < 0)
    return invalid(where + "workspace_bytes must not be negative, got " +
                   str(args.workspace_bytes));
  if (args.workspace && reinterpret_cast<uintptr_t>(args.workspace) % 16 != 0)
    return invalid(where + "workspace must be 16-byte aligned");
  if (args.num_splits > 1) {
    if (!kernel.combineIndex)
      return invalid(where + "num_splits is " + str(args.num_splits) +
                     " but kernel \"" + kernel.name + "\" does not split keys");
    int64_t needed =
        splitWorkspaceBytes(args, launch.valueHeadDim, args.num_splits);
    if (!args.workspace || args.workspace_bytes < needed)
      return invalid(where + str(args.num_splits) + " splits need a " +
                     str(needed) + "-byte workspace; got " +
                     (args.workspace ? str(args.workspace_bytes) + " bytes"
                                     : std::string("none")));
  }
  return Error::ok();
}

/// Checks a launch of `site` with `args`. Never touches the CUDA driver.
Error checkLaunch(const Manifest &manifest, const Site &site,
                  const kiln_attention_args *argsPointer,
                  CheckedLaunch &launch) {
  const std::string where = "site \"" + site.name + "\": ";
  if (!argsPointer)
    return invalid(where + "the argument struct is NULL");
  const kiln_attention_args &args = *argsPointer;
  const Kernel &kernel = manifest.kernels[site.kernelIndex];
  if (site.paged)
    return invalid(where + "a paged-attention site: launch it with "
                           "kiln_site_launch_paged_attention");
  launch.kernel = &kernel;
  if (args.batch == 0) {
    launch.empty = true;
    return Error::ok();
  }

  if (Error error = checkAttention(kernel, site, where, args))
    return error;
  launch.args = args;
  launch.maxKvLen = args.kv_len;
  launch.valueHeadDim = args.v_head_dim ? args.v_head_dim : args.head_dim;
  return checkSplits(where, launch);
}

/// Checks a paged launch of `site`. Never touches the CUDA driver.
Error checkPagedLaunch(const Manifest &manifest, const Site &site,
                       const kiln_paged_attention_args *argsPointer,
                       CheckedLaunch &launch) {
  const std::string where = "site \"" + site.name + "\": ";
  if (!argsPointer)
    return invalid(where + "the argument struct is NULL");
  if (!site.paged)
    return invalid(where + "not a paged-attention site: launch it with "
                           "kiln_site_launch_attention");
  const kiln_paged_attention_args &paged = *argsPointer;
  const Kernel &kernel = manifest.kernels[site.kernelIndex];
  launch.kernel = &kernel;
  if (paged.batch == 0) {
    launch.empty = true;
    return Error::ok();
  }

  // The sizes only paged launches have.
  const std::pair<const char *, int64_t> sizes[] = {
      {"batch", paged.batch},         {"q_heads", paged.q_heads},
      {"kv_heads", paged.kv_heads},   {"q_len", paged.q_len},
      {"head_dim", paged.head_dim},   {"num_pages", paged.num_pages},
      {"page_size", paged.page_size}, {"max_pages", paged.max_pages}};
  for (auto [name, value] : sizes)
    if (value <= 0)
      return invalid(where + name + " must be positive, got " + str(value));
  if (site.pageSize && *site.pageSize != paged.page_size)
    return invalid(
        where + "page_size is " + str(paged.page_size) +
        " but the site was compiled for page_size = " + str(*site.pageSize));
  if (paged.page_size & (paged.page_size - 1))
    return invalid(where + "page_size must be a power of two, got " +
                   str(paged.page_size));
  if (paged.max_pages > std::numeric_limits<int32_t>::max() / paged.page_size)
    return invalid(where + "max_pages x page_size overflows 32 bits");
  if (!paged.page_table || !paged.kv_lens)
    return invalid(where +
                   std::string(!paged.page_table ? "page_table" : "kv_lens") +
                   " is NULL");
  for (const void *pointer : {static_cast<const void *>(paged.page_table),
                              static_cast<const void *>(paged.kv_lens)})
    if (reinterpret_cast<uintptr_t>(pointer) % 4)
      return invalid(where + "page_table and kv_lens must be aligned to their "
                             "4-byte elements");
  if (paged.page_table_strides[1] != 1)
    return invalid(where +
                   "page_table must be contiguous along its entries "
                   "(stride 1), got " +
                   str(paged.page_table_strides[1]));
  if (paged.page_table_strides[0] < paged.max_pages &&
      paged.page_table_strides[0] != 0)
    return invalid(where + "page_table's batch stride (" +
                   str(paged.page_table_strides[0]) +
                   ") is smaller than max_pages (" + str(paged.max_pages) +
                   "): rows would overlap");
  for (auto [name, pointer, dtype] :
       {std::tuple{"q", paged.q, paged.q_dtype},
        std::tuple{"key_cache", paged.key_cache, paged.key_cache_dtype},
        std::tuple{"value_cache", paged.value_cache, paged.value_cache_dtype},
        std::tuple{"out", static_cast<const void *>(paged.out),
                   paged.out_dtype}}) {
    if (!pointer)
      return invalid(where + name + " is NULL");
    if (dtype != site.dtype)
      return invalid(where + name + " has dtype " + dtypeName(dtype) +
                     " but the site takes " + dtypeName(site.dtype));
  }
  for (auto [name, strides] :
       {std::pair{"key_cache", paged.key_cache_strides},
        std::pair{"value_cache", paged.value_cache_strides}})
    for (int axis = 0; axis < 3; ++axis)
      if (strides[axis] < 0)
        return invalid(where + name + " has a negative stride (" +
                       str(strides[axis]) + ")");

  // The rest is an attention launch with the caches as K and V: the same
  // checks of dtypes, pointers, head dims and q/out strides.
  kiln_attention_args args{};
  args.q = paged.q;
  args.k = paged.key_cache;
  args.v = paged.value_cache;
  args.out = paged.out;
  args.q_dtype = paged.q_dtype;
  args.k_dtype = paged.key_cache_dtype;
  args.v_dtype = paged.value_cache_dtype;
  args.out_dtype = paged.out_dtype;
  args.mask_dtype = args.bias_dtype = KILN_DTYPE_NONE;
  args.batch = paged.batch;
  args.q_heads = paged.q_heads;
  args.kv_heads = paged.kv_heads;
  args.q_len = paged.q_len;
  args.kv_len = paged.max_pages * paged.page_size;
  args.head_dim = paged.head_dim;
  args.v_head_dim = paged.v_head_dim;
  std::memcpy(args.q_strides, paged.q_strides, sizeof(args.q_strides));
  std::memcpy(args.k_strides, paged.key_cache_strides, sizeof(args.k_strides));
  std::memcpy(args.v_strides, paged.value_cache_strides,
              sizeof(args.v_strides));
  std::memcpy(args.out_strides, paged.out_strides, sizeof(args.out_strides));
  args.workspace = paged.workspace;
  args.workspace_bytes = paged.workspace_bytes;
  args.num_splits = paged.num_splits;
  if (Error error = checkAttention(kernel, site, where, args))
    return error;
  PagedValues values;
  values.pageTable = paged.page_table;
  values.kvLens = paged.kv_lens;
  values.maxPages = paged.max_pages;
  values.numPages = paged.num_pages;
  values.pageSize = paged.page_size;
  values.pageTableStride = paged.page_table_strides[0];
  launch.args = args;
  launch.paged = values;
  launch.maxKvLen = args.kv_len;
  if (paged.total_kv_len < 0 ||
      paged.total_kv_len > paged.batch * launch.maxKvLen)
    return invalid(where + "total_kv_len must be 0 (unknown) to batch x " +
                   "max_pages x page_size (" +
                   str(paged.batch * launch.maxKvLen) + "), got " +
                   str(paged.total_kv_len));
  launch.totalKvLen = paged.total_kv_len;
  launch.valueHeadDim = args.v_head_dim ? args.v_head_dim : args.head_dim;
  return checkSplits(where, launch);
}

/// Loads the package's PTX in the current context. Called with the package
/// mutex held.
Error loadModule(kiln_package &package, const CudaDriver &driver,
                 CUcontext context, unsigned long long contextId,
                 LoadedModule *&loaded) {
  const Manifest &manifest = package.manifest;
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
    std::string chips;
    for (const Target &target : manifest.targets)
      chips += (chips.empty() ? "" : ", ") + target.chip;
    return {KILN_UNSUPPORTED, "package " + manifest.directory +
                                  " has no PTX for a device of compute "
                                  "capability " +
                                  str(major) + "." + str(minor) +
                                  " (targets: " + chips + ")"};
  }
  const Target &target = manifest.targets[targetIndex];

  std::vector<char> errorLog(16384, '\0');
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER,
                            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *optionValues[] = {
      errorLog.data(),
      reinterpret_cast<void *>(static_cast<uintptr_t>(errorLog.size() - 1))};
  CUmodule module = nullptr;
  result = driver.cuModuleLoadDataEx(&module, target.ptx.c_str(), 2, options,
                                     optionValues);
  if (result != CUDA_SUCCESS) {
    std::string log(errorLog.data());
    return {KILN_CUDA_ERROR,
            describeCudaError(driver, "cuModuleLoadDataEx", result) +
                " loading " + target.ptxFile + " (" + target.chip +
                ") on a compute capability " + str(major) + "." + str(minor) +
                " device" + (log.empty() ? "" : "; JIT log:\n" + log)};
  }

  // Check the shared memory of every kernel before anything launches.
  int sharedOptIn = 0;
  driver.cuDeviceGetAttribute(
      &sharedOptIn, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
      device);
  for (const Kernel &kernel : manifest.kernels) {
    if (!kernel.inTarget(target.chip))
      continue;
    int64_t shared = kernel.staticSharedBytes + kernel.dynamicSharedBytes;
    if (sharedOptIn > 0 && shared > sharedOptIn) {
      driver.cuModuleUnload(module);
      return {KILN_UNSUPPORTED,
              "kernel \"" + kernel.name + "\" needs " + str(shared) +
                  " bytes of shared memory; the device allows " +
                  str(sharedOptIn)};
    }
  }
  package.modules.push_back({});
  loaded = &package.modules.back();
  loaded->contextId = contextId;
  loaded->context = context;
  loaded->module = module;
  loaded->chip = target.chip;
  loaded->gridDependency = target.gridDependency;
  loaded->attentionGridDependency = target.attentionGridDependency;
  loaded->clusterSplits = target.clusterSplits;
  loaded->functions.assign(manifest.kernels.size(), nullptr);
  loaded->activeClusters.assign(manifest.kernels.size(), {});
  return Error::ok();
}

/// Where a kernel's blocks live on the current device.
struct Residency {
  int64_t smCount = 0;
  int64_t blocksPerSM = 0;
};

/// The function of `kernelIndex` in the current context (or, when none is
/// current, `stream`'s), loading the module the first time; null when the
/// loaded target's PTX does not have the kernel.
Error getFunction(kiln_package &package, const CudaDriver &driver,
                  size_t kernelIndex, CUstream stream, CUfunction &function,
                  Residency *residency = nullptr,
                  LoadedModule **module = nullptr) {
  CUcontext context = nullptr;
  if (Error error = currentContext(driver, stream, context))
    return error;
  CUresult result;
  unsigned long long contextId = contextIdOf(driver, context);

  std::lock_guard<std::mutex> lock(package.mutex);
  LoadedModule *loaded = nullptr;
  for (LoadedModule &candidate : package.modules)
    if (candidate.contextId == contextId && candidate.context == context)
      loaded = &candidate;
  if (!loaded)
    if (Error error = loadModule(package, driver, context, contextId, loaded))
      return error;
  if (kernelIndex >= loaded->functions.size())
    return Error::ok();
  if (!package.manifest.kernels[kernelIndex].inTarget(loaded->chip)) {
    function = nullptr;
    return Error::ok();
  }
  CUfunction &cached = loaded->functions[kernelIndex];
  if (!cached) {
    const Kernel &kernel = package.manifest.kernels[kernelIndex];
    CUfunction found = nullptr;
    result =
        driver.cuModuleGetFunction(&found, loaded->module, kernel.name.c_str());
    if (result != CUDA_SUCCESS)
      return {KILN_CUDA_ERROR,
              describeCudaError(driver, "cuModuleGetFunction", result) +
                  " for kernel \"" + kernel.name + "\""};
    if (kernel.dynamicSharedBytes > 48 * 1024) {
      result = driver.cuFuncSetAttribute(
          found, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
          static_cast<int>(kernel.dynamicSharedBytes));
      if (result != CUDA_SUCCESS)
        return {KILN_CUDA_ERROR,
                describeCudaError(driver, "cuFuncSetAttribute", result) +
                    " setting " + str(kernel.dynamicSharedBytes) +
                    " bytes of dynamic shared memory for kernel \"" +
                    kernel.name + "\""};
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
                describeCudaError(driver, "cuDeviceGetAttribute", result) +
                    " reading the SM count"};
      loaded->smCount = count;
      loaded->blocksPerSM.assign(package.manifest.kernels.size(), 0);
    }
    int &blocks = loaded->blocksPerSM[kernelIndex];
    if (!blocks) {
      const Kernel &kernel = package.manifest.kernels[kernelIndex];
      result = driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(
          &blocks, cached, kernel.block[0] * kernel.block[1] * kernel.block[2],
          static_cast<size_t>(kernel.dynamicSharedBytes));
      if (result != CUDA_SUCCESS)
        return {KILN_CUDA_ERROR,
                describeCudaError(driver,
                                  "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                                  result) +
                    " for kernel \"" + kernel.name + "\""};
      blocks = std::max(blocks, 1);
    }
    residency->smCount = loaded->smCount;
    residency->blocksPerSM = blocks;
  }
  return Error::ok();
}

/// Splits of a block's keys never go below this many key blocks each.
constexpr int64_t kMinBlocksPerSplit = 1;
/// A block's fixed cost (prologue, Q load, epilogue, combine share), in the
/// time of one key block.
constexpr int64_t kBlockOverhead = 2;

/// Resident blocks of a kernel per SM that reach an SM's share of the
/// memory bandwidth, measured on the H200 with forced split counts: one
/// block of the contiguous kernels (a second one on the same SM only
/// shares the bandwidth: 8/1 x 128 x 2k ran 2.81 TB/s at one split, 2.54 at
/// two), two of the paged kernels on grids that leave SMs idle (32/8 x 8 x
/// 1k: 1.38 TB/s at two splits, one block an SM, 1.40 at four; a ragged
/// 8/1 batch of 32 sequences 2.30 with two, 2.01 with one). Grids that fill
/// the SMs are not split at all (chooseSplits).
int64_t saturatingBlocks(const Kernel &kernel) { return kernel.paged ? 2 : 1; }

/// The split count that minimises a model of a launch's time: `blocks`
/// blocks of `kvBlocks` key blocks each, spread evenly over `smCount` SMs
/// that hold `blocksPerSM` at a time. An SM's time is its blocks' key blocks
/// (plus a fixed overhead each) at the SM's bandwidth, which takes
/// `saturating` blocks at once to reach: with fewer, each block runs at its
/// own rate. The smallest count wins a tie; grid z (batch x splits) stays
/// within CUDA's limit.
/// A batch of uneven lengths (`meanKvBlocks`, the sequences' mean, below
/// `kvBlocks`, the longest) is costed at its mean, plus the longest
/// sequence's excess over the mean, a split's share of it: the part that
/// runs after the rest of the batch is done, which more splits shorten.
/// Fitted to forced split counts on the H200 (docs/performance.md).
int64_t chooseSplits(int64_t blocks, int64_t smCount, int64_t blocksPerSM,
                     int64_t kvBlocks, int64_t batch, int64_t saturating,
                     int64_t meanKvBlocks = 0) {
  if (blocks <= 0 || smCount <= 0 || blocksPerSM <= 0 || kvBlocks <= 0)
    return 1;
  if (meanKvBlocks <= 0 || meanKvBlocks > kvBlocks)
    meanKvBlocks = kvBlocks;
  int64_t excess = kvBlocks - meanKvBlocks;
  // A grid that already puts a block on all but a sixteenth of the SMs runs
  // unsplit: splitting could gain at most the idle SMs' share and pays the
  // combine and each split's prologue. Measured on the H200 with the paged
  // kernel, whose saturating count would split it: 8/1 x 128 x 2k ran
  // 2.70 TB/s at one split and 2.49 at two, 32/8 x 16 x 16k 4.07 and 4.10.
  if (!excess && blocks <= smCount && blocks * 16 >= smCount * 15)
    return 1;
  saturating = std::clamp<int64_t>(saturating, 1, blocksPerSM);
  int64_t most = std::min<int64_t>(
      {kMaxSplits, std::max<int64_t>(1, kvBlocks / kMinBlocksPerSplit),
       std::max<int64_t>(1, 65535 / batch)});
  int64_t best = 1, bestCost = std::numeric_limits<int64_t>::max();
  for (int64_t splits = 1; splits <= most; ++splits) {
    // No count from here on can cost less: an SM's share is at least
    // blocks·splits / smCount blocks, each at least mean / splits + the
    // overhead key blocks, which grows with the count.
    if (splits > 1 &&
        blocks * (meanKvBlocks + kBlockOverhead * splits) >= bestCost * smCount)
      break;
    int64_t perSM = (blocks * splits + smCount - 1) / smCount;
    int64_t waves = (perSM + blocksPerSM - 1) / blocksPerSM;
    int64_t share = std::max(perSM, saturating * waves);
    int64_t cost =
        share * ((meanKvBlocks + splits - 1) / splits + kBlockOverhead) +
        (excess + splits - 1) / splits;
    if (cost < bestCost) {
      best = splits;
      bestCost = cost;
    }
  }
  return best;
}

/// Blocks of a launch with one split: the product of the grid rules.
int64_t gridBlocks(const Kernel &kernel, const kiln_attention_args &args) {
  int64_t blocks = 1;
  for (const GridRule &rule : kernel.grid) {
    int64_t value = rule.constant;
    for (Dim dim : rule.dims)
      value *= dimValue(args, dim);
    for (Dim dim : rule.perDims)
      value /= std::max<int64_t>(dimValue(args, dim), 1);
    blocks *= (value + rule.ceilDiv - 1) / rule.ceilDiv;
  }
  return blocks;
}

/// The split count of a checked launch: the forced one, or the modelled best
/// on the current device, bounded by the workspace (1 without one, or for a
/// kernel that does not split).
Error decideSplits(kiln_package &package, const CudaDriver &driver,
                   const Site &s, const CheckedLaunch &launch, CUstream stream,
                   int64_t &splits) {
  const kiln_attention_args &args = launch.args;
  splits = 1;
  if (args.num_splits > 0) {
    splits = args.num_splits;
    return Error::ok();
  }
  const Kernel &kernel = *launch.kernel;
  if (!kernel.combineIndex || !args.workspace)
    return Error::ok();
  CUfunction function = nullptr;
  Residency residency;
  if (Error error = getFunction(package, driver, s.kernelIndex, stream,
                                function, &residency))
    return error;
  int64_t kvBlocks =
      (launch.maxKvLen + kernel.kvBlockSize - 1) / kernel.kvBlockSize;
  int64_t meanKvBlocks = 0;
  if (launch.totalKvLen > 0 && args.batch > 0) {
    int64_t meanKvLen = (launch.totalKvLen + args.batch - 1) / args.batch;
    meanKvBlocks = (meanKvLen + kernel.kvBlockSize - 1) / kernel.kvBlockSize;
  }
  splits = chooseSplits(gridBlocks(kernel, args), residency.smCount,
                        residency.blocksPerSM, kvBlocks, args.batch,
                        saturatingBlocks(kernel), meanKvBlocks);
  while (splits > 1 && splitWorkspaceBytes(args, launch.valueHeadDim, splits) >
                           args.workspace_bytes)
    --splits;
  return Error::ok();
}

} // namespace

//===----------------------------------------------------------------------===//
// C API
//===----------------------------------------------------------------------===//

/// Most blocks of a cluster the runtime launches a split kernel in. Measured
/// on the H200 (paged decode, forced split counts, clusters against the
/// combine kernel): clusters of 2 to 4 gain 1.5-5%; clusters of 8 and 16
/// lose up to 12% (8/1 x 16 x 16k at 8 splits, 32/8 x 1 x 32k at 16), with
/// the balanced or the spread placement: a cluster must fit in one GPC, and
/// the GPCs' SM counts do not divide into such clusters evenly, so some SMs
/// take a second block while others idle.
constexpr int64_t kMaxClusterBlocks = 4;

/// A launch's cluster attributes: clusters of `size` blocks along grid z,
/// placed by the hardware's load balancing (the default policy spreads a
/// cluster's blocks and fits fewer of them: 62 clusters of 4 of the paged
/// decode kernel on the H200, against 66 balanced, which hold a grid of 256
/// blocks in one wave).
void setClusterAttributes(CUlaunchAttribute attributes[2], int64_t size) {
  attributes[0] = {};
  attributes[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attributes[0].value.clusterDim.x = 1;
  attributes[0].value.clusterDim.y = 1;
  attributes[0].value.clusterDim.z = static_cast<unsigned>(size);
  attributes[1] = {};
  attributes[1].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
  attributes[1].value.clusterSchedulingPolicyPreference =
      CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING;
}

/// cuLaunchKernelEx's configuration of launch configuration `c` on `stream`
/// with `count` `attributes`.
CUlaunchConfig extendedConfig(const kiln_launch_config &c, CUstream stream,
                              CUlaunchAttribute *attributes, unsigned count) {
  CUlaunchConfig config{};
  config.gridDimX = c.grid[0];
  config.gridDimY = c.grid[1];
  config.gridDimZ = c.grid[2];
  config.blockDimX = c.block[0];
  config.blockDimY = c.block[1];
  config.blockDimZ = c.block[2];
  config.sharedMemBytes = c.dynamic_shared_bytes;
  config.hStream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  return config;
}

/// Launches a planned kernel of site `s` on `stream`. A combine kernel
/// (`afterSplits`) goes with programmatic stream serialization where the
/// loaded PTX's combine kernels wait for their split kernel: its blocks may
/// then be placed while the split kernel's last blocks run, and it starts
/// the moment that kernel's writes are visible, not a launch later. An
/// attention kernel goes so where the loaded PTX's attention kernels wait
/// for the grids before them: whatever kernel comes before it on the
/// stream, its blocks read their parameters and work out their indices
/// while that kernel drains. With `cluster` > 1 the blocks go in clusters
/// of that many along grid z (a split kernel that reduces its splits
/// itself; clusterOfSplits).
Error launchPlanned(kiln_package &package, const CudaDriver &driver,
                    const Site &s, size_t kernelIndex, LaunchPlan &plan,
                    CUstream stream, bool afterSplits = false,
                    int64_t cluster = 0) {
  CUfunction function = nullptr;
  LoadedModule *loaded = nullptr;
  if (Error error = getFunction(package, driver, kernelIndex, stream, function,
                                nullptr, &loaded))
    return error;
  if (!function)
    return {KILN_UNSUPPORTED, "kernel \"" +
                                  package.manifest.kernels[kernelIndex].name +
                                  "\" is not in the loaded target's PTX"};
  const kiln_launch_config &c = plan.config;
  CUresult result;
  const char *call = "cuLaunchKernel";
  bool early = loaded && (afterSplits ? loaded->gridDependency
                                      : loaded->attentionGridDependency);
  if ((early || cluster > 1) && driver.cuLaunchKernelEx) {
    CUlaunchAttribute attributes[3] = {};
    unsigned count = 0;
    if (cluster > 1) {
      setClusterAttributes(attributes, cluster);
      count = 2;
    }
    if (early) {
      attributes[count].id =
          CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attributes[count].value.programmaticStreamSerializationAllowed = 1;
      ++count;
    }
    CUlaunchConfig config = extendedConfig(c, stream, attributes, count);
    call = "cuLaunchKernelEx";
    result = driver.cuLaunchKernelEx(&config, function, plan.params, nullptr);
  } else {
    result = driver.cuLaunchKernel(
        function, c.grid[0], c.grid[1], c.grid[2], c.block[0], c.block[1],
        c.block[2], c.dynamic_shared_bytes, stream, plan.params, nullptr);
  }
  if (result != CUDA_SUCCESS)
    return {KILN_CUDA_ERROR,
            describeCudaError(driver, call, result) + " for site \"" + s.name +
                "\" (kernel \"" + package.manifest.kernels[kernelIndex].name +
                "\", grid " + str(c.grid[0]) + "x" + str(c.grid[1]) + "x" +
                str(c.grid[2]) + ", block " + str(c.block[0]) + "x" +
                str(c.block[1]) + "x" + str(c.block[2]) +
                (cluster > 1 ? ", clusters of " + str(cluster) : "") + ")"};
  return Error::ok();
}

/// Most sequences one launch of `launch`'s kernel holds: grid y and z stop
/// at 65535 blocks, and a batch larger than the kernel's grid rules allow
/// there runs as several launches of consecutive sequences (launchFolded).
/// With `splits` splits of each sequence's keys (the largest a launch may
/// choose, or the forced count).
int64_t sequencesPerLaunch(const Kernel &kernel, const CheckedLaunch &launch,
                           int64_t splits) {
  kiln_attention_args one = launch.args;
  one.batch = 1;
  int64_t most = std::numeric_limits<int64_t>::max();
  for (int axis = 1; axis < 3; ++axis) {
    const GridRule &rule = kernel.grid[axis];
    if (std::find(rule.dims.begin(), rule.dims.end(), Dim::Batch) ==
        rule.dims.end())
      continue;
    // ceil(b·x / c) <= b·ceil(x / c): a sequence's share, rounded up.
    int64_t value = rule.constant;
    for (Dim dim : rule.dims)
      value *= dimValue(one, dim);
    for (Dim dim : rule.perDims)
      value /= std::max<int64_t>(dimValue(one, dim), 1);
    value = (value + rule.ceilDiv - 1) / rule.ceilDiv;
    if (rule.timesSplits)
      value *= splits;
    most = std::min(most, 65535 / std::max<int64_t>(value, 1));
  }
  return std::max<int64_t>(most, 1);
}

/// The launch of sequences [first, first + count) of `launch`: the pointers
/// of every per-sequence tensor moved to `first` (a paged launch's caches
/// are shared by all sequences and stay).
CheckedLaunch sequenceRange(const CheckedLaunch &launch, int64_t first,
                            int64_t count) {
  CheckedLaunch part = launch;
  kiln_attention_args &args = part.args;
  args.batch = count;
  auto offset = [&](const void *pointer, Tensor tensor) -> const char * {
    if (!pointer)
      return nullptr;
    return static_cast<const char *>(pointer) +
           first * tensorStrides(args, tensor)[0] *
               kiln_dtype_size(tensorDtype(args, tensor));
  };
  args.q = offset(args.q, Tensor::Q);
  args.out = const_cast<char *>(offset(args.out, Tensor::Out));
  args.mask = offset(args.mask, Tensor::Mask);
  args.bias = offset(args.bias, Tensor::Bias);
  if (part.paged) {
    part.paged->pageTable += first * part.paged->pageTableStride;
    part.paged->kvLens += first;
    // Only the split count depends on it: unknown for a part.
    part.totalKvLen = 0;
  } else {
    args.k = offset(args.k, Tensor::K);
    args.v = offset(args.v, Tensor::V);
  }
  return part;
}

/// The launch configuration a check reports: the forced split count, else
/// one split (the choice at launch needs the device).
Error checkedConfig(const Site &s, const CheckedLaunch &launch,
                    kiln_launch_config *config) {
  if (launch.empty) {
    if (config)
      *config = kiln_launch_config{};
    return Error::ok();
  }
  LaunchPlan plan;
  int64_t splits = std::max<int64_t>(launch.args.num_splits, 1);
  // A batch larger than one grid holds: its first launch's.
  int64_t most = sequencesPerLaunch(*launch.kernel, launch, splits);
  if (Error error = fillPlan(
          *launch.kernel, s, "site \"" + s.name + "\": ",
          launch.args.batch > most ? sequenceRange(launch, 0, most) : launch,
          splits, plan))
    return error;
  if (config)
    *config = plan.config;
  return Error::ok();
}

/// Queries a warp-specialised launch needs at least: below this the
/// portable kernel, which packs a KV head's query heads into its rows, wastes
/// fewer of its rows.
constexpr int64_t kWarpSpecializedMinQueries = 128;

/// Whether a launch of site `s` without forced splits can take the site's
/// warp-specialised kernel: the loaded target has it, the driver encodes
/// tensor maps, and the views are what TMA and its stores take (16-byte
/// aligned Q, K and V with 16-byte strides, an output with 4-byte pairs).
bool warpSpecializedFits(const Kernel &kernel, const kiln_attention_args &args,
                         const CudaDriver &driver) {
  if (!driver.cuTensorMapEncodeTiled ||
      args.q_len < kWarpSpecializedMinQueries || args.kv_len < 1 ||
      args.head_dim != kernel.headDim ||
      (args.v_head_dim ? args.v_head_dim : args.head_dim) !=
          kernel.valueHeadDim)
    return false;
  for (Tensor tensor : {Tensor::Q, Tensor::K, Tensor::V, Tensor::Out}) {
    bool output = tensor == Tensor::Out;
    auto address = reinterpret_cast<uintptr_t>(tensorPointer(args, tensor));
    if (address % (output ? 4 : 16) != 0)
      return false;
    const int64_t *strides = tensorStrides(args, tensor);
    for (int axis = 0; axis < 3; ++axis)
      if (strides[axis] <= 0 || strides[axis] % (output ? 2 : 8) != 0)
        return false;
  }
  return true;
}

/// Launches site `s`'s warp-specialised kernel for a checked launch when it
/// fits; `launched` says whether it did.
Error launchWarpSpecialized(kiln_package &package, const CudaDriver &driver,
                            const Site &s, const CheckedLaunch &launch,
                            CUstream stream, bool &launched) {
  launched = false;
  size_t index = *s.warpSpecializedIndex;
  const Kernel &kernel = package.manifest.kernels[index];
  if (!warpSpecializedFits(kernel, launch.args, driver))
    return Error::ok();
  CUfunction function = nullptr;
  if (Error error = getFunction(package, driver, index, stream, function))
    return error;
  if (!function)
    return Error::ok();
  LaunchPlan plan;
  Error error = fillPlan(kernel, s, "site \"" + s.name + "\": ", launch, 1,
                         plan, &driver);
  if (error.status == KILN_UNSUPPORTED)
    return Error::ok();
  if (error)
    return error;
  if (Error launchError =
          launchPlanned(package, driver, s, index, plan, stream))
    return launchError;
  launched = true;
  return Error::ok();
}

/// The cluster a split launch of `splits` splits goes in: `splits` where the
/// loaded PTX's split kernels reduce their splits in clusters of that many
/// (Target::clusterSplits), and the launch's clusters all fit on the device
/// at once; else 0 (the combine kernel reduces the splits). A grid of
/// clusters that does not fit runs in two waves, which costs far more than
/// the combine kernel saves (docs/performance.md).
Error clusterOfSplits(kiln_package &package, const CudaDriver &driver,
                      size_t kernelIndex, const LaunchPlan &plan,
                      CUstream stream, int64_t splits, int64_t &cluster) {
  cluster = 0;
  if (splits < 2 || !driver.cuLaunchKernelEx ||
      !driver.cuOccupancyMaxActiveClusters)
    return Error::ok();
  CUfunction function = nullptr;
  LoadedModule *loaded = nullptr;
  if (Error error = getFunction(package, driver, kernelIndex, stream, function,
                                nullptr, &loaded))
    return error;
  if (!function || splits > std::min(loaded->clusterSplits, kMaxClusterBlocks))
    return Error::ok();
  // The module's caches are shared by every thread that launches it.
  std::lock_guard<std::mutex> lock(package.mutex);
  std::vector<int> &active = loaded->activeClusters[kernelIndex];
  if (active.empty())
    active.assign(kMaxClusterBlocks + 1, -1);
  int &clusters = active[splits];
  if (clusters < 0) {
    CUlaunchAttribute attributes[2];
    setClusterAttributes(attributes, splits);
    // Asked for a grid of one cluster along z: how many fit at once does
    // not depend on the grid's size.
    kiln_launch_config oneCluster = plan.config;
    oneCluster.grid[2] = static_cast<uint32_t>(splits);
    CUlaunchConfig config = extendedConfig(oneCluster, stream, attributes, 2);
    if (driver.cuOccupancyMaxActiveClusters(&clusters, function, &config) !=
        CUDA_SUCCESS)
      clusters = 0;
  }
  int64_t blocks =
      int64_t(plan.config.grid[0]) * plan.config.grid[1] * plan.config.grid[2];
  if (blocks <= int64_t(clusters) * splits)
    cluster = splits;
  return Error::ok();
}

/// Launches a checked launch of site `s` on `stream`: the kernel with the
/// split count decided here and, when it splits, either in clusters that
/// reduce the splits themselves or with the combine kernel after it on the
/// same stream.
Error launchChecked(kiln_package &package, const Site &s,
                    const CheckedLaunch &launch, void *streamHandle) {
  const std::string where = "site \"" + s.name + "\": ";
  auto stream = static_cast<CUstream>(streamHandle);
  // Every argument error is reported before the driver is touched.
  if (Error error = checkedConfig(s, launch, nullptr))
    return error;
  const CudaDriver *driver = nullptr;
  if (Error error = getCudaDriver(driver))
    return error;
  // Prefill shapes take the warp-specialised kernel where it fits, unless
  // the caller forces a split count (the split model's waves are the
  // portable kernel's).
  if (s.warpSpecializedIndex && launch.args.num_splits <= 1) {
    bool launched = false;
    if (Error error = launchWarpSpecialized(package, *driver, s, launch, stream,
                                            launched))
      return error;
    if (launched)
      return Error::ok();
  }
  int64_t splits = 1;
  if (Error error = decideSplits(package, *driver, s, launch, stream, splits))
    return error;
  LaunchPlan plan;
  if (Error error = fillPlan(*launch.kernel, s, where, launch, splits, plan))
    return error;
  int64_t cluster = 0;
  if (Error error = clusterOfSplits(package, *driver, s.kernelIndex, plan,
                                    stream, splits, cluster))
    return error;
  if (Error error = launchPlanned(package, *driver, s, s.kernelIndex, plan,
                                  stream, /*afterSplits=*/false, cluster))
    return error;
  if (splits <= 1 || cluster > 1)
    return Error::ok();
  size_t combineIndex = *launch.kernel->combineIndex;
  LaunchPlan combine;
  if (Error error = fillPlan(package.manifest.kernels[combineIndex], s, where,
                             launch, splits, combine))
    return error;
  return launchPlanned(package, *driver, s, combineIndex, combine, stream,
                       /*afterSplits=*/true);
}

/// Launches a checked launch, as several launches of consecutive sequences
/// where its batch is more than one grid holds (each on the same stream,
/// so they may share the workspace). A batch of 0 launches nothing.
Error launchFolded(kiln_package &package, const Site &s,
                   const CheckedLaunch &launch, void *stream) {
  if (launch.empty)
    return Error::ok();
  int64_t batch = launch.args.batch;
  int64_t splits = launch.args.num_splits > 0 ? launch.args.num_splits : 1;
  int64_t most = sequencesPerLaunch(*launch.kernel, launch, splits);
  if (batch <= most)
    return launchChecked(package, s, launch, stream);
  for (int64_t first = 0; first < batch; first += most)
    if (Error error = launchChecked(
            package, s, sequenceRange(launch, first, std::min(most, batch - first)),
            stream))
      return error;
  return Error::ok();
}

/// The debug check of a paged launch's kv_lens and page table
/// (PagedTableCheck.h), on `stream`.
Error checkTables(const Site &s, const CheckedLaunch &launch, void *stream) {
  if (launch.empty)
    return Error::ok();
  const CudaDriver *driver = nullptr;
  if (Error error = getCudaDriver(driver))
    return error;
  const PagedValues &paged = *launch.paged;
  PagedTables tables;
  tables.pageTable = paged.pageTable;
  tables.pageTableStride = paged.pageTableStride;
  tables.kvLens = paged.kvLens;
  tables.batch = launch.args.batch;
  tables.maxPages = paged.maxPages;
  tables.pageSize = paged.pageSize;
  tables.numPages = paged.numPages;
  tables.qLen = launch.args.q_len;
  tables.window = s.window.value_or(0);
  return checkPagedTables(*driver, tables, static_cast<CUstream>(stream),
                          "site \"" + s.name + "\": ");
}

/// The split count a checked launch uses on the current device.
Error splitsOfLaunch(kiln_package &package, const Site &s,
                     const CheckedLaunch &launch, int64_t &splits) {
  if (launch.empty) {
    splits = 1;
    return Error::ok();
  }
  const CudaDriver *driver = nullptr;
  if (Error error = getCudaDriver(driver))
    return error;
  // A launch the warp-specialised kernel takes does not split.
  if (s.warpSpecializedIndex && launch.args.num_splits <= 1 &&
      warpSpecializedFits(package.manifest.kernels[*s.warpSpecializedIndex],
                          launch.args, *driver)) {
    CUfunction function = nullptr;
    if (Error error = getFunction(package, *driver, *s.warpSpecializedIndex,
                                  nullptr, function))
      return error;
    if (function) {
      splits = 1;
      return Error::ok();
    }
  }
  return decideSplits(package, *driver, s, launch, nullptr, splits);
}

extern "C" {

const char *kiln_last_error(void) { return lastError.c_str(); }

const char *kiln_status_string(kiln_status status) {
  switch (status) {
  case KILN_OK:
    return "KILN_OK";
  case KILN_INVALID_ARGUMENT:
    return "KILN_INVALID_ARGUMENT";
  case KILN_NOT_FOUND:
    return "KILN_NOT_FOUND";
  case KILN_IO_ERROR:
    return "KILN_IO_ERROR";
  case KILN_FORMAT_ERROR:
    return "KILN_FORMAT_ERROR";
  case KILN_CUDA_ERROR:
    return "KILN_CUDA_ERROR";
  case KILN_UNSUPPORTED:
    return "KILN_UNSUPPORTED";
  case KILN_INTERNAL_ERROR:
    return "KILN_INTERNAL_ERROR";
  }
  return "KILN_UNKNOWN_STATUS";
}

const char *kiln_dtype_name(kiln_dtype dtype) { return dtypeName(dtype); }

int64_t kiln_dtype_size(kiln_dtype dtype) {
  switch (dtype) {
  case KILN_DTYPE_F16:
  case KILN_DTYPE_BF16:
    return 2;
  case KILN_DTYPE_F32:
    return 4;
  case KILN_DTYPE_BOOL:
    return 1;
  case KILN_DTYPE_NONE:
    break;
  }
  return 0;
}

int32_t kiln_runtime_api_version(void) { return KILN_RUNTIME_API_VERSION; }

kiln_status kiln_cuda_driver_load(void) {
  return guarded("kiln_cuda_driver_load", [] {
    const CudaDriver *driver = nullptr;
    if (Error error = getCudaDriver(driver))
      return fail(error);
    return KILN_OK;
  });
}

kiln_status kiln_package_open(const char *directory, kiln_package **package) {
  return guarded("kiln_package_open", [&] {
    if (!package)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_package_open: the result pointer is NULL");
    *package = nullptr;
    if (!directory || !*directory)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_package_open: the directory is NULL or empty");
    auto opened = std::make_unique<kiln_package>();
    if (Error error = loadManifest(directory, opened->manifest))
      return fail(error);
    opened->sites.resize(opened->manifest.sites.size());
    for (size_t i = 0; i < opened->sites.size(); ++i)
      opened->sites[i] = {opened.get(), i};
    *package = opened.release();
    return KILN_OK;
  });
}

void kiln_package_close(kiln_package *package) {
  if (!package)
    return;
  try {
    if (!package->modules.empty()) {
      const CudaDriver *driver = nullptr;
      if (!getCudaDriver(driver))
        for (LoadedModule &loaded : package->modules)
          driver->cuModuleUnload(loaded.module); // fails harmlessly if the
                                                 // context is gone
    }
  } catch (...) {
  }
  delete package;
}

const char *kiln_package_producer(const kiln_package *package) {
  return package ? package->manifest.producer.c_str() : "";
}

int64_t kiln_package_num_sites(const kiln_package *package) {
  return package ? static_cast<int64_t>(package->sites.size()) : 0;
}

int64_t kiln_package_num_kernels(const kiln_package *package) {
  return package ? static_cast<int64_t>(package->manifest.kernels.size()) : 0;
}

int64_t kiln_package_num_targets(const kiln_package *package) {
  return package ? static_cast<int64_t>(package->manifest.targets.size()) : 0;
}

kiln_status kiln_package_get_site(const kiln_package *package, int64_t index,
                                  const kiln_site **site) {
  return guarded("kiln_package_get_site", [&] {
    if (!package || !site)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_package_get_site: NULL package or result pointer");
    if (index < 0 || index >= static_cast<int64_t>(package->sites.size()))
      return fail(KILN_INVALID_ARGUMENT,
                  "site index " + str(index) + " is out of range (package " +
                      "has " + str(package->sites.size()) + " sites)");
    *site = &package->sites[index];
    return KILN_OK;
  });
}

kiln_status kiln_package_find_site(const kiln_package *package,
                                   const char *name, const kiln_site **site) {
  return guarded("kiln_package_find_site", [&] {
    if (!package || !name || !site)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_package_find_site: NULL package, name or result "
                  "pointer");
    *site = nullptr;
    std::string names;
    for (size_t i = 0; i < package->sites.size(); ++i) {
      const std::string &siteName = package->manifest.sites[i].name;
      if (siteName == name) {
        *site = &package->sites[i];
        return KILN_OK;
      }
      names += (names.empty() ? "" : ", ") + siteName;
    }
    return fail(KILN_NOT_FOUND, "package " + package->manifest.directory +
                                    " has no site \"" + name + "\" (sites: " +
                                    (names.empty() ? "none" : names) + ")");
  });
}

kiln_status kiln_package_get_kernel(const kiln_package *package, int64_t index,
                                    kiln_kernel_info *info) {
  return guarded("kiln_package_get_kernel", [&] {
    if (!package || !info)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_package_get_kernel: NULL package or result pointer");
    const auto &kernels = package->manifest.kernels;
    if (index < 0 || index >= static_cast<int64_t>(kernels.size()))
      return fail(KILN_INVALID_ARGUMENT,
                  "kernel index " + str(index) + " is out of range (package " +
                      "has " + str(kernels.size()) + " kernels)");
    const Kernel &kernel = kernels[index];
    info->name = kernel.name.c_str();
    info->kind = kernel.kind.c_str();
    info->dtype = kernel.dtype;
    info->head_dim = kernel.headDim ? *kernel.headDim : KILN_DYNAMIC;
    for (int i = 0; i < 3; ++i)
      info->block[i] = kernel.block[i];
    info->static_shared_bytes = kernel.staticSharedBytes;
    info->dynamic_shared_bytes = kernel.dynamicSharedBytes;
    info->num_args = static_cast<int32_t>(kernel.args.size());
    return KILN_OK;
  });
}

kiln_status kiln_package_get_target(const kiln_package *package, int64_t index,
                                    const char **chip) {
  return guarded("kiln_package_get_target", [&] {
    if (!package || !chip)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_package_get_target: NULL package or result pointer");
    const auto &targets = package->manifest.targets;
    if (index < 0 || index >= static_cast<int64_t>(targets.size()))
      return fail(KILN_INVALID_ARGUMENT,
                  "target index " + str(index) + " is out of range");
    *chip = targets[index].chip.c_str();
    return KILN_OK;
  });
}

kiln_status kiln_package_select_target(const kiln_package *package,
                                       int32_t major, int32_t minor,
                                       const char **chip) {
  return guarded("kiln_package_select_target", [&] {
    if (!package || !chip)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_package_select_target: NULL package or result "
                  "pointer");
    int index = selectTarget(package->manifest, major, minor);
    if (index < 0)
      return fail(KILN_UNSUPPORTED, "package " + package->manifest.directory +
                                        " has no PTX for compute capability " +
                                        str(major) + "." + str(minor));
    *chip = package->manifest.targets[index].chip.c_str();
    return KILN_OK;
  });
}

kiln_status kiln_package_prepare(kiln_package *package) {
  return guarded("kiln_package_prepare", [&] {
    if (!package)
      return fail(KILN_INVALID_ARGUMENT, "kiln_package_prepare: NULL package");
    const CudaDriver *driver = nullptr;
    if (Error error = getCudaDriver(driver))
      return fail(error);
    // (Kernels that the loaded target's PTX lacks are skipped.)
    for (size_t i = 0; i < package->manifest.kernels.size(); ++i) {
      CUfunction function = nullptr;
      if (Error error = getFunction(*package, *driver, i, nullptr, function))
        return fail(error);
    }
    return KILN_OK;
  });
}

kiln_status kiln_site_get_info(const kiln_site *site, kiln_site_info *info) {
  return guarded("kiln_site_get_info", [&] {
    if (!site || !info)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_site_get_info: NULL site or result pointer");
    const Site &s = site->package->manifest.sites[site->index];
    std::memset(info, 0, sizeof(*info));
    info->name = s.name.c_str();
    info->kernel = s.kernelName.c_str();
    info->function = s.function.c_str();
    info->location = s.location.c_str();
    info->layout = s.layout;
    info->dtype = s.dtype;
    info->scale = s.scale;
    info->causal = s.causal;
    info->window = s.window ? *s.window : 0;
    info->has_softcap = s.softcap.has_value();
    info->softcap = s.softcap ? *s.softcap : 0.0f;
    auto dim = [&](Dim d) {
      const auto &value = s.dims[static_cast<int>(d)];
      return value ? *value : KILN_DYNAMIC;
    };
    info->batch = dim(Dim::Batch);
    info->q_heads = dim(Dim::QHeads);
    info->kv_heads = dim(Dim::KvHeads);
    info->q_len = dim(Dim::QLen);
    info->kv_len = dim(Dim::KvLen);
    info->head_dim = dim(Dim::HeadDim);
    info->mask = s.mask;
    info->mask_dtype = s.maskDtype;
    info->bias = s.bias;
    info->bias_dtype = s.biasDtype;
    info->v_head_dim = s.valueHeadDim ? *s.valueHeadDim : KILN_DYNAMIC;
    info->paged = s.paged;
    info->page_size = s.pageSize ? *s.pageSize : KILN_DYNAMIC;
    info->split_kv =
        site->package->manifest.kernels[s.kernelIndex].combineIndex.has_value();
    return KILN_OK;
  });
}

void kiln_attention_args_init(kiln_attention_args *args) {
  if (args)
    std::memset(args, 0, sizeof(*args));
}

kiln_status kiln_contiguous_strides(kiln_layout layout, int64_t batch,
                                    int64_t heads, int64_t seq,
                                    int64_t head_dim, int64_t strides[4]) {
  return guarded("kiln_contiguous_strides", [&] {
    if (!strides)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_contiguous_strides: NULL strides");
    if (batch <= 0 || heads <= 0 || seq <= 0 || head_dim <= 0)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_contiguous_strides: dimensions must be positive");
    if (layout != KILN_LAYOUT_BHSD && layout != KILN_LAYOUT_BSHD)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_contiguous_strides: unknown layout " + str(layout));
    // Strides are {batch, head, seq, head_dim} whatever the layout.
    strides[3] = 1;
    if (layout == KILN_LAYOUT_BHSD) {
      strides[2] = head_dim;
      strides[1] = seq * head_dim;
      strides[0] = heads * seq * head_dim;
    } else {
      strides[1] = head_dim;
      strides[2] = heads * head_dim;
      strides[0] = seq * heads * head_dim;
    }
    return KILN_OK;
  });
}

kiln_status kiln_attention_args_set_contiguous(const kiln_site *site,
                                               kiln_attention_args *args) {
  return guarded("kiln_attention_args_set_contiguous", [&] {
    if (!site || !args)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_attention_args_set_contiguous: NULL site or args");
    const Site &s = site->package->manifest.sites[site->index];
    kiln_status status;
    if ((status = kiln_contiguous_strides(s.layout, args->batch, args->q_heads,
                                          args->q_len, args->head_dim,
                                          args->q_strides)) != KILN_OK ||
        (status = kiln_contiguous_strides(s.layout, args->batch, args->kv_heads,
                                          args->kv_len, args->head_dim,
                                          args->k_strides)) != KILN_OK)
      return status;
    int64_t valueHeadDim = args->v_head_dim ? args->v_head_dim : args->head_dim;
    if ((status = kiln_contiguous_strides(s.layout, args->batch, args->kv_heads,
                                          args->kv_len, valueHeadDim,
                                          args->v_strides)) != KILN_OK ||
        (status = kiln_contiguous_strides(s.layout, args->batch, args->q_heads,
                                          args->q_len, valueHeadDim,
                                          args->out_strides)) != KILN_OK)
      return status;
    int64_t maskStrides[4] = {args->q_heads * args->q_len * args->kv_len,
                              args->q_len * args->kv_len, args->kv_len, 1};
    if (args->mask)
      std::memcpy(args->mask_strides, maskStrides, sizeof(maskStrides));
    if (args->bias)
      std::memcpy(args->bias_strides, maskStrides, sizeof(maskStrides));
    return KILN_OK;
  });
}

kiln_status kiln_site_check_attention(const kiln_site *site,
                                      const kiln_attention_args *args,
                                      kiln_launch_config *config) {
  return guarded("kiln_site_check_attention", [&] {
    if (!site)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_site_check_attention: NULL site");
    const Manifest &manifest = site->package->manifest;
    const Site &s = manifest.sites[site->index];
    CheckedLaunch launch;
    if (Error error = checkLaunch(manifest, s, args, launch))
      return fail(error);
    if (Error error = checkedConfig(s, launch, config))
      return fail(error);
    return KILN_OK;
  });
}

kiln_status kiln_site_launch_attention(const kiln_site *site,
                                       const kiln_attention_args *args,
                                       void *stream) {
  return guarded("kiln_site_launch_attention", [&] {
    if (!site)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_site_launch_attention: NULL site");
    kiln_package &package = *site->package;
    const Site &s = package.manifest.sites[site->index];
    // Arguments are checked before the driver is touched, so that every
    // argument error is reported the same way with or without a GPU.
    CheckedLaunch launch;
    if (Error error = checkLaunch(package.manifest, s, args, launch))
      return fail(error);
    if (Error error = launchFolded(package, s, launch, stream))
      return fail(error);
    return KILN_OK;
  });
}

kiln_status
kiln_site_check_paged_attention(const kiln_site *site,
                                const kiln_paged_attention_args *args,
                                kiln_launch_config *config) {
  return guarded("kiln_site_check_paged_attention", [&] {
    if (!site)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_site_check_paged_attention: NULL site");
    const Manifest &manifest = site->package->manifest;
    const Site &s = manifest.sites[site->index];
    CheckedLaunch launch;
    if (Error error = checkPagedLaunch(manifest, s, args, launch))
      return fail(error);
    if (Error error = checkedConfig(s, launch, config))
      return fail(error);
    return KILN_OK;
  });
}

kiln_status
kiln_site_launch_paged_attention(const kiln_site *site,
                                 const kiln_paged_attention_args *args,
                                 void *stream) {
  return guarded("kiln_site_launch_paged_attention", [&] {
    if (!site)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_site_launch_paged_attention: NULL site");
    kiln_package &package = *site->package;
    const Site &s = package.manifest.sites[site->index];
    CheckedLaunch launch;
    if (Error error = checkPagedLaunch(package.manifest, s, args, launch))
      return fail(error);
    if (pagedChecksEnabled())
      if (Error error = checkTables(s, launch, stream))
        return fail(error);
    if (Error error = launchFolded(package, s, launch, stream))
      return fail(error);
    return KILN_OK;
  });
}

kiln_status
kiln_site_validate_paged_attention(const kiln_site *site,
                                   const kiln_paged_attention_args *args,
                                   void *stream) {
  return guarded("kiln_site_validate_paged_attention", [&] {
    if (!site)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_site_validate_paged_attention: NULL site");
    kiln_package &package = *site->package;
    const Site &s = package.manifest.sites[site->index];
    CheckedLaunch launch;
    if (Error error = checkPagedLaunch(package.manifest, s, args, launch))
      return fail(error);
    if (Error error = checkTables(s, launch, stream))
      return fail(error);
    return KILN_OK;
  });
}

kiln_status kiln_site_attention_splits(const kiln_site *site,
                                       const kiln_attention_args *args,
                                       int64_t *splits) {
  return guarded("kiln_site_attention_splits", [&] {
    if (!site || !splits)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_site_attention_splits: NULL site or result pointer");
    kiln_package &package = *site->package;
    const Site &s = package.manifest.sites[site->index];
    CheckedLaunch launch;
    if (Error error = checkLaunch(package.manifest, s, args, launch))
      return fail(error);
    if (Error error = splitsOfLaunch(package, s, launch, *splits))
      return fail(error);
    return KILN_OK;
  });
}

kiln_status
kiln_site_paged_attention_splits(const kiln_site *site,
                                 const kiln_paged_attention_args *args,
                                 int64_t *splits) {
  return guarded("kiln_site_paged_attention_splits", [&] {
    if (!site || !splits)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_site_paged_attention_splits: NULL site or result "
                  "pointer");
    kiln_package &package = *site->package;
    const Site &s = package.manifest.sites[site->index];
    CheckedLaunch launch;
    if (Error error = checkPagedLaunch(package.manifest, s, args, launch))
      return fail(error);
    if (Error error = splitsOfLaunch(package, s, launch, *splits))
      return fail(error);
    return KILN_OK;
  });
}

kiln_status kiln_site_workspace_size(const kiln_site *site, int64_t batch,
                                     int64_t q_heads, int64_t kv_heads,
                                     int64_t q_len, int64_t max_kv_len,
                                     int64_t *bytes) {
  return guarded("kiln_site_workspace_size", [&] {
    if (!site || !bytes)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_site_workspace_size: NULL site or result pointer");
    kiln_package &package = *site->package;
    const Site &s = package.manifest.sites[site->index];
    const std::string where = "site \"" + s.name + "\": ";
    const std::pair<const char *, int64_t> sizes[] = {
        {"batch", batch},
        {"q_heads", q_heads},
        {"kv_heads", kv_heads},
        {"q_len", q_len},
        {"max_kv_len", max_kv_len}};
    for (auto [name, value] : sizes)
      if (value <= 0)
        return fail(
            invalid(where + name + " must be positive, got " + str(value)));
    if (q_heads % kv_heads != 0)
      return fail(invalid(where + "q_heads (" + str(q_heads) +
                          ") is not a multiple of kv_heads (" + str(kv_heads) +
                          ")"));
    const Kernel &kernel = package.manifest.kernels[s.kernelIndex];
    *bytes = 0;
    if (!kernel.combineIndex)
      return KILN_OK;
    const CudaDriver *driver = nullptr;
    if (Error error = getCudaDriver(driver))
      return fail(error);
    CUfunction function = nullptr;
    Residency residency;
    if (Error error = getFunction(package, *driver, s.kernelIndex, nullptr,
                                  function, &residency))
      return fail(error);
    int64_t valueHeadDim = kernel.valueHeadDim ? *kernel.valueHeadDim
                           : s.valueHeadDim    ? *s.valueHeadDim
                           : kernel.headDim    ? *kernel.headDim
                                               : 0;
    int64_t kvBlocks =
        (max_kv_len + kernel.kvBlockSize - 1) / kernel.kvBlockSize;
    // The largest workspace any launch within the bounds chooses: fewer
    // sequences or queries can mean more splits. Of the query counts with
    // the same grid, the largest has the most rows.
    kiln_attention_args args{};
    args.q_heads = q_heads;
    args.kv_heads = kv_heads;
    args.kv_len = max_kv_len;
    args.head_dim = kernel.headDim ? *kernel.headDim : 1;
    // The mean lengths (in key blocks) a launch may have: the longest, and
    // for paged launches, which may give their batch's total length, uneven
    // batches at means halving from it.
    std::vector<int64_t> means = {kvBlocks};
    if (kernel.paged)
      for (int64_t mean = kvBlocks / 2; mean >= 1; mean /= 2)
        means.push_back(mean);
    int64_t largest = 0;
    for (int64_t queries = q_len; queries >= 1; --queries) {
      args.batch = 1;
      args.q_len = queries + 1;
      int64_t nextGrid = queries < q_len ? gridBlocks(kernel, args) : -1;
      args.q_len = queries;
      if (gridBlocks(kernel, args) == nextGrid)
        continue;
      for (int64_t sequences = 1; sequences <= batch; ++sequences) {
        args.batch = sequences;
        int64_t blocks = gridBlocks(kernel, args);
        for (int64_t mean : means) {
          int64_t splits =
              chooseSplits(blocks, residency.smCount, residency.blocksPerSM,
                           kvBlocks, sequences, saturatingBlocks(kernel), mean);
          largest = std::max(largest,
                             splitWorkspaceBytes(args, valueHeadDim, splits));
        }
      }
    }
    *bytes = largest;
    return KILN_OK;
  });
}

} // extern "C"
