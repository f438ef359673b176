"""Pointwise expressions (hipep.ops.pointwise): the evaluator against the references the
elementwise ops had before they were expressions, the plain-data form, and the HIP source.

The legacy kernels below are the elementwise references as they were written op by op; each
registry reference, now the evaluation of its op's expression, must equal them bit for bit on
special values (signed zeros, infinities, NaN, f16 overflow, integer extremes).
"""
from __future__ import annotations

import json
import math
import shutil
import subprocess

import numpy as np
import pytest

from hipep.errors import RuntimeShapeError
from hipep.ops import lookup
from hipep.ops.elementwise import FUSED_DOMAIN, FUSED_ELEMENTWISE, erf, mlas_logistic, mlas_tanh
from hipep.ops.pointwise import (PRIMITIVES, Builder, Expr, Operand, check, const_text, const_value,
                                 trunc_div)
from hipep.ops.pointwise_hip import render_hip_kernel
from hipep.ops.registry import OUTPUT_COUNT, REQUIRED, SINCE_VERSION

f16, f32, f64, i32, i64 = np.float16, np.float32, np.float64, np.int32, np.int64

SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 3.0, -3.0, np.nan, np.inf, -np.inf, 1e-8, -1e-8, 65504.0,
           70000.0, 1e5, -1e5, 88.7, -88.7, 20.0, -20.0, 9.0, -9.0, 18.5, 1e-40, 0.1, 2.5, -2.5, 1.5, 1e30, -1e30,
           3.4e38, 0.044715, 6.0, -6.0]


def floats(dtype):
    rng = np.random.default_rng(7)
    with np.errstate(all="ignore"):
        return np.array(SPECIAL + list(rng.standard_normal(24) * 4), np.float64).astype(dtype)


def ints(dtype):
    info = np.iinfo(dtype)
    return np.array([0, 1, -1, 2, -2, 3, 7, -7, 100, -100, 12345, -54321, info.max, info.min], dtype)


def values(dtype):
    return floats(dtype) if np.dtype(dtype).kind == "f" else ints(dtype)


def ref(op_type, inputs, **attrs):
    op = lookup("", op_type)
    resolved = {k: v for k, v in op.attributes.items() if v is not REQUIRED}
    resolved.update(attrs)
    resolved[OUTPUT_COUNT], resolved[SINCE_VERSION] = 1, op.since_versions[-1]
    return op.reference(list(inputs), resolved)[0]


def same_bits(got, want):
    want = np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    assert got.flags.c_contiguous
    assert got.tobytes() == np.ascontiguousarray(want).tobytes(), (got, want)


# ---- the legacy kernels ------------------------------------------------------------------------

def up(a):
    return a.astype(f32) if a.dtype == f16 else a


def legacy_binary(fn, int_fn=None):
    def run(a, b):
        if a.dtype.kind == "f":
            return np.asarray(fn(up(a), up(b))).astype(a.dtype)
        return np.asarray((int_fn or fn)(a, b)).astype(a.dtype)
    return run


def legacy_unary(fn, wide=False, f32_fn=None):
    def run(x):
        if f32_fn is not None and x.dtype == f32:
            return np.asarray(f32_fn(x), f32)
        if x.dtype.kind == "f":
            if not wide:
                return np.asarray(fn(up(x))).astype(x.dtype)
            return np.asarray(fn(x.astype(f64))).astype(f32).astype(x.dtype)
        return np.asarray(fn(x)).astype(x.dtype)
    return run


def legacy_pow(x, y):
    if y.size == 1 and float(y.reshape(-1)[0]) in (2.0, 3.0):
        xs = up(x)
        r = xs * xs if float(y.reshape(-1)[0]) == 2.0 else xs * xs * xs
        return np.broadcast_to(r, np.broadcast_shapes(x.shape, y.shape)).astype(x.dtype)
    if x.dtype.kind == "i":
        return legacy_int_pow(x, y)
    if (f32 if x.dtype == f16 else x.dtype) == (f32 if y.dtype == f16 else y.dtype):
        return np.power(up(x), up(y)).astype(x.dtype)
    return np.power(x.astype(f64), y.astype(f64)).astype(x.dtype)


