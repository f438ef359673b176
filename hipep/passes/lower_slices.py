"""hip-lower-slices: Slice and Split with compile-time bounds -> tensor.extract_slice.

ARCHITECTURE.md, "Slice/Split lowering": build `tensor.extract_slice` with the type its static
sizes imply, and `tensor.cast` to the op's declared result type when the two differ.

  * hip.slice whose starts/ends/axes/steps are known at compile time (attributes in opset 1,
    operands defined by hip.constant in opset 10+) and whose steps are all positive. A sliced
    axis must have a static extent, except the "whole axis" slice (start 0, end >= 2**31 - 1,
    step 1). Unsliced axes keep their extent: static, or a `tensor.dim` SSA size if dynamic.
  * hip.split whose sizes are known at compile time (attribute `split`, a hip.constant operand,
    or none: equal parts, or `num_outputs` chunks) along an axis with a static extent: one
    extract_slice per output (+ tensor.cast where the declared type leaves the axis dynamic).
  * Anything else (run-time bounds) stays as it is and is computed at run time.
A declared type whose static extents contradict the implied ones is not lowered (a diagnostic is
recorded, as hip-infer-shapes does).

Option `cast=False` is FOR TESTS ONLY: users get the implied type directly, without the
tensor.cast back to the declared type (the field bug this rule prevents).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import api
from ..ir.api import (Context, IndexType, IntegerAttr, ModuleOp, ModulePass, Operation, Rewriter,
                      SSAValue, TensorType, UnrankedTensorType)
from ..ir.dialect import ConstantOp, HipOnnxOp, op_class_for
from ..ir.types import dims_of, make_tensor_type, refine_type
from .infer_shapes import add_diagnostic

# An end at or beyond this means "to the end of the axis" (ONNX exporters use INT32/INT64 max).
_TO_END = 2**31 - 1


@dataclass(frozen=True)
class LowerSlicesPass(ModulePass):
    """Slice/Split with compile-time bounds -> tensor.extract_slice (+ tensor.cast)."""

    name = "hip-lower-slices"

    cast: bool = True  # False: FOR TESTS ONLY (no tensor.cast back to the declared type)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        slice_cls = op_class_for("", "Slice")
        split_cls = op_class_for("", "Split")
        todo = [o for o in op.walk() if isinstance(o, HipOnnxOp) and type(o) in (slice_cls, split_cls)]
        for o in todo:
            if type(o) is slice_cls:
                _lower_slice(o, self.cast)
            else:
                _lower_split(o, self.cast)


# ---- compile-time values ---------------------------------------------------------------------

def _const_ints(v: SSAValue | None) -> list[int] | None:
    if v is None or not isinstance(v.owner, ConstantOp):
        return None
    a = v.owner.numpy()
    if a is None or a.ndim > 1 or a.dtype.kind not in "iu":
        return None
    return [int(x) for x in a.reshape(-1)]


def _slice_bounds(op: HipOnnxOp):
    """(starts, ends, axes or None, steps or None) if all are known at compile time, else None."""
    if op.operand_at(1) is not None:  # opset 10+: operands
        vals = []
        for p in (1, 2, 3, 4):
            v = op.operand_at(p)
            if v is None:
                if p <= 2:
                    return None
                vals.append(None)
                continue
            ints = _const_ints(v)
            if ints is None:
                return None
            vals.append(ints)
        return tuple(vals)
    attrs = op.onnx_attributes()
    starts, ends, axes = attrs.get("starts"), attrs.get("ends"), attrs.get("axes")
    if starts is None or ends is None:
        return None
    return [int(s) for s in starts], [int(e) for e in ends], None if axes is None else [int(a) for a in axes], None


# ---- building --------------------------------------------------------------------------------

class _Builder:
    """Inserts ops before `anchor`; shares tensor.dim / index constants per source dimension."""

    def __init__(self, anchor: Operation):
        self.anchor = anchor
        self.ops: list[Operation] = []
        self.dims: dict[int, SSAValue] = {}

    def add(self, op: Operation) -> Operation:
        self.ops.append(op)
        return op

    def dim(self, source: SSAValue, axis: int) -> SSAValue:
        if axis not in self.dims:
            # api.arith / api.tensor import their dialects here, on the first slice lowered
            c = self.add(api.arith.ConstantOp(IntegerAttr(axis, IndexType())))
            c.results[0].name_hint = f"c{axis}"
            d = self.add(api.tensor.DimOp(source, c.results[0]))
            d.results[0].name_hint = f"dim{axis}"
            self.dims[axis] = d.results[0]
        return self.dims[axis]

    def extract(self, source: SSAValue, offsets, sizes, strides, declared, cast: bool,
                name: str | None = None):
        """extract_slice with the implied type, then a cast to `declared` where it differs;
        None if the declared type contradicts the implied one."""
        elem = source.type.element_type
        implied = make_tensor_type(elem, [s if isinstance(s, int) else None for s in sizes])
        if isinstance(declared, (TensorType, UnrankedTensorType)) and refine_type(declared, implied)[1]:
            return None
        sl = self.add(api.tensor.ExtractSliceOp(source, offsets, sizes, strides, implied))
        if implied == declared or not cast:
            sl.results[0].name_hint = name
            return sl.results[0]
        sl.results[0].name_hint = f"{name}_slice" if name else None
        out = self.add(api.tensor.CastOp(sl.results[0], declared)).results[0]
        out.name_hint = name
        return out

    def commit(self, op: Operation, results: list[SSAValue]) -> None:
        Rewriter.replace_op(op, self.ops, results)


def _lower_slice(op: HipOnnxOp, cast: bool) -> None:
    source = op.operand_at(0)
    bounds = _slice_bounds(op)
    shape = dims_of(source.type) if source is not None else None
    if bounds is None or shape is None or len(op.results) != 1:
        return
    starts, ends, axes, steps = bounds
    rank = len(shape)
    if axes is None:
        axes = list(range(len(starts)))
    if steps is None:
        steps = [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        return
    axes = [a + rank if a < 0 else a for a in axes]
    if any(not 0 <= a < rank for a in axes) or len(set(axes)) != len(axes) or any(s <= 0 for s in steps):
        return
    b = _Builder(op)
    offsets: list = [0] * rank
    sizes: list = [None] * rank
    strides: list = [1] * rank
    sliced = {a: (s, e, st) for a, s, e, st in zip(axes, starts, ends, steps)}
    for axis in range(rank):
        dim = shape[axis]
        if axis in sliced:
            s, e, st = sliced[axis]
            if dim is None:
                if not (s == 0 and e >= _TO_END and st == 1):
                    return  # the extent depends on the run-time extent
                sizes[axis] = None
            else:
                s = min(max(s + dim if s < 0 else s, 0), dim)
                e = min(max(e + dim if e < 0 else e, 0), dim)
                offsets[axis], strides[axis] = s, st
                sizes[axis] = max(0, -(-(e - s) // st))
                continue
        sizes[axis] = dim
    for axis in range(rank):
        if sizes[axis] is None:
            sizes[axis] = b.dim(source, axis)
    declared = op.results[0].type
    out = b.extract(source, offsets, sizes, strides, declared, cast, op.results[0].name_hint)
    if out is None:
        add_diagnostic(op, f"{op.name} '{op.label}': declared type {declared} contradicts the slice "
                           f"bounds; not lowered")
        return
    b.commit(op, [out])


def _lower_split(op: HipOnnxOp, cast: bool) -> None:
    source = op.operand_at(0)
    shape = dims_of(source.type) if source is not None else None
    if shape is None or not shape or op.result_positions is not None:
        return
    attrs = op.onnx_attributes()
    axis = int(attrs.get("axis", 0))
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis < len(shape) or shape[axis] is None:
        return
    dim, n = shape[axis], len(op.results)
    if op.operand_at(1) is not None:
        sizes = _const_ints(op.operand_at(1))
    elif attrs.get("split") is not None:
        sizes = [int(s) for s in attrs["split"]]
    elif attrs.get("num_outputs") is not None:
        k = int(attrs["num_outputs"])
        chunk = -(-dim // k) if k > 0 else 0
        last = dim - chunk * (k - 1)
        sizes = [chunk] * (k - 1) + [last] if k > 0 and last > 0 else None  # as the reference
    else:
        sizes = [dim // n] * n if n and dim % n == 0 else None
    if sizes is None or len(sizes) != n or sum(sizes) != dim or any(s < 0 for s in sizes):
        return
    b = _Builder(op)
    results = []
    offset = 0
    for i, size in enumerate(sizes):
        offsets = [0] * len(shape)
        offsets[axis] = offset
        extents: list = [size if a == axis else (d if d is not None else b.dim(source, a))
                         for a, d in enumerate(shape)]
        out = b.extract(source, offsets, extents, [1] * len(shape), op.results[i].type, cast,
                        op.results[i].name_hint)
        if out is None:
            add_diagnostic(op, f"{op.name} '{op.label}': declared type {op.results[i].type} of "
                               f"result {i} contradicts the split sizes {sizes}; not lowered")
            return
        results.append(out)
        offset += size
    b.commit(op, results)
