"""Linear-attention contrib ops (com.microsoft), what onnxruntime-genai's model builder emits for
Gated DeltaNet layers (Qwen3.5's linear attention; the convolution also serves Mamba-style models):
CausalConvWithState, LinearAttentionGate, LinearAttention and GatedRMSNorm, as ONNX Runtime's CPU
EP computes them (the oracle; f32 arithmetic throughout, f16 in and out converted once). ONNX
standardised CausalConvWithState and LinearAttention in opset 27 (ai.onnx) as subsets of the
contrib forms, so those entries share the contrib references, their claims admitting only what the
standard defines (noted per op below).

  * CausalConvWithState (ndim 1): a depthwise causal convolution over [B, C, L] whose left context
    is past_state [B, C, k - 1] (zeros without it): y[t] = bias + sum_j w[j] * x'[t + j] over
    x' = past_state ++ input, then the optional SiLU; present_state is x''s last k - 1 columns.
    Dilation d spaces the taps (the state then holds (k - 1) * d columns). The ai.onnx op has no
    dilation (d = 1), no ndim, no layout or state-window attributes and no state_update output.
  * LinearAttentionGate: decay = decay_scale * softplus(a + dt_bias), beta = sigmoid(b).
  * LinearAttention: the recurrence of its update_rule over the tokens in order, per KV head, from
    past_state [B, H_kv, d_k, d_v] (zeros without it); output o_t = scale * q_t^T S_t. Query head i
    reads KV head i // (H_q / H_kv); where H_kv exceeds H_q (Qwen3.5: 16 query-key heads, 32 value
    heads), each KV head j reads query head j // (H_kv / H_q) and gives one output head, and key
    may have the query's head count (KV head j then reads key head j // (H_kv / H_q)). The ai.onnx
    op has the query-over-KV layout only (q_num_heads a multiple of kv_num_heads, key in
    kv_num_heads heads) and no state_window; its type inference refuses a decay or beta input the
    update rule does not read as well as a missing one it does, and the state's type S differs
    from the activations' T only through past_state (without it present_state is T).
  * GatedRMSNorm: groups of C = len(scale) elements RMS-normalized, times scale, times the gate's
    activation (silu or sigmoid).
"""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ._common import at, elem_of, input_type, kernel, pshape_str, result, shape_of, shape_rule, shape_str, tensor_type
from .contrib_attention import _f32
from .registry import F32, FLOATS, OUTPUT_COUNT, REQUIRED, OpDef, register

MS = "com.microsoft"
f32 = np.float32
f64 = np.float64
F32S = frozenset({F32})


def _silu(x):
    return (x / (f32(1) + np.exp(-x))).astype(f32)


def _sigmoid(x):
    return (f32(1) / (f32(1) + np.exp(-x))).astype(f32)


# ---- CausalConvWithState ------------------------------------------------------------------------

CONV = "CausalConvWithState"
_CONV_ACTS = ("none", "silu", "swish")


def _dilation(attrs) -> int:
    # the ai.onnx op has no dilation attribute: its taps are adjacent
    return int(attrs.get("dilation", 1))


@kernel(CONV)
def _causal_conv(inputs, attrs):
    x, w, bias, past = inputs[0], inputs[1], at(inputs, 2), at(inputs, 3)
    op = CONV
    if x.ndim != 3:
        raise RuntimeShapeError(f"{op}: input must be 3-D [batch, channels, length], got {shape_str(x.shape)}")
    b, c, length = x.shape
    if w.ndim != 3 or w.shape[0] != c or w.shape[1] != 1:
        raise RuntimeShapeError(f"{op}: weight must be [channels={c}, 1, k], got {shape_str(w.shape)}")
    k, d = w.shape[2], _dilation(attrs)
    if k < 1 or d < 1:
        raise RuntimeShapeError(f"{op}: kernel size {k} and dilation {d} must be positive")
    keep = (k - 1) * d
    if bias is not None and bias.shape != (c,):
        raise RuntimeShapeError(f"{op}: bias must be [channels] = [{c}], got {shape_str(bias.shape)}")
    if past is not None and past.shape != (b, c, keep):
        state = "(k - 1) * dilation" if "dilation" in attrs else "k - 1"
        raise RuntimeShapeError(f"{op}: past_state must be [batch, channels, {state}] = "
                                f"{shape_str((b, c, keep))}, got {shape_str(past.shape)}")
    xp = np.concatenate([_f32(past) if past is not None else np.zeros((b, c, keep), f32), _f32(x)], axis=2)
    wf = _f32(w)[:, 0, :]
    acc = np.zeros((b, c, length), f64)
    for j in range(k):
        acc += wf[None, :, j, None].astype(f64) * xp[:, :, j * d:j * d + length]
    y = acc.astype(f32)
    if bias is not None:
        y = (y + _f32(bias)[None, :, None]).astype(f32)
    if attrs["activation"] in ("silu", "swish"):
        y = _silu(y)
    present = xp[:, :, xp.shape[2] - keep:]
    return [result(y, x.dtype), result(present, x.dtype)]


