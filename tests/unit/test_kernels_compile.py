"""The GPU kernels without a GPU: NVRTC compiles every kernels/*.hip module and rendered pointwise
kernels for sm_90 (skipped where nvidia-cuda-nvrtc is not installed), every entry point the
bindings name exists in the compiled code, and the bindings' index arithmetic (merged axes,
words, offsets) is checked by emulating the copy, gather and reduction kernels in numpy."""
from __future__ import annotations

import ctypes
import importlib.util
import itertools
import re

import ml_dtypes  # noqa: F401
import numpy as np
import pytest

from hipep.ops.pointwise import Builder, Operand
from hipep.ops.registry import OUTPUT_COUNT, SINCE_VERSION, lookup
from hipep.runtime import gpu_kernels as gk

ARCH = "sm_90"
DEFINES = {"HIPEP_WARP_SIZE": 32}


def _nvrtc_available() -> bool:
    if importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.bindings") is None:
        return False
    try:
        from hipep.runtime import kernel_cache

        kernel_cache.nvrtc_version()
        kernel_cache.cuda_include_dir()
        return True
    except Exception:
        return False


needs_nvrtc = pytest.mark.skipif(not _nvrtc_available(), reason="nvidia-cuda-nvrtc (cuda-bindings) is not installed")


@pytest.fixture(scope="module")
def cubins(tmp_path_factory):
    from hipep.runtime import kernel_cache

    out = {}
    for name in kernel_cache.kernel_sources():
        out[name], _ = kernel_cache.compile_cubin(kernel_cache.module_source(name), name, ARCH, DEFINES,
                                                  use_cache=False)
    return out


@needs_nvrtc
def test_every_kernel_module_compiles_for_sm90(cubins):
    from hipep.runtime import kernel_cache

    assert set(cubins) == set(kernel_cache.kernel_sources())
    assert set(gk.modules()) <= set(cubins)
    for name, data in cubins.items():
        assert data[:4] == b"\x7fELF", name


@needs_nvrtc
def test_every_entry_point_the_bindings_name_exists(cubins):
    names = _entry_points_named_by_bindings()
    assert len(names) > 60
    names |= {("copy", f"hipep_copy_w{w}_{r}_{i}") for w in (1, 2, 4, 8, 16)
              for r in ("r1", "r2", "r3", "r4", "rn") for i in ("i32", "i64")}
    for module, entry in sorted(names):
        assert entry.encode() + b"\0" in cubins[module], f"{module}: {entry}"


@needs_nvrtc
def test_rendered_pointwise_kernels_compile_through_the_header():
    from hipep.runtime import kernel_cache

    f32, f16 = np.dtype(np.float32), np.dtype(np.float16)
    cases = [
        ("::Add", [f32, f32], {}),
        ("::Sigmoid", [f32], {}),
        ("::Gelu", [f16], {"approximate": "tanh"}),
        ("::Cast", [f32], {"to": 10}),
        ("::Cast", [np.dtype(ml_dtypes.bfloat16)], {"to": 1}),
        ("::Where", [np.dtype(bool), f16, f16], {}),
        ("::Clip", [f32, f32, f32], {}),
        ("::Mod", [np.dtype(np.int64), np.dtype(np.int64)], {"fmod": 0}),
    ]
    for key, dtypes, attrs in cases:
        op = lookup("", key[2:])
        expr = op.pointwise([Operand(d, None, 6) for d in dtypes], _defaults(op, attrs))
        assert expr is not None, key
        out = [expr.nodes[o][1] for o in expr.outputs]
        r = gk.render_pointwise(expr, [d.name for d in dtypes], out)
        data, _ = kernel_cache.compile_cubin(r.source, r.name, ARCH, DEFINES, use_cache=False)
        assert r.name.encode() + b"\0" in data, key
    # a fused chain with a NaN constant and a broadcast operand
    b = Builder([Operand(f32), Operand(f32)])
    x, y = b.input(0), b.input(1)
    expr = b.build(b.max(x * y, b.const(float("nan"), "float32")) + b.const(float("-inf"), "float32"))
    r = gk.render_pointwise(expr, ["float32", "float32"], ["float32"])
    data, _ = kernel_cache.compile_cubin(r.source, r.name, ARCH, DEFINES, use_cache=False)
    assert r.name.encode() + b"\0" in data


