"""The simple lowering (GraphView → v2 plan): memory spaces, syncs, fresh outputs, control flow.

Each plan is run by the executor under every CPU schedule and compared with ORT's CPU EP; the
syncs the compiler places are shown to be needed (without them `deferred` goes wrong).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper

import hipep
from hipep.compiler import compile_subgraph
from hipep.errors import HipepError, ModelError
from hipep.graph import GraphView
from hipep.passes import DEFAULT_PIPELINE
from hipep.plan import DEVICE, HOST_VISIBLE, If, Launch, Loop, Sync, walk
from hipep.runtime.cpu import CpuDevice
from hipep.runtime.executor import Executor

from helpers import if_model, make_model, tensor

SCHEDULES = ("inline", "deferred", "random")


def compile_model(model, name="sub"):
    g = GraphView.from_onnx(model)
    return compile_subgraph(g, name, list(g.inputs) + sorted(g.weights), list(g.outputs))


def cpu_run(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def check(plan, model, feeds_list, schedules=SCHEDULES, seeds=(0, 1, 2)):
    for schedule in schedules:
        for seed in seeds if schedule == "random" else (0,):
            ex = Executor(plan, CpuDevice(schedule, seed))
            for feeds in feeds_list:
                got = ex.run([feeds[name] for name in plan_input_names(plan)])
                for g, w in zip(got, cpu_run(model, feeds)):
                    assert g.dtype == w.dtype and g.shape == w.shape, (schedule, seed)
                    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def plan_input_names(plan):
    return [plan.values[v].name for v in plan.inputs]


def dynamic_model():
    """Shapes and bounds computed on the device, read by the host: a Reshape target built from
    Shape/Gather/Concat, and a Slice whose end is a data-dependent count."""
    n = h.make_node
    nodes = [
        n("Shape", ["x"], ["sh"], name="shape"),
        n("Gather", ["sh", "i0"], ["b"], name="batch", axis=0),
        n("Gather", ["sh", "i1"], ["s"], name="seq", axis=0),
        n("Unsqueeze", ["b", "ax0"], ["b1"], name="b1"),
        n("Unsqueeze", ["s", "ax0"], ["s1"], name="s1"),
        n("Concat", ["b1", "s1", "heads"], ["target"], name="target", axis=0),
        n("Add", ["x", "x"], ["x2"], name="double"),
        n("Reshape", ["x2", "target"], ["r"], name="split_heads"),
        n("Greater", ["x", "zero"], ["pos"], name="positive"),
        n("Cast", ["pos"], ["posi"], name="as_int", to=T.INT64),
        n("ReduceSum", ["posi"], ["count"], name="count", keepdims=1),
        n("Reshape", ["count", "one_shape"], ["end"], name="end"),
        n("Reshape", ["x2", "flat_shape"], ["flat"], name="flatten"),
        n("Slice", ["flat", "start", "end"], ["head"], name="take_count"),
    ]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "i0"),
             numpy_helper.from_array(np.array(1, np.int64), "i1"),
             numpy_helper.from_array(np.array([0], np.int64), "ax0"),
             numpy_helper.from_array(np.array([4, 8], np.int64), "heads"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array([1], np.int64), "one_shape"),
             numpy_helper.from_array(np.array([-1], np.int64), "flat_shape"),
             numpy_helper.from_array(np.array([0], np.int64), "start")]
    return make_model(nodes, [tensor("x", T.FLOAT, ["batch", "seq", 32])],
                      [tensor("r", T.FLOAT, ["batch", "seq", 4, 8]), tensor("head", T.FLOAT, ["k"])], inits, opset=17)


def dynamic_feeds(rng):
    return [{"x": rng.standard_normal((b, s, 32)).astype(np.float32)} for b, s in [(1, 1), (2, 5), (3, 2), (2, 5)]]


def test_host_read_values_are_host_visible_and_synced():
    plan = compile_model(dynamic_model())
    by_name = {v.name: v for v in plan.values.values()}
    # the host builds the Reshape target itself (shape arithmetic) and reads the Slice end,
    # which a device ReduceSum wrote into 'count' ('end' is a view of it): both host-visible
    assert by_name["target"].space == HOST_VISIBLE and by_name["end"].space == HOST_VISIBLE
    assert by_name["count"].space == HOST_VISIBLE and by_name["x2"].space == DEVICE
    assert by_name["x"].kind == "input"
    steps = list(plan.steps)
    assert isinstance(steps[-1], Sync)
    # exactly one sync inside: right before the host reads the device-written 'end'
    pos = next(i for i, s in enumerate(steps) if isinstance(s, Launch) and s.node == "take_count")
    assert isinstance(steps[pos - 1], Sync) and "'count'" in steps[pos - 1].reason, plan.format()
    assert sum(isinstance(s, Sync) for s in steps) == 2, plan.format()
    assert not any(isinstance(s, Sync) for s in steps[:steps.index(steps[pos - 1])]), plan.format()


def test_dynamic_model_under_every_schedule(rng):
    check(compile_model(dynamic_model()), dynamic_model(), dynamic_feeds(rng))


def test_the_syncs_are_needed(rng):
    plan = compile_model(dynamic_model())
    stripped = dataclasses.replace(plan, steps=tuple(s for s in plan.steps[:-1] if not isinstance(s, Sync))
                                   + (plan.steps[-1],))
    feeds = dynamic_feeds(rng)
    ex = Executor(stripped, CpuDevice("deferred"))
    try:
        ex.run([feeds[1]["x"]])  # warm: slots grown, so no growth point syncs for us
    except HipepError:
        pass
    wrong = 0
    for f in feeds[1:]:
        try:
            got = ex.run([f["x"]])
            want = cpu_run(dynamic_model(), f)
            wrong += any(g.shape != w.shape or not np.allclose(g, w) for g, w in zip(got, want))
        except HipepError:  # a stale shape operand can also make the op invalid
            wrong += 1
    assert wrong


@pytest.mark.parametrize("schedule, seed", [("deferred", "0"), ("random", "3"), ("random", "11")])
def test_ort_sessions_under_deferred_and_random(rng, schedule, seed):
    from hipep.demo import build_attention_block

    for model, feeds in ((dynamic_model(), dynamic_feeds(rng)),
                         (build_attention_block(), [{"x": rng.standard_normal((b, s, 32)).astype(np.float32)}
                                                    for b, s in [(1, 1), (2, 6), (4, 9), (2, 6)]])):
        sess = hipep.InferenceSession(model, cpu_schedule=schedule, seed=seed, device="cpu")
        for f in feeds:
            for g, w in zip(sess.run(None, f), cpu_run(model, f)):
                assert g.shape == w.shape
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_outputs_are_fresh_arrays(rng):
    n = h.make_node
    model = make_model([n("Add", ["x", "x"], ["y"], name="double")],
                       [tensor("x", T.FLOAT, ["n"])],
                       [tensor("y", T.FLOAT, ["n"]), tensor("x", T.FLOAT, ["n"]), tensor("c", T.FLOAT, [2])],
                       [numpy_helper.from_array(np.array([1, 2], np.float32), "c")])
    g = GraphView.from_onnx(model)
    plan = compile_subgraph(g, "sub", ["x"], ["y", "x", "c", "y"])
    x = rng.standard_normal(3).astype(np.float32)
    for schedule in SCHEDULES:
        y, x_out, c, y2 = outs = Executor(plan, CpuDevice(schedule, 1)).run([x])
        np.testing.assert_allclose(y, 2 * x)
        np.testing.assert_array_equal(x_out, x)
        np.testing.assert_array_equal(c, [1, 2])
        np.testing.assert_array_equal(y2, y)
        assert len({id(o) for o in outs}) == 4 and not any(np.shares_memory(o, x) for o in outs)


def test_weights_inputs_and_constants():
    big = np.arange(70000, dtype=np.float32)
    model = make_model([h.make_node("Add", ["x", "w"], ["y"], name="bias"),
                        h.make_node("Mul", ["y", "k"], ["z"], name="scale")],
                       [tensor("x", T.FLOAT, [70000])], [tensor("z", T.FLOAT, [70000])],
                       [numpy_helper.from_array(big, "w"), numpy_helper.from_array(np.array(2, np.float32), "k")])
    g = GraphView.from_onnx(model)
    plan = compile_subgraph(g, "sub", ["x", "w"], ["z"])
    kinds = {plan.values[v].name: (plan.values[v].kind, plan.values[v].index) for v in plan.inputs}
    assert kinds == {"x": ("input", 0), "w": ("weight", 1)}
    assert {v.name: v.kind for v in plan.values.values()}["k"] == "constant" and list(plan.constants) == ["k"]
    assert not any(a.size > 1024 for a in plan.constants.values())  # weights never enter the plan
    x = np.ones(70000, np.float32)
    np.testing.assert_allclose(Executor(plan, CpuDevice("deferred")).run([x, big])[0], 2 * (x + big))


def test_missing_values_are_model_errors():
    model = make_model([h.make_node("Add", ["x", "w"], ["y"], name="bias")],
                       [tensor("x", T.FLOAT, [3]), tensor("w", T.FLOAT, [3])], [tensor("y", T.FLOAT, [3])])
    g = GraphView.from_onnx(model)
    with pytest.raises(ModelError, match="node 'bias' .*reads 'w', which is neither an input of the subgraph nor produced"):
        compile_subgraph(g, "sub", ["x"], ["y"])
    with pytest.raises(ModelError, match="output reads 'nope', which is neither an input"):
        compile_subgraph(g, "sub", ["x", "w"], ["nope"])


def test_dump_ir_writes_the_plan(tmp_path):
    g = GraphView.from_onnx(dynamic_model())
    opts = hipep.ProviderOptions.from_strings({"dump_ir": str(tmp_path)})
    plan = compile_subgraph(g, "fused/0", list(g.inputs), list(g.outputs), opts)
    text = (tmp_path / "fused_0" / "plan.txt").read_text()
    assert text.strip() == plan.format() and "host_visible slot 0" in text
    passes = sorted(p.name for p in (tmp_path / "fused_0").glob("*.mlir"))
    n = len(DEFAULT_PIPELINE)
    assert passes[0] == "00-frontend.mlir" and passes[-1] == f"{n:02d}-hip-emit-plan.mlir" and len(passes) == n + 1


# ---- control flow ------------------------------------------------------------------------------

def loop_model():
    """acc = x; for i < m while sum(acc) < limit: acc = acc * 2 + i; scan: acc's max."""
    body = h.make_graph(
        [h.make_node("Cast", ["i"], ["fi"], name="fi", to=T.FLOAT),
         h.make_node("Mul", ["acc", "two"], ["acc2"], name="double"),
         h.make_node("Add", ["acc2", "fi"], ["acc_out"], name="plus_i"),
         h.make_node("ReduceSum", ["acc_out"], ["total"], name="total", keepdims=0),
         h.make_node("Less", ["total", "limit"], ["cond_out"], name="under_limit"),
         h.make_node("ReduceMax", ["acc_out"], ["peak"], name="peak", keepdims=0)],
        "body",
        [tensor("i", T.INT64, []), tensor("cond_in", T.BOOL, []), tensor("acc", T.FLOAT, ["n"])],
        [tensor("cond_out", T.BOOL, []), tensor("acc_out", T.FLOAT, ["n"]), tensor("peak", T.FLOAT, [])])
    nodes = [h.make_node("Loop", ["m", "go", "x"], ["final", "peaks"], name="the_loop", body=body)]
    return make_model(nodes, [tensor("m", T.INT64, []), tensor("x", T.FLOAT, ["n"])],
                      [tensor("final", T.FLOAT, ["n"]), tensor("peaks", T.FLOAT, [None])],
                      [h.make_tensor("go", T.BOOL, [], [True]), h.make_tensor("two", T.FLOAT, [], [2.0]),
                       h.make_tensor("limit", T.FLOAT, [], [100.0])], opset=17)


