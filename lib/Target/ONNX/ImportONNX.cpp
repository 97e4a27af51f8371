//===- ImportONNX.cpp - ONNX model to MLIR importer -----------------------===//
//
// Reads an ONNX ModelProto into a `func.func @main` over TOSA. Shape
// computations and constant masks are folded while importing, so that the
// graph that reaches Kiln's passes has static reshape targets and constant
// masks wherever the model's dims are static. See docs/onnx.md.
//
//===----------------------------------------------------------------------===//

#include "kiln/Target/ONNX/ImportONNX.h"

#include "GraphBuilder.h"
#include "Lit.h"
#include "ModelLoader.h"

#include "kiln/Dialect/Kiln/IR/KilnOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Statistic.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cmath>
#include <limits>
#include <map>
#include <limits>
#include <numeric>

using namespace mlir;
using namespace mlir::kiln;
using namespace mlir::kiln::graph;
using namespace mlir::kiln::onnx_import;

#define DEBUG_TYPE "kiln-onnx-import"

// Counted in release builds too: tests check that a compile reads its model
// once.
ALWAYS_ENABLED_STATISTIC(NumModelsRead, "ONNX models read and parsed");
ALWAYS_ENABLED_STATISTIC(NumGraphsConverted,
                         "ONNX graphs converted to MLIR (a second time for a "
                         "model imported again with static sizes)");

namespace {

constexpr int64_t kDynamic = ShapedType::kDynamic;
/// Tensors up to this many elements are folded at import time.
constexpr int64_t kFoldLimit = int64_t(1) << 22;
/// ONNX 1.14's FLOAT8E4M3FN (float8 e4m3, finite, with NaN), which the
/// linked libonnx's enum predates.
constexpr int32_t kOnnxFloat8E4M3FN = 17;

/// Outcome of importing one node.
enum class Status {
  /// The node was imported.
  Ok,
  /// Kiln has no lowering for the node (or for how it is used): it is kept
  /// as an opaque `onnx.<OpType>` operation.
  Unsupported,
  /// The model is malformed; a diagnostic has been emitted.
  Error,
};

/// What is known about one ONNX tensor.
struct TensorInfo {
  /// The SSA value, created lazily for constants.
  Value value;
  /// The value, when known at import time.
  DenseElementsAttr constant;
  /// RankedTensorType, or UnrankedTensorType when the rank is unknown.
  TensorType type;
  /// For rank-0/1 integer tensors that are partly known (shape vectors of
  /// dynamic tensors): the elements, kDynamic where unknown.
  std::optional<Shape> partial;
  /// Location of the producer.
  Location loc;
  /// The tensor's name in the graph (set by define and for initializers):
  /// a constant materialised on first use is named after it.
  std::string name = {};
  /// The node whose output it is (null for graph inputs and initializers).
  const onnx::NodeProto *producer = nullptr;
};

class Importer : public GraphBuilder {
public:
  Importer(MLIRContext *ctx, StringRef fileName, const ImportOptions &options,
           ImportReport *report)
      : GraphBuilder(ctx, fileName), options(options), report(report) {}

  OwningOpRef<ModuleOp> run(LoadedModel &model);

private:
  //===--------------------------------------------------------------------===//
  // Diagnostics
  //===--------------------------------------------------------------------===//

  InFlightDiagnostic error() override {
    InFlightDiagnostic diag = emitError(loc);
    if (currentNode)
      diag << "node '" << currentNode->name() << "' ("
           << currentNode->op_type() << "): ";
    else if (!currentTensor.empty())
      diag << "tensor '" << currentTensor << "': ";
    return diag;
  }
  Status fail(const Twine &message) {
    error() << message;
    return Status::Error;
  }
  Status unsupported(const Twine &reason) {
    unsupportedReason = reason.str();
    return Status::Unsupported;
  }

  //===--------------------------------------------------------------------===//
  // Types and tensors
  //===--------------------------------------------------------------------===//

  FailureOr<Type> convertElementType(int32_t onnxType);
  FailureOr<TensorType> convertType(const onnx::TypeProto &type);
  FailureOr<DenseElementsAttr> convertTensor(const onnx::TensorProto &tensor);

  TensorInfo *lookup(const std::string &name);
  Status define(const std::string &name, TensorInfo info);
  Status defineValue(int outputIndex, Value value);
  Status defineConstant(int outputIndex, DenseElementsAttr attr);
  Status defineLit(int outputIndex, const Lit &lit) {
    return defineConstant(outputIndex, lit.toAttr());
  }
  Status definePartial(int outputIndex, ArrayRef<int64_t> values, Type elemTy);

  /// The SSA value of `info`, materialising constants on first use.
  Value valueOf(TensorInfo *info);
  /// Names the producers of `node`'s outputs (ImportOptions::recordValueNames).
  void recordValueNames(const onnx::NodeProto &node);
  std::optional<Lit> litOf(TensorInfo *info);
  /// Elements of a rank-0/1 integer tensor, kDynamic where unknown.
  std::optional<Shape> intsOf(TensorInfo *info);
  using GraphBuilder::rankedOf;
  static RankedTensorType rankedOf(TensorInfo *info) {
    return info ? dyn_cast<RankedTensorType>(info->type) : RankedTensorType();
  }

  //===--------------------------------------------------------------------===//
  // Nodes
  //===--------------------------------------------------------------------===//

