"""kernels/reduce.hip and kernels/softmax.hip run on the CPU: g++ compiles the unchanged kernel
source against the host stand-in for the CUDA headers (tests/unit/host_cuda: every GPU thread of a
block a host thread, barriers and warp shuffles as the GPU has them), and the launches the
bindings give run block by block over host memory, compared with the op registry's references.
Every reduction with a GPU kernel, over the layouts the binding tells apart: rows (the last axes;
16-byte loads where the row allows, and not), columns (inner axes), everything, and an empty
reduced extent; f32, f16, f64 (in double) and the integer types where the op has integer kernels,
bool for ReduceMax and ReduceMin (any, all); warps of 32 and 64 lanes. Reduced axes that are not adjacent, and Softmax /
LogSoftmax / ReduceLogSumExp over axes that are not the last, through a strided copy
(kernels/copy.hip) into the workspace; ReduceLogSumExp over f64 (kernels/reduce.hip, in double)
against the reference and ONNX Runtime's CPU EP. Softmax and LogSoftmax rows, one element at -inf. CumSum and
CumProd (kernels/scan.hip), over a constant axis and one the kernel reads at run time (every axis
through one binding; one out of range reported to the fault record), and ArgMax / ArgMin
(kernels/argmax.hip: ties, NaN first and later, select_last_index). Skipped without g++."""
from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest

from hipep.ops.registry import OUTPUT_COUNT, REQUIRED, SINCE_VERSION, lookup
from hipep.runtime import gpu_kernels as gk
from hipep.runtime.gpu_bindings_reduce import _REDUCE_OPS

from unit.host_kernels import HostMemory, compile_module, launch

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")

LAYOUTS = {  # name: (input shape, axes)
    "rows": ((3, 5, 64), [-1]),
    "rows_unaligned": ((3, 5, 63), [-1]),
    "long_rows": ((2, 3000), [1]),
    "cols": ((4, 70, 6), [1]),
    "leading": ((300, 5), [0]),
    "all": ((5, 7, 9), [0, 1, 2]),
    "empty": ((3, 0, 4), [1]),
}


@pytest.fixture(scope="module", params=[32, 64], ids=["warp32", "warp64"])
def lib(request, tmp_path_factory):
    return compile_module(tmp_path_factory.mktemp(f"reduce{request.param}"), "reduce", request.param), request.param


def _values(rng, op_type: str, shape, dtype):
    if np.dtype(dtype).kind == "i":
        return rng.integers(-50, 50, shape).astype(dtype)
    if op_type == "ReduceProd":  # a product of many values stays in range near 1
        return rng.uniform(0.9, 1.1, shape).astype(dtype)
    if op_type == "ReduceLogSum":  # the log of a positive sum
        return rng.uniform(0.1, 1.0, shape).astype(dtype)
    return rng.uniform(-2.0, 2.0, shape).astype(dtype)


def _launch_op(lib, op_type: str, inputs: list, attrs: dict, copy_lib=None):
    """Binds ai.onnx `op_type` for `inputs` with `attrs` (the op's defaults filled in, one output)
    and runs its launches on the host: (the output, the registry reference's, the launches).
    `copy_lib`: kernels/copy.hip, for the copies of axes moved last (into a stream workspace)."""
    built, warp = lib
    op = lookup("", op_type)
    attrs = {**{k: v for k, v in op.attributes.items() if v is not REQUIRED}, **attrs, OUTPUT_COUNT: 1}
    (want,) = op.reference(list(inputs), attrs)
    mem = HostMemory()
    out, view = mem.put(np.full(want.shape, 7, want.dtype))
    workspace = (lambda n: mem.put(np.zeros(n, np.uint8))[0].ptr) if copy_lib is not None else None
    ops = gk.binding_for(f"::{op_type}").bind([mem.put(x)[0] for x in inputs], [gk.Arg(out.ptr, out.shape, out.dtype)],
                                             attrs, gk.Target(sm_count=4, warp_size=warp, scratch=lambda n: 0,
                                                              workspace=workspace))
    for o in ops:
        if isinstance(o, gk.CopyOp):
            ctypes.memmove(o.dst, o.src, o.nbytes)
        else:
            launch(copy_lib[0] if o.module == "copy" else built, o)
    return view, want, ops


