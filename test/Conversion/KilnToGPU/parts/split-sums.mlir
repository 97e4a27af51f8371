// Parts/SplitSums.cpp: KernelBuilderBase::sumSplits, one row's reduction
// of split-KV partials (M = the splits' largest max, w_s = l_s · 2^(m_s -
// M), Σ w_s · O_s), as the combine kernel (Schedules/Combine/CombineKernel.cpp)
// and, on sm_90a, the split kernel's own cluster reduction
// (emitClusterCombine, AttentionKernel.cpp) run it.
// RUN: kiln-opt %s -convert-kiln-to-gpu | FileCheck %s
// RUN: kiln-opt %s -convert-kiln-to-gpu="hopper=1" | FileCheck %s --check-prefix=CLUSTER

// The combine kernel, one block (8 warps) a row, up to 128 splits. Lane l
// holds splits l, l + 32, l + 64, l + 96: each split's max and sum are one
// 8-byte load at statistics + 2 · (split · rows + row), the split index
// clamped to the last, -inf and 0 for a split that does not exist. M is
// reduced over the warp (xor 16 to 1); an empty row (M = -inf) takes 0 so
// that exp2 gives 0; w = sum · 2^(max - M), their total reduced over the
// warp. Warp w sums splits w, w + 8, ...: a uniform branch on the split
// count (<= 8: one slot a warp, <= 32: four, ...) picks how many, and
// each split's weight comes from the lane that holds it (shuffle idx). On
// sm_80 nothing waits for the grid.
// CHECK-LABEL: gpu.func @kiln_split_combine_bf16_dv64(
// CHECK-SAME: %[[WORKSPACE:arg0]]: !llvm.ptr<1>
// CHECK-SAME: workgroup(%[[PARTIALS:arg9]] : memref<8x64xf32, #gpu.address_space<workgroup>>)
// CHECK: %[[SPLITS:[0-9]+]] = arith.index_cast %arg2 : i32 to index
// CHECK-NOT: nvvm.griddepcontrol
// CHECK: %[[LANE:[0-9]+]] = arith.remui %thread_id_x, %{{.*}} : index
// CHECK: %[[LASTSPLIT:[0-9]+]] = arith.subi %[[SPLITS]], %{{.*}} : index
// CHECK-NEXT: arith.constant 0 : index
// CHECK-NEXT: %[[SPLIT:[0-9]+]] = arith.addi %[[LANE]], %{{.*}} : index
// CHECK-NEXT: %[[EXISTS:[0-9]+]] = arith.cmpi ult, %[[SPLIT]], %[[SPLITS]] : index
// CHECK-NEXT: %[[CLAMPED:[0-9]+]] = arith.minui %[[SPLIT]], %[[LASTSPLIT]] : index
// CHECK-NEXT: %[[TWO:.*]] = arith.constant 2 : index
// CHECK-NEXT: %[[SPLITROWS:[0-9]+]] = arith.muli %[[CLAMPED]], %{{[0-9]+}} : index
// CHECK-NEXT: %[[SPLITROW:[0-9]+]] = arith.addi %[[SPLITROWS]], %block_id_x : index
// CHECK-NEXT: %[[PAIRINDEX:[0-9]+]] = arith.muli %[[SPLITROW]], %[[TWO]] : index
// CHECK: %[[PAIRADDRESS:[0-9]+]] = llvm.getelementptr %[[WORKSPACE]][%{{[0-9]+}}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, f32
// CHECK-NEXT: %[[PAIR:[0-9]+]] = llvm.load %[[PAIRADDRESS]] {alignment = 8 : i64} : !llvm.ptr<1> -> vector<2xf32>
// CHECK-NEXT: arith.constant 0 : i32
// CHECK-NEXT: %[[M:[0-9]+]] = llvm.extractelement %[[PAIR]]
// CHECK-NEXT: arith.constant 1 : i32
// CHECK-NEXT: %[[L:[0-9]+]] = llvm.extractelement %[[PAIR]]
// CHECK-NEXT: %[[MAX0:[0-9]+]] = arith.select %[[EXISTS]], %[[M]], %[[NEGINF:cst[_0-9]*]] : f32
// CHECK-NEXT: %[[SUM0:[0-9]+]] = arith.select %[[EXISTS]], %[[L]], %[[ZERO:cst[_0-9]*]] : f32
// CHECK-COUNT-3: llvm.load %{{[0-9]+}} {alignment = 8 : i64} : !llvm.ptr<1> -> vector<2xf32>
// CHECK-NOT: llvm.load
// CHECK: gpu.shuffle  xor %{{[0-9]+}}, %c16_i32,
// CHECK-NEXT: arith.maximumf
// CHECK: gpu.shuffle  xor %{{[0-9]+}}, %c1_i32{{(_[0-9]+)?}},
// CHECK-NEXT: %[[MAX:[0-9]+]] = arith.maximumf
// CHECK-NEXT: %[[EMPTY:[0-9]+]] = arith.cmpf oeq, %[[MAX]], %[[NEGINF]] : f32
// CHECK-NEXT: %[[SAFE:[0-9]+]] = arith.select %[[EMPTY]], %[[ZERO]], %[[MAX]] : f32
// CHECK-NEXT: %[[DROP:[0-9]+]] = arith.subf %[[MAX0]], %[[SAFE]] : f32
// CHECK-NEXT: %[[SCALE:[0-9]+]] = llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"(%[[DROP]]) : (f32) -> f32
// CHECK-NEXT: %[[W0:[0-9]+]] = arith.mulf %[[SUM0]], %[[SCALE]] : f32
// CHECK: gpu.shuffle  xor %{{[0-9]+}}, %c16_i32{{(_[0-9]+)?}},
// CHECK-NEXT: arith.addf
// CHECK: gpu.shuffle  xor %{{[0-9]+}}, %c1_i32{{(_[0-9]+)?}},
// CHECK-NEXT: %[[TOTAL:[0-9]+]] = arith.addf
// CHECK: %[[ONESLOT:.*]] = arith.constant 8 : index
// CHECK-NEXT: %[[FITS:[0-9]+]] = arith.cmpi ule, %[[SPLITS]], %[[ONESLOT]] : index
// CHECK-NEXT: %{{[0-9]+}}:2 = scf.if %[[FITS]] -> (f32, f32) {
// CHECK: gpu.shuffle  idx %[[W0]], %{{[0-9]+}}, %{{.*}} : f32
// CHECK: } else {
// CHECK-NEXT: %[[FOURSLOTS:.*]] = arith.constant 32 : index
// CHECK-NEXT: arith.cmpi ule, %[[SPLITS]], %[[FOURSLOTS]] : index
// CHECK: arith.cmpf ogt, %[[TOTAL]], %{{.*}} : f32
// CHECK: memref.store %{{[0-9]+}}#0, %[[PARTIALS]]
// CHECK: gpu.barrier
// CHECK-COUNT-8: memref.load %[[PARTIALS]]
// CHECK: arith.truncf %{{[0-9]+}} : f32 to bf16

