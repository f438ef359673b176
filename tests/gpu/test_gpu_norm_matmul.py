"""hipep::SkipNormMatMulNBits on the CUDA device: a skip norm and the MatMulNBits (or gated MLP)
reading its output (tests/quant_helpers.with_skip_norm) through hipep.InferenceSession(device=
"cuda"), against ORT's CPU EP and against hipep's unfused plan (`fusion=off`) on the same GPU.

One fp16 row runs one rendered kernel where the GEMV keeps its waves (each block normalizes the row
it stages, block 0 writes the residual sum): with rows up to 2048 values its outputs are the
unfused plan's bits (the norm's own launch then has one vector a thread, the same sums in the same
order). Rows past that (two vectors a thread) agree within f16 rounding. Several rows, and the LM
head's shape (more waves fused than alone), run the norm's kernel and then the GEMV's. Tolerance
against the CPU EP as test_gpu_gated_matmul.py's for f16 at level 0 (2e-3)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP

import hipep
from hipep.runtime.cuda import cuda_status
from helpers import cpu_session
from quant_helpers import gated_mlp_model, matmul_nbits_model, with_skip_norm

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)


def rel_l2(got, want) -> float:
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(g - w) / max(np.linalg.norm(w), 1e-30))


def _model(kind, k, n, zp, norm_bias):
    if kind == "gated":
        model, feeds = gated_mlp_model([1, "s"], k, n, zp_kind=zp)
    else:
        model, feeds, _ = matmul_nbits_model([1, "s"], k, n, 4, 32, elem=TP.FLOAT16, zp_kind=zp)
    return with_skip_norm(model, feeds, k, norm_bias=norm_bias)


@pytest.mark.parametrize("kind,k,n", [("plain", 2048, 3072), ("plain", 2048, 2048), ("plain", 2048, 32000),
                                      ("plain", 4096, 1024), ("plain", 1024, 256), ("gated", 2048, 8192),
                                      ("gated", 1024, 512)],
                         ids=["qkv", "o", "lm_head", "k4096", "k1024", "mlp", "mlp-k1024"])
@pytest.mark.parametrize("zp", ["none", "uint8"])
@pytest.mark.parametrize("norm_bias", [False, True], ids=["", "bias"])
@pytest.mark.parametrize("rows", [1, 5])
def test_normed_projection_follows_the_cpu_ep_and_the_unfused_plan(kind, k, n, zp, norm_bias, rows):
    model, feeds = _model(kind, k, n, zp, norm_bias)
    rng = np.random.default_rng(rows)
    feeds = {name: rng.standard_normal((1, rows, k)).astype(np.float16) for name in feeds}
    want = cpu_session(model).run(None, feeds)
    fused = hipep.InferenceSession(model, device="cuda")
    unfused = hipep.InferenceSession(model, device="cuda", fusion="off")
    runs = [fused.run(None, feeds) for _ in range(3)]
    for r in runs[1:]:  # replays give the first run's bits
        for a, b in zip(r, runs[0]):
            np.testing.assert_array_equal(a, b)
    got, plain = runs[0], unfused.run(None, feeds)
    for g, p, w in zip(got, plain, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert rel_l2(g, w) < 2e-3
        if k <= 2048:
            np.testing.assert_array_equal(g, p)
        else:
            assert rel_l2(g, p) < 2e-3


def test_a_decode_step_runs_the_norm_inside_the_gemv():
    """One row of the QKV shape: one kernel a run (hipep.stats()' launches), where the unfused plan
    runs two."""
    model, feeds = _model("plain", 2048, 3072, "none", False)
    feeds = {name: np.random.default_rng(0).standard_normal((1, 1, 2048)).astype(np.float16) for name in feeds}
    launches = {}
    for fusion in ("on", "off"):
        sess = hipep.InferenceSession(model, device="cuda", fusion=fusion)
        sess.run(None, feeds)
        before = hipep.stats()["launches"]
        sess.run(None, feeds)
        launches[fusion] = hipep.stats()["launches"] - before
    assert launches == {"on": 1, "off": 2}


@pytest.mark.parametrize("kind,k,n", [("plain", 2048, 3072), ("plain", 4096, 1024), ("gated", 2048, 8192)],
                         ids=["qkv", "k4096", "mlp"])
@pytest.mark.parametrize("zp", ["none", "uint8"])
def test_normed_projection_on_tensor_cores(tensor_core_forms, kind, k, n, zp):
    """HIPEP_MNB_GEMV_TC=1: one fp16 row runs the tensor-core kernel with the norm as A's source
    (kernels/matmul_nbits_tc.h), within the CPU EP's tolerance and, for rows up to 2048 values, the
    unfused plan's bits (the norm's own launch, then the tensor-core GEMVs reading it)."""
    model, feeds = _model(kind, k, n, zp, False)
    feeds = {name: np.random.default_rng(1).standard_normal((1, 1, k)).astype(np.float16) for name in feeds}
    want = cpu_session(model).run(None, feeds)
    got = hipep.InferenceSession(model, device="cuda").run(None, feeds)
    plain = hipep.InferenceSession(model, device="cuda", fusion="off").run(None, feeds)
    assert tensor_core_forms and None not in tensor_core_forms, tensor_core_forms
    for g, p, w in zip(got, plain, want):
        assert rel_l2(g, w) < 2e-3
        if k <= 2048:
            np.testing.assert_array_equal(g, p)
        else:
            assert rel_l2(g, p) < 2e-3
