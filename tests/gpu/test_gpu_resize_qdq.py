"""QuantizeLinear / DequantizeLinear (generated kernels) and Resize / Upsample (kernels/resize.hip)
end to end: small ONNX models through hipep.InferenceSession(device="cuda"), compared with ONNX
Runtime's CPU EP over repeated runs (first run, bound replay, CUDA graph replay). Quantized
results, nearest resizes and dequantized values are compared exactly; interpolation to f32 1e-5
(f16: 1e-2). Every node must be claimed by the cuda device."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from hipep.runtime.cuda import cuda_status, get_device
import gpu_checks
from gpu_checks import check_on_cuda
from helpers import make_model, tensor

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)
device = get_device(0)

F32, F16, I8, U8, I16, I32, I64 = TP.FLOAT, TP.FLOAT16, TP.INT8, TP.UINT8, TP.INT16, TP.INT32, TP.INT64
NP = {F32: np.float32, F16: np.float16, I8: np.int8, U8: np.uint8, I16: np.int16, I32: np.int32}
n = helper.make_node


def check(model, feeds, elem=F32, runs=3, **tolerance):
    """Runs `model` on the CUDA device `runs` times, every node claimed, and compares every output
    with ORT's CPU EP."""
    return check_on_cuda(model, feeds, elem, runs, claimed=True, tol={**gpu_checks.tolerance(elem), **tolerance})


EXACT = dict(rtol=0, atol=0)


