"""Test models made here, never downloaded: onnxruntime-genai decoders built by its model builder
from random-weight `transformers` configs, cached on disk.

Three architectures cover what the builder's graphs need: `llama` (tied embeddings: the int4
model gathers them with GatherBlockQuantized), `gemma2` (attention and final-logit softcapping,
sliding-window attention, GQA's windowed cache) and `phi` (partial rotary, LayerNorm with bias).
Each comes in `fp32`, `fp16`, `int4` and `int4-f16`. Weights are random but not tiny (initializer
range 0.3), so greedy decoding gives varied tokens and a wrong kernel shows. Building needs the
`models` extra (torch, transformers, onnxruntime-genai).

Beside them, tiny only, in `fp32` and `int4-f16`:
  * VISION_LANGUAGE, vision-language models' text decoders (their tokens are text only here, so
    the three position streams of the multimodal rotary agree; image tokens reach the same op with
    streams that differ, which the op's own tests cover): `qwen2_5_vl`, Qwen2.5-VL's (the builder's
    `qwen2_5_vl_text`: MRotaryEmbedding over position_ids [3, batch, sequence], contiguous
    sections), `qwen3_vl`, Qwen3-VL's (interleaved sections), and `qwen3_5`, Qwen3.5's, a hybrid: a
    Gated DeltaNet linear-attention layer (CausalConvWithState, LinearAttentionGate,
    LinearAttention, GatedRMSNorm, with states past.N.conv / past.N.recurrent carried from step to
    step), then a full-attention layer.
  * QK_NORM: `qwen3`, which RMS-normalizes each head of Q and K; its GPU builds (fp16, int4-f16)
    fold that into GroupQueryAttention's q_norm_weight / k_norm_weight inputs, which ORT's CPU EP
    has no kernel for: `cpu_ep_folder` gives the CPU EP the same model with the norms unfolded again
    (the Reshape -> SimplifiedLayerNormalization -> Reshape stack the fusion folds), the oracle such
    builds are compared with.
  * LONG_ROPE: `phi3`, Phi-3.5-mini's and Phi-4-mini's LongRoPE: the builder keeps two rotary
    caches as Constant nodes of an If's branches and picks one by the sequence length (past 16
    tokens here, so decoding crosses over).
  * MIXTURE_OF_EXPERTS: `gpt_oss`, whose experts the builder writes as MoE (fused interleaved
    SwiGLU with a limit, k = 2 of 4 experts) beside attention sinks and sliding-window layers; fp32
    only, since the builder's int4 gpt-oss reads the original checkpoint's MXFP4 expert tensors,
    which a random model lacks.

`int4` is the builder's CPU target (`-p int4 -e cpu`: f32 activations, MatMulNBits at
accuracy_level 4, which quantizes activations to int8); `int4-f16` its CUDA target (`-p int4 -e
cuda`: f16 activations, inputs, outputs and KV cache, MatMulNBits at level 0), the int4 model a
GPU user builds. ORT's CPU EP runs both.

`bf16` (`-p bf16 -e cuda`) and `int4-bf16` (`-p int4 -e cuda` with `use_cuda_bf16=true`: bf16
activations and KV cache, MatMulNBits and the embedding's GatherBlockQuantized with bf16 scales)
are the builds the builder recommends where fp16 loses accuracy. ORT's CPU EP has no bf16 kernels
for their MatMul, norms or attention: `cpu_ep_folder` gives it the same model in f32 with each
bf16 result rounded to bf16 (a Cast to bf16 and back), the reference their tests compare with.

The fp16 models are built for the CUDA EP (`-p fp16 -e cuda`), the builder's one fp16 target
whose graph is the fp32 one in fp16: GroupQueryAttention, fused qkv projection, f16 inputs,
outputs and KV cache (gemma2 keeps its residual stream and norms in f32, as the builder does for
it). ORT's CPU EP, the reference, runs that graph as it is: prefill and decode steps, with or
without graph optimizations. The builder's CPU fp16 build (`-p fp16 -e cpu`, which it lists as
unsupported) is a different graph: MultiHeadAttention after an explicit repeat of the KV heads
(the builder pairs GroupQueryAttention with the CPU in f32 only), and the CPU EP fails on its
first decode step ("Shape mismatch attempting to re-use buffer" in a Cast it inserted) unless
memory reuse is turned off. The CUDA provider options the builder writes into genai_config.json
are removed so that the folder runs on the CPU EP like the others. On x86-64 the CPU EP has f16
kernels for GroupQueryAttention, the norms and Gather but not for MatMul, Add, Mul, Sigmoid or
Tanh: it casts around its f32 ones and keeps each run of such nodes (a whole MLP) in f32, so its
f16 logits are not a pure-f16 computation, and an f16 device agrees with it to f16 rounding (a
relative L2 error of logits near 1e-3), not bit for bit.

Three sizes: `tiny` (the default: hidden 64, 2 layers; fast enough for every test), `medium`
(hidden 512, intermediate 1408, 4 layers, 8 heads of 64; llama and gemma2 over 4 KV heads): big
enough that a decode step's kernels take longer than the host's work around them, for benchmarks
of runtime overhead, and `1b` (llama only: the ~1.1B shape of TinyLlama, hidden 2048, FFN 8192,
16 layers, 32 heads of 64 over 8 KV heads, vocab 32000, untied lm_head, context 2048), for the GPU
decode benchmark (benchmarks/decode.py: int4 and int4-f16), with HF's default initializer range
(0.02: a trained model's scale of weights; the final norm gives the logits the spread larger
weights would). Each of its int4 builds is 0.9 GB and takes the builder ~30 s on 16 cores, ~1 min
on 2. A size's models are cached apart; the tiny ones keep their original keys.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ARCHITECTURES = ("llama", "gemma2", "phi")
VISION_LANGUAGE = ("qwen2_5_vl", "qwen3_vl", "qwen3_5")
QK_NORM = ("qwen3",)
LONG_ROPE = ("phi3",)
MIXTURE_OF_EXPERTS = ("gpt_oss",)
_ONLY_PRECISIONS = {"gpt_oss": ("fp32",)}
PRECISIONS = ("fp32", "fp16", "int4", "int4-f16", "bf16", "int4-bf16")
# The builder's precision, execution-provider target and extra options per precision (why: the
# module's docstring).
_BUILD = {"fp32": ("fp32", "cpu", ()), "fp16": ("fp16", "cuda", ()), "int4": ("int4", "cpu", ()),
          "int4-f16": ("int4", "cuda", ()), "bf16": ("bf16", "cuda", ()),
          "int4-bf16": ("int4", "cuda", ("--extra_options", "use_cuda_bf16=true"))}
# The precisions whose activations and KV cache are bf16: ORT's CPU EP has no bf16 kernels for
# their MatMul, norms or attention, so `cpu_ep_folder` gives it the same model in f32.
BF16_PRECISIONS = ("bf16", "int4-bf16")
# The tiny decoders hipep's tests build (tests/models, tests/gpu): every precision of the three
# base architectures; the vision-language text decoders, qwen3 and phi3 in their f32 build and the
# GPU user's int4 build (f16 activations); the mixture of experts in f32.
TEST_DECODERS = tuple([(a, p) for a in ARCHITECTURES for p in PRECISIONS]
                      + [(a, p) for a in VISION_LANGUAGE + QK_NORM + LONG_ROPE for p in ("fp32", "int4-f16")]
                      + [(a, "fp32") for a in MIXTURE_OF_EXPERTS])
SIZES = ("tiny", "medium", "1b")
_VERSION = 2  # bump when the configs below change: the cache key includes it
VOCAB = 256


def cache_dir() -> str:
    base = os.environ.get("HIPEP_CACHE_DIR") or os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                            os.path.expanduser("~/.cache"), "hipep")
    return os.path.join(base, "models")


# The ~1.1B llama (TinyLlama's shape), random weights: what benchmarks/decode.py measures on a GPU.
ONE_B = dict(vocab_size=32000, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
             num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=2048,
             initializer_range=0.02, tie_word_embeddings=False)


def vocab_size(size: str = "tiny") -> int:
    return ONE_B["vocab_size"] if size == "1b" else VOCAB


def _config(arch: str, size: str = "tiny"):
    if size == "1b":
        if arch != "llama":
            raise ValueError(f"size '1b' is built for llama only, not {arch!r}")
        from transformers import LlamaConfig

        return LlamaConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0, **ONE_B)
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, max_position_embeddings=256, initializer_range=0.3,
                  bos_token_id=1, eos_token_id=2, pad_token_id=0)
    kv_heads, head_dim = 2, 16
    if size == "medium":
        # hidden/heads = 64: the head size of most real models, so attention's kernels see real shapes
        common.update(hidden_size=512, intermediate_size=1408, num_hidden_layers=4, num_attention_heads=8)
        kv_heads, head_dim = 4, 64
    elif size != "tiny":
        raise ValueError(f"unknown size {size!r}; known: {', '.join(SIZES)}")
    if arch == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(num_key_value_heads=kv_heads, tie_word_embeddings=True, **common)
    if arch == "gemma2":
        from transformers import Gemma2Config

        # Untied: with tied embeddings these random weights make the model repeat its input token.
        return Gemma2Config(num_key_value_heads=kv_heads, head_dim=head_dim, sliding_window=8,
                            attn_logit_softcapping=50.0, final_logit_softcapping=30.0, tie_word_embeddings=False,
                            **common)
    if arch in VISION_LANGUAGE:
        if size != "tiny":
            raise ValueError(f"size {size!r} is not built for {arch}: tiny only")
        vision = dict(depth=1, hidden_size=32, out_hidden_size=common["hidden_size"], num_heads=2,
                      intermediate_size=64)
        # mrope_section: the 8 rotary pairs of a 16-wide head split temporal / height / width
        if arch == "qwen2_5_vl":
            from transformers import Qwen2_5_VLConfig

            text = dict(common, num_key_value_heads=kv_heads,
                        rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]})
            return Qwen2_5_VLConfig(text_config=text, vision_config=vision)
        rope = {"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": True}
        if arch == "qwen3_5":
            from transformers import Qwen3_5Config

            # one linear-attention layer (2 key heads, 4 value heads, as Qwen3.5's 16 over 32) and one
            # full-attention layer, small enough for every test
            # (the whole head rotated, said at the top level too: transformers 5.17 reads it there, 0.25
            # by default, and the builder from there)
            text = dict(common, num_key_value_heads=kv_heads, head_dim=head_dim, linear_num_key_heads=2,
                        linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
                        layer_types=["linear_attention", "full_attention"], partial_rotary_factor=1.0,
                        rope_parameters=dict(rope, rope_theta=10000.0, partial_rotary_factor=1.0))
            return Qwen3_5Config(text_config=text, vision_config=vision)
        from transformers import Qwen3VLConfig

        text = dict(common, num_key_value_heads=kv_heads, head_dim=head_dim, rope_scaling=rope)
        return Qwen3VLConfig(text_config=text, vision_config=dict(vision, deepstack_visual_indexes=[]))
    if arch == "phi3":
        from transformers import Phi3Config

        half = common["hidden_size"] // common["num_attention_heads"] // 2
        longrope = {"type": "longrope", "long_factor": [1.0 + 0.25 * i for i in range(half)],
                    "short_factor": [1.0] * half}
        return Phi3Config(num_key_value_heads=kv_heads, original_max_position_embeddings=16, rope_scaling=longrope,
                          **common)
    if arch == "qwen3":
        from transformers import Qwen3Config

        return Qwen3Config(num_key_value_heads=kv_heads, head_dim=head_dim, **common)
    if arch == "gpt_oss":
        if size != "tiny":
            raise ValueError(f"size {size!r} is not built for {arch}: tiny only")
        from transformers import GptOssConfig

        return GptOssConfig(num_key_value_heads=kv_heads, head_dim=head_dim, num_local_experts=4,
                            num_experts_per_tok=2, sliding_window=8, **common)
    if arch == "phi":
        from transformers import PhiConfig

        # head size 32 with half of it rotated: ORT's rotary needs the cos cache width a multiple of 8
        if size == "tiny":
            common.update(hidden_size=128, intermediate_size=256)
        return PhiConfig(partial_rotary_factor=0.5, **common)
    known = ARCHITECTURES + VISION_LANGUAGE + QK_NORM + LONG_ROPE + MIXTURE_OF_EXPERTS
    raise ValueError(f"unknown architecture {arch!r}; known: {', '.join(known)}")


def _save_tokenizer(folder: str, vocab: int = VOCAB) -> None:
    """A character-level tokenizer: ids 10.. are 'a'..'z' and ' ', the rest are <id> tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    names = {i: f"<{i}>" for i in range(vocab)}
    names.update({i: c for i, c in enumerate("abcdefghijklmnopqrstuvwxyz ", start=10)})
    tok = Tokenizer(models.WordLevel({name: i for i, name in names.items()}, unk_token="<0>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<0>", bos_token="<1>", eos_token="<2>",
                                   pad_token="<0>")
    fast.save_pretrained(folder)


def decoder(arch: str, precision: str = "fp32", rebuild: bool = False, size: str = "tiny") -> str:
    """The folder of an onnxruntime-genai model (model.onnx, genai_config.json, tokenizer)."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; known: {', '.join(SIZES)}")
    if precision not in _ONLY_PRECISIONS.get(arch, PRECISIONS):
        raise ValueError(f"{arch} is built in {', '.join(_ONLY_PRECISIONS[arch])} only, not {precision!r}")
    # the tiny models' keys predate sizes: tests and caches name them so
    name = f"{arch}-{precision}" if size == "tiny" else f"{arch}-{size}-{precision}"
    out = os.path.join(cache_dir(), f"{name}-v{_VERSION}")
    if os.path.isfile(os.path.join(out, "genai_config.json")) and not rebuild:
        return out
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as work:
        hf = os.path.join(work, "hf")
        config = _config(arch, size)
        if arch in VISION_LANGUAGE:
            import transformers

            model = getattr(transformers, {"qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
                                           "qwen3_vl": "Qwen3VLForConditionalGeneration",
                                           "qwen3_5": "Qwen3_5ForConditionalGeneration"}[arch])(config)
        else:
            model = AutoModelForCausalLM.from_config(config)
        model.save_pretrained(hf)
        del model  # the 1b model's fp32 weights are 4.4 GB: free them before the builder loads its copy
        _save_tokenizer(hf, vocab_size(size))
        staging = os.path.join(work, "onnx")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        builder_precision, target, extra = _BUILD[precision]
        done = subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", hf, "-o", staging,
                               "-p", builder_precision, "-e", target, "-c", os.path.join(work, "cache"), *extra],
                              env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"the model builder failed for {arch} {size} {precision}:\n{done.stderr[-4000:]}")
        if target != "cpu":
            _drop_provider_options(os.path.join(staging, "genai_config.json"))
        os.makedirs(os.path.dirname(out), exist_ok=True)
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(staging, out)
    return out


def cpu_ep_folder(folder: str) -> str:
    """`folder` itself, or a sibling folder with the same model made runnable by ORT's CPU EP,
    built once and cached: where its GroupQueryAttention nodes take q_norm_weight / k_norm_weight
    (which the CPU EP refuses), those norms unfolded: Q and K each through Reshape to heads ->
    SimplifiedLayerNormalization (epsilon qk_norm_epsilon) -> Reshape back, ahead of the node, as
    the unfused model computes them; where it computes in bf16 (which the CPU EP has no kernels
    for), in f32 with every bf16 result rounded to bf16 (`bf16_as_f32`: the same weights,
    exactly)."""
    import onnx

    path = os.path.join(folder, "model.onnx")
    head = onnx.load(path, load_external_data=False)
    if _has_bf16(head):
        out = os.path.normpath(folder) + "-cpu-ep"
        if not os.path.isfile(os.path.join(out, "model.onnx")):
            model = onnx.load(path)
            bf16_as_f32(model)
            _save_beside(folder, out, model)
        return out
    return _unfold_qk_norms(folder, head)


def _has_bf16(model) -> bool:
    values = list(model.graph.input) + list(model.graph.output)
    return any(v.type.tensor_type.elem_type == 16 for v in values) or \
        any(i.data_type == 16 for i in model.graph.initializer)


# Outputs of ORT's norms that stay f32 whatever the input type (mean, inverse standard deviation).
_F32_STATISTICS = {("SimplifiedLayerNormalization", 1), ("LayerNormalization", 1), ("LayerNormalization", 2),
                   ("SkipSimplifiedLayerNormalization", 1), ("SkipSimplifiedLayerNormalization", 2),
                   ("SkipLayerNormalization", 1), ("SkipLayerNormalization", 2)}


def bf16_as_f32(model) -> None:
    """Rewrites `model` in place to compute in f32 what it computed in bf16, with every bf16 result
    still rounded to bf16: bf16 initializers, Constant values, graph inputs, outputs and value infos
    become f32 (exactly: every bf16 value is an f32 value); each node output that was bf16 passes
    through a Cast to bf16 and back (the CPU EP has those kernels), so each op's arithmetic runs in
    f32 on the values a bf16 device holds, and rounds where that device rounds."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    bf16, f32 = TensorProto.BFLOAT16, TensorProto.FLOAT
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    known = {v.name: v.type.tensor_type.elem_type for v in list(inferred.graph.input) + list(inferred.graph.output)
             + list(inferred.graph.value_info)}
    known.update({i.name: i.data_type for i in model.graph.initializer})
    # onnx infers no types for ORT's contrib ops (its default-domain SimplifiedLayerNormalization, the
    # com.microsoft ones): their results are bf16 where an input is, but for the norms' f32 statistics
    for node in model.graph.node:
        bf16_in = any(known.get(i) == bf16 for i in node.input if i)
        for k, out in enumerate(node.output):
            if out and not known.get(out):
                known[out] = f32 if (node.op_type, k) in _F32_STATISTICS else bf16 if bf16_in else 0
    rounded = {name for name, t in known.items() if t == bf16} - {i.name for i in model.graph.initializer} \
        - {i.name for i in model.graph.input}

    def widen(t):
        if t.data_type == bf16:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))

    graph = model.graph
    for init in graph.initializer:
        widen(init)
    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        if vi.type.tensor_type.elem_type == bf16:
            vi.type.tensor_type.elem_type = f32
    nodes = []
    for node in graph.node:
        for a in node.attribute:
            if a.type == a.TENSOR:
                widen(a.t)
            elif node.op_type == "Cast" and a.name == "to" and a.i == bf16:
                a.CopyFrom(helper.make_attribute("to", f32))
        nodes.append(node)
        for k, out in enumerate(node.output):
            if out in rounded:
                raw = f"{out}/f32"
                node.output[k] = raw
                nodes += [helper.make_node("Cast", [raw], [f"{out}/bf16"], name=f"{raw}/to_bf16", to=bf16),
                          helper.make_node("Cast", [f"{out}/bf16"], [out], name=f"{raw}/back", to=f32)]
    graph.ClearField("node")
    graph.node.extend(nodes)


