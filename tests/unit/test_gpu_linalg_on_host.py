"""kernels/gemm.hip and kernels/layer_norm.hip (with kernels/copy.hip and kernels/reduce.hip: Conv's
and MaxPool's windows and their products and reductions; kernels/pool.hip: MaxPool's Indices and
integer types, AveragePool, whose comparison with ONNX Runtime bit for bit is
test_average_pool_on_host.py's) run on the CPU: g++ compiles the unchanged kernel
source against a host stand-in for the CUDA headers (tests/unit/host_cuda: every GPU thread of a
block a host thread, __syncthreads and warp shuffles as barriers), and the launches the bindings
give (grid, block, parameter struct) are run block by block over host memory, then compared with
numpy. This checks what the numpy emulation of the bindings cannot: the kernels' own thread
mappings, tiles, k-group reductions, register blocks and tails. Skipped without g++."""
from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from hipep.ops.registry import OUTPUT_COUNT
from hipep.runtime import gpu_kernels as gk

from helpers import needs_nvrtc
from unit.host_kernels import HostMemory, compile_module, launch, run_on_host

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


def _build(out: Path, warp: int) -> dict:
    # "dir": where the generated pointwise kernels some launches take are compiled
    modules = ("gemm", "layer_norm", "copy", "reduce", "pool")
    return {"warp": warp, "dir": out, "generated": {}, **{m: compile_module(out, m, warp) for m in modules}}


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("host_kernels"), 32)


@pytest.fixture(scope="module")
def libraries64(tmp_path_factory):
    """The kernels as AMD's CDNA GPUs run them: 64-lane warps (HIPEP_WARP_SIZE=64)."""
    return _build(tmp_path_factory.mktemp("host_kernels64"), 64)


def run(libs, op_key, inputs, attrs, **kw):
    return run_on_host(libs, op_key, inputs, attrs, **kw)


def close(got, want, tol):
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol)


MATMUL = [((1, 64), (64, 64), 0), ((3, 1000), (1000, 24), 0), ((8, 2048), (2048, 40), 0), ((5, 300), (300, 1), 0),
          ((4, 64), (64, 33), 2), ((2, 3, 1, 8), (1, 8, 12), 0), ((130, 20), (20, 70), 0), ((2, 40, 24), (2, 24, 72), 2),
          ((7,), (3, 7, 2), 0), ((33, 17), (17, 65), 0)]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("a_shape,b_shape,offset", MATMUL)
def test_matmul_kernels(libraries, dtype, a_shape, b_shape, offset):
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, a_shape).astype(dtype)
    b = rng.uniform(-1, 1, b_shape).astype(dtype)
    for sm_count in (1, 132):  # the 128 and 64 tiles, wide and narrow gemv blocks
        (got,), _, ops = run(libraries, "::MatMul", [a, b], {}, offsets={1: offset}, sm_count=sm_count)
        want = np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(dtype)
        close(got, want, 1e-5 if dtype == np.float32 else 3e-3)


def test_bf16_products(libraries):
    rng = np.random.default_rng(1)
    bf16 = ml_dtypes.bfloat16
    for a_shape, b_shape in (((2, 64), (64, 48)), ((2, 64), (64, 1)), ((20, 16), (16, 40))):
        a = rng.uniform(-1, 1, a_shape).astype(bf16)
        b = rng.uniform(-1, 1, b_shape).astype(bf16)
        mem = HostMemory()
        want = np.matmul(a.astype(np.float64), b.astype(np.float64))
        out, view = mem.put(np.full(want.shape, np.nan, bf16))
        ops = gk.binding_for("::MatMul").bind([mem.put(a)[0], mem.put(b)[0]], [gk.Arg(out.ptr, out.shape, out.dtype)],
                                              {}, gk.Target(warp_size=32, scratch=lambda n: 0))
        for o in ops:
            launch(libraries[o.module], o)
        close(view, want, 2e-2)


