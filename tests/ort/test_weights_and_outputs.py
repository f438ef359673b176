"""hipep holds the weights itself.

GetCapability sets drop_constant_initializers, so ORT passes no constant initializer to Compute;
Compile copies the ones the subgraph reads (external data included) into arrays hipep owns, and
the plan names them as "weight" values with index -1.
"""
from __future__ import annotations

import contextlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper

import hipep
import hipep.bridge as bridge

from helpers import assert_matches_cpu, cpu_session, make_model, tensor


def weights_model(batch="n"):
    """x[batch, 64] @ W[64, 2048] (a weight) + B[2048] (a mid-sized constant, not an IR constant)
    → * k (a scalar the IR holds) → Relu → y."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((64, 2048)).astype(np.float32)
    b = rng.standard_normal(2048).astype(np.float32)
    k = np.array(0.5, np.float32)
    nodes = [h.make_node("MatMul", ["x", "W"], ["xw"], name="mm"),
             h.make_node("Add", ["xw", "B"], ["xb"], name="bias"),
             h.make_node("Mul", ["xb", "k"], ["xs"], name="scale"),
             h.make_node("Relu", ["xs"], ["y"], name="act")]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B"), numpy_helper.from_array(k, "k")]
    model = make_model(nodes, [tensor("x", T.FLOAT, [batch, 64])], [tensor("y", T.FLOAT, [batch, 2048])], inits)
    return model, {"W": w, "B": b}


@contextlib.contextmanager
def watch_compute(monkeypatch):
    """Records what each Compute call hands Python (its inputs) and what Compile built (the
    CompiledSubgraph)."""
    seen = {"compiled": [], "runs": []}
    compile_, run_ = bridge.EpState.compile, bridge.CompiledSubgraph.run

    def compile(self, desc, *args):
        result = compile_(self, desc, *args)
        seen["compiled"].append(result[0])
        return result

    def run(self, inputs):
        seen["runs"].append({"inputs": list(inputs)})
        return run_(self, inputs)

    monkeypatch.setattr(bridge.EpState, "compile", compile)
    monkeypatch.setattr(bridge.CompiledSubgraph, "run", run)
    yield seen


# ---- weights -----------------------------------------------------------------------------------

def test_weights_are_not_fused_node_inputs_and_hipep_owns_copies(monkeypatch, rng):
    model, data = weights_model()
    with watch_compute(monkeypatch) as seen:
        sess = hipep.InferenceSession(model)
        x = rng.standard_normal((3, 64)).astype(np.float32)
        assert_matches_cpu(sess, model, {"x": x}, rtol=1e-4, atol=1e-4)
    # Compute received the activation only: ORT passed neither W nor B.
    assert [a.shape for a in seen["runs"][0]["inputs"]] == [(3, 64)]
    plan = bridge.compiled_plans()[-1]
    assert [plan.values[v].name for v in plan.inputs] == ["x"]
    weights = {v.name: v.index for v in plan.values.values() if v.kind == "weight"}
    assert weights == {"W": -1, "B": -1}
    assert "k" not in weights and any(a.size == 1 for a in plan.constants.values())  # the scalar is an IR constant
    # The store holds hipep's own read-only copies, equal to the initializers.
    (compiled,) = seen["compiled"]
    assert set(compiled.weights.arrays) == {"W", "B"}
    for name, a in compiled.weights.arrays.items():
        assert a.flags.owndata and not a.flags.writeable, name
        np.testing.assert_array_equal(a, data[name])
    assert compiled.weights.nbytes == data["W"].nbytes + data["B"].nbytes


def test_weights_survive_repeated_and_concurrent_sessions(rng):
    model, _ = weights_model()
    sessions = [hipep.InferenceSession(model) for _ in range(2)]
    del sessions[0]  # one session's weights going does not touch another's
    x = rng.standard_normal((2, 64)).astype(np.float32)
    for _ in range(2):
        assert_matches_cpu(sessions[-1], model, {"x": x}, rtol=1e-4, atol=1e-4)


def test_external_data_weights_are_copied_at_compile(tmp_path, rng):
    model, data = weights_model()
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=1024)
    assert (tmp_path / "weights.bin").stat().st_size >= data["W"].nbytes
    sess = hipep.InferenceSession(str(path))
    x = rng.standard_normal((2, 64)).astype(np.float32)
    want = cpu_session(str(path)).run(None, {"x": x})[0]
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-4)
    plan = bridge.compiled_plans()[-1]
    assert {v.name for v in plan.values.values() if v.kind == "weight"} == {"W", "B"}
    # hipep reads its own copy, not ORT's mapping of the file: overwriting the file in place
    # (same size, so nothing that still maps it faults) changes nothing.
    with open(tmp_path / "weights.bin", "r+b") as f:
        size = f.seek(0, 2)
        f.seek(0)
        f.write(b"\0" * size)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-4)
