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
