"""QuantizeLinear / DequantizeLinear (generated pointwise kernels, hipep.runtime.gpu_quantize_linear)
and Resize / Upsample (kernels/resize.hip, hipep.runtime.gpu_resize) run on the CPU: the launches
the bindings give are compiled by g++ against the host stand-in for the CUDA headers (with the
round-to-nearest intrinsics and no contraction, as on the GPU) and compared with the op registry's
reference (the CPU device's), bit for bit: quantization ties round half to even and saturate,
nearest indices and interpolation weights are ORT's f32 expressions. Skipped without g++."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from hipep.ops.registry import OUTPUT_COUNT, REQUIRED, SINCE_VERSION, lookup
from hipep.runtime import gpu_kernels as gk

from helpers import needs_nvrtc
from unit.host_kernels import EXACT_FLAGS, HostMemory, compile_module, generated_lib, launch, run_on_host

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
F32, F16 = np.float32, np.float16
NO = np.array([], np.float32)  # an empty roi/scales input: absent


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("resize_qdq")


@pytest.fixture(scope="module")
def resize_libs(build_dir):
    return {"resize": compile_module(build_dir, "resize", 32, EXACT_FLAGS), "warp": 32}


# ---- QuantizeLinear / DequantizeLinear ----------------------------------------------------------

_GENERATED: dict = {}  # build folder -> host_kernels' libs of generated kernels


def _run_generated(build_dir, op_type, inputs, attrs, opset=25):
    """Binds `op_type` for `inputs` and runs its generated kernel on the host; (got, want)."""
    op = lookup("", op_type)
    attrs = {**{k: v for k, v in op.attributes.items() if v is not REQUIRED}, **attrs, OUTPUT_COUNT: 1,
             SINCE_VERSION: opset}
    with np.errstate(all="ignore"):
        (want,) = op.reference(list(inputs), attrs)
    mem = HostMemory()
    ins = [None if x is None else mem.put(np.asarray(x))[0] for x in inputs]
    out, got = mem.put(np.full(want.shape, 7, want.dtype))
    ops = gk.binding_for(f"::{op_type}").bind(ins, [gk.Arg(out.ptr, out.shape, out.dtype)], attrs,
                                               gk.Target(sm_count=2, warp_size=32, scratch=lambda n: 0))
    (k,) = ops
    assert k.module is None and k.source
    launch(generated_lib(_GENERATED.setdefault(str(build_dir), {"dir": build_dir, "warp": 32}), k), k)
    return got, want


_QTYPES = [np.int8, np.uint8, np.int16, np.uint16]
_ONNX = {np.int8: 3, np.uint8: 2, np.int16: 5, np.uint16: 4}


def _tie_values(dtype):
    """Halves (ties), values next to them, out-of-range values, NaN and infinities."""
    v = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.4999, 3.5001, 126.5, 127.5, 128.5, -128.5, -129.5, 254.5, 255.5,
         256.0, 1e6, -1e6, 32767.5, -32768.5, 65535.5, np.nan, np.inf, -np.inf, 0.0, -0.0, 7.25, -7.75]
    with np.errstate(over="ignore"):  # beyond f16's range: infinities
        return np.array(v, np.float64).astype(dtype)


@pytest.mark.parametrize("qtype", _QTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("xtype", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("with_zero_point", [True, False], ids=["zp", "no-zp"])
def test_quantize_rounds_half_to_even_and_saturates(build_dir, qtype, xtype, with_zero_point):
    x = _tie_values(xtype).reshape(4, 7)
    scale = np.array(1.0, xtype)
    if with_zero_point:
        zp = np.array(3 if np.iinfo(qtype).min == 0 else -2, qtype)
        got, want = _run_generated(build_dir, "QuantizeLinear", [x, scale, zp], {})
    else:
        got, want = _run_generated(build_dir, "QuantizeLinear", [x, scale], {"output_dtype": _ONNX[qtype]})
    assert got.dtype == want.dtype == np.dtype(qtype)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_quantize_per_axis_scales(build_dir, axis):
    rng = np.random.default_rng(axis + 5)
    x = rng.uniform(-40, 40, (3, 4, 5)).astype(F32)
    x.reshape(-1)[::7] = np.round(x.reshape(-1)[::7]) + 0.5  # ties with a scale of 1 or 0.5
    c = x.shape[axis]
    scale = np.array([1.0, 0.5, 0.3, 2.0, 0.25][:c], F32)
    zp = np.arange(c, dtype=np.int8) - 1
    got, want = _run_generated(build_dir, "QuantizeLinear", [x, scale, zp], {"axis": axis})
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("axis,shape,block", [(1, (2, 6, 3), 2), (-1, (3, 8), 4), (0, (4, 5), 4)])
def test_quantize_and_dequantize_blocked_scales(build_dir, axis, shape, block):
    rng = np.random.default_rng(block)
    x = rng.uniform(-3, 3, shape).astype(F32)
    sshape = list(shape)
    sshape[axis] //= block
    scale = rng.uniform(0.01, 0.05, sshape).astype(F32)
    zp = rng.integers(-5, 5, sshape).astype(np.int8)
    got, want = _run_generated(build_dir, "QuantizeLinear", [x, scale, zp], {"axis": axis, "block_size": block})
    np.testing.assert_array_equal(got, want)
    got2, want2 = _run_generated(build_dir, "DequantizeLinear", [want, scale, zp], {"axis": axis, "block_size": block})
    np.testing.assert_array_equal(got2, want2)


@pytest.mark.parametrize("qtype", _QTYPES + [np.int32], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("layout", ["tensor", "axis", "neg-axis"])
def test_dequantize_layouts_and_types(build_dir, qtype, layout):
    rng = np.random.default_rng(len(layout))
    info = np.iinfo(qtype)
    x = rng.integers(info.min, info.max, (2, 3, 4), dtype=np.int64, endpoint=True).astype(qtype)
    x.reshape(-1)[:2] = [info.min, info.max]
    if layout == "tensor":
        scale, zp, attrs = np.array([0.37], F32), np.array([info.max], qtype), {}
    else:
        axis = 1 if layout == "axis" else -1
        c = x.shape[axis]
        scale = rng.uniform(0.001, 3, c).astype(F32)
        zp = np.array([info.min, info.max, 0, 1][:c], qtype)
        attrs = {"axis": axis}
    got, want = _run_generated(build_dir, "DequantizeLinear", [x, scale, zp], attrs)
    np.testing.assert_array_equal(got, want)  # int32 extremes: the difference is exact in int64


@pytest.mark.parametrize("scale_type,out", [(F16, 0), (F32, 10), (F16, 1)], ids=["f16", "f32-to-f16", "f16-to-f32"])
def test_dequantize_output_types(build_dir, scale_type, out):
    x = np.arange(-128, 128, 2, dtype=np.int16).astype(np.int8).reshape(8, 16)
    scale = np.linspace(0.001, 0.9, 16).astype(scale_type)
    got, want = _run_generated(build_dir, "DequantizeLinear", [x, scale], {"axis": -1, "output_dtype": out})
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_qdq_claims_and_refusals():
    f32 = "float32"
    assert gk.has_kernel("::QuantizeLinear", {"axis": 1}, [f32, f32, "uint8"])
    assert gk.has_kernel("::QuantizeLinear", {"axis": 1, "output_dtype": 5}, [f32, f32])
    assert gk.has_kernel("::DequantizeLinear", {"axis": 1}, ["int32", "float16"])
    assert gk.has_kernel("::QuantizeLinear", {"axis": 1, "block_size": 4}, [f32, f32, "int8"], [(3, 8), (3, 2), (3, 2)])
    why = gk.kernel_reason("::QuantizeLinear", {"axis": 1, "block_size": 3}, [f32, f32, "int8"], [(3, 8), (3, 3), (3, 3)])
    assert "does not divide" in why
    assert "unknown" in gk.kernel_reason("::DequantizeLinear", {"axis": 1, "block_size": 4}, ["int8", f32], [None, None])
    assert "packed" in gk.kernel_reason("::DequantizeLinear", {}, ["int4", f32])
    assert "quantized type" in gk.kernel_reason("::QuantizeLinear", {"output_dtype": 17}, [f32, f32])
    assert "f16" in gk.kernel_reason("::DequantizeLinear", {"output_dtype": 16}, ["int8", f32])


# ---- Resize / Upsample --------------------------------------------------------------------------

COORDS = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
          "tf_half_pixel_for_nn", "tf_crop_and_resize"]
NEAREST_MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]


def _resize(libs, inputs, attrs, op="::Resize", exact=True):
    (got,), (want,), ops = run_on_host(libs, op, inputs, attrs, sm_count=1)
    assert all(isinstance(o, gk.KernelOp) and o.module == "resize" for o in ops)
    assert got.shape == want.shape and got.dtype == want.dtype
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-5, atol=1e-6)
    return got


def _roi(coord, rank):
    if coord != "tf_crop_and_resize":
        return NO
    # spatial crops reaching outside the input, so extrapolation_value shows
    return np.array([0] * (rank - 2) + [-0.1, 0.2] + [1] * (rank - 2) + [0.8, 1.2], F32)


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("nearest", NEAREST_MODES)
@pytest.mark.parametrize("scales", [(1.0, 1.0, 2.5, 1.5), (1.0, 1.0, 0.6, 0.5)], ids=["up", "down"])
def test_nearest_every_coordinate_and_nearest_mode(resize_libs, coord, nearest, scales):
    x = np.arange(2 * 2 * 5 * 4, dtype=F32).reshape(2, 2, 5, 4)
    _resize(resize_libs, [x, _roi(coord, 4), np.array(scales, F32)],
            {"mode": "nearest", "coordinate_transformation_mode": coord, "nearest_mode": nearest,
             "extrapolation_value": -7.0})


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("scales", [(1.0, 1.0, 1.75, 2.0), (1.0, 1.0, 0.6, 0.75)], ids=["up", "down"])
def test_interpolation_every_coordinate_mode(resize_libs, mode, coord, scales):
    if coord == "align_corners" and scales[2] < 1:
        pytest.skip("the registry refuses align_corners with shrinking scales (ORT and ONNX disagree)")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 6, 5)).astype(F32)
    _resize(resize_libs, [x, _roi(coord, 4), np.array(scales, F32)],
            {"mode": mode, "coordinate_transformation_mode": coord, "extrapolation_value": 0.25})


@pytest.mark.parametrize("exclude_outside,a", [(1, -0.5), (0, -0.5), (1, -0.75)])
def test_cubic_coefficients_and_exclude_outside(resize_libs, exclude_outside, a):
    x = np.random.default_rng(9).standard_normal((1, 1, 4, 7)).astype(F32)
    _resize(resize_libs, [x, NO, NO, np.array([1, 1, 9, 5], np.int64)],
            {"mode": "cubic", "cubic_coeff_a": a, "exclude_outside": exclude_outside})


@pytest.mark.parametrize("shape,scales", [((7,), (2.3,)), ((3, 4, 5), (1.5, 0.8, 2.0)), ((1, 2, 3, 3, 4), (1, 1, 2, 1.6, 0.5))],
                         ids=["1d", "3d-all-axes", "3d-spatial"])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_one_to_three_resized_axes(resize_libs, shape, scales, mode):
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(F32)
    _resize(resize_libs, [x, NO, np.array(scales, F32)], {"mode": mode})


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
@pytest.mark.parametrize("axes", [None, [2, 3], [-1, -2], [3]])
def test_sizes_axes_and_keep_aspect_ratio(resize_libs, policy, axes):
    x = np.random.default_rng(1).standard_normal((1, 2, 4, 6)).astype(F32)
    sizes = [1, 2, 7, 5] if axes is None else [7, 5][:len(axes)]
    attrs = {"mode": "linear", "keep_aspect_ratio_policy": policy}
    if axes is not None:
        attrs["axes"] = axes
    _resize(resize_libs, [x, NO, NO, np.array(sizes, np.int64)], attrs)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("sizes", [(1, 1, 1, 1), (1, 1, 1, 4), (1, 1, 3, 5)])
def test_align_corners_single_element_axes(resize_libs, mode, sizes):
    for x in (np.arange(12, dtype=F32).reshape(1, 1, 3, 4), np.array([[[[2.0]]]], F32)):
        _resize(resize_libs, [x, NO, NO, np.array(sizes, np.int64)],
                {"mode": mode, "coordinate_transformation_mode": "align_corners"})


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, F16], ids=lambda t: np.dtype(t).name)
def test_nearest_other_element_types_and_extrapolation(resize_libs, dtype):
    x = (np.arange(40) % 100 - 20).astype(dtype).reshape(1, 2, 4, 5)
    _resize(resize_libs, [x, _roi("tf_crop_and_resize", 4), np.array([1, 1, 2, 1.5], F32)],
            {"mode": "nearest", "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": -3.0})
    _resize(resize_libs, [x, NO, NO, np.array([1, 2, 3, 9], np.int64)], {"nearest_mode": "ceil"})


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_f16_interpolation_in_f32(resize_libs, mode):
    x = np.random.default_rng(2).uniform(-4, 4, (1, 3, 5, 6)).astype(F16)
    _resize(resize_libs, [x, _roi("tf_crop_and_resize", 4), np.array([1, 1, 1.5, 0.7], F32)],
            {"mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 0.1})


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_legacy_resize_10_and_upsample(resize_libs, mode):
    x = np.random.default_rng(4).standard_normal((1, 2, 3, 4)).astype(F32)
    _resize(resize_libs, [x, np.array([1, 1, 2.5, 0.5], F32)], {"mode": mode})  # Resize-10: (X, scales)
    _resize(resize_libs, [x, np.array([1, 1, 2, 3], F32)], {"mode": mode}, op="::Upsample")  # Upsample-9
    _resize(resize_libs, [x], {"mode": mode, "scales": [1.0, 1.0, 1.5, 2.0]}, op="::Upsample")  # Upsample-7


def test_an_identity_resize_and_an_empty_output(resize_libs):
    x = np.arange(24, dtype=F32).reshape(2, 3, 4)
    _resize(resize_libs, [x, NO, np.array([1, 1, 1], F32)], {"mode": "linear"})
    (got,), (want,), ops = run_on_host(resize_libs, "::Resize", [x, NO, np.array([1, 0.1, 1], F32)], {}, sm_count=1)
    assert want.size == 0 and ops == []


def test_resize_claims_and_refusals():
    f32 = "float32"
    scales = np.array([1, 1, 2, 2], np.float32)
    assert gk.has_kernel("::Resize", {"mode": "cubic"}, [f32, f32, f32], None, [None, None, scales])
    # a run-time roi, scales or sizes is read at launch from host-visible memory (the plan copies
    # it there; the shape program pins roi and scales): claimed. Where one is computed on the device
    # from data, the partitioner refuses the node (tests/unit/test_partition_gpu_shapes.py).
    assert gk.has_kernel("::Resize", {"coordinate_transformation_mode": "tf_crop_and_resize"}, [f32, f32, f32],
                         None, [None, None, scales])
    assert gk.has_kernel("::Resize", {"coordinate_transformation_mode": "tf_crop_and_resize"}, [f32, f32, f32])
    assert gk.has_kernel("::Resize", {}, [f32, f32, "", "int64"])
    assert gk.has_kernel("::Resize", {"mode": "nearest"}, ["int8", "", "", "int64"])
    assert gk.has_kernel("::Upsample", {"mode": "linear"}, ["float16", f32], None, [None, scales])
    assert gk.kernel_reason("::Resize", {"mode": "linear", "antialias": 1}, [f32, "", f32]) is None
    assert "nearest" in gk.kernel_reason("::Resize", {"mode": "linear"}, ["uint8", "", f32])
    assert "rank" in gk.kernel_reason("::Resize", {}, [f32, "", f32], [(1,) * 9, None, (9,)])
    assert "bfloat16" in gk.kernel_reason("::Resize", {}, ["bfloat16", "", f32])
    assert "resize" in gk.modules()


# ---- NVRTC -------------------------------------------------------------------------------------

@needs_nvrtc
def test_nvrtc_compiles_the_resize_entry_points_and_the_qdq_kernels():
    from hipep.runtime import kernel_cache
    from hipep.runtime.gpu_quantize_linear import dequantize_expression, quantize_expression

    defines = {"HIPEP_WARP_SIZE": 32}
    data, _ = kernel_cache.compile_cubin(kernel_cache.module_source("resize"), "resize", "sm_90", defines,
                                         use_cache=False)
    for entry in ("hipep_resize_nearest_w1", "hipep_resize_nearest_w2", "hipep_resize_nearest_w4",
                  "hipep_resize_interp_f32", "hipep_resize_interp_f16"):
        assert entry.encode() + b"\0" in data, entry
    cases = [(quantize_expression, ["float16", "float16", "int8"], "int8"),
             (quantize_expression, ["float32", "float32"], "uint16"),
             (dequantize_expression, ["int32", "float32", "int32"], "float16"),
             (dequantize_expression, ["uint8", "float16"], "float32")]
    for fn, dtypes, out in cases:
        expr = fn(dtypes[0], dtypes[1], dtypes[2] if len(dtypes) > 2 else None, out)
        r = gk.render_pointwise(expr, dtypes, [out])
        data, _ = kernel_cache.compile_cubin(r.source, r.name, "sm_90", defines, use_cache=False)
        assert r.name.encode() + b"\0" in data
