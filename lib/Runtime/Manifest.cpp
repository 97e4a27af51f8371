//===- Manifest.cpp - What a package manifest holds -----------------------===//
//
// The manifest's names of dtypes, dims and tensors, and the choice of a
// target for a device. Parsing lives in ManifestParser.cpp and
// ManifestKernel.cpp.
//
//===----------------------------------------------------------------------===//

#include "Manifest.h"

namespace kiln {
namespace rt {

const char *dtypeName(kiln_dtype dtype) {
  switch (dtype) {
  case KILN_DTYPE_F16:
    return "f16";
  case KILN_DTYPE_BF16:
    return "bf16";
  case KILN_DTYPE_F32:
    return "f32";
  case KILN_DTYPE_BOOL:
    return "i1";
  case KILN_DTYPE_F8E4M3:
    return "f8e4m3";
  case KILN_DTYPE_NONE:
    break;
  }
  return "none";
}

const char *dimName(Dim dim) {
  switch (dim) {
  case Dim::Batch:
    return "batch";
  case Dim::QHeads:
    return "q_heads";
  case Dim::KvHeads:
    return "kv_heads";
  case Dim::QLen:
    return "q_len";
  case Dim::KvLen:
    return "kv_len";
  case Dim::HeadDim:
    return "head_dim";
  }
  return "?";
}

const char *tensorName(Tensor tensor) {
  static const char *names[] = {"q", "k", "v", "out", "mask", "bias"};
  return names[static_cast<int>(tensor)];
}

int selectTarget(const Manifest &manifest, int major, int minor) {
  int device = major * 10 + minor;
  // 1. Arch-specific PTX for exactly this device; 2. plain PTX for it;
  // 3. the newest plain PTX older than the device (PTX JITs forward).
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < manifest.targets.size(); ++i) {
      const Target &target = manifest.targets[i];
      if (target.smVersion == device && target.archSpecific == (pass == 0))
        return static_cast<int>(i);
    }
  }
  int best = -1;
  for (size_t i = 0; i < manifest.targets.size(); ++i) {
    const Target &target = manifest.targets[i];
    if (target.archSpecific || target.smVersion > device)
      continue;
    if (best < 0 || target.smVersion > manifest.targets[best].smVersion)
      best = static_cast<int>(i);
  }
  return best;
}

} // namespace rt
} // namespace kiln
