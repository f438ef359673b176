"""benchmarks/kernel_bandwidth.py's workloads, each run once through its own measuring path on hipep's CPU
device: the models are valid, hipep claims them, the outputs agree with ORT's CPU EP within the
row's limit, and a workload's environment (the float GEMV's HIPEP_GEMM=own) is set for its session
and restored after it. The GPU's numbers come from the benchmark itself on a GPU machine."""
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks")
sys.path.insert(0, BENCH)
import gpu_harness as gh  # noqa: E402
import kernel_bandwidth as kernels  # noqa: E402

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


def test_gemv_rows_are_set_against_the_copy_row_of_their_shape():
    """The report's second measure: each GEMV row's GB/s over the copy floor row of the same shape
    (its label's name and K→N), for every precision of that shape; rows with no copy row of their
    shape, failed rows and non-GEMV rows are left out."""
    def row(family, label, gbps, **extra):
        return dict(family=family, label=label, gbps=gbps, **extra)

    gemv = "MatMulNBits int4 GEMV"
    rows = [row(gemv, "qkv 2048→3072 float16 (accuracy_level 0)", 1133.0),
            row(gemv, "qkv 2048→3072 float32 (accuracy_level 4)", 920.0),
            row(gemv, "down 8192→2048 float16 (accuracy_level 0)", 1110.0),
            row(gemv, "o 2048→2048 float16 (accuracy_level 0)", 0.0, error="failed"),
            row("SimplifiedLayerNormalization", "[1, 2048] fp16", 6.0),
            row(kernels.FLOOR_FAMILY, kernels.FLOOR_LABEL + "qkv 2048→3072 float16", 1103.0),
            row(kernels.FLOOR_FAMILY, kernels.FLOOR_LABEL + "o 2048→2048 float16", 924.0)]
    got = [(r["label"], f["label"], round(x, 3)) for r, f, x in kernels.against_floor(rows)]
    assert got == [("qkv 2048→3072 float16 (accuracy_level 0)", kernels.FLOOR_LABEL + "qkv 2048→3072 float16", 1.027),
                   ("qkv 2048→3072 float32 (accuracy_level 4)", kernels.FLOOR_LABEL + "qkv 2048→3072 float16", 0.834)]


def test_the_report_lists_the_gemv_rows_against_their_copy_rows():
    def row(family, label, gbps, us):
        return dict(family=family, label=label, gbps=gbps, node_us=us, copies=7, node_bytes=3 << 20, launches=7,
                    transfer_bytes=0, wall_us=100.0, rel_l2=0.0, limit=0.02, gated=family != kernels.FLOOR_FAMILY,
                    working_set=1 << 30)

    rows = [row("MatMulNBits int4 GEMV", "qkv 2048→3072 float16 (accuracy_level 0)", 1133.0, 3.13),
            row(kernels.FLOOR_FAMILY, kernels.FLOOR_LABEL + "qkv 2048→3072 float16", 1103.0, 3.22)]
    kernels.verdicts(rows, 4231.0, 60 << 20)
    info = dict(date="2026-12-02", commit="abc1234", gpu="NVIDIA H200", arch="sm_90", sms=132, l2_bytes=60 << 20,
                driver_cuda="13.0", nvrtc="13.0", cpu="x", cores=16, memory="126 GiB", load=1.0,
                onnxruntime="1.30.0", numpy="2", python="3.12")
    place = gh.Placement(0, want_device=False)
    text = kernels.render(info, rows, {"bytes": 1 << 30, "gbps": 4231.0}, place, "python benchmarks/kernel_bandwidth.py")
    assert "| MatMulNBits int4 GEMV qkv 2048→3072 float16 (accuracy_level 0) | 1133 | 1103 | 103 % |" in text
    assert "gates missed: 1" in text  # 27 % of the 1 GB copy: the gate as it stands
