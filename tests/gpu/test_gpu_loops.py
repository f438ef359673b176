"""Loop and Scan on the CUDA device: their subgraphs' plans run step by step (the interpreter, its
pools in device memory, launches issued on the run's stream, the host reading each iteration's
condition back). Each model runs whole (disable_cpu_ep_fallback) through ORT against ORT's CPU
EP (tests/loop_models.py: carried values that trade places, a condition computed on the device,
a carried value that grows every iteration, Scan in both directions), with device OrtValues in
and out, and with an index out of range inside the body (an error naming the node; the session
stays usable)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper

import hipep
from hipep.runtime.cuda import cuda_status

from helpers import assert_outputs_match, check_runs_against_cpu_ep, cpu_session, make_model, tensor
from loop_models import MODELS

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_loops_follow_the_cpu_ep(name):
    make, feeds = MODELS[name]
    check_runs_against_cpu_ep(make(), feeds(), runs=2)
    assert hipep.explain(make(), device="cuda").claimed_count == 1


@pytest.mark.parametrize("name", sorted(MODELS))
def test_loops_with_device_ortvalues(name):
    make, feeds = MODELS[name]
    model = make()
    data = model.SerializeToString()
    sess = hipep.InferenceSession(data, device="cuda", disable_cpu_ep_fallback=True)
    ref = cpu_session(data)
    outputs = [o.name for o in model.graph.output]
    for f in feeds():
        want = ref.run(None, f)
        binding = sess.io_binding()
        for k, v in f.items():
            binding.bind_ortvalue_input(k, ort.OrtValue.ortvalue_from_numpy(v, "cuda", 0))
        for o in outputs:
            binding.bind_output(o, "cuda", 0)
        sess.run_with_iobinding(binding)
        assert_outputs_match([v.numpy() for v in binding.get_outputs()], want, rtol=1e-6, atol=1e-6)


def _gather_in_loop_model():
    """Loop(M) whose body gathers row (start + i) of a table: an index out of range in a later
    iteration is seen by the kernel only."""
    body = helper.make_graph(
        [helper.make_node("Add", ["start", "i"], ["row"]),
         helper.make_node("Gather", ["table", "row"], ["picked"], axis=0, name="pick"),
         helper.make_node("Add", ["acc_in", "picked"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [tensor("i", TP.INT64, []), tensor("cond_in", TP.BOOL, []), tensor("acc_in", TP.FLOAT, [4])],
        [tensor("cond_out", TP.BOOL, []), tensor("acc_out", TP.FLOAT, [4])])
    loop = helper.make_node("Loop", ["M", "", "acc0"], ["acc"], body=body, name="walk")
    return make_model([loop], [tensor("M", TP.INT64, []), tensor("start", TP.INT64, []), tensor("table", TP.FLOAT, [6, 4]),
                               tensor("acc0", TP.FLOAT, [4])], [tensor("acc", TP.FLOAT, [4])], opset=16)


def test_an_index_out_of_range_inside_a_loop_names_the_node():
    model = _gather_in_loop_model()
    sess = hipep.InferenceSession(model.SerializeToString(), device="cuda", disable_cpu_ep_fallback=True)
    ref = cpu_session(model)
    table = np.arange(24, dtype=np.float32).reshape(6, 4)
    good = {"M": np.array(4, np.int64), "start": np.array(1, np.int64), "table": table,
            "acc0": np.zeros(4, np.float32)}
    np.testing.assert_allclose(sess.run(None, good)[0], ref.run(None, good)[0])
    bad = dict(good, start=np.array(3, np.int64))  # iteration 3 reads row 6 of 6
    with pytest.raises(Exception, match=r"node 'pick' \(Gather\).*index 6 is out of data bounds"):
        sess.run(None, bad)
    np.testing.assert_allclose(sess.run(None, good)[0], ref.run(None, good)[0])  # still usable
