//===- KilnToGPU.h - kiln.attention to GPU kernels --------------*- C++ -*-===//
//
// Names shared by the GPU kernel generator and the package writer.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CONVERSION_KILNTOGPU_KILNTOGPU_H
#define KILN_CONVERSION_KILNTOGPU_KILNTOGPU_H

namespace mlir::kiln {

/// The gpu.module that holds every generated kernel.
inline constexpr char kKernelModuleName[] = "kiln_kernels";
/// On kiln.attention: the kernel (`@kiln_kernels::@name`) that runs it.
inline constexpr char kKernelAttrName[] = "kiln.kernel";
/// On kiln.attention: the site name the manifest and runtime use.
inline constexpr char kSiteAttrName[] = "kiln.site";
/// On a paged twin of a causal site (kilnc --kv-cache=paged:N): the name of
/// the site whose attention it runs over a paged KV cache.
inline constexpr char kDecodeOfAttrName[] = "kiln.decode_of";
/// On kiln.attention in the sm_90a module: the warp-specialised kernel
/// (`@kiln_kernels::@name`) the runtime launches instead of kKernelAttrName's
/// where the views allow (TMA-describable, not decode).
inline constexpr char kWarpSpecializedKernelAttrName[] =
    "kiln.warp_specialized_kernel";
/// On kiln.attention_grad: the backward's key pass (dK and dV), launched
/// after kKernelAttrName's query pass (dQ and D).
inline constexpr char kGradKeyValueKernelAttrName[] = "kiln.grad_kv_kernel";
/// On a generated gpu.func: its KernelContract (KernelContract.h), the
/// launch facts the manifest states, written by KernelContract::toAttr and
/// read by KernelContract::fromAttr only.
inline constexpr char kKernelInfoAttrName[] = "kiln.kernel_info";
/// Most splits of a launch whose split kernel reduces its splits itself in
/// a thread-block cluster (sm_90a; 16 blocks a cluster need the non-portable
/// cluster size attribute): the manifest target's "cluster_splits".
inline constexpr int kMaxClusterSplits = 16;

} // namespace mlir::kiln

#endif // KILN_CONVERSION_KILNTOGPU_KILNTOGPU_H
