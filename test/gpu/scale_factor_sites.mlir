// Sites with a run-time scale (kiln.attention's scale_factor: a learned
// temperature) on each kind of kernel: bf16 causal GQA on the tensor-core
// kernel (split-KV at decode shapes), f16 with a boolean padding mask and a
// soft-cap, f32 on the TF32 kernel. Checked on the GPU by
// `kilnc test/gpu/scale_factor_sites.mlir -o PKG; python3
// test/gpu/check_attention.py PKG` (a random factor of either sign, and a
// CUDA graph replayed after the factor changed).
func.func @temperature_bf16(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>, %t: tensor<f32>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v scale_factor(%t : tensor<f32>) {causal, scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}

func.func @temperature_f16_mask_softcap(%q: tensor<?x4x?x128xf16>, %k: tensor<?x4x?x128xf16>, %v: tensor<?x4x?x128xf16>, %m: tensor<?x1x1x?xi1>, %t: tensor<1xf32>) -> tensor<?x4x?x128xf16> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x1x1x?xi1>) scale_factor(%t : tensor<1xf32>) {scale = 0.088388 : f32, softcap = 30.0 : f32} : tensor<?x4x?x128xf16>, tensor<?x4x?x128xf16>, tensor<?x4x?x128xf16> -> tensor<?x4x?x128xf16>
  return %o : tensor<?x4x?x128xf16>
}

func.func @temperature_f32(%q: tensor<?x4x?x32xf32>, %k: tensor<?x4x?x32xf32>, %v: tensor<?x4x?x32xf32>, %t: tensor<f32>) -> tensor<?x4x?x32xf32> {
  %o = kiln.attention %q, %k, %v scale_factor(%t : tensor<f32>) {causal, scale = 0.17677669 : f32} : tensor<?x4x?x32xf32>, tensor<?x4x?x32xf32>, tensor<?x4x?x32xf32> -> tensor<?x4x?x32xf32>
  return %o : tensor<?x4x?x32xf32>
}
