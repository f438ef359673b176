"""Integer convolutions: ConvInteger and QLinearConv (opset 10), the convolutions of quantized CNNs
in ONNX Runtime's QOperator format.

Their attributes, geometry, shape rule and claim checks of the window attributes are Conv's
(vision.py): any group (depthwise included), strides, dilations, pads and auto_pad, over any number
of spatial axes (ORT's CPU EP and the tests: 1 to 3; the GPU binding: at most 3). The
products are exact: X - x_zero_point and W - w_zero_point in int64, summed in int64 and wrapped to
int32 as ONNX Runtime's int32 accumulation does. X is padded with x_zero_point (so a padded tap
adds nothing), which is padding X - x_zero_point with zeros.

ConvInteger: int8/uint8 X and W in any mix, int32 Y. x_zero_point and w_zero_point are one value
each: ONNX allows one per output channel for W, which ONNX Runtime's CPU EP rejects, so hipep
neither claims nor runs it.

QLinearConv: X, W and Y of ONNX Runtime's CPU EP's type combinations (u8/u8/u8, u8/i8/u8,
i8/i8/i8), f32 scales, an optional int32 bias B [M]. X's and Y's scale and zero point are one value
each; W's are one value or one per output channel (channels with different zero points as ONNX
defines them: ONNX Runtime before 1.32 runs only equal ones). Requantization is MLAS's
(MlasRequantizeOutput), bit for bit: acc = the int32 sum plus B (int32, wrapping);
scale[m] = x_scale * w_scale[m] / y_scale in f32, left to right; v = float(acc) * scale[m] clamped to
the output type's range less y_zero_point (NaN to its low end, as SSE's max returns its second
operand for a NaN first); y = round_half_even(v) + y_zero_point.
"""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ._common import at, elem_of, input_type, kernel, result, shape_str, type_name
from .mlas import requantize_output
from .registry import F32, I8, I32, U8, OpDef, register
from .vision import CONV_ATTRIBUTES, _claim_conv, _conv_check, _conv_rule, _Window, conv_products

_Q8 = frozenset({I8, U8})
# (x, w, y) element types ONNX Runtime's CPU EP runs QLinearConv on
QLINEAR_CONV_TYPES = ((U8, U8, U8), (U8, I8, U8), (I8, I8, I8))


# ---- operands --------------------------------------------------------------------------------

def _one_value(op_type: str, what: str, a) -> np.ndarray:
    """A scale or zero point that must hold one value (a scalar or [1], as ONNX Runtime takes it)."""
    a = np.asarray(a)
    if a.shape not in ((), (1,)):
        raise RuntimeShapeError(f"{op_type}: {what} must be a scalar or a 1-D tensor of one element, got shape "
                                f"{shape_str(a.shape)}")
    return a.reshape(())


def _per_channel(op_type: str, what: str, a, m: int) -> np.ndarray:
    """W's scale or zero point: one value or one per output channel ([M]), as [M]."""
    a = np.asarray(a)
    if a.shape not in ((), (1,), (m,)):
        raise RuntimeShapeError(f"{op_type}: {what} must be one value or one per output channel ([{m}]), got "
                                f"shape {shape_str(a.shape)}")
    return np.broadcast_to(a.reshape(-1), (m,))


def _window(op_type, x, w, b_shape, attrs):
    """(group, M, the windows) of the convolution, checked as Conv's."""
    group, kern, m = _conv_check(op_type, x.shape, w.shape, b_shape, attrs)
    return group, m, _Window(op_type, x.shape[2:], kern, attrs)


def _sums(x, w, x_zp, w_zp, win, group) -> np.ndarray:
    """conv(X - x_zp, W - w_zp) exactly, in int64; w_zp one value per output channel ([M])."""
    xs = x.astype(np.int64) - x_zp.astype(np.int64)
    ws = w.astype(np.int64) - w_zp.astype(np.int64).reshape((-1,) + (1,) * (w.ndim - 1))
    return conv_products(xs, ws, win, group)


# ---- ConvInteger -----------------------------------------------------------------------------

@kernel("ConvInteger")
def _conv_integer(inputs, attrs):
    x, w = inputs[0], inputs[1]
    group, m, win = _window("ConvInteger", x, w, None, attrs)
    zero = np.zeros((), np.int64)
    x_zp = zero if at(inputs, 2) is None else _one_value("ConvInteger", "x_zero_point", inputs[2])
    w_zp = zero if at(inputs, 3) is None else _one_value("ConvInteger", "w_zero_point", inputs[3])
    return [result(_sums(x, w, x_zp, np.broadcast_to(w_zp, (m,)), win, group).astype(np.int32))]


