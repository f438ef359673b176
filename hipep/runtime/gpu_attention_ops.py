"""GPU bindings: com.microsoft MultiHeadAttention and ai.onnx Attention-23/24/25 (kernels/attention_mha.hip).

Registered into the kernel table (hipep.runtime.gpu_kernels) when it is imported. The semantics are
hipep/ops/attention.py's references (ORT's CPU EP); the kernel file says why GroupQueryAttention's
kernels are not reused.

A launch is at most three kernels, all sized by shapes alone:

  present   (where present_key or present_value is kept) past's rows, then the new keys and values
            (MultiHeadAttention: plus its bias) into present, [B, kv_heads, past + new, head_size]
  attention one block per (row tile, KV head, batch), its rows the (token, query head) pairs of the
            KV head's group; Q/K/V read in place through strides: 3-D [B, S, heads * H] or 4-D
            [B, heads, S, H]; keys below `past` from past_key/past_value, the rest from key/value,
            so attention never waits for present
  scores    (Attention's qk_matmul_output) one block per (token, query head, batch): the row's
            scores at the output's mode

What runs: separate Q/K/V, f32 or f16 (f32 scores, softmax and sums, the output rounded once), head
sizes up to 256 (the V head size may differ), grouped heads (q_num_heads a multiple of
kv_num_heads), causal masking (is_causal / unidirectional, bottom-right aligned after a past),
Attention-25's left/right window (aligned as the causal frontier), an attn_mask (bool, or additive
in Q's type; Attention-25's may broadcast over queries and hold fewer keys) or attention_bias
broadcast over batch and heads, MultiHeadAttention's key_padding_mask and bias, scale and softcap,
Attention-24/25's nonpad_kv_seqlen (an external cache: each batch entry's count of valid keys,
read by the kernel from device memory, which also places the entry's queries for the causal
frontier and the window; a count outside [0, keys] goes to the stream's fault record).
qk_matmul_output (modes 0-3) recomputes the products and rounds each stage to the element type as
the CPU EP does.
softmax_precision is accepted whatever its value: ONNX Runtime's CPU kernel, which both devices
follow, computes the softmax in the same arithmetic for every value of it (f32, and f16 inputs
alike). Refused by the checks: head sizes not known when the node is claimed. ai.onnx Attention in f16 rounds its scores and probabilities to f16 on the CPU EP; the
attention kernel keeps them f32 (the results agree to f16 rounding).

`mha_layout` computes the kernel arguments from shapes alone, so the unit tests can check them.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from ..errors import HipepError
from ..ops.attention import excluded_score, mask_reason  # the reference's own rules
from ..ops.registry import OUTPUT_COUNT, SINCE_VERSION
from .gpu_faults import NO_FAULT_SITE, fault_param
from .gpu_kernels import KernelOp, NoKernel, _binding, _cdiv, _dt, flat_config, ptr

MHA = "MultiHeadAttention"
ATTN = "Attention"
MAX_HEAD = 256
# head-size bound of a variant -> threads per block (kernels/attention_mha.hip's HIPEP_MHA_VARIANT);
# a block takes threads / 4 rows (token, query head)
VARIANTS = {64: 128, 128: 128, 256: 64}
FLOAT_TYPES = ("float32", "float16")
SCORE_THREADS = 128  # a block per row of qk_matmul_output, its keys strided over the threads

_INTS = ("batch", "seq", "heads", "kv_heads", "group", "head_size", "v_head_size", "past", "total", "causal",
         "mask_kind", "dead_zero", "left_window", "right_window", "mask_keys")
_LONGS = ("q_sb", "q_sh", "q_ss", "k_sb", "k_sh", "k_ss", "v_sb", "v_sh", "v_ss", "o_sb", "o_sh", "o_ss",
          "m_sb", "m_sh", "m_ss")
MASK_NONE, MASK_ADD, MASK_BOOL = 0, 1, 2


class MhaArgs(ctypes.Structure):
    """kernels/attention_mha.hip's hipep_mha_args."""
    _fields_ = ([(n, ctypes.c_int) for n in _INTS] + [(n, ctypes.c_longlong) for n in _LONGS]
                + [(n, ctypes.c_float) for n in ("scale", "softcap", "pad_value", "lowest")])


@dataclass
class MhaLayout:
    args: MhaArgs
    bucket: int  # the kernel variant's head-size bound
    grid: tuple
    block: tuple


