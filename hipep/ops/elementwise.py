"""Elementwise ops: binary arithmetic, unary math, comparisons and logic, Where, Clip, Cast.

Most of them are pointwise: each declares one scalar expression (hipep.ops.pointwise) for the
operand types it is given, its numpy reference evaluates that expression, and the compiler fuses
chains of them into one kernel (hip-fuse-pointwise). The expressions say exactly what the
references always did: broadcasting is ONNX multidirectional broadcasting (= numpy's); integer
arithmetic follows the C semantics ONNX Runtime's CPU kernels use (Div truncates toward zero,
Mod fmod=1 is C's %), not numpy's floor semantics; f16 math runs in f32 and is rounded once per
op; f32 Sigmoid, Tanh and Gelu(approximate='tanh') replay MLAS's FMA3 kernels bit for bit
(the pointwise primitives mlas_logistic, mlas_tanh). Pow computes x*x and x*x*x for a
one-element exponent of 2 and 3, as ONNX Runtime does (tested in the kernel where the exponent
is known only at run time); integer Pow is C's pow in double (the primitive libm_pow) converted
back as x86 converts.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..errors import RuntimeShapeError
from ..graph import elem_type_of
from . import pointwise as pw
from ._common import (NP_DTYPES, at, broadcast_partial, elem_of, input_type, kernel, num_elements, pshape_str,
                      shape_of, shape_rule, tensor_type, type_name)
from .pointwise import Builder, compute_type
# Re-exported: the contrib, normalization and attention families build on these.
from .pointwise import erf, fma_f32, mlas_logistic, mlas_tanh  # noqa: F401
from .registry import (ALL, ALL_INTS, BF16, BOOL, F16, F32, F64, FLOATS, I8, I16, I32, I64, LLM_FLOATS, NUMERIC, REQUIRED,
                       SINCE_VERSION, U8, U16, U32, U64, OpDef, register)

BOOLS = frozenset({BOOL})


# ---- shape rules -----------------------------------------------------------------------------

def _broadcast_rule(op_type: str, out_elem: int | None = None, names=None, elem_from: int = 0):
    """Output: the broadcast of every input's shape; element type `out_elem`, else input
    `elem_from`'s."""
    @shape_rule(op_type, symbolic=True)
    def rule(types, values, attrs, num_outputs):
        present = [t for t in types if t is not None]
        shape = broadcast_partial(op_type, [t.shape for t in present],
                                  names or [f"input {i}" for i in range(len(present))])
        elem = out_elem if out_elem is not None else elem_of(at(types, elem_from))
        return [tensor_type(elem, shape)]
    return rule


def _same_rule(op_type: str):
    """Output: input 0's shape and element type."""
    @shape_rule(op_type, symbolic=True)
    def rule(types, values, attrs, num_outputs):
        return [tensor_type(elem_of(types[0]), shape_of(types[0]))]
    return rule


def _register_pointwise(op_type, since, inputs, outputs, constraints, expr, names=None, **kw):
    """Registers a pointwise op: its reference evaluates `expr`'s expression."""
    register(OpDef(op_type, since, inputs, outputs, constraints,
                   pw.reference(op_type, expr, names), pointwise=expr, **kw))


def _same_types(operands) -> bool:
    return len({o.dtype for o in operands if o is not None}) == 1


def _variadic_names(n: int) -> list[str]:
    return [f"input {i}" for i in range(n)]


# ---- binary arithmetic -----------------------------------------------------------------------

def _arith(prim: str):
    """a <prim> b in the compute type (f16 widened to f32, rounded back once)."""
    def expr(operands, attrs):
        if not _same_types(operands):
            return None
        b = Builder(operands)
        t = compute_type(operands[0].dtype)
        r = b.call(prim, b.cast(b.input(0), t), b.cast(b.input(1), t))
        return b.build(b.cast(r, operands[0].dtype))
    return expr


# Every integer width (wrapping as ONNX Runtime's C++ arithmetic does) and f64 too.
_ARITH_TYPES = NUMERIC | ALL_INTS | {F64, BF16}
for _name, _prim in (("Add", "add"), ("Sub", "sub"), ("Mul", "mul"), ("Div", "div")):
    _register_pointwise(_name, (7, 13, 14), ("T", "T"), ("T",), {"T": _ARITH_TYPES}, _arith(_prim),
                        shape_rule=_broadcast_rule(_name, names=["A", "B"]))


def _x86_to_int(b: Builder, r, dtype):
    """f64 `r` to int32/int64 as ONNX Runtime's x86 build converts: toward zero, NaN and out of
    range to the minimum (cvttsd2si), which C leaves undefined and GPUs saturate; the cast node
    itself sees only values in range."""
    info = np.iinfo(dtype)
    top = b.const(-float(info.min), pw.F64)  # 2^31, 2^63: the first value past the maximum
    if float(info.min) - 1.0 != float(info.min):  # int32: -2^31 - 1 is a double, the bound is open
        above_min = b.gt(r, b.const(float(info.min) - 1.0, pw.F64))
    else:  # int64: the doubles below -2^63 are out of range, -2^63 itself is not
        above_min = b.ge(r, b.const(float(info.min), pw.F64))
    ok = b.call("and", above_min, b.lt(r, top))
    converted = b.cast(b.where(ok, r, b.const(0.0, pw.F64)), dtype)
    return b.where(ok, converted, b.const(int(info.min), dtype))


