// hip-insert-syncs: a launch whose size the host must read (Reshape's target shape) waits for
// the queued device op that computes it.
// RUN: %hipep-opt %s -p hip-insert-syncs | filecheck %s

func.func @f(%x: memref<12xf32, "device">, %t: memref<2xi64, "device">) -> memref<?x?xf32, "device"> {
  %target = hip.alloc {name = "target"} : memref<2xi64, "host_visible">
  hip.launch "::Neg" "target_on_device"(%t) outs(%target) {since_version = 13 : i64, onnx = {}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<2xi64, "device">) -> (memref<2xi64, "host_visible">)
  %y = hip.alloc {name = "y"} : memref<?x?xf32, "device">
  hip.launch "::Reshape" "reshape"(%x, %target) outs(%y) {since_version = 14 : i64, onnx = {}, in_positions = array<i64: 0, 1>, out_positions = array<i64: 0>} : (memref<12xf32, "device">, memref<2xi64, "host_visible">) -> (memref<?x?xf32, "device">)
  func.return %y : memref<?x?xf32, "device">
}

// CHECK: hip.launch "::Neg" "target_on_device"
// CHECK-NEXT: hip.alloc
// CHECK-NEXT: hip.sync "'reshape' reads 'target', written by queued device work"
// CHECK-NEXT: hip.launch "::Reshape" "reshape"