  Status importNode(const onnx::NodeProto &node);
  Status importOpaque(const onnx::NodeProto &node, StringRef reason);
  Status dispatch(const onnx::NodeProto &node);

  TensorInfo *input(int index);
  Status requireInputs(int count);
  const onnx::AttributeProto *attr(StringRef name);
  int64_t attrInt(StringRef name, int64_t defaultValue);
  float attrFloat(StringRef name, float defaultValue);
  std::string attrString(StringRef name, StringRef defaultValue);
  std::optional<Shape> attrInts(StringRef name);
  /// Axes given as an attribute (older opsets) or as input `inputIndex`.
  FailureOr<std::optional<Shape>> axesOf(int inputIndex);
  FailureOr<int64_t> normalizeAxis(int64_t axis, int64_t rank);

  Status importConstant();
  Status importIdentity();
  Status importCast();
  /// QuantizeLinear and DequantizeLinear to and from float8 e4m3fn.
  Status importQuantizeLinear();
  Status importDequantizeLinear();
  /// The scale of a (de)quantisation (or its reciprocal) in `elemType`,
  /// laid along `axis` of a rank-`rank` tensor (a per-axis scale is rank
  /// 1); null when it is neither a float scalar nor a rank-1 float tensor.
  /// The axis of a per-axis scale (checked against `scale`'s size), 0 for
  /// a per-tensor one.
  FailureOr<int64_t> quantAxis(TensorInfo *scale, int64_t rank);
  Value quantScale(TensorInfo *scale, int64_t axis, int64_t rank,
                   Type elemType, bool reciprocal);
  /// Whether a float8 zero point is absent or all zeros (the only zero
  /// point a float8 (de)quantisation has).
  bool isZeroFloat8Point(TensorInfo *zeroPoint);
  /// `x` clamped to e4m3's finite range [-448, 448] (NaN kept), as a
  /// saturating conversion to float8 e4m3fn rounds first.
  Value saturateToE4M3(Value x);
  Status importShape();
  Status importConstantOfShape();
  Status importRange();
  Status importReshape();
  Status importFlatten();
  Status importUnsqueeze();
  Status importSqueeze();
  Status importTranspose();
  Status importConcat();
  Status importSlice();
  Status importSplit();
  Status importGather();
  Status importGatherElements();
  Status importGatherND();
  Status importExpand();
  Status importTile();
  Status importTrilu();
  Status importWhere();
  Status importCumSum();
  Status importBinary(StringRef opType);
  Status importVariadic(StringRef opType);
  Status importUnary(StringRef opType);
  Status importSoftmax();
  Status importLogSoftmax();
  Status importReduceLogSumExp();
  /// For `Exp` of `x`: the softmax whose logarithm `x` is (LogSoftmax, or
  /// `y - ReduceLogSumExp(y)` over one axis), as the softmax of its input;
  /// else null.
  Value expOfLogSoftmax(TensorInfo *x);
  Status importReduce(StringRef opType);
  Status importMatMul();
  Status importGemm();
  Status importEinsum();
  Status importLayerNorm();
  Status importRMSNorm();
  Status importInstanceNorm();
  Status importGroupNorm();
  Status importBatchNorm();
  Status importGelu();
  Status importClip();
  Status importConv();
  Status importAttention();

  /// (x - mean) / sqrt(var + epsilon), the statistics taken over `axes`
  /// (static sizes) in `x`'s element type.
  Value normalizeOver(Value x, ArrayRef<int64_t> axes, double epsilon);

  /// Emits the linear-index gather of `data` (flattened) at the constant
  /// positions `indices`, shaped `resultShape`.
  Value gatherLinear(Value data, ArrayRef<int64_t> indices,
                     ArrayRef<int64_t> resultShape);

  ImportOptions options;
  ImportReport *report;
  LoadedModel *loadedModel = nullptr;
  int64_t opset = 0;
  const onnx::NodeProto *currentNode = nullptr;
  /// Graph input or initializer being converted (for diagnostics).
  std::string currentTensor;
  llvm::StringMap<TensorInfo> tensors;
  /// Types the model declares for its tensors (value_info, inferred shapes).
  llvm::StringMap<const onnx::TypeProto *> declaredTypes;
};

} // namespace

//===----------------------------------------------------------------------===//
// Types and tensors
//===----------------------------------------------------------------------===//

