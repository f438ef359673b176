"""hip-fuse-pointwise on compiled subgraphs: which launches fuse, which values stay operands, and
that the plans of fusion=on and fusion=off compute the same bits (tests/ort/test_fusion.py does
the same through ORT sessions, on random DAGs)."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto as T, helper as h, numpy_helper

import hipep
from hipep.compiler import compile_subgraph
from hipep.graph import GraphView
from hipep.plan import HostStep, Launch, Loop, walk
from hipep.runtime.cpu import CpuDevice
from hipep.runtime.executor import Executor

from helpers import gqa_preamble_model, make_model, rotate_half_loop_model, tensor

FUSED = "hipep::FusedElementwise"


def compile_model(model, **options):
    g = GraphView.from_onnx(model)
    opts = hipep.ProviderOptions.from_strings(options)
    return compile_subgraph(g, "sub", list(g.inputs) + sorted(g.weights), list(g.outputs), opts)


def launches(plan):
    return [s for s in walk(plan.steps) if isinstance(s, Launch)]


def run(plan, feeds, schedule="inline", seed=0):
    names = [plan.values[v].name for v in plan.inputs]
    return Executor(plan, CpuDevice(schedule, seed)).run([feeds[n] for n in names])


def same_bits(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(np.isnan(got), np.isnan(want)) if got.dtype.kind == "f" else True
    assert np.where(np.isnan(got), 0, got).tobytes() == np.where(np.isnan(want), 0, want).tobytes()


def both(model, feeds, **options):
    """The fused plan, after checking that its results equal the unfused plan's."""
    on, off = compile_model(model, **options), compile_model(model, fusion="off")
    assert not any(s.op == FUSED for s in launches(off))
    for got, want in zip(run(on, feeds), run(off, feeds)):
        same_bits(got, want)
    return on


def chain_model(constant):
    nodes = [h.make_node("Add", ["x", "c"], ["a"], name="add"), h.make_node("Relu", ["a"], ["r"], name="relu"),
             h.make_node("Mul", ["r", "x"], ["y"], name="mul")]
    return make_model(nodes, [tensor("x", T.FLOAT, [3])], [tensor("y", T.FLOAT, None)],
                      [numpy_helper.from_array(constant, "c")])


def test_one_element_constants_fold_unless_they_raise_the_rank():
    x = {"x": np.array([-1.0, 0.5, 2.0], np.float32)}
    plan = both(chain_model(np.array(-0.25, np.float32)), x)
    (fused,) = launches(plan)
    assert fused.op == FUSED and len(fused.inputs) == 1
    assert ["const", "float32", "-0.25"] in fused.attributes["nodes"]
    assert [v.name for v in plan.values.values() if v.kind == "buffer"] == ["y"]  # a and r have no buffers
    # A [1, 1] constant makes the output [1, 3]: it stays an operand of the launch, which broadcasts it.
    plan = both(chain_model(np.array([[-0.25]], np.float32)), x)
    (fused,) = launches(plan)
    assert len(fused.inputs) == 2 and fused.attributes["broadcast"] == [0, 1]
    assert run(plan, x)[0].shape == (1, 3)
    # Folding off: every constant stays an operand.
    plan = both(chain_model(np.array(-0.25, np.float32)), x, pass_options="hip-fuse-pointwise{fold_constants=false}")
    assert len(launches(plan)[0].inputs) == 2


def test_clip_bounds_are_scalars_whatever_their_rank():
    nodes = [h.make_node("Clip", ["x", "lo", "hi"], ["c"], name="clip"), h.make_node("Neg", ["c"], ["y"], name="neg")]
    model = make_model(nodes, [tensor("x", T.FLOAT, [4]), tensor("hi", T.FLOAT, [1, 1])], [tensor("y", T.FLOAT, None)],
                       [numpy_helper.from_array(np.array([[0.0]], np.float32), "lo")])
    plan = both(model, {"x": np.array([-1, 0.5, 2, np.nan], np.float32), "hi": np.array([[1.0]], np.float32)})
    (fused,) = launches(plan)
    assert fused.attributes["broadcast"] == [0]  # hi is read as a scalar, the output stays [4]
    assert any(n[0] == "scalar" for n in fused.attributes["nodes"])


def test_a_run_time_exponent_fuses_and_decides_the_shortcut_per_element():
    nodes = [h.make_node("Pow", ["x", "e"], ["p"], name="pow"), h.make_node("Abs", ["p"], ["a"], name="abs"),
             h.make_node("Neg", ["a"], ["y"], name="neg")]
    model = make_model(nodes, [tensor("x", T.FLOAT, [4]), tensor("e", T.FLOAT, [])], [tensor("y", T.FLOAT, None)])
    for e in (2.0, 3.0, 0.5):  # ORT's x*x and x*x*x shortcuts for a one-element 2 or 3, tested in the kernel
        plan = both(model, {"x": np.array([-1.5, 0.5, 2, 3], np.float32), "e": np.array(e, np.float32)})
        assert [s.op for s in launches(plan)] == [FUSED]


def test_pointwise_launches_fuse_inside_loop_bodies(rng):
    model = rotate_half_loop_model()
    plan = both(model, {"x": rng.standard_normal((1, 3, 12, 32)).astype(np.float32)})
    (loop,) = [s for s in plan.steps if isinstance(s, Loop)]
    fused = [s for s in walk(loop.body) if isinstance(s, Launch) and s.op == FUSED]
    assert [s.node for s in fused] == ["fused[times_cos, times_sin, rope]"]


def test_host_steps_never_fuse_and_the_preamble_stays_right(rng):
    model = gqa_preamble_model()
    off = compile_model(model, fusion="off")
    on = compile_model(model)
    assert [s.op for s in walk(on.steps) if isinstance(s, HostStep)] == \
        [s.op for s in walk(off.steps) if isinstance(s, HostStep)]
    assert any(s.op == FUSED for s in launches(on)) and len(launches(on)) < len(launches(off))
    for seed in range(20):
        total = int(rng.integers(2, 9))
        lengths = rng.integers(1, total + 1, size=2)
        feeds = {"attention_mask": (np.arange(total)[None, :] < lengths[:, None]).astype(np.int64)}
        for got, want in zip(run(on, feeds, "random", seed), run(off, feeds, "random", seed)):
            same_bits(got, want)
