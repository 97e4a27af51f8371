//===- HostTensor.cpp - Tensors in host memory ------------------*- C++ -*-===//
//
// Element access, .npy I/O and random fills of HostTensor.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runner/HostTensor.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstring>

using namespace mlir;
using namespace mlir::kiln;

HostTensor::HostTensor(Type elementType, ArrayRef<int64_t> shape)
    : elementType(elementType), shape(shape) {
  bytes.assign(getNumElements() * getElementBytes(elementType), 0);
}

bool HostTensor::isSupportedElementType(Type type) {
  return type.isF32() || type.isF16() || type.isBF16() ||
         isa<Float8E4M3FNType>(type) || type.isInteger(64) ||
         type.isInteger(32) || type.isInteger(8) || type.isInteger(1);
}

int64_t HostTensor::getElementBytes(Type type) {
  if (type.isInteger(1))
    return 1;
  return (type.getIntOrFloatBitWidth() + 7) / 8;
}

int64_t HostTensor::getNumElements() const {
  int64_t count = 1;
  for (int64_t size : shape)
    count *= size;
  return count;
}

template <typename T>
static T load(const std::vector<uint8_t> &bytes, int64_t index) {
  T value;
  std::memcpy(&value, bytes.data() + index * sizeof(T), sizeof(T));
  return value;
}

template <typename T>
static void store(std::vector<uint8_t> &bytes, int64_t index, T value) {
  std::memcpy(bytes.data() + index * sizeof(T), &value, sizeof(T));
}

/// The value of `bits` in the narrow float format `sem` (16 or 8 bits).
static double narrowToDouble(uint16_t bits, const llvm::fltSemantics &sem) {
  llvm::APFloat value(
      sem, llvm::APInt(llvm::APFloat::semanticsSizeInBits(sem), bits));
  return value.convertToDouble();
}

/// `value` rounded to nearest-even in the narrow float format `sem`, as bits.
static uint16_t doubleToNarrow(double value, const llvm::fltSemantics &sem) {
  llvm::APFloat converted(value);
  bool losesInfo = false;
  converted.convert(sem, llvm::APFloat::rmNearestTiesToEven, &losesInfo);
  return static_cast<uint16_t>(converted.bitcastToAPInt().getZExtValue());
}

double HostTensor::getAsDouble(int64_t index) const {
  if (elementType.isF32())
    return load<float>(bytes, index);
  if (elementType.isF16())
    return narrowToDouble(load<uint16_t>(bytes, index),
                          llvm::APFloat::IEEEhalf());
  if (elementType.isBF16())
    return narrowToDouble(load<uint16_t>(bytes, index),
                          llvm::APFloat::BFloat());
  if (isa<Float8E4M3FNType>(elementType))
    return narrowToDouble(bytes[index], llvm::APFloat::Float8E4M3FN());
  if (elementType.isInteger(64))
    return static_cast<double>(load<int64_t>(bytes, index));
  if (elementType.isInteger(32))
    return load<int32_t>(bytes, index);
  if (elementType.isInteger(8))
    return load<int8_t>(bytes, index);
  return bytes[index] != 0 ? 1.0 : 0.0;
}

void HostTensor::setFromDouble(int64_t index, double value) {
  if (elementType.isF32())
    return store<float>(bytes, index, static_cast<float>(value));
  if (elementType.isF16())
    return store<uint16_t>(bytes, index,
                           doubleToNarrow(value, llvm::APFloat::IEEEhalf()));
  if (elementType.isBF16())
    return store<uint16_t>(bytes, index,
                           doubleToNarrow(value, llvm::APFloat::BFloat()));
  if (isa<Float8E4M3FNType>(elementType)) {
    bytes[index] = static_cast<uint8_t>(
        doubleToNarrow(value, llvm::APFloat::Float8E4M3FN()));
    return;
  }
  if (elementType.isInteger(64))
    return store<int64_t>(bytes, index, static_cast<int64_t>(value));
  if (elementType.isInteger(32))
    return store<int32_t>(bytes, index, static_cast<int32_t>(value));
  if (elementType.isInteger(8))
    return store<int8_t>(bytes, index, static_cast<int8_t>(value));
  bytes[index] = value != 0.0 ? 1 : 0;
}

