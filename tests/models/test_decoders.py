"""onnxruntime-genai decoders (built here by its model builder from random-weight configs) run
whole on hipep with CPU fallback disabled, through ORT and through onnxruntime-genai, and give the
CPU EP's tokens. Needs the `models` extra; skipped without it."""
from __future__ import annotations

import os

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxruntime_genai")

import hipep  # noqa: E402
from hipep.tools import model_zoo  # noqa: E402
from hipep.tools.generate import greedy  # noqa: E402

CASES = [(a, p) for a in model_zoo.ARCHITECTURES for p in model_zoo.PRECISIONS]
PROMPTS_1 = [[1, 20, 21, 22, 23, 24]]
PROMPTS_2 = [[1, 14, 15], [1, 30, 31, 32, 33, 34, 35, 36]]  # different lengths: left padding


@pytest.fixture(scope="module", params=CASES, ids=[f"{a}-{p}" for a, p in CASES])
def model_folder(request):
    return model_zoo.decoder(*request.param)


def test_every_node_is_claimed(model_folder):
    report = hipep.explain(os.path.join(model_folder, "model.onnx"))
    assert report.all_claimed, report.format()


@pytest.mark.parametrize("prompts", [PROMPTS_1, PROMPTS_2], ids=["batch1", "batch2"])
def test_greedy_tokens_equal_the_cpu_ep(model_folder, prompts):
    want = greedy(model_folder, prompts, 32, ep="cpu")
    got = greedy(model_folder, prompts, 32, ep="hipep", provider_options={"device": "cpu", "strict": "1"})
    assert got == want
    # the random weights really make varied tokens (a sequence may end early at EOS, id 2)
    assert len({t for row in want for t in row}) >= 3


@pytest.mark.parametrize("arch, precision", [("llama", "int4"), ("gemma2", "fp32")])
def test_decode_steps_with_a_shared_kv_buffer_reuse_one_specialization(arch, precision):
    """onnxruntime-genai binds past and present to one max-length buffer (past_present_share_buffer):
    after the first decode step, every step has the same layout signature — the mask's growing
    length is a value-only symbol — so no step specializes again or reads a value back."""
    import numpy as np
    import onnxruntime_genai as og

    from hipep.tools.generate import register_with_genai

    folder = model_zoo.decoder(arch, precision)
    register_with_genai()
    config = og.Config(folder)
    config.clear_providers()
    config.append_provider("HipExecutionProvider")
    for k, v in (("device", "cpu"), ("strict", "1")):
        config.set_provider_option("HipExecutionProvider", k, v)
    model = og.Model(config)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=64, do_sample=False, batch_size=1)
    gen = og.Generator(model, params)
    gen.append_tokens(np.array([[1, 20, 21, 22, 23]], dtype=np.int32))
    gen.generate_next_token()  # prefill's token, then the first decode step specializes
    gen.generate_next_token()
    before = hipep.stats()
    for _ in range(30):
        gen.generate_next_token()
    after = hipep.stats()
    assert after["runs"] - before["runs"] == 30
    assert after.get("specializations", 0) - before.get("specializations", 0) == 0
    assert after.get("host_reads", 0) - before.get("host_reads", 0) == 0
    assert after["specialization_hits"] - before.get("specialization_hits", 0) == 30
