"""Conv, ConvInteger, QLinearConv, ConvTranspose and the pools (max, average, Lp, global) against ONNX
Runtime's CPU EP, and their shape rules (tests/ops_vision_harness.py says how)."""
from __future__ import annotations

import numpy as np

from hipep.ops import lookup
from hipep.ops.registry import OUTPUT_COUNT

from ops_vision_harness import (A, CONV_TOL, CaseTable, F16, case_tests, f16, f32, i8, random_arrays, u8)

R = random_arrays()
CASES = CaseTable(first=0)
case = CASES.add


# ---- Conv ------------------------------------------------------------------------------------
for _v in (1, 11, 22):
    case("Conv", _v, [R(2, 3, 7, 8), R(4, 3, 3, 3), R(4)], tol=CONV_TOL)
case("Conv", 22, [R(1, 4, 9, 9), R(6, 2, 3, 3)], {"group": 2, "strides": [2, 1], "pads": [1, 0, 2, 1]},
     tol=CONV_TOL, id="Conv-group-strides-pads")
case("Conv", 22, [R(1, 6, 8, 8), R(6, 1, 3, 3), R(6)], {"group": 6, "pads": [1, 1, 1, 1]}, tol=CONV_TOL,
     id="Conv-depthwise")
case("Conv", 22, [R(1, 2, 10, 9), R(3, 2, 3, 2)], {"dilations": [2, 3]}, tol=CONV_TOL, id="Conv-dilations")
for _ap in ("SAME_UPPER", "SAME_LOWER", "VALID"):
    case("Conv", 11, [R(1, 2, 7, 6), R(3, 2, 2, 3)], {"auto_pad": _ap, "strides": [2, 2]}, tol=CONV_TOL,
         id=f"Conv-{_ap}")
case("Conv", 11, [R(2, 3, 11), R(4, 3, 3), R(4)], {"strides": [2], "pads": [1, 2]}, tol=CONV_TOL, id="Conv-1d")
case("Conv", 11, [R(1, 2, 5, 4, 6), R(3, 2, 2, 3, 2)], {"pads": [1, 0, 1, 0, 1, 1]}, tol=CONV_TOL, id="Conv-3d")
case("Conv", 22, [R(1, 3, 6, 6, dtype=f16), R(2, 3, 3, 3, dtype=f16), R(2, dtype=f16)], {"pads": [1, 1, 1, 1]},
     tol=(4e-3, 2e-3), via=F16, id="Conv-f16")
case("Conv", 11, [R(1, 3, 5, 5), R(2, 3, 3, 3)], {"kernel_shape": [3, 3]}, tol=CONV_TOL, id="Conv-kernel-attr")

# ---- ConvTranspose ---------------------------------------------------------------------------
for _v in (1, 11, 22):
    case("ConvTranspose", _v, [R(2, 3, 4, 5), R(3, 2, 3, 3), R(2)], tol=CONV_TOL)
case("ConvTranspose", 22, [R(1, 4, 4, 3), R(4, 3, 3, 2)], {"group": 2, "strides": [2, 3], "pads": [1, 0, 0, 1]},
     tol=CONV_TOL, id="ConvTranspose-group-strides")
case("ConvTranspose", 22, [R(1, 2, 3, 4), R(2, 2, 3, 3)], {"strides": [2, 2], "output_padding": [1, 0]},
     tol=CONV_TOL, id="ConvTranspose-output-padding")
case("ConvTranspose", 22, [R(1, 2, 3, 3), R(2, 2, 3, 3)], {"strides": [2, 2], "dilations": [2, 1]},
     tol=CONV_TOL, id="ConvTranspose-dilations")
for _ap in ("NOTSET", "SAME_UPPER", "SAME_LOWER"):
    case("ConvTranspose", 11, [R(1, 2, 3, 4), R(2, 3, 3, 3)],
         {"strides": [2, 2], "output_shape": [6, 8], "auto_pad": _ap}, tol=CONV_TOL,
         id=f"ConvTranspose-output-shape-{_ap}")
    if _ap != "NOTSET":
        case("ConvTranspose", 11, [R(1, 2, 3, 4), R(2, 3, 3, 2)], {"strides": [2, 3], "auto_pad": _ap},
             tol=CONV_TOL, id=f"ConvTranspose-{_ap}")
case("ConvTranspose", 11, [R(1, 2, 5), R(2, 3, 4)], {"strides": [3], "pads": [1, 2]}, tol=CONV_TOL,
     id="ConvTranspose-1d")
