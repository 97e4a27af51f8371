//===- Report.cpp - The fusion report ---------------------------*- C++ -*-===//
//
// Sites from the kiln.attention ops of a fused module; unfused softmaxes from
// the fusion pass's remarks; opaque nodes from the importer.
//
//===----------------------------------------------------------------------===//

#include "kiln/Driver/Report.h"

#include "kiln/Conversion/KilnToGPU/Selection.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Dialect/Kiln/Transforms/Passes.h"
#include "kiln/Target/Package/Package.h"

#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace mlir;
using namespace mlir::kiln;

namespace {

/// The ONNX name of a graph input, where the importer gave it one.
std::optional<std::string> graphInputName(BlockArgument arg) {
  auto func = dyn_cast<FunctionOpInterface>(arg.getOwner()->getParentOp());
  if (auto name = func ? func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                           "onnx.name")
                       : StringAttr())
    return name.str();
  return std::nullopt;
}

/// The graph input a site's K or V cache comes from: K (or V) is the
/// concatenation along the sequence of an input (a past cache) and the new
/// keys, through layout ops; empty when it is not.
std::string pastInputOf(Value value) {
  for (int depth = 0; depth < 8 && value; ++depth) {
    Operation *def = value.getDefiningOp();
    if (!def)
      return "";
    if (auto concat = dyn_cast<tosa::ConcatOp>(def)) {
      Value past = concat.getInput1().front();
      auto arg = dyn_cast<BlockArgument>(past);
      if (!arg)
        return "";
      return graphInputName(arg).value_or("argument " +
                                          std::to_string(arg.getArgNumber()));
    }
    if (!isa<tosa::ReshapeOp, tosa::TransposeOp, tosa::CastOp>(def))
      return "";
    value = def->getOperand(0);
  }
  return "";
}

/// The element type's name in the report ("f32", "bf16", "i1" ...).
std::string elementName(Type type) {
  std::string text;
  llvm::raw_string_ostream os(text);
  getElementTypeOrSelf(type).print(os);
  return text;
}

llvm::json::Array shapeToJSON(Type type) {
  llvm::json::Array shape;
  if (auto shaped = dyn_cast<ShapedType>(type); shaped && shaped.hasRank())
    for (int64_t size : shaped.getShape())
      shape.push_back(sizeToJSON(size));
  return shape;
}

/// A layout op's step in a report's `transforms` list; null for any other
/// op.
std::optional<llvm::json::Object> layoutStep(Operation *op) {
  Type type = op->getResult(0).getType();
  if (auto transpose = dyn_cast<tosa::TransposeOp>(op)) {
    llvm::json::Array perms;
    for (int32_t axis : transpose.getPerms())
      perms.push_back(axis);
    return llvm::json::Object{{"op", "transpose"}, {"perms", std::move(perms)}};
  }
  if (isa<tosa::ReshapeOp>(op))
    return llvm::json::Object{{"op", "reshape"}, {"shape", shapeToJSON(type)}};
  if (isa<tosa::CastOp>(op))
    return llvm::json::Object{{"op", "cast"}, {"dtype", elementName(type)}};
  if (isa<tosa::LogicalNotOp>(op))
    return llvm::json::Object{{"op", "not"}};
  return std::nullopt;
}

/// The float value of a splat constant (through reshapes), if `value` is
/// one.
std::optional<double> splatConstant(Value value) {
  while (auto reshape = value.getDefiningOp<tosa::ReshapeOp>())
    value = reshape.getInput1();
  auto constant = value.getDefiningOp<tosa::ConstOp>();
  auto attr = constant ? dyn_cast<DenseFPElementsAttr>(constant.getValues())
                       : DenseFPElementsAttr();
  if (!attr || !attr.isSplat())
    return std::nullopt;
  return attr.getSplatValue<APFloat>().convertToDouble();
}

