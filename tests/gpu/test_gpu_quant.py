"""MatMulNBits and GatherBlockQuantized on the CUDA device: single-node models with random weights
quantized blockwise (tests/quant_helpers.py) through hipep.InferenceSession(device="cuda"), run
three times (first run, bound replay, CUDA graph replay).

MatMulNBits is compared with ORT's CPU EP by relative L2 error. At accuracy_level 4 with integer
(or no) zero points both quantize A to int8 per block of K (MLAS's rule, which the kernels follow),
so only f32 summation order differs: 1e-4 (f32) / 5e-4 (f16, whose output rounding can move by an
ulp); without the quantization the error would be ~5e-3. At level 0 (ORT's dequantize-then-f32
GEMM): 2e-5 (f32) / 2e-3 (f16). Also with hipep's numpy references: at level 4 the registry's
(hipep.ops.contrib_quant._matmul_nbits, int8 A in float64) at 1e-5 (f32) / 5e-4 (f16), else the
dequantization (_mnb_unpack / _mnb_dequant) and a float64 matmul. GatherBlockQuantized computes
(q - zp) * scale in f32 rounded once, as ORT does: the outputs are equal."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import hipep

from hipep.runtime.cuda import cuda_status
from helpers import cpu_session, make_model, tensor
from quant_helpers import MS, gather_block_quantized_model, matmul_nbits_model, quantize_blockwise

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

F32, F16 = TP.FLOAT, TP.FLOAT16
RUNS = 3


def rel_l2(got, want) -> float:
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(g - w) / max(np.linalg.norm(w), 1e-30))


def reference(feeds, weights, attrs) -> np.ndarray:
    """hipep's numpy dequantization of B and a float64 matmul (+ bias)."""
    from hipep.ops.contrib_quant import _mnb_dequant, _mnb_unpack

    B, scales, zp, bias = weights
    k = attrs["K"]
    w = _mnb_dequant(*_mnb_unpack(B, scales, zp, attrs))[:, :k].astype(np.float64)
    a = feeds["A"].astype(np.float64)
    y = a.reshape(-1, k) @ w.T
    if bias is not None:
        y = y + bias.astype(np.float64)
    return y.reshape(a.shape[:-1] + (attrs["N"],))


def int8_reference(feeds, weights, attrs) -> np.ndarray:
    """The registry reference at accuracy_level 4: A quantized to int8 per block, float64 sums."""
    from hipep.ops.contrib_quant import _matmul_nbits

    B, scales, zp, bias = weights
    full = {"bits": 4, "accuracy_level": 4, "weight_prepacked": 0, **attrs}
    return _matmul_nbits([feeds["A"], B, scales.reshape(-1), zp, None, bias], full)[0]


def quantizes_a(level, zp) -> bool:
    """Whether ORT (and hipep) quantize A to int8: level 4 with integer or no zero points."""
    return level == 4 and (zp is None or zp.dtype == np.uint8)


def cpu_tolerance(elem, level, zp) -> float:
    if quantizes_a(level, zp):
        return 1e-4 if elem == F32 else 5e-4
    return 2e-5 if elem == F32 else 2e-3


def run_gpu(model, feeds, runs=RUNS):
    """The output of the session's last run. Replays (the third run on) give the captured second run's
    bits. The first run gives them too, except where its binding was provisional: a prompt length's first
    run takes MatMulNBits' tensor-core GEMM where the later runs take cuBLASLt
    (HIPEP_MNB_GEMM_TC_FIRST_RUN_ROWS), other f32 sums of the same fp16 or bf16 products."""
    sess = hipep.InferenceSession(model, device="cuda")
    outs = [sess.run(None, feeds)[0] for _ in range(runs)]
    for o in outs[2:]:
        np.testing.assert_array_equal(o, outs[1])
    if not np.array_equal(outs[0], outs[-1]):
        assert outs[0].dtype != np.float32 and rel_l2(outs[0], outs[-1]) < 1e-3, rel_l2(outs[0], outs[-1])
    return outs[-1]


