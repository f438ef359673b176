"""Indexing ops: GatherElements, GatherND, ScatterElements, ScatterND, Scatter, OneHot,
TensorScatter (the KV-cache update that pairs with Attention), and ReverseSequence.

Indices may be negative (counted from the end of their axis); an index outside [-n, n-1] is a
RuntimeShapeError naming the offending value, as ONNX Runtime rejects it. Scatter reductions
apply the updates in order (a repeated index sees them all; with reduction 'none' the last one
wins, as in ORT). f16 reductions run in f32, rounded once. (Where lives in elementwise.py.)
"""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ._common import (at, elem_of, input_type, kernel, known_value, normalize_axis, pshape_str,
                      result, scalar_operand, shape_of, shape_rule, shape_str, tensor_type, upcast)
from .registry import ANY_TENSOR, ANY_TENSOR_BF16, BOOL, F16, F32, I32, I64, INTS, OpDef, register

I64S = frozenset({I64})
REDUCTIONS = ("none", "add", "mul", "max", "min")


def _normalize(op_type: str, idx: np.ndarray, extent, what: str) -> np.ndarray:
    """Indices as int64 with negatives counted from the end; RuntimeShapeError if any is out of
    range. `extent` is an int or an array broadcasting against idx."""
    idx = idx.astype(np.int64)
    extent = np.asarray(extent, np.int64)
    bad = (idx < -extent) | (idx >= extent)
    if np.any(bad):
        pos = np.argwhere(bad)[0]
        first = int(idx[tuple(pos)])
        n = int(np.broadcast_to(extent, idx.shape)[tuple(pos)])
        raise RuntimeShapeError(f"{op_type}: index {first} is out of range for {what} of extent {n} "
                                f"(valid indices are {-n}..{n - 1})")
    return np.where(idx < 0, idx + extent, idx)


# ---- GatherElements --------------------------------------------------------------------------

def _elements_check(op_type, data_shape, idx_shape, axis, updates_shape=None):
    if len(data_shape) == 0:
        raise RuntimeShapeError(f"{op_type}: data must have rank >= 1, got a scalar")
    if len(idx_shape) != len(data_shape):
        raise RuntimeShapeError(f"{op_type}: indices must have the rank of data: data is "
                                f"{pshape_str(data_shape)}, indices is {pshape_str(idx_shape)}")
    for d, (n, m) in enumerate(zip(data_shape, idx_shape)):
        if d != axis and n is not None and m is not None and m > n:
            raise RuntimeShapeError(f"{op_type}: indices {pshape_str(idx_shape)} exceed data "
                                    f"{pshape_str(data_shape)} on axis {d} ({m} > {n})")
    if updates_shape is not None and len(updates_shape) == len(idx_shape):
        for u, m in zip(updates_shape, idx_shape):
            if u is not None and m is not None and u != m:
                raise RuntimeShapeError(f"{op_type}: updates must have the shape of indices: indices "
                                        f"is {pshape_str(idx_shape)}, updates is {pshape_str(updates_shape)}")
    elif updates_shape is not None:
        raise RuntimeShapeError(f"{op_type}: updates must have the shape of indices: indices is "
                                f"{pshape_str(idx_shape)}, updates is {pshape_str(updates_shape)}")


@kernel("GatherElements")
def _gather_elements(inputs, attrs):
    data, indices = inputs
    if data.ndim == 0:
        raise RuntimeShapeError("GatherElements: data must have rank >= 1, got a scalar")
    axis = normalize_axis("GatherElements", int(attrs["axis"]), data.ndim)
    _elements_check("GatherElements", data.shape, indices.shape, axis)
    idx = _normalize("GatherElements", indices, data.shape[axis], f"axis {axis}")
    window = tuple(slice(None) if d == axis else slice(0, indices.shape[d]) for d in range(data.ndim))
    return [result(np.take_along_axis(data[window], idx, axis=axis))]


