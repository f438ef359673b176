"""Rotary positions and GroupQueryAttention lengths out of range, without a GPU.

Both devices must reject the bad feeds of tests/attention_bad_inputs.py: the CPU reference device
through a session (its host-side checks), the CUDA device's launches emulated in numpy (the
kernels' clamps and fault reports, transcribed in test_gpu_attention_bindings.py's emulation,
driven by the very parameters the bindings give): the stream's fault record they fill must read as
the expected error, naming the node, the input, the value and its range, and be cleared, so the
good feed then runs clean and right. gpu_attention.gqa_length_fault (the numpy twin of the
kernels' hipep_gqa_length_fault) must reject exactly the seqlens_k the reference rejects."""
from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import helper

import hipep
from hipep.errors import RuntimeShapeError
from hipep.runtime import gpu_faults as gf
from hipep.runtime import gpu_kernels as gk
from hipep.runtime.gpu_attention import gqa_layout, gqa_length_fault, gqa_rows

from attention_bad_inputs import F16, F32, GQA_INPUTS, gqa_cases, mrope_position_case, rotary_position_case
from helpers import cpu_session
from unit.test_gpu_attention_bindings import GQA, Memory, _attrs, emulate
from unit.test_ops_attention import ort_has

CASES = ([rotary_position_case(dt, offset) for dt in (F32, F16) for offset in (False, True)]
         + [mrope_position_case(dt) for dt in (F32, F16)] + gqa_cases(F32) + gqa_cases(F16))
LABEL = "node 'node' ({op})"


def _close(got, want, dtype):
    t = dict(rtol=1e-5, atol=2e-5) if dtype == F32 else dict(rtol=1e-2, atol=2e-3)
    np.testing.assert_allclose(np.asarray(got).astype(F32), np.asarray(want).astype(F32), **t)


# ---- the CPU reference device --------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_cpu_device_rejects_the_bad_feed_and_runs_on(case):
    if not ort_has(case.model.graph.node[0].op_type):
        pytest.skip(f"this onnxruntime has no {case.model.graph.node[0].op_type} to compare with")
    sess = hipep.InferenceSession(case.model, device="cpu")
    want = cpu_session(case.model).run(None, case.good)
    for g, w in zip(sess.run(None, case.good), want):
        _close(g, w, case.dtype)
    with pytest.raises(Exception, match=case.cpu_error):
        sess.run(None, case.bad)
    for g, w in zip(sess.run(None, case.good), want):
        _close(g, w, case.dtype)


# ---- the CUDA device's launches, emulated ----------------------------------------------------------

