"""RNN, GRU and LSTM on hipep's CPU reference device (hipep.ops.recurrent) against ORT's CPU EP:
every direction, sequence lengths (an empty entry among them), initial state, peepholes, clip,
activations with alpha and beta, linear_before_reset, input_forget, layout 1 (against ORT's layout-0
run on the transposed inputs), optional outputs left out, f16 and, where ORT has no kernel, f64;
the ONNX backend's batch-first cases' expected outputs; what is left unclaimed, and why; run-time
errors naming the node."""
from __future__ import annotations

import functools
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import hipep
from hipep.errors import HipepError
from hipep.graph import GraphView
from hipep.ops import check_node, lookup
from hipep.ops.registry import OUTPUT_COUNT, REQUIRED, SINCE_VERSION

from recurrent_cases import CASES, Case

TOL = {np.float32: dict(rtol=1e-5, atol=1e-6), np.float16: dict(rtol=2e-3, atol=1e-4)}


def run_cpu(case: Case, ins: list) -> list:
    return hipep.InferenceSession(case.model(), device="cpu").run(None, case.feeds(ins))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_matches_the_cpu_ep(case):
    report = hipep.explain(case.model(), device="cpu")
    assert not report.rejections, [r.reason for r in report.rejections]
    for seed in (0, 1):
        ins = case.inputs(seed)
        got, want = run_cpu(case, ins), case.ort_outputs(ins)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), **TOL[case.dtype])


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_f64_follows_the_f32_computation(op):
    """ORT has no f64 kernels: the f64 reference on f32-representable inputs, against ORT's f32
    outputs (to f32's rounding), and against the reference's own f32 run."""
    case = Case(op, "f64", {"direction": "bidirectional"}, lens=(4, 2, 0), initial=True, peepholes=op == "LSTM")
    ins = case.inputs(3)
    want = case.ort_outputs(ins)
    wide = Case(op, "f64", case.attrs, lens=case.lens, initial=True, peepholes=case.peepholes, dtype=np.float64)
    got = run_cpu(wide, [a.astype(np.float64) if a is not None and a.dtype == np.float32 else a for a in ins])
    for g, w in zip(got, want):
        assert g.dtype == np.float64
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@functools.lru_cache(maxsize=1)
def _backend_cases() -> dict:
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():  # generating the node cases overflows casts on purpose
        warnings.simplefilter("ignore")
        return {t.name: t for t in collect_testcases()}


@pytest.mark.parametrize("name", ["test_simple_rnn_batchwise", "test_gru_batchwise", "test_lstm_batchwise"])
def test_batch_first_backend_cases(name):
    """ONNX's own batch-first (layout 1) cases, which ORT's CPU EP cannot load: their expected outputs."""
    tc = _backend_cases()[name]
    ((ins, outs),) = tc.data_sets
    feeds = {i.name: numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v
             for i, v in zip(tc.model.graph.input, ins)}
    got = hipep.InferenceSession(tc.model, device="cpu").run(None, feeds)
    assert len(got) == len(outs)
    for g, w in zip(got, outs):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _node(op, attrs, elem=TP.FLOAT, inputs=("X", "W", "R"), outputs=("Y", "Y_h"), opset=22):
    node = helper.make_node(op, list(inputs), list(outputs), name="rnn", **attrs)
    value_info = [helper.make_tensor_value_info(n, elem, None) for n in inputs if n]
    out_info = [helper.make_tensor_value_info(n, elem, None) for n in outputs if n]
    graph = helper.make_graph([node], "g", value_info, out_info)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    view = GraphView.from_onnx(model)
    return view.nodes[0], view


@pytest.mark.parametrize("op,attrs,reason", [
    ("RNN", {"activations": ["relu"]}, r"activation 'relu' is not one the ONNX spec lists"),
    ("GRU", {"activations": ["Sigmoid"]}, r"activations lists 1 functions; GRU with 1 direction\(s\) takes 2"),
    ("LSTM", {"direction": "bidirectional", "activations": ["Sigmoid", "Tanh", "Tanh"]},
     r"takes 6 \(3 per direction\)"),
    # ORT's RNN reads alpha 0 without the attribute; the spec LeakyRelu's 0.01
    ("RNN", {"activations": ["LeakyRelu"]},
     r"LeakyRelu's alpha/beta: ONNX Runtime's RNN reads \(0, 0\).*the ONNX spec \(0.01, 0\)"),
    # ORT's RNN reads entry 1 for the reverse direction, the spec the first value
    ("RNN", {"direction": "bidirectional", "activations": ["Tanh", "Elu"], "activation_alpha": [0.5]},
     r"Elu's alpha/beta: ONNX Runtime's RNN reads \(none, 0\)"),
    ("LSTM", {"activations": ["ThresholdedRelu", "Tanh", "Tanh"]},
     r"ThresholdedRelu's alpha/beta: .*reads \(0, 0\).*spec \(1, 0\)"),
    ("GRU", {"activations": ["ScaledTanh", "Tanh"], "activation_alpha": [1.0]}, r"spec \(1, none\)"),
    ("GRU", {"clip": 0.0}, r"clip 0.0 \(it must be above 0\)"),
    ("RNN", {"direction": "sideways"}, r"direction 'sideways'"),
    ("LSTM", {"layout": 2}, r"layout 2"),
])
def test_what_is_left_unclaimed(op, attrs, reason):
    node, graph = _node(op, {"hidden_size": 3, **attrs},
                        outputs=("Y", "Y_h", "Y_c") if op == "LSTM" else ("Y", "Y_h"))
    why = check_node(node, graph)
    assert why is not None and re.search(reason, why), why