@shape_rule("GatherElements")
def _gather_elements_shape(types, values, attrs, num_outputs):
    data, idx = shape_of(types[0]), shape_of(types[1])
    if data is not None and idx is not None:
        if len(data) == 0:
            raise RuntimeShapeError("GatherElements: data must have rank >= 1, got a scalar")
        _elements_check("GatherElements", data, idx,
                        normalize_axis("GatherElements", int(attrs["axis"]), len(data)))
    return [tensor_type(elem_of(types[0]), idx if idx is not None else
                        (None if data is None else (None,) * len(data)))]


register(OpDef("GatherElements", (11, 13), ("T", "I"), ("T",), {"T": ANY_TENSOR, "I": INTS},
               _gather_elements, attributes={"axis": 0}, shape_rule=_gather_elements_shape))


# ---- GatherND --------------------------------------------------------------------------------

def _nd_check(op_type, data, idx, b, updates=None):
    """Validates GatherND/ScatterND shapes (partial); returns the output (or updates) shape."""
    if b < 0:
        raise RuntimeShapeError(f"{op_type}: batch_dims={b} must be non-negative")
    if len(data) < 1 or len(idx) < 1:
        raise RuntimeShapeError(f"{op_type}: data and indices must have rank >= 1, data is "
                                f"{pshape_str(data)}, indices is {pshape_str(idx)}")
    if b >= min(len(data), len(idx)):
        raise RuntimeShapeError(f"{op_type}: batch_dims={b} must be smaller than the ranks of data "
                                f"{pshape_str(data)} and indices {pshape_str(idx)}")
    for d in range(b):
        if data[d] is not None and idx[d] is not None and data[d] != idx[d]:
            raise RuntimeShapeError(f"{op_type}: the batch dims of data {pshape_str(data)} and indices "
                                    f"{pshape_str(idx)} differ (dim {d}: {data[d]} != {idx[d]})")
    k = idx[-1]
    if k is None:
        return None
    if k > len(data) - b:
        raise RuntimeShapeError(f"{op_type}: indices {pshape_str(idx)} index {k} dims, but data "
                                f"{pshape_str(data)} has only {len(data) - b} after batch_dims={b}")
    batch = tuple(data[d] if data[d] is not None else idx[d] for d in range(b))
    return batch + tuple(idx[b:-1]) + tuple(data[b + k:])


@kernel("GatherND")
def _gather_nd(inputs, attrs):
    data, indices = inputs
    b = int(attrs.get("batch_dims", 0))
    out_shape = _nd_check("GatherND", data.shape, indices.shape, b)
    k = indices.shape[-1]
    bsz = int(np.prod(data.shape[:b], dtype=np.int64))
    d = data.reshape((bsz,) + data.shape[b:])
    idx = indices.reshape(bsz, -1, k)
    idx = _normalize("GatherND", idx, np.array(data.shape[b:b + k], np.int64), "its data axis")
    sel = (np.arange(bsz)[:, None],) + tuple(idx[..., j] for j in range(k))
    return [result(d[sel].reshape(out_shape))]


@shape_rule("GatherND")
def _gather_nd_shape(types, values, attrs, num_outputs):
    elem = elem_of(types[0])
    data, idx = shape_of(types[0]), shape_of(types[1])
    if data is None or idx is None:
        return [tensor_type(elem, None)]
    out = _nd_check("GatherND", data, idx, int(attrs.get("batch_dims", 0)))
    return [tensor_type(elem, out)]


def _claim_batch_dims(node, graph, attrs):
    if int(attrs.get("batch_dims", 0)) < 0:
        return f"attribute batch_dims={attrs['batch_dims']} must be non-negative"
    return None


register(OpDef("GatherND", (11, 12, 13), ("T", "I"), ("T",), {"T": ANY_TENSOR, "I": I64S}, _gather_nd,
               attributes={"batch_dims": 0}, claim=_claim_batch_dims, shape_rule=_gather_nd_shape))


# ---- ScatterND / ScatterElements / Scatter ---------------------------------------------------

_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}
_BOOL_UFUNCS = {"add": np.logical_or, "mul": np.logical_and}


