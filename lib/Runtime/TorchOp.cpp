//===- TorchOp.cpp - kiln::attention's kernel for PyTorch, in C -----------===//
//
// kiln-c/Torch.h: the CUDA kernel of the kiln::attention operator. PyTorch's
// stable C shim is reached through dlsym (the process has PyTorch loaded);
// this file declares the few functions it uses with the shim's C types.
//
// Arguments arrive as a stack of StableIValues in the schema's order
// (q, k, v, mask?, bias?, workspace?, site, num_splits, scale_factor?):
// a tensor is an AtenTensorHandle the kernel owns, an absent optional is 0
// and a present one a pointer to a heap StableIValue the kernel owns, an int
// its bits. The kernel's result goes in the stack's first slot, a handle
// PyTorch takes over.
//
//===----------------------------------------------------------------------===//

#include "kiln-c/Torch.h"

#include "CudaDriver.h"
#include "Package.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using StableIValue = uint64_t;
using AtenTensorHandle = struct AtenTensorOpaque *;
using TorchLibraryHandle = struct TorchLibraryOpaque *;
using AOTITorchError = int32_t;
using BoxedKernel = void (*)(StableIValue *, uint64_t, uint64_t);

/// The shim's functions this kernel calls.
struct Shim {
  AOTITorchError (*libraryInitImpl)(const char *, const char *, const char *,
                                    uint32_t, TorchLibraryHandle *);
  AOTITorchError (*libraryImpl)(TorchLibraryHandle, const char *, BoxedKernel);
  AOTITorchError (*callDispatcher)(const char *, const char *, StableIValue *);
  AOTITorchError (*getDataPtr)(AtenTensorHandle, void **);
  AOTITorchError (*getDim)(AtenTensorHandle, int64_t *);
  AOTITorchError (*getSizes)(AtenTensorHandle, int64_t **);
  AOTITorchError (*getStrides)(AtenTensorHandle, int64_t **);
  AOTITorchError (*getDtype)(AtenTensorHandle, int32_t *);
  AOTITorchError (*getDeviceType)(AtenTensorHandle, int32_t *);
  AOTITorchError (*getDeviceIndex)(AtenTensorHandle, int32_t *);
  AOTITorchError (*emptyStrided)(int64_t, const int64_t *, const int64_t *,
                                 int32_t, int32_t, int32_t, AtenTensorHandle *);
  AOTITorchError (*deleteTensor)(AtenTensorHandle);
  AOTITorchError (*currentStream)(int32_t, void **);
  int32_t (*dtypeUint8)();
  int32_t (*deviceTypeCuda)();
};

Shim shim;
std::string checkedOp;
std::mutex registerMutex;
bool registered = false;
std::atomic<int64_t> plannedCount{0}, checkedCount{0};

/// A signature's launch: the arguments (data pointers aside), the output's
/// sizes and dtype and the workspace's bytes.
struct Launch {
  kiln_attention_args args;
  int64_t outRank = 0;
  std::array<int64_t, 4> outSizes{};
  int32_t outDtype = 0;
  int64_t workspaceBytes = 0;
};

struct Plan {
  std::vector<int64_t> signature;
  Launch launch;
};

struct SiteEntry {
  const kiln_site *site = nullptr;
  std::vector<Plan> plans;
};

std::mutex tableMutex;
std::vector<SiteEntry> table;

/// The call being handed to the checked operator on this thread, whose
/// plan kiln_torch_add_plan files.
thread_local const std::vector<int64_t> *pendingSignature = nullptr;
thread_local int64_t pendingHandle = -1;
thread_local std::string checkedError;

constexpr uint64_t kArguments = 9;
enum Slot { Q, K, V, Mask, Bias, Workspace, SiteArg, Splits, ScaleFactor };

void *symbol(void *library, const char *name) {
  void *found = library ? dlsym(library, name) : nullptr;
  return found ? found : dlsym(RTLD_DEFAULT, name);
}

template <typename T>
bool bind(T &function, void *library, const char *name,
          std::vector<std::string> &missing) {
  function = reinterpret_cast<T>(symbol(library, name));
  if (!function)
    missing.push_back(name);
  return function != nullptr;
}

void *openLoaded(const char *path) {
  if (!path || !*path)
    return nullptr;
  // RTLD_NOLOAD: only a library the process has; never a second copy.
  return dlopen(path, RTLD_NOW | RTLD_NOLOAD);
}

/// The tensor an optional slot holds, or null.
AtenTensorHandle optionalTensor(StableIValue value) {
  if (value == 0)
    return nullptr;
  return reinterpret_cast<AtenTensorHandle>(
      *reinterpret_cast<StableIValue *>(value));
}

