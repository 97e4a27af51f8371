// RUN: kiln-opt %s -split-input-file -verify-diagnostics

// Q must be rank 4.
func.func @rank(%q: tensor<8x128x64xf32>, %k: tensor<1x8x128x64xf32>, %v: tensor<1x8x128x64xf32>) -> tensor<1x8x128x64xf32> {
  // expected-error @+1 {{query must have rank 4, got rank 3}}
  %o = kiln.attention %q, %k, %v {scale = 1.0 : f32} : tensor<8x128x64xf32>, tensor<1x8x128x64xf32>, tensor<1x8x128x64xf32> -> tensor<1x8x128x64xf32>
  return %o : tensor<1x8x128x64xf32>
}

// -----

// Q, K, V and the result share one element type.
func.func @dtype(%q: tensor<1x8x128x64xf32>, %k: tensor<1x8x128x64xbf16>, %v: tensor<1x8x128x64xf32>) -> tensor<1x8x128x64xf32> {
  // expected-error @+1 {{key element type 'bf16' differs from the query element type 'f32'}}
  %o = kiln.attention %q, %k, %v {scale = 1.0 : f32} : tensor<1x8x128x64xf32>, tensor<1x8x128x64xbf16>, tensor<1x8x128x64xf32> -> tensor<1x8x128x64xf32>
  return %o : tensor<1x8x128x64xf32>
}

// -----

// Head dims of Q and K agree.
func.func @head_dim(%q: tensor<1x8x128x64xf32>, %k: tensor<1x8x128x32xf32>, %v: tensor<1x8x128x64xf32>) -> tensor<1x8x128x64xf32> {
  // expected-error @+1 {{head dim of key (32) differs from query (64)}}
  %o = kiln.attention %q, %k, %v {scale = 1.0 : f32} : tensor<1x8x128x64xf32>, tensor<1x8x128x32xf32>, tensor<1x8x128x64xf32> -> tensor<1x8x128x64xf32>
  return %o : tensor<1x8x128x64xf32>
}

// -----

// Batch sizes agree.
func.func @batch(%q: tensor<2x8x128x64xf32>, %k: tensor<3x8x128x64xf32>, %v: tensor<3x8x128x64xf32>) -> tensor<2x8x128x64xf32> {
  // expected-error @+1 {{batch size of key (3) differs from query (2)}}
  %o = kiln.attention %q, %k, %v {scale = 1.0 : f32} : tensor<2x8x128x64xf32>, tensor<3x8x128x64xf32>, tensor<3x8x128x64xf32> -> tensor<2x8x128x64xf32>
  return %o : tensor<2x8x128x64xf32>
}

// -----

// K and V have the same sequence length.
func.func @kv_length(%q: tensor<1x8x16x64xf32>, %k: tensor<1x8x128x64xf32>, %v: tensor<1x8x100x64xf32>) -> tensor<1x8x16x64xf32> {
  // expected-error @+1 {{sequence length of value (100) differs from key (128)}}
  %o = kiln.attention %q, %k, %v {scale = 1.0 : f32} : tensor<1x8x16x64xf32>, tensor<1x8x128x64xf32>, tensor<1x8x100x64xf32> -> tensor<1x8x16x64xf32>
  return %o : tensor<1x8x16x64xf32>
}

// -----

// K and V have the same number of heads.
func.func @kv_heads(%q: tensor<1x8x16x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x4x16x64xf32>) -> tensor<1x8x16x64xf32> {
  // expected-error @+1 {{number of heads of value (4) differs from key (2)}}
  %o = kiln.attention %q, %k, %v {scale = 1.0 : f32} : tensor<1x8x16x64xf32>, tensor<1x2x16x64xf32>, tensor<1x4x16x64xf32> -> tensor<1x8x16x64xf32>
  return %o : tensor<1x8x16x64xf32>
}

// -----

