"""More ops against ONNX Runtime's CPU EP: activations and unary math, bitwise ops, Sum/Mean,
CastLike, Dropout, Size; the reductions beyond Sum/Mean/Max/Min, ArgMax/ArgMin, CumSum/CumProd,
TopK, Trilu, NonZero, Range, ConstantOfShape, EyeLike, Compress; LogSoftmax, Hardmax and the
normalizations; Einsum, MatMulInteger, QLinearMatMul, Det; MaxUnpool.

Single-node cases use test_ops_reference's harness (same tolerances, dtype/shape/aliasing checks);
each case's shape rule is checked against its reference as test_shape_rules does for those. The
same ops' partial shapes, refused claims, run-time errors and end-to-end models are in
test_ops_more_contracts.py.
"""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import numpy_helper

from helpers import max_unpool_indices



def _load(name, alias):
    path = pathlib.Path(__file__).with_name(name)
    spec = importlib.util.spec_from_file_location(alias, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


REF = _load("test_ops_reference.py", "_hipep_reference_harness")
SR = _load("test_shape_rules.py", "_hipep_shape_rule_harness")
R, build, run_reference = REF.R, REF.build, REF.run_reference
f32, f16, i32, i64, b = np.float32, np.float16, np.int32, np.int64, np.bool_
i8, u8, i16, u16, u32, u64 = np.int8, np.uint8, np.int16, np.uint16, np.uint32, np.uint64
INTS = (i8, u8, i16, u16, i32, i64, u32, u64)

CASES = []


def case(op, opset, inputs, attrs=None, n_out=1, since=None, id=None, tol=None):
    since = opset if since is None else since
    CASES.append(pytest.param(op, opset, inputs, attrs, n_out, since, tol,
                              id=id or f"{op}-{opset}-{len(CASES)}"))


def A(values, dtype=np.int64):
    return np.array(values, dtype=dtype)


def U(*shape, dtype, lo=0, hi=20):
    """Random integers in [lo, hi] of any integer dtype (R covers signed ones only)."""
    return REF.RNG.integers(lo, hi + 1, size=shape).astype(dtype)


def last(vs):
    return vs[-1]


# ---- unary activations and math ---------------------------------------------------------------
_UNARY = {  # op: (since-versions, input range)
    "Selu": ((6, 22), (-3, 3)), "Celu": ((12, 28), (-3, 3)), "Softsign": ((1, 22), (-5, 5)),
    "HardSwish": ((14, 22), (-5, 5)), "Mish": ((18, 22), (-10, 10)),
    "ThresholdedRelu": ((10, 22), (-3, 3)), "Tan": ((7, 22), (-1.5, 1.5)),
    "Asin": ((7, 22), (-1, 1)), "Acos": ((7, 22), (-1, 1)), "Atan": ((7, 22), (-5, 5)),
    "Sinh": ((9, 22), (-5, 5)), "Cosh": ((9, 22), (-5, 5)), "Asinh": ((9, 22), (-5, 5)),
    "Acosh": ((9, 22), (1, 5)), "Atanh": ((9, 22), (-0.99, 0.99)), "Shrink": ((9,), (-3, 3)),
}
for _op, (_vs, (_lo, _hi)) in _UNARY.items():
    for _v in _vs:
        case(_op, _v, [R(3, 17, lo=_lo, hi=_hi)])
    if _op != "Celu":  # Celu is f32-only in its schema
        case(_op, last(_vs), [R(4, 9, dtype=f16, lo=_lo, hi=_hi)], id=f"{_op}-f16")
    case(_op, last(_vs), [R(lo=_lo, hi=_hi)], id=f"{_op}-scalar")
case("Selu", 22, [R(3, 5, lo=-3, hi=3)], {"alpha": 2.0, "gamma": 0.5})
case("Celu", 12, [R(3, 5, lo=-3, hi=3)], {"alpha": 0.5})
case("ThresholdedRelu", 22, [R(3, 5, lo=-3, hi=3)], {"alpha": 0.25})
case("Shrink", 9, [R(3, 5, lo=-3, hi=3)], {"lambd": 1.5, "bias": 0.7})
case("Shrink", 9, [R(3, 5, dtype=f16, lo=-3, hi=3)], {"lambd": 1.5, "bias": 0.7}, id="Shrink-f16-attrs")
for _dt in INTS:
    _x = R(4, 6, dtype=_dt, lo=-20, hi=20) if np.dtype(_dt).kind == "i" else U(4, 6, dtype=_dt)
    case("Shrink", 9, [_x], {"lambd": 1.5, "bias": 0.7}, id=f"Shrink-{np.dtype(_dt)}")
case("Shrink", 9, [A([2**40 + 1, -(2**40 + 1), 3, -3], i64)], {"lambd": 1.5, "bias": 0.5}, id="Shrink-i64-f32-math")
for _dt in (i8, u8, i16, u16, u32, u64):
    _x = R(5, 6, dtype=_dt, lo=-9, hi=9) if np.dtype(_dt).kind == "i" else U(5, 6, dtype=_dt)
    case("Sign", 13, [_x], id=f"Sign-{np.dtype(_dt)}")
case("Sign", 9, [R(5, dtype=i8, lo=-3, hi=3)], id="Sign-9-i8")

_SPECIAL = A([np.nan, np.inf, -np.inf, 0.0, -1.5, 3.0, np.nan], f32)
for _v in (9, 13, 20):
    case("IsNaN", _v, [_SPECIAL])
case("IsNaN", 20, [_SPECIAL.astype(f16)], id="IsNaN-f16")
for _v in (10, 20):
    case("IsInf", _v, [_SPECIAL])
case("IsInf", 20, [_SPECIAL.astype(f16)], id="IsInf-f16")
case("IsInf", 20, [_SPECIAL], {"detect_negative": 0}, id="IsInf-positive")
case("IsInf", 20, [_SPECIAL], {"detect_positive": 0}, id="IsInf-negative")

for _v in (7, 9, 16):
    case("PRelu", _v, [R(3, 4, lo=-3, hi=3), R(4)])
case("PRelu", 16, [R(2, 3, 4, lo=-3, hi=3), R(3, 1)], id="PRelu-channel-slope")
case("PRelu", 16, [R(3, 4, dtype=f16, lo=-3, hi=3), R(4, dtype=f16)], id="PRelu-f16")
case("PRelu", 16, [R(3, 4, dtype=i32, lo=-9, hi=9), R(4, dtype=i32, lo=-3, hi=3)], id="PRelu-i32")
case("PRelu", 16, [R(3, 4, dtype=i64, lo=-9, hi=9), R(1, dtype=i64, lo=-3, hi=3)], id="PRelu-i64")
case("PRelu", 16, [U(3, 4, dtype=u32), U(4, dtype=u32, hi=3)], id="PRelu-u32")

# ---- bitwise -------------------------------------------------------------------------------------
for _dt, _bits in ((u8, 8), (u32, 32), (u64, 64)):
    for _dir in ("LEFT", "RIGHT"):
        case("BitShift", 11, [U(3, 4, dtype=_dt, hi=200), U(4, dtype=_dt, hi=_bits - 1)],
             {"direction": _dir}, id=f"BitShift-{np.dtype(_dt)}-{_dir}")
# Opset 28: signed types (arithmetic right shifts), and shifts by negative amounts or past the
# width, which leave the sign fill (ONNX Runtime 1.32's CPU EP computes them so)
for _dt in (i8, i16, i32, i64, u8, np.uint16, u32, u64):
    _info, _bits = np.iinfo(_dt), np.dtype(_dt).itemsize * 8
    _x = np.concatenate([A([_info.min, _info.max, 0, -1 if _info.min else 1], _dt),
                         REF.RNG.integers(_info.min, _info.max, 8, dtype=_dt, endpoint=True)])
    _y = np.concatenate([U(6, dtype=_dt, hi=_bits - 1), A([_bits, _bits + 3], _dt),
                         A([-1, -_bits, _info.min, _info.max] if _info.min else [_info.max, 2 * _bits, 1, 0], _dt)])
    for _dir in ("LEFT", "RIGHT"):
        case("BitShift", 28, [_x, _y], {"direction": _dir}, id=f"BitShift-28-{np.dtype(_dt)}-{_dir}")
for _dt in INTS:
    _lo = -100 if np.dtype(_dt).kind == "i" else 0
    for _op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
        case(_op, 18, [U(3, 4, dtype=_dt, lo=_lo, hi=100), U(4, dtype=_dt, lo=_lo, hi=100)],
             id=f"{_op}-{np.dtype(_dt)}")
    case("BitwiseNot", 18, [U(3, 4, dtype=_dt, lo=_lo, hi=100)], id=f"BitwiseNot-{np.dtype(_dt)}")

# ---- Sum / Mean ----------------------------------------------------------------------------------
for _op in ("Sum", "Mean"):
    case(_op, 6, [R(3, 4), R(3, 4), R(3, 4)])
    case(_op, 8, [R(3, 1), R(1, 4)])
    case(_op, 13, [R(2, 3, 4), R(4), R(3, 1), R()])
    case(_op, 13, [R(2, 3)], id=f"{_op}-single")
    case(_op, 13, [R(2, 3, dtype=f16), R(3, dtype=f16)], id=f"{_op}-f16")

# ---- CastLike ------------------------------------------------------------------------------------
_LIKE = {f32: A([1.0], f32), f16: A([1.0], f16), i32: A([1], i32), i64: A([1], i64), b: A([True], b)}
for _src, _x in REF._CAST_SRC.items():
    for _dst, _t in _LIKE.items():
        case("CastLike", 19, [_x, _t], id=f"CastLike-{np.dtype(_src)}-{np.dtype(_dst)}")
for _v in (15, 21, 23, 24, 25):
    case("CastLike", _v, [R(3, 4, lo=-100, hi=100), A([], i64)])
# Cast's other integer widths, as source and as target (the same conversions as Cast's)
for _w in (np.int8, np.uint8, np.int16, np.uint16, np.uint32, np.uint64):
    _info = np.iinfo(_w)
    _own = A([0, 1, _info.max, _info.min, _info.max // 3, 100], _w)
    for _x in (A([0.5, 1.5, 100.7, 126.9, 3.0, 0.0], f32), A([0, 1, 255, 256, 70000, 2**31 - 1], i64)):
        case("CastLike", 21, [_x, A([1], _w)], id=f"CastLike-{_x.dtype.name}-{np.dtype(_w).name}")
    for _dst, _t in _LIKE.items():
        case("CastLike", 21, [_own, _t], id=f"CastLike-{np.dtype(_w).name}-{np.dtype(_dst).name}")

# ---- Dropout (inference) -------------------------------------------------------------------------
for _v in (7, 10, 12, 13, 22):
    case("Dropout", _v, [R(3, 4)])
case("Dropout", 12, [R(3, 4)], n_out=2, id="Dropout-12-mask")
case("Dropout", 7, [R(3, 4)], n_out=2, id="Dropout-7-mask")  # ORT: zeros of T in inference
case("Dropout", 10, [R(3, 4)], n_out=2, id="Dropout-10-mask")  # ORT: false in inference
case("Dropout", 13, [R(2, 3), A(0.3, f32)], n_out=2, id="Dropout-13-ratio")
case("Dropout", 22, [R(2, 3, dtype=f16), A(0.1, f16)], n_out=2, id="Dropout-22-f16")

# ---- Size ----------------------------------------------------------------------------------------
for _v in (1, 13, 19, 21, 23, 24, 25):
    case("Size", _v, [R(2, 3, 4)])
for _dt in (f16, b, i8, u16, i64):
    case("Size", 25, [R(2, 3, dtype=_dt) if _dt in (f16, b, i64) else U(2, 3, dtype=_dt)], id=f"Size-{np.dtype(_dt)}")
case("Size", 25, [R()], id="Size-scalar")
case("Size", 25, [R(0, 3)], id="Size-empty")

# ---- reductions ----------------------------------------------------------------------------------
_RED_MORE = {  # op: (float input range, int input range)
    "ReduceProd": ((0.5, 1.5), (-3, 3)), "ReduceL1": ((-2, 2), (-9, 9)), "ReduceL2": ((-2, 2), (-9, 9)),
    "ReduceLogSum": ((0.1, 2), (1, 9)), "ReduceLogSumExp": ((-3, 3), (-4, 4)),
    "ReduceSumSquare": ((-2, 2), (-9, 9)),
}
for _op, ((_lo, _hi), (_ilo, _ihi)) in _RED_MORE.items():
    for _v in (1, 11, 13):
        case(_op, _v, [R(2, 3, 4, lo=_lo, hi=_hi)], {"axes": [0, 2] if _v == 1 else [-1, 0], "keepdims": 0})
        case(_op, _v, [R(2, 3, 4, lo=_lo, hi=_hi)])
    case(_op, 18, [R(2, 3, 4, lo=_lo, hi=_hi), A([-1, 0], i64)], {"keepdims": 0})
    case(_op, 18, [R(2, 3, 4, lo=_lo, hi=_hi)], {"keepdims": 1})
    case(_op, 18, [R(2, 3, 4, lo=_lo, hi=_hi), A([], i64)], id=f"{_op}-empty-axes")
    case(_op, 18, [R(2, 3, 4, lo=_lo, hi=_hi), A([], i64)], {"noop_with_empty_axes": 1}, id=f"{_op}-noop")
    case(_op, 18, [R(2, 3, lo=_lo, hi=_hi)], {"noop_with_empty_axes": 1}, id=f"{_op}-noop-no-axes")
    case(_op, 18, [R(4, 13, dtype=f16, lo=_lo, hi=_hi), A([1], i64)], id=f"{_op}-f16")
    case(_op, 13, [R(4, 13, dtype=f16, lo=_lo, hi=_hi)], {"axes": [0]}, id=f"{_op}-13-f16")
    case(_op, 18, [R(4, 5, dtype=i32, lo=_ilo, hi=_ihi), A([1], i64)], id=f"{_op}-i32")
    case(_op, 18, [R(4, 5, dtype=i64, lo=_ilo, hi=_ihi), A([0], i64)], {"keepdims": 0}, id=f"{_op}-i64")
    case(_op, 11, [R(3, 4, dtype=i32, lo=_ilo, hi=_ihi)], {"axes": [1]}, id=f"{_op}-11-i32")
    case(_op, 18, [R(0, 3, lo=_lo, hi=_hi), A([0], i64)], id=f"{_op}-empty")
    case(_op, 18, [R(lo=_lo, hi=_hi)], id=f"{_op}-scalar")
case("ReduceLogSumExp", 18, [A([[5, 5, 4, 4, 4, 4, 4, 4], [5, 5, 5, 1, 1, 1, 1, 1]], i64), A([1], i64)],
     id="ReduceLogSumExp-int-terms-truncate")
case("ReduceLogSumExp", 18, [A([[-np.inf, -np.inf], [np.inf, 1.0], [-np.inf, 2.0]], f32), A([1], i64)],
     id="ReduceLogSumExp-inf")
case("ReduceL2", 18, [A([[3, 4, 12, 1], [1, 1, 1, 1]], i32), A([1], i64)], id="ReduceL2-int-trunc")
for _op, ((_lo, _hi), _) in _RED_MORE.items():  # f64 in f64, beyond f32's range where exp overflows it
    case(_op, 18, [R(3, 40, dtype=np.float64, lo=_lo, hi=_hi), A([1], i64)], id=f"{_op}-f64")
case("ReduceLogSumExp", 18, [A([[100.0, 300.0, -np.inf], [-np.inf, -np.inf, -np.inf]], np.float64), A([1], i64)],
     id="ReduceLogSumExp-f64-wide")
# Integer reductions run in double and convert back saturating (NaN -> min).
_BIG = A([[2**40, 2**40, -1], [-1, 2**62, 2], [3**20, 3**19, 1], [2**62, 2**62, 2**62]], i64)
_BIG32 = A([[2**31 - 1, 5, 0], [50000, 50000, -7], [-2**31, -1, 3], [2**16, 2**16, 1]], i32)
for _op in ("ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceSum", "ReduceMean"):
    for _x in (_BIG, _BIG32):
        case(_op, 18 if _op != "ReduceSum" else 13, [_x, A([1], i64)], id=f"{_op}-{_x.dtype}-double-saturate")
case("ReduceLogSumExp", 18, [A([[-5, -5, -5, -9], [-5, -6, -7, -8], [-2**62, 2**62, 3, 0]], i64), A([1], i64)],
     id="ReduceLogSumExp-int-negative")
# Opset 28: the same float forms (its integer types are gone)
for _op in ("ReduceLogSum", "ReduceLogSumExp"):
    _lo, _hi = _RED_MORE[_op][0]
    case(_op, 28, [R(2, 3, 4, lo=_lo, hi=_hi), A([-1, 0], i64)], {"keepdims": 0}, id=f"{_op}-28")
    case(_op, 28, [R(4, 13, dtype=f16, lo=_lo, hi=_hi), A([1], i64)], id=f"{_op}-28-f16")

for _op in ("ArgMax", "ArgMin"):
    for _v in (1, 11, 12, 13):
        case(_op, _v, [R(3, 4, 5)], {"axis": 1})
        case(_op, _v, [R(3, 4, 5)], {"keepdims": 0, "axis": -1} if _v >= 11 else {"keepdims": 0})
    for _v in (12, 13):
        _ties = A([[1, 3, 3, 0], [2, 2, 2, 2], [0, 0, 1, 1]], i32)
        case(_op, _v, [_ties], {"axis": 1, "select_last_index": 1}, id=f"{_op}-{_v}-last")
        case(_op, _v, [_ties], {"axis": 1, "select_last_index": 0}, id=f"{_op}-{_v}-first")
    for _dt in (f16, i8, u8, i32, i64):
        _x = R(4, 6, dtype=_dt, lo=-5, hi=5) if _dt != u8 else U(4, 6, dtype=u8, hi=5)
        case(_op, 13, [_x], {"axis": 0}, id=f"{_op}-{np.dtype(_dt)}")
    case(_op, 11, [R(4, 6, dtype=f16)], {"axis": 1}, id=f"{_op}-11-f16")
    case(_op, 13, [A([[1, np.nan, 3, 2], [np.nan, 1, 5, 2], [2, 2, np.nan, 1]], f32)], {"axis": 1}, id=f"{_op}-nan")
    case(_op, 13, [A([[1, np.nan, 3, 3], [np.nan, 1, 5, 2], [2, 2, np.nan, 1]], f32)],
         {"axis": 1, "select_last_index": 1}, id=f"{_op}-nan-last")
    case(_op, 13, [R(0, 3)], {"axis": 1}, id=f"{_op}-empty-other-axis")
    case(_op, 13, [R(5)], {"keepdims": 0}, id=f"{_op}-1d")

for _op, _lo, _hi in (("CumSum", -3, 3), ("CumProd", 0.5, 1.5)):
    _vs = (11, 14) if _op == "CumSum" else (26,)
    for _v in _vs:
        case(_op, _v, [R(3, 4, lo=_lo, hi=_hi), A(1, i64)])
        case(_op, _v, [R(3, 4, 5, lo=_lo, hi=_hi), A([-1], i32)], {"exclusive": 1})
        case(_op, _v, [R(3, 4, lo=_lo, hi=_hi), A(0, i32)], {"reverse": 1})
        case(_op, _v, [R(3, 4, lo=_lo, hi=_hi), A(1, i64)], {"reverse": 1, "exclusive": 1})
        case(_op, _v, [R(3, 4, dtype=i32, lo=-5, hi=5), A(0, i64)], {"exclusive": 1}, id=f"{_op}-{_v}-i32")
        case(_op, _v, [R(3, 4, dtype=i64, lo=-5, hi=5), A(1, i64)], {"reverse": 1}, id=f"{_op}-{_v}-i64")
    case(_op, last(_vs), [R(3, 40, dtype=f16, lo=_lo, hi=_hi), A(1, i64)], id=f"{_op}-f16")
    case(_op, last(_vs), [R(0, 3, lo=_lo, hi=_hi), A(0, i64)], id=f"{_op}-empty")
case("CumProd", 26, [U(3, 4, dtype=u32, lo=1, hi=9), A(1, i64)], {"exclusive": 1}, id="CumProd-u32")
case("CumProd", 26, [U(3, 4, dtype=u64, lo=1, hi=9), A(0, i64)], id="CumProd-u64")
case("CumSum", 14, [R(2, 5000, lo=-1, hi=1), A(1, i64)], tol=(1e-5, 1e-5), id="CumSum-long-sequential")
# f64 runs in f64 (ONNX Runtime's double kernels), sequentially
case("CumSum", 14, [R(3, 700, dtype=np.float64, lo=-1, hi=1), A(-1, i64)], {"reverse": 1}, id="CumSum-f64")
case("CumProd", 26, [R(4, 9, dtype=np.float64, lo=0.5, hi=1.5), A(0, i32)], {"exclusive": 1}, id="CumProd-f64")

_TIES = A([[3, 1, 3, 2, 1, 3, 0, 5, 5], [1, 1, 1, 1, 1, 1, 1, 1, 1]], f32)
case("TopK", 1, [R(3, 6)], {"k": 2}, n_out=2)
case("TopK", 1, [R(6, 3)], {"k": 3, "axis": 0}, n_out=2)
case("TopK", 10, [R(3, 6), A([2], i64)], n_out=2)
case("TopK", 10, [R(3, 6, dtype=f16), A([4], i64)], {"axis": 1}, n_out=2, id="TopK-10-f16")
for _v in (11, 24):
    case("TopK", _v, [R(3, 6, 2), A([3], i64)], {"axis": 1}, n_out=2)
    case("TopK", _v, [R(3, 6), A([3], i64)], {"largest": 0}, n_out=2)
for _largest in (0, 1):
    for _k in (1, 2, 4, 9):
        case("TopK", 11, [_TIES, A([_k], i64)], {"largest": _largest}, n_out=2, id=f"TopK-ties-l{_largest}-k{_k}")
for _dt in (f16, i8, u8, i16, i32, i64):
    _x = R(4, 7, dtype=_dt, lo=-5, hi=5) if _dt != u8 else U(4, 7, dtype=u8, hi=5)
    case("TopK", 24, [_x, A([3], i64)], {"axis": -1}, n_out=2, id=f"TopK-{np.dtype(_dt)}")
    case("TopK", 24, [_x, A([2], i64)], {"axis": 0, "largest": 0}, n_out=2, id=f"TopK-{np.dtype(_dt)}-small")
case("TopK", 11, [R(3, 5), A([0], i64)], n_out=2, id="TopK-k0")
case("TopK", 11, [R(2, 300), A([7], i64)], n_out=2, id="TopK-long-row")

for _up in (0, 1):
    for _k in (None, A(0, i64), A(2, i64), A(-1, i64), A([-5], i64)):
        case("Trilu", 14, [R(2, 4, 5)] + ([] if _k is None else [_k]), {"upper": _up},
             id=f"Trilu-up{_up}-k{'none' if _k is None else int(_k.reshape(-1)[0])}")
for _dt in (f16, i32, i64, b):
    case("Trilu", 14, [R(3, 3, dtype=_dt, lo=-9, hi=9), A(1, i64)], {"upper": 0}, id=f"Trilu-{np.dtype(_dt)}")
case("Trilu", 14, [R(4, 0, 3)], id="Trilu-empty")
for _k in (2**63 - 1, -2**63, 2**40):  # k past the matrix's ends, up to int64's extremes
    for _up in (0, 1):
        case("Trilu", 14, [R(3, 4), A(_k, i64)], {"upper": _up}, id=f"Trilu-k{_k}-upper{_up}")

for _v in (9, 13):
    case("NonZero", _v, [R(3, 4) * (R(3, 4) > 0)])
for _dt in (f16, u8, i32, i64, b):
    _x = U(2, 3, 4, dtype=_dt, lo=0, hi=1) if _dt != b else R(2, 3, 4, dtype=b)
    case("NonZero", 13, [_x], id=f"NonZero-{np.dtype(_dt)}")
case("NonZero", 13, [A([np.nan, 0.0, -0.0, 1.0], f32)], id="NonZero-nan-negzero")
case("NonZero", 13, [A(3.0, f32)], id="NonZero-scalar")
case("NonZero", 13, [A(0, i32)], id="NonZero-scalar-zero")
case("NonZero", 13, [R(0, 3)], id="NonZero-empty")
case("NonZero", 13, [np.zeros((2, 3), f32)], id="NonZero-none")

case("Range", 11, [A(0.1, f32), A(5.0, f32), A(0.3, f32)], id="Range-f32-accumulates")
case("Range", 11, [A(10, i32), A(-3, i32), A(-4, i32)], id="Range-i32-negative")
case("Range", 11, [A(1, i16), A(10, i16), A(3, i16)], id="Range-i16")
case("Range", 11, [A(-5, i64), A(5, i64), A(1, i64)], id="Range-i64")
case("Range", 11, [A(10, i64), A(3, i64), A(4, i64)], id="Range-empty")
case("Range", 11, [A(1.0, f32), A(2.0, f32), A(1e-3, f32)], id="Range-f32-many")
case("Range", 11, [A([2], i64), A([9], i64), A([2], i64)], id="Range-1-element-operands")
case("Range", 27, [A(0.1, f32), A(5.0, f32), A(0.3, f32)], id="Range-27-f32")
case("Range", 27, [A(10, i32), A(-3, i32), A(-4, i32)], {"stash_type": 1}, id="Range-27-i32-stash-type")
# f16 operands: ORT counts and accumulates in f32 (whatever stash_type says) and rounds each element
case("Range", 27, [A(0.1, f16), A(2000.0, f16), A(0.0999, f16)], id="Range-27-f16-accumulates-in-f32")
case("Range", 27, [A(-3.3, f16), A(600.0, f16), A(7.77, f16)], {"stash_type": 10}, id="Range-27-f16-stash-f16")
case("Range", 27, [A(5.0, f16), A(1.0, f16), A(0.5, f16)], id="Range-27-f16-empty")

for _v in (9, 20, 21, 23, 24, 25):
    case("ConstantOfShape", _v, [A([2, 3], i64)])
for _dt in (f32, f16, np.float64, i8, u8, i16, u16, i32, i64, u32, u64, b):
    _val = np.array([1 if _dt == b else 7], dtype=_dt)
    case("ConstantOfShape", 25, [A([3, 2], i64)], {"value": numpy_helper.from_array(_val)},
         id=f"ConstantOfShape-{np.dtype(_dt)}", tol=(0, 0) if _dt == np.float64 else None)
case("ConstantOfShape", 20, [A([], i64)], {"value": numpy_helper.from_array(A([2.5], f32))},
     id="ConstantOfShape-scalar")
case("ConstantOfShape", 20, [A([2, 0, 3], i64)], id="ConstantOfShape-empty")

for _v in (9, 22):
    case("EyeLike", _v, [R(3, 4)])
case("EyeLike", 22, [R(4, 3, dtype=i32, lo=0, hi=5)], {"k": 1}, id="EyeLike-i32-k1")
case("EyeLike", 22, [R(4, 4)], {"k": -2, "dtype": TP.INT64}, id="EyeLike-to-i64")
case("EyeLike", 22, [R(2, 5, dtype=f16)], {"dtype": TP.INT64}, id="EyeLike-f16-to-i64")
case("EyeLike", 22, [R(2, 5, dtype=f16)], {"dtype": TP.FLOAT16}, id="EyeLike-f16-to-f16")
case("EyeLike", 9, [R(3, 3, dtype=f16)], {"k": 5}, id="EyeLike-f16-k-out")
case("EyeLike", 22, [R(0, 3)], id="EyeLike-empty")
case("EyeLike", 22, [R(3, 5, dtype=i32, lo=0, hi=5)], {"k": 2, "dtype": TP.DOUBLE}, id="EyeLike-to-f64")
case("EyeLike", 22, [R(4, 2, dtype=np.float64)], {"k": -1}, id="EyeLike-f64")

_X34 = R(3, 4)
for _v in (9, 11):
    case("Compress", _v, [_X34, A([True, False, True], b)], {"axis": 0})
    case("Compress", _v, [_X34, A([False, True, True, False, True, False], b)])
case("Compress", 11, [_X34, A([True, False], b)], {"axis": 1}, id="Compress-short")
case("Compress", 11, [_X34, A([True, False, True, False, True], b)], {"axis": 1}, id="Compress-long")
case("Compress", 11, [_X34, A([True, False, True], b)], {"axis": -2}, id="Compress-neg-axis")
case("Compress", 11, [_X34, A([], b)], {"axis": 1}, id="Compress-none")
case("Compress", 28, [_X34, A([True, False, True, False, True], b)], {"axis": 1}, id="Compress-28")
case("Compress", 28, [_X34, A([False, True, True, False, True, False], b)], id="Compress-28-flat")
for _dt in (f16, i8, i64, b):
    case("Compress", 11, [R(3, 4, dtype=_dt), A([True, True, False], b)], {"axis": 0}, id=f"Compress-{np.dtype(_dt)}")

# ---- LogSoftmax / Hardmax / normalization ---------------------------------------------------------
for _op in ("LogSoftmax", "Hardmax"):
    case(_op, 13, [R(2, 3, 5, lo=-5, hi=5)])
    case(_op, 13, [R(2, 3, 5, lo=-5, hi=5)], {"axis": 1})
    case(_op, 13, [R(2, 3, 5, lo=-5, hi=5)], {"axis": 0})
    case(_op, 13, [R(4, 33, dtype=f16, lo=-5, hi=5)], id=f"{_op}-f16")
    case(_op, 11, [R(4, 7, lo=-5, hi=5)])
    case(_op, 11, [R(2, 3, 5, lo=-5, hi=5)], {"axis": -1})
    case(_op, 11, [R(4, 7, dtype=f16, lo=-5, hi=5)], id=f"{_op}-11-f16")
    case(_op, 1, [R(2, 3, 5, lo=-5, hi=5)], {"axis": 2})
    # opsets 1 and 11 coerce to 2-D at the axis (default 1): normalize over the flattened block
    case(_op, 11, [R(2, 3, 4, lo=-5, hi=5)], id=f"{_op}-11-coerce-default")
    case(_op, 1, [R(2, 3, 4, lo=-5, hi=5)], {"axis": 0}, id=f"{_op}-1-coerce-axis0")
    case(_op, 13, [R(2, 0, lo=-5, hi=5)], id=f"{_op}-empty")
case("Softmax", 11, [R(2, 3, 4, lo=-5, hi=5)], id="Softmax-11-coerce-default")
case("Softmax", 1, [R(2, 3, 2, 2, lo=-5, hi=5)], {"axis": 1}, id="Softmax-1-coerce-axis1-rank4")
case("Hardmax", 13, [A([[1, 3, 3], [2, 2, 1], [np.nan, 2, 1], [1, np.nan, 3]], f32)], id="Hardmax-ties-nan")
case("LogSoftmax", 13, [A([[-np.inf, 0, 1], [1e30, 0, -1e30]], f32)], id="LogSoftmax-special")

for _v in (6, 22):
    case("InstanceNormalization", _v, [R(2, 3, 4, 5), R(3), R(3)])
case("InstanceNormalization", 22, [R(2, 3, 7, lo=0, hi=4), R(3), R(3)], {"epsilon": 1e-2},
     id="InstanceNormalization-3d")
case("InstanceNormalization", 22, [R(2, 3, 4, 4, dtype=f16), R(3, dtype=f16), R(3, dtype=f16)],
     tol=(4e-3, 2e-3), id="InstanceNormalization-f16")
case("GroupNormalization", 18, [R(2, 4, 3, 3), R(2), R(2)], {"num_groups": 2})
case("GroupNormalization", 18, [R(2, 6, 5), R(3), R(3)], {"num_groups": 3, "epsilon": 1e-3})
case("GroupNormalization", 21, [R(2, 4, 3, 3), R(4), R(4)], {"num_groups": 2})
case("GroupNormalization", 21, [R(2, 6, 5, lo=0, hi=3), R(6), R(6)], {"num_groups": 6},
     id="GroupNormalization-21-G=C")
case("GroupNormalization", 18, [R(2, 4, 5, lo=0, hi=3), R(4), R(4)], {"num_groups": 4},
     id="GroupNormalization-18-G=C")
case("GroupNormalization", 21, [R(2, 4, 6, dtype=f16), R(4, dtype=f16), R(4, dtype=f16)], {"num_groups": 2},
     tol=(4e-3, 2e-3), id="GroupNormalization-f16")
case("GroupNormalization", 21, [R(2, 4, 3), R(4), R(4)], {"num_groups": 1, "stash_type": 1},
     id="GroupNormalization-one-group")

_BN = lambda c, dt=f32: [R(c, dtype=dt), R(c, dtype=dt), R(c, dtype=dt), R(c, dtype=dt, lo=0.1, hi=2)]  # noqa: E731
for _v in (7, 9, 14, 15):
    case("BatchNormalization", _v, [R(2, 3, 4, 4)] + _BN(3))
case("BatchNormalization", 15, [R(4, 3)] + _BN(3), {"epsilon": 1e-3}, id="BatchNormalization-2d")
case("BatchNormalization", 15, [R(2, 3, 5, dtype=f16)] + _BN(3, f16), tol=(4e-3, 2e-3), id="BatchNormalization-f16")
case("BatchNormalization", 15, [R(2, 3, 5, dtype=f16)] + _BN(3)[:2] + _BN(3, f16)[2:], tol=(4e-3, 2e-3),
     id="BatchNormalization-mixed")
case("BatchNormalization", 14, [R(2, 3, 4)] + _BN(3), {"training_mode": 0, "momentum": 0.5},
     id="BatchNormalization-14-attrs")
# training mode: the batch's statistics normalize, the running ones come out as outputs 1 and 2
for _v in (14, 15):
    case("BatchNormalization", _v, [R(3, 4, 5, 6, lo=-2, hi=5)] + _BN(4), {"training_mode": 1, "momentum": 0.8},
         n_out=3, id=f"BatchNormalization-{_v}-training")
case("BatchNormalization", 15, [R(8, 3)] + _BN(3), {"training_mode": 1, "epsilon": 1e-2}, n_out=3,
     id="BatchNormalization-training-2d")
case("BatchNormalization", 15, [R(2, 3, 5, 7, dtype=f16)] + _BN(3, f16), {"training_mode": 1}, n_out=3,
     tol=(4e-3, 2e-3), id="BatchNormalization-training-f16")
case("BatchNormalization", 15, [R(2, 3, 5, dtype=f16)] + _BN(3)[:2] + _BN(3, f16)[2:], {"training_mode": 1},
     n_out=3, tol=(4e-3, 2e-3), id="BatchNormalization-training-mixed")

for _v in (1, 22):
    case("LpNormalization", _v, [R(3, 5)])
    case("LpNormalization", _v, [R(3, 5, 2)], {"axis": 1, "p": 1})
case("LpNormalization", 22, [A([[0, 0, 0], [1, 2, 2], [3, -4, 0]], f32)], id="LpNormalization-zero-row")
case("LpNormalization", 22, [A([[0, 0, 0], [1, -2, 2]], f32)], {"p": 1}, id="LpNormalization-p1-zero-row")
case("LpNormalization", 22, [R(4, 9, dtype=f16)], {"axis": 0}, id="LpNormalization-f16")

for _v in (9, 13):
    case("MeanVarianceNormalization", _v, [R(2, 3, 4, 5)])
case("MeanVarianceNormalization", 13, [R(2, 3, 4, 5)], {"axes": [2, 3]}, id="MeanVarianceNormalization-hw")
case("MeanVarianceNormalization", 13, [R(2, 3, 4)], {"axes": [0, -1]}, id="MeanVarianceNormalization-3d")
# mean/std ~ 100: the f32 mean's summation order shows at ~1e-5 in the output
case("MeanVarianceNormalization", 13, [R(1, 2, 5, 5, lo=-0.03, hi=0.03) + np.float32(1.6)], tol=(1e-4, 2e-5),
     id="MeanVarianceNormalization-small-variance")

for _v in (1, 13):
    case("LRN", _v, [R(2, 5, 3, 3, lo=0, hi=3)], {"size": 3})
case("LRN", 13, [R(1, 7, 2, 2)], {"size": 5, "alpha": 1e-2, "beta": 0.5, "bias": 2.0}, id="LRN-attrs")
case("LRN", 13, [R(1, 3, 2, 3)], {"size": 5}, id="LRN-size-gt-channels")
case("LRN", 13, [R(1, 6, 3, 3, dtype=f16)], {"size": 3, "alpha": 0.1}, id="LRN-f16")

# ---- comparisons, Max and Min in every integer width and f64 (exact: no rounding, no overflow) -----
for _dt in (i8, u8, i16, u16, u32, u64):
    _info = np.iinfo(_dt)
    _x = np.array([_info.min, _info.max, 0, 5, _info.max - 1, 7], _dt)
    _y = np.array([_info.max, _info.min, 0, 6, _info.max, 7], _dt)
    for _op, _v in (("Equal", 19), ("Less", 13), ("Greater", 13), ("LessOrEqual", 16), ("GreaterOrEqual", 16)):
        case(_op, _v, [_x, _y], id=f"{_op}-{np.dtype(_dt).name}")
    if _dt not in (i16, u16):  # ONNX Runtime has no 16-bit Max or Min (hipep claims none)
        case("Max", 13, [_x, _y, _x[::-1].copy()], id=f"Max-{np.dtype(_dt).name}")
        case("Min", 13, [_x, _y[None, :]], id=f"Min-{np.dtype(_dt).name}")
_f64 = np.array([1.5, -np.inf, 0.0, 2.0 ** -1070, 1e300], np.float64)
_g64 = np.array([1.5, 3.0, -0.0, 0.0, np.inf], np.float64)
for _op, _v in (("Equal", 19), ("Less", 13), ("GreaterOrEqual", 16)):
    case(_op, _v, [_f64, _g64], id=f"{_op}-float64")
case("Max", 13, [_f64, _g64], id="Max-float64")
case("Min", 13, [_f64, _g64], id="Min-float64")

# ---- arithmetic and Mod in every integer width (wrapping, division truncating) and f64 ----------------
for _dt in (i8, u8, i16, u16, u32, u64):
    _info = np.iinfo(_dt)
    _x = np.array([_info.max, _info.min, 7, _info.max // 3, 100 % (_info.max + 1), 9], _dt)
    _y = np.array([3, 1 if _info.min == 0 else -3, 2, 5, 3, 4], _dt)
    for _op in ("Add", "Sub", "Mul", "Div"):
        case(_op, 14, [_x, _y], id=f"{_op}-{np.dtype(_dt).name}-wraps")
    case("Mod", 13, [_x, _y], id=f"Mod-{np.dtype(_dt).name}")
    case("Mod", 13, [_x, _y], {"fmod": 1}, id=f"Mod-{np.dtype(_dt).name}-fmod")
case("Div", 14, [A([-7, 7, -128, 127], i8), A([2, -2, 3, -1], i8)], id="Div-int8-truncates")
case("Mod", 13, [A([-7, 7, -128, 127], i8), A([2, -2, 3, -5], i8)], id="Mod-int8-sign-of-divisor")
_a64, _b64 = R(3, 4).astype(np.float64) * 1e3, R(3, 4, lo=0.5, hi=2).astype(np.float64)
for _op in ("Add", "Sub", "Mul", "Div"):
    case(_op, 14, [_a64, _b64], id=f"{_op}-float64")
case("Mod", 13, [_a64, _b64], {"fmod": 1}, id="Mod-float64-fmod")

# ---- Cast and CastLike to and from f64 ---------------------------------------------------------------
# 1 + 2**-11 + 2**-40 rounds up to f16 from f64 once, but to 1 through f32 first (a tie there)
_D = np.array([1.5, -2.25, 1e10, -1e-8, 1 + 2.0 ** -11 + 2.0 ** -40, 65519.99, 7.9, -7.9, 0.0], np.float64)
for _to, _dt in ((TP.FLOAT, f32), (TP.FLOAT16, f16), (TP.INT64, i64), (TP.INT32, i32), (TP.BOOL, b)):
    _src = _D if _to not in (TP.INT32, TP.INT64) else np.clip(_D, -2e9, 2e9)
    case("Cast", 21, [_src], {"to": _to}, tol=(0, 0), id=f"Cast-float64-{np.dtype(_dt).name}")
for _x in (R(3, 4), R(3, 4, dtype=f16), A([-(2 ** 60), 3, 2 ** 53 + 1], i64), A([True, False], b)):
    case("Cast", 21, [_x], {"to": TP.DOUBLE}, tol=(0, 0), id=f"Cast-{_x.dtype.name}-float64")
case("CastLike", 21, [_D, A(1.0, f16)], tol=(0, 0), id="CastLike-float64-float16")
case("CastLike", 21, [R(2, 3), A(1.0, np.float64)], tol=(0, 0), id="CastLike-float32-float64")

# ---- BitCast (the bytes read as another type of the same width) ---------------------------------
_TP = {f32: TP.FLOAT, i32: TP.INT32, np.float64: TP.DOUBLE, i64: TP.INT64, f16: TP.FLOAT16, u16: TP.UINT16,
       i16: TP.INT16, u8: TP.UINT8, i8: TP.INT8, u32: TP.UINT32}
for _src, _dst, _x in ((f32, i32, A([1.5, -0.0, np.inf, np.nan], f32)), (i32, f32, A([0, 1, -1, 2 ** 30], i32)),
                       (np.float64, i64, R(2, 3).astype(np.float64)), (i64, np.float64, A([7, -9, 2 ** 62], i64)),
                       (f16, u16, R(3, 4, dtype=f16)), (u16, i16, U(5, dtype=u16, hi=65535)),
                       (i8, u8, U(2, 2, dtype=i8, lo=-128, hi=127)), (u32, f32, U(4, dtype=u32, hi=2 ** 31)),
                       (f32, i32, A(3.25, f32))):
    case("BitCast", 26, [_x], {"to": _TP[_dst]},
         id=f"BitCast-{np.dtype(_src).name}-{np.dtype(_dst).name}{'-scalar' if _x.ndim == 0 else ''}")

# ---- Einsum / MatMulInteger / QLinearMatMul -------------------------------------------------------
_EINSUM = [("ij,jk->ik", [(3, 4), (4, 5)]), ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
           ("bhqk,bhkd->bhqd", [(2, 3, 4, 6), (2, 3, 6, 5)]), ("ij->ji", [(3, 4)]), ("ij->", [(3, 4)]),
           ("ii->i", [(3, 3)]), ("ii", [(3, 3)]), ("ij,jk", [(3, 4), (4, 5)]), ("Ab,bc->Ac", [(3, 4), (4, 5)]),
           ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]), ("...ij,jk->...ik", [(2, 3, 4), (4, 5)]),
           ("i,j->ij", [(3,), (4,)]), ("i,i->", [(3,), (3,)]), ("ij,ij->ij", [(3, 4), (3, 4)]),
           ("bij->bj", [(2, 3, 4)]), (" ij , jk -> ik ", [(3, 4), (4, 5)]), ("iij->ij", [(3, 3, 2)]),
           ("ij...,jk...->ik...", [(3, 4, 2), (4, 5, 2)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
           ("i...->...", [(3, 4)]), ("...,...->...", [(3, 1), (1, 4)]), ("bij,bjk->bik", [(1, 3, 4), (2, 4, 5)]),
           ("ij,jk->ik", [(3, 1), (4, 5)]), ("ba,cb", [(3, 4), (5, 3)]), ("", [()]), ("bsnh->bnsh", [(2, 3, 4, 5)])]
for _i, (_eq, _shapes) in enumerate(_EINSUM):
    case("Einsum", 12, [R(*s) for s in _shapes], {"equation": _eq}, id=f"Einsum-{_i}-{_eq.replace(' ', '')}")
case("Einsum", 12, [R(2, 8, 16, dtype=f16), R(2, 16, 4, dtype=f16)], {"equation": "bij,bjk->bik"},
     tol=(4e-3, 2e-3), id="Einsum-f16")
case("Einsum", 12, [R(3, 4, dtype=i32, lo=-9, hi=9), R(4, 5, dtype=i32, lo=-9, hi=9)], {"equation": "ij,jk->ik"},
     id="Einsum-i32")
case("Einsum", 12, [R(3, 4, dtype=i64, lo=-9, hi=9)], {"equation": "ij->j"}, id="Einsum-i64")
case("Einsum", 12, [R(2, 3, 5, dtype=np.float64), R(2, 5, 4, dtype=np.float64)], {"equation": "bij,bjk->bik"},
     id="Einsum-f64")
case("Einsum", 28, [R(2, 3, 4), R(2, 4, 5)], {"equation": "bij,bjk->bik"}, id="Einsum-28")
# Det: f64 LU here, ORT's in f32 (tests/unit/test_det.py has the rest)
case("Det", 11, [R(3, 3)], tol=(1e-4, 1e-6), id="Det-11")
case("Det", 22, [R(2, 3, 4, 4)], tol=(1e-4, 1e-6), id="Det-batch")
case("Det", 22, [R(2, 3, 3, dtype=f16, lo=-1, hi=1)], tol=(1e-2, 1e-3), id="Det-f16")

_Q = {u8: (0, 255), i8: (-128, 127)}
for _ta in (u8, i8):
    for _tb in (u8, i8):
        _a, _b = U(3, 4, dtype=_ta, lo=_Q[_ta][0], hi=_Q[_ta][1]), U(4, 5, dtype=_tb, lo=_Q[_tb][0], hi=_Q[_tb][1])
        _tag = f"{np.dtype(_ta)}-{np.dtype(_tb)}"
        case("MatMulInteger", 10, [_a, _b], id=f"MatMulInteger-{_tag}")
        case("MatMulInteger", 10, [_a, _b, A(3, _ta), A(-2 if _tb == i8 else 7, _tb)], id=f"MatMulInteger-{_tag}-zp")
case("MatMulInteger", 10, [U(2, 3, 4, dtype=u8, hi=255), U(4, 5, dtype=i8, lo=-128, hi=127), A([1], u8),
                           U(5, dtype=i8, lo=-5, hi=5)], id="MatMulInteger-per-column-zp")
case("MatMulInteger", 10, [U(3, 4, dtype=u8, hi=255), U(2, 4, 5, dtype=u8, hi=255), A(1, u8),
                           U(2, 1, 5, dtype=u8, hi=9)], id="MatMulInteger-batched-zp")
case("MatMulInteger", 10, [U(4, dtype=i8, lo=-9, hi=9), U(4, 3, dtype=i8, lo=-9, hi=9)], id="MatMulInteger-1d")


def _qlm(ta, tb, shape_a=(3, 16), shape_b=(16, 5), b_per_col=False):
    a = U(*shape_a, dtype=ta, lo=_Q[ta][0], hi=_Q[ta][1])
    bb = U(*shape_b, dtype=tb, lo=_Q[tb][0], hi=_Q[tb][1])
    n = shape_b[-1]
    b_scale = R(n, lo=0.001, hi=0.01) if b_per_col else A(0.004, f32)
    b_zp = U(n, dtype=tb, lo=0, hi=9) if b_per_col else A(2, tb)
    return [a, A(0.02, f32), A(5, ta), bb, b_scale, b_zp, A(0.05, f32), A(3, ta)]


for _v in (10, 21):
    for _ta, _tb in ((u8, u8), (u8, i8), (i8, i8)):
        case("QLinearMatMul", _v, _qlm(_ta, _tb), id=f"QLinearMatMul-{_v}-{np.dtype(_ta)}-{np.dtype(_tb)}")
case("QLinearMatMul", 21, _qlm(u8, i8, (2, 3, 16), (16, 4), b_per_col=True), id="QLinearMatMul-per-column")
case("QLinearMatMul", 21, _qlm(u8, u8, (3, 64), (64, 7)), id="QLinearMatMul-saturates")

case("QLinearMatMul", 21, [REF.RNG.integers(0, 255, (3, 8)).astype(u8), A(0.02, f16), A(5, u8),
                           REF.RNG.integers(0, 255, (8, 4)).astype(u8), A(0.03, f16), A(7, u8), A(0.5, f16),
                           A(3, u8)], id="QLinearMatMul-f16-scales")
# a NaN product (0/0 or a NaN scale) requantizes to the output type's low end, as MLAS's does
case("QLinearMatMul", 10, [A(np.arange(12).reshape(3, 4), u8), A(0, f32), A(1, u8), A(np.arange(8).reshape(4, 2), u8),
                           A(0.1, f32), A(2, u8), A(0, f32), A(100, u8)], id="QLinearMatMul-nan-product")
case("QLinearMatMul", 10, [A(np.arange(12).reshape(3, 4), i8), A(np.nan, f32), A(1, i8),
                           A(np.arange(8).reshape(4, 2), i8), A(0.1, f32), A(2, i8), A(1, f32), A(-100, i8)],
     id="QLinearMatMul-nan-scale")

# ---- signal, detection and set ops ------------------------------------------------------------------
# (ORT sums DFT and STFT in f32, hipep in double: a few 1e-6 apart, 4e-6 where the exact value is 0)
SIGNAL_TOL = (1e-4, 2e-5)
case("DFT", 17, [R(2, 8, 1)], {"axis": 1}, tol=SIGNAL_TOL)
case("DFT", 17, [R(2, 6, 2), A(8)], {"axis": 1, "inverse": 1}, tol=SIGNAL_TOL)
case("DFT", 20, [R(3, 10, 1), A(12), A(-2)], {"onesided": 1}, tol=SIGNAL_TOL)
case("DFT", 20, [R(2, 5, 2), A(8), A(1)], {"inverse": 1, "onesided": 1}, id="DFT-20-irfft", tol=SIGNAL_TOL)
case("STFT", 17, [R(2, 64, 1), A(8), R(16, lo=0, hi=1), A(16)], {"onesided": 1}, tol=SIGNAL_TOL)
case("STFT", 17, [R(1, 40, 2), A(5), None, A(10)], {"onesided": 0}, tol=SIGNAL_TOL, id="STFT-17-complex")


def _boxes(n):
    corners = REF.RNG.uniform(0, 10, (2, n, 2))
    return np.concatenate([corners, corners + REF.RNG.uniform(0.5, 4, (2, n, 2))], -1).astype(f32)


case("NonMaxSuppression", 10, [_boxes(12), R(2, 3, 12, lo=0, hi=1), A([4]), A([0.3], f32), A([0.2], f32)])
case("NonMaxSuppression", 11, [_boxes(12), R(2, 1, 12, lo=0, hi=1), A([12]), A([0.5], f32)],
     {"center_point_box": 1})
case("ReverseSequence", 10, [R(4, 3, 2), A([1, 4, 0])], {"batch_axis": 1, "time_axis": 0},
     id="ReverseSequence-10-empty-entry")
case("ReverseSequence", 10, [R(3, 5), A([5, 2, 3])], {"batch_axis": 0, "time_axis": 1})
case("Unique", 11, [A([2, 1, 1, 3, 4, 3], f32)], {"sorted": 0}, n_out=4)
case("Unique", 11, [A([[1, 0, 0], [1, 0, 0], [2, 3, 4]], i64)], {"axis": 0}, n_out=4)
case("HannWindow", 17, [A(10)], {"periodic": 0})
case("HammingWindow", 17, [A(7, np.int32)], {"output_datatype": 11})
case("BlackmanWindow", 17, [A(16)], {"output_datatype": 7})
case("MelWeightMatrix", 17, [A(8), A(64), A(8000), A(0, f32), A(4000, f32)])
case("AffineGrid", 20, [R(2, 2, 3), A([2, 3, 4, 5])], {"align_corners": 1})
case("AffineGrid", 20, [R(1, 3, 4, dtype=np.float64), A([1, 2, 3, 4, 5])], id="AffineGrid-3d-f64")
case("MelWeightMatrix", 17, [A(20, np.int32), A(400, np.int32), A(16000, np.int32), A(20, f32), A(7600, f32)],
     {"output_datatype": 11})
case("MaxUnpool", 22, [R(2, 3, 2, 2), max_unpool_indices(REF.RNG, (2, 3, 2, 2), (2, 3, 4, 4))],
     {"kernel_shape": [2, 2], "strides": [2, 2]})
case("MaxUnpool", 9, [R(1, 2, 3, dtype=f16), max_unpool_indices(REF.RNG, (1, 2, 3), (1, 2, 4))],
     {"kernel_shape": [3], "pads": [1, 0]}, id="MaxUnpool-9-1d-f16-pads")
case("MaxUnpool", 11, [R(1, 1, 2, 2), A([[[[0, 3], [3, 3]]]])], {"kernel_shape": [2, 2], "strides": [2, 2]},
     id="MaxUnpool-11-repeated-index")

# ---- recurrent ops ---------------------------------------------------------------------------------
# (X [seq 4, batch 3, input 5], hidden 4; weights in [-1, 1]. Layout 1, which ORT's CPU EP refuses,
# and more configurations are in test_ops_recurrent.py.)


def _rnn(op, dirs=1, bias=True, lens=None, initial=False, peepholes=False, dtype=f32):
    g = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    ins = [R(4, 3, 5, dtype=dtype, lo=-1, hi=1), R(dirs, 4 * g, 5, dtype=dtype, lo=-1, hi=1),
           R(dirs, 4 * g, 4, dtype=dtype, lo=-1, hi=1), R(dirs, 8 * g, dtype=dtype, lo=-1, hi=1) if bias else None,
           None if lens is None else A(lens, i32), R(dirs, 3, 4, dtype=dtype, lo=-1, hi=1) if initial else None]
    if op == "LSTM":
        ins += [R(dirs, 3, 4, dtype=dtype, lo=-1, hi=1) if initial else None,
                R(dirs, 12, dtype=dtype, lo=-1, hi=1) if peepholes else None]
    while ins[-1] is None:
        ins.pop()
    return ins


_BI = {"direction": "bidirectional"}
case("RNN", 7, _rnn("RNN", bias=False), {"hidden_size": 4}, n_out=2, id="RNN-7-defaults")
case("RNN", 14, _rnn("RNN", 2, lens=[4, 1, 3], initial=True), {"hidden_size": 4, **_BI}, n_out=2,
     id="RNN-14-bidirectional-lengths")
case("RNN", 22, _rnn("RNN", lens=[2, 0, 4], initial=True),
     {"hidden_size": 4, "direction": "reverse", "activations": ["Relu"], "clip": 1.5}, n_out=2,
     id="RNN-22-reverse-relu-clip")
case("RNN", 22, _rnn("RNN", 2, dtype=f16, lens=[3, 4, 1], initial=True), {"hidden_size": 4, **_BI}, n_out=2,
     id="RNN-22-f16")
case("GRU", 7, _rnn("GRU", bias=False), {"hidden_size": 4}, n_out=2, id="GRU-7-defaults")
case("GRU", 14, _rnn("GRU", 2, lens=[3, 1, 4], initial=True), {"hidden_size": 4, "linear_before_reset": 1, **_BI},
     n_out=2, id="GRU-14-linear-before-reset")
case("GRU", 22, _rnn("GRU", lens=[4, 0, 2], initial=True),
     {"hidden_size": 4, "direction": "reverse", "clip": 0.8, "activations": ["HardSigmoid", "Softsign"]}, n_out=2,
     id="GRU-22-reverse-clip")
case("GRU", 22, _rnn("GRU", dtype=f16, lens=[4, 2, 3], initial=True), {"hidden_size": 4}, n_out=2, id="GRU-22-f16")
case("LSTM", 7, _rnn("LSTM", bias=False), {"hidden_size": 4}, n_out=3, id="LSTM-7-defaults")
case("LSTM", 14, _rnn("LSTM", 2, lens=[4, 0, 2], initial=True, peepholes=True), {"hidden_size": 4, **_BI}, n_out=3,
     id="LSTM-14-peepholes-lengths")
case("LSTM", 22, _rnn("LSTM", initial=True, peepholes=True), {"hidden_size": 4, "input_forget": 1, "clip": 0.7},
     n_out=3, id="LSTM-22-input-forget-clip")
case("LSTM", 22, _rnn("LSTM"), {"hidden_size": 4, "activations": ["HardSigmoid", "Softsign", "Softplus"],
                                "activation_alpha": [0.3], "activation_beta": [0.4]}, n_out=3, id="LSTM-22-activations")
case("LSTM", 22, _rnn("LSTM", 2, dtype=f16, lens=[1, 4, 3], initial=True, peepholes=True), {"hidden_size": 4, **_BI},
     n_out=3, id="LSTM-22-f16")


# ---- the comparison and the shape-rule contract, case by case -------------------------------------

@pytest.mark.parametrize("op,opset,inputs,attrs,n_out,since,tol", CASES)
def test_matches_ort(op, opset, inputs, attrs, n_out, since, tol):
    REF.check(op, opset, inputs, attrs, n_out, since, tol)


def _params():
    return [pytest.param(*p.values[:5], id=p.id) for p in CASES]


@pytest.mark.parametrize("op_type,opset,inputs,attrs,n_out", _params())
def test_rule_matches_reference(op_type, opset, inputs, attrs, n_out):
    SR.check_rule_matches_reference(op_type, opset, inputs, attrs, n_out)


@pytest.mark.parametrize("op_type,opset,inputs,attrs,n_out", _params())
def test_partial_shapes_never_invent_extents(op_type, opset, inputs, attrs, n_out):
    SR.check_partial_never_invents(op_type, opset, inputs, attrs, n_out)