std::string HostTensor::getTypeString() const {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "tensor<";
  for (int64_t size : shape)
    os << size << "x";
  os << elementType << ">";
  return text;
}

HostTensor mlir::kiln::castTo(const HostTensor &tensor, Type elementType) {
  if (tensor.elementType == elementType)
    return tensor;
  HostTensor result(elementType, tensor.shape);
  for (int64_t i = 0, e = tensor.getNumElements(); i < e; ++i)
    result.setFromDouble(i, tensor.getAsDouble(i));
  return result;
}

/// The numpy dtype a .npy of `type` is read from, for messages.
static std::string npyDtypeName(Type type) {
  if (type.isF32())
    return "float32";
  if (type.isF16())
    return "float16";
  if (type.isInteger(64))
    return "int64";
  if (type.isInteger(32))
    return "int32";
  if (type.isInteger(8))
    return "int8 or uint8";
  if (type.isInteger(1))
    return "bool";
  std::string text;
  llvm::raw_string_ostream os(text);
  os << type;
  return text;
}

llvm::Expected<HostTensor> mlir::kiln::asArgument(const HostTensor &tensor,
                                                  Type elementType) {
  if (!isa<Float8E4M3FNType>(elementType))
    return castTo(tensor, elementType);
  // numpy has no e4m3 dtype: the bytes are the encoding, taken as they are.
  if (!tensor.elementType.isInteger(8))
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "an f8E4M3FN argument takes its raw e4m3 bytes as a uint8 or int8 "
        ".npy, got " +
            npyDtypeName(tensor.elementType));
  HostTensor result = tensor;
  result.elementType = elementType;
  return result;
}

//===----------------------------------------------------------------------===//
// .npy
//===----------------------------------------------------------------------===//

static llvm::Error npyError(StringRef path, const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 path + ": " + message);
}

llvm::Expected<HostTensor> mlir::kiln::readNpy(MLIRContext *context,
                                               StringRef path) {
  auto file = llvm::MemoryBuffer::getFile(path, /*IsText=*/false);
  if (!file)
    return npyError(path, "cannot read: " + file.getError().message());
  StringRef data = (*file)->getBuffer();
  if (data.size() < 10 || !data.starts_with("\x93NUMPY"))
    return npyError(path, "not a .npy file");
  uint8_t major = data[6];
  size_t headerLength, headerStart;
  if (major == 1) {
    headerLength = static_cast<uint8_t>(data[8]) |
                   (static_cast<uint8_t>(data[9]) << 8);
    headerStart = 10;
  } else {
    if (data.size() < 12)
      return npyError(path, "truncated header");
    headerLength = 0;
    for (int i = 0; i < 4; ++i)
      headerLength |= static_cast<size_t>(static_cast<uint8_t>(data[8 + i]))
                      << (8 * i);
    headerStart = 12;
  }
  if (headerStart + headerLength > data.size())
    return npyError(path, "truncated header");
  StringRef header = data.substr(headerStart, headerLength);

  auto field = [&](StringRef key) -> StringRef {
    size_t at = header.find(("'" + key + "'").str());
    if (at == StringRef::npos)
      return {};
    StringRef rest = header.drop_front(at + key.size() + 2).ltrim(" :");
    return rest;
  };
  StringRef descr = field("descr");
  if (!descr.consume_front("'"))
    return npyError(path, "no dtype in the header");
  descr = descr.take_until([](char c) { return c == '\''; });
  if (field("fortran_order").starts_with("True"))
    return npyError(path, "Fortran order is not supported");
  StringRef shapeText = field("shape");
  if (!shapeText.consume_front("("))
    return npyError(path, "no shape in the header");
  shapeText = shapeText.take_until([](char c) { return c == ')'; });

  Builder builder(context);
  Type elementType;
  if (descr == "<f4")
    elementType = builder.getF32Type();
  else if (descr == "<f2")
    elementType = builder.getF16Type();
  else if (descr == "<i8")
    elementType = builder.getI64Type();
  else if (descr == "<i4")
    elementType = builder.getI32Type();
  else if (descr == "|i1" || descr == "|u1")
    elementType = builder.getIntegerType(8);
  else if (descr == "|b1")
    elementType = builder.getI1Type();
  else
    return npyError(path, "unsupported dtype '" + descr + "'");

  SmallVector<int64_t> shape;
  SmallVector<StringRef> parts;
  shapeText.split(parts, ',', -1, /*KeepEmpty=*/false);
  for (StringRef part : parts) {
    part = part.trim();
    if (part.empty())
      continue;
    int64_t size;
    if (part.getAsInteger(10, size) || size < 0)
      return npyError(path, "bad shape '" + shapeText + "'");
    shape.push_back(size);
  }
  HostTensor tensor(elementType, shape);
  size_t payload = headerStart + headerLength;
  if (data.size() - payload != tensor.bytes.size())
    return npyError(path, "expected " + llvm::Twine(tensor.bytes.size()) +
                              " data bytes, found " +
                              llvm::Twine(data.size() - payload));
  std::memcpy(tensor.bytes.data(), data.data() + payload, tensor.bytes.size());
  return tensor;
}

