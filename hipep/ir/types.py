"""Types: hipep.graph.TensorType <-> xDSL builtin types, and THE shape merge rule.

hipep's TensorType (plain Python, floor 1) spells a dimension as an int (static), a str
(symbolic) or None (unknown) and an unknown rank as shape None. In the IR both symbolic and
unknown extents become DYNAMIC_INDEX (`?`) and an unknown rank becomes an UnrankedTensorType
(`tensor<*xf32>`). Going back, a dynamic extent becomes None (what shape rules read).

`refine_type` is the one merge rule every pass uses when a computed type meets a stored one
(ARCHITECTURE.md, "Shape merge (refine, never widen)").
"""
from __future__ import annotations

from typing import Union

import numpy as np

from xdsl.dialects.builtin import (DYNAMIC_INDEX, BytesAttr, ComplexType, DenseIntOrFPElementsAttr,
                                   Float4E2M1FNType, Float8E4M3FNType, Float8E4M3FNUZType,
                                   Float8E5M2FNUZType, Float8E5M2Type, IntegerType, MemRefType, NoneType,
                                   Signedness,
                                   TensorType, UnrankedTensorType, bf16, f16, f32, f64)
from xdsl.ir import Attribute

from ..dtypes import elem_type_for
from ..errors import ModelError
from ..graph import TensorType as HipTensorType
from ..graph import elem_type_name

IRType = Union[TensorType, UnrankedTensorType]

# ONNX TensorProto element type -> xDSL element type. ONNX integers are signed: signless iN in the
# IR (MLIR's convention); unsigned ONNX types are uiN; bool is i1.
_ELEM_TO_IR: dict[int, Attribute] = {
    1: f32, 2: IntegerType(8, Signedness.UNSIGNED), 3: IntegerType(8),
    4: IntegerType(16, Signedness.UNSIGNED), 5: IntegerType(16), 6: IntegerType(32),
    7: IntegerType(64), 9: IntegerType(1), 10: f16, 11: f64,
    12: IntegerType(32, Signedness.UNSIGNED), 13: IntegerType(64, Signedness.UNSIGNED),
    14: ComplexType(f32), 15: ComplexType(f64), 16: bf16, 17: Float8E4M3FNType(),
    18: Float8E4M3FNUZType(), 19: Float8E5M2Type(), 20: Float8E5M2FNUZType(),
    21: IntegerType(4, Signedness.UNSIGNED), 22: IntegerType(4), 23: Float4E2M1FNType(),
}
_IR_TO_ELEM: dict[Attribute, int] = {v: k for k, v in _ELEM_TO_IR.items()}

# The element type of a value whose ONNX element type is unknown (`tensor<*xnone>`): only node
# results may have it (shape inference fills it in); refine_type treats it as "agrees with any".
UNKNOWN_ELEMENT = NoneType()

# numpy dtypes whose bytes are the IR's dense layout as is (i1 is packed differently: see below).
_NP_FOR_ELEM: dict[int, np.dtype] = {
    1: np.dtype(np.float32), 2: np.dtype(np.uint8), 3: np.dtype(np.int8), 4: np.dtype(np.uint16),
    5: np.dtype(np.int16), 6: np.dtype(np.int32), 7: np.dtype(np.int64), 9: np.dtype(np.bool_),
    10: np.dtype(np.float16), 11: np.dtype(np.float64), 12: np.dtype(np.uint32),
    13: np.dtype(np.uint64),
}


def element_type(elem_type: int) -> Attribute:
    """The IR element type of an ONNX element type (ModelError if the IR has none)."""
    try:
        return _ELEM_TO_IR[elem_type]
    except KeyError:
        raise ModelError(f"element type {elem_type_name(elem_type)} has no IR equivalent") from None


def onnx_elem_type(element: Attribute) -> int:
    """The ONNX element type of an IR element type (0 if there is none)."""
    return _IR_TO_ELEM.get(element, 0)


