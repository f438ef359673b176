"""Names that are not valid UTF-8 (ONNX requires UTF-8; ORT does not check): the nodes they touch
are not claimed, each with a reason naming the bad name, and the rest of the model still runs on
hipep. The models are made by patching bytes of a serialized model (onnx's Python API refuses
such names)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import hipep
from helpers import cpu_ep, plain_ort_session


def _model(patches) -> bytes:
    f = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [2])  # noqa: E731
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["QQt"], name="NODEZZ"),
                           helper.make_node("Neg", ["QQt"], ["u"], name="neg"),
                           helper.make_node("Abs", ["u"], ["y"], name="abs")], "g", [f("x")], [f("y")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    data = m.SerializeToString()
    for old, new in patches:
        assert data.count(old) >= 1 and len(old) == len(new)
        data = data.replace(old, new)
    return data


X = np.array([1.5, -2.0], np.float32)
WANT = np.abs(-np.maximum(X, 0))


def test_a_node_name_that_is_not_utf8_is_a_rejection_naming_it():
    data = _model([(b"NODEZZ", b"NODE\xff\xfe")])
    with pytest.raises(hipep.FallbackError) as info:
        hipep.InferenceSession(data, device="cpu")
    msg = str(info.value)
    assert "1 node(s)" in msg and r"node name 'NODE\xff\xfe' is not valid UTF-8" in msg
    sess = hipep.InferenceSession(data, device="cpu", disable_cpu_ep_fallback=False)
    assert np.array_equal(sess.run(None, {"x": X})[0], WANT)
    assert sess.get_providers()[0].startswith("Hip")


def test_a_value_name_that_is_not_utf8_rejects_every_node_touching_it():
    data = _model([(b"QQt", b"Q\xc3t")])
    with pytest.raises(hipep.FallbackError) as info:
        hipep.InferenceSession(data, device="cpu")
    msg = str(info.value)
    assert "2 node(s)" in msg and msg.count(r"value name 'Q\xc3t' is not valid UTF-8") == 2
    assert "node 'abs'" not in msg  # Abs reads only valid names: hipep runs it
    before = hipep.stats().get("runs", 0)
    sess = hipep.InferenceSession(data, device="cpu", disable_cpu_ep_fallback=False)
    assert np.array_equal(sess.run(None, {"x": X})[0], WANT)
    assert hipep.stats()["runs"] > before


def test_plain_ort_session_with_fallback_runs():
    data = _model([(b"NODEZZ", b"NODE\xff\xfe"), (b"QQt", b"Q\xc3t")])
    sess = plain_ort_session(data, cpu_ep())
    assert np.array_equal(sess.run(None, {"x": X})[0], WANT)


@pytest.mark.parametrize("patch,claimed,rejected", [
    ((b"NODEZZ", b"NODE\xff\xfe"), 2, {r"NODE\xff\xfe": r"node name 'NODE\xff\xfe'"}),
    ((b"QQt", b"Q\xc3t"), 1, {"NODEZZ": r"value name 'Q\xc3t'", "neg": r"value name 'Q\xc3t'"}),
])
def test_explain_names_the_same_nodes_as_a_session(patch, claimed, rejected):
    """hipep.explain reads the model through onnx's protobuf, which hands such names over as
    bytes: it decodes them as the bridge does and leaves the same nodes unclaimed, with the same
    reason; its report prints."""
    data = _model([patch])
    text = str(hipep.explain(data))
    assert f"claimed {claimed} of 3 nodes" in text
    for node, what in rejected.items():
        assert f"node '{node}'" in text and f"{what} is not valid UTF-8" in text
    with pytest.raises(hipep.FallbackError) as info:
        hipep.InferenceSession(data, device="cpu")
    for what in rejected.values():
        assert f"{what} is not valid UTF-8" in str(info.value)
