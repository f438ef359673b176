"""GPU programs for ops composed of the existing kernels (registered in hipep.runtime.gpu_kernels'
table on import). Each is a short sequence of launches: generated pointwise expressions, the
reductions and ArgMax (gpu_bindings_reduce), the copies with fills (kernels/copy.hip) and Range's
kernel, with intermediate results in the stream's workspace.

  * OneHot, Hardmax: positions 1, 2, ..., n (a 1 written by a fill, then Range's kernel starting
    and stepping from it), compared with the indices (Hardmax: ArgMax's) by an expression.
  * EyeLike: a 1 written to the workspace, then the padded copy reading it on the diagonal and
    writing zeros elsewhere (bytes: every element type).
  * LpNormalization: ReduceL1 / ReduceL2 along the axis, then x / norm (0 where the norm is 0).
  * MeanVarianceNormalization: ReduceMean, x - mean, ReduceSumSquare of that, then the quotient
    (axes that are not adjacent are first transposed to the end).
  * LRN: the channel windows of x (zeros past the channels) reduced by ReduceSumSquare, then
    x * (bias + alpha / size * sum) ^ -beta.
(CumProd runs kernels/scan.hip beside CumSum: gpu_bindings_reduce.py; LpPool kernels/pool.hip
beside the other pools: gpu_pool.py.)"""
from __future__ import annotations

import ml_dtypes  # noqa: F401  (registers numpy's 'bfloat16' dtype name)
import numpy as np

from ..errors import HipepError
from ..ops._common import normalize_axes, normalize_axis
from ..ops.registry import SINCE_VERSION
from .gpu_binding_core import (Arg, NoKernel, _binding, _prod, fill_copy, fill_ops, permuted_copy,
                               workspace_regions)
from .gpu_bindings_pointwise import expression_ops

_I64 = np.dtype(np.int64)
_F32 = np.dtype(np.float32)
_FLOAT_TYPES = ("float32", "float16")
_MAX_RANK = 8  # the generated kernels' (hipep.ops.pointwise_hip.MAX_RANK)


def _float_check(attrs, dtypes, shapes, values):
    if not dtypes or dtypes[0] not in _FLOAT_TYPES:
        return f"element type {dtypes[0] if dtypes else '?'}"
    return None


def _builder(dtypes):
    from ..ops.pointwise import Builder, Operand

    return Builder([Operand(np.dtype(d)) for d in dtypes])


def _positions(at: int, n: int, target) -> tuple[list, Arg]:
    """Ops writing the int64 positions 1, 2, ..., n at `at` + 8 (the 1 they start and step from
    at `at`: Range's kernel reads start and delta from device memory), and that array."""
    from .gpu_bindings_data import _range_bind

    one = Arg(at, (1,), _I64)
    positions = Arg(at + _I64.itemsize, (n,), _I64)
    ops = fill_ops(one, np.int64(1).tobytes(), target)
    return ops + _range_bind([one, None, one], [positions], {}, target), positions


def _positions_bytes(n: int) -> int:
    return (n + 1) * _I64.itemsize


# ---- OneHot ------------------------------------------------------------------------------------
# out[o, j, i] = on where idx[o, i] (idx + depth where negative) is j, else off: positions j + 1
# along the depth axis, the depth read as the last position (so the kernel does not depend on it).

_EXPRESSION_TYPES = ("float32", "float16", "float64", "bool", "int8", "uint8", "int16", "uint16", "int32",
                     "uint32", "int64", "uint64")


def _one_hot_check(attrs, dtypes, shapes, values):
    if not dtypes or dtypes[0] not in ("int32", "int64"):
        return f"indices of element type {dtypes[0] if dtypes else '?'}"
    if len(dtypes) < 3 or dtypes[2] not in _EXPRESSION_TYPES:
        return f"values of element type {dtypes[2] if len(dtypes) > 2 else '?'}"
    return None


def one_hot_expression(index_dtype: str, value_dtype: str):
    b = _builder([index_dtype, "int64", "int64", value_dtype, value_dtype])
    idx, pos, depth = b.cast(b.input(0), "int64"), b.input(1), b.scalar_input(2)
    idx = b.where(b.lt(idx, b.const(0, "int64")), idx + depth, idx)
    hot = b.eq(idx, pos - 1)  # (not idx + 1: an index at int64's maximum would wrap)
    return b.build(b.where(hot, b.scalar_input(4), b.scalar_input(3)), broadcast=[0, 1])


