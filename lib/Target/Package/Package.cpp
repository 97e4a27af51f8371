//===- Package.cpp - Kiln package emission ----------------------*- C++ -*-===//
//
// Builds manifest.json from the generated kernels and the tagged attention
// sites, pulls PTX out of gpu.binary, and writes the package directory.
//
//===----------------------------------------------------------------------===//

#include "kiln/Target/Package/Package.h"

#include "kiln/Conversion/KilnToGPU/KernelContract.h"
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
llvm::json::Array stringsToJSON(ArrayRef<std::string> values) {
  llvm::json::Array array;
  for (const std::string &value : values)
    array.push_back(value);
  return array;
}

llvm::json::Value optionalToJSON(std::optional<APFloat> value) {
  return value ? llvm::json::Value(double(value->convertToFloat()))
               : llvm::json::Value(nullptr);
}

/// An argument's "dtype" entry: none, or its value (null included).
using DtypeEntry = std::optional<llvm::json::Value>;

/// The argument ABI of a kernel, each argument with the "dtype" entry
/// `dtypeOf(name, kind)` gives it.
llvm::json::Array
argsToJSON(const KernelContract &contract,
           llvm::function_ref<DtypeEntry(StringRef, StringRef)> dtypeOf) {
  llvm::json::Array args;
  for (const KernelArgument &argument : contract.arguments) {
    llvm::json::Object arg{{"name", argument.name}, {"kind", argument.kind}};
    if (DtypeEntry dtype = dtypeOf(argument.name, argument.kind))
      arg["dtype"] = std::move(*dtype);
    args.push_back(std::move(arg));
  }
  return args;
}

/// The grid as the manifest states it (docs/package.md): x, y and z, each a
/// dimension of the launch over a divisor, or a constant.
llvm::json::Array gridToJSON(const KernelContract &contract) {
  const GridRule &grid = contract.grid;
  if (grid.persistent) {
    llvm::json::Object x{{"dim", "multiprocessors"}};
    if (grid.persistentUpToKvLen)
      x["up_to_kv_len"] = grid.persistentUpToKvLen;
    return llvm::json::Array{std::move(x), 1, 1};
  }
  int64_t rows = contract.rowsPerBlock;
  llvm::json::Array result;
  switch (grid.blocks) {
  case GridRule::Blocks::OutputRows:
    return llvm::json::Array{
        llvm::json::Object{
            {"dim", llvm::json::Array{"batch", "q_heads", "q_len"}},
            {"ceil_div", rows}},
        1, 1};
  case GridRule::Blocks::NewTokens:
    return llvm::json::Array{llvm::json::Object{{"dim", "total_new"}}, 1, 1};
  case GridRule::Blocks::QueryBlocks:
    result.push_back(llvm::json::Object{{"dim", "q_len"}, {"ceil_div", rows}});
    break;
  case GridRule::Blocks::PackedQueryBlocks:
    result.push_back(
        llvm::json::Object{{"dim", llvm::json::Array{"q_len", "q_heads"}},
                           {"per", "kv_heads"},
                           {"ceil_div", rows}});
    break;
  case GridRule::Blocks::PlanItems:
    result.push_back(llvm::json::Object{{"dim", "plan_items"}});
    break;
  case GridRule::Blocks::KeyBlocks:
    result.push_back(llvm::json::Object{{"dim", "kv_len"}, {"ceil_div", rows}});
    break;
  }
  result.push_back(llvm::json::Object{
      {"dim", grid.headsAreKvHeads() ? "kv_heads" : "q_heads"},
      {"ceil_div", 1}});
  llvm::json::Object z = grid.zIsBatch()
                             ? llvm::json::Object{{"dim", "batch"},
                                                  {"ceil_div", 1}}
                             : llvm::json::Object{{"value", 1}};
  if (grid.timesSplits)
    z["times_splits"] = true;
  result.push_back(std::move(z));
  return result;
}

