//===- KernelContract.cpp - What a generated kernel promises ----*- C++ -*-===//
//
// The one writer and the one reader of the kernel facts attribute
// (kiln.kernel_info): a dictionary whose fields are those of
// KernelContract, optional ones written only when set.
//
//===----------------------------------------------------------------------===//

#include "kiln/Conversion/KilnToGPU/KernelContract.h"

#include "mlir/IR/Builders.h"

#include "llvm/ADT/StringSwitch.h"

using namespace mlir;
using namespace mlir::kiln;

StringRef mlir::kiln::stringifyKernelKind(KernelKind kind) {
  switch (kind) {
  case KernelKind::Attention:
    return "attention";
  case KernelKind::PagedAttention:
    return "paged_attention";
  case KernelKind::SplitCombine:
    return "split_combine";
  case KernelKind::PagedAppend:
    return "paged_append";
  case KernelKind::AttentionGradQuery:
    return "attention_grad_q";
  case KernelKind::AttentionGradKeyValue:
    return "attention_grad_kv";
  }
  llvm_unreachable("unknown kernel kind");
}

GridRule mlir::kiln::attentionGridRule(bool ragged, bool packsQueryHeads,
                                       bool splitsKeys) {
  GridRule rule;
  rule.blocks = ragged            ? GridRule::Blocks::PlanItems
                : packsQueryHeads ? GridRule::Blocks::PackedQueryBlocks
                                  : GridRule::Blocks::QueryBlocks;
  rule.timesSplits = splitsKeys;
  return rule;
}

namespace {

StringRef stringifyBlocks(GridRule::Blocks blocks) {
  switch (blocks) {
  case GridRule::Blocks::QueryBlocks:
    return "query_blocks";
  case GridRule::Blocks::PackedQueryBlocks:
    return "packed_query_blocks";
  case GridRule::Blocks::PlanItems:
    return "plan_items";
  case GridRule::Blocks::OutputRows:
    return "output_rows";
  case GridRule::Blocks::NewTokens:
    return "new_tokens";
  case GridRule::Blocks::KeyBlocks:
    return "key_blocks";
  }
  llvm_unreachable("unknown grid blocks");
}

ArrayAttr stringArray(Builder &builder, ArrayRef<std::string> values) {
  SmallVector<Attribute> attrs;
  for (const std::string &value : values)
    attrs.push_back(builder.getStringAttr(value));
  return builder.getArrayAttr(attrs);
}

/// Reads the fields of one dictionary, remembering the first that is
/// missing or malformed (named with its path, "grid.blocks").
class FieldReader {
public:
  FieldReader(DictionaryAttr dict, std::string path, std::string &error)
      : dict(dict), path(std::move(path)), error(error) {}

  template <typename AttrT> AttrT get(StringRef key, bool required = true) {
    Attribute attr = dict ? dict.get(key) : Attribute();
    auto typed = dyn_cast_or_null<AttrT>(attr);
    if ((attr && !typed) || (!attr && required))
      fail(key, attr ? "has the wrong type" : "is missing");
    return typed;
  }
  int64_t integer(StringRef key) {
    auto attr = get<IntegerAttr>(key);
    return attr ? attr.getInt() : 0;
  }
  bool boolean(StringRef key, bool required = true) {
    auto attr = get<BoolAttr>(key, required);
    return attr && attr.getValue();
  }
  std::string string(StringRef key) {
    auto attr = get<StringAttr>(key);
    return attr ? attr.str() : std::string();
  }
  std::optional<std::string> optionalString(StringRef key) {
    if (auto attr = get<StringAttr>(key, /*required=*/false))
      return attr.str();
    return std::nullopt;
  }
  SmallVector<std::string> strings(StringRef key, bool required = true) {
    SmallVector<std::string> values;
    auto array = get<ArrayAttr>(key, required);
    if (!array)
      return values;
    for (Attribute element : array) {
      auto string = dyn_cast<StringAttr>(element);
      if (!string) {
        fail(key, "holds a non-string");
        return {};
      }
      values.push_back(string.str());
    }
    return values;
  }
  /// The nested dictionary `key`'s reader (an empty one when absent).
  FieldReader nested(DictionaryAttr nestedDict, StringRef key) {
    return FieldReader(nestedDict, path + key.str() + ".", error);
  }
  void fail(StringRef key, StringRef what) {
    if (error.empty())
      error = (Twine("field '") + path + key + "' " + what).str();
  }

private:
  DictionaryAttr dict;
  std::string path;
  std::string &error;
};

bool isCompanion(KernelKind kind) {
  return kind == KernelKind::SplitCombine || kind == KernelKind::PagedAppend;
}

} // namespace

void KernelContract::setArguments(ArrayRef<std::string> names,
                                  ArrayRef<std::string> kinds) {
  assert(names.size() == kinds.size() && "a kind an argument");
  arguments.clear();
  for (auto [name, kind] : llvm::zip(names, kinds))
    arguments.push_back({name, kind});
}

