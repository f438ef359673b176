"""Attention and rotary embeddings, as ONNX Runtime's CPU EP computes them.

com.microsoft: GroupQueryAttention (what onnxruntime-genai's model builder emits for every
decoder), MultiHeadAttention and RotaryEmbedding; ai.onnx: RotaryEmbedding-23 and Attention-23/24.

Numerics follow ORT's CPU kernels: GroupQueryAttention and the rotary embeddings round the rotated
Q/K to the input dtype, then run the scores, softmax and the probability-weighted sum of V in f32
and round the output once; MultiHeadAttention likewise (its bias is added in f32); ai.onnx
Attention in f16 also rounds the scores and the probabilities to f16 (see there).

Bit-exact f32 (ORT 1.31 on x86-64 with AVX512): the rotary embeddings (MLAS's fused rope kernel)
and GroupQueryAttention without head_sink / smooth_softmax replay ORT's kernels operation by
operation -- its flash path (MlasFlashAttentionGQA: tiled online softmax for prompts, GEMVs for one
token; taken without softcap when total_sequence_length > 1) and otherwise its GEMM + MLAS softmax
path (softcap through libm's tanhf) -- see _gqa_flash_mlas / _gqa_naive_mlas. Not replayed (exact
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
"""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ._common import (at, dim_value, elem_of, has_input, input_type, kernel, known_value, pshape_str, result,
                      shape_of, shape_rule, shape_str, tensor_type)
from .elementwise import fma_f32, libm_f32
from .normalization import mlas_exp_shifted, mlas_softmax_windows, mlas_sum16
from .registry import BOOL, F16, F32, I32, I64, OUTPUT_COUNT, REQUIRED, OpDef, register

FLOATS = frozenset({F32, F16})
I32S = frozenset({I32})
I64S = frozenset({I64})


def _f32(a):
    return None if a is None else np.asarray(a).astype(np.float32)


def _round(a, dtype):
    """Rounds f32 math to the op's dtype (the f16 kernels store intermediates as f16)."""
    return np.asarray(a, dtype=np.float32).astype(dtype).astype(np.float32)


def _rope(x, cos, sin, interleaved: bool, fused: bool = False):
    """Rotates the last axis of x (f32, width R) by angles whose cos/sin have width R/2 and
    broadcast against x[..., :R/2]. fused=True is MLAS's f32 kernel (MlasRotaryEmbedOneRow, AVX2):
    real' = fma(real, cos, -(imag * sin)), imag' = fma(real, sin, imag * cos)."""
    half = x.shape[-1] // 2
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]
    else:
        x1, x2 = x[..., :half], x[..., half:2 * half]
    if fused:
        cos, sin = np.asarray(cos, np.float32), np.asarray(sin, np.float32)
        r = fma_f32(x1, cos, -(x2 * sin).astype(np.float32))
        i = fma_f32(x1, sin, (x2 * cos).astype(np.float32))
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


# ---- MLAS arithmetic (bit-exact f32 attention on x86-64 AVX512) -------------------------------
# ORT's f32 GroupQueryAttention runs MLAS kernels; these reproduce them operation by operation:
#   * sgemm: MLAS's SGEMM kernel -- one fma chain per output over K in order, then times alpha;
#     with M == 1, alpha == 1 and beta 0/1 MLAS takes MlasSgemmKernelM1Avx instead: products
#     summed four rows of K at a time (((p0 + p1) + p2) + p3), each group then added to C.
#   * softmax over a window: max, MlasComputeSumExpF32KernelAvx512F's exp (fma range reduction,
#     degree-6 polynomial, vscalef) and its 16-lane sum, then e * (1 / sum);
#   * softcap: x / c, libm tanhf, * c (MlasComputeSoftcap calls std::tanh).
_F32_LOWEST = np.float32(np.finfo(np.float32).min)


