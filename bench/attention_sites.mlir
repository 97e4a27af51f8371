// Sites the benchmark runs (bench/bench_attention.py): bf16, head dims 64,
// 80, 96, 128 and 256, causal and not, every dimension dynamic so the
// benchmark's MHA shapes (hidden 2048: 32 heads of 64, 25 of 80, 21 of 96,
// 16 of 128, 8 of 256) and GQA shapes all fit.
//   kilnc bench/attention_sites.mlir -o PKG --target=sm_90a
func.func @d128(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.0883883476 : f32} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>
  return %o : tensor<?x?x?x128xbf16>
}
func.func @d128_causal(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.0883883476 : f32} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>
  return %o : tensor<?x?x?x128xbf16>
}
func.func @d64(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>) -> tensor<?x?x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>
  return %o : tensor<?x?x?x64xbf16>
}
func.func @d64_causal(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>) -> tensor<?x?x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.125 : f32} : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>
  return %o : tensor<?x?x?x64xbf16>
}
func.func @d256(%q: tensor<?x?x?x256xbf16>, %k: tensor<?x?x?x256xbf16>, %v: tensor<?x?x?x256xbf16>) -> tensor<?x?x?x256xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.0625 : f32} : tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16> -> tensor<?x?x?x256xbf16>
  return %o : tensor<?x?x?x256xbf16>
}
func.func @d256_causal(%q: tensor<?x?x?x256xbf16>, %k: tensor<?x?x?x256xbf16>, %v: tensor<?x?x?x256xbf16>) -> tensor<?x?x?x256xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.0625 : f32} : tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16> -> tensor<?x?x?x256xbf16>
  return %o : tensor<?x?x?x256xbf16>
}
func.func @d80(%q: tensor<?x?x?x80xbf16>, %k: tensor<?x?x?x80xbf16>, %v: tensor<?x?x?x80xbf16>) -> tensor<?x?x?x80xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.111803398 : f32} : tensor<?x?x?x80xbf16>, tensor<?x?x?x80xbf16>, tensor<?x?x?x80xbf16> -> tensor<?x?x?x80xbf16>
  return %o : tensor<?x?x?x80xbf16>
}
func.func @d80_causal(%q: tensor<?x?x?x80xbf16>, %k: tensor<?x?x?x80xbf16>, %v: tensor<?x?x?x80xbf16>) -> tensor<?x?x?x80xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.111803398 : f32} : tensor<?x?x?x80xbf16>, tensor<?x?x?x80xbf16>, tensor<?x?x?x80xbf16> -> tensor<?x?x?x80xbf16>
  return %o : tensor<?x?x?x80xbf16>
}
func.func @d96(%q: tensor<?x?x?x96xbf16>, %k: tensor<?x?x?x96xbf16>, %v: tensor<?x?x?x96xbf16>) -> tensor<?x?x?x96xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.102062076 : f32} : tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16> -> tensor<?x?x?x96xbf16>
  return %o : tensor<?x?x?x96xbf16>
}
func.func @d96_causal(%q: tensor<?x?x?x96xbf16>, %k: tensor<?x?x?x96xbf16>, %v: tensor<?x?x?x96xbf16>) -> tensor<?x?x?x96xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.102062076 : f32} : tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16> -> tensor<?x?x?x96xbf16>
  return %o : tensor<?x?x?x96xbf16>
}
