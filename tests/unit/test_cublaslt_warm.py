"""hipep.runtime.cublaslt_warm without a GPU: the prompt lengths it samples, and that a plan made
where the worker is off or the product is batched only records its algorithm."""
from __future__ import annotations

import threading

from hipep.runtime import cublaslt, cublaslt_warm, gpu_kernels  # noqa: F401  (the kernel table before gpu_quant)
from hipep.runtime.gpu_quant import GEMV_MAX_ROWS


def test_the_sampled_prompt_lengths_cover_what_cublaslt_runs():
    rows = cublaslt_warm.WARM_ROWS
    assert list(rows) == sorted(set(rows))
    assert rows[0] == GEMV_MAX_ROWS + 1  # fewer rows take hipep's GEMV
    assert set(range(GEMV_MAX_ROWS + 1, 65)) <= set(rows)
    assert all(b / a <= 1.06 for a, b in zip(rows, rows[1:]) if a >= 64)  # every length below
    assert rows[-1] >= 4000


def _plan_made(batch: int) -> int:
    result = cublaslt.HeuristicResult()
    result.algo[0] = 0x1234_5678 + batch
    before = threading.active_count()
    cublaslt_warm.plan_made(0, "f16", 64, 64, (64, 1, 1, 64), batch, (256,) * 4, 0, result)
    assert cublaslt_warm.algorithm_key(result) in cublaslt_warm._SEEN
    return threading.active_count() - before


def test_no_worker_where_off_or_batched(monkeypatch):
    monkeypatch.delenv(cublaslt_warm.WARM_ENV, raising=False)
    assert not cublaslt_warm.enabled()
    assert _plan_made(1) == 0
    monkeypatch.setenv(cublaslt_warm.WARM_ENV, "1")
    assert _plan_made(4) == 0  # batched products are not warmed
    assert cublaslt_warm.wait(1.0)
