"""com.microsoft MultiHeadAttention and ai.onnx Attention's GPU launches (hipep/runtime/gpu_attention_ops.py,
kernels/attention_mha.hip) run on the CPU: g++ compiles the unchanged kernel source against the host
stand-in for the CUDA headers (tests/unit/host_cuda), the launches the bindings give run block by block
over host memory, and every output is compared with the registry reference (hipep/ops/attention.py).
Shapes are small (each GPU thread is a host thread) but cover the kernel's tails: several query and
key tiles, head sizes that are not multiples of 4 and a V head size of its own, each variant (head
sizes up to 64, 128 and 256), grouped heads, both layouts, past + new keys, causal masking, bool and
additive masks broadcast over batch and heads, fully masked rows, MultiHeadAttention's bias and
key_padding_mask, Attention-24/25's nonpad_kv_seqlen (an external cache) and its fault report,
Attention's qk_matmul_output in each mode. Also
what the checks refuse (the claim step's answers). Skipped without g++."""
from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest

from hipep.errors import HipepError
from hipep.ops.registry import OUTPUT_COUNT, SINCE_VERSION
from hipep.runtime import gpu_faults as gf
from hipep.runtime import gpu_kernels as gk
from hipep.runtime.gpu_attention_ops import MASK_ADD, MASK_BOOL, MhaArgs, mha_layout

from unit.host_kernels import HostMemory, compile_module, launch, run_on_host

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")

F32, F16 = np.float32, np.float16
MHA = "com.microsoft::MultiHeadAttention"
ATTN = "::Attention"


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    return {"warp": 32, "attention_mha": compile_module(tmp_path_factory.mktemp("mha"), "attention_mha", 32)}


@pytest.fixture(scope="module")
def libraries64(tmp_path_factory):
    """64-lane warps, as AMD's CDNA GPUs run the kernel."""
    return {"warp": 64, "attention_mha": compile_module(tmp_path_factory.mktemp("mha64"), "attention_mha", 64)}


def _tol(dtype):
    # ai.onnx Attention in f16 rounds its scores and probabilities to f16 on the CPU EP; the kernel keeps f32
    return dict(rtol=1e-5, atol=2e-6) if dtype == F32 else dict(rtol=2e-2, atol=4e-3)


def _check(libs, op_key, inputs, attrs, n_out, dtype):
    got, want, ops = run_on_host(libs, op_key, inputs, attrs, n_out=n_out)
    assert ops, "the binding gave no launch"
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, k
        np.testing.assert_allclose(g.astype(F32), w.astype(F32), err_msg=f"output {k}", **_tol(dtype))
    return ops


def _mha_args(op) -> MhaArgs:
    """The kernel arguments among a launch's parameters."""
    return next(p for p in op.params if isinstance(p, MhaArgs))


