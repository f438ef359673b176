"""Signal ops: DFT (opsets 17 and 20; forward and inverse, one-sided, the inverse of a one-sided
spectrum), STFT (frames of the signal, windowed, each through a forward DFT), and the window
functions HannWindow, HammingWindow and BlackmanWindow, and MelWeightMatrix (opset 17; MelWeightMatrix
on the CPU device only).

The reference computes in double, as numpy's FFT, and rounds the result to the input's type once:
ONNX's own reference does the same, while ONNX Runtime's CPU kernel sums in the input's type (its
outputs differ from these by that type's rounding). The input is [.., signal .., 1 or 2]: a real
signal, or complex as (real, imaginary) pairs; the output has pairs, or for the inverse of a
one-sided spectrum (inverse=1, onesided=1, numpy's irfft) a real signal.
"""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ..graph import numpy_dtype
from ._common import (at, elem_of, kernel, known_value, result, scalar_operand, shape_of, shape_rule, tensor_type,
                      type_name)
from .registry import ALL_INTS, F32, F64, I32, I64, SINCE_VERSION, OpDef, register


def dft_axis(rank: int, attrs, axis_value=None) -> int:
    """The signal axis, non-negative: opset 20 reads it from input 2 (default -2), opset 17 from
    the attribute (default 1); it must be one of the signal axes, [-rank, -2] or [0, rank - 2]."""
    if int(attrs.get(SINCE_VERSION, 20)) >= 20:
        axis = -2 if axis_value is None else int(np.asarray(axis_value).reshape(-1)[0])
    else:
        axis = int(attrs.get("axis", 1))
    if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
        raise RuntimeShapeError(f"DFT: axis {axis} is not a signal axis of a rank-{rank} input (expected "
                                f"{-rank}..-2 or 0..{rank - 2}; the last axis holds real and imaginary parts)")
    return axis % rank


def dft_length(x_shape, axis: int, attrs, length_value=None) -> int:
    """The transform's length n: input 1, else the axis' extent (for the inverse of a one-sided
    spectrum, 2 (extent - 1))."""
    if length_value is not None:
        n = int(np.asarray(length_value).reshape(-1)[0])
        if n < 1:
            raise RuntimeShapeError(f"DFT: dft_length must be at least 1, got {n}")
        return n
    extent = int(x_shape[axis])
    if attrs.get("inverse", 0) and attrs.get("onesided", 0):
        return 2 * (extent - 1)
    return extent


def dft_output_shape(x_shape, axis: int, n: int, attrs) -> tuple:
    inverse, onesided = bool(attrs.get("inverse", 0)), bool(attrs.get("onesided", 0))
    out = list(x_shape)
    out[axis] = n // 2 + 1 if onesided and not inverse else n
    out[-1] = 1 if inverse and onesided else 2
    return tuple(out)


def _check_input(shape) -> None:
    if len(shape) < 2:
        raise RuntimeShapeError(f"DFT: input must have rank >= 2 (signal axes, then real/imaginary), got {list(shape)}")
    if shape[-1] is not None and shape[-1] not in (1, 2):
        raise RuntimeShapeError(f"DFT: the input's last axis holds a real value (1) or a real and an imaginary part "
                                f"(2), got {shape[-1]}")


