// Host-buffer safety, the GQA preamble: total_sequence_length is stored by the host while the
// device ops before it (ReduceSum, Sub) may still be queued. It keeps its own allocation in the
// host_visible space, and no device buffer shares a slot with it.
// RUN: %hipep-opt %s -p hip-assign-memory-spaces,hip-reuse-buffers | filecheck %s
// With the memory-space rule off the host store lands in a device slot that queued work still uses:
// RUN: %hipep-opt %s -p 'hip-assign-memory-spaces{host_rule=false},hip-reuse-buffers' | not filecheck %s

func.func @gqa_preamble(%mask: memref<?x?xi64, "device">) -> (memref<?xi32, "device">, memref<?xi32, "device">) {
  %axis1 = hip.constant dense<1> : tensor<1xi64>
  %one = hip.constant dense<1> : tensor<i64>
  %sum = hip.alloc {name = "mask_sum"} : memref<?xi64, "device">
  hip.launch "::ReduceSum" "mask_sum"(%mask, %axis1) outs(%sum) {since_version = 13 : i64, onnx = {keepdims = 0 : i64}, in_positions = array<i64: 0, 1>, out_positions = array<i64: 0>} : (memref<?x?xi64, "device">, tensor<1xi64>) -> (memref<?xi64, "device">)
  %k64 = hip.alloc {name = "seqlens_k64"} : memref<?xi64, "device">
  hip.launch "::Sub" "minus_one"(%sum, %one) outs(%k64) {since_version = 14 : i64, onnx = {}, in_positions = array<i64: 0, 1>, out_positions = array<i64: 0>} : (memref<?xi64, "device">, tensor<i64>) -> (memref<?xi64, "device">)
  %k = hip.alloc {name = "seqlens_k"} : memref<?xi32, "device">
  hip.launch "::Cast" "seqlens_k"(%k64) outs(%k) {since_version = 13 : i64, onnx = {to = 6 : i64}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<?xi64, "device">) -> (memref<?xi32, "device">)
  %shape = hip.alloc {name = "mask_shape"} : memref<2xi64, "device">
  hip.host "::Shape" "mask_shape"(%mask) outs(%shape) {since_version = 15 : i64, onnx = {}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<?x?xi64, "device">) -> (memref<2xi64, "device">)
  %total = hip.alloc {name = "total_sequence_length"} : memref<i64, "device">
  hip.host "::Gather" "total_len"(%shape, %one) outs(%total) {since_version = 13 : i64, onnx = {axis = 0 : i64}, in_positions = array<i64: 0, 1>, out_positions = array<i64: 0>} : (memref<2xi64, "device">, tensor<i64>) -> (memref<i64, "device">)
  %total32 = hip.alloc {name = "total32"} : memref<i32, "device">
  hip.launch "::Cast" "total32"(%total) outs(%total32) {since_version = 13 : i64, onnx = {to = 6 : i64}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<i64, "device">) -> (memref<i32, "device">)
  %out = hip.alloc {name = "out"} : memref<?xi32, "device">
  hip.launch "::Sub" "padding"(%total32, %k) outs(%out) {since_version = 14 : i64, onnx = {}, in_positions = array<i64: 0, 1>, out_positions = array<i64: 0>} : (memref<i32, "device">, memref<?xi32, "device">) -> (memref<?xi32, "device">)
  func.return %k, %out : memref<?xi32, "device">, memref<?xi32, "device">
}

// The device buffers share slots among themselves (mask_sum's slot is reused):
// CHECK: %sum = hip.alloc {name = "mask_sum", slot = [[DEV0:[0-9]+]] : i64} : memref<?xi64, "device">
// CHECK: %k = hip.alloc {name = "seqlens_k", slot = [[DEV0]] : i64} : memref<?xi32, "device">
// The host-touched buffers live in the host_visible space, in slots of their own pool:
// CHECK: %shape = hip.alloc {name = "mask_shape", slot = {{[0-9]+}} : i64} : memref<2xi64, "host_visible">
// CHECK: %total = hip.alloc {name = "total_sequence_length", slot = {{[0-9]+}} : i64} : memref<i64, "host_visible">
// CHECK: hip.host "::Gather" "total_len"{{.*}} -> (memref<i64, "host_visible">)
// CHECK: hip.launch "::Cast" "total32"(%total) {{.*}} : (memref<i64, "host_visible">)
