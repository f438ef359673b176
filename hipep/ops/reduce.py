"""Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
ReduceLogSum, ReduceLogSumExp, ReduceSumSquare, ArgMax, ArgMin; and the scans, selections and
generators beside them: CumSum, CumProd, TopK, Trilu, NonZero, Range, ConstantOfShape, EyeLike,
Compress.

'axes' is an attribute before the opset where it became input 1 (ReduceSum 13, the others 18);
keepdims (default 1) and, from that opset on, noop_with_empty_axes. Float sums accumulate in f32
(f16 upcast, rounded once), f64 ones in f64 (ONNX Runtime's double kernels).
Empty reductions give what ONNX Runtime gives: sum 0, mean 0, max -inf/INT_MIN/false,
min +inf/INT_MAX/true. Integer sums and means (like ReduceProd, ReduceL1, ... below) are computed
in double and converted back saturating, as ONNX Runtime 1.31 does (so int32 sums clamp rather
than wrap, and int64 sums beyond 2^53 round); integer means truncate.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import RuntimeShapeError
from ..graph import elem_type_of, numpy_dtype
from ._common import (at, elem_of, has_input, int_list, is_float, kernel, known_value,
                      normalize_axes, normalize_axis, num_elements, operand_length, pshape_str,
                      result, scalar_operand, shape_of, shape_rule, shape_str, tensor_type,
                      type_name, upcast)
from .registry import (ALL, ANY_TENSOR, BOOL, F16, F32, F64, FLOATS, I8, I16, I32, I64, NUMERIC, U8,
                       U32, U64, OpDef, register)


def int_from_double(v: np.ndarray, dtype) -> np.ndarray:
    """ONNX Runtime's integer reductions compute in double and convert back saturating: out of
    range gives the type's min/max, NaN its min, everything else truncates toward zero."""
    info = np.iinfo(dtype)
    v = np.asarray(v, dtype=np.float64)
    top = float(2 ** (info.bits - 1)) if info.min < 0 else float(2 ** info.bits)
    low = v < float(info.min)
    high = v >= top
    bad = np.isnan(v) | low | high
    out = np.trunc(np.where(bad, 0.0, v)).astype(dtype)
    out = np.where(high, np.array(info.max, dtype), out)
    return np.where(low | np.isnan(v), np.array(info.min, dtype), out).astype(dtype)


def _sum(x, axes, keepdims):
    if is_float(x):
        v = upcast(x)  # f16 in f32; f32 and f64 in their own type
        return np.sum(v, axis=axes, keepdims=keepdims, dtype=v.dtype)
    return int_from_double(np.sum(x, axis=axes, keepdims=keepdims, dtype=np.float64), x.dtype)


def _mean(x, axes, keepdims):
    n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    if n == 0:
        return np.zeros_like(_sum(x, axes, keepdims))
    if is_float(x):
        s = _sum(x, axes, keepdims)
        return s / s.dtype.type(n)  # divided in the accumulator's type, as ONNX Runtime does
    s = np.sum(x, axis=axes, keepdims=keepdims, dtype=np.float64)
    return int_from_double(s / float(n), x.dtype)


def _keepdims(attrs) -> bool:
    # ORT's CPU EP keeps the reduced axes only for keepdims == 1; any other value drops them
    return attrs["keepdims"] == 1


def _extreme(is_max: bool):
    def fn(x, axes, keepdims):
        if x.dtype == np.bool_:
            return (np.any if is_max else np.all)(x, axis=axes, keepdims=keepdims)
        if is_float(x):
            init = -np.inf if is_max else np.inf
        else:
            info = np.iinfo(x.dtype)
            init = info.min if is_max else info.max
        f = np.max if is_max else np.min
        return f(x, axis=axes, keepdims=keepdims, initial=x.dtype.type(init))  # NaN propagates
    return fn


def _reduce(op_type: str, fn):
    @kernel(op_type)
    def reference(inputs, attrs):
        x = inputs[0]
        if len(inputs) > 1 and inputs[1] is not None:
            axes = int_list(op_type, "axes", inputs[1])
        else:
            axes = attrs.get("axes")
        if not axes:
            if attrs.get("noop_with_empty_axes", 0):
                return [result(x)]
            axes = list(range(x.ndim))
        axes = tuple(normalize_axes(op_type, axes, x.ndim))
        return [result(fn(x, axes, _keepdims(attrs)), x.dtype)]
    return reference


