// hip-insert-syncs in a loop: the host reads each iteration's condition, computed on the device
// (a sync before the yield). The loop's trip count, read by the host, was written by a queued
// copy: a sync before the loop.
// RUN: %hipep-opt %s -p hip-insert-syncs | filecheck %s

func.func @f(%m: memref<i64, "device">, %x: memref<4xf32, "device">) -> memref<4xf32, "device"> {
  %limit = hip.constant dense<1.0e+02> : tensor<f32>
  %trip = hip.alloc {name = "trip"} : memref<i64, "host_visible">
  hip.launch "::Identity" "host copy"(%m) outs(%trip) {since_version = 14 : i64, onnx = {}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<i64, "device">) -> (memref<i64, "host_visible">)
  %go = hip.constant dense<true> : tensor<i1>
  %r = "hip.buffer_loop"(%trip, %go, %x) <{node = "loop", operandSegmentSizes = array<i32: 1, 1, 1>}> ({
  ^bb0(%i: memref<i64, "device">, %c: memref<i1, "device">, %acc: memref<4xf32, "device">):
    %sh = hip.alloc {name = "acc_shape"} : memref<1xi64, "host_visible">
    hip.host "::Shape" "acc_shape"(%acc) outs(%sh) {since_version = 15 : i64, onnx = {}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<4xf32, "device">) -> (memref<1xi64, "host_visible">)
    %e = hip.alloc {name = "grown"} : memref<4xf32, "device">
    hip.launch "::Expand" "grown"(%acc, %sh) outs(%e) {since_version = 14 : i64, onnx = {}, in_positions = array<i64: 0, 1>, out_positions = array<i64: 0>} : (memref<4xf32, "device">, memref<1xi64, "host_visible">) -> (memref<4xf32, "device">)
    %t = hip.alloc {name = "total"} : memref<f32, "device">
    hip.launch "::ReduceSum" "total"(%e) outs(%t) {since_version = 13 : i64, onnx = {keepdims = 0 : i64}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<4xf32, "device">) -> (memref<f32, "device">)
    %go2 = hip.alloc {name = "under_limit"} : memref<i1, "host_visible">
    hip.launch "::Less" "under_limit"(%t, %limit) outs(%go2) {since_version = 13 : i64, onnx = {}, in_positions = array<i64: 0, 1>, out_positions = array<i64: 0>} : (memref<f32, "device">, tensor<f32>) -> (memref<i1, "host_visible">)
    "hip.buffer_yield"(%go2, %e) : (memref<i1, "host_visible">, memref<4xf32, "device">) -> ()
  }) : (memref<i64, "host_visible">, tensor<i1>, memref<4xf32, "device">) -> memref<4xf32, "device">
  func.return %r : memref<4xf32, "device">
}

// CHECK: hip.launch "::Identity" "host copy"
// CHECK-NEXT: hip.constant
// CHECK-NEXT: hip.sync "loop 'loop' reads 'trip', written by queued device work"
// CHECK-NEXT: "hip.buffer_loop"
// The condition sync drains the queue every iteration, so the host's Shape needs none:
// CHECK: hip.alloc {name = "acc_shape"}
// CHECK-NEXT: hip.host "::Shape" "acc_shape"
// CHECK: hip.launch "::Less" "under_limit"
// CHECK-NEXT: hip.sync "the loop condition check reads 'under_limit', written by queued device work"
// CHECK-NEXT: "hip.buffer_yield"
// CHECK: hip.sync "end of Compute: ORT reads the outputs"
