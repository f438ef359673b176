"""The MatMul/Gemm and layer-norm GPU bindings without a GPU: every launch they produce is run by a
numpy emulation of its kernels/gemm.hip or kernels/layer_norm.hip kernel, reading the argument
struct exactly as the kernel does (strides, batch offsets, steps, which blocks cover which outputs,
the alignment a vectorized entry assumes), and compared with the registry's reference."""
from __future__ import annotations

import ctypes

import ml_dtypes
import numpy as np
import pytest

from hipep.ops.registry import OUTPUT_COUNT, SINCE_VERSION, lookup
from hipep.runtime import gpu_kernels as gk
from hipep.runtime import gpu_linalg as gl

TARGET = gk.Target(sm_count=132, warp_size=32, scratch=lambda n: 0x900000)
BASE = 0x10000000


class Memory:
    """Arrays at fake, 256-byte aligned device addresses (plus an offset to misalign on purpose)."""

    def __init__(self):
        self.arrays: dict[int, np.ndarray] = {}
        self.next = BASE

    def put(self, a: np.ndarray, offset: int = 0, constant=False) -> gk.Arg:
        addr = self.next + offset
        self.next += (a.nbytes // 256 + 2) * 256
        self.arrays[addr] = np.ascontiguousarray(a).reshape(-1).copy()
        return gk.Arg(addr, tuple(a.shape), a.dtype, a if constant else None, constant)

    def out(self, shape, dtype) -> gk.Arg:
        a = np.full(int(np.prod(shape, dtype=np.int64)), np.nan, dtype)
        arg = self.put(a)
        return gk.Arg(arg.ptr, tuple(shape), np.dtype(dtype))

    def flat(self, p) -> np.ndarray | None:
        addr = p.value if isinstance(p, ctypes.c_uint64) else int(p)
        return None if addr == 0 else self.arrays[addr]

    def get(self, arg: gk.Arg) -> np.ndarray:
        return self.arrays[arg.ptr].reshape(arg.shape)


def _f32(a):
    return None if a is None else a.astype(np.float32)


def emulate_gemm(mem: Memory, op: gk.KernelOp) -> None:
    """One launch of kernels/gemm.hip: Y[z, m, n] = alpha * sum_k A(m, k) B(k, n) + beta * C(m, n),
    with the operands addressed through the struct's strides, over exactly the outputs the grid's
    blocks cover."""
    assert op.module == "gemm"
    g: gl.GemmArgs = op.params[-1]
    if op.entry.startswith("hipep_gemm_split_reduce"):
        P, C, Y = (mem.flat(p) for p in op.params[:3])
        P = P.view(np.float32)  # the workspace's bytes
        total = g.batch * g.m * g.n
        assert g.k_splits >= 2 and P.size >= g.k_splits * total
        v = P[:g.k_splits * total].reshape(g.k_splits, total).sum(axis=0, dtype=np.float32)
        v = (np.float32(g.alpha) * v).reshape(g.batch, g.m, g.n)
        if C is not None:
            mi, ni = np.arange(g.m), np.arange(g.n)
            v = v + np.float32(g.beta) * _f32(C)[mi[:, None] * g.c_sm + ni[None, :] * g.c_sn]
        assert op.grid[0] * op.block[0] >= 1
        Y[:total] = v.reshape(-1).astype(Y.dtype)
        return
    split = op.entry.endswith("_split")
    if split:
        A, B, P = (mem.flat(p) for p in op.params[:3])
        P, C, Y = P.view(np.float32), None, None
    else:
        A, B, C, Y = (mem.flat(p) for p in op.params[:4])
    dims = list(g.batch_dims[:g.batch_rank])
    assert int(np.prod(dims, dtype=np.int64)) == g.batch
    z = np.arange(g.batch)
    a_off, b_off, rem = np.zeros(g.batch, np.int64), np.zeros(g.batch, np.int64), z.copy()
    for d in range(g.batch_rank - 1, -1, -1):
        c = rem % dims[d]
        rem //= dims[d]
        a_off += c * g.a_batch[d]
        b_off += c * g.b_batch[d]
    mi, ki, ni = np.arange(g.m), np.arange(g.k), np.arange(g.n)
    a_idx = a_off[:, None, None] + mi[None, :, None] * g.a_sm + ki[None, None, :] * g.a_sk
    b_idx = b_off[:, None, None] + ki[None, :, None] * g.b_sk + ni[None, None, :] * g.b_sn
    for idx, arr in ((a_idx, A), (b_idx, B)):
        assert idx.size == 0 or (idx.min() >= 0 and idx.max() < arr.size), "read outside the operand"
    entry = op.entry.removesuffix("_split")
    vec = 1
    if entry.endswith("_vec"):
        vec = 4 if "_f32_" in entry else 8
    if split:  # partial sums per chunk of K, the chunks covering K once
        assert op.grid[1] == g.k_splits and g.k_chunk * g.k_splits >= g.k > g.k_chunk * (g.k_splits - 1)
        assert g.k_chunk % op.block[1] == 0
        parts = []
        for s_ in range(g.k_splits):
            ks = slice(s_ * g.k_chunk, min(g.k, (s_ + 1) * g.k_chunk))
            parts.append(np.matmul(_f32(A)[a_idx[:, :, ks]].astype(np.float64),
                                   _f32(B)[b_idx[:, ks, :]].astype(np.float64)).astype(np.float32))
        P[:g.k_splits * g.batch * g.m * g.n] = np.stack(parts).reshape(-1)
    acc = np.matmul(_f32(A)[a_idx].astype(np.float64), _f32(B)[b_idx].astype(np.float64)).astype(np.float32)
    v = np.float32(g.alpha) * acc
    if C is not None:
        v = v + np.float32(g.beta) * _f32(C)[mi[:, None] * g.c_sm + ni[None, :] * g.c_sn]
    covered = np.zeros((g.m, g.n), bool)
    gx, gy, gz = op.grid
    assert gz == min(g.batch, 65535) and gy <= 65535
    if entry.startswith("hipep_gemv_n"):
        lanes, groups, _ = op.block
        assert lanes * groups == gl.GEMV_THREADS and lanes <= TARGET.warp_size and lanes * vec <= gl.GEMV_MAX_COLS
        assert int(entry.split("_m")[1].split("_")[0]) >= g.m
        covered[:, :min(g.n, gx * lanes * vec)] = True
        if vec > 1:  # 16-byte loads of B: its pointer and every row start aligned, whole vectors per row
            assert g.n % vec == 0 and g.b_sn == 1
            starts = b_off[:, None] + ki[None, :] * g.b_sk
            assert ((starts * B.itemsize + _addr(op.params[1])) % (vec * B.itemsize) == 0).all()
    elif entry.startswith("hipep_gemv_t"):
        assert op.block == (TARGET.warp_size, gl.GEMV_THREADS // TARGET.warp_size, 1)
        assert g.b_sk == 1 and int(entry.split("_m")[1].split("_")[0]) >= g.m
        covered[:, :min(g.n, gx * op.block[1])] = True
        if vec > 1:
            assert g.k % vec == 0 and g.a_sk == 1
            b_starts = b_off[:, None] + ni[None, :] * g.b_sn
            a_starts = a_off[:, None] + mi[None, :] * g.a_sm
            assert ((b_starts * B.itemsize + _addr(op.params[1])) % (vec * B.itemsize) == 0).all()
            assert ((a_starts * A.itemsize + _addr(op.params[0])) % (vec * A.itemsize) == 0).all()
    else:
        tile = int(entry.rsplit("_", 1)[1])
        assert op.block == (gl.GEMM_THREADS, 1, 1)
        covered[:min(g.m, gy * tile), :min(g.n, gx * tile)] = True
    assert covered.all(), f"{entry}: the grid {op.grid} leaves outputs out"
    if not split:
        Y[:g.batch * g.m * g.n] = v.reshape(-1).astype(Y.dtype)


def _addr(p) -> int:
    return p.value if isinstance(p, ctypes.c_uint64) else int(p)


def emulate_layer_norm(mem: Memory, op: gk.KernelOp) -> None:
    skip = op.entry.startswith("hipep_skip")
    vec = 1
    if op.entry.endswith("_vec"):
        vec = 4 if "_f32" in op.entry else 8
    if skip:
        x, sk, gamma, beta, bias, y, mean, inv, total = (mem.flat(p) for p in op.params[:9])
    else:
        x, gamma, beta, y, mean, inv = (mem.flat(p) for p in op.params[:6])
        sk = bias = total = None
    a: gl.LayerNormArgs = op.params[-1]
    rows, n = a.rows, a.n
    # the rows the grid covers: one per warp (blockDim.y per block) or one per block
    assert op.grid[0] * op.block[1] >= rows
    if vec > 1:
        assert n % vec == 0 and a.scale_step == 1 and (beta is None or skip or a.bias_step == 1)
        for p in op.params[:-1]:
            assert _addr(p) % 16 == 0
    v = _f32(x)[:rows * n].reshape(rows, n)
    if skip:
        v = v + _f32(sk)[:a.skip_rows * n].reshape(a.skip_rows, n)[np.arange(rows) % a.skip_rows]
        if bias is not None:
            v = v + _f32(bias)[:n]
    m = v.mean(axis=1, dtype=np.float32)
    d = v - m[:, None]
    r = (np.float32(1) / np.sqrt((d * d).mean(axis=1, dtype=np.float32) + np.float32(a.eps))).astype(np.float32)
    e = np.arange(n)
    scale_step = 1 if skip else a.scale_step
    bias_step = 1 if skip else a.bias_step
    out = d * r[:, None] * _f32(gamma)[e * scale_step]
    if beta is not None:
        out = out + _f32(beta)[e * bias_step]
    y[:rows * n] = out.reshape(-1).astype(y.dtype)
    if mean is not None:
        mean[:rows] = m
    if inv is not None:
        inv[:rows] = r
    if total is not None:
        total[:rows * n] = v.reshape(-1).astype(total.dtype)


def run(op_key, inputs, attrs, n_out=1, offsets=None, omit_outputs=(), target=None):
    """Binds op_key for these inputs (None: omitted), emulates the launches and returns the
    outputs (None where omitted) and the ops."""
    domain, op_type = op_key.split("::")
    op = lookup(domain, op_type)
    attrs = {**{k: v for k, v in op.attributes.items() if not _required(v)}, **attrs,
             OUTPUT_COUNT: n_out, SINCE_VERSION: max(op.since_versions)}
    want = op.reference(list(inputs), attrs)
    mem = Memory()
    offsets = offsets or {}
    ins = [None if x is None else mem.put(x, offsets.get(k, 0), constant=k > 0) for k, x in enumerate(inputs)]
    outs = [None if j in omit_outputs else mem.out(w.shape, w.dtype) for j, w in enumerate(want[:n_out])]
    if target == "workspace":  # a stream's workspace, as the CUDA device gives
        def workspace(nbytes):
            return mem.put(np.zeros(nbytes, np.uint8)).ptr

        target = gk.Target(sm_count=TARGET.sm_count, warp_size=32, scratch=TARGET.scratch, workspace=workspace)
    ops = gk.binding_for(op_key).bind(ins, outs, attrs, target or TARGET)
    for o in ops:
        (emulate_gemm if o.module == "gemm" else emulate_layer_norm)(mem, o)
    return [None if o is None else mem.get(o) for o in outs], want[:n_out], ops


def _required(v):
    from hipep.ops.registry import REQUIRED

    return v is REQUIRED


def close(got, want, rtol=1e-5, atol=1e-5):
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=rtol, atol=atol)


MATMUL_SHAPES = [
    ((5,), (5,)), ((5,), (5, 3)), ((4, 5), (5,)), ((1, 7), (7, 9)), ((3, 7), (7, 9)), ((8, 64), (64, 33)),
    ((33, 17), (17, 65)), ((128, 64), (64, 128)), ((2, 3, 16), (16, 8)), ((1, 1, 64), (64, 4096)),
    ((2, 1, 4, 8), (3, 8, 5)), ((2, 3, 1, 8), (1, 8, 12)), ((6, 8), (2, 8, 6)), ((2, 3, 40, 8), (2, 3, 8, 40)),
    ((4, 1, 32), (4, 32, 7)), ((5, 2, 3, 4, 6, 8), (2, 1, 4, 8, 3)), ((7,), (3, 7, 2)), ((2, 3, 9, 7), (7,)),
    ((0, 4), (4, 3)), ((2, 0), (0, 3)),
]


@pytest.mark.parametrize("a_shape,b_shape", MATMUL_SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_matmul_binding_matches_the_reference(a_shape, b_shape, dtype):
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, a_shape).astype(dtype)
    b = rng.uniform(-1, 1, b_shape).astype(dtype)
    (got,), (want,), ops = run("::MatMul", [a, b], {})
    close(got, want, *((1e-5, 1e-5) if dtype == np.float32 else (2e-3, 2e-3)))


def test_matmul_picks_the_kernel_for_the_shape():
    f16 = np.float16
    z = np.zeros
    _, _, ops = run("::MatMul", [z((1, 1, 4096), f16), z((4096, 4096), f16)], {})
    assert ops[0].entry == "hipep_gemv_n_f16_m1_vec"
    # 4096 columns of 8 halves: 4 lanes per row give 128 blocks (the GPU has 132 multiprocessors)
    assert ops[0].block == (4, 64, 1) and ops[0].grid == (128, 1, 1)
    _, _, ops = run("::MatMul", [z((1, 5, 4096), f16), z((4096, 32000), f16)], {})
    assert ops[0].entry == "hipep_gemv_n_f16_m8_vec" and ops[0].block == (8, 32, 1)  # 500 blocks
    _, _, ops = run("::MatMul", [z((4, 4096), f16), z((4096, 1), f16)], {})
    assert ops[0].entry == "hipep_gemv_t_f16_m4_vec"  # a one-column B is contiguous along k
    _, _, ops = run("::MatMul", [z((3, 33, 64), np.float32), z((64, 64), np.float32)], {})
    assert ops[0].entry == "hipep_gemm_f32_64" and ops[0].params[4].m == 99 and ops[0].params[4].batch == 1
    _, _, ops = run("::MatMul", [z((4, 1024, 256), np.float32), z((4, 256, 1024), np.float32)], {})
    assert ops[0].entry == "hipep_gemm_f32_128" and ops[0].grid == (8, 8, 4)
    _, _, ops = run("::MatMul", [z((4, 512, 256), np.float32), z((4, 256, 512), np.float32)], {})
    assert ops[0].entry == "hipep_gemm_f32_64"  # 64 tiles of 128 would leave multiprocessors idle
    # misaligned B: the scalar gemv
    _, _, ops = run("::MatMul", [z((1, 64), f16), z((64, 64), f16)], {}, offsets={1: 2})
    assert ops[0].entry == "hipep_gemv_n_f16_m1"
    _, _, ops = run("::MatMul", [z((1, 64), f16), z((64, 63), f16)], {})
    assert ops[0].entry == "hipep_gemv_n_f16_m1"


GEMM_CASES = [
    ((8, 16), (16, 12), None, {}),
    ((16, 8), (16, 12), (12,), {"transA": 1}),
    ((8, 16), (12, 16), (8, 1), {"transB": 1, "alpha": 0.5, "beta": 2.0}),
    ((16, 33), (70, 16), (33, 70), {"transA": 1, "transB": 1, "beta": -1.0}),
    ((3, 40), (40, 5), (1, 5), {"alpha": 2.0}),
    ((1, 64), (100, 64), (100,), {"transB": 1}),
    ((4, 64), (64, 100), (), {"beta": 0.25}),
    ((64, 4), (100, 64), (4, 100), {"transA": 1, "transB": 1}),
    ((130, 70), (70, 129), (130, 129), {"beta": 0.0}),
    ((2, 3), (3, 4), (2, 4), {"alpha": 0.0}),
]


@pytest.mark.parametrize("a_shape,b_shape,c_shape,attrs", GEMM_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_gemm_binding_matches_the_reference(a_shape, b_shape, c_shape, attrs, dtype):
    rng = np.random.default_rng(1)
    ins = [rng.uniform(-1, 1, s).astype(dtype) for s in (a_shape, b_shape)]
    ins.append(None if c_shape is None else rng.uniform(-1, 1, c_shape).astype(dtype))
    if c_shape is None:
        ins = ins[:2]
    (got,), (want,), ops = run("::Gemm", ins, attrs)
    close(got, want, *((1e-5, 1e-5) if dtype == np.float32 else (2e-3, 2e-3)))
    if attrs.get("beta", 1.0) == 0.0:
        assert ops[0].params[2].value == 0  # C left out, as ONNX Runtime does


def test_matmul_check_reasons():
    f32 = "float32"
    assert gk.kernel_reason("::MatMul", {}, [f32, f32], [(None, None, 64), (64, 128)]) is None
    assert gk.kernel_reason("::MatMul", {}, ["int32", "int32"]) == "no kernel for cuda: MatMul (element type int32)"
    # six batch axes that cannot merge
    why = gk.kernel_reason("::MatMul", {}, [f32, f32], [(2, 1, 2, 1, 2, 1, 4, 4), (1, 2, 1, 2, 1, 2, 4, 4)])
    assert why is not None and "batch axes" in why
    assert gk.kernel_reason("::Gemm", {}, ["float16"] * 3) is None
    assert gk.kernel_reason("::LayerNormalization", {"axis": -1}, [f32, f32], [(2, 8, 64), (64,)]) is None
    why = gk.kernel_reason("::LayerNormalization", {"axis": 1}, [f32, f32], [(2, 8, 64), (1, 64)])
    assert why is not None and "broadcasts within the normalized axes" in why
    assert gk.kernel_reason("com.microsoft::SkipLayerNormalization", {}, ["float16"] * 3) is None


LN_CASES = [((2, 8, 64), -1, (64,), (64,)), ((3, 5, 7), 1, (5, 7), None), ((4, 96), 0, (4, 96), (4, 96)),
            ((2, 3, 4096), -1, (4096,), (4096,)), ((6, 10), -1, (1,), (10,)), ((2, 2, 8), 2, (1, 1, 8), (1,)),
            ((5, 33), -1, (33,), None), ((1, 1, 3000), -1, (3000,), (3000,))]


@pytest.mark.parametrize("x_shape,axis,s_shape,b_shape", LN_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_layer_norm_binding_matches_the_reference(x_shape, axis, s_shape, b_shape, dtype):
    rng = np.random.default_rng(2)
    x = rng.uniform(-2, 3, x_shape).astype(dtype)
    ins = [x, rng.uniform(0.5, 1.5, s_shape).astype(dtype)]
    if b_shape is not None:
        ins.append(rng.uniform(-1, 1, b_shape).astype(dtype))
    got, want, ops = run("::LayerNormalization", ins, {"axis": axis, "epsilon": 1e-5}, n_out=3)
    t = (1e-5, 1e-5) if dtype == np.float32 else (2e-2, 2e-2)
    for g, w in zip(got, want):
        close(g, w, *t)
    steps_one = all(int(np.prod(s[axis:] if len(s) == len(x_shape) else s)) > 1 for s in [s_shape] +
                    ([b_shape] if b_shape else []))
    n = int(np.prod(x_shape[axis:]))
    vec = 4 if dtype == np.float32 else 8
    assert ops[0].entry.endswith("_vec") == (n % vec == 0 and steps_one)


def test_layer_norm_binding_with_omitted_statistics_and_misaligned_rows():
    x = np.random.default_rng(3).uniform(-1, 1, (3, 64)).astype(np.float32)
    s = np.ones(64, np.float32)
    got, want, ops = run("::LayerNormalization", [x, s], {"axis": -1}, n_out=3, omit_outputs=(1, 2))
    close(got[0], want[0])
    assert ops[0].params[4].value == 0 and ops[0].params[5].value == 0
    _, _, ops = run("::LayerNormalization", [x, s], {"axis": -1}, n_out=1, offsets={0: 4})
    assert ops[0].entry == "hipep_layer_norm_f32"


SKIP_CASES = [((2, 3, 64), (2, 3, 64), True, True), ((2, 3, 64), (3, 64), False, True),
              ((2, 3, 64), (1, 3, 64), True, False), ((4, 33), (4, 33), False, False),
              ((1, 5, 4096), (1, 5, 4096), True, True)]


@pytest.mark.parametrize("x_shape,skip_shape,with_beta,with_bias", SKIP_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_skip_layer_norm_binding_matches_the_reference(x_shape, skip_shape, with_beta, with_bias, dtype):
    rng = np.random.default_rng(4)
    h = x_shape[-1]
    ins = [rng.uniform(-2, 2, x_shape).astype(dtype), rng.uniform(-2, 2, skip_shape).astype(dtype),
           rng.uniform(0.5, 1.5, h).astype(dtype),
           rng.uniform(-1, 1, h).astype(dtype) if with_beta else None,
           rng.uniform(-1, 1, h).astype(dtype) if with_bias else None]
    while ins[-1] is None:
        ins.pop()
    got, want, ops = run("com.microsoft::SkipLayerNormalization", ins, {"epsilon": 1e-5}, n_out=4)
    t = (1e-5, 1e-5) if dtype == np.float32 else (2e-2, 2e-2)
    for g, w in zip(got, want):
        close(g, w, *t)
    assert ops[0].params[-1].skip_rows == int(np.prod(skip_shape[:-1]))


def test_every_entry_point_these_bindings_name_exists_in_the_compiled_modules():
    from hipep.runtime import kernel_cache

    try:
        kernel_cache.nvrtc_version()
        kernel_cache.cuda_include_dir()
    except Exception:
        pytest.skip("nvidia-cuda-nvrtc (cuda-bindings) is not installed")
    named: set[tuple[str, str]] = set()
    for dtype in (np.float32, np.float16, ml_dtypes.bfloat16):
        for off in (0, 2):
            mem = Memory()
            for a_shape, b_shape in [((1, 64), (64, 64)), ((3, 64), (64, 64)), ((8, 64), (64, 64)),
                                     ((2, 64), (64, 64)), ((33, 64), (64, 64)), ((4, 1024, 256), (4, 256, 1024)),
                                     ((1, 64), (64, 1)), ((2, 64), (64, 1)), ((4, 64), (64, 1)), ((8, 64), (64, 1))]:
                a, b = np.zeros(a_shape, dtype), np.zeros(b_shape, dtype)
                shape = np.matmul(a.astype(np.float32), b.astype(np.float32)).shape
                ops = gk.binding_for("::MatMul").bind([mem.put(a), mem.put(b, off)], [mem.out(shape, dtype)], {},
                                                      TARGET)
                named |= {(o.module, o.entry) for o in ops}
            split_target = gk.Target(sm_count=132, warp_size=32, scratch=TARGET.scratch, workspace=lambda n: 0x7000000)
            for rows in (1, 2, 4, 8):
                a, b = np.zeros((rows, 4096), dtype), np.zeros((4096, 64), dtype)
                ops = gk.binding_for("::MatMul").bind([mem.put(a), mem.put(b)], [mem.out((rows, 64), dtype)], {},
                                                      split_target)
                named |= {(o.module, o.entry) for o in ops}
            x = np.zeros((4, 64), dtype)
            ops = gk.binding_for("::LayerNormalization").bind(
                [mem.put(x, off), mem.put(np.zeros(64, dtype)), mem.put(np.zeros(64, dtype))],
                [mem.out(x.shape, dtype)], {"axis": -1, "epsilon": 1e-5}, TARGET)
            ops += gk.binding_for("com.microsoft::SkipLayerNormalization").bind(
                [mem.put(x, off), mem.put(x), mem.put(np.zeros(64, dtype))], [mem.out(x.shape, dtype)],
                {"epsilon": 1e-5}, TARGET)
            named |= {(o.module, o.entry) for o in ops}
    assert len(named) >= 40
    cubins = {m: kernel_cache.compile_cubin(kernel_cache.module_source(m), m, "sm_90", {"HIPEP_WARP_SIZE": 32})[0]
              for m in ("gemm", "layer_norm")}
    for module, entry in sorted(named):
        assert entry.encode() + b"\0" in cubins[module], f"{module}: {entry}"


def _column_major_product(op_a, op_b, lt_a, lt_b, a_flat, b_flat, a_off, b_off):
    """cuBLASLt's D = op(A) @ op(B) on column-major stored matrices (rows, cols, ld)."""
    from hipep.runtime import cublaslt

    def stored(flat, off, rows, cols, ld):
        idx = off + np.arange(rows)[:, None] + np.arange(cols)[None, :] * ld
        return flat[idx].astype(np.float64)

    a = stored(a_flat, a_off, *lt_a)
    b = stored(b_flat, b_off, *lt_b)
    a = a.T if op_a == cublaslt.CUBLAS_OP_T else a
    b = b.T if op_b == cublaslt.CUBLAS_OP_T else b
    return a @ b


@pytest.mark.parametrize("case", ["matmul", "batched", "broadcast", "gemm_ta", "gemm_tb", "gemm_tab", "one_row",
                                  "one_col"])
def test_cublaslt_operands_compute_the_row_major_product(case):
    """The column-major operands and batch strides hipep hands cuBLASLt give Y = A @ B row-major."""
    from hipep.runtime import cublaslt

    rng = np.random.default_rng(5)
    if case.startswith("gemm"):
        ta, tb = case in ("gemm_ta", "gemm_tab"), case in ("gemm_tb", "gemm_tab")
        m, k, n = 5, 7, 3
        a = rng.uniform(-1, 1, (k, m) if ta else (m, k)).astype(np.float32)
        b = rng.uniform(-1, 1, (n, k) if tb else (k, n)).astype(np.float32)
        p = gl.gemm_problem({"transA": int(ta), "transB": int(tb), "alpha": 1.0, "beta": 0.0}, a.shape, b.shape, None)
        want = (a.T if ta else a) @ (b.T if tb else b)
    else:
        shapes = {"matmul": ((6, 4), (4, 9)), "batched": ((3, 6, 4), (3, 4, 9)), "broadcast": ((6, 4), (3, 4, 9)),
                  "one_row": ((4,), (4, 9)), "one_col": ((6, 4), (4,))}[case]
        a = rng.uniform(-1, 1, shapes[0]).astype(np.float32)
        b = rng.uniform(-1, 1, shapes[1]).astype(np.float32)
        p = gl.matmul_problem(a.shape, b.shape)
        want = np.matmul(a, b)
    assert len(p.batch_dims) <= 1
    lt_a, op_a, lt_b, op_b = cublaslt.column_major_operands(p.m, p.n, p.k, p.a_sm, p.a_sk, p.b_sk, p.b_sn)
    out = []
    for z in range(p.batch):
        sa = p.a_batch[0] * z if p.a_batch else 0
        sb = p.b_batch[0] * z if p.b_batch else 0
        d = _column_major_product(op_a, op_b, lt_a, lt_b, b.reshape(-1), a.reshape(-1), sb, sa)  # n x m
        assert d.shape == (p.n, p.m)
        out.append(d.T)  # column-major n x m with ld n is row-major m x n
    got = np.stack(out).reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for rows, cols, ld in (lt_a, lt_b):
        assert ld >= rows >= 1 or rows == 0


def test_gemm_mode_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("HIPEP_GEMM", "own")
    assert gl.gemm_mode() == "own"
    monkeypatch.delenv("HIPEP_GEMM")
    assert gl.gemm_mode() == "auto"
    monkeypatch.setenv("HIPEP_GEMM", "fast")
    with pytest.raises(Exception, match="HIPEP_GEMM='fast'"):
        gl.gemm_mode()
    # without a stream workspace (no CUDA stream) the own kernels run whatever the mode
    monkeypatch.setenv("HIPEP_GEMM", "blas")
    _, _, ops = run("::MatMul", [np.zeros((33, 64), np.float32), np.zeros((64, 64), np.float32)], {})
    assert ops[0].entry == "hipep_gemm_f32_64"


@pytest.mark.parametrize("a_shape,b_shape", [((1, 4096), (4096, 256)), ((3, 2048), (2048, 64)), ((8, 3000), (3000, 96)),
                                             ((2, 1, 1024), (2, 1024, 32))])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_a_narrow_gemv_splits_k_among_blocks(a_shape, b_shape, dtype):
    rng = np.random.default_rng(6)
    a = rng.uniform(-1, 1, a_shape).astype(dtype)
    b = rng.uniform(-1, 1, b_shape).astype(dtype)
    (got,), (want,), ops = run("::MatMul", [a, b], {}, target="workspace")
    assert [o.entry.split("_m")[0] for o in ops] == [f"hipep_gemv_n_{gk._DT[np.dtype(dtype).name]}",
                                                     f"hipep_gemm_split_reduce_{gk._DT[np.dtype(dtype).name]}"]
    assert ops[0].grid[1] > 1
    tol = (1e-5, 1e-4) if dtype == np.float32 else (2e-3, 2e-3)  # sums of thousands of terms in another order
    close(got, want, *tol)
    # Gemm's C goes into the reduction's epilogue
    c = rng.uniform(-1, 1, (b_shape[-1],)).astype(dtype)
    if len(a_shape) == 2:
        (got,), (want,), ops = run("::Gemm", [a, b, c], {"alpha": 0.5, "beta": 2.0}, target="workspace")
        assert ops[-1].entry.startswith("hipep_gemm_split_reduce")
        close(got, want, *tol)


def test_which_products_go_to_cublaslt(monkeypatch):
    """With cuBLASLt loaded (a stand-in records the plans asked for): auto takes products of more
    than 8 rows, blas every one it can express; Gemm's C goes as a full matrix (beta), as the bias
    epilogue (one value per column, beta 1) or not at all (the own kernels run it)."""
    from hipep.runtime import cublaslt

    asked = []

    class Plan:
        workspace_size = 1 << 20

        def run(self, *args):
            return None

    def fake_plan(device, dt, m, n, k, a_sm, a_sk, b_sk, b_sn, batch, a_batch, b_batch, pointers, bias=0):
        asked.append(dict(m=m, n=n, k=k, batch=batch, a_batch=a_batch, b_batch=b_batch, bias=bias))
        return Plan()

    monkeypatch.setattr(cublaslt, "status", lambda: (True, "stand-in"))
    monkeypatch.setattr(cublaslt, "matmul_plan", fake_plan)
    target = gk.Target(sm_count=132, warp_size=32, scratch=TARGET.scratch, workspace=lambda n: 0x7000000)
    f16 = np.dtype(np.float16)

    def bind(op_key, shapes, attrs, mode):
        monkeypatch.setenv("HIPEP_GEMM", mode)
        mem = Memory()
        ins = [None if s is None else mem.put(np.zeros(s, f16)) for s in shapes]
        if op_key == "::MatMul":
            out = np.matmul(np.zeros(shapes[0], np.float32), np.zeros(shapes[1], np.float32)).shape
        else:
            out = (shapes[0][1] if attrs.get("transA") else shapes[0][0], shapes[1][0] if attrs.get("transB") else shapes[1][1])
        asked.clear()
        return gk.binding_for(op_key).bind(ins, [mem.out(out, f16)], attrs, target)

    ops = bind("::MatMul", [(2, 16, 64), (64, 32)], {}, "auto")
    assert isinstance(ops[0], gk.BlasOp) and asked == [dict(m=32, n=32, k=64, batch=1, a_batch=0, b_batch=0, bias=0)]
    assert ops[0].call(0) is None
    assert isinstance(bind("::MatMul", [(1, 4, 64), (64, 32)], {}, "auto")[0], gk.KernelOp)  # 4 rows: the GEMV
    assert isinstance(bind("::MatMul", [(1, 4, 64), (64, 32)], {}, "blas")[0], gk.BlasOp)
    assert isinstance(bind("::MatMul", [(2, 16, 64), (64, 32)], {}, "own")[0], gk.KernelOp)
    ops = bind("::MatMul", [(6, 16, 64), (6, 64, 32)], {}, "auto")
    assert isinstance(ops[0], gk.BlasOp) and asked[0]["batch"] == 6 and asked[0]["a_batch"] == 16 * 64
    ops = bind("::MatMul", [(16, 64), (3, 64, 32)], {}, "auto")  # A broadcasts over the batch: stride 0
    assert isinstance(ops[0], gk.BlasOp) and (asked[0]["a_batch"], asked[0]["b_batch"]) == (0, 64 * 32)
    assert isinstance(bind("::MatMul", [(2, 3, 16, 64), (3, 64, 32)], {}, "blas")[0], gk.KernelOp)  # two batch axes
    # Gemm: a Linear's bias through the epilogue; a full C with its beta; a column of C: own kernels
    ops = bind("::Gemm", [(16, 64), (32, 64), (32,)], {"transB": 1}, "auto")
    assert isinstance(ops[0], gk.BlasOp) and asked[0]["bias"] != 0
    ops = bind("::Gemm", [(16, 64), (64, 32), (16, 32)], {"beta": 0.5}, "auto")
    assert isinstance(ops[0], gk.BlasOp) and asked[0]["bias"] == 0 and 0.5 in ops[0].key
    assert isinstance(bind("::Gemm", [(16, 64), (64, 32), (32,)], {"beta": 0.5}, "auto")[0], gk.KernelOp)
    assert isinstance(bind("::Gemm", [(16, 64), (64, 32), (16, 1)], {}, "blas")[0], gk.KernelOp)
