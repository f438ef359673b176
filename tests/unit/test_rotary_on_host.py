"""The rotary kernel (kernels/rotary.hip) runs on the host stand-in (g++ over the unchanged kernel
source, the launches the bindings give run block by block on host threads) against the registry's
references: com.microsoft RotaryEmbedding and MRotaryEmbedding (both section layouts, scale, partial
rotary) and ai.onnx RotaryEmbedding-23. f32 is bit-exact (MLAS's fused rotation and its interleaved
tail, which the references repeat), f16 within one f16 rounding. Skipped without g++."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from unit.host_kernels import EXACT_FLAGS, compile_module, run_on_host

F32, F16 = np.float32, np.float16
pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    return {"warp": 32, "rotary": compile_module(tmp_path_factory.mktemp("rotary"), "rotary", 32, EXACT_FLAGS)}


def _check(got, want, dtype):
    assert got.dtype == want.dtype and got.shape == want.shape
    if dtype == F32:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got.astype(F32), want.astype(F32), rtol=1e-3, atol=1e-3)


def _caches(rng, rows, half, dtype):
    ang = rng.uniform(0, 6, (rows, half))
    return np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("half,interleaved", [(8, 0), (8, 1), (12, 1), (5, 1), (17, 0)])
def test_rotary_embedding(libs, half, interleaved, dtype):
    rng = np.random.default_rng(half * 2 + interleaved)
    cos, sin = _caches(rng, 20, half, dtype)
    x = rng.uniform(-1, 1, (2, 3, 2 * 2 * half)).astype(dtype)
    pos = rng.integers(0, 20, (2, 3)).astype(np.int64)
    (y,), (want,), _ = run_on_host(libs, "com.microsoft::RotaryEmbedding", [x, pos, cos, sin],
                                   {"interleaved": interleaved})
    _check(y, want, dtype)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("layout,section", [(0, [2, 3, 3]), (1, [2, 3, 3]), (1, [8, 0, 0]), (0, [0, 4, 4])])
@pytest.mark.parametrize("form", ["3d", "4d-interleaved", "partial-scale"])
def test_mrotary_embedding(libs, form, layout, section, dtype):
    rng = np.random.default_rng(layout * 10 + section[0])
    b, s, n, h = 2, 3, 2, 16
    attrs = {"mrope_section": section, "mrope_layout": layout}
    half = h // 2
    if form == "partial-scale":
        h, attrs = 24, {**attrs, "num_heads": n, "rotary_embedding_dim": 16, "scale": 0.37}
    elif form == "3d":
        attrs["num_heads"] = n
    else:
        attrs["interleaved"] = 1
    cos, sin = _caches(rng, 20, half, dtype)
    x = rng.uniform(-1, 1, (b, n, s, h) if form.startswith("4d") else (b, s, n * h)).astype(dtype)
    pos = rng.integers(0, 20, (3, b, s)).astype(np.int64)
    (y,), (want,), ops = run_on_host(libs, "com.microsoft::MRotaryEmbedding", [x, pos, cos, sin], attrs)
    assert [op.entry for op in ops] == [f"hipep_rotary_{'f32' if dtype == F32 else 'f16'}"]
    _check(y, want, dtype)


@pytest.mark.parametrize("dtype", [F32, F16])
def test_onnx_rotary_embedding_23(libs, dtype):
    rng = np.random.default_rng(23)
    cos, sin = _caches(rng, 20, 8, dtype)
    x = rng.uniform(-1, 1, (2, 2, 3, 16)).astype(dtype)
    pos = rng.integers(0, 20, (2, 3)).astype(np.int64)
    (y,), (want,), _ = run_on_host(libs, "::RotaryEmbedding", [x, cos, sin, pos], {"interleaved": 1})
    _check(y, want, dtype)
