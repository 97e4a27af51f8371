//===- Selection.cpp - Which kernel a site runs, and why ------------------===//
//
// selectKernel: the kernel family of a site (tensor-core, TF32, scalar), the
// schedule of its tensor-core kernel (mma.sync or wgmma, blocks per SM), the
// launch protocol of its target, its companions, and the schedule of its
// warp-specialised kernel (consumers, tile keys, overlap, turns): the
// shipped tables of measured schedules where they have a row, the rules
// otherwise, and the options that force a choice; each with its reason.
//
//===----------------------------------------------------------------------===//

#include "Selection.h"
#include "Products/Wgmma.h"

#include "kiln/Conversion/KilnToGPU/Selection.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"

#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::kiln;
using namespace mlir::kiln::detail;

bool mlir::kiln::detail::wgmmaKernelSupports(int64_t headDim,
                                             int64_t valueHeadDim) {
  // Head dims of the mma.sync kernel, padded to a multiple of 64 (up to 256,
  // still one wgmma N), where that pads at most a third more than mma.sync's
  // multiple of 16: measured on the H200, 96, 136, 160 and 200 ran 4-30%
  // faster padded on wgmma, 40 (a third) the same, and 80 (three fifths
  // more, to 128) 10% slower; 16 and 32 would double.
  auto fits = [](int64_t dim) {
    return dim % 8 == 0 && dim >= 16 && dim <= 256 &&
           3 * llvm::alignTo(dim, kSwizzleElements) <=
               4 * llvm::alignTo(dim, 16);
  };
  return fits(headDim) && fits(valueHeadDim);
}

namespace {
/// A row of the table of measured sm_90a schedules.
struct ScheduleRow {
  int64_t headDim;
  bool causal;
  bool wgmma;
  int64_t blocksPerSM;
};
constexpr ScheduleRow kScheduleTable[] = {
#define KILN_SCHEDULE(headDim, causal, wgmma, blocksPerSM, ...)                \
  {headDim, causal, wgmma, blocksPerSM},
#include "ScheduleTable.inc"
#undef KILN_SCHEDULE
};
} // namespace

Schedule mlir::kiln::detail::chooseSchedule(const KernelSpec &spec,
                                            bool hopper) {
  // The rules: up to head dim 64 three blocks fit at 168 registers a thread
  // (ptxas would otherwise take a few more, for the decode path, and fit
  // two); larger head dims use up to 255 registers, two blocks whatever is
  // asked. wgmma where it pads the head dims by at most a third.
  Schedule schedule;
  schedule.blocksPerSM = spec.problem.headDim <= 64 ? 3 : 0;
  if (!hopper)
    return schedule;
  schedule.wgmma =
      wgmmaKernelSupports(spec.problem.headDim, spec.problem.valueDim());
  // The table, measured on an H200 (bench/tune_schedules.py): rows for
  // equal head dims, causal or not; masks, windows and paged sites take
  // the row of their causality.
  if (spec.problem.valueDim() != spec.problem.headDim)
    return schedule;
  for (const ScheduleRow &row : kScheduleTable) {
    if (row.headDim != spec.problem.headDim ||
        row.causal != spec.problem.causal)
      continue;
    schedule.wgmma = row.wgmma && wgmmaKernelSupports(spec.problem.headDim,
                                                      spec.problem.valueDim());
    schedule.blocksPerSM = row.blocksPerSM;
    schedule.from = "table";
  }
  return schedule;
}

bool mlir::kiln::detail::mmaKernelSupports(Type elementType, int64_t headDim,
                                           int64_t valueHeadDim) {
  if (!(elementType.isF16() || elementType.isBF16()))
    return false;
  auto fits = [](int64_t dim, int64_t most) {
    return dim % 8 == 0 && dim >= 16 && dim <= most;
  };
  // Multiples of 8 up to 256, for the query/key head dim and the value one
  // alike (multi-head latent attention has them differ).
  return fits(headDim, 256) && fits(valueHeadDim, 256);
}

namespace {
/// A measured schedule: KILN_WARP_SCHEDULE(head dim, causal, consumers, tile
/// keys, overlap, ping-pong, TFLOP/s of the choice, of the rules' schedule).
struct WarpScheduleRow {
  int64_t headDim;
  bool causal;
  int64_t consumers;
  int64_t tileKeys;
  bool overlap;
  bool pingPong;
};
constexpr WarpScheduleRow kWarpScheduleTable[] = {
#define KILN_WARP_SCHEDULE(headDim, causal, consumers, tileKeys, overlap,      \
                           pingPong, ...)                                      \
  {headDim, causal, consumers, tileKeys, overlap, pingPong},
#include "WarpScheduleTable.inc"
#undef KILN_WARP_SCHEDULE
};
} // namespace

