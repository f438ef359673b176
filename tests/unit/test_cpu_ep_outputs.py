"""helpers.cpu_ep_outputs, the reference of the quantized convolution and matmul tests: ORT's CPU EP
on an int8 model moved to uint8 gives the original model's results, and where this processor's MLAS
u8*s8 kernel saturates its pair sums the reference has the exact ones."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

from helpers import _as_unsigned, _shift, cpu_ep_outputs, cpu_session, make_model, mlas_u8s8_saturates, tensor

F32 = np.float32
ELEM = {np.dtype(np.uint8): TP.UINT8, np.dtype(np.int8): TP.INT8}


def _model(op, values, y_elem):
    names = [k if v is not None else "" for k, v in values.items()]
    while not names[-1]:
        names.pop()
    inputs = [tensor(k, ELEM.get(v.dtype, TP.FLOAT), list(v.shape)) for k, v in values.items() if v is not None]
    node = helper.make_node(op, names, ["y"], name="q")
    return make_model([node], inputs, [tensor("y", y_elem, None)], opset=10), {
        k: v for k, v in values.items() if v is not None}


def _small(rng, dtype, shape):
    """Integers small enough that no kernel's int16 pair sum saturates (|2 * 64 * 127| < 2**15)."""
    lo, hi = (0, 64) if dtype == np.uint8 else (-32, 32)
    return rng.integers(lo, hi, shape).astype(dtype)


@pytest.mark.parametrize("ta,tb", [(np.uint8, np.int8), (np.int8, np.uint8), (np.int8, np.int8)])
@pytest.mark.parametrize("zero_points", [True, False])
def test_conv_integer_moved_to_uint8_gives_the_same_sums(ta, tb, zero_points):
    rng = np.random.default_rng(3)
    values = {"x": _small(rng, ta, (1, 3, 6, 6)), "w": _small(rng, tb, (4, 3, 3, 3)),
              "xz": np.asarray(_small(rng, ta, ())) if zero_points else None,
              "wz": np.asarray(_small(rng, tb, ())) if zero_points else None}
    model, feeds = _model("ConvInteger", values, TP.INT32)
    moved, moved_feeds, shifted = _as_unsigned(model, feeds)
    assert not shifted and all(v.dtype == np.uint8 for v in moved_feeds.values())
    np.testing.assert_array_equal(cpu_session(moved).run(None, moved_feeds)[0], cpu_session(model).run(None, feeds)[0])


@pytest.mark.parametrize("ta,tb", [(np.uint8, np.int8), (np.int8, np.int8)])
def test_qlinear_matmul_moved_to_uint8_gives_the_same_outputs(ta, tb):
    rng = np.random.default_rng(4)
    values = {"a": _small(rng, ta, (5, 16)), "a_scale": np.asarray(0.05, F32), "a_zp": np.asarray(_small(rng, ta, ())),
              "b": _small(rng, tb, (16, 7)), "b_scale": np.asarray(0.03, F32), "b_zp": np.asarray(_small(rng, tb, ())),
              "y_scale": np.asarray(0.02, F32), "y_zp": np.asarray(_small(rng, ta, ()))}
    model, feeds = _model("QLinearMatMul", values, ELEM[np.dtype(ta)])
    moved, moved_feeds, shifted = _as_unsigned(model, feeds)
    assert shifted == (["y"] if ta == np.int8 else [])
    got = cpu_session(moved).run(None, moved_feeds)[0]
    want = cpu_session(model).run(None, feeds)[0]
    np.testing.assert_array_equal(_shift(got) if shifted else got, want)
    assert len(np.unique(want)) > 10  # the requantized outputs spread over the range, not all clamped


def test_the_reference_has_the_exact_sums_where_mlas_saturates():
    """255 * 127 + 255 * 127 does not fit an int16: MLAS's AVX2 kernel gives 32767 for each pair."""
    a, b = np.full((2, 64), 255, np.uint8), np.full((64, 3), 127, np.int8)
    b[:, 1], b[::2, 2] = -128, -128
    model, feeds = _model("MatMulInteger", {"a": a, "b": b}, TP.INT32)
    exact = a.astype(np.int64) @ b.astype(np.int64)
    np.testing.assert_array_equal(cpu_ep_outputs(model, feeds)[0], exact)
    direct = cpu_session(model).run(None, feeds)[0]
    assert np.array_equal(direct, exact) != mlas_u8s8_saturates()
