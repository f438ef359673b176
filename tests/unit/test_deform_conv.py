"""DeformConv: hipep's CPU device (hipep.ops.deform_conv) against ONNX Runtime's CPU EP over random
geometries -- groups, offset groups, strides, dilations, pads, kernel_shape given or taken from W,
bias, mask, offsets that leave the image, NaN offsets -- in f32, f64 and f16; the shape errors at
run time, naming the node; what is left unclaimed. kernels/deform_conv.hip on the host stand-in
(g++ over the unchanged source): its columns bit for bit against the reference's sampling, and the
whole binding (columns, then Conv's GEMM) against the reference; its launch's parameters against
the entry points NVRTC compiles."""
from __future__ import annotations

import ctypes
import shutil

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper

import hipep
from hipep.ops.deform_conv import deform_params, sample_columns
from hipep.runtime import gpu_kernels as gk

from helpers import cpu_session, make_model, needs_nvrtc, tensor
from unit.host_kernels import EXACT_FLAGS, HostMemory, compile_module, launch, run_on_host

ELEM = {np.float32: TP.FLOAT, np.float16: TP.FLOAT16, np.float64: TP.DOUBLE}
NAMES = ["x", "w", "offset", "b", "mask"]
TOL = {np.float32: dict(rtol=1e-5, atol=1e-5), np.float64: dict(rtol=1e-12, atol=1e-12),
       np.float16: dict(rtol=1e-2, atol=1e-2)}


def _ort_runs_deform_conv() -> bool:
    try:
        cpu_session(_model(np.float32, {}, 3))
        return True
    except Exception:
        return False


def _model(dtype, attrs, n_in, rank=4, opset=22):
    names = NAMES[:n_in]
    inputs = [tensor(k, ELEM[dtype], [f"{k}{i}" for i in range(1 if k == "b" else (rank if k == "x" else 4))])
              for k in names]
    node = helper.make_node("DeformConv", names, ["y"], name="deform", **attrs)
    return make_model([node], inputs, [tensor("y", ELEM[dtype], None)], opset=opset)


