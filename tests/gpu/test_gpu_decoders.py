"""The builder decoders run whole on the GPU (CPU fallback disabled, strict) and follow ORT's CPU
EP step by step: teacher-forced on the CPU EP's greedy tokens for 32 decode steps, each session
keeping its own KV cache, the logits stay within a relative L2 error of 1e-3 (fp32) / 1e-2 (int4)
at every step, and the top-1 token is the CPU EP's wherever the CPU EP's top-2 margin exceeds 10x
the measured logit error (random-weight models have near-ties that flip with no bug present).
Needs the `models` extra (the builder) or the cached models; skipped without a GPU."""
from __future__ import annotations

import os

import numpy as np
import pytest

from hipep.runtime.cuda import cuda_status

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

import onnxruntime as ort  # noqa: E402

import hipep  # noqa: E402
from hipep.tools import model_zoo  # noqa: E402

CASES = [(a, p) for a in model_zoo.ARCHITECTURES for p in model_zoo.PRECISIONS]
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
    decoder = model_zoo.genai_config(folder)["model"]["decoder"]
    window = decoder["sliding_window"].get("window_size", 0) if isinstance(decoder.get("sliding_window"), dict) else 0
    return arch, precision, os.path.join(folder, "model.onnx"), decoder["head_size"], window


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


def _rel_l2(got, want):
    got, want = got.astype(np.float64), want.astype(np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def test_teacher_forced_logits_follow_the_cpu_ep(case):
    arch, precision, path, head_size, window = case
    bound = 1e-3 if precision == "fp32" else 1e-2
    cpu = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    gpu = hipep.InferenceSession(path, device="cuda", strict="1")
    inputs, outputs = cpu.get_inputs(), [o.name for o in cpu.get_outputs()]
    li = outputs.index("logits")
    rng = np.random.default_rng(11)
    ids = rng.integers(3, model_zoo.VOCAB, size=(1, PROMPT)).astype(np.int64)
    prev_cpu = prev_gpu = None
    past = 0
    compared = 0
    for step in range(STEPS + 1):
        want = cpu.run(None, model_zoo.decoder_feeds(inputs, head_size, ids, past, prev_cpu, window))
        got = gpu.run(None, model_zoo.decoder_feeds(inputs, head_size, ids, past, prev_gpu, window))
        w, g = want[li][0, -1].astype(np.float64), got[li][0, -1].astype(np.float64)
        err = _rel_l2(g, w)
        assert err <= bound, f"{arch}-{precision} step {step}: logits rel L2 {err:.3g} > {bound}"
        top2 = np.sort(w)[-2:]
        margin = top2[1] - top2[0]
        max_err = float(np.max(np.abs(g - w)))
        if margin > 10 * max_err:
            assert int(np.argmax(g)) == int(np.argmax(w)), (
                f"{arch}-{precision} step {step}: top-1 {int(np.argmax(g))} != CPU EP's {int(np.argmax(w))} "
                f"with margin {margin:.3g} > 10 x error {max_err:.3g}")
            compared += 1
        prev_cpu, prev_gpu = dict(zip(outputs, want)), dict(zip(outputs, got))
        past += ids.shape[1]
        ids = np.array([[int(np.argmax(w))]], np.int64)  # the CPU EP's greedy token, for both
    assert compared >= STEPS // 4, f"only {compared} of {STEPS + 1} steps had a clear top-1"


def test_decode_steps_on_the_gpu_issue_no_host_reads(case):
    """After the first decode step, a decode step with the past growing reads nothing back to the
    host beyond what the plan declares: no host reads per step once the signature repeats."""
    arch, precision, path, head_size, window = case
    gpu = hipep.InferenceSession(path, device="cuda", strict="1")
    inputs, outputs = gpu.get_inputs(), [o.name for o in gpu.get_outputs()]
    ids = np.arange(3, 3 + PROMPT, dtype=np.int64)[None]
    prev, past = None, 0
    for _ in range(3):
        prev = dict(zip(outputs, gpu.run(None, model_zoo.decoder_feeds(inputs, head_size, ids, past, prev, window))))
        past += ids.shape[1]
        ids = np.array([[5]], np.int64)
    before = hipep.stats()
    for _ in range(8):
        prev = dict(zip(outputs, gpu.run(None, model_zoo.decoder_feeds(inputs, head_size, ids, past, prev, window))))
        past += 1
    after = hipep.stats()
    assert after.get("launches", 0) > before.get("launches", 0)
    reads = after.get("host_reads", 0) - before.get("host_reads", 0)
    assert reads == 0, f"{arch}-{precision}: {reads} host reads in 8 decode steps"
