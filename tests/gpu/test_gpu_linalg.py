"""MatMul, Gemm, Conv, the pools, LayerNormalization and SkipLayerNormalization on the CUDA device,
end to end: small ONNX models through hipep.InferenceSession(device="cuda"), three runs each (first
run, bound replay, CUDA graph replay), compared with ONNX Runtime's CPU EP. MaxPool's Indices and
its int8 / uint8 forms (kernels/pool.hip) are compared exactly, ties and NaN included, and
AveragePool (kernels/pool.hip) bit for bit.

Tolerances: products in f32 use ONNX's backend-test tolerance (rtol 1e-3, the conformance suite's
default) with atol 1e-5, because long K sums are added in another order than MLAS's (inputs are
scaled so outputs are O(1)); the norms use the kernel tests' f32 rtol 1e-5 (atol 1e-5); f16
rtol 1e-2 (atol 1e-3 for norms, 2e-3 for products); bf16 rtol 2e-2.

MatMul and Gemm run twice: with hipep's own kernels (HIPEP_GEMM=own) and with cuBLASLt where
it loads (HIPEP_GEMM=blas)."""
from __future__ import annotations

import platform

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import hipep

from hipep.runtime.cuda import cuda_status
from gpu_checks import check_on_cuda
from helpers import ORT_VERSION, cpu_session, make_model, tensor

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

F32, F16, BF16 = TP.FLOAT, TP.FLOAT16, TP.BFLOAT16
NP = {F32: np.float32, F16: np.float16}
MS = ("com.microsoft", 1)
n = helper.make_node

PRODUCT_TOL = {F32: dict(rtol=1e-3, atol=1e-5), F16: dict(rtol=1e-2, atol=2e-3)}
NORM_TOL = {F32: dict(rtol=1e-5, atol=1e-5), F16: dict(rtol=1e-2, atol=1e-3), BF16: dict(rtol=2e-2, atol=2e-2)}


def check(model, feeds, tolerance, runs=3):
    return check_on_cuda(model, feeds, runs=runs, tol=tolerance)


def init(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def rand(rng, shape, elem, lo=-1.0, hi=1.0, scale=1.0):
    return (rng.uniform(lo, hi, shape) * scale).astype(NP[elem])


# ---- MatMul -------------------------------------------------------------------------------------

MATMUL_SHAPES = [
    ((7,), (7, 5)), ((9, 7), (7,)), ((64,), (64,)),
    ((1, 4096), (4096, 4096)), ((4, 4096), (4096, 1023)), ((8, 1021), (1021, 4096)), ((33, 255), (255, 129)),
    ((128, 4096), (4096, 257)), ((1, 1, 2048), (2048, 5632)), ((2, 5, 4096), (4096, 4096)),
    ((2, 3, 1, 64), (2, 3, 64, 17)), ((2, 1, 33, 64), (3, 64, 40)), ((5, 64), (2, 64, 9)), ((4, 8, 16), (16,)),
    ((7,), (3, 7, 2)), ((3, 128, 64), (3, 64, 128)), ((1, 8, 1, 128), (1, 8, 128, 300)),
    ((1, 2048), (2048, 256)), ((1, 3, 4096), (4096, 64)), ((2, 1, 1024), (2, 1024, 32)),  # K split among blocks
]


@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("a_shape,b_shape", MATMUL_SHAPES)
def test_matmul(rng, gemm_mode, elem, a_shape, b_shape):
    k = a_shape[-1]
    model = make_model([n("MatMul", ["a", "b"], ["y"], name="mm")],
                       [tensor("a", elem, list(a_shape)), tensor("b", elem, list(b_shape))],
                       [tensor("y", elem, None)], opset=13)
    check(model, {"a": rand(rng, a_shape, elem, scale=1 / np.sqrt(k)), "b": rand(rng, b_shape, elem)},
          PRODUCT_TOL[elem])


@pytest.mark.parametrize("elem", [F32, F16])
def test_matmul_with_a_weight_over_decode_and_prefill_rows(rng, gemm_mode, elem):
    """The decoder's linear layer: x [1, m, 4096] @ W [4096, 1536] with W an initializer (hipep
    holds it), m = 1 (decode) to 128 (prefill) through one session, each m run three times."""
    k, nn = 4096, 1536
    model = make_model([n("MatMul", ["x", "w"], ["y"], name="linear")], [tensor("x", elem, [1, "s", k])],
                       [tensor("y", elem, None)], [init("w", rand(rng, (k, nn), elem))], opset=13)
    sess = hipep.InferenceSession(model, device="cuda")
    cpu = cpu_session(model)
    for m in (1, 4, 8, 33, 128, 1):
        feeds = {"x": rand(rng, (1, m, k), elem, scale=1 / np.sqrt(k))}
        want = cpu.run(None, feeds)[0]
        for _ in range(3):
            got = sess.run(None, feeds)[0]
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), **PRODUCT_TOL[elem])


