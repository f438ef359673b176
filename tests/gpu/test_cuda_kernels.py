"""Every hand-written kernel and a set of fused pointwise kernels, end to end: small ONNX models
through hipep.InferenceSession(device="cuda"), compared with ONNX Runtime's CPU EP (f32: relative
1e-5; f16: 1e-2). Runs repeat, so the bound launches and the CUDA graphs are replayed too."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import hipep

from hipep.runtime.cuda import cuda_status, get_device
import gpu_checks
from gpu_checks import check_on_cuda
from helpers import cpu_session, gqa_preamble_model, make_model, tensor

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)
device = get_device(0)

F32, F16, I64, I32 = TP.FLOAT, TP.FLOAT16, TP.INT64, TP.INT32
NP = {F32: np.float32, F16: np.float16, I64: np.int64, I32: np.int32}
MS = ("com.microsoft", 1)
n = helper.make_node


def check(model, feeds, elem=F32, runs=3, **tolerance):
    """Runs `model` on the CUDA device `runs` times (first run, bound replay, CUDA graph replay)
    and compares every output with ORT's CPU EP."""
    return check_on_cuda(model, feeds, elem, runs, tol={**gpu_checks.tolerance(elem), **tolerance})


def init(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def rand(rng, shape, elem, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, shape).astype(NP[elem])


# ---- reductions ---------------------------------------------------------------------------------

@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare",
                                "ReduceL1", "ReduceL2", "ReduceLogSum"])
@pytest.mark.parametrize("axes,shape", [([-1], (3, 5, 64)), ([-1], (2, 3, 1000)), ([1, 2], (4, 8, 33)),
                                        ([0, 1, 2], (5, 7, 9)), ([1], (4, 70, 6)), ([0], (300, 5))])
def test_reductions(rng, op, elem, axes, shape):
    opset = 18
    model = make_model([n(op, ["x", "axes"], ["y"], keepdims=1, name="reduce")],
                       [tensor("x", elem, list(shape))], [tensor("y", elem, None)],
                       [init("axes", np.array(axes, np.int64))], opset=opset)
    # a product of many values stays in range near 1 (signs and NaN: tests/unit/test_reduce_kernels_on_host.py)
    lo, hi = (0.9, 1.1) if op == "ReduceProd" else (0.0, 1.0)
    check(model, {"x": rand(rng, shape, elem, lo, hi)}, elem)


@pytest.mark.parametrize("elem", [F32, F16, I64])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceL2", "ReduceMean"])
@pytest.mark.parametrize("axes,shape", [([0, 2], (6, 40, 33)), ([0, 2, 3], (2, 3, 64, 5)), ([1, 3], (3, 70, 2, 9))])
def test_reductions_over_axes_that_are_not_adjacent(rng, op, elem, axes, shape):
    """The reduced axes are copied behind the kept ones in the workspace, then reduced as rows;
    with the axes also as a graph input (known only at run time)."""
    if elem == I64 and op == "ReduceL2":
        return
    model = make_model([n(op, ["x", "axes"], ["y"], keepdims=0, name="reduce")], [tensor("x", elem, list(shape))],
                       [tensor("y", elem, None)], [init("axes", np.array(axes, np.int64))], opset=18)
    x = rng.integers(-20, 20, shape).astype(NP[elem]) if elem == I64 else rand(rng, shape, elem)
    gpu_checks.assert_claimed_whole(model)
    check(model, {"x": x}, elem)
    model = make_model([n(op, ["x", "axes"], ["y"], keepdims=1, name="reduce")],
                       [tensor("x", elem, list(shape)), tensor("axes", I64, [len(axes)])], [tensor("y", elem, None)],
                       opset=18)
    check(model, {"x": x, "axes": np.array(axes, np.int64)}, elem)


@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("axes,shape", [([-1], (3, 5, 64)), ([1, 2], (4, 8, 33)), ([0, 1], (5, 7)), ([1], (2, 3000)),
                                        ([1], (3, 40, 17)), ([0, 2], (6, 5, 30))])
def test_log_sum_exp(rng, elem, axes, shape):
    model = make_model([n("ReduceLogSumExp", ["x", "axes"], ["y"], keepdims=0, name="lse")],
                       [tensor("x", elem, list(shape))], [tensor("y", elem, None)],
                       [init("axes", np.array(axes, np.int64))], opset=18)
    check(model, {"x": rand(rng, shape, elem, -4.0, 4.0)}, elem)


@pytest.mark.parametrize("elem", [F32, F16, I64, I32])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 1)])
def test_cumsum(rng, elem, exclusive, reverse):
    """Position ids from an attention mask (cumsum - 1, int64) and float lines in the CPU EP's
    order: equal to its results."""
    shape = (3, 40, 7)
    model = make_model([n("CumSum", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse, name="scan")],
                       [tensor("x", elem, list(shape))], [tensor("y", elem, None)],
                       [init("axis", np.array(1, np.int64))], opset=14)
    x = rng.integers(0, 2, shape).astype(NP[elem]) if elem in (I64, I32) else rand(rng, shape, elem)
    check(model, {"x": x}, elem, rtol=0, atol=0)


@pytest.mark.parametrize("elem", [F32, F16, I64, I32])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 1)])
def test_cumprod(rng, elem, exclusive, reverse):
    """CumProd (opset 26) through the same scan: equal to hipep's CPU device bit for bit (the
    oracle: ORT releases before opset 26 cannot load the model)."""
    shape = (3, 40, 7)
    model = make_model([n("CumProd", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse, name="scan")],
                       [tensor("x", elem, list(shape))], [tensor("y", elem, None)],
                       [init("axis", np.array(1, np.int64))], opset=26)
    if elem in (I64, I32):
        x = rng.integers(-3, 4, shape).astype(NP[elem])
    else:
        x = rand(rng, shape, elem, 0.7, 1.4)
    want = hipep.InferenceSession(model, device="cpu").run(None, {"x": x})
    check_on_cuda(model, {"x": x}, elem, bits=True, want=want, claimed=True)


