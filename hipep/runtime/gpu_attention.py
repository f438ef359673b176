"""GPU bindings: GroupQueryAttention (decode split over the KV length, prefill tiled and causal) and RotaryEmbedding.

Registered into the kernel table (hipep.runtime.gpu_kernels) when it is imported.

GroupQueryAttention (kernels/attention_*.hip) runs as a short sequence of launches whose grids depend
on shapes only -- the batch, the new tokens, the head counts and the KV buffers' capacities -- never
on seqlens_k or total_sequence_length, which the kernels read from device memory (a prompt's
launches first copy total_sequence_length's 4 bytes into workspace, wherever the plan keeps it; one
token's launches do not need it). So a decode step binds to the same launches every step, replays
as one CUDA graph and reads nothing back:

  copy_past     when present is not past's buffer: past's rows into present (zeros after the new
                rows); with the sliding-window cache: past's resident rows into the window cache
  prepare       rotary on Q (into workspace) and on the new K; K/V written at each row's position;
                the decode kernel's arrival counters (workspace) zeroed; a seqlens_k that does not fit
                the cache and a rotary position past cos_cache reported in the stream's fault record
                (gpu_faults), so such a run raises as the CPU device does
  decode        up to DEC_MAX_SEQ new tokens: the KV range split over `splits` blocks per KV head
                (flash-decoding); the splits' partials (max, sum, unnormalised output, in workspace)
                merged by the last split block of each KV head to finish (an arrival counter); a
                span of up to DEC_DIRECT_PASSES key tiles (known only in the kernel: the lengths are
                device values) is the first split block's alone, which writes the output
  or prefill    several query tokens: query tiles against KV tiles, online softmax; fp16 and bf16
                with head sizes a multiple of 16 up to 128 on tensor cores where the device has
                mma.sync (attention_prefill_tc.hip), else in f32 on the CUDA cores
  window_store  sliding-window cache: the kept rows back into present

With q_norm_weight / k_norm_weight (Qwen3), two RMS norm launches (kernels/rms_norm.hip, as
SimplifiedLayerNormalization runs) first write the per-head normalized Q and K into workspace, which
the launches above then read in place of the inputs.

`gqa_layout` computes every launch's shape from the argument shapes alone (no pointers), so the
unit tests can check it and emulate the kernels' index arithmetic in numpy (`gqa_rows` mirrors
`hipep_gqa_geometry`, `gqa_length_fault` its check of seqlens_k).

RotaryEmbedding (kernels/rotary.hip) is one launch; a position past the cos/sin cache is clamped
and reported the same way.
"""
from __future__ import annotations

import ctypes
import dataclasses
import os
from dataclasses import dataclass

import numpy as np

from ..errors import HipepError
from ..ops.registry import OUTPUT_COUNT
from .gpu_faults import FAULT_SEQLEN, FAULT_SEQLEN_SHORT, NO_FAULT_SITE, fault_param
from .gpu_binding_core import workspace_after, workspace_regions
from .gpu_kernels import CopyOp, KernelOp, NoKernel, RmsArgs, _VEC, _binding, _cdiv, _dt, _rms_launch, flat_config, ptr

GQA = "GroupQueryAttention"
DEC_THREADS = 128  # kernels/attention_decode.h HIPEP_DEC_THREADS
DEC_THREADS_WIDE = 256  # HIPEP_DEC_THREADS_WIDE: blocks of up to 2 query rows
DEC_HEADS = 8  # query rows (token, head) of one KV head per decode block: the largest variant (_g8)
DEC_VARIANTS = (1, 2, 4, 8)  # hipep_gqa_decode_<dt>_g<G>: blocks of up to G query rows
DEC_MAX_SEQ = 8  # up to this many new tokens take the split-KV kernel (decode, speculative steps, small chunks)
MAX_HEAD = 256  # HIPEP_GQA_MAX_HEAD
MAX_SPLITS = 64  # HIPEP_GQA_MAX_SPLITS
DEC_DIRECT_PASSES = 4  # HIPEP_DEC_DIRECT_PASSES: keys of up to this many key tiles take one block, no merge
ALIGN = 256
# Whether the fused one-token decode is launched to overlap the kernel ahead (KernelOp.overlaps_previous:
# its first pass of past cache rows requested while that kernel finishes); off, the same kernel is
# launched the ordinary way (its early requests then simply come first). The benchmarks compare the two.
OVERLAP_FUSED_DECODE = True
# prefill variants: head-size bucket -> (threads, columns per thread); BM = threads / 4 query rows,
# BN = 8 * columns keys per tile (shared memory stays below 48 KiB in f32)
PREFILL = {64: (128, 4), 128: (128, 4), 256: (64, 2)}
# The tensor-core prefill (kernels/attention_prefill_tc.hip): fp16 and bf16, head sizes a multiple of 16
# up to 128 (its buckets), on a device with mma.sync (Target.tensor_cores); query rows a block (4 warps
# of 16). HIPEP_GQA_PREFILL_TC=0 keeps every prefill on attention_prefill.hip (the benchmarks compare).
PREFILL_TC_BUCKETS = (64, 128)
PREFILL_TC_ROWS, PREFILL_TC_THREADS = 64, 128
PREFILL_TC_ENV = "HIPEP_GQA_PREFILL_TC"

