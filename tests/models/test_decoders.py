"""onnxruntime-genai decoders (built here by its model builder from random-weight configs; fp32, fp16
and int4; vision-language models' text decoders, Qwen2.5-VL's, Qwen3-VL's and Qwen3.5's (linear
attention); Qwen3; Phi-3's LongRoPE; a mixture of experts, gpt-oss) run whole on hipep with CPU
fallback disabled, through ORT and through onnxruntime-genai, give the CPU EP's tokens, and teacher-
forced follow its logits step by step (the GPU's criterion, tests/teacher_forcing.py). Needs the
`models` extra; skipped without it."""
from __future__ import annotations

import os

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxruntime_genai")

import hipep  # noqa: E402
from hipep.tools import model_zoo  # noqa: E402
from hipep.tools.generate import greedy  # noqa: E402
from helpers import mlas_int8_replayed_exactly  # noqa: E402
from teacher_forcing import (GPU_MISSING_OPS, assert_follows_the_cpu_ep, decoder_geometry,  # noqa: E402
                             greedy_on_session)

# (qwen3's int4-f16 build folds its Q/K norms into GroupQueryAttention, which the CPU EP runs unfolded)
CASES = list(model_zoo.TEST_DECODERS)
PROMPTS_1 = [[1, 20, 21, 22, 23, 24]]
PROMPTS_2 = [[1, 14, 15], [1, 30, 31, 32, 33, 34, 35, 36]]  # different lengths: left padding


@pytest.fixture(scope="module", params=CASES, ids=[f"{a}-{p}" for a, p in CASES])
def case(request):
    arch, precision = request.param
    return arch, precision, model_zoo.decoder(arch, precision)


@pytest.fixture(scope="module")
def model_folder(case):
    return case[2]


def test_every_node_is_claimed(model_folder):
    report = hipep.explain(os.path.join(model_folder, "model.onnx"))
    assert report.all_claimed, report.format()


@pytest.mark.parametrize("prompts", [PROMPTS_1, PROMPTS_2], ids=["batch1", "batch2"])
def test_greedy_tokens_equal_the_cpu_ep(case, model_folder, prompts):
    if case[0] in model_zoo.VISION_LANGUAGE and len(prompts) > 1:
        pytest.skip("onnxruntime-genai's Qwen-VL text pipelines take one sequence at a time (a padded batch "
                    "fails before any EP runs: 'Not enough image_grid_thw data for image tokens')")
    if case[1] in model_zoo.BF16_PRECISIONS:
        # The CPU EP runs only the f32 form (no bf16 kernels), whose greedy path parts from bf16's at
        # the first near-tie; the teacher-forced test below holds the logits step by step. Here:
        # onnxruntime-genai (its KV cache bf16) decodes through hipep as an ORT session on hipep does.
        if len(prompts) > 1:
            pytest.skip("bf16: one sequence (left padding is onnxruntime-genai's, checked with the other builds)")
        got = greedy(model_folder, prompts, 32, ep="hipep", provider_options={"device": "cpu", "strict": "1"})
        session = hipep.InferenceSession(os.path.join(model_folder, "model.onnx"), device="cpu", strict="1")
        assert got[0] == greedy_on_session(session, model_folder, prompts[0], len(got[0]))
        assert len(set(got[0])) >= 3
        return
    if case[1] == "int4" and not mlas_int8_replayed_exactly():
        pytest.skip("int4 (accuracy_level 4): this processor's MLAS int8 kernel is not the AVX512-VNNI one the CPU "
                    "device replays bit for bit; the teacher-forced test below holds the logits step by step")
    want = greedy(model_zoo.cpu_ep_folder(model_folder), prompts, 32, ep="cpu")
    got = greedy(model_folder, prompts, 32, ep="hipep", provider_options={"device": "cpu", "strict": "1"})
    assert got == want
    # the random weights really make varied tokens (a sequence may end early at EOS, id 2)
    assert len({t for row in want for t in row}) >= 3


def test_teacher_forced_logits_follow_the_cpu_ep(case):
    arch, precision, folder = case
    path, _, _ = decoder_geometry(folder)
    errors = assert_follows_the_cpu_ep(folder, hipep.InferenceSession(path, device="cpu", strict="1"), precision)
    assert len(errors) == 33


