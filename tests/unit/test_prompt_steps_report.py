"""benchmarks/prompt_steps.py: its report of the prompt's step by length and run, and the timer it
puts around cuBLASLt's calls (restored afterwards)."""
from __future__ import annotations

from unit.test_decode_host_report import FACTS, INFO  # (which puts benchmarks/ on the path)

import prompt_steps as ps  # noqa: E402


def _row(n, run, wall, runtime, direct, graphs, spec):
    return {"n": n, "run": run, "wall_ms": wall, "kernel_ms": wall - 0.5, "runtime_ms": runtime, "direct": direct,
            "graphs": graphs, "specializations": spec, "blas_calls": 81 if direct else 0,
            "blas_ms": 9.0 if direct else 0.0, "blas_first_ms": 2.5 if direct else 0.0,
            "arena_moves": spec, "decode_ms": 6.5 if spec else 0.3, "gc_ms": 41.5 if run == 2 else 0.0}


def test_the_report_lists_every_run_and_sets_new_lengths_against_seen_ones():
    rows = [_row(128, 1, 105000.0, 104000.0, 262, 0, 1), _row(128, 2, 26.1, 25.0, 262, 0, 0),
            _row(128, 3, 5.8, 5.3, 0, 1, 0), _row(100, 1, 46.0, 44.9, 262, 0, 1), _row(100, 2, 7.9, 7.0, 0, 1, 0),
            _row(100, 3, 3.6, 3.1, 0, 1, 0), _row(77, 1, 29.0, 28.2, 262, 0, 1), _row(77, 3, 3.0, 2.7, 0, 1, 0)]
    text = ps.render(INFO, FACTS, "/m/llama-1b-int4-f16-v2", rows, "python benchmarks/prompt_steps.py")
    assert text.startswith(f"# The prompt's step by length and run: llama-1b-int4-f16-v2 on {INFO['gpu']}")
    assert "- gc.freeze() after the first prompt step: no" in text
    assert "| 100 | 1 | 46.00 | 45.50 | 44.90 | 262 | 0 | 1 | 1 | 81 | 9.00 | 2.50 | 0.00 | 6.50 |" in text
    assert "| 128 | 3 | 5.80 | 5.30 | 5.30 | 0 | 1 | 0 | 0 | 0 | 0.00 | 0.00 | 0.00 | 0.30 |" in text
    assert "| 100 | 2 | 7.90 | 7.40 | 7.00 | 0 | 1 | 0 | 0 | 0 | 0.00 | 0.00 | 41.50 | 0.30 |" in text
    # the process's first step (its kernels loaded, maybe compiled) is not a "new length" sample
    assert "A length not seen before (the process's first step aside): median 37.50 ms, 36.55 ms of it in " \
           "hipep's runtime, and 6.50 ms for the decode step after it; a length seen twice before: median 3.60 ms." \
        in text
    frozen = ps.render(INFO, FACTS, "/m/llama-1b-int4-f16-v2", rows, "python benchmarks/prompt_steps.py",
                       gc_freeze=True)
    assert "- gc.freeze() after the first prompt step: yes" in frozen


def test_the_blas_timer_wraps_and_restores_cublaslt_calls():
    from hipep.runtime import cublaslt

    original = cublaslt.MatmulPlan.run
    timer = ps.BlasTimer()
    try:
        assert cublaslt.MatmulPlan.run is not original

        class Plan:
            run = cublaslt.MatmulPlan.run

        # the wrapper calls the original with the plan and its arguments (here: a stand-in plan
        # whose call fails in cuBLASLt's absence is still timed)
        try:
            Plan().run(0, None, None, 0, 0, 0, 0, 0)
        except Exception:  # noqa: BLE001 - no cuBLASLt library here
            pass
        assert len(timer.take()) == 1 and timer.take() == []
    finally:
        timer.close()
    assert cublaslt.MatmulPlan.run is original


def test_the_blas_timer_leaves_out_other_threads_calls(monkeypatch):
    """cuBLASLt's warm-up worker (HIPEP_CUBLASLT_WARM=1) runs plans on a thread of its own while the
    prompt's steps run: its calls are not the step's."""
    import threading

    from hipep.runtime import cublaslt

    ran = []
    monkeypatch.setattr(cublaslt.MatmulPlan, "run", lambda plan, *a: ran.append(threading.current_thread()))
    timer = ps.BlasTimer()
    try:
        worker = threading.Thread(target=lambda: cublaslt.MatmulPlan.run(None))
        worker.start()
        worker.join()
        assert len(ran) == 1 and timer.take() == []  # run, not timed
        cublaslt.MatmulPlan.run(None)
        assert len(ran) == 2 and len(timer.take()) == 1
    finally:
        timer.close()


def test_the_report_says_whether_the_warm_up_worker_ran(monkeypatch):
    rows = [_row(128, 1, 105000.0, 104000.0, 262, 0, 1)]
    monkeypatch.delenv("HIPEP_CUBLASLT_WARM", raising=False)
    assert "- cuBLASLt's warm-up worker (HIPEP_CUBLASLT_WARM=1): off" in ps.render(INFO, FACTS, "/m/x", rows, "c")
    monkeypatch.setenv("HIPEP_CUBLASLT_WARM", "1")
    text = ps.render(INFO, FACTS, "/m/x", rows, "c", settle=2.0)
    assert "- cuBLASLt's warm-up worker (HIPEP_CUBLASLT_WARM=1): on; 0 algorithms run by it; 2 s waited" in text


def test_settle_must_not_be_negative(capsys):
    import pytest

    with pytest.raises(SystemExit):
        ps.main(["--settle", "-1"])
    assert "--settle" in capsys.readouterr().err


def test_the_gc_timer_times_full_collections_only_and_unhooks_itself():
    import gc

    timer = ps.GcTimer()
    try:
        gc.collect(0)  # a young generation's collection is not a full one
        assert timer.take() == []
        gc.collect()
        ms = timer.take()
        assert len(ms) == 1 and ms[0] >= 0.0
        assert timer.take() == []
    finally:
        timer.close()
    assert timer._callback not in gc.callbacks
    gc.collect()
    assert timer.take() == []
