// hip-insert-syncs: the host writes host-visible scratch whose slot another buffer shares while
// queued device work may still read that one -> a sync before the host write.
// RUN: %hipep-opt %s -p hip-insert-syncs | filecheck %s

func.func @f(%x: memref<2x3xf32, "device">) -> (memref<2x3xf32, "device">, memref<2x3xf32, "device">) {
  %one = hip.constant dense<1> : tensor<i64>
  %s1 = hip.alloc {name = "shape1", slot = 0 : i64} : memref<2xi64, "host_visible">
  hip.host "::Shape" "shape1"(%x) outs(%s1) {since_version = 15 : i64, onnx = {}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<2x3xf32, "device">) -> (memref<2xi64, "host_visible">)
  %a = hip.alloc {name = "a", slot = 0 : i64} : memref<2x3xf32, "device">
  hip.launch "::Expand" "uses_shape1"(%x, %s1) outs(%a) {since_version = 14 : i64, onnx = {}, in_positions = array<i64: 0, 1>, out_positions = array<i64: 0>} : (memref<2x3xf32, "device">, memref<2xi64, "host_visible">) -> (memref<2x3xf32, "device">)
  %e = hip.alloc {name = "e", slot = 1 : i64} : memref<2x3xf32, "device">
  hip.launch "::Neg" "reads_shape1_on_device"(%s1) outs(%e) {since_version = 13 : i64, onnx = {}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<2xi64, "host_visible">) -> (memref<2x3xf32, "device">)
  %s2 = hip.alloc {name = "shape2", slot = 0 : i64} : memref<2xi64, "host_visible">
  hip.host "::Shape" "shape2"(%a) outs(%s2) {since_version = 15 : i64, onnx = {}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<2x3xf32, "device">) -> (memref<2xi64, "host_visible">)
  func.return %a, %e : memref<2x3xf32, "device">, memref<2x3xf32, "device">
}

// CHECK: hip.launch "::Neg" "reads_shape1_on_device"
// CHECK-NEXT: hip.alloc {name = "shape2"
// CHECK-NEXT: hip.sync "'shape2' writes 'shape2' into host-visible scratch that queued device work on 'shape1' may still use"
// CHECK-NEXT: hip.host "::Shape" "shape2"