def test_fp16_decoders_keep_the_fp32_graph_in_f16():
    """The fp16 build is the fp32 graph with f16 activations, logits and KV cache (the builder's
    CUDA target: GroupQueryAttention, not its CPU fp16 graph's MultiHeadAttention), and its
    genai_config.json names no provider, so onnxruntime-genai runs it on the CPU EP by default."""
    import onnx

    for arch in model_zoo.ARCHITECTURES:
        folders = {p: model_zoo.decoder(arch, p) for p in ("fp32", "fp16")}
        graphs = {p: onnx.load(os.path.join(f, "model.onnx"), load_external_data=False).graph
                  for p, f in folders.items()}
        ops = {p: {n.op_type for n in g.node} for p, g in graphs.items()}
        assert "GroupQueryAttention" in ops["fp16"] and "MultiHeadAttention" not in ops["fp16"], arch
        assert ops["fp16"] - {"Cast", "Constant"} == ops["fp32"] - {"Cast", "Constant"}, arch
        f16 = onnx.TensorProto.FLOAT16
        for value in list(graphs["fp16"].input) + list(graphs["fp16"].output):
            if value.name == "logits" or "key" in value.name or "value" in value.name:
                assert value.type.tensor_type.elem_type == f16, f"{arch}: {value.name} is not f16"
        decoder = model_zoo.genai_config(folders["fp16"])["model"]["decoder"]
        assert decoder["session_options"]["provider_options"] == [], arch


@pytest.mark.parametrize("arch, precision", [("llama", "int4"), ("gemma2", "fp32"), ("gemma2", "fp16")])
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
    ep = hipep.provider_for("cpu")  # HipCpuExecutionProvider where HipExecutionProvider runs on a GPU
    config.append_provider(ep)
    for k, v in (("device", "cpu"), ("strict", "1")):
        config.set_provider_option(ep, k, v)
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


def test_cuda_bindings_accept_every_step(case):
    """The cuda device claims every node, and its GPU programs bind to a prefill's and decode steps'
    arguments (hipep.tools.cuda_dry_run: no GPU needed; tests/gpu runs them)."""
    import onnx

    from hipep.tools.cuda_dry_run import dry_run

    path, head_size, window = decoder_geometry(case[2])
    report = hipep.explain(path, device="cuda")
    if case[0] in GPU_MISSING_OPS:  # ops without a GPU kernel yet: said, and left to other EPs
        assert not report.all_claimed
        assert {r.node.op_type for r in report.rejections} == GPU_MISSING_OPS[case[0]]
        assert all("no kernel for cuda" in r.line() for r in report.rejections)
        return
    assert report.all_claimed, report.format()
    if case[1] in model_zoo.BF16_PRECISIONS:
        pytest.skip("the dry run computes the subgraphs' inputs with ORT's CPU EP, which has no bf16 kernels; "
                    "tests/unit/test_host_driver.py binds a bf16 decoder's steps instead")
    model = onnx.load(path)
    steps = model_zoo.decoder_steps(path, head_size, prompt=5, decode=2, window=window)
    if case[0] in model_zoo.LONG_ROPE:  # past the original context too: the If's other branch
        steps += model_zoo.decoder_steps(path, head_size, prompt=20, decode=1, window=window)
    for feeds in steps:
        assert dry_run(model, feeds) == 1


def test_the_cpu_ep_gets_fused_qk_norms_unfolded():
    """qwen3's GPU build folds its per-head Q/K norms into GroupQueryAttention (no CPU EP kernel):
    cpu_ep_folder gives the CPU EP that model with one SimplifiedLayerNormalization per Q and per K
    ahead of each such node; other folders are their own."""
    import onnx

    fp32 = model_zoo.decoder("qwen3", "fp32")
    assert model_zoo.cpu_ep_folder(fp32) == fp32
    folder = model_zoo.decoder("qwen3", "int4-f16")
    unfolded = model_zoo.cpu_ep_folder(folder)
    assert unfolded != folder
    graphs = [onnx.load(os.path.join(f, "model.onnx"), load_external_data=False).graph for f in (folder, unfolded)]
    gqa = [[n for n in g.node if n.op_type == "GroupQueryAttention"] for g in graphs]
    assert all(len(n.input) > 15 and n.input[14] for n in gqa[0])
    assert all(len(n.input) <= 14 and "qk_norm_epsilon" not in {a.name for a in n.attribute} for n in gqa[1])
    norms = [sum(n.op_type == "SimplifiedLayerNormalization" for n in g.node) for g in graphs]
    assert norms[1] == norms[0] + 2 * len(gqa[0])
