// Shape merge: a rule that knows less than the stored type never widens it. An opset-13 Slice
// with run-time bounds of unknown length: its rule says ?x?x?x?, the stored 1x?x12x32 stays.
// RUN: %hipep-opt %s -p hip-infer-shapes | filecheck %s
// The same with the merge rule switched off (field bug: the rule's type replaces the stored one):
// RUN: %hipep-opt %s -p 'hip-infer-shapes{refine=false}' | not filecheck %s

func.func @keep(%x: tensor<1x?x12x32xf32>, %starts: tensor<?xi64>, %ends: tensor<?xi64>) -> tensor<1x?x12x32xf32> {
  %s = hip.slice "slice0"(%x, %starts, %ends) {since_version = 13 : i64, onnx = {}, positions = [0 : i64, 1 : i64, 2 : i64]} : (tensor<1x?x12x32xf32>, tensor<?xi64>, tensor<?xi64>) -> tensor<1x?x12x32xf32>
  func.return %s : tensor<1x?x12x32xf32>
}

// CHECK-LABEL: func.func @keep
// CHECK: hip.slice "slice0"{{.*}} -> tensor<1x?x12x32xf32>
// CHECK-NOT: hip.diagnostics
// CHECK: func.return %{{.*}} : tensor<1x?x12x32xf32>
