"""Pad's edge, reflect and wrap modes and Trilu with a k the host does not know (kernels/copy.hip's
pad and trilu) on the CUDA device, end to end: small ONNX models through
hipep.InferenceSession(device="cuda"), every node claimed, three runs each (first run, bound
replay, CUDA graph replay), compared exactly with ONNX Runtime's CPU EP (both ops only move
elements)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from hipep.runtime.cuda import cuda_status
from gpu_checks import check_on_cuda, reference_outputs
from helpers import make_model, tensor

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

F32, F64, I8, U8, I64 = TP.FLOAT, TP.DOUBLE, TP.INT8, TP.UINT8, TP.INT64
NP = {F32: np.float32, F64: np.float64, I8: np.int8, U8: np.uint8, I64: np.int64}
n = helper.make_node


def init(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def values(rng, shape, elem):
    return rng.integers(0, 100, shape).astype(NP[elem])


# ---- Pad ----------------------------------------------------------------------------------------

PAD_CASES = [  # (mode, X, pads: begins then ends), reflect's pads within the kept extent minus one
    ("edge", (2, 5, 7), [1, -1, 3, 0, 2, -2]),
    ("edge", (3, 4), [4, 9, 6, 5]),
    ("reflect", (2, 5, 7), [0, 2, 1, 1, 0, 3]),
    ("reflect", (3, 6, 5), [-1, 1, 2, 1, -2, 2]),
    ("wrap", (2, 5, 7), [3, 0, 9, 1, 6, -2]),
    ("wrap", (3, 4), [-1, 2, 1, 5]),
    ("reflect", (4, 64, 130), [0, 3, 0, 0, 5, 0]),  # the last axis passes through as wide words; many blocks
    ("edge", (2, 3, 4, 5, 6), [0, 1, 0, 2, 1, 0, 2, 0, 1, 3]),
]


@pytest.mark.parametrize("elem", [F32, I64, U8, I8, F64])
@pytest.mark.parametrize("mode,shape,pads", PAD_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(PAD_CASES)])
def test_pad_modes(rng, elem, mode, shape, pads):
    """Growth, crops (negative pads, which the modes read past) and pads wider than the axis."""
    model = make_model([n("Pad", ["x", "pads"], ["y"], mode=mode, name="pad")], [tensor("x", elem, list(shape))],
                       [tensor("y", elem, None)], [init("pads", np.array(pads, np.int64))], opset=19)
    check_on_cuda(model, {"x": values(rng, shape, elem)}, elem, claimed=True, exact=True)


@pytest.mark.parametrize("mode", ["edge", "reflect", "wrap"])
def test_pad_modes_on_chosen_axes(rng, mode):
    """Opset 18's axes input (negative axes too), constant_value left out."""
    model = make_model([n("Pad", ["x", "pads", "", "axes"], ["y"], mode=mode, name="pad")],
                       [tensor("x", F32, [2, 5, 7])], [tensor("y", F32, None)],
                       [init("pads", np.array([2, 1, 1, 3], np.int64)), init("axes", np.array([-1, 1], np.int64))],
                       opset=19 if mode == "wrap" else 18)
    check_on_cuda(model, {"x": values(rng, (2, 5, 7), F32)}, F32, claimed=True, exact=True)


@pytest.mark.parametrize("mode", ["edge", "reflect"])
def test_pad_modes_with_attributes_before_opset_11(rng, mode):
    """Pad-2: pads as an attribute, as exporters of that time wrote ReflectionPad2d."""
    model = make_model([n("Pad", ["x"], ["y"], mode=mode, pads=[0, 0, 1, 2, 0, 0, 2, 1], name="pad")],
                       [tensor("x", F32, [1, 3, 4, 5])], [tensor("y", F32, None)], opset=10)
    check_on_cuda(model, {"x": values(rng, (1, 3, 4, 5), F32)}, F32, claimed=True, exact=True)


# ---- Trilu --------------------------------------------------------------------------------------

_I64 = np.iinfo(np.int64)


@pytest.mark.parametrize("elem", [F32, I64])
@pytest.mark.parametrize("upper", [0, 1])
def test_trilu_with_k_handed_in(rng, elem, upper):
    """k a graph input: read by the kernel from device memory, bound once; each run of the same
    session takes a new k (inside, past and at int64's ends of the matrix)."""
    model = make_model([n("Trilu", ["x", "k"], ["y"], upper=upper, name="trilu")],
                       [tensor("x", elem, [2, 5, 7]), tensor("k", I64, [])], [tensor("y", elem, None)], opset=14)
    x = values(rng, (2, 5, 7), elem)
    sess = None
    for k in (0, 2, -3, 9, -8, _I64.max, _I64.min, _I64.min + 1):
        feeds = {"x": x, "k": np.array(k, np.int64)}
        if sess is None:
            sess = check_on_cuda(model, feeds, elem, claimed=True, exact=True)
            continue
        want = reference_outputs(model, feeds)
        for _ in range(2):
            np.testing.assert_array_equal(sess.run(None, feeds)[0], want[0])


def test_trilu_with_k_computed_on_the_device(rng):
    """k = ArgMax of a float input, computed by a kernel: the host never reads it, and the graph
    is claimed whole."""
    nodes = [n("ArgMax", ["v"], ["k"], axis=0, keepdims=0, name="argmax"),
             n("Trilu", ["x", "k"], ["y"], upper=1, name="triu"),
             n("Trilu", ["x", "k"], ["z"], upper=0, name="tril")]
    model = make_model(nodes, [tensor("x", F32, [3, 6, 6]), tensor("v", F32, [5])],
                       [tensor("y", F32, None), tensor("z", F32, None)], opset=14)
    for v in ([0.0, 3.0, 1.0, 2.0, -1.0], [5.0, 1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 0.0, 9.0]):
        check_on_cuda(model, {"x": values(rng, (3, 6, 6), F32), "v": np.array(v, np.float32)}, F32, claimed=True,
                      exact=True)


@pytest.mark.parametrize("upper", [0, 1])
def test_trilu_without_k_and_with_a_constant_k(rng, upper):
    nodes = [n("Trilu", ["x"], ["y"], upper=upper, name="default_k"),
             n("Trilu", ["x", "minus_two"], ["z"], upper=upper, name="constant_k")]
    model = make_model(nodes, [tensor("x", I64, [4, 3, 5])], [tensor("y", I64, None), tensor("z", I64, None)],
                       [init("minus_two", np.array([-2], np.int64))], opset=14)
    check_on_cuda(model, {"x": values(rng, (4, 3, 5), I64)}, I64, claimed=True, exact=True)
