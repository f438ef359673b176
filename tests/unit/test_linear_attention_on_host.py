"""The Gated DeltaNet kernels (kernels/linear_attention.hip) run on the host stand-in (g++ over the
unchanged kernel source, the launches hipep/runtime/gpu_linear_attention.py gives run block by block
on host threads) against the registry's references (hipep/ops/linear_attention.py, themselves
checked against ORT's CPU EP): CausalConvWithState (decode and prefill, dilation, no past), the
gate, LinearAttention (every update rule, the three head layouts, per-key decay, shared beta, no
past) and GatedRMSNorm, f32 and f16, warps of 32 and 64 lanes; the ai.onnx (opset 27)
CausalConvWithState and LinearAttention through the same launches. Also what the checks and
bindings refuse. Skipped without g++."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from hipep.errors import HipepError
from hipep.runtime import gpu_kernels as gk

from unit.host_kernels import EXACT_FLAGS, compile_module, run_on_host
from unit.test_ops_linear_attention import U, _rng, linear_attention_inputs

F32, F16 = np.float32, np.float16
pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


@pytest.fixture(scope="module", params=[32, 64])
def libs(request, tmp_path_factory):
    warp = request.param
    return {"warp": warp, "linear_attention": compile_module(tmp_path_factory.mktemp(f"la{warp}"), "linear_attention",
                                                             warp, EXACT_FLAGS)}


def _close(got, want, dtype, f32_tol=1e-5):
    assert got.dtype == want.dtype and got.shape == want.shape
    t = dict(rtol=f32_tol, atol=f32_tol) if dtype == F32 else dict(rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(got.astype(F32), want.astype(F32), **t)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("k,dilation,act,past,length", [(4, 1, "silu", True, 1), (4, 1, "silu", True, 5),
                                                        (3, 2, "none", True, 4), (4, 1, "swish", False, 3)])
def test_causal_conv(libs, k, dilation, act, past, length, dtype):
    rng = _rng(f"conv{k}{dilation}{act}{past}{length}")
    b, c = 2, 6
    ins = [U(rng, b, c, length, dtype=dtype), U(rng, c, 1, k, dtype=dtype), U(rng, c, dtype=dtype),
           U(rng, b, c, (k - 1) * dilation, dtype=dtype) if past else None]
    views, want, ops = run_on_host(libs, "com.microsoft::CausalConvWithState", ins,
                                   dict(activation=act, dilation=dilation), n_out=2)
    assert [op.entry for op in ops] == [f"hipep_causal_conv_{'f32' if dtype == F32 else 'f16'}"]
    for g, w in zip(views, want):
        _close(g, w, dtype)


@pytest.mark.parametrize("dtype", [F32, F16])
def test_gate(libs, dtype):
    rng = _rng("gate")
    ins = [U(rng, 2, 3, 8, dtype=dtype, scale=30), U(rng, 8), -np.exp(U(rng, 8)), U(rng, 2, 3, 8, dtype=dtype, scale=6)]
    views, want, _ = run_on_host(libs, "com.microsoft::LinearAttentionGate", ins, {}, n_out=2)
    for g, w in zip(views, want):
        _close(g, w, dtype)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("heads", [(2, 2), (4, 2), (2, 4)], ids=["mha", "gqa", "more-kv-heads"])
@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
def test_linear_attention(libs, rule, heads, dtype):
    rng = _rng(f"la{rule}{heads}")
    ins = linear_attention_inputs(rng, rule, *heads, dtype=dtype)
    views, want, ops = run_on_host(libs, "com.microsoft::LinearAttention", ins,
                                   dict(q_num_heads=heads[0], kv_num_heads=heads[1], update_rule=rule), n_out=2)
    assert ops[0].grid == (heads[1], 2, 1)
    for g, w in zip(views, want):
        _close(g, w, dtype)


@pytest.mark.parametrize("name,hq,hkv,spec", [
    ("decode", 2, 2, dict(tokens=1)),
    ("no-past", 2, 2, dict(past=False)),
    ("per-key-decay", 2, 2, dict(per_key_decay=True)),
    ("shared-beta", 2, 2, dict(shared_beta=True)),
    ("qwen35-key-heads", 2, 4, dict(dk=16, dv=16, tokens=2, key_heads=2)),
    ("wide-values", 1, 1, dict(dk=32, dv=80, tokens=2)),  # more value columns than a warp
])
def test_linear_attention_forms(libs, name, hq, hkv, spec):
    rng = _rng(name)
    ins = linear_attention_inputs(rng, "gated_delta", hq, hkv, **spec)
    views, want, _ = run_on_host(libs, "com.microsoft::LinearAttention", ins,
                                 dict(q_num_heads=hq, kv_num_heads=hkv, update_rule="gated_delta"), n_out=2)
    for g, w in zip(views, want):
        _close(g, w, F32)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("act,c", [("silu", 16), ("sigmoid", 16), ("silu", 128), ("swish", 300)])
def test_gated_rms_norm(libs, act, c, dtype):
    rng = _rng(f"grn{act}{c}")
    ins = [U(rng, 2, 3, 2 * c, dtype=dtype), U(rng, c, dtype=dtype) + 1, U(rng, 2, 3, 2 * c, dtype=dtype, scale=4)]
    (y,), (want,), _ = run_on_host(libs, "com.microsoft::GatedRMSNorm", ins, dict(activation=act, epsilon=1e-6))
    _close(y, want, dtype)


def test_checks_name_what_has_no_kernel():
    la = gk.BINDINGS["com.microsoft::LinearAttention"]
    attrs = dict(q_num_heads=2, kv_num_heads=2)
    assert la.check(attrs, ["float32"] * 6, [(1, 1, 2 * 16), (1, 1, 32), (1, 1, 32)], []) is None
    assert "above 256" in la.check(attrs, ["float32"] * 3, [(1, 1, 2 * 512), (1, 1, 1024), (1, 1, 32)], [])
    assert "mixed element types" in la.check(attrs, ["float16", "float16", "float16", "float32"], [], [])
    assert "element types" in la.check(attrs, ["bfloat16"] * 3, [], [])
    conv = gk.BINDINGS["com.microsoft::CausalConvWithState"]
    assert "channels first" in conv.check(dict(channels_last=1), ["float32"] * 2, [], [])


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("k,act,past,length", [(4, "silu", True, 1), (4, "none", False, 2), (1, "swish", False, 3)])
def test_onnx_causal_conv(libs, k, act, past, length, dtype):
    rng = _rng(f"onnx-conv{k}{act}{past}{length}")
    b, c = 2, 6
    ins = [U(rng, b, c, length, dtype=dtype), U(rng, c, 1, k, dtype=dtype), U(rng, c, dtype=dtype),
           U(rng, b, c, k - 1, dtype=dtype) if past else None]
    views, want, ops = run_on_host(libs, "::CausalConvWithState", ins, dict(activation=act), n_out=2)
    assert [op.entry for op in ops] == [f"hipep_causal_conv_{'f32' if dtype == F32 else 'f16'}"]
    for g, w in zip(views, want):
        _close(g, w, dtype)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("heads", [(2, 2), (4, 2), (4, 1)], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("rule", ["linear", "gated_delta"])
def test_onnx_linear_attention(libs, rule, heads, dtype):
    rng = _rng(f"onnx-la{rule}{heads}")
    ins = linear_attention_inputs(rng, rule, *heads, dtype=dtype, per_key_decay=True)
    views, want, ops = run_on_host(libs, "::LinearAttention", ins,
                                   dict(q_num_heads=heads[0], kv_num_heads=heads[1], update_rule=rule), n_out=2)
    assert ops[0].grid == (heads[1], 2, 1)
    for g, w in zip(views, want):
        _close(g, w, dtype)


def test_binding_refuses_key_in_the_query_heads_over_fewer_kv_heads():
    """Key in q_num_heads heads is Qwen3.5's layout only where KV heads outnumber query heads; with
    more query heads the kernel would divide kv_num_heads by the larger count (0)."""
    ins = linear_attention_inputs(_rng("key-heads"), "gated_delta", 4, 2, key_heads=4)
    for key in ("::LinearAttention", "com.microsoft::LinearAttention"):
        with pytest.raises(HipepError, match=r"key \[2, 5, 32\] must hold kv_num_heads heads of 8"):
            gk.binding_for(key).bind([gk.Arg(0, a.shape, a.dtype) for a in ins], [None, None],
                                     dict(q_num_heads=4, kv_num_heads=2), None)
