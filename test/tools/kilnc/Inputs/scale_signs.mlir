// Three d64 bf16 sites that differ only in the sign of their scale.
func.func @positive(%q: tensor<1x4x256x64xbf16>, %k: tensor<1x4x256x64xbf16>, %v: tensor<1x4x256x64xbf16>) -> tensor<1x4x256x64xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<1x4x256x64xbf16>, tensor<1x4x256x64xbf16>, tensor<1x4x256x64xbf16> -> tensor<1x4x256x64xbf16>
  return %o : tensor<1x4x256x64xbf16>
}
func.func @zero(%q: tensor<1x4x256x64xbf16>, %k: tensor<1x4x256x64xbf16>, %v: tensor<1x4x256x64xbf16>) -> tensor<1x4x256x64xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.0 : f32} : tensor<1x4x256x64xbf16>, tensor<1x4x256x64xbf16>, tensor<1x4x256x64xbf16> -> tensor<1x4x256x64xbf16>
  return %o : tensor<1x4x256x64xbf16>
}
func.func @negative(%q: tensor<1x4x256x64xbf16>, %k: tensor<1x4x256x64xbf16>, %v: tensor<1x4x256x64xbf16>) -> tensor<1x4x256x64xbf16> {
  %o = kiln.attention %q, %k, %v {scale = -0.125 : f32} : tensor<1x4x256x64xbf16>, tensor<1x4x256x64xbf16>, tensor<1x4x256x64xbf16> -> tensor<1x4x256x64xbf16>
  return %o : tensor<1x4x256x64xbf16>
}
