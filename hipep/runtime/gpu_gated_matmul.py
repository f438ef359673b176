"""GPU binding: hipep::GatedMatMulNBits (hip-fuse-gated-matmul's launch: two MatMulNBits of one A
and the pointwise program joining their results).

One row of A (decoding) where the one-row GEMV in packed arithmetic applies to both weights runs
one kernel, rendered per program: kernels/matmul_nbits_row.h's hipep_mnb_gemv_row1_gated with the
program as its epilogue (hipep.ops.pointwise_hip.render_hip_functor). A warp streams column n of both
weights, A is staged once, and only the program's result is written. On tensor cores a bf16 row
(and an fp16 one with HIPEP_MNB_GEMV_TC=1) is one kernel the same way, kernels/matmul_nbits_tc.h's
template with hipep_mnb_tc_gated as its output. Otherwise (prefill, f32 A at accuracy level 0, K
past one round of loads, float zero points, bf16 without tensor cores) the two MatMulNBits run as
they would alone, into the stream's workspace, and the program's kernel reads them there.
"""
from __future__ import annotations

import ctypes
import hashlib
import json

import numpy as np

from ..ops.contrib_quant import GATED_MATMUL_NBITS, MNB_ATTRIBUTES
from .gpu_binding_core import Arg, KernelOp, NoKernel, _binding, _cdiv, _dt, ptr, workspace_after, workspace_regions
from .gpu_bindings_pointwise import expression_ops
from . import gpu_quant
from .gpu_quant import (GEMV_ROW, GEMV_WARPS, MatMulNBitsArgs, _mnb_bind, _mnb_check, quantizes_a_to_int8,
                        row_smem)

GATED = f"hipep::{GATED_MATMUL_NBITS}"
# Blocks resident per SM asked of the compiler per (chunks a lane U, zero points): the most whose
# register share (65536 / (256 * blocks)) holds both columns' loads and sums without spilling, in
# every variant (ptxas for sm_90: U 1 spills at 8, U 2 at 6 -- with zero points at 5 --, U 4 at 4
# -- with zero points at 3; tests/unit/test_kernels_compile.py checks).
MIN_BLOCKS = {(1, False): 6, (1, True): 6, (2, False): 5, (2, True): 4, (4, False): 3, (4, True): 2}
_C_TYPE = {"f16": "hipep_half", "f32": "float", "bf16": "hipep_bf16"}
_NUMPY_NAME = {"f16": "float16", "f32": "float32", "bf16": "bfloat16"}  # the pointwise program's operand types


def _halves(ins):
    """A's operands of each MatMulNBits: [A, B, scales, zero points or None]."""
    at = [ins[i] if i < len(ins) else None for i in range(7)]
    return [at[0], at[1], at[2], at[3]], [at[0], at[4], at[5], at[6]]


def _check(attrs, dtypes, shapes, values):
    d = list(dtypes) + [""] * (7 - len(dtypes))
    return _mnb_check(attrs, d[0:4], [], []) or _mnb_check(attrs, [d[0]] + d[4:7], [], [])


def _mnb_attrs(attrs) -> dict:
    return {k: attrs[k] for k in MNB_ATTRIBUTES}


def _rendered_source(expr, t: str, out_dtype: str, q8: bool, u: int, zp: bool,
                     a_source: tuple[str, int] | None = None) -> tuple[str, str]:
    """(entry name, source) of the gated kernel for this program and variant. `a_source`: where A
    comes from other than memory, as (the source's type in matmul_nbits_row.h, the launch bounds'
    blocks per SM its registers allow): the fused norm's (hipep.runtime.gpu_norm_matmul)."""
    from ..ops.pointwise_hip import render_hip_functor
    from .kernel_cache import HEADER

    data = json.dumps([expr.to_data(), t, out_dtype, q8, u, zp] + ([list(a_source)] if a_source else []),
                      sort_keys=True)
    key = hashlib.sha1(data.encode()).hexdigest()[:16]
    name = f"hipep_mnb_gated_{key}"
    epilogue = f"hipep_gated_epilogue_{key}"
    a_dtype = _NUMPY_NAME[t]
    c_type, to = _C_TYPE[t], _C_TYPE[_dt(np.dtype(out_dtype), GATED_MATMUL_NBITS)]
    if a_source is None:
        src_type, blocks = f"hipep_mnb_a_loaded<{c_type}>", MIN_BLOCKS[u, zp]
        params, src = f"HIPEP_MNB_GATED_PARAMS({c_type}, {to})", f"{src_type}{{A}}"
    else:
        src_type, blocks = a_source
        params, src = f"const {src_type} src, HIPEP_MNB_GATED_WEIGHTS({c_type}, {to})", "src"
    source = (f'#include "{HEADER}"\n#include "matmul_nbits_row.h"\n'
              + render_hip_functor(expr, epilogue, [a_dtype, a_dtype])
              + f"HIPEP_KERNEL void __launch_bounds__(MNB_WARPS * HIPEP_WARP_SIZE, {blocks})\n"
              + f"    {name}({params}) {{\n"
              + f"  hipep_mnb_gemv_row1_gated<{c_type}, {to}, {'true' if q8 else 'false'}, {u}, "
              + f"{'true' if zp else 'false'}, {epilogue}, {src_type}>({src}, B0, scales0, zp0, B1, scales1, zp1, "
              + "Y, a);\n}\n")
    return name, source


