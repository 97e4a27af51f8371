//===- kiln_xla_train.cc - Kiln's training attention as XLA FFI handlers --===//
//
// Two handlers that `kiln.jax` registers with XLA (platform "CUDA") for
// `kiln.jax.attention(..., backward="kiln")`, built like kiln_xla.cc (on
// first use, against the installed JAX's FFI headers and Kiln's C API) but
// apart from it, so that the forward handler never depends on them:
//
// - `KilnAttentionLse`: a training package's forward site (its manifest's
//   "lse"), the buffers of KilnAttention's call, returning the output and
//   the log-sum-exp (f32 [batch, q_heads, q_len], the axes before the last
//   three of q folded into the batch);
// - `KilnAttentionGrad`: the package's backward site, on q, k, v, mask,
//   bias, scale_factor, the forward's output and log-sum-exp and the
//   output's cotangent, returning dQ, dK, dV (q's dtype, the shapes of q, k
//   and v) and its workspace (u8, at least kiln_attention_grad_workspace_size
//   bytes).
//
// `site` is the kiln_site pointer of the site each runs and `roles` says
// which of mask (1), bias (2) and scale_factor (4) are real, as for
// KilnAttention. Buffers are row-major and dense, as XLA hands them over.
//
//===----------------------------------------------------------------------===//

#include "kiln_xla_common.h"

namespace ffi = xla::ffi;
using namespace kiln_xla;

namespace {

ffi::Error attentionLse(void *stream, ffi::AnyBuffer q, ffi::AnyBuffer k,
                        ffi::AnyBuffer v, ffi::AnyBuffer mask,
                        ffi::AnyBuffer bias, ffi::AnyBuffer scaleFactor,
                        ffi::Result<ffi::AnyBuffer> out,
                        ffi::Result<ffi::AnyBuffer> lse, int64_t siteAddress,
                        int64_t roles) {
  auto *site = reinterpret_cast<const kiln_site *>(siteAddress);
  kiln_attention_args args;
  kiln_site_info info;
  ffi::Error filled = fillForward(site, "kiln.jax.attention (training)", q, k,
                                  v, mask, bias, scaleFactor, *out, roles, args,
                                  info);
  if (filled.failure())
    return filled;
  int64_t rows = args.batch * args.q_heads * args.q_len;
  if (lse->element_type() != ffi::DataType::F32 ||
      static_cast<int64_t>(lse->size_bytes()) < rows * 4)
    return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                      "kiln.jax.attention (training): the log-sum-exp must be "
                      "f32 [batch, q_heads, q_len]");
  args.lse = static_cast<float *>(lse->untyped_data());
  if (kiln_site_launch_attention(site, &args, stream) != KILN_OK)
    return kilnError("the forward launch");
  return ffi::Error::Success();
}

ffi::Error attentionGrad(void *stream, ffi::AnyBuffer q, ffi::AnyBuffer k,
                         ffi::AnyBuffer v, ffi::AnyBuffer mask,
                         ffi::AnyBuffer bias, ffi::AnyBuffer scaleFactor,
                         ffi::AnyBuffer out, ffi::AnyBuffer lse,
                         ffi::AnyBuffer gradOut,
                         ffi::Result<ffi::AnyBuffer> gradQ,
                         ffi::Result<ffi::AnyBuffer> gradK,
                         ffi::Result<ffi::AnyBuffer> gradV,
                         ffi::Result<ffi::AnyBuffer> workspace,
                         int64_t siteAddress, int64_t roles) {
  auto *site = reinterpret_cast<const kiln_site *>(siteAddress);
  kiln_attention_grad_args args;
  kiln_site_info info;
  // The forward's arguments as its launch took them: `out` is read here.
  ffi::Error filled = fillForward(site, "kiln.jax.attention (backward)", q, k,
                                  v, mask, bias, scaleFactor, out, roles,
                                  args.forward, info);
  if (filled.failure())
    return filled;
  args.forward.lse = static_cast<float *>(lse.untyped_data());
  // The gradients are dense and shaped as the tensors they belong to.
  int64_t qDims[4], kDims[4], vDims[4], outDims[4];
  if (!qkvDims(*gradQ, info.layout, qDims) ||
      !qkvDims(*gradK, info.layout, kDims) ||
      !qkvDims(*gradV, info.layout, vDims) ||
      !qkvDims(gradOut, info.layout, outDims))
    return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                      "kiln.jax.attention (backward): the gradients need at "
                      "least three axes");
  args.grad_out = gradOut.untyped_data();
  args.grad_q = gradQ->untyped_data();
  args.grad_k = gradK->untyped_data();
  args.grad_v = gradV->untyped_data();
  args.grad_out_dtype = dtypeOf(gradOut.element_type());
  args.grad_q_dtype = dtypeOf(gradQ->element_type());
  args.grad_k_dtype = dtypeOf(gradK->element_type());
  args.grad_v_dtype = dtypeOf(gradV->element_type());
  qkvStrides(outDims, info.layout, args.grad_out_strides);
  qkvStrides(qDims, info.layout, args.grad_q_strides);
  qkvStrides(kDims, info.layout, args.grad_k_strides);
  qkvStrides(vDims, info.layout, args.grad_v_strides);
  args.workspace = workspace->untyped_data();
  args.workspace_bytes = static_cast<int64_t>(workspace->size_bytes());
  if (kiln_site_launch_attention_grad(site, &args, stream) != KILN_OK)
    return kilnError("the backward launch");
  return ffi::Error::Success();
}

} // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(KilnAttentionLse, attentionLse,
                              bindForwardOperands()
                                  .Ret<ffi::AnyBuffer>() // out
                                  .Ret<ffi::AnyBuffer>() // lse
                                  .Attr<int64_t>("site")
                                  .Attr<int64_t>("roles"),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(KilnAttentionGrad, attentionGrad,
                              bindForwardOperands()
                                  .Arg<ffi::AnyBuffer>() // out
                                  .Arg<ffi::AnyBuffer>() // lse
                                  .Arg<ffi::AnyBuffer>() // grad_out
                                  .Ret<ffi::AnyBuffer>() // grad_q
                                  .Ret<ffi::AnyBuffer>() // grad_k
                                  .Ret<ffi::AnyBuffer>() // grad_v
                                  .Ret<ffi::AnyBuffer>() // workspace
                                  .Attr<int64_t>("site")
                                  .Attr<int64_t>("roles"),
                              {ffi::Traits::kCmdBufferCompatible});