@needs_nvrtc
def test_kernel_cache_hits_and_writes_atomically(tmp_path, monkeypatch):
    from hipep.runtime import kernel_cache

    monkeypatch.setenv(kernel_cache.CACHE_ENV, str(tmp_path))
    src = kernel_cache.module_source("gather")
    kernel_cache._MEMORY.clear()
    data, hit = kernel_cache.compile_cubin(src, "gather", ARCH, DEFINES)
    assert not hit
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and files[0].suffix == ".cubin" and files[0].read_bytes() == data
    kernel_cache._MEMORY.clear()
    again, hit = kernel_cache.compile_cubin(src, "gather", ARCH, DEFINES)
    assert hit and again == data
    # another architecture or define is another entry
    kernel_cache.compile_cubin(src, "gather", "sm_80", DEFINES)
    assert len(list(tmp_path.glob("*.cubin"))) == 2


@needs_nvrtc
def test_a_broken_kernel_reports_nvrtcs_log():
    from hipep.runtime import kernel_cache

    with pytest.raises(kernel_cache.KernelCompileError, match=r"broken.*undefined"):
        kernel_cache.nvrtc_compile('#include "hipep_device.h"\nHIPEP_KERNEL void k() { undefined_thing(); }\n',
                                   "broken", ARCH, DEFINES)


def _defaults(op, attrs):
    out = {k: v for k, v in op.attributes.items() if v is not _required()}
    out.update(attrs)
    out.setdefault(OUTPUT_COUNT, 1)
    out.setdefault(SINCE_VERSION, max(op.since_versions))
    return out


def _required():
    from hipep.ops.registry import REQUIRED

    return REQUIRED


# ---- emulating the kernels ------------------------------------------------------------------------

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
            for row in range(a.rows):
                o, i = divmod(row, a.n_idx)
                j = int(idx[i])
                j = j + a.n_axis if j < 0 else j
                if 0 <= j < a.n_axis:
                    out[row * a.inner:(row + 1) * a.inner] = data[(o * a.n_axis + j) * a.inner:(o * a.n_axis + j + 1) * a.inner]
                else:
                    out[row * a.inner:(row + 1) * a.inner] = np.zeros(a.inner, data.dtype)


def _run(op_key, inputs, out_shapes, attrs, out_dtypes=None, constants=()):
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


@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32, np.int64])
def test_transpose_binding_moves_every_element(dtype):
    rng = np.random.default_rng(0)
    shapes = [(7,), (3, 5), (2, 3, 4), (2, 1, 3, 5), (4, 64, 48), (3, 33, 70), (2, 4, 8, 16), (1, 37, 1, 40)]
    for shape in shapes:
        x = (rng.random(shape) * 100).astype(dtype)
        for perm in itertools.permutations(range(len(shape))):
            (y,), _ = _run("::Transpose", [x], [tuple(shape[p] for p in perm)], {"perm": list(perm)})
            np.testing.assert_array_equal(y, np.transpose(x, perm), err_msg=f"{shape} {perm}")


def test_transpose_uses_the_tiled_kernel_for_swapped_last_axes():
    x = np.arange(2 * 64 * 48, dtype=np.float32).reshape(2, 64, 48)
    (y,), ops = _run("::Transpose", [x], [(2, 48, 64)], {"perm": [0, 2, 1]})
    assert ops[0].entry == "hipep_transpose_tiled_w4"
    np.testing.assert_array_equal(y, x.transpose(0, 2, 1))
    (y,), ops = _run("::Transpose", [x.reshape(2, 8, 8, 48)], [(2, 48, 8, 8)], {"perm": [0, 3, 1, 2]})
    assert ops[0].entry == "hipep_transpose_tiled_w4"  # axes 1, 2 merge
    (y,), ops = _run("::Transpose", [x.reshape(2, 64, 3, 16)], [(2, 3, 64, 16)], {"perm": [0, 2, 1, 3]})
    assert ops[0].entry.startswith("hipep_copy_w16_r4")  # rows of 16 floats move as 16-byte words
    np.testing.assert_array_equal(y, x.reshape(2, 64, 3, 16).transpose(0, 2, 1, 3))