def test_matmul_of_empty_operands(rng, gemm_mode):
    model = make_model([n("MatMul", ["a", "b"], ["y"], name="mm")], [tensor("a", F32, [0, 4]), tensor("b", F32, [4, 3])],
                       [tensor("y", F32, None)], opset=13)
    check(model, {"a": np.zeros((0, 4), np.float32), "b": rand(rng, (4, 3), F32)}, PRODUCT_TOL[F32])
    model = make_model([n("MatMul", ["a", "b"], ["y"], name="mm")], [tensor("a", F32, [3, 0]), tensor("b", F32, [0, 5])],
                       [tensor("y", F32, None)], opset=13)
    check(model, {"a": np.zeros((3, 0), np.float32), "b": np.zeros((0, 5), np.float32)}, PRODUCT_TOL[F32])


@pytest.mark.parametrize("a_shape,b_shape", [((7,), (7, 5)), ((33, 255), (255, 129)), ((2, 3, 1, 64), (2, 3, 64, 17)),
                                             ((5, 64), (2, 64, 9)), ((3, 128, 64), (3, 64, 128))])
def test_matmul_in_double(rng, a_shape, b_shape):
    """kernels/gemm.hip's gemm_f64 (no vendor library path): a double sum per output against ORT's
    CPU EP to double's rounding over the sum's length."""
    model = make_model([n("MatMul", ["a", "b"], ["y"], name="mm")],
                       [tensor("a", TP.DOUBLE, list(a_shape)), tensor("b", TP.DOUBLE, list(b_shape))],
                       [tensor("y", TP.DOUBLE, None)], opset=13)
    feeds = {"a": rng.uniform(-1, 1, a_shape), "b": rng.uniform(-1, 1, b_shape)}
    want = cpu_session(model).run(None, feeds)[0]
    assert not hipep.explain(model, device="cuda").rejections
    sess = hipep.InferenceSession(model, device="cuda")
    for _ in range(3):
        got = sess.run(None, feeds)[0]
        assert got.dtype == np.float64 and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)


# ---- Gemm ---------------------------------------------------------------------------------------

GEMM_CASES = [
    (4, 64, 100, 0, 0, 1.0, 1.0, (100,)), (1, 4096, 4096, 0, 1, 1.0, 1.0, (4096,)),
    (33, 70, 129, 1, 0, 0.5, 2.0, (33, 129)), (8, 128, 64, 1, 1, 2.0, -1.0, (8, 1)),
    (128, 256, 96, 0, 1, 1.0, 0.0, (128, 96)), (200, 129, 300, 1, 1, 1.0, 0.5, ()), (3, 5, 7, 0, 0, 1.0, 1.0, None),
    (64, 64, 64, 0, 0, 0.0, 1.0, (1, 64)), (2, 2048, 128, 0, 0, 0.5, 2.0, (128,)),
    (64, 256, 96, 0, 1, 1.0, 1.0, (96,)),  # a Linear layer: cuBLASLt's bias epilogue in auto mode
]