def _reduce_shape(op_type: str):
    @shape_rule(op_type, symbolic=True)
    def rule(types, values, attrs, num_outputs):
        elem = elem_of(types[0])
        x = shape_of(types[0])
        keepdims = _keepdims(attrs)
        noop = bool(attrs.get("noop_with_empty_axes", 0))
        if at(types, 1) is not None:
            axes = int_list(op_type, "axes", known_value(types, values, 1))
            if axes is None and operand_length(types[1]) == 0:
                axes = []  # an empty axes operand: its value is known
        else:
            axes = attrs.get("axes")
            axes = [] if axes is None else [int(a) for a in axes]
        if axes is None:  # axes given, value unknown
            if x is None:
                return [tensor_type(elem, None)]
            if keepdims:  # reduced axes become 1, which ones is unknown
                return [tensor_type(elem, tuple(1 if d == 1 else None for d in x))]
            k = operand_length(types[1])
            if k is None or k > len(x):
                return [tensor_type(elem, None)]
            return [tensor_type(elem, (None,) * (len(x) - k))]
        if not axes:
            if noop:
                return [tensor_type(elem, x)]
            if x is None:  # every axis
                return [tensor_type(elem, None if keepdims else ())]
            axes = list(range(len(x)))
        if x is None:
            return [tensor_type(elem, None)]
        axes = normalize_axes(op_type, axes, len(x))
        if keepdims:
            return [tensor_type(elem, tuple(1 if i in axes else d for i, d in enumerate(x)))]
        return [tensor_type(elem, tuple(d for i, d in enumerate(x) if i not in axes))]
    return rule


def _claim(input_axes_since: int, bool_since: int | None):
    def claim(node, graph, attrs):
        v = node.since_version
        if v >= input_axes_since and attrs.get("axes") is not None:
            return f"attribute 'axes' is not part of {node.op_type} opset {v} (it is input 1)"
        if v < input_axes_since:
            if has_input(node, 1):
                return f"{node.op_type} opset {v} takes 'axes' as an attribute, not as an input"
            if "noop_with_empty_axes" in node.attributes:
                return f"attribute 'noop_with_empty_axes' is not part of {node.op_type} opset {v}"
        t = graph.type_of(node.inputs[0])
        if t.elem_type == BOOL and (bool_since is None or v < bool_since):
            return f"input 0 has element type {t.dtype_name}, which {node.op_type} opset {v} does not allow"
        return None
    return claim


_ATTRS = {"axes": None, "keepdims": 1, "noop_with_empty_axes": 0}
_I64 = frozenset({I64})

register(OpDef("ReduceSum", (1, 11, 13), ("T", "I"), ("T",), {"T": NUMERIC | {F64}, "I": _I64},
               _reduce("ReduceSum", _sum), attributes=dict(_ATTRS), claim=_claim(13, None),
               min_inputs=1, shape_rule=_reduce_shape("ReduceSum"), host_inputs=(1,)))
register(OpDef("ReduceMean", (1, 11, 13, 18), ("T", "I"), ("T",), {"T": NUMERIC | {F64}, "I": _I64},
               _reduce("ReduceMean", _mean), attributes=dict(_ATTRS), claim=_claim(18, None),
               min_inputs=1, shape_rule=_reduce_shape("ReduceMean"), host_inputs=(1,)))
register(OpDef("ReduceMax", (1, 11, 12, 13, 18, 20), ("T", "I"), ("T",), {"T": ALL | {F64}, "I": _I64},
               _reduce("ReduceMax", _extreme(True)), attributes=dict(_ATTRS),
               claim=_claim(18, 20), min_inputs=1, shape_rule=_reduce_shape("ReduceMax"),
               host_inputs=(1,)))
register(OpDef("ReduceMin", (1, 11, 12, 13, 18, 20), ("T", "I"), ("T",), {"T": ALL | {F64}, "I": _I64},
               _reduce("ReduceMin", _extreme(False)), attributes=dict(_ATTRS),
               claim=_claim(18, 20), min_inputs=1, shape_rule=_reduce_shape("ReduceMin"),
               host_inputs=(1,)))


# ---- more reductions: ReduceProd, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, ReduceSumSquare
# As ONNX Runtime computes them: floats in f32 (f16 upcast, rounded once), f64 in f64; integers in double,
# converted back saturating (int_from_double). noop_with_empty_axes reduces over no axis at all:
# each element alone (ReduceL1 gives |x|, ReduceSumSquare x*x, ReduceLogSum log(x)), which is
# what ONNX Runtime returns.

