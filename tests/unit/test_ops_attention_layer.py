"""A decoder-layer-like model (mask preamble -> MatMul -> GroupQueryAttention -> MatMul) end to end
through hipep.InferenceSession on the CPU device against ONNX Runtime's CPU EP: a prompt and decode
steps with a growing cache, a fixed-capacity cache and gemma2's sliding-window cache, also under a
random schedule (the single-node comparisons of the attention family: test_ops_attention.py)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import hipep

from helpers import window_end

MS = "com.microsoft"
IR_VERSION = 10
f32, f16, i64 = np.float32, np.float16, np.int64

D, HEADS, KV_HEADS, HEAD = 64, 4, 2, 16


def decoder_layer(packed: bool, dtype=f32, window=-1, **gqa_attrs):
    """mask preamble (seqlens_k = ReduceSum(mask) - 1, total = Shape(mask)[1]) -> MatMul ->
    GroupQueryAttention (rotary) -> MatMul, with the KV cache as inputs/outputs."""
    rng = np.random.default_rng(12)
    f = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    n = helper.make_node
    angles = np.arange(32)[:, None] * (1e-2 ** (np.arange(HEAD // 2) / (HEAD // 2)))[None]
    inits = [numpy_helper.from_array(np.array([1], i64), "axis1"), numpy_helper.from_array(np.array(1, i64), "one"),
             numpy_helper.from_array((rng.standard_normal((D, (HEADS + 2 * KV_HEADS) * HEAD)) * .2).astype(dtype),
                                     "w_qkv"),
             numpy_helper.from_array((rng.standard_normal((HEADS * HEAD, D)) * .2).astype(dtype), "w_o"),
             numpy_helper.from_array(np.cos(angles).astype(dtype), "cos"),
             numpy_helper.from_array(np.sin(angles).astype(dtype), "sin")]
    nodes = [n("ReduceSum", ["attention_mask", "axis1"], ["mask_sum"], keepdims=0),
             n("Sub", ["mask_sum", "one"], ["seqlens64"]),
             n("Cast", ["seqlens64"], ["seqlens_k"], to=TP.INT32),
             n("Shape", ["attention_mask"], ["mask_shape"]),
             n("Gather", ["mask_shape", "one"], ["total64"], axis=0),
             n("Cast", ["total64"], ["total_len"], to=TP.INT32),
             n("MatMul", ["hidden", "w_qkv"], ["qkv"])]
    if packed:
        qkv = ["qkv", "", ""]
    else:
        inits.append(numpy_helper.from_array(np.array([HEADS * HEAD, KV_HEADS * HEAD, KV_HEADS * HEAD], i64), "splits"))
        nodes.append(n("Split", ["qkv", "splits"], ["q", "k", "v"], axis=2))
        qkv = ["q", "k", "v"]
    nodes += [n("GroupQueryAttention", qkv + ["past_key", "past_value", "seqlens_k", "total_len", "cos", "sin"],
                ["attn", "present_key", "present_value"], domain=MS, num_heads=HEADS, kv_num_heads=KV_HEADS,
                do_rotary=1, local_window_size=window, **gqa_attrs),
              n("MatMul", ["attn", "w_o"], ["out"])]
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, "decoder_layer",
        [vi("hidden", f, ["batch", "seq", D]), vi("attention_mask", TP.INT64, ["batch", "total"]),
         vi("past_key", f, ["batch", KV_HEADS, "past", HEAD]), vi("past_value", f, ["batch", KV_HEADS, "past", HEAD])],
        [vi("out", f, ["batch", "seq", D]), vi("present_key", f, ["batch", KV_HEADS, "present", HEAD]),
         vi("present_value", f, ["batch", KV_HEADS, "present", HEAD])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
                             ir_version=IR_VERSION)


def _compare(sess, cpu, feeds, dtype):
    got, want = sess.run(None, feeds), cpu.run(None, feeds)
    rtol, atol = (1e-4, 1e-5) if dtype == f32 else (5e-3, 5e-3)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g.astype(f32), w.astype(f32), rtol=rtol, atol=atol)
    return want


def _generate(sess, cpu, mask, dtype, rng, steps=2, capacity=None):
    """A prompt, then decode steps feeding present back as past (growing cache), or with a fixed
    capacity (OGA's shared-buffer layout: past/present of capacity rows, mask = current total)."""
    batch, seq = mask.shape
    cap = 0 if capacity is None else capacity
    past = np.zeros((batch, KV_HEADS, cap, HEAD), dtype)
    feeds = dict(hidden=rng.standard_normal((batch, seq, D)).astype(dtype), attention_mask=mask.astype(i64),
                 past_key=past, past_value=past)
    for _ in range(steps + 1):
        out, pk, pv = _compare(sess, cpu, feeds, dtype)
        mask = np.concatenate([mask, np.ones((batch, 1), mask.dtype)], axis=1)
        feeds = dict(hidden=rng.standard_normal((batch, 1, D)).astype(dtype), attention_mask=mask.astype(i64),
                     past_key=pk, past_value=pv)


@pytest.mark.parametrize("packed,dtype,schedule", [
    (True, f32, {}),
    (False, f32, {"cpu_schedule": "random", "seed": "3"}),
    (True, f16, {"cpu_schedule": "random", "seed": "3"}),
])
def test_decoder_layer_through_hipep(packed, dtype, schedule):
    model = decoder_layer(packed, dtype)
    sess = hipep.InferenceSession(model, device="cpu", **schedule)  # CPU fallback disabled: every node is hipep's
    cpu = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(13)
    _generate(sess, cpu, np.ones((1, 4), i64), dtype, rng)
    _generate(sess, cpu, np.array([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]]), dtype, rng)  # left padded, as OGA feeds it
    _generate(sess, cpu, np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]), dtype, rng)  # right padded


