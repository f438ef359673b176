"""kernels/attention_decode.h's (attention_decode.hip, attention_decode_fused.hip) and
attention_prefill.hip's kernels transcribed thread by thread
(numpy over the threads of one block, phase by phase between barriers; shuffles as reductions over
their lane groups), with the kernels' own index formulas: which thread scores which key, owns which
head dims and which keys of a tile in P @ V, how the shared-memory tiles are laid out (padded rows,
16-byte words), how a block's query rows and key range are chosen and how the key lanes' sums are
added. Run over every block of the grids the bindings give, they must give the registry reference's
outputs.

test_gpu_attention_bindings.py checks the launches' semantics; this file checks that the kernels'
thread mapping computes them."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from hipep.runtime import gpu_kernels as gk
from hipep.runtime.gpu_attention import (DEC_DIRECT_PASSES, PREFILL, dec_keys_per_lane, dec_lanes, dec_threads,
                                         gqa_bounds)

from unit.test_gpu_attention_bindings import (F16, F32, GQA, Memory, _attrs, _cache, _host, _prepare, _u64, emulate,
                                              fused_parts, gqa_case)



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
        q_p, ck_p, cv_p, sl, tot, bias_p, sink_p, out_p, pacc_p, pml_p, self.cnt_p = ptrs
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

def _xor(v, m, lanes):
    """HIPEP_SHFL_XOR over the last axis (the warp's lanes): each lane gets lane ^ m's value."""
    return v[..., lanes ^ m]


def decode_block(k: Kernel, split, by, b, G, W=32):
    a, H = k.a, k.a.head_size
    NW, KPL = dec_threads(G) // W, dec_keys_per_lane(k.dtype.itemsize, G)
    kvh, rg = by // a.row_groups, by % a.row_groups
    first_row = rg * a.rows_per_block
    gn = min(a.rows_per_block, a.group * a.seq - first_row)
    assert 1 <= gn <= G
    g = k.rows[b]
    row_s, row_head, row_lo, row_hi = [0] * G, [0] * G, [0] * G, [0] * G
    for h in range(G):  # threads t < G
        r = first_row + min(h, gn - 1)
        row_s[h], row_head[h] = r // a.group, kvh * a.group + r % a.group
        row_lo[h], row_hi[h] = gqa_bounds(a, g, row_s[h])
        if h >= gn:
            row_hi[h] = row_lo[h]
    lo, hi = 0x7fffffff, 0
    for h in range(G):
        if row_hi[h] > row_lo[h]:
            lo, hi = min(lo, row_lo[h]), max(hi, row_hi[h])
    if hi == 0:
        lo = 0
    span = max(hi - lo, 0)

    def out_row(h):
        return (b * a.seq + row_s[h]) * a.heads + row_head[h]

    direct = a.splits == 1 or (span + a.key_tile - 1) // a.key_tile <= DEC_DIRECT_PASSES
    if direct:  # the first split block alone writes the output; the others return, nothing is merged
        if split != 0:
            return None
        k0, k1 = lo, hi
    else:
        chunk = (span + a.splits - 1) // a.splits
        chunk = (chunk + a.key_tile - 1) // a.key_tile * a.key_tile
        k0, k1 = lo + split * chunk, min(hi, lo + split * chunk + chunk)
        if k0 >= k1:
            for h in range(gn):
                k.pml[out_row(h) * a.splits + split] = (-np.inf, 0.0)
            return gn, row_s, row_head
    P = dec_lanes(H)
    KW, lanes = W // P, np.arange(W)
    slice_, kl = lanes % P, lanes // P
    lane_on = slice_ * 8 < H
    WT = KPL * KW
    assert NW * WT == a.key_tile
    q_s = np.zeros((G, 8 * P), np.float32)  # zeros past H: the idle lanes' dims
    for h in range(gn):
        q_s[h, :H] = k.q(b, row_s[h], row_head[h], 0, H)
    q_lane = q_s[:, slice_[:, None] * 8 + np.arange(8)]  # (G, W, 8): each lane's dims
    keys, vals = k.ck[b, kvh].astype(np.float32), k.cv[b, kvh].astype(np.float32)
    m_w, l_w = np.full((NW, G), -np.inf, np.float32), np.zeros((NW, G), np.float32)
    o_s = np.full((NW, G, 8 * P), np.nan, np.float32)
    for warp in range(NW):
        m_run, l_run = np.full(G, -np.inf, np.float32), np.zeros(G, np.float32)
        acc = np.zeros((G, 8, W), np.float32)
        j0 = k0 + warp * WT
        while j0 < k1:  # uniform over the warp
            j = j0 + np.arange(KPL)[:, None] * KW + kl[None, :]  # (KPL, W): each lane's keys
            kf, vf = np.zeros((KPL, W, 8), np.float32), np.zeros((KPL, W, 8), np.float32)
            for i, lane in zip(*np.nonzero(lane_on[None, :] & (j < k1))):
                kf[i, lane] = keys[j[i, lane], slice_[lane] * 8:slice_[lane] * 8 + 8]
                vf[i, lane] = vals[j[i, lane], slice_[lane] * 8:slice_[lane] * 8 + 8]
            s = np.einsum("iwe,gwe->igw", kf.astype(np.float64), q_lane.astype(np.float64)).astype(np.float32)
            m = 1
            while m < P:  # the key's P lanes
                s = s + _xor(s, m, lanes)
                m <<= 1
            for h in range(G):
                sc = np.full((KPL, W), -np.inf, np.float32)
                for i in range(KPL):
                    for lane in range(W):
                        jj = int(j[i, lane])
                        if jj < k1 and row_lo[h] <= jj < row_hi[h]:
                            sc[i, lane] = _score(a, s[i, h, lane], k.bias, b, row_head[h], row_s[h], jj)
                mt = sc.max(axis=0)
                m = P
                while m < W:  # over the warp's keys
                    mt = np.maximum(mt, _xor(mt, m, lanes))
                    m <<= 1
                assert (mt == mt[0]).all()
                m_new = max(m_run[h], mt[0])
                dead = m_new == -np.inf
                with np.errstate(invalid="ignore"):
                    p = np.zeros_like(sc) if dead else np.exp(sc - m_new).astype(np.float32)
                tot = p.sum(axis=0, dtype=np.float32)
                m = P
                while m < W:
                    tot = tot + _xor(tot, m, lanes)
                    m <<= 1
                alpha = np.float32(1.0 if dead else np.exp(m_run[h] - m_new))
                l_run[h], m_run[h] = l_run[h] * alpha + tot[0], m_new
                acc[h] *= alpha
                s[:, h] = p
            acc += np.einsum("igw,iwe->gew", s.astype(np.float64), vf.astype(np.float64)).astype(np.float32)
            j0 += NW * WT
        m = P
        while m < W:  # the KW keys of an instruction
            acc = acc + _xor(acc, m, lanes)
            m <<= 1
        for lane in np.nonzero((kl == 0) & lane_on)[0]:
            o_s[warp, :, slice_[lane] * 8:slice_[lane] * 8 + 8] = acc[:, :, lane]
        m_w[warp], l_w[warp] = m_run, l_run
    for h in range(gn):  # the warps merged in order
        m = m_w[:, h].max()
        o, l = np.zeros(H, np.float64), 0.0
        for w in range(NW):
            if m_w[w, h] != -np.inf:
                f = np.exp(np.float64(m_w[w, h]) - m)
                o, l = o + o_s[w, h, :H] * f, l + l_w[w, h] * f
        row = out_row(h)
        if direct:
            k.out[row] = _finish(o, m, l, a.has_sink, k.sinks[row_head[h]]).astype(k.dtype)
        else:
            k.pacc[row * a.splits + split] = o
            k.pml[row * a.splits + split] = (m, l)
    return None if direct else (gn, row_s, row_head)


def merge_block(k: Kernel, b, gn, row_s, row_head, W=32, G=1):
    """hipep_gqa_merge_splits: the last split block of a (batch, KV head, row group) merges its rows'
    partials; one warp per row weighs the splits, threads take 4-dim columns (and parts of the splits)."""
    a, H, n = k.a, k.a.head_size, k.a.splits
    lanes = np.arange(W)
    w_s, m_r, l_r = np.zeros((gn, n)), np.zeros(gn), np.zeros(gn)
    for h in range(gn):
        p0 = ((b * a.seq + row_s[h]) * a.heads + row_head[h]) * n
        ms = k.pml[p0:p0 + n, 0]
        m = np.full(W, -np.inf, np.float32)
        for i in range(n):
            m[i % W] = max(m[i % W], ms[i])
        s = W // 2
        while s:
            m = np.maximum(m, _xor(m, s, lanes))
            s //= 2
        m_r[h] = m[0]
        w_s[h] = [0.0 if mi == -np.inf else np.exp(np.float64(mi) - m[0]) for mi in ms]
        l_r[h] = float((k.pml[p0:p0 + n, 1] * w_s[h]).sum())
    H4 = H // 4
    cols = gn * H4
    threads = dec_threads(G)
    parts = threads // cols if threads >= 2 * cols else 1
    for c in range(cols):
        h, d = c // H4, (c % H4) * 4
        p0 = ((b * a.seq + row_s[h]) * a.heads + row_head[h]) * n
        o = np.zeros(4)
        for part in range(parts):  # parts added in order
            for i in range(part, n, parts):
                if w_s[h, i] != 0:  # a split that saw no key left its partial output unwritten
                    o = o + k.pacc[p0 + i, d:d + 4] * w_s[h, i]
        row = (b * a.seq + row_s[h]) * a.heads + row_head[h]
        sk = k.sinks[row_head[h]]
        k.out[row, d:d + 4] = _finish(o, m_r[h], l_r[h], a.has_sink, sk).astype(k.dtype)


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


def emulate_threads(mem, ops, dtype, warp=32):
    """The launches with the attention kernels run block by block, thread by thread (warps of `warp`
    lanes: 32 on NVIDIA, 64 on CDNA; the split blocks of a KV head in a random order)."""
    order = np.random.default_rng(len(ops))
    for op in ops:
        name = getattr(op, "entry", "")
        if name.startswith("hipep_gqa_decode"):
            if name.startswith("hipep_gqa_decode_fused"):  # the prepare part as its own launch's emulation
                prepare, decode, a = fused_parts(mem, op.params, dtype)
                _prepare(mem, prepare, a, dtype, length_fault=op.params[17], position_fault=op.params[18])
                k = Kernel(mem, a, decode, dtype)
            else:
                k = Kernel(mem, op.params[11], [_u64(x) for x in op.params[:11]], dtype)
            gx, gy, gz = op.grid
            variant = int(name.rsplit("_g", 1)[1])
            assert op.block == (dec_threads(variant), 1, 1) and k.a.rows_per_block <= variant and gx == k.a.splits
            counters = mem.view(k.cnt_p, np.uint32, gy * gz) if gx > 1 else None
            for b in range(gz):
                for by in range(gy):
                    for split in order.permutation(gx):  # blocks finish in any order
                        rows = decode_block(k, split, by, b, variant, warp)
                        if rows is not None and counters is not None:  # the last to arrive merges the splits
                            counters[b * gy + by] += 1
                            if counters[b * gy + by] == gx:
                                counters[b * gy + by] = 0  # the last block zeroes it for the next launch
                                merge_block(k, b, *rows, W=warp, G=variant)
        elif name.startswith("hipep_gqa_prefill"):
            k = Kernel(mem, op.params[8], [_u64(x) for x in op.params[:8]] + [0, 0, 0], dtype)
            bucket = int(name.rsplit("_h", 1)[1])
            threads, cpt = PREFILL[bucket]
            assert op.block == (threads, 1, 1) and op.grid[0] * threads // 4 >= k.a.seq
            for b in range(op.grid[2]):
                for head in range(op.grid[1]):
                    for bx in range(op.grid[0]):
                        prefill_block(k, bx, head, b, threads, cpt, bucket)
        else:
            emulate(mem, [op], dtype)


CASES = {
    "decode-split-h16": dict(batch=2, seq=1, past=300, lens=[301, 129], head=16, rotary=16, sm=8),
    "decode-h80-window-sink": dict(batch=2, seq=1, past=140, lens=[141, 20], head=80, sink=True, sm=8,
                                   attrs=dict(local_window_size=70)),
    "decode-many-heads": dict(seq=1, past=30, heads=12, kv_heads=1, head=32, attrs=dict(softcap=2.0)),
    "few-tokens-split": dict(seq=3, past=200, head=32, rotary=16, sm=8, bias=True),
    # spans past DEC_DIRECT_PASSES key tiles: split and merged (the cases above take one block)
    "decode-split-merged-h16": dict(batch=2, seq=1, past=2300, lens=[2301, 40], head=16, rotary=16, sm=8),
    "few-tokens-split-merged": dict(seq=3, past=1200, head=32, rotary=16, sm=8, bias=True),
    # the benchmark's shape (group 4, head 64, f16: 8 keys per lane in flight), a few splits dead
    "decode-f16-g4-split": dict(batch=2, seq=1, past=700, lens=[701, 150], heads=8, kv_heads=2, head=64,
                                rotary=16, dtype=F16, sm=8),
    "decode-f16-g8-softcap": dict(seq=1, past=260, heads=16, kv_heads=2, head=64, dtype=F16, sm=4,
                                  attrs=dict(softcap=3.0)),
    "decode-f32-g8-h128-sink": dict(seq=1, past=150, heads=8, kv_heads=1, head=128, sink=True, sm=2),
    "decode-h40-warp64": dict(batch=2, seq=1, past=200, lens=[201, 70], head=40, warp=64, sm=4),
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
    sm, warp = spec.pop("sm", 132), spec.pop("warp", 32)
    if spec.get("rotary"):
        attrs["do_rotary"] = 1
    dtype = spec.get("dtype", F32)
    ins, shapes = gqa_case(rng, **spec)
    op, full = _attrs(GQA, attrs, 3)
    want = op.reference([None if x is None else x.copy() for x in ins], dict(full))
    mem = Memory()
    outs = [mem.arg(np.empty(s, dtype), poison=True) for s in shapes]

    def workspace(nbytes):  # poisoned: a partial the kernels leave unwritten must not be read
        p = mem.alloc(nbytes)
        mem.view(p, np.float32, nbytes // 4)[:] = np.nan
        return p

    def counters(nbytes):  # Target.counters: zero when handed out
        p = mem.alloc(nbytes)
        mem.bytes[p:p + nbytes] = 0
        return p

    ops = gk.BINDINGS[GQA].bind([mem.arg(x) for x in ins], outs, full,
                                gk.Target(sm_count=sm, warp_size=warp, workspace=workspace, counters=counters))
    if "merged" in name:  # the longest row's keys are past what one block takes: split and merged
        dec = next(o for o in ops if getattr(o, "entry", "").startswith("hipep_gqa_decode"))
        a = dec.params[16] if "fused" in dec.entry else dec.params[11]
        assert dec.grid[0] > 1 and -(-(spec["past"] + spec.get("seq", 1)) // a.key_tile) > DEC_DIRECT_PASSES
    emulate_threads(mem, ops, dtype, warp)
    t = dict(rtol=1e-5, atol=1e-5) if dtype == F32 else dict(rtol=2e-3, atol=2e-3)
    for j, (o, w) in enumerate(zip(outs, want)):
        np.testing.assert_allclose(mem.get(o).astype(F32), w.astype(F32), err_msg=f"output {j}", **t)
