"""Fixtures the tests/gpu files share."""
from __future__ import annotations

import pytest


@pytest.fixture(params=["own", "blas"])
def gemm_mode(request, monkeypatch):
    """Each matrix product through hipep's own kernels, then through cuBLASLt (HIPEP_GEMM)."""
    if request.param == "blas":
        from hipep.runtime import cublaslt

        ok, why = cublaslt.status()
        if not ok:
            pytest.skip(f"cuBLASLt is not available: {why}")
    monkeypatch.setenv("HIPEP_GEMM", request.param)
    return request.param
