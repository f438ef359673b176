"""ONNX element types and their numpy dtypes, without importing onnx.

The session path (ORT's GraphView through compile and run) needs only this table; importing onnx
for it would add its protobuf modules and C extension (~6 MiB) to every process that runs a model.
The table agrees with onnx.helper.tensor_dtype_to_np_dtype (tests/unit/test_dtypes.py checks it).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

# ONNX TensorProto.DataType -> ml_dtypes attribute name, for the types numpy itself lacks.
_ML_DTYPES = {16: "bfloat16", 17: "float8_e4m3fn", 18: "float8_e4m3fnuz", 19: "float8_e5m2",
              20: "float8_e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4_e2m1fn", 24: "float8_e8m0fnu",
              25: "uint2", 26: "int2", 27: "float6_e2m3fn", 28: "float6_e3m2fn"}

NUMPY_FOR_ELEM: dict[int, np.dtype] = {
    1: np.dtype(np.float32), 2: np.dtype(np.uint8), 3: np.dtype(np.int8), 4: np.dtype(np.uint16),
    5: np.dtype(np.int16), 6: np.dtype(np.int32), 7: np.dtype(np.int64), 8: np.dtype(object),
    9: np.dtype(np.bool_), 10: np.dtype(np.float16), 11: np.dtype(np.float64), 12: np.dtype(np.uint32),
    13: np.dtype(np.uint64), 14: np.dtype(np.complex64), 15: np.dtype(np.complex128),
}
for _elem, _name in _ML_DTYPES.items():
    if hasattr(ml_dtypes, _name):  # older ml_dtypes lack the newest types
        NUMPY_FOR_ELEM[_elem] = np.dtype(getattr(ml_dtypes, _name))

_ELEM_FOR_NUMPY: dict[np.dtype, int] = {d: e for e, d in NUMPY_FOR_ELEM.items()}
_ELEM_FOR_NUMPY[np.dtype(np.str_)] = 8


def numpy_dtype_for(elem_type: int) -> np.dtype:
    """The numpy dtype of an ONNX element type (KeyError for one numpy cannot hold)."""
    return NUMPY_FOR_ELEM[int(elem_type)]


def elem_type_for(dtype) -> int:
    """The ONNX element type of a numpy dtype (KeyError for one ONNX has no type for)."""
    d = np.dtype(dtype)
    if d.kind == "U":
        return 8
    return _ELEM_FOR_NUMPY[d]
