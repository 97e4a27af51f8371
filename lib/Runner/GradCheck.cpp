//===- GradCheck.cpp - Check kiln.attention_grad on the CPU -----*- C++ -*-===//
//
// Each kiln.attention op is copied into a function of its own that runs the
// forward with its log-sum-exp and then kiln.attention_grad; the function
// runs through the CPU path on random inputs. The reference is a float64
// forward written here from the op's definition: the loss is
// L = <out, g> for a random cotangent g, and for each differentiable operand
// X and random direction u, <dX, u> must match the central difference
// (L(X + eps·u) - L(X - eps·u)) / (2·eps). In float64 the difference is
// exact to about eps² (truncation) plus 1e-16/eps (rounding): far below
// what the f32 and half-precision gradients are checked to.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runner/GradCheck.h"

#include "kiln/Dialect/Kiln/IR/KilnOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>

using namespace mlir;
using namespace mlir::kiln;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// A kiln.attention op's sizes and attributes, with its sequences spelled
/// out (one per batch entry, or one per packed sequence).
struct Problem {
  bool packed = false, bshd = false;
  int64_t batch = 0, numQueryHeads = 0, numKvHeads = 0, headDim = 0,
          valueHeadDim = 0;
  /// Uniform form: the lengths of every sequence. Packed form: the rows.
  int64_t queryLength = 0, kvLength = 0;
  /// Per sequence: the first query and key row, and how many.
  SmallVector<int64_t> queryStart, queryCount, keyStart, keyCount;
  double scale = 1;
  /// The run-time scale_factor: one value, or one a query head.
  SmallVector<double> factors = {1.0};
  double factorOf(int64_t head) const {
    return factors.size() == 1 ? factors.front() : factors[head];
  }
  std::optional<double> softcap, maskedScore;
  std::optional<int64_t> rightBound, window;
  bool hasMask = false, boolMask = false, hasBias = false;
  /// The mask's and bias's shapes, padded with leading 1s to rank 4.
  int64_t maskShape[4] = {1, 1, 1, 1}, biasShape[4] = {1, 1, 1, 1};

  int64_t rowIndex(int64_t b, int64_t h, int64_t i, int64_t numHeads,
                   int64_t length, int64_t start, int64_t dim,
                   int64_t d) const {
    if (packed)
      return ((start + i) * numHeads + h) * dim + d;
    if (bshd)
      return ((b * length + i) * numHeads + h) * dim + d;
    return ((b * numHeads + h) * length + i) * dim + d;
  }
  int64_t query(int64_t b, int64_t h, int64_t i, int64_t d) const {
    return rowIndex(b, h, i, numQueryHeads, queryLength, queryStart[b], headDim,
                    d);
  }
  int64_t key(int64_t b, int64_t h, int64_t j, int64_t d) const {
    return rowIndex(b, h, j, numKvHeads, kvLength, keyStart[b], headDim, d);
  }
  int64_t value(int64_t b, int64_t h, int64_t j, int64_t d) const {
    return rowIndex(b, h, j, numKvHeads, kvLength, keyStart[b], valueHeadDim,
                    d);
  }
  int64_t out(int64_t b, int64_t h, int64_t i, int64_t d) const {
    return rowIndex(b, h, i, numQueryHeads, queryLength, queryStart[b],
                    valueHeadDim, d);
  }
  int64_t lse(int64_t b, int64_t h, int64_t i) const {
    if (packed)
      return h * queryLength + queryStart[b] + i;
    return (b * numQueryHeads + h) * queryLength + i;
  }
  static int64_t broadcast(const int64_t shape[4], int64_t b, int64_t h,
                           int64_t i, int64_t j) {
    int64_t at[4] = {b, h, i, j}, index = 0;
    for (int axis = 0; axis < 4; ++axis)
      index = index * shape[axis] + (shape[axis] == 1 ? 0 : at[axis]);
    return index;
  }
};

