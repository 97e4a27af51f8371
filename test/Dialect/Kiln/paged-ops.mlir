// RUN: kiln-opt %s | FileCheck %s
// RUN: kiln-opt %s --mlir-print-op-generic | kiln-opt | FileCheck %s

// Decode over a paged cache: static shapes, GQA 32/8.
// CHECK-LABEL: func.func @decode
// CHECK: kiln.paged_attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {causal, scale = 1.250000e-01 : f32} : tensor<4x32x1x128xbf16>, tensor<512x16x8x128xbf16>, tensor<512x16x8x128xbf16>, tensor<4x64xi32>, tensor<4xi32> -> tensor<4x32x1x128xbf16>
func.func @decode(%q: tensor<4x32x1x128xbf16>, %kc: tensor<512x16x8x128xbf16>, %vc: tensor<512x16x8x128xbf16>, %pt: tensor<4x64xi32>, %lens: tensor<4xi32>) -> tensor<4x32x1x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {causal, scale = 0.125 : f32} : tensor<4x32x1x128xbf16>, tensor<512x16x8x128xbf16>, tensor<512x16x8x128xbf16>, tensor<4x64xi32>, tensor<4xi32> -> tensor<4x32x1x128xbf16>
  return %o : tensor<4x32x1x128xbf16>
}

// Every dimension dynamic; window and soft-cap.
// CHECK-LABEL: func.func @dynamic
// CHECK: kiln.paged_attention %{{.*}} {causal, scale = 1.000000e+00 : f32, softcap = 3.000000e+01 : f32, window = 256 : i64} : tensor<?x?x?x?xf16>, tensor<?x?x?x?xf16>, tensor<?x?x?x?xf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x?x?x?xf16>
func.func @dynamic(%q: tensor<?x?x?x?xf16>, %kc: tensor<?x?x?x?xf16>, %vc: tensor<?x?x?x?xf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) -> tensor<?x?x?x?xf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {causal, window = 256 : i64, softcap = 30.0 : f32, scale = 1.0 : f32} : tensor<?x?x?x?xf16>, tensor<?x?x?x?xf16>, tensor<?x?x?x?xf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x?x?x?xf16>
  return %o : tensor<?x?x?x?xf16>
}

// Non-causal, page size 1.
// CHECK-LABEL: func.func @page_one
// CHECK: kiln.paged_attention {{.*}} {scale = 5.000000e-01 : f32} : tensor<2x4x3x8xf32>, tensor<40x1x4x8xf32>
func.func @page_one(%q: tensor<2x4x3x8xf32>, %kc: tensor<40x1x4x8xf32>, %vc: tensor<40x1x4x8xf32>, %pt: tensor<2x20xi32>, %lens: tensor<2xi32>) -> tensor<2x4x3x8xf32> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {scale = 0.5 : f32} : tensor<2x4x3x8xf32>, tensor<40x1x4x8xf32>, tensor<40x1x4x8xf32>, tensor<2x20xi32>, tensor<2xi32> -> tensor<2x4x3x8xf32>
  return %o : tensor<2x4x3x8xf32>
}

// A ragged batch: 503 packed queries of 4 sequences (q_offsets [5]).
// CHECK-LABEL: func.func @ragged
// CHECK: kiln.paged_attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} q_offsets %{{.*}} {causal, scale = 1.250000e-01 : f32} : tensor<503x32x128xbf16>, tensor<512x16x8x128xbf16>, tensor<512x16x8x128xbf16>, tensor<4x64xi32>, tensor<4xi32>, tensor<5xi32> -> tensor<503x32x128xbf16>
func.func @ragged(%q: tensor<503x32x128xbf16>, %kc: tensor<512x16x8x128xbf16>, %vc: tensor<512x16x8x128xbf16>, %pt: tensor<4x64xi32>, %lens: tensor<4xi32>, %offs: tensor<5xi32>) -> tensor<503x32x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens q_offsets %offs {causal, scale = 0.125 : f32} : tensor<503x32x128xbf16>, tensor<512x16x8x128xbf16>, tensor<512x16x8x128xbf16>, tensor<4x64xi32>, tensor<4xi32>, tensor<5xi32> -> tensor<503x32x128xbf16>
  return %o : tensor<503x32x128xbf16>
}

