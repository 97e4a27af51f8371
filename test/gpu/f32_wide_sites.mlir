// f32 sites past the TF32 kernel's resident-Q head dims, and with a value
// head dim of their own, for test/gpu/check_attention.py (what
// torch.onnx.export writes for Gemma-style and MLA models by default).
// Build with: kilnc test/gpu/f32_wide_sites.mlir -o PKG [--allow-tf32]

// Gemma-shaped: head dim 256, GQA 8/4, causal.
func.func @f32_d256_causal(%q: tensor<?x8x?x256xf32>, %k: tensor<?x4x?x256xf32>, %v: tensor<?x4x?x256xf32>) -> tensor<?x8x?x256xf32> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.0625 : f32} : tensor<?x8x?x256xf32>, tensor<?x4x?x256xf32>, tensor<?x4x?x256xf32> -> tensor<?x8x?x256xf32>
  return %o : tensor<?x8x?x256xf32>
}

// MLA-shaped: query/key head dim 192, value head dim 128, causal.
func.func @f32_mla_causal(%q: tensor<?x8x?x192xf32>, %k: tensor<?x8x?x192xf32>, %v: tensor<?x8x?x128xf32>) -> tensor<?x8x?x128xf32> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.0721687824 : f32} : tensor<?x8x?x192xf32>, tensor<?x8x?x192xf32>, tensor<?x8x?x128xf32> -> tensor<?x8x?x128xf32>
  return %o : tensor<?x8x?x128xf32>
}

// Head dim 160, not causal, soft-capped.
func.func @f32_d160_softcap(%q: tensor<?x8x?x160xf32>, %k: tensor<?x2x?x160xf32>, %v: tensor<?x2x?x160xf32>) -> tensor<?x8x?x160xf32> {
  %o = kiln.attention %q, %k, %v {softcap = 50.0 : f32, scale = 0.0790569415 : f32} : tensor<?x8x?x160xf32>, tensor<?x2x?x160xf32>, tensor<?x2x?x160xf32> -> tensor<?x8x?x160xf32>
  return %o : tensor<?x8x?x160xf32>
}

// A value head dim below the query/key one, Q resident: 128/64, causal.
func.func @f32_d128_dv64_causal(%q: tensor<?x8x?x128xf32>, %k: tensor<?x2x?x128xf32>, %v: tensor<?x2x?x64xf32>) -> tensor<?x8x?x64xf32> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.0883883461 : f32} : tensor<?x8x?x128xf32>, tensor<?x2x?x128xf32>, tensor<?x2x?x64xf32> -> tensor<?x8x?x64xf32>
  return %o : tensor<?x8x?x64xf32>
}
