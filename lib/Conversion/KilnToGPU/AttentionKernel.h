//===- AttentionKernel.h - Attention kernel builders ------------*- C++ -*-===//
//
// What every generated attention kernel shares: the specialisation key, the
// argument ABI and the builder base. Every schedule (Schedules/: scalar,
// mma.sync/wgmma, TF32, warp-specialised) derives from
// AttentionKernelBuilder and builds only its main loop from the parts
// (Parts/, Products/; README.md).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_CONVERSION_KILNTOGPU_ATTENTIONKERNEL_H
#define KILN_LIB_CONVERSION_KILNTOGPU_ATTENTIONKERNEL_H

#include "kiln/Conversion/KilnToGPU/KernelContract.h"
#include "kiln/Conversion/KilnToGPU/KilnToGPU.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <memory>
#include <optional>
#include <string>

namespace mlir::kiln::detail {

inline constexpr int64_t kWarpSize = 32;
inline constexpr int64_t kWarpsPerBlock = 4;
inline constexpr int64_t kThreadsPerBlock = kWarpSize * kWarpsPerBlock;
/// Static shared memory a kernel may use without an opt-in.
inline constexpr int64_t kStaticSharedLimit = 48 * 1024;
/// Shared memory a block may use on sm_80 and later with the opt-in (sm_80
/// allows 163 KiB, sm_90 227 KiB; kernels stay within the smaller).
inline constexpr int64_t kDynamicSharedLimit = 163 * 1024;

/// The attention a site computes, as far as its kernel depends on it: what
/// KernelSpec::name() spells beside the kernel family.
struct AttentionProblem {
  Type elementType;
  int64_t headDim;
  /// V's and the output's head dim when it differs from headDim (MLA).
  std::optional<int64_t> valueHeadDim;
  bool causal;
  std::optional<int64_t> window;
  /// Keys past the diagonal by more than this are hidden (window_right);
  /// unset with causal, which is a right bound of 0.
  std::optional<int64_t> windowRight;
  std::optional<float> softcap;
  Type maskType; // null when there is no mask
  Type biasType; // null when there is no bias
  /// The mask's (bias's) query axis has size 1 in the op's type: one row
  /// of keys serves every query (a key-padding mask).
  bool maskOneRow = false;
  bool biasOneRow = false;
  /// The score of a key hidden by the boolean mask, causal or window (the
  /// op's masked_score); -inf when unset.
  std::optional<float> maskedScore;
  /// K and V are read through a page table from caches laid out
  /// `[num_pages, page_size, Hkv, D]` (kiln.paged_attention), with each
  /// sequence's key count from `kv_lens`.
  bool paged = false;
  /// Paged only: queries packed per sequence, `[total_q, Hq, D]` with
  /// `q_offsets [B + 1]` (the op's ragged form). Each block takes its
  /// (sequence, query block) from the launch's plan, grid x over the plan's
  /// items; q and out are addressed by the sequence's first row, and the
  /// split workspace's rows are the packed rows (the combine kernel sees
  /// one sequence of total_q queries).
  /// Without `paged`: kiln.attention's packed form, whose K and V are
  /// packed too, `[total_kv, Hkv, D]` with `kv_offsets [B + 1]`; K and V
  /// are addressed by the sequence's first key row, and its key count is
  /// the difference of its offsets.
  bool ragged = false;
  /// Paged only: the caches hold e4m3 (f8E4M3FN) with f32 dequantisation
  /// scales, one for the whole cache or one a KV head (`perHeadScales`);
  /// the kernel converts each tile to f16 in shared memory and computes in
  /// f16 whatever the query's type, folding the scales into the score scale
  /// and the output.
  bool fp8Cache = false;
  bool perHeadScales = false;
  /// The op's run-time scale_factor: the kernel takes a pointer to one f32
  /// (argument `scale_factor`, last) and multiplies the score scale by it.
  bool scaleFactor = false;
  /// The factor is `[Hq]`, one a query head: the kernel reads the element
  /// of its block's head. Only for kernels whose block has one query head
  /// (grid y over query heads, or over KV heads of groups of one head; not
  /// persistent): the selection keeps to those.
  bool perHeadScaleFactor = false;
  /// The kernel also writes each row's log-sum-exp (natural log, f32,
  /// `[B, Hq, Sq]` contiguous; argument `lse`, after every other): the
  /// forward of a site that trains, and the backward passes, which read it.
  bool lse = false;

