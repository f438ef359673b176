"""Unique on hipep's CPU reference device in a real ORT session: ORT's CPU EP's four outputs for
values and for slices along an axis, sorted or in order of first occurrence, with repeats; a node
asking for Y alone; the GPU leaves it (no kernel)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T, helper as h

import hipep

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


def test_on_a_gpu_it_is_left_with_the_reason():
    (rejection,) = hipep.explain(unique_model(T.FLOAT, (6, 4)), device="cuda").rejections
    assert "no kernel for cuda" in rejection.line()
