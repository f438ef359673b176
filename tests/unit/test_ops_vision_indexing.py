"""The indexing ops (GatherElements, GatherND, ScatterND, ScatterElements, Scatter, OneHot,
TensorScatter) against ONNX Runtime's CPU EP, and their shape rules (tests/ops_vision_harness.py says
how)."""
from __future__ import annotations

import numpy as np

from ops_vision_harness import (A, CaseTable, F16, b, case_tests, f16, f32, f64, i32, i64, i8, random_arrays,
                                u16, u32, u8)

R = random_arrays()
CASES = CaseTable(first=160)  # numbered past test_ops_vision_resize_blocks.py's cases
case = CASES.add


# ---- indexing --------------------------------------------------------------------------------
_d = R(3, 4, 5)
for _v in (11, 13):
    case("GatherElements", _v, [_d, R(3, 2, 5, dtype=i64, lo=-4, hi=3)], {"axis": 1})
case("GatherElements", 13, [_d, R(2, 4, 3, dtype=i32, lo=-3, hi=2)], id="GatherElements-smaller-i32")
case("GatherElements", 13, [R(4, 3, dtype=u8, lo=0, hi=255), R(4, 6, dtype=i64, lo=0, hi=2)], {"axis": -1},
     id="GatherElements-u8")
case("GatherElements", 13, [R(4, 3, dtype=f16), R(2, 3, dtype=i64, lo=-4, hi=3)], id="GatherElements-f16")
case("GatherElements", 13, [R(5, dtype=b), R(7, dtype=i64, lo=0, hi=4)], id="GatherElements-bool")
case("GatherND", 11, [_d, R(2, 2, dtype=i64, lo=-3, hi=2)])
case("GatherND", 12, [_d, R(2, 3, 1, dtype=i64, lo=0, hi=2)])
case("GatherND", 13, [_d, R(3, 2, 2, dtype=i64, lo=-4, hi=3)], {"batch_dims": 1}, id="GatherND-batch")
case("GatherND", 13, [R(2, 3, 4, 2), R(2, 3, 1, dtype=i64, lo=0, hi=3)], {"batch_dims": 2}, id="GatherND-batch2")
case("GatherND", 13, [R(3, 4, dtype=i8, lo=-9, hi=9), R(5, 2, dtype=i64, lo=0, hi=2)], id="GatherND-i8")
case("GatherND", 13, [R(3, 4, dtype=f16), R(2, 1, dtype=i64, lo=0, hi=2)], id="GatherND-f16")
_upd = R(2, 4, 5)
for _v in (11, 13, 16, 18):
    case("ScatterND", _v, [_d, A([[2], [0]], i64), _upd])
for _red in ("add", "mul"):
    case("ScatterND", 16, [_d, A([[1, 2], [1, 2], [-1, 0]], i64), R(3, 5)], {"reduction": _red},
         id=f"ScatterND-16-{_red}")
for _red in ("add", "mul", "max", "min"):
    case("ScatterND", 18, [_d, A([[1, 2], [1, 2], [-1, 0]], i64), R(3, 5)], {"reduction": _red},
         id=f"ScatterND-18-{_red}")
    case("ScatterND", 18, [R(4, 3, dtype=i32, lo=-9, hi=9), A([[1], [3], [1]], i64), R(3, 3, dtype=i32, lo=-9, hi=9)],
         {"reduction": _red}, id=f"ScatterND-18-{_red}-i32")
case("ScatterND", 18, [R(4, 3, dtype=f16), A([[1, 1], [3, 2]], i64), R(2, dtype=f16)], {"reduction": "add"},
     via=F16, id="ScatterND-f16-add")
case("ScatterND", 18, [R(4, 3, dtype=b), A([[1], [3]], i64), R(2, 3, dtype=b)], {"reduction": "add"},
     id="ScatterND-bool-add")
case("ScatterND", 13, [R(4, 3, dtype=u16, lo=0, hi=999), A([[1], [1]], i64), R(2, 3, dtype=u16, lo=0, hi=999)],
     id="ScatterND-u16-repeated")
_ie = A([[1, 0, 2, 2], [0, 2, 1, -1]], i64)
for _v in (11, 13, 16, 18):
    case("ScatterElements", _v, [R(3, 4), _ie, R(2, 4)])
