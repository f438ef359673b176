"""Contracts of the ops test_ops_more.py compares with ONNX Runtime: partial shapes at compile time,
the claims hipep refuses and why, run-time shape errors naming the op and input, and models of those
ops end to end through hipep.InferenceSession (no CPU fallback), also under the random CPU
schedule.
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from hipep.errors import RuntimeShapeError
from hipep.graph import GraphView
from hipep.ops import check_node, lookup, resolve_attributes

from helpers import load_script

REF = load_script("tests/unit/test_ops_reference.py", "_hipep_reference_harness")
SR = load_script("tests/unit/test_shape_rules.py", "_hipep_shape_rule_harness")
R = REF.R
f32, f16, i32, i64, b, u8 = np.float32, np.float16, np.int32, np.int64, np.bool_, np.uint8


def A(values, dtype=np.int64):
    return np.array(values, dtype=dtype)


# ---- partial shapes at compile time ---------------------------------------------------------------

def rule_on(op_type, opset, inputs, attrs=None, n_out=1):
    """The rule's answer on a single-node model (see test_shape_rules.rule_on)."""
    return SR.rule_on(op_type, opset, inputs, attrs, n_out)[0]


F, I64 = TP.FLOAT, TP.INT64
PARTIAL = [
    ("nonzero", "NonZero", 13, [(F, ["n", 3])], {}, 1, [(2, None)]),
    ("nonzero-scalar", "NonZero", 13, [(F, [])], {}, 1, [(1, None)]),
    ("nonzero-known", "NonZero", 13, [A([[0, 1], [2, 0]], i64)], {}, 1, [(2, 2)]),
    ("range-unknown", "Range", 11, [(I64, []), (I64, []), (I64, [])], {}, 1, [(None,)]),
    ("range-known", "Range", 11, [A(0), A(10), A(3)], {}, 1, [(4,)]),
    ("cos-len", "ConstantOfShape", 20, [(I64, [3])], {}, 1, [(None, None, None)]),
    ("cos-unknown-len", "ConstantOfShape", 20, [(I64, ["r"])], {}, 1, [None]),
    ("cos-known", "ConstantOfShape", 20, [A([2, 5])], {}, 1, [(2, 5)]),
    ("topk-unknown-k", "TopK", 11, [(F, ["n", 9]), (I64, [1])], {}, 2, [(None, None)] * 2),
    ("topk-known-k", "TopK", 11, [(F, ["n", 9]), A([4])], {}, 2, [(None, 4)] * 2),
    ("topk-1", "TopK", 1, [(F, [5, "n"])], {"k": 2, "axis": 0}, 2, [(2, None)] * 2),
    ("compress-unknown", "Compress", 11, [(F, [3, 4]), (TP.BOOL, [4])], {"axis": 1}, 1, [(3, None)]),
    ("compress-flat", "Compress", 11, [(F, [3, 4]), (TP.BOOL, [4])], {}, 1, [(None,)]),
    ("argmax", "ArgMax", 13, [(F, ["n", 3, 4])], {"axis": 1, "keepdims": 0}, 1, [(None, 4)]),
    ("reduce-l2", "ReduceL2", 18, [(F, ["n", 3, 4]), A([-1])], {}, 1, [(None, 3, 1)]),
    ("einsum-attention", "Einsum", 12, [(F, ["b", 12, "q", 64]), (F, ["b", 12, "k", 64])],
     {"equation": "bhqd,bhkd->bhqk"}, 1, [(None, 12, None, None)]),
    ("einsum-letter-fixed", "Einsum", 12, [(F, ["m", "k"]), (F, [64, 32])], {"equation": "ij,jk->ik"}, 1,
     [(None, 32)]),
    ("einsum-ellipsis-unranked", "Einsum", 12, [(F, None), (F, [4, 5])], {"equation": "...ij,jk->...ik"}, 1, [None]),
    ("einsum-unranked-letters", "Einsum", 12, [(F, None), (F, [4, 5])], {"equation": "ij,jk->ik"}, 1, [(None, 5)]),
    ("eyelike", "EyeLike", 22, [(F, ["n", 3])], {"dtype": TP.INT32}, 1, [(None, 3)]),
    ("batchnorm-c-from-scale", "BatchNormalization", 15,
     [(F, ["n", "c", 4]), (F, [3]), (F, [3]), (F, [3]), (F, [3])], {}, 1, [(None, 3, 4)]),
    ("matmulinteger", "MatMulInteger", 10, [(TP.UINT8, ["m", 4]), (TP.INT8, [4, 5])], {}, 1, [(None, 5)]),
    ("cumsum", "CumSum", 14, [(F, ["n", 3]), (I64, [])], {}, 1, [(None, 3)]),
    ("unpool", "MaxUnpool", 22, [(F, ["n", 3, 4, "w"]), (I64, ["n", 3, 4, "w"])], {"kernel_shape": [2, 2],
                                                                                  "strides": [2, 2]}, 1,
     [(None, 3, 8, None)]),
    ("unpool-shape-unknown", "MaxUnpool", 22, [(F, [1, 1, 2, 2]), (I64, [1, 1, 2, 2]), (I64, [4])],
     {"kernel_shape": [2, 2]}, 1, [(None, None, None, None)]),
]


