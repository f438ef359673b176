"""kernels/matmul_nbits.hip and matmul_nbits_row.hip run on the CPU: g++ compiles the unchanged kernel source against the
host stand-in for the CUDA headers (tests/unit/host_cuda: a host thread per GPU thread, barriers
for __syncthreads and shuffles, dp4a and half2 arithmetic rounded as on the GPU, the launch's
dynamic shared memory), and the launches MatMulNBits' binding gives are run block by block, then
compared with the registry reference, which follows ORT's CPU EP. This checks the kernels' own
code where the numpy emulation (test_quant_kernels_emulated.py) checks the binding's launches: the
row GEMV's staging of A (int8 codes or half2 pairs), its dp4a and HFMA2 sums, the general GEMV and
the GEMM. Skipped without g++."""
from __future__ import annotations

import shutil

import ml_dtypes
import numpy as np
import pytest

from hipep.errors import HipepError
from hipep.ops.registry import OUTPUT_COUNT, REQUIRED, SINCE_VERSION, lookup
from hipep.runtime import gpu_kernels as gk
from hipep.runtime import gpu_quant as gq

from unit.host_kernels import HostMemory, compile_module, launch

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


@pytest.fixture(scope="module")
def matmul_nbits(tmp_path_factory):
    """The modules' libraries by name (the general GEMV and GEMM; the row GEMV; its tensor-core form,
    whose mma the host stand-in emulates)."""
    out = tmp_path_factory.mktemp("host_mnb")
    return {m: compile_module(out, m, 32) for m in ("matmul_nbits", "matmul_nbits_row", "matmul_nbits_tc")}


def _bind_case(m, k, n, bs, dtype, zp_kind, level, with_bias=False, seed=0, bits=4, a_scale=3.0, sm_count=132,
               tensor_cores=False, first_run=False, counters=None):
    """A random MatMulNBits case in host memory, bound: (ops, output view, the registry reference's
    output, inputs, attrs, the host memory, which must outlive the launches)."""
    from quant_helpers import quantize_blockwise

    rng = np.random.default_rng(seed)
    B, scales, zp = quantize_blockwise(rng.standard_normal((n, k)).astype(np.float32), bits, bs, zp_kind, rng)
    A = (rng.standard_normal((m, k)) * a_scale).astype(dtype)
    A[0, :bs] = 0  # an all-zero block of A: int8 scale 0, codes 0
    scales = scales.astype(dtype)
    if zp is not None and zp.dtype != np.uint8:
        zp = zp.astype(dtype)
    bias = rng.standard_normal(n).astype(dtype) if with_bias else None
    op = lookup("com.microsoft", "MatMulNBits")
    attrs = {**{a: v for a, v in op.attributes.items() if v is not REQUIRED},
             "K": k, "N": n, "bits": bits, "block_size": bs, "accuracy_level": level,
             OUTPUT_COUNT: 1, SINCE_VERSION: max(op.since_versions)}
    inputs = [A, B, scales.reshape(-1), zp, None, bias]
    want = op.reference(list(inputs), attrs)[0]
    mem = HostMemory()
    ins = [None if x is None else mem.put(x)[0] for x in inputs]
    out, got = mem.put(np.full(want.shape, np.nan, want.dtype))
    target = gk.Target(sm_count=sm_count, warp_size=32, scratch=lambda nbytes: 0,
                       workspace=lambda nbytes: mem.put(np.zeros(nbytes, np.uint8))[0].ptr, tensor_cores=tensor_cores,
                       first_run=first_run)
    if counters is not None:  # arrival counters, zero when handed out; each kept in `counters`
        def handed_out(nbytes):
            counters.append(mem.put(np.zeros(nbytes, np.uint8))[1])
            return counters[-1].ctypes.data

        target.counters = handed_out
    ops = gk.binding_for(gq.MNB).bind(ins, [gk.Arg(out.ptr, out.shape, out.dtype)], attrs, target)
    return ops, got, want, inputs, attrs, mem


def _run(lib, m, k, n, bs, dtype, zp_kind, level, with_bias=False, seed=0, sm_count=132, tensor_cores=False):
    ops, got, want, _, _, mem = _bind_case(m, k, n, bs, dtype, zp_kind, level, with_bias, seed, sm_count=sm_count,
                                           tensor_cores=tensor_cores)
    for o in ops:
        launch(lib[o.module], o)
    return got, want, [o.entry for o in ops]


