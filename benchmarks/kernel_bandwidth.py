"""GPU kernel bandwidth: achieved GB/s of hipep's kernels on the CUDA device, next to the
device-to-device copy bandwidth measured in the same run.

Workloads (single-op ONNX models through hipep.InferenceSession(device="cuda")):

* MatMulNBits int4 GEMV (M = 1, block 32, symmetric, as the model builder makes them): N = K =
  4096, and the ~1.1B llama's shapes (qkv 2048→3072, o 2048→2048, gate and up 2048→8192, down
  8192→2048, lm_head 2048→32000), with fp16 activations (accuracy level 0) and fp32 ones at
  accuracy level 4 (what the builder's int4 CPU-target model, benchmarks/decode.py's, carries).
* MatMul GEMV (family `matmul`): a float decode row (M = 1) times a 4096 x 4096 fp16 or fp32
  weight, on hipep's own GEMV (HIPEP_GEMM=own for the run), gated like the int4 GEMV. Beside them,
  an fp16 prefill product (1024 rows times the same weight) through each GEMM path: HIPEP_GEMM=auto
  (cuBLASLt where it loads) and own (hipep's tiled kernel), with TFLOP/s in the results: what
  `auto`'s choice of the vendor library for large products is worth. No gate (compute-bound).
  Likewise MatMulNBits int4 prefill (128 rows through the ~1.1B model's gate projection, fp16 at
  level 0 and fp32 at level 4): the dequantize-then-cuBLASLt path against hipep's own GEMM.
* MatMulNBits int4 prompt GEMMs (family `prompt`): 16 to 512 rows of fp16 A through the ~1.1B
  model's qkv, o, gate/up and down projections, on the tensor-core GEMM (HIPEP_MNB_GEMM_TC=1) and on
  the dequantize-then-cuBLASLt path (=0), in TFLOP/s: where the default's switch between them
  (gpu_quant.GEMM_TC_MAX_ROWS) belongs. No gate (compute-bound).
* GroupQueryAttention decode at a 4k context (and at 256, the decode benchmark's length): 32 query
  heads over 8 KV heads of 64, fp16, packed QKV with rotary as the builder emits it, past and
  present bound to one shared buffer.
* SimplifiedLayerNormalization, SkipSimplifiedLayerNormalization and Softmax, fp16, a few sizes;
  the two norms' f32 decode row [1, 2048] too (the ~1.1B model's, in the CPU EP's summation order).
* The harness's floor (family `copy`, no gate): per fp16 GEMV row, R Identity nodes that each copy
  as many bytes (half read, half written) as that GEMV moves, each a device-to-device memcpy node in
  the replayed CUDA graph, timed exactly as the GEMV rows. A node's time here includes the gap
  between graph nodes and each node's ramp-up and tail, which no kernel can avoid; a GEMV row near
  its copy row's percentage is at what this harness can show for one op of that size.

Bytes that must move: every input read once and every output written once (the int4 weights and
their scales; attention's K and V rows up to the total length, the new rows written back). A model
holds R copies of the op, each with its own weights or buffers, so that their working set exceeds
the GPU's L2 cache four times where 64 copies reach it: a decode step reads each weight once,
cold. A row whose working set stays under twice the L2 size is marked L2-resident and has no gate.

Timing: hipep.stats()["kernel_us"] deltas over repeated runs, which hipep's CUDA device takes
from CUDA events recorded around each run's replay (the run's kernels from first launch to last
end; the staging copies of host inputs are outside), divided by the runs and the R copies. Inputs
and outputs are bound with IOBinding, on device OrtValues when ORT can allocate them through hipep,
else on host memory (the results file says which). Every workload's outputs are compared with ORT's
CPU EP once. Gates: int4 and float GEMV and the norms at ≥ 50 % of the copy bandwidth.

Writes benchmarks/results/<date>-kernels-<gpu>.md and .png (the plot needs matplotlib).

    python benchmarks/kernel_bandwidth.py [--quick] [--only gemv,matmul,prompt,copy,gqa,norm,softmax] [--host-io]
                                          [--prompt-rows 16,32,...] [--prompt-paths tc,other] [--out DIR]
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # machine.py, gpu_harness.py
import gpu_harness as gh  # noqa: E402
from machine import machine_info  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
GATE = 0.5  # fraction of the copy bandwidth the gated rows must reach
MAX_COPIES = 64
BLOCK = 32  # MatMulNBits block size, as the builder quantizes
FAMILIES = ("gemv", "matmul", "prompt", "copy", "gqa", "norm", "softmax")
# The prompt family's rows of A: a short prompt to a long one (the tensor-core GEMM's range and past it)
PROMPT_ROWS = (16, 32, 64, 128, 256, 512)
MATMUL_SHAPE = (4096, 4096)  # the float GEMV's K and N
PREFILL_ROWS = 1024  # the prefill GEMM rows' M

# (name, K, N): the ~1.1B llama's projections (model_zoo size '1b') and a square reference
GEMV_SHAPES = (("4096x4096", 4096, 4096), ("qkv", 2048, 3072), ("o", 2048, 2048), ("gate/up", 2048, 8192),
               ("down", 8192, 2048), ("lm_head", 2048, 32000))
NORM_SHAPES = ((1, 2048), (128, 2048), (2048, 8192), (16384, 8192))
GQA_SHORT = 256  # GroupQueryAttention's second decode row: total length 256 (the decode benchmark's)
SOFTMAX_SHAPES = ((1, 32000), (32, 4096), (4096, 4096), (16384, 8192))
GQA = dict(heads=32, kv_heads=8, head=64)
GATED_NAME = "gate+up+SiLU"  # the gated MLP front's row (gated_gemv)


@dataclasses.dataclass
class Workload:
    family: str
    label: str
    model: bytes
    feeds: dict  # input name → array
    shared: dict  # output name → the input name it shares a buffer with
    node_bytes: int  # bytes one copy of the op must move
    copies: int
    gated: bool  # whether the gate applies (by family)
    limit: float  # outputs' relative L2 error against the CPU EP
    env: dict = dataclasses.field(default_factory=dict)  # environment the session is made under
    flops: float = 0.0  # arithmetic of one copy of the op, where it is compute-bound (TFLOP/s reported)

    @property
    def working_set(self) -> int:
        return self.node_bytes * self.copies


def _copies(node_bytes: int, l2: int) -> int:
    return max(1, min(MAX_COPIES, math.ceil(4 * l2 / node_bytes)))


def _model(nodes, inputs, outputs, inits) -> bytes:
    from onnx import helper

    graph = helper.make_graph(nodes, "bench", inputs, outputs, inits)
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()


def _elem(dtype):
    from onnx import helper

    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _mnb_nodes(k: int, n: int, rows: int, dtype, level: int, copies: int, rng) -> tuple[bytes, np.ndarray]:
    """A model of `copies` MatMulNBits nodes (int4, block 32, symmetric, as the builder quantizes), each with
    weights of its own, on one input A [1, rows, K]; and A."""
    from onnx import helper, numpy_helper

    blocks = k // BLOCK
    nodes, inits, outs = [], [], []
    for i in range(copies):
        w = rng.integers(0, 256, (n, blocks, BLOCK // 2), dtype=np.uint8)
        s = rng.uniform(0.005, 0.02, n * blocks).astype(dtype)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(s, f"s{i}")]
        nodes.append(helper.make_node("MatMulNBits", ["a", f"w{i}", f"s{i}"], [f"y{i}"], name=f"mnb{i}",
                                      domain="com.microsoft", K=k, N=n, bits=4, block_size=BLOCK,
                                      accuracy_level=level))
        outs.append(helper.make_tensor_value_info(f"y{i}", _elem(dtype), [1, rows, n]))
    a = rng.uniform(-1, 1, (1, rows, k)).astype(dtype)
    return _model(nodes, [helper.make_tensor_value_info("a", _elem(dtype), [1, rows, k])], outs, inits), a


def gemv(name: str, k: int, n: int, dtype, l2: int, rng, rows: int = 1, gemm: str | None = None) -> Workload:
    """R MatMulNBits nodes of `rows` rows of A (1: the decode GEMV; more: a prefill GEMM through
    the GEMM path `gemm`, HIPEP_GEMM, reported in TFLOP/s with no gate)."""
    level = 4 if dtype == np.float32 else 0
    node_bytes = gemv_bytes(k, n, dtype) + (rows - 1) * (k + n) * np.dtype(dtype).itemsize
    copies = _copies(node_bytes, l2) if rows == 1 else 4
    model, a = _mnb_nodes(k, n, rows, dtype, level, copies, rng)
    label = f"{name} {k}→{n} {np.dtype(dtype).name} (accuracy_level {level})"
    limit = 2e-2 if level or dtype == np.float16 else 1e-4
    if rows == 1:
        return Workload("MatMulNBits int4 GEMV", label, model, {"a": a}, {}, node_bytes, copies, True, limit)
    path = "cuBLASLt on the dequantized weights where it loads" if gemm == "auto" else "hipep's own GEMM"
    return Workload("MatMulNBits int4 GEMM", f"prefill {rows} rows, {label}, HIPEP_GEMM={gemm}: {path}", model,
                    {"a": a}, {}, node_bytes, copies, False, limit, {"HIPEP_GEMM": gemm}, flops=2.0 * rows * k * n)


def gated_gemv(k: int, n: int, dtype, l2: int, rng) -> Workload:
    """R gated MLP fronts as the ~1.1B model has them: gate and up MatMulNBits of one A, then
    SiLU(gate) * up -- compiled to one hipep::GatedMatMulNBits launch each (hip-fuse-gated-matmul):
    both weights stream through one kernel, which writes only the product. Its bytes are two
    GEMVs' weights and scales, A once and one output: the op of 2 x N columns it is."""
    from onnx import helper, numpy_helper

    level = 4 if dtype == np.float32 else 0
    blocks, size = k // BLOCK, np.dtype(dtype).itemsize
    node_bytes = 2 * n * blocks * (BLOCK // 2 + size) + k * size + n * size
    copies = _copies(node_bytes, l2)
    nodes, inits, outs = [], [], []
    for i in range(copies):
        for proj in ("g", "u"):
            w = rng.integers(0, 256, (n, blocks, BLOCK // 2), dtype=np.uint8)
            s = rng.uniform(0.005, 0.02, n * blocks).astype(dtype)
            inits += [numpy_helper.from_array(w, f"{proj}w{i}"), numpy_helper.from_array(s, f"{proj}s{i}")]
            nodes.append(helper.make_node("MatMulNBits", ["a", f"{proj}w{i}", f"{proj}s{i}"], [f"{proj}{i}"],
                                          name=f"{proj}{i}", domain="com.microsoft", K=k, N=n, bits=4,
                                          block_size=BLOCK, accuracy_level=level))
        nodes += [helper.make_node("Sigmoid", [f"g{i}"], [f"sig{i}"], name=f"sig{i}"),
                  helper.make_node("Mul", [f"g{i}", f"sig{i}"], [f"act{i}"], name=f"act{i}"),
                  helper.make_node("Mul", [f"act{i}", f"u{i}"], [f"y{i}"], name=f"mul{i}")]
        outs.append(helper.make_tensor_value_info(f"y{i}", _elem(dtype), [1, 1, n]))
    a = rng.uniform(-1, 1, (1, 1, k)).astype(dtype)
    model = _model(nodes, [helper.make_tensor_value_info("a", _elem(dtype), [1, 1, k])], outs, inits)
    label = (f"{GATED_NAME} {k}→{2 * n} {np.dtype(dtype).name} (accuracy_level {level}; gate and up {k}→{n} "
             f"and SiLU(gate) * up, one launch)")
    return Workload("MatMulNBits int4 GEMV", label, model, {"a": a}, {}, node_bytes, copies, True, 2e-2)


def gemv_bytes(k: int, n: int, dtype) -> int:
    """Bytes one M = 1 int4 GEMV moves: packed B, scales, A read once and Y written once."""
    size = np.dtype(dtype).itemsize
    blocks = k // BLOCK
    return n * blocks * (BLOCK // 2) + n * blocks * size + k * size + n * size


def matmul_gemv(k: int, n: int, dtype, l2: int, rng) -> Workload:
    """R MatMul nodes, each a float decode row [1, 1, K] times a weight [K, N] of its own."""
    from onnx import helper, numpy_helper

    size = np.dtype(dtype).itemsize
    node_bytes = (k * n + k + n) * size
    copies = _copies(node_bytes, l2)
    nodes, inits, outs = [], [], []
    for i in range(copies):
        w = (rng.standard_normal((k, n), dtype=np.float32) / math.sqrt(k)).astype(dtype)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", ["a", f"w{i}"], [f"y{i}"], name=f"matmul{i}"))
        outs.append(helper.make_tensor_value_info(f"y{i}", _elem(dtype), [1, 1, n]))
    a = rng.uniform(-1, 1, (1, 1, k)).astype(dtype)
    model = _model(nodes, [helper.make_tensor_value_info("a", _elem(dtype), [1, 1, k])], outs, inits)
    return Workload("MatMul GEMV", f"{k}x{n} {np.dtype(dtype).name} (hipep's own GEMV)", model, {"a": a}, {},
                    node_bytes, copies, True, 1e-2 if dtype == np.float16 else 1e-5, {"HIPEP_GEMM": "own"})


def matmul_prefill(m: int, k: int, n: int, gemm: str, rng) -> Workload:
    """4 MatMul nodes of an fp16 prefill [1, M, K] times a weight [K, N] of their own, through the
    GEMM path `gemm` (HIPEP_GEMM): compute-bound, so no gate; the results give TFLOP/s."""
    from onnx import helper, numpy_helper

    f16 = np.float16
    copies = 4
    nodes, inits, outs = [], [], []
    for i in range(copies):
        w = (rng.standard_normal((k, n), dtype=np.float32) / math.sqrt(k)).astype(f16)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", ["a", f"w{i}"], [f"y{i}"], name=f"matmul{i}"))
        outs.append(helper.make_tensor_value_info(f"y{i}", _elem(f16), [1, m, n]))
    a = rng.uniform(-1, 1, (1, m, k)).astype(f16)
    model = _model(nodes, [helper.make_tensor_value_info("a", _elem(f16), [1, m, k])], outs, inits)
    path = "cuBLASLt where it loads" if gemm == "auto" else "hipep's tiled GEMM"
    return Workload("MatMul GEMM", f"prefill {m}x{k}x{n} float16 (HIPEP_GEMM={gemm}: {path})", model, {"a": a},
                    {}, (m * k + k * n + m * n) * 2, copies, False, 1e-2, {"HIPEP_GEMM": gemm},
                    flops=2.0 * m * k * n)


def prompt_gemm(name: str, k: int, n: int, rows: int, tc: str, rng) -> Workload:
    """4 MatMulNBits nodes (fp16 A at level 0: the builder's int4-f16 form) of `rows` prompt rows through
    the path HIPEP_MNB_GEMM_TC=`tc` selects: 1 the tensor-core GEMM (kernels/matmul_nbits_gemm_tc.hip), 0
    the other one (up to 32 rows the GEMV per 8 rows, past it the weights dequantized into the workspace
    and cuBLASLt). Compute-bound past a few dozen rows: TFLOP/s, no gate."""
    f16 = np.float16
    model, a = _mnb_nodes(k, n, rows, f16, 0, 4, rng)
    path = "tensor-core GEMM" if tc == "1" else "HIPEP_MNB_GEMM_TC=0 (GEMV per 8 rows, or dequantized + cuBLASLt)"
    return Workload("MatMulNBits int4 prompt", f"{rows} rows, {name} {k}→{n} float16, {path}", model, {"a": a}, {},
                    gemv_bytes(k, n, f16) + rows * (k + n) * 2, 4, False, 2e-2, {"HIPEP_MNB_GEMM_TC": tc},
                    flops=2.0 * rows * k * n)


FLOOR_FAMILY, FLOOR_LABEL = "copy (harness floor)", "Identity copy sized as "


def copy_floor(name: str, k: int, n: int, l2: int, rng) -> Workload:
    """R Identity nodes, each copying half the fp16 GEMV's bytes into an output of their own (a
    memcpy node per copy in the replayed graph): the per-node floor of this harness at that size."""
    from onnx import helper

    f16 = np.float16
    elems = gemv_bytes(k, n, f16) // 4  # read 2 bytes and write 2 bytes per element
    node_bytes = 4 * elems
    copies = _copies(node_bytes, l2)
    T = helper.make_tensor_value_info
    inputs, outputs, nodes, feeds = [], [], [], {}
    for i in range(copies):
        inputs.append(T(f"x{i}", _elem(f16), [elems]))
        outputs.append(T(f"y{i}", _elem(f16), [elems]))
        feeds[f"x{i}"] = rng.uniform(-1, 1, elems).astype(f16)
        nodes.append(helper.make_node("Identity", [f"x{i}"], [f"y{i}"], name=f"copy{i}"))
    label = f"{FLOOR_LABEL}{name} {k}→{n} float16"
    return Workload(FLOOR_FAMILY, label, _model(nodes, inputs, outputs, []), feeds, {}, node_bytes,
                    copies, False, 0.0)


def gqa(context: int, l2: int, rng) -> Workload:
    """One decode step at total length `context` on a shared [1, kv, context, head] buffer per copy."""
    from onnx import helper, numpy_helper

    h, kv, d = GQA["heads"], GQA["kv_heads"], GQA["head"]
    f16 = np.float16
    cache_row = kv * d * 2
    node_bytes = 2 * context * cache_row + (h + 2 * kv) * d * 2 + 2 * cache_row + h * d * 2 + 2 * (d // 2) * 2
    copies = _copies(node_bytes, l2)
    half = d // 2
    angles = np.arange(context)[:, None] / (10000.0 ** (np.arange(half)[None] / half))
    inits = [numpy_helper.from_array(np.cos(angles).astype(f16), "cos_cache"),
             numpy_helper.from_array(np.sin(angles).astype(f16), "sin_cache")]
    T = helper.make_tensor_value_info
    inputs = [T("qkv", _elem(f16), [1, 1, (h + 2 * kv) * d]), T("seqlens_k", _elem(np.int32), [1]),
              T("total_sequence_length", _elem(np.int32), [])]
    feeds = {"qkv": rng.uniform(-1, 1, (1, 1, (h + 2 * kv) * d)).astype(f16),
             "seqlens_k": np.array([context - 1], np.int32), "total_sequence_length": np.array(context, np.int32)}
    nodes, outputs, shared = [], [], {}
    cache = [1, kv, context, d]
    for i in range(copies):
        for kind in ("key", "value"):
            inputs.append(T(f"past_{kind}{i}", _elem(f16), cache))
            outputs.append(T(f"present_{kind}{i}", _elem(f16), cache))
            feeds[f"past_{kind}{i}"] = rng.uniform(-1, 1, cache).astype(f16)
            shared[f"present_{kind}{i}"] = f"past_{kind}{i}"
        outputs.insert(len(outputs) - 2, T(f"out{i}", _elem(f16), [1, 1, h * d]))
        nodes.append(helper.make_node(
            "GroupQueryAttention",
            ["qkv", "", "", f"past_key{i}", f"past_value{i}", "seqlens_k", "total_sequence_length", "cos_cache",
             "sin_cache"], [f"out{i}", f"present_key{i}", f"present_value{i}"], name=f"gqa{i}",
            domain="com.microsoft", num_heads=h, kv_num_heads=kv, scale=1 / math.sqrt(d), do_rotary=1,
            rotary_interleaved=0, local_window_size=-1, softcap=0.0))
    model = _model(nodes, inputs, outputs, inits)
    label = f"decode, total length {context}, {h}/{kv} heads of {d}, fp16"
    return Workload("GroupQueryAttention", label, model, feeds, shared, node_bytes, copies, False, 2e-2)


def norm(op: str, rows: int, cols: int, l2: int, rng, dtype=np.float16) -> Workload:
    """fp16 rows are the bandwidth-shaped kernels; f32 rows (a f32 decoder's decode rows) the
    kernels that keep the CPU EP's summation order."""
    from onnx import helper, numpy_helper

    t = np.dtype(dtype).type
    size = np.dtype(dtype).itemsize
    skip = op == "SkipSimplifiedLayerNormalization"
    tensor = rows * cols * size
    node_bytes = (4 if skip else 2) * tensor + cols * size
    copies = _copies(node_bytes, l2)
    T = helper.make_tensor_value_info
    inputs, outputs, nodes, feeds = [], [], [], {}
    inits = [numpy_helper.from_array(rng.uniform(0.5, 1.5, cols).astype(t), "gamma")]
    for i in range(copies):
        ins = [f"x{i}"] + ([f"skip{i}"] if skip else [])
        for name in ins:
            inputs.append(T(name, _elem(t), [rows, cols]))
            feeds[name] = rng.uniform(-2, 2, (rows, cols)).astype(t)
        if skip:
            nodes.append(helper.make_node(op, ins + ["gamma"], [f"y{i}", "", "", f"sum{i}"], name=f"norm{i}",
                                          domain="com.microsoft", epsilon=1e-6))
            outputs += [T(f"y{i}", _elem(t), [rows, cols]), T(f"sum{i}", _elem(t), [rows, cols])]
        else:
            nodes.append(helper.make_node(op, ins + ["gamma"], [f"y{i}"], name=f"norm{i}", epsilon=1e-6, axis=-1,
                                          stash_type=1))
            outputs.append(T(f"y{i}", _elem(t), [rows, cols]))
    model = _model(nodes, inputs, outputs, inits)
    kind = "fp16" if size == 2 else "fp32, the CPU EP's order"
    return Workload(op, f"[{rows}, {cols}] {kind}", model, feeds, {}, node_bytes, copies, True, 1e-2)


def softmax(rows: int, cols: int, l2: int, rng) -> Workload:
    from onnx import helper

    f16 = np.float16
    node_bytes = 2 * rows * cols * 2
    copies = _copies(node_bytes, l2)
    T = helper.make_tensor_value_info
    inputs, outputs, nodes, feeds = [], [], [], {}
    for i in range(copies):
        inputs.append(T(f"x{i}", _elem(f16), [rows, cols]))
        outputs.append(T(f"y{i}", _elem(f16), [rows, cols]))
        feeds[f"x{i}"] = rng.uniform(-8, 8, (rows, cols)).astype(f16)
        nodes.append(helper.make_node("Softmax", [f"x{i}"], [f"y{i}"], name=f"softmax{i}", axis=-1))
    return Workload("Softmax", f"[{rows}, {cols}] fp16, last axis", _model(nodes, inputs, outputs, []), feeds, {},
                    node_bytes, copies, False, 1e-2)


def workloads(families, l2: int, quick: bool, context: int, seed: int = 0, prompt_rows=None,
              prompt_paths=("1", "0")):
    """The workloads, made one at a time (a model of 64 weight copies is a few hundred MB).
    `prompt_rows` and `prompt_paths` (HIPEP_MNB_GEMM_TC values) narrow the prompt family."""
    rng = np.random.default_rng(seed)
    if "gemv" in families:
        shapes = GEMV_SHAPES[:2] if quick else GEMV_SHAPES
        for dtype in (np.float16, np.float32):
            for name, k, n in shapes:
                yield lambda name=name, k=k, n=n, dtype=dtype: gemv(name, k, n, dtype, l2, rng)
            if not quick:  # the ~1.1B model's gate and up projections as it runs them
                yield lambda dtype=dtype: gated_gemv(2048, 8192, dtype, l2, rng)
    if "matmul" in families:
        for dtype in (np.float16, np.float32):
            yield lambda dtype=dtype: matmul_gemv(*MATMUL_SHAPE, dtype, l2, rng)
        if not quick:
            for gemm in ("auto", "own"):
                yield lambda gemm=gemm: matmul_prefill(PREFILL_ROWS, *MATMUL_SHAPE, gemm, rng)
            for dtype in (np.float16, np.float32):  # a 128-token prompt through the ~1.1B model's gate/up
                for gemm in ("auto", "own"):
                    yield lambda dtype=dtype, gemm=gemm: gemv("gate/up", 2048, 8192, dtype, l2, rng, rows=128,
                                                              gemm=gemm)
    if "prompt" in families:  # the ~1.1B model's projections at prompt lengths, both int4 GEMM paths
        for rows in prompt_rows or (PROMPT_ROWS[2:4] if quick else PROMPT_ROWS):
            for name, k, n in GEMV_SHAPES[1:5]:
                for tc in prompt_paths:
                    yield lambda name=name, k=k, n=n, rows=rows, tc=tc: prompt_gemm(name, k, n, rows, tc, rng)
    if "copy" in families:
        for name, k, n in (GEMV_SHAPES[:2] if quick else GEMV_SHAPES):
            yield lambda name=name, k=k, n=n: copy_floor(name, k, n, l2, rng)
        if not quick:
            yield lambda: copy_floor(GATED_NAME, 2048, 2 * 8192, l2, rng)
    if "gqa" in families:
        yield lambda: gqa(context, l2, rng)
        if not quick and context != GQA_SHORT:  # a decode step early in a conversation
            yield lambda: gqa(GQA_SHORT, l2, rng)
    if "norm" in families:
        for op in ("SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization"):
            for rows, cols in (NORM_SHAPES[:2] if quick else NORM_SHAPES):
                yield lambda op=op, rows=rows, cols=cols: norm(op, rows, cols, l2, rng)
        if not quick:  # the ~1.1B model's f32 decode rows
            for op in ("SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization"):
                yield lambda op=op: norm(op, 1, 2048, l2, rng, np.float32)
    if "softmax" in families:
        for rows, cols in (SOFTMAX_SHAPES[:2] if quick else SOFTMAX_SHAPES):
            yield lambda rows=rows, cols=cols: softmax(rows, cols, l2, rng)


# ---- running one ----------------------------------------------------------------------------------

class Bound:
    """A session with every input and output bound once (shared outputs to their input's value)."""

    def __init__(self, sess, w: Workload, place: gh.Placement, output_shapes: dict | None):
        self.sess, self.binding = sess, sess.io_binding()
        self.values = {name: place.value(a) for name, a in w.feeds.items()}
        for name, v in self.values.items():
            self.binding.bind_ortvalue_input(name, v)
        self.names = [o.name for o in sess.get_outputs()]
        self.outputs = {}  # the output values bound here (kept alive with the binding)
        for name in self.names:
            if name in w.shared:
                self.outputs[name] = self.values[w.shared[name]]
            elif output_shapes is None:  # the CPU reference: ORT allocates
                self.binding.bind_output(name)
                continue
            else:
                shape, dtype = output_shapes[name]
                self.outputs[name] = place.empty(shape, dtype)
            self.binding.bind_ortvalue_output(name, self.outputs[name])

    def run(self) -> None:
        self.sess.run_with_iobinding(self.binding)

    def results(self) -> dict:
        # get_outputs lists the bound outputs in the order they were bound
        return {name: gh.to_host(v) for name, v in zip(self.names, self.binding.get_outputs())}


def reference(w: Workload) -> dict:
    """The CPU EP's outputs, on copies of the inputs (a shared buffer is written by the run)."""
    import onnxruntime as ort

    sess = ort.InferenceSession(w.model, providers=["CPUExecutionProvider"])
    own = dataclasses.replace(w, feeds={name: a.copy() for name, a in w.feeds.items()})
    bound = Bound(sess, own, gh.Placement(0, want_device=False), None)
    bound.run()
    return bound.results()


def rel_l2(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    den = np.linalg.norm(want)
    return float(np.linalg.norm(got - want) / den) if den else float(np.linalg.norm(got - want))


def _stats() -> tuple[int, int, int, int]:
    import hipep

    s = hipep.stats()
    return s.get("kernel_us", 0), s.get("launches", 0), s.get("specializations", 0), s.get("transfer_bytes", 0)


def measure(w: Workload, place: gh.Placement, device_id: int, seconds: float, device: str = "cuda") -> dict:
    saved = {name: os.environ.get(name) for name in w.env}
    os.environ.update(w.env)
    try:
        return _measure(w, place, device_id, seconds, device)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _measure(w: Workload, place: gh.Placement, device_id: int, seconds: float, device: str) -> dict:
    import hipep

    row = {"family": w.family, "label": w.label, "copies": w.copies, "node_bytes": w.node_bytes,
           "working_set": w.working_set, "gated": w.gated, "limit": w.limit}
    try:
        want = reference(w)
    except Exception as e:  # noqa: BLE001
        row["error"] = f"ORT's CPU EP (the reference) failed: {gh.first_line(e)}"
        return row
    shapes = {name: (a.shape, a.dtype) for name, a in want.items()}
    try:
        sess = hipep.InferenceSession(w.model, device=device, device_id=device_id)
        bound = Bound(sess, w, place, shapes)
        bound.run()
        got = bound.results()
    except Exception as e:  # noqa: BLE001 - a missing kernel or a failed run is this row's result
        row["error"] = gh.first_line(e)
        return row
    row["rel_l2"] = max(rel_l2(got[name], want[name]) for name in want)
    try:
        for _ in range(3):  # the first runs trace, bind and capture
            bound.run()
        t0 = time.perf_counter()
        for _ in range(10):
            bound.run()
        per_run = max((time.perf_counter() - t0) / 10, 1e-6)
        runs = int(min(2000, max(20, seconds / per_run)))
        k0, l0, s0, b0 = _stats()
        t0 = time.perf_counter()
        for _ in range(runs):
            bound.run()
        wall = time.perf_counter() - t0
        k1, l1, s1, b1 = _stats()
    except Exception as e:  # noqa: BLE001
        row["error"] = gh.first_line(e)
        return row
    kernel_s = (k1 - k0) / 1e6 / runs
    if kernel_s <= 0:  # this hipep did not time its kernels: the whole run's wall time is all there is
        kernel_s, row["timing"] = wall / runs, "wall"
    row.update(runs=runs, wall_us=wall / runs * 1e6, run_kernel_us=kernel_s * 1e6,
               node_us=kernel_s * 1e6 / w.copies, launches=(l1 - l0) / runs, specializations=s1 - s0,
               transfer_bytes=(b1 - b0) / runs)
    row["gbps"] = w.working_set / kernel_s / 1e9 if kernel_s > 0 else float("nan")
    if w.flops:
        row["tflops"] = w.flops / (kernel_s / w.copies) / 1e12 if kernel_s > 0 else float("nan")
    return row


# ---- results --------------------------------------------------------------------------------------

def verdicts(rows: list[dict], copy_gbps: float, l2: int) -> None:
    for r in rows:
        r["l2_resident"] = r["working_set"] < 2 * l2
        r["fraction"] = r["gbps"] / copy_gbps if "gbps" in r else None
        if "error" in r:
            r["met"] = False if r["gated"] else None
        elif not r["gated"] or r["l2_resident"]:
            r["met"] = None
        else:
            r["met"] = bool(r["fraction"] >= GATE and r["rel_l2"] <= r["limit"])


def against_floor(rows: list[dict]) -> list[tuple[dict, dict, float]]:
    """(GEMV row, the copy floor row of its shape, the row's GB/s as a fraction of the floor's) for
    every GEMV row whose shape has a copy row that ran: the copy of those bytes in the same replayed
    graph, what one op of that size can show in this harness."""
    floors = {r["label"][len(FLOOR_LABEL):].rsplit(" ", 1)[0]: r for r in rows
              if r["family"] == FLOOR_FAMILY and "error" not in r and r.get("gbps")}
    out = []
    for r in rows:
        if r["family"] == FLOOR_FAMILY or "error" in r or not r.get("gbps") or "GEMV" not in r["family"]:
            continue
        shape = next((k for k in floors if r["label"].startswith(k + " ")), None)
        if shape is not None:
            out.append((r, floors[shape], r["gbps"] / floors[shape]["gbps"]))
    return out


def render(info: dict, rows: list[dict], copy: dict, place: gh.Placement, command: str) -> str:
    L = gh.header_lines(f"GPU kernel bandwidth on {info['gpu']}", info, command)
    L += [f"- inputs and outputs: {place.label} ({place.why})",
          "- time per op: hipep.stats()['kernel_us'] deltas over repeated runs (CUDA events around each "
          "run's replay: its kernels from the first launch to the last end, gaps between them included, "
          "staging copies excluded), divided by runs and by the op's copies in the model",
          "- GB/s: bytes the op must move (inputs read once, outputs written once) / time per op; the "
          "copy: cuMemcpyDtoDAsync, read and write counted",
          "- copied host↔device/run: hipep.stats()['transfer_bytes'] (host memory staged in and out; none "
          "with device OrtValues); wall µs/run: the whole run_with_iobinding call", "",
          f"Device-to-device copy of {gh.bytes_text(copy['bytes'])}: **{copy['gbps']:.0f} GB/s**. "
          f"Gate: int4 GEMV and the norms at ≥ {GATE:.0%} of it ({GATE * copy['gbps']:.0f} GB/s), outputs "
          f"within the row's limit of ORT's CPU EP; rows whose working set stays under twice the L2 size "
          f"have no gate (L2-resident). The copy rows are this harness's floor: Identity nodes moving "
          f"each fp16 GEMV's bytes as memcpy nodes of the same replayed graph, so their µs/op holds the gap "
          f"between graph nodes and each node's ramp-up and tail as the GEMV rows do; a GEMV row near its "
          f"copy row's % is at what one op of that size can show here.", "",
          "| op | workload | copies | bytes/op | µs/op | GB/s | % of copy | gate | launches/run | "
          "copied host↔device/run | wall µs/run | rel L2 vs CPU EP (limit) |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        gate = "—" if r["met"] is None else ("yes" if r["met"] else "**no**")
        if r.get("l2_resident") and "error" not in r:
            gate = "L2-resident"
        if "error" in r:
            L.append(f"| {r['family']} | {r['label']} | {r['copies']} | {gh.bytes_text(r['node_bytes'])} | "
                     f"failed: {r['error'].replace('|', '/')} | | | {gate} | | | | |")
            continue
        L.append(f"| {r['family']} | {r['label']} | {r['copies']} | {gh.bytes_text(r['node_bytes'])} | "
                 f"{r['node_us']:.2f} | {r['gbps']:.0f} | {100 * r['fraction']:.0f} % | {gate} | "
                 f"{r['launches']:.0f} | {gh.bytes_text(r['transfer_bytes'])} | {r['wall_us']:.1f} | "
                 f"{r['rel_l2']:.1e} ({r['limit']:g}) |")
    failed = [r for r in rows if "error" in r]
    missed = [r for r in rows if r["met"] is False and "error" not in r]
    L += ["", f"{len(rows) - len(failed)} of {len(rows)} workloads ran; gates missed: {len(missed)}"
              + (f"; could not run: {len(failed)}" if failed else "") + "."]
    floor = against_floor(rows)
    if floor:
        L += ["", "Against the copy of the same bytes in the same replayed graph (the harness floor row of the "
                  "shape), the measure proposed for single ops of a few MB:", "",
              "| workload | GB/s | its shape's copy row, GB/s | % of that copy |", "|---|---|---|---|"]
        L += [f"| {r['family']} {r['label']} | {r['gbps']:.0f} | {f['gbps']:.0f} | {100 * x:.0f} % |"
              for r, f, x in floor]
    compute = [r for r in rows if r.get("tflops") is not None]
    if compute:
        L += ["", "Compute-bound rows (no gate; their GB/s is not the measure):", ""]
        L += [f"- {r['family']} {r['label']}: **{r['tflops']:.1f} TFLOP/s** ({r['node_us']:.1f} µs/op)"
              for r in compute]
    if any(r.get("timing") == "wall" for r in rows):
        L += ["", "Some rows show no kernel_us: their time per op is the run's wall time (ORT and hipep's host "
                  "work included), an upper bound."]
    if any(r.get("specializations") for r in rows):
        L += ["", "Some rows specialized again during the timed runs (a new layout each run): "
                  "their times include tracing."]
    return "\n".join(L) + "\n"


def plot(path: str, rows: list[dict], copy_gbps: float) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install '.[bench]'): no plot", file=sys.stderr)
        return False
    done = [r for r in rows if "gbps" in r]
    if not done:
        return False
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(done) + 1.5))
    y = np.arange(len(done))[::-1]
    colors = ["C2" if r["met"] else "C3" if r["met"] is False else "C7" for r in done]
    ax.barh(y, [r["gbps"] for r in done], color=colors)
    ax.set_yticks(y, [f"{r['family']}: {r['label']}" for r in done], fontsize=7)
    ax.axvline(copy_gbps, color="k", lw=1, label=f"D2D copy {copy_gbps:.0f} GB/s")
    ax.axvline(GATE * copy_gbps, color="k", lw=1, ls="--", label=f"gate {GATE:.0%} of copy")
    ax.set_xlabel("achieved GB/s (bytes that must move / time per op)")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("hipep kernels (green: gate met, red: missed, gray: no gate)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="few shapes and short timings: a smoke test")
    ap.add_argument("--only", default=",".join(FAMILIES), help=f"comma-separated subset of {','.join(FAMILIES)}")
    ap.add_argument("--context", type=int, default=4096, help="GroupQueryAttention's total length (default 4096)")
    ap.add_argument("--seconds", type=float, default=0.5, help="timed seconds per workload (default 0.5)")
    ap.add_argument("--host-io", action="store_true", help="bind host memory even if device OrtValues work")
    ap.add_argument("--prompt-rows", help=f"the prompt family's rows (default {','.join(map(str, PROMPT_ROWS))}; "
                                           "--quick: the middle two)")
    ap.add_argument("--prompt-paths", default="tc,other",
                    help="the prompt family's paths: tc (the tensor-core GEMM), other, or both (default)")
    ap.add_argument("--device-id", type=int, default=0)
    ap.add_argument("--out", default=RESULTS, help="folder for <date>-kernels-<gpu>.md and .png")
    args = ap.parse_args(argv)
    families = [f.strip() for f in args.only.split(",") if f.strip()]
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        ap.error(f"--only: unknown {', '.join(unknown)}; known: {', '.join(FAMILIES)}")
    if args.context < 2:
        ap.error("--context must be at least 2")
    try:
        prompt_rows = [int(r) for r in args.prompt_rows.split(",")] if args.prompt_rows else None
    except ValueError:
        ap.error(f"--prompt-rows: comma-separated row counts, got {args.prompt_rows!r}")
    if prompt_rows is not None and min(prompt_rows, default=0) < 1:
        ap.error("--prompt-rows: row counts of at least 1")
    paths = {"tc": "1", "other": "0"}
    names = [p.strip() for p in args.prompt_paths.split(",") if p.strip()]
    if not names or set(names) - set(paths):
        ap.error(f"--prompt-paths: tc, other or both, got {args.prompt_paths!r}")
    prompt_paths = tuple(paths[p] for p in names)
    try:
        device = gh.require_gpu(args.device_id)
    except gh.Unavailable as e:
        return gh.fail("kernel_bandwidth.py", str(e))
    info = {**machine_info(), **gh.gpu_info(device)}
    print(f"{info['date']} {info['commit']} {info['gpu']} ({info['arch']}, L2 {info['l2_bytes'] / 2**20:.0f} MiB)",
          flush=True)
    copy = gh.copy_bandwidth(device)
    print(f"device-to-device copy: {copy['gbps']:.0f} GB/s", flush=True)
    place = gh.Placement(args.device_id, want_device=not args.host_io)
    print(f"inputs and outputs: {place.label} ({place.why})", flush=True)
    command = "python benchmarks/kernel_bandwidth.py" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"{info['date']}-kernels-{gh.device_slug(info['gpu'])}")
    rows = []
    seconds = 0.05 if args.quick else args.seconds
    for make in workloads(families, info["l2_bytes"], args.quick, args.context, prompt_rows=prompt_rows,
                          prompt_paths=prompt_paths):
        w = make()
        r = measure(w, place, args.device_id, seconds)
        rows.append(r)
        if "error" in r:
            print(f"{r['family']:<34} {r['label']:<44} FAILED: {r['error']}", flush=True)
        else:
            print(f"{r['family']:<34} {r['label']:<44} {r['node_us']:9.2f} us/op {r['gbps']:7.0f} GB/s "
                  f"({100 * r['gbps'] / copy['gbps']:3.0f} % of copy)  rel L2 {r['rel_l2']:.1e}", flush=True)
        del w
        # written after every row: a run stopped early keeps what it measured
        verdicts(rows, copy["gbps"], info["l2_bytes"])
        with open(stem + ".md", "w") as f:
            f.write(render(info, rows, copy, place, command))
    if plot(stem + ".png", rows, copy["gbps"]):
        with open(stem + ".md", "a") as f:
            f.write(f"\n![achieved bandwidth]({os.path.basename(stem)}.png)\n")
    failed = [r for r in rows if "error" in r]
    missed = [r for r in rows if r["met"] is False and "error" not in r]
    print(f"\nwrote {stem}.md")
    for r in failed:
        print(f"could not run: {r['family']} {r['label']}: {r['error']}")
    for r in missed:
        print(f"gate missed: {r['family']} {r['label']}: {100 * r['fraction']:.0f} % of copy, rel L2 {r['rel_l2']:.1e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
