"""ONNX Scan (opset 9+), lowered by the frontend to a hip.loop: end to end through hipep (CPU
fallback disabled) against ORT's CPU EP, the lowered IR, and the forms the claim rejects."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as P
from onnx import helper as h

import hipep
from hipep import FallbackError
from hipep.frontend import import_graph
from hipep.graph import GraphView
from hipep.ir.dialect import LoopOp, op_class_for
from hipep.ops.registry import check_node

from helpers import cpu_session, make_model, tensor

F = P.FLOAT
RNG = np.random.default_rng(0)


def _cumsum_body(width=None):
    return h.make_graph(
        [h.make_node("Add", ["s", "x"], ["s2"], name="acc"), h.make_node("Identity", ["s2"], ["y"], name="emit")],
        "cumsum", [tensor("s", F, [width]), tensor("x", F, [width])],
        [tensor("s2", F, [width]), tensor("y", F, [width])])


def cumsum_model(opset=16, **attrs):
    node = h.make_node("Scan", ["init", "xs"], ["fin", "ys"], body=_cumsum_body(2), num_scan_inputs=1,
                       name="scan0", **attrs)
    return make_model([node], [tensor("init", F, [2]), tensor("xs", F, ["n", 2])],
                      [tensor("fin", F, [2]), tensor("ys", F, None)], opset=opset)


def two_input_model(opset=16, **attrs):
    """State s [3]; scan inputs a [n, 3] (axis 0) and b [3, n] (axis 1); outputs the running
    product-sum state, s*a per step, and a-b per step."""
    body = h.make_graph(
        [h.make_node("Mul", ["s", "a"], ["sa"], name="mul"),
         h.make_node("Add", ["sa", "b"], ["s2"], name="add"),
         h.make_node("Sub", ["a", "b"], ["d"], name="sub")],
        "two", [tensor("s", F, [3]), tensor("a", F, [3]), tensor("b", F, [3])],
        [tensor("s2", F, [3]), tensor("sa", F, [3]), tensor("d", F, [3])])
    node = h.make_node("Scan", ["init", "A", "B"], ["fin", "SA", "D"], body=body, num_scan_inputs=2,
                       scan_input_axes=[0, 1], name="scan2", **attrs)
    return make_model([node], [tensor("init", F, [3]), tensor("A", F, ["n", 3]), tensor("B", F, [3, "n"])],
                      [tensor("fin", F, [3]), tensor("SA", F, None), tensor("D", F, None)], opset=opset)


def _feeds_two(n=4):
    return {"init": RNG.standard_normal(3).astype(np.float32),
            "A": RNG.standard_normal((n, 3)).astype(np.float32),
            "B": RNG.standard_normal((3, n)).astype(np.float32)}


def _check(model, feeds, **options):
    want = cpu_session(model).run(None, feeds)
    got = hipep.InferenceSession(model, device="cpu", **options).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset", [9, 11, 16, 19, 21])
def test_cumsum(opset):
    feeds = {"init": np.ones(2, np.float32), "xs": np.arange(10, dtype=np.float32).reshape(5, 2)}
    _check(cumsum_model(opset), feeds)


def test_cumsum_one_step_and_lengths_change_between_runs():
    m = cumsum_model()
    want, s = cpu_session(m), hipep.InferenceSession(m, device="cpu")
    for n in (1, 7, 3):
        feeds = {"init": np.zeros(2, np.float32), "xs": RNG.standard_normal((n, 2)).astype(np.float32)}
        for g, w in zip(s.run(None, feeds), want.run(None, feeds)):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_two_scan_inputs_with_different_axes():
    _check(two_input_model(), _feeds_two())


@pytest.mark.parametrize("in_dirs,out_dirs", [([1, 0], [0, 0]), ([0, 1], [1, 0]), ([1, 1], [1, 1])])
def test_reverse_directions(in_dirs, out_dirs):
    _check(two_input_model(scan_input_directions=in_dirs, scan_output_directions=out_dirs), _feeds_two(5))


@pytest.mark.parametrize("axes", [[1, 0], [-1, 1], [0, -2]])
def test_scan_output_axes(axes):
    _check(two_input_model(scan_output_axes=axes), _feeds_two(4))


def test_output_axis_with_reverse_and_rank2_rows():
    """Scan input [2, n, 3] on axis 1 (rows [2, 3]); output axes 2 and reversed."""
    body = h.make_graph([h.make_node("Relu", ["x"], ["y"], name="relu"),
                         h.make_node("ReduceSum", ["x"], ["r"], name="sum", keepdims=0)],
                        "b", [tensor("x", F, [2, 3])], [tensor("y", F, [2, 3]), tensor("r", F, [])])
    node = h.make_node("Scan", ["X"], ["Y", "R"], body=body, num_scan_inputs=1, scan_input_axes=[1],
                       scan_output_axes=[2, 0], scan_output_directions=[1, 1], name="scan_r2")
    m = make_model([node], [tensor("X", F, [2, "n", 3])], [tensor("Y", F, None), tensor("R", F, None)], opset=16)
    _check(m, {"X": RNG.standard_normal((2, 5, 3)).astype(np.float32)})


def larger_model():
    """MatMul -> Scan (cumulative sum over rows, outer-scope bias read in the body) -> Mul."""
    body = h.make_graph(
        [h.make_node("Add", ["s", "x"], ["t"], name="acc"),
         h.make_node("Add", ["t", "bias"], ["s2"], name="bias_add"),
         h.make_node("Tanh", ["s2"], ["y"], name="squash")],
        "body", [tensor("s", F, [4]), tensor("x", F, [4])], [tensor("s2", F, [4]), tensor("y", F, [4])])
    nodes = [h.make_node("MatMul", ["X", "W"], ["XW"], name="proj"),
             h.make_node("Scan", ["h0", "XW"], ["hN", "H"], body=body, num_scan_inputs=1, name="rnn"),
             h.make_node("Mul", ["H", "H"], ["out"], name="square"),
             h.make_node("Relu", ["hN"], ["last"], name="relu")]
    inits = [h.make_tensor("W", F, [3, 4], RNG.standard_normal(12).astype(np.float32)),
             h.make_tensor("bias", F, [4], RNG.standard_normal(4).astype(np.float32))]
    return make_model(nodes, [tensor("X", F, ["n", 3]), tensor("h0", F, [4])],
                      [tensor("out", F, ["n", 4]), tensor("last", F, [4])], inits, opset=17)


def test_scan_inside_a_larger_graph():
    feeds = {"X": RNG.standard_normal((6, 3)).astype(np.float32), "h0": np.zeros(4, np.float32)}
    _check(larger_model(), feeds)


@pytest.mark.parametrize("build,feeds", [
    (larger_model, lambda: {"X": RNG.standard_normal((6, 3)).astype(np.float32), "h0": np.ones(4, np.float32)}),
    (lambda: two_input_model(scan_input_directions=[1, 0], scan_output_axes=[1, 0],
                             scan_output_directions=[0, 1]), _feeds_two)])
def test_random_schedule(build, feeds):
    _check(build(), feeds(), cpu_schedule="random", seed="3")


def test_frontend_lowers_scan_to_hip_loop():
    m = two_input_model(scan_input_directions=[1, 0], scan_output_axes=[1, 0], scan_output_directions=[0, 1])
    g = GraphView.from_onnx(m)
    module = import_graph(g, [i.name for i in m.graph.input], [o.name for o in m.graph.output], "f", verify=True)
    ops = list(module.walk())
    assert sum(isinstance(o, LoopOp) for o in ops) == 1
    names = {o.name for o in ops}
    assert "hip.scan" not in names
    assert {op_class_for("", t).name for t in ("Shape", "Gather", "Sub", "Slice", "Transpose")} <= names


def test_opset8_scan_is_not_claimed():
    body = h.make_graph([h.make_node("Add", ["s", "x"], ["s2"]), h.make_node("Identity", ["s2"], ["y"])], "b",
                        [tensor("s", F, [2]), tensor("x", F, [2])], [tensor("s2", F, [2]), tensor("y", F, [2])])
    node = h.make_node("Scan", ["", "init", "xs"], ["fin", "ys"], body=body, num_scan_inputs=1, name="scan8")
    m = make_model([node], [tensor("init", F, [1, 2]), tensor("xs", F, [1, 5, 2])],
                   [tensor("fin", F, [1, 2]), tensor("ys", F, [1, 5, 2])], opset=8)
    with pytest.raises(FallbackError, match="opset version 8"):
        hipep.InferenceSession(m, device="cpu")


def test_unclaimable_body_rejects_the_scan():
    body = h.make_graph([h.make_node("GlobalLpPool", ["x"], ["d"], name="pool"),
                         h.make_node("Add", ["s", "d"], ["s2"])], "b", [tensor("s", F, [1, 2, 1]), tensor("x", F, [1, 2, 2])],
                        [tensor("s2", F, [1, 2, 1]), tensor("d", F, [1, 2, 1])])
    node = h.make_node("Scan", ["init", "xs"], ["fin", "ds"], body=body, num_scan_inputs=1, name="scan_pool")
    m = make_model([node], [tensor("init", F, [1, 2, 1]), tensor("xs", F, [3, 1, 2, 2])],
                   [tensor("fin", F, [1, 2, 1]), tensor("ds", F, [3, 1, 2, 1])], opset=16)
    g = GraphView.from_onnx(m)
    reason = check_node(g.nodes[0], g)
    assert reason is not None and "GlobalLpPool" in reason


def test_inconsistent_lengths_and_empty_scan_fail_like_ort():
    """ORT's Scan fails on scan inputs of different lengths and on an empty scan; so does hipep
    (a run-time shape error) rather than truncating or returning a wrongly shaped stack."""
    m = two_input_model()
    feeds = _feeds_two(4)
    feeds["B"] = RNG.standard_normal((3, 5)).astype(np.float32)
    with pytest.raises(Exception):
        cpu_session(m).run(None, feeds)
    with pytest.raises(Exception, match="length_equals_scan_input_0_length"):
        hipep.InferenceSession(m, device="cpu").run(None, feeds)
    m = cumsum_model()
    feeds = {"init": np.ones(2, np.float32), "xs": np.zeros((0, 2), np.float32)}
    with pytest.raises(Exception):
        cpu_session(m).run(None, feeds)
    with pytest.raises(Exception, match="nonempty_scan"):
        hipep.InferenceSession(m, device="cpu").run(None, feeds)
