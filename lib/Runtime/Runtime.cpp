//===- Runtime.cpp - Kiln runtime C API -----------------------------------===//
//
// Packages, sites, argument checks and launches. Every C entry point catches
// everything: a failure becomes a status and a thread-local message.
//
//===----------------------------------------------------------------------===//

#include "kiln-c/Runtime.h"

#include "CudaDriver.h"
#include "Manifest.h"

#include <cstring>
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
  std::vector<CUfunction> functions; // per kernel index; null until needed
};

} // namespace

struct kiln_site {
  kiln_package *package = nullptr;
  size_t index = 0;
};

struct kiln_package {
  Manifest manifest;
  std::vector<kiln_site> sites;
  std::mutex mutex; // guards `modules`
  std::vector<LoadedModule> modules;
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
  void *params[kMaxKernelArgs];
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

/// The grid and the kernel parameters of a checked launch. `paged` holds a
/// paged launch's own values (null otherwise); `args` then holds the rest,
/// with the caches as k and v.
Error fillPlan(const Kernel &kernel, const Site &site, const std::string &where,
               const kiln_attention_args &args, const PagedValues *paged,
               LaunchPlan &plan) {
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

/// Checks a launch of `site` with `args` and computes the launch plan. Never
/// touches the CUDA driver.
Error planAttention(const Manifest &manifest, const Site &site,
                    const kiln_attention_args *argsPointer, LaunchPlan &plan) {
  const std::string where = "site \"" + site.name + "\": ";
  if (!argsPointer)
    return invalid(where + "the argument struct is NULL");
  const kiln_attention_args &args = *argsPointer;
  const Kernel &kernel = manifest.kernels[site.kernelIndex];
  if (site.paged)
    return invalid(where + "a paged-attention site: launch it with "
                           "kiln_site_launch_paged_attention");

  if (Error error = checkAttention(kernel, site, where, args))
    return error;
  return fillPlan(kernel, site, where, args, nullptr, plan);
}

/// Checks a paged launch of `site` and computes the launch plan. Never
/// touches the CUDA driver.
Error planPagedAttention(const Manifest &manifest, const Site &site,
                         const kiln_paged_attention_args *argsPointer,
                         LaunchPlan &plan) {
  const std::string where = "site \"" + site.name + "\": ";
  if (!argsPointer)
    return invalid(where + "the argument struct is NULL");
  if (!site.paged)
    return invalid(where + "not a paged-attention site: launch it with "
                           "kiln_site_launch_attention");
  const kiln_paged_attention_args &paged = *argsPointer;
  const Kernel &kernel = manifest.kernels[site.kernelIndex];

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
  if (Error error = checkAttention(kernel, site, where, args))
    return error;
  PagedValues values;
  values.pageTable = paged.page_table;
  values.kvLens = paged.kv_lens;
  values.maxPages = paged.max_pages;
  values.numPages = paged.num_pages;
  values.pageSize = paged.page_size;
  values.pageTableStride = paged.page_table_strides[0];
  return fillPlan(kernel, site, where, args, &values, plan);
}

/// The id of a CUDA context that is not reused after the context dies, where
/// the driver has one.
unsigned long long contextIdOf(const CudaDriver &driver, CUcontext context) {
  unsigned long long id = 0;
  if (driver.cuCtxGetId && driver.cuCtxGetId(context, &id) == CUDA_SUCCESS)
    return id;
  return static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(context));
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
  loaded->functions.assign(manifest.kernels.size(), nullptr);
  return Error::ok();
}

/// The NULL, legacy and per-thread default stream handles, which belong to
/// whatever context is current.
bool isSpecialStream(CUstream stream) {
  return stream == nullptr || stream == CU_STREAM_LEGACY ||
         stream == CU_STREAM_PER_THREAD;
}

/// The function of `kernelIndex` in the current context (or, when none is
/// current, `stream`'s), loading the module the first time.
Error getFunction(kiln_package &package, const CudaDriver &driver,
                  size_t kernelIndex, CUstream stream, CUfunction &function) {
  CUcontext context = nullptr;
  CUresult result = driver.cuCtxGetCurrent(&context);
  if (result != CUDA_SUCCESS)
    return {KILN_CUDA_ERROR,
            describeCudaError(driver, "cuCtxGetCurrent", result)};
  if (!context && !isSpecialStream(stream)) {
    // No context is current on this thread: use the caller's stream's, and
    // keep it current as the CUDA runtime would.
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
  return Error::ok();
}

} // namespace

//===----------------------------------------------------------------------===//
// C API
//===----------------------------------------------------------------------===//

/// Launches a checked plan of site `s` on `stream`.
kiln_status launchPlanned(kiln_package &package, const Site &s,
                          LaunchPlan &plan, void *stream) {
  const CudaDriver *driver = nullptr;
  if (Error error = getCudaDriver(driver))
    return fail(error);
  CUfunction function = nullptr;
  if (Error error = getFunction(package, *driver, s.kernelIndex,
                                static_cast<CUstream>(stream), function))
    return fail(error);
  const kiln_launch_config &c = plan.config;
  CUresult result = driver->cuLaunchKernel(
      function, c.grid[0], c.grid[1], c.grid[2], c.block[0], c.block[1],
      c.block[2], c.dynamic_shared_bytes, static_cast<CUstream>(stream),
      plan.params, nullptr);
  if (result != CUDA_SUCCESS)
    return fail(KILN_CUDA_ERROR,
                describeCudaError(*driver, "cuLaunchKernel", result) +
                    " for site \"" + s.name + "\" (kernel \"" + s.kernelName +
                    "\", grid " + str(c.grid[0]) + "x" + str(c.grid[1]) + "x" +
                    str(c.grid[2]) + ", block " + str(c.block[0]) + "x" +
                    str(c.block[1]) + "x" + str(c.block[2]) + ")");
  return KILN_OK;
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
    LaunchPlan plan;
    if (Error error =
            planAttention(manifest, manifest.sites[site->index], args, plan))
      return fail(error);
    if (config)
      *config = plan.config;
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
    LaunchPlan plan;
    if (Error error = planAttention(package.manifest, s, args, plan))
      return fail(error);
    return launchPlanned(package, s, plan, stream);
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
    LaunchPlan plan;
    if (Error error = planPagedAttention(manifest, manifest.sites[site->index],
                                         args, plan))
      return fail(error);
    if (config)
      *config = plan.config;
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
    LaunchPlan plan;
    if (Error error = planPagedAttention(package.manifest, s, args, plan))
      return fail(error);
    return launchPlanned(package, s, plan, stream);
  });
}

} // extern "C"
