"""hipep's cuda device on the host stand-in driver (hipep.tools.host_driver): a builder decoder
decodes through ORT with IOBinding and device OrtValues, kernels compiled by NVRTC and bound, the
step's launches captured into one graph, all without a GPU. What the step asks of the driver is
what it would ask of a GPU's, so these tests hold the decode step's host path where CI can see it:
one graph launch a step, no launch one by one, no host read, nothing copied through hipep's data
transfer, and no more kernel nodes updated inside the graph than the two whose arguments really
change: the attention mask's ReduceSum, whose length grows, and the embedding's Gather, whose
input_ids ORT copies to a new address each step (a binding it has seen, kept by signature).
Numbers are not checked (kernels do not run on the stand-in); tests/gpu checks them on a GPU.

Each check runs in a fresh process: ORT reads HIPEP_EMULATE_GPU_MEMORY once, when it loads hipep's
plugin, and the stand-in must be the driver before the first session on device='cuda'."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import REPO, needs_nvrtc

_DECODE = r"""
import json
import numpy as np
from hipep.tools import host_driver, model_zoo
stand_in = host_driver.install()
import hipep
import onnxruntime as ort

folder = model_zoo.decoder("llama", "__PRECISION__")
sess = hipep.InferenceSession(folder + "/model.onnx", device="cuda", strict=True)
# the KV cache's and the logits' ONNX element types (f16: 10, bf16: 16, f32: 1)
cache_type = {"tensor(float16)": 10, "tensor(bfloat16)": 16}[sess.get_inputs()[2].type]
logits_type = {"tensor(float16)": 10, "tensor(float)": 1}[sess.get_outputs()[0].type]
ins = {i.name: i for i in sess.get_inputs()}
binding = sess.io_binding()
max_len, prompt = 64, 12
for name, i in ins.items():
    if name.startswith("past_key_values."):
        cache = ort.OrtValue.ortvalue_from_shape_and_type([1, i.shape[1], max_len, 16], cache_type, "cuda", 0)
        assert cache.device_name().lower() != "cpu", cache.device_name()
        binding.bind_ortvalue_input(name, cache)
        binding.bind_ortvalue_output(name.replace("past_key_values.", "present."), cache)
vocab = sess.get_outputs()[0].shape[-1]
logits = {}
keys = ("launches", "graph_launches", "graph_node_updates", "direct_launches", "host_reads", "transfer_bytes")
steps = []
for total in range(prompt, 40):
    n = prompt if total == prompt else 1
    binding.bind_cpu_input("input_ids", np.full((1, n), 5, np.int64))
    binding.bind_cpu_input("attention_mask", np.ones((1, total), np.int64))
    if n not in logits:
        logits[n] = ort.OrtValue.ortvalue_from_shape_and_type([1, n, vocab], logits_type, "cuda", 0)
    binding.bind_ortvalue_output("logits", logits[n])
    before, kernels = hipep.stats(), stand_in.counts.launches
    sess.run_with_iobinding(binding)
    after = hipep.stats()
    steps.append({**{k: after.get(k, 0) - before.get(k, 0) for k in keys},
                  "stand_in_launches": stand_in.counts.launches - kernels})
