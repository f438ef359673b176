"""Reference kernels (the CPU oracle device) against ONNX Runtime's CPU EP, op by op.

Each case builds a single-node model at a given opset, runs it in ORT, and runs the registry's
reference on the same inputs with the attributes `resolve_attributes` gives for the node that
`GraphView.from_onnx` sees. Output dtypes and shapes must match exactly; f32 values within
rtol 1e-5 / atol 1e-6, f16 within about one f16 ulp, integers and bools exactly.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from hipep.errors import RuntimeShapeError
from hipep.graph import GraphView
from hipep.ops import check_node, lookup, resolve_attributes
from hipep.ops.elementwise import erf

from helpers import cpu_ep_outputs

IR_VERSION = 10
f32, f16, i32, i64, b = np.float32, np.float16, np.int32, np.int64, np.bool_
RNG = np.random.default_rng(20240607)


def R(*shape, dtype=f32, lo=-2.0, hi=2.0):
    """Random tensor: floats uniform in [lo, hi), integers in [lo, hi], bools 50/50."""
    if np.dtype(dtype) == np.bool_:
        return RNG.random(shape) < 0.5
    if np.dtype(dtype).kind == "i":
        return RNG.integers(int(lo), int(hi) + 1, size=shape).astype(dtype)
    return RNG.uniform(lo, hi, size=shape).astype(dtype)


def A(values, dtype):
    return np.array(values, dtype=dtype)


_RNG64 = np.random.default_rng(20260312)


def R64(*shape, lo=-2.0, hi=2.0):
    """Random f64 tensor from a generator of its own (the other cases' inputs stay as they were)."""
    return _RNG64.uniform(lo, hi, size=shape)


def nonzero(*shape, dtype=i32, lo=-20, hi=20):
    x = R(*shape, dtype=dtype, lo=lo, hi=hi)
    x[x == 0] = 1
    return x


def build(op, opset, inputs, attrs=None, n_out=1, out_dtypes=None):
    names = [f"x{i}" if a is not None else "" for i, a in enumerate(inputs)]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op, names, [f"y{i}" for i in range(n_out)], **(attrs or {}))
    g_in = [helper.make_tensor_value_info(f"x{i}", helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for i, a in enumerate(inputs) if a is not None]
    if out_dtypes is None:
        g_out = [helper.make_empty_tensor_value_info(f"y{i}") for i in range(n_out)]
    else:
        g_out = [helper.make_tensor_value_info(f"y{i}", helper.np_dtype_to_tensor_dtype(np.dtype(d)), None)
                 for i, d in enumerate(out_dtypes)]
    graph = helper.make_graph([node], "g", g_in, g_out)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=IR_VERSION)


def run_reference(model, inputs):
    # ORT (and GraphView by default) fold Constant nodes into initializers; keep the node here.
    graph = GraphView.from_onnx(model, constant_nodes_as_initializers=False)
    node = graph.nodes[0]
    op = lookup(node.domain, node.op_type)
    return node, graph, op.reference(list(inputs), resolve_attributes(op, node))


TOL = {np.dtype(f32): (1e-5, 1e-6), np.dtype(f16): (2e-3, 1e-4), np.dtype(np.float64): (1e-12, 0.0)}


def check(op, opset, inputs, attrs=None, n_out=1, since=None, tol=None):
    inputs = [None if a is None else np.asarray(a) for a in inputs]
    feeds = {f"x{i}": a for i, a in enumerate(inputs) if a is not None}
    expected = cpu_ep_outputs(build(op, opset, inputs, attrs, n_out), feeds)
    check_against(op, opset, inputs, attrs, n_out, since, tol, expected)


def check_against(op, opset, inputs, attrs, n_out, since, tol, expected):
    """The reference on `inputs` equals ORT's `expected` outputs: dtype, shape, values; it never
    aliases or modifies an input, and the node is claimed."""
    model = build(op, opset, inputs, attrs, n_out, [e.dtype for e in expected])
    before = [None if a is None else a.copy() for a in inputs]
    node, graph, got = run_reference(model, inputs)
    if since is not None:
        assert node.since_version == since
    assert check_node(node, graph) is None, check_node(node, graph)
    assert len(got) >= len(expected)
    for k, (e, g) in enumerate(zip(expected, got)):
        assert isinstance(g, np.ndarray), f"output {k} is {type(g).__name__}, not an ndarray"
        assert g.dtype == e.dtype, f"output {k}: dtype {g.dtype} != ORT's {e.dtype}"
        assert g.shape == e.shape, f"output {k}: shape {g.shape} != ORT's {e.shape}"
        assert g.flags.c_contiguous
        for a in inputs:
            assert a is None or not np.shares_memory(g, a), f"output {k} aliases an input"
        if e.dtype.kind == "f":
            rtol, atol = tol or TOL[e.dtype]
            wide = np.float64 if e.dtype == np.float64 else f32  # f64 beyond f32's range and digits
            np.testing.assert_allclose(g.astype(wide), e.astype(wide), rtol=rtol, atol=atol,
                                       equal_nan=True, err_msg=f"{op}-{opset} output {k}")
        else:
            np.testing.assert_array_equal(g, e, err_msg=f"{op}-{opset} output {k}")
    for a, c in zip(inputs, before):
        assert a is None or np.array_equal(a, c, equal_nan=a.dtype.kind == "f"), "input modified"


CASES = []


def case(op, opset, inputs, attrs=None, n_out=1, since=None, id=None, tol=None):
    since = opset if since is None else since
    CASES.append(pytest.param(op, opset, inputs, attrs, n_out, since, tol,
                              id=id or f"{op}-{opset}-{len(CASES)}"))


# ---- binary arithmetic -----------------------------------------------------------------------
for _op in ("Add", "Sub", "Mul", "Div"):
    for _v in (7, 13, 14):
        case(_op, _v, [R(3, 1, 4), R(2, 4, lo=0.5)])
    case(_op, 14, [R(2, 3, dtype=f16), R(3, dtype=f16, lo=0.5)])
    case(_op, 14, [R(4, 5, dtype=i32, lo=-50, hi=50), nonzero(5, dtype=i32)])
    case(_op, 13, [R(4, 5, dtype=i64, lo=-50, hi=50), nonzero(4, 1, dtype=i64)])
    case(_op, 14, [R(dtype=f32), R(dtype=f32, lo=0.5)], id=f"{_op}-scalars")
