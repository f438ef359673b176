"""Ops that add, drop, merge or grow dims, those that only make, forward or reinterpret a value,
and those that read only an input's extents: Squeeze, Unsqueeze, Constant, Identity, BitCast,
Expand, Flatten, Tile, Pad, Dropout (inference: the input forwarded) and Size. Every result is a
fresh copy (never a view of an input); pure data movement carries every element type numpy holds
(registry.ANY_TENSOR)."""
from __future__ import annotations

import numpy as np

from ..dtypes import numpy_dtype_for
from ..errors import RuntimeShapeError
from ..graph import elem_type_of
from ._common import (NP_DTYPES, at, broadcast_partial, elem_of, has_input, input_rank, input_type, int_list, kernel,
                      known_value, normalize_axes, num_elements, operand_length, pshape_str, result, scalar_operand,
                      shape_of, shape_rule, shape_str, tensor_type, type_name)
from .elementwise import f16_broken_before
from .registry import (ALL, ANY_TENSOR, ANY_TENSOR_BF16, BOOL, F32, FLOATS, I64, INTS, OUTPUT_COUNT, REQUIRED,
                       SINCE_VERSION, OpDef, register)

I64S = frozenset({I64})


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


# ---- BitCast ----------------------------------------------------------------------------------
# The input's bytes read as another type of the same width (little endian, as every device hipep
# runs on), copied into the output: not a view, since a plan's views keep their source's element
# type (a GPU moves the bytes with one device copy).

def _bitcast_dtype(elem_type: int) -> np.dtype | None:
    return numpy_dtype_for(elem_type) if elem_type in ANY_TENSOR_BF16 else None


@kernel("BitCast")
def _bitcast(inputs, attrs):
    x, to = inputs[0], _bitcast_dtype(int(attrs["to"]))
    if to is None or x.dtype.itemsize != to.itemsize:
        raise RuntimeShapeError(f"BitCast: {x.dtype.name} cannot be read as {type_name(int(attrs['to']))}")
    return [result(np.ascontiguousarray(x).view(to).reshape(x.shape))]


@shape_rule("BitCast")
def _bitcast_shape(types, values, attrs, num_outputs):
    return [tensor_type(int(attrs["to"]), shape_of(types[0]))]


def _claim_bitcast(node, graph, attrs):
    to, source = int(attrs["to"]), input_type(node, graph, 0).elem_type
    to_dt, source_dt = _bitcast_dtype(to), _bitcast_dtype(source)
    if to_dt is None:
        names = ", ".join(type_name(t) for t in sorted(ANY_TENSOR_BF16))
        return f"attribute to={type_name(to)} is not a supported target; supported: {names}"
    if source_dt is None or to_dt.itemsize != source_dt.itemsize:
        width = "?" if source_dt is None else 8 * source_dt.itemsize
        return (f"a bit cast from {type_name(source)} ({width} bits) to {type_name(to)} ({8 * to_dt.itemsize} "
                f"bits): the widths must be equal")
    if to_dt == np.bool_ and source_dt != np.bool_:
        # a byte other than 0 or 1 read as a bool is no value a bool can hold
        return f"a bit cast from {type_name(source)} to bool"
    return None


register(OpDef("BitCast", (26,), ("T1",), ("T2",), {"T1": ANY_TENSOR_BF16, "T2": ANY_TENSOR_BF16}, _bitcast,
               attributes={"to": REQUIRED}, claim=_claim_bitcast, shape_rule=_bitcast_shape))


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


# ---- Dropout (inference) -----------------------------------------------------------------------

def dropout_mask_value(since_version: int, x_dtype) -> np.ndarray:
    """The one value of Dropout's mask in inference. ORT's CPU kernel (the oracle) writes zeros of
    the input type (opset 7) or false (opset 10); from opset 12 it is all true, as the spec says."""
    if since_version < 10:
        return np.zeros((), x_dtype)
    return np.asarray(since_version >= 12, np.bool_)


@kernel("Dropout")
def _dropout(inputs, attrs):
    x = inputs[0]
    out = [result(x)]
    if attrs[OUTPUT_COUNT] > 1:  # inference: nothing is dropped
        value = dropout_mask_value(int(attrs.get(SINCE_VERSION, 12)), x.dtype)
        out.append(np.full(x.shape, value, value.dtype))
    return out


@shape_rule("Dropout")
def _dropout_shape(types, values, attrs, num_outputs):
    shape = shape_of(types[0])
    mask_elem = elem_of(types[0]) if int(attrs.get(SINCE_VERSION, 12)) < 10 else BOOL  # opset 7: mask is T
    return [tensor_type(elem_of(types[0]), shape), tensor_type(mask_elem, shape)]


def _claim_dropout(node, graph, attrs):
    v = node.since_version
    if v >= 12 and len(node.inputs) > 2 and node.inputs[2]:
        name = node.inputs[2]
        value = graph.constant(name)
        if value is None:
            return (f"input 2 (training_mode) '{name}' is not a constant; hipep runs Dropout in "
                    f"inference only and needs training_mode to be a constant false")
        if np.asarray(value).size != 1 or bool(np.asarray(value).reshape(-1)[0]):
            return "training_mode=true is not supported (hipep runs Dropout in inference only)"
    return None


register(OpDef("Dropout", (7, 10, 12, 13, 22), ("T", "T1", "B"), ("T", ""),
               {"T": FLOATS, "T1": FLOATS, "B": frozenset({BOOL})}, _dropout,
               attributes={"ratio": 0.5, "seed": None}, claim=_claim_dropout, min_inputs=1,
               shape_rule=_dropout_shape))


# ---- Size ----------------------------------------------------------------------------------------

@shape_rule("Size")
def _size_shape(types, values, attrs, num_outputs):
    return [tensor_type(I64, ())]


register(OpDef("Size", (1, 13, 19, 21, 23, 24, 25), ("T",), ("I",),
               {"T": ANY_TENSOR, "I": frozenset({I64})},
               kernel("Size")(lambda inputs, attrs: [result(inputs[0].size, np.int64)]),
               claim=f16_broken_before(13), shape_rule=_size_shape, extent_only_inputs=(0,)))
