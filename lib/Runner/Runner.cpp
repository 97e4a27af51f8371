//===- Runner.cpp - Run Kiln and TOSA functions on the CPU ------*- C++ -*-===//
//
// Specialise, lower to LLVM, JIT and call. Arguments and results cross the
// boundary as memref descriptors through the ExecutionEngine's packed
// wrapper (`_mlir_<name>`): each descriptor field is passed by address.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runner/Runner.h"

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/Transforms/Passes.h"

#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/BufferizationToMemRef/BufferizationToMemRef.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MathToLibm/MathToLibm.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/TosaToArith/TosaToArith.h"
#include "mlir/Conversion/TosaToLinalg/TosaToLinalg.h"
#include "mlir/Conversion/TosaToSCF/TosaToSCF.h"
#include "mlir/Conversion/TosaToTensor/TosaToTensor.h"
#include "mlir/Dialect/Arith/Transforms/BufferDeallocationOpInterfaceImpl.h"
#include "mlir/Dialect/Arith/Transforms/BufferViewFlowOpInterfaceImpl.h"
#include "mlir/Dialect/Arith/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/FuncBufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/ControlFlow/Transforms/BufferDeallocationOpInterfaceImpl.h"
#include "mlir/Dialect/ControlFlow/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Linalg/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Linalg/Transforms/SubsetInsertionOpInterfaceImpl.h"
#include "mlir/Dialect/MemRef/Transforms/AllocationOpInterfaceImpl.h"
#include "mlir/Dialect/MemRef/Transforms/BufferViewFlowOpInterfaceImpl.h"
#include "mlir/Dialect/SCF/Transforms/BufferDeallocationOpInterfaceImpl.h"
#include "mlir/Dialect/SCF/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Tensor/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Tensor/Transforms/SubsetInsertionOpInterfaceImpl.h"
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/Dialect/Tosa/Transforms/Passes.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ExecutionEngine/Orc/Mangling.h"
#include "llvm/Support/TargetSelect.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

using namespace mlir;
using namespace mlir::kiln;

static void registerCPUInterfaces(MLIRContext *context);

static func::FuncOp lookupFunction(ModuleOp module, StringRef funcName) {
  auto func = module.lookupSymbol<func::FuncOp>(funcName);
  if (!func || func.isExternal()) {
    emitError(module.getLoc()) << "no function @" << funcName
                               << " with a body in the module";
    return nullptr;
  }
  return func;
}

LogicalResult mlir::kiln::specializeFunction(ModuleOp module,
                                             StringRef funcName,
                                             ArrayRef<HostTensor> inputs) {
  func::FuncOp func = lookupFunction(module, funcName);
  if (!func)
    return failure();
  if (func.getNumArguments() != inputs.size())
    return func.emitError() << "@" << funcName << " takes "
                            << func.getNumArguments() << " arguments, "
                            << inputs.size() << " inputs given";
  Block &entry = func.getBody().front();
  SmallVector<Type> argTypes;
  for (auto [index, input] : llvm::enumerate(inputs)) {
    auto type = dyn_cast<RankedTensorType>(func.getArgumentTypes()[index]);
    if (!type)
      return func.emitError() << "argument " << index << " has type "
                              << func.getArgumentTypes()[index]
                              << "; only ranked tensors are supported";
    auto specialized =
        RankedTensorType::get(input.shape, input.elementType);
    if (type.getElementType() != input.elementType ||
        failed(verifyCompatibleShape(type, specialized)))
      return func.emitError() << "argument " << index << " has type " << type
                              << ", the input is " << input.getTypeString();
    argTypes.push_back(specialized);
    BlockArgument arg = entry.getArgument(index);
    if (type == specialized)
      continue;
    // TOSA and kiln ops take the refined type (shape inference continues
    // from there); any other user keeps the declared type through a cast.
    arg.setType(specialized);
    OpBuilder builder = OpBuilder::atBlockBegin(&entry);
    Value cast;
    for (OpOperand &use : llvm::make_early_inc_range(arg.getUses())) {
      Dialect *dialect = use.getOwner()->getDialect();
      if (dialect && (isa<tosa::TosaDialect>(dialect) ||
                      isa<KilnDialect>(dialect)))
        continue;
      if (!cast)
        cast = tensor::CastOp::create(builder, arg.getLoc(), type, arg);
      if (use.getOwner() != cast.getDefiningOp())
        use.set(cast);
    }
  }
  func.setFunctionType(
      FunctionType::get(module.getContext(), argTypes,
                        func.getFunctionType().getResults()));

  PassManager pm(module.getContext());
  pm.addPass(createCanonicalizerPass());
  pm.addNestedPass<func::FuncOp>(tosa::createTosaInferShapesPass());
  pm.addPass(createCanonicalizerPass());
  return pm.run(module);
}

