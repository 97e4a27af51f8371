// Sites whose kernels differ by target and by option: a bf16 site with a
// row in the sm_90a schedule table, one whose head dim wgmma would pad by
// more than a third, an f32 site on TF32 tensor cores, and one with a
// run-time scale (no warp-specialised kernel).
func.func @d128(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.1 : f32} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>
  return %o : tensor<?x?x?x128xbf16>
}
func.func @d80(%q: tensor<?x?x?x80xf16>, %k: tensor<?x?x?x80xf16>, %v: tensor<?x?x?x80xf16>) -> tensor<?x?x?x80xf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.1 : f32} : tensor<?x?x?x80xf16>, tensor<?x?x?x80xf16>, tensor<?x?x?x80xf16> -> tensor<?x?x?x80xf16>
  return %o : tensor<?x?x?x80xf16>
}
func.func @d64f32(%q: tensor<?x?x?x64xf32>, %k: tensor<?x?x?x64xf32>, %v: tensor<?x?x?x64xf32>) -> tensor<?x?x?x64xf32> {
  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<?x?x?x64xf32>, tensor<?x?x?x64xf32>, tensor<?x?x?x64xf32> -> tensor<?x?x?x64xf32>
  return %o : tensor<?x?x?x64xf32>
}
func.func @temperature(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>, %t: tensor<f32>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v scale_factor(%t : tensor<f32>) {causal, scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}
