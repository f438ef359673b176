"""MatMul, Softmax and LogSoftmax in f64 (the expanded f64 attention cases of the conformance suite
compute scores, weights and their product in double): claimed on the CPU device, whose reference
computes in double, and run there with ORT's CPU EP's results; on a GPU Softmax and LogSoftmax have
f64 kernels (sums in double, kernels/softmax.hip) and MatMul none, which explain names."""
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


def test_on_a_gpu_the_f64_matmuls_are_left_with_the_reason():
    report = hipep.explain(attention_model(), device="cuda")
    left = {r.node.name: r.line() for r in report.rejections}
    assert sorted(left) == ["scores", "weighted"]
    assert all("no kernel for cuda" in line and "float64" in line for line in left.values()), left
    assert sorted(n for c in report.clusters for n in c) == [1, 3]  # Softmax and LogSoftmax
