"""The composed GPU programs of hipep.runtime.gpu_bindings_misc, and LpPool (kernels/pool.hip,
bound in gpu_pool), run on the CPU: their launches (kernels/copy.hip, range.hip, argmax.hip,
reduce.hip and pool.hip, and the generated pointwise kernels) compiled by g++ against the host
stand-in for the CUDA headers (tests/unit/host_cuda) and run block by block over host memory, with
the stream workspace they ask for, then compared with the op registry's references: OneHot
(negative and out-of-range indices, every axis), EyeLike (k past the matrix, f64), Hardmax (ties, NaN
first and later, inner axes, opset 11's flattened rows), LpNormalization (p = 1, 2, zero rows,
inner axes), MeanVarianceNormalization (adjacent and transposed axes), LRN and LpPool (p = 1 to 4,
padding, ceil_mode, dilations; p = 3 and 4 against ONNX Runtime's CPU EP too); f32 within 1e-5,
f16 within 1e-2, integers exactly. The claim checks refuse what has no program. Skipped without
g++."""
from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

from hipep.ops.registry import OUTPUT_COUNT, REQUIRED, SINCE_VERSION, lookup
from hipep.runtime import gpu_kernels as gk
from hipep.runtime.kernel_cache import pointwise_source

from helpers import needs_nvrtc
from unit.host_kernels import HOST_CUDA, HostMemory, compile_module, compile_source, launch

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")

MODULES = ("copy", "range", "argmax", "reduce", "pool")
# Entry points that loop over their elements (grid-stride): a few blocks cover any size on the host.
_GRID_STRIDE = ("hipep_pw_", "hipep_copy_", "hipep_range_", "hipep_lp_pool_")
# The device's round-to-nearest intrinsics (__fadd_rn...) as host functions, FMA contraction off.
_RN = ("-ffp-contract=off", "-include", str(HOST_CUDA / "rn_intrinsics.h"))


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    out = tmp_path_factory.mktemp("misc_kernels")
    return {"dir": out, "generated": {}, **{m: compile_module(out, m, 32, _RN) for m in MODULES}}


def _library(libs, op: gk.KernelOp):
    if op.module is not None:
        return libs[op.module]
    built = libs["generated"].get(op.entry)
    if built is None:
        path = libs["dir"] / f"{op.entry}.hip"
        path.write_text(pointwise_source(op.source))
        built = libs["generated"][op.entry] = compile_source(
            libs["dir"], path, op.entry, 32, _RN)
    return built


def run(libs, op_type: str, inputs, attrs, since=None):
    """Binds ai.onnx `op_type` for `inputs` (defaults, one output and the newest since-version, or
    `since`) and runs its launches on the host: (the output, the reference's, the launches)."""
    op = lookup("", op_type)
    attrs = {**{k: v for k, v in op.attributes.items() if v is not REQUIRED}, **attrs, OUTPUT_COUNT: 1,
             SINCE_VERSION: since or max(op.since_versions)}
    with np.errstate(all="ignore"):
        (want,) = op.reference(list(inputs), attrs)
    mem = HostMemory()
    ins = [None if x is None else mem.put(x)[0] for x in inputs]
    out, got = mem.put(np.full(want.shape, np.nan if want.dtype.kind == "f" else 7, want.dtype))
    target = gk.Target(sm_count=1, warp_size=32, scratch=lambda n: 0,
                       workspace=lambda n: mem.put(np.full(n, 0xA5, np.uint8))[0].ptr)
    binding = gk.binding_for(f"::{op_type}")
    assert binding is not None and not binding.pointwise
    ops = binding.bind(ins, [gk.Arg(out.ptr, out.shape, out.dtype)], attrs, target)
    for o in ops:
        if isinstance(o, gk.CopyOp):
            ctypes.memmove(o.dst, o.src, o.nbytes)
            continue
        if o.entry.startswith(_GRID_STRIDE):
            o.grid = (min(o.grid[0], 2), *o.grid[1:])
        launch(_library(libs, o), o)
    return got, want, ops