@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("m,k,nn,ta,tb,alpha,beta,c_shape", GEMM_CASES)
def test_gemm(rng, gemm_mode, elem, m, k, nn, ta, tb, alpha, beta, c_shape):
    a_shape = (k, m) if ta else (m, k)
    b_shape = (nn, k) if tb else (k, nn)
    inputs = ["a", "b"] + ([] if c_shape is None else ["c"])
    inits = [init("b", rand(rng, b_shape, elem))] + ([] if c_shape is None else [init("c", rand(rng, c_shape, elem))])
    model = make_model([n("Gemm", inputs, ["y"], transA=ta, transB=tb, alpha=alpha, beta=beta, name="gemm")],
                       [tensor("a", elem, list(a_shape))], [tensor("y", elem, None)], inits, opset=13)
    check(model, {"a": rand(rng, a_shape, elem, scale=1 / np.sqrt(k))}, PRODUCT_TOL[elem])


# ---- Conv (im2col by a strided copy, zeros filled where windows reach into padding; a product) ---

CONV_CASES = [  # (X, W, bias, attributes)
    ((1, 3, 224, 224), (64, 3, 14, 14), True, {"strides": [14, 14]}),  # a ViT patch embedding
    ((2, 8, 10, 10), (16, 8, 1, 1), False, {}),
    ((1, 4, 9, 11), (6, 2, 3, 2), True, {"strides": [2, 3], "dilations": [2, 1], "group": 2}),
    ((1, 3, 4, 56, 56), (32, 3, 2, 14, 14), True, {"strides": [2, 14, 14]}),  # a video patch embedding
    ((2, 16, 20, 20), (32, 16, 3, 3), True, {"pads": [1, 1, 1, 1]}),  # padded windows: zeros there
    ((1, 80, 300), (64, 80, 3), True, {"pads": [1, 1]}),  # Whisper's first convolution
    ((1, 8, 9, 9), (8, 1, 3, 3), False, {"group": 8, "auto_pad": "SAME_UPPER", "strides": [2, 2]}),  # depthwise
]


@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("x_shape,w_shape,bias,attrs", CONV_CASES)
def test_conv(rng, gemm_mode, elem, x_shape, w_shape, bias, attrs):
    inputs = ["x", "w"] + (["b"] if bias else [])
    inits = [init("w", rand(rng, w_shape, elem, scale=1 / np.sqrt(np.prod(w_shape[1:]))))]
    inits += [init("b", rand(rng, (w_shape[0],), elem))] if bias else []
    model = make_model([n("Conv", inputs, ["y"], name="conv", **attrs)], [tensor("x", elem, list(x_shape))],
                       [tensor("y", elem, None)], inits, opset=17)
    check(model, {"x": rand(rng, x_shape, elem)}, PRODUCT_TOL[elem])


# ---- pools (MaxPool's windows copied, each reduced; AveragePool a thread per output) -------------

