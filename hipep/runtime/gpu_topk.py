"""GPU binding of TopK (sorted=1): kernels/topk.hip, a block per line (or per chunk of a long line)
sorting (value, index) items in shared memory, in ONNX Runtime's CPU EP's order (ties by the smaller
index, NaN above every number). A line longer than one block's sort is selected in passes through
the stream workspace: every chunk keeps its k best, until a line's candidates fit one block.
Registered in hipep.runtime.gpu_kernels' table on import."""
from __future__ import annotations

import ctypes

import numpy as np

from ..errors import HipepError
from ..ops._common import normalize_axis
from .gpu_binding_core import (KernelOp, NoKernel, _binding, _cdiv, _pow2_at_least, _prod, _values_or_attr, ptr,
                               workspace_regions)


class TopKArgs(ctypes.Structure):
    _fields_ = [("lines", ctypes.c_longlong), ("n", ctypes.c_longlong), ("inner", ctypes.c_longlong),
                ("k", ctypes.c_longlong), ("count", ctypes.c_longlong), ("chunk", ctypes.c_longlong),
                ("chunks", ctypes.c_longlong), ("sort", ctypes.c_int), ("largest", ctypes.c_int)]


# element type -> (kernel suffix, bytes of one sort item: a u64 for keys of up to 32 bits, a
# (u64 key, u32 index) pair padded to 16 for int64)
TOPK_TYPES = {"float32": ("f32", 8), "float16": ("f16", 8), "int8": ("i8", 8), "uint8": ("u8", 8),
              "int16": ("i16", 8), "int32": ("i32", 8), "int64": ("i64", 16)}
# Shared memory for one block's sort: 4096 items of 8 bytes (2048 of 16), under the 48 KiB a block
# gets without opting in. A power of two.
TOPK_SORT_BYTES = 32768
MAX_LINE = 2 ** 31 - 1  # an item holds the index's complement in 32 bits
GRID_LIMIT = 65535      # blocks per launch (they loop over further work)


def sort_capacity(itemsize: int) -> int:
    """Items one block sorts: a line up to this long is one block's work."""
    return TOPK_SORT_BYTES // itemsize


def max_long_k(itemsize: int) -> int:
    """The largest k for lines longer than one block's sort: a chunk keeps k of its >= capacity/2
    items, so every pass shrinks a line's candidates at least twofold."""
    return sort_capacity(itemsize) // 4


def _k_known(attrs, dtypes, values) -> tuple[bool, int | None]:
    """(whether k is known now, k): from input 1's value (opset 10+) or the opset-1 attribute."""
    if len(dtypes) > 1 and dtypes[1]:
        v = values[1] if len(values) > 1 else None
        if v is None:
            return False, None
        return True, int(np.asarray(v).reshape(-1)[0])
    k = attrs.get("k")
    return k is not None, None if k is None else int(k)


def _topk_check(attrs, dtypes, shapes, values):
    dtypes, shapes, values = list(dtypes or []), list(shapes or []), list(values or [])
    if not dtypes or dtypes[0] not in TOPK_TYPES:
        return f"element type {dtypes[0] if dtypes else '?'}"
    if int(attrs.get("sorted", 1)) != 1:
        return "sorted=0 (only the sorted order has a kernel)"
    itemsize = TOPK_TYPES[dtypes[0]][1]
    cap = sort_capacity(itemsize)
    x = shapes[0] if shapes else None
    extent = None
    if x is not None and len(x) > 0:
        axis = int(attrs.get("axis", -1))
        axis = axis + len(x) if axis < 0 else axis
        if 0 <= axis < len(x) and isinstance(x[axis], int):
            extent = x[axis]
    if extent is not None and extent > MAX_LINE:
        return f"a TopK axis of {extent} elements (at most {MAX_LINE})"
    if extent is not None and extent <= cap:
        return None  # one block per line, whatever k is
    known, k = _k_known(attrs, dtypes, values)
    if not known:
        return (f"K known only at run time over an axis that may be longer than {cap} elements "
                f"(such lines need k <= {max_long_k(itemsize)})")
    if k is not None and k > max_long_k(itemsize):
        where = "longer than" if extent is not None else "that may be longer than"
        return f"k={k} over an axis {where} {cap} elements (at most k={max_long_k(itemsize)} there)"
    return None


