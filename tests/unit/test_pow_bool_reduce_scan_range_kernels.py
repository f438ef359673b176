"""The kernels behind Pow of every type pair (its exponent known when bound or only at run time),
ReduceMax / ReduceMin over bool, CumSum / CumProd in f64 and over an axis read at run time, Range
in f16, Clip / Where on integer types and Celu on f16, without a GPU: NVRTC compiles them for
sm_90 and the entry points the bindings name exist there (skipped where nvidia-cuda-nvrtc is not
installed); Range's f16 kernel runs on the host stand-in against the reference (skipped without
g++); and Pow's reference, which the generated kernels follow, equals ONNX Runtime's CPU EP:
integers bit for bit (C's pow in double, converted as x86 converts), floats within an ulp or so."""
from __future__ import annotations

import ctypes
import shutil

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from hipep.ops.pointwise import Operand
from hipep.ops.registry import OUTPUT_COUNT, SINCE_VERSION, lookup
from hipep.runtime import gpu_kernels as gk

from helpers import needs_nvrtc
from unit.kernel_emulation import IDX, SRC, TARGET, arg, out_arg

ARCH = "sm_90"
DEFINES = {"HIPEP_WARP_SIZE": 32}
POW_TYPES = ("float32", "float16", "int32", "int64")


def _bound_entries() -> set[tuple[str, str]]:
    """(module, entry) of the launches the bindings give for bool reductions (rows, columns) and
    scans (f64 ones, and over an axis the host cannot read: every element type, both axis
    types)."""
    names = set()
    for key in ("::ReduceMax", "::ReduceMin"):
        for shape, axes, out in (((4, 64), [-1], (4, 1)), ((4, 64, 3), [1], (4, 1, 3))):
            ops = gk.BINDINGS[key].bind([arg(np.zeros(shape, np.bool_), SRC), arg(np.array(axes), IDX, True)],
                                        [out_arg(out, np.bool_)], {"keepdims": 1}, TARGET)
            names |= {(o.module, o.entry) for o in ops}
    for key in ("::CumSum", "::CumProd"):
        for dt in (np.float32, np.float64, np.float16, np.int32, np.int64):
            for axis_dt in (np.int32, np.int64):
                ops = gk.BINDINGS[key].bind([arg(np.zeros((3, 5), dt), SRC), arg(np.zeros((), axis_dt), IDX)],
                                            [out_arg((3, 5), dt)], {"exclusive": 0, "reverse": 0}, TARGET)
                names |= {(o.module, o.entry) for o in ops}
        ops = gk.BINDINGS[key].bind([arg(np.zeros((3, 5)), SRC), arg(np.array(1), IDX, True)],
                                    [out_arg((3, 5), np.float64)], {"exclusive": 0, "reverse": 0}, TARGET)
        names |= {(o.module, o.entry) for o in ops}
    return names


def test_the_bindings_name_the_new_entry_points():
    names = _bound_entries()
    assert {("reduce", f"hipep_reduce_{k}_bool_{layout}") for k in ("max", "min")
            for layout in ("rows", "cols")} <= names
    assert {("scan", f"hipep_{op}_device_axis_{t}") for op in ("cumsum", "cumprod")
            for t in ("f32", "f64", "f16", "i32", "i64")} <= names
    assert {("scan", "hipep_cumsum_f64"), ("scan", "hipep_cumprod_f64")} <= names


@needs_nvrtc
def test_the_new_entry_points_compile_for_sm90():
    from hipep.runtime import kernel_cache

    wanted = _bound_entries() | {("range", "hipep_range_f16")}
    cubins = {m: kernel_cache.compile_cubin(kernel_cache.module_source(m), m, ARCH, DEFINES, use_cache=False)[0]
              for m in sorted({m for m, _ in wanted})}
    for module, entry in sorted(wanted):
        assert entry.encode() + b"\0" in cubins[module], f"{module}: {entry}"


