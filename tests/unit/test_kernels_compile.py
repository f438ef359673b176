"""The GPU kernels without a GPU: NVRTC compiles every kernels/*.hip module and rendered pointwise
kernels for sm_90 (skipped where nvidia-cuda-nvrtc is not installed), and every entry point the
bindings name, the quantized ones included, exists in the compiled code. The bindings' index
arithmetic is checked by emulation in test_kernel_bindings_emulated.py and
test_quant_kernels_emulated.py."""
from __future__ import annotations

import ctypes
import dataclasses
import re
import sys

import ml_dtypes
import numpy as np
import pytest

from hipep.ops.pointwise import Builder, Operand
from hipep.ops.registry import OUTPUT_COUNT, SINCE_VERSION, lookup
from hipep.runtime import gpu_kernels as gk
from hipep.runtime import gpu_quant as gq

from helpers import needs_nvrtc
from unit.kernel_emulation import IDX, SRC, TARGET, arg, out_arg

ARCH = "sm_90"
DEFINES = {"HIPEP_WARP_SIZE": 32}


@pytest.fixture(scope="module")
def cubins(tmp_path_factory):
    from hipep.runtime import kernel_cache

    out = {}
    for name in kernel_cache.kernel_sources():
        out[name], _ = kernel_cache.compile_cubin(kernel_cache.module_source(name), name, ARCH, DEFINES,
                                                  use_cache=False)
    return out


@needs_nvrtc
def test_every_kernel_module_compiles_for_sm90(cubins):
    from hipep.runtime import kernel_cache

    assert set(cubins) == set(kernel_cache.kernel_sources())
    assert set(gk.modules()) <= set(cubins)
    for name, data in cubins.items():
        assert data[:4] == b"\x7fELF", name


@needs_nvrtc
def test_every_entry_point_the_bindings_name_exists(cubins):
    names = _entry_points_named_by_bindings()
    assert len(names) > 60
    names |= {("copy", f"hipep_copy_w{w}_{r}_{i}") for w in (1, 2, 4, 8, 16)
              for r in ("r1", "r2", "r3", "r4", "rn") for i in ("i32", "i64")}
    for module, entry in sorted(names):
        assert entry.encode() + b"\0" in cubins[module], f"{module}: {entry}"


@needs_nvrtc
def test_rendered_pointwise_kernels_compile_through_the_header():
    from hipep.runtime import kernel_cache

    f32, f16 = np.dtype(np.float32), np.dtype(np.float16)
    cases = [
        ("::Add", [f32, f32], {}),
        ("::Sigmoid", [f32], {}),
        ("::Gelu", [f16], {"approximate": "tanh"}),
        ("::Cast", [f32], {"to": 10}),
        ("::Cast", [np.dtype(ml_dtypes.bfloat16)], {"to": 1}),
        ("::Where", [np.dtype(bool), f16, f16], {}),
        ("::Clip", [f32, f32, f32], {}),
        ("::Mod", [np.dtype(np.int64), np.dtype(np.int64)], {"fmod": 0}),
    ]
    cases += [("::BitShift", [np.dtype(t)] * 2, {"direction": d})  # hipep_shl/hipep_shr on every type
              for t in ("uint8", "uint32", "uint64", "int8", "int16", "int32", "int64") for d in ("LEFT", "RIGHT")]
    cases += [  # the GELU family: f64 tanh, exp and erf
        ("com.microsoft::FastGelu", [f16, f16], {}),
        ("com.microsoft::QuickGelu", [f32], {"alpha": 1.702}),
        ("com.microsoft::BiasGelu", [f32, f32], {}),
    ]
    for key, dtypes, attrs in cases:
        domain, _, name = key.partition("::")
        op = lookup(domain, name)
        expr = op.pointwise([Operand(d, None, 6) for d in dtypes], _defaults(op, attrs))
        assert expr is not None, key
        out = [expr.nodes[o][1] for o in expr.outputs]
        r = gk.render_pointwise(expr, [d.name for d in dtypes], out)
        data, _ = kernel_cache.compile_cubin(r.source, r.name, ARCH, DEFINES, use_cache=False)
        assert r.name.encode() + b"\0" in data, key
    # BatchNormalization's generated kernel (not a registry pointwise op)
    from hipep.runtime.gpu_bindings_pointwise import batch_norm_expression

    expr = batch_norm_expression(["float16", "float32", "float32", "float32", "float32"], 1e-5)
    r = gk.render_pointwise(expr, ["float16"] + ["float32"] * 4, ["float16"])
    data, _ = kernel_cache.compile_cubin(r.source, r.name, ARCH, DEFINES, use_cache=False)
    assert r.name.encode() + b"\0" in data
    # QLinearConv's requantization (not a registry pointwise op): an int32 bias, f32 scales
    from hipep.runtime.gpu_matmul_integer import conv_requantize_expression

    for y_dtype in ("uint8", "int8"):
        r = gk.render_pointwise(conv_requantize_expression(y_dtype, True),
                                ["int32", "int32", "float32", "float32", "float32", y_dtype], [y_dtype])
        data, _ = kernel_cache.compile_cubin(r.source, r.name, ARCH, DEFINES, use_cache=False)
        assert r.name.encode() + b"\0" in data
    # a fused chain with a NaN constant and a broadcast operand
    b = Builder([Operand(f32), Operand(f32)])
    x, y = b.input(0), b.input(1)
    expr = b.build(b.max(x * y, b.const(float("nan"), "float32")) + b.const(float("-inf"), "float32"))
    r = gk.render_pointwise(expr, ["float32", "float32"], ["float32"])
    data, _ = kernel_cache.compile_cubin(r.source, r.name, ARCH, DEFINES, use_cache=False)
    assert r.name.encode() + b"\0" in data


