"""GPU bindings of DFT, STFT, the window functions and MelWeightMatrix (kernels/dft.hip): one
launch, a thread an output element, the sum over the transform's length in double (the CPU device's
reference computes in double too). dft_length, the axis, frame_step, frame_length, a window's size
and MelWeightMatrix's five inputs are host inputs: the shapes and the launch's arguments come from
them (MelWeightMatrix's triangle corners placed by the host, as the reference places them).

Registered into the kernel table (hipep.runtime.gpu_kernels) when it is imported."""
from __future__ import annotations

import ctypes

import numpy as np

from ..errors import HipepError
from ..ops._common import type_name
from ..ops.registry import F32, F64
from ..ops.signal import (MEL_INPUTS, WINDOW_COEFFICIENTS, dft_axis, dft_length, dft_output_shape, mel_bins,
                          mel_operands, stft_bins, stft_frames, window_increment, window_size)
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


# ---- MelWeightMatrix --------------------------------------------------------------------------

# The corners travel in the launch's arguments (kernels/dft.hip HIPEP_MEL_MAX_CORNERS: 4 KB of
# parameters at most on every target), so num_mel_bins + 2 of them must fit.
MEL_MAX_CORNERS = 1000
MEL_MAX_BINS = MEL_MAX_CORNERS - 2
_MEL_TYPES = {"float32": "f32", "float64": "f64", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
              "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64"}


class MelArgs(ctypes.Structure):
    _fields_ = [("bins", ctypes.c_longlong), ("num", ctypes.c_longlong), ("corners", ctypes.c_int * MEL_MAX_CORNERS)]


def _too_many_mel_bins(num: int) -> str:
    return (f"num_mel_bins {num}: the kernel takes the triangles' corners in its launch arguments, at most "
            f"{MEL_MAX_BINS} mel bins")


def _mel_check(attrs, dtypes, shapes, values):
    num = values[0] if values and values[0] is not None and np.asarray(values[0]).size == 1 else None
    if num is not None and int(np.asarray(num).reshape(-1)[0]) > MEL_MAX_BINS:
        return _too_many_mel_bins(int(np.asarray(num).reshape(-1)[0]))
    return None


@_binding("::MelWeightMatrix", check=_mel_check, reads_values=True, modules=("dft",))
def _mel_bind(ins, outs, attrs, target):
    y = outs[0]
    if y is None:
        return []
    for index, (name, a) in enumerate(zip(MEL_INPUTS, ins)):
        if a is None or a.value is None:
            raise HipepError(f"MelWeightMatrix: input {index} ('{name}') must be readable by the host at launch")
    num, length, rate, lower, upper = mel_operands([a.value for a in ins])
    if num > MEL_MAX_BINS:
        raise NoKernel(f"MelWeightMatrix: {_too_many_mel_bins(num)}")
    corners = mel_bins(num, length, rate, lower, upper)
    shape = (length // 2 + 1, num)
    if tuple(y.shape) != shape:
        raise HipepError(f"MelWeightMatrix: output of shape {list(y.shape)}, expected {list(shape)}")
    dt = _MEL_TYPES.get(y.dtype.name)
    if dt is None:
        raise NoKernel(f"MelWeightMatrix has no kernel for output type {y.dtype.name}")
    if y.size == 0:
        return []
    args = MelArgs(shape[0], num)
    args.corners[:len(corners)] = corners
    grid, block = flat_config(y.size, target)
    return [KernelOp(f"hipep_mel_weight_matrix_{dt}", grid, block, [ptr(y), args], module="dft")]
