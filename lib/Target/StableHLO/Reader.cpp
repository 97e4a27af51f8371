//===- Reader.cpp - Parse StableHLO's printed ops ---------------*- C++ -*-===//
//
// Kiln does not link StableHLO. To read the text JAX prints, it registers a
// dialect named `stablehlo` whose ops are defined at run time (MLIR's
// ExtensibleDialect), each with a parser for the op's pretty form. A parsed
// op holds its operands, its result types and its attributes under the names
// below; the importer (ImportStableHLO.cpp) turns it into TOSA and is the
// only reader of these ops. An op this file does not define stops the parse
// with MLIR's "custom op ... is unknown" at its location.
//
// Attributes (all i64 arrays unless noted):
//   dims               broadcast_in_dim, transpose, reduce (`across
//                      dimensions`), concatenate (one element)
//   iota_dimension     iota (i64)
//   direction, compare_type   compare (strings: GE, SIGNED, ...)
//   lhs_batch, rhs_batch, lhs_contract, rhs_contract   dot_general, dot
//   starts, limits, strides   slice
//   applies            reduce (the reducer op's name, a string)
//   value              constant (the elements attribute)
//
//===----------------------------------------------------------------------===//

#include "Reader.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/ExtensibleDialect.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mlir::kiln::stablehlo_import;

MLIR_DEFINE_EXPLICIT_TYPE_ID(mlir::kiln::stablehlo_import::ReaderDialect)
MLIR_DEFINE_EXPLICIT_TYPE_ID(mlir::kiln::stablehlo_import::ChloReaderDialect)

namespace {

using Operand = OpAsmParser::UnresolvedOperand;

ParseResult parseInts(OpAsmParser &p, SmallVectorImpl<int64_t> &values) {
  return p.parseCommaSeparatedList(OpAsmParser::Delimiter::Square, [&] {
    int64_t v;
    if (p.parseInteger(v))
      return failure();
    values.push_back(v);
    return success();
  });
}

ParseResult parseNamedInts(OpAsmParser &p, StringRef keyword,
                           SmallVectorImpl<int64_t> &values) {
  return failure(p.parseKeyword(keyword) || p.parseEqual() ||
                 parseInts(p, values));
}

void addInts(OperationState &st, StringRef name, ArrayRef<int64_t> values) {
  Builder b(st.getContext());
  st.addAttribute(name, b.getDenseI64ArrayAttr(values));
}

/// `: (T1, T2) -> R` or `: T` (every operand and the result) or, for select,
/// `: Tpred, T`; chlo-style `: T -> R` too. Resolves `operands`.
ParseResult parseTypesAndResolve(OpAsmParser &p, OperationState &st,
                                 ArrayRef<Operand> operands) {
  SMLoc at = p.getCurrentLocation();
  if (p.parseOptionalAttrDict(st.attributes) || p.parseColon())
    return failure();
  SmallVector<Type> types;
  Type first;
  if (p.parseType(first))
    return failure();
  SmallVector<Type> inputs;
  Type result;
  if (auto fn = dyn_cast<FunctionType>(first)) {
    if (fn.getNumResults() != 1)
      return p.emitError(at, "expected one result type");
    inputs.assign(fn.getInputs().begin(), fn.getInputs().end());
    result = fn.getResult(0);
  } else {
    types.push_back(first);
    while (succeeded(p.parseOptionalComma())) {
      Type t;
      if (p.parseType(t))
        return failure();
      types.push_back(t);
    }
    if (succeeded(p.parseOptionalArrow())) {
      if (types.size() != 1 || p.parseType(result))
        return failure();
      inputs.assign(operands.size(), types[0]);
    } else if (types.size() == 1) {
      inputs.assign(operands.size(), types[0]);
      result = types[0];
    } else if (types.size() == 2 && operands.size() == 3) {
      inputs = {types[0], types[1], types[1]};
      result = types[1];
    } else {
      return p.emitError(at, "cannot read the operand types");
    }
  }
  if (p.resolveOperands(operands, inputs, at, st.operands))
    return failure();
  st.addTypes(result);
  return success();
}

ParseResult parseElementwise(OpAsmParser &p, OperationState &st) {
  SmallVector<Operand> operands;
  if (p.parseOperandList(operands))
    return failure();
  return parseTypesAndResolve(p, st, operands);
}

/// `%x, dims = [..] : (T) -> R`
ParseResult parseWithDims(OpAsmParser &p, OperationState &st) {
  Operand x;
  SmallVector<int64_t> dims;
  if (p.parseOperand(x) || p.parseComma() || parseNamedInts(p, "dims", dims))
    return failure();
  addInts(st, "dims", dims);
  return parseTypesAndResolve(p, st, {x});
}

ParseResult parseConstant(OpAsmParser &p, OperationState &st) {
  Attribute value;
  if (p.parseOptionalAttrDict(st.attributes) || p.parseAttribute(value))
    return failure();
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements)
    return p.emitError(p.getCurrentLocation(), "expected a tensor constant");
  st.addAttribute("value", value);
  st.addTypes(elements.getType());
  return success();
}