@needs_nvrtc
def test_kernel_cache_hits_and_writes_atomically(tmp_path, monkeypatch):
    from hipep.runtime import kernel_cache

    monkeypatch.setenv(kernel_cache.CACHE_ENV, str(tmp_path))
    src = kernel_cache.module_source("gather")
    kernel_cache._MEMORY.clear()
    data, hit = kernel_cache.compile_cubin(src, "gather", ARCH, DEFINES)
    assert not hit
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and files[0].suffix == ".cubin" and files[0].read_bytes() == data
    kernel_cache._MEMORY.clear()
    again, hit = kernel_cache.compile_cubin(src, "gather", ARCH, DEFINES)
    assert hit and again == data
    # another architecture or define is another entry
    kernel_cache.compile_cubin(src, "gather", "sm_80", DEFINES)
    assert len(list(tmp_path.glob("*.cubin"))) == 2


@needs_nvrtc
def test_a_broken_kernel_reports_nvrtcs_log():
    from hipep.runtime import kernel_cache

    with pytest.raises(kernel_cache.KernelCompileError, match=r"broken.*undefined"):
        kernel_cache.nvrtc_compile('#include "hipep_device.h"\nHIPEP_KERNEL void k() { undefined_thing(); }\n',
                                   "broken", ARCH, DEFINES)


@needs_nvrtc
def test_headers_in_the_working_directory_do_not_shadow_hipeps(tmp_path, monkeypatch):
    """NVRTC looks for a quoted #include in the source's own directory first, the working directory
    for hipep's programs; a folder holding files named like hipep's headers must not change what
    is compiled (or what the cache stores under hipep's headers' key)."""
    from hipep.runtime import kernel_cache

    for header in ("hipep_device.h", "attention.h"):
        (tmp_path / header).write_text('#error "a header from the working directory"\n')
    monkeypatch.chdir(tmp_path)
    kernel_cache.nvrtc_compile(kernel_cache.module_source("attention_decode"), "attention_decode", ARCH, DEFINES)


def _defaults(op, attrs):
    out = {k: v for k, v in op.attributes.items() if v is not _required()}
    out.update(attrs)
    out.setdefault(OUTPUT_COUNT, 1)
    out.setdefault(SINCE_VERSION, max(op.since_versions))
    return out


def _required():
    from hipep.ops.registry import REQUIRED

    return REQUIRED


