"""GroupQueryAttention's GPU launches (hipep/runtime/gpu_attention.py: kernels/attention_cache.hip,
attention_decode.hip, attention_decode_fused.hip, attention_prefill.hip, and rms_norm.hip for the
fused Q/K norm) run on the host stand-in: g++ compiles the unchanged kernel sources, the launches
run block by block on host threads (the split-KV decode's blocks one after another, so its last
block merges every split's partials), and every output is compared with the registry's reference
-- the kernels themselves, where test_gpu_attention_bindings.py checks the bindings against a numpy
transcription of them.
Skipped without g++."""
from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest

from hipep.runtime.gpu_attention import DEC_DIRECT_PASSES
from unit.host_kernels import EXACT_FLAGS, compile_module, run_on_host
from unit.test_gpu_attention_bindings import BF16, GQA, GQA_TOLERANCE, assert_gqa_results, case_setup, gqa_case

F32, F16 = np.float32, np.float16
pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
MODULES = ("attention_cache", "attention_decode", "attention_decode_fused", "attention_prefill",
           "attention_prefill_tc", "rms_norm")
# the cases of the bindings' emulation test that the host runs in reasonable time
HOST_CASES = ["prompt", "prompt-padded-rotary", "prompt-window-padded-softcap", "prompt-sink-bias", "decode",
              "few-tokens-split", "decode-ragged-split", "decode-shared", "decode-window-split", "decode-sink-split",
              "decode-mqa-many-heads", "bf16-prompt-padded-rotary", "bf16-decode", "bf16-decode-split"]


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    out = tmp_path_factory.mktemp("gqa")
    return {"warp": 32, **{m: compile_module(out, m, 32, EXACT_FLAGS) for m in MODULES}}


def _run(libs, name, norms=False):
    ins, shapes, attrs, sm, dtype, spec, rng = case_setup(name)
    if norms:
        h = spec.get("head", 16)
        ins = ins + [None, None, rng.uniform(0.5, 1.5, h).astype(dtype), rng.uniform(0.5, 1.5, h).astype(dtype)]
        attrs["qk_norm_epsilon"] = 1e-5
    views, want, ops = run_on_host(libs, GQA, ins, attrs, n_out=3, sm_count=sm, workspace=True)
    assert_gqa_results(name, views, want, ops, dtype)
    return ops


@pytest.mark.parametrize("name", HOST_CASES)
def test_gqa_kernels_compute_the_reference(libs, name):
    _run(libs, name)


@pytest.mark.parametrize("name", ["prompt", "decode", "decode-ragged-split", "decode-shared"])
def test_gqa_kernels_with_the_fused_qk_norm(libs, name):
    ops = _run(libs, name, norms=True)
    assert [op.entry.startswith("hipep_rms_norm_") for op in ops[:2]] == [True, True]


# Decode steps on the shared KV buffer (present is past's memory): one launch, the rotary and cache
# append fused into the decode kernel (hipep_gqa_decode_fused); the direct path and the split one.
FUSED_CASES = ["decode-shared", "decode-shared-split", "decode-shared-sink-split", "decode-shared-bias-packed",
               "decode-shared-position-ids", "decode-shared-mqa-softcap", "f16-decode-shared",
               "decode-shared-local-window", "bf16-decode-shared"]


