/*===- kiln-c/Runtime.h - Kiln runtime C API ----------------------*- C -*-===*\
|*                                                                            *|
|* The C API of libkilnrt: open a package written by kilnc (PTX files plus    *|
|* manifest.json), look up its attention sites, validate launch arguments     *|
|* against the manifest and launch the kernels on a caller's CUDA stream.     *|
|*                                                                            *|
|* libkilnrt depends only on the C/C++ runtime. The CUDA driver (libcuda.so.1) *|
|* is loaded with dlopen the first time a kernel is launched, so everything   *|
|* that does not launch (opening packages, queries, argument checks) works on *|
|* machines without a GPU or driver.                                          *|
|*                                                                            *|
|* Errors: every function that can fail returns a kiln_status; the message of *|
|* the last failure on the calling thread is kiln_last_error(). No function   *|
|* lets a C++ exception escape.                                               *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

/* Concurrency contract.
 *
 * Threads: every function may be called from several threads at once on one
 * package (the per-context module and function caches are guarded inside),
 * except kiln_package_close, which must not race any other use of that
 * package. kiln_last_error() is per thread.
 *
 * Streams: libkilnrt keeps no device memory of its own between launches.
 * Launches that may overlap on the device (on different streams, or in
 * CUDA graphs replayed on different streams) may share every buffer they
 * only read (q, k, v, mask, bias, the caches, page_table, kv_lens), and must
 * not share any buffer a launch writes: `out`, and the split-KV `workspace`
 * (each launch writes its partial results there, and the combine or the
 * cluster reduction reads them back). One workspace may serve any number of
 * launches that are ordered on one stream. A workspace must stay allocated
 * until the last launch that was given it has finished on its stream.
 *
 * Processes: a package directory is only read; several processes may open
 * the same one.
 */

#ifndef KILN_C_RUNTIME_H
#define KILN_C_RUNTIME_H

#include <stdint.h>

#if defined(_WIN32)
#define KILN_RT_API __declspec(dllexport)
#else
#define KILN_RT_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/// Version of this C API. Bumped on any change of a struct layout below.
#define KILN_RUNTIME_API_VERSION 11
/// The manifest format_version this runtime reads.
#define KILN_MANIFEST_FORMAT_VERSION 1
/// Value of a site dimension that the manifest leaves dynamic (null).
#define KILN_DYNAMIC ((int64_t)-1)

typedef enum kiln_status {
  KILN_OK = 0,
  /// An argument does not satisfy the manifest or the API contract.
  KILN_INVALID_ARGUMENT = 1,
  /// A package directory, manifest, PTX file or named site does not exist.
  KILN_NOT_FOUND = 2,
  /// A file exists but could not be read.
  KILN_IO_ERROR = 3,
  /// manifest.json is not valid JSON or does not follow the format.
  KILN_FORMAT_ERROR = 4,
  /// The CUDA driver is missing or a driver call failed.
  KILN_CUDA_ERROR = 5,
  /// Valid input that this runtime cannot handle (format version, device).
  KILN_UNSUPPORTED = 6,
  /// A bug in libkilnrt (an unexpected exception was caught).
  KILN_INTERNAL_ERROR = 7,
} kiln_status;

typedef enum kiln_dtype {
  KILN_DTYPE_NONE = 0, /* no tensor */
  KILN_DTYPE_F16 = 1,
  KILN_DTYPE_BF16 = 2,
  KILN_DTYPE_F32 = 3,
  KILN_DTYPE_BOOL = 4, /* "i1" in the manifest: one byte, nonzero = attend */
  /* "f8e4m3": one byte, FP8 e4m3 (finite, no infinities); the element of
     a paged site's FP8 KV caches (C API version 8). */
  KILN_DTYPE_F8E4M3 = 5,
} kiln_dtype;

typedef enum kiln_mask_kind {
  KILN_MASK_NONE = 0,
  KILN_MASK_ADDITIVE = 1, /* float tensor added to the scores */
  KILN_MASK_BOOLEAN = 2,  /* bool tensor, true = the key takes part */
} kiln_mask_kind;

