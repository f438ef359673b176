"""Claim decisions (`check_node`) for the registered ops: what is claimed, and the reason given,
naming the offending attribute / dtype / opset, for what is not."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from hipep.graph import GraphView
from hipep.ops import all_ops, check_node

IR_VERSION = 10


def node_in_graph(op, opset, inputs, attrs=None, outputs=(TP.FLOAT,)):
    """inputs: (elem_type, shape) graph inputs, np.ndarray initializers, or None (omitted)."""
    names, g_in, inits = [], [], []
    for i, spec in enumerate(inputs):
        if spec is None:
            names.append("")
        elif isinstance(spec, np.ndarray):
            names.append(f"c{i}")
            inits.append(numpy_helper.from_array(spec, f"c{i}"))
        else:
            names.append(f"x{i}")
            g_in.append(helper.make_tensor_value_info(f"x{i}", spec[0], spec[1]))
    out_names = [f"y{i}" for i in range(len(outputs))]
    node = helper.make_node(op, names, out_names, **(attrs or {}))
    g_out = [helper.make_tensor_value_info(n, t, None) for n, t in zip(out_names, outputs)]
    model = helper.make_model(helper.make_graph([node], "g", g_in, g_out, inits),
                              opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)
    # Every value's type is declared, so no shape inference (which aborts the process on some
    # invalid nodes, e.g. Split-18 whose num_outputs disagrees with its outputs).
    graph = GraphView.from_onnx(model, infer_shapes=False, constant_nodes_as_initializers=False)
    return graph.nodes[0], graph


def claim(*args, **kw):
    node, graph = node_in_graph(*args, **kw)
    return check_node(node, graph)


F = (TP.FLOAT, [2, 3])
F3 = (TP.FLOAT, [2, 3, 4])
H = (TP.FLOAT16, [2, 3])
I32 = (TP.INT32, [2, 3])
B = (TP.BOOL, [2, 3])
D = (TP.DOUBLE, [2, 3])
AX = (TP.INT64, [1])

# (id, op, opset, inputs, attrs, outputs, expected: None = claimed, else substrings of the reason)
CASES = [
    # dtypes outside an op's types (f64 is in arithmetic's, comparisons' and Cast's), and type-constraint
    # mismatches
    ("add-f64", "Add", 14, [D, D], {}, [TP.DOUBLE], None),
    ("add-string", "Add", 14, [(TP.STRING, [2, 2])] * 2, {}, [TP.STRING], ["string"]),
    ("add-bool", "Add", 14, [B, B], {}, [TP.BOOL], ["i1"]),
    ("add-mixed", "Add", 14, [F, H], {}, [TP.FLOAT], ["f16", "constraint T"]),
    ("add-opset6", "Add", 6, [F, F], {}, [TP.FLOAT], ["opset version 6"]),
    ("matmul-string", "MatMul", 13, [(TP.STRING, [2, 2]), (TP.STRING, [2, 2])], {}, [TP.STRING], ["string"]),
    ("matmul-f64", "MatMul", 13, [D, D], {}, [TP.DOUBLE], None),
    ("hardmax-f64", "Hardmax", 13, [D], {}, [TP.DOUBLE], ["f64"]),
    ("max-bool", "Max", 13, [B, B], {}, [TP.BOOL], ["i1"]),
    ("max-opset6-f64", "Max", 6, [D, D], {}, [TP.DOUBLE], ["Max-6 in f32"]),
    ("equal-f64", "Equal", 19, [D, D], {}, [TP.BOOL], None),
    ("equal-string", "Equal", 19, [(TP.STRING, [2, 2])] * 2, {}, [TP.BOOL], ["string"]),
    ("not-i32", "Not", 1, [I32], {}, [TP.INT32], ["i32"]),
    ("softplus-i32", "Softplus", 22, [I32], {}, [TP.INT32], ["i32"]),
    ("gather-float-indices", "Gather", 13, [F, (TP.FLOAT, [2])], {}, [TP.FLOAT], ["input 1", "f32"]),
    ("reshape-i32-shape", "Reshape", 14, [F, (TP.INT32, [2])], {}, [TP.FLOAT], ["input 1", "i32"]),
    ("where-float-cond", "Where", 16, [F, F, F], {}, [TP.FLOAT], ["input 0", "f32"]),
    ("relu-opset1", "Relu", 1, [F], {}, [TP.FLOAT], ["opset version 1"]),
    ("relu-unknown-attr", "Relu", 14, [F], {"foo": 1}, [TP.FLOAT], ["'foo'"]),
    ("gemm-i32", "Gemm", 13, [I32, (TP.INT32, [3, 2])], {}, [TP.INT32], ["i32"]),
    ("gemm-transA", "Gemm", 13, [F, (TP.FLOAT, [3, 2])], {"transA": 2}, [TP.FLOAT], ["transA=2"]),
    ("gemm9-no-c", "Gemm", 9, [F, (TP.FLOAT, [3, 2])], {}, [TP.FLOAT], ["requires input C"]),
    ("gemm-ok", "Gemm", 11, [F, (TP.FLOAT, [3, 2])], {"transB": 0}, [TP.FLOAT], None),
    ("clip-opset6-min-above-max", "Clip", 6, [F], {"min": 2.0, "max": 1.0}, [TP.FLOAT], ["min=2.0 > max=1.0"]),
    ("clip-opset6-f64", "Clip", 6, [D], {}, [TP.DOUBLE], ["element type f64"]),
    ("clip-13", "Clip", 13, [F, None, (TP.FLOAT, [])], {}, [TP.FLOAT], None),
    # Cast
    ("cast-to-string", "Cast", 19, [F], {"to": TP.STRING}, [TP.FLOAT], ["to=string"]),
    ("cast-to-f64", "Cast", 19, [F], {"to": TP.DOUBLE}, [TP.DOUBLE], None),
    ("cast-f64-to-bf16", "Cast", 19, [D], {"to": TP.BFLOAT16}, [TP.BFLOAT16], ["between f64 and bf16"]),
    ("cast-to-f8", "Cast", 19, [F], {"to": TP.FLOAT8E4M3FN}, [TP.FLOAT], ["to=f8e4m3fn"]),
    ("cast-from-f64", "Cast", 13, [D], {"to": TP.FLOAT}, [TP.FLOAT], None),
    ("cast-missing-to", "Cast", 13, [F], {}, [TP.FLOAT], ["'to'"]),
    ("cast-round-mode", "Cast", 25, [F], {"to": TP.FLOAT16, "round_mode": "nearest"}, [TP.FLOAT16],
     ["round_mode='nearest'"]),
    ("cast-round-mode-default", "Cast", 24, [F], {"to": TP.FLOAT16, "round_mode": "up"}, [TP.FLOAT16], None),
    ("cast-saturate0", "Cast", 19, [F], {"to": TP.FLOAT16, "saturate": 0}, [TP.FLOAT16], None),
    ("cast-bool", "Cast", 6, [B], {"to": TP.INT64}, [TP.INT64], None),
    ("cast-28", "Cast", 28, [H], {"to": TP.INT32}, [TP.INT32], None),
    # Mod
    ("mod-float-fmod0", "Mod", 13, [F, F], {}, [TP.FLOAT], ["fmod=0", "f32", "opset 28"]),
    ("mod-f16-fmod0-28", "Mod", 28, [H, H], {}, [TP.FLOAT16], None),
    ("mod-float-fmod1", "Mod", 13, [F, F], {"fmod": 1}, [TP.FLOAT], None),
    ("mod-fmod2", "Mod", 13, [I32, I32], {"fmod": 2}, [TP.INT32], ["fmod=2"]),
    ("mod-int-fmod0", "Mod", 10, [I32, I32], {}, [TP.INT32], None),
    # Gelu, Softmax, LayerNormalization
    ("gelu-approx", "Gelu", 20, [F], {"approximate": "fast"}, [TP.FLOAT], ["approximate='fast'"]),
    ("gelu-tanh", "Gelu", 20, [H], {"approximate": "tanh"}, [TP.FLOAT16], None),
    ("softmax11-rank3-default", "Softmax", 11, [F3], {}, [TP.FLOAT], None),  # coerced to 2-D
    ("softmax1-rank3-axis0", "Softmax", 1, [F3], {"axis": 0}, [TP.FLOAT], None),
    ("softmax11-rank3-axis3", "Softmax", 11, [F3], {"axis": 3}, [TP.FLOAT], ["axis=3", "rank-3"]),
    ("softmax11-rank2-default", "Softmax", 11, [F], {}, [TP.FLOAT], None),
    ("softmax1-rank3-last", "Softmax", 1, [F3], {"axis": 2}, [TP.FLOAT], None),
    ("softmax11-neg-last", "Softmax", 11, [F3], {"axis": -1}, [TP.FLOAT], None),
    ("softmax11-unranked", "Softmax", 11, [(TP.FLOAT, None)], {}, [TP.FLOAT], None),
    ("softmax13-axis1", "Softmax", 13, [F3], {"axis": 1}, [TP.FLOAT], None),
    ("softmax13-axis-range", "Softmax", 13, [F3], {"axis": 3}, [TP.FLOAT], ["axis=3"]),
    ("softmax-i32", "Softmax", 13, [I32], {}, [TP.INT32], ["i32"]),
    ("layernorm-stash", "LayerNormalization", 17, [F, (TP.FLOAT, [3])], {"stash_type": 10},
     [TP.FLOAT], ["stash_type=10"]),
    ("layernorm-f16-stats", "LayerNormalization", 17, [H, (TP.FLOAT16, [3])], {},
     [TP.FLOAT16, TP.FLOAT, TP.FLOAT], None),
    ("layernorm-f16-stats-f16", "LayerNormalization", 17, [H, (TP.FLOAT16, [3])], {},
     [TP.FLOAT16, TP.FLOAT16], ["output 1", "f16"]),
    ("layernorm-axis", "LayerNormalization", 17, [F, (TP.FLOAT, [3])], {"axis": 2}, [TP.FLOAT], ["axis=2"]),
    # Constant
    ("constant-sparse", "Constant", 13, [], {"sparse_value": helper.make_sparse_tensor(
        helper.make_tensor("v", TP.FLOAT, [1], [1.0]), helper.make_tensor("i", TP.INT64, [1], [0]), [3])},
     [TP.FLOAT], ["sparse_value"]),
    ("constant-string", "Constant", 13, [], {"value_string": "hi"}, [TP.STRING], ["string"]),
    ("constant-string-untyped", "Constant", 13, [], {"value_string": "hi"}, [TP.FLOAT], ["value_string"]),
    ("constant-strings", "Constant", 13, [], {"value_strings": ["a", "b"]}, [TP.STRING], ["string"]),
    ("constant-f64", "Constant", 13, [], {"value": helper.make_tensor("v", TP.DOUBLE, [1], [1.0])},
     [TP.DOUBLE], ["f64"]),
    ("constant-floats", "Constant", 13, [], {"value_floats": [1.0, 2.0]}, [TP.FLOAT], None),
    ("constant-ints", "Constant", 13, [], {"value_ints": [1, 2]}, [TP.INT64], None),
    # Slice / Split / Squeeze / Unsqueeze / Transpose / Concat
    ("slice10-attr", "Slice", 10, [F, AX, AX], {"starts": [0]}, [TP.FLOAT], ["'starts'"]),
    ("slice13-no-ends", "Slice", 13, [F], {}, [TP.FLOAT], ["'starts' and 'ends'"]),
    ("slice1-attrs", "Slice", 1, [F], {"starts": [0], "ends": [1]}, [TP.FLOAT], None),
    ("slice1-no-ends", "Slice", 1, [F], {"starts": [0]}, [TP.FLOAT], ["'ends'"]),
    ("slice-f16-i32", "Slice", 13, [H, (TP.INT32, [1]), (TP.INT32, [1])], {}, [TP.FLOAT16], None),
    ("split13-even", "Split", 13, [F], {}, [TP.FLOAT] * 3, None),
    ("split11-even", "Split", 11, [F], {"axis": 1}, [TP.FLOAT] * 3, None),
    ("split18-neither", "Split", 18, [F], {}, [TP.FLOAT] * 2, ["'split'", "'num_outputs'"]),
    ("split18-mismatch", "Split", 18, [F], {"num_outputs": 2}, [TP.FLOAT] * 3, ["num_outputs=2", "3 outputs"]),
    ("split13-attr", "Split", 13, [F], {"split": [1, 1]}, [TP.FLOAT] * 2, ["'split'"]),
    ("split11-input", "Split", 11, [F, np.array([1, 1], np.int64)], {}, [TP.FLOAT] * 2, ["'split'"]),
    ("split13-const-len", "Split", 13, [F, np.array([1, 1], np.int64)], {}, [TP.FLOAT] * 3, ["2 sizes", "3 outputs"]),
    ("split13-const", "Split", 13, [F, np.array([1, 1], np.int64)], {}, [TP.FLOAT] * 2, None),
    ("split13-dynamic", "Split", 13, [F, (TP.INT64, [2])], {}, [TP.FLOAT] * 2, None),
    ("split11-attr", "Split", 11, [F], {"split": [1, 2], "axis": 1}, [TP.FLOAT] * 2, None),
    ("split18-both", "Split", 18, [F, np.array([1, 2], np.int64)], {"num_outputs": 2, "axis": 1},
     [TP.FLOAT] * 2, ["mutually exclusive"]),
    ("split18-num", "Split", 18, [F], {"num_outputs": 3, "axis": 1}, [TP.FLOAT] * 3, None),
    ("split-too-many", "Split", 18, [(TP.FLOAT, [300])], {"num_outputs": 300}, [TP.FLOAT] * 300, ["at most 256"]),
    ("unsqueeze13-attr", "Unsqueeze", 13, [F, AX], {"axes": [0]}, [TP.FLOAT], ["'axes'"]),
    ("unsqueeze11-no-axes", "Unsqueeze", 11, [F], {}, [TP.FLOAT], ["'axes'"]),
    ("unsqueeze13-no-axes", "Unsqueeze", 13, [F], {}, [TP.FLOAT], ["'axes'"]),
    ("squeeze11-input", "Squeeze", 11, [F, AX], {}, [TP.FLOAT], ["'axes'", "attribute"]),
    ("squeeze13-none", "Squeeze", 13, [F], {}, [TP.FLOAT], None),
    ("transpose-bad-perm", "Transpose", 13, [F], {"perm": [0, 0]}, [TP.FLOAT], ["perm=[0, 0]"]),
    ("transpose-perm-rank", "Transpose", 13, [F], {"perm": [2, 0, 1]}, [TP.FLOAT], ["perm=[2, 0, 1]"]),
    ("transpose-unranked", "Transpose", 13, [(TP.FLOAT, None)], {"perm": [1, 0]}, [TP.FLOAT], None),
    ("concat-no-axis", "Concat", 13, [F, F], {}, [TP.FLOAT], ["'axis'"]),
    ("concat-many", "Concat", 13, [F, F, F, F], {"axis": 0}, [TP.FLOAT], None),
    ("shape-f64", "Shape", 15, [D], {"start": 1}, [TP.INT64], None),  # data movement carries every type
    ("shape-bool", "Shape", 25, [B], {"end": -1}, [TP.INT64], None),
    # reductions
    ("reducesum13-attr", "ReduceSum", 13, [F], {"axes": [0]}, [TP.FLOAT], ["'axes'", "opset 13"]),
    ("reducemean13-input", "ReduceMean", 13, [F, AX], {}, [TP.FLOAT], ["'axes'", "attribute"]),
    ("reducemean13-noop", "ReduceMean", 13, [F], {"noop_with_empty_axes": 1}, [TP.FLOAT],
     ["noop_with_empty_axes"]),
    ("reducemax18-bool", "ReduceMax", 18, [B, AX], {}, [TP.BOOL], ["i1", "opset 18"]),
    ("reducemax20-bool", "ReduceMax", 20, [B, AX], {}, [TP.BOOL], None),
    ("reducesum-bool", "ReduceSum", 13, [B], {}, [TP.BOOL], ["i1"]),
    ("reducemin12-attr", "ReduceMin", 12, [I32], {"axes": [1], "keepdims": 0}, [TP.INT32], None),
    ("reducesum13-noop", "ReduceSum", 13, [H, AX], {"noop_with_empty_axes": 1}, [TP.FLOAT16], None),
]


@pytest.mark.parametrize("op,opset,inputs,attrs,outputs,expected", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_claim(op, opset, inputs, attrs, outputs, expected):
    reason = claim(op, opset, inputs, attrs, outputs)
    if expected is None:
        assert reason is None, reason
    else:
        assert reason is not None, "claimed, expected a rejection"
        for part in expected:
            assert part in reason, f"{part!r} not in {reason!r}"


def test_registered_since_versions_exist_in_onnx():
    history: dict[str, set[int]] = {}
    for s in onnx.defs.get_all_schemas_with_history():
        if s.domain == "":
            history.setdefault(s.name, set()).add(s.since_version)
    for op in all_ops():
        assert list(op.since_versions) == sorted(set(op.since_versions)), op.op_type
        if op.domain != "" or op.op_type not in history:
            # contrib ops (com.microsoft, and ORT's own default-domain SimplifiedLayerNormalization)
            # have no ONNX schema: tests/unit/test_ops_contrib.py and test_ops_attention.py check them;
            # hipep's own ops are made by the compiler: tests/unit/test_fusion.py
            assert op.domain in ("", "com.microsoft", "hipep"), op.key
            continue
        unknown = set(op.since_versions) - history.get(op.op_type, set())
        assert not unknown, f"{op.op_type}: {sorted(unknown)} are not ONNX since-versions"


def test_registered_op_set():
    expected = set("""Add Sub Mul Div Pow Max Min Mod Neg Abs Exp Log Sqrt Reciprocal Relu Sigmoid Tanh
        Erf Sin Cos Floor Ceil Round Sign Softplus LeakyRelu Elu Gelu HardSigmoid Clip Equal Less
        Greater LessOrEqual GreaterOrEqual Not And Or Xor Where Cast MatMul Gemm Softmax
        LayerNormalization Reshape Transpose Concat Slice Split Gather Shape Squeeze Unsqueeze
        Constant Identity Expand ReduceSum ReduceMean ReduceMax ReduceMin""".split())
    assert expected <= {op.op_type for op in all_ops()}