def close(got, want):
    if want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want)
        return
    tol = 1e-5 if want.dtype == np.float32 else 1e-2
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


def _x(rng, shape, dtype=np.float32, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, shape).astype(dtype)


# ---- OneHot, EyeLike, Hardmax -------------------------------------------------------------------

@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("index_type,value_type", [(np.int64, np.float32), (np.int32, np.float16),
                                                   (np.int64, np.int64), (np.int32, np.uint8), (np.int64, np.bool_)])
def test_one_hot(libs, axis, index_type, value_type):
    idx = np.array([[0, 3, -1, 5], [-5, -6, 2, 4], [1, 1, 9, -4]], index_type)
    values = np.array([0, 1] if value_type == np.bool_ else [2, -3] if value_type != np.uint8 else [4, 250],
                      value_type)
    got, want, ops = run(libs, "OneHot", [idx, np.array(5, np.int64), values], {"axis": axis})
    assert want.shape[axis if axis >= 0 else 2] == 5
    close(got, want)


@pytest.mark.parametrize("shape,k,dtype", [((3, 4), 0, np.float32), ((4, 3), 1, np.int64), ((5, 5), -2, np.float16),
                                           ((2, 6), 4, np.int32), ((3, 3), 5, np.float32), ((3, 3), -3, np.int64),
                                           ((4, 6), -1, np.float64), ((1, 1), 0, np.float64)])
def test_eye_like(libs, shape, k, dtype):
    got, want, _ = run(libs, "EyeLike", [np.zeros(shape, dtype)], {"k": k})
    assert want.dtype == dtype
    close(got, want)


@pytest.mark.parametrize("x_type,to,k", [(np.float32, TP.INT64, 1), (np.int32, TP.DOUBLE, 0),
                                         (np.float32, TP.DOUBLE, -2)])
def test_eye_like_to_another_type(libs, x_type, to, k):
    got, want, _ = run(libs, "EyeLike", [np.zeros((3, 4), x_type)], {"k": k, "dtype": to})
    assert got.dtype == helper.tensor_dtype_to_np_dtype(to)
    close(got, want)


def test_eye_like_producing_f64_is_claimed_whole_on_cuda():
    """ONNX's test_eyelike_with_dtype (an int32 input, dtype=DOUBLE) and an f64 input: the one node
    claimed by the cuda device."""
    import hipep

    from helpers import make_model, tensor

    for x_elem, attrs in ((TP.INT32, {"dtype": TP.DOUBLE}), (TP.DOUBLE, {"k": 1})):
        model = make_model([helper.make_node("EyeLike", ["x"], ["y"], **attrs)], [tensor("x", x_elem, [3, 4])],
                           [tensor("y", TP.DOUBLE, None)], opset=22)
        report = hipep.explain(model, device="cuda")
        assert report.all_claimed, report.rejection_lines()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_hardmax_ties_and_nan(libs, dtype):
    x = np.array([[1, 3, 3, 0], [2, 2, 1, 2], [np.nan, 2, 1, 5], [1, np.nan, 3, 3], [np.nan] * 4,
                  [-np.inf, np.nan, -np.inf, -np.inf]], dtype)
    got, want, _ = run(libs, "Hardmax", [x], {"axis": -1})
    close(got, want)


@pytest.mark.parametrize("shape,axis,since", [((2, 5, 3), 1, 13), ((4, 7), 0, 13), ((2, 3, 4), 1, 11),
                                              ((3, 300), -1, 13), ((2, 3, 4), 0, 1)])
def test_hardmax_axes(libs, shape, axis, since):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 4, shape).astype(np.float32)  # many ties
    got, want, _ = run(libs, "Hardmax", [x], {"axis": axis}, since=since)
    close(got, want)


