"""GridSample (opsets 16, 20, 22) on hipep's CPU device against ONNX Runtime's CPU EP, its claim
(what is refused, and why), its shape rule, and its errors for bad input.

Two kinds of comparison:
  * CASES (tests/ops_vision_harness.py's CaseTable): the registry's reference on a one-node model
    against ORT, and the shape rule's run-time contract and partial shapes; they also count as
    the op's ORT comparison for test_ops_reference.py's coverage guard;
  * sessions: hipep.InferenceSession(model, device="cpu") (the whole node claimed by hipep's CPU
    device) against an ORT CPU EP session, bit for bit, over every mode, padding mode,
    align_corners, opset and element type pair ORT runs, 4-D and 5-D, grids far outside [-1, 1]
    and coordinates on exact rounding ties.
The reference repeats ORT 1.32's operations one for one (hipep.ops.grid_sample says which), so
the sessions agree to the bit. ORT's weights-first 2-D bilinear path (linear, zeros padding,
align_corners=0) came with onnxruntime PR #27359 in 2026; releases before it sum those four taps
in the generic order, so there, older releases are held to f32 rounding (a few ulps) instead.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

import hipep
from hipep.errors import HipepError
from hipep.graph import GraphView, elem_type_of
from hipep.ops import check_node, lookup
from hipep.ops.grid_sample import weights_first

from helpers import cpu_session, make_model, tensor
from ops_vision_harness import CaseTable, case_tests, random_arrays
from ort_differences import FOLLOWED, ORT_VERSION

f16, f32, f64 = np.float16, np.float32, np.float64
R = random_arrays(20240905)
MODES = {16: ("bilinear", "nearest", "bicubic"), 20: ("linear", "nearest", "cubic"), 22: ("linear", "nearest", "cubic")}
PADDINGS = ("zeros", "border", "reflection")
# (X, grid) element types ORT's CPU EP runs: f32 and f64 kernels of one type, f16 cast to f32
# around the f32 one (for X and the grid alike), f64 from opset 20.
TYPE_PAIRS = {"f32": (f32, f32), "f16": (f16, f16), "f32-grid-f16": (f32, f16), "f16-grid-f32": (f16, f32),
              "f64": (f64, f64)}


def _canonical(mode):
    return {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)


# ---- the reference on one-node models (CaseTable) ----------------------------------------------

CASES = CaseTable(first=0)
case = CASES.add
for _v, _modes in MODES.items():
    for _m in _modes:
        for _p in PADDINGS:
            for _ac in (0, 1):
                case("GridSample", _v, [R(2, 3, 5, 6), R(2, 4, 3, 2, lo=-1.3, hi=1.3)],
                     {"mode": _m, "padding_mode": _p, "align_corners": _ac}, id=f"GridSample-{_v}-{_m}-{_p}-ac{_ac}")
case("GridSample", 16, [R(1, 2, 4, 4), R(1, 3, 3, 2)], None, id="GridSample-16-default-attributes")
case("GridSample", 20, [R(1, 2, 4, 4), R(1, 3, 3, 2)], None, id="GridSample-20-default-attributes")
case("GridSample", 20, [R(1, 2, 3, 4, 5), R(1, 2, 3, 4, 3, lo=-1.2, hi=1.2)], {"mode": "linear"},
     id="GridSample-20-trilinear")
case("GridSample", 22, [R(2, 2, 3, 4, 2), R(2, 3, 2, 2, 3, lo=-1.5, hi=1.5)],
     {"mode": "nearest", "padding_mode": "reflection", "align_corners": 1}, id="GridSample-22-5d-nearest")
case("GridSample", 20, [R(1, 3, 4, 5, dtype=f16), R(1, 2, 6, 2, dtype=f16)], {"mode": "cubic"}, id="GridSample-20-f16")
case("GridSample", 22, [R(1, 3, 4, 5, dtype=f64), R(1, 2, 6, 2, dtype=f64, lo=-3, hi=3)],
     {"mode": "cubic", "padding_mode": "reflection"}, id="GridSample-22-f64")
case("GridSample", 22, [R(2, 3, 4, 5), R(2, 0, 6, 2)], None, id="GridSample-22-empty-output")

test_matches_ort, test_rule_matches_reference, test_partial_shapes_never_invent_extents = case_tests(CASES)


# ---- sessions: hipep's CPU device against ORT's CPU EP -------------------------------------------

def _model(opset, x_dtype, grid_dtype, rank=4, unranked_grid=False, **attrs):
    """A one-node GridSample model whose extents are all dynamic (ORT's own shape checks then leave
    bad shapes to the EP; an unranked grid, any rank too)."""
    spatial = ["D", "H", "W"][3 - (rank - 2):]
    x = tensor("x", elem_type_of(np.dtype(x_dtype)), ["N", "C"] + spatial)
    g = tensor("grid", elem_type_of(np.dtype(grid_dtype)),
               None if unranked_grid else ["N"] + [f"{s}_out" for s in spatial] + ["R"])
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], name="sampler", **attrs)
    return make_model([node], [x, g], [tensor("y", elem_type_of(np.dtype(x_dtype)), None)], opset=opset)


def _check_session(model, x, grid, exact=True):
    """hipep's CPU device claims the whole model and gives ORT's CPU EP's result: bit for bit
    where `exact`, else within f32 rounding."""
    report = hipep.explain(model, device="cpu")
    assert not report.rejections, [(r.node.name, r.reason) for r in report.rejections]
    feeds = {"x": x, "grid": grid}
    (want,) = cpu_session(model).run(None, feeds)
    (got,) = hipep.InferenceSession(model, device="cpu").run(None, feeds)
    assert got.dtype == want.dtype and got.shape == want.shape
    if exact:
        np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))
    else:  # a last-bit f32 difference, which may move an f16 result by one f16 step
        tol = 1e-3 if got.dtype == f16 else 1e-6
        np.testing.assert_allclose(got.astype(f64), want.astype(f64), rtol=tol, atol=tol)
    return got


def _exact(mode, padding, align_corners, spatial) -> bool:
    """Bit for bit, except ORT's weights-first path on releases that predate it (module doc)."""
    return ORT_VERSION >= FOLLOWED or not weights_first(_canonical(mode), padding, bool(align_corners), spatial)


