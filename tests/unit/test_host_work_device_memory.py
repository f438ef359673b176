"""Host work on a GPU device whose inputs and outputs are ORT's tensors in device memory.

ORT hands a compiled subgraph its inputs, and takes its outputs, in GPU memory; the host cannot
read that memory. `DeviceMemoryRules` is a CPU device that enforces the GPU's rule: every byte
of a "device" arena and every tensor handed over as (address, shape, dtype) is device memory, and
host work (a plan host step's data inputs, a launch's host inputs such as Reshape's shape) that
reads it is an error, as on the CUDA device. Each case's subgraph is compiled as on a GPU and run
with ORT's tensors as device tensors, and compared with ORT's CPU EP.
tests/gpu/test_gpu_host_work.py runs the same models on a real GPU.
"""
from __future__ import annotations

import ctypes

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper as h

from hipep.bridge import CompiledSubgraph
from hipep.compiler import compile_subgraph
from hipep.errors import HipepError
from hipep.graph import GraphView
from hipep.ops.registry import lookup
from hipep.plan import split_op_key
from hipep.runtime.cpu import CpuDevice
from hipep.runtime.executor import Executor

from helpers import make_model, tensor


class DeviceMemoryRules(CpuDevice):
    """The CPU device, with the GPU's rule on what the host may read (see the module doc)."""

    def __init__(self):
        super().__init__()
        self._device_memory: list[np.ndarray] = []  # kept alive: their addresses stay theirs

    def alloc(self, space: str, nbytes: int) -> np.ndarray:
        a = super().alloc(space, nbytes)
        if space == "device":
            self._device_memory.append(a)
        return a

    def wrap_device_memory(self, ptr, shape, dtype):
        dtype = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if n == 0:
            return np.empty(shape, dtype)
        a = np.frombuffer((ctypes.c_uint8 * n).from_address(ptr), np.uint8).view(dtype).reshape(shape)
        self._device_memory.append(a)
        return a

    def in_device_memory(self, a) -> bool:
        if not isinstance(a, np.ndarray) or a.nbytes == 0:
            return False
        addr = a.__array_interface__["data"][0]
        return any(m.ctypes.data <= addr < m.ctypes.data + m.nbytes for m in self._device_memory)

    def bind_replay(self, graph, sites, patches):
        return None  # every replay goes through `replay`, which checks the host's reads

    def replay(self, stream, graph, patches) -> None:
        for node, k, new in patches:
            node.args[k] = new
        for node in graph.nodes:
            if node.kind == "sync":
                continue
            op = lookup(*split_op_key(node.program.kernel.name))
            if node.kind == "host":
                read = [k for k in range(node.program.n_in) if k not in set(op.extent_only_inputs)]
            else:
                read = list(op.host_inputs)
            for k in read:
                if k < node.program.n_in and self.in_device_memory(node.args[k]):
                    raise HipepError(f"{node.label}: host work reads input {k} from device memory; the plan "
                                     f"should have copied it to host-visible memory")
        super().replay(stream, graph, [])


def _desc(a: np.ndarray):
    return (a.ctypes.data, a.shape, a.dtype)


def _run_on_device_memory(model, feeds: dict, runs: int = 2):
    """Compiles the whole graph as one subgraph and runs it with every input and output as a
    device tensor; returns the outputs of the last run, the device and the executor."""
    g = GraphView.from_onnx(model)
    plan = compile_subgraph(g, "sub", list(g.inputs), list(g.outputs))
    device = DeviceMemoryRules()
    executor = Executor(plan, device)
    sub = CompiledSubgraph(executor, device=device)
    for _ in range(runs):
        ins = [np.array(feeds[name], order="C") for name in g.inputs]  # (0-d stays 0-d)
        outs = []

        def allocate_outputs(shapes):
            outs[:] = [np.full(s, 0x7F, np.dtype(plan.values[v].dtype)) for s, v in zip(shapes, plan.outputs)]
            return [_desc(o) for o in outs]

        sub.run([_desc(a) for a in ins], allocate_outputs)
    return outs, device, executor