/// The op's forward in float64: `out` and `lse` (natural log) from Q, K,
/// V, mask and bias, exactly as kiln.attention defines them.
void forward(const Problem &p, ArrayRef<double> q, ArrayRef<double> k,
             ArrayRef<double> v, ArrayRef<double> mask, ArrayRef<double> bias,
             std::vector<double> &out, std::vector<double> &lse,
             int64_t outSize, int64_t lseSize) {
  out.assign(outSize, 0.0);
  lse.assign(lseSize, -kInf);
  int64_t group = p.numQueryHeads / std::max<int64_t>(p.numKvHeads, 1);
  std::vector<double> scores;
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t rows = p.queryCount[b], keys = p.keyCount[b];
    int64_t diagonal = keys - rows;
    scores.resize(keys);
    for (int64_t h = 0; h < p.numQueryHeads; ++h) {
      int64_t kvHead = h / group;
      for (int64_t i = 0; i < rows; ++i) {
        double rowMax = -kInf;
        for (int64_t j = 0; j < keys; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < p.headDim; ++d)
            dot += q[p.query(b, h, i, d)] * k[p.key(b, kvHead, j, d)];
          double x = dot * p.factorOf(h);
          double s = p.softcap
                         ? *p.softcap * std::tanh(x * p.scale / *p.softcap)
                         : x * p.scale;
          if (p.hasBias)
            s += bias[Problem::broadcast(p.biasShape, b, h, i, j)];
          bool hidden = false;
          if (p.hasMask) {
            double m = mask[Problem::broadcast(p.maskShape, b, h, i, j)];
            if (p.boolMask)
              hidden = m == 0.0;
            else
              s += m;
          }
          if (p.rightBound) {
            hidden |= j > i + diagonal + *p.rightBound;
            if (p.window)
              hidden |= j <= i + diagonal - *p.window;
          }
          if (hidden)
            s = p.maskedScore ? *p.maskedScore : -kInf;
          scores[j] = s;
          rowMax = std::max(rowMax, s);
        }
        if (rowMax == -kInf)
          continue;
        double sum = 0;
        for (int64_t j = 0; j < keys; ++j) {
          scores[j] = std::exp(scores[j] - rowMax);
          sum += scores[j];
        }
        lse[p.lse(b, h, i)] = rowMax + std::log(sum);
        for (int64_t d = 0; d < p.valueHeadDim; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < keys; ++j)
            acc += scores[j] * v[p.value(b, kvHead, j, d)];
          out[p.out(b, h, i, d)] = acc / sum;
        }
      }
    }
  }
}

std::vector<double> toDoubles(const HostTensor &tensor) {
  std::vector<double> values(tensor.getNumElements());
  for (int64_t i = 0, e = values.size(); i < e; ++i)
    values[i] = tensor.getAsDouble(i);
  return values;
}

/// The value of a constant operand as a host tensor, if it is one.
std::optional<HostTensor> constantValue(Value operand) {
  DenseElementsAttr attr;
  if (!matchPattern(operand, m_Constant(&attr)))
    return std::nullopt;
  auto type = cast<RankedTensorType>(operand.getType());
  HostTensor tensor(type.getElementType(), type.getShape());
  int64_t index = 0;
  if (isa<FloatType>(type.getElementType())) {
    for (APFloat value : attr.getValues<APFloat>()) {
      bool losesInfo = false;
      value.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven,
                    &losesInfo);
      tensor.setFromDouble(index++, value.convertToDouble());
    }
  } else {
    bool isBool = type.getElementType().isInteger(1);
    for (APInt value : attr.getValues<APInt>())
      tensor.setFromDouble(index++, isBool ? double(value.getZExtValue())
                                           : double(value.getSExtValue()));
  }
  return tensor;
}

/// Sequence bounds from `[B + 1]` offsets, clamped into [0, total] and made
/// non-decreasing as the lowerings do.
void sequencesOf(const HostTensor &offsets, int64_t total,
                 SmallVectorImpl<int64_t> &starts,
                 SmallVectorImpl<int64_t> &counts) {
  int64_t batch = std::max<int64_t>(offsets.getNumElements() - 1, 0);
  for (int64_t b = 0; b < batch; ++b) {
    auto at = [&](int64_t index) {
      return std::clamp<int64_t>(
          static_cast<int64_t>(offsets.getAsDouble(index)), 0, total);
    };
    int64_t start = at(b), end = std::max(at(b + 1), start);
    starts.push_back(start);
    counts.push_back(end - start);
  }
}

