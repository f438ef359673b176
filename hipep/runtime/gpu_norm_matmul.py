"""GPU binding: hipep::SkipNormMatMulNBits (hip-fuse-norm-matmul's launch: a skip norm and the
MatMulNBits or GatedMatMulNBits that reads its normalized output).

One fp16 row (decoding) where the matmul runs the one-row GEMV in packed arithmetic on fp16 A
(h2): one rendered kernel, the GEMV's template (kernels/matmul_nbits_row.h: hipep_mnb_gemv_row,
_row1 or _row1_gated) with the norm as A's source (hipep_mnb_skip_norm_src): every block
normalizes the row it stages, and block 0 writes the norm's outputs the plan keeps (the residual
sum). Its registers cost blocks per SM (FUSED_MIN_BLOCKS, measured with ptxas for sm_90: no
spills). Where the matmul runs on tensor cores (a bf16 row, whose only one-row form that is; an
fp16 row with HIPEP_MNB_GEMV_TC=1) the norm is the source of kernels/matmul_nbits_tc.h's template
the same way. Where that would take the GEMV's grid more waves than alone (the LM head's 4000
blocks), or anywhere else -- several rows, f32 or int8-quantized A, bf16 without tensor cores, a row
past FUSED_MAX_WORDS vectors a thread -- the norm runs as alone into the stream's workspace and the
matmul's own binding reads it there: the unfused plan's launches and bits.
"""
from __future__ import annotations

import ctypes
import hashlib

from ..errors import HipepError
from ..options import env_flag
from ..ops.contrib_quant import GATED_MATMUL_NBITS, NORM_INPUTS, SKIP_NORM_MATMUL_NBITS, matmul_attributes
from .gpu_binding_core import (Arg, BINDINGS, KernelOp, _binding, _cdiv, _dt, workspace_after, workspace_regions)
from .gpu_gated_matmul import _check as _gated_check
from .gpu_gated_matmul import _C_TYPE, _gated_row_op, _halves, gated_row_variant
from .gpu_kernels import _float_check
from .gpu_quant import GEMV_WARPS, TC_SMEM_PER_CHUNK, MatMulNBitsArgs, RowPlan, _mnb_check, _mnb_bind, mnb_row_plan

NORMED = f"hipep::{SKIP_NORM_MATMUL_NBITS}"
NORM = "com.microsoft::SkipSimplifiedLayerNormalization"
MNB = "com.microsoft::MatMulNBits"
GATED = f"hipep::{GATED_MATMUL_NBITS}"
INNER = {"MatMulNBits": MNB, GATED_MATMUL_NBITS: GATED}

FUSED_THREADS = 256  # GEMV_WARPS warps of 32: the fused kernels are NVIDIA's and wave-32 AMD's
FUSED_MAX_WORDS = 2  # 16-byte vectors of the row a thread (hidden sizes up to 4096)
# Blocks per SM the fused kernels' registers allow without spilling (ptxas, sm_90), per
# (form, vectors a thread, U, zero points); a form missing here is not fused (it spills at 3).
FUSED_MIN_BLOCKS = {
    ("row", 1, 0, False): 3, ("row", 1, 0, True): 3,
    ("row1", 1, 1, False): 5, ("row1", 1, 1, True): 5, ("row1", 1, 2, False): 5, ("row1", 1, 2, True): 5,
    ("row1", 1, 4, False): 4, ("row1", 1, 4, True): 4,
    ("row1", 2, 1, False): 5, ("row1", 2, 1, True): 4, ("row1", 2, 2, False): 4, ("row1", 2, 2, True): 4,
    ("row1", 2, 4, False): 4, ("row1", 2, 4, True): 3,
    ("split", 1, 1, False): 5, ("split", 1, 1, True): 5, ("split", 1, 2, False): 5, ("split", 1, 2, True): 5,
    ("split", 1, 4, False): 4, ("split", 1, 4, True): 4,
    ("split", 2, 1, False): 4, ("split", 2, 1, True): 4, ("split", 2, 2, False): 4, ("split", 2, 2, True): 4,
    ("split", 2, 4, False): 4, ("split", 2, 4, True): 3,
    ("gated", 1, 1, False): 5, ("gated", 1, 1, True): 5, ("gated", 1, 2, False): 4, ("gated", 1, 2, True): 4,
    ("gated", 1, 4, False): 3, ("gated", 1, 4, True): 3,
    ("gated", 2, 1, False): 4, ("gated", 2, 1, True): 4, ("gated", 2, 2, False): 3, ("gated", 2, 2, True): 3,
}
# The several-columns-a-warp forms (gpu_quant.row_cols_form), per (vectors a thread, U, columns a
# warp, warps a column, zero points); fused only where the grid stays one wave (not the LM head's
# 2000 blocks: the norm again in every block of every wave).
FUSED_COLS_MIN_BLOCKS = {
    (1, 2, 4, 1, False): 3, (1, 2, 4, 1, True): 3, (1, 2, 2, 1, False): 4, (1, 2, 2, 1, True): 4,
    (1, 4, 2, 1, False): 3, (1, 4, 2, 1, True): 3, (1, 2, 2, 4, False): 4, (1, 2, 2, 4, True): 4,
    (2, 2, 4, 1, False): 2, (2, 2, 4, 1, True): 2, (2, 2, 2, 1, False): 4, (2, 2, 2, 1, True): 3,
    (2, 4, 2, 1, False): 2, (2, 4, 2, 1, True): 2, (2, 2, 2, 4, False): 4, (2, 2, 2, 4, True): 3,
}
# Whether one-row norms fuse into their GEMV (HIPEP_CUDA_FUSE_NORM=0: the norm as alone, into the
# workspace; benchmarks and tests compare the two forms).
FUSE_ONE_ROW = env_flag("HIPEP_CUDA_FUSE_NORM", True)