// Grouped-query attention needs Hq to be a multiple of Hkv.
func.func @gqa(%q: tensor<1x8x16x64xf32>, %k: tensor<1x3x16x64xf32>, %v: tensor<1x3x16x64xf32>) -> tensor<1x8x16x64xf32> {
  // expected-error @+1 {{query heads (8) must be a multiple of the key/value heads (3)}}
  %o = kiln.attention %q, %k, %v {scale = 1.0 : f32} : tensor<1x8x16x64xf32>, tensor<1x3x16x64xf32>, tensor<1x3x16x64xf32> -> tensor<1x8x16x64xf32>
  return %o : tensor<1x8x16x64xf32>
}

// -----

// The result has the query's shape.
func.func @result(%q: tensor<1x8x16x64xf32>, %k: tensor<1x8x16x64xf32>, %v: tensor<1x8x16x64xf32>) -> tensor<1x8x32x64xf32> {
  // expected-error @+1 {{result shape 'tensor<1x8x32x64xf32>' differs from the query shape 'tensor<1x8x16x64xf32>'}}
  %o = kiln.attention %q, %k, %v {scale = 1.0 : f32} : tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32> -> tensor<1x8x32x64xf32>
  return %o : tensor<1x8x32x64xf32>
}

// -----

// A mask must broadcast to [B, Hq, Sq, Sk].
func.func @mask_shape(%q: tensor<1x8x16x64xf32>, %k: tensor<1x8x20x64xf32>, %v: tensor<1x8x20x64xf32>, %m: tensor<1x1x16x16xf32>) -> tensor<1x8x16x64xf32> {
  // expected-error @+1 {{mask axis 3 has size 16, which does not broadcast to the kv length size 20}}
  %o = kiln.attention %q, %k, %v mask(%m : tensor<1x1x16x16xf32>) {scale = 1.0 : f32} : tensor<1x8x16x64xf32>, tensor<1x8x20x64xf32>, tensor<1x8x20x64xf32> -> tensor<1x8x16x64xf32>
  return %o : tensor<1x8x16x64xf32>
}

// -----

// A bias of rank 5 cannot broadcast to rank 4.
func.func @bias_rank(%q: tensor<1x8x16x64xf32>, %k: tensor<1x8x16x64xf32>, %v: tensor<1x8x16x64xf32>, %b: tensor<1x1x8x16x16xf32>) -> tensor<1x8x16x64xf32> {
  // expected-error @+1 {{bias must have rank at most 4, got rank 5}}
  %o = kiln.attention %q, %k, %v bias(%b : tensor<1x1x8x16x16xf32>) {scale = 1.0 : f32} : tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32> -> tensor<1x8x16x64xf32>
  return %o : tensor<1x8x16x64xf32>
}

// -----

// A sliding window is defined relative to the causal diagonal.
func.func @window(%q: tensor<1x8x16x64xf32>, %k: tensor<1x8x16x64xf32>, %v: tensor<1x8x16x64xf32>) -> tensor<1x8x16x64xf32> {
  // expected-error @+1 {{window requires causal}}
  %o = kiln.attention %q, %k, %v {scale = 1.0 : f32, window = 4 : i64} : tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32> -> tensor<1x8x16x64xf32>
  return %o : tensor<1x8x16x64xf32>
}

// -----

// A window of zero keys is meaningless.
func.func @window_zero(%q: tensor<1x8x16x64xf32>, %k: tensor<1x8x16x64xf32>, %v: tensor<1x8x16x64xf32>) -> tensor<1x8x16x64xf32> {
  // expected-error @+1 {{attribute 'window' failed to satisfy constraint}}
  %o = kiln.attention %q, %k, %v {causal, scale = 1.0 : f32, window = 0 : i64} : tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32> -> tensor<1x8x16x64xf32>
  return %o : tensor<1x8x16x64xf32>
}

// -----

