"""MLAS replays: numpy code that computes, operation by operation and in the same order, what
ONNX Runtime's CPU EP computes through MLAS.

MLAS ("Microsoft Linear Algebra Subprograms", onnxruntime/core/mlas) is the math library under
ORT's CPU EP: its SGEMM, softmax, LayerNorm, rotary and quantized-GEMM kernels, hand-written per
instruction set (AVX2/FMA3, AVX512F, AVX512-VNNI on x86-64). Float sums and fused multiply-adds
round differently in every order, so a reference that is merely "correct" differs from the CPU EP
in the last bits; in an int4 decoder an int8 activation quantization turns such a 1-ulp difference
upstream into a different logit, and greedy decoding into different tokens. hipep's references
replay MLAS's order so that hipep's tokens equal the CPU EP's bit for bit (ORT 1.31, x86-64 with
AVX512-VNNI, the machines CI runs on; elsewhere they stay within f32 rounding). The GPU kernels
need not follow these orders; they are the oracle's, not the device's.

What is here, and which op's reference calls it:

* SGEMM (`_mlas_sgemm`, `_mlas_sgemm_m1`, `_mlas_sv`) and ORT's f32 GroupQueryAttention paths
  built on it (`_gqa_naive_mlas`, `_gqa_flash_mlas`, `_gqa_decode_mlas`, `_flash_blocks`,
  `_mlas_exact_ok`): contrib_attention.py;
* softmax (`mlas_exp_shifted`, `mlas_sum16`, `mlas_softmax_windows`, `_mlas_softmax_f32`):
  normalization.py (Softmax, LogSoftmax) and GroupQueryAttention;
* LayerNorm (`_layer_norm_rows`, `_hsum8`): normalization.py; its simplified (RMS) form with
  ORT's scalar loop for short rows (`_rms_rows`, `_seq_sum`, `_fma`): contrib_norm.py;
* MatMulNBits' int8-activation path (`quantize_rows_int8`, `_mnb_int8_blk32`): contrib_quant.py;
* the requantization of the quantized products (`requantize_output`): linalg.py (QLinearMatMul)
  and conv_integer.py (QLinearConv).

The f32 Sigmoid/Tanh replays (`mlas_logistic`, `mlas_tanh`) are pointwise primitives and stay in
pointwise.py beside the HIP helpers rendered from them; MLAS's fused rotary kernel is `_rope(...,
fused=True)` in contrib_attention.py.
"""
from __future__ import annotations

import numpy as np

from .elementwise import libm_f32
from .pointwise import fma_f32

f32 = np.float32
f64 = np.float64


# ---- MLAS's f32 softmax (bit-exact on x86-64 AVX512) --------------------------------------------
# ORT's f32 Softmax (and the softmax inside GroupQueryAttention) is MlasComputeSoftmax: per row the
# max, then MlasComputeSumExpF32KernelAvx512F -- exp(x - max) by fma range reduction, a degree-6
# polynomial and vscalef, summed in 16 lanes -- then each term times (1 / sum).
_EXP_LOWER = np.float32(-103.9720840454)
_EXP_BIAS = np.float32(12582912.0)  # 1.5 * 2^23: adding it rounds to an integer
_EXP_LOG2E = np.float32(1.44269504088896341)
_EXP_LN2_HI = np.float32(-6.93145752e-1)
_EXP_LN2_LO = np.float32(-1.42860677e-6)
_EXP_POLY = tuple(np.float32(float.fromhex(v)) for v in ("0x1.694000p-10", "0x1.125edcp-7", "0x1.555b5ap-5",
                                                          "0x1.555450p-3", "0x1.fffff6p-2", "0x1.000000p+0"))