@_binding("::OneHot", check=_one_hot_check, modules=("copy", "range"))
def _one_hot_bind(ins, outs, attrs, target):
    idx, values, y = ins[0], ins[2], outs[0]
    if values is None or values.size != 2:
        raise HipepError(f"OneHot: values must be [off_value, on_value] (shape [2]), got "
                         f"{None if values is None else list(values.shape)}")
    axis = normalize_axis("OneHot", int(attrs.get("axis", -1)), idx.ndim + 1)
    depth = int(y.shape[axis])
    if y.size == 0:
        return []
    outer, inner = _prod(idx.shape[:axis]), _prod(idx.shape[axis:])
    (at,) = workspace_regions(target, "OneHot", [_positions_bytes(depth)])
    ops, positions = _positions(at, depth, target)
    e = values.dtype.itemsize
    args = [Arg(idx.ptr, (outer, 1, inner), idx.dtype), Arg(positions.ptr, (depth, 1), _I64),
            Arg(positions.ptr + (depth - 1) * _I64.itemsize, (1,), _I64),
            Arg(values.ptr, (1,), values.dtype), Arg(values.ptr + e, (1,), values.dtype)]
    expr = one_hot_expression(idx.dtype.name, values.dtype.name)
    return ops + expression_ops(expr, args, [Arg(y.ptr, (outer, depth, inner), y.dtype)], target, "OneHot")


# ---- EyeLike -----------------------------------------------------------------------------------

_EYE_TYPES = ("float32", "float16", "float64", "int32", "int64")


def _eye_like_check(attrs, dtypes, shapes, values):
    from ..dtypes import numpy_dtype_for

    out = dtypes[0] if dtypes else "?"
    if attrs.get("dtype") is not None:
        try:
            out = numpy_dtype_for(int(attrs["dtype"])).name
        except KeyError:
            return f"dtype={attrs['dtype']}"
    if out not in _EYE_TYPES:
        return f"output element type {out}"
    return None


@_binding("::EyeLike", check=_eye_like_check, modules=("copy",))
def _eye_like_bind(ins, outs, attrs, target):
    y = outs[0]
    if y.ndim != 2:
        raise HipepError(f"EyeLike: input must be 2-D, got shape {list(ins[0].shape)}")
    if y.size == 0:
        return []
    (at,) = workspace_regions(target, "EyeLike", [y.dtype.itemsize])
    one = Arg(at, (1,), y.dtype)
    ops = fill_ops(one, np.ones(1, y.dtype).tobytes(), target)
    # the one where 0 <= j - i - k < 1 (row i, column j), zeros elsewhere
    k = int(attrs.get("k", 0))
    return ops + fill_copy(one, y, list(y.shape), [0, 0], 0, [([-1, 1], -k, 1)], target)


# ---- Hardmax -----------------------------------------------------------------------------------
# 1 at ArgMax's position (the CPU EP's first maximum, NaNs after the first element skipped) unless
# the element there is NaN: a NaN first element is the CPU EP's maximum, which nothing equals.

def _hardmax_lines(attrs, shape) -> tuple[int, int, int]:
    from .gpu_bindings_reduce import _softmax_axis

    axis = normalize_axis("Hardmax", _softmax_axis(attrs), len(shape))
    if int(attrs.get(SINCE_VERSION, 13)) < 13:  # opsets 1 and 11: rows of the input flattened at axis
        return _prod(shape[:axis]), _prod(shape[axis:]), 1
    return _prod(shape[:axis]), int(shape[axis]), _prod(shape[axis + 1:])


def hardmax_expression(dtype: str):
    b = _builder([dtype, "int64", "int64"])
    x, at, pos = b.input(0), b.input(1), b.input(2)
    hit = b.call("and", b.eq(at, pos - 1), b.call("not", b.isnan(x)))
    return b.build(b.where(hit, b.const(1, dtype), b.const(0, dtype)))


@_binding("::Hardmax", check=_float_check, modules=("argmax", "copy", "range"))
def _hardmax_bind(ins, outs, attrs, target):
    from .gpu_bindings_reduce import _arg_bind

    x, y = ins[0], outs[0]
    if x.ndim == 0:
        raise HipepError("Hardmax: input must have rank >= 1, got a scalar")
    if x.size == 0:
        return []
    outer, r, inner = _hardmax_lines(attrs, x.shape)
    arg_at, pos_at = workspace_regions(target, "Hardmax", [outer * inner * _I64.itemsize, _positions_bytes(r)])
    lines = Arg(x.ptr, (outer, r, inner), x.dtype)
    at = Arg(arg_at, (outer, 1, inner), _I64)
    ops = _arg_bind("ArgMax")([lines], [at], {"axis": 1, "keepdims": 1, "select_last_index": 0}, target)
    pos_ops, positions = _positions(pos_at, r, target)
    args = [lines, at, Arg(positions.ptr, (r, 1), _I64)]
    return ops + pos_ops + expression_ops(hardmax_expression(x.dtype.name), args,
                                          [Arg(y.ptr, (outer, r, inner), y.dtype)], target, "Hardmax")


