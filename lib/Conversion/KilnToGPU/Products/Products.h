//===- Products.h - The matrix products of attention kernels ----*- C++ -*-===//
//
// The two products of attention, S = Q·Kᵀ and O += P·V, on each instruction
// family a schedule can build them from:
//
//   MmaSyncProduct   f16/bf16 mma.sync.m16n8k16        (Products/MmaSync.cpp)
//   WgmmaProduct     sm_90a wgmma.mma_async m64nNk16   (Products/Wgmma.cpp)
//   Tf32Product      f32 on mma.sync.m16n8k8 TF32 (x3) (Products/Tf32.cpp)
//   ScalarProduct    f32 FMAs from shared tiles         (Products/Scalar.cpp)
//
// Every family is a small value class that holds what fixes its
// instructions (the element type, the TF32 split, the head dim) and has the
// same two verbs, with the same argument order:
//
//   void scores(ImplicitLocOpBuilder &b, MutableArrayRef<Value> acc,
//               QOperand q, KOperand k) const;     // acc += Q·Kᵀ
//   void values(ImplicitLocOpBuilder &b, MutableArrayRef<Value> acc,
//               POperand p, VOperand v) const;     // acc += P·V
//
// `b` is the builder to emit on (passed at each call: a schedule's builder
// moves into loop bodies); `acc` holds the f32 accumulators in the family's
// layout, read and replaced by the results. The operands are what the
// family's instructions read: register fragments, shared-memory matrix
// descriptors or rows of shared tiles; how they get there (ldmatrix, cp.async,
// TMA) is the schedule's. A family issues its instructions only: fences,
// commits and waits (wgmma's) stay with the schedule, which may overlap them
// with other work.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_CONVERSION_KILNTOGPU_PRODUCTS_PRODUCTS_H
#define KILN_LIB_CONVERSION_KILNTOGPU_PRODUCTS_PRODUCTS_H

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace mlir::kiln::detail {

/// acc += a·b on one mma.sync.m16n8k`k` (row-major A, column-major B) with
/// operands of `type` as the op takes them and four f32 accumulators. The
/// instruction of the mma.sync and TF32 families.
void mmaSync(ImplicitLocOpBuilder &b, ArrayRef<Value> a,
             ArrayRef<Value> bFragment, MutableArrayRef<Value> acc, int64_t k,
             NVVM::MMATypes type);

/// ldmatrix.x4 of 16-bit elements (optionally transposed) from a shared
/// `address`, lane l giving that of row l % 8 of matrix l / 8: the four i32
/// registers of the lane's share of the four 8 × 8 matrices.
SmallVector<Value> ldmatrixX4(ImplicitLocOpBuilder &b, Value address,
                              bool transpose);

/// f16/bf16 products on mma.sync.m16n8k16, a warp's 16 rows by 8 columns
/// (PTX ISA, "Matrix Fragments for mma.m16n8k16"): the operands are i32
/// registers of two packed elements, an A fragment four (rows g and g + 8),
/// a B fragment two; `acc` is the four accumulators of the 16 × 8 tile.
class MmaSyncProduct {
public:
  explicit MmaSyncProduct(Type elementType) : elementType(elementType) {}

  /// acc += Q·Kᵀ over 16 head dims: `qFragment` A, `kFragment` B (K rows as
  /// columns).
  void scores(ImplicitLocOpBuilder &b, MutableArrayRef<Value> acc,
              ArrayRef<Value> qFragment, ArrayRef<Value> kFragment) const;
  /// acc += P·V over 16 keys: `pFragment` A (see packAFragments),
  /// `vFragment` B (V read transposed).
  void values(ImplicitLocOpBuilder &b, MutableArrayRef<Value> acc,
              ArrayRef<Value> pFragment, ArrayRef<Value> vFragment) const;

private:
  Type elementType;
};

/// f16/bf16 products on sm_90a's wgmma.mma_async, a warpgroup's 64 rows by N
/// = 2·acc.size() columns, k = 16 an instruction, issued and not waited for
/// (inline PTX: MLIR's nvvm.wgmma.mma_async takes A only from a descriptor,
/// and P·V wants A from registers). `acc` is the warpgroup's m64nN
/// accumulators, N / 2 a thread, in the layout of N / 8 m16n8 tiles.
/// Descriptors are wgmmaDescriptor's of 128-byte-swizzled tiles (Wgmma.h).
class WgmmaProduct {
public:
  explicit WgmmaProduct(Type elementType) : elementType(elementType) {}

  /// acc += Q·Kᵀ over 16 head dims: Q and K from K-major descriptors.
  /// With `overwrite`, acc = Q·Kᵀ (scale-d 0): `acc` is not read, and may
  /// be poison, so that no register of another product in flight is.
  void scores(ImplicitLocOpBuilder &b, MutableArrayRef<Value> acc,
              Value qDescriptor, Value kDescriptor,
              bool overwrite = false) const;
  /// acc += P·V over 16 keys: P from registers (each warp's m16n8k16 A
  /// fragment of its 16 rows), V from an MN-major descriptor.
  void values(ImplicitLocOpBuilder &b, MutableArrayRef<Value> acc,
              ArrayRef<Value> pFragment, Value vDescriptor) const;

private:
  /// acc += A·B: A from the descriptor `a` or, when `aFragment` is given,
  /// from registers; B from `bDescriptor`, K-major or, with `transposeB`,
  /// MN-major.
  void product(ImplicitLocOpBuilder &b, MutableArrayRef<Value> acc, Value a,
               ArrayRef<Value> aFragment, Value bDescriptor, bool transposeB,
               bool overwrite = false) const;

  Type elementType;
};

/// f32 products on mma.sync.m16n8k8 with TF32 operands (10 explicit mantissa
/// bits) and f32 accumulators, a warp's 16 rows by 8 columns: an A fragment
/// is four operands (rows g and g + 8 at columns t and t + 4), a B fragment
/// two; `acc` is the four accumulators of the 16 × 8 tile. With `split`
/// (TF32x3) every operand is a high and a low TF32 part and a product is
/// three mma: about f32's accuracy.
class Tf32Product {
public:
  explicit Tf32Product(bool split) : split(split) {}

  /// An operand as the products take it: its TF32 value and, when the
  /// operands are split, the TF32 value of what that rounding left (null
  /// otherwise).
  struct Operand {
    Value high, low;
  };
  /// `value` (f32) rounded, or split, into an operand.
  Operand operand(ImplicitLocOpBuilder &b, Value value) const;

  /// acc += Q·Kᵀ over 8 head dims.
  void scores(ImplicitLocOpBuilder &b, MutableArrayRef<Value> acc,
              ArrayRef<Operand> qFragment, ArrayRef<Operand> kFragment) const;
  /// acc += P·V over 8 keys. Split, the block's product starts from zero
  /// and is added to `acc` with f32 adds.
  void values(ImplicitLocOpBuilder &b, MutableArrayRef<Value> acc,
              ArrayRef<Operand> pFragment, ArrayRef<Operand> vFragment) const;

private:
  /// acc += a·b: one mma, or split three.
  void product(ImplicitLocOpBuilder &b, MutableArrayRef<Value> acc,
               ArrayRef<Operand> a, ArrayRef<Operand> bFragment) const;

  bool split;
};

/// f32 products on scalar FMAs from f32 shared tiles (workgroup memrefs,
/// [rows, head dim] or, for K, a padded row), for any element type: a lane
/// computes every row of its warp against one key, and accumulates every
/// row's output at its own columns.
class ScalarProduct {
public:
  explicit ScalarProduct(int64_t headDim) : headDim(headDim) {}

  /// Row `row` of a shared tile, and rows `rows` of one.
  struct Row {
    Value tile;
    Value row;
  };
  struct Rows {
    Value tile;
    ArrayRef<Value> rows;
  };
  /// The warp's 32 keys of a shared V tile from `firstKey`, lane l's key
  /// firstKey + l; the lane's output columns are lane + 32·d.
  struct WarpKeys {
    Value tile;
    int64_t firstKey;
    Value lane;
  };

  /// acc[r] += dot(Q[q.rows[r]], K[k.row]) over the head dim.
  void scores(ImplicitLocOpBuilder &b, MutableArrayRef<Value> acc, Rows q,
              Row k) const;
  /// acc[r·D/32 + d] += Σ_l P[r][l]·V[firstKey + l][lane + 32·d]: `p[r]` is
  /// row r's probability of the lane's key, broadcast lane by lane.
  void values(ImplicitLocOpBuilder &b, MutableArrayRef<Value> acc,
              ArrayRef<Value> p, WarpKeys v) const;

private:
  int64_t headDim;
};

} // namespace mlir::kiln::detail

#endif // KILN_LIB_CONVERSION_KILNTOGPU_PRODUCTS_PRODUCTS_H