def _scatter(out: np.ndarray, where: tuple, updates: np.ndarray, reduction: str) -> np.ndarray:
    """out (a fresh array) with updates applied at `where` (advanced-index tuple), in order."""
    if reduction == "none":
        out[where] = updates  # numpy assigns in order: the last of repeated indices wins
        return out
    if out.dtype == np.bool_:
        _BOOL_UFUNCS[reduction].at(out, where, updates)
        return out
    _UFUNCS[reduction].at(out, where, updates)
    return out


@kernel("ScatterND")
def _scatter_nd(inputs, attrs):
    data, indices, updates = inputs
    reduction = attrs.get("reduction", "none")
    want = _nd_check("ScatterND", data.shape, indices.shape, 0)
    if tuple(updates.shape) != tuple(want):
        raise RuntimeShapeError(f"ScatterND: updates must have shape {shape_str(want)} (indices "
                                f"{shape_str(indices.shape)}, data {shape_str(data.shape)}), got "
                                f"{shape_str(updates.shape)}")
    k = indices.shape[-1]
    idx = _normalize("ScatterND", indices.reshape(-1, k), np.array(data.shape[:k], np.int64),
                     "its data axis")
    upd = upcast(updates).reshape((-1,) + data.shape[k:])
    out = upcast(data).copy()
    _scatter(out, tuple(idx[:, j] for j in range(k)), upd, reduction)
    return [result(out, data.dtype)]


@shape_rule("ScatterND")
def _scatter_nd_shape(types, values, attrs, num_outputs):
    data, idx, upd = (shape_of(t) for t in types[:3])
    if data is not None and idx is not None:
        want = _nd_check("ScatterND", data, idx, 0)
        if want is not None and upd is not None:
            if len(upd) != len(want) or any(a is not None and b is not None and a != b
                                             for a, b in zip(want, upd)):
                raise RuntimeShapeError(f"ScatterND: updates must have shape {pshape_str(want)} "
                                        f"(indices {pshape_str(idx)}, data {pshape_str(data)}), got "
                                        f"{pshape_str(upd)}")
    return [tensor_type(elem_of(types[0]), data)]


def _scatter_elements_ref(op_type):
    @kernel(op_type)
    def reference(inputs, attrs):
        data, indices, updates = inputs
        if data.ndim == 0:
            raise RuntimeShapeError(f"{op_type}: data must have rank >= 1, got a scalar")
        axis = normalize_axis(op_type, int(attrs["axis"]), data.ndim)
        _elements_check(op_type, data.shape, indices.shape, axis, updates.shape)
        idx = _normalize(op_type, indices, data.shape[axis], f"axis {axis}")
        grid = list(np.indices(indices.shape, sparse=True))
        grid[axis] = idx
        out = upcast(data).copy()
        _scatter(out, tuple(grid), upcast(updates), attrs.get("reduction", "none"))
        return [result(out, data.dtype)]
    return reference


def _scatter_elements_rule(op_type):
    @shape_rule(op_type)
    def rule(types, values, attrs, num_outputs):
        data, idx, upd = (shape_of(t) for t in types[:3])
        if data is not None and idx is not None:
            if len(data) == 0:
                raise RuntimeShapeError(f"{op_type}: data must have rank >= 1, got a scalar")
            _elements_check(op_type, data, idx, normalize_axis(op_type, int(attrs["axis"]), len(data)), upd)
        return [tensor_type(elem_of(types[0]), data)]
    return rule


def _claim_reduction(node, graph, attrs):
    reduction = attrs.get("reduction", "none")
    if reduction not in REDUCTIONS or (node.since_version < 18 and reduction in ("max", "min")):
        allowed = REDUCTIONS if node.since_version >= 18 else REDUCTIONS[:3]
        return (f"attribute reduction='{reduction}' is not one of {', '.join(allowed)} "
                f"({node.op_type}-{node.since_version})")
    t = input_type(node, graph, 0)
    if t is not None and t.elem_type == BOOL and reduction in ("max", "min"):
        return f"reduction='{reduction}' on bool data is not supported (ONNX Runtime has none either)"
    return None


