//===- Manifest.cpp - Kiln package manifest parser ------------------------===//
//
// Parses and validates manifest.json (format version 1). Every error names the
// file and the JSON path of the offending key, e.g.
//   pkg/manifest.json: kernels[0].args[3].kind: expected one of "pointer",
//   "i32", "i64", "f32", got "u8"
//
//===----------------------------------------------------------------------===//

#include "Manifest.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <sys/stat.h>

using json = nlohmann::json;

namespace kiln {
namespace rt {

const char *dtypeName(kiln_dtype dtype) {
  switch (dtype) {
  case KILN_DTYPE_F16:
    return "f16";
  case KILN_DTYPE_BF16:
    return "bf16";
  case KILN_DTYPE_F32:
    return "f32";
  case KILN_DTYPE_BOOL:
    return "i1";
  case KILN_DTYPE_NONE:
    break;
  }
  return "none";
}

const char *dimName(Dim dim) {
  switch (dim) {
  case Dim::Batch:
    return "batch";
  case Dim::QHeads:
    return "q_heads";
  case Dim::KvHeads:
    return "kv_heads";
  case Dim::QLen:
    return "q_len";
  case Dim::KvLen:
    return "kv_len";
  case Dim::HeadDim:
    return "head_dim";
  }
  return "?";
}

const char *tensorName(Tensor tensor) {
  static const char *names[] = {"q", "k", "v", "out", "mask", "bias"};
  return names[static_cast<int>(tensor)];
}

namespace {

std::optional<Dim> parseDimName(const std::string &name) {
  for (int i = 0; i < kNumDims; ++i)
    if (name == dimName(static_cast<Dim>(i)))
      return static_cast<Dim>(i);
  return std::nullopt;
}

std::string typeName(const json &value) {
  if (value.is_number_integer())
    return "integer";
  if (value.is_number_float())
    return "number";
  return value.type_name();
}

/// Thrown inside the parser only; converted to an Error at its entry point.
struct ParseFailure {
  kiln_status status;
  std::string message;
};

/// Typed access to a JSON node that knows its path for messages.
class Node {
public:
  Node(const json &value, std::string path, const std::string &file)
      : value(value), path(std::move(path)), file(file) {}

  [[noreturn]] void fail(const std::string &what,
                         kiln_status status = KILN_FORMAT_ERROR) const {
    throw ParseFailure{status, fmt::format("{}: {}{}{}", file, path,
                                           path.empty() ? "" : ": ", what)};
  }

  /// The path of the key `name` of this node.
  std::string childPath(const std::string &name) const {
    return path.empty() ? name : fmt::format("{}.{}", path, name);
  }

  const json &raw() const { return value; }
  bool isNull() const { return value.is_null(); }

  Node key(const std::string &name) const {
    if (!value.is_object())
      fail(fmt::format("expected an object, got {}", typeName(value)));
    auto it = value.find(name);
    if (it == value.end())
      fail(fmt::format("missing key \"{}\"", name));
    return Node(*it, childPath(name), file);
  }
  bool has(const std::string &name) const {
    return value.is_object() && value.contains(name);
  }
  /// The key's node, or a null node when absent.
  Node optionalKey(const std::string &name) const {
    static const json null;
    if (has(name))
      return key(name);
    return Node(null, childPath(name), file);
  }

