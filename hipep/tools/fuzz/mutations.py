"""Mutated models and feeds (truncated or flipped bytes, wrong attribute types, cycles, huge
dims, bad feeds, ...), and `gen_case`/`cases()`: case `seed` as the same graph or mutation on
every machine, or the same generator as a hypothesis strategy."""
from __future__ import annotations

import numpy as np
from onnx import AttributeProto, TensorProto as T, helper, numpy_helper

from .cases import ALL, Case, Check, HypothesisSource, NP, SeededSource
from .graph_ops import gen_graph


# ---- mutations ------------------------------------------------------------------------------------

def _mutation(fn):
    """Names the case after the mutation applied (a mutation that cannot apply hands over to
    another, which then names it)."""
    def apply(src, case, m):
        case.kind = "mutate:" + fn.__name__[4:]
        return fn(src, case, m)
    apply.__name__ = fn.__name__
    return apply


def _model_of(case: Case):
    from onnx import ModelProto

    m = ModelProto()
    m.ParseFromString(case.model)
    return m


@_mutation
def mut_truncate(src, case, m):
    n = src.int(0, max(0, len(case.model) - 1))
    return case.model[:n], f"truncated to {n} of {len(case.model)} bytes"


@_mutation
def mut_flip(src, case, m):
    b = bytearray(case.model)
    k = src.int(1, 8)
    for _ in range(k):
        i = src.int(0, len(b) - 1)
        b[i] ^= src.int(1, 255)
    return bytes(b), f"{k} bytes flipped"


@_mutation
def mut_attr_type(src, case, m):
    nodes = [n for n in m.graph.node if n.attribute]
    if not nodes:
        nodes = list(m.graph.node)
        n = src.choice(nodes)
        name, value = src.choice(("axis", "bogus", "perm")), src.choice((1, 2.5, "x", [1, 2]))
        n.attribute.append(helper.make_attribute(name, value))
        return m, f"attribute added to {n.op_type}"
    n = src.choice(nodes)
    a = src.choice(list(n.attribute))
    old = AttributeProto.AttributeType.Name(a.type)
    repl = src.choice((2.5, 7, "seven", [1, 2, 3], [0.5], ["a", "b"], 2 ** 40, -(2 ** 62)))
    if a.type == AttributeProto.TENSOR or src.chance(0.2):
        n.attribute.remove(a)
        return m, f"{n.op_type} attribute '{a.name}' removed"
    new = helper.make_attribute(a.name, repl)
    n.attribute.remove(a)
    n.attribute.append(new)
    return m, f"{n.op_type} attribute '{a.name}' {old} -> {AttributeProto.AttributeType.Name(new.type)} {repl!r}"


@_mutation
def mut_dangling(src, case, m):
    nodes = [n for n in m.graph.node if n.input]
    if not nodes:
        return mut_flip(src, case, m)
    n = src.choice(nodes)
    i = src.int(0, len(n.input) - 1)
    n.input[i] = "nowhere"
    return m, f"{n.op_type} input {i} reads a value nothing makes"


@_mutation
def mut_cycle(src, case, m):
    nodes = list(m.graph.node)
    if not nodes:
        return mut_flip(src, case, m)
    i = src.int(0, len(nodes) - 1)
    j = src.int(i, len(nodes) - 1)
    if not nodes[i].input:
        return mut_dangling(src, case, m)
    nodes[i].input[src.int(0, len(nodes[i].input) - 1)] = nodes[j].output[0]
    return m, f"node {i} ({nodes[i].op_type}) reads node {j}'s output: a cycle"