def _run(lib, op_type: str, x: np.ndarray, axes, copy_lib=None, keepdims=1):
    return _launch_op(lib, op_type, [x, np.array(axes, np.int64)], {"keepdims": keepdims, SINCE_VERSION: 18},
                      copy_lib)


@pytest.fixture(scope="module")
def copy_lib(tmp_path_factory):
    return compile_module(tmp_path_factory.mktemp("copy"), "copy", 32), 32


@pytest.mark.parametrize("shape,axes", [((4, 3, 5), [0, 2]), ((2, 3, 4, 5), [0, 2, 3]), ((3, 4, 2, 5), [1, 3]),
                                        ((2, 1, 3, 4), [0, 3]), ((3, 0, 4), [0, 2])])
@pytest.mark.parametrize("op_type", ["ReduceSum", "ReduceMax", "ReduceL2", "ReduceMean"])
def test_reductions_over_axes_that_are_not_adjacent(lib, copy_lib, op_type, shape, axes):
    """The reduced axes are moved behind the kept ones by a strided copy into the workspace, then
    reduced as rows; with keepdims 0 and 1."""
    rng = np.random.default_rng(len(shape) * 7 + len(axes))
    x = _values(rng, op_type, shape, np.float32)
    for keepdims in (0, 1):
        got, want, ops = _run(lib, op_type, x, axes, copy_lib, keepdims)
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-5, atol=1e-5)
    if isinstance(gk.reduce_blocks(shape, axes, False), str) and x.size:  # (the extent-1 axis case is adjacent)
        assert len(ops) == 2 and (isinstance(ops[0], gk.CopyOp) or ops[0].module == "copy")
    x = rng.integers(-50, 50, shape).astype(np.int64)
    if op_type in ("ReduceSum", "ReduceMax"):
        got, want, _ = _run(lib, op_type, x, axes, copy_lib)
        np.testing.assert_array_equal(got.reshape(want.shape), want)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("op_type", list(_REDUCE_OPS))
def test_float_reductions_follow_the_reference(lib, op_type, layout):
    shape, axes = LAYOUTS[layout]
    rng = np.random.default_rng(len(op_type) * 31 + len(layout))
    for dtype, tol in ((np.float32, dict(rtol=1e-5, atol=1e-5)), (np.float16, dict(rtol=1e-2, atol=1e-3))):
        x = _values(rng, op_type, shape, dtype)
        got, want, ops = _run(lib, op_type, x, axes)
        assert ops and all(o.module == "reduce" for o in ops)
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), err_msg=f"{dtype.__name__}",
                                   **tol)


@pytest.mark.parametrize("layout", ["rows", "cols", "all", "empty"])
@pytest.mark.parametrize("op_type", [op for op, (_, types) in _REDUCE_OPS.items() if "i64" in types])
def test_integer_reductions_are_exact(lib, op_type, layout):
    shape, axes = LAYOUTS[layout]
    rng = np.random.default_rng(5)
    for dtype in (np.int32, np.int64):
        x = _values(rng, op_type, shape, dtype)
        got, want, _ = _run(lib, op_type, x, axes)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("op_type", ["ReduceMax", "ReduceMin"])
def test_bool_max_and_min_are_any_and_all(lib, op_type, layout):
    """Over bool, ReduceMax is any and ReduceMin all (an empty reduction: false and true), rows
    and columns alike; lines all true, all false and mixed; keepdims 0 and 1."""
    shape, axes = LAYOUTS[layout]
    rng = np.random.default_rng(len(layout) * 3 + len(op_type))
    x = rng.random(shape) < (0.97 if op_type == "ReduceMin" else 0.03)  # mostly all-true / all-false lines
    lines = np.moveaxis(x, axes[0], 0)  # a view: some lines set whole one way or the other
    if lines.size:
        lines[:, :1] = True
        lines[:, -1:] = False
    for keepdims in (0, 1):
        got, want, ops = _run(lib, op_type, x, axes, keepdims=keepdims)
        assert ops and all(o.entry.endswith(("_bool_rows", "_bool_cols")) for o in ops)
        assert want.dtype == np.bool_ and got.view(np.uint8).max(initial=0) <= 1
        np.testing.assert_array_equal(got, want)
        if got.size > 1 and layout != "empty":  # lines of both outcomes
            assert got.any() and not got.all()