DictionaryAttr KernelContract::toAttr(MLIRContext *context) const {
  Builder builder(context);
  NamedAttrList fields;
  auto setInt = [&](NamedAttrList &list, StringRef key, int64_t value) {
    list.set(key, builder.getI64IntegerAttr(value));
  };
  fields.set("kind", builder.getStringAttr(stringifyKernelKind(kind)));
  setInt(fields, "threads_per_block", threadsPerBlock);
  setInt(fields, "rows_per_block", rowsPerBlock);
  setInt(fields, "kv_block_size", kvBlockSize);
  setInt(fields, "static_shared_bytes", staticSharedBytes);
  setInt(fields, "dynamic_shared_bytes", dynamicSharedBytes);
  SmallVector<std::string> names, kinds;
  for (const KernelArgument &argument : arguments) {
    names.push_back(argument.name);
    kinds.push_back(argument.kind);
  }
  fields.set("arg_names", stringArray(builder, names));
  fields.set("arg_kinds", stringArray(builder, kinds));

  NamedAttrList gridFields;
  gridFields.set("blocks", builder.getStringAttr(stringifyBlocks(grid.blocks)));
  gridFields.set("times_splits", builder.getBoolAttr(grid.timesSplits));
  if (grid.persistent) {
    gridFields.set("persistent", builder.getBoolAttr(true));
    if (grid.persistentUpToKvLen)
      setInt(gridFields, "persistent_up_to_kv_len", grid.persistentUpToKvLen);
  }
  fields.set("grid", gridFields.getDictionary(context));

  fields.set("packs_query_heads", builder.getBoolAttr(packsQueryHeads));
  if (ragged)
    fields.set("ragged", builder.getBoolAttr(true));
  if (clusterSplits)
    fields.set("cluster_splits", builder.getBoolAttr(true));
  if (!targets.empty())
    fields.set("targets", stringArray(builder, targets));
  if (math)
    fields.set("math", builder.getStringAttr(*math));
  if (!tensorMaps.empty()) {
    SmallVector<Attribute> maps;
    for (const TensorMapFacts &map : tensorMaps) {
      NamedAttrList mapFields;
      mapFields.set("argument", builder.getStringAttr(map.argument));
      mapFields.set("tensor", builder.getStringAttr(map.tensor));
      mapFields.set("box",
                    builder.getI64ArrayAttr({map.boxColumns, map.boxRows}));
      setInt(mapFields, "swizzle", map.swizzleBytes);
      maps.push_back(mapFields.getDictionary(context));
    }
    fields.set("tensor_maps", builder.getArrayAttr(maps));
  }
  if (schedule) {
    NamedAttrList scheduleFields;
    scheduleFields.set("variant", builder.getStringAttr(schedule->variant));
    setInt(scheduleFields, "blocks_per_sm", schedule->blocksPerSM);
    scheduleFields.set("from", builder.getStringAttr(schedule->from));
    fields.set("schedule", scheduleFields.getDictionary(context));
  }
  if (warpSchedule) {
    NamedAttrList warpFields;
    setInt(warpFields, "consumers", warpSchedule->consumers);
    setInt(warpFields, "kv_block_size", warpSchedule->kvBlockSize);
    warpFields.set("overlap", builder.getBoolAttr(warpSchedule->overlap));
    warpFields.set("ping_pong", builder.getBoolAttr(warpSchedule->pingPong));
    warpFields.set("from", builder.getStringAttr(warpSchedule->from));
    fields.set("warp_schedule", warpFields.getDictionary(context));
  }
  if (combineKernel)
    fields.set("combine_kernel", builder.getStringAttr(*combineKernel));
  if (appendKernel)
    fields.set("append_kernel", builder.getStringAttr(*appendKernel));
  if (!why.empty())
    fields.set("why", stringArray(builder, why));
  if (isCompanion(kind)) {
    fields.set("dtype", builder.getStringAttr(dtype));
    setInt(fields, "v_head_dim", valueHeadDim);
    if (kind == KernelKind::PagedAppend) {
      fields.set("cache_dtype", builder.getStringAttr(cacheDtype));
      setInt(fields, "head_dim", headDim);
    }
  }
  return fields.getDictionary(context);
}