@pytest.mark.parametrize("op_type,opset,inputs,attrs,n_out,expected", [c[1:] for c in PARTIAL],
                         ids=[c[0] for c in PARTIAL])
def test_partial_shapes(op_type, opset, inputs, attrs, n_out, expected):
    assert [g.shape for g in rule_on(op_type, opset, inputs, attrs, n_out)] == expected


def test_einsum_rule_rejects_rank_mismatch():
    with pytest.raises(RuntimeShapeError, match=r"input 1 has rank 3"):
        rule_on("Einsum", 12, [(F, ["m", 4]), (F, [4, 5, 6])], {"equation": "ij,jk->ik"})
    with pytest.raises(RuntimeShapeError, match=r"subscript 'j' has extents 4, 3"):
        rule_on("Einsum", 12, [(F, ["m", 4]), (F, [3, 5])], {"equation": "ij,jk->ik"})


# ---- claims: what is rejected, and why --------------------------------------------------------------

_OUT_ELEMS = {"ArgMax": lambda i, a: [I64], "TopK": lambda i, a: [i[0][0], I64],
              "Dropout": lambda i, a: [i[0][0], TP.BOOL], "EyeLike": lambda i, a: [a.get("dtype", i[0][0])],
              "IsInf": lambda i, a: [TP.BOOL], "CastLike": lambda i, a: [i[1][0]],
              "QLinearMatMul": lambda i, a: [i[7][0]]}


def claim_of(op_type, opset, inputs, attrs=None, n_out=1, initializers=None):
    """check_node's answer for a single node; inputs are (elem, shape) pairs or None; outputs
    are declared (element type as the op gives it, shape unknown)."""
    initializers = initializers or {}
    attrs = attrs or {}
    in_names, g_in, inits = [], [], []
    for i, spec in enumerate(inputs):
        if spec is None:
            in_names.append("")
        elif i in initializers:
            in_names.append(f"c{i}")
            inits.append(numpy_helper.from_array(initializers[i], f"c{i}"))
        else:
            in_names.append(f"x{i}")
            g_in.append(helper.make_tensor_value_info(f"x{i}", spec[0], spec[1]))
    elems = _OUT_ELEMS.get(op_type, lambda i, a: [i[0][0]])(inputs, attrs)
    elems = (elems + [elems[-1]] * n_out)[:n_out]
    out_names = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op_type, in_names, out_names, **attrs)
    g_out = [helper.make_tensor_value_info(n, e, None) for n, e in zip(out_names, elems)]
    model = helper.make_model(helper.make_graph([node], "g", g_in, g_out, inits),
                              opset_imports=[helper.make_opsetid("", opset)], ir_version=REF.IR_VERSION)
    graph = GraphView.from_onnx(model, infer_shapes=False)
    return check_node(graph.nodes[0], graph)


