"""The Gated DeltaNet ops (Qwen3.5's linear attention: kernels/linear_attention.hip) on the CUDA
device, end to end: single-node models through hipep.InferenceSession(device="cuda"), every node
claimed, compared with ONNX Runtime's CPU EP over three runs (first run, bound replay, CUDA graph
replay): CausalConvWithState, LinearAttentionGate, LinearAttention (every update rule, the head
layouts, Qwen3.5's head sizes) and GatedRMSNorm, and the ai.onnx (opset 27) CausalConvWithState and
LinearAttention; f32 within 1e-5, f16 within 1e-2."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from hipep.runtime.cuda import cuda_status
from gpu_checks import check_on_cuda
from ort_differences import FOLLOWED, ORT_VERSION
from helpers import make_model, tensor
from unit.test_ops_attention import ort_has
from unit.test_ops_linear_attention import U, _rng, linear_attention_inputs

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

MS = "com.microsoft"
ONNX = ""  # the default domain: the ops ONNX standardised in opset 27


def _model(op, ins, n_out, domain, **attrs):
    names = [f"x{i}" if a is not None else "" for i, a in enumerate(ins)]
    node = helper.make_node(op, names, [f"y{i}" for i in range(n_out)], domain=domain, name="node", **attrs)
    inputs = [tensor(nm, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)) for nm, a in zip(names, ins) if nm]
    outputs = [tensor(f"y{i}", helper.np_dtype_to_tensor_dtype(ins[0].dtype), None) for i in range(n_out)]
    feeds = {nm: a for nm, a in zip(names, ins) if nm}
    if domain == ONNX:
        return make_model([node], inputs, outputs, opset=27), feeds
    return make_model([node], inputs, outputs, opset=21, extra_opsets=[(MS, 1)]), feeds


def _run(op, ins, n_out, dtype, domain=MS, **attrs):
    if not ort_has(op, domain) and ORT_VERSION >= FOLLOWED:
        pytest.skip(f"ORT's CPU EP has no {domain or 'ai.onnx'}::{op} to compare with")
    model, feeds = _model(op, ins, n_out, domain, **attrs)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-2, atol=1e-2)
    check_on_cuda(model, feeds, claimed=True, tol=tol, newest=True)


@pytest.mark.parametrize("domain", [MS, ONNX], ids=["contrib", "ai.onnx"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("length,past", [(1, True), (9, True), (5, False)], ids=["decode", "prefill", "no-past"])
def test_causal_conv_with_state(length, past, dtype, domain):
    rng = _rng(f"conv{length}{past}")
    b, c, k = 2, 256, 4
    ins = [U(rng, b, c, length, dtype=dtype), U(rng, c, 1, k, dtype=dtype), U(rng, c, dtype=dtype),
           U(rng, b, c, k - 1, dtype=dtype) if past else None]
    while ins[-1] is None:
        ins.pop()
    _run("CausalConvWithState", ins, 2, dtype, domain=domain, activation="silu")


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_linear_attention_gate(dtype):
    rng = _rng("gate")
    ins = [U(rng, 2, 5, 32, dtype=dtype, scale=30), U(rng, 32), -np.exp(U(rng, 32)),
           U(rng, 2, 5, 32, dtype=dtype, scale=6)]
    _run("LinearAttentionGate", ins, 2, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("heads", [(2, 2), (4, 2), (2, 4)], ids=["mha", "gqa", "more-kv-heads"])
@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
def test_linear_attention(rule, heads, dtype):
    rng = _rng(f"la{rule}{heads}")
    ins = linear_attention_inputs(rng, rule, *heads, dtype=dtype, dk=32, dv=48, tokens=6)
    _run("LinearAttention", ins, 2, dtype, q_num_heads=heads[0], kv_num_heads=heads[1], update_rule=rule)


@pytest.mark.parametrize("tokens", [1, 7], ids=["decode", "prefill"])
def test_linear_attention_qwen35_heads(tokens):
    """Qwen3.5's layer: 16 query-key heads over 32 value heads of 128."""
    rng = _rng(f"qwen35{tokens}")
    ins = linear_attention_inputs(rng, "gated_delta", 16, 32, dk=128, dv=128, tokens=tokens, batch=1, key_heads=16)
    _run("LinearAttention", ins, 2, np.float32, q_num_heads=16, kv_num_heads=32, update_rule="gated_delta")


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("act,c", [("silu", 128), ("sigmoid", 16)])
def test_gated_rms_norm(act, c, dtype):
    rng = _rng(f"grn{act}")
    ins = [U(rng, 1, 3, 32 * c, dtype=dtype), U(rng, c, dtype=dtype) + 1, U(rng, 1, 3, 32 * c, dtype=dtype, scale=4)]
    _run("GatedRMSNorm", ins, 1, dtype, activation=act, epsilon=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("heads", [(2, 2), (4, 2), (4, 1)], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
def test_onnx_linear_attention(rule, heads, dtype):
    rng = _rng(f"onnx-la{rule}{heads}")
    ins = linear_attention_inputs(rng, rule, *heads, dtype=dtype, dk=32, dv=48, tokens=6, per_key_decay=True)
    _run("LinearAttention", ins, 2, dtype, domain=ONNX, q_num_heads=heads[0], kv_num_heads=heads[1], update_rule=rule)
