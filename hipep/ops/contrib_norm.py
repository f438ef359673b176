"""Normalization and GELU-family contrib ops, matched to ONNX Runtime's CPU EP bit for bit where
its arithmetic is known:

  * SimplifiedLayerNormalization (default domain; ORT's own schema, since-version 1) and ONNX
    RMSNormalization (opset 23): ORT runs both through LayerNormImpl, which for rows of 16 or more
    elements calls MLAS's AVX2 LayerNorm kernel (8 lanes, FMA sum of squares, a fixed horizontal
    reduction, y = x * inv * scale) and for shorter rows a sequential f32 loop
    (y = x / rms * scale). Both are emulated exactly (`mlas._rms_rows`).
  * SkipSimplifiedLayerNormalization / SkipLayerNormalization (com.microsoft): a sequential f32
    loop per row; the simplified form sums squares, the full form uses Welford's running mean and
    M2 (`_skip_rows`). mean is 0 for the simplified form, as ORT writes it.
  * FastGelu, QuickGelu, BiasGelu (com.microsoft): f32 kernels in ORT's operation order, with
    tanh / logistic / erf in f64 rounded to f32 (MLAS's approximations agree to a few ulps). For
    f16, ORT 1.31 has no FastGelu/QuickGelu kernel: it inlines the schema's function body, whose
    constants are f16 (sqrt(2/pi) -> 0.798, 0.044715*sqrt(2/pi) -> 0.03568, alpha rounded to f16),
    and its cast-insertion runs that body in f32; BiasGelu f16 runs the f32 kernel between casts.

f16 inputs are computed in f32 and every output rounded once, as ORT's kernels do; so are bf16
ones to the RMS and skip norms (ORT's CUDA EP's arithmetic; its CPU EP has no bf16 kernel). ORT computes
on x86 as described; on other CPUs (no AVX2) its RMS norm uses the sequential loop for every row
length, which agrees with this reference to within a few f32 ulps.
"""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ._common import (at, elem_of, input_rank, kernel, normalize_axis, product, pshape_str, result, shape_of,
                      shape_rule, shape_str, tensor_type)
from . import pointwise as pw
from .mlas import _rms_rows, _seq_sum
from .registry import F32, FLOATS, LLM_FLOATS, OpDef, register

MS = "com.microsoft"
f32 = np.float32
f64 = np.float64
F32S = frozenset({F32})

# ORT registers SimplifiedLayerNormalization in the default domain with its own contrib schema
# (since-version 1): a session reports 1. onnx has no schema for it, so GraphView.from_onnx (and
# with it hipep.explain) reports the model's default-domain opset instead. The reference is the
# same for all of them, so every opset ORT 1.31 loads is accepted.
_SLN_SINCE = tuple(range(1, 27))


# ---- shared row arithmetic -------------------------------------------------------------------

def _skip_rows(v: np.ndarray, gamma, beta, eps: float, simplified: bool):
    """ORT's SkipLayerNorm ComputeJob on f32 rows `v` [rows, h] (input + skip + bias already
    summed). Returns (output, mean, inv_std_var), all f32."""
    rows, h = v.shape
    eps = f32(eps)
    if simplified:
        sum_sq = _seq_sum((v * v).astype(f32))
        std = np.sqrt((sum_sq / f32(h) + eps).astype(f32)).astype(f32)
        y = ((v / std[:, None]).astype(f32) * gamma).astype(f32)
        return y, np.zeros(rows, f32), (f32(1) / std).astype(f32)
    mean = np.zeros(rows, f32)
    m2 = np.zeros(rows, f32)
    for k in range(h):  # Welford, in ORT's order
        val = v[:, k]
        delta = (val - mean).astype(f32)
        mean = (mean + (delta / f32(k + 1)).astype(f32)).astype(f32)
        m2 = (m2 + (delta * (val - mean).astype(f32)).astype(f32)).astype(f32)
    std = np.sqrt((m2 / f32(h) + eps).astype(f32)).astype(f32)
    y = (((v - mean[:, None]).astype(f32) / std[:, None]).astype(f32) * gamma).astype(f32)
    if beta is not None:
        y = (y + beta).astype(f32)
    return y, mean, (f32(1) / std).astype(f32)


# ---- SimplifiedLayerNormalization, RMSNormalization ------------------------------------------

