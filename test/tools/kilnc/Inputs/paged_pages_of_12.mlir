func.func @pages_of_12(%q: tensor<?x8x?x64xbf16>, %kc: tensor<?x12x2x64xbf16>, %vc: tensor<?x12x2x64xbf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {causal, scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x12x2x64xbf16>, tensor<?x12x2x64xbf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}
