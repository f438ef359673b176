"""The quantized ops' GPU kernels (MatMulNBits and GatherBlockQuantized, hipep.runtime.gpu_quant)
emulated in numpy from the launches their bindings give: every address the kernel computes (rows of
B, 16- or 8-byte chunk loads, scales and packed zero points per half chunk, the shared-memory tile
of A, the GEMM's tiles and output mapping) is followed as the .hip source does, and the result
compared with hipep's numpy dequantization and a plain float matmul, or at accuracy_level 4 (A
quantized to int8 per block: the lane groups of the GEMV's staging, the GEMM's per-block scales in
the workspace) with the registry reference, which follows ORT's CPU EP. Also the launch choices
(rows, tiles, K split, the wide GEMV), their knobs, and which quantized nodes have a GPU program."""
from __future__ import annotations

import dataclasses
import re

import ml_dtypes
import numpy as np
import pytest

from hipep.errors import HipepError
from hipep.runtime import gpu_kernels as gk
from hipep.runtime import gpu_quant as gq

from unit.kernel_emulation import SRC, TARGET, Memory, arg, out_arg

_QT = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
_QBASE, _QOUT = 0x10000000, 0x70000000  # fake addresses of the operands (1 << 28 apart) and the output
_QWS = 0x7C000000  # the stream's workspace
_QTARGET = dataclasses.replace(TARGET, workspace=lambda nbytes: _QWS)


class _Bytes:
    """Reads of the emulated device memory by address, checked against the buffer they fall in."""

    def __init__(self, mem: Memory):
        self.mem = mem

    def raw(self, addr: int, nbytes: int, align: int = 1) -> np.ndarray:
        assert addr % align == 0, f"address {addr:#x} not {align}-byte aligned"
        for base, buf in self.mem.buffers.items():
            if base <= addr < base + max(buf.nbytes, 1):
                assert addr + nbytes <= base + buf.nbytes, f"read of {nbytes} bytes at {addr:#x} runs past its buffer"
                return buf[addr - base:addr - base + nbytes]
        raise AssertionError(f"address {addr:#x} is in no buffer")

    def elem(self, base: int, index: int, dtype) -> float:
        e = np.dtype(dtype).itemsize
        return float(self.raw(base + index * e, e, e).view(dtype)[0])

    def put(self, base: int, index: int, dtype, value: float) -> None:
        e = np.dtype(dtype).itemsize
        self.raw(base + index * e, e, e)[:] = np.array([value], dtype).view(np.uint8)


def _words_values(raw: np.ndarray, bits: int) -> np.ndarray:
    """The kernel's decoding of little-endian 32-bit words of B: for 4 bits, the low nibbles of
    the bytes (lo) and the high ones (hi) interleave as lo.b0, hi.b0, lo.b1, ..."""
    words = raw.view(np.uint32)
    out = []
    for w in words:
        w = int(w)
        if bits == 4:
            lo, hi = w & 0x0F0F0F0F, (w >> 4) & 0x0F0F0F0F
            for b in range(4):
                out += [(lo >> (8 * b)) & 0xFF, (hi >> (8 * b)) & 0xFF]
        else:
            out += [(w >> (8 * b)) & 0xFF for b in range(4)]
    return np.array(out, np.float64)


def _mnb_zero_point(rd: _Bytes, zp_ptr, n, blk, a, bits, dtype) -> float:
    if a.zp_mode == 0:
        return float(1 << (bits - 1))
    if a.zp_mode == 2:
        return rd.elem(zp_ptr, n * a.nb + blk, dtype)
    byte = int(rd.raw(zp_ptr + n * a.zp_row + (blk if bits == 8 else blk >> 1), 1)[0])
    return float(byte if bits == 8 else (byte >> ((blk & 1) * 4)) & 0xF)


def _emulate_mnb(mem: Memory, op: gk.KernelOp) -> None:
    rd = _Bytes(mem)
    q = re.fullmatch(r"hipep_mnb_a_int8_(f32|f16|bf16)", op.entry)
    if q:
        _emulate_mnb_a_int8(rd, op, _QT[q.group(1)])
        return
    # hipep_mnb_gemv_row1_h2_*: the same sums in the same order over a row staged whole
    # hipep_mnb_gemv_row1_h2_*_s2: two warps a column, U chunks a lane each
    # hipep_mnb_gemv_row1_h2_*_c{C}_s{S}: C columns a warp, S warps a column, U chunks a lane each
    r = re.fullmatch(r"hipep_mnb_gemv_row1?_(q8|h2)_(f32|f16|bf16)_b4(?:_w3|_u([124])(?:_c([1248])_s([124])|(_s2))?"
                     r"(?:_zp)?)?", op.entry)
    if r:
        assert len(op.params) == 7 and (r.group(1) == "q8") == bool(op.params[6].int8_a)
        cols, split = (int(r.group(4)), int(r.group(5))) if r.group(4) else (1, 2 if r.group(6) else 1)
        _emulate_mnb_gemv_row(rd, op, op.params[6], r.group(1) == "q8", _QT[r.group(2)],
                              *[v.value for v in op.params[:6]], split_u=int(r.group(3)) if split > 1 else 0,
                              cols=cols, split=split)
        return
    m = re.fullmatch(r"hipep_mnb_(gemv|gemm)_(f32|f16|bf16)_b([48])(?:_m([1248])(?:_c4)?)?", op.entry)
    assert m, op.entry
    kind, dt, bits = m.group(1), _QT[m.group(2)], int(m.group(3))
    A, B, S, Z, bias, Y = [v.value for v in op.params[:6]]
    a = op.params[6]
    if kind == "gemv":
        assert len(op.params) == 7
        _emulate_mnb_gemv(rd, op, a, int(m.group(4)), bits, dt, A, B, S, Z, bias, Y)
    else:
        assert len(op.params) == 8 and (op.params[7].value != 0) == bool(a.int8_a)
        _emulate_mnb_gemm(rd, op, a, bits, dt, A, B, S, Z, bias, Y, op.params[7].value)


