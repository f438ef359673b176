// hip-insert-syncs: an If's condition computed on the device is read by the host -> a sync
// before the hip.buffer_if; the branches' own device work needs none.
// RUN: %hipep-opt %s -p hip-insert-syncs | filecheck %s

func.func @f(%x: memref<3xf32, "device">) -> memref<3xf32, "device"> {
  %zero = hip.constant dense<0.0> : tensor<f32>
  %s = hip.alloc {name = "s"} : memref<f32, "device">
  hip.launch "::ReduceSum" "total"(%x) outs(%s) {since_version = 13 : i64, onnx = {keepdims = 0 : i64}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<3xf32, "device">) -> (memref<f32, "device">)
  %c = hip.alloc {name = "cond"} : memref<i1, "host_visible">
  hip.launch "::Greater" "positive"(%s, %zero) outs(%c) {since_version = 14 : i64, onnx = {}, in_positions = array<i64: 0, 1>, out_positions = array<i64: 0>} : (memref<f32, "device">, tensor<f32>) -> (memref<i1, "host_visible">)
  %r = "hip.buffer_if"(%c) <{node = "branch"}> ({
    %a = hip.alloc {name = "a"} : memref<3xf32, "device">
    hip.launch "::Neg" "neg"(%x) outs(%a) {since_version = 14 : i64, onnx = {}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<3xf32, "device">) -> (memref<3xf32, "device">)
    "hip.buffer_yield"(%a) : (memref<3xf32, "device">) -> ()
  }, {
    %b = hip.alloc {name = "b"} : memref<3xf32, "device">
    hip.launch "::Abs" "abs"(%x) outs(%b) {since_version = 14 : i64, onnx = {}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<3xf32, "device">) -> (memref<3xf32, "device">)
    "hip.buffer_yield"(%b) : (memref<3xf32, "device">) -> ()
  }) : (memref<i1, "host_visible">) -> memref<3xf32, "device">
  func.return %r : memref<3xf32, "device">
}

// CHECK: hip.launch "::Greater" "positive"
// CHECK-NEXT: hip.sync "if 'branch' reads 'cond', written by queued device work"
// CHECK-NEXT: "hip.buffer_if"
// CHECK-NOT: hip.sync
// CHECK: "hip.buffer_yield"(%b)
// CHECK: hip.sync "end of Compute: ORT reads the outputs"
// CHECK-NEXT: func.return
