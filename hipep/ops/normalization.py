"""Normalization: Softmax, LogSoftmax, Hardmax, LayerNormalization, InstanceNormalization,
GroupNormalization, BatchNormalization, LpNormalization, MeanVarianceNormalization and
LRN. Math in f32 (f16 upcast), rounded once, unless ONNX Runtime rounds in between (noted).
f32 Softmax, LogSoftmax and LayerNormalization replay ORT 1.31's MLAS kernels and are bit-identical
to its CPU EP on x86-64 with AVX512 (mlas.py: mlas_exp_shifted / mlas_sum16, _layer_norm_rows).
"""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ._common import (NP_DTYPES, at, elem_of, input_rank, kernel, normalize_axes, normalize_axis, pshape_str, result,
                      shape_of, shape_rule, shape_str, tensor_type, unidirectional_ok, upcast)
from .mlas import _layer_norm_rows, _mlas_softmax_f32
from .registry import BF16, F16, F32, F64, FLOATS, OUTPUT_COUNT, REQUIRED, SINCE_VERSION, OpDef, register


BF16_DT = NP_DTYPES[BF16]


def softmax_axis(attrs) -> int:
    """The axis attribute, defaulting as the node's opset does: 1 before opset 13, -1 from 13."""
    axis = attrs.get("axis")
    if axis is None:
        axis = -1 if int(attrs.get(SINCE_VERSION, 13)) >= 13 else 1
    return int(axis)


def coerced_to_2d(fn):
    """Opsets 1 and 11 of Softmax, LogSoftmax and Hardmax flatten the input to 2-D at `axis` and
    normalize each row of the flattened trailing block; from 13 they work along `axis` alone."""
    def reference(inputs, attrs):
        x = inputs[0]
        if int(attrs.get(SINCE_VERSION, 13)) >= 13 or x.ndim == 0:
            return fn(inputs, attrs)
        axis = softmax_axis(attrs)
        axis = axis + x.ndim if axis < 0 else axis
        rows = int(np.prod(x.shape[:axis], dtype=np.int64))
        cols = int(np.prod(x.shape[axis:], dtype=np.int64))  # not -1: numpy cannot infer it from 0 rows
        flat = np.ascontiguousarray(x).reshape(rows, cols)
        out = fn([flat] + list(inputs[1:]), {**attrs, "axis": -1, SINCE_VERSION: 13})
        return [np.ascontiguousarray(o).reshape(x.shape) for o in out]
    return reference


@coerced_to_2d
@kernel("Softmax")
def _softmax(inputs, attrs):
    x = inputs[0]
    if x.ndim == 0:
        raise RuntimeShapeError("Softmax: input must have rank >= 1, got a scalar")
    axis = normalize_axis("Softmax", softmax_axis(attrs), x.ndim)
    xs = upcast(x)
    if x.size == 0:
        return [result(xs, x.dtype)]
    if x.dtype == np.float32:  # bit-exact: ORT's f32 kernel is MlasComputeSoftmax
        return [result(_mlas_softmax_f32(xs, axis), x.dtype)]
    e = np.exp(xs - np.max(xs, axis=axis, keepdims=True))
    return [result(e / np.sum(e, axis=axis, keepdims=True), x.dtype)]


def _claim_softmax(node, graph, attrs):
    """Softmax, LogSoftmax and Hardmax: the axis must fit the input's rank (opsets 1 and 11
    coerce the input to 2-D at that axis; the references do so too)."""
    rank = input_rank(node, graph)
    axis = softmax_axis(attrs)
    if rank is not None and not -rank <= axis < rank:
        return f"attribute axis={axis} is out of range for a rank-{rank} input"
    return None


def _softmax_like_shape(op_type: str):
    @shape_rule(op_type, symbolic=True)
    def rule(types, values, attrs, num_outputs):
        shape = shape_of(types[0])
        if shape is not None:
            if len(shape) == 0:
                raise RuntimeShapeError(f"{op_type}: input must have rank >= 1, got a scalar")
            normalize_axis(op_type, softmax_axis(attrs), len(shape))
        return [tensor_type(elem_of(types[0]), shape)]
    return rule


_softmax_shape = _softmax_like_shape("Softmax")


