"""GPU program for DynamicQuantizeLinear (ai.onnx, opset 11): x f32 -> y uint8 with a per-tensor
scale and zero point derived from x's range (registered in hipep.runtime.gpu_kernels' table on
import). It is composed of existing kernels, with intermediate results in the stream's workspace:

  1. an expression copying x with NaNs replaced by 0: the CPU reference (hipep.ops.quantize), like
     ONNX Runtime's min/max search, ignores NaNs, whereas ReduceMin/ReduceMax propagate them. The
     range always includes 0, so a 0 in a NaN's place leaves it unchanged;
  2. ReduceMin and ReduceMax of that copy (kernels/reduce.hip) to scalars; a large tensor is first
     reduced as rows of a [rows, cols] view (one block each), then the row results, so that the
     reduction is not one block's work;
  3. one expression turning min and max into y_scale and y_zero_point, the reference's operations
     in f32: lo = min(0, min), hi = max(0, max), scale = 1 if hi == lo else (hi - lo) / 255,
     zero point = rint(clip(0 - lo / scale, 0, 255)) (NaN, from infinities of both signs, -> 0
     as numpy converts it);
  4. QuantizeLinear's expression (gpu_quantize_linear) reading those as per-tensor parameters.

y_scale and y_zero_point are written to the outputs when the graph reads them, else to the
workspace (step 4 reads them either way)."""
from __future__ import annotations

import numpy as np

from .gpu_binding_core import Arg, NoKernel, _binding, workspace_regions
from .gpu_bindings_pointwise import expression_ops
from .gpu_quantize_linear import quantize_expression

_F32 = np.dtype(np.float32)
_U8 = np.dtype(np.uint8)
# Up to this many elements one block reduces the whole tensor; past it, rows of at most _ROW_MAX
# (and at least _ROW_MIN) elements dividing the element count, if there is such a length.
_ONE_BLOCK = 8192
_ROW_MAX, _ROW_MIN = 4096, 256


def range_row_length(n: int) -> int:
    """The row length of the first reduction stage for n elements (n: a single stage)."""
    if n <= _ONE_BLOCK:
        return n
    for cols in range(_ROW_MAX, _ROW_MIN - 1, -1):
        if n % cols == 0:
            return cols
    return n


def nan_to_zero_expression():
    from ..ops.pointwise import Builder, Operand

    b = Builder([Operand(_F32)])
    x = b.input(0)
    return b.build(b.where(b.isnan(x), b.const(0, _F32), x))


def scale_zero_point_expression():
    """(min, max) of x without NaNs -> (y_scale f32, y_zero_point uint8), as the CPU reference."""
    from ..ops.pointwise import Builder, Operand

    b = Builder([Operand(_F32), Operand(_F32)])
    zero, one = b.const(0, _F32), b.const(1, _F32)
    lo = b.min(zero, b.input(0))
    hi = b.max(zero, b.input(1))
    scale = b.where(b.eq(hi, lo), one, (hi - lo) / b.const(255, _F32))
    zp = b.rint(b.min(b.max(zero - lo / scale, zero), b.const(255, _F32)))
    zp = b.where(b.isnan(zp), zero, zp)
    return b.build(scale, b.cast(zp, _U8))


def _check(attrs, dtypes, shapes, values):
    if dtypes and dtypes[0] and dtypes[0] != "float32":
        return f"x of type {dtypes[0]} (f32 has a kernel)"
    return None


@_binding("::DynamicQuantizeLinear", check=_check, modules=("reduce",))
def _dynamic_quantize_bind(ins, outs, attrs, target):
    from .gpu_bindings_reduce import _reduce_bind

    x = ins[0]
    outs = list(outs) + [None] * (3 - len(outs))
    y, scale_out, zp_out = outs[:3]
    if x.dtype != _F32:
        raise NoKernel(f"DynamicQuantizeLinear from {x.dtype.name}")
    if y is None and scale_out is None and zp_out is None:
        return []
    n = int(x.size)
    cols = range_row_length(n) if n else 0
    rows = n // cols if cols else 1
    staged = rows > 1
    clean_at, row_lo_at, row_hi_at, lo_at, hi_at, scale_at, zp_at = workspace_regions(target, "DynamicQuantizeLinear", [n * 4, rows * 4 if staged else 0, rows * 4 if staged else 0, 4, 4, 4, 1])

    ops = []
    clean = Arg(clean_at, (rows, cols), _F32)
    if n:
        ops += expression_ops(nan_to_zero_expression(), [Arg(x.ptr, (n,), _F32)], [Arg(clean_at, (n,), _F32)],
                              target, "DynamicQuantizeLinear")
    reduce_rows = {"axes": [1], "keepdims": 1}
    lo, hi = Arg(lo_at, (), _F32), Arg(hi_at, (), _F32)
    for op_type, row_at, total in (("ReduceMin", row_lo_at, lo), ("ReduceMax", row_hi_at, hi)):
        bind = _reduce_bind(op_type)
        if staged:
            ops += bind([clean, None], [Arg(row_at, (rows, 1), _F32)], reduce_rows, target)
            ops += bind([Arg(row_at, (1, rows), _F32), None], [Arg(total.ptr, (1, 1), _F32)], reduce_rows, target)
        else:
            # An empty x reduces to +inf / -inf, which the range's 0 then replaces.
            ops += bind([clean, None], [Arg(total.ptr, (1, 1), _F32)], reduce_rows, target)

    scale = Arg(scale_at if scale_out is None else scale_out.ptr, (), _F32)
    zp = Arg(zp_at if zp_out is None else zp_out.ptr, (), _U8)
    ops += expression_ops(scale_zero_point_expression(), [lo, hi], [scale, zp], target, "DynamicQuantizeLinear")
    if y is not None and n:
        ops += expression_ops(quantize_expression("float32", "float32", "uint8", "uint8"), [x, scale, zp],
                              [Arg(y.ptr, tuple(x.shape), _U8)], target, "DynamicQuantizeLinear")
    return ops
