"""The GPU kernels without a GPU: NVRTC compiles every kernels/*.hip module and rendered pointwise
kernels for sm_90 (skipped where nvidia-cuda-nvrtc is not installed), and every entry point the
bindings name, the quantized ones included, exists in the compiled code; the launches pass the
parameter bytes their entry points take (read from the PTX), and NonMaxSuppression's IoU keeps one
rounding per operation. The bindings' index arithmetic is checked by emulation in
test_kernel_bindings_emulated.py and test_quant_kernels_emulated.py; the decode step's kernels'
PTX properties in test_kernels_decode_ptx.py."""
from __future__ import annotations

import ctypes
import dataclasses

import ml_dtypes
import numpy as np
import pytest

from hipep.ops.pointwise import Builder, Operand
from hipep.ops.registry import OUTPUT_COUNT, SINCE_VERSION, lookup
from hipep.runtime import gpu_kernels as gk
from hipep.runtime import gpu_quant as gq

from helpers import needs_nvrtc
from unit.kernel_emulation import IDX, SRC, TARGET, arg, out_arg
from unit.nvrtc_ptx import ARCH, DEFINES, entry_bodies, param_bytes, ptx



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
    names |= {("matmul_nbits_gemm_tc", f"hipep_mnb_gemm_tc{s}_{t}{b}") for t in ("f16", "bf16")
              for s, b in (("", "_b4"), ("_sum", ""))}
    names |= {("gather_block_quantized", f"hipep_gbq_{t}_b{b}_{i}{w}") for t in ("f32", "f16", "bf16")
              for b in (2, 4, 8) for i in ("i32", "i64") for w in ("", "_w4")}
    assert {"matmul_nbits", "matmul_nbits_row", "matmul_nbits_gemm_tc", "gather_block_quantized"} <= set(gk.modules())
    for module, entry in sorted(names):
        assert entry.encode() + b"\0" in cubins[module], f"{module}: {entry}"


@needs_nvrtc
def test_tensor_core_prompt_gemm_as_ptx_and_ptxas_see_it():
    """MatMulNBits' tensor-core prompt GEMM (kernels/matmul_nbits_gemm_tc.hip) for sm_90: mma.sync of its
    element type, its fragments by ldmatrix.x4 (four a warp per 16 values of K), the fp16 weights' nibble
    pairs by lop3 (the packed dequantization), and no spills at its launch bounds; the split sums compile
    beside it."""
    from hipep.runtime import kernel_cache
    from unit.nvrtc_ptx import entry_bodies, ptx, ptxas_log, spill_reports

    bodies = entry_bodies(ptx("matmul_nbits_gemm_tc", "compute_90"))
    want = {f"hipep_mnb_gemm_tc{s}_{t}{b}" for t in ("f16", "bf16") for s, b in (("", "_b4"), ("_sum", ""))}
    assert set(bodies) == want
    for t in ("f16", "bf16"):
        body = bodies[f"hipep_mnb_gemm_tc_{t}_b4"]
        assert body.count(f"mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32") >= 8, t
        assert body.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") >= 4, t
    masks = ("983055", "15728880")  # 0x000F000F, 0x00F000F0
    lines = bodies["hipep_mnb_gemm_tc_f16_b4"].splitlines()
    assert sum("lop3.b32" in line and any(m in line for m in masks) for line in lines) >= 8
    reports = spill_reports(ptxas_log(kernel_cache.module_source("matmul_nbits_gemm_tc"), "matmul_nbits_gemm_tc"))
    assert {e: reports.get(e) for e in want} == {e: "0" for e in want}


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


@needs_nvrtc
def test_nms_iou_arithmetic_is_not_contracted():
    """NonMaxSuppression's IoU is the CPU reference's operations one rounding each (the _rn
    intrinsics), so the GPU selects the same boxes: no multiply in it may fuse into the add or
    subtract after it. The kernel has no FMA of its own, so the PTX must have none at all."""
    body = entry_bodies(ptx("nms", "compute_90"))["hipep_nms"]
    assert "mul.rn.f32" in body and "div.rn.f32" in body
    assert "fma.rn.f32" not in body


@needs_nvrtc
def test_attention_and_rotary_launches_pass_what_their_entry_points_take():
    """Every GroupQueryAttention, RotaryEmbedding and MRotaryEmbedding launch (decode, prefill, window cache, the fault
    sites of prepare and rotary) passes as many parameters as its entry point declares, each of the
    size the kernel expects (the ctypes structs mirror the kernels' structs)."""
    from unit.test_gpu_attention_bindings import GQA, Memory, _attrs, gqa_case

    params = {}
    for module in ("attention_cache", "attention_decode", "attention_decode_fused", "attention_prefill",
                   "attention_prefill_tc", "rotary", "rms_norm"):
        params.update(param_bytes(ptx(module, "compute_90")))
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
                                                  full, gk.Target(sm_count=8, workspace=mem.alloc,
                                                                  tensor_cores=dtype == np.float16))
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
                     "hipep_gqa_decode_fused_f32", "hipep_gqa_decode_fused_f16", "hipep_gqa_prefill_tc_f16",
                     "hipep_gqa_window", "hipep_rotary",
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

    params = param_bytes(ptx("linear_attention", "compute_90"))
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

    params = param_bytes(ptx("attention_mha", "compute_90"))
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

    params = param_bytes(ptx("moe", "compute_90"))
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

    params = param_bytes(ptx("moe", "compute_90"))
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