case("Div", 14, [A([7, -7, 7, -7, 0, 1, -1], i32), A([2, 2, -2, -2, 3, -3, 3], i32)], id="Div-int-trunc")
case("Div", 14, [A([1, 0, -1], f32), A([0, 0, 0], f32)], id="Div-float-by-zero")

case("Pow", 7, [R(2, 3, lo=0.1, hi=3), R(3, lo=-2, hi=2)])
case("Pow", 12, [R(2, 3, lo=-3, hi=3), A([2, 3, -1], i64)])
case("Pow", 13, [R(6, dtype=i32, lo=-5, hi=5), A([0, 1, 2, 3, 4, 5], i32)])
case("Pow", 15, [R(2, 3, dtype=f16, lo=0.1, hi=2), R(2, 3, dtype=f16, lo=-2, hi=2)])
case("Pow", 15, [A([94906267, 3037000500, 2**53 + 1, 3, -2], i64), A(2, i64)], id="Pow-int-square")
case("Pow", 15, [A([208063, 3, -2, 94906267], i64), A([3], i64)], id="Pow-int-cube")
case("Pow", 15, [A([94906267, 2**53 + 1, 3, 0], i64), A([2, 1, -1, -1], i64)], id="Pow-int-tensor")
case("Pow", 15, [A([41, -29, 41, 7, -3], i64), A([10, 11, 10, 22, 39], i64)], id="Pow-int-libm")  # ties at 2^53+
case("Pow", 15, [A([2, 3, -2, 4, 5], i32), A([0.5, 1.5, 2.7, 0.5, 2], f32)], id="Pow-int-float-exp")
case("Pow", 15, [R(2, 3, lo=-3, hi=3), A(2.0, f32)], id="Pow-f32-square")
case("Pow", 15, [R(5, lo=-3, hi=3), A([3.0], f32)], id="Pow-f32-cube")
case("Pow", 15, [R(5, dtype=i32, lo=-9, hi=9), A([[2]], i32)], id="Pow-square-broadcast")

for _op in ("Max", "Min"):
    case(_op, 8, [R(3, 1), R(1, 4), R(4)])
    case(_op, 12, [R(2, 3, dtype=i32, lo=-9, hi=9), R(3, dtype=i32, lo=-9, hi=9)])
    case(_op, 13, [R(2, 3, dtype=f16)])
    case(_op, 13, [R(2, 3, dtype=i64, lo=-9, hi=9), R(2, 1, dtype=i64, lo=-9, hi=9)])
    case(_op, 13, [A([np.nan, 1, 2], f32), A([0, np.nan, 1], f32)], id=f"{_op}-nan")
    case(_op, 6, [A([np.nan, 1, 2, -np.inf], f32), A([0, np.nan, 1, 3.4e38], f32), R(4)], id=f"{_op}-6")
    case(_op, 6, [R(2, 3, dtype=f16), R(2, 3, dtype=f16)], id=f"{_op}-6-f16")

case("Mod", 10, [R(3, 4, dtype=i32, lo=-30, hi=30), nonzero(4, dtype=i32, lo=-7, hi=7)])
case("Mod", 13, [R(3, 4, dtype=i64, lo=-30, hi=30), nonzero(4, dtype=i64, lo=-7, hi=7)], {"fmod": 1})
case("Mod", 13, [R(3, 4, lo=-9, hi=9), R(4, lo=0.5, hi=3) * A([1, -1, 1, -1], f32)], {"fmod": 1})
case("Mod", 13, [R(3, 4, dtype=f16, lo=-9, hi=9), R(4, dtype=f16, lo=0.5, hi=3)], {"fmod": 1})
case("Mod", 13, [A([7, -7, 7, -7], i32), A([2, 2, -2, -2], i32)], id="Mod-int-floor")
case("Mod", 13, [A([7, -7, 7, -7], i32), A([2, 2, -2, -2], i32)], {"fmod": 1}, id="Mod-int-c")

# ---- unary -----------------------------------------------------------------------------------
_UNARY = {  # op: (since-versions, input range)
    "Neg": ((6, 13), (-3, 3)), "Abs": ((6, 13), (-3, 3)), "Exp": ((6, 13), (-5, 5)),
    "Log": ((6, 13), (0.01, 10)), "Sqrt": ((6, 13), (0, 10)), "Reciprocal": ((6, 13), (0.1, 5)),
    "Relu": ((6, 13, 14), (-3, 3)), "Sigmoid": ((6, 13), (-20, 20)), "Tanh": ((6, 13), (-5, 5)),
    "Erf": ((9, 13), (-4, 4)), "Sin": ((7, 22), (-7, 7)), "Cos": ((7, 22), (-7, 7)),
    "Floor": ((6, 13), (-5, 5)), "Ceil": ((6, 13), (-5, 5)), "Round": ((11, 22), (-5, 5)),
    "Sign": ((9, 13), (-3, 3)), "Softplus": ((1, 22), (-30, 30)), "LeakyRelu": ((6, 16), (-3, 3)),
    "Elu": ((6, 22), (-5, 3)), "HardSigmoid": ((6, 22), (-5, 5)), "Gelu": ((20,), (-5, 5)),
}
for _op, (_vs, (_lo, _hi)) in _UNARY.items():
    for _v in _vs:
        case(_op, _v, [R(3, 17, lo=_lo, hi=_hi)])
    case(_op, _vs[-1], [R(4, 9, dtype=f16, lo=_lo, hi=_hi)], id=f"{_op}-f16")
    case(_op, _vs[-1], [R(lo=_lo, hi=_hi)], id=f"{_op}-scalar")
for _op in ("Neg", "Abs", "Sign", "Relu"):
    case(_op, _UNARY[_op][0][-1], [R(5, 6, dtype=i32, lo=-9, hi=9)], id=f"{_op}-i32")
    if _op != "Relu":  # ORT has no int64 Relu kernel (see test_relu_i64)
        case(_op, _UNARY[_op][0][-1], [R(5, 6, dtype=i64, lo=-9, hi=9)], id=f"{_op}-i64")
