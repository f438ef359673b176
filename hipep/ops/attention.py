"""Multi-head attention other than GroupQueryAttention: com.microsoft MultiHeadAttention and ai.onnx
Attention-23/24/25, as ONNX Runtime's CPU EP computes them (scores, softmax and the weighted sum of V
in f32, rounded once; ai.onnx Attention in f16 also rounds the scores and the probabilities, see
there). Shared helpers (`_softmax_rows`, `_f32`, `_round`) live in contrib_attention.py."""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ._common import (at, elem_of, has_input, input_type, kernel, pshape_str, result, shape_of, shape_rule, shape_str,
                      tensor_type)
from .contrib_attention import _f32, _round, _softmax_rows
from .registry import BOOL, F16, F32, I32, I64, OUTPUT_COUNT, REQUIRED, SINCE_VERSION, OpDef, register

FLOATS = frozenset({F32, F16})
I32S = frozenset({I32})
I64S = frozenset({I64})


# ---- MultiHeadAttention (com.microsoft) ------------------------------------------------------

MHA = "MultiHeadAttention"
_MHA_INPUTS = ("query", "key", "value", "bias", "key_padding_mask", "attention_bias", "past_key",
               "past_value", "past_sequence_length", "cache_indirection")


def _mha_geometry(op, q, k, v, n):
    if q.ndim != 3:
        raise RuntimeShapeError(f"{op}: query must be 3-D [batch, sequence, hidden], got {shape_str(q.shape)}")
    if k is None or v is None or k.ndim != 3 or v.ndim != 3:
        raise RuntimeShapeError(f"{op}: key and value must be 3-D [batch, kv_sequence, hidden], got "
                                f"{'nothing' if k is None else shape_str(k.shape)} and "
                                f"{'nothing' if v is None else shape_str(v.shape)}")
    b, s, d = q.shape
    if d % n:
        raise RuntimeShapeError(f"{op}: query hidden size {d} is not a multiple of num_heads={n}")
    if k.shape[0] != b or v.shape[0] != b or k.shape[2] != d or v.shape[1] != k.shape[1] or v.shape[2] % n:
        raise RuntimeShapeError(f"{op}: key must be [{b}, L, {d}] and value [{b}, L, num_heads * v_head_size], "
                                f"got key {shape_str(k.shape)}, value {shape_str(v.shape)}")
    return b, s, d // n, k.shape[1], v.shape[2] // n


@kernel(MHA)
def _mha(inputs, attrs):
    inputs = list(inputs) + [None] * (len(_MHA_INPUTS) - len(inputs))
    q, k, v, bias, mask, attn_bias, pk, pv = inputs[:8]
    n = int(attrs["num_heads"])
    b, s, h, l, hv = _mha_geometry(MHA, q, k, v, n)
    dtype = q.dtype
    qf, kf, vf = _f32(q), _f32(k), _f32(v)
    if bias is not None:
        if bias.shape != (2 * n * h + n * hv,):
            raise RuntimeShapeError(f"{MHA}: bias must be [{2 * n * h + n * hv}], got {shape_str(bias.shape)}")
        bf = _f32(bias)  # added in f32 and kept so (present rounds it on the way out)
        qf, kf, vf = qf + bf[:n * h], kf + bf[n * h:2 * n * h], vf + bf[2 * n * h:]
    qh = qf.reshape(b, s, n, h).transpose(0, 2, 1, 3)
    kh = kf.reshape(b, l, n, h).transpose(0, 2, 1, 3)
    vh = vf.reshape(b, l, n, hv).transpose(0, 2, 1, 3)
    p = 0
    if pk is not None:
        if pv is None or pk.ndim != 4 or pk.shape[:2] != (b, n) or pk.shape[3] != h or pv.shape != pk.shape[:3] + (hv,):
            raise RuntimeShapeError(f"{MHA}: past_key must be [{b}, {n}, P, {h}] and past_value "
                                    f"[{b}, {n}, P, {hv}], got "
                                    f"{shape_str(pk.shape)} and {'nothing' if pv is None else shape_str(pv.shape)}")
        p = pk.shape[2]
        kh = np.concatenate([_f32(pk), kh], axis=2)
        vh = np.concatenate([_f32(pv), vh], axis=2)
    t = p + l
    scale = float(attrs["scale"]) or 1.0 / float(np.sqrt(h))
    scores = np.matmul(qh, kh.transpose(0, 1, 3, 2)).astype(np.float32) * np.float32(scale)
    additive = np.zeros((b, 1, s, t), np.float32)
    if mask is not None:
        if mask.shape != (b, t):
            raise RuntimeShapeError(f"{MHA}: key_padding_mask must be [batch, total_sequence] = {shape_str((b, t))}, "
                                    f"got {shape_str(mask.shape)}")
        additive += np.where(mask > 0, 0.0, np.float32(attrs["mask_filter_value"]))[:, None, None, :]
    if int(attrs["unidirectional"]):
        future = np.arange(t)[None, :] > p + np.arange(s)[:, None]
        additive = np.where(future, np.finfo(np.float32).min, additive).astype(np.float32)
    scores = scores + additive
    if attn_bias is not None:
        if attn_bias.ndim != 4 or attn_bias.shape[0] not in (1, b) or attn_bias.shape[1] not in (1, n) \
                or attn_bias.shape[2:] != (s, t):
            raise RuntimeShapeError(f"{MHA}: attention_bias must be [batch or 1, num_heads or 1, {s}, {t}], got "
                                    f"{shape_str(attn_bias.shape)}")
        scores = scores + _f32(attn_bias)
    probs = _softmax_rows(scores, np.ones(scores.shape, bool))
    out = np.matmul(probs, vh).astype(np.float32).transpose(0, 2, 1, 3).reshape(b, s, n * hv)
    return [result(out, dtype), result(kh, dtype), result(vh, dtype)]


