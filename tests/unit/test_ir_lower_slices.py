"""hip-lower-slices: the extract_slices it builds select what the Slice/Split references select."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

from hipep.frontend import import_graph
from hipep.graph import GraphView
from hipep.ir.api import tensor
from hipep.ops import lookup
from hipep.ops.registry import OUTPUT_COUNT
from hipep.passes import run_pipeline

T = h.make_tensor_value_info


def model(nodes, inputs, outputs, inits=(), opset=18):
    g = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=10)


def apply_slice(x: np.ndarray, op) -> np.ndarray:
    """What tensor.extract_slice selects (static offsets/sizes/strides, dynamic sizes = full)."""
    index = []
    for axis, (o, s, st) in enumerate(zip(op.static_offsets.get_values(), op.static_sizes.get_values(),
                                          op.static_strides.get_values())):
        if s < 0:  # dynamic size: in these tests always the whole axis from the offset
            s = x.shape[axis]
        index.append(slice(o, o + (s - 1) * st + 1 if s > 0 else o, st))
    return x[tuple(index)]


SLICES = [
    ([1], [3], [0], [1]), ([-3], [-1], [1], [1]), ([0, 1], [100, -1], [0, 1], [2, 3]),
    ([5], [2], [0], [1]), ([-100], [100], [-1], [2]), ([2], [2**63 - 1], [1], [1]),
    ([0], [2**31 - 1], [0], [1]),
]


def _slice_cases():
    for starts, ends, axes, steps in SLICES:
        yield starts, ends, axes, steps, False
        if len({a % 2 for a in axes}) < 2:  # an unsliced axis can be dynamic
            yield starts, ends, axes, steps, True


@pytest.mark.parametrize("starts,ends,axes,steps,dynamic_other", list(_slice_cases()))
def test_slice_lowering_matches_reference(starts, ends, axes, steps, dynamic_other):
    x = np.arange(6 * 7, dtype=np.float32).reshape(6, 7)
    inits = [numpy_helper.from_array(np.array(v, np.int64), n)
             for v, n in ((starts, "st"), (ends, "en"), (axes, "ax"), (steps, "sp"))]
    # a dynamic extent on an axis not sliced is read with tensor.dim
    shape = [6, 7]
    if dynamic_other:
        unsliced = [a for a in (0, 1) if a not in [ax % 2 for ax in axes]]
        shape[unsliced[0]] = "n"
    m = model([h.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"], name="sl")],
              [T("x", TP.FLOAT, shape)], [T("y", TP.FLOAT, None)], inits)
    module = import_graph(GraphView.from_onnx(m), ["x"], ["y"], "s")
    run_pipeline(module, ["hip-infer-shapes", "hip-lower-slices"])
    module.verify()
    slices = [o for o in module.walk() if isinstance(o, tensor.ExtractSliceOp)]
    assert len(slices) == 1
    want = lookup("", "Slice").reference([x, *[np.array(v, np.int64) for v in (starts, ends, axes, steps)]], {})[0]
    got = apply_slice(x, slices[0])
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    implied = slices[0].results[0].type
    assert [d for d in implied.get_shape() if d >= 0] == [d for a, d in enumerate(want.shape) if shape[a] != "n"]


def test_negative_step_and_runtime_bounds_stay():
    inits = [numpy_helper.from_array(np.array([3], np.int64), "st"),
             numpy_helper.from_array(np.array([0], np.int64), "en"),
             numpy_helper.from_array(np.array([0], np.int64), "ax"),
             numpy_helper.from_array(np.array([-1], np.int64), "sp")]
    m = model([h.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"], name="back"),
               h.make_node("Slice", ["x", "b", "b"], ["z"], name="runtime")],
              [T("x", TP.FLOAT, [6, 7]), T("b", TP.INT64, [1])], [T("y", TP.FLOAT, None), T("z", TP.FLOAT, None)], inits)
    module = import_graph(GraphView.from_onnx(m), ["x", "b"], ["y", "z"], "s")
    run_pipeline(module, ["hip-infer-shapes", "hip-lower-slices"])
    names = [o.name for o in module.walk()]
    assert names.count("hip.slice") == 2 and "tensor.extract_slice" not in names


@pytest.mark.parametrize("opset,width,sizes,attrs,n", [
    (13, 6, None, {}, 3),  # equal parts, one per output
    (13, 6, [2, 4], {}, 2),  # sizes operand (a constant)
    (11, 6, None, {"split": [1, 5]}, 2),  # sizes attribute
    (18, 6, None, {"num_outputs": 3}, 3),  # num_outputs chunks
    (18, 7, None, {"num_outputs": 4}, 4),  # uneven: chunks of ceil(7/4) = 2, the last 1
])
def test_split_lowering_matches_reference(opset, width, sizes, attrs, n):
    x = np.arange(5 * width, dtype=np.float32).reshape(5, width)
    inputs, inits = ["x"], []
    if sizes is not None:
        inputs.append("sizes")
        inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
    outs = [f"y{i}" for i in range(n)]
    m = model([h.make_node("Split", inputs, outs, axis=1, name="sp", **attrs)],
              [T("x", TP.FLOAT, ["b", width])], [T(o, TP.FLOAT, None) for o in outs], inits, opset=opset)
    module = import_graph(GraphView.from_onnx(m), ["x"], outs, "s")
    run_pipeline(module, ["hip-infer-shapes", "hip-lower-slices"])
    module.verify()
    slices = [o for o in module.walk() if isinstance(o, tensor.ExtractSliceOp)]
    assert len(slices) == n
    resolved = {"axis": 1, **attrs, OUTPUT_COUNT: n}
    want = lookup("", "Split").reference([x] + ([np.array(sizes, np.int64)] if sizes else []), resolved)
    for sl, w in zip(slices, want):
        np.testing.assert_array_equal(apply_slice(x, sl), w)


def test_split_the_reference_rejects_is_not_lowered():
    # num_outputs=4 on an extent of 6: chunks of 2 leave nothing for the last output, which the
    # pass leaves to the reference (ORT's CPU EP gives an empty last output there)
    outs = [f"y{i}" for i in range(4)]
    m = model([h.make_node("Split", ["x"], outs, axis=1, num_outputs=4, name="sp")],
              [T("x", TP.FLOAT, [5, 6])], [T(o, TP.FLOAT, None) for o in outs])
    g = GraphView.from_onnx(m, infer_shapes=False)
    for o in outs:
        g.types[o] = g.types["x"]
    module = import_graph(g, ["x"], outs, "s")
    run_pipeline(module, ["hip-lower-slices"])
    assert [o.name for o in module.walk()].count("hip.split") == 1