def _expected(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _int64(name, values):
    return h.make_tensor(name, T.INT64, [len(values)], values)


def shape_result_read_by_host_model():
    """Shape arithmetic whose result is also a subgraph output and is read again by host work:
    Attention's expanded form passes its bias shape on and takes the sequence length from it."""
    nodes = [
        h.make_node("Shape", ["x"], ["bias_shape"], start=1, end=3),
        h.make_node("Gather", ["bias_shape", "one_scalar"], ["n"], axis=0),
        h.make_node("Range", ["zero_scalar", "n", "one_scalar"], ["r"]),
        h.make_node("Cast", ["r"], ["rf"], to=T.FLOAT),
        h.make_node("Add", ["x", "rf"], ["y"]),
    ]
    inits = [h.make_tensor("one_scalar", T.INT64, [], [1]),
             h.make_tensor("zero_scalar", T.INT64, [], [0])]
    return make_model(nodes, [tensor("x", T.FLOAT, [2, 3, 4])],
                      [tensor("bias_shape", T.INT64, [2]), tensor("y", T.FLOAT, [2, 3, 4])], inits)


def center_crop_model():
    """CenterCropPad's expanded crop: the Slice bounds are integer arithmetic on Shape(x) and the
    target shape, a small integer graph input in device memory."""
    nodes = [
        h.make_node("Shape", ["x"], ["x_shape"]),
        h.make_node("Sub", ["x_shape", "shape"], ["diff"]),
        h.make_node("Div", ["diff", "two"], ["starts"]),
        h.make_node("Add", ["starts", "shape"], ["ends"]),
        h.make_node("Slice", ["x", "starts", "ends"], ["y"]),
    ]
    return make_model(nodes, [tensor("x", T.FLOAT, [10, 7, 3]), tensor("shape", T.INT64, [3])],
                      [tensor("y", T.FLOAT, [None, None, None])], [_int64("two", [2])])


def test_the_device_double_refuses_host_reads_of_device_memory():
    device = DeviceMemoryRules()
    a = device.view(device.alloc("device", 64), 0, np.int64, (4,))
    b = device.view(device.alloc("host_visible", 64), 0, np.int64, (4,))
    assert device.in_device_memory(a) and not device.in_device_memory(b)


def test_a_result_the_host_reads_again_is_copied_out_of_its_host_buffer():
    model = shape_result_read_by_host_model()
    x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(2, 3, 4)
    got, device, executor = _run_on_device_memory(model, {"x": x})
    want = _expected(model, {"x": x})
    # Gather's read of the shape is shape arithmetic: its result is written from the run's symbols
    # (hipep.runtime.host_values), so no host work reads that memory at all
    (spec,) = executor.specializations()
    assert spec.program.host.skipped
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)


def test_the_copied_result_is_a_device_copy_of_the_host_buffer():
    model = shape_result_read_by_host_model()
    g = GraphView.from_onnx(model)
    plan = compile_subgraph(g, "sub", list(g.inputs), list(g.outputs))
    out = plan.values[plan.outputs[0]]
    assert out.space == "device"
    copy = [s for s in plan.steps if getattr(s, "outputs", ()) == (plan.outputs[0],)]
    assert len(copy) == 1 and copy[0].op == "::Identity"
    assert plan.values[copy[0].inputs[0]].space == "host_visible"


@pytest.mark.parametrize("target", [[6, 5, 3], [10, 7, 1], [4, 3, 2]])
def test_slice_bounds_from_a_small_integer_input_replay_without_the_interpreter(target):
    # The bounds are device arithmetic on Shape(x) and `shape`; the shape program derives them on
    # the host from `shape`'s elements (host reads of single elements), so the plan replays as
    # captured launches: GPU devices cannot run the step-by-step interpreter.
    model = center_crop_model()
    x = np.arange(210, dtype=np.float32).reshape(10, 7, 3)
    feeds = {"x": x, "shape": np.array(target, np.int64)}
    got, _, executor = _run_on_device_memory(model, feeds)
    np.testing.assert_array_equal(got[0], _expected(model, feeds)[0])
    assert executor.specializations(), "the plan ran through the step-by-step interpreter"


def test_a_new_target_shape_is_traced_again():
    model = center_crop_model()
    g = GraphView.from_onnx(model)
    plan = compile_subgraph(g, "sub", list(g.inputs), list(g.outputs))
    device = DeviceMemoryRules()
    executor = Executor(plan, device)
    x = np.arange(210, dtype=np.float32).reshape(10, 7, 3)
    for target in ([6, 5, 3], [8, 7, 2], [6, 5, 3]):
        feeds = {"x": x, "shape": np.array(target, np.int64)}
        y = executor.run([x, feeds["shape"]])[0]
        np.testing.assert_array_equal(y, _expected(model, feeds)[0])


def test_a_cuda_device_tensor_is_no_numpy_array():
    # numpy would take it for a 0-d object array ("input 1 ('shape') is object"): the error says
    # what the host can do with device memory instead.
    from hipep.runtime.cuda import OrtDeviceArray

    a = OrtDeviceArray(None, 0x1000, (3,), np.int64)
    with pytest.raises(HipepError, match=r"tensor of shape \[3\] \(int64\) is in GPU memory.*device.s copies"):
        np.asarray(a)