def _save_beside(folder: str, out: str, model) -> None:
    import onnx

    staging = out + ".tmp"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(folder, staging, ignore=shutil.ignore_patterns("model.onnx", "model.onnx.data"))
    onnx.save(model, os.path.join(staging, "model.onnx"), save_as_external_data=True, location="model.onnx.data")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(staging, out)


def _unfold_qk_norms(folder: str, head) -> str:
    import onnx
    from onnx import helper, numpy_helper

    path = os.path.join(folder, "model.onnx")
    fused = [n for n in head.graph.node if n.op_type == "GroupQueryAttention" and len(n.input) > 15 and n.input[14]]
    if not fused:
        return folder
    out = os.path.normpath(folder) + "-cpu-ep"
    if os.path.isfile(os.path.join(out, "model.onnx")):
        return out
    model = onnx.load(path)
    graph = model.graph
    nodes = []
    for node in graph.node:
        if node in fused:
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            eps = float(attrs.pop("qk_norm_epsilon", 1e-6))
            for slot, weight in ((0, node.input[14]), (1, node.input[15])):
                if not node.input[slot]:
                    raise ValueError(f"{node.name}: q/k norms on packed QKV are not unfolded here")
                src, tag = node.input[slot], f"{node.name}/cpu_ep_{'qk'[slot]}_norm"
                # [B, S, N * H] -> [B, S, N, H] (0 copies a dim; H from the weight's length)
                shape = f"{tag}/shape"
                graph.initializer.append(numpy_helper.from_array(
                    np.array([0, 0, -1, _initializer_length(graph, weight)], np.int64), shape))
                nodes += [helper.make_node("Reshape", [src, shape], [f"{tag}/heads"], name=f"{tag}/to_heads"),
                          helper.make_node("SimplifiedLayerNormalization", [f"{tag}/heads", weight], [f"{tag}/normed"],
                                       name=f"{tag}/norm", axis=-1, epsilon=eps),
                          helper.make_node("Shape", [src], [f"{tag}/flat"], name=f"{tag}/flat_shape"),
                          helper.make_node("Reshape", [f"{tag}/normed", f"{tag}/flat"], [f"{tag}/out"],
                                       name=f"{tag}/back")]
                node.input[slot] = f"{tag}/out"
            del node.input[14:]
            del node.attribute[:]
            node.attribute.extend(helper.make_attribute(k, v) for k, v in attrs.items())
        nodes.append(node)
    graph.ClearField("node")
    graph.node.extend(nodes)
    _save_beside(folder, out, model)
    return out