def test_decoder_layer_fixed_capacity_cache_through_hipep():
    model = decoder_layer(True, f32, window=3)
    cpu = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for schedule in ({}, {"cpu_schedule": "random", "seed": "3"}):
        sess = hipep.InferenceSession(model, device="cpu", **schedule)
        rng = np.random.default_rng(14)
        _generate(sess, cpu, np.array([[1, 1, 1, 1], [1, 1, 0, 0]]), f32, rng, steps=3, capacity=16)


def test_decoder_layer_sliding_window_cache_through_hipep():
    """gemma2-style layer: windowed KV cache of capacity 6 for a window of 4, softcap. Each side is
    fed its own present (ORT leaves unwritten cache rows undefined; they are compared only where
    written)."""
    window, capacity = 4, 6
    model = decoder_layer(True, f32, window=window, sliding_window_cache=1, softcap=50.0)
    cpu = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for schedule in ({}, {"cpu_schedule": "random", "seed": "3"}):
        sess = hipep.InferenceSession(model, device="cpu", **schedule)
        rng = np.random.default_rng(17)
        batch, seq = 2, 5
        past = np.zeros((batch, KV_HEADS, capacity, HEAD), f32)
        mine = theirs = (past, past)
        mask = np.ones((batch, seq), i64)
        for step in range(6):
            hidden = rng.standard_normal((batch, seq, D)).astype(f32)
            feeds = lambda kv: dict(hidden=hidden, attention_mask=mask, past_key=kv[0], past_value=kv[1])  # noqa: E731
            got, want = sess.run(None, feeds(mine)), cpu.run(None, feeds(theirs))
            np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
            rows = window_end(mask.shape[1], capacity, window)
            for k in (1, 2):
                assert got[k].shape == want[k].shape == (batch, KV_HEADS, capacity, HEAD)
                np.testing.assert_allclose(got[k][:, :, :rows], want[k][:, :, :rows], rtol=1e-5, atol=1e-6)
            mine, theirs = (got[1], got[2]), (want[1], want[2])
            mask = np.ones((batch, mask.shape[1] + 1), i64)
            seq = 1