register(OpDef("Softmax", (1, 11, 13), ("T",), ("T",), {"T": FLOATS | {F64}}, _softmax,
               attributes={"axis": None}, claim=_claim_softmax, shape_rule=_softmax_shape))


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
    if 0 in x.shape[axis:]:  # no element to normalize over: ORT's CPU EP refuses it too
        raise RuntimeShapeError(f"LayerNormalization: X.shape[axis:] must hold at least one element, got "
                                f"{shape_str(x.shape[axis:])} (X is {shape_str(x.shape)}, axis {axis})")
    _unidirectional("LayerNormalization", "Scale", scale, x.shape)
    if bias is not None:
        _unidirectional("LayerNormalization", "B", bias, x.shape)
    axes = tuple(range(axis, x.ndim))
    xs = x.astype(np.float32)
    # bf16 runs ORT's f32 kernel on the widened input and rounds once, as ORT does
    if x.dtype in (np.float32, BF16_DT) and x.size:
        norm = tuple(x.shape[axis:])
        rows = xs.reshape(-1, int(np.prod(norm, dtype=np.int64)))
        s2 = np.broadcast_to(scale.astype(np.float32), x.shape)[(0,) * axis].reshape(-1)
        b2 = None if bias is None else np.broadcast_to(bias.astype(np.float32), x.shape)[(0,) * axis].reshape(-1)
        y, mean, inv = _layer_norm_rows(rows, s2, b2, float(attrs["epsilon"]))
        stats = tuple(x.shape[:axis]) + (1,) * (x.ndim - axis)
        return [result(y.reshape(x.shape), x.dtype), result(mean.reshape(stats), np.float32),
                result(inv.reshape(stats), np.float32)]
    mean = np.mean(xs, axis=axes, keepdims=True, dtype=np.float32)
    d = xs - mean
    var = np.mean(d * d, axis=axes, keepdims=True, dtype=np.float32)
    inv = (np.float32(1) / np.sqrt(var + np.float32(attrs["epsilon"]))).astype(np.float32)
    y = d * inv * scale.astype(np.float32)
    if bias is not None:
        y = y + bias.astype(np.float32)
    return [result(y, x.dtype), result(mean, np.float32), result(inv, np.float32)]


@shape_rule("LayerNormalization", symbolic=True)
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
               {"T": FLOATS | {BF16}, "U": frozenset({F32})}, _layer_norm,
               attributes={"axis": -1, "epsilon": 1e-5, "stash_type": 1},
               claim=_claim_layer_norm, min_inputs=2, shape_rule=_layer_norm_shape))


def _f16_broken_before(since: int):
    """Rejects f16 below opset `since`: ONNX Runtime's CPU EP cannot run those forms on f16."""
    def claim(node, graph, attrs):
        if node.since_version < since and graph.type_of(node.inputs[0]).elem_type == F16:
            return (f"f16 input to {node.op_type} opset {node.since_version} is not claimed: ONNX "
                    f"Runtime's CPU EP cannot run that form (f16 is claimed from opset {since})")
        return None
    return claim


def _both(first, second):
    return lambda node, graph, attrs: first(node, graph, attrs) or second(node, graph, attrs)


# ---- LogSoftmax / Hardmax ----------------------------------------------------------------------

def _softmax_like(op_type: str, fn):
    @coerced_to_2d
    @kernel(op_type)
    def reference(inputs, attrs):
        x = inputs[0]
        if x.ndim == 0:
            raise RuntimeShapeError(f"{op_type}: input must have rank >= 1, got a scalar")
        axis = normalize_axis(op_type, softmax_axis(attrs), x.ndim)
        xs = upcast(x)
        if x.size == 0:
            return [result(xs, x.dtype)]
        return [result(fn(xs, axis), x.dtype)]
    return reference


def _log_softmax(xs, axis):
    if xs.dtype == np.float32 and xs.shape[axis] > 0:
        return _mlas_softmax_f32(xs, axis, log=True)
    y = xs - np.max(xs, axis=axis, keepdims=True)
    return y - np.log(np.sum(np.exp(y), axis=axis, keepdims=True))


def _hardmax(xs, axis):
    # ONNX Runtime: 1 at the first element equal to the row's max, the max found by a scan from
    # element 0 with `>`: later NaNs are skipped, a NaN at element 0 is the max and no element
    # equals it (an all-zero row).
    xa = np.moveaxis(xs, axis, -1)
    nan = np.isnan(xa)
    m = np.max(np.where(nan, -np.inf, xa), axis=-1, keepdims=True)
    m = np.where(nan[..., :1], np.nan, m)
    hit = xa == m
    out = np.zeros(xa.shape, xs.dtype)
    np.put_along_axis(out, np.argmax(hit, axis=-1)[..., None], 1, axis=-1)
    out *= hit.any(axis=-1, keepdims=True)
    return np.moveaxis(out, -1, axis)


