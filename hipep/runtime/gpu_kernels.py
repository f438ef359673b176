"""The GPU kernel table: which GPU program runs a plan launch, and how it is launched.

Plain Python (ctypes, numpy, the op registry): no GPU runtime is imported, so the partitioner can
ask `has_kernel` on a machine without one, and the compile check runs anywhere NVRTC does.

Three kinds of program:
  * pointwise: `hipep::FusedElementwise` and every registry op that declares a pointwise
    expression (`OpDef.pointwise`) run the kernel `render_hip_kernel` renders from it;
  * hand-written: a `Binding` per registry op key names the kernels/*.hip entry point for the
    launch's dtypes and computes grid, block, shared memory and the scalar argument struct
    (extents, strides, epsilon...) from the argument shapes;
  * copies: ops whose output is a view of their input (Reshape, Squeeze, Unsqueeze, Flatten,
    Identity) copy bytes only where the plan gave the output storage of its own.

A binding turns the launch's arguments (`Arg`: pointer, shape, dtype and, where the host can
read it, the value) into a list of `KernelOp`/`CopyOp`/`BlasOp` (a vendor library call, cuBLASLt's
matmul) the device issues in order. Launch configurations from the plan are not used: the binding
knows its kernel's shape.

The core types and registry live in gpu_binding_core; the bindings by family in gpu_bindings_reduce
(reductions, Softmax), gpu_bindings_data (Gather, copies, Range), gpu_bindings_pointwise and the
modules imported at the end. Their names are re-exported here: this module is the table.
"""
from __future__ import annotations

import ctypes
from typing import Sequence

import ml_dtypes  # noqa: F401  (registers numpy's 'bfloat16' dtype name)
import numpy as np

from ..errors import HipepError
from ..ops.registry import OUTPUT_COUNT, SINCE_VERSION, lookup
from ..plan import split_op_key
from .gpu_faults import fault_param  # noqa: F401
from .gpu_binding_core import (Arg, BINDINGS, Binding, BlasOp, CONCAT_MAX, COPY_MAX_RANK, CopyArgs, CopyOp, FUSED,  # noqa: F401
                               KernelOp, MAX_BLOCK, NoKernel, Target, TransposeArgs, _DT, _VEC, _WORDS, _binding,
                               _cdiv, _dt, _pow2_at_least, _prod, _values_or_attr, _vec_ok, _word,
                               contiguous_strides, flat_config, merge_dims, ptr, row_config, strided_copy)
# The families register their bindings on import, in this order (the order of modules()).
from .gpu_bindings_reduce import (ReduceArgs, SoftmaxArgs, _reduce_bind, _reduce_check,  # noqa: F401
                                  _softmax_axis, _softmax_bind, _softmax_check, reduce_blocks)


# RMS normalization ----------------------------------------------------------------------------

class RmsArgs(ctypes.Structure):
    _fields_ = [("rows", ctypes.c_longlong), ("n", ctypes.c_longlong), ("skip_rows", ctypes.c_longlong),
                ("eps", ctypes.c_float)]


def _float_check(attrs, dtypes, shapes, values):
    """The RMS norms' element types: f32, f16, and bf16 (kernels/rms_norm.hip instantiates its
    half-precision kernels for both 16-bit types)."""
    if not dtypes or dtypes[0] not in ("float32", "float16", "bfloat16"):
        return f"element type {dtypes[0] if dtypes else '?'}"
    return None


# f32 rows run kernels bit-identical to ORT's CPU EP (kernels/rms_norm.hip, its f32 section): a
# group of 8 threads per row (MLAS's 8 lanes), up to 16 rows per block; one block holds a decode's
# few rows (all its threads share the output pass), prefill's rows spread over the multiprocessors.
_RMS_EXACT_LANES = 8  # HIPEP_RMS_GROUP
_RMS_EXACT_MAX_ROWS = 16  # HIPEP_RMS_MAX_ROWS


