"""The GQA preamble's host-buffer hazard (docs/architecture.md, "hip-assign-memory-spaces" and
"hip-insert-syncs"), against the real GPU stream. tests/ort/test_compiler_rules.py proves the rule
on the CPU device's random schedule; this is the same model on the CUDA device.

The preamble computes seqlens_k on the device (ReduceSum → Sub → Cast) while the host computes
total_sequence_length (Shape → Gather → Cast) and stores it; further device ops read both. A spin
kernel of 200 µs is queued on hipep's stream before every ReduceSum launch
(HIPEP_DEBUG_SPIN_BEFORE=ReduceSum:200, which the CUDA device reads when it is made, hence a fresh
process per check), so the host steps always run while the device work queued before them is still
waiting: a host store that does not wait where it must overtakes it every time, not now and then.

* With the memory-space rule on: 1000 runs with random masks (batch 1-3, length 2-8) equal the
  CPU EP's outputs, and the runs really spent the spin time on the device; once with the host
  steps run between the launches (HIPEP_HOST_VALUES=0: the case above), once as they run by default
  (their results, shape arithmetic, written from the run's symbols before the run's launches).
* With it off (`pass_options="hip-assign-memory-spaces{host_rule=false}"`, the pass's test-only
  switch): host-written buffers are no longer kept apart from device ones, and the runs must not
  all come out right: each either gives a wrong answer or is refused with a HipepError (the CUDA
  device also refuses host work that would read device memory), never a crash.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hipep.runtime.cuda import cuda_status

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

RUNS = 1000
SPIN_US = 200
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs in a fresh process (the spin setting is read when the CUDA device is made); prints one JSON
# line: how many runs were right, wrong or refused, the first refusals, and the device time spent.
_SCRIPT = r"""
import json, sys
import numpy as np
import hipep
from hipep import bridge
from hipep.plan import HOST_VISIBLE, HostStep
from helpers import cpu_session, gqa_preamble_model

runs, rule = int(sys.argv[1]), sys.argv[2] == "on"
options = {} if rule else {"pass_options": "hip-assign-memory-spaces{host_rule=false}"}
model = gqa_preamble_model()
try:
    sess = hipep.InferenceSession(model, device="cuda", **options)
except Exception as e:  # a clear refusal at session creation counts for every run
    print(json.dumps({"right": 0, "wrong": 0, "refused": runs, "refusals": [str(e)[:600]], "kernel_us": 0,
                      "host_spaces": [], "at_creation": True}))
    sys.exit(0)
plan = bridge.compiled_plans()[-1]
host_spaces = sorted({plan.values[plan.storage_of(o)].space for s in plan.steps if isinstance(s, HostStep)
                      for o in s.outputs if o >= 0})
cpu = cpu_session(model)
rng = np.random.default_rng(5)
counts = {"right": 0, "wrong": 0, "refused": 0}
refusals, crashes = [], []
before = hipep.stats().get("kernel_us", 0)
for _ in range(runs):
    batch, total = int(rng.integers(1, 4)), int(rng.integers(2, 9))
    lengths = rng.integers(1, total + 1, size=batch)
    mask = (np.arange(total)[None, :] < lengths[:, None]).astype(np.int64)
    want = cpu.run(None, {"attention_mask": mask})
    try:
        got = sess.run(None, {"attention_mask": mask})
    except Exception as e:  # ORT's error carrying hipep's reason
        counts["refused"] += 1
        if len(refusals) < 3:
            refusals.append(str(e)[:600])
        continue
    right = all(g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w) for g, w in zip(got, want))
    counts["right" if right else "wrong"] += 1
print(json.dumps({**counts, "refusals": refusals, "kernel_us": hipep.stats().get("kernel_us", 0) - before,
                  "host_spaces": host_spaces}))
"""


def _run(rule: str, host_values: str = "0") -> dict:
    env = dict(os.environ)
    env["HIPEP_DEBUG_SPIN_BEFORE"] = f"ReduceSum:{SPIN_US}"
    env["HIPEP_HOST_VALUES"] = host_values
    env["PYTHONPATH"] = TESTS + os.pathsep + env.get("PYTHONPATH", "")
    # -P: run from a checkout, its hipep/ (no native library) must not shadow the installed package
    proc = subprocess.run([sys.executable, "-P", "-c", _SCRIPT, str(RUNS), rule], capture_output=True, text=True,
                          env=env, cwd=TESTS, timeout=540)
    assert proc.returncode == 0, f"the {rule} process failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("host_values", ["0", "1"])
def test_host_buffer_rule_holds_against_a_late_device_stream(host_values):
    got = _run("on", host_values)
    assert got["host_spaces"] == ["host_visible"], got
    assert got["right"] == RUNS and got["wrong"] == 0 and got["refused"] == 0, got
    # the spin really ran before every ReduceSum: at least half of it per run inside device time
    assert got["kernel_us"] >= RUNS * SPIN_US / 2, got


def test_without_the_rule_the_late_stream_shows_the_hazard():
    got = _run("off")
    assert got.get("at_creation") or got["host_spaces"] != ["host_visible"], got
    assert got["right"] + got["wrong"] + got["refused"] == RUNS, got
    assert got["right"] < RUNS, f"with the rule off every run came out right: a broken rule would pass {got}"
    for message in got["refusals"]:
        assert "HipepError" in message or "hipep" in message, message