def to_ir_type(t: HipTensorType, allow_unknown_element: bool = False) -> IRType:
    """hipep TensorType -> TensorType (static extents kept, symbolic/unknown -> ?) or
    UnrankedTensorType (unknown rank). Raises ModelError for non-tensors, and for an unknown
    element type unless `allow_unknown_element` (then the element is UNKNOWN_ELEMENT)."""
    if t.kind != "tensor":
        raise ModelError(f"a {t.kind} value has no IR type (hipep supports tensors only)")
    if t.elem_type == 0:
        if not allow_unknown_element:
            raise ModelError("a tensor with an unknown element type has no IR type")
        elem = UNKNOWN_ELEMENT
    else:
        elem = element_type(t.elem_type)
    if t.shape is None:
        return UnrankedTensorType(elem)
    return TensorType(elem, [d if isinstance(d, int) and d >= 0 else DYNAMIC_INDEX for d in t.shape])


def from_ir_type(t: Attribute) -> HipTensorType:
    """IR type -> hipep TensorType, dims int (static) or None (dynamic); shape None if unranked.
    Anything else (index, memref, ...) gives TensorType(kind='unknown')."""
    if isinstance(t, TensorType):
        return HipTensorType(onnx_elem_type(t.element_type),
                             tuple(None if d == DYNAMIC_INDEX else int(d) for d in t.get_shape()))
    if isinstance(t, UnrankedTensorType):
        return HipTensorType(onnx_elem_type(t.element_type), None)
    return HipTensorType(0, None, "unknown")


def shaped_dims(t: Attribute) -> tuple[int | None, ...] | None:
    """The extents of a tensor or buffer (memref) type, None for dynamic ones; None if unranked."""
    if isinstance(t, (TensorType, MemRefType)):
        return tuple(None if d == DYNAMIC_INDEX else int(d) for d in t.get_shape())
    return None


def dims_of(t: Attribute) -> tuple[int | None, ...] | None:
    """The extents of an IR tensor type, None for dynamic ones; None if unranked (or not a tensor)."""
    return shaped_dims(t) if isinstance(t, TensorType) else None


def make_tensor_type(element: Attribute, dims) -> IRType:
    """A tensor type from an element type and extents (None = dynamic); dims None = unranked."""
    if dims is None:
        return UnrankedTensorType(element)
    return TensorType(element, [DYNAMIC_INDEX if d is None else int(d) for d in dims])


def type_str(t) -> str:
    return str(t)


# ---- the merge rule ------------------------------------------------------------------------------

def refine_type(stored, inferred):
    """Merge an inferred type into a stored one: refine, never widen.

    Returns (new_type, diagnostic_or_None); new_type is `stored` itself when nothing changes.
      * per dimension, a static stored extent is kept and a dynamic one takes the inferred value;
      * both static and different: `stored` is returned unchanged with a diagnostic;
      * an unranked stored type takes the inferred type; an unranked inferred type changes nothing;
      * rank mismatch or element type mismatch: unchanged, with a diagnostic;
      * an unknown stored element type (UNKNOWN_ELEMENT, `none`) takes the inferred one.
    Works on xDSL types (TensorType / UnrankedTensorType) or on hipep.graph.TensorType (there an
    unknown element type, 0, agrees with any); `inferred` may be either, the result is `stored`'s
    kind. Examples: stored 1x?x12x32, inferred ?x?x?x? -> 1x?x12x32; stored ?x?x12x32, inferred
    1x5x?x32 -> 1x5x12x32.
    """
    hip_stored = isinstance(stored, HipTensorType)
    if hip_stored and not isinstance(inferred, HipTensorType):
        inferred = from_ir_type(inferred)
    s_elem, s_dims = _parts(stored)
    i_elem, i_dims = _parts(inferred, ir=not hip_stored)
    if s_elem is not None and i_elem is not None and s_elem != i_elem:
        return stored, _conflict(stored, inferred, "element types differ")
    elem = s_elem if s_elem is not None else i_elem
    if i_dims is None:  # an unranked inferred type changes no extent (only an unknown element)
        new_dims = s_dims
    elif s_dims is None:
        new_dims = i_dims
    else:
        if len(s_dims) != len(i_dims):
            return stored, _conflict(stored, inferred, f"rank {len(s_dims)} vs {len(i_dims)}")
        new_dims = []
        for axis, (s, i) in enumerate(zip(s_dims, i_dims)):
            if s is not None and i is not None and s != i:
                return stored, _conflict(stored, inferred, f"dimension {axis}: {s} vs {i}")
            new_dims.append(s if s is not None else i)
        new_dims = tuple(new_dims)
    if new_dims == s_dims and elem == s_elem:
        return stored, None
    if hip_stored:
        return HipTensorType(elem if elem is not None else 0, None if new_dims is None else tuple(new_dims),
                             stored.kind), None
    return make_tensor_type(elem if elem is not None else UNKNOWN_ELEMENT, new_dims), None


