"""GridSample's GPU kernel (kernels/grid_sample.hip, bound by hipep.runtime.gpu_grid_sample) run on
the CPU: the launches the binding gives are compiled by g++ against the host stand-in for the CUDA
headers (round-to-nearest intrinsics, no contraction into FMAs, as on the GPU) and run block by
block, and the output is compared with the op registry's reference (the CPU device's) bit for bit:
every mode, padding mode and align_corners, X and grid each f32 or f16, 4-D and 5-D, grid points
far outside [-1, 1], coordinates on rounding ties, one-pixel axes, and NaN / infinite points
(where ORT is undefined and both devices clamp alike). Skipped without g++; the NVRTC check needs
nvidia-cuda-nvrtc. tests/gpu/test_gpu_grid_sample.py runs the same on a GPU against ORT.
AffineGrid's kernel (the same module) likewise: f32 and f64, 2-D and 3-D, align_corners 0 and 1,
one-point axes, bit for bit against the reference (which is ORT's CPU kernel's grid bit for bit,
tests/ort/test_affine_grid.py)."""
from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest

from hipep.errors import HipepError
from hipep.runtime import gpu_kernels as gk
from hipep.runtime.gpu_grid_sample import AffineGridArgs, GridSampleArgs

from helpers import needs_nvrtc
from unit.host_kernels import EXACT_FLAGS, compile_module, run_on_host

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
f16, f32 = np.float16, np.float32
MODES = ["linear", "nearest", "cubic"]
PADDINGS = ["zeros", "border", "reflection"]
TYPES = {"f32": (f32, f32), "f16": (f16, f16), "f32-grid-f16": (f32, f16), "f16-grid-f32": (f16, f32)}
ENTRIES = ("hipep_grid_sample_f32_f32", "hipep_grid_sample_f32_f16", "hipep_grid_sample_f16_f32",
           "hipep_grid_sample_f16_f16", "hipep_affine_grid_f32", "hipep_affine_grid_f64")


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    out = tmp_path_factory.mktemp("grid_sample")
    return {"grid_sample": compile_module(out, "grid_sample", 32, EXACT_FLAGS), "warp": 32, "dir": out}


def _bits(a):
    return a.view(f"u{a.itemsize}")


def _sample(libs, x, grid, attrs, sm_count=1, bits=True, opset=22):
    """Runs the binding's launch on the host; asserts it equals the reference (bit for bit where
    `bits`, else as values: NaN equal to NaN) and returns (output, launch)."""
    (got,), (want,), ops = run_on_host(libs, "::GridSample", [x, grid], {**attrs, "_since_version": opset},
                                       sm_count=sm_count)
    assert got.shape == want.shape and got.dtype == want.dtype == x.dtype
    if bits:
        np.testing.assert_array_equal(_bits(got), _bits(want))
    else:
        np.testing.assert_array_equal(got, want)
    return got, ops


def _args(ops) -> GridSampleArgs:
    (op,) = ops
    assert isinstance(op, gk.KernelOp) and op.module == "grid_sample" and op.entry in ENTRIES
    return op.params[-1]


def _inputs(rng, types, x_shape, grid_shape, scale):
    x_dtype, grid_dtype = TYPES[types]
    return (rng.standard_normal(x_shape).astype(x_dtype),
            rng.uniform(-scale, scale, grid_shape).astype(grid_dtype))


@pytest.mark.parametrize("types", list(TYPES))
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", MODES)
def test_4d_every_mode_padding_and_type(libs, mode, padding, align_corners, types):
    rng = np.random.default_rng(len(mode) * 7 + len(padding) + align_corners)
    x, grid = _inputs(rng, types, (2, 3, 5, 6), (2, 4, 7, 2), 1.4)
    grid[0, 0, :4] = np.array([[-1, -1], [1, 1], [-1, 1], [0, 0]], grid.dtype)  # the corners, the centre
    _, ops = _sample(libs, x, grid, {"mode": mode, "padding_mode": padding, "align_corners": align_corners})
    a = _args(ops)
    assert (a.spatial, a.channels, a.points, list(a.in_dims)[:2]) == (2, 3, 28, [5, 6])
    # ORT's weights-first path: 2-D bilinear with zeros padding and align_corners=0 only
    assert a.weights_first == int(mode == "linear" and padding == "zeros" and not align_corners)


@pytest.mark.parametrize("scale", [20.0, 1e4, 1e8], ids=["2e1", "1e4", "1e8"])
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", MODES)
def test_grid_points_far_outside(libs, mode, padding, align_corners, scale):
    """Zeros reads nothing, border the edges, reflection folds tap indices turn after turn."""
    rng = np.random.default_rng(int(np.log10(scale)) + align_corners)
    for types in ("f32", "f16-grid-f32"):
        x, grid = _inputs(rng, types, (1, 2, 4, 5), (1, 5, 6, 2), scale)
        _sample(libs, x, grid, {"mode": mode, "padding_mode": padding, "align_corners": align_corners})