# (K, N, bits, block_size, zero points, bias, element type, accuracy_level)
CONFIGS = [
    (512, 160, 4, 32, "none", False, F32, 4),      # the model builder's form (symmetric, level 4)
    (200, 72, 4, 16, "uint8", True, F32, 0),       # K not a multiple of the block; odd n_blocks
    (320, 64, 8, 32, "uint8", False, F16, 0),      # 8 bits
    (384, 48, 4, 128, "float", True, F16, 0),      # float zero points
    (1100, 40, 4, 32, "uint8", False, F32, 4),     # K past one shared-memory tile of the 8-row GEMV
    (256, 100, 8, 16, "none", True, F32, 0),       # 8 bits, block 16, N not a multiple of 16
    (96, 24, 4, 32, "uint8", False, F16, 4),       # f16 at level 4
    (1030, 56, 8, 64, "uint8", True, F32, 4),      # level 4, K % 4 != 0 (A staged value by value), 8 bits
    (600, 40, 4, 256, "none", False, F16, 4),      # level 4, block 256 (two loads a lane when staging A)
    (384, 48, 4, 128, "float", True, F32, 4),      # level 4 with float zero points: A stays f32, as in ORT
]


@pytest.mark.parametrize("m", [1, 3, 8, 17, 64])
@pytest.mark.parametrize("config", CONFIGS, ids=[f"K{c[0]}-N{c[1]}-b{c[2]}-bs{c[3]}-{c[4]}{'-bias' if c[5] else ''}-"
                                                f"{'f32' if c[6] == F32 else 'f16'}-lvl{c[7]}" for c in CONFIGS])
def test_matmul_nbits(m, config):
    k, n, bits, bs, zp_kind, bias, elem, level = config
    m_shape = (m,) if m % 2 else (1, m)  # 2-D and 3-D A
    model, feeds, weights = matmul_nbits_model(m_shape, k, n, bits, bs, elem, zp_kind, bias, level, seed=m)
    feeds["A"].reshape(-1, k)[0, :bs] = 0  # an all-zero block of A: its int8 scale is 0
    got = run_gpu(model, feeds)
    want = cpu_session(model).run(None, feeds)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    zp = weights[2]
    assert rel_l2(got, want) < cpu_tolerance(elem, level, zp)
    attrs = {"K": k, "N": n, "bits": bits, "block_size": bs}
    if quantizes_a(level, zp):
        assert rel_l2(got, int8_reference(feeds, weights, attrs)) < (1e-5 if elem == F32 else 5e-4)
    else:
        assert rel_l2(got, reference(feeds, weights, attrs)) < (1e-5 if elem == F32 else 2e-3)


@pytest.mark.parametrize("level", [0, 4])
@pytest.mark.parametrize("elem", [F32, F16])
def test_matmul_nbits_square_4096_decode(elem, level):
    """N = K = 4096, int4, block 32: the GEMV's shape of reference (several K tiles at M = 8); at
    level 4 the builder's form, A quantized to int8 while the GEMV stages it."""
    attrs = {"K": 4096, "N": 4096, "bits": 4, "block_size": 32}
    for m in (1, 8):
        model, feeds, weights = matmul_nbits_model((1, m), 4096, 4096, 4, 32, elem, "none", False, level, seed=m)
        got = run_gpu(model, feeds, runs=2)
        if level == 4:
            assert rel_l2(got, int8_reference(feeds, weights, attrs)) < (1e-5 if elem == F32 else 5e-4)
        else:
            assert rel_l2(got, reference(feeds, weights, attrs)) < (1e-5 if elem == F32 else 2e-3)
        assert rel_l2(got, cpu_session(model).run(None, feeds)[0]) < cpu_tolerance(elem, level, None)


# (K, N, zero points, element type, accuracy_level): one-row GEMV shapes of a 2048-wide decoder on
# a GPU of ~132 SMs. K = 2048 with N of 8192 or more runs the wide variant (4 columns a warp, entry
# suffix _c4); N = 4300 too, its last block partial (N % 32 != 0); N = 2048 splits K 2 ways; K = 8192
# splits K 2 ways with 4 chunks a lane; K = 4096 runs whole rows a warp with 4 chunks a lane. Past
# one wave of the row GEMV (N > 4 * 8 * SMs: 2048 x 8192 and 2048 x 4300 with zero points, fp16 A
# and A in int8 at level 4; 1024 x 9000, 4064 x 8200) the lighter hipep_mnb_gemv_row1 runs.
DECODE_SHAPES = [
    (2048, 8192, "none", F16, 0),
    (2048, 8192, "none", F32, 4),
    (2048, 4300, "uint8", F16, 0),
    (2048, 4300, "uint8", F32, 4),
    (2048, 2048, "none", F32, 4),
    (8192, 2048, "none", F16, 0),
    (8192, 2048, "none", F32, 4),
    (4096, 4096, "float", F16, 0),
    (1024, 9000, "uint8", F16, 0),  # fp16 A past one wave: hipep_mnb_gemv_row1_h2, 1 chunk a lane
    (4064, 8200, "none", F16, 0),   # 4 chunks a lane, the last lane's last one absent
]


