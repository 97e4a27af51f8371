// A causal grouped-query attention layer (8 query heads over 2 KV heads,
// head dim 128) with dynamic batch and sequence lengths, written directly in
// the kiln dialect.
//
//   kilnc examples/gqa_causal.mlir -o /tmp/gqa_pkg
func.func @gqa_causal(%q: tensor<?x8x?x128xbf16>, %k: tensor<?x2x?x128xbf16>,
                      %v: tensor<?x2x?x128xbf16>) -> tensor<?x8x?x128xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.0883883476 : f32}
       : tensor<?x8x?x128xbf16>, tensor<?x2x?x128xbf16>, tensor<?x2x?x128xbf16>
       -> tensor<?x8x?x128xbf16>
  return %o : tensor<?x8x?x128xbf16>
}
