"""ReverseSequence on hipep's CPU reference device in a real ORT session: ORT's CPU EP's values for
both axis orders; a length out of range is an error naming the node and the length, and the
session runs on."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T, helper as h

from helpers import assert_matches_cpu, assignment, cpu_ep, make_model, session, tensor


def reverse_model(shape, batch_axis, time_axis, elem=T.FLOAT):
    return make_model([h.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=batch_axis,
                                   time_axis=time_axis, name="rs")],
                      [tensor("x", elem, list(shape)), tensor("lens", T.INT64, [shape[batch_axis]])],
                      [tensor("y", elem, list(shape))], opset=10)


@pytest.mark.parametrize("shape,batch_axis,time_axis", [((4, 3, 2), 1, 0), ((3, 5, 2, 2), 0, 1)])
def test_reverse_sequence_gives_the_cpu_eps_values(rng, shape, batch_axis, time_axis):
    model = reverse_model(shape, batch_axis, time_axis)
    sess = session(model, disable_fallback=True)
    assert assignment(sess) == {cpu_ep(): [["rs"]]}
    lens = rng.integers(0, shape[time_axis] + 1, shape[batch_axis]).astype(np.int64)
    lens[0], lens[-1] = 0, shape[time_axis]
    assert_matches_cpu(sess, model, {"x": rng.standard_normal(shape).astype(np.float32), "lens": lens}, rtol=0, atol=0)


def test_a_length_out_of_range_names_the_node_and_the_session_runs_on(rng):
    model = reverse_model((4, 3), 1, 0)
    sess = session(model, disable_fallback=True)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    with pytest.raises(Exception, match=r"node 'rs' \(ReverseSequence\).*sequence length 5 of batch entry 2 is out "
                                        r"of range \[0, 4\]"):
        sess.run(None, {"x": x, "lens": np.array([1, 2, 5], np.int64)})
    assert_matches_cpu(sess, model, {"x": x, "lens": np.array([1, 2, 4], np.int64)}, rtol=0, atol=0)
