"""DFT, STFT, the window functions and MelWeightMatrix on the CUDA device (kernels/dft.hip): forward
and inverse, real and complex, one-sided and its inverse, padded and truncated lengths, frames with
and without a window; Hann, Hamming and Blackman windows against ORT's CPU EP, alone and feeding an
STFT; mel matrices bit for bit and a log-mel spectrogram against ORT's CPU EP. Each
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



@pytest.mark.parametrize("op_type", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("elem", [TP.FLOAT, TP.DOUBLE])
def test_window_functions(op_type, periodic, elem):
    """The size is a graph input the host reads: each run's window against ORT's CPU EP, whose
    arithmetic the kernel repeats (double sums, no fused multiply-add); the GPU's cos may differ
    from the host's in double's last place."""
    node = helper.make_node(op_type, ["n"], ["y"], periodic=periodic, output_datatype=elem, name="window")
    model = make_model([node], [tensor("n", TP.INT64, [])], [tensor("y", elem, None)], [], opset=17)
    gpu_checks.assert_claimed_whole(model)
    sess, ref = hipep.InferenceSession(model, device="cuda"), cpu_session(model)
    tol = 2 ** -24 if elem == TP.FLOAT else 1e-15
    for size in (400, 1, 64, 0, 400):
        feed = {"n": np.array(size, np.int64)}
        got, want = sess.run(None, feed)[0], ref.run(None, feed)[0]
        assert got.dtype == want.dtype and got.shape == want.shape == (size,)
        np.testing.assert_allclose(got, want, rtol=0, atol=tol)


def test_integer_windows_stay_with_ort_on_the_gpu():
    node = helper.make_node("HannWindow", ["n"], ["y"], output_datatype=TP.INT32, name="window")
    model = make_model([node], [tensor("n", TP.INT64, [])], [tensor("y", TP.INT32, None)], [], opset=17)
    report = hipep.explain(model, device="cuda")
    assert "node 'window'" in str(report) and "output_datatype i32: the GPU kernel writes float and double" in str(report)


def test_hann_window_feeds_a_stft():
    """An audio front end's first steps: a Hann window of the frame length made on the device and
    the framed spectrum of a signal through it, one subgraph."""
    n = helper.make_tensor("n", TP.INT64, [], [400])
    step = helper.make_tensor("step", TP.INT64, [], [160])
    nodes = [helper.make_node("HannWindow", ["n"], ["w"], name="window"),
             helper.make_node("STFT", ["x", "step", "w", ""], ["y"], onesided=1, name="stft")]
    model = make_model(nodes, [tensor("x", TP.FLOAT, [2, 1600, 1])], [tensor("y", TP.FLOAT, None)], [n, step],
                       opset=17)
    gpu_checks.assert_claimed_whole(model)
    x = np.random.default_rng(3).standard_normal((2, 1600, 1)).astype(np.float32)
    want = cpu_session(model).run(None, {"x": x})[0]
    got = hipep.InferenceSession(model, device="cuda").run(None, {"x": x})[0]
    assert got.shape == want.shape == (2, 8, 201, 2)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-3 * np.abs(want).max())


MEL_RUNS = [(80, 400, 16000, 0.0, 8000.0), (80, 400, 22050, 300.0, 11000.0), (40, 512, 16000, 20.0, 8000.0),
            (8, 16, 8192, 0.0, 4096.0), (80, 400, 16000, 0.0, 8000.0), (128, 2048, 44100, 30.0, 11025.0)]


@pytest.mark.parametrize("elem", [TP.FLOAT, TP.DOUBLE, TP.INT32, TP.UINT8])
def test_mel_weight_matrix(elem):
    """The five inputs are graph inputs the host reads: each run's matrix (a new size, the same size
    with another rate and edges, a size seen before) bit for bit against ORT's CPU EP."""
    node = helper.make_node("MelWeightMatrix", ["bins", "n", "rate", "lo", "hi"], ["y"], output_datatype=elem,
                            name="mel")
    inputs = [tensor(x, TP.INT64, []) for x in ("bins", "n", "rate")] + [tensor(x, TP.FLOAT, []) for x in ("lo", "hi")]
    model = make_model([node], inputs, [tensor("y", elem, None)], [], opset=17)
    gpu_checks.assert_claimed_whole(model)
    sess, ref = hipep.InferenceSession(model, device="cuda"), cpu_session(model)
    for bins, n, rate, lo, hi in MEL_RUNS:
        feed = {"bins": np.array(bins, np.int64), "n": np.array(n, np.int64), "rate": np.array(rate, np.int64),
                "lo": np.array(lo, np.float32), "hi": np.array(hi, np.float32)}
        got, want = sess.run(None, feed)[0], ref.run(None, feed)[0]
        assert got.dtype == want.dtype and got.shape == want.shape == (n // 2 + 1, bins)
        np.testing.assert_array_equal(got, want)


def test_log_mel_spectrogram():
    """A speech front end on the device, one subgraph: Hann window, STFT, power spectrum, the mel
    matrix made by MelWeightMatrix, log."""
    consts = [helper.make_tensor(name, TP.INT64, [], [v]) for name, v in
              (("n", 400), ("step", 160), ("bins", 80), ("rate", 16000))]
    consts += [helper.make_tensor("lo", TP.FLOAT, [], [0.0]), helper.make_tensor("hi", TP.FLOAT, [], [8000.0]),
               helper.make_tensor("floor", TP.FLOAT, [], [1e-10]),
               helper.make_tensor("axis", TP.INT64, [1], [-1]), helper.make_tensor("two", TP.FLOAT, [], [2.0])]
    nodes = [helper.make_node("HannWindow", ["n"], ["w"], name="window"),
             helper.make_node("STFT", ["x", "step", "w", ""], ["spec"], onesided=1, name="stft"),
             helper.make_node("Pow", ["spec", "two"], ["sq"], name="square"),
             helper.make_node("ReduceSum", ["sq", "axis"], ["power"], keepdims=0, name="power"),
             helper.make_node("MelWeightMatrix", ["bins", "n", "rate", "lo", "hi"], ["mel_w"], name="mel"),
             helper.make_node("MatMul", ["power", "mel_w"], ["mel"], name="project"),
             helper.make_node("Max", ["mel", "floor"], ["clamped"], name="clamp"),
             helper.make_node("Log", ["clamped"], ["y"], name="log")]
    model = make_model(nodes, [tensor("x", TP.FLOAT, [2, 16000, 1])], [tensor("y", TP.FLOAT, None)], consts,
                       opset=18)
    gpu_checks.assert_claimed_whole(model)
    x = np.random.default_rng(5).standard_normal((2, 16000, 1)).astype(np.float32)
    want = cpu_session(model).run(None, {"x": x})[0]
    got = hipep.InferenceSession(model, device="cuda").run(None, {"x": x})[0]
    assert got.shape == want.shape == (2, 98, 80)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-3 * np.abs(want).max())