def _pow_general(b: Builder, x, y):
    """ORT's std::pow, converted to X's type: in X's float type where both are it (f16 in f32),
    else C's pow in double (an integer operand promotes both), which an integer X truncates."""
    if x.dtype.kind == "f":
        t = compute_type(x.dtype) if compute_type(x.dtype) == compute_type(y.dtype) else pw.F64
        return b.cast(b.pow(b.cast(b.input(0), t), b.cast(b.input(1), t)), x.dtype)
    r = b.libm_pow(b.cast(b.input(0), pw.F64), b.cast(b.input(1), pw.F64))
    return _x86_to_int(b, r, x.dtype)


def _pow_expr(operands, attrs):
    # ONNX Runtime computes x*x (x*x*x) in X's type (integers wrap) for an exponent of 2 (3) its
    # broadcast loop reads as one value, std::pow otherwise; a run-time exponent is tested in the
    # kernel. hipep goes by Y having one element, which every caller knows (claims, the fusion
    # pass, bindings), so fused and unfused plans agree; ORT's loop (broadcaster.h) goes by the
    # innermost axis not 1 in both shapes (a scalar's partner: its last axis) and shortcuts where
    # Y is 1 there and X is not. They differ for X 1 there (one element; [3, 1] with Y []) and Y
    # [3, 1] with X [3, 4]: only for 2 and 3, integers where x*x overflows (std::pow: INT_MIN),
    # floats by an ulp of x*x*x.
    x, y = operands
    if y.size is None:
        return None
    b = Builder(operands)
    general = _pow_general(b, x, y)
    if y.size != 1:
        return b.build(general)
    xs = b.cast(b.input(0), compute_type(x.dtype))
    square, cube = b.cast(xs * xs, x.dtype), b.cast(xs * xs * xs, x.dtype)
    if y.value is not None:
        e = float(y.scalar_value)
        return b.build(square if e == 2.0 else cube if e == 3.0 else general)
    exponent = b.input(1)
    is_two, is_three = b.eq(exponent, b.const(2, y.dtype)), b.eq(exponent, b.const(3, y.dtype))
    return b.build(b.where(is_two, square, b.where(is_three, cube, general)))


_register_pointwise("Pow", (7, 12, 13, 15), ("T", "T1"), ("T",), {"T": NUMERIC, "T1": NUMERIC}, _pow_expr,
                    names=["X", "Y"], shape_rule=_broadcast_rule("Pow", names=["X", "Y"]))


def _variadic(prim: str):
    """A left fold of `prim` over the inputs, in their own type (NaN propagates, as in ONNX
    Runtime)."""
    def expr(operands, attrs):
        if not _same_types(operands):
            return None
        b = Builder(operands)
        acc = b.input(0)
        for k in range(1, len(operands)):
            acc = b.call(prim, acc, b.input(k))
        return b.build(acc)
    return expr


# Max and Min select an input's value, exact in every type; not 16-bit integers, for which ONNX
# Runtime's CPU EP (the oracle) has no kernel.
_SELECTED = NUMERIC | {I8, U8, U32, U64, F64}
# Opset 6's forms do not broadcast and take floats only (ORT's CPU EP: f32, f16 through it); the
# reference broadcasts, which agrees wherever opset 6 is valid.
def _claim_max_min_6(node, graph, attrs):
    if node.since_version < 8 and _input_elem(node, graph) not in (F32, F16):
        return (f"input 0 has element type {type_name(_input_elem(node, graph))}: ONNX Runtime's CPU EP runs "
                f"{node.op_type}-6 in f32 (and f16 through it) only")
    return None


_register_pointwise("Max", (6, 8, 12, 13), ("T",), ("T",), {"T": _SELECTED}, _variadic("max"), names=_variadic_names,
                    min_inputs=1, variadic=True, shape_rule=_broadcast_rule("Max"), claim=_claim_max_min_6)
_register_pointwise("Min", (6, 8, 12, 13), ("T",), ("T",), {"T": _SELECTED}, _variadic("min"), names=_variadic_names,
                    min_inputs=1, variadic=True, shape_rule=_broadcast_rule("Min"), claim=_claim_max_min_6)


def _mod_expr(operands, attrs):
    # fmod=1: C fmod (sign of the dividend); fmod=0 (integers, opset 28 floats): floor mod, sign
    # of the divisor. Integer modulo by zero raises.
    return _arith("fmod" if int(attrs["fmod"]) else "mod")(operands, attrs)


def _claim_mod(node, graph, attrs):
    fmod = attrs["fmod"]
    if fmod not in (0, 1):
        return f"attribute fmod={fmod} is invalid (must be 0 or 1)"
    t = graph.type_of(node.inputs[0])
    if t.elem_type in FLOATS | {F64} and fmod == 0 and node.since_version < 28:
        return (f"fmod=0 on floating-point input ({t.dtype_name}) is invalid before opset 28 "
                f"(ONNX requires fmod=1 for floats)")
    return None