/// `dim = N : T`
ParseResult parseIota(OpAsmParser &p, OperationState &st) {
  int64_t dim;
  Type type;
  if (p.parseKeyword("dim") || p.parseEqual() || p.parseInteger(dim) ||
      p.parseOptionalAttrDict(st.attributes) || p.parseColonType(type))
    return failure();
  st.addAttribute("iota_dimension",
                  Builder(st.getContext()).getI64IntegerAttr(dim));
  st.addTypes(type);
  return success();
}

/// `DIR, %a, %b (, TYPE)? : ...`
ParseResult parseCompare(OpAsmParser &p, OperationState &st) {
  Builder b(st.getContext());
  StringRef direction;
  Operand lhs, rhs;
  if (p.parseKeyword(&direction) || p.parseComma() || p.parseOperand(lhs) ||
      p.parseComma() || p.parseOperand(rhs))
    return failure();
  st.addAttribute("direction", b.getStringAttr(direction));
  if (succeeded(p.parseOptionalComma())) {
    StringRef type;
    if (p.parseKeyword(&type))
      return failure();
    st.addAttribute("compare_type", b.getStringAttr(type));
  }
  return parseTypesAndResolve(p, st, {lhs, rhs});
}

/// `[..] x [..]`
ParseResult parseDimPair(OpAsmParser &p, OperationState &st, StringRef lhs,
                         StringRef rhs) {
  SmallVector<int64_t> a, b;
  if (p.parseEqual() || parseInts(p, a) || p.parseKeyword("x") ||
      parseInts(p, b))
    return failure();
  addInts(st, lhs, a);
  addInts(st, rhs, b);
  return success();
}

/// `precision = [DEFAULT, DEFAULT]`, read and dropped: Kiln's kernels take
/// their operands' element types, whatever precision XLA would have used.
ParseResult parsePrecision(OpAsmParser &p) {
  return failure(p.parseEqual() ||
                 p.parseCommaSeparatedList(OpAsmParser::Delimiter::Square, [&] {
                   StringRef name;
                   return p.parseKeyword(&name);
                 }));
}

/// `algorithm = <lhs_precision_type = bf16, accumulation_type = f32, ...>`,
/// read and dropped like the precision: the kernels multiply their operands'
/// types and accumulate in f32.
ParseResult parseAlgorithm(OpAsmParser &p) {
  if (p.parseEqual() || p.parseLess())
    return failure();
  do {
    StringRef key;
    if (p.parseKeyword(&key) || p.parseEqual())
      return failure();
    if (key.ends_with("_type")) {
      Type type;
      if (p.parseType(type))
        return failure();
      continue;
    }
    int64_t number;
    OptionalParseResult integer = p.parseOptionalInteger(number);
    if (integer.has_value()) {
      if (failed(*integer))
        return failure();
      continue;
    }
    StringRef word;
    if (p.parseKeyword(&word))
      return failure();
  } while (succeeded(p.parseOptionalComma()));
  return p.parseGreater();
}

/// `%a, %b, batching_dims = [..] x [..], contracting_dims = [..] x [..],
/// precision = [..] : (A, B) -> R`
ParseResult parseDotGeneral(OpAsmParser &p, OperationState &st) {
  Operand lhs, rhs;
  if (p.parseOperand(lhs) || p.parseComma() || p.parseOperand(rhs))
    return failure();
  bool batching = false, contracting = false;
  while (succeeded(p.parseOptionalComma())) {
    StringRef key;
    SMLoc at = p.getCurrentLocation();
    if (p.parseKeyword(&key))
      return failure();
    if (key == "batching_dims") {
      batching = true;
      if (parseDimPair(p, st, "lhs_batch", "rhs_batch"))
        return failure();
    } else if (key == "contracting_dims") {
      contracting = true;
      if (parseDimPair(p, st, "lhs_contract", "rhs_contract"))
        return failure();
    } else if (key == "precision") {
      if (parsePrecision(p))
        return failure();
    } else if (key == "algorithm") {
      if (parseAlgorithm(p))
        return failure();
    } else {
      return p.emitError(at, "dot_general: '") << key << "' is not supported";
    }
  }
  if (!batching) {
    addInts(st, "lhs_batch", {});
    addInts(st, "rhs_batch", {});
  }
  if (!contracting)
    return p.emitError(p.getCurrentLocation(),
                       "dot_general without contracting_dims");
  return parseTypesAndResolve(p, st, {lhs, rhs});
}