AtenTensorHandle tensorAt(StableIValue value) {
  return reinterpret_cast<AtenTensorHandle>(value);
}

void check(AOTITorchError error, const char *what) {
  if (error != 0)
    throw std::runtime_error(
        fmt::format("kiln::attention: PyTorch's {} failed", what));
}

/// Appends a tensor's part of a signature: whether present, then its rank,
/// sizes, strides, dtype, device type and index.
void describe(AtenTensorHandle tensor, std::vector<int64_t> &signature) {
  if (!tensor) {
    signature.push_back(-1);
    return;
  }
  int64_t rank = 0, *sizes = nullptr, *strides = nullptr;
  int32_t dtype = 0, deviceType = 0, deviceIndex = 0;
  check(shim.getDim(tensor, &rank), "aoti_torch_get_dim");
  check(shim.getSizes(tensor, &sizes), "aoti_torch_get_sizes");
  check(shim.getStrides(tensor, &strides), "aoti_torch_get_strides");
  check(shim.getDtype(tensor, &dtype), "aoti_torch_get_dtype");
  check(shim.getDeviceType(tensor, &deviceType), "aoti_torch_get_device_type");
  check(shim.getDeviceIndex(tensor, &deviceIndex),
        "aoti_torch_get_device_index");
  signature.push_back(rank);
  signature.insert(signature.end(), sizes, sizes + rank);
  signature.insert(signature.end(), strides, strides + rank);
  signature.push_back(dtype);
  signature.push_back(deviceType);
  signature.push_back(deviceIndex);
}

void *dataOf(AtenTensorHandle tensor) {
  void *data = nullptr;
  check(shim.getDataPtr(tensor, &data), "aoti_torch_get_data_ptr");
  return data;
}

/// Whether the current CUDA context is on device `index` (the runtime
/// launches in the current context; a CUdevice is its ordinal).
bool currentDeviceIs(int32_t index) {
  const kiln::rt::CudaDriver *driver = nullptr;
  if (kiln::rt::getCudaDriver(driver))
    return false;
  CUcontext context = nullptr;
  CUdevice device = -1;
  return driver->cuCtxGetCurrent(&context) == CUDA_SUCCESS && context &&
         driver->cuCtxGetDevice(&device) == CUDA_SUCCESS && device == index;
}

/// Frees the tensor handles of a stack the kernel consumed itself.
struct Owned {
  StableIValue *stack;
  ~Owned() {
    for (Slot slot : {Q, K, V})
      if (AtenTensorHandle tensor = tensorAt(stack[slot]))
        shim.deleteTensor(tensor);
    for (Slot slot : {Mask, Bias, Workspace, ScaleFactor}) {
      if (stack[slot] == 0)
        continue;
      auto *boxed = reinterpret_cast<StableIValue *>(stack[slot]);
      if (AtenTensorHandle tensor = tensorAt(*boxed))
        shim.deleteTensor(tensor);
      delete boxed;
    }
  }
};

/// Hands the call, its stack unchanged, to the checked operator.
void handToChecked(StableIValue *stack, const std::vector<int64_t> *signature,
                   int64_t handle) {
  ++checkedCount;
  pendingSignature = signature;
  pendingHandle = handle;
  checkedError.clear();
  AOTITorchError error = shim.callDispatcher(checkedOp.c_str(), "", stack);
  pendingSignature = nullptr;
  pendingHandle = -1;
  if (error != 0)
    throw std::runtime_error(
        checkedError.empty()
            ? fmt::format("{} failed (its error is printed above)", checkedOp)
            : checkedError);
}