LogicalResult mlir::kiln::lowerToLLVM(ModuleOp module,
                                      const CPURunOptions &options) {
  registerCPUInterfaces(module.getContext());
  PassManager pm(module.getContext());
  if (options.attentionLowering == AttentionLowering::Tiled) {
    KilnTileAttentionOptions tileOptions;
    tileOptions.kvBlockSize = options.tiling.kvBlockSize;
    tileOptions.qBlockSize = options.tiling.qBlockSize;
    tileOptions.numSplits = options.tiling.numSplits;
    pm.addPass(createKilnTileAttention(tileOptions));
  } else {
    pm.addPass(createKilnDecomposeAttention());
  }

  TosaToLinalgOptions tosaToLinalg;
  tosaToLinalg.disableTosaDecompositions = false;
  tosaToLinalg.aggressiveReduceConstant = false;
  // No TOSA profile validation: the CPU path runs whatever the importer
  // produced (i64 casts, i1 gathers), not only what a profile allows.
  tosa::addTosaToLinalgPasses(pm, tosaToLinalg, TosaToLinalgNamedOptions(),
                              std::nullopt);
  pm.addNestedPass<func::FuncOp>(createTosaToArithPass());
  pm.addNestedPass<func::FuncOp>(createTosaToTensorPass());
  pm.addNestedPass<func::FuncOp>(createTosaToSCFPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());

  pm.addPass(bufferization::createEmptyTensorEliminationPass());
  pm.addPass(bufferization::createEmptyTensorToAllocTensorPass());
  bufferization::OneShotBufferizePassOptions bufferize;
  bufferize.bufferizeFunctionBoundaries = true;
  // The online-softmax loop reads the old row max after computing the new
  // one, so its iteration arguments are not always updated in place.
  bufferize.allowReturnAllocsFromLoops = true;
  bufferize.functionBoundaryTypeConversion =
      bufferization::LayoutMapOption::IdentityLayoutMap;
  pm.addPass(bufferization::createOneShotBufferizePass(bufferize));
  bufferization::BufferDeallocationPipelineOptions dealloc;
  bufferization::buildBufferDeallocationPipeline(pm, dealloc);
  pm.addPass(createConvertBufferizationToMemRefPass());

  pm.addNestedPass<func::FuncOp>(createConvertLinalgToLoopsPass());
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createSCFToControlFlowPass());
  // Half-precision arithmetic runs in f32; bf16 conversions become integer
  // code (the JIT has no __truncsfbf2 to call). The expansion comes last:
  // the passes before it insert conversions. math.powf is not expanded to
  // exp(y·log(x)), which is NaN for a negative x: it calls libm.
  // The graph's float8 conversions (QuantizeLinear, DequantizeLinear) in
  // integer arithmetic: LLVM has no float8 type.
  pm.addPass(kiln::createKilnExpandFloat8());
  arith::ArithEmulateUnsupportedFloatsOptions emulate;
  emulate.sourceTypeStrs = {"bf16", "f16"};
  pm.addPass(arith::createArithEmulateUnsupportedFloats(emulate));
  pm.addPass(math::createMathExtendToSupportedTypes());
  arith::ArithExpandOpsPassOptions expand;
  expand.includeBf16 = true;
  pm.addPass(arith::createArithExpandOpsPass(expand));
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createConvertMathToLibmPass());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertIndexToLLVMPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  pm.addPass(createCanonicalizerPass());
  return pm.run(module);
}

namespace {

/// A memref descriptor flattened into 64-bit words: allocated pointer,
/// aligned pointer, offset, sizes, strides.
struct Descriptor {
  SmallVector<uint64_t> words;

  static Descriptor forBuffer(void *data, ArrayRef<int64_t> shape) {
    Descriptor d;
    auto ptr = reinterpret_cast<uint64_t>(data);
    d.words = {ptr, ptr, 0};
    for (int64_t size : shape)
      d.words.push_back(static_cast<uint64_t>(size));
    int64_t stride = 1;
    SmallVector<uint64_t> strides(shape.size());
    for (int64_t axis = static_cast<int64_t>(shape.size()) - 1; axis >= 0;
         --axis) {
      strides[axis] = static_cast<uint64_t>(stride);
      stride *= shape[axis];
    }
    d.words.append(strides.begin(), strides.end());
    return d;
  }
};

} // namespace