@pytest.mark.parametrize("k,n,bs,dtype,zp_kind,level,with_bias,entry", [
    (256, 12, 32, np.float32, "none", 4, False, "hipep_mnb_gemv_row_q8_f32_b4_w3"),   # the builder's int4 form
    (320, 9, 64, np.float32, "uint8", 4, True, "hipep_mnb_gemv_row_q8_f32_b4_w3"),    # zero points, N % 8 != 0
    (192, 10, 32, ml_dtypes.bfloat16, "uint8", 4, False, "hipep_mnb_gemv_row_q8_bf16_b4_w3"),
    (256, 16, 128, np.float16, "uint8", 0, True, "hipep_mnb_gemv_row_h2_f16_b4_w3"),  # fp16 A: half2 pairs
    (200, 8, 32, np.float16, "none", 0, False, "hipep_mnb_gemv_row_h2_f16_b4_w3"),    # K past A's end in the last block
    (256, 12, 16, np.float32, "none", 4, False, "hipep_mnb_gemv_f32_b4_m1"),       # block 16: the general GEMV
])
def test_row_gemv_on_host(matmul_nbits, k, n, bs, dtype, zp_kind, level, with_bias, entry):
    got, want, entries = _run(matmul_nbits, 1, k, n, bs, dtype, zp_kind, level, with_bias)
    assert entries == [entry]
    tol = 1e-5 if dtype == np.float32 else (1e-2 if dtype == np.float16 else 2e-2)
    err = np.abs(got.astype(np.float64) - want.astype(np.float64)).max() / np.abs(want.astype(np.float64)).max()
    assert err < tol, (entry, err)


@pytest.mark.parametrize("k,n,bs,dtype,zp_kind,level,with_bias,entry", [
    (1024, 40, 32, np.float16, "none", 0, True, "hipep_mnb_gemv_row1_h2_f16_b4_u1"),      # one chunk a lane
    (2048, 44, 64, np.float16, "uint8", 0, False, "hipep_mnb_gemv_row1_h2_f16_b4_u2_zp"),  # two; packed zero points
    (4000, 36, 32, np.float16, "uint8", 0, True, "hipep_mnb_gemv_row1_h2_f16_b4_u4_zp"),   # four; K short of K_pad
    (200, 33, 32, np.float16, "none", 0, False, "hipep_mnb_gemv_row1_h2_f16_b4_u1"),       # K past A's end
    (2048, 32, 32, np.float16, "none", 0, False, "hipep_mnb_gemv_row_h2_f16_b4"),          # one wave: the tiled kernel
    (4160, 40, 32, np.float16, "none", 0, False, "hipep_mnb_gemv_row_h2_f16_b4"),          # past 4 chunks a lane
    (2048, 40, 32, np.float32, "none", 4, True, "hipep_mnb_gemv_row1_q8_f32_b4_u2"),       # the builder's int4 form
    (3072, 36, 128, np.float32, "uint8", 4, False, "hipep_mnb_gemv_row1_q8_f32_b4_u4_zp"),  # A blocks of 4 chunks
    (960, 33, 64, ml_dtypes.bfloat16, "uint8", 4, True, "hipep_mnb_gemv_row1_q8_bf16_b4_u1_zp"),
    (1536, 40, 256, np.float16, "none", 4, False, "hipep_mnb_gemv_row1_q8_f16_b4_u2"),      # block 256: 8 lanes a block
])
def test_row_gemv_past_one_wave_on_host(matmul_nbits, monkeypatch, k, n, bs, dtype, zp_kind, level, with_bias,
                                        entry):
    """One row past one wave of the tiled row GEMV's blocks (here 4 blocks on one SM): rows of one
    round of loads a lane take hipep_mnb_gemv_row1 with U = 1, 2 or 4 chunks a lane, its sums the
    tiled kernel's (the registry reference's tolerance as test_row_gemv_on_host's). One column a
    warp (HIPEP_MNB_GEMV_ROW_COLS=0; test_row_gemv_columns_a_warp_on_host has the other forms)."""
    monkeypatch.setattr(gq, "GEMV_ROW_COLS", 0)
    got, want, entries = _run(matmul_nbits, 1, k, n, bs, dtype, zp_kind, level, with_bias, sm_count=1)
    assert entries == [entry]
    tol = 1e-5 if dtype == np.float32 else (1e-2 if dtype == np.float16 else 2e-2)
    err = np.abs(got.astype(np.float64) - want.astype(np.float64)).max() / np.abs(want.astype(np.float64)).max()
    assert err < tol, (entry, err)