def _wide(x):
    return upcast(x) if is_float(x) else x.astype(np.float64)


def _narrow(v, x):
    return v if is_float(x) else int_from_double(v, x.dtype)


def _prod(x, axes, keepdims):
    v = _wide(x)
    return _narrow(np.prod(v, axis=axes, keepdims=keepdims, dtype=v.dtype), x)


def _l1(x, axes, keepdims):
    v = _wide(x)
    return _narrow(np.sum(np.abs(v), axis=axes, keepdims=keepdims, dtype=v.dtype), x)


def _sum_square(x, axes, keepdims):
    v = _wide(x)
    return _narrow(np.sum(v * v, axis=axes, keepdims=keepdims, dtype=v.dtype), x)


def _l2(x, axes, keepdims):
    v = _wide(x)
    return _narrow(np.sqrt(np.sum(v * v, axis=axes, keepdims=keepdims, dtype=v.dtype)), x)


def _log_sum(x, axes, keepdims):
    v = _wide(x)
    return _narrow(np.log(np.sum(v, axis=axes, keepdims=keepdims, dtype=v.dtype)), x)


def _log_sum_exp(x, axes, keepdims):
    if is_float(x):
        v = upcast(x)  # f64 stays f64, as ONNX Runtime's double kernel
        m = np.max(v, axis=axes, keepdims=True, initial=-np.inf)
        m = np.where(np.isfinite(m), m, v.dtype.type(0))  # all -inf (or empty): log(0) + 0 = -inf
        out = np.log(np.sum(np.exp(v - m), axis=axes, keepdims=True, dtype=v.dtype)) + m
    else:
        # ONNX Runtime: max + log(sum of exp(x - max)), each term truncated to the integer type
        # (1 for each maximal element, 0 for the rest), the rest in double.
        m = np.max(x, axis=axes, keepdims=True, initial=np.iinfo(x.dtype).min)
        terms = np.trunc(np.exp((x - m).astype(np.float64)))
        s = np.sum(terms, axis=axes, keepdims=True, dtype=np.float64)
        out = int_from_double(np.log(s) + m.astype(np.float64), x.dtype)
    return out if keepdims else np.squeeze(out, axis=axes)


def _reduce_all(op_type: str, fn):
    """Like `_reduce`, but noop_with_empty_axes applies `fn` over no axes (element by element)."""
    @kernel(op_type)
    def reference(inputs, attrs):
        x = inputs[0]
        if len(inputs) > 1 and inputs[1] is not None:
            axes = int_list(op_type, "axes", inputs[1])
        else:
            axes = attrs.get("axes")
        if not axes:
            axes = () if attrs.get("noop_with_empty_axes", 0) else tuple(range(x.ndim))
        axes = tuple(normalize_axes(op_type, axes, x.ndim))
        return [result(fn(x, axes, _keepdims(attrs)), x.dtype)]
    return reference


def _claim_reduce_more(node, graph, attrs):
    reason = _claim(18, None)(node, graph, attrs)
    if reason:
        return reason
    if node.since_version < 11 and graph.type_of(node.inputs[0]).elem_type == F16:
        return (f"f16 input to {node.op_type} opset {node.since_version} is not claimed: ONNX "
                f"Runtime's CPU EP cannot run that form (f16 is claimed from opset 11)")
    return None


# Opset 28 keeps ReduceLogSum and ReduceLogSumExp for floats only (ONNX's checker refuses integers there).
for _name, _fn, _since in (("ReduceProd", _prod, ()), ("ReduceL1", _l1, ()), ("ReduceL2", _l2, ()),
                           ("ReduceLogSum", _log_sum, (28,)), ("ReduceLogSumExp", _log_sum_exp, (28,)),
                           ("ReduceSumSquare", _sum_square, ())):
    register(OpDef(_name, (1, 11, 13, 18) + _since, ("T", "I"), ("T",), {"T": NUMERIC | {F64}, "I": _I64},
                   _reduce_all(_name, _fn), attributes=dict(_ATTRS), claim=_claim_reduce_more,
                   min_inputs=1, shape_rule=_reduce_shape(_name), host_inputs=(1,)))


# ---- ArgMax / ArgMin ---------------------------------------------------------------------------

