//===- Runtime.cpp - Kiln runtime C API -----------------------------------===//
//
// The C API of kiln-c/Runtime.h over the runtime's C++ units: the manifest
// (Manifest.h), the launch checks (LaunchChecks.h), launches (Launch.h), the
// split model (SplitModel.h) and the module cache (ModuleCache.h). Every C
// entry point catches everything: a failure becomes a status and a
// thread-local message.
//
//===----------------------------------------------------------------------===//

#include "kiln-c/Runtime.h"

#include "CudaDriver.h"
#include "Launch.h"
#include "LaunchChecks.h"
#include "Manifest.h"
#include "Package.h"
#include "PagedTableCheck.h"
#include "PagedAppend.h"
#include "RaggedPlan.h"
#include "SplitModel.h"

#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <vector>

using namespace kiln::rt;

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
                fmt::format("{}: out of host memory", function));
  } catch (const std::exception &error) {
    return fail(KILN_INTERNAL_ERROR, fmt::format("{}: unexpected error: {}",
                                                 function, error.what()));
  } catch (...) {
    return fail(KILN_INTERNAL_ERROR,
                fmt::format("{}: unexpected error", function));
  }
}

} // namespace

void kiln::rt::setLastError(std::string message) {
  lastError = std::move(message);
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
  case KILN_DTYPE_F8E4M3:
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
    package->modules.unloadAll();
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
                  fmt::format("site index {} is out of range (package has {} "
                              "sites)",
                              index, package->sites.size()));
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
    return fail(KILN_NOT_FOUND,
                fmt::format("package {} has no site \"{}\" (sites: {})",
                            package->manifest.directory, name,
                            names.empty() ? "none" : names));
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
                  fmt::format("kernel index {} is out of range (package has "
                              "{} kernels)",
                              index, kernels.size()));
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
                  fmt::format("target index {} is out of range", index));
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
      return fail(KILN_UNSUPPORTED,
                  fmt::format("package {} has no PTX for compute capability "
                              "{}.{}",
                              package->manifest.directory, major, minor));
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
    // Every module of the loaded target compiled.
    if (Error error = package->modules.prepare(*driver))
      return fail(error);
    return KILN_OK;
  });
}

