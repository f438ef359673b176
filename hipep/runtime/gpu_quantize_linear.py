"""GPU bindings: QuantizeLinear and DequantizeLinear as generated pointwise kernels.

Registered into the kernel table (hipep.runtime.gpu_kernels) when it is imported.

Like BatchNormalization (gpu_bindings_pointwise), these are not registry pointwise ops: a per-axis
scale [C] lies along `axis`, not the trailing axes, so the binding reads the scale and zero point
through a broadcast view [C, 1, ..., 1] of their buffers, and a blocked scale (opset 21+) through
views that split x's axis into [blocks, block_size]: x [.., D, ..] is read as [.., D / B, B, ..]
and the scale [.., D / B, ..] as [.., D / B, 1, ..]. That split needs B to divide D; an axis whose
last block is partial is refused (its scale index is not a linear function of x's coordinates).

The expressions are the CPU reference's (hipep.ops.quantize) operation for operation, in f32:
  quantize:   q = rint(x / scale) (+ zero point), NaN -> the type's low end, clamped, converted;
  dequantize: (x - zero point) in integers, converted to f32, times scale, rounded to the output.
rint is round half to even on the GPU as in numpy, and the division and multiplication are the
correctly rounded intrinsics, so the results equal the CPU device's bit for bit. int4/uint4 are
not claimed: ONNX packs them two to a byte (the op registry refuses them for the same reason).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import HipepError
from ..ops.quantize import _scale_layout
from ..ops.registry import F16, F32, I16, I8, U16, U8
from .gpu_binding_core import Arg, NoKernel, _binding
from .gpu_bindings_pointwise import expression_ops

_FLOATS = ("float32", "float16")
_QUANT_TYPES = ("int8", "uint8", "int16", "uint16")
_ONNX_QUANT = {I8: "int8", U8: "uint8", I16: "int16", U16: "uint16"}
_ONNX_FLOAT = {F32: "float32", F16: "float16"}
_PACKED = ("int4", "uint4")


def quantize_expression(x_dtype: str, scale_dtype: str, zero_point_dtype: str | None, q_dtype: str):
    """saturate(round_half_even(x / scale) + zero_point) in f32 (NaN -> the low end), as q_dtype."""
    from ..ops.pointwise import F32 as PF32, Builder, Operand

    dtypes = [x_dtype, scale_dtype] + ([zero_point_dtype] if zero_point_dtype else [])
    b = Builder([Operand(np.dtype(d)) for d in dtypes])
    x, scale = b.cast(b.input(0), PF32), b.cast(b.input(1), PF32)
    q = b.rint(x / scale)
    if zero_point_dtype:
        q = q + b.cast(b.input(2), PF32)
    info = np.iinfo(q_dtype)
    low, high = b.const(info.min, PF32), b.const(info.max, PF32)
    q = b.where(b.isnan(q), low, q)
    q = b.min(b.max(q, low), high)
    return b.build(b.cast(q, q_dtype))


def dequantize_expression(x_dtype: str, scale_dtype: str, zero_point_dtype: str | None, out_dtype: str):
    """(x - zero_point) * scale: the difference exact in integers, the product in f32."""
    from ..ops.pointwise import F32 as PF32, Builder, Operand

    dtypes = [x_dtype, scale_dtype] + ([zero_point_dtype] if zero_point_dtype else [])
    b = Builder([Operand(np.dtype(d)) for d in dtypes])
    wide = "int64" if x_dtype == "int32" else "int32"  # int32 - int32 may overflow int32
    xi = b.cast(b.input(0), wide)
    if zero_point_dtype:
        xi = xi - b.cast(b.input(2), wide)
    y = b.cast(xi, PF32) * b.cast(b.input(1), PF32)
    return b.build(b.cast(y, out_dtype))


# ---- claims --------------------------------------------------------------------------------------

def _block_reason(attrs, shapes) -> str | None:
    """Why a blocked layout cannot be split into [blocks, block_size] views, if it cannot."""
    block = int(attrs.get("block_size") or 0)
    if block <= 0:
        return None
    x_shape = shapes[0] if shapes else None
    if x_shape is None:
        return f"block_size={block} with x's shape unknown at claim time (its axis extent must be a multiple)"
    axis = int(attrs.get("axis", 1))
    if not -len(x_shape) <= axis < len(x_shape):
        return f"attribute axis={axis} is out of range for a rank-{len(x_shape)} input"
    extent = x_shape[axis]
    if extent is None:
        return f"block_size={block} with x's extent along axis {axis} unknown at claim time"
    if extent % block:
        return (f"block_size={block} does not divide x's extent {extent} along axis {axis} (a partial last "
                f"block has no kernel)")
    return None


def _operand_types(dtypes: Sequence[str]) -> tuple[str, str, str]:
    get = (lambda k: dtypes[k] if k < len(dtypes) and dtypes[k] else "")
    return get(0), get(1), get(2)


def _quantize_out(attrs, zp_dtype: str) -> str | None:
    if zp_dtype:
        return zp_dtype
    return _ONNX_QUANT.get(int(attrs.get("output_dtype") or U8))


def _quantize_check(attrs, dtypes, shapes, values):
    x, scale, zp = _operand_types(dtypes)
    if x and x not in _FLOATS:
        return f"x of type {x} (f32 and f16 have a kernel)"
    if scale and scale not in _FLOATS:
        return f"scale of type {scale} (f32 and f16 have a kernel)"
    if zp in _PACKED:
        return f"{zp} is packed two values per byte; the kernel reads one value per byte"
    q = _quantize_out(attrs, zp)
    if q not in _QUANT_TYPES:
        return f"quantized type {q or attrs.get('output_dtype')} (int8, uint8, int16, uint16 have a kernel)"
    return _block_reason(attrs, shapes)


def _dequantize_out(attrs, scale_dtype: str) -> str | None:
    out = int(attrs.get("output_dtype") or 0)
    return _ONNX_FLOAT.get(out) if out else scale_dtype


def _dequantize_check(attrs, dtypes, shapes, values):
    x, scale, zp = _operand_types(dtypes)
    if x in _PACKED or zp in _PACKED:
        return f"{x if x in _PACKED else zp} is packed two values per byte; the kernel reads one value per byte"
    if x and x not in _QUANT_TYPES + ("int32",):
        return f"x of type {x} (int8, uint8, int16, uint16, int32 have a kernel)"
    if scale and scale not in _FLOATS:
        return f"scale of type {scale} (f32 and f16 have a kernel)"
    out = _dequantize_out(attrs, scale or "float32")
    if out not in _FLOATS:
        return f"output_dtype={attrs.get('output_dtype')} (f32 and f16 have a kernel)"
    return _block_reason(attrs, shapes)


# ---- launches ------------------------------------------------------------------------------------

def _layout_views(op_type: str, x: Arg, out: Arg, scale: Arg, zp: Arg | None, attrs) -> tuple[Arg, Arg, list]:
    """(x view, output view, [scale view, zero point view]) whose broadcast strides read each
    element's scale and zero point."""
    # A one-element zero point beside a one-element scale is per-tensor whatever their ranks ([]
    # against [1]), as the registry's layout rule reads them.
    per_tensor = scale.size == 1 and scale.ndim <= 1 and zp is not None and zp.size == 1 and zp.ndim <= 1
    if zp is not None and tuple(zp.shape) != tuple(scale.shape) and not per_tensor:
        raise HipepError(f"{op_type}: the zero point must have the scale's shape {list(scale.shape)}, "
                         f"got {list(zp.shape)}")
    block = int(attrs.get("block_size") or 0)
    kind, axis = _scale_layout(op_type, tuple(x.shape), tuple(scale.shape), int(attrs.get("axis", 1)), block)
    shape = tuple(int(d) for d in x.shape)
    if kind == "tensor":
        param_shape = ()
    elif kind == "axis":
        param_shape = (shape[axis],) + (1,) * (len(shape) - axis - 1)
    else:
        if shape[axis] % block:
            raise NoKernel(f"{op_type}: block_size={block} does not divide x's extent {shape[axis]} on axis {axis}")
        blocks = shape[axis] // block
        param_shape = (blocks, 1) + shape[axis + 1:]
        param_shape = shape[:axis] + param_shape
        shape = shape[:axis] + (blocks, block) + shape[axis + 1:]
    views = [None if a is None else Arg(a.ptr, param_shape, a.dtype) for a in (scale, zp)]
    return Arg(x.ptr, shape, x.dtype), Arg(out.ptr, shape, out.dtype), views