typedef enum kiln_layout {
  KILN_LAYOUT_BHSD = 0, /* Q/K/V/out are [batch, heads, seq, head_dim] */
  KILN_LAYOUT_BSHD = 1, /* Q/K/V/out are [batch, seq, heads, head_dim] */
} kiln_layout;

/// An open package. Immutable once open (its module cache is thread-safe).
typedef struct kiln_package kiln_package;
/// An attention site of a package; valid until the package is closed.
typedef struct kiln_site kiln_site;

/// Attributes of a site, as written in the manifest. Strings are owned by the
/// package. Dimensions are KILN_DYNAMIC where the manifest says null.
typedef struct kiln_site_info {
  const char *name;
  const char *kernel;   /* entry name of the kernel the site launches */
  const char *function; /* function of the source graph holding the site */
  const char *location; /* source location text ("" when absent) */
  kiln_layout layout;
  kiln_dtype dtype; /* of Q and out; of K and V unless FP8 (cache_dtype) */
  float scale;
  int32_t causal;
  int64_t window; /* 0 when the site has no sliding window */
  int32_t has_softcap;
  float softcap;
  int64_t batch;
  int64_t q_heads;
  int64_t kv_heads;
  int64_t q_len;
  int64_t kv_len;
  int64_t head_dim;
  kiln_mask_kind mask;
  kiln_dtype mask_dtype; /* KILN_DTYPE_NONE when mask == KILN_MASK_NONE */
  int32_t bias;
  kiln_dtype bias_dtype; /* KILN_DTYPE_NONE when there is no bias */
  int64_t v_head_dim;    /* of V and out; KILN_DYNAMIC when not fixed */
  int32_t paged;         /* a kiln.paged_attention site */
  int64_t page_size;     /* paged sites; KILN_DYNAMIC when not fixed */
  int32_t split_kv;      /* the kernel can split keys (see workspace) */
  int32_t ragged;        /* sites taking packed queries (q_offsets): paged
                            ones, and attention sites of packed sequences
                            (C API version 9; kiln_packed_attention_args) */
  /* Paged sites (C API version 8): the element of the KV caches, dtype or
     KILN_DTYPE_F8E4M3; and an FP8 cache's dequantisation scales, 0 none
     (float caches), 1 per tensor (num_kv_scales 1), 2 per KV head
     (num_kv_scales kv_heads). Other sites: dtype and 0. */
  kiln_dtype cache_dtype;
  int32_t kv_scales;
  /* C API version 10: the site takes a run-time scale (its launches pass
     kiln_attention_args.scale_factor): 0 none, 1 one f32, 2 one f32 a
     query head (q_heads floats; "scale_factor": "per_head" in the
     manifest). */
  int32_t scale_factor;
  /* The site's kernel writes (a forward) or reads (a backward) the
     log-sum-exp, kiln_attention_args.lse (C API version 11). */
  int32_t lse;
  /* A backward site (kiln_site_launch_attention_grad): the key pass, the
     kernel launched after `kernel`; NULL for every other site. */
  const char *key_pass;
} kiln_site_info;

/// Attributes of a kernel entry of a package.
typedef struct kiln_kernel_info {
  const char *name;
  const char *kind; /* "attention" */
  kiln_dtype dtype;
  int64_t head_dim; /* KILN_DYNAMIC when not fixed */
  int32_t block[3];
  int64_t static_shared_bytes;
  int64_t dynamic_shared_bytes;
  int32_t num_args;
} kiln_kernel_info;

