//===- AttentionKernel.cpp - What every attention kernel shares -*- C++ -*-===//
//
// What every kernel shares that is not a part of its own: the
// specialisation name, the argument ABI's names and kinds, the builder's
// arithmetic and the cluster reduction of split-KV kernels. The prologue,
// the score function, the online softmax and the output store are in
// Parts/ (README.md).
//
//===----------------------------------------------------------------------===//

#include "AttentionKernel.h"

#include "kiln/Dialect/Kiln/IR/KilnOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include "llvm/ADT/bit.h"
#include "llvm/Support/FormatVariadic.h"

#include <array>
#include <limits>

using namespace mlir;
using namespace mlir::kiln;
using namespace mlir::kiln::detail;

std::string KernelSpec::name() const {
  std::string result =
      llvm::formatv("kiln_attention_{0}{1}_d{2}",
                    variant.warpSpecialized ? "ws_"
                    : variant.tensorCores   ? "mma_"
                    : variant.tf32 ? (variant.tf32Split ? "3xtf32_" : "tf32_")
                                   : "",
                    getElementTypeName(problem.elementType), problem.headDim);
  if (problem.paged)
    result = "kiln_paged_attention" +
             result.substr(std::string("kiln_attention").size());
  if (variant.pass != KernelVariant::Pass::Forward)
    result = (variant.pass == KernelVariant::Pass::GradQuery
                  ? "kiln_attention_grad_q"
                  : "kiln_attention_grad_kv") +
             result.substr(std::string("kiln_attention").size());
  if (problem.valueHeadDim)
    result += llvm::formatv("_dv{0}", *problem.valueHeadDim).str();
  if (problem.causal)
    result += "_causal";
  if (problem.window)
    result += llvm::formatv("_w{0}", *problem.window).str();
  if (problem.windowRight)
    result += llvm::formatv("_r{0}", *problem.windowRight).str();
  if (problem.softcap)
    result +=
        llvm::formatv("_cap{0:x}", llvm::bit_cast<uint32_t>(*problem.softcap))
            .str();
  if (problem.maskType)
    result += "_mask" + getElementTypeName(problem.maskType);
  if (problem.biasType)
    result += "_bias" + getElementTypeName(problem.biasType);
  if (problem.maskedScore)
    result += llvm::formatv("_fill{0:x}",
                            llvm::bit_cast<uint32_t>(*problem.maskedScore))
                  .str();
  if (problem.ragged)
    result += problem.paged ? "_ragged" : "_packed";
  if (problem.fp8Cache)
    result += problem.perHeadScales ? "_kvf8h" : "_kvf8";
  if (problem.scaleFactor)
    result += problem.perHeadScaleFactor ? "_sfh" : "_sf";
  if (problem.lse)
    result += "_lse";
  // Staged terms: a one-row mask or bias takes a one-row tile.
  if (variant.warpSpecialized && variant.stagedTerms) {
    result += "_st";
    if (problem.maskType && problem.maskOneRow)
      result += "k";
    if (problem.biasType && problem.biasOneRow)
      result += "b";
  }
  return result;
}

SmallVector<std::string> AttentionKernelBuilder::argumentNames() const {
  if (spec.problem.paged) {
    SmallVector<std::string> names = {"q",       "key_cache", "value_cache",
                                      "out",     "page_table", "kv_lens"};
    // Ragged sites: the packed queries' offsets and the launch's plan;
    // batch is 1 and q_len is total_q (the packed rows as one sequence),
    // and the sequences are counted apart.
    if (spec.problem.ragged)
      names.append({"q_offsets", "plan"});
    names.append({"batch", "q_heads", "kv_heads", "q_len", "max_pages",
                  "num_pages", "page_size"});
    if (spec.problem.ragged)
      names.push_back("sequences");
    names.push_back("scale");
    for (const char *tensor : {"q", "key_cache", "value_cache", "out"}) {
      bool cache = tensor[0] == 'k' || tensor[0] == 'v';
      for (const char *axis : cache ? std::array{"page", "slot", "head"}
                                    : std::array{"batch", "head", "seq"})
        names.push_back(llvm::formatv("{0}_stride_{1}", tensor, axis));
    }
    names.push_back("page_table_stride_batch");
    if (spec.launch.splitKV)
      names.append({"num_splits", "workspace"});
    if (spec.problem.fp8Cache)
      names.append({"k_scale", "v_scale"});
    return names;
  }
  SmallVector<std::string> names = {"q", "k", "v", "out"};
  // Packed sites: the offsets of the packed keys and queries and the
  // launch's plan; batch is 1, q_len total_q and kv_len total_kv (the
  // packed rows as one sequence), and the sequences are counted apart.
  if (spec.problem.ragged)
    names.append({"kv_offsets", "q_offsets", "plan"});
  if (spec.problem.maskType)
    names.push_back("mask");
  if (spec.problem.biasType)
    names.push_back("bias");
  for (const char *name : {"batch", "q_heads", "kv_heads", "q_len", "kv_len"})
    names.push_back(name);
  if (spec.problem.ragged)
    names.push_back("sequences");
  names.push_back("scale");
  for (const char *tensor : {"q", "k", "v", "out"})
    for (const char *axis : {"batch", "head", "seq"})
      names.push_back(llvm::formatv("{0}_stride_{1}", tensor, axis));
  for (auto [present, tensor] :
       {std::pair{bool(spec.problem.maskType), "mask"},
        std::pair{bool(spec.problem.biasType), "bias"}})
    if (present)
      for (const char *axis : {"batch", "head", "q", "k"})
        names.push_back(llvm::formatv("{0}_stride_{1}", tensor, axis));
  if (spec.launch.splitKV)
    names.append({"num_splits", "workspace"});
  if (spec.variant.warpSpecialized)
    names.append({"q_map", "k_map", "v_map"});
  if (spec.variant.stagedTerms) {
    if (spec.problem.maskType)
      names.push_back("mask_map");
    if (spec.problem.biasType)
      names.push_back("bias_map");
  }
  if (spec.problem.scaleFactor)
    names.push_back("scale_factor");
  if (spec.problem.lse)
    names.push_back("lse");
  return names;
}

