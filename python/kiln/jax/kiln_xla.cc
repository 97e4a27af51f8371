//===- kiln_xla.cc - Kiln's attention as an XLA FFI handler ---------------===//
//
// The handler `KilnAttention` that `kiln.jax` registers with XLA
// (jax.ffi.register_ffi_target, platform "CUDA"): it launches a Kiln site of
// an open package on XLA's stream. It is built where JAX is, against the FFI
// headers of that JAX (jax.ffi.include_dir()) and Kiln's C API, by
// kiln.jax on first use (a C++17 compiler is needed once; the library is
// cached beside Kiln's site packages).
//
// A call passes six buffers, q, k, v, mask, bias and scale_factor, and takes
// the output and a split-KV workspace (u8; size 0: no split); the
// attribute `site` is the kiln_site pointer (the package stays open in the
// calling process) and `roles` says which of mask (1), bias (2) and
// scale_factor (4) are real (the others are one-element placeholders). Sizes
// come from the buffers: Q, K, V and out are [batch..., heads, seq, dim]
// (bhsd) or [batch..., seq, heads, dim] (bshd), every axis before the last
// three folded into the batch (as vmap leaves them); a mask or bias is
// right-aligned to [batch, q_heads, q_len, kv_len], its axes of size 1
// broadcast. Buffers are row-major and dense, as XLA hands them over.
//
//===----------------------------------------------------------------------===//

#include "kiln_xla_common.h"

namespace ffi = xla::ffi;
using namespace kiln_xla;

namespace {

ffi::Error attention(void *stream, ffi::AnyBuffer q, ffi::AnyBuffer k,
                     ffi::AnyBuffer v, ffi::AnyBuffer mask,
                     ffi::AnyBuffer bias, ffi::AnyBuffer scaleFactor,
                     ffi::Result<ffi::AnyBuffer> out,
                     ffi::Result<ffi::AnyBuffer> workspace, int64_t siteAddress,
                     int64_t roles) {
  auto *site = reinterpret_cast<const kiln_site *>(siteAddress);
  kiln_attention_args args;
  kiln_site_info info;
  ffi::Error filled = fillForward(site, "kiln.jax.attention", q, k, v, mask, bias,
                                  scaleFactor, *out, roles, args, info);
  if (filled.failure())
    return filled;
  if (workspace->size_bytes() > 0) {
    args.workspace = workspace->untyped_data();
    args.workspace_bytes = static_cast<int64_t>(workspace->size_bytes());
  }
  if (kiln_site_launch_attention(site, &args, stream) != KILN_OK)
    return kilnError("the launch");
  return ffi::Error::Success();
}

} // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(KilnAttention, attention,
                              bindForwardOperands()
                                  .Ret<ffi::AnyBuffer>() // out
                                  .Ret<ffi::AnyBuffer>() // workspace
                                  .Attr<int64_t>("site")
                                  .Attr<int64_t>("roles"),
                              {ffi::Traits::kCmdBufferCompatible});
