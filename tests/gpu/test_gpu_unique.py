"""Unique on the CUDA device (kernels/unique.hip, hipep/runtime/gpu_unique.py): the host reads the
small input (integers as symbols, floats pinned, so a run with other values is specialized anew)
and sizes the four outputs; one block computes them on the device. Each model runs whole
(disable_cpu_ep_fallback) through ORT three times per input (first run, bound replay, graph
replay), with several inputs in turn, every output compared bit for bit with ORT's CPU EP: the
ONNX backend test's Unique cases, each element type along each axis, sorted and not, -0 beside 0,
outputs nobody reads, and the input bound as a device OrtValue between device work. NaN is
compared with hipep's CPU device (numpy's semantics; ORT's CPU kernel orders NaN with `<`, under
which it is equivalent to every number). tests/unit/test_unique_on_host.py runs the same kernel
on the host."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper

import hipep
from hipep.runtime.cuda import cuda_status

from gpu_checks import assert_claimed_whole
from helpers import cpu_session, make_model, tensor
from selection_inputs import repeated_values

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

_ELEM = {np.float32: TP.FLOAT, np.float64: TP.DOUBLE, np.int64: TP.INT64, np.int8: TP.INT8}
OUTS = ["y", "indices", "inverse", "counts"]


def unique_model(dtype, shape, outputs=OUTS, graph_outputs=None, **attrs):
    elem = _ELEM[dtype]
    node = helper.make_node("Unique", ["x"], outputs, name="unique", **attrs)
    graph_outputs = graph_outputs or [o for o in outputs if o]
    return make_model([node], [tensor("x", elem, list(shape))],
                      [tensor(o, elem if o == "y" else TP.INT64, None) for o in graph_outputs], opset=11)


def assert_bitwise(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_array_equal(g.view(f"u{g.itemsize}"), w.view(f"u{w.itemsize}"))


def check(model, feeds_list, reference="ort"):
    """One cuda session, three runs per feed dict, each bit for bit against ORT's CPU EP (or, with
    reference="hipep", hipep's CPU device)."""
    assert_claimed_whole(model)
    data = model.SerializeToString()
    sess = hipep.InferenceSession(data, device="cuda", disable_cpu_ep_fallback=True)
    ref = cpu_session(data) if reference == "ort" else hipep.InferenceSession(data, device="cpu")
    for feeds in feeds_list:
        want = ref.run(None, feeds)
        for _ in range(3):
            assert_bitwise(sess.run(None, feeds), want)


# The ONNX backend test's cases (onnx.backend.test.case.node.unique): their inputs, attributes and
# element types (its bfloat16 case is not a type ONNX Runtime's CPU kernel takes).
BACKEND = {
    "sorted_without_axis": (np.array([2.0, 1.0, 1.0, 3.0, 4.0, 3.0], np.float32), {}),
    "not_sorted_without_axis": (np.array([2.0, 1.0, 1.0, 3.0, 4.0, 3.0], np.float32), {"sorted": 0}),
    "sorted_with_axis": (np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4]], np.float32), {"sorted": 1, "axis": 0}),
    "sorted_with_axis_3d": (np.array([[[1.0, 1.0], [0.0, 1.0], [2.0, 1.0], [0.0, 1.0]],
                                      [[1.0, 1.0], [0.0, 1.0], [2.0, 1.0], [0.0, 1.0]]], np.float32),
                            {"sorted": 1, "axis": 1}),
    "sorted_with_negative_axis": (np.array([[1, 0, 0], [1, 0, 0], [2, 3, 3]], np.float32), {"sorted": 1, "axis": -1}),
    "length_1": (np.array([0], np.int64), {"sorted": 1}),
}


@pytest.mark.parametrize("case", list(BACKEND))
def test_the_onnx_backend_cases(case):
    x, attrs = BACKEND[case]
    rng = np.random.default_rng(len(case))
    # the case's own input, then others of its shape (specialized anew)
    check(unique_model(x.dtype.type, x.shape, **attrs), [{"x": x}] + [{"x": repeated_values(rng, x.shape, x.dtype.type)}
                                                                      for _ in range(2)])