@needs_nvrtc
@pytest.mark.parametrize("xt,yt,y_size", [("int32", "int32", 6), ("int64", "float32", 1), ("int32", "int64", 1),
                                           ("float32", "float32", 1), ("float16", "float16", 1),
                                           ("float16", "int32", 1), ("float32", "int64", 6)])
def test_pow_kernels_compile_for_sm90(xt, yt, y_size):
    """Pow's programs with the exponent known only at run time: std::pow (C's pow in double and
    the x86 conversion for integers) and, for a one-element exponent, the kernel's test for 2
    and 3."""
    from hipep.runtime import kernel_cache

    expr = lookup("", "Pow").pointwise([Operand(np.dtype(xt), None, 6), Operand(np.dtype(yt), None, y_size)],
                                       {OUTPUT_COUNT: 1, SINCE_VERSION: 15})
    prims = expr.prims()
    assert ("libm_pow" in prims) == xt.startswith("int") and ("eq" in prims) == (y_size == 1)
    r = gk.render_pointwise(expr, [xt, yt], [expr.nodes[o][1] for o in expr.outputs])
    data, _ = kernel_cache.compile_cubin(r.source, r.name, ARCH, DEFINES, use_cache=False)
    assert r.name.encode() + b"\0" in data


@needs_nvrtc
@pytest.mark.parametrize("key,dtypes,attrs", [("::Clip", ["int8"] * 3, {}), ("::Clip", ["uint64", "", "uint64"], {}),
                                               ("::Where", ["bool", "uint32", "uint32"], {}),
                                               ("::Celu", ["float16"], {"alpha": 0.3, SINCE_VERSION: 28})])
def test_integer_clip_where_and_f16_celu_compile_for_sm90(key, dtypes, attrs):
    from hipep.runtime import kernel_cache

    op = lookup("", key[2:])
    expr = op.pointwise([Operand(np.dtype(d), None, 6) if d else None for d in dtypes],
                        {**{k: v for k, v in op.attributes.items()}, **attrs, OUTPUT_COUNT: 1})
    r = gk.render_pointwise(expr, [d or "uint8" for d in dtypes], [expr.nodes[o][1] for o in expr.outputs])
    data, _ = kernel_cache.compile_cubin(r.source, r.name, ARCH, DEFINES, use_cache=False)
    assert r.name.encode() + b"\0" in data


# ---- Range in f16 on the host -------------------------------------------------------------------

@pytest.fixture(scope="module")
def range_lib(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    from unit.host_kernels import EXACT_FLAGS, compile_module

    return compile_module(tmp_path_factory.mktemp("range"), "range", 32, EXACT_FLAGS)


@pytest.mark.parametrize("start,limit,delta", [(1.0, 5.0, 0.7), (10.0, -3.0, -1.3), (0.1, 2049.0, 3.0), (2.0, 2.0, 1.0),
                                               (-1.5, 60.0, 0.3333)])
def test_range_f16_accumulates_in_f32_and_rounds_each_output(range_lib, start, limit, delta):
    """One thread adds delta in f32 and rounds each output once to f16, as the reference (ONNX
    Runtime's opset-27 Range) does; the launch is the f32 one's (a single thread)."""
    from unit.host_kernels import HostMemory, launch

    lib = range_lib
    values = [np.array(v, np.float16) for v in (start, limit, delta)]
    (want,) = lookup("", "Range").reference(values, {"stash_type": 1, OUTPUT_COUNT: 1, SINCE_VERSION: 27})
    mem = HostMemory()
    s, d = mem.put(values[0])[0], mem.put(values[2])[0]
    out, got = mem.put(np.full(max(want.size, 1), 7, np.float16))
    launch(lib, gk.KernelOp("hipep_range_f16", (1, 1, 1), (1, 1, 1),
                            [gk.ptr(s), gk.ptr(d), gk.ptr(out), ctypes.c_longlong(want.size)], module="range"))
    np.testing.assert_array_equal(got[:want.size].view(np.uint16), want.view(np.uint16))


# ---- Pow's reference against ONNX Runtime's CPU EP ------------------------------------------------

_ELEM = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "int32": TensorProto.INT32,
         "int64": TensorProto.INT64}


