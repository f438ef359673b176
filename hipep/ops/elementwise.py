"""Elementwise ops: binary arithmetic, unary math, comparisons and logic, Where, Clip, Cast.

Broadcasting is ONNX multidirectional broadcasting (= numpy's). Integer arithmetic follows the
C semantics ONNX Runtime's CPU kernels use (Div truncates toward zero, Mod fmod=1 is C's %),
not numpy's floor semantics. f16 math runs in f32 and is rounded once.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import RuntimeShapeError
from ._common import (NP_DTYPES, at, broadcast_partial, broadcast_shape, compute_dtype, elem_of,
                      is_float, kernel, num_elements, pshape_str, result, scalar_operand,
                      shape_of, shape_rule, tensor_type, type_name, upcast)
from .registry import ALL, BOOL, FLOATS, NUMERIC, REQUIRED, OpDef, register

BOOLS = frozenset({BOOL})


# ---- shape rules -----------------------------------------------------------------------------

def _broadcast_rule(op_type: str, out_elem: int | None = None, names=None, elem_from: int = 0):
    """Output: the broadcast of every input's shape; element type `out_elem`, else input
    `elem_from`'s."""
    @shape_rule(op_type)
    def rule(types, values, attrs, num_outputs):
        present = [t for t in types if t is not None]
        shape = broadcast_partial(op_type, [t.shape for t in present],
                                  names or [f"input {i}" for i in range(len(present))])
        elem = out_elem if out_elem is not None else elem_of(at(types, elem_from))
        return [tensor_type(elem, shape)]
    return rule


def _same_rule(op_type: str):
    """Output: input 0's shape and element type."""
    @shape_rule(op_type)
    def rule(types, values, attrs, num_outputs):
        return [tensor_type(elem_of(types[0]), shape_of(types[0]))]
    return rule


# ---- binary arithmetic -----------------------------------------------------------------------

def _int_zero_check(op_type: str, b: np.ndarray) -> None:
    if b.dtype.kind in "iu" and b.size and not np.all(b):
        raise RuntimeShapeError(f"{op_type}: integer division by zero (divisor B has "
                                f"{int(np.count_nonzero(b == 0))} zero element(s))")


def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C integer division (truncates toward zero), from numpy's floor division."""
    q = np.floor_divide(a, b)
    r = np.remainder(a, b)
    fix = (r != 0) & ((a < 0) != (b < 0))
    return q + fix.astype(q.dtype)


def _binary(op_type: str, fn, int_fn=None):
    @kernel(op_type)
    def reference(inputs, attrs):
        a, b = inputs
        broadcast_shape(op_type, a, b)
        if is_float(a):
            return [result(fn(upcast(a), upcast(b)), a.dtype)]
        return [result((int_fn or fn)(a, b), a.dtype)]
    return reference


def _int_div(a, b):
    _int_zero_check("Div", b)
    return _trunc_div(a, b)


for _name, _fn, _ifn in (("Add", np.add, None), ("Sub", np.subtract, None),
                         ("Mul", np.multiply, None), ("Div", np.divide, _int_div)):
    register(OpDef(_name, (7, 13, 14), ("T", "T"), ("T",), {"T": NUMERIC},
                   _binary(_name, _fn, _ifn), shape_rule=_broadcast_rule(_name, names=["A", "B"])))


@kernel("Pow")
def _pow(inputs, attrs):
    x, y = inputs
    shape = broadcast_shape("Pow", x, y, names=["X", "Y"])
    # ONNX Runtime: a single-element exponent equal to 2 or 3 is computed as x*x (x*x*x) in
    # X's type (integers wrap); everything else is std::pow, in double unless both are the same
    # float type, then cast to X's type (C conversion for integers).
    if y.size == 1 and float(y.reshape(-1)[0]) in (2.0, 3.0):
        xs = upcast(x)
        r = xs * xs if float(y.reshape(-1)[0]) == 2.0 else xs * xs * xs
        return [result(np.broadcast_to(r, shape), x.dtype)]
    if is_float(x):
        if compute_dtype(x.dtype) == compute_dtype(y.dtype):
            r = np.power(upcast(x), upcast(y))
        else:
            r = np.power(x.astype(np.float64), y.astype(np.float64))
        return [result(r, x.dtype)]
    # Integer results are bit-exact: libm's pow in double (numpy's SIMD pow can differ by an
    # ulp, which shows after the conversion), then C's truncating conversion.
    xb, yb = np.broadcast_arrays(x.astype(np.float64), y.astype(np.float64))
    r = _C_POW(xb, yb).astype(np.float64) if xb.size else np.empty(xb.shape, np.float64)
    return [result(r, x.dtype)]