def test_if_lowering(rng):
    plan = compile_model(if_model())
    ifs = [s for s in plan.steps if isinstance(s, If)]
    assert len(ifs) == 1 and plan.values[ifs[0].cond].space == HOST_VISIBLE
    assert isinstance(plan.steps[list(plan.steps).index(ifs[0]) - 1], Sync)
    feeds = [{"x": sign * np.abs(rng.standard_normal((n, 9))).astype(np.float32)}
             for sign, n in ((1, 2), (-1, 3), (1, 1))]
    check(plan, if_model(), feeds)


def test_loop_lowering(rng):
    plan = compile_model(loop_model())
    (loop,) = [s for s in plan.steps if isinstance(s, Loop)]
    assert plan.values[loop.body_results[0]].space == HOST_VISIBLE
    assert isinstance(loop.body[-1], Sync)  # the host reads the condition after each iteration
    feeds = [{"m": np.array(m, np.int64), "x": rng.uniform(0.5, 1.5, n).astype(np.float32)}
             for m, n in ((10, 3), (2, 4), (0, 2), (10, 1))]
    check(plan, loop_model(), feeds)
    stripped = dataclasses.replace(plan, steps=tuple(
        dataclasses.replace(s, body=s.body[:-1]) if isinstance(s, Loop) else s for s in plan.steps))
    got = Executor(stripped, CpuDevice("deferred")).run([feeds[0]["m"], feeds[0]["x"]])
    want = cpu_run(loop_model(), feeds[0])
    assert got[1].shape != want[1].shape  # without the sync the host reads a stale condition
    # the trip count (ORT's memory) is copied for the host and synced, the condition is synced
    # each iteration, and Compute ends with one
    assert sum(1 for s in walk(plan.steps) if isinstance(s, Sync)) == 3