def _ort_pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    graph = helper.make_graph([helper.make_node("Pow", ["x", "y"], ["z"])], "pow",
                              [helper.make_tensor_value_info("x", _ELEM[x.dtype.name], x.shape),
                               helper.make_tensor_value_info("y", _ELEM[y.dtype.name], y.shape)],
                              [helper.make_tensor_value_info("z", _ELEM[x.dtype.name], None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 10
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x, "y": y})[0]


def _reference_pow(x, y):
    with np.errstate(all="ignore"):
        return lookup("", "Pow").reference([x, y], {OUTPUT_COUNT: 1, SINCE_VERSION: 15})[0]


_BASES = [0, 1, -1, 2, -2, 3, -3, 7, 41, -29, 1000, 46341, 100000, 3037000499, 94906267]
_INT_EXPONENTS = [0, 1, 2, 3, 4, 5, 10, 11, 13, 22, 31, 32, 39, 62, 63, 64, 100, -1, -2, -3]


@pytest.mark.parametrize("xt", ["int32", "int64"])
@pytest.mark.parametrize("yt", POW_TYPES)
def test_integer_pow_equals_onnx_runtime_bit_for_bit(xt, yt):
    """Every base against every exponent: overflow (the type's minimum), negative exponents
    (truncated to 0, or +-1; 0 to a negative power is infinite: the minimum), powers past 2^53
    that glibc rounds (41^10 lies halfway between two doubles), fractional exponents."""
    info = np.iinfo(xt)
    x = np.clip(np.array(_BASES, np.int64), info.min, info.max).astype(xt)[:, None]
    exponents = _INT_EXPONENTS if yt.startswith("int") else _INT_EXPONENTS + [0.5, 1.5, 0.25, 2.7, -0.5, 62.5]
    y = np.array(exponents, yt)[None, :]
    np.testing.assert_array_equal(_reference_pow(x, y), _ort_pow(x, y))


@pytest.mark.parametrize("xt", POW_TYPES)
@pytest.mark.parametrize("yt", POW_TYPES)
def test_pow_with_a_one_element_exponent_equals_onnx_runtime(xt, yt):
    """X of several elements and a one-element Y (a scalar and [1, 1]): ONNX Runtime's x*x and
    x*x*x for 2 and 3 (integers wrap), std::pow for the other values."""
    if xt.startswith("int"):
        x = np.array([0, 1, -1, 3, -7, 1000, 100000, -100000], xt)
    else:
        x = np.array([0.0, -0.0, 1.5, -2.25, 3.0, 0.1, 300.0, np.nan, -np.inf], xt)
    for e in (2, 3, 0, 1, -1, 5):
        for y in (np.array(e, yt), np.array([[e]], yt)):
            got, want = _reference_pow(x, y), _ort_pow(x, y)
            if xt.startswith("int"):
                np.testing.assert_array_equal(got, want)
            else:
                np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                           rtol=1e-6 if xt == "float32" else 1e-3, equal_nan=True)


@pytest.mark.parametrize("xt", ["float32", "float16"])
def test_pow_of_a_half_is_pow_not_a_square_root(xt):
    """An exponent of one 0.5: numpy's loop takes a square root there, which gives NaN for -inf
    and -0 for -0; ONNX Runtime's std::pow (and a GPU's powf) gives +inf and +0. Bits, signs
    included, for a scalar, a [1] and a full exponent."""
    x = np.array([-np.inf, np.inf, -0.0, 0.0, -4.0, 4.0, 2.0, np.nan], xt)
    for y in (np.array(0.5, xt), np.array([0.5], xt), np.full(x.shape, 0.5, xt)):
        got, want = _reference_pow(x, y), _ort_pow(x, y)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
        np.testing.assert_array_equal(got, want)
