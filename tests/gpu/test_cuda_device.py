"""The CUDA device itself: memory spaces, views, copies, streams, events, errors, programs."""
from __future__ import annotations

import numpy as np
import pytest

from hipep.errors import HipepError
from hipep.runtime.device import Kernel

from hipep.runtime.cuda import cuda_status, get_device

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)
device = get_device(0)


def test_the_device_describes_itself():
    assert device.arch.startswith("sm_") and device.sm_count > 0 and device.warp_size == 32
    assert device.nvrtc_version <= (device.driver_version // 1000, device.driver_version % 1000 // 10)


def test_memory_round_trips_through_both_spaces():
    stream = device.new_stream()
    x = np.arange(1000, dtype=np.float32)
    for space in ("device", "host_visible"):
        mem = device.alloc(space, 8192)
        view = device.view(mem, 256, np.float32, (10, 100))
        assert view.shape == (10, 100) and view.size == 1000 and view.nbytes == 4000 and view.ndim == 2
        assert view.reshape(-1, 4).shape == (250, 4)
        device.copy_async(stream, view, x.reshape(10, 100))
        back = np.empty((10, 100), np.float32)
        device.copy_async(stream, back, view)
        stream.sync()
        np.testing.assert_array_equal(back.reshape(-1), x)
        if space == "host_visible":  # the host reads what the device wrote, in place
            np.testing.assert_array_equal(view.host_view().reshape(-1), x)
        device.free(mem)
    with pytest.raises(HipepError, match="exceeds an allocation"):
        device.view(device.alloc("device", 16), 8, np.float32, (4,))


def test_fresh_device_memory_is_poisoned_and_copies_between_allocations():
    a, b = device.alloc("device", 64), device.alloc("device", 64)
    stream = device.new_stream()
    out = np.zeros(16, np.int32)
    device.copy_async(stream, out, device.view(a, 0, np.int32, (16,)))
    stream.sync()
    assert (out == -1).all()
    device.copy_async(stream, device.view(a, 0, np.int32, (16,)), np.arange(16, dtype=np.int32))
    stream.sync()
    device.copy(b, 0, a, 0, 64)
    device.copy_async(stream, out, device.view(b, 0, np.int32, (16,)))
    stream.sync()
    np.testing.assert_array_equal(out, np.arange(16))


def test_events_and_pending_work():
    stream = device.new_stream()
    mem = device.alloc("device", 1 << 24)
    device.copy_async(stream, device.view(mem, 0, np.uint8, (1 << 24,)), np.ones(1 << 24, np.uint8))
    event = stream.record_event()
    event.wait()
    assert event.query()
    stream.sync()
    assert stream.pending == 0


def test_a_launch_the_driver_refuses_is_raised_at_sync_with_its_label():
    from hipep.runtime import gpu_kernels as gk

    program = device.compile(Kernel("::Softmax", {"axis": -1, "_since_version": 13}, 1, ("float32", "float32"),
                                    label="node 'bad' (Softmax)"))
    stream = device.new_stream()
    mem = device.alloc("device", 4096)
    x = device.view(mem, 0, np.float32, (4, 64))
    y = device.view(mem, 2048, np.float32, (4, 64))
    original = gk.row_config
    try:
        gk.row_config = lambda rows, words, warp: ((rows, 1, 1), (4096, 1, 1))  # more threads than a block holds
        device.launch(stream, program, [x, y], label="node 'bad' (Softmax)")
    finally:
        gk.row_config = original
    with pytest.raises(HipepError, match=r"node 'bad' \(Softmax\): launch of hipep_softmax_f32.*block \[4096"):
        stream.sync()
    # the stream is usable afterwards
    device.launch(stream, program, [x, y], label="node 'good' (Softmax)")
    stream.sync()


def test_an_op_without_a_gpu_program_is_refused_at_compile():
    # (every registry op with float results has a GPU program now: an op key without one)
    with pytest.raises(HipepError, match=r"node 'x' \(NoSuchOp\): no kernel for cuda: hipep::NoSuchOp"):
        device.compile(Kernel("hipep::NoSuchOp", {}, 1, ("float32", "float32"), label="node 'x' (NoSuchOp)"))
    # integer shape arithmetic may still run as host work
    device.compile(Kernel("::Shape", {}, 1, ("float32", "int64"), label="node 's' (Shape)"))


def test_precompile_fills_the_kernel_cache(tmp_path, monkeypatch, capsys):
    from hipep.__main__ import main
    from hipep.runtime import kernel_cache

    monkeypatch.setenv(kernel_cache.CACHE_ENV, str(tmp_path))
    kernel_cache._MEMORY.clear()
    assert main(["precompile"]) == 0
    out = capsys.readouterr().out
    assert "compiled" in out and device.arch in out
    assert len(list(tmp_path.glob("*.cubin"))) >= len(kernel_cache.kernel_sources())


def test_wrapped_host_memory_is_read_and_written_in_place():
    program = device.compile(Kernel("::Softmax", {"axis": -1, "_since_version": 13}, 1, ("float32", "float32"),
                                    label="node 'sm' (Softmax)"))
    x = np.random.default_rng(0).standard_normal((300, 1000)).astype(np.float32)  # pages of their own
    y = np.zeros_like(x)
    stream = device.new_stream()
    device.launch(stream, program, [device.wrap(x), device.wrap(y)])
    stream.sync()
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-5)


def test_the_demo_runs_on_the_gpu_by_default():
    """`hipep demo` (the README's first command) runs on the default device, the GPU here: every
    node claimed there and every output within the GPU's tolerance of the CPU EP's."""
    from hipep.demo import run_demo

    lines: list[str] = []
    assert run_demo(out=lines.append), "\n".join(lines)
    assert any("claimed 24 of 24 nodes in 1 subgraphs" in line for line in lines)
    assert "== hipep (the GPU) vs ONNX Runtime CPU EP ==" in lines
