"""ORT's device memory on the GPU: HipExecutionProvider's EP device carries the GPU's memory, so
IOBinding with device OrtValues runs with no copy and no host read; host numpy feeds go through
hipep's data transfer; OrtValue.numpy() reads back through it; device memory comes back when
sessions go; the CPU reference device stays selectable (HipCpuExecutionProvider). Results are
compared with ONNX Runtime's CPU EP (f32: relative 1e-5)."""
from __future__ import annotations

import gc

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import hipep
from hipep import _native
from hipep.runtime.cuda import _driver, cuda_status, get_device
from helpers import cpu_session, make_model, plain_ort_session, providers_for, tensor

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)
driver = _driver()

n = helper.make_node
TOL = dict(rtol=1e-5, atol=1e-6)


def _mlp():
    """x[4, 64] -> MatMul -> Add -> Relu -> Softmax: kernels of several families, outputs in place."""
    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b")
    return make_model([n("MatMul", ["x", "w"], ["m"]), n("Add", ["m", "b"], ["a"]), n("Relu", ["a"], ["r"]),
                       n("Softmax", ["r"], ["y"], axis=-1)],
                      [tensor("x", TP.FLOAT, [4, 64])], [tensor("y", TP.FLOAT, [4, 32])], [w, b], opset=17)


@pytest.fixture(scope="module")
def mlp():
    return _mlp().SerializeToString()


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32)


def test_the_gpu_ep_device_carries_gpu_memory():
    hipep.register()
    info = _native.gpu_memory()
    assert info["runtime"] == "cuda" and info["vendor_id"] == 0x10DE and info["devices"] >= 1, info
    devices = {d.ep_name: d for d in ort.get_ep_devices()}
    gpu = devices["HipExecutionProvider"]
    assert gpu.ep_metadata["memory"] == "gpu" and gpu.ep_metadata["gpu_ordinal"] == "0"
    assert devices["HipCpuExecutionProvider"].ep_metadata["memory"] == "host"
    if hasattr(gpu, "memory_info"):  # newer onnxruntime
        assert gpu.memory_info(ort.OrtDeviceMemoryType.DEFAULT) is not None
        assert devices["HipCpuExecutionProvider"].memory_info(ort.OrtDeviceMemoryType.DEFAULT) is None


def test_host_numpy_runs(mlp, x):
    sess = hipep.InferenceSession(mlp)  # device=auto: the GPU
    want = cpu_session(mlp).run(None, {"x": x})[0]
    before = hipep.stats().get("transfer_bytes", 0)
    for _ in range(3):
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, **TOL)
    # each run: the input in, the output back, through hipep's data transfer
    assert hipep.stats().get("transfer_bytes", 0) - before == 3 * (x.nbytes + want.nbytes)


def test_iobinding_with_device_ortvalues_moves_nothing(mlp, x):
    sess = hipep.InferenceSession(mlp, device="cuda")
    want = cpu_session(mlp).run(None, {"x": x})[0]
    xv = ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
    assert xv.device_name() == "cuda"
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", xv)
    binding.bind_output("y", "cuda", 0)
    sess.run_with_iobinding(binding)  # specializes
    before = hipep.stats()
    for _ in range(5):
        sess.run_with_iobinding(binding)
    after = hipep.stats()
    assert after.get("transfer_bytes", 0) == before.get("transfer_bytes", 0)
    assert after.get("host_reads", 0) == before.get("host_reads", 0)
    assert after["runs"] - before["runs"] == 5
    y = binding.get_outputs()[0]
    assert y.device_name() == "cuda"
    np.testing.assert_allclose(y.numpy(), want, **TOL)  # read back through hipep's data transfer
    assert hipep.stats()["transfer_bytes"] - after.get("transfer_bytes", 0) == want.nbytes


def test_bound_device_outputs_preallocated(mlp, x):
    sess = hipep.InferenceSession(mlp, device="cuda")
    want = cpu_session(mlp).run(None, {"x": x})[0]
    xv = ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
    yv = ort.OrtValue.ortvalue_from_shape_and_type([4, 32], np.float32, "cuda", 0)
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", xv)
    binding.bind_ortvalue_output("y", yv)
    for _ in range(3):
        sess.run_with_iobinding(binding)
    np.testing.assert_allclose(yv.numpy(), want, **TOL)