/// `%a, %b (, precision = [..])? : (A, B) -> R`: a matrix (or vector)
/// product, recorded as the dot_general it is.
ParseResult parseDot(OpAsmParser &p, OperationState &st) {
  Operand lhs, rhs;
  if (p.parseOperand(lhs) || p.parseComma() || p.parseOperand(rhs))
    return failure();
  if (succeeded(p.parseOptionalComma()))
    if (p.parseKeyword("precision") || parsePrecision(p))
      return failure();
  if (parseTypesAndResolve(p, st, {lhs, rhs}))
    return failure();
  auto lhsType = dyn_cast<RankedTensorType>(st.operands[0].getType());
  if (!lhsType)
    return p.emitError(p.getCurrentLocation(), "dot of an unranked tensor");
  addInts(st, "lhs_batch", {});
  addInts(st, "rhs_batch", {});
  addInts(st, "lhs_contract", {lhsType.getRank() - 1});
  addInts(st, "rhs_contract", {0});
  return success();
}

/// `(%x init: %c) applies OP across dimensions = [..] : (T, I) -> R`, or the
/// same without `applies` followed by `reducer(%a: T, %b: T) { ... }`.
ParseResult parseReduce(OpAsmParser &p, OperationState &st) {
  Builder b(st.getContext());
  SmallVector<Operand> inputs, inits;
  if (p.parseCommaSeparatedList([&] {
        Operand x, init;
        if (p.parseLParen() || p.parseOperand(x) || p.parseKeyword("init") ||
            p.parseColon() || p.parseOperand(init) || p.parseRParen())
          return failure();
        inputs.push_back(x);
        inits.push_back(init);
        return success();
      }))
    return failure();
  bool applies = succeeded(p.parseOptionalKeyword("applies"));
  if (applies) {
    StringRef name;
    if (p.parseKeyword(&name))
      return failure();
    st.addAttribute("applies", b.getStringAttr(name));
  }
  SmallVector<int64_t> dims;
  if (p.parseKeyword("across") || parseNamedInts(p, "dimensions", dims))
    return failure();
  addInts(st, "dims", dims);
  SMLoc at = p.getCurrentLocation();
  SmallVector<Type> types;
  FunctionType fn;
  if (p.parseOptionalAttrDict(st.attributes) || p.parseColonType(fn))
    return failure();
  SmallVector<Operand> all(inputs);
  all.append(inits);
  if (p.resolveOperands(all, fn.getInputs(), at, st.operands))
    return failure();
  st.addTypes(fn.getResults());
  Region *body = st.addRegion();
  if (applies)
    return success();
  SmallVector<OpAsmParser::Argument> args;
  if (p.parseKeyword("reducer"))
    return failure();
  while (succeeded(p.parseOptionalLParen())) {
    if (p.parseCommaSeparatedList([&] {
          OpAsmParser::Argument arg;
          if (p.parseArgument(arg, /*allowType=*/true))
            return failure();
          args.push_back(arg);
          return success();
        }) ||
        p.parseRParen())
      return failure();
  }
  return p.parseRegion(*body, args);
}

/// `%x [a:b(:s)?, ...] : (T) -> R`
ParseResult parseSlice(OpAsmParser &p, OperationState &st) {
  Operand x;
  SmallVector<int64_t> starts, limits, strides;
  if (p.parseOperand(x) ||
      p.parseCommaSeparatedList(OpAsmParser::Delimiter::Square, [&] {
        int64_t start, limit, stride = 1;
        if (p.parseInteger(start) || p.parseColon() || p.parseInteger(limit))
          return failure();
        if (succeeded(p.parseOptionalColon()) && p.parseInteger(stride))
          return failure();
        starts.push_back(start);
        limits.push_back(limit);
        strides.push_back(stride);
        return success();
      }))
    return failure();
  addInts(st, "starts", starts);
  addInts(st, "limits", limits);
  addInts(st, "strides", strides);
  return parseTypesAndResolve(p, st, {x});
}