  std::vector<Node> array() const {
    if (!value.is_array())
      fail(fmt::format("expected an array, got {}", typeName(value)));
    std::vector<Node> items;
    for (size_t i = 0; i < value.size(); ++i)
      items.emplace_back(value[i], fmt::format("{}[{}]", path, i), file);
    return items;
  }
  std::string string() const {
    if (!value.is_string())
      fail(fmt::format("expected a string, got {}", typeName(value)));
    return value.get<std::string>();
  }
  bool boolean() const {
    if (!value.is_boolean())
      fail(fmt::format("expected a boolean, got {}", typeName(value)));
    return value.get<bool>();
  }
  int64_t integer(int64_t min = INT64_MIN, int64_t max = INT64_MAX) const {
    if (!value.is_number_integer())
      fail(fmt::format("expected an integer, got {}", typeName(value)));
    if (value.is_number_unsigned() &&
        value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail("integer out of range");
    int64_t result = value.get<int64_t>();
    if (result < min || result > max)
      fail(fmt::format("expected an integer in [{}, {}], got {}", min, max,
                       result));
    return result;
  }
  double number() const {
    if (!value.is_number())
      fail(fmt::format("expected a number, got {}", typeName(value)));
    return value.get<double>();
  }
  std::optional<int64_t> optionalInteger(int64_t min = INT64_MIN) const {
    if (value.is_null())
      return std::nullopt;
    return integer(min);
  }
  /// One of `choices`; the message lists them.
  std::string oneOf(std::initializer_list<const char *> choices) const {
    std::string got = string();
    std::string list;
    for (const char *choice : choices) {
      if (got == choice)
        return got;
      fmt::format_to(std::back_inserter(list), "{}\"{}\"",
                     list.empty() ? "" : ", ", choice);
    }
    fail(fmt::format("expected one of {}, got \"{}\"", list, got));
  }

  const json &value;
  std::string path;
  const std::string &file;
};

kiln_dtype parseDtype(const Node &node, bool allowBool) {
  std::string name = allowBool ? node.oneOf({"f16", "bf16", "f32", "i1"})
                               : node.oneOf({"f16", "bf16", "f32"});
  if (name == "f16")
    return KILN_DTYPE_F16;
  if (name == "bf16")
    return KILN_DTYPE_BF16;
  if (name == "f32")
    return KILN_DTYPE_F32;
  return KILN_DTYPE_BOOL;
}

kiln_dtype parseOptionalDtype(const Node &node, bool allowBool) {
  if (node.isNull())
    return KILN_DTYPE_NONE;
  return parseDtype(node, allowBool);
}

/// Reads "mask" and "mask_dtype" of a kernel or site and checks they agree.
void parseMask(const Node &object, kiln_mask_kind &kind, kiln_dtype &dtype) {
  Node maskNode = object.key("mask");
  std::string mask = maskNode.oneOf({"none", "additive", "boolean"});
  Node dtypeNode = object.optionalKey("mask_dtype");
  dtype = parseOptionalDtype(dtypeNode, /*allowBool=*/true);
  if (mask == "none") {
    kind = KILN_MASK_NONE;
    if (dtype != KILN_DTYPE_NONE)
      dtypeNode.fail("must be null when \"mask\" is \"none\"");
  } else if (mask == "additive") {
    kind = KILN_MASK_ADDITIVE;
    if (dtype == KILN_DTYPE_NONE || dtype == KILN_DTYPE_BOOL)
      dtypeNode.fail("an additive mask needs a float dtype (f16, bf16, f32)");
  } else {
    kind = KILN_MASK_BOOLEAN;
    if (dtype == KILN_DTYPE_NONE)
      dtype = KILN_DTYPE_BOOL;
    if (dtype != KILN_DTYPE_BOOL)
      dtypeNode.fail("a boolean mask has dtype \"i1\"");
  }
}

void parseBias(const Node &object, bool &bias, kiln_dtype &dtype) {
  Node biasNode = object.optionalKey("bias");
  bias = biasNode.isNull() ? false : biasNode.boolean();
  Node dtypeNode = object.optionalKey("bias_dtype");
  dtype = parseOptionalDtype(dtypeNode, /*allowBool=*/false);
  if (!bias && dtype != KILN_DTYPE_NONE)
    dtypeNode.fail("must be null when \"bias\" is false");
}

/// Resolves a kernel parameter name to where its value comes from.
bool resolveArgName(const std::string &name, KernelArg &arg) {
  static const std::pair<const char *, Tensor> pointers[] = {
      {"q", Tensor::Q},     {"k", Tensor::K},       {"v", Tensor::V},
      {"out", Tensor::Out}, {"mask", Tensor::Mask}, {"bias", Tensor::Bias}};
  for (const auto &[pointerName, tensor] : pointers) {
    if (name == pointerName) {
      arg.source = ArgSource::Pointer;
      arg.tensor = tensor;
      return true;
    }
  }
  // A paged site's caches stand where K and V stand.
  if (name == "key_cache" || name == "value_cache") {
    arg.source = ArgSource::Pointer;
    arg.tensor = name == "key_cache" ? Tensor::K : Tensor::V;
    return true;
  }
  if (std::optional<Dim> dim = parseDimName(name)) {
    arg.source = ArgSource::Dim;
    arg.dim = *dim;
    return true;
  }
  if (name == "scale") {
    arg.source = ArgSource::Scale;
    return true;
  }
  if (name == "softcap") {
    arg.source = ArgSource::Softcap;
    return true;
  }
  if (name == "window") {
    arg.source = ArgSource::Window;
    return true;
  }
  static const char *pagedPointers[] = {"page_table", "kv_lens"};
  for (int i = 0; i < 2; ++i)
    if (name == pagedPointers[i]) {
      arg.source = ArgSource::PagedPointer;
      arg.paged = i;
      return true;
    }
  static const char *pagedDims[] = {"max_pages", "num_pages", "page_size"};
  for (int i = 0; i < 3; ++i)
    if (name == pagedDims[i]) {
      arg.source = ArgSource::PagedDim;
      arg.paged = i;
      return true;
    }
  if (name == "page_table_stride_batch") {
    arg.source = ArgSource::PageTableStride;
    return true;
  }
  if (name == "num_splits") {
    arg.source = ArgSource::NumSplits;
    return true;
  }
  if (name == "workspace") {
    arg.source = ArgSource::Workspace;
    return true;
  }
  for (auto [mapName, tensor] :
       {std::pair{"q_map", Tensor::Q}, std::pair{"k_map", Tensor::K},
        std::pair{"v_map", Tensor::V}})
    if (name == mapName) {
      arg.source = ArgSource::TensorMap;
      arg.tensor = tensor;
      return true;
    }
  // A paged cache's strides: {page, slot, head} of K and V.
  static const char *cacheAxes[] = {"page", "slot", "head"};
  for (auto [cacheName, tensor] :
       {std::pair{"key_cache", Tensor::K}, std::pair{"value_cache", Tensor::V}})
    for (int i = 0; i < 3; ++i)
      if (name == std::string(cacheName) + "_stride_" + cacheAxes[i]) {
        arg.source = ArgSource::Stride;
        arg.tensor = tensor;
        arg.axis = i;
        return true;
      }
  static const char *qkvAxes[] = {"batch", "head", "seq"};
  static const char *maskAxes[] = {"batch", "head", "q", "k"};
  for (const auto &[pointerName, tensor] : pointers) {
    std::string prefix = std::string(pointerName) + "_stride_";
    if (name.compare(0, prefix.size(), prefix) != 0)
      continue;
    std::string axis = name.substr(prefix.size());
    bool isMaskLike = tensor == Tensor::Mask || tensor == Tensor::Bias;
    int numAxes = isMaskLike ? 4 : 3;
    for (int i = 0; i < numAxes; ++i) {
      if (axis == (isMaskLike ? maskAxes[i] : qkvAxes[i])) {
        arg.source = ArgSource::Stride;
        arg.tensor = tensor;
        arg.axis = i;
        return true;
      }
    }
  }
  return false;
}

void parseArg(const Node &node, const Kernel &kernel, KernelArg &arg) {
  Node nameNode = node.key("name");
  arg.name = nameNode.string();
  if (!resolveArgName(arg.name, arg))
    nameNode.fail(fmt::format(
        "unknown kernel argument \"{}\" (this runtime knows q, k, v, out, "
        "mask, bias, the dimensions, scale, softcap, window and "
        "<tensor>_stride_*)",
        arg.name));
  Node kindNode = node.key("kind");
  std::string kind =
      kindNode.oneOf({"pointer", "i32", "i64", "f32", "tensor_map"});
  arg.kind = kind == "pointer"      ? ArgKind::Pointer
             : kind == "i32"        ? ArgKind::I32
             : kind == "i64"        ? ArgKind::I64
             : kind == "tensor_map" ? ArgKind::TensorMap
                                    : ArgKind::F32;
  auto expectKinds = [&](bool ok, const char *expected) {
    if (!ok)
      kindNode.fail(fmt::format("argument \"{}\" must be {}, got \"{}\"",
                                arg.name, expected, kind));
  };
  switch (arg.source) {
  case ArgSource::Pointer:
    expectKinds(arg.kind == ArgKind::Pointer, "\"pointer\"");
    if (arg.tensor == Tensor::Mask && kernel.mask == KILN_MASK_NONE)
      nameNode.fail("kernel takes a \"mask\" argument but its \"mask\" is "
                    "\"none\"");
    if (arg.tensor == Tensor::Bias && !kernel.bias)
      nameNode.fail("kernel takes a \"bias\" argument but its \"bias\" is "
                    "false");
    arg.dtype = parseOptionalDtype(node.optionalKey("dtype"),
                                   /*allowBool=*/arg.tensor == Tensor::Mask);
    break;
  case ArgSource::Scale:
  case ArgSource::Softcap:
    expectKinds(arg.kind == ArgKind::F32, "\"f32\"");
    break;
  case ArgSource::PagedPointer:
  case ArgSource::PagedDim:
  case ArgSource::PageTableStride:
    if (!kernel.paged)
      nameNode.fail(fmt::format(
          "argument \"{}\" belongs to paged-attention kernels", arg.name));
    expectKinds(arg.source == ArgSource::PagedPointer
                    ? arg.kind == ArgKind::Pointer
                    : arg.kind == ArgKind::I32 || arg.kind == ArgKind::I64,
                arg.source == ArgSource::PagedPointer ? "\"pointer\""
                                                      : "\"i32\" or \"i64\"");
    break;
  case ArgSource::NumSplits:
  case ArgSource::Workspace:
    if (!kernel.combine && !kernel.combineIndex)
      nameNode.fail(fmt::format("argument \"{}\" belongs to kernels that split "
                                "keys (with a \"split_combine\") and their "
                                "combine kernels",
                                arg.name));
    expectKinds(arg.source == ArgSource::Workspace
                    ? arg.kind == ArgKind::Pointer
                    : arg.kind == ArgKind::I32,
                arg.source == ArgSource::Workspace ? "\"pointer\"" : "\"i32\"");
    break;
  case ArgSource::TensorMap: {
    expectKinds(arg.kind == ArgKind::TensorMap, "\"tensor_map\"");
    if (kernel.targets.empty())
      nameNode.fail("tensor maps belong to kernels with \"targets\"");
    arg.dtype = parseOptionalDtype(node.optionalKey("dtype"),
                                   /*allowBool=*/false);
    Node boxNode = node.key("box");
    std::vector<Node> box = boxNode.array();
    if (box.size() != 2)
      boxNode.fail(fmt::format("expected 2 entries (columns, rows), got {}",
                               box.size()));
    arg.boxColumns = box[0].integer(1, 256);
    arg.boxRows = box[1].integer(1, 256);
    if (arg.boxColumns != 64)
      box[0].fail("a 128-byte swizzled box is 64 two-byte columns wide");
    Node swizzle = node.key("swizzle");
    if (swizzle.integer(0, 1024) != 128)
      swizzle.fail("only the 128-byte swizzle is supported");
    break;
  }
  case ArgSource::Dim:
  case ArgSource::Stride:
  case ArgSource::Window:
    expectKinds(arg.kind == ArgKind::I32 || arg.kind == ArgKind::I64,
                "\"i32\" or \"i64\"");
    if (arg.source == ArgSource::Stride &&
        ((arg.tensor == Tensor::Mask && kernel.mask == KILN_MASK_NONE) ||
         (arg.tensor == Tensor::Bias && !kernel.bias)))
      nameNode.fail(fmt::format("kernel takes \"{}\" but has no {}", arg.name,
                                tensorName(arg.tensor)));
    break;
  }
}

void parseGridRule(const Node &node, GridRule &rule) {
  if (node.raw().is_number_integer()) {
    rule.constant = node.integer(1, INT32_MAX);
    return;
  }
  auto parseDims = [](const Node &dimNode, std::vector<Dim> &dims) {
    std::vector<Node> names;
    if (dimNode.raw().is_array())
      names = dimNode.array();
    else
      names.push_back(dimNode);
    for (const Node &nameNode : names) {
      std::string name = nameNode.string();
      std::optional<Dim> dim = parseDimName(name);
      if (!dim)
        nameNode.fail(fmt::format("unknown dimension \"{}\" (expected batch, "
                                  "q_heads, kv_heads, q_len, kv_len or "
                                  "head_dim)",
                                  name));
      dims.push_back(*dim);
    }
  };
  if (node.has("dim")) {
    parseDims(node.key("dim"), rule.dims);
    Node perNode = node.optionalKey("per");
    if (!perNode.isNull())
      parseDims(perNode, rule.perDims);
  } else if (node.has("value")) {
    rule.constant = node.key("value").integer(1, INT32_MAX);
  } else {
    node.fail("a grid rule needs \"dim\" (or \"value\")");
  }
  Node divNode = node.optionalKey("ceil_div");
  if (!divNode.isNull())
    rule.ceilDiv = divNode.integer(1, INT32_MAX);
  Node splitsNode = node.optionalKey("times_splits");
  if (!splitsNode.isNull())
    rule.timesSplits = splitsNode.boolean();
}

void parseKernel(const Node &node, Kernel &kernel) {
  kernel.name = node.key("name").string();
  if (kernel.name.empty())
    node.key("name").fail("must not be empty");
  kernel.kind =
      node.key("kind").oneOf({"attention", "paged_attention", "split_combine"});
  kernel.paged = kernel.kind == "paged_attention";
  kernel.combine = kernel.kind == "split_combine";
  kernel.dtype = parseDtype(node.key("dtype"), /*allowBool=*/false);
  kernel.headDim = node.optionalKey("head_dim").optionalInteger(1);
  Node valueHeadDim = node.optionalKey("v_head_dim");
  kernel.valueHeadDim =
      valueHeadDim.isNull() ? kernel.headDim : valueHeadDim.optionalInteger(1);
  Node causal = node.optionalKey("causal");
  kernel.causal = causal.isNull() ? false : causal.boolean();
  kernel.window = node.optionalKey("window").optionalInteger(1);
  Node softcap = node.optionalKey("softcap");
  if (!softcap.isNull())
    kernel.softcap = static_cast<float>(softcap.number());
  if (!kernel.combine) {
    parseMask(node, kernel.mask, kernel.maskDtype);
    parseBias(node, kernel.bias, kernel.biasDtype);
  }
  // Resolved to an index once every kernel is read (see
  // resolveCombineKernels); marks the kernel as splitting keys meanwhile.
  Node combineNode = node.optionalKey("split_combine");
  if (!combineNode.isNull() && !kernel.combine) {
    if (combineNode.string().empty())
      combineNode.fail("must name a kernel");
    kernel.combineIndex = 0;
  }

  Node blockNode = node.key("block");
  std::vector<Node> block = blockNode.array();
  if (block.size() != 3)
    blockNode.fail(fmt::format("expected 3 entries, got {}", block.size()));
  static const int64_t blockLimits[3] = {1024, 1024, 64};
  int64_t threads = 1;
  for (int i = 0; i < 3; ++i) {
    kernel.block[i] = static_cast<int32_t>(block[i].integer(1, blockLimits[i]));
    threads *= kernel.block[i];
  }
  if (threads > 1024)
    blockNode.fail(fmt::format(
        "a block of {} threads is over CUDA's limit of 1024", threads));

  Node gridNode = node.key("grid");
  std::vector<Node> grid = gridNode.array();
  if (grid.empty() || grid.size() > 3)
    gridNode.fail(fmt::format("expected 1 to 3 entries, got {}", grid.size()));
  for (size_t i = 0; i < grid.size(); ++i) {
    parseGridRule(grid[i], kernel.grid[i]);
    if (kernel.grid[i].timesSplits && !kernel.combineIndex)
      grid[i].fail("\"times_splits\" needs a kernel that splits keys (with "
                   "a \"split_combine\")");
  }

  Node kvBlock = node.optionalKey("kv_block_size");
  if (!kvBlock.isNull())
    kernel.kvBlockSize = std::max<int64_t>(kvBlock.integer(0, 1 << 20), 1);
  Node staticShared = node.optionalKey("static_shared_bytes");
  kernel.staticSharedBytes =
      staticShared.isNull() ? 0 : staticShared.integer(0, 1 << 30);
  Node dynamicShared = node.optionalKey("dynamic_shared_bytes");
  kernel.dynamicSharedBytes =
      dynamicShared.isNull() ? 0 : dynamicShared.integer(0, 1 << 30);

  Node targetsNode = node.optionalKey("targets");
  if (!targetsNode.isNull()) {
    std::vector<Node> targets = targetsNode.array();
    if (targets.empty())
      targetsNode.fail("must name at least one chip");
    for (const Node &chip : targets)
      kernel.targets.push_back(chip.string());
  }

  Node argsNode = node.key("args");
  std::vector<Node> args = argsNode.array();
  if (args.size() > kMaxKernelArgs)
    argsNode.fail(fmt::format("more than {} arguments", kMaxKernelArgs));
  std::map<std::string, size_t> seen;
  for (const Node &argNode : args) {
    KernelArg arg;
    parseArg(argNode, kernel, arg);
    if (!seen.emplace(arg.name, seen.size()).second)
      argNode.key("name").fail(
          fmt::format("duplicate argument \"{}\"", arg.name));
    kernel.args.push_back(std::move(arg));
  }
  std::vector<const char *> requiredArgs = {"q", "k", "v", "out"};
  if (kernel.paged)
    requiredArgs = {"q",   "key_cache",  "value_cache",
                    "out", "page_table", "kv_lens"};
  if (kernel.combine)
    requiredArgs = {"workspace", "out", "num_splits"};
  else if (kernel.combineIndex)
    requiredArgs.insert(requiredArgs.end(), {"num_splits", "workspace"});
  for (const char *required : requiredArgs)
    if (!seen.count(required))
      argsNode.fail(
          fmt::format("missing the \"{}\" pointer argument", required));
  if (kernel.mask != KILN_MASK_NONE && !seen.count("mask"))
    argsNode.fail("the kernel has a mask but no \"mask\" argument");
  if (kernel.bias && !seen.count("bias"))
    argsNode.fail("the kernel has a bias but no \"bias\" argument");
}

/// Points each kernel that splits keys at its combine kernel, which must
/// reduce outputs of the same dtype and value head dim.
void resolveCombineKernels(const Node &kernelsNode,
                           std::vector<Kernel> &kernels) {
  std::vector<Node> nodes = kernelsNode.array();
  for (size_t i = 0; i < kernels.size(); ++i) {
    Kernel &kernel = kernels[i];
    if (!kernel.combineIndex)
      continue;
    Node nameNode = nodes[i].key("split_combine");
    std::string name = nameNode.string();
    size_t found = kernels.size();
    for (size_t j = 0; j < kernels.size(); ++j)
      if (kernels[j].name == name)
        found = j;
    if (found == kernels.size())
      nameNode.fail(fmt::format("no kernel named \"{}\"", name));
    const Kernel &combine = kernels[found];
    if (!combine.combine)
      nameNode.fail(
          fmt::format("kernel \"{}\" is not a \"split_combine\" kernel", name));
    if (combine.dtype != kernel.dtype ||
        combine.valueHeadDim != kernel.valueHeadDim)
      nameNode.fail(fmt::format("combine kernel \"{}\" reduces another dtype "
                                "or value head dim than \"{}\"",
                                name, kernel.name));
    kernel.combineIndex = found;
  }
}

void parseSite(const Node &node, const std::vector<Kernel> &kernels,
               Site &site) {
  site.name = node.key("name").string();
  if (site.name.empty())
    node.key("name").fail("must not be empty");
  Node kernelNode = node.key("kernel");
  site.kernelName = kernelNode.string();
  bool found = false;
  for (size_t i = 0; i < kernels.size() && !found; ++i) {
    if (kernels[i].name == site.kernelName) {
      site.kernelIndex = i;
      found = true;
    }
  }
  if (!found)
    kernelNode.fail(fmt::format("no kernel named \"{}\"", site.kernelName));
  const Kernel &kernel = kernels[site.kernelIndex];
  if (kernel.combine)
    kernelNode.fail(fmt::format(
        "kernel \"{}\" is a split-KV combine kernel, not an attention kernel",
        site.kernelName));
  if (!kernel.targets.empty())
    kernelNode.fail(fmt::format(
        "kernel \"{}\" is not in every target's PTX; a site's kernel must be",
        site.kernelName));
  Node wsNode = node.optionalKey("warp_specialized_kernel");
  if (!wsNode.isNull()) {
    std::string wsName = wsNode.string();
    for (size_t i = 0; i < kernels.size(); ++i)
      if (kernels[i].name == wsName)
        site.warpSpecializedIndex = i;
    if (!site.warpSpecializedIndex)
      wsNode.fail(fmt::format("no kernel named \"{}\"", wsName));
    const Kernel &ws = kernels[*site.warpSpecializedIndex];
    if (ws.kind != "attention" || ws.combineIndex || ws.targets.empty() ||
        ws.headDim != kernel.headDim ||
        ws.valueHeadDim != kernel.valueHeadDim || ws.dtype != kernel.dtype ||
        ws.causal != kernel.causal)
      wsNode.fail(fmt::format("kernel \"{}\" is not a target-specific "
                              "attention kernel of the site's kind",
                              wsName));
  }

  Node function = node.optionalKey("function");
  site.function = function.isNull() ? "" : function.string();
  Node location = node.optionalKey("location");
  site.location = location.isNull() ? "" : location.string();
  Node layoutNode = node.optionalKey("layout");
  std::string layout =
      layoutNode.isNull() ? "bhsd" : layoutNode.oneOf({"bhsd", "bshd"});
  site.layout = layout == "bhsd" ? KILN_LAYOUT_BHSD : KILN_LAYOUT_BSHD;
  Node dtypeNode = node.key("dtype");
  site.dtype = parseDtype(dtypeNode, /*allowBool=*/false);
  Node scaleNode = node.key("scale");
  double scale = scaleNode.number();
  if (!std::isfinite(scale))
    scaleNode.fail("must be finite");
  site.scale = static_cast<float>(scale);
  // The warp-specialised kernels fold the scale into their exponents' FMAs,
  // which takes a positive one (kilnc never pairs them otherwise).
  if (site.warpSpecializedIndex && !(site.scale > 0.0f))
    // Six decimals ({:f}), the form this message has always had.
    wsNode.fail(fmt::format("a warp-specialised kernel needs a positive "
                            "scale; the site's is {:f}",
                            site.scale));
  Node causalNode = node.optionalKey("causal");
  site.causal = causalNode.isNull() ? false : causalNode.boolean();
  site.window = node.optionalKey("window").optionalInteger(1);
  Node kindNode = node.optionalKey("kind");
  site.paged =
      !kindNode.isNull() &&
      kindNode.oneOf({"attention", "paged_attention"}) == "paged_attention";
  if (site.paged != kernel.paged)
    node.fail(fmt::format("site \"{}\" is {} but its kernel \"{}\" is {}",
                          site.name, site.paged ? "paged" : "not paged",
                          kernel.name, kernel.paged ? "paged" : "not"));
  if (site.paged)
    site.pageSize = node.optionalKey("page_size").optionalInteger(1);
  Node softcapNode = node.optionalKey("softcap");
  if (!softcapNode.isNull()) {
    double softcap = softcapNode.number();
    if (!(softcap > 0) || !std::isfinite(softcap))
      softcapNode.fail("must be a positive number");
    site.softcap = static_cast<float>(softcap);
  }
  for (int i = 0; i < kNumDims; ++i) {
    Dim dim = static_cast<Dim>(i);
    site.dims[i] = node.optionalKey(dimName(dim)).optionalInteger(1);
  }
  Node valueHeadDimNode = node.optionalKey("v_head_dim");
  site.valueHeadDim = valueHeadDimNode.isNull()
                          ? site.dims[static_cast<int>(Dim::HeadDim)]
                          : valueHeadDimNode.optionalInteger(1);
  parseMask(node, site.mask, site.maskDtype);
  parseBias(node, site.bias, site.biasDtype);

  // The site must be launchable with its kernel.
  auto mismatch = [&](const std::string &what) {
    node.fail(fmt::format("site \"{}\" and its kernel \"{}\" disagree on {}",
                          site.name, kernel.name, what));
  };
  if (site.dtype != kernel.dtype)
    mismatch(fmt::format("dtype ({} vs {})", dtypeName(site.dtype),
                         dtypeName(kernel.dtype)));
  const auto &headDim = site.dims[static_cast<int>(Dim::HeadDim)];
  if (kernel.headDim && headDim && *kernel.headDim != *headDim)
    mismatch(fmt::format("head_dim ({} vs {})", *headDim, *kernel.headDim));
  if (site.causal != kernel.causal)
    mismatch("causal");
  if (site.mask != kernel.mask || site.maskDtype != kernel.maskDtype)
    mismatch("the mask");
  if (site.bias != kernel.bias || site.biasDtype != kernel.biasDtype)
    mismatch("the bias");
  auto hasArg = [&](ArgSource source) {
    for (const KernelArg &arg : kernel.args)
      if (arg.source == source)
        return true;
    return false;
  };
  // A window or softcap is either compiled into the kernel (and then must be
  // the site's) or passed as an argument.
  if (!hasArg(ArgSource::Window) && site.window != kernel.window)
    mismatch("the window (the kernel has it compiled in and takes no "
             "\"window\" argument)");
  if (!hasArg(ArgSource::Softcap) && site.softcap != kernel.softcap)
    mismatch("softcap (the kernel has it compiled in and takes no "
             "\"softcap\" argument)");
  const auto &qHeads = site.dims[static_cast<int>(Dim::QHeads)];
  const auto &kvHeads = site.dims[static_cast<int>(Dim::KvHeads)];
  if (qHeads && kvHeads && *qHeads % *kvHeads != 0)
    node.fail(fmt::format("q_heads ({}) is not a multiple of kv_heads ({})",
                          *qHeads, *kvHeads));
}

bool parseChip(const std::string &chip, int &version, bool &archSpecific) {
  if (chip.size() < 5 || chip.compare(0, 3, "sm_") != 0)
    return false;
  size_t end = chip.size();
  archSpecific = chip.back() == 'a';
  if (archSpecific)
    --end;
  if (end <= 3 || end - 3 > 4)
    return false;
  version = 0;
  for (size_t i = 3; i < end; ++i) {
    if (chip[i] < '0' || chip[i] > '9')
      return false;
    version = version * 10 + (chip[i] - '0');
  }
  return version >= 10;
}

Error readFile(const std::string &path, std::string &contents,
               const std::string &what) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) {
    int err = errno;
    return {err == ENOENT ? KILN_NOT_FOUND : KILN_IO_ERROR,
            fmt::format("{} {}: {}", what, path, std::strerror(err))};
  }
  if (S_ISDIR(info.st_mode))
    return {KILN_IO_ERROR, fmt::format("{} {} is a directory", what, path)};
  std::ifstream stream(path, std::ios::binary);
  if (!stream)
    return {KILN_IO_ERROR, fmt::format("cannot open {} {}: {}", what, path,
                                       std::strerror(errno))};
  std::ostringstream buffer;
  buffer << stream.rdbuf();
  if (stream.bad())
    return {KILN_IO_ERROR, fmt::format("cannot read {} {}", what, path)};
  contents = buffer.str();
  return Error::ok();
}

std::string joinPath(const std::string &directory, const std::string &file) {
  if (directory.empty() || directory.back() == '/')
    return directory + file;
  return directory + "/" + file;
}

} // namespace

int selectTarget(const Manifest &manifest, int major, int minor) {
  int device = major * 10 + minor;
  // 1. Arch-specific PTX for exactly this device; 2. plain PTX for it;
  // 3. the newest plain PTX older than the device (PTX JITs forward).
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < manifest.targets.size(); ++i) {
      const Target &target = manifest.targets[i];
      if (target.smVersion == device && target.archSpecific == (pass == 0))
        return static_cast<int>(i);
    }
  }
  int best = -1;
  for (size_t i = 0; i < manifest.targets.size(); ++i) {
    const Target &target = manifest.targets[i];
    if (target.archSpecific || target.smVersion > device)
      continue;
    if (best < 0 || target.smVersion > manifest.targets[best].smVersion)
      best = static_cast<int>(i);
  }
  return best;
}