@pytest.mark.parametrize("a_shape,b_shape,offset", [((1, 64), (64, 20), 0), ((3, 40), (40, 17), 1),
                                                     ((2, 3, 1, 8), (1, 8, 12), 0), ((7,), (3, 7, 2), 3),
                                                     ((33, 17), (17, 5), 0), ((2, 20, 18), (2, 18, 3), 0)])
def test_double_products(libraries, a_shape, b_shape, offset):
    """gemm_f64: 16 x 16 tiles over edges, broadcast batches, a 1-D operand, K past one slice."""
    rng = np.random.default_rng(3)
    a, b = rng.uniform(-1, 1, a_shape), rng.uniform(-1, 1, b_shape)
    (got,), _, ops = run(libraries, "::MatMul", [a, b], {}, offsets={1: offset})
    assert [o.entry for o in ops] == ["hipep_gemm_f64"]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, np.matmul(a, b), rtol=1e-13, atol=1e-14)


GEMM = [((8, 16), (12, 16), (8, 1), {"transB": 1, "alpha": 0.5, "beta": 2.0}),
        ((16, 33), (70, 16), (33, 70), {"transA": 1, "transB": 1, "beta": -1.0}),
        ((1, 64), (100, 64), (100,), {"transB": 1}), ((16, 8), (16, 12), (12,), {"transA": 1}),
        ((72, 40), (5, 40), (72, 5), {"transB": 1}), ((4, 64), (64, 100), (), {"beta": 0.25})]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("a_shape,b_shape,c_shape,attrs", GEMM)
def test_gemm_kernels(libraries, dtype, a_shape, b_shape, c_shape, attrs):
    rng = np.random.default_rng(2)
    ins = [rng.uniform(-1, 1, s).astype(dtype) for s in (a_shape, b_shape, c_shape)]
    (got,), (want,), _ = run(libraries, "::Gemm", ins, attrs)
    close(got, want, 1e-5 if dtype == np.float32 else 3e-3)


LAYER_NORM = [((2, 8, 64), -1, (64,), (64,)), ((3, 5, 7), 1, (5, 7), None), ((2, 3, 2048), -1, (2048,), (2048,)),
              ((6, 10), -1, (1,), (10,)), ((1, 9, 300), -1, (300,), (300,))]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("x_shape,axis,s_shape,b_shape", LAYER_NORM)
def test_layer_norm_kernels(libraries, dtype, x_shape, axis, s_shape, b_shape):
    rng = np.random.default_rng(3)
    ins = [rng.uniform(-2, 3, x_shape).astype(dtype), rng.uniform(0.5, 1.5, s_shape).astype(dtype)]
    if b_shape is not None:
        ins.append(rng.uniform(-1, 1, b_shape).astype(dtype))
    got, want, _ = run(libraries, "::LayerNormalization", ins, {"axis": axis, "epsilon": 1e-5}, n_out=3)
    for g, w in zip(got, want):
        close(g, w, 1e-5 if dtype == np.float32 else 2e-2)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("x_shape,skip_shape,beta,bias", [((2, 3, 64), (3, 64), True, True),
                                                          ((4, 33), (4, 33), False, False),
                                                          ((1, 5, 2048), (1, 5, 2048), True, False)])
def test_skip_layer_norm_kernels(libraries, dtype, x_shape, skip_shape, beta, bias):
    rng = np.random.default_rng(4)
    h = x_shape[-1]
    ins = [rng.uniform(-2, 2, x_shape).astype(dtype), rng.uniform(-2, 2, skip_shape).astype(dtype),
           rng.uniform(0.5, 1.5, h).astype(dtype), rng.uniform(-1, 1, h).astype(dtype) if beta else None,
           rng.uniform(-1, 1, h).astype(dtype) if bias else None]
    while ins[-1] is None:
        ins.pop()
    got, want, _ = run(libraries, "com.microsoft::SkipLayerNormalization", ins, {"epsilon": 1e-5}, n_out=4)
    for g, w in zip(got, want):
        close(g, w, 1e-5 if dtype == np.float32 else 2e-2)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("a_shape,b_shape,c", [((2, 1024), (1024, 32), False), ((3, 2048), (2048, 64), True),
                                               ((1, 1500), (1500, 16), True)])