def test_a_loop_without_iterations_stacks_rows_of_the_bodys_shape():
    """ORT gives a Loop that runs no iteration scan outputs of shape (0, *rows) where the body's
    types fix the rows: the plan carries them (Loop.scan_rows)."""
    from loop_models import fibonacci_feeds, fibonacci_model, growing_feeds, growing_model

    for make, feeds in ((fibonacci_model, fibonacci_feeds), (growing_model, growing_feeds)):
        plan = compile_model(make())
        (loop,) = [s for s in plan.steps if isinstance(s, Loop)]
        assert loop.scan_rows == (((2, 3),) if make is fibonacci_model else ((),))
        empty = [f for f in feeds() if f["M"] == 0 or not f.get("cond", True)]
        assert empty
        check(plan, make(), empty)


def test_a_scan_iterates_without_a_sync_between_iterations():
    """A Scan's loop yields its condition argument as it is: the host wrote that value and reads
    nothing back, so its iterations queue one after another with no sync (the random schedules
    would show a missing one), and the condition stays in device memory."""
    from loop_models import scan_feeds, scan_model

    plan = compile_model(scan_model())
    (loop,) = [s for s in plan.steps if isinstance(s, Loop)]
    assert loop.body_results[0] == loop.body_args[1]
    assert not any(isinstance(s, Sync) for s in walk(loop.body))
    assert plan.values[loop.body_args[1]].space == DEVICE
    check(plan, scan_model(), scan_feeds())
