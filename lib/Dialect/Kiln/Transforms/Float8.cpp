//===- Float8.cpp - float8 e4m3fn conversions in integer arithmetic -------===//
//
// See Float8.h.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/Transforms/Float8.h"
#include "kiln/Dialect/Kiln/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>
#include <limits>

namespace mlir::kiln {
#define GEN_PASS_DEF_KILNEXPANDFLOAT8
#include "kiln/Dialect/Kiln/Transforms/Passes.h.inc"
} // namespace mlir::kiln

using namespace mlir;
using namespace mlir::kiln;

namespace {

/// i32 arithmetic at one insertion point.
struct Bits {
  OpBuilder &b;
  Location loc;

  Value i32(int64_t v) {
    return arith::ConstantIntOp::create(b, loc, b.getI32Type(), v);
  }
  Value f32(double v) {
    return arith::ConstantOp::create(b, loc,
                                     b.getF32FloatAttr(static_cast<float>(v)));
  }
  Value add(Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); }
  Value sub(Value x, Value y) { return arith::SubIOp::create(b, loc, x, y); }
  Value andi(Value x, Value y) { return arith::AndIOp::create(b, loc, x, y); }
  Value ori(Value x, Value y) { return arith::OrIOp::create(b, loc, x, y); }
  Value shl(Value x, Value y) { return arith::ShLIOp::create(b, loc, x, y); }
  Value shr(Value x, Value y) { return arith::ShRUIOp::create(b, loc, x, y); }
  Value cmp(arith::CmpIPredicate p, Value x, Value y) {
    return arith::CmpIOp::create(b, loc, p, x, y);
  }
  Value select(Value c, Value x, Value y) {
    return arith::SelectOp::create(b, loc, c, x, y);
  }
  Value bitcast(Type type, Value v) {
    return arith::BitcastOp::create(b, loc, type, v);
  }
};

} // namespace

Value mlir::kiln::decodeE4M3(OpBuilder &b, Location loc, Value element) {
  Bits x{b, loc};
  Value bits = arith::ExtUIOp::create(b, loc, b.getI32Type(),
                                      x.bitcast(b.getI8Type(), element));
  Value exponent = x.andi(x.shr(bits, x.i32(3)), x.i32(0xF));
  Value mantissa = x.andi(bits, x.i32(0x7));
  Value sign = x.shl(x.andi(bits, x.i32(0x80)), x.i32(24));
  // Normal: rebias 7 -> 127 and move the 3 mantissa bits to the top of
  // f32's 23.
  Value normal = x.ori(x.shl(x.add(exponent, x.i32(127 - 7)), x.i32(23)),
                       x.shl(mantissa, x.i32(20)));
  // Subnormal (and zero): m·2^-9, exact in f32.
  Value subnormal = x.bitcast(
      b.getI32Type(),
      arith::MulFOp::create(
          b, loc, arith::UIToFPOp::create(b, loc, b.getF32Type(), mantissa),
          x.f32(std::ldexp(1.0, -9))));
  Value magnitude = x.select(
      x.cmp(arith::CmpIPredicate::eq, exponent, x.i32(0)), subnormal, normal);
  Value value = x.bitcast(b.getF32Type(), x.ori(magnitude, sign));
  Value isNaN =
      x.cmp(arith::CmpIPredicate::eq, x.andi(bits, x.i32(0x7F)), x.i32(0x7F));
  return x.select(isNaN, x.f32(std::numeric_limits<double>::quiet_NaN()),
                  value);
}

