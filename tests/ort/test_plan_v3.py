"""Plan v3 through real ORT sessions: one specialization per layout signature, value-only symbols,
checks before any launch, byte counts that cannot wrap, and plans that travel as bytes."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import hipep
from hipep import bridge
from hipep.plan import Plan
from helpers import IR_VERSION

n = h.make_node


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=IR_VERSION).SerializeToString()


def _delta(before, after, key):
    return after.get(key, 0) - before.get(key, 0)


def _mask_model():
    """seqlens = ReduceSum(mask, axis 1) - 1, total = Shape(mask)[1] (the GQA preamble), y = x * 2:
    the mask's length is used only as a value."""
    one = numpy_helper.from_array(np.array([1], np.int64), "one")
    idx = numpy_helper.from_array(np.array(1, np.int64), "idx")
    nodes = [n("ReduceSum", ["mask", "one"], ["s"], keepdims=0), n("Sub", ["s", "one"], ["seqlens"]),
             n("Shape", ["mask"], ["shape"]), n("Gather", ["shape", "idx"], ["total"]),
             n("Add", ["x", "x"], ["y"])]
    return _model(nodes, [h.make_tensor_value_info("mask", T.INT64, ["b", "t"]),
                          h.make_tensor_value_info("x", T.FLOAT, ["b", 8])],
                  [h.make_tensor_value_info("seqlens", T.INT64, ["b"]), h.make_tensor_value_info("total", T.INT64, []),
                   h.make_tensor_value_info("y", T.FLOAT, ["b", 8])], [one, idx])


def test_a_value_only_extent_adds_no_specialization(rng):
    sess = hipep.InferenceSession(_mask_model(), device="cpu")
    x = rng.standard_normal((2, 8)).astype(np.float32)
    sess.run(None, {"mask": np.ones((2, 3), np.int64), "x": x})
    before = hipep.stats()
    for t in range(4, 40):
        mask = np.ones((2, t), np.int64)
        mask[0, : t // 3] = 0
        seqlens, total, y = sess.run(None, {"mask": mask, "x": x})
        np.testing.assert_array_equal(seqlens, mask.sum(1) - 1)
        assert int(total) == t
        np.testing.assert_array_equal(y, x + x)
    after = hipep.stats()
    assert _delta(before, after, "specializations") == 0
    assert _delta(before, after, "specialization_hits") == 36
    assert _delta(before, after, "host_reads") == 0
    # the batch sizes buffers: a new batch is a new layout signature, once
    x3 = rng.standard_normal((3, 8)).astype(np.float32)
    for _ in range(3):
        sess.run(None, {"mask": np.ones((3, 5), np.int64), "x": x3})
    assert _delta(after, hipep.stats(), "specializations") == 1


def test_dimension_mismatch_is_caught_by_its_node_before_any_launch(rng):
    model = _model([n("Mul", ["a", "b"], ["c"], name="scale"), n("Add", ["c", "a"], ["y"], name="shift")],
                   [h.make_tensor_value_info("a", T.FLOAT, ["n"]), h.make_tensor_value_info("b", T.FLOAT, ["m"])],
                   [h.make_tensor_value_info("y", T.FLOAT, None)])
    sess = hipep.InferenceSession(model, device="cpu")
    a = rng.standard_normal(5).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"a": a, "b": a})[0], a * a + a, rtol=1e-6)
    before = hipep.stats()
    # the node named is the Mul, or the fused kernel that covers it
    with pytest.raises(Exception, match=r"node '(scale' \(Mul\)|fused\[scale, shift\]').*broadcast"):
        sess.run(None, {"a": a, "b": np.ones(4, np.float32)})
    assert _delta(before, hipep.stats(), "launches") == 0  # found while tracing shapes, nothing ran
    np.testing.assert_allclose(sess.run(None, {"a": a, "b": np.ones(1, np.float32)})[0], a + a, rtol=1e-6)


