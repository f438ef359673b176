"""GridSample (kernels/grid_sample.hip) end to end: one-node ONNX models through
hipep.InferenceSession(device="cuda"), every node claimed by the cuda device, compared with ONNX
Runtime's CPU EP over repeated runs (first run, bound replay, CUDA graph replay) bit for bit: the
kernel repeats ORT's f32 operations one for one (tests/unit/test_grid_sample_on_host.py runs the
same kernel on the CPU against the reference). The cases mirror the host ones: every mode, padding
mode and align_corners at each opset, X and grid each f32 or f16, 4-D and 5-D, grid points far
outside [-1, 1], rounding ties and one-pixel axes; AffineGrid alone (f32 and f64, 2-D and 3-D) and
feeding GridSample, bit for bit. ORT's weights-first 2-D bilinear path (linear,
zeros, align_corners=0) came with onnxruntime PR #27359 (2026); on releases before it those cases
are held to f32 rounding instead of bits."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

import hipep
from hipep.ops.grid_sample import weights_first
from hipep.runtime.cuda import cuda_status, get_device
from gpu_checks import assert_claimed_whole, check_on_cuda
from helpers import cpu_session, make_model, tensor
from ort_differences import FOLLOWED, ORT_VERSION

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)
device = get_device(0)

F32, F16 = TP.FLOAT, TP.FLOAT16
NP = {F32: np.float32, F16: np.float16}
MODES = {16: ("bilinear", "nearest", "bicubic"), 20: ("linear", "nearest", "cubic"), 22: ("linear", "nearest", "cubic")}
PADDINGS = ("zeros", "border", "reflection")
TYPES = {"f32": (F32, F32), "f16": (F16, F16), "f32-grid-f16": (F32, F16), "f16-grid-f32": (F16, F32)}


def grid_sample_model(opset, x_elem, grid_elem, rank=4, **attrs):
    """A one-node model with dynamic extents (the same plan serves every shape a test feeds)."""
    spatial = ["D", "H", "W"][5 - rank:]
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], **attrs)
    return make_model([node], [tensor("x", x_elem, ["N", "C"] + spatial),
                               tensor("grid", grid_elem, ["N"] + [f"{s}_out" for s in spatial] + ["R"])],
                      [tensor("y", x_elem, None)], opset=opset)


def check(model, x, grid, x_elem, exact=True):
    """Every node claimed; three runs, each equal to ORT's CPU EP bit for bit where `exact`, else
    to f32 rounding."""
    tol = dict(rtol=1e-6, atol=1e-6) if x_elem == F32 else dict(rtol=1e-3, atol=1e-3)
    check_on_cuda(model, {"x": x, "grid": grid}, x_elem, bits=exact, claimed=True, tol=tol)


def exact(mode, padding, align_corners, spatial=2) -> bool:
    canonical = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    return ORT_VERSION >= FOLLOWED or not weights_first(canonical, padding, bool(align_corners), spatial)


def inputs(rng, types, x_shape, grid_shape, scale):
    x_elem, grid_elem = TYPES[types]
    return (rng.standard_normal(x_shape).astype(NP[x_elem]),
            rng.uniform(-scale, scale, grid_shape).astype(NP[grid_elem]))


@pytest.mark.parametrize("types", list(TYPES))
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("opset,mode", [(v, m) for v, ms in MODES.items() for m in ms])
def test_4d_every_mode_padding_and_type(rng, opset, mode, padding, align_corners, types):
    x, grid = inputs(rng, types, (2, 3, 5, 6), (2, 4, 7, 2), 1.4)
    grid[0, 0, :4] = np.array([[-1, -1], [1, 1], [-1, 1], [0, 0]], grid.dtype)  # the corners, the centre
    model = grid_sample_model(opset, *TYPES[types], mode=mode, padding_mode=padding, align_corners=align_corners)
    check(model, x, grid, TYPES[types][0], exact(mode, padding, align_corners))


@pytest.mark.parametrize("scale", [20.0, 1e4, 1e8], ids=["2e1", "1e4", "1e8"])
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
def test_grid_points_far_outside(rng, mode, padding, align_corners, scale):
    for types in ("f32", "f16-grid-f32"):
        x, grid = inputs(rng, types, (1, 2, 4, 5), (1, 5, 6, 2), scale)
        model = grid_sample_model(22, *TYPES[types], mode=mode, padding_mode=padding, align_corners=align_corners)
        check(model, x, grid, TYPES[types][0], exact(mode, padding, align_corners))


@pytest.mark.parametrize("types", ["f32", "f16", "f32-grid-f16"])
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_5d_trilinear_and_nearest(rng, mode, padding, align_corners, types):
    x, grid = inputs(rng, types, (2, 2, 3, 4, 5), (2, 2, 3, 4, 3), 1.7)
    model = grid_sample_model(20, *TYPES[types], rank=5, mode=mode, padding_mode=padding,
                              align_corners=align_corners)
    check(model, x, grid, TYPES[types][0])


def tie_grid(extent, align_corners):
    """Normalized coordinates that denormalize to k + 0.5 pixels (nearest's round-half-to-even
    ties), k from -3 extents to 3 extents."""
    k = np.arange(-3 * extent, 3 * extent + 1, dtype=np.float64) + 0.5
    n = k * 2 / max(extent - 1, 1) - 1 if align_corners else (k * 2 + 1) / extent - 1
    return n.astype(np.float32)


@pytest.mark.parametrize("extent", [1, 2, 3, 5])
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
def test_rounding_ties_and_one_pixel_axes(rng, mode, padding, align_corners, extent):
    n = tie_grid(extent, align_corners)
    grid = np.stack(np.meshgrid(n, n[::-1]), -1)[None].astype(np.float32)
    x = rng.standard_normal((1, 2, extent, extent)).astype(np.float32)
    model = grid_sample_model(20, F32, F32, mode=mode, padding_mode=padding, align_corners=align_corners)
    check(model, x, grid, F32, exact(mode, padding, align_corners))


def test_large_image_grid_stride_loop(rng):
    """A spatial-transformer-sized launch: more outputs than threads."""
    x = rng.standard_normal((2, 32, 64, 80)).astype(np.float32)
    grid = rng.uniform(-1.1, 1.1, (2, 96, 120, 2)).astype(np.float32)
    for mode in ("linear", "cubic"):
        model = grid_sample_model(22, F32, F32, mode=mode, padding_mode="border", align_corners=1)
        check(model, x, grid, F32)


# ---- AffineGrid -----------------------------------------------------------------------------------

AFFINE_SIZES = {4: [(2, 3, 4, 5), (1, 1, 1, 1), (3, 2, 7, 1), (2, 3, 64, 96), (2, 3, 4, 5)],
                5: [(2, 3, 2, 3, 4), (1, 1, 1, 5, 1), (2, 1, 5, 7, 9), (2, 3, 2, 3, 4)]}


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("elem", [TP.FLOAT, TP.DOUBLE], ids=["f32", "f64"])
@pytest.mark.parametrize("rank", [4, 5])
def test_affine_grid(rng, rank, elem, align_corners):
    """The size is a graph input the host reads (a new size, a size seen before): each run's grid
    bit for bit against ORT's CPU EP."""
    r = rank - 2
    node = helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align_corners, name="affine")
    model = make_model([node], [tensor("theta", elem, ["N", r, r + 1]), tensor("size", TP.INT64, [rank])],
                       [tensor("grid", elem, None)], opset=20)
    assert_claimed_whole(model)
    sess, ref = hipep.InferenceSession(model, device="cuda"), cpu_session(model)
    dtype = np.float32 if elem == TP.FLOAT else np.float64
    for size in AFFINE_SIZES[rank]:
        feed = {"theta": rng.standard_normal((size[0], r, r + 1)).astype(dtype), "size": np.array(size, np.int64)}
        got, want = sess.run(None, feed)[0], ref.run(None, feed)[0]
        assert got.dtype == want.dtype and got.shape == want.shape == (size[0], *size[2:], r)
        np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