WarpSpecializedSchedule
mlir::kiln::detail::chooseWarpSpecializedSchedule(const KernelSpec &spec) {
  // The rules: 128-key tiles while two stages of K and V fit beside Q (64
  // past head dim 128 when V's is Q's; MLA's 192/128 keeps 128, +4-8% from
  // 4k tokens); three consumers of 160 registers at head dim 64 (+11%),
  // two of 240 past it (of Q's or V's) for their accumulators; the overlap past head dim
  // 64 (+6-8% at 128, -3 to -5% at 64); no turns (neutral).
  WarpSpecializedSchedule schedule;
  schedule.consumers =
      std::max(spec.problem.headDim, spec.problem.valueDim()) <= 64 ? 3 : 2;
  schedule.overlap = spec.problem.headDim > 64;
  schedule.pingPong = false;
  // One block an SM walking the items where their costs are alike (no
  // causal mask): +1-17% from 512 to 16k tokens. Causal items differ by
  // up to the whole row of tiles, and a static walk loses the balance the
  // hardware's block scheduler gives a grid (-10 to -32% from 4k): causal
  // kernels with 128-key tiles walk only up to 1k keys (+7-19% at 512 and
  // 1k), and launch a block an item past that.
  schedule.persistent =
      !spec.problem.causal ||
      std::max(spec.problem.headDim, spec.problem.valueDim()) <= 128;
  if (spec.problem.causal)
    schedule.persistentUpToKeys = 1024;
  schedule.tileKeys = 128;
  std::string why;
  if (!warpSpecializedScheduleFits(spec, schedule, why))
    schedule.tileKeys = 64;
  // Rows for the head dim and causality (measured with V's head dim equal
  // to Q's); windows, masks and the rest take the row of their causality.
  for (const WarpScheduleRow &row : kWarpScheduleTable) {
    if (row.headDim != spec.problem.headDim ||
        row.causal != spec.problem.causal || spec.problem.valueHeadDim)
      continue;
    WarpSpecializedSchedule measured;
    measured.consumers = row.consumers;
    measured.tileKeys = row.tileKeys;
    measured.overlap = row.overlap;
    measured.pingPong = row.pingPong;
    measured.persistent = schedule.persistent;
    measured.persistentUpToKeys = schedule.persistentUpToKeys;
    measured.from = "table";
    if (warpSpecializedScheduleFits(spec, measured, why))
      schedule = measured;
  }
  return schedule;
}