case("Round", 22, [A([0.5, 1.5, 2.5, -0.5, -2.5, 2.4999, -3.5], f32)], id="Round-half-even")
case("Sign", 13, [A([np.nan, -1, 2, 0.0, -0.0], f32)], id="Sign-zero-nan")
case("Erf", 13, [A([0.0, 1e-8, -1e-4, 0.3, 2.9, 3.0, 3.1, -5.0, 10.0], f32)], id="Erf-points")
case("LeakyRelu", 16, [R(3, 5, lo=-3, hi=3)], {"alpha": 0.25})
case("Elu", 22, [R(3, 5, lo=-3, hi=3)], {"alpha": 0.5})
case("HardSigmoid", 22, [R(3, 5, lo=-5, hi=5)], {"alpha": 0.3, "beta": 0.4})
case("Gelu", 20, [R(3, 17, lo=-5, hi=5)], {"approximate": "tanh"})
case("Gelu", 20, [R(3, 17, dtype=f16, lo=-5, hi=5)], {"approximate": "tanh"}, id="Gelu-tanh-f16")

# f64 where ONNX Runtime's CPU EP has double kernels, computed in f64. Its double sin and cos
# (Eigen's) are within 5e-16 absolute only, near their zeros.
_TOL64 = {"Sin": (1e-12, 1e-15), "Cos": (1e-12, 1e-15)}
for _op in ("Exp", "Log", "Sqrt", "Reciprocal", "Tanh", "Sin", "Cos", "Floor", "Ceil", "Round"):
    _vs, (_lo, _hi) = _UNARY[_op]
    for _v in _vs:
        case(_op, _v, [R64(3, 17, lo=_lo, hi=_hi)], id=f"{_op}-{_v}-f64", tol=_TOL64.get(_op))
    case(_op, _vs[-1], [R64(lo=_lo, hi=_hi)], id=f"{_op}-f64-scalar", tol=_TOL64.get(_op))
case("Exp", 13, [A([-745.0, -700.5, 0.0, 1e-300, 88.8, 300.25, 709.7, 710.0, np.inf, -np.inf, np.nan], np.float64)],
     id="Exp-f64-wide")
case("Log", 13, [A([5e-324, 1e-300, 1.0, 1e300, np.inf, 0.0, -1.0, np.nan], np.float64)], id="Log-f64-wide")
case("Round", 22, [A([0.5, 1.5, 2.5, -0.5, -2.5, 2.4999999999, 2 ** 52 + 0.5, -3.5], np.float64)],
     id="Round-f64-half-even")

case("Clip", 11, [R(4, 5, lo=-3, hi=3), A(-1.0, f32)])
_CLIP_SPECIAL = A([np.nan, -np.inf, np.inf, -5, 0.5, 7, 3.4e38, 1.0], f32)
for _attrs in ({"min": -1.0, "max": 2.0}, {}, {"min": 1.0}, {"max": 0.1}):  # Clip-6: bounds as attributes
    case("Clip", 6, [_CLIP_SPECIAL], _attrs, id=f"Clip-6-{'-'.join(_attrs) or 'defaults'}")
    with np.errstate(over="ignore"):
        case("Clip", 6, [_CLIP_SPECIAL.astype(f16)], _attrs, id=f"Clip-6-f16-{'-'.join(_attrs) or 'defaults'}")
case("Clip", 12, [R(4, 5, dtype=i32, lo=-9, hi=9), A(-2, i32), A(3, i32)])
case("Clip", 13, [R(4, 5, dtype=f16, lo=-3, hi=3), None, A(0.5, f16)])
case("Clip", 13, [R(4, 5, dtype=i64, lo=-9, hi=9)])
case("Clip", 13, [A([np.nan, 1, 2, -5, np.inf], f32), A(2.0, f32), A(1.5, f32)], id="Clip-min-gt-max")

# ---- comparisons and logic -------------------------------------------------------------------
_cmp_f = lambda *s: R(*s, lo=-3, hi=3).round()  # noqa: E731  (equal values occur)
case("Equal", 7, [R(3, 4, dtype=i32, lo=-2, hi=2), R(4, dtype=i32, lo=-2, hi=2)])
case("Equal", 11, [_cmp_f(3, 4), _cmp_f(3, 1)])
case("Equal", 13, [R(3, 4, dtype=b), R(4, dtype=b)])
case("Equal", 19, [R(3, 4, dtype=i64, lo=-2, hi=2), R(4, dtype=i64, lo=-2, hi=2)])
case("Equal", 19, [_cmp_f(3, 4).astype(f16), _cmp_f(4).astype(f16)], id="Equal-f16")
for _op, _vs in (("Less", (7, 9, 13)), ("Greater", (7, 9, 13)),
                 ("LessOrEqual", (12, 16)), ("GreaterOrEqual", (12, 16))):
    for _v in _vs:
        case(_op, _v, [_cmp_f(2, 3, 4), _cmp_f(4)])
    case(_op, _vs[-1], [R(3, 4, dtype=i32, lo=-2, hi=2), R(4, dtype=i32, lo=-2, hi=2)], id=f"{_op}-i32")
    case(_op, _vs[-1], [R(3, 4, dtype=i64, lo=-2, hi=2), R(3, 1, dtype=i64, lo=-2, hi=2)], id=f"{_op}-i64")
    case(_op, _vs[-1], [_cmp_f(3, 4).astype(f16), _cmp_f(4).astype(f16)], id=f"{_op}-f16")
case("Not", 1, [R(3, 4, dtype=b)])
for _op in ("And", "Or", "Xor"):
    case(_op, 7, [R(3, 4, dtype=b), R(4, dtype=b)])
case("Where", 9, [R(3, 4, dtype=b), R(3, 4), R(4)])
case("Where", 16, [R(4, dtype=b), R(3, 1, dtype=i64, lo=-9, hi=9), R(3, 4, dtype=i64, lo=-9, hi=9)])
case("Where", 16, [R(2, 1, dtype=b), R(2, 3, dtype=f16), R(dtype=f16)])
case("Where", 16, [R(2, 3, dtype=b), R(2, 3, dtype=i32, lo=-9, hi=9), R(3, dtype=i32, lo=-9, hi=9)])