  /// The head dim of V and the output.
  int64_t valueDim() const { return valueHeadDim.value_or(headDim); }
  /// A bias or a float (additive) mask adds to the scores.
  bool addsToScores() const {
    return biasType || (maskType && !maskType.isInteger(1));
  }
  /// The right bound of the band of visible keys: 0 for causal.
  std::optional<int64_t> rightBound() const {
    if (causal)
      return 0;
    return windowRight;
  }
};

/// Which kernel computes the problem (the family is the prefix of
/// KernelSpec::name()), and the schedule it runs; the schedule's fields are
/// not part of the name, so that one manifest describes every target.
struct KernelVariant {
  /// Built on mma.sync tensor-core instructions rather than scalar FMAs.
  bool tensorCores = false;
  /// An f32 site on the TF32 tensor-core kernel (allow-tf32): mma.sync
  /// m16n8k8 with operands rounded to TF32 and f32 accumulation.
  bool tf32 = false;
  /// With tf32: every operand split into a TF32 high part and a TF32 low
  /// part (what the rounding left), each product three mma (high·high,
  /// high·low, low·high): about f32's accuracy on tensor cores.
  bool tf32Split = false;
  /// The sm_90a variant of the tensor-core kernel: S = Q·Kᵀ and O += P·V on
  /// wgmma from 128-byte-swizzled shared tiles. It has the name, arguments,
  /// grid and shared-memory size of the portable kernel, so that one
  /// manifest describes both (not part of name()).
  bool wgmma = false;
  /// The sm_90a-only warp-specialised kernel (Schedules/WarpSpecialized/WarpSpecialized.cpp): a
  /// producer warp brings Q, K and V tiles in with TMA through tensor maps
  /// passed as kernel parameters, two consumer warpgroups compute on wgmma.
  /// Its own kernel beside the site's portable one, for launches whose
  /// views TMA can describe.
  bool warpSpecialized = false;
  /// With warpSpecialized: each consumer warpgroup issues S of tile i and
  /// P·V of tile i - 1 together and runs the softmax of tile i while P·V
  /// runs (not part of name()).
  bool overlapSoftmax = false;
  /// With overlapSoftmax and two consumers: they take turns to issue their
  /// products (not part of name()).
  bool pingPong = false;
  /// With warpSpecialized: consumer warpgroups of 64 rows and keys a K/V
  /// tile, from its schedule (not part of name()).
  int64_t warpConsumers = 2;
  int64_t warpTileKeys = 128;
  /// With warpSpecialized: one block an SM walks the work items (query
  /// block, head, sequence) in turn, its producer loading the next item's
  /// Q and tiles while the consumers finish the last (not part of name()).
  bool persistent = false;
  /// With persistent: launched so only up to this many keys (0: always;
  /// see WarpSpecializedSchedule::persistentUpToKeys; not part of name()).
  int64_t persistentUpToKeys = 0;
  /// With warpSpecialized and a mask or bias: the producer brings each key
  /// tile's mask and bias tiles in with TMA beside K (mask_map, bias_map),
  /// and the consumers read them from shared memory, rather than each
  /// score's from global memory (name(): "_st", and "k" for a one-row
  /// term).
  bool stagedTerms = false;
  /// Blocks per SM the tensor-core kernel's registers must leave room for
  /// (ptxas's .minnctapersm); 0 leaves it to ptxas. From its schedule.
  /// FP8 caches on targets with cvt.rn.f16x2.e4m3x2 (sm_89 on): the
  /// tiles are converted by that instruction rather than by moving bits
  /// (not part of name()).
  bool fp8HardwareConvert = false;
  int64_t blocksPerSM = 0;
  /// Which pass of the attention the kernel computes: the forward, or one
  /// of kiln.attention_grad's two (Schedules/Backward/): the query pass
  /// (dQ and each row's D = Σ grad_out·out, by query blocks as the
  /// forward) and the key pass (dK and dV, by key blocks of a KV head,
  /// reading D), launched in that order. Part of name().
  enum class Pass { Forward, GradQuery, GradKeyValue };
  Pass pass = Pass::Forward;
};

/// How the kernel is launched and works with the kernels launched around
/// it: the grid's meaning, the split-KV reduction and the sm_90 launch
/// overlap. The runtime learns these from the manifest, not the name.
struct LaunchProtocol {
  /// A block's rows are (query, head) pairs of one KV head's group rather
  /// than the queries of one head, so K and V tiles serve the whole group
  /// (grid y runs over KV heads).
  bool packQueryHeads = false;
  /// The keys of a block can be split over several blocks (grid z runs over
  /// batch x num_splits), each writing its rows' partial output and
  /// softmax statistics to a workspace that the combine kernel reduces. A
  /// launch with num_splits = 1 writes the output directly.
  bool splitKV = false;
  /// sm_90: a split kernel signals the combine kernel launched after it
  /// (griddepcontrol.launch_dependents as each block's last instruction);
  /// the combine kernel waits for its results with griddepcontrol.wait.
  /// Launched with programmatic stream serialization, the combine's launch
  /// then overlaps the split kernel's last blocks. (Signalled at the start
  /// instead, the combine's blocks were placed beside running split blocks
  /// and decode got up to 9% slower: docs/perf-log/
  /// 2026-12-01-decode-profile-l2.md, "The combine kernel launched early".)
  bool launchDependents = false;
  /// sm_90: the kernel waits for the grids before it on its stream
  /// (griddepcontrol.wait) before its first global memory access, so that
  /// the runtime may launch it with programmatic stream serialization: its
  /// blocks are then placed, and read their parameters and work out their
  /// indices, while the kernel before it drains. Without such a launch the
  /// wait returns at once.
  bool waitForGrid = false;
  /// sm_90: launched with a thread-block cluster of num_splits blocks along
  /// grid z (then split-minor: block z works on split z % num_splits of
  /// sequence z / num_splits), a split kernel reduces its splits itself:
  /// after a cluster barrier each block reduces a share of the rows from the
  /// workspace and writes the output, and no combine kernel runs. Launched
  /// without a cluster it behaves as without this. At most
  /// kMaxClusterSplits splits.
  bool clusterSplits = false;
};

/// Everything that makes two attention sites need different kernels: the
/// problem, the kernel that computes it and how that kernel is launched.
struct KernelSpec {
  AttentionProblem problem;
  KernelVariant variant;
  LaunchProtocol launch;