@pytest.mark.parametrize("shape", DECODE_SHAPES, ids=[f"K{s[0]}-N{s[1]}-{s[2]}-{'f32' if s[3] == F32 else 'f16'}-lvl{s[4]}"
                                                     for s in DECODE_SHAPES])
def test_matmul_nbits_decode_gemv_variants(shape):
    k, n, zp_kind, elem, level = shape
    model, feeds, weights = matmul_nbits_model((1, 1), k, n, 4, 32, elem, zp_kind, True, level, seed=k + n)
    got = run_gpu(model, feeds, runs=2)
    zp = weights[2]
    assert rel_l2(got, cpu_session(model).run(None, feeds)[0]) < cpu_tolerance(elem, level, zp)
    attrs = {"K": k, "N": n, "bits": 4, "block_size": 32}
    if quantizes_a(level, zp):
        assert rel_l2(got, int8_reference(feeds, weights, attrs)) < (1e-5 if elem == F32 else 5e-4)
    else:
        assert rel_l2(got, reference(feeds, weights, attrs)) < (1e-5 if elem == F32 else 2e-3)


# (K, N, zero points, warps a column): the shapes of the several-columns-a-warp row GEMV
# (gpu_quant.row_cols_form): 4 columns a warp (qkv), 2 past a wave of those (an LM head), U 4 and 2
# columns (4096 x 4096, N odd), four warps a column (down).
COLS_SHAPES = [(2048, 3072, "uint8", 1), (2048, 32000, "none", 1), (4096, 4097, "none", 1), (8192, 2048, "uint8", 4)]


@pytest.mark.parametrize("shape", COLS_SHAPES, ids=[f"K{s[0]}-N{s[1]}-{s[2]}" for s in COLS_SHAPES])
def test_matmul_nbits_columns_a_warp_against_one_column_a_warp(monkeypatch, shape):
    """fp16 decode rows: several columns a warp give one column a warp's bits where a warp holds
    the whole row (each column's sum chunk for chunk the same), and the CPU EP's result within its
    tolerance where four warps share a column."""
    from hipep.runtime import gpu_quant as gq

    k, n, zp_kind, split = shape
    model, feeds, weights = matmul_nbits_model((1, 1), k, n, 4, 32, F16, zp_kind, False, 0, seed=k + n)
    got = run_gpu(model, feeds)
    monkeypatch.setattr(gq, "GEMV_ROW_COLS", 0)
    one = run_gpu(model, feeds)
    if split == 1:
        np.testing.assert_array_equal(got, one)
    assert rel_l2(got, cpu_session(model).run(None, feeds)[0]) < cpu_tolerance(F16, 0, weights[2])
    assert rel_l2(got, reference(feeds, weights, {"K": k, "N": n, "bits": 4, "block_size": 32})) < 2e-3


# (K, N, block size, zero points): the tensor-core row GEMV's cases (gpu_quant.row_tc_form): 4096 x
# 4096 (8 warps a column group), qkv with zero points (4), the LM head, down with block 128 (two turns
# of the rounds' loop), K short of K_pad with N odd and block 64.
TC_SHAPES = [(4096, 4096, 32, "none"), (2048, 3072, 32, "uint8"), (2048, 32000, 32, "none"), (8192, 2048, 128, "none"),
             (4000, 4097, 64, "uint8")]


@pytest.mark.parametrize("shape", TC_SHAPES, ids=[f"K{s[0]}-N{s[1]}-bs{s[2]}-{s[3]}" for s in TC_SHAPES])
def test_matmul_nbits_on_tensor_cores(tensor_core_forms, shape):
    """HIPEP_MNB_GEMV_TC=1: fp16 decode rows on mma.sync (kernels/matmul_nbits_tc.hip), within the
    CPU EP's tolerance and hipep's float64 reference's; replays give the first run's bits."""
    k, n, bs, zp_kind = shape
    model, feeds, weights = matmul_nbits_model((1, 1), k, n, 4, bs, F16, zp_kind, True, 0, seed=k + n)
    got = run_gpu(model, feeds)
    assert tensor_core_forms and None not in tensor_core_forms, tensor_core_forms
    assert rel_l2(got, cpu_session(model).run(None, feeds)[0]) < cpu_tolerance(F16, 0, weights[2])
    assert rel_l2(got, reference(feeds, weights, {"K": k, "N": n, "bits": 4, "block_size": bs})) < 2e-3


