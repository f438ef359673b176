// A Slice whose bounds are known at compile time becomes tensor.extract_slice with the type its
// static sizes imply (a dynamic unsliced extent via tensor.dim), cast to the declared type.
// RUN: %hipep-opt %s -p hip-lower-slices | filecheck %s

// Opset 13: bounds are hip.constant operands (negative end counts from the end, step 2).
func.func @operands(%x: tensor<10x?x8xf32>) -> tensor<?x?x?xf32> {
  %starts = hip.constant dense<[1, 2]> : tensor<2xi64>
  %ends = hip.constant dense<[-1, 100]> : tensor<2xi64>
  %axes = hip.constant dense<[0, 2]> : tensor<2xi64>
  %steps = hip.constant dense<[2, 1]> : tensor<2xi64>
  %s = hip.slice "slice0"(%x, %starts, %ends, %axes, %steps) {since_version = 13 : i64, onnx = {}, positions = [0 : i64, 1 : i64, 2 : i64, 3 : i64, 4 : i64]} : (tensor<10x?x8xf32>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<?x?x?xf32>
  func.return %s : tensor<?x?x?xf32>
}

// CHECK-LABEL: func.func @operands
// CHECK-NOT: hip.slice
// CHECK: %[[C1:.*]] = arith.constant 1 : index
// CHECK: %[[D1:.*]] = tensor.dim %[[X:.*]], %[[C1]] : tensor<10x?x8xf32>
// CHECK: %[[S:.*]] = tensor.extract_slice %[[X]][1, 0, 2] [4, %[[D1]], 6] [2, 1, 1] : tensor<10x?x8xf32> to tensor<4x?x6xf32>
// CHECK: %[[R:.*]] = tensor.cast %[[S]] : tensor<4x?x6xf32> to tensor<?x?x?xf32>
// CHECK: func.return %[[R]] : tensor<?x?x?xf32>

// Opset 1: bounds are attributes; the declared type already is the implied one: no cast.
func.func @attributes(%x: tensor<4x6xf32>) -> tensor<2x6xf32> {
  %s = hip.slice "slice1"(%x) {since_version = 1 : i64, onnx = {starts = [1 : i64], ends = [3 : i64], axes = [0 : i64]}, positions = [0 : i64]} : (tensor<4x6xf32>) -> tensor<2x6xf32>
  func.return %s : tensor<2x6xf32>
}

// CHECK-LABEL: func.func @attributes
// CHECK: %[[S:.*]] = tensor.extract_slice %{{.*}}[1, 0] [2, 6] [1, 1] : tensor<4x6xf32> to tensor<2x6xf32>
// CHECK-NOT: tensor.cast
// CHECK: func.return %[[S]] : tensor<2x6xf32>