_register_pointwise("Mod", (10, 13, 28), ("T", "T"), ("T",), {"T": _ARITH_TYPES}, _mod_expr,
                    attributes={"fmod": 0}, claim=_claim_mod, shape_rule=_broadcast_rule("Mod", names=["A", "B"]))


# ---- unary math ------------------------------------------------------------------------------

def _unary(fn, wide: bool = False, f32_fn=None):
    """fn(builder, x, attrs) runs on f32 (f16 widened) or, with wide=True, on f64 for float
    inputs, rounded to f32 (what ORT's f32 kernels approximate) and then once more to f16;
    f64 (for the ops whose types list it, where ORT's CPU EP has a double kernel) in f64;
    integers as they are. f32_fn, if given, is a bit-exact emulation of ORT's f32 kernel used
    for f32 inputs (it may return None to defer to fn)."""
    def expr(operands, attrs):
        dtype = operands[0].dtype.name
        b = Builder(operands)
        x = b.input(0)
        if f32_fn is not None and dtype == pw.F32:
            y = f32_fn(b, x, attrs)
            if y is not None:
                return b.build(y)
        if dtype in (pw.F16, pw.BF16, pw.F32):
            if not wide:
                return b.build(b.cast(fn(b, b.cast(x, compute_type(dtype)), attrs), dtype))
            return b.build(b.cast(b.cast(fn(b, b.cast(x, pw.F64), attrs), pw.F32), dtype))
        if dtype == pw.F64:
            return b.build(fn(b, x, attrs))
        if operands[0].dtype.kind in "iu":
            return b.build(b.cast(fn(b, x, attrs), dtype))
        return None
    return expr


def _reg_unary(op_type, since, fn, types=FLOATS, attributes=None, claim=None, wide=False, f32_fn=None):
    _register_pointwise(op_type, since, ("T",), ("T",), {"T": types}, _unary(fn, wide, f32_fn),
                        attributes=attributes or {}, claim=claim, shape_rule=_same_rule(op_type))


_SQRT_2_OVER_PI = 0.7978845608028654


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


_GELU_B = np.float32(0.7978845608028654)    # sqrt(2 / pi)
_GELU_C = np.float32(0.035677408136300125)  # 0.044715 * sqrt(2 / pi)


def _gelu_tanh_f32(b, x, attrs):
    """ORT's f32 Gelu(approximate='tanh'): t = x * (C * x * x + B) in plain f32 (no fma),
    MlasComputeTanh(t), then 0.5f * x * (tanh + 1)."""
    if attrs["approximate"] != "tanh":
        return None
    t = x * (_GELU_C * x * x + _GELU_B)
    return (np.float32(0.5) * x) * (b.mlas_tanh(t) + np.float32(1.0))