# (K, N, block size, zero points): bf16 decode rows at the ~1.1B model's shapes (qkv, o, gate/up,
# down, the LM head), and K short of K_pad with N odd and block 64 with zero points.
BF16_SHAPES = [(2048, 3072, 32, "none"), (2048, 2048, 32, "uint8"), (2048, 8192, 32, "none"),
               (8192, 2048, 128, "none"), (2048, 32000, 32, "none"), (4000, 4097, 64, "uint8")]


@pytest.mark.parametrize("shape", BF16_SHAPES, ids=[f"K{s[0]}-N{s[1]}-bs{s[2]}-{s[3]}" for s in BF16_SHAPES])
def test_bf16_decode_rows_run_on_tensor_cores(monkeypatch, shape):
    """bf16 decode rows take the tensor-core GEMV by default (HIPEP_MNB_GEMV_TC unset; bf16 has no
    packed form of its own): within the output's bf16 rounding of hipep's float64 reference on the
    same bf16 A and scales. bf16 inside the model (Casts from and to f32: ORT's Python layer cannot
    feed numpy bfloat16); replays give the first run's bits."""
    import ml_dtypes

    from hipep.runtime import gpu_quant as gq

    answers, form = [], gq.row_tc_form
    monkeypatch.setattr(gq, "row_tc_form", lambda *args: answers.append(form(*args)) or answers[-1])
    k, n, bs, zp_kind = shape
    rng = np.random.default_rng(k + n)
    bf16 = ml_dtypes.bfloat16
    B, scales, zp = quantize_blockwise(rng.standard_normal((n, k)).astype(np.float32), 4, bs, zp_kind, rng)
    scales = scales.astype(bf16)
    inits = [numpy_helper.from_array(B, "B"), numpy_helper.from_array(scales.reshape(-1), "scales")]
    if zp is not None:
        inits.append(numpy_helper.from_array(zp.reshape(-1), "zp"))
    nodes = [helper.make_node("Cast", ["A"], ["A_b"], to=TP.BFLOAT16),
             helper.make_node("MatMulNBits", ["A_b", "B", "scales"] + (["zp"] if zp is not None else []), ["Y_b"],
                              domain="com.microsoft", name="mnb", K=k, N=n, bits=4, block_size=bs),
             helper.make_node("Cast", ["Y_b"], ["Y"], to=F32)]
    model = make_model(nodes, [tensor("A", F32, [1, k])], [tensor("Y", F32, None)], inits, opset=21, extra_opsets=[MS])
    feeds = {"A": (rng.standard_normal((1, k)) * 0.5).astype(np.float32)}
    got = run_gpu(model, feeds)
    assert answers and None not in answers, answers
    want = reference({"A": feeds["A"].astype(bf16).astype(np.float32)}, (B, scales.astype(np.float32), zp, None),
                     {"K": k, "N": n, "bits": 4, "block_size": bs})
    assert rel_l2(got, want) < 2.5e-3  # the outputs rounded to bf16 alone: ~1.1e-3


# (K, N, block size, zero points, bias): prompts at the ~1.1B model's qkv and down shapes (K split in
# four: 64 tiles at 128 rows), its gate/up with zero points and a bias, and K short of K_pad with N odd.
GEMM_TC_SHAPES = [(2048, 3072, 32, "none", False), (8192, 2048, 32, "none", False),
                  (2048, 8192, 64, "uint8", True), (1000, 4097, 32, "float", True)]


@pytest.fixture
def gemm_tc_calls(monkeypatch):
    """The tensor-core prompt GEMM's binds (gpu_quant._mnb_gemm_tc_ops), recorded: (rows, splits)."""
    from hipep.runtime import gpu_quant as gq

    calls, real = [], gq._mnb_gemm_tc_ops

    def spy(*args):
        ops = real(*args)
        calls.append((int(args[6].m), ops[0].grid[2]))
        return ops

    monkeypatch.setattr(gq, "_mnb_gemm_tc_ops", spy)
    return calls


