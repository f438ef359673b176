"""QLinearMatMul's GPU program (hipep.runtime.gpu_matmul_integer: kernels/matmul_integer.hip into
the stream workspace, then the requantizing expression) run on the CPU (tests/unit/host_kernels.py),
compared bit for bit with the registry's reference, which follows ONNX Runtime's MLAS: every type
combination ORT runs, per-tensor and per-column B scales and zero points, batches, saturation at
both ends, ties rounding to even, and NaN or infinite scales. Skipped without g++."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from hipep.runtime import gpu_kernels as gk

from unit.host_kernels import compile_module, run_on_host

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
F32 = np.float32
TYPES = [(np.uint8, np.uint8, np.uint8), (np.uint8, np.int8, np.uint8), (np.int8, np.int8, np.int8)]


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    build = tmp_path_factory.mktemp("qlinear_matmul")
    return {"warp": 32, "dir": build, "matmul_integer": compile_module(build, "matmul_integer", 32)}


def _rand(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _run(libs, a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp):
    inputs = [a, F32(a_scale) if np.ndim(a_scale) == 0 else a_scale, a_zp, b, b_scale,
              b_zp, F32(y_scale) if np.ndim(y_scale) == 0 else y_scale, y_zp]
    inputs = [np.asarray(x) for x in inputs]
    (got,), (want,), ops = run_on_host(libs, "::QLinearMatMul", inputs, {}, workspace=True)
    assert got.dtype == want.dtype == y_zp.dtype
    np.testing.assert_array_equal(got.reshape(want.shape), want)
    return want, ops


@pytest.mark.parametrize("ta,tb,ty", TYPES)
@pytest.mark.parametrize("a_shape,b_shape", [((5, 7), (7, 9)), ((70, 33), (33, 65)), ((2, 1, 4, 6), (3, 6, 5)),
                                             ((7,), (7, 3)), ((3, 40), (40,))])
def test_qlinear_matmul_equals_the_reference(libs, ta, tb, ty, a_shape, b_shape):
    rng = np.random.default_rng(hash((a_shape, b_shape)) % 1000)
    a, b = _rand(rng, ta, a_shape), _rand(rng, tb, b_shape)
    k = a_shape[-1]
    y_scale = F32(0.02 * k)  # keeps most outputs inside the range, some saturate
    want, ops = _run(libs, a, F32(0.05), _rand(rng, ta, ()), b, F32(0.03), _rand(rng, tb, ()), y_scale,
                     _rand(rng, ty, ()))
    assert [o.module for o in ops] == ["matmul_integer", None]
    if len(b_shape) >= 2:  # per-column scales and zero points of B
        n = b_shape[-1]
        _run(libs, a, F32(0.05), _rand(rng, ta, (1,)), b, rng.uniform(0.01, 0.05, n).astype(F32),
             _rand(rng, tb, (n,)), np.array([y_scale], F32), _rand(rng, ty, (1,)))


def test_saturation_and_ties(libs):
    # a 1 x 1 product per column: y = rint(acc * scale) + zp with acc * scale landing on .5 exactly
    a = np.array([[1]], np.uint8)
    b = np.arange(256, dtype=np.uint8).reshape(1, 256)
    want, _ = _run(libs, a, F32(1), np.uint8(0), b, F32(0.5), np.uint8(0), F32(1), np.uint8(10))
    assert want[0, 3] == 10 + 2 and want[0, 5] == 10 + 2 and want[0, 7] == 10 + 4  # 1.5 -> 2, 2.5 -> 2, 3.5 -> 4
    assert want[0, -1] == 138  # 127.5 -> 128, + 10
    # both ends saturate
    want, _ = _run(libs, np.full((2, 50), 127, np.int8), F32(1), np.int8(-128), np.full((50, 3), 127, np.int8),
                   F32(1), np.int8(-128), F32(0.5), np.int8(0))
    assert (want == 127).all()
    want, _ = _run(libs, np.full((2, 50), -128, np.int8), F32(1), np.int8(127), np.full((50, 3), 127, np.int8),
                   F32(1), np.int8(-128), F32(0.5), np.int8(3))
    assert (want == -128).all()


@pytest.mark.parametrize("a_scale,y_scale", [(0.0, 0.0), (np.nan, 1.0), (1.0, 0.0), (np.inf, 1.0)])
def test_nan_and_infinite_scales(libs, a_scale, y_scale):
    rng = np.random.default_rng(5)
    a, b = _rand(rng, np.uint8, (4, 6)), _rand(rng, np.int8, (6, 5))
    with np.errstate(all="ignore"):
        _run(libs, a, F32(a_scale), np.uint8(128), b, F32(1), np.int8(0), F32(y_scale), np.uint8(7))


def test_claims():
    f32, u8, i8 = "float32", "uint8", "int8"
    dtypes = [u8, f32, u8, i8, f32, i8, f32, u8]
    shapes = [(4, 8), (), (), (8, 16), (16,), (16,), (), ()]
    assert gk.kernel_reason("::QLinearMatMul", {}, dtypes, shapes) is None
    assert "a_scale of shape [4]" in gk.kernel_reason("::QLinearMatMul", {}, dtypes, [shapes[0], (4,)] + shapes[2:])
    assert "b_scale of shape [8]" in gk.kernel_reason("::QLinearMatMul", {}, dtypes, shapes[:4] + [(8,)] + shapes[5:])
    assert "a_zero_point of shape [4]" in gk.kernel_reason("::QLinearMatMul", {}, dtypes, shapes[:2] + [(4,)] + shapes[3:])


@pytest.mark.parametrize("ta,tb,ty", TYPES)
def test_f16_scales_are_widened_as_the_reference_does(libs, ta, tb, ty):
    """Opset 21's f16 scales: the expression reads them as f16 and widens them to f32 first."""
    rng = np.random.default_rng(21)
    a, b = _rand(rng, ta, (6, 20)), _rand(rng, tb, (20, 7))
    def f16(v):  # a one-element scale (_run turns 0-d scales into f32)
        return np.array([v], np.float16)

    _run(libs, a, f16(0.05), _rand(rng, ta, ()), b, f16(0.03), _rand(rng, tb, ()), f16(0.4), _rand(rng, ty, ()))
    _run(libs, a, f16(0.05), _rand(rng, ta, ()), b, rng.uniform(0.01, 0.05, 7).astype(np.float16),
         _rand(rng, tb, (7,)), f16(0.4), _rand(rng, ty, ()))