/// Arguments of one attention launch. Pointers are CUDA device pointers.
/// Strides are in elements. Q, K, V and out strides are ordered
/// {batch, head, seq, head_dim} whatever the site's layout, and the head_dim
/// stride must be 1. Mask and bias strides are over their logical
/// [batch, q_heads, q_len, kv_len] shape; a stride of 0 broadcasts that axis.
typedef struct kiln_attention_args {
  const void *q;
  const void *k;
  const void *v;
  void *out;
  const void *mask; /* NULL when the site has no mask */
  const void *bias; /* NULL when the site has no bias */
  kiln_dtype q_dtype;
  kiln_dtype k_dtype;
  kiln_dtype v_dtype;
  kiln_dtype out_dtype;
  kiln_dtype mask_dtype;
  kiln_dtype bias_dtype;
  int64_t batch;
  int64_t q_heads;
  int64_t kv_heads;
  int64_t q_len;
  int64_t kv_len;
  int64_t head_dim;
  int64_t q_strides[4];
  int64_t k_strides[4];
  int64_t v_strides[4];
  int64_t out_strides[4];
  int64_t mask_strides[4];
  int64_t bias_strides[4];
  /* Head dim of V and out when it differs from head_dim (multi-head latent
     attention); 0 means head_dim. */
  int64_t v_head_dim;
  /* Split-KV (sites whose kernel splits keys; see
     kiln_site_workspace_size): a device buffer of workspace_bytes bytes,
     16-byte aligned, that the launch may use for partial results, and the
     split count: 0 chooses one from the device and the shape, n forces n
     (1: no split). Without a workspace a launch does not split. */
  void *workspace;
  int64_t workspace_bytes;
  int64_t num_splits;
  /* Sites whose op takes a run-time scale ("scale_factor" in the manifest):
     a device pointer to one f32 that multiplies the site's scale, read by
     the kernel (capturable: the value may change between replays); where
     the manifest says "per_head" (kiln_site_info.scale_factor 2), to
     q_heads contiguous f32s, the one of query head h multiplying the
     scores of head h (the launch cannot check the count). NULL for every
     other site. */
  const float *scale_factor;
  /* Sites that keep the log-sum-exp ("lse" in the manifest; C API version
     11): an f32 [batch, q_heads, q_len] contiguous buffer the forward
     writes each row's log-sum-exp to (-inf for a row that sees no key),
     and the backward (kiln_site_launch_attention_grad) reads. NULL for
     every other site. */
  float *lse;
} kiln_attention_args;

/// Arguments of a backward launch (a kiln.attention_grad site, "kind":
/// "attention_grad"; C API version 11). `forward` holds the forward's
/// operands as its launch took them (q, k, v, mask, bias, scale_factor),
/// its output as `out` and its log-sum-exp as `lse` (both read here), with
/// their dtypes, sizes and strides. The gradients have the dtype of q and
/// the shapes of out (grad_out), q, k and v; strides in elements, the
/// last 1. dK and dV of a KV head are the sums over the query heads that
/// read it. `workspace` is a device buffer of at least
/// kiln_attention_grad_workspace_size bytes (each row's D = Σ grad_out·out,
/// f32), 16-byte aligned.
typedef struct kiln_attention_grad_args {
  kiln_attention_args forward;
  const void *grad_out;
  void *grad_q;
  void *grad_k;
  void *grad_v;
  kiln_dtype grad_out_dtype;
  kiln_dtype grad_q_dtype;
  kiln_dtype grad_k_dtype;
  kiln_dtype grad_v_dtype;
  int64_t grad_out_strides[4];
  int64_t grad_q_strides[4];
  int64_t grad_k_strides[4];
  int64_t grad_v_strides[4];
  void *workspace;
  int64_t workspace_bytes;
} kiln_attention_grad_args;