def _arg_extreme(x, axis: int, is_max: bool, last: bool) -> np.ndarray:
    """ONNX Runtime's scan: the first (select_last_index: last) position holding the max (min)
    of the non-NaN values; a NaN at position 0 wins (nothing compares past it), later NaNs are
    skipped."""
    xa = np.moveaxis(upcast(x) if is_float(x) else x, axis, -1)
    if is_float(x):
        nan = np.isnan(xa)
        fill = -np.inf if is_max else np.inf
        m = (np.max if is_max else np.min)(np.where(nan, fill, xa), axis=-1, keepdims=True)
        hit = (xa == m) & ~nan
    else:
        m = (np.max if is_max else np.min)(xa, axis=-1, keepdims=True)
        hit = xa == m
    n = xa.shape[-1]
    idx = (n - 1 - np.argmax(hit[..., ::-1], axis=-1)) if last else np.argmax(hit, axis=-1)
    idx = np.where(hit.any(axis=-1), idx, 0)
    if is_float(x):
        idx = np.where(nan[..., 0], 0, idx)
    return idx.astype(np.int64)


def _arg(op_type: str, is_max: bool):
    @kernel(op_type)
    def reference(inputs, attrs):
        x = inputs[0]
        if x.ndim == 0:
            raise RuntimeShapeError(f"{op_type}: input must have rank >= 1, got a scalar")
        axis = normalize_axis(op_type, int(attrs["axis"]), x.ndim)
        if x.shape[axis] == 0:
            raise RuntimeShapeError(f"{op_type}: cannot reduce axis {axis} of extent 0 "
                                    f"(input is {shape_str(x.shape)})")
        idx = _arg_extreme(x, axis, is_max, bool(attrs["select_last_index"]))
        if _keepdims(attrs):
            idx = np.expand_dims(idx, axis)
        return [result(idx, np.int64)]
    return reference


def _arg_shape(op_type: str):
    @shape_rule(op_type)
    def rule(types, values, attrs, num_outputs):
        x = shape_of(types[0])
        if x is None:
            return [tensor_type(I64, None)]
        if len(x) == 0:
            raise RuntimeShapeError(f"{op_type}: input must have rank >= 1, got a scalar")
        axis = normalize_axis(op_type, int(attrs["axis"]), len(x))
        if x[axis] == 0:
            raise RuntimeShapeError(f"{op_type}: cannot reduce axis {axis} of extent 0 "
                                    f"(input is {pshape_str(x)})")
        out = x[:axis] + ((1,) if _keepdims(attrs) else ()) + x[axis + 1:]
        return [tensor_type(I64, out)]
    return rule


def _claim_arg(node, graph, attrs):
    v = node.since_version
    if v < 12 and "select_last_index" in node.attributes:
        return f"attribute 'select_last_index' is not part of {node.op_type} opset {v}"
    t = graph.type_of(node.inputs[0])
    if v < 11 and t.elem_type == F16:
        return (f"f16 input to {node.op_type} opset {v} is not claimed: ONNX Runtime's CPU EP "
                f"cannot run that form (f16 is claimed from opset 11)")
    if t.rank is not None and not -t.rank <= attrs["axis"] < t.rank:
        return f"attribute axis={attrs['axis']} is out of range for a rank-{t.rank} input"
    return None


_ARG_TYPES = frozenset({F32, F16, I8, U8, I32, I64})
for _name, _is_max in (("ArgMax", True), ("ArgMin", False)):
    register(OpDef(_name, (1, 11, 12, 13), ("T",), ("I",), {"T": _ARG_TYPES, "I": _I64},
                   _arg(_name, _is_max), attributes={"axis": 0, "keepdims": 1, "select_last_index": 0},
                   claim=_claim_arg, shape_rule=_arg_shape(_name)))


# ---- CumSum / CumProd ----------------------------------------------------------------------------

def _cumulative(op_type: str, fn, identity):
    @kernel(op_type)
    def reference(inputs, attrs):
        x, axis_in = inputs
        if x.ndim == 0:
            raise RuntimeShapeError(f"{op_type}: input must have rank >= 1, got a scalar")
        axis = normalize_axis(op_type, int(scalar_operand(op_type, "axis", axis_in)), x.ndim)
        v = upcast(x) if is_float(x) else x
        if attrs["reverse"]:
            v = np.flip(v, axis)
        out = fn(v, axis=axis, dtype=v.dtype)  # sequential, in the input's type (f16: f32)
        if attrs["exclusive"]:
            out = np.roll(out, 1, axis=axis)
            first = [slice(None)] * out.ndim
            first[axis] = slice(0, 1)
            out[tuple(first)] = identity
        if attrs["reverse"]:
            out = np.flip(out, axis)
        return [result(out, x.dtype)]
    return reference


