"""Shape rules (OpDef.shape_rule), against the reference kernels and ONNX's shape inference.

1. Run-time contract: with fully static input shapes and the values of the op's host_inputs,
   the rule gives exactly the reference's output shapes and element types (every case of
   test_ops_reference), and raises RuntimeShapeError where the reference does on shape grounds.
2. Partial shapes: hiding dims, ranks or host values never makes a rule invent an extent (each
   static extent it still gives is the one the static inputs give), the rule never disagrees with
   onnx.shape_inference on an extent both know, and it is exactly as precise as listed.
3. Every registered op has a rule; host_inputs and view are declared where they apply.
"""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from hipep.errors import RuntimeShapeError
from hipep.graph import GraphView, TensorType, elem_type_of
from hipep.ops import all_ops, lookup, resolve_attributes
from hipep.ops.registry import OUTPUT_COUNT, REQUIRED


def _load_reference_tests():
    path = pathlib.Path(__file__).with_name("test_ops_reference.py")
    spec = importlib.util.spec_from_file_location("_hipep_reference_cases", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


REF = _load_reference_tests()
IR_VERSION = 10


# ---- 1. run-time contract --------------------------------------------------------------------

def static_call(op_type, opset, inputs, attrs, n_out):
    """(op, node attrs, rule args) for a reference case, as the runtime would call the rule."""
    inputs = [None if a is None else np.asarray(a) for a in inputs]
    model = REF.build(op_type, opset, inputs, attrs, n_out)
    graph = GraphView.from_onnx(model, infer_shapes=False, constant_nodes_as_initializers=False)
    node = graph.nodes[0]
    op = lookup(node.domain, node.op_type)
    resolved = resolve_attributes(op, node)
    types = [None if a is None else TensorType(elem_type_of(a.dtype), a.shape) for a in inputs]
    values = [a if i in op.host_inputs else None for i, a in enumerate(inputs)]
    return op, inputs, resolved, types, values, len(node.outputs)


def check_rule_matches_reference(op_type, opset, inputs, attrs, n_out):
    """The run-time contract: with static shapes (and host-input values) the rule gives exactly
    the reference's output shapes and element types. The other op-family test files reuse it."""
    op, inputs, resolved, types, values, num_outputs = static_call(op_type, opset, inputs, attrs, n_out)
    want = op.reference(list(inputs), resolved)[:num_outputs]
    got = op.shape_rule(types, values, resolved, num_outputs)
    assert len(got) == num_outputs
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.kind == "tensor"
        assert g.shape is not None and all(type(d) is int for d in g.shape), f"output {k}: {g}"
        assert g.shape == w.shape, f"output {k}: rule {g.shape} != reference {w.shape}"
        assert g.elem_type == elem_type_of(w.dtype), f"output {k}: {g.dtype_name} != {w.dtype}"
    # Values of non-host inputs are never needed: given them, the rule answers the same.
    assert op.shape_rule(types, list(inputs), resolved, num_outputs) == got
    if op.view:
        assert got[0].elem_type == types[0].elem_type
        assert int(np.prod(got[0].shape)) == inputs[0].size


def check_partial_never_invents(op_type, opset, inputs, attrs, n_out):
    """With less known (dynamic dims, no rank, no host values) the rule never contradicts its
    fully static answer."""
    op, inputs, resolved, types, values, num_outputs = static_call(op_type, opset, inputs, attrs, n_out)
    full = op.shape_rule(types, values, resolved, num_outputs)
    for label, ptypes, pvalues in _variants(types, values):
        got = op.shape_rule(ptypes, pvalues, resolved, num_outputs)
        assert len(got) == num_outputs, label
        for k, (g, f) in enumerate(zip(got, full)):
            assert_refines(g, f, f"{label}, output {k}")


def _case_params():
    return [pytest.param(*p.values[:5], id=p.id) for p in REF.CASES]


@pytest.mark.parametrize("op_type,opset,inputs,attrs,n_out", _case_params())
def test_rule_matches_reference(op_type, opset, inputs, attrs, n_out):
    check_rule_matches_reference(op_type, opset, inputs, attrs, n_out)


# Reference errors that depend on values the rule never sees (not shapes, not host inputs).
_VALUE_ERRORS = ("integer division by zero", "is out of range for axis")


def _error_params():
    out = []
    for i, (op_type, inputs, attrs, pattern) in enumerate(REF.ERRORS):
        if any(s in pattern for s in _VALUE_ERRORS):
            continue
        out.append(pytest.param(op_type, inputs, attrs, pattern, id=f"{op_type}-{i}"))
    return out


@pytest.mark.parametrize("op_type,inputs,attrs,pattern", _error_params())
def test_rule_raises_like_reference(op_type, inputs, attrs, pattern):
    op = lookup("", op_type)
    resolved = {**{k: v for k, v in op.attributes.items() if v is not None and v is not REQUIRED}, **attrs}
    split = attrs.get("split") or (list(inputs[1]) if op_type == "Split" and len(inputs) > 1 else None)
    num_outputs = attrs.get(OUTPUT_COUNT) or attrs.get("num_outputs") or (len(split) if split else 1)
    types = [None if a is None else TensorType(elem_type_of(a.dtype), a.shape) for a in inputs]
    values = [a if i in op.host_inputs else None for i, a in enumerate(inputs)]
    with pytest.raises(RuntimeShapeError, match=pattern) as e:
        op.shape_rule(types, values, resolved, num_outputs)
    assert str(e.value).startswith(f"{op_type}: ")


def _variants(types, values):
    """Partial versions of static rule arguments: (label, types, values)."""
    for i, t in enumerate(types):
        if t is None:
            continue
        for j in range(len(t.shape)):
            shape = t.shape[:j] + (None,) + t.shape[j + 1:]
            yield f"input {i} dim {j} dynamic", _with(types, i, shape), values
        if t.shape:
            yield f"input {i} all dynamic", _with(types, i, (None,) * len(t.shape)), values
        yield f"input {i} unranked", _with(types, i, None), _without(values, i)
        if values[i] is not None:
            yield f"input {i} value unknown", types, _without(values, i)
    yield "all dynamic, no values", [None if t is None else TensorType(t.elem_type, (None,) * len(t.shape))
                                     for t in types], [None] * len(values)


def _with(types, i, shape):
    return [TensorType(t.elem_type, shape) if k == i else t for k, t in enumerate(types)]


def _without(values, i):
    return [None if k == i else v for k, v in enumerate(values)]


def assert_refines(partial: TensorType, full: TensorType, what=""):
    """`partial` (a rule's answer on less information) agrees with `full` wherever it commits."""
    if partial.elem_type:
        assert partial.elem_type == full.elem_type, what
    if partial.shape is None or full.shape is None:
        return
    assert len(partial.shape) == len(full.shape), f"{what}: rank of {partial} vs {full}"
    for a, b in zip(partial.shape, full.shape):
        assert a is None or a == b, f"{what}: {partial} invents an extent ({full} with all shapes known)"


@pytest.mark.parametrize("op_type,opset,inputs,attrs,n_out", _case_params())
def test_partial_shapes_never_invent_extents(op_type, opset, inputs, attrs, n_out):
    check_partial_never_invents(op_type, opset, inputs, attrs, n_out)


# ---- 2. partial shapes: explicit expectations, and ONNX shape inference -----------------------

def rule_on(op_type, opset, inputs, attrs=None, n_out=1, names=None):
    """Builds a single-node model; inputs are (elem, shape) graph inputs (dims int, str or None),
    np.ndarray initializers (known values), or None (omitted). Returns (rule outputs, model)."""
    in_names, g_in, inits = [], [], []
    for i, spec in enumerate(inputs):
        if spec is None:
            in_names.append("")
        elif isinstance(spec, np.ndarray):
            in_names.append(f"c{i}")
            inits.append(numpy_helper.from_array(spec, f"c{i}"))
        else:
            in_names.append(f"x{i}")
            g_in.append(helper.make_tensor_value_info(f"x{i}", spec[0], spec[1]))
    out_names = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op_type, in_names, out_names, **(attrs or {}))
    g_out = [helper.make_empty_tensor_value_info(n) for n in out_names]
    model = helper.make_model(helper.make_graph([node], "g", g_in, g_out, inits),
                              opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)
    graph = GraphView.from_onnx(model, infer_shapes=False, constant_nodes_as_initializers=False)
    node = graph.nodes[0]
    op = lookup(node.domain, node.op_type)
    types = [graph.type_of(n) if n else None for n in node.inputs]
    values = [graph.constant(n) if n else None for n in node.inputs]
    return op.shape_rule(types, values, resolve_attributes(op, node), len(node.outputs)), model


