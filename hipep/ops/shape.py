"""Shape and data-movement ops: Reshape, Transpose, Concat, Slice, Split, Gather and Shape (Squeeze,
Unsqueeze, Flatten, Expand, Tile, Pad, Constant and Identity are in dims.py). Every result is a
fresh copy (never a view of an input).

Pure data movement carries every element type numpy holds (registry.ANY_TENSOR): f32/f16/f64,
bool and all 8- to 64-bit integers (the int4 model builder's models Reshape a uint8 weight)."""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ._common import (at, elem_of, has_input, input_rank, int_list, kernel, known_value, normalize_axes, normalize_axis,
                      num_elements, operand_length, pshape_str, result, shape_of, shape_rule, shape_str, tensor_type)
from .registry import ANY_TENSOR_BF16, I64, INTS, OUTPUT_COUNT, REQUIRED, OpDef, register

I64S = frozenset({I64})


# ---- Reshape ---------------------------------------------------------------------------------

@kernel("Reshape")
def _reshape(inputs, attrs):
    data, shape = inputs
    target = int_list("Reshape", "shape", shape)
    allowzero = int(attrs["allowzero"]) == 1  # as ORT reads it: any other value is 0

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


@shape_rule("Reshape")
def _reshape_shape(types, values, attrs, num_outputs):
    elem = elem_of(types[0])
    data = shape_of(types[0])
    target = int_list("Reshape", "shape", known_value(types, values, 1))
    if target is None:  # rank from the shape operand's length, extents unknown
        r = operand_length(types[1])
        return [tensor_type(elem, None if r is None else (None,) * r)]
    allowzero = int(attrs["allowzero"]) == 1  # as ORT reads it: any other value is 0

    def fail(why):
        size = num_elements(data)
        return RuntimeShapeError(
            f"Reshape: cannot reshape input of shape {pshape_str(data)} "
            f"({'?' if size is None else size} elements) to {target}: {why}")

    if allowzero and 0 in target and -1 in target:
        raise fail("with allowzero=1, shape may not contain both 0 and -1")
    out: list = []
    infer = None
    copied: set[int] = set()  # input axes whose extent the target copies (0 entries)
    for i, d in enumerate(target):
        if d == -1:
            if infer is not None:
                raise fail("more than one -1")
            infer = i
            out.append(None)
        elif d == 0 and not allowzero:
            if data is None:
                out.append(None)
                continue
            if i >= len(data):
                raise fail(f"shape[{i}] = 0 copies input dim {i}, but the input has rank {len(data)}")
            out.append(data[i])
            copied.add(i)
        elif d < 0:
            raise fail(f"shape[{i}] = {d} is negative")
        else:
            out.append(d)
    if data is None:
        return [tensor_type(elem, tuple(out))]
    # Element counts: the input's dims that the target copies cancel with the copies, so only
    # the uncopied ones (all of them static, else nothing follows) and the others count.
    rest_in = [data[i] for i in range(len(data)) if i not in copied]
    rest_out = [d for i, d in enumerate(out) if i != infer and i not in copied]
    if any(d is None for d in rest_in) or any(d is None for d in rest_out):
        return [tensor_type(elem, tuple(out))]
    size = int(np.prod(rest_in, dtype=np.int64))
    known = int(np.prod(rest_out, dtype=np.int64))
    copied_dims = [data[i] for i in copied]
    if all(d is not None for d in copied_dims):  # fully static: the reference's checks, exactly
        c = int(np.prod(copied_dims, dtype=np.int64))
        total, k = size * c, known * c
        if infer is not None:
            if k == 0 or total % k:
                raise fail(f"the -1 dimension cannot be inferred ({total} elements do not divide "
                           f"into the other dims' product {k})")
            out[infer] = total // k
        elif k != total:
            raise fail(f"the target has {k} elements")
    elif infer is not None and known != 0 and size % known == 0:
        # The copied (dynamic) dims cancel: this is the -1 extent whenever the node is valid.
        out[infer] = size // known
    return [tensor_type(elem, tuple(out))]


