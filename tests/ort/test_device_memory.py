"""ORT's side of hipep's GPU memory (EP devices with GPU memory infos, the caching allocator, the
data transfer, IOBinding with device OrtValues), exercised without a GPU: HIPEP_EMULATE_GPU_MEMORY=1
makes the plugin present host memory to ORT as NVIDIA GPU 0's, so ORT allocates, binds and copies
exactly as on a GPU while the CPU reference device computes. The plugin reads the variable once,
when ORT loads it, so the emulated checks run in a subprocess. tests/gpu/test_gpu_device_memory.py
runs the same paths on a real GPU.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import onnxruntime as ort
import pytest

import hipep
from hipep.ort_compat import session_providers

SCRIPT = textwrap.dedent("""
    import gc, json
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper

    import hipep
    from hipep import _native
    from hipep.ort_compat import bind_output_to_gpu, gpu_ortvalue, session_providers

    hipep.register()
    out = {"gpu_memory": _native.gpu_memory()}
    out["devices"] = {}
    for d in ort.get_ep_devices():
        mi = d.memory_info(ort.OrtDeviceMemoryType.DEFAULT)
        out["devices"][d.ep_name] = {"metadata": dict(d.ep_metadata), "gpu_memory": mi is not None}

    def model(nodes, inputs, outputs):
        g = helper.make_graph(nodes, "g", inputs, outputs)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 9
        return m.SerializeToString()

    f = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
    relu_add = model([helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Add", ["t", "x"], ["y"])],
                     [f("x", [4, 8])], [f("y", [4, 8])])
    # GlobalLpPool has no hipep implementation: it stays on the CPU EP, between two hipep subgraphs.
    with_pool = model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("GlobalLpPool", ["a"], ["d"]),
                       helper.make_node("Neg", ["d"], ["y"])], [f("x", [1, 3, 3])], [f("y", [1, 3, 1])])
    x = (np.arange(32, dtype=np.float32).reshape(4, 8) - 16) / 7
    ref = ort.InferenceSession(relu_add, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]

    def strict():
        so = ort.SessionOptions()
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        return so

    def on_hipep(model, so, session_class=ort.InferenceSession, ep="HipExecutionProvider", **options):
        # by name where onnxruntime selects plugin EPs so, else by its devices (onnxruntime 1.24)
        return session_class(model, so, providers=session_providers(so, ep, options))

    sess = on_hipep(relu_add, strict())
    t0 = _native.memory_stats()["transfer_bytes"]
    y = sess.run(None, {"x": x})[0]
    out["plain_equal"] = bool(np.array_equal(y, ref))
    out["plain_transfer"] = _native.memory_stats()["transfer_bytes"] - t0

    xv = gpu_ortvalue(x)  # ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0) where ORT names the vendor
    out["ortvalue_device"] = xv.device_name()
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", xv)
    bind_output_to_gpu(binding, "y")  # binding.bind_output("y", "cuda", 0) likewise
    before = _native.memory_stats()["transfer_bytes"]
    reads = hipep.stats().get("host_reads", 0)
    for _ in range(3):
        sess.run_with_iobinding(binding)
    out["bound_transfer"] = _native.memory_stats()["transfer_bytes"] - before
    out["bound_host_reads"] = hipep.stats().get("host_reads", 0) - reads
    yv = binding.get_outputs()[0]
    out["output_device"] = yv.device_name()
    before = _native.memory_stats()["transfer_bytes"]
    out["bound_equal"] = bool(np.array_equal(yv.numpy(), ref))
    out["numpy_transfer"] = _native.memory_stats()["transfer_bytes"] - before
    out["stats_transfer"] = hipep.stats().get("transfer_bytes", 0) == _native.memory_stats()["transfer_bytes"]
    del binding, yv, xv, sess
    gc.collect()

    # A CPU EP node between hipep's subgraphs: ORT copies across through hipep's data transfer.
    a = np.array([[[2, 1, 0], [1, 3, 1], [0, 1, 4]]], np.float32)
    want = ort.InferenceSession(with_pool, providers=["CPUExecutionProvider"]).run(None, {"x": a})[0]
    got = on_hipep(with_pool, ort.SessionOptions()).run(None, {"x": a})[0]
    out["partial_close"] = bool(np.allclose(got, want, rtol=1e-5))

    # Device memory comes back: sessions made and dropped leave nothing in use.
    start = _native.memory_stats()
    for _ in range(20):
        s = on_hipep(relu_add, strict())
        b = s.io_binding()
        b.bind_cpu_input("x", x)
        bind_output_to_gpu(b, "y")
        s.run_with_iobinding(b)
        del s, b
        gc.collect()
    end = _native.memory_stats()
    out["in_use"] = [start["device_in_use"], end["device_in_use"]]
    out["allocators"] = [start["allocators"], end["allocators"]]

    # The CPU reference device: its own EP name, in host memory.
    cpu = hipep.InferenceSession(relu_add, device="cpu")
    out["cpu_providers"] = cpu.get_providers()
    out["cpu_equal"] = bool(np.array_equal(cpu.run(None, {"x": x})[0], ref))
    out["provider_for"] = [hipep.provider_for("cpu"), hipep.provider_for("auto")]
    try:
        on_hipep(relu_add, strict(), hipep._session_class(), device="cpu")
        out["cpu_on_gpu_ep"] = "no error"
    except Exception as e:
        out["cpu_on_gpu_ep"] = str(e)
    print("RESULT" + json.dumps(out))
    """)


@pytest.fixture(scope="module")
def emulated():
    env = {**os.environ, "HIPEP_EMULATE_GPU_MEMORY": "1",
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-P", "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT")), None)
    assert done.returncode == 0 and line, done.stderr[-4000:]
    return json.loads(line[len("RESULT"):])


def test_gpu_ep_device_carries_gpu_memory_and_cpu_ep_device_host_memory(emulated):
    assert emulated["gpu_memory"]["runtime"] == "emulated" and emulated["gpu_memory"]["vendor_id"] == 0x10DE
    gpu, cpu = emulated["devices"]["HipExecutionProvider"], emulated["devices"]["HipCpuExecutionProvider"]
    assert gpu["gpu_memory"] and gpu["metadata"]["memory"] == "gpu" and gpu["metadata"]["gpu_ordinal"] == "0"
    assert not cpu["gpu_memory"] and cpu["metadata"]["memory"] == "host"


def test_host_feeds_go_through_the_data_transfer(emulated):
    assert emulated["plain_equal"]
    assert emulated["plain_transfer"] == 2 * 4 * 8 * 4  # the input in, the output back
    assert emulated["stats_transfer"]


def test_iobinding_with_device_ortvalues_copies_nothing(emulated):
    assert emulated["ortvalue_device"] == "cuda" and emulated["output_device"] == "cuda"
    assert emulated["bound_transfer"] == 0 and emulated["bound_host_reads"] == 0
    assert emulated["bound_equal"]
    assert emulated["numpy_transfer"] == 4 * 8 * 4  # OrtValue.numpy() reads back through hipep


def test_a_cpu_ep_node_between_hipep_subgraphs(emulated):
    assert emulated["partial_close"]


def test_device_memory_returns_after_sessions(emulated):
    start, end = emulated["in_use"]
    assert end == start
    assert emulated["allocators"][0] == emulated["allocators"][1]


def test_cpu_reference_device_beside_a_gpu(emulated):
    assert emulated["cpu_providers"][0] == "HipCpuExecutionProvider"
    assert emulated["cpu_equal"]
    assert emulated["provider_for"] == ["HipCpuExecutionProvider", "HipExecutionProvider"]
    assert "HipCpuExecutionProvider" in emulated["cpu_on_gpu_ep"] and "device" in emulated["cpu_on_gpu_ep"]


def test_without_a_gpu_runtime_both_eps_are_host_memory():
    from hipep import _native

    if _native.gpu_memory()["runtime"] is not None:
        pytest.skip("this process offers GPU memory")
    assert _native.gpu_memory()["why_not"]
    names = {d.ep_name: d for d in ort.get_ep_devices()}
    for name in ("HipExecutionProvider", "HipCpuExecutionProvider"):
        assert names[name].memory_info(ort.OrtDeviceMemoryType.DEFAULT) is None
        assert names[name].ep_metadata["memory"] == "host"
    assert hipep.provider_for("cpu") == "HipExecutionProvider"


def test_cpu_ep_rejects_gpu_devices():
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    so = ort.SessionOptions()
    so.add_session_config_entry("ep.hipcpuexecutionprovider.device", "cuda")
    with pytest.raises(Exception, match="HipCpuExecutionProvider is hipep's CPU reference device"):
        hipep._session_class()(m.SerializeToString(), sess_options=so,
                               providers=session_providers(so, "HipCpuExecutionProvider"))
    so = ort.SessionOptions()
    sess = hipep._session_class()(m.SerializeToString(), sess_options=so,
                                  providers=session_providers(so, "HipCpuExecutionProvider"))
    x = np.array([-1, 2], np.float32)
    assert (sess.run(None, {"x": x})[0] == np.maximum(x, 0)).all()