/// Bufferization, deallocation and LLVM translation interfaces of the
/// dialects the CPU lowering goes through.
static void registerCPUInterfaces(MLIRContext *context) {
  DialectRegistry registry;
  arith::registerBufferizableOpInterfaceExternalModels(registry);
  arith::registerBufferDeallocationOpInterfaceExternalModels(registry);
  arith::registerBufferViewFlowOpInterfaceExternalModels(registry);
  bufferization::func_ext::registerBufferizableOpInterfaceExternalModels(
      registry);
  cf::registerBufferizableOpInterfaceExternalModels(registry);
  cf::registerBufferDeallocationOpInterfaceExternalModels(registry);
  linalg::registerBufferizableOpInterfaceExternalModels(registry);
  linalg::registerSubsetOpInterfaceExternalModels(registry);
  memref::registerAllocationOpInterfaceExternalModels(registry);
  memref::registerBufferViewFlowOpInterfaceExternalModels(registry);
  scf::registerBufferizableOpInterfaceExternalModels(registry);
  scf::registerBufferDeallocationOpInterfaceExternalModels(registry);
  tensor::registerBufferizableOpInterfaceExternalModels(registry);
  tensor::registerSubsetOpInterfaceExternalModels(registry);
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  context->appendDialectRegistry(registry);
}

/// The runtime function memref.copy lowers to for non-contiguous layouts
/// (upstream's lives in libmlir_c_runner_utils, which the JIT does not load).
extern "C" void kilnMemrefCopy(int64_t elementSize, void *sourceDescriptor,
                               void *targetDescriptor) {
  // Unranked descriptors: {rank, ranked descriptor pointer}.
  struct Unranked {
    int64_t rank;
    int64_t *descriptor;
  };
  auto *source = static_cast<Unranked *>(sourceDescriptor);
  auto *target = static_cast<Unranked *>(targetDescriptor);
  int64_t rank = source->rank;
  // Ranked descriptor words: allocated, aligned, offset, sizes, strides.
  auto *sourceData = reinterpret_cast<char *>(source->descriptor[1]);
  auto *targetData = reinterpret_cast<char *>(target->descriptor[1]);
  int64_t sourceOffset = source->descriptor[2];
  int64_t targetOffset = target->descriptor[2];
  const int64_t *sizes = source->descriptor + 3;
  const int64_t *sourceStrides = source->descriptor + 3 + rank;
  const int64_t *targetStrides = target->descriptor + 3 + rank;
  int64_t count = 1;
  for (int64_t axis = 0; axis < rank; ++axis)
    count *= sizes[axis];
  for (int64_t linear = 0; linear < count; ++linear) {
    int64_t remaining = linear, from = sourceOffset, to = targetOffset;
    for (int64_t axis = rank - 1; axis >= 0; --axis) {
      int64_t index = remaining % sizes[axis];
      remaining /= sizes[axis];
      from += index * sourceStrides[axis];
      to += index * targetStrides[axis];
    }
    std::memcpy(targetData + to * elementSize, sourceData + from * elementSize,
                elementSize);
  }
}

/// Initialises the host target once per process.
static void initializeNativeTarget() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

FailureOr<SmallVector<HostTensor>>
mlir::kiln::runOnCPU(ModuleOp module, StringRef funcName,
                     ArrayRef<HostTensor> inputs) {
  return runOnCPU(module, funcName, inputs, CPURunOptions());
}

