"""The ops hipep.runtime.gpu_bindings_misc composes from existing kernels, and LpPool (kernels/pool.hip,
any p), end to end: small ONNX models through hipep.InferenceSession(device="cuda"), every node
claimed, compared with ONNX Runtime's CPU EP over three runs (first run, bound replay, CUDA graph
replay): OneHot, EyeLike, Hardmax, LpNormalization, MeanVarianceNormalization, LRN, BitShift, LpPool,
BitCast and Cast between every integer width; f32 within 1e-5, f16 within 1e-2, integers and
one-hot outputs exactly. Hardmax with NaN inputs is compared with hipep's CPU device (ORT's result
there depends on its vectorization)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import hipep
from hipep.runtime.cuda import cuda_status
from gpu_checks import check_on_cuda
from helpers import ORT_VERSION, make_model, tensor

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

F32, F16, F64, I32, I64 = TP.FLOAT, TP.FLOAT16, TP.DOUBLE, TP.INT32, TP.INT64
U8, U32, U64 = TP.UINT8, TP.UINT32, TP.UINT64
NP = {F32: np.float32, F16: np.float16, F64: np.float64, I32: np.int32, I64: np.int64, U8: np.uint8, U32: np.uint32,
      U64: np.uint64}
n = helper.make_node


def tol(elem):
    return dict(rtol=1e-5, atol=1e-5) if elem == F32 else dict(rtol=1e-2, atol=1e-2)


def single(op_type, x_elem, x_shape, y_elem=None, opset=18, inits=(), extra_inputs=(), **attrs):
    """A model of one `op_type` node on input x (and the initializers `inits` after it)."""
    names = ["x"] + [i.name for i in inits] + [name for name, _, _ in extra_inputs]
    node = n(op_type, names, ["y"], name=op_type.lower(), **attrs)
    inputs = [tensor("x", x_elem, list(x_shape))] + [tensor(nm, e, list(s)) for nm, e, s in extra_inputs]
    return make_model([node], inputs, [tensor("y", y_elem or x_elem, None)], list(inits), opset=opset)


def run(model, feeds, elem=F32):
    return check_on_cuda(model, feeds, elem, claimed=True, tol=tol(elem))


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("index_elem,value_elem", [(I64, F32), (I32, F32), (I64, I64)])  # ORT's CPU EP's kernels
def test_one_hot(axis, index_elem, value_elem):
    inits = [numpy_helper.from_array(np.array(6, NP[index_elem]), "depth"),
             numpy_helper.from_array(np.array([-1, 3], NP[value_elem]), "values")]
    model = single("OneHot", index_elem, (4, 5), value_elem, opset=11, inits=inits, axis=axis)
    idx = np.random.default_rng(0).integers(-6, 6, (4, 5)).astype(NP[index_elem])
    run(model, {"x": idx}, value_elem)


@pytest.mark.parametrize("elem,k,dtype", [(F32, 0, None), (F32, 2, I64), (F16, -1, None), (I32, 1, F32),
                                           (I32, 0, F64), (F64, 1, None), (F32, -2, F64)])
def test_eye_like(elem, k, dtype):
    """Every output type, f64 included (ONNX's test_eyelike_with_dtype: an int32 input, dtype=DOUBLE):
    the padded copy moves the element's bytes, exact."""
    attrs = {"k": k} if dtype is None else {"k": k, "dtype": dtype}
    model = single("EyeLike", elem, (5, 7), dtype or elem, opset=22, **attrs)
    check_on_cuda(model, {"x": np.zeros((5, 7), NP[elem])}, dtype or elem, claimed=True, bits=True)


@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("shape,axis,opset", [((6, 33), -1, 13), ((2, 7, 5), 1, 13), ((2, 3, 4), 1, 11)])
def test_hardmax(elem, shape, axis, opset):
    x = np.random.default_rng(1).integers(0, 5, shape).astype(NP[elem])  # ties
    run(single("Hardmax", elem, shape, opset=opset, axis=axis), {"x": x}, elem)


def test_hardmax_nan_follows_the_cpu_device():
    # ORT's CPU EP finds the maximum with Eigen, whose vectorized NaN handling depends on where the
    # NaN falls in a packet: the oracle is hipep's CPU device (the scalar scan's rule).
    x = np.array([[np.nan, 2, 1, 2], [1, np.nan, 3, 3], [np.nan] * 4, [2, 1, 2, np.nan]], np.float32)
    model = single("Hardmax", F32, x.shape, opset=13, axis=-1)
    want = hipep.InferenceSession(model, device="cpu").run(None, {"x": x})
    check_on_cuda(model, {"x": x}, F32, claimed=True, want=want, exact=True)


@pytest.mark.parametrize("elem,opset", [(F32, 18), (F16, 22)])
@pytest.mark.parametrize("shape,axis,p", [((4, 64), -1, 2), ((3, 5, 6), 1, 1), ((2, 300), 0, 2)])
def test_lp_normalization(elem, opset, shape, axis, p):
    x = np.random.default_rng(2).uniform(-2, 2, shape).astype(NP[elem])
    run(single("LpNormalization", elem, shape, opset=opset, axis=axis, p=p), {"x": x}, elem)


@pytest.mark.parametrize("shape,axes", [((2, 3, 8, 8), [0, 2, 3]), ((2, 3, 8, 8), [2, 3]), ((4, 6, 5), [1])])
def test_mean_variance_normalization(shape, axes):
    x = np.random.default_rng(3).uniform(-1, 3, shape).astype(np.float32)
    run(single("MeanVarianceNormalization", F32, shape, opset=13, axes=axes), {"x": x})


@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("shape,size", [((1, 16, 9, 9), 5), ((2, 3, 4, 4), 3)])
def test_lrn(elem, shape, size):
    x = np.random.default_rng(4).uniform(-3, 3, shape).astype(NP[elem])
    model = single("LRN", elem, shape, opset=13, size=size, alpha=1e-3, beta=0.75, bias=2.0)
    run(model, {"x": x}, elem)


@pytest.mark.parametrize("elem", [U8, U32, U64])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift(elem, direction):
    bits = np.dtype(NP[elem]).itemsize * 8
    rng = np.random.default_rng(5)
    x = rng.integers(0, np.iinfo(NP[elem]).max, (3, bits), dtype=NP[elem], endpoint=True)
    y = np.arange(bits, dtype=NP[elem])  # every shift below the width (ORT 1.24's result past it is the CPU's)
    model = single("BitShift", elem, x.shape, opset=11, extra_inputs=[("s", elem, [bits])], direction=direction)
    run(model, {"x": x, "s": y}, elem)


@pytest.mark.parametrize("elem", [TP.INT8, TP.INT16, I32, I64, U8, TP.UINT16, U64])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_opset_28(elem, direction):
    """Signed types (arithmetic right shifts) and shift amounts that are negative or past the width,
    which leave the sign fill: opset 28's rules, which ONNX Runtime 1.32's CPU EP follows."""
    if ORT_VERSION < (1, 32):
        pytest.skip(f"onnxruntime {ORT_VERSION} does not load opset 28")
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem))
    bits, info = dtype.itemsize * 8, np.iinfo(dtype)
    rng = np.random.default_rng(6)
    x = rng.integers(info.min, info.max, (4, bits + 8), dtype=dtype, endpoint=True)
    x[0, :3] = [info.min, info.max, -1 if info.min else 1]
    y = np.concatenate([np.arange(bits + 4), [-1, -bits, info.min, info.max] if info.min else
                        [info.max, 2 * bits, bits + 7, 0]]).astype(dtype)
    model = single("BitShift", elem, x.shape, opset=28, extra_inputs=[("s", elem, [bits + 8])], direction=direction)
    run(model, {"x": x, "s": y}, elem)


