"""Shape and data-movement ops. Every result is a fresh copy (never a view of an input)."""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ._common import (NP_DTYPES, has_input, input_rank, int_list, kernel, normalize_axes,
                      normalize_axis, result, shape_str, type_name)
from .registry import ALL, I64, INTS, REQUIRED, OpDef, register

I64S = frozenset({I64})


# ---- Reshape ---------------------------------------------------------------------------------

@kernel("Reshape")
def _reshape(inputs, attrs):
    data, shape = inputs
    target = int_list("Reshape", "shape", shape)
    allowzero = int(attrs["allowzero"])

    def fail(why):
        return RuntimeShapeError(f"Reshape: cannot reshape input of shape {shape_str(data.shape)} "
                                 f"({data.size} elements) to {target}: {why}")

    if allowzero and 0 in target and -1 in target:
        raise fail("with allowzero=1, shape may not contain both 0 and -1")
    out: list[int] = []
    infer = None
    for i, d in enumerate(target):
        if d == -1:
            if infer is not None:
                raise fail("more than one -1")
            infer = i
            out.append(1)
        elif d == 0 and not allowzero:
            if i >= data.ndim:
                raise fail(f"shape[{i}] = 0 copies input dim {i}, but the input has rank {data.ndim}")
            out.append(data.shape[i])
        elif d < 0:
            raise fail(f"shape[{i}] = {d} is negative")
        else:
            out.append(d)
    known = int(np.prod(out, dtype=np.int64))
    if infer is not None:
        if known == 0 or data.size % known:
            raise fail(f"the -1 dimension cannot be inferred ({data.size} elements do not divide "
                       f"into the other dims' product {known})")
        out[infer] = data.size // known
    elif known != data.size:
        raise fail(f"the target has {known} elements")
    return [result(data.reshape(out))]


register(OpDef("Reshape", (5, 13, 14, 19, 21, 23, 24, 25), ("T", "I"), ("T",),
               {"T": ALL, "I": I64S}, _reshape, attributes={"allowzero": 0}))


# ---- Transpose -------------------------------------------------------------------------------

def _check_perm(perm, rank):
    if sorted(perm) != list(range(rank)):
        return f"perm={list(perm)} is not a permutation of the {rank} axes of the input"
    return None


@kernel("Transpose")
def _transpose(inputs, attrs):
    x = inputs[0]
    perm = attrs.get("perm")
    perm = list(range(x.ndim))[::-1] if perm is None else [int(p) for p in perm]
    why = _check_perm(perm, x.ndim)
    if why:
        raise RuntimeShapeError(f"Transpose: {why} (input is {shape_str(x.shape)})")
    return [result(np.transpose(x, perm))]


def _claim_transpose(node, graph, attrs):
    rank = input_rank(node, graph)
    if attrs.get("perm") is not None and rank is not None:
        why = _check_perm(attrs["perm"], rank)
        if why:
            return f"attribute {why}"
    return None


register(OpDef("Transpose", (1, 13, 21, 23, 24, 25), ("T",), ("T",), {"T": ALL}, _transpose,
               attributes={"perm": None}, claim=_claim_transpose))


# ---- Concat ----------------------------------------------------------------------------------

@kernel("Concat")
def _concat(inputs, attrs):
    first = inputs[0]
    if first.ndim == 0:
        raise RuntimeShapeError("Concat: inputs must have rank >= 1, input 0 is a scalar")
    axis = normalize_axis("Concat", int(attrs["axis"]), first.ndim)
    for i, x in enumerate(inputs[1:], 1):
        if x.ndim != first.ndim:
            raise RuntimeShapeError(f"Concat: all inputs must have the same rank: input 0 is "
                                    f"{shape_str(first.shape)}, input {i} is {shape_str(x.shape)}")
        for d in range(first.ndim):
            if d != axis and x.shape[d] != first.shape[d]:
                raise RuntimeShapeError(
                    f"Concat: input {i} has shape {shape_str(x.shape)} but input 0 has "
                    f"{shape_str(first.shape)}; all dims except axis {axis} must match "
                    f"(dim {d}: {x.shape[d]} != {first.shape[d]})")
    return [result(np.concatenate(inputs, axis=axis))]


register(OpDef("Concat", (4, 11, 13), ("T",), ("T",), {"T": ALL}, _concat,
               attributes={"axis": REQUIRED}, variadic=True, min_inputs=1))


# ---- Slice -----------------------------------------------------------------------------------