def legacy_int_pow(x, y):
    """Integer Pow's kernel before it was an expression: C's pow in double, element by element
    (math.pow), truncated; NaN and out of range the type's minimum, as x86 converts."""
    xb, yb = np.broadcast_arrays(x.astype(f64), y.astype(f64))
    out = np.empty(xb.shape, x.dtype)
    info = np.iinfo(x.dtype)
    for k, (a, e) in enumerate(zip(xb.reshape(-1), yb.reshape(-1))):
        try:
            r = math.pow(a, e)
        except OverflowError:
            r = math.inf
        except ValueError:
            r = math.inf if a == 0 else math.nan
        in_range = math.isfinite(r) and info.min <= math.trunc(r) <= info.max
        out.reshape(-1)[k] = math.trunc(r) if in_range else info.min
    return out


def legacy_gelu_tanh_f32(x):
    c, b = f32(0.035677408136300125), f32(0.7978845608028654)
    t = (x * ((((c * x).astype(f32) * x).astype(f32) + b).astype(f32))).astype(f32)
    return ((f32(0.5) * x).astype(f32) * (mlas_tanh(t) + f32(1.0)).astype(f32)).astype(f32)


def legacy_sign_f16(x):
    # ORT's f16 Sign is (x > 0) - (x < 0): NaN gives 0 there
    return np.where(np.isnan(x), f16(0), np.sign(x)).astype(f16)


def legacy_clip_max(a, hi):
    # an omitted min is the type's lowest finite value (ORT's numeric_limits::lowest)
    if a.dtype.kind == "f":
        a = np.maximum(a, np.finfo(a.dtype).min)
    return np.minimum(a, hi)


def legacy_cast(x, to):
    if to == f16 and x.dtype.kind in "iub":
        return x.astype(f32).astype(f16)
    return x.astype(to)


UNARY = {
    "Neg": (legacy_unary(np.negative), (f32, f16, i32, i64)),
    "Abs": (legacy_unary(np.abs), (f32, f16, i32, i64)),
    "Relu": (legacy_unary(lambda x: np.maximum(x, x.dtype.type(0))), (f32, f16, i32, i64)),
    "Sign": (lambda x: legacy_sign_f16(x) if x.dtype == f16 else legacy_unary(np.sign)(x), (f32, f16, i32, i64)),
    "Exp": (legacy_unary(np.exp), (f32, f16)),
    "Log": (legacy_unary(np.log), (f32, f16)),
    "Sqrt": (legacy_unary(np.sqrt), (f32, f16)),
    "Reciprocal": (legacy_unary(np.reciprocal), (f32, f16)),
    "Floor": (legacy_unary(np.floor), (f32, f16)),
    "Round": (legacy_unary(np.rint), (f32, f16)),
    "Sin": (legacy_unary(np.sin), (f32, f16)),
    "Sigmoid": (legacy_unary(lambda x: 1.0 / (1.0 + np.exp(-x)), wide=True, f32_fn=mlas_logistic), (f32, f16)),
    "Tanh": (legacy_unary(np.tanh, f32_fn=mlas_tanh), (f32, f16)),
    "Erf": (legacy_unary(erf, wide=True), (f32, f16)),
    "Softplus": (legacy_unary(lambda x: np.logaddexp(0.0, x), wide=True), (f32, f16)),
    "Atanh": (legacy_unary(np.arctanh, wide=True), (f32, f16)),
    "Softsign": (legacy_unary(lambda x: x / (1.0 + np.abs(x))), (f32, f16)),
}


@pytest.mark.parametrize("op_type", sorted(UNARY))
def test_unary_references_equal_the_legacy_kernels(op_type):
    legacy, dtypes = UNARY[op_type]
    for dtype in dtypes:
        x = values(dtype)
        with np.errstate(all="ignore"):
            same_bits(ref(op_type, [x]), legacy(x))


def test_activations_with_attributes_equal_the_legacy_kernels():
    for dtype in (f32, f16):
        x = floats(dtype)
        xs = up(x)
        with np.errstate(all="ignore"):
            same_bits(ref("LeakyRelu", [x], alpha=0.1), np.where(xs >= 0, xs, f32(0.1) * xs).astype(dtype))
            same_bits(ref("HardSigmoid", [x], alpha=0.3, beta=0.6),
                      np.minimum(np.maximum(f32(0.3) * xs + f32(0.6), 0), 1).astype(dtype))
            xd = x.astype(f64)
            same_bits(ref("Elu", [x], alpha=0.5), np.where(xd >= 0, xd, 0.5 * np.expm1(xd)).astype(f32).astype(dtype))
            gelu = 0.5 * xd * (1.0 + erf(xd / np.sqrt(2.0)))
            same_bits(ref("Gelu", [x], approximate="none"), gelu.astype(f32).astype(dtype))
            if dtype == f32:
                same_bits(ref("Gelu", [x], approximate="tanh"), legacy_gelu_tanh_f32(x))
            else:
                tanh = 0.5 * xd * (1.0 + np.tanh(0.7978845608028654 * (xd + 0.044715 * xd * xd * xd)))
                same_bits(ref("Gelu", [x], approximate="tanh"), tanh.astype(f32).astype(dtype))


