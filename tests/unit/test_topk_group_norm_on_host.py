"""kernels/topk.hip and kernels/group_norm.hip run on the CPU: g++ compiles the unchanged kernel source
against the host stand-in for the CUDA headers (tests/unit/host_cuda: every GPU thread of a block a
host thread, barriers and warp shuffles as the GPU has them), and the launches the bindings give run
block by block over host memory, compared with the op registry's references.

TopK must equal the reference exactly, bits of the values included: ties (the smaller index first),
NaN (above every number), -0.0 beside +0.0, largest 0 and 1, an axis that is not the last, k = 1 and
k = the extent, every element type with a kernel, and lines longer than one block's sort (the
selection in passes through the workspace; the sort's size is made small here so the passes run with
few host threads). GroupNormalization (per-group and per-channel scale), InstanceNormalization and
BatchNormalization in training mode (mixed element types, outputs nobody reads),
f32 within 1e-5 and f16, rows of one warp and of one block; warps of 32 and 64 lanes. Skipped without
g++."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from hipep.ops.registry import SINCE_VERSION
from hipep.runtime import gpu_kernels as gk
from hipep.runtime import gpu_topk

from helpers import needs_nvrtc
from unit.host_kernels import HOST_CUDA, compile_module, run_on_host

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


@pytest.fixture(scope="module", params=[32, 64], ids=["warp32", "warp64"])
def libs(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"topk_norm{request.param}")
    # The norms evaluate the CPU's formulas with every operation rounded on its own: no FMA contraction.
    rn = ("-ffp-contract=off", "-include", str(HOST_CUDA / "rn_intrinsics.h"))
    return {"warp": request.param, "topk": compile_module(out, "topk", request.param),
            "group_norm": compile_module(out, "group_norm", request.param, rn)}


@pytest.fixture
def small_sort(monkeypatch):
    """A block sorts at most 16 items of 8 bytes (8 of 16): lines of a few dozen elements take the
    passes through the workspace."""
    monkeypatch.setattr(gpu_topk, "TOPK_SORT_BYTES", 128)


def _same_bits(got, want, what=""):
    assert got.shape == want.shape and got.dtype == want.dtype, what
    np.testing.assert_array_equal(got.view(f"u{got.dtype.itemsize}"), want.view(f"u{want.dtype.itemsize}"),
                                  err_msg=what)


def _topk(libs, x, k, attrs=None, as_attribute=False, **kw):
    """TopK of x on the host: (values, indices, the launches), checked against the reference."""
    attrs = dict(attrs or {})
    if as_attribute:
        inputs, attrs["k"] = [x], k
    else:
        inputs = [x, np.array([k], np.int64)]
    (v, i), (wv, wi), ops = run_on_host(libs, "::TopK", inputs, attrs, n_out=2, workspace=True, **kw)
    what = f"{x.dtype} {x.shape} k={k} {attrs}"
    _same_bits(v, wv, what)
    np.testing.assert_array_equal(i, wi, err_msg=what)
    assert i.dtype == np.int64
    assert ops and all(o.module == "topk" for o in ops)
    return v, i, ops


def _ties_and_nan(rng, shape, dtype=np.float32):
    x = rng.integers(-3, 4, shape).astype(dtype)
    flat = x.reshape(-1)
    if np.dtype(dtype).kind == "f":
        flat[rng.integers(0, flat.size, max(1, flat.size // 8))] = np.nan
        flat[rng.integers(0, flat.size, max(1, flat.size // 8))] = -0.0
        flat[rng.integers(0, flat.size, max(1, flat.size // 8))] = 0.0
        flat[rng.integers(0, flat.size, max(1, flat.size // 16))] = -np.inf
        flat[rng.integers(0, flat.size, max(1, flat.size // 16))] = np.inf
    return x


@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_topk_ties_nan_and_signed_zeros(libs, dtype, largest):
    rng = np.random.default_rng(3 + largest)
    x = _ties_and_nan(rng, (4, 37), dtype)
    x[0, :] = np.nan  # a line of NaNs only
    x[1, :] = 1.0     # and of one value
    for k in (1, 5, 37):
        _, _, ops = _topk(libs, x, k, {"largest": largest})
        assert [o.entry for o in ops] == [f"hipep_topk_{'f32' if dtype == np.float32 else 'f16'}_select"]


@pytest.mark.parametrize("largest", [1, 0])
def test_topk_along_an_axis_that_is_not_the_last(libs, largest):
    rng = np.random.default_rng(5)
    x = _ties_and_nan(rng, (3, 19, 5))
    for axis, k in ((1, 4), (0, 3), (-2, 19), (2, 1)):
        _topk(libs, x, k, {"axis": axis, "largest": largest})


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32, np.int64])
def test_topk_integer_types(libs, dtype):
    rng = np.random.default_rng(7)
    info = np.iinfo(dtype)
    x = rng.integers(-3, 4, (3, 21)).astype(dtype) if info.min < 0 else rng.integers(0, 5, (3, 21)).astype(dtype)
    x[0, :4] = [info.min, info.max, info.min, info.max]  # the ends of the range, tied
    for largest in (1, 0):
        for k in (1, 6, 21):
            _topk(libs, x, k, {"largest": largest})


def test_topk_k_as_attribute_and_k_zero(libs):
    rng = np.random.default_rng(9)
    x = _ties_and_nan(rng, (2, 9))
    _topk(libs, x, 3, {SINCE_VERSION: 1}, as_attribute=True)
    (v, i), _, ops = run_on_host(libs, "::TopK", [x, np.array([0], np.int64)], {}, n_out=2)
    assert ops == [] and v.shape == (2, 0) and i.shape == (2, 0)


@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int64])
def test_topk_long_lines_select_in_passes(libs, small_sort, dtype, largest):
    rng = np.random.default_rng(11)
    itemsize = gpu_topk.TOPK_TYPES[np.dtype(dtype).name][1]
    cap, k_max = gpu_topk.sort_capacity(itemsize), gpu_topk.max_long_k(itemsize)
    x = _ties_and_nan(rng, (2, 150), dtype)
    for k in sorted({1, k_max}):
        _, _, ops = _topk(libs, x, k, {"largest": largest})
        assert len(ops) >= 2 + (k == k_max) and ops[0].entry.endswith("_select") and ops[-1].entry.endswith("_merge")
        assert ops[-1].grid[0] == 2 and all(o.smem <= gpu_topk.TOPK_SORT_BYTES for o in ops)
        assert all(o.block[0] <= cap // 2 for o in ops)
    # a long line across the middle axis: strided reads, strided outputs
    _topk(libs, _ties_and_nan(rng, (2, 40, 3), dtype), 2, {"axis": 1, "largest": largest})


def test_topk_line_of_exactly_one_sort_and_one_past_it(libs, small_sort):
    rng = np.random.default_rng(13)
    cap = gpu_topk.sort_capacity(8)
    _, _, ops = _topk(libs, _ties_and_nan(rng, (2, cap)), cap)
    assert len(ops) == 1
    _, _, ops = _topk(libs, _ties_and_nan(rng, (2, cap + 1)), 2)
    assert len(ops) == 2 and ops[0].grid[0] == 4


def test_topk_claims():
    check = gk.BINDINGS["::TopK"].check
    f32 = ["float32", "int64"]
    k = lambda v: [None, np.array([v], np.int64)]  # noqa: E731
    assert check({"axis": -1}, f32, [(1, 128256), (1,)], k(50)) is None
    assert check({"axis": -1}, f32, [(4, 128256), (1,)], k(1024)) is None
    assert check({"axis": -1}, f32, [(4, 4096), (1,)], [None, None]) is None  # k at run time, a short line
    assert check({"axis": 0}, f32, [(5000, 3), (1,)], k(5000)) is not None     # k too large for a long line
    assert "run time" in check({"axis": -1}, f32, [(4, 5000), (1,)], [None, None])
    assert "run time" in check({"axis": -1}, f32, [("n", None), (1,)], [None, None])
    assert check({"axis": -1}, ["int64", "int64"], [(2, 9000), (1,)], k(512)) is None
    assert check({"axis": -1}, ["int64", "int64"], [(2, 9000), (1,)], k(513)) is not None
    assert check({"axis": -1}, ["float64", "int64"], [(2, 9), (1,)], k(2)) is not None
    assert check({"axis": -1, "sorted": 0}, f32, [(2, 9), (1,)], k(2)) is not None
    assert check({"axis": -1, "k": 3}, ["float32"], [(2, 9)], [None]) is None  # opset 1
    assert isinstance(check({}, ["float32"], [None], [None]), (str, type(None)))  # nothing known: no error


# ---- GroupNormalization / InstanceNormalization -------------------------------------------------

def _close(got, want, dtype):
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), **tol)


GROUP_CASES = [  # (x shape, num_groups, scale per group): rows of one warp and of one block
    ((2, 4, 3, 3), 2, False),
    ((2, 6, 5), 3, True),
    ((2, 8, 10, 30), 4, False),
    ((1, 6, 200), 2, True),
    ((2, 4, 6), 4, False),   # a group per channel
    ((3, 5, 7), 1, False),   # one group
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape,groups,per_group", GROUP_CASES)
def test_group_norm(libs, shape, groups, per_group, dtype):
    if per_group and dtype == np.float16:
        pytest.skip("f16 GroupNormalization opset 18 is not claimed (the registry's claim)")
    rng = np.random.default_rng(sum(shape) + groups)
    x = rng.uniform(-2, 3, shape).astype(dtype)
    p = groups if per_group else shape[1]
    scale, bias = rng.uniform(0.5, 1.5, p).astype(dtype), rng.uniform(-1, 1, p).astype(dtype)
    (got,), (want,), ops = run_on_host(libs, "::GroupNormalization", [x, scale, bias],
                                       {"num_groups": groups, "epsilon": 1e-4})
    assert [o.entry for o in ops] == [f"hipep_group_norm_{'f32' if dtype == np.float32 else 'f16'}"]
    _close(got, want, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 3, 7), (1, 2, 700), (2, 2, 3, 1)])
def test_instance_norm(libs, shape, dtype):
    rng = np.random.default_rng(sum(shape))
    x = (rng.uniform(-2, 2, shape) + 10.0).astype(dtype)  # far from zero: the variance is centered
    c = shape[1]
    scale, bias = rng.uniform(0.5, 1.5, c).astype(dtype), rng.uniform(-1, 1, c).astype(dtype)
    (got,), (want,), ops = run_on_host(libs, "::InstanceNormalization", [x, scale, bias], {"epsilon": 1e-3})
    assert len(ops) == 1 and ops[0].module == "group_norm"
    _close(got, want, dtype)


BATCH_CASES = [  # X's shape: channels of one warp's row and of one block's, strided over images
    (3, 4, 5, 6), (8, 3), (2, 3, 200), (1, 2, 3, 1), (5, 6, 1)]


@pytest.mark.parametrize("types", [("float32",) * 3, ("float16",) * 3, ("float16", "float32", "float16"),
                                   ("float32", "float16", "float32")], ids=lambda t: "-".join(t))
@pytest.mark.parametrize("shape", BATCH_CASES)
def test_batch_norm_training(libs, shape, types):
    xt, st, mt = (np.dtype(t) for t in types)
    rng = np.random.default_rng(sum(shape))
    x = (rng.uniform(-2, 3, shape) + 4.0).astype(xt)
    c = shape[1]
    scale, bias = rng.uniform(0.5, 1.5, c).astype(st), rng.uniform(-1, 1, c).astype(st)
    mean, var = rng.uniform(-1, 1, c).astype(mt), rng.uniform(0.5, 2, c).astype(mt)
    got, want, ops = run_on_host(libs, "::BatchNormalization", [x, scale, bias, mean, var],
                                 {"training_mode": 1, "momentum": 0.7, "epsilon": 1e-3}, n_out=3)
    tags = "_".join({"float32": "f32", "float16": "f16"}[t] for t in types)
    assert [o.entry for o in ops] == [f"hipep_batch_norm_train_{tags}"]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        _close(g, w, g.dtype)


def test_batch_norm_training_outputs_nobody_reads(libs):
    rng = np.random.default_rng(4)
    x, p = rng.uniform(-2, 2, (4, 3, 5)).astype(np.float32), [rng.uniform(0.5, 1.5, 3).astype(np.float32)] * 4
    for drop in ((1, 2), (0,), (0, 1)):
        got, want, _ = run_on_host(libs, "::BatchNormalization", [x] + p, {"training_mode": 1}, n_out=3, drop=drop)
        for k, (g, w) in enumerate(zip(got, want)):
            assert (g is None) == (k in drop)
            if g is not None:
                _close(g, w, np.float32)


def test_norm_claims():
    gn, inorm = gk.BINDINGS["::GroupNormalization"].check, gk.BINDINGS["::InstanceNormalization"].check
    f32 = ["float32"] * 3
    assert gn({"num_groups": 32, "stash_type": 1}, f32, [(2, 320, 64, 64), (320,), (320,)], [None] * 3) is None
    assert gn({"num_groups": 2, "stash_type": 0}, f32, [(2, 4, 3), (4,), (4,)], [None] * 3) is not None
    assert gn({"num_groups": 2}, ["bfloat16"] * 3, [None] * 3, [None] * 3) is not None
    assert inorm({}, ["float16"] * 3, [(2, 3, 4), (3,), (3,)], [None] * 3) is None
    assert inorm({}, f32, [(2, 3), (3,), (3,)], [None] * 3) is not None
    bn = gk.BINDINGS["::BatchNormalization"].check
    mixed = ["float16", "float32", "float32", "float16", "float16"]
    assert bn({"training_mode": 1}, mixed, [None] * 5, [None] * 5) is None
    assert bn({"training_mode": 1}, ["bfloat16"] * 5, [None] * 5, [None] * 5) is not None


@needs_nvrtc
def test_every_entry_point_the_bindings_name_compiles_with_nvrtc():
    from hipep.runtime import kernel_cache

    names = {("topk", f"hipep_topk_{dt}_{kind}") for dt, _ in gpu_topk.TOPK_TYPES.values()
             for kind in ("select", "merge")}
    names |= {("group_norm", f"hipep_group_norm_{dt}") for dt in ("f32", "f16")}
    names |= {("group_norm", f"hipep_batch_norm_train_{a}_{b}_{c}")
              for a in ("f32", "f16") for b in ("f32", "f16") for c in ("f32", "f16")}
    for module in ("topk", "group_norm"):
        assert module in gk.modules()
        data, _ = kernel_cache.compile_cubin(kernel_cache.module_source(module), module, "sm_90",
                                             {"HIPEP_WARP_SIZE": 32}, use_cache=False)
        for m, entry in sorted(names):
            if m == module:
                assert entry.encode() + b"\0" in data, entry