# ---- LpNormalization ---------------------------------------------------------------------------

def _lp_norm_check(attrs, dtypes, shapes, values):
    if int(attrs.get("p", 2)) not in (1, 2):
        return f"p={attrs.get('p')} (1 and 2 have a kernel)"
    return _float_check(attrs, dtypes, shapes, values)


def lp_norm_expression(dtype: str):
    """x / norm in f32 (the norm in the input's type, as its reduction wrote it); 0 where the norm
    is 0, as the CPU reference gives 0 / 0."""
    b = _builder([dtype, dtype])
    x, norm = b.cast(b.input(0), "float32"), b.cast(b.input(1), "float32")
    nonzero = b.call("not", b.eq(norm, b.const(0, "float32")))
    y = b.where(nonzero, x / b.where(nonzero, norm, b.const(1, "float32")), b.const(0, "float32"))
    return b.build(b.cast(y, dtype))


@_binding("::LpNormalization", check=_lp_norm_check, modules=("reduce",))
def _lp_norm_bind(ins, outs, attrs, target):
    from .gpu_bindings_reduce import _reduce_bind

    x, y = ins[0], outs[0]
    if x.ndim == 0:
        raise HipepError("LpNormalization: input must have rank >= 1, got a scalar")
    p = int(attrs.get("p", 2))
    if p not in (1, 2):
        raise NoKernel(f"LpNormalization with p={p}")
    if x.size == 0:
        return []
    axis = normalize_axis("LpNormalization", int(attrs.get("axis", -1)), x.ndim)
    outer, r, inner = _prod(x.shape[:axis]), int(x.shape[axis]), _prod(x.shape[axis + 1:])
    (norm_at,) = workspace_regions(target, "LpNormalization", [outer * inner * x.dtype.itemsize])
    lines = Arg(x.ptr, (outer, r, inner), x.dtype)
    norm = Arg(norm_at, (outer, 1, inner), x.dtype)
    ops = _reduce_bind("ReduceL1" if p == 1 else "ReduceL2")([lines, None], [norm], {"axes": [1], "keepdims": 1},
                                                             target)
    return ops + expression_ops(lp_norm_expression(x.dtype.name), [lines, norm],
                                [Arg(y.ptr, lines.shape, y.dtype)], target, "LpNormalization")


# ---- MeanVarianceNormalization -----------------------------------------------------------------
# As the CPU reference (ONNX Runtime's kernel): y = x - E[x], then y / sqrt(E[y^2]), in f32.

def _mvn_check(attrs, dtypes, shapes, values):
    if not dtypes or dtypes[0] != "float32":
        return f"element type {dtypes[0] if dtypes else '?'}"
    axes = list(attrs.get("axes", [0, 2, 3]))
    if not axes:
        return "axes=[] (no reduction)"
    x = shapes[0] if shapes else None
    if x is not None and len(x) > _MAX_RANK:
        return f"a rank-{len(x)} input (at most {_MAX_RANK})"
    return None


def mvn_center_expression():
    b = _builder(["float32", "float32"])
    return b.build(b.input(0) - b.input(1))


def mvn_expression(count: int):
    b = _builder(["float32", "float32", "float32"])
    x, mean, sumsq = b.input(0), b.input(1), b.input(2)
    return b.build((x - mean) / b.sqrt(sumsq / b.const(np.float32(count), "float32")))