# ---- Cast ------------------------------------------------------------------------------------
_CAST_TO = {f32: TensorProto.FLOAT, f16: TensorProto.FLOAT16, i32: TensorProto.INT32,
            i64: TensorProto.INT64, b: TensorProto.BOOL}
_CAST_SRC = {
    f32: A([0.0, -0.0, 1.5, -1.5, 2.7, -2.7, 1e5, -70000.5, 65519.0, 65520.0, 1e-8, 3.0], f32),
    f16: A([0.0, -0.0, 1.5, -1.5, 2.7, -2.7, 1000.0, -65504.0, 6e-8, 3.0], f16),
    i32: A([0, 1, -1, 2**31 - 1, -2**31, 65519, 65520, 2049, 16777217], i32),
    i64: A([0, 1, -1, 2**62 + 2**38 + 1, -2**40, 65519, 65520, 2**31, 2049, 16777217], i64),
    b: A([True, False, True], b),
}
for _src, _x in _CAST_SRC.items():
    for _dst, _to in _CAST_TO.items():
        case("Cast", 19, [_x], {"to": _to}, id=f"Cast-{np.dtype(_src)}-{np.dtype(_dst)}")
# Every integer width, both ways: values in range, wrapping integers, and (from floats) NaN, inf and
# values past the target's range, where numpy's astype and ORT's x86 kernels agree.
_WIDTHS = {np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8, np.int16: TensorProto.INT16,
           np.uint16: TensorProto.UINT16, np.uint32: TensorProto.UINT32, np.uint64: TensorProto.UINT64}
_FLOAT_SPECIALS = A([0.5, -0.5, 127.5, -128.5, 255.9, 300.7, -1.5, 65535.4, 7e4, -3e9, 4.3e9, 1e10, np.nan, np.inf,
                     -np.inf, -0.0], f32)