/// Arguments of one paged-attention launch (a kiln.paged_attention site).
/// K and V live in caches of pages: key j of sequence b is in page
/// page_table[b][j / page_size], slot j % page_size, and sequence b has
/// kv_lens[b] keys. Strides are in elements: q and out {batch, head, seq,
/// head_dim}, the caches {page, slot, head, head_dim}, the page table
/// {batch, entry}; head_dim strides must be 1.
typedef struct kiln_paged_attention_args {
  const void *q;
  const void *key_cache;
  const void *value_cache;
  void *out;
  const int32_t *page_table; /* [batch, max_pages] */
  const int32_t *kv_lens;    /* [batch] */
  kiln_dtype q_dtype;
  kiln_dtype key_cache_dtype;
  kiln_dtype value_cache_dtype;
  kiln_dtype out_dtype;
  int64_t batch;
  int64_t q_heads;
  int64_t kv_heads;
  int64_t q_len;
  int64_t head_dim;
  int64_t v_head_dim; /* 0: head_dim */
  int64_t num_pages;
  int64_t page_size;
  int64_t max_pages;
  int64_t q_strides[4];
  int64_t key_cache_strides[4];
  int64_t value_cache_strides[4];
  int64_t out_strides[4];
  int64_t page_table_strides[2];
  /* Split-KV (sites whose kernel splits keys; see
     kiln_site_workspace_size): a device buffer of workspace_bytes bytes,
     16-byte aligned, that the launch may use for partial results, and the
     split count: 0 chooses one from the device and the shape, n forces n
     (1: no split). Without a workspace a launch does not split. */
  void *workspace;
  int64_t workspace_bytes;
  int64_t num_splits;
  /* The sum of kv_lens over the batch where the caller knows it on the host
     (a serving scheduler does), 0 where it does not. Only the split count
     chosen at launch depends on it: with it, a batch of uneven lengths is
     split so that its longest sequences do not run alone at the end. It
     must not exceed batch x max_pages x page_size. */
  int64_t total_kv_len;
  /* Ragged sites (kiln_site_info.ragged): the queries of every sequence
     packed along one axis. q and out are [total_q, q_heads, head_dim]
     with q_len = total_q and strides {0, head, row, head_dim}; sequence b
     owns rows [q_offsets[b], q_offsets[b + 1]) (q_offsets: [batch + 1]
     int32 on the device). The launch runs the plan_items work items of
     `plan` (int32 pairs on the device, 8-byte aligned), which
     kiln_site_plan_paged_attention writes for the batch's offsets; items
     naming no sequence (sequence -1) do nothing, so a plan buffer of fixed
     capacity serves every step of a CUDA graph. NULL and 0 elsewhere. */
  const int32_t *q_offsets;
  const int32_t *plan;
  int64_t plan_items;
  /* FP8 caches (kiln_site_info.cache_dtype KILN_DTYPE_F8E4M3; C API
     version 8): the caches hold e4m3 bytes (key_cache_dtype and
     value_cache_dtype KILN_DTYPE_F8E4M3; the other dtypes the site's), and
     key j of KV head h reads f32(key) x k_scale[h] (k_scale[0] for scales
     per tensor), values likewise with v_scale. k_scale and v_scale are f32
     on the device, 4-byte aligned, num_kv_scales each: 1 per tensor,
     kv_heads per KV head (kiln_site_info.kv_scales). The kernels address
     FP8 rows in 2-byte units: the caches must be 2-byte aligned and their
     page, slot and head strides even. NULL, NULL and 0 for float caches. */
  const float *k_scale;
  const float *v_scale;
  int64_t num_kv_scales;
} kiln_paged_attention_args;

/// Arguments of one launch of an attention site of packed sequences
/// (kiln_site_info.ragged with paged 0; C API version 9): FlashAttention's
/// varlen form. Every sequence's queries are packed along one axis, q and out
/// [total_q, q_heads, head_dim] (out: v_head_dim), and its keys and values
/// along another, k and v [total_kv, kv_heads, head_dim] (v: v_head_dim);
/// sequence b owns query rows [q_offsets[b], q_offsets[b + 1]) and key rows
/// [kv_offsets[b], kv_offsets[b + 1]) (int32 on the device, [batch + 1]),
/// and is attended as the uniform op would attend it alone (causal and
/// windows bottom-right aligned on its own rows). Offsets are clamped into
/// [0, total] and ordered on the GPU, so bad ones read and write nothing
/// outside the tensors; rows no sequence owns are not written. Strides are
/// in elements, {row, head, head_dim}, head_dim strides 1. The launch runs
/// the plan_items work items of `plan` (int32 pairs on the device, 8-byte
/// aligned) that kiln_site_plan_packed_attention writes; empty items
/// (sequence -1) do nothing, so a plan of fixed capacity serves every
/// replay of a CUDA graph.
typedef struct kiln_packed_attention_args {
  const void *q;
  const void *k;
  const void *v;
  void *out;
  const int32_t *q_offsets;  /* [batch + 1] */
  const int32_t *kv_offsets; /* [batch + 1] */
  const int32_t *plan;
  int64_t plan_items;
  kiln_dtype q_dtype;
  kiln_dtype k_dtype;
  kiln_dtype v_dtype;
  kiln_dtype out_dtype;
  int64_t batch; /* sequences */
  int64_t q_heads;
  int64_t kv_heads;
  int64_t total_q;
  int64_t total_kv;
  int64_t head_dim;
  int64_t v_head_dim; /* 0: head_dim */
  int64_t q_strides[3];
  int64_t k_strides[3];
  int64_t v_strides[3];
  int64_t out_strides[3];
  /* Split-KV, as in kiln_attention_args (kiln_site_workspace_size with
     batch 1, q_len total_q and max_kv_len the longest sequence's keys). */
  void *workspace;
  int64_t workspace_bytes;
  int64_t num_splits;
  /* The longest sequence's key count where the host knows it, 0 where it
     does not (then total_kv). Only the split count chosen at launch
     depends on it, never the result. */
  int64_t max_kv_len;
} kiln_packed_attention_args;

