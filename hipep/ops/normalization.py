"""Normalization: Softmax and LayerNormalization. Math in f32 (f16 upcast), rounded once."""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ._common import (at, elem_of, input_rank, kernel, normalize_axis, pshape_str, result,
                      shape_of, shape_rule, shape_str, tensor_type, unidirectional_ok, upcast)
from .registry import F32, FLOATS, OpDef, register


@kernel("Softmax")
def _softmax(inputs, attrs):
    x = inputs[0]
    if x.ndim == 0:
        raise RuntimeShapeError("Softmax: input must have rank >= 1, got a scalar")
    axis = normalize_axis("Softmax", int(attrs["axis"]), x.ndim)
    xs = upcast(x)
    if x.size == 0:
        return [result(xs, x.dtype)]
    e = np.exp(xs - np.max(xs, axis=axis, keepdims=True))
    return [result(e / np.sum(e, axis=axis, keepdims=True), x.dtype)]


def _claim_softmax(node, graph, attrs):
    rank = input_rank(node, graph)
    if node.since_version >= 13:
        if rank is not None and not -rank <= attrs["axis"] < rank:
            return f"attribute axis={attrs['axis']} is out of range for a rank-{rank} input"
        return None
    # Opsets 1 and 11 flatten the input to 2-D at `axis` (default 1) and normalize over the
    # flattened trailing block; that equals opset 13's per-axis softmax only when the block is
    # the last axis alone, which is the only case the reference (told no opset) computes.
    axis = node.attributes.get("axis", 1)
    if rank is None:
        return (f"Softmax opset {node.since_version} (coerce-to-2D semantics) needs a known input "
                f"rank to check axis={axis}; the input's rank is unknown")
    if not -rank <= axis < rank:
        return f"attribute axis={axis} is out of range for a rank-{rank} input"
    if (axis + rank if axis < 0 else axis) != rank - 1:
        return (f"Softmax opset {node.since_version} with axis={axis} on a rank-{rank} input "
                f"normalizes over the flattened dims [{axis}:] (coerce-to-2D semantics), which "
                f"hipep does not implement; only axis = last dim is supported before opset 13")
    return None


@shape_rule("Softmax")
def _softmax_shape(types, values, attrs, num_outputs):
    shape = shape_of(types[0])
    if shape is not None:
        if len(shape) == 0:
            raise RuntimeShapeError("Softmax: input must have rank >= 1, got a scalar")
        normalize_axis("Softmax", int(attrs["axis"]), len(shape))
    return [tensor_type(elem_of(types[0]), shape)]


register(OpDef("Softmax", (1, 11, 13), ("T",), ("T",), {"T": FLOATS}, _softmax,
               attributes={"axis": -1}, claim=_claim_softmax, shape_rule=_softmax_shape))


def _unidirectional(op_type, what, t, shape):
    try:
        ok = tuple(np.broadcast_shapes(t.shape, shape)) == tuple(shape)
    except ValueError:
        ok = False
    if not ok:
        raise RuntimeShapeError(f"{op_type}: {what} of shape {shape_str(t.shape)} cannot be "
                                f"broadcast to X's shape {shape_str(shape)}")


@kernel("LayerNormalization")
def _layer_norm(inputs, attrs):
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    if x.ndim == 0:
        raise RuntimeShapeError("LayerNormalization: X must have rank >= 1, got a scalar")
    axis = normalize_axis("LayerNormalization", int(attrs["axis"]), x.ndim)
    _unidirectional("LayerNormalization", "Scale", scale, x.shape)
    if bias is not None:
        _unidirectional("LayerNormalization", "B", bias, x.shape)
    axes = tuple(range(axis, x.ndim))
    xs = x.astype(np.float32)
    mean = np.mean(xs, axis=axes, keepdims=True, dtype=np.float32)
    d = xs - mean
    var = np.mean(d * d, axis=axes, keepdims=True, dtype=np.float32)
    inv = (np.float32(1) / np.sqrt(var + np.float32(attrs["epsilon"]))).astype(np.float32)
    y = d * inv * scale.astype(np.float32)
    if bias is not None:
        y = y + bias.astype(np.float32)
    return [result(y, x.dtype), result(mean, np.float32), result(inv, np.float32)]


@shape_rule("LayerNormalization")
def _layer_norm_shape(types, values, attrs, num_outputs):
    x = shape_of(types[0])
    stats = None
    if x is not None:
        if len(x) == 0:
            raise RuntimeShapeError("LayerNormalization: X must have rank >= 1, got a scalar")
        axis = normalize_axis("LayerNormalization", int(attrs["axis"]), len(x))
        for i, what in ((1, "Scale"), (2, "B")):
            t = shape_of(at(types, i))
            if unidirectional_ok(t, x) is False:
                raise RuntimeShapeError(f"LayerNormalization: {what} of shape {pshape_str(t)} cannot "
                                        f"be broadcast to X's shape {pshape_str(x)}")
            if t is not None and len(t) <= len(x):
                # Scale and B broadcast to X: their static non-1 extents are X's.
                pad = (None,) * (len(x) - len(t)) + tuple(t)
                x = tuple(p if d is None and p not in (None, 1) else d for d, p in zip(x, pad))
        stats = tuple(x[:axis]) + (1,) * (len(x) - axis)
    return [tensor_type(elem_of(types[0]), x), tensor_type(F32, stats), tensor_type(F32, stats)]


def _claim_layer_norm(node, graph, attrs):
    if attrs["stash_type"] != 1:
        return (f"attribute stash_type={attrs['stash_type']} is not supported "
                f"(only 1, statistics in f32)")
    rank = input_rank(node, graph)
    if rank is not None and not -rank <= attrs["axis"] < rank:
        return f"attribute axis={attrs['axis']} is out of range for a rank-{rank} input"
    return None


register(OpDef("LayerNormalization", (17,), ("T", "T", "T"), ("T", "U", "U"),
               {"T": FLOATS, "U": frozenset({F32})}, _layer_norm,
               attributes={"axis": -1, "epsilon": 1e-5, "stash_type": 1},
               claim=_claim_layer_norm, min_inputs=2, shape_rule=_layer_norm_shape))