def test_slice_binding_with_steps_and_negative_bounds():
    from hipep.ops.shape import _slice

    rng = np.random.default_rng(1)
    x = rng.random((4, 10, 6)).astype(np.float32)
    cases = [([1, 0], [100, 8], [1, 2], [2, 3]), ([-1], [-100], [1], [-2]), ([0], [3], [-1], [1]),
             ([2, -3, 1], [4, -1, 5], [0, 1, 2], [1, 1, 1]), ([9], [2], [1], [-3]), ([0], [0], [0], [1])]
    for starts, ends, axes, steps in cases:
        ops = [np.array(v, np.int64) for v in (starts, ends, axes, steps)]
        want = _slice([x, *ops], {"starts": None, "ends": None, "axes": None})[0]
        (y,), _ = _run("::Slice", [x, *ops], [want.shape], {"starts": None, "ends": None, "axes": None,
                                                           SINCE_VERSION: 13})
        np.testing.assert_array_equal(y, want, err_msg=str((starts, ends, axes, steps)))


def test_expand_and_split_and_concat_bindings():
    rng = np.random.default_rng(2)
    x = rng.random((3, 1, 5)).astype(np.float16)
    (y,), _ = _run("::Expand", [x, np.array([2, 3, 4, 5], np.int64)], [(2, 3, 4, 5)], {})
    np.testing.assert_array_equal(y, np.broadcast_to(x, (2, 3, 4, 5)))

    x = rng.random((4, 9, 8)).astype(np.float32)
    outs, _ = _run("::Split", [x, np.array([2, 3, 4], np.int64)], [(4, 2, 8), (4, 3, 8), (4, 4, 8)],
                   {"axis": 1, OUTPUT_COUNT: 3, SINCE_VERSION: 18})
    for got, want in zip(outs, np.split(x, [2, 5], axis=1)):
        np.testing.assert_array_equal(got, want)

    parts = [rng.random((2, n, 3)).astype(np.float32) for n in (1, 4, 0, 2, 1, 1, 1, 1, 1, 1, 1)]
    (y,), ops = _run("::Concat", parts, [(2, 14, 3)], {"axis": 1})
    assert len(ops) == 2  # ten non-empty inputs: 8 per launch
    np.testing.assert_array_equal(y, np.concatenate(parts, axis=1))
    parts = [rng.random((3, 4)).astype(np.float16) for _ in range(3)]
    (y,), ops = _run("::Concat", parts, [(9, 4)], {"axis": 0})
    assert ops[0].entry == "hipep_concat_w8"
    np.testing.assert_array_equal(y, np.concatenate(parts, axis=0))


@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_gather_binding(itype):
    rng = np.random.default_rng(3)
    table = rng.random((10, 64)).astype(np.float16)
    idx = np.array([[1, -1, 3], [9, 0, 12]], itype)  # 12 is out of range: zeros
    (y,), ops = _run("::Gather", [table, idx], [(2, 3, 64)], {"axis": 0})
    assert ops[0].entry == f"hipep_gather_w16_{'i32' if itype == np.int32 else 'i64'}"
    want = table[np.where(idx < 0, idx + 10, np.minimum(idx, 9))]
    want[1, 2] = 0
    np.testing.assert_array_equal(y, want)
    data = rng.random((3, 5, 7)).astype(np.float32)
    (y,), _ = _run("::Gather", [data, np.array([4, 0], itype)], [(3, 2, 7)], {"axis": 1})
    np.testing.assert_array_equal(y, np.take(data, [4, 0], axis=1))


