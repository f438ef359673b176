"""TopK (kernels/topk.hip), GroupNormalization, InstanceNormalization and BatchNormalization in training
mode (kernels/group_norm.hip) end to end: small ONNX models through hipep.InferenceSession(device="cuda"),
compared with ONNX Runtime's CPU EP over three runs (first run, bound replay, CUDA graph replay). TopK must
match exactly: ties (few distinct values), NaN and signed zeros, largest 0 and 1, inner axes, and
vocabulary-sized lines selected in passes through the workspace (the LLM sampling case). The norms: f32
within 1e-5, f16 within 1e-2, up to a diffusion UNet's [2, 320, 64, 64] with 32 groups."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import hipep

from hipep.runtime.cuda import cuda_status, get_device
from gpu_checks import check_on_cuda
from helpers import ORT_VERSION, make_model, tensor

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)
device = get_device(0)

F32, F16, I64, I32 = TP.FLOAT, TP.FLOAT16, TP.INT64, TP.INT32
I8, U8, I16 = TP.INT8, TP.UINT8, TP.INT16
NP = {F32: np.float32, F16: np.float16, I64: np.int64, I32: np.int32, I8: np.int8, U8: np.uint8, I16: np.int16}
n = helper.make_node


def tol(elem):
    return dict(rtol=1e-5, atol=1e-5) if elem == F32 else dict(rtol=1e-2, atol=1e-2)


# ORT's CPU EP orders NaN in TopK as 1.32 does (above every number) from that release on; before it
# the NaNs land where its comparisons, all false for NaN, leave them (measured with 1.30). hipep
# follows 1.32: the CPU reference device is then the oracle for inputs holding a NaN.
TOPK_NAN_ORDER_SINCE = (1, 32)


def check(model, feeds, elem=F32, runs=3, exact=False):
    """Runs `model` on the CUDA device `runs` times, every node claimed, and compares every output
    with ORT's CPU EP (with hipep's CPU device where a float input holds a NaN and ORT predates
    TOPK_NAN_ORDER_SINCE): bit for bit where `exact`, else within tol(elem)."""
    has_nan = any(np.asarray(v).dtype.kind == "f" and np.isnan(v).any() for v in feeds.values())
    want = None
    if has_nan and ORT_VERSION < TOPK_NAN_ORDER_SINCE:
        want = hipep.InferenceSession(model, device="cpu").run(None, feeds)
    return check_on_cuda(model, feeds, elem, runs, bits=exact, want=want, claimed=True, tol=tol(elem))


def init(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


# ---- TopK -------------------------------------------------------------------------------------------

def topk_model(elem, shape, k, axis=-1, largest=1, opset=11):
    if opset == 1:
        node = n("TopK", ["x"], ["v", "i"], axis=axis, k=k, name="topk")
        inits = []
    else:
        node = n("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest, sorted=1, name="topk")
        inits = [init("k", np.array([k], np.int64))]
    return make_model([node], [tensor("x", elem, list(shape))], [tensor("v", elem, None), tensor("i", I64, None)],
                      inits, opset=opset)


def topk_input(rng, elem, shape, distinct=7):
    dt = NP[elem]
    if np.dtype(dt).kind == "u":
        return rng.integers(0, distinct, shape).astype(dt)
    x = rng.integers(-(distinct // 2), distinct - distinct // 2, shape).astype(dt)
    if np.dtype(dt).kind == "f":
        flat = x.reshape(-1)
        flat[rng.integers(0, flat.size, max(1, flat.size // 50))] = np.nan
        flat[rng.integers(0, flat.size, max(1, flat.size // 20))] = -0.0
        flat[rng.integers(0, flat.size, max(1, flat.size // 50))] = -np.inf
    return x


@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("elem", [F32, F16, I32, I64, I8, U8, I16])
@pytest.mark.parametrize("shape,axis,k", [((5, 37), -1, 5), ((3, 40, 6), 1, 40), ((64, 3), 0, 1), ((2, 2048), -1, 2048),
                                          ((3, 2000), -1, 300)])
def test_topk_lines_of_one_block(rng, elem, shape, axis, k, largest):
    if elem in (I8, U8, I16) and ORT_VERSION < (1, 26):
        pytest.skip("ONNX Runtime's CPU EP has TopK on int8, uint8 and int16 from 1.26 (tests/ort_differences.py)")
    x = topk_input(rng, elem, shape)
    check(topk_model(elem, shape, k, axis, largest), {"x": x}, elem, exact=True)


def test_topk_opset1_k_attribute(rng):
    x = topk_input(rng, F32, (4, 50))
    check(topk_model(F32, (4, 50), 6, opset=1), {"x": x}, exact=True)


@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("shape,k", [((1, 32000), 50), ((4, 128256), 8), ((2, 151936), 1), ((1, 256000), 1024),
                                     ((8, 50257), 40)])
def test_topk_vocabulary_lines(rng, elem, shape, k, largest):
    """The sampling step of an LLM: logits of a vocabulary, a small k, lines selected in passes."""
    x = rng.standard_normal(shape).astype(NP[elem])
    x[0, 17] = x[0, 4242]  # a tie
    check(topk_model(elem, shape, k, largest=largest), {"x": x}, elem, exact=True)
    # few distinct values: ties all the way down the top k
    check(topk_model(elem, shape, k, largest=largest), {"x": topk_input(rng, elem, shape, 20)}, elem, exact=True)


@pytest.mark.parametrize("elem", [I32, I64])
def test_topk_long_integer_lines(rng, elem):
    shape = (3, 20000)
    check(topk_model(elem, shape, 64), {"x": topk_input(rng, elem, shape, 1000)}, elem, exact=True)


def test_topk_long_line_along_an_inner_axis(rng):
    shape = (2, 9000, 3)
    check(topk_model(F32, shape, 16, axis=1), {"x": topk_input(rng, F32, shape, 500)}, exact=True)


def test_topk_large_k_of_a_long_line_is_left_to_another_ep():
    report = hipep.explain(topk_model(F32, (2, 20000), 5000), device="cuda")
    assert [r.node.name for r in report.rejections] == ["topk"]


# ---- GroupNormalization / InstanceNormalization --------------------------------------------------------

@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("shape,groups", [((2, 320, 64, 64), 32), ((1, 640, 32, 32), 32), ((2, 4, 3, 3), 2),
                                          ((3, 6, 5), 6), ((2, 8, 7), 1)])
def test_group_norm_opset21(rng, elem, shape, groups):
    c = shape[1]
    model = make_model([n("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=groups, epsilon=1e-5, name="gn")],
                       [tensor("x", elem, list(shape))], [tensor("y", elem, None)],
                       [init("s", rng.uniform(0.5, 1.5, c).astype(NP[elem])),
                        init("b", rng.uniform(-1, 1, c).astype(NP[elem]))], opset=21)
    check(model, {"x": rng.uniform(-2, 3, shape).astype(NP[elem])}, elem)


@pytest.mark.parametrize("shape,groups", [((2, 320, 64, 64), 32), ((2, 6, 5), 3)])
def test_group_norm_opset18_scale_per_group(rng, shape, groups):
    model = make_model([n("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=groups, epsilon=1e-5, name="gn")],
                       [tensor("x", F32, list(shape))], [tensor("y", F32, None)],
                       [init("s", rng.uniform(0.5, 1.5, groups).astype(np.float32)),
                        init("b", rng.uniform(-1, 1, groups).astype(np.float32))], opset=18)
    check(model, {"x": rng.uniform(-2, 3, shape).astype(np.float32)})


@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 64, 128, 128), (4, 16, 7), (2, 2, 3, 1)])
def test_instance_norm(rng, elem, shape):
    c = shape[1]
    model = make_model([n("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-5, name="inorm")],
                       [tensor("x", elem, list(shape))], [tensor("y", elem, None)],
                       [init("s", rng.uniform(0.5, 1.5, c).astype(NP[elem])),
                        init("b", rng.uniform(-1, 1, c).astype(NP[elem]))], opset=17)
    check(model, {"x": (rng.uniform(-2, 2, shape) + 5).astype(NP[elem])}, elem)


# ---- BatchNormalization in training mode --------------------------------------------------------------

@pytest.mark.parametrize("elem,param", [(F32, F32), (F16, F16), (F16, F32)])
@pytest.mark.parametrize("shape", [(8, 64, 28, 28), (3, 4, 5, 6), (16, 3), (2, 256, 9)])
def test_batch_norm_training(rng, elem, param, shape):
    c = shape[1]
    model = make_model([n("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1,
                          momentum=0.8, epsilon=1e-3, name="bn")],
                       [tensor("x", elem, list(shape))],
                       [tensor("y", elem, None), tensor("rm", param, None), tensor("rv", param, None)],
                       [init("s", rng.uniform(0.5, 1.5, c).astype(NP[param])),
                        init("b", rng.uniform(-1, 1, c).astype(NP[param])),
                        init("m", rng.uniform(-1, 1, c).astype(NP[param])),
                        init("v", rng.uniform(0.5, 2, c).astype(NP[param]))], opset=15)
    check(model, {"x": (rng.uniform(-2, 3, shape) + 4).astype(NP[elem])}, elem)