namespace {

/// Checks that `op` is something the kernel generator supports.
LogicalResult checkSupported(AttentionOp op, bool tensorCores,
                             bool allowTf32) {
  if (op.getQDescale())
    return op.emitOpError(
        "FP8 (e4m3) Q, K and V have no GPU kernel: compile the graph for "
        "the GPU without folding its dequantisation (the default when a "
        "package is emitted)");
  if (op.getProbScale())
    return op.emitOpError("quantised probabilities (prob_scale) have no GPU "
                          "kernel");
  int64_t headDim = op.getHeadDim();
  if (ShapedType::isDynamic(headDim))
    return op.emitOpError("GPU lowering needs a static head dim");
  int64_t valueHeadDim = op.getValueHeadDim();
  if (ShapedType::isDynamic(valueHeadDim))
    return op.emitOpError("GPU lowering needs a static value head dim");
  // Packed sequences take their work items from a plan, which only the
  // tensor-core kernel reads.
  if (op.isPacked() &&
      !(tensorCores &&
        mmaKernelSupports(op.getElementType(), headDim, valueHeadDim)))
    return op.emitOpError("packed sequences (offsets) run on the "
                          "tensor-core kernel only: f16/bf16, head dims "
                          "multiples of 8 up to 256, got ")
           << op.getElementType() << " with head dims " << headDim << "/"
           << valueHeadDim
           << (tensorCores ? "" : " (tensor cores are off)");
  if (tensorCores &&
      mmaKernelSupports(op.getElementType(), headDim, valueHeadDim))
    return success();
  // (An f32 site that keeps its log-sum-exp runs on the scalar kernel.)
  if ((tensorCores || allowTf32) && op.getElementType().isF32() &&
      !op.getLse() && tf32KernelSupports(headDim, valueHeadDim))
    return success();
  if (valueHeadDim != headDim)
    return op.emitOpError("a value head dim (")
           << valueHeadDim << ") other than the query/key one (" << headDim
           << ") runs on the tensor-core kernels only: both multiples of 8 "
              "up to 256";
  if (headDim % kWarpSize != 0 || headDim > 128)
    return op.emitOpError("GPU lowering supports head dims that are "
                          "multiples of 32 up to 128 (with tensor cores: "
                          "multiples of 8 up to 256), got ")
           << headDim;
  return success();
}

/// The problem of a kiln.attention or kiln.attention_grad site, as far as
/// both ops state it.
template <typename OpT>
void fillProblem(OpT op, AttentionProblem &problem) {
  problem.elementType = op.getElementType();
  problem.headDim = op.getHeadDim();
  if (op.getValueHeadDim() != problem.headDim)
    problem.valueHeadDim = op.getValueHeadDim();
  problem.causal = op.getCausal();
  problem.window = op.getWindow();
  if (std::optional<uint64_t> right = op.getWindowRight())
    problem.windowRight = static_cast<int64_t>(*right);
  if (std::optional<APFloat> cap = op.getSoftcap())
    problem.softcap = cap->convertToFloat();
  if (std::optional<APFloat> fill = op.getMaskedScore())
    problem.maskedScore = fill->convertToFloat();
  // A term whose query axis (the second innermost; absent below rank 2)
  // has size 1 is one row of keys for every query.
  auto oneRow = [](Value term) {
    auto type = cast<ShapedType>(term.getType());
    return type.getRank() < 2 || type.getDimSize(type.getRank() - 2) == 1;
  };
  if (Value mask = op.getMask()) {
    problem.maskType = cast<ShapedType>(mask.getType()).getElementType();
    problem.maskOneRow = oneRow(mask);
  }
  if (Value bias = op.getBias()) {
    problem.biasType = cast<ShapedType>(bias.getType()).getElementType();
    problem.biasOneRow = oneRow(bias);
  }
  problem.scaleFactor = static_cast<bool>(op.getScaleFactor());
  problem.perHeadScaleFactor = op.hasPerHeadScaleFactor();
}

/// Whether a block whose rows belong to one KV head has rows of several
/// query heads: grouped-query heads, or KV heads not known statically.
template <typename OpT>
bool groupsSeveralHeads(OpT op) {
  return op.getNumKvHeads() != op.getNumQueryHeads() ||
         ShapedType::isDynamic(op.getNumKvHeads());
}

/// The kernel of a kiln.attention site.
LogicalResult attentionSpec(AttentionOp op,
                            const ConvertKilnToGPUOptions &options,
                            KernelSpec &spec) {
  // A per-head scale_factor is read once a block, at the block's head. The
  // tensor-core kernel's blocks hold a KV head's whole query group, whose
  // rows have several heads where the group is more than one head: such a
  // site takes a kernel whose blocks have one query head (scalar or TF32)
  // rather than a factor a row in the tensor-core kernel, which would
  // change the softmax step of every site. Packed sequences have only the
  // tensor-core kernel.
  bool perHeadGrouped = op.hasPerHeadScaleFactor() && groupsSeveralHeads(op);
  if (perHeadGrouped && op.isPacked())
    return op.emitOpError("no kernel for packed sequences with a per-head "
                          "scale_factor and grouped-query heads (")
           << op.getNumQueryHeads() << " query heads, "
           << (ShapedType::isDynamic(op.getNumKvHeads())
                   ? std::string("?")
                   : std::to_string(op.getNumKvHeads()))
           << " KV heads): the tensor-core kernel's blocks span a group's "
              "query heads";
  bool tensorCores = options.tensorCores && !perHeadGrouped;
  if (perHeadGrouped &&
      !(op.getElementType().isF32() && !op.getLse() &&
        tf32KernelSupports(op.getHeadDim(), op.getValueHeadDim())) &&
      (op.getValueHeadDim() != op.getHeadDim() ||
       op.getHeadDim() % kWarpSize != 0 || op.getHeadDim() > 128))
    return op.emitOpError("no kernel for a per-head scale_factor with "
                          "grouped-query heads at head dims ")
           << op.getHeadDim() << "/" << op.getValueHeadDim()
           << ": the tensor-core kernel's blocks span a group's query heads, "
              "and the scalar kernel takes head dims that are multiples of "
              "32 up to 128 (the same for V)";
  if (failed(checkSupported(op, tensorCores, options.allowTf32)))
    return failure();
  AttentionProblem &problem = spec.problem;
  fillProblem(op, problem);
  // A site that trains keeps its log-sum-exp: written by the kernel's
  // epilogue, so its launches are never split.
  problem.lse = static_cast<bool>(op.getLse());
  if (problem.lse && op.isPacked())
    return op.emitOpError("the log-sum-exp of packed sequences has no GPU "
                          "kernel yet");

  spec.variant.tensorCores =
      tensorCores && mmaKernelSupports(problem.elementType, problem.headDim,
                                       problem.valueDim());
  // f32 sites on tensor cores: TF32 products with operands split into a
  // high and a low part (f32's accuracy) by default, plain TF32 when
  // allowed.
  spec.variant.tf32 = (options.tensorCores || options.allowTf32) &&
                      !problem.lse && problem.elementType.isF32() &&
                      tf32KernelSupports(problem.headDim, problem.valueDim());
  spec.variant.tf32Split = spec.variant.tf32 && !options.allowTf32;
  // The tensor-core kernel serves a KV head's whole query group per
  // block.
  spec.launch.packQueryHeads = spec.variant.tensorCores;
  // Keys split over blocks, except where a row that sees no key in the
  // band revisits the keys outside it (masked_score with a band).
  spec.launch.splitKV = spec.variant.tensorCores && !problem.lse &&
                        !(problem.maskedScore && problem.rightBound());
  // The packed form: its blocks from a plan, K and V by kv_offsets.
  problem.ragged = op.isPacked();
  return success();
}

/// The kernels of a kiln.attention_grad site: both passes of the backward
/// kernels, on tensor cores where they take the site; `spec` is the query
/// pass's.
LogicalResult gradSpec(AttentionGradOp op,
                       const ConvertKilnToGPUOptions &options,
                       KernelTarget target, KernelSpec &spec) {
  int64_t headDim = op.getHeadDim(), valueHeadDim = op.getValueHeadDim();
  if (ShapedType::isDynamic(headDim) || ShapedType::isDynamic(valueHeadDim))
    return op.emitOpError("GPU lowering needs static head dims");
  if (op.isPacked())
    return op.emitOpError("the backward of packed sequences has no GPU "
                          "kernel yet");
  if (op.getBiasGrad())
    return op.emitOpError("the bias gradient has no GPU kernel yet (the "
                          "CPU lowering computes it)");
  // The key pass's blocks are a KV head's keys, and sum over its group's
  // query heads, which have one factor only where the group is one head.
  if (op.hasPerHeadScaleFactor() && groupsSeveralHeads(op))
    return op.emitOpError("no backward kernel for a per-head scale_factor "
                          "with grouped-query heads: the key pass's blocks "
                          "sum over a group's query heads (the CPU lowering "
                          "computes it)");
  Type elementType = op.getElementType();
  bool tensorCores = options.tensorCores &&
                     mmaBackwardKernelSupports(elementType, headDim,
                                               valueHeadDim);
  if (!tensorCores && !backwardKernelSupports(headDim, valueHeadDim))
    return op.emitOpError("the backward kernels take head dims that are "
                          "multiples of 16 up to 128 (f16/bf16) or of 32 up "
                          "to 128 (others), got ")
           << headDim << "/" << valueHeadDim;
  fillProblem(op, spec.problem);
  spec.variant.tensorCores = tensorCores;
  spec.variant.wgmma = target.hopper && tensorCores &&
                       mmaBackwardWgmmaSupports(headDim, valueHeadDim);
  spec.problem.lse = true;
  spec.variant.pass = KernelVariant::Pass::GradQuery;
  return success();
}

/// The kernel of a kiln.paged_attention site: the tensor-core kernel with K
/// and V read through the page table.
LogicalResult pagedSpec(PagedAttentionOp op,
                        const ConvertKilnToGPUOptions &options,
                        KernelSpec &spec) {
  AttentionProblem &problem = spec.problem;
  auto queryType = cast<RankedTensorType>(op.getQuery().getType());
  auto valueType = cast<RankedTensorType>(op.getValueCache().getType());
  problem.elementType = op.getElementType();
  problem.headDim = queryType.getDimSize(op.isRagged() ? 2 : 3);
  int64_t valueHeadDim = valueType.getDimSize(3);
  if (ShapedType::isDynamic(problem.headDim) ||
      ShapedType::isDynamic(valueHeadDim))
    return op.emitOpError("GPU lowering needs static head dims");
  if (!options.tensorCores ||
      !mmaKernelSupports(problem.elementType, problem.headDim, valueHeadDim))
    return op.emitOpError("paged attention runs on the tensor-core kernel "
                          "only: f16/bf16 caches, head dims multiples of 8 "
                          "up to 256, got ")
           << problem.elementType << " with head dims " << problem.headDim
           << "/" << valueHeadDim;
  if (valueHeadDim != problem.headDim)
    problem.valueHeadDim = valueHeadDim;
  if (op.isFp8Cache()) {
    // Rows of FP8 keys are copied in 16-byte chunks of 16 elements.
    if (problem.headDim % 16 || valueHeadDim % 16)
      return op.emitOpError("f8E4M3FN caches need head dims that are "
                            "multiples of 16 on the GPU, got ")
             << problem.headDim << "/" << valueHeadDim;
    problem.fp8Cache = true;
    problem.perHeadScales =
        cast<RankedTensorType>(op.getKScale().getType()).getDimSize(0) != 1;
  }
  int64_t pageSize =
      cast<RankedTensorType>(op.getKeyCache().getType()).getDimSize(1);
  if (!ShapedType::isDynamic(pageSize) && !llvm::isPowerOf2_64(pageSize))
    return op.emitOpError("the GPU kernels take pages of a power of two "
                          "keys, got ")
           << pageSize;
  problem.causal = op.getCausal();
  problem.window = op.getWindow();
  if (std::optional<APFloat> cap = op.getSoftcap())
    problem.softcap = cap->convertToFloat();
  problem.paged = true;
  problem.ragged = op.isRagged();
  spec.variant.tensorCores = true;
  spec.launch.packQueryHeads = true;
  spec.launch.splitKV = true;
  return success();
}

/// "f16 head dims 128" or "bf16 head dims 192/128".
std::string describeProblem(const AttentionProblem &problem) {
  std::string type;
  llvm::raw_string_ostream os(type);
  problem.elementType.print(os);
  if (problem.fp8Cache)
    type += " (e4m3 cache)";
  if (problem.valueDim() == problem.headDim)
    return llvm::formatv("{0} head dim {1}", type, problem.headDim).str();
  return llvm::formatv("{0} head dims {1}/{2}", type, problem.headDim,
                       problem.valueDim())
      .str();
}

/// The tensor-core kernel's schedule for `target`, with the options that
/// force one, and its reasons.
FailureOr<Schedule> selectSchedule(Operation *op, const KernelSpec &spec,
                                   const ConvertKilnToGPUOptions &options,
                                   KernelTarget target,
                                   SmallVector<std::string> &why) {
  const AttentionProblem &problem = spec.problem;
  Schedule chosen = chooseSchedule(spec, target.hopper);
  bool wgmmaFits = wgmmaKernelSupports(problem.headDim, problem.valueDim());
  if (!target.hopper)
    why.push_back("mma.sync: wgmma is sm_90a's only");
  else if (!wgmmaFits)
    why.push_back("mma.sync: padding the head dims to multiples of 64 for "
                  "wgmma would add more than a third");
  else if (StringRef(chosen.from) == "table")
    why.push_back(llvm::formatv("{0}: the schedule table's row for head dim "
                                "{1}{2}",
                                chosen.wgmma ? "wgmma" : "mma.sync",
                                problem.headDim,
                                problem.causal ? ", causal" : "")
                      .str());
  else
    why.push_back("wgmma: the head dims pad to multiples of 64 by at most a "
                  "third (the schedule table has no row for them)");
  if (StringRef(chosen.from) != "table")
    why.push_back(problem.headDim <= 64
                      ? "3 blocks per SM: head dim 64 or less fits them at "
                        "168 registers a thread"
                      : "no register cap: head dims past 64 take up to 255 "
                        "registers a thread");
  if (options.schedule != "table") {
    chosen.wgmma = target.hopper && options.schedule == "wgmma" && wgmmaFits;
    chosen.from = "option";
    why.push_back(llvm::formatv("--schedule={0} forces {1}", options.schedule,
                                chosen.wgmma ? "wgmma" : "mma.sync")
                      .str());
  }
  if (options.blocksPerSM >= 0) {
    chosen.blocksPerSM = options.blocksPerSM;
    chosen.from = "option";
    why.push_back(llvm::formatv("--blocks-per-sm={0} forces the register cap",
                                options.blocksPerSM)
                      .str());
  }
  // A register cap below what wgmma's accumulators hold (the value head
  // dim's, padded, over two, beside about 32 others) does not assemble.
  if (chosen.wgmma && chosen.blocksPerSM > 0) {
    int64_t cap = 65536 / (kThreadsPerBlock * chosen.blocksPerSM);
    int64_t needed = llvm::alignTo(problem.valueDim(), 64) / 2 + 32;
    if (cap < needed)
      return op->emitOpError("blocks-per-sm ")
             << chosen.blocksPerSM << " leaves " << cap
             << " registers a thread; the wgmma kernel's accumulators need "
                "at least "
             << needed;
  }
  // FP8 caches convert their tiles to the padded mma.sync layout.
  if (problem.fp8Cache && chosen.wgmma) {
    chosen.wgmma = false;
    why.push_back("mma.sync, not wgmma: an FP8 cache's tiles are converted "
                  "into the padded mma.sync layout");
  }
  return chosen;
}

/// The warp-specialised kernel of a site whose portable kernel is
/// `siteSpec`, with its schedule and its reasons; failure where the
/// options force a schedule it cannot be built with.
LogicalResult selectWarpSpecialized(Operation *op, const KernelSpec &siteSpec,
                                    const ConvertKilnToGPUOptions &options,
                                    KernelTarget target,
                                    KernelChoice &choice) {
  SmallVector<std::string> &why = choice.warpSpecializedWhy;
  if (!target.hopper || !siteSpec.variant.tensorCores)
    return success();
  // The warp-specialised kernel folds a static scale into its exponents'
  // FMAs, which takes a positive scale (a row's largest score then comes
  // from its largest dot product); a run-time scale_factor, whose sign is
  // the graph's, is applied to each score before the row's maximum.
  auto attention = dyn_cast<AttentionOp>(op);
  if (!options.warpSpecialize) {
    why.push_back("no warp-specialised kernel: --warp-specialize=0");
    return success();
  }
  if (!attention) {
    why.push_back("no warp-specialised kernel: it reads no paged cache");
    return success();
  }
  if (attention.getLse()) {
    why.push_back("no warp-specialised kernel: it writes no log-sum-exp");
    return success();
  }
  if (!(attention.getScale().convertToFloat() > 0.0f)) {
    why.push_back("no warp-specialised kernel: it folds the scale into its "
                  "exponents, which takes a positive scale");
    return success();
  }
  if (!warpSpecializedKernelSupports(siteSpec)) {
    why.push_back("no warp-specialised kernel: it does not support this "
                  "site");
    return success();
  }
  KernelSpec spec = siteSpec;
  spec.launch.packQueryHeads = false;
  spec.launch.splitKV = false;
  spec.launch.launchDependents = false;
  spec.launch.clusterSplits = false;
  spec.variant.wgmma = false;
  spec.variant.blocksPerSM = 0;
  spec.variant.warpSpecialized = true;
  // The table's schedule or the rules', then what the options force.
  WarpSpecializedSchedule schedule = chooseWarpSpecializedSchedule(spec);
  auto force = [&](int64_t option, auto &field, StringRef flag) {
    if (option < 0)
      return;
    field = option;
    schedule.from = "option";
    why.push_back(llvm::formatv("--{0}={1} forces it", flag, option).str());
  };
  force(options.warpSpecializeConsumers, schedule.consumers,
        "warp-specialize-consumers");
  force(options.warpSpecializeTileKeys, schedule.tileKeys,
        "warp-specialize-tile-keys");
  force(options.warpSpecializeOverlap, schedule.overlap,
        "warp-specialize-overlap");
  force(options.warpSpecializePingPong, schedule.pingPong,
        "warp-specialize-ping-pong");
  force(options.warpSpecializePersistent, schedule.persistent,
        "warp-specialize-persistent");
  // (Forced on, it walks at every length.)
  if (options.warpSpecializePersistent >= 0)
    schedule.persistentUpToKeys = 0;
  // A persistent kernel reads the run-time factor once, in its prologue,
  // and then walks items of every head.
  if (spec.problem.perHeadScaleFactor && schedule.persistent) {
    if (options.warpSpecializePersistent > 0)
      return op->emitOpError("warp-specialised kernel: a persistent kernel "
                             "takes no per-head scale_factor (it reads the "
                             "factor once for items of every head)");
    schedule.persistent = false;
    schedule.persistentUpToKeys = 0;
    why.push_back("not persistent: a per-head scale_factor is read at the "
                  "block's head, once");
  }
  // A mask or bias comes in with K's tiles wherever its stages fit.
  bool hasTerms = spec.problem.maskType || spec.problem.biasType;
  schedule.stagedTerms = hasTerms;
  if (hasTerms && options.warpSpecializeStageTerms >= 0) {
    schedule.stagedTerms = options.warpSpecializeStageTerms;
    why.push_back(llvm::formatv("--warp-specialize-stage-terms={0} forces it",
                                options.warpSpecializeStageTerms)
                      .str());
  }
  std::string unfit;
  if (!warpSpecializedScheduleFits(spec, schedule, unfit)) {
    std::string stagedUnfit = unfit;
    // Staged terms that do not fit (an f32 term's rows of 128 keys): the
    // same with 64-key tiles, then with two consumers as well, where no
    // option forces those; else the terms read from global memory.
    bool fitted = false;
    if (schedule.stagedTerms) {
      for (auto [consumers, tileKeys] :
           {std::pair{schedule.consumers, int64_t(64)},
            std::pair{int64_t(2), int64_t(64)}}) {
        if ((options.warpSpecializeConsumers >= 0 &&
             consumers != schedule.consumers) ||
            (options.warpSpecializeTileKeys >= 0 &&
             tileKeys != schedule.tileKeys))
          continue;
        WarpSpecializedSchedule smaller = schedule;
        smaller.consumers = consumers;
        smaller.tileKeys = tileKeys;
        std::string ignored;
        if (!warpSpecializedScheduleFits(spec, smaller, ignored))
          continue;
        why.push_back(llvm::formatv("{0} consumers and {1}-key tiles, where "
                                    "the staged mask and bias fit (",
                                    consumers, tileKeys)
                          .str() +
                      stagedUnfit + ")");
        schedule = smaller;
        fitted = true;
        break;
      }
    }
    if (!fitted) {
      WarpSpecializedSchedule unstaged = schedule;
      unstaged.stagedTerms = false;
      if (!schedule.stagedTerms || options.warpSpecializeStageTerms >= 0 ||
          !warpSpecializedScheduleFits(spec, unstaged, unfit))
        return op->emitOpError("warp-specialised kernel: ") << unfit;
      schedule = unstaged;
      why.push_back("its mask and bias read score by score from global "
                    "memory: staged beside K, " +
                    stagedUnfit);
    }
  }
  spec.variant.stagedTerms = schedule.stagedTerms;
  spec.variant.warpConsumers = schedule.consumers;
  spec.variant.warpTileKeys = schedule.tileKeys;
  spec.variant.overlapSoftmax = schedule.overlap;
  spec.variant.pingPong = schedule.pingPong;
  spec.variant.persistent = schedule.persistent;
  spec.variant.persistentUpToKeys = schedule.persistentUpToKeys;
  why.insert(
      why.begin(),
      llvm::formatv("a warp-specialised kernel too, for launches whose views "
                    "TMA can describe: {0} consumer warpgroups, {1}-key "
                    "tiles{2}{3}{4}{6}, from the {5}",
                    schedule.consumers, schedule.tileKeys,
                    schedule.overlap ? ", softmax overlapping P·V" : "",
                    schedule.pingPong ? ", ping-pong" : "",
                    schedule.persistent ? ", persistent" : "",
                    StringRef(schedule.from) == "rule" ? "rules"
                    : StringRef(schedule.from) == "table"
                        ? "schedule table"
                        : "options",
                    schedule.stagedTerms
                        ? ", mask and bias tiles staged beside K by TMA"
                        : "")
          .str());
  choice.warpSpecialized = spec;
  choice.warpSchedule = schedule;
  return success();
}

} // namespace

