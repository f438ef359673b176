// Shape merge: an unranked stored type takes the rule's type.
// RUN: %hipep-opt %s -p hip-infer-shapes | filecheck %s

func.func @unranked(%a: tensor<4x?xf32>, %b: tensor<?x8xf32>) -> tensor<*xf32> {
  %m = hip.matmul "mm0"(%a, %b) {since_version = 13 : i64, onnx = {}, positions = [0 : i64, 1 : i64]} : (tensor<4x?xf32>, tensor<?x8xf32>) -> tensor<*xf32>
  func.return %m : tensor<*xf32>
}

// CHECK-LABEL: func.func @unranked
// CHECK-SAME: -> tensor<4x8xf32>
// CHECK: hip.matmul "mm0"{{.*}} -> tensor<4x8xf32>
// CHECK: func.return %{{.*}} : tensor<4x8xf32>