@pytest.mark.parametrize("dtype,level", [(np.float16, 0), (np.float32, 4)])
def test_row_gemv_variants_give_the_same_bits_on_host(matmul_nbits, monkeypatch, dtype, level):
    """The tiled row GEMV (one wave on 2 SMs), hipep_mnb_gemv_row1 (past a wave on one SM) and, for
    fp16 A, its form with four columns a warp on the same case: the same sums in the same order, so
    the same bits."""
    monkeypatch.setattr(gq, "GEMV_ROW_COLS", 0)
    tiled, _, entries_tiled = _run(matmul_nbits, 1, 2048, 40, 32, dtype, "uint8", level, True, seed=3, sm_count=2)
    lean, _, entries_lean = _run(matmul_nbits, 1, 2048, 40, 32, dtype, "uint8", level, True, seed=3, sm_count=1)
    assert "_row_" in entries_tiled[0] and "_row1_" in entries_lean[0]
    np.testing.assert_array_equal(lean, tiled)
    monkeypatch.setattr(gq, "GEMV_ROW_COLS", 1)
    cols, _, entries_cols = _run(matmul_nbits, 1, 2048, 40, 32, dtype, "uint8", level, True, seed=3, sm_count=1)
    if dtype == np.float16:
        assert entries_cols == ["hipep_mnb_gemv_row1_h2_f16_b4_u2_c4_s1_zp"]
        np.testing.assert_array_equal(cols, tiled)
    else:  # A quantized to int8 (q8) keeps one column a warp
        assert entries_cols == entries_lean


@pytest.mark.parametrize("k,n,bs,zp_kind,with_bias,sm_count,entry", [
    (2048, 44, 64, "uint8", False, 132, "hipep_mnb_gemv_row1_h2_f16_b4_u2_c4_s1_zp"),  # qkv and o: 4 columns
    (2048, 200, 32, "none", True, 1, "hipep_mnb_gemv_row1_h2_f16_b4_u2_c2_s1"),       # past a wave: 2 columns
    (4000, 37, 32, "uint8", True, 132, "hipep_mnb_gemv_row1_h2_f16_b4_u4_c2_s1_zp"),  # K short of K_pad, N odd
    (3000, 13, 64, "none", False, 132, "hipep_mnb_gemv_row1_h2_f16_b4_u4_c2_s1"),     # N past the last warp's pair
    (8192, 20, 32, "uint8", False, 132, "hipep_mnb_gemv_row1_h2_f16_b4_u2_c2_s4_zp"), # down: 4 warps a column
    (6000, 9, 32, "none", True, 132, "hipep_mnb_gemv_row1_h2_f16_b4_u2_c2_s4"),       # a last run of fewer chunks
])
def test_row_gemv_columns_a_warp_on_host(matmul_nbits, k, n, bs, zp_kind, with_bias, sm_count, entry):
    """fp16 rows of 2 to 8 warp-widths of chunks: several columns a warp (gpu_quant.row_cols_form),
    with four warps a column past 4 widths (the registry reference's tolerance)."""
    got, want, entries = _run(matmul_nbits, 1, k, n, bs, np.float16, zp_kind, 0, with_bias, sm_count=sm_count)
    assert entries == [entry]
    err = np.abs(got.astype(np.float64) - want.astype(np.float64)).max() / np.abs(want.astype(np.float64)).max()
    assert err < 1e-2, (entry, err)


@pytest.mark.parametrize("k,n,bs,zp_kind,with_bias,entry", [
    (4096, 40, 32, "none", True, "hipep_mnb_gemv_tc_f16_b32_u4_s8"),        # N past the last group's columns
    (2048, 44, 32, "uint8", False, "hipep_mnb_gemv_tc_f16_b32_u4_s4_zp"),   # packed zero points, chunk pairs
    (4000, 37, 64, "uint8", True, "hipep_mnb_gemv_tc_f16_bw_u4_s8_zp"),     # K short of K_pad; runs past K_pad
    (8192, 20, 128, "none", False, "hipep_mnb_gemv_tc_f16_bw_u4_s8"),       # two turns of the rounds' loop
    (256, 33, 32, "uint8", True, "hipep_mnb_gemv_tc_f16_b32_u4_s4_zp"),     # a short row: most chunks staged zeros
    (4000, 37, 32, "none", True, "hipep_mnb_gemv_row1_h2_f16_b4_u4_c2_s1"),  # block 32, odd blocks a row: no tc
])
def test_row_gemv_on_tensor_cores_on_host(matmul_nbits, monkeypatch, k, n, bs, zp_kind, with_bias, entry):
    """HIPEP_MNB_GEMV_TC=1 on a device with tensor cores: fp16 rows on mma.sync (the host stand-in's
    emulation), 16 columns a warp, against the registry reference (its tolerance) -- zero points
    through the chunk sums' sx, block 32's scale pairs and wider blocks' shared scale, tails of
    staged zeros."""
    monkeypatch.setattr(gq, "GEMV_ROW_TC", 1)
    got, want, entries = _run(matmul_nbits, 1, k, n, bs, np.float16, zp_kind, 0, with_bias, tensor_cores=True)
    assert entries == [entry]
    err = np.abs(got.astype(np.float64) - want.astype(np.float64)).max() / np.abs(want.astype(np.float64)).max()
    assert err < 1e-2, (entry, err)