def _same_shape_rule(op_type: str):
    @shape_rule(op_type)
    def rule(types, values, attrs, num_outputs):
        x = shape_of(types[0])
        if x is not None and len(x) == 0:
            raise RuntimeShapeError(f"{op_type}: input must have rank >= 1, got a scalar")
        return [tensor_type(elem_of(types[0]), x)]
    return rule


def _claim_cumulative(node, graph, attrs):
    for name in ("exclusive", "reverse"):
        if attrs[name] not in (0, 1):
            return f"attribute {name}={attrs[name]} is invalid (must be 0 or 1)"
    if node.op_type == "CumSum" and node.since_version < 14 and graph.type_of(node.inputs[0]).elem_type == F16:
        return "input 0 has element type f16, which CumSum opset 11 does not allow (f16 from opset 14)"
    return None


_AXIS_TYPES = frozenset({I32, I64})
register(OpDef("CumSum", (11, 14), ("T", "A"), ("T",), {"T": NUMERIC | {F64}, "A": _AXIS_TYPES},
               _cumulative("CumSum", np.cumsum, 0), attributes={"exclusive": 0, "reverse": 0},
               claim=_claim_cumulative, shape_rule=_same_shape_rule("CumSum")))
register(OpDef("CumProd", (26,), ("T", "A"), ("T",), {"T": NUMERIC | {F64, U32, U64}, "A": _AXIS_TYPES},
               _cumulative("CumProd", np.cumprod, 1), attributes={"exclusive": 0, "reverse": 0},
               claim=_claim_cumulative, shape_rule=_same_shape_rule("CumProd")))


# ---- TopK ------------------------------------------------------------------------------------------

def _topk_k(types, values, attrs):
    """k from input 1 (opset 10+; a 1-element tensor) or the opset-1 attribute; None if unknown."""
    if at(types, 1) is not None:
        v = known_value(types, values, 1)
        if v is None:
            return None
        if v.ndim > 1 or v.size != 1:
            raise RuntimeShapeError(f"TopK: K must be a 1-D tensor of one element, got shape "
                                    f"{shape_str(v.shape)}")
        k = int(v.reshape(-1)[0])
    else:
        k = attrs.get("k")
        if k is None:
            raise RuntimeShapeError("TopK: no K input and no 'k' attribute")
        k = int(k)
    if k < 0:
        raise RuntimeShapeError(f"TopK: k={k} must be non-negative")
    return k


def _topk_check(k, extent, axis, shape_text):
    if k is not None and extent is not None and k > extent:
        raise RuntimeShapeError(f"TopK: k={k} is greater than the extent {extent} of axis {axis} "
                                f"(input is {shape_text})")


@kernel("TopK")
def _topk(inputs, attrs):
    x = inputs[0]
    k_in = inputs[1] if len(inputs) > 1 else None
    k = _topk_k([x, k_in], [None, k_in], attrs)  # arrays stand in for types: only presence counts
    if x.ndim == 0:
        raise RuntimeShapeError("TopK: input must have rank >= 1, got a scalar")
    axis = normalize_axis("TopK", int(attrs["axis"]), x.ndim)
    n = x.shape[axis]
    _topk_check(k, n, axis, shape_str(x.shape))
    xa = np.moveaxis(x, axis, -1)
    # ONNX Runtime's order: by value (largest first, or smallest), equal values by lower index.
    if attrs["largest"]:
        order = (n - 1 - np.argsort(xa[..., ::-1], axis=-1, kind="stable"))[..., ::-1]
    else:
        order = np.argsort(xa, axis=-1, kind="stable")
    order = order[..., :k]
    values = np.take_along_axis(xa, order, axis=-1)
    return [result(np.moveaxis(values, -1, axis), x.dtype),
            result(np.moveaxis(order, -1, axis), np.int64)]


@shape_rule("TopK")
def _topk_shape(types, values, attrs, num_outputs):
    x = shape_of(types[0])
    k = _topk_k(types, values, attrs)
    elem = elem_of(types[0])
    if x is None:
        return [tensor_type(elem, None), tensor_type(I64, None)]
    if len(x) == 0:
        raise RuntimeShapeError("TopK: input must have rank >= 1, got a scalar")
    axis = normalize_axis("TopK", int(attrs["axis"]), len(x))
    _topk_check(k, x[axis], axis, pshape_str(x))
    out = tuple(k if i == axis else d for i, d in enumerate(x))
    return [tensor_type(elem, out), tensor_type(I64, out)]


