// Split lowering: an equal Split of a static axis whose declared results leave that axis dynamic
// becomes one tensor.extract_slice per output with the type its static sizes imply (the other,
// dynamic extent via tensor.dim), then tensor.cast to the declared type.
// RUN: %hipep-opt %s -p hip-lower-slices | filecheck %s
// The same without the cast (field bug: users see a type the declaration does not promise):
// RUN: %hipep-opt %s -p 'hip-lower-slices{cast=false}' | not filecheck %s

func.func @split(%x: tensor<?x8xf32>) -> (tensor<?x?xf32>, tensor<?x?xf32>) {
  %a, %b = hip.split "split0"(%x) {since_version = 13 : i64, onnx = {axis = 1 : i64}, positions = [0 : i64]} : (tensor<?x8xf32>) -> (tensor<?x?xf32>, tensor<?x?xf32>)
  %ua = hip.relu "relu_a"(%a) {since_version = 14 : i64, onnx = {}, positions = [0 : i64]} : (tensor<?x?xf32>) -> tensor<?x?xf32>
  %ub = hip.relu "relu_b"(%b) {since_version = 14 : i64, onnx = {}, positions = [0 : i64]} : (tensor<?x?xf32>) -> tensor<?x?xf32>
  func.return %ua, %ub : tensor<?x?xf32>, tensor<?x?xf32>
}

// CHECK-LABEL: func.func @split
// CHECK-NOT: hip.split
// CHECK: %[[C0:.*]] = arith.constant 0 : index
// CHECK: %[[D0:.*]] = tensor.dim %[[X:.*]], %[[C0]] : tensor<?x8xf32>
// CHECK: %[[S0:.*]] = tensor.extract_slice %[[X]][0, 0] [%[[D0]], 4] [1, 1] : tensor<?x8xf32> to tensor<?x4xf32>
// CHECK: %[[A:.*]] = tensor.cast %[[S0]] : tensor<?x4xf32> to tensor<?x?xf32>
// CHECK: %[[S1:.*]] = tensor.extract_slice %[[X]][0, 4] [%[[D0]], 4] [1, 1] : tensor<?x8xf32> to tensor<?x4xf32>
// CHECK: %[[B:.*]] = tensor.cast %[[S1]] : tensor<?x4xf32> to tensor<?x?xf32>
// CHECK: hip.relu "relu_a"(%[[A]]) {{.*}} : (tensor<?x?xf32>) -> tensor<?x?xf32>
// CHECK: hip.relu "relu_b"(%[[B]])
