"""GroupQueryAttention (com.microsoft; what onnxruntime-genai's model builder emits for every
decoder), as ONNX Runtime's CPU EP computes it, and the helpers the attention family shares (the
rotation, a masked softmax). MultiHeadAttention and ai.onnx Attention are in attention.py, the
RotaryEmbedding ops in rotary.py, the MLAS replays this reference calls in mlas.py.

Numerics follow ORT's CPU kernels: GroupQueryAttention and the rotary embeddings round the rotated
Q/K to the input dtype, then run the scores, softmax and the probability-weighted sum of V in f32
and round the output once; MultiHeadAttention likewise (its bias is added in f32); ai.onnx
Attention in f16 also rounds the scores and the probabilities to f16 (see there). bf16
GroupQueryAttention (which ORT's CPU EP does not run) is computed as f16 is, with bf16 rounding.

Bit-exact f32 (ORT 1.31 on x86-64 with AVX512): the rotary embeddings (MLAS's fused rope kernel)
and GroupQueryAttention without head_sink / smooth_softmax replay ORT's kernels operation by
operation -- its flash path (MlasFlashAttentionGQA: tiled online softmax for prompts, GEMVs for one
token; taken without softcap when total_sequence_length > 1) and otherwise its GEMM + MLAS softmax
path (softcap through libm's tanhf) -- see mlas.py's _gqa_flash_mlas / _gqa_naive_mlas. Not replayed (exact
to f32 rounding only): f16, head_sink / smooth_softmax, scale == 1 with a one-row Q@K^T GEMM, and
ORT's KV-split "flash decoding" (only when batch * num_heads < its thread count and the cache
exceeds one L2-sized KV block).

GroupQueryAttention in short (ORT's gqa_attention_base.h / group_query_attention.cc):
  * seqlens_k[b] + 1 is entry b's valid total length t_b; total_sequence_length T is a host value
    that sizes present: present_seq = max(T, past capacity), where T must equal capacity + S (a
    growing cache) or be at most the capacity (a fixed-capacity cache: onnxruntime-genai's
    past-present-share-buffer layout, here without the aliasing).
  * "first prompt" when S == T: nothing is read from past, K/V land at rows [0, S), the causal
    frontier of query row s is min(s + 1, t_b) (right padding: rows past t_b see every valid key).
  * otherwise (token generation with S == 1, or a subsequent prompt with batch 1): entry b's past
    length is p_b = t_b - S; rows [0, p_b) of past are copied, the new rows land at [p_b, t_b),
    and query row s sees keys [0, p_b + s + 1). Present rows past what was written are zeros.
  * rotary positions: s in a first prompt (or position_ids[0, 0] + s when position_ids is given),
    else p_b + s (or position_ids[b, s]); partial rotary when cos_cache is narrower than H / 2.
  * local_window_size w >= 0: of the keys below the causal frontier f, only the last w
    ([f - w, f)) are attended (but see the padding-row quirk in _gqa).
  * softcap c > 0: scores become c * tanh(scores / c) (after the scale) before attention_bias is
    added; smooth_softmax / head_sink add an exp(sink - max) term to the softmax denominator.
  * sliding_window_cache=1 (gemma2's sliding-window layers): a cache of fixed capacity holding
    the most recent rows only, see _windowed_cache.
  * q_norm_weight / k_norm_weight (Qwen3's per-head Q/K RMS norm, which the builder fuses into the
    op for GPUs): the new Q and K heads are normalized first, as the unfused graph does (_qk_norm).
"""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ._common import (at, dim_value, elem_of, has_input, input_type, kernel, known_value, pshape_str, result, shape_of,
                      shape_rule, shape_str, tensor_type)
from .elementwise import fma_f32
from .mlas import _gqa_flash_mlas, _gqa_naive_mlas, _mlas_exact_ok, _rms_rows
from .registry import I32, I64, LLM_FLOATS, OUTPUT_COUNT, REQUIRED, OpDef, register

I32S = frozenset({I32})
I64S = frozenset({I64})


def _f32(a):
    return None if a is None else np.asarray(a).astype(np.float32)


def _round(a, dtype):
    """Rounds f32 math to the op's dtype (the f16 kernels store intermediates as f16)."""
    return np.asarray(a, dtype=np.float32).astype(dtype).astype(np.float32)