def _mlas_sgemm(a, b, alpha=1.0, c=None):
    """MlasSgemmOperation's general path on [..., M, K] @ [..., K, N] (A not transposed): K is cut
    into MLAS's StrideK slices (128, grown or shrunk with N as MLAS does); per slice every output
    is one fma chain over the slice in order, then C = acc * alpha (first slice, beta 0) or
    C = fma(acc, alpha, C) (later slices, or beta 1 with c given)."""
    f32 = np.float32
    k_count, n_count = a.shape[-1], b.shape[-1]
    stride_n, stride_k = 128, 128
    if n_count >= k_count:
        while stride_k // 2 >= k_count:
            stride_n, stride_k = stride_n * 2, stride_k // 2
    else:
        while stride_n > 16 and stride_n // 2 >= n_count:
            stride_n, stride_k = stride_n // 2, stride_k * 2
    out = None if c is None else np.asarray(c, f32)
    for k0 in range(0, k_count, stride_k):
        acc = np.zeros(a.shape[:-1] + (n_count,), f32)
        for k in range(k0, min(k_count, k0 + stride_k)):
            acc = fma_f32(a[..., :, k:k + 1], b[..., k:k + 1, :], acc)
        out = (acc * f32(alpha)).astype(f32) if out is None else fma_f32(acc, f32(alpha), out)
    if out is None:
        out = np.zeros(a.shape[:-1] + (n_count,), f32)
    return out


def _mlas_sgemm_m1(a, b, c=None):
    """MlasSgemmKernelM1Avx: [..., 1, K] @ [..., K, N] (alpha 1), added to c when given (beta 1)."""
    f32 = np.float32
    k_count = a.shape[-1]

    def prod(i):
        return (a[..., :, i:i + 1] * b[..., i:i + 1, :]).astype(f32)

    k = 0
    while k_count - k >= 4:
        t = prod(k)
        for i in range(k + 1, k + 4):
            t = (t + prod(i)).astype(f32)
        c = t if c is None else (t + c).astype(f32)
        k += 4
    for width in (2, 1):
        if (k_count - k) & width:
            t = prod(k) if width == 1 else (prod(k) + prod(k + 1)).astype(f32)
            c = t if c is None else (t + c).astype(f32)
            k += width
    if c is None:
        c = np.zeros(a.shape[:-1] + (b.shape[-1],), f32)
    return c


def _mlas_sv(probs, v, c=None):
    """probs [..., M, K] @ v [..., K, N] as MlasSgemmOperation (alpha 1) computes it."""
    if probs.shape[-2] == 1:
        return _mlas_sgemm_m1(probs, v, c)
    return _mlas_sgemm(probs, v, 1.0, c)


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


def _gqa_naive_mlas(qh, keys, vals, scale, softcap, bias, lens, lo, hi):
    """ORT's f32 GQA without its flash kernel (softcap, ...): per entry b, scores over the
    t_b = lens[b] valid keys = sgemm(Q, K^T) * scale; per row softcap and bias over the window
    [lo, hi), softmax over it (zeros elsewhere); out = probs @ V over all t_b keys.
    qh [B, N, S, H], keys/vals [B, N, P, H], bias f32 [B|1, N|1, S, T] or None; lo/hi [B, S]."""
    b_count, n, s, h = qh.shape
    out = np.zeros((b_count, n, s, h), np.float32)
    cap = np.float32(softcap)
    for b in range(b_count):
        t = int(lens[b])
        sc = _mlas_sgemm(qh[b], keys[b, :, :t].transpose(0, 2, 1), scale)  # [N, S, T]
        rlo = np.broadcast_to(lo[b][None, :], (n, s)).reshape(-1)
        rhi = np.broadcast_to(hi[b][None, :], (n, s)).reshape(-1)
        flat = sc.reshape(n * s, t)
        win = (np.arange(t)[None, :] >= rlo[:, None]) & (np.arange(t)[None, :] < rhi[:, None])
        if softcap > 0:
            v = (flat[win] / cap).astype(np.float32)
            flat[win] = (libm_f32("tanhf")(v) * cap).astype(np.float32)
        if bias is not None:
            bb = np.broadcast_to(bias[min(b, bias.shape[0] - 1)][..., :t], (n, s, t)).reshape(n * s, t)
            flat[win] = (flat[win] + bb[win]).astype(np.float32)
        probs = mlas_softmax_windows(flat, rlo, rhi).reshape(n, s, t)
        out[b] = _mlas_sv(probs, vals[b, :, :t])
    return out


def _flash_blocks(h: int, max_total: int, s: int):
    """(kv_block_size, q_block_size) as ORT's ApplyAttentionFlash picks them from the L2 size."""
    import os

    try:  # ORT calls sysconf(_SC_LEVEL2_CACHE_SIZE); Python lacks the name: glibc's value is 191
        l2 = int(os.sysconf(os.sysconf_names.get("SC_LEVEL2_CACHE_SIZE", 191)))
    except (ValueError, OSError, AttributeError):
        l2 = 0
    kv = int(l2 / (4 * 4 * (h + h)))  # C++ int division truncates toward zero
    kv = max(kv, 1)
    q = min(kv, 2 * h)
    return min(kv, max_total), min(q, s)


