//===- KeyRange.cpp - Which key tiles need the mask -----------------------===//
//
// A block visits the key range the prologue bounds (causal, window and
// window_right tile skipping); of those tiles, the ones inside kv_len and
// inside every row's band need no mask and only scale their scores.
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
  if (std::optional<int64_t> right = spec.rightBound()) {
    // The tile's last key is past the first row's band.
    Value crosses = arith::CmpIOp::create(
        *b, arith::CmpIPredicate::sgt, sub(tileEnd, constIndex(1)),
        add(firstDiagonal, constIndex(*right)));
    needsMask = arith::OrIOp::create(*b, needsMask, crosses);
    if (spec.window) {
      // The tile's first key is outside the last row's window.
      Value last = lastDiagonal();
      Value oldest = sub(last, constIndex(*spec.window));
      Value before =
          arith::CmpIOp::create(*b, arith::CmpIPredicate::sle, kvStart, oldest);
      needsMask = arith::OrIOp::create(*b, needsMask, before);
    }
  }
  return needsMask;
}
