// RUN: kiln-opt %s -split-input-file -verify-diagnostics

// The caches are rank 4: [num_pages, page_size, Hkv, D].
func.func @cache_rank(%q: tensor<1x4x1x8xf32>, %kc: tensor<16x4x8xf32>, %vc: tensor<16x4x8xf32>, %pt: tensor<1x4xi32>, %lens: tensor<1xi32>) -> tensor<1x4x1x8xf32> {
  // expected-error @+1 {{key_cache must have rank 4, got rank 3}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {scale = 1.0 : f32} : tensor<1x4x1x8xf32>, tensor<16x4x8xf32>, tensor<16x4x8xf32>, tensor<1x4xi32>, tensor<1xi32> -> tensor<1x4x1x8xf32>
  return %o : tensor<1x4x1x8xf32>
}

// -----

// The page table is [B, max_pages].
func.func @table_rank(%q: tensor<1x4x1x8xf32>, %kc: tensor<16x4x2x8xf32>, %vc: tensor<16x4x2x8xf32>, %pt: tensor<4xi32>, %lens: tensor<1xi32>) -> tensor<1x4x1x8xf32> {
  // expected-error @+1 {{page_table must have rank 2, got rank 1}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {scale = 1.0 : f32} : tensor<1x4x1x8xf32>, tensor<16x4x2x8xf32>, tensor<16x4x2x8xf32>, tensor<4xi32>, tensor<1xi32> -> tensor<1x4x1x8xf32>
  return %o : tensor<1x4x1x8xf32>
}

// -----

// The page table holds i32.
func.func @table_type(%q: tensor<1x4x1x8xf32>, %kc: tensor<16x4x2x8xf32>, %vc: tensor<16x4x2x8xf32>, %pt: tensor<1x4xi64>, %lens: tensor<1xi32>) -> tensor<1x4x1x8xf32> {
  // expected-error @+1 {{operand #3 must be ranked tensor of 32-bit signless integer values}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {scale = 1.0 : f32} : tensor<1x4x1x8xf32>, tensor<16x4x2x8xf32>, tensor<16x4x2x8xf32>, tensor<1x4xi64>, tensor<1xi32> -> tensor<1x4x1x8xf32>
  return %o : tensor<1x4x1x8xf32>
}

// -----

// The caches share Q's element type.
func.func @dtype(%q: tensor<1x4x1x8xf32>, %kc: tensor<16x4x2x8xf16>, %vc: tensor<16x4x2x8xf16>, %pt: tensor<1x4xi32>, %lens: tensor<1xi32>) -> tensor<1x4x1x8xf32> {
  // expected-error @+1 {{key_cache element type 'f16' differs from the query element type 'f32'}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {scale = 1.0 : f32} : tensor<1x4x1x8xf32>, tensor<16x4x2x8xf16>, tensor<16x4x2x8xf16>, tensor<1x4xi32>, tensor<1xi32> -> tensor<1x4x1x8xf32>
  return %o : tensor<1x4x1x8xf32>
}

// -----

// K and V caches have one shape.
func.func @cache_shapes(%q: tensor<1x4x1x8xf32>, %kc: tensor<16x4x2x8xf32>, %vc: tensor<16x8x2x8xf32>, %pt: tensor<1x4xi32>, %lens: tensor<1xi32>) -> tensor<1x4x1x8xf32> {
  // expected-error @+1 {{key_cache shape 'tensor<16x4x2x8xf32>' differs from the value_cache shape 'tensor<16x8x2x8xf32>'}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {scale = 1.0 : f32} : tensor<1x4x1x8xf32>, tensor<16x4x2x8xf32>, tensor<16x8x2x8xf32>, tensor<1x4xi32>, tensor<1xi32> -> tensor<1x4x1x8xf32>
  return %o : tensor<1x4x1x8xf32>
}

// -----

// The head dims of Q and the caches agree.
func.func @head_dim(%q: tensor<1x4x1x8xf32>, %kc: tensor<16x4x2x16xf32>, %vc: tensor<16x4x2x16xf32>, %pt: tensor<1x4xi32>, %lens: tensor<1xi32>) -> tensor<1x4x1x8xf32> {
  // expected-error @+1 {{head dim of key_cache (16) differs from query (8)}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {scale = 1.0 : f32} : tensor<1x4x1x8xf32>, tensor<16x4x2x16xf32>, tensor<16x4x2x16xf32>, tensor<1x4xi32>, tensor<1xi32> -> tensor<1x4x1x8xf32>
  return %o : tensor<1x4x1x8xf32>
}

