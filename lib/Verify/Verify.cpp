//===- Verify.cpp - Check a fusion on the CPU -------------------*- C++ -*-===//
//
// Sites are paired by program order: kiln-fuse-attention{annotate-only}
// tags the op producing each site's result in the unfused graph with
// `kiln.site_root = N`, and a fusion creates its kiln attention ops in that
// same order. Both modules then return those values as extra results, so
// one CPU run of each gives the outputs and the per-site values.
//
// A graph in f16/bf16 rounds its intermediates (the scores, P) where the
// fused op keeps f32. Where an output of such a graph differs from the fused
// one beyond the tolerance, the graph is also run with every f16/bf16 type
// widened to f32: the output passes if the fused value is at least as close
// to that f32 computation as the graph's own and within the tolerance of it
// (the graph's rounding, not the fusion, made the difference); the line
// says both errors.
//
//===----------------------------------------------------------------------===//

#include "kiln/Verify/Verify.h"

#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Dialect/Kiln/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "mlir/IR/Verifier.h"

#include <cmath>
#include <map>
#include <random>

using namespace mlir;
using namespace mlir::kiln;

static func::FuncOp findFunction(ModuleOp module, StringRef name) {
  if (!name.empty()) {
    auto func = module.lookupSymbol<func::FuncOp>(name);
    return func && !func.isExternal() ? func : nullptr;
  }
  if (auto main = module.lookupSymbol<func::FuncOp>("main"))
    if (!main.isExternal())
      return main;
  for (auto func : module.getOps<func::FuncOp>())
    if (!func.isExternal() && func.isPublic())
      return func;
  return nullptr;
}

/// The input's name: `onnx.name`, else the name of its location, else argN.
static std::string argumentName(func::FuncOp func, unsigned index) {
  if (auto name = func.getArgAttrOfType<StringAttr>(index, "onnx.name"))
    return name.str();
  Location loc = func.getArgument(index).getLoc();
  if (auto nameLoc = dyn_cast<NameLoc>(loc))
    return nameLoc.getName().str();
  return "arg" + std::to_string(index);
}

/// Calls `visit` on each use of `value`, and of what casts, reshapes and
/// other layout ops of it compute, by an op other than those (each user
/// once).
static void forEachUseThroughLayout(Value value,
                                    llvm::function_ref<void(OpOperand &)> visit) {
  SmallVector<Value> worklist = {value};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!worklist.empty()) {
    Value current = worklist.pop_back_val();
    for (OpOperand &use : current.getUses()) {
      Operation *user = use.getOwner();
      if (!seen.insert(user).second)
        continue;
      if (isa<tosa::CastOp, tosa::ReshapeOp, tosa::TransposeOp, tosa::SliceOp,
              tosa::IdentityOp, tensor::CastOp>(user))
        worklist.push_back(user->getResult(0));
      else
        visit(use);
    }
  }
}

/// Rows of the smallest table `value` indexes through tosa.gather (following
/// casts, reshapes and other layout ops), if any.
static std::optional<int64_t> gatherTableRows(Value value) {
  std::optional<int64_t> rows;
  forEachUseThroughLayout(value, [&](OpOperand &use) {
    auto gather = dyn_cast<tosa::GatherOp>(use.getOwner());
    if (!gather || use.getOperandNumber() != 1)
      return;
    int64_t size = gather.getValues().getType().getDimSize(1);
    if (!ShapedType::isDynamic(size))
      rows = rows ? std::min(*rows, size) : size;
  });
  return rows;
}

/// The contracted size of the products a weight feeds: for a float argument
/// of rank 2 or 3 (a matrix, or Flax's `[in, heads, dim]` kernel) that is
/// the right-hand side of a matmul shared by every row of its left side
/// (x·W: a batch of one, following casts, reshapes and other layout ops),
/// that product's K (the largest, where it feeds several). None for any
/// other argument (Q, K and V: batched by sequence or head).
static std::optional<int64_t> weightFanIn(BlockArgument argument) {
  auto type = dyn_cast<RankedTensorType>(argument.getType());
  if (!type || type.getRank() < 2 || type.getRank() > 3 ||
      !isa<FloatType>(type.getElementType()))
    return std::nullopt;
  std::optional<int64_t> fanIn;
  forEachUseThroughLayout(argument, [&](OpOperand &use) {
    auto matmul = dyn_cast<tosa::MatMulOp>(use.getOwner());
    if (!matmul)
      return;
    auto rhs = cast<RankedTensorType>(matmul.getB().getType());
    if (use.get() != matmul.getB() || matmul.getA() == matmul.getB() ||
        rhs.getDimSize(0) != 1)
      return;
    int64_t size = rhs.getDimSize(1);
    if (!ShapedType::isDynamic(size) && size > 1)
      fanIn = fanIn ? std::max(*fanIn, size) : size;
  });
  return fanIn;
}

