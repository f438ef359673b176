"""Bit-exactness against ONNX Runtime's CPU EP for the references that replay its MLAS kernels.

onnxruntime-genai int4 decoders quantize every MatMulNBits input to int8 per block
(accuracy_level=4): a 1-ulp difference upstream can flip an int8 code and move the logits by ~0.05,
enough to change a greedy token. So for f32 the references of MatMulNBits (4 bits, block 32),
Sigmoid, Tanh, Gelu(tanh), Softmax, LogSoftmax, LayerNormalization, the rotary embeddings and
GroupQueryAttention reproduce ORT 1.31's arithmetic bit for bit, and these tests compare bits, not
tolerances: random inputs of decoder-like sizes, a synthetic int4 decoder block end to end through
hipep.InferenceSession, and (when cached) every node output of the model-builder int4 decoders.

The emulated kernels are the x86-64 AVX512(-VNNI) ones ORT dispatches on such CPUs; elsewhere ORT
runs other kernels, so the module is skipped there.
"""
from __future__ import annotations

import os
from fractions import Fraction

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from hipep.graph import GraphView
from hipep.ops import lookup, resolve_attributes
from hipep.ops.elementwise import fma_f32

from helpers import cpu_flags


pytestmark = pytest.mark.skipif(
    not {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni", "fma"} <= cpu_flags(),
    reason="the references replay ORT's x86-64 AVX512-VNNI kernels")

IR_VERSION = 10
MS = "com.microsoft"
f32 = np.float32
F = TensorProto.FLOAT


def _model(node, inputs, inits=(), opsets=(("", 21),)):
    g = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info(o, F, None) for o in node.output],
                          list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets], ir_version=IR_VERSION)


def _ort(model, feeds, level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _reference(model, feeds):
    """The registry reference of the model's single node, on feeds + initializers."""
    g = GraphView.from_onnx(model)
    node = g.nodes[0]
    op = lookup(node.domain, node.op_type)
    values = dict(feeds)
    values.update({i.name: numpy_helper.to_array(i) for i in model.graph.initializer})
    return op.reference([values[x] if x else None for x in node.inputs], resolve_attributes(op, node))


def _assert_bits(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        same = (g.view(np.uint32) == w.view(np.uint32)) | (np.isnan(g) & np.isnan(w))
        bad = int((~same).sum())
        assert bad == 0, f"{bad} of {g.size} values differ (max |diff| {np.nanmax(np.abs(g - w)):.3g})"


def _check(model, feeds):
    _assert_bits(_reference(model, feeds), _ort(model, feeds))


# ---- fma_f32 ------------------------------------------------------------------------------------

def test_fma_f32_is_correctly_rounded():
    rng = np.random.default_rng(0)
    a = rng.standard_normal(400).astype(f32)
    b = rng.standard_normal(400).astype(f32)
    c = (rng.standard_normal(400) * np.exp2(rng.integers(-30, 30, 400))).astype(f32)
    # exact ties of the f64 sum: a*b = 1 + 2^-24 (half an f32 ulp) plus a tiny c of either sign
    a[:2], b[:2], c[:2] = f32(1 + 2 ** -12), f32(1 + 2 ** -12), [f32(2 ** -60), f32(-2 ** -60)]
    got = fma_f32(a, b, c)
    for x, y, z, r in zip(a, b, c, got):
        exact = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
        near = np.float32(float(exact))
        cands = [np.nextafter(near, f32(-np.inf)), near, np.nextafter(near, f32(np.inf))]
        best = min(abs(Fraction(float(v)) - exact) for v in cands)
        assert abs(Fraction(float(r)) - exact) == best


# ---- elementwise --------------------------------------------------------------------------------

def _unary_inputs():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.standard_normal(20000) * s for s in (0.01, 0.3, 1, 3, 10, 40)]).astype(f32)
    special = [0, -0.0, 5, -5, 9, -9, 18, -18, 20, -30, 88, -88, 1e-30, -1e-38, np.inf, -np.inf, np.nan]
    return np.concatenate([x, np.array(special, f32)])


@pytest.mark.parametrize("op,attrs", [("Sigmoid", {}), ("Tanh", {}), ("Gelu", {"approximate": "tanh"})],
                         ids=["Sigmoid", "Tanh", "Gelu-tanh"])