@pytest.mark.parametrize("rows", [9, 128, 300])
@pytest.mark.parametrize("shape", GEMM_TC_SHAPES, ids=[f"K{s[0]}-N{s[1]}-bs{s[2]}-{s[3]}{'-bias' if s[4] else ''}"
                                                      for s in GEMM_TC_SHAPES])
def test_prompt_rows_on_tensor_cores(monkeypatch, gemm_tc_calls, rows, shape):
    """HIPEP_MNB_GEMM_TC=1: fp16 prompt rows through the tensor-core GEMM (kernels/matmul_nbits_gemm_tc.hip,
    K split where the tiles leave SMs idle), within the CPU EP's tolerance and hipep's float64
    reference's, and next to the dequantize-then-cuBLASLt path's result (HIPEP_MNB_GEMM_TC=0), which
    multiplies the same fp16 weights."""
    k, n, bs, zp_kind, bias = shape
    model, feeds, weights = matmul_nbits_model((1, rows), k, n, 4, bs, F16, zp_kind, bias, 0, seed=k + rows)
    monkeypatch.setenv("HIPEP_MNB_GEMM_TC", "1")
    got = run_gpu(model, feeds)
    assert gemm_tc_calls and all(m == rows for m, _ in gemm_tc_calls), gemm_tc_calls
    assert rel_l2(got, cpu_session(model).run(None, feeds)[0]) < cpu_tolerance(F16, 0, weights[2])
    assert rel_l2(got, reference(feeds, weights, {"K": k, "N": n, "bits": 4, "block_size": bs})) < 2e-3
    monkeypatch.setenv("HIPEP_MNB_GEMM_TC", "0")
    calls = len(gemm_tc_calls)
    blas = run_gpu(model, feeds, runs=1)
    assert len(gemm_tc_calls) == calls
    assert rel_l2(got, blas) < 1e-3


@pytest.mark.parametrize("rows", [40, 64])
def test_bf16_prompt_rows_on_tensor_cores(gemm_tc_calls, rows):
    """bf16 prompt rows take the tensor-core GEMM by default (up to gpu_quant.GEMM_TC_MAX_ROWS): within
    the output's bf16 rounding of hipep's float64 reference on the same bf16 A and the weights
    rounded to bf16 as the kernel rounds them. bf16 inside the model, as in the decode test above."""
    import ml_dtypes

    from hipep.ops.contrib_quant import _mnb_dequant, _mnb_unpack

    k, n, bs = 2048, 3072, 32
    rng = np.random.default_rng(rows)
    bf16 = ml_dtypes.bfloat16
    B, scales, _ = quantize_blockwise(rng.standard_normal((n, k)).astype(np.float32), 4, bs, "none", rng)
    scales = scales.astype(bf16)
    inits = [numpy_helper.from_array(B, "B"), numpy_helper.from_array(scales.reshape(-1), "scales")]
    nodes = [helper.make_node("Cast", ["A"], ["A_b"], to=TP.BFLOAT16),
             helper.make_node("MatMulNBits", ["A_b", "B", "scales"], ["Y_b"], domain="com.microsoft", name="mnb",
                              K=k, N=n, bits=4, block_size=bs),
             helper.make_node("Cast", ["Y_b"], ["Y"], to=F32)]
    model = make_model(nodes, [tensor("A", F32, [rows, k])], [tensor("Y", F32, None)], inits, opset=21,
                       extra_opsets=[MS])
    feeds = {"A": (rng.standard_normal((rows, k)) * 0.5).astype(np.float32)}
    got = run_gpu(model, feeds)
    assert gemm_tc_calls == [(rows, gemm_tc_calls[0][1])], gemm_tc_calls
    attrs = {"K": k, "N": n, "bits": 4, "block_size": bs}
    w = _mnb_dequant(*_mnb_unpack(B, scales.astype(np.float32), None, attrs))[:, :k].astype(bf16)
    want = feeds["A"].astype(bf16).astype(np.float64) @ w.astype(np.float64).T
    assert rel_l2(got, want) < 2.5e-3  # the outputs rounded to bf16 alone: ~1.1e-3


def test_tensor_core_gemv_that_starts_early_waits_for_the_kernel_ahead(tensor_core_forms):
    """The tensor-core row GEMV overlaps the kernel ahead as the row GEMVs do: a chain of GEMV ->
    SiLU links replayed 50 times gives the same bits each time and ORT's CPU EP's values."""
    model, feeds = _gemv_chain_model(2048, 8, F16, 0, norm=False)
    sess = hipep.InferenceSession(model, device="cuda")
    outs = [sess.run(None, feeds)[0] for _ in range(50)]
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])
    assert tensor_core_forms and None not in tensor_core_forms, tensor_core_forms
    assert rel_l2(outs[0], cpu_session(model).run(None, feeds)[0]) < 1e-2


