"""Linear-attention contrib ops (hipep/ops/linear_attention.py: Qwen3.5's Gated DeltaNet layers)
against ONNX Runtime's CPU EP: CausalConvWithState, LinearAttentionGate, LinearAttention (every
update rule; query heads over KV heads, equal, and fewer, as Qwen3.5 has; per-head and per-key decay;
with and without past state) and GatedRMSNorm, in f32 and f16, each through the shared single-node
harness (reference against ORT, the claim, the shape rule on static and partial shapes). A release
without an op has nothing to compare with: its cases skip."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from hipep.errors import RuntimeShapeError
from hipep.ops import check_node, lookup

from unit.test_ops_attention import MS, check, node_of, ort_has

f32, f16 = np.float32, np.float16
# (op, since-version) pairs compared here, for test_ops_reference's coverage guard
COVERED = [("CausalConvWithState", 1), ("LinearAttentionGate", 1), ("LinearAttention", 1), ("GatedRMSNorm", 1)]


def _rng(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


def U(rng, *shape, dtype=f32, scale=1.0):
    return (rng.uniform(-1, 1, shape) * scale).astype(dtype)


def _needs(op):
    return pytest.mark.skipif(not ort_has(op), reason=f"this onnxruntime has no {op} to compare with")


# ---- CausalConvWithState ---------------------------------------------------------------------------

@_needs("CausalConvWithState")
@pytest.mark.parametrize("dtype", [f32, f16])
@pytest.mark.parametrize("name,k,dilation,act,past,bias,length", [
    ("decode-silu", 4, 1, "silu", True, True, 1),     # a decode step, as Qwen3.5 runs it
    ("prefill-silu", 4, 1, "silu", True, True, 7),
    ("no-past", 4, 1, "none", False, True, 5),
    ("no-bias-swish", 3, 1, "swish", True, False, 4),
    ("dilated", 3, 2, "silu", True, True, 6),
    ("kernel-one", 1, 1, "none", False, False, 3),
])
def test_causal_conv_with_state(name, k, dilation, act, past, bias, length, dtype):
    rng = _rng(name)
    b, c = 2, 6
    ins = [U(rng, b, c, length, dtype=dtype), U(rng, c, 1, k, dtype=dtype), U(rng, c, dtype=dtype) if bias else None,
           U(rng, b, c, (k - 1) * dilation, dtype=dtype) if past else None]
    while ins[-1] is None:
        ins.pop()
    check("CausalConvWithState", ins, dict(activation=act, dilation=dilation), n_out=2, domain=MS)


# ---- LinearAttentionGate ---------------------------------------------------------------------------

@_needs("LinearAttentionGate")
@pytest.mark.parametrize("dtype", [f32, f16])
def test_linear_attention_gate(dtype):
    rng = _rng("gate")
    # a spread wide enough for softplus' both tails
    ins = [U(rng, 2, 3, 8, dtype=dtype, scale=30), U(rng, 8), -np.exp(U(rng, 8)), U(rng, 2, 3, 8, dtype=dtype, scale=6)]
    check("LinearAttentionGate", ins, {}, n_out=2, domain=MS)


# ---- LinearAttention -------------------------------------------------------------------------------

def linear_attention_inputs(rng, rule, hq, hkv, dtype=f32, batch=2, tokens=5, dk=8, dv=6, past=True,
                            per_key_decay=False, shared_beta=False, key_heads=None):
    key_heads = key_heads or hkv

    def unit_keys(k):  # key vectors L2-normalized, as the delta rules expect
        k4 = k.astype(f32).reshape(batch, tokens, key_heads, dk)
        return (k4 / np.linalg.norm(k4, axis=-1, keepdims=True)).reshape(batch, tokens, -1).astype(dtype)

    decay_width = hkv * dk if per_key_decay else hkv
    ins = [U(rng, batch, tokens, hq * dk, dtype=dtype), unit_keys(U(rng, batch, tokens, key_heads * dk)),
           U(rng, batch, tokens, hkv * dv, dtype=dtype), U(rng, batch, hkv, dk, dv, dtype=dtype) if past else None,
           (-rng.uniform(0.01, 1, (batch, tokens, decay_width))).astype(dtype) if "gated" in rule else None,
           rng.uniform(0, 1, (batch, tokens, 1 if shared_beta else hkv)).astype(dtype) if "delta" in rule else None]
    while ins[-1] is None:
        ins.pop()
    return ins


@_needs("LinearAttention")
@pytest.mark.parametrize("dtype", [f32, f16])
@pytest.mark.parametrize("heads", [(2, 2), (4, 2), (2, 4)], ids=["mha", "gqa", "more-kv-heads"])
@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
def test_linear_attention(rule, heads, dtype):
    rng = _rng(f"{rule}{heads}")
    ins = linear_attention_inputs(rng, rule, *heads, dtype=dtype)
    check("LinearAttention", ins, dict(q_num_heads=heads[0], kv_num_heads=heads[1], update_rule=rule), n_out=2,
          domain=MS)


@_needs("LinearAttention")
@pytest.mark.parametrize("name,spec,attrs", [
    ("decode", dict(tokens=1), {}),
    ("no-past", dict(past=False), {}),
    ("per-key-decay", dict(per_key_decay=True), {}),
    ("shared-beta", dict(shared_beta=True), {}),
    ("scale", dict(tokens=3), dict(scale=0.5)),
    ("qwen35-heads", dict(dk=16, dv=16, tokens=3), {}),  # 16 query-key heads over 32 value heads, halved
    ("qwen35-key-heads", dict(dk=16, dv=16, tokens=3, key_heads=8), {}),  # ... with key in the query's heads
])
def test_linear_attention_forms(name, spec, attrs):
    rng = _rng(name)
    hq, hkv = (8, 16) if name.startswith("qwen35") else (2, 2)
    ins = linear_attention_inputs(rng, "gated_delta", hq, hkv, **spec)
    check("LinearAttention", ins, dict(q_num_heads=hq, kv_num_heads=hkv, update_rule="gated_delta", **attrs),
          n_out=2, domain=MS)


# ---- GatedRMSNorm ----------------------------------------------------------------------------------

@_needs("GatedRMSNorm")
@pytest.mark.parametrize("dtype", [f32, f16])
@pytest.mark.parametrize("act", ["silu", "swish", "sigmoid"])
def test_gated_rms_norm(act, dtype):
    rng = _rng(act)
    ins = [U(rng, 2, 3, 4 * 16, dtype=dtype), U(rng, 16, dtype=dtype) + 1, U(rng, 2, 3, 64, dtype=dtype, scale=4)]
    check("GatedRMSNorm", ins, dict(activation=act, epsilon=1e-6), domain=MS)


# ---- errors and claims -----------------------------------------------------------------------------

def _reference(op, ins, **attrs):
    opdef = lookup(MS, op)
    from hipep.ops.registry import REQUIRED

    full = {k: v for k, v in opdef.attributes.items() if v is not REQUIRED}
    return opdef.reference(ins, {**full, "_num_outputs": len(opdef.outputs), **attrs})


def test_errors_name_the_shapes():
    rng = _rng("errors")
    ins = linear_attention_inputs(rng, "gated_delta", 2, 2)
    with pytest.raises(RuntimeShapeError, match=r"past_state must be \[batch, kv_num_heads, d_k, d_v\] = "
                                                r"\[2, 2, 8, 6\]"):
        _reference("LinearAttention", ins[:3] + [ins[3][:, :, :4]] + ins[4:], q_num_heads=2, kv_num_heads=2)
    with pytest.raises(RuntimeShapeError, match="'gated_delta' needs the decay input"):
        _reference("LinearAttention", ins[:4], q_num_heads=2, kv_num_heads=2)
    with pytest.raises(RuntimeShapeError, match="q_num_heads=3 and kv_num_heads=2"):
        _reference("LinearAttention", ins, q_num_heads=3, kv_num_heads=2)
    conv = [U(rng, 1, 4, 3), U(rng, 4, 1, 3), None, U(rng, 1, 4, 3)]
    with pytest.raises(RuntimeShapeError, match=r"past_state must be \[batch, channels, \(k - 1\) \* dilation\] = "
                                                r"\[1, 4, 2\], got \[1, 4, 3\]"):
        _reference("CausalConvWithState", conv)
    with pytest.raises(RuntimeShapeError, match="multiple of scale's length 16"):
        _reference("GatedRMSNorm", [U(rng, 2, 24), U(rng, 16), U(rng, 2, 24)])


def test_claims_name_what_is_not_implemented():
    rng = _rng("claims")
    conv = [U(rng, 1, 4, 3), U(rng, 4, 1, 3)]
    for attrs, needle in ((dict(ndim=2), "ndim=2"), (dict(channels_last=1), "channels_last=1"),
                          (dict(state_window=2), "state_window=2"), (dict(activation="gelu"), "activation='gelu'")):
        node, graph, _ = node_of("CausalConvWithState", conv, attrs, 2, MS, 21)
        assert needle in check_node(node, graph)
    ins = linear_attention_inputs(rng, "gated_delta", 2, 2)
    node, graph, _ = node_of("LinearAttention", ins, dict(q_num_heads=2, kv_num_heads=2, state_window=1), 2, MS, 21)
    assert "state_window=1" in check_node(node, graph)
    node, graph, _ = node_of("LinearAttention", ins, dict(q_num_heads=2, kv_num_heads=2, update_rule="rwkv"), 2, MS, 21)
    assert "update_rule='rwkv'" in check_node(node, graph)
    node, graph, _ = node_of("GatedRMSNorm", [U(rng, 2, 16), U(rng, 16), U(rng, 2, 16)], dict(activation="relu"), 1,
                             MS, 21)
    assert "activation='relu'" in check_node(node, graph)
