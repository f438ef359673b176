// hip-insert-syncs: in the next iteration the host writes a buffer that the previous
// iteration's queued device work may still read. The body's condition is a constant (no sync
// drains the queue at the yield), so only walking the body a second time finds the hazard.
// RUN: %hipep-opt %s -p hip-insert-syncs | filecheck %s

func.func @f(%x: memref<4xf32, "device">) -> memref<4xf32, "device"> {
  %trip = hip.constant dense<3> : tensor<i64>
  %go = hip.constant dense<true> : tensor<i1>
  %r = "hip.buffer_loop"(%trip, %go, %x) <{node = "loop", operandSegmentSizes = array<i32: 1, 1, 1>}> ({
  ^bb0(%i: memref<i64, "device">, %c: memref<i1, "device">, %acc: memref<4xf32, "device">):
    %sh = hip.alloc {name = "acc_shape"} : memref<1xi64, "host_visible">
    hip.host "::Shape" "acc_shape"(%acc) outs(%sh) {since_version = 15 : i64, onnx = {}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<4xf32, "device">) -> (memref<1xi64, "host_visible">)
    %f = hip.alloc {name = "as_float"} : memref<1xf32, "device">
    hip.launch "::Cast" "as_float"(%sh) outs(%f) {since_version = 13 : i64, onnx = {to = 1 : i64}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<1xi64, "host_visible">) -> (memref<1xf32, "device">)
    %n = hip.alloc {name = "next"} : memref<4xf32, "device">
    hip.launch "::Add" "next"(%acc, %f) outs(%n) {since_version = 14 : i64, onnx = {}, in_positions = array<i64: 0, 1>, out_positions = array<i64: 0>} : (memref<4xf32, "device">, memref<1xf32, "device">) -> (memref<4xf32, "device">)
    "hip.buffer_yield"(%go, %n) : (tensor<i1>, memref<4xf32, "device">) -> ()
  }) : (tensor<i64>, tensor<i1>, memref<4xf32, "device">) -> memref<4xf32, "device">
  func.return %r : memref<4xf32, "device">
}

// CHECK: "hip.buffer_loop"
// CHECK: hip.alloc {name = "acc_shape"}
// CHECK-NEXT: hip.sync "'acc_shape' writes 'acc_shape', which queued device work may still use"
// CHECK-NEXT: hip.host "::Shape" "acc_shape"
// CHECK-NOT: hip.sync
// CHECK: "hip.buffer_yield"
// CHECK: hip.sync "end of Compute: ORT reads the outputs"
