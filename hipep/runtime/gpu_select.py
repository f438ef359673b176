"""GPU bindings of the ops whose output extent is a count of selected elements: NonZero, and
Compress (kernels/nonzero.hip, then Compress's gather through Gather's kernel).

Registered into the kernel table (hipep.runtime.gpu_kernels) when it is imported.

The count depends on values, so hipep claims these ops on a GPU only where the values are known
to the host before any launch (hipep.partition: small inputs handed in from outside, constants,
host results; the registry marks them host inputs): the shape program reads them and sizes the
output, whose extent each binding takes as the count. The kernels still select on the device, from
the memory the device addresses (host-visible memory where the plan staged the values there), so
no launch waits for the host.

  * NonZero: one block writes the coordinates of the nonzero elements ([rank, count] int64).
  * Compress: the indices of the true conditions (NonZero of the condition, its first extent
    entries: ONNX Runtime ignores the rest) into the stream's workspace, then Gather along the axis
    (the flattened input without one).
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..errors import HipepError
from .gpu_binding_core import Arg, KernelOp, NoKernel, _binding, _prod, ptr, workspace_regions
from .gpu_bindings_data import _gather_bind

MODULE = "nonzero"
MAX_RANK = 8  # HIPEP_NONZERO_MAX_RANK
_THREADS = 1024  # the one block's threads: a chunk of the input per scan
_TYPES = {"float32": "f32", "float16": "f16", "uint8": "u8", "int32": "i32", "int64": "i64", "bool": "bool"}


class NonZeroArgs(ctypes.Structure):
    _fields_ = [("n", ctypes.c_longlong), ("count", ctypes.c_longlong), ("dims", ctypes.c_longlong * MAX_RANK),
                ("rank", ctypes.c_int)]


def _type_check(position: int):
    def check(attrs, dtypes, shapes, values):
        d = dtypes[position] if len(dtypes) > position else ""
        if d and d not in _TYPES:
            return f"input {position} of element type {d}"
        return None
    return check


def nonzero_op(x: Arg, shape, y_ptr: int, count: int, what: str) -> KernelOp:
    """The launch writing the coordinates (in `shape`, at most MAX_RANK axes) of x's first
    prod(shape) elements that are nonzero, [len(shape), count] int64 at y_ptr."""
    t = _TYPES.get(x.dtype.name)
    if t is None:
        raise NoKernel(f"{what} of element type {x.dtype.name}")
    dims = [int(d) for d in shape] or [1]
    if len(dims) > MAX_RANK:
        raise NoKernel(f"{what} of a rank-{len(dims)} input (at most {MAX_RANK})")
    n = _prod(dims)
    threads = min(_THREADS, max(32, 1 << max(0, (n - 1).bit_length())))
    args = NonZeroArgs(n, count, (ctypes.c_longlong * MAX_RANK)(*dims), len(dims))
    return KernelOp(f"hipep_nonzero_{t}", (1, 1, 1), (threads, 1, 1), [ptr(x), ctypes.c_uint64(y_ptr), args],
                    module=MODULE)


@_binding("::NonZero", check=_type_check(0), modules=(MODULE,))
def _nonzero_bind(ins, outs, attrs, target):
    x, y = ins[0], outs[0]
    if y is None:
        raise NoKernel("NonZero: an output nobody reads")
    rank = max(x.ndim, 1)  # a scalar is read as a one-element vector, as ONNX Runtime reads it
    if y.ndim != 2 or int(y.shape[0]) != rank:
        raise HipepError(f"NonZero: output of shape {list(y.shape)} for a rank-{x.ndim} input (expected [{rank}, n])")
    count = int(y.shape[1])
    if count == 0:
        return []
    return [nonzero_op(x, x.shape, y.ptr, count, "NonZero")]


@_binding("::Compress", check=_type_check(1), modules=(MODULE, "gather"))
def _compress_bind(ins, outs, attrs, target):
    x, cond, y = ins[0], ins[1], outs[0]
    if cond.ndim != 1:
        raise HipepError(f"Compress: condition must be 1-D, got shape {list(cond.shape)}")
    axis = attrs.get("axis")
    if axis is None:
        data = Arg(x.ptr, (x.size,), x.dtype)
        axis = 0
    else:
        axis = int(axis) + x.ndim if int(axis) < 0 else int(axis)
        data = x
    count = int(y.shape[axis]) if y.ndim else 0
    if y.size == 0:
        return []
    extent = min(int(cond.shape[0]), int(data.shape[axis]))  # entries past the axis are ignored
    (indices,) = workspace_regions(target, "Compress", [count * 8])
    ops = [nonzero_op(cond, (extent,), indices, count, "Compress")]
    return ops + _gather_bind([data, Arg(indices, (count,), np.dtype(np.int64))], [y], {"axis": axis}, target)
