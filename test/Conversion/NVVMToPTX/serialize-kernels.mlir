// RUN: kiln-opt %s --split-input-file --kiln-serialize-kernels | FileCheck %s
// RUN: kiln-opt %s --split-input-file --kiln-serialize-kernels --mlir-disable-threading | FileCheck %s
// The PTX is the text the back end gives for each whole module.
// RUN: kiln-opt %s --split-input-file --kiln-serialize-kernels | grep -o 'assembly = ".*"' > %t.joined
// RUN: kiln-opt %s --split-input-file --gpu-module-to-binary=format=isa | grep -o 'assembly = ".*"' > %t.whole
// RUN: diff %t.joined %t.whole

// Two kernels sharing the dynamic shared memory, each kernel compiled
// apart and the texts joined: one header, the shared declaration once, the
// entries in the module's order, the second kernel's block labels numbered
// as in a whole module.
// CHECK-LABEL: gpu.binary @two_kernels
// CHECK-SAME: #nvvm.target<chip = "sm_80"
// CHECK-SAME: .version 8.0\0A.target sm_80\0A.address_size 64\0A\0A\09// .globl\09first\0A.extern .shared .align 16 .b8 dynamic_shared[];\0A// first_buffer has been demoted\0A\0A.visible .entry first(
// CHECK-SAME: }\0A\09// .globl\09second\0A.visible .entry second(
// CHECK-SAME: $L__BB1_2:
// CHECK-NOT: gpu.module
gpu.module @two_kernels [#nvvm.target<chip = "sm_80", features = "+ptx80">] {
  llvm.mlir.global external @dynamic_shared() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<0 x i8>
  llvm.mlir.global internal @first_buffer() {addr_space = 3 : i32, alignment = 4 : i64} : !llvm.array<32 x f32>
  llvm.func @first(%out: !llvm.ptr<1>, %n: i32) attributes {gpu.kernel, nvvm.kernel} {
    %buffer = llvm.mlir.addressof @first_buffer : !llvm.ptr<3>
    %dynamic = llvm.mlir.addressof @dynamic_shared : !llvm.ptr<3>
    %tid = nvvm.read.ptx.sreg.tid.x : i32
    %slot = llvm.getelementptr %buffer[0, %tid] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, !llvm.array<32 x f32>
    %value = llvm.sitofp %tid : i32 to f32
    llvm.store %value, %slot : f32, !llvm.ptr<3>
    llvm.store %value, %dynamic : f32, !llvm.ptr<3>
    nvvm.barrier0
    %read = llvm.load %slot : !llvm.ptr<3> -> f32
    %at = llvm.getelementptr %out[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f32
    llvm.store %read, %at : f32, !llvm.ptr<1>
    llvm.return
  }
  llvm.func @second(%out: !llvm.ptr<1>, %n: i32) attributes {gpu.kernel, nvvm.kernel} {
    %dynamic = llvm.mlir.addressof @dynamic_shared : !llvm.ptr<3>
    %tid = nvvm.read.ptx.sreg.tid.x : i32
    %value = llvm.sitofp %tid : i32 to f32
    %slot = llvm.getelementptr %dynamic[%tid] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, f32
    llvm.store %value, %slot : f32, !llvm.ptr<3>
    nvvm.barrier0
    %inside = llvm.icmp "slt" %tid, %n : i32
    llvm.cond_br %inside, ^store, ^done
  ^store:
    %read = llvm.load %dynamic : !llvm.ptr<3> -> f32
    %at = llvm.getelementptr %out[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f32
    llvm.store %read, %at : f32, !llvm.ptr<1>
    llvm.br ^done
  ^done:
    llvm.return
  }
}

// -----

// A device function the back end keeps (not inlined) is no one-line
// declaration: the kernels are compiled from the whole module instead.
// CHECK-LABEL: gpu.binary @device_function
// CHECK-SAME: .visible .func  (.param .b32 func_retval0) scaled(
// CHECK-SAME: .visible .entry first(
// CHECK-SAME: .visible .entry second(
gpu.module @device_function [#nvvm.target<chip = "sm_80", features = "+ptx80">] {
  llvm.func @scaled(%x: f32) -> f32 attributes {no_inline} {
    %two = llvm.mlir.constant(2.0 : f32) : f32
    %y = llvm.fmul %x, %two : f32
    llvm.return %y : f32
  }
  llvm.func @first(%out: !llvm.ptr<1>) attributes {gpu.kernel, nvvm.kernel} {
    %one = llvm.mlir.constant(1.0 : f32) : f32
    %y = llvm.call @scaled(%one) : (f32) -> f32
    llvm.store %y, %out : f32, !llvm.ptr<1>
    llvm.return
  }
  llvm.func @second(%out: !llvm.ptr<1>) attributes {gpu.kernel, nvvm.kernel} {
    %three = llvm.mlir.constant(3.0 : f32) : f32
    %y = llvm.call @scaled(%three) : (f32) -> f32
    llvm.store %y, %out : f32, !llvm.ptr<1>
    llvm.return
  }
}

// -----

// A module with one kernel is compiled as it is.
// CHECK-LABEL: gpu.binary @one_kernel
// CHECK-SAME: .visible .entry only(
gpu.module @one_kernel [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
  llvm.func @only(%out: !llvm.ptr<1>) attributes {gpu.kernel, nvvm.kernel} {
    %one = llvm.mlir.constant(1.0 : f32) : f32
    llvm.store %one, %out : f32, !llvm.ptr<1>
    llvm.return
  }
}
