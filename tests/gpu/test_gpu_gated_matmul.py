"""hipep::GatedMatMulNBits on the CUDA device: a gated MLP's gate and up projections and the
program joining them (tests/quant_helpers.gated_mlp_model) through hipep.InferenceSession(device=
"cuda"), against ORT's CPU EP and against hipep's unfused plan on the same GPU.

One row of A runs one rendered kernel (both weights' columns a warp, A staged once); several rows
run the two MatMulNBits into the workspace and the program's kernel. Tolerances are
test_gpu_quant.py's for one MatMulNBits (the program adds one rounding of its inputs at most): rel
L2 against the CPU EP 2e-3 (f16, level 0), 5e-4 / 1e-4 where A is quantized to int8 (level 4),
2e-5 (f32, level 0); against the unfused plan on the GPU, whose projections round to A's type as
the fused kernel's sums do, the same."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP

import hipep
from hipep.runtime.cuda import cuda_status
from helpers import cpu_session
from quant_helpers import gated_mlp_model

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

F32, F16 = TP.FLOAT, TP.FLOAT16


def rel_l2(got, want) -> float:
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(g - w) / max(np.linalg.norm(w), 1e-30))


def _tolerance(elem, level, zp) -> float:
    if level == 4 and zp != "float":
        return 1e-4 if elem == F32 else 5e-4
    return 2e-5 if elem == F32 else 2e-3


@pytest.mark.parametrize("k,n", [(2048, 8192), (4096, 512), (320, 96), (8192, 256)])
@pytest.mark.parametrize("elem,level,zp,activation", [
    (F16, 0, "none", "silu"), (F16, 0, "uint8", "gelu"), (F32, 4, "none", "silu"), (F32, 4, "uint8", "gelu"),
    (F16, 4, "none", "silu"), (F16, 0, "float", "silu"), (F32, 0, "none", "silu")])
@pytest.mark.parametrize("rows", [1, 5])
def test_gated_mlp_follows_the_cpu_ep_and_the_unfused_plan(k, n, elem, level, zp, activation, rows):
    model, feeds = gated_mlp_model([1, "s"], k, n, elem=elem, zp_kind=zp, accuracy_level=level,
                                   activation=activation)
    dtype = np.float16 if elem == F16 else np.float32
    feeds = {"A": (np.random.default_rng(rows).standard_normal((1, rows, k)) * 0.5).astype(dtype)}
    want = cpu_session(model).run(None, feeds)[0]
    fused = hipep.InferenceSession(model, device="cuda")
    unfused = hipep.InferenceSession(model, device="cuda", fusion="off")
    outs = [fused.run(None, feeds)[0] for _ in range(3)]
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])  # replays give the first run's bits
    got, plain = outs[0], unfused.run(None, feeds)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    tol = _tolerance(elem, level, zp)
    assert rel_l2(got, want) < tol
    assert rel_l2(got, plain) < tol
