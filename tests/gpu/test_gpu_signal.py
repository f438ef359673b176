"""DFT and STFT on the CUDA device (kernels/dft.hip): forward and inverse, real and complex,
one-sided and its inverse, padded and truncated lengths, frames with and without a window. Each
against hipep's float64 reference (numpy's FFT; the kernels sum in double too) to the output type's
rounding, and against ORT's CPU EP, which sums in the input's type: its f32 STFT of a 400-sample
frame is ~1e-4 of the spectrum's peak off the exact transform, so that comparison takes 1e-3 of the
peak."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import hipep

from hipep.ops.registry import OUTPUT_COUNT, SINCE_VERSION, lookup
from hipep.runtime.cuda import cuda_status
import gpu_checks
from helpers import cpu_session, make_model, tensor

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)


def check(model, op_type, x, inputs, attrs):
    """Three runs on the CUDA device (first run, bound replay, CUDA graph replay) against the
    float64 reference and ORT's CPU EP."""
    want = lookup("", op_type).reference([x, *inputs], {**attrs, OUTPUT_COUNT: 1})[0]
    ort = cpu_session(model).run(None, {"x": x})[0]
    sess = hipep.InferenceSession(model, device="cuda")
    exact = dict(rtol=2e-6, atol=2e-6 * np.abs(want).max()) if x.dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    for _ in range(3):
        got = sess.run(None, {"x": x})[0]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, **exact)
        np.testing.assert_allclose(got, ort, rtol=0, atol=1e-3 * np.abs(ort).max())


CASES = [  # (input shape, dft_length or None, axis, inverse, onesided)
    ((2, 64, 1), None, 1, 0, 0), ((2, 64, 2), None, 1, 1, 0), ((3, 400, 1), 512, 1, 0, 1),
    ((2, 33, 2), 64, 1, 1, 1), ((4, 16, 3, 2), 9, 1, 0, 0), ((5, 3, 2), None, 0, 0, 0),
]


@pytest.mark.parametrize("elem", [TP.FLOAT, TP.DOUBLE])
@pytest.mark.parametrize("shape,length,axis,inverse,onesided", CASES)
def test_dft(rng, elem, shape, length, axis, inverse, onesided):
    inits = [numpy_helper.from_array(np.array(axis, np.int64), "axis")]
    if length is not None:
        inits.append(numpy_helper.from_array(np.array(length, np.int64), "n"))
    node = helper.make_node("DFT", ["x", "n" if length is not None else "", "axis"], ["y"], inverse=inverse,
                            onesided=onesided, name="dft")
    model = make_model([node], [tensor("x", elem, list(shape))], [tensor("y", elem, None)], inits, opset=20)
    gpu_checks.assert_claimed_whole(model)
    x = rng.standard_normal(shape).astype(np.float32 if elem == TP.FLOAT else np.float64)
    check(model, "DFT", x, [None if length is None else np.array(length, np.int64), np.array(axis, np.int64)],
          {"inverse": inverse, "onesided": onesided, SINCE_VERSION: 20})

def stft_model(elem, signal, step, window, length, onesided):
    inits = [numpy_helper.from_array(np.array(step, np.int64), "step")]
    if window is not None:
        inits.append(numpy_helper.from_array(np.hanning(window).astype(np.float32 if elem == TP.FLOAT else np.float64),
                                             "window"))
    if length is not None:
        inits.append(numpy_helper.from_array(np.array(length, np.int64), "length"))
    node = helper.make_node("STFT", ["x", "step", "window" if window is not None else "",
                                     "length" if length is not None else ""], ["y"], onesided=onesided, name="stft")
    return make_model([node], [tensor("x", elem, list(signal))], [tensor("y", elem, None)], inits, opset=17)


STFT_CASES = [((2, 400, 1), 160, 400, None, 1), ((1, 256, 2), 64, None, 128, 0), ((3, 97, 1), 13, 32, 32, 1)]


@pytest.mark.parametrize("elem", [TP.FLOAT, TP.DOUBLE])
@pytest.mark.parametrize("signal,step,window,length,onesided", STFT_CASES)
def test_stft(rng, elem, signal, step, window, length, onesided):
    model = stft_model(elem, signal, step, window, length, onesided)
    gpu_checks.assert_claimed_whole(model)
    dtype = np.float32 if elem == TP.FLOAT else np.float64
    x = rng.standard_normal(signal).astype(dtype)
    check(model, "STFT", x, [np.array(step, np.int64), None if window is None else np.hanning(window).astype(dtype),
                             None if length is None else np.array(length, np.int64)],
          {"onesided": onesided, SINCE_VERSION: 17})
