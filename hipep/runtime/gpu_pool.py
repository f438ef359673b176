"""GPU bindings of the pools: GlobalAveragePool, GlobalMaxPool, MaxPool, AveragePool and LpPool.

Registered into the kernel table (hipep.runtime.gpu_kernels) when it is imported.

GlobalAveragePool / GlobalMaxPool are ReduceMean / ReduceMax over the spatial axes. MaxPool (f32,
f16) and AveragePool copy their windows into the stream's workspace as [N, C, *out, *kernel] (by
gpu_linalg's window copy, Conv's im2col: -inf for MaxPool, zeros for AveragePool where a window
reaches past the input), then reduce each window's row: where every window's count is the kernel's
size (no padding read, or padding counted with count_include_pad) the mean is the reduction's.
Where windows reaching into the padding count only the inputs they hold (count_include_pad=0,
f32), each window's sum is divided by its count, which the same windows over a plane of ones give
(zeros where they reach past it): per output position, the same for every image and channel.

kernels/pool.hip reads the windows straight from X, a thread per output element, in ONNX Runtime's
CPU order: MaxPool with its Indices output or on int8 / uint8 (the first of equal maxima, Indices
row- or column-major by storage_order), and LpPool for any p (each |x|^p a double power rounded to
f32, summed in f32, the root of the sum by the f32 exponent 1/p).
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..errors import HipepError
from ..ops.registry import OUTPUT_COUNT
from .gpu_binding_core import (Arg, KernelOp, NoKernel, _binding, _prod, fill_ops, flat_config, ptr,
                               workspace_regions)
from .gpu_linalg import CONV_MAX_SPATIAL, _conv_reads_padding, _float_type, _window_ops, _window_reach

POOL_AXES = 3  # kernels/pool.hip's HIPEP_POOL_AXES
_MAX_POOL_TYPES = {"float32": "f32", "float16": "f16", "int8": "i8", "uint8": "u8"}  # kernels/pool.hip's max_pool
_LP_POOL_TYPES = {"float32": "f32", "float16": "f16"}


def _pool_window(op_type: str, shape, attrs):
    from ..ops.vision import _Window

    return _Window(op_type, shape[2:], [int(k) for k in attrs["kernel_shape"]], attrs, int(attrs.get("ceil_mode", 0)))


def _spatial_reason(op_type: str, shapes) -> str | None:
    x = shapes[0] if shapes else None
    if x is not None and len(x) - 2 > CONV_MAX_SPATIAL:
        return f"{op_type} over {len(x) - 2} spatial axes (at most {CONV_MAX_SPATIAL})"
    return None


# ---- GlobalAveragePool, GlobalMaxPool: reductions over the spatial axes --------------------------

def _global_pool_bind(reduce_op: str):
    def bind(ins, outs, attrs, target):
        from .gpu_bindings_reduce import _reduce_bind

        x = ins[0]
        if x.ndim < 3:
            raise HipepError(f"{reduce_op}: X must have rank >= 3 (N, C, D1, ...), got {list(x.shape)}")
        return _reduce_bind(reduce_op)([x, None], outs, {"axes": list(range(2, x.ndim)), "keepdims": 1}, target)
    return bind


def _global_pool_check(attrs, dtypes, shapes, values):
    return _float_type(dtypes)


for _op, _reduce in (("GlobalAveragePool", "ReduceMean"), ("GlobalMaxPool", "ReduceMax")):
    _binding(f"::{_op}", check=_global_pool_check, modules=("reduce",))(_global_pool_bind(_reduce))


# ---- MaxPool, AveragePool: a reduction over the windows -----------------------------------------

def _pool_counts_are_the_kernel(win, attrs) -> bool:
    """Whether every window of an AveragePool divides by the kernel's size."""
    if not int(attrs.get("count_include_pad", 0)):
        return not _conv_reads_padding(win)
    # ceil_mode's overhang past the padding is not counted
    return all(_window_reach(win, i) <= length + win.pb[i] + win.pe[i] for i, length in enumerate(win.lengths))


def _reads_windows_directly(op_type: str, dtype: str, indices: bool) -> bool:
    """Whether a MaxPool runs kernels/pool.hip's max_pool rather than the windows' reduction."""
    return op_type == "MaxPool" and (indices or dtype not in ("float32", "float16"))