def test_unary(op, attrs):
    x = _unary_inputs()
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    _check(_model(node, [helper.make_tensor_value_info("x", F, list(x.shape))]), {"x": x})


# ---- Softmax / LogSoftmax / LayerNormalization --------------------------------------------------

@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape,axis", [((64, 1), -1), ((64, 7), -1), ((8, 17, 3), 1), ((4, 50), -1),
                                        ((2, 130), -1), ((3, 4, 33), 0)])
def test_softmax(op, shape, axis):
    x = (np.random.default_rng(sum(shape)).standard_normal(shape) * 4).astype(f32)
    node = helper.make_node(op, ["x"], ["y"], axis=axis)
    _check(_model(node, [helper.make_tensor_value_info("x", F, list(shape))], opsets=(("", 13),)), {"x": x})


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("shape,axis", [((40, 2), -1), ((40, 7), -1), ((40, 8), -1), ((40, 13), -1),
                                        ((7, 64), -1), ((5, 131), -1), ((3, 4, 5), 1)])
def test_layer_norm(shape, axis, bias):
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(f32)
    norm = shape[axis:]
    inits = [numpy_helper.from_array(rng.standard_normal(norm).astype(f32), "s")]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(norm).astype(f32), "b"))
    node = helper.make_node("LayerNormalization", ["x", "s"] + (["b"] if bias else []), ["y", "mean", "inv"],
                            axis=axis, epsilon=1e-5)
    _check(_model(node, [helper.make_tensor_value_info("x", F, list(shape))], inits, (("", 17),)), {"x": x})


# ---- MatMulNBits --------------------------------------------------------------------------------

