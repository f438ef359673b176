"""GroupQueryAttention's GPU launches (hipep/runtime/gpu_attention.py: kernels/attention_cache.hip,
attention_decode.hip, attention_prefill.hip, and rms_norm.hip for the fused Q/K norm) run on the
host stand-in: g++ compiles the unchanged kernel sources, the launches run block by block on host
threads (the split-KV decode's blocks one after another, so its last block merges every split's
partials), and every output is compared with the registry's reference -- the kernels themselves,
where test_gpu_attention_bindings.py checks the bindings against a numpy transcription of them.
Skipped without g++."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from unit.host_kernels import EXACT_FLAGS, compile_module, run_on_host
from unit.test_gpu_attention_bindings import GQA, assert_gqa_results, case_setup

F32, F16 = np.float32, np.float16
pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
MODULES = ("attention_cache", "attention_decode", "attention_prefill", "rms_norm")
# the cases of the bindings' emulation test that the host runs in reasonable time
HOST_CASES = ["prompt", "prompt-padded-rotary", "prompt-window-padded-softcap", "prompt-sink-bias", "decode",
              "few-tokens-split", "decode-ragged-split", "decode-shared", "decode-window-split", "decode-sink-split",
              "decode-mqa-many-heads"]


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