@pytest.mark.parametrize("shape,axes", [((4, 3, 5), [0, 2]), ((3, 0, 4), [0, 2])])
def test_bool_max_over_axes_that_are_not_adjacent(lib, copy_lib, shape, axes):
    x = np.random.default_rng(9).random(shape) < 0.2
    for op_type in ("ReduceMax", "ReduceMin"):
        got, want, _ = _run(lib, op_type, x, axes, copy_lib, keepdims=0)
        np.testing.assert_array_equal(got.reshape(want.shape), want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_min_and_max_propagate_nan(lib, dtype):
    x = np.arange(3 * 64, dtype=dtype).reshape(3, 64)
    x[1, 17] = np.nan
    for op_type in ("ReduceMin", "ReduceMax"):
        for axes in ([1], [0]):
            got, want, _ = _run(lib, op_type, x, axes)
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            np.testing.assert_array_equal(got[~np.isnan(got)], want[~np.isnan(want)])


def _f64_want(op_type: str, x: np.ndarray, axes) -> np.ndarray:
    """numpy in double (keepdims): ReduceSum and ReduceMean, whose registry references take f32
    and f16 only (their f64 form would sum in f32), and the others' references, which compute
    f64 in double as ONNX Runtime's double kernels do."""
    axes = tuple(a % x.ndim for a in axes)
    if op_type == "ReduceSum":
        return np.sum(x, axis=axes, keepdims=True)
    if op_type == "ReduceMean":
        n = int(np.prod([x.shape[a] for a in axes]))
        return np.sum(x, axis=axes, keepdims=True) / n if n else np.zeros_like(np.sum(x, axis=axes, keepdims=True))
    (want,) = lookup("", op_type).reference([x, np.array(axes, np.int64)], {"keepdims": 1, "noop_with_empty_axes": 0,
                                                                            OUTPUT_COUNT: 1, SINCE_VERSION: 18})
    return want


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("op_type", list(_REDUCE_OPS))
def test_f64_reductions_accumulate_in_double(lib, op_type, layout):
    """f64 rows (two elements a 16-byte load, and not), columns, everything, empty: double
    accumulation, so within a few ulps of numpy's double sums (another order of addition); values
    that an f32 accumulator would lose (2^30 apart) stay."""
    shape, axes = LAYOUTS[layout]
    rng = np.random.default_rng(len(op_type) * 17 + len(layout))
    x = _values(rng, op_type, shape, np.float64)
    if op_type in ("ReduceSum", "ReduceMean", "ReduceL1") and x.size:
        x.reshape(-1)[::3] *= 2.0 ** 30
    got, _, ops = _run(lib, op_type, x, axes)
    assert ops and all(o.module == "reduce" and "_f64_" in o.entry for o in ops)
    want = _f64_want(op_type, x, axes)
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-12, atol=0)
    assert got.dtype == np.float64


def test_f64_sum_has_no_f32_rounding(lib):
    """2^-30 added to 1 survives in double (an f32 accumulator would drop it), rows and columns."""
    x = np.array([[1.0, 2.0 ** -30, 2.0 ** -30, 0.0]] * 3)
    for axes in ([1], [0]):
        got, _, _ = _run(lib, "ReduceSum", x, axes)
        np.testing.assert_array_equal(got.reshape(-1), np.sum(x, axis=axes[0]))


def test_float_only_reductions_have_no_integer_kernel():
    for op_type, (_, types) in _REDUCE_OPS.items():
        if "i64" in types:
            continue
        why = gk.kernel_reason(f"::{op_type}", {"keepdims": 1}, ["int64", "int64"], [(3, 4), (1,)],
                               [None, np.array([1])])
        assert why is not None and "no kernel for cuda" in why, op_type


@pytest.fixture(scope="module")
def softmax_lib(tmp_path_factory):
    return compile_module(tmp_path_factory.mktemp("softmax"), "softmax", 32), 32


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape", [(3, 8), (4, 129), (2, 1000), (5, 1)])
def test_softmax_kernels_follow_the_reference(softmax_lib, op_type, shape):
    rng = np.random.default_rng(shape[-1])
    for dtype, tol in ((np.float32, dict(rtol=1e-5, atol=1e-6)), (np.float16, dict(rtol=1e-2, atol=1e-3)),
                       (np.float64, dict(rtol=1e-13, atol=1e-15))):  # f64: sums in double
        x = rng.uniform(-8, 8, shape).astype(dtype)
        x[0, 0] = -np.inf  # a row with an infinitely unlikely element
        view, want, ops = _launch_op(softmax_lib, op_type, [x], {"axis": -1, SINCE_VERSION: 13})
        assert ops and all(o.entry.startswith("hipep_log_softmax" if op_type == "LogSoftmax" else "hipep_softmax_")
                           for o in ops)
        np.testing.assert_allclose(view.astype(np.float64), want.astype(np.float64), err_msg=dtype.__name__, **tol)


