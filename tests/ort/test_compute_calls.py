"""What ORT's calls into the plugin cost Python, run after run (csrc/compute.cc).

Compute hands CompiledSubgraph.run its inputs as a tuple of read-only arrays over ORT's memory and
`allocate_outputs` as an OutputAllocator (one small object of hipep's native module per run, not
a new function); it looks `run` up on the object at every call, so a replacement of
CompiledSubgraph.run made after a session exists reaches that session. A run's start calls into
Python (and takes the GIL) only for an EP whose GetCapability met nodes the `strict` option
forbids leaving to another EP: that start raises the failure.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T, helper as h

import hipep
import hipep.bridge as bridge
from hipep import _native

from helpers import UNSUPPORTED, cpu_session, make_model, tensor


def relu_model():
    return make_model([h.make_node("Relu", ["x"], ["y"], name="relu")], [tensor("x", T.FLOAT, ["n", 4])],
                      [tensor("y", T.FLOAT, ["n", 4])])


def test_compute_hands_run_a_tuple_of_read_only_inputs_and_an_output_allocator(monkeypatch, rng):
    seen = []
    run_ = bridge.CompiledSubgraph.run

    def run(self, inputs, allocate_outputs=None):
        seen.append((inputs, allocate_outputs))
        return run_(self, inputs, allocate_outputs)

    monkeypatch.setattr(bridge.CompiledSubgraph, "run", run)
    sess = hipep.InferenceSession(relu_model(), device="cpu")
    x = rng.standard_normal((3, 4)).astype(np.float32)
    for _ in range(2):
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x, 0))
    (inputs, first), (_, second) = seen
    assert type(inputs) is tuple and len(inputs) == 1
    assert not inputs[0].flags.writeable and inputs[0].shape == (3, 4)
    assert type(first) is _native.OutputAllocator and first is not second
    with pytest.raises(RuntimeError, match="allocate_outputs was called after its run ended"):
        first([(3, 4)])


def test_a_run_replaced_after_the_session_exists_is_the_one_compute_calls(monkeypatch, rng):
    """Timers and watchers (benchmarks/overhead.py's host split) replace CompiledSubgraph.run on
    the class once sessions exist: Compute must reach the replacement."""
    sess = hipep.InferenceSession(relu_model(), device="cpu")
    x = rng.standard_normal((2, 4)).astype(np.float32)
    sess.run(None, {"x": x})
    calls = []
    run_ = bridge.CompiledSubgraph.run

    def counted(self, *args, **kwargs):
        calls.append(self)
        return run_(self, *args, **kwargs)

    monkeypatch.setattr(bridge.CompiledSubgraph, "run", counted)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], cpu_session(relu_model()).run(None, {"x": x})[0])
    assert len(calls) == 1


def test_a_run_starts_without_python_unless_strict_must_fail_it(monkeypatch, rng):
    starts = []
    on_run_start = bridge.EpState.on_run_start

    def counted(self):
        starts.append(self)
        return on_run_start(self)

    monkeypatch.setattr(bridge.EpState, "on_run_start", counted)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    sess = hipep.InferenceSession(relu_model(), device="cpu", strict=1)
    for _ in range(3):
        sess.run(None, {"x": x})
    assert starts == []
    # Nothing claimed under strict: the session is made (hipep compiles nothing), its first run fails.
    unclaimed = make_model([h.make_node(UNSUPPORTED, ["x"], ["d"], name="only_pool")],
                           [tensor("x", T.FLOAT, [2, 3, 3])], [tensor("d", T.FLOAT, [2, 3, 1])])
    sess = hipep.InferenceSession(unclaimed, device="cpu", strict=1, disable_cpu_ep_fallback=False)
    with pytest.raises(Exception, match="(?s)starting a run failed: HipepError: strict: .*node 'only_pool'"):
        sess.run(None, {"x": rng.standard_normal((2, 3, 3)).astype(np.float32)})
    assert len(starts) == 1
