"""GPU bindings of DFT, STFT and the window functions (kernels/dft.hip): one launch, a thread an
output element, the sum over the transform's length in double (the CPU device's reference computes
in double too). dft_length, the axis, frame_step, frame_length and a window's size are host inputs:
the shapes and the launch's arguments come from them.

Registered into the kernel table (hipep.runtime.gpu_kernels) when it is imported."""
from __future__ import annotations

import ctypes

from ..errors import HipepError
from ..ops._common import type_name
from ..ops.registry import F32, F64
from ..ops.signal import (WINDOW_COEFFICIENTS, dft_axis, dft_length, dft_output_shape, stft_bins, stft_frames,
                          window_increment, window_size)
from .gpu_binding_core import KernelOp, NoKernel, _binding, _prod, _values_or_attr, flat_config, ptr

_DFT_TYPES = {"float32": "f32", "float64": "f64"}


class DftArgs(ctypes.Structure):
    _fields_ = [("outer", ctypes.c_longlong), ("inner", ctypes.c_longlong), ("in_len", ctypes.c_longlong),
                ("out_len", ctypes.c_longlong), ("n", ctypes.c_longlong), ("complex_in", ctypes.c_int),
                ("mode", ctypes.c_int)]


def _dft_check(attrs, dtypes, shapes, values):
    if not dtypes or dtypes[0] not in _DFT_TYPES:
        return f"element type {dtypes[0] if dtypes else '?'}"
    return None


def _kernel_type(x, op_type: str) -> str:
    dt = _DFT_TYPES.get(x.dtype.name)
    if dt is None:
        raise NoKernel(f"{op_type} has no kernel for element type {x.dtype.name}")
    return dt


@_binding("::DFT", check=_dft_check, modules=("dft",))
def _dft_bind(ins, outs, attrs, target):
    x, y = ins[0], outs[0]
    if y is None:
        return []
    dt = _kernel_type(x, "DFT")
    axis = dft_axis(x.ndim, attrs, _values_or_attr(ins, 2, {}, "axis"))
    n = dft_length(x.shape, axis, attrs, _values_or_attr(ins, 1, {}, "dft_length"))
    shape = dft_output_shape(x.shape, axis, n, attrs)
    if tuple(y.shape) != shape:
        raise HipepError(f"DFT: output of shape {list(y.shape)}, expected {list(shape)}")
    if y.size == 0:
        return []
    inverse, onesided = bool(attrs.get("inverse", 0)), bool(attrs.get("onesided", 0))
    args = DftArgs(_prod(x.shape[:axis]), _prod(x.shape[axis + 1:-1]), int(x.shape[axis]), int(shape[axis]), n,
                   int(x.shape[-1] == 2), 2 if inverse and onesided else int(inverse))
    grid, block = flat_config(args.outer * args.out_len * args.inner, target)
    return [KernelOp(f"hipep_dft_{dt}", grid, block, [ptr(x), ptr(y), args], module="dft")]


class StftArgs(ctypes.Structure):
    _fields_ = [("batch", ctypes.c_longlong), ("length", ctypes.c_longlong), ("frames", ctypes.c_longlong),
                ("n", ctypes.c_longlong), ("bins", ctypes.c_longlong), ("step", ctypes.c_longlong),
                ("complex_in", ctypes.c_int)]


@_binding("::STFT", check=_dft_check, modules=("dft",))
def _stft_bind(ins, outs, attrs, target):
    x, y = ins[0], outs[0]
    window = ins[2] if len(ins) > 2 else None
    if y is None:
        return []
    dt = _kernel_type(x, "STFT")
    step = _values_or_attr(ins, 1, {}, "frame_step")[0]
    n, frames = stft_frames(x.shape, step, None if window is None else window.shape,
                            _values_or_attr(ins, 3, {}, "frame_length"))
    bins = stft_bins(n, attrs)
    if tuple(y.shape) != (int(x.shape[0]), frames, bins, 2):
        raise HipepError(f"STFT: output of shape {list(y.shape)}, expected {[int(x.shape[0]), frames, bins, 2]}")
    if y.size == 0:
        return []
    args = StftArgs(int(x.shape[0]), int(x.shape[1]), frames, n, bins, step, int(x.shape[-1] == 2))
    grid, block = flat_config(args.batch * frames * bins, target)
    return [KernelOp(f"hipep_stft_{dt}", grid, block, [ptr(x), ptr(window), ptr(y), args], module="dft")]


# ---- HannWindow, HammingWindow, BlackmanWindow ------------------------------------------------

def _window_check(attrs, dtypes, shapes, values):
    elem = int(attrs.get("output_datatype", F32))
    if elem not in (F32, F64):  # the kernel writes f32 and f64; ONNX Runtime's integer outputs stay on the CPU
        return f"output_datatype {type_name(elem)}: the GPU kernel writes float and double"
    return None


def _window_binding(op_type: str):
    a0, a1, a2 = WINDOW_COEFFICIENTS[op_type]

    @_binding(f"::{op_type}", check=_window_check, modules=("dft",))
    def bind(ins, outs, attrs, target):
        y = outs[0]
        if y is None:
            return []
        size = window_size(op_type, _values_or_attr(ins, 0, {}, "size"))
        if tuple(y.shape) != (size,):
            raise HipepError(f"{op_type}: output of shape {list(y.shape)}, expected [{size}]")
        if size == 0:
            return []
        dt = _kernel_type(y, op_type)
        step = window_increment(size, bool(attrs.get("periodic", 1)))
        grid, block = flat_config(size, target)
        return [KernelOp(f"hipep_cosine_window_{dt}", grid, block,
                         [ptr(y), ctypes.c_longlong(size), ctypes.c_double(step), ctypes.c_double(a0),
                          ctypes.c_double(a1), ctypes.c_double(a2)], module="dft")]
    return bind


for _op in WINDOW_COEFFICIENTS:
    _window_binding(_op)
