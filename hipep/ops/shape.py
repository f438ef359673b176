"""Shape and data-movement ops. Every result is a fresh copy (never a view of an input).

Pure data movement carries every element type numpy holds (registry.ANY_TENSOR): f32/f16/f64,
bool and all 8- to 64-bit integers (the int4 model builder's models Reshape a uint8 weight)."""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ..graph import elem_type_of
from ._common import (NP_DTYPES, at, broadcast_partial, elem_of, has_input, input_rank, int_list,
                      kernel, known_value, normalize_axes, normalize_axis, num_elements,
                      operand_length, pshape_str, result, scalar_operand, shape_of, shape_rule,
                      shape_str, tensor_type, type_name)
from .registry import ALL, ANY_TENSOR, ANY_TENSOR_BF16, F32, I64, INTS, OUTPUT_COUNT, REQUIRED, OpDef, register

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
        for i, what in ((1, "starts"), (2, "ends"), (3, "axes"), (4, "steps")):
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


register(OpDef("Split", (11, 13, 18), ("T", "I"), ("T",) * MAX_SPLIT_OUTPUTS,
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


def _axes_operand(op_type, types, values, attrs):
    """(axes, present): axes as an int list (None where unknown or not given); present tells
    whether axes are given at all (input 1 or the attribute)."""
    if at(types, 1) is not None:
        return int_list(op_type, "axes", known_value(types, values, 1)), True
    if attrs.get("axes") is not None:
        return [int(a) for a in attrs["axes"]], True
    return None, False


@shape_rule("Squeeze")
def _squeeze_shape(types, values, attrs, num_outputs):
    elem = elem_of(types[0])
    x = shape_of(types[0])
    axes, present = _axes_operand("Squeeze", types, values, attrs)
    if x is None:
        return [tensor_type(elem, None)]
    if axes is None and present:  # axes given but their value is unknown
        k = operand_length(types[1])
        if k is None:
            return [tensor_type(elem, None)]
        candidates = [i for i, d in enumerate(x) if d is None or d == 1]
        if k > len(candidates):
            raise RuntimeShapeError(f"Squeeze: {k} axes to squeeze, but the input {pshape_str(x)} "
                                    f"has only {len(candidates)} that may have extent 1")
        if k < len(candidates):  # which of them go is unknown: only the rank follows
            return [tensor_type(elem, (None,) * (len(x) - k))]
        axes = candidates
    if axes is None:  # every extent-1 axis: undecidable while some extent is dynamic
        if any(d is None for d in x):
            return [tensor_type(elem, None)]
        axes = [i for i, d in enumerate(x) if d == 1]
    axes = normalize_axes("Squeeze", axes, len(x))
    for a in axes:
        if x[a] is not None and x[a] != 1:
            raise RuntimeShapeError(f"Squeeze: axis {a} has extent {x[a]}, not 1 "
                                    f"(input is {pshape_str(x)})")
    return [tensor_type(elem, tuple(d for i, d in enumerate(x) if i not in axes))]


@shape_rule("Unsqueeze")
def _unsqueeze_shape(types, values, attrs, num_outputs):
    elem = elem_of(types[0])
    x = shape_of(types[0])
    axes, present = _axes_operand("Unsqueeze", types, values, attrs)
    if not present:
        raise RuntimeShapeError("Unsqueeze: 'axes' is required")
    if axes is None:  # value unknown: the rank follows from the axes operand's length
        k = operand_length(types[1])
        return [tensor_type(elem, None if x is None or k is None else (None,) * (len(x) + k))]
    if x is None:
        return [tensor_type(elem, None)]
    rank = len(x) + len(axes)
    axes = normalize_axes("Unsqueeze", axes, rank)
    dims = iter(x)
    return [tensor_type(elem, tuple(1 if i in axes else next(dims) for i in range(rank)))]


register(OpDef("Squeeze", (1, 11, 13, 21, 23, 24, 25), ("T", "I"), ("T",), {"T": ANY_TENSOR_BF16, "I": I64S},
               _squeeze, attributes={"axes": None}, claim=_axes_form_claim(13, False), min_inputs=1,
               shape_rule=_squeeze_shape, host_inputs=(1,), view=True))
register(OpDef("Unsqueeze", (1, 11, 13, 21, 23, 24, 25), ("T", "I"), ("T",), {"T": ANY_TENSOR_BF16, "I": I64S},
               _unsqueeze, attributes={"axes": None}, claim=_axes_form_claim(13, True), min_inputs=1,
               shape_rule=_unsqueeze_shape, host_inputs=(1,), view=True))


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


@shape_rule("Constant")
def _constant_shape(types, values, attrs, num_outputs):
    if attrs.get("value") is not None:
        v = np.asarray(attrs["value"])
        return [tensor_type(elem_type_of(v.dtype), v.shape)]
    if attrs.get("value_float") is not None:
        return [tensor_type(F32, ())]
    if attrs.get("value_floats") is not None:
        return [tensor_type(F32, (len(attrs["value_floats"]),))]
    if attrs.get("value_int") is not None:
        return [tensor_type(I64, ())]
    if attrs.get("value_ints") is not None:
        return [tensor_type(I64, (len(attrs["value_ints"]),))]
    raise RuntimeShapeError("Constant: no supported value attribute")


register(OpDef("Constant", (1, 9, 11, 12, 13, 19, 21, 23, 24, 25), (), ("T",), {"T": ALL},
               _constant, attributes={k: None for k in _CONSTANT_ATTRS}, claim=_claim_constant,
               shape_rule=_constant_shape))


@shape_rule("Identity")
def _identity_shape(types, values, attrs, num_outputs):
    return [tensor_type(elem_of(types[0]), shape_of(types[0]))]


register(OpDef("Identity", (1, 13, 14, 16, 19, 21, 23, 24, 25), ("T",), ("T",), {"T": ANY_TENSOR_BF16},
               kernel("Identity")(lambda inputs, attrs: [result(inputs[0])]),
               shape_rule=_identity_shape, view=True))


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


@shape_rule("Expand")
def _expand_shape(types, values, attrs, num_outputs):
    elem = elem_of(types[0])
    x = shape_of(types[0])
    target = int_list("Expand", "shape", known_value(types, values, 1))
    if target is not None:
        if x is None:
            return [tensor_type(elem, None)]
        try:
            return [tensor_type(elem, broadcast_partial("Expand", [x, tuple(target)]))]
        except RuntimeShapeError:
            raise RuntimeShapeError(f"Expand: input of shape {pshape_str(x)} cannot be broadcast "
                                    f"with shape {target}") from None
    r = operand_length(types[1])
    if x is None or r is None:
        return [tensor_type(elem, None)]
    # The target's extents are unknown: a static extent of X other than 1 survives (the target's
    # must be 1 or equal to it); everything else is the target's.
    padded = (1,) * (max(r, len(x)) - len(x)) + tuple(x)
    return [tensor_type(elem, tuple(None if d is None or d == 1 else d for d in padded))]


register(OpDef("Expand", (8, 13), ("T", "I"), ("T",), {"T": ANY_TENSOR, "I": I64S}, _expand,
               shape_rule=_expand_shape, host_inputs=(1,)))


# ---- Flatten ---------------------------------------------------------------------------------

def _flatten_axis(axis: int, rank: int) -> int:
    if not -rank <= axis <= rank:
        raise RuntimeShapeError(f"Flatten: axis {axis} is out of range for a rank-{rank} input "
                                f"(expected {-rank} <= axis <= {rank})")
    return axis + rank if axis < 0 else axis


@kernel("Flatten")
def _flatten(inputs, attrs):
    x = inputs[0]
    axis = _flatten_axis(int(attrs["axis"]), x.ndim)
    lead = int(np.prod(x.shape[:axis], dtype=np.int64))
    return [result(x.reshape(lead, int(np.prod(x.shape[axis:], dtype=np.int64))))]


@shape_rule("Flatten")
def _flatten_shape(types, values, attrs, num_outputs):
    elem = elem_of(types[0])
    x = shape_of(types[0])
    if x is None:
        return [tensor_type(elem, (None, None))]
    axis = _flatten_axis(int(attrs["axis"]), len(x))
    return [tensor_type(elem, (num_elements(x[:axis]), num_elements(x[axis:])))]


def _claim_flatten(node, graph, attrs):
    axis = int(attrs["axis"])
    if node.since_version < 11 and axis < 0:
        return (f"attribute axis={axis}: Flatten-{node.since_version} takes a non-negative axis "
                f"(negative since 11)")
    rank = input_rank(node, graph)
    if rank is not None and not -rank <= axis <= rank:
        return f"attribute axis={axis} is out of range for a rank-{rank} input"
    return None


register(OpDef("Flatten", (1, 9, 11, 13, 21, 23, 24, 25), ("T",), ("T",), {"T": ANY_TENSOR_BF16}, _flatten,
               attributes={"axis": 1}, claim=_claim_flatten, shape_rule=_flatten_shape, view=True))


# ---- Tile ------------------------------------------------------------------------------------

def _tile_repeats(repeats, rank: int, shape) -> list[int]:
    reps = int_list("Tile", "repeats", repeats)
    if len(reps) != rank:
        raise RuntimeShapeError(f"Tile: 'repeats' has {len(reps)} values but the input "
                                f"{pshape_str(shape)} has rank {rank}")
    if any(r < 0 for r in reps):
        raise RuntimeShapeError(f"Tile: repeats {reps} must be non-negative")
    return reps


@kernel("Tile")
def _tile(inputs, attrs):
    x, repeats = inputs
    reps = _tile_repeats(repeats, x.ndim, x.shape)
    return [result(np.tile(x, reps) if x.ndim else x)]


@shape_rule("Tile")
def _tile_shape(types, values, attrs, num_outputs):
    elem = elem_of(types[0])
    x = shape_of(types[0])
    reps = known_value(types, values, 1)
    if x is None:
        r = operand_length(types[1]) if reps is None else reps.size
        return [tensor_type(elem, None if r is None else (None,) * r)]
    if reps is None:
        return [tensor_type(elem, tuple(0 if d == 0 else None for d in x))]
    reps = _tile_repeats(reps, len(x), x)
    return [tensor_type(elem, tuple(None if d is None else d * r for d, r in zip(x, reps)))]


register(OpDef("Tile", (6, 13), ("T", "I"), ("T",), {"T": ANY_TENSOR, "I": I64S}, _tile,
               shape_rule=_tile_shape, host_inputs=(1,)))


# ---- Pad -------------------------------------------------------------------------------------

PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad_widths(op_type, shape, pads, axes):
    """Per-axis (begin, end) pads of an input of (partial) shape; axes normalized."""
    rank = len(shape)
    if axes is None:
        axes = list(range(rank))
    else:
        axes = normalize_axes(op_type, axes, rank)
    if len(pads) != 2 * len(axes):
        raise RuntimeShapeError(f"{op_type}: 'pads' has {len(pads)} values, expected {2 * len(axes)} "
                                f"(begin and end for each of {len(axes)} axes; input is {pshape_str(shape)})")
    widths = [(0, 0)] * rank
    for j, a in enumerate(axes):
        widths[a] = (int(pads[j]), int(pads[len(axes) + j]))
    return widths


def _pad_check(op_type, shape, widths, mode):
    """Output extents (None where the input's is unknown); raises where ONNX Runtime does."""
    out = []
    for a, (d, (pb, pe)) in enumerate(zip(shape, widths)):
        if d is None:
            out.append(None)
            continue
        kept = d - max(-pb, 0) - max(-pe, 0)
        if kept < 0 or d + pb + pe < 0:
            raise RuntimeShapeError(f"{op_type}: pads ({pb}, {pe}) remove more than axis {a}'s extent "
                                    f"{d} (input is {pshape_str(shape)})")
        grow_b, grow_e = max(pb, 0), max(pe, 0)
        if mode != "constant" and (grow_b or grow_e):
            if kept == 0:
                raise RuntimeShapeError(f"{op_type}: '{mode}' mode cannot pad axis {a}, which is empty "
                                        f"after slicing (input is {pshape_str(shape)})")
            if mode == "reflect" and (kept < 2 or grow_b > kept - 1 or grow_e > kept - 1):
                raise RuntimeShapeError(
                    f"{op_type}: 'reflect' pads ({grow_b}, {grow_e}) of axis {a} must be at most its "
                    f"extent after slicing minus one ({kept - 1}; input is {pshape_str(shape)})")
        out.append(d + pb + pe)
    return out


def _pad_operands(inputs, attrs):
    if len(inputs) > 1 and inputs[1] is not None:  # opset 11+: pads, constant_value, axes inputs
        pads = int_list("Pad", "pads", inputs[1])
        value = at(inputs, 2)
        axes = int_list("Pad", "axes", at(inputs, 3))
        return pads, (None if value is None else scalar_operand("Pad", "constant_value", value)), axes
    if attrs.get("pads") is None:
        raise RuntimeShapeError("Pad: 'pads' is required")
    return [int(p) for p in attrs["pads"]], np.asarray(float(attrs.get("value") or 0.0)), None


@kernel("Pad")
def _pad(inputs, attrs):
    x = inputs[0]
    mode = attrs.get("mode", "constant")
    pads, value, axes = _pad_operands(inputs, attrs)
    widths = _pad_widths("Pad", x.shape, pads, axes)
    _pad_check("Pad", x.shape, widths, mode)
    # Negative pads crop first; the other modes then read the cropped input (as ORT does).
    crop = tuple(slice(max(-pb, 0), d - max(-pe, 0)) for d, (pb, pe) in zip(x.shape, widths))
    xs = x[crop]
    grow = [(max(pb, 0), max(pe, 0)) for pb, pe in widths]
    if mode == "constant":
        fill = np.zeros((), x.dtype) if value is None else np.asarray(value).astype(x.dtype)
        return [result(np.pad(xs, grow, mode="constant", constant_values=fill))]
    return [result(np.pad(xs, grow, mode={"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode]))]


@shape_rule("Pad")
def _pad_shape(types, values, attrs, num_outputs):
    elem = elem_of(types[0])
    x = shape_of(types[0])
    if at(types, 1) is not None:
        pads = int_list("Pad", "pads", known_value(types, values, 1))
        axes = int_list("Pad", "axes", known_value(types, values, 3))
        axes_unknown = at(types, 3) is not None and axes is None
    else:
        pads = None if attrs.get("pads") is None else [int(p) for p in attrs["pads"]]
        axes, axes_unknown = None, False
        if pads is None:
            raise RuntimeShapeError("Pad: 'pads' is required")
    if x is None:
        return [tensor_type(elem, None)]
    if pads is None or axes_unknown:
        padded = set(range(len(x))) if axes is None or axes_unknown else set(
            normalize_axes("Pad", axes, len(x)))
        return [tensor_type(elem, tuple(None if i in padded else d for i, d in enumerate(x)))]
    widths = _pad_widths("Pad", x, pads, axes)
    return [tensor_type(elem, tuple(_pad_check("Pad", x, widths, attrs.get("mode", "constant"))))]


def _claim_pad(node, graph, attrs):
    mode = attrs.get("mode", "constant")
    allowed = PAD_MODES if node.since_version >= 19 else PAD_MODES[:3]
    if mode not in allowed:
        return f"attribute mode='{mode}' is not one of {', '.join(allowed)} (Pad-{node.since_version})"
    if node.since_version < 11:
        if attrs.get("pads") is None:
            return f"Pad-{node.since_version} requires attribute 'pads'"
        if len(node.inputs) > 1:
            return f"Pad-{node.since_version} takes a single input (pads is an attribute)"
    elif not has_input(node, 1):
        return f"Pad-{node.since_version} needs input 'pads'"
    elif attrs.get("pads") is not None or attrs.get("value") is not None:
        return f"Pad-{node.since_version} takes pads and constant_value as inputs, not attributes"
    return None


register(OpDef("Pad", (2, 11, 13, 18, 19, 21, 23, 24, 25), ("T", "P", "T", "A"), ("T",),
               {"T": ANY_TENSOR, "P": I64S, "A": INTS}, _pad,
               attributes={"mode": "constant", "pads": None, "value": None}, claim=_claim_pad,
               min_inputs=1, shape_rule=_pad_shape, host_inputs=(1, 3)))
