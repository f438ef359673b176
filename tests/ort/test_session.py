"""A stock onnxruntime session runs a model on hipep's CPU reference device (HipExecutionProvider, or
HipCpuExecutionProvider where HipExecutionProvider runs on a GPU) and matches the CPU EP."""
from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort
import pytest

import hipep
from hipep.demo import build_attention_block

from helpers import assert_matches_cpu, assignment, cpu_ep, session, make_model, tensor

CPU_EP = cpu_ep()


@pytest.fixture(scope="module")
def block():
    return build_attention_block()


def _x(rng, batch, seq):
    x = rng.standard_normal((batch, seq, 32)).astype(np.float32)
    x[:, -1, 0] = 0.0
    return x


@pytest.mark.parametrize("disable_fallback", [False, True])
@pytest.mark.parametrize("optimization", [None, ort.GraphOptimizationLevel.ORT_DISABLE_ALL])
def test_supported_model_runs_whole_on_hipep(block, rng, disable_fallback, optimization):
    sess = session(block, disable_fallback=disable_fallback, optimization=optimization)
    placed = assignment(sess)
    assert set(placed) == {CPU_EP}, placed
    if optimization is not None:  # nothing rewritten: every model node is hipep's
        # ORT loads Constant nodes as initializers; every other node is hipep's
        assert sum(len(s) for s in placed[CPU_EP]) == sum(n.op_type != "Constant" for n in block.graph.node)
    assert_matches_cpu(sess, block, {"x": _x(rng, 2, 6)})


def test_provider_options_tuple_form(block, rng):
    sess = session(block, providers=[(CPU_EP, {"device": "cpu", "log_level": "warning", "device_id": "0"})])
    assert set(assignment(sess)) == {CPU_EP}
    assert_matches_cpu(sess, block, {"x": _x(rng, 1, 3)})


def test_hipep_inference_session_disables_fallback(block, rng):
    sess = hipep.InferenceSession(block, device="cpu")
    assert sess.get_session_options().get_session_config_entry("session.disable_cpu_ep_fallback") == "1"
    assert_matches_cpu(sess, block, {"x": _x(rng, 2, 4)})


def test_model_from_path(block, rng, tmp_path):
    path = tmp_path / "block.onnx"
    path.write_bytes(block.SerializeToString())
    sess = hipep.InferenceSession(path, device="cpu")
    assert_matches_cpu(sess, block, {"x": _x(rng, 1, 2)})


def test_register_is_idempotent_and_paths():
    assert hipep.register() == "HipExecutionProvider"
    assert hipep.register() == "HipExecutionProvider"
    assert hipep.get_ep_name() == "HipExecutionProvider"
    path = hipep.get_library_path()
    assert os.path.isfile(path) and "_native" in os.path.basename(path)
    from hipep import _native

    assert _native.ort_api_version == 23
    assert _native.plugin_loaded()  # the module and the plugin are one library


def test_info_line_reports_claim_counts(block, capfd):
    ort.set_default_logger_severity(1)
    try:
        session(block, optimization=ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    finally:
        ort.set_default_logger_severity(2)
    err = capfd.readouterr().err
    n = sum(node.op_type != "Constant" for node in block.graph.node)  # ORT loads Constants as initializers
    assert f"claimed {n} of {n} nodes in 1 subgraphs" in err
    assert hipep.explain(block).summary() == f"claimed {n} of {n} nodes in 1 subgraphs"


def test_no_warning_when_everything_is_claimed(block, capfd):
    session(block)
    assert "did not claim" not in capfd.readouterr().err


def test_f16_and_integer_paths(rng):
    from onnx import TensorProto as T, helper as h

    
    nodes = [
        h.make_node("MatMul", ["a", "b"], ["ab"], name="mm16"),
        h.make_node("Softmax", ["ab"], ["sm"], name="sm16", axis=-1),
        h.make_node("Cast", ["sm"], ["sm32"], name="to32", to=T.FLOAT),
        h.make_node("Shape", ["a"], ["shp"], name="shape"),
        h.make_node("Mul", ["shp", "two"], ["shp2"], name="imul"),
        h.make_node("Cast", ["shp2"], ["shp2_32"], name="to_i32", to=T.INT32),
        h.make_node("Greater", ["sm32", "half"], ["big"], name="gt"),
        h.make_node("Where", ["big", "sm32", "half"], ["y"], name="where"),
    ]
    model = make_model(
        nodes, [tensor("a", T.FLOAT16, ["n", 8]), tensor("b", T.FLOAT16, [8, 5])],
        [tensor("y", T.FLOAT, None), tensor("shp2_32", T.INT32, None)],
        [h.make_tensor("two", T.INT64, [], [2]), h.make_tensor("half", T.FLOAT, [], [0.25])])
    sess = session(model, disable_fallback=True, optimization=ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    assert set(assignment(sess)) == {CPU_EP}
    feeds = {"a": rng.standard_normal((3, 8)).astype(np.float16), "b": rng.standard_normal((8, 5)).astype(np.float16)}
    assert_matches_cpu(sess, model, feeds, rtol=2e-3, atol=2e-3)


def test_demo_passes():
    """The demo on the default device (the CPU reference device where there is no GPU) and on the
    CPU reference device by name."""
    import hipep
    from hipep.demo import run_demo

    for device in ("auto", "cpu"):
        lines: list[str] = []
        assert run_demo(out=lines.append, device=device)
        assert any("claimed 24 of 24 nodes in 1 subgraphs" in line for line in lines)
        assert lines[-1] == "PASS: outputs match the CPU EP"
        on_gpu = device == "auto" and hipep.gpu_memory_offered()
        assert ("== hipep (the GPU) vs ONNX Runtime CPU EP ==" in lines) == on_gpu