# ---- LpNormalization, MeanVarianceNormalization, LRN --------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape,axis,p", [((3, 5), -1, 2), ((3, 5, 4), 1, 1), ((4, 70), 0, 2), ((2, 3, 40), -1, 1)])
def test_lp_normalization(libs, dtype, shape, axis, p):
    rng = np.random.default_rng(2)
    x = _x(rng, shape, dtype)
    x[0] = 0  # a zero line (along axis -1 and, where the axis is not 0, zero norms elsewhere)
    got, want, _ = run(libs, "LpNormalization", [x], {"axis": axis, "p": p})
    close(got, want)


@pytest.mark.parametrize("shape,axes", [((2, 3, 4, 5), [0, 2, 3]), ((2, 3, 4, 5), [2, 3]), ((1, 3, 4, 5), [0, 2, 3]),
                                        ((3, 4, 6), [0, 2]), ((3, 40), [0]), ((2, 3, 4), [0, 1, 2])])
def test_mean_variance_normalization(libs, shape, axes):
    rng = np.random.default_rng(3)
    x = _x(rng, shape, lo=-1.0, hi=3.0)
    got, want, ops = run(libs, "MeanVarianceNormalization", [x], {"axes": axes})
    close(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape,size,attrs", [((1, 6, 3, 4), 3, {}), ((2, 5, 2, 3), 5, {"alpha": 0.1, "beta": 0.5}),
                                              ((1, 2, 4, 4), 7, {"bias": 2.0}), ((2, 3, 1, 5), 1, {})])
def test_lrn(libs, dtype, shape, size, attrs):
    rng = np.random.default_rng(4)
    x = _x(rng, shape, dtype, -3.0, 3.0)
    got, want, _ = run(libs, "LRN", [x], {"size": size, **attrs})
    close(got, want)


# ---- LpPool ----------------------------------------------------------------------------

LP_POOL = [((1, 2, 5, 5), {"kernel_shape": [2, 2]}), ((2, 3, 6, 7), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
           ((1, 2, 7, 6), {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1}),
           ((2, 2, 9), {"kernel_shape": [4], "strides": [2], "auto_pad": "SAME_UPPER"}),
           ((1, 1, 4, 4, 4), {"kernel_shape": [2, 2, 2], "dilations": [1, 2, 1]}),
           ((1, 2, 6, 6), {"kernel_shape": [3, 3], "auto_pad": "SAME_LOWER", "dilations": [2, 1]})]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("p", [1, 2, 3, 4])
@pytest.mark.parametrize("shape,attrs", LP_POOL)
def test_lp_pool(libs, dtype, p, shape, attrs):
    rng = np.random.default_rng(6)
    got, want, ops = run(libs, "LpPool", [_x(rng, shape, dtype)], {"p": p, **attrs})
    assert [o.entry for o in ops] == [f"hipep_lp_pool_{'f32' if dtype == np.float32 else 'f16'}"]
    close(got, want)


@pytest.mark.parametrize("p", [3, 4])
def test_lp_pool_equals_onnx_runtimes_cpu_ep(libs, p):
    """The kernel's arithmetic is ONNX Runtime's (each power in double rounded to f32, summed in
    f32 in window order, the root by the f32 exponent 1/p): within an ulp or two of its CPU EP,
    over magnitudes where the sums' rounding shows."""
    from helpers import cpu_session, make_model, tensor

    rng = np.random.default_rng(13)
    x = (rng.standard_normal((2, 3, 9, 8)) * rng.choice([1e-3, 1.0, 30.0], (2, 3, 9, 8))).astype(np.float32)
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 1], "p": p}
    model = make_model([helper.make_node("LpPool", ["x"], ["y"], **attrs)], [tensor("x", TP.FLOAT, list(x.shape))],
                       [tensor("y", TP.FLOAT, None)], opset=18)
    (want,) = cpu_session(model).run(None, {"x": x})
    got, _, _ = run(libs, "LpPool", [x], attrs)
    np.testing.assert_allclose(got, want, rtol=3e-7, atol=0)


# ---- what the checks refuse ---------------------------------------------------------------------

