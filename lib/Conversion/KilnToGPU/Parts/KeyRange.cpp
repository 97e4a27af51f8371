//===- KeyRange.cpp - Which key tiles need the mask -----------------------===//
//
// The keys a block visits (causal, window and window_right tile skipping,
// and its split's share); of those tiles, the ones inside kv_len and inside
// every row's band need no mask and only scale their scores.
//
//===----------------------------------------------------------------------===//

#include "AttentionKernel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::kiln::detail;

Value AttentionKernelBuilder::tileNeedsMask(
    Value kvStart, int64_t tileKeys, Value firstDiagonal,
    llvm::function_ref<Value()> lastDiagonal) {
  Value tileEnd = add(kvStart, constIndex(tileKeys));
  Value needsMask =
      arith::CmpIOp::create(*b, arith::CmpIPredicate::sgt, tileEnd, kvLen);
  if (std::optional<int64_t> right = spec.problem.rightBound()) {
    // The tile's last key is past the first row's band.
    Value crosses = arith::CmpIOp::create(
        *b, arith::CmpIPredicate::sgt, sub(tileEnd, constIndex(1)),
        add(firstDiagonal, constIndex(*right)));
    needsMask = arith::OrIOp::create(*b, needsMask, crosses);
    if (spec.problem.window) {
      // The tile's first key is outside the last row's window.
      Value last = lastDiagonal();
      Value oldest = sub(last, constIndex(*spec.problem.window));
      Value before =
          arith::CmpIOp::create(*b, arith::CmpIPredicate::sle, kvStart, oldest);
      needsMask = arith::OrIOp::create(*b, needsMask, before);
    }
  }
  return needsMask;
}

// The keys the block visits, [begin, end), for a sequence of `keys` keys.
std::pair<Value, Value> AttentionKernelBuilder::keyRange(Value keys) {
  ImplicitLocOpBuilder &builder = *b;
  Value offset = sub(keys, qLen);
  Value begin = constIndex(0), end = keys;
  // With masked_score, hidden keys still count for a row that sees no key:
  // key blocks are skipped only by kernels that revisit them for such rows.
  if (spec.problem.rightBound() &&
      (!spec.problem.maskedScore || revisitsSkippedKeys())) {
    Value last =
        add(add(endQuery, offset), constIndex(*spec.problem.rightBound()));
    last = arith::MaxSIOp::create(builder, last, constIndex(0));
    end = arith::MinSIOp::create(builder, last, keys);
    if (spec.problem.window) {
      Value first = sub(add(add(firstQuery, offset), constIndex(1)),
                        constIndex(*spec.problem.window));
      begin = arith::MaxSIOp::create(builder, first, constIndex(0));
      // A kernel that revisits the keys before the band does so in whole
      // blocks from key 0: the band starts on a block boundary.
      if (spec.problem.maskedScore)
        begin = mul(
            arith::DivUIOp::create(builder, begin, constIndex(kvBlockSize())),
            constIndex(kvBlockSize()));
    }
  }
  if (spec.launch.splitKV) {
    // Split s of n takes tiles [s·t, (s + 1)·t) of the block's key range,
    // t = ceil(tiles / n): whole tiles, so only the range's ends are
    // partial. (32 bits: a sequence's keys are an i32.)
    Value span =
        arith::MaxSIOp::create(builder, sub(end, begin), constIndex(0));
    Value tiles = ceilDivU32(span, constIndex(kvBlockSize()));
    Value keysPerSplit =
        mul(ceilDivU32(tiles, numSplits), constIndex(kvBlockSize()));
    Value splitBegin = add(begin, mul(splitIndex, keysPerSplit));
    Value splitEnd =
        arith::MinSIOp::create(builder, end, add(splitBegin, keysPerSplit));
    begin = arith::MinSIOp::create(builder, splitBegin, splitEnd);
    end = splitEnd;
  }
  return {begin, end};
}