class SkipNormSource(ctypes.Structure):
    """kernels/matmul_nbits_row.h hipep_mnb_skip_norm_src: the norm's operands and outputs."""
    _fields_ = [("x", ctypes.c_uint64), ("skip", ctypes.c_uint64), ("gamma", ctypes.c_uint64),
                ("bias", ctypes.c_uint64), ("mean", ctypes.c_uint64),
                ("inv_std", ctypes.c_uint64), ("sum_out", ctypes.c_uint64), ("eps", ctypes.c_float)]


def _p(a: Arg | None) -> int:
    return 0 if a is None else a.ptr


def _parts(ins, outs, attrs):
    at = list(ins) + [None] * (NORM_INPUTS + 6 - len(ins))
    inner_key = INNER.get(attrs.get("matmul"))
    if inner_key is None:
        raise HipepError(f"{SKIP_NORM_MATMUL_NBITS}: unknown matmul {attrs.get('matmul')!r}")
    inner_attrs = matmul_attributes(attrs)
    norm_outs = (list(outs) + [None] * 5)[1:5]
    return at[:NORM_INPUTS], at[NORM_INPUTS:], inner_key, inner_attrs, norm_outs


def _check(attrs, dtypes, shapes, values):
    d = list(dtypes) + [""] * (NORM_INPUTS + 6 - len(dtypes))
    why = _float_check(attrs, d[:NORM_INPUTS], [], [])
    if why:
        return why
    inner = [d[0]] + d[NORM_INPUTS:]
    inner_attrs = matmul_attributes(attrs)
    if attrs.get("matmul") == GATED_MATMUL_NBITS:
        return _gated_check(inner_attrs, inner, [], [])
    return _mnb_check(inner_attrs, inner, [], list(values[NORM_INPUTS - 1:]) if values else [])


def _waves(grid: int, blocks: int, target) -> int:
    return _cdiv(grid, blocks * target.sm_count)


def _source(norm, norm_outs, eps: float, words: int) -> tuple[str, SkipNormSource]:
    x, skip, gamma, bias = norm
    _, mean, inv, total = norm_outs
    return (f"hipep_mnb_skip_norm_src<{words}, {_C_TYPE[_dt(x.dtype, SKIP_NORM_MATMUL_NBITS)]}>",
            SkipNormSource(_p(x), _p(skip), _p(gamma), _p(bias), _p(mean), _p(inv), _p(total), eps))