def _rms_norm(op_type: str, with_inv: bool):
    @kernel(op_type)
    def reference(inputs, attrs):
        x, scale = inputs[0], inputs[1]
        if x.ndim == 0:
            raise RuntimeShapeError(f"{op_type}: X must have rank >= 1, got a scalar")
        axis = normalize_axis(op_type, int(attrs["axis"]), x.ndim)
        rows = int(np.prod(x.shape[:axis], dtype=np.int64))
        n = int(np.prod(x.shape[axis:], dtype=np.int64))
        if scale.size != n:
            raise RuntimeShapeError(
                f"{op_type}: scale must have X.shape[axis:] = {shape_str(x.shape[axis:])} = {n} elements "
                f"(axis {axis}), got shape {shape_str(scale.shape)} ({scale.size} elements)")
        y, inv = _rms_rows(x.astype(f32).reshape(rows, n), scale.astype(f32).reshape(n),
                           attrs["epsilon"])
        out = [result(y.reshape(x.shape), x.dtype)]
        if with_inv:
            out.append(result(inv.reshape(x.shape[:axis] + (1,) * (x.ndim - axis)), f32))
        return out
    return reference


def _rms_shape(op_type: str, with_inv: bool):
    @shape_rule(op_type, symbolic=True)
    def rule(types, values, attrs, num_outputs):
        x = shape_of(types[0])
        stats = None
        if x is not None:
            if len(x) == 0:
                raise RuntimeShapeError(f"{op_type}: X must have rank >= 1, got a scalar")
            axis = normalize_axis(op_type, int(attrs["axis"]), len(x))
            s = shape_of(at(types, 1))
            tail = x[axis:]
            if s is not None and all(d is not None for d in s) and all(d is not None for d in tail):
                n, got = product(tail), product(s)
                if n != got:
                    raise RuntimeShapeError(
                        f"{op_type}: scale must have X.shape[axis:] = {pshape_str(tail)} = {n} elements "
                        f"(axis {axis}), got shape {pshape_str(s)} ({got} elements)")
            stats = tuple(x[:axis]) + (1,) * (len(x) - axis)
        out = [tensor_type(elem_of(types[0]), x)]
        if with_inv:
            out.append(tensor_type(F32, stats))
        return out
    return rule


def _claim_rms(node, graph, attrs):
    if attrs["stash_type"] != 1:
        return f"attribute stash_type={attrs['stash_type']} is not supported (only 1, statistics in f32)"
    rank = input_rank(node, graph)
    if rank is not None and not -rank <= attrs["axis"] < rank:
        return f"attribute axis={attrs['axis']} is out of range for a rank-{rank} input"
    return None


_RMS_ATTRS = {"axis": -1, "epsilon": 1e-5, "stash_type": 1}
# X, scale and Y share one element type: ORT's CPU kernel reads all three as T.
register(OpDef("SimplifiedLayerNormalization", _SLN_SINCE, ("T", "T"), ("T", "U"),
               {"T": LLM_FLOATS, "U": F32S}, _rms_norm("SimplifiedLayerNormalization", True),
               attributes=dict(_RMS_ATTRS), claim=_claim_rms,
               shape_rule=_rms_shape("SimplifiedLayerNormalization", True)))
register(OpDef("RMSNormalization", (23,), ("T", "T"), ("T",), {"T": LLM_FLOATS},
               _rms_norm("RMSNormalization", False), attributes=dict(_RMS_ATTRS), claim=_claim_rms,
               shape_rule=_rms_shape("RMSNormalization", False)))


# ---- SkipLayerNormalization, SkipSimplifiedLayerNormalization --------------------------------

def _skip_check(op_type, x, skip, vectors):
    """ORT's skip_layer_norm_helper checks (x, skip shapes; 1-D [hidden] gamma/beta/bias), on
    static shapes (ints) or partial ones (None dims are not checked)."""
    def s(shape):
        return pshape_str(shape)

    if x is not None and len(x) not in (2, 3):
        raise RuntimeShapeError(f"{op_type}: input is expected to have 2 or 3 dimensions, got shape {s(x)}")
    if skip is not None:
        if len(skip) not in (2, 3):
            raise RuntimeShapeError(f"{op_type}: skip is expected to have 2 or 3 dimensions, got shape {s(skip)}")
        if x is not None:
            same = len(skip) == len(x) and all(a is None or b is None or a == b for a, b in zip(skip, x))
            # Besides x's own shape, a 3-D input takes a [S, H] or [1, S, H] skip (broadcast over batch).
            bcast = len(x) == 3 and (len(skip) == 2 or skip[0] in (1, None)) and all(
                a is None or b is None or a == b for a, b in zip(skip[-2:], x[-2:]))
            if not (same or bcast):
                raise RuntimeShapeError(
                    f"{op_type}: skip of shape {s(skip)} must equal the input's shape {s(x)}, or be "
                    f"[S, H] / [1, S, H] for a 3-D input")
    hidden = None if x is None else x[-1]
    for what, v in vectors:
        if v is None:
            continue
        if len(v) != 1:
            raise RuntimeShapeError(f"{op_type}: {what} is expected to have 1 dimension, got shape {s(v)}")
        if hidden is not None and v[0] is not None and v[0] != hidden:
            raise RuntimeShapeError(f"{op_type}: {what} of shape {s(v)} does not match the input's "
                                    f"hidden size {hidden} (input shape {s(x)})")