def _int8_params(amax: np.float32) -> tuple[np.float32, np.float32]:
    """hipep_mnb_int8_params: (amax / 127, 127 / amax or 0), IEEE f32 divisions."""
    amax = np.float32(amax)
    return np.float32(amax / np.float32(127)), np.float32(np.float32(127) / amax) if amax != 0 else np.float32(0)


def _int8_value(v, scale, inv) -> np.float32:
    """hipep_mnb_int8_value: rint(v * inv) * scale in f32."""
    return np.float32(np.rint(np.float32(np.float32(v) * inv)) * scale)


def _emulate_mnb_a_int8(rd, op, dt):
    """hipep_mnb_a_int8_*: a group of min(block_size, warp) lanes per (row, block), lane l on
    values l, l + lanes, ...; (scale, inverse) as two floats at qp[g]."""
    A, qp, a = op.params[0].value, op.params[1].value, op.params[2]
    bs = 1 << a.log2_bs
    lanes = min(bs, 32)
    per_block = op.block[0] // lanes
    assert op.block == (gq.GEMM_THREADS, 1, 1) and op.grid[0] * per_block >= a.m * a.nb
    for g in range(op.grid[0] * per_block):
        m, k0 = g // a.nb, (g % a.nb) * bs
        if m >= a.m:
            continue
        vals = [abs(np.float32(rd.elem(A, m * a.k + k0 + j, dt))) for lane in range(lanes)
                for j in range(lane, bs, lanes) if k0 + j < a.k]
        scale, inv = _int8_params(max(vals, default=np.float32(0)))
        rd.put(qp, 2 * g, np.float32, scale)
        rd.put(qp, 2 * g + 1, np.float32, inv)