@needs_nvrtc
def test_every_quantized_entry_point_exists(cubins):
    names = {("matmul_nbits", f"hipep_mnb_gemv_{t}_b{b}_m{m}") for t in ("f32", "f16", "bf16") for b in (4, 8)
             for m in (1, 2, 4, 8)}
    names |= {("matmul_nbits", f"hipep_mnb_gemm_{t}_b{b}") for t in ("f32", "f16", "bf16") for b in (4, 8)}
    names |= {("matmul_nbits_row", f"hipep_mnb_gemv_row_q8_{t}_b4{w}") for t in ("f32", "f16", "bf16") for w in ("", "_w3")}
    names |= {("matmul_nbits_row", f"hipep_mnb_gemv_row_h2_f16_b4{w}") for w in ("", "_w3")}
    names |= {("matmul_nbits_row", f"hipep_mnb_gemv_row1_{v}_b4_u{u}{z}") for u in (1, 2, 4) for z in ("", "_zp")
              for v in ("h2_f16", "q8_f32", "q8_f16", "q8_bf16")}
    names |= {("matmul_nbits_row", f"hipep_mnb_gemv_row1_h2_f16_b4_u{u}_s2{z}") for u in (1, 2, 4) for z in ("", "_zp")}
    names |= {("matmul_nbits_row", f"hipep_mnb_gemv_row1_h2_f16_b4_u{u}_c{c}_s{s}{z}")
              for u, c, s, _ in (gq.ROW_COLS_ONE_WAVE, gq.ROW_COLS_WAVES, *gq.ROW_COLS_BY_WIDTHS.values())
              for z in ("", "_zp")}
    names |= {("gather_block_quantized", f"hipep_gbq_{t}_b{b}_{i}{w}") for t in ("f32", "f16", "bf16")
              for b in (2, 4, 8) for i in ("i32", "i64") for w in ("", "_w4")}
    assert {"matmul_nbits", "matmul_nbits_row", "gather_block_quantized"} <= set(gk.modules())
    for module, entry in sorted(names):
        assert entry.encode() + b"\0" in cubins[module], f"{module}: {entry}"


