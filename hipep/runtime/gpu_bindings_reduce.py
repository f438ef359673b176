"""GPU bindings of the reductions (ReduceSum, ReduceMean, ReduceMax, ReduceMin, the last two over
bool too; for float types, f64 included, also ReduceProd, ReduceSumSquare, ReduceL1, ReduceL2,
ReduceLogSum, and ReduceLogSumExp over the last axes), Softmax and LogSoftmax (f64 too): kernels/reduce.hip
and kernels/softmax.hip, one row per warp or block; ArgMax and ArgMin, kernels/argmax.hip; and
CumSum and CumProd, kernels/scan.hip, over a constant axis or one the kernel reads at run time
(registered in hipep.runtime.gpu_kernels' table on import)."""
from __future__ import annotations

import ctypes
from typing import Sequence

import ml_dtypes  # noqa: F401  (registers numpy's 'bfloat16' dtype name)

from ..errors import HipepError, RuntimeShapeError
from ..ops._common import normalize_axes, normalize_axis, shape_str
from ..ops.registry import SINCE_VERSION
from .gpu_binding_core import (Arg, KernelOp, NoKernel, _DT, _VEC, _binding, _cdiv, _pow2_at_least, _prod,
                               _values_or_attr, _vec_ok, flat_config, permuted_copy, ptr, workspace_regions)
from .gpu_faults import fault_param


def _row_config(rows: int, words: int, target) -> tuple[tuple, tuple]:
    # Looked up on gpu_kernels at each call: tests replace gpu_kernels.row_config there to make
    # a launch the driver refuses.
    from . import gpu_kernels

    return gpu_kernels.row_config(rows, words, target)


# Reductions -----------------------------------------------------------------------------------

class ReduceArgs(ctypes.Structure):
    _fields_ = [("rows", ctypes.c_longlong), ("r", ctypes.c_longlong), ("inner", ctypes.c_longlong)]


_FLOATS = ("f32", "f16", "bf16", "f64")
_ALL = _FLOATS + ("i32", "i64")
# op -> (kernel name, element types it has kernels for); over bool, max is any and min is all
_REDUCE_OPS = {"ReduceSum": ("sum", _ALL), "ReduceMean": ("mean", _ALL), "ReduceMax": ("max", _ALL + ("bool",)),
               "ReduceMin": ("min", _ALL + ("bool",)), "ReduceProd": ("prod", _FLOATS),
               "ReduceSumSquare": ("sumsq", _FLOATS), "ReduceL1": ("l1", _FLOATS), "ReduceL2": ("l2", _FLOATS),
               "ReduceLogSum": ("logsum", _FLOATS)}
# Element type -> the kernels' name for it, and elements per 16-byte load of the row kernels (the
# shared tables leave f64 out: other ops read a type missing there as one without kernels).
_REDUCE_DT = {**_DT, "bool": "bool", "float64": "f64"}
_REDUCE_VEC = {**_VEC, "f64": 2}


def reduce_blocks(shape: Sequence[int], axes, noop: bool) -> tuple[int, int, int] | str:
    """(outer, r, inner) for reducing `axes` of `shape`, or the reason it has no kernel (axes
    that are not adjacent once extent-1 axes are set aside)."""
    rank = len(shape)
    if not axes:
        if noop:
            return _prod(shape), 1, 1
        axes = list(range(rank))
    axes = sorted({a + rank if a < 0 else a for a in axes})
    if any(not 0 <= a < rank for a in axes):
        return f"axes {axes} out of range for rank {rank}"
    big = [d for d in range(rank) if int(shape[d]) != 1]
    reduced = [d for d in big if d in axes]
    if not reduced:
        return _prod(shape), 1, 1
    pos = [big.index(d) for d in reduced]
    if pos != list(range(pos[0], pos[0] + len(pos))):
        return f"reducing axes {axes} of a rank-{rank} input (not adjacent)"
    first, last = reduced[0], reduced[-1]
    outer = _prod(shape[d] for d in range(first) if d not in axes)
    r = _prod(shape[d] for d in reduced)
    inner = _prod(shape[d] for d in range(last + 1, rank))
    return outer, r, inner


