"""Det: hipep's CPU device against ONNX Runtime's CPU EP (f32 and f16, batches, 1 x 1 and 0 x 0
matrices, an empty batch, singular matrices, NaN), the run-time shape errors; kernels/det.hip on
the host stand-in (g++ over the unchanged source, a block's threads as host threads) against the
registry's reference, rows swapped by pivoting, zero pivots, more matrices than blocks; and the
launch's parameters against the entry points NVRTC compiles."""
from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

import hipep
from hipep.errors import HipepError
from hipep.runtime import gpu_kernels as gk

from helpers import cpu_session, make_model, needs_nvrtc, tensor
from unit.host_kernels import compile_module, run_on_host

ELEM = {np.float32: TP.FLOAT, np.float16: TP.FLOAT16}
TOL = {np.float32: dict(rtol=1e-4, atol=1e-6), np.float16: dict(rtol=1e-2, atol=1e-3)}
SHAPES = [(3, 3), (2, 4, 4), (2, 3, 5, 5), (1, 1), (3, 1, 1), (0, 2, 2), (2, 0, 0), (12, 12)]


def _model(dtype, shape=None):
    return make_model([helper.make_node("Det", ["x"], ["y"], name="det")], [tensor("x", ELEM[dtype], shape)],
                      [tensor("y", ELEM[dtype], None)], opset=22)


def _matrices(rng, shape, dtype):
    """Random matrices whose determinants stay near 1 in magnitude (entries scaled by 1/sqrt(n))."""
    n = shape[-1] if shape else 1
    return (rng.standard_normal(shape) / np.sqrt(max(n, 1))).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_cpu_device_follows_the_cpu_ep(dtype, shape):
    x = _matrices(np.random.default_rng(len(shape)), shape, dtype)
    model = _model(dtype)
    report = hipep.explain(model, device="cpu")
    assert not report.rejections, [r.reason for r in report.rejections]
    (want,) = cpu_session(model).run(None, {"x": x})
    (got,) = hipep.InferenceSession(model, device="cpu").run(None, {"x": x})
    assert got.dtype == want.dtype and got.shape == want.shape == shape[:-2]
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), **TOL[dtype])


def test_singular_matrices_and_nan():
    x = np.array([[[1, 2], [2, 4]], [[0, 0], [0, 0]], [[np.nan, 1], [1, 1]], [[0, 1], [1, 0]]], np.float32)
    model = _model(np.float32)
    (want,) = cpu_session(model).run(None, {"x": x})
    (got,) = hipep.InferenceSession(model, device="cpu").run(None, {"x": x})
    np.testing.assert_array_equal(got, want)  # 0, 0, NaN, -1 (the swap's sign)
    assert got[3] == -1 and np.isnan(got[2])


@pytest.mark.parametrize("shape,message", [((3,), "rank >= 2"), ((2, 3, 2), "square")])
def test_shapes_that_are_no_matrices_are_errors_naming_the_node(shape, message):
    sess = hipep.InferenceSession(_model(np.float32), device="cpu")  # (the rank unknown until run time)
    with pytest.raises(Exception, match=message) as info:
        sess.run(None, {"x": np.zeros(shape, np.float32)})
    assert "det" in str(info.value)
    (y,) = sess.run(None, {"x": np.eye(3, dtype=np.float32)[None] * 2})  # the session runs on
    assert y.tolist() == [8.0]


# ---- kernels/det.hip on the host stand-in ------------------------------------------------------

needs_gpp = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    out = tmp_path_factory.mktemp("det")
    return {"warp": 32, "det": compile_module(out, "det", 32), "dir": str(out)}


def _on_host(libs, x):
    (got,), (want,), ops = run_on_host(libs, "::Det", [x], {}, sm_count=1, workspace=True)
    return got.reshape(want.shape), want, ops


@needs_gpp
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(3, 3), (9, 4, 4), (2, 3, 5, 5), (1, 1), (2, 0, 0), (17, 17)], ids=str)
def test_kernel_equals_the_reference(libs, dtype, shape):
    """Both decompose in f64: the f32 results agree to an ulp of f32, f16 ones to f16's rounding."""
    x = _matrices(np.random.default_rng(7), shape, dtype)
    got, want, ops = _on_host(libs, x)
    assert [o.entry for o in ops] == [f"hipep_det_{'f32' if dtype == np.float32 else 'f16'}"]
    assert ops[0].grid[0] <= 4  # sm_count 1: nine matrices take a block's loop more than once
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                               rtol=2e-7 if dtype == np.float32 else 1e-3, atol=0)


@needs_gpp
def test_kernel_pivots_and_zero_pivots(libs):
    x = np.array([[[0, 1, 2], [3, 0, 1], [1, 1, 0]],  # a zero on the diagonal: rows swap
                  [[1, 2, 3], [2, 4, 6], [1, 0, 1]],  # singular: an exact zero pivot
                  [[0, 0, 0], [0, 0, 0], [0, 0, 0]],
                  [[np.nan, 1, 0], [1, 1, 0], [0, 0, 1]],
                  [[2, 0, 0], [0, 3, 0], [0, 0, 4]]], np.float32)
    got, want, _ = _on_host(libs, x)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, [7, 0, 0, np.nan, 24])


@needs_nvrtc
def test_launch_passes_what_its_entry_points_take():
    from unit.kernel_emulation import TARGET, arg, out_arg
    from unit.nvrtc_ptx import param_bytes, ptx

    params = param_bytes(ptx("det", "compute_90"))
    target = gk.Target(sm_count=TARGET.sm_count, workspace=lambda n: 0xA00000)
    for dtype in (np.float32, np.float16):
        (op,) = gk.BINDINGS["::Det"].bind([arg(np.zeros((2, 5, 5), dtype), 0x100000)], [out_arg((2,), dtype)], {},
                                          target)
        assert [ctypes.sizeof(p) for p in op.params] == params[op.entry], op.entry


def test_det_needs_a_workspace_and_leaves_f64():
    from unit.kernel_emulation import arg, out_arg

    with pytest.raises(HipepError, match="workspace"):
        gk.BINDINGS["::Det"].bind([arg(np.zeros((2, 2), np.float32), 0x100000)], [out_arg((), np.float32)], {},
                                  gk.Target(sm_count=1))
    assert "float64" in gk.BINDINGS["::Det"].check({}, ["float64"], None, None)


def test_the_gpu_claims_what_its_kernel_computes():
    assert gk.kernel_reason("::Det", {}, ["float32"]) is None
    assert gk.kernel_reason("::Det", {}, ["float16"]) is None
    assert gk.kernel_reason("::Det", {}, ["float64"]) == "no kernel for cuda: Det (element type float64)"