def _rms_exact_config(rows: int, target: Target) -> tuple[tuple, tuple]:
    if rows <= _RMS_EXACT_MAX_ROWS:
        per_block = _RMS_EXACT_MAX_ROWS
    else:
        per_block = min(_RMS_EXACT_MAX_ROWS, max(_cdiv(target.warp_size, _RMS_EXACT_LANES),
                                                 _pow2_at_least(_cdiv(rows, target.sm_count))))
    return (_cdiv(rows, per_block), 1, 1), (_RMS_EXACT_LANES, per_block, 1)


def _rms_bind(op_type: str):
    def bind(ins, outs, attrs, target):
        x, scale, y = ins[0], ins[1], outs[0]
        inv = outs[1] if len(outs) > 1 else None
        dt = _dt(x.dtype, op_type)
        if x.ndim == 0:
            raise HipepError(f"{op_type}: X must have rank >= 1, got a scalar")
        axis = int(attrs.get("axis", -1))
        axis = axis + x.ndim if axis < 0 else axis
        rows, n = _prod(x.shape[:axis]), _prod(x.shape[axis:])
        if scale.size != n:
            raise HipepError(f"{op_type}: scale must have {n} elements, got {scale.size}")
        if rows * n == 0:
            return []
        vec = _VEC.get(dt, 1)
        use_vec = _vec_ok([x, scale, y], n, vec, x.dtype.itemsize)
        params = [ptr(x), ptr(scale), ptr(y), ptr(inv), RmsArgs(rows, n, 0, float(attrs["epsilon"]))]
        return [_rms_launch("hipep_rms_norm", dt, rows, n, vec, use_vec, params, target)]
    return bind


# f32 rows that stand alone (up to a row per multiprocessor: decode, short prefills) take the
# one-row-per-block form of the same kernels: the whole row staged in shared memory at once.
_RMS_ROW_THREADS = 256
_RMS_ROW_MAX_BYTES = 48 * 1024  # dynamic shared memory without the opt-in


