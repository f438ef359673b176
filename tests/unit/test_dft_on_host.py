"""DFT's and STFT's kernels (kernels/dft.hip) on the CPU: g++ compiles the unchanged source against the host
stand-in for the CUDA headers, and the launch the binding gives runs over host memory, against
the registry's reference (hipep.ops.signal: numpy's FFT in double): forward and inverse, real and
complex input, one-sided spectra and their inverse (irfft), dft_length shorter and longer than the
signal, both opsets' axis, f32 and f64; STFT's frames with and without a window, one-sided or not,
real and complex signals; the window functions' cosine sums and MelWeightMatrix's triangles in each
output type, bit for bit. Skipped without g++."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from hipep.ops.registry import SINCE_VERSION

from unit.host_kernels import EXACT_FLAGS, compile_module, run_on_host

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    return {"warp": 32, "dft": compile_module(tmp_path_factory.mktemp("dft"), "dft", 32, EXACT_FLAGS)}


CASES = [  # (input shape, dft_length or None, axis, inverse, onesided, opset)
    ((2, 10, 1), None, 1, 0, 0, 20),   # real signal, the default axis (-2 at opset 20 is axis 1 here)
    ((2, 10, 2), None, 1, 1, 0, 20),   # complex, inverse
    ((3, 8, 4, 1), None, 1, 0, 1, 17),  # one-sided, axis not the last signal axis (opset 17's attribute)
    ((2, 5, 2), 8, 1, 1, 1, 20),       # irfft of a 5-bin spectrum to 8 samples
    ((2, 6, 2), None, 1, 1, 1, 17),    # irfft, default length 2 (6 - 1)
    ((4, 7, 1), 12, 1, 0, 0, 20),      # zero-padded
    ((4, 16, 2), 9, 1, 0, 0, 20),      # truncated, odd length
    ((5, 3, 2), None, 0, 0, 0, 17),    # the batch axis itself as the signal axis
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,length,axis,inverse,onesided,opset", CASES)
def test_dft_follows_the_reference(libraries, dtype, shape, length, axis, inverse, onesided, opset):
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(dtype)
    inputs = [x, None if length is None else np.array(length, np.int64)]
    attrs = {"inverse": inverse, "onesided": onesided, SINCE_VERSION: opset}
    if opset >= 20:
        inputs.append(np.array(axis, np.int64))
    else:
        attrs["axis"] = axis
    (got,), (want,), ops = run_on_host(libraries, "::DFT", inputs, attrs, sm_count=1)
    assert [o.entry for o in ops] == [f"hipep_dft_{'f32' if dtype == np.float32 else 'f64'}"]
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, want, **tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("signal,step,window,length,onesided", [
    ((2, 64, 1), 8, 16, None, 1), ((1, 50, 2), 7, None, 12, 0), ((3, 40, 1), 5, None, None, 1),
    ((2, 33, 1), 4, 10, 10, 0)])
def test_stft_follows_the_reference(libraries, dtype, signal, step, window, length, onesided):
    rng = np.random.default_rng(sum(signal) + step)
    inputs = [rng.standard_normal(signal).astype(dtype), np.array(step, np.int64),
              None if window is None else np.hanning(window).astype(dtype),
              None if length is None else np.array(length, np.int64)]
    (got,), (want,), ops = run_on_host(libraries, "::STFT", inputs, {"onesided": onesided}, sm_count=1)
    assert [o.entry for o in ops] == [f"hipep_stft_{'f32' if dtype == np.float32 else 'f64'}"]
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, want, **tol)


@pytest.mark.parametrize("op_type", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("elem", [1, 11], ids=["f32", "f64"])
@pytest.mark.parametrize("size", [1, 2, 10, 401])
def test_window_functions_follow_the_reference_bit_for_bit(libraries, op_type, periodic, elem, size):
    """The kernel rounds each product and sum as the reference (and ONNX Runtime's CPU kernel) does;
    the host's cos is the reference's, so the bits agree (a GPU's cos may differ in the last place of
    double). A symmetric window of one sample divides by zero: NaN, as ORT gives."""
    attrs = {"output_datatype": elem, "periodic": periodic}
    (got,), (want,), ops = run_on_host(libraries, f"::{op_type}", [np.array(size, np.int64)], attrs, sm_count=1)
    assert [o.entry for o in ops] == [f"hipep_cosine_window_{'f32' if elem == 1 else 'f64'}"]
    assert got.dtype == want.dtype and got.shape == (size,)
    np.testing.assert_array_equal(got, want)


MEL_CASES = [(8, 16, 8192, 0.0, 4096.0), (40, 512, 16000, 20.0, 8000.0), (80, 400, 16000, 0.0, 8000.0),
             (3, 64, 100, 1.0, 40.0), (0, 16, 8000, 0.0, 3000.0), (998, 4096, 48000, 0.0, 24000.0)]


@pytest.mark.parametrize("elem", [1, 11, 3, 5, 6, 7, 2, 4, 12, 13],
                         ids=["f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"])
@pytest.mark.parametrize("case", MEL_CASES, ids=lambda c: f"{c[0]}-bins-of-{c[1]}")
def test_mel_weight_matrix_follows_the_reference_bit_for_bit(libraries, elem, case):
    """The host places the corners, the kernel writes every element of the matrix (zeros too) with
    the reference's quotient in the output type; 998 mel bins is the most the launch arguments hold."""
    num, length, rate, lo, hi = case
    if elem not in (1, 11) and num > 100:
        pytest.skip("the integer outputs' arithmetic is the same for every size")
    inputs = [np.array(num, np.int64), np.array(length, np.int64), np.array(rate, np.int64), np.array(lo, np.float32),
              np.array(hi, np.float32)]
    (got,), (want,), ops = run_on_host(libraries, "::MelWeightMatrix", inputs, {"output_datatype": elem}, sm_count=1)
    assert got.dtype == want.dtype and got.shape == (length // 2 + 1, num)
    assert [o.entry[:len("hipep_mel_weight_matrix_")] for o in ops] == (["hipep_mel_weight_matrix_"] if num else [])
    np.testing.assert_array_equal(got, want)


def test_mel_weight_matrix_past_the_argument_limit_is_no_kernel(libraries):
    from hipep.runtime.gpu_binding_core import NoKernel

    inputs = [np.array(999, np.int64), np.array(4096, np.int64), np.array(48000, np.int64), np.array(0, np.float32),
              np.array(24000, np.float32)]
    with pytest.raises(NoKernel, match="num_mel_bins 999: .* at most 998 mel bins"):
        run_on_host(libraries, "::MelWeightMatrix", inputs, {"output_datatype": 1}, sm_count=1)