def init(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def ties(rng, shape, elem, scale=1.0):
    """Values on and next to half steps of `scale` (round half to even), and out-of-range ones."""
    v = (rng.integers(-300, 300, shape) + rng.choice([0.5, 0.49, 0.51, 0.0], shape)) * scale
    return v.astype(NP[elem])


# ---- QuantizeLinear / DequantizeLinear ----------------------------------------------------------

@pytest.mark.parametrize("qtype", [I8, U8])
@pytest.mark.parametrize("opset", [13, 21])
def test_quantize_dequantize_per_tensor(rng, qtype, opset):
    zp = np.array(3 if qtype == U8 else -4, NP[qtype])
    nodes = [n("QuantizeLinear", ["x", "s", "zp"], ["q"]), n("DequantizeLinear", ["q", "s", "zp"], ["y"])]
    model = make_model(nodes, [tensor("x", F32, [4, 33])], [tensor("q", qtype, None), tensor("y", F32, None)],
                       [init("s", np.float32(0.5)), init("zp", zp)], opset=opset)
    check(model, {"x": ties(rng, (4, 33), F32, 0.5)}, **EXACT)


@pytest.mark.parametrize("axis", [1, -1, 0])
@pytest.mark.parametrize("elem", [F32, F16])
def test_quantize_dequantize_per_axis(rng, axis, elem):
    shape = (3, 6, 10)
    c = shape[axis]
    scale = rng.uniform(0.01, 0.2, c).astype(NP[elem])
    nodes = [n("QuantizeLinear", ["x", "s", "zp"], ["q"], axis=axis),
             n("DequantizeLinear", ["q", "s", "zp"], ["y"], axis=axis)]
    model = make_model(nodes, [tensor("x", elem, list(shape))], [tensor("q", I8, None), tensor("y", elem, None)],
                       [init("s", scale), init("zp", rng.integers(-3, 3, c).astype(np.int8))], opset=19)
    check(model, {"x": rng.uniform(-20, 20, shape).astype(NP[elem])}, elem, **EXACT)


@pytest.mark.parametrize("qtype", [I8, U8, I16])
def test_quantize_dequantize_blocked(rng, qtype):
    shape, block = (4, 64), 16
    scale = rng.uniform(0.01, 0.05, (4, 4)).astype(np.float32)
    zp = np.zeros((4, 4), NP[qtype])
    nodes = [n("QuantizeLinear", ["x", "s", "zp"], ["q"], axis=1, block_size=block),
             n("DequantizeLinear", ["q", "s", "zp"], ["y"], axis=1, block_size=block)]
    model = make_model(nodes, [tensor("x", F32, list(shape))], [tensor("q", qtype, None), tensor("y", F32, None)],
                       [init("s", scale), init("zp", zp)], opset=21)
    check(model, {"x": rng.uniform(-3, 3, shape).astype(np.float32)}, **EXACT)


def test_quantize_output_dtype_and_saturation(rng):
    nodes = [n("QuantizeLinear", ["x", "s"], ["q"], output_dtype=I16)]
    model = make_model(nodes, [tensor("x", F32, [5, 40])], [tensor("q", I16, None)], [init("s", np.float32(0.01))],
                       opset=21)
    x = rng.uniform(-400, 400, (5, 40)).astype(np.float32)
    x[0, :4] = [np.nan, np.inf, -np.inf, 0.005]
    check(model, {"x": x})


def test_dequantize_int32_bias(rng):
    nodes = [n("DequantizeLinear", ["b", "s"], ["y"], axis=0)]
    model = make_model(nodes, [tensor("b", I32, [16])], [tensor("y", F32, None)],
                       [init("s", rng.uniform(1e-4, 1e-3, 16).astype(np.float32))], opset=13)
    b = rng.integers(-2**31, 2**31 - 1, 16, dtype=np.int64).astype(np.int32)
    check(model, {"b": b}, **EXACT)


def test_qdq_pair_around_a_matmul(rng):
    """The QDQ form ORT's quantizer writes: activations quantized and dequantized per tensor, weights
    stored int8 and dequantized per output channel, a MatMul in f32 between."""
    k, m = 64, 48
    w = rng.integers(-127, 127, (k, m)).astype(np.int8)
    w_scale = rng.uniform(0.001, 0.01, m).astype(np.float32)
    nodes = [n("QuantizeLinear", ["x", "xs", "xz"], ["xq"]), n("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             n("DequantizeLinear", ["w", "ws"], ["wd"], axis=1), n("MatMul", ["xd", "wd"], ["mm"]),
             n("QuantizeLinear", ["mm", "ys", "yz"], ["yq"]), n("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    inits = [init("xs", np.float32(0.02)), init("xz", np.uint8(128)), init("w", w), init("ws", w_scale),
             init("ys", np.float32(0.05)), init("yz", np.uint8(120))]
    model = make_model(nodes, [tensor("x", F32, [2, 7, k])], [tensor("y", F32, None)], inits, opset=13)
    # the MatMul's sums may differ in their last bit from the CPU's, which can move a value across
    # a rounding boundary of the output quantization: one step of ys at most
    check(model, {"x": rng.uniform(-2, 2, (2, 7, k)).astype(np.float32)}, rtol=0, atol=0.05 + 1e-6)


# ---- Resize / Upsample --------------------------------------------------------------------------

def resize_model(x_shape, elem, opset=19, scales=None, sizes=None, roi=None, **attrs):
    inits = [init("roi", np.array([] if roi is None else roi, np.float32)),
             init("scales", np.array([] if scales is None else scales, np.float32))]
    names = ["x", "roi", "scales"]
    if sizes is not None:
        inits.append(init("sizes", np.array(sizes, np.int64)))
        names.append("sizes")
    return make_model([n("Resize", names, ["y"], **attrs)], [tensor("x", elem, list(x_shape))],
                      [tensor("y", elem, None)], inits, opset=opset)


def test_vlm_bilinear_upsample_224_to_336(rng):
    """A vision tower's position-embedding/image resize: bilinear, half_pixel, by sizes."""
    model = resize_model((1, 3, 224, 224), F32, sizes=[1, 3, 336, 336], mode="linear")
    check(model, {"x": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)})


COORDS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"]


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize("scales", [[1, 1, 2.5, 1.5], [1, 1, 0.6, 0.5]], ids=["up", "down"])
def test_nearest(rng, coord, nearest_mode, scales):
    if coord == "align_corners" and min(scales) < 1:
        pytest.skip("align_corners with shrinking scales is refused (ORT and ONNX disagree)")
    model = resize_model((2, 3, 10, 12), F32, scales=scales, mode="nearest", coordinate_transformation_mode=coord,
                         nearest_mode=nearest_mode)
    check(model, {"x": rng.standard_normal((2, 3, 10, 12)).astype(np.float32)}, **EXACT)


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("sizes", [[1, 3, 23, 17], [1, 3, 7, 5]], ids=["up", "down"])
def test_linear(rng, coord, elem, sizes):
    model = resize_model((1, 3, 12, 10), elem, sizes=sizes, mode="linear", coordinate_transformation_mode=coord)
    check(model, {"x": rng.standard_normal((1, 3, 12, 10)).astype(NP[elem])}, elem)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_tf_crop_and_resize_extrapolates(rng, mode):
    model = resize_model((1, 2, 9, 11), F32, sizes=[1, 2, 8, 13], roi=[0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3], mode=mode,
                         coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-5.0)
    check(model, {"x": rng.standard_normal((1, 2, 9, 11)).astype(np.float32)})


def test_linear_trilinear_5d(rng):
    model = resize_model((1, 2, 4, 6, 5), F32, scales=[1, 1, 2, 1.5, 0.8], mode="linear")
    check(model, {"x": rng.standard_normal((1, 2, 4, 6, 5)).astype(np.float32)})


@pytest.mark.parametrize("exclude_outside", [0, 1])
def test_cubic(rng, exclude_outside):
    model = resize_model((1, 3, 9, 8), F32, scales=[1, 1, 1.7, 2.0], mode="cubic", cubic_coeff_a=-0.5,
                         exclude_outside=exclude_outside)
    check(model, {"x": rng.standard_normal((1, 3, 9, 8)).astype(np.float32)})


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
def test_sizes_with_axes_and_keep_aspect_ratio(rng, policy):
    model = resize_model((1, 3, 20, 30), F32, opset=18, sizes=[24, 24], mode="linear", axes=[2, 3],
                         keep_aspect_ratio_policy=policy)
    check(model, {"x": rng.standard_normal((1, 3, 20, 30)).astype(np.float32)})


@pytest.mark.parametrize("elem", [I8, U8, I32])
def test_nearest_integer_types(rng, elem):
    model = resize_model((1, 4, 6, 7), elem, scales=[1, 1, 2, 0.5], mode="nearest")
    x = rng.integers(0 if elem == U8 else -100, 100, (1, 4, 6, 7)).astype(NP[elem])
    check(model, {"x": x})


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_10_and_upsample_9(rng, mode):
    x = rng.standard_normal((1, 2, 5, 6)).astype(np.float32)
    model = make_model([n("Resize", ["x", "scales"], ["y"], mode=mode)], [tensor("x", F32, [1, 2, 5, 6])],
                       [tensor("y", F32, None)], [init("scales", np.array([1, 1, 2, 1.5], np.float32))], opset=10)
    check(model, {"x": x})
    model = make_model([n("Upsample", ["x", "scales"], ["y"], mode=mode)], [tensor("x", F32, [1, 2, 5, 6])],
                       [tensor("y", F32, None)], [init("scales", np.array([1, 1, 2, 3], np.float32))], opset=9)
    check(model, {"x": x})


# ---- Resize with antialias=1: one pass per resized axis ----------------------------------------------

@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6, 7, 8, 11, 12])
def test_resize_antialias_equals_the_cpu_ep_bit_for_bit(seed):
    """The cases of tests/unit/test_resize_antialias.py (f32 and f16, linear and cubic, every form)."""
    from unit.test_resize_antialias import _case, _model

    x, scales, sizes, attrs = _case(seed)
    check_on_cuda(_model(x, scales, sizes, **attrs), {"x": x}, claimed=True, bits=True)


def test_resize_antialias_of_an_image_shrunk_a_lot():
    """A 3 x 448 x 448 image to 224 x 160 (windows of 5 and 7 inputs), f32 and f16."""
    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.float16):
        from unit.test_resize_antialias import _model

        x = rng.standard_normal((1, 3, 448, 448)).astype(dtype)
        check_on_cuda(_model(x, sizes=[1, 3, 224, 160], mode="cubic"), {"x": x}, claimed=True, bits=True)
