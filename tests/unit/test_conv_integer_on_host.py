"""ConvInteger's and QLinearConv's GPU programs (hipep.runtime.gpu_matmul_integer: Conv's windows
by kernels/copy.hip into the stream workspace, padded with x_zero_point read from device memory,
then kernels/matmul_integer.hip per image and group, and for QLinearConv the requantizing
expression) run on the CPU (tests/unit/host_kernels.py), compared exactly with the registry's
references (which tests/unit/test_ops_conv_integer.py compares with ONNX Runtime's CPU EP): every
type combination, 1 to 3 spatial axes, groups and depthwise, strides, dilations, pads and auto_pad,
per-tensor and per-channel scales and zero points of W, bias, saturation, ties and NaN scales.
Skipped without g++."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from hipep.runtime import gpu_kernels as gk

from unit.host_kernels import compile_module, run_on_host

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
F32 = np.float32
TYPES = [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.uint8), (np.int8, np.int8)]
QTYPES = [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)]  # (x and y, w)

CONV = [  # (X, W, attributes)
    ((1, 3, 9, 9), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 4, 10, 7), (6, 2, 3, 3), {"pads": [2, 0, 1, 3], "strides": [2, 1], "dilations": [1, 2], "group": 2}),
    ((1, 6, 8, 8), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1], "strides": [2, 2]}),  # depthwise
    ((2, 4, 8, 8), (70, 4, 1, 1), {}),  # 1x1: X itself is the windows; M past one 64-row tile
    ((3, 5, 20), (7, 5, 4), {"strides": [3], "pads": [2, 1]}),
    ((1, 2, 5, 6, 6), (3, 2, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2, 2]}),
    ((1, 3, 7, 6), (4, 3, 2, 3), {"auto_pad": "SAME_LOWER"}),
    ((1, 2, 4, 70), (3, 2, 2, 2), {"auto_pad": "VALID"}),  # more than one 64-column tile of windows
]


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    build = tmp_path_factory.mktemp("conv_integer")
    return {"warp": 32, "dir": build, "copy": compile_module(build, "copy", 32),
            "matmul_integer": compile_module(build, "matmul_integer", 32)}


def _rand(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _run(libs, op, inputs, attrs):
    (got,), (want,), ops = run_on_host(libs, f"::{op}", [None if a is None else np.asarray(a) for a in inputs],
                                       attrs, workspace=True)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    return want, ops


@pytest.mark.parametrize("tx,tw", TYPES)
@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV)
def test_conv_integer_equals_the_reference(libs, tx, tw, x_shape, w_shape, attrs):
    rng = np.random.default_rng(hash((x_shape, w_shape)) % 1000)
    x, w = _rand(rng, tx, x_shape), _rand(rng, tw, w_shape)
    _, ops = _run(libs, "ConvInteger", [x, w, _rand(rng, tx, ()), _rand(rng, tw, (1,))], attrs)
    short = {np.uint8: "u8", np.int8: "i8"}
    assert ops[-1].entry == f"hipep_matmul_integer_{short[tw]}_{short[tx]}"  # A is W, B the windows
    if (tx, tw) == TYPES[0]:  # the zero points omitted: none, X's, W's
        _run(libs, "ConvInteger", [x, w], attrs)
        _run(libs, "ConvInteger", [x, w, None, _rand(rng, tw, ())], attrs)
        _run(libs, "ConvInteger", [x, w, _rand(rng, tx, (1,))], attrs)


def test_padded_taps_add_nothing(libs):
    """X of its zero point everywhere: every sum is 0, the padded taps' included."""
    x = np.full((1, 2, 5, 5), 200, np.uint8)
    w = np.arange(2 * 2 * 9, dtype=np.int8).reshape(2, 2, 3, 3)
    want, ops = _run(libs, "ConvInteger", [x, w, np.uint8(200), np.int8(1)], {"pads": [2, 2, 2, 2]})
    assert (want == 0).all()
    assert [o.entry for o in ops] == ["hipep_copy_fill_w1", "hipep_matmul_integer_i8_u8"]


def test_sums_wrap_as_int32(libs):
    c = 33100  # a 1x1 convolution over c channels: 255 * 255 * c passes 2**31
    x = np.full((1, c, 1, 2), 255, np.uint8)
    w = np.full((2, c, 1, 1), 255, np.uint8)
    want, _ = _run(libs, "ConvInteger", [x, w], {})
    assert (want == np.int64(255 * 255 * c).astype(np.int32)).all() and (want < 0).all()


