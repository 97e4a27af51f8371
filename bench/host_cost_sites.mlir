// Sites of bench/bench_host_cost.py: bf16 causal GQA (8 query heads over 2),
// an additive f32 padding mask, and a run-time scale (a learned temperature).
func.func @causal_gqa(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}

func.func @additive_mask(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>, %m: tensor<?x1x1x?xf32>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x1x1x?xf32>) {scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}

func.func @temperature(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>, %t: tensor<f32>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v scale_factor(%t : tensor<f32>) {causal, scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}