def _rand(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


# ---- MultiHeadAttention ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16])
def test_mha_plain_separate_qkv(libraries, dtype):
    rng = np.random.default_rng(1)
    b, s, l, n, h = 2, 5, 7, 2, 8
    q, k, v = _rand(rng, (b, s, n * h), dtype), _rand(rng, (b, l, n * h), dtype), _rand(rng, (b, l, n * h), dtype)
    ops = _check(libraries, MHA, [q, k, v], {"num_heads": n}, 3, dtype)
    assert [o.entry for o in ops] == [f"hipep_mha_present_{'f32' if dtype == F32 else 'f16'}",
                                      f"hipep_mha_{'f32' if dtype == F32 else 'f16'}_h64"]


@pytest.mark.parametrize("dtype", [F32, F16])
def test_mha_bias_padding_attention_bias_past_unidirectional(libraries, dtype):
    rng = np.random.default_rng(2)
    b, s, l, p, n, h, hv = 2, 4, 4, 3, 2, 12, 6
    q, k = _rand(rng, (b, s, n * h), dtype), _rand(rng, (b, l, n * h), dtype)
    v = _rand(rng, (b, l, n * hv), dtype)
    bias = _rand(rng, (2 * n * h + n * hv,), dtype, 0.5)
    pad = np.ones((b, p + l), np.int32)
    pad[1, :2] = 0
    pad[0, -1] = 0
    attn_bias = _rand(rng, (1, n, s, p + l), dtype)
    pk, pv = _rand(rng, (b, n, p, h), dtype), _rand(rng, (b, n, p, hv), dtype)
    inputs = [q, k, v, bias, pad, attn_bias, pk, pv]
    _check(libraries, MHA, inputs, {"num_heads": n, "unidirectional": 1}, 3, dtype)
    _check(libraries, MHA, inputs, {"num_heads": n, "scale": 0.3, "mask_filter_value": -50.0}, 3, dtype)


def test_mha_row_padded_everywhere_averages_v(libraries):
    rng = np.random.default_rng(3)
    b, s, l, n, h = 2, 3, 5, 1, 8
    q, k, v = _rand(rng, (b, s, n * h), F32), _rand(rng, (b, l, n * h), F32), _rand(rng, (b, l, n * h), F32)
    pad = np.ones((b, l), np.int32)
    pad[1] = 0
    _check(libraries, MHA, [q, k, v, None, pad], {"num_heads": n}, 3, F32)


def test_mha_long_sequence_several_tiles(libraries64):
    rng = np.random.default_rng(4)
    b, s, l, n, h = 1, 37, 41, 2, 16
    q, k, v = _rand(rng, (b, s, n * h), F32), _rand(rng, (b, l, n * h), F32), _rand(rng, (b, l, n * h), F32)
    _check(libraries64, MHA, [q, k, v], {"num_heads": n, "unidirectional": 1}, 1, F32)


# ---- ai.onnx Attention ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16])
def test_attention_4d_grouped_causal_past_bool_mask(libraries, dtype):
    rng = np.random.default_rng(5)
    b, nq, nkv, s, l, p, h = 2, 4, 2, 6, 6, 4, 16
    q, k, v = _rand(rng, (b, nq, s, h), dtype), _rand(rng, (b, nkv, l, h), dtype), _rand(rng, (b, nkv, l, h), dtype)
    pk, pv = _rand(rng, (b, nkv, p, h), dtype), _rand(rng, (b, nkv, p, h), dtype)
    mask = rng.uniform(size=(s, p + l)) > 0.3
    mask[:, 0] = True
    ops = _check(libraries, ATTN, [q, k, v, mask, pk, pv], {"is_causal": 1}, 3, dtype)
    assert _mha_args(ops[-1]).mask_kind == MASK_BOOL and _mha_args(ops[-1]).group == 2
    _check(libraries, ATTN, [q, k, v, None, pk, pv], {"is_causal": 1}, 3, dtype)  # bottom-right causal


@pytest.mark.parametrize("dtype", [F32, F16])
def test_attention_3d_additive_mask_softcap_scale_dead_rows(libraries, dtype):
    rng = np.random.default_rng(6)
    b, n, s, l, h = 2, 3, 5, 9, 8
    q, k, v = _rand(rng, (b, s, n * h), dtype), _rand(rng, (b, l, n * h), dtype), _rand(rng, (b, l, n * h), dtype)
    mask = _rand(rng, (b, 1, s, l), dtype)
    mask[0, 0, 1, :] = -np.inf  # every key masked: zeros
    mask[1, 0, 2, 3:] = -np.inf
    attrs = {"q_num_heads": n, "kv_num_heads": n, "softcap": 2.0, "scale": 0.4}
    ops = _check(libraries, ATTN, [q, k, v, mask], attrs, 1, dtype)
    assert _mha_args(ops[-1]).mask_kind == MASK_ADD and len(ops) == 1  # no present kept: one launch
    bmask = np.ones((n, s, l), bool)
    bmask[1, 3, :] = False  # every key masked: zeros (ORT's CPU kernel)
    _check(libraries, ATTN, [q, k, v, bmask], {"q_num_heads": n, "kv_num_heads": n}, 1, dtype)


def test_attention_3d_grouped_decode_step(libraries):
    rng = np.random.default_rng(7)
    b, nq, nkv, p, h = 2, 4, 1, 11, 24
    q = _rand(rng, (b, 1, nq * h), F16)
    k, v = _rand(rng, (b, 1, nkv * h), F16), _rand(rng, (b, 1, nkv * h), F16)
    pk, pv = _rand(rng, (b, nkv, p, h), F16), _rand(rng, (b, nkv, p, h), F16)
    _check(libraries, ATTN, [q, k, v, None, pk, pv], {"q_num_heads": nq, "kv_num_heads": nkv, "is_causal": 1}, 3,
           F16)


def test_attention_grouped_rows_span_several_tiles(libraries):
    """8 query heads per KV head: a block's 32 rows are 4 tokens x 8 heads, the causal range per tile."""
    rng = np.random.default_rng(9)
    b, nq, nkv, s, p, h = 1, 16, 2, 9, 5, 8
    q, k, v = _rand(rng, (b, nq, s, h), F32), _rand(rng, (b, nkv, s, h), F32), _rand(rng, (b, nkv, s, h), F32)
    pk, pv = _rand(rng, (b, nkv, p, h), F32), _rand(rng, (b, nkv, p, h), F32)
    mask = _rand(rng, (b, nq, s, p + s), F32)
    ops = _check(libraries, ATTN, [q, k, v, mask, pk, pv], {"is_causal": 1}, 3, F32)
    assert ops[-1].grid == (3, nkv, b)


@pytest.mark.parametrize("h,hv,bucket", [(72, 40, 128), (130, 256, 256)])
def test_attention_larger_heads_and_their_variants(libraries, h, hv, bucket):
    rng = np.random.default_rng(8)
    b, n, s, l = 1, 1, 3 if bucket == 256 else 33, 19
    q, k, v = _rand(rng, (b, n, s, h), F32), _rand(rng, (b, n, l, h), F32), _rand(rng, (b, n, l, hv), F32)
    ops = _check(libraries, ATTN, [q, k, v], {"is_causal": 1}, 3, F32)
    assert ops[-1].entry == f"hipep_mha_f32_h{bucket}"


# ---- Attention-25: left / right windows, masks broadcast over queries or holding fewer keys ----------

@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("causal,left,right", [(1, 2, -1), (0, 1, 2), (0, 0, 0), (0, -1, 1), (1, 0, 3)])
def test_attention_window_with_past_grouped_heads(libraries, dtype, causal, left, right):
    rng = np.random.default_rng(10)
    b, nq, nkv, s, l, p, h = 2, 4, 2, 5, 5, 6, 16
    q, k, v = _rand(rng, (b, nq, s, h), dtype), _rand(rng, (b, nkv, l, h), dtype), _rand(rng, (b, nkv, l, h), dtype)
    pk, pv = _rand(rng, (b, nkv, p, h), dtype), _rand(rng, (b, nkv, p, h), dtype)
    attrs = {"is_causal": causal, "left_window_size": left, "right_window_size": right}
    ops = _check(libraries, ATTN, [q, k, v, None, pk, pv], attrs, 3, dtype)
    a = _mha_args(ops[-1])
    assert (a.left_window, a.right_window) == (left, right)


def test_attention_window_skips_key_tiles_of_a_long_sequence(libraries64):
    """A left window of 5 over 90 keys: later row tiles start past the first key tiles (tile_lo)."""
    rng = np.random.default_rng(11)
    b, n, s, h = 1, 2, 90, 8
    q, k, v = _rand(rng, (b, n, s, h), F32), _rand(rng, (b, n, s, h), F32), _rand(rng, (b, n, s, h), F32)
    _check(libraries64, ATTN, [q, k, v], {"is_causal": 1, "left_window_size": 5}, 1, F32)
    _check(libraries64, ATTN, [q, k, v], {"left_window_size": 3, "right_window_size": 4}, 1, F32)


@pytest.mark.parametrize("dtype", [F32, F16])
def test_attention_window_3d_mqa_and_rows_with_no_key(libraries, dtype):
    """More queries than keys: the window of the last queries lies past the keys, so those rows
    attend nothing and come out as zeros."""
    rng = np.random.default_rng(12)
    b, nq, nkv, s, l, h, hv = 2, 4, 1, 7, 3, 8, 6
    q = _rand(rng, (b, s, nq * h), dtype)
    k, v = _rand(rng, (b, l, nkv * h), dtype), _rand(rng, (b, l, nkv * hv), dtype)
    attrs = {"q_num_heads": nq, "kv_num_heads": nkv, "left_window_size": 1, "right_window_size": 0}
    got, want, _ = run_on_host(libraries, ATTN, [q, k, v], attrs, n_out=1)
    assert not want[0][:, 4:].any() and want[0][:, :4].all()  # rows 4.. see no key
    np.testing.assert_allclose(got[0].astype(F32), want[0].astype(F32), **_tol(dtype))


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("shape", [(9,), (1, 9), (1, 6), (3, 5, 7), (2, 1, 1, 9), (2, 3, 5, 1)])
def test_attention_25_masks_broadcast_over_queries_or_hold_fewer_keys(libraries, dtype, shape):
    rng = np.random.default_rng(13)
    b, n, s, l, h = 2, 3, 5, 9, 8
    q, k, v = _rand(rng, (b, n, s, h), dtype), _rand(rng, (b, n, l, h), dtype), _rand(rng, (b, n, l, h), dtype)
    bool_mask = rng.uniform(size=shape) > 0.3
    ops = _check(libraries, ATTN, [q, k, v, bool_mask], {"is_causal": 1, "left_window_size": 4}, 1, dtype)
    assert _mha_args(ops[-1]).mask_keys == shape[-1]
    _check(libraries, ATTN, [q, k, v, _rand(rng, shape, dtype)], {"right_window_size": 2}, 1, dtype)


def test_attention_before_25_keeps_its_masks_and_sentinel(libraries):
    rng = np.random.default_rng(14)
    b, n, s, l, h = 1, 2, 4, 6, 8
    q, k, v = _rand(rng, (b, n, s, h), F32), _rand(rng, (b, n, l, h), F32), _rand(rng, (b, n, l, h), F32)
    mask = rng.uniform(size=(s, l)) > 0.3
    ops = _check(libraries, ATTN, [q, k, v, mask], {"is_causal": 1, SINCE_VERSION: 23}, 1, F32)
    assert _mha_args(ops[-1]).lowest == float(np.finfo(F32).min)
    ops = _check(libraries, ATTN, [q, k, v, mask], {"is_causal": 1}, 1, F32)
    assert _mha_args(ops[-1]).lowest == -np.inf
    with pytest.raises(HipepError, match="rank 1"):
        run_on_host(libraries, ATTN, [q, k, v, mask[0]], {SINCE_VERSION: 24})
    with pytest.raises(HipepError, match=r"more keys than total_sequence 6"):
        run_on_host(libraries, ATTN, [q, k, v, np.ones((s, l + 1), bool)], {})


# ---- nonpad_kv_seqlen: an external cache ----------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("layout4", [True, False])
@pytest.mark.parametrize("attrs", [{}, {"is_causal": 1}, {"is_causal": 1, "left_window_size": 3},
                                   {"left_window_size": 2, "right_window_size": 1}])
def test_attention_external_cache_valid_keys_per_batch_entry(libraries, dtype, layout4, attrs):
    """Each batch entry attends its first nonpad[b] keys, its queries placed at nonpad[b] - S: a full
    cache, a short one, one with fewer valid keys than queries (rows before the first key see
    nothing under the causal frontier) and an empty one."""
    rng = np.random.default_rng(21)
    b, nq, nkv, s, cap, h = 4, 4, 2, 3, 13, 8
    nonpad = np.array([13, 6, 2, 0], np.int64)
    if layout4:
        q, k, v = (_rand(rng, (b, n, x, h), dtype) for n, x in ((nq, s), (nkv, cap), (nkv, cap)))
        attrs = dict(attrs)
    else:
        q, k, v = (_rand(rng, (b, x, n * h), dtype) for n, x in ((nq, s), (nkv, cap), (nkv, cap)))
        attrs = {**attrs, "q_num_heads": nq, "kv_num_heads": nkv}
    ops = _check(libraries, ATTN, [q, k, v, None, None, None, nonpad], attrs, 1, dtype)
    assert ops[-1].params[9].value != 0  # the kernel reads the counts


@pytest.mark.parametrize("dtype", [F32, F16])
def test_attention_external_cache_with_a_mask_and_a_long_cache(libraries64, dtype):
    """A bool mask shorter than the cache (Attention-25) and a cache of several key tiles, a
    decode step (one query) against prefill-sized counts."""
    rng = np.random.default_rng(22)
    b, n, cap, h = 2, 2, 70, 16
    for s, nonpad in ((1, [70, 41]), (5, [9, 64])):
        q, k, v = _rand(rng, (b, n, s, h), dtype), _rand(rng, (b, n, cap, h), dtype), _rand(rng, (b, n, cap, h), dtype)
        mask = rng.uniform(size=(1, 1, s, 50)) > 0.2
        _check(libraries64, ATTN, [q, k, v, mask, None, None, np.array(nonpad, np.int64)],
               {"is_causal": 1}, 1, dtype)
        _check(libraries64, ATTN, [q, k, v, None, None, None, np.array(nonpad, np.int64)],
               {"is_causal": 1, "left_window_size": 7, SINCE_VERSION: 25}, 1, dtype)


@pytest.mark.parametrize("bad", [14, -1])
def test_attention_external_cache_count_out_of_range_is_reported(libraries, bad):
    """A count past the keys goes to the stream's fault record, named for the node; the kernel
    clamps it, reads nothing past K and V, and the other batch entries come out right."""
    rng = np.random.default_rng(23)
    b, n, s, cap, h = 2, 2, 1, 13, 8
    q, k, v = _rand(rng, (b, n, s, h), F32), _rand(rng, (b, n, cap, h), F32), _rand(rng, (b, n, cap, h), F32)
    good = np.array([5, 7], np.int64)
    mem = HostMemory()
    record = mem.put(np.zeros(gf.FAULT_RECORD_BYTES, np.uint8))[0].ptr
    sites = gf.FaultSites()
    label = "node 'attention' (Attention)"
    ins = [mem.put(x)[0] for x in (q, k, v)] + [None, None, None, mem.put(np.array([bad, 7], np.int64))[0]]
    out, view = mem.put(np.full((b, n, s, h), np.nan, F32))
    target = gk.Target(sm_count=132, warp_size=32, fault=lambda w: gf.FaultSite(record, sites.site(label, w)))
    attrs = {"is_causal": 1, "softmax_precision": 0, "scale": None, "softcap": 0.0, "qk_matmul_output_mode": 0,
             OUTPUT_COUNT: 1, SINCE_VERSION: 25}
    for op in gk.binding_for(ATTN).bind(ins, [gk.Arg(out.ptr, out.shape, out.dtype)], attrs, target):
        launch(libraries[op.module], op)
    error = gf.take_fault(record, sites)
    assert isinstance(error, gf.RangeFault)
    assert str(error) == (f"{label}: input 6 (nonpad_kv_seqlen): {bad} valid keys is out of range [0, 13]: a batch "
                          f"entry has at most the 13 keys of K and V")
    assert gf.take_fault(record, sites) is None  # cleared
    assert np.isfinite(view).all()
    got, want, _ = run_on_host(libraries, ATTN, [q, k, v, None, None, None, good], {"is_causal": 1}, n_out=1)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=2e-6)
    np.testing.assert_array_equal(view[1], got[0][1])  # the good entry as with good counts