BINARY = {
    "Add": legacy_binary(np.add), "Sub": legacy_binary(np.subtract), "Mul": legacy_binary(np.multiply),
    "Div": legacy_binary(np.divide, trunc_div),
    "Max": legacy_binary(np.maximum), "Min": legacy_binary(np.minimum),
}


@pytest.mark.parametrize("op_type", sorted(BINARY))
@pytest.mark.parametrize("dtype", [f32, f16, i32, i64])
def test_binary_references_equal_the_legacy_kernels(op_type, dtype):
    a, b = values(dtype), values(dtype)
    if op_type == "Div" and np.dtype(dtype).kind == "i":
        b = b[b != 0]
    legacy = BINARY[op_type]
    if op_type in ("Max", "Min"):  # no widening: exact in every type
        legacy = {"Max": np.maximum, "Min": np.minimum}[op_type]
    with np.errstate(all="ignore"):
        same_bits(ref(op_type, [a[:, None], b[None, :]]), legacy(a[:, None], b[None, :]))


@pytest.mark.parametrize("xt", [f32, f16, i32, i64])
@pytest.mark.parametrize("yt", [f32, f16, i32, i64])
def test_pow_equals_the_legacy_kernel(xt, yt):
    x = values(xt)
    exponents = [np.array(2, yt), np.array([[3]], yt), np.array(-1, yt)]
    if np.dtype(xt).kind == "f":
        exponents.append(values(yt)[None, :])
    if np.dtype(xt).kind == "i":  # small exponents, and ones past the type (its minimum)
        exponents.append(np.array([0, 1, 2, 5, 31, 62, 63, -1, -2], yt)[None, :])
    for y in exponents:
        xx = x[:, None] if y.size > 1 else x
        with np.errstate(all="ignore"):
            same_bits(ref("Pow", [xx, y]), legacy_pow(xx, y))


def test_mod_clip_compare_where_cast_sum_equal_the_legacy_kernels():
    with np.errstate(all="ignore"):
        for dtype in (f32, f16, i32, i64):
            a, b = values(dtype), values(dtype)
            if np.dtype(dtype).kind == "i":
                b = b[b != 0]
            for fmod in (0, 1):
                fn = np.fmod if fmod else np.mod
                same_bits(ref("Mod", [a[:, None], b[None, :]], fmod=fmod), legacy_binary(fn)(a[:, None], b[None, :]))
            lo, hi = np.array(values(dtype)[3], dtype), np.array(values(dtype)[6], dtype)
            same_bits(ref("Clip", [a, lo, hi]), np.minimum(np.maximum(a, lo), hi))
            same_bits(ref("Clip", [a, None, hi]), legacy_clip_max(a, hi))
            for op_type, fn in (("Equal", np.equal), ("Less", np.less), ("GreaterOrEqual", np.greater_equal)):
                same_bits(ref(op_type, [a[:, None], a[None, :]]), fn(a[:, None], a[None, :]))
            c = np.random.default_rng(3).random((2, 1, a.size)) < 0.5
            same_bits(ref("Where", [c, a[:3, None], a[None, :]]), np.where(c, a[:3, None], a[None, :]))
            for to, elem in ((f32, 1), (f16, 10), (i32, 6), (i64, 7), (np.bool_, 9)):
                same_bits(ref("Cast", [a], to=elem), legacy_cast(a, to))
        for dtype in (f32, f16):
            x = floats(dtype)
            acc = up(x)[:, None, None] + up(x)[None, :, None] + up(x)[None, None, :5]
            same_bits(ref("Sum", [x[:, None, None], x[None, :, None], x[None, None, :5]]), acc.astype(dtype))
            same_bits(ref("Mean", [x[:, None], x[None, :]]),
                      ((up(x)[:, None] + up(x)[None, :]) * f32(0.5)).astype(dtype))


