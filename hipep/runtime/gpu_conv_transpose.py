"""GPU bindings: ConvTranspose and Col2Im (registered in hipep.runtime.gpu_kernels' table on import).

ConvTranspose (1 to 3 spatial axes, any stride, dilation, padding, output_padding, output_shape,
auto_pad and group; f32, f16) is a GEMM and a col2im:
  * the product of each group's weights, transposed, with the image: W [C, M/G, *kernel] seen
    as [G, C/G, M/G * kernel], X [N, C, *in] as [N, G, C/G, in], gives the columns
    [N, G, M/G * kernel, in] = [N, M, *kernel, *in] in the stream's workspace (gpu_linalg's
    gemm_ops: cuBLASLt or hipep's own GEMM);
  * kernels/col2im.hip sums the columns into Y [N, M, *out]: a thread per output element adds
    the taps that land on it in a fixed order (no atomics: the same result every run), then the
    bias.
Col2Im (opset 18) is the second step alone, its input already the columns.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..errors import HipepError
from .gpu_binding_core import workspace_after, workspace_regions
from .gpu_kernels import Arg, KernelOp, NoKernel, _binding, _dt, _prod, flat_config, ptr
from .gpu_linalg import GemmProblem, gemm_ops, merge_dims

COL2IM_AXES = 3  # kernels/col2im.hip's HIPEP_COL2IM_AXES: spatial axes, padded at the front
_TYPES = ("float32", "float16")


class Col2ImArgs(ctypes.Structure):
    _fields_ = [("n", ctypes.c_longlong), ("channels", ctypes.c_longlong),
                ("out", ctypes.c_longlong * COL2IM_AXES), ("grid", ctypes.c_longlong * COL2IM_AXES),
                ("kernel", ctypes.c_longlong * COL2IM_AXES), ("stride", ctypes.c_longlong * COL2IM_AXES),
                ("dilation", ctypes.c_longlong * COL2IM_AXES), ("pad", ctypes.c_longlong * COL2IM_AXES)]


def col2im_op(cols: Arg, bias: Arg | None, y: Arg, rows: int, channels: int, out, grid, kernel, strides,
              dilations, pads_begin, target) -> list:
    """The launch summing columns [rows, *kernel, *grid] into y [rows, *out] (plus bias[row %
    channels] where given); per spatial axis, window position i and tap k land on
    i * stride + k * dilation - pad_begin."""
    dt = _dt(y.dtype, "col2im")
    if dt not in ("f32", "f16"):
        raise NoKernel(f"col2im on {y.dtype.name}")
    nsp = len(out)
    if nsp > COL2IM_AXES:
        raise NoKernel(f"col2im over {nsp} spatial axes (at most {COL2IM_AXES})")
    total = rows * _prod(out)
    if total == 0:
        return []
    pad = COL2IM_AXES - nsp
    args = Col2ImArgs()
    args.n, args.channels = total, max(1, channels)
    for name, values, fill in (("out", out, 1), ("grid", grid, 1), ("kernel", kernel, 1), ("stride", strides, 1),
                               ("dilation", dilations, 1), ("pad", pads_begin, 0)):
        field = getattr(args, name)
        for d, v in enumerate([fill] * pad + [int(v) for v in values]):
            field[d] = v
    grid_dims, block = flat_config(total, target)
    return [KernelOp(f"hipep_col2im_{dt}", grid_dims, block, [ptr(cols), ptr(bias), ptr(y), args], module="col2im")]


def _spatial_count(shapes, attrs) -> int | None:
    for s in shapes[:2]:
        if s is not None:
            return len(s) - 2
    for name, per_axis in (("kernel_shape", 1), ("strides", 1), ("dilations", 1), ("output_padding", 1),
                           ("output_shape", 1), ("pads", 2)):
        v = attrs.get(name)
        if v is not None:
            return len(v) // per_axis
    return None


def _conv_transpose_check(attrs, dtypes, shapes, values):
    if not dtypes or dtypes[0] not in _TYPES:
        return f"element type {dtypes[0] if dtypes else '?'}"
    shapes = list(shapes) + [None] * 2
    nsp = _spatial_count(shapes, attrs)
    if nsp is None:
        return "the rank of X and W is not known when the node is claimed"
    if not 1 <= nsp <= COL2IM_AXES:
        return f"ConvTranspose over {nsp} spatial axes (1 to {COL2IM_AXES})"
    return None


@_binding("::ConvTranspose", check=_conv_transpose_check, modules=("gemm", "col2im"))
def _conv_transpose_bind(ins, outs, attrs, target):
    from ..ops.vision import _transpose_geometry

    x, w, y = ins[0], ins[1], outs[0]
    b = ins[2] if len(ins) > 2 else None
    if y is None or y.size == 0:
        return []
    if x.ndim < 3 or w.ndim != x.ndim:
        raise HipepError(f"ConvTranspose: X {list(x.shape)} and W {list(w.shape)} must have one rank >= 3")
    n, c = int(x.shape[0]), int(x.shape[1])
    group = int(attrs.get("group", 1))
    lengths, kernel = [int(d) for d in x.shape[2:]], [int(d) for d in w.shape[2:]]
    if int(w.shape[0]) != c or c % group:
        raise HipepError(f"ConvTranspose: W {list(w.shape)} does not fit X {list(x.shape)} with group={group}")
    geo, strides, dilations = _transpose_geometry("ConvTranspose", lengths, kernel, attrs)
    out = [g[0] for g in geo]
    mg = int(w.shape[1])
    m, cg = mg * group, c // group
    if list(y.shape) != [n, m] + out:
        raise HipepError(f"ConvTranspose: output of shape {list(y.shape)}, expected {[n, m] + out}")
    kp, p = _prod(kernel), _prod(lengths)
    e = x.dtype.itemsize
    # The columns [N, G, Mg * kernel, P] = [N, M, *kernel, *in]: per (image, group) W[g]^T @ X[n, g].
    cols_bytes = n * m * kp * p * e
    (cols_at,) = workspace_regions(target, "ConvTranspose", [cols_bytes])
    cols = Arg(cols_at, (n * m * kp * p,), x.dtype)
    rows_g = mg * kp
    # The products' own workspace (cuBLASLt's, the split GEMV's) lies past the columns.
    gemm_target = workspace_after(target, [cols_bytes])
    batch, (a_batch, b_batch, _) = merge_dims([n, group], [[0, cg * rows_g], [c * p, cg * p],
                                                           [group * rows_g * p, rows_g * p]])
    problem = GemmProblem(rows_g, p, cg, a_sm=1, a_sk=rows_g, b_sk=p, b_sn=1, batch_dims=batch, a_batch=a_batch,
                          b_batch=b_batch)
    ops = gemm_ops(problem, w, x, None, cols, gemm_target)
    pads_begin = [g[1] for g in geo]
    return ops + col2im_op(cols, b, y, n * m, m, out, lengths, kernel, strides, dilations, pads_begin, target)


# ---- Col2Im --------------------------------------------------------------------------------------

def _col2im_check(attrs, dtypes, shapes, values):
    if not dtypes or dtypes[0] not in _TYPES:
        return f"element type {dtypes[0] if dtypes else '?'}"
    values, shapes = list(values or ()) + [None] * 3, list(shapes or ()) + [None] * 3
    # The launch reads block_shape's values at launch, a constant's or, handed in at run time, from
    # host-visible memory (a registry host input: the plan copies it there, and the shape program
    # reads its elements as symbols); image_shape's are the output's spatial extents.
    if values[2] is not None:
        count = int(np.asarray(values[2]).size)
    else:  # the number of spatial axes from an operand's static length
        count = next((int(s[0]) for s in (shapes[2], shapes[1]) if s is not None and len(s) == 1 and s[0] is not None),
                     None)
        if count is None:
            return "block_shape and image_shape of unknown length (the number of spatial axes)"
    if not 1 <= count <= COL2IM_AXES:
        return f"Col2Im over {count} spatial axes (1 to {COL2IM_AXES})"
    return None


@_binding("::Col2Im", check=_col2im_check, modules=("col2im",), reads_values=True)
def _col2im_bind(ins, outs, attrs, target):
    from ..ops.vision import _col2im_geometry

    x, y = ins[0], outs[0]
    if y is None or y.size == 0:
        return []
    if ins[2].value is None:
        raise HipepError("Col2Im: block_shape must be readable by the host at launch")
    block = [int(v) for v in np.asarray(ins[2].value).reshape(-1)]
    image = [int(d) for d in y.shape[2:]]  # image_shape's values, which the host may not read
    win = _col2im_geometry("Col2Im", tuple(int(d) for d in x.shape), image, block, attrs)
    n, ck = int(x.shape[0]), int(x.shape[1])
    c = ck // _prod(block)
    if list(y.shape) != [n, c] + image:
        raise HipepError(f"Col2Im: output of shape {list(y.shape)}, expected {[n, c] + image}")
    return col2im_op(x, None, y, n * c, c, image, win.out, block, win.strides, win.dilations, win.pb, target)

