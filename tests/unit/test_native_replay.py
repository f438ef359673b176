"""Native replay (csrc/native_replay.cc, hipep.runtime.native_replay) on the host stand-in driver:
a builder decoder decodes through IOBinding with device OrtValues, and once its decode steps
repeat, Compute replays them without calling Python. After every step Compute replayed, the
record's parameters and host values are checked against what Python's bindings make for that
step's tensors (their addresses and shapes, which native code reports): the kernel, its launch
configuration and every parameter byte of each kernel node the record sets. Kernels do not run
on the stand-in (tests/gpu/test_gpu_native_replay.py compares logits on a GPU).

Each scenario runs in a fresh process (ORT reads HIPEP_EMULATE_GPU_MEMORY when it loads the
plugin, and the stand-in must be the driver before the first session on device='cuda')."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import needs_nvrtc

_DECODE = r"""
import json, os, sys
import numpy as np
scenario = json.loads(sys.argv[1])
os.environ.update(scenario.get("env", {}))
from hipep.tools import host_driver, model_zoo
stand_in = host_driver.install()
import hipep
import onnxruntime as ort
from hipep.runtime import native_replay

native_replay.MAX_VARIANTS = scenario.get("max_variants", native_replay.MAX_VARIANTS)
folder = model_zoo.decoder("llama", "int4-f16")
options = {"native_replay": scenario.get("native_replay", "on")}
sess = hipep.InferenceSession(folder + "/model.onnx", device="cuda", strict=True, **options)
ins = {i.name: i for i in sess.get_inputs()}
binding = sess.io_binding()
max_len = 224

def caches():
    out = {}
    for name, i in ins.items():
        if name.startswith("past_key_values."):
            out[name] = ort.OrtValue.ortvalue_from_numpy(np.zeros((1, i.shape[1], max_len, 16), np.float16), "cuda", 0)
    return out

def bind_caches(values):
    for name, value in values.items():
        binding.bind_ortvalue_input(name, value)
        binding.bind_ortvalue_output(name.replace("past_key_values.", "present."), value)

bind_caches(caches())
vocab = sess.get_outputs()[0].shape[-1]
logits = {}
keys = ("runs", "native_runs", "graph_launches", "graph_node_updates", "direct_launches", "host_reads",
        "transfer_bytes")
steps = []

def step(total, n, out=0):
    binding.bind_cpu_input("input_ids", np.full((1, n), 3 + total % 11, np.int64))
    binding.bind_cpu_input("attention_mask", np.ones((1, total), np.int64))
    if n not in logits:
        logits[n] = [ort.OrtValue.ortvalue_from_shape_and_type([1, n, vocab], np.float16, "cuda", 0) for _ in range(2)]
    binding.bind_ortvalue_output("logits", logits[n][out])
    before = hipep.stats()
    sess.run_with_iobinding(binding)
    after = hipep.stats()
    s = {k: after.get(k, 0) - before.get(k, 0) for k in keys}
    s["total"] = total
    recs = native_replay.records()
    if s["native_runs"]:
        (rec,) = [r for r in recs if r.native.runs]
        s["check"] = rec.check_last_run()
        s["miss"] = rec.native.last_miss
    s["records"] = len(recs)
    s["variants"] = max([len(r.variants) for r in recs], default=0)
    s["record"] = [id(r) for r in recs]
    executors = {id(r.executor): r.executor for r in recs}.values()
    s["contexts"] = [[c.sizes["device"], any(c is r.context for r in recs)]
                     for ex in executors for c in ex._all_contexts]
    # graphs kept for contexts that left their executor (a dropped record's)
    s["stale_graphs"] = sum(len(set(spec.graphs) - {c.key for c in ex._all_contexts})
                            for ex in executors for spec in ex.specializations())
    steps.append(s)

for phase in scenario["phases"]:
    kind = phase[0]
    if kind == "prompt":
        step(phase[1], phase[2] if len(phase) > 2 else 12)
    elif kind == "decode":
        for total in range(phase[1], phase[2]):
            step(total, 1, out=total % 2 if len(phase) > 3 and phase[3] == "alternate" else 0)
    elif kind == "new_caches":
        bind_caches(caches())
