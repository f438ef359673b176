"""hipep.frontend.import_graph: GraphView -> hip dialect (func.func per fused subgraph)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

from hipep.errors import ModelError
from hipep.frontend import import_graph
from hipep.graph import GraphView
from hipep.ir.api import func, parse_ir, print_ir
from hipep.ir.dialect import ConstantOp, IfOp, LoopOp, WeightOp, YieldOp, op_class_for

T = h.make_tensor_value_info


def model(nodes, inputs, outputs, inits=(), opset=18):
    g = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=10)


def function_of(module) -> func.FuncOp:
    fn = module.body.block.first_op
    assert isinstance(fn, func.FuncOp)
    return fn


def ops_named(module, cls):
    return [o for o in module.walk() if isinstance(o, cls)]


def test_chain_signature_types_and_properties():
    m = model([h.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
               h.make_node("Softmax", ["y"], ["z"], axis=-1, name="sm")],
              [T("x", TP.FLOAT, ["batch", 1, 64]), T("w", TP.FLOAT, [64, 32])],
              [T("z", TP.FLOAT, ["batch", 1, 32])])
    module = import_graph(GraphView.from_onnx(m), ["x", "w"], ["z"], "sub0", verify=True)
    fn = function_of(module)
    assert fn.sym_name.data == "sub0"
    assert [str(t) for t in fn.function_type.inputs] == ["tensor<?x1x64xf32>", "tensor<64x32xf32>"]
    assert [str(t) for t in fn.function_type.outputs] == ["tensor<?x1x32xf32>"]
    mm, sm = [o for o in fn.body.block.ops][:2]
    assert isinstance(mm, op_class_for("", "MatMul")) and mm.label == "mm"
    assert str(mm.results[0].type) == "tensor<?x1x32xf32>"  # ONNX's static extents kept
    assert sm.onnx_attributes() == {"axis": -1}
    assert sm.since_version.value.data == 13
    text = print_ir(module)
    assert print_ir(parse_ir(text)) == text


def test_constants_weights_and_inputs():
    small = numpy_helper.from_array(np.array([0, -1], np.int64), "shape")
    mid = numpy_helper.from_array(np.zeros((40, 40), np.float32), "mid")  # > 1024 elements
    big = numpy_helper.from_array(np.zeros((40, 2000), np.float32), "big")  # a GraphView weight
    m = model([h.make_node("Add", ["x", "mid"], ["a"], name="add"),
               h.make_node("MatMul", ["a", "big"], ["b"], name="mm"),
               h.make_node("Reshape", ["b", "shape"], ["c"], name="rs")],
              [T("x", TP.FLOAT, [40, 40])], [T("c", TP.FLOAT, None)], [small, mid, big])
    g = GraphView.from_onnx(m)
    assert "big" in g.weights and "mid" in g.constants
    # ORT passes the initializers it keeps as fused-node inputs: here `big` and `shape` are inputs
    module = import_graph(g, ["x", "big", "shape"], ["c"], "s", verify=True)
    fn = function_of(module)
    assert [a.name_hint for a in fn.body.block.args] == ["x", "big", "shape"]
    consts = ops_named(module, ConstantOp)
    weights = ops_named(module, WeightOp)
    # the small input is folded into a hip.constant (its argument stays); `mid` is a handle
    assert [c.results[0].name_hint for c in consts] == ["shape"]
    np.testing.assert_array_equal(consts[0].numpy(), [0, -1])
    assert [(w.weight_name.data, str(w.results[0].type)) for w in weights] == [("mid", "tensor<40x40xf32>")]
    mm = next(o for o in module.walk() if isinstance(o, op_class_for("", "MatMul")))
    assert mm.operands[1] is fn.body.block.args[1]  # the weight argument, never a dense attr
    rs = next(o for o in module.walk() if isinstance(o, op_class_for("", "Reshape")))
    assert rs.operands[1] is consts[0].results[0]
    # without folding, the small input stays an argument
    plain = import_graph(g, ["x", "big", "shape"], ["c"], "s", fold_small_constant_inputs=False)
    assert not ops_named(plain, ConstantOp)


def test_omitted_optional_inputs_and_positions():
    m = model([h.make_node("Clip", ["x", "", "hi"], ["y"], name="clip")],
              [T("x", TP.FLOAT, [3]), T("hi", TP.FLOAT, [])], [T("y", TP.FLOAT, [3])])
    module = import_graph(GraphView.from_onnx(m), ["x", "hi"], ["y"], "s")
    clip = next(o for o in module.walk() if isinstance(o, op_class_for("", "Clip")))
    assert clip.operand_positions() == [0, 2]
    assert clip.operand_at(1) is None and clip.operand_at(2) is not None


def test_opset_forms_are_kept():
    m = model([h.make_node("Slice", ["x"], ["y"], starts=[1], ends=[3], axes=[0], name="s1")],
              [T("x", TP.FLOAT, [4, 6])], [T("y", TP.FLOAT, [2, 6])], opset=9)
    module = import_graph(GraphView.from_onnx(m), ["x"], ["y"], "s")
    sl = next(o for o in module.walk() if isinstance(o, op_class_for("", "Slice")))
    assert sl.since_version.value.data == 1
    assert sl.onnx_attributes() == {"starts": [1], "ends": [3], "axes": [0]}
    assert sl.operand_positions() == [0]


def loop_if_model():
    body = h.make_graph(
        [h.make_node("Add", ["acc", "x"], ["acc2"], name="body_add"),
         h.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
         h.make_node("Mul", ["acc", "two"], ["scan"], name="body_mul")],
        "body", [T("i", TP.INT64, []), T("cond_in", TP.BOOL, []), T("acc", TP.FLOAT, None)],
        [T("cond_out", TP.BOOL, []), T("acc2", TP.FLOAT, None), T("scan", TP.FLOAT, None)],
        [numpy_helper.from_array(np.array(2, np.float32), "two")])
    then_g = h.make_graph([h.make_node("Relu", ["x"], ["t"], name="then_relu")], "then", [],
                          [T("t", TP.FLOAT, [2, 3])])
    else_g = h.make_graph([h.make_node("Neg", ["x"], ["e"], name="else_neg")], "else", [],
                          [T("e", TP.FLOAT, [2, 3])])
    nodes = [h.make_node("Loop", ["M", "", "x"], ["final", "scans"], body=body, name="loop0"),
             h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="if0"),
             h.make_node("Add", ["final", "y"], ["z"], name="after")]
    return model(nodes, [T("x", TP.FLOAT, [2, 3]), T("c", TP.BOOL, [])],
                 [T("scans", TP.FLOAT, None), T("z", TP.FLOAT, None)],
                 [numpy_helper.from_array(np.array(3, np.int64), "M")])


def test_loop_and_if_become_regions():
    g = GraphView.from_onnx(loop_if_model())
    module = import_graph(g, ["x", "c"], ["scans", "z"], "cf", verify=True)
    fn = function_of(module)
    x = fn.body.block.args[0]
    loop = ops_named(module, LoopOp)[0]
    assert loop.label == "loop0"
    assert loop.trip_count is not None and isinstance(loop.trip_count.owner, ConstantOp)
    assert loop.cond is None and list(loop.v_init) == [x]
    block = loop.body.block
    assert [str(a.type) for a in block.args[:2]] == ["tensor<i64>", "tensor<i1>"]
    assert [a.name_hint for a in block.args] == ["i", "cond_in", "acc"]
    body_ops = list(block.ops)
    add = next(o for o in body_ops if isinstance(o, op_class_for("", "Add")))
    assert add.operands[1] is x  # outer-scope values are referenced directly
    # the body's own initializer is a constant in the body
    assert any(isinstance(o, ConstantOp) for o in body_ops)
    assert isinstance(block.last_op, YieldOp) and len(block.last_op.args) == 3
    assert len(loop.results) == 2
    iff = ops_named(module, IfOp)[0]
    assert iff.cond is fn.body.block.args[1]
    assert [type(o).__name__ for o in iff.then_region.block.ops] == ["ReluOp", "YieldOp"]
    assert [type(o).__name__ for o in iff.else_region.block.ops] == ["NegOp", "YieldOp"]
    text = print_ir(module)
    assert print_ir(parse_ir(text)) == text


def test_topological_order_is_restored():
    m = model([h.make_node("Relu", ["a"], ["b"], name="second"),
               h.make_node("Neg", ["x"], ["a"], name="first")],
              [T("x", TP.FLOAT, [2])], [T("b", TP.FLOAT, [2])])
    g = GraphView.from_onnx(m, infer_shapes=False)
    g.types.update({"a": g.types["x"], "b": g.types["x"]})
    module = import_graph(g, ["x"], ["b"], "s", verify=True)
    labels = [o.label for o in function_of(module).body.block.ops if hasattr(o, "label")]
    assert labels == ["first", "second"]


def test_errors_name_the_node():
    m = model([h.make_node("GlobalLpPool", ["x"], ["y"], name="the_pool")], [T("x", TP.FLOAT, [1, 2, 2])],
              [T("y", TP.FLOAT, [1, 2, 1])])
    with pytest.raises(ModelError, match="the_pool"):
        import_graph(GraphView.from_onnx(m), ["x"], ["y"], "s")
    m = model([h.make_node("Add", ["x", "nowhere"], ["y"], name="lost")], [T("x", TP.FLOAT, [2])],
              [T("y", TP.FLOAT, [2])])
    g = GraphView.from_onnx(m, infer_shapes=False)
    with pytest.raises(ModelError, match="lost.*nowhere"):
        import_graph(g, ["x"], ["y"], "s")
    m = model([h.make_node("Relu", ["x"], ["y"], name="r")], [T("x", TP.FLOAT, [2])], [T("y", TP.FLOAT, [2])])
    g = GraphView.from_onnx(m, infer_shapes=False)
    del g.types["x"]
    with pytest.raises(ModelError, match="input 'x'.*unknown element type"):
        import_graph(g, ["x"], ["y"], "s")


def test_unknown_result_types_are_filled_in_by_inference():
    from hipep.passes.infer_shapes import infer_shapes

    m = model([h.make_node("Relu", ["x"], ["y"], name="r"), h.make_node("Shape", ["y"], ["s"], name="shp")],
              [T("x", TP.FLOAT, [2, "n"])], [T("s", TP.INT64, None)])
    g = GraphView.from_onnx(m, infer_shapes=False)
    g.types.pop("y", None)
    g.types.pop("s", None)
    module = import_graph(g, ["x"], ["s"], "s")
    text = print_ir(module)
    assert "-> tensor<*xnone>" in text
    assert infer_shapes(module) == []
    module.verify()
    fn = function_of(module)
    assert str(fn.function_type.outputs.data[0]) == "tensor<2xi64>"
    relu = next(o for o in fn.body.block.ops if isinstance(o, op_class_for("", "Relu")))
    assert str(relu.results[0].type) == "tensor<2x?xf32>"