@shape_rule(CONV, symbolic=True)
def _causal_conv_shape(types, values, attrs, num_outputs):
    x, w = shape_of(types[0]), shape_of(types[1])
    if x is not None and len(x) != 3:
        raise RuntimeShapeError(f"{CONV}: input must be 3-D [batch, channels, length], got {pshape_str(x)}")
    state = None
    if x is not None and w is not None and len(w) == 3 and w[2] is not None:
        state = (x[0], x[1], (w[2] - 1) * _dilation(attrs))
    elem = elem_of(types[0])
    return [tensor_type(elem, x), tensor_type(elem, state)]


def _conv_reason(node, graph, attrs):
    """What both domains' claims check: the activation, a 3-D input."""
    if attrs["activation"] not in _CONV_ACTS:
        return f"attribute activation='{attrs['activation']}' is not one of {', '.join(_CONV_ACTS)}"
    t = input_type(node, graph, 0)
    if t is not None and t.rank is not None and t.rank != 3:
        return f"input rank {t.rank} is not supported (3-D [batch, channels, length])"
    return None


def _claim_causal_conv(node, graph, attrs):
    if int(attrs["ndim"]) != 1:
        return f"attribute ndim={attrs['ndim']} is not implemented (1 only)"
    for name, default in (("channels_last", 0), ("state_window", 0), ("state_update_capacity", 0),
                          ("state_length", 0), ("input_channel_offset", 0), ("input_channels", 0),
                          ("state_channels_last", -1)):
        if int(attrs[name]) != default:
            return f"attribute {name}={attrs[name]} is not implemented (only {default})"
    if len([o for o in node.outputs[2:] if o]):
        return "the state_update output is not implemented"
    return _conv_reason(node, graph, attrs)


register(OpDef(CONV, (1,), ("T", "T", "T", "T"), ("T", "T", "T"), {"T": FLOATS}, _causal_conv, domain=MS,
               attributes={"dilation": 1, "ndim": 1, "activation": "none", "state_update_capacity": 0,
                           "state_channels_last": -1, "state_window": 0, "state_length": 0,
                           "input_channel_offset": 0, "channels_last": 0, "input_channels": 0},
               claim=_claim_causal_conv, min_inputs=2, shape_rule=_causal_conv_shape))


def _missing_output(node, op, names):
    """A reason when one of the outputs `names` (by position) is absent: the ai.onnx schemas make
    both outputs required, so a node without one is not the standard op."""
    for i, name in enumerate(names):
        if i >= len(node.outputs) or not node.outputs[i]:
            return f"output {i} ({name}) is missing; ai.onnx::{op} requires it"
    return None


def _claim_onnx_causal_conv(node, graph, attrs):
    """Every form the standard defines (f16 and f32)."""
    return _missing_output(node, CONV, ("output", "present_state")) or _conv_reason(node, graph, attrs)


register(OpDef(CONV, (27,), ("T", "T", "T", "T"), ("T", "T"), {"T": FLOATS}, _causal_conv,
               attributes={"activation": "none"}, claim=_claim_onnx_causal_conv, min_inputs=2,
               shape_rule=_causal_conv_shape))


# ---- LinearAttentionGate ------------------------------------------------------------------------

GATE = "LinearAttentionGate"


def _softplus(x):
    # log(1 + exp(x)) without overflow: x + log1p(exp(-x)) for large x
    return np.where(x > 0, x + np.log1p(np.exp(-np.abs(x))), np.log1p(np.exp(x))).astype(f32)


@kernel(GATE)
def _gate(inputs, attrs):
    a, dt_bias, scale, b = inputs[0], inputs[1], inputs[2], at(inputs, 3)
    h = a.shape[-1] if a.ndim else 0
    for name, v in (("dt_bias", dt_bias), ("decay_scale", scale)):
        if v.size != h:
            raise RuntimeShapeError(f"{GATE}: {name} must be [heads] = [{h}] (a's last dim), got {shape_str(v.shape)}")
    if b is not None and b.shape != a.shape:
        raise RuntimeShapeError(f"{GATE}: b must have a's shape {shape_str(a.shape)}, got {shape_str(b.shape)}")
    decay = (_f32(scale).reshape(h) * _softplus((_f32(a) + _f32(dt_bias).reshape(h)).astype(f32))).astype(f32)
    out = [result(decay, a.dtype)]
    if attrs.get(OUTPUT_COUNT, 2) > 1:
        if b is None:
            raise RuntimeShapeError(f"{GATE}: the beta output needs input b")
        out.append(result(_sigmoid(_f32(b)), a.dtype))
    return out