register(OpDef("Reshape", (5, 13, 14, 19, 21, 23, 24, 25), ("T", "I"), ("T",),
               {"T": ANY_TENSOR_BF16, "I": I64S}, _reshape, attributes={"allowzero": 0},
               shape_rule=_reshape_shape, host_inputs=(1,), view=True))


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


@shape_rule("Transpose", symbolic=True)
def _transpose_shape(types, values, attrs, num_outputs):
    x = shape_of(types[0])
    perm = attrs.get("perm")
    perm = None if perm is None else [int(p) for p in perm]
    if x is None:
        return [tensor_type(elem_of(types[0]), None if perm is None else (None,) * len(perm))]
    perm = list(range(len(x)))[::-1] if perm is None else perm
    why = _check_perm(perm, len(x))
    if why:
        raise RuntimeShapeError(f"Transpose: {why} (input is {pshape_str(x)})")
    return [tensor_type(elem_of(types[0]), tuple(x[p] for p in perm))]


register(OpDef("Transpose", (1, 13, 21, 23, 24, 25), ("T",), ("T",), {"T": ANY_TENSOR_BF16}, _transpose,
               attributes={"perm": None}, claim=_claim_transpose, shape_rule=_transpose_shape))


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


@shape_rule("Concat", symbolic=True)
def _concat_shape(types, values, attrs, num_outputs):
    elem = next((t.elem_type for t in types if t is not None and t.elem_type), 0)
    ranked = [(i, t.shape) for i, t in enumerate(types) if t is not None and t.shape is not None]
    if not ranked:
        return [tensor_type(elem, None)]
    i0, first = ranked[0]
    if len(first) == 0:
        raise RuntimeShapeError(f"Concat: inputs must have rank >= 1, input {i0} is a scalar")
    for i, x in ranked[1:]:
        if len(x) != len(first):
            raise RuntimeShapeError(f"Concat: all inputs must have the same rank: input {i0} is "
                                    f"{pshape_str(first)}, input {i} is {pshape_str(x)}")
    rank = len(first)
    axis = normalize_axis("Concat", int(attrs["axis"]), rank)
    out = []
    for d in range(rank):
        if d == axis:
            dims = [x[d] for _, x in ranked]
            complete = len(ranked) == len(types) and all(v is not None for v in dims)
            out.append(sum(dims) if complete else None)
            continue
        known = None
        for i, x in ranked:  # all inputs share the non-axis extents: any static one is the one
            if x[d] is None:
                continue
            if known is not None and x[d] != known[1]:
                raise RuntimeShapeError(
                    f"Concat: input {i} has shape {pshape_str(x)} but input {known[0]} has "
                    f"{pshape_str(ranked[[j for j, _ in ranked].index(known[0])][1])}; all dims "
                    f"except axis {axis} must match (dim {d}: {x[d]} != {known[1]})")
            known = known or (i, x[d])
        out.append(None if known is None else known[1])
    return [tensor_type(elem, tuple(out))]


register(OpDef("Concat", (4, 11, 13), ("T",), ("T",), {"T": ANY_TENSOR_BF16}, _concat,
               attributes={"axis": REQUIRED}, variadic=True, min_inputs=1,
               shape_rule=_concat_shape))


# ---- Slice -----------------------------------------------------------------------------------

# ORT's CPU EP reads an end of INT32_MAX or INT64_MAX as numpy's None ("to the end in the step's
# direction"), for negative steps too, where clamping alone would give an empty slice.
_END_OF_AXIS = (2 ** 31 - 1, 2 ** 63 - 1)


def _slice_for(start: int, end: int, step: int, dim: int) -> slice:
    """ONNX Slice bounds (negative indices count from the end once, then clamp), as a slice."""
    if step < 0 and end in _END_OF_AXIS:
        end = -dim - 1
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        return slice(min(max(start, 0), dim), min(max(end, 0), dim), step)
    start = min(max(start, 0), dim - 1)
    end = min(max(end, -1), dim - 1)
    return slice(max(start, 0), end if end >= 0 else None, step)


