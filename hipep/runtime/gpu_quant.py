"""GPU bindings: MatMulNBits (4 and 8 bits: a dequantizing GEMV for few rows, a GEMM for prefill) and GatherBlockQuantized.

Registered into the kernel table (hipep.runtime.gpu_kernels) when it is imported.

MatMulNBits (kernels/matmul_nbits.hip) reads B in ONNX Runtime's layout as it is ([N, n_blocks,
blob] bytes: one contiguous row of K_pad values per output column), so the weights need no
repacking. Up to GEMV_MAX_ROWS rows of A (decode) run the GEMV: warps of 8 per block, 2 output
columns per warp (4 for one row where K is short and N wide: `gemv_wide`), A in shared memory in K tiles sized to the rows, and where N alone makes fewer
blocks than SMs the block's warps split K (`gemv_k_split`); more rows run the tiled GEMM,
except up to GEMV_CHAIN_MAX_ROWS rows where the GEMM's grid would not cover the SMs: the GEMV then
runs once per 8 rows. On a device with tensor cores, prompts of fp16 or bf16 A with 4-bit weights
take the tensor-core GEMM first (kernels/matmul_nbits_gemm_tc.hip: the weights dequantized in
shared memory, never written out), up to GEMM_TC_MAX_ROWS rows ahead of the vendor BLAS on weights
dequantized into the workspace (_mnb_blas_ops), at any length where that path does not run, and
up to GEMM_TC_FIRST_RUN_ROWS rows in a length's first run (provisionally: see there).
At accuracy_level 4 with integer (or no) zero points the kernels quantize A to int8 per block of
K as ONNX Runtime's CPU EP does (the registry reference's rule, hipep.ops.contrib_quant): the GEMV
while staging A (its K tiles hold whole blocks), the GEMM after a small kernel has written each
block's scale into the stream's workspace.
GatherBlockQuantized (kernels/gather_block_quantized.hip) gathers and dequantizes rows of uint8
data with gather_axis 0 and quantize_axis last, the only form the op registry claims.
"""
from __future__ import annotations

import dataclasses

import ctypes
import os

import numpy as np

from ..errors import HipepError
from .gpu_binding_core import workspace_after, workspace_regions
from .gpu_kernels import Arg, KernelOp, NoKernel, _binding, _cdiv, _dt, _prod, ptr
# (after gpu_kernels, which imports gpu_linalg before this module; a function-level import costs
# ~2 µs a call, and a new prompt length binds every MatMulNBits node. Called through the module, so
# what tests put in its place is what runs.)
from . import cublaslt, gpu_linalg  # noqa: E402

MNB = "com.microsoft::MatMulNBits"
GBQ = "com.microsoft::GatherBlockQuantized"
_FLOATS = ("float32", "float16", "bfloat16")

GEMV_MAX_ROWS = 8
GEMV_CHAIN_MAX_ROWS = 32  # up to this many rows, the GEMV per 8 rows where the GEMM's grid is under one block per SM
DEQUANT_THREADS = 256
# The largest dequantized weight the BLAS path writes into the stream's workspace, which keeps it
# while the stream lives (a ~1.1B model's f32 lm_head, 32000 x 2048, is 262 MB): past it the own
# GEMM runs, with no copy of the weights.
MNB_BLAS_MAX_BYTES = 288 << 20
GEMV_WARPS = 8          # MNB_WARPS in the kernel
GEMV_COLS = 2           # MNB_COLS: output columns per warp
GEMV_COLS_WIDE = 4      # MNB_COLS_WIDE: the wide one-row variant's (entry suffix _c4)
GEMV_PAD = 4            # MNB_PAD: floats of padding after each chunk of A in shared memory
GEMV_SMEM_BUDGET = 40 * 1024  # bytes of A per block (below the 48 KiB a launch may use without opt-in)
GEMM_TILE = 64          # MNB_BM = MNB_BN
GEMM_THREADS = 256

# Knobs of the GEMV's launch shape for tuning on a device, read once at import (unset: defaults).
# HIPEP_MNB_GEMV_BLOCKS_PER_SM: K is split among a block's warps until the grid has this many
# blocks per SM (default 1). The one-row GEMV keeps 4 chunks (8 16-byte loads of B) per lane in
# flight and two blocks reside per SM (128 registers a thread), so one block per SM with whole rows
# of K per warp streams B in one round of memory latency; splitting K further doubles the blocks
# and halves each lane's loads, which pays only where a round of blocks cannot cover the SMs.
# HIPEP_MNB_GEMV_K_SPLIT: force the split (1, 2, 4 or 8; still capped so each split keeps a
# warp-width of chunks per tile).
# HIPEP_MNB_GEMV_WIDE: 0 turns off the wide one-row variant (4 columns a warp, see gemv_wide).
GEMV_BLOCKS_PER_SM_ENV = "HIPEP_MNB_GEMV_BLOCKS_PER_SM"
GEMV_K_SPLIT_ENV = "HIPEP_MNB_GEMV_K_SPLIT"
GEMV_WIDE_ENV = "HIPEP_MNB_GEMV_WIDE"


def _env_int(name: str, default: int, allowed) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        v = int(raw)
    except ValueError:
        v = None
    if v not in allowed:
        raise HipepError(f"{name}={raw!r}: expected one of {', '.join(str(a) for a in allowed)}")
    return v


GEMV_BLOCKS_PER_SM = _env_int(GEMV_BLOCKS_PER_SM_ENV, 1, range(1, 65))
GEMV_K_SPLIT = _env_int(GEMV_K_SPLIT_ENV, 0, (0, 1, 2, 4, 8))  # 0: chosen by gemv_k_split
GEMV_WIDE = _env_int(GEMV_WIDE_ENV, 1, (0, 1))
# HIPEP_MNB_GEMV_ROW: 0 turns off the one-row GEMV in packed arithmetic (_mnb_row_op).
GEMV_ROW_ENV = "HIPEP_MNB_GEMV_ROW"
GEMV_ROW = _env_int(GEMV_ROW_ENV, 1, (0, 1))
# HIPEP_MNB_GEMV_ROW_COLS: 0 keeps the one-row GEMV at one column a warp (see row_cols_form).
GEMV_ROW_COLS_ENV = "HIPEP_MNB_GEMV_ROW_COLS"
GEMV_ROW_COLS = _env_int(GEMV_ROW_COLS_ENV, 1, (0, 1))
# HIPEP_MNB_GEMV_TC: where the device has tensor cores, 1 runs fp16 decode rows on them too, 0 runs
# none there (see row_tc_form). Unset (-1): bf16 rows only, which have no packed form of their own;
# fp16's h2 forms were faster on the H100 and H200.
GEMV_ROW_TC_ENV = "HIPEP_MNB_GEMV_TC"
GEMV_ROW_TC = _env_int(GEMV_ROW_TC_ENV, -1, (0, 1))

