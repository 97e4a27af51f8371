// The attention of examples/serve.py: Llama-3.2-1B's (32 query heads over 8
// KV heads of 64, bf16), causal, over a paged cache of pages of 16, with the
// step's queries packed (q_offsets): prompt chunks and decodes in one launch.
// Build with: kilnc examples/serve_sites.mlir -o PKG
func.func @serve_attention(%q: tensor<?x32x64xbf16>, %kc: tensor<?x16x8x64xbf16>, %vc: tensor<?x16x8x64xbf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>, %offs: tensor<?xi32>) -> tensor<?x32x64xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens q_offsets %offs {causal, scale = 0.125 : f32} : tensor<?x32x64xbf16>, tensor<?x16x8x64xbf16>, tensor<?x16x8x64xbf16>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x32x64xbf16>
  return %o : tensor<?x32x64xbf16>
}