def _fusable(norm, norm_outs, target) -> int | None:
    """Vectors of the row a thread where the norm's one fp16 or bf16 row can be A's source, else
    None (bf16 rows then fuse only into the tensor-core forms, the only ones bf16 has)."""
    x, skip, gamma, bias = norm
    if not FUSE_ONE_ROW or target.warp_size * GEMV_WARPS != FUSED_THREADS or x.dtype.name not in ("float16",
                                                                                                   "bfloat16"):
        return None
    h = int(x.shape[-1]) if x.ndim else 0
    if h == 0 or x.size != h or skip.size != h or gamma.size != h or (bias is not None and bias.size != h):
        return None
    pointers = [x, skip, gamma, bias] + list(norm_outs)
    if h % 8 or any(a is not None and a.ptr % 16 for a in pointers):
        return None
    words = _cdiv(h // 8, FUSED_THREADS)
    return words if words <= FUSED_MAX_WORDS else None


def _render(form: str, u: int, zp: bool, src_type: str, blocks: int, cols: int, split: int) -> tuple[str, str]:
    """(entry, source) of the fused one-row GEMV (non-gated forms)."""
    from .kernel_cache import HEADER

    if form == "row":
        call = f"hipep_mnb_gemv_row<hipep_half, false, {src_type}>"
    else:  # row1, split and cols: one template, `split` warps a column and `cols` columns a warp
        call = f"hipep_mnb_gemv_row1<hipep_half, false, {u}, {'true' if zp else 'false'}, {split}, {src_type}, {cols}>"
    key = hashlib.sha1(repr((form, u, zp, src_type, blocks, cols, split)).encode()).hexdigest()[:12]
    shape = f"_c{cols}_s{split}" if form == "cols" else ""
    name = f"hipep_mnb_normed_{form}_u{u}{shape}{'_zp' if zp else ''}_{key}"
    source = (f'#include "{HEADER}"\n#include "matmul_nbits_row.h"\n'
              f"HIPEP_KERNEL void __launch_bounds__(MNB_WARPS * HIPEP_WARP_SIZE, {blocks})\n"
              f"    {name}(const {src_type} src, HIPEP_MNB_WEIGHTS(hipep_half)) {{\n"
              f"  hipep_grid_release();  // the next kernel may load its weights while this one works\n"
              f"  {call}(src, B, scales, zp, bias, Y, a);\n}}\n")
    return name, source


def _render_tc(plan: RowPlan, src_type: str, elem: str) -> tuple[str, str]:
    """(entry, source) of the fused tensor-core row GEMV (kernels/matmul_nbits_tc.h, 16 columns a
    warp) with the norm as A's source; `elem`: A's C type (hipep_half or hipep_bf16)."""
    from .kernel_cache import HEADER

    flags = f"{'true' if plan.zp else 'false'}, {'true' if plan.paired else 'false'}"
    key = hashlib.sha1(repr(("tc", plan.u, plan.split, flags, src_type)).encode()).hexdigest()[:12]
    name = f"hipep_mnb_normed_tc_u{plan.u}_s{plan.split}{'_zp' if plan.zp else ''}_{key}"
    out = f"hipep_mnb_tc_plain<{elem}>"
    source = (f'#include "{HEADER}"\n#include "matmul_nbits_tc.h"\n'
              f"HIPEP_KERNEL void __launch_bounds__(MNB_WARPS * HIPEP_WARP_SIZE, 2)\n"
              f"    {name}(const {src_type} src, HIPEP_MNB_WEIGHTS({elem})) {{\n"
              f"  hipep_mnb_gemv_tc<{plan.u}, {plan.split}, {flags}, {out}, {src_type}>(\n"
              f"      src, {out}{{B, scales, zp, bias, Y}}, a);\n}}\n")
    return name, source


def _fused_mnb(norm, norm_outs, inner_ins, y, inner_attrs, eps, words, target) -> KernelOp | None:
    """The one-kernel form over MatMulNBits: the op its own binding gives for one row, its A
    replaced by the norm."""
    x = norm[0]
    ops = _mnb_bind([Arg(x.ptr, x.shape, x.dtype)] + list(inner_ins), [y], inner_attrs, target)
    dt = _dt(x.dtype, SKIP_NORM_MATMUL_NBITS)
    if len(ops) == 1 and ops[0].module == "matmul_nbits_tc":
        # The tensor-core form (bf16's; fp16's with HIPEP_MNB_GEMV_TC=1): its A staged through the
        # norm, whose every vector of the padded row must lie in the threads' share of it.
        op = ops[0]
        plan = mnb_row_plan(op.params[-1], int(inner_attrs.get("bits", 4)), dt, target, tc_scales_aligned=True)
        if plan is None or plan.form != "tc" or plan.smem // TC_SMEM_PER_CHUNK * 4 > words * FUSED_THREADS:
            return None
        src_type, src = _source(norm, norm_outs, eps, words)
        name, source = _render_tc(plan, src_type, _C_TYPE[dt])
        return KernelOp(name, plan.grid, op.block, [src] + list(op.params[1:]), source=source, smem=plan.smem,
                        overlaps_previous=op.overlaps_previous)
    if dt == "bf16" or len(ops) != 1 or ops[0].module != "matmul_nbits_row":  # bf16: no packed-arithmetic form
        return None
    op = ops[0]
    layout: MatMulNBitsArgs = op.params[-1]
    plan = mnb_row_plan(layout, int(inner_attrs.get("bits", 4)), "f16", target)
    if plan is None or plan.q8 or plan.tile_chunks * 32 != layout.k_pad or plan.tile_chunks * 4 > words * FUSED_THREADS:
        return None
    if plan.form == "cols":
        blocks = FUSED_COLS_MIN_BLOCKS.get((words, plan.u, plan.cols, plan.split, plan.zp))
        if blocks is not None and _waves(plan.grid[0], blocks, target) > 1:
            return None
    else:
        blocks = FUSED_MIN_BLOCKS.get((plan.form, words, plan.u, plan.zp))
    if blocks is None or _waves(plan.grid[0], blocks, target) > _waves(plan.grid[0], plan.min_blocks, target):
        return None
    src_type, src = _source(norm, norm_outs, eps, words)
    name, source = _render(plan.form, plan.u, plan.zp, src_type, blocks, plan.cols, plan.split)
    return KernelOp(name, plan.grid, op.block, [src] + list(op.params[1:]), source=source, smem=plan.smem,
                    overlaps_previous=op.overlaps_previous)


def _fused_gated(norm, norm_outs, inner_ins, y, inner_attrs, eps, words, target) -> KernelOp | None:
    from ..ops.elementwise import fused_expr

    x = norm[0]
    a = Arg(x.ptr, x.shape, x.dtype)
    first, second = _halves([a] + list(inner_ins))
    variant = gated_row_variant(a, first, second, inner_attrs, target)
    if variant is None or variant[0]:
        return None
    src_type, src = _source(norm, norm_outs, eps, words)
    # The tensor-core form first (bf16's; fp16's with HIPEP_MNB_GEMV_TC=1), where the norm's threads cover
    # its padded row; bf16 has no other.
    op = _gated_row_op(a, first, second, y, fused_expr(inner_attrs), inner_attrs, target, (src_type, 2),
                       staged_max=words * FUSED_THREADS // 4, tc_only=True)
    if op is not None:
        op.params[0] = src
        return op
    _, u, zp, alone = variant
    k = int(inner_attrs["K"])
    chunks = _cdiv(k, int(inner_attrs["block_size"])) * int(inner_attrs["block_size"]) // 32
    blocks = FUSED_MIN_BLOCKS.get(("gated", words, u, zp))
    grid = _cdiv(int(inner_attrs["N"]), GEMV_WARPS)
    if blocks is None or chunks * 4 > words * FUSED_THREADS or _waves(grid, blocks, target) > _waves(grid, alone, target):
        return None
    op = _gated_row_op(a, first, second, y, fused_expr(inner_attrs), inner_attrs, target, (src_type, blocks),
                       staged_max=words * FUSED_THREADS // 4)
    if op is None:
        return None
    op.params[0] = src
    return op


@_binding(NORMED, check=_check,
          modules=("rms_norm", "matmul_nbits", "matmul_nbits_row", "matmul_nbits_tc", "matmul_nbits_dequant"))
def _normed_bind(ins, outs, attrs, target):
    norm, inner_ins, inner_key, inner_attrs, norm_outs = _parts(ins, outs, attrs)
    y = outs[0] if outs else None
    x = norm[0]
    if y is None:
        raise HipepError(f"{SKIP_NORM_MATMUL_NBITS}: an output nobody reads")
    if x.size == 0:
        return []
    eps = float(attrs["epsilon"])
    words = _fusable(norm, norm_outs, target)
    if words is not None:
        fused = (_fused_mnb if inner_key == MNB else _fused_gated)(norm, norm_outs, inner_ins, y, inner_attrs, eps,
                                                                  words, target)
        if fused is not None:
            return [fused]
    # The norm as alone, its output in the workspace; then the matmul as alone reading it there.
    _dt(x.dtype, SKIP_NORM_MATMUL_NBITS)
    nbytes = x.size * x.dtype.itemsize
    (region,) = workspace_regions(target, SKIP_NORM_MATMUL_NBITS, [nbytes])
    normed = Arg(region, tuple(x.shape), x.dtype)
    ops = BINDINGS[NORM].bind(norm, [normed] + norm_outs[1:], {"epsilon": eps}, target)
    return ops + BINDINGS[inner_key].bind([normed] + list(inner_ins), [y], inner_attrs,
                                          workspace_after(target, [nbytes]))