/// Appends `values` to the results of `func` (every return of it).
static void returnExtraValues(func::FuncOp func, ArrayRef<Value> values) {
  if (values.empty())
    return;
  SmallVector<Type> resultTypes(func.getResultTypes());
  for (Value value : values)
    resultTypes.push_back(value.getType());
  func.walk([&](func::ReturnOp ret) {
    SmallVector<Value> operands(ret.getOperands());
    operands.append(values.begin(), values.end());
    ret->setOperands(operands);
  });
  func.setFunctionType(FunctionType::get(func.getContext(),
                                         func.getArgumentTypes(), resultTypes));
  if (ArrayAttr resultAttrs = func.getResAttrsAttr()) {
    SmallVector<Attribute> padded(resultAttrs.begin(), resultAttrs.end());
    padded.resize(resultTypes.size(), DictionaryAttr::get(func.getContext()));
    func.setResAttrsAttr(ArrayAttr::get(func.getContext(), padded));
  }
}

/// Elements of `tensor` as doubles, in the bhsd order when `bshd` is set on
/// a rank-4 tensor.
static std::vector<double> valuesOf(const HostTensor &tensor, bool bshd) {
  int64_t count = tensor.getNumElements();
  std::vector<double> values(count);
  if (!bshd || tensor.shape.size() != 4) {
    for (int64_t i = 0; i < count; ++i)
      values[i] = tensor.getAsDouble(i);
    return values;
  }
  int64_t batch = tensor.shape[0], seq = tensor.shape[1],
          heads = tensor.shape[2], dim = tensor.shape[3];
  int64_t out = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t s = 0; s < seq; ++s)
        for (int64_t d = 0; d < dim; ++d)
          values[out++] =
              tensor.getAsDouble(((b * seq + s) * heads + h) * dim + d);
  return values;
}

/// `nanIsUndefined`: a NaN in the reference is the graph's 0/0 on a row that
/// sees no key under a -inf fill, where Kiln gives zeros; such elements are
/// counted, not compared.
static TensorComparison compare(StringRef name, const HostTensor &reference,
                                const HostTensor &fused, bool fusedBshd,
                                const VerifyOptions &options,
                                bool nanIsUndefined = false) {
  TensorComparison result;
  result.name = name.str();
  result.type = reference.getTypeString();
  result.numElements = reference.getNumElements();
  // The looser tolerance of the two element types (a fused site may return
  // f16 where the graph's softmax ran in f32); integers compare exactly.
  auto toleranceOf = [&](Type type) {
    if (type.isF16() || type.isBF16())
      return options.halfTolerance;
    return type.isF32() ? options.f32Tolerance : 0.0;
  };
  result.tolerance =
      std::max(toleranceOf(reference.elementType), toleranceOf(fused.elementType));
  if (fused.getNumElements() != reference.getNumElements()) {
    result.note = "fused value " + fused.getTypeString() +
                  " has a different number of elements";
    return result;
  }
  std::vector<double> expected = valuesOf(reference, false);
  std::vector<double> actual = valuesOf(fused, fusedBshd);
  double maxRef = 0, errSquares = 0, refSquares = 0;
  for (double value : expected)
    if (std::isfinite(value))
      maxRef = std::max(maxRef, std::fabs(value));
  for (size_t i = 0; i < expected.size(); ++i) {
    if (nanIsUndefined && std::isnan(expected[i])) {
      ++result.undefinedInReference;
      continue;
    }
    if (!std::isfinite(expected[i])) {
      ++result.referenceNonFinite;
      // Where the reference is NaN/Inf the fused value must be the same.
      bool same = std::isnan(expected[i]) ? std::isnan(actual[i])
                                          : actual[i] == expected[i];
      if (!same)
        ++result.nonFiniteMismatch;
      continue;
    }
    if (!std::isfinite(actual[i])) {
      ++result.newNonFinite;
      continue;
    }
    double error = std::fabs(actual[i] - expected[i]);
    result.maxAbsError = std::max(result.maxAbsError, error);
    if (std::fabs(expected[i]) > 1e-6 * maxRef && std::fabs(expected[i]) > 0)
      result.maxRelError =
          std::max(result.maxRelError, error / std::fabs(expected[i]));
    errSquares += error * error;
    refSquares += expected[i] * expected[i];
  }
  result.relativeL2 =
      refSquares > 0 ? std::sqrt(errSquares / refSquares)
                     : (errSquares > 0 ? INFINITY : 0.0);
  result.normalizedMaxError =
      maxRef > 0 ? result.maxAbsError / maxRef
                 : (result.maxAbsError > 0 ? INFINITY : 0.0);
  bool allNonFinite = result.numElements > 0 &&
                      result.referenceNonFinite == result.numElements;
  if (result.undefinedInReference)
    result.note = std::to_string(result.undefinedInReference) +
                  " elements NaN in the graph (0/0 on rows that see no key) "
                  "not compared";
  result.passed = result.newNonFinite == 0 && result.nonFiniteMismatch == 0 &&
                  !allNonFinite &&
                  result.normalizedMaxError <= result.tolerance &&
                  result.relativeL2 <= result.tolerance;
  if (allNonFinite)
    result.note = "the reference is NaN/Inf everywhere: inconclusive";
  else if (result.nonFiniteMismatch)
    result.note = std::to_string(result.nonFiniteMismatch) +
                  " elements where the reference is NaN/Inf and the fused "
                  "value differs";
  else if (result.newNonFinite)
    result.note = std::to_string(result.newNonFinite) +
                  " NaN/Inf where the reference is finite";
  else if (!result.passed)
    result.note = "error above tolerance";
  return result;
}


