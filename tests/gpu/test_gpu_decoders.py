"""The builder decoders (fp32, fp16, int4; Qwen2.5-VL's and Qwen3-VL's text decoders; Qwen3) run whole
on the GPU (CPU fallback disabled, strict) and follow ORT's CPU EP step by step: teacher-forced on
the CPU EP's greedy tokens for 32 decode steps, each session keeping its own KV cache, the logits
stay within a relative L2 error of 1e-3 (fp32) / 1e-2 (fp16, int4) at every step, and the top-1
token is the CPU EP's wherever the CPU EP's top-2 margin exceeds 10x the measured logit error
(random-weight models have near-ties that flip with no bug present). The comparison is
tests/teacher_forcing.py, which the CPU reference device's decoder tests run too. Needs the `models`
extra (the builder) or the cached models; skipped without a GPU."""
from __future__ import annotations

import os

import numpy as np
import pytest

from hipep.runtime.cuda import cuda_status

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

import hipep  # noqa: E402
from hipep.tools import model_zoo  # noqa: E402
from teacher_forcing import GPU_MISSING_OPS, assert_follows_the_cpu_ep, decoder_geometry, run_step  # noqa: E402

CASES = [(a, p) for a, p in model_zoo.TEST_DECODERS if a not in GPU_MISSING_OPS]
STEPS = 32
PROMPT = 7


def _folder(arch, precision):
    try:
        return model_zoo.decoder(arch, precision)
    except Exception as e:  # no builder on this machine and no cached model
        pytest.skip(f"the {arch} {precision} decoder cannot be built here: {type(e).__name__}: {str(e)[:200]}")


@pytest.fixture(scope="module", params=CASES, ids=[f"{a}-{p}" for a, p in CASES])
def case(request):
    arch, precision = request.param
    folder = _folder(arch, precision)
    path, head_size, window = decoder_geometry(folder)
    return arch, precision, path, head_size, window, folder


def test_every_node_has_a_gpu_kernel(case):
    report = _partition_on_cuda(case[2])
    assert report.all_claimed, "\n".join(report.rejection_lines())


def _partition_on_cuda(path):
    import onnx

    from hipep.explain import _load_small_external_tensors
    from hipep.graph import GraphView
    from hipep.partition import partition

    model = _load_small_external_tensors(onnx.load(path, load_external_data=False), os.path.dirname(path), path)
    return partition(GraphView.from_onnx(model), device="cuda")


def test_teacher_forced_logits_follow_the_cpu_ep(case):
    arch, precision, path, head_size, window, folder = case
    gpu = hipep.InferenceSession(path, device="cuda", strict="1")
    assert_follows_the_cpu_ep(folder, gpu, precision, steps=STEPS, prompt=PROMPT)


def test_decode_steps_on_the_gpu_issue_no_host_reads(case):
    """After the first decode step, a decode step with the past growing reads nothing back to the
    host beyond what the plan declares: no host reads per step once the signature repeats."""
    arch, precision, path, head_size, window, _ = case
    gpu = hipep.InferenceSession(path, device="cuda", strict="1")
    inputs, outputs = gpu.get_inputs(), [o.name for o in gpu.get_outputs()]
    ids = np.arange(3, 3 + PROMPT, dtype=np.int64)[None]
    prev, past = None, 0
    for _ in range(3):
        prev = dict(zip(outputs, run_step(gpu, model_zoo.decoder_feeds(inputs, head_size, ids, past, prev, window))))
        past += ids.shape[1]
        ids = np.array([[5]], np.int64)
    before = hipep.stats()
    for _ in range(8):
        prev = dict(zip(outputs, run_step(gpu, model_zoo.decoder_feeds(inputs, head_size, ids, past, prev, window))))
        past += 1
    after = hipep.stats()
    assert after.get("launches", 0) > before.get("launches", 0)
    reads = after.get("host_reads", 0) - before.get("host_reads", 0)
    assert reads == 0, f"{arch}-{precision}: {reads} host reads in 8 decode steps"