def _pool_check(op_type: str):
    def check(attrs, dtypes, shapes, values):
        dtype = dtypes[0] if dtypes else "?"
        if dtype not in (_MAX_POOL_TYPES if op_type == "MaxPool" else ("float32", "float16")):
            return f"element type {dtype}"
        why = _spatial_reason(op_type, shapes)
        if why is not None:
            return why
        x = shapes[0] if shapes else None
        if op_type == "AveragePool" and x is not None and all(d is not None for d in x):
            try:
                win = _pool_window(op_type, x, attrs)
            except Exception:  # noqa: BLE001 - a bad geometry: the shape rule reports it
                return None
            if not _pool_counts_are_the_kernel(win, attrs):
                return _counted_pool_reason(dtype, attrs)
        return None
    return check


def _pool_bind(op_type: str):
    def bind(ins, outs, attrs, target):
        from .gpu_bindings_reduce import _reduce_bind

        x, y = ins[0], outs[0]
        indices = outs[1] if len(outs) > 1 else None
        if _reads_windows_directly(op_type, x.dtype.name, indices is not None):
            return _max_pool_ops(x, y, indices, attrs, target)
        if y is None or y.size == 0:
            return []
        win = _pool_window(op_type, x.shape, attrs)
        if op_type == "AveragePool" and not _pool_counts_are_the_kernel(win, attrs):
            why = _counted_pool_reason(x.dtype.name, attrs)
            if why is not None:
                raise NoKernel(why)
            return _counted_average_pool_ops(x, y, win, target)
        rows, kp = int(x.shape[0]) * int(x.shape[1]) * _prod(win.out), _prod(win.kernel)
        (windows_at,) = workspace_regions(target, op_type, [rows * kp * x.dtype.itemsize])
        windows = Arg(windows_at, (rows, kp), x.dtype)
        fill = np.asarray(-np.inf if op_type == "MaxPool" else 0.0).astype(x.dtype).tobytes()
        ops = _window_ops(x, windows, win, False, fill, target)
        reduce_op = "ReduceMax" if op_type == "MaxPool" else "ReduceMean"
        flat = Arg(y.ptr, (rows,), y.dtype)
        return ops + _reduce_bind(reduce_op)([windows, None], [flat], {"axes": [1], "keepdims": 0}, target)
    return bind


def _counted_pool_reason(dtype: str, attrs) -> str | None:
    """Why an AveragePool whose windows hold different counts of inputs has no kernel (None: it has)."""
    if int(attrs.get("count_include_pad", 0)):
        return "AveragePool counting the padding, with ceil_mode windows past it (no kernel yet)"
    if dtype != "float32":
        return f"AveragePool on {dtype} whose windows hold different counts of inputs (f32 only)"
    return None


def _counted_average_pool_ops(x: Arg, y: Arg, win, target) -> list:
    """AveragePool (f32) as each window's sum over its count of inputs: the windows of X and of a
    plane of ones (zeros past the input), both summed by rows, then Y = sums / counts, the counts
    broadcast over images and channels."""
    from .gpu_bindings_pointwise import _pointwise_bind
    from .gpu_bindings_reduce import _reduce_bind

    planes, positions, kp = int(x.shape[0]) * int(x.shape[1]), _prod(win.out), _prod(win.kernel)
    plane = _prod(win.lengths)
    e = x.dtype.itemsize
    windows_at, ones_at, ones_windows_at, counts_at = workspace_regions(
        target, "AveragePool", [planes * positions * kp * e, plane * e, positions * kp * e, positions * e])
    zero = np.zeros((), x.dtype).tobytes()
    windows = Arg(windows_at, (planes * positions, kp), x.dtype)
    ones = Arg(ones_at, (1, 1, *win.lengths), x.dtype)
    ones_windows = Arg(ones_windows_at, (positions, kp), x.dtype)
    counts = Arg(counts_at, (positions,), x.dtype)
    sums = Arg(y.ptr, (planes, positions), y.dtype)  # Y itself, divided in place
    rows = {"axes": [1], "keepdims": 0}
    ops = _window_ops(x, windows, win, False, zero, target)
    ops += fill_ops(ones, np.ones((), x.dtype).tobytes(), target)
    ops += _window_ops(ones, ones_windows, win, False, zero, target)
    ops += _reduce_bind("ReduceSum")([windows, None], [Arg(y.ptr, (planes * positions,), y.dtype)], rows, target)
    ops += _reduce_bind("ReduceSum")([ones_windows, None], [counts], rows, target)
    return ops + _pointwise_bind("::Div")([sums, counts], [sums], {}, target)