FailureOr<Type> Importer::convertElementType(int32_t onnxType) {
  switch (onnxType) {
  case onnx::TensorProto::FLOAT:
    return Type(Float32Type::get(ctx));
  case onnx::TensorProto::FLOAT16:
    return Type(Float16Type::get(ctx));
  case onnx::TensorProto::BFLOAT16:
    return Type(BFloat16Type::get(ctx));
  case onnx::TensorProto::DOUBLE:
    return Type(Float64Type::get(ctx));
  case onnx::TensorProto::BOOL:
    return Type(IntegerType::get(ctx, 1));
  case onnx::TensorProto::INT8:
    return Type(IntegerType::get(ctx, 8));
  case onnx::TensorProto::INT16:
    return Type(IntegerType::get(ctx, 16));
  case onnx::TensorProto::INT32:
    return Type(IntegerType::get(ctx, 32));
  case onnx::TensorProto::INT64:
    return Type(IntegerType::get(ctx, 64));
  case onnx::TensorProto::UINT8:
    return Type(IntegerType::get(ctx, 8, IntegerType::Unsigned));
  case kOnnxFloat8E4M3FN:
    return Type(Float8E4M3FNType::get(ctx));
  default:
    break;
  }
  const char *name = "unknown";
  if (onnx::TensorProto_DataType_IsValid(onnxType))
    name = onnx::TensorProto_DataType_Name(onnxType).c_str();
  // Types newer than the linked libonnx's enum (ONNX 1.14+).
  static const char *const newer[] = {"FLOAT8E4M3FNUZ", "FLOAT8E5M2",
                                      "FLOAT8E5M2FNUZ", "UINT4", "INT4",
                                      "FLOAT4E2M1"};
  if (onnxType > kOnnxFloat8E4M3FN &&
      onnxType <= kOnnxFloat8E4M3FN + (int32_t)std::size(newer))
    name = newer[onnxType - kOnnxFloat8E4M3FN - 1];
  error() << "unsupported element type " << name << " (" << onnxType << ")";
  return failure();
}

FailureOr<TensorType> Importer::convertType(const onnx::TypeProto &type) {
  if (!type.has_tensor_type()) {
    error() << "only tensor types are supported";
    return failure();
  }
  const auto &tensorType = type.tensor_type();
  FailureOr<Type> elemType = convertElementType(tensorType.elem_type());
  if (failed(elemType))
    return failure();
  if (!tensorType.has_shape())
    return TensorType(UnrankedTensorType::get(*elemType));
  Shape shape;
  for (const auto &dim : tensorType.shape().dim()) {
    if (dim.has_dim_value()) {
      if (dim.dim_value() < 0 || dim.dim_value() > (int64_t(1) << 40)) {
        error() << "invalid dimension " << dim.dim_value();
        return failure();
      }
      shape.push_back(dim.dim_value());
      continue;
    }
    std::string name = dim.has_dim_param() ? dim.dim_param() : "?";
    auto binding = options.dimBindings.find(name);
    int64_t size = 0;
    if (binding != options.dimBindings.end())
      size = binding->second;
    else if (options.bindAllDims)
      size = defaultStaticSize(name);
    if (size <= 0) {
      shape.push_back(kDynamic);
      continue;
    }
    shape.push_back(size);
    if (report &&
        llvm::find(report->boundDims, std::make_pair(name, size)) ==
            report->boundDims.end())
      report->boundDims.push_back({name, size});
  }
  if (isShapeTooLarge(shape)) {
    error() << "tensor shape is too large";
    return failure();
  }
  return TensorType(RankedTensorType::get(shape, *elemType));
}

FailureOr<DenseElementsAttr>
Importer::convertTensor(const onnx::TensorProto &tensor) {
  if (tensor.data_location() == onnx::TensorProto::EXTERNAL ||
      tensor.external_data_size() > 0) {
    error() << "tensor '" << tensor.name()
            << "' uses external data, which is not supported";
    return failure();
  }
  if (tensor.has_segment()) {
    error() << "tensor '" << tensor.name() << "' is segmented";
    return failure();
  }
  FailureOr<Type> elemType = convertElementType(tensor.data_type());
  if (failed(elemType))
    return failure();
  Shape shape;
  int64_t count = 1;
  for (int64_t dim : tensor.dims()) {
    if (dim < 0 || dim > (int64_t(1) << 40) ||
        (dim > 0 && count > (int64_t(1) << 40) / dim)) {
      error() << "tensor '" << tensor.name() << "' has an invalid shape";
      return failure();
    }
    shape.push_back(dim);
    count *= dim;
  }
  auto type = RankedTensorType::get(shape, *elemType);
  unsigned bitWidth = elemType->getIntOrFloatBitWidth();
  auto mismatch = [&](int64_t got) -> FailureOr<DenseElementsAttr> {
    error() << "tensor '" << tensor.name() << "' holds " << got
            << " elements, its shape needs " << count
            << " (truncated or corrupt file?)";
    return failure();
  };

  if (tensor.has_raw_data()) {
    const std::string &raw = tensor.raw_data();
    int64_t byteWidth = bitWidth == 1 ? 1 : bitWidth / 8;
    if ((int64_t)raw.size() != count * byteWidth)
      return mismatch((int64_t)raw.size() / byteWidth);
    if (bitWidth == 1) {
      SmallVector<bool> values;
      values.reserve(count);
      for (char c : raw)
        values.push_back(c != 0);
      return DenseElementsAttr::get(type, ArrayRef<bool>(values));
    }
    return DenseElementsAttr::getFromRawBuffer(
        type, ArrayRef<char>(raw.data(), raw.size()));
  }

  Lit lit = Lit::make(shape, *elemType);
  // Copies a typed repeated field of `tensor` into `out`, after checking that
  // it holds one value per element.
  auto copyField = [&](const auto &field, auto &out) -> LogicalResult {
    if (field.size() != count)
      return failure();
    for (int64_t k = 0; k < count; ++k)
      out[k] = field.Get(k);
    return success();
  };
  switch (tensor.data_type()) {
  case onnx::TensorProto::FLOAT:
    if (failed(copyField(tensor.float_data(), lit.floats)))
      return mismatch(tensor.float_data_size());
    break;
  case onnx::TensorProto::DOUBLE:
    if (failed(copyField(tensor.double_data(), lit.floats)))
      return mismatch(tensor.double_data_size());
    break;
  case onnx::TensorProto::INT64:
    if (failed(copyField(tensor.int64_data(), lit.ints)))
      return mismatch(tensor.int64_data_size());
    break;
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16: {
    // Stored as raw 16-bit patterns in int32_data. The size is checked
    // before the buffer is sized from the (untrusted) shape.
    if (tensor.int32_data_size() != count)
      return mismatch(tensor.int32_data_size());
    SmallVector<uint16_t> bits(count);
    (void)copyField(tensor.int32_data(), bits);
    return DenseElementsAttr::getFromRawBuffer(
        type, ArrayRef<char>((const char *)bits.data(), bits.size() * 2));
  }
  case kOnnxFloat8E4M3FN: {
    // Raw 8-bit patterns in int32_data, one an element.
    if (tensor.int32_data_size() != count)
      return mismatch(tensor.int32_data_size());
    SmallVector<uint8_t> bits(count);
    (void)copyField(tensor.int32_data(), bits);
    return DenseElementsAttr::getFromRawBuffer(
        type, ArrayRef<char>((const char *)bits.data(), bits.size()));
  }
  default:
    if (failed(copyField(tensor.int32_data(), lit.ints)))
      return mismatch(tensor.int32_data_size());
    break;
  }
  lit.normalize();
  return lit.toAttr();
}