// sm_90a: a launch with clusters of the splits reduces them in the split
// kernel: every thread of the cluster arrives (release) and waits
// (acquire) for the others' partials, then each warp takes rows of the
// block and runs the same reduction over at most the cluster's splits (a
// uniform branch: one slot, four, ...). The combine kernel, launched early,
// waits for the grid before reading the workspace.
// CLUSTER-LABEL: gpu.func @kiln_attention_mma_bf16_d64(
// CLUSTER: %[[SPLITS:[0-9]+]] = arith.index_cast %arg22 : i32 to index
// CLUSTER: %[[CLUSTERED:[0-9]+]] = arith.cmpi ugt, %{{[0-9]+}}, %c1_i32 : i32
// CLUSTER: scf.if %[[CLUSTERED]] {
// CLUSTER-NEXT: nvvm.cluster.arrive
// CLUSTER-NEXT: nvvm.cluster.wait
// CLUSTER: scf.for
// CLUSTER: llvm.load %{{[0-9]+}} {alignment = 8 : i64} : !llvm.ptr<1> -> vector<2xf32>
// CLUSTER: gpu.shuffle  xor %{{[0-9]+}}, %c16_i32
// CLUSTER-NOT: arith.cmpi ule, %[[SPLITS]]
// CLUSTER: arith.cmpi ule, %[[SPLITS]], %c1{{(_[0-9]+)?}} : index
// CLUSTER-NEXT: scf.if
// CLUSTER-NOT: arith.cmpi ule, %[[SPLITS]]
// CLUSTER: arith.cmpi ule, %[[SPLITS]], %c4{{(_[0-9]+)?}} : index
// CLUSTER: gpu.shuffle  idx
// CLUSTER: nvvm.griddepcontrol  launch_dependents
// CLUSTER-NEXT: gpu.return
// CLUSTER-LABEL: gpu.func @kiln_split_combine_bf16_dv64(
// CLUSTER: nvvm.griddepcontrol  wait
// CLUSTER-NEXT: gpu.thread_id  x
// CLUSTER-NOT: llvm.load
// CLUSTER: arith.cmpi ult, %block_id_x
// CLUSTER: llvm.load
func.func @split(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}