LP_POOL_CASES = [
    ((1, 3, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((2, 4, 7, 9), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ((2, 3, 17), {"kernel_shape": [4], "strides": [3], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 6, 5, 7), {"kernel_shape": [2, 3, 2], "pads": [1, 0, 1, 0, 1, 1]}),
    ((1, 4, 9, 9), {"kernel_shape": [3, 3], "dilations": [2, 1], "strides": [2, 2], "ceil_mode": 1}),
    ((8, 16, 40, 40), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"}),  # many blocks
]


@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("p", [1, 2, 3, 4])
@pytest.mark.parametrize("shape,attrs", LP_POOL_CASES, ids=[f"lp-{i}" for i in range(len(LP_POOL_CASES))])
def test_lp_pool(elem, p, shape, attrs):
    """kernels/pool.hip's lp_pool for any p: ORT's arithmetic (powers in double rounded to f32,
    summed in window order, the root by the f32 exponent 1/p)."""
    x = np.random.default_rng(6).uniform(-2, 2, shape).astype(NP[elem])
    run(single("LpPool", elem, shape, opset=18, p=p, **attrs), {"x": x}, elem)


@pytest.mark.parametrize("src,dst", [(TP.FLOAT, TP.INT32), (TP.INT64, TP.DOUBLE), (TP.FLOAT16, TP.UINT16),
                                     (TP.INT8, TP.UINT8)])
def test_bitcast(src, dst):
    """BitCast-26: the bytes under the new type, bit for bit (NaN and infinity patterns, negative
    zero included), a device copy into the output's storage."""
    if ORT_VERSION < (1, 32):
        pytest.skip(f"onnxruntime {ORT_VERSION} has no BitCast kernel to compare with")
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(src))
    rng = np.random.default_rng(7)
    if dtype.kind == "f":
        x = rng.standard_normal((5, 33)).astype(dtype)
        x[0, :3] = [np.nan, np.inf, -0.0]
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, (5, 33), dtype=dtype, endpoint=True)
    model = make_model([helper.make_node("BitCast", ["x"], ["y"], to=dst)], [tensor("x", src, list(x.shape))],
                       [tensor("y", dst, list(x.shape))], opset=26)
    check_on_cuda(model, {"x": x}, dst, claimed=True, bits=True)


_WIDTHS = [TP.INT8, TP.UINT8, TP.INT16, TP.UINT16, TP.INT32, TP.UINT32, TP.INT64, TP.UINT64]


@pytest.mark.parametrize("src", _WIDTHS + [TP.FLOAT, TP.FLOAT16, TP.DOUBLE, TP.BOOL])
def test_cast_between_every_integer_width_and_the_floats(src):
    """Cast from each type to every integer width and from each width to the floats, one model of
    all the targets (generated kernels, claimed whole), exactly as ORT's CPU EP: integers wrap to
    the narrower widths, floats truncate toward zero (values within every target's range; past it
    ONNX and C leave the result undefined and GPUs saturate)."""
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(src))
    rng = np.random.default_rng(11)
    if dtype.kind == "f":
        x = rng.uniform(0, 127, (4, 33)).astype(dtype)
        x[0, :3] = [0.0, -0.0, 126.9]
    elif dtype.kind == "b":
        x = rng.integers(0, 2, (4, 33)).astype(bool)
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, (4, 33), dtype=dtype, endpoint=True)
    targets = [t for t in _WIDTHS + [TP.FLOAT, TP.FLOAT16, TP.DOUBLE, TP.BOOL] if t != src]
    nodes = [n("Cast", ["x"], [f"y{i}"], to=t, name=f"to_{i}") for i, t in enumerate(targets)]
    model = make_model(nodes, [tensor("x", src, list(x.shape))],
                       [tensor(f"y{i}", t, list(x.shape)) for i, t in enumerate(targets)], opset=21)
    check_on_cuda(model, {"x": x}, TP.FLOAT, claimed=True, exact=True)


