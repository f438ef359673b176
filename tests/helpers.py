"""Test helpers: model building, sessions, comparison with ORT's CPU EP."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

EP = "HipExecutionProvider"
IR_VERSION = 10  # onnxruntime >= 1.24 reads it; onnx's newest IR may be ahead of ORT


def make_model(nodes, inputs, outputs, initializers=(), opset=18, name="g", extra_opsets=()):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(initializers))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    return helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION)


def tensor(name, elem=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def session(model, providers=(EP,), disable_fallback=False, optimization=None, record=True, **config):
    so = ort.SessionOptions()
    if disable_fallback:
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    if record:
        so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    if optimization is not None:
        so.graph_optimization_level = optimization
    for k, v in config.items():
        so.add_session_config_entry(k, v)
    data = model if isinstance(model, (bytes, str)) else model.SerializeToString()
    return ort.InferenceSession(data, sess_options=so, providers=list(providers))


def cpu_session(model):
    data = model if isinstance(model, (bytes, str)) else model.SerializeToString()
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"])


def assignment(sess) -> dict[str, list[list[str]]]:
    """EP name → list of subgraphs, each a list of node names (op type when unnamed)."""
    out: dict[str, list[list[str]]] = {}
    for sub in sess.get_provider_graph_assignment_info():
        out.setdefault(sub.ep_name, []).append([n.name or n.op_type for n in sub.get_nodes()])
    return out


def assert_matches_cpu(sess, model, feeds, rtol=1e-5, atol=1e-6):
    want = cpu_session(model).run(None, feeds)
    got = sess.run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


def middle_model():
    """Add → Det (hipep does not implement it) → Mul."""
    nodes = [
        helper.make_node("Add", ["x", "y"], ["a"], name="first_add"),
        helper.make_node("Det", ["a"], ["d"], name="the_det"),
        helper.make_node("Mul", ["d", "d"], ["z"], name="last_mul"),
    ]
    return make_model(nodes, [tensor("x", TensorProto.FLOAT, ["n", 3, 3]), tensor("y", TensorProto.FLOAT, [3])],
                      [tensor("z", TensorProto.FLOAT, ["n"])])