POOL_CASES = [
    ("MaxPool", (2, 16, 56, 56), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),  # ResNet's
    ("MaxPool", (1, 4, 10, 10), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("AveragePool", (1, 8, 16, 16), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("AveragePool", (1, 4, 9, 9), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    # windows reaching into the padding divide by the inputs they hold (Inception's 3x3 stride-1 pool)
    ("AveragePool", (2, 32, 35, 35), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("AveragePool", (1, 4, 10, 10), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("GlobalAveragePool", (2, 64, 7, 7), {}),
    ("GlobalMaxPool", (2, 8, 30), {}),
]


@pytest.mark.parametrize("op_type,shape,attrs", POOL_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(POOL_CASES)])
def test_pools(rng, op_type, shape, attrs):
    model = make_model([n(op_type, ["x"], ["y"], name="pool", **attrs)], [tensor("x", F32, list(shape))],
                       [tensor("y", F32, None)], opset=19)
    check(model, {"x": rand(rng, shape, F32, -4, 4)}, NORM_TOL[F32])


# ---- MaxPool from kernels/pool.hip: Indices, int8 and uint8 --------------------------------------

I8, U8, I64 = TP.INT8, TP.UINT8, TP.INT64
POOL_NP = {F32: np.float32, F16: np.float16, I8: np.int8, U8: np.uint8}
MAX_POOL_INDEX_CASES = [
    ((2, 3, 9, 8), {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1], "dilations": [1, 2]}),
    ((1, 4, 10, 10), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((2, 3, 13), {"kernel_shape": [4], "strides": [3], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 5, 6, 4), {"kernel_shape": [2, 3, 2], "pads": [1, 1, 0, 0, 1, 1]}),
    ((4, 32, 28, 28), {"kernel_shape": [2, 2], "strides": [2, 2]}),  # many blocks
]


def _ties(rng, shape, elem):
    """Few distinct values: windows with equal maxima, where the first must win."""
    return rng.integers(0, 6, shape).astype(POOL_NP[elem]) - (0 if elem == U8 else 3)


def _max_pool_model(shape, elem, indices=True, opset=12, **attrs):
    outputs = [tensor("y", elem, None)] + ([tensor("i", I64, None)] if indices else [])
    return make_model([n("MaxPool", ["x"], ["y", "i"] if indices else ["y"], name="pool", **attrs)],
                      [tensor("x", elem, list(shape))], outputs, opset=opset)


@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("elem", [F32, F16, I8, U8])
@pytest.mark.parametrize("shape,attrs", MAX_POOL_INDEX_CASES,
                         ids=[f"idx-{i}" for i in range(len(MAX_POOL_INDEX_CASES))])
def test_max_pool_with_indices(rng, elem, storage_order, shape, attrs):
    """Y and Indices equal to ORT's CPU EP's: the first of equal maxima, flat positions over the
    whole input (image and channel included), row-major or column-major by storage_order."""
    model = _max_pool_model(shape, elem, storage_order=storage_order, **attrs)
    check_on_cuda(model, {"x": _ties(rng, shape, elem)}, elem, claimed=True, exact=True)


@pytest.mark.parametrize("elem", [I8, U8])
@pytest.mark.parametrize("shape,attrs", MAX_POOL_INDEX_CASES[:3], ids=[f"int-{i}" for i in range(3)])
def test_max_pool_of_integers(rng, elem, shape, attrs):
    """int8 and uint8 MaxPool without Indices, over the types' whole ranges."""
    info = np.iinfo(POOL_NP[elem])
    x = rng.integers(info.min, info.max, shape, endpoint=True).astype(POOL_NP[elem])
    check_on_cuda(_max_pool_model(shape, elem, indices=False, **attrs), {"x": x}, elem, claimed=True, exact=True)


def test_max_pool_indices_with_nan():
    """NaN wins only as its window's first input, as ORT's CPU kernel compares (x > max)."""
    x = np.array([[[[1, np.nan, 3, 2, 0], [np.nan, 0, 1, 5, 1], [2, 2, np.nan, np.nan, 4],
                    [0, 1, 2, 3, np.nan]]]], np.float32)
    for attrs in ({"kernel_shape": [2, 2]}, {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1], "storage_order": 1},
                  {"kernel_shape": [3, 2], "strides": [1, 2], "ceil_mode": 1}):
        check_on_cuda(_max_pool_model(x.shape, F32, **attrs), {"x": x}, F32, claimed=True, exact=True)


# ---- AveragePool from kernels/pool.hip: ONNX Runtime's sums and divisors --------------------------

AVERAGE_POOL_CASES = [  # (X, attributes); dilations from opset 19 only
    ((2, 32, 35, 35), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),  # Inception's 3x3 stride-1 pool
    ((1, 4, 9, 8), {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 2, 1]}),
    ((1, 4, 9, 8), {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 2, 1], "dilations": [2, 1]}),
    ((1, 4, 10, 10), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 4, 7, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 0, 0], "ceil_mode": 1}),
    ((2, 3, 17), {"kernel_shape": [4], "strides": [3], "auto_pad": "SAME_UPPER"}),
    ((2, 3, 9, 11), {"kernel_shape": [3, 2], "strides": [2, 1], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 5, 6, 7), {"kernel_shape": [2, 3, 3], "strides": [1, 2, 2], "pads": [1, 1, 1, 0, 1, 1]}),
    # ONNX's test_averagepool_3d_dilations_large_*: the last windows run past X
    ((1, 1, 32, 32, 32), {"kernel_shape": [5, 5, 5], "strides": [3, 3, 3], "dilations": [2, 2, 2], "ceil_mode": 1}),
    ((2, 64, 7, 7), {"kernel_shape": [7, 7]}),  # the whole plane: MLAS's global kernel before opset 19
    ((8, 16, 40, 40), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),  # many blocks
]