/// Random packed offsets: `[B + 1]`, from 0 to `total`, some sequences
/// possibly empty.
HostTensor randomOffsets(Type type, int64_t entries, int64_t total,
                         std::mt19937_64 &rng) {
  HostTensor offsets(type, {entries});
  std::uniform_int_distribution<int64_t> cut(0, total);
  SmallVector<int64_t> cuts;
  for (int64_t i = 1; i + 1 < entries; ++i)
    cuts.push_back(cut(rng));
  llvm::sort(cuts);
  offsets.setFromDouble(0, 0);
  for (auto [index, value] : llvm::enumerate(cuts))
    offsets.setFromDouble(index + 1, value);
  if (entries > 1)
    offsets.setFromDouble(entries - 1, total);
  return offsets;
}

double defaultTolerance(Type elementType) {
  if (elementType.isF32())
    return 1e-3;
  if (elementType.isF16())
    return 1e-2;
  return 4e-2;
}

/// Checks one op; failure when it cannot be checked.
FailureOr<GradCheckSite> checkSite(AttentionOp op, int64_t siteIndex,
                                   const GradCheckOptions &options) {
  if (op.getQDescale())
    return op.emitOpError() << "has FP8 operands, which have no gradient";
  GradCheckSite site;
  {
    llvm::raw_string_ostream os(site.location);
    op.getLoc().print(os);
  }
  Type elementType = op.getElementType();
  site.elementType = getElementTypeName(elementType);
  MLIRContext *context = op.getContext();
  for (Value operand : op->getOperands())
    if (!cast<RankedTensorType>(operand.getType()).hasStaticShape())
      return op.emitError() << "the gradient check needs static shapes, got "
                            << operand.getType();
  if (!cast<RankedTensorType>(op.getResult().getType()).hasStaticShape())
    return op.emitError() << "the gradient check needs static shapes, got "
                          << op.getResult().getType();

  // The function: forward with lse, then the backward.
  auto resultType = cast<RankedTensorType>(op.getResult().getType());
  RankedTensorType lseType;
  if (op.isPacked())
    lseType =
        RankedTensorType::get({op.getNumQueryHeads(), op.getQueryLength()},
                              Float32Type::get(context));
  else
    lseType = RankedTensorType::get(
        {op.getBatchSize(), op.getNumQueryHeads(), op.getQueryLength()},
        Float32Type::get(context));
  SmallVector<Value> operands(op->getOperands());
  SmallVector<Type> argumentTypes;
  for (Value operand : operands)
    argumentTypes.push_back(operand.getType());
  argumentTypes.push_back(resultType);
  Value bias = op.getBias();
  SmallVector<Type> resultTypes = {resultType, lseType, op.getQuery().getType(),
                                   op.getKey().getType(),
                                   op.getValue().getType()};
  if (bias)
    resultTypes.push_back(bias.getType());

  OwningOpRef<ModuleOp> module = ModuleOp::create(op.getLoc());
  OpBuilder builder(context);
  builder.setInsertionPointToEnd(module->getBody());
  auto func =
      func::FuncOp::create(builder, op.getLoc(), "grad_check",
                           builder.getFunctionType(argumentTypes, resultTypes));
  Block *entry = func.addEntryBlock();
  builder.setInsertionPointToStart(entry);
  IRMapping mapping;
  for (auto [operand, argument] :
       llvm::zip(operands, entry->getArguments().drop_back()))
    mapping.map(operand, argument);
  auto mapped = [&](Value value) {
    return value ? mapping.lookup(value) : Value();
  };
  Value q = mapped(op.getQuery()), k = mapped(op.getKey()),
        v = mapped(op.getValue());
  auto forwardOp = AttentionOp::create(
      builder, op.getLoc(), resultType, lseType, q, k, v, mapped(op.getMask()),
      mapped(bias), mapped(op.getQOffsets()), mapped(op.getKvOffsets()),
      mapped(op.getScaleFactor()), /*q_descale=*/Value(),
      /*k_descale=*/Value(), /*v_descale=*/Value(), op.getScaleAttr(),
      op.getCausalAttr(),
      op.getWindowAttr(), op.getWindowRightAttr(), op.getSoftcapAttr(),
      op.getMaskedScoreAttr(), op.getLayoutAttr(), /*prob_scale=*/FloatAttr());
  FloatAttr backwardScale = op.getScaleAttr();
  if (options.perturbScale != 0)
    backwardScale = builder.getF32FloatAttr(op.getScale().convertToFloat() *
                                            (1.0 + options.perturbScale));
  auto backwardOp = AttentionGradOp::create(
      builder, op.getLoc(), op.getQuery().getType(), op.getKey().getType(),
      op.getValue().getType(), bias ? bias.getType() : Type(), q, k, v,
      forwardOp.getResult(), forwardOp.getLse(), entry->getArguments().back(),
      mapped(op.getMask()), mapped(bias), mapped(op.getQOffsets()),
      mapped(op.getKvOffsets()), mapped(op.getScaleFactor()), backwardScale,
      op.getCausalAttr(), op.getWindowAttr(), op.getWindowRightAttr(),
      op.getSoftcapAttr(), op.getMaskedScoreAttr(), op.getLayoutAttr(),
      bias ? builder.getUnitAttr() : UnitAttr());
  SmallVector<Value> returned = {forwardOp.getResult(), forwardOp.getLse()};
  llvm::append_range(returned, backwardOp->getResults());
  func::ReturnOp::create(builder, op.getLoc(), returned);

  // Inputs: constants keep their value, the rest is drawn.
  std::mt19937_64 rng(options.seed + siteIndex);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::bernoulli_distribution keep(0.8);
  std::uniform_real_distribution<double> factorDraw(0.5, 1.5);
  SmallVector<HostTensor> inputs;
  for (auto [index, operand] : llvm::enumerate(operands)) {
    // An operand passed twice (K as V) is one input.
    auto earlier = llvm::find(operands, operand);
    if (earlier - operands.begin() < static_cast<int64_t>(index)) {
      inputs.push_back(inputs[earlier - operands.begin()]);
      continue;
    }
    if (std::optional<HostTensor> constant = constantValue(operand)) {
      inputs.push_back(std::move(*constant));
      continue;
    }
    auto type = cast<RankedTensorType>(operand.getType());
    HostTensor tensor(type.getElementType(), type.getShape());
    if (operand == op.getQOffsets() || operand == op.getKvOffsets()) {
      int64_t total =
          operand == op.getQOffsets() ? op.getQueryLength() : op.getKvLength();
      tensor =
          randomOffsets(type.getElementType(), type.getDimSize(0), total, rng);
    } else if (operand == op.getScaleFactor()) {
      for (int64_t i = 0, e = tensor.getNumElements(); i < e; ++i)
        tensor.setFromDouble(i, factorDraw(rng));
    } else if (type.getElementType().isInteger(1)) {
      for (int64_t i = 0, e = tensor.getNumElements(); i < e; ++i)
        tensor.setFromDouble(i, keep(rng) ? 1.0 : 0.0);
    } else {
      fillRandom(tensor, rng);
    }
    inputs.push_back(std::move(tensor));
  }
  HostTensor cotangent(resultType.getElementType(), resultType.getShape());
  fillRandom(cotangent, rng);
  inputs.push_back(cotangent);

  FailureOr<SmallVector<HostTensor>> results =
      runOnCPU(*module, "grad_check", inputs, options.run);
  if (failed(results))
    return op.emitError() << "the gradient check could not run this op";

  // The float64 problem.
  Problem p;
  p.packed = op.isPacked();
  p.bshd = op.getLayout() == Layout::bshd;
  p.numQueryHeads = op.getNumQueryHeads();
  p.numKvHeads = op.getNumKvHeads();
  p.headDim = op.getHeadDim();
  p.valueHeadDim = op.getValueHeadDim();
  p.queryLength = op.getQueryLength();
  p.kvLength = op.getKvLength();
  p.scale = op.getScale().convertToFloat();
  if (std::optional<APFloat> cap = op.getSoftcap())
    p.softcap = cap->convertToFloat();
  if (std::optional<APFloat> fill = op.getMaskedScore())
    p.maskedScore = fill->convertToFloat();
  p.rightBound = op.getRightBound();
  if (std::optional<uint64_t> window = op.getWindow())
    p.window = static_cast<int64_t>(*window);
  auto inputOf = [&](Value operand) -> const HostTensor & {
    return inputs[llvm::find(operands, operand) - operands.begin()];
  };
  if (Value factor = op.getScaleFactor()) {
    const HostTensor &values = inputOf(factor);
    p.factors.clear();
    for (int64_t i = 0, e = values.getNumElements(); i < e; ++i)
      p.factors.push_back(values.getAsDouble(i));
  }
  if (p.packed) {
    sequencesOf(inputOf(op.getQOffsets()), p.queryLength, p.queryStart,
                p.queryCount);
    sequencesOf(inputOf(op.getKvOffsets()), p.kvLength, p.keyStart, p.keyCount);
    p.batch = p.queryStart.size();
  } else {
    p.batch = op.getBatchSize();
    p.queryStart.assign(p.batch, 0);
    p.keyStart.assign(p.batch, 0);
    p.queryCount.assign(p.batch, p.queryLength);
    p.keyCount.assign(p.batch, p.kvLength);
  }
  auto padShape = [](Value operand, int64_t(&shape)[4]) {
    auto type = cast<RankedTensorType>(operand.getType());
    int64_t offset = 4 - type.getRank();
    for (int64_t axis = 0; axis < type.getRank(); ++axis)
      shape[offset + axis] = type.getDimSize(axis);
  };
  std::vector<double> mask, biasValues;
  if (Value maskOperand = op.getMask()) {
    p.hasMask = true;
    p.boolMask = op.getMaskKind() == "boolean";
    padShape(maskOperand, p.maskShape);
    mask = toDoubles(inputOf(maskOperand));
  }
  if (bias) {
    p.hasBias = true;
    padShape(bias, p.biasShape);
    biasValues = toDoubles(inputOf(bias));
  }
  std::vector<double> q64 = toDoubles(inputOf(op.getQuery())),
                      k64 = toDoubles(inputOf(op.getKey())),
                      v64 = toDoubles(inputOf(op.getValue())),
                      g64 = toDoubles(cotangent);
  const HostTensor &outComputed = (*results)[0];
  const HostTensor &lseComputed = (*results)[1];
  int64_t outSize = outComputed.getNumElements();
  int64_t lseSize = lseComputed.getNumElements();

  std::vector<double> out, lse;
  auto loss = [&](ArrayRef<double> qs, ArrayRef<double> ks, ArrayRef<double> vs,
                  ArrayRef<double> biases) {
    forward(p, qs, ks, vs, mask, biases, out, lse, outSize, lseSize);
    double sum = 0;
    for (int64_t i = 0; i < outSize; ++i)
      sum += out[i] * g64[i];
    return sum;
  };
  loss(q64, k64, v64, biasValues);

  double tolerance =
      options.tolerance > 0 ? options.tolerance : defaultTolerance(elementType);
  auto record = [&](StringRef name, double error, double limit) {
    site.errors.emplace_back(name.str(), error, limit);
    // NaN never passes.
    if (!(error <= limit)) {
      site.passed = false;
      emitError(op.getLoc())
          << "gradient check failed: " << name << " relative error "
          << llvm::formatv("{0:e2}", error).str() << " above the tolerance "
          << llvm::formatv("{0:e2}", limit).str();
    }
  };

  // The forward itself: out against the largest reference value, lse
  // against log Σ exp per row (-inf where the row sees no key).
  double outScale = 0, outError = 0;
  for (int64_t i = 0; i < outSize; ++i)
    outScale = std::max(outScale, std::fabs(out[i]));
  for (int64_t i = 0; i < outSize; ++i)
    outError =
        std::max(outError, std::fabs(outComputed.getAsDouble(i) - out[i]) /
                               std::max(outScale, 1e-30));
  record("out", outError, tolerance);
  double lseError = 0;
  for (int64_t i = 0; i < lseSize; ++i) {
    double computed = lseComputed.getAsDouble(i), wanted = lse[i];
    double error;
    if (std::isinf(wanted) || std::isinf(computed))
      error = computed == wanted ? 0.0 : kInf;
    else
      error = std::fabs(computed - wanted) / std::max(1.0, std::fabs(wanted));
    if (std::isnan(computed))
      error = kInf;
    lseError = std::max(lseError, error);
  }
  record("lse", lseError, 1e-4);

  // The gradients along random directions.
  struct Operand {
    StringRef name;
    std::vector<double> *values;
    const HostTensor *gradient;
  };
  SmallVector<Operand> differentiable = {{"dQ", &q64, &(*results)[2]},
                                         {"dK", &k64, &(*results)[3]},
                                         {"dV", &v64, &(*results)[4]}};
  if (bias)
    differentiable.push_back({"dBias", &biasValues, &(*results)[5]});
  constexpr double eps = 1e-4;
  for (Operand &operand : differentiable) {
    std::vector<double> &x = *operand.values;
    std::vector<double> original = x, direction(x.size());
    std::vector<double> gradient = toDoubles(*operand.gradient);
    // <grad, u> over normal u has the gradient's norm as its typical size:
    // errors are relative to the larger of that and the difference itself,
    // so a direction nearly orthogonal to the gradient does not count a
    // rounding error as a large relative one.
    double norm = 0;
    for (double g : gradient)
      norm += g * g;
    norm = std::sqrt(norm);
    double worst = 0;
    for (int64_t n = 0; n < options.directions; ++n) {
      for (double &u : direction)
        u = normal(rng);
      double analytic = 0;
      for (size_t i = 0; i < x.size(); ++i)
        analytic += gradient[i] * direction[i];
      for (size_t i = 0; i < x.size(); ++i)
        x[i] = original[i] + eps * direction[i];
      double plus = loss(q64, k64, v64, biasValues);
      for (size_t i = 0; i < x.size(); ++i)
        x[i] = original[i] - eps * direction[i];
      double minus = loss(q64, k64, v64, biasValues);
      x = original;
      double numeric = (plus - minus) / (2 * eps);
      double error = std::fabs(analytic - numeric) /
                     std::max({std::fabs(numeric), norm, 1e-6});
      if (std::isnan(analytic))
        error = kInf;
      worst = std::max(worst, error);
    }
    record(operand.name, worst, tolerance);
  }
  return site;
}

} // namespace

