"""MoE's and QMoE's GPU launches (hipep/runtime/gpu_moe.py, kernels/moe.hip) run on the host
stand-in (g++ over the unchanged kernel source, the launches run block by block on host threads)
against the registry's reference (hipep/ops/moe.py, itself checked against ORT's CPU EP). MoE: every
activation, gpt-oss's SwiGLU with a limit, routing with and without normalization, k of 1 to all
experts, f32 and f16, 2-D and 3-D inputs, warps of 32 and 64 lanes. QMoE: 4- and 8-bit experts,
row-wise and block-wise scales (block sizes 16 to 128), with and without zero points, the
dequantize path and the int8-activation one, router_weights, SwiGLU and SiLU, f32 and f16, k 1 and
2. Also what the checks refuse. Skipped without g++."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from hipep.runtime import gpu_kernels as gk

from unit.host_kernels import EXACT_FLAGS, compile_module, run_on_host
from unit.test_ops_contrib import W, moe_inputs, qmoe_inputs

F32, F16 = np.float32, np.float16
pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
GPT_OSS = {"swiglu_limit": 7.0, "activation_alpha": 1.702, "activation_beta": 1.0}


@pytest.fixture(scope="module")
def host_moe(tmp_path_factory):
    """warp size -> the host build of kernels/moe.hip for it, built once."""
    built = {}

    def get(warp):
        if warp not in built:
            built[warp] = {"warp": warp, "moe": compile_module(tmp_path_factory.mktemp(f"moe{warp}"), "moe", warp,
                                                                EXACT_FLAGS)}
        return built[warp]
    return get


@pytest.fixture(scope="module", params=[32, 64])
def libs(request, host_moe):
    return host_moe(request.param)


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


# ---- QMoE -----------------------------------------------------------------------------------------
# A warp size per case (the host stand-in runs every GPU thread as a host thread: both warp sizes
# for every case would double a slow test); each path runs under both somewhere.
Q = "com.microsoft::QMoE"
DEQUANT = ["hipep_qmoe_route", "hipep_qmoe_fc1", "hipep_moe_act", "hipep_qmoe_fc2", "hipep_moe_combine"]
INT8 = ["hipep_qmoe_route", "hipep_qmoe_quant", "hipep_qmoe_fc1_q8", "hipep_moe_act", "hipep_qmoe_quant_act",
        "hipep_qmoe_fc2_q8", "hipep_moe_combine"]
LEVEL4 = {"accuracy_level": 4}


def _kinds(ops):
    return [op.entry if op.entry in ("hipep_moe_act", "hipep_qmoe_quant_act") else op.entry.rsplit("_", 1)[0]
            for op in ops]


@pytest.mark.parametrize("warp,bits,bs,act,dtype,zp,k,extra,shape,H,I,rw", [
    # row-wise scales: dequantize + f32 GEMM at every level
    (32, 4, 0, "silu", F32, False, 2, {}, (4,), 32, 16, False),
    (64, 4, 0, "swiglu", F32, True, 2, GPT_OSS, (3,), 32, 16, False),
    (32, 8, 0, "silu", F32, True, 1, {}, (4,), 32, 32, True),
    (32, 8, 0, "swiglu", F16, False, 2, {"normalize_routing_weights": 0}, (2,), 32, 16, True),
    # block-wise 4-bit below accuracy_level 4: dequantize + f32 GEMM
    (32, 4, 32, "swiglu", F32, True, 2, GPT_OSS, (3,), 64, 32, False),
    (64, 4, 16, "silu", F16, False, 1, {}, (2, 3), 32, 16, False),
    (32, 4, 128, "silu", F16, True, 1, {}, (2,), 128, 128, False),
    # block-wise 8-bit (any level) and 4-bit at level 4: int8 activations
    (32, 4, 64, "swiglu", F32, True, 2, LEVEL4, (2,), 64, 64, False),
    (64, 8, 16, "swiglu", F32, True, 2, GPT_OSS, (2,), 32, 16, False),
    (32, 8, 32, "silu", F16, False, 2, {}, (1, 3), 64, 32, False),
    (32, 8, 128, "silu", F32, False, 1, {}, (2,), 128, 128, False),
    (32, 4, 32, "swiglu", F16, True, 1, LEVEL4, (1,), 64, 32, True),   # a decode step
])
def test_qmoe_launches_compute_the_reference(host_moe, warp, bits, bs, act, dtype, zp, k, extra, shape, H, I, rw):
    ins, attrs, _ = qmoe_inputs(bits, bs, act, dtype=dtype, zp=zp, k=k, extra=extra, router_weights=rw,
                                shape=shape, H=H, I=I)
    ins = [a.value if isinstance(a, W) else a for a in ins]
    (y,), (want,), ops = run_on_host(host_moe(warp), Q, ins, attrs, workspace=True)
    int8 = bs > 0 and (bits == 8 or extra.get("accuracy_level") == 4)
    assert _kinds(ops) == (INT8 if int8 else DEQUANT)
    assert y.dtype == want.dtype and y.shape == want.shape
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == F32 else dict(rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(y.astype(F32), want.astype(F32), **tol)


@pytest.mark.parametrize("normalize", [0, 1])
def test_qmoe_skips_slots_whose_router_weight_is_tiny(host_moe, normalize):
    """A router weight <= 1e-8 (after normalizing: all-zero weights give 0) skips its expert; a
    token with none left is zero."""
    ins, attrs, _ = qmoe_inputs(8, 16, "silu", k=2, router_weights=True, shape=(3,), H=32, I=16,
                                extra={"normalize_routing_weights": normalize})
    ins = [a.value if isinstance(a, W) else a for a in ins]
    rw = ins[14]
    rw[0] = 0  # token 0: no expert
    rw[1, np.argsort(-ins[1][1])[1]] = 0  # token 1: its second pick skipped
    (y,), (want,), _ = run_on_host(host_moe(32), Q, ins, attrs, workspace=True)
    assert not want[0].any()
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def test_qmoe_check_names_what_has_no_kernel():
    check = gk.BINDINGS[Q].check
    f32s = ["float32", "float32", "uint8", "float32", "float32", "uint8", "float32"]
    assert check({"activation_type": "swiglu", "k": 2, "expert_weight_bits": 4, "block_size": 32}, f32s, [], []) is None
    assert check({"expert_weight_bits": 8, "accuracy_level": 4}, ["float16", "float16", "uint8", "float16"], [],
                 []) is None
    assert "element types" in check({}, ["bfloat16", "bfloat16", "uint8", "bfloat16"], [], [])
    assert "element types" in check({}, ["float32", "float16", "uint8", "float32"], [], [])
    assert "k=40 above 32" in check({"k": 40}, f32s, [], [])
    assert "expert_weight_bits=2" in check({"expert_weight_bits": 2}, f32s, [], [])
    assert "quant_type 'fp4'" in check({"quant_type": "fp4"}, f32s, [], [])
    assert "weights_prepacked" in check({"weights_prepacked": 1}, f32s, [], [])
    assert "fc3" in check({}, f32s + ["", "uint8"], [], [])