@pytest.mark.parametrize("types", ["f32", "f16", "f32-grid-f16"])
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_5d_trilinear_and_nearest(libs, mode, padding, align_corners, types):
    rng = np.random.default_rng(3 + align_corners)
    x, grid = _inputs(rng, types, (2, 2, 3, 4, 5), (2, 2, 3, 4, 3), 1.7)
    _, ops = _sample(libs, x, grid, {"mode": mode, "padding_mode": padding, "align_corners": align_corners},
                     opset=20)
    a = _args(ops)
    assert (a.spatial, list(a.in_dims), a.in_plane, a.weights_first) == (3, [3, 4, 5], 60, 0)


def _tie_grid(extent, align_corners):
    """Normalized coordinates that denormalize to k + 0.5 pixels (nearest's round-half-to-even
    ties), k from -3 extents to 3 extents."""
    k = np.arange(-3 * extent, 3 * extent + 1, dtype=np.float64) + 0.5
    n = k * 2 / max(extent - 1, 1) - 1 if align_corners else (k * 2 + 1) / extent - 1
    return n.astype(f32)


@pytest.mark.parametrize("extent", [1, 2, 3, 5])
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", MODES)
def test_rounding_ties_and_one_pixel_axes(libs, mode, padding, align_corners, extent):
    """Ties for nearest; a one-pixel axis with align_corners=1 reflects every tap to its pixel
    (ORT divides by zero there)."""
    n = _tie_grid(extent, align_corners)
    grid = np.stack(np.meshgrid(n, n[::-1]), -1)[None].astype(f32)
    x = np.random.default_rng(extent).standard_normal((1, 2, extent, extent)).astype(f32)
    _sample(libs, x, grid, {"mode": mode, "padding_mode": padding, "align_corners": align_corners})


@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", MODES)
def test_nan_and_infinite_grid_points(libs, mode, padding):
    """ORT converts these to int64 with undefined results; kernel and reference clamp alike."""
    x = np.random.default_rng(0).standard_normal((1, 2, 3, 4)).astype(f32)
    v = [np.nan, np.inf, -np.inf, 1e30, -1e30, 0.25]
    grid = np.array([[[[a, b] for a in v] for b in v]], f32)
    _sample(libs, x, grid, {"mode": mode, "padding_mode": padding}, bits=False)


def test_grid_stride_loop_covers_every_output(libs):
    # 2 x 5 x 24 x 26 outputs with at most 16 blocks of 256 threads (sm_count=1): each thread
    # takes two elements or more
    rng = np.random.default_rng(11)
    x, grid = _inputs(rng, "f32", (2, 5, 6, 7), (2, 24, 26, 2), 1.2)
    got, ops = _sample(libs, x, grid, {"mode": "cubic", "padding_mode": "border"})
    (op,) = ops
    assert op.grid[0] * op.block[0] < got.size
    assert not np.isnan(got).any()


def test_empty_output_and_empty_spatial_axis(libs, tmp_path_factory):
    x = np.ones((1, 2, 3, 4), f32)
    (got,), (want,), ops = run_on_host(libs, "::GridSample", [x, np.zeros((1, 0, 5, 2), f32)], {}, sm_count=1)
    assert ops == [] and got.shape == want.shape == (1, 2, 0, 5)
    # an X with an empty spatial axis: zeros padding fills zeros (the copy module's fill kernel)
    with_copy = {**libs, "copy": compile_module(tmp_path_factory.mktemp("copy"), "copy", 32)}
    empty = np.ones((1, 2, 0, 4), f32)
    (got,), (want,), ops = run_on_host(with_copy, "::GridSample", [empty, np.zeros((1, 3, 5, 2), f32)], {},
                                       sm_count=1)
    assert [o.module for o in ops] == ["copy"]
    np.testing.assert_array_equal(got, np.zeros((1, 2, 3, 5), f32))
    with pytest.raises(HipepError, match=r"padding_mode='border' has no pixel to take"):
        run_on_host(libs, "::GridSample", [empty, np.zeros((1, 3, 5, 2), f32)], {"padding_mode": "border"})


def test_bad_grid_shapes_are_refused_by_the_binding(libs):
    x = np.ones((2, 3, 4, 5), f32)
    for grid, pattern in [(np.zeros((3, 4, 5, 2), f32), r"its batch 3 differs from X's 2"),
                          (np.zeros((2, 4, 5, 3), f32), r"its last extent must be 2"),
                          (np.zeros((2, 4, 5, 6, 2), f32), r"\(rank 5\), expected \[2, H_out, W_out, 2\]")]:
        out = gk.Arg(0, (2, 3, 4, 5), np.dtype(f32))
        with pytest.raises(HipepError, match=pattern):
            gk.binding_for("::GridSample").bind([gk.Arg(0, x.shape, x.dtype), gk.Arg(0, grid.shape, grid.dtype)],
                                                [out], {}, gk.Target())