def mlas_exp_shifted(x, negmax):
    """exp(x + negmax) elementwise, as MLAS's AVX512F sum-of-exp kernel computes each term."""
    f32 = np.float32
    v = np.maximum(_EXP_LOWER, (np.asarray(x, f32) + np.asarray(negmax, f32)).astype(f32))
    m = (fma_f32(_EXP_LOG2E, v, _EXP_BIAS) - _EXP_BIAS).astype(f32)
    v = fma_f32(m, _EXP_LN2_LO, fma_f32(m, _EXP_LN2_HI, v))
    p = fma_f32(_EXP_POLY[0], v, _EXP_POLY[1])
    for c in _EXP_POLY[2:] + _EXP_POLY[5:]:
        p = fma_f32(p, v, c)
    with np.errstate(all="ignore"):
        return np.ldexp(p, m.astype(np.int32)).astype(f32)


def mlas_sum16(e):
    """Sum over the last axis in the AVX512 kernel's order: 16 lane accumulators fed in order,
    folded 16 -> 8 (lane l + lane l + 8), then ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))."""
    f32 = np.float32
    n = e.shape[-1]
    pad = (-n) % 16
    if pad:
        e = np.concatenate([e, np.zeros(e.shape[:-1] + (pad,), f32)], axis=-1)
    e = e.reshape(e.shape[:-1] + (-1, 16))
    acc = np.zeros(e.shape[:-2] + (16,), f32)
    for j in range(e.shape[-2]):
        acc = (acc + e[..., j, :]).astype(f32)
    a = (acc[..., :8] + acc[..., 8:]).astype(f32)
    h = [(a[..., i] + a[..., i + 1]).astype(f32) for i in (0, 2, 4, 6)]
    return ((h[0] + h[1]).astype(f32) + (h[2] + h[3]).astype(f32)).astype(f32)


def mlas_softmax_windows(x, lo, hi):
    """MlasComputeSoftmax of x[r, lo[r]:hi[r]] for every row r of x [R, T]; zeros elsewhere
    (and in rows whose window is empty)."""
    f32 = np.float32
    r_count, t = x.shape
    out = np.zeros((r_count, t), f32)
    width = int((hi - lo).max()) if r_count else 0
    if width <= 0:
        return out
    idx = lo[:, None] + np.arange(width)[None, :]
    valid = idx < hi[:, None]
    rows = np.arange(r_count)[:, None]
    g = np.where(valid, x[rows, np.minimum(idx, t - 1)], -np.inf).astype(f32)
    m = g.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, f32(0)).astype(f32)
    e = np.where(valid, mlas_exp_shifted(g, -m), f32(0)).astype(f32)
    with np.errstate(all="ignore"):
        inv = (f32(1.0) / mlas_sum16(e)).astype(f32)
    p = (e * inv[:, None]).astype(f32)
    rr, cc = np.nonzero(valid)
    out[rr, idx[rr, cc]] = p[rr, cc]
    return out


def _mlas_softmax_f32(xs, axis, log=False):
    """MlasComputeSoftmax over `axis` of f32 xs: softmax = e * (1 / sum); log-softmax =
    (x - max) - logf(sum) (MLAS's LogSoftmax output kernel, libm's logf)."""
    f32 = np.float32
    xa = np.moveaxis(xs, axis, -1)
    negmax = (-np.max(xa, axis=-1, keepdims=True)).astype(f32)
    e = mlas_exp_shifted(xa, negmax)
    total = mlas_sum16(e)[..., None]
    with np.errstate(all="ignore"):
        if log:
            y = ((xa + negmax).astype(f32) - libm_f32("logf")(total)).astype(f32)
        else:
            y = (e * (f32(1.0) / total).astype(f32)).astype(f32)
    return np.moveaxis(y, -1, axis)


# ---- MLAS's f32 LayerNorm (bit-exact on x86-64 AVX2) ----------------------------------------

def _hsum8(v):
    """MLAS's horizontal sum of 8 f32 lanes: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))."""
    f32 = np.float32
    r = (v[:, :4] + v[:, 4:]).astype(f32)
    r = (r[:, :2] + r[:, 2:]).astype(f32)
    return (r[:, 0] + r[:, 1]).astype(f32)