def _entry_points_named_by_bindings() -> set[tuple[str, str]]:
    """Every (module, entry) the bindings can name, by binding representative launches."""
    names: set[tuple[str, str]] = set()
    aligned, odd = SRC, SRC + 2
    float_types = [np.float32, np.float16, ml_dtypes.bfloat16]

    def add(ops):
        for op in ops:
            if isinstance(op, gk.KernelOp) and op.module:
                names.add((op.module, op.entry))

    for key in ("::ReduceSum", "::ReduceMean", "::ReduceMax", "::ReduceMin", "::ReduceProd", "::ReduceL2",
                "::ReduceLogSum", "::ReduceSumSquare", "::ReduceL1"):
        for dt in float_types + [np.float64, np.int32, np.int64]:
            if dt in (np.int32, np.int64) and key not in ("::ReduceSum", "::ReduceMean", "::ReduceMax"):
                continue
            for base in (aligned, odd) if dt not in (np.int32, np.int64) else (aligned,):
                for shape, axes, out in (((4, 64), [-1], (4, 1)), ((4, 64, 3), [1], (4, 1, 3))):
                    x = np.zeros(shape, dt)
                    add(gk.BINDINGS[key].bind([arg(x, base), arg(np.array(axes), IDX, True)], [out_arg(out, dt)],
                                              {"keepdims": 1}, TARGET))
    for dt in float_types:
        for base in (aligned, odd):
            x = np.zeros((4, 64), dt)
            add(gk.BINDINGS["::Softmax"].bind([arg(x, base)], [out_arg(x.shape, dt)], {"axis": -1}, TARGET))
            for key in ("::SimplifiedLayerNormalization", "::RMSNormalization"):
                add(gk.BINDINGS[key].bind([arg(x, base), arg(np.zeros(64, dt), IDX)], [out_arg(x.shape, dt)],
                                          {"axis": -1, "epsilon": 1e-5}, TARGET))
            add(gk.BINDINGS["com.microsoft::SkipSimplifiedLayerNormalization"].bind(
                [arg(x, base), arg(x, base), arg(np.zeros(64, dt), IDX)], [out_arg(x.shape, dt)], {"epsilon": 1e-5},
                TARGET))
    for dt in float_types + [np.float64]:
        x = np.zeros((4, 64), dt)
        add(gk.BINDINGS["::ReduceLogSumExp"].bind([arg(x, aligned), arg(np.array([-1]), IDX, True)],
                                                  [out_arg((4, 1), dt)], {"keepdims": 1}, TARGET))
    for shapes, equation in ((((2, 3), (3, 4)), "ij,jk->ik"), (((3, 3),), "ii->"), (((4, 5),), "ij->j")):
        ins = [arg(np.zeros(s), SRC + 4096 * k) for k, s in enumerate(shapes)]
        out = np.einsum(equation, *[np.zeros(s) for s in shapes]).shape
        add(gk.BINDINGS["::Einsum"].bind(ins, [out_arg(out, np.float64)], {"equation": equation},
                                         dataclasses.replace(TARGET, workspace=lambda n: 0xA00000)))
    for e, word_shapes in ((1, 16), (2, 8), (4, 4), (8, 2)):
        dt = {1: np.uint8, 2: np.float16, 4: np.float32, 8: np.int64}[e]
        for inner in (1, 2, 4, 8, 16):
            for it in (np.int32, np.int64):
                add(gk.BINDINGS["::Gather"].bind([arg(np.zeros((5, inner), dt), aligned), arg(np.zeros(3, it), IDX)],
                                                 [out_arg((3, inner), dt)], {"axis": 0}, TARGET))
                add(gk.BINDINGS["::Gather"].bind([arg(np.zeros((5, inner), dt), odd), arg(np.zeros(3, it), IDX)],
                                                 [out_arg((3, inner), dt)], {"axis": 0}, TARGET))
        for words in (1, 2, 4, 8, 16):
            x = np.zeros((3, 64, words), dt)
            add(gk.BINDINGS["::Concat"].bind([arg(x, aligned), arg(x, aligned)], [out_arg((6, 64, words), dt)],
                                             {"axis": 0}, TARGET))
            add(gk.BINDINGS["::Concat"].bind([arg(x, odd), arg(x, aligned)], [out_arg((6, 64, words), dt)],
                                             {"axis": 0}, TARGET))
        x = np.zeros((2, 64, 48), dt)
        add(gk.BINDINGS["::Transpose"].bind([arg(x, aligned)], [out_arg((2, 48, 64), dt)], {"perm": [0, 2, 1]}, TARGET))
    for op, gates in (("RNN", 1), ("GRU", 3), ("LSTM", 4)):  # the recurrent kernels, f32 and f16
        for dt in (np.float32, np.float16):
            ins = [arg(np.zeros(s, dt), aligned) for s in ((2, 1, 3), (1, 4 * gates, 3), (1, 4 * gates, 4))]
            add(gk.BINDINGS[f"::{op}"].bind(ins, [out_arg((2, 1, 1, 4), dt)], {"hidden_size": 4}, TARGET))
    for dt in (np.float32, np.float64, np.int64, np.int8):  # Unique: 4 rows, one distinct
        outs = [out_arg((1, 6), dt), out_arg((1,), np.int64), out_arg((4,), np.int64), out_arg((1,), np.int64)]
        add(gk.BINDINGS["::Unique"].bind([arg(np.zeros((4, 6), dt), aligned)], outs, {"sorted": 1, "axis": 0},
                                         dataclasses.replace(TARGET, workspace=lambda n: 0xA00000)))
    nms_ins = [arg(np.zeros((1, 6, 4), np.float32), aligned), arg(np.zeros((1, 2, 6), np.float32), aligned),
               arg(np.array([3]), IDX), arg(np.zeros(1, np.float32), IDX)]
    add(gk.BINDINGS["::NonMaxSuppression"].bind(nms_ins, [out_arg((4, 3), np.int64)], {"center_point_box": 0}, TARGET))
    return names


