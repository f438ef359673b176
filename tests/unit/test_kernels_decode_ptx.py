"""The decode step's kernels as NVRTC compiles them for sm_90, read from their PTX and ptxas' report
without a GPU: the row GEMVs (plain, tensor-core, gated, after a fused norm) load only the weights
they stream before they wait for the kernel ahead (programmatic dependent launch) and release the
kernel after them, keep their registers (no spills) in every variant the bindings render, and the
norm fuses into a GEMV only where the GEMV keeps its waves; the GEMV study's candidates compile
too. Skipped where nvidia-cuda-nvrtc is not installed."""
from __future__ import annotations

import ctypes
import dataclasses
import re
import sys

import numpy as np
import pytest

from hipep.runtime import gpu_kernels as gk
from hipep.runtime import gpu_quant as gq

from helpers import needs_nvrtc
from unit.kernel_emulation import TARGET, arg, out_arg
from unit.nvrtc_ptx import entry_bodies, ptx, ptxas_log, spill_reports


def _loads_only_streamed_data_before_it_waits(entry: str, body: str) -> int:
    """Checks an overlapping kernel's PTX: it releases its successor before it waits
    (griddepcontrol), reads nothing through the read-only path (ld.global.nc, which ptxas moves
    across the wait either way), and before the wait loads only through ld.global.cs (the data no
    kernel of the run writes). Returns where the wait is."""
    wait = body.index("griddepcontrol.wait")
    assert body.index("griddepcontrol.launch_dependents") < wait, entry
    assert "ld.global.nc" not in body, entry
    assert body.index("ld.global.cs") < wait, entry
    assert "ld.global" not in body[:wait].replace("ld.global.cs", ""), entry
    return wait


@needs_nvrtc
@pytest.mark.parametrize("arch", ["compute_90", "compute_80"])
def test_row_gemv_loads_weights_before_it_waits_for_the_previous_kernel(arch):
    """A launch with KernelOp.overlaps_previous may start before the kernel ahead of it ends: the
    row GEMV's code must wait for it (griddepcontrol.wait) before it reads A, after its first
    loads of B, and release its own successor; before sm_90 there is no such launch and the code
    has neither instruction. No load takes the read-only path (ld.global.nc), which promises data
    that no kernel changes while this one runs, and which ptxas moves across the wait either way:
    the weights are ld.global.cs (ahead of the wait where the code puts them), A ld.global.cg
    (coherent, after the wait)."""
    bodies = entry_bodies(ptx("matmul_nbits_row", arch))
    # the tiled kernel's q8 f32/f16/bf16 and h2 f16, each in two register shares; row1's the same with 1, 2, 4
    # chunks a lane, zero points or not; row1's h2 with K split between two warps, the same six; the gated
    # kernel's compile-check instance, the fused norm's, and row1's h2 with several columns a warp (four forms,
    # zero points or not)
    assert len(bodies) == 2 * 4 + 4 * 6 + 6 + 1 + 1 + 4 * 2
    for entry, body in bodies.items():
        if arch == "compute_80":
            assert "griddepcontrol" not in body, entry
            continue
        wait = _loads_only_streamed_data_before_it_waits(entry, body)  # the first loads of B; A after
        assert "ld.global.cg" in body[wait:], entry              # A, coherent
        # A's aligned words as 16-byte loads: scalar ld.global.cg loads of one word each fetch its
        # sector from L2 again (L1 is bypassed), and every block stages all of A
        assert "ld.global.cg.v4" in body[wait:], entry


@needs_nvrtc
def test_tensor_core_row_gemv_loads_weights_before_it_waits_and_keeps_its_registers():
    """The tensor-core row GEMV (kernels/matmul_nbits_tc.hip) overlaps the kernel ahead as the row
    GEMVs do: its first weights, scales and zero points through ld.global.cs before
    griddepcontrol.wait, A after it through coherent 16-byte loads, nothing through the read-only
    path; it issues mma.sync of A's type (fp16 or bf16), makes its nibble pairs by lop3, and no
    instance spills at its launch bounds (two blocks an SM)."""
    from hipep.runtime import kernel_cache

    bodies = entry_bodies(ptx("matmul_nbits_tc", "compute_90"))
    want = {f"hipep_mnb_gemv_tc_{t}_{b}_u{gq.TC_U}_s{s}{z}"
            for t in ("f16", "bf16") for b in ("b32", "bw") for s in (4, 8) for z in ("", "_zp")}
    assert set(bodies) == want
    for entry, body in bodies.items():
        wait = _loads_only_streamed_data_before_it_waits(entry, body)
        assert "ld.global.cg.v4" in body[wait:], entry
        t = "bf16" if "_bf16_" in entry else "f16"
        assert body.count(f"mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32") >= 8, entry
        masks = ("983055", "15728880")  # 0x000F000F, 0x00F000F0: the nibble pairs, by lop3 only
        assert sum("lop3.b32" in line and any(m in line for m in masks) for line in body.splitlines()) >= 8, entry
        assert not any("and.b32" in line and any(m in line for m in masks) for line in body.splitlines()), entry
    reports = spill_reports(ptxas_log(kernel_cache.module_source("matmul_nbits_tc"), "matmul_nbits_tc"))
    assert {e: reports.get(e) for e in want} == {e: "0" for e in want}


