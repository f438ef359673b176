"""hipep.ir.types: conversions and THE merge rule (refine, never widen)."""
from __future__ import annotations

import numpy as np
import pytest

from hipep.errors import ModelError
from hipep.graph import TensorType as T
from hipep.ir.types import (dense_attr, dense_value, from_ir_type, join_types, make_tensor_type,
                            refine_type, to_ir_type)

F32, F16, I64, BOOL = 1, 10, 7, 9


def ir(shape, elem=F32):
    return to_ir_type(T(elem, None if shape is None else tuple(shape)))


# (stored, inferred, expected, diagnostic expected)
CASES = [
    # the two examples of ARCHITECTURE.md
    ((1, None, 12, 32), (None, None, None, None), (1, None, 12, 32), False),
    ((None, None, 12, 32), (1, 5, None, 32), (1, 5, 12, 32), False),
    # static agrees with static
    ((2, 3), (2, 3), (2, 3), False),
    # dynamic takes the inferred extent, static stays
    ((None, 3), (2, None), (2, 3), False),
    # conflicts: unchanged, diagnosed
    ((2, 3), (2, 4), (2, 3), True),
    ((1, None, 12, 32), (1, 7, 12, 33), (1, None, 12, 32), True),
    # rank mismatch
    ((2, 3), (2, 3, 1), (2, 3), True),
    # unranked stored takes the inferred type
    (None, (4, None), (4, None), False),
    # unranked inferred changes nothing
    ((None, 5), None, (None, 5), False),
    (None, None, None, False),
    # scalars
    ((), (), (), False),
]


@pytest.mark.parametrize("stored,inferred,expected,diagnosed", CASES)
def test_refine_type_ir(stored, inferred, expected, diagnosed):
    new, diag = refine_type(ir(stored), ir(inferred))
    assert new == ir(expected)
    assert (diag is not None) == diagnosed
    if diagnosed:  # the diagnostic names both types
        assert str(ir(stored)) in diag and str(ir(inferred)) in diag


@pytest.mark.parametrize("stored,inferred,expected,diagnosed", CASES)
def test_refine_type_hipep_types(stored, inferred, expected, diagnosed):
    st = T(F32, None if stored is None else tuple(stored))
    new, diag = refine_type(st, T(F32, None if inferred is None else tuple(inferred)))
    assert new.shape == (None if expected is None else tuple(expected))
    assert (diag is not None) == diagnosed


def test_refine_type_mixed_kinds_and_unknown_element():
    # an inferred hipep type with an unknown element type (0) agrees with any element type
    new, diag = refine_type(ir((None, 3)), T(0, (2, None)))
    assert diag is None and new == ir((2, 3))
    new, diag = refine_type(T(F32, ("batch", 3)), ir((2, 3)))
    assert diag is None and new.shape == (2, 3) and new.elem_type == F32


def test_refine_type_element_mismatch_is_diagnosed():
    stored = ir((2, 3), F32)
    new, diag = refine_type(stored, ir((2, 3), F16))
    assert new is stored and "element" in diag
    new, diag = refine_type(ir(None, F32), ir((2,), I64))
    assert new == ir(None, F32) and diag


def test_refine_returns_stored_object_when_nothing_changes():
    stored = ir((1, None))
    assert refine_type(stored, ir((None, None)))[0] is stored


def test_conversions_keep_static_extents():
    t = to_ir_type(T(F16, (1, "seq", None, 64)))
    assert str(t) == "tensor<1x?x?x64xf16>"
    assert from_ir_type(t) == T(F16, (1, None, None, 64))
    assert str(to_ir_type(T(BOOL, None))) == "tensor<*xi1>"
    assert str(to_ir_type(T(I64, ()))) == "tensor<i64>"
    assert str(to_ir_type(T(2, (3,)))) == "tensor<3xui8>"
    assert str(to_ir_type(T(16, (3,)))) == "tensor<3xbf16>"
    for elem in (1, 2, 3, 5, 6, 7, 9, 10, 11, 16):
        assert from_ir_type(to_ir_type(T(elem, (2,)))).elem_type == elem


def test_conversion_errors():
    with pytest.raises(ModelError, match="unknown element type"):
        to_ir_type(T(0, (2,)))
    with pytest.raises(ModelError, match="sequence"):
        to_ir_type(T(1, None, "sequence"))
    with pytest.raises(ModelError, match="string"):
        to_ir_type(T(8, (2,)))


def test_join_types():
    assert join_types(ir((2, 3)), ir((2, 4))) == ir((2, None))
    assert join_types(ir((2, 3)), ir((2, 3))) == ir((2, 3))
    assert join_types(ir((2, 3)), ir((2,))) == ir(None)
    assert join_types(ir((2,), F32), ir((2,), F16)) is None
    assert make_tensor_type(ir(()).element_type, None) == ir(None)


@pytest.mark.parametrize("value", [
    np.array([[1, -2], [3, 4]], np.int64), np.array([True, False, True]), np.float16(2.5),
    np.array([1.5, -0.25], np.float32), np.array([7], np.int32), np.array([200, 3], np.uint8),
    np.zeros((0, 3), np.float32), np.array(3.0, np.float64),
])
def test_dense_round_trip(value):
    value = np.asarray(value)
    back = dense_value(dense_attr(value))
    assert back.dtype == value.dtype and back.shape == value.shape
    np.testing.assert_array_equal(back, value)


def test_unknown_element_takes_the_inferred_one():
    from hipep.ir.types import UNKNOWN_ELEMENT, make_tensor_type

    stored = make_tensor_type(UNKNOWN_ELEMENT, None)
    assert str(stored) == "tensor<*xnone>"
    new, diag = refine_type(stored, ir((2, None)))
    assert diag is None and new == ir((2, None))
    new, diag = refine_type(make_tensor_type(UNKNOWN_ELEMENT, (2, None)), ir(None, I64))
    assert diag is None and new == ir((2, None), I64)
    assert from_ir_type(stored).elem_type == 0
    assert to_ir_type(T(0, (3,)), allow_unknown_element=True) == make_tensor_type(UNKNOWN_ELEMENT, (3,))