/// How a kernel launches: block, rows per block, key block, grid, shared
/// memory and the argument ABI; a ragged kernel says so.
void addLaunchFacts(llvm::json::Object &kernel,
                    const KernelContract &contract, llvm::json::Array args) {
  kernel["block"] = llvm::json::Array{contract.threadsPerBlock, 1, 1};
  kernel["rows_per_block"] = contract.rowsPerBlock;
  kernel["kv_block_size"] = contract.kvBlockSize;
  kernel["grid"] = gridToJSON(contract);
  kernel["static_shared_bytes"] = contract.staticSharedBytes;
  kernel["dynamic_shared_bytes"] = contract.dynamicSharedBytes;
  kernel["args"] = std::move(args);
  if (contract.ragged)
    kernel["ragged"] = true;
}

/// An attention kernel's combine kernel (null when it does not split).
llvm::json::Value combineToJSON(const KernelContract &contract) {
  return contract.combineKernel ? llvm::json::Value(*contract.combineKernel)
                                : llvm::json::Value(nullptr);
}

/// The split-KV combine kernel: one block a row of the output.
llvm::json::Object describeCombineKernel(gpu::GPUFuncOp func,
                                         const KernelContract &contract) {
  llvm::json::Array args =
      argsToJSON(contract, [&](StringRef name, StringRef) -> DtypeEntry {
        if (name == "out")
          return llvm::json::Value(contract.dtype);
        return std::nullopt;
      });
  llvm::json::Object kernel{
      {"name", func.getName()},
      {"kind", stringifyKernelKind(contract.kind)},
      {"dtype", contract.dtype},
      {"v_head_dim", contract.valueHeadDim},
  };
  addLaunchFacts(kernel, contract, std::move(args));
  return kernel;
}

/// The paged cache's append kernel: one block a new token.
llvm::json::Object describeAppendKernel(gpu::GPUFuncOp func,
                                        const KernelContract &contract) {
  llvm::json::Array args =
      argsToJSON(contract, [&](StringRef name, StringRef) -> DtypeEntry {
        if (name == "new_keys" || name == "new_values")
          return llvm::json::Value(contract.dtype);
        if (name == "key_cache" || name == "value_cache")
          return llvm::json::Value(contract.cacheDtype);
        if (name == "k_scale" || name == "v_scale")
          return llvm::json::Value("f32");
        return std::nullopt;
      });
  llvm::json::Object kernel{
      {"name", func.getName()},
      {"kind", stringifyKernelKind(contract.kind)},
      {"dtype", contract.dtype},
      {"cache_dtype", contract.cacheDtype},
      {"head_dim", contract.headDim},
      {"v_head_dim", contract.valueHeadDim},
  };
  addLaunchFacts(kernel, contract, std::move(args));
  return kernel;
}

