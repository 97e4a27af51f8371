//===- Manifest.h - Kiln package manifest model ---------------------------===//
//
// The in-memory form of a package's manifest.json (format version 1) and its
// parser. Parsing validates everything a launch relies on, so that launches
// only check the caller's arguments.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_RUNTIME_MANIFEST_H
#define KILN_LIB_RUNTIME_MANIFEST_H

#include "kiln-c/Runtime.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln {
namespace rt {

/// A failure with the status it maps to in the C API.
struct Error {
  kiln_status status = KILN_OK;
  std::string message;
  explicit operator bool() const { return status != KILN_OK; }
  static Error ok() { return {}; }
};

/// Dimensions a kernel argument or grid rule can refer to.
enum class Dim : uint8_t { Batch, QHeads, KvHeads, QLen, KvLen, HeadDim };
constexpr int kNumDims = 6;

/// Tensors of an attention launch.
enum class Tensor : uint8_t { Q, K, V, Out, Mask, Bias };
constexpr int kNumTensors = 6;

/// Where the value of one kernel parameter comes from.
enum class ArgSource : uint8_t {
  Pointer, ///< device pointer of `tensor`
  Dim,     ///< the launch dimension `dim`
  Stride,  ///< stride `axis` of `tensor` (axis 0..2 for Q/K/V/out, 0..3
           ///< for mask/bias)
  Scale,   ///< the site's scale
  Softcap, ///< the site's soft-capping value
  Window,  ///< the site's sliding-window size
  /// Paged sites: the page table or the key counts (`paged` = 0 or 1);
  /// ragged sites also q_offsets or the plan (2, 3); packed sites (ragged
  /// "attention" kernels) kv_offsets (4) with q_offsets and the plan.
  PagedPointer,
  /// Paged sites: max_pages, num_pages or page_size (`paged` = 0, 1, 2);
  /// ragged sites also the sequence count (3).
  PagedDim,
  /// Paged sites: the page table's batch stride.
  PageTableStride,
  /// Split-KV kernels: the launch's split count.
  NumSplits,
  /// Split-KV kernels: the caller's workspace (f32 partial results).
  Workspace,
  /// A TMA tensor map of `tensor` (Q, K or V), encoded at launch and passed
  /// by value (128 bytes).
  TensorMap,
  /// Paged-append kernels: argument `paged` of kAppendArgNames, from a
  /// kiln_paged_append_args.
  Append,
  /// Paged kernels of FP8 caches: the f32 dequantisation scales of the
  /// keys or the values (`paged` = 0 or 1).
  KvScale,
  /// Kernels of sites with a run-time scale: the pointer to its one f32.
  ScaleFactor,
  /// Kernels that write or read the log-sum-exp (kiln_attention_args.lse).
  Lse,
  /// The backward's kernels: grad_out, delta (the workspace), grad_q,
  /// grad_k or grad_v (`paged` = 0..4), from a kiln_attention_grad_args.
  GradPointer,
  /// The backward's kernels: stride `axis` (batch, head, seq) of grad_out,
  /// grad_q, grad_k or grad_v (`paged` = 0, 2, 3, 4).
  GradStride,
};

enum class ArgKind : uint8_t { Pointer, I32, I64, F32, TensorMap };

/// The arguments of a paged-append kernel (PagedAppendArgs.def), each by
/// its name: the kernel takes them in any order.
enum class AppendArg : uint8_t {
#define KILN_APPEND_ARG(name, kind) name,
#include "kiln/Runtime/PagedAppendArgs.def"
};
constexpr int kNumAppendArgs = 0
#define KILN_APPEND_ARG(name, kind) +1
#include "kiln/Runtime/PagedAppendArgs.def"
    ;
extern const char *const kAppendArgNames[kNumAppendArgs];
/// Each argument's kind in the .def: Pointer, or I32 or I64 for an
/// integer (which the manifest may declare either way).
extern const ArgKind kAppendArgKinds[kNumAppendArgs];

/// The dequantisation scales of a paged site's FP8 caches, as
/// kiln_site_info.kv_scales numbers them.
enum class KvScales : uint8_t { None = 0, PerTensor = 1, PerKvHead = 2 };

struct KernelArg {
  std::string name;
  ArgKind kind = ArgKind::Pointer;
  ArgSource source = ArgSource::Pointer;
  Tensor tensor = Tensor::Q;
  Dim dim = Dim::Batch;
  int axis = 0;
  /// Which paged pointer or dimension (see ArgSource).
  int paged = 0;
  kiln_dtype dtype = KILN_DTYPE_NONE; ///< of a pointer, when the manifest says
  /// Tensor maps: the box (columns, rows) each copy moves and its swizzle
  /// in bytes (128 for Q, K and V; 64 or 128 for a staged mask or bias).
  int64_t boxColumns = 0, boxRows = 0, swizzleBytes = 128;
};

/// One grid axis: product of `dims` (empty = 1), divided rounding up.
struct GridRule {
  std::vector<Dim> dims;
  /// Dimensions the product of `dims` is divided by, exactly, before the
  /// ceil_div (`"per"`).
  std::vector<Dim> perDims;
  int64_t constant = 1;
  int64_t ceilDiv = 1;
  /// Multiplied by the launch's split count (`"times_splits"`).
  bool timesSplits = false;
  /// Ragged kernels' grid x: the launch's plan items (`"dim":
  /// "plan_items"`).
  bool planItems = false;
  /// Persistent kernels' grid x: the blocks the device holds at once, an
  /// SM's times the SM count (`"dim": "multiprocessors"`); with
  /// `"up_to_kv_len": N` (> 0) only for launches of at most N keys, a block
  /// an item past that.
  bool multiprocessors = false;
  int64_t multiprocessorsUpToKvLen = 0;
};

struct Kernel {
  std::string name;
  std::string kind;
  /// "paged_attention": K and V are read through a page table.
  bool paged = false;
  /// Kernels of packed queries (`"ragged"`): blocks from a plan. Paged
  /// ones read K and V through the page table, "attention" ones (packed
  /// sequences) from packed key rows by kv_offsets.
  bool ragged = false;
  /// Rows of Q (or packed (query, head) pairs) a block computes.
  int64_t rowsPerBlock = 64;
  /// "split_combine": reduces the splits of split-KV kernels.
  bool combine = false;
  /// A kernel that splits keys: the index of its combine kernel.
  std::optional<size_t> combineIndex;
  /// "paged_append": writes new keys and values into a paged cache.
  bool append = false;
  /// One of the backward's passes ("attention_grad_q" or
  /// "attention_grad_kv"), launched by kiln_site_launch_attention_grad.
  bool grad = false;
  /// A paged kernel: the index of its caches' append kernel.
  std::optional<size_t> appendIndex;
  kiln_dtype dtype = KILN_DTYPE_NONE;
  /// Paged and append kernels: the element of the KV caches
  /// (`"cache_dtype"`, `dtype` when absent); `dtype` elsewhere.
  kiln_dtype cacheDtype = KILN_DTYPE_NONE;
  std::optional<int64_t> headDim;
  /// Head dim of V and out (the same as headDim unless the manifest says).
  std::optional<int64_t> valueHeadDim;
  bool causal = false;
  /// Window and softcap compiled into the kernel (null when the kernel has
  /// none, or takes them as arguments).
  std::optional<int64_t> window;
  std::optional<float> softcap;
  kiln_mask_kind mask = KILN_MASK_NONE;
  kiln_dtype maskDtype = KILN_DTYPE_NONE;
  bool bias = false;
  kiln_dtype biasDtype = KILN_DTYPE_NONE;
  int32_t block[3] = {1, 1, 1};
  /// Keys a block stages per step (its split-KV granularity).
  int64_t kvBlockSize = 64;
  GridRule grid[3];
  int64_t staticSharedBytes = 0;
  int64_t dynamicSharedBytes = 0;
  std::vector<KernelArg> args;
  /// The chips whose PTX has this kernel; empty for every target's.
  std::vector<std::string> targets;
  /// Whether the kernel is in `chip`'s PTX.
  bool inTarget(const std::string &chip) const {
    return targets.empty() ||
           std::find(targets.begin(), targets.end(), chip) != targets.end();
  }
};

struct Site {
  std::string name;
  std::string kernelName;
  /// A kiln.paged_attention site (launched with paged arguments).
  bool paged = false;
  /// Paged sites: static page size, or nullopt.
  std::optional<int64_t> pageSize;
  /// Paged sites of packed queries (q_offsets), launched with a plan.
  bool ragged = false;
  size_t kernelIndex = 0;
  /// The warp-specialised kernel launched instead where its targets, the
  /// shape and the views allow.
  std::optional<size_t> warpSpecializedIndex;
  std::string function;
  std::string location;
  kiln_layout layout = KILN_LAYOUT_BHSD;
  kiln_dtype dtype = KILN_DTYPE_NONE;
  /// Paged sites: the element of the KV caches (`dtype` or
  /// KILN_DTYPE_F8E4M3) and, for FP8 ones, their scales. Other sites:
  /// `dtype` and none.
  kiln_dtype cacheDtype = KILN_DTYPE_NONE;
  KvScales kvScales = KvScales::None;
  float scale = 1.0f;
  /// The site's op takes a run-time scale: its kernels take the factor's
  /// pointer (kiln_attention_args.scale_factor).
  bool scaleFactor = false;
  /// The factor holds one f32 a query head ("scale_factor": "per_head"),
  /// not one f32 (`true`).
  bool scaleFactorPerHead = false;
  bool causal = false;
  std::optional<int64_t> window;
  std::optional<float> softcap;
  /// Static sizes, indexed by Dim; nullopt = dynamic.
  std::optional<int64_t> dims[kNumDims];
  /// Head dim of V and out; nullopt = dynamic.
  std::optional<int64_t> valueHeadDim;
  kiln_mask_kind mask = KILN_MASK_NONE;
  kiln_dtype maskDtype = KILN_DTYPE_NONE;
  bool bias = false;
  kiln_dtype biasDtype = KILN_DTYPE_NONE;
  /// The site's kernel writes the log-sum-exp (kiln_attention_args.lse):
  /// a forward that trains.
  bool lse = false;
  /// A backward site ("kind": "attention_grad"): its kernel is the query
  /// pass and this kernel the key pass, launched after it.
  std::optional<size_t> keyPassIndex;
};

struct Target {
  std::string chip; ///< "sm_90a"
  std::string ptxFile;
  std::string ptx; ///< contents, NUL-terminated by std::string
  int smVersion = 0; ///< 90 for sm_90 and sm_90a
  bool archSpecific = false; ///< the "a" suffix
  /// "grid_dependency": the combine kernels of this PTX wait for the split
  /// kernel before them (griddepcontrol.wait), so they may be launched with
  /// programmatic stream serialization.
  bool gridDependency = false;
  /// "attention_grid_dependency": the attention kernels of this PTX wait for
  /// the grids before them (griddepcontrol.wait) before their first global
  /// memory access, so they may be launched with programmatic stream
  /// serialization.
  bool attentionGridDependency = false;
  /// "cluster_splits": the split kernels of this PTX reduce their splits
  /// themselves when launched with a cluster of up to this many blocks along
  /// grid z, split-minor (no combine kernel); 0 when they do not.
  int64_t clusterSplits = 0;
};

struct Manifest {
  std::string directory;
  std::string producer;
  std::string source;
  std::vector<Target> targets;
  std::vector<Kernel> kernels;
  std::vector<Site> sites;
};

/// Most splits of a split-KV launch (the combine kernels keep a lane's share
/// of this many splits' statistics in registers: kMaxSplitsPerLaunch).
constexpr int64_t kMaxSplits = 128;

/// Most parameters a kernel may take.
constexpr size_t kMaxKernelArgs = 64;

/// Reads `directory`/manifest.json and every PTX file it names.
Error loadManifest(const std::string &directory, Manifest &manifest);

/// Parses manifest text; `directory` resolves PTX file names and prefixes
/// messages. PTX files are read when `readPtx` is set.
Error parseManifest(const std::string &text, const std::string &directory,
                    bool readPtx, Manifest &manifest);

/// Index into `manifest.targets` of the PTX for compute capability
/// major.minor, or -1.
int selectTarget(const Manifest &manifest, int major, int minor);

const char *dtypeName(kiln_dtype dtype);
const char *dimName(Dim dim);
/// "q", "k", "v", "out", "mask" or "bias".
const char *tensorName(Tensor tensor);

} // namespace rt
} // namespace kiln

#endif // KILN_LIB_RUNTIME_MANIFEST_H