@pytest.mark.parametrize("op_type,attrs,dtypes", [
    ("LpNormalization", {"p": 3}, ["float32"]),
    ("LpPool", {"p": 2, "kernel_shape": [2, 2]}, ["float64"]),
    ("MeanVarianceNormalization", {"axes": [0, 2, 3]}, ["float16"]),
    ("MeanVarianceNormalization", {"axes": []}, ["float32"]),
    ("OneHot", {"axis": -1}, ["float32", "int64", "float32"]),
    ("Hardmax", {"axis": -1}, ["float64"]),
    ("EyeLike", {"k": 0, "dtype": TP.UINT8}, ["float32"]),
    ("EyeLike", {"k": 0}, ["bfloat16"]),
    ("CumProd", {}, ["bfloat16", "int64"]),
])
def test_unsupported_forms_are_refused(op_type, attrs, dtypes):
    op = lookup("", op_type)
    full = {**{k: v for k, v in op.attributes.items() if v is not REQUIRED}, **attrs,
            SINCE_VERSION: max(op.since_versions)}
    assert gk.kernel_reason(f"::{op_type}", full, dtypes) is not None


@pytest.mark.parametrize("op_type,attrs,dtypes", [
    ("LpNormalization", {"p": 1}, ["float16"]),
    ("LpPool", {"p": 2, "kernel_shape": [2, 2]}, ["float32"]),
    ("LpPool", {"p": 3, "kernel_shape": [2, 2]}, ["float32"]),
    ("LpPool", {"p": 7, "kernel_shape": [2, 2]}, ["float16"]),
    ("MeanVarianceNormalization", {}, ["float32"]),
    ("BitShift", {"direction": "RIGHT"}, ["uint64", "uint64"]),
    ("BitShift", {"direction": "LEFT"}, ["int8", "int8"]),
    ("OneHot", {"axis": -1}, ["int64", "int64", "float16"]),
    ("Hardmax", {"axis": -1}, ["float16"]),
    ("EyeLike", {"k": 0, "dtype": TP.INT32}, ["float32"]),
    ("EyeLike", {"k": 0, "dtype": TP.DOUBLE}, ["int32"]),
    ("EyeLike", {"k": 2}, ["float64"]),
    ("CumProd", {}, ["float64", "int64"]),
    ("LRN", {"size": 5}, ["float32"]),
])
def test_supported_forms_are_claimed(op_type, attrs, dtypes):
    op = lookup("", op_type)
    full = {**{k: v for k, v in op.attributes.items() if v is not REQUIRED}, **attrs,
            SINCE_VERSION: max(op.since_versions)}
    assert gk.kernel_reason(f"::{op_type}", full, dtypes) is None


# ---- the generated kernels compile for the GPU ---------------------------------------------------

def _generated_kernels():
    from hipep.runtime import gpu_bindings_misc as misc

    out = [(misc.one_hot_expression(i, v), [i, "int64", "int64", v, v])
           for i in ("int32", "int64") for v in misc._EXPRESSION_TYPES]
    for t in ("float32", "float16"):
        out += [(misc.hardmax_expression(t), [t, "int64", "int64"]), (misc.lp_norm_expression(t), [t, t]),
                (misc.lrn_expression(t, 1e-4, 0.75, 1.0, 5), ["float32", "float32"])]
    out += [(misc._to_f32_expression("float16"), ["float16"]), (misc.mvn_center_expression(), ["float32"] * 2),
            (misc.mvn_expression(60), ["float32"] * 3)]
    return out


@needs_nvrtc
def test_generated_kernels_compile_through_nvrtc():
    from hipep.runtime import kernel_cache

    for expr, dtypes in _generated_kernels():
        r = gk.render_pointwise(expr, dtypes, [expr.nodes[o][1] for o in expr.outputs])
        data, _ = kernel_cache.compile_cubin(r.source, r.name, "sm_90", {"HIPEP_WARP_SIZE": 32}, use_cache=False)
        assert r.name.encode() + b"\0" in data, dtypes
