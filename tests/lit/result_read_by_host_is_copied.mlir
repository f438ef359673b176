// hip-assign-memory-spaces: a result is ORT's memory (device memory on a GPU). Shape arithmetic
// that is a result and is read again by host work (Attention's expanded bias shape, then its
// sequence length) keeps a host-visible buffer of the plan's own; the result is a device copy.
// RUN: %hipep-opt %s -p hip-assign-memory-spaces | filecheck %s
// A result only the host writes is left where it is (the device takes the host's bytes):
// RUN: %hipep-opt %s -p hip-assign-memory-spaces | filecheck %s --check-prefix=WRITTEN

func.func @f(%x: memref<2x3x4xf32, "device">) -> (memref<2xi64, "device">, memref<2xi64, "device">, memref<i64, "device">) {
  %one = hip.constant dense<1> : tensor<i64>
  %shape = hip.alloc {name = "bias_shape"} : memref<2xi64, "device">
  hip.host "::Shape" "bias_shape"(%x) outs(%shape) {since_version = 15 : i64, onnx = {start = 1 : i64, end = 3 : i64}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<2x3x4xf32, "device">) -> (memref<2xi64, "device">)
  %n = hip.alloc {name = "n"} : memref<i64, "device">
  hip.host "::Gather" "n"(%shape, %one) outs(%n) {since_version = 13 : i64, onnx = {axis = 0 : i64}, in_positions = array<i64: 0, 1>, out_positions = array<i64: 0>} : (memref<2xi64, "device">, tensor<i64>) -> (memref<i64, "device">)
  %tail = hip.alloc {name = "tail"} : memref<2xi64, "device">
  hip.host "::Shape" "tail"(%x) outs(%tail) {since_version = 15 : i64, onnx = {start = 1 : i64}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<2x3x4xf32, "device">) -> (memref<2xi64, "device">)
  func.return %shape, %tail, %n : memref<2xi64, "device">, memref<2xi64, "device">, memref<i64, "device">
}

// CHECK: %shape = hip.alloc {name = "bias_shape"} : memref<2xi64, "host_visible">
// CHECK: hip.host "::Gather" "n"(%shape, %one)
// CHECK: %[[COPY:.*]] = hip.alloc {name = "bias_shape"} : memref<2xi64, "device">
// CHECK-NEXT: hip.launch "::Identity" "result copy of bias_shape"(%shape) outs(%[[COPY]])
// CHECK-NEXT: func.return %[[COPY]], %tail, %n :

// WRITTEN: %tail = hip.alloc {name = "tail"} : memref<2xi64, "host_visible">
// WRITTEN-NOT: result copy of tail
// WRITTEN: func.return {{.*}}, %tail,
