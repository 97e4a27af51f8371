//===- KilnAttrs.td - Kiln attributes ----------------------*- tablegen -*-===//
//
// Enum attributes of the kiln dialect.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_KILN_IR_KILNATTRS_TD
#define KILN_DIALECT_KILN_IR_KILNATTRS_TD

include "kiln/Dialect/Kiln/IR/KilnDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Kiln_LayoutBHSD : I32EnumAttrCase<"bhsd", 0>;
def Kiln_LayoutBSHD : I32EnumAttrCase<"bshd", 1>;

def Kiln_Layout : I32EnumAttr<"Layout",
    "order of the batch, head, sequence and head-dim axes",
    [Kiln_LayoutBHSD, Kiln_LayoutBSHD]> {
  let cppNamespace = "::mlir::kiln";
  let genSpecializedAttr = 0;
}

def Kiln_LayoutAttr : EnumAttr<Kiln_Dialect, Kiln_Layout, "layout"> {
  let summary = "Axis order of the Q, K, V and result tensors";
  let description = [{
    `bhsd` is `[batch, heads, seq, head_dim]`; `bshd` is
    `[batch, seq, heads, head_dim]` (the layout most exporters produce before
    their head transpose).
  }];
  let assemblyFormat = "`<` $value `>`";
}

#endif // KILN_DIALECT_KILN_IR_KILNATTRS_TD