def _nbits_model(rng, k, n, bias=False, zero_points=False, block=32):
    nb = -(-k // block)
    q = rng.integers(0, 16, size=(n, nb * block), dtype=np.uint8)
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(n, nb, block // 2).astype(np.uint8)
    scales = (rng.uniform(0.5, 1.5, n * nb) * 0.05).astype(f32)
    inits = [numpy_helper.from_array(packed, "B"), numpy_helper.from_array(scales, "S")]
    names = ["A", "B", "S"]
    if zero_points:
        zq = rng.integers(0, 16, size=(n, nb + nb % 2), dtype=np.uint8)
        inits.append(numpy_helper.from_array((zq[:, 0::2] | (zq[:, 1::2] << 4)).reshape(-1), "Z"))
        names.append("Z")
    if bias:
        names += [""] * (5 - len(names)) + ["bias"]
        inits.append(numpy_helper.from_array(rng.standard_normal(n).astype(f32), "bias"))
    node = helper.make_node("MatMulNBits", names, ["Y"], domain=MS, K=k, N=n, bits=4, block_size=block,
                            accuracy_level=4)
    return _model(node, [helper.make_tensor_value_info("A", F, ["m", k])], inits, (("", 21), (MS, 1)))


@pytest.mark.parametrize("k,n,m,bias,zp", [
    (64, 128, 1, False, False), (64, 128, 7, False, False), (128, 384, 3, False, False),
    (256, 128, 2, False, False), (64, 130, 5, False, False), (100, 7, 3, True, False),
    (96, 64, 4, False, True), (512, 36, 40, True, True), (2048, 16, 2, False, False)])
def test_matmul_nbits_int8_blk32(k, n, m, bias, zp):
    rng = np.random.default_rng(k * 7 + n + m)
    model = _nbits_model(rng, k, n, bias, zp)
    a = (rng.standard_normal((m, k)) * rng.uniform(0.1, 10)).astype(f32)
    a[0, :min(k, 32)] = 0.0  # an all-zero block quantizes with scale 0
    _check(model, {"A": a})


# ---- rotary embeddings and GroupQueryAttention --------------------------------------------------

def _caches(h, half, positions=1024):
    pos = np.arange(positions)[:, None] / (10000 ** (np.arange(half) / half))[None]
    return np.cos(pos).astype(f32), np.sin(pos).astype(f32)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rotary_dim", [0, 16])
@pytest.mark.parametrize("domain", [MS, ""], ids=["ms", "onnx"])
def test_rotary_embedding(domain, rotary_dim, interleaved):
    rng = np.random.default_rng(rotary_dim + interleaved)
    b, s, n, h = 2, 5, 4, 32
    cos = rng.standard_normal((64, (rotary_dim or h) // 2)).astype(f32)
    sin = rng.standard_normal(cos.shape).astype(f32)
    feeds = {"x": rng.standard_normal((b, s, n * h)).astype(f32), "pos": rng.integers(0, 60, (b, s)).astype(np.int64)}
    inits = [numpy_helper.from_array(cos, "cos"), numpy_helper.from_array(sin, "sin")]
    x_vi = helper.make_tensor_value_info("x", F, [b, s, n * h])
    p_vi = helper.make_tensor_value_info("pos", TensorProto.INT64, [b, s])
    if domain == MS:
        node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS, num_heads=n,
                                rotary_embedding_dim=rotary_dim, interleaved=interleaved)
        model = _model(node, [x_vi, p_vi], inits, (("", 21), (MS, 1)))
    else:
        node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], num_heads=n,
                                rotary_embedding_dim=rotary_dim, interleaved=interleaved)
        model = _model(node, [x_vi, p_vi], inits, (("", 23),))
    _check(model, feeds)


def _gqa_case(n, nkv, h, s, past, batch=1, lens=None, softcap=0.0, window=-1, bias=False, rotary_half=None,
              scale=0.0, seed=0):
    rng = np.random.default_rng(seed)
    total = past + s
    half = rotary_half or h // 2
    cos, sin = _caches(h, half)
    names = ["qkv", "", "", "pk", "pv", "sk", "tot", "cos", "sin", "", "bias" if bias else ""]
    node = helper.make_node("GroupQueryAttention", names, ["o", "present_k", "present_v"], domain=MS,
                            num_heads=n, kv_num_heads=nkv, softcap=softcap, local_window_size=window, do_rotary=1,
                            scale=scale)
    vi = [helper.make_tensor_value_info("qkv", F, [batch, "s", (n + 2 * nkv) * h]),
          helper.make_tensor_value_info("pk", F, [batch, nkv, "p", h]),
          helper.make_tensor_value_info("pv", F, [batch, nkv, "p", h]),
          helper.make_tensor_value_info("sk", TensorProto.INT32, [batch]),
          helper.make_tensor_value_info("tot", TensorProto.INT32, [])]
    feeds = {"qkv": rng.standard_normal((batch, s, (n + 2 * nkv) * h)).astype(f32),
             "pk": rng.standard_normal((batch, nkv, past, h)).astype(f32),
             "pv": rng.standard_normal((batch, nkv, past, h)).astype(f32),
             "sk": (np.array(lens if lens is not None else [total] * batch) - 1).astype(np.int32),
             "tot": np.array(total, np.int32)}
    if bias:
        vi.append(helper.make_tensor_value_info("bias", F, [batch, 1, s, total]))
        feeds["bias"] = rng.standard_normal((batch, 1, s, total)).astype(f32)
    inits = [numpy_helper.from_array(cos, "cos"), numpy_helper.from_array(sin, "sin")]
    return _model(node, vi, inits, (("", 21), (MS, 1))), feeds


# Flash path (no softcap: MlasFlashAttentionGQA; one-token decode through its GEMVs) and the GEMM +
# MLAS-softmax path (softcap), prompts and decode steps, GQA grouping, partial rotary, local windows,
# ragged batches (right-padded prompts), attention_bias, a 1-row query block (S = 33), KV blocks
# longer than MLAS's 128-wide K slices and more than one L2-sized KV block (H = 128, T = 300).
GQA_CASES = {
    "flash-prompt": dict(n=4, nkv=2, h=16, s=7, past=0),
    "flash-decode": dict(n=4, nkv=2, h=16, s=1, past=7),
    "flash-chunk": dict(n=4, nkv=2, h=16, s=2, past=5),
    "flash-33": dict(n=2, nkv=1, h=16, s=33, past=0),
    "flash-partial-rotary": dict(n=4, nkv=4, h=32, s=5, past=3, rotary_half=8),
    "flash-window": dict(n=4, nkv=2, h=16, s=6, past=4, window=3),
    "flash-ragged": dict(n=4, nkv=2, h=16, s=6, past=0, batch=2, lens=[6, 4]),
    "flash-ragged-decode": dict(n=4, nkv=2, h=16, s=1, past=7, batch=2, lens=[8, 5]),
    "flash-bias": dict(n=4, nkv=2, h=16, s=6, past=0, bias=True),
    "flash-long": dict(n=2, nkv=1, h=128, s=300, past=0),
    "softcap-prompt": dict(n=4, nkv=2, h=16, s=7, past=0, softcap=50.0, scale=0.0625),
    "softcap-decode": dict(n=4, nkv=2, h=16, s=1, past=7, softcap=50.0, scale=0.0625),
    "softcap-window": dict(n=4, nkv=2, h=16, s=1, past=9, softcap=30.0, window=4),
    "softcap-ragged-bias": dict(n=4, nkv=2, h=16, s=6, past=0, batch=2, lens=[6, 4], softcap=20.0, bias=True),
    "softcap-long": dict(n=2, nkv=1, h=64, s=300, past=0, softcap=30.0),
}


@pytest.mark.parametrize("case", list(GQA_CASES), ids=list(GQA_CASES))
def test_group_query_attention(case):
    model, feeds = _gqa_case(**GQA_CASES[case])
    _check(model, feeds)


# ---- end to end ---------------------------------------------------------------------------------

def _int4_block():
    """A decoder block as the model builder writes it: LayerNorm -> MatMulNBits (QKV) -> GQA ->
    MatMulNBits -> SiLU (Sigmoid * x) -> MatMulNBits -> Gelu(tanh) -> MatMulNBits -> Tanh softcap."""
    rng = np.random.default_rng(7)
    hidden, heads, kv, h = 64, 4, 2, 16
    inits, nodes = [], []

    def nbits(name, x, k, n):
        nb = k // 32
        q = rng.integers(0, 16, size=(n, k), dtype=np.uint8)
        inits.append(numpy_helper.from_array((q[:, 0::2] | (q[:, 1::2] << 4)).reshape(n, nb, 16), name + "_B"))
        inits.append(numpy_helper.from_array((rng.uniform(0.5, 1.5, n * nb) * 0.1).astype(f32), name + "_S"))
        nodes.append(helper.make_node("MatMulNBits", [x, name + "_B", name + "_S"], [name], domain=MS, K=k, N=n,
                                      bits=4, block_size=32, accuracy_level=4, name=name))
        return name

    cos, sin = _caches(h, h // 2)
    inits += [numpy_helper.from_array(rng.standard_normal(hidden).astype(f32), "ln_s"),
              numpy_helper.from_array(rng.standard_normal(hidden).astype(f32), "ln_b"),
              numpy_helper.from_array(cos, "cos"), numpy_helper.from_array(sin, "sin"),
              numpy_helper.from_array(np.array(30.0, f32), "cap")]
    mk = helper.make_node
    nodes.append(mk("LayerNormalization", ["x", "ln_s", "ln_b"], ["ln"], axis=-1, epsilon=1e-6, name="ln"))
    qkv = nbits("qkv", "ln", hidden, (heads + 2 * kv) * h)
    nodes.append(mk("GroupQueryAttention", [qkv, "", "", "pk", "pv", "sk", "tot", "cos", "sin"],
                    ["attn", "present_k", "present_v"], domain=MS, num_heads=heads, kv_num_heads=kv, do_rotary=1,
                    name="gqa"))
    o = nbits("o", "attn", heads * h, hidden)
    nodes += [mk("Sigmoid", [o], ["sig"], name="sig"), mk("Mul", [o, "sig"], ["silu"], name="silu")]
    up = nbits("up", "silu", hidden, 128)
    nodes.append(mk("Gelu", [up], ["gelu"], approximate="tanh", name="gelu"))
    down = nbits("down", "gelu", 128, hidden)
    nodes += [mk("Div", [down, "cap"], ["scaled"], name="div"), mk("Tanh", ["scaled"], ["th"], name="tanh"),
              mk("Mul", ["th", "cap"], ["y"], name="softcap")]
    i32 = TensorProto.INT32
    inputs = [helper.make_tensor_value_info("x", F, [1, "s", hidden]),
              helper.make_tensor_value_info("pk", F, [1, kv, "p", h]),
              helper.make_tensor_value_info("pv", F, [1, kv, "p", h]),
              helper.make_tensor_value_info("sk", i32, [1]), helper.make_tensor_value_info("tot", i32, [])]
    names = ["ln", qkv, "attn", o, "silu", up, "gelu", down, "y", "present_k", "present_v"]
    outputs = [helper.make_tensor_value_info(v, F, None) for v in names]
    g = helper.make_graph(nodes, "block", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)],
                             ir_version=IR_VERSION), rng