@pytest.mark.parametrize("elem", [F32, F16])
@pytest.mark.parametrize("m", [1, 8, 40])
def test_matmul_nbits_level4_ties_round_half_to_even(m, elem):
    """A on a grid (each block k * 0.25 for integers k in [-8, 7], one k = -8: amax 2, 127 / amax =
    63.5) puts a * (127 / amax) exactly on x.5 for k = +-4: the int8 code is the even neighbour, as
    MLAS rounds (a decoder whose norm weights are ones over a quantized embedding has such ties).
    A tie broken the other way moves a product by ~1e-3: the GEMV (1, 8 rows) and the GEMM (40)
    must agree with the CPU EP far closer."""
    k, n, bs = 256, 64, 32
    model, feeds, weights = matmul_nbits_model((m,), k, n, 4, bs, elem, "none", False, 4, seed=3)
    rng = np.random.default_rng(m)
    grid = rng.integers(-8, 8, (m, k // bs, bs))
    grid[:, :, 0] = -8
    feeds["A"] = (grid * 0.25).reshape(m, k).astype(feeds["A"].dtype)
    got = run_gpu(model, feeds)
    tol = 1e-5 if elem == F32 else 5e-4
    assert rel_l2(got, cpu_session(model).run(None, feeds)[0]) < tol
    assert rel_l2(got, int8_reference(feeds, weights, {"K": k, "N": n, "bits": 4, "block_size": bs})) < tol


@pytest.mark.parametrize("m", [20, 32])
def test_matmul_nbits_gemm_for_few_rows_over_a_wide_n(m):
    """Up to 32 rows run the GEMV per 8 rows unless the GEMM's grid covers the SMs (here N = 8500:
    133 column tiles), as for a large vocabulary's head at a short prompt."""
    model, feeds, weights = matmul_nbits_model((m,), 64, 8500, 4, 32, F16, "uint8", True, 0, seed=m)
    got = run_gpu(model, feeds)
    assert rel_l2(got, cpu_session(model).run(None, feeds)[0]) < 2e-3
    assert rel_l2(got, reference(feeds, weights, {"K": 64, "N": 8500, "bits": 4, "block_size": 32})) < 2e-3


@pytest.mark.parametrize("level", [0, 4])
def test_matmul_nbits_rows_change_between_runs(level):
    """One session, A's rows changing run to run: the GEMV (1, 3, 8 rows; 9 and 20 as 8-row slices)
    and the GEMM (40; at level 4 after the kernel that writes A's block scales to the workspace)."""
    k, n = 256, 96
    model, _, weights = matmul_nbits_model(("m",), k, n, 4, 32, F32, "uint8", True, level)
    sess = hipep.InferenceSession(model, device="cuda")
    cpu = cpu_session(model)
    rng = np.random.default_rng(5)
    for m in (1, 3, 8, 9, 20, 40, 1, 8, 40):
        feeds = {"A": rng.standard_normal((m, k)).astype(np.float32)}
        got = sess.run(None, feeds)[0]
        assert got.shape == (m, n)
        assert rel_l2(got, cpu.run(None, feeds)[0]) < cpu_tolerance(F32, level, weights[2])


# ---- GatherBlockQuantized ---------------------------------------------------------------------------

@pytest.mark.parametrize("vocab,hidden,bits,bs,idx_shape,elem,zp,idx_elem,middle", [
    (256, 128, 4, 32, (2, 5), F32, True, TP.INT64, ()),    # the builder's embedding table
    (256, 128, 4, 32, (1, 1), F16, True, TP.INT64, ()),    # decode: one token
    (100, 96, 4, 16, (7,), F16, False, TP.INT32, ()),
    (64, 80, 8, 16, (3, 4), F32, True, TP.INT64, ()),      # 8 bits
    (40, 64, 4, 64, (2, 3), F32, True, TP.INT64, (3,)),    # rank-3 data
    (50, 36, 4, 32, (4,), F16, True, TP.INT64, ()),        # 18-byte rows: byte by byte
])
def test_gather_block_quantized(vocab, hidden, bits, bs, idx_shape, elem, zp, idx_elem, middle):
    model, feeds = gather_block_quantized_model(vocab, hidden, bits, bs, idx_shape, elem, zp, idx_elem, middle=middle)
    got = run_gpu(model, feeds)
    want = cpu_session(model).run(None, feeds)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_tied_embedding_and_lm_head():
    """The builder's tied int4 embedding: GatherBlockQuantized over a Reshape of the lm_head's
    MatMulNBits weights (sharing their scales), then that MatMulNBits as the head."""
    vocab, hidden, bs = 300, 128, 32
    rng = np.random.default_rng(11)
    B, scales, _ = quantize_blockwise(rng.standard_normal((vocab, hidden)).astype(np.float32), 4, bs, "none")
    nb = scales.shape[1]
    n = helper.make_node
    nodes = [n("Reshape", ["W", "shape"], ["table"], name="reshape"),
             n("GatherBlockQuantized", ["table", "ids", "scales"], ["emb"], domain="com.microsoft", name="embed",
               bits=4, block_size=bs, gather_axis=0, quantize_axis=1),
             n("MatMulNBits", ["emb", "W", "scales"], ["logits"], domain="com.microsoft", name="lm_head", K=hidden,
               N=vocab, bits=4, block_size=bs, accuracy_level=4)]
    inits = [numpy_helper.from_array(B, "W"), numpy_helper.from_array(scales.reshape(vocab, nb), "scales"),
             numpy_helper.from_array(np.array([vocab, hidden // 2], np.int64), "shape")]
    model = make_model(nodes, [tensor("ids", TP.INT64, ["batch", "seq"])], [tensor("logits", F32, None)], inits,
                       opset=21, extra_opsets=[MS])
    sess = hipep.InferenceSession(model, device="cuda")
    cpu = cpu_session(model)
    for shape in ((1, 9), (1, 1), (2, 1), (1, 1)):  # prefill, then decode steps
        feeds = {"ids": rng.integers(0, vocab, shape).astype(np.int64)}
        got = sess.run(None, feeds)[0]
        assert rel_l2(got, cpu.run(None, feeds)[0]) < 1e-4  # level 4: the same int8 A as the CPU EP


def _gemv_chain_model(k: int, links: int, elem, level: int, norm: bool = True):
    """A decode-shaped chain: x -> [SimplifiedLayerNormalization -> MatMulNBits -> Mul(sigmoid)]
    * links (without the norm where `norm` is False), each GEMV's A written by the kernel just ahead
    of it and each output feeding the next link, so a GEMV that read A before its predecessor
    finished would change the result."""
    rng = np.random.default_rng(7)
    npt = {F32: np.float32, F16: np.float16}[elem]
    nodes, inits, x = [], [], "x"
    # without a norm between links, weights of rms 2 / sqrt(k) keep each link's output near its
    # input's size (SiLU halves it about): unit weights grow it ~sqrt(k) a link, past fp16's range
    w_scale = 1.0 if norm else 2.0 / np.sqrt(k)
    for i in range(links):
        w = (w_scale * rng.standard_normal((k, k))).astype(np.float32)
        B, scales, _ = quantize_blockwise(w, 4, 32, "none", rng)
        inits += [numpy_helper.from_array(B, f"B{i}"), numpy_helper.from_array(scales.astype(npt).reshape(-1), f"s{i}"),
                  *([numpy_helper.from_array((1.0 + 0.1 * rng.standard_normal(k)).astype(npt), f"g{i}")] if norm else [])]
        if norm:
            nodes.append(helper.make_node("SimplifiedLayerNormalization", [x, f"g{i}"], [f"n{i}"], axis=-1,
                                          epsilon=1e-6))
        nodes += [helper.make_node("MatMulNBits", [f"n{i}" if norm else x, f"B{i}", f"s{i}"], [f"m{i}"],
                                   domain="com.microsoft",
                                   K=k, N=k, bits=4, block_size=32, accuracy_level=level),
                  helper.make_node("Sigmoid", [f"m{i}"], [f"sg{i}"]),
                  helper.make_node("Mul", [f"m{i}", f"sg{i}"], [f"y{i}"])]
        x = f"y{i}"
    model = make_model(nodes, [tensor("x", elem, [1, k])], [tensor(x, elem, None)], inits, opset=21,
                       extra_opsets=[MS])
    return model, {"x": rng.standard_normal((1, k)).astype(npt)}


@pytest.mark.parametrize("elem,level", [(F16, 0), (F32, 4)])
def test_gemv_that_starts_early_waits_for_the_kernel_ahead(elem, level):
    """On sm_90+ the row GEMV launches to overlap the kernel ahead of it (KernelOp.overlaps_previous)
    and waits in its code before reading A: a chain of norm -> GEMV -> SiLU links, replayed as a
    CUDA graph 50 times, gives the same bits with the overlap as without it, and ORT's CPU EP's
    values."""
    from hipep.runtime import gpu_kernels as gk
    from hipep.runtime.cuda import get_device

    dev = get_device(0)
    if dev.capability < (9, 0):
        pytest.skip(f"{dev.arch}: no programmatic dependent launch before sm_90")
    assert dev.overlap_launches
    model, feeds = _gemv_chain_model(2048, 8, elem, level)
    results = {}
    try:
        for overlap in (True, False):
            dev.overlap_launches = overlap
            sess = hipep.InferenceSession(model, device="cuda")
            outs = [sess.run(None, feeds)[0] for _ in range(50)]
            for o in outs[1:]:
                np.testing.assert_array_equal(o, outs[0])
            results[overlap] = outs[0]
    finally:
        dev.overlap_launches = True
    np.testing.assert_array_equal(results[True], results[False])
    want = cpu_session(model).run(None, feeds)[0]
    # int4 tolerance: each link quantizes its A to int8 (level 4) or rounds it to fp16, so
    # summation-order differences upstream move codes and grow along the chain (2.7e-3 measured
    # in f32 at level 4 over 8 links)
    assert rel_l2(results[True], want) < 1e-2
    # the device launches such an op through cuLaunchKernelEx's programmatic serialization
    op = gk.KernelOp("hipep_mnb_gemv_row_h2_f16_b4", (1,), (256,), [], module="matmul_nbits_row",
                     overlaps_previous=True)
    assert dev._ready(op).config is not None
    dev.overlap_launches = False
    try:
        assert dev._ready(op).config is None
    finally:
        dev.overlap_launches = True


@pytest.mark.parametrize("gemm", ["auto", "own"])
@pytest.mark.parametrize("config", [c for c in CONFIGS if c[7] == 0 or c[6] == F32],
                         ids=lambda c: f"K{c[0]}-N{c[1]}-b{c[2]}-bs{c[3]}-{c[4]}-{'f32' if c[6] == F32 else 'f16'}-lvl{c[7]}")
def test_matmul_nbits_prefill_on_both_gemm_paths(monkeypatch, gemm, config):
    """128 rows: with HIPEP_GEMM=auto the weights are dequantized into the workspace and cuBLASLt
    multiplies (A' from A's int8 codes at level 4); with `own`, hipep's GEMM. Both within the
    tolerances of the CPU EP and of the references."""
    monkeypatch.setenv("HIPEP_GEMM", gemm)
    k, n, bits, bs, zp_kind, bias, elem, level = config
    model, feeds, weights = matmul_nbits_model((1, 128), k, n, bits, bs, elem, zp_kind, bias, level, seed=k)
    got = run_gpu(model, feeds)
    zp = weights[2]
    assert rel_l2(got, cpu_session(model).run(None, feeds)[0]) < cpu_tolerance(elem, level, zp)
    attrs = {"K": k, "N": n, "bits": bits, "block_size": bs}
    if quantizes_a(level, zp):
        assert rel_l2(got, int8_reference(feeds, weights, attrs)) < 1e-5
    else:
        assert rel_l2(got, reference(feeds, weights, attrs)) < (1e-5 if elem == F32 else 2e-3)


@pytest.mark.parametrize("elem,level", [(F16, 0), (F32, 4)])
def test_matmul_nbits_prefill_at_the_1b_models_shapes(monkeypatch, elem, level):
    """A 128-token prompt through the ~1.1B model's gate projection (2048 -> 8192, block 32,
    symmetric), both GEMM paths against the CPU EP."""
    model, feeds, weights = matmul_nbits_model((1, 128), 2048, 8192, 4, 32, elem, "none", False, level, seed=3)
    want = cpu_session(model).run(None, feeds)[0]
    for gemm in ("auto", "own"):
        monkeypatch.setenv("HIPEP_GEMM", gemm)
        got = run_gpu(model, feeds, runs=2)
        assert rel_l2(got, want) < cpu_tolerance(elem, level, weights[2]), gemm
