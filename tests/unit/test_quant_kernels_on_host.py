"""kernels/matmul_nbits.hip and matmul_nbits_row.hip run on the CPU: g++ compiles the unchanged kernel source against the
host stand-in for the CUDA headers (tests/unit/host_cuda: a host thread per GPU thread, barriers
for __syncthreads and shuffles, dp4a and half2 arithmetic rounded as on the GPU, the launch's
dynamic shared memory), and the launches MatMulNBits' binding gives are run block by block, then
compared with the registry reference, which follows ORT's CPU EP. This checks the kernels' own
code where the numpy emulation (test_quant_kernels_emulated.py) checks the binding's launches: the
row GEMV's staging of A (int8 codes or half2 pairs), its dp4a and HFMA2 sums, the general GEMV and
the GEMM. Skipped without g++."""
from __future__ import annotations

import shutil

import ml_dtypes
import numpy as np
import pytest

from hipep.ops.registry import OUTPUT_COUNT, REQUIRED, SINCE_VERSION, lookup
from hipep.runtime import gpu_kernels as gk
from hipep.runtime import gpu_quant as gq

from unit.host_kernels import HostMemory, compile_module, launch

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


@pytest.fixture(scope="module")
def matmul_nbits(tmp_path_factory):
    """The modules' libraries by name (the general GEMV and GEMM; the row GEMV)."""
    out = tmp_path_factory.mktemp("host_mnb")
    return {m: compile_module(out, m, 32) for m in ("matmul_nbits", "matmul_nbits_row")}


def _run(lib, m, k, n, bs, dtype, zp_kind, level, with_bias=False, seed=0):
    from quant_helpers import quantize_blockwise

    rng = np.random.default_rng(seed)
    B, scales, zp = quantize_blockwise(rng.standard_normal((n, k)).astype(np.float32), 4, bs, zp_kind, rng)
    A = (rng.standard_normal((m, k)) * 3).astype(dtype)
    A[0, :bs] = 0  # an all-zero block of A: int8 scale 0, codes 0
    scales = scales.astype(dtype)
    if zp is not None and zp.dtype != np.uint8:
        zp = zp.astype(dtype)
    bias = rng.standard_normal(n).astype(dtype) if with_bias else None
    op = lookup("com.microsoft", "MatMulNBits")
    attrs = {**{a: v for a, v in op.attributes.items() if v is not REQUIRED},
             "K": k, "N": n, "bits": 4, "block_size": bs, "accuracy_level": level,
             OUTPUT_COUNT: 1, SINCE_VERSION: max(op.since_versions)}
    inputs = [A, B, scales.reshape(-1), zp, None, bias]
    want = op.reference(list(inputs), attrs)[0]
    mem = HostMemory()
    ins = [None if x is None else mem.put(x)[0] for x in inputs]
    out, got = mem.put(np.full(want.shape, np.nan, want.dtype))
    target = gk.Target(sm_count=132, warp_size=32, scratch=lambda nbytes: 0,
                       workspace=lambda nbytes: mem.put(np.zeros(nbytes, np.uint8))[0].ptr)
    ops = gk.binding_for(gq.MNB).bind(ins, [gk.Arg(out.ptr, out.shape, out.dtype)], attrs, target)
    for o in ops:
        launch(lib[o.module], o)
    return got, want, [o.entry for o in ops]


@pytest.mark.parametrize("k,n,bs,dtype,zp_kind,level,with_bias,entry", [
    (256, 12, 32, np.float32, "none", 4, False, "hipep_mnb_gemv_row_q8_f32_b4"),   # the builder's int4 form
    (320, 9, 64, np.float32, "uint8", 4, True, "hipep_mnb_gemv_row_q8_f32_b4"),    # zero points, N % 8 != 0
    (192, 10, 32, ml_dtypes.bfloat16, "uint8", 4, False, "hipep_mnb_gemv_row_q8_bf16_b4"),
    (256, 16, 128, np.float16, "uint8", 0, True, "hipep_mnb_gemv_row_h2_f16_b4"),  # fp16 A: half2 pairs
    (200, 8, 32, np.float16, "none", 0, False, "hipep_mnb_gemv_row_h2_f16_b4"),    # K past A's end in the last block
    (256, 12, 16, np.float32, "none", 4, False, "hipep_mnb_gemv_f32_b4_m1"),       # block 16: the general GEMV
])
def test_row_gemv_on_host(matmul_nbits, k, n, bs, dtype, zp_kind, level, with_bias, entry):
    got, want, entries = _run(matmul_nbits, 1, k, n, bs, dtype, zp_kind, level, with_bias)
    assert entries == [entry]
    tol = 1e-5 if dtype == np.float32 else (1e-2 if dtype == np.float16 else 2e-2)
    err = np.abs(got.astype(np.float64) - want.astype(np.float64)).max() / np.abs(want.astype(np.float64)).max()
    assert err < tol, (entry, err)


def test_row_gemv_long_k_tiles_on_host(matmul_nbits, monkeypatch):
    """K past one shared-memory tile: the row GEMV stages A tile by tile, a barrier between."""
    monkeypatch.setattr(gq, "GEMV_SMEM_BUDGET", 1024)  # 16 chunks (512 values) a tile for h2
    got, want, entries = _run(matmul_nbits, 1, 1536, 8, 64, np.float16, "none", 0)
    assert entries == ["hipep_mnb_gemv_row_h2_f16_b4"]
    assert np.abs(got.astype(np.float64) - want).max() / np.abs(want.astype(np.float64)).max() < 1e-2


@pytest.mark.parametrize("m,level", [(3, 4), (3, 0), (40, 4), (40, 0)])
def test_general_gemv_and_gemm_on_host(matmul_nbits, m, level):
    got, want, entries = _run(matmul_nbits, m, 128, 24, 32, np.float32, "uint8", level, with_bias=True)
    assert entries[-1] == ("hipep_mnb_gemv_f32_b4_m4" if m <= 8 else "hipep_mnb_gemm_f32_b4")
    err = np.abs(got.astype(np.float64) - want).max() / np.abs(want.astype(np.float64)).max()
    assert err < 1e-5, (entries, err)