SmallVector<std::string> AttentionKernelBuilder::argumentKinds() const {
  if (spec.problem.paged) {
    SmallVector<std::string> kinds(spec.problem.ragged ? 8 : 6, "pointer");
    kinds.append(spec.problem.ragged ? 8 : 7, "i32");
    kinds.push_back("f32");
    kinds.append(13, "i64");
    if (spec.launch.splitKV)
      kinds.append({"i32", "pointer"});
    if (spec.problem.fp8Cache)
      kinds.append({"pointer", "pointer"});
    return kinds;
  }
  int64_t numPointers = 4 + 3 * spec.problem.ragged +
                        bool(spec.problem.maskType) +
                        bool(spec.problem.biasType);
  SmallVector<std::string> kinds(numPointers, "pointer");
  kinds.append(spec.problem.ragged ? 6 : 5, "i32");
  kinds.push_back("f32");
  kinds.append(
      12 + 4 * (bool(spec.problem.maskType) + bool(spec.problem.biasType)),
      "i64");
  if (spec.launch.splitKV)
    kinds.append({"i32", "pointer"});
  if (spec.variant.warpSpecialized)
    kinds.append(3, "tensor_map");
  if (spec.variant.stagedTerms)
    kinds.append(bool(spec.problem.maskType) + bool(spec.problem.biasType),
                 "tensor_map");
  if (spec.problem.scaleFactor)
    kinds.push_back("pointer");
  if (spec.problem.lse)
    kinds.push_back("pointer");
  return kinds;
}

GridRule AttentionKernelBuilder::gridRule() const {
  assert((!spec.problem.ragged || spec.launch.packQueryHeads) &&
         "ragged kernels pack query heads");
  GridRule rule = attentionGridRule(spec.problem.ragged,
                                    spec.launch.packQueryHeads,
                                    spec.launch.splitKV);
  if (spec.variant.pass == KernelVariant::Pass::GradKeyValue)
    rule.blocks = GridRule::Blocks::KeyBlocks;
  rule.persistent = spec.variant.persistent;
  rule.persistentUpToKvLen =
      spec.variant.persistent ? spec.variant.persistentUpToKeys : 0;
  return rule;
}

KernelContract AttentionKernelBuilder::contract() const {
  KernelContract contract;
  contract.kind = spec.problem.paged ? KernelKind::PagedAttention
                                     : KernelKind::Attention;
  if (spec.variant.pass == KernelVariant::Pass::GradQuery)
    contract.kind = KernelKind::AttentionGradQuery;
  if (spec.variant.pass == KernelVariant::Pass::GradKeyValue)
    contract.kind = KernelKind::AttentionGradKeyValue;
  contract.threadsPerBlock = threadsPerBlock();
  contract.rowsPerBlock = rowsPerBlock();
  contract.kvBlockSize = kvBlockSize();
  contract.staticSharedBytes = sharedBytes();
  contract.dynamicSharedBytes = dynamicSharedBytes();
  contract.setArguments(argumentNames(), argumentKinds());
  contract.grid = gridRule();
  contract.packsQueryHeads = packsQueryHeads();
  contract.ragged = spec.problem.ragged;
  contract.clusterSplits = spec.launch.clusterSplits;
  contract.tensorMaps = tensorMaps();
  if (spec.variant.tf32)
    contract.math = spec.variant.tf32Split ? "3xtf32" : "tf32";
  return contract;
}