print(json.dumps({"steps": steps}))
"""


def _run(script: str) -> dict:
    done = subprocess.run([sys.executable, "-P", "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@needs_nvrtc
@pytest.mark.parametrize("precision", ["int4-f16", "bf16", "int4-bf16"])
def test_decode_step_is_one_graph_launch_on_the_stand_in(precision):
    """The GPU user's int4 build in f16, and the bf16 builds (their attention, norms, GEMMs and
    int4 GEMVs bound in bf16)."""
    steps = _run(_DECODE.replace("__PRECISION__", precision))["steps"]
    assert steps[0]["launches"] > 0  # the prompt's step ran on the cuda device
    decode = steps[8:]  # after the warm-up steps that trace, bind and capture each new layout
    assert decode
    for s in decode:
        assert s["graph_launches"] == 1, s
        assert s["direct_launches"] == 0 and s["stand_in_launches"] == 0, s
        assert s["host_reads"] == 0 and s["transfer_bytes"] == 0, s
        assert s["graph_node_updates"] <= 2, s


@needs_nvrtc
def test_decode_host_benchmark_runs_on_the_stand_in(tmp_path):
    """benchmarks/decode_host.py --host-driver: the host-time report of a decode step, made where
    there is no GPU (what its tables say is the stand-in's; kernel time is zero there)."""
    from hipep.tools import model_zoo

    folder = model_zoo.decoder("llama", "int4-f16")
    done = subprocess.run([sys.executable, "-P", str(REPO / "benchmarks" / "decode_host.py"), "--host-driver", "--model",
                           folder, "--steps", "4", "--top", "5", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (report,) = tmp_path.glob("*-decode-host-host-stand-in.md")
    text = report.read_text()
    assert "on host stand-in" in text and "| the replay's kernel time (kernel_us) | 0.0 |" in text
    assert "| CUDA graph launches / kernel nodes updated / direct launches | 1 / " in text


# A MatMul with a weight of 64 x N floats and a Relu, as `data` (serialized), on the stand-in.
_WEIGHT_MODEL = r"""
import json
import numpy as np
from onnx import TensorProto, helper, numpy_helper
from hipep.tools import host_driver
stand_in = host_driver.install()
import hipep

w = np.random.default_rng(0).random((64, __N__), np.float32)
graph = helper.make_graph(
    [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])], "weights",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
    [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", __N__])], [numpy_helper.from_array(w, "w")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 9
data = model.SerializeToString()
"""

_SESSIONS = _WEIGHT_MODEL.replace("__N__", "32") + r"""
import gc
from hipep.runtime.cuda import get_device


def cycle():
    before = len(get_device(0)._uploads)
    sess = hipep.InferenceSession(data, device="cuda")
    made = len(get_device(0)._uploads)
    assert made > before, "the weight is uploaded when the session is made"
    for n in (3, 5, 7):  # three shapes: three bindings of the same weight
        (z,) = sess.run(None, {"x": np.ones((n, 64), np.float32)})
        assert z.shape == (n, 32)
        assert len(get_device(0)._uploads) == made, "a run uploads no weight"
    del sess
    gc.collect()


def live():
    device = get_device(0)
    device._release_pending()
    return {"uploads": len(device._uploads), "driver_bytes": sum(len(b) for b in stand_in._memory.values())}


cycle()  # one-time allocations (modules, the device's own buffers) happen here
start = live()
for _ in range(20):
    cycle()
print(json.dumps({"start": start, "end": live()}))
"""


@needs_nvrtc
def test_sessions_give_back_their_weights_and_memory_on_the_stand_in():
    """A session's weights are uploaded once, when it is made (its runs upload none), and go with it:
    twenty sessions, each binding its weight at three shapes, leave no upload and no driver memory behind. The compiled programs are shared
    by the device across sessions, so whatever a program keeps must not hold a session's arrays
    (tests/gpu/test_gpu_device_memory.py checks the same on a GPU, with the driver's free memory)."""
    out = _run(_SESSIONS)
    assert out["end"] == out["start"], out


_FIRST_RUN = r"""
import json
import numpy as np
from hipep.tools import host_driver, model_zoo
stand_in = host_driver.install()
import hipep
from hipep.runtime import cuda_graphs

seen = []
bind = cuda_graphs._bind


def counting_bind(st, node, stream, first_run=False):
    seen.append(stand_in.counts.launches)  # kernels launched one by one before this node is bound
    return bind(st, node, stream, first_run)


cuda_graphs._bind = counting_bind
folder = model_zoo.decoder("llama", "int4-f16")
sess = hipep.InferenceSession(folder + "/model.onnx", device="cuda", strict=True)
feeds = model_zoo.decoder_feeds(sess.get_inputs(), 16, np.full((1, 9), 5, np.int64), 0, None)
runs = []
for _ in range(3):
    seen.clear()
    sess.run(None, feeds)
    runs.append(list(seen))
print(json.dumps({"runs": runs}))
"""


@needs_nvrtc
def test_a_first_run_issues_each_node_as_it_is_bound():
    """A new shape's first run issues each node's launches as soon as that node is bound, so the GPU
    runs them while the host binds the next: the launches issued before each binding rise node by
    node (binding the whole segment first would see none issued until the last binding). The runs
    after it bind again only the launches whose arguments change (their values read by the
    binding), and issue nothing one by one before the graph's capture."""
    first, second, third = _run(_FIRST_RUN)["runs"]
    assert len(first) >= 10
    assert first == sorted(first) and len(set(first)) >= len(first) * 3 // 4, first
    assert 0 < len(second) < len(first) // 2 and len(set(second)) == 1, second
    assert len(third) <= len(second) and len(set(third)) <= 1, third


_PROVISIONAL = r"""
import json
import numpy as np
from hipep.tools import host_driver, model_zoo
stand_in = host_driver.install()
import hipep
from hipep.runtime import cublaslt, cuda_graphs, gpu_linalg
from hipep.runtime.gpu_binding_core import BlasOp

# cuBLASLt as the stand-in's: a library call that counts its calls (it launches nothing here)
blas_calls = []
cublaslt.status = lambda: (True, "stand-in")
gpu_linalg._blas_ops = lambda p, a, b, c, y, dt, target: [
    BlasOp(call=lambda stream: blas_calls.append(p.m), key=("blas", p.m, p.n, p.k, a.ptr, b.ptr, y.ptr))]
entries = []
bind = cuda_graphs.CudaProgram.bind


def recording_bind(self, args, stream=None, first_run=False):
    ops = bind(self, args, stream, first_run)
    entries.extend(o.entry for o in ops if "_mnb_" in getattr(o, "entry", ""))
    return ops


cuda_graphs.CudaProgram.bind = recording_bind
folder = model_zoo.decoder("llama", "int4-f16")
sess = hipep.InferenceSession(folder + "/model.onnx", device="cuda", strict=True)
runs = []
for n in (100, 100, 100, 40, 40):
    feeds = model_zoo.decoder_feeds(sess.get_inputs(), 16, np.full((1, n), 5, np.int64), 0, None)
    entries.clear()
    blas_calls.clear()
    before = hipep.stats()
    sess.run(None, feeds)
    after = hipep.stats()
    runs.append({"entries": entries[:], "blas_calls": len(blas_calls),
                 **{k: after.get(k, 0) - before.get(k, 0) for k in ("graph_launches", "direct_launches")}})
print(json.dumps({"runs": runs}))
"""


@needs_nvrtc
def test_a_first_run_binds_matmul_nbits_provisionally_and_the_capture_binds_cublaslt():
    """A prompt length's first run takes MatMulNBits' tensor-core GEMM where cuBLASLt would run (no
    plan, no library kernel loaded while the host issues launches one by one); the second run, which
    captures the length's graph, binds those nodes again onto cuBLASLt, and the third replays that
    graph binding nothing. A length whose rows the tensor-core GEMM takes anyway (40) keeps its first
    binding. (cuBLASLt is the stand-in's here: a call that counts, capturable.)"""
    first, second, third, short_first, short_second = _run(_PROVISIONAL)["runs"]
    products = len(first["entries"])
    assert products >= 4 and set(first["entries"]) == {"hipep_mnb_gemm_tc_f16_b4"}, first
    assert first["blas_calls"] == 0 and first["graph_launches"] == 0 and first["direct_launches"] >= products
    assert sorted(set(second["entries"])) == ["hipep_mnb_dequant_f16_b4"] and len(second["entries"]) == products
    assert second["blas_calls"] == products and second["graph_launches"] == 1 and second["direct_launches"] == 0
    assert third == {"entries": [], "blas_calls": 0, "graph_launches": 1, "direct_launches": 0}, third
    assert set(short_first["entries"]) == {"hipep_mnb_gemm_tc_f16_b4"} and short_first["blas_calls"] == 0
    assert short_second["entries"] == [] and short_second["graph_launches"] == 1, short_second


_OUT_OF_MEMORY = _WEIGHT_MODEL.replace("__N__", "48") + r"""
alloc = stand_in.cuMemAlloc
stand_in.cuMemAlloc = lambda n: (host_driver.CUresult.CUDA_ERROR_OUT_OF_MEMORY, 0) if n == w.nbytes else alloc(n)
try:
    hipep.InferenceSession(data, device="cuda")
    error = None
except Exception as e:
    error = str(e)
stand_in.cuMemAlloc = alloc
sess = hipep.InferenceSession(data, device="cuda")
(z,) = sess.run(None, {"x": np.ones((3, 64), np.float32)})
print(json.dumps({"error": error, "shape": list(z.shape)}))
"""


@needs_nvrtc
def test_a_device_short_of_memory_for_the_weights_fails_the_session_not_a_run():
    """The weights go to the device when the session is made, so a device that cannot hold them
    fails the session, saying what it was copying and the driver's error; the next session, with
    memory, runs."""
    out = _run(_OUT_OF_MEMORY)
    want = "copying the weights and constants its launches read (1 array, 12288 bytes)"
    assert out["error"] is not None and want in out["error"]
    assert "CUDA_ERROR_OUT_OF_MEMORY" in out["error"] and out["shape"] == [3, 48]


def test_address_emulation_without_the_stand_in_offers_no_gpu_memory():
    """HIPEP_EMULATE_GPU_MEMORY=addresses hands host memory over as device addresses, which only the
    stand-in can take: without it the plugin offers no GPU memory and says why (on a GPU machine a
    kernel would fault on such an address)."""
    script = ("import json, os; os.environ['HIPEP_EMULATE_GPU_MEMORY'] = 'addresses'\n"
              "import hipep; from hipep import _native\n"
              "hipep.register(); print(json.dumps(_native.gpu_memory()))")
    memory = _run(script)
    assert memory["runtime"] is None
    assert "host stand-in driver" in memory["why_not"] and "not installed" in memory["why_not"]
