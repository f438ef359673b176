// hip-reuse-buffers shares a slot between device buffers whose live ranges do not overlap, and
// never between buffers that are live at once or in different memory spaces.
// RUN: %hipep-opt %s -p hip-reuse-buffers | filecheck %s
// RUN: %hipep-opt %s -p 'hip-reuse-buffers{reuse=false}' | filecheck %s --check-prefix=OWN

func.func @chain(%x: memref<8xf32, "device">) -> memref<8xf32, "device"> {
  %a = hip.alloc {name = "a"} : memref<8xf32, "device">
  hip.launch "::Relu" "r0"(%x) outs(%a) {since_version = 14 : i64, onnx = {}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<8xf32, "device">) -> (memref<8xf32, "device">)
  %b = hip.alloc {name = "b"} : memref<8xf32, "device">
  hip.launch "::Neg" "r1"(%a) outs(%b) {since_version = 13 : i64, onnx = {}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<8xf32, "device">) -> (memref<8xf32, "device">)
  %h = hip.alloc {name = "h"} : memref<8xf32, "host_visible">
  hip.launch "::Neg" "r2"(%b) outs(%h) {since_version = 13 : i64, onnx = {}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<8xf32, "device">) -> (memref<8xf32, "host_visible">)
  %c = hip.alloc {name = "c"} : memref<8xf32, "device">
  hip.launch "::Abs" "r3"(%h) outs(%c) {since_version = 13 : i64, onnx = {}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<8xf32, "host_visible">) -> (memref<8xf32, "device">)
  func.return %c : memref<8xf32, "device">
}

// a dies at r1 and b at r2, so when c is made both their slots are free and c takes the first.
// b cannot take a's slot (a is read by the op that writes b). The host-visible h has its own pool.
// CHECK: %a = hip.alloc {name = "a", slot = 0 : i64} : memref<8xf32, "device">
// CHECK: %b = hip.alloc {name = "b", slot = 1 : i64} : memref<8xf32, "device">
// CHECK: %h = hip.alloc {name = "h", slot = 0 : i64} : memref<8xf32, "host_visible">
// CHECK: %c = hip.alloc {name = "c", slot = 0 : i64} : memref<8xf32, "device">
// OWN: %c = hip.alloc {name = "c", slot = 2 : i64} : memref<8xf32, "device">