def _claim_topk(node, graph, attrs):
    v = node.since_version
    t = graph.type_of(node.inputs[0])
    if v < 10:
        if "k" not in node.attributes:
            return "required attribute 'k' is missing (TopK opset 1)"
        if has_input(node, 1):
            return "TopK opset 1 takes 'k' as an attribute, not as an input"
    else:
        if "k" in node.attributes:
            return f"attribute 'k' is not part of TopK opset {v} (it is input 1)"
        if not has_input(node, 1):
            return f"TopK opset {v} requires input 1 (K)"
    if v < 11:
        for name in ("largest", "sorted"):
            if name in node.attributes:
                return f"attribute '{name}' is not part of TopK opset {v}"
        if t.elem_type == F16 and v < 10:
            return ("f16 input to TopK opset 1 is not claimed: ONNX Runtime's CPU EP cannot run "
                    "that form (f16 is claimed from opset 10)")
        if t.elem_type not in FLOATS:
            return (f"input 0 has element type {t.dtype_name}, which TopK opset {v} does not allow "
                    f"(integers from opset 11)")
    if attrs["sorted"] != 1:
        return ("attribute sorted=0 is not supported: ONNX Runtime then returns the top k in "
                "the unspecified order of its selection algorithm; hipep implements sorted=1 only")
    if attrs["largest"] not in (0, 1):
        return f"attribute largest={attrs['largest']} is invalid (must be 0 or 1)"
    if t.rank is not None and not -t.rank <= attrs["axis"] < max(t.rank, 1):
        return f"attribute axis={attrs['axis']} is out of range for a rank-{t.rank} input"
    return None


register(OpDef("TopK", (1, 10, 11, 24), ("T", "K"), ("T", "I"),
               {"T": FLOATS | {I8, U8, I16, I32, I64}, "K": _I64, "I": _I64}, _topk,
               attributes={"axis": -1, "largest": 1, "sorted": 1, "k": None}, claim=_claim_topk,
               min_inputs=1, shape_rule=_topk_shape, host_inputs=(1,)))


# ---- Trilu -------------------------------------------------------------------------------------------

@kernel("Trilu")
def _trilu(inputs, attrs):
    x = inputs[0]
    k = int(scalar_operand("Trilu", "k", inputs[1])) if len(inputs) > 1 and inputs[1] is not None else 0
    if x.ndim < 2:
        raise RuntimeShapeError(f"Trilu: input must have rank >= 2, got shape {shape_str(x.shape)}")
    # a k past either end of the matrix acts as that end (numpy overflows on int64's extremes)
    k = max(-(x.shape[-2] + 1), min(k, x.shape[-1] + 1))
    return [result(np.triu(x, k) if attrs["upper"] else np.tril(x, k), x.dtype)]


@shape_rule("Trilu")
def _trilu_shape(types, values, attrs, num_outputs):
    x = shape_of(types[0])
    if x is not None and len(x) < 2:
        raise RuntimeShapeError(f"Trilu: input must have rank >= 2, got shape {pshape_str(x)}")
    return [tensor_type(elem_of(types[0]), x)]


register(OpDef("Trilu", (14,), ("T", "K"), ("T",), {"T": ALL, "K": _I64}, _trilu,
               attributes={"upper": 1}, min_inputs=1, shape_rule=_trilu_shape))


# ---- NonZero ---------------------------------------------------------------------------------------

@kernel("NonZero")
def _nonzero(inputs, attrs):
    x = inputs[0]
    x = x.reshape(1) if x.ndim == 0 else x  # ONNX Runtime reads a scalar as a 1-element vector
    return [result(np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1), np.int64)]


@shape_rule("NonZero")
def _nonzero_shape(types, values, attrs, num_outputs):
    # The count depends on the data's values: input 0 is a host input, so at run time it is here.
    x = shape_of(types[0])
    rank = None if x is None else max(len(x), 1)
    v = known_value(types, values, 0)
    return [tensor_type(I64, None if rank is None else (rank, None if v is None else int(np.count_nonzero(v))))]


register(OpDef("NonZero", (9, 13), ("T",), ("I",), {"T": frozenset({F32, F16, U8, I32, I64, BOOL}),
                                                  "I": _I64},
               _nonzero, shape_rule=_nonzero_shape, host_inputs=(0,), stored_extents=False))


# ---- Range -----------------------------------------------------------------------------------------