def test_claimed_alpha_values_where_ort_and_the_spec_agree():
    for op, attrs in [("RNN", {"direction": "bidirectional", "activations": ["LeakyRelu", "Elu"],
                               "activation_alpha": [0.2, 0.7]}),
                      ("GRU", {"activations": ["HardSigmoid", "Elu"]}),  # defaults alike: 0.2, 0.5; 1.0
                      ("LSTM", {"activations": ["Affine", "Tanh", "ScaledTanh"], "activation_alpha": [0.5, 2.0],
                                "activation_beta": [0.1, 0.3]})]:
        node, graph = _node(op, {"hidden_size": 3, **attrs})
        assert check_node(node, graph) is None, (op, check_node(node, graph))


def test_bf16_and_a_missing_hidden_size_are_left():
    node, graph = _node("LSTM", {"hidden_size": 3}, elem=TP.BFLOAT16)
    assert "has element type bf16; supported: f16, f32, f64" in check_node(node, graph)
    node, graph = _node("GRU", {})
    assert check_node(node, graph) == "required attribute 'hidden_size' is missing"


def _reference(op, inputs, attrs):
    o = lookup("", op)
    resolved = {**{k: v for k, v in o.attributes.items() if v is not REQUIRED}, **attrs, OUTPUT_COUNT: 2,
                SINCE_VERSION: 22}
    return o.reference(inputs, resolved)


def test_a_sequence_length_out_of_range_names_the_node_and_the_session_runs_on():
    case = Case("GRU", "bad-length", lens=(4, 5, 1))
    sess = hipep.InferenceSession(case.model(), device="cpu")
    ins = case.inputs()
    with pytest.raises(Exception, match=r"node 'rnn' \(GRU\).*sequence length 5 of batch entry 1 is out of range "
                                        r"\[0, 4\]"):
        sess.run(None, case.feeds(ins))
    ins[4] = np.array([4, 0, 1], np.int32)
    for g, w in zip(sess.run(None, case.feeds(ins)), case.ort_outputs(ins)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op,shapes,pattern", [
    ("RNN", [(4, 3, 5), (1, 4, 6), (1, 4, 4)], r"W \[1, 4, 6\] does not fit: its extent 6 should be 5"),
    ("GRU", [(4, 3, 5), (1, 12, 5), (1, 12, 4), (1, 12)], r"B \[1, 12\] does not fit: its extent 12 should be 24"),
    ("LSTM", [(4, 3, 5), (2, 16, 5), (2, 16, 4)], r"W \[2, 16, 5\] does not fit: its extent 2 should be 1"),
    ("RNN", [(4, 3), (1, 4, 5), (1, 4, 4)], r"X must be 3-D \[seq_length, batch, input_size\], got \[4, 3\]"),
])
def test_shapes_that_do_not_fit_are_named(op, shapes, pattern):
    ins = [np.zeros(s, np.float32) for s in shapes]
    with pytest.raises(HipepError, match=pattern):
        _reference(op, ins, {"hidden_size": 4})
    rule = lookup("", op).shape_rule
    from hipep.graph import TensorType

    with pytest.raises(HipepError, match=pattern):
        rule([TensorType(TP.FLOAT, s) for s in shapes], [], {"hidden_size": 4}, 2)


def test_partial_shapes():
    from hipep.graph import TensorType

    rule = lookup("", "LSTM").shape_rule
    attrs = {"hidden_size": 6, "direction": "bidirectional", "layout": 1}
    # X unranked: the batch from initial_h, nothing of the time axis
    got = rule([None if s is None else TensorType(TP.FLOAT, s) for s in
                [None, (2, 24, 5), (2, 24, 6), None, None, (7, 2, 6)]], [], attrs, 3)
    assert [t.shape for t in got] == [(7, None, 2, 6), (7, 2, 6), (7, 2, 6)]
    got = rule([TensorType(TP.FLOAT16, (None, 9, 5)), TensorType(TP.FLOAT16, (2, 24, 5)),
                TensorType(TP.FLOAT16, (2, 24, 6))], [], attrs, 2)
    assert [t.shape for t in got] == [(None, 9, 2, 6), (None, 2, 6)] and got[0].elem_type == TP.FLOAT16
