"""benchmarks/decode_host.py's report from its measurements: the step's parts (medians), ORT's and
hipep's shares of the run taken from hipep.stats() deltas, and the profile's functions ranked per
step, hipep's own by cumulative time."""
from __future__ import annotations

import cProfile
import os
import pstats
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "benchmarks"))
import decode_host as dh  # noqa: E402

INFO = {"date": "2026-12-03", "commit": "abc1234", "gpu": "NVIDIA H200", "arch": "sm_90", "sms": 132,
        "l2_bytes": 60 * 2**20, "driver_cuda": "13.0", "nvrtc": "13.0", "cpu": "Xeon", "cores": 16,
        "memory": "126 GiB", "load": 1.0, "onnxruntime": "1.30.0", "numpy": "2.5.2", "python": "3.12.3"}
FACTS = {"layers": 16, "hidden": 2048, "quantization": "MatMulNBits 4-bit", "activations": "float16"}


def _busy(n):
    return sum(i * i for i in range(n))


def test_the_report_splits_the_step_and_ranks_the_profile():
    steps = 4
    parts = {p: np.array([v * 1000] * steps, np.int64) for p, v in zip(dh.PARTS, (40, 900, 45, 50))}
    stats = [{"run_us": 820, "sync_wait_us": 600, "kernel_us": 700, "launches": 117, "graph_launches": 1,
              "graph_node_updates": 2, "direct_launches": 0}] * steps
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        _busy(2000)
    prof.disable()
    m = {"plain": {"parts": parts, "stats": stats}, "profile": pstats.Stats(prof), "steps": steps}
    text = dh.render({**INFO}, FACTS, "/models/llama-1b-int4-f16-v2", m, 5, "python benchmarks/decode_host.py")
    assert "| **the step** | **1035.0** |" in text
    assert "| ORT's run, outside hipep's Compute | 80.0 |" in text
    assert "| of it, hipep's host work (run_us − sync_wait_us) | 220.0 |" in text
    assert "| CUDA graph launches / kernel nodes updated / direct launches | 1 / 2 / 0 |" in text
    busy = next(line for line in text.splitlines() if line.startswith("| `_busy"))
    assert busy.split("|")[2].strip() == "1.0"  # calls per step
