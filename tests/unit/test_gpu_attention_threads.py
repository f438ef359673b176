"""kernels/attention.hip's two attention kernels transcribed thread by thread (numpy over the threads of
one block, phase by phase between barriers; shuffles as reductions over their lane groups), with the
kernels' own index formulas: which thread scores which key, owns which head dims and which keys of
a tile in P @ V, how the shared-memory tiles are laid out (padded rows, 16-byte words), how a
block's query rows and key range are chosen and how the key lanes' sums are added. Run over every
block of the grids the bindings give, they must give the registry reference's outputs.

test_gpu_attention_bindings.py checks the launches' semantics; this file checks that the kernels'
thread mapping computes them."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from hipep.runtime import gpu_kernels as gk
from hipep.runtime.gpu_attention import PREFILL, gqa_bounds

from unit.test_gpu_attention_bindings import (F16, F32, GQA, Memory, _attrs, _cache, _combine, _host, _u64, emulate,
                                         gqa_case)

DEC_THREADS, DEC_TILE, DEC_HEADS, MAX_HEAD = 128, 128, 8, 256


def _finish(acc, m, l, has_sink, sink):
    acc = np.asarray(acc, np.float64)
    if has_sink:
        m2 = max(m, sink)
        f = 0.0 if m == -np.inf else np.exp(m - m2)
        l, acc = l * f + np.exp(sink - m2), acc * f
    return acc / l if l > 0 else acc * 0


def _score(a, dot, bias, b, head, s, j):
    x = np.float32(dot) * np.float32(a.scale)
    if a.softcap > 0:
        x = np.float32(a.softcap) * np.tanh(x / np.float32(a.softcap))
    if bias is not None and j < a.bias_len:
        x = x + bias[b * a.bias_sb + head * a.bias_sh + s * a.bias_ss + j]
    return np.float32(x)


class Kernel:
    """What one attention launch reads: queries, the cache, bias, sinks, output and partials."""

    def __init__(self, mem, a, ptrs, dtype):
        q_p, ck_p, cv_p, sl, tot, bias_p, sink_p, out_p, pacc_p, pml_p = ptrs
        self.a, self.mem, self.dtype = a, mem, np.dtype(dtype)
        self.rows, _ = _host(mem, a, sl, tot)
        self.ck, self.cv = _cache(mem, ck_p, a, a.cache_rows, dtype), _cache(mem, cv_p, a, a.cache_rows, dtype)
        e = self.dtype.itemsize
        self.bias = mem.view(bias_p, dtype, (mem.bytes.size - bias_p) // e).astype(np.float32) if bias_p else None
        self.sinks = mem.view(sink_p, dtype, a.heads).astype(np.float64) if sink_p else np.zeros(a.heads)
        self.q_p, self.out_p, self.pacc_p, self.pml_p = q_p, out_p, pacc_p, pml_p
        flat = a.batch * a.seq * a.heads
        self.out = mem.view(out_p, dtype, flat * a.head_size).reshape(flat, a.head_size)
        if pacc_p:
            self.pacc = mem.view(pacc_p, np.float32, flat * a.splits * a.head_size).reshape(-1, a.head_size)
            self.pml = mem.view(pml_p, np.float32, flat * a.splits * 2).reshape(-1, 2)

    def q(self, b, s, head, d, n):
        a, e = self.a, self.dtype.itemsize
        return self.mem.view(self.q_p + (b * a.q_sb + s * a.q_ss + head * a.q_sh + d) * e, self.dtype, n)


# ---- hipep_gqa_decode ------------------------------------------------------------------------------

def decode_block(k: Kernel, split, by, b):
    a, H = k.a, k.a.head_size
    t = np.arange(DEC_THREADS)
    kvh, rg = by // a.row_groups, by % a.row_groups
    first_row = rg * a.rows_per_block
    gn = min(a.rows_per_block, a.group * a.seq - first_row)
    g = k.rows[b]
    row_s, row_head, row_lo, row_hi = [0] * DEC_HEADS, [0] * DEC_HEADS, [0] * DEC_HEADS, [0] * DEC_HEADS
    for h in range(DEC_HEADS):  # threads t < HIPEP_DEC_HEADS
        r = first_row + min(h, gn - 1)
        row_s[h], row_head[h] = r // a.group, kvh * a.group + r % a.group
        row_lo[h], row_hi[h] = gqa_bounds(a, g, row_s[h])
    lo, hi = 0x7fffffff, 0
    for h in range(gn):
        if row_hi[h] > row_lo[h]:
            lo, hi = min(lo, row_lo[h]), max(hi, row_hi[h])
    if hi == 0:
        lo = 0
    span = max(hi - lo, 0)
    chunk = (span + a.splits - 1) // a.splits
    chunk = (chunk + DEC_TILE - 1) // DEC_TILE * DEC_TILE
    k0, k1 = lo + split * chunk, min(hi, lo + split * chunk + chunk)

    def out_row(h):
        return (b * a.seq + row_s[h]) * a.heads + row_head[h]

    if k0 >= k1 and a.splits > 1:
        for h in range(gn):
            k.pml[out_row(h) * a.splits + split] = (-np.inf, 0.0)
        return
    q_s = np.zeros((DEC_HEADS, MAX_HEAD), np.float32)
    for h in range(gn):
        q_s[h, :H] = k.q(b, row_s[h], row_head[h], 0, H)
    m_s, l_s, al_s = np.full(DEC_HEADS, -np.inf), np.zeros(DEC_HEADS), np.ones(DEC_HEADS)
    slices = H // 8
    key_lanes = DEC_THREADS // slices
    slice_, key_lane = t % slices, t // slices
    pv_active = key_lane < key_lanes
    acc = np.zeros((DEC_THREADS, DEC_HEADS, 8))
    sc = np.full((DEC_HEADS, DEC_TILE), np.nan)
    keys, vals = k.ck[b, kvh].astype(np.float32), k.cv[b, kvh].astype(np.float32)
    for j0 in range(k0, k1, DEC_TILE):
        for tt in t:  # each thread scores key j0 + t against the block's rows
            j = j0 + tt
            for h in range(gn):
                if j < k1 and row_lo[h] <= j < row_hi[h]:
                    dot = np.float32(0)
                    for d in range(0, H, 8):
                        dot = np.float32(dot + np.dot(q_s[h, d:d + 8].astype(np.float64), keys[j, d:d + 8]))
                    sc[h, tt] = _score(a, dot, k.bias, b, row_head[h], row_s[h], j)
                else:
                    sc[h, tt] = -np.inf
        for h in range(gn):  # warp h % warps
            mt = sc[h].max()
            m_new = max(m_s[h], mt)
            dead = m_new == -np.inf
            sc[h] = 0.0 if dead else np.exp(sc[h] - m_new)
            alpha = 1.0 if dead else np.exp(m_s[h] - m_new)
            al_s[h], l_s[h], m_s[h] = alpha, l_s[h] * alpha + sc[h].sum(), m_new
        n_keys = min(DEC_TILE, k1 - j0)
        for tt in t[pv_active]:
            acc[tt] *= al_s[:, None]
            for c in range(key_lane[tt], n_keys, key_lanes):
                v = vals[j0 + c, slice_[tt] * 8:slice_[tt] * 8 + 8]
                for h in range(gn):
                    acc[tt, h] += sc[h, c] * v
    o_s = np.zeros((DEC_HEADS, MAX_HEAD))
    for r in range(key_lanes):  # key lanes added in order
        for tt in t[pv_active & (key_lane == r)]:
            for h in range(gn):
                o_s[h, slice_[tt] * 8:slice_[tt] * 8 + 8] += acc[tt, h]
    for h in range(gn):
        row = out_row(h)
        if a.splits == 1:
            k.out[row] = _finish(o_s[h, :H], m_s[h], l_s[h], a.has_sink, k.sinks[row_head[h]]).astype(k.dtype)
        else:
            k.pacc[row * a.splits + split] = o_s[h, :H]
            k.pml[row * a.splits + split] = (m_s[h], l_s[h])


# ---- hipep_gqa_prefill -----------------------------------------------------------------------------

def prefill_block(k: Kernel, bx, head, b, threads, cpt, hb):
    a, H, S = k.a, k.a.head_size, k.a.seq
    BM, BN, DK, LD = threads // 4, 8 * cpt, hb // 32, hb + 4
    t = np.arange(threads)
    q0, kvh = bx * BM, head // a.group
    g = k.rows[b]
    r0, cl = 2 * (t // 8), t % 8
    q_s = np.full(BM * LD, np.nan, np.float32)
    kv_s = np.full(BN * LD, np.nan, np.float32)
    p_s = np.full((BM, BN + 1), np.nan, np.float32)
    H8 = H // 8
    for i in range(BM * H8):
        r, d = i // H8, (i % H8) * 8
        q_s[r * LD + d:r * LD + d + 8] = k.q(b, q0 + r, head, d, 8) if q0 + r < S else 0
    lo, hi = np.zeros((threads, 2), int), np.zeros((threads, 2), int)
    for tt in t:
        for i in range(2):
            lo[tt, i], hi[tt, i] = gqa_bounds(a, g, q0 + r0[tt] + i)
            if q0 + r0[tt] + i >= S:
                lo[tt, i] = hi[tt, i] = 0
    tile_lo = gqa_bounds(a, g, q0)[0]
    tile_hi = gqa_bounds(a, g, min(q0 + BM, S) - 1)[1]
    m, l = np.full((threads, 2), -np.inf), np.zeros((threads, 2))
    acc = np.zeros((threads, 2, DK, 4))
    keys, vals = k.ck[b, kvh], k.cv[b, kvh]

    def load_tile(cache, j0):
        for i in range(BN * H8):
            c, d = i // H8, (i % H8) * 8
            kv_s[c * LD + d:c * LD + d + 8] = cache[j0 + c, d:d + 8] if j0 + c < tile_hi else 0

    q4, kv4 = q_s.reshape(-1, 4), kv_s.reshape(-1, 4)  # float4 views (LD is a multiple of 4)
    for j0 in range(tile_lo, tile_hi, BN):
        load_tile(keys, j0)
        sc = np.zeros((threads, 2, cpt))
        for d4 in range(H // 4):
            qa, qb = q4[r0 * (LD // 4) + d4].astype(np.float64), q4[(r0 + 1) * (LD // 4) + d4].astype(np.float64)
            for c in range(cpt):
                kv = kv4[(cl + 8 * c) * (LD // 4) + d4]
                sc[:, 0, c] += (qa * kv).sum(axis=1)
                sc[:, 1, c] += (qb * kv).sum(axis=1)
        for i in range(2):
            for tt in t:
                s = q0 + r0[tt] + i
                for c in range(cpt):
                    j = j0 + cl[tt] + 8 * c
                    sc[tt, i, c] = _score(a, sc[tt, i, c], k.bias, b, head, s, j) if lo[tt, i] <= j < hi[tt, i] \
                        else -np.inf
            mt = sc[:, i].max(axis=1).reshape(-1, 8).max(axis=1).repeat(8)  # xor 1, 2, 4: groups of 8 lanes
            m_new = np.maximum(m[:, i], mt)
            dead = m_new == -np.inf
            with np.errstate(invalid="ignore"):
                p = np.where(dead[:, None], 0.0, np.exp(sc[:, i] - m_new[:, None]))
                alpha = np.where(dead, 1.0, np.exp(m[:, i] - m_new))
            for c in range(cpt):
                p_s[r0 + i, cl + 8 * c] = p[:, c]
            total = p.sum(axis=1).reshape(-1, 8).sum(axis=1).repeat(8)
            l[:, i] = l[:, i] * alpha + total
            m[:, i] = m_new
            acc[:, i] *= alpha[:, None, None]
        load_tile(vals, j0)
        for c in range(min(BN, tile_hi - j0)):
            pa, pb = p_s[r0, c].astype(np.float64), p_s[r0 + 1, c].astype(np.float64)
            for kk in range(DK):
                on = 4 * cl + 32 * kk < H
                vv = kv4[c * (LD // 4) + cl + 8 * kk]
                acc[on, 0, kk] += pa[on, None] * vv[on]
                acc[on, 1, kk] += pb[on, None] * vv[on]
    for tt in t:
        for i in range(2):
            s = q0 + r0[tt] + i
            if s >= S:
                continue
            row = (b * S + s) * a.heads + head
            for kk in range(DK):
                d = 4 * cl[tt] + 32 * kk
                if d < H:
                    k.out[row, d:d + 4] = _finish(acc[tt, i, kk], m[tt, i], l[tt, i], a.has_sink,
                                                  k.sinks[head]).astype(k.dtype)


def emulate_threads(mem, ops, dtype):
    """The launches with the attention kernels run block by block, thread by thread."""
    for op in ops:
        name = getattr(op, "entry", "")
        if name.startswith("hipep_gqa_decode"):
            k = Kernel(mem, op.params[10], [_u64(x) for x in op.params[:10]], dtype)
            gx, gy, gz = op.grid
            assert op.block == (DEC_THREADS, 1, 1)
            for b in range(gz):
                for by in range(gy):
                    for split in range(gx):
                        decode_block(k, split, by, b)
        elif name.startswith("hipep_gqa_prefill"):
            k = Kernel(mem, op.params[8], [_u64(x) for x in op.params[:8]] + [0, 0], dtype)
            bucket = int(name.rsplit("_h", 1)[1])
            threads, cpt = PREFILL[bucket]
            assert op.block == (threads, 1, 1) and op.grid[0] * threads // 4 >= k.a.seq
            for b in range(op.grid[2]):
                for head in range(op.grid[1]):
                    for bx in range(op.grid[0]):
                        prefill_block(k, bx, head, b, threads, cpt, bucket)
        elif name.startswith("hipep_gqa_combine"):
            assert op.grid == (op.params[4].heads, op.params[4].batch * op.params[4].seq, 1)
            _combine(mem, [_u64(x) for x in op.params[:4]], op.params[4], dtype)
        else:
            emulate(mem, [op], dtype)


CASES = {
    "decode-split-h16": dict(batch=2, seq=1, past=300, lens=[301, 129], head=16, rotary=16, sm=8),
    "decode-h80-window-sink": dict(batch=2, seq=1, past=140, lens=[141, 20], head=80, sink=True, sm=8,
                                   attrs=dict(local_window_size=70)),
    "decode-many-heads": dict(seq=1, past=30, heads=12, kv_heads=1, head=32, attrs=dict(softcap=2.0)),
    "few-tokens-split": dict(seq=3, past=200, head=32, rotary=16, sm=8, bias=True),
    "prefill-h64-padded": dict(batch=2, seq=11, lens=[11, 6], head=64, rotary=16),
    "prefill-h80-window": dict(seq=36, head=80, attrs=dict(local_window_size=9)),
    "prefill-h256-past": dict(seq=10, past=21, head=256, sink=True, dtype=F16),
    "prefill-h16-smooth-f16": dict(seq=9, past=3, head=16, dtype=F16, attrs=dict(smooth_softmax=1)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_attention_kernels_thread_by_thread(name):
    spec = dict(CASES[name])
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    attrs = dict(num_heads=spec.get("heads", 4), kv_num_heads=spec.get("kv_heads", 2), **spec.pop("attrs", {}))
    sm = spec.pop("sm", 132)
    if spec.get("rotary"):
        attrs["do_rotary"] = 1
    dtype = spec.get("dtype", F32)
    ins, shapes = gqa_case(rng, **spec)
    op, full = _attrs(GQA, attrs, 3)
    want = op.reference([None if x is None else x.copy() for x in ins], dict(full))
    mem = Memory()
    outs = [mem.arg(np.empty(s, dtype), poison=True) for s in shapes]
    ops = gk.BINDINGS[GQA].bind([mem.arg(x) for x in ins], outs, full,
                                gk.Target(sm_count=sm, workspace=mem.alloc))
    emulate_threads(mem, ops, dtype)
    t = dict(rtol=1e-5, atol=1e-5) if dtype == F32 else dict(rtol=2e-3, atol=2e-3)
    for j, (o, w) in enumerate(zip(outs, want)):
        np.testing.assert_allclose(mem.get(o).astype(F32), w.astype(F32), err_msg=f"output {j}", **t)
