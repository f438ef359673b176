"""Pow of every type pair with its exponent a graph input, ReduceMax / ReduceMin over bool, the f64
reductions (in double) and ReduceLogSumExp's NaN and infinite lines, CumSum / CumProd in f64 and
over an axis that is a graph input, and Clip / Where on the integer
types and Celu on f16 that ONNX Runtime's CPU EP takes, end to end: small ONNX models through
hipep.InferenceSession(device="cuda"), run three times (first run, bound replay, CUDA graph replay)
and compared with ONNX Runtime's CPU EP, or hipep's CPU device where ORT cannot serve as the oracle
(CumProd, which ORT releases before opset 26 cannot load; empty bool reductions, which ORT's CPU EP
refuses). Integers and scans bit for bit; Pow's f32 within 1e-5 (the GPU's pow against glibc's),
f16 within 1e-2; f64 reductions within 1e-12 (double sums added in another order), f64 unary math
(Exp, Log, ... in the generated pointwise kernels) within 1e-12 of each element.

The exponent and the axis change between runs of one session whose shapes stay the same, so the
CUDA graph captured once replays with the new value: the kernels read it, nothing is bound again.
An axis out of range is reported as the CPU device words it, and the session runs on."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

import hipep

from hipep.runtime.cuda import cuda_status
from gpu_checks import assert_claimed_whole, check_on_cuda, reference_outputs
from helpers import ORT_VERSION, cpu_session, make_model, tensor

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

F32, F16, I64, I32, BOOL = TP.FLOAT, TP.FLOAT16, TP.INT64, TP.INT32, TP.BOOL
I8, U8, U32, U64, F64 = TP.INT8, TP.UINT8, TP.UINT32, TP.UINT64, TP.DOUBLE
NP = {F32: np.float32, F16: np.float16, I64: np.int64, I32: np.int32, BOOL: np.bool_, I8: np.int8, U8: np.uint8,
      U32: np.uint32, U64: np.uint64, F64: np.float64}
POW_TYPES = [F32, F16, I32, I64]
n = helper.make_node


def tol(elem):
    return dict(rtol=1e-5, atol=1e-6) if elem == F32 else dict(rtol=1e-2, atol=1e-3)


def assert_outputs(got, want, elem):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if g.dtype.kind == "f":
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), **tol(elem))
        else:
            np.testing.assert_array_equal(g, w)


def _halfway(power: int) -> bool:
    """An integer exactly halfway between two doubles: the kernel rounds it to even, glibc's pow
    (ONNX Runtime's) may round it up (kernels' hipep_libm_pow)."""
    power = abs(power)
    while power and power % 2 == 0:
        power //= 2
    return power.bit_length() == 54


# ---- Pow ---------------------------------------------------------------------------------------------

def pow_model(x_elem, y_elem, x_shape, y_shape):
    return make_model([n("Pow", ["x", "y"], ["z"], name="pow")],
                      [tensor("x", x_elem, list(x_shape)), tensor("y", y_elem, list(y_shape))],
                      [tensor("z", x_elem, None)], opset=15)


def pow_bases(elem):
    if elem in (I32, I64):
        info = np.iinfo(NP[elem])
        return np.array([0, 1, -1, 2, -2, 3, -3, 4, 7, 16, -29, 43, 1000, 46341, 100000, 3037000499, info.max,
                         info.min], np.int64).clip(info.min, info.max).astype(NP[elem])
    return np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.0, 3.0, 1.5, 10.0, -7.25, 300.0, np.inf, -np.inf, np.nan],
                    NP[elem])


def pow_exponents(elem):
    if elem in (I32, I64):
        info = np.iinfo(NP[elem])
        return np.array([0, 1, 2, 3, 4, 5, 10, 13, 31, 32, 62, 63, 64, -1, -2, -3, info.max, info.min],
                        np.int64).astype(NP[elem])
    return np.array([0.0, 1.0, 2.0, 3.0, 0.5, 0.25, -0.5, 1.5, -1.0, -2.0, 2.5, 31.0, np.inf, -np.inf, np.nan],
                    NP[elem])


@pytest.mark.parametrize("x_elem", POW_TYPES)
@pytest.mark.parametrize("y_elem", POW_TYPES)
def test_pow_with_a_tensor_exponent(x_elem, y_elem):
    """Every base against every exponent ([n, 1] by [1, m]): negative bases, zero and negative
    exponents, integer overflow (the type's minimum, as ORT's x86 build converts), exact roots of
    integers (4^0.5, 16^0.25: the GPU's pow must be exact there), NaN and infinities."""
    x, y = pow_bases(x_elem)[:, None], pow_exponents(y_elem)[None, :]
    if x_elem in (I32, I64) and y_elem in (I32, I64):
        assert not any(_halfway(int(a) ** int(e)) for a in x.ravel() for e in y.ravel() if 0 <= e <= 64)
    check_on_cuda(pow_model(x_elem, y_elem, x.shape, y.shape), {"x": x, "y": y}, x_elem, claimed=True,
                  tol=tol(x_elem))


@pytest.mark.parametrize("x_elem", POW_TYPES)
@pytest.mark.parametrize("y_elem", POW_TYPES)
@pytest.mark.parametrize("y_shape", [(), (1, 1)])
def test_pow_with_a_one_element_exponent_that_changes_between_runs(x_elem, y_elem, y_shape):
    """One session, the exponent a graph input of one element: 2 and 3 are ORT's x*x and x*x*x
    (integers wrap), the other values std::pow, all through the one kernel that tests the value."""
    x = pow_bases(x_elem).reshape(1, -1)
    model = pow_model(x_elem, y_elem, x.shape, y_shape)
    assert_claimed_whole(model)
    sess = hipep.InferenceSession(model, device="cuda")
    for e in (2, 3, 2, 0, 5, -1, 3, 1):
        feeds = {"x": x, "y": np.full(y_shape, e, NP[y_elem])}
        want = reference_outputs(model, feeds)
        for _ in range(2):
            assert_outputs(sess.run(None, feeds), want, x_elem)


def test_pow_of_int64_powers_past_two_to_the_53():
    """Powers up to 2^63 computed exactly, rounded once (glibc's value), then truncated; past 2^63
    the type's minimum."""
    x = np.array([3, -3, 7, 43, -31, 2, -2, 3037000499, 94906265, 5, 13, 3, 2], np.int64)
    y = np.array([39, 39, 22, 10, 11, 62, 63, 2, 2, 27, 17, 40, 64], np.int64)
    assert not any(_halfway(int(a) ** int(e)) for a, e in zip(x, y))
    check_on_cuda(pow_model(I64, I64, x.shape, y.shape), {"x": x, "y": y}, I64, claimed=True)


def test_gelu_tanh_with_a_cubed_term_computed_at_run_time(rng):
    """Gelu(approximate='tanh') as its function body writes it: Pow(X, Three) where Three is a
    CastLike of a constant, which the compiler sees as a run-time value (ONNX's
    test_gelu_tanh_*_expanded)."""
    nodes = [n("Constant", [], ["three_f"], value=helper.make_tensor("three_f", F32, [], [3.0])),
             n("CastLike", ["three_f", "x"], ["three"]),
             n("Pow", ["x", "three"], ["cubed"], name="cube"),
             n("Constant", [], ["c"], value=helper.make_tensor("c", F32, [], [0.044715])),
             n("Mul", ["c", "cubed"], ["scaled"]), n("Add", ["x", "scaled"], ["inner"]),
             n("Constant", [], ["k"], value=helper.make_tensor("k", F32, [], [0.7978845608028654])),
             n("Mul", ["k", "inner"], ["arg"]), n("Tanh", ["arg"], ["t"]),
             n("Constant", [], ["one"], value=helper.make_tensor("one", F32, [], [1.0])),
             n("Add", ["one", "t"], ["onep"]),
             n("Constant", [], ["half"], value=helper.make_tensor("half", F32, [], [0.5])),
             n("Mul", ["half", "x"], ["hx"]), n("Mul", ["hx", "onep"], ["y"])]
    model = make_model(nodes, [tensor("x", F32, [3, 257])], [tensor("y", F32, None)], opset=18)
    check_on_cuda(model, {"x": rng.uniform(-6, 6, (3, 257)).astype(np.float32)}, F32, claimed=True)


# ---- ReduceMax / ReduceMin over bool -----------------------------------------------------------------

def bool_reduce_model(op_type, shape, axes, keepdims):
    return make_model([n(op_type, ["x", "axes"], ["y"], keepdims=keepdims, name="reduce")],
                      [tensor("x", BOOL, list(shape)), tensor("axes", I64, [len(axes)])],
                      [tensor("y", BOOL, None)], opset=20)


@pytest.mark.parametrize("op_type", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("shape,axes", [((3, 5, 64), [-1]), ((2, 3000), [1]), ((4, 70, 6), [1]), ((300, 5), [0]),
                                        ((5, 7, 9), [0, 1, 2]), ((4, 3, 5), [0, 2])])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_bool_max_and_min_are_any_and_all(rng, op_type, shape, axes, keepdims):
    """Lines all true, all false and mixed; rows, columns, everything, and axes that are not
    adjacent (moved last by a copy first); equal to ORT's CPU EP."""
    x = rng.random(shape) < (0.97 if op_type == "ReduceMin" else 0.03)
    lines = np.moveaxis(x, axes[0], 0)
    lines[:, :1] = True
    lines[:, -1:] = False
    model = bool_reduce_model(op_type, shape, axes, keepdims)
    check_on_cuda(model, {"x": x, "axes": np.array(axes, np.int64)}, BOOL, claimed=True)


@pytest.mark.parametrize("op_type", ["ReduceMax", "ReduceMin"])
def test_empty_bool_reductions_give_false_and_true(op_type):
    """An empty max is false and an empty min true (ONNX 20; ORT's CPU EP refuses them, so the
    CPU device is the oracle)."""
    model = bool_reduce_model(op_type, (0, 3), [0], 1)
    feeds = {"x": np.zeros((0, 3), np.bool_), "axes": np.array([0], np.int64)}
    want = hipep.InferenceSession(model, device="cpu").run(None, feeds)
    assert want[0].tolist() == [[op_type == "ReduceMin"] * 3]
    check_on_cuda(model, feeds, BOOL, want=want, claimed=True)


# ---- f64 reductions ------------------------------------------------------------------------------------

F64_REDUCTIONS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                  "ReduceLogSum", "ReduceSumSquare", "ReduceLogSumExp"]
F64_LAYOUTS = [((3, 5, 64), [-1]), ((3, 5, 63), [-1]), ((2, 3000), [1]), ((4, 70, 6), [1]), ((300, 5), [0]),
               ((5, 7, 9), [0, 1, 2]), ((4, 3, 5), [0, 2])]


def reduce_model(op_type, elem, shape, axes, keepdims=1):
    return make_model([n(op_type, ["x", "axes"], ["y"], keepdims=keepdims, name="reduce")],
                      [tensor("x", elem, list(shape)), tensor("axes", I64, [len(axes)])],
                      [tensor("y", elem, None)], opset=18)


def check_f64(model, feeds, rtol=1e-12):
    """Three runs on the CUDA device against ORT's CPU EP in double (hipep's CPU device where this
    onnxruntime has no double kernel for the op), NaN and infinities where the oracle has them."""
    assert_claimed_whole(model)
    try:
        want = cpu_session(model).run(None, feeds)
    except Exception:  # noqa: BLE001 - an onnxruntime release without the op's double kernel
        want = hipep.InferenceSession(model, device="cpu").run(None, feeds)
    sess = hipep.InferenceSession(model, device="cuda")
    for _ in range(3):
        got = sess.run(None, feeds)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype == np.float64 and g.shape == w.shape
            scale = np.abs(w[np.isfinite(w)]).max(initial=1.0)
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * scale)


