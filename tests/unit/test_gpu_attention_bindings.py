"""The GroupQueryAttention and RotaryEmbedding GPU bindings without a GPU (hipep/runtime/gpu_attention.py,
kernels/attention_*.hip, kernels/rotary.hip).

NVRTC compiles the modules for sm_90 and every entry point the bindings name exists. Then the
launches a binding gives are run by a numpy emulation of each kernel over a flat byte "device
memory" (pointers are offsets into it), driven by the very parameter structs the binding built:
the kernels' index arithmetic (hipep_gqa_geometry's rows, the causal and window bounds, the
split-KV chunks and their combine, the window cache's staging and write-back, the workspace
regions) must give the registry reference's outputs."""
from __future__ import annotations

import ctypes
import zlib

import ml_dtypes
import numpy as np
import pytest

from hipep.ops.contrib_attention import ROPE_VECTOR_PAIRS
from hipep.ops.mlas import _rms_rows
from hipep.ops.registry import OUTPUT_COUNT, REQUIRED, lookup
from hipep.runtime import gpu_faults as gf
from hipep.runtime import gpu_kernels as gk
from hipep.runtime.gpu_attention import DEC_DIRECT_PASSES, DEC_VARIANTS, GqaArgs, RopeArgs, gqa_bounds, gqa_length_fault, gqa_rows

from helpers import needs_nvrtc, window_end

ARCH, DEFINES = "sm_90", {"HIPEP_WARP_SIZE": 32}
F32, F16 = np.float32, np.float16
BF16 = np.dtype(ml_dtypes.bfloat16)
GQA = "com.microsoft::GroupQueryAttention"


# ---- a flat device memory -------------------------------------------------------------------------