void GradCheckReport::print(llvm::raw_ostream &os) const {
  int64_t passedSites = 0;
  for (auto [index, site] : llvm::enumerate(sites)) {
    passedSites += site.passed;
    os << "site " << index << " " << site.location << " " << site.elementType
       << ":";
    for (auto &[name, error, limit] : site.errors)
      os << " " << name << " " << llvm::formatv("{0:e1}", error).str() << "/"
         << llvm::formatv("{0:e0}", limit).str();
    os << (site.passed ? " ok" : " FAILED") << "\n";
  }
  os << "gradient check: " << passedSites << " of " << sites.size()
     << " sites passed\n";
}

FailureOr<GradCheckReport>
mlir::kiln::checkAttentionGradients(ModuleOp module,
                                    const GradCheckOptions &options) {
  SmallVector<AttentionOp> ops;
  module.walk([&](AttentionOp op) { ops.push_back(op); });
  if (ops.empty())
    return emitError(module.getLoc())
           << "the gradient check found no kiln.attention op";
  GradCheckReport report;
  for (auto [index, op] : llvm::enumerate(ops)) {
    FailureOr<GradCheckSite> site = checkSite(op, index, options);
    if (failed(site))
      return failure();
    report.passed &= site->passed;
    report.sites.push_back(std::move(*site));
  }
  return report;
}