case("ConvTranspose", 11, [R(1, 1, 3, 3), R(1, 2, 3, 3), R(2)], {"strides": [3, 2], "output_shape": [10, 8]},
     tol=CONV_TOL, id="ConvTranspose-output-shape-longer")
case("ConvTranspose", 22, [R(1, 2, 3, 3, dtype=f16), R(2, 2, 2, 2, dtype=f16)], {"strides": [2, 2]},
     tol=(4e-3, 2e-3), via=F16, id="ConvTranspose-f16")

# ---- pools -----------------------------------------------------------------------------------
_x5 = R(2, 3, 5, 5)
_x6 = R(1, 2, 6, 7)
for _v in (1, 8, 10, 11, 12, 22):
    case("MaxPool", _v, [_x5], {"kernel_shape": [2, 2], "strides": [2, 2]})
case("MaxPool", 12, [_x6], {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1], "ceil_mode": 1},
     id="MaxPool-ceil")
case("MaxPool", 12, [R(1, 1, 5, 5)], {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                       "ceil_mode": 1}, id="MaxPool-ceil-drops-last")
case("MaxPool", 12, [_x6], {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 1, 1, 1]},
     id="MaxPool-dilations")
for _ap in ("SAME_UPPER", "SAME_LOWER", "VALID"):
    case("MaxPool", 11, [_x5], {"kernel_shape": [2, 3], "strides": [2, 1], "auto_pad": _ap}, id=f"MaxPool-{_ap}")
case("MaxPool", 12, [_x6], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, n_out=2,
     id="MaxPool-indices")
case("MaxPool", 12, [_x6], {"kernel_shape": [2, 3], "strides": [2, 1], "storage_order": 1}, n_out=2,
     id="MaxPool-indices-colmajor")
case("MaxPool", 8, [R(2, 2, 4, 3, 5)], {"kernel_shape": [2, 2, 2]}, n_out=2, id="MaxPool-3d-indices")
case("MaxPool", 12, [R(2, 3, 9)], {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}, id="MaxPool-1d")
case("MaxPool", 12, [A([[[[1, 5, 5], [5, 2, 5]]]], f32)], {"kernel_shape": [2, 2]}, n_out=2, id="MaxPool-ties")
# with Indices a NaN wins only as a window's first input; -inf windows stay -inf
case("MaxPool", 12, [A([[[np.nan, 1, 2, 5, np.nan, 3, -np.inf, -np.inf, -np.inf, np.nan, np.nan, 7]]], f32)],
     {"kernel_shape": [3], "strides": [3], "pads": [1, 1]}, n_out=2, id="MaxPool-indices-nan")
case("MaxPool", 22, [R(1, 2, 6, 6, dtype=i8, lo=-128, hi=127)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
     id="MaxPool-i8")
case("MaxPool", 22, [R(1, 2, 6, 6, dtype=u8, lo=0, hi=255)], {"kernel_shape": [2, 2], "strides": [2, 2]},
     id="MaxPool-u8")
case("MaxPool", 22, [R(1, 2, 6, 6, dtype=f16)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, n_out=2,
     via=F16, id="MaxPool-f16")
for _v in (7, 10, 11, 19, 22):
    case("AveragePool", _v, [_x5], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]})
    case("AveragePool", _v, [_x5], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2],
                                    "count_include_pad": 1}, id=f"AveragePool-{_v}-cip")
for _cip in (0, 1):
    case("AveragePool", 19, [_x6], {"kernel_shape": [2, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                    "ceil_mode": 1, "count_include_pad": _cip}, id=f"AveragePool-ceil-{_cip}")
    case("AveragePool", 19, [_x6], {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 1, 1, 1],
                                    "count_include_pad": _cip}, id=f"AveragePool-dilations-{_cip}")
    case("AveragePool", 11, [_x5], {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "SAME_LOWER",
                                    "count_include_pad": _cip}, id=f"AveragePool-same-{_cip}")
case("AveragePool", 11, [R(2, 3, 9)], {"kernel_shape": [4], "strides": [3], "pads": [2, 1]}, id="AveragePool-1d")
case("AveragePool", 11, [R(1, 2, 4, 5, 3)], {"kernel_shape": [2, 2, 2], "pads": [0, 1, 0, 1, 0, 1]},
     id="AveragePool-3d")