/// The attributes a kernel is specialised on, as the first site using it
/// states them (every site sharing a kernel shares them).
template <typename OpT>
llvm::json::Object describeKernel(gpu::GPUFuncOp func,
                                  const KernelContract &contract, OpT site) {
  std::string dtype = getElementTypeName(site.getElementType());
  llvm::json::Array args =
      argsToJSON(contract, [&](StringRef name, StringRef kind) -> DtypeEntry {
        if (kind != "pointer" || name == "kv_offsets" ||
            name == "q_offsets" || name == "plan")
          return std::nullopt;
        if (name == "mask")
          return elementTypeValue(site.getMask());
        if (name == "bias")
          return elementTypeValue(site.getBias());
        if (name == "lse" || name == "delta")
          return llvm::json::Value("f32");
        return llvm::json::Value(dtype);
      });
  llvm::json::Object kernel{
      {"name", func.getName()},
      {"kind", stringifyKernelKind(contract.kind)},
      {"dtype", dtype},
      {"head_dim", site.getHeadDim()},
      {"v_head_dim", site.getValueHeadDim()},
      {"causal", site.getCausal()},
      {"window", optionalToJSON(site.getWindow())},
      {"window_right", optionalToJSON(site.getWindowRight())},
      {"softcap", optionalToJSON(site.getSoftcap())},
      {"mask", site.getMaskKind()},
      {"mask_dtype", elementTypeValue(site.getMask())},
      {"bias", bool(site.getBias())},
      {"bias_dtype", elementTypeValue(site.getBias())},
      {"split_combine", combineToJSON(contract)},
  };
  // f32 sites on TF32 tensor cores say so (allow-tf32).
  if (contract.math)
    kernel["math"] = *contract.math;
  // A kernel in some targets' PTX only (the warp-specialised sm_90a
  // kernel), with its schedule on each.
  if (!contract.targets.empty()) {
    llvm::json::Array chips;
    llvm::json::Object schedules;
    for (const std::string &chip : contract.targets) {
      chips.push_back(chip);
      if (!contract.warpSchedule)
        continue;
      const WarpScheduleFacts &warp = *contract.warpSchedule;
      llvm::json::Object schedule{{"variant", "warp-specialized"},
                                  {"blocks_per_sm", 1},
                                  {"consumer_warpgroups", warp.consumers},
                                  {"kv_block_size", warp.kvBlockSize},
                                  {"overlap", warp.overlap},
                                  {"ping_pong", warp.pingPong},
                                  {"from", warp.from}};
      if (contract.grid.persistent)
        schedule["persistent"] = true;
      if (contract.grid.persistentUpToKvLen)
        schedule["persistent_up_to_kv_len"] = contract.grid.persistentUpToKvLen;
      schedules[chip] = std::move(schedule);
    }
    if (!contract.why.empty()) {
      llvm::json::Object reasons;
      for (const std::string &chip : contract.targets)
        reasons[chip] = stringsToJSON(contract.why);
      kernel["why"] = std::move(reasons);
    }
    kernel["targets"] = std::move(chips);
    if (contract.warpSchedule)
      kernel["schedule"] = std::move(schedules);
  }
  // Tensor-map arguments say what the runtime encodes: the tensor, the
  // box and the swizzle.
  for (llvm::json::Value &value : args) {
    llvm::json::Object &arg = *value.getAsObject();
    std::optional<StringRef> name = arg.getString("name");
    for (const TensorMapFacts &map : contract.tensorMaps) {
      if (!name || map.argument != *name)
        continue;
      arg["tensor"] = map.tensor;
      arg["dtype"] = map.tensor == "mask"   ? elementTypeValue(site.getMask())
                     : map.tensor == "bias" ? elementTypeValue(site.getBias())
                                            : llvm::json::Value(dtype);
      arg["box"] = llvm::json::Array{map.boxColumns, map.boxRows};
      arg["swizzle"] = map.swizzleBytes;
    }
  }
  addLaunchFacts(kernel, contract, std::move(args));
  return kernel;
}

/// The kernel of a kiln.paged_attention site: its ABI and grid from its
/// contract, its attributes from the site.
llvm::json::Object describePagedKernel(gpu::GPUFuncOp func,
                                       const KernelContract &contract,
                                       PagedAttentionOp site) {
  std::string dtype = getElementTypeName(site.getElementType());
  std::string cacheDtype = site.isFp8Cache() ? "f8e4m3" : dtype;
  llvm::json::Array args =
      argsToJSON(contract, [&](StringRef name, StringRef kind) -> DtypeEntry {
        if (name == "key_cache" || name == "value_cache")
          return llvm::json::Value(cacheDtype);
        if (name == "k_scale" || name == "v_scale")
          return llvm::json::Value("f32");
        if (kind == "pointer" && name != "page_table" && name != "kv_lens" &&
            name != "q_offsets" && name != "plan")
          return llvm::json::Value(dtype);
        return std::nullopt;
      });
  auto queryType = cast<RankedTensorType>(site.getQuery().getType());
  auto valueType = cast<RankedTensorType>(site.getValueCache().getType());
  llvm::json::Object kernel{
      {"name", func.getName()},
      {"kind", stringifyKernelKind(contract.kind)},
      {"dtype", dtype},
      {"cache_dtype", cacheDtype},
      {"head_dim", queryType.getDimSize(site.isRagged() ? 2 : 3)},
      {"v_head_dim", valueType.getDimSize(3)},
      {"causal", site.getCausal()},
      {"window", optionalToJSON(site.getWindow())},
      {"softcap", optionalToJSON(site.getSoftcap())},
      {"mask", "none"},
      {"mask_dtype", nullptr},
      {"bias", false},
      {"bias_dtype", nullptr},
      {"split_combine", combineToJSON(contract)},
  };
  // The kernel that writes new keys and values into these caches.
  if (contract.appendKernel)
    kernel["paged_append"] = *contract.appendKernel;
  addLaunchFacts(kernel, contract, std::move(args));
  return kernel;
}

