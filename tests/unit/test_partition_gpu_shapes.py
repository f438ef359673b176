"""Partitioning for a GPU device: a node whose output shape would depend on a value the device
computes (a Reshape to a shape derived from data, Resize with scales computed from data) is left to
other EPs, since GPU devices replay plans whose shapes are known before their launches; small
values handed in from outside (integers read as symbols, floats and bools pinned) are known. The oracle is the
shape tracer the executor runs: for each model the refused node's plan raises DataDependent with
real inputs (it would run step by step), and the claimed ones trace. Runs without a GPU: the
claims read the kernel table only."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T, helper as h

from hipep.compiler import compile_subgraph
from hipep.graph import GraphView
from hipep.partition import partition
from hipep.runtime.shapes import DataDependent, trace_shapes

from helpers import make_model, tensor


def _rejected(report) -> dict[str, str]:
    return {r.node.op_type: r.reason for r in report.rejections}


def _traces(model, feeds: dict) -> bool:
    """Whether the whole model's plan (as the CPU device compiles it) has shapes the host knows
    before any launch for these inputs; False where tracing needs device values."""
    g = GraphView.from_onnx(model)
    plan = compile_subgraph(g, "sub", list(g.inputs), list(g.outputs))
    constants = {vid: np.asarray(plan.constants[v.constant], dtype=v.dtype)
                 for vid, v in plan.values.items() if v.kind == "constant"}
    try:
        trace_shapes(plan, [feeds[plan.values[vid].name] for vid in plan.inputs], constants)
    except DataDependent:
        return False
    return True


def reshape_to_data_model():
    """Reshape to [n, -1] where n = Cast(ReduceMax(k)): the shape comes from k's data."""
    nodes = [h.make_node("ReduceMax", ["k"], ["m"], keepdims=1),
             h.make_node("Cast", ["m"], ["n"], to=T.INT64),
             h.make_node("Concat", ["n", "minus_one"], ["shape"], axis=0),
             h.make_node("Relu", ["x"], ["r"]),
             h.make_node("Reshape", ["r", "shape"], ["y"])]
    return make_model(nodes, [tensor("x", T.FLOAT, [4, 6]), tensor("k", T.FLOAT, [3])], [tensor("y", T.FLOAT, None)],
                      [h.make_tensor("minus_one", T.INT64, [1], [-1])])


def reshape_to_shape_arithmetic_model():
    """Reshape to [x.shape[0] * 2, -1]: shape arithmetic the host follows."""
    nodes = [h.make_node("Shape", ["x"], ["s"]),
             h.make_node("Gather", ["s", "zero"], ["d0"], axis=0),
             h.make_node("Mul", ["d0", "two"], ["d"]),
             h.make_node("Concat", ["d", "minus_one"], ["shape"], axis=0),
             h.make_node("Relu", ["x"], ["r"]),
             h.make_node("Reshape", ["r", "shape"], ["y"])]
    inits = [h.make_tensor("zero", T.INT64, [1], [0]), h.make_tensor("two", T.INT64, [1], [2]),
             h.make_tensor("minus_one", T.INT64, [1], [-1])]
    return make_model(nodes, [tensor("x", T.FLOAT, [4, 6])], [tensor("y", T.FLOAT, None)], inits)


def range_model(elem):
    nodes = [h.make_node("Range", ["start", "limit", "delta"], ["r"]),
             h.make_node("Neg", ["r"], ["y"])]
    return make_model(nodes, [tensor(n, elem, []) for n in ("start", "limit", "delta")], [tensor("y", elem, None)])


