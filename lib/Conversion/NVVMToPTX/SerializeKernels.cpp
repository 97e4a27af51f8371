//===- SerializeKernels.cpp - gpu.modules to PTX, a kernel at a time ------===//
//
// The NVPTX back end compiles an LLVM module on one thread, and a package's
// gpu.module holds every kernel of a target (the portable and the
// warp-specialised attention kernel, split-KV combines, backward passes), so
// `gpu-module-to-binary` spends the sum of the kernels' times. This pass
// compiles each kernel from a module of its own, all of them at once on the
// context's threads, and joins the kernels' PTX back into one text per
// target, as the whole module would have given it.
//
//===----------------------------------------------------------------------===//

#include "kiln/Conversion/Passes.h"

#include "mlir/Dialect/GPU/IR/CompilationInterfaces.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/IR/Threading.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <cstring>
#include <optional>

namespace mlir::kiln {
#define GEN_PASS_DEF_SERIALIZEKERNELS
#include "kiln/Conversion/Passes.h.inc"
} // namespace mlir::kiln

using namespace mlir;

namespace {

/// What the NVPTX back end writes for a module with one kernel: the header
/// (version, target, address size), the kernel's `.globl` comment, the
/// module-scope declarations one per line, then the kernel's entry.
struct KernelPTX {
  StringRef header;
  StringRef globlComment;
  SmallVector<StringRef> declarations;
  StringRef entry;
};

bool isEntryLine(StringRef line) {
  return line.starts_with(".visible .entry ") ||
         line.starts_with(".entry ") || line.starts_with(".weak .entry ");
}

/// The name a module-scope declaration line declares (the identifier before
/// its array bounds, initializer or semicolon).
StringRef declaredName(StringRef line) {
  StringRef head = line.take_until([](char c) {
    return c == '[' || c == '=' || c == ';';
  });
  head = head.rtrim();
  size_t space = head.find_last_of(" \t");
  return space == StringRef::npos ? head : head.drop_front(space + 1);
}

/// `ptx` read as the back end's text for a one-kernel module, or nothing
/// where it holds anything else (a device function, a declaration over
/// several lines, a second entry).
std::optional<KernelPTX> readKernelPTX(StringRef ptx) {
  KernelPTX kernel;
  size_t addressSize = ptx.find("\n.address_size ");
  if (addressSize == StringRef::npos)
    return std::nullopt;
  size_t headerEnd = ptx.find('\n', addressSize + 1);
  if (headerEnd == StringRef::npos)
    return std::nullopt;
  // The header and the blank line after it.
  while (headerEnd + 1 < ptx.size() && ptx[headerEnd + 1] == '\n')
    ++headerEnd;
  kernel.header = ptx.take_front(headerEnd + 1);
  StringRef rest = ptx.drop_front(headerEnd + 1);

  StringRef line;
  std::tie(line, rest) = rest.split('\n');
  if (!line.trim().starts_with("// .globl"))
    return std::nullopt;
  kernel.globlComment = StringRef(line.data(), line.size() + 1);
  while (!rest.empty()) {
    StringRef remaining = rest;
    std::tie(line, rest) = rest.split('\n');
    if (isEntryLine(line)) {
      kernel.entry = remaining;
      break;
    }
    StringRef trimmed = line.trim();
    if (trimmed.empty())
      continue;
    bool declaration = !trimmed.starts_with("//") && trimmed.ends_with(";") &&
                       trimmed.starts_with(".");
    if (!declaration && !trimmed.starts_with("//"))
      return std::nullopt;
    kernel.declarations.push_back(line);
  }
  if (kernel.entry.empty())
    return std::nullopt;
  // One entry, and nothing at module scope after it.
  for (StringRef entryLine : llvm::drop_begin(llvm::split(kernel.entry, '\n')))
    if (isEntryLine(entryLine) || entryLine.trim().starts_with("// .globl"))
      return std::nullopt;
  return kernel;
}

/// The PTX of a module holding the kernels whose one-kernel PTX texts are
/// `parts` (in the module's order): the header once, every declaration
/// once (in the order first met), a blank line, and each kernel's `.globl`
/// comment and entry, which is how the back end writes such a module. None
/// where a text is not as readKernelPTX expects, the headers differ, or two
/// parts declare one name differently.
std::optional<std::string> joinKernelPTX(ArrayRef<std::string> parts) {
  SmallVector<KernelPTX> kernels;
  for (const std::string &part : parts) {
    std::optional<KernelPTX> kernel = readKernelPTX(part);
    if (!kernel || (!kernels.empty() && kernel->header != kernels[0].header))
      return std::nullopt;
    kernels.push_back(*kernel);
  }
  if (kernels.empty())
    return std::nullopt;

  std::string ptx = kernels[0].header.str();
  ptx += kernels[0].globlComment;
  llvm::StringSet<> linesSeen;
  llvm::StringMap<StringRef> declarationOfName;
  for (const KernelPTX &kernel : kernels) {
    for (StringRef line : kernel.declarations) {
      if (!linesSeen.insert(line).second)
        continue;
      if (!line.trim().starts_with("//")) {
        auto [known, inserted] =
            declarationOfName.try_emplace(declaredName(line), line);
        if (!inserted && known->second != line)
          return std::nullopt;
      }
      ptx += line;
      ptx += '\n';
    }
  }
  ptx += '\n';
  for (auto [index, kernel] : llvm::enumerate(kernels)) {
    if (index > 0)
      ptx += kernel.globlComment;
    // Block labels carry the function's number in its module ($L__BB0_3
    // alone, $L__BB2_3 as the third function): numbered as the whole
    // module numbers them (labels are local to their function, so this
    // only keeps the text what the whole module gives).
    std::string label = "$L__BB" + std::to_string(index) + "_";
    StringRef entry = kernel.entry;
    while (!entry.empty()) {
      size_t at = entry.find("$L__BB0_");
      ptx += entry.take_front(at);
      if (at == StringRef::npos)
        break;
      ptx += label;
      entry = entry.drop_front(at + strlen("$L__BB0_"));
    }
  }
  return ptx;
}

bool isKernel(Operation &op) {
  return op.hasAttr(gpu::GPUDialect::getKernelFuncAttrName()) ||
         op.hasAttr(NVVM::NVVMDialect::getKernelFuncAttrName());
}

/// A module placed after `gpuModule`, with its attributes, holding the
/// kernel `kernel`, the module's ops that are no symbols, and the symbols
/// these use (directly or through other symbols), in `gpuModule`'s order.
/// Copying only those keeps the work linear in the module's size, however
/// many kernels it holds.
gpu::GPUModuleOp kernelModule(gpu::GPUModuleOp gpuModule,
                              SymbolTable &symbols, Operation *kernel,
                              size_t kernelIndex, OpBuilder &builder) {
  // The kernel, and any op of the module that is no symbol (it belongs to
  // every kernel's module), with what they use.
  llvm::SmallPtrSet<Operation *, 8> needed = {kernel};
  SmallVector<Operation *> pending = {kernel};
  for (Operation &op : gpuModule.getBody()->getOperations())
    if (!isa<SymbolOpInterface>(op) && needed.insert(&op).second)
      pending.push_back(&op);
  while (!pending.empty()) {
    Operation *user = pending.pop_back_val();
    std::optional<SymbolTable::UseRange> uses = SymbolTable::getSymbolUses(user);
    if (!uses)
      continue;
    for (const SymbolTable::SymbolUse &use : *uses) {
      Operation *used = symbols.lookup(use.getSymbolRef().getRootReference());
      if (used && needed.insert(used).second)
        pending.push_back(used);
    }
  }
  builder.setInsertionPointAfter(gpuModule);
  auto copy = cast<gpu::GPUModuleOp>(builder.cloneWithoutRegions(*gpuModule));
  copy.setName((gpuModule.getName() + "_kernel" + Twine(kernelIndex)).str());
  copy.getBodyRegion().emplaceBlock();
  OpBuilder inside = OpBuilder::atBlockEnd(copy.getBody());
  for (Operation &op : gpuModule.getBody()->getOperations())
    if (needed.contains(&op))
      inside.clone(op);
  return copy;
}

struct SerializeKernelsPass
    : public kiln::impl::SerializeKernelsBase<SerializeKernelsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable symbols(module);
    auto symbolTable = [&]() -> SymbolTable * { return &symbols; };
    gpu::TargetOptions options(/*toolkitPath=*/{}, /*librariesToLink=*/{},
                               /*cmdOptions=*/{}, /*elfSection=*/{},
                               gpu::CompilationTarget::Assembly, symbolTable);
    for (gpu::GPUModuleOp gpuModule :
         llvm::to_vector(module.getOps<gpu::GPUModuleOp>()))
      if (failed(serialize(gpuModule, options)))
        return signalPassFailure();
  }

  LogicalResult serialize(gpu::GPUModuleOp gpuModule,
                          const gpu::TargetOptions &options) {
    ArrayAttr targetAttrs = gpuModule.getTargetsAttr();
    if (!targetAttrs || targetAttrs.empty())
      return gpuModule.emitError("the module has no target attributes");
    SmallVector<gpu::TargetAttrInterface> targets;
    for (Attribute attr : targetAttrs) {
      auto target = dyn_cast<gpu::TargetAttrInterface>(attr);
      if (!target)
        return gpuModule.emitError("a target of the module (")
               << attr << ") cannot serialise it";
      targets.push_back(target);
    }

    SmallVector<Operation *> kernels;
    for (Operation &op : gpuModule.getBody()->getOperations())
      if (isKernel(op))
        kernels.push_back(&op);
    OpBuilder builder(gpuModule);
    SmallVector<gpu::GPUModuleOp> parts;
    if (kernels.size() > 1) {
      SymbolTable symbols(gpuModule);
      for (auto [index, kernel] : llvm::enumerate(kernels))
        parts.push_back(kernelModule(gpuModule, symbols, kernel, index, builder));
    }
    llvm::scope_exit eraseParts([&] {
      for (gpu::GPUModuleOp part : parts)
        part.erase();
    });

    // Every (module, target) pair at once: each part for each target, or
    // the whole module for each target where it has one kernel.
    SmallVector<gpu::GPUModuleOp> sources = parts;
    if (sources.empty())
      sources.push_back(gpuModule);
    size_t numJobs = sources.size() * targets.size();
    SmallVector<std::string> texts(numJobs);
    if (failed(failableParallelForEachN(
            &getContext(), 0, numJobs, [&](size_t job) -> LogicalResult {
              return compile(sources[job % sources.size()],
                             targets[job / sources.size()], options, texts[job]);
            })))
      return failure();

    SmallVector<Attribute> objects;
    for (auto [targetIndex, target] : llvm::enumerate(targets)) {
      ArrayRef<std::string> targetTexts =
          ArrayRef(texts).slice(targetIndex * sources.size(), sources.size());
      std::optional<std::string> ptx;
      if (parts.empty())
        ptx = targetTexts.front();
      else
        ptx = joinKernelPTX(targetTexts);
      if (!ptx) {
        // The kernels' texts hold something the join does not know: the
        // whole module, as the back end gives it.
        ptx.emplace();
        if (failed(compile(gpuModule, target, options, *ptx)))
          return failure();
      }
      SmallVector<char, 0> bytes(ptx->begin(), ptx->end());
      Attribute object = target.createObject(gpuModule, bytes, options);
      if (!object)
        return gpuModule.emitError("the PTX object could not be created");
      objects.push_back(object);
    }
    builder.setInsertionPointAfter(gpuModule);
    gpu::BinaryOp::create(builder, gpuModule.getLoc(), gpuModule.getName(),
                          /*offloadingHandler=*/nullptr,
                          builder.getArrayAttr(objects));
    gpuModule.erase();
    return success();
  }

  /// `source` compiled for `target` into `ptx`.
  static LogicalResult compile(gpu::GPUModuleOp source,
                               gpu::TargetAttrInterface target,
                               const gpu::TargetOptions &options,
                               std::string &ptx) {
    std::optional<SmallVector<char, 0>> serialized =
        target.serializeToObject(source, options);
    if (!serialized)
      return source.emitError("the NVPTX back end could not compile ")
             << source.getName();
    ptx.assign(serialized->begin(), serialized->end());
    // The back end's text may end with a null byte for the driver.
    while (!ptx.empty() && ptx.back() == '\0')
      ptx.pop_back();
    return success();
  }
};

} // namespace