_INTS = ("batch", "seq", "heads", "kv_heads", "head_size", "group", "rotary_half", "do_rotary", "interleaved",
         "has_pos_ids", "max_pos", "has_past", "past_rows", "cache_rows", "present_rows", "windowed", "window",
         "window_from_raw", "splits", "row_groups", "rows_per_block", "key_tile", "bias_len", "has_sink")
_LONGS = ("bias_sb", "bias_sh", "bias_ss", "qin_sb", "qin_ss", "kin_sb", "kin_ss", "q_sb", "q_ss", "q_sh")


class GqaArgs(ctypes.Structure):
    """kernels/attention.h's hipep_gqa_args."""
    _fields_ = ([(n, ctypes.c_int) for n in _INTS] + [(n, ctypes.c_longlong) for n in _LONGS]
                + [("scale", ctypes.c_float), ("softcap", ctypes.c_float)])


def _round(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


# ---- geometry (pure: shapes and attributes in, launch shapes and workspace offsets out) -----------

@dataclass
class GqaLayout:
    args: GqaArgs
    decode: bool
    packed: bool
    cache_in_workspace: bool  # the cache attention reads is the workspace's (window cache, or no present)
    workspace: dict  # region -> (offset, bytes)
    workspace_bytes: int
    prefill_bucket: int


def prefill_tc_bucket(a: GqaArgs, dt: str, target) -> int | None:
    """The tensor-core prefill's head-size bucket for this launch, or None where attention_prefill.hip
    runs it (f32, a head size not a multiple of 16 or above 128, no mma.sync, HIPEP_GQA_PREFILL_TC=0)."""
    if dt not in ("f16", "bf16") or not target.tensor_cores or target.warp_size != 32:
        return None
    if os.environ.get(PREFILL_TC_ENV, "1").strip() == "0" or a.head_size % 16:
        return None
    return next((hb for hb in PREFILL_TC_BUCKETS if a.head_size <= hb), None)


def gqa_head_size(attrs, q_shape, packed: bool) -> int:
    n, nkv = int(attrs["num_heads"]), int(attrs["kv_num_heads"])
    width = n + 2 * nkv if packed else n
    if len(q_shape) != 3 or int(q_shape[2]) % width:
        raise HipepError(f"{GQA}: query {list(q_shape)} is not [batch, sequence, {width} * head_size]")
    return int(q_shape[2]) // width


def _head_size_reason(h: int) -> str | None:
    if h % 8 or not 8 <= h <= MAX_HEAD:
        return f"head size {h}: the GPU kernels need a multiple of 8 up to {MAX_HEAD}"
    return None


def dec_variant(rows_per_block: int) -> int:
    """The decode kernel variant G (rows per block it is compiled for) that holds `rows_per_block`."""
    return next(g for g in DEC_VARIANTS if g >= rows_per_block)


# Decode's query rows of a KV head share a block while batch x KV heads x row groups reaches this
# fraction of the multiprocessors (gqa_layout).
DEC_SHARE_BELOW = 1.0


def dec_lanes(head_size: int) -> int:
    """hipep_dec_lanes: lanes that read one key (8 elements each), the power of two covering H / 8."""
    p = 1
    while 8 * p < head_size:
        p *= 2
    return p


def dec_keys_per_lane(itemsize: int, variant: int) -> int:
    """hipep_dec_keys: keys whose K and V one lane holds in flight per pass."""
    return 8 if itemsize == 2 and variant <= 4 else 4


def dec_threads(variant: int) -> int:
    """hipep_dec_threads: threads of a decode block of `variant` query rows."""
    return DEC_THREADS_WIDE if variant <= 2 else DEC_THREADS


def dec_key_tile(itemsize: int, variant: int, head_size: int) -> int:
    """Keys one pass of a decode block reads (its warps' share together), independent of the warp
    size: the block's threads / lanes-per-key keys per load instruction, times the keys per lane."""
    return dec_threads(variant) // dec_lanes(head_size) * dec_keys_per_lane(itemsize, variant)


def gqa_layout(attrs: dict, dtype, q_shape, k_shape, past_shape, present_rows, cos_shape, pos_ids: bool,
               bias_shape, sink: bool, sm_count: int = 132, dropped_present: bool = False) -> GqaLayout:
    """Every launch's shape for one GroupQueryAttention launch. `present_rows`: present's sequence
    extent (None where the plan keeps no present output); `dropped_present`: the plan keeps only
    one of present_key / present_value (the window cache still writes both)."""
    dtype = np.dtype(dtype)
    n, nkv = int(attrs["num_heads"]), int(attrs["kv_num_heads"])
    packed = k_shape is None
    h = gqa_head_size(attrs, q_shape, packed)
    why = _head_size_reason(h)
    if why:
        raise NoKernel(f"{GQA}: {why}")
    b, s = int(q_shape[0]), int(q_shape[1])
    if not packed and tuple(k_shape) != (b, s, nkv * h):
        raise HipepError(f"{GQA}: key must be [batch, sequence, kv_num_heads * head_size] = {[b, s, nkv * h]}, "
                         f"got {list(k_shape)}")
    cap = 0
    if past_shape is not None:
        if len(past_shape) != 4 or tuple(past_shape[:2]) != (b, nkv) or int(past_shape[3]) != h:
            raise HipepError(f"{GQA}: past_key must be [batch, kv_num_heads, past, head_size] = "
                             f"{[b, nkv, 'past', h]}, got {list(past_shape)}")
        cap = int(past_shape[2])
    windowed = int(attrs.get("sliding_window_cache", 0)) == 1
    window = int(attrs.get("local_window_size", -1))
    if windowed and cap < max(window, 1):
        raise HipepError(f"{GQA}: sliding_window_cache: the KV cache capacity (past_key's sequence extent, {cap}) "
                         f"must be at least local_window_size ({window})")
    a = GqaArgs()
    a.batch, a.seq, a.heads, a.kv_heads, a.head_size, a.group = b, s, n, nkv, h, n // nkv
    a.do_rotary = int(attrs.get("do_rotary", 0))
    a.interleaved = int(attrs.get("rotary_interleaved", 0))
    if a.do_rotary:
        if cos_shape is None or len(cos_shape) != 2:
            raise HipepError(f"{GQA}: do_rotary=1 needs 2-D cos_cache/sin_cache, got {cos_shape}")
        a.rotary_half, a.max_pos = int(cos_shape[1]), int(cos_shape[0])
        if not 0 < 2 * a.rotary_half <= h:
            raise HipepError(f"{GQA}: cos_cache width {a.rotary_half} does not fit head size {h}")
    a.has_pos_ids = int(pos_ids and bool(a.do_rotary))
    a.has_past, a.past_rows = int(past_shape is not None), cap
    a.windowed, a.window = int(windowed), window
    softcap = float(attrs.get("softcap", 0.0))
    smooth = int(attrs.get("smooth_softmax", 0)) == 1
    a.window_from_raw = int(dtype == np.float32 and softcap <= 0 and not sink and not smooth
                            and int(attrs.get(OUTPUT_COUNT, 3)) >= 3)
    a.has_sink = int(sink or smooth)
    a.softcap = softcap
    scale = float(attrs.get("scale", 0.0))
    a.scale = float(np.float32(scale) or np.float32(1) / np.sqrt(np.float32(h)))
    if bias_shape is not None:
        bs = [int(d) for d in bias_shape]
        if len(bs) != 4 or bs[0] not in (1, b) or bs[1] not in (1, n) or bs[2] != s:
            raise HipepError(f"{GQA}: attention_bias must be [batch or 1, num_heads or 1, {s}, total], got {bs}")
        a.bias_len, a.bias_ss = bs[3], bs[3]
        a.bias_sh = 0 if bs[1] == 1 else s * bs[3]
        a.bias_sb = 0 if bs[0] == 1 else bs[1] * s * bs[3]
    # Where the query, key and value of the new tokens are (element strides).
    row = (n + 2 * nkv) * h if packed else n * h
    a.qin_ss, a.qin_sb = row, s * row
    krow = row if packed else nkv * h
    a.kin_ss, a.kin_sb = krow, s * krow
    if a.do_rotary:  # attention reads the rotated copy, [B, N, S, H]
        a.q_sb, a.q_ss, a.q_sh = n * s * h, h, s * h
    else:
        a.q_sb, a.q_ss, a.q_sh = s * row, row, h
    # The cache attention reads.
    if windowed:
        a.cache_rows, a.present_rows = cap + s, cap
        cache_in_ws = True
    else:
        a.present_rows = int(present_rows) if present_rows is not None else (cap + s if cap else s)
        a.cache_rows = a.present_rows
        cache_in_ws = present_rows is None
    e = dtype.itemsize
    regions: dict[str, tuple[int, int]] = {}
    offset = 0

    def region(name, nbytes):
        nonlocal offset
        regions[name] = (offset, nbytes)
        offset += _round(max(nbytes, 1))

    if s > 1:  # total_sequence_length, read by every thread of a prompt's kernels, staged in device memory
        region("total", 4)
    if a.do_rotary:
        region("q", b * n * s * h * e)
    if cache_in_ws:
        region("cache_k", b * nkv * a.cache_rows * h * e)
        region("cache_v", b * nkv * a.cache_rows * h * e)
    if windowed and (present_rows is None or dropped_present):  # a dropped present output is still written
        region("present_k", b * nkv * cap * h * e)
        region("present_v", b * nkv * cap * h * e)
    decode = s <= DEC_MAX_SEQ
    rows = a.group * s  # query rows (token, head) sharing a KV head
    a.rows_per_block = min(rows, DEC_HEADS)
    if decode:
        # The query rows of a KV head share a block (its K and V read once for all of them) only
        # while the blocks that leaves cover the multiprocessors. A small batch's decode has a few
        # KV heads: a block per row then runs 4-8x the blocks, each with that fraction of the
        # serial work per key (scores, softmax, P @ V), which a decode step is bound by; the K and
        # V rows it reads again come from L2.
        while a.rows_per_block > 1 and b * nkv * _cdiv(rows, a.rows_per_block) < sm_count * DEC_SHARE_BELOW:
            a.rows_per_block //= 2
    a.row_groups = _cdiv(rows, a.rows_per_block)
    a.splits = 1
    if decode:
        # Splits come from the capacity (never the current length), so a decode step's launches are
        # the same every step; at least two blocks per multiprocessor where the cache is long enough.
        a.key_tile = dec_key_tile(e, dec_variant(a.rows_per_block), h)
        blocks = b * nkv * a.row_groups
        a.splits = max(1, min(_cdiv(max(a.cache_rows, 1), a.key_tile), _cdiv(2 * sm_count, blocks), MAX_SPLITS))
        if a.splits > 1:
            region("part_acc", b * s * n * a.splits * h * 4)
            region("part_ml", b * s * n * a.splits * 2 * 4)
            region("counters", blocks * 4)  # per (batch, KV head, row group): split blocks done
    bucket = 64 if h <= 64 else (128 if h <= 128 else 256)
    return GqaLayout(a, decode, packed, cache_in_ws, regions, offset, bucket)


def gqa_rows(a: GqaArgs, seqlens, total: int) -> list[dict]:
    """hipep_gqa_geometry in numpy terms: per batch row, where its tokens and keys are in the cache
    (t, first, past, len, seed, src_off, store_first, store_count)."""
    s = a.seq
    first = int(total) == s if s > 1 else bool(a.has_pos_ids) and all(int(x) == 0 for x in seqlens)
    out = []
    if not a.windowed:
        for sl in seqlens:
            t = int(sl) + 1
            p = 0 if (first or not a.has_past) else max(t - s, 0)
            out.append(dict(t=t, first=first, past=p, len=t, seed=p, src_off=0, store_first=0, store_count=0))
        return out
    cap, w = a.past_rows, a.window
    gap = cap - w + 1

    def end(p):
        return p if p <= cap else p - gap * ((p - cap + gap - 1) // gap)

    staging = any(end(max(int(sl) + 1 - s, 0) + s) - s < min(max(int(sl) + 1 - s, 0), w - 1) for sl in seqlens)
    for sl in seqlens:
        t = int(sl) + 1
        p = max(t - s, 0)
        before, kept = end(p), end(p + s) - s
        seed = before if staging else kept
        out.append(dict(t=t, first=first, past=seed, len=seed + s, seed=seed, src_off=0 if staging else before - kept,
                        store_first=before - kept if staging else 0, store_count=kept + s if staging else seed + s))
    return out


def gqa_length_fault(a: GqaArgs, row: dict) -> tuple[int, int]:
    """hipep_gqa_length_fault: (fault code, bound) of a batch row's seqlens_k (0 where it fits)."""
    t, s = row["t"], a.seq
    if not a.windowed:
        limit = a.cache_rows
        if not row["first"] and a.has_past:
            limit = min(limit, a.past_rows + s)
        if t < 1 or t > limit:
            return FAULT_SEQLEN, limit
        if row["first"] or t >= s:
            return 0, 0
    elif t >= s:
        return 0, 0
    return FAULT_SEQLEN_SHORT, s


def gqa_bounds(a: GqaArgs, row: dict, s: int) -> tuple[int, int]:
    """hipep_gqa_bounds: the keys [lo, hi) query row s attends."""
    raw = row["past"] + s + 1
    f = min(raw, row["len"])
    hi = min(f, a.cache_rows)
    lo = max((raw if a.window_from_raw else f) - a.window, 0) if a.window >= 0 else 0
    return lo, hi


# ---- GroupQueryAttention --------------------------------------------------------------------------

def _gqa_check(attrs, dtypes, shapes, values):
    if not dtypes or dtypes[0] not in ("float32", "float16", "bfloat16"):
        return f"element type {dtypes[0] if dtypes else '?'}"
    q = shapes[0] if shapes else None
    packed = len(dtypes) < 2 or not dtypes[1]
    h = None
    if q is not None and len(q) == 3 and q[2] is not None:
        n, nkv = int(attrs["num_heads"]), int(attrs["kv_num_heads"])
        width = n + 2 * nkv if packed else n
        if q[2] % width == 0:
            h = q[2] // width
    past = shapes[3] if len(shapes) > 3 else None
    if h is None and past is not None and len(past) == 4 and past[3] is not None:
        h = past[3]
    if h is not None:
        why = _head_size_reason(int(h))
        if why:
            return why
    bias = shapes[10] if len(shapes) > 10 else None
    if bias is not None and len(bias) != 4:
        return f"attention_bias of rank {len(bias)} (4-D only)"
    if len(dtypes) > 14 and dtypes[14] and packed:
        return "q_norm_weight / k_norm_weight with packed QKV (separate query and key only)"
    return None


def _aligned(*pointers) -> bool:
    return all(p % 16 == 0 for p in pointers if p)


def _qk_norm_ops(q, k, q_norm, k_norm, attrs, target):
    """Qwen3's per-head Q/K RMS norm (q_norm_weight / k_norm_weight): the RMS norm kernels of
    SimplifiedLayerNormalization over Q's and K's heads (rows of head_size), written into workspace
    regions in front of the attention's own: (launches, normalized Q and K as Args, the target whose
    workspace lies past those regions)."""
    if q_norm is None or k_norm is None or k is None:
        raise HipepError(f"{GQA}: q_norm_weight and k_norm_weight come together, with a separate key")
    h = int(q_norm.size)
    if h == 0 or int(k_norm.size) != h or q.shape[-1] % h or k.shape[-1] % h:
        raise HipepError(f"{GQA}: q_norm_weight {list(q_norm.shape)} and k_norm_weight {list(k_norm.shape)} must "
                         f"be [head_size], dividing query {list(q.shape)} and key {list(k.shape)}")
    dt = _dt(q.dtype, GQA)
    sizes = [q.size * q.dtype.itemsize, k.size * k.dtype.itemsize]
    qn, kn = workspace_regions(target, GQA, sizes)
    vec = _VEC.get(dt, 1)
    eps = float(attrs.get("qk_norm_epsilon", 1e-6))
    ops = []
    for x, w, dst in ((q, q_norm, qn), (k, k_norm, kn)):
        use_vec = vec > 1 and h % vec == 0 and all(p % 16 == 0 for p in (x.ptr, w.ptr, dst))
        params = [ptr(x), ptr(w), ctypes.c_uint64(dst), ctypes.c_uint64(0), RmsArgs(x.size // h, h, 0, eps)]
        ops.append(_rms_launch("hipep_rms_norm", dt, x.size // h, h, vec, use_vec, params, target))
    normed = [dataclasses.replace(q, ptr=qn, value=None, constant=False),
              dataclasses.replace(k, ptr=kn, value=None, constant=False)]
    return ops, normed, workspace_after(target, sizes)


@_binding(f"com.microsoft::{GQA}", check=_gqa_check,
          modules=("attention_cache", "attention_decode", "attention_decode_fused", "attention_prefill",
                   "attention_prefill_tc", "rms_norm"))
def _gqa_bind(ins, outs, attrs, target):
    ins = list(ins) + [None] * (16 - len(ins))
    q, k, v, pk, pv, seqlens, total, cos, sin, pos_ids, bias, sink = ins[:12]
    norm_ops = []
    if ins[14] is not None or ins[15] is not None:  # normalized Q and K replace the inputs
        norm_ops, (q, k), target = _qk_norm_ops(q, k, ins[14], ins[15], attrs, target)
    outs = list(outs) + [None] * (3 - len(outs))
    out, pres_k, pres_v = outs[:3]
    dt = _dt(q.dtype, GQA)
    if dt not in ("f32", "f16", "bf16"):
        raise NoKernel(f"{GQA} on {q.dtype.name}")
    if seqlens is None or total is None:
        raise HipepError(f"{GQA}: seqlens_k and total_sequence_length are required")
    if seqlens.dtype != np.int32 or total.dtype != np.int32:
        raise HipepError(f"{GQA}: seqlens_k and total_sequence_length must be int32, got {seqlens.dtype.name} and "
                         f"{total.dtype.name}")
    present_rows = next((int(p.shape[2]) for p in (pres_k, pres_v) if p is not None), None)
    lay = gqa_layout(attrs, q.dtype, q.shape, None if k is None else k.shape, None if pk is None else pk.shape,
                     present_rows, None if cos is None else cos.shape, pos_ids is not None,
                     None if bias is None else bias.shape, sink is not None, target.sm_count,
                     (pres_k is None) != (pres_v is None))
    a = lay.args
    if seqlens.size != a.batch:
        raise HipepError(f"{GQA}: seqlens_k must have batch_size={a.batch} elements, got shape {list(seqlens.shape)}")
    if sink is not None and sink.size != a.heads:
        raise HipepError(f"{GQA}: head_sink must be [num_heads] = [{a.heads}], got {list(sink.shape)}")
    if pos_ids is not None and a.has_pos_ids and (pos_ids.ndim != 2 or pos_ids.shape[0] != a.batch
                                                  or pos_ids.shape[1] < a.seq):
        raise HipepError(f"{GQA}: position_ids must be [batch, >= sequence] = [{a.batch}, >= {a.seq}], "
                         f"got {list(pos_ids.shape)}")
    if a.batch * a.seq == 0 or out is None:
        return []
    e = q.dtype.itemsize
    ws = 0
    if lay.workspace_bytes:
        if target.workspace is None:
            raise NoKernel(f"{GQA}: the device offers no workspace")
        ws = target.workspace(lay.workspace_bytes)

    def region(name):
        return ws + lay.workspace[name][0] if name in lay.workspace else 0

    qp = q.ptr
    kp = q.ptr + a.heads * a.head_size * e if lay.packed else k.ptr
    vp = q.ptr + (a.heads + a.kv_heads) * a.head_size * e if lay.packed else v.ptr
    if lay.cache_in_workspace:
        cache_k, cache_v = region("cache_k"), region("cache_v")
    else:
        cache_k = pres_k.ptr if pres_k is not None else region("cache_k")
        cache_v = pres_v.ptr if pres_v is not None else region("cache_v")
    if not lay.cache_in_workspace and (pres_k is None or pres_v is None):
        raise NoKernel(f"{GQA}: a present output the plan drops")  # layout gave the workspace no room for it
    if not _aligned(qp, kp, vp, cache_k, cache_v, 0 if pk is None else pk.ptr, 0 if pv is None else pv.ptr):
        raise NoKernel(f"{GQA}: the query, key, value or KV cache buffers are not 16-byte aligned")
    sl, tot = ptr(seqlens), ptr(total)
    words = a.head_size * e // 16
    ops = []
    if "total" in lay.workspace:  # wherever the plan keeps it (host-visible memory, say): 4 bytes to the device
        ops.append(CopyOp(region("total"), total.ptr, 4))
        tot = ctypes.c_uint64(region("total"))
    copy_past = a.has_past and (lay.args.windowed or cache_k != pk.ptr or cache_v != pv.ptr)
    length_fault = fault_param(target, "input 5 (seqlens_k)")  # a seqlens_k that does not fit
    position_fault = NO_FAULT_SITE  # a rotary position past cos_cache
    if a.do_rotary:
        position_fault = fault_param(target, "input 9 (position_ids)" if a.has_pos_ids
                                     else "input 5 (seqlens_k) as rotary positions")
    variant = dec_variant(a.rows_per_block)
    counters = region("counters")
    if lay.decode and a.seq == 1 and not a.windowed and not copy_past and (
            a.splits == 1 or target.counters is not None):
        # One token on a cache attended in place: the rotary and cache append ride in the decode
        # launch (hipep_gqa_decode_fused), whose arrival counters keep themselves zero in memory
        # of the launch's own (the prepare kernel zeroes the workspace's every run).
        if a.splits > 1:
            counters = target.counters(a.batch * a.kv_heads * a.row_groups * 4)
        ops.append(KernelOp(f"hipep_gqa_decode_fused_{dt}_g{variant}",
                            (a.splits, a.kv_heads * a.row_groups, a.batch), (dec_threads(variant), 1, 1),
                            [ctypes.c_uint64(qp), ctypes.c_uint64(kp), ctypes.c_uint64(vp), sl, tot, ptr(pos_ids),
                             ptr(cos), ptr(sin), ctypes.c_uint64(cache_k), ctypes.c_uint64(cache_v), ptr(bias),
                             ptr(sink), ptr(out), ctypes.c_uint64(region("part_acc")),
                             ctypes.c_uint64(region("part_ml")), ctypes.c_uint64(counters), a, length_fault,
                             position_fault], module="attention_decode_fused", element_type=dt,
                            # its first pass of past cache rows requested while the kernel ahead
                            # (the QKV projection) finishes
                            overlaps_previous=OVERLAP_FUSED_DECODE))
        return norm_ops + ops
    # 1. rows taken from past
    if copy_past:
        rows = a.cache_rows
        grid, block = flat_config(a.batch * a.kv_heads * rows * words, target)
        ops.append(KernelOp("hipep_gqa_copy_past", (grid[0], 2, 1), block,
                            [ptr(pk), ptr(pv), sl, tot, ctypes.c_uint64(cache_k), ctypes.c_uint64(cache_v),
                             ctypes.c_int(rows), ctypes.c_int(words), a], module="attention_cache"))
    # 2. rotary and the new rows
    q_rot = region("q")
    items = a.batch * a.seq * (a.heads + 2 * a.kv_heads) * (a.head_size // 2)
    grid, block = flat_config(items, target)
    ops.append(KernelOp(f"hipep_gqa_prepare_{dt}", grid, block,
                        [ctypes.c_uint64(qp), ctypes.c_uint64(kp), ctypes.c_uint64(vp), sl, tot, ptr(pos_ids),
                         ptr(cos), ptr(sin), ctypes.c_uint64(q_rot), ctypes.c_uint64(cache_k),
                         ctypes.c_uint64(cache_v), ctypes.c_uint64(region("counters")), a, length_fault,
                         position_fault], module="attention_cache"))
    q_att = q_rot if a.do_rotary else qp
    # 3. attention
    if lay.decode:
        ops.append(KernelOp(f"hipep_gqa_decode_{dt}_g{variant}",
                            (a.splits, a.kv_heads * a.row_groups, a.batch), (dec_threads(variant), 1, 1),
                            [ctypes.c_uint64(q_att), ctypes.c_uint64(cache_k), ctypes.c_uint64(cache_v), sl, tot,
                             ptr(bias), ptr(sink), ptr(out), ctypes.c_uint64(region("part_acc")),
                             ctypes.c_uint64(region("part_ml")), ctypes.c_uint64(region("counters")), a],
                            module="attention_decode", element_type=dt))
    else:
        params = [ctypes.c_uint64(q_att), ctypes.c_uint64(cache_k), ctypes.c_uint64(cache_v), sl, tot, ptr(bias),
                  ptr(sink), ptr(out), a]
        tc = prefill_tc_bucket(a, dt, target)
        if tc is not None:
            ops.append(KernelOp(f"hipep_gqa_prefill_tc_{dt}_h{tc}", (_cdiv(a.seq, PREFILL_TC_ROWS), a.heads, a.batch),
                                (PREFILL_TC_THREADS, 1, 1), params, module="attention_prefill_tc"))
        else:
            threads, _ = PREFILL[lay.prefill_bucket]
            ops.append(KernelOp(f"hipep_gqa_prefill_{dt}_h{lay.prefill_bucket}",
                                (_cdiv(a.seq, threads // 4), a.heads, a.batch), (threads, 1, 1), params,
                                module="attention_prefill"))
    # 4. the sliding-window cache's kept rows into present
    if a.windowed:
        dst_k = pres_k.ptr if pres_k is not None else region("present_k")
        dst_v = pres_v.ptr if pres_v is not None else region("present_v")
        if not _aligned(dst_k, dst_v):
            raise NoKernel(f"{GQA}: present_key/present_value are not 16-byte aligned")
        grid, block = flat_config(a.batch * a.kv_heads * a.past_rows * words, target)
        ops.append(KernelOp("hipep_gqa_window_store", (grid[0], 2, 1), block,
                            [ctypes.c_uint64(cache_k), ctypes.c_uint64(cache_v), sl, tot, ctypes.c_uint64(dst_k),
                             ctypes.c_uint64(dst_v), ctypes.c_int(words), a], module="attention_cache"))
    return norm_ops + ops


# ---- RotaryEmbedding (com.microsoft and ai.onnx-23) -------------------------------------------------

class RopeArgs(ctypes.Structure):
    """kernels/rotary.hip's hipep_rope_args."""
    _fields_ = ([(n, ctypes.c_int) for n in ("batch", "seq", "heads", "head_size", "rotary_half", "interleaved",
                                             "pos_mode", "max_pos", "mrope_layout", "sec_t", "sec_h", "sec_w")]
                + [("scale", ctypes.c_float)]
                + [(n, ctypes.c_longlong) for n in ("sb", "ss", "sh")])


def rope_layout(op: str, x_shape, heads: int, head_size: int, rotary_dim: int, cos_shape, pos_mode: int,
                interleaved: int) -> RopeArgs:
    """The rotary kernel's arguments for an input of `x_shape` (3-D [B, S, N*H] or 4-D [B, N, S, H])."""
    a = RopeArgs()
    if len(x_shape) == 3:
        b, s, hidden = (int(d) for d in x_shape)
        if head_size <= 0 or heads <= 0 or heads * head_size != hidden:
            raise HipepError(f"{op}: input hidden size {hidden} is not num_heads ({heads}) * head_size ({head_size})")
        a.sb, a.ss, a.sh = s * hidden, hidden, head_size
    elif len(x_shape) == 4:
        b, heads, s, head_size = (int(d) for d in x_shape)
        a.sb, a.ss, a.sh = heads * s * head_size, head_size, s * head_size
    else:
        raise HipepError(f"{op}: input must be 3-D or 4-D, got {list(x_shape)}")
    r = rotary_dim or head_size
    if r <= 0 or r > head_size or r % 2 or head_size % 2:
        raise HipepError(f"{op}: rotary dimension {r} must be even and at most the (even) head size {head_size}")
    if int(cos_shape[-1]) != r // 2:
        raise HipepError(f"{op}: cos_cache/sin_cache last dim must be rotary_dim / 2 = {r // 2}, got {cos_shape[-1]}")
    a.batch, a.seq, a.heads, a.head_size, a.rotary_half = b, s, heads, head_size, r // 2
    a.interleaved, a.pos_mode, a.max_pos = int(interleaved), pos_mode, int(cos_shape[0])
    a.scale = 1.0
    return a


def _rope_check(attrs, dtypes, shapes, values):
    if not dtypes or dtypes[0] not in ("float32", "float16"):
        return f"element type {dtypes[0] if dtypes else '?'}"
    return None


def _rope_ops(a: RopeArgs, x, pos_ids, cos, sin, y, target, pos_input: str | None):
    """The rotary launch; `pos_input` names position_ids (e.g. "input 1 (position_ids)"), whose
    values past the cos/sin cache the kernel reports (None: no position_ids)."""
    if a.batch * a.seq * a.heads == 0:
        return []
    grid, block = flat_config(a.batch * a.seq * a.heads * (a.head_size // 2), target)
    fault = NO_FAULT_SITE if pos_input is None else fault_param(target, pos_input)
    return [KernelOp(f"hipep_rotary_{_dt(x.dtype, 'RotaryEmbedding')}", grid, block,
                     [ptr(x), ptr(pos_ids), ptr(cos), ptr(sin), ptr(y), a, fault], module="rotary")]


def _ms_rope_dims(op: str, x, cos, sin, n: int, rd: int):
    """(heads, head size, batch, sequence) of a com.microsoft rotary's input (RotaryEmbedding,
    MRotaryEmbedding: 3-D [B, S, N * H] or 4-D [B, N, S, H]), checked against its caches."""
    if cos.ndim != 2 or tuple(sin.shape) != tuple(cos.shape):
        raise HipepError(f"{op}: cos_cache and sin_cache must both be 2-D [max_position, rotary_dim / 2], "
                         f"got {list(cos.shape)} and {list(sin.shape)}")
    if x.ndim not in (3, 4):
        raise HipepError(f"{op}: input must be 3-D or 4-D, got {list(x.shape)}")
    hidden = x.shape[2] if x.ndim == 3 else x.shape[1] * x.shape[3]
    h = 2 * int(cos.shape[1]) if rd == 0 else (hidden // n if n else 0)
    if x.ndim == 4 and (h != x.shape[3] or (n and n != x.shape[1])):
        raise HipepError(f"{op}: head size {h} / num_heads {n} differ from the input's {list(x.shape)}")
    heads = (n or (hidden // h if h else 0)) if x.ndim == 3 else x.shape[1]
    b, s = (x.shape[0], x.shape[1]) if x.ndim == 3 else (x.shape[0], x.shape[2])
    return heads, h, b, s


@_binding("com.microsoft::RotaryEmbedding", check=_rope_check, modules=("rotary",))
def _ms_rope_bind(ins, outs, attrs, target):
    x, pos_ids, cos, sin = ins[:4]
    op = "RotaryEmbedding"
    n, rd = int(attrs.get("num_heads", 0)), int(attrs.get("rotary_embedding_dim", 0))
    heads, h, b, s = _ms_rope_dims(op, x, cos, sin, n, rd)
    if s > cos.shape[0]:
        raise HipepError(f"{op}: sequence length {s} exceeds the caches' {cos.shape[0]} positions")
    if pos_ids.size == 1 and pos_ids.ndim <= 1:
        mode = 0
    elif tuple(pos_ids.shape) == (b, s):
        mode = 1
    else:
        raise HipepError(f"{op}: position_ids must be one element or [batch, sequence] = {[b, s]}, "
                         f"got {list(pos_ids.shape)}")
    a = rope_layout(op, x.shape, heads, h, rd or h, cos.shape, mode, int(attrs.get("interleaved", 0)))
    return _rope_ops(a, x, pos_ids, cos, sin, outs[0], target, "input 1 (position_ids)")


@_binding("com.microsoft::MRotaryEmbedding", check=_rope_check, modules=("rotary",))
def _mrope_bind(ins, outs, attrs, target):
    x, pos_ids, cos, sin = ins[:4]
    op = "MRotaryEmbedding"
    n, rd = int(attrs.get("num_heads", 0)), int(attrs.get("rotary_embedding_dim", 0))
    section, layout = [int(v) for v in attrs["mrope_section"]], int(attrs.get("mrope_layout", 0))
    heads, h, b, s = _ms_rope_dims(op, x, cos, sin, n, rd)
    if tuple(pos_ids.shape) != (3, b, s):
        raise HipepError(f"{op}: position_ids must be [3, batch, sequence] = {[3, b, s]}, got {list(pos_ids.shape)}")
    half = (rd or h) // 2
    if len(section) != 3 or min(section) < 0 or sum(section) != half or layout not in (0, 1):
        raise HipepError(f"{op}: mrope_section {section} must be 3 non-negative integers summing to "
                         f"rotary_embedding_dim / 2 = {half}, and mrope_layout 0 or 1 (got {layout})")
    a = rope_layout(op, x.shape, heads, h, rd or h, cos.shape, 3, int(attrs.get("interleaved", 0)))
    a.mrope_layout, a.sec_t, a.sec_h, a.sec_w = layout, *section
    a.scale = float(np.float32(attrs.get("scale", 1.0)))
    return _rope_ops(a, x, pos_ids, cos, sin, outs[0], target, "input 1 (position_ids)")


@_binding("::RotaryEmbedding", check=_rope_check, modules=("rotary",))
def _onnx_rope_bind(ins, outs, attrs, target):
    x, cos, sin = ins[:3]
    pos_ids = ins[3] if len(ins) > 3 else None
    op = "RotaryEmbedding"
    n, rd = int(attrs.get("num_heads", 0)), int(attrs.get("rotary_embedding_dim", 0))
    if x.ndim == 3 and n <= 0:
        raise HipepError(f"{op}: a 3-D input needs the num_heads attribute")
    if x.ndim not in (3, 4):
        raise HipepError(f"{op}: input must be 3-D or 4-D, got {list(x.shape)}")
    h = x.shape[2] // n if x.ndim == 3 else x.shape[3]
    b, s = (x.shape[0], x.shape[1]) if x.ndim == 3 else (x.shape[0], x.shape[2])
    if tuple(sin.shape) != tuple(cos.shape):
        raise HipepError(f"{op}: cos_cache {list(cos.shape)} and sin_cache {list(sin.shape)} differ")
    if pos_ids is None:
        if cos.ndim != 3 or tuple(cos.shape[:2]) != (b, s):
            raise HipepError(f"{op}: without position_ids, cos_cache must be [batch, sequence, rotary_dim / 2] with "
                             f"batch, sequence = {b}, {s}, got {list(cos.shape)}")
        mode = 2
    else:
        if cos.ndim != 2:
            raise HipepError(f"{op}: with position_ids, cos_cache must be 2-D [max_position, rotary_dim / 2], "
                             f"got {list(cos.shape)}")
        if tuple(pos_ids.shape) != (b, s):
            raise HipepError(f"{op}: position_ids must be [batch, sequence] = {[b, s]}, got {list(pos_ids.shape)}")
        mode = 1
    a = rope_layout(op, x.shape, n if x.ndim == 3 else x.shape[1], h, rd or h, cos.shape, mode,
                    int(attrs.get("interleaved", 0)))
    return _rope_ops(a, x, pos_ids, cos, sin, outs[0], target, None if pos_ids is None else "input 3 (position_ids)")