  /// The kernel's symbol: the family, then the problem.
  std::string name() const;
};

/// The gpu.func attribute listing the arguments that are tensor maps: after
/// the lowering to NVVM they become 64-byte-aligned, 128-byte byval
/// parameters marked nvvm.grid_constant (markTensorMapArguments).
inline constexpr char kTensorMapArgsAttrName[] = "kiln.tensor_map_args";

/// The module's dynamic shared memory: one extern array for the whole
/// module, declared by declareDynamicShared; every launch gets its own
/// dynamic shared memory behind it.
inline constexpr char kDynamicSharedName[] = "kiln_dynamic_shared";
/// Declares that array (1024-byte aligned) at the builder's insertion point
/// in the gpu.module, unless it is there already.
void declareDynamicShared(OpBuilder &moduleBuilder, Location loc);

/// Arithmetic on the builder `b` that every generated kernel uses.
class KernelBuilderBase {
protected:
  ~KernelBuilderBase() = default;

  Value constIndex(int64_t value);
  Value constF32(float value);
  Value toIndex(Value v);
  Value toI32(Value v);
  Value toI64(Value v);
  /// x / y, x % y and ceil(x / y) of index values that fit in 32 bits,
  /// computed in 32 (a 64-bit division is a branch around a slow path).
  Value divU32(Value x, Value y);
  Value remU32(Value x, Value y);
  Value ceilDivU32(Value x, Value y);
  Value add(Value x, Value y);
  Value sub(Value x, Value y);
  Value mul(Value x, Value y);
  Value fadd(Value x, Value y);
  Value fmul(Value x, Value y);
  Value fmax(Value x, Value y);
  /// Emits `body` under `scf.if condition` (no else).
  void ifThen(Value condition, llvm::function_ref<void()> body);
  /// Emits `body` under `scf.if index < bound` (unsigned; no else).
  void ifBelow(Value index, int64_t bound, llvm::function_ref<void()> body);
  /// The results (`types`) of `scf.if condition`: `thenValues()` built in
  /// its then region and `elseValues()` in its else region; without
  /// `elseValues` (and then without results) the branch has no else.
  SmallVector<Value>
  ifElse(Value condition, TypeRange types,
         llvm::function_ref<SmallVector<Value>()> thenValues,
         llvm::function_ref<SmallVector<Value>()> elseValues = nullptr);
  /// scf.for from `begin` to `end` by `step` carrying `init`: `body(iv,
  /// carried)` is built with `b` on the loop body and gives the values
  /// yielded.
  scf::ForOp
  forLoop(Value begin, Value end, Value step, ValueRange init,
          llvm::function_ref<SmallVector<Value>(Value, ValueRange)> body);
  /// 2^x with the hardware's ex2.approx.ftz.f32 (about 2 ulp; 2^-inf = +0;
  /// results below 2^-126 flush to +0). One MUFU.EX2: without .ftz, ptxas
  /// wraps each ex2 in a range test and two multiplies for subnormal
  /// results, which no softmax weight or rescaling factor needs (a weight
  /// under 2^-126 of the row's largest is lost in its sum anyway).
  /// Called as an NVVM intrinsic: the generic exp2 lowers to a libdevice
  /// call, which would make the PTX depend on the CUDA toolkit's bitcode.
  Value exp2(Value x);
  /// tanh(x) = 1 - 2 / (2^(2x·log2 e) + 1), on the same ex2 as the softmax.
  Value tanh(Value x);
  /// The module's dynamic shared memory (see kDynamicSharedName), as a
  /// shared pointer.
  Value dynamicShared();
  /// The shared pointer `bytes` bytes past the shared pointer `base`.
  Value sharedByteOffset(Value base, int64_t bytes);
  /// Loads element `offset` (i64) of global `base` as f32 (i1 stays i1).
  Value loadGlobalAsF32(Value base, Type elementType, Value offset);
  /// Butterfly reduction with xor shuffles of offsets `firstOffset`,
  /// `firstOffset / 2`, ..., 1: over the warp for 16, over a quad for 2.
  Value butterfly(Value value, bool isMax, int32_t firstOffset);
  /// log2(x) with the hardware's lg2.approx.f32 (log2(0) = -inf).
  Value log2(Value x);
  /// One tile's online-softmax step for the rows g and g + 8 a thread holds
  /// in the m16n8 accumulator layout: `scores` (log2 units) four per 8-key
  /// block (rows g, g, g + 8, g + 8); `state` = {max_g, max_g+8, sum_g,
  /// sum_g+8, O accumulators (four per 8-column block, same rows)}. The
  /// maxima are reduced over the quad; the sums stay per thread (the quad
  /// adds them up at the end). Returns the probabilities in the scores'
  /// layout; `newState` gets the new maxima and sums, `acc` the O
  /// accumulators rescaled to the new maxima.
  /// `alphas`, when given, gets the two rows' rescaling factors (what the
  /// O accumulators were multiplied by).
  /// With `scoreScale` (> 0, log2 units), `scores` are raw dot products
  /// (-inf where hidden): the row maxima are taken over them and scaled
  /// once, and each weight is 2^fma(score, scoreScale, -max), one FMA where
  /// a scaled score would take a multiply and a subtraction.
  SmallVector<Value> onlineSoftmaxStep(ArrayRef<Value> scores, ValueRange state,
                                       SmallVector<Value> &newState,
                                       SmallVector<Value> &acc,
                                       SmallVector<Value> *alphas = nullptr,
                                       Value scoreScale = Value());
  /// onlineSoftmaxStep with lazy rescaling (scores in log2 units): the
  /// state's maxima are references that move, with the rescale of the sums
  /// and O accumulators, only when a score of the warp's rows passes them
  /// by more than `threshold` (a warp vote, so the branch is uniform).
  /// Weights reach 2^threshold at most. Every lane of the warp must call it.
  SmallVector<Value> lazyOnlineSoftmaxStep(ArrayRef<Value> scores,
                                           ValueRange state,
                                           SmallVector<Value> &newState,
                                           SmallVector<Value> &acc,
                                           float threshold);
  /// Row r's (0: g, 1: g + 8) maximum over `scores`, reduced over the quad
  /// (times `scoreScale` where given).
  Value rowTileMax(ArrayRef<Value> scores, int64_t r, Value scoreScale);
  /// `max`, or 0 where it is -inf (a row that saw only hidden keys).
  Value safeRowMax(Value max);
  /// Row r's weights 2^(score - safeMax) (or 2^fma(score, scoreScale,
  /// -safeMax)) into `probabilities`; returns `sum` plus them.
  Value rowWeights(ArrayRef<Value> scores, int64_t r, Value safeMax,
                   Value scoreScale, Value sum,
                   SmallVector<Value> &probabilities);
  /// 1 / sum where sum > 0, else 0: the output scale of a row whose softmax
  /// denominator is `sum` (rows that saw no key are zeros).
  Value reciprocalOrZero(Value sum);
  /// The f32 pair (low, high) as two values of `elementType` (f16 or bf16)
  /// in one i32, low in the low half: an mma operand register.
  Value packPair(Value low, Value high, Type elementType);
  /// P's A fragments for O += P·V on m16n8k16: the probabilities of key
  /// blocks 2j and 2j + 1 (four each, in the accumulator layout) packed to
  /// `elementType`, four registers for each 16-key chunk j. Defined in
  /// Parts/PackP.cpp.
  SmallVector<Value> packAFragments(ArrayRef<Value> probabilities,
                                    Type elementType);
  /// Inline PTX `text` with `constraints` on `operands`, with side effects;
  /// its one result of `resultType`, or none when that is null.
  Value inlinePtx(Type resultType, ValueRange operands, StringRef text,
                  StringRef constraints);

