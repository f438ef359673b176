"""Generated pointwise kernels run on the CPU: the HIP source hipep renders from an op's pointwise
expression (the GPU's program for that op) is compiled by g++ against the host stand-in for the
CUDA headers, and the launch the binding gives runs over host memory, compared with the op's
registry reference (the CPU device's). Covers the com.microsoft GELU family (f64 tanh, exp and erf
rounded to f32; f16 through the function body's constants) beside a few ai.onnx ops whose f32
forms replay MLAS (Sigmoid, Tanh, Gelu with approximate='tanh'), with broadcasting, NaN and
infinities; BatchNormalization, whose generated kernel reads its per-channel parameters along
axis 1; BitShift on every integer type it takes, exactly (shift amounts past the width and
negative ones, the sign fill, broadcasting); Clip and Where on the integer types; and Pow of every
type pair, its exponent a tensor or one element, known when bound or only at run time (integers
exactly: C's pow in double, converted as x86 converts). Skipped without g++."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from hipep.ops.registry import OUTPUT_COUNT, REQUIRED, SINCE_VERSION, lookup
from hipep.runtime import gpu_kernels as gk
from hipep.runtime.kernel_cache import pointwise_source

from unit.host_kernels import HOST_CUDA, HostMemory, compile_source, launch

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
MS = "com.microsoft"
SHAPE = (3, 5, 37)

CASES = [  # (domain, op, inputs as shapes (None: omitted), attributes)
    (MS, "FastGelu", [SHAPE], {}),
    (MS, "FastGelu", [SHAPE, SHAPE[-1:]], {}),
    (MS, "QuickGelu", [SHAPE], {}),
    (MS, "QuickGelu", [SHAPE], {"alpha": 1.3}),
    (MS, "BiasGelu", [SHAPE, SHAPE[-1:]], {}),
    ("", "Sigmoid", [SHAPE], {}),
    ("", "Tanh", [SHAPE], {}),
    ("", "Gelu", [SHAPE], {"approximate": "tanh"}),
    ("", "Gelu", [SHAPE], {}),
    ("", "Celu", [SHAPE], {"alpha": 0.3}),  # f16 from opset 28: alpha rounded to f16 first
]


def _compile(tmp_path, source: str, name: str):
    path = tmp_path / f"{name}.hip"
    path.write_text(source)
    return compile_source(tmp_path, path, name, 32, ("-ffp-contract=off", "-include", str(HOST_CUDA / "rn_intrinsics.h")))


def _values(rng, shape, dtype):
    x = rng.uniform(-8, 8, shape).astype(dtype)
    if len(shape) == len(SHAPE):
        x.reshape(-1)[:6] = [np.nan, np.inf, -np.inf, 0.0, -30.0, 30.0]
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("domain,op_type,shapes,attrs", CASES,
                         ids=[f"{c[1]}-{len(c[2])}in-{'-'.join(map(str, c[3].values())) or 'default'}" for c in CASES])
def test_a_generated_kernel_computes_what_the_reference_does(tmp_path, domain, op_type, shapes, attrs, dtype):
    op = lookup(domain, op_type)
    attrs = {**{k: v for k, v in op.attributes.items() if v is not REQUIRED}, **attrs, OUTPUT_COUNT: 1,
             SINCE_VERSION: max(op.since_versions)}
    rng = np.random.default_rng(len(op_type) + len(shapes))
    inputs = [_values(rng, s, dtype) for s in shapes]
    with np.errstate(all="ignore"):
        (want,) = op.reference(list(inputs), attrs)
    mem = HostMemory()
    out, got = mem.put(np.full(want.shape, 7, want.dtype))
    key = f"{domain}::{op_type}" if domain else f"::{op_type}"
    binding = gk.binding_for(key)
    assert binding is not None and binding.pointwise, f"{key} has no generated GPU kernel"
    ops = binding.bind([mem.put(x)[0] for x in inputs], [gk.Arg(out.ptr, out.shape, out.dtype)], attrs,
                       gk.Target(sm_count=2, warp_size=32, scratch=lambda n: 0))
    assert len(ops) == 1 and ops[0].source is not None
    ops[0].grid = (min(ops[0].grid[0], 2), *ops[0].grid[1:])  # the grid-stride loop covers the rest
    launch(_compile(tmp_path, pointwise_source(ops[0].source), ops[0].entry), ops[0])
    # the same values up to the math library's f64 tanh/exp/erf against the reference's (numpy's,
    # and hipep's own erf series, accurate to ~1e-13: where 1 + erf cancels in the negative tail,
    # that is a few 1e-7 of the tiny result)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                               rtol=1e-6 if dtype == np.float32 else 1e-3, atol=1e-30)


@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (4, 6), (1, 8, 9)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_batch_normalization_kernel_equals_the_reference(tmp_path, shape, dtype):
    op = lookup("", "BatchNormalization")
    attrs = {**{k: v for k, v in op.attributes.items() if v is not REQUIRED}, "epsilon": 1e-3, OUTPUT_COUNT: 1}
    rng = np.random.default_rng(len(shape))
    c = shape[1]
    inputs = [rng.uniform(-3, 3, shape).astype(dtype), rng.uniform(0.5, 2, c).astype(dtype),
              rng.uniform(-1, 1, c).astype(dtype), rng.uniform(-1, 1, c).astype(dtype), rng.uniform(0.1, 2, c).astype(dtype)]
    (want,) = op.reference(list(inputs), attrs)
    mem = HostMemory()
    out, got = mem.put(np.full(want.shape, 7, want.dtype))
    ops = gk.binding_for("::BatchNormalization").bind([mem.put(x)[0] for x in inputs],
                                                       [gk.Arg(out.ptr, out.shape, out.dtype)], attrs,
                                                       gk.Target(sm_count=2, warp_size=32, scratch=lambda n: 0))
    (launch_op,) = ops
    launch_op.grid = (min(launch_op.grid[0], 2), *launch_op.grid[1:])
    launch(_compile(tmp_path, pointwise_source(launch_op.source), launch_op.entry), launch_op)
    np.testing.assert_array_equal(got, want)  # the same f32 operations in the same order


def _run_generated(tmp_path, op_type: str, inputs, attrs):
    """The op's generated kernel over `inputs` on the host: (its output, the reference's)."""
    op = lookup("", op_type)
    attrs = {**{k: v for k, v in op.attributes.items() if v is not REQUIRED}, **attrs, OUTPUT_COUNT: 1}
    (want,) = op.reference(list(inputs), attrs)
    mem = HostMemory()
    out, got = mem.put(np.full(want.shape, 7, want.dtype))
    ops = gk.binding_for(f"::{op_type}").bind([None if x is None else mem.put(x)[0] for x in inputs],
                                              [gk.Arg(out.ptr, out.shape, out.dtype)], attrs,
                                              gk.Target(sm_count=2, warp_size=32, scratch=lambda n: 0))
    assert len(ops) == 1 and ops[0].entry.startswith("hipep_pw_")
    ops[0].grid = (min(ops[0].grid[0], 2), *ops[0].grid[1:])
    launch(_compile(tmp_path, pointwise_source(ops[0].source), ops[0].entry), ops[0])
    return got, want


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64, np.int8, np.int16, np.int32, np.int64])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_kernel_equals_the_reference(tmp_path, dtype, direction):
    rng = np.random.default_rng(5)
    bits = np.dtype(dtype).itemsize * 8
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, (3, 2 * bits + 4), dtype=dtype, endpoint=True)
    x[0, :4] = [info.min, info.max, 0, -1 if info.min else 1]
    y = np.arange(2 * bits + 4, dtype=dtype)  # every shift, and past the width
    if info.min:
        y[-4:] = [-1, -bits, info.min, info.max]  # negative amounts: the sign fill, as past the width
    got, want = _run_generated(tmp_path, "BitShift", [x, y], {"direction": direction})
    np.testing.assert_array_equal(got, want)
    got, want = _run_generated(tmp_path, "BitShift", [x[:, :1], y.reshape(1, -1)], {"direction": direction})
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.uint32, np.uint64, np.int32, np.int64])
def test_clip_and_where_on_the_integer_types_onnx_runtime_takes(tmp_path, dtype):
    """Clip (both bounds, one, none; min above max) and Where on every integer type ONNX Runtime's
    CPU EP has them for (Where: not uint64), exactly."""
    info = np.iinfo(dtype)
    x = np.array([info.min, info.max, 0, 1, 5, 7, 100, info.max - 1], dtype).reshape(2, 4)
    for lo, hi in ((1, 100), (None, 6), (5, None), (None, None), (7, 3)):
        bounds = [None if v is None else np.array(v, dtype) for v in (lo, hi)]
        got, want = _run_generated(tmp_path, "Clip", [x, *bounds], {SINCE_VERSION: 13})
        np.testing.assert_array_equal(got, want)
    if dtype != np.uint64:
        cond = np.array([[True], [False]])
        got, want = _run_generated(tmp_path, "Where", [cond, x, x[:, ::-1].copy()], {})
        np.testing.assert_array_equal(got, want)


_CAST_WIDTHS = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]


@pytest.mark.parametrize("src", _CAST_WIDTHS + [np.float32, np.float16, np.float64, np.bool_])
def test_cast_between_every_integer_width_and_the_floats(tmp_path, src):
    """Cast from each type to every integer width and back to the floats, exactly as the reference
    (numpy's astype, which ORT's CPU EP matches): integers wrap to the narrower widths; floats
    truncate toward zero (values within every target's range: past it C leaves the result to the
    hardware)."""
    from onnx.helper import np_dtype_to_tensor_dtype
    if np.dtype(src).kind == "f":
        x = np.array([0.0, -0.0, 1.5, -1.5, 2.7, -2.7, 100.25, -127.9, 126.5, 3.0], src)
    elif src is np.bool_:
        x = np.array([True, False, True])
    else:
        info = np.iinfo(src)
        x = np.array([v for v in (0, 1, info.max, info.min, info.max // 3, 100, 255, 256) if info.min <= v <= info.max], src)
    unsigned_safe = x if np.dtype(src).kind != "f" else np.abs(x)
    for dst in _CAST_WIDTHS + [np.float32, np.float16, np.float64, np.bool_]:
        if np.dtype(dst) == np.dtype(src):
            continue
        operand = unsigned_safe if np.dtype(dst).kind == "u" else x
        attrs = {"to": np_dtype_to_tensor_dtype(np.dtype(dst)), SINCE_VERSION: 21}
        got, want = _run_generated(tmp_path, "Cast", [operand], attrs)
        assert got.dtype == np.dtype(dst)
        np.testing.assert_array_equal(got, want, err_msg=f"{np.dtype(src)} -> {np.dtype(dst)}")


@pytest.mark.parametrize("src,dst", [(np.int8, np.uint16), (np.uint64, np.float32), (np.float64, np.int16),
                                     (np.uint8, np.float16), (np.int64, np.uint32)])
def test_cast_like_takes_the_type_of_its_second_input(tmp_path, src, dst):
    """CastLike's kernel converts as Cast's does, to the element type of an operand it never reads."""
    x = np.array([0, 1, 2, 100, 126, 3], src)
    got, want = _run_generated(tmp_path, "CastLike", [x, np.zeros(7, dst)], {SINCE_VERSION: 21})
    assert got.dtype == np.dtype(dst)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, x.astype(dst))


# ---- Pow: every type pair, exponents known when bound and only at run time ----------------------

POW_TYPES = [np.float32, np.float16, np.int32, np.int64]
_BUILT: dict = {}  # generated kernel name -> its host library (one build per program)


def _run_pow(tmp_path, x: np.ndarray, y: np.ndarray, run_time: bool):
    """Pow's generated kernel over x and y on the host: (its output, the reference's, the
    kernel's name). With
    `run_time` the exponent is bound as a device tensor the host cannot read (a graph input),
    else as a plan constant whose value the expression may use."""
    op = lookup("", "Pow")
    attrs = {OUTPUT_COUNT: 1}
    with np.errstate(all="ignore"):
        (want,) = op.reference([x, y], attrs)
    mem = HostMemory()
    out, got = mem.put(np.full(want.shape, 7, want.dtype))
    xa, ya = mem.put(x)[0], mem.put(y)[0]
    if run_time:
        ya = gk.Arg(ya.ptr, ya.shape, ya.dtype)
    ops = gk.binding_for("::Pow").bind([xa, ya], [gk.Arg(out.ptr, out.shape, out.dtype)], attrs,
                                       gk.Target(sm_count=2, warp_size=32, scratch=lambda n: 0))
    if want.size == 0:
        assert ops == []
        return got, want, None
    (kernel,) = ops
    kernel.grid = (min(kernel.grid[0], 2), *kernel.grid[1:])
    lib = _BUILT.get(kernel.entry)
    if lib is None:
        # f16 from a double in one rounding (CUDA's __double2half), which the host stand-in lacks
        extra = tmp_path / "double2half.h"
        extra.write_text('#include "cuda_fp16.h"\ninline __half __double2half(double v) { return (__half)v; }\n')
        path = tmp_path / f"{kernel.entry}.hip"
        path.write_text(pointwise_source(kernel.source))
        lib = _BUILT[kernel.entry] = compile_source(tmp_path, path, kernel.entry, 32, (
            "-ffp-contract=off", "-include", str(HOST_CUDA / "rn_intrinsics.h"), "-include", str(extra)))
    launch(lib, kernel)
    return got, want, kernel.entry


def _pow_bases(dtype) -> np.ndarray:
    if np.dtype(dtype).kind == "i":
        info = np.iinfo(dtype)
        return np.array([0, 1, -1, 2, -2, 3, -3, 7, -29, 43, 1000, -1000, 46341, 100000, 3037000499,
                         info.max, info.min], np.int64).clip(info.min, info.max).astype(dtype)
    return np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 1.5, 10.0, -7.25, 300.0,
                     np.inf, -np.inf, np.nan], dtype)


def _pow_exponents(dtype) -> np.ndarray:
    if np.dtype(dtype).kind == "i":
        info = np.iinfo(dtype)
        return np.array([0, 1, 2, 3, 4, 5, 10, 13, 31, 32, 62, 63, 64, 200, -1, -2, -3, info.max, info.min],
                        np.int64).astype(dtype)
    return np.array([0.0, -0.0, 1.0, 2.0, 3.0, 0.5, -0.5, 1.5, -1.0, -2.0, 2.5, 31.0, 0.25, np.inf, -np.inf,
                     np.nan], dtype)


def _halfway(power: int) -> bool:
    """Whether an integer lies exactly halfway between two doubles (its odd part 54 bits long)."""
    power = abs(power)
    while power and power % 2 == 0:
        power //= 2
    return power.bit_length() == 54


def _assert_pow_equal(got, want, dtype):
    if np.dtype(dtype).kind == "i":  # C's pow in double, then the x86 conversion: bit for bit
        np.testing.assert_array_equal(got, want)
        return
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    # the host's libm against numpy's pow: an ulp or so (the GPU's pow is within an ulp or two)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-6 if dtype == np.float32
                               else 1e-3, atol=0)


@pytest.mark.parametrize("xt", POW_TYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("yt", POW_TYPES, ids=lambda t: np.dtype(t).name)
def test_pow_with_a_tensor_exponent_equals_the_reference(tmp_path, xt, yt):
    """Every base against every exponent (broadcast [n, 1] by [1, m]): negative bases, zero and
    negative exponents, overflow past the integer type (its minimum, as x86 converts), NaN and
    infinities; the exponent a tensor known only at run time, then one known when bound."""
    x, y = _pow_bases(xt)[:, None], _pow_exponents(yt)[None, :]
    if np.dtype(xt).kind == "i" and np.dtype(yt).kind == "i":  # (the kernel rounds those to even)
        assert not any(_halfway(int(a) ** int(e)) for a in x.ravel() for e in y.ravel() if 0 <= e <= 64)
    for run_time in (True, False):
        got, want, _ = _run_pow(tmp_path, x, y, run_time)
        _assert_pow_equal(got, want, xt)


@pytest.mark.parametrize("xt", POW_TYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("yt", POW_TYPES, ids=lambda t: np.dtype(t).name)
def test_pow_with_a_one_element_exponent_tests_its_value_in_the_kernel(tmp_path, xt, yt):
    """A one-element exponent known only at run time: one kernel tests for 2 and 3 (ONNX
    Runtime's x*x and x*x*x, which wrap for integers where std::pow gives the type's minimum)
    and computes std::pow otherwise; the same values as the reference, which knows the value."""
    x = _pow_bases(xt).reshape(1, -1)
    entries = set()
    for e in (2, 3, 0, 1, -1, 5):
        for y in (np.array(e, yt), np.array([[e]], yt)):
            got, want, entry = _run_pow(tmp_path, x, y, run_time=True)
            _assert_pow_equal(got, want, xt)
            entries.add(entry)
    assert len(entries) == 1  # one program whatever the exponent's value
    if np.dtype(xt).kind == "i":  # the wrapped square, not std::pow's minimum
        got, _, _ = _run_pow(tmp_path, np.array([100000, 3], xt), np.array(2, yt), run_time=True)
        assert got.tolist() == [(np.array([100000], xt) * np.array([100000], xt)).item(), 9]


def test_integer_pow_is_exact_past_two_to_the_53(tmp_path):
    """int64 powers up to 2^63 in magnitude are computed exactly and rounded once to a double,
    which is what glibc's pow gives (exact below 2^53), then truncated; past 2^63 the type's
    minimum. 3^34 lies exactly halfway between two doubles: the kernel rounds it to even,
    glibc's pow (ONNX Runtime's and the reference's) rounds it up."""
    x = np.array([3, -3, 7, 43, -31, 2, -2, 3037000499, 94906265, 5, 13], np.int64)
    y = np.array([39, 39, 22, 10, 11, 62, 63, 2, 2, 27, 17], np.int64)
    assert not any(_halfway(int(a) ** int(e)) for a, e in zip(x, y))
    got, want, _ = _run_pow(tmp_path, x, y, run_time=True)
    np.testing.assert_array_equal(got, want)
    got, want, _ = _run_pow(tmp_path, np.array([3], np.int64), np.array([34], np.int64), run_time=True)
    assert 3 ** 34 == 16677181699666569 and got.tolist() == [16677181699666568] and want.tolist() == [16677181699666570]
