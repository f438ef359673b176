"""Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear.

Per-tensor (a one-element scale), per-axis (a 1-D scale along `axis`) and, from opset 21,
blocked (`block_size`: the scale has x's rank, its `axis` extent ceil(x.shape[axis] / block_size))
scales, for 8- and 16-bit integers. Math follows ONNX Runtime's CPU kernels: quantize is
saturate(round_half_even(x / scale) + zero_point) in f32 (NaN saturates to the low end),
dequantize is (x - zero_point) * scale in f32, rounded once to the output type.

Not implemented (rejected with a reason): float8 outputs (their saturate attribute goes with
them), and int4/uint4, which ONNX and ONNX Runtime pack two to a byte while numpy (ml_dtypes)
keeps one per byte, so hipep's buffers cannot hold ORT's tensors as they are.
"""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ._common import (at, elem_of, input_type, kernel, normalize_axis, pshape_str, result,
                      shape_of, shape_rule, shape_str, tensor_type, type_name)
from .registry import F16, F32, I8, I16, I32, U8, U16, OpDef, register

U4, I4 = 21, 22
FLOATS = frozenset({F32, F16})
QTYPES = frozenset({I8, U8, I16, U16})
_NP = {I8: np.int8, U8: np.uint8, I16: np.int16, U16: np.uint16, F32: np.float32, F16: np.float16}
_F32 = np.float32