FailureOr<SmallVector<HostTensor>>
mlir::kiln::runOnCPU(ModuleOp module, StringRef funcName,
                     ArrayRef<HostTensor> inputs,
                     const CPURunOptions &options) {
  MLIRContext *context = module.getContext();
  for (auto [index, input] : llvm::enumerate(inputs)) {
    if (!input.elementType ||
        !HostTensor::isSupportedElementType(input.elementType))
      return emitError(module.getLoc())
             << "input " << index << " has an unsupported element type";
    if (static_cast<int64_t>(input.bytes.size()) !=
        input.getNumElements() * HostTensor::getElementBytes(input.elementType))
      return emitError(module.getLoc())
             << "input " << index << " (" << input.getTypeString()
             << ") holds " << input.bytes.size() << " bytes";
  }

  registerCPUInterfaces(context);

  OwningOpRef<ModuleOp> clone = module.clone();
  if (failed(specializeFunction(*clone, funcName, inputs)))
    return failure();
  func::FuncOp func = lookupFunction(*clone, funcName);
  SmallVector<Type> resultTypes(func.getResultTypes());
  for (auto [index, type] : llvm::enumerate(resultTypes)) {
    auto tensorType = dyn_cast<RankedTensorType>(type);
    if (!tensorType ||
        !HostTensor::isSupportedElementType(tensorType.getElementType()))
      return func.emitError() << "result " << index << " has type " << type
                              << "; only ranked tensors of f32, f16, bf16, "
                                 "f8E4M3FN, i64, i32, i8 or i1 are supported";
  }
  // Every function gets a packed wrapper; only the one called needs to be
  // public.
  if (failed(lowerToLLVM(*clone, options)))
    return failure();

  initializeNativeTarget();
  ExecutionEngineOptions engineOptions;
  engineOptions.transformer =
      makeOptimizingTransformer(options.optLevel, 0, nullptr);
  auto engine = ExecutionEngine::create(*clone, engineOptions);
  if (!engine)
    return emitError(module.getLoc())
           << "cannot JIT @" << funcName << ": "
           << llvm::toString(engine.takeError());

  (*engine)->registerSymbols([](llvm::orc::MangleAndInterner interner) {
    llvm::orc::SymbolMap symbols;
    symbols[interner("memrefCopy")] = {
        llvm::orc::ExecutorAddr::fromPtr(&kilnMemrefCopy),
        llvm::JITSymbolFlags::Exported};
    return symbols;
  });

  // Inputs are copied: the function may write into its arguments.
  std::vector<std::vector<uint8_t>> argumentBuffers;
  SmallVector<Descriptor> descriptors;
  for (const HostTensor &input : inputs) {
    argumentBuffers.emplace_back(input.bytes);
    if (argumentBuffers.back().empty())
      argumentBuffers.back().resize(1);
  }
  for (auto [input, buffer] : llvm::zip(inputs, argumentBuffers))
    descriptors.push_back(Descriptor::forBuffer(buffer.data(), input.shape));

  SmallVector<void *> packedArgs;
  for (Descriptor &descriptor : descriptors)
    for (uint64_t &word : descriptor.words)
      packedArgs.push_back(&word);
  // Results come back as one struct of descriptors, all 64-bit words.
  size_t resultWords = 0;
  for (Type type : resultTypes)
    resultWords += 3 + 2 * cast<RankedTensorType>(type).getRank();
  SmallVector<uint64_t> resultStorage(std::max<size_t>(resultWords, 1), 0);
  if (resultWords)
    packedArgs.push_back(resultStorage.data());

  if (llvm::Error error = (*engine)->invokePacked(funcName, packedArgs))
    return emitError(module.getLoc())
           << "cannot call @" << funcName << ": "
           << llvm::toString(std::move(error));

  SmallVector<HostTensor> results;
  // Results may share a buffer: free each once, after every copy.
  llvm::SmallPtrSet<void *, 4> owned;
  size_t at = 0;
  for (Type type : resultTypes) {
    auto tensorType = cast<RankedTensorType>(type);
    int64_t rank = tensorType.getRank();
    auto *allocated = reinterpret_cast<uint8_t *>(resultStorage[at]);
    auto *aligned = reinterpret_cast<uint8_t *>(resultStorage[at + 1]);
    auto offset = static_cast<int64_t>(resultStorage[at + 2]);
    SmallVector<int64_t> shape, strides;
    for (int64_t axis = 0; axis < rank; ++axis) {
      shape.push_back(static_cast<int64_t>(resultStorage[at + 3 + axis]));
      strides.push_back(
          static_cast<int64_t>(resultStorage[at + 3 + rank + axis]));
    }
    at += 3 + 2 * rank;
    HostTensor result(tensorType.getElementType(), shape);
    int64_t elementBytes = HostTensor::getElementBytes(result.elementType);
    int64_t count = result.getNumElements();
    for (int64_t linear = 0; linear < count; ++linear) {
      int64_t remaining = linear, position = offset;
      for (int64_t axis = rank - 1; axis >= 0; --axis) {
        position += (remaining % shape[axis]) * strides[axis];
        remaining /= shape[axis];
      }
      std::memcpy(result.bytes.data() + linear * elementBytes,
                  aligned + position * elementBytes, elementBytes);
    }
    results.push_back(std::move(result));
    // Returned buffers belong to the caller (ownership-based deallocation
    // clones anything it does not own before returning it).
    owned.insert(allocated);
  }
  for (void *buffer : owned)
    std::free(buffer);
  return results;
}