/// The value of a splat constant of floats or integers (through
/// reshapes), if `value` is one.
std::optional<double> splatNumber(Value value) {
  if (std::optional<double> fp = splatConstant(value))
    return fp;
  while (auto reshape = value.getDefiningOp<tosa::ReshapeOp>())
    value = reshape.getInput1();
  auto constant = value.getDefiningOp<tosa::ConstOp>();
  auto attr = constant ? dyn_cast<DenseIntElementsAttr>(constant.getValues())
                       : DenseIntElementsAttr();
  if (!attr || !attr.isSplat() || attr.getElementType().isInteger(1))
    return std::nullopt;
  return double(attr.getSplatValue<APInt>().getSExtValue());
}

/// The sizes a `tosa.const_shape` holds, if `value` is one.
std::optional<SmallVector<int64_t>> constShape(Value value) {
  auto shape = value.getDefiningOp<tosa::ConstShapeOp>();
  if (!shape)
    return std::nullopt;
  return llvm::to_vector(shape.getValues().getValues<int64_t>());
}

llvm::json::Array sizesToJSON(ArrayRef<int64_t> sizes) {
  llvm::json::Array array;
  for (int64_t size : sizes)
    array.push_back(sizeToJSON(size));
  return array;
}

/// A number for the report: JSON has no infinity or NaN, so those are
/// written as the strings "inf", "-inf" and "nan" (Python's float() reads
/// them back).
llvm::json::Value jsonNumber(double value) {
  if (std::isfinite(value))
    return value;
  if (std::isnan(value))
    return "nan";
  return value > 0 ? "inf" : "-inf";
}

/// A step the rewrite can replay from `op`'s chained input to its result:
/// a layout op, or an elementwise op whose other operands are splat
/// constants (x·c, x + c, select(x, a, b), 1/x, -x), a static slice or a
/// tile. Returns the step and the chained input; nothing for other ops.
std::optional<std::pair<llvm::json::Object, Value>> replayStep(Operation *op) {
  if (std::optional<llvm::json::Object> step = layoutStep(op))
    return std::pair(std::move(*step), op->getOperand(0));
  auto binary = [&](StringRef name, Value lhs,
                    Value rhs) -> std::optional<std::pair<llvm::json::Object, Value>> {
    for (auto [chain, other] : {std::pair(lhs, rhs), std::pair(rhs, lhs)})
      if (std::optional<double> constant = splatConstant(other);
          constant && chain.getType() == op->getResult(0).getType())
        return std::pair(
            llvm::json::Object{{"op", name}, {"value", jsonNumber(*constant)}},
            chain);
    return std::nullopt;
  };
  if (auto mul = dyn_cast<tosa::MulOp>(op))
    return binary("mul", mul.getInput1(), mul.getInput2());
  if (auto add = dyn_cast<tosa::AddOp>(op))
    return binary("add", add.getInput1(), add.getInput2());
  if (auto select = dyn_cast<tosa::SelectOp>(op)) {
    std::optional<double> onTrue = splatConstant(select.getOnTrue());
    std::optional<double> onFalse = splatConstant(select.getOnFalse());
    if (!onTrue || !onFalse ||
        cast<ShapedType>(select.getPred().getType()).getShape() !=
            cast<ShapedType>(select.getOutput().getType()).getShape())
      return std::nullopt;
    return std::pair(llvm::json::Object{{"op", "where"},
                                        {"true", jsonNumber(*onTrue)},
                                        {"false", jsonNumber(*onFalse)},
                                        {"dtype", elementName(op->getResult(0).getType())}},
                     select.getPred());
  }
  if (auto equal = dyn_cast<tosa::EqualOp>(op)) {
    // x == c, a boolean from a tensor of another type: a padding mask of
    // integers compared with 0 (JAX's where on an int mask writes `!= 0`).
    for (auto [chain, other] : {std::pair(equal.getInput1(), equal.getInput2()),
                                std::pair(equal.getInput2(), equal.getInput1())})
      if (std::optional<double> constant = splatNumber(other);
          constant && cast<ShapedType>(chain.getType()).getShape() ==
                          cast<ShapedType>(op->getResult(0).getType()).getShape())
        return std::pair(llvm::json::Object{{"op", "eq"}, {"value", jsonNumber(*constant)}},
                         chain);
    return std::nullopt;
  }
  if (isa<tosa::ReciprocalOp>(op))
    return std::pair(llvm::json::Object{{"op", "reciprocal"}}, op->getOperand(0));
  if (isa<tosa::NegateOp>(op))
    return std::pair(llvm::json::Object{{"op", "neg"}}, op->getOperand(0));
  if (auto slice = dyn_cast<tosa::SliceOp>(op)) {
    std::optional<SmallVector<int64_t>> start = constShape(slice.getStart());
    std::optional<SmallVector<int64_t>> size = constShape(slice.getSize());
    if (!start || !size)
      return std::nullopt;
    return std::pair(llvm::json::Object{{"op", "slice"},
                                        {"start", sizesToJSON(*start)},
                                        {"size", sizesToJSON(*size)}},
                     slice.getInput1());
  }
  if (auto tile = dyn_cast<tosa::TileOp>(op)) {
    std::optional<SmallVector<int64_t>> multiples = constShape(tile.getMultiples());
    if (!multiples)
      return std::nullopt;
    return std::pair(llvm::json::Object{{"op", "tile"},
                                        {"multiples", sizesToJSON(*multiples)}},
                     tile.getInput1());
  }
  return std::nullopt;
}