# The tensor-core GEMM for prompts (kernels/matmul_nbits_gemm_tc.hip): 4-bit weights dequantized in
# shared memory on their way to mma.sync. HIPEP_MNB_GEMM_TC (read at each bind): unset, for more
# than GEMV_MAX_ROWS and up to GEMM_TC_MAX_ROWS rows, and for any number where the BLAS path does
# not run; 1 for every prompt it can take; 0 never. HIPEP_MNB_GEMM_TC_SPLIT forces its number of K
# splits (1, 2, 4 or 8; unset: gemm_tc_splits).
GEMM_TC_ENV = "HIPEP_MNB_GEMM_TC"
GEMM_TC_SPLIT_ENV = "HIPEP_MNB_GEMM_TC_SPLIT"
GEMM_TC_TILE = 64        # MNB_GTC_BM = MNB_GTC_BN = MNB_GTC_BK
GEMM_TC_THREADS = 128    # MNB_GTC_THREADS
# On the H100 the tensor-core GEMM beats the GEMV per 8 rows 3-6x up to 32 rows and the dequantize-then-cuBLASLt
# path up to 64 (ties on the smaller products); at 128 rows cuBLASLt is 1.1-1.4x faster
# (benchmarks/results/2026-12-06-prompt-gemm-tc-h100.md).
GEMM_TC_MAX_ROWS = 64
GEMM_TC_ANY_ROWS = 1 << 62  # HIPEP_MNB_GEMM_TC=1: every length
GEMM_TC_MAX_SPLITS = 4
# A prompt length's first run (Target.first_run) takes the tensor-core GEMM up to this many rows
# where cuBLASLt would run, and the run that captures the length's graph binds cuBLASLt: at a shape
# new to the process cuBLASLt first plans (0.15-0.34 ms a product) and CUDA loads the kernels its
# heuristic picks (1.6-3.5 ms each), 6-14 ms of host time at a new length on the ~1.1B model,
# while the first run issues its launches one at a time and its GPU work hides behind that host
# time (benchmarks/results/2026-12-06-prompt-step-host-study-h100.md). On the H100 a new length of
# 77-512 tokens then took 12-14 ms instead of 24-55 (its kernels 10-11 ms, behind 11-13 ms of host
# time even at 512 rows; benchmarks/results/2026-12-07-gpu-tests-6db076b-h100.md). Past this many
# rows the tensor-core GEMM's extra GPU time (3.4 ms at 512 rows on that model, growing with the
# rows) would no longer hide. HIPEP_MNB_GEMM_TC_FIRST_RUN_ROWS sets it (0: the first run binds as
# every other run, so that every run of a length gives the same bits); HIPEP_GEMM=blas (cuBLASLt for
# every product it takes) turns it off too.
GEMM_TC_FIRST_RUN_ENV = "HIPEP_MNB_GEMM_TC_FIRST_RUN_ROWS"
GEMM_TC_FIRST_RUN_ROWS = 512


class MatMulNBitsArgs(ctypes.Structure):
    _fields_ = [("m", ctypes.c_longlong), ("n", ctypes.c_longlong), ("k", ctypes.c_longlong),
                ("k_pad", ctypes.c_longlong), ("row_bytes", ctypes.c_longlong), ("nb", ctypes.c_longlong),
                ("zp_row", ctypes.c_longlong), ("log2_bs", ctypes.c_int), ("k_tile", ctypes.c_int),
                ("zp_mode", ctypes.c_int), ("aligned16", ctypes.c_int), ("k_split", ctypes.c_int),
                ("a_vec", ctypes.c_int), ("int8_a", ctypes.c_int)]


class GatherBlockQuantizedArgs(ctypes.Structure):
    _fields_ = [("rows", ctypes.c_longlong), ("r", ctypes.c_longlong), ("dp", ctypes.c_longlong),
                ("n_axis", ctypes.c_longlong), ("nb", ctypes.c_longlong), ("zp_row", ctypes.c_longlong),
                ("log2_bs", ctypes.c_int)]


def _pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def _dtype_at(dtypes, i: int) -> str:
    return dtypes[i] if i < len(dtypes) and dtypes[i] else ""


# ---- MatMulNBits ---------------------------------------------------------------------------------

def _mnb_layout(attrs) -> tuple[int, int, int, int, int, int]:
    """(K, N, bits, block_size, n_blocks, blob bytes)."""
    k, n, bits, bs = int(attrs["K"]), int(attrs["N"]), int(attrs.get("bits", 4)), int(attrs["block_size"])
    return k, n, bits, bs, _cdiv(k, bs) if bs > 0 else 0, bs * bits // 8


