"""hip-fuse-gated-matmul: a gated MLP's gate and up MatMulNBits and the pointwise program joining
them compile to one hipep::GatedMatMulNBits launch whose results are the unfused plan's bits, on
the CPU device and through ORT against its CPU EP; what must stay apart does."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP

from hipep.plan import Launch, walk

from helpers import assert_matches_cpu, compiled_executor, launch_ops, session
from quant_helpers import gated_mlp_model

GATED = "hipep::GatedMatMulNBits"
MNB = "com.microsoft::MatMulNBits"


def _executor(model, **options):
    return compiled_executor(model, "mlp", **options)


_ops = launch_ops


def _same_bits(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("activation", ["silu", "gelu"])
@pytest.mark.parametrize("elem", [TP.FLOAT16, TP.FLOAT], ids=["f16", "f32"])
@pytest.mark.parametrize("zp_kind", ["none", "uint8", "float"])
@pytest.mark.parametrize("level", [0, 4])
def test_gate_up_and_activation_are_one_launch_with_the_unfused_bits(activation, elem, zp_kind, level):
    model, _ = gated_mlp_model(["b", "s"], 64, 96, elem=elem, zp_kind=zp_kind, accuracy_level=level,
                               activation=activation)
    plan, fused = _executor(model)
    off_plan, unfused = _executor(model, fusion="off")
    assert _ops(plan) == [GATED]
    assert _ops(off_plan).count(MNB) == 2
    launch = next(s for s in walk(plan.steps) if isinstance(s, Launch))
    assert "gate_proj" in launch.node and "up_proj" in launch.node and "gate_mul_up" in launch.node
    dtype = np.float16 if elem == TP.FLOAT16 else np.float32
    for rows in (1, 5):  # a decode step's one row and a prefill's several
        a = np.random.default_rng(rows).standard_normal((2, rows, 64)).astype(dtype)
        for got, want in zip(fused.run([a]), unfused.run([a])):
            _same_bits(got, want)


@pytest.mark.parametrize("case", ["bias_on_up", "extra_output"])
def test_projections_someone_else_needs_stay_apart(case):
    model, feeds = gated_mlp_model([1, 1], 64, 96, **{case: True})
    plan, ex = _executor(model)
    assert GATED not in _ops(plan) and _ops(plan).count(MNB) == 2
    assert ex.run([feeds["A"]])


def test_projections_of_different_inputs_stay_apart():
    model, feeds = gated_mlp_model([1, 1], 64, 96)
    up = next(n for n in model.graph.node if n.name == "up_proj")
    model.graph.node.insert(0, __import__("onnx").helper.make_node("Neg", ["A"], ["A_neg"], name="neg"))
    up.input[0] = "A_neg"
    plan, ex = _executor(model)
    assert GATED not in _ops(plan) and _ops(plan).count(MNB) == 2


@pytest.mark.parametrize("activation", ["silu", "gelu"])
def test_ort_session_follows_the_cpu_ep(activation):
    model, feeds = gated_mlp_model(["b", "s"], 128, 64, elem=TP.FLOAT, zp_kind="uint8", activation=activation)
    sess = session(model, disable_fallback=True)
    for rows in (1, 3):
        a = np.random.default_rng(rows).standard_normal((1, rows, 128)).astype(np.float32)
        assert_matches_cpu(sess, model, {"A": a}, rtol=1e-4, atol=1e-4)
