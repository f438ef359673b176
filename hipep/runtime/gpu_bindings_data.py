"""GPU bindings that move data: Gather, Transpose, Slice, Expand, Tile, DepthToSpace, SpaceToDepth,
Pad (every mode), Trilu (k a constant or read by the kernel from device memory), ConstantOfShape,
Dropout (inference), Split, Concat, the byte copy of view ops that got storage of their own
(`COPY`), and Range (registered in hipep.runtime.gpu_kernels' table on import)."""
from __future__ import annotations

import ctypes

import ml_dtypes  # noqa: F401  (registers numpy's 'bfloat16' dtype name)
import numpy as np

from ..errors import HipepError
from ..ops.registry import lookup
from .gpu_faults import fault_param
from .gpu_binding_core import (COPY_MAX_CHECKS, COPY_MAX_RANK, Binding, CONCAT_MAX, CopyOp, KernelOp, NoKernel,
                               _binding, _cdiv, _prod, _values_or_attr, _word, contiguous_strides, fill_copy,
                               fill_ops, flat_config, permuted_copy, ptr, strided_copy)


# Gather ---------------------------------------------------------------------------------------

class GatherArgs(ctypes.Structure):
    _fields_ = [("rows", ctypes.c_longlong), ("inner", ctypes.c_longlong), ("n_idx", ctypes.c_longlong),
                ("n_axis", ctypes.c_longlong)]


def _gather_check(attrs, dtypes, shapes, values):
    if len(dtypes) > 1 and dtypes[1] not in ("int32", "int64"):
        return f"indices of type {dtypes[1]}"
    return None


