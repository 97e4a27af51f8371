func.func @d24(%q: tensor<?x4x?x24xbf16>, %kc: tensor<?x16x4x24xf8E4M3FN>, %vc: tensor<?x16x4x24xf8E4M3FN>, %pt: tensor<?x?xi32>, %l: tensor<?xi32>, %ks: tensor<1xf32>, %vs: tensor<1xf32>) -> tensor<?x4x?x24xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %l scales(%ks, %vs : tensor<1xf32>, tensor<1xf32>) {scale = 0.125 : f32} : tensor<?x4x?x24xbf16>, tensor<?x16x4x24xf8E4M3FN>, tensor<?x16x4x24xf8E4M3FN>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x4x?x24xbf16>
  return %o : tensor<?x4x?x24xbf16>
}