def _reduce_check(types):
    """A reduction's claim check: element types in `types`. Any axes have a program (reduced
    axes that are not adjacent, or not the last where the kernel needs rows, are first moved
    behind the kept ones: `rows_last`)."""
    def check(attrs, dtypes, shapes, values):
        if not dtypes or _REDUCE_DT.get(dtypes[0]) not in types:
            return f"element type {dtypes[0] if dtypes else '?'}"
        return None
    return check


def rows_last(x: Arg, axes: Sequence[int], target, what: str) -> tuple[list, Arg]:
    """x with `axes` (normalized, sorted) moved behind the others, copied into the stream's
    workspace: the ops and the copy, whose reduction over the moved axes is one of rows. The kept
    axes keep their order, which is the reduction's output order. (The composite bindings that
    carve workspace regions of their own reduce adjacent axes only, so never come here.)"""
    perm = [d for d in range(x.ndim) if d not in axes] + list(axes)
    (at,) = workspace_regions(target, what, [x.size * x.dtype.itemsize])
    moved = Arg(at, tuple(int(x.shape[p]) for p in perm), x.dtype)
    return permuted_copy(x, moved, perm, target), moved


def _reduction_rows(x: Arg, axes, noop: bool, target, what: str, rows_only: bool = False):
    """(ops, the tensor to reduce, reduce_blocks' (outer, r, inner)) for reducing `axes` of x: x
    itself where the kernels take the axes as they are (adjacent; with `rows_only` also the last
    ones), else rows of a copy with them moved last."""
    res = reduce_blocks(x.shape, axes or [], noop)
    if not isinstance(res, str) and not (rows_only and res[2] != 1):
        return [], x, res
    if isinstance(res, str) and res.startswith("axes"):  # out of range: the shape rule has said so
        raise NoKernel(res)
    reduced = sorted(normalize_axes(what, axes, x.ndim)) if axes else ([] if noop else list(range(x.ndim)))
    ops, moved = rows_last(x, reduced, target, what)
    return ops, moved, reduce_blocks(moved.shape, list(range(moved.ndim - len(reduced), moved.ndim)), False)


def _reduce_bind(op_type: str):
    kind = _REDUCE_OPS[op_type][0]

    def bind(ins, outs, attrs, target):
        x, y = ins[0], outs[0]
        dt = _REDUCE_DT.get(x.dtype.name)
        if dt not in _REDUCE_OPS[op_type][1]:
            raise NoKernel(f"{op_type} on {x.dtype.name}")
        axes = _values_or_attr(ins, 1, attrs, "axes")
        ops, x, res = _reduction_rows(x, axes, bool(attrs.get("noop_with_empty_axes", 0)), target, op_type)
        outer, r, inner = res
        if y.size != outer * inner:
            raise HipepError(f"{op_type}: output of {y.size} elements for a reduction to {outer * inner}")
        if y.size == 0:
            return []
        params = [ptr(x), ptr(y), ReduceArgs(outer * inner, r, inner)]
        if inner == 1:
            vec = _REDUCE_VEC.get(dt, 1)
            use_vec = _vec_ok([x], r, vec, x.dtype.itemsize)
            grid, block = _row_config(outer, _cdiv(r, vec) if use_vec else r, target)
            entry = f"hipep_reduce_{kind}_{dt}_rows" + ("_vec" if use_vec else "")
            return ops + [KernelOp(entry, grid, block, params, module="reduce")]
        if dt in ("i32", "i64", "bool") and kind in ("max", "min"):  # one thread per output, in the element type
            grid, block = flat_config(outer * inner, target, per_sm=32)
        else:  # 32 outputs per block, the reduced extent split among up to 32 row groups
            groups = min(32, _pow2_at_least(_cdiv(r, 4)))
            grid, block = (_cdiv(inner, 32), min(outer, 65535), 1), (32, groups, 1)
        return ops + [KernelOp(f"hipep_reduce_{kind}_{dt}_cols", grid, block, params, module="reduce")]
    return bind


for _op in _REDUCE_OPS:
    _binding(f"::{_op}", check=_reduce_check(_REDUCE_OPS[_op][1]), reads_values=True, modules=("reduce", "copy"))(
        _reduce_bind(_op))


# Softmax --------------------------------------------------------------------------------------