@pytest.mark.parametrize("k,n,bs,zp_kind,with_bias,entry", [
    (4096, 40, 32, "none", True, "hipep_mnb_gemv_tc_bf16_b32_u4_s8"),
    (2048, 44, 32, "uint8", False, "hipep_mnb_gemv_tc_bf16_b32_u4_s4_zp"),
    (4000, 37, 64, "uint8", True, "hipep_mnb_gemv_tc_bf16_bw_u4_s8_zp"),
    (8192, 20, 128, "none", False, "hipep_mnb_gemv_tc_bf16_bw_u4_s8"),
    (256, 33, 32, "uint8", True, "hipep_mnb_gemv_tc_bf16_b32_u4_s4_zp"),
])
def test_bf16_row_gemv_on_tensor_cores_on_host(matmul_nbits, k, n, bs, zp_kind, with_bias, entry):
    """bf16 rows take the tensor-core form by default (HIPEP_MNB_GEMV_TC unset): halves 128 + q,
    the bf16 mma, off's 128. Its sums are f32 throughout, so it meets the registry reference within
    the output's own bf16 rounding (2^-8 of the largest output)."""
    got, want, entries = _run(matmul_nbits, 1, k, n, bs, ml_dtypes.bfloat16, zp_kind, 0, with_bias, tensor_cores=True)
    assert entries == [entry]
    err = np.abs(got.astype(np.float64) - want.astype(np.float64)).max() / np.abs(want.astype(np.float64)).max()
    assert err < 2 ** -8, (entry, err)


def test_tensor_core_form_needs_the_option_and_the_device(monkeypatch):
    """The tensor-core row GEMV runs fp16 rows only with HIPEP_MNB_GEMV_TC=1, bf16 rows unless it is
    0, and only on a device with tensor cores (Target.tensor_cores); A quantized to int8 (accuracy
    level 4) keeps the q8 kernels; bf16 without tensor cores the general GEMV."""
    bf16 = ml_dtypes.bfloat16
    for option, cores, dtype, level, entry in [
            (1, True, np.float16, 0, "hipep_mnb_gemv_tc_f16_b32_u4_s4"),
            (-1, True, np.float16, 0, "hipep_mnb_gemv_row1_h2_f16_b4_u2_c4_s1"),
            (0, True, np.float16, 0, "hipep_mnb_gemv_row1_h2_f16_b4_u2_c4_s1"),
            (1, False, np.float16, 0, "hipep_mnb_gemv_row1_h2_f16_b4_u2_c4_s1"),
            (1, True, np.float32, 4, "hipep_mnb_gemv_row_q8_f32_b4_w3"),
            (-1, True, bf16, 0, "hipep_mnb_gemv_tc_bf16_b32_u4_s4"),
            (1, True, bf16, 0, "hipep_mnb_gemv_tc_bf16_b32_u4_s4"),
            (0, True, bf16, 0, "hipep_mnb_gemv_bf16_b4_m1"),
            (-1, False, bf16, 0, "hipep_mnb_gemv_bf16_b4_m1"),
            (-1, True, bf16, 4, "hipep_mnb_gemv_row_q8_bf16_b4_w3")]:
        monkeypatch.setattr(gq, "GEMV_ROW_TC", option)
        ops = _bind_case(1, 2048, 64, 32, dtype, "none", level, tensor_cores=cores)[0]
        assert [o.entry for o in ops] == [entry], (option, cores, dtype, level)
        assert (ops[0].module == "matmul_nbits_tc") == ("_tc_" in entry)


