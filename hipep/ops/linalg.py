"""Linear algebra: MatMul (numpy matmul semantics), Gemm, Einsum, the integer products
MatMulInteger and QLinearMatMul, and Det. f16 accumulates in f32; integers accumulate exactly."""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ._common import (at, broadcast_partial, elem_of, kernel, pshape_str, result, shape_of,
                      shape_rule, shape_str, tensor_type, type_name, unidirectional_ok, upcast)
from .mlas import requantize_output
from .registry import BF16, F16, F32, F64, FLOATS, I8, I32, NUMERIC, REQUIRED, U8, OpDef, register


def _check_matmul_shapes(op_type: str, a: np.ndarray, b: np.ndarray) -> None:
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeShapeError(f"{op_type}: inputs must have rank >= 1: A is {shape_str(a.shape)}, "
                                f"B is {shape_str(b.shape)}")
    k_a = a.shape[-1]
    k_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if k_a != k_b:
        which = "first" if b.ndim == 1 else "second-to-last"
        raise RuntimeShapeError(
            f"{op_type}: inner dimensions disagree: A is {shape_str(a.shape)}, B is "
            f"{shape_str(b.shape)} (A's last dim {k_a} != B's {which} dim {k_b})")
    batch_a = a.shape[:-2]
    batch_b = b.shape[:-2]
    try:
        np.broadcast_shapes(batch_a, batch_b)
    except ValueError:
        raise RuntimeShapeError(
            f"{op_type}: batch dimensions cannot be broadcast: A is {shape_str(a.shape)} (batch "
            f"{shape_str(batch_a)}), B is {shape_str(b.shape)} (batch {shape_str(batch_b)})") from None


@kernel("MatMul")
def _matmul(inputs, attrs):
    a, b = inputs
    _check_matmul_shapes("MatMul", a, b)
    return [result(np.matmul(upcast(a), upcast(b)), a.dtype)]


@shape_rule("MatMul", symbolic=True)
def _matmul_shape(types, values, attrs, num_outputs):
    a, b = shape_of(types[0]), shape_of(types[1])
    elem = elem_of(types[0])
    if (a is not None and len(a) == 0) or (b is not None and len(b) == 0):
        raise RuntimeShapeError(f"MatMul: inputs must have rank >= 1: A is {pshape_str(a)}, "
                                f"B is {pshape_str(b)}")
    if a is None or b is None:
        return [tensor_type(elem, None)]
    k_a = a[-1]
    k_b = b[0] if len(b) == 1 else b[-2]
    if k_a is not None and k_b is not None and k_a != k_b:
        which = "first" if len(b) == 1 else "second-to-last"
        raise RuntimeShapeError(
            f"MatMul: inner dimensions disagree: A is {pshape_str(a)}, B is {pshape_str(b)} "
            f"(A's last dim {k_a} != B's {which} dim {k_b})")
    batch_a, batch_b = a[:-2], b[:-2]
    try:
        batch = broadcast_partial("MatMul", [batch_a, batch_b])
    except RuntimeShapeError:
        raise RuntimeShapeError(
            f"MatMul: batch dimensions cannot be broadcast: A is {pshape_str(a)} (batch "
            f"{pshape_str(batch_a)}), B is {pshape_str(b)} (batch {pshape_str(batch_b)})") from None
    rows = (a[-2],) if len(a) >= 2 else ()
    cols = (b[-1],) if len(b) >= 2 else ()
    return [tensor_type(elem, batch + rows + cols)]


register(OpDef("MatMul", (1, 9, 13), ("T", "T"), ("T",), {"T": NUMERIC | {BF16, F64}}, _matmul,
               shape_rule=_matmul_shape))


@kernel("Gemm")
def _gemm(inputs, attrs):
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    if a.ndim != 2 or b.ndim != 2:
        raise RuntimeShapeError(f"Gemm: A and B must be 2-D: A is {shape_str(a.shape)}, "
                                f"B is {shape_str(b.shape)}")
    ta, tb = int(attrs["transA"]), int(attrs["transB"])
    aa = upcast(a).T if ta else upcast(a)
    bb = upcast(b).T if tb else upcast(b)
    if aa.shape[1] != bb.shape[0]:
        raise RuntimeShapeError(
            f"Gemm: inner dimensions disagree: A is {shape_str(a.shape)} (transA={ta}), B is "
            f"{shape_str(b.shape)} (transB={tb}) (K from A is {aa.shape[1]}, K from B is {bb.shape[0]})")
    m, n = aa.shape[0], bb.shape[1]
    acc = np.float32(attrs["alpha"]) * np.matmul(aa, bb)
    beta = np.float32(attrs["beta"])
    if c is not None:
        try:
            ok = tuple(np.broadcast_shapes(c.shape, (m, n))) == (m, n)
        except ValueError:
            ok = False
        if not ok:
            raise RuntimeShapeError(f"Gemm: C of shape {shape_str(c.shape)} cannot be broadcast to "
                                    f"the output shape {shape_str((m, n))}")
        if beta != 0:  # ONNX Runtime ignores C entirely when beta == 0
            acc = acc + beta * upcast(c)
    return [result(acc, a.dtype)]