class SoftmaxArgs(ctypes.Structure):
    _fields_ = [("rows", ctypes.c_longlong), ("cols", ctypes.c_longlong)]


def _softmax_axis(attrs) -> int:
    axis = attrs.get("axis")
    if axis is None:
        axis = -1 if int(attrs.get(SINCE_VERSION, 13)) >= 13 else 1
    return int(axis)


def _softmax_check(attrs, dtypes, shapes, values):
    if not dtypes or dtypes[0] not in ("float32", "float16", "float64"):
        return f"element type {dtypes[0] if dtypes else '?'}"
    return None  # any axis: one that is not the last is moved there first (_softmax_bind)


def _softmax_bind(op_type: str, prefix: str):
    def bind(ins, outs, attrs, target):
        x, y = ins[0], outs[0]
        dt = _REDUCE_DT.get(x.dtype.name)
        if dt not in ("f32", "f16", "bf16", "f64"):
            raise NoKernel(f"{op_type} has no kernel for element type {x.dtype.name}")
        rank = x.ndim
        if rank == 0:
            raise HipepError(f"{op_type}: input must have rank >= 1, got a scalar")
        axis = _softmax_axis(attrs)
        axis = axis + rank if axis < 0 else axis
        if int(attrs.get(SINCE_VERSION, 13)) >= 13 and _prod(x.shape[axis + 1:]) != 1:
            return _softmax_moved(x, y, axis, target, op_type, bind)
        rows, cols = _prod(x.shape[:axis]), _prod(x.shape[axis:])
        if rows * cols == 0:
            return []
        vec = _REDUCE_VEC.get(dt, 1)
        use_vec = _vec_ok([x, y], cols, vec, x.dtype.itemsize)
        grid, block = _row_config(rows, _cdiv(cols, vec) if use_vec else cols, target)
        return [KernelOp(f"{prefix}_{dt}" + ("_vec" if use_vec else ""), grid, block,
                         [ptr(x), ptr(y), SoftmaxArgs(rows, cols)], module="softmax")]
    return bind


def _softmax_moved(x: Arg, y: Arg, axis: int, target, op_type: str, bind) -> list:
    """Softmax over an axis that is not the last (opset 13 on): over rows of a copy with that
    axis moved last, then copied back into y's layout, both copies in the stream's workspace."""
    if x.size == 0:
        return []
    perm = [d for d in range(x.ndim) if d != axis] + [axis]
    dims = tuple(int(x.shape[p]) for p in perm)
    nbytes = x.size * x.dtype.itemsize
    moved_at, result_at = workspace_regions(target, op_type, [nbytes, nbytes])
    moved, result = Arg(moved_at, dims, x.dtype), Arg(result_at, dims, y.dtype)
    ops = permuted_copy(x, moved, perm, target)
    ops += bind([moved], [result], _last_axis_attrs(x.ndim), target)
    return ops + permuted_copy(result, y, [perm.index(d) for d in range(x.ndim)], target)


def _last_axis_attrs(rank: int) -> dict:
    """Softmax's attributes for its last axis at opset 13 and later."""
    return {"axis": rank - 1, SINCE_VERSION: 13}


for _op, _prefix in (("Softmax", "hipep_softmax"), ("LogSoftmax", "hipep_log_softmax")):
    _binding(f"::{_op}", check=_softmax_check, modules=("softmax", "copy"))(_softmax_bind(_op, _prefix))


# ReduceLogSumExp: kernels/softmax.hip's first pass (max, then the sum of exp(x - max)) per row, so
# only where the reduced axes are the last ones (reduce_blocks' inner extent is 1); f64 rows are
# kernels/reduce.hip's, two passes in double.

@_binding("::ReduceLogSumExp", check=_reduce_check(_FLOATS), reads_values=True,
          modules=("softmax", "reduce", "copy"))