/// Launches a planned call; frees the stack's arguments and returns the
/// output (whose handle the caller gives PyTorch).
AtenTensorHandle launchPlanned(StableIValue *stack, Launch &plan,
                               const kiln_site *site, int32_t deviceType,
                               int32_t deviceIndex) {
  Owned owned{stack};
  std::array<int64_t, 4> outStrides{};
  int64_t stride = 1;
  for (int64_t d = plan.outRank - 1; d >= 0; --d) {
    outStrides[d] = stride;
    stride *= plan.outSizes[d];
  }
  AtenTensorHandle out = nullptr;
  check(shim.emptyStrided(plan.outRank, plan.outSizes.data(), outStrides.data(),
                          plan.outDtype, deviceType, deviceIndex, &out),
        "aoti_torch_empty_strided");
  AtenTensorHandle workspace = nullptr;
  try {
    kiln_attention_args &args = plan.args;
    args.out = dataOf(out);
    if (args.batch != 0) {
      args.q = dataOf(tensorAt(stack[Q]));
      args.k = dataOf(tensorAt(stack[K]));
      args.v = dataOf(tensorAt(stack[V]));
      if (AtenTensorHandle mask = optionalTensor(stack[Mask]))
        args.mask = dataOf(mask);
      if (AtenTensorHandle bias = optionalTensor(stack[Bias]))
        args.bias = dataOf(bias);
      // The factor's sizes, strides, dtype and device are part of the
      // plan's signature: a plan serves only a factor the checked launch
      // accepted (f32 on q's device, one element, or q_heads contiguous
      // ones for a per-head site).
      if (AtenTensorHandle factor = optionalTensor(stack[ScaleFactor]))
        args.scale_factor = static_cast<const float *>(dataOf(factor));
      if (plan.workspaceBytes) {
        // The call's own, freed when it returns: PyTorch's allocator
        // reuses it only in the stream's order.
        int64_t size = plan.workspaceBytes, one = 1;
        check(shim.emptyStrided(1, &size, &one, shim.dtypeUint8(), deviceType,
                                deviceIndex, &workspace),
              "aoti_torch_empty_strided");
        args.workspace = dataOf(workspace);
      }
      void *stream = nullptr;
      check(shim.currentStream(deviceIndex, &stream),
            "aoti_torch_get_current_cuda_stream");
      if (kiln_site_launch_attention(site, &args, stream) != KILN_OK)
        throw std::runtime_error(kiln_last_error());
    }
  } catch (...) {
    if (workspace)
      shim.deleteTensor(workspace);
    shim.deleteTensor(out);
    throw;
  }
  if (workspace)
    shim.deleteTensor(workspace);
  return out;
}

void attentionKernel(StableIValue *stack, uint64_t arguments,
                     uint64_t results) {
  if (arguments != kArguments || results != 1)
    throw std::runtime_error(fmt::format(
        "kiln::attention: the kernel takes {} arguments and gives 1 result, "
        "the schema has {} and {}",
        kArguments, arguments, results));
  int64_t handle = static_cast<int64_t>(stack[SiteArg]);
  AtenTensorHandle q = tensorAt(stack[Q]);
  std::vector<int64_t> signature;
  signature.reserve(64);
  signature.push_back(static_cast<int64_t>(stack[Splits]));
  for (AtenTensorHandle tensor :
       {q, tensorAt(stack[K]), tensorAt(stack[V]), optionalTensor(stack[Mask]),
        optionalTensor(stack[Bias]), optionalTensor(stack[ScaleFactor])})
    describe(tensor, signature);
  // q's device: [splits, rank, sizes..., strides..., dtype, type, index].
  int64_t qRank = signature[1];
  int32_t deviceType = static_cast<int32_t>(signature[2 + 2 * qRank + 1]);
  int32_t deviceIndex = static_cast<int32_t>(signature[2 + 2 * qRank + 2]);

  const kiln_site *site = nullptr;
  Launch plan;
  bool found = false;
  if (stack[Workspace] == 0 && deviceType == shim.deviceTypeCuda()) {
    std::lock_guard<std::mutex> lock(tableMutex);
    if (handle >= 0 && static_cast<size_t>(handle) < table.size()) {
      site = table[handle].site;
      for (const Plan &candidate : table[handle].plans)
        if (candidate.signature == signature) {
          plan = candidate.launch;
          found = true;
          break;
        }
    }
  }
  if (stack[Workspace] != 0 || deviceType != shim.deviceTypeCuda()) {
    handToChecked(stack, nullptr, -1);  // nothing a plan could serve
    return;
  }
  if (!found) {  // the checked launch binds the site and files the plan
    handToChecked(stack, &signature, handle);
    return;
  }
  if (!currentDeviceIs(deviceIndex)) {  // the checked launch switches
    handToChecked(stack, nullptr, -1);
    return;
  }

  AtenTensorHandle out = launchPlanned(stack, plan, site, deviceType, deviceIndex);
  ++plannedCount;
  stack[0] = reinterpret_cast<StableIValue>(out);  // PyTorch's now
}

} // namespace