def test_errors_keep_their_words():
    with pytest.raises(RuntimeShapeError, match=r"^Div: integer division by zero \(divisor B has 1 zero"):
        ref("Div", [np.array([1, 2], i32), np.array([1, 0], i32)])
    with pytest.raises(RuntimeShapeError, match=r"^Clip: 'min' must be a scalar \(one element\), got shape \[2\]"):
        ref("Clip", [floats(f32), floats(f32)[:2], None])
    with pytest.raises(RuntimeShapeError, match=r"^Where: shapes cannot be broadcast together: condition is \[2, 3\], "
                                                r"X is \[2, 3\], Y is \[2\]"):
        ref("Where", [np.zeros((2, 3), bool), np.zeros((2, 3), f32), np.zeros(2, f32)])
    with pytest.raises(RuntimeShapeError, match=r"^Pow: shapes cannot be broadcast together: X is \[2\], Y is \[3\]"):
        ref("Pow", [np.zeros(2, f32), np.zeros(3, f32)])


# ---- expressions as data -------------------------------------------------------------------------

def test_expressions_are_plain_data_and_round_trip_through_json():
    op = lookup("", "Gelu")
    expr = op.pointwise([Operand(np.dtype(f32))], {"approximate": "tanh"})
    data = json.loads(json.dumps(expr.to_data()))
    assert Expr.from_data(data["nodes"], data["outputs"], data["broadcast"]) == expr
    assert "mlas_tanh" in expr.prims()
    # f16 math is widened and rounded back explicitly
    expr16 = lookup("", "Add").pointwise([Operand(np.dtype(f16))] * 2, {})
    assert [n[0] for n in expr16.nodes] == ["in", "cast", "in", "cast", "add", "cast"]


@pytest.mark.parametrize("value,dtype", [(0.1, "float32"), (-0.0, "float32"), (np.nan, "float32"), (-np.inf, "float64"),
                                         (65504.0, "float16"), (2 ** 63 - 1, "int64"), (-2 ** 31, "int32"),
                                         (True, "bool"), (1.0 / 3.0, "float64"), (3.0, "bfloat16")])
def test_constants_are_exact(value, dtype):
    text = const_text(value, dtype)
    want = np.asarray(value).astype(dtype)
    got = const_value(text, dtype)
    assert got.dtype == np.dtype(dtype) and got.tobytes() == want.tobytes()


def test_builder_builds_each_node_once_and_inlines():
    b = Builder([Operand(np.dtype(f32))])
    x = b.input(0)
    y = (x * x) + (x * x)
    expr = b.build(y)
    assert [n[0] for n in expr.nodes] == ["in", "mul", "add"]
    outer = Builder()
    z = outer.input(0, f32)
    (r,) = outer.inline(expr, [outer.exp(z)])
    assert [n[0] for n in outer.pruned([r], [0]).nodes] == ["in", "exp", "mul", "add"]


@pytest.mark.parametrize("nodes,outputs,broadcast,words", [
    ([["in", "float32", 0], ["exp", "float32", 1]], [1], [0], "earlier nodes"),
    ([["in", "float16", 0], ["exp", "float16", 0]], [1], [0], "does not take"),
    ([["in", "float32", 0], ["mlas_tanh", "float64", 0]], [1], [0], "gives float32"),
    ([["in", "float32", 0], ["nope", "float32", 0]], [1], [0], "unknown primitive"),
    ([["in", "float32", 0], ["in", "int32", 1], ["add", "float32", 0, 1]], [2], [0, 1], "does not take"),
    ([["in", "float32", 1]], [0], [0], "not in broadcast"),
    ([["in", "int32", 0], ["where", "int32", 0, 0, 0]], [1], [0], "condition"),
])
def test_malformed_expressions_are_rejected(nodes, outputs, broadcast, words):
    with pytest.raises(ValueError, match=words):
        Expr.from_data(nodes, outputs, broadcast)


