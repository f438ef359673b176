"""ConvTranspose, Col2Im and Einsum on the CPU: kernels/col2im.hip, kernels/gemm.hip,
kernels/einsum.hip, kernels/reduce.hip and kernels/copy.hip compiled by g++ against the host
stand-in for the CUDA headers (tests/unit/host_cuda), the bindings' launches run block by block
over host memory and compared with the registry's references (hipep.ops), Einsum over f64 also
with ONNX Runtime's CPU EP. Shapes are small: every GPU thread is a host thread. Also what the
bindings refuse, and why. Skipped without g++."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from hipep.ops.registry import SINCE_VERSION
from hipep.runtime import gpu_kernels as gk

from unit.host_kernels import compile_module, run_on_host

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    out = tmp_path_factory.mktemp("host_kernels")
    return {"warp": 32, **{m: compile_module(out, m, 32) for m in ("gemm", "copy", "col2im", "reduce", "einsum")}}


def close(got, want, tol):
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol)


def _tol(dtype):
    return 1e-5 if dtype == np.float32 else 3e-3


# ---- ConvTranspose -------------------------------------------------------------------------------

CONV_TRANSPOSE = [  # (X, W, bias, attributes)
    ((1, 3, 4, 4), (3, 2, 3, 3), True, {"strides": [2, 2]}),  # a decoder's upsampling
    ((2, 4, 3, 5), (4, 3, 2, 2), False, {"strides": [2, 2]}),  # kernel = stride: no overlap
    ((1, 2, 5, 4), (2, 3, 3, 2), True, {"strides": [2, 3], "dilations": [2, 1], "pads": [1, 0, 2, 1]}),
    ((1, 2, 3, 3), (2, 2, 3, 3), True, {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
    ((2, 4, 3, 3), (4, 1, 3, 3), True, {"group": 2, "strides": [2, 1]}),  # groups, bias per group
    ((1, 6, 4, 4), (6, 1, 3, 3), False, {"group": 6, "pads": [1, 1, 1, 1]}),  # depthwise
    ((1, 4, 10), (4, 2, 8), True, {"strides": [4], "pads": [2, 2]}),  # a vocoder's 1-D upsampling
    ((2, 3, 7), (3, 2, 3), False, {"dilations": [3], "output_padding": [0]}),
    ((1, 2, 2, 3, 3), (2, 2, 2, 3, 2), True, {"strides": [2, 1, 2], "pads": [0, 1, 0, 1, 0, 1]}),  # 3-D
    ((1, 2, 3, 4), (2, 2, 3, 3), True, {"strides": [2, 2], "output_shape": [7, 9]}),
    ((1, 2, 3, 4), (2, 2, 3, 3), False, {"strides": [2, 2], "output_shape": [8, 10]}),  # zero-extended
    ((1, 2, 3, 3), (2, 2, 3, 3), True, {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 4, 3), (2, 1, 4, 3), False, {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 3, 4, 4), (3, 2, 1, 1), True, {}),  # 1x1
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("x_shape,w_shape,bias,attrs", CONV_TRANSPOSE)
def test_conv_transpose(libraries, dtype, x_shape, w_shape, bias, attrs):
    rng = np.random.default_rng(7)
    ins = [rng.uniform(-1, 1, x_shape).astype(dtype), rng.uniform(-1, 1, w_shape).astype(dtype)]
    if bias:
        ins.append(rng.uniform(-1, 1, w_shape[1] * attrs.get("group", 1)).astype(dtype))
    for sm_count in (132, 2):  # the GEMM's 64 and 128 tiles
        (got,), (want,), ops = run_on_host(libraries, "::ConvTranspose", ins, attrs, workspace=True,
                                           sm_count=sm_count)
        assert [o.module for o in ops][-1] == "col2im" and any(o.module == "gemm" for o in ops)
        assert not np.isnan(got.astype(np.float32)).any()
        close(got, want, _tol(dtype))


def test_conv_transpose_with_a_small_product_takes_the_gemv():
    """Few rows of columns (M/G * kernel <= 8): the product is the GEMV kernels'."""
    x = np.random.default_rng(8).uniform(-1, 1, (1, 3, 6)).astype(np.float32)
    w = np.random.default_rng(9).uniform(-1, 1, (3, 1, 4)).astype(np.float32)
    ops = gk.binding_for("::ConvTranspose").bind(
        [gk.Arg(64, x.shape, x.dtype), gk.Arg(128, w.shape, w.dtype)], [gk.Arg(256, (1, 1, 9), x.dtype)],
        {"strides": [1]}, gk.Target(workspace=lambda n: 1 << 20))
    assert ops[0].entry.startswith("hipep_gemv") and ops[-1].entry == "hipep_col2im_f32"