@pytest.mark.parametrize("elem", [F32, F16, I64, I32])
@pytest.mark.parametrize("shape,axis", [((1, 1, 32000), -1), ((4, 70, 6), 1), ((6, 9), 0)])
def test_argmax_and_argmin(rng, elem, shape, axis):
    """Greedy decoding's ArgMax over a logits row (a block per line) and inner axes (a thread per
    output), ties everywhere (few distinct values), NaN inside a float line, select_last_index
    both ways: the CPU EP's indices."""
    x = rng.integers(0, 7, shape).astype(NP[elem])
    if elem in (F32, F16):
        x[(0,) * (len(shape) - 1) + (3,)] = np.nan
    nodes = [n(op, ["x"], [f"{op}{last}"], axis=axis, keepdims=keep, select_last_index=last, name=f"{op}{last}")
             for op, keep in (("ArgMax", 1), ("ArgMin", 0)) for last in (0, 1)]
    model = make_model(nodes, [tensor("x", elem, list(shape))], [tensor(o.output[0], I64, None) for o in nodes],
                       opset=13)
    check(model, {"x": x}, elem)


@pytest.mark.parametrize("elem", [I64, I32])
def test_integer_sums_max_and_min(rng, elem):
    x = rng.integers(-50, 50, (4, 37)).astype(NP[elem])
    for op in ("ReduceSum", "ReduceMax", "ReduceMean", "ReduceMin"):
        model = make_model([n(op, ["x", "axes"], ["y"], keepdims=0, name="reduce")], [tensor("x", elem, [4, 37])],
                           [tensor("y", elem, None)], [init("axes", np.array([1], np.int64))], opset=18)
        check(model, {"x": x}, elem)


def test_empty_axes_reduce_everything_or_nothing(rng):
    x = rand(rng, (3, 4), F32)
    model = make_model([n("ReduceSum", ["x", "axes"], ["y"], keepdims=0, name="all")], [tensor("x", F32, [3, 4])],
                       [tensor("y", F32, None)], [init("axes", np.array([], np.int64))], opset=18)
    check(model, {"x": x})
    model = make_model([n("ReduceSum", ["x", "axes"], ["y"], keepdims=1, noop_with_empty_axes=1, name="none")],
                       [tensor("x", F32, [3, 4])], [tensor("y", F32, None)], [init("axes", np.array([], np.int64))],
                       opset=18)
    check(model, {"x": x})


# ---- softmax ------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("shape", [(2, 3, 8), (4, 12, 129), (2, 4096), (1, 32000), (3, 5, 1)])
def test_softmax(rng, op, elem, shape):
    model = make_model([n(op, ["x"], ["y"], axis=-1, name="sm")], [tensor("x", elem, list(shape))],
                       [tensor("y", elem, None)], opset=13)
    check(model, {"x": rand(rng, shape, elem, -8.0, 8.0)}, elem)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("shape,axis", [((2, 300, 8), 1), ((40, 6), 0), ((2, 3, 17, 5), -3)])
def test_softmax_over_an_axis_that_is_not_the_last(rng, op, elem, shape, axis):
    """The axis is moved last by a copy into the workspace, the rows computed there, and the
    result copied back into the output's layout."""
    model = make_model([n(op, ["x"], ["y"], axis=axis, name="sm")], [tensor("x", elem, list(shape))],
                       [tensor("y", elem, None)], opset=13)
    gpu_checks.assert_claimed_whole(model)
    check(model, {"x": rand(rng, shape, elem, -8.0, 8.0)}, elem)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_opset11_flattens_at_the_axis(rng, op):
    model = make_model([n(op, ["x"], ["y"], axis=1, name="sm")], [tensor("x", F32, [2, 3, 5])],
                       [tensor("y", F32, None)], opset=11)
    check(model, {"x": rand(rng, (2, 3, 5), F32)})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape,axis", [((4, 12, 129), -1), ((2, 4096), -1), ((2, 300, 8), 1)])
def test_softmax_in_f64(rng, op, shape, axis):
    """f64 rows sum in double (kernels/softmax.hip's f64 instances): ORT's CPU EP's values to 1e-12."""
    model = make_model([n(op, ["x"], ["y"], axis=axis, name="sm")], [tensor("x", TP.DOUBLE, list(shape))],
                       [tensor("y", TP.DOUBLE, None)], opset=13)
    gpu_checks.assert_claimed_whole(model)
    feeds = {"x": rng.uniform(-8.0, 8.0, shape)}
    want = cpu_session(model).run(None, feeds)[0]
    sess = hipep.InferenceSession(model, device="cuda")
    for _ in range(3):  # first run, bound replay, CUDA graph replay
        got = sess.run(None, feeds)[0]
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_softmax_of_minus_infinity_rows_matches_the_reference():
    x = np.full((2, 8), -np.inf, np.float32)
    x[1, 3] = 1.0
    model = make_model([n("Softmax", ["x"], ["y"], axis=-1, name="sm")], [tensor("x", F32, [2, 8])],
                       [tensor("y", F32, None)], opset=13)
    sess = hipep.InferenceSession(model, device="cuda")
    got = sess.run(None, {"x": x})[0]
    np.testing.assert_array_equal(got[1], np.eye(8, dtype=np.float32)[3])
    assert np.isnan(got[0]).all()


# ---- normalization ------------------------------------------------------------------------------

