"""The f32 RMS norm kernels (kernels/rms_norm.hip: SimplifiedLayerNormalization, RMSNormalization,
SkipSimplifiedLayerNormalization) give ONNX Runtime's CPU EP's bits: g++ compiles the unchanged
kernel source against the host stand-in for the CUDA headers (tests/unit/host_cuda, plus its
round-to-nearest intrinsics), the launches the bindings give run block by block on host threads,
and every output must equal the registry's reference (`_rms_rows`, `_skip_rows`: the CPU EP's
operation order) bit for bit. Rows include values on int8 quantization ties (a dequantized int4
embedding with unit weights, what the int4 decoders' first norm sees), short rows (ORT's scalar
loop), every tail length of MLAS's 8 lanes, several blocks, and warps of 32 and 64 lanes.
Skipped without g++."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from hipep.ops.contrib_norm import _skip_rows
from hipep.ops.mlas import _rms_rows
from hipep.runtime import gpu_kernels as gk

from unit.host_kernels import HOST_CUDA, KERNELS, compile_module, run_on_host

f32 = np.float32
pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


def _build(out: Path, warp: int):
    # -ffp-contract=off and the round-to-nearest intrinsics: the host must round where the GPU does
    lib = compile_module(out, "rms_norm", warp,
                         ("-ffp-contract=off", "-include", str(HOST_CUDA / "rn_intrinsics.h")))
    return lib, warp


@pytest.fixture(scope="module")
def lib32(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("rms_host32"), 32)


@pytest.fixture(scope="module")
def lib64(tmp_path_factory):
    """AMD's CDNA warps: 64 lanes, so 8 groups of 8 per warp."""
    return _build(tmp_path_factory.mktemp("rms_host64"), 64)


def _run(built, op_key, inputs, attrs, n_out, offset=0, drop=()):
    """Binds and runs `op_key` on `inputs`; returns (outputs, reference outputs, kernel ops).
    Outputs whose index is in `drop` get no buffer (a null pointer: the graph leaves them out)."""
    lib, warp = built
    return run_on_host({"warp": warp, "rms_norm": lib}, op_key, inputs, attrs, n_out=n_out,
                       offsets={k: offset for k in range(len(inputs))}, sm_count=4, drop=drop)


def _bits_equal(got, want, what):
    assert got.dtype == want.dtype and got.shape == want.shape, what
    g, w = got.view(np.uint32), want.view(np.uint32)
    bad = np.flatnonzero(g != w)
    assert bad.size == 0, (f"{what}: {bad.size} of {g.size} values differ, first at flat index {bad[0]}: "
                           f"got {got.flat[bad[0]]!r}, want {want.flat[bad[0]]!r}")


