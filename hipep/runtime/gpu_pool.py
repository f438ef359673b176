"""GPU bindings of the pools: GlobalAveragePool, GlobalMaxPool, MaxPool, AveragePool and LpPool.

Registered into the kernel table (hipep.runtime.gpu_kernels) when it is imported.

GlobalAveragePool / GlobalMaxPool are ReduceMean / ReduceMax over the spatial axes. MaxPool (f32,
f16, without Indices) copies its windows into the stream's workspace as [N, C, *out, *kernel] (by
gpu_linalg's window copy, Conv's im2col, -inf where a window reaches past the input), then takes
each window's row's maximum.

kernels/pool.hip reads the windows straight from X, a thread per output element, in ONNX Runtime's
CPU order: MaxPool with its Indices output or on int8 / uint8 (the first of equal maxima, Indices
row- or column-major by storage_order), AveragePool (f32, f16) and LpPool for any p (each |x|^p a
double power rounded to f32, summed in f32, the root of the sum by the f32 exponent 1/p).

AveragePool is ONNX Runtime's CPU EP's bit for bit (f16 as its f32 kernel on the widened input,
rounded once): the window's inputs summed in f32 in the order the node's opset runs there
(_average_pool_order), divided by the f32 count: the inputs the window holds (count_include_pad=0),
or its taps inside X and its explicit padding (count_include_pad=1; a ceil_mode window running past
the padding counts only the taps before its end).
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..errors import HipepError
from ..ops.registry import OUTPUT_COUNT, SINCE_VERSION
from .gpu_binding_core import Arg, KernelOp, NoKernel, _binding, _prod, flat_config, ptr, workspace_regions
from .gpu_linalg import CONV_MAX_SPATIAL, _float_type, window_ops

POOL_AXES = 3  # kernels/pool.hip's HIPEP_POOL_AXES
# element type -> kernels/pool.hip's name for it: max_pool's, and average_pool's and lp_pool's
_MAX_POOL_TYPES = {"float32": "f32", "float16": "f16", "int8": "i8", "uint8": "u8"}
_FLOAT_POOL_TYPES = {"float32": "f32", "float16": "f16"}


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


# ---- MaxPool, AveragePool ------------------------------------------------------------------------

def _reads_windows_directly(dtype: str, indices: bool) -> bool:
    """Whether a MaxPool runs kernels/pool.hip's max_pool rather than the windows' reduction."""
    return indices or dtype not in ("float32", "float16")


def _pool_check(op_type: str):
    def check(attrs, dtypes, shapes, values):
        dtype = dtypes[0] if dtypes else "?"
        if dtype not in (_MAX_POOL_TYPES if op_type == "MaxPool" else _FLOAT_POOL_TYPES):
            return f"element type {dtype}"
        return _spatial_reason(op_type, shapes)
    return check


@_binding("::MaxPool", check=_pool_check("MaxPool"), modules=("copy", "reduce", "pool"))
def _max_pool_bind(ins, outs, attrs, target):
    from .gpu_bindings_reduce import _reduce_bind

    x, y = ins[0], outs[0]
    indices = outs[1] if len(outs) > 1 else None
    if _reads_windows_directly(x.dtype.name, indices is not None):
        return _max_pool_ops(x, y, indices, attrs, target)
    if y is None or y.size == 0:
        return []
    win = _pool_window("MaxPool", x.shape, attrs)
    rows, kp = int(x.shape[0]) * int(x.shape[1]) * _prod(win.out), _prod(win.kernel)
    (windows_at,) = workspace_regions(target, "MaxPool", [rows * kp * x.dtype.itemsize])
    windows = Arg(windows_at, (rows, kp), x.dtype)
    fill = np.asarray(-np.inf).astype(x.dtype).tobytes()
    ops = window_ops(x, windows, win, False, fill, target)
    flat = Arg(y.ptr, (rows,), y.dtype)
    return ops + _reduce_bind("ReduceMax")([windows, None], [flat], {"axes": [1], "keepdims": 0}, target)


@_binding("::AveragePool", check=_pool_check("AveragePool"), modules=("pool",))
def _average_pool_bind(ins, outs, attrs, target):
    return _average_pool_ops(ins[0], outs[0], attrs, target)


# ---- the windows read straight from X (kernels/pool.hip) ----------------------------------------

class PoolArgs(ctypes.Structure):
    _fields_ = [("outputs", ctypes.c_longlong), ("lengths", ctypes.c_longlong * POOL_AXES),
                ("out", ctypes.c_longlong * POOL_AXES), ("kernel", ctypes.c_longlong * POOL_AXES),
                ("strides", ctypes.c_longlong * POOL_AXES), ("dilations", ctypes.c_longlong * POOL_AXES),
                ("pads", ctypes.c_longlong * POOL_AXES), ("pads_end", ctypes.c_longlong * POOL_AXES),
                ("p", ctypes.c_longlong), ("storage_order", ctypes.c_int), ("count_include_pad", ctypes.c_int),
                ("order", ctypes.c_int)]


# kernels/pool.hip's hipep_pool_order: the order AveragePool adds a window's inputs in
POOL_WINDOW_ORDER, POOL_MLAS_ROWS_2D, POOL_MLAS_ROWS_3D, POOL_MLAS_GLOBAL = 0, 1, 2, 3
_MLAS_REDUCTION_BUFFER = 2048 - 3  # MLAS's vector kernels' row buffer (MLAS_POOL_REDUCTION_BUFFER_*)


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
        args.pads_end[d] = win.pe[d] if inside else 0
    args.p, args.storage_order = int(p), int(storage_order)
    return args


def _pool_type(op_type: str, types: dict, x: Arg) -> str:
    """kernels/pool.hip's name for X's element type (NoKernel where it has no entry point)."""
    dt = types.get(x.dtype.name)
    if dt is None:
        raise NoKernel(f"{op_type} on {x.dtype.name}")
    return dt


def _pool_launch(entry: str, args: PoolArgs, pointers: list, target) -> list:
    """One kernels/pool.hip launch: a thread per output element."""
    grid, block = flat_config(args.outputs, target)
    return [KernelOp(entry, grid, block, [*(ptr(a) for a in pointers), args], module="pool")]


def _average_pool_order(win, attrs) -> int:
    """The order ONNX Runtime's CPU EP adds an AveragePool window's inputs in. From opset 19 on
    (AveragePoolV19), and at any opset for count_include_pad with ceil_mode, its own loops: the
    taps in window order. Before, MLAS (MlasPool): the global kernel where the kernel is the whole
    input (strides 1, no padding); the vector kernels for 2-D and 3-D windows with the last axis'
    stride at most 2, every kernel extent at most 32 and the last axis with its padding fitting the
    row buffer; else the generic kernels, in window order. (These are the node's own kernels: ORT's
    layout optimization, at its default level, rewrites an f32 2-D AveragePool whose channel count
    is a multiple of its NCHWc block, 8 with AVX2 and 16 with AVX-512, into its NCHWc kernel, which
    adds in window order; such sessions can differ from this one in the last bit.)"""
    count_include_pad = int(attrs.get("count_include_pad", 0))
    if int(attrs.get(SINCE_VERSION, 22)) >= 19 or (count_include_pad and int(attrs.get("ceil_mode", 0))):
        return POOL_WINDOW_ORDER
    n = len(win.kernel)
    if any(d != 1 for d in win.dilations):  # no MLAS kernel has dilations (nor do these opsets)
        return POOL_WINDOW_ORDER
    if (all(k == length for k, length in zip(win.kernel, win.lengths)) and all(s == 1 for s in win.strides)
            and not any(win.pb) and not any(win.pe)):
        return POOL_MLAS_GLOBAL
    row = _MLAS_REDUCTION_BUFFER
    for pad in (win.pb[-1], win.pe[-1]):
        row = row - pad if row >= pad else 0
    if n >= 2 and win.strides[-1] <= 2 and all(k <= 32 for k in win.kernel) and row >= win.lengths[-1]:
        return POOL_MLAS_ROWS_2D if n == 2 else POOL_MLAS_ROWS_3D
    return POOL_WINDOW_ORDER


def _average_pool_ops(x: Arg, y: Arg | None, attrs, target) -> list:
    """AveragePool by kernels/pool.hip's average_pool."""
    dt = _pool_type("AveragePool", _FLOAT_POOL_TYPES, x)
    count_include_pad = int(attrs.get("count_include_pad", 0))
    if count_include_pad not in (0, 1):
        raise HipepError(f"AveragePool: count_include_pad={count_include_pad} must be 0 or 1")
    win = _pool_window("AveragePool", x.shape, attrs)
    args = _pool_args(x, win)
    if y is None or args.outputs == 0:
        return []
    args.count_include_pad, args.order = count_include_pad, _average_pool_order(win, attrs)
    return _pool_launch(f"hipep_average_pool_{dt}", args, [x, y], target)


