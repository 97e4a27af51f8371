//===- LaunchChecks.h - Checks of a launch's arguments ----------*- C++ -*-===//
//
// The checks of an attention or paged-attention launch's sizes, pointers,
// dtypes, strides and split-KV fields against its site and kernel, made
// before the CUDA driver is touched, so that every argument error reads the
// same with or without a GPU. A launch that passes becomes a CheckedLaunch,
// which the launch and the split model take.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_RUNTIME_LAUNCHCHECKS_H
#define KILN_LIB_RUNTIME_LAUNCHCHECKS_H

#include "Manifest.h"

#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace kiln {
namespace rt {

struct CudaDriver;

/// The values of a paged or packed launch that kiln_attention_args has no
/// place for.
struct PagedValues {
  const int32_t *pageTable = nullptr;
  const int32_t *kvLens = nullptr;
  int64_t maxPages = 0, numPages = 0, pageSize = 0, pageTableStride = 0;
  /// Ragged launches: the offsets of the packed queries and the plan, its
  /// items, and the sequences (the attention view has batch 1).
  const int32_t *qOffsets = nullptr;
  const int32_t *plan = nullptr;
  int64_t planItems = 0, sequences = 0;
  /// Packed launches (kiln.attention's packed form): the key rows' offsets.
  const int32_t *kvOffsets = nullptr;
  /// FP8 caches: the keys' and values' dequantisation scales (f32).
  const float *kScale = nullptr, *vScale = nullptr;
};

/// A checked launch, in the terms of an attention launch: a paged launch's
/// caches stand as k and v, with its own values beside.
/// A backward launch's gradient tensors, by GradPointer index (grad_out,
/// delta, grad_q, grad_k, grad_v), with their {batch, head, seq} strides
/// (none for delta).
struct GradValues {
  const void *pointers[5] = {};
  int64_t strides[5][3] = {};
};

struct CheckedLaunch {
  const Kernel *kernel = nullptr;
  kiln_attention_args args{};
  /// Backward launches: the gradients and the workspace.
  std::optional<GradValues> grad;
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

/// The argument tensor `tensor`'s device pointer, dtype and strides.
const void *tensorPointer(const kiln_attention_args &args, Tensor tensor);
kiln_dtype tensorDtype(const kiln_attention_args &args, Tensor tensor);
const int64_t *tensorStrides(const kiln_attention_args &args, Tensor tensor);
/// The launch's size of `dim`.
int64_t dimValue(const kiln_attention_args &args, Dim dim);

/// "site \"<name>\": ", which starts the messages of a launch of `site`.
std::string messagePrefix(const Site &site);

/// A KILN_INVALID_ARGUMENT error with the message fmt formats from `format`
/// and `args`.
template <typename... Args>
Error invalid(fmt::format_string<Args...> format, Args &&...args) {
  return {KILN_INVALID_ARGUMENT,
          fmt::format(format, std::forward<Args>(args)...)};
}

/// A paged launch's page size against the site's compiled one, and a power
/// of two (the kernels shift and mask by it).
Error checkPageSize(const std::string &where, const Site &site,
                    int64_t pageSize);

/// A paged launch's or append's scales: an FP8 site's two f32 arrays of
/// one scale (per tensor) or one a KV head, a float site's none.
Error checkKvScales(const std::string &where, const Site &site,
                    const float *kScale, const float *vScale,
                    int64_t numKvScales, int64_t kvHeads);

/// An FP8 cache `name`'s place: the kernels address its rows in 2-byte
/// units, so its pointer is 2-byte aligned and its page, slot and head
/// strides (`strides`, elements) even.
Error checkFp8Cache(const std::string &where, const char *name,
                    const void *pointer, const int64_t strides[3]);

/// Checks a launch of `site` with `args`. Never touches the CUDA driver.
Error checkLaunch(const Manifest &manifest, const Site &site,
                  const kiln_attention_args *argsPointer,
                  CheckedLaunch &launch);

/// Checks a backward launch of `site` (a backward site): the forward's
/// arguments as checkLaunch checks them, its lse, the gradients and the
/// workspace. Never touches the CUDA driver.
Error checkGradLaunch(const Manifest &manifest, const Site &site,
                      const kiln_attention_grad_args *argsPointer,
                      CheckedLaunch &launch);

/// Checks a paged launch of `site`. Never touches the CUDA driver.
Error checkPagedLaunch(const Manifest &manifest, const Site &site,
                       const kiln_paged_attention_args *argsPointer,
                       CheckedLaunch &launch);

/// Checks a packed launch of `site` (its packed rows stand as one sequence
/// of total_q queries and total_kv keys). Never touches the CUDA driver.
Error checkPackedLaunch(const Manifest &manifest, const Site &site,
                        const kiln_packed_attention_args *argsPointer,
                        CheckedLaunch &launch);

/// Checks the bounds a workspace size is asked for (kiln_site_workspace_size)
/// as a launch's sizes are checked.
Error checkWorkspaceBounds(const Site &site, int64_t batch, int64_t qHeads,
                           int64_t kvHeads, int64_t qLen, int64_t maxKvLen);

/// The debug check of a paged launch's kv_lens and page table
/// (PagedTableCheck.h), on `stream`.
Error checkTables(const Site &s, const CheckedLaunch &launch, void *stream);

/// The f32 workspace `splits` splits of a launch need: partial outputs and
/// two statistics per row and split.
int64_t splitWorkspaceBytes(const kiln_attention_args &args,
                            int64_t valueHeadDim, int64_t splits);

/// Whether a launch of site `s` without forced splits can take the site's
/// warp-specialised kernel: the loaded target has it, the driver encodes
/// tensor maps, and the views are what TMA and its stores take (16-byte
/// aligned Q, K and V with 16-byte strides, an output with 4-byte pairs).
bool warpSpecializedFits(const Kernel &kernel, const kiln_attention_args &args,
                         const CudaDriver &driver);

} // namespace rt
} // namespace kiln

#endif // KILN_LIB_RUNTIME_LAUNCHCHECKS_H