def _range_count(start, limit, delta) -> int:
    """ONNX Runtime's count: ceil((double)(limit - start) / delta), at least 0; limit - start in
    the operands' type for floats (f32), exactly for integers."""
    if start.dtype.kind == "f":
        diff = float(np.subtract(limit, start, dtype=start.dtype))
    else:
        diff = int(limit) - int(start)
    d = float(delta)
    if d == 0:
        raise RuntimeShapeError("Range: delta must not be zero")
    q = diff / d
    if math.isnan(q):
        raise RuntimeShapeError(f"Range: the element count is not a number (start {start}, "
                                f"limit {limit}, delta {delta})")
    return max(int(math.ceil(q)), 0)


def _range_operands(types_or_arrays):
    return [scalar_operand("Range", what, a) for what, a in zip(("start", "limit", "delta"), types_or_arrays)]


def _range_stash(operands):
    """The operands in the type Range computes in: f16 ones in f32 (opset 27's stash_type; ONNX
    Runtime takes f32 whatever stash_type says), the others as they are."""
    return [o.astype(np.float32) if o.dtype == np.float16 else o for o in operands]


@kernel("Range")
def _range(inputs, attrs):
    operands = _range_operands(inputs[:3])
    dtype = operands[0].dtype
    start, limit, delta = _range_stash(operands)
    n = _range_count(start, limit, delta)
    if n == 0:
        return [result(np.zeros(0, dtype))]
    # ONNX Runtime accumulates: y[0] = start, y[i] = y[i-1] + delta (in the compute type).
    steps = np.full(n, delta, dtype=start.dtype)
    steps[0] = start
    return [result(np.cumsum(steps, dtype=start.dtype).astype(dtype), dtype)]


@shape_rule("Range")
def _range_shape(types, values, attrs, num_outputs):
    elem = elem_of(types[0])
    vals = [known_value(types, values, i) for i in range(3)]
    if any(v is None for v in vals):
        return [tensor_type(elem, (None,))]
    return [tensor_type(elem, (_range_count(*_range_stash(_range_operands(vals))),))]


# Opset 27 adds f16 (and bf16, not claimed) with stash_type, the accumulation type; ONNX's type
# checks refuse f16 at opset 11 before hipep is asked.
register(OpDef("Range", (11, 27), ("T", "T", "T"), ("T",), {"T": frozenset({F32, F16, I16, I32, I64})}, _range,
               attributes={"stash_type": 1}, shape_rule=_range_shape, host_inputs=(0, 1, 2)))


# ---- ConstantOfShape -------------------------------------------------------------------------------

def _cos_value(attrs) -> np.ndarray:
    v = attrs.get("value")
    if v is None:
        return np.zeros((), np.float32)
    v = np.asarray(v)
    if v.size != 1:
        raise RuntimeShapeError(f"ConstantOfShape: 'value' must have one element, got shape "
                                f"{shape_str(v.shape)}")
    return v.reshape(())


def _cos_dims(shape: np.ndarray) -> list[int]:
    if shape.ndim != 1:
        raise RuntimeShapeError(f"ConstantOfShape: input must be a 1-D tensor, got shape "
                                f"{shape_str(shape.shape)}")
    dims = [int(d) for d in shape]
    if any(d < 0 for d in dims):
        raise RuntimeShapeError(f"ConstantOfShape: shape {dims} has a negative dimension")
    return dims


@kernel("ConstantOfShape")
def _constant_of_shape(inputs, attrs):
    v = _cos_value(attrs)
    return [result(np.full(_cos_dims(np.asarray(inputs[0])), v, dtype=v.dtype), v.dtype)]


@shape_rule("ConstantOfShape")
def _constant_of_shape_shape(types, values, attrs, num_outputs):
    elem = elem_type_of(_cos_value(attrs).dtype)
    v = known_value(types, values, 0)
    if v is not None:
        return [tensor_type(elem, tuple(_cos_dims(v)))]
    n = operand_length(types[0])
    return [tensor_type(elem, None if n is None else (None,) * n)]


def _claim_constant_of_shape(node, graph, attrs):
    v = attrs.get("value")
    if v is not None:
        v = np.asarray(v)
        if v.size != 1:
            return f"attribute 'value' must have one element, got shape {list(v.shape)}"
        if v.dtype.kind not in "fiub" or elem_type_of(v.dtype) not in ANY_TENSOR:
            return f"attribute 'value' has element type {v.dtype}, which hipep does not support"
    return None