@pytest.mark.parametrize("k,n,bs,zp_kind,with_bias,entry", [
    (2048, 40, 32, "none", True, "hipep_mnb_gemv_row1_h2_f16_b4_u1_s2"),        # the o projection's rows
    (8192, 20, 32, "uint8", False, "hipep_mnb_gemv_row1_h2_f16_b4_u4_s2_zp"),   # the down projection's
    (4000, 37, 32, "uint8", True, "hipep_mnb_gemv_row1_h2_f16_b4_u2_s2_zp"),    # K short of K_pad, N % 4 != 0
    (3000, 13, 64, "none", False, "hipep_mnb_gemv_row1_h2_f16_b4_u2_s2"),       # a last half of fewer chunks
])
def test_row_gemv_split_between_two_warps_on_host(matmul_nbits, monkeypatch, k, n, bs, zp_kind, with_bias, entry):
    """fp16 rows of several chunks a lane in a grid of at most half a wave (132 SMs), one column a
    warp (HIPEP_MNB_GEMV_ROW_COLS=0): two warps a column, their sums met in shared memory (the
    registry reference's tolerance)."""
    monkeypatch.setattr(gq, "GEMV_ROW_COLS", 0)
    got, want, entries = _run(matmul_nbits, 1, k, n, bs, np.float16, zp_kind, 0, with_bias)
    assert entries == [entry]
    err = np.abs(got.astype(np.float64) - want.astype(np.float64)).max() / np.abs(want.astype(np.float64)).max()
    assert err < 1e-2, (entry, err)


def test_row_gemv_long_k_tiles_on_host(matmul_nbits, monkeypatch):
    """K past one shared-memory tile: the row GEMV stages A tile by tile, a barrier between."""
    monkeypatch.setattr(gq, "GEMV_SMEM_BUDGET", 1024)  # 16 chunks (512 values) a tile for h2
    got, want, entries = _run(matmul_nbits, 1, 1536, 8, 64, np.float16, "none", 0)
    assert entries == ["hipep_mnb_gemv_row_h2_f16_b4_w3"]
    assert np.abs(got.astype(np.float64) - want).max() / np.abs(want.astype(np.float64)).max() < 1e-2


@pytest.mark.parametrize("m,level", [(3, 4), (3, 0), (40, 4), (40, 0)])
def test_general_gemv_and_gemm_on_host(matmul_nbits, m, level):
    got, want, entries = _run(matmul_nbits, m, 128, 24, 32, np.float32, "uint8", level, with_bias=True)
    assert entries[-1] == ("hipep_mnb_gemv_f32_b4_m4" if m <= 8 else "hipep_mnb_gemm_f32_b4")
    err = np.abs(got.astype(np.float64) - want).max() / np.abs(want.astype(np.float64)).max()
    assert err < 1e-5, (entries, err)


@pytest.fixture(scope="module")
def dequant_lib(tmp_path_factory):
    return compile_module(tmp_path_factory.mktemp("host_mnb_dq"), "matmul_nbits_dequant", 32)


@pytest.mark.parametrize("k,n,bits,bs,dtype,zp_kind,level,with_bias", [
    (256, 24, 4, 32, np.float32, "none", 4, True),      # the builder's CPU-target form: A' from int8 codes
    (200, 16, 4, 16, np.float32, "uint8", 0, False),    # K short of K_pad: the padding is not written
    (192, 12, 8, 64, np.float16, "uint8", 0, True),     # 8 bits, fp16 weights rounded once
    (160, 8, 4, 32, np.float16, "float", 0, False),     # float zero points
    (128, 8, 4, 32, ml_dtypes.bfloat16, "none", 0, True),
    (100, 8, 4, 16, np.float16, "none", 0, False),      # rows not 16-byte aligned: stored value by value
])
def test_prefill_through_the_blas_dequantizes_on_host(matmul_nbits, dequant_lib, monkeypatch, k, n, bits, bs, dtype,
                                                      zp_kind, level, with_bias):
    """Prefill rows with cuBLASLt at hand: the binding dequantizes B into the workspace as [N, K]
    (and, at level 4, A into A'), then hands cuBLASLt Y = A W^T + bias. The kernels run on the
    host; a numpy product stands in for cuBLASLt, reading the operands where the problem says."""
    import ctypes

    from hipep.runtime import cublaslt
    from hipep.runtime import gpu_linalg as gl

    calls = []

    def fake_blas(p, a, b, c, y, dt, target):
        calls.append((p, a, b, c, y))
        return ["blas"]

    monkeypatch.setattr(cublaslt, "status", lambda: (True, "stand-in"))
    monkeypatch.setattr(gl, "_blas_ops", fake_blas)
    m = 40
    ops, got, want, inputs, attrs, mem = _bind_case(m, k, n, bs, dtype, zp_kind, level, with_bias, seed=k + n, bits=bits,
                                               a_scale=2.0)
    A, B, scales, zp = inputs[:4]
    assert ops[-1] == "blas"
    entries = [o.entry for o in ops[:-1]]
    assert entries[0] == f"hipep_mnb_dequant_{gk._dt(A.dtype, 'A')}_b{bits}"
    assert len(entries) == (3 if level == 4 else 1)  # + A's block scales and A'
    for o in ops[:-1]:
        launch({"matmul_nbits": matmul_nbits["matmul_nbits"], "matmul_nbits_dequant": dequant_lib}[o.module], o)
    (p, a, b, c, y), = calls
    assert (p.m, p.n, p.k, p.a_sm, p.a_sk, p.b_sk, p.b_sn) == (m, n, k, k, 1, 1, k)
    assert p.has_c == with_bias and (not with_bias or (p.c_sm, p.c_sn, p.beta) == (0, 1, 1.0))

    def read(arg):
        count = int(np.prod(arg.shape))
        raw = (ctypes.c_uint8 * (count * arg.dtype.itemsize)).from_address(arg.ptr)
        return np.frombuffer(raw, arg.dtype).reshape(arg.shape).astype(np.float64)

    w = read(b)
    # W as the own GEMM forms it: (q - zp) * scale in f32, rounded once to A's type
    from hipep.ops.contrib_quant import _mnb_dequant, _mnb_unpack
    want_w = _mnb_dequant(*_mnb_unpack(B, scales, zp, attrs))[:, :k]
    np.testing.assert_allclose(w, want_w.astype(dtype).astype(np.float64), rtol=1e-6 if dtype == np.float32 else 1e-2)
    product = read(a) @ w.T + (read(c) if c is not None else 0.0)
    np.copyto(got, product.astype(want.dtype))
    tol = 1e-5 if dtype == np.float32 else (1e-2 if dtype == np.float16 else 2e-2)
    err = np.abs(got.astype(np.float64) - want.astype(np.float64)).max() / np.abs(want.astype(np.float64)).max()
    assert err < tol, err