@pytest.mark.parametrize("op_type", F64_REDUCTIONS)
@pytest.mark.parametrize("shape,axes", F64_LAYOUTS)
def test_f64_reductions_in_double(rng, op_type, shape, axes):
    """Rows (16-byte loads and not), long rows, columns, everything, and axes moved last by a copy;
    values 2^30 apart, which an f32 accumulator would lose."""
    x = {"ReduceProd": rng.uniform(0.9, 1.1, shape), "ReduceLogSum": rng.uniform(0.1, 1.0, shape)}.get(
        op_type, rng.uniform(-2, 2, shape))
    if op_type in ("ReduceSum", "ReduceMean", "ReduceL1", "ReduceLogSum"):
        x.reshape(-1)[::3] *= 2.0 ** 30
    check_f64(reduce_model(op_type, F64, shape, axes), {"x": x, "axes": np.array(axes, np.int64)})


@pytest.mark.parametrize("shape,axes", [((4, 7), [1]), ((7, 4), [0])])
def test_f64_logsumexp_of_nan_and_infinite_lines(shape, axes):
    """A line holding NaN gives NaN, one of -inf only -inf, one holding +inf twice +inf, as ORT's
    double kernel gives (the maximum is not subtracted where it is not finite)."""
    lines = np.linspace(-300, 300, 28).reshape(4, 7)
    lines[0, 3] = np.nan
    lines[1] = -np.inf
    lines[2, 1:3] = np.inf
    x = lines if axes == [1] else lines.T.copy()
    check_f64(reduce_model("ReduceLogSumExp", F64, shape, axes), {"x": x, "axes": np.array(axes, np.int64)})


