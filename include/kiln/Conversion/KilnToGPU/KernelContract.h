//===- KernelContract.h - What a generated kernel promises ------*- C++ -*-===//
//
// The facts of a generated kernel that its launcher needs: block and grid,
// shared memory, the argument ABI, the companion kernels and the schedule it
// was built with. convert-kiln-to-gpu states them on each gpu.func
// (kKernelInfoAttrName) through KernelContract::toAttr; the package writer
// reads them back through KernelContract::fromAttr and writes them into the
// manifest, which the runtime reads (lib/Runtime/ManifestKernel.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CONVERSION_KILNTOGPU_KERNELCONTRACT_H
#define KILN_CONVERSION_KILNTOGPU_KERNELCONTRACT_H

#include "mlir/IR/BuiltinAttributes.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>

namespace mlir::kiln {

/// The kernel families a manifest knows.
enum class KernelKind {
  Attention,
  PagedAttention,
  SplitCombine,
  PagedAppend,
  /// kiln.attention_grad's two passes (dQ and D; then dK and dV), which
  /// take the same arguments and are launched in that order.
  AttentionGradQuery,
  AttentionGradKeyValue,
};
/// "attention", "paged_attention", "split_combine", "paged_append",
/// "attention_grad_q", "attention_grad_kv".
llvm::StringRef stringifyKernelKind(KernelKind kind);

/// How a kernel's grid covers its work. The runtime sizes a launch by it
/// (the manifest's "grid"), and the kernel's prologue maps its block index
/// back to a work item by the same rule.
struct GridRule {
  /// What grid x counts, and with it what y and z count.
  enum class Blocks {
    /// x: q_len / rows_per_block query blocks; y: query heads; z: batch.
    QueryBlocks,
    /// x: (q_len · group) / rows_per_block blocks of (query, head) pairs of
    /// one KV head's group; y: KV heads; z: batch.
    PackedQueryBlocks,
    /// x: the launch plan's items (sequence, query block); y: KV heads;
    /// z: one (ragged kernels: the packed rows are one sequence).
    PlanItems,
    /// x: batch · q_heads · q_len output rows / rows_per_block (the
    /// split-KV combine).
    OutputRows,
    /// x: the new tokens, one a block (the paged cache's append).
    NewTokens,
    /// x: kv_len / rows_per_block key blocks; y: KV heads; z: batch (the
    /// backward's key pass, whose block rows are keys).
    KeyBlocks,
  };
  Blocks blocks = Blocks::QueryBlocks;
  /// Grid z is multiplied by the launch's split count: the kernel splits
  /// keys over blocks, writing partial results to a workspace.
  bool timesSplits = false;
  /// A block an SM instead, each walking the work items the grid above
  /// would have had; only for launches of at most persistentUpToKvLen keys
  /// (0: every launch).
  bool persistent = false;
  int64_t persistentUpToKvLen = 0;

  /// Whether grid y runs over KV heads (else over query heads, or is one).
  bool headsAreKvHeads() const {
    return blocks == Blocks::PackedQueryBlocks ||
           blocks == Blocks::PlanItems || blocks == Blocks::KeyBlocks;
  }
  /// Whether grid z runs over the batch (else it is one, times the splits).
  bool zIsBatch() const {
    return blocks == Blocks::QueryBlocks ||
           blocks == Blocks::PackedQueryBlocks || blocks == Blocks::KeyBlocks;
  }
};

/// The grid rule of an attention kernel: plan items for ragged (packed)
/// sites, packed query blocks where a block serves a KV head's group,
/// query blocks otherwise; split-KV kernels multiply z by the splits.
GridRule attentionGridRule(bool ragged, bool packsQueryHeads, bool splitsKeys);

/// One kernel argument of the ABI.
struct KernelArgument {
  std::string name;
  /// "pointer", "i32", "i64", "f32" or "tensor_map".
  std::string kind;
};

/// A tensor-map argument: what the runtime encodes into it.
struct TensorMapFacts {
  /// The argument ("q_map") and the tensor it describes ("q").
  std::string argument;
  std::string tensor;
  /// The box one copy brings in: columns (head-dim elements) by rows.
  int64_t boxColumns = 0;
  int64_t boxRows = 0;
  /// The swizzle in bytes.
  int64_t swizzleBytes = 0;
};

/// The schedule a tensor-core kernel was built with.
struct MmaScheduleFacts {
  /// "mma.sync" or "wgmma".
  std::string variant;
  int64_t blocksPerSM = 0;
  /// "table", "rule" or "option".
  std::string from;
};

/// The schedule a warp-specialised kernel was built with (persistence is
/// in its grid rule).
struct WarpScheduleFacts {
  int64_t consumers = 0;
  int64_t kvBlockSize = 0;
  bool overlap = false;
  bool pingPong = false;
  /// "table", "rule" or "option".
  std::string from;
};

/// Everything the manifest states of a generated kernel.
struct KernelContract {
  KernelKind kind = KernelKind::Attention;
  int64_t threadsPerBlock = 0;
  int64_t rowsPerBlock = 0;
  /// Keys a main-loop iteration stages (0 for kernels without keys).
  int64_t kvBlockSize = 0;
  int64_t staticSharedBytes = 0;
  int64_t dynamicSharedBytes = 0;
  llvm::SmallVector<KernelArgument> arguments;
  GridRule grid;
  /// A block's rows are (query, head) pairs of one KV head's group.
  bool packsQueryHeads = false;
  /// Ragged (packed) sequences: q_len is the packed rows of every sequence.
  bool ragged = false;
  /// sm_90a launches with a cluster of the splits reduce them in the
  /// kernel (the target's "cluster_splits" says how many).
  bool clusterSplits = false;
  /// The targets whose PTX holds the kernel; empty: every target.
  llvm::SmallVector<std::string> targets;
  /// f32 attention on TF32 tensor cores: "tf32" or "3xtf32".
  std::optional<std::string> math;
  llvm::SmallVector<TensorMapFacts> tensorMaps;
  std::optional<MmaScheduleFacts> schedule;
  std::optional<WarpScheduleFacts> warpSchedule;
  /// The companions: the kernel that reduces this one's splits, and the
  /// append kernel of its paged caches.
  std::optional<std::string> combineKernel;
  std::optional<std::string> appendKernel;
  /// Why the kernel selection chose this kernel and schedule for the
  /// target it was built for, one reason a line (selectKernel's `why`).
  llvm::SmallVector<std::string> why;
  /// Companion kernels' own problem (set for SplitCombine and
  /// PagedAppend; attention kernels take theirs from their sites): the
  /// element type, the caches' (PagedAppend), and the head dims (headDim
  /// for PagedAppend only).
  std::string dtype;
  std::string cacheDtype;
  int64_t headDim = 0;
  int64_t valueHeadDim = 0;

  /// Sets the argument ABI from parallel lists of names and kinds.
  void setArguments(llvm::ArrayRef<std::string> names,
                    llvm::ArrayRef<std::string> kinds);

  /// The contract as the kKernelInfoAttrName attribute.
  DictionaryAttr toAttr(MLIRContext *context) const;
  /// The contract that `attr` states; an error naming the first field that
  /// is missing or of the wrong type.
  static llvm::Expected<KernelContract> fromAttr(DictionaryAttr attr);
};

} // namespace mlir::kiln

#endif // KILN_CONVERSION_KILNTOGPU_KERNELCONTRACT_H
