"""GPU bindings: Resize (opsets 10-19) and Upsample (7, 9), kernels/resize.hip.

Registered into the kernel table (hipep.runtime.gpu_kernels) when it is imported.

The host reads scales, sizes and roi at launch (`reads_values`: constants, or run-time values the
plan copies into host-visible memory and the shape program pins) and plans the output with the CPU
reference's own functions (hipep.ops.resize: output extents, the f32 scale per axis, the roi,
keep_aspect_ratio_policy, axes), so both devices agree on every extent. Per axis it passes the
scale and roi and whether the axis is resized at all (the reference leaves an axis of scale 1 and
unchanged extent as it is); the kernel maps each output coordinate with ORT's f32 expressions,
operation for operation, so nearest indices and interpolation weights are bit-identical to the
reference's (kernels/resize.hip explains the evaluation order of the interpolating kernels).

Claimed: nearest (every nearest_mode; any element type of 1, 2 or 4 bytes: f32, f16, int8, uint8,
int32), linear and cubic (f32, f16; math in f32; cubic_coeff_a, exclude_outside), every
coordinate_transformation_mode the reference implements, tf_crop_and_resize's
extrapolation_value, up to rank 8. antialias=1 (linear and cubic, f32 and f16, the forms ONNX
Runtime runs) is one launch per resized axis, innermost first, each thread recomputing its window's
weights as the reference does (kernels/resize.hip), the passes between in f32 in the stream's
workspace; it refuses tf_crop_and_resize, as the reference's claim does.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..errors import HipepError, RuntimeShapeError
from ..ops.resize import LEGACY, _resize_operands, _resize_plan, antialias_axes
from .gpu_binding_core import (Arg, KernelOp, NoKernel, _binding, contiguous_strides, fill_ops, flat_config, ptr,
                               workspace_regions)

MAX_RANK = 8  # HIPEP_RESIZE_MAX_RANK
_COORD = {"half_pixel": 0, "half_pixel_symmetric": 1, "pytorch_half_pixel": 2, "align_corners": 3, "asymmetric": 4,
          "tf_half_pixel_for_nn": 5, "tf_crop_and_resize": 6, LEGACY: 4}
_NEAREST = {"round_prefer_floor": 0, "round_prefer_ceil": 1, "floor": 2, "ceil": 3, LEGACY: 4}
_TAPS = {"linear": 2, "cubic": 4}
_NEAREST_TYPES = ("float32", "float16", "int8", "uint8", "int32")
_INTERP_TYPES = {"float32": "f32", "float16": "f16"}


class ResizeAntialiasArgs(ctypes.Structure):
    """kernels/resize.hip's hipep_resize_aa_args."""
    _fields_ = [("n", ctypes.c_longlong), ("in_len", ctypes.c_longlong), ("out_len", ctypes.c_longlong),
                ("inner", ctypes.c_longlong), ("scale", ctypes.c_float), ("roi_start", ctypes.c_float),
                ("roi_end", ctypes.c_float), ("cubic_a", ctypes.c_float), ("coord", ctypes.c_int),
                ("cubic", ctypes.c_int), ("exclude_outside", ctypes.c_int)]


class ResizeArgs(ctypes.Structure):
    _fields_ = [("n", ctypes.c_longlong), ("in_dims", ctypes.c_longlong * MAX_RANK),
                ("out_dims", ctypes.c_longlong * MAX_RANK), ("in_strides", ctypes.c_longlong * MAX_RANK),
                ("scale", ctypes.c_float * MAX_RANK), ("roi_start", ctypes.c_float * MAX_RANK),
                ("roi_end", ctypes.c_float * MAX_RANK), ("resized", ctypes.c_int * MAX_RANK),
                ("fill", ctypes.c_uint64), ("fill_value", ctypes.c_float), ("cubic_a", ctypes.c_float),
                ("rank", ctypes.c_int), ("coord", ctypes.c_int), ("nearest", ctypes.c_int), ("taps", ctypes.c_int),
                ("extrapolate", ctypes.c_int), ("exclude_outside", ctypes.c_int)]