def _tie_rows(rng, rows, n):
    """A dequantized int4 embedding (GatherBlockQuantized: codes 0..15 minus 8, times a per-32 block
    scale) with a few scales that are powers of two: many normalized values then sit exactly on
    the half-way points of the int8 quantization MatMulNBits applies next."""
    codes = rng.integers(0, 16, (rows, n)).astype(f32) - f32(8)
    blocks = -(-n // 32)
    scales = rng.uniform(0.002, 0.05, (rows, blocks)).astype(f32)
    scales[:, ::3] = f32(2.0 ** -6)
    return (codes * np.repeat(scales, 32, axis=1)[:, :n]).astype(f32)


def _rows(rng, rows, n, kind):
    if kind == "ties":
        return _tie_rows(rng, rows, n)
    # magnitudes over several octaves: the order of the sum shows in the last bits
    return (rng.uniform(-1, 1, (rows, n)) * np.exp2(rng.integers(-6, 6, (rows, n)))).astype(f32)


def _entry(prefix: str, rows: int, n: int, offset: int) -> str:
    """The kernel the binding picks (Target(sm_count=4) in _run): a block per row for up to 4
    aligned rows of 16 or more, else the groups of 8 lanes, vectorized where n % 4 == 0."""
    aligned = n % 4 == 0 and offset == 0
    if aligned and n >= 16 and rows <= 4:
        return f"{prefix}_f32_exact_row"
    return f"{prefix}_f32_exact" + ("_vec" if aligned else "")


# Row lengths: ORT's scalar loop (n < 16), and MLAS's 8 lanes with every tail length 0..7 (the
# first 4 tail squares rounded, the rest fused), short and long.
LENGTHS = [1, 3, 8, 15, 16, 17, 20, 23, 24, 64, 300, 2048, 2051, 2052, 2055]


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("kind", ["random", "ties"])
def test_simplified_layer_norm_f32_bit_exact(lib32, n, kind):
    rng = np.random.default_rng(n)
    rows = 3 if n >= 2048 else 37  # 37: several blocks, the last one part empty
    x = _rows(rng, rows, n, kind).reshape(rows, 1, n)
    scale = np.ones(n, f32) if kind == "ties" else rng.uniform(0.5, 1.5, n).astype(f32)
    for offset in (0, 4):  # vectorized output pass where n allows it, and the scalar one
        got, want, ops = _run(lib32, "::SimplifiedLayerNormalization", [x, scale], {"axis": -1, "epsilon": 1e-5},
                              n_out=2, offset=offset)
        assert ops[0].entry == _entry("hipep_rms_norm", rows, n, offset)
        _bits_equal(got[0], want[0], f"y (n={n}, offset {offset})")
        _bits_equal(got[1], want[1], f"inv_std_var (n={n}, offset {offset})")


def test_the_rows_tell_summation_orders_apart():
    """The test data is sharp: summing the squares in another order (f64, rounded once; or a plain
    sequential f32 loop for MLAS's rows) changes the output's bits on many rows."""
    rng = np.random.default_rng(7)
    for n in (64, 2048, 2051):
        for kind in ("random", "ties"):
            x = _rows(rng, 64, n, kind)
            scale = np.ones(n, f32)
            y, _ = _rms_rows(x, scale, 1e-5)
            sq64 = (x.astype(np.float64) ** 2).sum(axis=1).astype(f32)
            inv = (f32(1) / np.sqrt((sq64 / f32(n) + f32(1e-5)).astype(f32))).astype(f32)
            other = ((x * inv[:, None]).astype(f32) * scale).astype(f32)
            assert (other != y).any(axis=1).sum() >= 4, (n, kind)
            seq, _, _ = _skip_rows(x, scale, None, 1e-5, True)
            assert (seq != y).any(axis=1).sum() >= 4, (n, kind)


def test_rms_normalization_f32_bit_exact_over_two_axes(lib32):
    rng = np.random.default_rng(11)
    x = _rows(rng, 5, 6 * 50, "random").reshape(5, 6, 50)
    scale = rng.uniform(0.5, 1.5, (6, 50)).astype(f32)
    got, want, ops = _run(lib32, "::RMSNormalization", [x, scale], {"axis": 1, "epsilon": 1e-6}, n_out=1)
    assert ops[0].entry == "hipep_rms_norm_f32_exact_vec"
    _bits_equal(got[0], want[0], "y")


SKIP_CASES = [  # (input shape, skip shape, bias)
    ((2, 3, 8), (2, 3, 8), True), ((1, 5, 15), (1, 5, 15), False), ((4, 16), (4, 16), True),
    ((2, 9, 64), (9, 64), True), ((3, 7, 255), (1, 7, 255), False), ((1, 3, 256), (1, 3, 256), True),
    ((1, 2, 257), (1, 2, 257), True), ((1, 2, 2048), (1, 2, 2048), True), ((1, 3, 2051), (1, 3, 2051), False),
    ((2, 20, 96), (20, 96), False),
]


@pytest.mark.parametrize("x_shape,skip_shape,bias", SKIP_CASES)
@pytest.mark.parametrize("kind", ["random", "ties"])
def test_skip_simplified_layer_norm_f32_bit_exact(lib32, x_shape, skip_shape, bias, kind):
    h = x_shape[-1]
    rng = np.random.default_rng(h + len(skip_shape))
    rows = int(np.prod(x_shape[:-1]))
    x = _rows(rng, rows, h, kind).reshape(x_shape)
    skip = _rows(rng, int(np.prod(skip_shape[:-1])), h, kind).reshape(skip_shape)
    gamma = np.ones(h, f32) if kind == "ties" else rng.uniform(0.5, 1.5, h).astype(f32)
    ins = [x, skip, gamma] + ([_rows(rng, 1, h, kind)[0]] if bias else [])
    for offset in (0, 4):
        got, want, ops = _run(lib32, "com.microsoft::SkipSimplifiedLayerNormalization", ins, {"epsilon": 1e-6},
                              n_out=4, offset=offset)
        assert ops[0].entry == _entry("hipep_skip_rms_norm", rows, h, offset)
        for name, g, w in zip(("y", "mean", "inv_std_var", "input_skip_bias_sum"), got, want):
            _bits_equal(g, w, f"{name} ({x_shape}, offset {offset})")


def test_skip_norm_f32_without_optional_outputs(lib32):
    rng = np.random.default_rng(3)
    x, skip = _rows(rng, 6, 64, "random").reshape(2, 3, 64), _rows(rng, 3, 64, "random")
    gamma = rng.uniform(0.5, 1.5, 64).astype(f32)
    got, want, _ = _run(lib32, "com.microsoft::SkipSimplifiedLayerNormalization", [x, skip, gamma],
                        {"epsilon": 1e-5}, n_out=4, drop=(1, 2))
    _bits_equal(got[0], want[0], "y")
    _bits_equal(got[3], want[3], "input_skip_bias_sum")
    got, want, _ = _run(lib32, "com.microsoft::SkipSimplifiedLayerNormalization", [x, skip, gamma],
                        {"epsilon": 1e-5}, n_out=1)
    _bits_equal(got[0], want[0], "y alone")


def test_f32_kernels_with_64_lane_warps(lib64):
    rng = np.random.default_rng(5)
    for n, rows in ((15, 20), (24, 20), (2051, 2), (2048, 40), (2048, 3), (24, 1)):
        x = _rows(rng, rows, n, "ties")
        got, want, ops = _run(lib64, "::SimplifiedLayerNormalization", [x, np.ones(n, f32)],
                              {"axis": -1, "epsilon": 1e-5}, n_out=2)
        assert ops[0].block[0] * ops[0].block[1] % 64 == 0
        assert ops[0].entry == _entry("hipep_rms_norm", rows, n, 0)
        _bits_equal(got[0], want[0], f"y (n={n})")
        _bits_equal(got[1], want[1], f"inv_std_var (n={n})")
        skip = _rows(rng, rows, n, "random")
        got, want, _ = _run(lib64, "com.microsoft::SkipSimplifiedLayerNormalization",
                            [x.reshape(1, rows, n), skip.reshape(1, rows, n), np.ones(n, f32)], {"epsilon": 1e-6},
                            n_out=4)
        for name, g, w in zip(("y", "mean", "inv_std_var", "input_skip_bias_sum"), got, want):
            _bits_equal(g, w, f"{name} (n={n})")


def test_launch_shapes_of_the_f32_kernels():
    """A group of 8 threads per row; a decode's rows in one block of 16 rows (all its threads share
    the output pass); prefill's rows spread over the multiprocessors, 8 R always whole warps."""
    def bind(rows, n, warp, sm_count=132):
        x = gk.Arg(0x10000, (rows, n), np.dtype(f32))
        s = gk.Arg(0x20000, (n,), np.dtype(f32))
        y = gk.Arg(0x30000, (rows, n), np.dtype(f32))
        target = gk.Target(sm_count=sm_count, warp_size=warp)
        return gk.binding_for("::SimplifiedLayerNormalization").bind([x, s], [y], {"axis": -1, "epsilon": 1e-5},
                                                                      target)[0]

    source = (KERNELS / "rms_norm.hip").read_text()
    assert f"#define HIPEP_RMS_MAX_ROWS {gk._RMS_EXACT_MAX_ROWS}" in source  # the kernel's shared arrays
    assert f"#define HIPEP_RMS_GROUP {gk._RMS_EXACT_LANES}" in source
    op = bind(1, 2048, 32)  # a decode row: a block of its own, the whole row in shared memory
    assert op.entry.endswith("_row") and op.grid == (1, 1, 1) and op.block == (256, 1, 1) and op.smem == 8192
    op = bind(3, 24, 64)
    assert op.entry.endswith("_row") and op.grid == (3, 1, 1) and op.block == (64, 1, 1) and op.smem == 96
    assert bind(132, 12288, 32).entry.endswith("_row") and not bind(133, 64, 32).entry.endswith("_row")
    assert not bind(1, 12292, 32).entry.endswith("_row")  # past 48 KB of shared memory
    op = bind(1, 2050, 32)  # unaligned rows: groups of 8 lanes
    assert op.grid == (1, 1, 1) and op.block == (8, 16, 1)
    op = bind(512, 2048, 32)
    assert op.block == (8, 4, 1) and op.grid == (128, 1, 1)
    op = bind(100000, 64, 32)
    assert op.block == (8, 16, 1) and op.grid == (6250, 1, 1)
    op = bind(100, 66, 64)
    assert op.block == (8, 8, 1) and op.grid == (13, 1, 1)
    for rows in range(1, 300, 7):
        for warp in (32, 64):
            op = bind(rows, 66, warp, sm_count=8)
            assert op.block[0] == 8 and op.block[0] * op.block[1] % warp == 0 and op.block[1] <= 16
            assert op.grid[0] * op.block[1] >= rows > (op.grid[0] - 1) * op.block[1]


@pytest.mark.parametrize("op_key", ["::SimplifiedLayerNormalization",
                                    "com.microsoft::SkipSimplifiedLayerNormalization"])
def test_f16_rows_keep_the_fast_kernels(lib32, op_key):
    rng = np.random.default_rng(9)
    x = rng.uniform(-2, 2, (1, 3, 200)).astype(np.float16)
    w = rng.uniform(0.5, 1.5, 200).astype(np.float16)
    ins = [x, w] if op_key.startswith("::") else [x, rng.uniform(-2, 2, (1, 3, 200)).astype(np.float16), w]
    attrs = {"axis": -1, "epsilon": 1e-5} if op_key.startswith("::") else {"epsilon": 1e-5}
    got, want, ops = _run(lib32, op_key, ins, attrs, n_out=1)
    assert "exact" not in ops[0].entry and ops[0].entry.endswith("f16_vec")
    np.testing.assert_allclose(got[0].astype(f32), want[0].astype(f32), rtol=2e-2, atol=2e-3)