def _ort_divides_as_hipep(opset: int, attrs) -> bool:
    """Whether this onnxruntime's CPU EP divides as 1.32 does, which hipep follows (measured with
    1.24, 1.28, 1.30 and 1.32): 1.24 counts opset 19's padding by the wrong axes' pads, and up to
    1.28 opsets 7-18 divide a ceil_mode window counting the padding by the kernel's size."""
    if not attrs.get("count_include_pad"):
        return True
    if opset >= 19:
        return ORT_VERSION >= (1, 28)
    return not attrs.get("ceil_mode") or ORT_VERSION >= (1, 30)


def _mlas_lanes_as_hipep(opset: int, shape, attrs) -> bool:
    """MLAS's global kernel (opsets 7-18, the window the whole plane) ends by adding its four lanes
    in x86's order, which the kernel follows; ARM's pairs them otherwise."""
    whole_plane = list(attrs["kernel_shape"]) == list(shape[2:]) and "pads" not in attrs and "strides" not in attrs
    return opset >= 19 or not whole_plane or platform.machine().lower() in ("x86_64", "amd64")


def _ort_without_layout_rewrites(model, x):
    """ORT's CPU EP's outputs with its layout optimizations off: at its default level it rewrites an
    f32 2-D AveragePool of opsets 7-18 whose channels are a multiple of its NCHWc block (8 with
    AVX2, 16 with AVX-512) into its NCHWc kernel, which adds in window order, where the node's own
    kernel (MLAS's, which hipep follows) adds the window's columns first."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})


@pytest.mark.parametrize("opset", [11, 22])
@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("shape,attrs", AVERAGE_POOL_CASES, ids=[f"avg-{i}" for i in range(len(AVERAGE_POOL_CASES))])
def test_average_pool(rng, elem, count_include_pad, opset, shape, attrs):
    """kernels/pool.hip's average_pool, equal to ORT's CPU EP bit for bit (f16: its f32 kernel on the
    widened input, rounded once): each window's inputs summed in f32 in the order of the kernel the
    opset runs there (MLAS's at 11, its own loops at 22), divided by the inputs the window holds
    or, counting the padding, by its taps inside X and the padding (a ceil_mode window past the
    padding: the taps before its end). Where this onnxruntime divides otherwise, hipep's CPU
    reference device is the oracle, within rounding."""
    if "dilations" in attrs and opset < 19:
        pytest.skip("AveragePool takes dilations from opset 19")
    full = {**attrs, "count_include_pad": count_include_pad}
    model = make_model([n("AveragePool", ["x"], ["y"], name="pool", **full)], [tensor("x", elem, list(shape))],
                       [tensor("y", elem, None)], opset=opset)
    # magnitudes over five decades: sums whose rounding shows the order of the additions
    x = (rng.uniform(-4, 4, shape) * rng.choice([1e-2, 1.0, 1e2], shape)).astype(NP[elem])
    if _ort_divides_as_hipep(opset, full) and _mlas_lanes_as_hipep(opset, shape, full):
        check_on_cuda(model, {"x": x}, elem, claimed=True, bits=True, want=_ort_without_layout_rewrites(model, x))
        return
    eps = float(np.finfo(NP[elem]).eps)
    want = hipep.InferenceSession(model, device="cpu").run(None, {"x": x})
    check_on_cuda(model, {"x": x}, elem, claimed=True, want=want,
                  tol=dict(rtol=8 * eps, atol=8 * eps * float(np.abs(x).max())))


@pytest.mark.parametrize("elem", [F32, F16])
def test_batch_normalization_in_inference(rng, elem):
    shape = (2, 16, 14, 14)
    inits = [init("scale", rand(rng, (16,), elem, 0.5, 2)), init("bias", rand(rng, (16,), elem)),
             init("mean", rand(rng, (16,), elem)), init("var", rand(rng, (16,), elem, 0.1, 2))]
    model = make_model([n("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], epsilon=1e-3,
                          name="bn")], [tensor("x", elem, list(shape))], [tensor("y", elem, None)], inits, opset=15)
    check(model, {"x": rand(rng, shape, elem, -3, 3)}, NORM_TOL[elem])


# ---- LayerNormalization -------------------------------------------------------------------------

@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("shape,axis,bias", [((2, 3, 8), -1, True), ((2, 5, 4096), -1, True), ((3, 1000), -1, False),
                                             ((4, 6, 10), 1, True), ((2, 3, 33), -1, True), ((2, 8, 768), 0, False),
                                             ((4, 1, 3), -1, True)])
def test_layer_norm_with_its_statistics(rng, elem, shape, axis, bias):
    norm = shape[axis:] if axis >= 0 else shape[axis:]
    inputs = ["x", "scale"] + (["bias"] if bias else [])
    inits = [init("scale", rand(rng, norm, elem, 0.5, 1.5))] + ([init("bias", rand(rng, norm, elem))] if bias else [])
    model = make_model([n("LayerNormalization", inputs, ["y", "mean", "inv"], axis=axis, epsilon=1e-5, name="ln")],
                       [tensor("x", elem, list(shape))],
                       [tensor("y", elem, None), tensor("mean", F32, None), tensor("inv", F32, None)], inits, opset=17)
    check(model, {"x": rand(rng, shape, elem, -2.0, 3.0)}, NORM_TOL[elem])


@pytest.mark.parametrize("elem", [F32, F16])
def test_layer_norm_output_only_and_a_one_element_scale(rng, elem):
    model = make_model([n("LayerNormalization", ["x", "scale", "bias"], ["y"], axis=-1, epsilon=1e-6, name="ln")],
                       [tensor("x", elem, [3, 7, 256])], [tensor("y", elem, None)],
                       [init("scale", rand(rng, (1,), elem, 0.5, 1.5)), init("bias", rand(rng, (256,), elem))], opset=17)
    check(model, {"x": rand(rng, (3, 7, 256), elem, -2.0, 3.0)}, NORM_TOL[elem])


def test_layer_norm_bf16(rng):
    """bf16 inside the model (ORT's Python layer cannot feed numpy bfloat16 arrays): f32 in, Cast to
    bf16, LayerNormalization in bf16, Cast back; against numpy on the same bf16-rounded values."""
    import ml_dtypes

    bf16 = ml_dtypes.bfloat16
    x = rng.uniform(-2, 3, (2, 4, 512)).astype(np.float32)
    scale = rng.uniform(0.5, 1.5, 512).astype(bf16)
    bias = rng.uniform(-1, 1, 512).astype(bf16)
    model = make_model([n("Cast", ["x"], ["xb"], to=BF16, name="in"),
                        n("LayerNormalization", ["xb", "scale", "bias"], ["yb"], axis=-1, epsilon=1e-5, name="ln"),
                        n("Cast", ["yb"], ["y"], to=F32, name="out")],
                       [tensor("x", F32, [2, 4, 512])], [tensor("y", F32, None)],
                       [init("scale", scale), init("bias", bias)], opset=17)
    xb = x.astype(bf16).astype(np.float32)
    mean = xb.mean(-1, keepdims=True)
    var = ((xb - mean) ** 2).mean(-1, keepdims=True)
    want = ((xb - mean) / np.sqrt(var + 1e-5) * scale.astype(np.float32) + bias.astype(np.float32))
    want = want.astype(bf16).astype(np.float32)
    sess = hipep.InferenceSession(model, device="cuda")
    for _ in range(3):
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, **NORM_TOL[BF16])


# ---- SkipLayerNormalization ---------------------------------------------------------------------

@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("skip_shape,beta,bias", [((2, 5, 64), True, True), ((5, 64), False, True),
                                                  ((1, 5, 64), True, False), ((2, 5, 64), False, False)])
def test_skip_layer_norm_with_all_outputs(rng, elem, skip_shape, beta, bias):
    inputs = ["x", "skip", "gamma", "beta" if beta else "", "bias" if bias else ""]
    while inputs[-1] == "":
        inputs.pop()
    inits = [init("gamma", rand(rng, (64,), elem, 0.5, 1.5))]
    inits += [init("beta", rand(rng, (64,), elem))] if beta else []
    inits += [init("bias", rand(rng, (64,), elem))] if bias else []
    model = make_model([n("SkipLayerNormalization", inputs, ["y", "mean", "inv", "sum"], epsilon=1e-5,
                          domain="com.microsoft", name="skip_ln")],
                       [tensor("x", elem, [2, 5, 64]), tensor("skip", elem, list(skip_shape))],
                       [tensor("y", elem, None), tensor("mean", F32, None), tensor("inv", F32, None),
                        tensor("sum", elem, None)], inits, opset=17, extra_opsets=[MS])
    check(model, {"x": rand(rng, (2, 5, 64), elem, -2, 2), "skip": rand(rng, skip_shape, elem, -2, 2)}, NORM_TOL[elem])


@pytest.mark.parametrize("elem", [F32, F16])
def test_skip_layer_norm_long_rows_output_only(rng, elem):
    model = make_model([n("SkipLayerNormalization", ["x", "skip", "gamma", "beta"], ["y"], epsilon=1e-5,
                          domain="com.microsoft", name="skip_ln")],
                       [tensor("x", elem, [1, 3, 4096]), tensor("skip", elem, [1, 3, 4096])], [tensor("y", elem, None)],
                       [init("gamma", rand(rng, (4096,), elem, 0.5, 1.5)), init("beta", rand(rng, (4096,), elem))],
                       opset=17, extra_opsets=[MS])
    check(model, {"x": rand(rng, (1, 3, 4096), elem, -2, 2), "skip": rand(rng, (1, 3, 4096), elem, -2, 2)},
          NORM_TOL[elem])


def test_auto_mode_takes_cublaslt_for_large_products_and_the_gemv_for_a_row(rng, monkeypatch):
    """HIPEP_GEMM=auto binds a 256 x 1024 x 512 f16 product to cuBLASLt (when it loads) and a
    decode row to hipep's GEMV; cuBLASLt and the own tiled kernel agree on the product. (What the
    choice is worth is measured by benchmarks/kernel_bandwidth.py's prefill rows, not here.)"""
    from hipep.runtime import cublaslt
    from hipep.runtime import cuda as cu
    from hipep.runtime import gpu_kernels as gk

    ok, why = cublaslt.status()
    if not ok:
        pytest.skip(f"cuBLASLt is not available: {why}")
    dev = cu.get_device(0)
    stream = dev.new_stream()
    m, k, nn = 256, 1024, 512
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    b = (rng.uniform(-1, 1, (k, nn)) / np.sqrt(k)).astype(np.float16)
    mem = [dev.alloc("device", s * 2) for s in (m * k, k * nn, m * nn)]
    x, w, y = (cu.DeviceArray(mm, mm.ptr, s, np.float16) for mm, s in zip(mem, [(m, k), (k, nn), (m, nn)]))
    dev.copy_async(stream, x, a)
    dev.copy_async(stream, w, b)
    target = dev.stream_target(stream)

    def bound(mode, rows=m):
        monkeypatch.setenv("HIPEP_GEMM", mode)
        xs = cu.DeviceArray(x.memory, x.ptr, (rows, k), np.float16)
        ys = cu.DeviceArray(y.memory, y.ptr, (rows, nn), np.float16)
        ops = gk.binding_for("::MatMul").bind([dev._arg(xs), dev._arg(w)], [dev._arg(ys)], {}, target)
        return ops, [dev._ready(o) for o in ops]

    ops, _ = bound("auto", rows=1)
    assert isinstance(ops[0], gk.KernelOp) and ops[0].entry.startswith("hipep_gemv")
    ops, blas = bound("auto")
    assert isinstance(ops[0], gk.BlasOp)
    _, own = bound("own")
    want = a.astype(np.float32) @ b.astype(np.float32)
    for launches in (blas, own):
        for op in launches:
            op.issue(stream, "matmul")
        got = np.empty((m, nn), np.float16)
        dev.copy_async(stream, got, y)
        stream.sync()
        np.testing.assert_allclose(got.astype(np.float32), want, rtol=1e-2, atol=2e-3)


# ---- Det (kernels/det.hip) ------------------------------------------------------------------------

def _det_model(elem, shape):
    return make_model([n("Det", ["x"], ["y"])], [tensor("x", elem, shape)], [tensor("y", elem, None)], opset=22)


@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("shape", [(3, 3), (2, 3, 5, 5), (600, 4, 4), (1, 1), (2, 0, 0), (40, 40)], ids=str)
def test_det(rng, elem, shape):
    """LU in f64, a block per matrix (600 matrices: more than the blocks of one launch)."""
    x = (rng.standard_normal(shape) / np.sqrt(max(shape[-1], 1))).astype(NP[elem])
    tol = {F32: dict(rtol=1e-4, atol=1e-6), F16: dict(rtol=1e-2, atol=1e-3)}[elem]
    check_on_cuda(_det_model(elem, list(shape)), {"x": x}, claimed=True, tol=tol)


def test_det_of_singular_and_nan_matrices_and_a_shape_error(rng):
    x = np.array([[[1, 2], [2, 4]], [[0, 0], [0, 0]], [[np.nan, 1], [1, 1]], [[0, 1], [1, 0]]], np.float32)
    sess = check_on_cuda(_det_model(F32, None), {"x": x}, claimed=True, tol=dict(rtol=0, atol=0))
    with pytest.raises(Exception, match="square"):
        sess.run(None, {"x": np.zeros((2, 3, 2), np.float32)})
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], [0, 0, np.nan, -1])  # the session runs on


