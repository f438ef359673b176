"""Elementwise ops: binary arithmetic, unary math, comparisons and logic, Where, Clip, Cast.

Broadcasting is ONNX multidirectional broadcasting (= numpy's). Integer arithmetic follows the
C semantics ONNX Runtime's CPU kernels use (Div truncates toward zero, Mod fmod=1 is C's %),
not numpy's floor semantics. f16 math runs in f32 and is rounded once. f32 Sigmoid, Tanh and
Gelu(approximate='tanh') replay MLAS's FMA3 kernels bit for bit (mlas_logistic, mlas_tanh).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import RuntimeShapeError
from ..graph import elem_type_of
from ._common import (NP_DTYPES, at, broadcast_partial, broadcast_shape, compute_dtype, elem_of,
                      is_float, kernel, num_elements, pshape_str, result, scalar_operand,
                      shape_of, shape_rule, tensor_type, type_name, upcast)
from .registry import (ALL, ALL_INTS, ANY_TENSOR, BF16, BOOL, F16, F32, FLOATS, I32, I64, NUMERIC,
                       OUTPUT_COUNT, REQUIRED, SINCE_VERSION, U8, U32, U64, OpDef, register)

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

def _unary(op_type: str, fn, wide: bool = False, f32_fn=None):
    """fn runs on f32 (f16 upcast) or, with wide=True, on f64 for float inputs; integers as-is.
    f32_fn, if given, is a bit-exact emulation of ORT's f32 kernel used for f32 inputs (it may
    return None to defer to fn)."""
    @kernel(op_type)
    def reference(inputs, attrs):
        x = inputs[0]
        if f32_fn is not None and x.dtype == np.float32:
            y = f32_fn(x, attrs)
            if y is not None:
                return [result(y, np.float32)]
        if is_float(x):
            if not wide:
                return [result(fn(upcast(x), attrs), x.dtype)]
            # f64 math, rounded to f32 (what ORT's f32 kernels approximate), then once to f16.
            return [result(fn(x.astype(np.float64), attrs).astype(np.float32), x.dtype)]
        return [result(fn(x, attrs), x.dtype)]
    return reference


def _reg_unary(op_type, since, fn, types=FLOATS, attributes=None, claim=None, wide=False, f32_fn=None):
    register(OpDef(op_type, since, ("T",), ("T",), {"T": types}, _unary(op_type, fn, wide, f32_fn),
                   attributes=attributes or {}, claim=claim, shape_rule=_same_rule(op_type)))


_SQRT_2_OVER_PI = 0.7978845608028654
_TWO_OVER_SQRT_PI = 1.1283791670955126


# ---- bit-exact f32 building blocks (shared with the contrib modules) ---------------------------
# MLAS's x86 kernels use fused multiply-adds. Reproducing them bit for bit needs a correctly
# rounded f32 fma, which numpy lacks: the f32 product is exact in f64; the f64 sum's error is
# recovered exactly (TwoSum) and decides the only case where rounding the f64 sum to f32 can go
# wrong -- the f64 sum lying exactly halfway between two f32 values.

def fma_f32(a, b, c) -> np.ndarray:
    """Correctly rounded float32 a * b + c, elementwise (numpy broadcasting)."""
    a = np.asarray(a, np.float32).astype(np.float64)
    b = np.asarray(b, np.float32).astype(np.float64)
    c = np.asarray(c, np.float32).astype(np.float64)
    with np.errstate(all="ignore"):
        p = a * b
        s = p + c
        bp = s - c
        err = (p - bp) + (c - (s - bp))
        r = s.astype(np.float32)
        rd = r.astype(np.float64)
        other = np.where(rd < s, np.nextafter(r, np.float32(np.inf)), np.nextafter(r, np.float32(-np.inf)))
        od = other.astype(np.float64)
        tie = (rd != s) & (s == (rd + od) * 0.5) & (err != 0) & np.isfinite(s)
        take = tie & (((od > rd) & (err > 0)) | ((od < rd) & (err < 0)))
        out = np.where(take, other, r).astype(np.float32)
    return out


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


# MLAS's f32 tanh and logistic (tanh.cpp / logistic.cpp constants; on AVX2/AVX512 x86-64 ORT runs
# the FMA3 kernels, whose multiply-adds are fused): a clamped odd rational polynomial in x^2,
# evaluated in Horner form with fmas, one division. Bit-identical to ORT 1.31's CPU EP there.
_TANH_RANGE = np.float32(9.0)
_TANH_P = tuple(np.float32(v) for v in (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                                        5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
                                        4.89352455891786e-03))
_TANH_Q = tuple(np.float32(v) for v in (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
                                        4.89352518554385e-03))
_LOGISTIC_RANGE = np.float32(18.0)
_LOGISTIC_P = tuple(np.float32(v) for v in (4.37031012579801e-11, 1.15627324459942e-07, 6.08574864600143e-05,
                                            8.51377133304701e-03, 2.48287947061529e-01))
_LOGISTIC_Q = tuple(np.float32(v) for v in (6.10247389755681e-13, 5.76102136993427e-09, 6.29106785017040e-06,
                                            1.70198817374094e-03, 1.16817656904453e-01, 9.93151921023180e-01))


def _mlas_rational(x: np.ndarray, bound, pc, qc) -> np.ndarray:
    """p(x^2) * x / q(x^2) on x clamped to [-bound, bound], as MLAS's FMA3 kernels compute it."""
    v = np.minimum(np.maximum(np.asarray(x, np.float32), -bound), bound)  # NaN stays NaN
    v2 = (v * v).astype(np.float32)
    p = fma_f32(v2, pc[0], pc[1])
    for c in pc[2:]:
        p = fma_f32(p, v2, c)
    p = (p * v).astype(np.float32)
    q = fma_f32(v2, qc[0], qc[1])
    for c in qc[2:]:
        q = fma_f32(q, v2, c)
    with np.errstate(all="ignore"):
        return (p / q).astype(np.float32)