@needs_nvrtc
def test_h2_row_gemvs_make_each_nibble_pair_a_half2_in_one_instruction():
    """(x & mask) | 0x64006400 (two nibbles as the halves 1024 + q) is one LOP3 only when PTX asks
    for it: from C's AND and OR of two constants ptxas makes two, a third of the h2 row GEMV's
    arithmetic a weight word. Every h2 entry point (the tiled, row1, split and several-columns
    forms) takes its nibble pairs through lop3 (hipep_and_or), and none through and.b32 with a
    nibble-pair mask."""
    bodies = entry_bodies(ptx("matmul_nbits_row", "compute_90"))
    h2 = {e: b for e, b in bodies.items() if "_h2_" in e or "skip_norm" in e or "gated" in e}
    assert len(h2) >= 12
    masks = ("983055", "15728880")  # 0x000F000F, 0x00F000F0
    for entry, body in h2.items():
        lop3 = [line for line in body.splitlines() if "lop3.b32" in line]
        assert sum(any(m in line for m in masks) for line in lop3) >= 4, entry
        assert not any("and.b32" in line and any(m in line for m in masks) for line in body.splitlines()), entry


@needs_nvrtc
def test_overlapping_skip_norm_loads_only_weights_before_it_waits():
    """The decode step's skip norm (hipep_skip_rms_norm_<dt>_overlap, KernelOp.overlaps_previous)
    reads gamma and bias (ld.global.cs) before griddepcontrol.wait and nothing else; x and skip
    after it (ld.global.cg); nothing through the read-only path; and it releases its successor."""
    bodies = {e: b for e, b in entry_bodies(ptx("rms_norm", "compute_90")).items() if e.endswith("_overlap")}
    assert set(bodies) == {"hipep_skip_rms_norm_f16_overlap", "hipep_skip_rms_norm_bf16_overlap"}
    for entry, body in bodies.items():
        wait = _loads_only_streamed_data_before_it_waits(entry, body)
        assert "ld.global.cg.v4" in body[wait:] and "ld.global.cs" not in body[wait:], entry


@needs_nvrtc
def test_fused_decode_requests_only_past_cache_rows_before_it_waits():
    """GroupQueryAttention's fused one-token decode (KernelOp.overlaps_previous) requests its first
    pass of cache rows (ld.global.cs) before griddepcontrol.wait and loads nothing else there: the
    sequence lengths, the token's query, key and value and the rotary caches may be the kernel
    ahead's outputs, so they come after it; nothing goes through the read-only path, which ptxas
    may move ahead of the wait."""
    bodies = {e: b for e, b in entry_bodies(ptx("attention_decode_fused", "compute_90")).items()
              if e.startswith("hipep_gqa_decode_fused_")}
    assert len(bodies) == 3 * 4, sorted(bodies)  # f32, f16, bf16; blocks of 1, 2, 4, 8 query rows
    for entry, body in bodies.items():
        wait = _loads_only_streamed_data_before_it_waits(entry, body)
        assert "ld.global.cs" not in body[wait:], entry


@needs_nvrtc
def test_kernels_that_precede_a_gemv_in_decode_release_it():
    """The norms, attention's decode kernel and the general GEMV let an overlapping GEMV after
    them start its loads as they start (griddepcontrol.launch_dependents)."""
    for name, prefix in (("rms_norm", "hipep_"), ("attention_decode", "hipep_gqa_decode_"),
                         ("attention_decode_fused", "hipep_gqa_decode_fused_"),
                         ("matmul_nbits", "hipep_mnb_gemv_")):
        bodies = {e: b for e, b in entry_bodies(ptx(name, "compute_90")).items() if e.startswith(prefix)}
        assert bodies, name
        for entry, body in bodies.items():
            assert "griddepcontrol.launch_dependents" in body, entry


