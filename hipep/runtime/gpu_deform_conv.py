"""GPU binding: DeformConv (opsets 19, 22), kernels/deform_conv.hip and Conv's GEMM.

Registered into the kernel table (hipep.runtime.gpu_kernels) when it is imported.

Two steps, as ONNX Runtime's kernels and Conv's: the columns [N, C, kH * kW, oH * oW] (each tap's
bilinear sample at its learned offset, times the mask where there is one) are written to the
stream's workspace by one launch, one thread per element; then W [M, C/group * kH * kW] times them
per image and group, plus B, is the GEMM Conv runs after its im2col (gpu_linalg.window_products:
hipep's kernels or cuBLASLt). The host checks the shapes with the CPU reference's own rule
(hipep.ops.deform_conv.deform_params). f32, f16 (sampled in f32, the columns stored in f16 for an
f16 GEMM) and f64 (sampled in f64; the f64 GEMM).
"""
from __future__ import annotations

import ctypes
from types import SimpleNamespace

from ..ops.deform_conv import deform_params
from .gpu_binding_core import Arg, KernelOp, _binding, flat_config, ptr, workspace_after, workspace_regions
from .gpu_linalg import window_products

_TYPES = {"float32": "f32", "float16": "f16", "float64": "f64"}


class DeformConvArgs(ctypes.Structure):
    """kernels/deform_conv.hip's hipep_deform_conv_args."""
    _fields_ = [(name, ctypes.c_longlong) for name in (
        "total", "channels", "height", "width", "kernel_w", "taps", "out_w", "positions", "stride_h", "stride_w",
        "dilation_h", "dilation_w", "pad_h", "pad_w", "group_channels", "offset_groups")] + [("has_mask", ctypes.c_int)]


def _check(attrs, dtypes, shapes, values):
    if not dtypes or dtypes[0] not in _TYPES:
        return f"element type {dtypes[0] if dtypes else '?'}"
    return None


@_binding("::DeformConv", check=_check, modules=("deform_conv", "gemm"))
def _deform_conv_bind(ins, outs, attrs, target):
    x, w, offset, y = ins[0], ins[1], ins[2], outs[0]
    b = ins[3] if len(ins) > 3 else None
    mask = ins[4] if len(ins) > 4 else None
    if y is None or y.size == 0:
        return []
    p = deform_params(list(x.shape), list(w.shape), list(offset.shape), None if b is None else list(b.shape),
                      None if mask is None else list(mask.shape), attrs)
    n, c, height, width = (int(d) for d in x.shape)
    (kh, kw), (oh, ow) = p["kernel"], p["out"]
    taps, positions = kh * kw, oh * ow
    total = n * c * taps * positions
    cols_bytes = total * x.dtype.itemsize
    (cols_at,) = workspace_regions(target, "DeformConv", [cols_bytes])
    cols = Arg(cols_at, (total,), x.dtype)
    args = DeformConvArgs(total, c, height, width, kw, taps, ow, positions, *p["strides"], *p["dilations"],
                          p["pads"][0], p["pads"][1], c // p["offset_group"], p["offset_group"], int(mask is not None))
    grid, block = flat_config(total, target)
    ops = [KernelOp(f"hipep_deform_conv_columns_{_TYPES[x.dtype.name]}", grid, block,
                    [ptr(x), ptr(offset), ptr(mask), ptr(cols), args], module="deform_conv")] if total else []
    window = SimpleNamespace(kernel=[kh, kw], out=[oh, ow])
    return ops + window_products(window, n, c, w, cols, b, y, p["group"], workspace_after(target, [cols_bytes]))