def onnx_inferred(model):
    """Output types by onnx.shape_inference: (elem, shape with int/None dims, or None)."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    out = []
    for vi in inferred.graph.output:
        tt = vi.type.tensor_type
        shape = None
        if tt.HasField("shape"):
            shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
        out.append((tt.elem_type, shape))
    return out


A = lambda v, dt=np.int64: np.array(v, dtype=dt)  # noqa: E731
F = TP.FLOAT
I64 = TP.INT64
BIG = 2**63 - 1

# (id, op, opset, inputs, attrs, n_out, expected shapes per output: tuple / None = unranked)
PARTIAL = [
    # broadcasting
    ("add-1n-53", "Add", 14, [(F, [1, "n"]), (F, [5, 3])], {}, 1, [(5, 3)]),
    ("add-n-4", "Add", 14, [(F, ["n"]), (F, [4])], {}, 1, [(4,)]),
    ("add-n-1", "Add", 14, [(F, ["n"]), (F, [1])], {}, 1, [(None,)]),
    ("add-rank", "Add", 14, [(F, ["a", 1, 3]), (F, [7, 1])], {}, 1, [(None, 7, 3)]),
    ("add-unranked", "Add", 14, [(F, None), (F, [3])], {}, 1, [None]),
    ("less-bool", "Less", 13, [(F, ["n", 3]), (F, [3])], {}, 1, [(None, 3)]),
    ("max-3", "Max", 13, [(F, [1, "n"]), (F, [4, 1]), (F, [2])], {}, 1, [(4, 2)]),
    ("where-3way", "Where", 16, [(TP.BOOL, ["n", 1]), (F, [1, 5]), (F, [3, 1])], {}, 1, [(3, 5)]),
    ("pow", "Pow", 15, [(F, ["n", 3]), (F, [])], {}, 1, [(None, 3)]),
    ("cast", "Cast", 19, [(F, ["n", 3])], {"to": TP.INT64}, 1, [(None, 3)]),
    ("relu", "Relu", 14, [(F, ["n", 3])], {}, 1, [(None, 3)]),
    ("clip", "Clip", 13, [(F, ["n", 3]), (F, []), None], {}, 1, [(None, 3)]),
    ("identity", "Identity", 16, [(F, ["n", 3])], {}, 1, [(None, 3)]),
    # linear algebra
    ("matmul-batch", "MatMul", 13, [(F, ["b", 1, "m", 64]), (F, [8, 64, 32])], {}, 1, [(None, 8, None, 32)]),
    ("matmul-1d-lhs", "MatMul", 13, [(F, [64]), (F, ["b", 64, 32])], {}, 1, [(None, 32)]),
    ("matmul-1d-rhs", "MatMul", 13, [(F, ["b", "m", 64]), (F, [64])], {}, 1, [(None, None)]),
    ("matmul-1d-1d", "MatMul", 13, [(F, ["k"]), (F, [64])], {}, 1, [()]),
    ("matmul-unranked", "MatMul", 13, [(F, None), (F, [64, 3])], {}, 1, [None]),
    ("gemm-trans", "Gemm", 13, [(F, [64, "m"]), (F, [32, 64])], {"transA": 1, "transB": 1}, 1, [(None, 32)]),
    ("gemm-c", "Gemm", 13, [(F, ["m", 64]), (F, [64, "n"]), (F, [5])], {}, 1, [(None, 5)]),
    # normalization
    ("softmax", "Softmax", 13, [(F, ["n", 5])], {"axis": 0}, 1, [(None, 5)]),
    ("layernorm", "LayerNormalization", 17, [(F, ["b", "s", 768]), (F, [768]), (F, [768])],
     {"axis": -1}, 3, [(None, None, 768), (None, None, 1), (None, None, 1)]),
    ("layernorm-axis1", "LayerNormalization", 17, [(F, ["b", 4, 8]), (F, [4, 8])], {"axis": 1}, 3,
     [(None, 4, 8), (None, 1, 1), (None, 1, 1)]),
    ("layernorm-scale-fixes-x", "LayerNormalization", 17, [(F, ["b", "s", "h"]), (F, [768])], {}, 1,
     [(None, None, 768)]),
    # Reshape
    ("reshape-unknown-value", "Reshape", 14, [(F, [1, "s", 384]), (I64, [4])], {}, 1, [(None,) * 4]),
    ("reshape-unknown-len", "Reshape", 14, [(F, [1, "s", 384]), (I64, ["r"])], {}, 1, [None]),
    ("reshape-heads", "Reshape", 14, [(F, [1, "s", 384]), A([0, -1, 12, 32])], {}, 1, [(1, None, 12, 32)]),
    ("reshape-copy-cancels", "Reshape", 14, [(F, ["b", 12, 32]), A([0, -1])], {}, 1, [(None, 384)]),
    ("reshape-static", "Reshape", 14, [(F, [2, 3, 4]), A([4, -1, 3])], {}, 1, [(4, 2, 3)]),
    ("reshape-allowzero", "Reshape", 14, [(F, ["n", 3]), A([3, 0])], {"allowzero": 1}, 1, [(3, 0)]),
    ("reshape-unranked", "Reshape", 14, [(F, None), A([0, -1, 5])], {}, 1, [(None, None, 5)]),
    # Transpose, Concat, Gather, Shape
    ("transpose-default", "Transpose", 13, [(F, ["a", 3, 4])], {}, 1, [(4, 3, None)]),
    ("transpose-perm", "Transpose", 13, [(F, ["a", 3, 4])], {"perm": [1, 0, 2]}, 1, [(3, None, 4)]),
    ("transpose-unranked", "Transpose", 13, [(F, None)], {"perm": [1, 0]}, 1, [(None, None)]),
    ("concat-static", "Concat", 13, [(F, ["n", 3]), (F, [2, 5])], {"axis": 1}, 1, [(2, 8)]),
    ("concat-dynamic-axis", "Concat", 13, [(F, ["n", 3]), (F, [2, 3])], {"axis": 0}, 1, [(None, 3)]),
    ("concat-unranked", "Concat", 13, [(F, None), (F, [2, 3])], {"axis": 0}, 1, [(None, 3)]),
    ("gather", "Gather", 13, [(F, ["v", 64, 7]), (I64, ["b", "s"])], {"axis": 1}, 1, [(None, None, None, 7)]),
    ("gather-scalar", "Gather", 13, [(F, ["v", 64]), (I64, [])], {}, 1, [(64,)]),
    ("shape", "Shape", 15, [(F, ["n", 3, 4])], {}, 1, [(3,)]),
    ("shape-start-end", "Shape", 15, [(F, ["n", 3, 4])], {"start": 1, "end": -1}, 1, [(1,)]),
    ("shape-unranked", "Shape", 15, [(F, None)], {}, 1, [(None,)]),
    ("shape-unranked-empty", "Shape", 15, [(F, None)], {"start": 2, "end": 1}, 1, [(0,)]),
    # Slice
    ("slice-unknown", "Slice", 13, [(F, ["n", 5, 6]), (I64, [1]), (I64, [1])], {}, 1, [(None, 5, 6)]),
    ("slice-unknown-bounds", "Slice", 13, [(F, ["n", 5, 6]), (I64, [1]), (I64, [1]), A([2])], {}, 1,
     [(None, 5, None)]),
    ("slice-unknown-axes", "Slice", 13, [(F, ["n", 5, 6]), A([0]), A([2]), (I64, [1])], {}, 1,
     [(None, None, None)]),
    ("slice-known", "Slice", 13, [(F, ["n", 5, 6]), A([1, -4]), A([BIG, -1]), A([1, 2])], {}, 1,
     [(None, 4, 3)]),
    ("slice-dynamic-axis", "Slice", 13, [(F, ["n", 5]), A([0]), A([16]), A([0])], {}, 1, [(None, 5)]),
    ("slice-steps", "Slice", 13, [(F, [10, "n"]), A([BIG]), A([-BIG - 1]), A([0]), A([-3])], {}, 1,
     [(4, None)]),
    ("slice-empty-anyway", "Slice", 13, [(F, ["n", 5]), A([3]), A([1]), A([0])], {}, 1, [(0, 5)]),
    ("slice-opset1", "Slice", 1, [(F, ["n", 6, 7])], {"starts": [1, -4], "ends": [100, -1], "axes": [1, 2]},
     1, [(None, 5, 3)]),
    # Split
    ("split-static", "Split", 18, [(F, ["n", 7])], {"axis": 1, "num_outputs": 3}, 3,
     [(None, 3), (None, 3), (None, 1)]),
    ("split-dynamic-num", "Split", 18, [(F, ["n", 7])], {"num_outputs": 2}, 2, [(None, 7), (None, 7)]),
    ("split-even-static", "Split", 13, [(F, [6, "n"])], {}, 3, [(2, None)] * 3),
    ("split-even-dynamic", "Split", 13, [(F, ["n", 6])], {}, 2, [(None, 6)] * 2),
    ("split-sizes", "Split", 13, [(F, ["n", 6]), A([2, 4])], {"axis": 1}, 2, [(None, 2), (None, 4)]),
    ("split-sizes-dynamic-axis", "Split", 13, [(F, ["n", 6]), A([2, 4])], {}, 2, [(2, 6), (4, 6)]),
    ("split-sizes-unknown", "Split", 13, [(F, [6, 5]), (I64, [2])], {}, 2, [(None, 5)] * 2),
    ("split-attr", "Split", 11, [(F, [6, "n"])], {"split": [1, 5]}, 2, [(1, None), (5, None)]),
    # Squeeze / Unsqueeze
    ("squeeze-axes", "Squeeze", 13, [(F, [1, "n", 1, 4]), A([0, -2])], {}, 1, [(None, 4)]),
    ("squeeze-none-dynamic", "Squeeze", 13, [(F, [1, "n", 4])], {}, 1, [None]),
    ("squeeze-none-static", "Squeeze", 13, [(F, [1, 3, 1])], {}, 1, [(3,)]),
    ("squeeze-unknown-axes", "Squeeze", 13, [(F, ["a", "b", 4]), (I64, [1])], {}, 1, [(None, None)]),
    ("squeeze-unknown-axes-decided", "Squeeze", 13, [(F, [1, 5, 4]), (I64, [1])], {}, 1, [(5, 4)]),
    ("squeeze-11", "Squeeze", 11, [(F, [1, "n", 1])], {"axes": [0]}, 1, [(None, 1)]),
    ("unsqueeze", "Unsqueeze", 13, [(F, ["n", 4]), A([0, -1])], {}, 1, [(1, None, 4, 1)]),
    ("unsqueeze-unknown", "Unsqueeze", 13, [(F, ["n", 4]), (I64, [2])], {}, 1, [(None,) * 4]),
    ("unsqueeze-1", "Unsqueeze", 1, [(F, ["n", 4])], {"axes": [1]}, 1, [(None, 1, 4)]),
    # Expand
    ("expand-known", "Expand", 13, [(F, ["n", 1]), A([2, 1, 6])], {}, 1, [(2, None, 6)]),
    ("expand-unknown", "Expand", 13, [(F, [3, 1]), (I64, [3])], {}, 1, [(None, 3, None)]),
    ("expand-n-4", "Expand", 13, [(F, ["n"]), A([4])], {}, 1, [(4,)]),
    # Constant
    ("constant", "Constant", 13, [], {"value": helper.make_tensor("v", F, [2, 3], [0.0] * 6)}, 1, [(2, 3)]),
    ("constant-ints", "Constant", 13, [], {"value_ints": [1, 2, 3]}, 1, [(3,)]),
    # reductions
    ("reduce-axes", "ReduceSum", 13, [(F, ["n", 3, 4]), A([-1])], {}, 1, [(None, 3, 1)]),
    ("reduce-axes-drop", "ReduceMean", 18, [(F, ["n", 3, 4]), A([0, 2])], {"keepdims": 0}, 1, [(3,)]),
    ("reduce-all", "ReduceMax", 18, [(F, ["n", 3, 4])], {"keepdims": 0}, 1, [()]),
    ("reduce-all-keep", "ReduceMin", 18, [(F, ["n", 3, 4])], {}, 1, [(1, 1, 1)]),
    ("reduce-noop", "ReduceSum", 13, [(F, ["n", 3, 4])], {"noop_with_empty_axes": 1}, 1, [(None, 3, 4)]),
    ("reduce-unknown-keep", "ReduceSum", 13, [(F, ["n", 1, 4]), (I64, [1])], {}, 1, [(None, 1, None)]),
    ("reduce-unknown-drop", "ReduceSum", 13, [(F, ["n", 3, 4]), (I64, [1])], {"keepdims": 0}, 1,
     [(None, None)]),
    ("reduce-unknown-len", "ReduceSum", 13, [(F, ["n", 3, 4]), (I64, ["k"])], {"keepdims": 0}, 1, [None]),
    ("reduce-attr", "ReduceMean", 13, [(F, ["n", 3, 4])], {"axes": [1]}, 1, [(None, 1, 4)]),
    ("reduce-unranked-all", "ReduceSum", 13, [(F, None)], {"keepdims": 0}, 1, [()]),
]


@pytest.mark.parametrize("op_type,opset,inputs,attrs,n_out,expected", [c[1:] for c in PARTIAL],
                         ids=[c[0] for c in PARTIAL])
def test_partial_shapes(op_type, opset, inputs, attrs, n_out, expected):
    got, model = rule_on(op_type, opset, inputs, attrs, n_out)
    assert [g.shape for g in got] == expected
    for g in got:
        assert g.shape is None or all(d is None or type(d) is int for d in g.shape)
    # ONNX's inference: never disagree on an extent (or rank) both know.
    for k, ((elem, shape), g) in enumerate(zip(onnx_inferred(model), got)):
        if elem:
            assert g.elem_type == elem, f"output {k}: {g} vs ONNX elem type {elem}"
        if shape is None or g.shape is None:
            continue
        assert len(shape) == len(g.shape), f"output {k}: rule {g.shape}, ONNX {shape}"
        for a, b in zip(g.shape, shape):
            assert a is None or b is None or a == b, f"output {k}: rule {g.shape}, ONNX {shape}"


def test_symbolic_dims_are_dynamic():
    got, _ = rule_on("Relu", 14, [(F, ["batch", 3])])
    assert got[0].shape == (None, 3)


STATIC_ERRORS = [  # inconsistencies visible in partial shapes are reported at once
    ("Add", 14, [(F, ["n", 3]), (F, [4])], {}, 1, r"cannot be broadcast"),
    ("MatMul", 13, [(F, ["n", 3]), (F, [4, 5])], {}, 1, r"inner dimensions disagree"),
    ("Concat", 13, [(F, ["n", 3]), (F, ["m", 4])], {"axis": 0}, 1, r"dim 1: 4 != 3"),
    ("Reshape", 14, [(F, ["n", 3]), A([-1, -1])], {}, 1, r"more than one -1"),
    ("Reshape", 14, [(F, [2, 3]), A([4, -1])], {}, 1, r"cannot be inferred"),
    ("Squeeze", 13, [(F, ["n", 3]), A([1])], {}, 1, r"axis 1 has extent 3, not 1"),
    ("Split", 13, [(F, [6, "n"]), A([2, 3])], {}, 2, r"sum to the extent 6"),
    ("Split", 13, [(F, ["n", 3]), A([2, 3])], {}, 3, r"2 sizes"),
    ("Split", 13, [(F, [5, "n"])], {}, 2, r"cannot be split evenly"),
    ("Transpose", 13, [(F, ["n", 3])], {"perm": [0, 0]}, 1, r"not a permutation"),
    ("ReduceSum", 13, [(F, ["n", 3]), A([2])], {}, 1, r"axis 2 is out of range"),
    ("Gemm", 13, [(F, ["m", 3]), (F, [3, 5]), (F, [4])], {}, 1, r"C of shape \[4\]"),
]


@pytest.mark.parametrize("op_type,opset,inputs,attrs,n_out,pattern", STATIC_ERRORS,
                         ids=[f"{e[0]}-{i}" for i, e in enumerate(STATIC_ERRORS)])
def test_partial_shape_errors(op_type, opset, inputs, attrs, n_out, pattern):
    with pytest.raises(RuntimeShapeError, match=pattern):
        rule_on(op_type, opset, inputs, attrs, n_out)


def test_reshape_runtime_mismatch_names_expected_and_got():
    op = lookup("", "Reshape")
    with pytest.raises(RuntimeShapeError) as e:
        op.shape_rule([TensorType(F, (2, 3)), TensorType(I64, (1,))], [None, A([5])],
                      {"allowzero": 0}, 1)
    assert str(e.value) == ("Reshape: cannot reshape input of shape [2, 3] (6 elements) to [5]: "
                            "the target has 5 elements")


# ---- 3. every op declares a rule -------------------------------------------------------------

def test_every_registered_op_has_a_shape_rule():
    missing = [op.op_type for op in all_ops() if op.shape_rule is None]
    assert not missing, f"ops without a shape rule: {missing}"


HOST_INPUTS = {"Reshape": (1,), "Slice": (1, 2, 3, 4), "Split": (1,), "Squeeze": (1,),
               "Unsqueeze": (1,), "Expand": (1,), "ReduceSum": (1,), "ReduceMean": (1,),
               "ReduceMax": (1,), "ReduceMin": (1,)}
VIEWS = {"Reshape", "Squeeze", "Unsqueeze", "Identity", "Flatten"}


def test_host_inputs_and_views():
    for op in all_ops():
        assert all(0 <= i < len(op.inputs) or op.variadic for i in op.host_inputs), op.op_type
    # The tensor-op families (those with a numpy reference): host inputs exactly where a shape
    # depends on an operand's value, views exactly where output 0 is input 0 reshaped.
    for op in all_ops():
        if (op.op_type, op.since_versions[0]) not in _COVERED:
            continue
        assert op.host_inputs == HOST_INPUTS.get(op.op_type, ()), op.op_type
        assert op.view == (op.op_type in VIEWS), op.op_type


_COVERED = {(p.values[0], p.values[5]) for p in REF.CASES}


def test_rule_uses_only_host_input_values():
    # Values of non-host inputs are never needed: a rule given them gives the same answer.
    for p in REF.CASES:
        op_type, opset, inputs, attrs, n_out = p.values[:5]
        op, inputs, resolved, types, values, n = static_call(op_type, opset, inputs, attrs, n_out)
        all_values = list(inputs)
        assert op.shape_rule(types, all_values, resolved, n) == op.shape_rule(types, values, resolved, n), p.id


@pytest.mark.parametrize("op_type,opset,inputs,attrs", [
    ("Mod", 28, [REF.R(3, 4, dtype=np.float16), REF.R(4, dtype=np.float16, lo=0.5)], {}),
    ("Cast", 28, [REF.R(2, 3)], {"to": TP.INT32}),
])
def test_rule_matches_reference_beyond_ort(op_type, opset, inputs, attrs):
    # Since-versions ORT does not run yet (so absent from the reference cases).
    op, inputs, resolved, types, values, n = static_call(op_type, opset, inputs, attrs, 1)
    (want,) = op.reference(list(inputs), resolved)
    (got,) = op.shape_rule(types, values, resolved, n)
    assert got.shape == want.shape and got.elem_type == elem_type_of(want.dtype)