# MLAS's interleaved rotary: pairs an AVX2 iteration (kernels/rotary.hip: HIPEP_ROPE_VECTOR_PAIRS)
ROPE_VECTOR_PAIRS = 8  # HIPEP_ROPE_VECTOR_PAIRS


def _rope(x, cos, sin, interleaved: bool, fused: bool = False):
    """Rotates the last axis of x (f32, width R) by angles whose cos/sin have width R/2 and
    broadcast against x[..., :R/2]. fused=True is MLAS's f32 kernel (MlasRotaryEmbedOneRow, AVX2):
    real' = fma(real, cos, -(imag * sin)), imag' = fma(real, sin, imag * cos), except in the
    interleaved form's tail past the last whole vector of 8 pairs, where pairs after the tail's
    first come out as real * cos - imag * sin, imag * cos + real * sin (the unfused form: measured
    pair by pair against the CPU EP)."""
    half = x.shape[-1] // 2
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]
    else:
        x1, x2 = x[..., :half], x[..., half:2 * half]
    if fused:
        cos, sin = np.asarray(cos, np.float32), np.asarray(sin, np.float32)
        r = fma_f32(x1, cos, -(x2 * sin).astype(np.float32))
        i = fma_f32(x1, sin, (x2 * cos).astype(np.float32))
        tail = ROPE_VECTOR_PAIRS * (half // ROPE_VECTOR_PAIRS) + 1 if interleaved else half
        if tail < half:
            c, s = np.broadcast_to(cos, r.shape)[..., tail:], np.broadcast_to(sin, r.shape)[..., tail:]
            a, b = x1[..., tail:], x2[..., tail:]
            r[..., tail:] = a * c - b * s
            i[..., tail:] = b * c + a * s
    else:
        r, i = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    if interleaved:
        out = np.empty(np.broadcast_shapes(x.shape, r.shape[:-1] + (x.shape[-1],)), np.float32)
        out[..., 0::2] = r
        out[..., 1::2] = i
        return out
    return np.concatenate([r, i], axis=-1)


def _rotate_heads(x, cos, sin, rotary_dim: int, interleaved: bool, fused: bool = False):
    """x [..., H] (f32): the first rotary_dim lanes rotated, the rest copied."""
    out = x.copy()
    out[..., :rotary_dim] = _rope(x[..., :rotary_dim], cos, sin, interleaved, fused)
    return out


def _softmax_rows(scores, allowed, sink=None):
    """Softmax over the last axis restricted to `allowed` (masked entries come out 0). With
    `sink` (broadcastable to scores[..., :1]), the denominator gains exp(sink - max) and the max
    covers the sink too, as ORT's smooth softmax does."""
    x = np.where(allowed, scores, -np.inf)
    m = np.max(x, axis=-1, keepdims=True)
    if sink is not None:
        m = np.maximum(m, sink)
    m = np.where(np.isfinite(m), m, 0.0).astype(np.float32)
    e = np.where(allowed, np.exp(x - m), 0.0).astype(np.float32)
    s = np.sum(e, axis=-1, keepdims=True, dtype=np.float32)
    if sink is not None:
        s = s + np.exp(sink - m)
    s = np.where(s == 0, 1.0, s).astype(np.float32)
    return (e / s).astype(np.float32)


# ---- GroupQueryAttention ---------------------------------------------------------------------

GQA = "GroupQueryAttention"
_GQA_INPUTS = ("query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length",
               "cos_cache", "sin_cache", "position_ids", "attention_bias", "head_sink", "k_scale",
               "v_scale", "q_norm_weight", "k_norm_weight")


def _gqa_dims(op, q_shape, k_shape, num_heads, kv_heads):
    """(batch, seq, head_size, packed) from query's (and key's) shape, or RuntimeShapeError."""
    if len(q_shape) != 3:
        raise RuntimeShapeError(f"{op}: query must be 3-D [batch, sequence, hidden], got {shape_str(q_shape)}")
    b, s, d = q_shape
    if k_shape is None:
        width = num_heads + 2 * kv_heads
        if d % width:
            raise RuntimeShapeError(f"{op}: packed query hidden size {d} is not a multiple of "
                                    f"num_heads + 2 * kv_num_heads = {width}")
        return b, s, d // width, True
    if d % num_heads:
        raise RuntimeShapeError(f"{op}: query hidden size {d} is not a multiple of num_heads={num_heads}")
    h = d // num_heads
    if len(k_shape) != 3 or k_shape[0] != b or k_shape[1] != s or k_shape[2] != kv_heads * h:
        raise RuntimeShapeError(f"{op}: key must be [batch, sequence, kv_num_heads * head_size] = "
                                f"{shape_str((b, s, kv_heads * h))}, got {shape_str(k_shape)}")
    return b, s, h, False


def _gqa_check(inputs, attrs):
    """Validates shapes (as ORT's CheckInputs does); returns the geometry."""
    q, k, v, pk, pv, seqlens, total = (at(inputs, i) for i in range(7))
    n, nkv = int(attrs["num_heads"]), int(attrs["kv_num_heads"])
    b, s, h, packed = _gqa_dims(GQA, q.shape, None if k is None else k.shape, n, nkv)
    if not packed and (v is None or v.shape != k.shape):
        raise RuntimeShapeError(f"{GQA}: value must have key's shape {shape_str(k.shape)}, got "
                                f"{'nothing' if v is None else shape_str(v.shape)}")
    cap = 0
    if pk is not None:
        want = (b, nkv, pk.shape[2] if pk.ndim == 4 else -1, h)
        for name, a in (("past_key", pk), ("past_value", pv)):
            if a is None or a.ndim != 4 or a.shape != want:
                raise RuntimeShapeError(f"{GQA}: {name} must be [batch, kv_num_heads, past, head_size] = "
                                        f"{shape_str(want)}, got {'nothing' if a is None else shape_str(a.shape)}")
        cap = pk.shape[2]
    if seqlens.size != b:
        raise RuntimeShapeError(f"{GQA}: seqlens_k must have batch_size={b} elements, got shape "
                                f"{shape_str(seqlens.shape)}")
    if total.size != 1:
        raise RuntimeShapeError(f"{GQA}: total_sequence_length must have one element, got shape "
                                f"{shape_str(total.shape)}")
    t = int(total.reshape(-1)[0])
    if _windowed(attrs):
        _check_window_capacity(cap, int(attrs["local_window_size"]))
    else:
        _check_total(t, cap, s)
    return n, nkv, b, s, h, packed, cap, t


def _windowed(attrs) -> bool:
    return int(attrs.get("sliding_window_cache", 0)) == 1


def _check_window_capacity(cap, window):
    if cap < window or cap <= 0:
        raise RuntimeShapeError(f"{GQA}: sliding_window_cache: the KV cache capacity (past_key's sequence "
                                f"extent, {cap}) must be at least local_window_size ({window})")


def _check_total(t, cap, s):
    if t != cap + s and not 0 < t <= cap:
        raise RuntimeShapeError(f"{GQA}: total_sequence_length ({t}) must equal past_sequence_length + "
                                f"sequence_length ({cap} + {s}) for a growing cache, or be at most "
                                f"past_sequence_length ({cap}) for a fixed-capacity cache")


def _qk_norm(inputs, attrs, n, nkv, b, s, h, packed):
    """q_norm_weight / k_norm_weight: each head of the new Q and K RMS-normalized over head_size
    (epsilon qk_norm_epsilon) before anything else, in the input's type, exactly as ORT's CPU EP runs
    the Reshape -> SimplifiedLayerNormalization -> Reshape stack the fusion folds into these inputs
    (the fused op has no CPU kernel there). Returns the inputs with Q and K replaced."""
    q, k, qn, kn = inputs[0], inputs[1], inputs[14], inputs[15]
    if qn is None or kn is None:
        raise RuntimeShapeError(f"{GQA}: q_norm_weight and k_norm_weight must be given together")
    for name, w in (("q_norm_weight", qn), ("k_norm_weight", kn)):
        if w.size != h:
            raise RuntimeShapeError(f"{GQA}: {name} must be [head_size] = [{h}], got {shape_str(w.shape)}")
    eps = attrs["qk_norm_epsilon"]

    def norm(x, w):  # x [..., h] of the input's type
        y, _ = _rms_rows(x.astype(np.float32).reshape(-1, h), w.astype(np.float32).reshape(h), eps)
        return y.reshape(x.shape).astype(x.dtype)

    out = list(inputs)
    if packed:
        qkv = q.reshape(b, s, n + 2 * nkv, h).copy()
        qkv[:, :, :n] = norm(qkv[:, :, :n], qn)
        qkv[:, :, n:n + nkv] = norm(qkv[:, :, n:n + nkv], kn)
        out[0] = qkv.reshape(q.shape)
    else:
        out[0] = norm(q.reshape(b, s, n, h), qn).reshape(q.shape)
        out[1] = norm(k.reshape(b, s, nkv, h), kn).reshape(k.shape)
    return out


@kernel(GQA)
def _gqa(inputs, attrs):
    inputs = list(inputs) + [None] * (len(_GQA_INPUTS) - len(inputs))
    n, nkv, b, s, h, packed, cap, t = _gqa_check(inputs, attrs)
    if inputs[14] is not None or inputs[15] is not None:
        inputs = _qk_norm(inputs, attrs, n, nkv, b, s, h, packed)
    q, k, v, pk, pv, seqlens = inputs[:6]
    cos, sin, pos_ids, bias, sink = inputs[7:12]
    dtype = q.dtype
    windowed = _windowed(attrs)
    present_len = cap if windowed else max(t, cap)
    lens = seqlens.reshape(-1).astype(np.int64) + 1  # t_b
    first_prompt = s == t
    if not first_prompt and s > 1 and b != 1:
        raise RuntimeShapeError(f"{GQA}: batch_size must be 1 when sequence_length ({s}) > 1 and differs "
                                f"from total_sequence_length ({t})")
    for i, tb in enumerate(lens):
        if windowed:  # lengths stay absolute, the cache holds the most recent rows only
            if tb < max(s, 1):
                raise RuntimeShapeError(f"{GQA}: seqlens_k[{i}] = {tb - 1} is too small for sequence_length {s} "
                                        f"(sliding_window_cache=1 has no padded prompts)")
            continue
        if tb < 1 or tb > present_len:
            raise RuntimeShapeError(f"{GQA}: seqlens_k[{i}] = {tb - 1} is out of range [0, {present_len})")
        if not first_prompt and tb < s:
            raise RuntimeShapeError(f"{GQA}: seqlens_k[{i}] = {tb - 1} is too small for sequence_length {s}")
        if not first_prompt and pk is not None and tb - s > cap:
            raise RuntimeShapeError(f"{GQA}: seqlens_k[{i}] = {tb - 1} needs {tb - s} past rows, but past_key "
                                    f"holds {cap}")
    # BNSH views of the new tokens.
    if packed:
        qkv = _f32(q).reshape(b, s, n + 2 * nkv, h).transpose(0, 2, 1, 3)
        qh, kh, vh = qkv[:, :n], qkv[:, n:n + nkv], qkv[:, n + nkv:]
    else:
        qh = _f32(q).reshape(b, s, n, h).transpose(0, 2, 1, 3)
        kh = _f32(k).reshape(b, s, nkv, h).transpose(0, 2, 1, 3)
        vh = _f32(v).reshape(b, s, nkv, h).transpose(0, 2, 1, 3)
    # Past rows used per entry (0 in a first prompt); the causal offset is the same number.
    past = np.zeros(b, np.int64) if (first_prompt or pk is None) else lens - s
    if int(attrs["do_rotary"]):
        half = cos.shape[1]
        if pos_ids is not None:
            flat = pos_ids.reshape(-1).astype(np.int64)
            if pos_ids.ndim != 2 or pos_ids.shape[0] != b or pos_ids.shape[1] < s:
                raise RuntimeShapeError(f"{GQA}: position_ids must be [batch, >= sequence] = [{b}, >= {s}], "
                                        f"got {shape_str(pos_ids.shape)}")
            # ORT reads position_ids[0] + s in a first prompt, else the flat element b * S + s.
            pos = (np.full((b, s), flat[0]) + np.arange(s) if first_prompt
                   else flat[:b * s].reshape(b, s))
        elif first_prompt:
            pos = np.broadcast_to(np.arange(s), (b, s))
        else:
            pos = (lens - s)[:, None] + np.arange(s)[None, :]
        if pos.min() < 0 or pos.max() >= cos.shape[0]:
            raise RuntimeShapeError(f"{GQA}: rotary position {int(pos.max())} is out of range for cos_cache "
                                    f"of shape {shape_str(cos.shape)}")
        c = _f32(cos)[pos][:, None]  # [B, 1, S, half]
        sn = _f32(sin)[pos][:, None]
        inter = bool(int(attrs["rotary_interleaved"]))
        fused = dtype == np.float32
        qh = _round(_rotate_heads(qh, c, sn, 2 * half, inter, fused), dtype)
        kh = _round(_rotate_heads(kh, c, sn, 2 * half, inter, fused), dtype)
    if windowed:
        cache_k, cache_v, past, lens, present_k, present_v = _windowed_cache(
            pk, pv, kh, vh, lens, int(attrs["local_window_size"]))
    else:
        present_k = np.zeros((b, nkv, present_len, h), np.float32)
        present_v = np.zeros((b, nkv, present_len, h), np.float32)
        for i in range(b):
            p = int(past[i])
            if p:
                present_k[i, :, :p] = pk[i, :, :p]
                present_v[i, :, :p] = pv[i, :, :p]
            present_k[i, :, p:p + s] = kh[i]
            present_v[i, :, p:p + s] = vh[i]
        cache_k, cache_v = present_k, present_v
    group = n // nkv
    keys = np.repeat(cache_k, group, axis=1)  # [B, N, cache rows, H]
    vals = np.repeat(cache_v, group, axis=1)
    scale = float(attrs["scale"]) or 1.0 / float(np.sqrt(h))
    scores = np.matmul(qh, keys.transpose(0, 1, 3, 2)).astype(np.float32) * np.float32(scale)
    softcap = float(attrs["softcap"])
    if softcap > 0:
        scores = (np.float32(softcap) * np.tanh(scores / np.float32(softcap))).astype(np.float32)
    if bias is not None:
        if bias.ndim != 4 or bias.shape[0] not in (1, b) or bias.shape[1] not in (1, n) or bias.shape[2] != s \
                or bias.shape[3] != t:
            raise RuntimeShapeError(f"{GQA}: attention_bias must be [batch or 1, num_heads or 1, {s}, {t}], "
                                    f"got {shape_str(bias.shape)}")
        width = min(bias.shape[3], keys.shape[2])
        scores[..., :width] += _f32(bias)[..., :width]
    # Query row s sees keys below the frontier f = min(p_b + s + 1, t_b); with a local window w,
    # only the last w of them. ORT's f32 kernel without softcap/smooth softmax/head_sink (its
    # flash path) counts the window back from the unclamped p_b + s + 1 instead, which differs
    # for the padding rows of a right-padded prompt (they may see no key at all: a zero row).
    rows = np.arange(s)[None, :, None]
    cols = np.arange(keys.shape[2])[None, None, :]
    raw = past[:, None, None] + rows + 1
    frontier = np.minimum(raw, lens[:, None, None])
    allowed = cols < frontier
    window = int(attrs["local_window_size"])
    if window >= 0:
        flash = (dtype == np.float32 and softcap <= 0 and sink is None and int(attrs["smooth_softmax"]) != 1
                 and t > 1 and int(attrs.get(OUTPUT_COUNT, 3)) >= 3)
        allowed &= cols >= (raw if flash else frontier) - window
    allowed = allowed[:, None]  # [B, 1, S, P]
    sink_vals = None
    if sink is not None:
        if sink.shape != (n,):
            raise RuntimeShapeError(f"{GQA}: head_sink must be [num_heads] = [{n}], got {shape_str(sink.shape)}")
        sink_vals = _f32(sink).reshape(1, n, 1, 1)
    elif int(attrs["smooth_softmax"]) == 1:
        sink_vals = np.zeros((1, 1, 1, 1), np.float32)
    flash = softcap <= 0 and t > 1 and int(attrs.get(OUTPUT_COUNT, 3)) >= 3
    if dtype == np.float32 and sink_vals is None and _mlas_exact_ok(flash, np.float32(scale) == 1, s, h):
        # Bit-exact MLAS arithmetic (see _gqa_naive_mlas / _gqa_flash_mlas).
        scale = float(np.float32(attrs["scale"]) or np.float32(1) / np.sqrt(np.float32(h)))
        bias32 = None if bias is None else _f32(bias)
        if flash:
            out = _gqa_flash_mlas(qh, keys, vals, scale, bias32, lens, pk is not None, first_prompt, window)
        else:
            hi = frontier[:, :, 0]
            lo = np.maximum(hi - window, 0) if window >= 0 else np.zeros_like(hi)
            out = _gqa_naive_mlas(qh, keys, vals, scale, softcap, bias32, lens, lo, hi)
    else:
        probs = _softmax_rows(scores, allowed, sink_vals)
        out = np.matmul(probs, vals).astype(np.float32)  # [B, N, S, H]
    out = out.transpose(0, 2, 1, 3).reshape(b, s, n * h)
    return [result(out, dtype), result(present_k, dtype), result(present_v, dtype)]


def _windowed_cache(pk, pv, kh, vh, lens, window):
    """sliding_window_cache=1 (ORT's windowed KV cache). past/present hold the most recent rows of
    each entry at cache rows [0, L), capacity C >= window w. Appending past C reclaims
    gap = C - w + 1 rows at once (the oldest), so the resident length after a past of P tokens is
    end(P) = P if P <= C else P - gap * ceil((P - C) / gap). A step keeps the last
    kept = end(P + S) - S resident rows and appends S; if any entry would drop rows its first query
    still sees (kept < min(P, w - 1)), attention runs over all resident rows plus the new ones and
    only the surviving tail is written back. Attention then runs in cache coordinates (causal
    offset = resident rows used), which the local window makes exact. Present rows past the
    written ones are left as zeros (ORT leaves them unwritten).
    Returns (cache_k, cache_v, causal offsets, cache lengths, present_k, present_v)."""
    b, nkv, cap, h = pk.shape
    s = kh.shape[2]
    gap = cap - window + 1

    def end(p):
        return p if p <= cap else p - gap * ((p - cap + gap - 1) // gap)

    past = [max(int(t) - s, 0) for t in lens]
    before = [end(p) for p in past]
    kept = [end(p + s) - s for p in past]
    staging = any(k < min(p, window - 1) for k, p in zip(kept, past))
    seed = before if staging else kept  # resident rows attention sees, per entry
    offset = [0] * b if staging else [e - k for e, k in zip(before, kept)]
    rows = max(before) + s if staging else cap
    cache_k = np.zeros((b, nkv, rows, h), np.float32)
    cache_v = np.zeros((b, nkv, rows, h), np.float32)
    for i in range(b):
        o, n_seed = offset[i], seed[i]
        cache_k[i, :, :n_seed] = pk[i, :, o:o + n_seed]
        cache_v[i, :, :n_seed] = pv[i, :, o:o + n_seed]
        cache_k[i, :, n_seed:n_seed + s] = kh[i]
        cache_v[i, :, n_seed:n_seed + s] = vh[i]
    if staging:
        present_k = np.zeros((b, nkv, cap, h), np.float32)
        present_v = np.zeros((b, nkv, cap, h), np.float32)
        for i in range(b):
            first, count = before[i] - kept[i], kept[i] + s
            present_k[i, :, :count] = cache_k[i, :, first:first + count]
            present_v[i, :, :count] = cache_v[i, :, first:first + count]
    else:
        present_k, present_v = cache_k, cache_v
    seeds = np.array(seed, np.int64)
    return cache_k, cache_v, seeds, seeds + s, present_k, present_v


@shape_rule(GQA, symbolic=True)
def _gqa_shape(types, values, attrs, num_outputs):
    n, nkv = int(attrs["num_heads"]), int(attrs["kv_num_heads"])
    q, k, pk = shape_of(at(types, 0)), shape_of(at(types, 1)), shape_of(at(types, 3))
    elem = elem_of(at(types, 0))
    packed = at(types, 1) is None
    b = s = h = None
    if q is not None:
        if len(q) != 3:
            raise RuntimeShapeError(f"{GQA}: query must be 3-D [batch, sequence, hidden], got {pshape_str(q)}")
        b, s, d = q
        if d is not None:
            width = n + 2 * nkv if packed else n
            if d % width:
                raise RuntimeShapeError(f"{GQA}: query hidden size {d} is not a multiple of {width}")
            h = d // width
    if not packed and k is not None and len(k) == 3:
        b = b if b is not None else k[0]
        s = s if s is not None else k[1]
        if h is None and k[2] is not None and k[2] % nkv == 0:
            h = k[2] // nkv
    cap = None
    if pk is not None and len(pk) == 4:
        b = b if b is not None else pk[0]
        h = h if h is not None else pk[3]
        cap = pk[2]
    elif at(types, 3) is None:
        cap = 0
    present_len = None
    total = known_value(types, values, 6)
    if _windowed(attrs):
        if cap is not None:
            _check_window_capacity(cap, int(attrs["local_window_size"]))
        present_len, total = cap, None
    if total is not None:
        if total.size != 1:
            raise RuntimeShapeError(f"{GQA}: total_sequence_length must have one element, got shape "
                                    f"{shape_str(total.shape)}")
        t = dim_value(total.reshape(-1)[0])
        if cap is not None and s is not None:
            _check_total(t, cap, s)
        if cap is not None:
            present_len = max(t, cap)
    out = (b, s, None if h is None else n * h)
    present = (b, nkv, present_len, h)
    return [tensor_type(elem, out), tensor_type(elem, present), tensor_type(elem, present)]


def _claim_gqa(node, graph, attrs):
    n, nkv = int(attrs["num_heads"]), int(attrs["kv_num_heads"])
    if n <= 0 or nkv <= 0 or n % nkv:
        return f"num_heads={n} must be a positive multiple of kv_num_heads={nkv}"
    for name, ok in (("k_quant_type", "NONE"), ("v_quant_type", "NONE")):
        if str(attrs[name]).upper() != ok:
            return f"attribute {name}={attrs[name]!r} (quantized KV cache) is not implemented"
    if int(attrs["kv_cache_bit_width"]) != 0:
        return f"attribute kv_cache_bit_width={attrs['kv_cache_bit_width']} (quantized KV cache) is not implemented"
    if int(attrs["sliding_window_cache"]) == 1:
        if int(attrs["local_window_size"]) <= 0:
            return "sliding_window_cache=1 needs local_window_size > 0"
        if not has_input(node, 3):
            return "sliding_window_cache=1 needs past_key/past_value (the cache's capacity)"
        if len(node.outputs) < 3 or not node.outputs[1] or not node.outputs[2]:
            return "sliding_window_cache=1 needs the present_key and present_value outputs"
        if has_input(node, 10):
            return "attention_bias together with sliding_window_cache=1 is not implemented"
    elif int(attrs["sliding_window_cache"]) != 0:
        return f"attribute sliding_window_cache={attrs['sliding_window_cache']} is invalid"
    if int(attrs["qk_output"]) != 0:
        return f"attribute qk_output={attrs['qk_output']} (the output_qk output) is not implemented"
    if len([o for o in node.outputs[3:] if o]):
        return "the output_qk output (output 3) is not implemented"
    if int(attrs["causal"]) != 1:
        return f"attribute causal={attrs['causal']} is not implemented (only causal attention)"
    for i in (12, 13):
        if has_input(node, i):
            return f"input {i} ({_GQA_INPUTS[i]}) is not implemented"
    if has_input(node, 14) != has_input(node, 15):
        return "q_norm_weight and k_norm_weight must both be present, or both absent"
    for i in (5, 6):
        if not has_input(node, i):
            return f"input {i} ({_GQA_INPUTS[i]}) is required"
    if has_input(node, 1) != has_input(node, 2):
        return "key and value must both be present, or both absent (packed QKV)"
    if has_input(node, 3) != has_input(node, 4):
        return "past_key and past_value must both be present, or both absent"
    if has_input(node, 3) and (len(node.outputs) < 3 or not node.outputs[1] or not node.outputs[2]):
        return "past_key without the present_key/present_value outputs is not implemented (ORT ignores the past)"
    if has_input(node, 7) != has_input(node, 8):
        return "cos_cache and sin_cache must both be present, or both absent"
    if int(attrs["do_rotary"]) and not has_input(node, 7):
        return "do_rotary=1 needs cos_cache and sin_cache"
    if has_input(node, 11) and int(attrs["smooth_softmax"]) == 1:
        return "head_sink together with smooth_softmax=1 is invalid"
    t = input_type(node, graph, 6)
    if t is not None and t.rank is not None and t.rank > 1:
        return f"total_sequence_length must be a scalar or a 1-element vector, got rank {t.rank}"
    return None


register(OpDef(
    GQA, (1,),
    ("T", "T", "T", "T", "T", "M", "M", "T", "T", "I64", "T", "T", "", "", "T", "T"),
    ("T", "T", "T", "T"),
    {"T": LLM_FLOATS, "M": I32S, "I64": I64S}, _gqa, domain="com.microsoft",
    attributes={"num_heads": REQUIRED, "kv_num_heads": REQUIRED, "scale": 0.0, "softcap": 0.0,
                "local_window_size": -1, "do_rotary": 0, "rotary_interleaved": 0, "smooth_softmax": 0,
                "qk_output": 0, "causal": 1, "sliding_window_cache": 0, "k_quant_type": "NONE",
                "v_quant_type": "NONE", "kv_cache_bit_width": 0, "qk_norm_epsilon": 1e-6},
    claim=_claim_gqa, min_inputs=1, shape_rule=_gqa_shape, host_inputs=(6,), inplace={1: 3, 2: 4}))