def _initializer_length(graph, name: str) -> int:
    init = next((i for i in graph.initializer if i.name == name), None)
    if init is None or len(init.dims) != 1:
        raise ValueError(f"the q/k norm weight '{name}' is not a 1-D initializer")
    return int(init.dims[0])


def _drop_provider_options(config_path: str) -> None:
    """Empties the decoder's provider list in a genai_config.json: onnxruntime-genai then runs the
    model on the CPU EP unless the application appends a provider."""
    with open(config_path) as f:
        config = json.load(f)
    config["model"]["decoder"].setdefault("session_options", {})["provider_options"] = []
    with open(config_path, "w") as f:
        json.dump(config, f, indent=4)


def genai_config(folder: str) -> dict:
    with open(os.path.join(folder, "genai_config.json")) as f:
        return json.load(f)


def decoder_feeds(inputs, head_size: int, ids, past_len: int, prev: dict | None, window: int = 0) -> dict:
    """A builder decoder's feeds for one step, from its session's `inputs`: token `ids`, a mask of
    past_len + new tokens, positions, and as past the previous step's present (`prev`: output name
    → array), or an empty past for a prefill (a sliding-window layer's cache has the capacity
    `window` from the start)."""
    import numpy as np

    f = {}
    for i in inputs:
        if i.name == "input_ids":
            f[i.name] = ids
        elif i.name == "attention_mask":
            f[i.name] = np.ones((1, past_len + ids.shape[1]), np.int64)
        elif i.name == "position_ids":
            positions = np.arange(past_len, past_len + ids.shape[1], dtype=np.int64)[None]
            # a VLM text decoder's [3, batch, sequence]: text tokens give all three streams the same
            f[i.name] = np.repeat(positions[None], 3, axis=0) if len(i.shape) == 3 else positions
        elif i.name.startswith("past.") and prev is not None:  # a linear-attention layer's states
            f[i.name] = prev[i.name.replace("past.", "present.", 1)]
        elif i.name.startswith("past."):
            dtype = _feed_dtype(i.type)
            f[i.name] = np.zeros([d if isinstance(d, int) else ids.shape[0] for d in i.shape], dtype)
        elif i.name.startswith("past_key_values."):
            if prev is None:
                dtype = _feed_dtype(i.type)
                capacity = window if i.shape[2] == "past_sliding_length" else 0
                f[i.name] = np.zeros((1, i.shape[1], capacity, head_size), dtype)
            else:
                f[i.name] = prev[i.name.replace("past_key_values.", "present.")]
        else:
            raise ValueError(f"no feed for the model's input '{i.name}'")
    return f