def _gqa_decode_mlas(q, keys, vals, scale, bias, t, window):
    """ORT's flash-path decode (MlasGQADecodeGQAThreaded, one query token): plain f32 GEMVs
    (no fma) -- scores[t] = sum of 8 lane accumulators ((a0 + a1) + (a2 + a3)) + ((a4 + a5) +
    (a6 + a7)) (+ the H % 8 tail in order) times scale; keys before t - window masked to
    FLT_LOWEST; MLAS's exp and 16-lane sum; out = (sum over keys in order of e * V) * (1 / l).
    q [N, 1, H], keys/vals [N, P, H], bias [N|1, 1, T] or None."""
    f32 = np.float32
    n, _, h = q.shape
    qq, kk = q[:, 0, None, :], keys[:, :t]                       # [N, 1, H], [N, T, H]
    full = h - h % 8
    acc = np.zeros((n, t, 8), f32)
    for h0 in range(0, full, 8):
        acc = (acc + (qq[..., h0:h0 + 8] * kk[..., h0:h0 + 8]).astype(f32)).astype(f32)
    sc = (((acc[..., 0] + acc[..., 1]).astype(f32) + (acc[..., 2] + acc[..., 3]).astype(f32)).astype(f32)
          + ((acc[..., 4] + acc[..., 5]).astype(f32) + (acc[..., 6] + acc[..., 7]).astype(f32)).astype(f32))
    sc = sc.astype(f32)
    for i in range(full, h):
        sc = (sc + (qq[..., i] * kk[..., i]).astype(f32)).astype(f32)
    sc = (sc * f32(scale)).astype(f32)                           # [N, T]
    if bias is not None:
        sc = (sc + bias[:, 0, :t]).astype(f32)
    if 0 <= window < t:
        sc[:, :t - window] = _F32_LOWEST
    rowmax = sc.max(axis=-1, keepdims=True)
    e = mlas_exp_shifted(sc, -rowmax)
    l_sum = mlas_sum16(e)
    o = np.zeros((n, h), f32)
    for i in range(t):
        o = (o + (e[:, i, None] * vals[:, i]).astype(f32)).astype(f32)
    with np.errstate(all="ignore"):
        inv = np.where(l_sum > 0, (f32(1.0) / l_sum).astype(f32), f32(0)).astype(f32)
    o = (o * inv[:, None]).astype(f32)
    return np.where(rowmax == _F32_LOWEST, f32(0), o)[:, None, :].astype(f32)


