"""The fp16 RMS norm kernels (kernels/rms_norm.hip, the half-type section) run on the host stand-in
(g++ over the unchanged kernel source, the launches the bindings give run block by block on host
threads) against the registry's reference, for both launch shapes row_config picks: a thread per
16-byte load of a row where the rows leave multiprocessors idle (decode's one row), and the
bandwidth shape (a warp or a block per row, several loads a thread) where they do not. Warps of 32
and 64 lanes. Skipped without g++."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from hipep.runtime import gpu_kernels as gk
from unit.host_kernels import HOST_CUDA, compile_module, run_on_host

f16 = np.float16
pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
SM_COUNT = 4  # the stand-in GPU's multiprocessors: rows below this take a thread per load


@pytest.fixture(scope="module", params=[32, 64])
def built(request, tmp_path_factory):
    warp = request.param
    # the module's f32 section needs the round-to-nearest intrinsics
    return compile_module(tmp_path_factory.mktemp(f"rms_half{warp}"), "rms_norm", warp,
                          ("-include", str(HOST_CUDA / "rn_intrinsics.h"))), warp


def _rel(got, want):
    got, want = got.astype(np.float64), want.astype(np.float64)
    return np.linalg.norm(got - want) / np.linalg.norm(want)


def _expected_block(rows: int, n: int, warp: int) -> int | None:
    """Threads a block of the thread-per-load shape (the power of two covering the row's 16-byte
    loads), or None where the rows do not take it."""
    words = n // 8
    if rows < SM_COUNT and words > warp:
        return min(1024, 1 << (words - 1).bit_length())
    return None


@pytest.mark.parametrize("rows,n", [(1, 2048), (1, 8192), (2, 1000), (3, 320), (1, 64), (6, 2048), (40, 512)])
def test_simplified_layer_norm_half_rows(built, rows, n):
    lib, warp = built
    rng = np.random.default_rng(rows * n)
    x = rng.standard_normal((rows, n)).astype(f16)
    scale = rng.uniform(0.5, 1.5, n).astype(f16)
    (y,), (want,), ops = run_on_host({"warp": warp, "rms_norm": lib}, "::SimplifiedLayerNormalization",
                                     [x, scale], {"epsilon": 1e-5, "axis": -1}, sm_count=SM_COUNT)
    assert ops[0].entry.startswith("hipep_rms_norm_f16")
    block = _expected_block(rows, n, warp)
    if block is not None:
        assert ops[0].grid == (rows, 1, 1) and ops[0].block == (block, 1, 1)
    assert _rel(y, want) < 2e-3


@pytest.mark.parametrize("rows,n", [(1, 2048), (1, 4096), (2, 1000), (5, 2048)])
def test_skip_simplified_layer_norm_half_rows(built, rows, n):
    lib, warp = built
    rng = np.random.default_rng(rows + n)
    x = rng.standard_normal((1, rows, n)).astype(f16)
    skip = rng.standard_normal((1, rows, n)).astype(f16)
    gamma = rng.uniform(0.5, 1.5, n).astype(f16)
    got, want, ops = run_on_host({"warp": warp, "rms_norm": lib}, "com.microsoft::SkipSimplifiedLayerNormalization",
                                 [x, skip, gamma], {"epsilon": 1e-5}, n_out=4, sm_count=SM_COUNT)
    assert ops[0].entry.startswith("hipep_skip_rms_norm_f16")
    block = _expected_block(rows, n, warp)
    if block is not None:
        assert ops[0].grid == (rows, 1, 1) and ops[0].block == (block, 1, 1)
    assert _rel(got[0], want[0]) < 2e-3  # the normalized output
    np.testing.assert_array_equal(got[3], want[3])  # input + skip, rounded once to fp16
    np.testing.assert_allclose(got[2].ravel(), np.asarray(want[2], np.float32).ravel(), rtol=1e-3)  # inv_std_var


@pytest.mark.parametrize("rows,n,bias", [(1, 2048, False), (1, 4096, True), (3, 1024, True)])
def test_decode_rows_take_the_overlapping_skip_norm_bit_for_bit(built, rows, n, bias, monkeypatch):
    """Rows that leave multiprocessors idle (decode) take hipep_skip_rms_norm_f16_overlap, launched
    to overlap the kernel ahead (gamma and bias fetched before it waits); its outputs are the block
    kernel's in the same launch shape bit for bit (the same arithmetic in the same order)."""
    lib, warp = built
    rng = np.random.default_rng(rows * n + bias)
    x = rng.standard_normal((1, rows, n)).astype(f16)
    skip = rng.standard_normal((1, rows, n)).astype(f16)
    gamma = rng.uniform(0.5, 1.5, n).astype(f16)
    ins = [x, skip, gamma] + ([rng.standard_normal(n).astype(f16)] if bias else [])
    key, libs = "com.microsoft::SkipSimplifiedLayerNormalization", {"warp": warp, "rms_norm": lib}
    got, want, ops = run_on_host(libs, key, ins, {"epsilon": 1e-5}, n_out=4, sm_count=SM_COUNT)
    assert [(o.entry, o.overlaps_previous) for o in ops] == [("hipep_skip_rms_norm_f16_overlap", True)]
    assert ops[0].grid == (rows, 1, 1) and ops[0].block == (_expected_block(rows, n, warp), 1, 1)
    monkeypatch.setattr(gk, "OVERLAP_SKIP_NORM", False)
    plain, _, plain_ops = run_on_host(libs, key, ins, {"epsilon": 1e-5}, n_out=4, sm_count=SM_COUNT)
    assert [(o.entry, o.overlaps_previous, o.grid, o.block) for o in plain_ops] == [
        ("hipep_skip_rms_norm_f16_vec", False, ops[0].grid, ops[0].block)]
    for j in (0, 2, 3):
        np.testing.assert_array_equal(got[j], plain[j])
    assert _rel(got[0], want[0]) < 2e-3
