"""RNN's, GRU's and LSTM's kernels (kernels/recurrent.hip) on the CPU: g++ compiles the unchanged
source against the host stand-in for the CUDA headers, and the launch the binding gives runs over
host memory (every thread of a block a host thread, the warps' shuffles and the block's barriers
real), against ORT's CPU EP and the registry's reference: the cases of tests/recurrent_cases.py
(directions, sequence lengths with an empty entry, initial state, peepholes, clip, activations,
linear_before_reset, input_forget, layout 1, outputs left out, f16) and wider ones whose gate rows
outnumber a block's warps and whose rows outrun a warp's lanes. A length out of range fills the
fault record with an error naming the node, and its entry comes out as an empty sequence's. The
cases are claimed whole on a GPU; the binding leaves f64 and hidden sizes past a launch's shared
memory with the reason. Skipped without g++."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import hipep
from hipep.ops.registry import OUTPUT_COUNT, SINCE_VERSION
from hipep.runtime import gpu_faults as gf
from hipep.runtime import gpu_kernels as gk

from recurrent_cases import BI, CASES, Case
from unit.host_kernels import HostMemory, compile_module, launch, run_on_host

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    return {"warp": 32, "recurrent": compile_module(tmp_path_factory.mktemp("recurrent"), "recurrent", 32)}


WIDE = [
    Case("RNN", "rnn-wide", BI, seq=3, batch=2, input=40, hidden=37, lens=(3, 2), initial=True),
    Case("GRU", "gru-wide", BI, seq=3, batch=2, input=35, hidden=33, lens=(1, 3), initial=True),
    Case("GRU", "gru-wide-linear-before-reset", {"linear_before_reset": 1, "layout": 1}, seq=2, batch=2, input=33,
         hidden=34, initial=True),
    Case("LSTM", "lstm-wide", {"direction": "reverse"}, seq=3, batch=2, input=40, hidden=33, lens=(3, 2),
         initial=True, peepholes=True),
]
TOL = {np.float32: dict(rtol=1e-5, atol=1e-6), np.float16: dict(rtol=2e-3, atol=1e-3)}
# Against the registry's numpy reference, whose f32 products go through numpy's BLAS in an order of
# its own (which changes with the numpy build): three steps of a 37-wide recurrence then differ from
# the kernel's, and from the CPU EP's, by up to ~2e-6 near zero.
REF_TOL = {np.float32: dict(rtol=1e-5, atol=5e-6), np.float16: TOL[np.float16]}


def run_case(libraries, case: Case, ins):
    names = case.output_names
    attrs = {**case.node_attrs(), SINCE_VERSION: case.opset}
    drop = [k for k, n in enumerate(names) if not n]
    views, want, ops = run_on_host(libraries, f"::{case.op}", ins, attrs, n_out=len(names), drop=drop, sm_count=1)
    assert [o.entry for o in ops] == [f"hipep_{case.op.lower()}_{'f16' if case.dtype == np.float16 else 'f32'}"]
    assert ops[0].grid == (case.batch, case.directions, 1)
    return [v for k, v in enumerate(views) if k not in drop], [w for k, w in enumerate(want) if k not in drop]


@pytest.mark.parametrize("case", CASES + WIDE, ids=[c.id for c in CASES + WIDE])
def test_the_kernel_matches_the_cpu_ep(libraries, case):
    ins = case.inputs(7)
    got, ref = run_case(libraries, case, ins)
    want = case.ort_outputs(ins)
    assert len(got) == len(want)
    for g, w, r in zip(got, want, ref):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), **TOL[case.dtype])
        np.testing.assert_allclose(g.astype(np.float32), r.astype(np.float32), **REF_TOL[case.dtype])


@pytest.mark.parametrize("bad", [5, -1])
def test_a_length_out_of_range_is_reported_for_the_node(libraries, bad):
    case = Case("LSTM", "bad-length", lens=(2, bad, 4), initial=True)
    ins = case.inputs()
    mem = HostMemory()
    record = mem.put(np.zeros(gf.FAULT_RECORD_BYTES, np.uint8))[0].ptr
    sites = gf.FaultSites()
    label = "node 'rnn' (LSTM)"
    args = [None if a is None else mem.put(a)[0] for a in ins]
    outs = [mem.put(np.full(shape, np.nan, np.float32)) for shape in [(4, 1, 3, 4), (1, 3, 4), (1, 3, 4)]]
    target = gk.Target(sm_count=1, warp_size=32, fault=lambda what: gf.FaultSite(record, sites.site(label, what)))
    attrs = {**case.node_attrs(), "direction": "forward", "activations": None, "activation_alpha": None,
             "activation_beta": None, "clip": None, "layout": 0, "input_forget": 0, OUTPUT_COUNT: 3, SINCE_VERSION: 22}
    for op in gk.binding_for("::LSTM").bind(args, [o[0] for o in outs], attrs, target):
        launch(libraries["recurrent"], op)
    error = gf.take_fault(record, sites)
    assert isinstance(error, gf.RangeFault)
    assert str(error) == (f"{label}: input 4 (sequence_lens): sequence length {bad} is out of range [0, 4] (the time "
                          f"axis' extent)")
    y, yh, yc = (o[1] for o in outs)
    assert not y[:, :, 1].any() and not yh[:, 1].any() and not yc[:, 1].any()  # as an empty sequence
    ins[4] = np.array([2, 0, 4], np.int32)
    want = case.ort_outputs(ins)
    for g, w in zip((y, yh, yc), want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_what_the_binding_leaves():
    attrs = {"hidden_size": 4}
    assert gk.kernel_reason("::GRU", attrs, ["float64", "float64", "float64"]) == \
        "no kernel for cuda: GRU (element type float64; the kernel runs f32 and f16)"
    assert gk.kernel_reason("::RNN", attrs, ["float16", "float16", "float16"]) is None
    assert gk.kernel_reason("::LSTM", {"hidden_size": 2048}, ["float32"] * 3) is None  # 6 x 2048 floats: 48 KiB
    why = gk.kernel_reason("::LSTM", {"hidden_size": 2049}, ["float32"] * 3)
    assert why == ("no kernel for cuda: LSTM (hidden_size 2049: the kernel keeps 6 x hidden_size floats of state and "
                   "gate values in a block's shared memory, 49176 bytes, more than the 48 KiB a launch gets)")


def test_the_cases_are_claimed_whole_on_a_gpu_and_a_hidden_size_past_shared_memory_is_left():
    for case in CASES + WIDE:
        report = hipep.explain(case.model(), device="cuda")
        assert not report.rejections, (case.id, [r.reason for r in report.rejections])
    report = hipep.explain(Case("LSTM", "too-wide", hidden=2049, input=4, seq=2, batch=1).model(), device="cuda")
    assert [r.node.name for r in report.rejections] == ["rnn"]
    assert report.rejections[0].reason.startswith("no kernel for cuda: LSTM (hidden_size 2049: the kernel keeps 6 x "
                                                  "hidden_size floats")


def test_outputs_nobody_reads_launch_nothing():
    case = Case("GRU", "none")
    mem = HostMemory()
    ins = [None if a is None else mem.put(a)[0] for a in case.inputs()]
    attrs = {**case.node_attrs(), "direction": "forward", "activations": None, "activation_alpha": None,
             "activation_beta": None, "clip": None, "layout": 0, "linear_before_reset": 0, OUTPUT_COUNT: 2,
             SINCE_VERSION: 22}
    assert gk.binding_for("::GRU").bind(ins, [None, None], attrs, gk.Target(sm_count=1)) == []
