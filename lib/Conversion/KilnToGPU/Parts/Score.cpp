//===- Score.cpp - A tile's scores, masked or only scaled -----------------===//
//
// The per-score function (scale, softcap, bias, mask, masked_score) is
// finishScore (AttentionKernel.cpp); a tile takes its masked path only where
// tileNeedsMask says so.
//
//===----------------------------------------------------------------------===//

#include "AttentionKernel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::kiln::detail;

SmallVector<Value> AttentionKernelBuilder::finishIf(
    Value needsMask, size_t count,
    llvm::function_ref<SmallVector<Value>(bool masked)> finish) {
  SmallVector<Type> types(count, b->getF32Type());
  auto ifOp = scf::IfOp::create(*b, types, needsMask, true);
  OpBuilder::InsertionGuard guard(*b);
  b->setInsertionPointToStart(&ifOp.getThenRegion().front());
  scf::YieldOp::create(*b, finish(true));
  b->setInsertionPointToStart(&ifOp.getElseRegion().front());
  scf::YieldOp::create(*b, finish(false));
  return SmallVector<Value>(ifOp.getResults().begin(), ifOp.getResults().end());
}