def _layer_norm_rows(x, scale, bias, eps):
    """ORT 1.31's f32 LayerNormalization on rows x [R, n] (bit-exact on x86-64 with AVX2):
      * n < 8: the scalar ComputeJob -- Welford's running mean and M2 in f32, std =
        sqrt(M2 / n + eps), y = (x - mean) / std * scale (+ bias);
      * n >= 8: MLAS's AVX2 kernel, centered two-pass -- mean = (f32)(double sum in 4 lanes,
        (l0 + l2) + (l1 + l3), tail added in order / n); var = 8-lane fma sum of (x - mean)^2
        folded by _hsum8, then the tail (the first 4 tail squares rounded before adding when 4 or
        more remain, as GCC vectorizes that loop; the rest fused); inv = 1 / sqrt(var / n + eps);
        y = fma((x - mean) * inv, scale, bias) or ((x - mean) * inv) * scale.
    Returns (y, mean, inv_std_dev), f32."""
    f32, f64 = np.float32, np.float64
    rows, n = x.shape
    eps = f32(eps)
    if n < 8:
        mean = np.zeros(rows, f32)
        m2 = np.zeros(rows, f32)
        for k in range(n):
            val = x[:, k]
            d = (val - mean).astype(f32)
            mean = (mean + (d / f32(k + 1)).astype(f32)).astype(f32)
            m2 = (m2 + (d * (val - mean).astype(f32)).astype(f32)).astype(f32)
        std = np.sqrt((m2 / f32(n) + eps).astype(f32)).astype(f32)
        y = (((x - mean[:, None]).astype(f32) / std[:, None]).astype(f32) * scale).astype(f32)
        if bias is not None:
            y = (y + bias).astype(f32)
        return y, mean, (f32(1) / std).astype(f32)
    full4 = n // 4 * 4
    lanes = x[:, :full4].astype(f64).reshape(rows, -1, 4)
    acc = np.zeros((rows, 4), f64)
    for j in range(lanes.shape[1]):
        acc = acc + lanes[:, j]
    dsum = (acc[:, 0] + acc[:, 2]) + (acc[:, 1] + acc[:, 3])
    for i in range(full4, n):
        dsum = dsum + x[:, i].astype(f64)
    mean = (dsum / f64(n)).astype(f32)
    full = n // 8 * 8
    v = np.zeros((rows, 8), f32)
    for i in range(0, full, 8):
        d = (x[:, i:i + 8] - mean[:, None]).astype(f32)
        v = fma_f32(d, d, v)
    var = _hsum8(v)
    first = full + (4 if n - full >= 4 else 0)
    for i in range(full, n):
        d = (x[:, i] - mean).astype(f32)
        var = (var + (d * d).astype(f32)).astype(f32) if i < first else fma_f32(d, d, var)
    inv = (f32(1) / np.sqrt((var / f32(n) + eps).astype(f32)).astype(f32)).astype(f32)
    y = ((x - mean[:, None]).astype(f32) * inv[:, None]).astype(f32)
    y = fma_f32(y, scale, bias) if bias is not None else (y * scale).astype(f32)
    return y, mean, inv


# ---- the simplified (RMS) form: SimplifiedLayerNormalization, RMSNormalization ----------------

# Rows shorter than this run ORT's scalar loop; longer ones MLAS's AVX2 kernel (layernorm.cpp).
_MLAS_LAYERNORM_MIN = 16


def _fma(a, b, c):
    """f32 fused multiply-add: the f64 product of two f32 values is exact, one rounding after."""
    return (a.astype(f64) * b + c).astype(f32)


def _seq_sum(v: np.ndarray) -> np.ndarray:
    """Sequential f32 sum along the last axis (a scalar C loop; np.add.accumulate is sequential)."""
    if v.shape[-1] == 0:
        return np.zeros(v.shape[:-1], f32)
    return np.add.accumulate(v, axis=-1, dtype=f32)[..., -1]