def test_prefill_stays_on_the_own_gemm_where_the_blas_path_does_not_apply(monkeypatch):
    """HIPEP_GEMM=own, no cuBLASLt, f16 A at level 4, or a weight past MNB_BLAS_MAX_BYTES: the own GEMM."""
    from hipep.runtime import cublaslt

    def bind(dtype, level, env=None, cap=None):
        monkeypatch.setenv("HIPEP_GEMM", env or "auto")
        if cap is not None:
            monkeypatch.setattr(gq, "MNB_BLAS_MAX_BYTES", cap)
        ops = _bind_case(64, 128, 64, 32, dtype, "none", level)[0]
        return [getattr(o, "entry", o) for o in ops]

    from hipep.runtime import gpu_linalg as gl
    monkeypatch.setattr(gl, "_blas_ops", lambda *a: ["blas"])
    monkeypatch.setattr(cublaslt, "status", lambda: (True, "stand-in"))
    assert bind(np.float32, 4)[-1] == "blas"
    assert bind(np.float32, 4, env="own")[-1] == "hipep_mnb_gemm_f32_b4"
    assert bind(np.float16, 4)[-1] == "hipep_mnb_gemm_f16_b4"
    assert bind(np.float16, 0)[-1] == "blas"
    assert bind(np.float16, 0, cap=1024)[-1] == "hipep_mnb_gemm_f16_b4"
    monkeypatch.setattr(cublaslt, "status", lambda: (False, "not here"))
    assert bind(np.float16, 0)[-1] == "hipep_mnb_gemm_f16_b4"


# ---- the tensor-core GEMM for prompts (kernels/matmul_nbits_gemm_tc.hip) ---------------------------

@pytest.fixture(scope="module")
def gemm_tc_lib(tmp_path_factory):
    """kernels/matmul_nbits_gemm_tc.hip on the host (the stand-in emulates mma.sync)."""
    return compile_module(tmp_path_factory.mktemp("host_mnb_gtc"), "matmul_nbits_gemm_tc", 32)


