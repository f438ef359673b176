"""GPU binding of Unique (opsets 11 and 28): kernels/unique.hip, one block comparing the items (the
input's elements, or its slices along `axis`) pairwise, with the outputs of hipep's CPU device
(hipep.ops.unique.distinct, numpy's np.unique) bit for bit: Y ascending (slices in lexicographic
order) or in order of first occurrence, each item's first index, every item's index into Y and the
counts; -0 equal to 0 (Y keeps the first occurrence's bits); NaNs one value without an axis or for
a 1-D input, and a slice holding a NaN distinct from every other slice, as numpy's.

Registered into the kernel table (hipep.runtime.gpu_kernels) when it is imported.

The outputs' lengths depend on the values, so hipep claims Unique on a GPU only where input 0's
values are known to the host before any launch (the registry marks it a host input; see
hipep.runtime.gpu_select): the shape program runs the CPU reference on them and sizes the outputs,
and the kernel computes them on the device from the device's copy of the input. The pairwise
comparison costs items * elements per block, so an input of more than MAX_ELEMENTS elements is
left to other EPs with the reason (an input handed in from outside is at most the host's read
limit anyway; only a constant could be larger).
"""
from __future__ import annotations

import ctypes

from ..errors import HipepError
from ..ops._common import normalize_axis
from .gpu_binding_core import KernelOp, NoKernel, _binding, _pow2_at_least, _prod, ptr, workspace_regions

MODULE = "unique"
MAX_ELEMENTS = 1 << 16
_THREADS = 1024  # the one block's threads: items in turn per pass
_TYPES = {"float32": "f32", "float64": "f64", "int64": "i64", "int8": "i8"}


class UniqueArgs(ctypes.Structure):
    _fields_ = [("items", ctypes.c_longlong), ("outer", ctypes.c_longlong), ("inner", ctypes.c_longlong),
                ("groups", ctypes.c_longlong), ("sorted", ctypes.c_int), ("nan_distinct", ctypes.c_int)]


def _too_many_elements(n: int) -> str:
    return f"an input of {n} elements, more than its one block's pairwise comparison takes ({MAX_ELEMENTS})"


def _unique_check(attrs, dtypes, shapes, values):
    d = dtypes[0] if dtypes else ""
    if d and d not in _TYPES:
        return f"input 0 of element type {d}"
    shape = shapes[0] if shapes else None
    if shape is not None and all(s is not None for s in shape) and _prod(shape) > MAX_ELEMENTS:
        return _too_many_elements(_prod(shape))
    return None


def _layout(shape, axis) -> tuple[int, int, int, int | None]:
    """(outer, items, inner, normalized axis or None): the input seen as [outer, items, inner]."""
    if axis is None:
        return 1, _prod(shape), 1, None
    if not shape:
        raise HipepError("Unique: a scalar input has no axis (expected a tensor of rank >= 1)")
    axis = normalize_axis("Unique", int(axis), len(shape))
    return _prod(shape[:axis]), int(shape[axis]), _prod(shape[axis + 1:]), axis


def _extent(what: str, arg, rank: int, dim: int) -> int:
    if arg.ndim != rank:
        raise HipepError(f"Unique: output {what} of shape {list(arg.shape)} (expected rank {rank})")
    return int(arg.shape[dim])


def _expect_shape(what: str, arg, want) -> None:
    if arg is not None and [int(d) for d in arg.shape] != [int(d) for d in want]:
        raise HipepError(f"Unique: output {what} of shape {list(arg.shape)} (expected {list(want)})")


@_binding("::Unique", check=_unique_check, modules=(MODULE,))
def _unique_bind(ins, outs, attrs, target):
    x = ins[0]
    y, first, inverse, counts = (list(outs) + [None] * 4)[:4]
    t = _TYPES.get(x.dtype.name)
    if t is None:
        raise NoKernel(f"Unique of element type {x.dtype.name}")
    shape = [int(d) for d in x.shape]
    if _prod(shape) > MAX_ELEMENTS:
        raise NoKernel(f"Unique of {_too_many_elements(_prod(shape))}")
    outer, items, inner, axis = _layout(shape, attrs.get("axis"))
    # The distinct items' count, from whichever of Y, indices and counts someone reads (the shape
    # program sized them from the same values); with none of them, only inverse is written.
    y_rank, y_axis = (1, 0) if axis is None else (len(shape), axis)
    if y is not None:
        groups = _extent("0 (Y)", y, y_rank, y_axis)
    elif first is not None:
        groups = _extent("1 (indices)", first, 1, 0)
    elif counts is not None:
        groups = _extent("3 (counts)", counts, 1, 0)
    else:
        groups = items
    if groups > items or (items > 0 and groups == 0):
        raise HipepError(f"Unique: outputs sized for {groups} distinct items of {items} "
                         f"(expected between 1 and {items})")
    y_shape = [groups] if axis is None else shape[:axis] + [groups] + shape[axis + 1:]
    _expect_shape("0 (Y)", y, y_shape)
    _expect_shape("1 (indices)", first, [groups])
    _expect_shape("2 (inverse_indices)", inverse, [items])
    _expect_shape("3 (counts)", counts, [groups])
    if items == 0 or all(o is None for o in (y, first, inverse, counts)):
        return []
    (work,) = workspace_regions(target, "Unique", [2 * items * 8])
    # numpy reads a 1-D input alike with or without an axis (NaNs collapsed); slices of a higher
    # rank are compared with ==, under which one holding a NaN equals no other.
    nan_distinct = int(axis is not None and len(shape) > 1)
    args = UniqueArgs(items, outer, inner, groups, int(bool(int(attrs.get("sorted", 1)))), nan_distinct)
    threads = min(_THREADS, max(32, _pow2_at_least(items)))
    return [KernelOp(f"hipep_unique_{t}", (1, 1, 1), (threads, 1, 1),
                     [ptr(x), ptr(y), ptr(first), ptr(inverse), ptr(counts), ctypes.c_uint64(work), args],
                     module=MODULE)]