def _gqa_flash_mlas(qh, keys, vals, scale, bias, lens, has_past, first_prompt, window):
    """ORT's f32 GQA flash path (MlasFlashAttentionGQA): per query block and KV block,
    scores = sgemm(Q, K^T) * scale (+ bias), masked to FLT_LOWEST beyond the causal limit
    past + row + 1 and before limit - window; online softmax with MLAS's exp and 16-lane sums;
    O = sum of exp(scores - max) @ V (rescaled by libm expf across KV blocks), times 1 / l."""
    f32 = np.float32
    b_count, n, s, h = qh.shape
    max_total = int(lens.max())
    ragged = int(lens.min()) != max_total
    kv_block, q_block = _flash_blocks(h, max_total, s)
    out = np.zeros((b_count, n, s, h), f32)
    if s == 1:
        for b in range(b_count):
            out[b] = _gqa_decode_mlas(qh[b], keys[b], vals[b], scale, None if bias is None else
                                      bias[min(b, bias.shape[0] - 1)], int(lens[b]) if ragged else max_total,
                                      window)
        return out
    for b in range(b_count):
        t = int(lens[b]) if ragged else max_total
        kvb = min(kv_block, t) if ragged else kv_block
        past = 0 if (not has_past or first_prompt) else max(0, t - s)
        for q0 in range(0, s, q_block):
            rq = min(q_block, s - q0)
            q = qh[b, :, q0:q0 + rq]                         # [N, rq, H]
            m = np.full((n, rq, 1), _F32_LOWEST, f32)
            l_sum = np.zeros((n, rq), f32)
            acc = np.zeros((n, rq, h), f32)
            limit = past + q0 + rq
            for ir in range(0, t, kvb):
                if ir >= limit:
                    break
                rkv = min(kvb, t - ir)
                sc = _mlas_sgemm(q, keys[b, :, ir:ir + rkv].transpose(0, 2, 1), scale)  # [N, rq, rkv]
                if bias is not None:
                    bb = bias[min(b, bias.shape[0] - 1)][:, q0:q0 + rq, ir:ir + rkv]
                    sc = (sc + bb).astype(f32)
                causal = past + q0 + np.arange(rq)[:, None] + 1     # [rq, 1]
                pos = ir + np.arange(rkv)[None, :]
                masked = pos >= causal
                if window >= 0:
                    start = np.where(causal > window, causal - window, 0)
                    masked = masked | (pos < start)
                sc = np.where(masked[None], _F32_LOWEST, sc).astype(f32)
                rowmax = sc.max(axis=-1, keepdims=True)
                dead = rowmax == _F32_LOWEST                        # [N, rq, 1]
                m_new = np.where(dead, m, np.maximum(m, rowmax)).astype(f32)
                e = np.where(dead, f32(0), mlas_exp_shifted(sc, -m_new)).astype(f32)
                rowsum = mlas_sum16(e)                              # [N, rq]
                if ir:
                    diff = np.where(dead[..., 0], f32(0), (m[..., 0] - m_new[..., 0]).astype(f32))
                    ed = libm_f32("expf")(diff)
                    l_sum = np.where(dead[..., 0], l_sum, ((ed * l_sum).astype(f32) + rowsum).astype(f32))
                    acc = np.where(dead, acc, (acc * ed[..., None]).astype(f32))
                else:
                    l_sum = np.where(dead[..., 0], l_sum, rowsum)
                m = m_new
                acc = _mlas_sv(e, vals[b, :, ir:ir + rkv], None if ir == 0 else acc)
            with np.errstate(all="ignore"):
                inv = np.where(l_sum > 0, (f32(1.0) / l_sum).astype(f32), f32(0)).astype(f32)
            out[b, :, q0:q0 + rq] = (acc * inv[..., None]).astype(f32)
    return out


def _mlas_exact_ok(flash: bool, unit_scale: bool, s: int, h: int) -> bool:
    """Whether _gqa_naive_mlas / _gqa_flash_mlas reproduce ORT: with scale == 1 a one-row Q@K^T
    GEMM would take MLAS's M1-transpose kernel, which they do not emulate."""
    if not unit_scale:
        return True
    if not flash:
        return s > 1
    if s == 1:
        return True  # the decode GEMV
    q_block = _flash_blocks(h, 1 << 30, s)[1]
    return q_block > 1 and s % q_block != 1


@kernel(GQA)
def _gqa(inputs, attrs):
    inputs = list(inputs) + [None] * (len(_GQA_INPUTS) - len(inputs))
    n, nkv, b, s, h, packed, cap, t = _gqa_check(inputs, attrs)
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
    for i in (12, 13, 14, 15):
        if has_input(node, i):
            return f"input {i} ({_GQA_INPUTS[i]}) is not implemented"
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
    {"T": FLOATS, "M": I32S, "I64": I64S}, _gqa, domain="com.microsoft",
    attributes={"num_heads": REQUIRED, "kv_num_heads": REQUIRED, "scale": 0.0, "softcap": 0.0,
                "local_window_size": -1, "do_rotary": 0, "rotary_interleaved": 0, "smooth_softmax": 0,
                "qk_output": 0, "causal": 1, "sliding_window_cache": 0, "k_quant_type": "NONE",
                "v_quant_type": "NONE", "kv_cache_bit_width": 0, "qk_norm_epsilon": 1e-6},
    claim=_claim_gqa, min_inputs=1, shape_rule=_gqa_shape, host_inputs=(6,), inplace={1: 3, 2: 4}))


# ---- RotaryEmbedding (com.microsoft and ai.onnx-23) ------------------------------------------