def _case(seed, dtype=np.float32):
    """A random DeformConv: (attributes, feeds)."""
    rng = np.random.default_rng(seed)
    group, offset_group = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    c, m = group * offset_group * int(rng.integers(1, 3)), group * int(rng.integers(1, 3))
    kh, kw = (int(v) for v in rng.integers(1, 4, 2))
    height, width = (int(v) for v in rng.integers(3, 8, 2))
    attrs = {"group": group, "offset_group": offset_group, "strides": [int(v) for v in rng.integers(1, 3, 2)],
             "dilations": [int(v) for v in rng.integers(1, 3, 2)], "pads": [int(v) for v in rng.integers(0, 2, 4)]}
    if seed % 4 == 0:
        attrs["kernel_shape"] = [kh, kw]
    n = int(rng.integers(1, 3))
    while True:  # (an image too small for the dilated kernel grows until the output is not empty)
        p = deform_params([n, c, height, width], [m, c // group, kh, kw], [n, offset_group * 2 * kh * kw, None, None],
                          attrs=attrs)
        oh, ow = p["out"]
        if oh and ow:
            break
        height, width = height + 2, width + 2
    feeds = {"x": rng.standard_normal((n, c, height, width)).astype(dtype),
             "w": rng.standard_normal((m, c // group, kh, kw)).astype(dtype),
             "offset": (rng.standard_normal((n, offset_group * 2 * kh * kw, oh, ow)) * 2.5).astype(dtype)}
    if seed % 3 > 0:
        feeds["b"] = rng.standard_normal(m).astype(dtype)
    if seed % 3 > 1:
        feeds["mask"] = rng.random((n, offset_group * kh * kw, oh, ow)).astype(dtype)
    return attrs, feeds


# The since-versions the comparisons below run (tests/unit/test_ops_reference.py's coverage check)
COVERED = [("DeformConv", 19), ("DeformConv", 22)]

needs_ort_kernel = pytest.mark.skipif(not _ort_runs_deform_conv(),
                                      reason=f"onnxruntime {ort.__version__} has no DeformConv kernel to compare with")


@needs_ort_kernel
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("seed", range(12))
def test_cpu_device_follows_the_cpu_ep(dtype, seed):
    attrs, feeds = _case(seed, dtype)
    model = _model(dtype, attrs, len(feeds), opset=19 if seed % 2 else 22)
    report = hipep.explain(model, device="cpu")
    assert not report.rejections, [r.reason for r in report.rejections]
    (want,) = cpu_session(model).run(None, feeds)
    (got,) = hipep.InferenceSession(model, device="cpu").run(None, feeds)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), **TOL[dtype])


@needs_ort_kernel
def test_offsets_outside_the_image_and_nan_offsets_sample_zero():
    attrs, feeds = _case(5)
    feeds["offset"][:, ::3] = 40.0  # far past the image: every such tap reads zero
    feeds["offset"][:, 1::5] = np.nan
    model = _model(np.float32, attrs, len(feeds))
    (want,) = cpu_session(model).run(None, feeds)
    (got,) = hipep.InferenceSession(model, device="cpu").run(None, feeds)
    assert np.isfinite(want).all()
    np.testing.assert_allclose(got, want, **TOL[np.float32])


@pytest.mark.parametrize("bad,message", [
    ({"offset": np.zeros((1, 7, 3, 3), np.float32)}, "offset must have offset_group \\* 2 \\* kH \\* kW = 8 channels"),
    ({"offset": np.zeros((1, 8, 2, 3), np.float32)}, "offset's extents must be the output's"),
    ({"mask": np.ones((1, 4, 3, 2), np.float32)}, "mask must be"),
    ({"w": np.ones((2, 3, 2, 2), np.float32)}, "X's channels must be W's channels times group")])
def test_shape_errors_name_the_node_and_the_session_runs_on(bad, message):
    good = {"x": np.ones((1, 2, 4, 4), np.float32), "w": np.ones((2, 2, 2, 2), np.float32),
            "offset": np.zeros((1, 8, 3, 3), np.float32), "b": np.zeros(2, np.float32),
            "mask": np.ones((1, 4, 3, 3), np.float32)}
    sess = hipep.InferenceSession(_model(np.float32, {}, 5), device="cpu")
    with pytest.raises(Exception, match=message) as info:
        sess.run(None, {**good, **bad})
    assert "deform" in str(info.value)
    (y,) = sess.run(None, good)
    np.testing.assert_array_equal(y, np.full((1, 2, 3, 3), 8.0, np.float32))  # 2 channels x 4 taps of ones


@pytest.mark.parametrize("seed", [0, 1, 2, 6])
def test_shape_rule(seed):
    """The shape rule's run-time contract and its partial shapes (tests/unit/test_shape_rules.py's checks)."""
    from ops_vision_harness import SR

    attrs, feeds = _case(seed)
    inputs = [feeds.get(k) for k in NAMES]
    SR.check_rule_matches_reference("DeformConv", 22, inputs, attrs, 1)
    SR.check_partial_never_invents("DeformConv", 22, inputs, attrs, 1)


def test_other_than_two_spatial_axes_is_left_with_a_reason():
    report = hipep.explain(_model(np.float32, {}, 3, rank=5), device="cpu")
    (r,) = report.rejections
    assert "3 spatial axes" in r.reason


# ---- kernels/deform_conv.hip on the host stand-in ------------------------------------------------

needs_gpp = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    out = tmp_path_factory.mktemp("deform_conv")
    return {"warp": 32, "dir": str(out), "deform_conv": compile_module(out, "deform_conv", 32, EXACT_FLAGS),
            "gemm": compile_module(out, "gemm", 32)}


@needs_gpp
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", [2, 3, 5, 8])
def test_columns_equal_the_references_sampling(libs, dtype, seed):
    """The columns kernel repeats the reference's operations one for one: equal bits."""
    attrs, feeds = _case(seed, dtype)
    feeds["offset"].reshape(-1)[::7] = np.nan
    x, w, offset, mask = feeds["x"], feeds["w"], feeds["offset"], feeds.get("mask")
    p = deform_params(list(x.shape), list(w.shape), list(offset.shape), None,
                      None if mask is None else list(mask.shape), attrs)
    want = sample_columns(x, offset, mask, p)
    mem = HostMemory()
    args = [mem.put(a)[0] for a in (x, w, offset)]
    out, got = mem.put(np.full(x.shape[:1] + (x.shape[1] * want.shape[2] * want.shape[3],), np.nan, dtype))
    target = gk.Target(sm_count=1, warp_size=32, workspace=lambda n: out.ptr)
    ops = gk.BINDINGS["::DeformConv"].bind(args + [None, None if mask is None else mem.put(mask)[0]],
                                            [mem.put(np.zeros((x.shape[0], w.shape[0], *p["out"]), dtype))[0]],
                                            attrs, target)[:1]
    ops[0].grid = (2, 1, 1)  # (a grid-stride loop)
    launch(libs["deform_conv"], ops[0])
    np.testing.assert_array_equal(got.reshape(want.shape), want)


@needs_gpp
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("seed", [1, 2, 3, 4, 7])
def test_binding_equals_the_reference(libs, dtype, seed):
    attrs, feeds = _case(seed, dtype)
    ins = [feeds.get(k) for k in NAMES]
    while ins[-1] is None:
        ins.pop()
    (got,), (want,), ops = run_on_host(libs, "::DeformConv", ins, attrs, sm_count=1, workspace=True)
    suffix = {np.float32: "f32", np.float16: "f16", np.float64: "f64"}[dtype]
    assert ops[0].entry == f"hipep_deform_conv_columns_{suffix}"
    tol = TOL[dtype] if dtype != np.float32 else dict(rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), **tol)


@needs_nvrtc
def test_launch_passes_what_its_entry_points_take():
    from unit.kernel_emulation import arg, out_arg
    from unit.nvrtc_ptx import param_bytes, ptx

    params = param_bytes(ptx("deform_conv", "compute_90"))
    target = gk.Target(sm_count=4, workspace=lambda n: 0xA00000)
    attrs, feeds = _case(2)
    for dtype in (np.float32, np.float16, np.float64):
        ins = [arg(feeds[k].astype(dtype), 0x100000 * (i + 1)) for i, k in enumerate(NAMES) if k in feeds]
        y = out_arg((feeds["x"].shape[0], feeds["w"].shape[0], *feeds["offset"].shape[2:]), dtype)
        op = gk.BINDINGS["::DeformConv"].bind(ins, [y], attrs, target)[0]
        assert op.module == "deform_conv"
        assert [ctypes.sizeof(p) for p in op.params] == params[op.entry], op.entry


def test_the_gpu_claims_what_its_kernels_compute():
    for dtype in ("float32", "float16", "float64"):
        assert gk.kernel_reason("::DeformConv", {}, [dtype] * 5) is None
    why = gk.kernel_reason("::DeformConv", {}, ["bfloat16"] * 3)
    assert why == "no kernel for cuda: DeformConv (element type bfloat16)"