/// A paged site's cache append (C API version 7): each sequence's new
/// keys and values, packed along one axis, written into its pages. `key`
/// and `value` are [total_new, kv_heads, head_dim] (v_head_dim for value;
/// strides {token, head, head_dim}, head_dim stride 1); sequence b owns
/// tokens [new_offsets[b], new_offsets[b + 1]) (new_offsets: [batch + 1]
/// int32 on the device), and kv_lens[b] counts its keys with the new ones
/// (the kv_lens of the attention launch that reads them), so its new token
/// j goes to position kv_lens[b] - n_b + j: page
/// page_table[b][position / page_size], slot position % page_size. The
/// caches and the page table are as in kiln_paged_attention_args. A token
/// whose place lies outside the caches (offsets or lengths that do not
/// fit, a page entry outside [0, num_pages)) is not written. An FP8 site's
/// caches (kiln_site_info.cache_dtype KILN_DTYPE_F8E4M3) take key and
/// value in the site's dtype and store each element as e4m3 of
/// element / scale (saturated to +-448), the scales as in
/// kiln_paged_attention_args.
typedef struct kiln_paged_append_args {
  const void *key;
  const void *value;
  void *key_cache;
  void *value_cache;
  const int32_t *page_table;  /* [batch, max_pages] */
  const int32_t *kv_lens;     /* [batch] */
  const int32_t *new_offsets; /* [batch + 1] */
  kiln_dtype key_dtype;
  kiln_dtype value_dtype;
  kiln_dtype key_cache_dtype;
  kiln_dtype value_cache_dtype;
  int64_t batch;
  int64_t kv_heads;
  int64_t total_new;
  int64_t head_dim;
  int64_t v_head_dim; /* 0: head_dim */
  int64_t num_pages;
  int64_t page_size;
  int64_t max_pages;
  int64_t key_strides[3];
  int64_t value_strides[3];
  int64_t key_cache_strides[4];
  int64_t value_cache_strides[4];
  int64_t page_table_strides[2];
  /* FP8 caches (C API version 8): the scales the new keys and values are
     divided by, as kiln_paged_attention_args's; NULL, NULL and 0 for
     float caches. */
  const float *k_scale;
  const float *v_scale;
  int64_t num_kv_scales;
} kiln_paged_append_args;

/// The launch configuration a launch would use.
typedef struct kiln_launch_config {
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t dynamic_shared_bytes;
} kiln_launch_config;

/*===-------------------------- General --------------------------------===*/

/// The message of the last failure on this thread ("" if none). Valid until
/// the next failing call on this thread.
KILN_RT_API const char *kiln_last_error(void);
/// A fixed name of a status ("KILN_OK", "KILN_INVALID_ARGUMENT", ...).
KILN_RT_API const char *kiln_status_string(kiln_status status);
/// The name of a dtype as the manifest spells it ("bf16", "i1", ...; "none").
KILN_RT_API const char *kiln_dtype_name(kiln_dtype dtype);
/// Size in bytes of one element of a dtype (0 for KILN_DTYPE_NONE).
KILN_RT_API int64_t kiln_dtype_size(kiln_dtype dtype);
/// KILN_RUNTIME_API_VERSION of the library (to check a header/library match).
KILN_RT_API int32_t kiln_runtime_api_version(void);
/// Loads the CUDA driver now (it is otherwise loaded at the first launch).
/// KILN_CUDA_ERROR with a message when libcuda.so.1 cannot be loaded or
/// initialised. The environment variable KILN_CUDA_DRIVER_LIB overrides the
/// library name.
KILN_RT_API kiln_status kiln_cuda_driver_load(void);

