"""ConvInteger and QLinearConv on hipep's CPU reference device (hipep.ops.conv_integer) against ORT's
CPU EP, exactly: random geometries (1 to 3 spatial axes, groups and depthwise, strides, dilations,
pads, auto_pad), every type combination ORT runs, zero points omitted, per tensor and (QLinearConv)
per output channel, per-channel scales, bias, W and the quantization parameters as graph inputs
and as initializers (ORT's CPU EP then takes other paths: prepacked and symmetric kernels),
requantization ties and near-ties, saturation, int32 wraparound, NaN and infinite scales; the ONNX
backend's cases; what is left unclaimed and why; run-time errors."""
from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

import hipep
from hipep.errors import HipepError
from hipep.graph import GraphView
from hipep.ops import check_node, lookup
from hipep.ops.registry import OUTPUT_COUNT, SINCE_VERSION

from helpers import cpu_ep_outputs, tensor
from quantized_conv_models import ELEM, random_ints, single_node_model

F32 = np.float32
QTYPES = [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)]  # (x and y, w): ORT's CPU EP's
SEEDS = range(24)


def _geometry(rng):
    """(N, C, M, spatial extents, kernel, attributes) of a random convolution."""
    nsp = int(rng.integers(1, 4))
    group, cg, mg = [1, 1, 2, 3][int(rng.integers(4))], int(rng.integers(1, 4)), int(rng.integers(1, 4))
    if rng.random() < 0.25:  # depthwise (a channel multiplier of 1 or 2)
        group, cg, mg = int(rng.integers(2, 6)), 1, int(rng.integers(1, 3))
    kernel = [int(rng.integers(1, 4)) for _ in range(nsp)]
    attrs = {"group": group}
    if rng.random() < 0.5:
        attrs["strides"] = [int(rng.integers(1, 3)) for _ in range(nsp)]
    auto_pad = ["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"][int(rng.integers(5))]
    if auto_pad != "NOTSET":
        attrs["auto_pad"] = auto_pad
    else:
        if rng.random() < 0.5:
            attrs["dilations"] = [int(rng.integers(1, 3)) for _ in range(nsp)]
        if rng.random() < 0.7:
            attrs["pads"] = [int(rng.integers(0, 3)) for _ in range(2 * nsp)]
    dilations = attrs.get("dilations", [1] * nsp)
    reach = {1: 9, 2: 7, 3: 5}[nsp]
    spatial = [int(rng.integers((k - 1) * d + 1, (k - 1) * d + reach)) for k, d in zip(kernel, dilations)]
    return int(rng.integers(1, 3)), cg * group, mg * group, spatial, kernel, attrs


def _check(model, feeds):
    """hipep's CPU device claims the node and gives ORT's CPU EP's outputs exactly (its exact sums
    where this processor's MLAS kernel saturates them: helpers.cpu_ep_outputs)."""
    report = hipep.explain(model, device="cpu")
    assert not report.rejections, [r.reason for r in report.rejections]
    want = cpu_ep_outputs(model, feeds)
    got = hipep.InferenceSession(model, device="cpu").run(None, feeds)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    return got[0]


