//===- Package.cpp - Kiln package emission ----------------------*- C++ -*-===//
//
// Builds manifest.json from the generated kernels and the tagged attention
// sites, pulls PTX out of gpu.binary, and writes the package directory.
//
//===----------------------------------------------------------------------===//

#include "kiln/Target/Package/Package.h"

#include "kiln/Conversion/KilnToGPU/KilnToGPU.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::kiln;

namespace {

llvm::json::Value shapeValue(Value value) {
  if (!value)
    return nullptr;
  llvm::json::Array dims;
  for (int64_t size : cast<ShapedType>(value.getType()).getShape())
    dims.push_back(sizeToJSON(size));
  return std::move(dims);
}

llvm::json::Value elementTypeValue(Value value) {
  if (!value)
    return nullptr;
  return getElementTypeName(cast<ShapedType>(value.getType()).getElementType());
}

std::string locationText(Location loc) {
  std::string text;
  llvm::raw_string_ostream os(text);
  loc.print(os);
  return text;
}

/// An optional integer or float attribute as JSON: null when absent.
llvm::json::Value optionalToJSON(std::optional<uint64_t> value) {
  return value ? llvm::json::Value(int64_t(*value))
               : llvm::json::Value(nullptr);
}
llvm::json::Value optionalToJSON(std::optional<APFloat> value) {
  return value ? llvm::json::Value(double(value->convertToFloat()))
               : llvm::json::Value(nullptr);
}

/// An argument's "dtype" entry: none, or its value (null included).
using DtypeEntry = std::optional<llvm::json::Value>;

/// The argument ABI of a kernel from its facts (names and kinds), each
/// argument with the "dtype" entry `dtypeOf(name, kind)` gives it.
llvm::json::Array
argsToJSON(DictionaryAttr info,
           llvm::function_ref<DtypeEntry(StringRef, StringRef)> dtypeOf) {
  llvm::json::Array args;
  auto names = info.getAs<ArrayAttr>("arg_names");
  auto kinds = info.getAs<ArrayAttr>("arg_kinds");
  for (auto [nameAttr, kindAttr] : llvm::zip(names, kinds)) {
    StringRef name = cast<StringAttr>(nameAttr).getValue();
    StringRef kind = cast<StringAttr>(kindAttr).getValue();
    llvm::json::Object arg{{"name", name}, {"kind", kind}};
    if (DtypeEntry dtype = dtypeOf(name, kind))
      arg["dtype"] = std::move(*dtype);
    args.push_back(std::move(arg));
  }
  return args;
}

/// How a kernel launches, from its kernel facts: block, rows per block, key
/// block, grid rules, shared memory and the argument ABI.
void addLaunchFacts(llvm::json::Object &kernel, DictionaryAttr info,
                    llvm::json::Array grid, llvm::json::Array args) {
  int64_t threads = info.getAs<IntegerAttr>("threads_per_block").getInt();
  kernel["block"] = llvm::json::Array{threads, 1, 1};
  kernel["rows_per_block"] = info.getAs<IntegerAttr>("rows_per_block").getInt();
  kernel["kv_block_size"] = info.getAs<IntegerAttr>("kv_block_size").getInt();
  kernel["grid"] = std::move(grid);
  kernel["static_shared_bytes"] =
      info.getAs<IntegerAttr>("static_shared_bytes").getInt();
  kernel["dynamic_shared_bytes"] =
      info.getAs<IntegerAttr>("dynamic_shared_bytes").getInt();
  kernel["args"] = std::move(args);
}

/// Grid z of an attention kernel: the batch, times the launch's split count
/// for kernels that split keys; and the kernel's combine kernel (null when it
/// does not split).
void addSplitFacts(llvm::json::Object &kernel, DictionaryAttr info,
                   llvm::json::Array &grid) {
  auto combine = info.getAs<StringAttr>("combine_kernel");
  llvm::json::Object batch{{"dim", "batch"}, {"ceil_div", 1}};
  if (combine)
    batch["times_splits"] = true;
  grid.push_back(std::move(batch));
  kernel["split_combine"] =
      combine ? llvm::json::Value(combine.str()) : llvm::json::Value(nullptr);
}

/// Grid z of a ragged kernel (its packed rows are one sequence): the
/// splits alone; and the kernel's combine kernel.
void addRaggedSplitFacts(llvm::json::Object &kernel, DictionaryAttr info,
                         llvm::json::Array &grid) {
  kernel["ragged"] = true;
  auto combine = info.getAs<StringAttr>("combine_kernel");
  llvm::json::Object z{{"value", 1}};
  if (combine)
    z["times_splits"] = true;
  grid.push_back(std::move(z));
  kernel["split_combine"] =
      combine ? llvm::json::Value(combine.str()) : llvm::json::Value(nullptr);
}

/// The split-KV combine kernel: one block a row of the output.
llvm::json::Object describeCombineKernel(gpu::GPUFuncOp func,
                                         DictionaryAttr info) {
  std::string dtype = info.getAs<StringAttr>("dtype").str();
  llvm::json::Array args =
      argsToJSON(info, [&](StringRef name, StringRef) -> DtypeEntry {
        if (name == "out")
          return llvm::json::Value(dtype);
        return std::nullopt;
      });
  int64_t rowsPerBlock = info.getAs<IntegerAttr>("rows_per_block").getInt();
  llvm::json::Array grid;
  grid.push_back(llvm::json::Object{
      {"dim", llvm::json::Array{"batch", "q_heads", "q_len"}},
      {"ceil_div", rowsPerBlock}});
  grid.push_back(1);
  grid.push_back(1);
  llvm::json::Object kernel{
      {"name", func.getName()},
      {"kind", "split_combine"},
      {"dtype", dtype},
      {"v_head_dim", info.getAs<IntegerAttr>("v_head_dim").getInt()},
  };
  // Ragged launches' combine: it takes q_offsets and the sequence count.
  if (info.get("ragged"))
    kernel["ragged"] = true;
  addLaunchFacts(kernel, info, std::move(grid), std::move(args));
  return kernel;
}

/// The paged cache's append kernel: one block a new token.
llvm::json::Object describeAppendKernel(gpu::GPUFuncOp func,
                                        DictionaryAttr info) {
  std::string dtype = info.getAs<StringAttr>("dtype").str();
  auto cacheAttr = info.getAs<StringAttr>("cache_dtype");
  std::string cacheDtype = cacheAttr ? cacheAttr.str() : dtype;
  llvm::json::Array args =
      argsToJSON(info, [&](StringRef name, StringRef) -> DtypeEntry {
        if (name == "new_keys" || name == "new_values")
          return llvm::json::Value(dtype);
        if (name == "key_cache" || name == "value_cache")
          return llvm::json::Value(cacheDtype);
        if (name == "k_scale" || name == "v_scale")
          return llvm::json::Value("f32");
        return std::nullopt;
      });
  llvm::json::Array grid;
  grid.push_back(llvm::json::Object{{"dim", "total_new"}});
  grid.push_back(1);
  grid.push_back(1);
  llvm::json::Object kernel{
      {"name", func.getName()},
      {"kind", "paged_append"},
      {"dtype", dtype},
      {"cache_dtype", cacheDtype},
      {"head_dim", info.getAs<IntegerAttr>("head_dim").getInt()},
      {"v_head_dim", info.getAs<IntegerAttr>("v_head_dim").getInt()},
  };
  addLaunchFacts(kernel, info, std::move(grid), std::move(args));
  return kernel;
}

/// The attributes a kernel is specialised on, as the first site using it
/// states them (every site sharing a kernel shares them).
llvm::json::Object describeKernel(gpu::GPUFuncOp func, DictionaryAttr info,
                                  AttentionOp site) {
  llvm::json::Array args =
      argsToJSON(info, [&](StringRef name, StringRef kind) -> DtypeEntry {
        if (kind != "pointer" || name == "kv_offsets" ||
            name == "q_offsets" || name == "plan")
          return std::nullopt;
        if (name == "mask")
          return elementTypeValue(site.getMask());
        if (name == "bias")
          return elementTypeValue(site.getBias());
        return llvm::json::Value(getElementTypeName(site.getElementType()));
      });
  int64_t rowsPerBlock = info.getAs<IntegerAttr>("rows_per_block").getInt();
  // A kernel that packs a KV head's query heads into its rows has one block
  // per rowsPerBlock (query, head) pairs of a group, and grid y over KV
  // heads.
  auto packed = info.getAs<BoolAttr>("packs_query_heads");
  llvm::json::Array grid;
  if (site.isPacked()) {
    // Packed sequences: the blocks are the plan's items.
    grid.push_back(llvm::json::Object{{"dim", "plan_items"}});
    grid.push_back(llvm::json::Object{{"dim", "kv_heads"}, {"ceil_div", 1}});
  } else if (packed && packed.getValue()) {
    grid.push_back(
        llvm::json::Object{{"dim", llvm::json::Array{"q_len", "q_heads"}},
                           {"per", "kv_heads"},
                           {"ceil_div", rowsPerBlock}});
    grid.push_back(llvm::json::Object{{"dim", "kv_heads"}, {"ceil_div", 1}});
  } else {
    grid.push_back(
        llvm::json::Object{{"dim", "q_len"}, {"ceil_div", rowsPerBlock}});
    grid.push_back(llvm::json::Object{{"dim", "q_heads"}, {"ceil_div", 1}});
  }
  llvm::json::Object kernel{
      {"name", func.getName()},
      {"kind", "attention"},
      {"dtype", getElementTypeName(site.getElementType())},
      {"head_dim", site.getHeadDim()},
      {"v_head_dim", site.getValueHeadDim()},
      {"causal", site.getCausal()},
      {"window", windowToJSON(site)},
      {"window_right", windowRightToJSON(site)},
      {"softcap", softcapToJSON(site)},
      {"mask", site.getMaskKind()},
      {"mask_dtype", elementTypeValue(site.getMask())},
      {"bias", bool(site.getBias())},
      {"bias_dtype", elementTypeValue(site.getBias())},
  };
  // f32 sites on TF32 tensor cores say so (allow-tf32).
  if (auto math = info.getAs<StringAttr>("math"))
    kernel["math"] = math.str();
  // A kernel in some targets' PTX only (the warp-specialised sm_90a
  // kernel), whose tensor-map arguments say what the runtime encodes: the
  // tensor, the box (64 columns, a 128-byte swizzle row, by the block's
  // query rows or the key tile) and the swizzle.
  if (auto targets = info.getAs<ArrayAttr>("targets")) {
    llvm::json::Array chips;
    llvm::json::Object schedules;
    auto warp = info.getAs<DictionaryAttr>("warp_schedule");
    for (Attribute chip : targets) {
      chips.push_back(cast<StringAttr>(chip).str());
      if (!warp)
        continue;
      // The warp-specialised kernel's schedule on that chip.
      schedules[cast<StringAttr>(chip).str()] = llvm::json::Object{
          {"variant", "warp-specialized"},
          {"blocks_per_sm", 1},
          {"consumer_warpgroups",
           warp.getAs<IntegerAttr>("consumers").getInt()},
          {"kv_block_size", warp.getAs<IntegerAttr>("kv_block_size").getInt()},
          {"overlap", warp.getAs<BoolAttr>("overlap").getValue()},
          {"ping_pong", warp.getAs<BoolAttr>("ping_pong").getValue()},
          {"from", warp.getAs<StringAttr>("from").getValue()}};
      if (warp.get("persistent"))
        schedules[cast<StringAttr>(chip).str()].getAsObject()->try_emplace(
            "persistent", true);
      if (auto keys = warp.getAs<IntegerAttr>("persistent_up_to_kv_len"))
        schedules[cast<StringAttr>(chip).str()].getAsObject()->try_emplace(
            "persistent_up_to_kv_len", keys.getInt());
    }
    kernel["targets"] = std::move(chips);
    if (warp)
      kernel["schedule"] = std::move(schedules);
  }
  for (llvm::json::Value &value : args) {
    llvm::json::Object &arg = *value.getAsObject();
    if (arg.getString("kind") != "tensor_map")
      continue;
    StringRef tensor = arg.getString("name")->split('_').first;
    int64_t rows = tensor == "q"
                       ? info.getAs<IntegerAttr>("rows_per_block").getInt()
                       : info.getAs<IntegerAttr>("kv_block_size").getInt();
    arg["tensor"] = tensor.str();
    arg["dtype"] = getElementTypeName(site.getElementType());
    arg["box"] = llvm::json::Array{64, rows};
    arg["swizzle"] = 128;
  }
  if (site.isPacked())
    addRaggedSplitFacts(kernel, info, grid);
  else
    addSplitFacts(kernel, info, grid);
  // A persistent kernel: a block an SM (as many as the device has), each
  // walking the work items the grid above would have had.
  auto warp = info.getAs<DictionaryAttr>("warp_schedule");
  if (warp && warp.get("persistent")) {
    llvm::json::Object x{{"dim", "multiprocessors"}};
    if (auto keys = warp.getAs<IntegerAttr>("persistent_up_to_kv_len"))
      x["up_to_kv_len"] = keys.getInt();
    grid = llvm::json::Array{std::move(x), 1, 1};
  }
  addLaunchFacts(kernel, info, std::move(grid), std::move(args));
  return kernel;
}

/// The kernel of a kiln.paged_attention site: its ABI from the kernel
/// facts; the grid packs a KV head's query heads as the attention kernels.
llvm::json::Object describePagedKernel(gpu::GPUFuncOp func, DictionaryAttr info,
                                       PagedAttentionOp site) {
  std::string dtype = getElementTypeName(site.getElementType());
  std::string cacheDtype = site.isFp8Cache() ? "f8e4m3" : dtype;
  llvm::json::Array args =
      argsToJSON(info, [&](StringRef name, StringRef kind) -> DtypeEntry {
        if (name == "key_cache" || name == "value_cache")
          return llvm::json::Value(cacheDtype);
        if (name == "k_scale" || name == "v_scale")
          return llvm::json::Value("f32");
        if (kind == "pointer" && name != "page_table" && name != "kv_lens" &&
            name != "q_offsets" && name != "plan")
          return llvm::json::Value(dtype);
        return std::nullopt;
      });
  int64_t rowsPerBlock = info.getAs<IntegerAttr>("rows_per_block").getInt();
  bool ragged = site.isRagged();
  llvm::json::Array grid;
  // A ragged kernel's blocks are its plan's items.
  if (ragged)
    grid.push_back(llvm::json::Object{{"dim", "plan_items"}});
  else
    grid.push_back(
        llvm::json::Object{{"dim", llvm::json::Array{"q_len", "q_heads"}},
                           {"per", "kv_heads"},
                           {"ceil_div", rowsPerBlock}});
  grid.push_back(llvm::json::Object{{"dim", "kv_heads"}, {"ceil_div", 1}});
  auto queryType = cast<RankedTensorType>(site.getQuery().getType());
  auto valueType = cast<RankedTensorType>(site.getValueCache().getType());
  PagedAttentionOp op = site;
  llvm::json::Object kernel{
      {"name", func.getName()},
      {"kind", "paged_attention"},
      {"dtype", dtype},
      {"cache_dtype", cacheDtype},
      {"head_dim", queryType.getDimSize(ragged ? 2 : 3)},
      {"v_head_dim", valueType.getDimSize(3)},
      {"causal", site.getCausal()},
      {"window", optionalToJSON(op.getWindow())},
      {"softcap", optionalToJSON(op.getSoftcap())},
      {"mask", "none"},
      {"mask_dtype", nullptr},
      {"bias", false},
      {"bias_dtype", nullptr},
  };
  // The kernel that writes new keys and values into these caches.
  if (auto append = info.getAs<StringAttr>("append_kernel"))
    kernel["paged_append"] = append.str();
  if (ragged)
    addRaggedSplitFacts(kernel, info, grid);
  else
    addSplitFacts(kernel, info, grid);
  addLaunchFacts(kernel, info, std::move(grid), std::move(args));
  return kernel;
}

/// A kiln.paged_attention site: the attention attributes, its sizes (null
/// where dynamic) and the page size.
llvm::json::Object describePagedSite(PagedAttentionOp op, StringRef siteName,
                                     StringRef kernelName) {
  auto func = op->getParentOfType<FunctionOpInterface>();
  auto queryType = cast<RankedTensorType>(op.getQuery().getType());
  auto keyType = cast<RankedTensorType>(op.getKeyCache().getType());
  auto valueType = cast<RankedTensorType>(op.getValueCache().getType());
  auto tableType = cast<RankedTensorType>(op.getPageTable().getType());
  auto decodeOf = op->getAttrOfType<StringAttr>(kDecodeOfAttrName);
  // Ragged sites pack their queries [total_q, Hq, D]: their launches see
  // the packed rows as one sequence of total_q (q_len) queries, and the
  // batch is the launch's.
  bool ragged = op.isRagged();
  int64_t dimAxis = ragged ? 2 : 3;
  llvm::json::Object site{
      {"name", siteName},
      {"kernel", kernelName},
      {"kind", "paged_attention"},
      {"function", func ? func.getName().str() : std::string()},
      {"location", locationText(op.getLoc())},
      {"layout", "bhsd"},
      {"dtype", getElementTypeName(op.getElementType())},
      {"cache_dtype", op.isFp8Cache()
                          ? std::string("f8e4m3")
                          : getElementTypeName(op.getElementType())},
      {"kv_scales",
       !op.isFp8Cache() ? llvm::json::Value(nullptr)
       : cast<RankedTensorType>(op.getKScale().getType()).getDimSize(0) == 1
           ? llvm::json::Value("per_tensor")
           : llvm::json::Value("per_kv_head")},
      {"scale", double(op.getScale().convertToFloat())},
      {"causal", op.getCausal()},
      {"window", optionalToJSON(op.getWindow())},
      {"softcap", optionalToJSON(op.getSoftcap())},
      {"batch", ragged ? llvm::json::Value(nullptr)
                       : sizeToJSON(queryType.getDimSize(0))},
      {"q_heads", sizeToJSON(queryType.getDimSize(1))},
      {"kv_heads", sizeToJSON(keyType.getDimSize(2))},
      {"q_len", sizeToJSON(queryType.getDimSize(ragged ? 0 : 2))},
      {"kv_len", nullptr},
      {"head_dim", sizeToJSON(queryType.getDimSize(dimAxis))},
      {"v_head_dim", sizeToJSON(valueType.getDimSize(3))},
      {"page_size", sizeToJSON(keyType.getDimSize(1))},
      {"num_pages", sizeToJSON(keyType.getDimSize(0))},
      {"max_pages", sizeToJSON(tableType.getDimSize(1))},
      {"mask", "none"},
      {"bias", false},
      {"decode_of", decodeOf ? llvm::json::Value(decodeOf.str())
                             : llvm::json::Value(nullptr)}};
  if (ragged)
    site["ragged"] = true;
  return site;
}

llvm::json::Object describeSite(AttentionOp op, StringRef siteName,
                                StringRef kernelName) {
  auto func = op->getParentOfType<FunctionOpInterface>();
  llvm::json::Object site = siteAttributesToJSON(op);
  site["name"] = siteName;
  site["kernel"] = kernelName;
  site["function"] = func ? func.getName().str() : std::string();
  site["location"] = locationText(op.getLoc());
  site["mask_dtype"] = elementTypeValue(op.getMask());
  site["mask_shape"] = shapeValue(op.getMask());
  site["bias_dtype"] = elementTypeValue(op.getBias());
  site["bias_shape"] = shapeValue(op.getBias());
  if (op.isPacked()) {
    // Packed sequences: launches see the packed rows as one sequence of
    // total_q (q_len) queries against total_kv (kv_len) keys; the batch is
    // the launch's.
    site["ragged"] = true;
    site["batch"] = nullptr;
  }
  return site;
}

} // namespace