def _rendered_tc_source(expr, t: str, out_dtype: str, u: int, split: int, zp: bool, paired: bool,
                        a_source: tuple[str, int] | None = None) -> tuple[str, str]:
    """(entry name, source) of the tensor-core gated kernel (kernels/matmul_nbits_tc.h: rows g and
    g + 8 of a quad's mma are column n of the two weights) for this program; `t`: A's type, f16 or
    bf16. `a_source` as _rendered_source's (its blocks unused: the kernel's launch bounds are 2
    blocks an SM)."""
    from ..ops.pointwise_hip import render_hip_functor
    from .kernel_cache import HEADER

    data = json.dumps([expr.to_data(), t, out_dtype, "tc", u, split, zp, paired] + ([a_source[0]] if a_source else []),
                      sort_keys=True)
    key = hashlib.sha1(data.encode()).hexdigest()[:16]
    name, epilogue = f"hipep_mnb_gated_tc_{key}", f"hipep_gated_epilogue_{key}"
    c_type, a_dtype = _C_TYPE[t], _NUMPY_NAME[t]
    to = _C_TYPE[_dt(np.dtype(out_dtype), GATED_MATMUL_NBITS)]
    if a_source is None:
        src_type, params, src = f"hipep_mnb_a_loaded<{c_type}>", f"HIPEP_MNB_GATED_PARAMS({c_type}, {to})", \
            f"hipep_mnb_a_loaded<{c_type}>{{A}}"
    else:
        src_type = a_source[0]
        params, src = f"const {src_type} src, HIPEP_MNB_GATED_WEIGHTS({c_type}, {to})", "src"
    out = f"hipep_mnb_tc_gated<{to}, {epilogue}, {c_type}>"
    flags = f"{'true' if zp else 'false'}, {'true' if paired else 'false'}"
    source = (f'#include "{HEADER}"\n#include "matmul_nbits_tc.h"\n'
              + render_hip_functor(expr, epilogue, [a_dtype, a_dtype])
              + "HIPEP_KERNEL void __launch_bounds__(MNB_WARPS * HIPEP_WARP_SIZE, 2)\n"
              + f"    {name}({params}) {{\n"
              + f"  hipep_mnb_gemv_tc<{u}, {split}, {flags}, {out}, {src_type}>({src}, "
              + f"{out}{{B0, scales0, zp0, B1, scales1, zp1, Y}}, a);\n}}\n")
    return name, source


