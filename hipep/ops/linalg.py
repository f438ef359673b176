"""Linear algebra: MatMul (numpy matmul semantics) and Gemm. f16 accumulates in f32."""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ._common import (at, broadcast_partial, elem_of, kernel, pshape_str, result, shape_of,
                      shape_rule, shape_str, tensor_type, unidirectional_ok, upcast)
from .registry import FLOATS, NUMERIC, OpDef, register


@kernel("MatMul")
def _matmul(inputs, attrs):
    a, b = inputs
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeShapeError(f"MatMul: inputs must have rank >= 1: A is {shape_str(a.shape)}, "
                                f"B is {shape_str(b.shape)}")
    k_a = a.shape[-1]
    k_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if k_a != k_b:
        which = "first" if b.ndim == 1 else "second-to-last"
        raise RuntimeShapeError(
            f"MatMul: inner dimensions disagree: A is {shape_str(a.shape)}, B is "
            f"{shape_str(b.shape)} (A's last dim {k_a} != B's {which} dim {k_b})")
    batch_a = a.shape[:-2]
    batch_b = b.shape[:-2]
    try:
        np.broadcast_shapes(batch_a, batch_b)
    except ValueError:
        raise RuntimeShapeError(
            f"MatMul: batch dimensions cannot be broadcast: A is {shape_str(a.shape)} (batch "
            f"{shape_str(batch_a)}), B is {shape_str(b.shape)} (batch {shape_str(batch_b)})") from None
    return [result(np.matmul(upcast(a), upcast(b)), a.dtype)]


@shape_rule("MatMul")
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


register(OpDef("MatMul", (1, 9, 13), ("T", "T"), ("T",), {"T": NUMERIC}, _matmul,
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
