"""hipep.backend: ONNX's backend API over a stock onnxruntime session with hipep registered."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import hipep.backend as backend
from helpers import UNSUPPORTED, cpu_ep, make_model, middle_model, tensor

CPU_EP = cpu_ep()  # hipep's CPU reference device (HipCpuExecutionProvider beside a GPU)

F = TensorProto.FLOAT


def add_mul_model():
    nodes = [helper.make_node("Add", ["x", "y"], ["s"], name="add"),
             helper.make_node("Mul", ["s", "y"], ["p"], name="mul")]
    return make_model(nodes, [tensor("x", F, [2, 3]), tensor("y", F, [2, 3])],
                      [tensor("p", F, [2, 3]), tensor("s", F, [2, 3])])


def unsupported_model():
    return make_model([helper.make_node(UNSUPPORTED, ["x"], ["d"], name="pool")], [tensor("x", F, [1, 3, 3])],
                      [tensor("d", F, [1, 3, 1])])


def test_whole_claim_disables_fallback_and_returns_outputs_in_graph_order(rng):
    rep = backend.prepare(add_mul_model(), "CPU")
    assert rep.claim.kind == "all" and rep.claim.fallback_disabled
    assert rep.claim.hipep_nodes == rep.claim.total_nodes == 2
    assert set(rep.claim.by_ep) == {CPU_EP}
    x, y = rng.standard_normal((2, 3), dtype=np.float32), rng.standard_normal((2, 3), dtype=np.float32)
    p, s = rep.run([x, y])
    np.testing.assert_allclose(s, x + y, rtol=1e-6)
    np.testing.assert_allclose(p, (x + y) * y, rtol=1e-6)
    p2, s2 = rep.run({"x": x, "y": y})
    np.testing.assert_array_equal(p, p2)


def test_partial_claim_runs_split_with_the_cpu_ep(rng):
    model = middle_model()
    assert backend.is_compatible(model)
    with backend.recording() as reps:
        rep = backend.prepare(model, "CPU", log_severity_level=3)
    assert reps == [rep]
    assert rep.claim.kind == "some" and not rep.claim.fallback_disabled
    assert rep.claim.explained == "some"
    assert sorted(rep.claim.by_ep[CPU_EP]) == ["first_add", "last_mul"]
    assert rep.claim.by_ep["CPUExecutionProvider"] == ["the_pool"]
    x = rng.standard_normal((2, 3, 3), dtype=np.float32)
    y = rng.standard_normal(3, dtype=np.float32)
    (z,) = rep.run([x, y])
    np.testing.assert_allclose(z, np.sum((x + y).astype(np.float64) ** 2, axis=2, keepdims=True), rtol=1e-5)
    assert backend.recent_claims()[-1] == (model.graph.name, rep.claim)


def test_unclaimed_model_is_incompatible_but_still_prepares():
    model = unsupported_model()
    assert not backend.is_compatible(model)
    rep = backend.prepare(model, "CPU", log_severity_level=3)
    assert rep.claim.kind == "none" and rep.claim.hipep_nodes == 0
    (d,) = rep.run([np.eye(3, dtype=np.float32)[None] * 2])  # each row's L2 norm
    np.testing.assert_allclose(d, np.full((1, 3, 1), 2.0, np.float32))


def test_numpy_scalar_inputs_are_fed_as_0d_tensors():
    model = make_model([helper.make_node("Neg", ["x"], ["y"])], [tensor("x", F, [])], [tensor("y", F, [])])
    (y,) = backend.prepare(model).run([np.float32(1.5)])
    assert y.shape == () and y == -1.5


def test_devices():
    assert backend.supports_device("CPU")
    assert not backend.supports_device("CUDA")  # until hipep's CUDA backend is available


def test_ort_limits_and_ir_lowering():
    max_ir, max_opset = backend.ort_limits()
    assert max_ir >= 10 and max_opset >= 21
    model = add_mul_model()
    model.ir_version = max_ir + 1
    lowered = backend.loadable_model(model)
    assert lowered is not model and lowered.ir_version == 10 and model.ir_version == max_ir + 1
    assert backend.prepare(model).claim.kind == "all"
    # opsets too new for ORT: left alone (ORT refuses it)
    newest = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", F, [2])], [tensor("y", F, [2])],
                        opset=onnx.defs.onnx_opset_version())
    newest.ir_version = onnx.IR_VERSION
    if onnx.defs.onnx_opset_version() > max_opset and onnx.IR_VERSION > max_ir:
        assert backend.loadable_model(newest).ir_version == onnx.IR_VERSION


def test_run_node():
    (y,) = backend.run_node(helper.make_node("Relu", ["x"], ["y"]), [np.array([-1.0, 2.0], np.float32)])
    np.testing.assert_array_equal(y, [0.0, 2.0])


def test_unknown_keyword_is_an_error():
    with pytest.raises(TypeError, match="no_such_option"):
        backend.prepare(add_mul_model(), no_such_option=1)