_LIBM: dict = {}


def libm_f32(name: str):
    """libm's float function `name` ("tanhf", "expf", "logf") as an elementwise numpy function:
    what ORT's scalar std::tanh / std::exp / std::log on floats call at run time. glibc's tanhf
    is not correctly rounded, so numpy's tanh (or f64 math rounded) cannot stand in for it."""
    if name not in _LIBM:
        import ctypes
        import ctypes.util

        fn = getattr(ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6"), name)
        fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
        vec = np.frompyfunc(lambda v: fn(float(v)), 1, 1)

        def apply(x):
            x = np.asarray(x, np.float32)
            if x.size == 0:
                return x.copy()
            return np.asarray(vec(x), dtype=np.float32).reshape(x.shape)
        _LIBM[name] = apply
    return _LIBM[name]


def mlas_tanh(x: np.ndarray) -> np.ndarray:
    """MlasComputeTanh on f32 values (ORT's f32 Tanh, FastGelu/Gelu-tanh inner tanh)."""
    return _mlas_rational(x, _TANH_RANGE, _TANH_P, _TANH_Q)


def mlas_logistic(x: np.ndarray) -> np.ndarray:
    """MlasComputeLogistic on f32 values (ORT's f32 Sigmoid): rational + 0.5, clamped to [0, 1]."""
    r = (_mlas_rational(x, _LOGISTIC_RANGE, _LOGISTIC_P, _LOGISTIC_Q) + np.float32(0.5)).astype(np.float32)
    return np.minimum(np.maximum(r, np.float32(0.0)), np.float32(1.0))


_GELU_B = np.float32(0.7978845608028654)    # sqrt(2 / pi)
_GELU_C = np.float32(0.035677408136300125)  # 0.044715 * sqrt(2 / pi)


def _gelu_tanh_f32(x: np.ndarray) -> np.ndarray:
    """ORT's f32 Gelu(approximate='tanh'): t = x * (C * x * x + B) in plain f32 (no fma),
    MlasComputeTanh(t), then 0.5f * x * (tanh + 1)."""
    f32 = np.float32
    t = (x * ((((_GELU_C * x).astype(f32) * x).astype(f32) + _GELU_B).astype(f32))).astype(f32)
    return ((f32(0.5) * x).astype(f32) * (mlas_tanh(t) + f32(1.0)).astype(f32)).astype(f32)


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
_reg_unary("Sign", (9, 13), lambda x, a: np.sign(x), NUMERIC | ALL_INTS)
_reg_unary("Relu", (6, 13, 14), lambda x, a: np.maximum(x, x.dtype.type(0)), NUMERIC)
_reg_unary("Exp", (6, 13), lambda x, a: np.exp(x))
_reg_unary("Log", (6, 13), lambda x, a: np.log(x))
_reg_unary("Sqrt", (6, 13), lambda x, a: np.sqrt(x))
_reg_unary("Reciprocal", (6, 13), lambda x, a: np.reciprocal(x))
_reg_unary("Sigmoid", (6, 13), _sigmoid, wide=True, f32_fn=lambda x, a: mlas_logistic(x))
_reg_unary("Tanh", (6, 13), lambda x, a: np.tanh(x), f32_fn=lambda x, a: mlas_tanh(x))
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
_reg_unary("Gelu", (20,), _gelu, attributes={"approximate": "none"}, claim=_claim_gelu, wide=True,
           f32_fn=lambda x, a: _gelu_tanh_f32(x) if a["approximate"] == "tanh" else None)


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
               {"T1": ALL | {BF16}, "T2": ALL | {BF16}}, _cast,
               attributes={"to": REQUIRED, "saturate": 1, "round_mode": "up"},
               claim=_claim_cast, shape_rule=_cast_shape))


