// One site the warp-specialised kernel takes (bf16, head dim 256, causal):
// enough for the errors of schedules forced on every site, which stop at the
// first site they cannot fit.
func.func @bf16_d256_causal(%q: tensor<?x8x?x256xbf16>, %k: tensor<?x2x?x256xbf16>, %v: tensor<?x2x?x256xbf16>) -> tensor<?x8x?x256xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.0625 : f32} : tensor<?x8x?x256xbf16>, tensor<?x2x?x256xbf16>, tensor<?x2x?x256xbf16> -> tensor<?x8x?x256xbf16>
  return %o : tensor<?x8x?x256xbf16>
}