@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("shape", [(2, 3, 8), (2, 5, 2048), (3, 1000), (1, 1, 2048), (1, 8192), (300, 2048)])
def test_simplified_layer_norm(rng, elem, shape):
    """Rows that leave multiprocessors idle (decode's one row) take a thread per load; 300 rows the
    bandwidth shape."""
    h = shape[-1]
    model = make_model([n("SimplifiedLayerNormalization", ["x", "w"], ["y", "inv"], axis=-1, epsilon=1e-5, name="rms")],
                       [tensor("x", elem, list(shape))], [tensor("y", elem, None), tensor("inv", F32, None)],
                       [init("w", rand(rng, (h,), elem, 0.5, 1.5))], opset=17)
    check(model, {"x": rand(rng, shape, elem)}, elem)


@pytest.mark.parametrize("elem", [F32, F16])
def test_rms_normalization_opset23(rng, elem):
    model = make_model([n("RMSNormalization", ["x", "w"], ["y"], axis=-1, epsilon=1e-6, name="rms")],
                       [tensor("x", elem, [2, 7, 256])], [tensor("y", elem, None)],
                       [init("w", rand(rng, (256,), elem, 0.5, 1.5))], opset=23)
    try:
        cpu_session(model)
    except Exception as e:  # noqa: BLE001 - this ORT build lacks opset 23
        pytest.skip(f"ONNX Runtime cannot run RMSNormalization-23 here: {e}")
    check(model, {"x": rand(rng, (2, 7, 256), elem)}, elem)


@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("skip_shape,bias", [((2, 5, 64), True), ((5, 64), False), ((1, 5, 64), True),
                                             ((2, 5, 64), False)])
def test_skip_simplified_layer_norm(rng, elem, skip_shape, bias):
    inputs = ["x", "skip", "gamma"] + (["bias"] if bias else [])
    inits = [init("gamma", rand(rng, (64,), elem, 0.5, 1.5))] + ([init("bias", rand(rng, (64,), elem))] if bias else [])
    model = make_model([n("SkipSimplifiedLayerNormalization", inputs, ["y", "mean", "inv", "sum"], epsilon=1e-5,
                          domain="com.microsoft", name="skip_norm")],
                       [tensor("x", elem, [2, 5, 64]), tensor("skip", elem, list(skip_shape))],
                       [tensor("y", elem, None), tensor("inv", F32, None), tensor("sum", elem, None)],
                       inits, opset=17, extra_opsets=[MS])
    # 'mean' is left out of the graph outputs: ORT's CPU kernel writes nothing there for the simplified form
    check(model, {"x": rand(rng, (2, 5, 64), elem), "skip": rand(rng, skip_shape, elem)}, elem)


@pytest.mark.parametrize("rows,h", [(3, 4096), (1, 2048), (1, 8192), (200, 2048)])
def test_skip_simplified_layer_norm_long_rows(rng, rows, h):
    model = make_model([n("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma"], ["y", "", "", "sum"],
                          epsilon=1e-6, domain="com.microsoft", name="skip_norm")],
                       [tensor("x", F16, [1, rows, h]), tensor("skip", F16, [1, rows, h])],
                       [tensor("y", F16, None), tensor("sum", F16, None)],
                       [init("gamma", rand(rng, (h,), F16, 0.5, 1.5))], opset=17, extra_opsets=[MS])
    check(model, {"x": rand(rng, (1, rows, h), F16), "skip": rand(rng, (1, rows, h), F16)}, F16)


# ---- data movement ------------------------------------------------------------------------------

@pytest.mark.parametrize("elem", [F32, F16])
def test_embedding_gather(rng, elem):
    table = rand(rng, (100, 256), elem)
    model = make_model([n("Gather", ["table", "ids"], ["e"], axis=0, name="embed")], [tensor("ids", I64, [1, "s"])],
                       [tensor("e", elem, None)], [init("table", table)], opset=13)
    check(model, {"ids": np.array([[0, 5, 99, -1, 42]], np.int64)}, elem)
    check(model, {"ids": rng.integers(0, 100, (1, 17)).astype(np.int64)}, elem)


def test_gather_other_axes_and_int32_indices(rng):
    data = rand(rng, (3, 10, 7), F32)
    model = make_model([n("Gather", ["data", "idx"], ["y"], axis=1, name="g")],
                       [tensor("data", F32, [3, 10, 7]), tensor("idx", I32, [2, 2])], [tensor("y", F32, None)], opset=13)
    check(model, {"data": data, "idx": np.array([[1, 9], [-2, 0]], np.int32)})


@pytest.mark.parametrize("shape,perm", [((3, 5), [1, 0]), ((2, 64, 48), [0, 2, 1]), ((2, 3, 4, 5), [0, 2, 1, 3]),
                                        ((2, 8, 16, 32), [0, 1, 3, 2]), ((2, 3, 4, 5), [3, 1, 0, 2]),
                                        ((4, 3, 2), None)])
@pytest.mark.parametrize("elem", [F32, F16])
def test_transpose(rng, shape, perm, elem):
    attrs = {} if perm is None else {"perm": perm}
    model = make_model([n("Transpose", ["x"], ["y"], name="tr", **attrs)], [tensor("x", elem, list(shape))],
                       [tensor("y", elem, None)], opset=13)
    check(model, {"x": rand(rng, shape, elem)}, elem)


