// hip-insert-syncs: the host reads what queued device work writes -> a sync right before it.
// A host step that reads only host values needs none ("and nowhere else").
// RUN: %hipep-opt %s -p hip-insert-syncs | filecheck %s

func.func @f(%x: memref<4xi64, "device">) -> memref<i64, "host_visible"> {
  %zero = hip.constant dense<0> : tensor<i64>
  %d = hip.alloc {name = "d"} : memref<4xi64, "host_visible">
  hip.launch "::Add" "on_device"(%x, %x) outs(%d) {since_version = 14 : i64, onnx = {}, in_positions = array<i64: 0, 1>, out_positions = array<i64: 0>} : (memref<4xi64, "device">, memref<4xi64, "device">) -> (memref<4xi64, "host_visible">)
  %s = hip.alloc {name = "s"} : memref<1xi64, "host_visible">
  hip.host "::Shape" "only_extents"(%d) outs(%s) {since_version = 15 : i64, onnx = {}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<4xi64, "host_visible">) -> (memref<1xi64, "host_visible">)
  %g = hip.alloc {name = "g"} : memref<i64, "host_visible">
  hip.host "::Gather" "reads_d"(%d, %zero) outs(%g) {since_version = 13 : i64, onnx = {axis = 0 : i64}, in_positions = array<i64: 0, 1>, out_positions = array<i64: 0>} : (memref<4xi64, "host_visible">, tensor<i64>) -> (memref<i64, "host_visible">)
  func.return %g : memref<i64, "host_visible">
}

// CHECK: hip.launch "::Add" "on_device"
// CHECK-NOT: hip.sync
// CHECK: hip.host "::Shape" "only_extents"
// CHECK-NEXT: hip.alloc
// CHECK-NEXT: hip.sync "'reads_d' reads 'd', written by queued device work"
// CHECK-NEXT: hip.host "::Gather" "reads_d"
// CHECK-NEXT: hip.sync "end of Compute: ORT reads the outputs"
// CHECK-NEXT: func.return