Value KernelBuilderBase::constIndex(int64_t value) {
  return arith::ConstantIndexOp::create(*b, value);
}
Value KernelBuilderBase::constF32(float value) {
  return arith::ConstantOp::create(*b, b->getF32FloatAttr(value));
}
Value KernelBuilderBase::toIndex(Value v) {
  return arith::IndexCastOp::create(*b, b->getIndexType(), v);
}
Value KernelBuilderBase::toI32(Value v) {
  return arith::IndexCastOp::create(*b, b->getI32Type(), v);
}
Value KernelBuilderBase::toI64(Value v) {
  return arith::IndexCastOp::create(*b, b->getI64Type(), v);
}
Value KernelBuilderBase::divU32(Value x, Value y) {
  return toIndex(arith::DivUIOp::create(*b, toI32(x), toI32(y)));
}
Value KernelBuilderBase::remU32(Value x, Value y) {
  return toIndex(arith::RemUIOp::create(*b, toI32(x), toI32(y)));
}
Value KernelBuilderBase::ceilDivU32(Value x, Value y) {
  return toIndex(arith::CeilDivUIOp::create(*b, toI32(x), toI32(y)));
}
Value KernelBuilderBase::add(Value x, Value y) {
  return arith::AddIOp::create(*b, x, y);
}
Value KernelBuilderBase::sub(Value x, Value y) {
  return arith::SubIOp::create(*b, x, y);
}
Value KernelBuilderBase::mul(Value x, Value y) {
  return arith::MulIOp::create(*b, x, y);
}
Value KernelBuilderBase::fadd(Value x, Value y) {
  return arith::AddFOp::create(*b, x, y);
}
Value KernelBuilderBase::fmul(Value x, Value y) {
  return arith::MulFOp::create(*b, x, y);
}
Value KernelBuilderBase::fmax(Value x, Value y) {
  return arith::MaximumFOp::create(*b, x, y);
}

void KernelBuilderBase::ifThen(Value condition,
                               llvm::function_ref<void()> body) {
  auto ifOp = scf::IfOp::create(*b, condition, /*withElse=*/false);
  OpBuilder::InsertionGuard guard(*b);
  b->setInsertionPointToStart(&ifOp.getThenRegion().front());
  body();
}

void KernelBuilderBase::ifBelow(Value index, int64_t bound,
                                llvm::function_ref<void()> body) {
  ifThen(arith::CmpIOp::create(*b, arith::CmpIPredicate::ult, index,
                               constIndex(bound)),
         body);
}

Value KernelBuilderBase::dynamicShared() {
  auto sharedPtr = LLVM::LLVMPointerType::get(b->getContext(), 3);
  return LLVM::AddressOfOp::create(*b, sharedPtr, kDynamicSharedName);
}

Value KernelBuilderBase::sharedByteOffset(Value base, int64_t bytes) {
  auto sharedPtr = LLVM::LLVMPointerType::get(b->getContext(), 3);
  return LLVM::GEPOp::create(*b, sharedPtr, b->getI8Type(), base,
                             ArrayRef<LLVM::GEPArg>{int32_t(bytes)});
}

SmallVector<Value>
KernelBuilderBase::ifElse(Value condition, TypeRange types,
                          llvm::function_ref<SmallVector<Value>()> thenValues,
                          llvm::function_ref<SmallVector<Value>()> elseValues) {
  assert((elseValues || types.empty()) && "results need an else");
  bool withElse = static_cast<bool>(elseValues);
  auto ifOp = scf::IfOp::create(*b, types, condition, withElse);
  OpBuilder::InsertionGuard guard(*b);
  b->setInsertionPointToStart(&ifOp.getThenRegion().front());
  SmallVector<Value> results = thenValues();
  if (!types.empty())
    scf::YieldOp::create(*b, results);
  if (withElse) {
    b->setInsertionPointToStart(&ifOp.getElseRegion().front());
    results = elseValues();
    if (!types.empty())
      scf::YieldOp::create(*b, results);
  }
  return SmallVector<Value>(ifOp.getResults());
}

scf::ForOp KernelBuilderBase::forLoop(
    Value begin, Value end, Value step, ValueRange init,
    llvm::function_ref<SmallVector<Value>(Value, ValueRange)> body) {
  ImplicitLocOpBuilder *outer = b;
  return scf::ForOp::create(
      *b, begin, end, step, init,
      [&](OpBuilder &nested, Location loc, Value iv, ValueRange carried) {
        ImplicitLocOpBuilder inner(loc, nested);
        b = &inner;
        scf::YieldOp::create(inner, body(iv, carried));
        b = outer;
      });
}

Value KernelBuilderBase::exp2(Value x) {
  return LLVM::CallIntrinsicOp::create(
             *b, b->getF32Type(),
             b->getStringAttr("llvm.nvvm.ex2.approx.ftz.f32"), ValueRange{x})
      .getResult(0);
}

