"""Small float and bool inputs a shape rule reads (Resize's scales and roi, Range's bounds, OneHot's
depth, an If's condition handed in) are pinned by the shape program (hipep.runtime.shapes): the
trace keeps the bytes it used, each run compares its input's bytes with them and traces anew where
they differ, so such plans replay as GPU devices run them. Each model here is compiled as on a GPU
and run by the executor on `BindCheckDevice` (hipep.tools.cuda_dry_run): the CPU device, binding
every launch's GPU program to the run's arguments as the cuda device would, inputs in device
memory, so a binding reading a value finds this run's (the plan's host-visible copy) or fails.
Results are compared with ORT's CPU EP. Runs without a GPU; tests/gpu/test_gpu_pinned_values.py
runs the same models on one."""
from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper as h

import hipep
from hipep.compiler import compile_subgraph, hold_body_weights
from hipep.graph import GraphView
from hipep.partition import partition
from hipep.runtime.executor import Executor
from hipep.runtime.shapes import ShapeProgram
from hipep.tools.cuda_dry_run import BindCheckDevice
from hipep.weights import WeightStore

from helpers import make_model, tensor


def resize_model(mode="nearest", crop=False):
    """Resize of x [1, 1, 4, 4] by run-time scales (and, with crop, a run-time roi)."""
    attrs = {"mode": mode}
    if crop:
        attrs.update(coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-1.0)
    node = h.make_node("Resize", ["x", "roi" if crop else "", "scales"], ["y"], **attrs)
    inputs = [tensor("x", T.FLOAT, [1, 1, 4, 4])] + ([tensor("roi", T.FLOAT, [8])] if crop else []) + \
        [tensor("scales", T.FLOAT, [4])]
    return make_model([node], inputs, [tensor("y", T.FLOAT, None)], opset=19)


def range_model():
    return make_model([h.make_node("Range", ["start", "limit", "delta"], ["y"])],
                      [tensor(n, T.FLOAT, []) for n in ("start", "limit", "delta")], [tensor("y", T.FLOAT, None)],
                      opset=11)


def one_hot_model():
    return make_model([h.make_node("OneHot", ["indices", "depth", "values"], ["y"], axis=-1)],
                      [tensor("indices", T.INT64, [3]), tensor("depth", T.FLOAT, []), tensor("values", T.FLOAT, [2])],
                      [tensor("y", T.FLOAT, None)], opset=11)


def if_model():
    def branch(name, op):
        return h.make_graph([h.make_node(op, ["x", "one"], [f"{name}_y"])], name, [],
                            [tensor(f"{name}_y", T.FLOAT, [3])])

    node = h.make_node("If", ["cond"], ["y"], then_branch=branch("then", "Add"), else_branch=branch("else", "Sub"))
    return make_model([node], [tensor("x", T.FLOAT, [3]), tensor("cond", T.BOOL, [])], [tensor("y", T.FLOAT, [3])],
                      [h.make_tensor("one", T.FLOAT, [], [1.0])])


def moved_model():
    """A small float input only moved (Transpose), never read by a rule: not pinned."""
    return make_model([h.make_node("Transpose", ["x"], ["t"], perm=[1, 0]), h.make_node("Neg", ["t"], ["y"])],
                      [tensor("x", T.FLOAT, [2, 3])], [tensor("y", T.FLOAT, [3, 2])])


class Runner:
    """The model compiled whole, as the cuda device claims it, run by one executor."""

    def __init__(self, model):
        graph = GraphView.from_onnx(model)
        report = partition(graph, device="cuda")
        assert report.all_claimed and len(report.clusters) == 1, report.format()
        body, copied = hold_body_weights(graph)
        held = sorted(set(graph.constants) | body)
        self.names = list(graph.inputs)
        self.plan = compile_subgraph(graph, "pinned", self.names, list(graph.outputs), held=held)
        weights = WeightStore.for_plan(self.plan, graph, copied).arrays
        self.device = BindCheckDevice(list(weights.values()))
        self.executor = Executor(self.plan, self.device, weights=weights)
        self.session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        self.fed: list = []

    def run(self, **feeds):
        feeds = {k: np.asarray(v) for k, v in feeds.items()}
        arrays = [np.array(feeds[n], order="C") for n in self.names]  # (0-d stays 0-d)
        # ORT's tensors: device memory on a GPU (known by id: kept alive, so that no later
        # allocation takes an id the device holds)
        self.fed.append(arrays)
        self.device.hand_in(arrays)
        before = hipep.stats()
        (got,) = self.executor.run(arrays)
        after = hipep.stats()
        (want,) = self.session.run(None, feeds)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)  # interpolation: within f32 rounding
        return {k: after.get(k, 0) - before.get(k, 0) for k in ("specializations", "specialization_hits",
                                                                 "host_reads")}

    def programs(self) -> list[ShapeProgram]:
        return [p.shape for family in self.executor._programs.values() for p in family]


def _x():
    return np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)