# f64 unary math: the generated pointwise kernels in double, against ORT's double kernels
F64_UNARY = {"Exp": (-700, 700), "Log": (1e-300, 1e300), "Sqrt": (0, 1e6), "Reciprocal": (0.1, 5), "Tanh": (-20, 20),
             "Sin": (-7, 7), "Cos": (-7, 7), "Floor": (-50, 50), "Ceil": (-50, 50), "Round": (-50, 50)}


@pytest.mark.parametrize("op_type", sorted(F64_UNARY))
def test_f64_unary_math_in_double(rng, op_type):
    lo, hi = F64_UNARY[op_type]
    x = np.exp(rng.uniform(np.log(lo), np.log(hi), (3, 1000))) if op_type == "Log" else rng.uniform(lo, hi, (3, 1000))
    if op_type == "Round":
        x[0, :8] = [0.5, 1.5, 2.5, -0.5, -2.5, 2 ** 52 + 0.5, -3.5, 4.5]  # halves to even
    model = make_model([n(op_type, ["x"], ["y"], name="unary")], [tensor("x", F64, [3, 1000])],
                       [tensor("y", F64, None)], opset=13)
    assert_claimed_whole(model)
    want = cpu_session(model).run(None, {"x": x})[0]
    sess = hipep.InferenceSession(model, device="cuda")
    for _ in range(3):
        got = sess.run(None, {"x": x})[0]
        assert got.dtype == np.float64 and got.shape == want.shape
        # each element against its own magnitude (Exp's outputs span e^-700 to e^700); ORT's double
        # sin and cos (Eigen's) are within 5e-16 absolute only, near their zeros
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15 if op_type in ("Sin", "Cos") else 0)