@shape_rule("Gemm")
def _gemm_shape(types, values, attrs, num_outputs):
    a, b, c = shape_of(types[0]), shape_of(types[1]), shape_of(at(types, 2))
    if (a is not None and len(a) != 2) or (b is not None and len(b) != 2):
        raise RuntimeShapeError(f"Gemm: A and B must be 2-D: A is {pshape_str(a)}, "
                                f"B is {pshape_str(b)}")
    ta, tb = int(attrs["transA"]), int(attrs["transB"])
    m, k_a = (None, None) if a is None else ((a[1], a[0]) if ta else (a[0], a[1]))
    k_b, n = (None, None) if b is None else ((b[1], b[0]) if tb else (b[0], b[1]))
    if k_a is not None and k_b is not None and k_a != k_b:
        raise RuntimeShapeError(
            f"Gemm: inner dimensions disagree: A is {pshape_str(a)} (transA={ta}), B is "
            f"{pshape_str(b)} (transB={tb}) (K from A is {k_a}, K from B is {k_b})")
    if c is not None and len(c) <= 2:
        # C broadcasts unidirectionally to (M, N): a static non-1 extent of C fixes M or N.
        cc = (1,) * (2 - len(c)) + tuple(c)
        m = cc[0] if m is None and cc[0] not in (None, 1) else m
        n = cc[1] if n is None and cc[1] not in (None, 1) else n
    if c is not None and unidirectional_ok(c, (m, n)) is False:
        raise RuntimeShapeError(f"Gemm: C of shape {pshape_str(c)} cannot be broadcast to "
                                f"the output shape {pshape_str((m, n))}")
    return [tensor_type(elem_of(types[0]), (m, n))]


def _claim_gemm(node, graph, attrs):
    if node.since_version < 11 and not (len(node.inputs) > 2 and node.inputs[2]):
        return f"Gemm opset {node.since_version} requires input C (optional only since opset 11)"
    for name in ("transA", "transB"):
        if attrs[name] not in (0, 1):
            return f"attribute {name}={attrs[name]} is invalid (must be 0 or 1)"
    return None


# Floats only: ONNX Runtime's CPU EP has no integer Gemm kernel to check against.
register(OpDef("Gemm", (7, 9, 11, 13), ("T", "T", "T"), ("T",), {"T": FLOATS}, _gemm,
               attributes={"transA": 0, "transB": 0, "alpha": 1.0, "beta": 1.0},
               claim=_claim_gemm, min_inputs=2, shape_rule=_gemm_shape))


# ---- Einsum ----------------------------------------------------------------------------------------

_ELLIPSIS = "."  # one character standing for "..." in a parsed term


class EinsumError(ValueError):
    pass


