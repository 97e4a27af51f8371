//===- KilnDialect.td - Kiln dialect definition ------------*- tablegen -*-===//
//
// The `kiln` dialect: fused attention and the ops that its lowerings need.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_KILN_IR_KILNDIALECT_TD
#define KILN_DIALECT_KILN_IR_KILNDIALECT_TD

include "mlir/IR/OpBase.td"

def Kiln_Dialect : Dialect {
  let name = "kiln";
  let summary = "Fused attention for the Kiln compiler.";
  let description = [{
    The `kiln` dialect holds one fused op per attention site that
    `kiln-fuse-attention` finds in a model graph, `softmax(scale·QKᵀ + mask)·V`
    with its variants expressed as attributes (causal, sliding window,
    soft-capping, grouped KV heads). Lowerings turn each op into a tiled
    online-softmax kernel for the GPU and a reference form for the CPU.
  }];
  let cppNamespace = "::mlir::kiln";
  let useDefaultAttributePrinterParser = 1;
}

class Kiln_Op<string mnemonic, list<Trait> traits = []>
    : Op<Kiln_Dialect, mnemonic, traits>;

#endif // KILN_DIALECT_KILN_IR_KILNDIALECT_TD