llvm::json::Object mlir::kiln::siteAttributesToJSON(AttentionOp op) {
  llvm::json::Object site{{"layout", stringifyLayout(op.getLayout())},
                            {"dtype", getElementTypeName(op.getElementType())},
                            {"scale", double(op.getScale().convertToFloat())},
                            {"causal", op.getCausal()},
                            {"window", windowToJSON(op)},
                            {"window_right", windowRightToJSON(op)},
                            {"softcap", softcapToJSON(op)},
                            {"batch", sizeToJSON(op.getBatchSize())},
                            {"q_heads", sizeToJSON(op.getNumQueryHeads())},
                            {"kv_heads", sizeToJSON(op.getNumKvHeads())},
                            {"q_len", sizeToJSON(op.getQueryLength())},
                            {"kv_len", sizeToJSON(op.getKvLength())},
                            {"head_dim", sizeToJSON(op.getHeadDim())},
                            {"v_head_dim", sizeToJSON(op.getValueHeadDim())},
                            {"mask", op.getMaskKind()},
                            {"masked_score", maskedScoreToJSON(op)},
                            {"bias", bool(op.getBias())}};
  // Said only where the op takes a run-time scale: its kernels take the
  // factor's pointer.
  if (op.getScaleFactor())
    site["scale_factor"] = true;
  return site;
}