def test_int4_block_end_to_end():
    import hipep

    model, rng = _int4_block()
    hip = hipep.InferenceSession(model.SerializeToString(), device="cpu")
    empty = np.zeros((1, 2, 0, 16), f32)
    prompt = {"x": rng.standard_normal((1, 6, 64)).astype(f32), "pk": empty, "pv": empty,
              "sk": np.array([5], np.int32), "tot": np.array(6, np.int32)}
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        want = _ort(model, prompt, level)
        _assert_bits(hip.run(None, prompt), want)
        step = {"x": rng.standard_normal((1, 1, 64)).astype(f32), "pk": want[-2], "pv": want[-1],
                "sk": np.array([6], np.int32), "tot": np.array(7, np.int32)}
        _assert_bits(hip.run(None, step), _ort(model, step, level))


def _cached_decoder(arch):
    from hipep.tools import model_zoo

    folder = os.path.join(model_zoo.cache_dir(), f"{arch}-int4-v{model_zoo._VERSION}")
    return folder if os.path.isfile(os.path.join(folder, "model.onnx")) else None


@pytest.mark.parametrize("arch", ["llama", "gemma2", "phi"])
def test_int4_decoder_every_node_output(arch):
    """Every intermediate value of the model builder's int4 decoders (a prompt, then one decode
    step) is bit-identical on hipep and on the CPU EP."""
    import onnx

    import hipep
    from hipep.tools import model_zoo

    folder = _cached_decoder(arch)
    if folder is None:
        pytest.skip(f"{arch}-int4 is not in the model cache (tests/models builds it)")
    model = onnx.load(os.path.join(folder, "model.onnx"))
    have = {o.name for o in model.graph.output}
    for nd in model.graph.node:
        model.graph.output.extend(onnx.ValueInfoProto(name=o) for o in nd.output if o and o not in have)
        have.update(nd.output)
    data = model.SerializeToString()
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    cpu = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    hip = hipep.InferenceSession(data, so, device="cpu")
    decoder = model_zoo.genai_config(folder)["model"]["decoder"]
    window = (decoder.get("sliding_window") or {}).get("window_size", 0)
    names = [o.name for o in cpu.get_outputs()]
    ids, past, prev = np.array([[1, 20, 21, 22, 23, 24]], np.int64), 0, None
    for _ in range(2):
        feeds = {}
        for i in cpu.get_inputs():
            if i.name == "input_ids":
                feeds[i.name] = ids
            elif i.name == "attention_mask":
                feeds[i.name] = np.ones((1, past + ids.shape[1]), np.int64)
            elif prev is None:
                cap = window if i.shape[2] == "past_sliding_length" else 0
                feeds[i.name] = np.zeros((1, i.shape[1], cap, decoder["head_size"]), f32)
            else:
                feeds[i.name] = prev[i.name.replace("past_key_values.", "present.")]
        want = dict(zip(names, cpu.run(None, feeds)))
        got = dict(zip([o.name for o in hip.get_outputs()], hip.run(None, feeds)))
        seen = past + ids.shape[1]  # rows of a fixed-capacity (sliding-window) cache past these are unwritten
        differ = [k for k in names if (want[k][:, :, :seen] if k.startswith("present.") else want[k]).tobytes()
                  != (got[k][:, :, :seen] if k.startswith("present.") else got[k]).tobytes()]
        assert not differ, f"{arch}-int4: node outputs differ from the CPU EP: {differ[:5]}"
        past += ids.shape[1]
        ids = np.array([[int(want["logits"][0, -1].argmax())]], np.int64)
        prev = want