def _inputs(rng, x_dtype, grid_dtype, x_shape, grid_shape, scale=1.4):
    x = rng.standard_normal(x_shape).astype(x_dtype)
    grid = rng.uniform(-scale, scale, grid_shape).astype(grid_dtype)
    return x, grid


@pytest.mark.parametrize("types", list(TYPE_PAIRS))
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("opset,mode", [(v, m) for v, ms in MODES.items() for m in ms])
def test_session_4d_matches_ort(rng, opset, mode, padding, align_corners, types):
    x_dtype, grid_dtype = TYPE_PAIRS[types]
    if opset == 16 and x_dtype == f64:
        pytest.skip("ORT has no f64 GridSample-16 kernel (hipep refuses it: test_claims)")
    x, grid = _inputs(rng, x_dtype, grid_dtype, (2, 3, 5, 7), (2, 4, 6, 2))
    grid[0, 0, :4] = [[-1, -1], [1, 1], [-1, 1], [0, 0]]  # the corners and the centre
    model = _model(opset, x_dtype, grid_dtype, mode=mode, padding_mode=padding, align_corners=align_corners)
    _check_session(model, x, grid, _exact(mode, padding, align_corners, 2))


@pytest.mark.parametrize("types", ["f32", "f16", "f64"])
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", ["linear", "nearest"])
@pytest.mark.parametrize("opset", [20, 22])
def test_session_5d_matches_ort(rng, opset, mode, padding, align_corners, types):
    x_dtype, grid_dtype = TYPE_PAIRS[types]
    x, grid = _inputs(rng, x_dtype, grid_dtype, (2, 2, 3, 4, 5), (2, 2, 3, 4, 3), scale=1.6)
    model = _model(opset, x_dtype, grid_dtype, rank=5, mode=mode, padding_mode=padding, align_corners=align_corners)
    _check_session(model, x, grid)


@pytest.mark.parametrize("scale", [10.0, 1e3, 1e6], ids=["1e1", "1e3", "1e6"])
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
def test_session_grid_far_outside(rng, mode, padding, align_corners, scale):
    """Points many image widths away: zeros reads nothing, border the edge, reflection folds the
    tap indices back and forth (ORT's GsReflect, turn after turn)."""
    x, grid = _inputs(rng, f32, f32, (1, 2, 4, 5), (1, 5, 6, 2), scale=scale)
    model = _model(22, f32, f32, mode=mode, padding_mode=padding, align_corners=align_corners)
    _check_session(model, x, grid, _exact(mode, padding, align_corners, 2))


