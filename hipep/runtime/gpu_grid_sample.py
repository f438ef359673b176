"""GPU bindings: GridSample (opsets 16, 20, 22) and AffineGrid (20), kernels/grid_sample.hip.

Registered into the kernel table (hipep.runtime.gpu_kernels) when it is imported.

One launch, one thread per output element (a grid-stride loop over N * C * output positions).
The host checks the shapes with the CPU reference's own rule (hipep.ops.grid_sample: grid must
be [N, *output extents, r] for X [N, C, *r input extents]) and passes the extents, the mode,
the padding mode, align_corners and whether ORT's 2-D bilinear zeros-padding path applies
(weights multiplied first); the kernel repeats the reference's f32 operations one for one, so
the results are bit-identical to the CPU device's (and to ONNX Runtime's CPU EP).

Claimed: nearest, linear, cubic; zeros, border, reflection; align_corners 0 and 1; 2 or 3
spatial axes (the registry's claim keeps cubic to 2, as ORT); X and grid each f32 or f16 (math
in f32, the result rounded once). Refused: f64 (the CPU device runs it) and other types.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..errors import HipepError
from ..ops.grid_sample import PADDING_MODES, affine_grid_shape, grid_sample_mode, grid_sample_shape, weights_first
from .gpu_binding_core import KernelOp, NoKernel, _binding, fill_ops, flat_config, ptr

MAX_SPATIAL = 3  # HIPEP_GRID_SAMPLE_MAX_SPATIAL
NEAREST = 0  # HIPEP_GRID_SAMPLE_NEAREST
LINEAR = 1  # HIPEP_GRID_SAMPLE_LINEAR
CUBIC = 2  # HIPEP_GRID_SAMPLE_CUBIC
ZEROS = 0  # HIPEP_GRID_SAMPLE_ZEROS
BORDER = 1  # HIPEP_GRID_SAMPLE_BORDER
REFLECTION = 2  # HIPEP_GRID_SAMPLE_REFLECTION
_MODES = {"nearest": NEAREST, "linear": LINEAR, "cubic": CUBIC}
_PADDING = {"zeros": ZEROS, "border": BORDER, "reflection": REFLECTION}
_TYPES = {"float32": "f32", "float16": "f16"}  # X's and the grid's, each independently


class GridSampleArgs(ctypes.Structure):
    """kernels/grid_sample.hip's hipep_grid_sample_args."""
    _fields_ = [("n", ctypes.c_longlong), ("channels", ctypes.c_longlong), ("points", ctypes.c_longlong),
                ("in_dims", ctypes.c_longlong * MAX_SPATIAL), ("in_plane", ctypes.c_longlong),
                ("spatial", ctypes.c_int), ("mode", ctypes.c_int), ("padding", ctypes.c_int),
                ("align_corners", ctypes.c_int), ("weights_first", ctypes.c_int)]


def _check(attrs, dtypes, shapes, values):
    for what, dtype in zip(("X", "grid"), dtypes):
        if dtype and dtype not in _TYPES:
            return f"{what} of element type {dtype} (f32 and f16 have a kernel; the CPU device runs f64)"
    mode = grid_sample_mode(attrs)
    if mode not in _MODES:
        return f"mode='{attrs.get('mode')}'"
    padding = attrs.get("padding_mode", "zeros")
    if padding not in _PADDING:
        return f"padding_mode='{padding}'"
    shape = shapes[0] if shapes else None
    if shape is not None and not 2 <= len(shape) - 2 <= MAX_SPATIAL:
        return f"X of rank {len(shape)} (the kernel takes 2 or 3 spatial axes)"
    return None


