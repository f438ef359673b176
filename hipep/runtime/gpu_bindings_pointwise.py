"""Pointwise GPU programs: `hipep::FusedElementwise` and every registry op with a pointwise
expression run a kernel rendered from that expression (`render_pointwise`, cached by the hash of
the expression and its dtypes); `_pointwise_bind` binds it (hipep.runtime.gpu_kernels' table)."""
from __future__ import annotations

import ctypes
import functools
import hashlib
import json
from typing import Sequence

import ml_dtypes  # noqa: F401  (registers numpy's 'bfloat16' dtype name)
import numpy as np

from ..ops.registry import lookup
from ..plan import split_op_key
from .gpu_binding_core import (FUSED, KernelOp, NoKernel, _prod, contiguous_strides, flat_config,
                               merge_dims, ptr)


# ---- pointwise ---------------------------------------------------------------------------------

class _Rendered:
    def __init__(self, name: str, source: str, n_in: int):
        self.name, self.source, self.n_in = name, source, n_in
        self.args_type = _pointwise_args_type(max(n_in, 1))


@functools.lru_cache(maxsize=None)
def _pointwise_args_type(n_in: int):
    from ..ops.pointwise_hip import MAX_RANK

    class PointwiseArgs(ctypes.Structure):
        _fields_ = [("n", ctypes.c_longlong), ("rank", ctypes.c_int), ("dims", ctypes.c_longlong * MAX_RANK),
                    ("strides", (ctypes.c_longlong * MAX_RANK) * n_in)]
    return PointwiseArgs


_RENDERED: dict[str, _Rendered] = {}
_BY_EXPRESSION: dict[tuple, _Rendered] = {}  # (expression, input dtypes, output dtypes) -> its rendering


def render_pointwise(expr, input_dtypes: Sequence[str], output_dtypes: Sequence[str]) -> _Rendered:
    """The rendered kernel for an expression and its dtypes (named by their hash, so the same
    program always has the same source and the kernel cache finds it)."""
    from ..ops.pointwise_hip import render_hip_kernel
    from .kernel_cache import pointwise_source

    seen = (expr, tuple(input_dtypes), tuple(output_dtypes))
    r = _BY_EXPRESSION.get(seen)
    if r is not None:  # (binding a new shape binds the same expressions again: no JSON, no hash)
        return r
    data = json.dumps([expr.to_data(), list(input_dtypes), list(output_dtypes)], sort_keys=True)
    key = hashlib.sha1(data.encode()).hexdigest()[:16]
    r = _RENDERED.get(key)
    if r is None:
        name = f"hipep_pw_{key}"
        r = _RENDERED[key] = _Rendered(name, pointwise_source(render_hip_kernel(expr, name, input_dtypes, output_dtypes)),
                                       len(input_dtypes))
    _BY_EXPRESSION[seen] = r
    return r


def pointwise_expression(op_key: str, attrs: dict, operands: Sequence):
    """The expression a pointwise launch computes (None where the op's semantics for these
    operands do not fit one: operand types it does not take, a Pow exponent of unknown size)."""
    from ..ops.elementwise import fused_expr

    if op_key == FUSED:
        return fused_expr(attrs)
    domain, op_type = split_op_key(op_key)
    op = lookup(domain, op_type)
    if op is None or op.pointwise is None:
        return None
    return op.pointwise(list(operands), attrs)


def _pointwise_bind(op_key: str):
    def bind(ins, outs, attrs, target):
        from ..ops.pointwise import Operand

        # Only constants' values may shape the expression (Pow's exponent): the program is bound
        # once per argument layout, and a constant cannot change under it.
        operands = [None if a is None else Operand(a.dtype, a.value if a.constant and a.size <= 16 else None, a.size)
                    for a in ins]
        expr = pointwise_expression(op_key, attrs, operands)
        if expr is None:
            raise NoKernel(f"{op_key} for inputs {[None if a is None else a.dtype.name for a in ins]}")
        return expression_ops(expr, ins, outs, target, op_key)
    return bind


def expression_ops(expr, ins, outs, target, what: str) -> list:
    """The launch computing `expr` elementwise over `outs`' shape, each input read through its own
    shape's broadcast strides (an input not in the expression's broadcast set is read as a scalar)."""
    from ..ops.pointwise_hip import MAX_RANK

    out_dtypes = [expr.nodes[o][1] for o in expr.outputs]
    in_dtypes = ["uint8" if a is None else a.dtype.name for a in ins]
    rendered = render_pointwise(expr, in_dtypes, out_dtypes)
    shape = next(o.shape for o in outs if o is not None)
    n = _prod(shape)
    if n == 0:
        return []
    out_ptrs = []
    for o, dt in zip(outs, out_dtypes):
        if o is not None:
            out_ptrs.append(ptr(o))
        else:  # a result nobody reads: the kernel still writes it somewhere
            out_ptrs.append(ctypes.c_uint64(target.scratch(n * np.dtype(dt).itemsize)))
    rank = len(shape)
    per_input = []
    for k, a in enumerate(ins):
        if a is None or k not in expr.broadcast:
            per_input.append([0] * rank)
            continue
        pad = rank - a.ndim
        st = contiguous_strides(a.shape)
        per_input.append([0] * pad + [0 if int(d) == 1 else s for d, s in zip(a.shape, st)])
    dims, strides = merge_dims(shape, per_input)
    if len(dims) > MAX_RANK:
        raise NoKernel(f"{what} over {len(dims)} broadcast axes (at most {MAX_RANK})")
    args_struct = rendered.args_type()
    args_struct.n, args_struct.rank = n, len(dims)
    for d, v in enumerate(dims):
        args_struct.dims[d] = v
    for k, s in enumerate(strides):
        for d, v in enumerate(s):
            args_struct.strides[k][d] = v
    grid, block = flat_config(n, target)
    return [KernelOp(rendered.name, grid, block, [ptr(a) for a in ins] + out_ptrs + [args_struct],
                     source=rendered.source)]


# ---- BatchNormalization (inference): a generated kernel over X with its per-channel parameters ---
# Not a registry pointwise op: the parameters [C] broadcast along axis 1, not the trailing axes, so
# the binding (hipep.runtime.gpu_group_norm) reads them through shapes [C, 1, ...] and computes ONNX
# Runtime's fused form as the CPU reference does: x * (scale / sqrt(var + epsilon)) + (B - mean * that),
# in f32.


def batch_norm_expression(dtypes: Sequence[str], epsilon: float):
    from ..ops.pointwise import F32, Builder, Operand

    b = Builder([Operand(np.dtype(d)) for d in dtypes])
    x, scale, bias, mean, var = (b.cast(b.input(k), F32) for k in range(5))
    new_scale = (1.0 / b.sqrt(var + np.float32(epsilon))) * scale
    return b.build(b.cast(x * new_scale + (bias - mean * new_scale), dtypes[0]))
