"""NonZero and Compress on the CUDA device (kernels/nonzero.hip, hipep/runtime/gpu_select.py): the
count comes from a small input the host reads (its values pinned, so a run with other values is
specialized anew) and the selection runs on the device. Each model runs whole
(disable_cpu_ep_fallback) through ORT several times per input, with several inputs in turn, and
with its inputs bound as device OrtValues, against ORT's CPU EP."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper

import hipep
from hipep.runtime.cuda import cuda_status

from helpers import check_runs_against_cpu_ep, cpu_session, make_model, tensor
from unit.test_partition_gpu_shapes import select_model

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

_ELEM = {np.float32: TP.FLOAT, np.float16: TP.FLOAT16, np.uint8: TP.UINT8, np.int32: TP.INT32,
         np.int64: TP.INT64, np.bool_: TP.BOOL}


def _values(rng, shape, dtype):
    if dtype == np.bool_:
        return np.asarray(rng.random(shape) < 0.4)
    x = rng.integers(-2, 3, shape).astype(dtype) if np.dtype(dtype).kind in "iu" else \
        (rng.integers(-2, 3, shape) * rng.random(shape)).astype(dtype)
    x = np.asarray(x)  # arithmetic on 0-d arrays gives numpy scalars, which ORT does not take as inputs
    if np.dtype(dtype).kind == "f" and x.size > 2:
        x.reshape(-1)[0], x.reshape(-1)[1] = np.nan, -0.0
    return x


_check = check_runs_against_cpu_ep


@pytest.mark.parametrize("shape", [(), (7,), (4, 4), (2, 3, 4), (64,)], ids=str)
@pytest.mark.parametrize("dtype", list(_ELEM), ids=lambda d: np.dtype(d).name)
def test_nonzero_follows_the_cpu_ep(shape, dtype):
    model = make_model([helper.make_node("NonZero", ["x"], ["y"])], [tensor("x", _ELEM[dtype], list(shape))],
                       [tensor("y", TP.INT64, None)], opset=13)
    rng = np.random.default_rng(len(shape))
    _check(model, [{"x": _values(rng, shape, dtype)} for _ in range(3)] + [{"x": np.zeros(shape, dtype)}])


@pytest.mark.parametrize("axis", [0, 1, -1, None])
@pytest.mark.parametrize("cond_len", [2, 4, 9])
def test_compress_follows_the_cpu_ep(axis, cond_len):
    attrs = {} if axis is None else {"axis": axis}
    model = make_model([helper.make_node("Compress", ["x", "c"], ["y"], **attrs)],
                       [tensor("x", TP.FLOAT16, [4, 3, 5]), tensor("c", TP.BOOL, [cond_len])],
                       [tensor("y", TP.FLOAT16, None)], opset=11)
    rng = np.random.default_rng(cond_len)
    x = rng.standard_normal((4, 3, 5)).astype(np.float16)
    _check(model, [{"x": x, "c": rng.random(cond_len) < 0.5} for _ in range(3)] +
           [{"x": x, "c": np.zeros(cond_len, bool)}])


@pytest.mark.parametrize("op", ["NonZero", "Compress"])
def test_selection_inside_a_graph_with_device_inputs(op):
    """The selection between device work (Relu or Cast after it), the inputs bound as device
    OrtValues: the mask's values still reach the host, which sizes the output."""
    model = select_model(op, from_data=False)
    data = model.SerializeToString()
    sess = hipep.InferenceSession(data, device="cuda", disable_cpu_ep_fallback=True)
    ref = cpu_session(data)
    for seed in range(3):
        rng = np.random.default_rng(seed)
        feeds = {"x": rng.standard_normal(6).astype(np.float32), "m": rng.random(6) < 0.5}
        want = ref.run(None, feeds)
        binding = sess.io_binding()
        for k, v in feeds.items():
            binding.bind_ortvalue_input(k, ort.OrtValue.ortvalue_from_numpy(v, "cuda", 0))
        binding.bind_output("y", "cuda", 0)
        sess.run_with_iobinding(binding)
        np.testing.assert_array_equal(binding.get_outputs()[0].numpy(), want[0])