@pytest.mark.parametrize("shape,axes", [((4, 7), [1]), ((3, 300), [1]), ((300, 5), [0]), ((2, 3, 4), [0, 2])])
def test_f64_logsumexp_expanded(rng, shape, axes):
    """ReduceLogSumExp as ONNX expands it (ReduceMax, Sub, Exp, ReduceSum, Log, Add): f64
    reductions and f64 Exp/Log in one claimed graph, values far beyond f32's range."""
    nodes = [n("ReduceMax", ["x", "axes"], ["m"], keepdims=1, name="max"), n("Sub", ["x", "m"], ["d"], name="sub"),
             n("Exp", ["d"], ["e"], name="exp"), n("ReduceSum", ["e", "axes"], ["s"], keepdims=1, name="sum"),
             n("Log", ["s"], ["l"], name="log"), n("Add", ["l", "m"], ["y"], name="add")]
    model = make_model(nodes, [tensor("x", F64, list(shape)), tensor("axes", I64, [len(axes)])],
                       [tensor("y", F64, None)], opset=18)
    check_f64(model, {"x": rng.uniform(-500, 500, shape), "axes": np.array(axes, np.int64)})


# ---- CumSum / CumProd over an axis the kernel reads ----------------------------------------------------

def scan_model(op_type, elem, shape, axis_elem, exclusive, reverse):
    return make_model([n(op_type, ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse, name="scan")],
                      [tensor("x", elem, list(shape)), tensor("axis", axis_elem, [])], [tensor("y", elem, None)],
                      opset=26 if op_type == "CumProd" else 14)


