"""com.microsoft MultiHeadAttention and ai.onnx Attention-23/25 on the CUDA device (kernels/attention_mha.hip,
hipep/runtime/gpu_attention_ops.py), end to end: single-node models through
hipep.InferenceSession(device="cuda"), claimed whole, every output compared with ONNX Runtime's CPU EP over
three runs (first run, bound replay, CUDA graph replay).

Tolerances: f32 relative 1e-5, absolute 2e-5 (scores and values are summed in another order than
MLAS); f16 relative 1e-2, absolute 2e-3 for MultiHeadAttention (f32 inside, rounded once, as the CPU
EP), and relative 2e-2, absolute 4e-3 for ai.onnx Attention, whose CPU kernel rounds the scores and
the probabilities to f16 while the GPU kernel keeps them in f32.

Cases: a ViT-like encoder block ([1, 197, 12 heads x 64], MultiHeadAttention with bias, and the same
as ai.onnx Attention), a causal decoder (grouped heads, prompt then a decode step with past and
present), MultiHeadAttention's key_padding_mask / attention_bias / unidirectional with past, bool and
additive attn_mask broadcasts, softcap and scale, every softmax_precision, head sizes 80/128/256 and a V head size of its own;
Attention-25's sliding windows (a causal left window over a long prompt and its decode step, a
bidirectional window) and its masks that broadcast over queries or hold fewer keys; Attention's
qk_matmul_output in each mode (the same tolerances: the CPU EP rounds each stage to f16, and a
product summed in another order may round one f16 step away)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from hipep.runtime.cuda import cuda_status
from gpu_checks import check_on_cuda
from helpers import make_model, tensor

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

F32, F16 = np.float32, np.float16
MHA_INPUTS = ("query", "key", "value", "bias", "key_padding_mask", "attention_bias", "past_key", "past_value")
ATTN_INPUTS = ("Q", "K", "V", "attn_mask", "past_key", "past_value")


def _elem(dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def single_node(op: str, names, feeds: dict, n_out: int, domain: str | None, opset: int = 23, **attrs):
    """A one-node model over the inputs `names` (None: omitted) fed by `feeds`, outputs y0..y{n-1}."""
    names = list(names)
    while names and names[-1] is None:
        names.pop()
    node = helper.make_node(op, [x or "" for x in names], [f"y{i}" for i in range(n_out)], domain=domain,
                            name="node", **attrs)
    inputs = [tensor(x, _elem(feeds[x].dtype), list(feeds[x].shape)) for x in names if x]
    out_elem = _elem(feeds[names[0]].dtype)
    outputs = [tensor(f"y{i}", out_elem, None) for i in range(n_out)]
    extra = [("com.microsoft", 1)] if domain else []
    return make_model([node], inputs, outputs, opset=opset, extra_opsets=extra)


def _tol(dtype, op: str) -> dict:
    if dtype == F32:
        return dict(rtol=1e-5, atol=2e-5)
    return dict(rtol=1e-2, atol=2e-3) if op == "MultiHeadAttention" else dict(rtol=2e-2, atol=4e-3)


def run_mha(inputs: dict, dtype, n_out=3, **attrs):
    names = [x if x in inputs else None for x in MHA_INPUTS]
    model = single_node("MultiHeadAttention", names, inputs, n_out, "com.microsoft", **attrs)
    check_on_cuda(model, inputs, _elem(dtype), claimed=True, tol=_tol(dtype, "MultiHeadAttention"))


def run_attention(inputs: dict, dtype, n_out=1, opset=23, **attrs):
    names = [x if x in inputs else None for x in ATTN_INPUTS]
    model = single_node("Attention", names, inputs, n_out, None, opset=opset, **attrs)
    check_on_cuda(model, inputs, _elem(dtype), claimed=True, tol=_tol(dtype, "Attention"))


def _rand(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


# ---- ViT-like encoder block: [1, 197, 12 x 64] ---------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16])
def test_vit_encoder_block_multi_head_attention(dtype):
    rng = np.random.default_rng(0)
    b, s, n, h = 1, 197, 12, 64
    feeds = {"query": _rand(rng, (b, s, n * h), dtype), "key": _rand(rng, (b, s, n * h), dtype),
             "value": _rand(rng, (b, s, n * h), dtype), "bias": _rand(rng, (3 * n * h,), dtype, 0.1)}
    run_mha(feeds, dtype, n_out=1, num_heads=n)


@pytest.mark.parametrize("dtype", [F32, F16])
def test_vit_encoder_block_attention_3d(dtype):
    rng = np.random.default_rng(1)
    b, s, n, h = 2, 197, 12, 64
    feeds = {"Q": _rand(rng, (b, s, n * h), dtype), "K": _rand(rng, (b, s, n * h), dtype),
             "V": _rand(rng, (b, s, n * h), dtype)}
    run_attention(feeds, dtype, q_num_heads=n, kv_num_heads=n)


# ---- causal decoder: grouped heads, a prompt, then a decode step ----------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16])
def test_causal_decoder_prompt_and_decode_step(dtype):
    rng = np.random.default_rng(2)
    b, nq, nkv, h, s, p = 2, 16, 4, 64, 100, 127
    prompt = {"Q": _rand(rng, (b, nq, s, h), dtype), "K": _rand(rng, (b, nkv, s, h), dtype),
              "V": _rand(rng, (b, nkv, s, h), dtype)}
    run_attention(prompt, dtype, n_out=3, is_causal=1)
    step = {"Q": _rand(rng, (b, nq, 1, h), dtype), "K": _rand(rng, (b, nkv, 1, h), dtype),
            "V": _rand(rng, (b, nkv, 1, h), dtype), "past_key": _rand(rng, (b, nkv, p, h), dtype),
            "past_value": _rand(rng, (b, nkv, p, h), dtype)}
    run_attention(step, dtype, n_out=3, is_causal=1)
    chunk = {**step, "Q": _rand(rng, (b, nq, 5, h), dtype), "K": _rand(rng, (b, nkv, 5, h), dtype),
             "V": _rand(rng, (b, nkv, 5, h), dtype)}
    run_attention(chunk, dtype, n_out=3, is_causal=1)  # several new tokens after a past: bottom-right causal


def test_causal_decoder_3d_grouped_heads_f16():
    rng = np.random.default_rng(3)
    b, nq, nkv, h, s, p = 1, 8, 2, 128, 7, 33
    feeds = {"Q": _rand(rng, (b, s, nq * h), F16), "K": _rand(rng, (b, s, nkv * h), F16),
             "V": _rand(rng, (b, s, nkv * h), F16), "past_key": _rand(rng, (b, nkv, p, h), F16),
             "past_value": _rand(rng, (b, nkv, p, h), F16)}
    run_attention(feeds, F16, n_out=3, is_causal=1, q_num_heads=nq, kv_num_heads=nkv)


# ---- MultiHeadAttention's options ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16])
def test_mha_padding_attention_bias_past_unidirectional(dtype):
    rng = np.random.default_rng(4)
    b, s, l, p, n, h = 2, 9, 9, 20, 4, 32
    pad = np.ones((b, p + l), np.int32)
    pad[1, :5] = 0
    feeds = {"query": _rand(rng, (b, s, n * h), dtype), "key": _rand(rng, (b, l, n * h), dtype),
             "value": _rand(rng, (b, l, n * h), dtype), "bias": _rand(rng, (3 * n * h,), dtype, 0.1),
             "key_padding_mask": pad, "attention_bias": _rand(rng, (1, n, s, p + l), dtype),
             "past_key": _rand(rng, (b, n, p, h), dtype), "past_value": _rand(rng, (b, n, p, h), dtype)}
    run_mha(feeds, dtype, num_heads=n, unidirectional=1)
    run_mha(feeds, dtype, num_heads=n, scale=0.1)


def test_mha_v_head_size_of_its_own():
    rng = np.random.default_rng(5)
    b, s, l, n, h, hv = 2, 40, 50, 2, 80, 48
    feeds = {"query": _rand(rng, (b, s, n * h), F32), "key": _rand(rng, (b, l, n * h), F32),
             "value": _rand(rng, (b, l, n * hv), F32)}
    run_mha(feeds, F32, num_heads=n)


# ---- ai.onnx Attention's masks, softcap and scale ------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16])
def test_attention_bool_mask_4d_and_additive_mask_2d(dtype):
    rng = np.random.default_rng(6)
    b, n, s, l, h = 2, 4, 33, 45, 64
    base = {"Q": _rand(rng, (b, n, s, h), dtype), "K": _rand(rng, (b, n, l, h), dtype),
            "V": _rand(rng, (b, n, l, h), dtype)}
    keep = rng.uniform(size=(b, 1, s, l)) > 0.4
    keep[1, 0, 3] = False  # a row with every key masked: zeros
    run_attention({**base, "attn_mask": keep}, dtype)
    add = _rand(rng, (s, l), dtype)
    add[:, -7:] = -np.inf
    run_attention({**base, "attn_mask": add}, dtype, softcap=5.0, scale=0.2)
    run_attention({**base, "attn_mask": add}, dtype, is_causal=1)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("precision", [10, 11, 16])
def test_attention_softmax_precision_as_the_cpu_ep(dtype, precision):
    """Every softmax_precision is claimed: the CPU EP computes alike for each value."""
    rng = np.random.default_rng(12)
    b, n, s, h = 1, 4, 9, 64
    feeds = {x: _rand(rng, (b, n, s, h), dtype, 2.0) for x in ("Q", "K", "V")}
    run_attention(feeds, dtype, is_causal=1, softmax_precision=precision)


@pytest.mark.parametrize("h", [80, 128, 256])
def test_attention_head_sizes(h):
    rng = np.random.default_rng(7)
    b, n, s = 1, 2, 70
    feeds = {"Q": _rand(rng, (b, n, s, h), F16), "K": _rand(rng, (b, n, s, h), F16),
             "V": _rand(rng, (b, n, s, h), F16)}
    run_attention(feeds, F16, n_out=3, is_causal=1)


# ---- Attention-25: sliding windows, masks broadcast over queries or holding fewer keys -------------------

@pytest.mark.parametrize("dtype", [F32, F16])
def test_attention_25_causal_window_prompt_and_decode_step(dtype):
    rng = np.random.default_rng(8)
    b, nq, nkv, h, s, p, w = 2, 8, 2, 64, 300, 211, 64
    prompt = {"Q": _rand(rng, (b, nq, s, h), dtype), "K": _rand(rng, (b, nkv, s, h), dtype),
              "V": _rand(rng, (b, nkv, s, h), dtype)}
    run_attention(prompt, dtype, n_out=3, opset=25, is_causal=1, left_window_size=w)
    step = {"Q": _rand(rng, (b, nq, 1, h), dtype), "K": _rand(rng, (b, nkv, 1, h), dtype),
            "V": _rand(rng, (b, nkv, 1, h), dtype), "past_key": _rand(rng, (b, nkv, p, h), dtype),
            "past_value": _rand(rng, (b, nkv, p, h), dtype)}
    run_attention(step, dtype, n_out=3, opset=25, is_causal=1, left_window_size=w)


@pytest.mark.parametrize("dtype", [F32, F16])
def test_attention_25_bidirectional_window_3d_and_rows_with_no_key(dtype):
    rng = np.random.default_rng(9)
    b, nq, nkv, h, s, l = 2, 4, 1, 32, 70, 40
    feeds = {"Q": _rand(rng, (b, s, nq * h), dtype), "K": _rand(rng, (b, l, nkv * h), dtype),
             "V": _rand(rng, (b, l, nkv * h), dtype)}
    # queries past the keys' end plus the right bound see no key: zeros
    run_attention(feeds, dtype, opset=25, q_num_heads=nq, kv_num_heads=nkv, left_window_size=5, right_window_size=3)


@pytest.mark.parametrize("dtype", [F32, F16])
def test_attention_25_masks_broadcast_over_queries_or_hold_fewer_keys(dtype):
    rng = np.random.default_rng(10)
    b, n, s, l, h = 2, 4, 33, 45, 64
    base = {"Q": _rand(rng, (b, n, s, h), dtype), "K": _rand(rng, (b, n, l, h), dtype),
            "V": _rand(rng, (b, n, l, h), dtype)}
    run_attention({**base, "attn_mask": rng.uniform(size=(l,)) > 0.3}, dtype, opset=25, is_causal=1,
                  left_window_size=9)
    run_attention({**base, "attn_mask": _rand(rng, (b, 1, 1, 30), dtype)}, dtype, opset=25, right_window_size=4)


# ---- qk_matmul_output ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_attention_qk_matmul_output_each_mode(dtype, mode):
    """The scores output in each mode beside Y and present: a grouped 4-D decoder step over a past with
    a bool mask (a row with no key), and a 3-D step with an additive mask and a softcap."""
    rng = np.random.default_rng(11)
    b, nq, nkv, s, p, h = 2, 8, 2, 5, 37, 64
    mask = rng.uniform(size=(s, p + s)) > 0.3
    mask[:, 0] = True
    mask[2, :] = False
    feeds = {"Q": _rand(rng, (b, nq, s, h), dtype), "K": _rand(rng, (b, nkv, s, h), dtype),
             "V": _rand(rng, (b, nkv, s, h), dtype), "attn_mask": mask,
             "past_key": _rand(rng, (b, nkv, p, h), dtype), "past_value": _rand(rng, (b, nkv, p, h), dtype)}
    run_attention(feeds, dtype, n_out=4, qk_matmul_output_mode=mode)
    n, l = 4, 19
    feeds = {"Q": _rand(rng, (b, s, n * h), dtype), "K": _rand(rng, (b, l, n * h), dtype),
             "V": _rand(rng, (b, l, n * h), dtype), "attn_mask": _rand(rng, (b, 1, s, l), dtype)}
    run_attention(feeds, dtype, n_out=4, q_num_heads=n, kv_num_heads=n, softcap=2.5, qk_matmul_output_mode=mode)


@pytest.mark.parametrize("mode", [0, 3])
def test_attention_qk_matmul_output_causal_before_and_in_25(mode):
    rng = np.random.default_rng(12)
    b, n, s, h = 1, 4, 40, 64
    feeds = {"Q": _rand(rng, (b, n, s, h), F16), "K": _rand(rng, (b, n, s, h), F16),
             "V": _rand(rng, (b, n, s, h), F16)}
    run_attention(feeds, F16, n_out=4, is_causal=1, qk_matmul_output_mode=mode)
    run_attention(feeds, F16, n_out=4, opset=25, is_causal=1, left_window_size=7, qk_matmul_output_mode=mode)