def test_attention_external_cache_checks_its_shape(libraries):
    rng = np.random.default_rng(24)
    q, k, v = _rand(rng, (2, 2, 1, 8), F32), _rand(rng, (2, 2, 6, 8), F32), _rand(rng, (2, 2, 6, 8), F32)
    mem = HostMemory()
    ins = [mem.put(x)[0] for x in (q, k, v)] + [None, None, None, mem.put(np.array([1, 2, 3], np.int64))[0]]
    out = mem.put(np.zeros((2, 2, 1, 8), F32))[0]
    attrs = {"is_causal": 1, "softmax_precision": 0, "softcap": 0.0, OUTPUT_COUNT: 1, SINCE_VERSION: 24}
    with pytest.raises(HipepError, match=r"nonpad_kv_seqlen must be int64 \[batch\] = \[2\] without past_key, got "
                                         r"int64 \[3\]"):
        gk.binding_for(ATTN).bind(ins, [gk.Arg(out.ptr, out.shape, out.dtype)], attrs, gk.Target())


# ---- ai.onnx Attention's qk_matmul_output ---------------------------------------------------------

def _scores_tol(dtype):
    # each stage rounded to f16 as the reference: a product summed in another order may round one
    # f16 ulp away
    return dict(rtol=1e-5, atol=2e-6) if dtype == F32 else dict(rtol=2e-3, atol=2e-3)