llvm::Error mlir::kiln::writeNpy(const HostTensor &tensor, StringRef path) {
  HostTensor stored = tensor;
  std::string descr;
  Type type = tensor.elementType;
  if (type.isBF16()) {
    stored = castTo(tensor, Builder(type.getContext()).getF32Type());
    descr = "<f4";
  } else if (type.isF32()) {
    descr = "<f4";
  } else if (type.isF16()) {
    descr = "<f2";
  } else if (type.isInteger(64)) {
    descr = "<i8";
  } else if (type.isInteger(32)) {
    descr = "<i4";
  } else if (type.isInteger(8)) {
    descr = "|i1";
  } else if (isa<Float8E4M3FNType>(type)) {
    // The raw e4m3 bytes, as f8E4M3FN inputs are read.
    descr = "|u1";
  } else if (type.isInteger(1)) {
    descr = "|b1";
  } else {
    return npyError(path, "unsupported element type");
  }
  std::string header = "{'descr': '" + descr +
                       "', 'fortran_order': False, 'shape': (";
  for (int64_t size : tensor.shape)
    header += std::to_string(size) + ", ";
  if (tensor.shape.size() > 1)
    header.erase(header.size() - 1);
  else if (tensor.shape.size() == 1)
    header.erase(header.size() - 1);
  header += "), }";
  // Pad so the data starts at a multiple of 64 bytes.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';

  std::error_code error;
  llvm::raw_fd_ostream os(path, error, llvm::sys::fs::OF_None);
  if (error)
    return npyError(path, "cannot write: " + error.message());
  os << "\x93NUMPY" << '\x01' << '\x00';
  os << static_cast<char>(header.size() & 0xff)
     << static_cast<char>((header.size() >> 8) & 0xff);
  os << header;
  os.write(reinterpret_cast<const char *>(stored.bytes.data()),
           stored.bytes.size());
  return llvm::Error::success();
}

void mlir::kiln::fillRandom(HostTensor &tensor, std::mt19937_64 &rng,
                            int64_t low, int64_t high) {
  Type type = tensor.elementType;
  int64_t count = tensor.getNumElements();
  if (isa<FloatType>(type)) {
    std::normal_distribution<double> normal(0.0, 1.0);
    for (int64_t i = 0; i < count; ++i)
      tensor.setFromDouble(i, normal(rng));
    return;
  }
  if (type.isInteger(1)) {
    std::uniform_int_distribution<int> coin(0, 1);
    for (int64_t i = 0; i < count; ++i)
      tensor.setFromDouble(i, coin(rng));
    return;
  }
  if (high <= low)
    high = low + 1;
  std::uniform_int_distribution<int64_t> uniform(low, high - 1);
  for (int64_t i = 0; i < count; ++i)
    tensor.setFromDouble(i, static_cast<double>(uniform(rng)));
}