std::unique_ptr<AttentionKernelBuilder> KernelChoice::createKernel() const {
  switch (family) {
  case KernelFamily::Mma:
    return createMmaKernel(spec);
  case KernelFamily::Tf32:
    return createTf32Kernel(spec);
  case KernelFamily::Scalar:
    return createScalarKernel(spec, scalarKvBlockSize, scalarRowsPerWarp);
  case KernelFamily::Backward:
    return createBackwardKernel(spec);
  }
  llvm_unreachable("unknown kernel family");
}

std::unique_ptr<AttentionKernelBuilder>
KernelChoice::createWarpSpecializedKernel() const {
  assert(warpSpecialized && "no warp-specialised kernel was chosen");
  return mlir::kiln::detail::createWarpSpecializedKernel(*warpSpecialized);
}

std::unique_ptr<AttentionKernelBuilder>
KernelChoice::createGradKeyValueKernel() const {
  assert(gradKeyValue && "not a backward site");
  return createBackwardKernel(*gradKeyValue);
}

TargetLaunchFacts mlir::kiln::targetLaunchFacts(bool hopper) {
  TargetLaunchFacts facts;
  if (!hopper)
    return facts;
  facts.gridDependency = true;
  facts.attentionGridDependency = true;
  facts.clusterSplits = kMaxClusterSplits;
  return facts;
}