H = TP.FLOAT16
REJECT = [
    ("Softsign", 1, [(H, [3])], {}, 1, ["f16", "opset 1"]),
    ("IsInf", 10, [(H, [3])], {}, 1, ["f16", "IsInf opset 10"]),
    ("PRelu", 9, [(TP.INT32, [3]), (TP.INT32, [3])], {}, 1, ["i32", "opset 16"]),
    ("BitShift", 11, [(TP.UINT8, [3]), (TP.UINT8, [3])], {"direction": "UP"}, 1, ["direction='UP'"]),
    ("Dropout", 13, [(F, [3]), (F, []), (TP.BOOL, [])], {}, 1, ["training_mode", "not a constant"]),
    ("CastLike", 25, [(F, [3]), (I64, [1])], {"round_mode": "down"}, 1, ["round_mode"]),
    ("Size", 1, [(H, [3])], {}, 1, ["f16"]),
    ("ReduceL2", 1, [(H, [3])], {}, 1, ["f16"]),
    ("ReduceProd", 18, [(F, [3])], {"axes": [0]}, 1, ["'axes' is not part"]),
    ("ArgMax", 11, [(F, [3])], {"select_last_index": 1}, 1, ["select_last_index"]),
    ("ArgMax", 13, [(F, [3, 4])], {"axis": 2}, 1, ["axis=2"]),
    ("CumSum", 11, [(H, [3]), (I64, [])], {}, 1, ["f16", "opset 14"]),
    ("TopK", 11, [(F, [3]), (I64, [1])], {"sorted": 0}, 2, ["sorted=0"]),
    ("TopK", 10, [(TP.INT32, [3]), (I64, [1])], {}, 2, ["i32", "opset 11"]),
    ("TopK", 10, [(F, [3])], {"k": 1}, 2, ["'k' is not part"]),
    ("TopK", 1, [(H, [3])], {"k": 1}, 2, ["f16"]),
    ("EyeLike", 22, [(F, [3, 3])], {"dtype": TP.BOOL}, 1, ["element type i1"]),
    ("EyeLike", 22, [(F, [3, 3])], {"dtype": TP.FLOAT16}, 1, ["dtype=f16", "f32 input"]),
    ("ConstantOfShape", 20, [(I64, [2])], {"value": numpy_helper.from_array(A([1, 2], f32))}, 1, ["one element"]),
    ("Compress", 11, [(F, [3, 4]), (TP.BOOL, [3])], {"axis": 2}, 1, ["axis=2"]),
    ("LogSoftmax", 11, [(F, [2, 3, 4])], {"axis": 3}, 1, ["axis=3", "rank-3"]),
    ("LogSoftmax", 1, [(H, [2, 3])], {"axis": 1}, 1, ["f16"]),
    ("GroupNormalization", 18, [(H, [2, 4, 3]), (H, [2]), (H, [2])], {"num_groups": 2}, 1, ["f16", "opset 18"]),
    ("GroupNormalization", 21, [(F, [2, 4, 3]), (F, [2]), (F, [2])], {"num_groups": 2}, 1, ["length 2", "channel"]),
    ("GroupNormalization", 21, [(F, [2, 4, 3]), (F, [4]), (F, [4])], {"num_groups": 2, "stash_type": 0}, 1,
     ["stash_type=0"]),
    ("BatchNormalization", 15, [(F, [2, 3]), (F, [3]), (F, [3]), (F, [3]), (F, [3])], {"training_mode": 1}, 1,
     ["training_mode=1", "three outputs"]),
    ("BatchNormalization", 15, [(F, [2, 3]), (F, [3]), (F, [3]), (F, [3]), (F, [3])], {}, 3,
     ["training_mode=0"]),
    ("BatchNormalization", 9, [(F, [2, 3]), (F, [3]), (F, [3]), (F, [3]), (F, [3])], {}, 5, ["training outputs"]),
    ("BatchNormalization", 7, [(F, [2, 3]), (F, [3]), (F, [3]), (F, [3]), (F, [3])], {"spatial": 0}, 1,
     ["spatial=0"]),
    ("BatchNormalization", 14, [(H, [2, 3]), (F, [3]), (F, [3]), (F, [3]), (F, [3])], {}, 1, ["one element type"]),
    ("LpNormalization", 22, [(F, [2, 3])], {"p": 3}, 1, ["p=3"]),
    ("MeanVarianceNormalization", 13, [(F, [2, 3, 4])], {}, 1, ["axes=[0, 2, 3]"]),
    ("LRN", 13, [(F, [2, 3, 4])], {"size": 3}, 1, ["4-D"]),
    ("Einsum", 12, [(F, [3, 4]), (F, [4, 5])], {"equation": "bA,cb"}, 1, ["upper-case", "implicit"]),
    ("Einsum", 12, [(F, [3, 4]), (F, [4, 5])], {"equation": "ij,jk->ik,"}, 1, ["','"]),
    ("Einsum", 12, [(F, [3, 4])], {"equation": "ij,jk->ik"}, 1, ["2 input terms", "1 inputs"]),
    ("Einsum", 12, [(F, [3, 4])], {"equation": "ij->k"}, 1, ["'k' does not occur"]),
    ("Einsum", 12, [(F, [3, 4])], {"equation": "ij->ii"}, 1, ["repeats"]),
    ("Einsum", 12, [(F, [3, 4, 5])], {"equation": "ij->i"}, 1, ["rank 3"]),
    ("Max", 13, [(TP.INT16, [3]), (TP.INT16, [3])], {}, 1, ["element type i16"]),
    ("Cast", 21, [(TP.DOUBLE, [3])], {"to": TP.BFLOAT16}, 1, ["between f64 and bf16"]),
    ("BitCast", 26, [(F, [3])], {"to": TP.INT64}, 1, ["f32 (32 bits) to i64 (64 bits)", "widths must be equal"]),
    ("BitCast", 26, [(TP.UINT8, [3])], {"to": TP.BOOL}, 1, ["from u8 to bool"]),
    ("BitCast", 26, [(F, [3])], {"to": TP.FLOAT8E4M3FN}, 1, ["is not a supported target"]),
    ("QLinearMatMul", 10, [(TP.INT8, [2, 3]), (F, []), (TP.INT8, []), (TP.UINT8, [3, 4]), (F, []),
                           (TP.UINT8, []), (F, []), (TP.INT8, [])], {}, 1, ["i8/u8/i8"]),
    ("MaxUnpool", 11, [(F, [1, 1, 2, 2]), (I64, [1, 1, 2, 2]), (I64, [4])], {"kernel_shape": [2, 2], "strides": [2, 2]},
     1, ["output_shape", "ONNX spec", "left to ORT"]),
]


