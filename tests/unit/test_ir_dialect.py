"""The hip dialect: one op per registry entry, names, properties, structural ops, text round trip."""
from __future__ import annotations

import numpy as np
import pytest

from hipep.ir.api import make_context, parse_ir, print_ir
from hipep.ir.dialect import (REGISTRY_OPS, ConstantOp, HipDialect, HipOnnxOp, IfOp, LoopOp,
                              WeightOp, YieldOp, attr_to_onnx, onnx_to_attr, op_class_for, op_name,
                              registry_key_of, snake_case)
from hipep.ops import all_ops


@pytest.mark.parametrize("op_type,snake", [
    ("MatMul", "matmul"), ("LayerNormalization", "layer_normalization"), ("ReduceSum", "reduce_sum"),
    ("Add", "add"), ("GreaterOrEqual", "greater_or_equal"), ("LeakyRelu", "leaky_relu"),
    ("MatMulNBits", "matmul_n_bits"), ("GatherND", "gather_nd"), ("HardSigmoid", "hard_sigmoid"),
    ("GroupQueryAttention", "group_query_attention"),
])
def test_snake_case(op_type, snake):
    assert snake_case(op_type) == snake


def test_op_names():
    assert op_name("", "MatMul") == "hip.matmul"
    assert op_name("ai.onnx", "ReduceSum") == "hip.reduce_sum"
    assert op_name("com.microsoft", "Gelu") == "hip.ms.gelu"
    assert op_name("", "Constant") == "hip.onnx_constant"  # hip.constant is the structural op


def test_one_op_class_per_registry_entry():
    keys = {op.key for op in all_ops()} - {("", "Loop"), ("", "If")}
    assert set(REGISTRY_OPS) == keys
    names = [cls.name for cls in REGISTRY_OPS.values()]
    assert len(set(names)) == len(names)
    for key, cls in REGISTRY_OPS.items():
        assert issubclass(cls, HipOnnxOp) and cls.REGISTRY_KEY == key
        assert op_class_for(*key) is cls
        assert cls in HipDialect.operations
    assert op_class_for("", "Loop") is LoopOp and op_class_for("ai.onnx", "If") is IfOp
    assert op_class_for("", "NoSuchOp") is None


def test_generated_op_properties_and_accessors():
    cls = op_class_for("", "Split")
    from hipep.ir.types import to_ir_type
    from hipep.graph import TensorType as T

    x = ConstantOp(np.zeros((2, 4), np.float32))
    op = cls.make([x.results[0]], [to_ir_type(T(1, (2, 2)))] * 2, "split0", 13, {"axis": 1},
                  positions=[0], result_positions=[0, 1])
    assert op.label == "split0"
    assert op.since_version.value.data == 13
    assert op.onnx_attributes() == {"axis": 1}
    assert op.operand_positions() == [0]
    assert op.output_positions() == [0, 1]
    assert op.result_positions is None  # identity positions are not stored
    assert op.operand_at(0) is x.results[0] and op.operand_at(1) is None
    assert op.op_def.op_type == "Split"
    assert registry_key_of(op) == ("", "Split")
    assert registry_key_of(x) is None
    resolved = op.resolved_attributes()
    assert resolved["axis"] == 1 and "num_outputs" in resolved


def test_onnx_attribute_conversion_round_trip():
    for v in (3, -1, 0.5, "linear", [1, 2, 3], [0.5, 1.0], ["a", "b"], []):
        assert attr_to_onnx(onnx_to_attr(v)) == v
    t = np.arange(6, dtype=np.int64).reshape(2, 3)
    np.testing.assert_array_equal(attr_to_onnx(onnx_to_attr(t)), t)
    assert onnx_to_attr(None) is None


TEXT = """
func.func @f(%x: tensor<2x?xf32>, %m: tensor<i64>, %c: tensor<i1>) -> (tensor<2x?xf32>, tensor<*xf32>) {
  %k = hip.constant dense<[1, 2]> : tensor<2xi64>
  %w = hip.weight "w0" : tensor<4096x16xf16>
  %a = hip.add "add0"(%x, %x) {since_version = 14 : i64, onnx = {}, positions = [0 : i64, 1 : i64]} : (tensor<2x?xf32>, tensor<2x?xf32>) -> tensor<2x?xf32>
  %r = "hip.loop"(%m, %a) <{node = "loop0", since_version = 16 : i64, operandSegmentSizes = array<i32: 1, 0, 1>}> ({
  ^bb0(%i: tensor<i64>, %cond: tensor<i1>, %acc: tensor<2x?xf32>):
    %n = hip.relu "relu0"(%acc) {since_version = 14 : i64, onnx = {}, positions = [0 : i64]} : (tensor<2x?xf32>) -> tensor<2x?xf32>
    hip.yield %cond, %n : tensor<i1>, tensor<2x?xf32>
  }) : (tensor<i64>, tensor<2x?xf32>) -> tensor<2x?xf32>
  %s = "hip.if"(%c) <{node = "if0", since_version = 16 : i64}> ({
    hip.yield %x : tensor<2x?xf32>
  }, {
    hip.yield %r : tensor<2x?xf32>
  }) : (tensor<i1>) -> tensor<*xf32>
  func.return %r, %s : tensor<2x?xf32>, tensor<*xf32>
}
"""


def test_text_round_trip_and_structural_ops():
    module = parse_ir(TEXT)
    module.verify()
    ops = list(module.walk())
    kinds = {type(o) for o in ops}
    assert {ConstantOp, WeightOp, LoopOp, IfOp, YieldOp} <= kinds
    const = next(o for o in ops if isinstance(o, ConstantOp))
    np.testing.assert_array_equal(const.numpy(), [1, 2])
    weight = next(o for o in ops if isinstance(o, WeightOp))
    assert weight.weight_name.data == "w0"
    loop = next(o for o in ops if isinstance(o, LoopOp))
    assert loop.trip_count is not None and loop.cond is None and len(loop.v_init) == 1
    text = print_ir(module)
    assert 'hip.weight "w0" : tensor<4096x16xf16>' in text
    assert "hip.constant dense<[1, 2]> : tensor<2xi64>" in text
    again = parse_ir(text, make_context())
    assert print_ir(again) == text
    # generic form parses too
    assert print_ir(parse_ir(print_ir(module, generic=True))) == text


def test_generated_ops_are_pure():
    from xdsl.traits import Pure

    for cls in REGISTRY_OPS.values():
        assert cls.has_trait(Pure)
