"""hip-infer-shapes: the registry's shape rules merged with refine_type, regions included."""
from __future__ import annotations

import dataclasses
import time

import numpy as np
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

from hipep.frontend import import_graph
from hipep.graph import GraphView
from hipep.ir.api import parse_ir
from hipep.ir.dialect import IfOp, LoopOp
from hipep.ir.types import from_ir_type
from hipep.ops import registry
from hipep.passes import DEFAULT_PIPELINE, PASSES, run_pipeline
from hipep.passes.infer_shapes import InferShapesPass, infer_shapes

T = h.make_tensor_value_info


def model(nodes, inputs, outputs, inits=(), opset=18):
    g = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=10)


def forget_shapes(g: GraphView) -> dict:
    """Make every node output unranked (as a rule-less importer would); returns ONNX's types."""
    known = dict(g.types)
    for n in g.nodes:
        for o in n.outputs:
            if o in g.types:
                g.types[o] = dataclasses.replace(g.types[o], shape=None)
    return known


def result_types(module) -> dict[str, str]:
    return {r.name_hint: str(r.type) for op in module.walk() for r in op.results if r.name_hint}


def chain_model():
    inits = [numpy_helper.from_array(np.array([0, 0, 4, 16], np.int64), "shape4"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([2], np.int64), "ax")]
    nodes = [h.make_node("MatMul", ["x", "w"], ["mm"], name="mm"),
             h.make_node("Reshape", ["mm", "shape4"], ["r"], name="r"),
             h.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3], name="t"),
             h.make_node("Slice", ["t", "zero", "one", "ax"], ["s"], name="s"),
             h.make_node("ReduceSum", ["s", "ax"], ["rs"], keepdims=0, name="rs"),
             h.make_node("Shape", ["rs"], ["shp"], name="shp"),
             h.make_node("Cast", ["shp"], ["f"], to=TP.FLOAT, name="cast")]
    return model(nodes, [T("x", TP.FLOAT, ["batch", 8, 32]), T("w", TP.FLOAT, [32, 64])],
                 [T("f", TP.FLOAT, None)], inits)


def test_chain_recovers_what_onnx_knows():
    g = GraphView.from_onnx(chain_model())
    known = forget_shapes(g)
    module = import_graph(g, ["x", "w"], ["f"], "chain")
    assert result_types(module)["t"] == "tensor<*xf32>"
    assert infer_shapes(module) == []
    module.verify()
    got = result_types(module)
    assert got["mm"] == "tensor<?x8x64xf32>"
    assert got["r"] == "tensor<?x8x4x16xf32>"  # the shape operand is a hip.constant: values used
    assert got["t"] == "tensor<?x4x8x16xf32>"
    assert got["s"] == "tensor<?x4x1x16xf32>"
    assert got["rs"] == "tensor<?x4x16xf32>"
    assert got["shp"] == "tensor<3xi64>" and got["f"] == "tensor<3xf32>"
    for name, t in known.items():  # never less precise than ONNX's own inference
        if name in got and t.shape is not None:
            want = tuple(d if isinstance(d, int) else None for d in t.shape)
            assert from_ir_type(parse_type(got[name])).shape == want, name
    # the signature follows the refined results
    fn = module.body.block.first_op
    assert str(fn.function_type.outputs.data[0]) == "tensor<3xf32>"


def parse_type(text: str):
    m = parse_ir(f"func.func @f(%a: {text}) {{\n  func.return\n}}")
    return m.body.block.first_op.function_type.inputs.data[0]


SLICE_RUNTIME = """
func.func @f(%x: tensor<1x?x12x32xf32>, %b: tensor<?xi64>) -> tensor<1x?x12x32xf32> {
  %s = hip.slice "s"(%x, %b, %b) {since_version = 13 : i64, onnx = {}, positions = [0 : i64, 1 : i64, 2 : i64]} : (tensor<1x?x12x32xf32>, tensor<?xi64>, tensor<?xi64>) -> tensor<1x?x12x32xf32>
  func.return %s : tensor<1x?x12x32xf32>
}
"""


def test_refine_keeps_known_extents_and_refine_false_widens():
    module = parse_ir(SLICE_RUNTIME)
    infer_shapes(module)
    assert result_types(module)["s"] == "tensor<1x?x12x32xf32>"
    widened = parse_ir(SLICE_RUNTIME)
    run_pipeline(widened, "hip-infer-shapes{refine=false}")
    assert result_types(widened)["s"] == "tensor<?x?x?x?xf32>"


