// Shape merge: static extents that disagree leave the stored type unchanged and record a
// diagnostic (attribute hip.diagnostics on the op) naming both types.
// RUN: %hipep-opt %s -p hip-infer-shapes | filecheck %s

func.func @conflict(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x4xf32> {
  %s = hip.mul "mul0"(%a, %b) {since_version = 14 : i64, onnx = {}, positions = [0 : i64, 1 : i64]} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x4xf32>
  func.return %s : tensor<2x4xf32>
}

// CHECK-LABEL: func.func @conflict
// CHECK: hip.mul "mul0"(%{{.*}}) {{{.*}}hip.diagnostics = ["hip.mul 'mul0' result 0: inferred type tensor<2x3xf32> conflicts with stored type tensor<2x4xf32> (dimension 1: 4 vs 3); type left unchanged"]{{.*}}} : {{.*}} -> tensor<2x4xf32>
// CHECK: func.return %{{.*}} : tensor<2x4xf32>