// -----

// One page-table row per sequence.
func.func @table_batch(%q: tensor<2x4x1x8xf32>, %kc: tensor<16x4x2x8xf32>, %vc: tensor<16x4x2x8xf32>, %pt: tensor<3x4xi32>, %lens: tensor<2xi32>) -> tensor<2x4x1x8xf32> {
  // expected-error @+1 {{batch size of page_table (3) differs from query (2)}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {scale = 1.0 : f32} : tensor<2x4x1x8xf32>, tensor<16x4x2x8xf32>, tensor<16x4x2x8xf32>, tensor<3x4xi32>, tensor<2xi32> -> tensor<2x4x1x8xf32>
  return %o : tensor<2x4x1x8xf32>
}

// -----

// One length per sequence.
func.func @lens_batch(%q: tensor<2x4x1x8xf32>, %kc: tensor<16x4x2x8xf32>, %vc: tensor<16x4x2x8xf32>, %pt: tensor<2x4xi32>, %lens: tensor<1xi32>) -> tensor<2x4x1x8xf32> {
  // expected-error @+1 {{batch size of kv_lens (1) differs from query (2)}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {scale = 1.0 : f32} : tensor<2x4x1x8xf32>, tensor<16x4x2x8xf32>, tensor<16x4x2x8xf32>, tensor<2x4xi32>, tensor<1xi32> -> tensor<2x4x1x8xf32>
  return %o : tensor<2x4x1x8xf32>
}

// -----

// Query heads are a multiple of the KV heads.
func.func @gqa(%q: tensor<1x6x1x8xf32>, %kc: tensor<16x4x4x8xf32>, %vc: tensor<16x4x4x8xf32>, %pt: tensor<1x4xi32>, %lens: tensor<1xi32>) -> tensor<1x6x1x8xf32> {
  // expected-error @+1 {{query heads (6) must be a multiple of the key/value heads (4)}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {scale = 1.0 : f32} : tensor<1x6x1x8xf32>, tensor<16x4x4x8xf32>, tensor<16x4x4x8xf32>, tensor<1x4xi32>, tensor<1xi32> -> tensor<1x6x1x8xf32>
  return %o : tensor<1x6x1x8xf32>
}

// -----

// The result has Q's shape.
func.func @result(%q: tensor<1x4x1x8xf32>, %kc: tensor<16x4x2x8xf32>, %vc: tensor<16x4x2x8xf32>, %pt: tensor<1x4xi32>, %lens: tensor<1xi32>) -> tensor<1x4x2x8xf32> {
  // expected-error @+1 {{result shape 'tensor<1x4x2x8xf32>' differs from the query shape 'tensor<1x4x1x8xf32>'}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {scale = 1.0 : f32} : tensor<1x4x1x8xf32>, tensor<16x4x2x8xf32>, tensor<16x4x2x8xf32>, tensor<1x4xi32>, tensor<1xi32> -> tensor<1x4x2x8xf32>
  return %o : tensor<1x4x2x8xf32>
}

// -----

// A window needs causal.
func.func @window(%q: tensor<1x4x1x8xf32>, %kc: tensor<16x4x2x8xf32>, %vc: tensor<16x4x2x8xf32>, %pt: tensor<1x4xi32>, %lens: tensor<1xi32>) -> tensor<1x4x1x8xf32> {
  // expected-error @+1 {{window requires causal}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {window = 4 : i64, scale = 1.0 : f32} : tensor<1x4x1x8xf32>, tensor<16x4x2x8xf32>, tensor<16x4x2x8xf32>, tensor<1x4xi32>, tensor<1xi32> -> tensor<1x4x1x8xf32>
  return %o : tensor<1x4x1x8xf32>
}

// -----

// The soft-cap is positive.
func.func @softcap(%q: tensor<1x4x1x8xf32>, %kc: tensor<16x4x2x8xf32>, %vc: tensor<16x4x2x8xf32>, %pt: tensor<1x4xi32>, %lens: tensor<1xi32>) -> tensor<1x4x1x8xf32> {
  // expected-error @+1 {{softcap must be positive and finite, got -1}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {softcap = -1.0 : f32, scale = 1.0 : f32} : tensor<1x4x1x8xf32>, tensor<16x4x2x8xf32>, tensor<16x4x2x8xf32>, tensor<1x4xi32>, tensor<1xi32> -> tensor<1x4x1x8xf32>
  return %o : tensor<1x4x1x8xf32>
}

