"""Kernels compiled in the background: a session on a GPU device starts compiling the kernels/*.hip
modules its plan's kernels use when its executor is made, on daemon threads, so that the first run
on a machine whose kernel cache is empty waits for its slowest module instead of the sum of all
of them. A module being compiled in the background is waited for, never compiled twice; a
background compile that fails is raised where the kernel is bound."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from helpers import needs_nvrtc
from hipep.runtime import kernel_cache


@pytest.fixture
def fake_nvrtc(tmp_path, monkeypatch):
    """nvrtc_compile replaced by a slow fake that counts its calls per name (and fails for names
    in `fail`); the cache folder in tmp_path."""
    monkeypatch.setenv(kernel_cache.CACHE_ENV, str(tmp_path / "kernels"))
    monkeypatch.setattr(kernel_cache, "nvrtc_version", lambda: (13, 0))
    calls: dict[str, int] = {}
    fail: set[str] = set()
    lock = threading.Lock()

    def compile_(source, name, arch, defines):
        with lock:
            calls[name] = calls.get(name, 0) + 1
        time.sleep(0.2)
        if name in fail:
            raise kernel_cache.KernelCompileError(f"NVRTC could not compile kernel '{name}' for {arch}:\nbad")
        return f"cubin of {source}".encode()

    monkeypatch.setattr(kernel_cache, "nvrtc_compile", compile_)
    return calls, fail


def test_a_module_compiling_in_the_background_is_waited_for_not_compiled_again(fake_nvrtc):
    calls, _ = fake_nvrtc
    sources = [("big", "// big module 1"), ("small", "// small module 1")]
    assert not kernel_cache.is_cached(sources[0][1], "sm_90")
    threads = kernel_cache.compile_in_background(sources, "sm_90")
    assert len(threads) == 2 and all(t.daemon for t in threads)
    data, hit = kernel_cache.compile_cubin(sources[0][1], "big", "sm_90")  # while the thread compiles it
    assert data == b"cubin of // big module 1"
    for t in threads:
        t.join(5)
    assert calls == {"big": 1, "small": 1}
    assert kernel_cache.is_cached(sources[1][1], "sm_90")
    # and a later call (this process, or the next one through the folder) takes the cached bytes
    assert kernel_cache.compile_cubin(sources[1][1], "small", "sm_90") == (b"cubin of // small module 1", True)
    assert calls == {"big": 1, "small": 1}


def test_a_failed_background_compile_is_raised_where_the_kernel_is_bound(fake_nvrtc):
    calls, fail = fake_nvrtc
    fail.add("broken")
    threads = kernel_cache.compile_in_background([("broken", "// does not compile 2")], "sm_90")
    with pytest.raises(kernel_cache.KernelCompileError, match="could not compile kernel 'broken'"):
        kernel_cache.compile_cubin("// does not compile 2", "broken", "sm_90")
    for t in threads:
        t.join(5)
    assert not kernel_cache.is_cached("// does not compile 2", "sm_90")
    assert 1 <= calls["broken"] <= 2  # the background's try, and the binding's own if it came after


def test_the_background_uses_at_most_the_workers_asked_for(fake_nvrtc):
    calls, _ = fake_nvrtc
    threads = kernel_cache.compile_in_background([(f"m{i}", f"// module {i} 3") for i in range(5)], "sm_90", workers=2)
    assert len(threads) == 2
    for t in threads:
        t.join(5)
    assert calls == {f"m{i}": 1 for i in range(5)}
    assert kernel_cache.compile_in_background([], "sm_90") == []
    # by default as many as the CPUs this process may use (its affinity, not the machine's count)
    threads = kernel_cache.compile_in_background([(f"n{i}", f"// module {i} 4") for i in range(64)], "sm_90")
    assert len(threads) == min(64, len(os.sched_getaffinity(0)))
    for t in threads:
        t.join(30)
    assert all(calls[f"n{i}"] == 1 for i in range(64))


_SESSION = r"""
import json, sys
import numpy as np
import onnx
from onnx import TensorProto, helper
from hipep.tools import host_driver
host_driver.install()
import hipep
from hipep.runtime import kernel_cache

started = []
real = kernel_cache.compile_in_background
def recording(sources, arch, defines=None, workers=None):
    started.append(sorted(n for n, _ in sources))
    return real(sources, arch, defines, workers)
kernel_cache.compile_in_background = recording
compiled = []
real_compile = kernel_cache.nvrtc_compile
def counting(source, name, arch, defines):
    compiled.append(name)
    return real_compile(source, name, arch, defines)
kernel_cache.nvrtc_compile = counting

x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["s"]), helper.make_node("ArgMax", ["s"], ["i"]),
                           helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT),
                           helper.make_node("Add", ["s", "f"], ["y"])], "g", [x], [y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
out = {}
for session in ("first", "second"):
    sess = hipep.InferenceSession(model.SerializeToString(), device="cuda", strict=True)
    out[session + "_started"] = list(started)
    started.clear()
    sess.run(None, {"x": np.ones((2, 8), np.float32)})
out["compiled"] = compiled
print(json.dumps(out))
"""


@needs_nvrtc
def test_a_session_starts_compiling_its_modules_before_its_first_run(tmp_path):
    env = {**os.environ, kernel_cache.CACHE_ENV: str(tmp_path / "kernels")}
    # -P: the installed hipep (with its native library), not the source tree's
    r = subprocess.run([sys.executable, "-P", "-c", _SESSION], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = __import__("json").loads(r.stdout.strip().splitlines()[-1])
    first = out["first_started"]
    assert len(first) == 1 and {"softmax", "argmax"} <= set(first[0]), out
    # modules in the cache (or this process) are not started again
    assert out["second_started"] == [], out
    # each module compiled once (the run waited for the background's compile); only the generated
    # pointwise kernels, whose source the binding renders, are compiled at the run
    modules = [n for n in out["compiled"] if not n.startswith("hipep_pw_")]
    assert sorted(modules) == sorted(set(modules)) and set(first[0]) <= set(modules), out


def test_without_new_threads_the_bindings_compile_what_they_need(fake_nvrtc, monkeypatch):
    """At interpreter shutdown no thread starts: nothing is started in the background, and the
    module is compiled where its kernel is bound."""
    calls, _ = fake_nvrtc

    def refuse(self):
        raise RuntimeError("can't create new thread at interpreter shutdown")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    assert kernel_cache.compile_in_background([("late", "// late module 5")], "sm_90") == []
    assert calls == {}
    assert kernel_cache.compile_cubin("// late module 5", "late", "sm_90") == (b"cubin of // late module 5", False)
