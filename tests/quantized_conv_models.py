"""Single-node ConvInteger and QLinearConv models for the tests of both devices: random integers of
a quantized type's whole range, and a model over named values, each a graph input or an
initializer."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from helpers import make_model, tensor

ELEM = {np.dtype(np.uint8): TP.UINT8, np.dtype(np.int8): TP.INT8, np.dtype(np.int32): TP.INT32,
        np.dtype(np.float32): TP.FLOAT}


def random_ints(rng, dtype, shape):
    """Integers over `dtype`'s whole range."""
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def single_node_model(op, values: dict, y_elem, attrs, initializers=()):
    """A single-node model over `values` (name -> array, None for an omitted input); the names in
    `initializers` are initializers, the others graph inputs. (model, feeds)"""
    names = [k if v is not None else "" for k, v in values.items()]
    while names and not names[-1]:
        names.pop()
    inputs, inits, feeds = [], [], {}
    for name, v in values.items():
        if v is None:
            continue
        v = np.asarray(v)
        if name in initializers:
            inits.append(numpy_helper.from_array(v, name))
        else:
            inputs.append(tensor(name, ELEM[v.dtype], list(v.shape)))
            feeds[name] = v
    node = helper.make_node(op, names, ["y"], name="conv", **attrs)
    return make_model([node], inputs, [tensor("y", y_elem, None)], inits, opset=10), feeds
