// A Slice whose bounds are run-time operands stays hip.slice (computed at run time); its type is
// refined with what the rule knows (axes are a constant: only axis 1 is sliced).
// RUN: %hipep-opt %s -p hip-infer-shapes,hip-lower-slices | filecheck %s

func.func @runtime_bounds(%x: tensor<4x?x8xf32>, %starts: tensor<1xi64>, %ends: tensor<1xi64>) -> tensor<?x?x?xf32> {
  %axes = hip.constant dense<1> : tensor<1xi64>
  %s = hip.slice "slice0"(%x, %starts, %ends, %axes) {since_version = 13 : i64, onnx = {}, positions = [0 : i64, 1 : i64, 2 : i64, 3 : i64]} : (tensor<4x?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x?x?xf32>
  func.return %s : tensor<?x?x?xf32>
}

// CHECK-LABEL: func.func @runtime_bounds
// CHECK-NOT: tensor.extract_slice
// CHECK: hip.slice "slice0"{{.*}} -> tensor<4x?x8xf32>
// CHECK-NOT: tensor.extract_slice
