"""The GraphView the native bridge builds from ORT's OrtGraph equals the one built from ONNX."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort

from hipep import bridge
from hipep.demo import build_attention_block
from hipep.graph import GraphView

from helpers import session, make_model, tensor


def _native_view(model):
    captured = []
    original = bridge.EpState.get_capability

    def spy(self, desc):
        captured.append(GraphView.from_native(desc))
        return original(self, desc)

    bridge.EpState.get_capability = spy
    try:
        session(model, optimization=ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    finally:
        bridge.EpState.get_capability = original
    return captured[0]


def _same(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b)) and np.asarray(a).dtype == np.asarray(b).dtype
    if isinstance(a, float) or isinstance(b, float):
        return np.float32(a) == np.float32(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def test_native_graph_view_equals_onnx_view():
    model = build_attention_block()
    native, ref = _native_view(model), GraphView.from_onnx(model)
    assert native.name == ref.name
    assert native.inputs == ref.inputs and native.outputs == ref.outputs
    assert native.opsets.get("") == ref.opsets.get("")
    # ORT turns Constant nodes into initializers when it loads a model; from_onnx does the same
    assert all(n.op_type != "Constant" for n in native.nodes)
    assert sorted(n.name for n in native.nodes) == sorted(n.name for n in ref.nodes)
    by_name = {r.name: r for r in ref.nodes}
    for n in native.nodes:
        r = by_name[n.name]
        assert (n.name, n.op_type, n.domain, n.since_version) == (r.name, r.op_type, r.domain, r.since_version)
        assert n.inputs == r.inputs and n.outputs == r.outputs
        # ORT also lists attributes it filled in with their schema defaults
        assert set(r.attributes) <= set(n.attributes), n.name
        for k in r.attributes:
            assert _same(n.attributes[k], r.attributes[k]), (n.name, k, n.attributes[k], r.attributes[k])
    # symbolic dims and element types come through
    assert native.type_of("x").shape == ("batch", "seq", 32) and native.type_of("x").elem_type == 1
    assert native.type_of("y_mean") == ref.type_of("y_mean")
    # small constants are copied, with their data
    assert set(native.constants) == set(ref.constants)
    for k in native.constants:
        assert _same(native.constants[k], ref.constants[k])


def test_large_initializers_are_named_not_copied():
    from onnx import TensorProto as T, helper as h, numpy_helper

    
    w = numpy_helper.from_array(np.ones((300, 300), np.float32), "w")
    model = make_model([h.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                       [tensor("x", T.FLOAT, ["n", 300])], [tensor("y", T.FLOAT, ["n", 300])], [w])
    native = _native_view(model)
    assert native.weights == {"w"} and "w" not in native.constants
    assert native.type_of("w").shape == (300, 300)