def _check(attrs, dtypes, shapes, values, upsample: bool):
    x = dtypes[0] if dtypes else ""
    mode = attrs.get("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic") or (upsample and mode == "cubic"):
        return f"mode='{mode}'"
    if x and x not in _NEAREST_TYPES:
        return f"element type {x} ({', '.join(_NEAREST_TYPES)} have a kernel)"
    if x and mode != "nearest" and x not in _INTERP_TYPES:
        return f"mode='{mode}' on {x} (interpolation has a kernel for f32 and f16; other types: nearest)"
    if not upsample:
        coord = attrs.get("coordinate_transformation_mode", "half_pixel")
        if coord not in _COORD or coord == LEGACY:
            return f"coordinate_transformation_mode='{coord}'"
        if mode == "nearest" and attrs.get("nearest_mode", "round_prefer_floor") not in _NEAREST:
            return f"nearest_mode='{attrs.get('nearest_mode')}'"
    shape = shapes[0] if shapes else None
    if shape is not None and len(shape) > MAX_RANK:
        return f"an input of rank {len(shape)} (at most {MAX_RANK})"
    # Run-time roi, scales and sizes are host inputs (registry host_inputs): the plan copies them
    # into host-visible memory, where the binding reads them at launch; the shape program reads
    # them before the launches (sizes as symbols, roi and scales pinned). Where they are computed
    # on the device from data, the partitioner refuses the node (hipep.partition).
    return None


def _host_value(a, what: str, op_type: str):
    if a is None:
        return None
    if a.value is None:
        raise HipepError(f"{op_type}: input '{what}' must be readable by the host at launch")
    return np.asarray(a.value)


def _resize_ops(op_type: str, ins, outs, attrs, target) -> list:
    x, y = ins[0], outs[0]
    if y is None:
        return []
    upsample = op_type == "Upsample"
    if upsample:
        attrs = {**attrs, "_upsample": True}
    names = ("X", "roi", "scales", "sizes") if len(ins) > 2 else ("X", "scales")
    values = [None] + [_host_value(a, names[k + 1] if k + 1 < len(names) else "?", op_type)
                       for k, a in enumerate(ins[1:])]
    roi, scales, sizes, legacy = _resize_operands(values, attrs)
    if legacy and scales is None:
        raise HipepError(f"{op_type}: 'scales' is required")
    in_shape = tuple(int(d) for d in x.shape)
    out, scale, rois = _resize_plan(op_type, in_shape, roi, scales, sizes, attrs, legacy)
    if tuple(out) != tuple(int(d) for d in y.shape):
        raise HipepError(f"{op_type}: the output has shape {list(y.shape)}, the scales/sizes give {list(out)}")
    if y.dtype != x.dtype:
        raise HipepError(f"{op_type}: the output is {y.dtype.name}, X is {x.dtype.name}")
    n = int(np.prod(out, dtype=np.int64))
    if n == 0:
        return []
    if x.size == 0:
        return fill_ops(y, b"", target)
    rank = len(in_shape)
    if rank > MAX_RANK:
        raise NoKernel(f"{op_type} of rank {rank} (at most {MAX_RANK})")
    mode = attrs.get("mode", "nearest")
    coord = LEGACY if legacy else attrs.get("coordinate_transformation_mode", "half_pixel")
    if coord not in _COORD:
        raise NoKernel(f"{op_type}: coordinate_transformation_mode='{coord}'")
    extrapolate = coord == "tf_crop_and_resize"
    ev = float(attrs.get("extrapolation_value", 0.0))
    args = ResizeArgs()
    args.n, args.rank, args.coord, args.extrapolate = n, rank, _COORD[coord], int(extrapolate)
    for d, (extent, stride) in enumerate(zip(in_shape, contiguous_strides(in_shape))):
        args.in_dims[d], args.out_dims[d], args.in_strides[d] = extent, out[d], stride
        args.scale[d], args.roi_start[d], args.roi_end[d] = float(scale[d]), float(rois[d][0]), float(rois[d][1])
        # The axes the reference leaves as they are (hipep.ops.resize._resize_compute).
        identity = scale[d] == 1 and out[d] == extent
        if mode != "nearest" and extrapolate:
            identity = identity and rois[d][0] == 0 and rois[d][1] == 1
        args.resized[d] = int(not identity)
    grid, block = flat_config(n, target)
    if mode == "nearest":
        e = x.dtype.itemsize
        if e not in (1, 2, 4):
            raise NoKernel(f"{op_type} of {x.dtype.name} elements")
        nmode = LEGACY if legacy else attrs.get("nearest_mode", "round_prefer_floor")
        if nmode not in _NEAREST:
            raise NoKernel(f"{op_type}: nearest_mode='{nmode}'")
        args.nearest = _NEAREST[nmode]
        # The reference casts the f64 attribute to the element type directly.
        fill = np.asarray(ev).astype(x.dtype)
        args.fill = int(fill.reshape(1).view(f"u{e}")[0])
        entry = f"hipep_resize_nearest_w{e}"
    else:
        if mode not in _TAPS or x.dtype.name not in _INTERP_TYPES:
            raise NoKernel(f"{op_type}: mode='{mode}' on {x.dtype.name}")
        if int(attrs.get("antialias") or 0) and not legacy:
            passes = _antialias_ops(x, y, in_shape, out, scale, rois, mode, coord, attrs, target)
            if passes is not None:
                return passes
        args.taps = _TAPS[mode]
        args.cubic_a = float(np.float32(attrs.get("cubic_coeff_a", -0.75)))
        args.exclude_outside = int(attrs.get("exclude_outside", 0) or 0)
        args.fill_value = float(np.float32(ev))
        entry = f"hipep_resize_interp_{_INTERP_TYPES[x.dtype.name]}"
    return [KernelOp(entry, grid, block, [ptr(x), ptr(y), args], module="resize")]


