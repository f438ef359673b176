"""hipep's ONNX element type table agrees with onnx's, and the session path does not import onnx."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import onnx.helper
import pytest

from hipep.dtypes import NUMPY_FOR_ELEM, elem_type_for, numpy_dtype_for
from helpers import IR_VERSION


@pytest.mark.parametrize("elem", sorted(v for v in onnx.TensorProto.DataType.values() if v))
def test_table_agrees_with_onnx(elem):
    try:
        want = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))
    except Exception:
        assert elem not in NUMPY_FOR_ELEM
        return
    assert numpy_dtype_for(elem) == want
    assert elem_type_for(want) == onnx.helper.np_dtype_to_tensor_dtype(want)


def test_unknown_types_are_key_errors():
    with pytest.raises(KeyError):
        numpy_dtype_for(999)
    with pytest.raises(KeyError):
        elem_type_for(np.dtype([("a", np.int8)]))
    assert elem_type_for(np.dtype("U3")) == onnx.TensorProto.STRING


def test_a_session_does_not_import_onnx(tmp_path):
    from onnx import TensorProto as TP
    from onnx import helper, numpy_helper

    w = numpy_helper.from_array(np.arange(64, dtype=np.float32).reshape(8, 8), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
                          "g", [helper.make_tensor_value_info("x", TP.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("z", TP.FLOAT, [2, 8])], [w])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION), str(path))
    script = ("import sys, numpy as np, hipep\n"
              f"s = hipep.InferenceSession({str(path)!r}, device='cpu')\n"
              "y = s.run(None, {'x': np.ones((2, 8), np.float32)})[0]\n"
              "assert y.shape == (2, 8), y.shape\n"
              "print(sorted(m for m in sys.modules if m == 'onnx' or m.startswith('onnx.')))\n")
    done = subprocess.run([sys.executable, "-P", "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
