"""A GPU session loads its plan's kernel modules into the device's context, and cuBLASLt where its
products may call it, on a background thread while it is made (CudaDevice._preload): a process's
first run found all of that still to do, on its critical path. Checked on the host stand-in driver
(hipep.tools.host_driver), each case in a fresh process (the stand-in must be the driver before the
first session on device='cuda'); tests/gpu and benchmarks/results/*-first-prompt-* time it on a GPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import needs_nvrtc

_SESSION = r"""
import json, threading, time
import numpy as np
from onnx import TensorProto, helper
from hipep.tools import host_driver
stand_in = host_driver.install()
import hipep
from hipep.runtime import cublaslt, cuda, kernel_cache

asked = []
def status():
    asked.append(threading.current_thread().name)
    return False, "the stand-in has no cuBLASLt"
cublaslt.status = status

x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 32])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 32])
w = helper.make_tensor("w", TensorProto.FLOAT, [32, 32], np.eye(32, dtype=np.float32).reshape(-1).tolist())
graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Softmax", ["m"], ["y"])],
                          "g", [x], [y], [w])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
sess = hipep.InferenceSession(model.SerializeToString(), device="cuda", strict=True)
dev = cuda.get_device(0)
threads = list(dev.preloads)
for t in threads:
    t.join(120)
named = lambda: sorted(k for k in dev._modules if not k.startswith("src:"))
out = {"threads": [t.name for t in threads], "alive": [t.is_alive() for t in threads], "loaded": named(),
       "asked": list(asked)}
sess.run(None, {"x": np.ones((16, 32), np.float32)})
out["loaded_by_the_run"] = sorted(set(named()) - set(out["loaded"]))

# two threads asking for a module not loaded yet load it once: the second waits for the first
def slow(source, name, arch, defines=None, use_cache=True, folder=None):
    time.sleep(0.3)
    return b"cubin", True
kernel_cache.compile_cubin = slow
before = stand_in.counts.modules
racers = [threading.Thread(target=dev._module, args=("argmax",)) for _ in range(4)]
for t in racers:
    t.start()
for t in racers:
    t.join(30)
out["race_loads"] = stand_in.counts.modules - before
print(json.dumps(out))
"""


def _run(env_extra: dict) -> dict:
    env = {**os.environ, **env_extra}
    # -P: the installed hipep (with its native library), not the source tree's
    r = subprocess.run([sys.executable, "-P", "-c", _SESSION], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@needs_nvrtc
@pytest.mark.slow
def test_a_session_loads_its_modules_and_cublaslt_before_its_first_run():
    out = _run({})
    assert out["threads"] == ["hipep-module-load"] and out["alive"] == [False], out
    assert {"gemm", "softmax"} <= set(out["loaded"]), out
    assert out["loaded_by_the_run"] == [], out  # the run found every module of the plan loaded
    assert out["asked"] == ["hipep-module-load"], out  # cuBLASLt asked for once, off the caller's thread
    assert out["race_loads"] == 1, out


@needs_nvrtc
@pytest.mark.slow
def test_with_hipeps_own_gemms_only_cublaslt_is_left_alone():
    out = _run({"HIPEP_GEMM": "own"})
    assert {"gemm", "softmax"} <= set(out["loaded"]), out
    assert out["asked"] == [], out
