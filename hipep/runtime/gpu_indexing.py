"""GPU bindings of the ops that index by a tensor of indices: GatherElements, GatherND,
ScatterElements, its opset-9 name Scatter, ScatterND (kernels/indexing.hip; the scatters'
reductions kernels/scatter_reduce.hip), TensorScatter and ReverseSequence (kernels/indexing.hip).

Registered into the kernel table (hipep.runtime.gpu_kernels) when it is imported.

Gathers move elements by size (1 to 8 bytes; GatherND's slices up to 16-byte words), so every
element type of the registry runs. Scatters copy data into the output, then apply the updates:
  * reduction 'none' gives ONNX Runtime's CPU answer (the last of repeated indices wins) on every
    run: a mark pass records, per target, the highest update id aiming at it in a zeroed winner
    array in the stream's workspace (4 bytes per data element, or per data slice for ScatterND),
    and only those updates write. Constant indices without repeats skip the winners;
  * add, mul, max, min use atomics on the output for f16, f32, f64 and every integer type, and
    bool's add (or) and mul (and); float results depend on the order updates arrive in, within
    rounding. bfloat16 is not in the registry's types for these ops, so it has no reduction kernel.
An index out of range is reported through the stream's fault record (hipep.runtime.gpu_faults) as
the host's error naming the node; the kernels write nothing outside their buffers.

TensorScatter copies past_cache into present_cache, unless ORT gave present the past's own buffer
(the registry's `inplace`: a decode step updating the cache in place), then one launch writes the
update's rows: rows of the axes after the sequence axis, moved as the widest words their bytes and
the pointers allow. A write index out of range is reported; its batch entry keeps past's rows.

ReverseSequence: one launch, a thread an element, reading its batch entry's length on the device;
a length out of range is reported and its entry copied as it is.

MaxUnpool (kernels/max_unpool.hip) is a scatter of X into a zero-filled Y over the flattened
tensors, the last of repeated indices winning as in the scatters; an index outside Y is reported.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..errors import HipepError
# the reference's own shape rules
from ..ops.indexing import TS, reverse_sequence_axes, reverse_sequence_check, tensor_scatter_axis
from .gpu_binding_core import (Arg, CopyOp, KernelOp, NoKernel, _binding, _cdiv, _prod, _word, contiguous_strides,
                               fill_ops, flat_config, merge_dims, ptr, workspace_regions)
from .gpu_faults import fault_param

MAX_RANK = 16  # kernels/indexing.h's HIPEP_INDEX_MAX_RANK
REDUCTIONS = ("none", "add", "mul", "max", "min")
# numpy dtype name -> the kernels' name of the element type of a reduction
_REDUCE_TYPES = {"float16": "f16", "float32": "f32", "float64": "f64", "int8": "i8", "uint8": "u8", "int16": "i16",
                 "uint16": "u16", "int32": "i32", "uint32": "u32", "int64": "i64", "uint64": "u64", "bool": "b8"}
# add and mul wrap to the same bits for signed and unsigned integers: one entry point serves both
_SAME_BITS = {"u8": "i8", "u16": "i16", "u32": "i32", "u64": "i64"}
_INDEX_TYPES = {"int32": "i32", "int64": "i64"}
# The winner ids are update number + 1 in 32 bits (0: no update).
MAX_WINNER_UPDATES = 2 ** 32 - 2


class ElementsArgs(ctypes.Structure):
    """kernels/indexing.h's hipep_elements_args."""
    _fields_ = [("n", ctypes.c_longlong), ("axis_extent", ctypes.c_longlong), ("axis_stride", ctypes.c_longlong),
                ("dims", ctypes.c_longlong * MAX_RANK), ("strides", ctypes.c_longlong * MAX_RANK),
                ("rank", ctypes.c_int)]


class NdArgs(ctypes.Structure):
    """kernels/indexing.h's hipep_nd_args."""
    _fields_ = [("rows", ctypes.c_longlong), ("per_batch", ctypes.c_longlong), ("batch_stride", ctypes.c_longlong),
                ("inner", ctypes.c_longlong), ("extents", ctypes.c_longlong * MAX_RANK),
                ("strides", ctypes.c_longlong * MAX_RANK), ("k", ctypes.c_int)]