// Ragged and dynamic, with a value head dim of its own.
// CHECK-LABEL: func.func @ragged_dynamic
// CHECK: q_offsets %{{.*}} {scale = 1.000000e+00 : f32} : tensor<?x8x64xf16>, tensor<?x?x2x64xf16>, tensor<?x?x2x32xf16>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x8x32xf16>
func.func @ragged_dynamic(%q: tensor<?x8x64xf16>, %kc: tensor<?x?x2x64xf16>, %vc: tensor<?x?x2x32xf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>, %offs: tensor<?xi32>) -> tensor<?x8x32xf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens q_offsets %offs {scale = 1.0 : f32} : tensor<?x8x64xf16>, tensor<?x?x2x64xf16>, tensor<?x?x2x32xf16>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x8x32xf16>
  return %o : tensor<?x8x32xf16>
}

// Decode over e4m3 caches with per-KV-head scales ([Hkv]).
// CHECK-LABEL: func.func @fp8_per_head
// CHECK-SAME: %[[KS:[^:]+]]: tensor<8xf32>, %[[VS:[^:]+]]: tensor<8xf32>
// CHECK: kiln.paged_attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} scales(%[[KS]], %[[VS]] : tensor<8xf32>, tensor<8xf32>) {scale = 1.250000e-01 : f32} : tensor<4x32x1x128xbf16>, tensor<512x16x8x128xf8E4M3FN>, tensor<512x16x8x128xf8E4M3FN>, tensor<4x64xi32>, tensor<4xi32> -> tensor<4x32x1x128xbf16>
func.func @fp8_per_head(%q: tensor<4x32x1x128xbf16>, %kc: tensor<512x16x8x128xf8E4M3FN>, %vc: tensor<512x16x8x128xf8E4M3FN>, %pt: tensor<4x64xi32>, %lens: tensor<4xi32>, %ks: tensor<8xf32>, %vs: tensor<8xf32>) -> tensor<4x32x1x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens scales(%ks, %vs : tensor<8xf32>, tensor<8xf32>) {scale = 0.125 : f32} : tensor<4x32x1x128xbf16>, tensor<512x16x8x128xf8E4M3FN>, tensor<512x16x8x128xf8E4M3FN>, tensor<4x64xi32>, tensor<4xi32> -> tensor<4x32x1x128xbf16>
  return %o : tensor<4x32x1x128xbf16>
}

// Chunked prefill over e4m3 caches with per-tensor scales ([1]), f16 queries,
// window and soft-cap.
// CHECK-LABEL: func.func @fp8_per_tensor
// CHECK-SAME: %[[KS:[^:]+]]: tensor<1xf32>, %[[VS:[^:]+]]: tensor<1xf32>
// CHECK: kiln.paged_attention {{.*}} scales(%[[KS]], %[[VS]] : tensor<1xf32>, tensor<1xf32>) {causal, scale = 1.250000e-01 : f32, softcap = 5.000000e+01 : f32, window = 128 : i64} : tensor<2x8x16x64xf16>, tensor<64x16x2x64xf8E4M3FN>, tensor<64x16x2x64xf8E4M3FN>, tensor<2x32xi32>, tensor<2xi32> -> tensor<2x8x16x64xf16>
func.func @fp8_per_tensor(%q: tensor<2x8x16x64xf16>, %kc: tensor<64x16x2x64xf8E4M3FN>, %vc: tensor<64x16x2x64xf8E4M3FN>, %pt: tensor<2x32xi32>, %lens: tensor<2xi32>, %ks: tensor<1xf32>, %vs: tensor<1xf32>) -> tensor<2x8x16x64xf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens scales(%ks, %vs : tensor<1xf32>, tensor<1xf32>) {causal, window = 128 : i64, softcap = 50.0 : f32, scale = 0.125 : f32} : tensor<2x8x16x64xf16>, tensor<64x16x2x64xf8E4M3FN>, tensor<64x16x2x64xf8E4M3FN>, tensor<2x32xi32>, tensor<2xi32> -> tensor<2x8x16x64xf16>
  return %o : tensor<2x8x16x64xf16>
}