/*===-------------------------- Packages -------------------------------===*/

/// Opens the package in `directory`: reads and validates manifest.json and
/// reads every PTX file it names. Nothing touches the CUDA driver.
KILN_RT_API kiln_status kiln_package_open(const char *directory,
                                          kiln_package **package);
/// Closes a package (NULL is ignored); unloads the modules it loaded. Sites
/// of the package are invalid afterwards.
KILN_RT_API void kiln_package_close(kiln_package *package);
/// The manifest's "producer" string.
KILN_RT_API const char *kiln_package_producer(const kiln_package *package);
/// Number of sites / kernels / targets in the package (0 for NULL).
KILN_RT_API int64_t kiln_package_num_sites(const kiln_package *package);
KILN_RT_API int64_t kiln_package_num_kernels(const kiln_package *package);
KILN_RT_API int64_t kiln_package_num_targets(const kiln_package *package);
/// The site at `index` in manifest order.
KILN_RT_API kiln_status kiln_package_get_site(const kiln_package *package,
                                              int64_t index,
                                              const kiln_site **site);
/// The site named `name`; KILN_NOT_FOUND lists the available names.
KILN_RT_API kiln_status kiln_package_find_site(const kiln_package *package,
                                               const char *name,
                                               const kiln_site **site);
/// The kernel at `index` in manifest order.
KILN_RT_API kiln_status kiln_package_get_kernel(const kiln_package *package,
                                                int64_t index,
                                                kiln_kernel_info *info);
/// The chip name ("sm_90a") of the target at `index`.
KILN_RT_API kiln_status kiln_package_get_target(const kiln_package *package,
                                                int64_t index,
                                                const char **chip);
/// The chip of the PTX that a device of compute capability major.minor
/// would load: "sm_XYa" for exactly that device if present, else "sm_XY",
/// else the newest plain target not newer than the device. KILN_UNSUPPORTED
/// when there is none.
KILN_RT_API kiln_status kiln_package_select_target(const kiln_package *package,
                                                   int32_t major,
                                                   int32_t minor,
                                                   const char **chip);
/// Compiles every kernel of the package for the current CUDA context now
/// (launches otherwise compile each kernel's module when it is first
/// needed). Call it before capturing launches in a CUDA graph.
KILN_RT_API kiln_status kiln_package_prepare(kiln_package *package);
/// Compiles, for the current CUDA context, the kernels a prefill launch of
/// `site` takes: the warp-specialised kernel where the device's target has
/// one, else the site's kernel and its combine kernel; a backward site's
/// key pass too. Other kernels still compile when first needed.
KILN_RT_API kiln_status kiln_site_prepare(const kiln_site *site);

/*===-------------------------- Sites ----------------------------------===*/

/// The attributes of a site.
KILN_RT_API kiln_status kiln_site_get_info(const kiln_site *site,
                                           kiln_site_info *info);

/// Sets `args` to an empty argument set: NULL pointers, KILN_DTYPE_NONE,
/// zero dimensions and strides.
KILN_RT_API void kiln_attention_args_init(kiln_attention_args *args);

/// Contiguous strides (elements, ordered {batch, head, seq, head_dim}) of a
/// [batch, heads, seq, head_dim] tensor stored in `layout`.
KILN_RT_API kiln_status kiln_contiguous_strides(kiln_layout layout,
                                                int64_t batch, int64_t heads,
                                                int64_t seq, int64_t head_dim,
                                                int64_t strides[4]);

/// Fills the Q, K, V and out strides of `args` for contiguous tensors in the
/// site's layout, from the dimensions already in `args`; and, where `args`
/// has a mask or bias pointer, contiguous [batch, q_heads, q_len, kv_len]
/// strides for it.
KILN_RT_API kiln_status
kiln_attention_args_set_contiguous(const kiln_site *site,
                                   kiln_attention_args *args);

/// Checks `args` against the site and its kernel exactly as a launch would,
/// without touching the CUDA driver. On success `config` (if not NULL) holds
/// the launch configuration.
KILN_RT_API kiln_status kiln_site_check_attention(const kiln_site *site,
                                                  const kiln_attention_args *args,
                                                  kiln_launch_config *config);

