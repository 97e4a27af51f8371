//===- HostTensor.h - Tensors in host memory --------------------*- C++ -*-===//
//
// A dense, row-major tensor in host memory with an MLIR element type: the
// inputs and outputs of the CPU runner, with .npy I/O and seeded random
// fills.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNNER_HOSTTENSOR_H
#define KILN_RUNNER_HOSTTENSOR_H

#include "mlir/IR/Types.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace mlir::kiln {

/// A dense row-major tensor in host memory. Supported element types: f32,
/// f16, bf16, f8E4M3FN, i64, i32, i8 and i1 (one byte per element, 0 or 1).
struct HostTensor {
  Type elementType;
  SmallVector<int64_t> shape;
  std::vector<uint8_t> bytes;

  HostTensor() = default;
  /// A zero-filled tensor.
  HostTensor(Type elementType, ArrayRef<int64_t> shape);

  /// Whether the runner supports `type` as an element type.
  static bool isSupportedElementType(Type type);
  /// Bytes per element of `type` (1 for i1).
  static int64_t getElementBytes(Type type);

  int64_t getNumElements() const;
  /// Element `index` (row-major) converted to double.
  double getAsDouble(int64_t index) const;
  /// Stores `value` into element `index`, rounded to the element type
  /// (nearest-even for floats, truncation towards zero for integers).
  void setFromDouble(int64_t index, double value);
  /// `tensor<AxBxT>`, for messages.
  std::string getTypeString() const;
};

/// Reads a .npy file (C order, little endian; dtypes f4, f2, i8, i4, i1, u1
/// and b1, read as f32, f16, i64, i32, i8, i8 and i1).
llvm::Expected<HostTensor> readNpy(MLIRContext *context, StringRef path);

/// `tensor` converted element by element to `elementType` (through double;
/// bf16, f16 and f8E4M3FN round to nearest-even).
HostTensor castTo(const HostTensor &tensor, Type elementType);

/// `tensor` (as read from a .npy) as an argument of element type
/// `elementType`: converted with castTo, except that an f8E4M3FN argument
/// takes the raw e4m3 bytes of an i8 tensor (a uint8 or int8 .npy) as they
/// are; any other dtype for it is an error.
llvm::Expected<HostTensor> asArgument(const HostTensor &tensor,
                                      Type elementType);

/// Writes `tensor` as a .npy file (bf16 is written as float32, since numpy
/// has no bf16 dtype; f8E4M3FN as its raw bytes, uint8).
llvm::Error writeNpy(const HostTensor &tensor, StringRef path);

/// Fills `tensor` from `rng`: floats from normal(0, 1), integers uniformly
/// from [low, high), i1 with 0 or 1.
void fillRandom(HostTensor &tensor, std::mt19937_64 &rng, int64_t low = 0,
                int64_t high = 2);

} // namespace mlir::kiln

#endif // KILN_RUNNER_HOSTTENSOR_H