def test_args_mirror_the_kernel_struct():
    # kernels/grid_sample.hip's hipep_grid_sample_args: 7 int64 (n, channels, points, 3 extents,
    # in_plane) then 5 ints, padded to 8 bytes
    assert ctypes.sizeof(GridSampleArgs) == 80
    assert GridSampleArgs.spatial.offset == 56 and GridSampleArgs.weights_first.offset == 72


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("size", [(2, 3, 4, 5), (1, 1, 1, 1), (3, 2, 7, 1), (1, 2, 17, 33), (2, 3, 2, 3, 4),
                                  (1, 1, 1, 5, 1), (2, 1, 5, 7, 9), (0, 1, 2, 3)])
def test_affine_grid_follows_the_reference_bit_for_bit(libs, dtype, align_corners, size):
    r = len(size) - 2
    theta = np.random.default_rng(sum(size)).standard_normal((size[0], r, r + 1)).astype(dtype)
    (got,), (want,), ops = run_on_host(libs, "::AffineGrid", [theta, np.array(size, np.int64)],
                                       {"align_corners": align_corners}, sm_count=1)
    assert [o.entry for o in ops] == ([f"hipep_affine_grid_{'f32' if dtype == np.float32 else 'f64'}"]
                                      if size[0] else [])
    assert got.shape == want.shape == (size[0], *size[2:], r) and got.dtype == dtype
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_affine_grid_shapes_are_checked_by_the_binding(libs):
    theta = np.zeros((2, 2, 3), np.float32)
    with pytest.raises(Exception, match=r"theta of shape \[2, 2, 3\] for size \[2, 1, 2, 2, 2\]: expected \[2, 3, 4\]"):
        run_on_host(libs, "::AffineGrid", [theta, np.array([2, 1, 2, 2, 2], np.int64)], {})
    with pytest.raises(Exception, match=r"size\[3\] \(W=0\) must be positive"):
        run_on_host(libs, "::AffineGrid", [theta, np.array([2, 1, 2, 0], np.int64)], {})


def test_affine_grid_args_mirror_the_kernel_struct():
    # kernels/grid_sample.hip's hipep_affine_grid_args: 4 int64 then 2 ints
    assert ctypes.sizeof(AffineGridArgs) == 40 and AffineGridArgs.spatial.offset == 32


def test_gpu_claims_and_refusals():
    f32_, f16_ = "float32", "float16"
    for dtypes in ([f32_, f32_], [f16_, f16_], [f32_, f16_], [f16_, f32_]):
        for mode in ("bilinear", "bicubic", "linear", "nearest", "cubic", None):
            attrs = {} if mode is None else {"mode": mode}
            assert gk.has_kernel("::GridSample", attrs, dtypes, [(1, 3, 8, 8), (1, 4, 4, 2)])
    assert gk.has_kernel("::GridSample", {"mode": "nearest", "padding_mode": "reflection"}, [f32_, f32_],
                         [(1, 3, 4, 8, 8), (1, 2, 4, 4, 3)])
    assert gk.has_kernel("::GridSample", {}, [f32_, f32_], [None, None])  # rank decided at launch
    assert "float64" in gk.kernel_reason("::GridSample", {}, ["float64", "float64"])
    assert "the CPU device runs f64" in gk.kernel_reason("::GridSample", {}, [f32_, "float64"])
    assert "bfloat16" in gk.kernel_reason("::GridSample", {}, ["bfloat16", "bfloat16"])
    assert "2 or 3 spatial axes" in gk.kernel_reason("::GridSample", {}, [f32_, f32_], [(1, 3, 8), (1, 4, 1)])
    assert "2 or 3 spatial axes" in gk.kernel_reason("::GridSample", {}, [f32_, f32_], [(1,) * 6, (1,) * 6])
    assert "padding_mode='wrap'" in gk.kernel_reason("::GridSample", {"padding_mode": "wrap"}, [f32_, f32_])
    assert "grid_sample" in gk.modules()
    assert gk.has_kernel("::AffineGrid", {}, ["float32", "int64"], [(1, 2, 3), (4,)])
    assert gk.has_kernel("::AffineGrid", {"align_corners": 1}, ["float64", "int64"], [None, None])
    assert "float16" in gk.kernel_reason("::AffineGrid", {}, ["float16", "int64"])


@needs_nvrtc
def test_nvrtc_compiles_the_grid_sample_entry_points():
    from hipep.runtime import kernel_cache

    data, _ = kernel_cache.compile_cubin(kernel_cache.module_source("grid_sample"), "grid_sample", "sm_90",
                                         {"HIPEP_WARP_SIZE": 32}, use_cache=False)
    assert data[:4] == b"\x7fELF"
    for entry in ENTRIES:
        assert entry.encode() + b"\0" in data, entry