@pytest.mark.parametrize("op_type,opset,inputs,attrs,n_out,words", [r[:6] for r in REJECT],
                         ids=[f"{r[0]}-{r[1]}-{i}" for i, r in enumerate(REJECT)])
def test_claim_rejects_with_reason(op_type, opset, inputs, attrs, n_out, words):
    reason = claim_of(op_type, opset, inputs, attrs, n_out)
    assert reason is not None, "claimed"
    for w in words:
        assert w in reason, reason


def test_dropout_training_mode_constant():
    spec = [(F, [3]), (F, []), (TP.BOOL, [])]
    assert claim_of("Dropout", 13, spec, n_out=2, initializers={2: np.array(False)}) is None
    assert "training_mode=true" in claim_of("Dropout", 13, spec, n_out=2, initializers={2: np.array(True)})


def test_dropout_with_constant_training_mode_matches_ort():
    x = R(3, 4)
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"])
    model = helper.make_model(
        helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TP.FLOAT, [3, 4])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None),
                           helper.make_tensor_value_info("mask", TP.BOOL, None)],
                          [numpy_helper.from_array(A(0.4, f32), "r"), numpy_helper.from_array(np.array(False), "t")]),
        opset_imports=[helper.make_opsetid("", 13)], ir_version=REF.IR_VERSION)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    graph = GraphView.from_onnx(model)
    n = graph.nodes[0]
    op = lookup("", "Dropout")
    assert check_node(n, graph) is None
    got = op.reference([x, A(0.4, f32), np.array(False)], resolve_attributes(op, n))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