@pytest.mark.parametrize("m,k,n,bs,dtype,zp_kind,with_bias,split", [
    (40, 256, 72, 32, np.float16, "none", True, None),         # N past one tile, rows short of one
    (130, 128, 64, 64, ml_dtypes.bfloat16, "uint8", False, None),  # three row tiles, packed zero points
    (24, 200, 16, 32, np.float16, "uint8", True, None),        # K short of K_pad, the last step half a chunk pair
    (20, 1088, 24, 32, np.float16, "float", False, None),      # 17 steps of K: two splits, their sums added
    (33, 1024, 40, 128, ml_dtypes.bfloat16, "none", True, 4),  # four splits, block 128
    (17, 512, 64, 32, np.float16, "none", False, 1),           # one split where two would be chosen
    (150, 320, 80, 32, np.float16, "none", True, 2),           # 3 row tiles, 5 steps in two splits, N past a tile
])
def test_tensor_core_gemm_on_host(gemm_tc_lib, monkeypatch, m, k, n, bs, dtype, zp_kind, with_bias, split):
    """Prompt rows of fp16 or bf16 A on a device with tensor cores: the weights dequantized in
    shared memory as the BLAS path's dequantization writes them ((q - zp) * scale rounded once to A's
    type), the products summed in f32 by the (emulated) mma, K split where the grid is small. The
    result is the f64 product of A and those weights to within Y's rounding, and ORT's (the registry
    reference's) to within the element type's precision."""
    from hipep.ops.contrib_quant import _mnb_dequant, _mnb_unpack

    if split is not None:
        monkeypatch.setenv(gq.GEMM_TC_SPLIT_ENV, str(split))
    ops, got, want, inputs, attrs, mem = _bind_case(m, k, n, bs, dtype, zp_kind, 0, with_bias, seed=m + k,
                                                     sm_count=132, tensor_cores=True)
    entries = [o.entry for o in ops]
    dt = gk._dt(np.dtype(dtype), "A")
    assert entries[0] == f"hipep_mnb_gemm_tc_{dt}_b4"
    splits = ops[0].grid[2]
    assert entries[1:] == ([f"hipep_mnb_gemm_tc_sum_{dt}"] if splits > 1 else [])
    if split is not None:
        assert splits == split
    elif (k, n) == (1088, 24):
        assert splits == 2
    for o in ops:
        launch(gemm_tc_lib, o)
    # With arrival counters (as the device's targets offer) the tile's last split adds the sums in
    # the same order: one launch, the same bits, the counters left zero for the next launch.
    counters: list = []
    one, got_one, *_, mem_one = _bind_case(m, k, n, bs, dtype, zp_kind, 0, with_bias, seed=m + k, sm_count=132,
                                           tensor_cores=True, counters=counters)
    assert [o.entry for o in one] == entries[:1] and (len(counters) == 1) == (splits > 1)
    for _ in range(2):  # twice: the counters must be zero again after the first
        got_one[...] = np.nan
        launch(gemm_tc_lib, one[0])
        assert got_one.tobytes() == got.tobytes() and all(not c.any() for c in counters)
    A, B, scales, zp, _, bias = inputs
    w = _mnb_dequant(*_mnb_unpack(B, scales, zp, attrs))[:, :k].astype(dtype).astype(np.float64)
    exact = A.astype(np.float64) @ w.T + (bias.astype(np.float64) if bias is not None else 0.0)
    scale = np.abs(exact).max()
    ulp = 2.0 ** -10 if dtype == np.float16 else 2.0 ** -7
    assert np.abs(got.astype(np.float64) - exact).max() <= ulp * scale
    tol = 1e-2 if dtype == np.float16 else 2e-2
    assert np.abs(got.astype(np.float64) - want.astype(np.float64)).max() / np.abs(want.astype(np.float64)).max() < tol


def test_tensor_core_gemm_takes_the_prompts_it_can(monkeypatch):
    """Which prompts take the tensor-core GEMM: more than 8 rows of fp16 or bf16 A with 4-bit weights
    in blocks of 32 or more, on a device with tensor cores, up to GEMM_TC_MAX_ROWS rows ahead of
    cuBLASLt and at any length where cuBLASLt is missing; HIPEP_MNB_GEMM_TC=1 takes every length,
    =0 none."""
    from hipep.runtime import cublaslt
    from hipep.runtime import gpu_linalg as gl

    monkeypatch.setattr(gl, "_blas_ops", lambda *a: ["blas"])
    monkeypatch.setattr(cublaslt, "status", lambda: (True, "stand-in"))

    def last(m, dtype=np.float16, bs=32, level=0, cores=True, k=128, bits=4):
        ops = _bind_case(m, k, 64, bs, dtype, "none", level, tensor_cores=cores, bits=bits)[0]
        return getattr(ops[-1], "entry", ops[-1]).replace("hipep_mnb_", "")

    assert last(40) == "gemm_tc_f16_b4"
    assert last(40, ml_dtypes.bfloat16) == "gemm_tc_bf16_b4"
    assert last(gq.GEMM_TC_MAX_ROWS) == "gemm_tc_f16_b4"
    assert last(8).startswith("gemv")
    assert last(gq.GEMM_TC_MAX_ROWS + 1) == "blas"
    assert last(40, cores=False) == "blas"
    assert last(40, bs=16) == "blas"
    assert last(40, bits=8) == "blas"
    assert last(40, k=100) == "blas"                      # rows of A not 16-byte aligned
    assert last(40, np.float32) == "blas"
    assert last(40, level=4) == "gemm_f16_b4"             # A quantized to int8: the own GEMM
    monkeypatch.setenv(gq.GEMM_TC_ENV, "1")
    assert last(gq.GEMM_TC_MAX_ROWS + 1) == "gemm_tc_f16_b4"
    monkeypatch.setenv(gq.GEMM_TC_ENV, "0")
    assert last(40) == "blas"
    monkeypatch.setenv(gq.GEMM_TC_ENV, "")
    monkeypatch.setattr(cublaslt, "status", lambda: (False, "not here"))
    assert last(gq.GEMM_TC_MAX_ROWS + 1) == "gemm_tc_f16_b4"
    monkeypatch.setenv(gq.GEMM_TC_ENV, "yes")
    with pytest.raises(HipepError, match="HIPEP_MNB_GEMM_TC='yes'"):
        last(40)