extern "C" {

kiln_status kiln_torch_register_attention(const char *torchLibrary,
                                          const char *torchCudaLibrary,
                                          const char *checked) {
  std::lock_guard<std::mutex> lock(registerMutex);
  if (registered)
    return KILN_OK;
  if (!checked || !*checked) {
    kiln::rt::setLastError("kiln_torch_register_attention: no checked operator");
    return KILN_INVALID_ARGUMENT;
  }
  void *cpu = openLoaded(torchLibrary);
  void *cuda = openLoaded(torchCudaLibrary);
  std::vector<std::string> missing;
  Shim found{};
  bind(found.libraryInitImpl, cpu, "aoti_torch_library_init_impl", missing);
  bind(found.libraryImpl, cpu, "aoti_torch_library_impl", missing);
  bind(found.callDispatcher, cpu, "aoti_torch_call_dispatcher", missing);
  bind(found.getDataPtr, cpu, "aoti_torch_get_data_ptr", missing);
  bind(found.getDim, cpu, "aoti_torch_get_dim", missing);
  bind(found.getSizes, cpu, "aoti_torch_get_sizes", missing);
  bind(found.getStrides, cpu, "aoti_torch_get_strides", missing);
  bind(found.getDtype, cpu, "aoti_torch_get_dtype", missing);
  bind(found.getDeviceType, cpu, "aoti_torch_get_device_type", missing);
  bind(found.getDeviceIndex, cpu, "aoti_torch_get_device_index", missing);
  bind(found.emptyStrided, cpu, "aoti_torch_empty_strided", missing);
  bind(found.deleteTensor, cpu, "aoti_torch_delete_tensor_object", missing);
  bind(found.currentStream, cuda, "aoti_torch_get_current_cuda_stream", missing);
  bind(found.dtypeUint8, cpu, "aoti_torch_dtype_uint8", missing);
  bind(found.deviceTypeCuda, cpu, "aoti_torch_device_type_cuda", missing);
  if (!missing.empty()) {
    kiln::rt::setLastError(
        fmt::format("kiln_torch_register_attention: PyTorch's C shim lacks {}",
                    fmt::join(missing, ", ")));
    return KILN_UNSUPPORTED;
  }
  TorchLibraryHandle library = nullptr;
  if (found.libraryInitImpl("kiln", "CUDA", __FILE__, __LINE__, &library) != 0 ||
      !library) {
    kiln::rt::setLastError("kiln_torch_register_attention: PyTorch refused a "
                         "library for kiln's CUDA kernels");
    return KILN_INTERNAL_ERROR;
  }
  shim = found;
  checkedOp = checked;
  if (found.libraryImpl(library, "attention", &attentionKernel) != 0) {
    kiln::rt::setLastError("kiln_torch_register_attention: PyTorch refused the "
                         "kernel of kiln::attention (is one registered "
                         "already for CUDA?)");
    return KILN_INTERNAL_ERROR;
  }
  // `library` lives as long as the process: its registration does.
  registered = true;
  return KILN_OK;
}

kiln_status kiln_torch_bind_site(int64_t handle, const kiln_site *site) {
  if (handle < 0 || !site) {
    kiln::rt::setLastError("kiln_torch_bind_site: a negative handle or no site");
    return KILN_INVALID_ARGUMENT;
  }
  std::lock_guard<std::mutex> lock(tableMutex);
  if (static_cast<size_t>(handle) >= table.size())
    table.resize(handle + 1);
  if (table[handle].site != site)
    table[handle] = SiteEntry{site, {}};
  return KILN_OK;
}

kiln_status kiln_torch_add_plan(int64_t handle, const kiln_attention_args *args,
                                int64_t outRank, const int64_t *outSizes,
                                int64_t workspaceBytes) {
  if (!pendingSignature || handle != pendingHandle)
    return KILN_OK;  // not a call the kernel handed over
  if (!args || outRank < 1 || outRank > 4 || !outSizes || workspaceBytes < 0) {
    kiln::rt::setLastError("kiln_torch_add_plan: bad arguments");
    return KILN_INVALID_ARGUMENT;
  }
  Plan plan;
  plan.signature = *pendingSignature;
  plan.launch.args = *args;
  plan.launch.outRank = outRank;
  std::copy(outSizes, outSizes + outRank, plan.launch.outSizes.begin());
  // The output has q's dtype: the dtype entry of q's part of the signature.
  int64_t qRank = plan.signature[1];
  plan.launch.outDtype = static_cast<int32_t>(plan.signature[2 + 2 * qRank]);
  plan.launch.workspaceBytes = workspaceBytes;
  std::lock_guard<std::mutex> lock(tableMutex);
  if (static_cast<size_t>(handle) >= table.size() || !table[handle].site)
    return KILN_OK;
  auto &plans = table[handle].plans;
  if (plans.size() >= 64)  // a site called with ever new shapes
    plans.erase(plans.begin());
  plans.push_back(std::move(plan));
  return KILN_OK;
}

void kiln_torch_set_error(const char *message) {
  checkedError = message ? message : "";
}

void kiln_torch_counts(int64_t *planned, int64_t *checked) {
  if (planned)
    *planned = plannedCount.load();
  if (checked)
    *checked = checkedCount.load();
}

} // extern "C"