# ---- run-time errors ----------------------------------------------------------------------------------

def ref(op):
    o = lookup("", op)
    return lambda inputs, **attrs: o.reference(inputs, {**{k: v for k, v in o.attributes.items()}, **attrs})


ERRORS = [
    ("TopK", [R(2, 3), A([4], i64)], {}, r"k=4 is greater than the extent 3 of axis 1 \(input is \[2, 3\]\)"),
    ("TopK", [R(2, 3), A([[1]], i64)], {}, r"K must be a 1-D tensor of one element"),
    ("TopK", [R(2, 3), A([-1], i64)], {}, r"k=-1 must be non-negative"),
    ("ArgMax", [R(0, 3)], {"axis": 0}, r"cannot reduce axis 0 of extent 0"),
    ("ArgMin", [R()], {}, r"rank >= 1"),
    ("CumSum", [R(2, 3), A(2, i64)], {}, r"axis 2 is out of range for a rank-2 input"),
    ("CumSum", [R(2, 3), A([0, 1], i64)], {}, r"'axis' must be a scalar"),
    ("Range", [A(1, i64), A(5, i64), A(0, i64)], {}, r"delta must not be zero"),
    ("Range", [A([1, 2], i64), A(5, i64), A(1, i64)], {}, r"'start' must be a scalar"),
    ("ConstantOfShape", [A([2, -1], i64)], {}, r"negative dimension"),
    ("ConstantOfShape", [A([[2, 1]], i64)], {}, r"must be a 1-D tensor"),
    ("Trilu", [R(3)], {}, r"rank >= 2"),
    ("EyeLike", [R(3)], {}, r"must be 2-D"),
    ("Compress", [R(3, 4), A([[True]], b)], {"axis": 0}, r"condition must be 1-D"),
    ("InstanceNormalization", [R(2, 3, 4), R(2), R(3)], {}, r"scale must have shape \[3\]"),
    ("GroupNormalization", [R(2, 6, 4), R(6), R(6)], {"num_groups": 4}, r"num_groups=4 does not divide the 6"),
    ("GroupNormalization", [R(2, 6, 4), R(5), R(5)], {"num_groups": 3}, r"scale and bias must have shape \[6\]"),
    ("BatchNormalization", [R(2, 3, 4), R(3), R(3), R(4), R(3)], {}, r"input_mean must have shape \[3\]"),
    ("LRN", [R(2, 3, 4)], {"size": 3}, r"must be 4-D"),
    ("Einsum", [R(3, 4), R(5, 6)], {"equation": "ij,jk->ik"}, r"subscript 'j' has extents 4, 5"),
    ("Einsum", [R(3, 4)], {"equation": "ijk->i"}, r"rank 2"),
    ("Einsum", [R(3, 4)], {"equation": "ii->i"}, r"subscript 'i' repeats in input 0"),
    ("MatMulInteger", [np.ones((2, 3), u8), np.ones((4, 5), u8)], {}, r"MatMulInteger: inner dimensions disagree"),
    ("MatMulInteger", [np.ones((2, 3), u8), np.ones((3, 5), u8), A([1, 2], u8)], {}, r"a_zero_point must be a scalar"),
    ("PRelu", [R(2, 3), R(2)], {}, r"X is \[2, 3\], slope is \[2\]"),
    ("Sum", [R(2), R(3)], {}, r"input 1 is \[3\]"),
    ("MaxUnpool", [R(1, 1, 2, 2), A([[[[0, 3], [8, 16]]]], i64)], {"kernel_shape": [2, 2], "strides": [2, 2]},
     r"index 16, outside Y's \[0, 16\)"),
    ("MaxUnpool", [R(1, 1, 2, 2), A([[[[0, 3], [8, 15]]]], i64), A([1, 1, 3, 3], i64)],
     {"kernel_shape": [2, 2], "strides": [2, 2]}, r"output_shape \[1, 1, 3, 3\] is smaller"),
    ("MaxUnpool", [R(1, 1, 2, 2), A([[0, 3]], i64)], {"kernel_shape": [2, 2]}, r"I must have X's shape"),
]


