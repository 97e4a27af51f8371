// f32 sites for package-tf32.test: GQA 8/2 at head dim 64 (causal), head
// dim 48 (a multiple of 8 that only the TF32 kernel takes) with a boolean
// mask, and head dim 128 with a window and softcap.
func.func @f32_d64_causal(%q: tensor<?x8x?x64xf32>, %k: tensor<?x2x?x64xf32>, %v: tensor<?x2x?x64xf32>) -> tensor<?x8x?x64xf32> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.125 : f32} : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32> -> tensor<?x8x?x64xf32>
  return %o : tensor<?x8x?x64xf32>
}

func.func @f32_d48_mask(%q: tensor<2x4x16x48xf32>, %k: tensor<2x4x16x48xf32>, %v: tensor<2x4x16x48xf32>, %m: tensor<2x1x16x16xi1>) -> tensor<2x4x16x48xf32> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<2x1x16x16xi1>) {scale = 0.144 : f32} : tensor<2x4x16x48xf32>, tensor<2x4x16x48xf32>, tensor<2x4x16x48xf32> -> tensor<2x4x16x48xf32>
  return %o : tensor<2x4x16x48xf32>
}

func.func @f32_d128_window_softcap(%q: tensor<?x4x?x128xf32>, %k: tensor<?x4x?x128xf32>, %v: tensor<?x4x?x128xf32>) -> tensor<?x4x?x128xf32> {
  %o = kiln.attention %q, %k, %v {causal, window = 64 : i64, softcap = 30.0 : f32, scale = 0.0883883461 : f32} : tensor<?x4x?x128xf32>, tensor<?x4x?x128xf32>, tensor<?x4x?x128xf32> -> tensor<?x4x?x128xf32>
  return %o : tensor<?x4x?x128xf32>
}
