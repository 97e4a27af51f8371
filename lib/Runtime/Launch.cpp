//===- Launch.cpp - Launching a checked launch ----------------------------===//

#include "Launch.h"

#include "Package.h"
#include "SplitModel.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <limits>

namespace kiln {
namespace rt {

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

namespace {

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
  /// Tensor-map parameters (passed by value, 64-byte aligned): Q, K, V
  /// and a staged mask and bias.
  CUtensorMap maps[5];
  size_t numMaps = 0;
  void *params[kMaxKernelArgs] = {};
  size_t numParams = 0;
};

Error encodeTermMap(const CudaDriver &driver, const Kernel &kernel,
                    const KernelArg &arg, const kiln_attention_args &args,
                    const std::string &where, CUtensorMap &map);

/// Encodes the TMA tensor map of `arg` for this launch: the tensor as
/// {head dim, sequence, heads, batch} with its strides in bytes, boxes of
/// the argument's (columns, rows), 128-byte swizzle, zeros outside. Fails
/// with KILN_UNSUPPORTED where the driver cannot encode it (the caller then
/// takes the portable kernel).
Error encodeTensorMap(const CudaDriver *driver, const Kernel &kernel,
                      const KernelArg &arg, const kiln_attention_args &args,
                      const std::string &where, CUtensorMap &map) {
  if (!driver || !driver->cuTensorMapEncodeTiled)
    return {
        KILN_UNSUPPORTED,
        fmt::format("{}kernel \"{}\" needs cuTensorMapEncodeTiled (CUDA 12+)",
                    where, kernel.name)};
  if (arg.tensor == Tensor::Mask || arg.tensor == Tensor::Bias)
    return encodeTermMap(*driver, kernel, arg, args, where, map);
  Tensor tensor = arg.tensor;
  kiln_dtype dtype = tensorDtype(args, tensor);
  if (dtype != KILN_DTYPE_F16 && dtype != KILN_DTYPE_BF16)
    return invalid("{}{} has dtype {} but kernel \"{}\" takes f16 or bf16",
                   where, tensorName(tensor), dtypeName(dtype), kernel.name);
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
            fmt::format(
                "{}{} for {}", where,
                describeCudaError(*driver, "cuTensorMapEncodeTiled", result),
                tensorName(tensor))};
  return Error::ok();
}

/// Encodes the tensor map of a staged mask or bias (`arg`'s tensor): the
/// term over its logical [batch, q_heads, q_len, kv_len] as {kv_len, q_len,
/// q_heads, batch}, a broadcast (zero-stride) axis as one of size 1, boxes
/// of the argument's (columns, rows) swizzled by its bytes, zeros outside.
/// Fails with KILN_UNSUPPORTED where TMA cannot read the view (keys not
/// contiguous, a stride or the address not a multiple of 16 bytes): the
/// caller then takes the portable kernel, which reads any view.
Error encodeTermMap(const CudaDriver &driver, const Kernel &kernel,
                    const KernelArg &arg, const kiln_attention_args &args,
                    const std::string &where, CUtensorMap &map) {
  kiln_dtype dtype = tensorDtype(args, arg.tensor);
  const void *pointer = tensorPointer(args, arg.tensor);
  const int64_t *strides = tensorStrides(args, arg.tensor);
  int64_t elementBytes = kiln_dtype_size(dtype);
  if (arg.dtype != KILN_DTYPE_NONE && dtype != arg.dtype)
    return invalid("{}{} has dtype {} but kernel \"{}\" stages {}", where,
                   tensorName(arg.tensor), dtypeName(dtype), kernel.name,
                   dtypeName(arg.dtype));
  auto unsupported = [&](const std::string &why) {
    return Error{KILN_UNSUPPORTED,
                 fmt::format("{}{} cannot be staged by TMA: {}", where,
                             tensorName(arg.tensor), why)};
  };
  if (reinterpret_cast<uintptr_t>(pointer) % 16 != 0)
    return unsupported("its address is not 16-byte aligned");
  if (strides[3] != 1)
    return unsupported("its keys are not contiguous");
  // A one-row tile (a key-padding mask's) serves every query only when the
  // view broadcasts over them.
  if (arg.boxRows == 1 && strides[2] != 0 && args.q_len > 1)
    return unsupported("the kernel stages one row of it for every query, "
                       "but its rows differ");
  int64_t sizes[4] = {args.batch, args.q_heads, args.q_len, args.kv_len};
  // Inner first: keys, queries, heads, batch.
  cuuint64_t dims[4] = {cuuint64_t(args.kv_len), 1, 1, 1};
  cuuint64_t byteStrides[3];
  int64_t span = args.kv_len * elementBytes;
  for (int i = 1; i < 4; ++i) {
    int axis = 3 - i;
    int64_t stride = strides[axis] * elementBytes;
    if (strides[axis] != 0) {
      dims[i] = cuuint64_t(sizes[axis]);
    } else {
      // Never stepped over (a single index); any valid stride.
      stride = (span + 15) / 16 * 16;
    }
    if (stride <= 0 || stride % 16 != 0)
      return unsupported(fmt::format("its stride over {} is not a positive "
                                     "multiple of 16 bytes",
                                     i == 1 ? "queries" : i == 2 ? "heads"
                                                                 : "batch"));
    byteStrides[i - 1] = cuuint64_t(stride);
    span = std::max<int64_t>(span, stride * int64_t(dims[i]));
  }
  CUtensorMapDataType type =
      dtype == KILN_DTYPE_BF16  ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
      : dtype == KILN_DTYPE_F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
      : dtype == KILN_DTYPE_F32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                : CU_TENSOR_MAP_DATA_TYPE_UINT8;
  cuuint32_t box[4] = {cuuint32_t(arg.boxColumns), cuuint32_t(arg.boxRows), 1,
                       1};
  cuuint32_t elementStrides[4] = {1, 1, 1, 1};
  CUresult result = driver.cuTensorMapEncodeTiled(
      &map, type, 4, const_cast<void *>(pointer), dims, byteStrides, box,
      elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      arg.swizzleBytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                             : CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS)
    return unsupported(
        describeCudaError(driver, "cuTensorMapEncodeTiled", result));
  return Error::ok();
}

/// The grid and the kernel parameters of a checked launch with `splits`
/// splits of its keys.
Error fillPlan(const Kernel &kernel, const Site &site, const std::string &where,
               const CheckedLaunch &launch, int64_t splits, LaunchPlan &plan,
               const CudaDriver *driver = nullptr,
               const Residency *residency = nullptr) {
  const kiln_attention_args &args = launch.args;
  const PagedValues *paged = launch.paged ? &*launch.paged : nullptr;
  // Launch configuration.
  static const int64_t gridLimits[3] = {std::numeric_limits<int32_t>::max(),
                                        65535, 65535};
  static const char *axisNames[3] = {"x", "y", "z"};
  for (int axis = 0; axis < 3; ++axis) {
    const GridRule &rule = kernel.grid[axis];
    int64_t value = rule.constant;
    std::string formula =
        rule.dims.empty() ? fmt::format("{}", rule.constant) : "";
    for (Dim dim : rule.dims) {
      int64_t factor = dimValue(args, dim);
      if (value > std::numeric_limits<int64_t>::max() / factor)
        return invalid("{}grid.{} overflows", where, axisNames[axis]);
      value *= factor;
      formula += (formula.empty() ? "" : "*") + std::string(dimName(dim));
    }
    if (rule.planItems) {
      if (!paged || !paged->plan)
        return invalid("{}kernel \"{}\" is ragged: launch it with a plan",
                       where, kernel.name);
      value = paged->planItems;
      formula = "plan_items";
    }
    if (rule.multiprocessors) {
      // The kernel walks ceil(q_len / rows) · q_heads · batch items in
      // 32-bit arithmetic; past that (or without the device's figures) the
      // caller takes another kernel.
      int64_t blocks = (args.q_len + kernel.rowsPerBlock - 1) /
                       kernel.rowsPerBlock;
      if (!residency || residency->smCount <= 0 ||
          blocks > std::numeric_limits<int32_t>::max() / args.q_heads /
                       args.batch)
        return {KILN_UNSUPPORTED,
                fmt::format("{}kernel \"{}\" is persistent: its work items "
                            "do not fit, or the device's SM count is unknown",
                            where, kernel.name)};
      value = blocks * args.q_heads * args.batch;
      if (!rule.multiprocessorsUpToKvLen ||
          args.kv_len <= rule.multiprocessorsUpToKvLen)
        value = std::min(value, residency->smCount * residency->blocksPerSM);
      formula = "multiprocessors";
    }
    for (Dim dim : rule.perDims) {
      int64_t divisor = dimValue(args, dim);
      if (divisor <= 0 || value % divisor != 0)
        return invalid("{}grid.{}: {} = {} is not a multiple of {} = {}", where,
                       axisNames[axis], formula, value, dimName(dim), divisor);
      value /= divisor;
      formula += "/" + std::string(dimName(dim));
    }
    value = (value + rule.ceilDiv - 1) / rule.ceilDiv;
    if (rule.timesSplits) {
      value *= splits;
      formula += "*num_splits";
    }
    if (value > gridLimits[axis])
      return invalid(
          "{}grid.{} = ceil({} / {}) = {} is over CUDA's limit of {}", where,
          axisNames[axis], formula, rule.ceilDiv, value, gridLimits[axis]);
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
        return invalid("{}{} has dtype {} but kernel \"{}\" takes {}", where,
                       arg.name, dtypeName(tensorDtype(args, arg.tensor)),
                       kernel.name, dtypeName(arg.dtype));
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
    case ArgSource::PagedPointer: {
      if (!paged)
        return invalid("{}kernel \"{}\" is paged", where, kernel.name);
      const void *pointers[] = {paged->pageTable, paged->kvLens,
                                paged->qOffsets, paged->plan,
                                paged->kvOffsets};
      value.pointer = static_cast<uint64_t>(
          reinterpret_cast<uintptr_t>(pointers[arg.paged]));
      continue;
    }
    case ArgSource::PagedDim: {
      if (!paged)
        return invalid("{}kernel \"{}\" is paged", where, kernel.name);
      const int64_t values[] = {paged->maxPages, paged->numPages,
                                paged->pageSize, paged->sequences};
      integer = values[arg.paged];
      what = arg.name;
      break;
    }
    case ArgSource::Append:
      // Append kernels are launched by launchAppend alone.
      return invalid("{}kernel \"{}\" is a paged-append kernel", where,
                     kernel.name);
    case ArgSource::Lse:
      if (!args.lse)
        return invalid("{}kernel \"{}\" takes the log-sum-exp: lse is NULL",
                       where, kernel.name);
      value.pointer =
          static_cast<uint64_t>(reinterpret_cast<uintptr_t>(args.lse));
      continue;
    case ArgSource::GradPointer:
    case ArgSource::GradStride:
      if (!launch.grad)
        return invalid("{}kernel \"{}\" is a backward pass: launch it with "
                       "kiln_site_launch_attention_grad",
                       where, kernel.name);
      if (arg.source == ArgSource::GradPointer) {
        value.pointer = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(
            launch.grad->pointers[arg.paged]));
        continue;
      }
      integer = launch.grad->strides[arg.paged][arg.axis];
      what = arg.name;
      break;
    case ArgSource::ScaleFactor:
      // A per-head site's factor holds q_heads floats: the pointer is all
      // a launch sees of it (the torch and Python paths check the count).
      if (!args.scale_factor)
        return invalid("{}the site takes a run-time scale: scale_factor is "
                       "NULL",
                       where);
      value.pointer = static_cast<uint64_t>(
          reinterpret_cast<uintptr_t>(args.scale_factor));
      continue;
    case ArgSource::KvScale:
      if (!paged)
        return invalid("{}kernel \"{}\" is paged", where, kernel.name);
      value.pointer = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(
          arg.paged == 0 ? paged->kScale : paged->vScale));
      continue;
    case ArgSource::PageTableStride:
      if (!paged)
        return invalid("{}kernel \"{}\" is paged", where, kernel.name);
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
        return invalid("{}kernel \"{}\" takes more than {} tensor maps",
                       where, kernel.name, std::size(plan.maps));
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
        return invalid(
            "{}{} = {} does not fit kernel \"{}\"'s 32-bit argument \"{}\"",
            where, what, integer, kernel.name, arg.name);
      value.i32 = static_cast<int32_t>(integer);
    } else {
      value.i64 = integer;
    }
  }
  return Error::ok();
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
  if (Error error = package.modules.getFunction(driver, kernelIndex, stream,
                                                function, nullptr, &loaded))
    return error;
  if (!function)
    return {KILN_UNSUPPORTED,
            fmt::format("kernel \"{}\" is not in the loaded target's PTX",
                        package.manifest.kernels[kernelIndex].name)};
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
            fmt::format("{} for site \"{}\" (kernel \"{}\", grid {}x{}x{}, "
                        "block {}x{}x{}{})",
                        describeCudaError(driver, call, result), s.name,
                        package.manifest.kernels[kernelIndex].name, c.grid[0],
                        c.grid[1], c.grid[2], c.block[0], c.block[1],
                        c.block[2],
                        cluster > 1 ? fmt::format(", clusters of {}", cluster)
                                    : std::string())};
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

} // namespace