def _c_pow_scalar(a: float, b: float) -> float:
    """C's pow(a, b) for finite integer-valued a (math.pow raises where C returns inf/nan)."""
    try:
        return math.pow(a, b)
    except OverflowError:
        odd = float(b).is_integer() and int(b) % 2 == 1
        return -math.inf if a < 0 and odd else math.inf
    except ValueError:
        return math.inf if a == 0 else math.nan  # 0 ** negative: pole; negative ** fraction: nan


_C_POW = np.frompyfunc(_c_pow_scalar, 2, 1)


register(OpDef("Pow", (7, 12, 13, 15), ("T", "T1"), ("T",), {"T": NUMERIC, "T1": NUMERIC}, _pow,
               shape_rule=_broadcast_rule("Pow", names=["X", "Y"])))


def _variadic(op_type: str, fn):
    @kernel(op_type)
    def reference(inputs, attrs):
        broadcast_shape(op_type, *inputs, names=[f"input {i}" for i in range(len(inputs))])
        dtype = inputs[0].dtype
        acc = inputs[0]
        for x in inputs[1:]:
            acc = fn(acc, x)  # NaN propagates, as in ONNX Runtime
        return [result(acc, dtype)]
    return reference


register(OpDef("Max", (8, 12, 13), ("T",), ("T",), {"T": NUMERIC}, _variadic("Max", np.maximum),
               min_inputs=1, variadic=True, shape_rule=_broadcast_rule("Max")))
register(OpDef("Min", (8, 12, 13), ("T",), ("T",), {"T": NUMERIC}, _variadic("Min", np.minimum),
               min_inputs=1, variadic=True, shape_rule=_broadcast_rule("Min")))


@kernel("Mod")
def _mod(inputs, attrs):
    a, b = inputs
    broadcast_shape("Mod", a, b)
    fmod = int(attrs["fmod"])
    if not is_float(a):
        _int_zero_check("Mod", b)
        return [result(np.fmod(a, b) if fmod else np.mod(a, b), a.dtype)]
    # fmod=1: C fmod (sign of the dividend); fmod=0 (opset 28 floats): floor mod, sign of divisor.
    return [result((np.fmod if fmod else np.mod)(upcast(a), upcast(b)), a.dtype)]


def _claim_mod(node, graph, attrs):
    fmod = attrs["fmod"]
    if fmod not in (0, 1):
        return f"attribute fmod={fmod} is invalid (must be 0 or 1)"
    t = graph.type_of(node.inputs[0])
    if t.elem_type in FLOATS and fmod == 0 and node.since_version < 28:
        return (f"fmod=0 on floating-point input ({t.dtype_name}) is invalid before opset 28 "
                f"(ONNX requires fmod=1 for floats)")
    return None


register(OpDef("Mod", (10, 13, 28), ("T", "T"), ("T",), {"T": NUMERIC}, _mod,
               attributes={"fmod": 0}, claim=_claim_mod, shape_rule=_broadcast_rule("Mod", names=["A", "B"])))


# ---- unary math ------------------------------------------------------------------------------

def _unary(op_type: str, fn, wide: bool = False):
    """fn runs on f32 (f16 upcast) or, with wide=True, on f64 for float inputs; integers as-is."""
    @kernel(op_type)
    def reference(inputs, attrs):
        x = inputs[0]
        if is_float(x):
            if not wide:
                return [result(fn(upcast(x), attrs), x.dtype)]
            # f64 math, rounded to f32 (what ORT's f32 kernels approximate), then once to f16.
            return [result(fn(x.astype(np.float64), attrs).astype(np.float32), x.dtype)]
        return [result(fn(x, attrs), x.dtype)]
    return reference


def _reg_unary(op_type, since, fn, types=FLOATS, attributes=None, claim=None, wide=False):
    register(OpDef(op_type, since, ("T",), ("T",), {"T": types}, _unary(op_type, fn, wide),
                   attributes=attributes or {}, claim=claim, shape_rule=_same_rule(op_type)))


_SQRT_2_OVER_PI = 0.7978845608028654
_TWO_OVER_SQRT_PI = 1.1283791670955126