def _slice_for(start: int, end: int, step: int, dim: int) -> slice:
    """ONNX Slice bounds (negative indices count from the end once, then clamp), as a slice."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        return slice(min(max(start, 0), dim), min(max(end, 0), dim), step)
    start = min(max(start, 0), dim - 1)
    end = min(max(end, -1), dim - 1)
    return slice(max(start, 0), end if end >= 0 else None, step)


@kernel("Slice")
def _slice(inputs, attrs):
    data = inputs[0]
    if len(inputs) > 1 and inputs[1] is not None:  # opset 10+: operands are inputs
        starts = int_list("Slice", "starts", inputs[1])
        ends = int_list("Slice", "ends", inputs[2] if len(inputs) > 2 else None)
        axes = int_list("Slice", "axes", inputs[3] if len(inputs) > 3 else None)
        steps = int_list("Slice", "steps", inputs[4] if len(inputs) > 4 else None)
    else:  # opset 1: attributes
        starts, ends, axes, steps = attrs.get("starts"), attrs.get("ends"), attrs.get("axes"), None
    if starts is None or ends is None:
        raise RuntimeShapeError("Slice: 'starts' and 'ends' are required")
    if axes is None:
        axes = list(range(len(starts)))
    if steps is None:
        steps = [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise RuntimeShapeError(f"Slice: starts, ends, axes and steps must have the same length, "
                                f"got {len(starts)}, {len(ends)}, {len(axes)}, {len(steps)}")
    axes = normalize_axes("Slice", axes, data.ndim)
    index = [slice(None)] * data.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st == 0:
            raise RuntimeShapeError(f"Slice: step for axis {a} is 0")
        index[a] = _slice_for(int(s), int(e), int(st), data.shape[a])
    return [result(data[tuple(index)])]


def _claim_slice(node, graph, attrs):
    form_attrs = [k for k in ("starts", "ends", "axes") if k in node.attributes]
    if node.since_version >= 10:
        if form_attrs:
            return f"attribute '{form_attrs[0]}' is not part of Slice opset {node.since_version} (inputs are)"
        if not (has_input(node, 1) and has_input(node, 2)):
            return f"Slice opset {node.since_version} needs inputs 'starts' and 'ends'"
        return None
    if len(node.inputs) > 1:
        return "Slice opset 1 takes a single input"
    if attrs.get("starts") is None or attrs.get("ends") is None:
        return "Slice opset 1 requires attributes 'starts' and 'ends'"
    return None


register(OpDef("Slice", (1, 10, 11, 13), ("T", "I", "I", "I", "I"), ("T",),
               {"T": ALL, "I": INTS}, _slice,
               attributes={"starts": None, "ends": None, "axes": None},
               claim=_claim_slice, min_inputs=1))


# ---- Split -----------------------------------------------------------------------------------

MAX_SPLIT_OUTPUTS = 256


@kernel("Split")
def _split(inputs, attrs):
    x = inputs[0]
    if x.ndim == 0:
        raise RuntimeShapeError("Split: input must have rank >= 1, got a scalar")
    axis = normalize_axis("Split", int(attrs["axis"]), x.ndim)
    dim = x.shape[axis]
    split = int_list("Split", "split", inputs[1] if len(inputs) > 1 else None)
    if split is None and attrs.get("split") is not None:
        split = [int(s) for s in attrs["split"]]
    if split is not None:
        if any(s < 0 for s in split) or sum(split) != dim:
            raise RuntimeShapeError(
                f"Split: split sizes {split} must be non-negative and sum to the extent {dim} of "
                f"axis {axis} (input is {shape_str(x.shape)}), got sum {sum(split)}")
    elif attrs.get("num_outputs") is not None:
        n = int(attrs["num_outputs"])
        chunk = -(-dim // n) if n > 0 else 0
        last = dim - chunk * (n - 1)
        if n < 1 or last <= 0:
            raise RuntimeShapeError(
                f"Split: num_outputs={n} cannot split axis {axis} of extent {dim} (input is "
                f"{shape_str(x.shape)}): chunks of {chunk} leave {last} for the last output")
        split = [chunk] * (n - 1) + [last]
    else:
        raise RuntimeShapeError("Split: neither 'split' nor 'num_outputs' is given, so the number "
                                "of outputs is unknown to the reference")
    bounds = np.cumsum([0] + split)
    index = [slice(None)] * x.ndim
    outs = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        index[axis] = slice(int(lo), int(hi))
        outs.append(result(x[tuple(index)]))
    return outs


def _claim_split(node, graph, attrs):
    v = node.since_version
    n_out = len(node.outputs)
    if attrs.get("split") is not None and v >= 13:
        return f"attribute 'split' is not part of Split opset {v} (it is an input since 13)"
    if has_input(node, 1) and v < 13:
        return f"Split opset {v} takes the sizes as attribute 'split', not as an input"
    if attrs.get("num_outputs") is not None:
        if v < 18:
            return f"attribute 'num_outputs' is not part of Split opset {v}"
        if has_input(node, 1):
            return "attribute 'num_outputs' and input 'split' are mutually exclusive"
        if attrs["num_outputs"] != n_out:
            return f"attribute num_outputs={attrs['num_outputs']} disagrees with the node's {n_out} outputs"
    sizes = attrs.get("split")
    if sizes is None and has_input(node, 1):
        c = graph.constant(node.inputs[1])
        sizes = None if c is None else c.reshape(-1).tolist()
        if c is None:
            return None  # sizes known at run time; the count is checked there
    if sizes is not None:
        if len(sizes) != n_out:
            return f"'split' has {len(sizes)} sizes but the node has {n_out} outputs"
        return None
    if attrs.get("num_outputs") is None:
        return ("Split without 'split' sizes or 'num_outputs' splits evenly into as many pieces as "
                f"the node has outputs ({n_out}); the reference kernel is not told the output "
                "count, so this form is not claimed")
    return None


register(OpDef("Split", (11, 13, 18), ("T", "I"), ("T",) * MAX_SPLIT_OUTPUTS,
               {"T": ALL, "I": I64S}, _split,
               attributes={"axis": 0, "split": None, "num_outputs": None},
               claim=_claim_split, min_inputs=1))


# ---- Gather ----------------------------------------------------------------------------------

@kernel("Gather")
def _gather(inputs, attrs):
    data, indices = inputs
    if data.ndim == 0:
        raise RuntimeShapeError("Gather: data must have rank >= 1, got a scalar")
    axis = normalize_axis("Gather", int(attrs["axis"]), data.ndim)
    extent = data.shape[axis]
    idx = indices.astype(np.int64)
    bad = (idx < -extent) | (idx >= extent)
    if np.any(bad):
        first = int(idx[bad].reshape(-1)[0])
        raise RuntimeShapeError(
            f"Gather: index {first} is out of range for axis {axis} of extent {extent} "
            f"(data is {shape_str(data.shape)}; valid indices are {-extent}..{extent - 1})")
    idx = np.where(idx < 0, idx + extent, idx)
    return [result(np.take(data, idx, axis=axis))]


register(OpDef("Gather", (1, 11, 13), ("T", "I"), ("T",), {"T": ALL, "I": INTS}, _gather,
               attributes={"axis": 0}))


# ---- Shape -----------------------------------------------------------------------------------

@kernel("Shape")
def _shape(inputs, attrs):
    x = inputs[0]
    rank = x.ndim

    def clamp(v):
        v = v + rank if v < 0 else v
        return min(max(v, 0), rank)

    start = clamp(int(attrs["start"]))
    end = rank if attrs.get("end") is None else clamp(int(attrs["end"]))
    return [result(np.array(x.shape[start:end] if start < end else [], dtype=np.int64), np.int64)]


register(OpDef("Shape", (1, 13, 15, 19, 21, 23, 24, 25), ("T",), ("I",), {"T": ALL, "I": I64S},
               _shape, attributes={"start": 0, "end": None}))


# ---- Squeeze / Unsqueeze ---------------------------------------------------------------------

@kernel("Squeeze")
def _squeeze(inputs, attrs):
    x = inputs[0]
    axes = int_list("Squeeze", "axes", inputs[1] if len(inputs) > 1 else None)
    if axes is None and attrs.get("axes") is not None:
        axes = [int(a) for a in attrs["axes"]]
    if axes is None:
        axes = [d for d in range(x.ndim) if x.shape[d] == 1]
    axes = normalize_axes("Squeeze", axes, x.ndim)
    for a in axes:
        if x.shape[a] != 1:
            raise RuntimeShapeError(f"Squeeze: axis {a} has extent {x.shape[a]}, not 1 "
                                    f"(input is {shape_str(x.shape)})")
    return [result(x.reshape([d for i, d in enumerate(x.shape) if i not in axes]))]


@kernel("Unsqueeze")
def _unsqueeze(inputs, attrs):
    x = inputs[0]
    axes = int_list("Unsqueeze", "axes", inputs[1] if len(inputs) > 1 else None)
    if axes is None:
        axes = attrs.get("axes")
    if axes is None:
        raise RuntimeShapeError("Unsqueeze: 'axes' is required")
    rank = x.ndim + len(axes)
    axes = normalize_axes("Unsqueeze", axes, rank)
    dims = iter(x.shape)
    return [result(x.reshape([1 if i in axes else next(dims) for i in range(rank)]))]


def _axes_form_claim(first_input_version: int, required: bool):
    """Claim for ops whose 'axes' moved from an attribute to input 1 at `first_input_version`."""
    def claim(node, graph, attrs):
        v = node.since_version
        if v >= first_input_version and attrs.get("axes") is not None:
            return f"attribute 'axes' is not part of {node.op_type} opset {v} (it is input 1)"
        if v < first_input_version and has_input(node, 1):
            return f"{node.op_type} opset {v} takes 'axes' as an attribute, not as an input"
        if required and attrs.get("axes") is None and not has_input(node, 1):
            return f"{node.op_type} requires 'axes'"
        return None
    return claim


register(OpDef("Squeeze", (1, 11, 13, 21, 23, 24, 25), ("T", "I"), ("T",), {"T": ALL, "I": I64S},
               _squeeze, attributes={"axes": None}, claim=_axes_form_claim(13, False), min_inputs=1))
register(OpDef("Unsqueeze", (1, 11, 13, 21, 23, 24, 25), ("T", "I"), ("T",), {"T": ALL, "I": I64S},
               _unsqueeze, attributes={"axes": None}, claim=_axes_form_claim(13, True), min_inputs=1))


# ---- Constant / Identity / Expand ------------------------------------------------------------

_CONSTANT_ATTRS = ("value", "value_float", "value_floats", "value_int", "value_ints",
                   "sparse_value", "value_string", "value_strings")


@kernel("Constant")
def _constant(inputs, attrs):
    if attrs.get("value") is not None:
        return [result(attrs["value"])]
    if attrs.get("value_float") is not None:
        return [result(attrs["value_float"], np.float32)]
    if attrs.get("value_floats") is not None:
        return [result(list(attrs["value_floats"]), np.float32).reshape(-1)]
    if attrs.get("value_int") is not None:
        return [result(attrs["value_int"], np.int64)]
    if attrs.get("value_ints") is not None:
        return [result(list(attrs["value_ints"]), np.int64).reshape(-1)]
    raise RuntimeShapeError("Constant: no supported value attribute")


def _claim_constant(node, graph, attrs):
    present = [k for k in _CONSTANT_ATTRS if k in node.attributes]
    if len(present) != 1:
        return f"Constant needs exactly one value attribute, got {present or 'none'}"
    which = present[0]
    if which == "sparse_value":
        return "attribute 'sparse_value' (a sparse tensor) is not supported"
    if which in ("value_string", "value_strings"):
        return f"attribute '{which}' (string tensors) is not supported"
    if which == "value":
        v = attrs["value"]
        if not isinstance(v, np.ndarray):
            return "attribute 'value' could not be read as a tensor"
        if v.dtype not in NP_DTYPES.values():
            names = ", ".join(type_name(t) for t in sorted(NP_DTYPES))
            return f"attribute 'value' has dtype {v.dtype}; supported: {names}"
    return None


register(OpDef("Constant", (1, 9, 11, 12, 13, 19, 21, 23, 24, 25), (), ("T",), {"T": ALL},
               _constant, attributes={k: None for k in _CONSTANT_ATTRS}, claim=_claim_constant))

register(OpDef("Identity", (1, 13, 14, 16, 19, 21, 23, 24, 25), ("T",), ("T",), {"T": ALL},
               kernel("Identity")(lambda inputs, attrs: [result(inputs[0])])))


@kernel("Expand")
def _expand(inputs, attrs):
    x, shape = inputs
    target = int_list("Expand", "shape", shape)
    try:
        out = tuple(np.broadcast_shapes(x.shape, tuple(target)))
    except ValueError:
        raise RuntimeShapeError(f"Expand: input of shape {shape_str(x.shape)} cannot be broadcast "
                                f"with shape {target}") from None
    return [result(np.broadcast_to(x, out))]


register(OpDef("Expand", (8, 13), ("T", "I"), ("T",), {"T": ALL, "I": I64S}, _expand))
