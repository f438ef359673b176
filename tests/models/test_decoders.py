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