/// The contract of generated kernel `name`, for `op`'s diagnostics.
FailureOr<KernelContract> contractOf(gpu::GPUModuleOp gpuModule,
                                     StringRef name, Operation *op,
                                     gpu::GPUFuncOp &func) {
  func = gpuModule ? gpuModule.lookupSymbol<gpu::GPUFuncOp>(name)
                   : gpu::GPUFuncOp();
  auto info = func ? func->getAttrOfType<DictionaryAttr>(kKernelInfoAttrName)
                   : DictionaryAttr();
  if (!info)
    return op->emitOpError("kernel '") << name << "' has no kernel facts";
  llvm::Expected<KernelContract> contract = KernelContract::fromAttr(info);
  if (!contract)
    return op->emitOpError("kernel '")
           << name << "' has malformed kernel facts: "
           << llvm::toString(contract.takeError());
  return std::move(*contract);
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

/// The attention attributes of a kiln.attention or kiln.attention_grad
/// site, as both ops state them.
template <typename OpT>
llvm::json::Object attributesOf(OpT op) {
  return llvm::json::Object{
      {"layout", stringifyLayout(op.getLayout())},
      {"dtype", getElementTypeName(op.getElementType())},
      {"scale", double(op.getScale().convertToFloat())},
      {"causal", op.getCausal()},
      {"window", optionalToJSON(op.getWindow())},
      {"window_right", optionalToJSON(op.getWindowRight())},
      {"softcap", optionalToJSON(op.getSoftcap())},
      {"batch", sizeToJSON(op.getBatchSize())},
      {"q_heads", sizeToJSON(op.getNumQueryHeads())},
      {"kv_heads", sizeToJSON(op.getNumKvHeads())},
      {"q_len", sizeToJSON(op.getQueryLength())},
      {"kv_len", sizeToJSON(op.getKvLength())},
      {"head_dim", sizeToJSON(op.getHeadDim())},
      {"v_head_dim", sizeToJSON(op.getValueHeadDim())},
      {"mask", op.getMaskKind()},
      {"masked_score", optionalToJSON(op.getMaskedScore())},
      {"bias", bool(op.getBias())}};
}

/// A site's function and location, and its mask's and bias's dtypes and
/// shapes.
void addPlaceAndTerms(llvm::json::Object &site, Operation *op) {
  auto func = op->getParentOfType<FunctionOpInterface>();
  site["function"] = func ? func.getName().str() : std::string();
  site["location"] = locationText(op->getLoc());
  auto term = [&](StringRef name) -> Value {
    if (auto attention = dyn_cast<AttentionOp>(op))
      return name == "mask" ? attention.getMask() : attention.getBias();
    auto grad = cast<AttentionGradOp>(op);
    return name == "mask" ? grad.getMask() : grad.getBias();
  };
  for (StringRef name : {"mask", "bias"}) {
    site[(name + "_dtype").str()] = elementTypeValue(term(name));
    site[(name + "_shape").str()] = shapeValue(term(name));
  }
}

/// A site's run-time scale: `true` for one element, "per_head" for one
/// value a query head (the pointer then holds Hq floats).
llvm::json::Value scaleFactorToJSON(bool perHead) {
  if (perHead)
    return "per_head";
  return true;
}

/// A kiln.attention_grad site: the forward's attributes and both passes.
llvm::json::Object describeGradSite(AttentionGradOp op, StringRef siteName,
                                    StringRef queryPass, StringRef keyPass) {
  llvm::json::Object site = attributesOf(op);
  site["name"] = siteName;
  site["kind"] = "attention_grad";
  site["kernel"] = queryPass;
  site["key_pass"] = keyPass;
  addPlaceAndTerms(site, op);
  site["lse"] = true;
  if (op.getScaleFactor())
    site["scale_factor"] = scaleFactorToJSON(op.hasPerHeadScaleFactor());
  return site;
}

llvm::json::Object describeSite(AttentionOp op, StringRef siteName,
                                StringRef kernelName) {
  llvm::json::Object site = siteAttributesToJSON(op);
  site["name"] = siteName;
  site["kernel"] = kernelName;
  addPlaceAndTerms(site, op);
  // A site that trains: its kernel writes the log-sum-exp too.
  if (op.getLse())
    site["lse"] = true;
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
  llvm::json::Object site = attributesOf(op);
  // Said only where the op takes a run-time scale: its kernels take the
  // factor's pointer.
  if (op.getScaleFactor())
    site["scale_factor"] = scaleFactorToJSON(op.hasPerHeadScaleFactor());
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
  // Describes (once) the kernel `name` of the site `op` of the kind it
  // expects.
  auto describe = [&](StringRef name, Operation *op,
                      KernelKind expected) -> LogicalResult {
    if (described.lookup(name))
      return success();
    gpu::GPUFuncOp func;
    FailureOr<KernelContract> contract =
        contractOf(gpuModule, name, op, func);
    if (failed(contract))
      return failure();
    if (contract->kind != expected)
      return op->emitOpError("kernel '")
             << name << "' is a " << stringifyKernelKind(contract->kind)
             << " kernel, not a " << stringifyKernelKind(expected) << " one";
    described[name] = true;
    if (auto paged = dyn_cast<PagedAttentionOp>(op))
      kernels.push_back(describePagedKernel(func, *contract, paged));
    else if (auto grad = dyn_cast<AttentionGradOp>(op))
      kernels.push_back(describeKernel(func, *contract, grad));
    else
      kernels.push_back(
          describeKernel(func, *contract, cast<AttentionOp>(op)));
    return success();
  };
  WalkResult walk = module.walk([&](Operation *op) {
    if (auto grad = dyn_cast<AttentionGradOp>(op)) {
      // The backward's two passes: the site's kernel (the query pass) and
      // its key pass, launched after it.
      auto queryRef = op->getAttrOfType<SymbolRefAttr>(kKernelAttrName);
      auto keyRef =
          op->getAttrOfType<SymbolRefAttr>(kGradKeyValueKernelAttrName);
      auto siteName = op->getAttrOfType<StringAttr>(kSiteAttrName);
      if (!queryRef || !keyRef || !siteName || !gpuModule) {
        op->emitOpError(
            "has no generated kernel; run convert-kiln-to-gpu first");
        return WalkResult::interrupt();
      }
      StringRef queryPass = queryRef.getLeafReference().getValue();
      StringRef keyPass = keyRef.getLeafReference().getValue();
      if (failed(describe(queryPass, op, KernelKind::AttentionGradQuery)) ||
          failed(describe(keyPass, op, KernelKind::AttentionGradKeyValue)))
        return WalkResult::interrupt();
      sites.push_back(
          describeGradSite(grad, siteName.getValue(), queryPass, keyPass));
      return WalkResult::advance();
    }
    if (!isa<AttentionOp, PagedAttentionOp>(op))
      return WalkResult::advance();
    auto kernelRef = op->getAttrOfType<SymbolRefAttr>(kKernelAttrName);
    auto siteName = op->getAttrOfType<StringAttr>(kSiteAttrName);
    if (!kernelRef || !siteName || !gpuModule) {
      op->emitOpError("has no generated kernel; run convert-kiln-to-gpu first");
      return WalkResult::interrupt();
    }
    StringRef kernelName = kernelRef.getLeafReference().getValue();
    auto paged = dyn_cast<PagedAttentionOp>(op);
    if (failed(describe(kernelName, op,
                        paged ? KernelKind::PagedAttention
                              : KernelKind::Attention)))
      return WalkResult::interrupt();
    llvm::json::Object site =
        paged ? describePagedSite(paged, siteName.getValue(), kernelName)
              : describeSite(cast<AttentionOp>(op), siteName.getValue(),
                             kernelName);
    if (auto wsRef =
            op->getAttrOfType<SymbolRefAttr>(kWarpSpecializedKernelAttrName)) {
      StringRef wsName = wsRef.getLeafReference().getValue();
      if (failed(describe(wsName, op, KernelKind::Attention)))
        return WalkResult::interrupt();
      site["warp_specialized_kernel"] = wsName.str();
    }
    sites.push_back(std::move(site));
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  // The companions (combine and append kernels), after the kernels.
  if (gpuModule)
    for (auto func : gpuModule.getOps<gpu::GPUFuncOp>()) {
      auto info = func->getAttrOfType<DictionaryAttr>(kKernelInfoAttrName);
      if (!info)
        continue;
      llvm::Expected<KernelContract> contract = KernelContract::fromAttr(info);
      if (!contract)
        return func.emitOpError("malformed kernel facts: ")
               << llvm::toString(contract.takeError());
      if (contract->kind == KernelKind::SplitCombine)
        kernels.push_back(describeCombineKernel(func, *contract));
      else if (contract->kind == KernelKind::PagedAppend)
        kernels.push_back(describeAppendKernel(func, *contract));
    }
  return llvm::json::Object{{"kernels", std::move(kernels)},
                            {"sites", std::move(sites)}};
}

namespace {
/// `describe(contract)` of each kernel of `module` whose facts say
/// something for it, by kernel name.
llvm::StringMap<llvm::json::Value> describeEachKernel(
    ModuleOp module,
    function_ref<std::optional<llvm::json::Value>(const KernelContract &)>
        describe) {
  llvm::StringMap<llvm::json::Value> described;
  auto gpuModule = module.lookupSymbol<gpu::GPUModuleOp>(kKernelModuleName);
  if (!gpuModule)
    return described;
  for (auto func : gpuModule.getOps<gpu::GPUFuncOp>()) {
    auto info = func->getAttrOfType<DictionaryAttr>(kKernelInfoAttrName);
    if (!info)
      continue;
    // (describeKernelsAndSites, run first, reports malformed facts.)
    llvm::Expected<KernelContract> contract = KernelContract::fromAttr(info);
    if (!contract) {
      llvm::consumeError(contract.takeError());
      continue;
    }
    if (std::optional<llvm::json::Value> value = describe(*contract))
      described.try_emplace(func.getName(), std::move(*value));
  }
  return described;
}
} // namespace

llvm::StringMap<llvm::json::Value>
mlir::kiln::describeSchedules(ModuleOp module) {
  return describeEachKernel(
      module,
      [](const KernelContract &contract) -> std::optional<llvm::json::Value> {
        if (!contract.schedule)
          return std::nullopt;
        const MmaScheduleFacts &schedule = *contract.schedule;
        return llvm::json::Object{{"variant", schedule.variant},
                                  {"blocks_per_sm", schedule.blocksPerSM},
                                  {"from", schedule.from}};
      });
}

llvm::StringMap<llvm::json::Value>
mlir::kiln::describeReasons(ModuleOp module) {
  // (Kernels of some targets only state theirs with them.)
  return describeEachKernel(
      module,
      [](const KernelContract &contract) -> std::optional<llvm::json::Value> {
        if (contract.why.empty() || !contract.targets.empty())
          return std::nullopt;
        return stringsToJSON(contract.why);
      });
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

namespace {
/// Gives each kernel of `description` found in `portable` a `key` object
/// with one entry per chip: `sm_90a`'s from `hopper` where given and it has
/// the kernel, every other chip's from `portable`.
void addByChip(llvm::json::Object &description, StringRef key,
               ArrayRef<std::string> chips,
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
      const llvm::json::Value *entry = &found->second;
      if (hopper && chip == "sm_90a") {
        auto hopperFound = hopper->find(*name);
        if (hopperFound != hopper->end())
          entry = &hopperFound->second;
      }
      byChip[chip] = *entry;
    }
    (*kernel)[key] = std::move(byChip);
  }
}
} // namespace

void mlir::kiln::addSchedules(
    llvm::json::Object &description, ArrayRef<std::string> chips,
    const llvm::StringMap<llvm::json::Value> &portable,
    const llvm::StringMap<llvm::json::Value> *hopper) {
  addByChip(description, "schedule", chips, portable, hopper);
}

void mlir::kiln::addReasons(llvm::json::Object &description,
                            ArrayRef<std::string> chips,
                            const llvm::StringMap<llvm::json::Value> &portable,
                            const llvm::StringMap<llvm::json::Value> *hopper) {
  addByChip(description, "why", chips, portable, hopper);
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
