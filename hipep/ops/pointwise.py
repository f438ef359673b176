"""Pointwise expressions: the one scalar expression an elementwise op declares.

A pointwise op (Add, Exp, Sigmoid, Where, Cast, ...) states what it computes for one element as a
small expression DAG over its inputs; its numpy reference, the HIP kernel source and fusion with
its neighbours (pass `hip-fuse-pointwise`) all derive from that one statement.

An expression (`Expr`) is plain data, JSON-serialisable: a list of nodes in topological order,
the indices of its output nodes, and the input positions whose shapes broadcast together into
the output shape. Each node is a tuple `(op, dtype, *args)`; `dtype` is the numpy name of the
node's element type and

    ("in", dtype, k)          input k, broadcast with the other broadcasting inputs
    ("scalar", dtype, k)      input k read as one scalar (it must hold one element; it does not
                              take part in broadcasting: Clip's min and max)
    ("const", dtype, text)    a scalar constant; text is the exact Python literal ("0.5", "-inf",
                              "nan", "3", "true")
    ("cast", dtype, a)        node a converted to dtype as C converts (numpy's astype)
    (prim, dtype, a, b, ...)  primitive `prim` (see PRIMITIVES) on nodes a, b, ...

Every primitive takes operands of one element type (Where: a bool condition, then two of one
type) and there is no implicit promotion: an op's expression says where f16 is widened to f32 and
where the result is rounded back, so evaluating a chain of expressions rounds exactly where the
chain of ops would. The f32 Sigmoid/Tanh replays of MLAS's kernels are primitives
(`mlas_logistic`, `mlas_tanh`), as are the f64 `erf` the references use and C's f64 pow
(`libm_pow`, which integer Pow truncates).

`evaluate` runs an expression with numpy; `render_hip_kernel` (hipep.ops.pointwise_hip) renders
it as the source of an elementwise HIP kernel over flat indices with per-input broadcast strides.
Plain Python: nothing here imports the compiler.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import ml_dtypes  # noqa: F401  (registers numpy's 'bfloat16' dtype name)
import numpy as np

from ..errors import RuntimeShapeError
from ._common import broadcast_shape, result, scalar_operand

F16, F32, F64, BF16, BOOL = "float16", "float32", "float64", "bfloat16", "bool"
INT_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
DTYPES = (F16, BF16, F32, F64, BOOL) + INT_DTYPES

Node = tuple  # (op, dtype, *args)


# ---- bit-exact f32 building blocks -------------------------------------------------------------
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
    return np.where(ax >= 3.0, big, np.where(np.isnan(x), x, out))  # NaN is in neither range


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


def mlas_tanh(x: np.ndarray) -> np.ndarray:
    """MlasComputeTanh on f32 values (ORT's f32 Tanh, FastGelu/Gelu-tanh inner tanh)."""
    return _mlas_rational(x, _TANH_RANGE, _TANH_P, _TANH_Q)


def mlas_logistic(x: np.ndarray) -> np.ndarray:
    """MlasComputeLogistic on f32 values (ORT's f32 Sigmoid): rational + 0.5, clamped to [0, 1]."""
    r = (_mlas_rational(x, _LOGISTIC_RANGE, _LOGISTIC_P, _LOGISTIC_Q) + np.float32(0.5)).astype(np.float32)
    return np.minimum(np.maximum(r, np.float32(0.0)), np.float32(1.0))


# ---- primitives --------------------------------------------------------------------------------

def trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C integer division (truncates toward zero), from numpy's floor division."""
    q = np.floor_divide(a, b)
    r = np.remainder(a, b)
    fix = (r != 0) & ((a < 0) != (b < 0))
    return q + fix.astype(q.dtype)


def _shift(left: bool) -> Callable:
    """ONNX's BitShift (opset 28 spells it out for every integer type): a shift by a negative
    amount, or by the width or more, leaves what the sign fill alone gives: -1 for a right shift
    of a negative value, else 0. A right shift of a signed value is arithmetic; a left shift drops
    the bits pushed past the top, the sign bit's place included."""
    def shift(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = np.broadcast_arrays(a, b)
        out_of_range = (b < 0) | (b >= a.dtype.itemsize * 8)
        amount = np.where(out_of_range, 0, b).astype(a.dtype)
        shifted = np.left_shift(a, amount) if left else np.right_shift(a, amount)
        fill = np.zeros_like(a) if left or a.dtype.kind == "u" else np.where(a < 0, -1, 0).astype(a.dtype)
        return np.where(out_of_range, fill, shifted).astype(a.dtype)
    return shift


def _c_pow_scalar(a: float, b: float) -> float:
    """C's pow(a, b): the C library's value (math.pow calls it), with C's infinities and NaN where
    math.pow raises instead."""
    try:
        return math.pow(a, b)
    except OverflowError:
        odd = float(b).is_integer() and int(b) % 2 == 1
        return -math.inf if a < 0 and odd else math.inf
    except ValueError:
        if a == 0:  # a pole: -0 to a negative odd integer power gives -inf
            odd = float(b).is_integer() and int(b) % 2 == 1
            return math.copysign(math.inf, a) if odd else math.inf
        return math.nan  # a negative base to a fractional power


_C_POW = np.frompyfunc(_c_pow_scalar, 2, 1)


def libm_pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C's pow in f64, element by element through the C library: ONNX Runtime's integer Pow
    truncates it, and numpy's vectorized pow can differ from it by an ulp, which shows there."""
    a, b = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
    if a.size == 0:
        return np.empty(a.shape, np.float64)
    return np.asarray(_C_POW(a, b), np.float64)  # (a 0-d result comes back as a bare float)


def c_pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy's pow with C's special values: where the exponent is a single 0.5 (a scalar or a
    stride-0 broadcast), numpy's loop takes a square root, which gives NaN for -inf and -0 for -0
    where pow (ONNX Runtime's std::pow, a GPU's powf) gives +inf and +0."""
    r = np.power(a, b)
    fix = (b == 0.5) & ((a == 0) | (a == -np.inf))
    return np.where(fix, np.abs(a), r).astype(r.dtype, copy=False) if np.any(fix) else r


@dataclass(frozen=True)
class Primitive:
    arity: int
    numpy: Callable
    # Operand element types it accepts: "float" (f16 only for the exact ones below), "int",
    # "bool", "number" (ints and floats), "any".
    operands: str = "number"
    result: str = "same"  # "same" (the operands' type) or "bool"
    only: str | None = None  # the single element type it is defined on (f32 MLAS replays, f64 erf)
    exact_f16: bool = False  # exact on f16 operands, so expressions may apply it to f16 directly


def _p(arity, fn, operands="number", result="same", only=None, exact_f16=False):
    return Primitive(arity, fn, operands, result, only, exact_f16)


PRIMITIVES: dict[str, Primitive] = {
    # arithmetic; integer division and modulo by zero raise (as ONNX Runtime's kernels do)
    "add": _p(2, np.add), "sub": _p(2, np.subtract), "mul": _p(2, np.multiply),
    "div": _p(2, lambda a, b: trunc_div(a, b) if a.dtype.kind in "iu" else np.divide(a, b)),
    "fmod": _p(2, np.fmod), "mod": _p(2, np.mod),
    "pow": _p(2, c_pow, "float"),
    "libm_pow": _p(2, libm_pow, "float", only=F64),
    "min": _p(2, np.minimum, "any", exact_f16=True), "max": _p(2, np.maximum, "any", exact_f16=True),
    "logaddexp": _p(2, np.logaddexp, "float"),
    "neg": _p(1, np.negative, exact_f16=True), "abs": _p(1, np.abs, exact_f16=True),
    "sign": _p(1, np.sign),
    "recip": _p(1, np.reciprocal, "float"),
    **{name: _p(1, fn, "float") for name, fn in (
        ("sqrt", np.sqrt), ("exp", np.exp), ("expm1", np.expm1), ("log", np.log), ("sin", np.sin),
        ("cos", np.cos), ("tan", np.tan), ("asin", np.arcsin), ("acos", np.arccos), ("atan", np.arctan),
        ("sinh", np.sinh), ("cosh", np.cosh), ("asinh", np.arcsinh), ("acosh", np.arccosh),
        ("atanh", np.arctanh), ("tanh", np.tanh), ("floor", np.floor), ("ceil", np.ceil),
        ("rint", np.rint))},
    "erf": _p(1, erf, "float", only=F64),
    "mlas_tanh": _p(1, mlas_tanh, "float", only=F32),
    "mlas_logistic": _p(1, mlas_logistic, "float", only=F32),
    # comparisons and tests: exact on every type
    "eq": _p(2, np.equal, "any", "bool", exact_f16=True), "lt": _p(2, np.less, "any", "bool", exact_f16=True),
    "gt": _p(2, np.greater, "any", "bool", exact_f16=True),
    "le": _p(2, np.less_equal, "any", "bool", exact_f16=True),
    "ge": _p(2, np.greater_equal, "any", "bool", exact_f16=True),
    "isnan": _p(1, np.isnan, "float", "bool", exact_f16=True),
    "isposinf": _p(1, np.isposinf, "float", "bool", exact_f16=True),
    "isneginf": _p(1, np.isneginf, "float", "bool", exact_f16=True),
    # logic and bits
    "and": _p(2, np.logical_and, "bool"), "or": _p(2, np.logical_or, "bool"),
    "xor": _p(2, np.logical_xor, "bool"), "not": _p(1, np.logical_not, "bool"),
    "bitand": _p(2, np.bitwise_and, "int"), "bitor": _p(2, np.bitwise_or, "int"),
    "bitxor": _p(2, np.bitwise_xor, "int"), "bitnot": _p(1, np.invert, "int"),
    "shl": _p(2, _shift(True), "int"), "shr": _p(2, _shift(False), "int"),
    # selection: where(condition, x, y)
    "where": _p(3, np.where, "any", exact_f16=True),
}
_DIVIDING = ("div", "fmod", "mod")


def _kind(dtype: str) -> str:
    if dtype == BOOL:
        return "bool"
    return "int" if dtype in INT_DTYPES else "float"


def _accepts(prim: Primitive, dtype: str) -> bool:
    kind = _kind(dtype)
    if prim.only is not None and dtype != prim.only:
        return False
    if dtype in (F16, BF16) and not prim.exact_f16:
        return False  # f16 math runs in f32: the expression widens and rounds explicitly
    return {"any": True, "number": kind != "bool", "float": kind == "float", "int": kind == "int",
            "bool": kind == "bool"}[prim.operands]


# ---- constants -----------------------------------------------------------------------------------

def const_text(value, dtype: str) -> str:
    """The exact literal of a scalar constant of `dtype` (parsed back by `const_value`)."""
    if dtype == BOOL:
        return "true" if bool(value) else "false"
    if _kind(dtype) == "int":
        return str(int(value))
    v = float(np.asarray(value, dtype))  # rounded to the constant's own type first
    return repr(v)


def const_value(text: str, dtype: str) -> np.ndarray:
    if dtype == BOOL:
        return np.asarray(text == "true", np.bool_)
    if _kind(dtype) == "int":
        return np.asarray(int(text), dtype)
    return np.asarray(float(text), dtype)


# ---- expressions -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Expr:
    nodes: tuple[Node, ...]
    outputs: tuple[int, ...]
    broadcast: tuple[int, ...]  # input positions whose shapes broadcast into the output shape

    def to_data(self) -> dict:
        """Plain lists and strings (what the fused op's attributes and JSON carry)."""
        return {"nodes": [list(n) for n in self.nodes], "outputs": list(self.outputs),
                "broadcast": list(self.broadcast)}

    @staticmethod
    def from_data(nodes, outputs, broadcast) -> "Expr":
        expr = Expr(tuple(tuple(n) for n in nodes), tuple(int(o) for o in outputs),
                    tuple(int(i) for i in broadcast))
        check(expr)
        return expr

    @property
    def num_inputs(self) -> int:
        refs = [n[2] for n in self.nodes if n[0] in ("in", "scalar")]
        return max([*refs, *self.broadcast], default=-1) + 1

    def dtype_of(self, node: int) -> str:
        return self.nodes[node][1]

    def prims(self) -> set[str]:
        return {n[0] for n in self.nodes if n[0] in PRIMITIVES}


def check(expr: Expr) -> None:
    """Raises ValueError unless `expr` is well formed: known ops, operands defined before use,
    operand types each primitive accepts, input refs consistent with `broadcast`."""
    for i, node in enumerate(expr.nodes):
        op, dtype, args = node[0], node[1], node[2:]
        if dtype not in DTYPES:
            raise ValueError(f"node {i}: unknown element type {dtype!r}")
        if op in ("in", "scalar"):
            (k,) = args
            if op == "in" and k not in expr.broadcast:
                raise ValueError(f"node {i}: input {k} is broadcast but not in broadcast {list(expr.broadcast)}")
            continue
        if op == "const":
            const_value(args[0], dtype)
            continue
        if any(not isinstance(a, int) or not 0 <= a < i for a in args):
            raise ValueError(f"node {i}: operands {list(args)} must be earlier nodes")
        kinds = [expr.nodes[a][1] for a in args]
        if op == "cast":
            if len(args) != 1:
                raise ValueError(f"node {i}: cast takes one operand")
            continue
        prim = PRIMITIVES.get(op)
        if prim is None:
            raise ValueError(f"node {i}: unknown primitive {op!r}")
        if len(args) != prim.arity:
            raise ValueError(f"node {i}: {op} takes {prim.arity} operands, got {len(args)}")
        if op == "where":
            if kinds[0] != BOOL:
                raise ValueError(f"node {i}: where's condition is {kinds[0]}, not bool")
            kinds = kinds[1:]
        if len(set(kinds)) != 1 or not _accepts(prim, kinds[0]):
            raise ValueError(f"node {i}: {op} does not take operands of types {kinds}")
        want = BOOL if prim.result == "bool" else kinds[0]
        if dtype != want:
            raise ValueError(f"node {i}: {op} on {kinds[0]} gives {want}, node says {dtype}")
    for o in expr.outputs:
        if not 0 <= o < len(expr.nodes):
            raise ValueError(f"output {o} is not a node")


# ---- building expressions ----------------------------------------------------------------------

@dataclass(frozen=True)
class Operand:
    """What an op's expression may depend on, per input: its element type, and where known its
    value (a constant at compile time; every input at run time) and element count."""
    dtype: np.dtype
    value: np.ndarray | None = None
    size: int | None = None

    @staticmethod
    def of(a: np.ndarray) -> "Operand":
        a = np.asarray(a)
        return Operand(a.dtype, a, int(a.size))

    @property
    def scalar_value(self):
        """The single element's value, where known to be a single element; else None."""
        if self.value is not None and np.asarray(self.value).size == 1:
            return np.asarray(self.value).reshape(-1)[0]
        return None


# An op's declaration: (operands, attrs) -> its Expr, or None where the op's semantics for these
# operands do not fit one scalar expression (its reference then runs a kernel of its own).
# `operands` has one Operand per input position (None for omitted optionals); `attrs` are the
# resolved attributes.
PointwiseFn = Callable[[list, dict], "Expr | None"]


class Ref:
    """A node being built. Arithmetic operators build add/sub/mul/div nodes; a Python number on
    the other side becomes a constant of this node's type (as numpy treats Python scalars)."""
    __slots__ = ("b", "index", "dtype")
    __array_ufunc__ = None  # numpy scalars on the left defer to the reflected operators below

    def __init__(self, b: "Builder", index: int, dtype: str):
        self.b, self.index, self.dtype = b, index, dtype

    def _other(self, v) -> "Ref":
        return v if isinstance(v, Ref) else self.b.const(v, self.dtype)

    def __add__(self, v): return self.b.call("add", self, self._other(v))
    def __radd__(self, v): return self.b.call("add", self._other(v), self)
    def __sub__(self, v): return self.b.call("sub", self, self._other(v))
    def __rsub__(self, v): return self.b.call("sub", self._other(v), self)
    def __mul__(self, v): return self.b.call("mul", self, self._other(v))
    def __rmul__(self, v): return self.b.call("mul", self._other(v), self)
    def __truediv__(self, v): return self.b.call("div", self, self._other(v))
    def __rtruediv__(self, v): return self.b.call("div", self._other(v), self)
    def __neg__(self): return self.b.call("neg", self)


class Builder:
    """Builds an Expr; identical nodes are built once."""

    def __init__(self, operands: Sequence[Operand | None] = ()):
        self.operands = list(operands)
        self.nodes: list[Node] = []
        self._index: dict[Node, int] = {}

    def _add(self, node: Node) -> Ref:
        i = self._index.get(node)
        if i is None:
            i = self._index[node] = len(self.nodes)
            self.nodes.append(node)
        return Ref(self, i, node[1])

    def input(self, k: int, dtype=None) -> Ref:
        return self._add(("in", _name(dtype if dtype is not None else self.operands[k].dtype), k))

    def scalar_input(self, k: int, dtype=None) -> Ref:
        return self._add(("scalar", _name(dtype if dtype is not None else self.operands[k].dtype), k))

    def const(self, value, dtype) -> Ref:
        dtype = _name(dtype)
        return self._add(("const", dtype, const_text(value, dtype)))

    def cast(self, a: Ref, dtype) -> Ref:
        dtype = _name(dtype)
        return a if a.dtype == dtype else self._add(("cast", dtype, a.index))

    def call(self, prim: str, *args) -> Ref:
        p = PRIMITIVES[prim]
        refs = [a if isinstance(a, Ref) else None for a in args]
        typed = next(r for r in (refs[1:] if prim == "where" else refs) if r is not None)
        refs = [r if r is not None else self.const(a, BOOL if prim == "where" and i == 0 else typed.dtype)
                for i, (r, a) in enumerate(zip(refs, args))]
        operand_dtype = refs[-1].dtype
        dtype = BOOL if p.result == "bool" else operand_dtype
        node = (prim, dtype, *(r.index for r in refs))
        if not _accepts(p, operand_dtype) or len({r.dtype for r in (refs[1:] if prim == "where" else refs)}) != 1:
            raise TypeError(f"{prim} does not take operands of types {[r.dtype for r in refs]}")
        return self._add(node)

    def __getattr__(self, prim: str):
        if prim in PRIMITIVES:
            return lambda *args: self.call(prim, *args)
        raise AttributeError(prim)

    def inline(self, expr: Expr, args: Sequence[Ref | None]) -> list[Ref]:
        """Builds `expr` here with its input k replaced by args[k]; its output refs."""
        mapped: list[Ref] = []
        for node in expr.nodes:
            op, dtype, rest = node[0], node[1], node[2:]
            if op in ("in", "scalar"):
                ref = args[rest[0]]
                if ref is None or ref.dtype != dtype:
                    raise TypeError(f"input {rest[0]} is {None if ref is None else ref.dtype}, the expression reads {dtype}")
            elif op == "const":
                ref = self._add(node)
            else:
                ref = self._add((op, dtype, *(mapped[a].index for a in rest)))
            mapped.append(ref)
        return [mapped[o] for o in expr.outputs]

    def build(self, *outputs: Ref, broadcast: Sequence[int] | None = None) -> Expr:
        """The expression computing `outputs`. `broadcast`: the input positions whose shapes
        make the output shape; default every present input."""
        if broadcast is None:
            broadcast = [k for k, o in enumerate(self.operands) if o is not None]
        return self.pruned(outputs, broadcast)

    def pruned(self, outputs: Sequence[Ref], broadcast: Sequence[int]) -> Expr:
        """Only the nodes the outputs need, renumbered in order."""
        live: set[int] = set()
        stack = [r.index for r in outputs]
        while stack:
            i = stack.pop()
            if i in live:
                continue
            live.add(i)
            node = self.nodes[i]
            if node[0] not in ("in", "scalar", "const"):
                stack.extend(node[2:])
        order = sorted(live)
        renumber = {old: new for new, old in enumerate(order)}
        nodes = []
        for i in order:
            node = self.nodes[i]
            if node[0] in ("in", "scalar", "const"):
                nodes.append(node)
            else:
                nodes.append((node[0], node[1], *(renumber[a] for a in node[2:])))
        expr = Expr(tuple(nodes), tuple(renumber[r.index] for r in outputs), tuple(sorted(set(broadcast))))
        check(expr)
        return expr


def _name(dtype) -> str:
    return np.dtype(dtype).name


def compute_type(dtype) -> str:
    """The type float math runs in: f32 for f16 and bf16 (rounded once at the end), else the type."""
    name = _name(dtype)
    return F32 if name in (F16, BF16) else name


# ---- numpy evaluation --------------------------------------------------------------------------

def evaluate(expr: Expr, inputs: Sequence[np.ndarray | None], label: str = "pointwise",
             names: Sequence[str] | None = None) -> list[np.ndarray]:
    """Runs `expr` on numpy arrays: one fresh C-contiguous array per output, of the output node's
    type and the broadcast shape of the broadcasting inputs. `label` and `names` (one per input
    position) word the errors: shapes that do not broadcast, a scalar input with several
    elements, integer division by zero."""
    names = list(names) if names is not None else [chr(ord("A") + i) for i in range(len(inputs))]
    arrays = [None if a is None else np.asarray(a) for a in inputs]
    present = [k for k in expr.broadcast if k < len(arrays) and arrays[k] is not None]
    shape = broadcast_shape(label, *[arrays[k] for k in present], names=[names[k] for k in present])
    values: list[np.ndarray] = []
    with np.errstate(all="ignore"):
        for node in expr.nodes:
            op, dtype, args = node[0], node[1], node[2:]
            if op in ("in", "scalar"):
                a = arrays[args[0]] if args[0] < len(arrays) else None
                if a is None:
                    raise RuntimeShapeError(f"{label}: input {names[args[0]]} is missing")
                if a.dtype != _np_dtype(dtype):  # (dtype.name builds a string: ~2 us a call)
                    raise RuntimeShapeError(f"{label}: input {names[args[0]]} is {a.dtype.name}, expected {dtype}")
                v = scalar_operand(label, names[args[0]], a) if op == "scalar" else a
            elif op == "const":
                v = const_value(args[0], dtype)
            elif op == "cast":
                v = np.asarray(values[args[0]]).astype(dtype)
            else:
                operands = [values[a] for a in args]
                if op in _DIVIDING and _kind(dtype) == "int":
                    _int_zero_check(label, operands[1])
                v = np.asarray(PRIMITIVES[op].numpy(*operands))
            values.append(np.asarray(v))
        return [result(np.broadcast_to(values[o], shape), expr.nodes[o][1]) for o in expr.outputs]


@functools.lru_cache(maxsize=None)
def _np_dtype(name: str) -> np.dtype:
    return np.dtype(name)


def _int_zero_check(label: str, b: np.ndarray) -> None:
    if b.size and not np.all(b):
        raise RuntimeShapeError(f"{label}: integer division by zero (divisor B has "
                                f"{int(np.count_nonzero(b == 0))} zero element(s))")


_UNBUILT = object()
_EXPR_CACHE = 256  # expressions kept per op


def _expr_key(inputs, attrs):
    """What an op's expression can depend on (PointwiseFn): each operand's type, whether it has
    no, one or several elements, the value of a single element (Pow's exponent), and the
    attributes; None where an attribute is not hashable."""
    parts = []
    for a in inputs:
        if a is None:
            parts.append(None)
            continue
        a = np.asarray(a)
        n = a.size
        parts.append((a.dtype.str, min(n, 2), a.tobytes() if n == 1 else None))
    try:
        frozen = tuple(sorted((k, _hashable(v)) for k, v in attrs.items()))
        hash(frozen)
    except TypeError:
        return None
    return tuple(parts), frozen


def _hashable(v):
    if isinstance(v, np.ndarray):
        return (v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    return v


def reference(op_type: str, fn: PointwiseFn, names=None):
    """The numpy reference of a pointwise op: its expression for the given inputs, evaluated.
    `names` (a list, or a function of the input count) word errors."""
    from ._common import kernel

    # The expression built for each kind of call: building one costs more than evaluating it on
    # the few values of a host step or a small launch (a Cast of one length: ~15 us of ~25).
    exprs: dict = {}

    @kernel(op_type)
    def run(inputs, attrs):
        key = _expr_key(inputs, attrs)
        expr = exprs.get(key, _UNBUILT) if key is not None else _UNBUILT
        if expr is _UNBUILT:
            operands = [None if a is None else Operand.of(a) for a in inputs]
            expr = fn(operands, attrs)
            if key is not None:
                if len(exprs) >= _EXPR_CACHE:
                    exprs.clear()
                exprs[key] = expr
        if expr is None:
            raise RuntimeShapeError(f"{op_type}: no expression for inputs of types "
                                    f"{[None if a is None else np.asarray(a).dtype.name for a in inputs]}")
        n = names(len(inputs)) if callable(names) else names
        return evaluate(expr, inputs, op_type, n)
    return run