def test_reduction_blocks_agree_with_numpy():
    rng = np.random.default_rng(4)
    x = rng.random((2, 3, 1, 4, 5))
    for k in range(1, 6):
        for axes in itertools.combinations(range(5), k):
            res = gk.reduce_blocks(x.shape, list(axes), False)
            if isinstance(res, str):
                assert "not adjacent" in res
                continue
            outer, r, inner = res
            got = x.reshape(outer, r, inner).sum(axis=1)
            np.testing.assert_allclose(got.reshape(-1), x.sum(axis=axes).reshape(-1), err_msg=str(axes))
    assert gk.reduce_blocks(x.shape, [], True) == (x.size, 1, 1)
    assert gk.reduce_blocks(x.shape, [], False) == (1, x.size, 1)
    assert gk.reduce_blocks(x.shape, [1, 3], False) == (2, 12, 5)  # the extent-1 axis between does not count


def test_row_kernels_pick_warp_or_block_shapes():
    f32 = np.float32
    x = np.zeros((6, 3, 40), f32)
    ops = gk.BINDINGS["::Softmax"].bind([arg(x, SRC)], [out_arg(x.shape, f32)], {"axis": -1, SINCE_VERSION: 13},
                                        TARGET)
    assert ops[0].block == (32, 8, 1) and ops[0].grid == (3, 1, 1) and ops[0].entry == "hipep_softmax_f32_vec"
    x = np.zeros((2, 5000), f32)
    ops = gk.BINDINGS["::Softmax"].bind([arg(x, SRC + 4)], [out_arg(x.shape, f32)], {"axis": -1, SINCE_VERSION: 13},
                                        TARGET)
    assert ops[0].entry == "hipep_softmax_f32" and ops[0].grid == (2, 1, 1) and ops[0].block[0] % 32 == 0
    with pytest.raises(gk.NoKernel):
        gk.BINDINGS["::Softmax"].bind([arg(np.zeros((2, 3, 4), f32), SRC)], [out_arg((2, 3, 4), f32)],
                                      {"axis": 1, SINCE_VERSION: 13}, TARGET)
    # opset 11 flattens at the axis: one row per leading index
    ops = gk.BINDINGS["::Softmax"].bind([arg(np.zeros((2, 3, 4), f32), SRC)], [out_arg((2, 3, 4), f32)],
                                        {"axis": 1, SINCE_VERSION: 11}, TARGET)
    assert bytes(ops[0].params[2]) == bytes(gk.SoftmaxArgs(2, 12))


def test_skip_norm_binding_handles_broadcast_skip_and_missing_outputs():
    f16 = np.float16
    x, skip, g = np.zeros((2, 3, 64), f16), np.zeros((3, 64), f16), np.zeros(64, f16)
    ops = gk.BINDINGS["com.microsoft::SkipSimplifiedLayerNormalization"].bind(
        [arg(x, SRC), arg(skip, SRC + 0x1000), arg(g, SRC + 0x2000)], [out_arg(x.shape, f16)],
        {"epsilon": 1e-5}, TARGET)
    p = ops[0].params
    assert ops[0].entry == "hipep_skip_rms_norm_f16_vec" and p[3].value == 0 and p[5].value == 0
    assert (p[8].rows, p[8].n, p[8].skip_rows) == (6, 64, 3)


