// Shape merge: a dynamic stored extent takes the rule's static one; static stored extents stay.
// Stored ?x?x12x32, the broadcast rule gives 1x5x?x32 -> 1x5x12x32.
// RUN: %hipep-opt %s -p hip-infer-shapes | filecheck %s

func.func @fill(%a: tensor<1x5x?x32xf32>, %b: tensor<1x1x1x32xf32>) -> tensor<?x?x12x32xf32> {
  %s = hip.add "add0"(%a, %b) {since_version = 14 : i64, onnx = {}, positions = [0 : i64, 1 : i64]} : (tensor<1x5x?x32xf32>, tensor<1x1x1x32xf32>) -> tensor<?x?x12x32xf32>
  func.return %s : tensor<?x?x12x32xf32>
}

// CHECK-LABEL: func.func @fill
// CHECK-SAME: -> tensor<1x5x12x32xf32>
// CHECK: hip.add "add0"{{.*}} -> tensor<1x5x12x32xf32>
// CHECK-NOT: hip.diagnostics
// CHECK: func.return %{{.*}} : tensor<1x5x12x32xf32>
