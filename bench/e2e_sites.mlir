// The attention of a Llama-3.2-1B-shaped decoder (GQA 32/8, head dim 64, bf16)
// for bench/bench_e2e.py: causal prefill over a prompt, and decode or chunked
// prefill over a paged KV cache of pages of 16 tokens. Every size but the
// heads and the head dim is dynamic.
// Build with: kilnc bench/e2e_sites.mlir -o PKG

func.func @prefill(%q: tensor<?x32x?x64xbf16>, %k: tensor<?x8x?x64xbf16>, %v: tensor<?x8x?x64xbf16>) -> tensor<?x32x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.125 : f32} : tensor<?x32x?x64xbf16>, tensor<?x8x?x64xbf16>, tensor<?x8x?x64xbf16> -> tensor<?x32x?x64xbf16>
  return %o : tensor<?x32x?x64xbf16>
}

func.func @decode(%q: tensor<?x32x?x64xbf16>, %kc: tensor<?x16x8x64xbf16>, %vc: tensor<?x16x8x64xbf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) -> tensor<?x32x?x64xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {causal, scale = 0.125 : f32} : tensor<?x32x?x64xbf16>, tensor<?x16x8x64xbf16>, tensor<?x16x8x64xbf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x32x?x64xbf16>
  return %o : tensor<?x32x?x64xbf16>
}
