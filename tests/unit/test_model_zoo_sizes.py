"""The model zoo's sizes are the shapes the benchmarks say they measure: the `1b` llama is the
~1.1B TinyLlama shape (its GEMV shapes are the ones benchmarks/kernel_bandwidth.py times)."""
from __future__ import annotations

import pytest

from hipep.tools import model_zoo

pytest.importorskip("transformers")


def _parameters(c) -> int:
    """Parameters of a llama config: embeddings, lm_head (untied), per layer q/k/v/o, gate/up/down, two norms."""
    head = c.hidden_size // c.num_attention_heads
    attn = c.hidden_size * (c.num_attention_heads + 2 * c.num_key_value_heads) * head + c.hidden_size ** 2
    mlp = 3 * c.hidden_size * c.intermediate_size
    embed = c.vocab_size * c.hidden_size * (1 if c.tie_word_embeddings else 2)
    return embed + c.num_hidden_layers * (attn + mlp + 2 * c.hidden_size) + c.hidden_size


def test_1b_llama_is_the_tinyllama_shape():
    c = model_zoo._config("llama", "1b")
    assert (c.hidden_size, c.intermediate_size, c.num_hidden_layers) == (2048, 8192, 16)
    assert (c.num_attention_heads, c.num_key_value_heads, c.vocab_size) == (32, 8, 32000)
    assert c.hidden_size // c.num_attention_heads == 64
    assert not c.tie_word_embeddings  # lm_head is its own [2048 -> 32000] MatMulNBits
    assert 1.0e9 < _parameters(c) < 1.2e9
    # the fused qkv projection the builder makes is the [2048 -> 3072] GEMV the kernel benchmark times
    assert c.hidden_size + 2 * c.num_key_value_heads * 64 == 3072
    assert model_zoo.vocab_size("1b") == 32000 and model_zoo.vocab_size("tiny") == model_zoo.VOCAB


def test_1b_is_llama_only_and_unknown_sizes_are_named():
    with pytest.raises(ValueError, match="llama only"):
        model_zoo._config("gemma2", "1b")
    with pytest.raises(ValueError, match="unknown size 'huge'"):
        model_zoo.decoder("llama", "int4", size="huge")
    assert model_zoo._config("llama", "medium").hidden_size == 512  # the other sizes are unchanged


def test_the_vlm_and_moe_decoders_are_tiny_and_name_what_they_lack():
    with pytest.raises(ValueError, match="fp32 only, not 'int4'"):
        model_zoo.decoder("gpt_oss", "int4")
    with pytest.raises(ValueError, match="tiny only"):
        model_zoo._config("qwen2_5_vl", "medium")
    c = model_zoo._config("qwen2_5_vl")
    head = c.text_config.hidden_size // c.text_config.num_attention_heads
    # the multimodal rotary's three sections cover the head's rotary pairs
    assert sum(c.text_config.rope_scaling["mrope_section"]) == head // 2
    assert model_zoo._config("gpt_oss").num_local_experts == 4