def test_an_input_read_by_value_is_a_host_read(x):
    """Reshape's shape as a graph input in device memory: the shape program reads it (a host read)."""
    model = make_model([n("Reshape", ["x", "shape"], ["r"]), n("Relu", ["r"], ["y"])],
                       [tensor("x", TP.FLOAT, [4, 64]), tensor("shape", TP.INT64, [2])],
                       [tensor("y", TP.FLOAT, None)], opset=17).SerializeToString()
    sess = hipep.InferenceSession(model, device="cuda")
    shape = np.array([8, 32], np.int64)
    want = cpu_session(model).run(None, {"x": x, "shape": shape})[0]
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0))
    binding.bind_ortvalue_input("shape", ort.OrtValue.ortvalue_from_numpy(shape, "cuda", 0))
    binding.bind_output("y", "cuda", 0)
    for _ in range(2):
        reads = hipep.stats().get("host_reads", 0)
        sess.run_with_iobinding(binding)
        assert hipep.stats().get("host_reads", 0) > reads  # the two extents, read from device memory
        np.testing.assert_allclose(binding.get_outputs()[0].numpy(), want, **TOL)


def driver_free() -> int:
    """Free device memory as the driver reports it, once what finalizers queued has gone back (and
    cuBLASLt's warming worker, hipep.runtime.cublaslt_warm, has given back its scratch memory)."""
    from hipep.runtime import cublaslt_warm

    cublaslt_warm.wait(60)
    gc.collect()
    get_device(0)._release_pending()
    err, free, _ = driver.cuMemGetInfo()
    assert err == driver.CUresult.CUDA_SUCCESS
    return int(free)


def test_device_memory_returns_after_100_sessions(mlp, x):
    def cycle():
        sess = hipep.InferenceSession(mlp, device="cuda")
        binding = sess.io_binding()
        binding.bind_cpu_input("x", x)
        binding.bind_output("y", "cuda", 0)
        sess.run_with_iobinding(binding)
        del binding, sess
        gc.collect()

    cycle()  # one-time allocations (shared allocators, modules, kernels) happen here
    start, free_before = _native.memory_stats(), driver_free()
    for _ in range(100):
        cycle()
    end, free_after = _native.memory_stats(), driver_free()
    assert end["device_in_use"] == start["device_in_use"], (start, end)
    assert end["allocators"] == start["allocators"], (start, end)
    assert end["device_reserved"] <= start["device_reserved"] + (4 << 20), (start, end)
    # everything a session took from the driver (ORT's tensors, hipep's arenas, weights) came back
    assert free_before - free_after < (16 << 20), (free_before, free_after)


def test_device_memory_returns_after_loop_sessions():
    """A Loop's plan runs step by step, its pools in device memory (grown as its carried value
    grows), its inputs staged through the stream's buffers: all of it goes with the session."""
    from loop_models import growing_feeds, growing_model

    model = growing_model().SerializeToString()
    feeds = growing_feeds()[0]

    def cycle():
        sess = hipep.InferenceSession(model, device="cuda", disable_cpu_ep_fallback=True)
        sess.run(None, feeds)
        del sess
        gc.collect()

    cycle()
    start, free_before = _native.memory_stats(), driver_free()
    for _ in range(30):
        cycle()
    end, free_after = _native.memory_stats(), driver_free()
    assert end["device_in_use"] == start["device_in_use"], (start, end)
    assert free_before - free_after < (16 << 20), (free_before, free_after)


def test_cpu_reference_device_is_still_selectable(mlp, x):
    want = cpu_session(mlp).run(None, {"x": x})[0]
    sess = hipep.InferenceSession(mlp, device="cpu")
    assert sess.get_providers()[0] == "HipCpuExecutionProvider"
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-6)
    plain = plain_ort_session(mlp, "HipCpuExecutionProvider")
    np.testing.assert_allclose(plain.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-6)
    with pytest.raises(Exception, match="HipCpuExecutionProvider"):
        so = ort.SessionOptions()
        so.add_session_config_entry("ep.hipexecutionprovider.device", "cpu")
        hipep._session_class()(mlp, sess_options=so, providers=providers_for(so, ["HipExecutionProvider"]))


def test_plain_ort_providers_list_runs_on_the_gpu(mlp, x):
    sess = plain_ort_session(mlp, "HipExecutionProvider")
    want = cpu_session(mlp).run(None, {"x": x})[0]
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, **TOL)