for _w, _to in _WIDTHS.items():
    _info = np.iinfo(_w)
    _own = A([0, 1, _info.max, _info.min, _info.max // 3, 100], _w)
    for _src, _x in [*_CAST_SRC.items(), (f32, _FLOAT_SPECIALS), (np.float64, _FLOAT_SPECIALS.astype(np.float64)),
                     (np.int8, A([-128, -1, 0, 1, 127], np.int8)), (np.uint64, A([0, 1, 2**64 - 1, 2**63, 300], np.uint64))]:
        if np.dtype(_src) != np.dtype(_w):
            case("Cast", 19, [_x], {"to": _to}, id=f"Cast-{np.dtype(_src)}-{np.dtype(_w)}-{_x.size}")
    for _dst, _to2 in {**_CAST_TO, np.float64: TensorProto.DOUBLE, np.int8: TensorProto.INT8}.items():
        if np.dtype(_dst) != np.dtype(_w):
            case("Cast", 13, [_own], {"to": _to2}, id=f"Cast-{np.dtype(_w)}-{np.dtype(_dst)}")
for _v in (6, 9, 13, 21, 23, 24, 25):
    case("Cast", _v, [R(3, 4, lo=-100, hi=100)], {"to": TensorProto.INT64})
case("Cast", 19, [A([np.nan, np.inf, -np.inf, 1e5], f32)], {"to": TensorProto.FLOAT16}, id="Cast-special-f16")
case("Cast", 19, [A([np.nan, np.inf, -np.inf, 0.0, -0.0], f32)], {"to": TensorProto.BOOL}, id="Cast-special-bool")
case("Cast", 25, [R(2, 3, dtype=f16)], {"to": TensorProto.FLOAT, "round_mode": "up"}, id="Cast-round-mode")

# ---- linear algebra --------------------------------------------------------------------------
case("MatMul", 1, [R(3, 4), R(4, 5)])
case("MatMul", 9, [R(2, 1, 3, 4), R(5, 4, 2)])
case("MatMul", 13, [R(4), R(2, 4, 3)], id="MatMul-1d-lhs")
case("MatMul", 13, [R(2, 3, 4), R(4)], id="MatMul-1d-rhs")
case("MatMul", 13, [R(4), R(4)], id="MatMul-1d-1d")
case("MatMul", 13, [R(2, 0, 4), R(4, 3)], id="MatMul-empty")
case("MatMul", 13, [R(2, 16, 64, dtype=f16), R(64, 8, dtype=f16)], tol=(4e-3, 2e-3), id="MatMul-f16")
case("MatMul", 13, [R(3, 4, dtype=i32, lo=-9, hi=9), R(2, 4, 5, dtype=i32, lo=-9, hi=9)])
case("MatMul", 13, [R(3, 4, dtype=i64, lo=-9, hi=9), R(4, 2, dtype=i64, lo=-9, hi=9)])
case("Gemm", 7, [R(3, 4), R(4, 5), R(3, 5)])
case("Gemm", 9, [R(3, 4), R(4, 5), R(5)], {"alpha": 0.5, "beta": 2.0})
case("Gemm", 11, [R(3, 4), R(4, 5)])
case("Gemm", 13, [R(4, 3), R(5, 4), R(3, 1)], {"transA": 1, "transB": 1, "alpha": 1.5, "beta": -0.5})
case("Gemm", 13, [R(3, 4), R(5, 4), R()], {"transB": 1})
case("Gemm", 13, [R(3, 4), R(4, 5), A(np.full((3, 5), np.nan), f32)], {"beta": 0.0}, id="Gemm-beta0")
case("Gemm", 13, [R(8, 64, dtype=f16), R(64, 4, dtype=f16), R(4, dtype=f16)], tol=(4e-3, 2e-3),
     id="Gemm-f16")

# ---- normalization ---------------------------------------------------------------------------
case("Softmax", 13, [R(2, 3, 5, lo=-5, hi=5)])
case("Softmax", 13, [R(2, 3, 5, lo=-5, hi=5)], {"axis": 1})
case("Softmax", 13, [R(2, 3, 5, lo=-5, hi=5)], {"axis": 0})
case("Softmax", 13, [R(4, 33, dtype=f16, lo=-5, hi=5)], id="Softmax-f16")
case("Softmax", 13, [A([[np.nan, -1, 2], [-np.inf, -np.inf, -np.inf], [1e30, 0, -1e30]], f32)], id="Softmax-special")
case("Softmax", 11, [R(4, 7, lo=-5, hi=5)])
case("Softmax", 11, [R(2, 3, 5, lo=-5, hi=5)], {"axis": -1})
case("Softmax", 1, [R(2, 3, 5, lo=-5, hi=5)], {"axis": 2})
case("LayerNormalization", 17, [R(2, 3, 8), R(8), R(8)], n_out=3)
case("LayerNormalization", 17, [R(2, 3, 8, lo=0, hi=4), R(3, 8)], {"axis": 1, "epsilon": 1e-3}, n_out=3)
case("LayerNormalization", 17, [R(4, 6), R(6), R(1)], {"axis": -1}, n_out=1)
case("LayerNormalization", 17, [R(2, 3, 4), R(3, 1), R(4)], {"axis": 1}, n_out=3)
case("LayerNormalization", 17, [R(3, 16, dtype=f16), R(16, dtype=f16), R(16, dtype=f16)], n_out=3,
     id="LayerNormalization-f16")

# ---- shape ops -------------------------------------------------------------------------------
for _v in (5, 13, 14, 19, 21, 23, 24, 25):
    case("Reshape", _v, [R(2, 3, 4), A([4, -1, 3], i64)])
case("Reshape", 14, [R(2, 3, 4), A([0, -1], i64)], id="Reshape-copy-dim")
case("Reshape", 14, [R(0, 3), A([3, 0], i64)], {"allowzero": 1}, id="Reshape-allowzero")
case("Reshape", 14, [R(0, 3), A([-1, 3], i64)], id="Reshape-empty-infer")
case("Reshape", 21, [R(2, 3, dtype=b), A([6], i64)])
case("Reshape", 21, [R(dtype=i64, lo=0, hi=9), A([1, 1], i64)], id="Reshape-scalar")
for _v in (1, 13, 21, 23, 24, 25):
    case("Transpose", _v, [R(2, 3, 4)])
    case("Transpose", _v, [R(2, 3, 4, dtype=i32)], {"perm": [1, 2, 0]})
case("Transpose", 25, [R(2, 3, dtype=f16)], {"perm": [1, 0]})
case("Transpose", 25, [R(2, 3, 2, dtype=b)], {"perm": [2, 0, 1]})
case("Concat", 4, [R(2, 3), R(2, 5)], {"axis": 1})
case("Concat", 11, [R(2, 3), R(4, 3), R(1, 3)], {"axis": -2})
case("Concat", 13, [R(2, 3, dtype=i64), R(2, 0, dtype=i64), R(2, 1, dtype=i64)], {"axis": 1})
case("Concat", 13, [R(3, dtype=b)], {"axis": 0})
case("Slice", 1, [R(5, 6, 7)], {"starts": [1, -4], "ends": [100, -1], "axes": [0, 2]})
case("Slice", 1, [R(5, 6)], {"starts": [1, 2], "ends": [3, 4]})
case("Slice", 10, [R(5, 6), A([1, 0], i64), A([4, 6], i64), A([0, 1], i64), A([2, 3], i64)])
case("Slice", 11, [R(5, 6), A([-1], i32), A([-100], i32), A([-2], i32), A([-2], i32)])
case("Slice", 13, [R(5, 6), A([2], i64), A([2**63 - 1], i64)])
case("Slice", 13, [R(5), A([-10], i64), A([-20], i64), A([0], i64), A([-1], i64)], id="Slice-neg-clamp")
case("Slice", 13, [R(5), A([10], i64), A([-2**63], i64), A([0], i64), A([-2], i64)], id="Slice-neg-step")
case("Slice", 13, [R(4, 5, dtype=f16), A([3, 4], i64), A([0, 0], i64), A([1, 0], i64), A([-1, -3], i64)])
case("Split", 11, [R(6, 4)], {"split": [1, 2, 3]}, n_out=3)
case("Split", 2, [R(2, 6)], {"axis": 1, "split": [4, 2]}, n_out=2)
case("Split", 2, [R(6, 4)], n_out=3, id="Split-2-even")
case("Split", 11, [R(2, 6)], {"axis": -1, "split": [4, 2]}, n_out=2)
case("Split", 13, [R(6, 4, dtype=i64), A([2, 0, 4], i64)], n_out=3)
case("Split", 18, [R(7, 2)], {"num_outputs": 3}, n_out=3)
case("Split", 11, [R(6, 4)], n_out=2, id="Split-11-even")
case("Split", 13, [R(2, 9, dtype=i32)], {"axis": -1}, n_out=3, id="Split-13-even")
case("Split", 18, [R(2, 8, dtype=f16)], {"axis": 1, "num_outputs": 2}, n_out=2)
case("Split", 18, [R(2, 5, dtype=b), A([3, 2], i64)], {"axis": 1}, n_out=2)
case("Gather", 1, [R(5, 3), A([0, 4, 2], i64)])
case("Gather", 11, [R(5, 3), A([[-1, 0], [-5, 4]], i64)])
case("Gather", 13, [R(3, 5, dtype=i32), A([[1, -1]], i32)], {"axis": 1})
case("Gather", 13, [R(3, 5, dtype=f16), A(2, i64)], {"axis": -1})
case("Gather", 13, [R(3, 5, dtype=b), A([], i64)], {"axis": 0})
for _v in (1, 13, 19, 21, 23, 24, 25):
    case("Shape", _v, [R(2, 3, 4)])
case("Shape", 15, [R(2, 3, 4)], {"start": 1})
case("Shape", 15, [R(2, 3, 4)], {"start": -10, "end": 10})
case("Shape", 19, [R(2, 3, 4, dtype=b)], {"start": -2, "end": -1})
case("Shape", 21, [R(2, 3, 4, dtype=i32)], {"start": 2, "end": 1})
case("Shape", 25, [R(dtype=f16)])
case("Squeeze", 1, [R(1, 3, 1, 2)], {"axes": [0, 2]})
case("Squeeze", 11, [R(1, 3, 1, 2)], {"axes": [-2]})
case("Squeeze", 11, [R(1, 3, 1, 2)])
case("Squeeze", 13, [R(1, 3, 1, 2, dtype=i64), A([0, -2], i64)])
case("Squeeze", 13, [R(1, 1, dtype=b)])
for _v in (21, 23, 24, 25):
    case("Squeeze", _v, [R(3, 1, dtype=f16), A([1], i64)])
case("Unsqueeze", 1, [R(3, 4)], {"axes": [0, 3]})
case("Unsqueeze", 11, [R(3, 4)], {"axes": [-1, 1]})
case("Unsqueeze", 13, [R(3, 4, dtype=i32), A([-1, 0], i64)])
case("Unsqueeze", 13, [R(dtype=f32), A([0], i64)], id="Unsqueeze-scalar")
for _v in (21, 23, 24, 25):
    case("Unsqueeze", _v, [R(3, dtype=b), A([1], i64)])
for _v in (1, 9, 11, 12, 13, 19, 21, 23, 24, 25):
    case("Constant", _v, [], {"value": helper.make_tensor("v", TensorProto.FLOAT, [2, 2], [1, 2, 3, 4])})
case("Constant", 13, [], {"value": helper.make_tensor("v", TensorProto.INT64, [], [7])}, id="Constant-0d")
case("Constant", 13, [], {"value": helper.make_tensor("v", TensorProto.FLOAT16, [2], [1.5, -2.0])}, id="Constant-f16")
case("Constant", 13, [], {"value": helper.make_tensor("v", TensorProto.BOOL, [3], [1, 0, 1])}, id="Constant-bool")
case("Constant", 12, [], {"value_float": 2.5})
case("Constant", 12, [], {"value_floats": [2.5, -1.0]})
case("Constant", 13, [], {"value_int": -3})
case("Constant", 19, [], {"value_ints": [1, 2, 3]})
for _v in (1, 13, 14, 16, 19, 21, 23, 24, 25):
    case("Identity", _v, [R(2, 3)])
case("Identity", 25, [R(2, 3, dtype=b)])
case("Identity", 25, [R(dtype=i64, lo=0, hi=5)])
case("Expand", 8, [R(3, 1), A([2, 1, 4], i64)])
case("Expand", 13, [R(3, 1, dtype=i32), A([3], i64)])
case("Expand", 13, [R(1, 4, dtype=b), A([2, 1], i64)])
case("Expand", 13, [R(dtype=f16), A([2, 2], i64)])

# ---- reductions ------------------------------------------------------------------------------
_RED = {"ReduceSum": 13, "ReduceMean": 18, "ReduceMax": 18, "ReduceMin": 18}
_RED_V = {"ReduceSum": (1, 11, 13), "ReduceMean": (1, 11, 13, 18),
          "ReduceMax": (1, 11, 12, 13, 18, 20), "ReduceMin": (1, 11, 12, 13, 18, 20)}
for _op, _iv in _RED.items():
    for _v in _RED_V[_op]:
        if _v < _iv:
            case(_op, _v, [R(2, 3, 4)], {"axes": [0, 2] if _v == 1 else [-1, 0], "keepdims": 0})
            case(_op, _v, [R(2, 3, 4)])
        else:
            case(_op, _v, [R(2, 3, 4), A([-1, 0], i64)], {"keepdims": 0})
            case(_op, _v, [R(2, 3, 4)], {"keepdims": 1})
    case(_op, _iv, [R(2, 3, 4), A([], i64)], id=f"{_op}-empty-axes")
    case(_op, _iv, [R(2, 3, 4), A([], i64)], {"noop_with_empty_axes": 1}, id=f"{_op}-noop")
    case(_op, _iv, [R(2, 3, 4)], {"noop_with_empty_axes": 1}, id=f"{_op}-noop-no-axes")
    case(_op, _iv, [R(4, 33, dtype=f16), A([1], i64)], id=f"{_op}-f16")
    case(_op, _iv, [R(4, 5, dtype=i32, lo=-50, hi=50), A([1], i64)], id=f"{_op}-i32")
    case(_op, _iv, [R(4, 5, dtype=i64, lo=-50, hi=50), A([0], i64)], {"keepdims": 0}, id=f"{_op}-i64")
    case(_op, _iv, [R(0, 3), A([0], i64)], id=f"{_op}-empty")
    case(_op, _iv, [R(dtype=f32)], id=f"{_op}-scalar")
case("ReduceMean", 18, [A([[1, 2], [-3, -2], [-7, 0]], i32), A([1], i64)], id="ReduceMean-int-trunc")
case("ReduceMax", 20, [R(3, 4, dtype=b), A([1], i64)])
case("ReduceMin", 20, [R(3, 4, dtype=b), A([0], i64)], {"keepdims": 0})
case("ReduceMin", 20, [R(0, 4, dtype=i32), A([0], i64)], id="ReduceMin-int-empty")
# f64 accumulates in f64 (ONNX Runtime's double kernels); the wide cases are beyond f32's range
# and its 24 bits (2^30 + 3 is exact in f64 whatever the order, not in f32).
_WIDE = A([[2.0 ** 30, 1.0, 1.0, 1.0], [1e300, 1e300, -1e300, 2.5], [-np.inf, -5e-324, 1e-300, 7.0]], np.float64)
for _op, _iv in _RED.items():
    for _v in _RED_V[_op]:
        if _v < _iv:
            case(_op, _v, [R64(2, 3, 4)], {"axes": [0, 2] if _v == 1 else [-1, 0], "keepdims": 0},
                 id=f"{_op}-{_v}-f64")
        else:
            case(_op, _v, [R64(2, 3, 4), A([-1, 0], i64)], {"keepdims": 0}, id=f"{_op}-{_v}-f64")
    case(_op, _iv, [R64(3, 70), A([1], i64)], id=f"{_op}-f64-rows")
    case(_op, _iv, [R64(2, 3, 4)], id=f"{_op}-f64-all")
    case(_op, _iv, [_WIDE, A([1], i64)], id=f"{_op}-f64-wide")
    case(_op, _iv, [R64(0, 3), A([0], i64)], id=f"{_op}-f64-empty")


@pytest.mark.parametrize("op,opset,inputs,attrs,n_out,since,tol", CASES)
def test_matches_ort(op, opset, inputs, attrs, n_out, since, tol):
    check(op, opset, inputs, attrs, n_out, since, tol)


# Other files whose CASES (same param layout: op first, since-version sixth) count as ORT
# comparisons for the coverage guard.
COVERAGE_MODULES = ("test_ops_vision_conv_pool.py", "test_ops_vision_resize_blocks.py", "test_ops_vision_indexing.py",
                    "test_ops_vision_quantize.py", "test_ops_vision_movement.py", "test_ops_more.py",
                    "test_ops_attention.py", "test_ops_contrib.py", "test_ops_linear_attention.py",
                    "test_ops_grid_sample.py", "test_deform_conv.py")


def _cases_of(filename):
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).with_name(filename)
    if not path.exists():
        return []
    spec = importlib.util.spec_from_file_location(f"_hipep_coverage_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if hasattr(mod, "COVERED"):  # (op_type, since_version) pairs, for files whose cases differ in shape
        return [pytest.param(op, None, None, None, None, since) for op, since in mod.COVERED]
    return list(mod.CASES)


def test_every_registered_op_is_covered():
    from hipep.ops import all_ops

    cases = CASES + [p for name in COVERAGE_MODULES for p in _cases_of(name)]
    covered = {(p.values[0], p.values[5]) for p in cases}
    # Loop and If run as plan control flow (tests/ort and tests/unit/test_runtime_*), not as kernels;
    # hipep-domain ops are made by the compiler (tests/unit/test_fusion.py checks them).
    missing = [(op.op_type, v) for op in all_ops() if not op.control_flow and op.domain != "hipep"
               for v in op.since_versions
               if (op.op_type, v) not in covered and v <= 26]  # ORT 1.31 runs opsets <= 26
    assert not missing, f"since-versions without an ORT comparison: {missing}"


# ---- opsets beyond what ORT runs: checked against the ONNX spec directly -------------------

def _ref(op, opset, inputs, attrs=None, n_out=1, out_dtypes=None):
    model = build(op, opset, inputs, attrs, n_out, out_dtypes or [inputs[0].dtype] * n_out)
    node, graph, got = run_reference(model, inputs)
    assert check_node(node, graph) is None, check_node(node, graph)
    return got


def test_mod_28_float_floor_semantics():
    x = A([5.5, -5.5, 5.5, -5.5, 0.0, -0.0, np.inf, 1.0, -1.0, 3.0], f32)
    y = A([2.0, 2.0, -2.0, -2.0, -3.0, 3.0, 2.0, np.inf, np.inf, 0.0], f32)
    (got,) = _ref("Mod", 28, [x, y])
    want = A([1.5, 0.5, -0.5, -1.5, -0.0, 0.0, np.nan, 1.0, np.inf, np.nan], f32)
    np.testing.assert_array_equal(got, want)
    assert np.signbit(got[4]) and not np.signbit(got[5])
    (got,) = _ref("Mod", 28, [x.astype(f16), y.astype(f16)], {"fmod": 1})
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(got, np.fmod(x, y).astype(f16))


def test_cast_28():
    (got,) = _ref("Cast", 28, [A([1.7, -1.7, 3e9], f32)], {"to": TensorProto.INT64}, out_dtypes=[i64])
    np.testing.assert_array_equal(got, A([1, -1, 3000000000], i64))


def test_where_bool_values():  # ORT has no bool Where kernel; the spec is plain selection
    c, x, y = R(2, 3, dtype=b), R(2, 3, dtype=b), R(3, dtype=b)
    (got,) = _ref("Where", 16, [c, x, y], out_dtypes=[b])
    np.testing.assert_array_equal(got, np.where(c, x, y))
    assert got.dtype == b


def test_relu_i64():  # spec-allowed since Relu-14; ORT has no int64 kernel to compare with
    x = R(4, 5, dtype=i64, lo=-9, hi=9)
    (got,) = _ref("Relu", 14, [x])
    np.testing.assert_array_equal(got, np.maximum(x, 0))
    assert got.dtype == i64


def test_cast_saturate_is_irrelevant_for_non_float8():
    # ORT refuses saturate on non-float8 targets at load time; ONNX says it only affects float8.
    x = A([np.nan, np.inf, 1e5, 1.5], f32)
    for sat in (0, 1):
        (got,) = _ref("Cast", 19, [x], {"to": TensorProto.FLOAT16, "saturate": sat}, out_dtypes=[f16])
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(got, x.astype(f16))


def test_reduce_bool_empty_follows_spec():
    # ONNX 20: an empty max is the type's minimum (false), an empty min its maximum (true).
    # (ORT's CPU EP errors out on these instead.)
    x = np.zeros((0, 3), dtype=b)
    (mx,) = _ref("ReduceMax", 20, [x, A([0], i64)])
    (mn,) = _ref("ReduceMin", 20, [x, A([0], i64)], {"keepdims": 0})
    assert mx.shape == (1, 3) and mx.dtype == b and not mx.any()
    assert mn.shape == (3,) and mn.dtype == b and mn.all()


def test_erf_accuracy():
    import math

    x = np.concatenate([np.linspace(-6, 6, 2001), [1e-10, -1e-300, 2.9999999, 3.0]])
    want = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(erf(x), want, rtol=2e-12, atol=1e-15)


# ---- run-time errors: RuntimeShapeError with expected vs got -------------------------------

def ref(op):
    o = lookup("", op)
    return lambda inputs, **attrs: o.reference(inputs, {**{k: v for k, v in o.attributes.items()
                                                           if v is not None}, **attrs})


def test_matmul_inner_dims_message():
    with pytest.raises(RuntimeShapeError) as e:
        ref("MatMul")([R(2, 3), R(4, 5)])
    assert str(e.value) == ("MatMul: inner dimensions disagree: A is [2, 3], B is [4, 5] "
                            "(A's last dim 3 != B's second-to-last dim 4)")


ERRORS = [
    ("MatMul", [R(2, 3, 4), R(5, 4, 2)], {}, r"batch dimensions cannot be broadcast: A is \[2, 3, 4\]"),
    ("MatMul", [R(3), R(4)], {}, r"A is \[3\], B is \[4\]"),
    ("MatMul", [R(), R(3)], {}, r"rank >= 1"),
    ("Gemm", [R(2, 3), R(4, 5)], {}, r"inner dimensions disagree: A is \[2, 3\].*B is \[4, 5\]"),
    ("Gemm", [R(3, 2), R(4, 5)], {"transA": 1}, r"K from A is 3, K from B is 4"),
    ("Gemm", [R(2, 3), R(3, 5), R(3, 5)], {}, r"C of shape \[3, 5\] cannot be broadcast to the output shape \[2, 5\]"),
    ("Gemm", [R(2, 3, 1), R(3, 5)], {}, r"must be 2-D: A is \[2, 3, 1\]"),
    ("Add", [R(2, 3), R(4)], {}, r"cannot be broadcast.*A is \[2, 3\], B is \[4\].*extents 3, 4"),
    ("Where", [R(2, 3, dtype=b), R(2, 3), R(2)], {}, r"condition is \[2, 3\], X is \[2, 3\], Y is \[2\]"),
    ("Max", [R(2), R(3), R(2)], {}, r"input 1 is \[3\]"),
    ("Div", [A([1, 2], i32), A([1, 0], i32)], {}, r"integer division by zero"),
    ("Mod", [A([1, 2], i64), A([0, 0], i64)], {"fmod": 1}, r"integer division by zero"),
    ("Clip", [R(3), R(2), None], {}, r"'min' must be a scalar.*\[2\]"),
    ("Reshape", [R(2, 3), A([4, -1], i64)], {}, r"shape \[2, 3\] \(6 elements\) to \[4, -1\]"),
    ("Reshape", [R(2, 3), A([5], i64)], {}, r"to \[5\]: the target has 5 elements"),
    ("Reshape", [R(2, 3), A([-1, -1], i64)], {}, r"more than one -1"),
    ("Reshape", [R(6), A([2, 0], i64)], {}, r"copies input dim 1, but the input has rank 1"),
    ("Reshape", [R(0, 3), A([0, -1], i64)], {"allowzero": 1}, r"both 0 and -1"),
    ("Transpose", [R(2, 3)], {"perm": [0, 0]}, r"perm=\[0, 0\] is not a permutation"),
    ("Concat", [R(2, 3), R(2, 3, 1)], {"axis": 0}, r"same rank: input 0 is \[2, 3\], input 1 is \[2, 3, 1\]"),
    ("Concat", [R(2, 3), R(2, 4)], {"axis": 0}, r"input 1 has shape \[2, 4\] but input 0 has \[2, 3\].*dim 1: 4 != 3"),
    ("Concat", [R(2, 3)], {"axis": 2}, r"axis 2 is out of range for a rank-2 input"),
    ("Slice", [R(5), A([0], i64), A([3], i64), A([0], i64), A([0], i64)], {}, r"step for axis 0 is 0"),
    ("Slice", [R(5), A([0, 1], i64), A([3], i64)], {}, r"same length"),
    ("Slice", [R(5), A([0, 1], i64), A([3, 3], i64), A([0, -1], i64)], {}, r"repeat an axis"),
    ("Split", [R(6, 2), A([2, 3], i64)], {}, r"split sizes \[2, 3\] must be non-negative and sum to the extent 6"),
    ("Split", [R(6, 2)], {"split": [4, 4]}, r"sum 8"),
    ("Split", [R(5)], {"num_outputs": 4}, r"num_outputs=4 cannot split axis 0 of extent 5"),
    ("Split", [R(5)], {"_num_outputs": 2}, r"axis 0 of extent 5 \(input is \[5\]\) cannot be split evenly into 2"),
    ("Gather", [R(5, 3), A([0, 5], i64)], {},
     r"index 5 is out of range for axis 0 of extent 5 \(data is \[5, 3\]; valid indices are -5..4\)"),
    ("Gather", [R(5, 3), A([-4], i32)], {"axis": 1}, r"index -4 is out of range for axis 1 of extent 3"),
    ("Squeeze", [R(2, 3), A([1], i64)], {}, r"axis 1 has extent 3, not 1 \(input is \[2, 3\]\)"),
    ("Unsqueeze", [R(2, 3), A([3, 3], i64)], {}, r"repeat an axis"),
    ("Unsqueeze", [R(2, 3), A([5], i64)], {}, r"axis 5 is out of range for a rank-3 input"),
    ("Expand", [R(2, 3), A([4, 1], i64)], {}, r"input of shape \[2, 3\] cannot be broadcast with shape \[4, 1\]"),
    ("Expand", [R(3), A([-2], i64)], {}, r"cannot be broadcast"),
    ("Softmax", [R(2, 3)], {"axis": 2}, r"axis 2 is out of range for a rank-2 input"),
    ("LayerNormalization", [R(2, 3), R(2)], {}, r"Scale of shape \[2\] cannot be broadcast to X's shape \[2, 3\]"),
    ("LayerNormalization", [R(2, 3), R(3), R(4)], {}, r"B of shape \[4\]"),
    ("ReduceSum", [R(2, 3), A([2], i64)], {}, r"axis 2 is out of range for a rank-2 input"),
    ("ReduceMax", [R(2, 3), A([1, -1], i64)], {}, r"repeat an axis"),
    ("ReduceMean", [R(2, 3), A([[0]], i64)], {}, r"'axes' must be a 1-D tensor"),
]


@pytest.mark.parametrize("op,inputs,attrs,pattern", ERRORS,
                         ids=[f"{e[0]}-{i}" for i, e in enumerate(ERRORS)])
def test_runtime_shape_errors(op, inputs, attrs, pattern):
    with pytest.raises(RuntimeShapeError, match=pattern) as e:
        ref(op)(inputs, **attrs)
    assert str(e.value).startswith(f"{op}: ")


def test_outputs_are_0d_arrays_not_scalars():
    for op, inputs, dtype in (("Add", [A(1, f32), A(2, f32)], f32), ("Exp", [A(1, f16)], f16),
                              ("Sign", [R(dtype=i64)], i64), ("Equal", [A(1, i64), A(1, i64)], b),
                              ("Gelu", [A(0.5, f16)], f16), ("Relu", [A(-3, i32)], i32)):
        (out, *_) = ref(op)(inputs)
        assert type(out) is np.ndarray and out.ndim == 0 and out.dtype == dtype, (op, out)