# ---- more activations and unary math ---------------------------------------------------------
# Float activations compute like the ones above: in f32 (f16 upcast, rounded once), or in f64
# rounded to f32 (wide=True) where ONNX Runtime's f32 kernel is accurate to about an ulp.

def _input_elem(node, graph, i: int = 0) -> int:
    return graph.type_of(node.inputs[i]).elem_type


def f16_broken_before(since: int):
    """Rejects f16 input 0 below opset `since`: ONNX Runtime's CPU EP has no f16 kernel for those
    forms and its f16→f32 cast insertion fails on them, so there is nothing to compare with."""
    def claim(node, graph, attrs):
        if node.since_version < since and _input_elem(node, graph) == F16:
            return (f"f16 input to {node.op_type} opset {node.since_version} is not claimed: ONNX "
                    f"Runtime's CPU EP cannot run that form (f16 is claimed from opset {since})")
        return None
    return claim


def f16_allowed_from(since: int):
    """Rejects f16 input 0 below opset `since`, where the ONNX schema does not allow it."""
    def claim(node, graph, attrs):
        if node.since_version < since and _input_elem(node, graph) == F16:
            return (f"input 0 has element type f16, which {node.op_type} opset {node.since_version} "
                    f"does not allow (f16 from opset {since})")
        return None
    return claim


def _selu(x, a):
    alpha, gamma = float(_f32(a["alpha"])), float(_f32(a["gamma"]))
    return np.where(x > 0, gamma * x, gamma * (alpha * np.exp(x) - alpha))


def _celu(x, a):
    alpha = float(_f32(a["alpha"]))
    return np.maximum(x, 0.0) + np.minimum(0.0, alpha * np.expm1(x / alpha))


def _hard_swish(x, a):
    # ONNX Runtime runs HardSwish as its function body, HardSigmoid(alpha=1/6, beta=0.5) * x, in f32.
    return x * np.minimum(np.maximum(_f32(1.0 / 6.0) * x + _f32(0.5), 0), 1)


def _mish(x, a):
    return x * np.tanh(np.logaddexp(0.0, x))


def _shrink(inputs, attrs):
    x = inputs[0]
    # ONNX Runtime: val < -lambd ? val + bias : val > lambd ? val - bias : 0, with float lambd and
    # bias, so integers compute in f32 and convert back with C's truncation.
    lambd, bias = _f32(attrs["lambd"]), _f32(attrs["bias"])
    xf = x.astype(np.float32)
    y = np.where(xf < -lambd, xf + bias, np.where(xf > lambd, xf - bias, np.float32(0)))
    return [result(y.astype(x.dtype))]


_reg_unary("Selu", (6, 22), _selu, attributes={"alpha": 1.67326319217681884765625,
                                               "gamma": 1.05070102214813232421875}, wide=True)