def _logsumexp_bind(ins, outs, attrs, target):
    x, y = ins[0], outs[0]
    dt = _REDUCE_DT.get(x.dtype.name)
    if dt not in _FLOATS:
        raise NoKernel(f"ReduceLogSumExp on {x.dtype.name}")
    axes = _values_or_attr(ins, 1, attrs, "axes") or []
    ops, x, res = _reduction_rows(x, axes, bool(attrs.get("noop_with_empty_axes", 0)), target, "ReduceLogSumExp",
                                  rows_only=True)
    rows, cols, _ = res
    if y.size != rows:
        raise HipepError(f"ReduceLogSumExp: output of {y.size} elements for a reduction to {rows}")
    if rows == 0:
        return []
    if dt == "f64":
        grid, block = _row_config(rows, max(cols, 1), target)
        return ops + [KernelOp("hipep_reduce_logsumexp_f64_rows", grid, block,
                               [ptr(x), ptr(y), ReduceArgs(rows, cols, 1)], module="reduce")]
    vec = _VEC.get(dt, 1)
    use_vec = _vec_ok([x], cols, vec, x.dtype.itemsize)
    grid, block = _row_config(rows, _cdiv(cols, vec) if use_vec else max(cols, 1), target)
    return ops + [KernelOp(f"hipep_reduce_logsumexp_{dt}_rows" + ("_vec" if use_vec else ""), grid, block,
                           [ptr(x), ptr(y), SoftmaxArgs(rows, cols)], module="softmax")]


# ArgMax / ArgMin: kernels/argmax.hip, a block per line along the last axis, else a thread per output

class ArgArgs(ctypes.Structure):
    _fields_ = [("outputs", ctypes.c_longlong), ("r", ctypes.c_longlong), ("inner", ctypes.c_longlong),
                ("is_max", ctypes.c_int), ("last", ctypes.c_int)]


_ARG_DT = {"float32": "f32", "float16": "f16", "int8": "i8", "uint8": "u8", "int32": "i32", "int64": "i64"}
ARG_ROW_THREADS = 256  # threads of the block scanning one line (fewer for short lines)


def _arg_check(attrs, dtypes, shapes, values):
    if not dtypes or dtypes[0] not in _ARG_DT:
        return f"element type {dtypes[0] if dtypes else '?'}"
    return None


def _arg_bind(op_type: str):
    def bind(ins, outs, attrs, target):
        x, y = ins[0], outs[0]
        dt = _ARG_DT.get(x.dtype.name)
        if dt is None:
            raise NoKernel(f"{op_type} on {x.dtype.name}")
        if x.ndim == 0:
            raise HipepError(f"{op_type}: input must have rank >= 1, got a scalar")
        axis = normalize_axis(op_type, int(attrs.get("axis", 0)), x.ndim)
        outer, r, inner = _prod(x.shape[:axis]), int(x.shape[axis]), _prod(x.shape[axis + 1:])
        if r == 0:
            raise HipepError(f"{op_type}: cannot reduce axis {axis} of extent 0 (input is {list(x.shape)})")
        if y.size != outer * inner:
            raise HipepError(f"{op_type}: output of {y.size} elements for {outer * inner} lines")
        if y.size == 0:
            return []
        params = [ptr(x), ptr(y), ArgArgs(outer * inner, r, inner, int(op_type == "ArgMax"),
                                          int(bool(attrs.get("select_last_index", 0))))]
        if inner == 1:
            threads = max(target.warp_size, min(ARG_ROW_THREADS, _pow2_at_least(r)))
            return [KernelOp(f"hipep_arg_{dt}_rows", (min(outer, 65535), 1, 1), (threads, 1, 1), params,
                             module="argmax")]
        grid, block = flat_config(outer * inner, target)
        return [KernelOp(f"hipep_arg_{dt}_cols", grid, block, params, module="argmax")]
    return bind


for _op in ("ArgMax", "ArgMin"):
    _binding(f"::{_op}", check=_arg_check, modules=("argmax",))(_arg_bind(_op))


# CumSum, CumProd: kernels/scan.hip, one thread per line along the axis, in the CPU EP's order ----

class ScanArgs(ctypes.Structure):
    _fields_ = [("lines", ctypes.c_longlong), ("n", ctypes.c_longlong), ("inner", ctypes.c_longlong),
                ("exclusive", ctypes.c_int), ("reverse", ctypes.c_int)]


SCAN_MAX_RANK = 8  # kernels/scan.hip's HIPEP_SCAN_MAX_RANK: the ranks whose axis may come at run time


