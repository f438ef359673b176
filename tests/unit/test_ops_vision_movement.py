"""Data movement against ONNX Runtime's CPU EP, and its shape rules (tests/ops_vision_harness.py
says how): Flatten, Tile and Pad, and the movement ops over every element type."""
from __future__ import annotations

import numpy as np

from ops_vision_harness import (A, CaseTable, F16, b, case_tests, f16, f32, f64, i16, i32, i64, i8,
                                random_arrays, u16, u32, u64, u8)

R = random_arrays()
CASES = CaseTable(first=300)  # numbered past test_ops_vision_quantize.py's cases
case = CASES.add


# ---- Flatten / Tile / Pad --------------------------------------------------------------------
for _v in (1, 9, 11, 13, 21, 23, 24, 25):
    case("Flatten", _v, [R(2, 3, 4)])
case("Flatten", 13, [R(2, 3, 4)], {"axis": 0}, id="Flatten-axis0")
case("Flatten", 13, [R(2, 3, 4, dtype=i64, lo=-9, hi=9)], {"axis": 3}, id="Flatten-axis-rank")
case("Flatten", 21, [R(2, 3, 4, dtype=u8, lo=0, hi=255)], {"axis": -1}, id="Flatten-u8-negative")
case("Flatten", 23, [R(dtype=f16)], {"axis": 0}, id="Flatten-scalar-f16")
case("Flatten", 23, [R(2, 0, 3, dtype=b)], {"axis": 2}, id="Flatten-empty-bool")
for _v in (6, 13):
    case("Tile", _v, [R(2, 3), A([2, 3], i64)])
case("Tile", 13, [R(2, 3, dtype=u8, lo=0, hi=255), A([1, 0], i64)], id="Tile-zero-u8")
case("Tile", 13, [R(2, 1, 3, dtype=b), A([3, 2, 1], i64)], id="Tile-bool")
case("Tile", 13, [R(3, dtype=f16), A([4], i64)], via=F16, id="Tile-f16")
case("Tile", 13, [R(dtype=i32, lo=-9, hi=9), A([], i64)], id="Tile-scalar")
_P = lambda *v: A(v, i64)  # noqa: E731
_pad_x = R(3, 5)
case("Pad", 2, [_pad_x], {"pads": [1, 0, 2, 3]})
case("Pad", 2, [_pad_x], {"pads": [0, 2, 1, 2], "mode": "reflect"}, id="Pad-2-reflect")
case("Pad", 2, [_pad_x], {"pads": [1, -1, 0, 2], "mode": "edge", "value": 1.5}, id="Pad-2-edge")
case("Pad", 2, [_pad_x], {"pads": [1, 1, 0, 2], "value": -2.5}, id="Pad-2-value")
for _v in (11, 13, 18, 19, 21, 23, 24, 25):
    case("Pad", _v, [_pad_x, _P(1, 2, 0, 1), A(3.0, f32)])
    case("Pad", _v, [_pad_x, _P(1, -1, -1, 3)], {"mode": "reflect"}, id=f"Pad-{_v}-reflect")
    case("Pad", _v, [_pad_x, _P(4, -1, -2, 6)], {"mode": "edge"}, id=f"Pad-{_v}-edge")
for _v in (19, 21, 23, 24, 25):
    case("Pad", _v, [_pad_x, _P(4, 7, -1, 11)], {"mode": "wrap"}, id=f"Pad-{_v}-wrap")
for _v in (18, 19, 21, 23, 24, 25):
    case("Pad", _v, [R(2, 3, 4), _P(1, -2, 2, 0), A(-1.0, f32), A([-1, 0], i64)], id=f"Pad-{_v}-axes")
case("Pad", 18, [R(2, 3, 4), _P(3, 1), None, A([1], i32)], {"mode": "edge"}, id="Pad-axes-i32")
case("Pad", 13, [R(2, 3, dtype=i64, lo=-9, hi=9), _P(1, 1, 1, 1), A([7], i64)], id="Pad-i64-value-1d")
case("Pad", 13, [R(2, 3, dtype=b), _P(0, 1, 1, 0), A(True, b)], id="Pad-bool")
case("Pad", 21, [R(2, 3, dtype=u8, lo=0, hi=255), _P(1, 2, 1, 2)], {"mode": "reflect"}, id="Pad-u8-reflect")
case("Pad", 23, [R(2, 3, dtype=f16), _P(1, 0, 0, 2), A(0.5, f16)], via=F16, id="Pad-f16")
case("Pad", 23, [R(2, 3, dtype=i16, lo=-99, hi=99), _P(1, 0, 0, 2)], {"mode": "edge"}, via={i16: i32}, id="Pad-i16")
case("Pad", 23, [R(0, 3), _P(1, 0, 1, 0), A(2.0, f32)], id="Pad-empty")

# ---- data movement carries every element type ------------------------------------------------
_TYPES = (u8, i8, u16, i16, u32, u64, f64)
for _t in _TYPES:
    _n = np.dtype(_t).name
    _x = R(2, 3, 4, dtype=_t, lo=0, hi=100)
    case("Reshape", 21, [_x, A([4, -1], i64)], id=f"Reshape-{_n}")
    case("Transpose", 21, [_x], {"perm": [2, 0, 1]}, id=f"Transpose-{_n}")
    case("Concat", 13, [_x, _x[:, :1]], {"axis": 1}, id=f"Concat-{_n}")
    case("Slice", 13, [_x, A([1, -1], i64), A([3, -4], i64), A([1, 2], i64), A([1, -1], i64)], id=f"Slice-{_n}")
    case("Split", 18, [_x], {"axis": 2, "num_outputs": 2}, n_out=2, id=f"Split-{_n}")
    case("Gather", 13, [_x, A([[2, 0], [1, 1]], i64)], {"axis": 2}, id=f"Gather-{_n}")
    case("Squeeze", 21, [_x[:, :1], A([1], i64)], id=f"Squeeze-{_n}")
    case("Unsqueeze", 21, [_x, A([0, -1], i64)], id=f"Unsqueeze-{_n}")
    case("Identity", 21, [_x], id=f"Identity-{_n}")
    case("Expand", 13, [_x[:1], A([3, 1, 1], i64)], id=f"Expand-{_n}")
    case("Shape", 21, [_x], {"start": 1}, id=f"Shape-{_n}")
    case("GatherElements", 13, [_x, R(2, 3, 2, dtype=i64, lo=0, hi=3)], {"axis": 2}, id=f"GatherElements-{_n}")
    case("ScatterND", 18, [_x, A([[1, 2]], i64), R(1, 4, dtype=_t, lo=0, hi=100)], id=f"ScatterND-{_n}")
    case("Flatten", 21, [_x], {"axis": 2}, id=f"Flatten-{_n}")
    case("Tile", 13, [_x, A([1, 2, 1], i64)], id=f"Tile-{_n}")


# The cases against ORT's CPU EP, and the shape rules' run-time contract and partial shapes.
test_matches_ort, test_rule_matches_reference, test_partial_shapes_never_invent_extents = case_tests(CASES)