def parse_einsum(equation: str, n_inputs: int | None = None) -> tuple[list[str], str, bool]:
    """(input terms, output term, explicit?) with each "..." replaced by one '.'; the implicit
    output is ONNX's: "..." first if any input has it, then the letters occurring once, sorted.
    Raises EinsumError naming what is wrong."""
    eq = equation.replace(" ", "")
    if eq.count("->") > 1:
        raise EinsumError("more than one '->'")
    explicit = "->" in eq
    lhs, rhs = eq.split("->") if explicit else (eq, None)
    terms = lhs.split(",")

    def term(t: str, where: str) -> str:
        if t.count("...") > 1 or t.replace("...", "").count("."):
            raise EinsumError(f"{where} '{t}' has a '.' that is not part of one '...'")
        t = t.replace("...", _ELLIPSIS)
        bad = [ch for ch in t if not (ch.isascii() and ch.isalpha()) and ch != _ELLIPSIS]
        if bad:
            raise EinsumError(f"{where} '{t}' has '{bad[0]}'; subscripts are letters a-z, A-Z and '...'")
        return t

    terms = [term(t, f"input term {i}") for i, t in enumerate(terms)]
    if n_inputs is not None and len(terms) != n_inputs:
        raise EinsumError(f"the equation has {len(terms)} input terms but the node has {n_inputs} inputs")
    letters = "".join(terms).replace(_ELLIPSIS, "")
    if explicit:
        out = term(rhs, "the output term")
        for ch in out:
            if ch != _ELLIPSIS and ch not in letters:
                raise EinsumError(f"output subscript '{ch}' does not occur in any input")
        if len(set(out)) != len(out):
            raise EinsumError(f"the output term '{out}' repeats a subscript")
        if _ELLIPSIS in out and not any(_ELLIPSIS in t for t in terms):
            raise EinsumError("the output has '...' but no input does")
    else:
        once = sorted(ch for ch in set(letters) if letters.count(ch) == 1)
        out = (_ELLIPSIS if any(_ELLIPSIS in t for t in terms) else "") + "".join(once)
    return terms, out, explicit


def _numpy_equation(terms, out) -> str:
    return ",".join(terms).replace(_ELLIPSIS, "...") + "->" + out.replace(_ELLIPSIS, "...")


def _einsum_dims(terms, shapes, op_type="Einsum"):
    """Per letter, the (partial) extents of its occurrences; per operand its '...' dims.
    shapes: partial shapes (None = unranked). Raises RuntimeShapeError on a rank mismatch."""
    occurrences: dict[str, list] = {}
    ellipses = []
    for i, (t, s) in enumerate(zip(terms, shapes)):
        n_letters = len(t.replace(_ELLIPSIS, ""))
        if s is None:  # unranked: its subscripts' extents are unknown
            for ch in set(t) - {_ELLIPSIS}:
                occurrences.setdefault(ch, []).append(None)
            ellipses.append(None if _ELLIPSIS in t else ())
            continue
        if (_ELLIPSIS in t and len(s) < n_letters) or (_ELLIPSIS not in t and len(s) != n_letters):
            raise RuntimeShapeError(f"{op_type}: input {i} has rank {len(s)} ({pshape_str(s)}), which does "
                                    f"not match its term '{t.replace(_ELLIPSIS, '...')}'")
        n_ell = len(s) - n_letters
        dims = list(s)
        ell = ()
        own: dict[str, list] = {}
        k = 0
        for ch in t:
            if ch == _ELLIPSIS:
                ell = tuple(dims[k:k + n_ell])
                k += n_ell
            else:
                own.setdefault(ch, []).append(dims[k])
                k += 1
        for ch, ds in own.items():  # a repeated subscript (a diagonal) needs equal extents
            static = {d for d in ds if d is not None}
            if len(static) > 1:
                raise RuntimeShapeError(f"{op_type}: subscript '{ch}' repeats in input {i} "
                                        f"({pshape_str(s)}) with different extents {sorted(static)}")
            occurrences.setdefault(ch, []).append(static.pop() if static else None)
        ellipses.append(ell)
    return occurrences, ellipses


def _einsum_out_shape(terms, out, shapes, op_type="Einsum"):
    occurrences, ellipses = _einsum_dims(terms, shapes, op_type)
    extent = {}
    for ch, ds in occurrences.items():  # every subscript, contracted ones too
        try:
            (extent[ch],) = broadcast_partial(op_type, [(d,) for d in ds])
        except RuntimeShapeError:
            raise RuntimeShapeError(f"{op_type}: subscript '{ch}' has extents "
                                    f"{', '.join('?' if d is None else str(d) for d in ds)} in the inputs, "
                                    f"which do not broadcast") from None
    if any(e is None for e in ellipses):
        ell = None  # an unranked operand with '...': the rank of its '...' is unknown
    else:
        ell = broadcast_partial(op_type, list(ellipses))
    result_dims = []
    for ch in out:
        if ch == _ELLIPSIS:
            if ell is None:
                return None
            result_dims.extend(ell)
        else:
            result_dims.append(extent[ch])
    return tuple(result_dims)


@kernel("Einsum")
def _einsum(inputs, attrs):
    try:
        terms, out, _ = parse_einsum(str(attrs["equation"]), len(inputs))
    except EinsumError as e:
        raise RuntimeShapeError(f"Einsum: equation '{attrs['equation']}': {e}") from None
    _einsum_out_shape(terms, out, [x.shape for x in inputs])  # rank and extent checks
    dtype = inputs[0].dtype
    r = np.einsum(_numpy_equation(terms, out), *[upcast(x) for x in inputs])
    return [result(r, dtype)]