def test_pointwise_binding_broadcast_strides():
    f32 = np.float32
    a, b = np.zeros((4, 1, 5), f32), np.zeros((3, 1), f32)
    op = gk.binding_for("::Add").bind([arg(a, SRC), arg(b, SRC + 0x1000)], [out_arg((4, 3, 5), f32)],
                                      {OUTPUT_COUNT: 1, SINCE_VERSION: 14}, TARGET)[0]
    s = op.params[-1]
    dims = list(s.dims[:s.rank])
    assert int(np.prod(dims)) == s.n == 60
    out_idx = np.arange(60)
    coords = np.stack(np.unravel_index(out_idx, (4, 3, 5)), axis=1)
    for k, src in enumerate((a, b)):
        strides = list(s.strides[k][:s.rank])
        off = np.zeros(60, np.int64)
        rem = out_idx.copy()
        for d in range(s.rank - 1, -1, -1):
            off += (rem % dims[d]) * strides[d]
            rem //= dims[d]
        full = np.broadcast_to(np.arange(src.size).reshape(src.shape), (4, 3, 5))
        np.testing.assert_array_equal(off, full[tuple(coords.T)])
    # same shapes merge into one axis (the kernel's rank-1 path)
    op = gk.binding_for("::Mul").bind([arg(a, SRC), arg(a, SRC)], [out_arg(a.shape, f32)], {OUTPUT_COUNT: 1}, TARGET)[0]
    assert op.params[-1].rank == 1


def test_has_kernel_answers():
    f32 = "float32"
    assert gk.has_kernel("::Add", {}, [f32, f32])
    assert gk.has_kernel("hipep::FusedElementwise", {"nodes": [["in", f32, 0], ["exp", f32, 0]], "outputs": [1],
                                                     "broadcast": [0], "input_dtypes": [f32], "output_dtypes": [f32]},
                         [f32])
    assert not gk.has_kernel("::Einsum", {"equation": "ij,jk->ik"}, [f32, f32])
    assert gk.kernel_reason("::Einsum", {"equation": "ij,jk->ik"}, [f32, f32]) == "no kernel for cuda: Einsum"
    assert gk.has_kernel("::Pow", {}, [f32, f32], [(3,), ()], [None, np.array(2.0, np.float32)])
    assert not gk.has_kernel("::Pow", {}, ["int32", "int32"], [(3,), (3,)])
    assert gk.has_kernel("::ReduceMean", {"keepdims": 1}, [f32, "int64"], [(2, 3, 4), (1,)], [None, np.array([-1])])
    assert not gk.has_kernel("::ReduceMean", {"keepdims": 1}, [f32, "int64"], [(2, 3, 4), (2,)],
                             [None, np.array([0, 2])])
    assert not gk.has_kernel("::Softmax", {"axis": 0, SINCE_VERSION: 13}, [f32], [(2, 3)])
    assert gk.has_kernel("::Reshape", {}, [f32, "int64"])
    assert gk.has_kernel("com.microsoft::SkipSimplifiedLayerNormalization", {"epsilon": 1e-5}, ["float16"] * 3)