_reg_unary("Celu", (12,), _celu, types=frozenset({F32}), attributes={"alpha": 1.0}, wide=True)
_reg_unary("Softsign", (1, 22), lambda x, a: x / (1.0 + np.abs(x)), claim=f16_broken_before(22))
_reg_unary("HardSwish", (14, 22), _hard_swish)
_reg_unary("Mish", (18, 22), _mish, wide=True)
_reg_unary("ThresholdedRelu", (10, 22), lambda x, a: np.where(x > _f32(a["alpha"]), x, x.dtype.type(0)),
           attributes={"alpha": 1.0})
register(OpDef("Shrink", (9,), ("T",), ("T",), {"T": FLOATS | ALL_INTS}, kernel("Shrink")(_shrink),
               attributes={"lambd": 0.5, "bias": 0.0}, shape_rule=_same_rule("Shrink")))

for _name, _since, _fn in (("Tan", (7, 22), np.tan), ("Asin", (7, 22), np.arcsin),
                           ("Acos", (7, 22), np.arccos), ("Atan", (7, 22), np.arctan),
                           ("Sinh", (9, 22), np.sinh), ("Cosh", (9, 22), np.cosh),
                           ("Asinh", (9, 22), np.arcsinh), ("Acosh", (9, 22), np.arccosh),
                           ("Atanh", (9, 22), np.arctanh)):
    _reg_unary(_name, _since, (lambda f: lambda x, a: f(x))(_fn), wide=True)


# ---- IsNaN / IsInf ---------------------------------------------------------------------------

def _bool_same_rule(op_type: str):
    @shape_rule(op_type)
    def rule(types, values, attrs, num_outputs):
        return [tensor_type(BOOL, shape_of(types[0]))]
    return rule


@kernel("IsInf")
def _isinf(inputs, attrs):
    x = inputs[0]
    out = np.zeros(x.shape, np.bool_)
    if attrs["detect_positive"]:
        out |= np.isposinf(x)
    if attrs["detect_negative"]:
        out |= np.isneginf(x)
    return [result(out)]


register(OpDef("IsNaN", (9, 13, 20), ("T",), ("B",), {"T": FLOATS, "B": BOOLS},
               kernel("IsNaN")(lambda inputs, attrs: [result(np.isnan(inputs[0]))]),
               shape_rule=_bool_same_rule("IsNaN")))
register(OpDef("IsInf", (10, 20), ("T",), ("B",), {"T": FLOATS, "B": BOOLS}, _isinf,
               attributes={"detect_negative": 1, "detect_positive": 1}, claim=f16_allowed_from(20),
               shape_rule=_bool_same_rule("IsInf")))


# ---- PRelu -----------------------------------------------------------------------------------

@kernel("PRelu")
def _prelu(inputs, attrs):
    x, slope = inputs
    broadcast_shape("PRelu", x, slope, names=["X", "slope"])
    if is_float(x):
        xs = upcast(x)
        return [result(np.where(xs < 0, upcast(slope) * xs, xs), x.dtype)]
    return [result(np.where(x < 0, slope * x, x), x.dtype)]


def _claim_prelu(node, graph, attrs):
    t = graph.type_of(node.inputs[0])
    if node.since_version < 16 and t.elem_type not in FLOATS:
        return (f"input 0 has element type {t.dtype_name}, which PRelu opset {node.since_version} does "
                f"not allow (integers from opset 16)")
    return None


# ONNX Runtime broadcasts slope and X both ways (the spec: slope broadcasts to X); so does this.
register(OpDef("PRelu", (7, 9, 16), ("T", "T"), ("T",), {"T": FLOATS | {I32, I64, U32}}, _prelu,
               claim=_claim_prelu, shape_rule=_broadcast_rule("PRelu", names=["X", "slope"])))


# ---- bitwise ---------------------------------------------------------------------------------