case("AveragePool", 22, [R(1, 2, 6, 6, dtype=f16)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, via=F16,
     id="AveragePool-f16")
for _v in (2, 11, 18, 22):
    case("LpPool", _v, [_x5], {"kernel_shape": [2, 2], "pads": [1, 0, 0, 1]})
case("LpPool", 18, [_x6], {"kernel_shape": [2, 2], "p": 3, "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
     id="LpPool-p3-ceil")
case("LpPool", 18, [_x6], {"kernel_shape": [2, 2], "p": 1, "dilations": [2, 1]}, id="LpPool-p1-dilations")
case("LpPool", 22, [R(1, 2, 5, 5, dtype=f16)], {"kernel_shape": [2, 2]}, via=F16, id="LpPool-f16")
for _op in ("GlobalAveragePool", "GlobalMaxPool"):
    for _v in (1, 22):
        case(_op, _v, [R(2, 3, 5, 6)])
    case(_op, 22, [R(2, 3, 7)], id=f"{_op}-1d")
    case(_op, 22, [R(1, 2, 3, 4, 5)], id=f"{_op}-3d")
    case(_op, 22, [R(2, 3, 4, 4, dtype=f16)], via=F16, id=f"{_op}-f16")


# ---- ConvInteger, QLinearConv (last: the cases above keep their numbers and arrays; more cases in
# test_ops_conv_integer.py) ---------------------------------------------------------------------
case("ConvInteger", 10, [R(2, 3, 7, 8, dtype=u8, lo=0, hi=255), R(4, 3, 3, 3, dtype=u8, lo=0, hi=255), A(131, u8),
                         A([7], u8)], {"pads": [1, 2, 0, 1], "strides": [2, 1]}, id="ConvInteger-10")
case("ConvInteger", 10, [R(1, 4, 9, 9, dtype=i8, lo=-128, hi=127), R(6, 2, 3, 3, dtype=u8, lo=0, hi=255),
                         A(-5, i8)], {"group": 2, "dilations": [2, 1], "pads": [1, 1, 1, 1]},
     id="ConvInteger-i8-u8-group")
case("ConvInteger", 10, [R(2, 3, 11, dtype=u8, lo=0, hi=255), R(4, 3, 3, dtype=i8, lo=-128, hi=127)],
     {"auto_pad": "SAME_LOWER", "strides": [2]}, id="ConvInteger-1d-no-zero-points")
case("QLinearConv", 10, [R(1, 3, 8, 7, dtype=u8, lo=0, hi=255), A(0.02, f32), A(128, u8),
                         R(4, 3, 3, 3, dtype=i8, lo=-128, hi=127), A([0.01, 0.02, 0.015, 0.03], f32), A([0] * 4, i8),
                         A(0.15, f32), A(120, u8), R(4, dtype=np.int32, lo=-5000, hi=5000)], {"pads": [1, 1, 1, 1]},
     id="QLinearConv-10")
case("QLinearConv", 10, [R(2, 6, 6, 6, dtype=i8, lo=-128, hi=127), A(0.05, f32), A(-3, i8),
                         R(6, 1, 3, 3, dtype=i8, lo=-128, hi=127), A(0.02, f32), A(4, i8), A(0.3, f32), A(-10, i8)],
     {"group": 6, "strides": [2, 2], "pads": [0, 1, 1, 0]}, id="QLinearConv-i8-depthwise")
case("QLinearConv", 10, [R(1, 2, 4, 5, 3, dtype=u8, lo=0, hi=255), A([0.04], f32), A([100], u8),
                         R(3, 2, 2, 2, 2, dtype=u8, lo=0, hi=255), A(0.01, f32), A(127, u8), A([0.5], f32), A([7], u8),
                         R(3, dtype=np.int32, lo=-500, hi=500)], {"auto_pad": "SAME_UPPER"}, id="QLinearConv-3d-u8")

# The cases against ORT's CPU EP, and the shape rules' run-time contract and partial shapes.
test_matches_ort, test_rule_matches_reference, test_partial_shapes_never_invent_extents = case_tests(CASES)


# ---- spec behaviour -----------------------------------------------------------------------------

def test_maxpool_int8_padding_never_wins():
    x = np.full((1, 1, 3, 3), -128, np.int8)
    (y, idx) = lookup("", "MaxPool").reference([x], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], OUTPUT_COUNT: 2})
    assert y.dtype == np.int8 and (y == -128).all()
    assert idx.min() >= 0 and idx.max() < 9