def _node(case):
    node = case.model.graph.node[0]
    return node.op_type, {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _emulate(case, feeds, sites: gf.FaultSites):
    """The binding's launches for `feeds` emulated with a fault record: (outputs, the record's
    error read and cleared as the stream's sync does, the registry reference's outputs or error)."""
    op_type, attrs = _node(case)
    key = f"com.microsoft::{op_type}"
    if op_type == "GroupQueryAttention":
        inputs = [feeds.get(n) for n in GQA_INPUTS] + [None, None]
        q, pk = inputs[0], inputs[3]
        rows = max(int(inputs[6]), pk.shape[2])
        shapes = [q.shape, (q.shape[0], pk.shape[1], rows, pk.shape[3]), (q.shape[0], pk.shape[1], rows, pk.shape[3])]
    else:
        inputs = [feeds[n] for n in ("x", "position_ids", "cos", "sin")]
        shapes = [inputs[0].shape]
    op, full = _attrs(key, attrs, len(shapes))
    try:
        want = op.reference([None if a is None else a.copy() for a in inputs], dict(full))
    except RuntimeShapeError as e:
        want = e
    mem = Memory()
    ins = [mem.arg(a) for a in inputs]
    outs = [mem.arg(np.empty(s, case.dtype), poison=True) for s in shapes]
    record = mem.alloc(gf.FAULT_RECORD_BYTES)
    mem.bytes[record:record + gf.FAULT_RECORD_BYTES] = 0
    label = LABEL.format(op=op_type)
    target = gk.Target(sm_count=8, workspace=mem.alloc,
                       fault=lambda what: gf.FaultSite(record, sites.site(label, what)))
    ops = gk.BINDINGS[key].bind(ins, outs, full, target)
    emulate(mem, ops, case.dtype)
    address = mem.bytes.ctypes.data + record
    error = gf.take_fault(address, sites)
    assert gf.take_fault(address, sites) is None  # read once: cleared for the next run
    return [mem.get(o) for o in outs], error, want


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_gpu_launches_report_the_bad_value_and_the_good_feed_runs_clean(case):
    sites = gf.FaultSites()
    _, error, reference = _emulate(case, case.bad, sites)
    assert isinstance(reference, RuntimeShapeError)  # the reference rejects the feed too
    assert isinstance(error, gf.RangeFault), error
    assert re.fullmatch(case.gpu_error, str(error)), str(error)
    got, error, want = _emulate(case, case.good, sites)
    assert error is None
    for g, w in zip(got, want):
        _close(g, w, case.dtype)


def test_a_launch_outside_a_stream_reports_nowhere():
    case = rotary_position_case(F32, False)
    mem = Memory()
    ins = [mem.arg(case.bad[n]) for n in ("x", "position_ids", "cos", "sin")]
    ops = gk.BINDINGS["com.microsoft::RotaryEmbedding"].bind(ins, [mem.arg(case.bad["x"])],
                                                            _attrs("com.microsoft::RotaryEmbedding", {}, 1)[1],
                                                            gk.Target(sm_count=8))
    assert ops[0].params[-1].record == 0
    emulate(mem, ops, F32)  # clamped, and nothing to report into


# ---- the kernels' seqlens_k check against the reference's ------------------------------------------

def _gqa_inputs(rng, seq, capacity, seqlen, total):
    def u(*shape):
        return rng.uniform(-1, 1, shape).astype(F32)

    return [u(1, seq, 16), u(1, seq, 8), u(1, seq, 8), u(1, 1, capacity, 8), u(1, 1, capacity, 8),
            np.array([seqlen], np.int32), np.array(total, np.int32), None, None, None, None, None]


@pytest.mark.parametrize("seq,capacity,total,window", [
    (1, 5, 1, None), (1, 5, 4, None), (1, 5, 6, None), (3, 5, 3, None), (3, 5, 5, None), (3, 5, 8, None),
    (3, 0, 3, None), (1, 6, 9, 4), (3, 6, 12, 4),
])
def test_the_kernels_reject_exactly_the_seqlens_k_the_reference_rejects(seq, capacity, total, window):
    rng = np.random.default_rng(seq * 100 + total)
    attrs = dict(num_heads=2, kv_num_heads=1)
    if window is not None:
        attrs.update(local_window_size=window, sliding_window_cache=1)
    op, full = _attrs(GQA, attrs, 3)
    present = capacity if window is not None else max(total, capacity)
    verdicts = []
    for seqlen in range(-2, total + 4):
        ins = _gqa_inputs(rng, seq, capacity, seqlen, total)
        try:
            op.reference(ins, dict(full))
            rejected = None
        except RuntimeShapeError as e:
            rejected = str(e)
        assert rejected is None or "seqlens_k" in rejected, rejected
        lay = gqa_layout(full, F32, ins[0].shape, ins[1].shape, ins[3].shape, present, None, False, None, False)
        code, bound = gqa_length_fault(lay.args, gqa_rows(lay.args, ins[5], total)[0])
        assert bool(code) == (rejected is not None), (seqlen, rejected, code, bound)
        verdicts.append(bool(code))
        if code == gf.FAULT_SEQLEN:
            assert rejected.endswith(f"is out of range [0, {bound})") or "past rows" in rejected, rejected
        elif code == gf.FAULT_SEQLEN_SHORT:
            assert f"too small for sequence_length {bound}" in rejected, rejected
    assert any(verdicts) and not all(verdicts)  # the sweep crosses the limits
