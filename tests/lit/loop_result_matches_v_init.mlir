// A hip.loop result type always equals its v_init type: the body's block arguments and the
// loop's carried results take the v_init types (here tensor<1x?x12x32xf32>), inside the body too.
// RUN: %hipep-opt %s -p hip-infer-shapes | filecheck %s

func.func @loop(%m: tensor<i64>, %x: tensor<1x?x12x32xf32>, %y: tensor<1x?x12x32xf32>) -> tensor<*xf32> {
  %r = "hip.loop"(%m, %x) <{node = "loop0", since_version = 16 : i64, operandSegmentSizes = array<i32: 1, 0, 1>}> ({
  ^bb0(%i: tensor<i64>, %c: tensor<i1>, %acc: tensor<*xf32>):
    %next = hip.add "add0"(%acc, %y) {since_version = 14 : i64, onnx = {}, positions = [0 : i64, 1 : i64]} : (tensor<*xf32>, tensor<1x?x12x32xf32>) -> tensor<*xf32>
    hip.yield %c, %next : tensor<i1>, tensor<*xf32>
  }) : (tensor<i64>, tensor<1x?x12x32xf32>) -> tensor<*xf32>
  func.return %r : tensor<*xf32>
}

// CHECK-LABEL: func.func @loop
// CHECK-SAME: -> tensor<1x?x12x32xf32>
// CHECK: ^{{.*}}(%{{.*}}: tensor<i64>, %{{.*}}: tensor<i1>, %{{.*}}: tensor<1x?x12x32xf32>):
// CHECK: hip.add "add0"{{.*}} -> tensor<1x?x12x32xf32>
// CHECK: hip.yield %{{.*}}, %{{.*}} : tensor<i1>, tensor<1x?x12x32xf32>
// CHECK: }) : (tensor<i64>, tensor<1x?x12x32xf32>) -> tensor<1x?x12x32xf32>
// CHECK-NOT: hip.diagnostics
