"""GPU bindings: ai.onnx MatMulInteger through kernels/matmul_integer.hip, and QLinearMatMul as
that product into the stream's workspace followed by one requantizing expression.

Registered into the kernel table (hipep.runtime.gpu_kernels) when it is imported.

A and B are int8 or uint8 in any mix (one kernel entry per pair), the output int32. The batch axes
broadcast as numpy's matmul does; the arithmetic is MatMul's (gpu_linalg.matmul_problem): merged
batch axes with a 0 stride where an operand broadcasts, or A's batch folded into rows where B is
one matrix. The products are exact and the sums wrap modulo 2^32, as ONNX Runtime's int32
accumulation and the CPU reference (hipep.ops.linalg) do.

Zero points are claimed where the CPU reference and ONNX Runtime's CPU EP accept them: one for A,
and for B one, one per column ([N]), or one per column of every matrix of B ([..., 1, N] with B's
batch axes). The ONNX spec also describes a per-row zero point of A ([M]); both references reject
it, so it is not claimed (the kernel and `bind` do handle it: a_zp_rows).

QLinearMatMul (opsets 10, 21) requantizes the int32 product as the CPU reference (hipep.ops.linalg)
and ONNX Runtime's MLAS do, in f32: scale = a_scale * b_scale / y_scale (each step rounded),
v = float(acc) * scale, clamped to the output type's range less y_zero_point, rounded half to even,
plus y_zero_point. b_scale may be per column ([N]); the other scales and y_zero_point are scalars.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..errors import HipepError
from .gpu_binding_core import Arg, KernelOp, NoKernel, _binding, _cdiv, _prod, ptr, workspace_regions
from .gpu_linalg import GEMM_MAX_BATCH_RANK, MAX_GRID_YZ, matmul_problem, matmul_shape_reason

TILE_M = TILE_N = 64  # kernels/matmul_integer.hip's HIPEP_MMI_BM / HIPEP_MMI_BN
THREADS = 256
_SHORT = {"int8": "i8", "uint8": "u8"}


class MatMulIntegerArgs(ctypes.Structure):
    _fields_ = [("m", ctypes.c_longlong), ("n", ctypes.c_longlong), ("k", ctypes.c_longlong),
                ("a_sm", ctypes.c_longlong), ("b_sk", ctypes.c_longlong), ("batch", ctypes.c_longlong),
                ("batch_dims", ctypes.c_longlong * GEMM_MAX_BATCH_RANK),
                ("a_batch", ctypes.c_longlong * GEMM_MAX_BATCH_RANK),
                ("b_batch", ctypes.c_longlong * GEMM_MAX_BATCH_RANK),
                ("a_zp_rows", ctypes.c_longlong), ("b_zp_cols", ctypes.c_longlong),
                ("b_zp_batched", ctypes.c_int), ("batch_rank", ctypes.c_int)]


def _known(shape) -> bool:
    return shape is not None and all(d is not None for d in shape)


def _at(seq, i):
    return seq[i] if seq is not None and i < len(seq) else None


def _b_zero_point_reason(zp_shape, b_shape) -> str | None:
    """Why B's zero point of this shape is not claimed (the CPU reference's rule, ops.linalg._zero_point)."""
    if not _known(zp_shape):
        return "b_zero_point's shape is unknown at claim time"
    zp = [int(d) for d in zp_shape]
    if len(zp) <= 1 and _prod(zp) == 1:
        return None
    if b_shape is None or len(b_shape) < 2:
        return f"b_zero_point of shape {zp} for B of rank {None if b_shape is None else len(b_shape)}"
    n = b_shape[-1]
    if len(zp) == 1:
        return None if n is not None and zp[0] == int(n) else f"b_zero_point of shape {zp} is not one per column of B"
    if len(zp) == len(b_shape) and _known(b_shape) and zp[-2:] == [1, int(n)] and \
            zp[:-2] == [int(d) for d in b_shape[:-2]]:
        return None
    return f"b_zero_point of shape {zp} is not one per column of B {list(b_shape)}"


def _check(attrs, dtypes, shapes, values):
    a_dt, b_dt = _at(dtypes, 0), _at(dtypes, 1)
    if a_dt not in _SHORT or b_dt not in _SHORT:
        return f"element types {a_dt}/{b_dt} (int8 and uint8 are supported)"
    a, b = _at(shapes, 0), _at(shapes, 1)
    if a is None or b is None:
        return "the ranks of A and B are unknown at claim time (their batch axes may not merge)"
    if _at(dtypes, 2):
        zp = _at(shapes, 2)
        if not _known(zp):
            return "a_zero_point's shape is unknown at claim time"
        if len(zp) > 1 or _prod(zp) != 1:
            return (f"a_zero_point of shape {list(zp)}: only a per-tensor zero point of A (ONNX Runtime's CPU EP "
                    f"and the CPU reference reject per-row ones)")
    if _at(dtypes, 3):
        why = _b_zero_point_reason(_at(shapes, 3), b)
        if why is not None:
            return why
    if not a or not b:
        return None  # a rank-0 operand: the shape rule reports it
    return matmul_shape_reason(a, b)


@_binding("::MatMulInteger", check=_check, modules=("matmul_integer",))
def _matmul_integer_bind(ins, outs, attrs, target):
    a, b, y = ins[0], ins[1], outs[0]
    a_zp = ins[2] if len(ins) > 2 else None
    b_zp = ins[3] if len(ins) > 3 else None
    if y is None:
        return []
    return matmul_integer_ops(a, b, a_zp, b_zp, y)


def matmul_integer_ops(a: Arg, b: Arg, a_zp: Arg | None, b_zp: Arg | None, y: Arg) -> list:
    """The launch computing Y = (A - a_zp) @ (B - b_zp) in int32."""
    names = [a.dtype.name, b.dtype.name]
    if any(n not in _SHORT for n in names) or y.dtype.name != "int32":
        raise NoKernel(f"MatMulInteger on {names[0]}/{names[1]} -> {y.dtype.name}")
    p = matmul_problem(a.shape, b.shape)
    if p.m * p.n * p.batch == 0:
        return []
    if y.size != p.batch * p.m * p.n:
        raise HipepError(f"output of {y.size} elements for a product of {p.batch} x {p.m} x {p.n}")
    g = MatMulIntegerArgs()
    g.m, g.n, g.k, g.a_sm, g.b_sk, g.batch = p.m, p.n, p.k, p.a_sm, p.b_sk, p.batch
    g.batch_rank = len(p.batch_dims)
    for d, (e, sa, sb) in enumerate(zip(p.batch_dims, p.a_batch, p.b_batch)):
        g.batch_dims[d], g.a_batch[d], g.b_batch[d] = e, sa, sb
    if a_zp is not None and a_zp.size != 1:
        rows = 1 if len(a.shape) == 1 else int(a.shape[-2])
        if a_zp.size != rows:
            raise HipepError(f"MatMulInteger: a_zero_point of shape {list(a_zp.shape)} for A {list(a.shape)}")
        g.a_zp_rows = rows  # per row of A; modulo: A's batch may be folded into rows
    if b_zp is not None and b_zp.size != 1:
        g.b_zp_cols = 1
        # [..., 1, N] with B's batch axes: one row of zero points per matrix of B.
        g.b_zp_batched = int(len(b_zp.shape) > 2 and _prod(b_zp.shape[:-2]) > 1)
    grid = (_cdiv(p.n, TILE_N), min(_cdiv(p.m, TILE_M), MAX_GRID_YZ), min(p.batch, MAX_GRID_YZ))
    entry = f"hipep_matmul_integer_{_SHORT[names[0]]}_{_SHORT[names[1]]}"
    params = [ptr(a), ptr(b), ptr(a_zp), ptr(b_zp), ptr(y), g]
    return [KernelOp(entry, grid, (THREADS, 1, 1), params, module="matmul_integer")]


# ---- QLinearMatMul ---------------------------------------------------------------------------------

# QLinearMatMul's inputs: a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point
_A, _A_SCALE, _A_ZP, _B, _B_SCALE, _B_ZP, _Y_SCALE, _Y_ZP = range(8)
_INT32 = np.dtype(np.int32)


def _scalar_reason(name: str, shape) -> str | None:
    if not _known(shape):
        return f"{name}'s shape is unknown at claim time"
    if len(shape) > 1 or _prod(shape) != 1:
        return f"{name} of shape {list(shape)} (one value is supported)"
    return None


def _qlinear_check(attrs, dtypes, shapes, values):
    a_dt, b_dt, y_dt = _at(dtypes, _A), _at(dtypes, _B), _at(dtypes, _Y_ZP)
    if y_dt not in _SHORT:
        return f"y_zero_point of type {y_dt} (int8 and uint8 are supported)"
    why = _check(attrs, [a_dt, b_dt, _at(dtypes, _A_ZP), _at(dtypes, _B_ZP)],
                 [_at(shapes, _A), _at(shapes, _B), _at(shapes, _A_ZP), _at(shapes, _B_ZP)], None)
    if why is not None:
        return why
    scales = {_at(dtypes, i) for i in (_A_SCALE, _B_SCALE, _Y_SCALE)}
    if len(scales) != 1 or not scales <= {"float32", "float16"}:
        return f"scales of types {sorted(map(str, scales))} (one of float32 and float16 for all three)"
    for name, pos in (("a_scale", _A_SCALE), ("y_scale", _Y_SCALE), ("y_zero_point", _Y_ZP)):
        why = _scalar_reason(name, _at(shapes, pos))
        if why is not None:
            return why
    b, b_scale = _at(shapes, _B), _at(shapes, _B_SCALE)
    if not _known(b_scale):
        return "b_scale's shape is unknown at claim time"
    if len(b_scale) <= 1 and _prod(b_scale) == 1:
        return None
    if len(b_scale) == 1 and len(b) >= 2 and b[-1] is not None and int(b_scale[0]) == int(b[-1]):
        return None
    return f"b_scale of shape {list(b_scale)} is not one per column of B {list(b)}"


def requantize_expression(y_dtype: str, scale_dtype: str = "float32"):
    """(acc int32, a_scale, b_scale, y_scale, y_zero_point) -> y, the CPU reference's steps in f32
    (f16 scales, opset 21's, widened first). A NaN product (a NaN or 0/0 scale) gives y_zero_point,
    as the reference's conversion does."""
    from ..ops.pointwise import F32, Builder, Operand

    b = Builder([Operand(_INT32)] + [Operand(np.dtype(scale_dtype))] * 3 + [Operand(np.dtype(y_dtype))])
    scale = b.cast(b.input(1), F32) * b.cast(b.input(2), F32) / b.cast(b.input(3), F32)
    v = b.cast(b.input(0), F32) * scale
    zero = b.const(0, F32)
    v = b.where(b.isnan(v), zero, v)
    zp = b.cast(b.input(4), F32)
    info = np.iinfo(y_dtype)
    v = b.min(b.max(v, b.const(info.min, F32) - zp), b.const(info.max, F32) - zp)
    q = b.cast(b.rint(v), "int32") + b.cast(b.input(4), "int32")
    return b.build(b.cast(q, y_dtype))


@_binding("::QLinearMatMul", check=_qlinear_check, modules=("matmul_integer",))
def _qlinear_matmul_bind(ins, outs, attrs, target):
    from .gpu_bindings_pointwise import expression_ops

    y = outs[0]
    if y is None or y.size == 0:
        return []
    if y.dtype.name not in _SHORT:
        raise NoKernel(f"QLinearMatMul to {y.dtype.name}")
    (acc_at,) = workspace_regions(target, "QLinearMatMul", [y.size * 4])
    acc = Arg(acc_at, tuple(y.shape), _INT32)
    ops = matmul_integer_ops(ins[_A], ins[_B], ins[_A_ZP], ins[_B_ZP], acc)
    params = [acc, ins[_A_SCALE], ins[_B_SCALE], ins[_Y_SCALE], ins[_Y_ZP]]
    return ops + expression_ops(requantize_expression(y.dtype.name, ins[_A_SCALE].dtype.name), params, [y], target,
                                "QLinearMatMul")