Value KernelBuilderBase::log2(Value x) {
  return LLVM::CallIntrinsicOp::create(
             *b, b->getF32Type(), b->getStringAttr("llvm.nvvm.lg2.approx.f"),
             ValueRange{x})
      .getResult(0);
}

Value KernelBuilderBase::tanh(Value x) {
  Value twoXLog2e = fmul(x, constF32(2.0f * 1.4426950408889634f));
  Value e = exp2(twoXLog2e);
  Value ratio =
      arith::DivFOp::create(*b, constF32(2.0f), fadd(e, constF32(1.0f)));
  return arith::SubFOp::create(*b, constF32(1.0f), ratio);
}

Value KernelBuilderBase::loadGlobalAsF32(Value base, Type elementType,
                                         Value offset) {
  auto ptrType = LLVM::LLVMPointerType::get(b->getContext(), 1);
  Value address =
      LLVM::GEPOp::create(*b, ptrType, elementType, base, ValueRange{offset});
  Value loaded = LLVM::LoadOp::create(*b, elementType, address);
  if (elementType.isF32() || elementType.isInteger(1))
    return loaded;
  return arith::ExtFOp::create(*b, b->getF32Type(), loaded);
}

std::pair<Value, Value> AttentionKernelBuilder::packedRow(Value rowInBlock) {
  // In 32 bits (q_len · group fits, as the grid's x does): a 64-bit
  // division is a branch and twice the instructions, and the kernels take
  // this for every row a thread copies or computes.
  Value pair = add(firstPackedRow, rowInBlock);
  Value query = divU32(pair, group);
  Value head = add(mul(kvHead, group), remU32(pair, group));
  return {query, head};
}

void mlir::kiln::detail::declareDynamicShared(OpBuilder &moduleBuilder,
                                              Location loc) {
  Operation *module = moduleBuilder.getInsertionBlock()->getParentOp();
  if (SymbolTable::lookupSymbolIn(module, kDynamicSharedName))
    return;
  auto arrayType =
      LLVM::LLVMArrayType::get(IntegerType::get(module->getContext(), 8), 0);
  LLVM::GlobalOp::create(moduleBuilder, loc, arrayType, /*isConstant=*/false,
                         LLVM::Linkage::External, kDynamicSharedName,
                         Attribute(), /*alignment=*/1024, /*addrSpace=*/3);
}

Value KernelBuilderBase::inlinePtx(Type resultType, ValueRange operands,
                                   StringRef text, StringRef constraints) {
  MLIRContext *ctx = b->getContext();
  auto asmOp = LLVM::InlineAsmOp::create(
      *b, resultType ? resultType : LLVM::LLVMVoidType::get(ctx), operands,
      text, constraints, /*has_side_effects=*/true, /*is_align_stack=*/false,
      LLVM::tailcallkind::TailCallKind::None,
      LLVM::AsmDialectAttr::get(ctx, LLVM::AsmDialect::AD_ATT),
      /*operand_attrs=*/ArrayAttr());
  return resultType ? asmOp.getRes() : Value();
}

Value KernelBuilderBase::butterfly(Value value, bool isMax,
                                   int32_t firstOffset) {
  for (int32_t offset = firstOffset; offset > 0; offset /= 2) {
    Value other = gpu::ShuffleOp::create(*b, value, offset, kWarpSize,
                                         gpu::ShuffleMode::XOR)
                      .getShuffleResult();
    value = isMax ? fmax(value, other) : fadd(value, other);
  }
  return value;
}

Value AttentionKernelBuilder::tensorBase(ArrayRef<Value> tensorStrides,
                                         Value headIndex, Value firstRow) {
  // Ragged sites: the sequence starts at its first packed row. (The head's
  // term is built first, as the uniform form always built it.)
  Value head = mul(toI64(headIndex), tensorStrides[1]);
  if (!firstRow)
    firstRow = firstRowOfSequence;
  Value sequence = spec.problem.ragged
                       ? mul(toI64(firstRow), tensorStrides[2])
                       : mul(toI64(batch), tensorStrides[0]);
  return add(sequence, head);
}

Value AttentionKernelBuilder::partialRows() {
  return mul(mul(batchSize, numQueryHeads), totalQueries);
}

Value AttentionKernelBuilder::partialRow(Value rowHead, Value query) {
  // Rows [batch, q_heads, q_len]; a ragged site's are [q_heads, total_q]
  // (batch is 1 and q_len total_q), its queries from the sequence's first
  // packed row.
  Value sequence = batch;
  if (spec.problem.ragged) {
    sequence = constIndex(0);
    query = add(firstRowOfSequence, query);
  }
  return add(mul(add(mul(sequence, numQueryHeads), rowHead), totalQueries),
             query);
}
