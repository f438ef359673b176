"""The models the accuracy harness compares (see accuracy.py). Decoders come from model_zoo (the
onnxruntime-genai model builder); the others are built here with onnx.helper from seeded random
weights."""
from __future__ import annotations

import os

import numpy as np

from .accuracy import FP32_THRESHOLD, LOW_PRECISION_THRESHOLD, Case

IR_VERSION = 10


def _model(nodes, inputs, outputs, inits, opsets=(("", 21),)):
    from onnx import helper

    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets],
                             ir_version=IR_VERSION).SerializeToString()


def _vi(name, elem, shape):
    from onnx import helper

    return helper.make_tensor_value_info(name, elem, shape)


def _w(rng, name, *shape, scale=0.2, dtype=np.float32):
    from onnx import numpy_helper

    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(dtype), name)


# ---- decoders ----------------------------------------------------------------------------------

def _decoder_case(arch: str, precision: str) -> Case:
    from . import model_zoo

    meta: dict[str, int] = {}

    def build():
        folder = model_zoo.decoder(arch, precision)
        path = os.path.join(folder, "model.onnx")
        decoder = model_zoo.genai_config(folder)["model"]["decoder"]
        head_size = decoder["head_size"]
        window = decoder.get("sliding_window", {}).get("window_size", 0) if isinstance(
            decoder.get("sliding_window"), dict) else 8
        rng = np.random.default_rng(5)
        prompt = rng.integers(3, model_zoo.VOCAB, size=(1, 7)).astype(np.int64)
        nxt = rng.integers(3, model_zoo.VOCAB, size=(1, 1)).astype(np.int64)
        meta.update(window=window, prompt=prompt.shape[1])

        def feeds(session, prev, ids, past_len):
            return model_zoo.decoder_feeds(session.get_inputs(), head_size, ids, past_len, prev, window)

        stages = [("prefill", lambda s, prev: feeds(s, None, prompt, 0)),
                  ("decode", lambda s, prev: feeds(s, prev, nxt, prompt.shape[1]))]
        return path, stages

    def trim(stage, name, array):
        # A sliding-window layer's cache has the window's capacity: at prefill only the prompt's
        # rows are written (7 of 8); ORT leaves the rest as it found the memory.
        window, prompt = meta.get("window", 0), meta.get("prompt", 0)
        if (stage == "prefill" and name.startswith("present.") and array.ndim == 4 and window
                and array.shape[2] == window and prompt < window):
            return array[:, :, :prompt]
        return array

    threshold = FP32_THRESHOLD if precision == "fp32" else LOW_PRECISION_THRESHOLD
    return Case(f"{arch}-{precision}", threshold, build,
                genai_folder=lambda: model_zoo.decoder(arch, precision), trim=trim if arch == "gemma2" else None)


# ---- synthetic models --------------------------------------------------------------------------

def _gqa_256():
    from onnx import TensorProto as T, helper, numpy_helper

    rng = np.random.default_rng(1)
    seq, hidden, heads, kv, hs = 256, 64, 4, 2, 16
    pos = np.arange(2 * seq)[:, None] / (10000 ** (np.arange(0, hs, 2) / hs))[None]  # room for decode steps
    inits = [_w(rng, "w_qkv", hidden, (heads + 2 * kv) * hs), _w(rng, "w_o", heads * hs, hidden),
             numpy_helper.from_array(np.cos(pos).astype(np.float32), "cos_cache"),
             numpy_helper.from_array(np.sin(pos).astype(np.float32), "sin_cache"),
             numpy_helper.from_array(np.array([1], np.int64), "axis1"),
             numpy_helper.from_array(np.array(1, np.int64), "one")]
    n = helper.make_node
    nodes = [
        n("ReduceSum", ["attention_mask", "axis1"], ["msum"], keepdims=0, name="msum"),
        n("Sub", ["msum", "one"], ["sk64"], name="sk64"),
        n("Cast", ["sk64"], ["seqlens_k"], to=T.INT32, name="seqlens_k"),
        n("Shape", ["attention_mask"], ["mshape"], name="mshape"),
        n("Gather", ["mshape", "one"], ["tot64"], axis=0, name="tot64"),
        n("Cast", ["tot64"], ["total"], to=T.INT32, name="total"),
        n("MatMul", ["x", "w_qkv"], ["qkv"], name="qkv"),
        n("GroupQueryAttention", ["qkv", "", "", "past_key", "past_value", "seqlens_k", "total", "cos_cache",
                                  "sin_cache"], ["attn", "present_key", "present_value"], domain="com.microsoft",
          num_heads=heads, kv_num_heads=kv, do_rotary=1, name="gqa"),
        n("MatMul", ["attn", "w_o"], ["y"], name="o_proj"),
    ]
    model = _model(nodes, [_vi("x", T.FLOAT, [1, "s", hidden]), _vi("attention_mask", T.INT64, [1, "t"]),
                           _vi("past_key", T.FLOAT, [1, kv, "p", hs]), _vi("past_value", T.FLOAT, [1, kv, "p", hs])],
                   [_vi("y", T.FLOAT, None), _vi("present_key", T.FLOAT, None), _vi("present_value", T.FLOAT, None)],
                   inits, opsets=(("", 21), ("com.microsoft", 1)))
    x = rng.standard_normal((1, seq, hidden)).astype(np.float32)
    empty = np.zeros((1, kv, 0, hs), np.float32)
    prefill = {"x": x, "attention_mask": np.ones((1, seq), np.int64), "past_key": empty, "past_value": empty}

    def decode(session, prev):
        return {"x": rng.standard_normal((1, 1, hidden)).astype(np.float32),
                "attention_mask": np.ones((1, seq + 1), np.int64),
                "past_key": prev["present_key"], "past_value": prev["present_value"]}

    return model, [("prefill", prefill), ("decode", decode)]