def head_bucket(h: int, hv: int) -> int | None:
    """The smallest variant holding head sizes h and hv (None: too large for every variant)."""
    return next((v for v in VARIANTS if max(h, hv) <= v), None)


def _strides(layout4: bool, heads: int, seq: int, dims: int) -> tuple[int, int, int]:
    """(batch, head, sequence) element strides of [B, S, heads * dims] (3-D) or [B, heads, S, dims] (4-D)."""
    if layout4:
        return heads * seq * dims, seq * dims, dims
    return seq * heads * dims, dims, heads * dims


def mha_layout(*, batch: int, seq: int, heads: int, kv_heads: int, head_size: int, v_head_size: int, new_keys: int,
               past: int, layout4: bool, mask_shape=None, mask_kind: int = MASK_NONE, causal: bool = False,
               scale: float, softcap: float = 0.0, pad_value: float = 0.0, dead_zero: bool = False,
               dtype=np.float32, window: tuple[int, int] = (-1, -1), sentinel: float | None = None,
               external_cache: bool = False) -> MhaLayout:
    """The attention kernel's arguments and launch shape. `mask_shape`: attn_mask / attention_bias
    as [B or 1, heads or 1, seq or 1, keys] after leading 1s are added (keys up to total: the rest
    are masked). `window`: Attention-25's (left_window_size, right_window_size). `sentinel`: the
    score of an excluded key, below which a row is dead (default the lowest finite `dtype`).
    `external_cache`: the kernel places the queries by nonpad_kv_seqlen (up to the last key)
    rather than after the past."""
    bucket = head_bucket(head_size, v_head_size)
    if bucket is None:
        raise NoKernel(f"head sizes {head_size}/{v_head_size}: the GPU kernel takes up to {MAX_HEAD}")
    a = MhaArgs()
    a.batch, a.seq, a.heads, a.kv_heads, a.group = batch, seq, heads, kv_heads, heads // kv_heads
    a.head_size, a.v_head_size, a.past, a.total = head_size, v_head_size, past, past + new_keys
    a.causal, a.mask_kind, a.dead_zero = int(causal), mask_kind, int(dead_zero)
    left, right = (int(w) for w in window)
    # Bounds that exclude no key are unbounded, which also keeps position + bound within int.
    last_position = a.total - 1 if external_cache else past + seq - 1
    a.left_window = left if 0 <= left <= last_position else -1
    a.right_window = right if 0 <= right < a.total else -1
    a.mask_keys = a.total
    a.q_sb, a.q_sh, a.q_ss = _strides(layout4, heads, seq, head_size)
    a.k_sb, a.k_sh, a.k_ss = _strides(layout4, kv_heads, new_keys, head_size)
    a.v_sb, a.v_sh, a.v_ss = _strides(layout4, kv_heads, new_keys, v_head_size)
    a.o_sb, a.o_sh, a.o_ss = _strides(layout4, heads, seq, v_head_size)
    if mask_shape is not None:
        mb, mh, ms, mt = (int(d) for d in mask_shape)
        a.m_ss = 0 if ms == 1 else mt
        a.m_sh = 0 if mh == 1 else ms * mt
        a.m_sb = 0 if mb == 1 else mh * ms * mt
        a.mask_keys = min(mt, a.total)
    a.scale, a.softcap, a.pad_value = float(np.float32(scale)), float(softcap), float(pad_value)
    a.lowest = float(np.finfo(np.dtype(dtype)).min if sentinel is None else sentinel)
    threads = VARIANTS[bucket]
    # a block's rows are (token, query head) pairs of one KV head's group
    return MhaLayout(a, bucket, (_cdiv(seq * a.group, threads // 4), kv_heads, batch), (threads, 1, 1))


def _ops(lay: MhaLayout, dt: str, q, k, v, pk, pv, bias, mask, key_pad, out, pres_k, pres_v, target,
         kv_len=None) -> list:
    a = lay.args
    ops = []
    keep_k = pres_k is not None and pres_k.size > 0
    keep_v = pres_v is not None and pres_v.size > 0
    if keep_k or keep_v:
        grid, block = flat_config(a.batch * a.kv_heads * a.total * max(a.head_size, a.v_head_size), target)
        ops.append(KernelOp(f"hipep_mha_present_{dt}", (grid[0], 2, 1), block,
                            [ptr(pk), ptr(pv), ptr(k), ptr(v), ptr(bias), ptr(pres_k if keep_k else None),
                             ptr(pres_v if keep_v else None), a], module="attention_mha"))
    if out is not None and a.batch * a.seq * a.heads > 0:
        add = mask if a.mask_kind == MASK_ADD else None
        flags = mask if a.mask_kind == MASK_BOOL else None
        fault = NO_FAULT_SITE if kv_len is None else fault_param(target, "input 6 (nonpad_kv_seqlen)")
        ops.append(KernelOp(f"hipep_mha_{dt}_h{lay.bucket}", lay.grid, lay.block,
                            [ptr(q), ptr(k), ptr(v), ptr(pk), ptr(pv), ptr(bias), ptr(add), ptr(flags),
                             ptr(key_pad), ptr(kv_len), ptr(out), a, fault], module="attention_mha"))
    return ops


def _known(*dims) -> bool:
    return all(d is not None for d in dims)


def _shape(shapes, i):
    return shapes[i] if i < len(shapes) else None


def _present(dtypes, i) -> bool:
    return i < len(dtypes) and bool(dtypes[i])


def _head_reason(h, hv) -> str | None:
    if h is None or hv is None:
        return "head sizes not known when the node is claimed (the kernel variant depends on them)"
    if head_bucket(int(h), int(hv)) is None:
        return f"head sizes {h}/{hv}: the GPU kernel takes up to {MAX_HEAD}"
    return None


# ---- MultiHeadAttention (com.microsoft) -----------------------------------------------------------

def _mha_check(attrs, dtypes, shapes, values):
    if not dtypes or dtypes[0] not in FLOAT_TYPES:
        return f"element type {dtypes[0] if dtypes else '?'}"
    if not (_present(dtypes, 1) and _present(dtypes, 2)):
        return "packed QKV / packed KV (separate 3-D key and value only)"
    if _present(dtypes, 8) or _present(dtypes, 9):
        return "past_sequence_length / cache_indirection (decoder-masked attention)"
    if int(attrs.get(OUTPUT_COUNT, 3)) > 3:
        return "the qk output"
    n = int(attrs.get("num_heads", 0) or 0)
    q, v = _shape(shapes, 0), _shape(shapes, 2)
    if n <= 0 or q is None or v is None or len(q) != 3 or len(v) != 3 or not _known(q[2], v[2]):
        return _head_reason(None, None)
    return _head_reason(q[2] // n, v[2] // n)


@_binding(f"com.microsoft::{MHA}", check=_mha_check, modules=("attention_mha",))
def _mha_bind(ins, outs, attrs, target):
    ins = list(ins) + [None] * (10 - len(ins))
    q, k, v, bias, key_pad, attn_bias, pk, pv = ins[:8]
    outs = list(outs) + [None] * (3 - len(outs))
    out, pres_k, pres_v = outs[:3]
    dt = _dt(q.dtype, MHA)
    if dt not in ("f32", "f16"):
        raise NoKernel(f"{MHA} on {q.dtype.name}")
    if ins[8] is not None or ins[9] is not None:
        raise NoKernel(f"{MHA}: past_sequence_length / cache_indirection")
    n = int(attrs["num_heads"])
    if q.ndim != 3 or k is None or v is None or k.ndim != 3 or v.ndim != 3:
        raise HipepError(f"{MHA}: query, key and value must be 3-D [batch, sequence, hidden]")
    b, s, d = (int(x) for x in q.shape)
    if d % n or tuple(k.shape[::2]) != (b, d) or v.shape[0] != b or v.shape[1] != k.shape[1] or v.shape[2] % n:
        raise HipepError(f"{MHA}: query {list(q.shape)}, key {list(k.shape)} and value {list(v.shape)} do not fit "
                         f"num_heads={n}")
    h, l, hv = d // n, int(k.shape[1]), int(v.shape[2]) // n
    if bias is not None and tuple(bias.shape) != (2 * n * h + n * hv,):
        raise HipepError(f"{MHA}: bias must be [{2 * n * h + n * hv}], got {list(bias.shape)}")
    p = 0
    if pk is not None or pv is not None:
        if pk is None or pv is None or pk.ndim != 4 or tuple(pk.shape[:2]) != (b, n) or pk.shape[3] != h \
                or tuple(pv.shape) != (b, n, pk.shape[2], hv):
            raise HipepError(f"{MHA}: past_key must be [{b}, {n}, P, {h}] and past_value [{b}, {n}, P, {hv}]")
        p = int(pk.shape[2])
    t = p + l
    if key_pad is not None and (tuple(key_pad.shape) != (b, t) or key_pad.dtype != np.int32):
        raise HipepError(f"{MHA}: key_padding_mask must be int32 [batch, total_sequence] = {[b, t]}, "
                         f"got {key_pad.dtype.name} {list(key_pad.shape)}")
    mask_shape = None
    if attn_bias is not None:
        ab = tuple(int(x) for x in attn_bias.shape)
        if len(ab) != 4 or ab[0] not in (1, b) or ab[1] not in (1, n) or ab[2:] != (s, t):
            raise HipepError(f"{MHA}: attention_bias must be [batch or 1, num_heads or 1, {s}, {t}], got {list(ab)}")
        if attn_bias.dtype != q.dtype:
            raise HipepError(f"{MHA}: attention_bias must be {q.dtype.name}, got {attn_bias.dtype.name}")
        mask_shape = ab
    scale = float(attrs.get("scale", 0.0)) or 1.0 / float(np.sqrt(h))
    lay = mha_layout(batch=b, seq=s, heads=n, kv_heads=n, head_size=h, v_head_size=hv, new_keys=l, past=p,
                     layout4=False, mask_shape=mask_shape, mask_kind=MASK_NONE if mask_shape is None else MASK_ADD,
                     causal=bool(int(attrs.get("unidirectional", 0))), scale=scale,
                     pad_value=float(attrs.get("mask_filter_value", -10000.0)), dtype=q.dtype)
    return _ops(lay, dt, q, k, v, pk, pv, bias, attn_bias, key_pad, out, pres_k, pres_v, target)


# ---- Attention (ai.onnx 23, 24, 25) ---------------------------------------------------------------

def _attention_heads(attrs, shapes):
    """(head size, V head size) from the static shapes, None where unknown."""
    q, k, v = (_shape(shapes, i) for i in range(3))
    if q is None or v is None:
        return None, None
    nq, nkv = int(attrs.get("q_num_heads", 0) or 0), int(attrs.get("kv_num_heads", 0) or 0)
    if len(q) == 3 and len(v) == 3:
        if nq <= 0 or nkv <= 0 or not _known(q[2], v[2]):
            return None, None
        return q[2] // nq, v[2] // nkv
    if len(q) == 4 and len(v) == 4:
        return q[3], v[3]
    return None, None


def _attention_check(attrs, dtypes, shapes, values):
    if not dtypes or dtypes[0] not in FLOAT_TYPES:
        return f"element type {dtypes[0] if dtypes else '?'}"
    if _present(dtypes, 3) and dtypes[3] not in ("bool", dtypes[0]):
        return f"attn_mask of element type {dtypes[3]}"
    return _head_reason(*_attention_heads(attrs, shapes))


@_binding(f"::{ATTN}", check=_attention_check, modules=("attention_mha",))
def _attention_bind(ins, outs, attrs, target):
    ins = list(ins) + [None] * (7 - len(ins))
    q, k, v, mask, pk, pv, nonpad = ins[:7]
    outs = list(outs) + [None] * (3 - len(outs))
    out, pres_k, pres_v = outs[:3]
    dt = _dt(q.dtype, ATTN)
    if dt not in ("f32", "f16"):
        raise NoKernel(f"{ATTN} on {q.dtype.name}")
    scores = outs[3] if len(outs) > 3 else None
    if not q.ndim == k.ndim == v.ndim or q.ndim not in (3, 4):
        raise HipepError(f"{ATTN}: Q, K and V must all be 3-D or all 4-D, got {list(q.shape)}, {list(k.shape)}, "
                         f"{list(v.shape)}")
    nq, nkv = int(attrs.get("q_num_heads", 0) or 0), int(attrs.get("kv_num_heads", 0) or 0)
    if q.ndim == 3:
        if nq <= 0 or nkv <= 0 or q.shape[2] % nq or k.shape[2] % nkv or v.shape[2] % nkv:
            raise HipepError(f"{ATTN}: hidden sizes {q.shape[2]}, {k.shape[2]}, {v.shape[2]} do not fit "
                             f"q_num_heads={nq}, kv_num_heads={nkv}")
        b, s, h = int(q.shape[0]), int(q.shape[1]), int(q.shape[2]) // nq
        kb, l, hk = int(k.shape[0]), int(k.shape[1]), int(k.shape[2]) // nkv
        vb, lv, hv = int(v.shape[0]), int(v.shape[1]), int(v.shape[2]) // nkv
        vheads = nkv
    else:
        if (nq and nq != q.shape[1]) or (nkv and (nkv != k.shape[1] or nkv != v.shape[1])):
            raise HipepError(f"{ATTN}: q_num_heads/kv_num_heads ({nq}/{nkv}) differ from Q's/K's head counts "
                             f"({q.shape[1]}/{k.shape[1]})")
        b, nq, s, h = (int(x) for x in q.shape)
        kb, nkv, l, hk = (int(x) for x in k.shape)
        vb, vheads, lv, hv = (int(x) for x in v.shape)
    if kb != b or vb != b or vheads != nkv or lv != l or hk != h or nkv <= 0 or nq % nkv:
        raise HipepError(f"{ATTN}: inconsistent Q/K/V shapes {list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
    p = 0
    if pk is not None or pv is not None:
        if pk is None or pv is None or pk.ndim != 4 or tuple(pk.shape) != (b, nkv, pk.shape[2], h) \
                or tuple(pv.shape) != (b, nkv, pk.shape[2], hv):
            raise HipepError(f"{ATTN}: past_key must be [{b}, {nkv}, P, {h}] and past_value [{b}, {nkv}, P, {hv}]")
        p = int(pk.shape[2])
    if nonpad is not None:
        if p or tuple(nonpad.shape) != (b,) or nonpad.dtype != np.int64:
            raise HipepError(f"{ATTN}: nonpad_kv_seqlen must be int64 [batch] = [{b}] without past_key, got "
                             f"{nonpad.dtype.name} {list(nonpad.shape)}{' with past_key' if p else ''}")
    t = p + l
    since = int(attrs.get(SINCE_VERSION, 23))
    mask_shape, kind = None, MASK_NONE
    if mask is not None:
        ms = tuple(int(x) for x in mask.shape)
        why = mask_reason(ms, (b, nq, s, t), since)
        if why:
            raise HipepError(f"{ATTN}: {why}")
        if mask.dtype == np.bool_:
            kind = MASK_BOOL
        elif mask.dtype == q.dtype:
            kind = MASK_ADD
        else:
            raise HipepError(f"{ATTN}: attn_mask must be bool or {q.dtype.name}, got {mask.dtype.name}")
        mask_shape = (1,) * (4 - len(ms)) + ms
    scale = attrs.get("scale")
    scale = 1.0 / float(np.sqrt(h)) if scale is None else float(scale)
    lay = mha_layout(batch=b, seq=s, heads=nq, kv_heads=nkv, head_size=h, v_head_size=hv, new_keys=l, past=p,
                     layout4=q.ndim == 4, mask_shape=mask_shape, mask_kind=kind,
                     causal=bool(int(attrs.get("is_causal", 0))), scale=scale,
                     softcap=float(attrs.get("softcap", 0.0)), dead_zero=True, dtype=q.dtype,
                     window=(int(attrs.get("left_window_size", -1)), int(attrs.get("right_window_size", -1))),
                     sentinel=excluded_score(since, q.dtype), external_cache=nonpad is not None)
    ops = _ops(lay, dt, q, k, v, pk, pv, None, mask, None, out, pres_k, pres_v, target, kv_len=nonpad)
    if scores is not None and scores.size > 0:
        mode = int(attrs.get("qk_matmul_output_mode", 0))
        if mode not in (0, 1, 2, 3):
            raise HipepError(f"{ATTN}: qk_matmul_output_mode={mode} is not one of 0, 1, 2, 3")
        if tuple(scores.shape) != (b, nq, s, t):
            raise HipepError(f"{ATTN}: qk_matmul_output must be [{b}, {nq}, {s}, {t}], got {list(scores.shape)}")
        ops.append(KernelOp(f"hipep_attention_scores_{dt}", (s, nq, b), (SCORE_THREADS, 1, 1),
                            [ptr(q), ptr(k), ptr(pk), ptr(mask if kind == MASK_ADD else None),
                             ptr(mask if kind == MASK_BOOL else None), ptr(nonpad), ptr(scores), lay.args,
                             ctypes.c_int(mode)], module="attention_mha"))
    return ops