print(json.dumps({"steps": steps}))
"""


def _decode(**scenario) -> list[dict]:
    done = subprocess.run([sys.executable, "-P", "-c", _DECODE, json.dumps(scenario)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])["steps"]


def _check_native(steps: list[dict], updates: int = 2) -> None:
    for s in steps:
        assert s["runs"] == 1, s  # a native run is a run
        assert s["host_reads"] == 0 and s["transfer_bytes"] == 0, s
        if s["native_runs"]:  # (a step through Python may be its context's first: launched one by one)
            assert s["graph_launches"] == 1 and s["direct_launches"] == 0, s
            # the mask's ReduceSum and the embedding's Gather (and the launch writing moved logits)
            assert s["graph_node_updates"] <= updates, s
            assert s["check"] == [], json.dumps(s)


@needs_nvrtc
def test_decode_steps_replay_natively_with_the_parameters_python_binds():
    """A prompt, then decode steps: from the third step of the layout on, Compute replays them
    natively (the attention mask grows by one and input_ids and the mask move every step), a
    learner thread learning the shapes ahead."""
    steps = _decode(phases=[["prompt", 12], ["decode", 13, 80]])
    decode = steps[3:]
    _check_native(decode)
    # (on the stand-in the learner thread takes the GIL from the decode loop; on a GPU it learns
    # while the loop waits for the kernels, tests/gpu/test_gpu_native_replay.py)
    native = [s for s in decode if s["native_runs"]]
    assert len(native) >= 0.75 * len(decode), [s["native_runs"] for s in decode]
    assert all(s["native_runs"] in (0, 1) for s in steps)


@needs_nvrtc
@pytest.mark.parametrize("how", [{"native_replay": "off"}, {"env": {"HIPEP_NATIVE_REPLAY": "0"}}],
                         ids=["option", "environment"])
def test_native_replay_off_runs_every_step_through_python(how):
    steps = _decode(**how, phases=[["prompt", 12], ["decode", 13, 30]])
    assert all(s["native_runs"] == 0 and s["records"] == 0 for s in steps)
    _check_native(steps[3:])


@needs_nvrtc
def test_outputs_that_move_every_step_and_caches_bound_anew_are_followed():
    """Logits alternating between two buffers: the record learns the output moves (one step
    through Python) and relocates its address from then on. New KV caches for a second sequence
    after a prompt: the record (whose caches are fixed) is built anew, and decoding again from
    lengths it has seen replays natively."""
    steps = _decode(phases=[["prompt", 12], ["decode", 13, 40, "alternate"], ["new_caches"], ["prompt", 12],
                            ["decode", 13, 40]])
    first = steps[1:28]
    _check_native(first[4:], updates=3)
    assert sum(s["native_runs"] for s in first[4:]) >= 0.5 * len(first)
    second = steps[29:]
    _check_native(second[3:])
    assert sum(s["native_runs"] for s in second[3:]) >= 0.5 * len(second)


@needs_nvrtc
def test_a_record_past_its_variant_limit_forgets_the_oldest_and_stays_right():
    """With room for 72 variants (two windows and one), a decode of 190 steps makes the learner
    forget the shapes it learned first; the nodes it set from forgotten variants are set again
    where a run needs it."""
    steps = _decode(max_variants=72, phases=[["prompt", 12], ["decode", 13, 200]])
    decode = steps[3:]
    _check_native(decode)
    assert max(s["variants"] for s in steps) <= 72
    assert sum(s["native_runs"] for s in decode) >= 0.75 * len(decode)


@needs_nvrtc
def test_a_record_takes_a_context_sized_for_its_layout_and_leaves_the_prompts_theirs():
    """Requests of a long prompt, a short one and the long one again, each decoded for a while. The
    record of the decode steps is made on a context of their own, sized for them (the prompt's
    context is over 40 times larger here), so the prompts keep theirs: two contexts in all, the
    long prompt seen again replays the graph captured on its context, and the record made in the
    second request serves the third (a tensor found moving once stays followed)."""
    steps = _decode(phases=[["prompt", 150, 150], ["decode", 151, 170], ["prompt", 40, 40], ["decode", 41, 60],
                            ["prompt", 150, 150], ["decode", 151, 170]])
    first, second, third = steps[1:20], steps[21:40], steps[40:]
    for decode in (first, second, third[1:]):
        _check_native(decode[3:])
        assert sum(s["native_runs"] for s in decode) >= 0.5 * len(decode), [s["native_runs"] for s in decode]
    again = third[0]
    assert again["native_runs"] == 0 and again["direct_launches"] == 0 and again["graph_launches"] >= 1, again
    assert len({r for s in steps[30:] for r in s["record"]}) == 1, [s["record"] for s in steps[30:]]
    assert all(s["stale_graphs"] == 0 for s in steps), [s["stale_graphs"] for s in steps]
    sizes = steps[-1]["contexts"]
    assert len(sizes) == 2, sizes
    (record_bytes,) = [n for n, owned in sizes if owned]
    (pool_bytes,) = [n for n, owned in sizes if not owned]
    assert 0 < 40 * record_bytes < pool_bytes, sizes