for _name, _fn, _types in (("LogSoftmax", _log_softmax, FLOATS | {F64}), ("Hardmax", _hardmax, FLOATS)):
    register(OpDef(_name, (1, 11, 13), ("T",), ("T",), {"T": _types}, _softmax_like(_name, _fn),
                   attributes={"axis": None}, claim=_both(_claim_softmax, _f16_broken_before(11)),
                   shape_rule=_softmax_like_shape(_name)))


# ---- per-channel parameters ------------------------------------------------------------------

def _channel_param(op_type, what, p, c, shape):
    if p.shape != (c,):
        raise RuntimeShapeError(f"{op_type}: {what} must have shape [{c}] (the channels of X, "
                                f"{shape_str(shape)}), got {shape_str(p.shape)}")


def _channel_rule(op_type: str, min_rank: int, params, exact_rank: int | None = None):
    """Output: X's shape; X's rank checked; 1-D parameters' static length fixes or checks C."""
    @shape_rule(op_type)
    def rule(types, values, attrs, num_outputs):
        x = shape_of(types[0])
        if x is not None:
            if len(x) < min_rank or (exact_rank is not None and len(x) != exact_rank):
                need = f"rank {exact_rank}" if exact_rank is not None else f"rank >= {min_rank}"
                raise RuntimeShapeError(f"{op_type}: X must have {need}, got shape {pshape_str(x)}")
            for i, what in params:
                p = shape_of(at(types, i))
                if p is None:
                    continue
                if len(p) != 1 or (p[0] is not None and x[1] is not None and p[0] != x[1]):
                    raise RuntimeShapeError(f"{op_type}: {what} must have shape [{'?' if x[1] is None else x[1]}] "
                                            f"(the channels of X, {pshape_str(x)}), got {pshape_str(p)}")
                if x[1] is None and p[0] is not None:
                    x = (x[0], p[0]) + tuple(x[2:])
        return [tensor_type(elem_of(types[0]), x)]
    return rule


# ---- InstanceNormalization -----------------------------------------------------------------------

@kernel("InstanceNormalization")
def _instance_norm(inputs, attrs):
    x, scale, bias = inputs
    if x.ndim < 3:
        raise RuntimeShapeError(f"InstanceNormalization: X must have rank >= 3, got shape {shape_str(x.shape)}")
    c = x.shape[1]
    _channel_param("InstanceNormalization", "scale", scale, c, x.shape)
    _channel_param("InstanceNormalization", "B", bias, c, x.shape)
    xs = x.astype(np.float32)
    axes = tuple(range(2, x.ndim))
    bshape = (1, c) + (1,) * (x.ndim - 2)
    mean = np.mean(xs, axis=axes, keepdims=True, dtype=np.float32)
    d = xs - mean
    var = np.mean(d * d, axis=axes, keepdims=True, dtype=np.float32)
    inv = np.float32(1) / np.sqrt(var + np.float32(attrs["epsilon"]))
    y = d * (inv * upcast(scale).reshape(bshape)) + upcast(bias).reshape(bshape)
    return [result(y, x.dtype)]


register(OpDef("InstanceNormalization", (6, 22), ("T", "T", "T"), ("T",), {"T": FLOATS}, _instance_norm,
               attributes={"epsilon": 1e-5},
               shape_rule=_channel_rule("InstanceNormalization", 3, ((1, "scale"), (2, "B")))))


# ---- GroupNormalization ----------------------------------------------------------------------------

