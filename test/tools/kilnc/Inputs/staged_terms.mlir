// Sites whose warp-specialised kernels stage their mask and bias beside K.
func.func @dense_bias(%q: tensor<?x16x?x64xbf16>, %k: tensor<?x16x?x64xbf16>, %v: tensor<?x16x?x64xbf16>, %b: tensor<?x16x?x?xbf16>) -> tensor<?x16x?x64xbf16> {
  %o = kiln.attention %q, %k, %v bias(%b : tensor<?x16x?x?xbf16>) {scale = 0.125 : f32} : tensor<?x16x?x64xbf16>, tensor<?x16x?x64xbf16>, tensor<?x16x?x64xbf16> -> tensor<?x16x?x64xbf16>
  return %o : tensor<?x16x?x64xbf16>
}
func.func @key_mask_bias(%q: tensor<?x16x?x128xbf16>, %k: tensor<?x16x?x128xbf16>, %v: tensor<?x16x?x128xbf16>, %m: tensor<?x1x1x?xi1>, %b: tensor<1x16x?x?xbf16>) -> tensor<?x16x?x128xbf16> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x1x1x?xi1>) bias(%b : tensor<1x16x?x?xbf16>) {masked_score = -3.40282347E+38 : f32, scale = 0.0883883461 : f32} : tensor<?x16x?x128xbf16>, tensor<?x16x?x128xbf16>, tensor<?x16x?x128xbf16> -> tensor<?x16x?x128xbf16>
  return %o : tensor<?x16x?x128xbf16>
}
func.func @f32_rows_mask(%q: tensor<?x16x?x128xbf16>, %k: tensor<?x16x?x128xbf16>, %v: tensor<?x16x?x128xbf16>, %m: tensor<?x1x?x?xf32>) -> tensor<?x16x?x128xbf16> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x1x?x?xf32>) {scale = 0.0883883461 : f32} : tensor<?x16x?x128xbf16>, tensor<?x16x?x128xbf16>, tensor<?x16x?x128xbf16> -> tensor<?x16x?x128xbf16>
  return %o : tensor<?x16x?x128xbf16>
}
