"""DynamicQuantizeLinear on the CUDA device (hipep.runtime.gpu_dynamic_quantize: x's range by
ReduceMin / ReduceMax, the scale and zero point by an expression, then QuantizeLinear's expression):
single-node models through hipep.InferenceSession(device="cuda"), run three times (first run, bound
replay, CUDA graph replay), every output equal to ORT's CPU EP's."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

from hipep.runtime.cuda import cuda_status
from gpu_checks import check_on_cuda
from helpers import make_model, tensor

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

F32 = np.float32


def _model(shape, outputs=("y", "s", "zp")):
    """One DynamicQuantizeLinear node; its outputs not in `outputs` are not graph outputs (nobody
    reads them; the schema makes all three required, so they keep their names)."""
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "zp"])
    types = {"y": tensor("y", TP.UINT8, list(shape)), "s": tensor("s", TP.FLOAT, []),
             "zp": tensor("zp", TP.UINT8, [])}
    return make_model([node], [tensor("x", TP.FLOAT, list(shape))], [types[o] for o in outputs], opset=11)


def _ties():
    # range [-255, 255]: scale 2, zero point 127.5 -> 128, odd x land on .5 after the division
    return np.concatenate([np.arange(-255, 256, dtype=F32), [0.5, -0.5, 1.5, -1.5]]).astype(F32).reshape(1, -1)


_RNG = np.random.default_rng(3)
CASES = {
    "random": _RNG.normal(0, 3, (3, 5, 7)).astype(F32),
    "positive": _RNG.uniform(0.5, 40, (4, 9)).astype(F32),
    "negative": _RNG.uniform(-40, -0.5, (2, 3, 5)).astype(F32),
    "zeros": np.zeros((2, 6), F32),
    "ties": _ties(),
    "row-4096": _RNG.normal(0, 1, (1, 4096)).astype(F32),
    "rows-then-results": _RNG.normal(0, 5, (64, 1024)).astype(F32),
    "prime-length": _RNG.normal(0, 5, (10007,)).astype(F32),
    "activations": _RNG.normal(0, 2, (4, 128, 768)).astype(F32),
}


@pytest.mark.parametrize("name", list(CASES))
def test_dynamic_quantize_linear_matches_ort(name):
    x = CASES[name]
    check_on_cuda(_model(x.shape), {"x": x}, exact=True, claimed=True)


@pytest.mark.parametrize("outputs", [("y",), ("s", "zp"), ("y", "zp"), ("zp",)], ids="-".join)
def test_unread_outputs(outputs):
    x = _RNG.normal(0, 3, (8, 33)).astype(F32)
    check_on_cuda(_model(x.shape, outputs), {"x": x}, exact=True, claimed=True)
