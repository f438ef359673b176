"""MaxUnpool (opsets 9, 11, 22): MaxPool's values put back where its Indices say, zeros elsewhere.

X and I have one shape [N, C, *spatial]; I holds indices into the flattened Y, as MaxPool's
Indices (storage_order 0) count them: batch, channel and position in one. Y's shape is
`output_shape` (input 2, read by the host) where given, else [N, C] and per spatial axis
(in - 1) * stride + kernel - pad_begin - pad_end. As ONNX Runtime's CPU kernel:
- a given output_shape smaller than that on any axis is an error;
- an index outside [0, Y's size) is an error naming it;
- a value whose index repeats overwrites the earlier one (the kernel writes in order).

A given output_shape larger than the unpooled shape is where ORT and the ONNX spec part: ORT
indexes the flattened output_shape, the spec (its backend test) the unpooled shape's flattening
with the result padded to output_shape. hipep claims such a node only where output_shape is a
constant equal to the unpooled shape (both then agree), and leaves the others to ORT, saying why.
"""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ._common import (elem_of, input_type, int_list, kernel, known_value, pshape_str, result, shape_of, shape_rule,
                      shape_str, tensor_type)
from .registry import FLOATS, I64, REQUIRED, OpDef, register
from .vision import _pads, _spatial


def unpool_shape(x_shape, attrs, output_shape=None, i_shape=None) -> tuple:
    """Y's shape for X's `x_shape` (None extents stay unknown), I's `i_shape` where known (it must
    be X's) and, where given, `output_shape`."""
    if len(x_shape) < 3:
        raise RuntimeShapeError(f"MaxUnpool: X must be [N, C, *spatial] (rank >= 3), got {pshape_str(x_shape)}")
    if i_shape is not None and (len(i_shape) != len(x_shape) or any(
            a is not None and b is not None and a != b for a, b in zip(x_shape, i_shape))):
        raise RuntimeShapeError(f"MaxUnpool: I must have X's shape {pshape_str(x_shape)}, got {pshape_str(i_shape)}")
    spatial = len(x_shape) - 2
    kernel_shape = _spatial("MaxUnpool", attrs, "kernel_shape", spatial, 1)
    strides = _spatial("MaxUnpool", attrs, "strides", spatial, 1)
    pads = _pads("MaxUnpool", attrs, spatial)
    inferred = list(x_shape[:2])
    for i in range(spatial):
        d = x_shape[2 + i]
        pad = pads[i] + pads[spatial + i]
        inferred.append(None if d is None else (int(d) - 1) * strides[i] + kernel_shape[i] - pad)
    if output_shape is None:
        if any(d is not None and d < 0 for d in inferred):
            raise RuntimeShapeError(f"MaxUnpool: X {pshape_str(x_shape)} with kernel_shape {kernel_shape}, strides "
                                    f"{strides} and pads {pads} gives a negative extent {pshape_str(inferred)}")
        return tuple(inferred)
    given = [int(d) for d in output_shape]
    if len(given) != len(x_shape):
        raise RuntimeShapeError(f"MaxUnpool: output_shape {given} must have one extent per axis of X "
                                f"{pshape_str(x_shape)}")
    if any(w is not None and g < w for g, w in zip(given, inferred)):
        raise RuntimeShapeError(f"MaxUnpool: output_shape {given} is smaller than the shape X {pshape_str(x_shape)} "
                                f"unpools to, {pshape_str(inferred)}")
    return tuple(given)


@kernel("MaxUnpool")
def _max_unpool(inputs, attrs):
    x, indices = inputs[0], inputs[1]
    out_shape = inputs[2] if len(inputs) > 2 else None
    given = None if out_shape is None else int_list("MaxUnpool", "output_shape", out_shape)
    shape = unpool_shape(x.shape, attrs, given, indices.shape)
    y = np.zeros(shape, x.dtype)
    size = y.size
    flat = indices.reshape(-1)
    bad = (flat < 0) | (flat >= size)
    if bad.any():
        raise RuntimeShapeError(f"MaxUnpool: input 1 (I) holds the index {int(flat[np.argmax(bad)])}, outside Y's "
                                f"[0, {size}) (Y is {shape_str(shape)})")
    # numpy assigns repeated indices in order, the last one staying: ORT's loop
    y.reshape(-1)[flat] = x.reshape(-1)
    return [result(y)]


@shape_rule("MaxUnpool")
def _max_unpool_rule(types, values, attrs, num_outputs):
    x, i = shape_of(types[0]), shape_of(types[1])
    elem = elem_of(types[0])
    given = known_value(types, values, 2)
    if x is None:
        return [tensor_type(elem, None if given is None else (None,) * int(given.size))]
    shape = unpool_shape(x, attrs, None if given is None else given.reshape(-1), i)
    if len(types) > 2 and types[2] is not None and given is None:
        return [tensor_type(elem, (None,) * len(x))]  # output_shape given but not known here
    return [tensor_type(elem, shape)]


def _claim_max_unpool(node, graph, attrs):
    """Nodes with an output_shape input only where it is a constant equal to the unpooled shape (ORT
    and the ONNX spec place indices differently in a larger output)."""
    if len(node.inputs) < 3 or not node.inputs[2]:
        return None
    given = graph.constants.get(node.inputs[2])
    xt = input_type(node, graph, 0)
    x = None if xt is None else xt.shape
    if given is not None and x is not None and all(d is not None for d in x):
        try:
            if tuple(int(d) for d in np.asarray(given).reshape(-1)) == unpool_shape(x, attrs):
                return None
        except RuntimeShapeError:
            return None  # the run reports it
    return ("input 2 (output_shape) may be larger than the unpooled shape, where ONNX Runtime's CPU EP and the "
            "ONNX spec put the values in different places (ORT indexes the flattened output_shape, the spec the "
            "unpooled shape's flattening, padded): left to ORT")


register(OpDef("MaxUnpool", (9, 11, 22), ("T1", "T2", "T2"), ("T1",), {"T1": FLOATS, "T2": frozenset({I64})},
               _max_unpool, attributes={"kernel_shape": REQUIRED, "pads": None, "strides": None},
               claim=_claim_max_unpool, shape_rule=_max_unpool_rule, min_inputs=2, host_inputs=(2,)))
