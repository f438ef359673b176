"""The vision files' shape rules beyond their cases: partial shapes against expected ones and ONNX's,
which inputs the host reads and which ops are views, and the run-time errors (RuntimeShapeError
naming expected vs got) that the references and the shape rules raise alike. The cases themselves
are in the files of tests/ops_vision_harness.py's CASE_FILES."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP

from hipep.errors import RuntimeShapeError
from hipep.graph import TensorType, elem_type_of
from hipep.ops import lookup
from hipep.ops.registry import REQUIRED

from ops_vision_harness import A, SR, f32, i64, random_arrays, reference_of, u8, vision_cases

R = random_arrays()
F, I64 = TP.FLOAT, TP.INT64


# ---- partial shapes ----------------------------------------------------------------------------

PARTIAL = [  # (id, op, opset, inputs, attrs, n_out, expected shapes): see test_shape_rules.rule_on
    ("conv", "Conv", 11, [(F, ["n", 3, 32, "w"]), (F, [8, 3, 3, 3])], {"pads": [1, 1, 1, 1], "strides": [2, 2]}, 1,
     [(None, 8, 16, None)]),
    ("conv-same", "Conv", 11, [(F, ["n", 3, 31, 9]), (F, ["m", 3, "k", "k"])],
     {"auto_pad": "SAME_UPPER", "strides": [2, 3]},
     1, [(None, None, 16, 3)]),
    ("conv-kernel-attr", "Conv", 11, [(F, [1, 4, 10]), (F, None)], {"kernel_shape": [3]}, 1, [(1, None, 8)]),
    ("conv-unranked", "Conv", 11, [(F, None), (F, [8, 3, 3, 3])], {}, 1, [(None, 8, None, None)]),
    ("conv-transpose", "ConvTranspose", 11, [(F, ["n", 4, 5, 6]), (F, [4, 2, 3, 3])],
     {"strides": [2, 2], "group": 2}, 1,
     [(None, 4, 11, 13)]),
    ("conv-transpose-output-shape", "ConvTranspose", 11, [(F, ["n", 4, "h", "w"]), (F, [4, 2, 3, 3])],
     {"strides": [2, 2], "output_shape": [10, 12]}, 1, [(None, 2, 10, 12)]),
    ("maxpool", "MaxPool", 12, [(F, ["n", 3, 224, "w"])],
     {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
     2, [(None, 3, 112, None)] * 2),
    ("maxpool-unranked", "MaxPool", 12, [(F, None)], {"kernel_shape": [3, 3]}, 1, [(None,) * 4]),
    ("avgpool-ceil", "AveragePool", 19, [(F, [1, 2, 6, 7])],
     {"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1}, 1,
     [(1, 2, 3, 3)]),
    ("global", "GlobalAveragePool", 22, [(F, ["n", 8, "h", "w"])], {}, 1, [(None, 8, 1, 1)]),
    ("resize-scales", "Resize", 13, [(F, ["n", 3, 10, "w"]), None, A([1, 1, 1.5, 2], np.float32)], {}, 1,
     [(None, 3, 15, None)]),
    ("resize-sizes", "Resize", 13, [(F, ["n", 3, "h", "w"]), None, None, A([2, 3, 20, 30])], {}, 1,
     [(2, 3, 20, 30)]),
    ("resize-unknown", "Resize", 13, [(F, ["n", 3, 10, 10]), None, (F, [4])], {}, 1, [(None,) * 4]),
    ("resize-axes", "Resize", 18, [(F, ["n", 3, 10, 10]), None, None, A([5])], {"axes": [2]}, 1, [(None, 3, 5, 10)]),
    ("upsample-7", "Upsample", 7, [(F, ["n", 3, 4, 5])], {"scales": [1.0, 1.0, 2.0, 2.0]}, 1, [(None, 3, 8, 10)]),
    ("depth-to-space", "DepthToSpace", 13, [(F, ["n", 12, 3, "w"])], {"blocksize": 2}, 1, [(None, 3, 6, None)]),
    ("space-to-depth", "SpaceToDepth", 13, [(F, ["n", 3, 6, "w"])], {"blocksize": 2}, 1, [(None, 12, 3, None)]),
    ("col2im", "Col2Im", 18, [(F, ["n", 12, 12]), A([4, 5]), A([2, 2])], {}, 1, [(None, 3, 4, 5)]),
    ("gather-elements", "GatherElements", 13, [(F, [5, "n"]), (I64, [2, "m"])], {}, 1, [(2, None)]),
    ("gather-nd", "GatherND", 13, [(F, ["b", 5, 6, 7]), (I64, ["b", 4, 2])], {"batch_dims": 1}, 1, [(None, 4, 7)]),
    ("gather-nd-unknown-k", "GatherND", 13, [(F, [5, 6, 7]), (I64, [4, "k"])], {}, 1, [None]),
    ("scatter-nd", "ScatterND", 18, [(F, ["n", 6]), (I64, [3, 1]), (F, [3, 6])], {"reduction": "add"}, 1,
     [(None, 6)]),
    ("one-hot", "OneHot", 11, [(I64, ["n", 3]), A(10), (F, [2])], {"axis": 1}, 1, [(None, 10, 3)]),
    ("one-hot-unknown-depth", "OneHot", 11, [(I64, ["n", 3]), (I64, []), (F, [2])], {}, 1, [(None, 3, None)]),
    ("quantize", "QuantizeLinear", 21, [(F, ["n", 8]), (F, []), None], {"output_dtype": TP.INT8}, 1, [(None, 8)]),
    ("dynamic-quantize", "DynamicQuantizeLinear", 11, [(F, ["n", 8])], {}, 3, [(None, 8), (), ()]),
    ("flatten", "Flatten", 13, [(F, ["n", 3, 4])], {"axis": 1}, 1, [(None, 12)]),
    ("flatten-dynamic", "Flatten", 13, [(F, [2, "n", 4])], {"axis": 2}, 1, [(None, 4)]),
    ("tile", "Tile", 13, [(F, ["n", 3]), A([2, 2])], {}, 1, [(None, 6)]),
    ("tile-unknown", "Tile", 13, [(F, ["n", 3]), (I64, [2])], {}, 1, [(None, None)]),
    ("pad", "Pad", 19, [(F, ["n", 5]), A([1, 2, 0, 3])], {}, 1, [(None, 10)]),
    ("pad-axes", "Pad", 18, [(F, [4, 5]), A([1, 2]), None, A([1])], {}, 1, [(4, 8)]),
    ("pad-unknown-pads", "Pad", 18, [(F, [4, 5]), (I64, [2]), None, A([1])], {}, 1, [(4, None)]),
    ("pad-2", "Pad", 2, [(F, ["n", 5])], {"pads": [0, 1, 0, 1]}, 1, [(None, 7)]),
]


@pytest.mark.parametrize("op_type,opset,inputs,attrs,n_out,expected", [c[1:] for c in PARTIAL],
                         ids=[c[0] for c in PARTIAL])
def test_partial_shapes(op_type, opset, inputs, attrs, n_out, expected):
    got, model = SR.rule_on(op_type, opset, inputs, attrs, n_out)
    assert [g.shape for g in got] == expected
    for (_, shape), g in zip(SR.onnx_inferred(model), got):  # never disagree with ONNX
        if shape is None or g.shape is None:
            continue
        assert len(shape) == len(g.shape), f"rule {g.shape}, ONNX {shape}"
        assert all(a is None or b is None or a == b for a, b in zip(g.shape, shape)), f"rule {g.shape}, ONNX {shape}"


def test_host_inputs_and_views():
    host = {**SR.HOST_INPUTS, "Resize": (1, 2, 3), "Upsample": (1,), "Col2Im": (1, 2), "OneHot": (1,),
            "Tile": (1,), "Pad": (1, 3)}
    for name in {p.values[0] for p in vision_cases()}:
        op = lookup("", name)
        assert op.shape_rule is not None, name
        assert op.host_inputs == host.get(name, ()), name
        assert op.view == (name in SR.VIEWS), name


# ---- run-time errors: RuntimeShapeError naming expected vs got -----------------------------

ERRORS = [
    ("Conv", [R(1, 3, 5, 5), R(2, 4, 3, 3)], {}, r"X has 3 channels.*W is \[2, 4, 3, 3\]"),
    ("Conv", [R(1, 4, 5, 5), R(2, 2, 3, 3)], {"group": 3}, r"group=3"),
    ("Conv", [R(1, 3, 5, 5), R(2, 3, 3, 3), R(3)], {}, r"B must have shape \[2\].*got \[3\]"),
    ("Conv", [R(1, 3, 2, 5), R(2, 3, 3, 3)], {}, r"spatial axis 0 of extent 2.*kernel extent 3"),
    ("Conv", [R(1, 3, 5), R(2, 3, 3, 3)], {}, r"W must have the rank of X"),
    ("Conv", [R(1, 3, 5, 5), R(2, 3, 3, 3)], {"kernel_shape": [2, 2]}, r"kernel_shape=\[2, 2\] disagrees"),
    ("ConvTranspose", [R(1, 3, 4, 4), R(2, 2, 3, 3)], {}, r"W's first extent must equal X's channels 3"),
    ("ConvTranspose", [R(1, 2, 3, 3), R(2, 2, 3, 3)], {"output_shape": [9, 9], "strides": [2, 2]},
     r"output_shape extent 9 of spatial axis 0 does not fit input extent 3 \(the full output is 7; at most 8"),
    ("MaxPool", [R(1, 2, 5, 5)], {"kernel_shape": [3]}, r"kernel_shape=\[3\] needs 2 values"),
    ("AveragePool", [R(1, 2, 2, 5)], {"kernel_shape": [3, 3]}, r"spatial axis 0 of extent 2"),
    ("GlobalMaxPool", [R(2, 3)], {}, r"rank >= 3"),
    ("Resize", [R(1, 2, 3, 4), None, A([1, 1, 2], f32)], {"mode": "nearest"}, r"'scales' has 3 values, expected 4"),
    ("Resize", [R(1, 2, 3, 4), None, A([1, 1, 2, 0], f32)], {"mode": "nearest"}, r"must be positive"),
    ("Resize", [R(1, 2, 3, 4), None, A([1, 1, 2, 2], f32), A([1, 2, 3, 4], i64)], {"mode": "nearest"},
     r"exactly one of 'scales' and 'sizes'"),
    ("Upsample", [R(1, 2, 3, 4), A([1, 1, 0.5, 2], f32)], {"mode": "nearest"}, r"must be >= 1"),
    ("DepthToSpace", [R(1, 6, 2, 2)], {"blocksize": 2}, r"channels 6 are not divisible by blocksize\^2 = 4"),
    ("SpaceToDepth", [R(1, 2, 5, 4)], {"blocksize": 2}, r"spatial extents \[5, 4\] are not divisible"),
    ("Col2Im", [R(1, 12, 10), A([4, 5], i64), A([2, 2], i64)], {}, r"input has 10 blocks \(L\), but .* gives 12"),
    ("GatherElements", [R(3, 4), A([[3]], i64)], {},
     r"index 3 is out of range for axis 0 of extent 3 \(valid indices are -3..2\)"),
    ("GatherElements", [R(3, 4), A([0], i64)], {}, r"indices must have the rank of data"),
    ("GatherND", [R(3, 4), A([[3, 0]], i64)], {}, r"index 3 is out of range"),
    ("GatherND", [R(3, 4), A([[0, 0, 0]], i64)], {}, r"index 3 dims, but data \[3, 4\] has only 2"),
    ("GatherND", [R(2, 4), A([[0], [1], [0]], i64)], {"batch_dims": 1},
     r"batch dims of data \[2, 4\] and indices \[3, 1\] differ"),
    ("ScatterND", [R(3, 4), A([[1]], i64), R(1, 3)], {}, r"updates must have shape \[1, 4\].*got \[1, 3\]"),
    ("ScatterElements", [R(3, 4), A([[1, 2]], i64), R(2, 2)], {}, r"updates must have the shape of indices"),
    ("ScatterElements", [R(3, 4), A([[-4]], i64), R(1, 1)], {}, r"index -4 is out of range for axis 0"),
    ("OneHot", [A([1], i64), A(0, i64), A([0, 1], f32)], {}, r"depth must be positive"),
    ("OneHot", [A([1], i64), A([2, 3], i64), A([0, 1], f32)], {}, r"'depth' must be a scalar"),
    ("QuantizeLinear", [R(2, 6), A([1, 2, 3], f32)], {"axis": 1}, r"per-axis scale must be 1-D with x's extent 6"),
    ("QuantizeLinear", [R(2, 6), R(2, 3)], {"axis": 1, "block_size": 4},
     r"block_size=4 the scale must have shape \[2, 2\]"),
    ("DequantizeLinear", [A([1, 2], u8), A([1, 2], f32), A([1], u8)], {"axis": 0},
     r"zero point must have the scale's shape"),
    ("Flatten", [R(2, 3)], {"axis": 3}, r"axis 3 is out of range for a rank-2 input"),
    ("Tile", [R(2, 3), A([2], i64)], {}, r"'repeats' has 1 values but the input \[2, 3\] has rank 2"),
    ("Tile", [R(2, 3), A([2, -1], i64)], {}, r"must be non-negative"),
    ("Pad", [R(3, 5), A([3, 0, 0, 0], i64)], {"mode": "reflect"},
     r"'reflect' pads \(3, 0\) of axis 0 must be at most"),
    ("Pad", [R(3, 5), A([1, 1], i64)], {}, r"'pads' has 2 values, expected 4"),
    ("Pad", [R(0, 5), A([1, 0, 0, 0], i64)], {"mode": "edge"}, r"'edge' mode cannot pad axis 0"),
    ("Pad", [R(3, 5), A([-2, 0, -2, 0], i64)], {}, r"remove more than axis 0's extent 3"),
]


@pytest.mark.parametrize("op_type,inputs,attrs,pattern", ERRORS, ids=[f"{e[0]}-{i}" for i, e in enumerate(ERRORS)])
def test_runtime_shape_errors(op_type, inputs, attrs, pattern):
    with pytest.raises(RuntimeShapeError, match=pattern) as e:
        reference_of(op_type)(inputs, **attrs)
    assert str(e.value).startswith(f"{op_type}: ")
    # The shape rule raises alike wherever the error is one of shapes (not of index values).
    if "out of range" in pattern and "index" in pattern:
        return
    op = lookup("", op_type)
    resolved = {**{k: v for k, v in op.attributes.items() if v is not None and v is not REQUIRED}, **attrs}
    types = [None if a is None else TensorType(elem_type_of(a.dtype), a.shape) for a in inputs]
    values = [a if i in op.host_inputs else None for i, a in enumerate(inputs)]
    with pytest.raises(RuntimeShapeError, match=pattern):
        op.shape_rule(types, values, resolved, 1)