/// The graph values an operand of a site is computed from, and how: from
/// the operand up through the ops the rewrite can replay (replayStep), each
/// value the importer named on the way (an op's kiln.onnx_value, or a graph
/// input) is a source, nearest first, with the steps from it to the
/// operand in the order they apply (`operand = transforms(value)`).
/// `value` and `transforms` are the nearest source's; a null value: no
/// named value is reached through such ops (the site cannot be rewritten
/// mechanically). A caller whose graph lacks the nearest value (a value
/// its exporter made inside an op it decomposed) takes the next one.
llvm::json::Value describeOperand(Value operand) {
  llvm::json::Object entry{{"shape", shapeToJSON(operand.getType())},
                           {"dtype", elementName(operand.getType())}};
  SmallVector<llvm::json::Object> steps; // operand first
  llvm::json::Array sources;
  auto source = [&](std::string name) {
    llvm::json::Array transforms;
    for (const llvm::json::Object &step : llvm::reverse(steps))
      transforms.push_back(llvm::json::Object(step));
    sources.push_back(llvm::json::Object{{"value", std::move(name)},
                                         {"transforms", std::move(transforms)}});
  };
  Value value = operand;
  for (int depth = 0; depth < 32 && value; ++depth) {
    if (auto arg = dyn_cast<BlockArgument>(value)) {
      if (std::optional<std::string> name = graphInputName(arg))
        source(*name);
      break;
    }
    Operation *def = value.getDefiningOp();
    if (auto name = def->getAttrOfType<StringAttr>(kGraphValueAttrName)) {
      source(name.str());
    } else if (auto from =
                   def->getAttrOfType<StringAttr>(kGraphValueReshapedAttrName)) {
      // A named constant the importer reshaped by folding: the graph value
      // through that reshape.
      steps.push_back(llvm::json::Object{
          {"op", "reshape"}, {"shape", shapeToJSON(def->getResult(0).getType())}});
      source(from.str());
      break;
    }
    std::optional<std::pair<llvm::json::Object, Value>> step = replayStep(def);
    if (!step)
      break;
    steps.push_back(std::move(step->first));
    value = step->second;
  }
  if (sources.empty()) {
    entry["value"] = nullptr;
    entry["transforms"] = llvm::json::Array();
  } else {
    const llvm::json::Object *nearest = sources.front().getAsObject();
    entry["value"] = *nearest->get("value");
    entry["transforms"] = *nearest->get("transforms");
  }
  entry["sources"] = std::move(sources);
  return entry;
}

/// The graph values a site reads and the one it replaces.
llvm::json::Object describeOperands(AttentionOp op) {
  llvm::json::Object operands{{"query", describeOperand(op.getQuery())},
                              {"key", describeOperand(op.getKey())},
                              {"value", describeOperand(op.getValue())}};
  operands["mask"] =
      op.getMask() ? describeOperand(op.getMask()) : llvm::json::Value(nullptr);
  operands["bias"] =
      op.getBias() ? describeOperand(op.getBias()) : llvm::json::Value(nullptr);
  // Only where the op takes a run-time scale.
  if (Value factor = op.getScaleFactor())
    operands["scale_factor"] = describeOperand(factor);
  return operands;
}