Value mlir::kiln::encodeE4M3(OpBuilder &b, Location loc, Value value) {
  Bits x{b, loc};
  Value bits = x.bitcast(b.getI32Type(), value);
  Value sign = x.andi(x.shr(bits, x.i32(24)), x.i32(0x80));
  Value magnitude = x.andi(bits, x.i32(0x7FFFFFFF));
  // Normal results (|x| >= 2^-6): round f32's 23 mantissa bits to 3, ties
  // to even (a carry moves into the exponent), then rebias 127 -> 7.
  Value odd = x.andi(x.shr(magnitude, x.i32(20)), x.i32(1));
  Value rounded =
      x.shr(x.add(x.add(magnitude, x.i32(0x7FFFF)), odd), x.i32(20));
  Value normal = x.sub(rounded, x.i32((127 - 7) << 3));
  // Subnormal results: |x|·2^9 rounded to an integer m in [0, 8] (8 is the
  // smallest normal, 0.0001.000, which m's bits already spell). Adding and
  // subtracting 2^23 rounds to nearest even in f32.
  Value absolute = x.bitcast(b.getF32Type(), magnitude);
  Value shifted = arith::MulFOp::create(b, loc, absolute, x.f32(512.0));
  Value biased = arith::AddFOp::create(b, loc, shifted, x.f32(8388608.0));
  Value whole = arith::SubFOp::create(b, loc, biased, x.f32(8388608.0));
  Value subnormal = arith::FPToUIOp::create(b, loc, b.getI32Type(), whole);
  Value small =
      x.cmp(arith::CmpIPredicate::ult, magnitude, x.i32(0x3C800000));
  Value encoded = x.select(small, subnormal, normal);
  // NaN, infinities and magnitudes that round past 448 become NaN.
  Value nan = x.ori(x.cmp(arith::CmpIPredicate::ugt, magnitude,
                          x.i32(0x7F800000 - 1)),
                    x.cmp(arith::CmpIPredicate::ugt, encoded, x.i32(0x7E)));
  encoded = x.ori(x.select(nan, x.i32(0x7F), encoded), sign);
  Value byte = arith::TruncIOp::create(b, loc, b.getI8Type(), encoded);
  return x.bitcast(Float8E4M3FNType::get(b.getContext()), byte);
}

namespace {

struct ExpandExtF : public OpRewritePattern<arith::ExtFOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(arith::ExtFOp op,
                                PatternRewriter &rewriter) const override {
    if (!isa<Float8E4M3FNType>(op.getIn().getType()))
      return failure();
    Value value = decodeE4M3(rewriter, op.getLoc(), op.getIn());
    Type out = op.getType();
    // Every e4m3 value is exact in f16, bf16, f32 and f64.
    if (out.getIntOrFloatBitWidth() > 32)
      value = arith::ExtFOp::create(rewriter, op.getLoc(), out, value);
    else if (!out.isF32())
      value = arith::TruncFOp::create(rewriter, op.getLoc(), out, value);
    rewriter.replaceOp(op, value);
    return success();
  }
};

struct ExpandTruncF : public OpRewritePattern<arith::TruncFOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(arith::TruncFOp op,
                                PatternRewriter &rewriter) const override {
    if (!isa<Float8E4M3FNType>(op.getType()))
      return failure();
    Value value = op.getIn();
    Type in = value.getType();
    // f16 and bf16 widen exactly; f64 narrows to f32 first (a second
    // rounding, off only for values within 2^-29 of an e4m3 midpoint).
    if (in.getIntOrFloatBitWidth() > 32)
      value = arith::TruncFOp::create(rewriter, op.getLoc(),
                                      rewriter.getF32Type(), value);
    else if (!in.isF32())
      value = arith::ExtFOp::create(rewriter, op.getLoc(),
                                    rewriter.getF32Type(), value);
    rewriter.replaceOp(op, encodeE4M3(rewriter, op.getLoc(), value));
    return success();
  }
};

struct KilnExpandFloat8Pass
    : public kiln::impl::KilnExpandFloat8Base<KilnExpandFloat8Pass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateExpandFloat8Patterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

void mlir::kiln::populateExpandFloat8Patterns(RewritePatternSet &patterns) {
  patterns.add<ExpandExtF, ExpandTruncF>(patterns.getContext());
}
