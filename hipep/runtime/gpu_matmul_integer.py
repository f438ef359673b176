"""GPU bindings: the integer products. ai.onnx MatMulInteger through kernels/matmul_integer.hip,
QLinearMatMul as that product into the stream's workspace followed by one requantizing expression,
and the integer convolutions ConvInteger and QLinearConv as Conv's im2col (gpu_linalg) followed by
the same product (and, for QLinearConv, the requantizing expression).

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
v = float(acc) * scale, clamped to the output type's range less y_zero_point (a NaN to its low
end), rounded half to even, plus y_zero_point. b_scale may be per column ([N]); the other scales
and y_zero_point are scalars.

ConvInteger and QLinearConv (hipep.ops.conv_integer) copy X's windows as Conv does ([N, C * kernel,
out] in the stream's workspace), filling the padding with x_zero_point itself (the copy reads it
from device memory), so that a padded tap's X - x_zero_point is 0; then W [G, M/G, C/G * kernel]
times each image's group of windows is one batched integer product, W's zero point one value or
one per output channel (the kernel's a_zp_batched for a group's share). QLinearConv's expression
adds the int32 bias (wrapping), scales by x_scale * w_scale[m] / y_scale (w_scale one value or per
output channel) and requantizes as QLinearMatMul. Grouped and depthwise convolutions run as that
batched product too (a depthwise one is a 1-row product per image and channel: correct, not fast).
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..errors import HipepError
from .gpu_binding_core import Arg, KernelOp, NoKernel, _binding, _cdiv, _prod, ptr, workspace_regions
from .gpu_linalg import (CONV_MAX_SPATIAL, GEMM_MAX_BATCH_RANK, MAX_GRID_YZ, GemmProblem, conv_cols_elements,
                         conv_product_problem, conv_window, matmul_problem, matmul_shape_reason, window_ops)

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
                ("a_zp_batched", ctypes.c_int), ("b_zp_batched", ctypes.c_int), ("batch_rank", ctypes.c_int)]


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
    p = matmul_problem(a.shape, b.shape)
    a_zp_rows = b_zp_cols = 0
    b_zp_batched = False
    if a_zp is not None and a_zp.size != 1:
        a_zp_rows = 1 if len(a.shape) == 1 else int(a.shape[-2])  # modulo: A's batch may be folded into rows
        if a_zp.size != a_zp_rows:
            raise HipepError(f"MatMulInteger: a_zero_point of shape {list(a_zp.shape)} for A {list(a.shape)}")
    if b_zp is not None and b_zp.size != 1:
        b_zp_cols = 1
        # [..., 1, N] with B's batch axes: one row of zero points per matrix of B.
        b_zp_batched = len(b_zp.shape) > 2 and _prod(b_zp.shape[:-2]) > 1
    return integer_product_ops(p, a, b, a_zp, b_zp, y, a_zp_rows=a_zp_rows, b_zp_cols=b_zp_cols,
                               b_zp_batched=b_zp_batched)


def integer_product_ops(p: GemmProblem, a: Arg, b: Arg, a_zp: Arg | None, b_zp: Arg | None, y: Arg, *,
                        a_zp_rows: int = 0, a_zp_batched: bool = False, b_zp_cols: int = 0,
                        b_zp_batched: bool = False) -> list:
    """The launch computing p's product (A's k and B's n contiguous, Y contiguous [batch, m, n]) of
    A - a_zp and B - b_zp in int32. a_zp: one value, or one per row (a_zp_rows: rows counted modulo
    it; a_zp_batched: a_zp_rows of them per matrix of A, at a_off / k); b_zp: one value, or one per
    column (b_zp_cols 1; b_zp_batched: a row of them per matrix of B, at b_off / k)."""
    names = [a.dtype.name, b.dtype.name]
    if any(n not in _SHORT for n in names) or y.dtype.name != "int32":
        raise NoKernel(f"an integer product of {names[0]}/{names[1]} -> {y.dtype.name}")
    if p.m * p.n * p.batch == 0:
        return []
    if y.size != p.batch * p.m * p.n:
        raise HipepError(f"output of {y.size} elements for a product of {p.batch} x {p.m} x {p.n}")
    g = MatMulIntegerArgs()
    g.m, g.n, g.k, g.a_sm, g.b_sk, g.batch = p.m, p.n, p.k, p.a_sm, p.b_sk, p.batch
    g.batch_rank = len(p.batch_dims)
    for d, (e, sa, sb) in enumerate(zip(p.batch_dims, p.a_batch, p.b_batch)):
        g.batch_dims[d], g.a_batch[d], g.b_batch[d] = e, sa, sb
    g.a_zp_rows, g.a_zp_batched = a_zp_rows, int(a_zp_batched)
    g.b_zp_cols, g.b_zp_batched = b_zp_cols, int(b_zp_batched)
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


def _requantized(b, v, zp_input: int, y_dtype: str):
    """MLAS's requantization of the f32 products `v` (ops.mlas.requantize_output): clamped to the
    output type's range less y_zero_point (input `zp_input`), a NaN to its low end, rounded half
    to even, plus y_zero_point."""
    from ..ops.pointwise import F32

    zp = b.cast(b.input(zp_input), F32)
    info = np.iinfo(y_dtype)
    lo, hi = b.const(info.min, F32) - zp, b.const(info.max, F32) - zp
    v = b.where(b.isnan(v), lo, b.min(b.max(v, lo), hi))
    return b.cast(b.cast(b.rint(v), "int32") + b.cast(b.input(zp_input), "int32"), y_dtype)


def requantize_expression(y_dtype: str, scale_dtype: str = "float32"):
    """(acc int32, a_scale, b_scale, y_scale, y_zero_point) -> y, the CPU reference's steps in f32
    (f16 scales, opset 21's, widened first)."""
    from ..ops.pointwise import F32, Builder, Operand

    b = Builder([Operand(_INT32)] + [Operand(np.dtype(scale_dtype))] * 3 + [Operand(np.dtype(y_dtype))])
    scale = b.cast(b.input(1), F32) * b.cast(b.input(2), F32) / b.cast(b.input(3), F32)
    return b.build(_requantized(b, b.cast(b.input(0), F32) * scale, 4, y_dtype))


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


# ---- ConvInteger and QLinearConv: Conv's im2col, then the integer product ------------------------

# QLinearConv's inputs: x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B
_X, _X_SCALE, _X_ZP, _W, _W_SCALE, _W_ZP, _QY_SCALE, _QY_ZP, _BIAS = range(9)


def _integer_conv_reason(what: str, x_dtype, w_dtype, x_shape) -> str | None:
    if x_dtype not in _SHORT or w_dtype not in _SHORT:
        return f"element types {x_dtype}/{w_dtype} (int8 and uint8 are supported)"
    if x_shape is not None and len(x_shape) - 2 > CONV_MAX_SPATIAL:
        return f"{what} over {len(x_shape) - 2} spatial axes (at most {CONV_MAX_SPATIAL})"
    return None


def _conv_integer_check(attrs, dtypes, shapes, values):
    return _integer_conv_reason("ConvInteger", _at(dtypes, 0), _at(dtypes, 1), _at(shapes, 0))


def _qlinear_conv_check(attrs, dtypes, shapes, values):
    if _at(dtypes, _QY_ZP) not in _SHORT:
        return f"y_zero_point of type {_at(dtypes, _QY_ZP)} (int8 and uint8 are supported)"
    return _integer_conv_reason("QLinearConv", _at(dtypes, _X), _at(dtypes, _W), _at(shapes, _X))


def _conv_layout(attrs, x: Arg, w: Arg):
    """(windows, images, channels, output channels, groups) of the convolution, as Conv's binding
    reads them."""
    win = conv_window(attrs, x.shape, w.shape)
    return win, int(x.shape[0]), int(x.shape[1]), int(w.shape[0]), int(attrs.get("group", 1))


def conv_integer_ops(x: Arg, w: Arg, x_zp: Arg | None, w_zp: Arg | None, acc: Arg, attrs, cols_at: int,
                     target, what: str) -> list:
    """The launches computing acc [N, M, *out] = conv(X - x_zp, W - w_zp) in int32: X's windows
    copied to cols_at as [N, C * kernel, out] (Conv's im2col), where they reach into the padding
    with x_zp itself (so that a padded tap's X - x_zp is 0); then, per image and group,
    W[g] [M/G, C/G * kernel] times the group's windows, one batched integer product. w_zp is one
    value or one per output channel (a_zp_batched: a group's M/G of them). `what` names the op in
    errors."""
    win, n, c, m, group = _conv_layout(attrs, x, w)
    if m % group or c % group:
        raise HipepError(f"{what}: X of {c} channels and W of {m} output channels for group={group}")
    mg = m // group
    cols = Arg(cols_at, (conv_cols_elements(win, n, c),), x.dtype)
    ops = window_ops(x, cols, win, True, b"", target, fill_src=x_zp)
    problem = conv_product_problem(win, n, c, m, group)
    rows = 0
    if w_zp is not None and w_zp.size != 1:
        if w_zp.size != m:
            raise HipepError(f"{what}: w_zero_point of shape {list(w_zp.shape)} for W {list(w.shape)} (one value "
                             f"or one per output channel)")
        rows = mg
    if x_zp is not None and x_zp.size != 1:
        raise HipepError(f"{what}: x_zero_point of shape {list(x_zp.shape)} (one value)")
    return ops + integer_product_ops(problem, w, cols, w_zp, x_zp, acc, a_zp_rows=rows,
                                     a_zp_batched=bool(rows) and group > 1)


@_binding("::ConvInteger", check=_conv_integer_check, modules=("copy", "matmul_integer"))
def _conv_integer_bind(ins, outs, attrs, target):
    x, w, y = ins[0], ins[1], outs[0]
    if y is None or y.size == 0:
        return []
    win, n, c, _, _ = _conv_layout(attrs, x, w)
    (cols_at,) = workspace_regions(target, "ConvInteger", [conv_cols_elements(win, n, c) * x.dtype.itemsize])
    return conv_integer_ops(x, w, _at(ins, 2), _at(ins, 3), y, attrs, cols_at, target, "ConvInteger")


def conv_requantize_expression(y_dtype: str, bias: bool):
    """(acc int32, B int32 or omitted, x_scale, w_scale, y_scale, y_zero_point) -> y, the CPU
    reference's steps (ops.conv_integer): acc + B wrapping in int32; scale = x_scale * w_scale /
    y_scale in f32, left to right; then MLAS's requantization of float(acc) * scale."""
    from ..ops.pointwise import F32, Builder, Operand

    f32 = np.dtype(np.float32)
    b = Builder([Operand(_INT32), Operand(_INT32) if bias else None, Operand(f32), Operand(f32), Operand(f32),
                 Operand(np.dtype(y_dtype))])
    acc = b.input(0)
    if bias:  # in int64, then back: the int32 sum's wraparound without C's signed overflow
        acc = b.cast(b.cast(acc, "int64") + b.cast(b.input(1), "int64"), "int32")
    scale = b.input(2) * b.input(3) / b.input(4)
    return b.build(_requantized(b, b.cast(acc, F32) * scale, 5, y_dtype))


def _per_channel_view(a: Arg | None, m: int, rank: int, what: str) -> Arg | None:
    """A per-output-channel operand ([M]) as [M, 1, ...] against Y [N, M, *out] of `rank` axes; one
    value stays as it is."""
    if a is None or a.size == 1:
        return a
    if a.size != m:
        raise HipepError(f"QLinearConv: {what} of shape {list(a.shape)} (one value or one per output channel, {m}, "
                         f"expected)")
    return Arg(a.ptr, (m,) + (1,) * (rank - 2), a.dtype)


@_binding("::QLinearConv", check=_qlinear_conv_check, modules=("copy", "matmul_integer"))
def _qlinear_conv_bind(ins, outs, attrs, target):
    from .gpu_bindings_pointwise import expression_ops

    x, w, y = ins[_X], ins[_W], outs[0]
    if y is None or y.size == 0:
        return []
    if y.dtype.name not in _SHORT:
        raise NoKernel(f"QLinearConv to {y.dtype.name}")
    win, n, c, m, _ = _conv_layout(attrs, x, w)
    cols_at, acc_at = workspace_regions(target, "QLinearConv", [conv_cols_elements(win, n, c) * x.dtype.itemsize,
                                                                 y.size * 4])
    acc = Arg(acc_at, tuple(y.shape), _INT32)
    ops = conv_integer_ops(x, w, ins[_X_ZP], ins[_W_ZP], acc, attrs, cols_at, target, "QLinearConv")
    bias = _at(ins, _BIAS)
    rank = len(y.shape)
    params = [acc, _per_channel_view(bias, m, rank, "B"), ins[_X_SCALE],
              _per_channel_view(ins[_W_SCALE], m, rank, "w_scale"), ins[_QY_SCALE], ins[_QY_ZP]]
    return ops + expression_ops(conv_requantize_expression(y.dtype.name, bias is not None), params, [y], target,
                                "QLinearConv")
