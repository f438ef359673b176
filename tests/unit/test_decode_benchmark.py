"""benchmarks/decode.py's greedy choice: the same index as np.argmax for every logits row, float16
rows ranked by their bits (ties, signed zeros, infinities, NaN); and its report's split of a step's
host time between hipep's runtime and the rest."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "benchmarks"))
import decode  # noqa: E402


@pytest.mark.parametrize("seed", range(20))
def test_random_rows_match_numpy(seed):
    rng = np.random.default_rng(seed)
    row = (rng.standard_normal(32000) * rng.uniform(0.1, 30)).astype(np.float16)
    row[rng.integers(0, row.size, 50)] = row.max()  # ties: the first index wins
    assert decode.greedy_token(row) == int(np.argmax(row))
    assert decode.greedy_token(row.astype(np.float32)) == int(np.argmax(row))


@pytest.mark.parametrize("values", [
    [-0.0, 0.0, -1.0],                    # signed zeros tie: the first
    [0.0, -0.0, -3.0],
    [-5.0, -2.0, -2.0, -7.0],             # all negative
    [-np.inf, -np.inf],
    [1.0, np.inf, 65504.0, np.inf],
    [-1.0, -65504.0, -6e-8, -1e-4],       # subnormals and the extremes
    [1.0, np.nan, 2.0, np.nan],           # NaN: the first NaN, as numpy
    [-1.0, -np.nan],                      # a NaN with the sign bit set
])
def test_edge_rows_match_numpy(values):
    row = np.array(values, np.float16)
    assert decode.greedy_token(row) == int(np.argmax(row))


def _run(steps: int, wall_us: float, kernel_us: int, run_us: int, wait_us: int) -> dict:
    stats = [{"launches": 149, "kernel_us": kernel_us, "host_reads": 0, "specializations": 0, "transfer_bytes": 65536,
              "direct_launches": 0, "graph_launches": 2, "graph_node_updates": 2, "run_us": run_us,
              "sync_wait_us": wait_us} for _ in range(steps)]
    return {"tokens": [5, 6, 7, 8], "first_row": np.ones(8, np.float32),
            "wall_ns": np.full(steps, int(wall_us * 1000), np.int64), "stats": stats,
            "prompt_ns": 12_800_000, "prompt_stats": {**stats[0], "kernel_us": 10_000.0}}


def test_the_report_splits_host_time_into_hipeps_runtime_and_the_rest():
    """Per step: wall 1860 µs, kernels 1220, hipep's runs 1500 of which 1100 waiting for the GPU, so
    its runtime's own host work is 0.400 ms of the 0.640 ms host time."""
    from types import SimpleNamespace

    runs = [_run(10, 1860.0, 1220, 1500, 1100) for _ in range(3)]
    hip = decode.summarize(runs)
    assert hip["host_ms"] == pytest.approx(0.640) and hip["runtime_host_ms"] == pytest.approx(0.400)
    hip.update(first_pass_tok_s=400.0, tokens=runs[0]["tokens"], first_row=runs[0]["first_row"], same_tokens=True)
    info = dict(date="2026-12-02", commit="abc1234", gpu="NVIDIA H200", arch="sm_90", sms=132, l2_bytes=60 << 20,
                driver_cuda="13.0", nvrtc="13.0", cpu="x", cores=16, memory="126 GiB", load=1.0,
                onnxruntime="1.30.0", numpy="2", python="3.12")
    facts = dict(ops={"MatMulNBits": 81}, layers=16, hidden=2048, heads=32, kv_heads=8, head_size=64, vocab=32000,
                 activations="float16", quantization="MatMulNBits 4-bit", bytes=700 << 20, weights_per_step=584 << 20)
    args = SimpleNamespace(prompt=128, new=11, runs=3, compare=4)
    cpu = {"tokens": [5, 6, 7, 8], "first_row": np.ones(8, np.float32)}
    text = decode.render(info, facts, "/m/llama-1b", SimpleNamespace(label="device OrtValues"), {"gbps": 4200.0},
                         hip, cpu, {"error": "skipped"}, None, args, "python benchmarks/decode.py")
    assert "host time per step (median): 0.400 ms in hipep's runtime" in text
    assert "the rest of the 0.640 ms outside it" in text
    # the prompt's step: 12.8 ms wall, 10 ms of kernels, 128 tokens
    assert "the prompt's step (time to the first token, median, its length seen twice before): 12.80 ms for " \
           "128 tokens, 10.00 ms of it kernels: 10000 prompt tokens/s" in text
    assert "The prompt's step (median): 0.400 ms in hipep's runtime, 149 launches: CUDA graph launches 2" in text
    assert "length not seen before" not in text  # not measured: not reported
    hip["new_length"] = {"ms": 31.5, "lengths": [127, 126, 125], "kernel_ms": 25.0, "runtime_host_ms": 30.25,
                         "specializations": 1.0, "direct_launches": 262.0}
    text = decode.render(info, facts, "/m/llama-1b", SimpleNamespace(label="device OrtValues"), {"gbps": 4200.0},
                         hip, cpu, {"error": "skipped"}, None, args, "python benchmarks/decode.py")
    assert "the prompt's step at a length not seen before (127, 126, 125 tokens, once each, median): 31.50 ms, " \
           "30.25 ms of it in hipep's runtime (tracing the new shapes, binding, 262 launches issued one by one)" in text


def test_a_step_reads_back_only_the_last_positions_logits():
    import onnxruntime as ort

    import gpu_harness

    logits = np.arange(3 * 5, dtype=np.float32).reshape(1, 3, 5)
    np.testing.assert_array_equal(gpu_harness.last_row(ort.OrtValue.ortvalue_from_numpy(logits)), logits[0, -1])
    one = logits[:, -1:]
    np.testing.assert_array_equal(gpu_harness.last_row(ort.OrtValue.ortvalue_from_numpy(one)), logits[0, -1])


def test_a_results_header_names_the_launch_path_settings_in_effect():
    import gpu_harness

    info = dict(date="2026-12-04", commit="abc1234", gpu="NVIDIA H200", arch="sm_90", sms=132, l2_bytes=60 << 20,
                driver_cuda="13.0", nvrtc="13.0", cpu="Xeon", cores=16, memory="126 GiB", load=1.0,
                onnxruntime="1.32.0", numpy="2.5.2", python="3.12.3")
    plain = gpu_harness.header_lines("t", info, "cmd")
    assert not any("environment" in line for line in plain)
    info["env"] = {"HIPEP_CUDA_OVERLAP": "0", "HIPEP_GEMM": "own"}
    assert gpu_harness.header_lines("t", info, "cmd")[-1] == "- environment: `HIPEP_CUDA_OVERLAP=0`, `HIPEP_GEMM=own`"


def test_new_length_prompts_run_shorter_prompts_once_each():
    """The prompt less 1, 2, ... tokens, each once (never an empty prompt), and None for a
    one-token prompt."""
    class Steps:
        def __init__(self):
            self.lengths = []

        def step(self, ids, total):
            assert ids.shape == (1, total) and total >= 1
            self.lengths.append(total)
            return np.zeros(8, np.float32)

    dec = Steps()
    out = decode.new_length_prompts(dec, np.arange(1, 5, dtype=np.int64), 3)
    assert dec.lengths == [3, 2, 1] and out["lengths"] == [3, 2, 1] and out["ms"] >= 0
    assert decode.new_length_prompts(dec, np.arange(1, 3, dtype=np.int64), 3)["lengths"] == [1]
    assert decode.new_length_prompts(dec, np.array([7], np.int64), 3) is None
