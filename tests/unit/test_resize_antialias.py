"""Resize with antialias=1 (opsets 18, 19): hipep's CPU device (hipep.ops.resize) against ONNX
Runtime's CPU EP bit for bit over random cases -- linear and cubic, every form ORT runs (2-D, 3-D,
4-D NCHW and NHWC, 5-D NCDHW), shrinking and growing, scales and sizes, the coordinate modes,
exclude_outside, cubic_coeff_a, f32 and f16; what is left unclaimed and why; and the GPU passes
(kernels/resize.hip, one launch per resized axis) on the host stand-in against the reference, bit
for bit, with the launches' parameters against the entry points NVRTC compiles."""
from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import hipep
from hipep.runtime import gpu_kernels as gk

from helpers import cpu_session, make_model, needs_nvrtc, tensor
from unit.host_kernels import EXACT_FLAGS, compile_module, run_on_host

ELEM = {np.float32: TP.FLOAT, np.float16: TP.FLOAT16}
COORDS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"]


def _model(x, scales=None, sizes=None, opset=19, shape=None, **attrs):
    ins = ["x", "", "scales"] if sizes is None else ["x", "", "", "sizes"]
    init = (numpy_helper.from_array(np.asarray(scales, np.float32), "scales") if sizes is None
            else numpy_helper.from_array(np.asarray(sizes, np.int64), "sizes"))
    node = helper.make_node("Resize", ins, ["y"], name="resize", antialias=1, **attrs)
    return make_model([node], [tensor("x", ELEM[x.dtype.type], list(x.shape) if shape is None else shape)],
                      [tensor("y", ELEM[x.dtype.type], None)], [init], opset=opset)


def _case(seed):
    """A random antialiased Resize ORT runs: (x, scales or None, sizes or None, attributes)."""
    rng = np.random.default_rng(seed)
    dtype = np.float16 if seed % 4 == 0 else np.float32
    mode = ["linear", "cubic"][seed % 2]
    form = int(rng.integers(0, 4)) if mode == "linear" else int(rng.choice([0, 2]))
    h, w = (int(v) for v in rng.integers(1, 20, 2))
    shape, axes = {0: ((h, w), [0, 1]), 1: ((int(rng.integers(1, 6)), h, w), [0, 1, 2]),
                   2: ((2, 3, h, w), [2, 3]) if rng.random() < 0.5 else ((2, h, w, 3), [1, 2]),
                   3: ((1, 2, int(rng.integers(1, 6)), h, w), [2, 3, 4])}[form]
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    attrs = {"mode": mode, "coordinate_transformation_mode": COORDS[seed % 5]}
    if rng.random() < 0.4:
        attrs["exclude_outside"] = 1
    if mode == "cubic" and rng.random() < 0.5:
        attrs["cubic_coeff_a"] = -0.5
    if rng.random() < 0.4:
        sizes = list(shape)
        for a in axes:
            sizes[a] = int(rng.integers(1, 2 * shape[a] + 2))
        return x, None, sizes, attrs
    scales = [1.0] * len(shape)
    for a in axes:
        scales[a] = float(rng.choice([0.25, 0.3, 0.33, 0.5, 0.6, 0.75, 1.0, 1.5, 2.0]))
    if attrs["coordinate_transformation_mode"] == "align_corners" and min(scales) < 1:
        attrs["coordinate_transformation_mode"] = "half_pixel"  # (left to ORT: it and the spec differ there)
    return x, scales, None, attrs


@pytest.mark.parametrize("seed", range(60))
def test_cpu_device_equals_the_cpu_ep_bit_for_bit(seed):
    x, scales, sizes, attrs = _case(seed)
    opset = 18 if seed % 3 == 0 and attrs["coordinate_transformation_mode"] != "half_pixel_symmetric" else 19
    model = _model(x, scales, sizes, opset=opset, **attrs)
    report = hipep.explain(model, device="cpu")
    assert not report.rejections, [r.reason for r in report.rejections]
    (want,) = cpu_session(model).run(None, {"x": x})
    (got,) = hipep.InferenceSession(model, device="cpu").run(None, {"x": x})
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


