"""benchmarks/kernels.py's workloads, each run once through its own measuring path on hipep's CPU
device: the models are valid, hipep claims them, the outputs agree with ORT's CPU EP within the
row's limit, and a workload's environment (the float GEMV's HIPEP_GEMM=own) is set for its session
and restored after it. The GPU's numbers come from the benchmark itself on a GPU machine."""
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks")
sys.path.insert(0, BENCH)
import gpu_harness as gh  # noqa: E402
import kernels  # noqa: E402

SMALL_L2 = 1 << 16  # one copy of every op: the test checks the models, not the bandwidth


def _quick_workloads():
    return list(kernels.workloads(kernels.FAMILIES, SMALL_L2, quick=True, context=64))


@pytest.mark.parametrize("index", range(len(_quick_workloads())))
def test_a_workload_runs_on_the_cpu_device_within_its_limit(index, monkeypatch):
    monkeypatch.delenv("HIPEP_GEMM", raising=False)
    w = _quick_workloads()[index]()
    row = kernels.measure(w, gh.Placement(0, want_device=False), 0, seconds=0.0, device="cpu")
    assert "error" not in row, row
    assert row["rel_l2"] <= w.limit, row
    assert row["runs"] >= 20 and row["node_us"] > 0, row
    assert "HIPEP_GEMM" not in os.environ  # the workload's environment is undone


def test_the_float_gemv_rows_are_gated_and_take_hipeps_own_gemv():
    rows = [make() for make in kernels.workloads(["matmul"], SMALL_L2, quick=True, context=64)]
    assert [w.family for w in rows] == ["MatMul GEMV", "MatMul GEMV"]
    assert all(w.gated and w.env == {"HIPEP_GEMM": "own"} for w in rows)
    assert rows[0].node_bytes == (4096 * 4096 + 2 * 4096) * 2