@_mutation
def mut_huge(src, case, m):
    huge = src.choice((2 ** 40, 2 ** 62, 2 ** 31, 2 ** 32 + 1))
    k = src.int(0, 3)
    if k == 0 and m.graph.input:  # a declared dim
        i = src.choice(list(m.graph.input))
        dims = i.type.tensor_type.shape.dim
        if dims:
            d = dims[src.int(0, len(dims) - 1)]
            d.Clear()
            d.dim_value = huge
            return m, f"input '{i.name}' declares a dim of {huge}"
    x = m.graph.input[0].name if m.graph.input else None
    if x is None:
        return mut_flip(src, case, m)
    elem = m.graph.input[0].type.tensor_type.elem_type
    name = f"huge{k}"
    shape = [huge] if src.chance(0.5) else [huge, huge // 2 or 1]
    if k == 1:
        m.graph.node.append(helper.make_node("ConstantOfShape", [f"{name}_s"], [name], name=name))
        m.graph.initializer.append(numpy_helper.from_array(np.asarray(shape, np.int64), f"{name}_s"))
        m.graph.output.append(helper.make_tensor_value_info(name, T.FLOAT, None))
        return m, f"ConstantOfShape {shape}"
    if k == 2:
        m.graph.node.append(helper.make_node("Expand", [x, f"{name}_s"], [name], name=name))
        m.graph.initializer.append(numpy_helper.from_array(np.asarray([1] * 0 + shape, np.int64), f"{name}_s"))
        m.graph.output.append(helper.make_tensor_value_info(name, elem, None))
        return m, f"Expand to {shape}"
    rank = len(m.graph.input[0].type.tensor_type.shape.dim)
    if rank == 0:
        return mut_flip(src, case, m)
    m.graph.node.append(helper.make_node("Tile", [x, f"{name}_s"], [name], name=name))
    m.graph.initializer.append(numpy_helper.from_array(np.asarray([huge] + [1] * (rank - 1), np.int64), f"{name}_s"))
    m.graph.output.append(helper.make_tensor_value_info(name, elem, None))
    return m, f"Tile by {huge}"


@_mutation
def mut_opset(src, case, m):
    v = src.choice((1, 5, 99, 10000))
    m.opset_import[0].version = v
    return m, f"opset import {v}"


@_mutation
def mut_dup_output(src, case, m):
    if len(m.graph.node) < 2:
        return mut_cycle(src, case, m)
    a, b = m.graph.node[0], m.graph.node[-1]
    b.output[0] = a.output[0]
    return m, "two nodes write one value"


@_mutation
def mut_initializer(src, case, m):
    if not m.graph.initializer:
        return mut_attr_type(src, case, m)
    t = src.choice(list(m.graph.initializer))
    k = src.int(0, 2)
    if k == 0 and t.raw_data:
        t.raw_data = t.raw_data[: len(t.raw_data) // 2] + b"\x01"
        return m, f"initializer '{t.name}' raw data too short"
    if k == 1 or not t.dims:
        t.dims.append(3)
        return m, f"initializer '{t.name}' dims and data disagree"
    t.data_type = src.choice((T.FLOAT16, T.INT32, T.BOOL, T.STRING))
    return m, f"initializer '{t.name}' element type changed"


@_mutation
def mut_input_type(src, case, m):
    if not m.graph.input:
        return mut_flip(src, case, m)
    i = src.choice(list(m.graph.input))
    old = i.type.tensor_type.elem_type
    i.type.tensor_type.elem_type = src.choice(tuple(e for e in ALL if e != old))
    case.runs = [{k: (v.astype(NP[i.type.tensor_type.elem_type]) if k == i.name else v) for k, v in r.items()}
                 for r in case.runs]
    return m, f"input '{i.name}' declared as {T.DataType.Name(i.type.tensor_type.elem_type)}"


@_mutation
def mut_feeds(src, case, m):
    """Run-time mistakes: the model stays valid, the feeds do not."""
    if not case.runs or not case.runs[0]:
        return mut_flip(src, case, m)
    run = dict(case.runs[0])
    name = src.choice(sorted(run))
    a = run[name]
    k = src.int(0, 6)
    if k == 0:
        run[name + "_typo"] = run.pop(name)
        what = f"feed '{name}' renamed"
    elif k == 1:
        run.pop(name)
        what = f"feed '{name}' missing"
    elif k == 2:
        run["extra"] = np.zeros(1, np.float32)
        what = "an extra feed"
    elif k == 3:
        dt = src.choice(tuple(NP[e] for e in ALL if NP[e] != a.dtype))
        run[name] = a.astype(dt)
        what = f"feed '{name}' as {np.dtype(dt).name}"
    elif k == 4:
        if src.chance(0.5) or a.ndim == 0:
            run[name] = a.reshape(a.shape + (1,))
        else:
            run[name] = a.reshape(a.shape[1:] if a.shape[0] == 1 else (-1,))
        what = f"feed '{name}' of rank {run[name].ndim}"
    elif k == 5:
        shape = tuple(d + 1 for d in a.shape)
        run[name] = np.zeros(shape, a.dtype)
        what = f"feed '{name}' of shape {shape}"
    else:
        what = "every float feed NaN/Inf"
        for n2, v in run.items():
            if v.dtype.kind == "f":
                run[n2] = src.np.choice(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], v.dtype), size=v.shape)
        case.runs = [run]
        # the graph was drawn for finite inputs: which NaN wins (ReduceMax, ArgMax, a comparison
        # of NaN-dependent values) is the CPU EP's kernel path's business, so only types and shapes
        case.checks = {k: Check("shape") for k in case.checks}
        return case.model, what
    case.runs = [run]
    return case.model, what


MUTATIONS = [(mut_truncate, 2), (mut_flip, 3), (mut_attr_type, 4), (mut_dangling, 2), (mut_cycle, 2), (mut_huge, 4),
             (mut_opset, 1), (mut_dup_output, 1), (mut_initializer, 2), (mut_input_type, 2), (mut_feeds, 6)]


def gen_mutation(src) -> Case:
    case = gen_graph(src)
    m = _model_of(case)
    fn = src.choice([f for f, w in MUTATIONS for _ in range(w)])
    out, what = fn(src, case, m)
    case.model = out if isinstance(out, bytes) else out.SerializeToString()
    case.what = f"{what} | {case.what}"
    return case


def gen_case(seed: int) -> Case:
    src = SeededSource(seed)
    case = gen_mutation(src) if src.chance(0.3) else gen_graph(src)
    case.seed = seed
    return case


def cases():
    """A hypothesis strategy drawing the same cases as `gen_case` (seed None), shrinkable."""
    from hypothesis import strategies as st

    @st.composite
    def strategy(draw):
        src = HypothesisSource(_DrawData(draw))
        return gen_mutation(src) if src.chance(0.3) else gen_graph(src)

    return strategy()


class _DrawData:
    """Adapts a composite strategy's `draw` to the data.draw(strategy) interface."""

    def __init__(self, draw):
        self._draw = draw

    def draw(self, strategy, label=None):
        return self._draw(strategy)