// -----

// The scale is finite.
func.func @scale(%q: tensor<1x4x1x8xf32>, %kc: tensor<16x4x2x8xf32>, %vc: tensor<16x4x2x8xf32>, %pt: tensor<1x4xi32>, %lens: tensor<1xi32>) -> tensor<1x4x1x8xf32> {
  // expected-error @+1 {{scale must be finite, got INF}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {scale = 0x7F800000 : f32} : tensor<1x4x1x8xf32>, tensor<16x4x2x8xf32>, tensor<16x4x2x8xf32>, tensor<1x4xi32>, tensor<1xi32> -> tensor<1x4x1x8xf32>
  return %o : tensor<1x4x1x8xf32>
}

// -----

// Ragged queries are packed: [total_q, Hq, D].
func.func @ragged_query_rank(%q: tensor<1x4x3x8xf32>, %kc: tensor<16x4x2x8xf32>, %vc: tensor<16x4x2x8xf32>, %pt: tensor<2x4xi32>, %lens: tensor<2xi32>, %offs: tensor<3xi32>) -> tensor<1x4x3x8xf32> {
  // expected-error @+1 {{query must have rank 3, got rank 4}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens q_offsets %offs {scale = 1.0 : f32} : tensor<1x4x3x8xf32>, tensor<16x4x2x8xf32>, tensor<16x4x2x8xf32>, tensor<2x4xi32>, tensor<2xi32>, tensor<3xi32> -> tensor<1x4x3x8xf32>
  return %o : tensor<1x4x3x8xf32>
}

// -----

// q_offsets holds batch + 1 entries.
func.func @ragged_offsets_size(%q: tensor<7x4x8xf32>, %kc: tensor<16x4x2x8xf32>, %vc: tensor<16x4x2x8xf32>, %pt: tensor<2x4xi32>, %lens: tensor<2xi32>, %offs: tensor<2xi32>) -> tensor<7x4x8xf32> {
  // expected-error @+1 {{batch size of page_table (2) differs from q_offsets (less one) (1)}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens q_offsets %offs {scale = 1.0 : f32} : tensor<7x4x8xf32>, tensor<16x4x2x8xf32>, tensor<16x4x2x8xf32>, tensor<2x4xi32>, tensor<2xi32>, tensor<2xi32> -> tensor<7x4x8xf32>
  return %o : tensor<7x4x8xf32>
}

// -----

// q_offsets is a vector.
func.func @ragged_offsets_rank(%q: tensor<7x4x8xf32>, %kc: tensor<16x4x2x8xf32>, %vc: tensor<16x4x2x8xf32>, %pt: tensor<2x4xi32>, %lens: tensor<2xi32>, %offs: tensor<3x1xi32>) -> tensor<7x4x8xf32> {
  // expected-error @+1 {{q_offsets must have rank 1, got rank 2}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens q_offsets %offs {scale = 1.0 : f32} : tensor<7x4x8xf32>, tensor<16x4x2x8xf32>, tensor<16x4x2x8xf32>, tensor<2x4xi32>, tensor<2xi32>, tensor<3x1xi32> -> tensor<7x4x8xf32>
  return %o : tensor<7x4x8xf32>
}

// -----

// The result is packed like the query, with the value head dim.
func.func @ragged_result(%q: tensor<7x4x8xf32>, %kc: tensor<16x4x2x8xf32>, %vc: tensor<16x4x2x8xf32>, %pt: tensor<2x4xi32>, %lens: tensor<2xi32>, %offs: tensor<3xi32>) -> tensor<6x4x8xf32> {
  // expected-error @+1 {{result shape 'tensor<6x4x8xf32>' differs from the query shape 'tensor<7x4x8xf32>'}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens q_offsets %offs {scale = 1.0 : f32} : tensor<7x4x8xf32>, tensor<16x4x2x8xf32>, tensor<16x4x2x8xf32>, tensor<2x4xi32>, tensor<2xi32>, tensor<3xi32> -> tensor<6x4x8xf32>
  return %o : tensor<6x4x8xf32>
}

// -----

