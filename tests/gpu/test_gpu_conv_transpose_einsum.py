"""ConvTranspose, Col2Im and Einsum on the CUDA device, end to end: small ONNX models through
hipep.InferenceSession(device="cuda"), three runs each (first run, bound replay, CUDA graph
replay), compared with ONNX Runtime's CPU EP, every node claimed by the cuda device.

ConvTranspose is a product (cuBLASLt or hipep's GEMM, both modes run) and kernels/col2im.hip;
Col2Im is the col2im alone; Einsum a product, a transpose or a sum with copies around them, in f64
kernels/einsum.hip's sums of products (in double, within 1e-12 of the CPU EP's) for two operands.
Tolerances: products in f32 rtol 1e-3, atol 1e-5 (long sums added in another order than
MLAS's; inputs scaled so outputs are O(1)); f16 rtol 1e-2, atol 2e-3 (the columns are rounded
to f16 before col2im sums them). f16 is compared with the CPU EP running the same model in f32
(the same f16 values widened), its results rounded to f16: the CPU EP's own f16 sums round at
every step, hipep's in f32."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from hipep.runtime.cuda import cuda_status
from gpu_checks import check_on_cuda
from helpers import cpu_session, make_model, tensor

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

F32, F16 = TP.FLOAT, TP.FLOAT16
NP = {F32: np.float32, F16: np.float16}
PRODUCT_TOL = {F32: dict(rtol=1e-3, atol=1e-5), F16: dict(rtol=1e-2, atol=2e-3)}
n = helper.make_node


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def init(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def rand(rng, shape, elem, scale=1.0):
    return (rng.uniform(-1, 1, shape) * scale).astype(NP[elem])


def check(build, elem, weights: dict, feeds: dict, tol: dict, onnx_reference: bool = False):
    """build(elem, initializers) -> model; f16 against the f32 model's results, rounded.
    `onnx_reference`: the oracle is ONNX's reference evaluator, where ORT's CPU EP departs from it."""
    model = build(elem, [init(k, v) for k, v in weights.items()])
    want = None
    if elem == F16 or onnx_reference:
        wide = build(F32, [init(k, v.astype(np.float32) if v.dtype == np.float16 else v) for k, v in weights.items()])
        wide_feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
        if onnx_reference:
            from onnx.reference import ReferenceEvaluator

            wide_out = ReferenceEvaluator(wide).run(None, wide_feeds)
        else:
            wide_out = cpu_session(wide).run(None, wide_feeds)
        want = [w.astype(NP[elem]) for w in wide_out]
    check_on_cuda(model, feeds, claimed=True, want=want, tol=tol)


# ---- ConvTranspose ---------------------------------------------------------------------------------

CONV_TRANSPOSE = [  # (X, W, bias, attributes)
    ((1, 320, 32, 32), (320, 320, 3, 3), True,  # a UNet's stride-2 upsampling
     {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
    ((1, 512, 40), (512, 256, 16), True, {"strides": [8], "pads": [4, 4]}),  # a HiFiGAN vocoder's 1-D upsampling
    ((2, 64, 25), (64, 32, 4), False, {"strides": [2], "pads": [1, 1], "group": 2}),
    ((1, 16, 8, 8), (16, 8, 4, 4), True, {"strides": [2, 2], "dilations": [1, 2], "pads": [1, 0, 2, 1]}),
    ((1, 8, 4, 6, 6), (8, 4, 2, 3, 3), True, {"strides": [2, 2, 2], "output_shape": [8, 13, 13]}),
    ((2, 32, 9, 9), (32, 1, 3, 3), False, {"group": 32, "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
]


@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("x_shape,w_shape,bias,attrs", CONV_TRANSPOSE)
def test_conv_transpose(rng, gemm_mode, elem, x_shape, w_shape, bias, attrs):
    group = attrs.get("group", 1)
    inputs = ["x", "w"] + (["b"] if bias else [])
    weights = {"w": rand(rng, w_shape, elem, scale=1 / np.sqrt(w_shape[0] // group * np.prod(w_shape[2:])))}
    if bias:
        weights["b"] = rand(rng, (w_shape[1] * group,), elem)

    def build(e, inits):
        return make_model([n("ConvTranspose", inputs, ["y"], name="deconv", **attrs)],
                          [tensor("x", e, list(x_shape))], [tensor("y", e, None)], inits, opset=17)

    check(build, elem, weights, {"x": rand(rng, x_shape, elem)}, PRODUCT_TOL[elem])


def test_conv_transpose_is_deterministic(rng):
    """The col2im gathers in a fixed order: two sessions give the same bits."""
    import hipep

    w_shape = (64, 32, 4, 4)
    model = make_model([n("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], name="deconv")],
                       [tensor("x", F32, [1, 64, 16, 16])], [tensor("y", F32, None)],
                       [init("w", rand(rng, w_shape, F32, 0.1))], opset=17)
    feeds = {"x": rand(rng, (1, 64, 16, 16), F32)}
    first = hipep.InferenceSession(model, device="cuda").run(None, feeds)[0]
    second = hipep.InferenceSession(model, device="cuda").run(None, feeds)[0]
    np.testing.assert_array_equal(first.view(np.uint32), second.view(np.uint32))


# ---- Col2Im ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("x_shape,image,block,attrs", [
    ((2, 27, 64), [10, 10], [3, 3], {"strides": [1, 1], "dilations": [1, 1], "pads": [0, 0, 0, 0]}),
    ((1, 36, 16), [8, 8], [3, 3], {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    # 1-D with a dilation: ORT's CPU EP (1.30, 1.32) departs from ONNX's reference here; hipep's
    # CPU device agrees with the reference, which is this case's oracle
    ((1, 8, 20), [24], [4], {"dilations": [2], "pads": [1, 1]}),
])
def test_col2im(rng, elem, x_shape, image, block, attrs):
    weights = {"image": np.array(image, np.int64), "block": np.array(block, np.int64)}

    def build(e, inits):
        return make_model([n("Col2Im", ["x", "image", "block"], ["y"], name="col2im", **attrs)],
                          [tensor("x", e, list(x_shape))], [tensor("y", e, None)], inits, opset=18)

    check(build, elem, weights, {"x": rand(rng, x_shape, elem)},
          dict(rtol=1e-5, atol=1e-5) if elem == F32 else dict(rtol=1e-2, atol=2e-3), onnx_reference=len(image) == 1)


# ---- Einsum ----------------------------------------------------------------------------------------

EINSUM = [  # (equation, operand shapes)
    ("bij,bjk->bik", [(4, 64, 32), (4, 32, 48)]),
    ("bhid,bhjd->bhij", [(2, 8, 64, 32), (2, 8, 80, 32)]),  # attention's scores
    ("bhij,bhjd->bhid", [(2, 8, 64, 80), (2, 8, 80, 32)]),
    ("ij,jk->ik", [(96, 64), (64, 128)]),
    ("bid,jd->bij", [(2, 50, 64), (40, 64)]),
    ("i,i->", [(1000,), (1000,)]),
    ("bij,bjk->ibk", [(3, 20, 16), (3, 16, 24)]),
    ("...ij,...jk->...ik", [(1, 3, 16, 8), (2, 3, 8, 12)]),  # the batch broadcast
    ("bhwc,hkc->bhwk", [(2, 14, 14, 32), (14, 14, 32)]),  # relative position terms (SAM, ViTDet)
    ("ijk->kji", [(8, 16, 24)]),
    ("bij->bj", [(4, 33, 70)]),
    ("...ii->...i", [(4, 3, 20, 20)]),  # diagonals: read through their summed strides
    ("bii->b", [(6, 40, 40)]),  # traces: the diagonal copied out, then summed
    ("bjj,bjk->bk", [(4, 24, 24), (4, 24, 32)]),  # a diagonal contracted: copied out for the product
]


@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("equation,shapes", EINSUM)
def test_einsum(rng, gemm_mode, elem, equation, shapes):
    names = [f"x{i}" for i in range(len(shapes))]

    def build(e, inits):
        return make_model([n("Einsum", names, ["y"], equation=equation, name="einsum")],
                          [tensor(v, e, list(s)) for v, s in zip(names, shapes)], [tensor("y", e, None)], opset=12)

    check(build, elem, {}, {v: rand(rng, s, elem) for v, s in zip(names, shapes)}, PRODUCT_TOL[elem])


F64_EINSUM = EINSUM + [  # the f64 kernel takes subscripts summed within one operand alone too
    ("ij,jk->k", [(40, 30), (30, 20)]),
    ("bij,bjk->", [(3, 20, 16), (3, 16, 24)]),
    ("i,i", [(100000,), (100000,)]),  # one long sum over the whole block
    ("ij,kl->ijkl", [(6, 7), (5, 8)]),  # an outer product: one term per output
]


@pytest.mark.parametrize("equation,shapes", F64_EINSUM)
def test_einsum_f64(rng, equation, shapes):
    """f64 in double: two operands through kernels/einsum.hip, one through copies and the f64
    ReduceSum; within 1e-12 of ORT's CPU EP (its double products add in another order)."""
    from gpu_checks import assert_claimed_whole

    import hipep

    names = [f"x{i}" for i in range(len(shapes))]
    model = make_model([n("Einsum", names, ["y"], equation=equation, name="einsum")],
                       [tensor(v, TP.DOUBLE, list(s)) for v, s in zip(names, shapes)], [tensor("y", TP.DOUBLE, None)],
                       opset=12)
    feeds = {v: rng.uniform(-1, 1, s) for v, s in zip(names, shapes)}
    assert_claimed_whole(model)
    (want,) = cpu_session(model).run(None, feeds)
    sess = hipep.InferenceSession(model, device="cuda")
    for _ in range(3):
        (got,) = sess.run(None, feeds)
        assert got.dtype == np.float64 and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max(initial=1.0))