def test_a_spatial_transformer_samples_its_affine_grid():
    """AffineGrid of a constant size feeding GridSample, one subgraph on the device."""
    nodes = [helper.make_node("AffineGrid", ["theta", "size"], ["grid"], name="affine"),
             helper.make_node("GridSample", ["x", "grid"], ["y"], mode="linear", name="sample")]
    size = helper.make_tensor("size", TP.INT64, [4], [2, 3, 24, 32])
    model = make_model(nodes, [tensor("x", F32, [2, 3, 28, 36]), tensor("theta", F32, [2, 2, 3])],
                       [tensor("y", F32, None)], [size], opset=20)
    assert_claimed_whole(model)
    r = np.random.default_rng(6)
    feed = {"x": r.standard_normal((2, 3, 28, 36)).astype(np.float32),
            "theta": (np.eye(2, 3) + 0.2 * r.standard_normal((2, 2, 3))).astype(np.float32)}
    want = cpu_session(model).run(None, feed)[0]
    sess = hipep.InferenceSession(model, device="cuda")
    for _ in range(3):
        got = sess.run(None, feed)[0]
        assert got.shape == want.shape == (2, 3, 24, 32)
        if ORT_VERSION >= FOLLOWED:
            np.testing.assert_array_equal(got, want)
        else:  # the weights-first bilinear path (module doc): f32 rounding
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