def _tie_grid(extent, align_corners):
    """Normalized coordinates that denormalize to k + 0.5 pixels, k over -3 extents .. 3 extents:
    nearest rounds them half to even (std::nearbyint), linear and cubic sit between two taps."""
    k = np.arange(-3 * extent, 3 * extent + 1, dtype=f64) + 0.5
    if align_corners:
        n = k * 2 / max(extent - 1, 1) - 1
    else:
        n = (k * 2 + 1) / extent - 1
    return n.astype(f32)


@pytest.mark.parametrize("extent", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_session_rounding_ties_and_tiny_images(rng, mode, padding, align_corners, extent):
    n = _tie_grid(extent, align_corners)
    grid = np.stack(np.meshgrid(n, n[::-1]), -1)[None].astype(f32)
    x = rng.standard_normal((1, 2, extent, extent)).astype(f32)
    model = _model(20, f32, f32, mode=mode, padding_mode=padding, align_corners=align_corners)
    _check_session(model, x, grid, _exact(mode, padding, align_corners, 2))


def test_session_default_attributes_per_opset(rng):
    """Without attributes GridSample-16 is bilinear (its name then), 20 and 22 linear: the same."""
    x, grid = _inputs(rng, f32, f32, (1, 2, 4, 4), (1, 3, 3, 2))
    outs = [_check_session(_model(v, f32, f32), x, grid) for v in (16, 20, 22)]
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])


# ---- what the reference does where ORT's arithmetic is undefined ---------------------------------

def _reference(x, grid, **attrs):
    op = lookup("", "GridSample")
    (y,) = op.reference([x, grid], {"mode": None, "padding_mode": "zeros", "align_corners": 0, **attrs})
    return y


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
def test_one_pixel_axis_reflects_to_its_pixel(mode):
    # align_corners=1 on a one-pixel axis: ORT's GsReflect divides by a zero range (undefined);
    # every tap is that pixel, as with border padding (a one-pixel image: both axes so).
    x = R(1, 2, 1, 1)
    grid = R(1, 3, 4, 2, lo=-4, hi=4)
    got = _reference(x, grid, mode=mode, padding_mode="reflection", align_corners=1)
    want = _reference(x, grid, mode=mode, padding_mode="border", align_corners=1)
    np.testing.assert_array_equal(got, want)


def test_nan_and_infinite_grid_points_are_defined():
    # ORT converts such coordinates to int64 with undefined results; the reference clamps first.
    x = R(1, 1, 3, 3)
    grid = np.array([[[[np.nan, 0.0], [np.inf, 0.0], [-np.inf, 0.0], [1e30, -1e30]]]], f32)
    for mode in ("linear", "nearest", "cubic"):
        for padding in PADDINGS:
            y = _reference(x, grid, mode=mode, padding_mode=padding)  # no error, no out-of-range read
            assert y.shape == (1, 1, 1, 4)
    # nearest reads nothing outside with zeros padding; so does ORT's weights-first bilinear path
    # (no tap inside: +0, whatever the infinite weights)
    for mode in ("nearest", "linear"):
        y = _reference(x, grid, mode=mode, padding_mode="zeros")
        np.testing.assert_array_equal(y[0, 0, 0, 1:], [0, 0, 0])


def test_empty_spatial_axis_of_x():
    x = np.zeros((1, 2, 0, 3), f32)
    grid = R(1, 2, 2, 2)
    np.testing.assert_array_equal(_reference(x, grid), np.zeros((1, 2, 2, 2), f32))
    with pytest.raises(HipepError, match=r"X has shape \[1, 2, 0, 3\].*padding_mode='border' has no pixel"):
        _reference(x, grid, padding_mode="border")


# ---- bad input: a HipepError naming the node and both shapes --------------------------------------

@pytest.mark.parametrize("grid_shape,pattern", [
    ((3, 4, 5, 2), r"grid has shape \[3, 4, 5, 2\], its batch 3 differs from X's 2 \(X has shape \[2, 3, 4, 5\]\)"),
    ((2, 4, 5, 3), r"grid has shape \[2, 4, 5, 3\], its last extent must be 2 \(X of shape \[2, 3, 4, 5\]"),
    ((2, 4, 5, 6, 2), r"grid has shape \[2, 4, 5, 6, 2\] \(rank 5\), expected \[2, H_out, W_out, 2\] \(rank 4\)"),
])
def test_bad_grid_shape_names_the_node_and_shapes(grid_shape, pattern):
    model = _model(20, f32, f32, unranked_grid=True)  # ORT passes a grid of any shape to hipep
    sess = hipep.InferenceSession(model, device="cpu")
    x, grid = R(2, 3, 4, 5), R(*grid_shape)
    with pytest.raises(Exception, match=r"node 'sampler' \(GridSample\): GridSample: " + pattern):
        sess.run(None, {"x": x, "grid": grid})
    with pytest.raises(HipepError, match=pattern):  # the reference alone
        _reference(x, grid)