llvm::Expected<KernelContract> KernelContract::fromAttr(DictionaryAttr attr) {
  std::string error;
  FieldReader read(attr, "", error);
  KernelContract contract;

  std::string kind = read.string("kind");
  std::optional<KernelKind> parsedKind =
      llvm::StringSwitch<std::optional<KernelKind>>(kind)
          .Case("attention", KernelKind::Attention)
          .Case("paged_attention", KernelKind::PagedAttention)
          .Case("split_combine", KernelKind::SplitCombine)
          .Case("paged_append", KernelKind::PagedAppend)
          .Case("attention_grad_q", KernelKind::AttentionGradQuery)
          .Case("attention_grad_kv", KernelKind::AttentionGradKeyValue)
          .Default(std::nullopt);
  if (!parsedKind)
    read.fail("kind", "is not a kernel kind");
  contract.kind = parsedKind.value_or(KernelKind::Attention);
  contract.threadsPerBlock = read.integer("threads_per_block");
  contract.rowsPerBlock = read.integer("rows_per_block");
  contract.kvBlockSize = read.integer("kv_block_size");
  contract.staticSharedBytes = read.integer("static_shared_bytes");
  contract.dynamicSharedBytes = read.integer("dynamic_shared_bytes");
  SmallVector<std::string> names = read.strings("arg_names");
  SmallVector<std::string> kinds = read.strings("arg_kinds");
  if (names.size() == kinds.size())
    contract.setArguments(names, kinds);
  else
    read.fail("arg_kinds", "does not have one kind an argument name");

  auto gridDict = read.get<DictionaryAttr>("grid");
  FieldReader grid = read.nested(gridDict, "grid");
  std::string blocks = grid.string("blocks");
  std::optional<GridRule::Blocks> parsedBlocks =
      llvm::StringSwitch<std::optional<GridRule::Blocks>>(blocks)
          .Case("query_blocks", GridRule::Blocks::QueryBlocks)
          .Case("packed_query_blocks", GridRule::Blocks::PackedQueryBlocks)
          .Case("plan_items", GridRule::Blocks::PlanItems)
          .Case("output_rows", GridRule::Blocks::OutputRows)
          .Case("new_tokens", GridRule::Blocks::NewTokens)
          .Case("key_blocks", GridRule::Blocks::KeyBlocks)
          .Default(std::nullopt);
  if (gridDict && !parsedBlocks)
    grid.fail("blocks", "is not a grid rule");
  contract.grid.blocks = parsedBlocks.value_or(GridRule::Blocks::QueryBlocks);
  contract.grid.timesSplits = grid.boolean("times_splits");
  contract.grid.persistent = grid.boolean("persistent", /*required=*/false);
  if (auto upTo = grid.get<IntegerAttr>("persistent_up_to_kv_len",
                                        /*required=*/false))
    contract.grid.persistentUpToKvLen = upTo.getInt();

  contract.packsQueryHeads = read.boolean("packs_query_heads");
  contract.ragged = read.boolean("ragged", /*required=*/false);
  contract.clusterSplits = read.boolean("cluster_splits", /*required=*/false);
  contract.targets = read.strings("targets", /*required=*/false);
  contract.math = read.optionalString("math");
  if (auto maps = read.get<ArrayAttr>("tensor_maps", /*required=*/false)) {
    for (Attribute element : maps) {
      auto mapDict = dyn_cast<DictionaryAttr>(element);
      FieldReader map = read.nested(mapDict, "tensor_maps");
      if (!mapDict)
        read.fail("tensor_maps", "holds a non-dictionary");
      TensorMapFacts facts;
      facts.argument = map.string("argument");
      facts.tensor = map.string("tensor");
      auto box = map.get<ArrayAttr>("box");
      if (box && box.size() == 2 && isa<IntegerAttr>(box[0]) &&
          isa<IntegerAttr>(box[1])) {
        facts.boxColumns = cast<IntegerAttr>(box[0]).getInt();
        facts.boxRows = cast<IntegerAttr>(box[1]).getInt();
      } else if (box) {
        map.fail("box", "is not two integers");
      }
      facts.swizzleBytes = map.integer("swizzle");
      contract.tensorMaps.push_back(std::move(facts));
    }
  }
  if (auto scheduleDict =
          read.get<DictionaryAttr>("schedule", /*required=*/false)) {
    FieldReader schedule = read.nested(scheduleDict, "schedule");
    MmaScheduleFacts facts;
    facts.variant = schedule.string("variant");
    facts.blocksPerSM = schedule.integer("blocks_per_sm");
    facts.from = schedule.string("from");
    contract.schedule = std::move(facts);
  }
  if (auto warpDict =
          read.get<DictionaryAttr>("warp_schedule", /*required=*/false)) {
    FieldReader warp = read.nested(warpDict, "warp_schedule");
    WarpScheduleFacts facts;
    facts.consumers = warp.integer("consumers");
    facts.kvBlockSize = warp.integer("kv_block_size");
    facts.overlap = warp.boolean("overlap");
    facts.pingPong = warp.boolean("ping_pong");
    facts.from = warp.string("from");
    contract.warpSchedule = std::move(facts);
  }
  contract.combineKernel = read.optionalString("combine_kernel");
  contract.appendKernel = read.optionalString("append_kernel");
  contract.why = read.strings("why", /*required=*/false);
  if (isCompanion(contract.kind)) {
    contract.dtype = read.string("dtype");
    contract.valueHeadDim = read.integer("v_head_dim");
    if (contract.kind == KernelKind::PagedAppend) {
      contract.cacheDtype = read.string("cache_dtype");
      contract.headDim = read.integer("head_dim");
    }
  }
  if (!error.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(), error);
  return contract;
}
