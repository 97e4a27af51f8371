// Attention as a graph frontend writes it in TOSA: Q·Kᵀ through rank-3
// matmuls, a constant scale, an additive padding mask, a decomposed softmax,
// and the product with V. kiln-fuse-attention turns it into kiln.attention.
//
//   kilnc examples/tosa_attention.mlir --emit=mlir
//   kilnc examples/tosa_attention.mlir -o /tmp/tosa_pkg
func.func @encoder_attention(%q: tensor<1x2x16x64xf32>, %k: tensor<1x2x16x64xf32>,
                             %v: tensor<1x2x16x64xf32>,
                             %mask: tensor<1x1x1x16xf32>) -> tensor<1x2x16x64xf32> {
  %kt = tosa.transpose %k {perms = array<i32: 0, 1, 3, 2>} : (tensor<1x2x16x64xf32>) -> tensor<1x2x64x16xf32>
  %s3 = tosa.const_shape {values = dense<[2, 16, 64]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %q3 = tosa.reshape %q, %s3 : (tensor<1x2x16x64xf32>, !tosa.shape<3>) -> tensor<2x16x64xf32>
  %s3t = tosa.const_shape {values = dense<[2, 64, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %kt3 = tosa.reshape %kt, %s3t : (tensor<1x2x64x16xf32>, !tosa.shape<3>) -> tensor<2x64x16xf32>
  %zp = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %qk = tosa.matmul %q3, %kt3, %zp, %zp : (tensor<2x16x64xf32>, tensor<2x64x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16xf32>
  %s4 = tosa.const_shape {values = dense<[1, 2, 16, 16]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %qk4 = tosa.reshape %qk, %s4 : (tensor<2x16x16xf32>, !tosa.shape<4>) -> tensor<1x2x16x16xf32>
  %c = "tosa.const"() {values = dense<0.125> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %scaled = tosa.mul %qk4, %c, %shift : (tensor<1x2x16x16xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %x = tosa.add %scaled, %mask : (tensor<1x2x16x16xf32>, tensor<1x1x1x16xf32>) -> tensor<1x2x16x16xf32>
  %max = tosa.reduce_max %x {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %centered = tosa.sub %x, %max : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) -> tensor<1x2x16x16xf32>
  %e = tosa.exp %centered : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x16xf32>
  %sum = tosa.reduce_sum %e {axis = 3 : i32} : (tensor<1x2x16x16xf32>) -> tensor<1x2x16x1xf32>
  %inv = tosa.reciprocal %sum : (tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
  %p = tosa.mul %e, %inv, %shift : (tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>, tensor<1xi8>) -> tensor<1x2x16x16xf32>
  %sp = tosa.const_shape {values = dense<[2, 16, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %p3 = tosa.reshape %p, %sp : (tensor<1x2x16x16xf32>, !tosa.shape<3>) -> tensor<2x16x16xf32>
  %v3 = tosa.reshape %v, %s3 : (tensor<1x2x16x64xf32>, !tosa.shape<3>) -> tensor<2x16x64xf32>
  %o = tosa.matmul %p3, %v3, %zp, %zp : (tensor<2x16x16xf32>, tensor<2x16x64xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x64xf32>
  %so = tosa.const_shape {values = dense<[1, 2, 16, 64]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %o4 = tosa.reshape %o, %so : (tensor<2x16x64xf32>, !tosa.shape<4>) -> tensor<1x2x16x64xf32>
  return %o4 : tensor<1x2x16x64xf32>
}