def join_types(a: Attribute, b: Attribute):
    """The most precise type both `a` and `b` are instances of (If results: then/else yields).
    Per dimension equal static extents stay, others become dynamic; unranked if the ranks differ.
    None if the element types differ or either is not a tensor type."""
    if not isinstance(a, (TensorType, UnrankedTensorType)) or not isinstance(b, (TensorType, UnrankedTensorType)):
        return None
    if a.element_type != b.element_type:
        if _known(a.element_type) is not None and _known(b.element_type) is not None:
            return None
        a = a if _known(a.element_type) is not None else b
    da, db = dims_of(a), dims_of(b)
    if da is None or db is None or len(da) != len(db):
        return UnrankedTensorType(a.element_type)
    return make_tensor_type(a.element_type, [x if x == y else None for x, y in zip(da, db)])


def conflicts(stored: Attribute, inferred: Attribute) -> bool:
    """True if the two types cannot describe the same value (refine_type would diagnose)."""
    return refine_type(stored, inferred)[1] is not None


def _parts(t, ir: bool = False):
    """(element or None if unknown, dims with None for dynamic, or None if unranked); with `ir`,
    a hipep type's element is given as the IR element type."""
    if isinstance(t, HipTensorType):
        elem = t.elem_type or None
        if ir and elem is not None:
            elem = _ELEM_TO_IR.get(elem, elem)
        return elem, (None if t.shape is None else
                                       tuple(d if isinstance(d, int) and d >= 0 else None for d in t.shape))
    if isinstance(t, TensorType):
        return _known(t.element_type), dims_of(t)
    if isinstance(t, UnrankedTensorType):
        return _known(t.element_type), None
    raise TypeError(f"not a tensor type: {t}")


def _known(element: Attribute):
    return None if element == UNKNOWN_ELEMENT else element


def _conflict(stored, inferred, why: str) -> str:
    return f"inferred type {inferred} conflicts with stored type {stored} ({why}); type left unchanged"


# ---- dense constants -----------------------------------------------------------------------------

def dense_attr(value: np.ndarray, elem_type: int | None = None) -> DenseIntOrFPElementsAttr:
    """A DenseIntOrFPElementsAttr holding `value` (ModelError for dtypes the IR cannot hold)."""
    a = np.asarray(value)
    if elem_type is None:
        try:
            elem_type = elem_type_for(a.dtype)
        except KeyError:
            raise ModelError(f"a constant of dtype {a.dtype} cannot be held in the IR") from None
    dtype = _NP_FOR_ELEM.get(elem_type)
    if dtype is None:
        raise ModelError(f"a constant of element type {elem_type_name(elem_type)} cannot be held in the IR")
    ty = TensorType(element_type(elem_type), list(a.shape))
    if elem_type == 9:  # i1 is packed one byte per element as 0 / -1
        return DenseIntOrFPElementsAttr.from_list(ty, [int(v) for v in a.reshape(-1)])
    return DenseIntOrFPElementsAttr(ty, BytesAttr(np.ascontiguousarray(a, dtype.newbyteorder("<")).tobytes()))


def dense_value(attr: DenseIntOrFPElementsAttr) -> np.ndarray | None:
    """The numpy value of a dense attribute (None for element types numpy cannot hold)."""
    elem = onnx_elem_type(attr.get_element_type())
    dtype = _NP_FOR_ELEM.get(elem)
    if dtype is None:
        return None
    shape = attr.get_shape()
    raw = attr.data.data
    if elem == 9:
        flat = np.frombuffer(raw, np.int8) != 0
    else:
        flat = np.frombuffer(raw, dtype.newbyteorder("<")).astype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    if flat.size == 1 and n != 1:  # a splat
        flat = np.repeat(flat, n)
    return flat.reshape(shape).copy()
