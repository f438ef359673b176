"""Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin.

'axes' is an attribute before the opset where it became input 1 (ReduceSum 13, the others 18);
keepdims (default 1) and, from that opset on, noop_with_empty_axes. Float sums accumulate in f32
(f16 upcast, rounded once); integer sums wrap in the input's type, integer means truncate.
Empty reductions give what ONNX Runtime gives: sum 0, mean 0, max -inf/INT_MIN/false,
min +inf/INT_MAX/true.
"""
from __future__ import annotations

import numpy as np

from ._common import (at, elem_of, has_input, int_list, is_float, kernel, known_value,
                      normalize_axes, operand_length, result, shape_of, shape_rule, tensor_type,
                      upcast)
from .registry import ALL, BOOL, I64, NUMERIC, OpDef, register


def _trunc_div_scalar(s: np.ndarray, n: int) -> np.ndarray:
    q = np.abs(s) // n  # C integer division truncates toward zero
    return np.where(s < 0, -q, q)


def _sum(x, axes, keepdims):
    if is_float(x):
        return np.sum(upcast(x), axis=axes, keepdims=keepdims, dtype=np.float32)
    return np.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype)


def _mean(x, axes, keepdims):
    n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    s = _sum(x, axes, keepdims)
    if n == 0:
        return np.zeros_like(s)
    if is_float(x):
        return s / np.float32(n)
    return _trunc_div_scalar(s, n)


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
        return [result(fn(x, axes, bool(attrs["keepdims"])), x.dtype)]
    return reference


def _reduce_shape(op_type: str):
    @shape_rule(op_type)
    def rule(types, values, attrs, num_outputs):
        elem = elem_of(types[0])
        x = shape_of(types[0])
        keepdims = bool(attrs["keepdims"])
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

register(OpDef("ReduceSum", (1, 11, 13), ("T", "I"), ("T",), {"T": NUMERIC, "I": _I64},
               _reduce("ReduceSum", _sum), attributes=dict(_ATTRS), claim=_claim(13, None),
               min_inputs=1, shape_rule=_reduce_shape("ReduceSum"), host_inputs=(1,)))
register(OpDef("ReduceMean", (1, 11, 13, 18), ("T", "I"), ("T",), {"T": NUMERIC, "I": _I64},
               _reduce("ReduceMean", _mean), attributes=dict(_ATTRS), claim=_claim(18, None),
               min_inputs=1, shape_rule=_reduce_shape("ReduceMean"), host_inputs=(1,)))
register(OpDef("ReduceMax", (1, 11, 12, 13, 18, 20), ("T", "I"), ("T",), {"T": ALL, "I": _I64},
               _reduce("ReduceMax", _extreme(True)), attributes=dict(_ATTRS),
               claim=_claim(18, 20), min_inputs=1, shape_rule=_reduce_shape("ReduceMax"),
               host_inputs=(1,)))
register(OpDef("ReduceMin", (1, 11, 12, 13, 18, 20), ("T", "I"), ("T",), {"T": ALL, "I": _I64},
               _reduce("ReduceMin", _extreme(False)), attributes=dict(_ATTRS),
               claim=_claim(18, 20), min_inputs=1, shape_rule=_reduce_shape("ReduceMin"),
               host_inputs=(1,)))