@shape_rule(MHA)
def _mha_shape(types, values, attrs, num_outputs):
    n = int(attrs["num_heads"])
    q, k, v = (shape_of(at(types, i)) for i in range(3))
    pk, pv = shape_of(at(types, 6)), shape_of(at(types, 7))
    elem = elem_of(at(types, 0))
    for name, x in (("query", q), ("key", k), ("value", v)):
        if x is not None and len(x) != 3:
            raise RuntimeShapeError(f"{MHA}: {name} must be 3-D, got {pshape_str(x)}")
    b = next((x[0] for x in (q, k, v, pk, pv) if x is not None and x[0] is not None), None)
    s = None if q is None else q[1]
    h = None
    if q is not None and q[2] is not None:
        if q[2] % n:
            raise RuntimeShapeError(f"{MHA}: query hidden size {q[2]} is not a multiple of num_heads={n}")
        h = q[2] // n
    elif k is not None and k[2] is not None and k[2] % n == 0:
        h = k[2] // n
    elif pk is not None and len(pk) == 4:
        h = pk[3]
    hv = None
    if v is not None and v[2] is not None:
        if v[2] % n:
            raise RuntimeShapeError(f"{MHA}: value hidden size {v[2]} is not a multiple of num_heads={n}")
        hv = v[2] // n
    elif pv is not None and len(pv) == 4:
        hv = pv[3]
    l = next((x[1] for x in (k, v) if x is not None and x[1] is not None), None)
    if at(types, 6) is None:
        p = 0
    else:
        p = pk[2] if pk is not None and len(pk) == 4 else None
        if p is None and pv is not None and len(pv) == 4:
            p = pv[2]
    t = None if l is None or p is None else l + p
    return [tensor_type(elem, (b, s, None if hv is None else n * hv)),
            tensor_type(elem, (b, n, t, h)), tensor_type(elem, (b, n, t, hv))]


def _claim_mha(node, graph, attrs):
    if int(attrs["num_heads"]) <= 0:
        return f"num_heads={attrs['num_heads']} must be positive"
    for i in (1, 2):
        if not has_input(node, i):
            return f"input {i} ({_MHA_INPUTS[i]}) is required: packed QKV / packed KV forms are not implemented"
    for i in (8, 9):
        if has_input(node, i):
            return f"input {i} ({_MHA_INPUTS[i]}) is not implemented (decoder-masked attention)"
    if len(node.outputs) > 3 and node.outputs[3]:
        return "the qk output (output 3) is not implemented"
    if has_input(node, 6) != has_input(node, 7):
        return "past_key and past_value must both be present, or both absent"
    for i in (0, 1, 2):
        t = input_type(node, graph, i)
        if t is not None and t.rank is not None and t.rank != 3:
            return (f"input {i} ({_MHA_INPUTS[i]}) has rank {t.rank}; only separate 3-D query/key/value are "
                    f"implemented (packed QKV/KV and BNSH key/value are not)")
    t = input_type(node, graph, 4)
    if t is not None and t.rank is not None and t.rank != 2:
        return f"key_padding_mask of rank {t.rank} is not implemented (2-D [batch, total_sequence] only)"
    t = input_type(node, graph, 5)
    if t is not None and t.rank is not None and t.rank != 4:
        return f"attention_bias of rank {t.rank} is not implemented (4-D only)"
    return None