@_binding("::Gather", check=_gather_check, modules=("gather",))
def _gather_bind(ins, outs, attrs, target):
    data, idx, out = ins[0], ins[1], outs[0]
    if data.ndim == 0:
        raise HipepError("Gather: data must have rank >= 1")
    axis = int(attrs.get("axis", 0))
    axis = axis + data.ndim if axis < 0 else axis
    outer, n_axis = _prod(data.shape[:axis]), int(data.shape[axis])
    inner = _prod(data.shape[axis + 1:])
    n_idx = idx.size
    if out.size == 0:
        return []
    e = data.dtype.itemsize
    word = _word(e, [data.ptr, out.ptr], [inner * e])
    words = inner * e // word
    rows = outer * n_idx
    bx = min(256, _cdiv(max(words, 1), 32) * 32)
    by = max(1, 256 // bx)
    grid = (max(1, min(_cdiv(words, bx), 65535)), max(1, min(_cdiv(rows, by), 65535)), 1)
    it = {"int32": "i32", "int64": "i64"}.get(idx.dtype.name)
    if it is None:
        raise NoKernel(f"Gather with {idx.dtype.name} indices")
    # An index out of range: zeros in the output, and the stream's fault record names it.
    fault = fault_param(target, f"input 1 (indices) into data axis {axis}")
    return [KernelOp(f"hipep_gather_w{word}_{it}", grid, (bx, by, 1),
                     [ptr(data), ptr(idx), ptr(out), GatherArgs(rows, words, n_idx, n_axis), fault], module="gather")]


# Transpose, Slice, Expand, Split, Concat --------------------------------------------------------

@_binding("::Transpose", modules=("copy",))
def _transpose_bind(ins, outs, attrs, target):
    x, y = ins[0], outs[0]
    perm = attrs.get("perm")
    perm = list(range(x.ndim))[::-1] if perm is None else [int(p) for p in perm]
    return permuted_copy(x, y, perm, target)


def _slice_params(ins, attrs):
    from ..ops.shape import _slice_for  # the reference's own bound rules

    x = ins[0]
    if len(ins) > 2 and ins[1] is not None:
        starts = _values_or_attr(ins, 1, attrs, "starts")
        ends = _values_or_attr(ins, 2, attrs, "ends")
        axes = _values_or_attr(ins, 3, attrs, "axes") if len(ins) > 3 else None
        steps = _values_or_attr(ins, 4, attrs, "steps") if len(ins) > 4 else None
    else:
        starts, ends, axes, steps = attrs.get("starts"), attrs.get("ends"), attrs.get("axes"), None
    if axes is None:
        axes = list(range(len(starts)))
    if steps is None:
        steps = [1] * len(starts)
    begin = [0] * x.ndim
    step = [1] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        a = int(a) + x.ndim if int(a) < 0 else int(a)
        lo, _, by = _slice_for(int(s), int(e), int(st), int(x.shape[a])).indices(int(x.shape[a]))
        begin[a], step[a] = lo, by
    return begin, step


@_binding("::Slice", reads_values=True, modules=("copy",))
def _slice_bind(ins, outs, attrs, target):
    x, y = ins[0], outs[0]
    begin, step = _slice_params(ins, attrs)
    st = contiguous_strides(x.shape)
    if y.size == 0:
        return []
    offset = sum(b * s for b, s in zip(begin, st))
    return strided_copy(x, y, y.shape, [s * k for s, k in zip(st, step)], offset, target)


@_binding("::Expand", modules=("copy",))
def _expand_bind(ins, outs, attrs, target):
    x, y = ins[0], outs[0]
    st = contiguous_strides(x.shape)
    pad = y.ndim - x.ndim
    strides = [0] * pad + [0 if int(d) == 1 else s for d, s in zip(x.shape, st)]
    return strided_copy(x, y, y.shape, strides, 0, target)


def _tile_check(attrs, dtypes, shapes, values):
    x = shapes[0] if shapes else None
    if x is not None and 2 * len(x) > COPY_MAX_RANK:
        return f"Tile of a rank-{len(x)} input (the strided copy takes at most {COPY_MAX_RANK // 2} axes)"
    return None


@_binding("::Tile", check=_tile_check, reads_values=True, modules=("copy",))
def _tile_bind(ins, outs, attrs, target):
    """Output axis d of extent repeats[d] * x_d is read as the pair (repeat, k) with strides
    (0, x's stride): one strided copy."""
    from ..ops.dims import _tile_repeats

    x, y = ins[0], outs[0]
    reps = _tile_repeats(_values_or_attr(ins, 1, attrs, "repeats") or [], x.ndim, list(x.shape))
    st = contiguous_strides(x.shape)
    dims, strides = [], []
    for r, d, s in zip(reps, x.shape, st):
        dims += [r, int(d)]
        strides += [0, s]
    return strided_copy(x, y, dims, strides, 0, target)


def _rearrange(x, y, view_shape, perm, target):
    """y = x viewed as `view_shape`, its axes permuted by `perm` (DepthToSpace, SpaceToDepth)."""
    return permuted_copy(x, y, perm, target, view_shape)


@_binding("::DepthToSpace", modules=("copy",))
def _depth_to_space_bind(ins, outs, attrs, target):
    x, y = ins[0], outs[0]
    b = int(attrs["blocksize"])
    if x.ndim != 4 or b < 1 or int(x.shape[1]) % (b * b):
        raise HipepError(f"DepthToSpace: blocksize {b} for an input of shape {list(x.shape)}")
    n, c, h, w = (int(d) for d in x.shape)
    if attrs.get("mode", "DCR") == "CRD":
        return _rearrange(x, y, (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3), target)
    return _rearrange(x, y, (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2), target)


@_binding("::SpaceToDepth", modules=("copy",))
def _space_to_depth_bind(ins, outs, attrs, target):
    x, y = ins[0], outs[0]
    b = int(attrs["blocksize"])
    if x.ndim != 4 or b < 1 or int(x.shape[2]) % b or int(x.shape[3]) % b:
        raise HipepError(f"SpaceToDepth: blocksize {b} for an input of shape {list(x.shape)}")
    n, c, h, w = (int(d) for d in x.shape)
    if attrs.get("mode", "DCR") == "CRD":
        return _rearrange(x, y, (n, c, h // b, b, w // b, b), (0, 1, 3, 5, 2, 4), target)
    return _rearrange(x, y, (n, c, h // b, b, w // b, b), (0, 3, 5, 1, 2, 4), target)


_PAD_MODES = {"edge": 0, "reflect": 1, "wrap": 2}  # kernels/copy.hip's HIPEP_PAD_EDGE, _REFLECT, _WRAP


class PadArgs(ctypes.Structure):
    _fields_ = [("n", ctypes.c_longlong), ("dims", ctypes.c_longlong * COPY_MAX_RANK),
                ("strides", ctypes.c_longlong * COPY_MAX_RANK), ("begin", ctypes.c_longlong * COPY_MAX_RANK),
                ("first", ctypes.c_longlong * COPY_MAX_RANK), ("kept", ctypes.c_longlong * COPY_MAX_RANK),
                ("rank", ctypes.c_int), ("mode", ctypes.c_int)]


def _pad_check(attrs, dtypes, shapes, values):
    mode = attrs.get("mode", "constant")
    if mode != "constant" and mode not in _PAD_MODES:
        return f"mode='{mode}'"
    x = shapes[0] if shapes else None
    if x is not None and len(x) > COPY_MAX_CHECKS:
        return f"Pad of a rank-{len(x)} input (at most {COPY_MAX_CHECKS} axes)"
    return None


@_binding("::Pad", check=_pad_check, reads_values=True, modules=("copy",))
def _pad_bind(ins, outs, attrs, target):
    """Output coordinate c reads input coordinate c - pad_begin along each axis (a negative pad
    crops); in constant mode axes that grow are checked, and what falls outside is constant_value;
    the other modes map it back into the kept input (`_mode_pad_ops`)."""
    from ..ops.dims import _pad_check as pad_extents, _pad_widths

    x, y = ins[0], outs[0]
    mode = attrs.get("mode", "constant")
    if mode != "constant" and mode not in _PAD_MODES:
        raise NoKernel(f"Pad mode '{mode}'")
    if len(ins) > 1 and ins[1] is not None:  # opset 11+: pads, constant_value, axes as inputs
        pads = _values_or_attr(ins, 1, attrs, "pads")
        axes = _values_or_attr(ins, 3, attrs, "axes") if len(ins) > 3 and ins[3] is not None else None
        value = ins[2] if len(ins) > 2 else None  # read by the kernel from device memory
        fill_src, fill = (value if value is not None and value.size else None), b""
    else:
        pads, axes, fill_src = [int(p) for p in attrs.get("pads") or []], None, None
        fill = np.asarray(float(attrs.get("value") or 0.0)).astype(x.dtype).tobytes()
    widths = _pad_widths("Pad", x.shape, pads, axes)
    pad_extents("Pad", [int(d) for d in x.shape], widths, mode)  # raises where ONNX Runtime does
    if y is None or y.size == 0:
        return []
    if mode != "constant":
        return _mode_pad_ops(x, y, widths, _PAD_MODES[mode], target)
    st = contiguous_strides(x.shape)
    offset = -sum(pb * s for (pb, _), s in zip(widths, st))
    checks = []
    for d, ((pb, pe), extent) in enumerate(zip(widths, x.shape)):
        if pb > 0 or pe > 0:
            checks.append(([1 if j == d else 0 for j in range(x.ndim)], -pb, int(extent)))
    return fill_copy(x, y, y.shape, st, offset, checks, target, fill=fill, fill_src=fill_src)


def _mode_pad_ops(x, y, widths, mode: int, target) -> list:
    """Pad's edge, reflect and wrap modes: kernels/copy.hip's pad, one output word a thread. Axes
    that neither grow nor shrink read straight through: adjacent ones merge, those of extent 1
    drop, and a run of them at the end moves as wider words (ONNX Runtime's kernel copies that run
    whole as well)."""
    e = x.dtype.itemsize
    if e not in (1, 2, 4, 8):
        raise NoKernel(f"Pad of {e}-byte elements")
    # per axis: [output extent, source stride, begin, first, kept, whether the pads change it]
    axes: list[list] = []
    for (pb, pe), extent, stride, out in zip(widths, x.shape, contiguous_strides(x.shape), y.shape):
        extent = int(extent)
        if pb == 0 and pe == 0:
            if extent == 1:
                continue
            if axes and not axes[-1][5]:
                merged = axes[-1][0] * extent
                axes[-1] = [merged, stride, 0, 0, merged, False]
            else:
                axes.append([extent, stride, 0, 0, extent, False])
            continue
        first = max(-pb, 0)
        kept = extent - first - max(-pe, 0)
        if kept < 1:
            raise HipepError(f"Pad: pads {(pb, pe)} leave none of an axis of extent {extent} to pad from")
        axes.append([int(out), stride, max(pb, 0), first, kept, True])
    if not any(a[5] for a in axes):
        return [] if y.ptr == x.ptr else [CopyOp(y.ptr, x.ptr, y.nbytes)]
    word = e
    if not axes[-1][5]:
        word = _word(e, [x.ptr, y.ptr], [axes[-1][0] * e])
        ratio = word // e
        axes[-1][0] //= ratio
        axes[-1][4] //= ratio
        for a in axes[:-1]:
            a[1] //= ratio
    args = PadArgs()
    args.n, args.rank, args.mode = y.size * e // word, len(axes), mode
    for d, (extent, stride, begin, first, kept, _) in enumerate(axes):
        args.dims[d], args.strides[d], args.begin[d], args.first[d], args.kept[d] = extent, stride, begin, first, kept
    grid, block = flat_config(args.n, target)
    return [KernelOp(f"hipep_pad_w{word}", grid, block, [ptr(x), ptr(y), args], module="copy")]


class TriluArgs(ctypes.Structure):
    _fields_ = [("n", ctypes.c_longlong), ("rows", ctypes.c_longlong), ("cols", ctypes.c_longlong),
                ("upper", ctypes.c_int)]


@_binding("::Trilu", modules=("copy",))
def _trilu_bind(ins, outs, attrs, target):
    """A copy of x whose elements off the kept triangle are zeros (kernels/copy.hip's trilu): with
    row i and column j of the last two axes, lower keeps j - i <= k, upper keeps j - i >= k. The
    kernel reads k from device memory, so a k computed on the device or handed in at run time
    needs neither a host read nor a new binding each run."""
    x, y = ins[0], outs[0]
    k = ins[1] if len(ins) > 1 else None
    if x.ndim < 2:
        raise HipepError(f"Trilu: input must have rank >= 2, got shape {list(x.shape)}")
    if k is not None and k.size != 1:
        raise HipepError(f"Trilu: k must hold one value, got {k.size}")
    if k is not None and k.dtype != np.int64:
        raise NoKernel(f"Trilu with a k of type {k.dtype.name}")
    if y is None or y.size == 0:
        return []
    e = x.dtype.itemsize
    if e not in (1, 2, 4, 8):
        raise NoKernel(f"Trilu of {e}-byte elements")
    args = TriluArgs(y.size, int(x.shape[-2]), int(x.shape[-1]), int(bool(int(attrs.get("upper", 1)))))
    grid, block = flat_config(y.size, target)
    return [KernelOp(f"hipep_trilu_w{e}", grid, block, [ptr(x), ptr(k), ptr(y), args], module="copy")]


@_binding("::ConstantOfShape", reads_values=True, modules=("copy",))
def _constant_of_shape_bind(ins, outs, attrs, target):
    """A fill of the output with the value attribute."""
    from ..ops.reduce import _cos_value

    y = outs[0]
    if y is None:
        return []
    return fill_ops(y, _cos_value(attrs).astype(y.dtype).tobytes(), target)


@_binding("::Dropout", modules=("copy",))
def _dropout_bind(ins, outs, attrs, target):
    """Inference (the claim refuses training): y is x; the mask, where asked for, is the reference's
    one value (`dropout_mask_value`)."""
    from ..ops.dims import dropout_mask_value
    from ..ops.registry import SINCE_VERSION

    x, y = ins[0], outs[0]
    ops = []
    if y is not None and y.size and y.ptr != x.ptr:
        ops.append(CopyOp(y.ptr, x.ptr, y.size * y.dtype.itemsize))
    mask = outs[1] if len(outs) > 1 else None
    if mask is not None:
        value = dropout_mask_value(int(attrs.get(SINCE_VERSION, 12)), x.dtype)
        ops += fill_ops(mask, value.astype(mask.dtype).tobytes(), target)
    return ops


@_binding("::Split", reads_values=True, modules=("copy",))
def _split_bind(ins, outs, attrs, target):
    from ..graph import TensorType, elem_type_of

    op = lookup("", "Split")
    n_out = len(outs)
    x = ins[0]
    types = [None if a is None else TensorType(elem_type_of(a.dtype), tuple(a.shape)) for a in ins]
    values = [None if a is None else a.value for a in ins]
    shapes = [t.shape for t in op.shape_rule(types, values, attrs, n_out)]
    axis = int(attrs.get("axis", 0))
    axis = axis + x.ndim if axis < 0 else axis
    st = contiguous_strides(x.shape)
    ops, start = [], 0
    for out, shape in zip(outs, shapes):
        if out is not None:
            ops += strided_copy(x, out, out.shape, st, start * st[axis], target)
        start += int(shape[axis])
    return ops


class ConcatArgs(ctypes.Structure):
    _fields_ = [("src", ctypes.c_uint64 * CONCAT_MAX), ("len", ctypes.c_longlong * CONCAT_MAX),
                ("offset", ctypes.c_longlong * CONCAT_MAX), ("outer", ctypes.c_longlong),
                ("total", ctypes.c_longlong)]


@_binding("::Concat", modules=("copy",))
def _concat_bind(ins, outs, attrs, target):
    y = outs[0]
    ins = [a for a in ins if a is not None]
    axis = int(attrs["axis"])
    axis = axis + y.ndim if axis < 0 else axis
    if y.size == 0:
        return []
    e = y.dtype.itemsize
    outer = _prod(y.shape[:axis])
    inner = _prod(y.shape[axis + 1:])
    parts, offset = [], 0
    for a in ins:
        length = int(a.shape[axis]) * inner
        if length:
            parts.append((a, offset, length))
        offset += length
    total = offset
    word = _word(e, [y.ptr] + [a.ptr for a, _, _ in parts], [total * e] + [n * e for _, o, n in parts] +
                 [o * e for _, o, _ in parts])
    r = word // e
    ops = []
    for i in range(0, len(parts), CONCAT_MAX):
        chunk = parts[i:i + CONCAT_MAX]
        c = ConcatArgs()
        for k, (a, o, n) in enumerate(chunk):
            c.src[k], c.len[k], c.offset[k] = a.ptr, n // r, o // r
        c.outer, c.total = outer, total // r
        longest = max(n // r for _, _, n in chunk) * outer
        grid, block = flat_config(longest, target, per_sm=8)
        ops.append(KernelOp(f"hipep_concat_w{word}", (grid[0], len(chunk), 1), block, [ptr(y), c], module="copy"))
    return ops


# Views that got storage of their own: a copy --------------------------------------------------

def _copy_bind(ins, outs, attrs, target):
    x, y = ins[0], outs[0]
    if y is None or x is None or y.ptr == x.ptr or y.nbytes == 0:
        return []
    if x.nbytes != y.nbytes:
        raise HipepError(f"copies {x.nbytes} bytes into {y.nbytes}")
    return [CopyOp(y.ptr, x.ptr, y.nbytes)]


COPY = Binding("copy", _copy_bind)
# BitCast: the same bytes under another element type of the same width, into storage of its own
_binding("::BitCast")(_copy_bind)


# Range ------------------------------------------------------------------------------------------

_RANGE_TYPES = {"int16": "i16", "int32": "i32", "int64": "i64", "float32": "f32", "float16": "f16"}


def _range_check(attrs, dtypes, shapes, values):
    if dtypes and dtypes[0] and dtypes[0] not in _RANGE_TYPES:
        return f"element type {dtypes[0]}"
    # Bounds handed in at run time are read by the shape program before the launches (integers as
    # symbols, floats pinned); bounds computed on the device from data are the partitioner's to
    # refuse (hipep.partition._shapes_from_device_values).
    return None


@_binding("::Range", check=_range_check, modules=("range",))
def _range_bind(ins, outs, attrs, target):
    # The output's length is the shape program's (start, limit and delta are host values where
    # Range is planned); the kernel reads start and delta from memory.
    start, delta, out = ins[0], ins[2], outs[0]
    t = _RANGE_TYPES.get(out.dtype.name)
    if t is None:
        raise NoKernel(f"Range of element type {out.dtype.name}")
    n = out.size
    if n == 0:
        return []
    if t in ("f32", "f16"):  # one thread: each step rounds, as ORT's running sum does (kernels/range.hip)
        grid, block = (1, 1, 1), (1, 1, 1)
    else:
        grid, block = flat_config(n, target)
    return [KernelOp(f"hipep_range_{t}", grid, block, [ptr(start), ptr(delta), ptr(out), ctypes.c_longlong(n)],
                     module="range")]
