// The attention of a Llama-style decoder (GQA 8/2, head dim 128, bf16) for
// examples/generate.py: causal prefill over a prompt, and decode or chunked
// prefill over a paged KV cache of pages of 16 tokens. Every size but the
// heads and the head dim is dynamic.
// Build with: kilnc examples/llama_sites.mlir -o PKG

func.func @prefill(%q: tensor<?x8x?x128xbf16>, %k: tensor<?x2x?x128xbf16>, %v: tensor<?x2x?x128xbf16>) -> tensor<?x8x?x128xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.0883883461 : f32} : tensor<?x8x?x128xbf16>, tensor<?x2x?x128xbf16>, tensor<?x2x?x128xbf16> -> tensor<?x8x?x128xbf16>
  return %o : tensor<?x8x?x128xbf16>
}

func.func @decode(%q: tensor<?x8x?x128xbf16>, %kc: tensor<?x16x2x128xbf16>, %vc: tensor<?x16x2x128xbf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) -> tensor<?x8x?x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {causal, scale = 0.0883883461 : f32} : tensor<?x8x?x128xbf16>, tensor<?x16x2x128xbf16>, tensor<?x16x2x128xbf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x8x?x128xbf16>
  return %o : tensor<?x8x?x128xbf16>
}