def _check_scores(libs, inputs, attrs, dtype):
    got, want, ops = run_on_host(libs, ATTN, inputs, attrs, n_out=4)
    assert ops[-1].entry == f"hipep_attention_scores_{'f32' if dtype == F32 else 'f16'}"
    np.testing.assert_allclose(got[0].astype(F32), want[0].astype(F32), err_msg="Y", **_tol(dtype))
    assert got[3].shape == want[3].shape and got[3].dtype == want[3].dtype
    np.testing.assert_allclose(got[3].astype(F32), want[3].astype(F32), err_msg="qk_matmul_output",
                               **_scores_tol(dtype))
    return got[3], want[3]


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_attention_scores_4d_grouped_past_bool_mask(libraries, dtype, mode):
    rng = np.random.default_rng(31)
    b, nq, nkv, s, l, p, h = 2, 4, 2, 3, 5, 4, 12
    q, k, v = _rand(rng, (b, nq, s, h), dtype), _rand(rng, (b, nkv, l, h), dtype), _rand(rng, (b, nkv, l, h), dtype)
    pk, pv = _rand(rng, (b, nkv, p, h), dtype), _rand(rng, (b, nkv, p, h), dtype)
    mask = rng.uniform(size=(s, p + l)) > 0.3
    mask[:, 0] = True
    mask[1, :] = False  # a row with no key: its softmax is zeros
    attrs = {"qk_matmul_output_mode": mode, SINCE_VERSION: 24}
    got, _ = _check_scores(libraries, [q, k, v, mask, pk, pv], attrs, dtype)
    if mode == 3:
        assert (got[:, :, 1] == 0).all()
    if mode == 2:  # excluded keys hold the lowest finite value before Attention-25
        assert (got[:, :, 1] == np.finfo(dtype).min).all()
    # causal: the scores before the mask (modes 0 and 3 are claimed with is_causal before 25)
    if mode in (0, 3):
        _check_scores(libraries, [q, k, v, None, pk, pv], {**attrs, "is_causal": 1}, dtype)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_attention_scores_3d_additive_mask_softcap(libraries, dtype, mode):
    rng = np.random.default_rng(32)
    b, n, s, l, h = 2, 3, 4, 7, 8
    q, k, v = _rand(rng, (b, s, n * h), dtype), _rand(rng, (b, l, n * h), dtype), _rand(rng, (b, l, n * h), dtype)
    mask = _rand(rng, (b, 1, s, l), dtype)
    attrs = {"q_num_heads": n, "kv_num_heads": n, "qk_matmul_output_mode": mode, SINCE_VERSION: 23}
    _check_scores(libraries, [q, k, v, mask], {**attrs, "softcap": 1.5, "scale": 0.6}, dtype)
    _check_scores(libraries, [q, k, v, mask], attrs, dtype)  # the mask folded into the product (modes 2, 3)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_attention_25_scores_causal_window_short_mask_external_cache(libraries, dtype, mode):
    rng = np.random.default_rng(33)
    b, n, s, cap, h = 2, 2, 2, 9, 8
    q, k, v = _rand(rng, (b, n, s, h), dtype), _rand(rng, (b, n, cap, h), dtype), _rand(rng, (b, n, cap, h), dtype)
    attrs = {"qk_matmul_output_mode": mode, "is_causal": 1, "left_window_size": 3, SINCE_VERSION: 25}
    got, _ = _check_scores(libraries, [q, k, v, np.ones(6, bool)], attrs, dtype)
    if mode >= 2:  # Attention-25 excludes with -inf
        assert np.isneginf(got[..., 6:]).all() if mode == 2 else (got[..., 6:] == 0).all()
    nonpad = np.array([4, 9], np.int64)
    _check_scores(libraries, [q, k, v, None, None, None, nonpad], attrs, dtype)