# ---- the windows read straight from X (kernels/pool.hip) ----------------------------------------

class PoolArgs(ctypes.Structure):
    _fields_ = [("outputs", ctypes.c_longlong), ("lengths", ctypes.c_longlong * POOL_AXES),
                ("out", ctypes.c_longlong * POOL_AXES), ("kernel", ctypes.c_longlong * POOL_AXES),
                ("strides", ctypes.c_longlong * POOL_AXES), ("dilations", ctypes.c_longlong * POOL_AXES),
                ("pads", ctypes.c_longlong * POOL_AXES), ("p", ctypes.c_longlong), ("storage_order", ctypes.c_int)]


def _pool_args(x: Arg, win, p: int = 0, storage_order: int = 0) -> PoolArgs:
    """The window geometry for kernels/pool.hip; spatial axes past X's are of extent 1."""
    nsp = len(win.kernel)
    if not 1 <= nsp <= POOL_AXES:
        raise NoKernel(f"a pool over {nsp} spatial axes (at most {POOL_AXES})")
    args = PoolArgs()
    args.outputs = int(x.shape[0]) * int(x.shape[1]) * _prod(win.out)
    for d in range(POOL_AXES):
        inside = d < nsp
        args.lengths[d] = win.lengths[d] if inside else 1
        args.out[d] = win.out[d] if inside else 1
        args.kernel[d] = win.kernel[d] if inside else 1
        args.strides[d] = win.strides[d] if inside else 1
        args.dilations[d] = win.dilations[d] if inside else 1
        args.pads[d] = win.pb[d] if inside else 0
    args.p, args.storage_order = int(p), int(storage_order)
    return args


def _max_pool_ops(x: Arg, y: Arg | None, indices: Arg | None, attrs, target) -> list:
    """MaxPool by kernels/pool.hip's max_pool: Y (where kept) and Indices (where asked for)."""
    dt = _MAX_POOL_TYPES.get(x.dtype.name)
    if dt is None:
        raise NoKernel(f"MaxPool on {x.dtype.name}")
    storage_order = int(attrs.get("storage_order", 0))
    if storage_order not in (0, 1):
        raise HipepError(f"MaxPool: storage_order={storage_order} must be 0 or 1")
    if indices is not None and indices.dtype != np.int64:
        raise NoKernel(f"MaxPool's Indices of type {indices.dtype.name}")
    win = _pool_window("MaxPool", x.shape, attrs)
    args = _pool_args(x, win, storage_order=storage_order)
    if args.outputs == 0 or (y is None and indices is None):
        return []
    grid, block = flat_config(args.outputs, target)
    return [KernelOp(f"hipep_max_pool_{dt}", grid, block, [ptr(x), ptr(y), ptr(indices), args], module="pool")]


for _op in ("MaxPool", "AveragePool"):
    _binding(f"::{_op}", check=_pool_check(_op),
             modules=("copy", "reduce", "pool") if _op == "MaxPool" else ("copy", "reduce"))(_pool_bind(_op))


# ---- LpPool --------------------------------------------------------------------------------------

def _lp_pool_p(attrs) -> float:
    return float(attrs.get("p", 2))


def _lp_pool_check(attrs, dtypes, shapes, values):
    dtype = dtypes[0] if dtypes else "?"
    if dtype not in _LP_POOL_TYPES:
        return f"element type {dtype}"
    p = _lp_pool_p(attrs)
    if p != int(p) or p < 1:
        return f"p={attrs.get('p')} (a positive integer has a kernel)"
    if int(attrs.get(OUTPUT_COUNT, 1)) > 1:
        return "more than one output"
    return _spatial_reason("LpPool", shapes)


@_binding("::LpPool", check=_lp_pool_check, modules=("pool",))
def _lp_pool_bind(ins, outs, attrs, target):
    x, y = ins[0], outs[0]
    dt = _LP_POOL_TYPES.get(x.dtype.name)
    if dt is None:
        raise NoKernel(f"LpPool on {x.dtype.name}")
    p = _lp_pool_p(attrs)
    if p != int(p) or p < 1:
        raise NoKernel(f"LpPool with p={p}")
    if y is None or y.size == 0:
        return []
    args = _pool_args(x, _pool_window("LpPool", x.shape, attrs), p=int(p))
    grid, block = flat_config(args.outputs, target)
    return [KernelOp(f"hipep_lp_pool_{dt}", grid, block, [ptr(x), ptr(y), args], module="pool")]
