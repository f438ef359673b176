"""Resize and Upsample, and the block rearrangements DepthToSpace, SpaceToDepth and Col2Im, against
ONNX Runtime's CPU EP, and their shape rules (tests/ops_vision_harness.py says how)."""
from __future__ import annotations

import numpy as np

from ops_vision_harness import (A, CaseTable, F16, b, case_tests, f16, f32, f64, i32, i64, i8, random_arrays,
                                reference_of, u8)

R = random_arrays()
CASES = CaseTable(first=83)  # numbered past test_ops_vision_conv_pool.py's cases
case = CASES.add


# ---- Resize / Upsample -----------------------------------------------------------------------
_img = R(1, 2, 5, 7)
_S = lambda *v: A(v, f32)  # noqa: E731
_Z = lambda *v: A(v, i64)  # noqa: E731
_NONE_F = A([], f32)
for _mode in ("nearest", "linear"):
    case("Resize", 10, [_img, _S(1, 1, 2, 1.5)], {"mode": _mode}, id=f"Resize-10-{_mode}-up")
    case("Resize", 10, [_img, _S(1, 1, 0.6, 0.5)], {"mode": _mode}, id=f"Resize-10-{_mode}-down")
    case("Upsample", 9, [_img, _S(1, 1, 2, 1.5)], {"mode": _mode}, id=f"Upsample-9-{_mode}")
    case("Upsample", 7, [_img], {"mode": _mode, "scales": [1.0, 1.0, 1.7, 3.0]}, id=f"Upsample-7-{_mode}")
case("Upsample", 9, [R(2, 3, 4, dtype=i32, lo=-99, hi=99), _S(1, 2, 1.5)], id="Upsample-i32")
case("Resize", 11, [_img, _NONE_F, _S(1, 1, 1.6, 0.7)], {"mode": "nearest"})
case("Resize", 11, [_img, _NONE_F, _NONE_F, _Z(1, 2, 8, 3)], {"mode": "linear"}, id="Resize-11-sizes")
case("Resize", 11, [_img, _NONE_F, _S(1, 1, 1.6, 2.2)], {"coordinate_transformation_mode": "tf_half_pixel_for_nn"},
     id="Resize-11-tf-half-pixel-for-nn")