// A ragged batch over e4m3 caches: q_offsets comes before scales.
// CHECK-LABEL: func.func @fp8_ragged
// CHECK-SAME: %[[OFFS:[^:]+]]: tensor<5xi32>, %[[KS:[^:]+]]: tensor<8xf32>, %[[VS:[^:]+]]: tensor<8xf32>
// CHECK: kiln.paged_attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} q_offsets %[[OFFS]] scales(%[[KS]], %[[VS]] : tensor<8xf32>, tensor<8xf32>) {causal, scale = 1.250000e-01 : f32} : tensor<503x32x128xbf16>, tensor<512x16x8x128xf8E4M3FN>, tensor<512x16x8x128xf8E4M3FN>, tensor<4x64xi32>, tensor<4xi32>, tensor<5xi32> -> tensor<503x32x128xbf16>
func.func @fp8_ragged(%q: tensor<503x32x128xbf16>, %kc: tensor<512x16x8x128xf8E4M3FN>, %vc: tensor<512x16x8x128xf8E4M3FN>, %pt: tensor<4x64xi32>, %lens: tensor<4xi32>, %offs: tensor<5xi32>, %ks: tensor<8xf32>, %vs: tensor<8xf32>) -> tensor<503x32x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens q_offsets %offs scales(%ks, %vs : tensor<8xf32>, tensor<8xf32>) {causal, scale = 0.125 : f32} : tensor<503x32x128xbf16>, tensor<512x16x8x128xf8E4M3FN>, tensor<512x16x8x128xf8E4M3FN>, tensor<4x64xi32>, tensor<4xi32>, tensor<5xi32> -> tensor<503x32x128xbf16>
  return %o : tensor<503x32x128xbf16>
}

// Ragged and dynamic over e4m3 caches: a dynamic KV head count takes
// per-head scales of any static size, and per-tensor ones.
// CHECK-LABEL: func.func @fp8_ragged_dynamic
// CHECK: q_offsets %{{.*}} scales(%{{.*}}, %{{.*}} : tensor<4xf32>, tensor<4xf32>) {scale = 1.000000e+00 : f32} : tensor<?x8x64xf16>, tensor<?x?x?x64xf8E4M3FN>, tensor<?x?x?x32xf8E4M3FN>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x8x32xf16>
// CHECK: scales(%{{.*}}, %{{.*}} : tensor<1xf32>, tensor<1xf32>)
func.func @fp8_ragged_dynamic(%q: tensor<?x8x64xf16>, %kc: tensor<?x?x?x64xf8E4M3FN>, %vc: tensor<?x?x?x32xf8E4M3FN>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>, %offs: tensor<?xi32>, %ks: tensor<4xf32>, %vs: tensor<4xf32>, %ks1: tensor<1xf32>, %vs1: tensor<1xf32>) -> (tensor<?x8x32xf16>, tensor<?x8x32xf16>) {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens q_offsets %offs scales(%ks, %vs : tensor<4xf32>, tensor<4xf32>) {scale = 1.0 : f32} : tensor<?x8x64xf16>, tensor<?x?x?x64xf8E4M3FN>, tensor<?x?x?x32xf8E4M3FN>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x8x32xf16>
  %p = kiln.paged_attention %q, %kc, %vc, %pt, %lens q_offsets %offs scales(%ks1, %vs1 : tensor<1xf32>, tensor<1xf32>) {scale = 1.0 : f32} : tensor<?x8x64xf16>, tensor<?x?x?x64xf8E4M3FN>, tensor<?x?x?x32xf8E4M3FN>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x8x32xf16>
  return %o, %p : tensor<?x8x32xf16>, tensor<?x8x32xf16>
}