def scan_input(rng, op_type, elem, shape):
    if elem in (I32, I64):
        values = rng.integers(-2**30, 2**30, shape) if op_type == "CumSum" else rng.integers(-3, 4, shape)
        return values.astype(NP[elem])
    if op_type == "CumSum":
        return (rng.uniform(-1, 1, shape) * np.exp2(rng.integers(-8, 8, shape))).astype(NP[elem])
    return (rng.uniform(0.7, 1.4, shape) * rng.choice([-1, 1], shape)).astype(NP[elem])


@pytest.mark.parametrize("op_type", ["CumSum", "CumProd"])
@pytest.mark.parametrize("elem", [F32, F64, F16, I32, I64])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("shape", [(3, 40, 7), (1, 5000), (2, 3, 1, 5)])
def test_scan_over_an_axis_that_changes_between_runs(rng, op_type, elem, exclusive, reverse, shape):
    """Every axis, negative ones too, through one session: bit for bit the CPU device's (ORT's
    CPU EP's order; it is the oracle for CumProd, which ORT loads from opset 26)."""
    axis_elem = I64 if exclusive == reverse else I32
    model = scan_model(op_type, elem, shape, axis_elem, exclusive, reverse)
    assert_claimed_whole(model)
    sess = hipep.InferenceSession(model, device="cuda")
    cpu = hipep.InferenceSession(model, device="cpu")
    x = scan_input(rng, op_type, elem, shape)
    for axis in [*range(len(shape)), *range(-len(shape), 0), 1, 0]:
        feeds = {"x": x, "axis": np.array(axis, NP[axis_elem])}
        want = cpu.run(None, feeds)
        for _ in range(2):
            (got,) = sess.run(None, feeds)
            np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want[0].view(f"u{got.itemsize}"),
                                          err_msg=f"axis {axis}")


@pytest.mark.parametrize("elem", [F32, F64])
def test_cumsum_over_a_run_time_axis_equals_onnx_runtime(rng, elem):
    shape = (4, 33, 6)
    model = scan_model("CumSum", elem, shape, I64, 0, 0)
    x = scan_input(rng, "CumSum", elem, shape)
    for axis in (0, 1, 2, -1):
        check_on_cuda(model, {"x": x, "axis": np.array(axis, np.int64)}, elem, bits=True, claimed=True)


@pytest.mark.parametrize("op_type", ["CumSum", "CumProd"])
def test_f64_scan_over_a_constant_axis(rng, op_type):
    shape = (3, 40, 7)
    model = make_model([n(op_type, ["x", "axis"], ["y"], exclusive=1, reverse=1, name="scan")],
                       [tensor("x", F64, list(shape))], [tensor("y", F64, None)],
                       [helper.make_tensor("axis", I64, [], [1])], opset=26 if op_type == "CumProd" else 14)
    feeds = {"x": scan_input(rng, op_type, F64, shape)}
    want = hipep.InferenceSession(model, device="cpu").run(None, feeds)
    check_on_cuda(model, feeds, F64, bits=True, want=want, claimed=True)


