"""The compiler's two rules from the field, proven through real ORT sessions on the CPU device.

* Shape merge: a Loop body's run-time-bounded Slice keeps the 1x?x12x32 extents ONNX knows; an
  equal Split of a static axis with dynamic declared outputs compiles (extract_slice + cast).
* Host-buffer safety: the GQA preamble matches the CPU EP over 1000 runs under a random
  device/host interleaving, its host steps run between the launches or written from symbols; with the memory-space rule off, the plan really shares a slot between
  the host-written buffer and a device buffer, and some runs go wrong.
"""
from __future__ import annotations

import glob
import os

import numpy as np
import pytest

import hipep
from hipep import bridge
from hipep.plan import HOST_VISIBLE, HostStep, Launch
from helpers import (cpu_session, equal_split_model, gqa_preamble_model,
                     rotate_half_loop_model)


def test_loop_with_runtime_slice_bounds_keeps_known_extents(tmp_path, rng):
    model = rotate_half_loop_model()
    sess = hipep.InferenceSession(model, dump_ir=str(tmp_path), device="cpu")
    cpu = cpu_session(model)
    for seq in (3, 7):
        x = rng.standard_normal((1, seq, 12, 32)).astype(np.float32)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], cpu.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    dumps = sorted(glob.glob(os.path.join(tmp_path, "**", "*hip-infer-shapes*"), recursive=True))
    assert dumps, os.listdir(tmp_path)
    text = open(dumps[0]).read()
    assert "hip.slice" in text or "tensor.extract_slice" in text
    assert "1x?x12x32xf32" in text  # the body's values keep their known extents
    assert "1x?x12x16xf32" in text or "1x?x12x?xf32" in text  # each half keeps 1x?x12
    assert "?x?x?x?xf32" not in text  # nothing was widened


def test_equal_split_of_static_axis_with_dynamic_declared_outputs(tmp_path, rng):
    model = equal_split_model()
    sess = hipep.InferenceSession(model, dump_ir=str(tmp_path), device="cpu")
    cpu = cpu_session(model)
    for n in (1, 5):
        x = rng.standard_normal((n, 8)).astype(np.float32)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], cpu.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    lowered = sorted(glob.glob(os.path.join(tmp_path, "**", "*hip-lower-slices*"), recursive=True))
    text = open(lowered[0]).read()
    # hip-infer-shapes already refined the declared ?x? halves to ?x4, so no cast is needed here;
    # tests/lit/split_equal_static_axis_dynamic_result.mlir shows the cast when it is.
    assert text.count("tensor.extract_slice") == 2 and "hip.split" not in text


def _masks(rng, count):
    for _ in range(count):
        batch, total = int(rng.integers(1, 4)), int(rng.integers(2, 9))
        lengths = rng.integers(1, total + 1, size=batch)
        yield (np.arange(total)[None, :] < lengths[:, None]).astype(np.int64)


def _host_device_shared_slots(plan):
    """(space, slot) pairs written both by a host step and by a device launch."""
    def slots(kind):
        out = set()
        def visit(steps):
            for s in steps:
                if isinstance(s, kind):
                    for o in s.outputs:
                        if o >= 0:
                            v = plan.values[plan.storage_of(o)]
                            if v.kind == "buffer":
                                out.add((v.space, v.slot))
                for body in (getattr(s, "body", None), getattr(s, "then_body", None), getattr(s, "else_body", None)):
                    if body:
                        visit(body)
        visit(plan.steps)
        return out
    return slots(HostStep) & slots(Launch)


@pytest.mark.parametrize("host_values", ["1", "0"])
def test_gqa_preamble_is_right_in_1000_random_schedules(rng, monkeypatch, host_values):
    """With HIPEP_HOST_VALUES=1 (the default) the preamble's total length is written from the run's
    symbols before the launches; with 0 its host steps run between them, where the random schedule
    lets queued device work fall behind them."""
    monkeypatch.setenv("HIPEP_HOST_VALUES", host_values)
    model = gqa_preamble_model()
    sess = hipep.InferenceSession(model, cpu_schedule="random", seed="11", device="cpu")
    plan = bridge.compiled_plans()[-1]
    host_written = {plan.values[plan.storage_of(o)].space for s in plan.steps if isinstance(s, HostStep)
                    for o in s.outputs if o >= 0}
    assert host_written == {HOST_VISIBLE}
    assert not _host_device_shared_slots(plan)
    cpu = cpu_session(model)
    for mask in _masks(rng, 1000):
        for g, w in zip(sess.run(None, {"attention_mask": mask}), cpu.run(None, {"attention_mask": mask})):
            np.testing.assert_array_equal(g, w)


def test_gqa_preamble_goes_wrong_without_the_memory_space_rule(rng):
    model = gqa_preamble_model()
    sess = hipep.InferenceSession(model, cpu_schedule="random", seed="11",
                                  pass_options="hip-assign-memory-spaces{host_rule=false}", device="cpu")
    plan = bridge.compiled_plans()[-1]
    shared = _host_device_shared_slots(plan)
    assert shared, "with the rule off the host-written buffer should share a slot with a device buffer\n" + plan.format()
    cpu = cpu_session(model)
    wrong = 0
    for mask in _masks(rng, 300):
        got = sess.run(None, {"attention_mask": mask})
        want = cpu.run(None, {"attention_mask": mask})
        wrong += any(not np.array_equal(g, w) for g, w in zip(got, want))
    assert wrong > 0, "the hazard never showed: the test would not catch a broken rule"
