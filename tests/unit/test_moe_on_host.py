"""MoE's GPU launches (hipep/runtime/gpu_moe.py, kernels/moe.hip) run on the host stand-in (g++
over the unchanged kernel source, the launches run block by block on host threads) against the
registry's reference (hipep/ops/moe.py, itself checked against ORT's CPU EP): every activation,
gpt-oss's SwiGLU with a limit, routing with and without normalization, k of 1 to all experts, f32
and f16, 2-D and 3-D inputs, warps of 32 and 64 lanes. Also what the check refuses. Skipped without
g++."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from hipep.runtime import gpu_kernels as gk

from unit.host_kernels import EXACT_FLAGS, compile_module, run_on_host
from unit.test_ops_contrib import W, moe_inputs

F32, F16 = np.float32, np.float16
pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
GPT_OSS = {"swiglu_limit": 7.0, "activation_alpha": 1.702, "activation_beta": 1.0}


@pytest.fixture(scope="module", params=[32, 64])
def libs(request, tmp_path_factory):
    warp = request.param
    return {"warp": warp, "moe": compile_module(tmp_path_factory.mktemp(f"moe{warp}"), "moe", warp, EXACT_FLAGS)}


@pytest.mark.parametrize("act,dtype,k,extra,shape", [
    ("swiglu", F32, 2, GPT_OSS, (3,)),
    ("swiglu", F16, 2, GPT_OSS, (1, 2)),
    ("silu", F32, 2, {"normalize_routing_weights": 0}, (2,)),
    ("relu", F32, 1, {}, (3,)),
    ("gelu", F32, 3, {"normalize_routing_weights": 0}, (1,)),
    ("identity", F32, 4, {}, (1,)),   # a decode step: one token, every expert
])
def test_moe_launches_compute_the_reference(libs, act, dtype, k, extra, shape):
    ins, attrs, _ = moe_inputs(act, dtype=dtype, k=k, extra=extra, shape=shape, H=36, I=12)
    ins = [a.value if isinstance(a, W) else a for a in ins]
    (y,), (want,), ops = run_on_host(libs, "com.microsoft::MoE", ins, attrs, workspace=True)
    assert [op.entry.rsplit("_", 1)[0] if op.entry != "hipep_moe_act" else op.entry for op in ops] == [
        "hipep_moe_route", "hipep_moe_fc1", "hipep_moe_act", "hipep_moe_fc2", "hipep_moe_combine"]
    assert y.dtype == want.dtype and y.shape == want.shape
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == F32 else dict(rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(y.astype(F32), want.astype(F32), **tol)


def test_moe_check_names_what_has_no_kernel():
    check = gk.BINDINGS["com.microsoft::MoE"].check
    assert check({"activation_type": "swiglu", "k": 2}, ["float16"] * 6, [], []) is None
    assert "element types" in check({}, ["bfloat16"] * 3, [], [])
    assert "k=40 above 32" in check({"k": 40}, ["float32"] * 3, [], [])