def test_fused_elementwise_evaluates_its_program_and_names_the_failing_node():
    op = lookup(FUSED_DOMAIN, FUSED_ELEMENTWISE)
    # sigmoid(x) * x * up, the f32 replays as primitives
    b = Builder()
    x, u = b.input(0, f32), b.input(1, f32)
    expr = b.pruned([(x * b.mlas_logistic(x)) * u], [0, 1])
    attrs = {**expr.to_data(), "input_dtypes": ["float32"] * 2, "output_dtypes": ["float32"], "covers": ["s", "m", "g"],
             "steps": [["s", "Sigmoid", 0], ["m", "Mul", 0, -1], ["g", "Mul", -2, 1]]}
    xv = floats(f32)[:, None]
    uv = floats(f32)[None, :7]
    (got,) = op.reference([xv, uv], attrs)
    want = ref("Mul", [ref("Mul", [xv, ref("Sigmoid", [xv])]), uv])
    same_bits(got, want)
    from hipep.graph import TensorType
    (t,) = op.shape_rule([TensorType(1, (xv.shape[0], 1)), TensorType(1, (1, 7))], [None, None], attrs, 1)
    assert t.shape == (xv.shape[0], 7) and t.elem_type == 1
    with pytest.raises(RuntimeShapeError, match=r"node 'g' \(Mul\): Mul: shapes cannot be broadcast together"):
        op.shape_rule([TensorType(1, (4, 3)), TensorType(1, (5,))], [None, None], attrs, 1)
    assert op.claim is not None and "made by hipep's compiler" in op.claim(None, None, {})


# ---- HIP source ------------------------------------------------------------------------------------

def every_primitive_expression() -> tuple[Expr, list[str]]:
    """One expression applying every primitive (and casts between storage types)."""
    b = Builder()
    x, y = b.input(0, f32), b.input(1, f32)
    h, n = b.input(2, f16), b.input(3, i64)
    k, c = b.input(4, "uint8"), b.input(5, np.bool_)
    s = b.scalar_input(6, f32)
    outs = []
    for name, prim in PRIMITIVES.items():
        if prim.only == "float64":
            outs.append(b.cast(b.call(name, *[b.cast(x, f64), b.cast(y, f64)][:prim.arity]), f32))
        elif name == "where":
            outs.append(b.where(c, x, y))
        elif prim.operands == "bool":
            outs.append(b.cast(b.call(name, *[c, b.eq(x, y)][:prim.arity]), f32))
        elif prim.operands == "int":
            outs.append(b.cast(b.call(name, *([k] * prim.arity)), f32))
        elif prim.exact_f16:
            outs.append(b.cast(b.call(name, *([h] * prim.arity)), f32))
        else:
            outs.append(b.cast(b.call(name, *([x, y][:prim.arity])), f32))
    outs.append(b.cast(b.div(n, b.const(3, i64)), f32))
    outs.append(b.cast(b.cast(x, "bfloat16"), f32) + s)
    total = outs[0]
    for o in outs[1:]:
        total = total + o
    return b.pruned([total], [0, 1, 2, 3, 4, 5]), ["float32", "float32", "float16", "int64", "uint8", "bool", "float32"]


def test_every_primitive_renders_to_hip_source():
    expr, dtypes = every_primitive_expression()
    assert expr.prims() == set(PRIMITIVES)
    src = render_hip_kernel(expr, "fused_all", dtypes, ["float32"])
    assert 'extern "C" __global__ void fused_all(const float* __restrict__ in0' in src
    assert "const __half* __restrict__ in2" in src and "float* __restrict__ out0" in src
    assert "off0 += c * a.strides[0][d];" in src and "in6[0]" in src  # broadcast offsets; a scalar input
    assert "hipep_mlas_tanh(" in src and "hipep_idiv(" in src and "__half2float(" in src
    assert src.count("\n    const ") == len(expr.nodes)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no CUDA compiler to check the HIP source with")
def test_hip_source_compiles_through_hips_cuda_path(tmp_path):
    expr, dtypes = every_primitive_expression()
    gelu = lookup("", "Gelu").pointwise([Operand(np.dtype(f16))], {"approximate": "tanh"})
    src = render_hip_kernel(expr, "fused_all", dtypes, ["float32"])
    other = render_hip_kernel(gelu, "gelu_f16", ["float16"], ["float16"])
    (tmp_path / "k.cu").write_text(src + other[other.index("struct hipep_pointwise_args"):])
    out = subprocess.run(["nvcc", "-c", "-std=c++17", "-arch=sm_80", str(tmp_path / "k.cu"), "-o", str(tmp_path / "k.o")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]


def test_nan_and_infinite_constants_render():
    b = Builder()
    x = b.input(0, f32)
    expr = b.pruned([b.max(x, b.const(math.nan, f32)) + b.const(-math.inf, f32)], [0])
    src = render_hip_kernel(expr, "k", ["float32"], ["float32"])
    assert '__builtin_nanf("")' in src and "-__builtin_inff()" in src
    check(expr)