TensorInfo *Importer::lookup(const std::string &name) {
  auto it = tensors.find(name);
  return it == tensors.end() ? nullptr : &it->second;
}

Status Importer::define(const std::string &name, TensorInfo info) {
  if (name.empty())
    return Status::Ok;
  if (tensors.count(name))
    return fail("tensor '" + name + "' is defined twice");
  if (info.name.empty())
    info.name = name;
  if (!info.producer && currentNode &&
      llvm::is_contained(currentNode->output(), name))
    info.producer = currentNode;
  tensors.try_emplace(name, std::move(info));
  return Status::Ok;
}

Status Importer::defineValue(int outputIndex, Value value) {
  if (outputIndex >= currentNode->output_size())
    return Status::Ok;
  if (auto type = dyn_cast<RankedTensorType>(value.getType()))
    if (isShapeTooLarge(type.getShape()))
      return fail("result shape is too large");
  TensorInfo info{value, {}, cast<TensorType>(value.getType()), {}, loc};
  return define(currentNode->output(outputIndex), info);
}

Status Importer::defineConstant(int outputIndex, DenseElementsAttr attr) {
  if (outputIndex >= currentNode->output_size())
    return Status::Ok;
  TensorInfo info{Value(), attr, cast<TensorType>(attr.getType()), {}, loc};
  return define(currentNode->output(outputIndex), info);
}

Status Importer::definePartial(int outputIndex, ArrayRef<int64_t> values,
                               Type elemType) {
  if (llvm::none_of(values, [](int64_t v) { return v == kDynamic; })) {
    Lit lit = Lit::make({(int64_t)values.size()}, elemType);
    lit.ints.assign(values.begin(), values.end());
    return defineLit(outputIndex, lit);
  }
  // Partly known: the value itself is not materialisable.
  if (outputIndex >= currentNode->output_size())
    return Status::Ok;
  TensorInfo info{Value(), {},
                  RankedTensorType::get({(int64_t)values.size()}, elemType),
                  Shape(values.begin(), values.end()), loc};
  return define(currentNode->output(outputIndex), info);
}

Value Importer::valueOf(TensorInfo *info) {
  if (info->value)
    return info->value;
  if (!info->constant) {
    unsupportedReason = "a shape vector depends on a dynamic dimension";
    return {};
  }
  OpBuilder::InsertionGuard guard(builder);
  Location saved = loc;
  loc = info->loc;
  info->value = constant(info->constant);
  loc = saved;
  // A constant is a graph value too: an initializer (an exporter's folded
  // constant) or a node output folded at import.
  if (options.recordValueNames && !info->name.empty())
    if (Operation *producer = info->value.getDefiningOp();
        producer && !producer->hasAttr(kOnnxValueAttrName))
      producer->setAttr(kOnnxValueAttrName,
                        builder.getStringAttr(info->name));
  return info->value;
}

std::optional<Lit> Importer::litOf(TensorInfo *info) {
  if (!info || !info->constant ||
      cast<ShapedType>(info->constant.getType()).getNumElements() > kFoldLimit)
    return std::nullopt;
  return Lit::fromAttr(info->constant);
}

std::optional<Shape> Importer::intsOf(TensorInfo *info) {
  if (!info)
    return std::nullopt;
  if (info->partial)
    return info->partial;
  auto type = rankedOf(info);
  if (!info->constant || !type || type.getRank() > 1 ||
      !isa<IntegerType>(type.getElementType()))
    return std::nullopt;
  std::optional<Lit> lit = litOf(info);
  if (!lit)
    return std::nullopt;
  return Shape(lit->ints.begin(), lit->ints.end());
}

//===----------------------------------------------------------------------===//
// Node helpers
//===----------------------------------------------------------------------===//

TensorInfo *Importer::input(int index) {
  if (index >= currentNode->input_size() || currentNode->input(index).empty())
    return nullptr;
  return lookup(currentNode->input(index));
}