@shape_rule("Einsum")
def _einsum_shape(types, values, attrs, num_outputs):
    try:
        terms, out, _ = parse_einsum(str(attrs["equation"]), len(types))
    except EinsumError as e:
        raise RuntimeShapeError(f"Einsum: equation '{attrs['equation']}': {e}") from None
    return [tensor_type(elem_of(types[0]), _einsum_out_shape(terms, out, [shape_of(t) for t in types]))]


def _claim_einsum(node, graph, attrs):
    try:
        terms, out, explicit = parse_einsum(str(attrs["equation"]), len(node.inputs))
    except EinsumError as e:
        return f"equation '{attrs['equation']}' is not supported: {e}"
    if not explicit and any(ch.isupper() for ch in "".join(terms)):
        return (f"equation '{attrs['equation']}' has upper-case subscripts in implicit mode (no '->'), "
                f"which ONNX Runtime's CPU EP rejects; hipep claims them only with an explicit output")
    shapes = [graph.type_of(n).shape for n in node.inputs]
    shapes = [None if s is None else tuple(d if isinstance(d, int) else None for d in s) for s in shapes]
    try:
        _einsum_out_shape(terms, out, shapes)
    except RuntimeShapeError as e:
        return str(e).removeprefix("Einsum: ")
    return None


register(OpDef("Einsum", (12, 28), ("T",), ("T",), {"T": NUMERIC | {F64}}, _einsum,
               attributes={"equation": REQUIRED}, claim=_claim_einsum, min_inputs=1, variadic=True,
               shape_rule=_einsum_shape))


# ---- MatMulInteger / QLinearMatMul ---------------------------------------------------------------------
# int8/uint8 products accumulate exactly in int32 (int64 here, then wrapped to int32 as ORT's does).

def _zero_point(op_type, what, zp, b=None):
    """A zero point broadcastable against its matrix: one element, or (for B) one per column
    (shape [N], or B's batch dims with a 1 before N)."""
    if zp is None:
        return np.int64(0)
    z = np.asarray(zp).astype(np.int64)
    if z.size == 1 and z.ndim <= 1:
        return z.reshape(())
    if b is not None and b.ndim >= 2:
        n = b.shape[-1]
        if z.shape == (n,) or (z.ndim == b.ndim and z.shape[-2:] == (1, n) and z.shape[:-2] == b.shape[:-2]):
            return z
    raise RuntimeShapeError(f"{op_type}: {what} must be a scalar" + (
        f" or per column of B ({shape_str(b.shape)})" if b is not None else "") + f", got shape {shape_str(z.shape)}")


def _int_matmul(op_type, a, b, a_zp, b_zp):
    _check_matmul_shapes(op_type, a, b)
    return np.matmul(a.astype(np.int64) - a_zp, b.astype(np.int64) - b_zp)


@kernel("MatMulInteger")
def _matmul_integer(inputs, attrs):
    a, b = inputs[0], inputs[1]
    a_zp = _zero_point("MatMulInteger", "a_zero_point", at(inputs, 2))
    b_zp = _zero_point("MatMulInteger", "b_zero_point", at(inputs, 3), b)
    acc = _int_matmul("MatMulInteger", a, b, a_zp, b_zp)
    return [result(acc.astype(np.int32))]


def _product_shape(op_type, a, b):
    """MatMul's rule for A and B, its errors named after `op_type`."""
    try:
        (t,) = _matmul_shape([a, b], [None, None], {}, 1)
    except RuntimeShapeError as e:
        raise RuntimeShapeError(op_type + str(e)[len("MatMul"):]) from None
    return t.shape


@shape_rule("MatMulInteger")
def _matmul_integer_shape(types, values, attrs, num_outputs):
    return [tensor_type(I32, _product_shape("MatMulInteger", types[0], types[1]))]


_Q8 = frozenset({I8, U8})

register(OpDef("MatMulInteger", (10,), ("T1", "T2", "T1", "T2"), ("T3",),
               {"T1": _Q8, "T2": _Q8, "T3": frozenset({I32})}, _matmul_integer, min_inputs=2,
               shape_rule=_matmul_integer_shape))