def test_missing_rule_means_no_information(monkeypatch):
    key = ("", "Relu")
    monkeypatch.setitem(registry._REGISTRY, key, dataclasses.replace(registry.lookup(*key), shape_rule=None))
    module = parse_ir("""
func.func @f(%x: tensor<2x3xf32>) -> tensor<*xf32> {
  %r = hip.relu "r"(%x) {since_version = 14 : i64, onnx = {}, positions = [0 : i64]} : (tensor<2x3xf32>) -> tensor<*xf32>
  func.return %r : tensor<*xf32>
}""")
    assert infer_shapes(module) == []
    assert result_types(module)["r"] == "tensor<*xf32>"


def test_rule_arguments_and_a_raising_rule(monkeypatch):
    seen = []

    def rule(types, values, attrs, num_outputs):
        seen.append((types, values, attrs, num_outputs))
        raise ValueError("cannot decide")

    key = ("", "Split")
    monkeypatch.setitem(registry._REGISTRY, key, dataclasses.replace(registry.lookup(*key), shape_rule=rule))
    module = parse_ir("""
func.func @f(%x: tensor<?x8xf32>) -> (tensor<*xf32>, tensor<*xf32>) {
  %k = hip.constant dense<[3, 5]> : tensor<2xi64>
  %a, %b = hip.split "sp"(%x, %k) {since_version = 13 : i64, onnx = {axis = 1 : i64}, positions = [0 : i64, 1 : i64]} : (tensor<?x8xf32>, tensor<2xi64>) -> (tensor<*xf32>, tensor<*xf32>)
  func.return %a, %b : tensor<*xf32>, tensor<*xf32>
}""")
    diags = infer_shapes(module)
    (types, values, attrs, n), = seen
    assert [t.shape for t in types] == [(None, 8), (2,)] and types[0].elem_type == 1
    assert values[0] is None and values[1].tolist() == [3, 5]
    assert attrs["axis"] == 1 and attrs.get(registry.OUTPUT_COUNT, 2) == 2 and n == 2
    assert len(diags) == 1 and "sp" in diags[0] and "cannot decide" in diags[0]
    assert result_types(module)["a"] == "tensor<*xf32>"


def test_conflict_is_diagnosed_and_left_unchanged():
    module = parse_ir("""
func.func @f(%x: tensor<2x3xf32>) -> tensor<2x4xf32> {
  %r = hip.relu "bad"(%x) {since_version = 14 : i64, onnx = {}, positions = [0 : i64]} : (tensor<2x3xf32>) -> tensor<2x4xf32>
  func.return %r : tensor<2x4xf32>
}""")
    diags = infer_shapes(module)
    assert len(diags) == 1
    assert "'bad'" in diags[0] and "tensor<2x3xf32>" in diags[0] and "tensor<2x4xf32>" in diags[0]
    assert result_types(module)["r"] == "tensor<2x4xf32>"
    assert infer_shapes(module) == diags  # running again records nothing new


def loop_if_model():
    body = h.make_graph(
        [h.make_node("Add", ["acc", "x"], ["acc2"], name="body_add"),
         h.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
         h.make_node("Mul", ["acc", "x"], ["scan"], name="body_mul")],
        "body", [T("i", TP.INT64, []), T("cond_in", TP.BOOL, []), T("acc", TP.FLOAT, None)],
        [T("cond_out", TP.BOOL, []), T("acc2", TP.FLOAT, None), T("scan", TP.FLOAT, None)])
    then_g = h.make_graph([h.make_node("Relu", ["x"], ["t"], name="then_relu")], "then", [],
                          [T("t", TP.FLOAT, None)])
    else_g = h.make_graph([h.make_node("Slice", ["x", "s0", "s1"], ["e"], name="else_slice")], "else", [],
                          [T("e", TP.FLOAT, None)])
    nodes = [h.make_node("Loop", ["M", "", "x"], ["final", "scans"], body=body, name="loop0"),
             h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="if0")]
    inits = [numpy_helper.from_array(np.array(3, np.int64), "M"),
             numpy_helper.from_array(np.array([0], np.int64), "s0"),
             numpy_helper.from_array(np.array([1], np.int64), "s1")]
    return model(nodes, [T("x", TP.FLOAT, [2, 3]), T("c", TP.BOOL, [])],
                 [T("final", TP.FLOAT, None), T("scans", TP.FLOAT, None), T("y", TP.FLOAT, None)], inits)


