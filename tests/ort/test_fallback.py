"""Unclaimed nodes: split runs with a named warning, or a named failure when fallback is off."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper as h

import hipep

from helpers import (UNSUPPORTED, assert_matches_cpu, assignment, cpu_ep, if_model, make_model, middle_model,
                     plain_ort_session, providers_for, session, tensor)

CPU_EP = cpu_ep()  # hipep's CPU reference device (HipCpuExecutionProvider beside a GPU)



def cycle_model():
    """claimed A → unclaimed B → claimed U → claimed C, and A → C directly."""
    nodes = [
        h.make_node("Add", ["x", "y"], ["a"], name="A"),
        h.make_node(UNSUPPORTED, ["a"], ["d"], name="B"),
        h.make_node("Neg", ["d"], ["d3"], name="U"),
        h.make_node("Mul", ["a", "d3"], ["c"], name="C"),
    ]
    return make_model(nodes, [tensor("x", T.FLOAT, ["n", 3, 3]), tensor("y", T.FLOAT, [3])],
                      [tensor("c", T.FLOAT, ["n", 3, 3])])


def feeds(rng, n=4):
    return {"x": rng.standard_normal((n, 3, 3)).astype(np.float32), "y": rng.standard_normal(3).astype(np.float32)}


def test_the_unsupported_op_is_really_unsupported():
    report = hipep.explain(middle_model())
    assert [r.node.name for r in report.rejections] == ["the_pool"]


def test_split_across_eps_runs_and_warns(rng, capfd):
    model = middle_model()
    sess = session(model)
    placed = assignment(sess)
    assert placed["CPUExecutionProvider"] == [["the_pool"]]
    assert sorted(sum(placed[CPU_EP], [])) == ["first_add", "last_mul"]
    assert_matches_cpu(sess, model, feeds(rng))
    err = capfd.readouterr().err
    assert "did not claim 1 node(s)" in err
    assert ("node 'the_pool' (ai.onnx::GlobalLpPool, opset 2): operator ai.onnx::GlobalLpPool is not implemented "
            "by hipep") in err


def test_fallback_disabled_fails_and_names_the_node(capfd):
    with pytest.raises(Exception, match="fallback to CPU EP has been explicitly disabled"):
        session(middle_model(), disable_fallback=True)
    err = capfd.readouterr().err
    assert "node 'the_pool' (ai.onnx::GlobalLpPool, opset 2)" in err
    assert "session creation will fail" in err
    # ORT's generic refusal comes after hipep's list
    assert err.index("the_pool") < err.index("explicitly disabled")


def test_hipep_session_raises_fallback_error_with_reasons(rng):
    with pytest.raises(hipep.FallbackError) as info:
        hipep.InferenceSession(middle_model(), device="cpu")
    assert ("node 'the_pool' (ai.onnx::GlobalLpPool, opset 2): operator ai.onnx::GlobalLpPool is not "
            "implemented") in str(info.value)
    # the process is still usable
    sess = hipep.InferenceSession(middle_model(), disable_cpu_ep_fallback=False, device="cpu")
    assert_matches_cpu(sess, middle_model(), feeds(rng))


@pytest.mark.parametrize("optimization", [None, ort.GraphOptimizationLevel.ORT_DISABLE_ALL])
def test_cycle_inducing_layout_is_never_fused(rng, optimization):
    model = cycle_model()
    sess = session(model, optimization=optimization)
    placed = assignment(sess)
    assert placed["CPUExecutionProvider"] == [["B"]]
    subgraphs = placed[CPU_EP]
    where = {name: i for i, sub in enumerate(subgraphs) for name in sub}
    assert where["A"] != where["C"], subgraphs
    assert where["U"] == where["C"]
    assert_matches_cpu(sess, model, feeds(rng))


def test_explain_matches_session_without_optimizations():
    model = cycle_model()
    report = hipep.explain(model)
    sess = session(model, optimization=ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    placed = assignment(sess)
    names = [[report.labels[i] for i in c] for c in report.clusters]
    assert sorted(map(sorted, names)) == sorted(map(sorted, placed[CPU_EP]))
    assert [r.node.name for r in report.rejections] == ["B"]


def _signed_inputs(rng):
    for sign in (1, -1):
        yield {"x": sign * np.abs(rng.standard_normal((2, 9))).astype(np.float32)}


def test_control_flow_with_an_unsupported_body_node_is_rejected_with_the_reason(rng, capfd):
    model = if_model(UNSUPPORTED)
    sess = session(model, optimization=ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    for feeds in _signed_inputs(rng):
        assert_matches_cpu(sess, model, feeds)
    err = capfd.readouterr().err
    assert ("node 'branch' (ai.onnx::If, opset 16): its then_branch graph has a node hipep cannot run: "
            "node 'then_op' (ai.onnx::GlobalLpPool)") in err
    with pytest.raises(hipep.FallbackError, match="node 'branch'"):
        hipep.InferenceSession(model, device="cpu")


def test_control_flow_with_claimable_bodies_runs_on_hipep(rng):
    model = if_model("ReduceMax", axes=[1, 2], keepdims=0)
    assert hipep.explain(model).all_claimed
    sess = hipep.InferenceSession(model, device="cpu")
    for feeds in _signed_inputs(rng):
        assert_matches_cpu(sess, model, feeds)


def test_strict_option_fails_session_creation_with_the_reasons(rng, capfd):
    so = ort.SessionOptions()
    with pytest.raises(Exception) as info:
        ort.InferenceSession(middle_model().SerializeToString(), so, providers=providers_for(so, [(CPU_EP, {"strict": "1"})]))
    assert "strict" in str(info.value) and "node 'the_pool' (ai.onnx::GlobalLpPool, opset 2)" in str(info.value)
    # one message that says what happens: not a "they fall back" warning before the error
    err = capfd.readouterr().err
    assert "fall back to another EP" not in err and "so the session fails" in err
    # without strict the same model runs, split with the CPU EP
    sess = ort.InferenceSession(middle_model().SerializeToString(), so,
                                providers=providers_for(so, [(CPU_EP, {"strict": "0"})]))
    assert_matches_cpu(sess, middle_model(), feeds(rng))


def test_strict_option_fails_the_first_run_when_nothing_is_claimed(rng):
    model = make_model([h.make_node(UNSUPPORTED, ["x"], ["d"], name="only_pool")], [tensor("x", T.FLOAT, [2, 3, 3])],
                       [tensor("d", T.FLOAT, [2, 3, 1])])
    sess = plain_ort_session(model.SerializeToString(), CPU_EP, strict="1")
    with pytest.raises(Exception, match="node 'only_pool'"):
        sess.run(None, {"x": rng.standard_normal((2, 3, 3)).astype(np.float32)})


def test_explain_for_the_gpu_leaves_nodes_without_a_gpu_kernel():
    """No GPU is needed to ask what a session on one would claim: an Einsum of three operands has
    no GPU program."""
    model = make_model([h.make_node("Relu", ["x"], ["r"], name="relu"),
                        h.make_node("Einsum", ["r", "r", "r"], ["y"], equation="ij,jk,kl->il", name="es")],
                       [tensor("x", T.FLOAT, [3, 3])], [tensor("y", T.FLOAT, [3, 3])])
    assert hipep.explain(model).all_claimed
    report = hipep.explain(model, device="cuda")
    assert [r.node.name for r in report.rejections] == ["es"]
    assert "no kernel for cuda: Einsum" in report.rejections[0].line()
    with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda'"):
        hipep.explain(model, device="tpu")