def gated_row_variant(A, first, second, attrs, target) -> tuple[bool, int, bool, int] | None:
    """(q8, U, zero points, launch bounds) of the one-kernel form for one row of A, or None where
    it does not apply: 4 bits, block_size >= 32, 16-byte aligned rows, no or uint8 zero points on
    both weights alike, A quantized to int8 (accuracy_level 4), fp16 or bf16 (bf16 on tensor cores
    only: it has no packed form), and a row a warp covers in one round of at most 4 chunks a lane
    (U of them)."""
    k, bits, bs = int(attrs["K"]), int(attrs.get("bits", 4)), int(attrs["block_size"])
    dt = _dt(A.dtype, GATED_MATMUL_NBITS)
    zps = [h[3] for h in (first, second)]
    if any(z is not None and z.dtype != np.uint8 for z in zps) or (zps[0] is None) != (zps[1] is None):
        return None
    zp = zps[0] is not None
    quant_a = quantizes_a_to_int8(attrs, int(zp))
    nb = _cdiv(k, bs)
    aligned = (nb * bs * bits // 8) % 16 == 0 and all(h[1].ptr % 16 == 0 for h in (first, second))
    chunks, ws = nb * bs // 32, target.warp_size
    if not (GEMV_ROW and bits == 4 and bs >= 32 and aligned and (quant_a or dt in ("f16", "bf16"))
            and chunks <= 4 * ws):
        return None
    u = next(u for u in (1, 2, 4) if u * ws >= chunks)
    return bool(quant_a), u, zp, MIN_BLOCKS[u, zp]


def _gated_row_op(A, first, second, y, expr, attrs, target, a_source: tuple[str, int] | None = None,
                  staged_max: int | None = None, tc_only: bool = False):
    """The one-kernel form for one row of A (gated_row_variant), or None where it does not apply.
    `a_source`: see _rendered_source; `staged_max`: the most chunks of A that source stages (None:
    any). On a device with tensor cores a bf16 row takes the tensor-core form, and an fp16 row with
    HIPEP_MNB_GEMV_TC=1 (gpu_quant.row_tc_form); `tc_only`: that form or None. A bf16 row has no
    other one-kernel form."""
    variant = gated_row_variant(A, first, second, attrs, target)
    if variant is None:
        return None
    quant_a, u, zp, _ = variant
    k, n, bits, bs = int(attrs["K"]), int(attrs["N"]), int(attrs.get("bits", 4)), int(attrs["block_size"])
    nb = _cdiv(k, bs)
    chunks, zp_mode = nb * bs // 32, int(zp)
    zp_row = _cdiv(nb * bits, 8) if zp_mode else 0
    args = MatMulNBitsArgs(1, n, k, nb * bs, nb * bs * bits // 8, nb, zp_row, bs.bit_length() - 1, chunks * 32,
                           zp_mode, 1, 1, int(k % 8 == 0 and A.ptr % 16 == 0), int(quant_a))
    params = [ctypes.c_uint64(A.ptr), ptr(first[1]), ptr(first[2]), ptr(first[3]), ptr(second[1]), ptr(second[2]),
              ptr(second[3]), ctypes.c_uint64(y.ptr), args]
    weights = all(w is None or w.constant for h in (first, second) for w in h[1:])
    dt = _dt(A.dtype, GATED_MATMUL_NBITS)
    tc = None if quant_a else gpu_quant.row_tc_form(args, target, all(h[2].ptr % 4 == 0 for h in (first, second)), dt)
    if tc is not None and (staged_max is None or tc[3] // gpu_quant.TC_SMEM_PER_CHUNK <= staged_max):
        tu, split, paired, smem = tc
        name, source = _rendered_tc_source(expr, dt, y.dtype.name, tu, split, zp, paired, a_source)
        return KernelOp(name, (_cdiv(n * split, 8 * GEMV_WARPS), 1, 1), (GEMV_WARPS * target.warp_size, 1, 1), params,
                        source=source, smem=smem, overlaps_previous=weights)
    if tc_only or (dt == "bf16" and not quant_a):
        return None
    name, source = _rendered_source(expr, _dt(A.dtype, GATED_MATMUL_NBITS), y.dtype.name, quant_a, u, zp, a_source)
    return KernelOp(name, (_cdiv(n, GEMV_WARPS), 1, 1), (GEMV_WARPS * target.warp_size, 1, 1), params,
                    source=source, smem=row_smem(chunks, bs, quant_a), overlaps_previous=weights)


@_binding(GATED, check=_check, modules=("matmul_nbits", "matmul_nbits_row", "matmul_nbits_tc", "matmul_nbits_dequant"))
def _gated_bind(ins, outs, attrs, target):
    from ..ops.elementwise import fused_expr

    first, second = _halves(ins)
    A, y = ins[0], outs[0]
    if y is None:
        raise NoKernel(f"{GATED}: an output nobody reads")
    expr = fused_expr(attrs)
    k, n = int(attrs["K"]), int(attrs["N"])
    m = A.size // k if k else 0
    if m == 0:
        return []
    if m == 1:
        op = _gated_row_op(A, first, second, y, expr, attrs, target)
        if op is not None:
            return [op]
    # Each MatMulNBits as alone, into the workspace; then the program over the two results.
    nbytes = m * n * A.dtype.itemsize
    sizes = [nbytes, nbytes]
    r0, r1 = workspace_regions(target, GATED, sizes)
    inner = workspace_after(target, sizes)
    shape = tuple(A.shape[:-1]) + (n,)
    results = [Arg(r0, shape, A.dtype), Arg(r1, shape, A.dtype)]
    ops = []
    for half, res in zip((first, second), results):
        ops += _mnb_bind([a for a in half], [res], _mnb_attrs(attrs), inner)
    return ops + expression_ops(expr, results, [y], target, GATED)