@pytest.mark.parametrize("op,inputs,attrs,pattern", ERRORS, ids=[f"{e[0]}-{i}" for i, e in enumerate(ERRORS)])
def test_runtime_shape_errors(op, inputs, attrs, pattern):
    with pytest.raises(RuntimeShapeError, match=pattern) as e:
        ref(op)(inputs, **attrs)
    assert str(e.value).startswith(f"{op}: ")


RULE_ERRORS = [  # errors the shape rules raise too (they show in shapes or host-input values)
    ("TopK", [(F, [2, 3]), A([4])], {}, 2, r"k=4 is greater than the extent 3"),
    ("ArgMax", [(F, [0, 3])], {"axis": 0}, 1, r"extent 0"),
    ("Range", [A(1), A(5), A(0)], {}, 1, r"delta must not be zero"),
    ("ConstantOfShape", [A([2, -1])], {}, 1, r"negative dimension"),
    ("Trilu", [(F, [3])], {}, 1, r"rank >= 2"),
    ("GroupNormalization", [(F, [2, 6, 4]), (F, [6]), (F, [6])], {"num_groups": 4}, 1, r"does not divide"),
    ("BatchNormalization", [(F, [2, 3, 4]), (F, [3]), (F, [3]), (F, [4]), (F, [3])], {}, 1,
     r"input_mean must have shape"),
    ("LRN", [(F, [2, 3, 4])], {"size": 3}, 1, r"rank 4"),
    ("Einsum", [(F, [3, 4]), (F, [5, 6])], {"equation": "ij,jk->ik"}, 1, r"subscript 'j' has extents 4, 5"),
    ("MatMulInteger", [(TP.UINT8, [3, 4]), (TP.INT8, [5, 6])], {}, 1, r"inner dimensions disagree"),
    ("MaxUnpool", [(F, ["n", 1, 2, 2]), (I64, ["n", 1, 2, 3])], {"kernel_shape": [2, 2]}, 1,
     r"I must have X's shape \[\?, 1, 2, 2\], got \[\?, 1, 2, 3\]"),
]


@pytest.mark.parametrize("op,inputs,attrs,n_out,pattern", RULE_ERRORS,
                         ids=[f"{e[0]}-{i}" for i, e in enumerate(RULE_ERRORS)])
def test_rule_errors(op, inputs, attrs, n_out, pattern):
    with pytest.raises(RuntimeShapeError, match=pattern) as e:
        rule_on(op, {"TopK": 11, "ArgMax": 13, "Range": 11, "ConstantOfShape": 20, "Trilu": 14,
                     "GroupNormalization": 21, "BatchNormalization": 15, "LRN": 13, "Einsum": 12,
                     "MatMulInteger": 10, "MaxUnpool": 22}[op],
                inputs, attrs, n_out)
    assert str(e.value).startswith(f"{op}: ")


# ---- end to end through hipep -------------------------------------------------------------------------