Error parseManifest(const std::string &text, const std::string &directory,
                    bool readPtx, Manifest &manifest) {
  std::string file = joinPath(directory, "manifest.json");
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error &error) {
    // nlohmann's message already says where ("at line 3, column 5").
    std::string what = error.what();
    size_t colon = what.find("]: ");
    return {KILN_FORMAT_ERROR,
            fmt::format("{}: not valid JSON: {}", file,
                        colon == std::string::npos ? what
                                                   : what.substr(colon + 3))};
  }
  try {
    Node top(root, "", file);
    if (!root.is_object())
      top.fail(fmt::format("expected a JSON object at the top level, got {}",
                           typeName(root)));
    Node formatNode = top.key("format");
    if (formatNode.string() != "kiln-package")
      formatNode.fail(fmt::format("expected \"kiln-package\", got \"{}\"",
                                  formatNode.string()));
    Node versionNode = top.key("format_version");
    int64_t version = versionNode.integer();
    if (version != KILN_MANIFEST_FORMAT_VERSION)
      versionNode.fail(fmt::format("format version {} is not supported (this "
                                   "runtime reads version {})",
                                   version, KILN_MANIFEST_FORMAT_VERSION),
                       KILN_UNSUPPORTED);
    manifest.directory = directory;
    Node producer = top.optionalKey("producer");
    manifest.producer = producer.isNull() ? "" : producer.string();
    Node source = top.optionalKey("source");
    manifest.source = source.isNull() ? "" : source.string();

    Node targetsNode = top.key("targets");
    std::vector<Node> targets = targetsNode.array();
    if (targets.empty())
      targetsNode.fail("a package needs at least one target");
    for (const Node &targetNode : targets) {
      Target target;
      Node chipNode = targetNode.key("chip");
      target.chip = chipNode.string();
      if (!parseChip(target.chip, target.smVersion, target.archSpecific))
        chipNode.fail(fmt::format(
            "expected a chip like \"sm_90a\" or \"sm_80\", got \"{}\"",
            target.chip));
      for (const Target &other : manifest.targets)
        if (other.chip == target.chip)
          chipNode.fail(fmt::format("duplicate target \"{}\"", target.chip));
      Node gridDependency = targetNode.optionalKey("grid_dependency");
      target.gridDependency =
          !gridDependency.isNull() && gridDependency.boolean();
      Node attentionGridDependency =
          targetNode.optionalKey("attention_grid_dependency");
      target.attentionGridDependency = !attentionGridDependency.isNull() &&
                                       attentionGridDependency.boolean();
      Node clusterSplits = targetNode.optionalKey("cluster_splits");
      if (!clusterSplits.isNull())
        target.clusterSplits = clusterSplits.integer(2, 16);
      Node ptxNode = targetNode.key("ptx");
      target.ptxFile = ptxNode.string();
      if (target.ptxFile.empty() || target.ptxFile.find('/') == 0)
        ptxNode.fail("expected a file name relative to the package");
      if (readPtx) {
        std::string path = joinPath(directory, target.ptxFile);
        if (Error error = readFile(path, target.ptx, "PTX file"))
          ptxNode.fail(error.message, error.status);
      }
      manifest.targets.push_back(std::move(target));
    }

    Node kernelsNode = top.key("kernels");
    for (const Node &kernelNode : kernelsNode.array()) {
      Kernel kernel;
      parseKernel(kernelNode, kernel);
      for (const Kernel &other : manifest.kernels)
        if (other.name == kernel.name)
          kernelNode.key("name").fail(
              fmt::format("duplicate kernel \"{}\"", kernel.name));
      manifest.kernels.push_back(std::move(kernel));
    }
    resolveCombineKernels(kernelsNode, manifest.kernels);
    Node sitesNode = top.key("sites");
    for (const Node &siteNode : sitesNode.array()) {
      Site site;
      parseSite(siteNode, manifest.kernels, site);
      for (const Site &other : manifest.sites)
        if (other.name == site.name)
          siteNode.key("name").fail(
              fmt::format("duplicate site \"{}\"", site.name));
      manifest.sites.push_back(std::move(site));
    }
  } catch (const ParseFailure &failure) {
    return {failure.status, failure.message};
  } catch (const json::exception &error) {
    return {KILN_FORMAT_ERROR, fmt::format("{}: {}", file, error.what())};
  }
  return Error::ok();
}

Error loadManifest(const std::string &directory, Manifest &manifest) {
  struct stat info;
  if (::stat(directory.c_str(), &info) != 0) {
    int err = errno;
    return {
        err == ENOENT ? KILN_NOT_FOUND : KILN_IO_ERROR,
        fmt::format("package directory {}: {}", directory, std::strerror(err))};
  }
  if (!S_ISDIR(info.st_mode))
    return {KILN_IO_ERROR,
            fmt::format("package path {} is not a directory", directory)};
  std::string text;
  if (Error error =
          readFile(joinPath(directory, "manifest.json"), text, "manifest"))
    return error;
  return parseManifest(text, directory, /*readPtx=*/true, manifest);
}

} // namespace rt
} // namespace kiln