@_binding("::MeanVarianceNormalization", check=_mvn_check, modules=("copy", "reduce"))
def _mvn_bind(ins, outs, attrs, target):
    from .gpu_bindings_reduce import _reduce_bind, reduce_blocks

    x, y = ins[0], outs[0]
    if x.dtype.name != "float32":
        raise NoKernel(f"MeanVarianceNormalization on {x.dtype.name}")
    axes = sorted(normalize_axes("MeanVarianceNormalization", list(attrs.get("axes", [0, 2, 3])), x.ndim))
    if not axes:
        raise NoKernel("MeanVarianceNormalization with axes=[]")
    if x.size == 0:
        return []
    kept = [d for d in range(x.ndim) if d not in axes]
    count = _prod(x.shape[a] for a in axes)
    stats = _prod(x.shape[d] for d in kept)
    stat_shape = tuple(1 if d in axes else int(x.shape[d]) for d in range(x.ndim))
    adjacent = not isinstance(reduce_blocks(x.shape, axes, False), str)
    e = _F32.itemsize
    sizes = [x.size * e, stats * e, stats * e] + ([] if adjacent else [x.size * e])
    centered_at, mean_at, sumsq_at, *moved_at = workspace_regions(target, "MeanVarianceNormalization", sizes)
    ops: list = []
    if adjacent:
        src, src_stats, src_axes = x, stat_shape, axes
    else:  # kept axes first, the reduced ones last: one row per statistic
        src = Arg(moved_at[0], (stats, count), x.dtype)
        ops += permuted_copy(x, src, kept + axes, target)
        src_stats, src_axes = (stats, 1), [1]
    mean = Arg(mean_at, src_stats, _F32)
    sumsq = Arg(sumsq_at, src_stats, _F32)
    centered = Arg(centered_at, src.shape, _F32)
    reduce_attrs = {"axes": src_axes, "keepdims": 1}
    ops += _reduce_bind("ReduceMean")([src, None], [mean], reduce_attrs, target)
    ops += expression_ops(mvn_center_expression(), [src, mean], [centered], target, "MeanVarianceNormalization")
    ops += _reduce_bind("ReduceSumSquare")([centered, None], [sumsq], reduce_attrs, target)
    args = [x, Arg(mean_at, stat_shape, _F32), Arg(sumsq_at, stat_shape, _F32)]
    return ops + expression_ops(mvn_expression(count), args, [y], target, "MeanVarianceNormalization")


# ---- LRN ---------------------------------------------------------------------------------------
# The square sums over each channel's window [c - (size - 1) / 2, c + size / 2] in f32 (f16 input
# widened first, so its squares cannot overflow): the windows copied as rows [N, C, H*W, size],
# zeros past the channels, reduced by ReduceSumSquare.

def _lrn_check(attrs, dtypes, shapes, values):
    size = int(attrs.get("size", 0))
    if size <= 0:
        return f"size={size}"
    x = shapes[0] if shapes else None
    if x is not None and len(x) != 4:
        return f"a rank-{len(x)} input (LRN takes N, C, H, W)"
    return _float_check(attrs, dtypes, shapes, values)


def lrn_expression(dtype: str, alpha: float, beta: float, bias: float, size: int):
    b = _builder(["float32", "float32"])
    x, sums = b.input(0), b.input(1)
    coef = np.float32(np.float32(alpha) / np.float32(size))
    scale = b.const(np.float32(bias), "float32") + b.const(coef, "float32") * sums
    return b.build(b.cast(x * b.pow(scale, b.const(-np.float32(beta), "float32")), dtype))


def _to_f32_expression(dtype: str):
    b = _builder([dtype])
    return b.build(b.cast(b.input(0), "float32"))


@_binding("::LRN", check=_lrn_check, modules=("copy", "reduce"))
def _lrn_bind(ins, outs, attrs, target):
    from .gpu_bindings_reduce import _reduce_bind

    x, y = ins[0], outs[0]
    if x.ndim != 4:
        raise HipepError(f"LRN: X must be 4-D (N, C, H, W), got shape {list(x.shape)}")
    if x.size == 0:
        return []
    size = int(attrs["size"])
    n, c = int(x.shape[0]), int(x.shape[1])
    hw = _prod(x.shape[2:])
    pre = (size - 1) // 2
    e = _F32.itemsize
    wide = x.dtype != _F32
    sizes = [x.size * size * e, x.size * e] + ([x.size * e] if wide else [])
    windows_at, sums_at, *wide_at = workspace_regions(target, "LRN", sizes)
    ops: list = []
    src = x
    if wide:
        src = Arg(wide_at[0], x.shape, _F32)
        ops += expression_ops(_to_f32_expression(x.dtype.name), [x], [src], target, "LRN")
    windows = Arg(windows_at, (x.size, size), _F32)
    # window tap t of channel ch reads channel ch + t - pre, where 0 <= ch + t - pre < C
    ops += fill_copy(src, windows, [n, c, hw, size], [c * hw, hw, 1, hw], -pre * hw, [([0, 1, 0, 1], -pre, c)],
                     target)
    sums = Arg(sums_at, x.shape, _F32)
    ops += _reduce_bind("ReduceSumSquare")([windows, None], [Arg(sums_at, (x.size,), _F32)],
                                           {"axes": [1], "keepdims": 0}, target)
    expr = lrn_expression(x.dtype.name, float(attrs.get("alpha", 1e-4)), float(attrs.get("beta", 0.75)),
                          float(attrs.get("bias", 1.0)), size)
    return ops + expression_ops(expr, [src, sums], [y], target, "LRN")
