//===- PagedAppend.cpp - The paged cache append launch --------------------===//

#include "PagedAppend.h"

#include "CudaDriver.h"
#include "LaunchChecks.h"

#include <cstdint>
#include <limits>
#include <tuple>

namespace kiln {
namespace rt {

namespace {

/// The value of append argument `arg` (a pointer as its address) for a
/// launch with `a`; checkAppend has seen every integer fit its argument.
int64_t appendArgValue(AppendArg arg, const kiln_paged_append_args &a) {
  auto address = [](const void *pointer) {
    return static_cast<int64_t>(reinterpret_cast<uintptr_t>(pointer));
  };
  switch (arg) {
  case AppendArg::new_keys:
    return address(a.key);
  case AppendArg::new_values:
    return address(a.value);
  case AppendArg::key_cache:
    return address(a.key_cache);
  case AppendArg::value_cache:
    return address(a.value_cache);
  case AppendArg::page_table:
    return address(a.page_table);
  case AppendArg::kv_lens:
    return address(a.kv_lens);
  case AppendArg::new_offsets:
    return address(a.new_offsets);
  case AppendArg::batch:
    return a.batch;
  case AppendArg::kv_heads:
    return a.kv_heads;
  case AppendArg::total_new:
    return a.total_new;
  case AppendArg::max_pages:
    return a.max_pages;
  case AppendArg::num_pages:
    return a.num_pages;
  case AppendArg::page_size:
    return a.page_size;
  case AppendArg::new_keys_stride_token:
    return a.key_strides[0];
  case AppendArg::new_keys_stride_head:
    return a.key_strides[1];
  case AppendArg::new_values_stride_token:
    return a.value_strides[0];
  case AppendArg::new_values_stride_head:
    return a.value_strides[1];
  case AppendArg::key_cache_stride_page:
    return a.key_cache_strides[0];
  case AppendArg::key_cache_stride_slot:
    return a.key_cache_strides[1];
  case AppendArg::key_cache_stride_head:
    return a.key_cache_strides[2];
  case AppendArg::value_cache_stride_page:
    return a.value_cache_strides[0];
  case AppendArg::value_cache_stride_slot:
    return a.value_cache_strides[1];
  case AppendArg::value_cache_stride_head:
    return a.value_cache_strides[2];
  case AppendArg::page_table_stride_batch:
    return a.page_table_strides[0];
  case AppendArg::k_scale:
    return address(a.k_scale);
  case AppendArg::v_scale:
    return address(a.v_scale);
  }
  return 0;
}

} // namespace

Error checkAppend(const Manifest &manifest, const Site &site,
                  const kiln_paged_append_args *argsPointer,
                  kiln_launch_config &config) {
  const std::string where = messagePrefix(site);
  config = {};
  if (!argsPointer)
    return invalid("{}the argument struct is NULL", where);
  if (!site.paged)
    return invalid("{}not a paged-attention site: it has no cache to append "
                   "to",
                   where);
  const Kernel &attention = manifest.kernels[site.kernelIndex];
  if (!attention.appendIndex)
    return {KILN_UNSUPPORTED,
            fmt::format("{}the package has no append kernel for this site "
                        "(written before kilnc emitted one: recompile it)",
                        where)};
  const Kernel &kernel = manifest.kernels[*attention.appendIndex];
  const kiln_paged_append_args &a = *argsPointer;
  config.block[0] = static_cast<uint32_t>(kernel.block[0]);
  config.block[1] = config.block[2] = 1;
  config.grid[1] = config.grid[2] = 1;
  if (a.total_new < 0 || a.batch < 0)
    return invalid("{}{} must not be negative, got {}", where,
                   a.total_new < 0 ? "total_new" : "batch",
                   a.total_new < 0 ? a.total_new : a.batch);
  if (a.total_new == 0)
    return Error::ok();
  const int64_t valueDim = a.v_head_dim ? a.v_head_dim : a.head_dim;
  const std::pair<const char *, int64_t> sizes[] = {
      {"batch", a.batch},         {"kv_heads", a.kv_heads},
      {"head_dim", a.head_dim},   {"num_pages", a.num_pages},
      {"page_size", a.page_size}, {"max_pages", a.max_pages}};
  for (auto [name, value] : sizes) {
    if (value <= 0)
      return invalid("{}{} must be positive, got {}", where, name, value);
    if (value > std::numeric_limits<int32_t>::max())
      return invalid("{}{} must be below 2^31, got {}", where, name, value);
  }
  if (a.total_new > std::numeric_limits<int32_t>::max())
    return invalid("{}total_new must be below 2^31, got {}", where,
                   a.total_new);
  if (a.head_dim != kernel.headDim || valueDim != kernel.valueHeadDim)
    return invalid("{}head dims {}/{} but the site's caches hold {}/{}", where,
                   a.head_dim, valueDim, *kernel.headDim,
                   *kernel.valueHeadDim);
  if (std::optional<int64_t> heads = site.dims[int(Dim::KvHeads)];
      heads && *heads != a.kv_heads)
    return invalid("{}kv_heads is {} but the site was compiled for {}", where,
                   a.kv_heads, *heads);
  if (Error error = checkPageSize(where, site, a.page_size))
    return error;
  // The new keys and values are in the site's dtype, the caches hold the
  // cache dtype (the same but for FP8 caches).
  const bool fp8 = kernel.cacheDtype == KILN_DTYPE_F8E4M3;
  for (auto [name, pointer, dtype, expected] :
       {std::tuple{"key", a.key, a.key_dtype, kernel.dtype},
        std::tuple{"value", a.value, a.value_dtype, kernel.dtype},
        std::tuple{"key_cache", static_cast<const void *>(a.key_cache),
                   a.key_cache_dtype, kernel.cacheDtype},
        std::tuple{"value_cache", static_cast<const void *>(a.value_cache),
                   a.value_cache_dtype, kernel.cacheDtype}}) {
    if (!pointer)
      return invalid("{}{} is NULL", where, name);
    if (dtype != expected)
      return invalid(
          "{}{} has dtype {} but {}", where, name, dtypeName(dtype),
          expected == kernel.cacheDtype
              ? fmt::format("the site's caches hold {}", dtypeName(expected))
              : fmt::format("the site takes {} (its caches hold {})",
                            dtypeName(expected), dtypeName(kernel.cacheDtype)));
    if (reinterpret_cast<uintptr_t>(pointer) % kiln_dtype_size(dtype))
      return invalid("{}{} is not aligned to its {}-byte elements", where,
                     name, kiln_dtype_size(dtype));
  }
  for (auto [name, pointer] :
       {std::pair{"page_table", a.page_table}, std::pair{"kv_lens", a.kv_lens},
        std::pair{"new_offsets", a.new_offsets}}) {
    if (!pointer)
      return invalid("{}{} is NULL", where, name);
    if (reinterpret_cast<uintptr_t>(pointer) % 4)
      return invalid("{}{} is not aligned to its 4-byte elements", where,
                     name);
  }
  if (a.page_table_strides[1] != 1)
    return invalid("{}page_table must be contiguous along its entries "
                   "(stride 1), got {}",
                   where, a.page_table_strides[1]);
  for (auto [name, strides, axes] :
       {std::tuple{"key", a.key_strides, 2},
        std::tuple{"value", a.value_strides, 2},
        std::tuple{"key_cache", a.key_cache_strides, 3},
        std::tuple{"value_cache", a.value_cache_strides, 3}}) {
    if (strides[axes] != 1)
      return invalid("{}{} must be contiguous along head_dim (stride 1), got "
                     "{}",
                     where, name, strides[axes]);
    for (int axis = 0; axis < axes; ++axis)
      if (strides[axis] < 0)
        return invalid("{}{} has a negative stride ({})", where, name,
                       strides[axis]);
  }
  if (fp8)
    for (auto [name, pointer, strides] :
         {std::tuple{"key_cache", static_cast<const void *>(a.key_cache),
                     a.key_cache_strides},
          std::tuple{"value_cache", static_cast<const void *>(a.value_cache),
                     a.value_cache_strides}})
      if (Error error = checkFp8Cache(where, name, pointer, strides))
        return error;
  if (Error error = checkKvScales(where, site, a.k_scale, a.v_scale,
                                  a.num_kv_scales, a.kv_heads))
    return error;
  config.grid[0] = static_cast<uint32_t>(a.total_new);
  return Error::ok();
}

Error launchAppend(kiln_package &package, const Site &site,
                   const kiln_paged_append_args *args, void *streamHandle) {
  kiln_launch_config config;
  if (Error error = checkAppend(package.manifest, site, args, config))
    return error;
  if (config.grid[0] == 0)
    return Error::ok();
  const CudaDriver *driver = nullptr;
  if (Error error = getCudaDriver(driver))
    return error;
  size_t index = *package.manifest.kernels[site.kernelIndex].appendIndex;
  const Kernel &kernel = package.manifest.kernels[index];
  auto stream = static_cast<CUstream>(streamHandle);
  CUfunction function = nullptr;
  if (Error error =
          package.modules.getFunction(*driver, index, stream, function))
    return error;
  if (!function)
    return {KILN_UNSUPPORTED,
            fmt::format("kernel \"{}\" is not in the loaded target's PTX",
                        kernel.name)};
  union Value {
    uint64_t pointer;
    int32_t i32;
    int64_t i64;
  };
  Value slots[kNumAppendArgs];
  void *params[kNumAppendArgs];
  for (size_t i = 0; i < kernel.args.size(); ++i) {
    const KernelArg &arg = kernel.args[i];
    int64_t value = appendArgValue(static_cast<AppendArg>(arg.paged), *args);
    if (arg.kind == ArgKind::Pointer)
      slots[i].pointer = static_cast<uint64_t>(value);
    else if (arg.kind == ArgKind::I32)
      slots[i].i32 = static_cast<int32_t>(value);
    else
      slots[i].i64 = value;
    params[i] = &slots[i];
  }
  CUresult result = driver->cuLaunchKernel(
      function, config.grid[0], 1, 1, config.block[0], 1, 1, 0, stream,
      params, nullptr);
  if (result != CUDA_SUCCESS)
    return {KILN_CUDA_ERROR,
            fmt::format("{} for the append of site \"{}\" (kernel \"{}\", "
                        "grid {})",
                        describeCudaError(*driver, "cuLaunchKernel", result),
                        site.name, kernel.name, config.grid[0])};
  return Error::ok();
}

} // namespace rt
} // namespace kiln