/// The graph value a site's result replaced, with the layout ops that turn
/// the result into it (`value = transforms(result)`): the fusion's record on
/// the op, the opset-23 Attention node's own output, or the first named
/// value along a chain of single-use layout ops after the result (a reshape
/// or cast the fusion added, or the importer's reshape of a 3-D Attention
/// node). A null value: none was found (not rewritable mechanically).
llvm::json::Value describeOutput(AttentionOp op) {
  llvm::json::Object entry{{"shape", shapeToJSON(op.getResult().getType())},
                           {"dtype", elementName(op.getResult().getType())}};
  auto name = op->getAttrOfType<StringAttr>(kReplacesAttrName);
  if (!name)
    name = op->getAttrOfType<StringAttr>(kGraphValueAttrName);
  llvm::json::Array transforms;
  Value value = op.getResult();
  for (int depth = 0; !name && depth < 8 && value.hasOneUse(); ++depth) {
    Operation *user = *value.user_begin();
    std::optional<llvm::json::Object> step = layoutStep(user);
    if (!step || user->getOperand(0) != value)
      break;
    transforms.push_back(std::move(*step));
    name = user->getAttrOfType<StringAttr>(kGraphValueAttrName);
    value = user->getResult(0);
  }
  if (!name)
    transforms.clear();
  entry["value"] = name ? llvm::json::Value(name.str()) : llvm::json::Value(nullptr);
  entry["transforms"] = std::move(transforms);
  return entry;
}

llvm::json::Object describeSite(AttentionOp op) {
  llvm::json::Array nodes;
  for (const std::string &name : nodeNames(op.getLoc()))
    nodes.push_back(name);
  llvm::json::Object site = siteAttributesToJSON(op);
  site["nodes"] = std::move(nodes);
  // Q, K and V's element type: the result's, or f8E4M3FN for an FP8 site
  // (Q, K and V dequantised in the graph, folded with their descales).
  site["operand_dtype"] = elementName(op.getQuery().getType());
  // The probabilities' e4m3 quantisation scale, where the graph has one.
  if (std::optional<APFloat> probScale = op.getProbScale())
    site["prob_scale"] = probScale->convertToDouble();
  // Source lines where the input records them (StableHLO from JAX).
  std::vector<std::string> source = sourceLines(op.getLoc());
  if (!source.empty())
    site["source"] = llvm::json::Array(source);
  llvm::json::Array maskShape;
  if (Value mask = op.getMask())
    for (int64_t size : cast<ShapedType>(mask.getType()).getShape())
      maskShape.push_back(sizeToJSON(size));
  site["mask_shape"] = op.getMask() ? llvm::json::Value(std::move(maskShape))
                                    : llvm::json::Value(nullptr);
  // Sites that read a KV cache input (a past concatenated with the new
  // keys): decode steps of a decoder exported with its cache.
  std::string pastKey = pastInputOf(op.getKey());
  std::string pastValue = pastInputOf(op.getValue());
  site["kv_cache"] =
      !pastKey.empty() && !pastValue.empty()
          ? llvm::json::Value(llvm::json::Object{{"past_key", pastKey},
                                                 {"past_value", pastValue}})
          : llvm::json::Value(nullptr);
  auto masking = op->getAttrOfType<StringAttr>(kMaskingAttrName);
  site["masking"] =
      masking ? llvm::json::Value(masking.str()) : llvm::json::Value(nullptr);
  site["operands"] = describeOperands(op);
  site["output"] = describeOutput(op);
  return site;
}