case("Resize", 11, [_img, _S(0, 0, 0.2, -0.1, 1, 1, 0.9, 1.3), _S(1, 1, 1.4, 1.5)],
     {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": -3.0},
     id="Resize-11-crop-linear")
_COORDS = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")
for _coord in _COORDS:
    # align_corners with scales that shrink is not claimed (ORT and the spec differ): use sizes there
    _nearest_in = [_img, None, None, _Z(1, 2, 6, 3)] if _coord == "align_corners" else [_img, None, _S(1, 1, 1.6, 0.6)]
    _cubic_in = [_img, None, None, _Z(1, 2, 6, 6)] if _coord == "align_corners" else [_img, None, _S(1, 1, 1.5, 1.3)]
    for _nm in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
        case("Resize", 13, _nearest_in,
             {"coordinate_transformation_mode": _coord, "nearest_mode": _nm}, id=f"Resize-nearest-{_coord}-{_nm}")
    case("Resize", 13, [_img, None, None, _Z(1, 2, 8, 3)],
         {"mode": "linear", "coordinate_transformation_mode": _coord},
         id=f"Resize-linear-{_coord}")
    case("Resize", 13, [R(2, 9, lo=-5, hi=5), None, None, _Z(7, 4)],
         {"mode": "linear", "coordinate_transformation_mode": _coord},
         id=f"Resize-linear-2d-down-{_coord}")
    case("Resize", 13, _cubic_in, {"mode": "cubic", "coordinate_transformation_mode": _coord},
         id=f"Resize-cubic-{_coord}")
case("Resize", 13, [_img, None, None, _Z(1, 2, 9, 11)], {"mode": "cubic", "cubic_coeff_a": -0.5,
                                                           "exclude_outside": 1}, id="Resize-cubic-exclude-outside")
case("Resize", 13, [R(6, 9), None, _S(1.5, 1.4)],
     {"mode": "cubic", "coordinate_transformation_mode": "pytorch_half_pixel"},
     id="Resize-cubic-2d")
case("Resize", 13, [_img, _S(0, 0, 0.1, 0.2, 1, 1, 0.8, 1.2), _S(1, 1, 1.5, 1.5)],
     {"mode": "cubic", "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 9.0},
     id="Resize-cubic-crop")
case("Resize", 13, [_img, _S(0, 0, -0.2, 0.3, 1, 1, 0.7, 1.4), None, _Z(1, 2, 4, 6)],
     {"mode": "nearest", "coordinate_transformation_mode": "tf_crop_and_resize"}, id="Resize-nearest-crop")
case("Resize", 13, [R(2, 3, 4, 4, 3), None, _S(1, 1, 2, 1.5, 2)], {"mode": "linear"}, id="Resize-trilinear")
case("Resize", 13, [R(3, 5, 4), None, _S(1.4, 2, 0.5)], id="Resize-nearest-3d")
case("Resize", 13, [R(1, 5, 4, 3), None, _S(1, 2.5, 1.5, 1)], {"mode": "linear"}, id="Resize-linear-nhwc")
case("Resize", 13, [R(1, 2, 4, 5, dtype=u8, lo=0, hi=255), None, _S(1, 1, 1.5, 2.2)], id="Resize-u8")
case("Resize", 13, [R(1, 2, 4, 5, dtype=i8, lo=-128, hi=127), None, None, _Z(1, 2, 3, 7)],
     {"nearest_mode": "floor"}, id="Resize-i8")
case("Resize", 13, [R(2, 3, 4, dtype=i32, lo=-1000, hi=1000), None, _S(1.5, 1, 0.5)], id="Resize-i32")
case("Resize", 13, [R(1, 2, 4, 5, dtype=f16), None, _S(1, 1, 1.5, 2.2)], {"mode": "linear"}, via=F16,
     tol=(4e-3, 1e-3), id="Resize-f16")
case("Resize", 13, [A([[[[10, 20]]]], f32), None, _S(1, 1, 1, 1.34)],
     {"coordinate_transformation_mode": "half_pixel"},
     id="Resize-nearest-tie")
for _v in (18, 19):
    case("Resize", _v, [_img, None, _S(1.5, 0.6)], {"axes": [3, 2], "mode": "linear"}, id=f"Resize-{_v}-axes")
    case("Resize", _v, [_img, None, None, _Z(8, 8)], {"axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"},
         id=f"Resize-{_v}-not-larger")
    case("Resize", _v, [_img, None, None, _Z(4, 3)], {"axes": [3, 2], "keep_aspect_ratio_policy": "not_smaller",
                                                      "mode": "linear"}, id=f"Resize-{_v}-not-smaller")
case("Resize", 18, [_img, None, _S(1, 1, 1.5, 1.2)], {"mode": "cubic", "antialias": 0}, id="Resize-18-cubic")
case("Resize", 19, [_img, None, _S(1, 1, 1.7, 0.6)],
     {"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"},
     id="Resize-19-half-pixel-symmetric")
# (Scales chosen so no coordinate lands within an ulp of a rounding tie: ORT's nearest and linear
# paths disagree in the last bit there.)
case("Resize", 19, [_img, None, _S(1, 1, 1.7, 0.7)], {"coordinate_transformation_mode": "half_pixel_symmetric"},
     id="Resize-19-nearest-symmetric")

# ---- DepthToSpace / SpaceToDepth / Col2Im ----------------------------------------------------
case("DepthToSpace", 1, [R(2, 8, 2, 3)], {"blocksize": 2})
for _v in (11, 13):
    for _m in ("DCR", "CRD"):
        case("DepthToSpace", _v, [R(1, 18, 2, 3)], {"blocksize": 3, "mode": _m}, id=f"DepthToSpace-{_v}-{_m}")
case("DepthToSpace", 13, [R(1, 8, 2, 2, dtype=u8, lo=0, hi=255)], {"blocksize": 2, "mode": "CRD"},
     id="DepthToSpace-u8")
case("DepthToSpace", 13, [R(1, 8, 2, 2, dtype=f16)], {"blocksize": 2}, via=F16, id="DepthToSpace-f16")
case("DepthToSpace", 13, [R(1, 4, 2, 2, dtype=i64, lo=-9, hi=9)], {"blocksize": 2}, via={i64: f64},
     id="DepthToSpace-i64")
for _v in (1, 13):
    case("SpaceToDepth", _v, [R(2, 3, 4, 6)], {"blocksize": 2})
for _m in ("DCR", "CRD"):  # opset 28: SpaceToDepth's mode (DepthToSpace's orders undone)
    case("SpaceToDepth", 28, [R(2, 3, 4, 6)], {"blocksize": 2, "mode": _m}, id=f"SpaceToDepth-28-{_m}")
    case("DepthToSpace", 28, [R(1, 18, 2, 3)], {"blocksize": 3, "mode": _m}, id=f"DepthToSpace-28-{_m}")
case("SpaceToDepth", 13, [R(1, 2, 6, 3, dtype=i8, lo=-9, hi=9)], {"blocksize": 3}, id="SpaceToDepth-i8")
case("SpaceToDepth", 13, [R(1, 2, 2, 4, dtype=b)], {"blocksize": 2}, via={b: u8}, id="SpaceToDepth-bool")
case("Col2Im", 18, [R(2, 3 * 4, 12), _Z(4, 5), _Z(2, 2)])
case("Col2Im", 18, [R(1, 2 * 6, 9), _Z(5, 6), _Z(2, 3)],
     {"strides": [2, 1], "pads": [1, 0, 0, 1], "dilations": [1, 2]},
     id="Col2Im-strided")
case("Col2Im", 18, [R(1, 2 * 4, 9, dtype=f16), _Z(4, 4), _Z(2, 2)], via=F16, id="Col2Im-f16")


# The cases against ORT's CPU EP, and the shape rules' run-time contract and partial shapes.
test_matches_ort, test_rule_matches_reference, test_partial_shapes_never_invent_extents = case_tests(CASES)


# ---- spec behaviour where ORT deviates ---------------------------------------------------------

def test_resize_negative_axes_follow_the_spec():
    # ORT 1.31 indexes its keep_aspect_ratio_policy with the raw (negative) axes and ignores them;
    # ONNX normalizes them: sizes (4, 3) for axes (-1, -2) of a [1, 2, 5, 7] input, not_smaller.
    x = R(1, 2, 5, 7)
    resize = reference_of("Resize")
    (got,) = resize([x, None, None, A([4, 3], i64)], axes=[-1, -2], keep_aspect_ratio_policy="not_smaller")
    (want,) = resize([x, None, None, A([4, 3], i64)], axes=[3, 2], keep_aspect_ratio_policy="not_smaller")
    assert got.shape == (1, 2, 3, 4)
    np.testing.assert_array_equal(got, want)


def test_linear_resize_of_any_rank_is_separable():
    # ORT's CPU EP runs linear resize on 2- to 5-D inputs only; the reference does any rank.
    x = R(2, 3, 4)
    resize = reference_of("Resize")
    (got,) = resize([x, None, A([2.0, 1.0, 1.0], f32)], mode="linear")
    (rows,) = resize([x.reshape(2, 12), None, A([2.0, 1.0], f32)], mode="linear")
    np.testing.assert_allclose(got, rows.reshape(4, 3, 4), rtol=1e-6)