/// Whether `type` is a tensor of f16 or bf16 (or one of them).
static bool isNarrowFloat(Type type) {
  Type elem = getElementTypeOrSelf(type);
  return elem.isF16() || elem.isBF16();
}

static Type widened(Type type) {
  if (!isNarrowFloat(type))
    return type;
  Type f32 = Float32Type::get(type.getContext());
  if (auto shaped = dyn_cast<ShapedType>(type))
    return shaped.clone(f32);
  return f32;
}

/// `module` with every f16/bf16 type, constant and float attribute widened
/// to f32 and the casts that became no-ops removed; null when the result
/// does not verify (an op that takes no f32).
static OwningOpRef<ModuleOp> widenToF32(ModuleOp module) {
  OwningOpRef<ModuleOp> wide = module.clone();
  MLIRContext *ctx = module.getContext();
  Type f32 = Float32Type::get(ctx);
  auto widenAttr = [&](Attribute attr) -> Attribute {
    if (auto floatAttr = dyn_cast<FloatAttr>(attr))
      if (isNarrowFloat(floatAttr.getType()))
        return FloatAttr::get(f32, floatAttr.getValueAsDouble());
    if (auto dense = dyn_cast<DenseFPElementsAttr>(attr))
      if (isNarrowFloat(dense.getType()))
        return dense.mapValues(f32, [](const APFloat &value) {
          APFloat wideValue = value;
          bool lost;
          wideValue.convert(APFloat::IEEEsingle(), APFloat::rmNearestTiesToEven,
                            &lost);
          return wideValue.bitcastToAPInt();
        });
    return attr;
  };
  SmallVector<Operation *> noOpCasts;
  wide->walk([&](Operation *op) {
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (BlockArgument arg : block.getArguments())
          arg.setType(widened(arg.getType()));
    for (OpResult result : op->getResults())
      result.setType(widened(result.getType()));
    for (NamedAttribute named : op->getAttrs()) {
      Attribute attr = widenAttr(named.getValue());
      if (attr != named.getValue())
        op->setAttr(named.getName(), attr);
    }
    if (auto func = dyn_cast<func::FuncOp>(op)) {
      auto type = func.getFunctionType();
      SmallVector<Type> inputs, results;
      for (Type t : type.getInputs())
        inputs.push_back(widened(t));
      for (Type t : type.getResults())
        results.push_back(widened(t));
      func.setType(FunctionType::get(ctx, inputs, results));
    }
    if (isa<tosa::CastOp>(op) &&
        op->getOperand(0).getType() == op->getResult(0).getType())
      noOpCasts.push_back(op);
  });
  for (Operation *cast : noOpCasts) {
    cast->getResult(0).replaceAllUsesWith(cast->getOperand(0));
    cast->erase();
  }
  ScopedDiagnosticHandler quiet(ctx, [](Diagnostic &) { return success(); });
  if (failed(mlir::verify(*wide)))
    return nullptr;
  return wide;
}

