"""The plan_cache option: plans stored by one session are loaded by the next, in another process
without the compiler, and only for the subgraph, options and hipep source they were made from."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import hipep
from hipep import plan_cache
from hipep.options import ProviderOptions

IR_VERSION = 10


def _model(scale: float, width: int = 8):
    """x @ w * scale, then Relu: w is a held weight (> the small-constant limit), scale a small
    constant the plan carries as a value."""
    w = np.arange(width * 40, dtype=np.float32).reshape(width, 40) / 100
    g = h.make_graph(
        [h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Mul", ["m", "s"], ["p"]),
         h.make_node("Relu", ["p"], ["y"])],
        "g", [h.make_tensor_value_info("x", T.FLOAT, ["n", width])],
        [h.make_tensor_value_info("y", T.FLOAT, ["n", 40])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([scale], np.float32), "s")])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 18)], ir_version=IR_VERSION)


def _expected(scale: float, x: np.ndarray) -> np.ndarray:
    w = np.arange(x.shape[1] * 40, dtype=np.float32).reshape(x.shape[1], 40) / 100
    return np.maximum((x @ w) * np.float32(scale), 0)


def _stored(folder) -> list[str]:
    return sorted(p for p in os.listdir(folder) if p.endswith(plan_cache.SUFFIX))


def test_a_stored_plan_runs_in_a_fresh_process_without_the_compiler(tmp_path):
    folder = tmp_path / "plans"
    model_path = tmp_path / "m.onnx"
    model_path.write_bytes(_model(0.5).SerializeToString())
    x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(3, 8)
    np.save(tmp_path / "x.npy", x)
    first = hipep.InferenceSession(str(model_path), device="cpu", plan_cache=str(folder))
    expected = first.run(None, {"x": x})[0]
    np.testing.assert_allclose(expected, _expected(0.5, x), rtol=1e-6)
    assert len(_stored(folder)) == 1
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        import hipep
        sess = hipep.InferenceSession({str(model_path)!r}, device="cpu", plan_cache={str(folder)!r})
        y = sess.run(None, {{"x": np.load({str(tmp_path / "x.npy")!r})}})[0]
        np.save({str(tmp_path / "y.npy")!r}, y)
        assert hipep.stats().get("plans_loaded") == 1, hipep.stats()
        loaded = [m for m in sys.modules if m.split(".")[0] == "xdsl" or m.startswith(("hipep.ir", "hipep.passes"))
                  or m == "hipep.frontend"]
        assert not loaded, loaded
        # Nor what would keep MiBs for nothing: onnx, OpenSSL's libcrypto (hashlib), importlib.metadata.
        heavy = [m for m in ("onnx", "_hashlib", "importlib.metadata") if m in sys.modules]
        assert not heavy, heavy
        print("ran")
        """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-P", "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and "ran" in done.stdout, done.stderr[-3000:]
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), expected)


def test_a_different_constant_or_option_is_a_different_plan(tmp_path):
    folder = str(tmp_path)
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
    before = hipep.stats().get("plans_loaded", 0)
    for scale in (0.5, -2.0):  # same graph, another value of the small constant
        y = hipep.InferenceSession(_model(scale), device="cpu", plan_cache=folder).run(None, {"x": x})[0]
        np.testing.assert_allclose(y, _expected(scale, x), rtol=1e-6)
    hipep.InferenceSession(_model(0.5), device="cpu", plan_cache=folder, fusion="off")
    assert len(_stored(folder)) == 3
    assert hipep.stats().get("plans_loaded", 0) == before
    y = hipep.InferenceSession(_model(-2.0), device="cpu", plan_cache=folder).run(None, {"x": x})[0]
    assert hipep.stats().get("plans_loaded", 0) == before + 1
    np.testing.assert_allclose(y, _expected(-2.0, x), rtol=1e-6)


def test_a_damaged_plan_file_is_compiled_again_and_replaced(tmp_path, caplog):
    folder = str(tmp_path)
    x = np.ones((1, 8), np.float32)
    hipep.InferenceSession(_model(0.5), device="cpu", plan_cache=folder)
    [name] = _stored(folder)
    (tmp_path / name).write_bytes(b"\x00not a plan")
    before = hipep.stats().get("plans_loaded", 0)
    y = hipep.InferenceSession(_model(0.5), device="cpu", plan_cache=folder).run(None, {"x": x})[0]
    np.testing.assert_allclose(y, _expected(0.5, x), rtol=1e-6)
    assert hipep.stats().get("plans_loaded", 0) == before
    assert "does not load" in caplog.text
    assert (tmp_path / name).read_bytes() != b"\x00not a plan"
    hipep.InferenceSession(_model(0.5), device="cpu", plan_cache=folder)
    assert hipep.stats().get("plans_loaded", 0) == before + 1


def test_a_folder_that_cannot_hold_plans_is_an_option_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(hipep.OptionError, match="plan_cache"):
        hipep.InferenceSession(_model(0.5), device="cpu", plan_cache=str(blocker / "plans"))


def test_the_key_covers_the_description_options_and_device():
    desc = {"name": "g", "nodes": [{"op_type": "Mul", "attributes": {"alpha": 1.0}}],
            "constants": {"s": np.array([0.5], np.float32)}, "weights": ["w"], "types": {"x": (1, [4, "n"])}}
    opts = ProviderOptions()
    key = plan_cache.plan_key(desc, ["x"], ["y"], "cpu", opts)
    assert key == plan_cache.plan_key({**desc}, ["x"], ["y"], "cpu", opts)
    changed = [
        {**desc, "nodes": [{"op_type": "Mul", "attributes": {"alpha": 2.0}}]},
        {**desc, "constants": {"s": np.array([0.25], np.float32)}},
        {**desc, "constants": {"s": np.array([0.5], np.float64)}},
        {**desc, "weights": ["v"]},
        {**desc, "types": {"x": (1, [4, "m"])}},
    ]
    keys = {plan_cache.plan_key(d, ["x"], ["y"], "cpu", opts) for d in changed}
    keys |= {plan_cache.plan_key(desc, ["x", "w"], ["y"], "cpu", opts),
             plan_cache.plan_key(desc, ["x"], ["y"], "cuda", opts),
             plan_cache.plan_key(desc, ["x"], ["y"], "cpu", ProviderOptions(fusion="off"))}
    assert key not in keys and len(keys) == len(changed) + 3
    # Options the compiler does not read share plans.
    assert plan_cache.plan_key(desc, ["x"], ["y"], "cpu", ProviderOptions(log_level="error", seed=3)) == key
    with pytest.raises(TypeError, match="cannot hash a object"):
        plan_cache.plan_key({**desc, "odd": object()}, ["x"], ["y"], "cpu", opts)