@pytest.mark.parametrize("name", FUSED_CASES)
def test_gqa_fused_decode_kernel_computes_the_reference(libs, name):
    ins, shapes, attrs, sm, dtype, spec, rng = case_setup(name)
    past_k, past_v = ins[3].copy(), ins[4].copy()
    views, want, ops = run_on_host(libs, GQA, ins, attrs, n_out=3, sm_count=sm, workspace=True, alias={1: 3, 2: 4})
    short = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}[np.dtype(dtype).name]
    assert [op.entry for op in ops] == [f"hipep_gqa_decode_fused_{short}_g{ops[0].entry.rsplit('_g', 1)[1]}"]
    t = GQA_TOLERANCE[np.dtype(dtype).name]
    np.testing.assert_allclose(views[0].astype(F32), want[0].astype(F32), err_msg="output", **t)
    lens = [int(x) + 1 for x in ins[5]]
    for b, n in enumerate(lens):  # the rows the step wrote and the ones before it; past's tail untouched
        for j, old in ((1, past_k), (2, past_v)):
            np.testing.assert_allclose(views[j][b, :, :n].astype(F32), want[j][b, :, :n].astype(F32), **t)
            np.testing.assert_array_equal(views[j][b, :, n:], old[b, :, n:])
    if name == "decode-shared-split":  # past the direct path's keys: split, merged, counters zero again
        a = ops[0].params[16]
        assert ops[0].grid[0] > 1 and -(-2601 // a.key_tile) > DEC_DIRECT_PASSES
        groups = a.batch * a.kv_heads * a.row_groups
        counters = (ctypes.c_uint32 * groups).from_address(ops[0].params[15].value)
        assert list(counters) == [0] * groups


# The tensor-core prefill (attention_prefill_tc.hip: fp16 and bf16, head sizes a multiple of 16 up to 128, on
# a device with mma.sync; the stand-in emulates mma.sync): prompts past DEC_MAX_SEQ tokens (fewer take the
# split-KV kernel) with the features of the cases above, in both types, and cases
# past one block of query rows (64) and one tile of keys (64), head sizes below and at a bucket's.
TC_CASES = {
    "prompt": dict(seq=12),
    "prompt-padded-rotary": dict(batch=2, seq=10, lens=[10, 6], rotary=16),
    "prompt-window-padded-softcap": dict(batch=2, seq=11, lens=[7, 11], attrs=dict(local_window_size=3, softcap=3.0)),
    "prompt-sink-bias": dict(batch=2, seq=9, sink=True, bias=True),
    "prompt-smooth": dict(seq=9, attrs=dict(smooth_softmax=1)),
    "subsequent-prompt": dict(seq=9, past=5, rotary=16, position_ids=True),
    "long-prompt-padded": dict(batch=2, seq=70, lens=[70, 41], heads=2, kv_heads=1, rotary=16),
    "long-subsequent-window": dict(seq=66, past=80, heads=2, kv_heads=1, head=48,
                                   attrs=dict(local_window_size=90)),
    "prompt-head-64": dict(seq=9, head=64, rotary=32),
    "prompt-head-80-packed": dict(seq=10, head=80, packed=True, heads=2, kv_heads=1),
}


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name", list(TC_CASES))
def test_gqa_tensor_core_prefill_computes_the_reference(libs, name, dtype):
    ins, _, attrs, _, _, _, _ = case_setup(name, dtype, TC_CASES)
    views, want, ops = run_on_host(libs, GQA, ins, attrs, n_out=3, workspace=True, tensor_cores=True)
    short = "f16" if np.dtype(dtype) == F16 else "bf16"
    head = TC_CASES[name].get("head", 16)
    entries = [op.entry for op in ops if "prefill" in getattr(op, "entry", "")]
    assert entries == [f"hipep_gqa_prefill_tc_{short}_h{64 if head <= 64 else 128}"]
    assert_gqa_results(name, views, want, ops, dtype)


def test_tensor_core_prefill_only_where_it_applies(libs, monkeypatch):
    """f32, a head size not a multiple of 16, a device without mma.sync, or HIPEP_GQA_PREFILL_TC=0: the
    f32 prefill kernel (attention_prefill.hip), which computes the same."""
    from hipep.runtime.gpu_attention import PREFILL_TC_ENV

    def entries(dtype, head, cores):
        rng = np.random.default_rng(3)
        ins, _ = gqa_case(rng, seq=12, head=head, dtype=dtype)
        views, want, ops = run_on_host(libs, GQA, ins, dict(num_heads=4, kv_num_heads=2), n_out=3, workspace=True,
                                       tensor_cores=cores)
        assert_gqa_results("prompt", views, want, ops, dtype)
        return [op.entry for op in ops if "prefill" in getattr(op, "entry", "")]

    assert entries(F32, 16, True) == ["hipep_gqa_prefill_f32_h64"]
    assert entries(F16, 24, True) == ["hipep_gqa_prefill_f16_h64"]
    assert entries(F16, 16, False) == ["hipep_gqa_prefill_f16_h64"]
    monkeypatch.setenv(PREFILL_TC_ENV, "0")
    assert entries(F16, 16, True) == ["hipep_gqa_prefill_f16_h64"]


@pytest.mark.parametrize("capacity,prompt", [(16, 12), (8, 11)])
def test_gqa_tensor_core_prefill_on_the_sliding_window_cache(libs, capacity, prompt):
    """gemma2's sliding-window cache: a prompt, then a second prompt, in fp16 on tensor cores; the output and
    the cache rows the window keeps against the reference."""
    from helpers import window_end

    rng = np.random.default_rng(capacity + prompt)
    window = 6
    attrs = dict(num_heads=4, kv_num_heads=2, local_window_size=window, sliding_window_cache=1)
    past = [rng.uniform(-1, 1, (1, 2, capacity, 16)).astype(F16) for _ in range(2)]
    total = prompt
    for step in range(2):  # (a second prompt takes batch 1, as the reference requires)
        ins, _ = gqa_case(rng, batch=1, seq=prompt, total=total, capacity=capacity, lens=[total], dtype=F16)
        ins[3], ins[4] = past
        views, want, ops = run_on_host(libs, GQA, ins, attrs, n_out=3, workspace=True, tensor_cores=True)
        assert "hipep_gqa_prefill_tc_f16_h64" in [getattr(op, "entry", "") for op in ops]
        t = GQA_TOLERANCE["float16"]
        np.testing.assert_allclose(views[0].astype(F32), want[0].astype(F32), err_msg=f"step {step}", **t)
        rows = window_end(total, capacity, window)
        for k in (1, 2):
            np.testing.assert_allclose(views[k][:, :, :rows].astype(F32), want[k][:, :, :rows].astype(F32), **t)
        past = [want[1], want[2]]
        total += prompt