@pytest.mark.parametrize("elem", [F32, F16, I64])
def test_tile_depth_to_space_and_space_to_depth(rng, elem):
    """Strided copies: Tile with constant repeats (a 0 among them), DepthToSpace in both modes,
    SpaceToDepth: exactly the CPU EP's outputs (for int64, which the CPU EP's DepthToSpace and
    SpaceToDepth lack, its outputs for the same small integers as float32)."""
    def model_of(e):
        nodes = [n("Tile", ["x", "reps"], ["t"], name="tile"),
                 n("Tile", ["x", "reps0"], ["t0"], name="tile0"),
                 n("DepthToSpace", ["x"], ["dcr"], blocksize=2, mode="DCR", name="d2s_dcr"),
                 n("DepthToSpace", ["x"], ["crd"], blocksize=2, mode="CRD", name="d2s_crd"),
                 n("SpaceToDepth", ["x"], ["s2d"], blocksize=3, name="s2d")]
        return make_model(nodes, [tensor("x", e, [2, 8, 6, 9])],
                          [tensor(o, e, None) for o in ("t", "t0", "dcr", "crd", "s2d")],
                          [init("reps", np.array([1, 2, 1, 3], np.int64)),
                           init("reps0", np.array([2, 0, 1, 1], np.int64))], opset=13)

    x = rng.integers(-9, 9, (2, 8, 6, 9)).astype(NP[elem])
    if elem != I64:
        check(model_of(elem), {"x": x}, elem, rtol=0, atol=0)
        return
    want = cpu_session(model_of(F32)).run(None, {"x": x.astype(np.float32)})
    sess = hipep.InferenceSession(model_of(I64), device="cuda")
    for _ in range(3):
        for g, w in zip(sess.run(None, {"x": x}), want):
            assert g.dtype == np.int64
            np.testing.assert_array_equal(g, w.astype(np.int64))


@pytest.mark.parametrize("elem", [F32, F16, I64])
def test_pad_constant_mode(rng, elem):
    """Growing and cropping pads, constant_value as a graph input (device memory) and left out
    (zeros), pads on chosen axes (opset 18)."""
    nodes = [n("Pad", ["x", "pads", "value"], ["p"], mode="constant", name="pad"),
             n("Pad", ["x", "pads2"], ["p0"], name="pad_zero"),
             n("Pad", ["x", "pads_ax", "value", "axes"], ["pa"], name="pad_axes")]
    model = make_model(nodes, [tensor("x", elem, [2, 5, 7]), tensor("value", elem, [])],
                       [tensor(o, elem, None) for o in ("p", "p0", "pa")],
                       [init("pads", np.array([0, 1, -2, 1, 2, 3], np.int64)), init("pads2", np.array([1, 0, 0, 0, 2, 1], np.int64)),
                        init("pads_ax", np.array([2, 1, 0, 3], np.int64)), init("axes", np.array([2, 1], np.int64))],
                       opset=18)
    x = rng.integers(-9, 9, (2, 5, 7)).astype(NP[elem])
    check(model, {"x": x, "value": np.array(4, NP[elem])}, elem, rtol=0, atol=0)


def test_trilu_and_constant_of_shape(rng):
    """A causal mask as exports build it: ConstantOfShape(shape of the scores) filled with -inf,
    Trilu(upper, k=1) of it, added to the scores; Trilu lower with a negative k on int64."""
    nodes = [n("Shape", ["s"], ["shape"], name="shape"),
             n("ConstantOfShape", ["shape"], ["full"], value=helper.make_tensor("v", F32, [1], [float("-inf")]),
               name="full"),
             n("Trilu", ["full", "one"], ["mask"], upper=1, name="triu"),
             n("Add", ["s", "mask"], ["masked"], name="add_mask"),
             n("Trilu", ["i", "minus_two"], ["low"], upper=0, name="tril")]
    model = make_model(nodes, [tensor("s", F32, [2, 6, 6]), tensor("i", I64, [3, 5, 4])],
                       [tensor("masked", F32, None), tensor("low", I64, None)],
                       [init("one", np.array(1, np.int64)), init("minus_two", np.array(-2, np.int64))], opset=14)
    check(model, {"s": rand(rng, (2, 6, 6), F32), "i": rng.integers(-9, 9, (3, 5, 4))}, F32, rtol=0, atol=0)


def test_dropout_in_inference(rng):
    """Opset 13 Dropout with its mask and a constant false training_mode, and opset 7's: the
    input through, the mask as ORT's CPU kernel writes it."""
    nodes = [n("Dropout", ["x", "ratio", "training"], ["y", "mask"], name="drop")]
    model = make_model(nodes, [tensor("x", F32, [3, 40])], [tensor("y", F32, None), tensor("mask", TP.BOOL, None)],
                       [init("ratio", np.array(0.3, np.float32)), init("training", np.array(False))], opset=13)
    check(model, {"x": rand(rng, (3, 40), F32)}, F32, rtol=0, atol=0)
    old = make_model([n("Dropout", ["x"], ["y", "mask"], name="drop7")], [tensor("x", F32, [3, 40])],
                     [tensor("y", F32, None), tensor("mask", F32, None)], opset=7)
    check(old, {"x": rand(rng, (3, 40), F32)}, F32, rtol=0, atol=0)


def test_concat_slice_expand_split(rng):
    nodes = [
        n("Concat", ["a", "b", "c"], ["cat"], axis=1, name="cat"),
        n("Slice", ["cat", "starts", "ends", "axes", "steps"], ["sl"], name="slice"),
        n("Expand", ["row", "shape"], ["ex"], name="expand"),
        n("Split", ["cat", "split"], ["p0", "p1"], axis=1, name="split"),
        n("Slice", ["a", "rstart", "rend", "raxes", "rsteps"], ["rev"], name="reverse"),
    ]
    inits = [init("starts", np.array([1, 0], np.int64)), init("ends", np.array([100, 7], np.int64)),
             init("axes", np.array([1, 2], np.int64)), init("steps", np.array([2, 3], np.int64)),
             init("shape", np.array([3, 4, 6], np.int64)), init("split", np.array([3, 6], np.int64)),
             init("rstart", np.array([-1], np.int64)), init("rend", np.array([-100], np.int64)),
             init("raxes", np.array([1], np.int64)), init("rsteps", np.array([-1], np.int64))]
    model = make_model(nodes, [tensor("a", F32, [3, 2, 7]), tensor("b", F32, [3, 4, 7]), tensor("c", F32, [3, 3, 7]),
                               tensor("row", F32, [1, 6])],
                       [tensor(o, F32, None) for o in ("cat", "sl", "ex", "p0", "p1", "rev")], inits, opset=18)
    check(model, {"a": rand(rng, (3, 2, 7), F32), "b": rand(rng, (3, 4, 7), F32), "c": rand(rng, (3, 3, 7), F32),
                  "row": rand(rng, (1, 6), F32)})