def _scale_layout(op_type, x_shape, scale_shape, axis, block):
    """How a scale of `scale_shape` maps onto x: ('tensor', None), ('axis', axis) or
    ('block', axis). Raises RuntimeShapeError for a scale that fits none."""
    rank = len(x_shape)
    if block > 0:
        axis = normalize_axis(op_type, axis, rank)
        want = list(x_shape)
        want[axis] = -(-x_shape[axis] // block)
        if list(scale_shape) != want:
            raise RuntimeShapeError(
                f"{op_type}: with block_size={block} the scale must have shape {shape_str(want)} "
                f"(x is {shape_str(x_shape)}, axis {axis}), got {shape_str(scale_shape)}")
        return "block", axis
    if int(np.prod(scale_shape, dtype=np.int64)) == 1 and len(scale_shape) <= 1:
        return "tensor", None
    axis = normalize_axis(op_type, axis, rank)
    if len(scale_shape) != 1 or scale_shape[0] != x_shape[axis]:
        raise RuntimeShapeError(
            f"{op_type}: a per-axis scale must be 1-D with x's extent {x_shape[axis]} on axis {axis} "
            f"(x is {shape_str(x_shape)}), got {shape_str(scale_shape)}")
    return "axis", axis


def _expand(a: np.ndarray, layout, x_shape, block) -> np.ndarray:
    """A scale or zero point laid out per `layout`, broadcastable against x."""
    kind, axis = layout
    if kind == "tensor":
        return a.reshape(())
    if kind == "axis":
        return a.reshape((-1,) + (1,) * (len(x_shape) - axis - 1))
    return np.repeat(a, block, axis=axis)[tuple(slice(0, d) for d in x_shape)]


def _zero_point_check(op_type, zp, scale):
    if zp is not None and zp.shape != scale.shape:
        raise RuntimeShapeError(f"{op_type}: the zero point must have the scale's shape "
                                f"{shape_str(scale.shape)}, got {shape_str(zp.shape)}")


def _quantize(x32: np.ndarray, scale32, zp, qdtype) -> np.ndarray:
    info = np.iinfo(qdtype)
    q = np.rint(x32 / scale32)
    if zp is not None:
        q = q + zp.astype(np.float32)
    q = np.where(np.isnan(q), _F32(info.min), q)
    return np.clip(q, info.min, info.max).astype(qdtype)


# ---- QuantizeLinear --------------------------------------------------------------------------

def _quantize_out_dtype(attrs, zp):
    if zp is not None:
        return zp.dtype
    out = int(attrs.get("output_dtype") or U8)
    if out not in _NP or out in FLOATS:
        raise RuntimeShapeError(f"QuantizeLinear: output_dtype {type_name(out)} is not supported")
    return np.dtype(_NP[out])


@kernel("QuantizeLinear")
def _quantize_linear(inputs, attrs):
    x, scale = inputs[0], inputs[1]
    zp = at(inputs, 2)
    block = int(attrs.get("block_size") or 0)
    _zero_point_check("QuantizeLinear", zp, scale)
    layout = _scale_layout("QuantizeLinear", x.shape, scale.shape, int(attrs["axis"]), block)
    s = _expand(scale.astype(np.float32), layout, x.shape, block)
    z = None if zp is None else _expand(zp, layout, x.shape, block)
    return [result(_quantize(x.astype(np.float32), s, z, _quantize_out_dtype(attrs, zp)))]


@shape_rule("QuantizeLinear")
def _quantize_shape(types, values, attrs, num_outputs):
    zp = at(types, 2)
    elem = elem_of(zp) if zp is not None else int(attrs.get("output_dtype") or U8)
    _layout_rule("QuantizeLinear", types, attrs)
    return [tensor_type(elem, shape_of(types[0]))]


def _layout_rule(op_type, types, attrs):
    """The layout checks the reference makes, where the shapes are static."""
    x, s = shape_of(types[0]), shape_of(types[1])
    zp = shape_of(at(types, 2))
    if s is not None and zp is not None and None not in s and None not in zp and tuple(s) != tuple(zp):
        raise RuntimeShapeError(f"{op_type}: the zero point must have the scale's shape "
                                f"{pshape_str(s)}, got {pshape_str(zp)}")
    if x is not None and s is not None and None not in x and None not in s:
        _scale_layout(op_type, x, s, int(attrs["axis"]), int(attrs.get("block_size") or 0))


def _claim_quantize(node, graph, attrs):
    x, s = input_type(node, graph, 0), input_type(node, graph, 1)
    zp = input_type(node, graph, 2)
    out = graph.type_of(node.outputs[0]) if node.outputs and node.outputs[0] else None
    q = zp.elem_type if zp is not None else (out.elem_type if out is not None and out.elem_type else
                                              int(attrs.get("output_dtype") or U8))
    why = _claim_common(node, attrs, x, s, q)
    if why:
        return why
    if x is not None and s is not None and x.elem_type != s.elem_type:
        return (f"x is {type_name(x.elem_type)} but y_scale is {type_name(s.elem_type)}; hipep (like "
                f"ONNX Runtime) quantizes with a scale of x's type")
    precision = int(attrs.get("precision") or 0)
    if precision and x is not None and precision != x.elem_type:
        return (f"attribute precision={type_name(precision)} (division in another precision than "
                f"x's {type_name(x.elem_type)}) is not implemented")
    if attrs.get("output_dtype") and zp is not None and int(attrs["output_dtype"]) != zp.elem_type:
        return (f"attribute output_dtype={type_name(int(attrs['output_dtype']))} disagrees with the "
                f"zero point's type {type_name(zp.elem_type)}")
    return None


def _claim_common(node, attrs, x, s, q):
    """Checks shared by QuantizeLinear and DequantizeLinear: types per opset, int4, layout."""
    v = node.since_version
    if q in (I4, U4):
        return (f"{type_name(q)} is packed two values per byte by ONNX and ONNX Runtime, while numpy "
                f"(ml_dtypes) holds one per byte; hipep's buffers do not carry that packing")
    if q not in QTYPES | ({I32} if node.op_type == "DequantizeLinear" else set()):
        return f"quantized type {type_name(q)} is not supported (float8 types are not implemented)"
    if q in (I16, U16) and v < 21:
        return f"{type_name(q)} quantization is part of opset 21+, not {node.op_type}-{v}"
    for t, what in ((x, "x"), (s, "scale")):
        if t is not None and t.elem_type == F16 and v < 19:
            return f"f16 {what} is part of opset 19+, not {node.op_type}-{v}"
    block = int(attrs.get("block_size") or 0)
    if block < 0:
        return f"attribute block_size={block} must be non-negative"
    rank = None if x is None else x.rank
    per_axis = block > 0 or (s is not None and s.rank == 1 and s.shape[0] != 1)
    if per_axis and rank is not None and not -rank <= int(attrs["axis"]) < rank:
        return f"attribute axis={attrs['axis']} is out of range for a rank-{rank} input"
    return None


register(OpDef("QuantizeLinear", (10, 13, 19, 21, 23, 24, 25), ("X", "S", "Q"), ("Q",),
               {"X": FLOATS, "S": FLOATS, "Q": QTYPES | {I4, U4}}, _quantize_linear,
               attributes={"axis": 1, "saturate": 1, "block_size": 0, "output_dtype": 0, "precision": 0},
               claim=_claim_quantize, min_inputs=2, shape_rule=_quantize_shape))


# ---- DequantizeLinear ------------------------------------------------------------------------

@kernel("DequantizeLinear")
def _dequantize_linear(inputs, attrs):
    x, scale = inputs[0], inputs[1]
    zp = at(inputs, 2)
    block = int(attrs.get("block_size") or 0)
    _zero_point_check("DequantizeLinear", zp, scale)
    layout = _scale_layout("DequantizeLinear", x.shape, scale.shape, int(attrs["axis"]), block)
    s = _expand(scale.astype(np.float32), layout, x.shape, block)
    xi = x.astype(np.int64)
    if zp is not None:
        xi = xi - _expand(zp, layout, x.shape, block).astype(np.int64)
    out = int(attrs.get("output_dtype") or 0)
    dtype = np.dtype(_NP[out]) if out in FLOATS else scale.dtype
    return [result(xi.astype(np.float32) * s, dtype)]


@shape_rule("DequantizeLinear")
def _dequantize_shape(types, values, attrs, num_outputs):
    out = int(attrs.get("output_dtype") or 0)
    _layout_rule("DequantizeLinear", types, attrs)
    return [tensor_type(out if out in FLOATS else elem_of(types[1]), shape_of(types[0]))]


def _claim_dequantize(node, graph, attrs):
    x, s = input_type(node, graph, 0), input_type(node, graph, 1)
    why = _claim_common(node, attrs, x, s, 0 if x is None else x.elem_type)
    if why:
        return why
    out = int(attrs.get("output_dtype") or 0)
    if out and out not in FLOATS:
        return f"attribute output_dtype={type_name(out)} is not f32 or f16"
    return None


register(OpDef("DequantizeLinear", (10, 13, 19, 21, 23, 24, 25), ("Q", "S", "Q"), ("Y",),
               {"Q": QTYPES | {I32, I4, U4}, "S": FLOATS, "Y": FLOATS}, _dequantize_linear,
               attributes={"axis": 1, "block_size": 0, "output_dtype": 0},
               claim=_claim_dequantize, min_inputs=2, shape_rule=_dequantize_shape))


# ---- DynamicQuantizeLinear -------------------------------------------------------------------

@kernel("DynamicQuantizeLinear")
def _dynamic_quantize(inputs, attrs):
    x = inputs[0].astype(np.float32)
    # The range always includes 0; NaNs are ignored (as ORT's min/max search does).
    lo = min(_F32(0), np.fmin.reduce(x, axis=None, initial=np.inf).astype(np.float32)) if x.size else _F32(0)
    hi = max(_F32(0), np.fmax.reduce(x, axis=None, initial=-np.inf).astype(np.float32)) if x.size else _F32(0)
    scale = _F32(1) if hi == lo else _F32((hi - lo) / _F32(255))
    zp = np.rint(np.clip(_F32(0) - lo / scale, 0, 255)).astype(np.uint8)
    y = _quantize(x, scale, np.asarray(zp), np.uint8)
    return [result(y), result(scale, np.float32), result(zp, np.uint8)]


@shape_rule("DynamicQuantizeLinear")
def _dynamic_quantize_shape(types, values, attrs, num_outputs):
    return [tensor_type(U8, shape_of(types[0])), tensor_type(F32, ()), tensor_type(U8, ())]


register(OpDef("DynamicQuantizeLinear", (11,), ("X",), ("Y", "S", "Y"),
               {"X": frozenset({F32}), "Y": frozenset({U8}), "S": frozenset({F32})}, _dynamic_quantize,
               shape_rule=_dynamic_quantize_shape))
