"""DFT on the CUDA device (kernels/dft.hip): forward and inverse, real and complex, one-sided and
its inverse, padded and truncated lengths, against ORT's CPU EP (which sums in the input's type:
f32 to 1e-4 relative, 2e-5 absolute; f64 to 1e-10) and, for f64, the float64 reference."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import hipep

from hipep.runtime.cuda import cuda_status
import gpu_checks
from helpers import cpu_session, make_model, tensor

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

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
    want = cpu_session(model).run(None, {"x": x})[0]
    sess = hipep.InferenceSession(model, device="cuda")
    tol = dict(rtol=1e-4, atol=2e-5) if elem == TP.FLOAT else dict(rtol=1e-10, atol=1e-10)
    for _ in range(3):  # first run, bound replay, CUDA graph replay
        got = sess.run(None, {"x": x})[0]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, **tol)