/// The kernel each target runs `op` on and why: {chip: {kernel, variant,
/// ..., why}}, or {chip: {error}} where no kernel can run it as asked.
llvm::json::Object describeKernelChoices(
    AttentionOp op,
    ArrayRef<std::pair<std::string, ConvertKilnToGPUOptions>> targets) {
  llvm::json::Object byChip;
  for (const auto &[chip, options] : targets) {
    std::string error;
    FailureOr<KernelChoiceFacts> choice = failure();
    {
      ScopedDiagnosticHandler keepError(op->getContext(), [&](Diagnostic &d) {
        if (d.getSeverity() == DiagnosticSeverity::Error && error.empty())
          error = d.str();
        return success();
      });
      choice = describeKernelChoice(op, options);
    }
    if (failed(choice)) {
      byChip[chip] = llvm::json::Object{{"error", error}};
      continue;
    }
    auto optional = [](const std::optional<std::string> &value) {
      return value ? llvm::json::Value(*value) : llvm::json::Value(nullptr);
    };
    llvm::json::Array why;
    for (const std::string &reason : choice->why)
      why.push_back(reason);
    llvm::json::Object entry{
        {"kernel", choice->kernel},
        {"variant", choice->variant},
        {"rows_per_block", choice->rowsPerBlock},
        {"kv_block_size", choice->kvBlockSize},
        {"split_kv", choice->splitKV},
        {"launch_dependents", choice->launchDependents},
        {"cluster_splits", choice->clusterSplits},
        {"wait_for_grid", choice->waitForGrid},
        {"combine_kernel", optional(choice->combineKernel)},
        {"warp_specialized_kernel", optional(choice->warpSpecializedKernel)},
        {"why", std::move(why)}};
    if (!choice->from.empty()) {
      entry["blocks_per_sm"] = choice->blocksPerSM;
      entry["from"] = choice->from;
    }
    byChip[chip] = std::move(entry);
  }
  return byChip;
}

std::string orDash(const llvm::json::Value *value) {
  if (!value || value->kind() == llvm::json::Value::Null)
    return "-";
  if (std::optional<int64_t> integer = value->getAsInteger())
    return std::to_string(*integer);
  if (std::optional<double> number = value->getAsNumber())
    return llvm::formatv("{0}", llvm::format("%g", *number)).str();
  if (std::optional<bool> flag = value->getAsBoolean())
    return *flag ? "yes" : "no";
  if (std::optional<StringRef> text = value->getAsString())
    return text->str();
  return "?";
}

} // namespace

llvm::json::Object FusionReport::toJSON(ModuleOp fused) const {
  llvm::json::Array sites;
  llvm::json::Array kernels;
  fused.walk([&](AttentionOp op) {
    if (!kernelTargets.empty())
      kernels.push_back(llvm::json::Object{
          {"site", static_cast<int64_t>(sites.size())},
          {"targets", describeKernelChoices(op, kernelTargets)}});
    sites.push_back(describeSite(op));
  });
  llvm::json::Array unfusedArray;
  for (const UnfusedSoftmax &entry : unfused) {
    llvm::json::Object object{
        {"node", entry.node},
        {"reason", entry.reason},
        {"stopped_at", entry.stoppedAt.empty()
                           ? llvm::json::Value(nullptr)
                           : llvm::json::Value(entry.stoppedAt)}};
    if (!entry.source.empty())
      object["source"] = llvm::json::Array(entry.source);
    unfusedArray.push_back(std::move(object));
  }
  llvm::json::Array opaqueArray;
  for (const OpaqueNode &entry : opaque)
    opaqueArray.push_back(llvm::json::Object{{"node", entry.node},
                                             {"op_type", entry.opType},
                                             {"reason", entry.reason}});
  llvm::json::Object bound;
  for (const auto &[name, size] : boundDims)
    bound[name] = size;
  llvm::json::Array finite;
  for (const std::string &name : finiteInputs)
    finite.push_back(name);
  return llvm::json::Object{{"sites", std::move(sites)},
                            {"kernels", std::move(kernels)},
                            {"unfused", std::move(unfusedArray)},
                            {"opaque", std::move(opaqueArray)},
                            {"bound_dims", std::move(bound)},
                            {"finite_inputs", std::move(finite)}};
}

