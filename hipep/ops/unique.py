"""Unique (opsets 11 and 28): the distinct values of a tensor (flattened), or its distinct slices
along `axis`, as ONNX Runtime's CPU kernel gives them: ascending (sorted=1; slices in
lexicographic order) or in order of first occurrence (sorted=0), with each one's first index, every
element's (or slice's) index into them, and their counts. -0 and 0 are one value (Y holds the
first occurrence's). NaN follows numpy's np.unique: without an axis, or for a 1-D input, NaNs are
one value ordered after every number; a slice of a higher-rank input holding a NaN equals no other
slice (ORT's CPU kernel orders NaN with `<`, under which it is equivalent to every value, so its
results with NaN depend on where the NaNs are).

The outputs' lengths depend on the values: the input is a host input, whose values the shape rule
reads to size them. A GPU device claims the node where the host knows those values
(hipep.runtime.gpu_unique: kernels/unique.hip computes the outputs on the device, bit for bit
these), and leaves it to other EPs, with the reason, where the device computes them.
"""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ._common import elem_of, kernel, known_value, normalize_axis, result, shape_of, shape_rule, tensor_type
from .registry import F32, F64, I8, I64, OpDef, register


def distinct(x: np.ndarray, attrs) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(Y, indices, inverse_indices, counts)."""
    axis = attrs.get("axis")
    if axis is None:
        flat = x.reshape(-1)
        values, first, inverse, counts = np.unique(flat, return_index=True, return_inverse=True, return_counts=True)
    else:
        if x.ndim == 0:
            raise RuntimeShapeError("Unique: a scalar has no axis")
        axis = normalize_axis("Unique", int(axis), x.ndim)
        values, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True,
                                                   axis=axis)
    inverse = inverse.reshape(-1)
    if not int(attrs.get("sorted", 1)):  # in order of first occurrence
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        values = values[order] if axis is None else np.take(values, order, axis=axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    return values, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)


@kernel("Unique")
def _unique(inputs, attrs):
    y, first, inverse, counts = distinct(inputs[0], attrs)
    return [result(y, inputs[0].dtype), result(first, np.int64), result(inverse, np.int64), result(counts, np.int64)]


@shape_rule("Unique")
def _unique_shape(types, values, attrs, num_outputs):
    # The lengths depend on the values: input 0 is a host input, so at run time it is here.
    elem, shape, x = elem_of(types[0]), shape_of(types[0]), known_value(types, values, 0)
    axis = attrs.get("axis")
    if x is not None:
        y, first, inverse, counts = distinct(np.asarray(x), attrs)
        shapes = [y.shape, first.shape, inverse.shape, counts.shape]
    elif shape is None:  # with an axis, Y has the input's rank, unknown here
        shapes = [None if axis is not None else (None,), (None,), (None,), (None,)]
    elif axis is None:
        shapes = [(None,), (None,), (None,), (None,)]
    else:
        axis = normalize_axis("Unique", int(axis), len(shape))
        y = list(shape)
        y[axis] = None
        shapes = [tuple(y), (None,), (shape[axis],), (None,)]
    return [tensor_type(e, s) for e, s in zip((elem, I64, I64, I64), shapes)][:num_outputs]


# ONNX Runtime's CPU kernel takes float, double, int64 and int8 (and strings, which hipep does not hold).
register(OpDef("Unique", (11, 28), ("T",), ("T", "I", "I", "I"),
               {"T": frozenset({F32, F64, I64, I8}), "I": frozenset({I64})}, _unique,
               attributes={"axis": None, "sorted": 1}, shape_rule=_unique_shape, host_inputs=(0,)))