@_binding("::TopK", check=_topk_check, reads_values=True, modules=("topk",))
def _topk_bind(ins, outs, attrs, target):
    x = ins[0]
    values = outs[0] if outs else None
    indices = outs[1] if len(outs) > 1 else None
    spec = TOPK_TYPES.get(x.dtype.name)
    if spec is None:
        raise NoKernel(f"TopK on {x.dtype.name}")
    dt, itemsize = spec
    if int(attrs.get("sorted", 1)) != 1:
        raise NoKernel("TopK with sorted=0")
    if x.ndim == 0:
        raise HipepError("TopK: input must have rank >= 1, got a scalar")
    if len(ins) > 1 and ins[1] is not None:
        ks = _values_or_attr(ins, 1, attrs, "k")
        if len(ks) != 1:
            raise HipepError(f"TopK: K must hold one value, got {ks}")
        k = ks[0]
    elif attrs.get("k") is not None:  # opset 1
        k = int(attrs["k"])
    else:
        raise HipepError("TopK: no K input and no 'k' attribute")
    axis = normalize_axis("TopK", int(attrs.get("axis", -1)), x.ndim)
    outer, n, inner = _prod(x.shape[:axis]), int(x.shape[axis]), _prod(x.shape[axis + 1:])
    if not 0 <= k <= n:
        raise HipepError(f"TopK: k={k} must lie in [0, {n}] (the extent of axis {axis} of {list(x.shape)})")
    lines = outer * inner
    if lines * k == 0 or (values is None and indices is None):
        return []
    if n > MAX_LINE:
        raise NoKernel(f"TopK over an axis of {n} elements (at most {MAX_LINE})")
    cap = sort_capacity(itemsize)
    # The passes: (items per line, chunks per line, items per chunk); the last has one chunk.
    passes = []
    count = n
    while count > cap:
        if k > max_long_k(itemsize):
            raise NoKernel(f"TopK with k={k} over an axis of {n} elements (at most k={max_long_k(itemsize)} "
                           f"beyond {cap})")
        chunks = _cdiv(count, cap)
        passes.append((count, chunks, _cdiv(count, chunks)))
        count = chunks * k
    passes.append((count, 1, count))
    # Candidates alternate between two workspace buffers: pass i writes buffer i % 2.
    sizes = [0, 0]
    for i, (_, chunks, _) in enumerate(passes[:-1]):
        sizes[i % 2] = max(sizes[i % 2], lines * chunks * k * itemsize)
    buffers = [0, 0]
    if sizes[0]:
        buffers = workspace_regions(target, "TopK over a line longer than one block's sort", sizes)
    largest = int(bool(attrs.get("largest", 1)))
    ops = []
    for i, (count, chunks, chunk) in enumerate(passes):
        sort = _pow2_at_least(chunk)
        args = TopKArgs(lines, n, inner, k, count, chunk, chunks, sort, largest)
        grid, block = (min(lines * chunks, GRID_LIMIT), 1, 1), (min(1024, max(1, sort // 2)), 1, 1)
        cand_out = ctypes.c_uint64(buffers[i % 2] if chunks > 1 else 0)
        if i == 0:
            params = [ptr(x), ptr(values), ptr(indices), cand_out, args]
            entry = f"hipep_topk_{dt}_select"
        else:
            params = [ptr(x), ctypes.c_uint64(buffers[(i - 1) % 2]), ptr(values), ptr(indices), cand_out, args]
            entry = f"hipep_topk_{dt}_merge"
        ops.append(KernelOp(entry, grid, block, params, module="topk", smem=sort * itemsize))
    return ops
