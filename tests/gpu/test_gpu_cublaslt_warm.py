"""cuBLASLt's kernels warmed in the background (hipep.runtime.cublaslt_warm): once a product's
first plan is made, the worker runs the algorithm the heuristic picks for every other prompt
length it samples, so a later plan of the family finds its kernel already run; the products stay
right while it works; without HIPEP_CUBLASLT_WARM=1 nothing is warmed."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from hipep.runtime.cuda import cuda_status

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

from cuda.bindings import driver  # noqa: E402

from hipep.runtime import cublaslt, cublaslt_warm  # noqa: E402
from hipep.runtime.cuda import get_device  # noqa: E402

N, K = 768, 512  # a family of its own (no other test's product has these)


@pytest.fixture
def device():
    dev = get_device(0)
    dev._current()
    return dev


def _alloc(nbytes: int) -> int:
    err, p = driver.cuMemAlloc(nbytes)
    assert err == driver.CUresult.CUDA_SUCCESS
    return int(p)


def test_later_prompt_lengths_find_their_kernels_run(device, monkeypatch):
    ok, why = cublaslt.status()
    if not ok:
        pytest.skip(why)
    monkeypatch.setenv(cublaslt_warm.WARM_ENV, "1")
    a, b, y = _alloc(4096 * K * 2), _alloc(N * K * 2), _alloc(4096 * N * 2)
    first = cublaslt.matmul_plan(0, "f16", 128, N, K, K, 1, 1, K, 1, 0, 0, (a, b, y))
    assert cublaslt_warm.wait(120)
    warmed = cublaslt_warm.warmed() | {cublaslt_warm.algorithm_key(first.result)}
    sampled = cublaslt_warm.WARM_ROWS[::20]  # 9 to some 3000 rows
    for m in sampled:
        plan = cublaslt.matmul_plan(0, "f16", m, N, K, K, 1, 1, K, 1, 0, 0, (a, b, y))
        assert cublaslt_warm.algorithm_key(plan.result) in warmed, m
    # the products still compute: one prompt length checked against numpy
    m = 100
    rng = np.random.default_rng(0)
    av = rng.standard_normal((m, K)).astype(np.float16)
    bv = rng.standard_normal((N, K)).astype(np.float16)
    driver.cuMemcpyHtoD(a, av.ctypes.data, av.nbytes)
    driver.cuMemcpyHtoD(b, bv.ctypes.data, bv.nbytes)
    plan = cublaslt.matmul_plan(0, "f16", m, N, K, K, 1, 1, K, 1, 0, 0, (a, b, y))
    ws = _alloc(max(plan.workspace_size, 256))
    assert plan.run(0, ctypes.c_float(1.0), ctypes.c_float(0.0), b, a, y, y, ws) is None
    assert driver.cuCtxSynchronize()[0] == driver.CUresult.CUDA_SUCCESS
    got = np.empty((m, N), np.float16)
    driver.cuMemcpyDtoH(got.ctypes.data, y, got.nbytes)
    want = av.astype(np.float32) @ bv.astype(np.float32).T
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2
    for p in (a, b, y, ws):
        driver.cuMemFree(p)


def test_the_worker_is_off_by_default(device, monkeypatch):
    ok, why = cublaslt.status()
    if not ok:
        pytest.skip(why)
    monkeypatch.delenv(cublaslt_warm.WARM_ENV, raising=False)
    a, b, y = _alloc(256 * 640 * 2), _alloc(640 * 640 * 2), _alloc(256 * 640 * 2)
    before = cublaslt_warm.warmed()
    cublaslt.matmul_plan(0, "f16", 96, 640, 640, 640, 1, 1, 640, 1, 0, 0, (a, b, y))
    assert cublaslt_warm.wait(60)
    assert cublaslt_warm.warmed() == before
    for p in (a, b, y):
        driver.cuMemFree(p)