// Soft-capping needs a positive cap.
func.func @softcap(%q: tensor<1x8x16x64xf32>, %k: tensor<1x8x16x64xf32>, %v: tensor<1x8x16x64xf32>) -> tensor<1x8x16x64xf32> {
  // expected-error @+1 {{softcap must be positive and finite, got -1}}
  %o = kiln.attention %q, %k, %v {scale = 1.0 : f32, softcap = -1.0 : f32} : tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32> -> tensor<1x8x16x64xf32>
  return %o : tensor<1x8x16x64xf32>
}

// -----

// The scale must be finite.
func.func @scale(%q: tensor<1x8x16x64xf32>, %k: tensor<1x8x16x64xf32>, %v: tensor<1x8x16x64xf32>) -> tensor<1x8x16x64xf32> {
  // expected-error @+1 {{scale must be finite, got INF}}
  %o = kiln.attention %q, %k, %v {scale = 0x7F800000 : f32} : tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32> -> tensor<1x8x16x64xf32>
  return %o : tensor<1x8x16x64xf32>
}

// -----

// Integer tensors are not attention inputs.
func.func @int_query(%q: tensor<1x8x16x64xi32>, %k: tensor<1x8x16x64xf32>, %v: tensor<1x8x16x64xf32>) -> tensor<1x8x16x64xf32> {
  // expected-error @+1 {{operand #0 must be ranked tensor of 16-bit float or bfloat16 type or 32-bit float or f8E4M3FN type values}}
  %o = kiln.attention %q, %k, %v {scale = 1.0 : f32} : tensor<1x8x16x64xi32>, tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32> -> tensor<1x8x16x64xf32>
  return %o : tensor<1x8x16x64xf32>
}

// -----

// masked_score is the finite fill of hidden keys.
func.func @masked_score_inf(%q: tensor<1x8x16x64xf32>, %k: tensor<1x8x16x64xf32>, %v: tensor<1x8x16x64xf32>) -> tensor<1x8x16x64xf32> {
  // expected-error @+1 {{masked_score must be finite and at most -1e4, got -INF}}
  %o = kiln.attention %q, %k, %v {scale = 1.0 : f32, causal, masked_score = 0xFF800000 : f32} : tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32> -> tensor<1x8x16x64xf32>
  return %o : tensor<1x8x16x64xf32>
}

// -----

// masked_score needs something that hides keys with it.
func.func @masked_score_nothing_hidden(%q: tensor<1x8x16x64xf32>, %k: tensor<1x8x16x64xf32>, %v: tensor<1x8x16x64xf32>) -> tensor<1x8x16x64xf32> {
  // expected-error @+1 {{masked_score needs a boolean mask, causal or window_right}}
  %o = kiln.attention %q, %k, %v {scale = 1.0 : f32, masked_score = -1.0e+5 : f32} : tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32> -> tensor<1x8x16x64xf32>
  return %o : tensor<1x8x16x64xf32>
}

// -----

// causal is window_right = 0; both at once is an error.
func.func @causal_and_window_right(%q: tensor<1x8x16x64xf32>, %k: tensor<1x8x16x64xf32>, %v: tensor<1x8x16x64xf32>) -> tensor<1x8x16x64xf32> {
  // expected-error @+1 {{window_right and causal are exclusive}}
  %o = kiln.attention %q, %k, %v {scale = 1.0 : f32, causal, window_right = 4 : i64} : tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32> -> tensor<1x8x16x64xf32>
  return %o : tensor<1x8x16x64xf32>
}

// -----

// The packed form's operands are [rows, heads, dim].
func.func @packed_rank(%q: tensor<1x8x16x64xf32>, %k: tensor<1x8x16x64xf32>, %v: tensor<1x8x16x64xf32>, %qo: tensor<2xi32>, %ko: tensor<2xi32>) -> tensor<1x8x16x64xf32> {
  // expected-error @+1 {{query must have rank 3 (packed), got rank 4}}
  %o = kiln.attention %q, %k, %v offsets(%qo, %ko : tensor<2xi32>, tensor<2xi32>) {scale = 1.0 : f32} : tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32> -> tensor<1x8x16x64xf32>
  return %o : tensor<1x8x16x64xf32>
}

