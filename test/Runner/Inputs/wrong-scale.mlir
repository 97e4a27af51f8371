// The canonical graph of verify-fusion.mlir fused with a wrong scale (0.5
// instead of 1/sqrt(8)): verification must fail.
module {
  func.func @canonical(%arg0: tensor<1x2x16x8xf32>, %arg1: tensor<1x2x16x8xf32>, %arg2: tensor<1x1x1x16xf32>, %arg3: tensor<1x2x16x8xf32>) -> tensor<1x2x16x8xf32> {
    %0 = kiln.attention %arg0, %arg1, %arg3 mask(%arg2 : tensor<1x1x1x16xf32>) {scale = 5.000000e-01 : f32} : tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32> -> tensor<1x2x16x8xf32>
    return %0 : tensor<1x2x16x8xf32>
  }
}