@kernel("GroupNormalization")
def _group_norm(inputs, attrs):
    x, scale, bias = inputs
    if x.ndim < 2:
        raise RuntimeShapeError(f"GroupNormalization: X must have rank >= 2, got shape {shape_str(x.shape)}")
    n, c = x.shape[:2]
    g = int(attrs["num_groups"])
    if g <= 0 or c % g:
        raise RuntimeShapeError(f"GroupNormalization: num_groups={g} does not divide the {c} channels "
                                f"of X ({shape_str(x.shape)})")
    if scale.shape != bias.shape or scale.shape not in ((c,), (g,)):
        raise RuntimeShapeError(f"GroupNormalization: scale and bias must have shape [{c}] (opset 21: "
                                f"channels) or [{g}] (opset 18: groups), got {shape_str(scale.shape)} "
                                f"and {shape_str(bias.shape)}")
    # The ONNX function body, which ONNX Runtime runs: statistics in f32 as E[x^2] - E[x]^2.
    x3 = x.astype(np.float32).reshape(n, g, -1)
    count = np.float32(x3.shape[2])
    mean = np.sum(x3, axis=2, keepdims=True, dtype=np.float32) / count
    mean_sq = np.sum(x3 * x3, axis=2, keepdims=True, dtype=np.float32) / count
    std = np.sqrt(mean_sq - mean * mean + np.float32(attrs["epsilon"]))
    norm = (x3 - mean) / std
    if scale.shape == (g,) and g != c:  # opset 18: one scale and bias per group
        y = upcast(scale).reshape(1, g, 1) * norm + upcast(bias).reshape(1, g, 1)
        return [result(y.reshape(x.shape), x.dtype)]
    # Opset 21: back to X's type, then scale and bias per channel in X's type (f16 rounds twice).
    norm = norm.reshape(n, c, -1).astype(x.dtype)
    y = (upcast(scale).reshape(1, c, 1) * upcast(norm)).astype(x.dtype)
    y = (upcast(y) + upcast(bias).reshape(1, c, 1)).astype(x.dtype)
    return [result(y.reshape(x.shape), x.dtype)]


@shape_rule("GroupNormalization")
def _group_norm_shape(types, values, attrs, num_outputs):
    x = shape_of(types[0])
    if x is not None:
        if len(x) < 2:
            raise RuntimeShapeError(f"GroupNormalization: X must have rank >= 2, got shape {pshape_str(x)}")
        g = int(attrs["num_groups"])
        if x[1] is not None and (g <= 0 or x[1] % g):
            raise RuntimeShapeError(f"GroupNormalization: num_groups={g} does not divide the {x[1]} "
                                    f"channels of X ({pshape_str(x)})")
    return [tensor_type(elem_of(types[0]), x)]


def _claim_group_norm(node, graph, attrs):
    v = node.since_version
    g = attrs["num_groups"]
    if g <= 0:
        return f"attribute num_groups={g} must be positive"
    if v < 21 and "stash_type" in node.attributes:
        return f"attribute 'stash_type' is not part of GroupNormalization opset {v}"
    if attrs["stash_type"] != 1:
        return f"attribute stash_type={attrs['stash_type']} is not supported (only 1, statistics in f32)"
    x = graph.type_of(node.inputs[0])
    if v < 21 and x.elem_type == F16:
        return ("f16 input to GroupNormalization opset 18 is not claimed: ONNX Runtime runs its "
                "function body with every step rounded to f16, which hipep does not reproduce")
    c = x.shape[1] if x.shape is not None and len(x.shape) > 1 and isinstance(x.shape[1], int) else None
    want = g if v < 21 else c
    for i, what in ((1, "scale"), (2, "bias")):
        p = graph.type_of(node.inputs[i]).shape
        if want is not None and p is not None and len(p) == 1 and isinstance(p[0], int) and p[0] != want:
            return (f"{what} has length {p[0]}; GroupNormalization opset {v} expects "
                    f"{'num_groups' if v < 21 else 'the channel count'} = {want}")
    return None


register(OpDef("GroupNormalization", (18, 21), ("T", "T", "T"), ("T",), {"T": FLOATS}, _group_norm,
               attributes={"num_groups": REQUIRED, "epsilon": 1e-5, "stash_type": 1},
               claim=_claim_group_norm, shape_rule=_group_norm_shape))


# ---- BatchNormalization ------------------------------------------------------------------------------
# Inference normalizes with input_mean and input_var. training_mode=1 (opsets 14, 15) normalizes with
# the batch's own statistics over every axis but the channel's (the biased variance) and writes the
# running statistics, input_mean * momentum + mean * (1 - momentum) and likewise the variance, as
# outputs 1 and 2 in input_mean's type; ONNX Runtime's CPU kernel sums in f32 (f16 widened).