def _stage_a_int8(rd, smem, a, m_t, kt, fill, tcm, stride, vpl, dt, A, e):
    """hipep_mnb_stage_a_int8: groups of min(block_size / 4, warp) lanes, each group one block of
    one row of the tile, 4 values a lane per load, a' = rint(a * inv) * scale written in place."""
    bs = 1 << a.log2_bs
    assert fill % bs == 0, "the tile does not hold whole blocks"
    lanes = min(bs // 4, 32)
    loads = bs // 4 // lanes
    assert loads <= (256 // 4 + 31) // 32
    per_row = fill // bs
    for g in range(m_t * per_row):
        mm, blk = divmod(g, per_row)
        js = [blk * bs + (lane + r * lanes) * 4 for r in range(loads) for lane in range(lanes)]
        assert sorted(j + t for j in js for t in range(4)) == list(range(blk * bs, (blk + 1) * bs))
        vals = {}
        for j in js:
            k = kt + j
            if mm < a.m and k < a.k and a.a_vec:
                rd.raw(A + (mm * a.k + k) * e, 4 * e, 4 * e)  # one aligned 4-element load
                assert k + 3 < a.k
            for t in range(4):
                ok = mm < a.m and k + t < a.k
                vals[j + t] = np.float32(rd.elem(A, mm * a.k + k + t, dt)) if ok else np.float32(0)
        scale, inv = _int8_params(max(abs(v) for v in vals.values()))
        for j, v in vals.items():
            smem[mm * tcm * stride + (j // vpl) * stride + j % vpl] = _int8_value(v, scale, inv)


def _emulate_mnb_gemv(rd, op, a, m_t, bits, dt, A, B, S, Z, bias, Y):
    vpl, stride = 128 // bits, 128 // bits + gq.GEMV_PAD
    vph = vpl // 2
    warps = op.block[0] // 32
    assert op.block == (gq.GEMV_WARPS * 32, 1, 1) and a.m <= m_t and a.k_split in (1, 2, 4, 8)
    tcm = a.k_tile // vpl
    assert a.k_tile % vpl == 0 and op.smem == m_t * tcm * stride * 4 <= 48 * 1024
    groups = warps // a.k_split
    cols = gq.GEMV_COLS_WIDE if op.entry.endswith("_c4") else gq.GEMV_COLS  # the wide one-row variant
    assert cols == gq.GEMV_COLS or m_t == 1
    assert op.grid[0] * groups * cols >= a.n
    e = np.dtype(dt).itemsize
    for bx in range(op.grid[0]):
        acc = np.zeros((warps, 32, m_t, cols))
        for kt in range(0, a.k_pad, a.k_tile):
            tile_chunks = -(-min(a.k_pad - kt, a.k_tile) // vpl)
            smem = np.full(m_t * tcm * stride, np.nan)  # unwritten shared memory reads as NaN
            if a.int8_a:
                _stage_a_int8(rd, smem, a, m_t, kt, tile_chunks * vpl, tcm, stride, vpl, dt, A, e)
            for mm in range(m_t if not a.int8_a else 0):
                for j in range(tile_chunks * vpl):
                    k = kt + j
                    if a.a_vec and j % 4 == 0 and mm < a.m and k < a.k:
                        rd.raw(A + (mm * a.k + k) * e, 4 * e, 4 * e)  # one aligned 4-element load
                        assert k + 3 < a.k
                    v = rd.elem(A, mm * a.k + k, dt) if mm < a.m and k < a.k else 0.0
                    smem[mm * tcm * stride + (j // vpl) * stride + j % vpl] = v
            for warp in range(warps):
                group, split = warp % groups, warp // groups
                col0 = (bx * groups + group) * cols
                for lane in range(32):
                    for ch in range(split * 32 + lane, tile_chunks, 32 * a.k_split):
                        kv = kt + ch * vpl
                        for c in range(cols):
                            n = col0 + c
                            q = np.zeros(16, np.uint8)
                            if n < a.n:
                                row = B + n * a.row_bytes + kv * bits // 8
                                if a.aligned16:
                                    q = rd.raw(row, 16, 16)
                                else:
                                    q = np.concatenate([rd.raw(row, 8, 8), rd.raw(row + 8, 8, 8) if kv + vph < a.k_pad
                                                        else np.zeros(8, np.uint8)])
                            for h in range(2):
                                kh = kv + h * vph
                                if kh >= a.k_pad:
                                    break
                                blk = kh >> a.log2_bs
                                assert (kh + vph - 1) >> a.log2_bs == blk, "a half chunk spans two blocks"
                                nn = min(n, a.n - 1)
                                s = rd.elem(S, nn * a.nb + blk, dt)
                                z = _mnb_zero_point(rd, Z, nn, blk, a, bits, dt)
                                dq = _words_values(q[8 * h:8 * h + 8], bits) - z
                                for mm in range(m_t):
                                    at = mm * tcm * stride + ch * stride + h * vph
                                    p = float(np.dot(smem[at:at + vph], dq))
                                    acc[warp, lane, mm, c] += s * p
        for group in range(groups):  # the warps of a group add their parts of K
            col0 = (bx * groups + group) * cols
            total = acc[group::groups].sum(axis=(0, 1))
            for c in range(cols):
                n = col0 + c
                if n >= a.n:
                    break
                b = rd.elem(bias, n, dt) if bias else 0.0
                for mm in range(a.m):
                    rd.put(Y, mm * a.n + n, dt, total[mm, c] + b)


def _emulate_mnb_gemv_row(rd, op, a, q8, dt, A, B, S, Z, bias, Y, split_u=0, cols=1, split=1):
    """hipep_mnb_gemv_row_*: the staged tile of A (q8: int8 codes per block, the block's scale and
    each chunk's code sum; h2: fp16 values), 16-byte chunks of B (32 values of one block) per lane,
    and per chunk either the exact integer dot product (q8) or the half2 partial sums, each HFMA2
    rounded to fp16, of 4 products per half per word (h2). `cols` adjacent columns a warp group of
    `split` warps (split > 1: each warp on its own run of split_u chunks a lane)."""
    bs = 1 << a.log2_bs
    warps = op.block[0] // 32
    assert op.block == (gq.GEMV_WARPS * 32, 1, 1) and a.m == 1 and a.aligned16 and bs >= 32 and a.zp_mode in (0, 1)
    assert q8 or dt == np.float16
    tcm = a.k_tile // 32
    assert a.k_tile % bs == 0 and op.smem == gq.row_smem(tcm, bs, q8) <= 48 * 1024
    groups = warps // split  # a group of `split` warps per `cols` output columns
    assert bool(split_u) == (split > 1) and (not split_u or split * split_u * 32 >= a.k_pad // 32)
    assert a.k_split == 1 and op.grid[0] * groups * cols >= a.n
    e = np.dtype(dt).itemsize
    f32 = np.float32
    for bx in range(op.grid[0]):
        acc = np.zeros((warps, 32, cols), f32)
        for kt in range(0, a.k_pad, a.k_tile):
            tile_chunks = min(a.k_pad - kt, a.k_tile) // 32
            vals = np.array([rd.elem(A, k, dt) if k < a.k else 0.0 for k in range(kt, kt + tcm * 32)], f32)
            if q8:
                codes = np.zeros(tcm * 32, np.int64)
                a_scale = np.zeros(tcm * 32 // bs, f32)
                for b in range(tcm * 32 // bs):
                    scale, inv = _int8_params(np.abs(vals[b * bs:(b + 1) * bs]).max())
                    codes[b * bs:(b + 1) * bs] = np.rint(vals[b * bs:(b + 1) * bs] * inv).astype(np.int64)
                    a_scale[b] = scale
            else:
                if a.a_vec:
                    for k0 in range(kt, kt + tcm * 32, 8):
                        if k0 + 8 <= a.k and a.k % 8 == 0:
                            rd.raw(A + k0 * e, 16, 16)  # one aligned 16-byte load of 8 halves
                halves = vals.astype(np.float16)
            for warp in range(warps):
                if split_u:  # warps S g ... S g + S - 1: the runs of split_u * 32 chunks, in order
                    group, run = warp // split, warp % split
                else:
                    group, split = warp % groups, warp // groups
                col0 = (bx * groups + group) * cols
                for lane in range(32):
                    chunks_of_lane = ([c for c in range(run * split_u * 32 + lane, (run + 1) * split_u * 32, 32)
                                       if c < tile_chunks] if split_u else
                                      range(split * 32 + lane, tile_chunks, 32 * a.k_split))
                    for ch in chunks_of_lane:
                        kv = kt + ch * 32
                        blk = kv >> a.log2_bs
                        for c in range(cols):
                            n = col0 + c
                            if n >= a.n:
                                continue  # zero scale: the column adds nothing and is not written
                            q = _words_values(rd.raw(B + n * a.row_bytes + kv // 2, 16, 16), 4)
                            s = f32(rd.elem(S, n * a.nb + blk, dt))
                            z = _mnb_zero_point(rd, Z, n, blk, a, 4, dt)
                            if q8:
                                isum = int(np.dot(codes[ch * 32:ch * 32 + 32], (q - z).astype(np.int64)))
                                acc[warp, lane, c] = f32(acc[warp, lane, c] + f32(isum) * f32(s * a_scale[ch * 32 // bs]))
                                continue
                            part = f32(0)
                            for i in range(4):  # word i: halves x (values 0-3) and y (values 4-7)
                                d = (q[8 * i:8 * i + 8] - z).astype(np.float16)
                                av = halves[ch * 32 + 8 * i:ch * 32 + 8 * i + 8]
                                px, py = np.float16(d[0] * av[0]), np.float16(d[4] * av[4])
                                for j in range(1, 4):
                                    px = np.float16(float(d[j]) * float(av[j]) + float(px))
                                    py = np.float16(float(d[4 + j]) * float(av[4 + j]) + float(py))
                                part = f32(part + f32(f32(px) + f32(py)))
                            acc[warp, lane, c] = f32(acc[warp, lane, c] + s * part)
        for group in range(groups):
            col0 = (bx * groups + group) * cols
            mine = acc[split * group:split * group + split] if split_u else acc[group::groups]
            total = mine.astype(np.float64).sum(axis=(0, 1))
            for c in range(cols):
                n = col0 + c
                if n < a.n:
                    rd.put(Y, n, dt, total[c] + (rd.elem(bias, n, dt) if bias else 0.0))


def _emulate_mnb_gemm(rd, op, a, bits, dt, A, B, S, Z, bias, Y, qp):
    t, bk = gq.GEMM_TILE, 32
    vpw = 32 // bits
    assert op.block == (gq.GEMM_THREADS, 1, 1) and op.grid[0] * t >= a.n and op.grid[1] * t >= a.m
    for by in range(op.grid[1]):
        for bx in range(op.grid[0]):
            m0, n0 = by * t, bx * t
            acc = np.zeros((t, t))
            for k0 in range(0, a.k_pad, bk):
                at = np.zeros((t, bk))
                for mm in range(t):
                    for kk in range(bk):
                        gm, gkk = m0 + mm, k0 + kk
                        if gm < a.m and gkk < a.k:
                            at[mm, kk] = rd.elem(A, gm * a.k + gkk, dt)
                            if a.int8_a:
                                g = gm * a.nb + (gkk >> a.log2_bs)
                                scale, inv = rd.elem(qp, 2 * g, np.float32), rd.elem(qp, 2 * g + 1, np.float32)
                                at[mm, kk] = _int8_value(at[mm, kk], np.float32(scale), np.float32(inv))
                bt = np.zeros((bk, t))
                for nn in range(t):
                    for wi in range(bk // vpw):
                        gn, gkk = n0 + nn, k0 + wi * vpw
                        if gn < a.n and gkk < a.k_pad:
                            raw = rd.raw(B + gn * a.row_bytes + gkk * bits // 8, 4, 4)
                            blk = gkk >> a.log2_bs
                            s = rd.elem(S, gn * a.nb + blk, dt)
                            z = _mnb_zero_point(rd, Z, gn, blk, a, bits, dt)
                            bt[wi * vpw:(wi + 1) * vpw, nn] = (_words_values(raw, bits) - z) * s
                acc += at @ bt
            for ty in range(16):
                for tx in range(16):
                    for j in range(4):
                        gn = n0 + tx * 4 + j
                        if gn >= a.n:
                            break
                        b = rd.elem(bias, gn, dt) if bias else 0.0
                        for i in range(4):
                            gm = m0 + ty * 4 + i
                            if gm < a.m:
                                rd.put(Y, gm * a.n + gn, dt, acc[ty * 4 + i, tx * 4 + j] + b)


def _mnb_case(m_shape, k, n, bits, bs, dtype, zp_kind, with_bias, b_offset=0, seed=0, level=4, weights=True):
    """Binds and emulates one MatMulNBits: (ops, got, want, the f32 path's product). `want` is the
    registry reference at accuracy_level 4 with integer zero points (int8 A), else the f32 path's.
    `weights`: B, scales, zero points and bias are plan constants (else values of the run)."""
    from quant_helpers import quantize_blockwise

    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k)).astype(np.float32)
    B, scales, zp = quantize_blockwise(w, bits, bs, zp_kind, rng)
    A = rng.standard_normal(tuple(m_shape) + (k,)).astype(dtype)
    A.reshape(-1, k)[0, :bs] = 0  # an all-zero block: scale 0, codes 0
    scales = scales.astype(dtype)
    if zp is not None and zp.dtype != np.uint8:
        zp = zp.astype(dtype)
    bias = rng.standard_normal(n).astype(dtype) if with_bias else None
    attrs = {"K": k, "N": n, "bits": bits, "block_size": bs, "accuracy_level": level, "weight_prepacked": 0}
    mem = Memory()
    bases = [_QBASE, 2 * _QBASE + b_offset, 3 * _QBASE, 4 * _QBASE, 5 * _QBASE]
    ins = []
    for base, x in zip(bases, (A, B, scales.reshape(-1), zp, bias)):
        if x is None:
            ins.append(None)
            continue
        mem.put(base, x)
        ins.append(arg(x, base, constant=weights and base != _QBASE))
    ins = ins[:4] + [None] + ins[4:]
    out_shape = tuple(m_shape) + (n,)
    mem.alloc(_QOUT, int(np.prod(out_shape)) * np.dtype(dtype).itemsize)
    ops = gk.BINDINGS[gq.MNB].bind(ins, [out_arg(out_shape, dtype, _QOUT)], attrs, _QTARGET)
    m = int(np.prod(m_shape))
    mem.alloc(_QWS, max(16, m * -(-k // bs) * 8))
    for op in ops:
        _emulate_mnb(mem, op)
    got = mem.get(_QOUT, out_shape, dtype).astype(np.float64)
    # hipep's reference dequantization, then a plain float matmul
    from hipep.ops.contrib_quant import _matmul_nbits, _mnb_dequant, _mnb_unpack

    wd = _mnb_dequant(*_mnb_unpack(B, scales, zp, attrs))[:, :k].astype(np.float64)
    f32_path = A.astype(np.float64).reshape(-1, k) @ wd.T
    if bias is not None:
        f32_path += bias.astype(np.float64)
    f32_path = f32_path.reshape(out_shape)
    want = f32_path
    if level == 4 and zp_kind != "float":
        want = _matmul_nbits([A, B, scales.reshape(-1), zp, None, bias], attrs)[0].astype(np.float64)
    return ops, got, want, f32_path


@pytest.mark.parametrize("m_shape,k,n,bits,bs,dtype,zp_kind,with_bias,level", [
    ((1,), 64, 37, 4, 32, np.float32, "none", False, 4),          # the builder's form, N not a multiple of 16
    ((1, 3), 100, 20, 4, 32, np.float16, "uint8", True, 4),       # K not a multiple of the block
    ((2, 4), 200, 18, 8, 16, np.float32, "uint8", False, 4),      # 8 bits, M = 8
    ((2, 4), 200, 18, 8, 16, np.float32, "uint8", False, 0),      # the same at level 0: A in f32
    ((5,), 80, 17, 4, 16, ml_dtypes.bfloat16, "uint8", True, 4),  # odd n_blocks: rows 8-byte aligned only
    ((2,), 96, 9, 4, 32, np.float16, "float", True, 4),           # float zero points: A in f32 at level 4
    ((8,), 1100, 5, 4, 128, np.float32, "uint8", False, 4),       # K past one shared-memory tile (1024 at M=8)
    ((1,), 4096, 6, 4, 32, np.float16, "none", True, 4),          # K split 4 ways among a block's warps
    ((2,), 1030, 7, 8, 64, np.float32, "uint8", True, 4),         # K split 2 ways, K % 4 != 0: A staged one by one
    ((3,), 600, 10, 4, 256, np.float32, "uint8", False, 4),       # block 256: two loads a lane in the staging
    ((1,), 256, 130, 4, 32, np.float16, "uint8", True, 0),        # wide one-row GEMV (4 columns a warp), N % 4 != 0
    ((1,), 160, 100, 4, 16, np.float32, "none", False, 4),        # wide, 8-byte rows, int8 A
    ((1,), 512, 128, 8, 64, ml_dtypes.bfloat16, "float", True, 4),  # wide, 8 bits, float zero points
    ((17,), 72, 70, 4, 16, np.float32, "uint8", True, 4),         # 3 GEMVs of 8, 8 and 1 rows (a small GEMM grid)
    ((20,), 64, 300, 4, 32, np.float32, "none", False, 4),        # GEMM: edge tiles (its grid covers the 4 SMs)
    ((20,), 64, 300, 4, 32, np.float32, "uint8", True, 0),        # the GEMM at level 0
    ((40,), 300, 20, 8, 256, np.float32, "none", True, 4),        # GEMM, block 256, the last block partial
    ((3, 23), 40, 9, 8, 32, np.float16, "float", False, 4),       # GEMM, 8 bits, float zero points
])
def test_matmul_nbits_binding_emulated(m_shape, k, n, bits, bs, dtype, zp_kind, with_bias, level):
    ops, got, want, f32_path = _mnb_case(m_shape, k, n, bits, bs, dtype, zp_kind, with_bias, level=level)
    quantized = level == 4 and zp_kind != "float"
    m = int(np.prod(m_shape))
    gemm_blocks = -(-n // gq.GEMM_TILE) * -(-m // gq.GEMM_TILE)
    if m <= 8 or (m <= gq.GEMV_CHAIN_MAX_ROWS and gemm_blocks < TARGET.sm_count):
        assert [op.entry[:14] for op in ops] == ["hipep_mnb_gemv"] * -(-m // 8)
        assert [op.params[6].m for op in ops] == [min(8, m - r) for r in range(0, m, 8)]
    else:
        dt = {np.dtype(v): k for k, v in _QT.items()}[np.dtype(dtype)]
        assert [op.entry for op in ops] == [f"hipep_mnb_a_int8_{dt}"] * quantized + [f"hipep_mnb_gemm_{dt}_b{bits}"]
    assert all(p.int8_a == quantized for op in ops for p in op.params if isinstance(p, gq.MatMulNBitsArgs))
    tol = 1e-5 if dtype == np.float32 else (1e-2 if dtype == np.float16 else 2e-2)
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
    assert err < tol, (ops[0].entry, err)
    if quantized and dtype == np.float32:  # int8 codes move the product well past the tolerance
        assert np.abs(got - f32_path).max() / np.abs(f32_path).max() > 1e-3


def test_matmul_nbits_gemv_picks_rows_tiles_and_loads(monkeypatch):
    monkeypatch.setattr(gq, "GEMV_ROW", 0)  # the general GEMV's choices (the row GEMV: below)
    ops, _, _, _ = _mnb_case((3,), 4096, 16, 4, 32, np.float16, "none", False)
    op, a = ops[0], ops[0].params[6]
    assert op.entry == "hipep_mnb_gemv_f16_b4_m4" and a.aligned16 == 1 and a.a_vec == 1
    assert a.k_tile == 2048 and op.smem == 4 * (2048 // 32) * 36 * 4
    assert a.k_split == 2 and op.grid == (2, 1, 1)  # 64 chunks a tile: two warp-widths each for 2 splits
    # K split until a block per SM (TARGET has 4 SMs), each split keeping 32 chunks a tile: the
    # H200's decode shapes (132 SMs) stay at one round of resident blocks (two per SM)
    assert gq.gemv_k_split(4096, 128, 132) == 1 and gq.gemv_k_split(2048, 256, 132) == 2
    assert gq.gemv_k_split(2048, 64, 132) == 2 and gq.gemv_k_split(3072, 64, 132) == 1
    assert gq.gemv_k_split(32000, 64, 132) == 1 and gq.gemv_k_split(16, 32, 132) == 1
    assert gq.gemv_k_split(16, 1024, 132) == 8
    # the tuning knobs: more blocks per SM, or a forced split (still within the warp-width cap)
    assert gq.gemv_k_split(4096, 128, 132, blocks_per_sm=2) == 2
    assert gq.gemv_k_split(4096, 128, 132, force=4) == 4 and gq.gemv_k_split(4096, 64, 132, force=8) == 2
    assert gq.gemv_k_split(16, 1024, 132, force=1) == 1
    # the wide one-row variant: K within 2 chunks a lane and N filling the SMs with 32 columns a block
    assert gq.gemv_wide(1, 8192, 64, 132) and gq.gemv_wide(1, 32000, 64, 132)
    assert not gq.gemv_wide(1, 3072, 64, 132) and not gq.gemv_wide(1, 8192, 128, 132)
    assert not gq.gemv_wide(2, 8192, 64, 132) and not gq.gemv_wide(1, 8192, 64, 132, enabled=False)
    ops, _, _, _ = _mnb_case((1,), 256, 130, 4, 32, np.float16, "none", False)
    assert ops[0].entry == "hipep_mnb_gemv_f16_b4_m1_c4" and ops[0].grid == (5, 1, 1)
    assert ops[0].params[6].k_split == 1
    ops, _, _, _ = _mnb_case((1,), 80, 16, 4, 16, np.float32, "uint8", False)
    assert ops[0].params[6].aligned16 == 0  # 40-byte rows: 8-byte halves
    ops, _, _, _ = _mnb_case((1,), 64, 8, 4, 32, np.float32, "none", False, b_offset=8)
    assert ops[0].params[6].aligned16 == 0  # B itself only 8-byte aligned
    assert gq.gemv_rows(1) == 1 and gq.gemv_rows(3) == 4 and gq.gemv_rows(5) == 8


def test_matmul_nbits_gemv_knobs_reject_bad_values(monkeypatch):
    monkeypatch.setenv(gq.GEMV_K_SPLIT_ENV, "3")
    with pytest.raises(HipepError, match=r"HIPEP_MNB_GEMV_K_SPLIT='3': expected one of 0, 1, 2, 4, 8"):
        gq._env_int(gq.GEMV_K_SPLIT_ENV, 0, (0, 1, 2, 4, 8))
    monkeypatch.setenv(gq.GEMV_K_SPLIT_ENV, " 4 ")
    assert gq._env_int(gq.GEMV_K_SPLIT_ENV, 0, (0, 1, 2, 4, 8)) == 4
    monkeypatch.delenv(gq.GEMV_K_SPLIT_ENV)
    assert gq._env_int(gq.GEMV_K_SPLIT_ENV, 0, (0, 1, 2, 4, 8)) == 0


def test_matmul_nbits_gemv_tiles_hold_whole_blocks(monkeypatch):
    """int8 A finds each block's amax in the GEMV's shared-memory tile: every tile but the last
    is a multiple of block_size, and the last ends at K_pad (a multiple too)."""
    monkeypatch.setattr(gq, "GEMV_ROW", 0)
    for m_t in (1, 2, 4, 8):
        for bits in (4, 8):
            vpl = 128 // bits
            for bs in (16, 32, 64, 128, 256):
                for nb in (1, 3, 17, 64, 200):
                    k_pad = nb * bs
                    k_tile = gq._gemv_k_tile(m_t, vpl, k_pad, bs)
                    assert k_tile % vpl == 0 and m_t * (k_tile // vpl) * (vpl + gq.GEMV_PAD) * 4 <= 48 * 1024
                    assert k_tile >= k_pad or k_tile % bs == 0, (m_t, bits, bs, nb, k_tile)
    level0, _, _, _ = _mnb_case((1,), 4096, 16, 4, 32, np.float32, "none", False, level=0)
    level4, _, _, _ = _mnb_case((1,), 4096, 16, 4, 32, np.float32, "none", False, level=4)
    assert [op.params[6].int8_a for op in level0 + level4] == [0, 1]
    assert level0[0].smem == level4[0].smem and level0[0].grid == level4[0].grid  # quantized in place


@pytest.mark.parametrize("k,n,bs,dtype,zp_kind,level,want", [
    (4096, 16, 32, np.float32, "none", 4, "q8_f32"),     # the builder's int4 decoders: f32 A, level 4
    (1024, 24, 128, np.float16, "uint8", 0, "h2_f16"),   # fp16 A at level 0, packed zero points
    # (fp16 rows of 2+ chunks a lane in a grid of at most half a wave: K split, test_quant_kernels_on_host)
    (512, 8, 64, ml_dtypes.bfloat16, "uint8", 4, "q8_bf16"),
    (512, 8, 64, ml_dtypes.bfloat16, "uint8", 0, None),  # bf16 at level 0: f32 arithmetic, general GEMV
    (512, 8, 16, np.float16, "none", 0, None),           # block 16: a chunk spans two blocks
    (512, 8, 32, np.float16, "float", 0, None),          # float zero points
    (80, 8, 16, np.float32, "none", 4, None),            # 40-byte rows
])
def test_matmul_nbits_row_gemv_applies_where_it_can(k, n, bs, dtype, zp_kind, level, want):
    """One row, 4 bits, block_size >= 32, 16-byte rows, integer zero points and A in int8 or fp16
    take the row GEMV; its tile holds whole blocks within the shared-memory budget."""
    ops, got, ref, _ = _mnb_case((1,), k, n, 4, bs, dtype, zp_kind, False, level=level)
    if want is None:
        assert "_row_" not in ops[0].entry
        return
    assert [op.entry for op in ops] == [f"hipep_mnb_gemv_row_{want}_b4_w3"]  # a grid of one wave at 3 per SM
    a = ops[0].params[6]
    assert a.k_tile % bs == 0 and ops[0].smem <= gq.GEMV_SMEM_BUDGET + 64
    tol = 1e-5 if dtype == np.float32 else 1e-2
    assert np.abs(got - ref).max() / np.abs(ref).max() < tol


@pytest.mark.parametrize("dtype,level", [(np.float16, 0), (np.float32, 4)])
def test_matmul_nbits_row_gemv_overlaps_the_previous_kernel_only_with_weights(dtype, level):
    """The row GEMV loads B, scales and zero points before it waits for the previous kernel
    (kernels/hipep_device.h, hipep_grid_wait): it asks to start early only where those are plan
    constants, which no kernel writes; with B from the run it launches the ordinary way. The
    general GEMV and the GEMM never ask."""
    ops, got, ref, _ = _mnb_case((1,), 2048, 24, 4, 32, dtype, "uint8", True, level=level)
    assert [op.overlaps_previous for op in ops] == [True]
    run_ops, run_got, _, _ = _mnb_case((1,), 2048, 24, 4, 32, dtype, "uint8", True, level=level, weights=False)
    assert [op.entry for op in run_ops] == [op.entry for op in ops] and not run_ops[0].overlaps_previous
    assert np.array_equal(run_got, got)
    tol = 1e-5 if dtype == np.float32 else 1e-2
    assert np.abs(got - ref).max() / np.abs(ref).max() < tol
    for m in (2, 40):  # the general GEMV, the GEMM
        others, _, _, _ = _mnb_case((m,), 2048, 24, 4, 32, dtype, "uint8", True, level=level)
        assert not any(op.overlaps_previous for op in others)


def test_matmul_nbits_row_gemv_tiles_long_rows():
    """K past one shared-memory tile: the row GEMV loops over tiles of whole blocks."""
    ops, got, ref, _ = _mnb_case((1,), 24576, 3, 4, 256, np.float16, "none", False, level=0)
    a = ops[0].params[6]
    assert ops[0].entry == "hipep_mnb_gemv_row_h2_f16_b4_w3" and a.k_tile < a.k_pad and a.k_tile % 256 == 0
    assert np.abs(got - ref).max() / np.abs(ref).max() < 1e-2


def test_matmul_nbits_bind_names_a_bad_operand():
    with pytest.raises(HipepError, match=r"scales must be float32 with N \* n_blocks = 8 \* 2"):
        A, B, s = np.zeros((1, 64), np.float32), np.zeros((8, 2, 16), np.uint8), np.zeros(15, np.float32)
        gk.BINDINGS[gq.MNB].bind([arg(A, SRC), arg(B, SRC + 0x1000, True), arg(s, SRC + 0x2000, True)],
                                 [out_arg((1, 8), np.float32)], {"K": 64, "N": 8, "bits": 4, "block_size": 32}, TARGET)
    with pytest.raises(HipepError, match=r"A must have K = 64 as its last dimension, got shape \[1, 60\]"):
        A, s = np.zeros((1, 60), np.float32), np.zeros(16, np.float32)
        gk.BINDINGS[gq.MNB].bind([arg(A, SRC), arg(B, SRC + 0x1000, True), arg(s, SRC + 0x2000, True)],
                                 [out_arg((1, 8), np.float32)], {"K": 64, "N": 8, "bits": 4, "block_size": 32}, TARGET)


def _emulate_gbq(mem: Memory, op: gk.KernelOp) -> None:
    rd = _Bytes(mem)
    m = re.fullmatch(r"hipep_gbq_(f32|f16|bf16)_b([248])_(i32|i64)(_w4)?", op.entry)
    assert m, op.entry
    dt, bits, it = _QT[m.group(1)], int(m.group(2)), np.int32 if m.group(3) == "i32" else np.int64
    wb = 4 if m.group(4) else 1
    data, idx, scales, zp, out = [v.value for v in op.params[:5]]
    a = op.params[5]
    per = 8 // bits
    width = a.dp * per
    assert op.grid[1] * op.block[1] >= a.rows or op.grid[1] == 65535
    for row in range(a.rows):
        i, rr = divmod(row, a.r)
        j = int(rd.elem(idx, i, it))
        j = j + a.n_axis if j < 0 else j
        ok = 0 <= j < a.n_axis
        src = (j if ok else 0) * a.r + rr
        for w in range(a.dp // wb):
            v0 = w * wb * per
            raw = rd.raw(data + src * a.dp + w * wb, wb, wb)
            bitsv = int(raw.view(np.uint32)[0]) if wb == 4 else int(raw[0])
            blk = v0 >> a.log2_bs
            assert (v0 + wb * per - 1) >> a.log2_bs == blk, "a word spans two blocks"
            s = np.float32(rd.elem(scales, src * a.nb + blk, dt)) if ok else np.float32(0)
            z = 1 << (bits - 1)
            if a.zp_row:
                z = (int(rd.raw(zp + src * a.zp_row + blk // per, 1)[0]) >> ((blk % per) * bits)) & ((1 << bits) - 1)
            for t in range(wb * per):
                q = (bitsv >> (t * bits)) & ((1 << bits) - 1)
                rd.put(out, row * width + v0 + t, dt, np.float32(q - z) * s if ok else 0.0)


@pytest.mark.parametrize("vocab,middle,hidden,bits,bs,dtype,with_zp,itype,data_offset", [
    (50, (), 64, 4, 32, np.float32, True, np.int64, 0),     # the builder's embedding table
    (20, (), 48, 4, 16, np.float16, False, np.int32, 0),
    (12, (3,), 40, 8, 16, np.float32, True, np.int64, 0),   # a middle axis, 8 bits
    (9, (), 96, 2, 64, ml_dtypes.bfloat16, True, np.int32, 0),
    (10, (), 64, 4, 128, np.float16, True, np.int64, 2),    # data not 4-byte aligned: byte by byte
])
def test_gather_block_quantized_binding_emulated(vocab, middle, hidden, bits, bs, dtype, with_zp, itype, data_offset):
    from quant_helpers import quantize_blockwise

    from hipep.ops.contrib_quant import _gather_block_quantized

    rng = np.random.default_rng(7)
    rows = vocab * int(np.prod(middle, dtype=np.int64))
    B, scales, zp = quantize_blockwise(rng.standard_normal((rows, hidden)).astype(np.float32), bits, bs,
                                       "uint8" if with_zp else "none", rng)
    data = np.ascontiguousarray(B.reshape(rows, -1)[:, :hidden * bits // 8]).reshape((vocab, *middle, -1))
    scales = scales.astype(dtype).reshape((vocab, *middle, -1))
    zp = zp.reshape((vocab, *middle, -1)) if with_zp else None
    ids = np.array([[1, -1, vocab + 3], [0, vocab - 1, -vocab]], itype)  # one out of range: zeros
    attrs = {"bits": bits, "block_size": bs, "gather_axis": 0, "quantize_axis": 1 + len(middle)}
    want = _gather_block_quantized([data, ids, scales, zp], attrs)[0]
    mem = Memory()
    ins = []
    for base, x in zip((_QBASE + data_offset, 2 * _QBASE, 3 * _QBASE, 4 * _QBASE), (data, ids, scales, zp)):
        if x is not None:
            mem.put(base, x)
        ins.append(None if x is None else arg(x, base, constant=True))
    mem.alloc(_QOUT, want.nbytes)
    ops = gk.BINDINGS[gq.GBQ].bind(ins, [out_arg(want.shape, dtype, _QOUT)], attrs, TARGET)
    assert ops[0].entry.endswith("_w4") == (data_offset == 0 and hidden * bits // 8 % 4 == 0)
    for op in ops:
        _emulate_gbq(mem, op)
    np.testing.assert_array_equal(mem.get(_QOUT, want.shape, dtype), want)


def test_quantized_kernel_reasons():
    builder = {"K": 512, "N": 1408, "bits": 4, "block_size": 32, "accuracy_level": 4, "weight_prepacked": 0}
    for t in ("float32", "float16", "bfloat16"):
        assert gk.kernel_reason(gq.MNB, builder, [t, "uint8", t]) is None
        assert gk.kernel_reason(gq.MNB, builder, [t, "uint8", t, "uint8", "", t]) is None
        assert gk.kernel_reason(gq.MNB, builder, [t, "uint8", t, t]) is None
    reason = lambda **kw: gk.kernel_reason(gq.MNB, {**builder, **kw}, ["float32", "uint8", "float32"])  # noqa: E731
    assert "bits=2" in reason(bits=2)
    assert "block_size=8" in reason(block_size=8) and "block_size=48" in reason(block_size=48)
    assert "weight_prepacked=1" in reason(weight_prepacked=1)
    assert "scales of element type float16" in gk.kernel_reason(gq.MNB, builder, ["float32", "uint8", "float16"])
    g_idx = np.arange(512, dtype=np.int32) // 32
    dts = ["float32", "uint8", "float32", "", "int32"]
    assert gk.kernel_reason(gq.MNB, builder, dts, None, [None] * 4 + [g_idx]) is None  # in order: nothing to do
    assert "g_idx" in gk.kernel_reason(gq.MNB, builder, dts, None, [None] * 4 + [g_idx[::-1].copy()])
    assert "g_idx" in gk.kernel_reason(gq.MNB, builder, dts)  # known only at run time
    gbq = {"bits": 4, "block_size": 32, "gather_axis": 0, "quantize_axis": 1}
    assert gk.kernel_reason(gq.GBQ, gbq, ["uint8", "int64", "float16"], [(256, 128), (None, None), (256, 8)]) is None
    assert "quantize_axis=0" in gk.kernel_reason(gq.GBQ, {**gbq, "quantize_axis": 0}, ["uint8", "int64", "float32"],
                                                 [(256, 128), (2,), (8, 128)])
    assert "bits=3" in gk.kernel_reason(gq.GBQ, {**gbq, "bits": 3}, ["uint8", "int64", "float32"])


def test_builder_int4_decoders_have_gpu_kernels_for_their_quantized_nodes():
    """The int4 decoders cached by the model zoo: no MatMulNBits or GatherBlockQuantized node is
    left without a GPU program."""
    import glob
    import os

    import onnx

    from hipep.explain import _load_small_external_tensors
    from hipep.graph import GraphView
    from hipep.partition import partition

    folders = sorted(glob.glob(os.path.expanduser("~/.cache/hipep/models/*-int4-v2")))
    if not folders:
        pytest.skip("no int4 builder decoders cached under ~/.cache/hipep/models")
    for folder in folders:
        path = glob.glob(os.path.join(folder, "*.onnx"))[0]
        model = _load_small_external_tensors(onnx.load(path, load_external_data=False), folder, path)
        view = GraphView.from_onnx(model)
        assert any(nd.op_type == "MatMulNBits" for nd in view.nodes), folder
        report = partition(view, device="cuda")
        left = [r.line() for r in report.rejections if r.node.op_type in ("MatMulNBits", "GatherBlockQuantized")]
        assert not left, left
