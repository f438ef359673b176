"""com.microsoft QMoE on the cuda device without a GPU: single-node models built with onnx.helper
are claimed whole by hipep.explain(device="cuda") -- 4- and 8-bit experts, row-wise and block-wise
scales, zero points, router_weights, the dequantize path and the int8-activation one, f32 and f16
-- and every claimed subgraph binds its launches (hipep.tools.cuda_dry_run). A form the kernels do
not cover is left to other EPs with the reason. The launches' numbers are checked on the host
stand-in (test_moe_on_host.py) and on a GPU (tests/gpu/test_gpu_moe.py)."""
from __future__ import annotations

import numpy as np
import pytest

import hipep
from hipep.tools.cuda_dry_run import dry_run

from unit.test_ops_contrib import MS, W, build, qmoe_inputs

F32, F16 = np.float32, np.float16
GPT_OSS = {"swiglu_limit": 7.0, "activation_alpha": 1.702, "activation_beta": 1.0}


def _model(ins, attrs, dtype):
    model = build("QMoE", MS, ins, attrs, out_dtypes=[dtype])
    feeds = {f"x{i}": a for i, a in enumerate(ins) if a is not None and not isinstance(a, W)}
    return model, feeds


@pytest.mark.parametrize("bits,bs,act,dtype,zp,k,extra,rw", [
    (4, 0, "silu", F32, False, 2, {}, False),
    (8, 0, "swiglu", F16, True, 1, GPT_OSS, True),
    (4, 32, "swiglu", F32, True, 2, GPT_OSS, False),
    (4, 16, "swiglu", F16, False, 2, {"accuracy_level": 4}, False),   # int8 activations
    (8, 64, "silu", F32, True, 2, {"normalize_routing_weights": 0}, True),  # int8 at every level
    (8, 128, "gelu", F16, False, 1, {}, False),
])
def test_qmoe_is_claimed_whole_and_binds(bits, bs, act, dtype, zp, k, extra, rw):
    ins, attrs, _ = qmoe_inputs(bits, bs, act, dtype=dtype, zp=zp, k=k, extra=extra, router_weights=rw, shape=(3,),
                                H=128, I=128)
    model, feeds = _model(ins, attrs, dtype)
    report = hipep.explain(model, device="cuda")
    assert report.all_claimed and report.claimed_count == 1, report.rejection_lines()
    assert dry_run(model, feeds) == 1


def test_qmoe_with_run_time_weights_is_claimed_on_the_dequantize_path():
    ins, attrs, _ = qmoe_inputs(4, 32, "swiglu", zp=True, extra=GPT_OSS)
    ins[2], ins[5] = ins[2].value, ins[5].value  # expert weights fed at run time
    model, feeds = _model(ins, attrs, F32)
    assert hipep.explain(model, device="cuda").all_claimed
    assert dry_run(model, feeds) == 1


def test_qmoe_beyond_the_kernels_is_left_with_the_reason():
    """The cpu device claims k=40 of 40 experts; the cuda device's routing keeps at most 32."""
    ins, attrs, _ = qmoe_inputs(4, 0, "silu", k=40, shape=(2,), E=40, H=32, I=16)
    model, _ = _model(ins, attrs, F32)
    assert hipep.explain(model, device="cpu").all_claimed
    report = hipep.explain(model, device="cuda")
    assert report.claimed_count == 0
    assert "no kernel for cuda: com.microsoft::QMoE (k=40 above 32)" in " ".join(report.rejection_lines())