@shape_rule(GATE, symbolic=True)
def _gate_shape(types, values, attrs, num_outputs):
    a = shape_of(types[0])
    elem = elem_of(types[0])
    return [tensor_type(elem, a), tensor_type(elem, a)]


register(OpDef(GATE, (1,), ("T", "TF", "TF", "T"), ("T", "T"), {"T": FLOATS, "TF": F32S}, _gate, domain=MS,
               attributes={}, min_inputs=3, shape_rule=_gate_shape))


# ---- LinearAttention ----------------------------------------------------------------------------

LIN = "LinearAttention"
_RULES = ("linear", "gated", "delta", "gated_delta")


def key_head_counts(hq: int, hkv: int) -> tuple[int, ...]:
    """The head counts key may have: kv_num_heads, or with more KV heads than query heads the
    query's (each KV head then reads key head j // (H_kv / H_q))."""
    return (hkv, hq) if hkv > hq else (hkv,)


def _heads(op, x, heads, what):
    if x.ndim != 3 or heads <= 0 or x.shape[2] % heads:
        raise RuntimeShapeError(f"{op}: {what} must be 3-D [batch, tokens, heads * dim] with {heads} heads, "
                                f"got {shape_str(x.shape)}")
    b, t, width = x.shape
    return _f32(x).reshape(b, t, heads, width // heads)


@kernel(LIN)
def _linear_attention(inputs, attrs):
    op = LIN
    q, k, v, past, decay, beta = (at(inputs, i) for i in range(6))
    hq, hkv = int(attrs["q_num_heads"]), int(attrs["kv_num_heads"])
    rule = attrs["update_rule"]
    if rule not in _RULES:
        raise RuntimeShapeError(f"{op}: update_rule '{rule}' is not one of {', '.join(_RULES)}")
    if hq <= 0 or hkv <= 0 or (hq % hkv and hkv % hq):
        raise RuntimeShapeError(f"{op}: q_num_heads={hq} and kv_num_heads={hkv} must be positive, one a multiple "
                                f"of the other")
    q4, v4 = _heads(op, q, hq, "query"), _heads(op, v, hkv, "value")
    b, t, _, dk = q4.shape
    dv = v4.shape[3]
    # key has kv_num_heads heads, or (more KV heads than query heads: Qwen3.5) as many as query
    nk = k.shape[2] // dk if k.ndim == 3 and dk else 0
    if nk not in key_head_counts(hq, hkv) or nk * dk != k.shape[2]:
        heads = f"kv_num_heads={hkv}" + (f" (or q_num_heads={hq})" if hkv > hq else "")
        raise RuntimeShapeError(f"{op}: key {shape_str(k.shape)} must have {heads} heads of d_k = {dk} (query's)")
    k4 = _heads(op, k, nk, "key")
    if k4.shape[:2] != (b, t) or v4.shape[:2] != (b, t):
        raise RuntimeShapeError(f"{op}: query {shape_str(q.shape)}, key {shape_str(k.shape)} and value "
                                f"{shape_str(v.shape)} disagree on batch or tokens")
    k4 = k4[:, :, np.arange(hkv) // (hkv // nk)]  # each KV head's key
    if past is not None and past.shape != (b, hkv, dk, dv):
        raise RuntimeShapeError(f"{op}: past_state must be [batch, kv_num_heads, d_k, d_v] = "
                                f"{shape_str((b, hkv, dk, dv))}, got {shape_str(past.shape)}")
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gated:
        if decay is None:
            raise RuntimeShapeError(f"{op}: update_rule '{rule}' needs the decay input")
        if decay.shape not in ((b, t, hkv), (b, t, hkv * dk)):
            raise RuntimeShapeError(f"{op}: decay must be [batch, tokens, kv_num_heads] or [.., kv_num_heads * d_k] "
                                    f"= {shape_str((b, t, hkv))} or {shape_str((b, t, hkv * dk))}, got "
                                    f"{shape_str(decay.shape)}")
        g = _f32(decay).reshape(b, t, hkv, -1)  # [.., 1] per head or [.., d_k] per key dimension
    if delta:
        if beta is None:
            raise RuntimeShapeError(f"{op}: update_rule '{rule}' needs the beta input")
        if beta.shape not in ((b, t, hkv), (b, t, 1)):
            raise RuntimeShapeError(f"{op}: beta must be [batch, tokens, kv_num_heads] or [batch, tokens, 1], got "
                                    f"{shape_str(beta.shape)}")
        bt = np.broadcast_to(_f32(beta), (b, t, hkv))
    scale = f32(attrs["scale"]) or f32(1.0 / np.sqrt(dk))
    state = _f32(past).copy() if past is not None else np.zeros((b, hkv, dk, dv), f32)
    heads = max(hq, hkv)
    # which query head and which KV head each output head reads
    q_of = np.arange(heads) // (hkv // hq) if hkv > hq else np.arange(heads)
    kv_of = np.arange(heads) // (hq // hkv) if hq >= hkv else np.arange(heads)
    out = np.zeros((b, t, heads, dv), f32)
    for s in range(t):
        kt, vt = k4[:, s], v4[:, s]  # [B, Hkv, dk], [B, Hkv, dv]
        if gated:
            state = (np.exp(g[:, s])[..., None] * state).astype(f32)  # [B, Hkv, dk or 1, 1]
        if delta:
            recalled = np.einsum("bhkv,bhk->bhv", state.astype(f64), kt.astype(f64)).astype(f32)
            update = (bt[:, s][..., None] * (vt - recalled)).astype(f32)
        else:
            update = vt
        state = (state + np.einsum("bhk,bhv->bhkv", kt.astype(f64), update.astype(f64))).astype(f32)
        read = np.einsum("bhk,bhkv->bhv", q4[:, s, q_of].astype(f64), state[:, kv_of].astype(f64)).astype(f32)
        out[:, s] = (scale * read).astype(f32)
    return [result(out.reshape(b, t, heads * dv), q.dtype), result(state, q.dtype if past is None else past.dtype)]


@shape_rule(LIN, symbolic=True)
def _linear_attention_shape(types, values, attrs, num_outputs):
    q, k, v = shape_of(types[0]), shape_of(types[1]), shape_of(types[2])
    hq, hkv = int(attrs["q_num_heads"]), int(attrs["kv_num_heads"])
    for what, x in (("query", q), ("key", k), ("value", v)):
        if x is not None and len(x) != 3:
            raise RuntimeShapeError(f"{LIN}: {what} must be 3-D [batch, tokens, heads * dim], got {pshape_str(x)}")
    out = state = None
    if q is not None and v is not None and v[2] is not None:
        dv = v[2] // hkv
        out = (q[0], q[1], max(hq, hkv) * dv)
        if q[2] is not None:
            state = (q[0], hkv, q[2] // hq, dv)
    past = at(types, 3)
    return [tensor_type(elem_of(types[0]), out),
            tensor_type(elem_of(past) if past is not None else elem_of(types[0]), state)]


def _claim_linear_attention(node, graph, attrs):
    hq, hkv = int(attrs["q_num_heads"]), int(attrs["kv_num_heads"])
    if hq <= 0 or hkv <= 0 or (hq % hkv and hkv % hq):
        return f"q_num_heads={hq} and kv_num_heads={hkv} must be positive, one a multiple of the other"
    if attrs["update_rule"] not in _RULES:
        return f"attribute update_rule='{attrs['update_rule']}' is not one of {', '.join(_RULES)}"
    if int(attrs["state_window"]) != 0:
        return f"attribute state_window={attrs['state_window']} is not implemented (only 0)"
    return None


register(OpDef(LIN, (1,), ("T", "T", "T", "S", "T", "T"), ("T", "S"), {"T": FLOATS, "S": FLOATS},
               _linear_attention, domain=MS,
               attributes={"chunk_size": 64, "kv_num_heads": REQUIRED, "state_window": 0, "q_num_heads": REQUIRED,
                           "scale": 0.0, "update_rule": "gated_delta"},
               claim=_claim_linear_attention, min_inputs=3, shape_rule=_linear_attention_shape))


def _standard_form_reason(hq, hkv, rule, has_decay, has_beta):
    """What ai.onnx::LinearAttention's schema (its type inference) refuses among the contrib op's
    forms: more KV heads than query heads, and a decay or beta input the update rule does not
    read, or missing one it does."""
    if hq <= 0 or hkv <= 0 or hq % hkv:
        return (f"q_num_heads={hq} must be a positive multiple of kv_num_heads={hkv} (ai.onnx::LinearAttention "
                f"shares KV heads among query heads, never the other way)")
    if rule not in _RULES:
        return f"attribute update_rule='{rule}' is not one of {', '.join(_RULES)}"
    for i, name, used, given in ((4, "decay", rule in ("gated", "gated_delta"), has_decay),
                                 (5, "beta", rule in ("delta", "gated_delta"), has_beta)):
        if used and not given:
            return f"update_rule '{rule}' needs input {i} ({name})"
        if given and not used:
            return f"input {i} ({name}) is given, but update_rule '{rule}' takes none"
    return None


@kernel(LIN)
def _onnx_linear_attention(inputs, attrs):
    why = _standard_form_reason(int(attrs["q_num_heads"]), int(attrs["kv_num_heads"]), attrs["update_rule"],
                                at(inputs, 4) is not None, at(inputs, 5) is not None)
    if why:
        raise RuntimeShapeError(f"{LIN}: {why}")
    return _linear_attention(inputs, attrs)


def _given(node, i: int) -> bool:
    return i < len(node.inputs) and bool(node.inputs[i])


def _claim_onnx_linear_attention(node, graph, attrs):
    """Every form the standard defines (f16 and f32; past_state/present_state's S may differ from T)."""
    why = (_missing_output(node, LIN, ("output", "present_state"))
           or _standard_form_reason(int(attrs["q_num_heads"]), int(attrs["kv_num_heads"]), attrs["update_rule"],
                                    _given(node, 4), _given(node, 5)))
    if why:
        return why
    for i, name, rank in ((0, "query", 3), (1, "key", 3), (2, "value", 3), (3, "past_state", 4)):
        t = input_type(node, graph, i)
        if t is not None and t.rank is not None and t.rank != rank:
            return f"input {i} ({name}) has rank {t.rank}; ai.onnx::LinearAttention takes {rank}-D"
    state, query = graph.type_of(node.outputs[1]), input_type(node, graph, 0)
    if not _given(node, 3) and state.elem_type not in (0, query.elem_type):
        return (f"output 1 (present_state) is {state.dtype_name} but without past_state it has the query's type "
                f"{query.dtype_name}")
    return None


register(OpDef(LIN, (27,), ("T", "T", "T", "S", "T", "T"), ("T", "S"), {"T": FLOATS, "S": FLOATS},
               _onnx_linear_attention,
               attributes={"chunk_size": 64, "kv_num_heads": REQUIRED, "q_num_heads": REQUIRED, "scale": 0.0,
                           "update_rule": "gated_delta"},
               claim=_claim_onnx_linear_attention, min_inputs=3, shape_rule=_linear_attention_shape))


# ---- GatedRMSNorm -------------------------------------------------------------------------------

GRN = "GatedRMSNorm"
_GATE_ACTS = ("silu", "swish", "sigmoid")


@kernel(GRN)
def _gated_rms_norm(inputs, attrs):
    x, scale, gate = inputs[:3]
    c = scale.size
    if x.ndim == 0 or c == 0 or x.shape[-1] % c:
        raise RuntimeShapeError(f"{GRN}: X's last dim must be a multiple of scale's length {c}, got X "
                                f"{shape_str(x.shape)}")
    if gate.shape != x.shape:
        raise RuntimeShapeError(f"{GRN}: gate must have X's shape {shape_str(x.shape)}, got {shape_str(gate.shape)}")
    groups = _f32(x).reshape(-1, c)
    ms = (np.sum(groups.astype(f64) * groups, axis=1) / c).astype(f32)
    inv = (f32(1) / np.sqrt((ms + f32(attrs["epsilon"])).astype(f32))).astype(f32)
    z = _f32(gate).reshape(-1, c)
    act = _sigmoid(z) if attrs["activation"] == "sigmoid" else _silu(z)
    y = ((groups * inv[:, None]).astype(f32) * _f32(scale).reshape(c)).astype(f32)
    return [result((y * act).astype(f32).reshape(x.shape), x.dtype)]


def _claim_gated_rms_norm(node, graph, attrs):
    if attrs["activation"] not in _GATE_ACTS:
        return f"attribute activation='{attrs['activation']}' is not one of {', '.join(_GATE_ACTS)}"
    return None


@shape_rule(GRN, symbolic=True)
def _gated_rms_norm_shape(types, values, attrs, num_outputs):
    return [tensor_type(elem_of(types[0]), shape_of(types[0]))]


register(OpDef(GRN, (1,), ("T", "T", "T"), ("T",), {"T": FLOATS}, _gated_rms_norm, domain=MS,
               attributes={"activation": "silu", "epsilon": 1e-5}, claim=_claim_gated_rms_norm,
               shape_rule=_gated_rms_norm_shape))