def _gated_launch(rows: int, elem, level: int, zp: str, activation: str, k: int = 2048):
    """hipep::GatedMatMulNBits bound as the cuda device binds it, for A of `rows` rows."""
    from onnx import numpy_helper

    from hipep.compiler import compile_subgraph
    from hipep.graph import GraphView
    from hipep.plan import Launch, walk
    from quant_helpers import gated_mlp_model

    model, _ = gated_mlp_model([1, rows], k, 256, elem=elem, zp_kind=zp, accuracy_level=level, activation=activation)
    g = GraphView.from_onnx(model)
    plan = compile_subgraph(g, "mlp", list(g.inputs), list(g.outputs), None,
                            held=sorted(set(g.constants) | set(g.weights)))
    (launch,) = [s for s in walk(plan.steps) if isinstance(s, Launch)]
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    names = ["gate_B", "gate_scales", "gate_zp", "up_B", "up_scales", "up_zp"]
    ins = [arg(np.zeros((1, rows, k), inits["gate_scales"].dtype), 4096)]
    ins += [arg(inits[n], 1 << (20 + i), constant=True) if n in inits else None for i, n in enumerate(names)]
    y = out_arg((1, rows, 256), inits["gate_scales"].dtype)
    target = dataclasses.replace(TARGET, workspace=lambda n: 0xA000000)
    return launch, gk.BINDINGS[launch.op].bind(ins, [y], launch.attributes, target)


@needs_nvrtc
@pytest.mark.parametrize("elem,level,zp,activation", [(10, 0, "none", "silu"), (1, 4, "uint8", "gelu"),
                                                      (10, 4, "uint8", "silu")], ids=["h2", "q8-f32", "q8-f16"])
def test_gated_gemv_is_one_kernel_that_loads_both_weights_before_it_waits(elem, level, zp, activation):
    """One row of A: the gate and up projections and the program joining them are one rendered
    kernel with the row GEMV's PTX rules (both weights' first loads ahead of griddepcontrol.wait,
    A coherent after it, no read-only loads); several rows: the two MatMulNBits as alone, then
    the program's pointwise kernel."""
    launch, ops = _gated_launch(1, elem, level, zp, activation)
    assert launch.op == "hipep::GatedMatMulNBits"
    (op,) = ops
    assert op.source and op.overlaps_previous and op.entry.startswith("hipep_mnb_gated_")
    bodies = entry_bodies(ptx(op.entry, "compute_90", op.source))
    assert list(bodies) == [op.entry]
    body = bodies[op.entry]
    wait = _loads_only_streamed_data_before_it_waits(op.entry, body)
    assert body[:wait].count("ld.global.cs.v4") >= 2   # a chunk of each weight before the wait
    assert "ld.global.cg.v4" in body[wait:]
    _, prefill = _gated_launch(3, elem, level, zp, activation)
    assert [o.entry.startswith("hipep_pw_") for o in prefill] == [False] * (len(prefill) - 1) + [True]
    assert sum(o.entry.startswith("hipep_mnb_gemv_") for o in prefill) == 2


@needs_nvrtc
@pytest.mark.parametrize("k", [1024, 2048, 4096], ids=["u1", "u2", "u4"])
@pytest.mark.parametrize("elem,level", [(10, 0), (1, 4)], ids=["h2", "q8"])
@pytest.mark.parametrize("zp", ["none", "uint8"])
def test_gated_gemv_variants_keep_their_registers(k, elem, level, zp):
    """The gated kernel's launch bounds (gpu_gated_matmul.MIN_BLOCKS) leave every variant's loads of
    both columns in registers: ptxas reports no spill (a spill is a local-memory round trip per
    chunk, measured as a slower kernel)."""
    _, (op,) = _gated_launch(1, elem, level, zp, "silu", k)
    _assert_no_spills(op)


@needs_nvrtc
def test_row_gemv_columns_a_warp_instances_do_not_spill():
    """The several-columns-a-warp row GEMV instances (gpu_quant.row_cols_form) at their launch
    bounds: ptxas reports no spill for any of them, with or without zero points."""
    from hipep.runtime import kernel_cache

    forms = (gq.ROW_COLS_ONE_WAVE, gq.ROW_COLS_WAVES, *gq.ROW_COLS_BY_WIDTHS.values())
    log = ptxas_log(kernel_cache.module_source("matmul_nbits_row"), "matmul_nbits_row")
    reports = spill_reports(log)
    for u, c, s, _ in forms:
        for z in ("", "_zp"):
            entry = f"hipep_mnb_gemv_row1_h2_f16_b4_u{u}_c{c}_s{s}{z}"
            assert reports.get(entry) == "0", (entry, reports.get(entry))