def _feed_dtype(ort_type: str):
    """The numpy dtype of an ORT input type string ("tensor(bfloat16)", "tensor(float16)", ...)."""
    if "bfloat16" in ort_type:
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.float16 if "float16" in ort_type else np.float32


def decoder_steps(path: str, head_size: int, prompt: int = 5, decode: int = 2, seed: int = 3,
                  window: int = 0) -> list[dict]:
    """Feeds of a prefill of `prompt` random tokens and `decode` decode steps of a builder decoder;
    each step's past is the CPU EP's present of the step before, so each feed stands on its own.
    `window`: the sliding-window layers' cache capacity (genai_config's sliding_window), if any."""
    import numpy as np
    import onnxruntime as ort

    folder = os.path.dirname(os.path.abspath(path))
    if os.path.basename(path) == "model.onnx" and os.path.isfile(os.path.join(folder, "genai_config.json")):
        path = os.path.join(cpu_ep_folder(folder), "model.onnx")  # fused Q/K norms unfolded for the CPU EP
    cpu = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    inputs, outputs = cpu.get_inputs(), [o.name for o in cpu.get_outputs()]
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, VOCAB, size=(1, prompt)).astype(np.int64)
    prev, past, out = None, 0, []
    for _ in range(decode + 1):
        f = decoder_feeds(inputs, head_size, ids, past, prev, window)
        out.append(f)
        prev = dict(zip(outputs, cpu.run(None, f)))
        past += ids.shape[1]
        ids = rng.integers(3, VOCAB, size=(1, 1)).astype(np.int64)
    return out


def build_test_decoders() -> int:
    """Builds (or finds cached) every TEST_DECODERS model and the form of it ORT's CPU EP runs;
    prints one line each. Returns how many could not be built."""
    failed = 0
    for arch, precision in TEST_DECODERS:
        try:
            folder = decoder(arch, precision)
            cpu_ep_folder(folder)
            print(f"{arch} {precision}: {folder}", flush=True)
        except Exception as e:  # noqa: BLE001 - the builder's own words, then the next model
            failed += 1
            print(f"{arch} {precision}: FAILED: {type(e).__name__}: {str(e).strip().splitlines()[-1:]}", flush=True)
    return failed


if __name__ == "__main__":
    import argparse
    import sys

    ap = argparse.ArgumentParser(description="hipep's builder test decoders, built into the model cache "
                                             "(HIPEP_CACHE_DIR, default ~/.cache/hipep)")
    ap.add_argument("--test-models", action="store_true", help="build every tiny decoder the tests use")
    args = ap.parse_args()
    if not args.test_models:
        ap.error("nothing to do: pass --test-models")
    sys.exit(1 if build_test_decoders() else 0)
