"""Unique on hipep's CPU reference device in a real ORT session: ORT's CPU EP's four outputs for
values and for slices along an axis, sorted or in order of first occurrence, with repeats; a node
asking for Y alone. On a GPU device hipep claims it where the host knows the input's values (the
shape program sizes the outputs; kernels/unique.hip computes them), and leaves it with the reason
where the device computes the input, the input is more than the host reads, or it is a constant
larger than the kernel's pairwise comparison takes."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T, helper as h

import hipep
from hipep.runtime.gpu_unique import MAX_ELEMENTS

from helpers import assignment, cpu_ep, cpu_session, make_model, session, tensor

OUTS = ["y", "first", "inverse", "counts"]


def unique_model(elem, shape, outputs=OUTS, **attrs):
    node = h.make_node("Unique", ["x"], outputs, name="unique", **attrs)
    return make_model([node], [tensor("x", elem, list(shape))],
                      [tensor(o, elem if o == "y" else T.INT64, None) for o in outputs], opset=11)


@pytest.mark.parametrize("elem,dtype", [(T.FLOAT, np.float32), (T.INT64, np.int64), (T.INT8, np.int8)])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("sort", [0, 1])
def test_outputs_are_the_cpu_eps(rng, elem, dtype, axis, sort):
    attrs = {"sorted": sort} | ({} if axis is None else {"axis": axis})
    model = unique_model(elem, (6, 4), **attrs)
    sess = session(model, disable_fallback=True)
    assert assignment(sess) == {cpu_ep(): [["unique"]]}
    x = rng.integers(-2, 3, (6, 4)).astype(dtype)
    x[3] = x[1]  # a repeated row, for the axis-0 cases
    for got, want in zip(sess.run(None, {"x": x}), cpu_session(model).run(None, {"x": x})):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_a_node_asking_for_the_values_alone(rng):
    model = unique_model(T.FLOAT, (20,), outputs=["y"], sorted=0)
    x = rng.integers(0, 5, 20).astype(np.float32)
    np.testing.assert_array_equal(session(model, disable_fallback=True).run(None, {"x": x})[0],
                                  cpu_session(model).run(None, {"x": x})[0])


@pytest.mark.parametrize("elem", [T.FLOAT, T.DOUBLE, T.INT64, T.INT8])
@pytest.mark.parametrize("axis", [None, 0, -1])
def test_on_a_gpu_it_is_claimed_where_the_host_knows_its_input(elem, axis):
    attrs = {"sorted": 0} | ({} if axis is None else {"axis": axis})
    report = hipep.explain(unique_model(elem, (6, 4), **attrs), device="cuda")
    assert not report.rejections and report.claimed_count == 1, report.format()


def test_on_a_gpu_it_is_left_with_the_reason_where_the_kernel_does_not_apply():
    # its input computed on the device: the outputs' lengths are unknown before the launches
    nodes = [h.make_node("Relu", ["x"], ["r"], name="relu"), h.make_node("Unique", ["r"], OUTS, name="unique")]
    model = make_model(nodes, [tensor("x", T.FLOAT, [6, 4])], [tensor(o, T.FLOAT if o == "y" else T.INT64, None)
                                                                for o in OUTS], opset=11)
    (rejection,) = hipep.explain(model, device="cuda").rejections
    assert rejection.node.op_type == "Unique"
    assert "depends on the value of input 0 'r', computed on the device by node" in rejection.line()
    # an input handed in that is more than the host reads
    (rejection,) = hipep.explain(unique_model(T.FLOAT, (10, 10)), device="cuda").rejections
    assert "a float32 tensor of 100 elements, more than the host reads" in rejection.line()
    # a constant beyond the one block's pairwise comparison
    big = h.make_tensor("c", T.FLOAT, [MAX_ELEMENTS + 1], np.zeros(MAX_ELEMENTS + 1, np.float32))
    model = make_model([h.make_node("Unique", ["c"], OUTS, name="unique")], [],
                       [tensor(o, T.FLOAT if o == "y" else T.INT64, None) for o in OUTS], [big], opset=11)
    (rejection,) = hipep.explain(model, device="cuda").rejections
    assert f"no kernel for cuda: Unique (an input of {MAX_ELEMENTS + 1} elements" in rejection.line()