@_binding("::Resize", check=lambda a, d, s, v: _check(a, d, s, v, False), modules=("resize",), reads_values=True)
def _resize_bind(ins, outs, attrs, target):
    return _resize_ops("Resize", ins, outs, attrs, target)


@_binding("::Upsample", check=lambda a, d, s, v: _check(a, d, s, v, True), modules=("resize",), reads_values=True)
def _upsample_bind(ins, outs, attrs, target):
    return _resize_ops("Upsample", ins, outs, attrs, target)


def _antialias_ops(x, y, in_shape, out, scale, rois, mode, coord, attrs, target) -> list | None:
    """An antialiased Resize's launches, one per axis whose extent changes (None where none does:
    the interpolating kernel then copies), innermost first, through f32 regions of the workspace."""
    if coord == "tf_crop_and_resize":
        raise NoKernel("Resize: antialias=1 with tf_crop_and_resize")
    try:
        axes = [a for a in antialias_axes(in_shape, scale, mode) if out[a] != in_shape[a]]
    except RuntimeShapeError as e:
        raise HipepError(str(e)) from None
    if not axes:
        return None
    shapes, shape = [], list(in_shape)
    for a in axes:
        shape[a] = out[a]
        shapes.append(tuple(shape))
    f32 = np.dtype(np.float32)
    # The passes before the last write f32 to two regions in turn
    between = [int(np.prod(s, dtype=np.int64)) * f32.itemsize for s in shapes[:-1]]
    regions = workspace_regions(target, "Resize (antialias)", [max(between[0::2]), max(between[1::2], default=0)]) \
        if between else []
    ops, src, src_shape = [], x, in_shape
    for k, a in enumerate(axes):
        last = k == len(axes) - 1
        dst = y if last else Arg(regions[k % 2], shapes[k], f32)
        n = int(np.prod(shapes[k], dtype=np.int64))
        args = ResizeAntialiasArgs(n, src_shape[a], out[a], int(np.prod(src_shape[a + 1:], dtype=np.int64)),
                                   float(scale[a]), float(rois[a][0]), float(rois[a][1]),
                                   float(np.float32(attrs.get("cubic_coeff_a", -0.75))), _COORD[coord],
                                   int(mode == "cubic"), int(attrs.get("exclude_outside", 0) or 0))
        grid, block = flat_config(n, target)
        entry = f"hipep_resize_antialias_{_INTERP_TYPES[src.dtype.name]}_{_INTERP_TYPES[dst.dtype.name]}"
        ops.append(KernelOp(entry, grid, block, [ptr(src), ptr(dst), args], module="resize"))
        src, src_shape = dst, shapes[k]
    return ops