Status Importer::requireInputs(int count) {
  for (int k = 0; k < count; ++k)
    if (!input(k))
      return fail("missing input " + Twine(k));
  return Status::Ok;
}

const onnx::AttributeProto *Importer::attr(StringRef name) {
  for (const auto &a : currentNode->attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

int64_t Importer::attrInt(StringRef name, int64_t defaultValue) {
  const auto *a = attr(name);
  return a && a->has_i() ? a->i() : defaultValue;
}

float Importer::attrFloat(StringRef name, float defaultValue) {
  const auto *a = attr(name);
  return a && a->has_f() ? a->f() : defaultValue;
}

std::string Importer::attrString(StringRef name, StringRef defaultValue) {
  const auto *a = attr(name);
  return a && a->has_s() ? a->s() : defaultValue.str();
}

std::optional<Shape> Importer::attrInts(StringRef name) {
  const auto *a = attr(name);
  if (!a)
    return std::nullopt;
  return Shape(a->ints().begin(), a->ints().end());
}

FailureOr<std::optional<Shape>> Importer::axesOf(int inputIndex) {
  if (std::optional<Shape> axes = attrInts("axes"))
    return std::optional<Shape>(axes);
  TensorInfo *axesInput = input(inputIndex);
  if (!axesInput)
    return std::optional<Shape>();
  std::optional<Shape> axes = intsOf(axesInput);
  if (!axes || llvm::is_contained(*axes, kDynamic)) {
    unsupportedReason = "axes are not constant";
    return failure();
  }
  return std::optional<Shape>(axes);
}

FailureOr<int64_t> Importer::normalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1)) {
    error() << "axis " << axis << " is out of range for rank " << rank;
    return failure();
  }
  return axis < 0 ? axis + rank : axis;
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

Status Importer::importOpaque(const onnx::NodeProto &node, StringRef reason) {
  SmallVector<Value> operands;
  for (const std::string &name : node.input()) {
    if (name.empty())
      continue;
    TensorInfo *info = lookup(name);
    Value v = info ? valueOf(info) : Value();
    if (!v)
      return fail("cannot keep the node: input '" + name +
                  "' is not materialisable");
    operands.push_back(v);
  }
  SmallVector<Type> resultTypes;
  Type fallbackElem = builder.getF32Type();
  if (!operands.empty())
    fallbackElem = elemOf(operands.front());
  // Result types come from the model's value_info, else from ONNX's own
  // shape inference (run on first need), else stay unranked.
  if (llvm::any_of(node.output(), [&](const std::string &name) {
        return !name.empty() && !declaredTypes.count(name);
      }) &&
      !loadedModel->inferenceRan) {
    inferShapes(*loadedModel);
    for (const auto &vi : loadedModel->inferred.value_info())
      declaredTypes.try_emplace(vi.name(), &vi.type());
  }
  for (const std::string &name : node.output()) {
    Type type = UnrankedTensorType::get(fallbackElem);
    auto it = declaredTypes.find(name);
    if (it != declaredTypes.end()) {
      // Element type errors here are not fatal: fall back to the guess.
      if (it->second->has_tensor_type() &&
          it->second->tensor_type().elem_type() != 0) {
        FailureOr<TensorType> declared = convertType(*it->second);
        if (failed(declared))
          return Status::Error;
        type = *declared;
      }
    }
    resultTypes.push_back(type);
  }
  SmallVector<NamedAttribute> attrs;
  for (const auto &a : node.attribute()) {
    Attribute value;
    switch (a.type()) {
    case onnx::AttributeProto::INT:
      value = builder.getI64IntegerAttr(a.i());
      break;
    case onnx::AttributeProto::FLOAT:
      value = builder.getF32FloatAttr(a.f());
      break;
    case onnx::AttributeProto::STRING:
      value = builder.getStringAttr(a.s());
      break;
    case onnx::AttributeProto::INTS:
      value = builder.getI64ArrayAttr(
          SmallVector<int64_t>(a.ints().begin(), a.ints().end()));
      break;
    case onnx::AttributeProto::FLOATS:
      value = builder.getF32ArrayAttr(
          SmallVector<float>(a.floats().begin(), a.floats().end()));
      break;
    case onnx::AttributeProto::TENSOR: {
      FailureOr<DenseElementsAttr> t = convertTensor(a.t());
      if (failed(t))
        return Status::Error;
      value = *t;
      break;
    }
    default:
      value = builder.getStringAttr("<unsupported attribute kind>");
      break;
    }
    attrs.push_back(builder.getNamedAttr(a.name(), value));
  }
  std::string opName = "onnx." + node.op_type();
  if (!node.domain().empty() && node.domain() != "ai.onnx")
    attrs.push_back(builder.getNamedAttr("onnx.domain",
                                         builder.getStringAttr(node.domain())));
  Operation *op = create(opName, operands, resultTypes, attrs);
  for (auto [k, name] : llvm::enumerate(node.output())) {
    if (name.empty())
      continue;
    TensorInfo info{op->getResult(k), {},
                    cast<TensorType>(op->getResult(k).getType()), {}, loc};
    if (define(name, info) != Status::Ok)
      return Status::Error;
  }
  if (report)
    report->unsupportedOps.push_back({node.name(), node.op_type(), reason.str()});
  if (options.warnOnUnsupported)
    emitWarning(loc) << "ONNX node '" << node.name() << "' (" << node.op_type()
                     << ") is kept opaque: " << reason;
  if (options.recordValueNames)
    recordValueNames(node);
  return Status::Ok;
}

