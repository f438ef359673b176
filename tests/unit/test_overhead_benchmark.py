"""benchmarks/overhead.py at a tiny size: its measurements run and its report has the rows and
targets it should. No timing is asserted here: the benchmark itself checks the speed targets."""
from __future__ import annotations

import numpy as np
import pytest

from helpers import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/overhead.py", "overhead_benchmark")


def test_add_chain_rows(bench):
    rows = bench.chain_rows([10], runs_short=20, runs_long=5, verbose=False)
    assert [(r["ops"], r["fusion"]) for r in rows] == [(10, "off"), (10, "on")]
    off = rows[0]
    assert off["launches"] == 10 and off["equal"]
    for key in ("hipep_us", "cpu_us", "kernel_us", "overhead_us"):
        assert np.isfinite(off[key]) and off[key] >= 0
    if bench.fusion_available():
        assert rows[1]["launches"] == 1 and rows[1]["equal"]
    else:
        assert rows[1]["na"]
    text = bench.render(bench.machine_info(), rows, [], [])
    assert "| 10 | off | 20 |" in text and "| 10 | on |" in text
    assert "Add x100" not in text  # targets are reported only for the chain they are about


def test_fusion_on_without_the_option_is_not_measured(bench, monkeypatch):
    import overhead_chains  # the module beside overhead.py that measures the chains: on the path once it is loaded

    monkeypatch.setattr(overhead_chains, "fusion_available", lambda: False)
    row = bench.measure_chain(1, "on", runs=5)
    assert row["na"]
    text = bench.render(bench.machine_info(), [row], [], [])
    assert "| 1 | on | n/a |" in text and "no `fusion` provider option" in text


def test_chain_targets(bench):
    rows = [{"ops": 100, "fusion": "off", "launches": 100.0, "per_op_us": 2.0},
            {"ops": 100, "fusion": "on", "na": True}]
    got = {what: met for what, _measured, met in bench.targets(rows, [], [])}
    assert got == {"Add x100, fusion=off: 100 launches per run": True,
                   "Add x100, fusion=off: (hipep − CPU EP) ≤ 3 µs per op": True,
                   "Add x100, fusion=on: 1 launch per run": None}


def test_tiny_decoder_rows(bench):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("onnxruntime_genai")
    decoders = [("llama-fp32", "llama", "fp32", "tiny")]
    growing, shared = bench.decoder_rows(decoders, decode_steps=3, repeats=2, shared_steps=3, verbose=False)
    (g,), (s,) = growing, shared
    assert g["model"] == s["model"] == "llama-fp32"
    assert g["steps"] == 3 and g["layers"] == 2 and g["launches_per_layer"] > 0
    assert g["worst_rel_l2"] <= g["threshold"] and s["worst_rel_l2"] <= s["threshold"]
    # a shared buffer of max_length: the steps after the first decode step replay its specialization
    assert s["specializations"] == 0 and s["host_reads"] == 0
    text = bench.render(bench.machine_info(), [], growing, shared)
    assert "## Decoders, growing past" in text and "## Decoders, shared KV buffer" in text
    assert text.count("| llama-fp32 | ") == 2
    assert "llama-fp32, shared buffer: 0 specializations and 0 host reads over 3 steps | 0 and 0 | yes" in text