def _one_value_reason(t, what: str, per_channel: bool = False, m: int | None = None) -> str | None:
    """Why an operand of claim-time type `t` is not one value (nor, where `per_channel`, one per
    output channel: [m], m None where W's extent is unknown); None where it is, is omitted, or its
    shape is unknown (the kernel checks it then)."""
    if t is None or t.shape is None or not all(isinstance(d, int) for d in t.shape):
        return None
    shape = list(t.shape)
    if shape in ([], [1]) or (per_channel and len(shape) == 1 and (m is None or shape[0] == m)):
        return None
    per = f" or one per output channel ([{'M' if m is None else m}])" if per_channel else ""
    return f"{what} of shape {shape} (one value{per} is supported, as ONNX Runtime's CPU EP takes it)"


def _claim_conv_integer(node, graph, attrs):
    """x_zero_point and w_zero_point of one value each (ONNX Runtime's CPU EP takes no per-channel
    zero point of W)."""
    why = _claim_conv(node, graph, attrs)
    if why:
        return why
    return (_one_value_reason(input_type(node, graph, 2), "x_zero_point")
            or _one_value_reason(input_type(node, graph, 3), "w_zero_point"))


register(OpDef("ConvInteger", (10,), ("T1", "T2", "T1", "T2"), ("T3",),
               {"T1": _Q8, "T2": _Q8, "T3": frozenset({I32})}, _conv_integer, attributes=dict(CONV_ATTRIBUTES),
               claim=_claim_conv_integer, min_inputs=2,
               shape_rule=_conv_rule("ConvInteger", operands=(0, 1, None), elem_type=lambda types: I32)))


# ---- QLinearConv -----------------------------------------------------------------------------

@kernel("QLinearConv")
def _qlinear_conv(inputs, attrs):
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp = inputs[:8]
    b = at(inputs, 8)
    op = "QLinearConv"
    group, m, win = _window(op, x, w, None if b is None else b.shape, attrs)
    acc = _sums(x, w, _one_value(op, "x_zero_point", x_zp), _per_channel(op, "w_zero_point", w_zp, m), win, group)
    acc = acc.astype(np.int32)
    nsp = x.ndim - 2
    if b is not None:
        acc = acc + b.astype(np.int32).reshape((m,) + (1,) * nsp)  # int32: wraps as MLAS's add does
    scale = (np.float32(_one_value(op, "x_scale", x_scale)) * _per_channel(op, "w_scale", w_scale, m).astype(np.float32)
             / np.float32(_one_value(op, "y_scale", y_scale)))
    zp = int(_one_value(op, "y_zero_point", y_zp))
    return [result(requantize_output(acc, scale.astype(np.float32).reshape((m,) + (1,) * nsp), zp, y_zp.dtype))]


def _claim_qlinear_conv(node, graph, attrs):
    """x/w/y types u8/u8/u8, u8/i8/u8 or i8/i8/i8 (ONNX Runtime's CPU EP's); the scales and zero
    points of X and Y one value each, W's one value or one per output channel."""
    why = _claim_conv(node, graph, attrs)
    if why:
        return why
    x, w, y = (elem_of(input_type(node, graph, i)) for i in (0, 3, 7))
    if (x, w, y) not in QLINEAR_CONV_TYPES:
        names = "/".join(type_name(e) for e in (x, w, y))
        return (f"x/w/y element types {names} are not supported; ONNX Runtime's CPU EP runs "
                f"{', '.join('/'.join(type_name(e) for e in c) for c in QLINEAR_CONV_TYPES)}")
    wt = input_type(node, graph, 3)
    m = wt.shape[0] if wt is not None and wt.shape and isinstance(wt.shape[0], int) else None
    for i, what, per_channel in ((1, "x_scale", False), (2, "x_zero_point", False), (4, "w_scale", True),
                                 (5, "w_zero_point", True), (6, "y_scale", False), (7, "y_zero_point", False)):
        why = _one_value_reason(input_type(node, graph, i), what, per_channel, m)
        if why:
            return why
    return None


register(OpDef("QLinearConv", (10,), ("T1", "S", "T1", "T2", "S", "T2", "S", "T3", "T4"), ("T3",),
               {"T1": _Q8, "T2": _Q8, "T3": _Q8, "S": frozenset({F32}), "T4": frozenset({I32})}, _qlinear_conv,
               attributes=dict(CONV_ATTRIBUTES), claim=_claim_qlinear_conv, min_inputs=8,
               shape_rule=_conv_rule("QLinearConv", operands=(0, 3, 8), elem_type=lambda types: elem_of(at(types, 7)))))