def _assert_no_spills(op) -> None:
    """NVRTC compiles a rendered launch's source for sm_90 with ptxas' report: no spill."""
    log = ptxas_log(op.source, op.entry)
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill stores", log)]
    assert spills and not any(spills), log


def _normed_launch(rows: int, kind: str, k: int, n: int, zp: str = "none", sm_count: int = 132, elem: int = 10):
    """hipep::SkipNormMatMulNBits bound as the cuda device binds it, for `rows` rows of x (`elem`:
    fp16 or bf16): the launch and its ops. `kind`: "plain" (one MatMulNBits) or "gated" (gate, up
    and SiLU)."""
    from onnx import numpy_helper

    from hipep.compiler import compile_subgraph
    from hipep.graph import GraphView
    from hipep.plan import Launch, walk
    from quant_helpers import gated_mlp_model, matmul_nbits_model, with_skip_norm

    if kind == "gated":
        model, feeds = gated_mlp_model([1, rows], k, n, elem=elem, zp_kind=zp)
    else:
        model, feeds, _ = matmul_nbits_model([1, rows], k, n, 4, 32, elem=elem, zp_kind=zp)
    model, feeds = with_skip_norm(model, feeds, k)
    g = GraphView.from_onnx(model)
    plan = compile_subgraph(g, "layer", list(g.inputs), list(g.outputs), None,
                            held=sorted(set(g.constants) | set(g.weights)))
    (launch,) = [s for s in walk(plan.steps) if isinstance(s, Launch)]
    assert launch.op == "hipep::SkipNormMatMulNBits"
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    ins = []
    for i, vid in enumerate(launch.inputs):
        if vid < 0:
            ins.append(None)
            continue
        name = plan.values[vid].name
        value = inits[name] if name in inits else np.zeros((1, rows, k), feeds["x"].dtype)
        ins.append(arg(value, 1 << (20 + i), constant=name in inits))
    y_type = feeds["x"].dtype
    outs = [out_arg((1, rows, n), y_type)] + [None] * 3 + [out_arg((1, rows, k), y_type, 0x7000000)]
    target = dataclasses.replace(TARGET, sm_count=sm_count, workspace=lambda nbytes: 0xA000000)
    return launch, gk.BINDINGS[launch.op].bind(ins, outs, launch.attributes, target)


@needs_nvrtc
@pytest.mark.parametrize("kind,k,n", [("plain", 2048, 3072), ("plain", 2048, 2048), ("plain", 4096, 1024),
                                      ("plain", 1024, 4608), ("gated", 2048, 8192), ("gated", 1024, 256)],
                         ids=["qkv-cols", "o-cols", "k4096-cols", "row1", "gated-u2", "gated-u1"])
@pytest.mark.parametrize("zp", ["none", "uint8"])
def test_normed_gemv_is_one_kernel_that_waits_before_it_reads_the_rows(kind, k, n, zp):
    """One fp16 row: the norm and the projection are one rendered kernel, launched to overlap the
    kernel ahead: before griddepcontrol.wait it loads only weights (ld.global.cs), x and skip after
    it (coherent ld.global.cg.v4), nothing through the read-only path, and ptxas reports no spill
    at its launch bounds (gpu_norm_matmul.FUSED_MIN_BLOCKS). Several rows: the norm's own kernel
    into the workspace, then the projection's."""
    launch, ops = _normed_launch(1, kind, k, n, zp)
    (op,) = ops
    assert op.source and op.overlaps_previous, op.entry
    _assert_no_spills(op)
    body = entry_bodies(ptx(op.entry, "compute_90", op.source))[op.entry]
    wait = _loads_only_streamed_data_before_it_waits(op.entry, body)
    assert body[wait:].count("ld.global.cg.v4") >= 2, op.entry  # x and skip, after the wait
    assert [ctypes.sizeof(p) for p in op.params][0] == 64  # the norm's source struct: 7 pointers and eps
    _, prefill = _normed_launch(3, kind, k, n, zp)
    assert prefill[0].module == "rms_norm" and len(prefill) >= 2
    assert not any(o.source and "skip_norm_src" in o.source for o in prefill)


