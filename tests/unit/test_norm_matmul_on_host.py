"""hipep::SkipNormMatMulNBits's fused kernels (kernels/matmul_nbits_row.h with the norm as A's
source, rendered by hipep/runtime/gpu_norm_matmul.py) run on the host stand-in (g++ over the
unchanged sources, every block's threads as host threads) against the unfused launches the same
binding gives with the fusion off (the skip norm's kernel into the workspace, then the GEMV's):
the projection's result and the norm's residual sum bit for bit where the norm's own launch has a
thread per 16-byte vector (rows up to 2048 values), and both within the registry reference's
tolerance. Each GEMV form: the tiled kernel, row1, the K split between two warps, the gated MLP.
Skipped without g++."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from hipep.ops.registry import OUTPUT_COUNT, lookup
from hipep.runtime import gpu_kernels as gk
from hipep.runtime import gpu_norm_matmul as gnm
from hipep.runtime import gpu_quant as gq
from unit.host_kernels import EXACT_FLAGS, HostMemory, compile_module, compile_source, launch

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
f16 = np.float16
NORMED = "hipep::SkipNormMatMulNBits"


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    out = tmp_path_factory.mktemp("host_normed")
    built = {m: compile_module(out, m, 32, EXACT_FLAGS)
             for m in ("rms_norm", "matmul_nbits_row", "matmul_nbits_tc", "matmul_nbits")}
    built["dir"] = out
    return built


def _case(kind: str, k: int, n: int, zp_kind: str, norm_bias: bool, seed: int, elem: int = 10):
    """(inputs, attrs) of the fused launch hip-fuse-norm-matmul makes of a skip norm and a
    MatMulNBits (or a gated MLP) with random weights, for one row of `elem` (fp16 or bf16)."""
    from onnx import numpy_helper

    from hipep.compiler import compile_subgraph
    from hipep.graph import GraphView
    from hipep.plan import Launch, walk
    from quant_helpers import gated_mlp_model, matmul_nbits_model, with_skip_norm

    if kind == "gated":
        model, feeds = gated_mlp_model([1, 1], k, n, elem=elem, zp_kind=zp_kind, seed=seed)
    else:
        model, feeds, _ = matmul_nbits_model([1, 1], k, n, 4, 32, elem=elem, zp_kind=zp_kind, seed=seed)
    model, feeds = with_skip_norm(model, feeds, k, norm_bias=norm_bias, seed=seed, epsilon=1e-5)
    g = GraphView.from_onnx(model)
    plan = compile_subgraph(g, "layer", list(g.inputs), list(g.outputs), None,
                            held=sorted(set(g.constants) | set(g.weights)))
    (launch_step,) = [st for st in walk(plan.steps) if isinstance(st, Launch)]
    assert launch_step.op == NORMED
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    values = {**inits, **feeds}
    inputs = [None if vid < 0 else values[plan.values[vid].name] for vid in launch_step.inputs]
    return inputs, {**launch_step.attributes, OUTPUT_COUNT: 5}


def _run(libs, inputs, attrs, sm_count, tensor_cores=False):
    """Binds and runs the launch on the host: (Y, residual, the registry's Y and residual, ops)."""
    want = lookup("hipep", "SkipNormMatMulNBits").reference(list(inputs), attrs)
    mem = HostMemory()
    ins = [None if v is None else mem.put(v)[0] for v in inputs]
    y, y_view = mem.put(np.full(want[0].shape, np.nan, want[0].dtype))
    total, total_view = mem.put(np.full(want[4].shape, np.nan, want[4].dtype))
    outs = [gk.Arg(y.ptr, y.shape, y.dtype), None, None, None, gk.Arg(total.ptr, total.shape, total.dtype)]
    target = gk.Target(sm_count=sm_count, warp_size=32, scratch=lambda nbytes: 0,
                       workspace=lambda nbytes: mem.put(np.zeros(nbytes, np.uint8))[0].ptr, tensor_cores=tensor_cores)
    ops = gk.binding_for(NORMED).bind(ins, outs, attrs, target)
    for o in ops:
        if o.module is None:
            path = libs["dir"] / f"{o.entry}.hip"
            path.write_text(o.source)
            lib = libs.setdefault(o.entry, compile_source(libs["dir"], path, o.entry, 32, EXACT_FLAGS))
            launch(lib, o)
        else:
            launch(libs[o.module], o)
    return y_view.copy(), total_view.copy(), want[0], want[4], ops


def _rel(got, want):
    got, want = got.astype(np.float64), want.astype(np.float64)
    return np.linalg.norm(got - want) / np.linalg.norm(want)


@pytest.mark.parametrize("kind,k,n,sm_count,form", [
    ("plain", 1024, 24, 132, "row"),      # the tiled kernel (one chunk a lane)
    ("plain", 2048, 20, 132, "cols"),     # four columns a warp (the QKV and o projections' form)
    ("plain", 2048, 20, 132, "split"),    # two warps a column, one column a warp (HIPEP_MNB_GEMV_ROW_COLS=0)
    ("plain", 1024, 72, 2, "row1"),       # past one wave of the tiled kernel's blocks
    ("plain", 3072, 16, 132, "cols"),     # two vectors of the row a thread, two columns a warp
    ("plain", 3072, 16, 132, "split"),
    ("gated", 1024, 24, 132, "gated"),    # gate, up and SiLU
])
@pytest.mark.parametrize("zp_kind", ["none", "uint8"])
@pytest.mark.parametrize("norm_bias", [False, True], ids=["", "bias"])
def test_fused_norm_gives_the_unfused_launches_bits(libs, monkeypatch, kind, k, n, sm_count, form, zp_kind,
                                                    norm_bias):
    if form == "split":
        monkeypatch.setattr(gq, "GEMV_ROW_COLS", 0)
    inputs, attrs = _case(kind, k, n, zp_kind, norm_bias, seed=k + n)
    y, total, want_y, want_total, ops = _run(libs, inputs, attrs, sm_count)
    assert len(ops) == 1 and ops[0].overlaps_previous and "skip_norm_src" in ops[0].source, [o.entry for o in ops]
    assert (f"hipep_mnb_normed_{form}" in ops[0].entry) if form != "gated" else ops[0].entry.startswith(
        "hipep_mnb_gated_")
    monkeypatch.setattr(gnm, "FUSE_ONE_ROW", False)
    y0, total0, _, _, ops0 = _run(libs, inputs, attrs, sm_count)
    assert ops0[0].entry == "hipep_skip_rms_norm_f16_overlap" and len(ops0) == 2
    if k <= 2048:  # the norm's own launch then has one vector a thread, as the fused kernel's
        np.testing.assert_array_equal(y, y0)
        np.testing.assert_array_equal(total, total0)
    assert _rel(y, want_y) < 2e-3 and _rel(y0, want_y) < 2e-3
    assert _rel(total, want_total) < 1e-3


@pytest.mark.parametrize("kind,k,n,entry", [
    ("plain", 2048, 20, "hipep_mnb_normed_tc_u4_s4"),   # QKV and o: 4 warps a column group
    ("plain", 4096, 40, "hipep_mnb_normed_tc_u4_s8"),   # two vectors of the row a thread, 8 warps a group
    ("gated", 1024, 24, "hipep_mnb_gated_tc_"),          # gate, up and SiLU: column n of both weights a quad
])
@pytest.mark.parametrize("zp_kind", ["none", "uint8"])
def test_fused_norm_on_tensor_cores_gives_the_unfused_launches_bits(libs, monkeypatch, kind, k, n, entry, zp_kind):
    """HIPEP_MNB_GEMV_TC=1 on a device with tensor cores: the norm stages its row straight into the
    tensor-core kernel's layout (kernels/matmul_nbits_tc.h), bit for bit the norm's own launch and then
    the tensor-core GEMV (or gated pair) reading it, both within the registry reference's tolerance."""
    monkeypatch.setattr(gq, "GEMV_ROW_TC", 1)
    inputs, attrs = _case(kind, k, n, zp_kind, False, seed=k + n)
    y, total, want_y, want_total, ops = _run(libs, inputs, attrs, 132, tensor_cores=True)
    assert len(ops) == 1 and ops[0].entry.startswith(entry) and "skip_norm_src" in ops[0].source, \
        [o.entry for o in ops]
    assert ("_zp" in ops[0].entry) == (zp_kind != "none") or kind == "gated"
    monkeypatch.setattr(gnm, "FUSE_ONE_ROW", False)
    y0, total0, _, _, ops0 = _run(libs, inputs, attrs, 132, tensor_cores=True)
    assert ops0[0].entry == "hipep_skip_rms_norm_f16_overlap" and len(ops0) == 2
    assert "_tc_" in ops0[1].entry, ops0[1].entry
    if k <= 2048:
        np.testing.assert_array_equal(y, y0)
        np.testing.assert_array_equal(total, total0)
    assert _rel(y, want_y) < 2e-3 and _rel(y0, want_y) < 2e-3
    assert _rel(total, want_total) < 1e-3


@pytest.mark.parametrize("kind,k,n,entry", [
    ("plain", 2048, 20, "hipep_mnb_normed_tc_u4_s4"),
    ("plain", 4096, 40, "hipep_mnb_normed_tc_u4_s8"),
    ("gated", 1024, 24, "hipep_mnb_gated_tc_"),
])
@pytest.mark.parametrize("zp_kind", ["none", "uint8"])
def test_bf16_norm_fuses_into_the_tensor_core_gemv(libs, monkeypatch, kind, k, n, entry, zp_kind):
    """bf16 rows, whose one-row GEMV is the tensor-core form by default: the norm (in bf16, the
    skip norm kernel's arithmetic) stages its row into that kernel as fp16's does, bit for bit the
    norm's own launch and then the tensor-core GEMV (or gated pair) reading it; the gated pair
    alone is one kernel too."""
    inputs, attrs = _case(kind, k, n, zp_kind, False, seed=k + n + 1, elem=16)
    y, total, want_y, want_total, ops = _run(libs, inputs, attrs, 132, tensor_cores=True)
    assert len(ops) == 1 and ops[0].entry.startswith(entry) and "skip_norm_src<" in ops[0].source, \
        [o.entry for o in ops]
    assert "hipep_bf16>" in ops[0].source
    monkeypatch.setattr(gnm, "FUSE_ONE_ROW", False)
    y0, total0, _, _, ops0 = _run(libs, inputs, attrs, 132, tensor_cores=True)
    assert ops0[0].entry == "hipep_skip_rms_norm_bf16_overlap" and len(ops0) == 2
    assert ops0[1].entry.startswith("hipep_mnb_gated_tc_" if kind == "gated" else "hipep_mnb_gemv_tc_bf16"), \
        ops0[1].entry
    if k <= 2048:
        np.testing.assert_array_equal(y.view(np.uint16), y0.view(np.uint16))
        np.testing.assert_array_equal(total.view(np.uint16), total0.view(np.uint16))
    assert _rel(y, want_y) < 1e-2 and _rel(y0, want_y) < 1e-2
    assert _rel(total, want_total) < 5e-3


def test_bf16_without_tensor_cores_keeps_the_norm_apart(libs):
    """Without tensor cores a bf16 row has no one-row form to fuse into: the norm's launch, then
    the general GEMV, as the unfused plan."""
    inputs, attrs = _case("plain", 2048, 20, "none", False, seed=7, elem=16)
    y, total, want_y, want_total, ops = _run(libs, inputs, attrs, 132, tensor_cores=False)
    assert len(ops) == 2 and ops[0].entry.startswith("hipep_skip_rms_norm_bf16"), [o.entry for o in ops]
    assert _rel(y, want_y) < 1e-2 and _rel(total, want_total) < 5e-3