def resize_model(scales_from: str):
    """Resize with scales from a float input, from that input doubled on the device ("data"), or
    from Cast(Shape) (integer, then float on the device)."""
    nodes = [h.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")]
    inputs = [tensor("x", T.FLOAT, [1, 1, 2, 2])]
    if scales_from in ("input", "data"):
        inputs.append(tensor("scales", T.FLOAT, [4]))
    if scales_from == "data":
        nodes = [h.make_node("Mul", ["scales", "two"], ["doubled"]),
                 h.make_node("Resize", ["x", "", "doubled"], ["y"], mode="nearest")]
    elif scales_from == "shape":
        nodes[:0] = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Cast", ["s"], ["scales"], to=T.FLOAT)]
    return make_model(nodes, inputs, [tensor("y", T.FLOAT, None)], [h.make_tensor("two", T.FLOAT, [], [2.0])])


def topk_of_argmax_model():
    """TopK whose k is an ArgMax of float data (integer arithmetic on device data)."""
    nodes = [h.make_node("ArgMax", ["w"], ["k"], keepdims=1),
             h.make_node("Add", ["k", "one"], ["k1"]),
             h.make_node("TopK", ["x", "k1"], ["v", "i"])]
    return make_model(nodes, [tensor("x", T.FLOAT, [2, 8]), tensor("w", T.FLOAT, [5])],
                      [tensor("v", T.FLOAT, None), tensor("i", T.INT64, None)],
                      [h.make_tensor("one", T.INT64, [1], [1])])


def test_a_shape_from_device_data_is_left_to_other_eps():
    model = reshape_to_data_model()
    feeds = {"x": np.ones((4, 6), np.float32), "k": np.array([1.0, 3.0, 2.0], np.float32)}
    assert not _traces(model, feeds)  # the plan would run step by step
    g = GraphView.from_onnx(model)
    report = partition(g, device="cuda")
    reason = _rejected(report).get("Reshape", "")
    # the value reaches the Reshape from the Concat, whose integer result comes from device data
    assert "depends on the value of input 1 'shape', computed on the device by node 'Concat(shape)'" in reason, \
        report.format()
    assert set(_rejected(report)) == {"Reshape"}, report.format()
    assert not partition(g, device="cpu").rejections  # the CPU device runs such plans step by step


def test_a_shape_from_shape_arithmetic_stays_claimed():
    model = reshape_to_shape_arithmetic_model()
    assert _traces(model, {"x": np.ones((4, 6), np.float32)})
    report = partition(GraphView.from_onnx(model), device="cuda")
    assert not report.rejections, report.format()
    assert len(report.clusters) == 1


@pytest.mark.parametrize("elem", [T.INT64, T.INT32, T.FLOAT, T.FLOAT16])
def test_range_over_run_time_bounds_is_claimed(elem):
    # integer bounds are read as symbols, float ones pinned (hipep.runtime.shapes)
    model = range_model(elem)
    np_type = {T.INT64: np.int64, T.INT32: np.int32, T.FLOAT: np.float32, T.FLOAT16: np.float16}[elem]
    feeds = {"start": np.array(1, np_type), "limit": np.array(9, np_type), "delta": np.array(2, np_type)}
    assert _traces(model, feeds)
    report = partition(GraphView.from_onnx(model), device="cuda")
    assert not report.rejections, report.format()
    assert len(report.clusters) == 1


def test_integer_arithmetic_on_device_data_is_no_host_value():
    model = topk_of_argmax_model()
    feeds = {"x": np.arange(16, dtype=np.float32).reshape(2, 8), "w": np.array([0, 1, 5, 2, 1], np.float32)}
    assert not _traces(model, feeds)
    report = partition(GraphView.from_onnx(model), device="cuda")
    reason = _rejected(report).get("TopK", "")
    assert "input 1 'k1'" in reason and "(Add)" in reason, report.format()
    assert {"ArgMax", "Add"}.isdisjoint(_rejected(report))


def test_resize_with_scales_from_a_float_input_is_claimed():
    model = resize_model("input")
    feeds = {"x": np.ones((1, 1, 2, 2), np.float32), "scales": np.array([1, 1, 2, 2], np.float32)}
    assert _traces(model, feeds)  # the scales are pinned
    report = partition(GraphView.from_onnx(model), device="cuda")
    assert not report.rejections, report.format()


def test_resize_with_scales_computed_from_data_is_left_to_other_eps():
    model = resize_model("data")
    feeds = {"x": np.ones((1, 1, 2, 2), np.float32), "scales": np.array([1, 1, 2, 2], np.float32)}
    assert not _traces(model, feeds)
    report = partition(GraphView.from_onnx(model), device="cuda")
    assert "depends on the value of input 2 'doubled', computed on the device by node 'Mul(doubled)' (Mul)" in \
        _rejected(report).get("Resize", ""), report.format()
    assert "Mul" not in _rejected(report)


def test_a_float_input_longer_than_the_host_reads_is_left_to_other_eps():
    # a 65-element roi (which the half_pixel mode ignores): the host reads at most
    # MAX_READ_ELEMENTS elements of a value handed in, so the shape rule cannot have it
    model = make_model([h.make_node("Resize", ["x", "roi", "scales"], ["y"], mode="nearest")],
                       [tensor("x", T.FLOAT, [1, 1, 2, 2]), tensor("roi", T.FLOAT, [65])], [tensor("y", T.FLOAT, None)],
                       [h.make_tensor("scales", T.FLOAT, [4], [1, 1, 2, 2])])
    feeds = {"x": np.ones((1, 1, 2, 2), np.float32), "roi": np.zeros(65, np.float32)}
    assert not _traces(model, feeds)
    report = partition(GraphView.from_onnx(model), device="cuda")
    assert "input 1 'roi', a float32 tensor of 65 elements, more than the host reads (64)" in \
        _rejected(report).get("Resize", ""), report.format()


def if_model(cond_from: str):
    """y = If(cond, x + 1, x - 1): cond a bool input, or ReduceMax(x) > 0 (device data)."""
    def branch(name, op):
        node = h.make_node(op, ["x", "one"], [f"{name}_y"])
        return h.make_graph([node], name, [], [tensor(f"{name}_y", T.FLOAT, [3])])

    nodes = [h.make_node("If", ["cond"], ["y"], then_branch=branch("then", "Add"), else_branch=branch("else", "Sub"))]
    inputs = [tensor("x", T.FLOAT, [3])]
    if cond_from == "input":
        inputs.append(tensor("cond", T.BOOL, []))
    else:
        nodes[:0] = [h.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
                     h.make_node("Greater", ["m", "zero"], ["cond"])]
    return make_model(nodes, inputs, [tensor("y", T.FLOAT, [3])],
                      [h.make_tensor("one", T.FLOAT, [], [1.0]), h.make_tensor("zero", T.FLOAT, [], [0.0])])


def test_an_if_on_a_bool_input_is_claimed():
    model = if_model("input")
    assert _traces(model, {"x": np.ones(3, np.float32), "cond": np.array(True)})
    report = partition(GraphView.from_onnx(model), device="cuda")
    assert not report.rejections, report.format()


def test_an_if_on_a_condition_from_data_is_left_to_other_eps():
    model = if_model("data")
    assert not _traces(model, {"x": np.ones(3, np.float32)})
    report = partition(GraphView.from_onnx(model), device="cuda")
    reason = _rejected(report).get("If", "")
    assert "the branch it takes depends on the value of input 0 'cond', computed on the device by node " \
           "'Greater(cond)'" in reason, report.format()


def test_resize_with_scales_cast_from_a_shape_stays_claimed():
    # the tracer follows Cast(Shape(x)) to float values, so the extents are known before the launches
    model = resize_model("shape")
    assert _traces(model, {"x": np.ones((1, 1, 2, 2), np.float32)})
    report = partition(GraphView.from_onnx(model), device="cuda")
    assert not report.rejections, report.format()


def select_model(op: str, from_data: bool):
    """NonZero(m) or Compress(x, m, axis=0) then Relu: m a bool input, or x > 0 (device data)."""
    inputs = [tensor("x", T.FLOAT, [6])]
    nodes = []
    if from_data:
        nodes.append(h.make_node("Greater", ["x", "zero"], ["m"]))
    else:
        inputs.append(tensor("m", T.BOOL, [6]))
    if op == "NonZero":
        nodes += [h.make_node("NonZero", ["m"], ["idx"]), h.make_node("Cast", ["idx"], ["y"], to=T.FLOAT)]
    else:
        nodes += [h.make_node("Compress", ["x", "m"], ["c"], axis=0), h.make_node("Relu", ["c"], ["y"])]
    return make_model(nodes, inputs, [tensor("y", T.FLOAT, None)], [h.make_tensor("zero", T.FLOAT, [], [0.0])],
                      opset=13)


@pytest.mark.parametrize("op", ["NonZero", "Compress"])
def test_a_selection_from_a_bool_input_is_claimed(op):
    """The count is read from the input handed in (pinned): the GPU kernels select on the device."""
    model = select_model(op, from_data=False)
    feeds = {"x": np.arange(6, dtype=np.float32) - 2, "m": np.array([1, 0, 1, 1, 0, 1], bool)}
    assert _traces(model, feeds)
    report = partition(GraphView.from_onnx(model), device="cuda")
    assert not report.rejections, report.format()


@pytest.mark.parametrize("op", ["NonZero", "Compress"])
def test_a_selection_from_device_data_is_left_to_other_eps(op):
    model = select_model(op, from_data=True)
    assert not _traces(model, {"x": np.arange(6, dtype=np.float32) - 2})
    report = partition(GraphView.from_onnx(model), device="cuda")
    position = "input 0 'm'" if op == "NonZero" else "input 1 'm'"
    assert f"depends on the value of {position}, computed on the device by node 'Greater(m)'" in \
        _rejected(report).get(op, ""), report.format()


def test_nonzero_of_a_scalar_input_is_claimed():
    """ONNX Runtime reads a scalar as a one-element vector ([1, count] coordinates); so does the GPU
    kernel."""
    model = make_model([h.make_node("NonZero", ["x"], ["y"])], [tensor("x", T.FLOAT, [])],
                       [tensor("y", T.INT64, None)], opset=13)
    assert _traces(model, {"x": np.array(1.5, np.float32)})
    assert not partition(GraphView.from_onnx(model), device="cuda").rejections


@pytest.mark.parametrize("n", [1024, 1025])
def test_a_selection_from_an_initializer_is_claimed_where_the_plan_holds_it_as_a_constant(n):
    """An initializer of at most MAX_DENSE_ELEMENTS elements is a constant of the plan, which the
    shape tracer reads; a larger one is a weight in device memory, which it does not: the node that
    would read it is left to other EPs, with the reason."""
    c = h.make_tensor("c", T.FLOAT, [n], (np.arange(n) % 3).astype(np.float32))
    model = make_model([h.make_node("Add", ["c", "x"], ["s"]), h.make_node("NonZero", ["c"], ["y"])],
                       [tensor("x", T.FLOAT, [n])], [tensor("y", T.INT64, None), tensor("s", T.FLOAT, None)], [c],
                       opset=13)
    g = GraphView.from_onnx(model)
    plan = compile_subgraph(g, "sub", list(g.inputs), list(g.outputs), held=list(g.constants))
    weights = {vid: g.constants[v.name] for vid, v in plan.values.items() if v.kind == "weight"}
    constants = {vid: np.asarray(plan.constants[v.constant], dtype=v.dtype)
                 for vid, v in plan.values.items() if v.kind == "constant"}
    try:
        trace_shapes(plan, [np.zeros(n, np.float32)], {**constants, **weights})
        traces = True
    except DataDependent:
        traces = False
    report = partition(g, device="cuda")
    assert traces == (n <= 1024) == (not report.rejections), report.format()
    if n > 1024:
        assert _rejected(report)["NonZero"].startswith(
            "its output's shape depends on the value of input 0 'c', a float32 initializer of 1025 elements, which "
            "the plan holds in device memory (the host reads initializers of at most 1024 elements)")
