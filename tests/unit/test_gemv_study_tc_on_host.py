"""The tensor-core GEMV candidates (benchmarks/gemv_study_tc.hip) on the CPU: g++ compiles them
against the host stand-in for the CUDA headers, whose mma.sync emulation follows PTX's fragment
layout for m16n8k16, and each candidate's result is checked against numpy's GEMV. A wrong fragment
index (a lane's nibbles in another k slot or column, A's pairs off the quads' diagonal, a block scale
applied to another chunk) gives wrong sums here, before the candidate is timed on a GPU."""
from __future__ import annotations

import ctypes
import shutil
import types

import numpy as np
import pytest

from hipep.runtime import gpu_kernels  # noqa: F401  (gpu_quant's imports resolve through it)
from hipep.runtime import gpu_quant as gq

from helpers import REPO
from unit.host_kernels import HostMemory, compile_source, launch

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
STUDY = REPO / "benchmarks" / "gemv_study_tc.hip"
BLOCK = 32


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return compile_source(tmp_path_factory.mktemp("gemv_tc"), STUDY, "gemv_study_tc", 32)


def _gemv(lib, entry: str, n: int, k: int, columns_a_block: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    row_bytes, nb = k // 2, k // BLOCK
    w = rng.integers(0, 256, (n, row_bytes), dtype=np.uint8)
    s = rng.uniform(0.005, 0.02, (n, nb)).astype(np.float16)
    a = rng.uniform(-1, 1, k).astype(np.float16)
    mem = HostMemory()
    a_arg, _ = mem.put(a)
    w_arg, _ = mem.put(w)
    s_arg, _ = mem.put(s)
    y_arg, y = mem.put(np.full(n, np.nan, np.float16))
    ptr = ctypes.c_void_p
    if entry.startswith("h2_tc_"):  # hipep's kernel: its MatMulNBits parameters (no zero points, no bias)
        args = gq.MatMulNBitsArgs(1, n, k, k, row_bytes, nb, 0, 5, k, 0, 1, 1, 1, 0)
        params = [ptr(a_arg.ptr), ptr(w_arg.ptr), ptr(s_arg.ptr), ptr(0), ptr(0), ptr(y_arg.ptr), args]
    else:
        params = [ptr(a_arg.ptr), ptr(w_arg.ptr), ptr(s_arg.ptr), ptr(y_arg.ptr), ctypes.c_int(n),
                  ctypes.c_int(row_bytes), ctypes.c_int(nb), ctypes.c_int(5), ctypes.c_int(k)]
    op = types.SimpleNamespace(entry=entry, grid=(-(-n // columns_a_block), 1, 1), block=(256, 1, 1), params=params)
    launch(lib, op)
    deq = np.empty((n, k), np.float64)
    deq[:, 0::2] = (w & 0xF).astype(np.float64) - 8
    deq[:, 1::2] = (w >> 4).astype(np.float64) - 8
    want = (deq * np.repeat(s.astype(np.float64), BLOCK, axis=1)) @ a.astype(np.float64)
    return y.astype(np.float64), want


@pytest.mark.parametrize("u,split", [(2, 2), (4, 2), (2, 4), (4, 4), (2, 8), (4, 8)])
def test_h2_tc_matches_numpy(lib, u, split):
    """hipep's tensor-core kernel at the study's U and SPLIT: 16 columns a warp, 8 / SPLIT column
    groups a block; N = 40 leaves a block's last columns past N (no loads, no writes), K = 1024 gives
    SPLIT 2 four rounds a warp (U = 2: two turns of its loop)."""
    y, want = _gemv(lib, f"h2_tc_u{u}_s{split}", 40, 1024, 16 * (8 // split))
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y, want, rtol=2e-3, atol=2e-3 * np.abs(want).max())


@pytest.mark.parametrize("u,split,frag", [(4, 1, 0), (4, 2, 1), (8, 4, 0), (4, 4, 1)])
def test_h2_mma_matches_numpy(lib, u, split, frag):
    """8 columns a warp, 8 / SPLIT column groups a block; A staged as pairs (FRAG 0) or as whole mma
    operands (FRAG 1)."""
    y, want = _gemv(lib, f"h2_mma_u{u}_s{split}_f{frag}", 40, 1024, 8 * (8 // split))
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y, want, rtol=2e-3, atol=2e-3 * np.abs(want).max())
