"""benchmarks/decode_profile.py's reading of Nsight Compute's CSV (one row per kernel and metric,
after ncu's own log lines): launches by ID with their duration and DRAM bytes in base units, and
the sums by kernel and grid that the report lists (generated pointwise kernels as one family)."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "benchmarks"))
import decode_profile as dp  # noqa: E402

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def _rows(kid, name, grid, ns, read, write, time_unit="nsecond"):
    common = f'"{kid}","7","python3","127.0.0.1","{name}","1","13","(256, 1, 1)","{grid}","0","9.0","Command line profiler metrics"'
    return [f'{common},"dram__bytes_read.sum","byte","{read}"', f'{common},"dram__bytes_write.sum","byte","{write}"',
            f'{common},"gpu__time_duration.sum","{time_unit}","{ns}"']


CSV = "\n".join(["==PROF== Connected to process 7 (/usr/bin/python3)", "==PROF== Profiling ... 3 passes", HEADER,
                 *_rows(0, "hipep_mnb_gemv_row_h2_f16_b4", "(384, 1, 1)", "2,900", "3,538,944", "6,144"),
                 *_rows(1, "hipep_pw_0123456789abcdef", "(16, 1, 1)", "1,500", "16,384", "8,192"),
                 *_rows(2, "hipep_mnb_gemv_row_h2_f16_b4", "(384, 1, 1)", "3.1", "3,538,944", "6,144", "usecond"),
                 *_rows(3, "hipep_pw_fedcba9876543210", "(16, 1, 1)", "1,700", "16,384", "8,192"),
                 *_rows(4, "hipep_mnb_gemv_row1_h2_f16_b4_u2", "(4000, 1, 1)", "15,500", "36,864,000", "64,000"),
                 "==PROF== Disconnected from process 7"])


def test_launches_are_read_by_id_in_base_units():
    launches = dp.parse_ncu_csv(CSV)
    assert [k["name"] for k in launches] == ["hipep_mnb_gemv_row_h2_f16_b4", "hipep_pw_0123456789abcdef",
                                             "hipep_mnb_gemv_row_h2_f16_b4", "hipep_pw_fedcba9876543210",
                                             "hipep_mnb_gemv_row1_h2_f16_b4_u2"]
    assert [k["ns"] for k in launches] == [2900.0, 1500.0, 3100.0, 1700.0, 15500.0]
    assert launches[0]["dram_read"] == 3538944.0 and launches[0]["dram_write"] == 6144.0
    assert launches[4]["grid"] == "(4000, 1, 1)"


def test_sums_by_kernel_and_grid_largest_first():
    rows = dp.summarize(dp.parse_ncu_csv(CSV))
    assert [(r["kernel"], r["launches"]) for r in rows] == [
        ("hipep_mnb_gemv_row1_h2_f16_b4_u2", 1), ("hipep_mnb_gemv_row_h2_f16_b4", 2),
        ("hipep_pw_* (generated pointwise)", 2)]
    assert rows[1]["ns"] == pytest.approx(6000.0) and rows[2]["dram"] == pytest.approx(2 * (16384 + 8192))


def test_no_csv_table_reads_as_no_launches():
    assert dp.parse_ncu_csv("==PROF== Connected to process 7\n==ERROR== no kernels were profiled\n") == []


INFO = {"gpu": "NVIDIA H200", "date": "2026-12-02", "commit": "abc1234", "arch": "sm_90", "sms": 132,
        "l2_bytes": 60 << 20, "driver_cuda": "13.0", "nvrtc": "13.0", "cpu": "x", "cores": 16, "memory": "126 GiB",
        "load": 0.5, "onnxruntime": "1.30.0", "numpy": "2.5", "python": "3.12"}
FACTS = {"layers": 16, "hidden": 2048, "quantization": "MatMulNBits 4-bit, block 32, accuracy level 0",
         "activations": "float16", "weights_per_step": 584_000_000}


def test_report_names_the_step_and_the_sum():
    text = dp.render(INFO, FACTS, "/m/llama-1b-int4-f16", {"kernel_us": 1231.0, "launches": 149},
                     dp.parse_ncu_csv(CSV), 4200.0, "python benchmarks/decode_profile.py")
    assert "1231 µs of kernel time" in text and "5 kernels, 25 µs summed" in text
    assert "| hipep_mnb_gemv_row1_h2_f16_b4_u2 | (4000, 1, 1) | (256, 1, 1) | 1 | 15.5 |" in text
    assert "the profiled step: decode step 21 after a 128-token prompt" in text


def test_a_prompt_step_report_says_so():
    text = dp.render(INFO, FACTS, "/m/llama-1b-int4-f16", {"kernel_us": 6880.0, "launches": 90},
                     dp.parse_ncu_csv(CSV), 4200.0, "python benchmarks/decode_profile.py --prompt-step",
                     prompt_step=True)
    assert text.startswith("# Where the prompt's step's GPU time goes")
    assert "the profiled step: the prompt's step (128 tokens), run again at the same positions" in text