/// Checks `args`, then launches the site's kernel on `stream` (a CUstream;
/// NULL is the legacy default stream) in the current CUDA context (or the
/// stream's context when none is current). Never synchronizes and never
/// allocates device memory, so it can be captured in a CUDA graph once the
/// module is loaded (see kiln_package_prepare). The kernel's own errors are
/// reported asynchronously by the stream, as for any launch. A batch of 0
/// launches nothing (its pointers may be NULL); a batch larger than one
/// grid holds (grid y and z stop at 65535) runs as several launches of
/// consecutive sequences on the stream.
KILN_RT_API kiln_status kiln_site_launch_attention(
    const kiln_site *site, const kiln_attention_args *args, void *stream);

/// The workspace bytes a backward launch of these sizes needs
/// (batch · q_heads · q_len f32).
KILN_RT_API int64_t kiln_attention_grad_workspace_size(int64_t batch,
                                                       int64_t q_heads,
                                                       int64_t q_len);
/// Checks a backward launch against its site and both kernels, as a launch
/// would, without the driver; on success `configs` (if not NULL) holds the
/// launch configurations of the query pass and the key pass.
KILN_RT_API kiln_status kiln_site_check_attention_grad(
    const kiln_site *site, const kiln_attention_grad_args *args,
    kiln_launch_config configs[2]);
/// Checks, then launches a backward site's two passes on `stream`, the
/// query pass (dQ and D) then the key pass (dK and dV): never allocates or
/// synchronises, so it can be captured once the module is loaded.
KILN_RT_API kiln_status kiln_site_launch_attention_grad(
    const kiln_site *site, const kiln_attention_grad_args *args,
    void *stream);

/// A packed site's launch (kiln_packed_attention_args; C API version 9),
/// checked as kiln_site_check_attention checks its tensors; no driver
/// needed.
KILN_RT_API kiln_status kiln_site_check_packed_attention(
    const kiln_site *site, const kiln_packed_attention_args *args,
    kiln_launch_config *config);
/// Checks, then launches a packed site on `stream`, as
/// kiln_site_launch_attention does: never allocates or synchronises
/// (capturable). A batch of 0, total_q of 0 or a plan of 0 items launches
/// nothing.
KILN_RT_API kiln_status kiln_site_launch_packed_attention(
    const kiln_site *site, const kiln_packed_attention_args *args,
    void *stream);
/// The split count such a launch uses on the current device.
KILN_RT_API kiln_status kiln_site_packed_attention_splits(
    const kiln_site *site, const kiln_packed_attention_args *args,
    int64_t *splits);
/// The plan of a packed launch, as kiln_site_plan_paged_attention's, from
/// host copies of the launch's `q_offsets` and `kv_offsets` ([batch + 1]
/// each; both start at 0 and never decrease, or KILN_INVALID_ARGUMENT names
/// the first bad entry).
KILN_RT_API kiln_status kiln_site_plan_packed_attention(
    const kiln_site *site, const int32_t *q_offsets, const int32_t *kv_offsets,
    int64_t batch, int64_t q_heads, int64_t kv_heads, int32_t *plan,
    int64_t capacity, int64_t *items);

/// A paged site's launch, checked as kiln_site_check_attention does (and
/// then the page table and key-count sizes); no driver needed.
KILN_RT_API kiln_status kiln_site_check_paged_attention(
    const kiln_site *site, const kiln_paged_attention_args *args,
    kiln_launch_config *config);

/// Checks, then launches a paged site on `stream` (a CUstream; NULL for the
/// default stream). Never allocates or synchronises: capturable. On the GPU
/// kv_lens[b] is clamped to [0, max_pages x page_size] and each page-table
/// entry to [0, num_pages), so a bad table reads nothing outside the cache
/// but gives wrong answers silently; with the environment variable
/// KILN_CHECK=1 every paged launch is first validated as
/// kiln_site_validate_paged_attention does (which synchronises).
KILN_RT_API kiln_status kiln_site_launch_paged_attention(
    const kiln_site *site, const kiln_paged_attention_args *args, void *stream);