@kernel("BatchNormalization")
def _batch_norm(inputs, attrs):
    x, scale, bias, mean, var = inputs[:5]
    if x.ndim < 2:
        raise RuntimeShapeError(f"BatchNormalization: X must have rank >= 2, got shape {shape_str(x.shape)}")
    c = x.shape[1]
    for what, p in (("scale", scale), ("B", bias), ("input_mean", mean), ("input_var", var)):
        _channel_param("BatchNormalization", what, p, c, x.shape)
    bshape = (1, c) + (1,) * (x.ndim - 2)
    training = int(attrs["training_mode"]) != 0
    if training:
        columns = np.moveaxis(upcast(x), 1, 0).reshape(c, -1)
        count = np.float32(columns.shape[1])  # an empty batch: 0 / 0, NaN as in ORT
        batch_mean = np.sum(columns, axis=1, dtype=np.float32) / count
        centered = columns - batch_mean[:, None]
        batch_var = np.sum(centered * centered, axis=1, dtype=np.float32) / count
        stat_mean, stat_var = batch_mean, batch_var
    else:
        stat_mean, stat_var = upcast(mean), upcast(var)
    # ONNX Runtime's fused form: x * (scale / sqrt(var + eps)) + (B - mean * that), in f32.
    inv_std = np.float32(1) / np.sqrt(stat_var + np.float32(attrs["epsilon"]))
    new_scale = inv_std * upcast(scale)
    new_bias = upcast(bias) - stat_mean * new_scale
    y = upcast(x) * new_scale.reshape(bshape) + new_bias.reshape(bshape)
    out = [result(y, x.dtype)]
    if training:
        keep = np.float32(attrs["momentum"])
        take = np.float32(1) - keep
        for given, batch in ((mean, batch_mean), (var, batch_var)):
            out.append(result(upcast(given) * keep + batch * take, given.dtype))
    return out[:max(1, int(attrs[OUTPUT_COUNT]))]


def _batch_norm_shape(types, values, attrs, num_outputs):
    (y,) = _batch_norm_y_shape(types, values, attrs, 1)
    shape = shape_of(y)
    stats = tensor_type(elem_of(at(types, 3)), None if shape is None else (shape[1],))
    return [y, stats, stats][:num_outputs]


def _claim_batch_norm(node, graph, attrs):
    v = node.since_version
    if v < 14 and "training_mode" in node.attributes:
        return f"attribute 'training_mode' is not part of BatchNormalization opset {v}"
    if v >= 9 and "spatial" in node.attributes:
        return f"attribute 'spatial' is not part of BatchNormalization opset {v}"
    if attrs["spatial"] != 1:
        return f"attribute spatial={attrs['spatial']} is not supported (only spatial=1)"
    extra = len([o for o in node.outputs[1:] if o])
    if attrs["training_mode"]:
        if extra != 2 or len(node.outputs) != 3:
            return ("training_mode=1 writes running_mean and running_var: the node must have exactly the three "
                    f"outputs Y, running_mean, running_var (it has {len(node.outputs)})")
    elif extra:
        return ("outputs beyond Y are training outputs (opsets before 14 have no training_mode; hipep runs "
                "their BatchNormalization in inference only)" if v < 14 else
                "outputs beyond Y are written in training mode only (training_mode=0 here)")
    if v < 15:
        elems = {graph.type_of(n).elem_type for n in node.inputs[:5] if n}
        if len(elems) > 1:
            return (f"BatchNormalization opset {v} requires all inputs to share one element type "
                    f"(mixed types from opset 15)")
    return None


_batch_norm_y_shape = _channel_rule("BatchNormalization", 2, ((1, "scale"), (2, "B"),
                                                             (3, "input_mean"), (4, "input_var")))
register(OpDef("BatchNormalization", (7, 9, 14, 15), ("T", "T1", "T1", "T2", "T2"),
               ("T", "T2", "T2", "T2", "T2"), {"T": FLOATS, "T1": FLOATS, "T2": FLOATS}, _batch_norm,
               attributes={"epsilon": 1e-5, "momentum": 0.9, "spatial": 1, "training_mode": 0},
               claim=_claim_batch_norm, shape_rule=shape_rule("BatchNormalization")(_batch_norm_shape)))


# ---- LpNormalization -------------------------------------------------------------------------------

@kernel("LpNormalization")
def _lp_norm(inputs, attrs):
    x = inputs[0]
    if x.ndim == 0:
        raise RuntimeShapeError("LpNormalization: input must have rank >= 1, got a scalar")
    axis = normalize_axis("LpNormalization", int(attrs["axis"]), x.ndim)
    xs = upcast(x)
    if int(attrs["p"]) == 1:
        norm = np.sum(np.abs(xs), axis=axis, keepdims=True, dtype=np.float32)
    else:
        norm = np.sqrt(np.sum(xs * xs, axis=axis, keepdims=True, dtype=np.float32))
    y = np.where(norm != 0, xs / np.where(norm != 0, norm, np.float32(1)), np.float32(0))  # 0 / 0 -> 0
    return [result(y, x.dtype)]