// -----

// Both offsets describe one batch.
func.func @packed_batches(%q: tensor<9x8x64xf32>, %k: tensor<9x8x64xf32>, %v: tensor<9x8x64xf32>, %qo: tensor<3xi32>, %ko: tensor<4xi32>) -> tensor<9x8x64xf32> {
  // expected-error @+1 {{q_offsets (3 entries) and kv_offsets (4) must describe one batch}}
  %o = kiln.attention %q, %k, %v offsets(%qo, %ko : tensor<3xi32>, tensor<4xi32>) {scale = 1.0 : f32} : tensor<9x8x64xf32>, tensor<9x8x64xf32>, tensor<9x8x64xf32> -> tensor<9x8x64xf32>
  return %o : tensor<9x8x64xf32>
}

// -----

// No [B, Hq, Sq, Sk] for a mask to index.
func.func @packed_mask(%q: tensor<9x8x64xf32>, %k: tensor<9x8x64xf32>, %v: tensor<9x8x64xf32>, %m: tensor<9x9xi1>, %qo: tensor<3xi32>, %ko: tensor<3xi32>) -> tensor<9x8x64xf32> {
  // expected-error @+1 {{the packed form (offsets) takes no mask or bias}}
  %o = kiln.attention %q, %k, %v mask(%m : tensor<9x9xi1>) offsets(%qo, %ko : tensor<3xi32>, tensor<3xi32>) {scale = 1.0 : f32} : tensor<9x8x64xf32>, tensor<9x8x64xf32>, tensor<9x8x64xf32> -> tensor<9x8x64xf32>
  return %o : tensor<9x8x64xf32>
}

// -----