SHAPES = [((6, 4), None), ((6, 4), 0), ((6, 4), 1), ((6, 4), -1), ((2, 4, 2), 1), ((3, 3, 2), 0), ((3, 2, 3), -1),
          ((9,), 0), ((64,), None), ((1,), None), ((), None)]


@pytest.mark.parametrize("shape,axis", SHAPES, ids=[f"{s}-axis{a}" for s, a in SHAPES])
@pytest.mark.parametrize("sort", [1, 0])
@pytest.mark.parametrize("dtype", list(_ELEM), ids=lambda d: np.dtype(d).name)
def test_unique_follows_the_cpu_ep(dtype, shape, axis, sort):
    attrs = {"sorted": sort} | ({} if axis is None else {"axis": axis})
    rng = np.random.default_rng(len(shape) * 10 + (axis or 0))
    feeds = [{"x": repeated_values(rng, shape, dtype)} for _ in range(3)] + [{"x": np.ones(shape, dtype)}]
    check(unique_model(dtype, shape, **attrs), feeds)


@pytest.mark.parametrize("outputs,graph_outputs", [(["y"], None), (["y", "", "inverse"], None),
                                                   (OUTS, ["inverse", "counts"]), (OUTS, ["indices"])],
                         ids=["y", "y-inverse", "inverse-counts-read", "indices-read"])
@pytest.mark.parametrize("axis", [None, 1])
def test_outputs_nobody_reads(outputs, graph_outputs, axis):
    attrs = {"sorted": 0} | ({} if axis is None else {"axis": axis})
    rng = np.random.default_rng(7)
    check(unique_model(np.float32, (4, 6), outputs, graph_outputs, **attrs),
          [{"x": repeated_values(rng, (4, 6), np.float32)} for _ in range(3)])


@pytest.mark.parametrize("shape,axis", [((7,), None), ((7,), 0), ((7, 2), None), ((7, 2), 0), ((2, 7), 1)], ids=str)
@pytest.mark.parametrize("sort", [1, 0])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_nan_as_the_cpu_device(dtype, shape, axis, sort):
    attrs = {"sorted": sort} | ({} if axis is None else {"axis": axis})
    feeds = []
    for seed in range(3):
        rng = np.random.default_rng(seed)
        x = repeated_values(rng, shape, dtype)
        flat = x.reshape(-1)
        flat[rng.permutation(flat.size)[: 2 + seed]] = np.nan
        feeds.append({"x": x})
    check(unique_model(dtype, shape, **attrs), feeds, reference="hipep")


def test_unique_between_device_work_with_device_inputs():
    """Unique of an input bound as a device OrtValue (the host reads its values to size the
    outputs), its Y through Neg and its counts through Cast on the device."""
    nodes = [helper.make_node("Unique", ["x"], ["u", "", "inverse", "counts"], sorted=0),
             helper.make_node("Neg", ["u"], ["y"]), helper.make_node("Cast", ["counts"], ["c"], to=TP.FLOAT)]
    model = make_model(nodes, [tensor("x", TP.FLOAT, [12])],
                       [tensor("y", TP.FLOAT, None), tensor("inverse", TP.INT64, None), tensor("c", TP.FLOAT, None)],
                       opset=11)
    assert_claimed_whole(model)
    data = model.SerializeToString()
    sess = hipep.InferenceSession(data, device="cuda", disable_cpu_ep_fallback=True)
    ref = cpu_session(data)
    for seed in range(3):
        feeds = {"x": repeated_values(np.random.default_rng(seed), (12,), np.float32)}
        want = ref.run(None, feeds)
        binding = sess.io_binding()
        binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(feeds["x"], "cuda", 0))
        for name in ("y", "inverse", "c"):
            binding.bind_output(name, "cuda", 0)
        sess.run_with_iobinding(binding)
        assert_bitwise([o.numpy() for o in binding.get_outputs()], want)
