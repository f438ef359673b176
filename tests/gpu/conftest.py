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


@pytest.fixture
def tensor_core_forms(monkeypatch):
    """HIPEP_MNB_GEMV_TC=1 for the test; the list of what gpu_quant.row_tc_form answered each time a
    binding asked (None: the tensor-core row GEMV did not apply)."""
    from hipep.runtime import gpu_quant as gq

    answers = []
    form = gq.row_tc_form

    def recorded(*args):
        answers.append(form(*args))
        return answers[-1]

    monkeypatch.setattr(gq, "GEMV_ROW_TC", 1)
    monkeypatch.setattr(gq, "row_tc_form", recorded)
    return answers
