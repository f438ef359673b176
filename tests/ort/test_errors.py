"""Errors hipep must find itself: clear messages, and the process stays usable."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper as h

import hipep

from helpers import assert_matches_cpu, cpu_ep, make_model, providers_for, session, tensor

CPU_EP = cpu_ep()  # hipep's CPU reference device (HipCpuExecutionProvider beside a GPU)


def add_model():
    return make_model([h.make_node("Add", ["x", "x"], ["y"], name="double")],
                      [tensor("x", T.FLOAT, ["n"])], [tensor("y", T.FLOAT, ["n"])])


def check_usable(rng):
    sess = hipep.InferenceSession(add_model(), device="cpu")
    assert_matches_cpu(sess, add_model(), {"x": rng.standard_normal(5).astype(np.float32)})


@pytest.mark.parametrize("options, needle", [
    ({"devcie": "cpu"}, "unknown HipExecutionProvider option(s) 'devcie'; valid options: cpu_schedule, device, device_id, dump_ir, fusion, log_level, native_replay, pass_options, plan_cache, seed, strict"),
    ({"device": "gpu"}, "option 'device' = 'gpu' is invalid; expected one of auto, cpu, cuda, hip"),
    ({"device_id": "-1"}, "option 'device_id' = '-1' is invalid"),
    ({"device_id": "first"}, "option 'device_id' = 'first' is invalid"),
    ({"log_level": "loud"}, "option 'log_level' = 'loud' is invalid"),
    ({"cpu_schedule": "chaos"}, "option 'cpu_schedule' = 'chaos' is invalid; expected one of inline, deferred, random"),
    ({"seed": "x1"}, "option 'seed' = 'x1' is invalid"),
    ({"native_replay": "1"}, "option 'native_replay' = '1' is invalid; expected one of on, off"),
    ({"device": "cuda"}, "device 'cuda' is not available"),
    ({"device": "hip"}, "device 'hip' is not available"),
])
def test_bad_options(rng, options, needle):
    if options.get("device") == "cuda" and hipep.gpu_memory_offered():
        pytest.skip("the CUDA device is available here")
    with pytest.raises(hipep.OptionError) as info:
        hipep.InferenceSession(add_model(), **options)
    assert needle in str(info.value)
    # Through plain onnxruntime the same check runs inside the plugin (CreateEp), on the EP that
    # hipep.InferenceSession picks for the device option (HipExecutionProvider for a GPU).
    ep_name = hipep.provider_for(options.get("device", "auto"))
    with pytest.raises(Exception) as info:
        so = ort.SessionOptions()
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        s = ort.InferenceSession(add_model().SerializeToString(), so, providers=providers_for(so, [(ep_name, options)]))
        s.disable_fallback()
    chain = f"{info.value} {info.value.__cause__ or ''}"
    assert needle in chain
    check_usable(rng)


def test_explain_corrupt_file(tmp_path, rng):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not a model" * 10)
    with pytest.raises(hipep.ModelError, match="broken.onnx"):
        hipep.explain(bad)
    with pytest.raises(hipep.ModelError, match="missing.onnx"):
        hipep.explain(tmp_path / "missing.onnx")
    check_usable(rng)


def test_matmul_inner_dims_disagree_at_run_time(rng):
    model = make_model([h.make_node("MatMul", ["a", "b"], ["c"], name="proj")],
                       [tensor("a", T.FLOAT, ["m", "k"]), tensor("b", T.FLOAT, ["k2", "n"])],
                       [tensor("c", T.FLOAT, ["m", "n"])])
    sess = hipep.InferenceSession(model, device="cpu")
    good = {"a": rng.standard_normal((2, 3)).astype(np.float32), "b": rng.standard_normal((3, 4)).astype(np.float32)}
    assert_matches_cpu(sess, model, good)
    bad = {"a": good["a"], "b": rng.standard_normal((5, 4)).astype(np.float32)}
    with pytest.raises(Exception) as info:
        sess.run(None, bad)
    msg = str(info.value)
    assert "node 'proj' (MatMul)" in msg and "inner dimensions" in msg and "[2, 3]" in msg and "[5, 4]" in msg
    assert_matches_cpu(sess, model, good)  # the same session still runs
    check_usable(rng)


def test_reshape_to_impossible_shape(rng):
    model = make_model([h.make_node("Reshape", ["x", "shape"], ["y"], name="bad_reshape")],
                       [tensor("x", T.FLOAT, ["n"]), tensor("shape", T.INT64, [2])], [tensor("y", T.FLOAT, None)])
    sess = hipep.InferenceSession(model, device="cpu")
    x = rng.standard_normal(12).astype(np.float32)
    assert_matches_cpu(sess, model, {"x": x, "shape": np.array([3, -1], np.int64)})
    with pytest.raises(Exception) as info:
        sess.run(None, {"x": x, "shape": np.array([5, -1], np.int64)})
    msg = str(info.value)
    assert "node 'bad_reshape' (Reshape)" in msg and "[12]" in msg and "[5, -1]" in msg
    check_usable(rng)


def test_sequence_values_are_rejected_with_a_reason(capfd, rng):
    nodes = [
        h.make_node("SequenceConstruct", ["x", "x"], ["seq"], name="make_seq"),
        h.make_node("Identity", ["seq"], ["seq2"], name="pass_seq"),
        h.make_node("ConcatFromSequence", ["seq2"], ["y"], name="join_seq", axis=0),
        h.make_node("Add", ["y", "y"], ["z"], name="after"),
    ]
    model = make_model(nodes, [tensor("x", T.FLOAT, [2])], [tensor("z", T.FLOAT, None)])
    sess = session(model, optimization=ort.GraphOptimizationLevel.ORT_DISABLE_ALL)  # keep the Identity
    out = sess.run(None, {"x": np.ones(2, np.float32)})[0]
    np.testing.assert_array_equal(out, np.full(4, 2, np.float32))
    err = capfd.readouterr().err
    assert "node 'pass_seq' (ai.onnx::Identity, opset 16): input 0 'seq' is a sequence; hipep supports tensors only" in err


def test_device_id_naming_no_device_is_a_clear_hipep_error():
    """ORT's Python layer reads a `device_id` provider option itself (to pick an EP device) and fails
    with "Unknown Provider Type" for ids it cannot match; hipep.InferenceSession hands options over
    as session config entries, so hipep's own check answers."""
    model = make_model([h.make_node("Relu", ["x"], ["y"])], [tensor("x", T.FLOAT, [2])], [tensor("y", T.FLOAT, [2])])
    with pytest.raises(hipep.OptionError, match="'device_id' = 1 names no device: the cpu device has only id 0"):
        hipep.InferenceSession(model, device="cpu", device_id=1)
    sess = hipep.InferenceSession(model, device="cpu", device_id=0)
    assert sess.get_providers()[0] == CPU_EP