_SCATTER_TYPES = {"T": ANY_TENSOR, "I": INTS}
register(OpDef("ScatterND", (11, 13, 16, 18), ("T", "I", "T"), ("T",), {"T": ANY_TENSOR, "I": I64S},
               _scatter_nd, attributes={"reduction": "none"}, claim=_claim_reduction,
               shape_rule=_scatter_nd_shape))
register(OpDef("ScatterElements", (11, 13, 16, 18), ("T", "I", "T"), ("T",), _SCATTER_TYPES,
               _scatter_elements_ref("ScatterElements"), attributes={"axis": 0, "reduction": "none"},
               claim=_claim_reduction, shape_rule=_scatter_elements_rule("ScatterElements")))
# Scatter is ScatterElements' deprecated opset-9 name (ONNX Runtime runs it up to opset 10).
register(OpDef("Scatter", (9,), ("T", "I", "T"), ("T",), _SCATTER_TYPES, _scatter_elements_ref("Scatter"),
               attributes={"axis": 0}, shape_rule=_scatter_elements_rule("Scatter")))


# ---- OneHot ----------------------------------------------------------------------------------

def _depth(op_type, depth) -> int:
    d = scalar_operand(op_type, "depth", depth)
    n = int(np.trunc(d.astype(np.float64))) if d.dtype.kind == "f" else int(d)
    if n < 1:
        raise RuntimeShapeError(f"{op_type}: depth must be positive, got {d.item()}")
    return n


@kernel("OneHot")
def _one_hot(inputs, attrs):
    indices, depth, values = inputs
    n = _depth("OneHot", depth)
    if values.shape != (2,):
        raise RuntimeShapeError(f"OneHot: values must be [off_value, on_value] (shape [2]), got "
                                f"{shape_str(values.shape)}")
    axis = normalize_axis("OneHot", int(attrs["axis"]), indices.ndim + 1)
    # Negative indices count from the end; anything else out of range, and (as in ONNX Runtime)
    # a float index that is not a whole number, selects no position: all off_value.
    idx = upcast(indices) if indices.dtype.kind == "f" else indices.astype(np.int64)
    idx = np.where(idx < 0, idx + idx.dtype.type(n), idx)
    hot = idx[..., None] == np.arange(n, dtype=idx.dtype)
    out = np.where(hot, values[1], values[0])
    return [result(np.moveaxis(out, -1, axis), values.dtype)]


@shape_rule("OneHot")
def _one_hot_shape(types, values, attrs, num_outputs):
    elem = elem_of(at(types, 2))
    idx = shape_of(types[0])
    depth = known_value(types, values, 1)
    n = None if depth is None else _depth("OneHot", depth)
    if idx is None:
        return [tensor_type(elem, None)]
    axis = normalize_axis("OneHot", int(attrs["axis"]), len(idx) + 1)
    out = list(idx)
    out.insert(axis, n)
    return [tensor_type(elem, tuple(out))]


def _claim_one_hot(node, graph, attrs):
    t = input_type(node, graph, 0)
    if t is not None and t.rank is not None and not -(t.rank + 1) <= int(attrs["axis"]) <= t.rank:
        return f"attribute axis={attrs['axis']} is out of range for rank-{t.rank} indices"
    return None


_ONE_HOT_INDEX = frozenset({F32, F16, I32, I64})
# Fractional float indices convert differently in onnxruntime 1.31 and 1.32: integer indices only.
_ONE_HOT_INTEGER_INDEX = frozenset({I32, I64})
register(OpDef("OneHot", (9, 11, 28), ("I", "D", "T"), ("T",),
               {"I": _ONE_HOT_INTEGER_INDEX, "D": _ONE_HOT_INDEX, "T": ANY_TENSOR}, _one_hot,
               attributes={"axis": -1}, claim=_claim_one_hot, shape_rule=_one_hot_shape, host_inputs=(1,)))


# ---- TensorScatter ---------------------------------------------------------------------------
# present_cache = past_cache with update's rows written along `axis` (the sequence axis) from
# write_indices[b] on for batch entry b (0 without write_indices). Linear mode: the rows must fit,
# write_indices[b] + sequence_length <= max_sequence_length; circular mode: row positions wrap
# modulo max_sequence_length. ONNX Runtime rejects a negative write index in either mode, and an
# update longer than the cache.