# ---- DeformConv (kernels/deform_conv.hip, then Conv's GEMM) ------------------------------------------

@pytest.mark.parametrize("elem", [F32, F16, TP.DOUBLE])
@pytest.mark.parametrize("seed", [0, 1, 2, 5, 7])
def test_deform_conv(gemm_mode, elem, seed):
    """Random geometries (tests/unit/test_deform_conv.py's): groups, offset groups, bias, mask."""
    from unit.test_deform_conv import _case, _model

    dtype = {F32: np.float32, F16: np.float16, TP.DOUBLE: np.float64}[elem]
    attrs, feeds = _case(seed, dtype)
    feeds["offset"].reshape(-1)[::11] = 30.0  # some taps far outside the image
    # (f16: the CPU-device test's tolerance against the same ORT results, tests/unit/test_deform_conv.py)
    tol = {F32: PRODUCT_TOL[F32], F16: dict(rtol=1e-2, atol=1e-2), TP.DOUBLE: dict(rtol=1e-10, atol=1e-10)}[elem]
    check_on_cuda(_model(dtype, attrs, len(feeds)), feeds, claimed=True, tol=tol)


def test_deform_conv_shape_error_names_the_node_and_the_session_runs_on():
    from unit.test_deform_conv import _model

    good = {"x": np.ones((1, 2, 4, 4), np.float32), "w": np.ones((2, 2, 2, 2), np.float32),
            "offset": np.zeros((1, 8, 3, 3), np.float32)}
    sess = check_on_cuda(_model(np.float32, {}, 3), good, claimed=True, tol=PRODUCT_TOL[F32])
    with pytest.raises(Exception, match="offset must have") as info:
        sess.run(None, {**good, "offset": np.zeros((1, 7, 3, 3), np.float32)})
    assert "deform" in str(info.value)
    np.testing.assert_array_equal(sess.run(None, good)[0], np.full((1, 2, 3, 3), 8.0, np.float32))