FailureOr<KernelChoice>
mlir::kiln::detail::selectKernel(Operation *op,
                                 const ConvertKilnToGPUOptions &options,
                                 KernelTarget target) {
  KernelChoice choice;
  KernelSpec &spec = choice.spec;
  SmallVector<std::string> &why = choice.why;
  if (auto grad = dyn_cast<AttentionGradOp>(op)) {
    if (failed(gradSpec(grad, options, target, spec)))
      return failure();
    choice.family = KernelFamily::Backward;
    choice.gradKeyValue = spec;
    choice.gradKeyValue->variant.pass = KernelVariant::Pass::GradKeyValue;
    why.push_back(llvm::formatv("the backward kernels: {0} on {1}, a query "
                                "pass (dQ and D) then a key pass (dK and dV, "
                                "summed over each group by one warp a key: "
                                "deterministic)",
                                describeProblem(spec.problem),
                                spec.variant.wgmma ? "wgmma tensor cores"
                                : spec.variant.tensorCores
                                    ? "mma.sync tensor cores"
                                    : "f32 FMAs")
                      .str());
    std::unique_ptr<AttentionKernelBuilder> kernel = choice.createKernel();
    choice.rowsPerBlock = kernel->rowsPerBlock();
    choice.kvBlockSize = kernel->kvBlockSize();
    return choice;
  }
  if (auto paged = dyn_cast<PagedAttentionOp>(op)) {
    if (failed(pagedSpec(paged, options, spec)))
      return failure();
  } else if (failed(attentionSpec(cast<AttentionOp>(op), options, spec))) {
    return failure();
  }
  const AttentionProblem &problem = spec.problem;
  std::string problemText = describeProblem(problem);
  if (spec.variant.tensorCores) {
    choice.family = KernelFamily::Mma;
    why.push_back(llvm::formatv("the tensor-core kernel: {0} (f16/bf16, "
                                "head dims multiples of 8 up to 256)",
                                problemText)
                      .str());
    FailureOr<Schedule> chosen =
        selectSchedule(op, spec, options, target, why);
    if (failed(chosen))
      return failure();
    spec.variant.wgmma = chosen->wgmma;
    spec.variant.blocksPerSM = chosen->blocksPerSM;
    choice.schedule = *chosen;
  } else if (spec.variant.tf32) {
    choice.family = KernelFamily::Tf32;
    why.push_back(
        llvm::formatv("the TF32 kernel: {0} on m16n8k8 products, {1}",
                      problemText,
                      spec.variant.tf32Split
                          ? "each operand split into two TF32 parts (f32's "
                            "accuracy)"
                          : "operands rounded to TF32 (--allow-tf32)")
            .str());
  } else {
    choice.family = KernelFamily::Scalar;
    choice.scalarKvBlockSize = options.kvBlockSize;
    choice.scalarRowsPerWarp = options.rowsPerWarp;
    why.push_back(llvm::formatv("the scalar kernel: {0} on f32 FMAs{1}",
                                problemText,
                                !options.tensorCores ? " (--tensor-cores=0)"
                                : problem.perHeadScaleFactor &&
                                        !isa<PagedAttentionOp>(op) &&
                                        groupsSeveralHeads(
                                            cast<AttentionOp>(op))
                                    ? " (a per-head scale_factor with "
                                      "grouped-query heads: the tensor-core "
                                      "kernel's blocks span a group's query "
                                      "heads)"
                                    : "")
                      .str());
  }

  // The target's launch protocol.
  TargetLaunchFacts launch = targetLaunchFacts(target.hopper);
  spec.launch.launchDependents = launch.gridDependency && spec.launch.splitKV;
  // A ragged launch's blocks come from its plan, whose empty items leave no
  // cluster whole: its splits go to the combine kernel.
  spec.launch.clusterSplits = launch.clusterSplits > 0 &&
                              spec.launch.splitKV && !problem.ragged;
  spec.launch.waitForGrid = launch.attentionGridDependency;
  spec.variant.fp8HardwareConvert = target.hopper && problem.fp8Cache;
  if (spec.launch.splitKV)
    why.push_back(
        spec.launch.clusterSplits
            ? "keys split over blocks: sm_90a reduces the splits in a "
              "thread-block cluster where the launch has one, else the "
              "combine kernel, launched early (griddepcontrol)"
        : spec.launch.launchDependents
            ? "keys split over blocks, reduced by the combine kernel, "
              "launched early (griddepcontrol; a ragged launch's plan "
              "leaves no cluster whole)"
            : "keys split over blocks, reduced by the combine kernel");
  else if (spec.variant.tensorCores)
    why.push_back("keys not split: a row that sees no key in the band "
                  "revisits the keys outside it (masked_score)");
  if (spec.launch.waitForGrid)
    why.push_back("waits for the grids before it (griddepcontrol), so it "
                  "may be launched early");
  if (spec.variant.fp8HardwareConvert)
    why.push_back("FP8 tiles converted by cvt.rn.f16x2.e4m3x2");

  // The builder's tile, and what its shared memory allows.
  {
    std::unique_ptr<AttentionKernelBuilder> kernel = choice.createKernel();
    if (kernel->sharedBytes() > kStaticSharedLimit ||
        kernel->sharedBytes() + kernel->dynamicSharedBytes() >
            kDynamicSharedLimit)
      return op->emitOpError("kernel needs ")
             << kernel->sharedBytes() + kernel->dynamicSharedBytes()
             << " bytes of shared memory; lower kv-block-size or "
                "rows-per-warp";
    choice.rowsPerBlock = kernel->rowsPerBlock();
    choice.kvBlockSize = kernel->kvBlockSize();
  }

  // The companions.
  if (spec.launch.splitKV)
    choice.combineKernel = splitCombineKernelName(
        problem.elementType, problem.valueDim(), problem.ragged);
  if (problem.paged)
    choice.appendKernel = pagedAppendKernelName(
        problem.elementType, problem.headDim, problem.valueDim(),
        problem.fp8Cache, problem.perHeadScales);

  if (failed(selectWarpSpecialized(op, spec, options, target, choice)))
    return failure();
  if (choice.warpSpecialized) {
    std::unique_ptr<AttentionKernelBuilder> kernel =
        choice.createWarpSpecializedKernel();
    if (kernel->dynamicSharedBytes() > warpSpecializedSharedLimit())
      return op->emitOpError("warp-specialised kernel needs ")
             << kernel->dynamicSharedBytes() << " bytes of shared memory";
  }
  return choice;
}

