"""The step-by-step interpreter on a device whose kernels cannot address host memory (a GPU's way),
checked without a GPU: `OpaqueMemoryDevice` is the CPU reference device (its random schedule)
whose memory the host cannot read with numpy. Its views are opaque handles that refuse numpy, so
every read, write and copy the interpreter makes must go through the device (stage_input, launch,
run_host_step, read, subview, copy_async), as on the cuda device. Loop and Scan plans (tests/
loop_models.py and the ONNX conformance cases with a Loop or Scan) run through it and must give
ORT's CPU EP's outputs."""
from __future__ import annotations

import numpy as np
import pytest

from conformance import support
from helpers import assert_outputs_match, compiled_executor, cpu_session
from hipep.runtime.cpu import CpuDevice
from hipep.runtime.device import ShapedBuffer
from hipep.runtime.executor import Executor
from loop_models import MODELS


class Opaque(ShapedBuffer):
    """Device memory as the host sees it: an address, a shape and a dtype, no contents."""
    __slots__ = ("_a", "shape", "dtype")

    def __init__(self, a: np.ndarray):
        self._a, self.shape, self.dtype = a, a.shape, a.dtype

    @property
    def ptr(self) -> int:
        return self._a.__array_interface__["data"][0]

    def __array__(self, dtype=None, copy=None):
        raise AssertionError("the host read device memory with numpy instead of through the device")


def _host(a):
    return a._a if isinstance(a, Opaque) else a


class OpaqueMemoryDevice(CpuDevice):
    addresses_host_memory = False
    array_types = (Opaque,)

    def __init__(self, seed: int = 0):
        super().__init__("random", seed)
        self.reads = self.staged = self.launched = self.host_steps = 0

    def view(self, memory, offset, dtype, shape):
        return Opaque(super().view(memory, offset, dtype, shape))

    def subview(self, array, offset, dtype, shape):
        view = super().subview(_host(array), offset, dtype, shape)
        return Opaque(view) if isinstance(array, Opaque) else view

    def stage_input(self, stream, position, array):
        self.staged += 1
        copy = Opaque(np.empty_like(np.asarray(array)))
        self.copy_async(stream, copy, array, f"input {position}")
        return copy

    def copy_async(self, stream, dst, src, label="copy"):
        super().copy_async(stream, _host(dst), _host(src), label)

    def launch(self, stream, program, args, label=""):
        self.launched += 1
        super().launch(stream, program, [_host(a) for a in args], label)

    def run_host_step(self, stream, program, args):
        self.host_steps += 1
        program.run([_host(a) for a in args])

    def read(self, stream, array):
        self.reads += 1
        stream.sync()  # device memory: after the work queued so far
        return np.array(_host(array))


def _device_executor(model, seed):
    plan, cpu_executor = compiled_executor(model)
    device = OpaqueMemoryDevice(seed)
    return Executor(plan, device, weights=cpu_executor.weights), device


def _check(model, feeds_list, seed=0):
    ex, device = _device_executor(model, seed)
    ref = cpu_session(model)
    names = [i.name for i in model.graph.input]
    for feeds in feeds_list:
        want = ref.run(None, feeds)
        for _ in range(2):  # the second run reuses the pools the first one grew
            got = ex.run([feeds[n] for n in names])
            assert all(isinstance(g, np.ndarray) for g in got)
            assert_outputs_match(got, want, rtol=1e-6, atol=1e-6)
    assert ex.step_by_step
    return device


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_loops_run_through_device_memory(name, seed):
    make, feeds = MODELS[name]
    device = _check(make(), feeds(), seed)
    # everything reached the device through its interface: inputs staged, launches issued
    assert device.staged > 0 and device.launched > 0


@pytest.mark.parametrize("name", sorted(MODELS))
def test_loop_copies_staged_through_scratch(monkeypatch, name):
    """Every set of loop copies taken as overlapping (carried values that trade places): the
    sources go through the run's scratch memory first, reused from one iteration to the next."""
    import hipep.runtime.interpreter as interpreter

    monkeypatch.setattr(interpreter, "_overlapping", lambda srcs, dsts: True)
    allocs = []
    original = OpaqueMemoryDevice.alloc

    def alloc(self, space, nbytes):
        allocs.append(nbytes)
        return original(self, space, nbytes)

    monkeypatch.setattr(OpaqueMemoryDevice, "alloc", alloc)
    make, feeds = MODELS[name]
    _check(make(), feeds(), seed=1)
    # scratch grows by doubling, not once per iteration (pools take a few allocations too)
    assert len(allocs) < 40


def test_overlapping_copies():
    from hipep.runtime.interpreter import _overlapping

    buf = np.zeros(8, np.float32)
    a, b = buf[:4], buf[4:]
    assert _overlapping([a, b], [b, a])  # a swap
    assert not _overlapping([a], [a])  # a copy onto its own bytes
    assert not _overlapping([a], [b])
    assert _overlapping([buf[:3]], [buf[2:5]])  # a partial overlap


def test_the_host_reads_the_computed_condition_through_the_device():
    make, feeds = MODELS["fibonacci"]
    device = _check(make(), feeds()[:1])
    # the condition is computed by the body's kernels: the host reads it every iteration
    assert device.reads >= 5


def test_outputs_go_into_the_buffers_ort_allocates():
    make, feeds = MODELS["scan"]
    model = make()
    ex, _ = _device_executor(model, 0)
    f = feeds()[0]
    given = []

    def allocate(shapes):
        given[:] = [np.full(s, np.nan, np.float32) for s in shapes]
        return given

    out = ex.run([f[i.name] for i in model.graph.input], allocate_outputs=allocate)
    want = cpu_session(model).run(None, f)
    assert all(o is g for o, g in zip(out, given))
    assert_outputs_match(given, want, rtol=1e-6, atol=1e-6)


def _loop_cases():
    cases = []
    for info in sorted(support.catalog().values(), key=lambda i: i.name):
        if info.needs_download or info.category != "NodeModel":
            continue
        if not any(w in info.name for w in ("loop", "scan", "range_", "linear_attention")):
            continue
        cases.append(info)
    return cases


@pytest.mark.parametrize("info", _loop_cases(), ids=lambda i: i.name)
def test_conformance_loops_run_through_device_memory(info):
    model, data_sets = support.load_case(info)
    ops = {n.op_type for n in model.graph.node}
    if not ops & {"Loop", "Scan"}:
        pytest.skip("no Loop or Scan at the top level")
    import hipep

    if hipep.explain(model, device="cuda").claimed_count != len(model.graph.node):
        pytest.skip("not claimed whole on the cuda device")
    ins, outs = data_sets[0]
    ins = [np.asarray(x) for x in ins]
    if any(x.dtype == object for x in ins):
        pytest.skip("sequence or optional inputs")
    inits = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    feeds = dict(zip(names, ins))
    ex, _ = _device_executor(model, 0)
    got = ex.run([feeds[n] for n in names])
    tc = info.test_case
    for g, w in zip(got, outs):
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g.astype(np.float64) if g.dtype.kind == "f" else g,
                                   w.astype(np.float64) if w.dtype.kind == "f" else w,
                                   rtol=max(tc.rtol, 1e-6), atol=max(tc.atol, 1e-6))