def test_reshape_and_identity_copy_when_they_own_storage(rng):
    model = make_model([n("Reshape", ["x", "shape"], ["r"], name="reshape"), n("Identity", ["r"], ["i"], name="id"),
                        n("Unsqueeze", ["i", "zero"], ["u"], name="unsq")],
                       [tensor("x", F32, [12])], [tensor("r", F32, None), tensor("u", F32, None)],
                       [init("shape", np.array([3, -1], np.int64)), init("zero", np.array([0], np.int64))], opset=18)
    check(model, {"x": rand(rng, (12,), F32)})


# ---- pointwise ----------------------------------------------------------------------------------

@pytest.mark.parametrize("elem", [F32, F16])
def test_fused_pointwise_chains(rng, elem):
    nodes = [
        n("Add", ["x", "bias"], ["a"], name="add"), n("Mul", ["a", "a"], ["m"], name="square"),
        n("Sigmoid", ["m"], ["s"], name="sig"), n("Mul", ["a", "s"], ["silu"], name="silu"),
        n("Tanh", ["silu"], ["t"], name="tanh"), n("Sub", ["t", "y"], ["d"], name="sub"),
        n("Abs", ["d"], ["ab"], name="abs"), n("Sqrt", ["ab"], ["sq"], name="sqrt"),
        n("Pow", ["sq", "three"], ["p"], name="cube"), n("Div", ["p", "y2"], ["q"], name="div"),
        n("Greater", ["q", "zero"], ["g"], name="gt"), n("Where", ["g", "q", "t"], ["w"], name="where"),
        n("Clip", ["w", "lo", "hi"], ["c"], name="clip"), n("Cast", ["c"], ["c32"], to=F32, name="to_f32"),
    ]
    t = NP[elem]
    inits = [init("bias", rand(rng, (16,), elem)), init("three", np.array(3.0, t)), init("zero", np.array(0.0, t)),
             init("lo", np.array(-0.5, t)), init("hi", np.array(0.75, t))]
    model = make_model(nodes, [tensor("x", elem, [4, 8, 16]), tensor("y", elem, [8, 1]), tensor("y2", elem, [1, 16])],
                       [tensor("c32", F32, None), tensor("silu", elem, None)], inits, opset=17)
    feeds = {"x": rand(rng, (4, 8, 16), elem), "y": rand(rng, (8, 1), elem), "y2": rand(rng, (1, 16), elem, 0.5, 2.0)}
    check(model, feeds, elem)


def test_gelu_and_casts(rng):
    nodes = [n("Cast", ["x"], ["h"], to=F16, name="to_f16"), n("Gelu", ["h"], ["g"], approximate="tanh", name="gelu"),
             n("Cast", ["g"], ["g32"], to=F32, name="back"), n("Erf", ["x"], ["e"], name="erf"),
             n("Cast", ["x"], ["i"], to=I32, name="to_int")]
    model = make_model(nodes, [tensor("x", F32, [3, 50])],
                       [tensor("g32", F32, None), tensor("e", F32, None), tensor("i", I32, None)], opset=20)
    check(model, {"x": rand(rng, (3, 50), F32, -5, 5)}, F16)


@pytest.mark.parametrize("elem", [F32, F16])
def test_contrib_gelu_family(rng, elem):
    """FastGelu (with and without bias), QuickGelu and BiasGelu, as ORT's transformer optimizer
    writes them (BERT, GPT-2, CLIP's vision tower): generated kernels, claimed whole."""
    nodes = [n("FastGelu", ["x"], ["f"], domain="com.microsoft", name="fast"),
             n("FastGelu", ["x", "b"], ["fb"], domain="com.microsoft", name="fast_bias"),
             n("QuickGelu", ["x"], ["q"], alpha=1.702, domain="com.microsoft", name="quick"),
             n("BiasGelu", ["x", "b"], ["bg"], domain="com.microsoft", name="bias_gelu")]
    model = make_model(nodes, [tensor("x", elem, [2, 7, 96]), tensor("b", elem, [96])],
                       [tensor(o, elem, None) for o in ("f", "fb", "q", "bg")], opset=17, extra_opsets=[MS])
    check(model, {"x": rand(rng, (2, 7, 96), elem, -6, 6), "b": rand(rng, (96,), elem, -1, 1)}, elem)


# ---- plans: host steps, replay, specializations, concurrency ------------------------------------