register(OpDef("ConstantOfShape", (9, 20, 21, 23, 24, 25), ("I",), ("T",), {"I": _I64, "T": ANY_TENSOR},
               _constant_of_shape, attributes={"value": None}, claim=_claim_constant_of_shape,
               shape_rule=_constant_of_shape_shape, host_inputs=(0,)))


# ---- EyeLike -----------------------------------------------------------------------------------------

_EYE_TYPES = frozenset({F32, F16, F64, I32, I64})


def _eye_elem(types_elem: int, attrs) -> int:
    return int(attrs["dtype"]) if attrs.get("dtype") is not None else types_elem


@kernel("EyeLike")
def _eye_like(inputs, attrs):
    x = inputs[0]
    if x.ndim != 2:
        raise RuntimeShapeError(f"EyeLike: input must be 2-D, got shape {shape_str(x.shape)}")
    dtype = numpy_dtype(_eye_elem(elem_type_of(x.dtype), attrs))
    return [result(np.eye(x.shape[0], x.shape[1], int(attrs["k"]), dtype=dtype), dtype)]


@shape_rule("EyeLike")
def _eye_like_shape(types, values, attrs, num_outputs):
    x = shape_of(types[0])
    if x is not None and len(x) != 2:
        raise RuntimeShapeError(f"EyeLike: input must be 2-D, got shape {pshape_str(x)}")
    return [tensor_type(_eye_elem(elem_of(types[0]), attrs), x if x is not None else (None, None))]


def _claim_eye_like(node, graph, attrs):
    d = attrs.get("dtype")
    if d is not None and d not in _EYE_TYPES:
        return f"attribute dtype={type_name(d)} is not supported (supported: f16, f32, f64, i32, i64)"
    x = graph.type_of(node.inputs[0]).elem_type
    if d == F16 and x != F16:
        return (f"dtype=f16 from a {type_name(x)} input is not claimed: ONNX Runtime's CPU EP has no "
                f"EyeLike kernel producing f16 (it runs f16 only as f16 -> f16)")
    return None


register(OpDef("EyeLike", (9, 22), ("T1",), ("T2",), {"T1": _EYE_TYPES, "T2": _EYE_TYPES}, _eye_like,
               attributes={"dtype": None, "k": 0}, claim=_claim_eye_like, shape_rule=_eye_like_shape))


# ---- Compress --------------------------------------------------------------------------------------

def _compress_count(cond: np.ndarray, extent: int) -> np.ndarray:
    if cond.ndim != 1:
        raise RuntimeShapeError(f"Compress: condition must be 1-D, got shape {shape_str(cond.shape)}")
    # ONNX Runtime ignores condition entries past the extent (selected or not).
    return np.asarray(cond[:extent], dtype=np.bool_)


@kernel("Compress")
def _compress(inputs, attrs):
    x, cond = inputs
    axis = attrs.get("axis")
    if axis is None:
        flat = x.reshape(-1)
        keep = _compress_count(cond, flat.size)
        return [result(flat[:keep.size][keep], x.dtype)]
    axis = normalize_axis("Compress", int(axis), x.ndim)
    keep = _compress_count(cond, x.shape[axis])
    idx = np.nonzero(keep)[0]
    return [result(np.take(x, idx, axis=axis), x.dtype)]


@shape_rule("Compress")
def _compress_shape(types, values, attrs, num_outputs):
    x = shape_of(types[0])
    elem = elem_of(types[0])
    cond = known_value(types, values, 1)
    axis = attrs.get("axis")
    if axis is None:
        n = num_elements(x)
        count = None if cond is None or n is None else int(np.count_nonzero(_compress_count(cond, n)))
        return [tensor_type(elem, (count,))]
    if x is None:
        return [tensor_type(elem, None)]
    axis = normalize_axis("Compress", int(axis), len(x))
    count = None
    if cond is not None and x[axis] is not None:
        count = int(np.count_nonzero(_compress_count(cond, x[axis])))
    return [tensor_type(elem, tuple(count if i == axis else d for i, d in enumerate(x)))]


def _claim_compress(node, graph, attrs):
    rank = graph.type_of(node.inputs[0]).rank
    axis = attrs.get("axis")
    if axis is not None and rank is not None and not -rank <= axis < rank:
        return f"attribute axis={axis} is out of range for a rank-{rank} input"
    return None


register(OpDef("Compress", (9, 11, 28), ("T", "B"), ("T",), {"T": ANY_TENSOR, "B": frozenset({BOOL})},
               _compress, attributes={"axis": None}, claim=_claim_compress,
               shape_rule=_compress_shape, host_inputs=(1,)))