Error checkedConfig(const Site &s, const CheckedLaunch &launch,
                    kiln_launch_config *config) {
  if (launch.empty) {
    if (config)
      *config = kiln_launch_config{};
    return Error::ok();
  }
  // A run-time scale given to a site that takes none would be ignored: the
  // caller expects it applied.
  if (launch.args.scale_factor && !s.scaleFactor)
    return invalid("{}scale_factor is set but the site takes no run-time "
                   "scale (its scale is the constant {})",
                   messagePrefix(s), s.scale);
  LaunchPlan plan;
  int64_t splits = std::max<int64_t>(launch.args.num_splits, 1);
  // A batch larger than one grid holds: its first launch's.
  int64_t most = sequencesPerLaunch(*launch.kernel, launch, splits);
  if (Error error = fillPlan(
          *launch.kernel, s, messagePrefix(s),
          launch.args.batch > most ? sequenceRange(launch, 0, most) : launch,
          splits, plan))
    return error;
  if (config)
    *config = plan.config;
  return Error::ok();
}

namespace {

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
  // A persistent kernel's grid is the blocks the device holds.
  Residency residency;
  bool persistent = kernel.grid[0].multiprocessors;
  if (Error error = package.modules.getFunction(
          driver, index, stream, function, persistent ? &residency : nullptr))
    return error;
  if (!function)
    return Error::ok();
  LaunchPlan plan;
  Error error = fillPlan(kernel, s, messagePrefix(s), launch, 1, plan, &driver,
                         &residency);
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

/// Launches a checked launch of site `s` on `stream`: the kernel with the
/// split count decided here and, when it splits, either in clusters that
/// reduce the splits themselves or with the combine kernel after it on the
/// same stream.
Error launchChecked(kiln_package &package, const Site &s,
                    const CheckedLaunch &launch, void *streamHandle) {
  const std::string where = messagePrefix(s);
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
  // Ragged kernels never reduce their splits in clusters (their plan's
  // empty items would leave clusters short): the combine kernel does.
  int64_t cluster = 0;
  if (!launch.kernel->ragged)
    if (Error error = package.modules.clusterOfSplits(
            *driver, s.kernelIndex, plan.config, stream, splits, cluster))
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

} // namespace

Error gradConfigs(const Manifest &manifest, const Site &s,
                  const CheckedLaunch &launch, kiln_launch_config configs[2]) {
  kiln_launch_config found[2] = {};
  if (!launch.empty) {
    const size_t passes[2] = {s.kernelIndex, *s.keyPassIndex};
    for (int i = 0; i < 2; ++i) {
      LaunchPlan plan;
      if (Error error = fillPlan(manifest.kernels[passes[i]], s,
                                 messagePrefix(s), launch, 1, plan))
        return error;
      found[i] = plan.config;
    }
  }
  if (configs)
    std::copy(found, found + 2, configs);
  return Error::ok();
}

Error launchGrad(kiln_package &package, const Site &s,
                 const CheckedLaunch &launch, void *streamHandle) {
  if (launch.empty)
    return Error::ok();
  if (Error error = gradConfigs(package.manifest, s, launch, nullptr))
    return error;
  const CudaDriver *driver = nullptr;
  if (Error error = getCudaDriver(driver))
    return error;
  auto stream = static_cast<CUstream>(streamHandle);
  // The query pass writes D, which the key pass reads: the same stream
  // orders them.
  for (size_t index : {s.kernelIndex, *s.keyPassIndex}) {
    LaunchPlan plan;
    if (Error error = fillPlan(package.manifest.kernels[index], s,
                               messagePrefix(s), launch, 1, plan))
      return error;
    if (Error error = launchPlanned(package, *driver, s, index, plan, stream))
      return error;
  }
  return Error::ok();
}

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
            package, s,
            sequenceRange(launch, first, std::min(most, batch - first)),
            stream))
      return error;
  return Error::ok();
}

} // namespace rt
} // namespace kiln