def _ptx(name: str, arch: str, source: str | None = None) -> str:
    """NVRTC's PTX of kernels/<name>.hip (or of a rendered `source`) for a virtual architecture
    (compute_XY)."""
    from hipep.runtime import kernel_cache

    nvrtc = kernel_cache._nvrtc()
    text = source if source is not None else kernel_cache.module_source(name)
    err, prog = nvrtc.nvrtcCreateProgram(text.encode(), f"{name}.hip".encode(), 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    try:
        opts = [o.encode() for o in kernel_cache._options(arch, DEFINES)]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, kernel_cache._log(nvrtc, prog)
        err, size = nvrtc.nvrtcGetPTXSize(prog)
        buf = b" " * size
        nvrtc.nvrtcGetPTX(prog, buf)
        return buf.rstrip(b"\0").decode()
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _entry_bodies(ptx: str) -> dict[str, str]:
    parts = ptx.split(".entry ")[1:]
    return {p.split("(", 1)[0].strip(): p for p in parts}


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
    bodies = _entry_bodies(_ptx("matmul_nbits_row", arch))
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

    bodies = _entry_bodies(_ptx("matmul_nbits_tc", "compute_90"))
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
    reports = _spill_reports(_ptxas_log(kernel_cache.module_source("matmul_nbits_tc"), "matmul_nbits_tc"))
    assert {e: reports.get(e) for e in want} == {e: "0" for e in want}


@needs_nvrtc
def test_h2_row_gemvs_make_each_nibble_pair_a_half2_in_one_instruction():
    """(x & mask) | 0x64006400 (two nibbles as the halves 1024 + q) is one LOP3 only when PTX asks
    for it: from C's AND and OR of two constants ptxas makes two, a third of the h2 row GEMV's
    arithmetic a weight word. Every h2 entry point (the tiled, row1, split and several-columns
    forms) takes its nibble pairs through lop3 (hipep_and_or), and none through and.b32 with a
    nibble-pair mask."""
    bodies = _entry_bodies(_ptx("matmul_nbits_row", "compute_90"))
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
    bodies = {e: b for e, b in _entry_bodies(_ptx("rms_norm", "compute_90")).items() if e.endswith("_overlap")}
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
    bodies = {e: b for e, b in _entry_bodies(_ptx("attention_decode", "compute_90")).items()
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
                         ("matmul_nbits", "hipep_mnb_gemv_")):
        bodies = {e: b for e, b in _entry_bodies(_ptx(name, "compute_90")).items() if e.startswith(prefix)}
        assert bodies, name
        for entry, body in bodies.items():
            assert "griddepcontrol.launch_dependents" in body, entry


@needs_nvrtc
def test_nms_iou_arithmetic_is_not_contracted():
    """NonMaxSuppression's IoU is the CPU reference's operations one rounding each (the _rn
    intrinsics), so the GPU selects the same boxes: no multiply in it may fuse into the add or
    subtract after it. The kernel has no FMA of its own, so the PTX must have none at all."""
    body = _entry_bodies(_ptx("nms", "compute_90"))["hipep_nms"]
    assert "mul.rn.f32" in body and "div.rn.f32" in body
    assert "fma.rn.f32" not in body


def _param_bytes(ptx: str) -> dict[str, list[int]]:
    """Each entry's parameters as NVRTC laid them out: bytes per parameter, in order."""
    out = {}
    for m in re.finditer(r"\.entry (\w+)\((.*?)\)", ptx, re.S):
        sizes = []
        for p in re.finditer(r"\.param\s+(?:\.align\s+\d+\s+)?\.[a-z]+(\d+)\s+\w+?(?:\[(\d+)\])?\s*(?:,|$)",
                             m.group(2), re.M):
            sizes.append(int(p.group(2)) if p.group(2) else int(p.group(1)) // 8)
        out[m.group(1)] = sizes
    return out


@needs_nvrtc
def test_attention_and_rotary_launches_pass_what_their_entry_points_take():
    """Every GroupQueryAttention, RotaryEmbedding and MRotaryEmbedding launch (decode, prefill, window cache, the fault
    sites of prepare and rotary) passes as many parameters as its entry point declares, each of the
    size the kernel expects (the ctypes structs mirror the kernels' structs)."""
    from unit.test_gpu_attention_bindings import GQA, Memory, _attrs, gqa_case

    params = {}
    for module in ("attention_cache", "attention_decode", "attention_prefill", "rotary", "rms_norm"):
        params.update(_param_bytes(_ptx(module, "compute_90")))
    rng = np.random.default_rng(3)
    launches = []
    for dtype in (np.float32, np.float16):
        for spec, extra in ((dict(seq=1, past=300, rotary=16, position_ids=True), dict(do_rotary=1)),
                            (dict(seq=12, past=3), {}),
                            (dict(seq=1, past=6, capacity=6), dict(local_window_size=4, sliding_window_cache=1))):
            ins, shapes = gqa_case(rng, dtype=dtype, **spec)
            for norms in ([], [None, None, np.ones(16, dtype), np.ones(16, dtype)]):  # and Qwen3's Q/K norm
                mem = Memory()
                _, full = _attrs(GQA, dict(num_heads=4, kv_num_heads=2, **extra), 3)
                launches += gk.BINDINGS[GQA].bind([mem.arg(a) for a in ins + norms],
                                                  [mem.arg(np.empty(s, dtype)) for s in shapes],
                                                  full, gk.Target(sm_count=8, workspace=mem.alloc))
        # one token on the shared KV cache (present in past's buffer): the fused decode launch
        ins, shapes = gqa_case(rng, dtype=dtype, seq=1, total=301, capacity=320, rotary=16, position_ids=True)
        mem = Memory()
        args = [mem.arg(a) for a in ins]
        _, full = _attrs(GQA, dict(num_heads=4, kv_num_heads=2, do_rotary=1), 3)
        launches += gk.BINDINGS[GQA].bind(args, [mem.arg(np.empty(shapes[0], dtype)), args[3], args[4]], full,
                                          gk.Target(sm_count=8, workspace=mem.alloc, counters=mem.alloc))
        x, cos = np.zeros((1, 3, 64), dtype), np.zeros((8, 8), dtype)
        for key, ins, extra in (("com.microsoft::RotaryEmbedding", [x, np.zeros((1, 3), np.int64), cos, cos], {}),
                                ("com.microsoft::MRotaryEmbedding", [x, np.zeros((3, 1, 3), np.int64), cos, cos],
                                 dict(mrope_section=[4, 2, 2], scale=0.5)),
                                ("::RotaryEmbedding", [x, cos, cos, np.zeros((1, 3), np.int64)], {})):
            mem = Memory()
            _, full = _attrs(key, dict(num_heads=4, **extra), 1)
            launches += gk.BINDINGS[key].bind([mem.arg(a) for a in ins], [mem.arg(x)], full, gk.Target(sm_count=8))
    kernels = [op for op in launches if isinstance(op, gk.KernelOp)]
    kinds = {op.entry.rsplit("_", 1)[0] for op in kernels}
    assert kinds >= {"hipep_gqa_copy", "hipep_gqa_prepare", "hipep_gqa_decode_f32", "hipep_gqa_prefill_f32",
                     "hipep_gqa_decode_fused_f32", "hipep_gqa_decode_fused_f16", "hipep_gqa_window", "hipep_rotary",
                     "hipep_rms_norm_f32_exact", "hipep_rms_norm_f16"}
    for op in kernels:
        assert [ctypes.sizeof(p) for p in op.params] == params[op.entry], op.entry


@needs_nvrtc
def test_linear_attention_launches_pass_what_their_entry_points_take():
    """Every Gated DeltaNet launch (hipep/runtime/gpu_linear_attention.py) passes as many parameters
    as its entry point declares, each of the size the kernel expects (the ctypes structs mirror
    kernels/linear_attention.hip's)."""
    from unit.test_gpu_attention_bindings import Memory, _attrs
    from unit.test_ops_linear_attention import U, _rng, linear_attention_inputs

    params = _param_bytes(_ptx("linear_attention", "compute_90"))
    rng = _rng("params")
    launches = []
    for dtype in (np.float32, np.float16):
        cases = [("com.microsoft::CausalConvWithState",
                  [U(rng, 1, 4, 3, dtype=dtype), U(rng, 4, 1, 3, dtype=dtype), U(rng, 4, dtype=dtype),
                   U(rng, 1, 4, 2, dtype=dtype)], dict(activation="silu"), [(1, 4, 3), (1, 4, 2)]),
                 ("com.microsoft::LinearAttentionGate",
                  [U(rng, 1, 2, 4, dtype=dtype), U(rng, 4), U(rng, 4), U(rng, 1, 2, 4, dtype=dtype)], {},
                  [(1, 2, 4), (1, 2, 4)]),
                 ("com.microsoft::LinearAttention", linear_attention_inputs(rng, "gated_delta", 2, 2, dtype=dtype),
                  dict(q_num_heads=2, kv_num_heads=2), [(2, 5, 12), (2, 2, 8, 6)]),
                 ("com.microsoft::GatedRMSNorm", [U(rng, 2, 32, dtype=dtype), U(rng, 16, dtype=dtype),
                                                  U(rng, 2, 32, dtype=dtype)], dict(epsilon=1e-6), [(2, 32)])]
        for key, ins, attrs, out_shapes in cases:
            mem = Memory()
            _, full = _attrs(key, attrs, len(out_shapes))
            launches += gk.BINDINGS[key].bind([mem.arg(a) for a in ins],
                                              [mem.arg(np.empty(s, dtype)) for s in out_shapes], full,
                                              gk.Target(sm_count=8))
    assert {op.entry.rsplit("_", 1)[0] for op in launches} == {
        "hipep_causal_conv", "hipep_la_gate", "hipep_linear_attention", "hipep_gated_rms_norm"}
    for op in launches:
        assert [ctypes.sizeof(p) for p in op.params] == params[op.entry], op.entry


@needs_nvrtc
def test_mha_and_attention_launches_pass_what_their_entry_points_take():
    """Every MultiHeadAttention and ai.onnx Attention launch (hipep/runtime/gpu_attention_ops.py),
    qk_matmul_output's included, passes as many parameters as its entry point in
    kernels/attention_mha.hip declares, each of the size the kernel expects."""
    from unit.test_gpu_attention_bindings import Memory, _attrs

    params = _param_bytes(_ptx("attention_mha", "compute_90"))
    launches = []
    for dtype in (np.float32, np.float16):
        b, n, s, l, h = 1, 2, 3, 5, 8
        q, kv = np.zeros((b, n, s, h), dtype), np.zeros((b, n, l, h), dtype)
        mem = Memory()
        _, full = _attrs("::Attention", dict(qk_matmul_output_mode=3), 4)
        launches += gk.BINDINGS["::Attention"].bind(
            [mem.arg(a) for a in (q, kv, kv, np.ones((s, l), bool))],
            [mem.arg(np.empty(x, dtype)) for x in ((b, n, s, h), (b, n, l, h), (b, n, l, h), (b, n, s, l))], full,
            gk.Target(sm_count=8))
        mem = Memory()
        x3 = np.zeros((b, s, n * h), dtype)
        _, full = _attrs("com.microsoft::MultiHeadAttention", dict(num_heads=n), 1)
        launches += gk.BINDINGS["com.microsoft::MultiHeadAttention"].bind(
            [mem.arg(a) for a in (x3, x3, x3)], [mem.arg(np.empty(x3.shape, dtype))], full, gk.Target(sm_count=8))
    assert {op.entry.rsplit("_", 1)[0] for op in launches} == {
        "hipep_mha_present", "hipep_mha_f32", "hipep_mha_f16", "hipep_attention_scores"}
    for op in launches:
        assert [ctypes.sizeof(p) for p in op.params] == params[op.entry], op.entry


@needs_nvrtc
def test_moe_launches_pass_what_their_entry_points_take():
    """Every MoE launch (hipep/runtime/gpu_moe.py) passes as many parameters as its entry point in
    kernels/moe.hip declares, each of the size the kernel expects."""
    from unit.test_gpu_attention_bindings import Memory, _attrs
    from unit.test_ops_contrib import W, moe_inputs

    params = _param_bytes(_ptx("moe", "compute_90"))
    launches = []
    for dtype in (np.float32, np.float16):
        ins, attrs, _ = moe_inputs("swiglu", dtype=dtype, extra={"swiglu_limit": 7.0}, H=16, I=8)
        mem = Memory()
        _, full = _attrs("com.microsoft::MoE", attrs, 1)
        launches += gk.BINDINGS["com.microsoft::MoE"].bind(
            [mem.arg(a.value if isinstance(a, W) else a) for a in ins], [mem.arg(np.empty((5, 16), dtype))], full,
            gk.Target(sm_count=8, workspace=mem.alloc))
    assert len({op.entry for op in launches}) == 9  # route, fc1, fc2, combine per type; one act
    for op in launches:
        assert [ctypes.sizeof(p) for p in op.params] == params[op.entry], op.entry


@needs_nvrtc
def test_qmoe_launches_pass_what_their_entry_points_take():
    """Every QMoE launch (hipep/runtime/gpu_moe.py) -- the dequantize path and the int8-activation
    one, with and without zero points and router_weights -- passes as many parameters as its entry
    point in kernels/moe.hip declares, each of the size the kernel expects."""
    from unit.test_gpu_attention_bindings import Memory, _attrs
    from unit.test_ops_contrib import W, qmoe_inputs

    params = _param_bytes(_ptx("moe", "compute_90"))
    launches = []
    for dtype in (np.float32, np.float16):
        for bits, bs, extra in ((4, 0, {}), (4, 32, {}), (8, 16, {}), (4, 16, {"accuracy_level": 4})):
            ins, attrs, _ = qmoe_inputs(bits, bs, "swiglu", dtype=dtype, zp=bs == 16, router_weights=bits == 8,
                                        extra={"swiglu_limit": 7.0, **extra}, H=64, I=32)
            mem = Memory()
            _, full = _attrs("com.microsoft::QMoE", attrs, 1)
            launches += gk.BINDINGS["com.microsoft::QMoE"].bind(
                [None if a is None else mem.arg(a.value if isinstance(a, W) else a) for a in ins],
                [mem.arg(np.empty((5, 64), dtype))], full, gk.Target(sm_count=8, workspace=mem.alloc))
    # per type: route, quant, fc1, fc2, fc1_q8, fc2_q8 and MoE's combine; quant_act and MoE's act
    assert len({op.entry for op in launches}) == 2 * 7 + 2
    for op in launches:
        assert [ctypes.sizeof(p) for p in op.params] == params[op.entry], op.entry


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
    bodies = _entry_bodies(_ptx(op.entry, "compute_90", op.source))
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
    log = _ptxas_log(kernel_cache.module_source("matmul_nbits_row"), "matmul_nbits_row")
    reports = _spill_reports(log)
    for u, c, s, _ in forms:
        for z in ("", "_zp"):
            entry = f"hipep_mnb_gemv_row1_h2_f16_b4_u{u}_c{c}_s{s}{z}"
            assert reports.get(entry) == "0", (entry, reports.get(entry))


def _spill_reports(log: str) -> dict[str, str]:
    """Entry name -> the bytes of spill stores ptxas reports for it (its "Compiling entry function"
    line, then its spill line)."""
    reports, entry = {}, None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        entry = m.group(1) if m else entry
        m = re.search(r"(\d+) bytes spill stores", line)
        if m and entry:
            reports[entry] = m.group(1)
    return reports


# source -> its log. On the H200 machine NVRTC gave an empty log for the second compile of a source in the
# same process (two parametrized shapes rendering the same fused kernel), so each source is compiled once.
_PTXAS_LOGS: dict[str, str] = {}


def _ptxas_log(source: str, name: str) -> str:
    """NVRTC's log of compiling `source` for sm_90 with ptxas' report (once per source: the same
    source has the same report, and two parametrized shapes may render the same kernel)."""
    if source in _PTXAS_LOGS:
        return _PTXAS_LOGS[source]
    from hipep.runtime import kernel_cache

    nvrtc = kernel_cache._nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.hip".encode(), 0, [], [])
    try:
        opts = [o.encode() for o in kernel_cache._options(ARCH, DEFINES)] + [b"--ptxas-options=-v"]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        log = kernel_cache._log(nvrtc, prog)
        assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    _PTXAS_LOGS[source] = log
    return log


def _assert_no_spills(op) -> None:
    """NVRTC compiles a rendered launch's source for sm_90 with ptxas' report: no spill."""
    log = _ptxas_log(op.source, op.entry)
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
    body = _entry_bodies(_ptx(op.entry, "compute_90", op.source))[op.entry]
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
    body = _entry_bodies(_ptx(op.entry, "compute_90", op.source))[op.entry]
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
        _loads_only_streamed_data_before_it_waits(gated.entry, _entry_bodies(_ptx(gated.entry, "compute_90",
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
    _ptxas_log((REPO / "benchmarks" / "gemv_study.hip").read_text(), "gemv_study")
    reports = _spill_reports(_ptxas_log((REPO / "benchmarks" / "gemv_study_tc.hip").read_text(), "gemv_study_tc"))
    for u, split, frag in study.MMA_VARIANTS:
        assert reports.get(f"h2_mma_u{u}_s{split}_f{frag}") == "0", reports
    for u, split in study.TC_VARIANTS:
        assert reports.get(f"h2_tc_u{u}_s{split}") == "0", reports
