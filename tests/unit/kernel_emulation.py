"""Emulating the GPU kernels' launches in numpy, without a GPU: fake device addresses backed by byte
buffers (Memory), the bindings' operands at those addresses (arg, out_arg), and the copy,
transpose, concat and gather kernels followed index by index from the launch a binding gives
(run_ops), so a test checks the bindings' index arithmetic (merged axes, words, offsets)."""
from __future__ import annotations

import ctypes
import re

import numpy as np

from hipep.runtime import gpu_faults as gf
from hipep.runtime import gpu_kernels as gk

SRC, DST, IDX = 0x100000, 0x200000, 0x300000
TARGET = gk.Target(sm_count=4, warp_size=32, scratch=lambda n: 0x900000)


def arg(a: np.ndarray, base: int, constant=False) -> gk.Arg:
    return gk.Arg(base, tuple(a.shape), a.dtype, a if constant else None, constant)


def out_arg(shape, dtype, base=DST) -> gk.Arg:
    return gk.Arg(base, tuple(shape), np.dtype(dtype))


class Memory:
    """Byte buffers at fake device addresses, which the emulated kernels read and write."""

    def __init__(self):
        self.buffers: dict[int, np.ndarray] = {}

    def put(self, base: int, a: np.ndarray) -> None:
        self.buffers[base] = np.ascontiguousarray(a).reshape(-1).view(np.uint8).copy()

    def alloc(self, base: int, nbytes: int) -> None:
        self.buffers[base] = np.zeros(nbytes, np.uint8)

    def words(self, addr: int, word: int) -> np.ndarray:
        for base, buf in self.buffers.items():
            if base <= addr < base + max(buf.nbytes, 1):
                assert (addr - base) % word == 0, "misaligned word"
                return buf[addr - base:].view(_word_dtype(word))
        raise AssertionError(f"address {addr:#x} is in no buffer")

    def get(self, base: int, shape, dtype) -> np.ndarray:
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return self.buffers[base][:n].view(np.dtype(dtype)).reshape(shape)


def _word_dtype(word: int):
    return {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64, 16: np.dtype("V16")}[word]


def run_ops(mem: Memory, ops) -> None:
    for op in ops:
        if isinstance(op, gk.CopyOp):
            mem.words(op.dst, 1)[:op.nbytes] = mem.words(op.src, 1)[:op.nbytes]
            continue
        m = re.match(r"hipep_(copy|transpose_tiled|concat|gather)_w(\d+)", op.entry)
        assert m, op.entry
        kind, word = m.group(1), int(m.group(2))
        p = [v.value if isinstance(v, ctypes.c_uint64) else v for v in op.params]
        if kind == "copy":
            a = p[2]
            src, dst = mem.words(p[0], word), mem.words(p[1], word)
            n = a.n
            idx = np.arange(n, dtype=np.int64)
            off = np.full(n, a.offset, np.int64)
            rem = idx.copy()
            for d in range(a.rank - 1, -1, -1):
                if d == 0:
                    off += rem * a.strides[0]
                else:
                    off += (rem % a.dims[d]) * a.strides[d]
                    rem //= a.dims[d]
            assert (off >= 0).all() and (off < src.size).all() if n else True
            if op.entry.endswith("_i32"):
                assert n < 2 ** 31 and (np.abs(off) < 2 ** 31).all()
            r = int(re.search(r"_r(\d|n)_", op.entry).group(1)) if "_rn_" not in op.entry else 0
            assert r == 0 or r == a.rank
            dst[:n] = src[off]
        elif kind == "transpose_tiled":
            a = p[2]
            src, dst = mem.words(p[0], word), mem.words(p[1], word)
            total = a.batch * a.m * a.n
            dst[:total] = src[:total].reshape(a.batch, a.m, a.n).transpose(0, 2, 1).reshape(-1)
            assert op.block == (32, 8, 1)
        elif kind == "concat":
            dst, a = mem.words(p[0], word), p[1]
            for k in range(op.grid[1]):
                s = mem.words(a.src[k], word)
                for o in range(a.outer):
                    dst[o * a.total + a.offset[k]: o * a.total + a.offset[k] + a.len[k]] = \
                        s[o * a.len[k]:(o + 1) * a.len[k]]
        elif kind == "gather":
            data, out, a = mem.words(p[0], word), mem.words(p[2], word), p[3]
            it = np.int32 if op.entry.endswith("_i32") else np.int64
            idx = mem.words(p[1], 1).view(it)
            fault = p[4]
            for row in range(a.rows):
                o, i = divmod(row, a.n_idx)
                j = int(idx[i])
                j = j + a.n_axis if j < 0 else j
                if 0 <= j < a.n_axis:
                    out[row * a.inner:(row + 1) * a.inner] = data[(o * a.n_axis + j) * a.inner:(o * a.n_axis + j + 1) * a.inner]
                else:
                    out[row * a.inner:(row + 1) * a.inner] = np.zeros(a.inner, data.dtype)
                    emulate_fault_report(mem, fault, gf.FAULT_INDEX, int(idx[i]), a.n_axis)


def emulate_fault_report(mem: Memory, fault, code: int, value: int, bound: int) -> None:
    """hipep_report_fault: the first report fills the record, later ones are dropped."""
    if not fault.record:
        return
    record = gf.FaultRecord.from_buffer(mem.words(fault.record, 8)[:3])
    if record.code == gf.FAULT_NONE:
        record.code, record.site, record.value, record.bound = code, fault.site, value, bound


def run_binding(op_key, inputs, out_shapes, attrs, out_dtypes=None, constants=()):
    """Binds `op_key` for `inputs` (laid out at SRC onward; all but the first constant unless
    `constants` says) and `out_shapes` (at DST onward), runs the launches; (outputs, launches)."""
    mem = Memory()
    ins, base = [], SRC
    for k, a in enumerate(inputs):
        if a is None:
            ins.append(None)
            continue
        mem.put(base, a)
        ins.append(arg(a, base, constant=k in constants or k > 0))
        base += max(a.nbytes, 16) + 256
    outs = []
    out_base = DST
    for j, shape in enumerate(out_shapes):
        dt = (out_dtypes or [inputs[0].dtype] * len(out_shapes))[j]
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize
        mem.alloc(out_base, max(nbytes, 16))
        outs.append(out_arg(shape, dt, out_base))
        out_base += max(nbytes, 16) + 256
    ops = gk.binding_for(op_key).bind(ins, outs, attrs, TARGET)
    run_ops(mem, ops)
    return [mem.get(o.ptr, o.shape, o.dtype) for o in outs], ops