def _rms_rows(x: np.ndarray, scale: np.ndarray, eps: float):
    """RMS-normalize the rows of f32 `x` [rows, n] as ORT's LayerNormImpl(simplified) does.
    Returns (y f32 [rows, n], inv_std_var f32 [rows])."""
    rows, n = x.shape
    eps = f32(eps)
    if n < _MLAS_LAYERNORM_MIN:
        ms = _seq_sum((x * x).astype(f32))
        rms = np.sqrt((ms / f32(n) + eps).astype(f32)).astype(f32)
        y = ((x / rms[:, None]).astype(f32) * scale).astype(f32)
        return y, (f32(1) / rms).astype(f32)
    full = n // 8 * 8
    acc = np.zeros((rows, 8), f32)
    for i in range(0, full, 8):
        c = x[:, i:i + 8]
        acc = _fma(c, c, acc)
    sq = _hsum8(acc)
    # The scalar tail as ORT's x86 build compiles it: with 4 or more left, the first 4 squares
    # are one SSE multiply (rounded, then added in order), the rest fused multiply-adds.
    first = 4 if n - full >= 4 else 0
    for i in range(full, full + first):
        sq = (sq + (x[:, i] * x[:, i]).astype(f32)).astype(f32)
    for i in range(full + first, n):
        sq = _fma(x[:, i], x[:, i], sq)
    denom = np.sqrt((sq / f32(n) + eps).astype(f32)).astype(f32)
    inv = (f32(1) / denom).astype(f32)
    y = ((x * inv[:, None]).astype(f32) * scale).astype(f32)
    return y, inv


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


# ---- GroupQueryAttention's f32 paths ---------------------------------------------------------

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


# ---- MatMulNBits with int8 activations (accuracy_level 4) ----------------------------------------

def quantize_rows_int8(a: np.ndarray, block_size: int):
    """MLAS's QuantizeARow_CompInt8 on f32 rows `a` [M, K]: (q int8-valued int32 [M, nb, bs],
    scale f32 [M, nb]); K is padded with zeros to whole blocks."""
    m, k = a.shape
    nb = (k + block_size - 1) // block_size
    padded = np.zeros((m, nb * block_size), f32)
    padded[:, :k] = a
    blocks = padded.reshape(m, nb, block_size)
    amax = np.max(np.abs(blocks), axis=-1)
    scale = (amax / f32(127)).astype(f32)
    nz = amax != 0
    inv = np.where(nz, f32(127) / np.where(nz, amax, f32(1)), f32(0)).astype(f32)
    q = np.rint((blocks * inv[:, :, None]).astype(f32)).astype(np.int32)
    return q, scale