def test_gqa_preamble_host_steps_and_syncs(rng):
    model = gqa_preamble_model()
    sess = hipep.InferenceSession(model, device="cuda")
    cpu = cpu_session(model)
    for total in (5, 5, 9, 1, 9):
        mask = np.ones((2, total), np.int64)
        mask[1, : total // 2] = 0
        for g, w in zip(sess.run(None, {"attention_mask": mask}), cpu.run(None, {"attention_mask": mask})):
            np.testing.assert_array_equal(g, w)


def test_replays_see_new_inputs_and_new_shapes(rng):
    model = make_model([n("Softmax", ["x"], ["s"], axis=-1, name="sm"),
                        n("ReduceSum", ["s", "axes"], ["r"], keepdims=0, name="rs"),
                        n("Mul", ["r", "x0"], ["y"], name="scale")],
                       [tensor("x", F32, ["b", "t"]), tensor("x0", F32, ["b"])], [tensor("y", F32, None)],
                       [init("axes", np.array([1], np.int64))], opset=18)
    sess = hipep.InferenceSession(model, device="cuda")
    cpu = cpu_session(model)
    before = hipep.stats().get("kernel_us", 0)
    for b, t in [(2, 5), (2, 5), (2, 5), (2, 5), (3, 70), (2, 5), (1, 1)]:
        feeds = {"x": rand(rng, (b, t), F32), "x0": rand(rng, (b,), F32)}
        np.testing.assert_allclose(sess.run(None, feeds)[0], cpu.run(None, feeds)[0], rtol=1e-5, atol=1e-6)
    assert hipep.stats().get("kernel_us", 0) >= before


def test_concurrent_runs(rng):
    model = make_model([n("Softmax", ["x"], ["s"], axis=-1, name="sm"), n("Add", ["s", "x"], ["y"], name="add")],
                       [tensor("x", F32, ["b", 64])], [tensor("y", F32, None)], opset=13)
    sess = hipep.InferenceSession(model, device="cuda")
    cpu = cpu_session(model)
    errors = []

    def worker(seed):
        r = np.random.default_rng(seed)
        try:
            for _ in range(20):
                x = rand(r, (int(r.integers(1, 5)), 64), F32)
                np.testing.assert_allclose(sess.run(None, {"x": x})[0], cpu.run(None, {"x": x})[0], rtol=1e-5,
                                           atol=1e-6)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


# ---- claiming and errors --------------------------------------------------------------------------

def test_nodes_without_a_gpu_program_are_left_to_the_cpu_ep(rng):
    """A Compress whose condition the device computes (x's first row > 0.1): its output's extent
    would wait for the device, which a GPU plan does not do; the node goes to the CPU EP, named."""
    model = make_model([n("Softmax", ["x"], ["s"], axis=-1, name="sm"),
                        n("Gather", ["s", "zero"], ["row"], axis=0, name="row"),
                        n("Greater", ["row", "tenth"], ["keep"], name="keep"),
                        n("Compress", ["s", "keep"], ["y"], axis=1, name="cp"),
                        n("Relu", ["y"], ["z"], name="relu")],
                       [tensor("x", F32, [2, 8])], [tensor("z", F32, None)],
                       [init("zero", np.array(0, dtype=np.int64)), init("tenth", np.array(0.1, dtype=np.float32))],
                       opset=17)
    with pytest.raises(hipep.FallbackError,
                       match=r"node 'cp' \(ai.onnx::Compress, opset 11\): .*computed on the device by node 'keep"):
        hipep.InferenceSession(model, device="cuda")
    sess = hipep.InferenceSession(model, device="cuda", disable_cpu_ep_fallback=False)
    x = rand(rng, (2, 8), F32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], cpu_session(model).run(None, {"x": x})[0],
                               rtol=1e-5, atol=1e-6)


def test_a_failing_launch_names_its_node(rng, monkeypatch):
    from hipep.runtime import gpu_kernels as gk

    monkeypatch.setattr(gk, "row_config", lambda rows, words, warp: ((rows, 1, 1), (2048, 1, 1)))
    model = make_model([n("Softmax", ["x"], ["y"], axis=-1, name="the_softmax")], [tensor("x", F32, ["b", 77])],
                       [tensor("y", F32, None)], opset=13)
    sess = hipep.InferenceSession(model, device="cuda")
    with pytest.raises(Exception, match=r"node 'the_softmax' \(Softmax\): launch of hipep_softmax_f32.*block \[2048"):
        sess.run(None, {"x": rand(rng, (3, 77), F32)})
    monkeypatch.undo()
    # the session recovers once launches are valid again (a new binding: new shapes)
    x = rand(rng, (4, 77), F32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], cpu_session(model).run(None, {"x": x})[0],
                               rtol=1e-5, atol=1e-6)


def test_outputs_that_are_inputs_constants_or_views_are_copied(rng):
    model = make_model([n("Identity", ["x"], ["same"], name="same"), n("Identity", ["c"], ["const"], name="const"),
                        n("Add", ["x", "x"], ["twice"], name="twice")],
                       [tensor("x", F32, ["b", 3])], [tensor(o, F32, None) for o in ("same", "const", "twice")],
                       [init("c", np.arange(6, dtype=np.float32).reshape(2, 3))], opset=17)
    check(model, {"x": rand(rng, (2, 3), F32)})
    check(model, {"x": rand(rng, (5, 3), F32)})


def test_bf16_casts_and_data_movement(rng):
    BF16 = TP.BFLOAT16
    model = make_model([n("Cast", ["x"], ["b"], to=BF16, name="to_bf16"), n("Transpose", ["b"], ["t"], perm=[1, 0],
                                                                             name="tr"),
                        n("Concat", ["t", "t"], ["c"], axis=0, name="cat"), n("Cast", ["c"], ["y"], to=F32, name="back")],
                       [tensor("x", F32, [4, 6])], [tensor("y", F32, None)], opset=17)
    try:
        cpu_session(model)
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"ONNX Runtime's CPU EP cannot run this bf16 model: {e}")
    check(model, {"x": rand(rng, (4, 6), F32)}, rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["no graphs", "sync every launch"])
def test_launch_modes_give_the_same_results(rng, monkeypatch, mode):
    if mode == "no graphs":
        monkeypatch.setattr(device, "use_graphs", False)
    else:
        monkeypatch.setattr(device, "sync_launches", True)
    model = make_model([n("SimplifiedLayerNormalization", ["x", "w"], ["h"], axis=-1, epsilon=1e-5, name="rms"),
                        n("Softmax", ["h"], ["s"], axis=-1, name="sm"), n("Mul", ["s", "x"], ["y"], name="mul"),
                        n("Transpose", ["y"], ["t"], perm=[1, 0], name="tr")],
                       [tensor("x", F32, [6, 40])], [tensor("t", F32, None)], [init("w", rand(rng, (40,), F32))],
                       opset=17)
    check(model, {"x": rand(rng, (6, 40), F32)}, runs=4)