def _scale(op_type, what, s, b=None):
    s = np.asarray(s, dtype=np.float32)
    if s.size == 1 and s.ndim <= 1:
        return s.reshape(())
    if b is not None and b.ndim >= 2 and s.shape == (b.shape[-1],):
        return s
    raise RuntimeShapeError(f"{op_type}: {what} must be a scalar" + (
        f" or per column of B ({shape_str(b.shape)})" if b is not None else "") + f", got shape {shape_str(s.shape)}")


@kernel("QLinearMatMul")
def _qlinear_matmul(inputs, attrs):
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = inputs
    acc = _int_matmul("QLinearMatMul", a, b, _zero_point("QLinearMatMul", "a_zero_point", a_zp),
                      _zero_point("QLinearMatMul", "b_zero_point", b_zp, b))
    # ONNX Runtime (MLAS): scale = a_scale * b_scale / y_scale in f32; y = round-half-even of
    # clamp(float(acc) * scale) + y_zero_point, saturated to the output type (a NaN to its low end).
    scale = (_scale("QLinearMatMul", "a_scale", a_scale) * _scale("QLinearMatMul", "b_scale", b_scale, b)
             / _scale("QLinearMatMul", "y_scale", y_scale)).astype(np.float32)
    zp = int(_zero_point("QLinearMatMul", "y_zero_point", y_zp))
    return [result(requantize_output(acc.astype(np.int32), scale, zp, y_zp.dtype))]


@shape_rule("QLinearMatMul")
def _qlinear_matmul_shape(types, values, attrs, num_outputs):
    return [tensor_type(elem_of(at(types, 7)), _product_shape("QLinearMatMul", types[0], types[3]))]


def _claim_qlinear_matmul(node, graph, attrs):
    a, b, y = (graph.type_of(node.inputs[i]).elem_type for i in (0, 3, 7))
    if (a, b, y) not in ((U8, U8, U8), (U8, I8, U8), (I8, I8, I8)):
        names = "/".join(type_name(e) for e in (a, b, y))
        return (f"a/b/y element types {names} are not supported; ONNX Runtime's CPU EP runs "
                f"u8/u8/u8, u8/i8/u8 and i8/i8/i8")
    return None


# Opset 21 allows f16 scales (as ORT's CPU EP runs them: widened to f32, then the same steps).
register(OpDef("QLinearMatMul", (10, 21), ("T1", "S", "T1", "T2", "S", "T2", "S", "T3"), ("T3",),
               {"T1": _Q8, "T2": _Q8, "T3": _Q8, "S": frozenset({F32, F16})}, _qlinear_matmul,
               claim=_claim_qlinear_matmul, shape_rule=_qlinear_matmul_shape))


# ---- Det -----------------------------------------------------------------------------------------
# The determinants of the [..., n, n] matrices, by LU decomposition with partial pivoting computed in
# f64 (LAPACK through numpy here; kernels/det.hip on a GPU) and rounded to f32 (then to f16).
# ONNX Runtime's CPU EP (Eigen's LU in the element type, f16 through f32) agrees within its own
# rounding. A 0 x 0 matrix's determinant is 1, as in both.

def _check_det_shape(shape) -> None:
    if len(shape) < 2:
        raise RuntimeShapeError(f"Det: input must have rank >= 2 ([..., n, n]), got {pshape_str(shape)}")
    m, n = shape[-2], shape[-1]
    if m is not None and n is not None and m != n:
        raise RuntimeShapeError(f"Det: the matrices must be square, got {pshape_str(shape)} ({m} x {n})")


@kernel("Det")
def _det(inputs, attrs):
    (x,) = inputs
    _check_det_shape(x.shape)
    det = np.linalg.det(x.astype(np.float64))
    # LAPACK's pivot search passes over a NaN (its determinant can come out finite); the LU of ORT
    # and of the GPU kernel carries it into the result
    det = np.where(np.isnan(x).any(axis=(-2, -1)), np.nan, det)
    return [result(det.astype(np.float32), x.dtype)]  # f16 through f32, as ORT


@shape_rule("Det")
def _det_shape(types, values, attrs, num_outputs):
    shape = shape_of(types[0])
    if shape is None:
        return [tensor_type(elem_of(types[0]), None)]
    _check_det_shape(shape)
    return [tensor_type(elem_of(types[0]), tuple(shape[:-2]))]


register(OpDef("Det", (11, 22), ("T",), ("T",), {"T": {F32, F16}}, _det, shape_rule=_det_shape))
