func.func @d264(%q: tensor<1x4x64x264xbf16>, %k: tensor<1x4x64x264xbf16>, %v: tensor<1x4x64x264xbf16>) -> tensor<1x4x64x264xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.0615457455 : f32} : tensor<1x4x64x264xbf16>, tensor<1x4x64x264xbf16>, tensor<1x4x64x264xbf16> -> tensor<1x4x64x264xbf16>
  return %o : tensor<1x4x64x264xbf16>
}