  /// A warp's share of the split-KV reduction of one output row.
  struct SplitSums {
    /// Σ w_s·O_s over the warp's splits, for the lane's columns
    /// firstColumn, firstColumn + 1, ... (columns past the value head dim
    /// hold copies and are not to be stored).
    SmallVector<Value> columns;
    Value firstColumn;
    /// Σ w_s over all the row's splits (the same in every lane and warp).
    Value total;
  };
  /// Reduces row `row` (of `rows` a split) of a split-KV workspace (see
  /// writePartial in Schedules/Mma/MmaEpilogue.cpp) with `numSplits` splits, at most
  /// `maxSplits`: w_s = l_s·2^(m_s - M) with M the largest max, over the
  /// warp's splits firstSplit + stride·j (firstSplit < stride, stride
  /// dividing 32). Every lane of the warp takes part; the branches are
  /// uniform. Defined in Parts/SplitSums.cpp.
  SplitSums sumSplits(Value workspace, Value row, Value rows, Value numSplits,
                      int64_t valueDim, Value lane, Value firstSplit,
                      int64_t stride, int64_t maxSplits);

  ImplicitLocOpBuilder *b = nullptr;
};

/// Builds one attention kernel as a gpu.func. See the pass description in
/// Passes.td for the argument ABI.
class AttentionKernelBuilder : protected KernelBuilderBase {
public:
  explicit AttentionKernelBuilder(const KernelSpec &spec) : spec(spec) {}
  virtual ~AttentionKernelBuilder() = default;

  /// Query rows one block computes (the grid's x dimension divides q_len by
  /// this).
  virtual int64_t rowsPerBlock() const = 0;
  /// Keys staged in shared memory per iteration of the main loop.
  virtual int64_t kvBlockSize() const = 0;
  /// Static shared memory the kernel uses, in bytes.
  virtual int64_t sharedBytes() const = 0;
  /// Dynamic shared memory each launch needs, in bytes.
  virtual int64_t dynamicSharedBytes() const { return 0; }
  virtual int64_t threadsPerBlock() const { return kThreadsPerBlock; }
  /// Whether grid y runs over KV heads with a group's query heads packed
  /// into each block's rows (see LaunchProtocol::packQueryHeads).
  bool packsQueryHeads() const { return spec.launch.packQueryHeads; }
  /// How the grid covers the work: the rule the prologue maps its block
  /// by (scheduleBlock, bindHeads) and the manifest states.
  GridRule gridRule() const;
  /// What the kernel promises its launcher: block, grid, shared memory, the
  /// argument ABI, tensor maps, the products' precision. The pass adds
  /// what the builder does not know: schedules, targets, companions.
  KernelContract contract() const;