@pytest.mark.parametrize("shape,axes", [((3, 5, 64), [-1]), ((3, 5, 63), [1, 2]), ((2, 3000), [1]),
                                        ((5, 7, 9), [0, 1, 2]), ((4, 6), []), ((3, 0), [1])])
def test_logsumexp_over_the_last_axes_follows_the_reference(softmax_lib, shape, axes):
    rng = np.random.default_rng(len(shape) + len(axes))
    for dtype, tol in ((np.float32, dict(rtol=1e-5, atol=1e-5)), (np.float16, dict(rtol=1e-2, atol=1e-2))):
        x = rng.uniform(-4, 4, shape).astype(dtype)
        view, want, _ = _run(softmax_lib, "ReduceLogSumExp", x, axes)
        np.testing.assert_allclose(view.astype(np.float64), want.astype(np.float64), err_msg=dtype.__name__, **tol)


@pytest.fixture(scope="module")
def reduce_lib(tmp_path_factory):
    return compile_module(tmp_path_factory.mktemp("reduce_lse"), "reduce", 32), 32


LOGSUMEXP_F64 = [((3, 5, 64), [-1]), ((3, 5, 63), [1, 2]), ((2, 3000), [1]), ((5, 7, 9), [0, 1, 2]), ((4, 6), []),
                 ((3, 0), [1]), ((3, 2, 2), [1]), ((3, 2, 2), [0]), ((3, 4, 5), [0, 2])]