// An e4m3 cache needs its scales.
func.func @fp8_no_scales(%q: tensor<1x4x1x8xbf16>, %kc: tensor<16x4x2x8xf8E4M3FN>, %vc: tensor<16x4x2x8xf8E4M3FN>, %pt: tensor<1x4xi32>, %lens: tensor<1xi32>) -> tensor<1x4x1x8xbf16> {
  // expected-error @+1 {{an f8E4M3FN cache needs scales (k_scale and v_scale)}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {scale = 1.0 : f32} : tensor<1x4x1x8xbf16>, tensor<16x4x2x8xf8E4M3FN>, tensor<16x4x2x8xf8E4M3FN>, tensor<1x4xi32>, tensor<1xi32> -> tensor<1x4x1x8xbf16>
  return %o : tensor<1x4x1x8xbf16>
}

// -----

// A float cache takes no scales.
func.func @scales_on_bf16(%q: tensor<1x4x1x8xbf16>, %kc: tensor<16x4x2x8xbf16>, %vc: tensor<16x4x2x8xbf16>, %pt: tensor<1x4xi32>, %lens: tensor<1xi32>, %ks: tensor<1xf32>, %vs: tensor<1xf32>) -> tensor<1x4x1x8xbf16> {
  // expected-error @+1 {{scales apply to f8E4M3FN caches only, not to 'bf16'}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens scales(%ks, %vs : tensor<1xf32>, tensor<1xf32>) {scale = 1.0 : f32} : tensor<1x4x1x8xbf16>, tensor<16x4x2x8xbf16>, tensor<16x4x2x8xbf16>, tensor<1x4xi32>, tensor<1xi32> -> tensor<1x4x1x8xbf16>
  return %o : tensor<1x4x1x8xbf16>
}

// -----

// An e4m3 cache is read by f16 or bf16 queries, not f32 ones.
func.func @fp8_f32_query(%q: tensor<1x4x1x8xf32>, %kc: tensor<16x4x2x8xf8E4M3FN>, %vc: tensor<16x4x2x8xf8E4M3FN>, %pt: tensor<1x4xi32>, %lens: tensor<1xi32>, %ks: tensor<1xf32>, %vs: tensor<1xf32>) -> tensor<1x4x1x8xf32> {
  // expected-error @+1 {{an f8E4M3FN cache needs f16 or bf16 queries, got 'f32'}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens scales(%ks, %vs : tensor<1xf32>, tensor<1xf32>) {scale = 1.0 : f32} : tensor<1x4x1x8xf32>, tensor<16x4x2x8xf8E4M3FN>, tensor<16x4x2x8xf8E4M3FN>, tensor<1x4xi32>, tensor<1xi32> -> tensor<1x4x1x8xf32>
  return %o : tensor<1x4x1x8xf32>
}

// -----

// The key and value caches have one element type.
func.func @fp8_mixed_caches(%q: tensor<1x4x1x8xbf16>, %kc: tensor<16x4x2x8xf8E4M3FN>, %vc: tensor<16x4x2x8xbf16>, %pt: tensor<1x4xi32>, %lens: tensor<1xi32>, %ks: tensor<1xf32>, %vs: tensor<1xf32>) -> tensor<1x4x1x8xbf16> {
  // expected-error @+1 {{key_cache element type 'f8E4M3FN' differs from the value_cache element type 'bf16'}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens scales(%ks, %vs : tensor<1xf32>, tensor<1xf32>) {scale = 1.0 : f32} : tensor<1x4x1x8xbf16>, tensor<16x4x2x8xf8E4M3FN>, tensor<16x4x2x8xbf16>, tensor<1x4xi32>, tensor<1xi32> -> tensor<1x4x1x8xbf16>
  return %o : tensor<1x4x1x8xbf16>
}

// -----

// Of the FP8 formats only e4m3 "FN" is a cache type.
func.func @fp8_e5m2(%q: tensor<1x4x1x8xbf16>, %kc: tensor<16x4x2x8xf8E5M2>, %vc: tensor<16x4x2x8xf8E5M2>, %pt: tensor<1x4xi32>, %lens: tensor<1xi32>, %ks: tensor<1xf32>, %vs: tensor<1xf32>) -> tensor<1x4x1x8xbf16> {
  // expected-error @+1 {{operand #1 must be ranked tensor of 16-bit float or bfloat16 type or 32-bit float or f8E4M3FN type values}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens scales(%ks, %vs : tensor<1xf32>, tensor<1xf32>) {scale = 1.0 : f32} : tensor<1x4x1x8xbf16>, tensor<16x4x2x8xf8E5M2>, tensor<16x4x2x8xf8E5M2>, tensor<1x4xi32>, tensor<1xi32> -> tensor<1x4x1x8xbf16>
  return %o : tensor<1x4x1x8xbf16>
}

