"""Host work on the GPU with ORT's tensors in device memory (the ONNX conformance failures of the
first device-memory run): shape arithmetic that is also a subgraph output and is read again by
host work (Attention's expanded form), Slice bounds computed from Shape(x) and a small integer
input (CenterCropPad's), and Range, now a GPU kernel, whose bounds come from another EP
(AffineGrid's If). Each model runs through ORT on the CUDA device several times (first run, bound
replay, CUDA graph replay) and is compared with ORT's CPU EP; tests/unit/test_host_work_device_memory.py
runs the same models on a CPU double of the GPU's host-read rule."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper

import hipep
from hipep.runtime.cuda import cuda_status

from helpers import assert_outputs_match, check_runs_against_cpu_ep, cpu_session, make_model, tensor
from unit.test_host_work_device_memory import center_crop_model, shape_result_read_by_host_model
from unit.test_partition_gpu_host_work import host_value_crossing_subgraphs_model, shape_inside_a_branch_model

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

n = helper.make_node


_compare = assert_outputs_match
_check = check_runs_against_cpu_ep


def _bound_run(model, feeds):
    """The same model with every input and output bound as a device OrtValue (IOBinding)."""
    data = model.SerializeToString()
    sess = hipep.InferenceSession(data, device="cuda")
    want = cpu_session(data).run(None, feeds)
    binding = sess.io_binding()
    for k, v in feeds.items():
        binding.bind_ortvalue_input(k, ort.OrtValue.ortvalue_from_numpy(v, "cuda", 0))
    for o in sess.get_outputs():
        binding.bind_output(o.name, "cuda", 0)
    for _ in range(3):
        sess.run_with_iobinding(binding)
        _compare([o.numpy() for o in binding.get_outputs()], want)


def test_a_shape_result_read_again_by_host_work():
    x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(2, 3, 4)
    _check(shape_result_read_by_host_model(), [{"x": x}])
    _bound_run(shape_result_read_by_host_model(), {"x": x})


def test_slice_bounds_from_shape_and_a_small_integer_input():
    x = np.arange(210, dtype=np.float32).reshape(10, 7, 3)
    feeds = [{"x": x, "shape": np.array(t, np.int64)} for t in ([6, 5, 3], [10, 7, 1], [4, 3, 2], [6, 5, 3])]
    _check(center_crop_model(), feeds)
    _bound_run(center_crop_model(), feeds[0])


@pytest.mark.parametrize("elem,start,limit,delta", [
    (TP.INT64, 0, 37, 1), (TP.INT64, 40, -3, -3), (TP.INT32, -5, 1000, 7), (TP.INT16, -7, 300, 11),
    (TP.FLOAT, 0.0, 1.0, 0.1), (TP.FLOAT, 1.5, -2.25, -0.3), (TP.FLOAT, 0.0, 4096.0, 0.7)])
def test_range_kernel_with_bounds_in_device_memory(elem, start, limit, delta):
    """Bounds fed at run time run on the GPU: integer ones read as symbols of the shape program,
    float ones pinned (read whole each run; other values trace anew)."""
    np_type = {TP.INT64: np.int64, TP.INT32: np.int32, TP.INT16: np.int16, TP.FLOAT: np.float32}[elem]
    model = make_model([n("Range", ["start", "limit", "delta"], ["r"])],
                       [tensor(k, elem, []) for k in ("start", "limit", "delta")], [tensor("r", elem, [None])])
    feeds = {k: np.array(v, np_type) for k, v in (("start", start), ("limit", limit), ("delta", delta))}
    assert not hipep.explain(model, device="cuda").rejections
    _check(model, [feeds])
    if elem == TP.FLOAT:  # float bounds in device memory: read whole by the host
        _bound_run(model, feeds)


@pytest.mark.parametrize("start,limit,delta", [(0.0, 1.0, 0.1), (1.5, -2.25, -0.3), (0.0, 4096.0, 0.7)])
def test_range_kernel_with_constant_float_bounds(start, limit, delta):
    inits = [helper.make_tensor(k, TP.FLOAT, [], [v]) for k, v in (("start", start), ("limit", limit), ("delta", delta))]
    model = make_model([n("Range", ["start", "limit", "delta"], ["r"]), n("Add", ["r", "x"], ["y"])],
                       [tensor("x", TP.FLOAT, [1])], [tensor("y", TP.FLOAT, [None])], inits)
    _check(model, [{"x": np.ones(1, np.float32)}])


def test_range_after_an_if_on_a_shape_condition():
    # AffineGrid's expanded form: an If on x's size yields the extent that Range reads; the GPU
    # runs the branch the size picks.
    then = helper.make_graph([n("Constant", [], ["a"], value=helper.make_tensor("va", TP.INT64, [], [4]))],
                             "then", [], [tensor("a", TP.INT64, [])])
    other = helper.make_graph([n("Constant", [], ["b"], value=helper.make_tensor("vb", TP.INT64, [], [6]))],
                              "else", [], [tensor("b", TP.INT64, [])])
    nodes = [n("Size", ["x"], ["size"]), n("Equal", ["size", "four"], ["is_four"]),
             n("If", ["is_four"], ["limit"], then_branch=then, else_branch=other),
             n("Range", ["zero", "limit", "one"], ["r"]), n("Cast", ["r"], ["rf"], to=TP.FLOAT),
             n("Mul", ["rf", "half"], ["y"])]
    inits = [helper.make_tensor(k, TP.INT64, [], [v]) for k, v in (("four", 4), ("zero", 0), ("one", 1))]
    inits.append(helper.make_tensor("half", TP.FLOAT, [], [0.5]))
    model = make_model(nodes, [tensor("x", TP.FLOAT, [None, 2])], [tensor("y", TP.FLOAT, [None])], inits)
    _check(model, [{"x": np.zeros((2, 2), np.float32)}, {"x": np.zeros((3, 2), np.float32)},
                   {"x": np.zeros((2, 2), np.float32)}])


def test_host_work_whose_input_crosses_subgraphs_is_left_to_the_cpu_ep():
    x = np.array([[[2, 0, 1], [1, 3, 0], [0, 1, 4]]], np.float32)  # [1, 3, 3]: GlobalLpPool takes N, C, spatial
    _check(host_value_crossing_subgraphs_model(), [{"x": x}], whole=False)


def test_shape_inside_an_if_branch():
    """AffineGrid's expanded form reads a device value's extents inside an If's branch: the branch
    the size picks runs whole on the GPU, its Shape and integer work as host work, each size
    again (a new trace) and back."""
    model = shape_inside_a_branch_model()
    rng = np.random.default_rng(3)
    _check(model, [{"x": rng.standard_normal(s).astype(np.float32)} for s in ((2, 3), (4, 5), (3, 2), (2, 3))])
