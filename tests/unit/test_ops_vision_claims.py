"""Claims of the vision files' ops: what hipep's check_node rejects, and why (the reason names the
attribute, type or input at fault)."""
from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

from hipep.graph import GraphView, elem_type_of
from hipep.ops import check_node

from ops_vision_harness import A

F, I64 = TP.FLOAT, TP.INT64


def _claim(op_type, opset, inputs, attrs=None, n_out=1, outputs=None):
    ins = [None if a is None else (a if isinstance(a, tuple) else (elem_type_of(a.dtype), a.shape)) for a in inputs]
    names = [f"x{i}" if a is not None else "" for i, a in enumerate(ins)]
    node = helper.make_node(op_type, names, [f"y{i}" for i in range(n_out)], **(attrs or {}))
    g_in = [helper.make_tensor_value_info(f"x{i}", t[0], t[1]) for i, t in enumerate(ins) if t is not None]
    g_out = [helper.make_tensor_value_info(f"y{i}", outputs[i] if outputs else ins[0][0], None)
             for i in range(n_out)]
    model = helper.make_model(helper.make_graph([node], "g", g_in, g_out),
                              opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    graph = GraphView.from_onnx(model, infer_shapes=False)
    return check_node(graph.nodes[0], graph)


X4 = (F, [1, 3, 8, 8])
CLAIMS = [
    ("Resize", 13, [X4, None, A([1, 1, 2, 2], np.float32)],
     {"mode": "linear", "coordinate_transformation_mode": "bogus"},
     r"coordinate_transformation_mode='bogus' is not one of"),
    ("Resize", 18, [X4, None, A([1, 1, 2, 2], np.float32)], {"mode": "nearest", "antialias": 1},
     r"antialias=1 with mode='nearest'"),
    ("Resize", 13, [(TP.UINT8, [1, 3, 8, 8]), None, A([1, 1, 2, 2], np.float32)], {"mode": "linear"},
     r"mode='linear' on u8 input"),
    ("Resize", 13, [X4, None, A([1, 1, 2, 2], np.float32)],
     {"coordinate_transformation_mode": "tf_half_pixel_for_nn"},
     r"tf_half_pixel_for_nn"),
    ("Resize", 13, [X4, (F, [8])], {}, r"needs input 'scales' or 'sizes'"),
    ("Conv", 11, [X4, (F, [2, 3, 3, 3])], {"auto_pad": "SAME_UPPER", "dilations": [2, 2]}, r"dilation 1 only"),
    ("Conv", 11, [X4, (F, [2, 3, 3, 3])], {"pads": [1, 1, -1, 1]}, r"pads=\[1, 1, -1, 1\] has negative values"),
    ("Conv", 11, [(F, [3, 8]), (F, [2, 3, 3])], {}, r"input X has rank 2"),
    ("Conv", 11, [X4, (F, [2, 3, 3, 3])], {"strides": [1, 1, 1]}, r"strides=\[1, 1, 1\] needs 2 values"),
    ("Conv", 11, [(F, [1, 3, 8, 8, 8]), (F, [2, 3, 3, 3, 3])], {"auto_pad": "EXPLICIT"}, r"auto_pad='EXPLICIT'"),
    ("ConvTranspose", 11, [X4, (F, [3, 2, 3, 3])], {"output_shape": [1, 2, 16, 16]}, r"N, C-prefixed form"),
    ("MaxPool", 12, [X4], {"kernel_shape": [3, 3], "storage_order": 2}, r"storage_order=2 must be 0 or 1"),
    ("LpPool", 18, [X4], {"kernel_shape": [3, 3], "p": 0}, r"p=0 must be positive"),
    ("DepthToSpace", 13, [(F, [1, 8, 2])], {"blocksize": 2}, r"takes 4-D"),
    ("DepthToSpace", 13, [X4], {"blocksize": 2, "mode": "XYZ"}, r"mode='XYZ' is not DCR or CRD"),
    ("ScatterND", 16, [(F, [4, 3]), (I64, [2, 1]), (F, [2, 3])], {"reduction": "max"},
     r"reduction='max' is not one of"),
    ("ScatterElements", 18, [(TP.BOOL, [4, 3]), (I64, [2, 3]), (TP.BOOL, [2, 3])], {"reduction": "min"},
     r"reduction='min' on bool data"),
    ("GatherND", 12, [(F, [4, 3]), (I64, [2, 1])], {"batch_dims": -1}, r"batch_dims=-1 must be non-negative"),
    ("OneHot", 11, [(I64, [4, 3]), (I64, []), (F, [2])], {"axis": 3}, r"axis=3 is out of range for rank-2 indices",
     [F]),
    ("QuantizeLinear", 21, [(F, [4, 6]), (F, [])], {"output_dtype": TP.INT4}, r"i4 is packed two values per byte",
     [TP.INT4]),
    ("DequantizeLinear", 21, [(TP.UINT4, [4, 6]), (F, [])], {}, r"u4 is packed two values per byte", [F]),
    ("QuantizeLinear", 19, [(F, [4, 6]), (F, [])], {}, r"f8e4m3fn; supported: i16, i4, i8, u16, u4, u8",
     [TP.FLOAT8E4M3FN]),
    ("QuantizeLinear", 23, [(TP.FLOAT16, [4, 6]), (F, []), (TP.INT8, [])], {}, r"quantizes with a scale of x's type",
     [TP.INT8]),
    ("QuantizeLinear", 23, [(F, [4, 6]), (F, []), (TP.INT8, [])], {"precision": TP.FLOAT16}, r"precision=f16",
     [TP.INT8]),
    ("QuantizeLinear", 13, [(F, [4, 6]), (F, []), (TP.INT16, [])], {}, r"i16 quantization is part of opset 21\+",
     [TP.INT16]),
    ("Pad", 18, [(F, [4, 6]), (I64, [4])], {"mode": "wrap"}, r"mode='wrap' is not one of constant, reflect, edge"),
    ("Flatten", 9, [(F, [4, 6])], {"axis": -1}, r"takes a non-negative axis"),
    ("Upsample", 9, [X4, (F, [4])], {"mode": "cubic"}, r"mode='cubic' is not supported"),
]


@pytest.mark.parametrize("op_type,opset,inputs,attrs,pattern,outputs", [c + (None,) * (6 - len(c)) for c in CLAIMS],
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CLAIMS)])
def test_claim_rejects_with_a_reason(op_type, opset, inputs, attrs, pattern, outputs):
    why = _claim(op_type, opset, inputs, attrs, outputs=outputs)
    assert why is not None and re.search(pattern, why), why


def test_one_hot_float_indices_are_not_claimed():
    # onnxruntime 1.31 and 1.32 convert fractional float indices differently
    g = helper.make_graph([helper.make_node("OneHot", ["i", "d", "v"], ["y"])], "g",
                          [helper.make_tensor_value_info("i", TP.FLOAT, [3]),
                           helper.make_tensor_value_info("d", TP.INT64, []),
                           helper.make_tensor_value_info("v", TP.INT64, [2])],
                          [helper.make_tensor_value_info("y", TP.INT64, None)])
    view = GraphView.from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)], ir_version=10))
    assert "input 0 'i' has element type f32" in check_node(view.nodes[0], view)