def _rope_layout(op, x, num_heads, head_size_of):
    """x as f32 [B, S, N, H] plus a function mapping such an array back to x's layout.
    3-D inputs are [B, S, N*H]; 4-D inputs are [B, N, S, H]."""
    if x.ndim == 3:
        b, s, hidden = x.shape
        h = head_size_of(hidden)
        n = num_heads or (hidden // h if h else 0)
        if h <= 0 or n <= 0 or n * h != hidden:
            raise RuntimeShapeError(f"{op}: input hidden size {hidden} is not num_heads ({n}) * head_size ({h})")
        return _f32(x).reshape(b, s, n, h), lambda y: y.reshape(b, s, hidden)
    if x.ndim == 4:
        b, n, s, h = x.shape
        return _f32(x).transpose(0, 2, 1, 3), lambda y: y.transpose(0, 2, 1, 3)
    raise RuntimeShapeError(f"{op}: input must be 3-D [batch, sequence, hidden] or 4-D [batch, heads, sequence, "
                            f"head_size], got {shape_str(x.shape)}")


def _rope_apply(op, x4, cos, sin, rotary_dim, interleaved, fused=False):
    """x4 [B, S, N, H] f32; cos/sin [B, S, R/2] f32 (R = rotary_dim). fused: MLAS's f32 kernel."""
    h = x4.shape[-1]
    if rotary_dim <= 0 or rotary_dim > h or rotary_dim % 2:
        raise RuntimeShapeError(f"{op}: rotary_embedding_dim {rotary_dim} must be even and at most the head "
                                f"size {h}")
    if cos.shape[-1] != rotary_dim // 2:
        raise RuntimeShapeError(f"{op}: cos_cache/sin_cache last dim must be rotary_embedding_dim / 2 = "
                                f"{rotary_dim // 2}, got {cos.shape[-1]}")
    return _rotate_heads(x4, cos[:, :, None], sin[:, :, None], rotary_dim, interleaved, fused)


def _gather_cache(op, cache, pos):
    if pos.size and (pos.min() < 0 or pos.max() >= cache.shape[0]):
        bad = int(pos.max()) if pos.max() >= cache.shape[0] else int(pos.min())
        raise RuntimeShapeError(f"{op}: position id {bad} "
                                f"is out of range for a cache of {cache.shape[0]} positions")
    return _f32(cache)[pos]


MS_ROPE = "RotaryEmbedding"


@kernel(MS_ROPE)
def _ms_rope(inputs, attrs):
    x, pos_ids, cos, sin = inputs[:4]
    op = MS_ROPE
    n, rd = int(attrs["num_heads"]), int(attrs["rotary_embedding_dim"])
    if cos.ndim != 2 or sin.shape != cos.shape:
        raise RuntimeShapeError(f"{op}: cos_cache and sin_cache must both be 2-D [max_position, rotary_dim / 2], "
                                f"got {shape_str(cos.shape)} and {shape_str(sin.shape)}")
    if x.ndim not in (3, 4):
        raise RuntimeShapeError(f"{op}: input must be 3-D or 4-D, got {shape_str(x.shape)}")
    hidden = x.shape[2] if x.ndim == 3 else x.shape[1] * x.shape[3]
    h = 2 * cos.shape[1] if rd == 0 else (hidden // n if n else 0)
    if x.ndim == 4 and n and n != x.shape[1]:
        raise RuntimeShapeError(f"{op}: num_heads={n} differs from the input's {x.shape[1]} heads")
    if x.ndim == 4 and h != x.shape[3]:
        raise RuntimeShapeError(f"{op}: head size {h} (from the caches / attributes) differs from the input's "
                                f"{x.shape[3]}")
    x4, back = _rope_layout(op, x, n, lambda hidden: h)
    b, s = x4.shape[:2]
    if s > cos.shape[0]:
        raise RuntimeShapeError(f"{op}: sequence length {s} exceeds the caches' {cos.shape[0]} positions")
    if pos_ids.size == 1 and pos_ids.ndim <= 1:
        pos = int(pos_ids.reshape(-1)[0]) + np.arange(s)[None, :].repeat(b, 0)
    elif pos_ids.shape == (b, s):
        pos = pos_ids.astype(np.int64)
    else:
        raise RuntimeShapeError(f"{op}: position_ids must be one element or [batch, sequence] = {shape_str((b, s))}, "
                                f"got {shape_str(pos_ids.shape)}")
    out = _rope_apply(op, x4, _gather_cache(op, cos, pos), _gather_cache(op, sin, pos), rd or h,
                      bool(int(attrs["interleaved"])), x.dtype == np.float32)
    return [result(back(out), x.dtype)]


def _same_shape_rule(op):
    @shape_rule(op, symbolic=True)
    def rule(types, values, attrs, num_outputs):
        x = shape_of(types[0])
        if x is not None and len(x) not in (3, 4):
            raise RuntimeShapeError(f"{op}: input must be 3-D or 4-D, got {pshape_str(x)}")
        return [tensor_type(elem_of(types[0]), x)]
    return rule


def _claim_ms_rope(node, graph, attrs):
    if int(attrs["is_packed_batching"]):
        return "attribute is_packed_batching=1 is not implemented"
    if int(attrs["rotary_embedding_dim"]) > 0 and int(attrs["num_heads"]) <= 0:
        return "rotary_embedding_dim needs num_heads"
    t = input_type(node, graph, 0)
    if t is not None and t.rank is not None and t.rank not in (3, 4):
        return f"input rank {t.rank} is not supported (3-D or 4-D only)"
    return None


register(OpDef(MS_ROPE, (1,), ("T", "M", "T", "T"), ("T",), {"T": FLOATS, "M": I64S}, _ms_rope,
               domain="com.microsoft",
               attributes={"num_heads": 0, "rotary_embedding_dim": 0, "interleaved": 0, "scale": 1.0,
                           "is_packed_batching": 0},
               claim=_claim_ms_rope, shape_rule=_same_shape_rule("RotaryEmbedding")))


@kernel("RotaryEmbedding")
def _onnx_rope(inputs, attrs):
    x, cos, sin = inputs[:3]
    pos_ids = at(inputs, 3)
    op = "RotaryEmbedding"
    n, rd = int(attrs["num_heads"]), int(attrs["rotary_embedding_dim"])
    if x.ndim == 3 and n <= 0:
        raise RuntimeShapeError(f"{op}: a 3-D input needs the num_heads attribute")
    x4, back = _rope_layout(op, x, n if x.ndim == 3 else 0, lambda hidden: hidden // n)
    b, s = x4.shape[:2]
    if sin.shape != cos.shape:
        raise RuntimeShapeError(f"{op}: cos_cache {shape_str(cos.shape)} and sin_cache {shape_str(sin.shape)} differ")
    if pos_ids is None:
        if cos.ndim != 3 or cos.shape[:2] != (b, s):
            raise RuntimeShapeError(f"{op}: without position_ids, cos_cache must be [batch, sequence, rotary_dim / 2] "
                                    f"with batch, sequence = {b}, {s}, got {shape_str(cos.shape)}")
        c, sn = _f32(cos), _f32(sin)
    else:
        if cos.ndim != 2:
            raise RuntimeShapeError(f"{op}: with position_ids, cos_cache must be 2-D [max_position, rotary_dim / 2], "
                                    f"got {shape_str(cos.shape)}")
        if pos_ids.shape != (b, s):
            raise RuntimeShapeError(f"{op}: position_ids must be [batch, sequence] = {shape_str((b, s))}, got "
                                    f"{shape_str(pos_ids.shape)}")
        pos = pos_ids.astype(np.int64)
        c, sn = _gather_cache(op, cos, pos), _gather_cache(op, sin, pos)
    out = _rope_apply(op, x4, c, sn, rd or x4.shape[-1], bool(int(attrs["interleaved"])), x.dtype == np.float32)
    return [result(back(out), x.dtype)]


def _claim_onnx_rope(node, graph, attrs):
    t = input_type(node, graph, 0)
    if t is not None and t.rank is not None:
        if t.rank not in (3, 4):
            return f"input rank {t.rank} is not supported (3-D or 4-D only)"
        if t.rank == 3 and int(attrs["num_heads"]) <= 0:
            return "a 3-D input needs the num_heads attribute"
    return None


register(OpDef("RotaryEmbedding", (23,), ("T", "T", "T", "M"), ("T",), {"T": FLOATS, "M": I64S}, _onnx_rope,
               attributes={"num_heads": 0, "rotary_embedding_dim": 0, "interleaved": 0},
               claim=_claim_onnx_rope, min_inputs=3, shape_rule=_same_shape_rule("RotaryEmbedding")))


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


# ---- Attention (ai.onnx 23, 24) ----------------------------------------------------------------
# As ORT's CPU kernel (core/providers/cpu/llm/attention.cc): scores = scale * Q K^T, softcap,
# then the mask (a bool mask and the causal frontier j > past + i become the finite sentinel
# float-lowest, a float mask is added as is), then Attention-24's nonpad_kv_seqlen sets keys
# j >= nonpad[b] to the sentinel (the causal frontier stays top-left aligned without a past).
# A row whose every key is masked therefore averages V uniformly (it is all sentinels). In f16
# the scores, the probabilities and the output are each rounded to f16 (ORT's f16 GEMMs write
# f16); the softmax itself runs in f32.

ATTN = "Attention"


def _attn_heads(x, heads, what):
    """3-D [B, S, heads*H] -> [B, heads, S, H] (f32)."""
    b, s, d = x.shape
    if heads <= 0 or d % heads:
        raise RuntimeShapeError(f"{ATTN}: {what} hidden size {d} is not a multiple of its head count {heads}")
    return _f32(x).reshape(b, s, heads, d // heads).transpose(0, 2, 1, 3)


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
    lowest = np.float32(np.finfo(dtype).min)
    if nonpad is not None:
        if pk is not None or nonpad.shape != (b,):
            raise RuntimeShapeError(f"{ATTN}: nonpad_kv_seqlen must be [batch] = [{b}] without past_key, got "
                                    f"{shape_str(nonpad.shape)}")
        if nonpad.min() < 0 or nonpad.max() > t:
            raise RuntimeShapeError(f"{ATTN}: nonpad_kv_seqlen values must be in [0, {t}], got {nonpad.tolist()}")
    bias = None
    if mask is not None:
        if mask.ndim < 2 or mask.ndim > 4 or mask.shape[-1] != t or mask.shape[-2] != s \
                or (mask.ndim >= 3 and mask.shape[-3] not in (1, nq)) \
                or (mask.ndim == 4 and mask.shape[0] not in (1, b)):
            raise RuntimeShapeError(f"{ATTN}: attn_mask {shape_str(mask.shape)} does not broadcast to "
                                    f"[batch, q_num_heads, q_sequence, total_sequence] = {shape_str((b, nq, s, t))}")
        bias = np.where(mask, 0.0, lowest).astype(np.float32) if mask.dtype == np.bool_ else _f32(mask)
        bias = np.broadcast_to(bias.reshape((1,) * (4 - mask.ndim) + mask.shape), (b, nq, s, t))
    if int(attrs["is_causal"]):
        # Bottom-right aligned: the past length, or (Attention-24 without a past) nonpad[b] - S.
        offset = np.full(b, p) if nonpad is None else nonpad.astype(np.int64) - s
        future = np.arange(t)[None, None, :] > offset[:, None, None] + np.arange(s)[None, :, None]
        bias = np.where(future[:, None], lowest, 0.0 if bias is None else bias).astype(np.float32)
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
    t = input_type(node, graph, 3)
    if t is not None and t.rank is not None and not 2 <= t.rank <= 4:
        return f"attn_mask of rank {t.rank} is not supported (2-D to 4-D)"
    if t is not None and t.elem_type not in (BOOL, elem_of(input_type(node, graph, 0))):
        return f"attn_mask of element type {t.dtype_name} is not supported (bool or Q's type, as ORT's CPU kernel)"
    if has_input(node, 6) and has_input(node, 4):
        return "nonpad_kv_seqlen together with past_key is invalid"
    mode = int(attrs["qk_matmul_output_mode"])
    if len(node.outputs) > 3 and node.outputs[3] and mode in (1, 2) and int(attrs.get("is_causal", 0)):
        # There the scores output holds masked positions: ONNX writes -inf, ORT's CPU kernel the
        # lowest float (ONNX's own test_attention_4d_*_qk_matmul_bias_*_mask_causal fail on ORT).
        return (f"output qk_matmul_output with qk_matmul_output_mode={mode} and is_causal=1: ONNX Runtime "
                f"and the ONNX spec write different values (lowest float vs -inf) at masked positions")
    return None


register(OpDef(
    ATTN, (23, 24), ("T", "T", "T", "", "T", "T", "I64"), ("T", "T", "T", "T"),
    {"T": FLOATS, "I64": I64S}, _attention,
    attributes={"is_causal": 0, "kv_num_heads": 0, "q_num_heads": 0, "qk_matmul_output_mode": 0,
                "scale": None, "softcap": 0.0, "softmax_precision": 0},
    claim=_claim_attention, min_inputs=3, shape_rule=_attention_shape))
