//===- kiln_xla_common.h - What Kiln's XLA FFI handlers share --------------===//
//
// Included by kiln_xla.cc (the forward handler) and kiln_xla_train.cc (the
// forward that keeps its log-sum-exp, and the backward): buffer shapes and
// strides as Kiln's C API takes them, and the forward's arguments filled
// from a call's buffers. Everything is inline: each handler library is one
// translation unit.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_JAX_KILN_XLA_COMMON_H
#define KILN_JAX_KILN_XLA_COMMON_H

#include "kiln-c/Runtime.h"
#include "xla/ffi/api/ffi.h"

#include <cstdint>
#include <string>

namespace ffi = xla::ffi;

namespace kiln_xla {

inline constexpr int64_t kMaskRole = 1, kBiasRole = 2, kScaleFactorRole = 4;

inline kiln_dtype dtypeOf(ffi::DataType type) {
  switch (type) {
  case ffi::DataType::F16:
    return KILN_DTYPE_F16;
  case ffi::DataType::BF16:
    return KILN_DTYPE_BF16;
  case ffi::DataType::F32:
    return KILN_DTYPE_F32;
  case ffi::DataType::PRED:
    return KILN_DTYPE_BOOL;
  default:
    return KILN_DTYPE_NONE;
  }
}

/// The dims of a Q/K/V/out buffer as {batch, heads, seq, dim}: the axes
/// before the last three folded into the batch.
inline bool qkvDims(const ffi::AnyBuffer &buffer, kiln_layout layout,
             int64_t dims[4]) {
  auto shape = buffer.dimensions();
  int64_t rank = static_cast<int64_t>(shape.size());
  if (rank < 3)
    return false;
  int64_t batch = 1;
  for (int64_t i = 0; i < rank - 3; ++i)
    batch *= shape[i];
  int64_t a = shape[rank - 3], b = shape[rank - 2], d = shape[rank - 1];
  dims[0] = batch;
  dims[1] = layout == KILN_LAYOUT_BSHD ? b : a;
  dims[2] = layout == KILN_LAYOUT_BSHD ? a : b;
  dims[3] = d;
  return true;
}

/// Strides {batch, head, seq, dim} of a dense row-major buffer of `dims`.
inline void qkvStrides(const int64_t dims[4], kiln_layout layout,
                int64_t strides[4]) {
  int64_t heads = dims[1], seq = dims[2], dim = dims[3];
  strides[3] = 1;
  if (layout == KILN_LAYOUT_BSHD) {
    strides[1] = dim;
    strides[2] = heads * dim;
  } else {
    strides[2] = dim;
    strides[1] = seq * dim;
  }
  strides[0] = heads * seq * dim;
}

/// Strides of a mask or bias over [batch, q_heads, q_len, kv_len] (`full`),
/// right-aligned, its size-1 axes broadcast; leading axes past four are
/// folded into the batch. False when a size neither matches nor is 1.
inline bool termStrides(const ffi::AnyBuffer &buffer, const int64_t full[4],
                 int64_t strides[4], std::string &why) {
  auto shape = buffer.dimensions();
  int64_t rank = static_cast<int64_t>(shape.size());
  int64_t dims[4] = {1, 1, 1, 1};
  int64_t batch = 1;
  for (int64_t i = 0; i < rank; ++i) {
    int64_t axis = i - (rank - 4);
    if (axis <= 0)
      batch *= shape[i];
    else
      dims[axis] = shape[i];
  }
  dims[0] = batch;
  int64_t stride = 1;
  for (int64_t axis = 3; axis >= 0; --axis) {
    if (dims[axis] != full[axis] && dims[axis] != 1) {
      why = "axis " + std::to_string(axis) + " has " +
            std::to_string(dims[axis]) + " elements where the attention has " +
            std::to_string(full[axis]);
      return false;
    }
    strides[axis] = dims[axis] == 1 ? 0 : stride;
    stride *= dims[axis];
  }
  return true;
}

inline ffi::Error kilnError(const char *what) {
  return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                    std::string("kiln.jax.attention: ") + what + ": " +
                        kiln_last_error());
}