TS = "TensorScatter"
TS_MODES = ("linear", "circular")


def _tensor_scatter_axis(rank: int, axis: int) -> int:
    if rank < 2:
        raise RuntimeShapeError(f"{TS}: past_cache must have rank >= 2 (batch, then the sequence axis), got "
                                f"rank {rank}")
    axis = normalize_axis(TS, axis, rank)
    if axis == 0:
        raise RuntimeShapeError(f"{TS}: axis 0 is the batch axis; the sequence axis must be another")
    return axis


def tensor_scatter_axis(past, update, indices, axis):
    """Validates the partial shapes of past_cache, update and write_indices (None: unknown);
    returns the normalized axis, or None where past's rank is unknown."""
    if past is None:
        return None
    axis = _tensor_scatter_axis(len(past), axis)
    if update is not None:
        if len(update) != len(past):
            raise RuntimeShapeError(f"{TS}: update {pshape_str(update)} must have the rank of past_cache "
                                    f"{pshape_str(past)}")
        for d, (m, u) in enumerate(zip(past, update)):
            if m is None or u is None:
                continue
            if d != axis and m != u:
                raise RuntimeShapeError(f"{TS}: update {pshape_str(update)} must match past_cache {pshape_str(past)} "
                                        f"on every axis but the sequence axis {axis} (axis {d}: {u} != {m})")
            if d == axis and u > m:
                raise RuntimeShapeError(f"{TS}: update's sequence_length {u} exceeds past_cache's "
                                        f"max_sequence_length {m} (axis {axis})")
    if indices is not None:
        if len(indices) != 1 or (indices[0] is not None and past[0] is not None and indices[0] != past[0]):
            raise RuntimeShapeError(f"{TS}: write_indices must be [batch] = {pshape_str(past[:1])}, got "
                                    f"{pshape_str(indices)}")
    return axis


@kernel(TS)
def _tensor_scatter(inputs, attrs):
    past, update = inputs[:2]
    indices = at(inputs, 2)
    axis = tensor_scatter_axis(past.shape, update.shape, None if indices is None else indices.shape,
                                 int(attrs["axis"]))
    batch, max_seq, seq = past.shape[0], past.shape[axis], update.shape[axis]
    starts = np.zeros(batch, np.int64) if indices is None else indices.astype(np.int64)
    circular = attrs["mode"] == "circular"
    for b, start in enumerate(starts.tolist()):
        if start < 0:
            raise RuntimeShapeError(f"{TS}: input 2 (write_indices): write_indices[{b}] = {start} is negative")
        if not circular and start + seq > max_seq:
            raise RuntimeShapeError(f"{TS}: input 2 (write_indices): write_indices[{b}] = {start} is out of range "
                                    f"[0, {max_seq - seq}] in linear mode: write_indices[{b}] + sequence_length "
                                    f"({start} + {seq}) exceeds max_sequence_length {max_seq}")
    if circular and max_seq:  # (reduced first: a write index near the int64 limit does not overflow)
        rows = (starts[:, None] % max_seq + np.arange(seq)[None, :]) % max_seq
    else:
        rows = starts[:, None] + np.arange(seq)[None, :]
    out = past.copy()
    # The sequence axis next to batch (views of out and update): out[b, rows[b, i]] = update[b, i].
    np.moveaxis(out, axis, 1)[np.arange(batch)[:, None], rows] = np.moveaxis(update, axis, 1)
    return [result(out, past.dtype)]


@shape_rule(TS)
def _tensor_scatter_shape(types, values, attrs, num_outputs):
    past, update, indices = shape_of(types[0]), shape_of(types[1]), shape_of(at(types, 2))
    tensor_scatter_axis(past, update, indices, int(attrs["axis"]))
    shape = past
    if shape is not None and update is not None:  # every axis but the sequence axis agrees with update's
        axis = normalize_axis(TS, int(attrs["axis"]), len(past))
        shape = tuple(m if m is not None or d == axis else u for d, (m, u) in enumerate(zip(past, update)))
    return [tensor_type(elem_of(types[0]), shape)]


