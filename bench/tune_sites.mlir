// Sites the schedule tuner (bench/tune_schedules.py) measures: bf16, head
// dims 64, 96, 128, 160 and 256, causal and not, every dimension dynamic.
//   python3 bench/tune_schedules.py compile bench/tune_sites.mlir DIR
func.func @d64(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>) -> tensor<?x?x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>
  return %o : tensor<?x?x?x64xbf16>
}
func.func @d64_causal(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>) -> tensor<?x?x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.125 : f32} : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>
  return %o : tensor<?x?x?x64xbf16>
}
func.func @d96(%q: tensor<?x?x?x96xbf16>, %k: tensor<?x?x?x96xbf16>, %v: tensor<?x?x?x96xbf16>) -> tensor<?x?x?x96xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.102062073 : f32} : tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16> -> tensor<?x?x?x96xbf16>
  return %o : tensor<?x?x?x96xbf16>
}
func.func @d96_causal(%q: tensor<?x?x?x96xbf16>, %k: tensor<?x?x?x96xbf16>, %v: tensor<?x?x?x96xbf16>) -> tensor<?x?x?x96xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.102062073 : f32} : tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16> -> tensor<?x?x?x96xbf16>
  return %o : tensor<?x?x?x96xbf16>
}
func.func @d128(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.0883883476 : f32} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>
  return %o : tensor<?x?x?x128xbf16>
}
func.func @d128_causal(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.0883883476 : f32} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>
  return %o : tensor<?x?x?x128xbf16>
}
func.func @d160(%q: tensor<?x?x?x160xbf16>, %k: tensor<?x?x?x160xbf16>, %v: tensor<?x?x?x160xbf16>) -> tensor<?x?x?x160xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.0790569415 : f32} : tensor<?x?x?x160xbf16>, tensor<?x?x?x160xbf16>, tensor<?x?x?x160xbf16> -> tensor<?x?x?x160xbf16>
  return %o : tensor<?x?x?x160xbf16>
}
func.func @d160_causal(%q: tensor<?x?x?x160xbf16>, %k: tensor<?x?x?x160xbf16>, %v: tensor<?x?x?x160xbf16>) -> tensor<?x?x?x160xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.0790569415 : f32} : tensor<?x?x?x160xbf16>, tensor<?x?x?x160xbf16>, tensor<?x?x?x160xbf16> -> tensor<?x?x?x160xbf16>
  return %o : tensor<?x?x?x160xbf16>
}
func.func @d256(%q: tensor<?x?x?x256xbf16>, %k: tensor<?x?x?x256xbf16>, %v: tensor<?x?x?x256xbf16>) -> tensor<?x?x?x256xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.0625 : f32} : tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16> -> tensor<?x?x?x256xbf16>
  return %o : tensor<?x?x?x256xbf16>
}
func.func @d256_causal(%q: tensor<?x?x?x256xbf16>, %k: tensor<?x?x?x256xbf16>, %v: tensor<?x?x?x256xbf16>) -> tensor<?x?x?x256xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.0625 : f32} : tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16> -> tensor<?x?x?x256xbf16>
  return %o : tensor<?x?x?x256xbf16>
}