def _chain_model():
    """Range → ConstantOfShape → TopK → CumSum → ArgMax, with NonZero and Compress on values the
    device computes, Einsum, LogSoftmax, Hardmax, Trilu, Selu and reductions on the way: output
    sizes come from values the host reads at run time (Range's operands, TopK's k, NonZero's data,
    Compress's condition)."""
    n = helper.make_node
    nodes = [
        n("Range", ["start", "limit", "delta"], ["r"], name="range"),                 # [L]
        n("Shape", ["r"], ["r_shape"], name="r_shape"),
        n("Concat", ["two", "r_shape"], ["cos_shape"], name="cos_shape", axis=0),     # [2, L]
        n("ConstantOfShape", ["cos_shape"], ["ones"], name="ones",
          value=numpy_helper.from_array(A([1.0], f32))),                               # [2, L] of 1
        n("Cast", ["r"], ["rf"], name="rf", to=TP.FLOAT),
        n("Mul", ["ones", "rf"], ["grid"], name="grid"),
        n("Mul", ["x", "grid"], ["scored"], name="scored"),                            # x: [2, L]
        n("TopK", ["scored", "k"], ["top", "top_idx"], name="topk", axis=1),           # [2, k]
        n("CumSum", ["top", "axis1"], ["csum"], name="csum", exclusive=1),
        n("ArgMax", ["csum"], ["am"], name="argmax", axis=1, keepdims=0),
        n("Greater", ["top", "zero"], ["pos"], name="pos"),
        n("NonZero", ["pos"], ["nz"], name="nonzero"),                                 # [2, count]
        n("ReduceSum", ["nz"], ["nz_sum"], name="nz_sum", keepdims=0),
        n("Einsum", ["top", "top"], ["gram"], name="gram", equation="bi,ci->bc"),
        n("LogSoftmax", ["gram"], ["lsm"], name="lsm", axis=-1),
        n("ReduceLogSumExp", ["csum", "axes1"], ["lse"], name="lse", keepdims=0),
        n("Trilu", ["gram"], ["tri"], name="tri", upper=0),
        n("Hardmax", ["tri"], ["hard"], name="hard"),
        n("Selu", ["lsm"], ["selu"], name="selu"),
        n("ReduceSum", ["top", "axes0"], ["col_sum"], name="col_sum", keepdims=0),          # [k]
        n("Greater", ["col_sum", "zero"], ["cond"], name="cond"),
        n("Compress", ["top_idx", "cond"], ["kept"], name="compress", axis=1),        # [2, count]
    ]
    inits = [numpy_helper.from_array(A(2, i64), "delta"), numpy_helper.from_array(A([2], i64), "two"),
             numpy_helper.from_array(A(1, i64), "axis1"), numpy_helper.from_array(A([1], i64), "axes1"),
             numpy_helper.from_array(A(0.0, f32), "zero"), numpy_helper.from_array(A([0], i64), "axes0")]
    inputs = [helper.make_tensor_value_info("x", TP.FLOAT, [2, "L"]),
              helper.make_tensor_value_info("start", TP.INT64, []),
              helper.make_tensor_value_info("limit", TP.INT64, []),
              helper.make_tensor_value_info("k", TP.INT64, [1])]
    outs = [("top", TP.FLOAT), ("top_idx", TP.INT64), ("csum", TP.FLOAT), ("am", TP.INT64), ("nz", TP.INT64),
            ("nz_sum", TP.INT64), ("lsm", TP.FLOAT), ("lse", TP.FLOAT), ("hard", TP.FLOAT), ("selu", TP.FLOAT),
            ("kept", TP.INT64)]
    outputs = [helper.make_tensor_value_info(name, elem, None) for name, elem in outs]
    return helper.make_model(helper.make_graph(nodes, "chain", inputs, outputs, inits),
                             opset_imports=[helper.make_opsetid("", 18)], ir_version=REF.IR_VERSION)


