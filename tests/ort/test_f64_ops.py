"""MatMul, Softmax and LogSoftmax in f64 (the expanded f64 attention cases of the conformance suite
compute scores, weights and their product in double): claimed on the CPU device, whose reference
computes in double, and run there with ORT's CPU EP's results; on a GPU the whole graph is claimed:
Softmax and LogSoftmax have f64 kernels (sums in double, kernels/softmax.hip), MatMul gemm_f64
(kernels/gemm.hip)."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto as T, helper as h

import hipep

from helpers import assert_matches_cpu, assignment, cpu_ep, make_model, session, tensor


def attention_model():
    nodes = [h.make_node("MatMul", ["q", "kt"], ["s"], name="scores"),
             h.make_node("Softmax", ["s"], ["p"], axis=-1, name="softmax"),
             h.make_node("MatMul", ["p", "v"], ["o"], name="weighted"),
             h.make_node("LogSoftmax", ["o"], ["y"], axis=1, name="log_softmax")]
    return make_model(nodes, [tensor("q", T.DOUBLE, [2, 5, 8]), tensor("kt", T.DOUBLE, [2, 8, 7]),
                              tensor("v", T.DOUBLE, [2, 7, 6])], [tensor("y", T.DOUBLE, [2, 5, 6])], opset=13)


def test_f64_attention_runs_on_the_cpu_device_with_the_cpu_eps_results(rng):
    model = attention_model()
    sess = session(model, disable_fallback=True)
    assert assignment(sess) == {cpu_ep(): [["scores", "softmax", "weighted", "log_softmax"]]}
    feeds = {"q": rng.standard_normal((2, 5, 8)) * 3, "kt": rng.standard_normal((2, 8, 7)),
             "v": rng.standard_normal((2, 7, 6))}
    got = assert_matches_cpu(sess, model, feeds, rtol=1e-12, atol=1e-14)
    assert got[0].dtype == np.float64


def test_on_a_gpu_the_whole_f64_attention_is_one_subgraph():
    report = hipep.explain(attention_model(), device="cuda")
    assert not report.rejections
    assert [sorted(c) for c in report.clusters] == [[0, 1, 2, 3]]