def _skip_norm(op_type: str, simplified: bool):
    @kernel(op_type)
    def reference(inputs, attrs):
        x, skip, gamma = inputs[0], inputs[1], inputs[2]
        beta = None if simplified else at(inputs, 3)
        bias = at(inputs, 3 if simplified else 4)
        _skip_check(op_type, x.shape, skip.shape,
                    [("gamma", gamma.shape), ("beta", None if beta is None else beta.shape),
                     ("bias", None if bias is None else bias.shape)])
        h = x.shape[-1]
        v = (x.astype(f32) + np.broadcast_to(skip.astype(f32), x.shape)).astype(f32)
        if bias is not None:
            v = (v + bias.astype(f32)).astype(f32)
        rows = v.reshape(-1, h)
        y, mean, inv = _skip_rows(rows, gamma.astype(f32), None if beta is None else beta.astype(f32),
                                  attrs["epsilon"], simplified)
        stats = x.shape[:-1] + (1,)
        return [result(y.reshape(x.shape), x.dtype), result(mean.reshape(stats), f32),
                result(inv.reshape(stats), f32), result(v, x.dtype)]
    return reference


def _skip_shape(op_type: str, simplified: bool):
    @shape_rule(op_type, symbolic=True)
    def rule(types, values, attrs, num_outputs):
        x = shape_of(types[0])
        names = ["gamma", "bias"] if simplified else ["gamma", "beta", "bias"]
        vectors = [(n, shape_of(at(types, 2 + i))) for i, n in enumerate(names)]
        _skip_check(op_type, x, shape_of(at(types, 1)), vectors)
        if x is not None:  # hidden size from gamma/beta/bias where the input leaves it open
            hidden = next((v[0] for _, v in vectors if v is not None and v[0] is not None), None)
            if x[-1] is None and hidden is not None:
                x = tuple(x[:-1]) + (hidden,)
        stats = None if x is None else tuple(x[:-1]) + (1,)
        elem = elem_of(types[0])
        return [tensor_type(elem, x), tensor_type(F32, stats), tensor_type(F32, stats), tensor_type(elem, x)]
    return rule


def _claim_skip(node, graph, attrs):
    rank = input_rank(node, graph)
    if rank is not None and rank not in (2, 3):
        return f"input has rank {rank}; ORT's SkipLayerNormalization takes 2-D or 3-D inputs only"
    return None


register(OpDef("SkipSimplifiedLayerNormalization", (1,), ("T", "T", "T", "T"), ("T", "U", "U", "T"),
               {"T": LLM_FLOATS, "U": F32S}, _skip_norm("SkipSimplifiedLayerNormalization", True),
               attributes={"epsilon": 1e-12}, claim=_claim_skip, domain=MS, min_inputs=3,
               shape_rule=_skip_shape("SkipSimplifiedLayerNormalization", True)))
register(OpDef("SkipLayerNormalization", (1,), ("T", "T", "T", "T", "T"), ("T", "U", "U", "T"),
               {"T": LLM_FLOATS, "U": F32S}, _skip_norm("SkipLayerNormalization", False),
               attributes={"epsilon": 1e-12}, claim=_claim_skip, domain=MS, min_inputs=3,
               shape_rule=_skip_shape("SkipLayerNormalization", False)))


# ---- GELU family -----------------------------------------------------------------------------

_B = f32(0.7978845608028654)     # sqrt(2 / pi)
_C = f32(0.035677408136300125)   # 0.044715 * sqrt(2 / pi)
_B16 = f32(np.float16(_B))       # the same constants as f16, in FastGelu's function body
_C16 = f32(np.float16(_C))
_HALF, _ONE = f32(0.5), f32(1.0)
_INV_SQRT2 = f32(f32(1.0) / f32(np.sqrt(2.0)))