def _gelu(b, x, attrs):
    if attrs["approximate"] == "tanh":
        return 0.5 * x * (1.0 + b.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
    return 0.5 * x * (1.0 + b.erf(x / math.sqrt(2.0)))


def _claim_gelu(node, graph, attrs):
    if attrs["approximate"] not in ("none", "tanh"):
        return f"attribute approximate='{attrs['approximate']}' is invalid (must be 'none' or 'tanh')"
    return None


def _f32(v) -> np.float32:
    return np.float32(v)  # ONNX float attributes are f32; ORT computes with them as such


# bf16 (LLM_FLOATS) where LLMs' activations meet them (ORT's CUDA EP's bf16 kernels compute in f32 too).
_reg_unary("Neg", (6, 13), lambda b, x, a: -x, NUMERIC | {BF16})
_reg_unary("Abs", (6, 13), lambda b, x, a: b.abs(x), NUMERIC)


def _sign_expr(operands, attrs):
    # ORT's f16 Sign kernel computes (x > 0) - (x < 0), so NaN gives 0 there (NaN in f32)
    if operands[0].dtype.name != pw.F16:
        return _unary(lambda b, x, a: b.sign(x))(operands, attrs)
    b = Builder(operands)
    x = b.cast(b.input(0), pw.F32)
    return b.build(b.cast(b.where(b.isnan(x), 0.0, b.sign(x)), pw.F16))


_register_pointwise("Sign", (9, 13), ("T",), ("T",), {"T": NUMERIC | ALL_INTS}, _sign_expr,
                    attributes={}, shape_rule=_same_rule("Sign"))
_reg_unary("Relu", (6, 13, 14), lambda b, x, a: b.max(x, 0), NUMERIC | {BF16})
# f64 where ONNX Runtime's CPU EP has a double kernel: not Sigmoid (its double kernel loses the
# digits of small results below 0 by cancellation: sigmoid(-40) is 0 there, sigmoid(-20) off in
# the 8th digit), Erf, Softplus, Elu, HardSigmoid or Gelu (no double kernel), nor LeakyRelu
# (double from opset 16 only).
_F64_MATH = FLOATS | {F64}
_reg_unary("Exp", (6, 13), lambda b, x, a: b.exp(x), _F64_MATH | {BF16})
_reg_unary("Log", (6, 13), lambda b, x, a: b.log(x), _F64_MATH)
_reg_unary("Sqrt", (6, 13), lambda b, x, a: b.sqrt(x), _F64_MATH | {BF16})
_reg_unary("Reciprocal", (6, 13), lambda b, x, a: b.recip(x), _F64_MATH | {BF16})
_reg_unary("Sigmoid", (6, 13), lambda b, x, a: 1.0 / (1.0 + b.exp(-x)), LLM_FLOATS, wide=True,
           f32_fn=lambda b, x, a: b.mlas_logistic(x))
_reg_unary("Tanh", (6, 13), lambda b, x, a: b.tanh(x), _F64_MATH | {BF16}, f32_fn=lambda b, x, a: b.mlas_tanh(x))
_reg_unary("Erf", (9, 13), lambda b, x, a: b.erf(x), LLM_FLOATS, wide=True)
_reg_unary("Sin", (7, 22), lambda b, x, a: b.sin(x), _F64_MATH)
_reg_unary("Cos", (7, 22), lambda b, x, a: b.cos(x), _F64_MATH)
_reg_unary("Floor", (6, 13), lambda b, x, a: b.floor(x), _F64_MATH)
_reg_unary("Ceil", (6, 13), lambda b, x, a: b.ceil(x), _F64_MATH)
_reg_unary("Round", (11, 22), lambda b, x, a: b.rint(x), _F64_MATH)  # half to even
_reg_unary("Softplus", (1, 22), lambda b, x, a: b.logaddexp(0.0, x), wide=True)
_reg_unary("LeakyRelu", (6, 16), lambda b, x, a: b.where(b.ge(x, 0), x, _f32(a["alpha"]) * x),
           attributes={"alpha": 0.01})
_reg_unary("Elu", (6, 22), lambda b, x, a: b.where(b.ge(x, 0), x, a["alpha"] * b.expm1(x)),
           attributes={"alpha": 1.0}, wide=True)
_reg_unary("HardSigmoid", (6, 22),
           lambda b, x, a: b.min(b.max(_f32(a["alpha"]) * x + _f32(a["beta"]), 0), 1),
           attributes={"alpha": 0.2, "beta": 0.5})
_reg_unary("Gelu", (20,), _gelu, LLM_FLOATS, attributes={"approximate": "none"}, claim=_claim_gelu, wide=True,
           f32_fn=_gelu_tanh_f32)


def _clip_expr(operands, attrs):
    # max(x, min) then min(., max): with min > max every element becomes max (ONNX 13); NaN
    # stays. min and max are scalars: they never change the output shape. An omitted bound is
    # the type's lowest or highest finite value, as in ORT's CPU EP (numeric_limits), so an
    # infinity clamps to it; for integers that changes nothing.
    b = Builder(operands)
    dtype = operands[0].dtype
    if int(attrs.get(SINCE_VERSION, 13)) < 11:
        # Clip-6: the bounds are attributes, +-FLT_MAX where absent (ORT's f32 kernel; f16 runs
        # through it between casts, so there the default bounds round to infinities).
        lo = -_FLT_MAX if attrs.get("min") is None else float(attrs["min"])
        hi = _FLT_MAX if attrs.get("max") is None else float(attrs["max"])
        with np.errstate(over="ignore"):
            return b.build(b.min(b.max(b.input(0), b.const(lo, dtype)), b.const(hi, dtype)))
    finite = np.finfo(dtype) if np.dtype(dtype).kind == "f" else None
    if np.dtype(dtype) == np.float16 and int(attrs.get(SINCE_VERSION, 13)) < 12:
        # ORT has no f16 Clip-11 kernel and runs it in f32 between casts: the f32 limit rounds
        # back to an f16 infinity there, so infinities stay
        finite = None
    out = b.input(0)
    if at(operands, 1) is not None:
        out = b.max(out, b.cast(b.scalar_input(1), dtype))
    elif finite is not None:
        out = b.max(out, b.const(finite.min, dtype))
    if at(operands, 2) is not None:
        out = b.min(out, b.cast(b.scalar_input(2), dtype))
    elif finite is not None:
        out = b.min(out, b.const(finite.max, dtype))
    return b.build(out, broadcast=[0])


_FLT_MAX = float(np.finfo(np.float32).max)


def _claim_clip(node, graph, attrs):
    if node.since_version < 11:
        if _input_elem(node, graph) not in (F32, F16):
            return (f"input 0 has element type {type_name(_input_elem(node, graph))}: ONNX Runtime's CPU EP runs "
                    f"Clip-6 in f32 (and f16 through it) only")
        lo, hi = attrs.get("min"), attrs.get("max")
        if lo is not None and hi is not None and float(lo) > float(hi):
            return f"attributes min={lo} > max={hi} (ONNX Runtime rejects Clip-6 so)"
    return None


@shape_rule("Clip")
def _clip_shape(types, values, attrs, num_outputs):
    for i, what in ((1, "min"), (2, "max")):
        n = num_elements(shape_of(at(types, i)))
        if n is not None and n != 1:
            raise RuntimeShapeError(f"Clip: '{what}' must be a scalar (one element), got shape "
                                    f"{pshape_str(types[i].shape)}")
    return [tensor_type(elem_of(types[0]), shape_of(types[0]))]


# The integer types ONNX Runtime's CPU EP clips (ONNX allows them from Clip-12): not 16-bit ones.
# Clip-6 takes one input and its bounds as attributes (min and max, absent from the later forms).
_register_pointwise("Clip", (6, 11, 12, 13), ("T", "T", "T"), ("T",), {"T": NUMERIC | {I8, U8, U32, U64}},
                    _clip_expr, names=["input", "min", "max"], min_inputs=1, shape_rule=_clip_shape,
                    attributes={"min": None, "max": None}, claim=_claim_clip)


# ---- comparisons and logic -------------------------------------------------------------------

def _compare(prim: str):
    """a <prim> b on the inputs as they are (exact in every type), a bool result."""
    def expr(operands, attrs):
        if not _same_types(operands):
            return None
        b = Builder(operands)
        return b.build(b.call(prim, b.input(0), b.input(1)))
    return expr


# Comparisons are exact in every type, so they take arithmetic's types: every integer width and f64.
_COMPARED = _ARITH_TYPES
for _name, _since, _types, _prim in (
        ("Equal", (7, 11, 13, 19), _COMPARED | {BOOL}, "eq"),
        ("Less", (7, 9, 13), _COMPARED, "lt"),
        ("Greater", (7, 9, 13), _COMPARED, "gt"),
        ("LessOrEqual", (12, 16), _COMPARED, "le"),
        ("GreaterOrEqual", (12, 16), _COMPARED, "ge"),
        ("And", (7,), BOOLS, "and"),
        ("Or", (7,), BOOLS, "or"),
        ("Xor", (7,), BOOLS, "xor")):
    _register_pointwise(_name, _since, ("T", "T"), ("B",), {"T": _types, "B": BOOLS}, _compare(_prim),
                        shape_rule=_broadcast_rule(_name, BOOL, ["A", "B"]))


def _not_expr(operands, attrs):
    b = Builder(operands)
    return b.build(b.call("not", b.input(0)))


_register_pointwise("Not", (1,), ("T",), ("T",), {"T": BOOLS}, _not_expr, shape_rule=_same_rule("Not"))


def _where_expr(operands, attrs):
    if operands[1].dtype != operands[2].dtype or operands[0].dtype != np.bool_:
        return None
    b = Builder(operands)
    return b.build(b.where(b.input(0), b.input(1), b.input(2)))


@shape_rule("Where", symbolic=True)
def _where_shape(types, values, attrs, num_outputs):
    shape = broadcast_partial("Where", [shape_of(t) for t in types[:3]], ["condition", "X", "Y"])
    return [tensor_type(elem_of(types[1]) or elem_of(types[2]), shape)]


# The types ONNX Runtime's CPU EP selects among, f64 aside: not the 16-bit integers, nor uint64.
_register_pointwise("Where", (9, 16), ("B", "T", "T"), ("T",), {"B": BOOLS, "T": ALL | {I8, U8, U32}}, _where_expr,
                    names=["condition", "X", "Y"], shape_rule=_where_shape)


# ---- Cast ------------------------------------------------------------------------------------

# Cast's targets: NP_DTYPES, f64 and every integer width. A float out of an integer target's range
# (NaN, inf) is undefined in ONNX and C; the CPU device gives numpy's astype, which is what ORT's CPU
# EP gives on x86 for every pair of these types (a small int through int32, u32 and u64 through
# int64), and a GPU converts as its hardware does (saturating on NVIDIA). In range all agree.
_CAST_TARGETS = {**NP_DTYPES, F64: np.dtype(np.float64), I8: np.dtype(np.int8), U8: np.dtype(np.uint8),
                 I16: np.dtype(np.int16), U16: np.dtype(np.uint16), U32: np.dtype(np.uint32),
                 U64: np.dtype(np.uint64)}


def _cast_to(b: Builder, x, source: np.dtype, to: int):
    target = _CAST_TARGETS.get(int(to))
    if target is None:
        raise RuntimeShapeError(f"Cast: target type {type_name(int(to))} is not supported")
    if target == np.float16 and (source.kind in "iub" or source == np.float64):
        # ONNX Runtime converts integers and f64 to f16 through f32 (two roundings)
        return b.cast(b.cast(x, pw.F32), pw.F16)
    # float -> int is C's truncating conversion (NaN/inf/out of range: the x86 result, INT_MIN);
    # float -> bool is x != 0 (NaN -> true).
    return b.cast(x, target)


def _cast_expr(operands, attrs):
    b = Builder(operands)
    return b.build(_cast_to(b, b.input(0), operands[0].dtype, attrs["to"]))


@shape_rule("Cast", symbolic=True)
def _cast_shape(types, values, attrs, num_outputs):
    return [tensor_type(int(attrs["to"]), shape_of(types[0]))]


# Cast's and CastLike's element types, as source and as target
_CAST_TYPES = ALL | ALL_INTS | {BF16, F64}


def _claim_cast_pair(source: int, to: int, attrs) -> str | None:
    """What Cast and CastLike claim of a (source, target) pair of element types."""
    if {to, source} == {F64, BF16}:
        return "a cast between f64 and bf16 (nothing in ONNX Runtime's Python API to compare it with)"
    # 'saturate' only affects float8 targets, none of which is supported: any value is exact.
    if attrs["round_mode"] != "up":
        return (f"attribute round_mode='{attrs['round_mode']}' is not supported "
                f"(only the default 'up' is claimed)")
    return None


def _claim_cast(node, graph, attrs):
    to = attrs["to"]
    if to not in _CAST_TARGETS:
        names = ", ".join(type_name(t) for t in sorted(_CAST_TARGETS))
        return f"attribute to={type_name(to)} (elem type {to}) is not a supported target; supported: {names}"
    return _claim_cast_pair(input_type(node, graph, 0).elem_type, to, attrs)


_register_pointwise("Cast", (6, 9, 13, 19, 21, 23, 24, 25, 28), ("T1",), ("T2",),
                    {"T1": _CAST_TYPES, "T2": _CAST_TYPES}, _cast_expr,
                    attributes={"to": REQUIRED, "saturate": 1, "round_mode": "up"},
                    claim=_claim_cast, shape_rule=_cast_shape)


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


def _selu(b, x, a):
    alpha, gamma = float(_f32(a["alpha"])), float(_f32(a["gamma"]))
    return b.where(b.gt(x, 0), gamma * x, gamma * (alpha * b.exp(x) - alpha))


def _celu(b, x, a):
    alpha = float(_f32(a["alpha"]))
    return b.max(x, 0.0) + b.min(0.0, alpha * b.expm1(x / alpha))


def _hard_swish(b, x, a):
    # ONNX Runtime runs HardSwish as its function body, HardSigmoid(alpha=1/6, beta=0.5) * x, in f32.
    return x * b.min(b.max(_f32(1.0 / 6.0) * x + _f32(0.5), 0), 1)


def _mish(b, x, a):
    return x * b.tanh(b.logaddexp(0.0, x))


def _shrink_expr(operands, attrs):
    # ONNX Runtime: val < -lambd ? val + bias : val > lambd ? val - bias : 0, with float lambd and
    # bias, so integers compute in f32 and convert back with C's truncation.
    b = Builder(operands)
    lambd, bias = _f32(attrs["lambd"]), _f32(attrs["bias"])
    xf = b.cast(b.input(0), pw.F32)
    y = b.where(b.lt(xf, -lambd), xf + bias, b.where(b.gt(xf, lambd), xf - bias, 0))
    return b.build(b.cast(y, operands[0].dtype))


_reg_unary("Selu", (6, 22), _selu, attributes={"alpha": 1.67326319217681884765625,
                                               "gamma": 1.05070102214813232421875}, wide=True)
_celu_unary = _unary(_celu, wide=True)


def _celu_expr(operands, attrs):
    # f16 (opset 28): ONNX Runtime computes in f32 with alpha cast to X's type first, as Celu's
    # function body does (CastLike), and rounds the result once (1.32: the same bits but for an
    # ulp in about 1 of 10^4 values, as its f32 kernel).
    if operands[0].dtype == np.float16:
        attrs = {**attrs, "alpha": float(np.float16(attrs["alpha"]))}
    return _celu_unary(operands, attrs)


_register_pointwise("Celu", (12, 28), ("T",), ("T",), {"T": FLOATS}, _celu_expr, attributes={"alpha": 1.0},
                    claim=f16_allowed_from(28), shape_rule=_same_rule("Celu"))
_reg_unary("Softsign", (1, 22), lambda b, x, a: x / (1.0 + b.abs(x)), claim=f16_broken_before(22))
_reg_unary("HardSwish", (14, 22), _hard_swish)
_reg_unary("Mish", (18, 22), _mish, wide=True)
_reg_unary("ThresholdedRelu", (10, 22), lambda b, x, a: b.where(b.gt(x, _f32(a["alpha"])), x, 0),
           attributes={"alpha": 1.0})
_register_pointwise("Shrink", (9,), ("T",), ("T",), {"T": FLOATS | ALL_INTS}, _shrink_expr,
                    attributes={"lambd": 0.5, "bias": 0.0}, shape_rule=_same_rule("Shrink"))

for _name, _since, _prim in (("Tan", (7, 22), "tan"), ("Asin", (7, 22), "asin"),
                             ("Acos", (7, 22), "acos"), ("Atan", (7, 22), "atan"),
                             ("Sinh", (9, 22), "sinh"), ("Cosh", (9, 22), "cosh"),
                             ("Asinh", (9, 22), "asinh"), ("Acosh", (9, 22), "acosh"),
                             ("Atanh", (9, 22), "atanh")):
    _reg_unary(_name, _since, functools.partial(lambda prim, b, x, a: b.call(prim, x), _prim), wide=True)


# ---- IsNaN / IsInf ---------------------------------------------------------------------------

def _bool_same_rule(op_type: str):
    @shape_rule(op_type)
    def rule(types, values, attrs, num_outputs):
        return [tensor_type(BOOL, shape_of(types[0]))]
    return rule


def _isnan_expr(operands, attrs):
    b = Builder(operands)
    return b.build(b.isnan(b.input(0)))


def _isinf_expr(operands, attrs):
    b = Builder(operands)
    x = b.input(0)
    tests = ([b.isposinf(x)] if attrs["detect_positive"] else []) + \
            ([b.isneginf(x)] if attrs["detect_negative"] else [])
    out = b.const(False, np.bool_) if not tests else tests[0] if len(tests) == 1 else b.call("or", *tests)
    return b.build(out)


_register_pointwise("IsNaN", (9, 13, 20), ("T",), ("B",), {"T": FLOATS, "B": BOOLS}, _isnan_expr,
                    shape_rule=_bool_same_rule("IsNaN"))
_register_pointwise("IsInf", (10, 20), ("T",), ("B",), {"T": FLOATS, "B": BOOLS}, _isinf_expr,
                    attributes={"detect_negative": 1, "detect_positive": 1}, claim=f16_allowed_from(20),
                    shape_rule=_bool_same_rule("IsInf"))


# ---- PRelu -----------------------------------------------------------------------------------

def _prelu_expr(operands, attrs):
    if not _same_types(operands):
        return None
    b = Builder(operands)
    t = compute_type(operands[0].dtype)
    x, slope = b.cast(b.input(0), t), b.cast(b.input(1), t)
    return b.build(b.cast(b.where(b.lt(x, 0), slope * x, x), operands[0].dtype))


def _claim_prelu(node, graph, attrs):
    t = graph.type_of(node.inputs[0])
    if node.since_version < 16 and t.elem_type not in FLOATS:
        return (f"input 0 has element type {t.dtype_name}, which PRelu opset {node.since_version} does "
                f"not allow (integers from opset 16)")
    return None


# ONNX Runtime broadcasts slope and X both ways (the spec: slope broadcasts to X); so does this.
_register_pointwise("PRelu", (7, 9, 16), ("T", "T"), ("T",), {"T": FLOATS | {I32, I64, U32}}, _prelu_expr,
                    names=["X", "slope"], claim=_claim_prelu,
                    shape_rule=_broadcast_rule("PRelu", names=["X", "slope"]))


# ---- bitwise ---------------------------------------------------------------------------------

def _bitshift_expr(operands, attrs):
    if not _same_types(operands) or attrs["direction"] not in ("LEFT", "RIGHT"):
        return None
    b = Builder(operands)
    return b.build(b.call("shl" if attrs["direction"] == "LEFT" else "shr", b.input(0), b.input(1)))


def _claim_bitshift(node, graph, attrs):
    if attrs["direction"] not in ("LEFT", "RIGHT"):
        return f"attribute direction='{attrs['direction']}' is invalid (must be 'LEFT' or 'RIGHT')"
    return None


# Shifts by the width or more give 0 (a right shift of a negative value -1), as opset 28 defines
# for every version: C leaves it undefined, and ONNX Runtime 1.24's x86 kernels shift by the amount
# modulo the width. Signed types from opset 28; uint16 too, which ONNX Runtime's CPU EP has from
# 1.32 on (before it, hipep runs what its CPU EP cannot).
_register_pointwise("BitShift", (11, 28), ("T", "T"), ("T",), {"T": frozenset({U8, U16, U32, U64, I8, I16, I32, I64})},
                    _bitshift_expr, names=["X", "Y"], attributes={"direction": REQUIRED}, claim=_claim_bitshift,
                    shape_rule=_broadcast_rule("BitShift", names=["X", "Y"]))

for _name, _prim in (("BitwiseAnd", "bitand"), ("BitwiseOr", "bitor"), ("BitwiseXor", "bitxor")):
    _register_pointwise(_name, (18,), ("T", "T"), ("T",), {"T": ALL_INTS}, _arith(_prim),
                        shape_rule=_broadcast_rule(_name, names=["A", "B"]))
_reg_unary("BitwiseNot", (18,), lambda b, x, a: b.bitnot(x), ALL_INTS)


# ---- Sum / Mean (variadic) -------------------------------------------------------------------

def _sum_mean(mean: bool):
    """The inputs added left to right in f32 (f16 widened), times 1/n for Mean, rounded once."""
    def expr(operands, attrs):
        if not _same_types(operands):
            return None
        b = Builder(operands)
        t = compute_type(operands[0].dtype)
        acc = b.cast(b.input(0), t)
        for k in range(1, len(operands)):
            acc = acc + b.cast(b.input(k), t)
        if mean:
            acc = acc * np.float32(1.0 / len(operands))
        return b.build(b.cast(acc, operands[0].dtype))
    return expr


# Opset 6 forms do not broadcast (ONNX Runtime rejects differing shapes there); the reference
# broadcasts, which agrees wherever opset 6 is valid.
for _name in ("Sum", "Mean"):
    _register_pointwise(_name, (6, 8, 13), ("T",), ("T",), {"T": FLOATS}, _sum_mean(_name == "Mean"),
                        names=_variadic_names, min_inputs=1, variadic=True, shape_rule=_broadcast_rule(_name))


# ---- CastLike ----------------------------------------------------------------------------------

def _cast_like_expr(operands, attrs):
    # The target operand gives the type only: it neither is read nor broadcasts.
    b = Builder(operands)
    return b.build(_cast_to(b, b.input(0), operands[0].dtype, elem_type_of(operands[1].dtype)), broadcast=[0])


@shape_rule("CastLike")
def _cast_like_shape(types, values, attrs, num_outputs):
    return [tensor_type(elem_of(at(types, 1)), shape_of(types[0]))]


def _claim_cast_like(node, graph, attrs):
    return _claim_cast_pair(input_type(node, graph, 0).elem_type, input_type(node, graph, 1).elem_type, attrs)


_register_pointwise("CastLike", (15, 19, 21, 23, 24, 25), ("T1", "T2"), ("T2",),
                    {"T1": _CAST_TYPES, "T2": _CAST_TYPES}, _cast_like_expr,
                    attributes={"saturate": 1, "round_mode": "up"}, claim=_claim_cast_like,
                    shape_rule=_cast_like_shape)


# ---- hipep::FusedElementwise -------------------------------------------------------------------
# One launch standing for a chain or DAG of pointwise nodes, made by the compiler
# (hip-fuse-pointwise), never found in a model. Its attributes carry the fused program as plain
# data: `nodes`, `outputs` and `broadcast` (a hipep.ops.pointwise.Expr), `input_dtypes` and
# `output_dtypes` (numpy names), `covers`, the labels of the nodes it replaces, and `steps`, one
# [label, op_type, operand...] per launch it replaces (operand k >= 0: fused input k; -j: the
# result of step j - 1; only the operands that broadcast), so that shapes that do not broadcast
# are reported at the node where they meet, as without fusion.

FUSED_ELEMENTWISE = "FusedElementwise"
FUSED_DOMAIN = "hipep"


@functools.lru_cache(maxsize=256)
def _fused_program(nodes, outputs, broadcast) -> pw.Expr:
    return pw.Expr.from_data(nodes, outputs, broadcast)


def fused_expr(attrs) -> pw.Expr:
    """The fused op's expression, from its attributes."""
    return _fused_program(tuple(tuple(n) for n in attrs["nodes"]), tuple(attrs["outputs"]),
                          tuple(attrs["broadcast"]))


@kernel(FUSED_ELEMENTWISE)
def _fused_reference(inputs, attrs):
    return pw.evaluate(fused_expr(attrs), inputs, FUSED_ELEMENTWISE, _variadic_names(len(inputs)))


@shape_rule(FUSED_ELEMENTWISE, symbolic=True)
def _fused_shape(types, values, attrs, num_outputs):
    broadcast = [int(k) for k in attrs["broadcast"] if int(k) < len(types) and types[int(k)] is not None]
    try:
        shape = broadcast_partial(FUSED_ELEMENTWISE, [types[k].shape for k in broadcast],
                                  [f"input {k}" for k in broadcast])
    except RuntimeShapeError:
        _raise_at_failing_step(types, attrs.get("steps", []))
        raise
    return [tensor_type(elem_type_of(np.dtype(d)), shape) for d in attrs["output_dtypes"]]


def _raise_at_failing_step(types, steps) -> None:
    """Replays the fused launches' broadcasts in order; raises at the first that fails, naming it."""
    shapes: list = []
    for step in steps:
        label, op_type, refs = step[0], step[1], [int(r) for r in step[2:]]
        operands = [shapes[-r - 1] if r < 0 else shape_of(at(types, r)) for r in refs]
        try:
            shapes.append(broadcast_partial(op_type, operands))
        except RuntimeShapeError as e:
            raise RuntimeShapeError(f"node '{label}' ({op_type}): {e}") from None


def _claim_fused(node, graph, attrs):
    """Made by the compiler from the pointwise nodes it fuses; never claimed from a model."""
    return (f"{FUSED_DOMAIN}::{FUSED_ELEMENTWISE} is made by hipep's compiler from the pointwise nodes "
            f"it fuses; a model cannot use it")


register(OpDef(FUSED_ELEMENTWISE, (1,), ("",), ("",), {}, _fused_reference, domain=FUSED_DOMAIN,
               attributes={"nodes": REQUIRED, "outputs": REQUIRED, "broadcast": REQUIRED,
                           "input_dtypes": REQUIRED, "output_dtypes": REQUIRED, "covers": [], "steps": []},
               claim=_claim_fused, min_inputs=0, variadic=True, shape_rule=_fused_shape,
               # A fused group is itself a pointwise op: fusing again merges it with its neighbours.
               pointwise=lambda operands, attrs: fused_expr(attrs)))