def test_split_gemv_kernels(libraries, dtype, a_shape, b_shape, c):
    """A narrow B on a GPU of 8 multiprocessors: K split among blocks, partial sums reduced."""
    rng = np.random.default_rng(5)
    ins = [rng.uniform(-1, 1, a_shape).astype(dtype), rng.uniform(-1, 1, b_shape).astype(dtype)]
    if c:
        ins.append(rng.uniform(-1, 1, b_shape[-1]).astype(dtype))
    (got,), (want,), ops = run(libraries, "::Gemm" if c else "::MatMul", ins, {"beta": 0.5} if c else {},
                               sm_count=8, workspace=True)
    assert ops[0].entry.endswith("_split") and ops[0].grid[1] > 1 and ops[1].entry.startswith("hipep_gemm_split_reduce")
    close(got, want, 1e-4 if dtype == np.float32 else 3e-3)


def test_kernels_with_64_lane_warps(libraries64):
    """gemv_n's k groups within a warp, gemv_t's warp per column, the split GEMV and the norms'
    warp and block sums with AMD's warp size."""
    rng = np.random.default_rng(6)
    for dtype in (np.float32, np.float16):
        tol = 1e-5 if dtype == np.float32 else 3e-3
        for a_shape, b_shape, sm_count, workspace in (((3, 1000), (1000, 24), 132, False), ((5, 300), (300, 1), 132, False),
                                                      ((2, 64), (64, 128), 1, False), ((33, 17), (17, 65), 132, False),
                                                      ((2, 1024), (1024, 32), 8, True)):
            a = rng.uniform(-1, 1, a_shape).astype(dtype)
            b = rng.uniform(-1, 1, b_shape).astype(dtype)
            (got,), _, ops = run(libraries64, "::MatMul", [a, b], {}, sm_count=sm_count, workspace=workspace)
            want = np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(dtype)
            close(got, want, 1e-4 if workspace and dtype == np.float32 else tol)
        ins = [rng.uniform(-1, 1, (8, 16)).astype(dtype), rng.uniform(-1, 1, (12, 16)).astype(dtype),
               rng.uniform(-1, 1, (8, 1)).astype(dtype)]
        (got,), (want,), _ = run(libraries64, "::Gemm", ins, {"transB": 1, "alpha": 0.5, "beta": 2.0})
        close(got, want, tol)
        for x_shape in ((2, 8, 64), (1, 9, 300), (2, 3, 2048)):
            h = x_shape[-1]
            ins = [rng.uniform(-2, 3, x_shape).astype(dtype), rng.uniform(0.5, 1.5, h).astype(dtype),
                   rng.uniform(-1, 1, h).astype(dtype)]
            got, want, _ = run(libraries64, "::LayerNormalization", ins, {"axis": -1, "epsilon": 1e-5}, n_out=3)
            for g, w in zip(got, want):
                close(g, w, 1e-5 if dtype == np.float32 else 2e-2)
            ins = [ins[0], rng.uniform(-2, 2, x_shape).astype(dtype), ins[1], ins[2]]
            got, want, _ = run(libraries64, "com.microsoft::SkipLayerNormalization", ins, {"epsilon": 1e-5}, n_out=4)
            for g, w in zip(got, want):
                close(g, w, 1e-5 if dtype == np.float32 else 2e-2)