def _check_bias(op_type, x_shape, b_shape, name="bias"):
    if len(x_shape) < 1:
        raise RuntimeShapeError(f"{op_type}: input must have rank >= 1, got a scalar")
    if b_shape is not None and (len(b_shape) != 1 or (b_shape[0] is not None and x_shape[-1] is not None
                                                      and b_shape[0] != x_shape[-1])):
        raise RuntimeShapeError(f"{op_type}: {name} must be 1-D with the input's last dimension "
                                f"({pshape_str(x_shape)}), got shape {pshape_str(b_shape)}")


def _gelu_operands(operands) -> str | None:
    """The element type the GELU expressions compute for (f32, f16), or None where an input's type
    differs from the first's."""
    dtype = operands[0].dtype.name
    if dtype not in (pw.F32, pw.F16):
        return None
    return dtype if all(o is None or o.dtype.name == dtype for o in operands) else None


def _f64_call(b: pw.Builder, prim: str, v):
    """prim(v) computed in f64 and rounded to f32 (the references' tanh, exp and erf)."""
    return b.cast(b.call(prim, b.cast(v, pw.F64)), pw.F32)


def _fast_gelu_expr(operands, attrs):
    dtype = _gelu_operands(operands)
    if dtype is None:
        return None
    b = pw.Builder(operands)
    v = b.cast(b.input(0), pw.F32)
    if len(operands) > 1 and operands[1] is not None:
        v = v + b.cast(b.input(1), pw.F32)
    if dtype == pw.F32:  # ORT's f32 kernel
        t = v * ((_C * v) * v + _B)
        y = (_HALF * v) * (_f64_call(b, "tanh", t) + _ONE)
    else:  # f16: the schema's function body, run in f32 with f16 constants
        t = v * (_B16 + _C16 * (v * v))
        y = _HALF * (v * (_ONE + _f64_call(b, "tanh", t)))
    return b.build(b.cast(y, dtype))


def _quick_gelu_expr(operands, attrs):
    dtype = _gelu_operands(operands)
    if dtype is None:
        return None
    alpha = f32(attrs["alpha"]) if dtype == pw.F32 else f32(np.float16(attrs["alpha"]))  # f16: the body's constant
    b = pw.Builder(operands)
    v = b.cast(b.input(0), pw.F32)
    u = b.cast(alpha * v, pw.F64)
    sigmoid = b.cast(1.0 / (1.0 + b.exp(-u)), pw.F32)
    return b.build(b.cast(v * sigmoid, dtype))


def _bias_gelu_expr(operands, attrs):
    dtype = _gelu_operands(operands)
    if dtype is None:
        return None
    b = pw.Builder(operands)
    v = b.cast(b.input(0), pw.F32) + b.cast(b.input(1), pw.F32)
    e = _f64_call(b, "erf", v * _INV_SQRT2)
    return b.build(b.cast((v * _HALF) * (e + _ONE), dtype))


def _gelu_shape(op_type: str, bias_pos: int | None, name="bias"):
    @shape_rule(op_type)
    def rule(types, values, attrs, num_outputs):
        x = shape_of(types[0])
        b = shape_of(at(types, bias_pos)) if bias_pos is not None else None
        if x is not None:
            _check_bias(op_type, x, b, name)
            if b is not None and x[-1] is None:
                x = tuple(x[:-1]) + (b[0],)
        return [tensor_type(elem_of(types[0]), x)]
    return rule


def _register_gelu(op_type, inputs, expr, shape, **kw):
    """A GELU-family op is pointwise: its CPU reference, its GPU kernel and its fusion with
    neighbours all come from `expr`."""
    register(OpDef(op_type, (1,), inputs, ("T",), {"T": FLOATS}, pw.reference(op_type, expr), domain=MS,
                   pointwise=expr, shape_rule=shape, **kw))


_register_gelu("FastGelu", ("T", "T"), _fast_gelu_expr, _gelu_shape("FastGelu", 1), min_inputs=1)
_register_gelu("QuickGelu", ("T",), _quick_gelu_expr, _gelu_shape("QuickGelu", None), attributes={"alpha": 1.702})
_register_gelu("BiasGelu", ("T", "T"), _bias_gelu_expr, _gelu_shape("BiasGelu", 1, "B"))