def _qlinear(rng, tx, tw, x_shape, w_shape, per_channel, bias, y_scale=None):
    m = w_shape[0]
    k = int(np.prod(w_shape[1:]))
    per = (m,) if per_channel else ()
    ins = [_rand(rng, tx, x_shape), F32(0.05), _rand(rng, tx, ()), _rand(rng, tw, w_shape),
           rng.uniform(0.01, 0.05, per).astype(F32), _rand(rng, tw, per),
           F32(0.02 * k) if y_scale is None else F32(y_scale), _rand(rng, tx, ())]
    return ins + ([rng.integers(-40000, 40000, m).astype(np.int32)] if bias else [])


@pytest.mark.parametrize("tx,tw", QTYPES)
@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV)
def test_qlinear_conv_equals_the_reference(libs, tx, tw, x_shape, w_shape, attrs):
    rng = np.random.default_rng(hash((x_shape, w_shape, 1)) % 1000)
    for per_channel, bias in ((False, False), (True, True)):
        _, ops = _run(libs, "QLinearConv", _qlinear(rng, tx, tw, x_shape, w_shape, per_channel, bias), attrs)
        assert [getattr(o, "module", "copy") for o in ops][-2:] == ["matmul_integer", None]


@pytest.mark.parametrize("group", [1, 3])
def test_per_channel_zero_points_of_w_follow_each_group(libs, group):
    """W's zero points differ per output channel (ONNX's definition; ONNX Runtime 1.32 runs them):
    each group's product reads its own share (the kernel's a_zp_batched)."""
    rng = np.random.default_rng(group)
    ins = _qlinear(rng, np.uint8, np.int8, (2, 6, 6, 5), (9, 6 // group, 2, 3), True, True)
    ins[5] = np.arange(-4, 5, dtype=np.int8) * 7
    _run(libs, "QLinearConv", ins, {"group": group, "pads": [1, 0, 1, 1]})


def test_bias_wraps_and_ties_round_to_even(libs):
    # a 1x1 convolution of one channel: acc = x - 0, scale 0.5 puts every odd acc on a tie
    x = np.arange(256, dtype=np.uint8).reshape(1, 1, 16, 16)
    ins = [x, F32(1), np.uint8(0), np.ones((3, 1, 1, 1), np.uint8), np.array([0.5, 0.5, 1e-9], F32), np.uint8(0),
           F32(1), np.uint8(10), np.array([0, 2**31 - 200, -2**31], np.int32)]
    want, _ = _run(libs, "QLinearConv", ins, {})
    assert want[0, 0, 0, 3] == 10 + 2 and want[0, 0, 0, 5] == 10 + 2 and want[0, 0, 0, 7] == 10 + 4
    assert (want[0, 1].ravel()[200:] == 0).all()  # 2**31 - 200 + x wraps negative: the low end


@pytest.mark.parametrize("x_scale,y_scale", [(0.0, 0.0), (np.nan, 1.0), (1.0, 0.0), (np.inf, 1.0), (1e30, 1e-30)])
def test_nan_and_infinite_scales(libs, x_scale, y_scale):
    rng = np.random.default_rng(7)
    for tx, tw in QTYPES:
        ins = _qlinear(rng, tx, tw, (1, 2, 5, 5), (3, 2, 3, 3), True, True, y_scale)
        ins[1] = F32(x_scale)
        with np.errstate(all="ignore"):
            want, _ = _run(libs, "QLinearConv", ins, {"pads": [1, 1, 1, 1]})
        if np.isnan(x_scale) or x_scale == y_scale == 0:
            assert (want == np.iinfo(tx).min).all()  # MLAS: a NaN product goes to the low end


def test_claims():
    u8, i8, f32 = "uint8", "int8", "float32"

    def reason(op, dtypes, shapes):
        return gk.kernel_reason(f"::{op}", {"group": 1}, dtypes, shapes)

    assert reason("ConvInteger", [u8, i8, u8, i8], [(1, 3, 8, 8), (4, 3, 3, 3), (), ()]) is None
    assert reason("ConvInteger", [i8, u8], [None, (4, 3, 3, 3)]) is None
    assert "4 spatial axes" in reason("ConvInteger", [u8, u8], [(1, 3, 4, 4, 4, 4), (4, 3, 1, 1, 1, 1)])
    assert "element types int32/uint8" in reason("ConvInteger", ["int32", u8], [(1, 3, 8, 8), (4, 3, 3, 3)])
    q = [u8, f32, u8, i8, f32, i8, f32, u8, "int32"]
    shapes = [(1, 3, 8, 8), (), (), (4, 3, 3, 3), (4,), (4,), (), (), (4,)]
    assert reason("QLinearConv", q, shapes) is None
    assert "y_zero_point of type int32" in reason("QLinearConv", q[:7] + ["int32"], shapes)
    assert "4 spatial axes" in reason("QLinearConv", q, [(1, 3, 4, 4, 4, 4)] + shapes[1:])