def erf(x: np.ndarray) -> np.ndarray:
    """Vectorized erf in float64 (accurate to ~1e-13 relative): Maclaurin series for |x| < 3,
    1 - erfc (Chebyshev fit, relative error < 1.2e-7 of erfc < 2.3e-5) beyond."""
    x = np.asarray(x, dtype=np.float64)
    ax = np.abs(x)
    small = np.where(ax < 3.0, x, 0.0)
    x2 = small * small
    term = small.copy()
    total = small.copy()
    for n in range(1, 80):
        term = term * (-x2) / n
        total = total + term / (2 * n + 1)
    out = np.where(ax < 3.0, _TWO_OVER_SQRT_PI * total, 0.0)
    t = 1.0 / (1.0 + 0.5 * np.where(ax >= 3.0, ax, 3.0))
    erfc = t * np.exp(-ax * ax - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (
        0.09678418 + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (
            1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))))
    big = np.sign(x) * (1.0 - erfc)
    return np.where(ax >= 3.0, big, out)


def _gelu(x, attrs):
    if attrs["approximate"] == "tanh":
        return 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def _claim_gelu(node, graph, attrs):
    if attrs["approximate"] not in ("none", "tanh"):
        return f"attribute approximate='{attrs['approximate']}' is invalid (must be 'none' or 'tanh')"
    return None


def _sigmoid(x, attrs):
    return 1.0 / (1.0 + np.exp(-x))


def _f32(v) -> np.float32:
    return np.float32(v)  # ONNX float attributes are f32; ORT computes with them as such


_reg_unary("Neg", (6, 13), lambda x, a: np.negative(x), NUMERIC)
_reg_unary("Abs", (6, 13), lambda x, a: np.abs(x), NUMERIC)
_reg_unary("Sign", (9, 13), lambda x, a: np.sign(x), NUMERIC)
_reg_unary("Relu", (6, 13, 14), lambda x, a: np.maximum(x, x.dtype.type(0)), NUMERIC)
_reg_unary("Exp", (6, 13), lambda x, a: np.exp(x))
_reg_unary("Log", (6, 13), lambda x, a: np.log(x))
_reg_unary("Sqrt", (6, 13), lambda x, a: np.sqrt(x))
_reg_unary("Reciprocal", (6, 13), lambda x, a: np.reciprocal(x))
_reg_unary("Sigmoid", (6, 13), _sigmoid, wide=True)
_reg_unary("Tanh", (6, 13), lambda x, a: np.tanh(x))
_reg_unary("Erf", (9, 13), lambda x, a: erf(x), wide=True)
_reg_unary("Sin", (7, 22), lambda x, a: np.sin(x))
_reg_unary("Cos", (7, 22), lambda x, a: np.cos(x))
_reg_unary("Floor", (6, 13), lambda x, a: np.floor(x))
_reg_unary("Ceil", (6, 13), lambda x, a: np.ceil(x))
_reg_unary("Round", (11, 22), lambda x, a: np.rint(x))  # half to even
_reg_unary("Softplus", (1, 22), lambda x, a: np.logaddexp(0.0, x), wide=True)
_reg_unary("LeakyRelu", (6, 16), lambda x, a: np.where(x >= 0, x, _f32(a["alpha"]) * x),
           attributes={"alpha": 0.01})
_reg_unary("Elu", (6, 22), lambda x, a: np.where(x >= 0, x, a["alpha"] * np.expm1(x)),
           attributes={"alpha": 1.0}, wide=True)
_reg_unary("HardSigmoid", (6, 22),
           lambda x, a: np.minimum(np.maximum(_f32(a["alpha"]) * x + _f32(a["beta"]), 0), 1),
           attributes={"alpha": 0.2, "beta": 0.5})
_reg_unary("Gelu", (20,), _gelu, attributes={"approximate": "none"}, claim=_claim_gelu, wide=True)


@kernel("Clip")
def _clip(inputs, attrs):
    x = inputs[0]
    lo = inputs[1] if len(inputs) > 1 else None
    hi = inputs[2] if len(inputs) > 2 else None
    out = x
    # max(x, min) then min(., max): with min > max every element becomes max (ONNX 13); NaN stays.
    if lo is not None:
        out = np.maximum(out, scalar_operand("Clip", "min", lo).astype(x.dtype))
    if hi is not None:
        out = np.minimum(out, scalar_operand("Clip", "max", hi).astype(x.dtype))
    return [result(out, x.dtype)]