def _launch(op_type: str, expr_for, ins, outs, attrs, target, out_dtype: str) -> list:
    x, scale = ins[0], ins[1]
    zp = ins[2] if len(ins) > 2 else None
    y = outs[0]
    if y is None or x.size == 0:
        return []
    if y.dtype.name != out_dtype:
        raise HipepError(f"{op_type}: the output is {y.dtype.name}, the node computes {out_dtype}")
    xv, yv, (sv, zv) = _layout_views(op_type, x, y, scale, zp, attrs)
    expr = expr_for(x.dtype.name, scale.dtype.name, None if zp is None else zp.dtype.name, out_dtype)
    return expression_ops(expr, [xv, sv] + ([zv] if zv is not None else []), [yv], target, op_type)


@_binding("::QuantizeLinear", check=_quantize_check)
def _quantize_bind(ins, outs, attrs, target):
    zp = ins[2] if len(ins) > 2 else None
    q = _quantize_out(attrs, "" if zp is None else zp.dtype.name)
    if q not in _QUANT_TYPES or ins[0].dtype.name not in _FLOATS or ins[1].dtype.name not in _FLOATS:
        raise NoKernel(f"QuantizeLinear from {ins[0].dtype.name} with a {ins[1].dtype.name} scale to {q}")
    return _launch("QuantizeLinear", quantize_expression, ins, outs, attrs, target, q)


@_binding("::DequantizeLinear", check=_dequantize_check)
def _dequantize_bind(ins, outs, attrs, target):
    out = _dequantize_out(attrs, ins[1].dtype.name)
    if ins[0].dtype.name not in _QUANT_TYPES + ("int32",) or out not in _FLOATS:
        raise NoKernel(f"DequantizeLinear from {ins[0].dtype.name} to {out}")
    return _launch("DequantizeLinear", dequantize_expression, ins, outs, attrs, target, out)