/// `%a, %b, ..., dim = N : (A, B, ...) -> R`
ParseResult parseConcatenate(OpAsmParser &p, OperationState &st) {
  SmallVector<Operand> operands;
  int64_t dim;
  do {
    if (succeeded(p.parseOptionalKeyword("dim"))) {
      if (p.parseEqual() || p.parseInteger(dim))
        return failure();
      addInts(st, "dims", {dim});
      return parseTypesAndResolve(p, st, operands);
    }
    Operand x;
    if (p.parseOperand(x))
      return failure();
    operands.push_back(x);
  } while (succeeded(p.parseComma()));
  return failure();
}

/// `%a, %b : T, U` (inside a reducer).
/// `@target(%a, %b) {attributes} : (T1, T2) -> R` (custom_call): an op the
/// importer keeps opaque; results may be several (`-> (R1, R2)`).
ParseResult parseCustomCall(OpAsmParser &p, OperationState &st) {
  StringAttr target;
  SmallVector<Operand> operands;
  SMLoc at = p.getCurrentLocation();
  if (p.parseSymbolName(target) ||
      p.parseOperandList(operands, OpAsmParser::Delimiter::Paren) ||
      p.parseOptionalAttrDict(st.attributes) || p.parseColon())
    return failure();
  st.addAttribute("call_target_name", target);
  FunctionType type;
  if (p.parseType(type) ||
      p.resolveOperands(operands, type.getInputs(), at, st.operands))
    return failure();
  st.addTypes(type.getResults());
  return success();
}

/// `%x, %i, %j, sizes = [..] : (T, Ti, Tj) -> R` (dynamic_slice), or the
/// same without sizes (dynamic_update_slice): kept opaque by the importer.
ParseResult parseDynamicSlice(OpAsmParser &p, OperationState &st) {
  SmallVector<Operand> operands(1);
  if (p.parseOperand(operands[0]))
    return failure();
  while (succeeded(p.parseOptionalComma())) {
    Operand next;
    OptionalParseResult operand = p.parseOptionalOperand(next);
    if (operand.has_value()) {
      if (failed(*operand))
        return failure();
      operands.push_back(next);
      continue;
    }
    SmallVector<int64_t> sizes;
    if (parseNamedInts(p, "sizes", sizes))
      return failure();
    addInts(st, "slice_sizes", sizes);
    break;
  }
  return parseTypesAndResolve(p, st, operands);
}

/// `(%a = %x, %b = %y) : Ta, Tb cond { .. } do { .. }` (while): kept opaque by
/// the importer. Its regions are read so that the text parses, and dropped
/// (a dynamic op has no traits, so its blocks could not end in a dynamic
/// terminator).
ParseResult parseWhile(OpAsmParser &p, OperationState &st) {
  SmallVector<OpAsmParser::Argument> arguments;
  SmallVector<Operand> inits;
  SMLoc at = p.getCurrentLocation();
  if (p.parseLParen())
    return failure();
  if (failed(p.parseOptionalRParen())) {
    do {
      OpAsmParser::Argument argument;
      Operand init;
      if (p.parseArgument(argument) || p.parseEqual() || p.parseOperand(init))
        return failure();
      arguments.push_back(argument);
      inits.push_back(init);
    } while (succeeded(p.parseOptionalComma()));
    if (p.parseRParen())
      return failure();
  }
  SmallVector<Type> types;
  if (p.parseOptionalAttrDict(st.attributes) || p.parseColon() ||
      p.parseTypeList(types))
    return failure();
  if (types.size() != arguments.size())
    return p.emitError(at, "expected one type per loop value");
  for (auto [argument, type] : llvm::zip(arguments, types))
    argument.type = type;
  Region condition, body;
  if (p.resolveOperands(inits, types, at, st.operands) ||
      p.parseKeyword("cond") || p.parseRegion(condition, arguments) ||
      p.parseKeyword("do") || p.parseRegion(body, arguments))
    return failure();
  st.addTypes(types);
  return success();
}