# Clip-6 (min/max attributes defaulting to +-FLT_MAX) is not claimed: its defaults clamp inf,
# which the input form of 11+ does not, and the reference is not told the opset.
@shape_rule("Clip")
def _clip_shape(types, values, attrs, num_outputs):
    for i, what in ((1, "min"), (2, "max")):
        n = num_elements(shape_of(at(types, i)))
        if n is not None and n != 1:
            raise RuntimeShapeError(f"Clip: '{what}' must be a scalar (one element), got shape "
                                    f"{pshape_str(types[i].shape)}")
    return [tensor_type(elem_of(types[0]), shape_of(types[0]))]


register(OpDef("Clip", (11, 12, 13), ("T", "T", "T"), ("T",), {"T": NUMERIC}, _clip, min_inputs=1,
               shape_rule=_clip_shape))


# ---- comparisons and logic -------------------------------------------------------------------

def _compare(op_type: str, fn):
    @kernel(op_type)
    def reference(inputs, attrs):
        a, b = inputs
        broadcast_shape(op_type, a, b)
        return [result(fn(a, b), np.bool_)]
    return reference


for _name, _since, _types, _fn in (
        ("Equal", (7, 11, 13, 19), ALL, np.equal),
        ("Less", (7, 9, 13), NUMERIC, np.less),
        ("Greater", (7, 9, 13), NUMERIC, np.greater),
        ("LessOrEqual", (12, 16), NUMERIC, np.less_equal),
        ("GreaterOrEqual", (12, 16), NUMERIC, np.greater_equal),
        ("And", (7,), BOOLS, np.logical_and),
        ("Or", (7,), BOOLS, np.logical_or),
        ("Xor", (7,), BOOLS, np.logical_xor)):
    register(OpDef(_name, _since, ("T", "T"), ("B",), {"T": _types, "B": BOOLS},
                   _compare(_name, _fn), shape_rule=_broadcast_rule(_name, BOOL, ["A", "B"])))

register(OpDef("Not", (1,), ("T",), ("T",), {"T": BOOLS},
               kernel("Not")(lambda inputs, attrs: [result(np.logical_not(inputs[0]), np.bool_)]),
               shape_rule=_same_rule("Not")))


@kernel("Where")
def _where(inputs, attrs):
    c, x, y = inputs
    broadcast_shape("Where", c, x, y, names=["condition", "X", "Y"])
    return [result(np.where(c, x, y), x.dtype)]


@shape_rule("Where")
def _where_shape(types, values, attrs, num_outputs):
    shape = broadcast_partial("Where", [shape_of(t) for t in types[:3]], ["condition", "X", "Y"])
    return [tensor_type(elem_of(types[1]) or elem_of(types[2]), shape)]


register(OpDef("Where", (9, 16), ("B", "T", "T"), ("T",), {"B": BOOLS, "T": ALL}, _where,
               shape_rule=_where_shape))


# ---- Cast ------------------------------------------------------------------------------------

@kernel("Cast")
def _cast(inputs, attrs):
    x = inputs[0]
    to = NP_DTYPES.get(int(attrs["to"]))
    if to is None:
        raise RuntimeShapeError(f"Cast: target type {type_name(int(attrs['to']))} is not supported")
    if to == np.float16 and x.dtype.kind in "iub":
        # ONNX Runtime converts integers to f16 through f32 (two roundings for large values).
        return [result(x.astype(np.float32).astype(np.float16))]
    # float -> int is C's truncating conversion (NaN/inf/out of range: the x86 result, INT_MIN);
    # float -> bool is x != 0 (NaN -> true).
    return [result(x.astype(to))]


@shape_rule("Cast")
def _cast_shape(types, values, attrs, num_outputs):
    return [tensor_type(int(attrs["to"]), shape_of(types[0]))]


def _claim_cast(node, graph, attrs):
    to = attrs["to"]
    if to not in NP_DTYPES:
        names = ", ".join(type_name(t) for t in sorted(NP_DTYPES))
        return f"attribute to={type_name(to)} (elem type {to}) is not a supported target; supported: {names}"
    # 'saturate' only affects float8 targets, none of which is supported: any value is exact.
    if attrs["round_mode"] != "up":
        return (f"attribute round_mode='{attrs['round_mode']}' is not supported "
                f"(only the default 'up' is claimed)")
    return None


register(OpDef("Cast", (6, 9, 13, 19, 21, 23, 24, 25, 28), ("T1",), ("T2",),
               {"T1": ALL, "T2": ALL}, _cast,
               attributes={"to": REQUIRED, "saturate": 1, "round_mode": "up"},
               claim=_claim_cast, shape_rule=_cast_shape))
