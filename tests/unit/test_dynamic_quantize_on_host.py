"""DynamicQuantizeLinear's GPU program (hipep.runtime.gpu_dynamic_quantize) run on the CPU: its
launches (the NaN-free copy, ReduceMin / ReduceMax of kernels/reduce.hip, the scale and zero point
expression, QuantizeLinear's expression) are compiled by g++ against the host stand-in for the CUDA
headers (round-to-nearest intrinsics, no contraction, as on the GPU) and run in order over host
memory; y, y_scale and y_zero_point must equal the op registry's reference bit for bit. Skipped
without g++."""
from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest

from hipep.ops.registry import OUTPUT_COUNT, SINCE_VERSION, lookup
from hipep.runtime import gpu_kernels as gk
from hipep.runtime.gpu_dynamic_quantize import range_row_length

from helpers import needs_nvrtc
from unit.host_kernels import EXACT_FLAGS, HostMemory, compile_module, generated_lib, launch

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
F32 = np.float32


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    build = tmp_path_factory.mktemp("dynamic_quantize")
    return {"dir": build, "warp": 32, "reduce": compile_module(build, "reduce", 32, EXACT_FLAGS), "generated": {}}


def _run(libs, x, drop=()):
    """Binds DynamicQuantizeLinear for x and runs its launches on the host; (got, want, ops), got
    None where the output index is in `drop` (the graph does not read it)."""
    op = lookup("", "DynamicQuantizeLinear")
    attrs = {OUTPUT_COUNT: 3, SINCE_VERSION: 11}
    with np.errstate(all="ignore"):
        want = op.reference([x], attrs)
    mem = HostMemory()
    (xa, _), outs, views = mem.put(x), [], []
    for k, w in enumerate(want):
        if k in drop:
            outs.append(None)
            views.append(None)
            continue
        a, v = mem.put(np.full(w.shape, np.nan if w.dtype.kind == "f" else 7, w.dtype))
        outs.append(gk.Arg(a.ptr, a.shape, a.dtype))
        views.append(v)
    target = gk.Target(sm_count=2, warp_size=32, scratch=lambda n: 0,
                       workspace=lambda n: mem.put(np.full(n, 0xA5, np.uint8))[0].ptr)
    ops = gk.binding_for("::DynamicQuantizeLinear").bind([xa], outs, attrs, target)
    for k in ops:
        if isinstance(k, gk.CopyOp):
            ctypes.memmove(k.dst, k.src, k.nbytes)
            continue
        if k.module is None:
            launch(generated_lib(libs, k), k)
        else:
            launch(libs[k.module], k)
    return views, want, ops


def _assert_equal(got, want, drop=()):
    for k, (g, w) in enumerate(zip(got, want)):
        if k in drop:
            continue
        # HostMemory keeps a scalar as one element of shape (1,) (np.ascontiguousarray)
        assert g.dtype == w.dtype and g.size == w.size and g.ndim == max(w.ndim, 1), k
        g = g.reshape(w.shape)
        np.testing.assert_array_equal(g.view(f"u{g.itemsize}"), w.view(f"u{w.itemsize}"), err_msg=f"output {k}")


_RNG = np.random.default_rng(11)


@pytest.mark.parametrize("x", [
    _RNG.normal(0, 3, (3, 5, 7)).astype(F32),
    _RNG.uniform(0.5, 40, (4, 9)).astype(F32),       # all positive: min is the range's 0
    _RNG.uniform(-40, -0.5, (2, 3, 5)).astype(F32),  # all negative: max is the range's 0
    np.zeros((2, 6), F32),                           # no range: scale 1, zero point 0
    np.full((5,), -0.0, F32),
    np.array(3.25, F32),                             # a scalar
    _RNG.normal(0, 1, (1, 4096)).astype(F32),        # one row, one block
], ids=["random", "positive", "negative", "zeros", "neg-zeros", "scalar", "row-4096"])
def test_matches_the_reference(libs, x):
    got, want, _ = _run(libs, x)
    _assert_equal(got, want)


def test_ties_round_half_to_even(libs):
    # max 255 and min -255 give scale 2 and zero point 127.5 -> 128; x / 2 lands on .5 for odd x
    x = np.concatenate([np.arange(-255, 256, dtype=F32), [0.5, -0.5, 1.5, -1.5]]).astype(F32)
    got, want, _ = _run(libs, x)
    assert want[1] == F32(2) and want[2] == 128
    _assert_equal(got, want)
    # range [-0.5 * 255, 255]: scale 1.5, zero point 0 - (-127.5) / 1.5 = 85, and x = 1.5 * (k + 0.5)
    x = np.concatenate([[-127.5, 255.0], F32(1.5) * (np.arange(-80, 160, dtype=F32) + F32(0.5))]).astype(F32)
    got, want, _ = _run(libs, x)
    _assert_equal(got, want)


def test_nans_are_left_out_of_the_range(libs):
    x = _RNG.normal(0, 2, (6, 10)).astype(F32)
    x[1, 3] = x[4, 0] = np.nan
    got, want, _ = _run(libs, x)
    assert np.isfinite(want[1]) and want[0][1, 3] == 0
    _assert_equal(got, want)
    got, want, _ = _run(libs, np.full((3, 4), np.nan, F32))  # nothing but NaN: the range is [0, 0]
    _assert_equal(got, want)


def test_infinities(libs):
    x = np.array([1.0, -2.0, np.inf, 3.0], F32)
    got, want, _ = _run(libs, x)
    _assert_equal(got, want)
    got, want, _ = _run(libs, np.array([1.0, -np.inf, np.inf], F32))  # inf / inf: zero point NaN -> 0
    _assert_equal(got, want)


def test_large_tensor_reduces_rows_then_their_results(libs):
    x = _RNG.normal(0, 5, (64, 256)).astype(F32)
    x[37, 200] = -60.0  # the minimum in a later row
    assert range_row_length(x.size) == 4096
    got, want, ops = _run(libs, x)
    reduce_ops = [k for k in ops if k.module == "reduce"]
    assert len(reduce_ops) == 4 and reduce_ops[0].grid[0] * reduce_ops[0].grid[1] >= 1
    _assert_equal(got, want)


def test_unread_outputs_are_not_written_but_still_feed_y(libs):
    x = _RNG.normal(0, 3, (4, 33)).astype(F32)
    got, want, _ = _run(libs, x, drop=(1, 2))
    _assert_equal(got, want, drop=(1, 2))
    got, want, _ = _run(libs, x, drop=(0,))
    _assert_equal(got, want, drop=(0,))


def test_empty_input(libs):
    got, want, ops = _run(libs, np.zeros((0, 3), F32))
    _assert_equal(got, want)


def test_claims_f32_only():
    check = gk.BINDINGS["::DynamicQuantizeLinear"].check
    assert check({}, ["float32"], [None], [None]) is None
    assert "float16" in check({}, ["float16"], [None], [None])


@needs_nvrtc
def test_nvrtc_compiles_the_generated_kernels():
    from hipep.runtime import kernel_cache
    from hipep.runtime.gpu_dynamic_quantize import nan_to_zero_expression, scale_zero_point_expression

    for expr, ins, outs in ((nan_to_zero_expression(), ["float32"], ["float32"]),
                            (scale_zero_point_expression(), ["float32", "float32"], ["float32", "uint8"])):
        r = gk.render_pointwise(expr, ins, outs)
        data, _ = kernel_cache.compile_cubin(r.source, r.name, "sm_90", {"HIPEP_WARP_SIZE": 32}, use_cache=False)
        assert r.name.encode() + b"\0" in data