@pytest.mark.parametrize("elem", [F32, F16])
def test_opset_6_clip_max_min_and_opset_2_split(elem):
    """The old forms PyTorch's exporter wrote: Clip-6 (bounds as attributes, +-FLT_MAX where absent),
    Max-6 and Min-6, and Split-2 (sizes as an attribute), generated kernels and copies, NaN and
    infinities included."""
    nodes = [n("Clip", ["x"], ["c"], min=-1.0, max=2.0, name="clip"), n("Clip", ["x"], ["d"], name="clip_default"),
             n("Max", ["x", "z"], ["hi"], name="max"), n("Min", ["x", "z"], ["lo"], name="min"),
             n("Split", ["x"], ["s0", "s1"], axis=1, split=[3, 5], name="split")]
    outs = ["c", "d", "hi", "lo", "s0", "s1"]
    model = make_model(nodes, [tensor("x", elem, [2, 8]), tensor("z", elem, [2, 8])],
                       [tensor(o, elem, None) for o in outs], opset=6)
    with np.errstate(over="ignore"):
        x = np.array([[np.nan, -np.inf, np.inf, -5, 0.5, 7, 3.4e38, 1.0]] * 2, np.float32).astype(NP[elem])
    check_on_cuda(model, {"x": x, "z": x[:, ::-1].copy()}, elem, claimed=True, exact=True)
