"""kernels/matmul_integer.hip run on the CPU (tests/unit/host_kernels.py) through the MatMulInteger
binding, compared exactly with the registry's reference: every int8/uint8 pairing, no, per-tensor
and per-column zero points, broadcast batch axes, extents that leave partial 64 x 64 tiles and
32-deep K slices, the extreme values, and int32 wraparound. Skipped without g++."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from hipep.runtime import gpu_kernels as gk

from unit.host_kernels import HostMemory, compile_module, launch, run_on_host

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")

TYPES = [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.uint8), (np.int8, np.int8)]
SHAPES = [((5, 7), (7, 9)), ((70, 33), (33, 65)), ((2, 1, 4, 6), (3, 6, 5)), ((2, 3, 1, 8), (1, 8, 12)),
          ((7,), (3, 7, 2)), ((4, 40), (40,)), ((1, 1), (1, 1))]


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    return {"warp": 32, "matmul_integer": compile_module(tmp_path_factory.mktemp("mmi"), "matmul_integer", 32)}


def _rand(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _run(libs, inputs):
    (got,), (want,), ops = run_on_host(libs, "::MatMulInteger", inputs, {})
    assert got.dtype == np.int32 and want.dtype == np.int32
    np.testing.assert_array_equal(got, want)
    return got, want, ops


@pytest.mark.parametrize("ta,tb", TYPES)
@pytest.mark.parametrize("a_shape,b_shape", SHAPES)
def test_matmul_integer_equals_the_reference(libs, ta, tb, a_shape, b_shape):
    rng = np.random.default_rng(hash((a_shape, b_shape)) % 1000)
    a, b = _rand(rng, ta, a_shape), _rand(rng, tb, b_shape)
    _run(libs, [a, b])
    a_zp, b_zp = _rand(rng, ta, ()), _rand(rng, tb, (1,))
    _run(libs, [a, b, a_zp, b_zp])
    _run(libs, [a, b, None, b_zp])
    if len(b_shape) >= 2:  # one zero point per column of B
        _, _, ops = _run(libs, [a, b, a_zp, _rand(rng, tb, (b_shape[-1],))])
        short = {np.uint8: "u8", np.int8: "i8"}
        assert ops[0].entry == f"hipep_matmul_integer_{short[ta]}_{short[tb]}"


def test_per_column_zero_points_of_every_matrix_of_b(libs):
    rng = np.random.default_rng(3)
    a, b = _rand(rng, np.uint8, (2, 1, 5, 6)), _rand(rng, np.int8, (3, 6, 7))
    _run(libs, [a, b, np.uint8(9), _rand(rng, np.int8, (3, 1, 7))])
    a, b = _rand(rng, np.int8, (4, 70)), _rand(rng, np.uint8, (2, 3, 70, 66))
    _run(libs, [a, b, np.int8(-3), _rand(rng, np.uint8, (2, 3, 1, 66))])


def test_extreme_values(libs):
    # |a - a_zp| and |b - b_zp| reach 255, the largest products; K crosses several slices.
    a = np.full((3, 100), -128, np.int8)
    b = np.full((100, 5), 127, np.int8)
    got, _, _ = _run(libs, [a, b, np.int8(127), np.int8(-128)])
    assert (got == -100 * 255 * 255).all()
    got, _, _ = _run(libs, [np.full((2, 70), 255, np.uint8), np.full((70, 3), 0, np.uint8), np.uint8(0),
                            np.uint8(255)])
    assert (got == -70 * 255 * 255).all()


def test_sums_wrap_as_int32(libs):
    k = 33100  # 255 * 255 * k passes 2**31
    a = np.full((1, k), 255, np.uint8)
    b = np.full((k, 2), 255, np.uint8)
    got, _, _ = _run(libs, [a, b])
    assert (got == np.int64(255 * 255 * k).astype(np.int32)).all() and (got < 0).all()


def test_per_row_zero_point_of_a(libs):
    """Per-row zero points of A ([M], allowed by ONNX) are not claimed, as the references reject
    them; the kernel still handles them, including with A's batch folded into rows."""
    assert "per-tensor" in gk.kernel_reason("::MatMulInteger", {}, ["uint8", "uint8", "uint8"],
                                            [(4, 6), (6, 3), (4,)], [None] * 3)
    rng = np.random.default_rng(5)
    for a_shape, b_shape in (((4, 6), (6, 3)), ((2, 4, 6), (6, 3)), ((2, 4, 6), (2, 6, 3))):
        a, b = _rand(rng, np.uint8, a_shape), _rand(rng, np.int8, b_shape)
        a_zp = _rand(rng, np.uint8, (a_shape[-2],))
        want = np.matmul(a.astype(np.int64) - a_zp[:, None], b.astype(np.int64)).astype(np.int32)
        mem = HostMemory()
        out, view = mem.put(np.full(want.shape, 7, np.int32))
        ops = gk.binding_for("::MatMulInteger").bind(
            [mem.put(a)[0], mem.put(b)[0], mem.put(a_zp)[0], None], [gk.Arg(out.ptr, out.shape, out.dtype)], {},
            gk.Target(warp_size=32, scratch=lambda n: 0))
        for o in ops:
            launch(libs[o.module], o)
        np.testing.assert_array_equal(view, want)


def test_claims():
    def reason(dtypes, shapes):
        return gk.kernel_reason("::MatMulInteger", {}, dtypes, shapes, [None] * len(shapes))

    u8, i8 = "uint8", "int8"
    assert reason([u8, i8], [(2, 3, 4), (4, 5)]) is None
    assert reason([i8, u8, i8, u8], [(2, 3, 4), (2, 4, 5), (), (2, 1, 5)]) is None
    assert reason([i8, u8, i8, u8], [(2, 3, 4), (2, 4, 5), (1,), (5,)]) is None
    assert reason([i8, u8, "", u8], [(None, 3, 4), (4, 5), None, (5,)]) is None
    assert "b_zero_point" in reason([i8, u8, "", u8], [(3, 4), (4, 5), None, (4,)])
    assert "b_zero_point" in reason([i8, u8, "", u8], [(3, 4), (4, 5), None, None])
    assert "b_zero_point" in reason([i8, u8, "", u8], [(4,), (4,), None, (1, 1)])
    assert "element types" in reason(["int32", u8], [(3, 4), (4, 5)])
    assert "unknown" in reason([u8, u8], [None, (4, 5)])
    assert "batch axes" in reason([u8, u8], [(2, 1, 2, 1, 2, 1, 3, 4), (1, 2, 1, 2, 1, 2, 4, 5)])