@pytest.mark.parametrize("shape,axes", LOGSUMEXP_F64)
def test_logsumexp_of_f64_is_computed_in_double(reduce_lib, copy_lib, shape, axes):
    """kernels/reduce.hip's f64 rows (axes that are not the last moved there by a copy): the
    reference (max, then log of the sum of exp(x - max), in double), and ONNX Runtime's CPU EP;
    values far apart (exp of their differences underflows f32) and lines holding NaN, only -inf
    and +inf twice."""
    from onnx import TensorProto as TP
    from onnx import helper

    from helpers import cpu_session, make_model, tensor

    rng = np.random.default_rng(len(shape) * 3 + len(axes))
    x = rng.uniform(-4, 4, shape) * 40.0
    special = x.ndim == 2 and x.shape[0] >= 3 and x.shape[1] >= 2 and axes in ([1], [-1])
    if special:
        x[0, 0] = np.nan
        x[1, :] = -np.inf
        x[2, :2] = np.inf
    view, want, ops = _run(reduce_lib, "ReduceLogSumExp", x, axes, copy_lib)
    assert ops and ops[-1].entry == "hipep_reduce_logsumexp_f64_rows"
    np.testing.assert_allclose(view.reshape(want.shape), want, rtol=1e-13, atol=1e-13)
    if special:
        assert np.isnan(view[0, 0]) and view[1, 0] == -np.inf and view[2, 0] == np.inf
    node = helper.make_node("ReduceLogSumExp", ["x", "axes"], ["y"], keepdims=1)
    model = make_model([node], [tensor("x", TP.DOUBLE, list(shape)), tensor("axes", TP.INT64, [len(axes)])],
                       [tensor("y", TP.DOUBLE, None)])
    (ort_y,) = cpu_session(model).run(None, {"x": x, "axes": np.array(axes, np.int64)})
    np.testing.assert_allclose(view.reshape(ort_y.shape), ort_y, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("shape,axes", [((3, 4, 5), [1]), ((3, 4, 5), [0, 2]), ((2, 3, 4), [0])])
def test_logsumexp_over_inner_axes_moves_them_last(softmax_lib, copy_lib, shape, axes):
    rng = np.random.default_rng(len(shape) + 3 * len(axes))
    x = rng.uniform(-4, 4, shape).astype(np.float32)
    view, want, ops = _run(softmax_lib, "ReduceLogSumExp", x, axes, copy_lib)
    assert len(ops) == 2
    np.testing.assert_allclose(view.reshape(want.shape), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape,axis", [((3, 8, 5), 1), ((4, 6), 0), ((2, 3, 4, 5), -3), ((3, 0, 4), 0)])
def test_softmax_over_an_axis_that_is_not_the_last(softmax_lib, copy_lib, op_type, shape, axis):
    """The axis is moved last by a copy into the workspace, the rows computed there, and the
    result copied back into the output's layout."""
    rng = np.random.default_rng(len(shape) + axis)
    for dtype, tol in ((np.float32, dict(rtol=1e-5, atol=1e-6)), (np.float16, dict(rtol=1e-2, atol=1e-3))):
        x = rng.uniform(-8, 8, shape).astype(dtype)
        view, want, ops = _launch_op(softmax_lib, op_type, [x], {"axis": axis, SINCE_VERSION: 13}, copy_lib)
        assert len(ops) == (0 if x.size == 0 else 3)
        np.testing.assert_allclose(view.astype(np.float64), want.astype(np.float64), err_msg=dtype.__name__, **tol)


@pytest.fixture(scope="module")
def scan_lib(tmp_path_factory):
    return compile_module(tmp_path_factory.mktemp("scan"), "scan", 32), 32


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("shape,axis", [((1, 300), 1), ((4, 70, 6), 1), ((5, 7), 0), ((3, 4, 9), -1)])
def test_cumsum_is_bit_identical_to_the_reference(scan_lib, shape, axis, exclusive, reverse):
    """One thread adds a line in order, as the CPU EP does: f32, f64 and f16 equal bit for bit,
    integers wrapping in their type."""
    rng = np.random.default_rng(len(shape) * 7 + exclusive + 2 * reverse)
    attrs = {"exclusive": exclusive, "reverse": reverse, SINCE_VERSION: 14}
    for dtype in (np.float32, np.float64, np.float16, np.int32, np.int64):
        if np.dtype(dtype).kind == "i":
            x = rng.integers(-2**30, 2**30, shape).astype(dtype)  # int32 lines wrap
        else:
            x = (rng.uniform(-1, 1, shape) * np.exp2(rng.integers(-8, 8, shape))).astype(dtype)
        view, want, _ = _launch_op(scan_lib, "CumSum", [x, np.array(axis, np.int64)], attrs)
        np.testing.assert_array_equal(view.view(np.uint8), want.view(np.uint8), err_msg=np.dtype(dtype).name)


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("shape,axis", [((1, 300), 1), ((4, 70, 6), 1), ((3, 4, 9), -1)])
def test_cumprod_is_bit_identical_to_the_reference(scan_lib, shape, axis, exclusive, reverse):
    """CumProd is the same scan with products, starting from 1: f32, f64 and f16 (products in
    f32, one rounding) equal bit for bit, integers wrapping in their type."""
    rng = np.random.default_rng(len(shape) * 5 + exclusive + 2 * reverse)
    attrs = {"exclusive": exclusive, "reverse": reverse, SINCE_VERSION: 26}
    for dtype in (np.float32, np.float64, np.float16, np.int32, np.int64):
        if np.dtype(dtype).kind == "i":
            x = rng.integers(-7, 8, shape).astype(dtype)  # long lines wrap
        else:
            x = rng.uniform(0.6, 1.5, shape).astype(dtype) * rng.choice([-1, 1], shape).astype(dtype)
        view, want, _ = _launch_op(scan_lib, "CumProd", [x, np.array(axis, np.int64)], attrs)
        np.testing.assert_array_equal(view.view(np.uint8), want.view(np.uint8), err_msg=np.dtype(dtype).name)


def test_cumsum_takes_an_axis_known_only_at_run_time_up_to_rank_8():
    assert gk.kernel_reason("::CumSum", {}, ["float32", "int64"], [(3, 4), ()], [None, None]) is None
    assert gk.kernel_reason("::CumSum", {}, ["float32", "int64"], [(3, 4), ()], [None, np.array(1)]) is None
    assert gk.kernel_reason("::CumProd", {}, ["int32", "int32"], [(2,) * 8, (1,)], [None, None]) is None
    why = gk.kernel_reason("::CumSum", {}, ["float32", "int64"], [(2,) * 9, ()], [None, None])
    assert why == "no kernel for cuda: CumSum (an axis known only at run time over a rank-9 input (at most 8))"
    assert gk.kernel_reason("::CumSum", {}, ["float32", "int64"], [(2,) * 9, ()], [None, np.array(0)]) is None


def _scan_values(rng, op_type: str, shape, dtype) -> np.ndarray:
    if np.dtype(dtype).kind == "i":
        return (rng.integers(-2**30, 2**30, shape) if op_type == "CumSum" else rng.integers(-7, 8, shape)).astype(dtype)
    if op_type == "CumSum":
        return (rng.uniform(-1, 1, shape) * np.exp2(rng.integers(-8, 8, shape))).astype(dtype)
    return (rng.uniform(0.6, 1.5, shape) * rng.choice([-1, 1], shape)).astype(dtype)


def _bind_device_axis(scan_lib, op_type: str, x: np.ndarray, axis_dtype, attrs: dict, fault=None):
    """Binds `op_type` over x with its axis a one-element device tensor the host cannot read (a
    graph input): (the ops, the axis's memory to write an axis into, the output, the memory)."""
    op = lookup("", op_type)
    attrs = {**{k: v for k, v in op.attributes.items() if v is not REQUIRED}, **attrs, OUTPUT_COUNT: 1}
    mem = HostMemory()
    xa = mem.put(x)[0]
    axis_arg, axis_view = mem.put(np.zeros((), axis_dtype))
    out, view = mem.put(np.full(x.shape, 7, x.dtype))
    ops = gk.binding_for(f"::{op_type}").bind(
        [xa, gk.Arg(axis_arg.ptr, axis_arg.shape, axis_arg.dtype)], [gk.Arg(out.ptr, out.shape, out.dtype)], attrs,
        gk.Target(sm_count=1, warp_size=scan_lib[1], scratch=lambda n: 0, fault=fault))
    return ops, axis_view, view, attrs, mem


DEVICE_AXIS_SHAPES = [(7,), (1, 300), (4, 70, 6), (3, 4, 9), (2, 3, 1, 5)]


@pytest.mark.parametrize("op_type", ["CumSum", "CumProd"])
@pytest.mark.parametrize("shape", DEVICE_AXIS_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_a_scan_over_an_axis_read_at_run_time_is_bit_identical_to_the_reference(scan_lib, op_type, shape):
    """One binding (the axis is not read by the host) runs for every axis, negative ones too, the
    kernel viewing the input as [outer, n, inner] itself: the bits of the reference, which knows
    the axis; with exclusive and reverse, int32 and int64 axes."""
    rng = np.random.default_rng(len(shape) * 11 + len(op_type))
    rank = len(shape)
    for k, dtype in enumerate((np.float32, np.float16, np.int32, np.int64, np.float64)):
        x = _scan_values(rng, op_type, shape, dtype)
        exclusive, reverse = k % 2, (k // 2) % 2
        ops, axis_view, view, attrs, _ = _bind_device_axis(
            scan_lib, op_type, x, np.int64 if k % 2 else np.int32,
            {"exclusive": exclusive, "reverse": reverse, SINCE_VERSION: 26 if op_type == "CumProd" else 14})
        (kernel,) = ops
        assert kernel.entry.startswith(f"hipep_{op_type.lower()}_device_axis_")
        for axis in range(-rank, rank):
            axis_view[...] = axis
            view[...] = 7
            launch(scan_lib[0], kernel)
            (want,) = lookup("", op_type).reference([x, np.array(axis, np.int64)], attrs)
            np.testing.assert_array_equal(view.view(np.uint8), want.view(np.uint8),
                                          err_msg=f"{np.dtype(dtype).name} axis {axis}")


def test_an_axis_out_of_range_at_run_time_is_reported_as_the_cpu_device_words_it(scan_lib):
    """The kernel writes nothing and fills the stream's fault record; the host's error names the
    node, the input and the valid range, in the reference's words."""
    from hipep.runtime.gpu_faults import FAULT_AXIS, FaultRecord, FaultSite, FaultSites, fault_error

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    sites, record = FaultSites(), FaultRecord()
    fault = lambda what: FaultSite(ctypes.addressof(record), sites.site("CumSum(y)", what))  # noqa: E731
    ops, axis_view, view, attrs, _ = _bind_device_axis(scan_lib, "CumSum", x, np.int64, {SINCE_VERSION: 14}, fault)
    for axis in (2, -3, 2**40):
        ctypes.memset(ctypes.addressof(record), 0, ctypes.sizeof(record))
        axis_view[...] = axis
        view[...] = 7
        launch(scan_lib[0], ops[0])
        assert (record.code, record.value, record.bound) == (FAULT_AXIS, axis, 2)
        assert (view == 7).all()
        with pytest.raises(Exception) as cpu:
            lookup("", "CumSum").reference([x, np.array(axis, np.int64)], attrs)
        message = str(fault_error(record, sites))
        assert message == "CumSum(y): input 1 (axis): " + str(cpu.value).removeprefix("CumSum: "), message
    axis_view[...] = -2
    ctypes.memset(ctypes.addressof(record), 0, ctypes.sizeof(record))
    launch(scan_lib[0], ops[0])
    assert record.code == 0 and view.tolist() == [[0, 1, 2], [3, 5, 7]]


def test_a_run_time_axis_must_be_one_element_and_an_empty_input_launches_nothing(scan_lib):
    from hipep.errors import RuntimeShapeError

    mem = HostMemory()
    x = mem.put(np.ones((2, 3), np.float32))[0]
    axis = mem.put(np.zeros(2, np.int64))[0]
    out = mem.put(np.ones((2, 3), np.float32))[0]
    bind = gk.binding_for("::CumSum").bind
    target = gk.Target(sm_count=1, warp_size=32, scratch=lambda n: 0)
    with pytest.raises(RuntimeShapeError, match=r"^CumSum: 'axis' must be a scalar \(one element\), got shape \[2\]"):
        bind([x, gk.Arg(axis.ptr, axis.shape, axis.dtype)], [out], {"exclusive": 0, "reverse": 0}, target)
    empty = mem.put(np.ones((0, 3), np.float32))[0]
    assert bind([empty, gk.Arg(axis.ptr, (1,), axis.dtype)], [empty], {"exclusive": 0, "reverse": 0}, target) == []


@pytest.fixture(scope="module", params=[32, 64], ids=["warp32", "warp64"])
def arg_lib(request, tmp_path_factory):
    return compile_module(tmp_path_factory.mktemp(f"argmax{request.param}"), "argmax", request.param), request.param


ARG_LAYOUTS = [((2, 300), 1), ((3, 5), -1), ((1, 3000), -1), ((4, 70, 6), 1), ((5, 7), 0), ((3, 4, 9), 0),
               ((7,), 0)]


@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("op_type", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("shape,axis", ARG_LAYOUTS, ids=[f"{s}-axis{a}" for s, a in ARG_LAYOUTS])
def test_argmax_and_argmin_equal_the_reference(arg_lib, op_type, shape, axis, last):
    """Few distinct values (many ties), and for floats NaN at the start of some lines and inside
    others: the same indices as the reference (the CPU EP's scan)."""
    rng = np.random.default_rng(len(shape) * 13 + axis + 3 * last + len(op_type))
    attrs = {"axis": axis, "keepdims": 1, "select_last_index": last, SINCE_VERSION: 13}
    for dtype in (np.float32, np.float16, np.int8, np.uint8, np.int32, np.int64):
        x = rng.integers(0, 5, shape).astype(dtype)
        if np.dtype(dtype).kind == "f":  # NaN at the start of the first line, inside the second
            lines = np.moveaxis(x, axis, -1).reshape(-1, shape[axis])  # a copy where the axis is not last
            lines[0, 0] = np.nan
            if len(lines) > 1 and lines.shape[1] > 2:
                lines[1, 2] = np.nan
            x = np.ascontiguousarray(np.moveaxis(lines.reshape(np.moveaxis(x, axis, -1).shape), -1, axis))
            assert np.isnan(x).sum() == min(len(lines), 2 if lines.shape[1] > 2 else 1)
        view, want, ops = _launch_op(arg_lib, op_type, [x], attrs)
        assert ops and all(o.module == "argmax" for o in ops)
        np.testing.assert_array_equal(view, want, err_msg=np.dtype(dtype).name)


def test_argmax_of_bf16_has_no_kernel():
    why = gk.kernel_reason("::ArgMax", {"axis": 0}, ["bfloat16"], [(3, 4)])
    assert why is not None and "element type bfloat16" in why