case("ScatterElements", 13, [R(3, 4), A([[1], [-4]], i32), R(2, 1)], {"axis": 1}, id="ScatterElements-i32-axis1")
for _red in ("add", "mul", "max", "min"):
    case("ScatterElements", 18, [R(3, 4), _ie, R(2, 4)], {"reduction": _red}, id=f"ScatterElements-18-{_red}")
    case("ScatterElements", 18, [R(3, 4, dtype=i64, lo=-9, hi=9), _ie, R(2, 4, dtype=i64, lo=-9, hi=9)],
         {"reduction": _red}, id=f"ScatterElements-18-{_red}-i64")
case("ScatterElements", 16, [R(3, 4), _ie, R(2, 4)], {"reduction": "add"}, id="ScatterElements-16-add")
case("ScatterElements", 18, [R(3, 4, dtype=f16), A([[1, 0, 2, 0]], i64), R(1, 4, dtype=f16)], {"reduction": "mul"},
     via=F16, id="ScatterElements-f16-mul")
case("Scatter", 9, [R(3, 4), _ie, R(2, 4)])
case("Scatter", 9, [R(3, 4, dtype=i8, lo=-9, hi=9), A([[3], [0]], i64), R(2, 1, dtype=i8, lo=-9, hi=9)], {"axis": -1},
     id="Scatter-i8")
for _v in (9, 11, 28):
    case("OneHot", _v, [A([[0, 3], [-1, 5]], i64), A(4, i64), A([0, 1], f32)])
case("OneHot", 11, [A([0, -4, 2, 9, -9, -3], i32), A([3.7], f32), A([-2, 7], f32)], {"axis": 0},
     id="OneHot-float-depth")
case("OneHot", 11, [A([[1, 4], [0, -2]], i64), A(5, f32), A([0, 3], i32)], {"axis": -2}, id="OneHot-i32-values")
case("OneHot", 11, [A([1, 0], i64), A(3, i64), A([0, 1], f16)], via=F16, id="OneHot-f16-values")

# TensorScatter: the KV-cache update [batch, heads, max_sequence, head] and other sequence axes.
_cache, _rows = R(3, 2, 7, 4), R(3, 2, 2, 4)
case("TensorScatter", 24, [_cache, _rows, A([0, 5, 3], i64)], id="TensorScatter-linear")
case("TensorScatter", 24, [_cache, _rows], id="TensorScatter-no-write-indices")
case("TensorScatter", 24, [_cache, _rows, A([6, 13, 2], i64)], {"mode": "circular"}, id="TensorScatter-circular")
case("TensorScatter", 24, [_cache, R(3, 2, 7, 4), A([0, 0, 0], i64)], id="TensorScatter-whole-cache")
case("TensorScatter", 24, [R(2, 6, 3, 4), R(2, 1, 3, 4), A([5, 2], i64)], {"axis": 1}, id="TensorScatter-axis1")
case("TensorScatter", 24, [R(2, 3, 4, 6), R(2, 3, 4, 4), A([2, 4], i64)], {"axis": -1, "mode": "circular"},
     id="TensorScatter-last-axis-circular")
case("TensorScatter", 24, [R(2, 5, dtype=f16), R(2, 2, dtype=f16), A([3, 1], i64)], {"axis": 1}, id="TensorScatter-f16")
for _t in (i64, i32, u8, i8, u16, u32, f64, b):
    _past, _update = R(2, 3, 5, 2, dtype=_t, lo=0, hi=99), R(2, 3, 2, 2, dtype=_t, lo=0, hi=99)
    case("TensorScatter", 24, [_past, _update, A([1, 3], i64)], {"axis": 2}, id=f"TensorScatter-{np.dtype(_t).name}")
case("TensorScatter", 24, [R(0, 2, 4, 3), R(0, 2, 1, 3), A([], i64)], id="TensorScatter-empty-batch")


# The cases against ORT's CPU EP, and the shape rules' run-time contract and partial shapes.
test_matches_ort, test_rule_matches_reference, test_partial_shapes_never_invent_extents = case_tests(CASES)