def _claim_lp_norm(node, graph, attrs):
    if attrs["p"] not in (1, 2):
        return f"attribute p={attrs['p']} is invalid (must be 1 or 2)"
    rank = input_rank(node, graph)
    if rank is not None and not -rank <= attrs["axis"] < rank:
        return f"attribute axis={attrs['axis']} is out of range for a rank-{rank} input"
    return _f16_broken_before(22)(node, graph, attrs)


register(OpDef("LpNormalization", (1, 22), ("T",), ("T",), {"T": FLOATS}, _lp_norm,
               attributes={"axis": -1, "p": 2}, claim=_claim_lp_norm,
               shape_rule=_softmax_like_shape("LpNormalization")))


# ---- MeanVarianceNormalization --------------------------------------------------------------------

@kernel("MeanVarianceNormalization")
def _mvn(inputs, attrs):
    x = inputs[0]
    axes = tuple(normalize_axes("MeanVarianceNormalization", attrs["axes"], x.ndim))
    # As ONNX Runtime's kernel computes it (not the function body's E[X^2] - E[X]^2, nor its
    # epsilon): Y = X - E[X], then Y / sqrt(E[Y^2]), in f32.
    xs = upcast(x)
    count = np.float32(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    y = xs - np.sum(xs, axis=axes, keepdims=True, dtype=np.float32) / count
    return [result(y / np.sqrt(np.sum(y * y, axis=axes, keepdims=True, dtype=np.float32) / count), x.dtype)]


@shape_rule("MeanVarianceNormalization")
def _mvn_shape(types, values, attrs, num_outputs):
    x = shape_of(types[0])
    if x is not None:
        normalize_axes("MeanVarianceNormalization", attrs["axes"], len(x))
    return [tensor_type(elem_of(types[0]), x)]


def _claim_mvn(node, graph, attrs):
    rank = input_rank(node, graph)
    axes = list(attrs["axes"])
    if rank is not None and (any(not -rank <= a < rank for a in axes) or
                             len({a % rank for a in axes}) != len(axes)):
        return f"attribute axes={axes} is invalid for a rank-{rank} input"
    return None


# f32 only: ONNX Runtime's CPU EP fails to run the function body on f16.
register(OpDef("MeanVarianceNormalization", (9, 13), ("T",), ("T",), {"T": frozenset({F32})}, _mvn,
               attributes={"axes": [0, 2, 3]}, claim=_claim_mvn, shape_rule=_mvn_shape))


# ---- LRN -------------------------------------------------------------------------------------------

@kernel("LRN")
def _lrn(inputs, attrs):
    x = inputs[0]
    if x.ndim != 4:
        raise RuntimeShapeError(f"LRN: X must be 4-D (N, C, H, W), got shape {shape_str(x.shape)}")
    size = int(attrs["size"])
    xs = upcast(x)
    sq = xs * xs
    c = x.shape[1]
    pre = (size - 1) // 2
    padded = np.concatenate([np.zeros((x.shape[0], pre) + x.shape[2:], np.float32), sq,
                             np.zeros((x.shape[0], size - 1 - pre) + x.shape[2:], np.float32)], axis=1)
    window = np.zeros(sq.shape, np.float32)
    for i in range(size):
        window += padded[:, i:i + c]
    scale = np.float32(attrs["bias"]) + np.float32(np.float32(attrs["alpha"]) / np.float32(size)) * window
    return [result(xs * np.power(scale, np.float32(-np.float32(attrs["beta"]))), x.dtype)]


def _claim_lrn(node, graph, attrs):
    if attrs["size"] <= 0 or attrs["size"] % 2 == 0:
        return (f"attribute size={attrs['size']} is not supported: ONNX Runtime's CPU EP requires an "
                f"odd, positive size")
    rank = input_rank(node, graph)
    if rank is not None and rank != 4:
        return f"input 0 has rank {rank}; LRN is implemented for 4-D (N, C, H, W) input only, as in ONNX Runtime"
    return _f16_broken_before(13)(node, graph, attrs)


register(OpDef("LRN", (1, 13), ("T",), ("T",), {"T": FLOATS}, _lrn,
               attributes={"alpha": 1e-4, "beta": 0.75, "bias": 1.0, "size": REQUIRED}, claim=_claim_lrn,
               shape_rule=_channel_rule("LRN", 4, (), exact_rank=4)))