# ---- ConvInteger -------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_conv_integer_matches_the_cpu_ep(seed):
    rng = np.random.default_rng(seed)
    n, c, m, spatial, kernel, attrs = _geometry(rng)
    tx, tw = [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.uint8), (np.int8, np.int8)][seed % 4]
    x, w = random_ints(rng, tx, (n, c, *spatial)), random_ints(rng, tw, (m, c // attrs["group"], *kernel))
    zero_points = [(random_ints(rng, tx, ()), random_ints(rng, tw, (1,))), (None, None),
                   (random_ints(rng, tx, (1,)), None), (None, random_ints(rng, tw, ()))][seed // 4 % 4]
    values = {"x": x, "w": w, "x_zero_point": zero_points[0], "w_zero_point": zero_points[1]}
    constant = (seed + seed // 4) % 2  # W an initializer for every type pairing on some seeds
    _check(*single_node_model("ConvInteger", values, TP.INT32, attrs, ("w", "w_zero_point") if constant else ()))


def test_conv_integer_extremes_and_wraparound():
    # |x - x_zp| = |w - w_zp| = 255, the largest products, over many taps; padded taps add nothing
    x, w = np.full((1, 40, 5, 5), -128, np.int8), np.full((3, 40, 3, 3), 127, np.int8)
    got = _check(*single_node_model("ConvInteger", {"x": x, "w": w, "xz": np.int8(127), "wz": np.int8(-128)}, TP.INT32,
                         {"pads": [1, 1, 1, 1]}))
    assert got[0, 0, 2, 2] == -360 * 255 * 255 and got[0, 0, 0, 0] == -160 * 255 * 255
    # 255 * 255 * 33100 passes 2**31: the int32 sums wrap
    got = _check(*single_node_model("ConvInteger", {"x": np.full((1, 33100, 1, 2), 255, np.uint8),
                                         "w": np.full((2, 33100, 1, 1), 255, np.uint8)}, TP.INT32, {}))
    assert (got == np.int64(255 * 255 * 33100).astype(np.int32)).all()


# ---- QLinearConv -------------------------------------------------------------------------------

def _qlinear_values(rng, tx, tw, x_shape, w_shape, per_channel, bias, scales="random", equal_zero_points=True):
    """QLinearConv's inputs. scales: "random" (uniform), "halves" (powers of two: many products land
    on .5 exactly) or "decimals" (0.1-like values whose f32 products and quotients round: near-ties)."""
    m = w_shape[0]
    per = (m,) if per_channel else ()
    if scales == "random":
        k = int(np.prod(w_shape[1:]))
        xs, ws, ys = F32(rng.uniform(0.001, 0.1)), rng.uniform(0.001, 0.1, per), F32(rng.uniform(0.2, 2) * k / 100)
    elif scales == "halves":
        xs, ws, ys = F32(1), 2.0 ** -rng.integers(1, 6, per), F32(2.0 ** rng.integers(0, 8))
    else:
        xs = F32([0.1, 0.3, 0.7, 0.05][int(rng.integers(4))])
        ws = np.array([0.1, 0.2, 0.3, 0.5, 0.6])[rng.integers(0, 5, per)]
        ys = F32([0.3, 0.7, 1.1, 3.0, 10.0, 100.0][int(rng.integers(6))])
    w_zp = random_ints(rng, tw, ()) if rng.random() < 0.7 else np.zeros((), tw)
    w_zp = np.full(per, w_zp, tw) if equal_zero_points else random_ints(rng, tw, per)
    return {"x": random_ints(rng, tx, x_shape), "x_scale": np.asarray(xs, F32),
            "x_zero_point": random_ints(rng, tx, ()),
            "w": random_ints(rng, tw, w_shape), "w_scale": np.asarray(ws, F32), "w_zero_point": w_zp,
            "y_scale": np.asarray(ys, F32), "y_zero_point": random_ints(rng, tx, ()),
            "B": rng.integers(-30000, 30000, m).astype(np.int32) if bias else None}


# Initializers as a quantized model has them: ORT's CPU EP then prepacks W, and with int8 W and zero
# W zero points takes its symmetric kernels (requantization fused).
_CONSTANT = ("w", "w_scale", "w_zero_point", "x_zero_point", "B")


@pytest.mark.parametrize("seed", SEEDS)
def test_qlinear_conv_matches_the_cpu_ep(seed):
    rng = np.random.default_rng(100 + seed)
    n, c, m, spatial, kernel, attrs = _geometry(rng)
    tx, tw = QTYPES[seed % 3]
    scales = ["random", "halves", "decimals"][seed // 3 % 3]
    values = _qlinear_values(rng, tx, tw, (n, c, *spatial), (m, c // attrs["group"], *kernel), seed % 2 == 0,
                             rng.random() < 0.6, scales)
    _check(*single_node_model("QLinearConv", values, ELEM[np.dtype(tx)], attrs, _CONSTANT if seed // 2 % 2 else ()))


@pytest.mark.parametrize("tx,tw", QTYPES)
def test_requantization_ties_and_near_ties(tx, tw):
    """A 1x1 convolution of one channel with every input value: acc runs over a range, and the
    scales put float(acc) * scale on and next to .5."""
    x = np.arange(256, dtype=np.uint8).astype(tx).reshape(1, 1, 16, 16)
    rng = np.random.default_rng(5)
    for xs, ws, ys in ((1.0, [0.5, 0.25, 0.125], 1.0), (0.1, [0.3, 0.7, 0.1], 0.3), (0.3, [0.7, 0.1, 0.05], 0.7),
                       (0.05, [1.0, 3.0, 0.5], 0.1)):
        values = {"x": x, "x_scale": np.asarray(xs, F32), "x_zero_point": np.zeros((), tx),
                  "w": np.array([1, 3, -1 if tw == np.int8 else 5], tw).reshape(3, 1, 1, 1),
                  "w_scale": np.asarray(ws, F32), "w_zero_point": np.zeros(3, tw), "y_scale": np.asarray(ys, F32),
                  "y_zero_point": random_ints(rng, tx, ()), "B": np.array([0, 1, -1], np.int32)}
        for constant in ((), _CONSTANT):
            _check(*single_node_model("QLinearConv", values, ELEM[np.dtype(tx)], {}, constant))


@pytest.mark.parametrize("x_scale,y_scale", [(0.0, 0.0), (np.nan, 1.0), (1.0, 0.0), (np.inf, 1.0), (1e30, 1e-30)])
def test_nan_and_infinite_scales(x_scale, y_scale):
    rng = np.random.default_rng(9)
    for tx, tw in QTYPES:
        values = _qlinear_values(rng, tx, tw, (1, 2, 5, 5), (3, 2, 3, 3), True, True)
        values["x_scale"], values["y_scale"] = np.asarray(x_scale, F32), np.asarray(y_scale, F32)
        got = _check(*single_node_model("QLinearConv", values, ELEM[np.dtype(tx)], {"pads": [1, 1, 1, 1]}))
        if np.isnan(x_scale) or x_scale == y_scale == 0:
            assert (got == np.iinfo(tx).min).all()  # MLAS: a NaN product goes to the low end


def test_bias_wraps_as_int32():
    x = np.arange(256, dtype=np.uint8).reshape(1, 1, 16, 16)
    values = {"x": x, "x_scale": np.asarray(1, F32), "x_zero_point": np.uint8(0), "w": np.ones((3, 1, 1, 1), np.uint8),
              "w_scale": np.array([1e-9, 1.0, 1e-9], F32), "w_zero_point": np.uint8(0), "y_scale": np.asarray(1, F32),
              "y_zero_point": np.uint8(128), "B": np.array([2**31 - 100, -2**31, -2**31 + 5], np.int32)}
    got = _check(*single_node_model("QLinearConv", values, TP.UINT8, {}))
    assert got[0, 0, 0, 0] == 128 + 2 and got[0, 0, -1, -1] == 128 - 2  # 2**31 - 100 + 255 wraps negative


def test_per_channel_zero_points_of_w():
    """W's zero points differ per output channel: ONNX defines it, ONNX Runtime 1.32 runs it
    (tests/ort_differences.py: earlier releases refuse it)."""
    rng = np.random.default_rng(11)
    for (tx, tw), group in zip(QTYPES, (1, 2, 6)):
        values = _qlinear_values(rng, tx, tw, (2, 6, 7, 6), (6, 6 // group, 3, 2), True, True,
                                 equal_zero_points=False)
        for constant in ((), _CONSTANT):
            _check(*single_node_model("QLinearConv", values, ELEM[np.dtype(tx)], {"group": group, "pads": [1, 0, 1, 1]},
                           constant))


# ---- the ONNX backend's cases ------------------------------------------------------------------

def _backend_cases():
    from onnx.backend.test.case.node import collect_testcases

    with np.errstate(all="ignore"):
        return {c.name: c for c in collect_testcases("") if "convinteger" in c.name or "qlinearconv" in c.name}


@pytest.mark.parametrize("name", ["test_convinteger_without_padding", "test_qlinearconv"])
def test_backend_cases(name):
    case = _backend_cases()[name]
    inputs, outputs = case.data_sets[0]
    feeds = {i.name: np.asarray(a) for i, a in zip(case.model.graph.input, inputs)}
    assert not hipep.explain(case.model, device="cpu").rejections
    (got,) = hipep.InferenceSession(case.model, device="cpu").run(None, feeds)
    np.testing.assert_array_equal(got, outputs[0])


def test_backend_case_with_per_channel_zero_points_of_w_is_left():
    """test_convinteger_with_padding's w_zero_point [2] (ONNX allows it; ORT's CPU EP refuses it)."""
    case = _backend_cases()["test_convinteger_with_padding"]
    graph = GraphView.from_onnx(case.model)
    why = check_node(graph.nodes[0], graph)
    assert why is not None and "w_zero_point of shape [2]" in why, why


# ---- claims and errors ---------------------------------------------------------------------------

def _node(op, types, attrs=None):
    """The node of a one-node model over inputs of (elem, shape) types (None: omitted)."""
    names = [f"i{k}" if t is not None else "" for k, t in enumerate(types)]
    node = helper.make_node(op, names, ["y"], **(attrs or {}))
    y = TP.INT32 if op == "ConvInteger" else types[7][0]
    g = helper.make_graph([node], "g", [tensor(f"i{k}", *t) for k, t in enumerate(types) if t is not None],
                          [tensor("y", y, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 10)], ir_version=10)
    view = GraphView.from_onnx(model, infer_shapes=False)
    return check_node(view.nodes[0], view)


U8, I8, I32, F = TP.UINT8, TP.INT8, TP.INT32, TP.FLOAT
X, W = [1, 4, 8, 8], [6, 4, 3, 3]


def _q(x=U8, w=I8, y=U8, shapes=None):
    shapes = shapes or {}
    elems = [x, F, x, w, F, w, F, y]
    default = [X, [], [], W, [6], [6], [], [1]]
    return [(e, shapes.get(k, s)) for k, (e, s) in enumerate(zip(elems, default))]


@pytest.mark.parametrize("op,types,attrs,reason", [
    ("ConvInteger", [(U8, X), (U8, W), (U8, []), (U8, [6])], {}, r"w_zero_point of shape \[6\] \(one value is"),
    ("ConvInteger", [(U8, X), (U8, W), (U8, [1, 1])], {}, r"x_zero_point of shape \[1, 1\]"),
    ("ConvInteger", [(U8, X), (I8, W), (I8, [])], {}, r"input 2 'i2' is i8 but constraint T1 is already u8"),
    ("ConvInteger", [(TP.INT16, X), (U8, W)], {}, r"has element type i16; supported: i8, u8"),
    ("ConvInteger", [(U8, X), (U8, W)], {"auto_pad": "SAME_UPPER", "dilations": [2, 2]}, r"dilation 1 only"),
    ("ConvInteger", [(U8, X), (U8, W)], {"group": 0}, r"group=0 must be positive"),
    ("QLinearConv", _q(x=I8, w=U8, y=I8), {},
     r"x/w/y element types i8/u8/i8 are not supported; ONNX Runtime's CPU EP runs u8/u8/u8, u8/i8/u8, i8/i8/i8"),
    ("QLinearConv", _q(y=I8), {}, r"element types u8/i8/i8 are not supported"),
    ("QLinearConv", _q(shapes={1: [1, 1]}), {}, r"x_scale of shape \[1, 1\] \(one value is supported"),
    ("QLinearConv", _q(shapes={4: [3]}), {}, r"w_scale of shape \[3\] \(one value or one per output channel \(\[6\]\)"),
    ("QLinearConv", _q(shapes={5: [6, 1]}), {}, r"w_zero_point of shape \[6, 1\]"),
    ("QLinearConv", _q(shapes={7: [6]}), {}, r"y_zero_point of shape \[6\]"),
    ("QLinearConv", _q() + [(F, [6])], {}, r"input 8 'i8' has element type f32; supported: i32"),
    ("QLinearConv", _q(shapes={0: [1, 4, 8]}), {"strides": [1, 1]}, r"strides=\[1, 1\] needs 1 values"),
])
def test_what_is_left_unclaimed(op, types, attrs, reason):
    why = _node(op, types, attrs)
    assert why is not None and re.search(reason, why), why


def test_what_is_claimed():
    assert _node("ConvInteger", [(I8, X), (U8, W), (I8, [1]), (U8, [])]) is None
    assert _node("ConvInteger", [(U8, X), (U8, W), None, (U8, [1])]) is None
    assert _node("QLinearConv", _q()) is None
    assert _node("QLinearConv", _q(shapes={4: [1], 5: []}) + [(I32, [6])]) is None
    assert _node("QLinearConv", _q(w=U8, shapes={0: [1, 4, "h", "w"], 3: ["m", 4, 3, 3], 4: ["m"], 5: ["m"]})) is None
    assert _node("QLinearConv", _q(x=I8, y=I8)) is None


def _reference(op, inputs, attrs=None):
    o = lookup("", op)
    resolved = {**{k: v for k, v in o.attributes.items() if v is not None}, **(attrs or {}), OUTPUT_COUNT: 1,
                SINCE_VERSION: 10}
    return o.reference([None if a is None else np.asarray(a) for a in inputs], resolved)


def _q_inputs(w_zp=0, w_scale=0.1, x_scale=0.1, b=None):
    """QLinearConv's inputs for X [1, 4, 5, 5] and W [6, 4, 3, 3]."""
    return [np.zeros((1, 4, 5, 5), np.uint8), np.asarray(x_scale, F32), np.uint8(3), np.zeros((6, 4, 3, 3), np.int8),
            np.asarray(w_scale, F32), np.asarray(w_zp, np.int8), F32(1), np.uint8(0)] + ([b] if b is not None else [])


@pytest.mark.parametrize("op,inputs,pattern", [
    ("ConvInteger", [np.zeros((1, 4, 5, 5), np.uint8), np.zeros((6, 4, 3, 3), np.uint8), np.uint8(1),
                     np.zeros(6, np.uint8)],
     r"ConvInteger: w_zero_point must be a scalar or a 1-D tensor of one element, got shape \[6\]"),
    ("ConvInteger", [np.zeros((1, 3, 5, 5), np.uint8), np.zeros((6, 4, 3, 3), np.uint8)],
     r"ConvInteger: X has 3 channels, so W \(M, C/group, \.\.\.\) needs C/group = 3"),
    ("ConvInteger", [np.zeros((1, 4, 2, 2), np.uint8), np.zeros((6, 4, 3, 3), np.uint8)],
     r"ConvInteger: spatial axis 0 of extent 2 with pads \(0, 0\) is smaller than the \(dilated\) kernel extent 3"),
    ("QLinearConv", _q_inputs(w_zp=np.zeros(4, np.int8)),
     r"QLinearConv: w_zero_point must be one value or one per output channel \(\[6\]\), got shape \[4\]"),
    ("QLinearConv", _q_inputs(w_scale=np.ones((6, 1), F32)), r"w_scale must be one value or one per output channel"),
    ("QLinearConv", _q_inputs(x_scale=np.ones(2, F32)), r"x_scale must be a scalar or a 1-D tensor of one element"),
    ("QLinearConv", _q_inputs(b=np.zeros(5, np.int32)), r"QLinearConv: B must have shape \[6\]"),
])
def test_run_time_errors_name_what_does_not_fit(op, inputs, pattern):
    with pytest.raises(HipepError, match=pattern):
        _reference(op, inputs)


def test_shape_rules():
    from hipep.graph import TensorType

    rule = lookup("", "QLinearConv").shape_rule
    types = [TensorType(e, s) for e, s in _q(shapes={0: [2, 4, None, 9]})] + [TensorType(I32, (6,))]
    (y,) = rule(types, [None] * 9, {"group": 1, "pads": [1, 1, 1, 1], "strides": [2, 2]}, 1)
    assert y.elem_type == U8 and y.shape == (2, 6, None, 5)
    rule = lookup("", "ConvInteger").shape_rule
    (y,) = rule([TensorType(I8, (1, 4, 9)), TensorType(U8, (6, 2, 3))], [None] * 2, {"group": 2}, 1)
    assert y.elem_type == I32 and y.shape == (1, 6, 7)
    with pytest.raises(HipepError, match=r"QLinearConv: B must have shape \[6\]"):
        lookup("", "QLinearConv").shape_rule(types[:8] + [TensorType(I32, (5,))], [None] * 9, {"group": 1}, 1)


def test_an_error_at_run_time_names_the_node():
    """A per-channel w_zero_point whose length the claim cannot see (a symbolic extent)."""
    values = _qlinear_values(np.random.default_rng(1), np.uint8, np.int8, (1, 4, 5, 5), (6, 4, 3, 3), True, False)
    model, feeds = single_node_model("QLinearConv", values, TP.UINT8, {})
    model.graph.input[5].type.tensor_type.shape.dim[0].dim_param = "z"
    sess = hipep.InferenceSession(model, device="cpu")
    feeds["w_zero_point"] = np.zeros(4, np.int8)
    with pytest.raises(Exception, match=r"node 'conv' \(QLinearConv\).*w_zero_point must be one value or one per "
                                        r"output channel \(\[6\]\), got shape \[4\]"):
        sess.run(None, feeds)