def test_a_growing_mask_updates_the_captured_graph_instead_of_launching_one_by_one(rng, monkeypatch):
    """As a decoder's attention mask: an input that grows by one each run feeds a reduction whose
    launch changes every run. The segment is captured once and the reduction's node updated in
    place (graph_node_updates), no launch goes one by one after the second run, and every run's
    result is this run's; with the updates off, every run goes launch by launch."""
    model = make_model([n("ReduceSum", ["mask", "axes"], ["s"], keepdims=1, name="lengths"),
                        n("Cast", ["s"], ["f"], to=F32, name="to_float"),
                        n("Softmax", ["x"], ["p"], axis=-1, name="sm"),
                        n("Mul", ["p", "f"], ["y"], name="scale"),
                        n("SimplifiedLayerNormalization", ["y", "w"], ["z"], axis=-1, epsilon=1e-5, name="rms")],
                       [tensor("mask", I64, [1, "total"]), tensor("x", F32, [1, 64])], [tensor("z", F32, None),
                                                                                            tensor("s", I64, None)],
                       [init("w", rand(rng, (64,), F32)), init("axes", np.array([1], np.int64))], opset=17)
    cpu = cpu_session(model)
    x = rand(rng, (1, 64), F32)
    for update in (True, False):
        monkeypatch.setattr(device, "update_graphs", update)
        sess = hipep.InferenceSession(model, device="cuda")
        counts = []
        for total in range(5, 17):
            feeds = {"mask": rng.integers(0, 3, (1, total)).astype(np.int64), "x": x}
            before = hipep.stats()
            got = sess.run(None, feeds)
            after = hipep.stats()
            want = cpu.run(None, feeds)
            np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(got[1], want[1])
            counts.append([after.get(k, 0) - before.get(k, 0)
                           for k in ("direct_launches", "graph_launches", "graph_node_updates")])
        later = np.array(counts[2:])
        if update:
            assert (later[:, 0] == 0).all() and (later[:, 1] == 1).all() and (later[:, 2] >= 1).all(), counts
        else:
            assert (later[:, 0] >= 2).all() and (later[:, 1] == 0).all() and (later[:, 2] == 0).all(), counts


def test_sessions_made_and_dropped_while_others_capture_and_replay(rng):
    """Allocation, freeing and module loading on one thread while other threads' streams capture
    CUDA graphs: a context-wide sync there fails while any stream captures."""
    import gc

    def chain(k):
        nodes = [n("Softmax", ["x"], ["s0"], axis=-1, name="sm0")]
        for i in range(1, k):
            nodes.append(n("Softmax", [f"s{i - 1}"], [f"s{i}"], axis=-1, name=f"sm{i}"))
        return make_model(nodes, [tensor("x", F32, ["b", 64])], [tensor(f"s{k - 1}", F32, None)], opset=13)

    model = chain(6)
    keep = hipep.InferenceSession(model, device="cuda")
    cpu = cpu_session(model)
    stop, errors = threading.Event(), []

    def worker(seed):
        r = np.random.default_rng(seed)
        try:
            while not stop.is_set():
                x = rand(r, (int(r.integers(1, 9)), 64), F32)
                np.testing.assert_allclose(keep.run(None, {"x": x})[0], cpu.run(None, {"x": x})[0], rtol=1e-5,
                                           atol=1e-6)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    try:
        for cycle in range(12):
            other = chain(2 + cycle % 4)
            short = hipep.InferenceSession(other, device="cuda")
            x = rand(rng, (3 + cycle, 64), F32)
            for _ in range(3):
                np.testing.assert_allclose(short.run(None, {"x": x})[0], cpu_session(other).run(None, {"x": x})[0],
                                           rtol=1e-5, atol=1e-6)
            del short
            gc.collect()
            if errors:
                break
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors[0]


def test_host_work_writes_an_output_and_reads_extents_of_device_memory(rng):
    model = make_model([n("Shape", ["mask"], ["shape"], name="shape"),
                        n("Gather", ["shape", "one"], ["total"], axis=0, name="total"),
                        n("ReduceSum", ["mask", "one"], ["sum"], keepdims=0, name="mask_sum")],
                       [tensor("mask", I64, [1, "t"])], [tensor("total", I64, None), tensor("sum", I64, None)],
                       [init("one", np.array([1], np.int64))], opset=18)
    for t in (5, 5, 5, 9):
        check(model, {"mask": rng.integers(0, 2, (1, t)).astype(np.int64)}, I64, runs=2)


# ---- f32 RMS norms bit for bit with the CPU EP ------------------------------------------------------
# The f32 norm kernels replay the CPU EP's order of operations (kernels/rms_norm.hip, its f32
# section), so their outputs must be equal, not merely close: an int4 decoder's MatMulNBits at
# accuracy_level 4 quantizes the norm's output to int8, where one ulp flips a code on a rounding tie.
# Row lengths: ORT's scalar loop (8, 15), MLAS's 8 lanes without a tail (16, 64, 2048) and with one
# (2051); one row (decode: one block) and 74 (prefill: many blocks).

EXACT_LENGTHS = [8, 15, 16, 64, 2048, 2051]
EXACT_ROWS = [(1, 1), (2, 37)]


