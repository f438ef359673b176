"""The bridge's side of device memory: Compute hands a tensor in device memory over as
(address, shape, dtype), for inputs and from allocate_outputs; CompiledSubgraph.run turns each into
the device's array at that address. Here a CPU device whose "device memory" is host memory stands
in for the GPU (tests/gpu/test_gpu_device_memory.py runs the real one)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
from onnx import TensorProto as T, helper as h

from hipep.bridge import CompiledSubgraph
from hipep.compiler import compile_subgraph
from hipep.errors import HipepError
from hipep.graph import GraphView
from hipep.runtime.cpu import CpuDevice
from hipep.runtime.executor import Executor

from helpers import make_model, tensor


class HostBackedDevice(CpuDevice):
    """Wraps (address, shape, dtype) as an array over that address, as the CUDA device wraps
    ORT's device tensors; counts what it wrapped."""

    def __init__(self):
        super().__init__()
        self.wrapped = []

    def wrap_device_memory(self, ptr, shape, dtype):
        dtype = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        self.wrapped.append(ptr)
        if n == 0:
            return np.empty(shape, dtype)
        buf = (ctypes.c_uint8 * n).from_address(ptr)
        return np.frombuffer(buf, np.uint8).view(dtype).reshape(shape)


def _compiled(device):
    model = make_model([h.make_node("Relu", ["x"], ["r"]), h.make_node("Add", ["r", "b"], ["y"])],
                       [tensor("x", T.FLOAT, [3, 4]), tensor("b", T.FLOAT, [4])], [tensor("y", T.FLOAT, [3, 4])])
    g = GraphView.from_onnx(model)
    plan = compile_subgraph(g, "sub", list(g.inputs), list(g.outputs))
    return CompiledSubgraph(Executor(plan, device), device=device)


def _desc(a: np.ndarray):
    return (a.ctypes.data, a.shape, a.dtype)


def test_device_tensors_in_and_out_are_used_in_place():
    device = HostBackedDevice()
    sub = _compiled(device)
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    b = np.arange(4, dtype=np.float32)
    out = np.full((3, 4), np.nan, np.float32)  # "ORT's output buffer"
    calls = []

    def allocate_outputs(shapes):
        calls.append([tuple(s) for s in shapes])
        return [_desc(out)]

    for _ in range(2):  # specialize, then replay
        results = sub.run([_desc(x), b], allocate_outputs)
        np.testing.assert_array_equal(out, np.maximum(x, 0) + b)
        # written where ORT's buffer is (None: the outputs are all in ORT's buffers)
        assert results is None or results[0].ctypes.data == out.ctypes.data
    assert calls == [[(3, 4)], [(3, 4)]]
    # wrapped once: the same tensors on the next run reuse their wrappers (nothing moved)
    assert device.wrapped == [x.ctypes.data, out.ctypes.data]
    out = np.full((3, 4), np.nan, np.float32)  # ORT's next buffer somewhere else: wrapped anew
    sub.run([_desc(x), b], allocate_outputs)
    np.testing.assert_array_equal(out, np.maximum(x, 0) + b)
    assert device.wrapped[2:] == [out.ctypes.data]


def test_a_device_tensor_on_a_device_that_cannot_address_it_is_a_clear_error():
    sub = _compiled(CpuDevice())
    x = np.zeros((3, 4), np.float32)
    with pytest.raises(HipepError, match="input 0 is in GPU memory, but this subgraph runs on the cpu device"):
        sub.run([_desc(x), np.zeros(4, np.float32)])


def test_the_same_descriptor_object_finds_its_wrapper_without_a_call():
    """C++ hands over the same descriptor object while a tensor stays the same (compute.cc's
    DeviceTensorCache): the bridge then takes the position's wrapper as it is; a new object with
    the same contents is compared, and another address wrapped anew."""
    device = HostBackedDevice()
    sub = _compiled(device)
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    b = np.arange(4, dtype=np.float32)
    out = np.full((3, 4), np.nan, np.float32)
    dx, dout = _desc(x), _desc(out)
    calls = []
    slow = sub._device_tensor
    sub._device_tensor = lambda desc, role, pos: calls.append((role, pos)) or slow(desc, role, pos)
    for _ in range(3):
        sub.run([dx, b], lambda shapes: [dout])
        np.testing.assert_array_equal(out, np.maximum(x, 0) + b)
    assert calls == [("input", 0), ("output", 0)]  # the first run only
    sub.run([_desc(x), b], lambda shapes: [dout])  # equal contents, another object: compared, not wrapped
    assert calls[2:] == [("input", 0)] and device.wrapped == [x.ctypes.data, out.ctypes.data]