  /// Names of the kernel arguments, in order.
  virtual SmallVector<std::string> argumentNames() const;
  /// Kinds ("pointer", "i32", "i64", "f32", "tensor_map") of the kernel
  /// arguments. A tensor map is a 128-byte CUtensorMap passed by value as a
  /// grid constant (see kTensorMapArgsAttrName).
  virtual SmallVector<std::string> argumentKinds() const;

  /// Creates the kernel at the builder's insertion point (inside the
  /// gpu.module); helper symbols, if any, are created just before it.
  gpu::GPUFuncOp build(OpBuilder &moduleBuilder, Location loc);

protected:
  /// Blocks per SM the register allocation must leave room for (ptxas's
  /// .minnctapersm); 0 leaves it to ptxas.
  virtual int64_t minBlocksPerSM() const { return 0; }
  /// Whether the kernel, with masked_score, visits the key blocks it skipped
  /// (past the band) again for query blocks with a row that saw no key; if
  /// not, nothing is skipped when masked_score is set.
  virtual bool revisitsSkippedKeys() const { return false; }
  /// The tensor-map arguments and what each describes.
  virtual SmallVector<TensorMapFacts> tensorMaps() const { return {}; }
  /// Workgroup memory attributions of the gpu.func.
  virtual SmallVector<Type> workgroupBuffers(MLIRContext *ctx) const {
    return {};
  }
  /// Module-level declarations the kernel needs, created before it.
  virtual void declareGlobals(OpBuilder &moduleBuilder, Location loc) {}
  /// Persistent kernels: binds work item `item` of `queryBlocks` query
  /// blocks a head as the prologue binds a block's (the query block
  /// fastest, then the head, then the sequence; causal sites heaviest
  /// first), with its key range [kvBegin, kvEnd).
  void bindWorkItem(Value item, Value queryBlocks);
  /// Builds the main loop and the epilogue once the prologue has bound the
  /// arguments and per-block values below.
  virtual void buildBody(gpu::GPUFuncOp func) = 0;
  /// Paged sites: given the first key the block would visit if its
  /// sequence filled its row of the page table (`fullRow` keys), before the
  /// sequence's key count has arrived, so that the reads issued here are in
  /// flight beside it. buildBody learns whether that guess was right by
  /// comparing it with kvBegin.
  virtual void readAhead(Value firstKey, Value fullRow) {}

  /// With packed heads: the query and head of row `rowInBlock` of the
  /// block.
  std::pair<Value, Value> packedRow(Value rowInBlock);
  /// LaunchProtocol::clusterSplits: when launched with a cluster, waits for the
  /// cluster's splits and reduces this block's share of their rows (row i
  /// of the block by warp i / num_splits % warps of split i % num_splits).
  void emitClusterCombine();

  /// Stores the f32 `value` as the kernel's element type at element
  /// `offset` of the output.
  void storeOutput(Value value, Value offset);
  /// Stores the f32 `value` as the kernel's element type at element
  /// `offset` of the global tensor `base`.
  void storeElement(Value base, Value value, Value offset);
  /// AttentionProblem::lse: the element of (batch, rowHead, query) in the
  /// `[B, Hq, Sq]` log-sum-exp (and D) tensors (i64).
  Value lseOffset(Value rowHead, Value query);
  /// Stores the log-sum-exp of a row whose final softmax state is `max`
  /// (log2 units) and `sum` (reduced): -inf where sum is 0. Called by one
  /// thread per row, for rows inside q_len.
  void storeLse(Value rowHead, Value query, Value max, Value sum);
  /// out = O / sum for a thread's rows g and g + 8 (`queryRows`, heads not
  /// packed) of the m16n8 accumulator layout, from a final `results` state
  /// (max and sum of each row, then the accumulators): rows that saw no
  /// key are zeros, rows past q_len are not stored, and `storeRow(r,
  /// inverse, rowOffset)` stores row r's columns. Defined in
  /// Parts/Epilogue.cpp.
  void storeNormalisedRows(
      ValueRange results, ArrayRef<Value> queryRows,
      llvm::function_ref<void(int64_t r, Value inverse, Value rowOffset)>
          storeRow);
  /// Element offset of (batch, headIndex) in a tensor with these strides;
  /// of (`firstRow`, headIndex) for ragged sites, whose sequences are
  /// packed rows (the query's first row when not given).
  Value tensorBase(ArrayRef<Value> tensorStrides, Value headIndex,
                   Value firstRow = Value());
  /// The rows a split has in the split workspace, and the row of
  /// (rowHead, query) within a split (Parts/SplitSums.cpp's layout).
  Value partialRows();
  Value partialRow(Value rowHead, Value query);