# ---- claim checks --------------------------------------------------------------------------------

def _element_size(dtype: str) -> int | None:
    try:
        return np.dtype(dtype).itemsize
    except TypeError:
        return None


def _types_reason(dtypes, index_types=("int32", "int64")) -> str | None:
    dtypes = list(dtypes or [])
    if dtypes and dtypes[0] and _element_size(dtypes[0]) not in (1, 2, 4, 8):
        return f"element type {dtypes[0]}"
    if len(dtypes) > 1 and dtypes[1] and dtypes[1] not in index_types:
        return f"indices of type {dtypes[1]}"
    return None


def _rank_reason(shapes, k: int) -> str | None:
    shape = shapes[k] if shapes and len(shapes) > k else None
    if shape is not None and len(shape) > MAX_RANK:
        return f"indices of rank {len(shape)} (at most {MAX_RANK})"
    return None


def _reduction_reason(attrs, dtypes) -> str | None:
    reduction = attrs.get("reduction", "none")
    if reduction not in REDUCTIONS:
        return f"reduction '{reduction}'"
    data = dtypes[0] if dtypes else ""
    if reduction != "none" and data:
        if data not in _REDUCE_TYPES:
            return f"reduction '{reduction}' on {data}"
        if data == "bool" and reduction in ("max", "min"):
            return f"reduction '{reduction}' on bool"
    return None


def _updates_reason(attrs, shapes, count) -> str | None:
    """Too many updates for the 32-bit winner ids of reduction 'none' (where the shapes are known)."""
    if attrs.get("reduction", "none") != "none" or not shapes or len(shapes) < 2 or shapes[1] is None:
        return None
    n = count(shapes[1])
    if n is not None and n > MAX_WINNER_UPDATES:
        return f"{n} updates with reduction 'none' (at most {MAX_WINNER_UPDATES})"
    return None


def _known_prod(dims) -> int | None:
    return _prod(dims) if all(isinstance(d, (int, np.integer)) for d in dims) else None


def _elements_check(attrs, dtypes, shapes, values):
    return _types_reason(dtypes) or _rank_reason(shapes, 1)


def _scatter_elements_check(attrs, dtypes, shapes, values):
    return (_types_reason(dtypes) or _rank_reason(shapes, 1) or _reduction_reason(attrs, dtypes)
            or _updates_reason(attrs, shapes, _known_prod))


def _gather_nd_check(attrs, dtypes, shapes, values):
    return _types_reason(dtypes, ("int64",)) or _nd_rank_reason(shapes)


def _scatter_nd_check(attrs, dtypes, shapes, values):
    return (_types_reason(dtypes, ("int64",)) or _nd_rank_reason(shapes) or _reduction_reason(attrs, dtypes)
            or _updates_reason(attrs, shapes, lambda s: _known_prod(s[:-1])))


def _nd_rank_reason(shapes) -> str | None:
    idx = shapes[1] if shapes and len(shapes) > 1 else None
    if idx and isinstance(idx[-1], (int, np.integer)) and idx[-1] > MAX_RANK:
        return f"index tuples of {idx[-1]} indices (at most {MAX_RANK})"
    return None


# ---- shared pieces -------------------------------------------------------------------------------

def _index_name(idx: Arg, allowed=("int32", "int64")) -> str:
    if idx.dtype.name not in allowed:
        raise NoKernel(f"indices of type {idx.dtype.name}")
    return _INDEX_TYPES[idx.dtype.name]


def _axis(attrs, rank: int, op_type: str) -> int:
    if rank == 0:
        raise HipepError(f"{op_type}: data must have rank >= 1, got a scalar")
    axis = int(attrs.get("axis", 0))
    return axis + rank if axis < 0 else axis