# ---- the claim -----------------------------------------------------------------------------------

def _claim(opset, x, grid, **attrs):
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], **attrs)
    g_in = [helper.make_tensor_value_info("x", *x), helper.make_tensor_value_info("grid", *grid)]
    g_out = [helper.make_tensor_value_info("y", x[0], None)]
    model = helper.make_model(helper.make_graph([node], "g", g_in, g_out),
                              opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    graph = GraphView.from_onnx(model, infer_shapes=False)
    return check_node(graph.nodes[0], graph)


F, H, D = TP.FLOAT, TP.FLOAT16, TP.DOUBLE
X4, G4 = [1, 3, 8, 8], [1, 4, 4, 2]
X5, G5 = [1, 3, 4, 8, 8], [1, 2, 4, 4, 3]
REFUSED = [
    (16, (F, X4), (F, G4), {"mode": "linear"}, r"mode='linear' is not one of bilinear, nearest, bicubic \(GridSample-16"),
    (20, (F, X4), (F, G4), {"mode": "bicubic"}, r"mode='bicubic' is not one of linear, nearest, cubic \(GridSample-20"),
    (22, (F, X4), (F, G4), {"mode": "bilinear"}, r"mode='bilinear' is not one of linear, nearest, cubic \(GridSample-22"),
    (20, (F, X4), (F, G4), {"padding_mode": "wrap"}, r"padding_mode='wrap' is not one of zeros, border, reflection"),
    (16, (F, X5), (F, G5), {}, r"X has rank 5; GridSample-16 takes 4-D"),
    (20, (F, X5), (F, G5), {"mode": "cubic"}, r"mode='cubic' over 3 spatial dims: ONNX Runtime has no kernel"),
    (20, (F, [1, 3, 8]), (F, [1, 4, 1]), {}, r"GridSample over 1 spatial dims .*kernels for 2 and 3 spatial dims only"),
    (22, (F, [1, 1, 2, 2, 2, 2]), (F, [1, 2, 2, 2, 2, 4]), {"mode": "nearest"}, r"over 4 spatial dims"),
    (16, (D, X4), (D, G4), {}, r"X is f64: ONNX Runtime's CPU EP has no f64 GridSample-16 kernel"),
    (20, (D, X4), (F, G4), {}, r"X is f64 and grid f32: .*none mixing f64 with another type"),
    (22, (H, X4), (D, G4), {}, r"X is f16 and grid f64"),
    (22, (TP.BFLOAT16, X4), (TP.BFLOAT16, G4), {}, r"element type bf16; supported: f16, f32, f64"),
    (20, (TP.INT32, X4), (F, G4), {"mode": "nearest"}, r"element type i32; supported: f16, f32, f64"),
]


@pytest.mark.parametrize("opset,x,grid,attrs,pattern", REFUSED, ids=lambda v: str(v) if isinstance(v, int) else None)
def test_claim_refuses(opset, x, grid, attrs, pattern):
    why = _claim(opset, x, grid, **attrs)
    assert why is not None and re.search(pattern, why), why


@pytest.mark.parametrize("opset,x,grid,attrs", [
    (16, (F, X4), (F, G4), {"mode": "bicubic", "padding_mode": "reflection", "align_corners": 1}),
    (20, (H, X4), (F, G4), {"mode": "cubic"}),
    (20, (F, X4), (H, G4), {"mode": "nearest", "padding_mode": "border"}),
    (22, (D, X4), (D, G4), {"mode": "linear"}),
    (22, (F, X5), (F, G5), {"mode": "linear", "padding_mode": "reflection"}),
    (20, (H, X5), (H, G5), {"mode": "nearest"}),
    (22, (F, None), (F, None), {"mode": "cubic"}),  # unranked: decided at run time by the shapes
])
def test_claim_accepts(opset, x, grid, attrs):
    assert _claim(opset, x, grid, **attrs) is None