def _max_pool_ops(x: Arg, y: Arg | None, indices: Arg | None, attrs, target) -> list:
    """MaxPool by kernels/pool.hip's max_pool: Y (where kept) and Indices (where asked for)."""
    dt = _pool_type("MaxPool", _MAX_POOL_TYPES, x)
    storage_order = int(attrs.get("storage_order", 0))
    if storage_order not in (0, 1):
        raise HipepError(f"MaxPool: storage_order={storage_order} must be 0 or 1")
    if indices is not None and indices.dtype != np.int64:
        raise NoKernel(f"MaxPool's Indices of type {indices.dtype.name}")
    win = _pool_window("MaxPool", x.shape, attrs)
    args = _pool_args(x, win, storage_order=storage_order)
    if args.outputs == 0 or (y is None and indices is None):
        return []
    return _pool_launch(f"hipep_max_pool_{dt}", args, [x, y, indices], target)


# ---- LpPool --------------------------------------------------------------------------------------

def _lp_pool_p(attrs) -> float:
    return float(attrs.get("p", 2))


def _lp_pool_check(attrs, dtypes, shapes, values):
    dtype = dtypes[0] if dtypes else "?"
    if dtype not in _FLOAT_POOL_TYPES:
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
    dt = _pool_type("LpPool", _FLOAT_POOL_TYPES, x)
    p = _lp_pool_p(attrs)
    if p != int(p) or p < 1:
        raise NoKernel(f"LpPool with p={p}")
    if y is None or y.size == 0:
        return []
    args = _pool_args(x, _pool_window("LpPool", x.shape, attrs), p=int(p))
    return _pool_launch(f"hipep_lp_pool_{dt}", args, [x, y], target)
