"""hip-fuse-norm-matmul: a SkipSimplifiedLayerNormalization and the MatMulNBits (or gated MLP) that
reads its normalized output compile to one hipep::SkipNormMatMulNBits launch whose results are the
unfused plan's bits, on the CPU device and through ORT against its CPU EP; what must stay apart
does."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

from hipep.plan import Launch, walk

from helpers import assert_matches_cpu, compiled_executor, launch_ops, mlas_int8_replayed_exactly, session
from quant_helpers import gated_mlp_model, matmul_nbits_model, with_skip_norm

NORMED = "hipep::SkipNormMatMulNBits"
NORM = "com.microsoft::SkipSimplifiedLayerNormalization"


def _executor(model, **options):
    return compiled_executor(model, "layer", **options)


_ops = launch_ops


def _model(kind, elem=TP.FLOAT16, level=0, zp="none", k=64, n=96, **norm):
    if kind == "gated":
        model, feeds = gated_mlp_model([1, "s"], k, n, elem=elem, zp_kind=zp, accuracy_level=level)
    else:
        model, feeds, _ = matmul_nbits_model([1, "s"], k, n, 4, 32, elem=elem, zp_kind=zp, accuracy_level=level,
                                             bias=kind == "bias")
    return with_skip_norm(model, feeds, k, **norm)


def _feeds(feeds, rows, seed=0):
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal((1, rows) + v.shape[2:]).astype(v.dtype) for name, v in feeds.items()}


@pytest.mark.parametrize("kind", ["plain", "bias", "gated"])
@pytest.mark.parametrize("elem", [TP.FLOAT16, TP.FLOAT], ids=["f16", "f32"])
@pytest.mark.parametrize("level", [0, 4])
@pytest.mark.parametrize("norm", [{}, {"residual": False}, {"norm_bias": True}], ids=["residual", "none", "bias"])
def test_norm_and_projection_are_one_launch_with_the_unfused_bits(kind, elem, level, norm):
    model, feeds = _model(kind, elem, level, **norm)
    plan, fused = _executor(model)
    off_plan, unfused = _executor(model, fusion="off")
    assert _ops(plan) == [NORMED]
    assert NORM in _ops(off_plan)
    launch = next(s for s in walk(plan.steps) if isinstance(s, Launch))
    assert "input_norm" in launch.node
    assert ("gate_proj" in launch.node) if kind == "gated" else ("mnb" in launch.node)
    names = [o for o in (["Y", "residual"] if norm.get("residual", True) else ["Y"])]
    assert len(plan.outputs) == len(names)
    for rows in (1, 5):  # a decode step's one row and a prefill's several
        f = _feeds(feeds, rows)
        got, want = fused.run([f["x"], f["skip"]]), unfused.run([f["x"], f["skip"]])
        assert len(got) == len(names)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            assert g.tobytes() == w.tobytes()


def test_a_normalized_output_someone_else_reads_stays_apart():
    model, feeds = _model("plain")
    model.graph.output.append(helper.make_tensor_value_info("A", TP.FLOAT16, None))
    plan, ex = _executor(model)
    assert NORMED not in _ops(plan) and NORM in _ops(plan)
    f = _feeds(feeds, 1)
    assert len(ex.run([f["x"], f["skip"]])) == 3


def test_a_norm_feeding_two_projections_stays_apart():
    """Two MatMulNBits of one normalized row that are not a gated pair (Q and K apart, say): the
    norm is computed once, not in each."""
    model, feeds = _model("plain")
    second = helper.make_node("MatMulNBits", ["A", "B", "scales"], ["Y2"], domain="com.microsoft", name="mnb2",
                              K=64, N=96, bits=4, block_size=32)
    model.graph.node.append(second)
    model.graph.output.append(helper.make_tensor_value_info("Y2", TP.FLOAT16, None))
    plan, _ = _executor(model)
    assert NORMED not in _ops(plan) and _ops(plan).count("com.microsoft::MatMulNBits") == 2


def test_a_residual_read_before_the_projection_stays_apart():
    """The fused launch writes the residual sum where the projection was: a launch between the two
    that reads it would read it unwritten."""
    model, feeds = _model("plain")
    g = model.graph
    mnb = next(i for i, n in enumerate(g.node) if n.name == "mnb")
    g.node.insert(mnb, helper.make_node("Neg", ["residual"], ["neg_res"], name="neg"))
    g.output.append(helper.make_tensor_value_info("neg_res", TP.FLOAT16, None))
    plan, ex = _executor(model)
    ops = _ops(plan)
    assert ops == [NORM, "::Neg", "com.microsoft::MatMulNBits"]
    f = _feeds(feeds, 1)
    y, residual, neg = ex.run([f["x"], f["skip"]])
    np.testing.assert_array_equal(neg, -residual)


@pytest.mark.parametrize("kind", ["plain", "gated"])
def test_ort_session_follows_the_cpu_ep(kind):
    """Level 4 in f32: ORT's CPU EP quantizes the norm's output to int8 per block, so the fused
    launch's A must be its bits for the codes to agree. Where ORT's MLAS sums the int8 products in
    another order than the kernel hipep replays (helpers.mlas_int8_replayed_exactly), the two differ by
    f32 rounding, which the gated product's silu(gate) * up doubles."""
    model, feeds = _model(kind, TP.FLOAT, 4)
    sess = session(model, disable_fallback=True)
    tol = 1e-5 if mlas_int8_replayed_exactly() else 1e-4
    for rows in (1, 3):
        assert_matches_cpu(sess, model, _feeds(feeds, rows, seed=rows), rtol=tol, atol=tol)