FailureOr<KernelChoiceFacts>
mlir::kiln::describeKernelChoice(Operation *site,
                                 const ConvertKilnToGPUOptions &options) {
  FailureOr<KernelChoice> choice =
      selectKernel(site, options, KernelTarget{options.hopper});
  if (failed(choice))
    return failure();
  const KernelSpec &spec = choice->spec;
  KernelChoiceFacts facts;
  facts.kernel = spec.name();
  switch (choice->family) {
  case KernelFamily::Mma:
    facts.variant = spec.variant.wgmma ? "wgmma" : "mma.sync";
    facts.blocksPerSM = choice->schedule->blocksPerSM;
    facts.from = choice->schedule->from;
    break;
  case KernelFamily::Tf32:
    facts.variant = spec.variant.tf32Split ? "3xtf32" : "tf32";
    break;
  case KernelFamily::Scalar:
    facts.variant = "scalar";
    break;
  case KernelFamily::Backward:
    facts.variant = "backward";
    break;
  }
  facts.rowsPerBlock = choice->rowsPerBlock;
  facts.kvBlockSize = choice->kvBlockSize;
  facts.splitKV = spec.launch.splitKV;
  facts.launchDependents = spec.launch.launchDependents;
  facts.clusterSplits = spec.launch.clusterSplits;
  facts.waitForGrid = spec.launch.waitForGrid;
  facts.combineKernel = choice->combineKernel;
  facts.appendKernel = choice->appendKernel;
  if (choice->warpSpecialized)
    facts.warpSpecializedKernel = choice->warpSpecialized->name();
  facts.why.append(choice->why.begin(), choice->why.end());
  facts.why.append(choice->warpSpecializedWhy.begin(),
                   choice->warpSpecializedWhy.end());
  return facts;
}