@kernel("DFT")
def _dft(inputs, attrs):
    x = inputs[0]
    _check_input(x.shape)
    axis = dft_axis(x.ndim, attrs, at(inputs, 2))
    n = dft_length(x.shape, axis, attrs, at(inputs, 1))
    inverse, onesided = bool(attrs.get("inverse", 0)), bool(attrs.get("onesided", 0))
    signal = x[..., 0].astype(np.float64) + (1j * x[..., 1].astype(np.float64) if x.shape[-1] == 2 else 0)
    if inverse and onesided:
        out = np.fft.irfft(signal, n=n, axis=axis)[..., None]
    else:
        spectrum = np.fft.ifft(signal, n=n, axis=axis) if inverse else np.fft.fft(signal, n=n, axis=axis)
        if onesided:
            spectrum = np.take(spectrum, np.arange(n // 2 + 1), axis=axis)
        out = np.stack([spectrum.real, spectrum.imag], axis=-1)
    return [result(out.astype(x.dtype))]


@shape_rule("DFT")
def _dft_shape(types, values, attrs, num_outputs):
    shape = shape_of(types[0])
    elem = elem_of(types[0])
    if shape is None:
        return [tensor_type(elem, None)]
    _check_input(shape)
    axis_value = known_value(types, values, 2)
    if int(attrs.get(SINCE_VERSION, 20)) >= 20 and at(types, 2) is not None and axis_value is None:
        return [tensor_type(elem, (None,) * len(shape))]
    axis = dft_axis(len(shape), attrs, axis_value)
    length_value = known_value(types, values, 1)
    if (at(types, 1) is not None and length_value is None) or (length_value is None and shape[axis] is None):
        out = list(dft_output_shape(tuple(1 if d is None else d for d in shape), axis, 1, attrs))
        out[axis] = None
        return [tensor_type(elem, tuple(None if i < len(shape) - 1 and shape[i] is None else d
                                        for i, d in enumerate(out)))]
    return [tensor_type(elem, dft_output_shape(shape, axis, dft_length(shape, axis, attrs, length_value), attrs))]


# ONNX Runtime's CPU kernel takes float and double; dft_length and axis are int32 or int64 scalars
# the host reads (they size the output).
register(OpDef("DFT", (17, 20), ("T1", "T2", "I64"), ("T1",),
               {"T1": frozenset({F32, F64}), "T2": frozenset({I32, I64}), "I64": frozenset({I64})}, _dft,
               attributes={"axis": 1, "inverse": 0, "onesided": 0}, shape_rule=_dft_shape, host_inputs=(1, 2),
               min_inputs=1))


# ---- STFT ------------------------------------------------------------------------------------

def stft_frames(signal_shape, step, window_shape, length_value) -> tuple[int, int]:
    """(frame length, frames): the length from input 3, else the window's, else the whole signal;
    1 + (signal length - frame length) // frame_step frames."""
    if len(signal_shape) != 3 or signal_shape[-1] not in (1, 2):
        raise RuntimeShapeError(f"STFT: signal must be [batch, signal_length, 1 or 2], got {list(signal_shape)}")
    if step < 1:
        raise RuntimeShapeError(f"STFT: frame_step must be at least 1, got {step}")
    if length_value is not None:
        length = int(np.asarray(length_value).reshape(-1)[0])
        if window_shape is not None and tuple(window_shape) != (length,):
            raise RuntimeShapeError(f"STFT: window {list(window_shape)} for frame_length {length}: it must be "
                                    f"[frame_length]")
    elif window_shape is not None:
        if len(window_shape) != 1:
            raise RuntimeShapeError(f"STFT: window must be 1-D, got {list(window_shape)}")
        length = int(window_shape[0])
    else:
        length = int(signal_shape[1])
    if not 1 <= length <= signal_shape[1]:
        raise RuntimeShapeError(f"STFT: frame_length {length} must be within [1, {signal_shape[1]}] (the signal's "
                                f"length)")
    return length, 1 + (int(signal_shape[1]) - length) // step


def stft_bins(length: int, attrs) -> int:
    return length // 2 + 1 if attrs.get("onesided", 1) else length


@kernel("STFT")
def _stft(inputs, attrs):
    x, window, length = inputs[0], at(inputs, 2), at(inputs, 3)
    step = int(np.asarray(inputs[1]).reshape(-1)[0])
    n, frames = stft_frames(x.shape, step, None if window is None else window.shape, length)
    signal = x[..., 0].astype(np.float64) + (1j * x[..., 1].astype(np.float64) if x.shape[-1] == 2 else 0)
    at_ = np.arange(frames)[:, None] * step + np.arange(n)[None, :]
    framed = signal[:, at_]  # [batch, frames, n]
    if window is not None:
        framed = framed * window.astype(np.float64)
    spectrum = np.fft.fft(framed, n=n, axis=-1)[..., :stft_bins(n, attrs)]
    return [result(np.stack([spectrum.real, spectrum.imag], axis=-1).astype(x.dtype))]


@shape_rule("STFT")
def _stft_shape(types, values, attrs, num_outputs):
    shape, elem = shape_of(types[0]), elem_of(types[0])
    step, length = known_value(types, values, 1), known_value(types, values, 3)
    window = shape_of(types[2]) if at(types, 2) is not None else None
    if shape is None or None in shape or step is None or (at(types, 3) is not None and length is None) \
            or (window is not None and None in window):
        batch = None if shape is None else shape[0]
        return [tensor_type(elem, (batch, None, None, 2))]
    n, frames = stft_frames(shape, int(np.asarray(step).reshape(-1)[0]), window, length)
    return [tensor_type(elem, (shape[0], frames, stft_bins(n, attrs), 2))]


register(OpDef("STFT", (17,), ("T1", "T2", "T1", "T2"), ("T1",),
               {"T1": frozenset({F32, F64}), "T2": frozenset({I32, I64})}, _stft,
               attributes={"onesided": 1}, shape_rule=_stft_shape, host_inputs=(1, 3), min_inputs=2))


# ---- window functions ------------------------------------------------------------------------

# The cosine-sum windows w[n] = a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N), N the size (periodic)
# or the size - 1 (symmetric), as ONNX Runtime's CPU kernel computes them: its coefficients are
# f32 values (Hamming's a0 = 25/46 in f32, a1 = 1 - a0; Blackman's a2 = 0.16 / 2, a0 = 0.5 - a2),
# the sum is in double and rounded (an integer type: truncated) once. The ONNX spec's own
# coefficients differ by f32's rounding (under 1e-7 of a value).
_F = np.float32
_HAMMING_A0 = _F(25) / _F(46)
_BLACKMAN_A2 = _F(0.16) / _F(2)
WINDOW_COEFFICIENTS = {
    "HannWindow": (float(_F(0.5)), float(_F(0.5)), 0.0),
    "HammingWindow": (float(_HAMMING_A0), float(_F(1) - _HAMMING_A0), 0.0),
    "BlackmanWindow": (float(_F(0.5) - _BLACKMAN_A2), float(_F(0.5)), float(_BLACKMAN_A2)),
}
WINDOW_TYPES = frozenset({F32, F64}) | ALL_INTS  # ONNX Runtime's CPU kernel's output types


def window_size(op_type: str, value) -> int:
    size = int(scalar_operand(op_type, "size", value))
    if size < 0:
        raise RuntimeShapeError(f"{op_type}: size must not be negative, got {size}")
    return size


def window_increment(size: int, periodic: bool) -> float:
    """The angle between samples, 2 pi / N in double (N = 0, a symmetric window of one sample:
    infinite, as ONNX Runtime's division gives, so that sample is NaN)."""
    denominator = size if periodic else size - 1
    return float(np.float64(2 * np.pi) / np.float64(denominator)) if denominator else float("inf")


def _window_elem(attrs) -> int:
    return int(attrs.get("output_datatype", F32))


def _claim_output_datatype(node, graph, attrs):
    """output_datatype one of the types ONNX Runtime's CPU kernel writes: f32, f64, integers."""
    elem = _window_elem(attrs)
    if elem not in WINDOW_TYPES:
        return f"attribute output_datatype={type_name(elem)} is not one of ONNX Runtime's CPU kernel's types"
    return None


def _window(op_type: str):
    a0, a1, a2 = WINDOW_COEFFICIENTS[op_type]

    @kernel(op_type)
    def reference(inputs, attrs):
        size = window_size(op_type, inputs[0])
        step = window_increment(size, bool(attrs.get("periodic", 1)))
        n = np.arange(size, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            w = a0 - a1 * np.cos(step * n)
            if a2 != 0:
                w = w + a2 * np.cos(2 * step * n)
        dtype = numpy_dtype(_window_elem(attrs))
        if dtype.kind in "iu":
            w = np.trunc(w)
        return [result(w.astype(dtype), dtype)]

    @shape_rule(op_type)
    def rule(types, values, attrs, num_outputs):
        size = known_value(types, values, 0)
        return [tensor_type(_window_elem(attrs), (None,) if size is None else (window_size(op_type, size),))]

    register(OpDef(op_type, (17,), ("T1",), ("T2",), {"T1": frozenset({I32, I64}), "T2": WINDOW_TYPES}, reference,
                   attributes={"output_datatype": F32, "periodic": 1}, claim=_claim_output_datatype, shape_rule=rule,
                   host_inputs=(0,)))


for _op in WINDOW_COEFFICIENTS:
    _window(_op)


# ---- MelWeightMatrix -------------------------------------------------------------------------

def _hz_to_mel(hz: float) -> float:
    return 2595.0 * np.log10(1.0 + hz / 700.0)


def _mel_to_hz(mel: float) -> float:
    return 700.0 * (10.0 ** (mel / 2595.0) - 1.0)


def mel_bins(num_mel_bins: int, dft_length: int, sample_rate: int, lower_hz: float, upper_hz: float) -> list[int]:
    """The spectrogram bins of the mel triangles' num_mel_bins + 2 corners, as ONNX Runtime's CPU kernel
    places them: the mel range split into num_mel_bins + 2 steps (the spec's reference takes + 1;
    ORT's step is kept, as every consumer of these matrices runs ORT's), each corner's frequency in
    double, floor((dft_length + 1) hz / sample_rate). Its range checks are in f32, as ORT's are; a
    corner past the last bin (which ORT would write out of bounds) is an error here."""
    op = "MelWeightMatrix"
    if num_mel_bins < 0 or dft_length < 1 or sample_rate < 1:
        raise RuntimeShapeError(f"{op}: num_mel_bins must not be negative and dft_length and sample_rate must be "
                                f"positive, got {num_mel_bins}, {dft_length}, {sample_rate}")
    bins = dft_length // 2 + 1
    f32 = np.float32
    for name, hz in (("lower_edge_hertz", lower_hz), ("upper_edge_hertz", upper_hz)):
        index = np.floor(f32(dft_length + 1) * f32(hz) / f32(sample_rate))
        if not 0 <= index < bins:
            raise RuntimeShapeError(f"{op}: {name}={hz} gives spectrogram bin {index:g}, outside [0, {bins}) for "
                                    f"dft_length {dft_length} and sample_rate {sample_rate}")
    low, high = _hz_to_mel(float(f32(lower_hz))), _hz_to_mel(float(f32(upper_hz)))
    step = (high - low) / float(num_mel_bins + 2)
    corners = [int(np.floor((dft_length + 1) * _mel_to_hz(low + step * i) / sample_rate))
               for i in range(num_mel_bins + 2)]
    if max(corners, default=0) >= bins:
        raise RuntimeShapeError(f"{op}: a mel triangle reaches spectrogram bin {max(corners)}, past the last "
                                f"({bins - 1}) for dft_length {dft_length} and sample_rate {sample_rate}")
    return corners


MEL_INPUTS = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")


def mel_operands(values) -> tuple[int, int, int, float, float]:
    """MelWeightMatrix's five scalar inputs: num_mel_bins, dft_length, sample_rate (ints) and the
    two edges (floats)."""
    num, length, rate, lower, upper = (scalar_operand("MelWeightMatrix", name, v)
                                       for name, v in zip(MEL_INPUTS, values))
    return int(num), int(length), int(rate), float(lower), float(upper)


@kernel("MelWeightMatrix")
def _mel_weight_matrix(inputs, attrs):
    num, length, rate, lower, upper = mel_operands(inputs)
    corners = mel_bins(num, length, rate, lower, upper)
    dtype = numpy_dtype(_window_elem(attrs))
    y = np.zeros((length // 2 + 1, num), dtype)
    # ORT's arithmetic per element: (j - left) / T(rising width) and (right - j) / T(falling width)
    # in T (integer division for an integer T), the falling edge written after the rising one.
    width = (lambda a, b: a // b) if dtype.kind in "iu" else (lambda a, b: dtype.type(a) / dtype.type(b))
    for i in range(num):
        left, center, right = corners[i:i + 3]
        if center == left:
            y[center, i] = 1
        else:
            for j in range(left, center + 1):
                y[j, i] = width(j - left, center - left)
        for j in range(center, right):
            y[j, i] = width(right - j, right - center)
    return [result(y, dtype)]


@shape_rule("MelWeightMatrix")
def _mel_weight_matrix_shape(types, values, attrs, num_outputs):
    num, length = known_value(types, values, 0), known_value(types, values, 1)
    op = "MelWeightMatrix"
    return [tensor_type(_window_elem(attrs),
                        (None if length is None else int(scalar_operand(op, MEL_INPUTS[1], length)) // 2 + 1,
                         None if num is None else int(scalar_operand(op, MEL_INPUTS[0], num))))]


# ONNX Runtime's CPU kernel reads the two edges as f32 only, and writes the window functions' types.
register(OpDef("MelWeightMatrix", (17,), ("T1", "T1", "T1", "T2", "T2"), ("T3",),
               {"T1": frozenset({I32, I64}), "T2": frozenset({F32}), "T3": WINDOW_TYPES}, _mel_weight_matrix,
               attributes={"output_datatype": F32}, claim=_claim_output_datatype, shape_rule=_mel_weight_matrix_shape,
               host_inputs=(0, 1, 2, 3, 4)))