@_binding("::GridSample", check=_check, modules=("grid_sample",))
def _grid_sample_bind(ins, outs, attrs, target):
    x, grid, y = ins[0], ins[1], outs[0]
    if y is None:
        return []
    x_shape, grid_shape = tuple(int(d) for d in x.shape), tuple(int(d) for d in grid.shape)
    out = grid_sample_shape(x_shape, grid_shape)  # RuntimeShapeError naming both shapes
    if tuple(out) != tuple(int(d) for d in y.shape):
        raise HipepError(f"GridSample: the output has shape {list(y.shape)}, X {list(x_shape)} and grid "
                         f"{list(grid_shape)} give {list(out)}")
    if y.dtype != x.dtype:
        raise HipepError(f"GridSample: the output is {y.dtype.name}, X is {x.dtype.name}")
    for what, a in (("X", x), ("grid", grid)):
        if a.dtype.name not in _TYPES:
            raise NoKernel(f"GridSample: {what} of element type {a.dtype.name}")
    mode, padding = grid_sample_mode(attrs), attrs.get("padding_mode", "zeros")
    if mode not in _MODES or padding not in PADDING_MODES:
        raise NoKernel(f"GridSample: mode='{attrs.get('mode')}', padding_mode='{padding}'")
    spatial = len(x_shape) - 2
    if not 2 <= spatial <= MAX_SPATIAL:
        raise NoKernel(f"GridSample over {spatial} spatial axes (the kernel takes 2 or 3)")
    n = int(np.prod(out, dtype=np.int64))
    if n == 0:
        return []
    if 0 in x_shape[2:]:  # no pixel to read: zeros padding gives zeros, as the reference does
        if padding != "zeros":
            raise HipepError(f"GridSample: X has shape {list(x_shape)}, an empty spatial axis: "
                             f"padding_mode='{padding}' has no pixel to take (zeros gives 0)")
        return fill_ops(y, b"", target)
    align_corners = bool(int(attrs.get("align_corners", 0) or 0))
    args = GridSampleArgs()
    args.n, args.channels = n, x_shape[1]
    args.points = int(np.prod(grid_shape[1:-1], dtype=np.int64))
    args.in_plane = int(np.prod(x_shape[2:], dtype=np.int64))
    for k, extent in enumerate(x_shape[2:]):
        args.in_dims[k] = extent
    args.spatial, args.mode, args.padding = spatial, _MODES[mode], _PADDING[padding]
    args.align_corners = int(align_corners)
    args.weights_first = int(weights_first(mode, padding, align_corners, spatial))
    launch_grid, block = flat_config(n, target)
    entry = f"hipep_grid_sample_{_TYPES[x.dtype.name]}_{_TYPES[grid.dtype.name]}"
    return [KernelOp(entry, launch_grid, block, [ptr(x), ptr(grid), ptr(y), args], module="grid_sample")]


# ---- AffineGrid ---------------------------------------------------------------------------------
# One launch, a thread per grid point; the size is a host input (the grid's shape), theta stays on
# the device. The kernel repeats the CPU reference's operations (hipep.ops.grid_sample) in f32 or
# f64, so the grid is the CPU device's (and ONNX Runtime's CPU EP's) bit for bit.

_AFFINE_TYPES = {"float32": "f32", "float64": "f64"}


class AffineGridArgs(ctypes.Structure):
    """kernels/grid_sample.hip's hipep_affine_grid_args."""
    _fields_ = [("points", ctypes.c_longlong), ("dims", ctypes.c_longlong * 3), ("spatial", ctypes.c_int),
                ("align_corners", ctypes.c_int)]


def _affine_check(attrs, dtypes, shapes, values):
    if dtypes and dtypes[0] not in _AFFINE_TYPES:
        return f"theta of element type {dtypes[0]} (f32 and f64 have a kernel)"
    return None


@_binding("::AffineGrid", check=_affine_check, modules=("grid_sample",))
def _affine_grid_bind(ins, outs, attrs, target):
    theta, size, grid = ins[0], ins[1], outs[0]
    if grid is None:
        return []
    if size.value is None:
        raise HipepError("AffineGrid: input 1 ('size') must be readable by the host at launch")
    shape = affine_grid_shape(theta.shape, np.asarray(size.value).reshape(-1))  # RuntimeShapeError naming both
    if tuple(shape) != tuple(int(d) for d in grid.shape) or grid.dtype != theta.dtype:
        raise HipepError(f"AffineGrid: the output is {grid.dtype.name} {list(grid.shape)}, theta {theta.dtype.name} "
                         f"and size give {list(shape)}")
    dt = _AFFINE_TYPES.get(theta.dtype.name)
    if dt is None:
        raise NoKernel(f"AffineGrid: theta of element type {theta.dtype.name}")
    args = AffineGridArgs()
    spatial = len(shape) - 2
    args.points = int(np.prod(shape[:-1], dtype=np.int64))
    if args.points == 0:
        return []
    dims = (1,) * (3 - spatial) + tuple(shape[1:-1])
    for k, d in enumerate(dims):
        args.dims[k] = d
    args.spatial, args.align_corners = spatial, int(bool(int(attrs.get("align_corners", 0) or 0)))
    launch_grid, block = flat_config(args.points, target)
    return [KernelOp(f"hipep_affine_grid_{dt}", launch_grid, block, [ptr(theta), ptr(grid), args],
                     module="grid_sample")]