Status Importer::importNode(const onnx::NodeProto &node) {
  currentNode = &node;
  std::string locName = node.name();
  if (locName.empty() && node.output_size() > 0)
    locName = node.output(0);
  loc = NameLoc::get(builder.getStringAttr(locName), fileLoc);
  for (const std::string &name : node.input())
    if (!name.empty() && !lookup(name))
      return fail("uses undefined tensor '" + name + "'");
  // Every operator of the default domain has at least one output; the
  // importers below define output 0 without checking again.
  if (node.output_size() == 0)
    return fail("has no outputs");

  if (!node.domain().empty() && node.domain() != "ai.onnx")
    return importOpaque(node, "operator domain '" + node.domain() +
                                  "' is not supported");

  unsupportedReason.clear();
  Status status = dispatch(node);
  if (status == Status::Error)
    return status;
  if (status == Status::Unsupported) {
    if (unsupportedReason.empty())
      return Status::Error; // A diagnostic was emitted by a helper.
    // Whatever the failed attempt created is unused; it is erased with the
    // other dead operations once the graph is imported.
    for (const std::string &name : node.output())
      tensors.erase(name);
    std::string reason = unsupportedReason;
    return importOpaque(node, reason);
  }
  for (const std::string &name : node.output())
    if (!name.empty() && !lookup(name))
      return fail("output '" + name + "' was not produced");
  if (options.recordValueNames)
    recordValueNames(node);
  return Status::Ok;
}

void Importer::recordValueNames(const onnx::NodeProto &node) {
  for (const std::string &name : node.output()) {
    TensorInfo *info = name.empty() ? nullptr : lookup(name);
    Operation *producer = info && info->value ? info->value.getDefiningOp()
                                              : nullptr;
    // A value another name already has (Identity) keeps its first name;
    // constants are not graph values a rewrite needs.
    if (!producer || producer->getNumResults() != 1 ||
        producer->hasAttr(kOnnxValueAttrName) ||
        producer->hasTrait<OpTrait::ConstantLike>())
      continue;
    producer->setAttr(kOnnxValueAttrName, builder.getStringAttr(name));
  }
}

Status Importer::dispatch(const onnx::NodeProto &node) {
  StringRef op = node.op_type();
  if (op == "Constant")
    return importConstant();
  if (op == "Identity" || op == "Dropout")
    return importIdentity();
  if (op == "Cast")
    return importCast();
  if (op == "QuantizeLinear")
    return importQuantizeLinear();
  if (op == "DequantizeLinear")
    return importDequantizeLinear();
  if (op == "Shape")
    return importShape();
  if (op == "Size") {
    auto type = rankedOf(input(0));
    if (!type || !type.hasStaticShape())
      return unsupported("Size of a dynamic tensor");
    Lit lit = Lit::make({}, builder.getI64Type());
    lit.ints[0] = type.getNumElements();
    return defineLit(0, lit);
  }
  if (op == "ConstantOfShape")
    return importConstantOfShape();
  if (op == "Range")
    return importRange();
  if (op == "Reshape")
    return importReshape();
  if (op == "Flatten")
    return importFlatten();
  if (op == "Unsqueeze")
    return importUnsqueeze();
  if (op == "Squeeze")
    return importSqueeze();
  if (op == "Transpose")
    return importTranspose();
  if (op == "Concat")
    return importConcat();
  if (op == "Slice")
    return importSlice();
  if (op == "Split")
    return importSplit();
  if (op == "Gather")
    return importGather();
  if (op == "GatherElements")
    return importGatherElements();
  if (op == "GatherND")
    return importGatherND();
  if (op == "Expand")
    return importExpand();
  if (op == "Tile")
    return importTile();
  if (op == "Trilu")
    return importTrilu();
  if (op == "Where")
    return importWhere();
  if (llvm::is_contained({"Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less",
                          "Greater", "LessOrEqual", "GreaterOrEqual", "And",
                          "Or", "Xor", "Mod"},
                         op))
    return importBinary(op);
  if (llvm::is_contained({"Max", "Min", "Sum", "Mean"}, op))
    return importVariadic(op);
  if (llvm::is_contained({"Sqrt", "Reciprocal", "Neg", "Tanh", "Erf", "Exp",
                          "Log", "Sigmoid", "Abs", "Floor", "Ceil", "Relu",
                          "Not", "IsNaN", "Sin", "Cos", "IsInf"},
                         op))
    return importUnary(op);
  if (op == "Softmax")
    return importSoftmax();
  if (op == "LogSoftmax")
    return importLogSoftmax();
  if (op == "ReduceLogSumExp")
    return importReduceLogSumExp();
  if (llvm::is_contained({"ReduceMean", "ReduceMax", "ReduceSum", "ReduceMin",
                          "ReduceProd", "ReduceL1", "ReduceL2",
                          "ReduceSumSquare"},
                         op))
    return importReduce(op);
  if (op == "MatMul")
    return importMatMul();
  if (op == "Einsum")
    return importEinsum();
  if (op == "Gemm")
    return importGemm();
  if (op == "LayerNormalization")
    return importLayerNorm();
  if (op == "RMSNormalization")
    return importRMSNorm();
  if (op == "InstanceNormalization")
    return importInstanceNorm();
  if (op == "GroupNormalization")
    return importGroupNorm();
  if (op == "BatchNormalization")
    return importBatchNorm();
  if (op == "Gelu")
    return importGelu();
  if (op == "Clip")
    return importClip();
  if (op == "Conv")
    return importConv();
  if (op == "Attention")
    return importAttention();
  if (op == "CumSum")
    return importCumSum();
  return unsupported("no lowering for this operator");
}