ParseResult parseReturn(OpAsmParser &p, OperationState &st) {
  SmallVector<Operand> operands;
  SmallVector<Type> types;
  SMLoc at = p.getCurrentLocation();
  if (p.parseOperandList(operands))
    return failure();
  if (!operands.empty() && p.parseColonTypeList(types))
    return failure();
  return p.resolveOperands(operands, types, at, st.operands);
}

void printGeneric(Operation *op, OpAsmPrinter &printer, StringRef) {
  printer.printGenericOp(op, /*printOpName=*/false);
}

} // namespace

/// StableHLO ops whose pretty form is operands and types only.
static const char *const kElementwiseOps[] = {
    "abs",         "add",         "and",        "atan2",
    "cbrt",        "ceil",        "clamp",      "convert",
    "cosine",      "divide",      "exponential", "exponential_minus_one",
    "floor",       "is_finite",   "log",        "log_plus_one",
    "logistic",    "maximum",     "minimum",    "multiply",
    "negate",      "not",         "or",         "power",
    "remainder",   "reshape",     "round_nearest_afz",
    "round_nearest_even",         "rsqrt",      "select",
    "sign",        "sine",        "sqrt",       "subtract",
    "tan",         "tanh",        "xor",        "bitcast_convert",
};

ReaderDialect::ReaderDialect(MLIRContext *ctx)
    : ExtensibleDialect(getDialectNamespace(), ctx,
                        TypeID::get<ReaderDialect>()) {
  auto define = [&](StringRef name, OperationName::ParseAssemblyFn parse) {
    OperationName::VerifyInvariantsFn verify = [](Operation *) {
      return success();
    };
    OperationName::VerifyRegionInvariantsFn verifyRegions =
        [](Operation *) { return success(); };
    OperationName::PrintAssemblyFn print = printGeneric;
    registerDynamicOp(DynamicOpDefinition::get(name, this, std::move(verify),
                                               std::move(verifyRegions),
                                               std::move(parse),
                                               std::move(print)));
  };
  for (const char *name : kElementwiseOps)
    define(name, parseElementwise);
  define("broadcast_in_dim", parseWithDims);
  define("transpose", parseWithDims);
  define("constant", parseConstant);
  define("iota", parseIota);
  define("compare", parseCompare);
  define("dot_general", parseDotGeneral);
  define("dot", parseDot);
  define("reduce", parseReduce);
  define("slice", parseSlice);
  define("concatenate", parseConcatenate);
  define("return", parseReturn);
  define("custom_call", parseCustomCall);
  define("dynamic_slice", parseDynamicSlice);
  define("dynamic_update_slice", parseDynamicSlice);
  define("while", parseWhile);
  // Ops printed in the generic form ("stablehlo.gather"(...) <{...}>) that
  // no parser above reads: parsed as they are, kept opaque by the importer.
  allowUnknownOperations();
}

/// CHLO ops JAX writes into StableHLO text (chlo.erf for an exact GELU,
/// ...): elementwise in their pretty form, kept opaque by the importer.
static const char *const kChloOps[] = {
    "erf",      "erfc",      "erf_inv", "lgamma", "digamma", "tan",
    "is_inf",   "is_neg_inf", "is_pos_inf", "acos", "asin", "atan",
    "acosh",    "asinh",     "atanh",   "cosh",   "sinh",    "bessel_i1e",
    "polygamma", "zeta",     "next_after", "square",
};

ChloReaderDialect::ChloReaderDialect(MLIRContext *ctx)
    : ExtensibleDialect(getDialectNamespace(), ctx,
                        TypeID::get<ChloReaderDialect>()) {
  for (const char *name : kChloOps) {
    OperationName::VerifyInvariantsFn verify = [](Operation *) {
      return success();
    };
    OperationName::VerifyRegionInvariantsFn verifyRegions =
        [](Operation *) { return success(); };
    registerDynamicOp(DynamicOpDefinition::get(
        name, this, std::move(verify), std::move(verifyRegions),
        parseElementwise, printGeneric));
  }
  allowUnknownOperations();
}

Attribute ReaderDialect::parseAttribute(DialectAsmParser &parser,
                                        Type type) const {
  // #stablehlo.gather<...>, #stablehlo<comparison_direction GE>, ...: kept
  // as their text (the importer reads the pretty forms' own attributes).
  return StringAttr::get(getContext(),
                         "#stablehlo." + parser.getFullSymbolSpec().str());
}

void ReaderDialect::printAttribute(Attribute attr,
                                   DialectAsmPrinter &printer) const {
  printer << "<unprintable>";
}