kiln_status kiln_site_prepare(const kiln_site *site) {
  return guarded("kiln_site_prepare", [&] {
    if (!site)
      return fail(KILN_INVALID_ARGUMENT, "kiln_site_prepare: NULL site");
    const CudaDriver *driver = nullptr;
    if (Error error = getCudaDriver(driver))
      return fail(error);
    kiln_package &package = *site->package;
    const Manifest &manifest = package.manifest;
    const Site &s = manifest.sites[site->index];
    std::string chip;
    if (Error error = package.modules.loadedChip(*driver, chip))
      return fail(error);
    // Prefill launches take the warp-specialised kernel where the device's
    // target has one; others the site's kernel, its combine kernel where it
    // splits keys, and a backward site's key pass.
    std::vector<size_t> kernels;
    if (s.warpSpecializedIndex &&
        manifest.kernels[*s.warpSpecializedIndex].inTarget(chip)) {
      kernels.push_back(*s.warpSpecializedIndex);
    } else {
      kernels.push_back(s.kernelIndex);
      if (manifest.kernels[s.kernelIndex].combineIndex)
        kernels.push_back(*manifest.kernels[s.kernelIndex].combineIndex);
    }
    if (s.keyPassIndex)
      kernels.push_back(*s.keyPassIndex);
    if (Error error = package.modules.prepare(*driver, &kernels))
      return fail(error);
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
    info->ragged = s.ragged;
    info->cache_dtype = s.cacheDtype;
    info->kv_scales = static_cast<int32_t>(s.kvScales);
    info->scale_factor = s.scaleFactorPerHead ? 2 : s.scaleFactor ? 1 : 0;
    info->lse = s.lse ? 1 : 0;
    info->key_pass =
        s.keyPassIndex
            ? site->package->manifest.kernels[*s.keyPassIndex].name.c_str()
            : nullptr;
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
                  fmt::format("kiln_contiguous_strides: unknown layout {}",
                              static_cast<int>(layout)));
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

int64_t kiln_attention_grad_workspace_size(int64_t batch, int64_t q_heads,
                                           int64_t q_len) {
  if (batch <= 0 || q_heads <= 0 || q_len <= 0)
    return 0;
  return batch * q_heads * q_len * static_cast<int64_t>(sizeof(float));
}

kiln_status kiln_site_check_attention_grad(const kiln_site *site,
                                           const kiln_attention_grad_args *args,
                                           kiln_launch_config configs[2]) {
  return guarded("kiln_site_check_attention_grad", [&] {
    if (!site)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_site_check_attention_grad: NULL site");
    const Manifest &manifest = site->package->manifest;
    const Site &s = manifest.sites[site->index];
    CheckedLaunch launch;
    if (Error error = checkGradLaunch(manifest, s, args, launch))
      return fail(error);
    if (Error error = gradConfigs(manifest, s, launch, configs))
      return fail(error);
    return KILN_OK;
  });
}

kiln_status kiln_site_launch_attention_grad(const kiln_site *site,
                                            const kiln_attention_grad_args *args,
                                            void *stream) {
  return guarded("kiln_site_launch_attention_grad", [&] {
    if (!site)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_site_launch_attention_grad: NULL site");
    kiln_package &package = *site->package;
    const Site &s = package.manifest.sites[site->index];
    CheckedLaunch launch;
    if (Error error = checkGradLaunch(package.manifest, s, args, launch))
      return fail(error);
    if (Error error = launchGrad(package, s, launch, stream))
      return fail(error);
    return KILN_OK;
  });
}

kiln_status
kiln_site_check_packed_attention(const kiln_site *site,
                                 const kiln_packed_attention_args *args,
                                 kiln_launch_config *config) {
  return guarded("kiln_site_check_packed_attention", [&] {
    if (!site)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_site_check_packed_attention: NULL site");
    const Manifest &manifest = site->package->manifest;
    const Site &s = manifest.sites[site->index];
    CheckedLaunch launch;
    if (Error error = checkPackedLaunch(manifest, s, args, launch))
      return fail(error);
    if (Error error = checkedConfig(s, launch, config))
      return fail(error);
    return KILN_OK;
  });
}

kiln_status
kiln_site_launch_packed_attention(const kiln_site *site,
                                  const kiln_packed_attention_args *args,
                                  void *stream) {
  return guarded("kiln_site_launch_packed_attention", [&] {
    if (!site)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_site_launch_packed_attention: NULL site");
    kiln_package &package = *site->package;
    const Site &s = package.manifest.sites[site->index];
    CheckedLaunch launch;
    if (Error error = checkPackedLaunch(package.manifest, s, args, launch))
      return fail(error);
    if (Error error = launchFolded(package, s, launch, stream))
      return fail(error);
    return KILN_OK;
  });
}

kiln_status
kiln_site_packed_attention_splits(const kiln_site *site,
                                  const kiln_packed_attention_args *args,
                                  int64_t *splits) {
  return guarded("kiln_site_packed_attention_splits", [&] {
    if (!site || !splits)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_site_packed_attention_splits: NULL site or result "
                  "pointer");
    kiln_package &package = *site->package;
    const Site &s = package.manifest.sites[site->index];
    CheckedLaunch launch;
    if (Error error = checkPackedLaunch(package.manifest, s, args, launch))
      return fail(error);
    if (Error error = splitsOfLaunch(package, s, launch, *splits))
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
    if (Error error = checkWorkspaceBounds(s, batch, q_heads, kv_heads, q_len,
                                           max_kv_len))
      return fail(error);
    if (Error error = workspaceBytes(package, s, batch, q_heads, kv_heads,
                                     q_len, max_kv_len, *bytes))
      return fail(error);
    return KILN_OK;
  });
}

namespace {

/// The checks the plan functions share: a ragged site and a head group.
Error raggedShape(const kiln_site *site, const char *function, int64_t qHeads,
                  int64_t kvHeads, const Kernel *&kernel, int64_t &group) {
  if (!site)
    return invalid("{}: NULL site", function);
  const Site &s = site->package->manifest.sites[site->index];
  std::string where = messagePrefix(s);
  if (!s.ragged)
    return invalid("{}not a ragged site (its queries are not packed): its "
                   "launches need no plan",
                   where);
  if (qHeads <= 0 || kvHeads <= 0 || qHeads % kvHeads != 0)
    return invalid("{}q_heads ({}) must be a positive multiple of kv_heads "
                   "({})",
                   where, qHeads, kvHeads);
  kernel = &site->package->manifest.kernels[s.kernelIndex];
  group = qHeads / kvHeads;
  return Error::ok();
}

} // namespace

kiln_status kiln_site_plan_paged_attention(
    const kiln_site *site, const int32_t *q_offsets, const int32_t *kv_lens,
    int64_t batch, int64_t q_heads, int64_t kv_heads, int32_t *plan,
    int64_t capacity, int64_t *items) {
  return guarded("kiln_site_plan_paged_attention", [&] {
    const Kernel *kernel = nullptr;
    int64_t group = 0;
    if (Error error = raggedShape(site, "kiln_site_plan_paged_attention",
                                  q_heads, kv_heads, kernel, group))
      return fail(error);
    if (!items)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_site_plan_paged_attention: NULL result pointer");
    const Site &s = site->package->manifest.sites[site->index];
    if (Error error =
            buildPlan(messagePrefix(s), q_offsets, kv_lens, batch, group,
                      kernel->rowsPerBlock, plan, capacity, *items))
      return fail(error);
    return KILN_OK;
  });
}

kiln_status kiln_site_plan_packed_attention(
    const kiln_site *site, const int32_t *q_offsets, const int32_t *kv_offsets,
    int64_t batch, int64_t q_heads, int64_t kv_heads, int32_t *plan,
    int64_t capacity, int64_t *items) {
  return guarded("kiln_site_plan_packed_attention", [&] {
    const Kernel *kernel = nullptr;
    int64_t group = 0;
    if (Error error = raggedShape(site, "kiln_site_plan_packed_attention",
                                  q_heads, kv_heads, kernel, group))
      return fail(error);
    if (!items)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_site_plan_packed_attention: NULL result pointer");
    const Site &s = site->package->manifest.sites[site->index];
    std::string where = messagePrefix(s);
    if (s.paged)
      return fail(KILN_INVALID_ARGUMENT,
                  where + "a paged site: its plan comes from "
                          "kiln_site_plan_paged_attention");
    if (batch < 0 || batch > std::numeric_limits<int32_t>::max() - 1)
      return fail(KILN_INVALID_ARGUMENT,
                  where + "batch must be 0 to 2^31 - 2");
    std::vector<int32_t> kvLens;
    if (Error error = keyCountsOf(where, kv_offsets, batch, kvLens))
      return fail(error);
    // A packed sequence's keys need not count its queries (an encoder's
    // or cross-attention's do not).
    if (Error error =
            buildPlan(where, q_offsets, batch ? kvLens.data() : nullptr,
                      batch, group, kernel->rowsPerBlock, plan, capacity,
                      *items, /*lensCountQueries=*/false))
      return fail(error);
    return KILN_OK;
  });
}

kiln_status kiln_site_plan_capacity(const kiln_site *site, int64_t batch,
                                    int64_t total_q, int64_t q_heads,
                                    int64_t kv_heads, int64_t *capacity) {
  return guarded("kiln_site_plan_capacity", [&] {
    const Kernel *kernel = nullptr;
    int64_t group = 0;
    if (Error error = raggedShape(site, "kiln_site_plan_capacity", q_heads,
                                  kv_heads, kernel, group))
      return fail(error);
    if (!capacity || batch < 0 || total_q < 0)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_site_plan_capacity: NULL result pointer or a "
                  "negative size");
    *capacity = planCapacity(batch, total_q, group, kernel->rowsPerBlock);
    return KILN_OK;
  });
}

kiln_status kiln_site_append_paged_kv(const kiln_site *site,
                                      const kiln_paged_append_args *args,
                                      void *stream) {
  return guarded("kiln_site_append_paged_kv", [&] {
    if (!site)
      return fail(KILN_INVALID_ARGUMENT, "kiln_site_append_paged_kv: NULL site");
    kiln_package &package = *site->package;
    if (Error error = launchAppend(
            package, package.manifest.sites[site->index], args, stream))
      return fail(error);
    return KILN_OK;
  });
}

kiln_status kiln_site_append_config(const kiln_site *site,
                                    const kiln_paged_append_args *args,
                                    kiln_launch_config *config) {
  return guarded("kiln_site_append_config", [&] {
    if (!site || !config)
      return fail(KILN_INVALID_ARGUMENT,
                  "kiln_site_append_config: NULL site or result pointer");
    const Manifest &manifest = site->package->manifest;
    if (Error error =
            checkAppend(manifest, manifest.sites[site->index], args, *config))
      return fail(error);
    return KILN_OK;
  });
}

} // extern "C"