/// The debug check of a paged launch (C API version 5): after the checks of
/// kiln_site_check_paged_attention, a kernel on `stream` validates kv_lens
/// (each in [0, max_pages x page_size]) and every page-table entry the
/// launch may read (positions below ceil(kv_lens[b] / page_size), from the
/// first page a compiled sliding window reaches; each in [0, num_pages)).
/// Waits for the stream; KILN_INVALID_ARGUMENT names the first bad place in
/// (sequence, position) order, its value and the valid range. Allocates 8
/// bytes of device memory for the answer. Does nothing while `stream` is
/// being captured into a CUDA graph.
KILN_RT_API kiln_status kiln_site_validate_paged_attention(
    const kiln_site *site, const kiln_paged_attention_args *args, void *stream);

/// The workspace a site's launches need to split keys as they choose, for
/// every launch of at most `batch` sequences of at most `q_len` queries
/// against at most `max_kv_len` keys (a paged site: max_pages x page_size),
/// on the device of the current CUDA context: allocate it once and pass it
/// in every launch (kiln_attention_args.workspace). 0 when the site's kernel
/// does not split keys. Loads the package's module (as kiln_package_prepare).
KILN_RT_API kiln_status kiln_site_workspace_size(
    const kiln_site *site, int64_t batch, int64_t q_heads, int64_t kv_heads,
    int64_t q_len, int64_t max_kv_len, int64_t *bytes);

/// The split count a launch with `args` uses on the current device (0 in
/// num_splits: the launch's own choice), in `splits`.
KILN_RT_API kiln_status kiln_site_attention_splits(
    const kiln_site *site, const kiln_attention_args *args, int64_t *splits);
KILN_RT_API kiln_status kiln_site_paged_attention_splits(
    const kiln_site *site, const kiln_paged_attention_args *args,
    int64_t *splits);

/// The plan of a ragged paged launch (kiln_site_info.ragged): its work
/// items, (sequence, query block) int32 pairs, heaviest first (by the keys
/// a block visits, from `kv_lens` where given, else by the sequence's
/// queries), so that long prompt chunks start first and decodes fill the
/// tail. `q_offsets` ([batch + 1]) and `kv_lens` ([batch], or NULL) are host
/// copies of the launch's. The items go to `plan` (host, `capacity` pairs),
/// the rest of it filled with empty items (sequence -1), and `*items`
/// receives the count. Copy the plan to the device buffer the launch reads;
/// passing plan_items = capacity keeps one launch shape (a CUDA graph's).
/// KILN_INVALID_ARGUMENT names the first bad offset (offsets start at 0 and
/// never decrease) and a capacity too small (kiln_site_plan_capacity).
KILN_RT_API kiln_status kiln_site_plan_paged_attention(
    const kiln_site *site, const int32_t *q_offsets, const int32_t *kv_lens,
    int64_t batch, int64_t q_heads, int64_t kv_heads, int32_t *plan,
    int64_t capacity, int64_t *items);
/// The plan capacity (items) that every ragged launch of at most `batch`
/// sequences and `total_q` queries fits in.
KILN_RT_API kiln_status kiln_site_plan_capacity(const kiln_site *site,
                                                int64_t batch, int64_t total_q,
                                                int64_t q_heads,
                                                int64_t kv_heads,
                                                int64_t *capacity);

/// Writes a step's new keys and values into the paged caches of a paged
/// site (kiln_paged_append_args), on `stream`, with the package's append
/// kernel for the site's dtype and head dims: one kernel launch, capturable
/// in a CUDA graph. total_new = 0 launches nothing. KILN_INVALID_ARGUMENT
/// for arguments that do not match the site (checked before the driver is
/// touched); KILN_UNSUPPORTED for a site without an append kernel (a
/// package written before the append existed).
KILN_RT_API kiln_status kiln_site_append_paged_kv(
    const kiln_site *site, const kiln_paged_append_args *args, void *stream);
/// The launch configuration kiln_site_append_paged_kv would use; touches
/// no driver (the argument checks alone).
KILN_RT_API kiln_status kiln_site_append_config(
    const kiln_site *site, const kiln_paged_append_args *args,
    kiln_launch_config *config);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KILN_C_RUNTIME_H */