def _trivial_g_idx(g_idx, k: int, bs: int) -> bool:
    """g_idx that maps every k to its own block (k // block_size) changes nothing."""
    if g_idx is None:
        return False
    g = np.asarray(g_idx).reshape(-1)
    return g.size == k and np.array_equal(g.astype(np.int64), np.arange(k, dtype=np.int64) // bs)


def _mnb_attr_reason(attrs) -> str | None:
    bits, bs = int(attrs.get("bits", 4)), int(attrs["block_size"])
    if bits not in (4, 8):
        return f"bits={bits} (the kernels take 4 and 8)"
    if not (_pow2(bs) and 16 <= bs <= 256):
        return f"block_size={bs} (the kernels take a power of two from 16 to 256)"
    if int(attrs.get("weight_prepacked", 0)) != 0:
        return f"weight_prepacked={attrs['weight_prepacked']} (B must be in ONNX Runtime's [N, n_blocks, blob] layout)"
    if int(attrs["K"]) <= 0 or int(attrs["N"]) <= 0:
        return f"K={attrs['K']}, N={attrs['N']} must be positive"
    return None


def _mnb_check(attrs, dtypes, shapes, values):
    why = _mnb_attr_reason(attrs)
    if why:
        return why
    a = _dtype_at(dtypes, 0)
    if a not in _FLOATS:
        return f"A of element type {a or '?'} (the kernels take {', '.join(_FLOATS)})"
    b = _dtype_at(dtypes, 1)
    if b and b != "uint8":
        return f"B of element type {b} (uint8 expected)"
    s = _dtype_at(dtypes, 2)
    if s and s != a:
        return f"scales of element type {s} with A of type {a} (the same type expected)"
    z = _dtype_at(dtypes, 3)
    if z and z not in ("uint8", a):
        return f"zero_points of element type {z} with A of type {a} (uint8 or A's type expected)"
    if _dtype_at(dtypes, 4):
        g = values[4] if len(values) > 4 else None
        k, _, _, bs, _, _ = _mnb_layout(attrs)
        if not _trivial_g_idx(g, k, bs):
            return "input g_idx (act-order reordering of K): the kernels read K in order"
    bias = _dtype_at(dtypes, 5)
    if bias and bias != a:
        return f"bias of element type {bias} with A of type {a} (the same type expected)"
    return None


def _gemv_k_tile(m_t: int, vpl: int, k_pad: int, block_size: int) -> int:
    """Values of K per shared-memory tile of the GEMV for m_t rows: as many chunks as fit the
    budget (a multiple of the warp's 32 lanes where possible), no more than K_pad needs. A tile
    holds whole quantization blocks (int8 A finds each block's amax there): a multiple of
    block_size, or all of K_pad (itself one)."""
    chunks = GEMV_SMEM_BUDGET // (m_t * (vpl + GEMV_PAD) * 4)
    if chunks >= 32:
        chunks -= chunks % 32
    k_tile = max(1, min(chunks, _cdiv(k_pad, vpl))) * vpl
    if k_tile < k_pad:  # several tiles: at least 32 chunks (512 values) each, so >= block_size <= 256
        k_tile -= k_tile % block_size
    return k_tile


def quantizes_a_to_int8(attrs, zp_mode: int) -> bool:
    """Whether A is quantized to int8 per block (accuracy_level 4 with integer or no zero points),
    the rule of the registry reference (hipep.ops.contrib_quant._matmul_nbits): its claim takes
    such a node only where ORT's CPU EP would (constant weights)."""
    return int(attrs.get("accuracy_level", 0)) == 4 and zp_mode != 2


def gemv_k_split(n: int, tile_chunks: int, sm_count: int, warp: int = 32,
                 blocks_per_sm: int | None = None, force: int | None = None, cols: int = GEMV_COLS) -> int:
    """Ways the GEMV block's warps split K: doubled (fewer columns per block, more blocks) while
    the grid has fewer than `blocks_per_sm` (GEMV_BLOCKS_PER_SM) blocks per SM and each split keeps
    a warp-width of chunks per tile. Not more: every split halves the loads of B a lane has in
    flight, and past the blocks that reside at once (two per SM) the grid takes a second round of
    memory latency (4096 x 4096 at block 32: 256 blocks of whole rows, not 512 of half rows).
    `force` (GEMV_K_SPLIT) fixes it, within the same warp-width cap. `cols`: columns per warp."""
    per_sm = GEMV_BLOCKS_PER_SM if blocks_per_sm is None else blocks_per_sm
    force = GEMV_K_SPLIT if force is None else force
    k_split = 1
    while k_split < GEMV_WARPS and tile_chunks >= warp * 2 * k_split:
        if force and k_split >= force:
            break
        if not force and _cdiv(n, GEMV_WARPS // k_split * cols) >= per_sm * sm_count:
            break
        k_split *= 2
    return k_split


def gemv_wide(m_t: int, n: int, tile_chunks: int, sm_count: int, warp: int = 32,
              blocks_per_sm: int | None = None, enabled: bool | None = None) -> bool:
    """Whether a one-row GEMV runs the wide variant: 4 columns a warp with 2 chunks each in flight
    per lane, where a warp covers a tile's row in at most 2 chunks a lane (K <= 2048 at 4 bits, the
    narrow variant's other 2 loads a column would stay empty) and N still gives every SM its
    blocks unsplit (gate/up and lm_head of a 2048-wide model: half the blocks, each with twice the
    loads of B in flight)."""
    per_sm = GEMV_BLOCKS_PER_SM if blocks_per_sm is None else blocks_per_sm
    on = GEMV_WIDE if enabled is None else enabled
    return bool(on and m_t == 1 and tile_chunks <= 2 * warp
                and _cdiv(n, GEMV_WARPS * GEMV_COLS_WIDE) >= per_sm * sm_count)


def gemv_rows(m: int) -> int:
    """The GEMV's row count M_T for m rows of A: m rounded up to 1, 2, 4 or 8."""
    for m_t in (1, 2, 4, 8):
        if m <= m_t:
            return m_t
    raise ValueError(f"{m} rows is past the GEMV's {GEMV_MAX_ROWS}")


# Blocks of hipep_mnb_gemv_row_* resident per SM (its __launch_bounds__): a grid past this many per
# SM runs in several waves. Grids of at most ROW_W3_BLOCKS_PER_SM per SM take the `_w3` entry, whose
# larger register share keeps the q8 variants from spilling (kernels/matmul_nbits_row.hip).
ROW_BLOCKS_PER_SM = 4
ROW_W3_BLOCKS_PER_SM = 3
# K split between two warps of a column where the grid is at most half a wave, from this many
# chunks of the row a lane on: shorter rows gain nothing measurable (the o projection, 2 chunks a
# lane, 8 %; the down projection, 8, 28 %).
SPLIT_MIN_CHUNKS_PER_LANE = 2


@dataclasses.dataclass
class RowPlan:
    """How the one-row GEMV in packed arithmetic runs a node: the kernel template
    (kernels/matmul_nbits_row.h) and its instance. `form`: "row" (hipep_mnb_gemv_row, tiled),
    "row1" (hipep_mnb_gemv_row1: one round of U chunks a lane), "split" (row1 with two warps a
    column), "cols" (row1 with `cols` columns a warp and `split` warps a column) or "tc"
    (hipep_mnb_gemv_tc, kernels/matmul_nbits_tc.hip: tensor cores, 16 columns a warp, `split` warps
    a column group); `min_blocks`: the instance's launch bounds; `entry`: its name in `module`."""
    form: str
    q8: bool
    u: int
    zp: bool
    min_blocks: int
    entry: str
    grid: tuple
    smem: int
    tile_chunks: int
    cols: int = 1
    split: int = 1
    module: str = "matmul_nbits_row"
    paired: bool = False  # tc: block 32, a chunk pair's scales as one load


# The several-columns-a-warp instances of hipep_mnb_gemv_row1 (kernels/matmul_nbits_row.hip,
# HIPEP_MNB_ROW1_COLS), per row length in warp-widths of chunks: (U, columns a warp, warps a column,
# launch bounds). Rows of up to 2 warp-widths (K <= 2048 at warp 32) take 4 columns a warp where the
# grid is one wave of 3 blocks per SM, else 2 at 5 per SM (the LM head); up to 4 widths, U 4 and 2
# columns; up to 8, four warps a column of U 2 and 2 columns.
ROW_COLS_ONE_WAVE = (2, 4, 1, 3)
ROW_COLS_WAVES = (2, 2, 1, 5)
ROW_COLS_BY_WIDTHS = {4: (4, 2, 1, 3), 8: (2, 2, 4, 4)}


def row_cols_form(chunks: int, n: int, target) -> tuple[int, int, int, int] | None:
    """(U, columns a warp, warps a column, launch bounds) of the several-columns-a-warp row GEMV for
    an fp16 row of `chunks` chunks into n columns, or None where no instance was measured to gain (a
    row of at most one warp-width of chunks, or past eight)."""
    ws = target.warp_size
    if not GEMV_ROW_COLS or chunks <= ws or chunks > 8 * ws:
        return None
    if chunks <= 2 * ws:
        u, cols, split, lb = ROW_COLS_ONE_WAVE
        if _cdiv(n, GEMV_WARPS * cols) > lb * target.sm_count:
            return ROW_COLS_WAVES
        return ROW_COLS_ONE_WAVE
    return ROW_COLS_BY_WIDTHS[4 if chunks <= 4 * ws else 8]


# The tensor-core row GEMV (kernels/matmul_nbits_tc.hip): rounds of loads in flight a lane, and
# warps a column group from this many chunks on (fewer: 4) -- one run of 16 chunks a warp for K =
# 4096, 8 for 2048. Shared bytes a staged chunk: A's pairs (64) and its off and sx (8).
TC_U = 4
TC_SPLIT8_MIN_CHUNKS = 96
TC_SMEM_PER_CHUNK = 72


def row_tc_form(layout: MatMulNBitsArgs, target, scales_aligned: bool, dt: str = "f16") -> tuple[int, int, bool, int] | None:
    """(U, warps a column group, paired scales, shared bytes) of the tensor-core row GEMV for an
    fp16 or bf16 (`dt`) row (the h2 cases of mnb_row_plan), or None where it does not run:
    HIPEP_MNB_GEMV_TC off (unset: on for bf16 only), a device without tensor cores
    (Target.tensor_cores), block 32 with an odd number of blocks a row or scales not 4-byte aligned
    (block 32 reads a chunk pair's two scales as one load), or a row whose staged A passes the
    shared-memory budget."""
    bs, chunks = 1 << layout.log2_bs, layout.k_pad // 32
    on = GEMV_ROW_TC == 1 or (GEMV_ROW_TC == -1 and dt == "bf16")
    if not (on and target.tensor_cores and target.warp_size == 32):
        return None
    paired = bs == 32
    if paired and (layout.nb % 2 or not scales_aligned):
        return None
    split = 8 if chunks >= TC_SPLIT8_MIN_CHUNKS else 4
    staged = _cdiv(chunks, 4 * split) * 4 * split
    smem = staged * TC_SMEM_PER_CHUNK
    if smem > GEMV_SMEM_BUDGET:
        return None
    return TC_U, split, paired, smem


# Launch bounds of the precompiled row1 instances (kernels/matmul_nbits_row.hip) per (q8, U).
_ROW1_MIN_BLOCKS = {(False, 1): 8, (False, 2): 8, (False, 4): 5, (True, 1): 8, (True, 2): 6, (True, 4): 4}
_SPLIT_MIN_BLOCKS = {1: 8, 2: 8, 4: 5}


def mnb_row_plan(layout: MatMulNBitsArgs, bits, dt, target,
                 tc_scales_aligned: bool | None = None) -> RowPlan | None:
    """The one-row GEMV in packed arithmetic (kernels/matmul_nbits_row.hip, hipep_mnb_gemv_row_*) where
    it applies -- 4 bits, block_size >= 32, 16-byte aligned rows, integer or no zero points, and
    A quantized to int8 (q8) or fp16 (h2), or bf16 on tensor cores -- else None (the general GEMV
    runs). `layout`: the node's arguments as the binding derived them (m, n, k, k_pad, row_bytes, nb, zp_row, log2_bs,
    zp_mode, aligned16, int8_a), completed here with the row GEMV's tile. `tc_scales_aligned`:
    where not None, an fp16 or bf16 row may take the tensor-core form (row_tc_form; the fused forms,
    which stage A their own way, pass None)."""
    bs, quant_a = 1 << layout.log2_bs, layout.int8_a
    if not (GEMV_ROW and bits == 4 and bs >= 32 and layout.aligned16 and layout.zp_mode in (0, 1)
            and (quant_a or dt in ("f16", "bf16"))):
        return None
    chunks = layout.k_pad // 32
    per_chunk = 36 + 4 * 32 // bs if quant_a else 64  # shared bytes a chunk of A takes (see row_smem)
    tile_chunks = min(chunks, GEMV_SMEM_BUDGET // per_chunk)
    if tile_chunks < chunks:
        tile_chunks -= tile_chunks % (bs // 32)  # whole blocks of A per tile
    layout.k_tile, layout.k_split = tile_chunks * 32, 1
    grid = (_cdiv(layout.n, GEMV_WARPS), 1, 1)  # a warp per output column
    ws, variant, q8 = target.warp_size, "q8" if quant_a else "h2", bool(quant_a)
    zp = layout.zp_mode == 1
    entry, form, u, min_blocks = f"hipep_mnb_gemv_row_{variant}_{dt}_b4", "row", 0, ROW_BLOCKS_PER_SM
    if grid[0] <= ROW_W3_BLOCKS_PER_SM * target.sm_count:
        entry, min_blocks = entry + "_w3", ROW_W3_BLOCKS_PER_SM
    zp_suffix = '_zp' if zp else ''
    tc_form = (row_tc_form(layout, target, tc_scales_aligned, dt)
               if variant == "h2" and tc_scales_aligned is not None else None)
    if tc_form is not None:
        # Tensor cores: the nibbles' halves summed in f32 by mma.sync, 16 columns a warp
        # (kernels/matmul_nbits_tc.hip); the whole row staged once per block.
        u, split, paired, smem = tc_form
        grid = (_cdiv(layout.n * split, 16 * GEMV_WARPS), 1, 1)
        entry = f"hipep_mnb_gemv_tc_{dt}_{'b32' if paired else 'bw'}_u{u}_s{split}{zp_suffix}"
        return RowPlan("tc", q8, u, zp, 2, entry, grid, smem, chunks, cols=16, split=split, module="matmul_nbits_tc",
                       paired=paired)
    if variant == "h2" and dt != "f16":
        return None  # bf16 pairs: the tensor-core form only (the h2 arithmetic is fp16's)
    cols_form = row_cols_form(chunks, layout.n, target) if variant == "h2" and tile_chunks == chunks else None
    if cols_form is not None:
        # Several columns a warp: each pair of A read from shared memory serves them all, and the
        # smaller grid leaves room for the next kernel's blocks (row_cols_form).
        u, cols, split, min_blocks = cols_form
        grid = (_cdiv(layout.n * split, GEMV_WARPS * cols), 1, 1)
        entry = f"hipep_mnb_gemv_row1_h2_{dt}_b4_u{u}_c{cols}_s{split}{zp_suffix}"
        return RowPlan("cols", q8, u, zp, min_blocks, entry, grid, row_smem(tile_chunks, bs, q8), tile_chunks,
                       cols, split)
    if tile_chunks == chunks and chunks <= 4 * ws and grid[0] > ROW_BLOCKS_PER_SM * target.sm_count:
        # Past one wave of the kernel's blocks, rows of one round of loads a lane take the variant
        # with fewer registers (hipep_mnb_gemv_row1: more blocks resident, more loads in flight).
        u = next(u for u in (1, 2, 4) if u * ws >= chunks)
        entry, form = f"hipep_mnb_gemv_row1_{variant}_{dt}_b4_u{u}{zp_suffix}", "row1"
        min_blocks = _ROW1_MIN_BLOCKS[q8, u]
    elif (variant == "h2" and tile_chunks == chunks and SPLIT_MIN_CHUNKS_PER_LANE * ws <= chunks <= 8 * ws
          and 2 * grid[0] <= ROW_BLOCKS_PER_SM * target.sm_count):
        # A grid of at most half a wave and rows of several chunks a lane (the down and o
        # projections of decoding): two warps a column, each with one round of loads over its half.
        u = next(u for u in (1, 2, 4) if 2 * u * ws >= chunks)
        grid = (_cdiv(layout.n, GEMV_WARPS // 2), 1, 1)
        entry, form, min_blocks = f"hipep_mnb_gemv_row1_h2_{dt}_b4_u{u}_s2{zp_suffix}", "split", _SPLIT_MIN_BLOCKS[u]
    return RowPlan(form, q8, u, zp, min_blocks, entry, grid, row_smem(tile_chunks, bs, q8), tile_chunks,
                   split=2 if form == "split" else 1)


def _mnb_row_op(a_ptr, B, scales, zp, bias, y, layout: MatMulNBitsArgs, bits, dt, target):
    """The one-row GEMV's launch (mnb_row_plan), or None where it does not apply."""
    plan = mnb_row_plan(layout, bits, dt, target, tc_scales_aligned=scales.ptr % 4 == 0)
    if plan is None:
        return None
    layout.a_vec = int(layout.k % 8 == 0 and a_ptr % 16 == 0)
    params = [ctypes.c_uint64(a_ptr), ptr(B), ptr(scales), ptr(zp), ptr(bias), ctypes.c_uint64(y.ptr), layout]
    # The kernel loads its first chunks of B, scales and zero points before it waits for the
    # previous kernel: only where those are the session's weights, which no kernel writes.
    weights = all(w is None or w.constant for w in (B, scales, zp))
    return KernelOp(plan.entry, plan.grid, (GEMV_WARPS * target.warp_size, 1, 1), params, module=plan.module,
                    smem=plan.smem, overlaps_previous=weights)


def row_smem(tile_chunks: int, block_size: int, q8: bool) -> int:
    """Shared bytes of the row GEMV's A tile: q8 -- even and odd code planes (32 bytes a chunk), a
    scale per block (+1) and a code sum per chunk; h2 -- four planes of half2 pairs (64 bytes a chunk)."""
    if q8:
        return tile_chunks * 36 + ((tile_chunks * 32 // block_size) + 1) * 4
    return tile_chunks * 64


@_binding(MNB, check=_mnb_check,
          modules=("matmul_nbits", "matmul_nbits_row", "matmul_nbits_tc", "matmul_nbits_dequant",
                   "matmul_nbits_gemm_tc"))
def _mnb_bind(ins, outs, attrs, target):
    op = "MatMulNBits"
    why = _mnb_attr_reason(attrs)
    if why:
        raise NoKernel(f"{op}: {why}")
    A, B, scales = ins[0], ins[1], ins[2]
    zp, g_idx, bias = [ins[i] if i < len(ins) else None for i in (3, 4, 5)]
    y = outs[0]
    k, n, bits, bs, nb, blob = _mnb_layout(attrs)
    dt = _dt(A.dtype, op)
    if dt not in ("f32", "f16", "bf16"):
        raise NoKernel(f"{op}: A of element type {A.dtype.name}")
    if g_idx is not None and not _trivial_g_idx(g_idx.value, k, bs):
        raise NoKernel(f"{op}: input g_idx (act-order reordering of K): the kernels read K in order")
    if A.ndim < 1 or int(A.shape[-1]) != k:
        raise HipepError(f"{op}: A must have K = {k} as its last dimension, got shape {list(A.shape)}")
    if B.dtype != np.uint8 or B.size != n * nb * blob:
        raise HipepError(f"{op}: B must be uint8 [N, n_blocks, blob] = [{n}, {nb}, {blob}] (K={k}, block_size={bs}, "
                         f"bits={bits}), got {B.dtype.name} {list(B.shape)}")
    if scales.dtype != A.dtype or scales.size != n * nb:
        raise HipepError(f"{op}: scales must be {A.dtype.name} with N * n_blocks = {n} * {nb} elements, got "
                         f"{scales.dtype.name} {list(scales.shape)}")
    zp_mode, zp_row = 0, 0
    if zp is not None:
        if zp.dtype == np.uint8:
            zp_mode, zp_row = 1, _cdiv(nb * bits, 8)
            if zp.size != n * zp_row:
                raise HipepError(f"{op}: uint8 zero_points must have N * ceil(n_blocks * bits / 8) = {n} * {zp_row} "
                                 f"elements, got shape {list(zp.shape)}")
        elif zp.dtype == A.dtype:
            zp_mode = 2
            if zp.size != n * nb:
                raise HipepError(f"{op}: float zero_points must have N * n_blocks = {n} * {nb} elements, got shape "
                                 f"{list(zp.shape)}")
        else:
            raise NoKernel(f"{op}: zero_points of element type {zp.dtype.name} with A of type {A.dtype.name}")
    if bias is not None and (bias.dtype != A.dtype or bias.size != n):
        raise HipepError(f"{op}: bias must be {A.dtype.name} with N = {n} elements, got {bias.dtype.name} "
                         f"{list(bias.shape)}")
    m = A.size // k
    if y.size != m * n:
        raise HipepError(f"{op}: output of shape {list(y.shape)} for {m} rows of A and N = {n}")
    if m == 0:
        return []
    row_bytes = nb * blob
    if B.ptr % 8:
        raise NoKernel(f"{op}: B at an address not 8-byte aligned")
    k_pad = nb * bs
    log2_bs = bs.bit_length() - 1
    quant_a = int(quantizes_a_to_int8(attrs, zp_mode))
    # The whole product's arguments, as the prompt paths take them (tensor cores, the BLAS, the own GEMM).
    whole = MatMulNBitsArgs(m, n, k, k_pad, row_bytes, nb, zp_row, log2_bs, 0, zp_mode, 0, 1, 0, quant_a)
    tc_rows = gemm_tc_rows(whole, bits, bs, dt, A, B, target) if m > GEMV_MAX_ROWS else 0
    if tc_rows >= m:
        return _mnb_gemm_tc_ops(A, B, scales, zp, bias, y, whole, dt, target)
    gemm_grid = (_cdiv(n, GEMM_TILE), _cdiv(m, GEMM_TILE), 1)
    if m <= GEMV_MAX_ROWS or (m <= GEMV_CHAIN_MAX_ROWS and gemm_grid[0] * gemm_grid[1] < target.sm_count):
        # The GEMV per slice of up to 8 rows: for a few slices over a small grid it streams B
        # faster than the GEMM's few blocks would step through K.
        vpl = 128 // bits
        aligned16 = int(row_bytes % 16 == 0 and B.ptr % 16 == 0)
        e = A.dtype.itemsize
        ops = []
        if m == 1:
            layout = MatMulNBitsArgs(1, n, k, k_pad, row_bytes, nb, zp_row, log2_bs, 0, zp_mode, aligned16, 1, 0, quant_a)
            row = _mnb_row_op(A.ptr, B, scales, zp, bias, y, layout, bits, dt, target)
            if row is not None:
                return [row]
        for r0 in range(0, m, GEMV_MAX_ROWS):
            rows = min(GEMV_MAX_ROWS, m - r0)
            m_t = gemv_rows(rows)
            k_tile = _gemv_k_tile(m_t, vpl, k_pad, bs)
            wide = gemv_wide(m_t, n, k_tile // vpl, target.sm_count, target.warp_size)
            cols = GEMV_COLS_WIDE if wide else GEMV_COLS
            k_split = gemv_k_split(n, k_tile // vpl, target.sm_count, target.warp_size, cols=cols)
            a_ptr = A.ptr + r0 * k * e
            a_vec = int(k % 4 == 0 and a_ptr % (4 * e) == 0)
            args = MatMulNBitsArgs(rows, n, k, k_pad, row_bytes, nb, zp_row, log2_bs, k_tile, zp_mode, aligned16,
                                   k_split, a_vec, quant_a)
            smem = m_t * (k_tile // vpl) * (vpl + GEMV_PAD) * 4
            grid = (_cdiv(n, GEMV_WARPS // k_split * cols), 1, 1)
            params = [ctypes.c_uint64(a_ptr), ptr(B), ptr(scales), ptr(zp), ptr(bias),
                      ctypes.c_uint64(y.ptr + r0 * n * e), args]
            ops.append(KernelOp(f"hipep_mnb_gemv_{dt}_b{bits}_m{m_t}" + ("_c4" if wide else ""), grid, (GEMV_WARPS * target.warp_size, 1, 1),
                                params, module="matmul_nbits", element_type=dt, smem=smem))
        return ops
    if tc_rows > 0 and _first_run_takes_tc(whole, dt, A.dtype.itemsize, target):
        return [dataclasses.replace(op, provisional=True)
                for op in _mnb_gemm_tc_ops(A, B, scales, zp, bias, y, whole, dt, target)]
    blas = _mnb_blas_ops(A, B, scales, zp, bias, y, whole, bits, dt, target)
    if blas is not None:
        return blas
    if tc_rows > 0:  # past GEMM_TC_MAX_ROWS with no BLAS: tensor cores still beat the own GEMM
        return _mnb_gemm_tc_ops(A, B, scales, zp, bias, y, whole, dt, target)
    if gemm_grid[1] > 65535:
        raise NoKernel(f"{op}: {m} rows of A (at most {65535 * GEMM_TILE})")
    ops = []
    qp = 0
    if quant_a:
        # Each block's (scale, inverse) as two floats in the stream's workspace, then the GEMM.
        if target.workspace is None:
            raise NoKernel(f"{op}: accuracy_level=4 needs the device's workspace")
        qp = target.workspace(m * nb * 8)
        lanes = min(bs, target.warp_size)
        ops.append(KernelOp(f"hipep_mnb_a_int8_{dt}", (_cdiv(m * nb, GEMM_THREADS // lanes), 1, 1),
                            (GEMM_THREADS, 1, 1), [ptr(A), ctypes.c_uint64(qp), whole], module="matmul_nbits",
                            element_type=dt))
    ops.append(KernelOp(f"hipep_mnb_gemm_{dt}_b{bits}", gemm_grid, (GEMM_THREADS, 1, 1),
                        [ptr(A), ptr(B), ptr(scales), ptr(zp), ptr(bias), ptr(y), whole, ctypes.c_uint64(qp)],
                        module="matmul_nbits", element_type=dt))
    return ops


def gemm_tc_rows(layout: MatMulNBitsArgs, bits: int, block_size: int, dt: str, A, B, target) -> int:
    """Up to how many rows of A the tensor-core GEMM takes this product ahead of the BLAS path (0:
    it cannot take it; GEMM_TC_ANY_ROWS: at any length). It needs 4-bit weights, fp16 or bf16 A not
    quantized to int8, blocks of at least 32 (a 16-byte chunk lies in one block), 16-byte aligned rows
    of A (K % 8 == 0) and of B, and mma.sync on a 32-lane warp (Target.tensor_cores)."""
    mode = os.environ.get(GEMM_TC_ENV, "").strip()
    if mode not in ("", "0", "1"):
        raise HipepError(f"{GEMM_TC_ENV}={mode!r}: expected 0 or 1 (or unset)")
    if (mode == "0" or bits != 4 or dt not in ("f16", "bf16") or layout.int8_a or block_size < 32
            or not target.tensor_cores or target.warp_size != 32 or int(layout.k) % 8 or A.ptr % 16 or B.ptr % 16
            or int(layout.row_bytes) % 16):
        return 0
    return GEMM_TC_ANY_ROWS if mode == "1" else GEMM_TC_MAX_ROWS


def first_run_tc_rows() -> int:
    """GEMM_TC_FIRST_RUN_ROWS, or HIPEP_MNB_GEMM_TC_FIRST_RUN_ROWS where set (read at each bind)."""
    raw = os.environ.get(GEMM_TC_FIRST_RUN_ENV, "").strip()
    if not raw:
        return GEMM_TC_FIRST_RUN_ROWS
    if not raw.isdigit():
        raise HipepError(f"{GEMM_TC_FIRST_RUN_ENV}={raw!r}: expected a number of rows (0: off)")
    return int(raw)


def gemm_tc_splits(blocks: int, k_steps: int, sm_count: int) -> int:
    """K splits of the tensor-core GEMM: doubled while the grid has fewer than two blocks an SM (four
    warps a block; the smaller products of a prompt, N = 2048 at 128 rows, make 64 tiles) and each
    split keeps at least 8 steps of K; at most GEMM_TC_MAX_SPLITS, whose sums another launch adds."""
    forced = _env_int(GEMM_TC_SPLIT_ENV, 0, (0, 1, 2, 4, 8))
    if forced:
        return min(forced, k_steps)
    s = 1
    while s < GEMM_TC_MAX_SPLITS and blocks * s < 2 * sm_count and k_steps >= 16 * s:
        s *= 2
    return s


def _mnb_gemm_tc_ops(A, B, scales, zp, bias, y, args: MatMulNBitsArgs, dt: str, target) -> list:
    """Y = A W^T (+ bias) on tensor cores (kernels/matmul_nbits_gemm_tc.hip), split over K where
    the tiles alone leave SMs idle: each split's f32 sums then go to the stream's workspace, and
    the last split of each tile to finish adds them in order (arrival counters of the launch's
    own, Target.counters), or where the target offers no counters a second launch does."""
    m, n = int(args.m), int(args.n)
    grid_m = _cdiv(m, GEMM_TC_TILE)
    if grid_m > 65535:
        raise NoKernel(f"MatMulNBits: {m} rows of A (at most {65535 * GEMM_TC_TILE})")
    k_steps = _cdiv(int(args.k_pad), GEMM_TC_TILE)
    blocks = _cdiv(n, GEMM_TC_TILE) * grid_m
    splits = gemm_tc_splits(blocks, k_steps, target.sm_count) if target.workspace is not None else 1
    per_split = _cdiv(k_steps, splits)
    splits = _cdiv(k_steps, per_split)  # none empty
    layout = MatMulNBitsArgs.from_buffer_copy(args)
    layout.k_split, layout.k_tile = splits, per_split * GEMM_TC_TILE
    partial = workspace_regions(target, "MatMulNBits", [splits * m * n * 4])[0] if splits > 1 else 0
    grid = (_cdiv(n, GEMM_TC_TILE), grid_m, splits)
    counters = target.counters(grid[0] * grid[1] * 4) if splits > 1 and target.counters is not None else 0
    ops = [KernelOp(f"hipep_mnb_gemm_tc_{dt}_b4", grid, (GEMM_TC_THREADS, 1, 1),
                    [ptr(A), ptr(B), ptr(scales), ptr(zp), ptr(bias), ptr(y), ctypes.c_uint64(partial),
                     ctypes.c_uint64(counters), layout], module="matmul_nbits_gemm_tc")]
    if splits > 1 and not counters:
        ops.append(KernelOp(f"hipep_mnb_gemm_tc_sum_{dt}", (_cdiv(m * n, DEQUANT_THREADS), 1, 1),
                            (DEQUANT_THREADS, 1, 1),
                            [ctypes.c_uint64(partial), ptr(bias), ptr(y), layout], module="matmul_nbits_gemm_tc"))
    return ops


def _mnb_blas_ops(A, B, scales, zp, bias, y, args: MatMulNBitsArgs, bits: int, dt: str, target) -> list | None:
    """Prefill through the vendor BLAS (kernels/matmul_nbits_dequant.hip): the weights dequantized
    into the stream's workspace as [N, K] of A's type, then one cuBLASLt GEMM with the bias as its
    epilogue; at accuracy_level 4 (f32 A) the GEMM reads A' (A's int8 codes times their scales)
    from the workspace too. None where hipep's own GEMM runs it: HIPEP_GEMM=own, no workspace,
    level 4 with f16/bf16 A (A' would round to A's type, which the own GEMM does not), a weight
    larger than MNB_BLAS_MAX_BYTES dequantized, or cuBLASLt missing or refusing the product. The
    own GEMM has no tensor cores: 15 TFLOP/s at fp16 on the H200 against cuBLASLt's 674."""
    e = A.dtype.itemsize
    if _blas_unavailable(args, dt, e, target) is not None:
        return None  # (before the workspace grows for nothing)
    m, n, k = int(args.m), int(args.n), int(args.k)
    # W, then (level 4) A' and A's block parameters; the GEMM's own workspace lies past them.
    sizes = [n * k * e] + ([m * k * e, m * int(args.nb) * 8] if args.int8_a else [])
    w_ptr, *a8 = workspace_regions(target, "MatMulNBits", sizes)
    a8_ptr, qp_ptr = a8 if a8 else (0, 0)
    gemm_target = workspace_after(target, sizes)
    problem = gpu_linalg.GemmProblem(m=m, n=n, k=k, a_sm=k, a_sk=1, b_sk=1, b_sn=k, c_sm=0, c_sn=1,
                          has_c=bias is not None, beta=1.0 if bias is not None else 0.0)
    a_arg = Arg(a8_ptr, (m, k), A.dtype) if args.int8_a else Arg(A.ptr, (m, k), A.dtype)
    blas = gpu_linalg._blas_ops(problem, a_arg, Arg(w_ptr, (n, k), A.dtype),
                     Arg(bias.ptr, (n,), bias.dtype) if bias is not None else None,
                     Arg(y.ptr, (m, n), y.dtype), dt, gemm_target)
    if blas is None:
        return None
    words = n * (int(args.row_bytes) // 4)
    ops = [KernelOp(f"hipep_mnb_dequant_{dt}_b{bits}", (_cdiv(words, DEQUANT_THREADS), 1, 1),
                    (DEQUANT_THREADS, 1, 1), [ptr(B), ptr(scales), ptr(zp), ctypes.c_uint64(w_ptr), args],
                    module="matmul_nbits_dequant")]
    if args.int8_a:
        lanes = min(1 << int(args.log2_bs), target.warp_size)
        ops.append(KernelOp(f"hipep_mnb_a_int8_{dt}", (_cdiv(m * int(args.nb), GEMM_THREADS // lanes), 1, 1),
                            (GEMM_THREADS, 1, 1), [ptr(A), ctypes.c_uint64(qp_ptr), args], module="matmul_nbits",
                            element_type=dt))
        ops.append(KernelOp(f"hipep_mnb_a_int8_dequant_{dt}", (_cdiv(m * k, DEQUANT_THREADS), 1, 1),
                            (DEQUANT_THREADS, 1, 1), [ptr(A), ctypes.c_uint64(qp_ptr), ctypes.c_uint64(a8_ptr), args],
                            module="matmul_nbits_dequant"))
    return ops + blas


def _first_run_takes_tc(args: MatMulNBitsArgs, dt: str, itemsize: int, target) -> bool:
    """Whether this bind, for a first run, takes the tensor-core GEMM provisionally where the BLAS
    path would run (GEMM_TC_FIRST_RUN_ROWS; not with HIPEP_GEMM=blas, cuBLASLt for every product)."""
    return (target.first_run and int(args.m) <= first_run_tc_rows() and gpu_linalg.gemm_mode() != "blas"
            and _blas_unavailable(args, dt, itemsize, target) is None)


def _blas_unavailable(args: MatMulNBitsArgs, dt: str, itemsize: int, target) -> str | None:
    """Why the BLAS path cannot take this product, from what is known before planning it (None:
    it may; cuBLASLt can still refuse the product when asked)."""
    mode = gpu_linalg.gemm_mode()
    if mode == "own":
        return "HIPEP_GEMM=own"
    if target.workspace is None:
        return "no workspace"
    if args.int8_a and dt != "f32":
        return "A quantized to int8 with A not f32"
    if int(args.n) * int(args.k) * itemsize > MNB_BLAS_MAX_BYTES:
        return "the dequantized weight is larger than MNB_BLAS_MAX_BYTES"
    if mode == "auto" and not cublaslt.status()[0]:
        return "cuBLASLt not loaded"
    return None


# ---- GatherBlockQuantized ------------------------------------------------------------------------

def _gbq_attr_reason(attrs, rank: int | None) -> str | None:
    bits, bs = int(attrs.get("bits", 4)), int(attrs.get("block_size", 128))
    if bits not in (2, 4, 8):
        return f"bits={bits} (the kernels take 2, 4 and 8)"
    if not (_pow2(bs) and bs >= 16):
        return f"block_size={bs} (the kernels take a power of two >= 16)"
    if rank is not None:
        g, qa = int(attrs.get("gather_axis", 0)), int(attrs.get("quantize_axis", 1))
        if rank < 2 or g % rank != 0 or qa % rank != rank - 1:
            return (f"gather_axis={g}, quantize_axis={qa} for rank-{rank} data (the kernels take gather_axis 0 and "
                    f"quantize_axis the last of rank >= 2 data)")
    return None


def _gbq_check(attrs, dtypes, shapes, values):
    data = shapes[0] if shapes else None
    why = _gbq_attr_reason(attrs, None if data is None else len(data))
    if why:
        return why
    d = _dtype_at(dtypes, 0)
    if d and d != "uint8":
        return f"data of element type {d} (the kernels take uint8 data)"
    i = _dtype_at(dtypes, 1)
    if i and i not in ("int32", "int64"):
        return f"indices of element type {i}"
    s = _dtype_at(dtypes, 2)
    if s not in _FLOATS:
        return f"scales of element type {s or '?'} (the kernels take {', '.join(_FLOATS)})"
    z = _dtype_at(dtypes, 3)
    if z and z != "uint8":
        return f"zero_points of element type {z} (uint8 expected)"
    return None


@_binding(GBQ, check=_gbq_check, modules=("gather_block_quantized",))
def _gbq_bind(ins, outs, attrs, target):
    op = "GatherBlockQuantized"
    data, idx, scales = ins[0], ins[1], ins[2]
    zp = ins[3] if len(ins) > 3 else None
    y = outs[0]
    why = _gbq_attr_reason(attrs, data.ndim)
    if why:
        raise NoKernel(f"{op}: {why}")
    if data.dtype != np.uint8:
        raise NoKernel(f"{op}: data of element type {data.dtype.name}")
    it = {"int32": "i32", "int64": "i64"}.get(idx.dtype.name)
    if it is None:
        raise NoKernel(f"{op}: indices of element type {idx.dtype.name}")
    dt = _dt(scales.dtype, op)
    if dt not in ("f32", "f16", "bf16"):
        raise NoKernel(f"{op}: scales of element type {scales.dtype.name}")
    bits, bs = int(attrs.get("bits", 4)), int(attrs.get("block_size", 128))
    per_byte = 8 // bits
    n_axis, dp = int(data.shape[0]), int(data.shape[-1])
    r = _prod(data.shape[1:-1])
    nb = _cdiv(dp * per_byte, bs)
    want = tuple(int(d) for d in data.shape[:-1]) + (nb,)
    if tuple(int(d) for d in scales.shape) != want:
        raise HipepError(f"{op}: scales must have shape {list(want)} for data {list(data.shape)} (bits={bits}, "
                         f"block_size={bs}), got {list(scales.shape)}")
    zp_row = 0
    if zp is not None:
        zp_row = _cdiv(nb, per_byte)
        want_z = want[:-1] + (zp_row,)
        if zp.dtype != np.uint8 or tuple(int(d) for d in zp.shape) != want_z:
            raise HipepError(f"{op}: zero_points must be uint8 of shape {list(want_z)}, got {zp.dtype.name} "
                             f"{list(zp.shape)}")
    rows = idx.size * r
    if y.size != rows * dp * per_byte or y.dtype != scales.dtype:
        raise HipepError(f"{op}: output {y.dtype.name} {list(y.shape)} for {idx.size} indices of rows of "
                         f"{r} x {dp * per_byte} values")
    if y.size == 0:
        return []
    wb = 4 if dp % 4 == 0 and data.ptr % 4 == 0 else 1
    words = dp // wb
    bx = min(256, _cdiv(words, 32) * 32)
    by = max(1, 256 // bx)
    grid = (max(1, min(_cdiv(words, bx), 65535)), max(1, min(_cdiv(rows, by), 65535)), 1)
    args = GatherBlockQuantizedArgs(rows, r, dp, n_axis, nb, zp_row, bs.bit_length() - 1)
    entry = f"hipep_gbq_{dt}_b{bits}_{it}" + ("_w4" if wb == 4 else "")
    return [KernelOp(entry, grid, (bx, by, 1), [ptr(data), ptr(idx), ptr(scales), ptr(zp), ptr(y), args],
                     module="gather_block_quantized")]