def check_exact(model, feeds, runs=3):
    """Every output of `runs` runs on the CUDA device equals ORT's CPU EP's, bit for bit."""
    sess = hipep.InferenceSession(model, device="cuda")
    want = cpu_session(model).run(None, feeds)
    for _ in range(runs):
        got = sess.run(None, feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(g, w)


def norm_rows(rng, shape, ties):
    """ties: a dequantized int4 embedding (codes -8..7 times a scale per block of 32, every third
    a power of two), whose unit-weight norm puts many values on int8 rounding ties; otherwise
    values spread over several octaves, where the order of the sum shows in the last bits."""
    h = shape[-1]
    lead = int(np.prod(shape[:-1]))
    if ties:
        codes = rng.integers(0, 16, (lead, h)).astype(np.float32) - 8
        scales = rng.uniform(0.002, 0.05, (lead, -(-h // 32))).astype(np.float32)
        scales[:, ::3] = 2.0 ** -6
        x = codes * np.repeat(scales, 32, axis=1)[:, :h]
    else:
        x = rng.uniform(-1, 1, (lead, h)) * np.exp2(rng.integers(-6, 6, (lead, h)))
    return x.astype(np.float32).reshape(shape)


@pytest.mark.parametrize("ties", [True, False])
@pytest.mark.parametrize("rows", EXACT_ROWS)
@pytest.mark.parametrize("h", EXACT_LENGTHS)
def test_f32_simplified_layer_norm_is_bit_exact(rng, h, rows, ties):
    shape = list(rows) + [h]
    w = np.ones(h, np.float32) if ties else rand(rng, (h,), F32, 0.5, 1.5)
    model = make_model([n("SimplifiedLayerNormalization", ["x", "w"], ["y", "inv"], axis=-1, epsilon=1e-5,
                          name="rms")],
                       [tensor("x", F32, shape)], [tensor("y", F32, None), tensor("inv", F32, None)],
                       [init("w", w)], opset=17)
    check_exact(model, {"x": norm_rows(rng, shape, ties)})


@pytest.mark.parametrize("h", EXACT_LENGTHS)
def test_f32_rms_normalization_opset23_is_bit_exact(rng, h):
    model = make_model([n("RMSNormalization", ["x", "w"], ["y"], axis=-1, epsilon=1e-6, name="rms")],
                       [tensor("x", F32, [2, 9, h])], [tensor("y", F32, None)],
                       [init("w", rand(rng, (h,), F32, 0.5, 1.5))], opset=23)
    try:
        cpu_session(model)
    except Exception as e:  # noqa: BLE001 - this ORT build lacks opset 23
        pytest.skip(f"ONNX Runtime cannot run RMSNormalization-23 here: {e}")
    check_exact(model, {"x": norm_rows(rng, (2, 9, h), False)})


@pytest.mark.parametrize("ties", [True, False])
@pytest.mark.parametrize("rows", EXACT_ROWS)
@pytest.mark.parametrize("h", EXACT_LENGTHS)
def test_f32_skip_simplified_layer_norm_is_bit_exact(rng, h, rows, ties):
    """input + skip (+ bias) as the CPU EP sums it, its squares added in order; outputs y,
    inv_std_var and input_skip_bias_sum ('mean' the CPU EP leaves unwritten). Prefill's skip is
    [S, H], broadcast over the batch; the bias is there when the rows are ties."""
    shape = list(rows) + [h]
    skip_shape = shape[1:] if rows[0] > 1 else shape
    gamma = np.ones(h, np.float32) if ties else rand(rng, (h,), F32, 0.5, 1.5)
    inputs = ["x", "skip", "gamma"] + (["bias"] if ties else [])
    inits = [init("gamma", gamma)] + ([init("bias", norm_rows(rng, (h,), True))] if ties else [])
    model = make_model([n("SkipSimplifiedLayerNormalization", inputs, ["y", "", "inv", "sum"], epsilon=1e-6,
                          domain="com.microsoft", name="skip_norm")],
                       [tensor("x", F32, shape), tensor("skip", F32, skip_shape)],
                       [tensor("y", F32, None), tensor("inv", F32, None), tensor("sum", F32, None)],
                       inits, opset=17, extra_opsets=[MS])
    check_exact(model, {"x": norm_rows(rng, shape, ties), "skip": norm_rows(rng, skip_shape, ties)})


def test_f32_norm_over_a_quantized_embedding_feeds_matmul_nbits_the_cpu_eps_int8(rng):
    """The int4 builder decoder's first layer: GatherBlockQuantized (int4 embedding) ->
    SimplifiedLayerNormalization (weights 1) -> MatMulNBits at accuracy_level 4. The norm's output
    is equal to the CPU EP's, so A's int8 codes are too, and the projection agrees to f32
    summation order (a tie broken the other way moves a product by ~1e-3)."""
    from quant_helpers import quantize_blockwise

    vocab, hidden, out, bs = 64, 2048, 256, 32
    table, table_scales, table_zp = quantize_blockwise(rng.standard_normal((vocab, hidden)).astype(np.float32),
                                                       4, bs, "uint8")
    w, w_scales, _ = quantize_blockwise(rng.standard_normal((out, hidden)).astype(np.float32), 4, bs, "none")
    nodes = [n("GatherBlockQuantized", ["table", "ids", "table_scales", "table_zp"], ["emb"], domain="com.microsoft",
               name="embed", bits=4, block_size=bs, gather_axis=0, quantize_axis=1),
             n("SimplifiedLayerNormalization", ["emb", "ones"], ["normed"], axis=-1, epsilon=1e-5, name="norm"),
             n("MatMulNBits", ["normed", "w", "w_scales"], ["proj"], domain="com.microsoft", name="q_proj",
               K=hidden, N=out, bits=4, block_size=bs, accuracy_level=4)]
    inits = [init("table", table.reshape(vocab, -1)), init("table_scales", table_scales),
             init("table_zp", table_zp), init("ones", np.ones(hidden, np.float32)), init("w", w),
             init("w_scales", w_scales.reshape(-1))]
    model = make_model(nodes, [tensor("ids", I64, [1, "s"])], [tensor("normed", F32, None), tensor("proj", F32, None)],
                       inits, opset=21, extra_opsets=[MS])
    sess = hipep.InferenceSession(model, device="cuda")
    cpu = cpu_session(model)
    for s in (9, 1, 1):  # prefill, then decode steps
        feeds = {"ids": rng.integers(0, vocab, (1, s)).astype(np.int64)}
        for _ in range(2):
            (normed, proj), (want_normed, want_proj) = sess.run(None, feeds), cpu.run(None, feeds)
            np.testing.assert_array_equal(normed, want_normed)
            rel = np.linalg.norm((proj - want_proj).astype(np.float64)) / np.linalg.norm(want_proj.astype(np.float64))
            assert rel < 1e-5, rel
