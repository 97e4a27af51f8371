// The form kiln.jax.jit lowers a function in: every op under a name scope
// of its own (kiln.e<N>, one per step of the flat program), so that each
// value has a location name no other op has. A projection of x makes Q;
// K and V are arguments; the scores' softmax is written out.
module @jit_marked {
  func.func public @main(%arg0: tensor<2x16x64xf32> loc("leaves[0]"), %arg1: tensor<64x64xf32> loc("leaves[1]"), %arg2: tensor<2x16x4x16xf32> loc("leaves[2]"), %arg3: tensor<2x16x4x16xf32> loc("leaves[3]")) -> (tensor<2x16x4x16xf32>) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x16x64xf32>, tensor<64x64xf32>) -> tensor<2x16x64xf32> loc("jit(marked)/kiln.e0/dot_general")
    %1 = stablehlo.reshape %0 : (tensor<2x16x64xf32>) -> tensor<2x16x4x16xf32> loc("jit(marked)/kiln.e1/reshape")
    %2 = stablehlo.dot_general %1, %arg2, batching_dims = [0, 2] x [0, 2], contracting_dims = [3] x [3], precision = [DEFAULT, DEFAULT] : (tensor<2x16x4x16xf32>, tensor<2x16x4x16xf32>) -> tensor<2x4x16x16xf32> loc("jit(marked)/kiln.e2/dot_general")
    %cst = stablehlo.constant dense<2.500000e-01> : tensor<f32> loc("jit(marked)/kiln.e3/mul")
    %3 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x4x16x16xf32> loc("jit(marked)/kiln.e3/mul")
    %4 = stablehlo.multiply %2, %3 : tensor<2x4x16x16xf32> loc("jit(marked)/kiln.e3/mul")
    %cst_0 = stablehlo.constant dense<0xFF800000> : tensor<f32> loc("jit(marked)/kiln.e4/reduce_max")
    %5 = stablehlo.reduce(%4 init: %cst_0) applies stablehlo.maximum across dimensions = [3] : (tensor<2x4x16x16xf32>, tensor<f32>) -> tensor<2x4x16xf32> loc("jit(marked)/kiln.e4/reduce_max")
    %6 = stablehlo.broadcast_in_dim %5, dims = [0, 1, 2] : (tensor<2x4x16xf32>) -> tensor<2x4x16x16xf32> loc("jit(marked)/kiln.e5/broadcast_in_dim")
    %7 = stablehlo.subtract %4, %6 : tensor<2x4x16x16xf32> loc("jit(marked)/kiln.e6/sub")
    %8 = stablehlo.exponential %7 : tensor<2x4x16x16xf32> loc("jit(marked)/kiln.e7/exp")
    %cst_1 = stablehlo.constant dense<0.000000e+00> : tensor<f32> loc("jit(marked)/kiln.e8/reduce_sum")
    %9 = stablehlo.reduce(%8 init: %cst_1) applies stablehlo.add across dimensions = [3] : (tensor<2x4x16x16xf32>, tensor<f32>) -> tensor<2x4x16xf32> loc("jit(marked)/kiln.e8/reduce_sum")
    %10 = stablehlo.broadcast_in_dim %9, dims = [0, 1, 2] : (tensor<2x4x16xf32>) -> tensor<2x4x16x16xf32> loc("jit(marked)/kiln.e9/broadcast_in_dim")
    %11 = stablehlo.divide %8, %10 : tensor<2x4x16x16xf32> loc("jit(marked)/kiln.e10/div")
    %12 = stablehlo.dot_general %11, %arg3, batching_dims = [0, 1] x [0, 2], contracting_dims = [3] x [1], precision = [DEFAULT, DEFAULT] : (tensor<2x4x16x16xf32>, tensor<2x16x4x16xf32>) -> tensor<2x4x16x16xf32> loc("jit(marked)/kiln.e11/dot_general")
    %13 = stablehlo.transpose %12, dims = [0, 2, 1, 3] : (tensor<2x4x16x16xf32>) -> tensor<2x16x4x16xf32> loc("jit(marked)/kiln.e12/transpose")
    return %13 : tensor<2x16x4x16xf32>
  }
}
