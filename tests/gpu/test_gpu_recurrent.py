"""RNN, GRU and LSTM on the CUDA device (kernels/recurrent.hip) end to end: one-node models through
hipep.InferenceSession(device="cuda"), claimed whole, three runs each (first run, bound replay, CUDA
graph replay) against ORT's CPU EP (f32 to 1e-5 relative, f16 to 1e-2; layout 1 against ORT's
layout-0 run on the transposed inputs): the cases of tests/recurrent_cases.py (directions, sequence
lengths with an empty entry, initial state, peepholes, clip, activations, linear_before_reset,
input_forget, outputs left out, f16), wider layers whose weights are scaled as trained ones are,
and the largest hidden size a launch's shared memory holds (tests/unit/test_recurrent_on_host.py
runs the same kernels on the host, and checks what the binding leaves). A sequence length out of
range is an error naming the node, and the session runs on."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP

import hipep
from hipep.runtime.cuda import cuda_status
from gpu_checks import check_on_cuda
from recurrent_cases import BI, CASES, Case

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)


def lengths(batch: int, seq: int) -> tuple:
    """The whole sequence, an empty one, and lengths spread over [0, seq]."""
    return tuple(seq if b == 0 else 0 if b == 1 else (b * 7) % (seq + 1) for b in range(batch))


WIDE = [
    Case("LSTM", "lstm-wide", BI, seq=24, batch=16, input=64, hidden=256, lens=lengths(16, 24), initial=True,
         peepholes=True, scale=1 / np.sqrt(320)),
    Case("GRU", "gru-wide", {"linear_before_reset": 1}, seq=32, batch=8, input=128, hidden=384,
         lens=lengths(8, 32), initial=True, scale=1 / np.sqrt(512)),
    Case("GRU", "gru-wide-reverse", {"direction": "reverse"}, seq=20, batch=4, input=96, hidden=200,
         lens=lengths(4, 20), scale=1 / np.sqrt(296)),
    Case("RNN", "rnn-wide-batch-first", {**BI, "layout": 1}, seq=40, batch=5, input=48, hidden=300,
         lens=lengths(5, 40), initial=True, scale=1 / np.sqrt(348)),
    Case("LSTM", "lstm-wide-f16", {**BI, "layout": 1}, seq=16, batch=6, input=80, hidden=160, lens=lengths(6, 16),
         initial=True, peepholes=True, scale=1 / np.sqrt(240), dtype=np.float16),
    Case("GRU", "gru-wide-f16", {}, seq=12, batch=3, input=64, hidden=128, lens=lengths(3, 12), initial=True,
         scale=1 / np.sqrt(192), dtype=np.float16),
    # 6 x 2048 floats: all of the 48 KiB a launch gets without the opt-in
    Case("LSTM", "lstm-hidden-2048", {}, seq=3, batch=2, input=16, hidden=2048, lens=(3, 2), initial=True,
         scale=1 / np.sqrt(2064)),
]


@pytest.mark.parametrize("case", CASES + WIDE, ids=[c.id for c in CASES + WIDE])
def test_matches_the_cpu_ep(case):
    ins = case.inputs(11)
    check_on_cuda(case.model(), case.feeds(ins), TP.FLOAT16 if case.dtype == np.float16 else TP.FLOAT,
                  claimed=True, want=case.ort_outputs(ins))


def test_a_sequence_length_out_of_range_names_the_node_and_the_session_runs_on():
    case = Case("GRU", "bad-length", {"direction": "bidirectional"}, lens=(4, 1, 2), initial=True)
    sess = hipep.InferenceSession(case.model(), device="cuda")
    ins = case.inputs()
    ins[4] = np.array([1, 5, 2], np.int32)
    with pytest.raises(Exception, match=r"node 'rnn' \(GRU\): input 4 \(sequence_lens\): sequence length 5 is out of "
                                        r"range \[0, 4\]"):
        sess.run(None, case.feeds(ins))
    ins[4] = np.array([4, 0, 2], np.int32)
    for _ in range(2):
        for g, w in zip(sess.run(None, case.feeds(ins)), case.ort_outputs(ins)):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