def _elements_args(data: Arg, idx: Arg, axis: int) -> ElementsArgs:
    """Element i of indices addresses data at sum_d coord_d(i) * strides[d] + j * axis_stride."""
    data_strides = contiguous_strides(data.shape)
    along = list(data_strides)
    along[axis] = 0  # the index value replaces the coordinate along the axis
    dims, (_, strides) = merge_dims(idx.shape, [contiguous_strides(idx.shape), along])
    if len(dims) > MAX_RANK:
        raise NoKernel(f"indices of rank {len(dims)} after merging axes (at most {MAX_RANK})")
    a = ElementsArgs()
    a.n, a.axis_extent, a.axis_stride, a.rank = idx.size, int(data.shape[axis]), data_strides[axis], len(dims)
    for d, (extent, stride) in enumerate(zip(dims, strides)):
        a.dims[d], a.strides[d] = extent, stride
    return a


def _row_config(words: int, rows: int) -> tuple[tuple, tuple]:
    """(grid, block) of a row kernel: threads along x over a row's words, rows along y."""
    bx = min(256, _cdiv(max(words, 1), 32) * 32)
    by = max(1, 256 // bx)
    return (max(1, min(_cdiv(words, bx), 65535)), max(1, min(_cdiv(rows, by), 65535)), 1), (bx, by, 1)


def _copy_data(data: Arg, out: Arg) -> list:
    if out.ptr == data.ptr or out.nbytes == 0:
        return []
    return [CopyOp(out.ptr, data.ptr, out.nbytes)]


def _winners(target, slots: int) -> tuple[int, list]:
    """A zeroed winner array of `slots` 32-bit words in the stream's workspace: (address, ops)."""
    (at,) = workspace_regions(target, "a scatter of repeated indices", [slots * 4])
    return at, fill_ops(Arg(at, (slots,), np.dtype(np.uint32)), b"\0\0\0\0", target)


def _distinct_targets(idx: Arg, updates: int, slots: int, key) -> bool:
    """Whether no two of `updates` can share one of `slots` targets: one update, no target at
    all (every index is out of range: the write pass reports it), or constant indices whose
    targets (`key(values)` -> one row per update) all differ. Out-of-range values: not known to
    be distinct (the kernels report them)."""
    if updates <= 1 or slots == 0:
        return True
    if not idx.constant or idx.value is None:
        return False
    targets = key(np.asarray(idx.value).astype(np.int64))
    if targets is None:
        return False
    return len(np.unique(targets, axis=0)) == len(targets)


def _reduce_entry(family: str, reduction: str, dtype: np.dtype, it: str, op_type: str) -> str:
    t = _REDUCE_TYPES.get(dtype.name)
    if t is None or reduction not in REDUCTIONS or (t == "b8" and reduction in ("max", "min")):
        raise NoKernel(f"{op_type} with reduction '{reduction}' on {dtype.name}")
    if reduction in ("add", "mul"):
        t = _SAME_BITS.get(t, t)
    return f"hipep_scatter_{family}_{reduction}_{t}_{it}"


# ---- GatherElements ------------------------------------------------------------------------------

@_binding("::GatherElements", check=_elements_check, modules=("indexing",))
def _gather_elements_bind(ins, outs, attrs, target):
    data, idx, out = ins[0], ins[1], outs[0]
    if out is None or out.size == 0:
        return []
    axis = _axis(attrs, data.ndim, "GatherElements")
    e = data.dtype.itemsize
    if e not in (1, 2, 4, 8):
        raise NoKernel(f"GatherElements of {e}-byte elements")
    it = _index_name(idx)
    args = _elements_args(data, idx, axis)
    fault = fault_param(target, f"input 1 (indices) into data axis {axis}")
    grid, block = flat_config(idx.size, target)
    return [KernelOp(f"hipep_gather_elements_w{e}_{it}", grid, block, [ptr(data), ptr(idx), ptr(out), args, fault],
                     module="indexing")]


# ---- ScatterElements, Scatter --------------------------------------------------------------------

def _scatter_elements_bind(ins, outs, attrs, target, op_type):
    data, idx, updates, out = ins[0], ins[1], ins[2], outs[0]
    axis = _axis(attrs, data.ndim, op_type)
    reduction = attrs.get("reduction", "none")
    ops = _copy_data(data, out)
    if idx.size == 0:
        return ops
    it = _index_name(idx)
    args = _elements_args(data, idx, axis)
    fault = fault_param(target, f"input 1 (indices) into data axis {axis}")
    grid, block = flat_config(idx.size, target)
    if reduction != "none":
        return ops + [KernelOp(_reduce_entry("elements", reduction, data.dtype, it, op_type), grid, block,
                               [ptr(idx), ptr(updates), ptr(out), args, fault], module="scatter_reduce")]
    e = data.dtype.itemsize
    if e not in (1, 2, 4, 8):
        raise NoKernel(f"{op_type} of {e}-byte elements")
    if idx.size > MAX_WINNER_UPDATES:
        raise NoKernel(f"{op_type} of {idx.size} updates (at most {MAX_WINNER_UPDATES})")

    def flat_targets(values):  # data offsets of constant indices; None where one is out of range
        extent = int(data.shape[axis])
        if ((values < -extent) | (values >= extent)).any():
            return None
        coords = np.indices(idx.shape).reshape(idx.ndim, -1)
        coords[axis] = np.where(values < 0, values + extent, values).reshape(-1)
        return np.ravel_multi_index(tuple(coords), data.shape)[:, None]

    winner = 0
    if not _distinct_targets(idx, idx.size, out.size, flat_targets):
        winner, zero = _winners(target, out.size)
        ops += zero
        ops.append(KernelOp(f"hipep_scatter_elements_mark_{it}", grid, block,
                            [ptr(idx), ctypes.c_uint64(winner), args, fault], module="indexing"))
    ops.append(KernelOp(f"hipep_scatter_elements_w{e}_{it}", grid, block,
                        [ptr(idx), ptr(updates), ptr(out), ctypes.c_uint64(winner), args, fault], module="indexing"))
    return ops


@_binding("::ScatterElements", check=_scatter_elements_check, modules=("indexing", "scatter_reduce", "copy"))
def _scatter_elements_bind_onnx(ins, outs, attrs, target):
    return _scatter_elements_bind(ins, outs, attrs, target, "ScatterElements")


@_binding("::Scatter", check=_scatter_elements_check, modules=("indexing", "copy"))
def _scatter_bind(ins, outs, attrs, target):
    return _scatter_elements_bind(ins, outs, {**attrs, "reduction": "none"}, target, "Scatter")


# ---- GatherND, ScatterND -------------------------------------------------------------------------

def _nd_args(data_shape, idx: Arg, batch_dims: int, e: int, word: int) -> NdArgs:
    """Row r of indices as [rows, k]: the slice of data at (r / per_batch) * batch_stride +
    sum_j idx[r, j] * strides[j] (words)."""
    k = int(idx.shape[-1])
    if k > MAX_RANK:
        raise NoKernel(f"index tuples of {k} indices (at most {MAX_RANK})")
    b = batch_dims
    if b + k > len(data_shape):
        raise HipepError(f"indices of shape {list(idx.shape)} index {k} axes of data of rank {len(data_shape)} after "
                         f"batch_dims={b}")
    rows = _prod(idx.shape[:-1])
    batches = _prod(data_shape[:b])
    a = NdArgs()
    a.rows, a.k = rows, k
    a.per_batch = max(1, rows // batches) if batches else 1
    ratio = word // e
    a.batch_stride = _prod(data_shape[b:]) // ratio
    a.inner = _prod(data_shape[b + k:]) // ratio
    for j in range(k):
        a.extents[j] = int(data_shape[b + j])
        a.strides[j] = _prod(data_shape[b + j + 1:]) // ratio
    return a


def _nd_what(b: int, k: int) -> str:
    if k == 1:
        return f"input 1 (indices) into data axis {b}"
    return f"input 1 (indices) into data axes {b}..{b + k - 1}"


@_binding("::GatherND", check=_gather_nd_check, modules=("indexing",))
def _gather_nd_bind(ins, outs, attrs, target):
    data, idx, out = ins[0], ins[1], outs[0]
    if out is None or out.size == 0:
        return []
    b = int(attrs.get("batch_dims", 0))
    it = _index_name(idx, ("int64",))
    e = data.dtype.itemsize
    k = int(idx.shape[-1])
    inner_bytes = _prod(data.shape[b + k:]) * e
    word = _word(e, [data.ptr, out.ptr], [inner_bytes])
    args = _nd_args(data.shape, idx, b, e, word)
    fault = fault_param(target, _nd_what(b, k))
    grid, block = _row_config(args.inner, args.rows)
    return [KernelOp(f"hipep_gather_nd_w{word}_{it}", grid, block, [ptr(data), ptr(idx), ptr(out), args, fault],
                     module="indexing")]


@_binding("::ScatterND", check=_scatter_nd_check, modules=("indexing", "scatter_reduce", "copy"))
def _scatter_nd_bind(ins, outs, attrs, target):
    data, idx, updates, out = ins[0], ins[1], ins[2], outs[0]
    reduction = attrs.get("reduction", "none")
    ops = _copy_data(data, out)
    it = _index_name(idx, ("int64",))
    e = data.dtype.itemsize
    k = int(idx.shape[-1])
    rows = _prod(idx.shape[:-1])
    inner = _prod(data.shape[k:])
    if rows == 0 or inner == 0:
        return ops
    fault = fault_param(target, _nd_what(0, k))
    if reduction != "none":
        entry = _reduce_entry("nd", reduction, data.dtype, it, "ScatterND")
        args = _nd_args(data.shape, idx, 0, e, e)
        grid, block = _row_config(args.inner, rows)
        return ops + [KernelOp(entry, grid, block, [ptr(idx), ptr(updates), ptr(out), args, fault],
                               module="scatter_reduce")]
    if rows > MAX_WINNER_UPDATES:
        raise NoKernel(f"ScatterND of {rows} updates (at most {MAX_WINNER_UPDATES})")
    word = _word(e, [out.ptr, updates.ptr], [inner * e])
    args = _nd_args(data.shape, idx, 0, e, word)
    grid, block = _row_config(args.inner, rows)

    def tuples(values):  # each update's index tuple, counted from the start; None where one is out of range
        extents = np.array([int(d) for d in data.shape[:k]], np.int64)
        values = values.reshape(rows, k)
        if ((values < -extents) | (values >= extents)).any():
            return None
        return np.where(values < 0, values + extents, values)

    winner = 0
    slots = _prod(data.shape[:k])
    if not _distinct_targets(idx, rows, slots, tuples):
        winner, zero = _winners(target, slots)
        ops += zero
        mark_grid, mark_block = flat_config(rows, target)
        ops.append(KernelOp(f"hipep_scatter_nd_mark_{it}", mark_grid, mark_block,
                            [ptr(idx), ctypes.c_uint64(winner), args, fault], module="indexing"))
    ops.append(KernelOp(f"hipep_scatter_nd_w{word}_{it}", grid, block,
                        [ptr(idx), ptr(updates), ptr(out), ctypes.c_uint64(winner), args, fault], module="indexing"))
    return ops


# ---- TensorScatter -------------------------------------------------------------------------------

class TensorScatterArgs(ctypes.Structure):
    """kernels/indexing.hip's hipep_tensor_scatter_args."""
    _fields_ = [("rows", ctypes.c_longlong), ("seq", ctypes.c_longlong), ("max_seq", ctypes.c_longlong),
                ("per_batch", ctypes.c_longlong), ("inner", ctypes.c_longlong), ("circular", ctypes.c_int)]


def _tensor_scatter_check(attrs, dtypes, shapes, values):
    if attrs.get("mode", "linear") not in ("linear", "circular"):
        return f"mode '{attrs.get('mode')}'"
    if len(dtypes) > 2 and dtypes[2] and dtypes[2] != "int64":
        return f"write_indices of type {dtypes[2]}"
    return _types_reason(dtypes[:1])


@_binding("::TensorScatter", check=_tensor_scatter_check, modules=("indexing",))
def _tensor_scatter_bind(ins, outs, attrs, target):
    past, update, out = ins[0], ins[1], outs[0]
    indices = ins[2] if len(ins) > 2 else None
    if out is None:
        return []
    if indices is not None and indices.dtype != np.int64:
        raise NoKernel(f"{TS}: write_indices of type {indices.dtype.name}")
    axis = tensor_scatter_axis(past.shape, update.shape, None if indices is None else indices.shape, int(attrs["axis"]))
    e = past.dtype.itemsize
    if e not in (1, 2, 4, 8):
        raise NoKernel(f"{TS} of {e}-byte elements")
    ops = _copy_data(past, out)
    seq, max_seq = int(update.shape[axis]), int(past.shape[axis])
    inner = _prod(past.shape[axis + 1:])
    rows = _prod(update.shape[:axis]) * seq
    if rows == 0 or inner == 0:
        return ops
    word = _word(e, [out.ptr, update.ptr], [inner * e])
    a = TensorScatterArgs()
    a.rows, a.seq, a.max_seq, a.inner = rows, seq, max_seq, inner * e // word
    a.per_batch, a.circular = _prod(past.shape[1:axis]), int(attrs["mode"] == "circular")
    mode = "circular" if a.circular else "linear"
    fault = fault_param(target, f"input 2 (write_indices) in {mode} mode, sequence_length {seq} into "
                                f"max_sequence_length {max_seq}")
    grid, block = _row_config(a.inner, rows)
    params = [ptr(update), ptr(indices), ptr(out), a, fault]
    return ops + [KernelOp(f"hipep_tensor_scatter_w{word}", grid, block, params, module="indexing")]


# ---- ReverseSequence -----------------------------------------------------------------------------

class ReverseSequenceArgs(ctypes.Structure):
    _fields_ = [("n", ctypes.c_longlong), ("d1", ctypes.c_longlong), ("inner", ctypes.c_longlong),
                ("steps", ctypes.c_longlong), ("batch_first", ctypes.c_int)]


@_binding("::ReverseSequence", modules=("indexing",))
def _reverse_sequence_bind(ins, outs, attrs, target):
    x, lens, y = ins[0], ins[1], outs[0]
    if y is None or y.size == 0:
        return []
    batch, time = reverse_sequence_axes("ReverseSequence", attrs)
    reverse_sequence_check(x.shape, lens.shape, batch)
    e = x.dtype.itemsize
    if e not in (1, 2, 4, 8):
        raise NoKernel(f"ReverseSequence of {e}-byte elements")
    args = ReverseSequenceArgs(y.size, int(x.shape[1]), _prod(x.shape[2:]), int(x.shape[time]), int(batch == 0))
    fault = fault_param(target, "input 1 (sequence_lens)")
    grid, block = flat_config(y.size, target)
    return [KernelOp(f"hipep_reverse_sequence_w{e}", grid, block, [ptr(x), ptr(lens), ptr(y), args, fault],
                     module="indexing")]


# ---- MaxUnpool ------------------------------------------------------------------------------------
# Y zero-filled, the winners zero-filled, a mark pass and a write pass over X's elements.

class MaxUnpoolArgs(ctypes.Structure):
    """kernels/max_unpool.hip's hipep_max_unpool_args."""
    _fields_ = [("n", ctypes.c_longlong), ("size", ctypes.c_longlong)]


@_binding("::MaxUnpool", modules=("max_unpool", "copy"))
def _max_unpool_bind(ins, outs, attrs, target):
    x, idx, y = ins[0], ins[1], outs[0]
    if y is None:
        return []
    e = x.dtype.itemsize  # (I's shape is X's: the shape rule checked it)
    if e not in (2, 4, 8):
        raise NoKernel(f"MaxUnpool of {e}-byte elements")
    if x.size > MAX_WINNER_UPDATES:
        raise NoKernel(f"MaxUnpool of {x.size} elements (at most {MAX_WINNER_UPDATES})")
    ops = fill_ops(y, b"\0" * e, target)
    if x.size == 0:
        return ops
    if y.size == 0:  # (every index is out of range: the CPU device's error)
        raise HipepError(f"MaxUnpool: input 1 (I) indexes an empty output {list(y.shape)}")
    winner, fill = _winners(target, y.size)
    args = MaxUnpoolArgs(x.size, y.size)
    fault = fault_param(target, "input 1 (I) into Y")
    grid, block = flat_config(x.size, target)
    return ops + fill + [
        KernelOp("hipep_max_unpool_mark", grid, block, [ptr(idx), ctypes.c_uint64(winner), args, fault],
                 module="max_unpool"),
        KernelOp(f"hipep_max_unpool_write_w{e}", grid, block, [ptr(x), ptr(idx), ctypes.c_uint64(winner), ptr(y), args],
                 module="max_unpool")]
