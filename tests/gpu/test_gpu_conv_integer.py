"""ConvInteger and QLinearConv on the CUDA device (hipep.runtime.gpu_matmul_integer: Conv's windows
padded with x_zero_point, kernels/matmul_integer.hip per image and group, QLinearConv's
requantizing expression) against ORT's CPU EP, exactly: every type combination ORT's CPU EP runs,
1 to 3 spatial axes, groups and depthwise, strides, dilations, pads and auto_pad, zero points
omitted, per tensor and (QLinearConv) per output channel, per-channel scales, bias, W and the
quantization parameters as graph inputs and as initializers, the extreme values and int32
wraparound, and a quantized MobileNet block of three QLinearConvs. Single-node models (and the
block) through hipep.InferenceSession(device="cuda"), run three times."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from hipep.runtime.cuda import cuda_status
from gpu_checks import check_on_cuda
from helpers import cpu_session, make_model, tensor
from quantized_conv_models import ELEM, random_ints, single_node_model

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

F32 = np.float32
TYPES = [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.uint8), (np.int8, np.int8)]
QTYPES = [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)]  # (x and y, w)

CONV = [  # (X, W, attributes)
    ((2, 16, 28, 28), (32, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 32, 17, 19), (48, 16, 3, 3), {"group": 2, "strides": [2, 2], "pads": [1, 0, 2, 1]}),
    ((2, 24, 14, 14), (24, 1, 3, 3), {"group": 24, "pads": [1, 1, 1, 1]}),  # depthwise
    ((1, 40, 14, 14), (80, 1, 5, 5), {"group": 40, "strides": [2, 2], "auto_pad": "SAME_UPPER"}),  # multiplier 2
    ((2, 64, 9, 9), (130, 64, 1, 1), {}),  # 1x1: M past two 64-row tiles
    ((1, 8, 20, 21), (12, 8, 3, 2), {"dilations": [2, 3], "pads": [2, 1, 0, 3]}),
    ((3, 12, 50), (16, 12, 5), {"strides": [3], "auto_pad": "SAME_LOWER"}),
    ((1, 4, 6, 9, 10), (6, 4, 3, 3, 2), {"pads": [1, 0, 1, 1, 1, 0], "strides": [1, 2, 2]}),
    ((1, 3, 33, 40), (8, 3, 7, 7), {"strides": [2, 2], "auto_pad": "VALID"}),
]


def _check(model, feeds, y_elem):
    want = cpu_session(model).run(None, feeds)
    check_on_cuda(model, feeds, y_elem, exact=True, want=want, claimed=True)


@pytest.mark.parametrize("tx,tw", TYPES)
@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV)
@pytest.mark.parametrize("w_init", [False, True])
def test_conv_integer_matches_ort(tx, tw, x_shape, w_shape, attrs, w_init):
    rng = np.random.default_rng(len(x_shape) * 100 + w_shape[0])
    x, w = random_ints(rng, tx, x_shape), random_ints(rng, tw, w_shape)
    constant = ("w", "w_zero_point") if w_init else ()
    values = {"x": x, "w": w, "x_zero_point": random_ints(rng, tx, ()), "w_zero_point": random_ints(rng, tw, (1,))}
    _check(*single_node_model("ConvInteger", values, TP.INT32, attrs, constant), TP.INT32)
    _check(*single_node_model("ConvInteger", {"x": x, "w": w}, TP.INT32, attrs, constant), TP.INT32)
    values = {"x": x, "w": w, "x_zero_point": None, "w_zero_point": random_ints(rng, tw, ())}
    _check(*single_node_model("ConvInteger", values, TP.INT32, attrs, constant), TP.INT32)


def test_conv_integer_extremes_and_wraparound():
    # |x - x_zp| = |w - w_zp| = 255 over many taps, padded taps adding nothing
    values = {"x": np.full((1, 300, 6, 6), -128, np.int8), "w": np.full((70, 300, 3, 3), 127, np.int8),
              "x_zero_point": np.int8(127), "w_zero_point": np.int8(-128)}
    _check(*single_node_model("ConvInteger", values, TP.INT32, {"pads": [1, 1, 1, 1]}), TP.INT32)
    # 255 * 255 * 40000 passes 2**31: the int32 sums wrap
    values = {"x": np.full((1, 40000, 2, 2), 255, np.uint8), "w": np.full((3, 40000, 1, 1), 255, np.uint8)}
    _check(*single_node_model("ConvInteger", values, TP.INT32, {}), TP.INT32)


def _qlinear_values(rng, tx, tw, x_shape, w_shape, per_channel, bias, equal_zero_points=True):
    m = w_shape[0]
    k = int(np.prod(w_shape[1:]))
    per = (m,) if per_channel else ()
    w_zp = np.full(per, random_ints(rng, tw, ()) if rng.random() < 0.6 else 0, tw)
    if not equal_zero_points:
        w_zp = random_ints(rng, tw, per)
    return {"x": random_ints(rng, tx, x_shape), "x_scale": np.asarray(0.05, F32),
            "x_zero_point": random_ints(rng, tx, ()),
            "w": random_ints(rng, tw, w_shape), "w_scale": rng.uniform(0.01, 0.05, per).astype(F32),
            "w_zero_point": w_zp,
            "y_scale": np.asarray(0.02 * k, F32), "y_zero_point": random_ints(rng, tx, ()),
            "B": rng.integers(-50000, 50000, m).astype(np.int32) if bias else None}


# As a quantized model has them: ORT's CPU EP then prepacks W (its symmetric kernels where W is int8
# with zero points 0).
_CONSTANT = ("w", "w_scale", "w_zero_point", "x_zero_point", "B")


@pytest.mark.parametrize("tx,tw", QTYPES)
@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV)
@pytest.mark.parametrize("w_init", [False, True])
def test_qlinear_conv_matches_ort(tx, tw, x_shape, w_shape, attrs, w_init):
    rng = np.random.default_rng(len(x_shape) * 100 + w_shape[0] + 1)
    for per_channel, bias in ((False, False), (True, True), (True, False)):
        values = _qlinear_values(rng, tx, tw, x_shape, w_shape, per_channel, bias)
        _check(*single_node_model("QLinearConv", values, ELEM[np.dtype(tx)], attrs, _CONSTANT if w_init else ()),
               ELEM[np.dtype(tx)])


@pytest.mark.parametrize("group", [1, 4, 16])
def test_per_channel_zero_points_of_w(group):
    """W's zero points differ per output channel: ONNX defines it, ONNX Runtime 1.32 runs it
    (tests/ort_differences.py: earlier releases refuse it)."""
    rng = np.random.default_rng(group)
    for tx, tw in QTYPES:
        values = _qlinear_values(rng, tx, tw, (2, 16, 12, 11), (32, 16 // group, 3, 3), True, True,
                                 equal_zero_points=False)
        for constant in ((), _CONSTANT):
            _check(*single_node_model("QLinearConv", values, ELEM[np.dtype(tx)], {"group": group, "pads": [1, 1, 1, 1]},
                           constant), ELEM[np.dtype(tx)])


@pytest.mark.parametrize("x_scale,y_scale", [(0.0, 0.0), (np.nan, 1.0), (1.0, 0.0), (np.inf, 1.0)])
def test_nan_and_infinite_scales(x_scale, y_scale):
    rng = np.random.default_rng(9)
    for tx, tw in QTYPES:
        values = _qlinear_values(rng, tx, tw, (1, 8, 9, 9), (16, 8, 3, 3), True, True)
        values["x_scale"], values["y_scale"] = np.asarray(x_scale, F32), np.asarray(y_scale, F32)
        _check(*single_node_model("QLinearConv", values, ELEM[np.dtype(tx)], {"pads": [1, 1, 1, 1]}),
               ELEM[np.dtype(tx)])


def test_a_quantized_mobilenet_block():
    """1x1 expansion, 3x3 depthwise with stride 2, 1x1 projection: three QLinearConvs with int8
    weights (per-channel scales, zero points 0, as ONNX Runtime's quantizer writes them), uint8
    activations between them, all claimed by the CUDA device."""
    rng = np.random.default_rng(1)
    c, e, o = 16, 64, 24
    inits, nodes = [], []

    def add(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def qconv(x, x_scale, x_zp, w_shape, y, group=1, **attrs):
        m = w_shape[0]
        k = int(np.prod(w_shape[1:]))
        names = [x, x_scale, x_zp, add(f"{y}_w", random_ints(rng, np.int8, w_shape)),
                 add(f"{y}_ws", rng.uniform(0.002, 0.01, m).astype(F32)), add(f"{y}_wz", np.zeros(m, np.int8)),
                 add(f"{y}_s", np.asarray(0.01 * k ** 0.5, F32)), add(f"{y}_z", np.uint8(rng.integers(100, 156))),
                 add(f"{y}_b", rng.integers(-2000, 2000, m).astype(np.int32))]
        nodes.append(helper.make_node("QLinearConv", names, [y], name=y, group=group, **attrs))
        return y, f"{y}_s", f"{y}_z"

    add("x_s", np.asarray(0.02, F32))
    add("x_z", np.uint8(128))
    h = qconv("x", "x_s", "x_z", (e, c, 1, 1), "expand")
    h = qconv(*h, (e, 1, 3, 3), "depthwise", group=e, strides=[2, 2], pads=[1, 1, 1, 1])
    qconv(*h, (o, e, 1, 1), "project")
    model = make_model(nodes, [tensor("x", TP.UINT8, [2, c, 28, 28])], [tensor("project", TP.UINT8, None)], inits,
                       opset=10)
    feeds = {"x": random_ints(rng, np.uint8, (2, c, 28, 28))}
    _check(model, feeds, TP.UINT8)
