//===- KilnToGPU.cpp - kiln.attention to GPU kernels ------------*- C++ -*-===//
#include "kiln/Conversion/Passes.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_CONVERTKILNTOGPU
#include "kiln/Conversion/Passes.h.inc"
} // namespace mlir::kiln

using namespace mlir;
namespace {
struct ConvertKilnToGPUPass
    : public kiln::impl::ConvertKilnToGPUBase<ConvertKilnToGPUPass> {
  using Base::Base;
  void runOnOperation() override {}
};
} // namespace