_SLICE_OPERANDS = ((1, "starts"), (2, "ends"), (3, "axes"), (4, "steps"))


def _slice_operands_1d(shapes) -> None:
    """ONNX Runtime refuses Slice operands that are not 1-D (a scalar too: "Ends must be a 1-D
    array"); `shapes` holds each input's shape (None where absent or unknown)."""
    for i, what in _SLICE_OPERANDS:
        shape = shapes[i] if i < len(shapes) else None
        if shape is not None and len(shape) != 1:
            raise RuntimeShapeError(f"Slice: {what} must be a 1-D tensor, got shape {pshape_str(shape)}")


@kernel("Slice")
def _slice(inputs, attrs):
    data = inputs[0]
    if len(inputs) > 1 and inputs[1] is not None:  # opset 10+: operands are inputs
        _slice_operands_1d([None if a is None else a.shape for a in inputs])
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


def _slice_extent(start: int, end: int, step: int, dim: int) -> int:
    """The extent Slice gives an axis of extent `dim` (what indexing with _slice_for gives)."""
    a, b, c = _slice_for(start, end, step, dim).indices(dim)
    return max(0, (b - a + c - 1) // c) if c > 0 else max(0, (a - b - c - 1) // -c)


def _slice_extent_dynamic(start: int, end: int, step: int) -> int | None:
    """The extent Slice gives an axis of unknown extent, where it is the same for every extent
    (e.g. starts=3, ends=1 gives 0), else None. The extent is monotone in the axis length between
    breakpoints near |start| and |end| and linear beyond them: sampling each piece's ends and the
    slope of the last one decides whether it is constant."""
    points = {0, 1, 2}
    for v in (abs(start), abs(end)):
        points.update(p for p in range(v - 2, v + 3) if p >= 0)
    big = max(points) + 1
    points.update((big, big + 1, 2 * big + 2 * abs(step) + 2))
    extents = {_slice_extent(start, end, step, n) for n in points}
    return extents.pop() if len(extents) == 1 else None


def _slice_operands(types, values, attrs):
    """(starts, ends, axes, steps) as int lists, None where present but unknown, and the lengths
    the operands' types give where their values are unknown. Absent axes/steps are "absent"."""
    if at(types, 1) is not None:  # opset 10+: operands are inputs
        ops = []
        for i, what in _SLICE_OPERANDS:
            if at(types, i) is None:
                ops.append("absent")
            else:
                ops.append(int_list("Slice", what, known_value(types, values, i)))
        lengths = [operand_length(at(types, i)) for i in (1, 2, 3, 4)]
        return ops, lengths
    ops = [attrs.get("starts"), attrs.get("ends"), attrs.get("axes"), "absent"]
    ops = [o if o == "absent" or o is None else [int(v) for v in o] for o in ops]
    if ops[2] is None:
        ops[2] = "absent"
    return ops, [None] * 4


@shape_rule("Slice")
def _slice_shape(types, values, attrs, num_outputs):
    elem = elem_of(types[0])
    x = shape_of(types[0])
    if at(types, 1) is not None:
        _slice_operands_1d([shape_of(t) for t in types])
    (starts, ends, axes, steps), lengths = _slice_operands(types, values, attrs)
    if at(types, 1) is None and (starts is None or ends is None):
        raise RuntimeShapeError("Slice: 'starts' and 'ends' are required")
    # Operand lengths: from values where known, else from the operands' static shapes.
    lens = [len(o) if isinstance(o, list) else (None if o == "absent" else n)
            for o, n in zip((starts, ends, axes, steps), lengths)]
    known_lens = [n for n in lens if n is not None]
    if len(set(known_lens)) > 1:
        shown = [lens[0] if o == "absent" else n for o, n in zip((starts, ends, axes, steps), lens)]
        got = ", ".join("?" if n is None else str(n) for n in shown)
        raise RuntimeShapeError(f"Slice: starts, ends, axes and steps must have the same length, "
                                f"got {got}")
    if x is None:
        return [tensor_type(elem, None)]
    count = known_lens[0] if known_lens else None
    if axes == "absent":
        axes = None if count is None else list(range(count))
    if axes is None:  # which axes are sliced is unknown
        return [tensor_type(elem, (None,) * len(x))]
    axes = normalize_axes("Slice", axes, len(x))
    if steps == "absent":
        steps = [1] * len(axes)
    out = list(x)
    for j, a in enumerate(axes):
        st = None if steps is None else steps[j]
        if st == 0:
            raise RuntimeShapeError(f"Slice: step for axis {a} is 0")
        if starts is None or ends is None or st is None:
            out[a] = None
        elif x[a] is None:
            out[a] = _slice_extent_dynamic(starts[j], ends[j], st)
        else:
            out[a] = _slice_extent(starts[j], ends[j], st, x[a])
    return [tensor_type(elem, tuple(out))]


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
               {"T": ANY_TENSOR_BF16, "I": INTS}, _slice,
               attributes={"starts": None, "ends": None, "axes": None},
               claim=_claim_slice, min_inputs=1, shape_rule=_slice_shape, host_inputs=(1, 2, 3, 4)))


