"""Linear-attention contrib ops (hipep/ops/linear_attention.py: Qwen3.5's Gated DeltaNet layers)
against ONNX Runtime's CPU EP: CausalConvWithState, LinearAttentionGate, LinearAttention (every
update rule; query heads over KV heads, equal, and fewer, as Qwen3.5 has; per-head and per-key decay;
with and without past state) and GatedRMSNorm, in f32 and f16, each through the shared single-node
harness (reference against ORT, the claim, the shape rule on static and partial shapes); the ai.onnx
(opset 27) CausalConvWithState and LinearAttention the same way, and through an onnxruntime session
on hipep's CPU device. A release without an op has nothing to compare with: its cases skip."""
from __future__ import annotations

import zlib

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

from hipep.errors import RuntimeShapeError
from hipep.graph import GraphView
from hipep.ops import check_node, lookup
from hipep.partition import partition

from helpers import assert_matches_cpu, assignment, cpu_ep, make_model, session, tensor
from unit.test_ops_attention import MS, build, check, node_of, ort_has

f32, f16 = np.float32, np.float16
# (op, since-version) pairs compared here, for test_ops_reference's coverage guard
COVERED = [("CausalConvWithState", 1), ("LinearAttentionGate", 1), ("LinearAttention", 1), ("GatedRMSNorm", 1),
           ("CausalConvWithState", 27), ("LinearAttention", 27)]


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
                            per_key_decay=False, shared_beta=False, key_heads=None, state_dtype=None):
    key_heads = key_heads or hkv

    def unit_keys(k):  # key vectors L2-normalized, as the delta rules expect
        k4 = k.astype(f32).reshape(batch, tokens, key_heads, dk)
        return (k4 / np.linalg.norm(k4, axis=-1, keepdims=True)).reshape(batch, tokens, -1).astype(dtype)

    decay_width = hkv * dk if per_key_decay else hkv
    ins = [U(rng, batch, tokens, hq * dk, dtype=dtype), unit_keys(U(rng, batch, tokens, key_heads * dk)),
           U(rng, batch, tokens, hkv * dv, dtype=dtype),
           U(rng, batch, hkv, dk, dv, dtype=state_dtype or dtype) if past else None,
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

def _reference(op, ins, domain=MS, **attrs):
    opdef = lookup(domain, op)
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


# ---- ai.onnx (opset 27): the standard's subsets of the contrib ops --------------------------------

ONNX = ""  # the default domain
ONNX_OPSET = 27


def _needs_onnx(op):
    return pytest.mark.skipif(not ort_has(op, ONNX), reason=f"this onnxruntime has no ai.onnx {op} to compare with")


@_needs_onnx("CausalConvWithState")
@pytest.mark.parametrize("dtype", [f32, f16])
@pytest.mark.parametrize("name,k,act,past,bias,length", [
    ("decode-silu", 4, "silu", True, True, 1),
    ("prefill-swish", 4, "swish", True, False, 7),
    ("no-past", 3, "none", False, True, 5),
    ("shorter-than-state", 4, "none", False, False, 2),  # present_state keeps zero padding
    ("kernel-one", 1, "silu", False, True, 3),  # an empty state
])
def test_onnx_causal_conv_with_state(name, k, act, past, bias, length, dtype):
    rng = _rng(f"onnx-{name}")
    b, c = 2, 6
    ins = [U(rng, b, c, length, dtype=dtype), U(rng, c, 1, k, dtype=dtype), U(rng, c, dtype=dtype) if bias else None,
           U(rng, b, c, k - 1, dtype=dtype) if past else None]
    while ins[-1] is None:
        ins.pop()
    check("CausalConvWithState", ins, dict(activation=act), n_out=2, domain=ONNX, opset=ONNX_OPSET)


@_needs_onnx("LinearAttention")
@pytest.mark.parametrize("dtype", [f32, f16])
@pytest.mark.parametrize("heads", [(2, 2), (4, 2), (4, 1)], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
def test_onnx_linear_attention(rule, heads, dtype):
    rng = _rng(f"onnx-{rule}{heads}")
    ins = linear_attention_inputs(rng, rule, *heads, dtype=dtype, per_key_decay=True)
    check("LinearAttention", ins, dict(q_num_heads=heads[0], kv_num_heads=heads[1], update_rule=rule), n_out=2,
          domain=ONNX, opset=ONNX_OPSET)


@_needs_onnx("LinearAttention")
@pytest.mark.parametrize("name,spec,attrs", [
    ("decode", dict(tokens=1), {}),
    ("no-past", dict(past=False), {}),
    ("per-head-decay", {}, {}),
    ("shared-beta", dict(shared_beta=True), {}),
    ("scale", dict(tokens=3), dict(scale=0.5)),
    ("chunk-size", dict(tokens=3), dict(chunk_size=2)),  # a tuning hint: the result does not change
    ("f32-state", dict(dtype=f16, state_dtype=f32), {}),  # S wider than T: present_state follows past_state
    ("f16-state", dict(state_dtype=f16), {}),
])
def test_onnx_linear_attention_forms(name, spec, attrs):
    rng = _rng(f"onnx-{name}")
    ins = linear_attention_inputs(rng, "gated_delta", 4, 2, **spec)
    check("LinearAttention", ins, dict(q_num_heads=4, kv_num_heads=2, **attrs), n_out=2, domain=ONNX,
          opset=ONNX_OPSET)


def _gated_deltanet_model(elem, state_elem, b, hq, hkv, dk, dv, k):
    """x [batch, channels, tokens] -> CausalConvWithState -> Transpose -> Split into query, key,
    value -> LinearAttention (gated_delta): the two ai.onnx ops as a Gated DeltaNet layer chains
    them, batch and tokens symbolic; both states are inputs and outputs, as a decode loop carries
    them."""
    widths = [hq * dk, hkv * dk, hkv * dv]
    c = sum(widths)
    nodes = [helper.make_node("CausalConvWithState", ["x", "conv_w", "conv_b", "conv_past"], ["conv_y", "conv_present"],
                              activation="silu", name="conv"),
             helper.make_node("Transpose", ["conv_y"], ["qkv"], perm=[0, 2, 1], name="to_tokens"),
             helper.make_node("Split", ["qkv", "widths"], ["q", "k", "v"], axis=2, name="split"),
             helper.make_node("LinearAttention", ["q", "k", "v", "la_past", "decay", "beta"], ["out", "la_present"],
                              q_num_heads=hq, kv_num_heads=hkv, name="linear_attention")]
    inputs = [tensor("x", elem, ["batch", c, "tokens"]), tensor("conv_w", elem, [c, 1, k]),
              tensor("conv_b", elem, [c]), tensor("conv_past", elem, ["batch", c, k - 1]),
              tensor("la_past", state_elem, ["batch", hkv, dk, dv]), tensor("decay", elem, ["batch", "tokens", hkv]),
              tensor("beta", elem, ["batch", "tokens", hkv])]
    outputs = [tensor("out", elem, ["batch", "tokens", hq * dv]), tensor("la_present", state_elem, None),
               tensor("conv_present", elem, None)]
    inits = [helper.make_tensor("widths", TP.INT64, [3], widths)]
    return make_model(nodes, inputs, outputs, inits, opset=ONNX_OPSET)


@_needs_onnx("LinearAttention")
@pytest.mark.parametrize("dtype,state_dtype", [(f32, f32), (f16, f16), (f16, f32)],
                         ids=["f32", "f16", "f16-f32-state"])
def test_onnx_ops_in_an_ort_session_follow_the_cpu_ep(dtype, state_dtype):
    """Prefill, then decode steps feeding each step's states back: every node on hipep's CPU
    device (fallback off), each step's outputs ORT's CPU EP's."""
    b, hq, hkv, dk, dv, k = 2, 4, 2, 8, 6, 4
    elem, state_elem = (helper.np_dtype_to_tensor_dtype(np.dtype(d)) for d in (dtype, state_dtype))
    model = _gated_deltanet_model(elem, state_elem, b, hq, hkv, dk, dv, k)
    sess = session(model, disable_fallback=True)
    assert set(assignment(sess)) == {cpu_ep()}
    rng = _rng(f"session{np.dtype(dtype)}{np.dtype(state_dtype)}")
    c = hq * dk + hkv * dk + hkv * dv
    weights = {"conv_w": U(rng, c, 1, k, dtype=dtype, scale=0.5), "conv_b": U(rng, c, dtype=dtype, scale=0.1)}
    states = {"conv_past": U(rng, b, c, k - 1, dtype=dtype), "la_past": U(rng, b, hkv, dk, dv, dtype=state_dtype)}
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == f32 else dict(rtol=1e-2, atol=1e-2)
    for tokens in (5, 1, 1):
        feeds = {**weights, **states, "x": U(rng, b, c, tokens, dtype=dtype),
                 "decay": (-rng.uniform(0.01, 1, (b, tokens, hkv))).astype(dtype),
                 "beta": rng.uniform(0, 1, (b, tokens, hkv)).astype(dtype)}
        out, la_present, conv_present = assert_matches_cpu(sess, model, feeds, **tol)
        assert out.shape == (b, tokens, hq * dv) and la_present.dtype == state_dtype
        states = {"conv_past": conv_present, "la_past": la_present}


def test_onnx_references_refuse_what_the_standard_does_not_define():
    rng = _rng("onnx-errors")
    ins = linear_attention_inputs(rng, "gated_delta", 2, 4)
    with pytest.raises(RuntimeShapeError, match="q_num_heads=2 must be a positive multiple of kv_num_heads=4"):
        _reference("LinearAttention", ins, ONNX, q_num_heads=2, kv_num_heads=4)
    ins = linear_attention_inputs(rng, "linear", 2, 2) + [None, None]
    ins[4] = np.zeros((2, 5, 2), f32)
    with pytest.raises(RuntimeShapeError, match=r"input 4 \(decay\) is given, but update_rule 'linear' takes none"):
        _reference("LinearAttention", ins, ONNX, q_num_heads=2, kv_num_heads=2, update_rule="linear")
    # key in the query's head count: not the standard's layout (nor, with more query heads than KV
    # heads, the contrib op's: ORT's CPU EP refuses it too)
    ins = linear_attention_inputs(rng, "gated_delta", 4, 2, key_heads=4)
    for domain in (ONNX, MS):
        with pytest.raises(RuntimeShapeError, match=r"key \[2, 5, 32\] must have kv_num_heads=2 heads of d_k = 8"):
            _reference("LinearAttention", ins, domain, q_num_heads=4, kv_num_heads=2)
    conv = [U(rng, 1, 4, 3), U(rng, 4, 1, 3), None, U(rng, 1, 4, 4)]
    with pytest.raises(RuntimeShapeError, match=r"past_state must be \[batch, channels, k - 1\] = \[1, 4, 2\], "
                                                r"got \[1, 4, 4\]"):
        _reference("CausalConvWithState", conv, ONNX)


def _onnx_claim(op, ins, attrs, n_out=2, out_dtypes=None):
    node, graph, _ = node_of(op, ins, attrs, n_out, ONNX, ONNX_OPSET, out_dtypes)
    return check_node(node, graph)


def test_onnx_claims_name_what_the_standard_does_not_define():
    rng = _rng("onnx-claims")
    conv = [U(rng, 1, 4, 3), U(rng, 4, 1, 3)]
    assert _onnx_claim("CausalConvWithState", conv, {}) is None
    for attrs, needle in ((dict(dilation=2), "attribute 'dilation' is not supported"),
                          (dict(ndim=1), "attribute 'ndim' is not supported"),
                          (dict(activation="gelu"), "activation='gelu' is not one of none, silu, swish")):
        assert needle in _onnx_claim("CausalConvWithState", conv, attrs)
    assert "output 1 (present_state) is missing" in _onnx_claim("CausalConvWithState", conv, {}, n_out=1)
    assert "input rank 4" in _onnx_claim("CausalConvWithState", [U(rng, 1, 4, 3, 1), U(rng, 4, 1, 3)], {})

    heads = dict(q_num_heads=2, kv_num_heads=2)
    gd = linear_attention_inputs(rng, "gated_delta", 2, 2)
    assert _onnx_claim("LinearAttention", gd, heads) is None
    for ins, attrs, needle in (
            (linear_attention_inputs(rng, "gated_delta", 2, 4), dict(q_num_heads=2, kv_num_heads=4),
             "q_num_heads=2 must be a positive multiple of kv_num_heads=4"),
            (gd, dict(heads, state_window=1), "attribute 'state_window' is not supported"),
            (gd, dict(heads, update_rule="rwkv"), "update_rule='rwkv' is not one of"),
            (gd[:4], heads, "update_rule 'gated_delta' needs input 4 (decay)"),
            (gd[:5], heads, "update_rule 'gated_delta' needs input 5 (beta)"),
            (gd, dict(heads, update_rule="linear"), "input 4 (decay) is given, but update_rule 'linear' takes none"),
            (gd, dict(heads, update_rule="gated"), "input 5 (beta) is given, but update_rule 'gated' takes none"),
            (gd[:3] + [gd[3][0]] + gd[4:], heads, "input 3 (past_state) has rank 3"),
    ):
        assert needle in _onnx_claim("LinearAttention", ins, attrs), needle
    assert "output 1 (present_state) is missing" in _onnx_claim("LinearAttention", gd, heads, n_out=1)
    half = [None if a is None else a.astype(f16) for a in linear_attention_inputs(rng, "gated_delta", 2, 2, past=False)]
    why = _onnx_claim("LinearAttention", half, heads, out_dtypes=[f16, f32])
    assert "output 1 (present_state) is f32 but without past_state it has the query's type f16" in why
    bf16 = [None if a is None else a.astype(ml_dtypes.bfloat16) for a in gd]
    assert "element type bf16; supported: f16, f32" in _onnx_claim("LinearAttention", bf16, heads)


def _cuda_rejections(op, ins, attrs, out_dtypes):
    report = partition(GraphView.from_onnx(build(op, ins, attrs, len(out_dtypes), ONNX, ONNX_OPSET, out_dtypes)),
                       device="cuda")
    return [r.reason for r in report.rejections]


@pytest.mark.parametrize("dtype", [f32, f16])
def test_cuda_device_claims_the_onnx_ops(dtype):
    rng = _rng("onnx-cuda")
    conv = [U(rng, 2, 6, 3, dtype=dtype), U(rng, 6, 1, 4, dtype=dtype), U(rng, 6, dtype=dtype),
            U(rng, 2, 6, 3, dtype=dtype)]
    assert _cuda_rejections("CausalConvWithState", conv, dict(activation="silu"), [dtype, dtype]) == []
    heads = dict(q_num_heads=4, kv_num_heads=2)
    ins = linear_attention_inputs(rng, "gated_delta", 4, 2, dtype=dtype)
    assert _cuda_rejections("LinearAttention", ins, heads, [dtype, dtype]) == []
    # a state type other than the activations' is the CPU device's only (the kernel keeps one type)
    ins = linear_attention_inputs(rng, "gated_delta", 4, 2, dtype=dtype, state_dtype=f16 if dtype == f32 else f32)
    (why,) = _cuda_rejections("LinearAttention", ins, heads, [dtype, ins[3].dtype])
    assert "no kernel for cuda: LinearAttention (mixed element types" in why