def test_an_axis_out_of_range_is_reported_and_the_session_runs_on(rng):
    shape = (3, 4, 5)
    model = scan_model("CumSum", F32, shape, I64, 0, 0)
    sess = hipep.InferenceSession(model, device="cuda")
    x = scan_input(rng, "CumSum", F32, shape)
    good = {"x": x, "axis": np.array(1, np.int64)}
    want = hipep.InferenceSession(model, device="cpu").run(None, good)
    for _ in range(3):
        np.testing.assert_array_equal(sess.run(None, good)[0], want[0])
    for bad in (3, -4, 1 << 40):
        with pytest.raises(Exception, match=rf"node 'scan' \(CumSum\): input 1 \(axis\): axis {bad} is out of range "
                                            rf"for a rank-3 input \(expected -3 <= axis < 3\)"):
            sess.run(None, {"x": x, "axis": np.array(bad, np.int64)})
        np.testing.assert_array_equal(sess.run(None, good)[0], want[0])  # the record was cleared


# ---- Clip and Where on integer types, Celu on f16 -------------------------------------------------------

@pytest.mark.parametrize("elem", [I8, U8, U32, U64, I32, I64])
def test_clip_on_integer_types(elem):
    """Both bounds, one of them (the other the type's limit), and a minimum above the maximum."""
    info = np.iinfo(NP[elem])
    x = np.array([info.min, info.max, 0, 1, 5, 7, 100, info.max - 1], NP[elem]).reshape(2, 4)
    for lo, hi in ((1, 100), (None, 6), (5, None), (7, 3)):
        names = ["x", "lo" if lo is not None else "", "hi" if hi is not None else ""]
        while names[-1] == "":
            names.pop()
        inputs = [tensor("x", elem, [2, 4])] + [tensor(nm, elem, []) for nm in names[1:] if nm]
        model = make_model([n("Clip", names, ["y"], name="clip")], inputs, [tensor("y", elem, None)], opset=13)
        feeds = {"x": x, **{nm: np.array(v, NP[elem]) for nm, v in (("lo", lo), ("hi", hi)) if v is not None}}
        check_on_cuda(model, feeds, elem, claimed=True)


@pytest.mark.parametrize("elem", [I8, U8, U32])
def test_where_on_integer_types(rng, elem):
    model = make_model([n("Where", ["c", "x", "y"], ["z"], name="where")],
                       [tensor("c", BOOL, [3, 1]), tensor("x", elem, [3, 5]), tensor("y", elem, [5])],
                       [tensor("z", elem, None)], opset=16)
    info = np.iinfo(NP[elem])
    feeds = {"c": np.array([[True], [False], [True]]),
             "x": rng.integers(info.min, info.max, (3, 5), endpoint=True).astype(NP[elem]),
             "y": rng.integers(info.min, info.max, 5, endpoint=True).astype(NP[elem])}
    check_on_cuda(model, feeds, elem, claimed=True)


@pytest.mark.parametrize("alpha", [1.0, 0.3, 7.7])
def test_celu_f16(rng, alpha):
    """Celu-28 on f16: in f32 with alpha rounded to f16 first, the result rounded once."""
    if ORT_VERSION < (1, 32):
        pytest.skip("Celu on f16 (opset 28) is measured against onnxruntime 1.32")
    model = make_model([n("Celu", ["x"], ["y"], alpha=alpha, name="celu")], [tensor("x", F16, [4, 1000])],
                       [tensor("y", F16, None)], opset=28)
    check_on_cuda(model, {"x": rng.uniform(-12, 12, (4, 1000)).astype(np.float16)}, F16, claimed=True)
