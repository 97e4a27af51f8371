/*===- kiln-c/Torch.h - kiln::attention's kernel for PyTorch -------*- C -*-===*\
|*                                                                            *|
|* A PyTorch kernel for the kiln::attention operator written in C, so that a  *|
|* call from a compiled graph runs no Python once its signature (every        *|
|* tensor's sizes, strides, dtype and device, the split count) has been       *|
|* planned. libkilnrt neither includes nor links PyTorch: the functions of    *|
|* PyTorch's stable C shim (aoti_torch_*) are looked up with dlsym in the     *|
|* PyTorch libraries the process has already loaded.                          *|
|*                                                                            *|
|* The operator's schema is defined by the Python package (kiln.torch_ops);   *|
|* kiln_torch_register_attention registers this kernel for its CUDA key. A    *|
|* call whose signature has no plan, whose site has no bound handle, that     *|
|* passes its own workspace, or whose tensors are on another device than the  *|
|* current one, is handed with its arguments unchanged to `checked_op` (the   *|
|* Python launch with every check), through PyTorch's dispatcher; that launch *|
|* calls kiln_torch_add_plan, which files its plan under the signature this   *|
|* kernel saw. Later calls of the signature allocate the output (and the      *|
|* workspace) through PyTorch's allocator on the tensors' device, set the     *|
|* pointers and launch on PyTorch's current stream; the launch still checks   *|
|* what a signature cannot fix (the pointers' alignment) every call.          *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

#ifndef KILN_C_TORCH_H
#define KILN_C_TORCH_H

#include "kiln-c/Runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/// Looks up PyTorch's C shim in `torch_library` and `torch_cuda_library`
/// (paths of libraries already loaded; NULL or "" searches every library
/// the process has loaded) and registers the kernel of "kiln::attention"
/// for the CUDA dispatch key; `checked_op` ("kiln::attention_checked") is
/// the operator unplanned calls go to, with kiln::attention's schema. Once
/// per process: a second call changes nothing and returns KILN_OK.
KILN_RT_API kiln_status kiln_torch_register_attention(
    const char *torch_library, const char *torch_cuda_library,
    const char *checked_op);

/// Binds kiln::attention's `site` argument value `handle` to `site`, which
/// must stay open as long as the process may call the operator.
KILN_RT_API kiln_status kiln_torch_bind_site(int64_t handle,
                                             const kiln_site *site);

/// Called by the checked operator while it launches a call the kernel
/// handed it: files `args` (the launch's arguments, data pointers aside),
/// the output's sizes (`out_rank` of them, the output contiguous, of q's
/// dtype) and the workspace size the launch needs (0: none) under the
/// signature of that call. Outside such a call it does nothing.
KILN_RT_API kiln_status kiln_torch_add_plan(int64_t handle,
                                            const kiln_attention_args *args,
                                            int64_t out_rank,
                                            const int64_t *out_sizes,
                                            int64_t workspace_bytes);

/// The message the checked operator's failure is reported with (set by
/// it before it raises; the dispatcher's C shim keeps only a status).
KILN_RT_API void kiln_torch_set_error(const char *message);

/// How many calls the kernel launched from a plan, and how many it handed
/// to the checked operator, since the process started.
KILN_RT_API void kiln_torch_counts(int64_t *planned, int64_t *checked);

#ifdef __cplusplus
}
#endif

#endif /* KILN_C_TORCH_H */