# MLAS's AVX512-VNNI CompInt8 kernel for 4-bit B with block_size 32, lane by lane. The 4-bit
# weights stay unsigned (0..15); the zero point is applied separately through block sums.
# Per output (m, n):
#   * a group of 4 blocks (128 values of K) at a time: 16 f32 lanes, lane L = 4c + r holding the
#     int32 dot product of 8 values of one block -- block 2 * (r >= 2) + c // 2 of the group,
#     values 16 * (c % 2) + 4 * (r % 2) + {0..3, 8..11} -- then lane = fma(dot, sa * sb, lane);
#   * the 16 lanes fold to 8 (lane l + lane l + 8); each remaining block adds 8 lanes of 4-value
#     dot products the same way;
#   * the 8 lanes sum ((l0 + l1) + l2) + l3 + (((l4 + l5) + l6) + l7) for columns in groups of
#     4, ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)) for the last N % 4 columns; + bias;
#   * then C += sum over blocks of (sa * sum(q_a)) * (-sb * zp), an f32 fma chain in block order
#     (MLAS's sgemm kernel over the block sums).
# (sa * sb and the block sums are f32 products.) Bit-identical to ORT 1.31 on AVX512-VNNI x86-64.
_G_BLK = np.array([2 * (r >= 2) + c // 2 for c in range(4) for r in range(4)])
_G_J0 = np.array([4 * (c % 2) + (r % 2) for c in range(4) for r in range(4)])  # 4-value dot index
_MLAS_CHUNK = 1 << 23  # elements of the f64 dot-product block [nb, 8, M, N-chunk] held at a time


def _mnb_int8_blk32(a2: np.ndarray, q, s, z, bias) -> np.ndarray:
    """f32 [M, N]: MLAS's CompInt8 result for f32 rows a2 [M, K], 4-bit q [N, nb, 32] (uint
    values), scales s [N, nb], integer zero points z [N, nb] and optional f32 bias [N]."""
    m, k = a2.shape
    n, nb, bs = q.shape
    qa, sa = quantize_rows_int8(a2, bs)
    ablk = (sa * qa.sum(axis=-1).astype(f32)).astype(f32)                    # [M, nb]
    bblk = (-s * z.astype(f32)).astype(f32)                                   # [N, nb]
    # 4-value integer dot products, exact in f64: [nb, 8, M, 4] @ [nb, 8, 4, N] -> [nb, 8, M, N]
    qa4 = qa.reshape(m, nb, 8, 4).transpose(1, 2, 0, 3).astype(f64)
    out = np.empty((m, n), f32)
    step = max(1, _MLAS_CHUNK // max(1, 8 * nb * m))
    groups = nb // 4
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        qb4 = q[lo:hi].reshape(hi - lo, nb, 8, 4).transpose(1, 2, 3, 0).astype(f64)
        d = np.matmul(qa4, qb4)                                              # [nb, 8, M, Nc]
        comb = (sa.T[:, :, None] * s[lo:hi].T[:, None, :]).astype(f32)       # [nb, M, Nc]
        acc = np.zeros((16, m, hi - lo), f32)
        for g in range(groups):
            blk = 4 * g + _G_BLK
            dots = (d[blk, _G_J0] + d[blk, _G_J0 + 2]).astype(f32)
            acc = fma_f32(dots, comb[blk], acc)
        acc8 = (acc[:8] + acc[8:]).astype(f32)
        for b in range(4 * groups, nb):
            acc8 = fma_f32(d[b].astype(f32), comb[b][None], acc8)
        c = ((((acc8[0] + acc8[1]) + acc8[2]) + acc8[3]).astype(f32)
             + (((acc8[4] + acc8[5]) + acc8[6]) + acc8[7]).astype(f32)).astype(f32)
        tail = max(lo, n - n % 4) - lo  # the last N % 4 columns sum as hsum_float_8
        if tail < hi - lo:
            t = acc8[:, :, tail:]
            c[:, tail:] = (((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]))).astype(f32)
        if bias is not None:
            c = (c + bias[lo:hi][None, :]).astype(f32)
        zsum = np.zeros((m, hi - lo), f32)
        for b in range(nb):
            zsum = fma_f32(ablk[:, b, None], bblk[None, lo:hi, b], zsum)
        out[:, lo:hi] = (c + zsum).astype(f32)
    return out


# ---- MlasRequantizeOutput: a quantized product's int32 sums to int8/uint8 ----------------------
# ORT's QLinearMatMul and QLinearConv (its non-symmetric path; the symmetric ones fuse the same
# steps) requantize with SSE2: cvtepi32_ps, mulps by the scale, maxps/minps against the output's
# range less the zero point (a NaN product gives the low end: MAXPS returns its second operand when
# either is a NaN), cvtps2dq (round half to even), plus the zero point.

def requantize_output(acc: np.ndarray, scale, zero_point: int, dtype) -> np.ndarray:
    """int32 sums `acc` times the f32 `scale` (broadcast against acc), as MLAS requantizes them to
    `dtype` (int8 or uint8) with `zero_point`."""
    info = np.iinfo(dtype)
    lo, hi = f32(info.min - zero_point), f32(info.max - zero_point)
    v = np.asarray(acc, np.int32).astype(f32) * np.asarray(scale, f32)
    v = np.where(np.isnan(v), lo, np.minimum(np.maximum(v, lo), hi))
    return (np.rint(v).astype(np.int32) + np.int32(zero_point)).astype(dtype)
