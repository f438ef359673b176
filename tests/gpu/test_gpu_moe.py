"""com.microsoft MoE with float experts and QMoE with 4- and 8-bit ones on the CUDA device
(kernels/moe.hip), end to end: single-node models through hipep.InferenceSession(device="cuda"),
every node claimed, compared with ONNX Runtime's CPU EP (before 1.32, whose kernels the references
mirror, with hipep's CPU reference device: gpu_checks.reference_outputs) over three runs (first run, bound replay,
CUDA graph replay): gpt-oss's fused SwiGLU with a limit and the other activations, routing with and
without normalization (QMoE: and with router_weights), a decode step's one token and a prefill's
several, gpt-oss-sized experts; QMoE's row-wise and block-wise scales, with and without zero points,
its dequantize path and its int8-activation one; f32 within 1e-5, f16 within 1e-2."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from hipep.runtime.cuda import cuda_status
from gpu_checks import check_on_cuda
from helpers import make_model, tensor
from unit.test_ops_contrib import W, moe_inputs, qmoe_inputs

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

GPT_OSS = {"swiglu_limit": 7.0, "activation_alpha": 1.702, "activation_beta": 1.0}


def _model(ins, attrs, op="MoE"):
    names = [f"x{i}" if a is not None else "" for i, a in enumerate(ins)]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op, names, ["y"], domain="com.microsoft", name=op.lower(), **attrs)
    graph_inputs = [tensor(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)) for n, a in zip(names, ins)
                    if n and not isinstance(a, W)]
    inits = [numpy_helper.from_array(a.value, n) for n, a in zip(names, ins) if isinstance(a, W)]
    elem = helper.np_dtype_to_tensor_dtype(ins[0].dtype)
    feeds = {n: a for n, a in zip(names, ins) if n and not isinstance(a, W)}
    return make_model([node], graph_inputs, [tensor("y", elem, None)], inits, opset=21,
                      extra_opsets=[("com.microsoft", 1)]), feeds


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("act,k,extra,shape", [
    ("swiglu", 2, GPT_OSS, (1,)), ("swiglu", 4, GPT_OSS, (9,)), ("silu", 2, {"normalize_routing_weights": 0}, (5,)),
    ("relu", 1, {}, (3,)), ("gelu", 3, {}, (2, 2)), ("identity", 2, {}, (1,)),
], ids=["decode-gpt-oss", "prefill-gpt-oss", "silu-unnormalized", "relu-top1", "gelu-3d", "identity"])
def test_moe(act, k, extra, shape, dtype):
    ins, attrs, _ = moe_inputs(act, dtype=dtype, k=k, extra=extra, shape=shape, E=8, H=256, I=128)
    model, feeds = _model(ins, attrs)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-2, atol=1e-2)
    check_on_cuda(model, feeds, claimed=True, tol=tol, newest=True)


def test_moe_gpt_oss_sized_experts():
    """gpt-oss-20b's expert sizes (hidden 2880, intermediate 2880), 4 of 8 experts, one token."""
    ins, attrs, _ = moe_inputs("swiglu", dtype=np.float16, k=4, extra=GPT_OSS, shape=(1,), E=8, H=2880, I=2880)
    model, feeds = _model(ins, attrs)
    check_on_cuda(model, feeds, claimed=True, tol=dict(rtol=1e-2, atol=1e-2), newest=True)


LEVEL4 = {"accuracy_level": 4}


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("bits,bs,act,zp,k,extra,shape,rw", [
    (4, 0, "silu", False, 2, {}, (3,), False),
    (8, 0, "swiglu", True, 2, GPT_OSS, (1,), False),
    (4, 32, "swiglu", True, 2, GPT_OSS, (5,), False),
    (4, 64, "swiglu", True, 2, {**GPT_OSS, **LEVEL4}, (2,), False),
    (8, 32, "silu", False, 1, {}, (4,), False),
    (8, 128, "swiglu", True, 2, GPT_OSS, (3,), True),
    (4, 16, "gelu", False, 2, {"normalize_routing_weights": 0}, (2, 2), True),
    (8, 16, "identity", True, 4, {}, (9,), False),
], ids=["b4-rowwise-silu", "b8-rowwise-zp-decode", "b4-bs32-zp-prefill", "b4-bs64-int8-level4", "b8-bs32-top1",
        "b8-bs128-zp-router-weights", "b4-bs16-gelu-3d-unnormalized", "b8-bs16-identity-top4"])
def test_qmoe(bits, bs, act, zp, k, extra, shape, rw, dtype):
    ins, attrs, _ = qmoe_inputs(bits, bs, act, dtype=dtype, zp=zp, k=k, extra=extra, router_weights=rw, shape=shape,
                                E=8, H=256, I=128)
    model, feeds = _model(ins, attrs, "QMoE")
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-2, atol=1e-2)
    check_on_cuda(model, feeds, claimed=True, tol=tol, newest=True)


def test_qmoe_gpt_oss_sized_experts():
    """gpt-oss-20b's expert sizes (hidden 2880, intermediate 2880) in 4 bits with blocks of 32, 4 of
    8 experts, one token."""
    ins, attrs, _ = qmoe_inputs(4, 32, "swiglu", dtype=np.float16, zp=True, k=4, extra=GPT_OSS, shape=(1,), E=8,
                                H=2880, I=2880)
    model, feeds = _model(ins, attrs, "QMoE")
    check_on_cuda(model, feeds, claimed=True, tol=dict(rtol=1e-2, atol=1e-2), newest=True)
