"""hipep.ort_compat: one way to put hipep's EP into a session on every onnxruntime hipep supports.
Newer releases select a registered plugin EP by name; onnxruntime 1.24 only through its devices
(SessionOptions.add_provider_for_devices). Both roads are tested on whichever release is
installed: the devices road is forced where ORT would take the name. Likewise onnxruntime 1.24's
fused node names, counted from 0 in every graph, are forced on newer releases."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper as h

import hipep
import hipep.ort_compat as ort_compat
from helpers import UNSUPPORTED, assignment, cpu_session, if_model, make_model, middle_model, session, tensor

EP = "HipExecutionProvider"


def relu_model():
    return make_model([h.make_node("Relu", ["x"], ["y"], name="relu")], [tensor("x", T.FLOAT, [2, 3])],
                      [tensor("y", T.FLOAT, [2, 3])])


@pytest.fixture(params=["this onnxruntime's road", "devices"])
def road(request, monkeypatch):
    if request.param == "devices":
        monkeypatch.setattr(ort_compat, "selectable_by_name", lambda ep_name: False)
    return request.param


def test_the_road_follows_what_onnxruntime_lists():
    so = ort.SessionOptions()
    providers = ort_compat.session_providers(so, EP, {"strict": "1"})
    if EP in ort.get_available_providers():
        assert providers == [(EP, {"strict": "1"})] and not so.has_providers()
        assert ort_compat.session_providers(ort.SessionOptions(), EP) == [EP]
    else:  # onnxruntime 1.24: the EP's devices are in the session options, the options with them
        assert providers is None and so.has_providers()
        assert so.get_session_config_entry("ep.hipexecutionprovider.strict") == "1"


def test_a_session_runs_on_hipep_either_way(road):
    model = relu_model()
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=ort_compat.session_providers(so, EP))
    assert sess.get_providers()[0] == EP and list(assignment(sess)) == [EP]
    x = np.array([[-1, 0, 2], [3, -4, 5]], np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], cpu_session(model).run(None, {"x": x})[0])


def test_options_reach_the_ep_and_one_session_options_serves_two_sessions(road, rng):
    so = ort.SessionOptions()
    data = middle_model().SerializeToString()
    with pytest.raises(Exception, match="node 'the_pool'"):  # strict: the node left to the CPU EP is an error
        ort.InferenceSession(data, so, providers=ort_compat.session_providers(so, EP, {"strict": "1"}))
    sess = ort.InferenceSession(data, so, providers=ort_compat.session_providers(so, EP, {"strict": "0"}))
    feeds = {"x": rng.standard_normal((2, 3, 3)).astype(np.float32), "y": rng.standard_normal(3).astype(np.float32)}
    np.testing.assert_allclose(sess.run(None, feeds)[0], cpu_session(middle_model()).run(None, feeds)[0],
                               rtol=1e-5, atol=1e-6)


def test_hipep_inference_session_either_way(road):
    sess = hipep.InferenceSession(relu_model(), device="cpu")
    assert sess.get_providers()[0] == hipep.provider_for("cpu")
    x = np.full((2, 3), -2.0, np.float32)
    assert (sess.run(None, {"x": x})[0] == 0).all()


def test_session_options_that_hold_another_ep_are_an_error_on_the_devices_road(monkeypatch):
    monkeypatch.setattr(ort_compat, "selectable_by_name", lambda ep_name: False)
    so = ort.SessionOptions()
    so.add_provider_for_devices([d for d in ort.get_ep_devices() if d.ep_name == "CPUExecutionProvider"], {})
    with pytest.raises(hipep.HipepError, match="runs on CPUExecutionProvider, not HipExecutionProvider"):
        hipep.InferenceSession(relu_model(), sess_options=so, device="cpu", disable_cpu_ep_fallback=False)


def test_an_ep_without_devices_is_named_in_the_error(monkeypatch):
    monkeypatch.setattr(ort_compat, "selectable_by_name", lambda ep_name: False)
    with pytest.raises(hipep.HipepError, match="no device for the execution provider 'NoSuchExecutionProvider'"):
        ort_compat.session_providers(ort.SessionOptions(), "NoSuchExecutionProvider")


def test_on_onnxruntime_1_24_hipep_fuses_in_one_graph_of_a_model(monkeypatch, rng, capfd):
    """The If is left to the CPU EP (an unsupported op in its then branch); hipep claims nodes in the main
    graph and in the else branch. Where fused names restart per graph, only the first graph ORT
    asks about is fused and the other's nodes go to the CPU EP, with a warning saying why."""
    monkeypatch.setattr(ort_compat, "fused_names_restart_per_graph", lambda: True)
    monkeypatch.setattr(ort_compat, "onnxruntime_version", lambda: (1, 24))
    model = if_model(UNSUPPORTED)
    sess = session(model, optimization=ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    for x in (rng.standard_normal((2, 9)), -np.abs(rng.standard_normal((3, 9))), np.abs(rng.standard_normal((1, 9)))):
        x = x.astype(np.float32)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], cpu_session(model).run(None, {"x": x})[0],
                                   rtol=1e-5, atol=1e-6)
    assert len(assignment(sess).get(EP, [])) == 1
    assert "names the nodes an EP fuses per graph from 0" in capfd.readouterr().err