// -----

// The result keeps the query's element type (not the cache's).
func.func @fp8_result_type(%q: tensor<1x4x1x8xbf16>, %kc: tensor<16x4x2x8xf8E4M3FN>, %vc: tensor<16x4x2x8xf8E4M3FN>, %pt: tensor<1x4xi32>, %lens: tensor<1xi32>, %ks: tensor<1xf32>, %vs: tensor<1xf32>) -> tensor<1x4x1x8xf32> {
  // expected-error @+1 {{result element type 'f32' differs from the query element type 'bf16'}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens scales(%ks, %vs : tensor<1xf32>, tensor<1xf32>) {scale = 1.0 : f32} : tensor<1x4x1x8xbf16>, tensor<16x4x2x8xf8E4M3FN>, tensor<16x4x2x8xf8E4M3FN>, tensor<1x4xi32>, tensor<1xi32> -> tensor<1x4x1x8xf32>
  return %o : tensor<1x4x1x8xf32>
}

// -----

// A scale is per tensor ([1]) or per KV head ([Hkv] = [2]), not [4].
func.func @fp8_scale_size(%q: tensor<1x4x1x8xbf16>, %kc: tensor<16x4x2x8xf8E4M3FN>, %vc: tensor<16x4x2x8xf8E4M3FN>, %pt: tensor<1x4xi32>, %lens: tensor<1xi32>, %ks: tensor<4xf32>, %vs: tensor<4xf32>) -> tensor<1x4x1x8xbf16> {
  // expected-error @+1 {{k_scale must be tensor<1xf32> (per tensor) or tensor<2xf32> (per KV head), got 'tensor<4xf32>'}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens scales(%ks, %vs : tensor<4xf32>, tensor<4xf32>) {scale = 1.0 : f32} : tensor<1x4x1x8xbf16>, tensor<16x4x2x8xf8E4M3FN>, tensor<16x4x2x8xf8E4M3FN>, tensor<1x4xi32>, tensor<1xi32> -> tensor<1x4x1x8xbf16>
  return %o : tensor<1x4x1x8xbf16>
}

// -----

// v_scale is checked as k_scale is.
func.func @fp8_v_scale_size(%q: tensor<1x4x1x8xbf16>, %kc: tensor<16x4x2x8xf8E4M3FN>, %vc: tensor<16x4x2x8xf8E4M3FN>, %pt: tensor<1x4xi32>, %lens: tensor<1xi32>, %ks: tensor<2xf32>, %vs: tensor<3xf32>) -> tensor<1x4x1x8xbf16> {
  // expected-error @+1 {{v_scale must be tensor<1xf32> (per tensor) or tensor<2xf32> (per KV head), got 'tensor<3xf32>'}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens scales(%ks, %vs : tensor<2xf32>, tensor<3xf32>) {scale = 1.0 : f32} : tensor<1x4x1x8xbf16>, tensor<16x4x2x8xf8E4M3FN>, tensor<16x4x2x8xf8E4M3FN>, tensor<1x4xi32>, tensor<1xi32> -> tensor<1x4x1x8xbf16>
  return %o : tensor<1x4x1x8xbf16>
}

// -----

// A scale is a vector, not a matrix.
func.func @fp8_scale_rank(%q: tensor<1x4x1x8xbf16>, %kc: tensor<16x4x2x8xf8E4M3FN>, %vc: tensor<16x4x2x8xf8E4M3FN>, %pt: tensor<1x4xi32>, %lens: tensor<1xi32>, %ks: tensor<1x2xf32>, %vs: tensor<1x2xf32>) -> tensor<1x4x1x8xbf16> {
  // expected-error @+1 {{k_scale must be tensor<1xf32> (per tensor) or tensor<2xf32> (per KV head), got 'tensor<1x2xf32>'}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens scales(%ks, %vs : tensor<1x2xf32>, tensor<1x2xf32>) {scale = 1.0 : f32} : tensor<1x4x1x8xbf16>, tensor<16x4x2x8xf8E4M3FN>, tensor<16x4x2x8xf8E4M3FN>, tensor<1x4xi32>, tensor<1xi32> -> tensor<1x4x1x8xbf16>
  return %o : tensor<1x4x1x8xbf16>
}