@pytest.mark.parametrize("attrs,scales,shape,reason", [
    ({"mode": "nearest"}, [1, 1, 0.5, 0.5], [1, 1, 8, 8], "mode='nearest'"),
    ({"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize"}, [1, 1, 0.5, 0.5], [1, 1, 8, 8],
     "tf_crop_and_resize"),
    ({"mode": "linear"}, [0.5, 1, 1, 0.5], [2, 2, 8, 8], "4-D \\(NCHW or NHWC\\)"),
    ({"mode": "cubic"}, [1, 0.5, 0.5], [2, 8, 8], "cubic' resizes 2-D, 4-D")])
def test_what_onnx_runtime_does_not_run_is_left_with_a_reason(attrs, scales, shape, reason):
    x = np.zeros(shape, np.float32)
    if "tf_crop_and_resize" in str(attrs):
        node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], antialias=1, **attrs)
        inits = [numpy_helper.from_array(np.array([0, 0, 0, 0, 1, 1, 1, 1], np.float32), "roi"),
                 numpy_helper.from_array(np.asarray(scales, np.float32), "scales")]
        model = make_model([node], [tensor("x", TP.FLOAT, shape)], [tensor("y", TP.FLOAT, None)], inits, opset=19)
    else:
        model = _model(x, scales, **attrs)
    (r,) = hipep.explain(model, device="cpu").rejections
    assert r.node.op_type == "Resize"
    import re
    assert re.search(reason, r.reason), r.reason


# ---- the GPU passes on the host stand-in ------------------------------------------------------------

needs_gpp = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
NO = np.array([], np.float32)


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    return {"resize": compile_module(tmp_path_factory.mktemp("resize_aa"), "resize", 32, EXACT_FLAGS), "warp": 32}


def _inputs(x, scales, sizes):
    return [x, NO, NO, np.asarray(sizes, np.int64)] if sizes is not None else [x, NO, np.asarray(scales, np.float32)]


@needs_gpp
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 5, 6, 7, 9, 10, 13, 14, 17])
def test_gpu_passes_equal_the_reference_bit_for_bit(libs, seed):
    x, scales, sizes, attrs = _case(seed)
    # the host stand-in runs every thread of a block as a host thread: small tensors
    (got,), (want,), ops = run_on_host(libs, "::Resize", _inputs(x, scales, sizes), {**attrs, "antialias": 1},
                                       sm_count=1, workspace=True)
    assert all(o.entry.startswith("hipep_resize_") for o in ops)
    changed = sum(a != b for a, b in zip(x.shape, want.shape))
    # one pass per axis whose extent changes (a copy where none does; nothing for an empty output)
    assert len(ops) == (max(changed, 1) if want.size else 0)
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


@needs_nvrtc
def test_launches_pass_what_their_entry_points_take():
    from unit.kernel_emulation import arg, out_arg
    from unit.nvrtc_ptx import param_bytes, ptx

    params = param_bytes(ptx("resize", "compute_90"))
    target = gk.Target(sm_count=4, workspace=lambda n: 0xA00000)
    entries = set()
    for dtype in (np.float32, np.float16):
        x = np.zeros((2, 3, 9, 7), dtype)
        ins = [arg(x, 0x100000), arg(NO, 0x200000, True), arg(np.array([1, 1, 0.5, 0.5], np.float32), 0x300000, True)]
        ops = gk.BINDINGS["::Resize"].bind(ins, [out_arg((2, 3, 4, 3), dtype)],
                                           {"mode": "cubic", "antialias": 1, "coordinate_transformation_mode":
                                            "half_pixel", "cubic_coeff_a": -0.75, "exclude_outside": 0}, target)
        for op in ops:
            entries.add(op.entry)
            assert [ctypes.sizeof(p) for p in op.params] == params[op.entry], op.entry
    assert entries == {"hipep_resize_antialias_f32_f32", "hipep_resize_antialias_f16_f32",
                       "hipep_resize_antialias_f32_f16"}


def test_the_gpu_claims_linear_and_cubic_antialias_on_floats():
    for mode in ("linear", "cubic"):
        for dtype in ("float32", "float16"):
            assert gk.kernel_reason("::Resize", {"mode": mode, "antialias": 1}, [dtype, "", "float32"]) is None
