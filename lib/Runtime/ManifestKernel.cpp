//===- ManifestKernel.cpp - Reading a manifest's kernels ------------------===//
//
// The "kernels" of manifest.json: each kernel's launch rules (block, grid),
// shared memory, and its argument list, every argument resolved by name to
// where its value comes from at launch.
//
//===----------------------------------------------------------------------===//

#include "ManifestParser.h"

#include <algorithm>
#include <iterator>
#include <map>

namespace kiln {
namespace rt {

const char *const kAppendArgNames[kNumAppendArgs] = {
#define KILN_APPEND_ARG(name, kind) #name,
#include "kiln/Runtime/PagedAppendArgs.def"
};

namespace {
/// The .def's kinds, spelt as it spells them.
namespace append_kinds {
constexpr ArgKind pointer = ArgKind::Pointer;
constexpr ArgKind i32 = ArgKind::I32;
constexpr ArgKind i64 = ArgKind::I64;
} // namespace append_kinds
} // namespace

const ArgKind kAppendArgKinds[kNumAppendArgs] = {
#define KILN_APPEND_ARG(name, kind) append_kinds::kind,
#include "kiln/Runtime/PagedAppendArgs.def"
};

namespace parser {

namespace {

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
  // The log-sum-exp, written by a forward that trains and read by the
  // backward.
  if (name == "lse") {
    arg.source = ArgSource::Lse;
    return true;
  }
  // The backward's tensors and their strides.
  static const char *gradTensors[] = {"grad_out", "delta", "grad_q", "grad_k",
                                      "grad_v"};
  for (int i = 0; i < 5; ++i) {
    if (name == gradTensors[i]) {
      arg.source = ArgSource::GradPointer;
      arg.paged = i;
      return true;
    }
    static const char *axes[] = {"batch", "head", "seq"};
    for (int axis = 0; axis < 3 && i != 1; ++axis)
      if (name == std::string(gradTensors[i]) + "_stride_" + axes[axis]) {
        arg.source = ArgSource::GradStride;
        arg.paged = i;
        arg.axis = axis;
        return true;
      }
  }
  // A site's run-time scale.
  if (name == "scale_factor") {
    arg.source = ArgSource::ScaleFactor;
    return true;
  }
  // An FP8 cache's dequantisation scales.
  if (name == "k_scale" || name == "v_scale") {
    arg.source = ArgSource::KvScale;
    arg.paged = name == "k_scale" ? 0 : 1;
    return true;
  }
  // Scalars named by themselves alone.
  static const std::pair<const char *, ArgSource> scalars[] = {
      {"scale", ArgSource::Scale},
      {"softcap", ArgSource::Softcap},
      {"window", ArgSource::Window},
      {"page_table_stride_batch", ArgSource::PageTableStride},
      {"num_splits", ArgSource::NumSplits},
      {"workspace", ArgSource::Workspace}};
  for (const auto &[scalarName, source] : scalars) {
    if (name == scalarName) {
      arg.source = source;
      return true;
    }
  }
  static const char *pagedPointers[] = {"page_table", "kv_lens", "q_offsets",
                                        "plan", "kv_offsets"};
  for (int i = 0; i < 5; ++i)
    if (name == pagedPointers[i]) {
      arg.source = ArgSource::PagedPointer;
      arg.paged = i;
      return true;
    }
  static const char *pagedDims[] = {"max_pages", "num_pages", "page_size",
                                    "sequences"};
  for (int i = 0; i < 4; ++i)
    if (name == pagedDims[i]) {
      arg.source = ArgSource::PagedDim;
      arg.paged = i;
      return true;
    }
  for (auto [mapName, tensor] :
       {std::pair{"q_map", Tensor::Q}, std::pair{"k_map", Tensor::K},
        std::pair{"v_map", Tensor::V}, std::pair{"mask_map", Tensor::Mask},
        std::pair{"bias_map", Tensor::Bias}})
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

/// An argument of a paged-append kernel: one of kAppendArgNames, the
/// pointers "pointer", the rest "i32" or "i64"; a pointer's dtype, where
/// given, what it points to (the new keys and values the kernel's dtype,
/// the caches its cache dtype, the scales f32).
void parseAppendArg(const Node &node, const Kernel &kernel, KernelArg &arg) {
  Node nameNode = node.key("name");
  arg.name = nameNode.string();
  arg.source = ArgSource::Append;
  arg.paged = kNumAppendArgs;
  for (int i = 0; i < kNumAppendArgs; ++i)
    if (arg.name == kAppendArgNames[i])
      arg.paged = i;
  if (arg.paged == kNumAppendArgs)
    nameNode.fail(fmt::format("unknown argument \"{}\" of a paged_append "
                              "kernel",
                              arg.name));
  Node kindNode = node.key("kind");
  std::string kind = kindNode.oneOf({"pointer", "i32", "i64"});
  arg.kind = kind == "pointer" ? ArgKind::Pointer
             : kind == "i32"   ? ArgKind::I32
                               : ArgKind::I64;
  bool pointer = kAppendArgKinds[arg.paged] == ArgKind::Pointer;
  if (pointer != (arg.kind == ArgKind::Pointer))
    kindNode.fail(
        fmt::format("argument \"{}\" must be {}, got \"{}\"", arg.name,
                    pointer ? "\"pointer\"" : "\"i32\" or \"i64\"", kind));
  if (!pointer)
    return;
  Node dtypeNode = node.optionalKey("dtype");
  arg.dtype = parseOptionalDtype(dtypeNode, /*allowBool=*/false,
                                 /*allowFp8=*/true);
  kiln_dtype expected = KILN_DTYPE_NONE;
  switch (static_cast<AppendArg>(arg.paged)) {
  case AppendArg::new_keys:
  case AppendArg::new_values:
    expected = kernel.dtype;
    break;
  case AppendArg::key_cache:
  case AppendArg::value_cache:
    expected = kernel.cacheDtype;
    break;
  case AppendArg::k_scale:
  case AppendArg::v_scale:
    expected = KILN_DTYPE_F32;
    break;
  default:
    break;
  }
  if (expected != KILN_DTYPE_NONE && arg.dtype != KILN_DTYPE_NONE &&
      arg.dtype != expected)
    dtypeNode.fail(fmt::format("argument \"{}\" of kernel \"{}\" points to "
                               "{}, not {}",
                               arg.name, kernel.name, dtypeName(expected),
                               dtypeName(arg.dtype)));
}

void parseArg(const Node &node, const Kernel &kernel, KernelArg &arg) {
  if (kernel.append)
    return parseAppendArg(node, kernel, arg);
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
                                   /*allowBool=*/arg.tensor == Tensor::Mask,
                                   /*allowFp8=*/kernel.paged);
    // A paged kernel's caches hold its cache dtype.
    if (kernel.paged && (arg.tensor == Tensor::K || arg.tensor == Tensor::V) &&
        arg.dtype != KILN_DTYPE_NONE && arg.dtype != kernel.cacheDtype)
      node.key("dtype").fail(
          fmt::format("argument \"{}\" of kernel \"{}\" points to {} (its "
                      "\"cache_dtype\"), not {}",
                      arg.name, kernel.name, dtypeName(kernel.cacheDtype),
                      dtypeName(arg.dtype)));
    break;
  case ArgSource::KvScale: {
    if (!kernel.paged || kernel.cacheDtype != KILN_DTYPE_F8E4M3)
      nameNode.fail(fmt::format("argument \"{}\" belongs to paged-attention "
                                "kernels of f8e4m3 caches",
                                arg.name));
    expectKinds(arg.kind == ArgKind::Pointer, "\"pointer\"");
    Node dtypeNode = node.optionalKey("dtype");
    arg.dtype = parseOptionalDtype(dtypeNode, /*allowBool=*/false);
    if (arg.dtype != KILN_DTYPE_NONE && arg.dtype != KILN_DTYPE_F32)
      dtypeNode.fail(fmt::format("argument \"{}\" points to f32 scales, not "
                                 "{}",
                                 arg.name, dtypeName(arg.dtype)));
    break;
  }
  case ArgSource::ScaleFactor:
    if (kernel.paged)
      nameNode.fail(fmt::format("argument \"{}\" belongs to attention "
                                "kernels, not paged ones",
                                arg.name));
    expectKinds(arg.kind == ArgKind::Pointer, "\"pointer\"");
    break;
  case ArgSource::Scale:
  case ArgSource::Softcap:
    expectKinds(arg.kind == ArgKind::F32, "\"f32\"");
    break;
  case ArgSource::Lse:
  case ArgSource::GradPointer:
    expectKinds(arg.kind == ArgKind::Pointer, "\"pointer\"");
    break;
  case ArgSource::GradStride:
    expectKinds(arg.kind == ArgKind::I32 || arg.kind == ArgKind::I64,
                "\"i32\" or \"i64\"");
    break;
  case ArgSource::PagedPointer:
  case ArgSource::PagedDim:
  case ArgSource::PageTableStride: {
    // Kernels of packed queries take q_offsets, the plan and the sequence
    // count; packed sequences' kv_offsets, paged ones the rest.
    bool packedArg = (arg.source == ArgSource::PagedPointer &&
                      arg.paged >= 2) ||
                     (arg.source == ArgSource::PagedDim && arg.paged == 3);
    bool keyOffsets = arg.source == ArgSource::PagedPointer && arg.paged == 4;
    if (packedArg && !kernel.ragged)
      nameNode.fail(fmt::format(
          "argument \"{}\" belongs to kernels of packed queries "
          "(\"ragged\")",
          arg.name));
    if (keyOffsets && kernel.paged)
      nameNode.fail(fmt::format("argument \"{}\" belongs to kernels of "
                                "packed sequences, not paged ones",
                                arg.name));
    if (!packedArg && !kernel.paged)
      nameNode.fail(fmt::format(
          "argument \"{}\" belongs to paged-attention kernels", arg.name));
    expectKinds(arg.source == ArgSource::PagedPointer
                    ? arg.kind == ArgKind::Pointer
                    : arg.kind == ArgKind::I32 || arg.kind == ArgKind::I64,
                arg.source == ArgSource::PagedPointer ? "\"pointer\""
                                                      : "\"i32\" or \"i64\"");
    break;
  }
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
    // A staged mask's tile may be of bytes (a boolean mask).
    bool term = arg.tensor == Tensor::Mask || arg.tensor == Tensor::Bias;
    arg.dtype = parseOptionalDtype(node.optionalKey("dtype"),
                                   /*allowBool=*/arg.tensor == Tensor::Mask);
    Node boxNode = node.key("box");
    std::vector<Node> box = boxNode.array();
    if (box.size() != 2)
      boxNode.fail(fmt::format("expected 2 entries (columns, rows), got {}",
                               box.size()));
    arg.boxColumns = box[0].integer(1, 256);
    arg.boxRows = box[1].integer(1, 256);
    Node swizzle = node.key("swizzle");
    arg.swizzleBytes = swizzle.integer(0, 1024);
    if (!term && arg.boxColumns != 64)
      box[0].fail("a 128-byte swizzled box is 64 two-byte columns wide");
    if (!term && arg.swizzleBytes != 128)
      swizzle.fail("only the 128-byte swizzle is supported");
    if (term && arg.swizzleBytes != 64 && arg.swizzleBytes != 128)
      swizzle.fail("a staged mask or bias tile is swizzled by 64 or 128 bytes");
    // A swizzled row is the box's columns of the term's element.
    if (term && arg.dtype != KILN_DTYPE_NONE &&
        arg.boxColumns * kiln_dtype_size(arg.dtype) != arg.swizzleBytes)
      box[0].fail(fmt::format("a row of {} {} elements is not the {}-byte "
                              "swizzle",
                              arg.boxColumns, dtypeName(arg.dtype),
                              arg.swizzleBytes));
    break;
  }
  case ArgSource::Append:
    break;
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
  if (node.has("dim") && node.key("dim").raw().is_string() &&
      node.key("dim").string() == "plan_items") {
    rule.planItems = true;
  } else if (node.has("dim") && node.key("dim").raw().is_string() &&
             node.key("dim").string() == "multiprocessors") {
    rule.multiprocessors = true;
    Node upTo = node.optionalKey("up_to_kv_len");
    if (!upTo.isNull())
      rule.multiprocessorsUpToKvLen = upTo.integer(1, INT32_MAX);
  } else if (node.has("dim")) {
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

} // namespace

void parseKernel(const Node &node, Kernel &kernel) {
  kernel.name = node.key("name").string();
  if (kernel.name.empty())
    node.key("name").fail("must not be empty");
  kernel.kind = node.key("kind").oneOf(
      {"attention", "paged_attention", "split_combine", "paged_append",
       "attention_grad_q", "attention_grad_kv"});
  kernel.grad = kernel.kind == "attention_grad_q" ||
                kernel.kind == "attention_grad_kv";
  kernel.paged = kernel.kind == "paged_attention";
  kernel.combine = kernel.kind == "split_combine";
  kernel.append = kernel.kind == "paged_append";
  Node ragged = node.optionalKey("ragged");
  kernel.ragged = !ragged.isNull() && ragged.boolean();
  if (kernel.ragged && kernel.kind == "paged_append")
    ragged.fail("a \"paged_append\" kernel takes no packed queries");
  Node rows = node.optionalKey("rows_per_block");
  if (!rows.isNull())
    kernel.rowsPerBlock = rows.integer(1, 1 << 16);
  kernel.dtype = parseDtype(node.key("dtype"), /*allowBool=*/false);
  kernel.cacheDtype = parseCacheDtype(
      node, kernel.dtype, fmt::format("kernel \"{}\": ", kernel.name));
  if (kernel.cacheDtype == KILN_DTYPE_F8E4M3 && !kernel.paged && !kernel.append)
    node.key("cache_dtype")
        .fail("only \"paged_attention\" and \"paged_append\" kernels have "
              "f8e4m3 caches");
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
  if (kernel.append && (!kernel.headDim || !kernel.valueHeadDim))
    node.fail("a \"paged_append\" kernel needs \"head_dim\"");
  // Resolved with the combine kernels; the paged kernel's append kernel.
  Node appendNode = node.optionalKey("paged_append");
  if (!appendNode.isNull()) {
    if (!kernel.paged)
      appendNode.fail("only a \"paged_attention\" kernel has an append "
                      "kernel");
    if (appendNode.string().empty())
      appendNode.fail("must name a kernel");
    kernel.appendIndex = 0;
  }
  if (!kernel.combine && !kernel.append) {
    parseMask(node, kernel.mask, kernel.maskDtype);
    parseBias(node, kernel.bias, kernel.biasDtype);
    // Packed sequences have no [batch, q_heads, q_len, kv_len] to index.
    if (kernel.ragged && (kernel.mask != KILN_MASK_NONE || kernel.bias))
      node.fail("a kernel of packed queries takes no mask or bias");
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
  // An append kernel's grid is one block a new token.
  if (kernel.append &&
      (grid.size() != 3 || !grid[0].raw().is_object() ||
       !grid[0].has("dim") || !grid[0].key("dim").raw().is_string() ||
       grid[0].key("dim").string() != "total_new" || grid[0].raw().size() != 1 ||
       !grid[1].raw().is_number_integer() || grid[1].integer(1, 1) != 1 ||
       !grid[2].raw().is_number_integer() || grid[2].integer(1, 1) != 1))
    gridNode.fail("a \"paged_append\" kernel's grid is [{\"dim\": "
                  "\"total_new\"}, 1, 1]");
  for (size_t i = 0; i < grid.size() && !kernel.append; ++i) {
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
  if (kernel.ragged)
    requiredArgs.insert(requiredArgs.end(), {"q_offsets", "plan", "sequences"});
  if (kernel.ragged && !kernel.paged)
    requiredArgs.push_back("kv_offsets");
  for (size_t i = 0; i < 3; ++i) {
    if (kernel.grid[i].planItems && !kernel.ragged)
      grid[i].fail("\"plan_items\" is the grid of a ragged kernel only");
    // (Its work items are those of the other attention kernels' grid.)
    if (kernel.grid[i].multiprocessors &&
        (i != 0 || kernel.kind != "attention" || kernel.ragged ||
         kernel.paged || kernel.targets.empty() || kernel.rowsPerBlock <= 0))
      grid[i].fail("\"multiprocessors\" is grid x of a target-specific "
                   "attention kernel only");
  }
  if (kernel.append) {
    // The kernels of float caches ignore the scales (and those written
    // before FP8 caches do not take them).
    requiredArgs.clear();
    for (int i = 0; i < kNumAppendArgs; ++i) {
      auto name = static_cast<AppendArg>(i);
      if ((name != AppendArg::k_scale && name != AppendArg::v_scale) ||
          kernel.cacheDtype == KILN_DTYPE_F8E4M3)
        requiredArgs.push_back(kAppendArgNames[i]);
    }
  } else if (kernel.combine && kernel.ragged)
    // A ragged launch's combine writes the rows its sequences own.
    requiredArgs = {"workspace", "out", "num_splits", "q_offsets",
                    "sequences"};
  else if (kernel.combine)
    requiredArgs = {"workspace", "out", "num_splits"};
  else if (kernel.combineIndex)
    requiredArgs.insert(requiredArgs.end(), {"num_splits", "workspace"});
  if (kernel.grad)
    requiredArgs.insert(requiredArgs.end(), {"lse", "grad_out", "delta",
                                             "grad_q", "grad_k", "grad_v"});
  if (kernel.paged && kernel.cacheDtype == KILN_DTYPE_F8E4M3)
    requiredArgs.insert(requiredArgs.end(), {"k_scale", "v_scale"});
  for (const char *required : requiredArgs)
    if (!seen.count(required))
      argsNode.fail(
          fmt::format("missing the \"{}\" pointer argument", required));
  if (kernel.mask != KILN_MASK_NONE && !seen.count("mask"))
    argsNode.fail("the kernel has a mask but no \"mask\" argument");
  if (kernel.bias && !seen.count("bias"))
    argsNode.fail("the kernel has a bias but no \"bias\" argument");
}

namespace {

/// The index of the kernel that `nameNode` (kernel `kernel`'s `key`) names,
/// which must be of kind `kind` and hold `kernel`'s dtype and head dims
/// (only the value head dim for a combine kernel; an append kernel also
/// its cache dtype).
size_t resolveNamed(const Node &nameNode, const Kernel &kernel,
                    const std::vector<Kernel> &kernels, const char *kind) {
  std::string name = nameNode.string();
  size_t found = kernels.size();
  for (size_t j = 0; j < kernels.size(); ++j)
    if (kernels[j].name == name)
      found = j;
  if (found == kernels.size())
    nameNode.fail(fmt::format("no kernel named \"{}\"", name));
  const Kernel &named = kernels[found];
  if (named.kind != kind)
    nameNode.fail(
        fmt::format("kernel \"{}\" is not a \"{}\" kernel", name, kind));
  bool headDims = named.append ? named.headDim == kernel.headDim : true;
  if (named.dtype != kernel.dtype ||
      named.valueHeadDim != kernel.valueHeadDim || !headDims)
    nameNode.fail(fmt::format("kernel \"{}\" holds another dtype or head "
                              "dims than \"{}\"",
                              name, kernel.name));
  if (named.append && named.cacheDtype != kernel.cacheDtype)
    nameNode.fail(fmt::format("kernel \"{}\" writes {} caches but \"{}\" "
                              "reads {} ones",
                              name, dtypeName(named.cacheDtype), kernel.name,
                              dtypeName(kernel.cacheDtype)));
  return found;
}

} // namespace

void resolveCombineKernels(const Node &kernelsNode,
                           std::vector<Kernel> &kernels) {
  std::vector<Node> nodes = kernelsNode.array();
  for (size_t i = 0; i < kernels.size(); ++i) {
    Kernel &kernel = kernels[i];
    if (kernel.combineIndex) {
      kernel.combineIndex = resolveNamed(nodes[i].key("split_combine"), kernel,
                                         kernels, "split_combine");
      // A ragged combine reads the launch's q_offsets, which only ragged
      // launches have. (A ragged kernel may name a plain combine: packages
      // written before the ragged combine, which also wrote the rows past
      // the last sequence.)
      if (kernels[*kernel.combineIndex].ragged && !kernel.ragged)
        nodes[i].key("split_combine")
            .fail(fmt::format("kernel \"{}\" is not ragged but its combine "
                              "kernel \"{}\" is",
                              kernel.name,
                              kernels[*kernel.combineIndex].name));
    }
    if (kernel.appendIndex)
      kernel.appendIndex = resolveNamed(nodes[i].key("paged_append"), kernel,
                                        kernels, "paged_append");
  }
}

} // namespace parser
} // namespace rt
} // namespace kiln