OwningOpRef<ModuleOp> Importer::run(LoadedModel &loaded) {
  onnx::ModelProto &model = loaded.model;
  loadedModel = &loaded;
  // Opset of the default domain.
  bool haveDefault = false;
  for (const auto &opsetId : model.opset_import()) {
    if (opsetId.domain().empty() || opsetId.domain() == "ai.onnx") {
      opset = opsetId.version();
      haveDefault = true;
    }
  }
  if (!haveDefault) {
    emitError(fileLoc) << "ONNX model imports no opset of the default domain";
    return {};
  }
  if (opset < 13 || opset > 23) {
    emitError(fileLoc) << "ONNX opset " << opset
                       << " is not supported (Kiln imports opsets 13 to 23)";
    return {};
  }
  if (!model.has_graph()) {
    emitError(fileLoc) << "ONNX model has no graph";
    return {};
  }
  const onnx::GraphProto &graph = model.graph();
  if (graph.output_size() == 0) {
    emitError(fileLoc) << "ONNX graph has no outputs (truncated file?)";
    return {};
  }
  if (report) {
    report->opsetVersion = opset;
    report->numNodes = graph.node_size();
  }
  for (const auto &vi : graph.value_info())
    declaredTypes[vi.name()] = &vi.type();
  for (const auto &vi : graph.output())
    declaredTypes[vi.name()] = &vi.type();

  // Owned from here on: every early return frees it.
  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  builder.setInsertionPointToEnd(module->getBody());

  // Initializers first: they may shadow graph inputs (default values).
  for (const auto &init : graph.initializer()) {
    loc = NameLoc::get(builder.getStringAttr(init.name()), fileLoc);
    currentTensor = init.name();
    FailureOr<DenseElementsAttr> attr = convertTensor(init);
    if (failed(attr))
      return {};
    if (init.name().empty() || tensors.count(init.name())) {
      emitError(loc) << "initializer '" << init.name()
                     << "' is unnamed or defined twice";
      return {};
    }
    tensors.try_emplace(init.name(),
                        TensorInfo{Value(), *attr,
                                   cast<TensorType>(attr->getType()), {}, loc,
                                   init.name()});
  }
  SmallVector<Type> argTypes;
  SmallVector<std::string> argNames;
  for (const auto &in : graph.input()) {
    if (tensors.count(in.name()))
      continue;
    loc = NameLoc::get(builder.getStringAttr(in.name()), fileLoc);
    currentTensor = in.name();
    FailureOr<TensorType> type = convertType(in.type());
    if (failed(type))
      return {};
    argTypes.push_back(*type);
    argNames.push_back(in.name());
  }

  loc = fileLoc;
  currentTensor.clear();
  auto func = func::FuncOp::create(builder, fileLoc, "main",
                                   builder.getFunctionType(argTypes, {}));
  Block *entry = func.addEntryBlock();
  builder.setInsertionPointToStart(entry);
  for (auto [k, name] : llvm::enumerate(argNames)) {
    Location argLoc = NameLoc::get(builder.getStringAttr(name), fileLoc);
    Value arg = entry->getArgument(k);
    arg.setLoc(argLoc);
    tensors.try_emplace(name, TensorInfo{arg, {},
                                         cast<TensorType>(arg.getType()), {},
                                         argLoc});
    func.setArgAttr(k, "onnx.name", builder.getStringAttr(name));
  }

  for (const auto &node : graph.node())
    if (importNode(node) == Status::Error)
      return {};
  currentNode = nullptr;

  SmallVector<Value> results;
  SmallVector<Type> resultTypes;
  for (const auto &out : graph.output()) {
    loc = NameLoc::get(builder.getStringAttr(out.name()), fileLoc);
    TensorInfo *info = lookup(out.name());
    if (!info) {
      emitError(loc) << "graph output '" << out.name() << "' is never defined";
      return {};
    }
    Value v = valueOf(info);
    if (!v) {
      emitError(loc) << "graph output '" << out.name()
                     << "' depends on a dynamic shape";
      return {};
    }
    results.push_back(v);
    resultTypes.push_back(v.getType());
  }
  func::ReturnOp::create(builder, fileLoc, results);
  func.setType(builder.getFunctionType(argTypes, resultTypes));
  for (auto [k, out] : llvm::enumerate(graph.output()))
    func.setResultAttr(k, "onnx.name", builder.getStringAttr(out.name()));

  // Constants materialised for folded computations may be unused.
  SmallVector<Operation *> ops;
  for (Operation &op : *entry)
    ops.push_back(&op);
  for (Operation *op : llvm::reverse(ops))
    if (op->getName().getDialectNamespace() != "onnx" &&
        isOpTriviallyDead(op))
      op->erase();

  if (failed(verify(*module))) {
    emitError(fileLoc) << "internal error: the imported module does not "
                          "verify";
    return {};
  }
  return module;
}

#include "ImportOps.inc"

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