// -----

// A scale has a static size, even where the KV head count is dynamic.
func.func @fp8_scale_dynamic(%q: tensor<1x4x1x8xbf16>, %kc: tensor<16x4x?x8xf8E4M3FN>, %vc: tensor<16x4x?x8xf8E4M3FN>, %pt: tensor<1x4xi32>, %lens: tensor<1xi32>, %ks: tensor<?xf32>, %vs: tensor<?xf32>) -> tensor<1x4x1x8xbf16> {
  // expected-error @+1 {{k_scale must be tensor<1xf32> (per tensor) or tensor<?xf32> (per KV head), got 'tensor<?xf32>'}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens scales(%ks, %vs : tensor<?xf32>, tensor<?xf32>) {scale = 1.0 : f32} : tensor<1x4x1x8xbf16>, tensor<16x4x?x8xf8E4M3FN>, tensor<16x4x?x8xf8E4M3FN>, tensor<1x4xi32>, tensor<1xi32> -> tensor<1x4x1x8xbf16>
  return %o : tensor<1x4x1x8xbf16>
}

// -----

// Scales are f32.
func.func @fp8_scale_type(%q: tensor<1x4x1x8xbf16>, %kc: tensor<16x4x2x8xf8E4M3FN>, %vc: tensor<16x4x2x8xf8E4M3FN>, %pt: tensor<1x4xi32>, %lens: tensor<1xi32>, %ks: tensor<2xf16>, %vs: tensor<2xf16>) -> tensor<1x4x1x8xbf16> {
  // expected-error @+1 {{operand #5 must be ranked tensor of 32-bit float values}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens scales(%ks, %vs : tensor<2xf16>, tensor<2xf16>) {scale = 1.0 : f32} : tensor<1x4x1x8xbf16>, tensor<16x4x2x8xf8E4M3FN>, tensor<16x4x2x8xf8E4M3FN>, tensor<1x4xi32>, tensor<1xi32> -> tensor<1x4x1x8xbf16>
  return %o : tensor<1x4x1x8xbf16>
}

// -----

// K and V scales share a layout: both per tensor or both per KV head.
func.func @fp8_scale_layouts(%q: tensor<1x4x1x8xbf16>, %kc: tensor<16x4x2x8xf8E4M3FN>, %vc: tensor<16x4x2x8xf8E4M3FN>, %pt: tensor<1x4xi32>, %lens: tensor<1xi32>, %ks: tensor<1xf32>, %vs: tensor<2xf32>) -> tensor<1x4x1x8xbf16> {
  // expected-error @+1 {{k_scale and v_scale must have one layout, got 'tensor<1xf32>' and 'tensor<2xf32>'}}
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens scales(%ks, %vs : tensor<1xf32>, tensor<2xf32>) {scale = 1.0 : f32} : tensor<1x4x1x8xbf16>, tensor<16x4x2x8xf8E4M3FN>, tensor<16x4x2x8xf8E4M3FN>, tensor<1x4xi32>, tensor<1xi32> -> tensor<1x4x1x8xbf16>
  return %o : tensor<1x4x1x8xbf16>
}

// -----

// k_scale without v_scale (only the generic form can say it).
func.func @fp8_lone_k_scale(%q: tensor<1x4x1x8xbf16>, %kc: tensor<16x4x2x8xf8E4M3FN>, %vc: tensor<16x4x2x8xf8E4M3FN>, %pt: tensor<1x4xi32>, %lens: tensor<1xi32>, %ks: tensor<1xf32>) -> tensor<1x4x1x8xbf16> {
  // expected-error @+1 {{k_scale and v_scale come together}}
  %o = "kiln.paged_attention"(%q, %kc, %vc, %pt, %lens, %ks) <{operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 1, 0>, scale = 1.0 : f32}> : (tensor<1x4x1x8xbf16>, tensor<16x4x2x8xf8E4M3FN>, tensor<16x4x2x8xf8E4M3FN>, tensor<1x4xi32>, tensor<1xi32>, tensor<1xf32>) -> tensor<1x4x1x8xbf16>
  return %o : tensor<1x4x1x8xbf16>
}