# ---- launch shapes and the claim step's answers ---------------------------------------------------

def test_layout_windows_and_masks_broadcast_over_queries():
    lay = mha_layout(batch=2, seq=5, heads=4, kv_heads=2, head_size=8, v_head_size=8, new_keys=3, past=4,
                     layout4=True, mask_shape=(2, 1, 1, 6), mask_kind=MASK_BOOL, scale=0.5, window=(2, 0))
    a = lay.args
    assert (a.m_sb, a.m_sh, a.m_ss, a.mask_keys) == (6, 0, 0, 6)
    assert (a.left_window, a.right_window) == (2, 0)
    # bounds no key lies beyond are unbounded (and position + bound stays within int)
    a = mha_layout(batch=1, seq=5, heads=1, kv_heads=1, head_size=8, v_head_size=8, new_keys=3, past=4,
                   layout4=True, scale=0.5, window=(9, 2 ** 40)).args
    assert (a.left_window, a.right_window, a.mask_keys) == (-1, -1, 7)


def test_layout_strides_for_both_layouts():
    a3 = mha_layout(batch=2, seq=5, heads=4, kv_heads=2, head_size=8, v_head_size=16, new_keys=7, past=3,
                    layout4=False, scale=0.5).args
    assert (a3.q_sb, a3.q_sh, a3.q_ss) == (5 * 32, 8, 32) and (a3.k_sb, a3.k_sh, a3.k_ss) == (7 * 16, 8, 16)
    assert (a3.o_sb, a3.o_sh, a3.o_ss) == (5 * 64, 16, 64) and a3.total == 10 and a3.group == 2
    lay = mha_layout(batch=2, seq=5, heads=4, kv_heads=2, head_size=8, v_head_size=16, new_keys=7, past=0,
                     layout4=True, mask_shape=(1, 4, 5, 7), mask_kind=MASK_ADD, scale=0.5)
    a4 = lay.args
    assert (a4.q_sb, a4.q_sh, a4.q_ss) == (4 * 5 * 8, 5 * 8, 8)
    assert (a4.v_sb, a4.v_sh, a4.v_ss) == (2 * 7 * 16, 7 * 16, 16)
    assert (a4.m_sb, a4.m_sh, a4.m_ss) == (0, 35, 7) and lay.grid == (1, 2, 2) and lay.bucket == 64