class Memory:
    def __init__(self):
        self.bytes = np.zeros(1 << 12, np.uint8)
        self.top = 1 << 12  # pointer 0 stays null

    def alloc(self, nbytes: int) -> int:
        p = self.top
        self.top += -(-max(nbytes, 1) // 256) * 256
        if self.top > self.bytes.size:
            grown = np.zeros(max(self.top, 2 * self.bytes.size), np.uint8)
            grown[:self.bytes.size] = self.bytes
            self.bytes = grown
        return p

    def put(self, a: np.ndarray) -> int:
        a = np.ascontiguousarray(a)
        p = self.alloc(a.nbytes)
        self.bytes[p:p + a.nbytes] = a.reshape(-1).view(np.uint8)
        return p

    def arg(self, a, poison=False):
        if a is None:
            return None
        a = np.asarray(a)
        p = self.put(np.full(a.shape, np.nan, a.dtype) if poison else a)
        return gk.Arg(p, a.shape, a.dtype)

    def view(self, p: int, dtype, count: int) -> np.ndarray:
        dtype = np.dtype(dtype)
        return self.bytes[p:p + count * dtype.itemsize].view(dtype)

    def get(self, a: gk.Arg) -> np.ndarray:
        return self.view(a.ptr, a.dtype, a.size).reshape(a.shape).copy()


def _u64(v) -> int:
    return int(v.value) if isinstance(v, ctypes.c_uint64) else int(v)


# ---- the kernels in numpy -------------------------------------------------------------------------

def emulate(mem: Memory, ops, dtype):
    for op in ops:
        if isinstance(op, gk.CopyOp):
            mem.bytes[op.dst:op.dst + op.nbytes] = mem.bytes[op.src:op.src + op.nbytes].copy()
            continue
        name = op.entry
        p = op.params
        if name == "hipep_gqa_copy_past":
            _copy_past(mem, [_u64(x) for x in p[:6]], int(p[6].value), int(p[7].value), p[8], dtype)
        elif name == "hipep_gqa_window_store":
            _window_store(mem, [_u64(x) for x in p[:6]], int(p[6].value), p[7], dtype)
        elif name.startswith("hipep_gqa_prepare"):
            _prepare(mem, [_u64(x) for x in p[:12]], p[12], dtype, length_fault=p[13], position_fault=p[14])
        elif name.startswith("hipep_gqa_decode_fused"):
            prepare, decode, a = fused_parts(mem, p, dtype)
            _prepare(mem, prepare, a, dtype, length_fault=p[17], position_fault=p[18])
            _attend(mem, decode, a, dtype, decode=True)
        elif name.startswith("hipep_gqa_decode"):
            _attend(mem, [_u64(x) for x in p[:11]], p[11], dtype, decode=True)
        elif name.startswith("hipep_gqa_prefill"):
            _attend(mem, [_u64(x) for x in p[:8]] + [0, 0, 0], p[8], dtype, decode=False)
        elif name.startswith("hipep_rotary"):
            _rotary(mem, [_u64(x) for x in p[:5]], p[5], dtype, fault=p[6])
        elif name.startswith("hipep_rms_norm_"):  # the kernel itself runs on the host stand-in elsewhere
            _rms_rows_kernel(mem, [_u64(x) for x in p[:4]], p[4], dtype)
        else:
            raise AssertionError(f"no emulation for {name}")


def fused_parts(mem, params, dtype):
    """A hipep_gqa_decode_fused launch as the two launches whose work it does: the prepare
    kernel's pointers (the rotated query into fresh memory; no counters to zero: the fused kernel
    keeps its own zero) and the decode kernel's, and the launch's args."""
    x = [_u64(v) for v in params[:16]]
    a = params[16]
    q_out = mem.alloc(a.batch * a.heads * a.seq * a.head_size * np.dtype(dtype).itemsize) if a.do_rotary else 0
    prepare = x[:8] + [q_out, x[8], x[9], 0]
    decode = [q_out if a.do_rotary else x[0], x[8], x[9], x[3], x[4], x[10], x[11], x[12], x[13], x[14], x[15]]
    return prepare, decode, a


def _report(mem, fault: gf.FaultSite, code: int, value: int, bound: int) -> None:
    """hipep_report_fault: the first report fills the stream's record, later ones are dropped."""
    if not fault.record:
        return
    record = gf.FaultRecord.from_buffer(mem.bytes, fault.record)
    if record.code == gf.FAULT_NONE:
        record.code, record.site, record.value, record.bound = code, fault.site, value, bound


def _host(mem, a: GqaArgs, seqlens_p, total_p):
    seqlens = mem.view(seqlens_p, np.int32, a.batch)
    total = int(mem.view(total_p, np.int32, 1)[0])
    return gqa_rows(a, seqlens, total), total


def _cache(mem, p, a: GqaArgs, rows, dtype):
    return mem.view(p, dtype, a.batch * a.kv_heads * rows * a.head_size).reshape(a.batch, a.kv_heads, rows,
                                                                               a.head_size)


def _copy_past(mem, ptrs, dst_rows, words, a, dtype):
    pk, pv, sl, tot, dk, dv = ptrs
    assert words * 16 == a.head_size * np.dtype(dtype).itemsize
    rows, _ = _host(mem, a, sl, tot)
    for src_p, dst_p in ((pk, dk), (pv, dv)):
        src, dst = _cache(mem, src_p, a, a.past_rows, dtype), _cache(mem, dst_p, a, dst_rows, dtype)
        for b, g in enumerate(rows):
            for r in range(dst_rows):
                if r < g["seed"]:
                    if g["src_off"] + r < a.past_rows:
                        dst[b, :, r] = src[b, :, g["src_off"] + r]
                elif not a.windowed and r >= g["seed"] + a.seq:
                    dst[b, :, r] = 0


def _window_store(mem, ptrs, words, a, dtype):
    ck, cv, sl, tot, dk, dv = ptrs
    rows, _ = _host(mem, a, sl, tot)
    for src_p, dst_p in ((ck, dk), (cv, dv)):
        src, dst = _cache(mem, src_p, a, a.cache_rows, dtype), _cache(mem, dst_p, a, a.past_rows, dtype)
        for b, g in enumerate(rows):
            for r in range(a.past_rows):
                sr = g["store_first"] + r
                dst[b, :, r] = src[b, :, sr] if r < g["store_count"] and sr < a.cache_rows else 0


def _rope(x1, x2, c, s, dtype):
    """One pair as the kernels rotate it: f32 fused, f16 (and MLAS's interleaved tail) unfused."""
    f32 = np.float32
    if dtype == F32:  # fma in f64 then rounded: exact for f32 operands
        y1 = (x1.astype(np.float64) * c - (x2 * s).astype(f32)).astype(f32)
        y2 = (x1.astype(np.float64) * s + (x2 * c).astype(f32)).astype(f32)
    else:
        y1 = ((x1 * c).astype(f32) - (x2 * s).astype(f32)).astype(f32)
        y2 = ((x2 * c).astype(f32) + (x1 * s).astype(f32)).astype(f32)
    return y1, y2


def _pairs(h, half, interleaved):
    out = []
    for j in range(h // 2):
        if j < half:
            out.append((2 * j, 2 * j + 1) if interleaved else (j, j + half))
        else:
            e1 = 2 * half + 2 * (j - half)
            out.append((e1, e1 + 1))
    return out


def _prepare(mem, ptrs, a, dtype, length_fault, position_fault):
    q_p, k_p, v_p, sl, tot, pos_p, cos_p, sin_p, qo_p, ck_p, cv_p, cnt_p = ptrs
    if cnt_p:  # the decode kernel's arrival counters
        mem.view(cnt_p, np.uint32, a.batch * a.kv_heads * a.row_groups)[:] = 0
    rows, total = _host(mem, a, sl, tot)
    S, H, n, nkv = a.seq, a.head_size, a.heads, a.kv_heads
    half = a.rotary_half if a.do_rotary else 0
    e = np.dtype(dtype).itemsize
    cos = mem.view(cos_p, dtype, a.max_pos * a.rotary_half).reshape(a.max_pos, -1) if a.do_rotary else None
    sin = mem.view(sin_p, dtype, a.max_pos * a.rotary_half).reshape(a.max_pos, -1) if a.do_rotary else None
    ck, cv = _cache(mem, ck_p, a, a.cache_rows, dtype), _cache(mem, cv_p, a, a.cache_rows, dtype)
    for b, g in enumerate(rows):
        bad_length, bound = gqa_length_fault(a, g)
        if bad_length:
            _report(mem, length_fault, bad_length, g["t"] - 1, bound)
        for s in range(S):
            for slot in range(n + 2 * nkv):
                is_q, is_k = slot < n, n <= slot < n + nkv
                if is_q and not a.do_rotary:
                    continue
                if is_q:
                    src = q_p + (b * a.qin_sb + s * a.qin_ss + slot * H) * e
                elif is_k:
                    src = k_p + (b * a.kin_sb + s * a.kin_ss + (slot - n) * H) * e
                else:
                    src = v_p + (b * a.kin_sb + s * a.kin_ss + (slot - n - nkv) * H) * e
                x = mem.view(src, dtype, H).astype(np.float32)
                y = x.copy()
                if not (slot >= n + nkv) and half:
                    if a.has_pos_ids:
                        ids = mem.view(pos_p, np.int64, a.batch * S)
                        pos = int(ids[0]) + s if g["first"] else int(ids[b * S + s])
                    else:
                        pos = s if g["first"] else g["t"] - S + s
                    if not 0 <= pos < a.max_pos:
                        if not bad_length:  # a bad length's positions follow from it: not reported
                            _report(mem, position_fault, gf.FAULT_POSITION, pos, a.max_pos)
                        pos = min(max(pos, 0), a.max_pos - 1)
                    for j, (e1, e2) in enumerate(_pairs(H, half, a.interleaved)[:half]):
                        c, sn = np.float32(cos[pos, j]), np.float32(sin[pos, j])
                        y[e1], y[e2] = _rope(np.float32(x[e1]), np.float32(x[e2]), c, sn, dtype)
                if is_q:
                    mem.view(qo_p + (((b * n + slot) * S + s) * H) * e, dtype, H)[:] = y.astype(dtype)
                else:
                    row = g["seed"] + s
                    if 0 <= row < a.cache_rows:
                        (ck if is_k else cv)[b, slot - n if is_k else slot - n - nkv, row] = y.astype(dtype)


def _score(a, x, bias, b, head, s, j):
    x = np.float32(x) * np.float32(a.scale)
    if a.softcap > 0:
        x = np.float32(a.softcap) * np.float32(np.tanh(x / np.float32(a.softcap)))
    if bias is not None and j < a.bias_len:
        x += np.float32(bias[b * a.bias_sb + head * a.bias_sh + s * a.bias_ss + j])
    return np.float32(x)


def _partial(a, q, keys, vals, bias, b, head, s, lo, hi):
    """(m, l, acc) over keys [lo, hi) (m = -inf and zeros when empty)."""
    if hi <= lo:
        return -np.inf, 0.0, np.zeros(a.head_size, np.float64)
    sc = np.array([_score(a, np.dot(q, keys[j]), bias, b, head, s, j) for j in range(lo, hi)], np.float64)
    m = sc.max()
    p = np.exp(sc - m)
    return m, p.sum(), p @ vals[lo:hi].astype(np.float64)


def _finish(acc, m, l, has_sink, sink):
    if has_sink:
        m2 = max(m, sink)
        f = 0.0 if m == -np.inf else np.exp(m - m2)
        l, acc = l * f + np.exp(sink - m2), acc * f
    return acc / l if l > 0 else acc * 0


def _attend(mem, ptrs, a, dtype, decode):
    q_p, ck_p, cv_p, sl, tot, bias_p, sink_p, out_p, pacc_p, pml_p, cnt_p = ptrs
    if decode and a.splits > 1:  # zeroed by prepare: the last of a KV head's split blocks merges them
        assert cnt_p and (mem.view(cnt_p, np.uint32, a.batch * a.kv_heads * a.row_groups) == 0).all()
    rows, total = _host(mem, a, sl, tot)
    S, H, n = a.seq, a.head_size, a.heads
    e = np.dtype(dtype).itemsize
    ck, cv = _cache(mem, ck_p, a, a.cache_rows, dtype), _cache(mem, cv_p, a, a.cache_rows, dtype)
    bias = mem.view(bias_p, dtype, (mem.bytes.size - bias_p) // e).astype(np.float32) if bias_p else None
    sinks = mem.view(sink_p, dtype, n).astype(np.float64) if sink_p else np.zeros(n)
    out = mem.view(out_p, dtype, a.batch * S * n * H).reshape(a.batch * S * n, H)

    def query(b, s, head):
        return mem.view(q_p + (b * a.q_sb + s * a.q_ss + head * a.q_sh) * e, dtype, H).astype(np.float32)

    for b, g in enumerate(rows):
        if not decode:  # the prefill kernel: every (token, head) row on its own
            for head in range(n):
                kvh = head // a.group
                for s in range(S):
                    lo, hi = gqa_bounds(a, g, s)
                    m, l, acc = _partial(a, query(b, s, head), ck[b, kvh], cv[b, kvh], bias, b, head, s, lo, hi)
                    out[(b * S + s) * n + head] = _finish(acc, m, l, a.has_sink, sinks[head]).astype(dtype)
            continue
        # the split-KV kernel: blocks of (token, head) rows of one KV head, their keys split in chunks
        for kvh in range(a.kv_heads):
            for rg in range(a.row_groups):
                first = rg * a.rows_per_block
                block = [(r // a.group, kvh * a.group + r % a.group)
                         for r in range(first, min(first + a.rows_per_block, a.group * S))]
                bounds = [gqa_bounds(a, g, s) for s, _ in block]
                live = [(lo, hi) for lo, hi in bounds if hi > lo]
                lo = min(x for x, _ in live) if live else 0
                hi = max(y for _, y in live) if live else 0
                span = max(hi - lo, 0)
                # a span of a few key tiles: the first split block alone, writing the output
                direct = a.splits == 1 or -(-span // a.key_tile) <= DEC_DIRECT_PASSES
                chunk = span if direct else -(-(-(-span // a.splits)) // a.key_tile) * a.key_tile
                for split in range(1 if direct else a.splits):
                    k0, k1 = lo + split * chunk, min(hi, lo + (split + 1) * chunk)
                    for (s, head), (rlo, rhi) in zip(block, bounds):
                        m, l, acc = _partial(a, query(b, s, head), ck[b, kvh], cv[b, kvh], bias, b, head, s,
                                             max(k0, rlo), min(k1, rhi))
                        row = (b * S + s) * n + head
                        if direct:
                            out[row] = _finish(acc, m, l, a.has_sink, sinks[head]).astype(dtype)
                            continue
                        pacc = mem.view(pacc_p, np.float32, a.batch * S * n * a.splits * H).reshape(-1, H)
                        pml = mem.view(pml_p, np.float32, a.batch * S * n * a.splits * 2).reshape(-1, 2)
                        pacc[row * a.splits + split], pml[row * a.splits + split] = acc, (m, l)
                if not direct:  # every row group's own merge
                    _combine_rows(mem, [pacc_p, pml_p, sink_p, out_p], a, dtype, b, block)


def _combine_rows(mem, ptrs, a, dtype, b, block):
    """The splits' partials of one block's (token, head) rows merged (the decode kernel's last split
    block of that KV head and row group)."""
    pacc_p, pml_p, sink_p, out_p = ptrs
    H, n = a.head_size, a.heads
    rows = a.batch * a.seq
    pacc = mem.view(pacc_p, np.float32, rows * n * a.splits * H).reshape(rows, n, a.splits, H)
    pml = mem.view(pml_p, np.float32, rows * n * a.splits * 2).reshape(rows, n, a.splits, 2)
    sinks = mem.view(sink_p, dtype, n).astype(np.float64) if sink_p else np.zeros(n)
    out = mem.view(out_p, dtype, rows * n * H).reshape(rows, n, H)
    for s, head in block:
        r = b * a.seq + s
        ms = pml[r, head, :, 0].astype(np.float64)
        live = ms != -np.inf
        m = ms.max()
        w = np.where(live, np.exp(np.where(live, ms - m, 0)), 0)
        l = float((pml[r, head, :, 1] * w).sum())
        acc = (pacc[r, head] * np.where(live, w, 0)[:, None]).sum(axis=0) if live.any() else np.zeros(H)
        out[r, head] = _finish(acc, m, l, a.has_sink, sinks[head]).astype(dtype)


def _rms_rows_kernel(mem, ptrs, a, dtype):
    """hipep_rms_norm_*: rows of n RMS-normalized (SimplifiedLayerNormalization's reference)."""
    x_p, w_p, y_p, _ = ptrs
    x = mem.view(x_p, dtype, a.rows * a.n).reshape(a.rows, a.n).astype(np.float32)
    w = mem.view(w_p, dtype, a.n).astype(np.float32)
    y, _ = _rms_rows(x, w, a.eps)
    mem.view(y_p, dtype, a.rows * a.n)[:] = y.reshape(-1).astype(dtype)


def _mrope_stream(a: RopeArgs, j: int) -> int:
    if a.mrope_layout == 0:
        return 0 if j < a.sec_t else (1 if j < a.sec_t + a.sec_h else 2)
    return 1 if (j % 3 == 1 and j < 3 * a.sec_h) else (2 if (j % 3 == 2 and j < 3 * a.sec_w) else 0)


def _rotary(mem, ptrs, a: RopeArgs, dtype, fault):
    x_p, pos_p, cos_p, sin_p, y_p = ptrs
    e = np.dtype(dtype).itemsize
    half = a.rotary_half
    streams = 3 if a.pos_mode == 3 else 1
    pos = mem.view(pos_p, np.int64, streams * a.batch * a.seq) if a.pos_mode in (1, 3) else None

    def cache_row(b, s, j):
        if a.pos_mode == 2:
            return b * a.seq + s
        if a.pos_mode == 0:
            row = int(mem.view(pos_p, np.int64, 1)[0]) + s
        else:
            row = int(pos[((_mrope_stream(a, j) if a.pos_mode == 3 else 0) * a.batch + b) * a.seq + s])
        if not 0 <= row < a.max_pos:  # clamped, and reported
            _report(mem, fault, gf.FAULT_POSITION, row, a.max_pos)
            row = min(max(row, 0), a.max_pos - 1)
        return row

    for b in range(a.batch):
        for s in range(a.seq):
            rows = [cache_row(b, s, j) for j in range(half)] if a.pos_mode == 3 else [cache_row(b, s, 0)] * half
            cos = np.array([mem.view(cos_p + (r * half + j) * e, dtype, 1)[0] for j, r in enumerate(rows)], np.float32)
            sin = np.array([mem.view(sin_p + (r * half + j) * e, dtype, 1)[0] for j, r in enumerate(rows)], np.float32)
            if a.scale != 1:  # on cos and sin (MRotaryEmbedding)
                cos, sin = cos * np.float32(a.scale), sin * np.float32(a.scale)
            # MLAS's interleaved tail: pairs past the first after the last whole vector unfused
            unfused_from = half // ROPE_VECTOR_PAIRS * ROPE_VECTOR_PAIRS + 1 if a.interleaved else half
            for head in range(a.heads):
                base = b * a.sb + s * a.ss + head * a.sh
                x = mem.view(x_p + base * e, dtype, a.head_size).astype(np.float32)
                y = x.copy()
                for j, (e1, e2) in enumerate(_pairs(a.head_size, half, a.interleaved)[:half]):
                    y[e1], y[e2] = _rope(np.float32(x[e1]), np.float32(x[e2]), cos[j], sin[j],
                                         F16 if j >= unfused_from else dtype)
                mem.view(y_p + base * e, dtype, a.head_size)[:] = y.astype(dtype)


# ---- driving a binding ----------------------------------------------------------------------------

def _attrs(op_key, attrs, n_out):
    domain, op_type = op_key.split("::")
    op = lookup(domain, op_type)
    out = {k: v for k, v in op.attributes.items() if v is not REQUIRED}
    out.update(attrs)
    out[OUTPUT_COUNT] = n_out
    return op, out


def run_binding(op_key, inputs, attrs, out_shapes, dtype, sm_count=132, in_place=False):
    """(binding outputs, reference outputs): the binding's launches emulated over fresh memory."""
    op, full = _attrs(op_key, attrs, len(out_shapes))
    want = op.reference([None if a is None else a.copy() for a in inputs], dict(full))
    mem = Memory()
    ins = [mem.arg(a) for a in inputs]
    outs = [mem.arg(np.empty(s, dtype), poison=True) for s in out_shapes]
    if in_place:  # present is past's buffer (the shared KV cache)
        outs[1], outs[2] = ins[3], ins[4]
    def workspace(nbytes):  # poisoned (NaN, all-ones counters): whatever a kernel reads, one wrote first
        p = mem.alloc(nbytes)
        mem.bytes[p:p + nbytes] = 0xFF
        return p

    def counters(nbytes):  # Target.counters: zero when handed out
        p = mem.alloc(nbytes)
        mem.bytes[p:p + nbytes] = 0
        return p

    target = gk.Target(sm_count=sm_count, workspace=workspace, counters=counters)
    ops = gk.BINDINGS[op_key].bind(ins, outs, full, target)
    emulate(mem, ops, dtype)
    return [mem.get(o) for o in outs], want, ops


def gqa_case(rng, batch=1, seq=4, past=0, capacity=None, lens=None, total=None, heads=4, kv_heads=2, head=16,
             packed=False, rotary=None, dtype=F32, position_ids=False, bias=False, sink=False, no_past=False):
    total = total if total is not None else past + seq
    capacity = capacity if capacity is not None else past
    lens = lens if lens is not None else [total] * batch

    def u(*shape):
        return rng.uniform(-1, 1, shape).astype(dtype)

    if packed:
        q, k, v = u(batch, seq, (heads + 2 * kv_heads) * head), None, None
    else:
        q, k, v = u(batch, seq, heads * head), u(batch, seq, kv_heads * head), u(batch, seq, kv_heads * head)
    pk = None if no_past else u(batch, kv_heads, capacity, head)
    pv = None if no_past else u(batch, kv_heads, capacity, head)
    cos = sin = None
    if rotary:
        ang = rng.uniform(0, 6, (max(64, total + 4), rotary // 2))
        cos, sin = np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)
    ins = [q, k, v, pk, pv, np.array([x - 1 for x in lens], np.int32), np.array(total, np.int32), cos, sin,
           rng.integers(0, 60, (batch, seq)).astype(np.int64) if position_ids else None,
           u(batch, heads, seq, total) if bias else None, u(heads) if sink else None]
    present = max(total, capacity) if not no_past else total
    return ins, [(batch, seq, heads * head), (batch, kv_heads, present, head), (batch, kv_heads, present, head)]


CASES = {
    "prompt": dict(seq=5),
    "prompt-no-past": dict(seq=5, no_past=True, rotary=16),
    "prompt-padded-rotary": dict(batch=2, seq=5, lens=[5, 3], rotary=16),
    "prompt-packed-interleaved": dict(seq=6, packed=True, rotary=16, attrs=dict(rotary_interleaved=1)),
    "prompt-window-padded": dict(batch=2, seq=6, lens=[3, 6], attrs=dict(local_window_size=2)),
    "prompt-window-padded-softcap": dict(batch=2, seq=6, lens=[3, 6], attrs=dict(local_window_size=2, softcap=3.0)),
    "prompt-smooth": dict(seq=4, attrs=dict(smooth_softmax=1)),
    "prompt-sink-bias": dict(batch=2, seq=3, sink=True, bias=True),
    "subsequent-prompt": dict(seq=3, past=5, rotary=16, position_ids=True),
    "decode": dict(seq=1, past=6, rotary=16),
    "few-tokens-split": dict(seq=3, past=2200, rotary=16, sm=8),
    "few-tokens-window-bias-split": dict(seq=5, past=600, sm=8, bias=True, attrs=dict(local_window_size=130)),
    "few-tokens-mqa": dict(seq=4, past=40, heads=6, kv_heads=1, sink=True),
    "prompt-eight": dict(batch=2, seq=8, lens=[8, 5], rotary=16),
    "prompt-nine": dict(batch=2, seq=9, lens=[9, 5], rotary=16),
    "decode-ragged-split": dict(batch=2, seq=1, past=2300, lens=[2301, 140], rotary=8, sm=4),
    "decode-shared": dict(batch=2, seq=1, total=11, capacity=16, lens=[11, 6], rotary=16),
    # past buffers with room for the step's token, as the shared KV cache has (test_gqa_on_host's
    # fused decode runs them with present in past's buffer)
    "decode-shared-split": dict(batch=2, seq=1, total=2601, capacity=2640, lens=[2601, 140], rotary=8, sm=4),
    "decode-shared-sink-split": dict(batch=2, seq=1, total=2201, capacity=2240, lens=[2201, 3], sink=True, sm=8),
    "decode-shared-bias-packed": dict(batch=2, seq=1, total=6, capacity=8, lens=[6, 4], bias=True, packed=True,
                                      rotary=16),
    "decode-shared-position-ids": dict(batch=2, seq=1, total=10, capacity=12, lens=[10, 6], rotary=16,
                                       position_ids=True),
    "decode-shared-mqa-softcap": dict(seq=1, total=21, capacity=24, heads=12, kv_heads=1, attrs=dict(softcap=2.0)),
    "f16-decode-shared": dict(batch=2, seq=1, total=10, capacity=12, lens=[10, 6], rotary=16, dtype=F16),
    "decode-shared-local-window": dict(batch=2, seq=1, total=40, capacity=48, lens=[40, 20], rotary=16,
                                       attrs=dict(local_window_size=6)),
    "decode-growing": dict(batch=2, seq=1, total=17, capacity=16, lens=[17, 12]),
    "decode-window-split": dict(batch=2, seq=1, past=600, lens=[601, 200], sm=4, attrs=dict(local_window_size=150)),
    "decode-sink-split": dict(batch=2, seq=1, past=2200, lens=[2201, 3], sink=True, sm=8),
    "decode-bias-packed": dict(batch=2, seq=1, past=5, lens=[6, 4], bias=True, packed=True, rotary=16),
    "decode-position-ids": dict(batch=2, seq=1, past=9, lens=[10, 6], rotary=16, position_ids=True),
    "decode-mqa-many-heads": dict(seq=1, past=20, heads=12, kv_heads=1, attrs=dict(softcap=2.0)),
    "f16-decode": dict(batch=2, seq=1, past=9, lens=[10, 6], rotary=16, dtype=F16),
    "f16-prompt-packed": dict(seq=6, packed=True, rotary=16, dtype=F16, attrs=dict(rotary_interleaved=1)),
    # bf16 decoders (the model builder's -p bf16 and int4 with use_cuda_bf16)
    "bf16-prompt-padded-rotary": dict(batch=2, seq=5, lens=[5, 3], rotary=16, dtype=BF16),
    "bf16-decode": dict(batch=2, seq=1, past=9, lens=[10, 6], rotary=16, dtype=BF16),
    "bf16-decode-split": dict(batch=2, seq=1, past=2300, lens=[2301, 140], rotary=8, sm=4, dtype=BF16),
    "bf16-decode-shared": dict(batch=2, seq=1, total=10, capacity=12, lens=[10, 6], rotary=16, dtype=BF16),
}


def case_setup(name, dtype=None, cases=None):
    """(cases or CASES)[name] made concrete (in `dtype` where given): (inputs, output shapes, attributes,
    sm_count, dtype, spec, rng)."""
    spec = dict((CASES if cases is None else cases)[name])
    if dtype is not None:
        spec["dtype"] = dtype
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    attrs = dict(num_heads=spec.get("heads", 4), kv_num_heads=spec.get("kv_heads", 2), **spec.pop("attrs", {}))
    sm = spec.pop("sm", 132)
    if spec.get("rotary"):
        attrs["do_rotary"] = 1
    dtype = spec.get("dtype", F32)
    ins, shapes = gqa_case(rng, **spec)
    return ins, shapes, attrs, sm, dtype, spec, rng


@pytest.mark.parametrize("name", list(CASES))
def test_gqa_launches_compute_the_reference(name):
    ins, shapes, attrs, sm, dtype, _, _ = case_setup(name)
    got, want, ops = run_binding(GQA, ins, attrs, shapes, dtype, sm_count=sm)
    assert_gqa_results(name, got, want, ops, dtype)


# f32 to 1e-5, f16 to 2e-3; bf16 to a bf16 ulp of the unit-range values (2^-8) and a little more: the
# kernels and the reference round Q and K after the rotary and the output once, but add in other orders
GQA_TOLERANCE = {"float32": dict(rtol=1e-5, atol=1e-5), "float16": dict(rtol=2e-3, atol=2e-3),
                 "bfloat16": dict(rtol=1e-2, atol=1e-2)}


def assert_gqa_results(name, got, want, ops, dtype):
    """A CASES case's outputs against the reference (GQA_TOLERANCE); a "split" case's decode launch
    really split the keys."""
    if "split" in name:
        assert any(getattr(o, "entry", "").startswith("hipep_gqa_decode") and o.grid[0] > 1 for o in ops)
    t = GQA_TOLERANCE[np.dtype(dtype).name]
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, k
        np.testing.assert_allclose(g.astype(F32), w.astype(F32), err_msg=f"output {k}", **t)


def test_gqa_shared_buffer_decode_launches_are_the_same_every_step(monkeypatch):
    """present is past's buffer: no copy of past, one launch (the rotary and cache append fused
    into the decode kernel), and the launch (grid, parameters) does not depend on seqlens_k or
    total_sequence_length, so consecutive steps bind identically. It overlaps the kernel ahead
    unless gpu_attention.OVERLAP_FUSED_DECODE says no."""
    rng = np.random.default_rng(5)
    attrs = dict(num_heads=4, kv_num_heads=2, do_rotary=1)
    keys = []
    for total, lens in ((11, [11, 6]), (12, [12, 7])):
        ins, shapes = gqa_case(rng, batch=2, seq=1, total=total, capacity=1200, lens=lens, rotary=16)
        got, want, ops = run_binding(GQA, ins, attrs, shapes, F32, in_place=True)
        # 2 x 2 KV heads cover few of 132 multiprocessors: a block per query head (_g1)
        assert [o.entry for o in ops] == ["hipep_gqa_decode_fused_f32_g1"] and ops[0].grid[0] > 1
        assert ops[0].overlaps_previous  # its first past rows requested while the projection ahead finishes
        keys.append([(o.entry, o.grid, o.block, [bytes(p) for p in o.params if isinstance(p, ctypes.Structure)])
                     for o in ops])
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
        for b, n in enumerate(lens):
            np.testing.assert_allclose(got[1][b, :, :n], want[1][b, :, :n], rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(got[2][b, :, :n], want[2][b, :, :n], rtol=1e-6, atol=1e-6)
    assert keys[0] == keys[1]
    from hipep.runtime import gpu_attention

    monkeypatch.setattr(gpu_attention, "OVERLAP_FUSED_DECODE", False)
    _, _, ops = run_binding(GQA, ins, attrs, shapes, F32, in_place=True)
    assert [o.entry for o in ops] == ["hipep_gqa_decode_fused_f32_g1"] and not ops[0].overlaps_previous


@pytest.mark.parametrize("window,capacity,prompt,extra", [
    (4, 6, 3, {}), (4, 6, 9, dict(softcap=50.0)), (3, 3, 5, dict(do_rotary=1)), (2, 6, 4, dict(smooth_softmax=1)),
])
def test_gqa_sliding_window_cache_steps(window, capacity, prompt, extra):
    rng = np.random.default_rng(15)
    attrs = dict(num_heads=4, kv_num_heads=2, local_window_size=window, sliding_window_cache=1, **extra)
    batch, seq, total = 2, prompt, prompt
    past = [rng.uniform(-1, 1, (batch, 2, capacity, 16)).astype(F32) for _ in range(2)]
    for step in range(8):
        ins, _ = gqa_case(rng, batch=batch, seq=seq, total=total, capacity=capacity, lens=[total] * batch,
                          rotary=16 if extra.get("do_rotary") else None)
        ins[3], ins[4] = past
        shapes = [(batch, seq, 64), (batch, 2, capacity, 16), (batch, 2, capacity, 16)]
        got, want, _ = run_binding(GQA, ins, attrs, shapes, F32)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5, err_msg=f"step {step}")
        rows = window_end(total, capacity, window)
        for k in (1, 2):
            np.testing.assert_allclose(got[k][:, :, :rows], want[k][:, :, :rows], rtol=1e-6, atol=1e-6)
        past = [want[1], want[2]]
        seq, total = 1, total + 1


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("form", ["3d", "3d-offset", "3d-partial", "4d-partial"])
def test_ms_rotary_launch_computes_the_reference(form, dtype):
    rng = np.random.default_rng(7)
    ids = rng.integers(0, 24, (2, 5)).astype(np.int64)
    attrs = dict(interleaved=1 if "partial" in form else 0)
    width = 8 if "partial" in form else 16
    ang = rng.uniform(0, 6, (24, width))
    cos, sin = np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)
    x = rng.uniform(-1, 1, (2, 4, 5, 32) if form.startswith("4d") else (2, 5, 128)).astype(dtype)
    pos = np.array([3], np.int64) if form == "3d-offset" else ids
    if "partial" in form:
        attrs.update(num_heads=4, rotary_embedding_dim=16)
    got, want, _ = run_binding("com.microsoft::RotaryEmbedding", [x, pos, cos, sin], attrs, [x.shape], dtype)
    np.testing.assert_allclose(got[0].astype(F32), want[0].astype(F32), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("half", [4, 12, 17])
def test_rotary_launch_repeats_mlas_interleaved_tail(half):
    """f32, interleaved, half the rotary width not a multiple of 8: the launch is bit-exact with the
    reference (and so with the CPU EP), tail pairs included."""
    rng = np.random.default_rng(half)
    ang = rng.uniform(0, 6, (16, half))
    cos, sin = np.cos(ang).astype(F32), np.sin(ang).astype(F32)
    x = rng.uniform(-1, 1, (1, 6, 2 * 2 * half)).astype(F32)
    pos = rng.integers(0, 16, (1, 6)).astype(np.int64)
    got, want, _ = run_binding("com.microsoft::RotaryEmbedding", [x, pos, cos, sin], dict(interleaved=1), [x.shape],
                               F32)
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("form", ["chunked", "interleaved", "4d-text", "partial-interleaved-scale", "one-section"])
def test_mrope_launch_computes_the_reference(form, dtype):
    rng = np.random.default_rng(11)
    b, s, n, h = 2, 5, 4, 32
    attrs = dict(mrope_section=[6, 5, 5], mrope_layout=1 if "interleaved" in form else 0)
    half = h // 2
    if form == "partial-interleaved-scale":
        half = 6
        attrs.update(num_heads=n, rotary_embedding_dim=12, mrope_section=[2, 2, 2], interleaved=1, scale=0.37)
    elif form == "one-section":
        attrs.update(mrope_section=[16, 0, 0], mrope_layout=1)
    elif not form.startswith("4d"):
        attrs["num_heads"] = n
    ang = rng.uniform(0, 6, (24, half))
    cos, sin = np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)
    x = rng.uniform(-1, 1, (b, n, s, h) if form.startswith("4d") else (b, s, n * h)).astype(dtype)
    pos = rng.integers(0, 24, (3, b, s)).astype(np.int64)
    if "text" in form:
        pos[1:] = pos[0]
    got, want, ops = run_binding("com.microsoft::MRotaryEmbedding", [x, pos, cos, sin], attrs, [x.shape], dtype)
    assert [op.entry for op in ops] == [f"hipep_rotary_{'f32' if dtype == F32 else 'f16'}"]
    if dtype == F32:
        np.testing.assert_array_equal(got[0], want[0])
    else:
        np.testing.assert_allclose(got[0].astype(F32), want[0].astype(F32), rtol=1e-3, atol=1e-3)


def test_mrope_binding_names_bad_shapes():
    x, cos = np.zeros((1, 3, 64), F32), np.zeros((8, 8), F32)
    mem = Memory()
    _, full = _attrs("com.microsoft::MRotaryEmbedding", dict(num_heads=4, mrope_section=[4, 2, 2]), 1)
    bind = gk.BINDINGS["com.microsoft::MRotaryEmbedding"].bind
    with pytest.raises(Exception, match=r"position_ids must be \[3, batch, sequence\] = \[3, 1, 3\]"):
        bind([mem.arg(a) for a in (x, np.zeros((1, 3), np.int64), cos, cos)], [mem.arg(x)], full, gk.Target(sm_count=8))
    full["mrope_section"] = [4, 4, 2]
    with pytest.raises(Exception, match=r"mrope_section \[4, 4, 2\] must be 3 non-negative integers summing to"):
        bind([mem.arg(a) for a in (x, np.zeros((3, 1, 3), np.int64), cos, cos)], [mem.arg(x)], full,
             gk.Target(sm_count=8))


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("name", ["prompt", "decode", "decode-ragged-split", "decode-shared"])
def test_gqa_qk_norm_launches_normalize_q_and_k_first(name, dtype):
    """q_norm_weight / k_norm_weight: two RMS norm launches into workspace regions ahead of the
    attention's own (which must not overlap them), then the attention reads the normalized Q and K."""
    ins, shapes, attrs, sm, dtype, spec, rng = case_setup(name, dtype)
    h = spec.get("head", 16)
    norms = [rng.uniform(0.5, 1.5, h).astype(dtype), rng.uniform(0.5, 1.5, h).astype(dtype)]
    got, want, ops = run_binding(GQA, ins + [None, None] + norms, dict(attrs, qk_norm_epsilon=1e-5), shapes, dtype,
                                 sm_count=sm)
    assert [op.entry.startswith("hipep_rms_norm_") for op in ops[:2]] == [True, True]
    assert not any(op.entry.startswith("hipep_rms_norm_") for op in ops[2:] if isinstance(op, gk.KernelOp))
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == F32 else dict(rtol=2e-3, atol=2e-3)
    for k, (g, w) in enumerate(zip(got, want)):
        rows = g.shape[2] if k else None
        np.testing.assert_allclose(g[:, :, :rows].astype(F32) if k else g.astype(F32),
                                   w[:, :, :rows].astype(F32) if k else w.astype(F32), **tol, err_msg=f"output {k}")


def test_gqa_qk_norm_with_packed_qkv_has_no_kernel():
    b = gk.BINDINGS[GQA]
    attrs = dict(num_heads=4, kv_num_heads=2)
    dtypes = ["float32", "", ""] + [""] * 11 + ["float32", "float32"]
    assert "packed QKV" in b.check(attrs, dtypes, [(1, 3, 8 * 16)], [])
    dtypes[1] = dtypes[2] = "float32"
    assert b.check(attrs, dtypes, [(1, 3, 4 * 16), (1, 3, 2 * 16)], []) is None


def test_gqa_check_names_what_it_cannot_do():
    b = gk.BINDINGS[GQA]
    attrs = dict(num_heads=4, kv_num_heads=2)
    assert b.check(attrs, ["float32", "", ""], [(1, 3, 8 * 16)], []) is None
    assert "head size 12" in b.check(attrs, ["float32", "", ""], [(1, 3, 8 * 12)], [])
    why = gk.kernel_reason(GQA, attrs, ["float32", "float32", "float32"], [(1, 3, 4 * 12), (1, 3, 2 * 12)])
    assert why and "head size 12" in why and why.startswith("no kernel for cuda")
    why = gk.kernel_reason(GQA, attrs, ["float32", "float32", "float32"], [(1, 3, 4 * 512)])
    assert why and "head size 512" in why
    assert "element type" in gk.kernel_reason(GQA, attrs, ["float64"], [])
    assert gk.kernel_reason(GQA, attrs, ["bfloat16", "", ""], [(1, 3, 8 * 16)]) is None
    assert gk.kernel_reason(GQA, attrs, ["float16", "", ""], [(2, None, None)]) is None


# ---- NVRTC --------------------------------------------------------------------------------------

@needs_nvrtc
def test_modules_compile_and_hold_every_entry_point_the_bindings_name():
    from hipep.runtime import kernel_cache

    cubins = {m: kernel_cache.compile_cubin(kernel_cache.module_source(m), m, ARCH, DEFINES, use_cache=False)[0]
              for m in ("attention_cache", "attention_decode", "attention_decode_fused", "attention_prefill",
                        "attention_prefill_tc", "rotary")}
    names = set()
    rng = np.random.default_rng(1)
    for dtype in (F32, F16):
        for head in (16, 64, 128, 256):
            for spec in (dict(seq=1, past=300, sm=2), dict(seq=12, past=3), dict(seq=1, past=2, no_past=False)):
                spec = dict(spec)
                sm = spec.pop("sm", 132)
                ins, shapes = gqa_case(rng, head=head, dtype=dtype, rotary=16, **spec)
                mem = Memory()
                _, full = _attrs(GQA, dict(num_heads=4, kv_num_heads=2, do_rotary=1), 3)
                for cores in (False, True):  # with mma.sync: fp16's prefill on tensor cores
                    ops = gk.BINDINGS[GQA].bind([mem.arg(a) for a in ins],
                                                [mem.arg(np.empty(s, dtype)) for s in shapes], full,
                                                gk.Target(sm_count=sm, workspace=mem.alloc, tensor_cores=cores))
                    names |= {(o.module, o.entry) for o in ops if isinstance(o, gk.KernelOp)}
        names.add(("rotary", f"hipep_rotary_{gk._dt(np.dtype(dtype), 'x')}"))
    names |= {("attention_cache", "hipep_gqa_window_store"), ("attention_cache", "hipep_gqa_copy_past")}
    names |= {("attention_decode" if kind == "" else "attention_decode_fused", f"hipep_gqa_decode_{kind}{dt}_g{g}")
              for kind in ("", "fused_")
              for dt in ("f32", "f16") for g in DEC_VARIANTS}
    names |= {("attention_prefill_tc", f"hipep_gqa_prefill_tc_{dt}_h{hb}")
              for dt in ("f16", "bf16") for hb in (64, 128)}
    assert len(names) >= 24 and ("attention_prefill_tc", "hipep_gqa_prefill_tc_f16_h64") in names
    for module, entry in sorted(names):
        assert entry.encode() + b"\0" in cubins[module], f"{module}: {entry}"


# ---- the builder decoders ------------------------------------------------------------------------

def test_builder_decoders_attention_has_gpu_kernels():
    """Every GroupQueryAttention of the cached model-builder decoders (llama; gemma2 with softcap, a
    local window and the sliding-window cache; phi with partial rotary) has a GPU program."""
    import glob
    import importlib
    import os

    onnx = pytest.importorskip("onnx")
    explain = importlib.import_module("hipep.explain")  # the module (hipep.explain is also the function)
    from hipep.graph import GraphView
    from hipep.partition import partition

    folders = [d for name in ("llama-fp32-v2", "gemma2-fp32-v2", "phi-fp32-v2")
               for d in glob.glob(os.path.expanduser(f"~/.cache/hipep/models/{name}"))]
    if not folders:
        pytest.skip("no cached builder decoders (hipep.tools.model_zoo builds them)")
    for folder in folders:
        path = os.path.join(folder, "model.onnx")
        model = explain._load_small_external_tensors(onnx.load(path, load_external_data=False), folder, path)
        graph = GraphView.from_onnx(model)
        assert any(n.op_type == "GroupQueryAttention" for n in graph.nodes)
        report = partition(graph, device="cuda")
        bad = [r.line() for r in report.rejections if r.node.op_type in ("GroupQueryAttention", "RotaryEmbedding")]
        assert not bad, (folder, bad)