  /// `value`·log2(e), kept finite when the product overflows.
  static float saturatedLog2(float value);
  /// `score`·log2(e) at run time, finite unless `score` is -inf.
  Value toLog2Saturated(Value score);
  /// The score of key `key` for query `queryRow` from its dot product, in
  /// log2 units: -inf past the keys, -inf or the masked score when the key
  /// is hidden. The mask and bias are read from the row's (batch, head)
  /// bases, or taken from `terms` where the schedule read them itself.
  /// With `raw`, the dot product itself where the key is visible (kernels
  /// that scale in onlineSoftmaxStep; no softcap, additive mask, bias or
  /// masked_score).
  struct ScoreTerms {
    /// The mask's value (i1 for a boolean mask, else f32) and the bias's
    /// (f32) for this score; null: read from global memory.
    Value mask, bias;
  };
  /// Without `bounds`, the key is known inside kv_len and the row's band
  /// (a tile tileNeedsMask passes): only the score function and the terms.
  /// `visible`, where given, gets whether the key is inside kv_len and not
  /// hidden by the boolean mask, causal or window (i1; with `bounds`).
  Value finishScore(Value dot, Value queryRow, Value key, Value rowMaskBase,
                    Value rowBiasBase, bool raw = false,
                    ScoreTerms terms = {}, bool bounds = true,
                    Value *visible = nullptr);
  /// Whether the key tile [kvStart, kvStart + tileKeys) needs masking for
  /// rows whose causal diagonals run from `firstDiagonal` to
  /// `lastDiagonal()` (i1): it reaches past kv_len, past the first row's
  /// band, or (with a window) before the last row's window; the others only
  /// scale. `lastDiagonal` is called only with a window. Defined in
  /// Parts/KeyRange.cpp.
  Value tileNeedsMask(Value kvStart, int64_t tileKeys, Value firstDiagonal,
                      llvm::function_ref<Value()> lastDiagonal);
  /// A tile's `count` finished scores: `finish(true)` (masked) where
  /// `needsMask`, else `finish(false)`, from one scf.if. Defined in
  /// Parts/Score.cpp.
  SmallVector<Value>
  finishIf(Value needsMask, size_t count,
           llvm::function_ref<SmallVector<Value>(bool masked)> finish);

  const KernelSpec &spec;