register(OpDef(
    MHA, (1,), ("T", "T", "T", "T", "M", "T", "T", "T", "M", "M"), ("T", "T", "T", "T"),
    {"T": FLOATS, "M": I32S}, _mha, domain="com.microsoft",
    attributes={"num_heads": REQUIRED, "mask_filter_value": -10000.0, "scale": 0.0, "unidirectional": 0},
    claim=_claim_mha, min_inputs=1, shape_rule=_mha_shape))


# ---- Attention (ai.onnx 23, 24, 25) ------------------------------------------------------------
# As ORT's CPU kernel (core/providers/cpu/llm/attention.cc): scores = scale * Q K^T, softcap,
# then the mask: a bool mask, the causal frontier and Attention-25's window exclude keys with a
# sentinel (the lowest finite float before 25, -inf from 25), a float mask is added as is; then
# Attention-24's nonpad_kv_seqlen sets keys j >= nonpad[b] to the sentinel. Query row i sits at
# position offset + i (offset: the past length, or without a past nonpad[b] - S): the causal
# frontier keeps keys j <= position, a window keys position - left <= j <= position + right.
# A row with no key above the sentinel comes out as zeros. In f16 the scores, the probabilities
# and the output are each rounded to f16 (ORT's f16 GEMMs write f16); the softmax itself runs in
# f32.

ATTN = "Attention"