class ScanAxisArgs(ctypes.Structure):
    """kernels/scan.hip's hipep_scan_axis_args: the input's shape, for an axis the kernel reads."""
    _fields_ = [("dims", ctypes.c_longlong * SCAN_MAX_RANK), ("size", ctypes.c_longlong), ("rank", ctypes.c_int),
                ("wide_axis", ctypes.c_int), ("exclusive", ctypes.c_int), ("reverse", ctypes.c_int)]


_SCAN_DT = {**_DT, "float64": "f64"}  # element type -> the scan kernels' name for it
_SCAN_TYPES = ("f32", "f64", "f16", "i32", "i64")


def _scan_check(attrs, dtypes, shapes, values):
    if not dtypes or _SCAN_DT.get(dtypes[0]) not in _SCAN_TYPES:
        return f"element type {dtypes[0] if dtypes else '?'}"
    run_time_axis = len(values) < 2 or values[1] is None
    shape = shapes[0] if shapes else None
    if run_time_axis and shape is not None and len(shape) > SCAN_MAX_RANK:
        return f"an axis known only at run time over a rank-{len(shape)} input (at most {SCAN_MAX_RANK})"
    return None


def _scan_bind(op_type: str, entry: str):
    def bind(ins, outs, attrs, target):
        x, y = ins[0], outs[0]
        dt = _SCAN_DT.get(x.dtype.name)
        if dt not in _SCAN_TYPES:
            raise NoKernel(f"{op_type} on {x.dtype.name}")
        if x.ndim == 0:
            raise HipepError(f"{op_type}: input must have rank >= 1, got a scalar")
        exclusive, reverse = int(bool(attrs.get("exclusive", 0))), int(bool(attrs.get("reverse", 0)))
        if ins[1] is not None and ins[1].value is None:
            return _scan_device_axis(op_type, entry, dt, x, y, ins[1], exclusive, reverse, target)
        (axis,) = _values_or_attr(ins, 1, attrs, "axis")
        axis = normalize_axis(op_type, axis, x.ndim)
        outer, n, inner = _prod(x.shape[:axis]), int(x.shape[axis]), _prod(x.shape[axis + 1:])
        if outer * n * inner == 0:
            return []
        grid, block = flat_config(outer * inner, target)
        return [KernelOp(f"hipep_{entry}_{dt}", grid, block,
                         [ptr(x), ptr(y), ScanArgs(outer * inner, n, inner, exclusive, reverse)], module="scan")]
    return bind


def _scan_device_axis(op_type: str, entry: str, dt: str, x: Arg, y: Arg, axis: Arg, exclusive: int, reverse: int,
                      target) -> list:
    """The scan over an axis the kernel reads from device memory (a graph input): launched for the
    most lines any axis gives (the input's size over its smallest extent), each thread finding
    its lines from the shape; an axis out of range goes to the stream's fault record. An empty
    input has nothing to scan and its axis is not read (ONNX Runtime checks it after that)."""
    if axis.size != 1:
        raise RuntimeShapeError(f"{op_type}: 'axis' must be a scalar (one element), got shape {shape_str(axis.shape)}")
    if axis.dtype.name not in ("int32", "int64"):
        raise NoKernel(f"{op_type} with an axis of element type {axis.dtype.name}")
    if x.ndim > SCAN_MAX_RANK:
        raise NoKernel(f"{op_type}: an axis known only at run time over a rank-{x.ndim} input "
                       f"(at most {SCAN_MAX_RANK})")
    if x.size == 0:
        return []
    args = ScanAxisArgs()
    for d, extent in enumerate(x.shape):
        args.dims[d] = int(extent)
    args.size, args.rank, args.wide_axis = x.size, x.ndim, int(axis.dtype.name == "int64")
    args.exclusive, args.reverse = exclusive, reverse
    grid, block = flat_config(x.size // min(int(e) for e in x.shape), target)
    fault = fault_param(target, "input 1 (axis)")
    return [KernelOp(f"hipep_{entry}_device_axis_{dt}", grid, block, [ptr(x), ptr(y), ptr(axis), args, fault],
                     module="scan")]


for _op, _entry in (("CumSum", "cumsum"), ("CumProd", "cumprod")):
    _binding(f"::{_op}", check=_scan_check, reads_values=True, modules=("scan",))(_scan_bind(_op, _entry))