def test_checks_claim_what_runs_and_refuse_the_rest():
    f32 = "float32"
    mha = {"num_heads": 4, OUTPUT_COUNT: 3}
    qkv = [(1, 197, 256), (1, 197, 256), (1, 197, 256)]
    assert gk.kernel_reason(MHA, mha, [f32] * 3, qkv) is None
    assert gk.kernel_reason(MHA, mha, ["float16"] * 3 + ["", "int32"], qkv + [None, (1, 197)]) is None
    assert "qk output" in gk.kernel_reason(MHA, {**mha, OUTPUT_COUNT: 4}, [f32] * 3, qkv)
    assert "packed" in gk.kernel_reason(MHA, mha, [f32, "", ""], qkv[:1])
    assert "not known" in gk.kernel_reason(MHA, mha, [f32] * 3, [(1, None, None)] * 3)
    assert "up to 256" in gk.kernel_reason(MHA, {**mha, "num_heads": 1}, [f32] * 3, [(1, 2, 512)] * 3)
    assert "element type" in gk.kernel_reason(MHA, mha, ["bfloat16"] * 3, qkv)
    attn = {"is_causal": 1, OUTPUT_COUNT: 3, "softmax_precision": 0}
    q4 = [(2, 8, 16, 64), (2, 2, 16, 64), (2, 2, 16, 64)]
    assert gk.kernel_reason(ATTN, attn, [f32] * 3 + ["bool"], q4 + [(16, 16)]) is None
    for precision in (1, 10, 11, 16):  # ORT's CPU kernel computes alike for each (both devices follow it)
        assert gk.kernel_reason(ATTN, {**attn, "softmax_precision": precision}, [f32] * 3, q4) is None
    assert gk.kernel_reason(ATTN, {**attn, OUTPUT_COUNT: 4, "qk_matmul_output_mode": 3}, [f32] * 3, q4) is None
    assert gk.kernel_reason(ATTN, attn, [f32] * 3 + ["", "", "", "int64"], q4) is None  # an external cache
    assert "attn_mask" in gk.kernel_reason(ATTN, attn, [f32] * 3 + ["float16"], q4)
    q3 = [(1, None, 512), (1, None, 128), (1, None, 128)]
    assert gk.kernel_reason(ATTN, {**attn, "q_num_heads": 8, "kv_num_heads": 2}, [f32] * 3, q3) is None
    assert "not known" in gk.kernel_reason(ATTN, attn, [f32] * 3, q3)  # 3-D without the head counts
