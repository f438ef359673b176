"""QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear against ONNX Runtime's CPU EP, and
their shape rules (tests/ops_vision_harness.py says how)."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto as TP

from ops_vision_harness import (A, CaseTable, case_tests, f16, f32, i16, i32, i8, random_arrays, u16, u8)

R = random_arrays()
CASES = CaseTable(first=211)  # numbered past test_ops_vision_indexing.py's cases
case = CASES.add


# ---- quantization ----------------------------------------------------------------------------
_q = np.concatenate([A([0.5, 1.5, 2.5, -0.5, -1.5, 300, -300, 127.5, -128.5, np.inf, -np.inf, np.nan], f32),
                     R(12, lo=-200, hi=200)]).reshape(4, 6)
for _v in (10, 13, 19, 21, 23, 24, 25):
    case("QuantizeLinear", _v, [_q, A(1.0, f32)])
    case("QuantizeLinear", _v, [_q, A(0.7, f32), A(-3, i8)], id=f"QuantizeLinear-{_v}-i8")
    case("DequantizeLinear", _v, [R(4, 6, dtype=u8, lo=0, hi=255), A(0.02, f32), A(128, u8)])
    case("DequantizeLinear", _v, [R(4, 6, dtype=i8, lo=-128, hi=127), A(0.5, f32)], id=f"DequantizeLinear-{_v}-i8")
    case("DequantizeLinear", _v, [R(4, 6, dtype=i32, lo=-9999, hi=9999), A(0.001, f32)],
         id=f"DequantizeLinear-{_v}-i32")
for _v in (13, 19, 21, 23, 25):
    case("QuantizeLinear", _v, [_q, R(4, lo=0.1, hi=2), R(4, dtype=u8, lo=0, hi=255)], {"axis": 0},
         id=f"QuantizeLinear-{_v}-per-axis")
    case("DequantizeLinear", _v,
         [R(4, 6, dtype=i8, lo=-128, hi=127), R(6, lo=0.1, hi=2), R(6, dtype=i8, lo=-9, hi=9)],
         {"axis": -1}, id=f"DequantizeLinear-{_v}-per-axis")
case("QuantizeLinear", 13, [_q, A([0.5], f32)], {"axis": 0}, id="QuantizeLinear-one-element-scale")
for _v in (19, 21, 23, 25):
    case("QuantizeLinear", _v, [R(4, 6, lo=-40, hi=40, dtype=f16), A(0.3, f16), A(2, i8)],
         id=f"QuantizeLinear-{_v}-f16")
    case("DequantizeLinear", _v, [R(4, 6, dtype=u8, lo=0, hi=255), A(0.3, f16), A(7, u8)],
         id=f"DequantizeLinear-{_v}-f16")
for _v in (21, 23, 24, 25):
    case("QuantizeLinear", _v, [_q, R(4, 2, lo=0.1, hi=2), R(4, 2, dtype=i8, lo=-9, hi=9)],
         {"axis": 1, "block_size": 4},
         id=f"QuantizeLinear-{_v}-blocked")
    case("QuantizeLinear", _v, [_q * 100, A(1.5, f32), A(-7, i16)], id=f"QuantizeLinear-{_v}-i16")
    case("QuantizeLinear", _v, [_q * 100, R(6, lo=0.5, hi=2)], {"axis": 1, "output_dtype": TP.UINT16},
         id=f"QuantizeLinear-{_v}-output-dtype")
    case("QuantizeLinear", _v, [_q, A(0.5, f32)], {"output_dtype": TP.INT8, "saturate": 1},
         id=f"QuantizeLinear-{_v}-int8-saturate")
    case("DequantizeLinear", _v,
         [R(6, 4, dtype=u8, lo=0, hi=255), R(2, 4, lo=0.1, hi=2), R(2, 4, dtype=u8, lo=0, hi=255)],
         {"axis": 0, "block_size": 3}, id=f"DequantizeLinear-{_v}-blocked")
    case("DequantizeLinear", _v, [R(4, 5, dtype=i16, lo=-30000, hi=30000), A(0.01, f32), A(-5, i16)],
         id=f"DequantizeLinear-{_v}-i16")
    case("DequantizeLinear", _v, [R(4, 5, dtype=u16, lo=0, hi=60000), R(5, lo=0.1, hi=2, dtype=f16)], {"axis": 1},
         id=f"DequantizeLinear-{_v}-u16-f16")
case("QuantizeLinear", 23, [_q, A(0.3, f32)], {"precision": TP.FLOAT}, id="QuantizeLinear-23-precision")
case("DequantizeLinear", 23, [R(4, 6, dtype=i8, lo=-128, hi=127), A(0.3, f16)], {"output_dtype": TP.FLOAT},
     id="DequantizeLinear-23-output-dtype-f32")
case("DequantizeLinear", 23, [R(4, 6, dtype=i8, lo=-128, hi=127), A(0.3, f32)], {"output_dtype": TP.FLOAT16},
     id="DequantizeLinear-23-output-dtype-f16")
case("DynamicQuantizeLinear", 11, [R(3, 5, lo=-3, hi=10)], n_out=3)
case("DynamicQuantizeLinear", 11, [A([0, 0, 0], f32)], n_out=3, id="DynamicQuantizeLinear-zeros")
case("DynamicQuantizeLinear", 11, [A([1, np.nan, 3, 2.5], f32)], n_out=3, id="DynamicQuantizeLinear-positive-nan")
case("DynamicQuantizeLinear", 11, [R(2, 7, lo=-8, hi=-1)], n_out=3, id="DynamicQuantizeLinear-negative")


# The cases against ORT's CPU EP, and the shape rules' run-time contract and partial shapes.
test_matches_ort, test_rule_matches_reference, test_partial_shapes_never_invent_extents = case_tests(CASES)