namespace {

/// How the 0/1 inputs (masks) of one verification run are drawn.
enum class PaddingTrial { Random, Left, Right, LeftAllPadded };

const char *trialName(PaddingTrial trial) {
  switch (trial) {
  case PaddingTrial::Random:
    return "random 0/1";
  case PaddingTrial::Left:
    return "left padding";
  case PaddingTrial::Right:
    return "right padding";
  case PaddingTrial::LeftAllPadded:
    return "left padding, first row all padding";
  }
  return "";
}

const char *paddingTrialNames(bool paddedRowsFree) {
  // With --padded-rows=free, rows that see no key may differ by design;
  // right padding never hides every key of a row (causal rows keep their
  // unpadded prefix).
  return paddedRowsFree ? "right padding"
                        : "random 0/1, left padding, right padding, left "
                          "padding with the first row all padding";
}

/// Writes a padding pattern into a 0/1 tensor: along the last axis, each
/// row keeps 1s on a random-length suffix (left padding) or prefix (right
/// padding) of at least one element; the first row may be all padding.
void fillPadding(HostTensor &tensor, PaddingTrial trial, std::mt19937_64 &rng) {
  if (tensor.shape.empty())
    return;
  int64_t length = tensor.shape.back();
  int64_t rows = length ? tensor.getNumElements() / length : 0;
  for (int64_t row = 0; row < rows; ++row) {
    std::uniform_int_distribution<int64_t> pick(
        0, std::max<int64_t>(0, length - 1));
    int64_t padded = pick(rng);
    if (trial == PaddingTrial::LeftAllPadded && row == 0)
      padded = length;
    for (int64_t j = 0; j < length; ++j) {
      bool isPad =
          trial == PaddingTrial::Right ? j >= length - padded : j < padded;
      tensor.setFromDouble(row * length + j, isPad ? 0.0 : 1.0);
    }
  }
}

} // namespace

void VerifyReport::print(llvm::raw_ostream &os) const {
  for (const std::string &line : inputs)
    os << "input " << line << "\n";
  auto printOne = [&](const TensorComparison &c) {
    os << (c.passed ? "PASS " : "FAIL ") << c.name << " " << c.type
       << llvm::format(" max-abs %.3e max-rel %.3e rel-l2 %.3e "
                       "normalized-max %.3e tolerance %.1e",
                       c.maxAbsError, c.maxRelError, c.relativeL2,
                       c.normalizedMaxError, c.tolerance);
    if (c.referenceNonFinite)
      os << " reference-non-finite " << c.referenceNonFinite;
    if (!c.note.empty())
      os << " (" << c.note << ")";
    os << "\n";
  };
  for (const TensorComparison &c : outputs)
    printOne(c);
  for (const TensorComparison &c : sites)
    printOne(c);
  if (!siteNote.empty())
    os << "sites: " << siteNote << "\n";
  os << (passed ? "fusion verified" : "fusion MISMATCH") << ": "
     << outputs.size() << " outputs, " << sites.size() << " sites\n";
}