CONV = [  # (X, W, bias, attributes)
    ((1, 3, 28, 28), (16, 3, 14, 14), True, {"strides": [14, 14]}),  # a ViT patch embedding
    ((2, 4, 8, 8), (6, 4, 1, 1), False, {}),  # 1x1
    ((1, 4, 9, 11), (6, 2, 3, 2), True, {"strides": [2, 3], "dilations": [2, 1], "group": 2}),  # bias per group
    ((2, 6, 7, 7), (6, 2, 3, 3), False, {"group": 3, "strides": [2, 2]}),
    ((1, 3, 4, 28, 28), (8, 3, 2, 14, 14), True, {"strides": [2, 14, 14]}),  # a video patch embedding
    ((3, 5, 20), (7, 5, 4), True, {"strides": [4], "auto_pad": "VALID"}),
    # windows reaching into the padding: zeros there
    ((1, 3, 9, 9), (4, 3, 3, 3), True, {"pads": [1, 1, 1, 1]}),
    ((2, 4, 10, 7), (6, 2, 3, 3), True, {"pads": [2, 0, 1, 3], "strides": [2, 1], "dilations": [1, 2], "group": 2}),
    ((1, 80, 30), (16, 80, 3), True, {"pads": [1, 1]}),  # Whisper's first convolution
    ((1, 2, 5, 6, 6), (3, 2, 3, 3, 3), False, {"auto_pad": "SAME_UPPER", "strides": [2, 2, 2]}),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("x_shape,w_shape,bias,attrs", CONV)
def test_conv_without_padding_is_windows_then_a_product(libraries, dtype, x_shape, w_shape, bias, attrs):
    rng = np.random.default_rng(3)
    ins = [rng.uniform(-1, 1, x_shape).astype(dtype), rng.uniform(-1, 1, w_shape).astype(dtype)]
    if bias:
        ins.append(rng.uniform(-1, 1, w_shape[0]).astype(dtype))
    (got,), (want,), ops = run(libraries, "::Conv", ins, attrs, workspace=True)
    assert any(getattr(o, "module", None) == "gemm" for o in ops)
    close(got, want, 1e-5 if dtype == np.float32 else 3e-3)


def test_conv_claims_on_the_gpu():
    def reason(attrs, shapes, dtypes=("float32", "float32")):
        return gk.kernel_reason("::Conv", {"group": 1, **attrs}, list(dtypes), shapes)

    assert reason({"pads": [1, 1, 1, 1]}, [(1, 3, 8, 8), (4, 3, 3, 3)]) is None
    assert reason({"auto_pad": "SAME_UPPER"}, [(1, 3, None, None), (4, 3, 3, 3)]) is None
    assert "4 spatial axes" in reason({}, [(1, 3, 4, 4, 4, 4), (4, 3, 1, 1, 1, 1)])
    assert "groups with a bias" in reason({"group": 16}, [(1, 16, 8, 8), (16, 1, 3, 3), (16,)],
                                          ("float32", "float32", "float32"))
    assert "element type" in reason({}, [(1, 3, 8, 8), (4, 3, 3, 3)], ("float64", "float64"))


POOLS = [  # (op, X, attributes)
    ("MaxPool", (1, 3, 9, 9), {"kernel_shape": [3, 3], "strides": [2, 2]}),
    ("MaxPool", (2, 4, 8, 7), {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1], "dilations": [1, 2]}),
    ("MaxPool", (1, 2, 10, 10), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("MaxPool", (1, 3, 12), {"kernel_shape": [4], "auto_pad": "SAME_UPPER", "strides": [3]}),
    ("AveragePool", (1, 3, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("AveragePool", (2, 2, 7, 7), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("AveragePool", (1, 2, 4, 6, 6), {"kernel_shape": [2, 3, 3], "strides": [2, 3, 3]}),
    ("AveragePool", (2, 3, 7, 7), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),  # each window by its inputs
    ("AveragePool", (1, 2, 7, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 0, 0], "ceil_mode": 1,
                                   "count_include_pad": 1}),  # the last rows' windows past the padding
    ("GlobalAveragePool", (2, 5, 7, 3), {}),
    ("GlobalMaxPool", (2, 5, 9), {}),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("op_type,shape,attrs", POOLS, ids=[f"{p[0]}-{i}" for i, p in enumerate(POOLS)])
def test_pools(libraries, dtype, op_type, shape, attrs):
    x = np.random.default_rng(6).uniform(-4, 4, shape).astype(dtype)
    (got,), (want,), ops = run(libraries, f"::{op_type}", [x], attrs, workspace=True)
    if op_type == "AveragePool":  # kernels/pool.hip's, a thread per output
        assert [o.entry for o in ops] == [f"hipep_average_pool_{_SHORT[np.dtype(dtype).name]}"]
    else:
        assert any(o.module == "reduce" for o in ops if hasattr(o, "module"))
    close(got, want, 1e-6 if dtype == np.float32 else 1e-3)


def test_pools_without_a_kernel():
    f32 = ["float32"]
    assert "element type int8" in gk.kernel_reason("::AveragePool", {"kernel_shape": [2, 2]}, ["int8"], [(1, 1, 4, 4)])
    assert "element type float64" in gk.kernel_reason("::MaxPool", {"kernel_shape": [2, 2]}, ["float64"],
                                                      [(1, 1, 4, 4)])
    assert "4 spatial axes" in gk.kernel_reason("::MaxPool", {"kernel_shape": [2] * 4, OUTPUT_COUNT: 2}, f32,
                                                [(1, 1, 4, 4, 4, 4)])


def test_max_pool_indices_and_integer_types_are_claimed():
    for dtype in ("float32", "float16", "int8", "uint8"):
        for outputs in (1, 2):
            assert gk.kernel_reason("::MaxPool", {"kernel_shape": [2, 2], OUTPUT_COUNT: outputs, "storage_order": 1},
                                    [dtype], [(1, 1, 4, 4)]) is None


# ---- MaxPool from kernels/pool.hip: Indices, int8 and uint8 --------------------------------------

MAX_POOL_INDICES = [  # (X, attributes): windows with padding, dilations, ceil_mode's overhang, 1 to 3 axes
    ((2, 3, 7, 6), {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1], "dilations": [1, 2]}),
    ((1, 2, 9, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((2, 2, 11), {"kernel_shape": [4], "strides": [3], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 4, 5, 3), {"kernel_shape": [2, 3, 2], "pads": [1, 1, 0, 0, 1, 1]}),
    ((1, 1, 5, 5), {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"}),
]


_SHORT = {"float32": "f32", "float16": "f16", "int8": "i8", "uint8": "u8"}


def _pool_input(rng, shape, dtype):
    """Values in a small range: many ties inside the windows (the first maximum must win)."""
    return rng.integers(-3, 3 if np.dtype(dtype).kind != "u" else 6, shape).astype(dtype) + (
        np.asarray(3, dtype) if np.dtype(dtype).kind == "u" else 0)


@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.uint8])
@pytest.mark.parametrize("shape,attrs", MAX_POOL_INDICES, ids=[f"indices-{i}" for i in range(len(MAX_POOL_INDICES))])
def test_max_pool_with_indices(libraries, dtype, storage_order, shape, attrs):
    """Y and Indices equal to the reference: the first of equal maxima in window order, flat
    positions over the whole input, row-major or column-major."""
    x = _pool_input(np.random.default_rng(8), shape, dtype)
    (y, idx), (want_y, want_idx), ops = run(libraries, "::MaxPool", [x], {**attrs, "storage_order": storage_order},
                                            n_out=2, sm_count=1)
    assert [o.entry for o in ops] == [f"hipep_max_pool_{_SHORT[np.dtype(dtype).name]}"]
    np.testing.assert_array_equal(y, want_y)
    assert idx.dtype == np.int64
    np.testing.assert_array_equal(idx, want_idx)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("shape,attrs", MAX_POOL_INDICES[:3], ids=[f"int-{i}" for i in range(3)])
def test_max_pool_of_integers(libraries, dtype, shape, attrs):
    """int8 and uint8 without Indices: the type's own extremes included."""
    info = np.iinfo(dtype)
    x = np.random.default_rng(9).integers(info.min, info.max, shape, endpoint=True).astype(dtype)
    x.flat[:4] = [info.min, info.max, info.min, 0]
    (y,), (want,), ops = run(libraries, "::MaxPool", [x], attrs, sm_count=1)
    assert [o.module for o in ops] == ["pool"]
    np.testing.assert_array_equal(y, want)


def test_max_pool_indices_alone(libraries):
    """The graph keeps Indices only: Y gets no buffer and the kernel writes none."""
    x = np.random.default_rng(10).standard_normal((1, 2, 6, 6)).astype(np.float32)
    (y, idx), (_, want_idx), _ = run(libraries, "::MaxPool", [x], {"kernel_shape": [2, 2], "strides": [2, 2]},
                                     n_out=2, drop=(0,), sm_count=1)
    assert y is None
    np.testing.assert_array_equal(idx, want_idx)


def test_max_pool_indices_with_nan_follow_onnx_runtime(libraries):
    """A NaN is the maximum only where it is its window's first input (ONNX Runtime's CPU kernel
    replaces a maximum only by a greater value); hipep's CPU reference propagates NaN instead, so
    ORT's CPU EP is the oracle here."""
    from onnx import TensorProto as TP
    from onnx import helper

    from helpers import cpu_session, make_model, tensor

    x = np.array([[[[1, np.nan, 3, 2], [np.nan, 0, 1, 5], [2, 2, np.nan, np.nan]]]], np.float32)
    for attrs in ({"kernel_shape": [2, 2]}, {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1], "storage_order": 1}):
        model = make_model([helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs)],
                           [tensor("x", TP.FLOAT, list(x.shape))],
                           [tensor("y", TP.FLOAT, None), tensor("i", TP.INT64, None)], opset=12)
        want_y, want_idx = cpu_session(model).run(None, {"x": x})
        mem = HostMemory()
        xa = mem.put(x)[0]
        ya, y = mem.put(np.full(want_y.shape, -7, np.float32))
        ia, idx = mem.put(np.full(want_idx.shape, -7, np.int64))
        full = {"auto_pad": "NOTSET", "ceil_mode": 0, "dilations": None, "pads": None, "strides": None,
                "storage_order": 0, **attrs, OUTPUT_COUNT: 2}
        outs = [gk.Arg(ya.ptr, ya.shape, ya.dtype), gk.Arg(ia.ptr, ia.shape, ia.dtype)]
        ops = gk.binding_for("::MaxPool").bind([xa], outs, full, gk.Target(sm_count=1, warp_size=32))
        for o in ops:
            launch(libraries[o.module], o)
        np.testing.assert_array_equal(y, want_y)
        np.testing.assert_array_equal(idx, want_idx)


@needs_nvrtc
def test_pool_entry_points_take_what_the_bindings_pass():
    """Every kernels/pool.hip entry point MaxPool, AveragePool and LpPool bind exists in NVRTC's sm_90 build and
    takes parameters of the sizes the bindings pass (PoolArgs mirrors hipep_pool_args)."""
    from unit.nvrtc_ptx import param_bytes, ptx

    params = param_bytes(ptx("pool", "compute_90"))
    mem = HostMemory()
    target = gk.Target(sm_count=1, warp_size=32)
    launches = []
    for dtype in (np.float32, np.float16, np.int8, np.uint8):
        x = mem.put(np.zeros((1, 2, 4, 4), dtype))[0]
        y = gk.Arg(mem.put(np.zeros((1, 2, 2, 2), dtype))[0].ptr, (1, 2, 2, 2), np.dtype(dtype))
        idx = gk.Arg(mem.put(np.zeros((1, 2, 2, 2), np.int64))[0].ptr, (1, 2, 2, 2), np.dtype(np.int64))
        launches += gk.binding_for("::MaxPool").bind([x], [y, idx], {"kernel_shape": [2, 2], "strides": [2, 2],
                                                                     OUTPUT_COUNT: 2}, target)
        if dtype in (np.float32, np.float16):
            launches += gk.binding_for("::LpPool").bind([x], [y], {"kernel_shape": [2, 2], "strides": [2, 2], "p": 3},
                                                        target)
            launches += gk.binding_for("::AveragePool").bind([x], [y], {"kernel_shape": [2, 2], "strides": [2, 2]},
                                                             target)
    assert {op.entry for op in launches} == {"hipep_max_pool_f32", "hipep_max_pool_f16", "hipep_max_pool_i8",
                                             "hipep_max_pool_u8", "hipep_lp_pool_f32", "hipep_lp_pool_f16",
                                             "hipep_average_pool_f32", "hipep_average_pool_f16"}
    assert set(params) == {op.entry for op in launches}
    for op in launches:
        assert [ctypes.sizeof(p) for p in op.params] == params[op.entry], op.entry