def _entry_points_named_by_bindings() -> set[tuple[str, str]]:
    """Every (module, entry) the bindings can name, by binding representative launches."""
    names: set[tuple[str, str]] = set()
    aligned, odd = SRC, SRC + 2
    float_types = [np.float32, np.float16, ml_dtypes.bfloat16]

    def add(ops):
        for op in ops:
            if isinstance(op, gk.KernelOp) and op.module:
                names.add((op.module, op.entry))

    for key in ("::ReduceSum", "::ReduceMean", "::ReduceMax"):
        for dt in float_types + [np.int32, np.int64]:
            for base in (aligned, odd) if dt in float_types else (aligned,):
                for shape, axes, out in (((4, 64), [-1], (4, 1)), ((4, 64, 3), [1], (4, 1, 3))):
                    x = np.zeros(shape, dt)
                    add(gk.BINDINGS[key].bind([arg(x, base), arg(np.array(axes), IDX, True)], [out_arg(out, dt)],
                                              {"keepdims": 1}, TARGET))
    for dt in float_types:
        for base in (aligned, odd):
            x = np.zeros((4, 64), dt)
            add(gk.BINDINGS["::Softmax"].bind([arg(x, base)], [out_arg(x.shape, dt)], {"axis": -1}, TARGET))
            for key in ("::SimplifiedLayerNormalization", "::RMSNormalization"):
                add(gk.BINDINGS[key].bind([arg(x, base), arg(np.zeros(64, dt), IDX)], [out_arg(x.shape, dt)],
                                          {"axis": -1, "epsilon": 1e-5}, TARGET))
            add(gk.BINDINGS["com.microsoft::SkipSimplifiedLayerNormalization"].bind(
                [arg(x, base), arg(x, base), arg(np.zeros(64, dt), IDX)], [out_arg(x.shape, dt)], {"epsilon": 1e-5},
                TARGET))
    for e, word_shapes in ((1, 16), (2, 8), (4, 4), (8, 2)):
        dt = {1: np.uint8, 2: np.float16, 4: np.float32, 8: np.int64}[e]
        for inner in (1, 2, 4, 8, 16):
            for it in (np.int32, np.int64):
                add(gk.BINDINGS["::Gather"].bind([arg(np.zeros((5, inner), dt), aligned), arg(np.zeros(3, it), IDX)],
                                                 [out_arg((3, inner), dt)], {"axis": 0}, TARGET))
                add(gk.BINDINGS["::Gather"].bind([arg(np.zeros((5, inner), dt), odd), arg(np.zeros(3, it), IDX)],
                                                 [out_arg((3, inner), dt)], {"axis": 0}, TARGET))
        for words in (1, 2, 4, 8, 16):
            x = np.zeros((3, 64, words), dt)
            add(gk.BINDINGS["::Concat"].bind([arg(x, aligned), arg(x, aligned)], [out_arg((6, 64, words), dt)],
                                             {"axis": 0}, TARGET))
            add(gk.BINDINGS["::Concat"].bind([arg(x, odd), arg(x, aligned)], [out_arg((6, 64, words), dt)],
                                             {"axis": 0}, TARGET))
        x = np.zeros((2, 64, 48), dt)
        add(gk.BINDINGS["::Transpose"].bind([arg(x, aligned)], [out_arg((2, 48, 64), dt)], {"perm": [0, 2, 1]}, TARGET))
    return names


def test_partition_for_a_gpu_leaves_nodes_without_a_program():
    """On a GPU device a node without a GPU program is not claimed ("no kernel for cuda"), unless
    it becomes host work (integer shape arithmetic on host values); symbolic dims are fine."""
    from onnx import TensorProto as TP
    from onnx import helper, numpy_helper

    from hipep.graph import GraphView
    from hipep.partition import partition

    n = helper.make_node
    nodes = [n("Softmax", ["x"], ["s"], axis=-1, name="sm"), n("Einsum", ["s", "w"], ["m"], equation="bij,jk->bik", name="mm"),
             n("Shape", ["x"], ["shape"], name="shape"), n("Gather", ["shape", "one"], ["t"], axis=0, name="take"),
             n("Range", ["zero", "t", "one_s"], ["r"], name="range"), n("Cast", ["r"], ["rf"], to=TP.FLOAT, name="cast"),
             n("Add", ["m", "rf"], ["y"], name="add"), n("ReduceSum", ["x", "axes02"], ["bad"], name="rsum"),
             n("Range", ["zero", "limit", "one_s"], ["r2"], name="range_of_input")]
    inits = [numpy_helper.from_array(np.ones((8, 8), np.float32), "w"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array(1, np.int64), "one_s"),
             numpy_helper.from_array(np.array([0, 2], np.int64), "axes02")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, ["b", 4, 8]),
                                           helper.make_tensor_value_info("limit", TP.INT64, [])],
                              [helper.make_tensor_value_info(v, TP.FLOAT, None) for v in ("y", "bad")] +
                              [helper.make_tensor_value_info("r2", TP.INT64, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    view = GraphView.from_onnx(model)
    assert not partition(view).rejections  # the CPU device runs everything
    report = partition(view, device="cuda")
    reasons = {r.node.name: r.reason for r in report.rejections}
    # Range of host values (Shape -> Gather) is host work; of a graph input (device memory) it is not
    assert set(reasons) == {"mm", "range_of_input", "rsum"}, reasons
    assert reasons["mm"] == "no kernel for cuda: Einsum"
    assert reasons["range_of_input"] == "no kernel for cuda: Range"
    assert "not adjacent" in reasons["rsum"]