def test_conv_transpose_claims():
    def reason(attrs, shapes, dtypes=("float32", "float32")):
        return gk.kernel_reason("::ConvTranspose", {"group": 1, **attrs}, list(dtypes), shapes)

    assert reason({"strides": [2, 2]}, [(1, 320, 32, 32), (320, 320, 3, 3)]) is None
    assert reason({}, [(1, 4, None), (4, 2, 3)]) is None
    assert reason({"strides": [2, 2, 2]}, [None, None]) is None  # the rank from the attributes
    assert "not known" in reason({}, [None, None])
    assert "4 spatial axes" in reason({}, [(1, 2, 3, 3, 3, 3), (2, 2, 1, 1, 1, 1)])
    assert "element type" in reason({}, [(1, 2, 3, 3), (2, 2, 1, 1)], ("float64", "float64"))


# ---- Col2Im --------------------------------------------------------------------------------------

COL2IM = [  # (input, image_shape, block_shape, attributes)
    ((1, 4, 9), [4, 4], [2, 2], {}),
    ((2, 18, 9), [5, 6], [3, 3], {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 12, 8), [5, 5], [2, 3], {"dilations": [2, 1], "strides": [1, 2], "pads": [0, 1, 1, 0]}),
    ((1, 6, 4), [9], [3], {"strides": [3], "pads": [1, 2]}),  # 1-D
    ((1, 16, 45), [3, 4, 5], [2, 2, 2], {"pads": [0, 0, 0, 1, 0, 1]}),  # 3-D
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("x_shape,image,block,attrs", COL2IM)
def test_col2im(libraries, dtype, x_shape, image, block, attrs):
    x = np.random.default_rng(10).uniform(-1, 1, x_shape).astype(dtype)
    ins = [x, np.array(image, np.int64), np.array(block, np.int64)]
    (got,), (want,), ops = run_on_host(libraries, "::Col2Im", ins, attrs)
    assert [o.entry for o in ops] == [f"hipep_col2im_{'f32' if dtype == np.float32 else 'f16'}"]
    close(got, want, 1e-6 if dtype == np.float32 else 1e-3)


def test_col2im_claims():
    f32, i64 = "float32", "int64"
    assert gk.kernel_reason("::Col2Im", {}, [f32, i64, i64], [(1, 4, 9), (2,), (2,)],
                            [None, None, np.array([2, 2])]) is None
    # a run-time block_shape is read at launch from host-visible memory (the plan copies it there):
    # claimed where an operand's static length gives the number of spatial axes
    assert gk.kernel_reason("::Col2Im", {}, [f32, i64, i64], [(1, 4, 9), (2,), (2,)]) is None
    assert gk.kernel_reason("::Col2Im", {}, [f32, i64, i64], [(1, 4, 9), (2,), None]) is None
    assert "unknown length" in gk.kernel_reason("::Col2Im", {}, [f32, i64, i64], [(1, 4, 9), None, None])
    assert "4 spatial axes" in gk.kernel_reason("::Col2Im", {}, [f32, i64, i64], [None, None, (4,)])
    assert gk.binding_for("::Col2Im").reads_values  # bound again when block_shape's values change
    assert "4 spatial axes" in gk.kernel_reason("::Col2Im", {}, [f32, i64, i64], [None, None, None],
                                                [None, None, np.ones(4, np.int64)])


# ---- Einsum --------------------------------------------------------------------------------------

EINSUM = [  # (equation, operand shapes)
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhid,bhjd->bhij", [(1, 2, 3, 4), (1, 2, 5, 4)]),  # attention's scores
    ("ij,jk->ik", [(5, 6), (6, 7)]),
    ("bid,jd->bij", [(2, 3, 4), (5, 4)]),  # rows of both batch and sequence
    ("i,i->", [(7,), (7,)]),  # a dot product
    ("ij,j->i", [(3, 5), (5,)]),
    ("ij,jk->ki", [(3, 4), (4, 5)]),  # the operands swap: Y^T = B^T A^T
    ("bij,bjk->ibk", [(2, 3, 4), (2, 4, 5)]),  # the product, then a copy into the output's order
    ("bji,bjk->bik", [(2, 4, 3), (2, 4, 5)]),  # A transposed by its strides
    ("bij,bjk->bik", [(1, 3, 4), (2, 4, 5)]),  # A broadcast over the batch
    ("...ij,...jk->...ik", [(2, 3, 4), (1, 4, 5)]),
    ("acb,bcd->ad", [(2, 3, 4), (4, 3, 5)]),  # contracted subscripts that do not merge in B: copied
    ("iaj,jk->aik", [(3, 2, 4), (4, 5)]),  # rows that do not merge in A: copied
    ("ij->ji", [(3, 5)]),
    ("bij->bji", [(2, 3, 4)]),
    ("ij->i", [(3, 5)]),
    ("ij->j", [(3, 5)]),
    ("ijk->ki", [(2, 3, 4)]),  # summed axis in the middle, kept ones permuted: copied first
    ("ij->", [(3, 5)]),
    ("i->i", [(6,)]),
    ("->", [()]),
]
DIAGONALS = [  # a subscript repeated within an operand's term
    ("ii->i", [(4, 4)]),
    ("...ii ->...i", [(3, 5, 5)]),  # ONNX's batch diagonal case, its space included
    ("ii->", [(5, 5)]),  # the trace: the diagonal copied out, then summed
    ("bii->ib", [(2, 3, 3)]),
    ("iij->ji", [(3, 3, 4)]),
    ("ii,ij->j", [(3, 3), (3, 4)]),  # a diagonal contracted: copied out for the product
    ("ij,jj->ij", [(2, 3), (3, 3)]),  # a diagonal as a batch subscript
    ("bjj,bjk->bk", [(2, 4, 4), (2, 4, 5)]),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("equation,shapes", EINSUM + DIAGONALS)
def test_einsum(libraries, dtype, equation, shapes):
    rng = np.random.default_rng(11)
    ins = [rng.uniform(-1, 1, s).astype(dtype) for s in shapes]
    assert gk.kernel_reason("::Einsum", {"equation": equation}, [dtype().dtype.name] * len(ins), shapes) is None
    (got,), (want,), _ = run_on_host(libraries, "::Einsum", ins, {"equation": equation}, workspace=True)
    close(got, want, _tol(dtype))


F64_ONLY = [  # equations only the f64 kernel takes: a subscript summed within one operand alone
    ("ij,jk->k", [(2, 3), (3, 4)]),
    ("ij,jk->", [(3, 4), (4, 2)]),
    ("ij,k->ik", [(3, 4), (5,)]),  # an outer product over a sum
]


@pytest.mark.parametrize("equation,shapes", EINSUM + DIAGONALS + F64_ONLY)
def test_einsum_of_f64_sums_in_double(libraries, equation, shapes):
    """f64: two operands through kernels/einsum.hip (its entry the launch's last), one operand
    through the copies and the f64 ReduceSum; the reference (numpy in double) and ONNX Runtime's
    CPU EP within a few ulps. One operand of values 2^30 apart: an f32 sum would lose the small."""
    from onnx import TensorProto as TP
    from onnx import helper

    from helpers import cpu_session, make_model, tensor

    rng = np.random.default_rng(12)
    ins = [rng.uniform(-1, 1, s) for s in shapes]
    if ins[0].size > 1:
        ins[0].reshape(-1)[::2] *= 2.0 ** 30
    assert gk.kernel_reason("::Einsum", {"equation": equation}, ["float64"] * len(ins), shapes) is None
    (got,), (want,), ops = run_on_host(libraries, "::Einsum", ins, {"equation": equation}, workspace=True)
    assert got.dtype == np.float64
    if len(ins) == 2:
        assert ops[-1].entry == "hipep_einsum_f64" and not any(getattr(o, "module", None) == "gemm" for o in ops)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max(initial=1.0))
    names = [f"x{i}" for i in range(len(ins))]
    model = make_model([helper.make_node("Einsum", names, ["y"], equation=equation)],
                       [tensor(v, TP.DOUBLE, list(s)) for v, s in zip(names, shapes)], [tensor("y", TP.DOUBLE, None)],
                       opset=12)
    (ort_y,) = cpu_session(model).run(None, dict(zip(names, ins)))
    np.testing.assert_allclose(got, ort_y, rtol=1e-12, atol=1e-12 * np.abs(ort_y).max(initial=1.0))


def test_einsum_of_f64_merges_axes_and_covers_long_sums(libraries):
    """The operands' axes that step as one are merged before the launch (a batched product keeps
    one axis per group), and a sum longer than a warp's passes spreads over the block."""
    rng = np.random.default_rng(13)
    a, b = rng.uniform(-1, 1, (2, 3, 4, 5)), rng.uniform(-1, 1, (4, 5, 6))
    (got,), (want,), ops = run_on_host(libraries, "::Einsum", [a, b], {"equation": "bcij,ijk->bck"})
    (op,) = ops
    args = op.params[-1]
    assert (args.out_rank, args.sum_rank) == (2, 1) and list(args.sum_dims[:1]) == [20]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)
    x, y = rng.uniform(-1, 1, 3000), rng.uniform(-1, 1, 3000)
    (got,), (want,), ops = run_on_host(libraries, "::Einsum", [x, y], {"equation": "i,i"}, sm_count=4)
    assert ops[0].block[0] > 32
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_einsum_of_integers_rearranges_only(libraries):
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    (got,), (want,), _ = run_on_host(libraries, "::Einsum", [x], {"equation": "ij->ji"})
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("equation,dtypes,shapes,why", [
    ("ij,jk,kl->il", ["float32"] * 3, [(2, 2)] * 3, "3 operands"),
    ("ij,jk,kl->il", ["float64"] * 3, [(2, 2)] * 3, "3 operands"),
    ("ij,jk->k", ["float32"] * 2, [(2, 3), (3, 4)], "'i' is summed within one operand alone"),
    ("ij,jk->ik", ["int32"] * 2, [(2, 3), (3, 4)], "float kernels only"),
    ("ij->i", ["int64"], [(2, 3)], "float kernels only"),
    ("...ij,jk->...ik", ["float32"] * 2, [None, (3, 4)], "unknown rank"),
    ("abcdefghi,i->a", ["float32"] * 2, [(1,) * 9, (1,)], "9 subscripts"),
    ("abcde,fghij->", ["float64"] * 2, [(1,) * 5] * 2, "10 summed subscripts (at most 8)"),
])
def test_einsum_refusals_name_the_equation(equation, dtypes, shapes, why):
    reason = gk.kernel_reason("::Einsum", {"equation": equation, SINCE_VERSION: 12}, dtypes, shapes)
    assert reason is not None and f"'{equation}'" in reason and why in reason, reason
    assert "no equation" in gk.kernel_reason("::Einsum", {}, ["float32"], [None])


def test_col2im_entry_points_compile_with_nvrtc():
    """Every entry the bindings name exists in kernels/col2im.hip as NVRTC compiles it for sm_90."""
    from helpers import nvrtc_available
    from hipep.runtime import kernel_cache

    if not nvrtc_available():
        pytest.skip("nvidia-cuda-nvrtc (cuda-bindings) is not installed")
    cubin, _ = kernel_cache.compile_cubin(kernel_cache.module_source("col2im"), "col2im", "sm_90",
                                          {"HIPEP_WARP_SIZE": 32}, use_cache=False)
    for entry in ("hipep_col2im_f32", "hipep_col2im_f16"):
        assert entry.encode() + b"\0" in cubin