static void prepareContext(MLIRContext *ctx) {
  ctx->getOrLoadDialect<func::FuncDialect>();
  ctx->getOrLoadDialect<tosa::TosaDialect>();
  ctx->getOrLoadDialect<kiln::KilnDialect>();
  // Nodes without a lowering are kept as `onnx.<OpType>` operations.
  ctx->allowUnregisteredDialects();
}

int64_t mlir::kiln::defaultStaticSize(StringRef dimName) {
  return dimName.contains_insensitive("batch") ? 1 : 128;
}

namespace {
/// The diagnostics of one conversion, held back until it is known whether
/// they matter.
struct HeldDiagnostics {
  SmallVector<std::tuple<Location, DiagnosticSeverity, std::string>> list;

  void replay(bool errors, bool others) const {
    for (const auto &[loc, severity, message] : list) {
      if (severity == DiagnosticSeverity::Error) {
        if (errors)
          emitError(loc) << message;
      } else if (others) {
        // The importer's other diagnostics are warnings.
        emitWarning(loc) << message;
      }
    }
  }
};
} // namespace

/// Converts the parsed `model` into a fresh report; with `held`, its
/// diagnostics go there instead of to the context's handler.
static OwningOpRef<ModuleOp>
convertModel(LoadedModel &model, StringRef bufferName, MLIRContext *ctx,
             const ImportOptions &options, ImportReport &report,
             HeldDiagnostics *held) {
  ++NumGraphsConverted;
  std::optional<ScopedDiagnosticHandler> hold;
  if (held)
    hold.emplace(ctx, [held](Diagnostic &diag) {
      held->list.push_back(
          {diag.getLocation(), diag.getSeverity(), diag.str()});
      return success();
    });
  Importer importer(ctx, bufferName, options, &report);
  return importer.run(model);
}

/// Imports `model`, with its unbound symbolic dimensions given static sizes
/// where ImportOptions::staticSizesOnFailure or staticSizesForOpaqueNodes
/// ask for them.
static OwningOpRef<ModuleOp> importModel(LoadedModel &model,
                                         StringRef bufferName, MLIRContext *ctx,
                                         const ImportOptions &options,
                                         ImportReport &report) {
  ImportOptions staticOptions = options;
  staticOptions.bindAllDims = true;
  HeldDiagnostics dynamicDiagnostics;
  OwningOpRef<ModuleOp> module = convertModel(
      model, bufferName, ctx, options, report,
      options.staticSizesOnFailure ? &dynamicDiagnostics : nullptr);
  if (module) {
    dynamicDiagnostics.replay(/*errors=*/false, /*others=*/true);
    if (!options.staticSizesForOpaqueNodes || report.unsupportedOps.empty())
      return module;
    HeldDiagnostics discarded;
    ImportReport staticReport;
    OwningOpRef<ModuleOp> staticModule = convertModel(
        model, bufferName, ctx, staticOptions, staticReport, &discarded);
    if (!staticModule || staticReport.boundDims.empty() ||
        staticReport.unsupportedOps.size() >= report.unsupportedOps.size())
      return module;
    staticReport.staticSizes = ImportReport::StaticSizes::ForOpaqueNodes;
    staticReport.opaqueWithDynamicSizes = report.unsupportedOps.size();
    report = std::move(staticReport);
    return staticModule;
  }
  if (!options.staticSizesOnFailure)
    return module;
  // A graph without symbolic dimensions fails the same way again: then only
  // the first attempt's errors are shown.
  HeldDiagnostics staticDiagnostics;
  ImportReport staticReport;
  module = convertModel(model, bufferName, ctx, staticOptions, staticReport,
                        &staticDiagnostics);
  if (!staticReport.boundDims.empty())
    staticDiagnostics.replay(/*errors=*/true, /*others=*/true);
  if (module && !staticReport.boundDims.empty()) {
    staticReport.staticSizes = ImportReport::StaticSizes::ForShapeComputations;
    report = std::move(staticReport);
    return module;
  }
  dynamicDiagnostics.replay(/*errors=*/true, /*others=*/false);
  return nullptr;
}

OwningOpRef<ModuleOp> mlir::kiln::importONNXBuffer(StringRef bytes,
                                                   StringRef bufferName,
                                                   MLIRContext *ctx,
                                                   ImportReport *report,
                                                   const ImportOptions &options) {
  prepareContext(ctx);
  Location fileLoc = FileLineColLoc::get(ctx, bufferName, 0, 0);
  LoadedModel model;
  std::string message;
  if (!loadModel(bytes, model, message)) {
    emitError(fileLoc) << "cannot import ONNX file '" << bufferName
                       << "': " << message;
    return {};
  }
  ++NumModelsRead;
  ImportReport localReport;
  return importModel(model, bufferName, ctx, options,
                     report ? *report : localReport);
}

OwningOpRef<ModuleOp> mlir::kiln::importONNXFile(StringRef path,
                                                 MLIRContext *ctx,
                                                 ImportReport *report,
                                                 const ImportOptions &options) {
  prepareContext(ctx);
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer) {
    emitError(FileLineColLoc::get(ctx, path, 0, 0))
        << "cannot open ONNX file '" << path
        << "': " << buffer.getError().message();
    return {};
  }
  return importONNXBuffer((*buffer)->getBuffer(), path, ctx, report, options);
}
