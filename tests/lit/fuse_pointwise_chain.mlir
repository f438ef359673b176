// hip-fuse-pointwise: a chain of pointwise launches (SiLU times a broadcast operand, plus a scalar
// constant) becomes one hipep::FusedElementwise launch writing the last result; the intermediates'
// buffers disappear. A value also read outside the group (silu, read by neg) ends a group; host
// steps never join one. The one-element constant becomes an expression constant.
// RUN: %hipep-opt %s -p hip-fuse-pointwise | filecheck %s
// With constant folding off the constant stays an operand of the fused launch:
// RUN: %hipep-opt %s -p 'hip-fuse-pointwise{fold_constants=false}' | not filecheck %s
// RUN: %hipep-opt %s -p 'hip-fuse-pointwise{fold_constants=false}' | filecheck %s --check-prefix=KEEP

func.func @silu_gate(%x: memref<4x?xf32, "device">, %up: memref<8xf32, "device">, %n: memref<4xi64, "device">) -> (memref<4x?xf32, "device">, memref<4x8xf32, "device">, memref<4xi64, "device">) {
  %one = hip.constant dense<1.000000e+00> : tensor<f32>
  %s = hip.alloc {name = "s"} : memref<4x?xf32, "device">
  hip.launch "::Sigmoid" "sig"(%x) outs(%s) {since_version = 13 : i64, onnx = {}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<4x?xf32, "device">) -> (memref<4x?xf32, "device">)
  %silu = hip.alloc {name = "silu"} : memref<4x?xf32, "device">
  hip.launch "::Mul" "silu"(%x, %s) outs(%silu) {since_version = 14 : i64, onnx = {}, in_positions = array<i64: 0, 1>, out_positions = array<i64: 0>} : (memref<4x?xf32, "device">, memref<4x?xf32, "device">) -> (memref<4x?xf32, "device">)
  %z = hip.alloc {name = "z"} : memref<4x?xf32, "device">
  hip.launch "::Neg" "neg"(%silu) outs(%z) {since_version = 13 : i64, onnx = {}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<4x?xf32, "device">) -> (memref<4x?xf32, "device">)
  %a = hip.alloc {name = "a"} : memref<4x?xf32, "device">
  hip.launch "::Add" "plus_one"(%silu, %one) outs(%a) {since_version = 14 : i64, onnx = {}, in_positions = array<i64: 0, 1>, out_positions = array<i64: 0>} : (memref<4x?xf32, "device">, tensor<f32>) -> (memref<4x?xf32, "device">)
  %y = hip.alloc {name = "y"} : memref<4x8xf32, "device">
  hip.launch "::Mul" "gate"(%a, %up) outs(%y) {since_version = 14 : i64, onnx = {}, in_positions = array<i64: 0, 1>, out_positions = array<i64: 0>} : (memref<4x?xf32, "device">, memref<8xf32, "device">) -> (memref<4x8xf32, "device">)
  %two = hip.constant dense<2> : tensor<i64>
  %k = hip.alloc {name = "k"} : memref<i64, "device">
  hip.host "::Add" "k"(%two, %two) outs(%k) {since_version = 14 : i64, onnx = {}, in_positions = array<i64: 0, 1>, out_positions = array<i64: 0>} : (tensor<i64>, tensor<i64>) -> (memref<i64, "device">)
  %nk = hip.alloc {name = "nk"} : memref<4xi64, "device">
  hip.launch "::Mul" "times_k"(%n, %k) outs(%nk) {since_version = 14 : i64, onnx = {}, in_positions = array<i64: 0, 1>, out_positions = array<i64: 0>} : (memref<4xi64, "device">, memref<i64, "device">) -> (memref<4xi64, "device">)
  %m = hip.alloc {name = "m"} : memref<4xi64, "device">
  hip.launch "::Neg" "negate"(%nk) outs(%m) {since_version = 13 : i64, onnx = {}, in_positions = array<i64: 0>, out_positions = array<i64: 0>} : (memref<4xi64, "device">) -> (memref<4xi64, "device">)
  func.return %z, %y, %m : memref<4x?xf32, "device">, memref<4x8xf32, "device">, memref<4xi64, "device">
}

// Sigmoid and the first Mul fuse into the launch that writes silu (read by two launches, so kept):
// CHECK-NOT: hip.alloc {name = "s"}
// CHECK: %silu = hip.alloc {name = "silu"}
// CHECK-NEXT: hip.launch "hipep::FusedElementwise" "fused[sig, silu]"(%x) outs(%silu)
// CHECK-SAME: ["mlas_logistic", "float32", 0 : i64], ["mul", "float32", 0 : i64, 1 : i64]
// CHECK-SAME: covers = ["sig", "silu"]
// CHECK: hip.launch "::Neg" "neg"(%silu) outs(%z)
// The constant 1.0 is a node of the expression, not an operand; a's buffer is gone:
// CHECK-NOT: hip.alloc {name = "a"}
// CHECK: hip.launch "hipep::FusedElementwise" "fused[plus_one, gate]"(%silu, %up) outs(%y)
// CHECK-SAME: ["const", "float32", "1.0"]
// CHECK-SAME: broadcast = [0 : i64, 1 : i64]
// CHECK-SAME: covers = ["plus_one", "gate"]
// The host step stays; the two integer launches after it fuse, reading its result:
// CHECK: hip.host "::Add" "k"(%two, %two) outs(%k)
// CHECK-NOT: hip.alloc {name = "nk"}
// CHECK: hip.launch "hipep::FusedElementwise" "fused[times_k, negate]"(%n, %k) outs(%m)
// CHECK-SAME: input_dtypes = ["int64", "int64"], output_dtypes = ["int64"]

// KEEP: hip.launch "hipep::FusedElementwise" "fused[plus_one, gate]"(%silu, %one, %up) outs(%y)