@kernel("BitShift")
def _bitshift(inputs, attrs):
    x, y = inputs
    broadcast_shape("BitShift", x, y, names=["X", "Y"])
    bits = x.dtype.itemsize * 8
    # A shift by the width or more gives 0 (C leaves it undefined; ORT's x86 result differs).
    big = y >= bits
    ys = np.where(big, 0, y).astype(x.dtype)
    out = np.left_shift(x, ys) if attrs["direction"] == "LEFT" else np.right_shift(x, ys)
    return [result(np.where(big, x.dtype.type(0), out), x.dtype)]


def _claim_bitshift(node, graph, attrs):
    if attrs["direction"] not in ("LEFT", "RIGHT"):
        return f"attribute direction='{attrs['direction']}' is invalid (must be 'LEFT' or 'RIGHT')"
    return None


register(OpDef("BitShift", (11,), ("T", "T"), ("T",), {"T": frozenset({U8, U32, U64})}, _bitshift,
               attributes={"direction": REQUIRED}, claim=_claim_bitshift,
               shape_rule=_broadcast_rule("BitShift", names=["X", "Y"])))

for _name, _fn in (("BitwiseAnd", np.bitwise_and), ("BitwiseOr", np.bitwise_or),
                   ("BitwiseXor", np.bitwise_xor)):
    register(OpDef(_name, (18,), ("T", "T"), ("T",), {"T": ALL_INTS}, _binary(_name, _fn),
                   shape_rule=_broadcast_rule(_name, names=["A", "B"])))
_reg_unary("BitwiseNot", (18,), lambda x, a: np.invert(x), ALL_INTS)


# ---- Sum / Mean (variadic) -------------------------------------------------------------------

def _sum_mean(op_type: str, mean: bool):
    @kernel(op_type)
    def reference(inputs, attrs):
        broadcast_shape(op_type, *inputs, names=[f"input {i}" for i in range(len(inputs))])
        dtype = inputs[0].dtype
        acc = upcast(inputs[0])
        for x in inputs[1:]:
            acc = acc + upcast(x)
        if mean:
            acc = acc * np.float32(1.0 / len(inputs))
        return [result(np.broadcast_to(acc, np.broadcast_shapes(*[x.shape for x in inputs])), dtype)]
    return reference


# Opset 6 forms do not broadcast (ONNX Runtime rejects differing shapes there); the reference
# broadcasts, which agrees wherever opset 6 is valid.
for _name in ("Sum", "Mean"):
    register(OpDef(_name, (6, 8, 13), ("T",), ("T",), {"T": FLOATS}, _sum_mean(_name, _name == "Mean"),
                   min_inputs=1, variadic=True, shape_rule=_broadcast_rule(_name)))


# ---- CastLike ----------------------------------------------------------------------------------

@kernel("CastLike")
def _cast_like(inputs, attrs):
    x, target = inputs
    return _cast([x], {**attrs, "to": elem_type_of(target.dtype)})


@shape_rule("CastLike")
def _cast_like_shape(types, values, attrs, num_outputs):
    return [tensor_type(elem_of(at(types, 1)), shape_of(types[0]))]


def _claim_cast_like(node, graph, attrs):
    if attrs["round_mode"] != "up":
        return (f"attribute round_mode='{attrs['round_mode']}' is not supported "
                f"(only the default 'up' is claimed)")
    return None


register(OpDef("CastLike", (15, 19, 21, 23, 24, 25), ("T1", "T2"), ("T2",), {"T1": ALL, "T2": ALL},
               _cast_like, attributes={"saturate": 1, "round_mode": "up"}, claim=_claim_cast_like,
               shape_rule=_cast_like_shape))


# ---- Dropout (inference) -----------------------------------------------------------------------

@kernel("Dropout")
def _dropout(inputs, attrs):
    x = inputs[0]
    out = [result(x)]
    if attrs[OUTPUT_COUNT] > 1:  # inference: nothing is dropped
        v = int(attrs.get(SINCE_VERSION, 12))
        # ORT's CPU kernel (the oracle) writes zeros of the input type (opset 7) or false (opset
        # 10) into the mask in inference; from opset 12 it is all true, as the spec says.
        if v < 10:
            out.append(np.zeros(x.shape, x.dtype))
        else:
            out.append(np.full(x.shape, v >= 12, np.bool_))
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
               {"T": FLOATS, "T1": FLOATS, "B": BOOLS}, _dropout,
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