@pytest.mark.parametrize("case", ["constant-of-shape-input", "constant-of-shape-constant", "expand"])
def test_byte_counts_past_int64_are_errors_before_allocation(case):
    if case == "constant-of-shape-input":
        model = _model([n("ConstantOfShape", ["s"], ["y"], name="fill")], [h.make_tensor_value_info("s", T.INT64, [3])],
                       [h.make_tensor_value_info("y", T.FLOAT, None)])
        feeds, ok = {"s": np.array([2 ** 62, 4, 4], np.int64)}, {"s": np.array([2, 3, 1], np.int64)}
    elif case == "constant-of-shape-constant":
        model = _model([n("ConstantOfShape", ["s"], ["y"], name="fill")], [],
                       [h.make_tensor_value_info("y", T.FLOAT, None)],
                       [numpy_helper.from_array(np.array([2 ** 62, 4, 4], np.int64), "s")])
        feeds, ok = {}, None
    else:
        model = _model([n("Expand", ["x", "s"], ["y"], name="fill")],
                       [h.make_tensor_value_info("x", T.FLOAT, [1]), h.make_tensor_value_info("s", T.INT64, [3])],
                       [h.make_tensor_value_info("y", T.FLOAT, None)])
        feeds = {"x": np.ones(1, np.float32), "s": np.array([2 ** 31, 2 ** 31, 4], np.int64)}
        ok = {"x": np.ones(1, np.float32), "s": np.array([2, 3, 1], np.int64)}
    # ORT's graph optimizations off: onnxruntime 1.24 constant-folds the all-constant
    # ConstantOfShape itself at session creation (and overflows there, "Integer overflow"); this
    # way hipep is asked about the node on every onnxruntime release
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = hipep.InferenceSession(model, sess_options=so, device="cpu")
    with pytest.raises(Exception, match=r"node 'fill' .*more than a tensor can hold"):
        sess.run(None, feeds)
    if ok is not None:  # the session goes on
        assert sess.run(None, ok)[0].shape == (2, 3, 1)


def test_plan_bytes_run_in_a_fresh_process_without_the_compiler(tmp_path, rng):
    model = _mask_model()
    hipep.InferenceSession(model, device="cpu")
    plan = bridge.compiled_plans()[-1]
    data = plan.to_bytes()
    again = Plan.from_bytes(data)
    assert again.format() == plan.format()
    (tmp_path / "plan.bin").write_bytes(data)
    mask = np.ones((2, 7), np.int64)
    mask[1, :3] = 0
    x = rng.standard_normal((2, 8)).astype(np.float32)
    np.save(tmp_path / "mask.npy", mask)
    np.save(tmp_path / "x.npy", x)
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        from hipep.plan import Plan
        from hipep.runtime.cpu import CpuDevice
        from hipep.runtime.executor import Executor
        plan = Plan.from_bytes(open({str(tmp_path / "plan.bin")!r}, "rb").read())
        feeds = {{"mask": np.load({str(tmp_path / "mask.npy")!r}), "x": np.load({str(tmp_path / "x.npy")!r}),
                  "one": np.array([1], np.int64), "idx": np.array(1, np.int64)}}  # the model's initializers
        inputs = [feeds[plan.values[v].name] for v in plan.inputs]
        got = dict(zip((plan.values[v].name for v in plan.outputs), Executor(plan, CpuDevice(), weights=feeds).run(inputs)))
        seqlens, total, y = got["seqlens"], got["total"], got["y"]
        assert (seqlens == feeds["mask"].sum(1) - 1).all() and int(total) == 7
        assert (y == feeds["x"] + feeds["x"]).all()
        loaded = [m for m in sys.modules if m.split(".")[0] == "xdsl" or m.startswith(("hipep.ir", "hipep.passes"))
                  or m in ("hipep.compiler", "hipep.frontend")]
        assert not loaded, loaded
        print("ran")
        """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-P", "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and "ran" in done.stdout, done.stderr[-3000:]


def test_malformed_plan_bytes_are_clear_errors():
    with pytest.raises(hipep.HipepError, match="not a hipep plan"):
        Plan.from_bytes(b"\x00garbage")
    with pytest.raises(hipep.HipepError, match="plan version 2"):
        Plan.from_bytes(b'{"magic": "hipep-plan", "version": 2}')


def test_an_input_read_by_element_may_shrink_between_runs():
    model = _model([n("Reshape", ["x", "s"], ["y"])],
                   [h.make_tensor_value_info("x", T.FLOAT, [None]), h.make_tensor_value_info("s", T.INT64, [None])],
                   [h.make_tensor_value_info("y", T.FLOAT, None)])
    sess = hipep.InferenceSession(model, device="cpu")
    x = np.arange(6, dtype=np.float32)
    assert sess.run(None, {"x": x, "s": np.array([2, 3])})[0].shape == (2, 3)
    assert sess.run(None, {"x": x, "s": np.array([6])})[0].shape == (6,)  # fewer elements: traced again


def test_outputs_too_large_to_allocate_are_a_clear_error_and_the_session_goes_on():
    model = _model([n("ConstantOfShape", ["s"], ["y"], name="fill")], [h.make_tensor_value_info("s", T.INT64, [1])],
                   [h.make_tensor_value_info("y", T.FLOAT, None)])
    sess = hipep.InferenceSession(model, device="cpu")
    with pytest.raises(Exception, match=r"could not allocate the outputs \('y' \[35184372088832\]:float32\)"):
        sess.run(None, {"s": np.array([2 ** 45], np.int64)})
    np.testing.assert_array_equal(sess.run(None, {"s": np.array([3], np.int64)})[0], np.zeros(3, np.float32))