  // Bound by the prologue (Parts/Prologue.cpp).
  Value q, k, v, out, maskPtr, biasPtr;
  /// Paged sites: the page table and key counts, and the sizes that bound
  /// their entries; kStrides and vStrides are then {page, slot, head}.
  Value pageTable, kvLens, maxPages, numPages, pageSize, pageTableStride;
  /// FP8 caches: the f32 scales of K and V (one, or one a KV head).
  Value kScales, vScales;
  /// Ragged sites: q_offsets and the plan, the sequence count, and the
  /// block's sequence's first packed row. totalQueries is the q_len
  /// argument (qLen becomes the block's sequence's query count); the same
  /// value elsewhere.
  Value qOffsets, plan, numSequences, firstRowOfSequence, totalQueries;
  /// Packed sites (ragged without pages): kv_offsets, the kv_len argument
  /// (the packed key rows; kvLen becomes the sequence's key count) and the
  /// block's sequence's first key row.
  Value kvOffsets, totalKeys, firstKeyOfSequence;
  /// log2 of the page size (a power of two) and page_size - 1: a key's
  /// table entry and slot are a shift and a mask.
  Value pageShift, pageMask;
  Value numQueryHeads, numKvHeads, qLen, kvLen, scaleNatural, scaleLog2;
  /// The run-time scale_factor's pointer (scaleFactor sites), else null.
  Value scaleFactorPtr;
  /// The log-sum-exp's pointer (AttentionProblem::lse), else null.
  Value lsePtr;
  SmallVector<Value> qStrides, kStrides, vStrides, outStrides;
  Value batch, kvHead, group;
  /// Split-KV kernels: the launch's batch size and split count, this
  /// block's split, and the f32 workspace of partial results.
  Value batchSize, numSplits, splitIndex, workspace;
  /// LaunchProtocol::clusterSplits: whether this launch has clusters (i1).
  Value clustered;
  /// Warp-specialised kernels: the tensor maps of Q, K and V (generic
  /// addresses of grid-constant parameters), and with stagedTerms those of
  /// the mask and bias (null without one).
  Value qMap, kMap, vMap, maskMap, biasMap;
  /// The block's query head; null when heads are packed (each row has its
  /// own, and qBase, outBase, maskBase and biasBase are null too).
  Value head;
  Value qBase, kBase, vBase, outBase;
  Value maskBase, biasBase, maskStrideQ, maskStrideK, biasStrideQ, biasStrideK;
  /// All four mask and bias strides, kept when heads are packed and with
  /// stagedTerms.
  SmallVector<Value> maskStrides, biasStrides;
  Value threadId, warp, lane;
  /// The block's queries are [firstQuery, endQuery); with packed heads its
  /// rows start at (query, head) pair firstPackedRow. kvOffset is
  /// kv_len - q_len (the causal diagonal's offset).
  Value firstQuery, endQuery, firstPackedRow, kvOffset;
  /// Key range the block can see: key blocks past the causal diagonal of its
  /// last row, and before the window of its first row, are never visited.
  Value kvBegin, kvEnd;

private:
  // The prologue's parts (Parts/Prologue.cpp, Parts/KeyRange.cpp).
  /// The gpu.func with the kernel's argument types and launch attributes.
  gpu::GPUFuncOp createFunction(OpBuilder &moduleBuilder, Location loc);
  /// Binds the arguments by ABI position, and the scale in log2 units
  /// unless the site takes a run-time factor (bindScaleFactor binds it).
  void bindArguments(ValueRange args);
  /// Reads the run-time scale_factor (where the site has one; a per-head
  /// factor's element at the block's head `headIndex`) and binds the scale
  /// times it; placed after the wait for the grids before.
  void bindScaleFactor(Value headIndex);
  /// Binds `scale` and the scale in log2 units.
  void bindScale(Value scale);
  /// The block's query block and grid-y head index: causal grids run their
  /// heaviest blocks first; split-KV grids take the split and the sequence
  /// from grid z. Binds batch, splitIndex and clustered.
  std::pair<Value, Value> scheduleBlock();
  /// Causal warp-specialised kernels: renumbers the blocks heaviest first
  /// over sections of heads whose K and V stay in L2.
  void orderHeaviestFirst(Value &queryBlock, Value &headIndex);
  /// The same for the item at `linear` (i32) of `blocks` query blocks and
  /// `pairs` (head, sequence) pairs of `heads` heads.
  void orderItemHeaviestFirst(Value linear, Value blocks, Value heads,
                              Value pairs, Value &queryBlock,
                              Value &headIndex);
  /// Binds the thread's warp and lane, the heads and the tensors' bases.
  void bindHeads(Value headIndex);
  /// Binds the block's queries.
  void bindQueries(Value queryBlock);
  /// Ragged sites: the block's plan item (sequence, query block), its
  /// sequence's rows from q_offsets, and the key count of `keyCount`
  /// (zero for an empty or bad item). Returns the query block.
  Value bindPlanItem(Value &keyCount);
  /// The keys the block visits, [begin, end), of a sequence of `keys` keys:
  /// key blocks past the causal diagonal of its last row, and before the
  /// window of its first row, are never visited; split-KV launches take
  /// their split's share.
  std::pair<Value, Value> keyRange(Value keys);
};

/// The scalar kernel: f32 FMAs, any element type, rows-per-warp rows a warp.
std::unique_ptr<AttentionKernelBuilder>
createScalarKernel(const KernelSpec &spec, int64_t kvBlockSize,
                   int64_t rowsPerWarp);

/// kiln.attention_grad's passes (KernelVariant::pass): on mma.sync tensor
/// cores where the spec takes them (variant.tensorCores: f16/bf16, head
/// dims multiples of 16 up to 128), else on f32 FMAs (any element type,
/// head dims multiples of 32 up to 128).
std::unique_ptr<AttentionKernelBuilder>
createBackwardKernel(const KernelSpec &spec);
/// Whether the FMA backward kernels support these head dims.
bool backwardKernelSupports(int64_t headDim, int64_t valueHeadDim);
/// Whether the tensor-core backward kernels support these.
bool mmaBackwardKernelSupports(Type elementType, int64_t headDim,
                               int64_t valueHeadDim);
/// Whether their sm_90a variant (wgmma) takes these head dims: whole
/// 128-byte rows of the swizzled slabs.
bool mmaBackwardWgmmaSupports(int64_t headDim, int64_t valueHeadDim);

/// The TF32 tensor-core kernel for f32 sites (KernelVariant::tf32).
std::unique_ptr<AttentionKernelBuilder>
createTf32Kernel(const KernelSpec &spec);
/// Whether the TF32 kernel supports these head dims (multiples of 8 up to
/// 128, V's the same).
bool tf32KernelSupports(int64_t headDim, int64_t valueHeadDim);

/// The tensor-core kernel for f16 and bf16: m16n8k16 mma.sync, 16 query rows
/// a warp, 64-key tiles staged with 16-byte loads and read by ldmatrix.
std::unique_ptr<AttentionKernelBuilder> createMmaKernel(const KernelSpec &spec);

/// Most splits of one launch (the runtime's limit; the combine kernel keeps
/// a lane's share of the splits' statistics in registers).
inline constexpr int64_t kMaxSplitsPerLaunch = 128;
/// Warps of a split-KV combine block, which reduces one row, each warp a
/// share of the splits.
inline constexpr int64_t kCombineWarps = 8;
inline constexpr int64_t kCombineThreads = kCombineWarps * kWarpSize;
/// Rows the split-KV combine kernel reduces per block.
inline constexpr int64_t kCombineRowsPerBlock = 1;
/// The name, argument names and argument kinds of the split-KV combine
/// kernel for outputs of `elementType` with value head dim `valueDim`; with
/// `ragged`, that of ragged kernels, which takes q_offsets and the sequence
/// count after the others and writes only the rows the sequences own.
std::string splitCombineKernelName(Type elementType, int64_t valueDim,
                                   bool ragged = false);
SmallVector<std::string> splitCombineArgumentNames(bool ragged = false);
SmallVector<std::string> splitCombineArgumentKinds(bool ragged = false);
/// Creates that kernel at the builder's insertion point (inside the
/// gpu.module): grid x covers batch·q_heads·q_len rows, kCombineRowsPerBlock
/// a block.
/// With `waitForGrid` (sm_90) it first waits for the kernel before it
/// (griddepcontrol.wait; see LaunchProtocol::launchDependents).
gpu::GPUFuncOp buildSplitCombineKernel(OpBuilder &moduleBuilder, Location loc,
                                       Type elementType, int64_t valueDim,
                                       bool waitForGrid, bool ragged = false);
/// The contract of that kernel.
KernelContract splitCombineContract(Type elementType, int64_t valueDim,
                                    bool ragged);

/// Threads of a paged-append block (one new token a block).
inline constexpr int64_t kAppendThreads = 128;
/// The name, argument names and argument kinds of the paged cache's append
/// kernel for new keys and values of `elementType`, key head dim `headDim`
/// and value head dim `valueDim`, into caches of that type or, with
/// `fp8Cache`, of e4m3 with scales (one a KV head with `perHeadScales`)
/// (Schedules/Append/AppendKernel.cpp).
std::string pagedAppendKernelName(Type elementType, int64_t headDim,
                                  int64_t valueDim, bool fp8Cache = false,
                                  bool perHeadScales = false);
SmallVector<std::string> pagedAppendArgumentNames();
SmallVector<std::string> pagedAppendArgumentKinds();
/// Creates that kernel at the builder's insertion point (inside the
/// gpu.module): grid x covers the new tokens, one a block.
gpu::GPUFuncOp buildPagedAppendKernel(OpBuilder &moduleBuilder, Location loc,
                                      Type elementType, int64_t headDim,
                                      int64_t valueDim, bool fp8Cache = false,
                                      bool perHeadScales = false);
/// The contract of that kernel.
KernelContract pagedAppendContract(Type elementType, int64_t headDim,
                                   int64_t valueDim, bool fp8Cache);

/// The warp-specialised sm_90a kernel (KernelVariant::warpSpecialized).
std::unique_ptr<AttentionKernelBuilder>
createWarpSpecializedKernel(const KernelSpec &spec);
/// Whether a site of `spec` (a kiln.attention site on the tensor-core
/// kernel) has a warp-specialised kernel as well.
bool warpSpecializedKernelSupports(const KernelSpec &spec);
/// How a warp-specialised kernel runs: keys a tile, consumer warpgroups,
/// and whether each consumer overlaps a tile's softmax with the previous
/// tile's P·V and takes turns with the other to issue products.
struct WarpSpecializedSchedule {
  int64_t tileKeys = 128;
  int64_t consumers = 2;
  bool overlap = false;
  bool pingPong = false;
  /// One block an SM over the work items (see KernelVariant::persistent).
  bool persistent = false;
  /// With persistent: launched so only up to this many keys (0: always);
  /// longer launches give a block each item (the kernel then walks one).
  int64_t persistentUpToKeys = 0;
  /// A mask and bias staged in shared memory by the producer (see
  /// KernelVariant::stagedTerms): wherever the site has one and the stages
  /// fit.
  bool stagedTerms = false;
  /// "table" (the shipped table of measured schedules), "rule" or
  /// "option" (forced).
  const char *from = "rule";
};
/// The schedule of `spec`'s warp-specialised kernel: the shipped table's row
/// for its head dim and causality (measured on an H200 by
/// bench/tune_warp_schedules.py) where there is one, else the rules (from
/// the measurements in docs/perf-log/2026-11-30-warp-specialised.md, "masks
/// and bias on the warp-specialised kernel; its schedule table").
WarpSpecializedSchedule chooseWarpSpecializedSchedule(const KernelSpec &spec);
/// The schedule a warp-specialised `spec` was built with (its warp* fields,
/// overlapSoftmax and pingPong; the turns need the overlap and two
/// consumers).
WarpSpecializedSchedule warpSpecializedSchedule(const KernelSpec &spec);
/// Whether `schedule` is one the kernel can be built with for `spec`'s
/// head dim: two or three consumers, tiles of 64 or 128 keys, within the
/// shared memory of sm_90. Otherwise `why` says what does not fit.
bool warpSpecializedScheduleFits(const KernelSpec &spec,
                                 const WarpSpecializedSchedule &schedule,
                                 std::string &why);
/// Dynamic shared memory the warp-specialised kernel may use (sm_90's).
int64_t warpSpecializedSharedLimit();

/// Whether the tensor-core kernel supports the element type and head dim.
bool mmaKernelSupports(Type elementType, int64_t headDim, int64_t valueHeadDim);
/// Whether the tensor-core kernel has an sm_90a (wgmma) variant for these
/// head dims: those of the mma.sync kernel, padded inside the kernel to
/// multiples of 64 (whole 128-byte swizzle atoms).
bool wgmmaKernelSupports(int64_t headDim, int64_t valueHeadDim);

/// How a tensor-core kernel runs: which variant, and how many blocks per SM
/// its registers leave room for (0: as ptxas allocates).
struct Schedule {
  bool wgmma = false;
  int64_t blocksPerSM = 0;
  /// "table" (the shipped table of measured schedules), "rule" (the
  /// defaults, where the table has no row) or "option" (forced).
  const char *from = "rule";
};
/// The schedule of `spec`'s tensor-core kernel on sm_90a (`hopper`) or on
/// the other targets: the table's row for sm_90a, the head dim and
/// causality where there is one, the rules otherwise.
Schedule chooseSchedule(const KernelSpec &spec, bool hopper);

} // namespace mlir::kiln::detail

#endif // KILN_LIB_CONVERSION_KILNTOGPU_ATTENTIONKERNEL_H