def _norm_model():
    """Conv-net style normalizations: BatchNorm → LRN → InstanceNorm → GroupNorm → MVN, with
    PRelu, LpNormalization and ReduceL2 on the way."""
    n = helper.make_node
    c = 4
    rng = np.random.default_rng(5)
    p = lambda name, lo=-1.0, hi=1.0: numpy_helper.from_array(rng.uniform(lo, hi, c).astype(f32), name)  # noqa: E731
    nodes = [
        n("BatchNormalization", ["x", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"], name="bn"),
        n("PRelu", ["bn", "slope"], ["pr"], name="prelu"),
        n("LRN", ["pr"], ["lrn"], name="lrn", size=3, alpha=1e-2),
        n("InstanceNormalization", ["lrn", "in_s", "in_b"], ["inorm"], name="inorm"),
        n("GroupNormalization", ["inorm", "gn_s", "gn_b"], ["gn"], name="gn", num_groups=2),
        n("MeanVarianceNormalization", ["gn"], ["mvn"], name="mvn"),
        n("LpNormalization", ["mvn"], ["lp"], name="lp", axis=1),
        n("ReduceL2", ["lp", "axes23"], ["l2"], name="l2", keepdims=0),
        n("HardSwish", ["l2"], ["y"], name="hswish"),
    ]
    inits = [p("bn_s"), p("bn_b"), p("bn_m"), p("bn_v", 0.5, 2.0), p("in_s"), p("in_b"), p("gn_s"), p("gn_b"),
             numpy_helper.from_array(rng.uniform(0, 0.5, (c, 1, 1)).astype(f32), "slope"),
             numpy_helper.from_array(A([2, 3], i64), "axes23")]
    return helper.make_model(
        helper.make_graph(nodes, "norms", [helper.make_tensor_value_info("x", TP.FLOAT, ["n", c, 5, 5])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)], inits),
        opset_imports=[helper.make_opsetid("", 21)], ir_version=REF.IR_VERSION)


def _compare(model, feeds_list, **options):
    import hipep

    sess = hipep.InferenceSession(model.SerializeToString(), device="cpu", **options)
    cpu = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for feeds in feeds_list:
        got, want = sess.run(None, feeds), cpu.run(None, feeds)
        assert len(got) == len(want)
        for g, w, o in zip(got, want, sess.get_outputs()):
            assert g.dtype == w.dtype and g.shape == w.shape, (o.name, g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=o.name)


@pytest.mark.parametrize("options", [{}, {"cpu_schedule": "random", "seed": "3"}], ids=["inline", "random"])
def test_chain_end_to_end(options):
    rng = np.random.default_rng(11)
    feeds_list = []
    for start, limit, k in ((0, 12, 4), (3, 20, 3), (1, 8, 2)):
        length = len(range(start, limit, 2))
        feeds_list.append({"x": rng.uniform(-1, 1, (2, length)).astype(f32), "start": A(start, i64),
                           "limit": A(limit, i64), "k": A([k], i64)})
    _compare(_chain_model(), feeds_list, **options)


@pytest.mark.parametrize("options", [{}, {"cpu_schedule": "random", "seed": "3"}], ids=["inline", "random"])
def test_normalizations_end_to_end(options):
    rng = np.random.default_rng(12)
    _compare(_norm_model(), [{"x": rng.uniform(-2, 2, (nb, 4, 5, 5)).astype(f32)} for nb in (1, 3)], **options)


def test_max_unpool_with_its_unpooled_shape_as_a_constant_output_shape_is_claimed():
    """Where ORT and the spec agree: output_shape a constant equal to the unpooled shape (a larger
    constant is left to ORT like an input)."""
    ins = [(F, [1, 1, 2, 2]), (I64, [1, 1, 2, 2]), (I64, [4])]
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    assert claim_of("MaxUnpool", 22, ins, attrs, initializers={2: A([1, 1, 4, 4], i64)}) is None
    assert "left to ORT" in claim_of("MaxUnpool", 22, ins, attrs, initializers={2: A([1, 1, 5, 5], i64)})
