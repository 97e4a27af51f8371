//===- LaunchChecks.cpp - Checks of a launch's arguments ------------------===//
//
// Every check here runs before the CUDA driver is touched (but the debug
// check of paged tables, which runs a kernel of its own).
//
//===----------------------------------------------------------------------===//

#include "LaunchChecks.h"

#include "CudaDriver.h"
#include "PagedTableCheck.h"

#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <tuple>
#include <utility>

namespace kiln {
namespace rt {

const void *tensorPointer(const kiln_attention_args &args, Tensor tensor) {
  const void *pointers[] = {args.q,   args.k,    args.v,
                            args.out, args.mask, args.bias};
  return pointers[static_cast<int>(tensor)];
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

std::string messagePrefix(const Site &site) {
  return fmt::format("site \"{}\": ", site.name);
}

namespace {

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
      return invalid("{}{} must be positive, got {}", where, dimName(dim),
                     value);
    if (site.dims[i] && *site.dims[i] != value)
      return invalid("{}{} is {} but the site was compiled for {} = {}", where,
                     dimName(dim), value, dimName(dim), *site.dims[i]);
  }
  if (kernel.headDim && *kernel.headDim != args.head_dim)
    return invalid("{}head_dim is {} but kernel \"{}\" is compiled for {}",
                   where, args.head_dim, kernel.name, *kernel.headDim);
  if (args.v_head_dim < 0)
    return invalid("{}v_head_dim must be positive (or 0 for head_dim), got {}",
                   where, args.v_head_dim);
  int64_t valueHeadDim = args.v_head_dim ? args.v_head_dim : args.head_dim;
  std::optional<int64_t> expectedValueHeadDim =
      kernel.valueHeadDim ? kernel.valueHeadDim : site.valueHeadDim;
  if (expectedValueHeadDim && *expectedValueHeadDim != valueHeadDim)
    return invalid(
        "{}the head dim of v and out is {} but kernel \"{}\" is compiled for "
        "{}{}",
        where, valueHeadDim, kernel.name, *expectedValueHeadDim,
        args.v_head_dim ? "" : " (v_head_dim is 0: head_dim)");
  if (args.q_heads % args.kv_heads != 0)
    return invalid("{}q_heads ({}) is not a multiple of kv_heads ({})", where,
                   args.q_heads, args.kv_heads);

  // Pointers and dtypes (a paged site's K and V are its caches).
  for (Tensor tensor : {Tensor::Q, Tensor::K, Tensor::V, Tensor::Out}) {
    const void *pointer = tensorPointer(args, tensor);
    kiln_dtype dtype = tensorDtype(args, tensor);
    kiln_dtype expected = tensor == Tensor::K || tensor == Tensor::V
                              ? site.cacheDtype
                              : site.dtype;
    if (!pointer)
      return invalid("{}{} is NULL", where, tensorName(tensor));
    if (dtype != expected)
      return invalid("{}{} has dtype {} but the site takes {}", where,
                     tensorName(tensor), dtypeName(dtype), dtypeName(expected));
  }
  if (site.mask == KILN_MASK_NONE && args.mask)
    return invalid("{}a mask was given but the site has no mask", where);
  if (site.mask != KILN_MASK_NONE && !args.mask)
    return invalid("{}the site needs a {} mask ({}) but none was given", where,
                   site.mask == KILN_MASK_BOOLEAN ? "boolean" : "additive",
                   dtypeName(site.maskDtype));
  if (args.mask && args.mask_dtype != site.maskDtype)
    return invalid("{}mask has dtype {} but the site takes {}", where,
                   dtypeName(args.mask_dtype), dtypeName(site.maskDtype));
  if (!site.bias && args.bias)
    return invalid("{}a bias was given but the site has no bias", where);
  if (site.bias && !args.bias)
    return invalid("{}the site needs a bias ({}) but none was given", where,
                   dtypeName(site.biasDtype));
  if (args.bias && args.bias_dtype != site.biasDtype)
    return invalid("{}bias has dtype {} but the site takes {}", where,
                   dtypeName(args.bias_dtype), dtypeName(site.biasDtype));
  for (int i = 0; i < kNumTensors; ++i) {
    Tensor tensor = static_cast<Tensor>(i);
    const void *pointer = tensorPointer(args, tensor);
    int64_t size = kiln_dtype_size(tensorDtype(args, tensor));
    if (pointer && size > 1 &&
        reinterpret_cast<uintptr_t>(pointer) % static_cast<uintptr_t>(size))
      return invalid("{}{} is not aligned to its {}-byte elements", where,
                     tensorName(tensor), size);
  }

  // Strides.
  static const char *qkvAxes[] = {"batch", "head", "seq", "head_dim"};
  static const char *maskAxes[] = {"batch", "head", "q", "k"};
  for (Tensor tensor : {Tensor::Q, Tensor::K, Tensor::V, Tensor::Out}) {
    const int64_t *strides = tensorStrides(args, tensor);
    if (strides[3] != 1)
      return invalid("{}{} must be contiguous along head_dim (stride 1), got "
                     "head_dim stride {}",
                     where, tensorName(tensor), strides[3]);
    bool isKv = tensor == Tensor::K || tensor == Tensor::V;
    int64_t extents[3] = {args.batch, isKv ? args.kv_heads : args.q_heads,
                          isKv ? args.kv_len : args.q_len};
    for (int axis = 0; axis < 3; ++axis) {
      if (strides[axis] < 0)
        return invalid("{}{} has a negative {} stride ({})", where,
                       tensorName(tensor), qkvAxes[axis], strides[axis]);
      if (tensor == Tensor::Out && strides[axis] == 0 && extents[axis] > 1)
        return invalid("{}out has a zero {} stride: its elements would overlap",
                       where, qkvAxes[axis]);
    }
  }
  for (Tensor tensor : {Tensor::Mask, Tensor::Bias}) {
    if (!tensorPointer(args, tensor))
      continue;
    const int64_t *strides = tensorStrides(args, tensor);
    for (int axis = 0; axis < 4; ++axis)
      if (strides[axis] < 0)
        return invalid("{}{} has a negative {} stride ({})", where,
                       tensorName(tensor), maskAxes[axis], strides[axis]);
  }

  return Error::ok();
}

/// Checks the split-KV fields of a launch: a forced split count must be one
/// the kernel can run and the workspace hold.
Error checkSplits(const std::string &where, const CheckedLaunch &launch) {
  const kiln_attention_args &args = launch.args;
  const Kernel &kernel = *launch.kernel;
  if (args.num_splits < 0 || args.num_splits > kMaxSplits)
    return invalid("{}num_splits must be 0 (chosen at launch) to {}, got {}",
                   where, kMaxSplits, args.num_splits);
  if (args.workspace_bytes < 0)
    return invalid("{}workspace_bytes must not be negative, got {}", where,
                   args.workspace_bytes);
  if (args.workspace && reinterpret_cast<uintptr_t>(args.workspace) % 16 != 0)
    return invalid("{}workspace must be 16-byte aligned", where);
  if (args.num_splits > 1) {
    if (!kernel.combineIndex)
      return invalid("{}num_splits is {} but kernel \"{}\" does not split keys",
                     where, args.num_splits, kernel.name);
    int64_t needed =
        splitWorkspaceBytes(args, launch.valueHeadDim, args.num_splits);
    if (!args.workspace || args.workspace_bytes < needed)
      return invalid("{}{} splits need a {}-byte workspace; got {}", where,
                     args.num_splits, needed,
                     args.workspace
                         ? fmt::format("{} bytes", args.workspace_bytes)
                         : std::string("none"));
  }
  return Error::ok();
}

} // namespace

namespace {

/// The forward's arguments of a launch of `site` (its own, or a backward
/// launch's `forward`).
Error checkForwardArgs(const Manifest &manifest, const Site &site,
                       const std::string &where,
                       const kiln_attention_args &args,
                       CheckedLaunch &launch) {
  const Kernel &kernel = manifest.kernels[site.kernelIndex];
  if (site.paged)
    return invalid("{}a paged-attention site: launch it with "
                   "kiln_site_launch_paged_attention",
                   where);
  if (site.ragged)
    return invalid("{}a site of packed sequences: launch it with "
                   "kiln_site_launch_packed_attention",
                   where);
  launch.kernel = &kernel;
  if (args.batch == 0) {
    launch.empty = true;
    return Error::ok();
  }

  if (Error error = checkAttention(kernel, site, where, args))
    return error;
  // The log-sum-exp: a site that keeps it needs its buffer, one that does
  // not would leave it unwritten.
  if (site.lse && !args.lse)
    return invalid("{}the site keeps the log-sum-exp: lse is NULL", where);
  if (!site.lse && args.lse)
    return invalid("{}lse is set but the site does not keep the "
                   "log-sum-exp (compile its forward with an lse result)",
                   where);
  if (reinterpret_cast<uintptr_t>(args.lse) % 4)
    return invalid("{}lse is not aligned to its 4-byte elements", where);
  launch.args = args;
  launch.maxKvLen = args.kv_len;
  launch.valueHeadDim = args.v_head_dim ? args.v_head_dim : args.head_dim;
  return checkSplits(where, launch);
}

} // namespace

Error checkLaunch(const Manifest &manifest, const Site &site,
                  const kiln_attention_args *argsPointer,
                  CheckedLaunch &launch) {
  const std::string where = messagePrefix(site);
  if (!argsPointer)
    return invalid("{}the argument struct is NULL", where);
  if (site.keyPassIndex)
    return invalid("{}a backward site: launch it with "
                   "kiln_site_launch_attention_grad",
                   where);
  return checkForwardArgs(manifest, site, where, *argsPointer, launch);
}

Error checkGradLaunch(const Manifest &manifest, const Site &site,
                      const kiln_attention_grad_args *argsPointer,
                      CheckedLaunch &launch) {
  const std::string where = messagePrefix(site);
  if (!argsPointer)
    return invalid("{}the argument struct is NULL", where);
  if (!site.keyPassIndex)
    return invalid("{}not a backward site: launch it with "
                   "kiln_site_launch_attention",
                   where);
  const kiln_attention_grad_args &grad = *argsPointer;
  if (grad.forward.num_splits > 1 || grad.forward.workspace)
    return invalid("{}the backward takes no split count or forward "
                   "workspace (forward.num_splits, forward.workspace)",
                   where);
  if (Error error =
          checkForwardArgs(manifest, site, where, grad.forward, launch))
    return error;
  if (launch.empty)
    return Error::ok();
  const kiln_attention_args &args = grad.forward;
  // The gradients: q's dtype, and out's, q's, k's and v's shapes.
  struct Gradient {
    const char *name;
    const void *pointer;
    kiln_dtype dtype;
    const int64_t *strides;
    int slot;
  };
  const Gradient gradients[] = {
      {"grad_out", grad.grad_out, grad.grad_out_dtype, grad.grad_out_strides,
       0},
      {"grad_q", grad.grad_q, grad.grad_q_dtype, grad.grad_q_strides, 2},
      {"grad_k", grad.grad_k, grad.grad_k_dtype, grad.grad_k_strides, 3},
      {"grad_v", grad.grad_v, grad.grad_v_dtype, grad.grad_v_strides, 4}};
  GradValues values;
  int64_t elementBytes = std::max<int64_t>(kiln_dtype_size(args.q_dtype), 1);
  for (const Gradient &g : gradients) {
    if (!g.pointer)
      return invalid("{}{} is NULL", where, g.name);
    if (g.dtype != args.q_dtype)
      return invalid("{}{} has dtype {} but q has {}", where, g.name,
                     dtypeName(g.dtype), dtypeName(args.q_dtype));
    if (reinterpret_cast<uintptr_t>(g.pointer) % elementBytes)
      return invalid("{}{} is not aligned to its {}-byte elements", where,
                     g.name, elementBytes);
    if (g.strides[3] != 1)
      return invalid("{}{} must be contiguous along the head dim (stride "
                     "1), got {}",
                     where, g.name, g.strides[3]);
    // {batch, head, seq} strides, as the forward's tensors take them. A
    // gradient the kernels write must not alias itself.
    bool isKv = g.slot >= 3;
    int64_t extents[3] = {args.batch, isKv ? args.kv_heads : args.q_heads,
                          isKv ? args.kv_len : args.q_len};
    static const char *axes[] = {"batch", "head", "seq"};
    for (int axis = 0; axis < 3; ++axis) {
      if (g.strides[axis] < 0 ||
          (g.slot != 0 && g.strides[axis] == 0 && extents[axis] > 1))
        return invalid("{}{} has a {} {} stride ({})", where, g.name,
                       g.strides[axis] < 0 ? "negative" : "zero", axes[axis],
                       g.strides[axis]);
      values.strides[g.slot][axis] = g.strides[axis];
    }
    values.pointers[g.slot] = g.pointer;
  }
  int64_t need =
      kiln_attention_grad_workspace_size(args.batch, args.q_heads, args.q_len);
  if (!grad.workspace || grad.workspace_bytes < need)
    return invalid("{}the workspace holds {} bytes at {}; the backward "
                   "needs {} (kiln_attention_grad_workspace_size)",
                   where, grad.workspace_bytes, grad.workspace, need);
  if (reinterpret_cast<uintptr_t>(grad.workspace) % 16)
    return invalid("{}the workspace must be 16-byte aligned", where);
  values.pointers[1] = grad.workspace;
  launch.grad = values;
  return Error::ok();
}

Error checkPageSize(const std::string &where, const Site &site,
                    int64_t pageSize) {
  if (site.pageSize && *site.pageSize != pageSize)
    return invalid(
        "{}page_size is {} but the site was compiled for page_size = {}", where,
        pageSize, *site.pageSize);
  if (pageSize & (pageSize - 1))
    return invalid("{}page_size must be a power of two, got {}", where,
                   pageSize);
  return Error::ok();
}

Error checkKvScales(const std::string &where, const Site &site,
                    const float *kScale, const float *vScale,
                    int64_t numKvScales, int64_t kvHeads) {
  if (site.cacheDtype != KILN_DTYPE_F8E4M3) {
    if (kScale || vScale || numKvScales)
      return invalid("{}k_scale, v_scale and num_kv_scales are for f8e4m3 "
                     "caches; the site's caches hold {} (pass NULL, NULL "
                     "and 0)",
                     where, dtypeName(site.cacheDtype));
    return Error::ok();
  }
  for (auto [name, pointer] :
       {std::pair{"k_scale", kScale}, std::pair{"v_scale", vScale}}) {
    if (!pointer)
      return invalid("{}{} is NULL: the site's caches hold f8e4m3, which "
                     "take f32 scales {}",
                     where, name,
                     site.kvScales == KvScales::PerTensor ? "per tensor ([1])"
                                                          : "per KV head "
                                                            "([kv_heads])");
    if (reinterpret_cast<uintptr_t>(pointer) % 4)
      return invalid("{}{} is not aligned to its 4-byte elements", where, name);
  }
  int64_t expected = site.kvScales == KvScales::PerTensor ? 1 : kvHeads;
  if (numKvScales != expected)
    return invalid("{}num_kv_scales is {} but the site's scales are {}", where,
                   numKvScales,
                   site.kvScales == KvScales::PerTensor
                       ? std::string("per tensor (1)")
                       : fmt::format("per KV head (kv_heads = {})", kvHeads));
  return Error::ok();
}

Error checkFp8Cache(const std::string &where, const char *name,
                    const void *pointer, const int64_t strides[3]) {
  if (reinterpret_cast<uintptr_t>(pointer) % 2)
    return invalid("{}{} must be 2-byte aligned: the kernels read f8e4m3 "
                   "caches in 2-byte units",
                   where, name);
  static const char *axes[] = {"page", "slot", "head"};
  for (int axis = 0; axis < 3; ++axis)
    if (strides[axis] % 2)
      return invalid("{}{} has an odd {} stride ({}): the kernels read "
                     "f8e4m3 caches in 2-byte units, so its page, slot and "
                     "head strides must be even",
                     where, name, axes[axis], strides[axis]);
  return Error::ok();
}

Error checkPagedLaunch(const Manifest &manifest, const Site &site,
                       const kiln_paged_attention_args *argsPointer,
                       CheckedLaunch &launch) {
  const std::string where = messagePrefix(site);
  if (!argsPointer)
    return invalid("{}the argument struct is NULL", where);
  if (!site.paged)
    return invalid("{}not a paged-attention site: launch it with "
                   "kiln_site_launch_attention",
                   where);
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
      return invalid("{}{} must be positive, got {}", where, name, value);
  if (Error error = checkPageSize(where, site, paged.page_size))
    return error;
  if (paged.max_pages > std::numeric_limits<int32_t>::max() / paged.page_size)
    return invalid("{}max_pages x page_size overflows 32 bits", where);
  if (!paged.page_table || !paged.kv_lens)
    return invalid("{}{} is NULL", where,
                   !paged.page_table ? "page_table" : "kv_lens");
  for (const void *pointer : {static_cast<const void *>(paged.page_table),
                              static_cast<const void *>(paged.kv_lens)})
    if (reinterpret_cast<uintptr_t>(pointer) % 4)
      return invalid("{}page_table and kv_lens must be aligned to their "
                     "4-byte elements",
                     where);
  if (paged.page_table_strides[1] != 1)
    return invalid("{}page_table must be contiguous along its entries "
                   "(stride 1), got {}",
                   where, paged.page_table_strides[1]);
  if (paged.page_table_strides[0] < paged.max_pages &&
      paged.page_table_strides[0] != 0)
    return invalid("{}page_table's batch stride ({}) is smaller than "
                   "max_pages ({}): rows would overlap",
                   where, paged.page_table_strides[0], paged.max_pages);
  for (auto [name, pointer, dtype, expected] :
       {std::tuple{"q", paged.q, paged.q_dtype, site.dtype},
        std::tuple{"key_cache", paged.key_cache, paged.key_cache_dtype,
                   site.cacheDtype},
        std::tuple{"value_cache", paged.value_cache, paged.value_cache_dtype,
                   site.cacheDtype},
        std::tuple{"out", static_cast<const void *>(paged.out), paged.out_dtype,
                   site.dtype}}) {
    if (!pointer)
      return invalid("{}{} is NULL", where, name);
    if (dtype != expected)
      return invalid("{}{} has dtype {} but the site takes {}", where, name,
                     dtypeName(dtype), dtypeName(expected));
  }
  for (auto [name, pointer, strides] :
       {std::tuple{"key_cache", paged.key_cache, paged.key_cache_strides},
        std::tuple{"value_cache", paged.value_cache,
                   paged.value_cache_strides}}) {
    for (int axis = 0; axis < 3; ++axis)
      if (strides[axis] < 0)
        return invalid("{}{} has a negative stride ({})", where, name,
                       strides[axis]);
    if (site.cacheDtype == KILN_DTYPE_F8E4M3)
      if (Error error = checkFp8Cache(where, name, pointer, strides))
        return error;
  }

  if (site.ragged) {
    if (!paged.q_offsets || !paged.plan)
      return invalid("{}{} is NULL (a ragged site takes packed queries and "
                     "a plan: kiln_site_plan_paged_attention)",
                     where, !paged.q_offsets ? "q_offsets" : "plan");
    if (reinterpret_cast<uintptr_t>(paged.q_offsets) % 4 ||
        reinterpret_cast<uintptr_t>(paged.plan) % 8)
      return invalid("{}q_offsets must be 4-byte and plan 8-byte aligned",
                     where);
    if (paged.plan_items < 0 ||
        paged.plan_items > std::numeric_limits<int32_t>::max())
      return invalid("{}plan_items must be 0 to 2^31 - 1, got {}", where,
                     paged.plan_items);
    if (paged.plan_items == 0) {
      launch.empty = true;
      return Error::ok();
    }
  } else if (paged.q_offsets || paged.plan || paged.plan_items) {
    return invalid("{}q_offsets and plan are for ragged sites; this site "
                   "takes q [batch, q_heads, q_len, head_dim]",
                   where);
  }

  // The rest is an attention launch with the caches as K and V: the same
  // checks of dtypes, pointers, head dims and q/out strides. A ragged
  // launch's packed rows stand as one sequence of total_q queries.
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
  args.batch = site.ragged ? 1 : paged.batch;
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
  if (site.ragged)
    args.q_strides[0] = args.out_strides[0] = 0;
  args.workspace = paged.workspace;
  args.workspace_bytes = paged.workspace_bytes;
  args.num_splits = paged.num_splits;
  if (Error error = checkAttention(kernel, site, where, args))
    return error;
  if (Error error = checkKvScales(where, site, paged.k_scale, paged.v_scale,
                                  paged.num_kv_scales, paged.kv_heads))
    return error;
  PagedValues values;
  values.pageTable = paged.page_table;
  values.kvLens = paged.kv_lens;
  values.maxPages = paged.max_pages;
  values.numPages = paged.num_pages;
  values.pageSize = paged.page_size;
  values.pageTableStride = paged.page_table_strides[0];
  values.qOffsets = paged.q_offsets;
  values.plan = paged.plan;
  values.planItems = paged.plan_items;
  values.sequences = paged.batch;
  values.kScale = paged.k_scale;
  values.vScale = paged.v_scale;
  launch.args = args;
  launch.paged = values;
  launch.maxKvLen = args.kv_len;
  if (paged.total_kv_len < 0 ||
      paged.total_kv_len > paged.batch * launch.maxKvLen)
    return invalid("{}total_kv_len must be 0 (unknown) to batch x max_pages x "
                   "page_size ({}), got {}",
                   where, paged.batch * launch.maxKvLen, paged.total_kv_len);
  launch.totalKvLen = paged.total_kv_len;
  launch.valueHeadDim = args.v_head_dim ? args.v_head_dim : args.head_dim;
  return checkSplits(where, launch);
}

Error checkPackedLaunch(const Manifest &manifest, const Site &site,
                        const kiln_packed_attention_args *argsPointer,
                        CheckedLaunch &launch) {
  const std::string where = messagePrefix(site);
  if (!argsPointer)
    return invalid("{}the argument struct is NULL", where);
  if (!site.ragged || site.paged)
    return invalid("{}not a site of packed sequences: launch it with "
                   "kiln_site_launch_{}attention",
                   where, site.paged ? "paged_" : "");
  const kiln_packed_attention_args &packed = *argsPointer;
  launch.kernel = &manifest.kernels[site.kernelIndex];
  for (auto [name, value] : {std::pair{"batch", packed.batch},
                             std::pair{"total_q", packed.total_q},
                             std::pair{"total_kv", packed.total_kv},
                             std::pair{"plan_items", packed.plan_items}})
    if (value < 0)
      return invalid("{}{} must not be negative, got {}", where, name, value);
  if (packed.batch == 0 || packed.total_q == 0 || packed.plan_items == 0) {
    launch.empty = true;
    return Error::ok();
  }
  if (packed.batch > std::numeric_limits<int32_t>::max() - 1)
    return invalid("{}batch must be at most 2^31 - 2, got {}", where,
                   packed.batch);
  if (packed.plan_items > std::numeric_limits<int32_t>::max())
    return invalid("{}plan_items must be at most 2^31 - 1, got {}", where,
                   packed.plan_items);
  for (auto [name, pointer] :
       {std::pair{"q_offsets", static_cast<const void *>(packed.q_offsets)},
        std::pair{"kv_offsets", static_cast<const void *>(packed.kv_offsets)},
        std::pair{"plan", static_cast<const void *>(packed.plan)}})
    if (!pointer)
      return invalid("{}{} is NULL (a packed launch takes both offsets and "
                     "a plan: kiln_site_plan_packed_attention)",
                     where, name);
  if (reinterpret_cast<uintptr_t>(packed.q_offsets) % 4 ||
      reinterpret_cast<uintptr_t>(packed.kv_offsets) % 4 ||
      reinterpret_cast<uintptr_t>(packed.plan) % 8)
    return invalid("{}q_offsets and kv_offsets must be 4-byte and plan "
                   "8-byte aligned",
                   where);
  if (packed.max_kv_len < 0 || packed.max_kv_len > packed.total_kv)
    return invalid("{}max_kv_len must be 0 (unknown) to total_kv ({}), got "
                   "{}",
                   where, packed.total_kv, packed.max_kv_len);

  // The packed rows as one sequence of total_q queries against total_kv
  // keys: the checks of an attention launch's tensors.
  kiln_attention_args args{};
  args.q = packed.q;
  args.k = packed.k;
  args.v = packed.v;
  args.out = packed.out;
  args.q_dtype = packed.q_dtype;
  args.k_dtype = packed.k_dtype;
  args.v_dtype = packed.v_dtype;
  args.out_dtype = packed.out_dtype;
  args.mask_dtype = args.bias_dtype = KILN_DTYPE_NONE;
  args.batch = 1;
  args.q_heads = packed.q_heads;
  args.kv_heads = packed.kv_heads;
  args.q_len = packed.total_q;
  args.kv_len = packed.total_kv;
  args.head_dim = packed.head_dim;
  args.v_head_dim = packed.v_head_dim;
  for (auto [to, from] : {std::pair{args.q_strides, packed.q_strides},
                          std::pair{args.k_strides, packed.k_strides},
                          std::pair{args.v_strides, packed.v_strides},
                          std::pair{args.out_strides, packed.out_strides}}) {
    to[0] = 0;
    to[1] = from[1];
    to[2] = from[0];
    to[3] = from[2];
  }
  args.workspace = packed.workspace;
  args.workspace_bytes = packed.workspace_bytes;
  args.num_splits = packed.num_splits;
  if (Error error = checkAttention(*launch.kernel, site, where, args))
    return error;
  PagedValues values;
  values.qOffsets = packed.q_offsets;
  values.kvOffsets = packed.kv_offsets;
  values.plan = packed.plan;
  values.planItems = packed.plan_items;
  values.sequences = packed.batch;
  launch.args = args;
  launch.paged = values;
  launch.maxKvLen = packed.max_kv_len ? packed.max_kv_len : packed.total_kv;
  launch.totalKvLen = packed.total_kv;
  launch.valueHeadDim = args.v_head_dim ? args.v_head_dim : args.head_dim;
  return checkSplits(where, launch);
}

Error checkWorkspaceBounds(const Site &site, int64_t batch, int64_t qHeads,
                           int64_t kvHeads, int64_t qLen, int64_t maxKvLen) {
  const std::string where = messagePrefix(site);
  const std::pair<const char *, int64_t> sizes[] = {{"batch", batch},
                                                    {"q_heads", qHeads},
                                                    {"kv_heads", kvHeads},
                                                    {"q_len", qLen},
                                                    {"max_kv_len", maxKvLen}};
  for (auto [name, value] : sizes)
    if (value <= 0)
      return invalid("{}{} must be positive, got {}", where, name, value);
  if (qHeads % kvHeads != 0)
    return invalid("{}q_heads ({}) is not a multiple of kv_heads ({})", where,
                   qHeads, kvHeads);
  return Error::ok();
}

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
  tables.batch = s.ragged ? paged.sequences : launch.args.batch;
  tables.maxPages = paged.maxPages;
  tables.pageSize = paged.pageSize;
  tables.numPages = paged.numPages;
  tables.qLen = launch.args.q_len;
  // A ragged launch's sequences have their own query counts, which the
  // host does not see: every entry below kv_len is checked, as without a
  // window.
  tables.window = s.ragged ? 0 : s.window.value_or(0);
  return checkPagedTables(*driver, tables, static_cast<CUstream>(stream),
                          messagePrefix(s));
}

/// Queries a warp-specialised launch needs at least: below this the
/// portable kernel, which packs a KV head's query heads into its rows, wastes
/// fewer of its rows.
constexpr int64_t kWarpSpecializedMinQueries = 128;

int64_t splitWorkspaceBytes(const kiln_attention_args &args,
                            int64_t valueHeadDim, int64_t splits) {
  if (splits <= 1)
    return 0;
  return splits * args.batch * args.q_heads * args.q_len * (valueHeadDim + 2) *
         int64_t(sizeof(float));
}

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

} // namespace rt
} // namespace kiln