def _attn_heads(x, heads, what):
    """3-D [B, S, heads*H] -> [B, heads, S, H] (f32)."""
    b, s, d = x.shape
    if heads <= 0 or d % heads:
        raise RuntimeShapeError(f"{ATTN}: {what} hidden size {d} is not a multiple of its head count {heads}")
    return _f32(x).reshape(b, s, heads, d // heads).transpose(0, 2, 1, 3)


def mask_reason(mask_shape, full, since: int) -> str | None:
    """Why attn_mask's shape does not fit [batch, q_num_heads, q_sequence, total_sequence] (None:
    it does; unknown extents pass), as ORT's CPU kernel checks it. Before Attention-25: 2-D to
    4-D, its query and key axes whole, heads and batch 1 or whole. Attention-25: 1-D to 4-D
    broadcast right-aligned, its key axis at most total_sequence (the missing keys are masked)."""
    rank = len(mask_shape)
    if since < 25:
        if not 2 <= rank <= 4:
            return f"attn_mask of rank {rank} (Attention-{since} takes 2-D to 4-D)"
        if any(m is not None and f is not None and m != f for m, f in zip(mask_shape[-2:], full[-2:])):
            return (f"attn_mask {pshape_str(mask_shape)}: its last two axes must be [q_sequence, total_sequence] "
                    f"= {pshape_str(full[-2:])}")
        lead = zip(mask_shape[-3::-1], full[-3::-1])
    else:
        if not 1 <= rank <= 4:
            return f"attn_mask of rank {rank} (1-D to 4-D)"
        if mask_shape[-1] is not None and full[-1] is not None and mask_shape[-1] > full[-1]:
            return f"attn_mask {pshape_str(mask_shape)} has more keys than total_sequence {full[-1]}"
        lead = zip(mask_shape[-2::-1], full[-2::-1])
    if any(m is not None and f is not None and m not in (1, f) for m, f in lead):
        return (f"attn_mask {pshape_str(mask_shape)} does not broadcast to [batch, q_num_heads, q_sequence, "
                f"total_sequence] = {pshape_str(full)}")
    return None


def excluded_score(since: int, dtype) -> float:
    """The score an excluded key takes: -inf from Attention-25 (ORT as the spec); before, ORT's
    kernel writes the lowest finite value of the element type, which qk_matmul_output shows."""
    return -np.inf if since >= 25 else float(np.finfo(np.dtype(dtype)).min)


@kernel(ATTN)
def _attention(inputs, attrs):
    q, k, v = inputs[:3]
    mask, pk, pv, nonpad = (at(inputs, i) for i in (3, 4, 5, 6))
    dtype = q.dtype
    f16 = dtype == np.float16
    if not q.ndim == k.ndim == v.ndim or q.ndim not in (3, 4):
        raise RuntimeShapeError(f"{ATTN}: Q, K and V must all be 3-D or all 4-D, got {shape_str(q.shape)}, "
                                f"{shape_str(k.shape)}, {shape_str(v.shape)}")
    nq, nkv = int(attrs.get("q_num_heads", 0) or 0), int(attrs.get("kv_num_heads", 0) or 0)
    if q.ndim == 3:
        qh, kh, vh = _attn_heads(q, nq, "Q"), _attn_heads(k, nkv, "K"), _attn_heads(v, nkv, "V")
    else:
        qh, kh, vh = _f32(q), _f32(k), _f32(v)
        if (nq and nq != q.shape[1]) or (nkv and (nkv != k.shape[1] or nkv != v.shape[1])):
            raise RuntimeShapeError(f"{ATTN}: q_num_heads/kv_num_heads ({nq}/{nkv}) differ from Q's/K's head "
                                    f"counts ({q.shape[1]}/{k.shape[1]})")
    b, nq, s, h = qh.shape
    nkv, l, hv = kh.shape[1], kh.shape[2], vh.shape[3]
    if kh.shape[0] != b or vh.shape[:3] != (b, nkv, l) or kh.shape[3] != h or nq % nkv:
        raise RuntimeShapeError(f"{ATTN}: inconsistent Q/K/V shapes {shape_str(q.shape)}, {shape_str(k.shape)}, "
                                f"{shape_str(v.shape)}")
    p = 0
    if pk is not None or pv is not None:
        if pk is None or pv is None or pk.shape != (b, nkv, pk.shape[2] if pk.ndim == 4 else -1, h) \
                or pv.shape != (b, nkv, pk.shape[2], hv):
            raise RuntimeShapeError(f"{ATTN}: past_key must be [{b}, {nkv}, P, {h}] and past_value "
                                    f"[{b}, {nkv}, P, {hv}], "
                                    f"got {'nothing' if pk is None else shape_str(pk.shape)} and "
                                    f"{'nothing' if pv is None else shape_str(pv.shape)}")
        p = pk.shape[2]
        kh = np.concatenate([_f32(pk), kh], axis=2)
        vh = np.concatenate([_f32(pv), vh], axis=2)
    t = p + l
    group = nq // nkv
    scale = attrs.get("scale")
    scale = 1.0 / float(np.sqrt(h)) if scale is None else float(scale)
    qk = np.matmul(qh, np.repeat(kh, group, axis=1).transpose(0, 1, 3, 2)).astype(np.float32) * np.float32(scale)
    rnd = (lambda a: _round(a, dtype)) if f16 else (lambda a: np.asarray(a, np.float32))
    since = int(attrs.get(SINCE_VERSION, 23))
    lowest = np.float32(excluded_score(since, dtype))
    if nonpad is not None:
        if pk is not None or nonpad.shape != (b,):
            raise RuntimeShapeError(f"{ATTN}: nonpad_kv_seqlen must be [batch] = [{b}] without past_key, got "
                                    f"{shape_str(nonpad.shape)}")
        if nonpad.min() < 0 or nonpad.max() > t:
            raise RuntimeShapeError(f"{ATTN}: nonpad_kv_seqlen values must be in [0, {t}], got {nonpad.tolist()}")
    bias = None
    if mask is not None:
        why = mask_reason(mask.shape, (b, nq, s, t), since)
        if why:
            raise RuntimeShapeError(f"{ATTN}: {why}")
        bias = np.where(mask, 0.0, lowest).astype(np.float32) if mask.dtype == np.bool_ else _f32(mask)
        # Keys past a shorter mask's end (Attention-25) are masked out, as the spec pads it.
        bias = np.pad(bias, [(0, 0)] * (mask.ndim - 1) + [(0, t - mask.shape[-1])], constant_values=lowest)
        bias = np.broadcast_to(bias.reshape((1,) * (4 - mask.ndim) + bias.shape), (b, nq, s, t))
    # Query row i sits at absolute position offset + i: the past length, or (without a past)
    # nonpad[b] - S; the causal frontier and Attention-25's window are both aligned to it.
    position = (np.full(b, p) if nonpad is None else nonpad.astype(np.int64) - s)[:, None] + np.arange(s)[None, :]
    keys = np.arange(t)[None, None, :]
    excluded = np.zeros((b, s, t), bool)
    if int(attrs["is_causal"]):
        excluded |= keys > position[:, :, None]
    left, right = int(attrs.get("left_window_size", -1)), int(attrs.get("right_window_size", -1))
    if left >= 0:
        excluded |= keys < position[:, :, None] - left
    if right >= 0:
        excluded |= keys > position[:, :, None] + right
    if excluded.any():
        bias = np.where(excluded[:, None], lowest, 0.0 if bias is None else bias).astype(np.float32)
    mode = int(attrs["qk_matmul_output_mode"]) if int(attrs.get(OUTPUT_COUNT, 1)) > 3 else -1
    softcap = float(attrs["softcap"])
    if bias is not None and softcap <= 0 and mode not in (0, 1):
        # ORT folds the mask into the scores GEMM (one rounding in f16).
        raw = capped = None
        scores = rnd(qk + bias)
    else:
        scores = raw = rnd(qk)
        if softcap > 0:
            scores = rnd(np.float32(softcap) * np.tanh(scores / np.float32(softcap)))
        capped = scores
        if bias is not None:
            scores = rnd(scores + bias)
    if nonpad is not None:
        pad = np.arange(t)[None, :] >= nonpad.astype(np.int64)[:, None]
        scores = np.where(pad[:, None, None, :], lowest, scores).astype(np.float32)
    biased = scores
    # A row with no key above the sentinel (every key masked) comes out as zeros.
    dead = np.max(scores, axis=-1, keepdims=True) <= lowest
    probs = rnd(np.where(dead, 0.0, _softmax_rows(scores, np.ones(scores.shape, bool))))
    out = np.matmul(probs, np.repeat(vh, group, axis=1)).astype(np.float32)
    if q.ndim == 3:
        out = out.transpose(0, 2, 1, 3).reshape(b, s, nq * hv)
    outs = [result(out, dtype), result(kh, dtype), result(vh, dtype)]
    if mode >= 0:
        outs.append(result({0: raw, 1: capped, 2: biased, 3: probs}[mode], dtype))
    return outs


@shape_rule(ATTN)
def _attention_shape(types, values, attrs, num_outputs):
    q, k, v = (shape_of(at(types, i)) for i in range(3))
    pk, pv = shape_of(at(types, 4)), shape_of(at(types, 5))
    elem = elem_of(at(types, 0))
    ranks = {len(x) for x in (q, k, v) if x is not None}
    if len(ranks) > 1 or (ranks and ranks.pop() not in (3, 4)):
        raise RuntimeShapeError(f"{ATTN}: Q, K and V must all be 3-D or all 4-D, got {pshape_str(q)}, "
                                f"{pshape_str(k)}, {pshape_str(v)}")
    rank = next((len(x) for x in (q, k, v) if x is not None), None)
    nq, nkv = int(attrs.get("q_num_heads", 0) or 0), int(attrs.get("kv_num_heads", 0) or 0)
    b = next((x[0] for x in (q, k, v, pk, pv) if x is not None and x[0] is not None), None)
    s = h = hv = l = None
    if rank == 3:
        s = None if q is None else q[1]
        l = next((x[1] for x in (k, v) if x is not None and x[1] is not None), None)
        if q is not None and q[2] is not None and nq:
            h = q[2] // nq
        if v is not None and v[2] is not None and nkv:
            hv = v[2] // nkv
    elif rank == 4:
        nq = nq or (None if q is None else q[1])
        nkv = nkv or next((x[1] for x in (k, v) if x is not None and x[1] is not None), None)
        s = None if q is None else q[2]
        l = next((x[2] for x in (k, v) if x is not None and x[2] is not None), None)
        h = next((x[3] for x in (q, k) if x is not None and x[3] is not None), None)
        hv = None if v is None else v[3]
    if h is None and pk is not None and len(pk) == 4:
        h = pk[3]
    if hv is None and pv is not None and len(pv) == 4:
        hv = pv[3]
    nkv = nkv or next((x[1] for x in (pk, pv) if x is not None and len(x) == 4 and x[1] is not None), None)
    if at(types, 4) is None:
        p = 0
    else:
        p = next((x[2] for x in (pk, pv) if x is not None and len(x) == 4 and x[2] is not None), None)
    t = None if l is None or p is None else l + p
    if rank == 3:
        y = (b, s, None if (hv is None or not nq) else nq * hv)
    elif rank == 4:
        y = (b, nq, s, hv)
    else:
        y = None
    out = [tensor_type(elem, y), tensor_type(elem, (b, nkv, t, h)),
           tensor_type(elem, (b, nkv, t, hv)),
           tensor_type(elem, (b, nq or None, s, t) if rank is not None else (b, None, None, t))]
    return out[:max(num_outputs, 1)]


def _claim_attention(node, graph, attrs):
    ranks = [input_type(node, graph, i) for i in range(3)]
    ranks = {t.rank for t in ranks if t is not None and t.rank is not None}
    if len(ranks) > 1:
        return f"Q, K and V have different ranks {sorted(ranks)}"
    if ranks and ranks.pop() == 3 and (int(attrs.get("q_num_heads", 0) or 0) <= 0
                                      or int(attrs.get("kv_num_heads", 0) or 0) <= 0):
        return "3-D Q/K/V need the q_num_heads and kv_num_heads attributes"
    if has_input(node, 4) != has_input(node, 5):
        return "past_key and past_value must both be present, or both absent"
    if int(attrs["qk_matmul_output_mode"]) not in (0, 1, 2, 3):
        return f"qk_matmul_output_mode={attrs['qk_matmul_output_mode']} is not one of 0, 1, 2, 3"
    if attrs.get("scale") is not None and not float(attrs["scale"]) > 0:
        return f"scale={attrs['scale']} must be positive"
    for name in ("left_window_size", "right_window_size"):
        if name in node.attributes and node.since_version < 25:
            return f"attribute '{name}' is not supported by Attention-{node.since_version} (added in opset 25)"
        if int(attrs.get(name, -1)) < -1:
            return f"{name}={attrs[name]} must be -1 (unbounded) or non-negative"
    t = input_type(node, graph, 3)
    lowest_rank = 1 if node.since_version >= 25 else 2
    if t is not None and t.rank is not None and not lowest_rank <= t.rank <= 4:
        return f"attn_mask of rank {t.rank} is not supported ({lowest_rank}-D to 4-D)"
    if t is not None and t.elem_type not in (BOOL, elem_of(input_type(node, graph, 0))):
        return f"attn_mask of element type {t.dtype_name} is not supported (bool or Q's type, as ORT's CPU kernel)"
    if has_input(node, 6) and has_input(node, 4):
        return "nonpad_kv_seqlen together with past_key is invalid"
    mode = int(attrs["qk_matmul_output_mode"])
    if len(node.outputs) > 3 and node.outputs[3] and mode in (1, 2) and int(attrs.get("is_causal", 0)) \
            and node.since_version < 25:
        # There the scores output holds masked positions: ONNX writes -inf, ORT's CPU kernel the
        # lowest float (ONNX's own test_attention_4d_*_qk_matmul_bias_*_mask_causal fail on ORT).
        # Attention-25 writes -inf in both.
        return (f"output qk_matmul_output with qk_matmul_output_mode={mode} and is_causal=1: ONNX Runtime "
                f"and the ONNX spec write different values (lowest float vs -inf) at masked positions")
    return None


register(OpDef(
    ATTN, (23, 24, 25), ("T", "T", "T", "", "T", "T", "I64"), ("T", "T", "T", "T"),
    {"T": FLOATS, "I64": I64S}, _attention,
    attributes={"is_causal": 0, "kv_num_heads": 0, "q_num_heads": 0, "qk_matmul_output_mode": 0,
                "scale": None, "softcap": 0.0, "softmax_precision": 0, "left_window_size": -1,
                "right_window_size": -1},
    claim=_claim_attention, min_inputs=3, shape_rule=_attention_shape))