def _claim_tensor_scatter(node, graph, attrs):
    if attrs["mode"] not in TS_MODES:
        return f"attribute mode='{attrs['mode']}' is not one of {', '.join(TS_MODES)}"
    t = input_type(node, graph, 0)
    if t is not None and t.rank is not None:
        if t.rank < 2:
            return f"past_cache of rank {t.rank}: it needs a batch axis and a sequence axis"
        axis = int(attrs["axis"])
        if not -t.rank <= axis < t.rank:
            return f"attribute axis={axis} is out of range for rank-{t.rank} past_cache"
        if axis % t.rank == 0:
            return f"attribute axis={axis} is the batch axis; the sequence axis must be another"
    return None


# present_cache may be past_cache's own buffer (a decode step updating the cache in place).
register(OpDef(TS, (24,), ("T", "T", "I64"), ("T",), {"T": ANY_TENSOR_BF16, "I64": I64S}, _tensor_scatter,
               attributes={"mode": "linear", "axis": -2}, claim=_claim_tensor_scatter, min_inputs=2,
               shape_rule=_tensor_scatter_shape, inplace={0: 0}))


# ---- ReverseSequence -------------------------------------------------------------------------

def reverse_sequence_axes(op_type: str, attrs) -> tuple[int, int]:
    batch, time = int(attrs.get("batch_axis", 1)), int(attrs.get("time_axis", 0))
    if {batch, time} != {0, 1}:
        raise RuntimeShapeError(f"{op_type}: batch_axis and time_axis must be 0 and 1, one each: got batch_axis "
                                f"{batch}, time_axis {time}")
    return batch, time


def reverse_sequence_check(x_shape, lens_shape, batch: int) -> None:
    if x_shape is not None and len(x_shape) < 2:
        raise RuntimeShapeError(f"ReverseSequence: input must have rank >= 2, got {pshape_str(x_shape)}")
    if lens_shape is not None and len(lens_shape) != 1:
        raise RuntimeShapeError(f"ReverseSequence: sequence_lens must be 1-D [batch], got {pshape_str(lens_shape)}")
    if x_shape is not None and lens_shape is not None and None not in (x_shape[batch], lens_shape[0]) \
            and x_shape[batch] != lens_shape[0]:
        raise RuntimeShapeError(f"ReverseSequence: sequence_lens has {lens_shape[0]} entries for input "
                                f"{pshape_str(x_shape)}'s {x_shape[batch]} batch entries (batch_axis {batch})")


@kernel("ReverseSequence")
def _reverse_sequence(inputs, attrs):
    x, lens = inputs
    batch, time = reverse_sequence_axes("ReverseSequence", attrs)
    reverse_sequence_check(x.shape, lens.shape, batch)
    steps = x.shape[time]
    out = x.copy()
    src, dst = np.moveaxis(x, (batch, time), (0, 1)), np.moveaxis(out, (batch, time), (0, 1))  # views
    for b, n in enumerate(lens.astype(np.int64)):
        if not 0 <= n <= steps:
            raise RuntimeShapeError(f"ReverseSequence: sequence length {n} of batch entry {b} is out of range "
                                    f"[0, {steps}] (the time axis' extent)")
        dst[b, :n] = src[b, :n][::-1]
    return [result(out)]


@shape_rule("ReverseSequence")
def _reverse_sequence_shape(types, values, attrs, num_outputs):
    batch, _ = reverse_sequence_axes("ReverseSequence", attrs)
    reverse_sequence_check(shape_of(types[0]), shape_of(types[1]), batch)
    return [tensor_type(elem_of(types[0]), shape_of(types[0]))]


# Opset 28 adds bf16 to T (claimed at both: the same data movement).
register(OpDef("ReverseSequence", (10, 28), ("T", "I64"), ("T",), {"T": ANY_TENSOR_BF16, "I64": I64S},
               _reverse_sequence, attributes={"batch_axis": 1, "time_axis": 0},
               shape_rule=_reverse_sequence_shape))