llvm::json::Value mlir::kiln::sizeToJSON(int64_t size) {
  if (ShapedType::isDynamic(size))
    return nullptr;
  return size;
}

llvm::json::Value mlir::kiln::windowToJSON(AttentionOp op) {
  return optionalToJSON(op.getWindow());
}

llvm::json::Value mlir::kiln::windowRightToJSON(AttentionOp op) {
  return optionalToJSON(op.getWindowRight());
}

llvm::json::Value mlir::kiln::maskedScoreToJSON(AttentionOp op) {
  return optionalToJSON(op.getMaskedScore());
}

llvm::json::Value mlir::kiln::softcapToJSON(AttentionOp op) {
  return optionalToJSON(op.getSoftcap());
}

FailureOr<llvm::json::Object>
mlir::kiln::describeKernelsAndSites(ModuleOp module) {
  llvm::json::Array kernels, sites;
  llvm::StringMap<bool> described;
  auto gpuModule = module.lookupSymbol<gpu::GPUModuleOp>(kKernelModuleName);
  WalkResult walk = module.walk([&](Operation *op) {
    if (!isa<AttentionOp, PagedAttentionOp>(op))
      return WalkResult::advance();
    auto kernelRef = op->getAttrOfType<SymbolRefAttr>(kKernelAttrName);
    auto siteName = op->getAttrOfType<StringAttr>(kSiteAttrName);
    if (!kernelRef || !siteName || !gpuModule) {
      op->emitOpError("has no generated kernel; run convert-kiln-to-gpu first");
      return WalkResult::interrupt();
    }
    StringRef kernelName = kernelRef.getLeafReference().getValue();
    auto func = gpuModule.lookupSymbol<gpu::GPUFuncOp>(kernelName);
    DictionaryAttr info =
        func ? func->getAttrOfType<DictionaryAttr>(kKernelInfoAttrName)
             : DictionaryAttr();
    if (!info) {
      op->emitOpError("kernel '") << kernelName << "' has no kernel facts";
      return WalkResult::interrupt();
    }
    auto paged = dyn_cast<PagedAttentionOp>(op);
    if (!described.lookup(kernelName)) {
      described[kernelName] = true;
      kernels.push_back(
          paged ? describePagedKernel(func, info, paged)
                : describeKernel(func, info, cast<AttentionOp>(op)));
    }
    llvm::json::Object site =
        paged ? describePagedSite(paged, siteName.getValue(), kernelName)
              : describeSite(cast<AttentionOp>(op), siteName.getValue(),
                             kernelName);
    if (auto wsRef =
            op->getAttrOfType<SymbolRefAttr>(kWarpSpecializedKernelAttrName)) {
      StringRef wsName = wsRef.getLeafReference().getValue();
      auto wsFunc = gpuModule.lookupSymbol<gpu::GPUFuncOp>(wsName);
      DictionaryAttr wsInfo =
          wsFunc ? wsFunc->getAttrOfType<DictionaryAttr>(kKernelInfoAttrName)
                 : DictionaryAttr();
      if (!wsInfo) {
        op->emitOpError("kernel '") << wsName << "' has no kernel facts";
        return WalkResult::interrupt();
      }
      if (!described.lookup(wsName)) {
        described[wsName] = true;
        kernels.push_back(
            describeKernel(wsFunc, wsInfo, cast<AttentionOp>(op)));
      }
      site["warp_specialized_kernel"] = wsName.str();
    }
    sites.push_back(std::move(site));
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  // The combine kernels of the kernels that split keys, after them.
  if (gpuModule)
    for (auto func : gpuModule.getOps<gpu::GPUFuncOp>()) {
      auto info = func->getAttrOfType<DictionaryAttr>(kKernelInfoAttrName);
      auto kind = info ? info.getAs<StringAttr>("kind") : StringAttr();
      if (kind && kind.getValue() == "split_combine")
        kernels.push_back(describeCombineKernel(func, info));
      else if (kind && kind.getValue() == "paged_append")
        kernels.push_back(describeAppendKernel(func, info));
    }
  return llvm::json::Object{{"kernels", std::move(kernels)},
                            {"sites", std::move(sites)}};
}

llvm::StringMap<llvm::json::Value>
mlir::kiln::describeSchedules(ModuleOp module) {
  llvm::StringMap<llvm::json::Value> schedules;
  auto gpuModule = module.lookupSymbol<gpu::GPUModuleOp>(kKernelModuleName);
  if (!gpuModule)
    return schedules;
  for (auto func : gpuModule.getOps<gpu::GPUFuncOp>()) {
    auto info = func->getAttrOfType<DictionaryAttr>(kKernelInfoAttrName);
    auto schedule =
        info ? info.getAs<DictionaryAttr>("schedule") : DictionaryAttr();
    if (!schedule)
      continue;
    schedules.try_emplace(
        func.getName(),
        llvm::json::Object{
            {"variant", schedule.getAs<StringAttr>("variant").getValue()},
            {"blocks_per_sm",
             schedule.getAs<IntegerAttr>("blocks_per_sm").getInt()},
            {"from", schedule.getAs<StringAttr>("from").getValue()}});
  }
  return schedules;
}

void mlir::kiln::addTargetOnlyKernels(llvm::json::Object &description,
                                      llvm::json::Object targetDescription) {
  llvm::json::Array *kernels = description.getArray("kernels");
  llvm::json::Array *sites = description.getArray("sites");
  llvm::json::Array *extraKernels = targetDescription.getArray("kernels");
  llvm::json::Array *extraSites = targetDescription.getArray("sites");
  if (!kernels || !sites || !extraKernels || !extraSites)
    return;
  for (llvm::json::Value &kernel : *extraKernels)
    if (kernel.getAsObject() && kernel.getAsObject()->get("targets"))
      kernels->push_back(std::move(kernel));
  llvm::StringMap<std::string> byName;
  for (llvm::json::Value &value : *extraSites) {
    llvm::json::Object *site = value.getAsObject();
    std::optional<StringRef> name = site->getString("name");
    std::optional<StringRef> ws = site->getString("warp_specialized_kernel");
    if (name && ws)
      byName[*name] = ws->str();
  }
  for (llvm::json::Value &value : *sites) {
    llvm::json::Object *site = value.getAsObject();
    std::optional<StringRef> name = site->getString("name");
    auto found = name ? byName.find(*name) : byName.end();
    if (found != byName.end())
      (*site)["warp_specialized_kernel"] = found->second;
  }
}

void mlir::kiln::addSchedules(
    llvm::json::Object &description, ArrayRef<std::string> chips,
    const llvm::StringMap<llvm::json::Value> &portable,
    const llvm::StringMap<llvm::json::Value> *hopper) {
  llvm::json::Array *kernels = description.getArray("kernels");
  if (!kernels)
    return;
  for (llvm::json::Value &value : *kernels) {
    llvm::json::Object *kernel = value.getAsObject();
    std::optional<StringRef> name =
        kernel ? kernel->getString("name") : std::nullopt;
    if (!name)
      continue;
    auto found = portable.find(*name);
    if (found == portable.end())
      continue;
    llvm::json::Object byChip;
    for (const std::string &chip : chips) {
      const llvm::json::Value *schedule = &found->second;
      if (hopper && chip == "sm_90a") {
        auto hopperFound = hopper->find(*name);
        if (hopperFound != hopper->end())
          schedule = &hopperFound->second;
      }
      byChip[chip] = *schedule;
    }
    (*kernel)["schedule"] = std::move(byChip);
  }
}

FailureOr<std::vector<TargetPTX>> mlir::kiln::extractPTX(ModuleOp module) {
  auto binary = module.lookupSymbol<gpu::BinaryOp>(kKernelModuleName);
  if (!binary)
    return module.emitError("no serialized kernels (gpu.binary @")
           << kKernelModuleName << ") in the module";
  std::vector<TargetPTX> result;
  for (Attribute attr : binary.getObjects()) {
    auto object = cast<gpu::ObjectAttr>(attr);
    auto target = dyn_cast<NVVM::NVVMTargetAttr>(object.getTarget());
    if (!target || object.getFormat() != gpu::CompilationTarget::Assembly)
      return binary.emitError("expected NVVM objects holding PTX assembly");
    result.push_back({target.getChip().str(), object.getObject().str()});
  }
  return result;
}

LogicalResult mlir::kiln::writePackage(Location loc, StringRef dir,
                                       llvm::json::Object description,
                                       const std::vector<TargetPTX> &ptx,
                                       StringRef source) {
  if (std::error_code error = llvm::sys::fs::create_directories(dir))
    return emitError(loc) << "cannot create package directory '" << dir
                          << "': " << error.message();
  llvm::json::Array targets;
  for (const TargetPTX &target : ptx) {
    std::string fileName = "kernels." + target.chip + ".ptx";
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, fileName);
    std::error_code error;
    llvm::raw_fd_ostream os(path, error);
    if (error)
      return emitError(loc)
             << "cannot write '" << path << "': " << error.message();
    os << target.assembly;
    llvm::json::Object entry{{"chip", target.chip}, {"ptx", fileName}};
    if (target.gridDependency)
      entry["grid_dependency"] = true;
    if (target.attentionGridDependency)
      entry["attention_grid_dependency"] = true;
    if (target.clusterSplits > 0)
      entry["cluster_splits"] = target.clusterSplits;
    targets.push_back(std::move(entry));
  }
  llvm::json::Object manifest{
      {"format", "kiln-package"},
      {"format_version", kManifestFormatVersion},
      {"producer", "kilnc " KILN_VERSION_STRING},
      {"source", llvm::sys::path::filename(source)},
      {"targets", std::move(targets)},
      {"kernels", std::move(*description.get("kernels"))},
      {"sites", std::move(*description.get("sites"))}};
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, "manifest.json");
  std::error_code error;
  llvm::raw_fd_ostream os(path, error);
  if (error)
    return emitError(loc) << "cannot write '" << path
                          << "': " << error.message();
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(manifest))) << "\n";
  return success();
}