def _rms_launch(prefix: str, dt: str, rows: int, n: int, vec: int, use_vec: bool, params: list,
                target: Target) -> KernelOp:
    """f32 takes the kernels that repeat the CPU EP's summation order (bit-exact); the half types
    the bandwidth-shaped ones, a row per warp or block."""
    if dt == "f32" and use_vec and n >= 16 and rows <= target.sm_count and 4 * n <= _RMS_ROW_MAX_BYTES:
        threads = min(_RMS_ROW_THREADS, max(target.warp_size, _cdiv(n // 4, target.warp_size) * target.warp_size))
        return KernelOp(f"{prefix}_f32_exact_row", (rows, 1, 1), (threads, 1, 1), params, module="rms_norm",
                        smem=4 * n)
    if dt == "f32":
        grid, block = _rms_exact_config(rows, target)
        entry = f"{prefix}_f32_exact"
    else:
        grid, block = row_config(rows, _cdiv(n, vec) if use_vec else n, target)
        entry = f"{prefix}_{dt}"
    return KernelOp(entry + ("_vec" if use_vec else ""), grid, block, params, module="rms_norm")


for _op in ("SimplifiedLayerNormalization", "RMSNormalization"):
    _binding(f"::{_op}", check=_float_check, modules=("rms_norm",))(_rms_bind(_op))


# Whether a decode step's half-precision skip norms take the form that overlaps the kernel ahead
# (hipep_skip_rms_norm_<dt>_overlap); off, the same launch runs the block kernel (the tests compare
# the two bit for bit).
OVERLAP_SKIP_NORM = True


@_binding("com.microsoft::SkipSimplifiedLayerNormalization", check=_float_check, modules=("rms_norm",))
def _skip_rms_bind(ins, outs, attrs, target):
    x, skip, gamma = ins[0], ins[1], ins[2]
    bias = ins[3] if len(ins) > 3 else None
    y, mean, inv, total = (list(outs) + [None] * 4)[:4]
    dt = _dt(x.dtype, "SkipSimplifiedLayerNormalization")
    h = int(x.shape[-1])
    rows = x.size // h if h else 0
    if rows * h == 0:
        return []
    skip_rows = skip.size // h
    if skip_rows == 0 or rows % skip_rows or gamma.size != h or (bias is not None and bias.size != h):
        raise HipepError(f"SkipSimplifiedLayerNormalization: skip {list(skip.shape)}, gamma {list(gamma.shape)} "
                         f"do not fit the input {list(x.shape)}")
    vec = _VEC.get(dt, 1)
    use_vec = _vec_ok([x, skip, gamma, bias, y, total], h, vec, x.dtype.itemsize)
    params = [ptr(x), ptr(skip), ptr(gamma), ptr(bias), ptr(y), ptr(mean), ptr(inv), ptr(total),
              RmsArgs(rows, h, skip_rows, float(attrs["epsilon"]))]
    op = _rms_launch("hipep_skip_rms_norm", dt, rows, h, vec, use_vec, params, target)
    if (OVERLAP_SKIP_NORM and dt != "f32" and use_vec and op.grid[0] == rows and op.block[1] == 1
            and op.block[0] * vec >= h):
        # A decode step's rows, a block each with a 16-byte vector a thread (row_config's launch for
        # rows that leave multiprocessors idle): the same launch of the form that overlaps the
        # kernel ahead, fetching gamma while it finishes.
        op.entry, op.overlaps_previous = f"hipep_skip_rms_norm_{dt}_overlap", True
    return [op]


from .gpu_bindings_data import (COPY, ConcatArgs, GatherArgs, _RANGE_TYPES, _concat_bind, _copy_bind, _expand_bind,  # noqa: E402,F401
                                _gather_bind, _gather_check, _range_bind, _range_check, _slice_bind, _slice_params,
                                _split_bind, _transpose_bind)
from .gpu_bindings_pointwise import (_RENDERED, _Rendered, _pointwise_args_type, _pointwise_bind,  # noqa: E402,F401
                                     pointwise_expression, render_pointwise)


# ---- the table ---------------------------------------------------------------------------------

def binding_for(op_key: str) -> Binding | None:
    """The binding that runs launches of `op_key` on a GPU, or None."""
    b = BINDINGS.get(op_key)
    if b is not None:
        return b
    if op_key == FUSED:
        return Binding(op_key, _pointwise_bind(op_key), pointwise=True)
    domain, op_type = split_op_key(op_key)
    op = lookup(domain, op_type)
    if op is None:
        return None
    if op.pointwise is not None:
        return Binding(op_key, _pointwise_bind(op_key), pointwise=True)
    if op.view:
        return COPY
    return None


def program_binding(kernel) -> Binding | None:
    """The binding of a plan kernel (hipep.runtime.device.Kernel) on a GPU device. None: the op has
    no GPU program and runs as host work, which only integer shape arithmetic may; anything else
    without one raises NoKernel."""
    binding = binding_for(kernel.name)
    if binding is None and any(np.dtype(d).kind not in "biu" for d in kernel.dtypes[kernel.arity:] if d):
        raise NoKernel(f"{kernel.label or kernel.name}: no kernel for cuda: {kernel.name.lstrip(':')}")
    return binding


def kernel_reason(op_key: str, attrs: dict, dtypes: Sequence[str], shapes: Sequence | None = None,
                  values: Sequence | None = None) -> str | None:
    """None when a launch of `op_key` with these attributes and input dtypes ("" for an omitted
    input) has a GPU program; else what is missing, in words ("no kernel for cuda: ..."). `shapes`
    and `values` (per input, None where unknown) refine the answer where the kernel depends on
    them (which axes a reduction reduces, Pow's exponent)."""
    shapes = list(shapes or [])
    values = list(values or [])
    name = op_key[2:] if op_key.startswith("::") else op_key
    binding = binding_for(op_key)
    if binding is None:
        return f"no kernel for cuda: {name}"
    if binding.pointwise:
        from ..ops.pointwise import Operand

        operands = []
        for k, d in enumerate(dtypes):
            if not d:
                operands.append(None)
                continue
            shape = shapes[k] if k < len(shapes) else None
            value = values[k] if k < len(values) else None
            if value is not None:
                size = int(np.asarray(value).size)
            else:
                size = _prod(shape) if shape is not None and all(x is not None for x in shape) else None
            operands.append(Operand(np.dtype(d), value, size))
        try:
            expr = pointwise_expression(op_key, attrs, operands)
        except Exception as e:  # noqa: BLE001 - an expression that cannot be built has no kernel
            return f"no kernel for cuda: {name} ({type(e).__name__}: {e})"
        if expr is None:
            return f"no kernel for cuda: {name} for inputs of types {[d or None for d in dtypes]}"
        return None
    why = binding.check(attrs, list(dtypes), shapes, values)
    return None if why is None else f"no kernel for cuda: {name} ({why})"


def has_kernel(op_key: str, node_attrs: dict, dtypes: Sequence[str], shapes: Sequence | None = None,
               values: Sequence | None = None) -> bool:
    """Whether a launch of `op_key` has a GPU program (see `kernel_reason`)."""
    return kernel_reason(op_key, node_attrs, dtypes, shapes, values) is None


def modules() -> list[str]:
    """The kernels/*.hip modules the bindings use."""
    out: list[str] = []
    for b in BINDINGS.values():
        for m in b.modules:
            if m not in out:
                out.append(m)
    return out


def precompile_sources(float_types: Sequence[str] = ("float32", "float16")) -> list[tuple[str, str]]:
    """(name, source) of every kernel hipep can compile ahead of a model: each kernels/*.hip
    module (those the runtime compiles per element type, kernel_cache.TYPED_MODULES, once per
    type, as the runtime loads them), and each registry pointwise op alone on `float_types`
    (fused groups depend on the model, so they are compiled when first launched)."""
    from ..ops.registry import REQUIRED, all_ops
    from ..ops.pointwise import Operand
    from .kernel_cache import TYPE_TAGS, TYPED_MODULES, kernel_sources, module_source, read_source

    out = []
    for name, path in kernel_sources().items():
        if name in TYPED_MODULES:
            out += [(f"{name}@{tag}", module_source(f"{name}@{tag}")) for tag in TYPE_TAGS.values()]
        else:
            out.append((name, read_source(path)))
    seen: set[str] = set()
    for op in all_ops():
        if op.pointwise is None or op.domain == "hipep":
            continue
        for t in float_types:
            attrs = {k: v for k, v in op.attributes.items() if v is not REQUIRED}
            if "to" in op.attributes:
                attrs["to"] = 1 if t == "float16" else 10  # a cast to the other float type
            attrs[OUTPUT_COUNT] = 1
            attrs[SINCE_VERSION] = max(op.since_versions)
            n_in = 2 if op.variadic else len(op.inputs)
            dtypes = ["bool" if c and _only_bool(op, c) else t for c in op.inputs[:n_in]]
            try:
                expr = op.pointwise([Operand(np.dtype(d), None, 64) for d in dtypes], attrs)
            except Exception:  # noqa: BLE001 - an op that needs operand values: compiled at run time
                expr = None
            if expr is None:
                continue
            r = render_pointwise(expr, dtypes, [expr.nodes[o][1] for o in expr.outputs])
            if r.name not in seen:
                seen.add(r.name)
                out.append((r.name, r.source))
    return out


def _only_bool(op, constraint: str) -> bool:
    from ..ops.registry import BOOL

    allowed = op.constraints.get(constraint, frozenset())
    return bool(allowed) and allowed <= {BOOL}


# The op families kept in files of their own register their bindings on import; they import this
# module's names, so they come last.
from . import (gpu_attention, gpu_attention_ops, gpu_bindings_misc, gpu_conv_transpose,  # noqa: E402,F401
               gpu_deform_conv, gpu_detection, gpu_dynamic_quantize, gpu_einsum, gpu_gated_matmul, gpu_group_norm,
               gpu_indexing, gpu_linalg, gpu_linear_attention, gpu_grid_sample, gpu_matmul_integer, gpu_moe,
               gpu_norm_matmul, gpu_pool, gpu_quant, gpu_quantize_linear, gpu_recurrent, gpu_resize, gpu_select,
               gpu_signal, gpu_topk, gpu_unique)