@needs_nvrtc
@pytest.mark.parametrize("kind,k,n", [("plain", 2048, 3072), ("plain", 4096, 1024), ("gated", 2048, 8192)],
                         ids=["qkv", "k4096", "gated"])
@pytest.mark.parametrize("zp", ["none", "uint8"])
@pytest.mark.parametrize("elem", [10, 16], ids=["f16", "bf16"])
def test_normed_tensor_core_gemv_is_one_kernel_that_waits_and_keeps_its_registers(monkeypatch, kind, k, n, zp, elem):
    """On a device with tensor cores (fp16 with HIPEP_MNB_GEMV_TC=1, bf16 by default): the norm
    fused into the tensor-core row GEMV (or gated pair) is one rendered kernel
    (kernels/matmul_nbits_tc.h with the norm as A's source) that overlaps the kernel ahead as the h2
    forms do and spills nothing at 2 blocks an SM; without the norm the gated pair's tensor-core
    kernel the same."""
    if elem == 10:
        monkeypatch.setattr(gq, "GEMV_ROW_TC", 1)
    monkeypatch.setattr(sys.modules[__name__], "TARGET", dataclasses.replace(TARGET, tensor_cores=True))
    _, ops = _normed_launch(1, kind, k, n, zp, elem=elem)
    (op,) = ops
    assert "_tc_" in op.entry and "skip_norm_src" in op.source and op.overlaps_previous, op.entry
    _assert_no_spills(op)
    body = entry_bodies(ptx(op.entry, "compute_90", op.source))[op.entry]
    wait = _loads_only_streamed_data_before_it_waits(op.entry, body)
    assert body[wait:].count("ld.global.cg.v4") >= 2, op.entry
    assert body.count("mma.sync.aligned.m16n8k16") >= 8, op.entry
    if kind == "gated":
        from hipep.runtime import gpu_norm_matmul as gnm

        monkeypatch.setattr(gnm, "FUSE_ONE_ROW", False)
        _, unfused = _normed_launch(1, kind, k, n, zp, elem=elem)
        gated = unfused[-1]
        assert gated.entry.startswith("hipep_mnb_gated_tc_") and "skip_norm_src" not in gated.source
        _assert_no_spills(gated)
        _loads_only_streamed_data_before_it_waits(gated.entry, entry_bodies(ptx(gated.entry, "compute_90",
                                                                                   gated.source))[gated.entry])


@pytest.mark.parametrize("kind,k,n,sm_count,fused", [
    ("plain", 2048, 32000, 132, False),  # the LM head: 4000 blocks would take 7 waves instead of 4
    ("plain", 2048, 3072, 132, True), ("gated", 2048, 8192, 132, True),
    ("plain", 8192, 2048, 132, False),   # a row of 1024 vectors: past FUSED_MAX_WORDS a thread
    ("gated", 4096, 512, 132, False),    # two vectors a thread and 4 chunks a lane: no spill-free bounds
    ("plain", 1024, 4096, 132, False),   # 512 blocks: one wave of the tiled GEMV alone, two fused
])
def test_the_norm_fuses_only_where_the_gemv_keeps_its_waves(kind, k, n, sm_count, fused):
    _, ops = _normed_launch(1, kind, k, n, sm_count=sm_count)
    assert (len(ops) == 1 and "skip_norm_src" in ops[0].source) == fused, [o.entry for o in ops]
    if not fused:
        assert ops[0].entry.startswith("hipep_skip_rms_norm_f16") and len(ops) == 2


@needs_nvrtc
def test_gemv_study_kernels_compile_without_spills():
    """benchmarks/gemv_study.hip and gemv_study_tc.hip (candidate GEMV designs, timed on a GPU by
    gemv_study.py) compile for sm_90 through hipep's header, and the tensor-core candidates keep their
    registers."""
    from helpers import REPO, load_script

    study = load_script("benchmarks/gemv_study.py", "_hipep_gemv_study")
    ptxas_log((REPO / "benchmarks" / "gemv_study.hip").read_text(), "gemv_study")
    reports = spill_reports(ptxas_log((REPO / "benchmarks" / "gemv_study_tc.hip").read_text(), "gemv_study_tc"))
    for u, split, frag in study.MMA_VARIANTS:
        assert reports.get(f"h2_mma_u{u}_s{split}_f{frag}") == "0", reports
    for u, split in study.TC_VARIANTS:
        assert reports.get(f"h2_tc_u{u}_s{split}") == "0", reports