/// The binding every handler starts with: XLA's stream, then the forward's
/// operands q, k, v, mask, bias and scale_factor (fillForward's order).
inline auto bindForwardOperands() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::PlatformStream<void *>>()
      .Arg<ffi::AnyBuffer>() // q
      .Arg<ffi::AnyBuffer>() // k
      .Arg<ffi::AnyBuffer>() // v
      .Arg<ffi::AnyBuffer>() // mask
      .Arg<ffi::AnyBuffer>() // bias
      .Arg<ffi::AnyBuffer>(); // scale_factor
}

/// The forward's launch arguments from a call's buffers (q, k, v, the
/// output, and the mask, bias and scale factor that `roles` marks real), in
/// the layout of `site` (its info, in `info`). `what` names the call in
/// errors.
inline ffi::Error fillForward(const kiln_site *site, const char *what,
                              const ffi::AnyBuffer &q, const ffi::AnyBuffer &k,
                              const ffi::AnyBuffer &v, const ffi::AnyBuffer &mask,
                              const ffi::AnyBuffer &bias,
                              const ffi::AnyBuffer &scaleFactor,
                              ffi::AnyBuffer &out, int64_t roles,
                              kiln_attention_args &args, kiln_site_info &info) {
  auto fail = [&](const std::string &message) {
    return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                      std::string(what) + ": " + message);
  };
  if (kiln_site_get_info(site, &info) != KILN_OK)
    return kilnError("the site");
  kiln_attention_args_init(&args);
  int64_t qDims[4], kDims[4], vDims[4], outDims[4];
  if (!qkvDims(q, info.layout, qDims) || !qkvDims(k, info.layout, kDims) ||
      !qkvDims(v, info.layout, vDims) || !qkvDims(out, info.layout, outDims))
    return fail("q, k, v and the output need at least three axes");
  args.q = q.untyped_data();
  args.k = k.untyped_data();
  args.v = v.untyped_data();
  args.out = out.untyped_data();
  args.q_dtype = dtypeOf(q.element_type());
  args.k_dtype = dtypeOf(k.element_type());
  args.v_dtype = dtypeOf(v.element_type());
  args.out_dtype = dtypeOf(out.element_type());
  args.batch = qDims[0];
  args.q_heads = qDims[1];
  args.q_len = qDims[2];
  args.head_dim = qDims[3];
  args.kv_heads = kDims[1];
  args.kv_len = kDims[2];
  args.v_head_dim = vDims[3] == qDims[3] ? 0 : vDims[3];
  if (kDims[0] != qDims[0] || vDims[0] != qDims[0])
    return fail("q, k and v have different batches");
  qkvStrides(qDims, info.layout, args.q_strides);
  qkvStrides(kDims, info.layout, args.k_strides);
  qkvStrides(vDims, info.layout, args.v_strides);
  qkvStrides(outDims, info.layout, args.out_strides);
  const int64_t full[4] = {args.batch, args.q_heads, args.q_len, args.kv_len};
  // The mask and the bias: pointer, element type and broadcast strides.
  std::string why;
  auto term = [&](const ffi::AnyBuffer &buffer, const void *&data,
                  kiln_dtype &dtype, int64_t strides[4]) {
    data = buffer.untyped_data();
    dtype = dtypeOf(buffer.element_type());
    return termStrides(buffer, full, strides, why);
  };
  if ((roles & kMaskRole) &&
      !term(mask, args.mask, args.mask_dtype, args.mask_strides))
    return fail("the mask's " + why);
  if ((roles & kBiasRole) &&
      !term(bias, args.bias, args.bias_dtype, args.bias_strides))
    return fail("the bias's " + why);
  if (roles & kScaleFactorRole)
    args.scale_factor = static_cast<const float *>(scaleFactor.untyped_data());
  return ffi::Error::Success();
}

} // namespace kiln_xla

#endif // KILN_JAX_KILN_XLA_COMMON_H