def _scales(*s):
    return np.array(s, np.float32)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_retraces_on_new_scales_and_replays_on_the_same(mode):
    r = Runner(resize_model(mode))
    a, b = _scales(1, 1, 2, 2), _scales(1, 1, 0.5, 1.5)
    assert r.run(x=_x(), scales=a) == {"specializations": 1, "specialization_hits": 0, "host_reads": 4}
    assert r.run(x=_x() + 1, scales=a.copy()) == {"specializations": 0, "specialization_hits": 1, "host_reads": 4}
    assert r.run(x=_x(), scales=b)["specializations"] == 1  # traced anew: other extents
    assert len(r.programs()) == 2
    assert r.run(x=_x(), scales=a)["specialization_hits"] == 1  # the first program still holds
    assert len(r.programs()) == 2
    (pins,) = {tuple(p.pins) for p in r.programs()}  # input 1 (scales) pinned in each
    assert pins == (1,)


def test_the_same_extents_from_other_scales_trace_anew():
    # 2.0 and 2.1 give the same extents (floor(4 * s) = 8) but other coordinates: the binding
    # must see the new values, so the program does not hold for them
    r = Runner(resize_model("linear"))
    r.run(x=_x(), scales=_scales(1, 1, 2, 2))
    assert r.run(x=_x(), scales=_scales(1, 1, 2.1, 2.1))["specializations"] == 1


def test_a_nan_in_a_pinned_value_does_not_trace_every_run():
    # tf_crop_and_resize reads roi at launch; a NaN there is pinned as its bits, equal to itself
    r = Runner(resize_model("nearest", crop=True))
    roi = np.array([0, 0, 0.25, math.nan, 1, 1, 0.75, 1], np.float32)
    scales = _scales(1, 1, 1, 1)
    assert r.run(x=_x(), roi=roi, scales=scales)["specializations"] == 1
    assert r.run(x=_x(), roi=roi.copy(), scales=scales) == {"specializations": 0, "specialization_hits": 1,
                                                            "host_reads": 12}
    assert len(r.programs()) == 1
    # another NaN payload is other bits: traced anew, then held as well
    other = roi.copy()
    other.view(np.uint32)[3] |= 1
    assert r.run(x=_x(), roi=other, scales=scales)["specializations"] == 1
    assert r.run(x=_x(), roi=other, scales=scales)["specialization_hits"] == 1


def test_tf_crop_and_resize_with_a_run_time_roi():
    r = Runner(resize_model("linear", crop=True))
    r.run(x=_x(), roi=np.array([0, 0, 0.2, 0.1, 1, 1, 0.8, 0.9], np.float32), scales=_scales(1, 1, 1.5, 1.5))
    r.run(x=_x(), roi=np.array([0, 0, -0.5, 0, 1, 1, 1.5, 1], np.float32), scales=_scales(1, 1, 1.5, 1.5))
    assert len(r.programs()) == 2


def test_range_over_float_bounds():
    r = Runner(range_model())
    f = np.float32
    assert r.run(start=f(1), limit=f(5), delta=f(0.5))["specializations"] == 1
    assert r.run(start=f(1), limit=f(5), delta=f(0.5))["specialization_hits"] == 1
    assert r.run(start=f(1), limit=f(5), delta=f(0.75))["specializations"] == 1


def test_one_hot_with_a_float_depth():
    r = Runner(one_hot_model())
    idx, values = np.array([0, 2, -1], np.int64), np.array([0, 3], np.float32)
    r.run(indices=idx, depth=np.float32(4), values=values)
    assert r.run(indices=idx[::-1].copy(), depth=np.float32(4), values=values)["specialization_hits"] == 1
    assert r.run(indices=idx, depth=np.float32(6), values=values)["specializations"] == 1


def test_if_on_a_bool_input_takes_the_branch_its_value_says():
    r = Runner(if_model())
    x = np.array([1, 2, 3], np.float32)
    assert r.run(x=x, cond=np.array(True)) == {"specializations": 1, "specialization_hits": 0, "host_reads": 1}
    assert r.run(x=x, cond=np.array(False))["specializations"] == 1
    assert r.run(x=x, cond=np.array(True))["specialization_hits"] == 1
    assert sorted(p.branches[next(iter(p.branches))] for p in r.programs()) == [False, True]


def test_a_value_only_moved_is_not_pinned():
    r = Runner(moved_model())
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert r.run(x=x)["specializations"] == 1
    assert r.run(x=x * 2) == {"specializations": 0, "specialization_hits": 1, "host_reads": 0}
    (program,) = r.programs()
    assert program.pins == {}


def test_pins_survive_the_plan_data():
    r = Runner(resize_model("nearest", crop=True))
    roi = np.array([0, 0, 0.25, math.nan, 1, 1, 0.75, 1], np.float32)
    r.run(x=_x(), roi=roi, scales=_scales(1, 1, 2, 2))
    (program,) = r.programs()
    again = ShapeProgram.from_data(program.to_data())
    assert again.pins == program.pins == {1: roi.tobytes(), 2: _scales(1, 1, 2, 2).tobytes()}