def test_loop_results_equal_v_init_and_if_joins_branches():
    g = GraphView.from_onnx(loop_if_model(), infer_shapes=False)
    module = import_graph(g, ["x", "c"], ["final", "scans", "y"], "cf")
    assert infer_shapes(module) == []
    module.verify()
    loop = next(o for o in module.walk() if isinstance(o, LoopOp))
    assert [str(a.type) for a in loop.body.block.args] == ["tensor<i64>", "tensor<i1>", "tensor<2x3xf32>"]
    assert str(loop.results[0].type) == str(loop.v_init[0].type) == "tensor<2x3xf32>"
    got = result_types(module)
    assert got["acc2"] == "tensor<2x3xf32>"  # inferred inside the body
    assert got["scans"] == "tensor<3x2x3xf32>"  # constant trip count, no cond input
    iff = next(o for o in module.walk() if isinstance(o, IfOp))
    assert got["t"] == "tensor<2x3xf32>" and got["e"] == "tensor<1x3xf32>"
    assert str(iff.results[0].type) == "tensor<?x3xf32>"  # the join of the branches


def test_loop_reports_stored_types_that_contradict_v_init():
    module = parse_ir("""
func.func @f(%m: tensor<i64>, %x: tensor<2x3xf32>) -> tensor<2x5xf32> {
  %r = "hip.loop"(%m, %x) <{node = "L", since_version = 16 : i64, operandSegmentSizes = array<i32: 1, 0, 1>}> ({
  ^bb0(%i: tensor<i64>, %c: tensor<i1>, %a: tensor<2x5xf32>):
    hip.yield %c, %a : tensor<i1>, tensor<2x5xf32>
  }) : (tensor<i64>, tensor<2x3xf32>) -> tensor<2x5xf32>
  func.return %r : tensor<2x5xf32>
}""")
    diags = infer_shapes(module)
    assert len(diags) == 2 and all("'L'" in d and "v_init" in d for d in diags)
    loop = next(o for o in module.walk() if isinstance(o, LoopOp))
    assert str(loop.results[0].type) == "tensor<2x3xf32>"
    module.verify()


def test_pass_registry():
    assert PASSES["hip-infer-shapes"] is InferShapesPass
    assert DEFAULT_PIPELINE[:2] == ["hip-infer-shapes", "hip-lower-slices"]
    assert InferShapesPass().refine is True


def big_model(blocks: int):
    inits = [numpy_helper.from_array(np.array([0, 0, 4, 16], np.int64), "shape4"),
             numpy_helper.from_array(np.array([0, 0, 64], np.int64), "shape3"),
             numpy_helper.from_array(np.array([0], np.int64), "s0"),
             numpy_helper.from_array(np.array([32], np.int64), "e32"),
             numpy_helper.from_array(np.array([2], np.int64), "ax2")]
    nodes, x = [], "x"
    for b in range(blocks):
        p, w = f"b{b}_", f"w{b}"
        inits.append(numpy_helper.from_array(np.zeros((64, 64), np.float32), w))
        nodes += [
            h.make_node("MatMul", [x, w], [p + "mm"], name=p + "mm"),
            h.make_node("Reshape", [p + "mm", "shape4"], [p + "r"], name=p + "r"),
            h.make_node("Transpose", [p + "r"], [p + "t"], perm=[0, 2, 1, 3], name=p + "t"),
            h.make_node("Softmax", [p + "t"], [p + "sm"], axis=-1, name=p + "sm"),
            h.make_node("Transpose", [p + "sm"], [p + "t2"], perm=[0, 2, 1, 3], name=p + "t2"),
            h.make_node("Reshape", [p + "t2", "shape3"], [p + "r2"], name=p + "r2"),
            h.make_node("Slice", [p + "r2", "s0", "e32", "ax2"], [p + "sl"], name=p + "sl"),
            h.make_node("Concat", [p + "sl", p + "sl"], [p + "cat"], axis=2, name=p + "cat"),
            h.make_node("Add", [p + "cat", x], [p + "add"], name=p + "add"),
            h.make_node("Relu", [p + "add"], [p + "out"], name=p + "relu"),
        ]
        x = p + "out"
    return model(nodes, [T("x", TP.FLOAT, ["batch", "seq", 64])], [T(x, TP.FLOAT, None)], inits), x


def test_3k_nodes_import_and_infer_in_seconds(capsys):
    m, out = big_model(300)
    g = GraphView.from_onnx(m)
    forget_shapes(g)
    assert len(g.nodes) == 3000
    inputs = ["x"] + sorted(g.constants)  # ORT passes the initializers as inputs
    t0 = time.perf_counter()
    module = import_graph(g, inputs, [out], "big")
    t1 = time.perf_counter()
    diags = infer_shapes(module)
    t2 = time.perf_counter()
    run_pipeline(module, ["hip-lower-slices"])
    t3 = time.perf_counter()
    with capsys.disabled():
        print(f"\n3000 nodes: import {t1 - t0:.2f}s, infer {t2 - t1:.2f}s, lower-slices {t3 - t2:.2f}s")
    assert diags == []
    fn = module.body.block.first_op
    assert str(fn.function_type.outputs.data[0]) == "tensor<?x?x64xf32>"
    assert t2 - t0 < 5.0