def _pack_nbits(rng, n, k, bits, block):
    blocks = -(-k // block)
    q = rng.integers(0, 1 << bits, size=(n, blocks * block), dtype=np.uint8)
    if bits == 4:
        packed = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(n, blocks, block // 2)
    else:
        packed = q.reshape(n, blocks, block)
    scales = (rng.uniform(0.5, 1.5, size=(n * blocks)) * 0.05).astype(np.float32)
    return packed.astype(np.uint8), scales


def _matmul_nbits():
    from onnx import TensorProto as T, helper, numpy_helper

    rng = np.random.default_rng(2)
    k, n1, n2 = 256, 128, 64
    b1, s1 = _pack_nbits(rng, n1, k, 4, 32)
    b2, s2 = _pack_nbits(rng, n2, n1, 8, 64)
    inits = [numpy_helper.from_array(b1, "b1"), numpy_helper.from_array(s1, "s1"),
             numpy_helper.from_array(b2, "b2"), numpy_helper.from_array(s2, "s2")]
    n = helper.make_node
    nodes = [n("MatMulNBits", ["x", "b1", "s1"], ["h"], domain="com.microsoft", K=k, N=n1, bits=4, block_size=32,
               accuracy_level=4, name="q4"),
             n("Relu", ["h"], ["hr"], name="relu"),
             n("MatMulNBits", ["hr", "b2", "s2"], ["y"], domain="com.microsoft", K=n1, N=n2, bits=8, block_size=64,
               accuracy_level=0, name="q8")]
    model = _model(nodes, [_vi("x", T.FLOAT, ["m", k])], [_vi("y", T.FLOAT, None)], inits,
                   opsets=(("", 21), ("com.microsoft", 1)))
    return model, [("run", {"x": rng.standard_normal((5, k)).astype(np.float32)})]


def _qmoe():
    """A mixture-of-experts layer with 4-bit experts (per-row scales), top-2 routing, SiLU."""
    from onnx import TensorProto as T, helper, numpy_helper

    rng = np.random.default_rng(6)
    experts, hidden, inter, tokens = 4, 64, 32, 6

    def packed(rows, cols):
        q = rng.integers(0, 16, size=(experts, rows, cols), dtype=np.uint8)
        return (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)

    inits = [numpy_helper.from_array(packed(inter, hidden), "fc1"),
             numpy_helper.from_array(rng.uniform(0.01, 0.03, (experts, inter)).astype(np.float32), "fc1_scales"),
             numpy_helper.from_array(packed(hidden, inter), "fc2"),
             numpy_helper.from_array(rng.uniform(0.01, 0.03, (experts, hidden)).astype(np.float32), "fc2_scales")]
    node = helper.make_node("QMoE", ["x", "router", "fc1", "fc1_scales", "", "fc2", "fc2_scales"], ["y"],
                            domain="com.microsoft", k=2, activation_type="silu", expert_weight_bits=4,
                            normalize_routing_weights=1, name="moe")
    model = _model([node], [_vi("x", T.FLOAT, ["t", hidden]), _vi("router", T.FLOAT, ["t", experts])],
                   [_vi("y", T.FLOAT, None)], inits, opsets=(("", 21), ("com.microsoft", 1)))
    feeds = {"x": rng.standard_normal((tokens, hidden)).astype(np.float32),
             "router": rng.standard_normal((tokens, experts)).astype(np.float32)}
    return model, [("run", feeds)]


def _conv_net():
    from onnx import TensorProto as T, helper

    rng = np.random.default_rng(3)
    inits = [_w(rng, "c1", 8, 3, 3, 3), _w(rng, "b1", 8), _w(rng, "c2", 16, 4, 3, 3), _w(rng, "fc", 16, 10),
             _w(rng, "fcb", 10)]
    n = helper.make_node
    nodes = [n("Conv", ["x", "c1", "b1"], ["h1"], pads=[1, 1, 1, 1], name="conv1"),
             n("Relu", ["h1"], ["r1"], name="relu1"),
             n("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"),
             n("Conv", ["p1", "c2"], ["h2"], group=2, pads=[1, 1, 1, 1], name="conv2"),
             n("Relu", ["h2"], ["r2"], name="relu2"),
             n("GlobalAveragePool", ["r2"], ["g"], name="gap"),
             n("Flatten", ["g"], ["f"], name="flatten"),
             n("Gemm", ["f", "fc", "fcb"], ["y"], name="fc")]
    model = _model(nodes, [_vi("x", T.FLOAT, ["n", 3, 16, 16])], [_vi("y", T.FLOAT, None)], inits)
    return model, [("run", {"x": rng.standard_normal((2, 3, 16, 16)).astype(np.float32)})]


def _vit_block():
    from onnx import TensorProto as T, helper, numpy_helper

    rng = np.random.default_rng(4)
    d, heads = 64, 4
    hs = d // heads
    inits = [_w(rng, "ln1_s", d, scale=1.0), _w(rng, "ln1_b", d), _w(rng, "w_qkv", d, 3 * d), _w(rng, "w_o", d, d),
             _w(rng, "ln2_s", d, scale=1.0), _w(rng, "ln2_b", d), _w(rng, "w_1", d, 4 * d), _w(rng, "w_2", 4 * d, d),
             numpy_helper.from_array(np.array([0, 0, 3, heads, hs], np.int64), "qkv_shape"),
             numpy_helper.from_array(np.array([0, 0, d], np.int64), "merge_shape"),
             numpy_helper.from_array(np.array(np.sqrt(hs), np.float32), "scale")]
    n = helper.make_node
    nodes = [n("LayerNormalization", ["x", "ln1_s", "ln1_b"], ["h"], epsilon=1e-6, name="ln1"),
             n("MatMul", ["h", "w_qkv"], ["qkv0"], name="qkv"),
             n("Reshape", ["qkv0", "qkv_shape"], ["qkv1"], name="split_heads"),
             n("Transpose", ["qkv1"], ["qkv"], perm=[2, 0, 3, 1, 4], name="heads_first"),
             n("Split", ["qkv"], ["q0", "k0", "v0"], axis=0, num_outputs=3, name="split_qkv"),
             n("Squeeze", ["q0"], ["q"], name="q"), n("Squeeze", ["k0"], ["k"], name="k"),
             n("Squeeze", ["v0"], ["v"], name="v"),
             n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2], name="kt"),
             n("MatMul", ["q", "kt"], ["s0"], name="scores"), n("Div", ["s0", "scale"], ["s"], name="scaled"),
             n("Softmax", ["s"], ["p"], axis=-1, name="softmax"), n("MatMul", ["p", "v"], ["c0"], name="context"),
             n("Transpose", ["c0"], ["c1"], perm=[0, 2, 1, 3], name="merge"),
             n("Reshape", ["c1", "merge_shape"], ["c"], name="merge_heads"),
             n("MatMul", ["c", "w_o"], ["o"], name="out"), n("Add", ["o", "x"], ["r1"], name="residual1"),
             n("LayerNormalization", ["r1", "ln2_s", "ln2_b"], ["h2"], epsilon=1e-6, name="ln2"),
             n("MatMul", ["h2", "w_1"], ["m1"], name="fc1"), n("Gelu", ["m1"], ["g"], name="gelu"),
             n("MatMul", ["g", "w_2"], ["m2"], name="fc2"), n("Add", ["m2", "r1"], ["y"], name="residual2")]
    model = _model(nodes, [_vi("x", T.FLOAT, ["b", 17, d])], [_vi("y", T.FLOAT, None)], inits)
    return model, [("run", {"x": rng.standard_normal((2, 17, d)).astype(np.float32)})]


def CASES() -> list[Case]:
    from . import model_zoo

    # (the bf16 builds are not here: the harness runs ORT's CPU EP on the same model, and it has no
    # bf16 kernels for their MatMul, norms or attention; tests/teacher_forcing.py compares those)
    cases = [_decoder_case(a, p) for a in model_zoo.ARCHITECTURES for p in model_zoo.PRECISIONS
             if p not in model_zoo.BF16_PRECISIONS]
    cases += [Case("gqa-seq256", FP32_THRESHOLD, _gqa_256), Case("matmulnbits", LOW_PRECISION_THRESHOLD, _matmul_nbits),
              Case("qmoe", LOW_PRECISION_THRESHOLD, _qmoe), Case("conv-net", FP32_THRESHOLD, _conv_net), Case("vit-block", FP32_THRESHOLD, _vit_block)]
    return cases