# ---- Split -----------------------------------------------------------------------------------

MAX_SPLIT_OUTPUTS = 256


def _even_split(n: int, dim: int, axis: int, shape) -> list[int]:
    if n < 1 or dim % n:
        raise RuntimeShapeError(
            f"Split: axis {axis} of extent {dim} (input is {pshape_str(shape)}) cannot be split "
            f"evenly into {n} outputs")
    return [dim // n] * n


def _num_outputs_split(n: int, dim: int, axis: int, shape) -> list[int]:
    chunk = -(-dim // n) if n > 0 else 0
    last = dim - chunk * (n - 1)
    if n < 1 or last < 0:  # an empty last chunk is fine ("smaller"), as ORT's CPU EP has it
        raise RuntimeShapeError(
            f"Split: num_outputs={n} cannot split axis {axis} of extent {dim} (input is "
            f"{pshape_str(shape)}): chunks of {chunk} leave {last} for the last output")
    return [chunk] * (n - 1) + [last]


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
        split = _num_outputs_split(int(attrs["num_outputs"]), dim, axis, x.shape)
    elif attrs.get(OUTPUT_COUNT) is not None:  # opsets 11/13: equal parts, one per output
        split = _even_split(int(attrs[OUTPUT_COUNT]), dim, axis, x.shape)
    else:
        raise RuntimeShapeError("Split: neither 'split' nor 'num_outputs' is given, so the number "
                                "of outputs is unknown to the reference")
    n_out = attrs.get(OUTPUT_COUNT)
    if n_out is not None and len(split) != int(n_out):
        raise RuntimeShapeError(f"Split: 'split' has {len(split)} sizes {split} but the node has "
                                f"{n_out} outputs")
    bounds = np.cumsum([0] + split)
    index = [slice(None)] * x.ndim
    outs = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        index[axis] = slice(int(lo), int(hi))
        outs.append(result(x[tuple(index)]))
    return outs


@shape_rule("Split")
def _split_shape(types, values, attrs, num_outputs):
    elem = elem_of(types[0])
    x = shape_of(types[0])
    if x is not None and len(x) == 0:
        raise RuntimeShapeError("Split: input must have rank >= 1, got a scalar")
    split = int_list("Split", "split", known_value(types, values, 1))
    if split is None and at(types, 1) is None and attrs.get("split") is not None:
        split = [int(v) for v in attrs["split"]]
    n_attr = attrs.get("num_outputs")
    axis = dim = None
    if x is not None:
        axis = normalize_axis("Split", int(attrs["axis"]), len(x))
        dim = x[axis]
    if split is not None and (any(v < 0 for v in split) or (dim is not None and sum(split) != dim)):
        raise RuntimeShapeError(
            f"Split: split sizes {split} must be non-negative and sum to the extent "
            f"{'?' if dim is None else dim} of axis {'?' if axis is None else axis} (input is "
            f"{pshape_str(x)}), got sum {sum(split)}")
    if split is not None and len(split) != num_outputs:
        raise RuntimeShapeError(f"Split: 'split' has {len(split)} sizes {split} but the node has "
                                f"{num_outputs} outputs")
    if split is None and at(types, 1) is None and n_attr is not None and int(n_attr) != num_outputs:
        raise RuntimeShapeError(f"Split: num_outputs={n_attr} but the node has {num_outputs} outputs")
    if x is None:
        return [tensor_type(elem, None)] * num_outputs
    if split is not None:
        extents = split  # the sizes are the extents, whatever the input's (valid) extent
    elif at(types, 1) is not None or dim is None:
        extents = [None] * num_outputs
    elif n_attr is not None:
        extents = _num_outputs_split(int(n_attr), dim, axis, x)
    else:
        extents = _even_split(num_outputs, dim, axis, x)
    return [tensor_type(elem, x[:axis] + (e,) + x[axis + 1:]) for e in extents]


def _claim_split(node, graph, attrs):
    v = node.since_version
    n_out = len(node.outputs)
    if attrs.get("split") is not None and v >= 13:
        return f"attribute 'split' is not part of Split opset {v} (it is an input since 13)"
    if has_input(node, 1) and v < 13:
        return f"Split opset {v} takes the sizes as attribute 'split', not as an input"
    if v < 11 and int(attrs["axis"]) < 0:
        return f"attribute axis={attrs['axis']}: Split opset {v} takes non-negative axes only"
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
    if attrs.get("num_outputs") is None and v >= 18:
        return f"Split opset {v} needs input 'split' or attribute 'num_outputs' (neither is given)"
    return None  # opsets 11/13 without sizes: equal parts, one per output (OUTPUT_COUNT)


register(OpDef("Split", (2, 11, 13, 18), ("T", "I"), ("T",) * MAX_SPLIT_OUTPUTS,
               {"T": ANY_TENSOR_BF16, "I": I64S}, _split,
               attributes={"axis": 0, "split": None, "num_outputs": None},
               claim=_claim_split, min_inputs=1, shape_rule=_split_shape, host_inputs=(1,)))


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


@shape_rule("Gather", symbolic=True)
def _gather_shape(types, values, attrs, num_outputs):
    data, indices = shape_of(types[0]), shape_of(types[1])
    if data is not None and len(data) == 0:
        raise RuntimeShapeError("Gather: data must have rank >= 1, got a scalar")
    if data is None or indices is None:
        return [tensor_type(elem_of(types[0]), None)]
    axis = normalize_axis("Gather", int(attrs["axis"]), len(data))
    return [tensor_type(elem_of(types[0]), data[:axis] + indices + data[axis + 1:])]


register(OpDef("Gather", (1, 11, 13), ("T", "I"), ("T",), {"T": ANY_TENSOR_BF16, "I": INTS}, _gather,
               attributes={"axis": 0}, shape_rule=_gather_shape))


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


@shape_rule("Shape", symbolic=True)
def _shape_shape(types, values, attrs, num_outputs):
    x = shape_of(types[0])
    start = int(attrs["start"])
    end = attrs.get("end")
    if x is not None:
        rank = len(x)

        def clamp(v):
            v = v + rank if v < 0 else v
            return min(max(v, 0), rank)

        lo, hi = clamp(start), rank if end is None else clamp(int(end))
        return [tensor_type(I64, (max(hi - lo, 0),))]
    # Unknown rank: the length is known only when it is 0 for every rank (end at or before start,
    # both counted from the same side).
    if end is not None and int(end) <= start and (start < 0) == (int(end) < 0):
        return [tensor_type(I64, (0,))]
    return [tensor_type(I64, (None,))]


register(OpDef("Shape", (1, 13, 15, 19, 21, 23, 24, 25), ("T",), ("I",), {"T": ANY_TENSOR_BF16, "I": I64S},
               _shape, attributes={"start": 0, "end": None}, shape_rule=_shape_shape,
               extent_only_inputs=(0,)))