def test_a_first_run_takes_the_tensor_core_gemm_where_cublaslt_would_run(monkeypatch):
    """A prompt length's first run (Target.first_run) binds the tensor-core GEMM, marked provisional,
    where cuBLASLt would take the product (up to GEMM_TC_FIRST_RUN_ROWS rows, which
    HIPEP_MNB_GEMM_TC_FIRST_RUN_ROWS sets; 0 turns it off), so the first run plans nothing and loads
    no library kernel; the same product bound for any other run takes cuBLASLt. Where cuBLASLt would
    not run, or the tensor-core GEMM cannot, the first run binds as every other run."""
    from hipep.runtime import cublaslt
    from hipep.runtime import gpu_linalg as gl

    monkeypatch.setattr(gl, "_blas_ops", lambda *a: ["blas"])
    monkeypatch.setattr(cublaslt, "status", lambda: (True, "stand-in"))

    def bound(m, first_run=True, dtype=np.float16, cores=True):
        ops = _bind_case(m, 128, 64, 32, dtype, "none", 0, tensor_cores=cores, first_run=first_run)[0]
        return [(getattr(o, "entry", o).replace("hipep_mnb_", ""), getattr(o, "provisional", None)) for o in ops]

    past = gq.GEMM_TC_MAX_ROWS + 1
    assert bound(past) == [("gemm_tc_f16_b4", True)]
    assert bound(gq.GEMM_TC_FIRST_RUN_ROWS) == [("gemm_tc_f16_b4", True)]
    assert bound(past, first_run=False) == [("dequant_f16_b4", False), ("blas", None)]
    assert bound(gq.GEMM_TC_FIRST_RUN_ROWS + 1)[-1] == ("blas", None)
    assert bound(40) == [("gemm_tc_f16_b4", False)]               # its own rows: not provisional
    assert bound(past, cores=False)[-1] == ("blas", None)
    assert bound(past, dtype=np.float32)[-1] == ("blas", None)
    monkeypatch.setenv(gq.GEMM_TC_FIRST_RUN_ENV, "100")
    assert bound(100) == [("gemm_tc_f16_b4", True)] and bound(101)[-1] == ("blas", None)
    monkeypatch.setenv(gq.GEMM_TC_FIRST_RUN_ENV, "0")
    assert bound(past)[-1] == ("blas", None)
    monkeypatch.setenv(gq.GEMM_TC_FIRST_RUN_ENV, "many")
    with pytest.raises(HipepError, match="HIPEP_MNB_GEMM_TC_FIRST_RUN_ROWS='many'"):
        bound(past)
    monkeypatch.delenv(gq.GEMM_TC_FIRST_RUN_ENV)
    monkeypatch.setenv("HIPEP_GEMM", "blas")                       # cuBLASLt for every product, first runs too
    assert bound(past)[-1] == ("blas", None)
    monkeypatch.delenv("HIPEP_GEMM")
    monkeypatch.setenv(gq.GEMM_TC_ENV, "0")
    assert bound(past)[-1] == ("blas", None)
    monkeypatch.setenv(gq.GEMM_TC_ENV, "")
    monkeypatch.setattr(cublaslt, "status", lambda: (False, "not here"))
    assert bound(past) == [("gemm_tc_f16_b4", False)]            # no cuBLASLt: the tensor cores for good


def test_tensor_core_gemm_splits():
    """K splits: doubled while the grid has under two blocks an SM and each split keeps 8 steps."""
    assert gq.gemm_tc_splits(64, 32, 132) == 4      # 128 rows, N = K = 2048
    assert gq.gemm_tc_splits(64, 128, 132) == 4     # the down projection, K = 8192: at most 4
    assert gq.gemm_tc_splits(512, 32, 132) == 1     # gate and up: tiles enough
    assert gq.gemm_tc_splits(1, 15, 132) == 1       # too short a K to split
    assert gq.gemm_tc_splits(1, 16, 132) == 2