FailureOr<VerifyReport>
mlir::kiln::verifyFusion(ModuleOp unfused, ModuleOp fused,
                         const VerifyOptions &options) {
  func::FuncOp unfusedFunc = findFunction(unfused, options.funcName);
  func::FuncOp fusedFunc =
      findFunction(fused, unfusedFunc ? unfusedFunc.getSymName()
                                      : StringRef(options.funcName));
  if (!unfusedFunc || !fusedFunc)
    return emitError(unfused.getLoc())
           << "no function "
           << (options.funcName.empty() ? std::string("to compare")
                                        : "@" + options.funcName)
           << " in both modules";
  if (unfusedFunc.getArgumentTypes() != fusedFunc.getArgumentTypes())
    return fusedFunc.emitError()
           << "the fused function's arguments differ from the unfused ones";
  if (unfusedFunc.getNumResults() != fusedFunc.getNumResults())
    return fusedFunc.emitError()
           << "the fused function has " << fusedFunc.getNumResults()
           << " results, the unfused one " << unfusedFunc.getNumResults();
  StringRef funcName = unfusedFunc.getSymName();
  unsigned numOutputs = unfusedFunc.getNumResults();

  VerifyReport report;
  // Inputs. 0/1 inputs (masks) are drawn once per padding trial: random
  // 0/1, then left and right padding (each row keeps a random-length prefix
  // or suffix), then the same with the first row all padding, so that rows
  // that see no key are checked too.
  std::mt19937_64 rng(options.seed);
  SmallVector<HostTensor> inputs;
  SmallVector<unsigned> maskInputs;
  for (auto [index, type] : llvm::enumerate(unfusedFunc.getArgumentTypes())) {
    auto tensorType = dyn_cast<RankedTensorType>(type);
    if (!tensorType ||
        !HostTensor::isSupportedElementType(tensorType.getElementType()))
      return unfusedFunc.emitError()
             << "argument " << index << " has type " << type
             << ", which the CPU runner does not support";
    SmallVector<int64_t> shape;
    for (int64_t size : tensorType.getShape())
      shape.push_back(ShapedType::isDynamic(size) ? options.dynamicDimSize
                                                  : size);
    HostTensor tensor(tensorType.getElementType(), shape);
    std::string name = argumentName(unfusedFunc, index);
    std::string how;
    std::optional<int64_t> rows;
    if (isa<FloatType>(tensor.elementType)) {
      fillRandom(tensor, rng);
      how = "normal(0, 1)";
      // A weight drawn N(0, 1) makes x·W's entries of size sqrt(K):
      // scores then saturate every softmax and a bf16 graph's own rounding
      // decides its output. Drawn N(0, 1/K), as initialisers draw weights,
      // its products stay of the inputs' size.
      if (std::optional<int64_t> fanIn =
              weightFanIn(unfusedFunc.getArgument(index))) {
        double scale = 1.0 / std::sqrt(static_cast<double>(*fanIn));
        for (int64_t i = 0, e = tensor.getNumElements(); i < e; ++i)
          tensor.setFromDouble(i, tensor.getAsDouble(i) * scale);
        how = "normal(0, 1/" + std::to_string(*fanIn) + ") (a weight)";
      }
    } else if ((rows = gatherTableRows(unfusedFunc.getArgument(index))) &&
               !tensor.elementType.isInteger(1) &&
               !StringRef(name).contains_insensitive("mask")) {
      fillRandom(tensor, rng, 0, *rows);
      how = "[0, " + std::to_string(*rows) + ") (gather table rows)";
    } else if (tensor.elementType.isInteger(1) ||
               StringRef(name).contains_insensitive("mask") ||
               options.defaultIntHigh == 2) {
      fillRandom(tensor, rng, 0, 2);
      maskInputs.push_back(index);
      how = "0/1 (padding trials: " +
            std::string(paddingTrialNames(options.paddedRowsFree)) + ")";
    } else {
      fillRandom(tensor, rng, 0, options.defaultIntHigh);
      how = "[0, " + std::to_string(options.defaultIntHigh) + ")";
    }
    report.inputs.push_back(name + " " + tensor.getTypeString() + " " + how);
    inputs.push_back(std::move(tensor));
  }
  SmallVector<PaddingTrial> trials = {PaddingTrial::Random};
  if (!maskInputs.empty())
    trials = options.paddedRowsFree
                 ? SmallVector<PaddingTrial>{PaddingTrial::Right}
                 : SmallVector<PaddingTrial>{
                       PaddingTrial::Random, PaddingTrial::Left,
                       PaddingTrial::Right, PaddingTrial::LeftAllPadded};

  OwningOpRef<ModuleOp> reference = unfused.clone();
  OwningOpRef<ModuleOp> candidate = fused.clone();
  SmallVector<bool> siteIsBshd;
  if (options.compareSites) {
    PassManager pm(unfused.getContext());
    KilnFuseAttentionOptions annotate;
    annotate.annotateOnly = true;
    annotate.paddedRows = options.paddedRowsFree ? "free" : "exact";
    annotate.foldFp8 = options.foldFp8;
    pm.addPass(createKilnFuseAttention(annotate));
    if (failed(pm.run(*reference)))
      return failure();
    func::FuncOp referenceFunc = findFunction(*reference, funcName);
    std::map<int64_t, Value> roots;
    referenceFunc.walk([&](Operation *op) {
      if (auto attr = op->getAttrOfType<IntegerAttr>("kiln.site_root"))
        roots[attr.getInt()] = op->getResult(0);
    });
    func::FuncOp candidateFunc = findFunction(*candidate, funcName);
    SmallVector<Value> sites;
    candidateFunc.walk([&](Operation *op) {
      if (auto attention = dyn_cast<AttentionOp>(op)) {
        sites.push_back(attention.getResult());
        siteIsBshd.push_back(attention.getLayout() == Layout::bshd);
      } else if (auto paged = dyn_cast<PagedAttentionOp>(op)) {
        sites.push_back(paged.getResult());
        siteIsBshd.push_back(false);
      }
    });
    if (roots.size() == sites.size()) {
      SmallVector<Value> rootValues;
      for (auto &entry : roots)
        rootValues.push_back(entry.second);
      returnExtraValues(referenceFunc, rootValues);
      returnExtraValues(candidateFunc, sites);
    } else {
      report.siteNote = std::to_string(roots.size()) +
                        " sites match in the unfused graph, the fused one "
                        "has " +
                        std::to_string(sites.size()) +
                        " attention ops: not compared";
      siteIsBshd.clear();
    }
  }

  // Attention ops already in the original graph (from an importer) run
  // through the plain whole-row lowering, so that the reference shares no
  // tiling with the fused graph it checks.
  CPURunOptions referenceRun = options.run;
  referenceRun.attentionLowering = AttentionLowering::Decomposed;
  // The graph in f32, for outputs of a half-precision graph that differ.
  OwningOpRef<ModuleOp> wide;
  if (llvm::any_of(unfusedFunc.getArgumentTypes(), isNarrowFloat) ||
      llvm::any_of(unfusedFunc.getResultTypes(), isNarrowFloat))
    wide = widenToF32(*reference);
  report.passed = true;
  for (PaddingTrial trial : trials) {
    if (trial != PaddingTrial::Random)
      for (unsigned index : maskInputs)
        fillPadding(inputs[index], trial, rng);
    FailureOr<SmallVector<HostTensor>> expected =
        runOnCPU(*reference, funcName, inputs, referenceRun);
    if (failed(expected))
      return failure();
    FailureOr<SmallVector<HostTensor>> actual =
        runOnCPU(*candidate, funcName, inputs, options.run);
    if (failed(actual))
      return failure();
    std::string suffix =
        trials.size() > 1 ? " [" + std::string(trialName(trial)) + "]" : "";
    std::optional<SmallVector<HostTensor>> wideOutputs;
    for (unsigned i = 0; i < expected->size(); ++i) {
      bool isSite = i >= numOutputs;
      bool bshd = isSite && siteIsBshd[i - numOutputs];
      std::string name = isSite ? "site " + std::to_string(i - numOutputs)
                                : "output " + std::to_string(i);
      TensorComparison comparison =
          compare(name + suffix, (*expected)[i], (*actual)[i], bshd, options,
                  /*nanIsUndefined=*/!maskInputs.empty());
      if (!comparison.passed && wide && comparison.newNonFinite == 0 &&
          comparison.nonFiniteMismatch == 0 &&
          isNarrowFloat((*expected)[i].elementType)) {
        if (!wideOutputs) {
          SmallVector<HostTensor> wideInputs;
          for (const HostTensor &input : inputs) {
            HostTensor copy(widened(input.elementType), input.shape);
            for (int64_t k = 0, e = input.getNumElements(); k < e; ++k)
              copy.setFromDouble(k, input.getAsDouble(k));
            wideInputs.push_back(std::move(copy));
          }
          FailureOr<SmallVector<HostTensor>> run =
              runOnCPU(*wide, funcName, wideInputs, referenceRun);
          if (failed(run))
            return failure();
          wideOutputs = std::move(*run);
        }
        const HostTensor &f32 = (*wideOutputs)[i];
        bool undefined = !maskInputs.empty();
        TensorComparison fusedError =
            compare(name, f32, (*actual)[i], bshd, options, undefined);
        TensorComparison graphError =
            compare(name, f32, (*expected)[i], false, options, undefined);
        // Within the tolerance of the graph's f32 form, and nearer to it
        // than the graph itself.
        bool closer =
            fusedError.passed &&
            fusedError.normalizedMaxError <= graphError.normalizedMaxError &&
            fusedError.relativeL2 <= graphError.relativeL2;
        comparison.note =
            llvm::formatv("against the graph run in f32: fused {0:e2}, the "
                          "graph's own {1:e2} (normalized-max)",
                          fusedError.normalizedMaxError,
                          graphError.normalizedMaxError)
                .str() +
            (closer ? "" : "; not within tolerance of it, or farther");
        comparison.passed = closer;
      }
      report.passed &= comparison.passed;
      (isSite ? report.sites : report.outputs).push_back(comparison);
    }
  }
  return report;
}