void FusionReport::printText(ModuleOp fused, llvm::raw_ostream &os) const {
  llvm::json::Object json = toJSON(fused);
  const llvm::json::Array &sites = *json.getArray("sites");
  os << llvm::formatv("Fused attention sites: {0}\n", sites.size());
  if (!sites.empty()) {
    os << llvm::formatv("  {0,-3} {1,-5} {2,-4} {3,-4} {4,-5} {5,-5} "
                        "{6,-10} {7,-6} {8,-6} {9,-7} {10,-8} {11,-4} {12}\n",
                        "#", "dtype", "Hq", "Hkv", "D", "Sq", "scale", "causal",
                        "window", "softcap", "mask", "bias", "nodes");
    for (auto [index, siteValue] : llvm::enumerate(sites)) {
      const llvm::json::Object &site = *siteValue.getAsObject();
      const llvm::json::Array &nodes = *site.getArray("nodes");
      std::string nodeText;
      if (!nodes.empty()) {
        nodeText = nodes.front().getAsString()->str();
        if (nodes.size() > 1)
          nodeText += llvm::formatv(" … {0} ({1} nodes)",
                                    *nodes.back().getAsString(), nodes.size())
                          .str();
      }
      os << llvm::formatv(
          "  {0,-3} {1,-5} {2,-4} {3,-4} {4,-5} {5,-5} {6,-10} {7,-6} "
          "{8,-6} {9,-7} {10,-8} {11,-4} {12}\n",
          index, orDash(site.get("dtype")), orDash(site.get("q_heads")),
          orDash(site.get("kv_heads")), orDash(site.get("head_dim")),
          orDash(site.get("q_len")), orDash(site.get("scale")),
          orDash(site.get("causal")), orDash(site.get("window")),
          orDash(site.get("softcap")), orDash(site.get("mask")),
          orDash(site.get("bias")), nodeText);
    }
  }
  for (auto [index, siteValue] : llvm::enumerate(sites)) {
    const llvm::json::Object &site = *siteValue.getAsObject();
    bool perHead = site.getString("scale_factor") == "per_head";
    if (!site.getBoolean("scale_factor").value_or(false) && !perHead)
      continue;
    std::optional<StringRef> from;
    if (const llvm::json::Object *operands = site.getObject("operands"))
      if (const llvm::json::Object *factor = operands->getObject("scale_factor"))
        from = factor->getString("value");
    os << llvm::formatv("  site {0} scale: {1} times a run-time factor{2}{3}\n",
                        index, orDash(site.get("scale")),
                        perHead ? " of each query head" : "",
                        from ? (" (" + *from + ")").str() : std::string());
  }
  for (auto [index, siteValue] : llvm::enumerate(sites))
    if (std::optional<StringRef> masking =
            siteValue.getAsObject()->getString("masking"))
      os << llvm::formatv("  site {0} masks: {1}\n", index, *masking);
  for (auto [index, siteValue] : llvm::enumerate(sites))
    if (const llvm::json::Object *cache =
            siteValue.getAsObject()->getObject("kv_cache"))
      os << llvm::formatv("  site {0} reads a KV cache: {1}, {2}\n", index,
                          *cache->getString("past_key"),
                          *cache->getString("past_value"));
  if (!finiteInputs.empty())
    os << "Inputs declared finite (the fusion assumed it): "
       << llvm::join(finiteInputs, ", ") << "\n";
  os << llvm::formatv("Softmaxes left unfused: {0}\n", unfused.size());
  for (const UnfusedSoftmax &entry : unfused)
    os << "  " << (entry.node.empty() ? "<unnamed>" : entry.node) << ": "
       << entry.reason
       << (entry.stoppedAt.empty() ? "" : " (at " + entry.stoppedAt + ")")
       << (entry.source.empty() ? "" : " [" + entry.source.front() + "]")
       << "\n";
  if (!opaque.empty()) {
    os << llvm::formatv("Nodes kept opaque by the importer: {0}\n",
                        opaque.size());
    for (const OpaqueNode &entry : opaque)
      os << "  " << entry.node << " (" << entry.opType << "): " << entry.reason
         << "\n";
  }
}