func.func @packed_layout(%q: tensor<9x8x64xf32>, %k: tensor<9x8x64xf32>, %v: tensor<9x8x64xf32>, %qo: tensor<3xi32>, %ko: tensor<3xi32>) -> tensor<9x8x64xf32> {
  // expected-error @+1 {{the packed form (offsets) takes no layout}}
  %o = kiln.attention %q, %k, %v offsets(%qo, %ko : tensor<3xi32>, tensor<3xi32>) {scale = 1.0 : f32, layout = #kiln.layout<bshd>} : tensor<9x8x64xf32>, tensor<9x8x64xf32>, tensor<9x8x64xf32> -> tensor<9x8x64xf32>
  return %o : tensor<9x8x64xf32>
}

// -----

func.func @packed_heads(%q: tensor<9x6x64xf32>, %k: tensor<9x4x64xf32>, %v: tensor<9x4x64xf32>, %qo: tensor<3xi32>, %ko: tensor<3xi32>) -> tensor<9x6x64xf32> {
  // expected-error @+1 {{query heads (6) must be a multiple of the key/value heads (4)}}
  %o = kiln.attention %q, %k, %v offsets(%qo, %ko : tensor<3xi32>, tensor<3xi32>) {scale = 1.0 : f32} : tensor<9x6x64xf32>, tensor<9x4x64xf32>, tensor<9x4x64xf32> -> tensor<9x6x64xf32>
  return %o : tensor<9x6x64xf32>
}

// -----

// A run-time scale is one element, or one a query head of rank 1: the
// graph's [1, H, 1, 1] broadcast is not the op's form.
func.func @scale_factor_per_head(%q: tensor<1x4x16x32xf32>, %k: tensor<1x4x16x32xf32>, %v: tensor<1x4x16x32xf32>, %f: tensor<1x4x1x1xf32>) -> tensor<1x4x16x32xf32> {
  // expected-error @+1 {{scale_factor must hold one element (every size 1) or one a query head ([Hq], rank 1), got 'tensor<1x4x1x1xf32>'}}
  %o = kiln.attention %q, %k, %v scale_factor(%f : tensor<1x4x1x1xf32>) {scale = 1.0 : f32} : tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32> -> tensor<1x4x16x32xf32>
  return %o : tensor<1x4x16x32xf32>
}

// -----

// A dynamic size could be anything but 1.
func.func @scale_factor_dynamic(%q: tensor<1x4x16x32xf32>, %k: tensor<1x4x16x32xf32>, %v: tensor<1x4x16x32xf32>, %f: tensor<?xf32>) -> tensor<1x4x16x32xf32> {
  // expected-error @+1 {{scale_factor must hold one element (every size 1) or one a query head ([Hq], rank 1), got 'tensor<?xf32>'}}
  %o = kiln.attention %q, %k, %v scale_factor(%f : tensor<?xf32>) {scale = 1.0 : f32} : tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32> -> tensor<1x4x16x32xf32>
  return %o : tensor<1x4x16x32xf32>
}

// -----

// A per-head factor holds one value a query head, not a KV head.
func.func @scale_factor_kv_heads(%q: tensor<1x8x16x32xf32>, %k: tensor<1x2x16x32xf32>, %v: tensor<1x2x16x32xf32>, %f: tensor<2xf32>) -> tensor<1x8x16x32xf32> {
  // expected-error @+1 {{a per-head scale_factor holds one value a query head: 'tensor<2xf32>' for 8 query heads}}
  %o = kiln.attention %q, %k, %v scale_factor(%f : tensor<2xf32>) {scale = 1.0 : f32} : tensor<1x8x16x32xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x32xf32> -> tensor<1x8x16x32xf32>
  return %o : tensor<1x8x16x32xf32>
}

// -----

// The heads must be known to match a per-head factor.
func.func @scale_factor_dynamic_heads(%q: tensor<1x?x16x32xf32>, %k: tensor<1x?x16x32xf32>, %v: tensor<1x?x16x32xf32>, %f: tensor<4xf32>) -> tensor<1x?x16x32xf32> {
  // expected-error @+1 {{a per-head scale_factor holds one value a query head: 'tensor<4xf32>' for ? query heads}}
  %o = kiln.attention %q, %k, %v scale_factor(%f : tensor<4xf32>) {scale = 1.0 : f32} : tensor<1x?x16x32xf32>, tensor<1x?x16x32xf32>, tensor<1x?x16x32xf32> -> tensor<1x?x16x32xf32>
  return %o : tensor<1x?x16x32xf32>
}

// -----

// The backward's factor follows the same rule (bshd: heads on axis 2).
func.func @grad_scale_factor_heads(%q: tensor<1x16x4x32xf32>, %o: tensor<1x16x4x32xf32>, %lse: tensor<1x4x16xf32>, %f: tensor<3xf32>) -> tensor<1x16x4x32xf32> {
  // expected-error @+1 {{a per-head scale_factor holds one value a query head: 'tensor<3xf32>' for 4 query heads}}
  %dq, %dk, %dv = kiln.attention_grad %q, %q, %q, %o, %lse, %o scale_factor(%f : tensor<3xf32>) {layout = #kiln.layout<bshd>, scale = 1.0 : f32} : tensor<1x16x4x32xf32>, tensor<1x16x4x32xf32>, tensor<1x16x4x32xf32>, tensor<1x16x4x32xf32>, tensor<1x4x16xf32>, tensor<1x16x4x32xf32> -> tensor<1x16x4x32xf32>, tensor<1x16x4x32xf32>, tensor<1x16x4x32xf32>
  return %dq : tensor<1x16x4x32xf32>
}

// -----

// The log-sum-exp is [B, Hq, Sq].
func.func @lse_shape(%q: tensor<1x8x128x64xf32>, %k: tensor<1x8x128x64xf32>, %v: tensor<1x8x128x64xf32>) -> tensor<1x128x8xf32> {
  // expected-error @+1 {{lse must be f32 [1, 8, 128] ([batch, heads, query length]), got 'tensor<1x128x8xf32>'}}
  %o, %lse = kiln.attention %q, %k, %v {scale = 1.0 : f32} : tensor<1x8x128x64xf32>, tensor<1x8x128x64xf32>, tensor<1x8x128x64xf32> -> tensor<1x8x128x64xf32>, tensor<1x128x8xf32>
  return %lse : tensor<1x128x8xf32>
}

// -----

// The packed form's log-sum-exp is [Hq, total_q].
func.func @lse_packed(%q: tensor<40x8x64xf16>, %k: tensor<48x2x64xf16>, %v: tensor<48x2x64xf16>, %qo: tensor<4xi32>, %ko: tensor<4xi32>) -> tensor<40x8xf32> {
  // expected-error @+1 {{lse must be f32 [8, 40] ([heads, total_q], packed), got 'tensor<40x8xf32>'}}
  %o, %lse = kiln.attention %q, %k, %v offsets(%qo, %ko : tensor<4xi32>, tensor<4xi32>) {scale = 0.125 : f32} : tensor<40x8x64xf16>, tensor<48x2x64xf16>, tensor<48x2x64xf16> -> tensor<40x8x64xf16>, tensor<40x8xf32>
  return %lse : tensor<40x8xf32>
}

// -----

// The log-sum-exp is f32 whatever the element type.
func.func @lse_dtype(%q: tensor<1x8x128x64xf16>, %k: tensor<1x8x128x64xf16>, %v: tensor<1x8x128x64xf16>) -> tensor<1x8x128xf16> {
  // expected-error @+1 {{result #1 must be ranked tensor of 32-bit float values, but got 'tensor<1x8x128xf16>'}}
  %o, %lse = kiln.attention %q, %k, %v {scale = 1.0 : f32} : tensor<1x8x128x64xf16>, tensor<1x8x128x64xf16>, tensor<1x8x128x64xf16> -> tensor<1x8x128x64xf16>, tensor<1x8x128xf16>
  return %lse : tensor<1x8x128xf16>
}

// -----

// The backward's lse has the forward's lse shape.
func.func @grad_lse(%q: tensor<1x4x16x32xf32>, %o: tensor<1x4x16x32xf32>, %lse: tensor<1x4x32xf32>) -> tensor<1x4x16x32xf32> {
  // expected-error @+1 {{lse must be f32 [1, 4, 16] ([batch, heads, query length]), got 'tensor<1x4x32xf32>'}}
  %dq, %dk, %dv = kiln.attention_grad %q, %q, %q, %o, %lse, %o {scale = 1.0 : f32} : tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x32xf32>, tensor<1x4x16x32xf32> -> tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>
  return %dq : tensor<1x4x16x32xf32>
}

// -----

// out is the forward's result: Q's shape with V's head dim.
func.func @grad_out_shape(%q: tensor<1x4x16x32xf32>, %v: tensor<1x4x16x16xf32>, %o: tensor<1x4x16x32xf32>, %lse: tensor<1x4x16xf32>) -> tensor<1x4x16x32xf32> {
  // expected-error @+1 {{out shape 'tensor<1x4x16x32xf32>' differs from the query shape 'tensor<1x4x16x32xf32>' with the value head dim (16)}}
  %dq, %dk, %dv = kiln.attention_grad %q, %q, %v, %o, %lse, %o {scale = 1.0 : f32} : tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16x16xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16xf32>, tensor<1x4x16x32xf32> -> tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16x16xf32>
  return %dq : tensor<1x4x16x32xf32>
}

// -----

// grad_out has out's type.
func.func @grad_out_type(%q: tensor<1x4x16x32xbf16>, %o: tensor<1x4x16x32xbf16>, %do: tensor<1x4x16x32xf32>, %lse: tensor<1x4x16xf32>) -> tensor<1x4x16x32xbf16> {
  // expected-error @+1 {{grad_out type 'tensor<1x4x16x32xf32>' differs from the out type 'tensor<1x4x16x32xbf16>'}}
  %dq, %dk, %dv = kiln.attention_grad %q, %q, %q, %o, %lse, %do {scale = 1.0 : f32} : tensor<1x4x16x32xbf16>, tensor<1x4x16x32xbf16>, tensor<1x4x16x32xbf16>, tensor<1x4x16x32xbf16>, tensor<1x4x16xf32>, tensor<1x4x16x32xf32> -> tensor<1x4x16x32xbf16>, tensor<1x4x16x32xbf16>, tensor<1x4x16x32xbf16>
  return %dq : tensor<1x4x16x32xbf16>
}

// -----

// Each gradient has its operand's type (GQA: dK is [B, Hkv, Sk, D]).
func.func @grad_key_type(%q: tensor<1x4x16x32xf32>, %k: tensor<1x2x16x32xf32>, %o: tensor<1x4x16x32xf32>, %lse: tensor<1x4x16xf32>) -> tensor<1x4x16x32xf32> {
  // expected-error @+1 {{grad_key type 'tensor<1x4x16x32xf32>' differs from the key type 'tensor<1x2x16x32xf32>'}}
  %dq, %dk, %dv = kiln.attention_grad %q, %k, %k, %o, %lse, %o {scale = 1.0 : f32} : tensor<1x4x16x32xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16xf32>, tensor<1x4x16x32xf32> -> tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>, tensor<1x2x16x32xf32>
  return %dq : tensor<1x4x16x32xf32>
}

// -----

// The bias's gradient needs a bias.
func.func @bias_grad_no_bias(%q: tensor<1x4x16x32xf32>, %lse: tensor<1x4x16xf32>) -> tensor<1x4x16x32xf32> {
  // expected-error @+1 {{bias_grad needs a bias}}
  %dq, %dk, %dv = kiln.attention_grad %q, %q, %q, %q, %lse, %q {bias_grad, scale = 1.0 : f32} : tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16xf32>, tensor<1x4x16x32xf32> -> tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>
  return %dq : tensor<1x4x16x32xf32>
}

// -----

// bias_grad and the grad_bias result come together.
func.func @bias_grad_result(%q: tensor<1x4x16x32xf32>, %lse: tensor<1x4x16xf32>, %b: tensor<4x16x16xf32>) -> tensor<1x4x16x32xf32> {
  // expected-error @+1 {{bias_grad needs a grad_bias result}}
  %dq, %dk, %dv = kiln.attention_grad %q, %q, %q, %q, %lse, %q bias(%b : tensor<4x16x16xf32>) {bias_grad, scale = 1.0 : f32} : tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16xf32>, tensor<1x4x16x32xf32> -> tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>
  return %dq : tensor<1x4x16x32xf32>
}

// -----

// The bias's gradient has the bias's shape (summed over its broadcasts).
func.func @bias_grad_shape(%q: tensor<1x4x16x32xf32>, %lse: tensor<1x4x16xf32>, %b: tensor<4x16x16xf32>) -> tensor<1x4x16x16xf32> {
  // expected-error @+1 {{grad_bias type 'tensor<1x4x16x16xf32>' differs from the bias type 'tensor<4x16x16xf32>'}}
  %dq, %dk, %dv, %db = kiln.attention_grad %q, %q, %q, %q, %lse, %q bias(%b : tensor<4x16x16xf32>) {bias_grad, scale = 1.0 : f32} : tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16xf32>, tensor<1x4x16x32xf32> -> tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16x16xf32>
  return %db : tensor<1x4x16x16xf32>
}

// -----

// The packed backward follows the packed forward's rules.
func.func @grad_packed_mask(%q: tensor<40x4x32xf32>, %lse: tensor<4x40xf32>, %qo: tensor<3xi32>, %m: tensor<1x1x40x40xi1>) -> tensor<40x4x32xf32> {
  // expected-error @+1 {{the packed form (offsets) takes no mask or bias}}
  %dq, %dk, %dv = kiln.attention_grad %q, %q, %q, %q, %lse, %q mask(%m : tensor<1x1x40x40xi1>) offsets(%qo, %qo : tensor<3xi32>, tensor<3xi32>) {scale = 1.0 : f32} : tensor<40x4x32xf32>, tensor<40x4x32xf32>, tensor<40x4x32xf32>, tensor<40x4x32xf32>, tensor<4x40xf32>, tensor<40x4x32xf32> -> tensor<40x4x32xf32>, tensor<40x4x32xf32>, tensor<40x4x32xf32>
  return %dq : tensor<40x4x32xf32>
}

// -----

func.func @fp8_without_descales(%q: tensor<1x2x16x32xf8E4M3FN>, %k: tensor<1x2x16x32xf8E4M3FN>, %v: tensor<1x2x16x32xf8E4M3FN>) -> tensor<1x2x16x32xf32> {
  // expected-error @+1 {{f8E4M3FN operands need descales}}
  %o = kiln.attention %q, %k, %v {scale = 1.0 : f32} : tensor<1x2x16x32xf8E4M3FN>, tensor<1x2x16x32xf8E4M3FN>, tensor<1x2x16x32xf8E4M3FN> -> tensor<1x2x16x32xf32>
  return %o : tensor<1x2x16x32xf32>
}

// -----

func.func @descales_on_floats(%q: tensor<1x2x16x32xf32>, %k: tensor<1x2x16x32xf32>, %v: tensor<1x2x16x32xf32>, %s: tensor<1xf32>) -> tensor<1x2x16x32xf32> {
  // expected-error @+1 {{descales apply to f8E4M3FN operands only}}
  %o = kiln.attention %q, %k, %v descale(%s, %s, %s : tensor<1xf32>, tensor<1xf32>, tensor<1xf32>) {scale = 1.0 : f32} : tensor<1x2x16x32xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x32xf32> -> tensor<1x2x16x32xf32>
  return %o : tensor<1x2x16x32xf32>
}

// -----

func.func @fp8_descale_shape(%q: tensor<1x4x16x32xf8E4M3FN>, %k: tensor<1x2x16x32xf8E4M3FN>, %v: tensor<1x2x16x32xf8E4M3FN>, %s: tensor<1xf32>, %h: tensor<4xf32>) -> tensor<1x4x16x32xf16> {
  // expected-error @+1 {{k_descale must be [1] or one a head [2], got 'tensor<4xf32>'}}
  %o = kiln.attention %q, %k, %v descale(%s, %h, %s : tensor<1xf32>, tensor<4xf32>, tensor<1xf32>) {scale = 1.0 : f32} : tensor<1x4x16x32xf8E4M3FN>, tensor<1x2x16x32xf8E4M3FN>, tensor<1x2x16x32xf8E4M3FN> -> tensor<1x4x16x32xf16>
  return %o : tensor<1x4x16x32xf16>
}

// -----

func.func @fp8_mixed(%q: tensor<1x2x16x32xf8E4M3FN>, %k: tensor<1x2x16x32xf16>, %v: tensor<1x2x16x32xf8E4M3FN>, %s: tensor<1xf32>) -> tensor<1x2x16x32xf16> {
  // expected-error @+1 {{key element type 'f16' differs from the query element type 'f8E4M3FN'}}
  %o = kiln.attention %q, %k, %v descale(%s, %s, %s : tensor<1xf32>, tensor<1xf32>, tensor<1xf32>) {scale = 1.0 : f32} : tensor<1x2x16x32xf8E4M3FN>, tensor<1x2x16x32xf16>, tensor<1x2x16x32xf8E4M3FN> -> tensor<1x2x16x32xf16>
  return %o : tensor<1x2x16x32xf16>
}
