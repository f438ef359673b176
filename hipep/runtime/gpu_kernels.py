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
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Callable, Sequence

import ml_dtypes  # noqa: F401  (registers numpy's 'bfloat16' dtype name)
import numpy as np

from ..errors import HipepError
from ..ops.registry import OUTPUT_COUNT, SINCE_VERSION, lookup
from ..plan import split_op_key
from .gpu_faults import fault_param

FUSED = "hipep::FusedElementwise"
MAX_BLOCK = 1024
COPY_MAX_RANK = 8
CONCAT_MAX = 8
_WORDS = (16, 8, 4, 2, 1)
_DT = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "int32": "i32", "int64": "i64"}


# ---- what a binding sees and produces ----------------------------------------------------------

@dataclass
class Arg:
    """One buffer argument of a launch as a binding sees it."""
    ptr: int
    shape: tuple
    dtype: np.dtype
    value: np.ndarray | None = None  # the contents, where the host can read them (constants, host-visible)
    constant: bool = False  # a plan constant: the value never changes between runs

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= int(d)
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)


@dataclass
class KernelOp:
    """One kernel launch: `module` is a kernels/*.hip module name, or None with `source` a
    generated one; `params` are the kernel's parameters in order (ctypes values)."""
    entry: str
    grid: tuple
    block: tuple
    params: list
    module: str | None = None
    source: str = ""
    smem: int = 0


@dataclass
class CopyOp:
    """A device-to-device copy of `nbytes` (memory the device can address on both sides)."""
    dst: int
    src: int
    nbytes: int


@dataclass
class BlasOp:
    """A vendor library call (cuBLASLt's matmul) the device issues on the launch's stream:
    `call(stream_handle)` queues it and returns None or what went wrong; it must be capturable
    into a CUDA graph (kernels only, fixed workspace). `key` tells two bound calls apart."""
    call: Callable[[int], str | None]
    key: tuple
    name: str = "blas"


@dataclass
class Target:
    """What a binding may ask of the device: its shape, scratch memory for an output the plan
    drops (a kernel still writes it), and `workspace(nbytes) -> pointer`: device memory for a
    launch's intermediate results, private to the stream the launch runs on (grown when a launch
    needs more, never freed while the stream lives: captured CUDA graphs keep its address).
    `fault(what) -> FaultSite`: the kernel parameter through which a launch that validates its
    input reports a bad value of `what` (hipep.runtime.gpu_faults; None: no report)."""
    sm_count: int = 132
    warp_size: int = 32
    scratch: Callable[[int], int] | None = None
    workspace: Callable[[int], int] | None = None
    fault: Callable[[str], object] | None = None


def ptr(a: Arg | None) -> ctypes.c_uint64:
    return ctypes.c_uint64(0 if a is None else a.ptr)


def _prod(dims) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _dt(dtype: np.dtype, what: str) -> str:
    name = np.dtype(dtype).name
    if name not in _DT:
        raise NoKernel(f"{what} has no kernel for element type {name}")
    return _DT[name]


class NoKernel(HipepError):
    """The launch's op, dtypes or shapes have no GPU program."""


# ---- launch configurations ---------------------------------------------------------------------

def row_config(rows: int, words: int, warp: int) -> tuple[tuple, tuple]:
    """(grid, block) for a row kernel reading `words` loads per row: one warp per row and several
    rows per block for short rows; one block per row, sized to the row, for long ones."""
    if words <= 4 * warp:
        per_block = max(1, min(8, rows))
        return (_cdiv(rows, per_block), 1, 1), (warp, per_block, 1)
    threads = min(MAX_BLOCK, max(2 * warp, _pow2_at_least(_cdiv(words, 4))))
    threads = _cdiv(threads, warp) * warp
    return (rows, 1, 1), (threads, 1, 1)


def flat_config(n: int, target: Target, per_sm: int = 16, block: int = 256) -> tuple[tuple, tuple]:
    """(grid, block) for a grid-stride loop over n items."""
    return (max(1, min(_cdiv(n, block), target.sm_count * per_sm)), 1, 1), (block, 1, 1)


def _vec_ok(args: Sequence[Arg | None], n: int, vec: int, itemsize: int) -> bool:
    """Whether rows of n elements can be read VEC at a time: n a multiple of VEC and every
    pointer (each row start follows) 16-byte aligned."""
    if vec <= 1 or n % vec:
        return False
    return all(a is None or a.ptr % (vec * itemsize) == 0 for a in args)


# ---- strided copies (Transpose, Slice, Expand, Split) ------------------------------------------

class CopyArgs(ctypes.Structure):
    _fields_ = [("n", ctypes.c_longlong), ("offset", ctypes.c_longlong),
                ("dims", ctypes.c_longlong * COPY_MAX_RANK), ("strides", ctypes.c_longlong * COPY_MAX_RANK),
                ("rank", ctypes.c_int)]


class TransposeArgs(ctypes.Structure):
    _fields_ = [("batch", ctypes.c_longlong), ("m", ctypes.c_longlong), ("n", ctypes.c_longlong)]


def merge_dims(dims: Sequence[int], strides: Sequence[Sequence[int]]) -> tuple[list[int], list[list[int]]]:
    """Drops extent-1 axes and merges adjacent axes d, d+1 wherever every operand steps through
    them as one axis (stride[d] == stride[d+1] * dims[d+1]). `strides` has one list per operand."""
    keep = [d for d in range(len(dims)) if int(dims[d]) != 1]
    out_dims: list[int] = []
    out_strides: list[list[int]] = [[] for _ in strides]
    for d in keep:
        if out_dims and all(s[d] * int(dims[d]) == os[-1] for s, os in zip(strides, out_strides)):
            out_dims[-1] *= int(dims[d])
            for s, os in zip(strides, out_strides):
                os[-1] = s[d]
        else:
            out_dims.append(int(dims[d]))
            for s, os in zip(strides, out_strides):
                os.append(int(s[d]))
    return out_dims, out_strides


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    out, s = [], 1
    for d in reversed(shape):
        out.append(s)
        s *= int(d)
    return out[::-1]


def strided_copy(src: Arg, dst: Arg, dims: Sequence[int], strides: Sequence[int], offset: int,
                 target: Target) -> list:
    """Ops copying dst[i] = src[offset + sum coord_d(i) * strides[d]] over dst's row-major
    coordinates in `dims` (element units): a memcpy where that is one contiguous run, the tiled
    transpose where it is a batched 2-D transpose, else the strided-copy kernel."""
    n = _prod(dims)
    if n == 0:
        return []
    e = dst.dtype.itemsize
    mdims, (mstrides,) = merge_dims(dims, [strides])
    if not mdims or (len(mdims) == 1 and mstrides[0] == 1):
        return [CopyOp(dst.ptr, src.ptr + offset * e, n * e)]
    # A batched 2-D transpose: output [B, N, M] reading source [B, M, N].
    if len(mdims) in (2, 3) and offset == 0:
        d3 = [1] * (3 - len(mdims)) + mdims
        s3 = [d3[1] * d3[2]] * (3 - len(mstrides)) + mstrides
        b, nn, mm = d3
        if s3[1] == 1 and s3[2] == nn and s3[0] == nn * mm and min(nn, mm) >= 4 and _cdiv(mm, 32) <= 65535:
            grid = (_cdiv(nn, 32), _cdiv(mm, 32), min(b, 65535))  # the kernel loops over batches past 65535
            return [KernelOp(f"hipep_transpose_tiled_w{e}", grid, (32, 8, 1), [ptr(src), ptr(dst), TransposeArgs(b, mm, nn)],
                             module="copy")]
    if len(mdims) > COPY_MAX_RANK:
        raise NoKernel(f"a strided copy of rank {len(mdims)} (at most {COPY_MAX_RANK} after merging axes)")
    # Widen the word where the innermost run is contiguous in both.
    word = e
    if mstrides[-1] == 1:
        run_bytes = mdims[-1] * e
        others = [s * e for s in mstrides[:-1]] + [offset * e]
        word = _word(e, [src.ptr, dst.ptr], [run_bytes, *others])
    ratio = word // e
    wdims = list(mdims)
    wstrides = list(mstrides)
    if ratio > 1:
        wdims[-1] //= ratio
        wstrides = [s // ratio for s in mstrides[:-1]] + [1]
    woffset = offset // ratio
    nw = _prod(wdims)
    span = max([abs(woffset)] + [abs(s) * (d - 1) + abs(woffset) for s, d in zip(wstrides, wdims)])
    index = "i32" if nw < 2 ** 31 and span < 2 ** 31 and sum(abs(s) * d for s, d in zip(wstrides, wdims)) < 2 ** 31 \
        else "i64"
    rank = len(wdims)
    rname = f"r{rank}" if rank <= 4 else "rn"
    args = CopyArgs()
    args.n, args.offset, args.rank = nw, woffset, rank
    for d in range(rank):
        args.dims[d], args.strides[d] = wdims[d], wstrides[d]
    grid, block = flat_config(nw, target)
    return [KernelOp(f"hipep_copy_w{word}_{rname}_{index}", grid, block, [ptr(src), ptr(dst), args], module="copy")]


def _word(e: int, pointers: Sequence[int], sizes: Sequence[int]) -> int:
    """The widest word (<= 16 bytes, a multiple of the element size e) dividing every pointer
    and byte count."""
    for w in _WORDS:
        if w < e:
            break
        if w % e == 0 and all(p % w == 0 for p in pointers) and all(s % w == 0 for s in sizes):
            return w
    return e


# ---- bindings ----------------------------------------------------------------------------------

@dataclass
class Binding:
    """How one registry op runs on a GPU. `check(attrs, dtypes, shapes, values)` says what it
    cannot do (None: it can; shapes/values may be None where unknown at claim time);
    `bind(inputs, outputs, attrs, target)` gives the ops of one launch (None for an omitted
    input or an output nobody reads). `reads_values`: bind reads input values (Slice bounds,
    reduction axes), so it is redone every run instead of once per argument layout."""
    name: str
    bind: Callable[[list, list, dict, Target], list]
    check: Callable[[dict, Sequence[str], Sequence, Sequence], str | None] = lambda a, d, s, v: None
    reads_values: bool = False
    modules: tuple = ()
    pointwise: bool = False


BINDINGS: dict[str, Binding] = {}


def _binding(key: str, **kw):
    def register(fn):
        BINDINGS[key] = Binding(key, fn, **kw)
        return fn
    return register


def _values_or_attr(ins, index: int, attrs, name: str):
    a = ins[index] if index < len(ins) else None
    if a is not None:
        if a.value is None:
            raise HipepError(f"input {index} ('{name}') must be readable by the host at launch")
        return [int(v) for v in np.asarray(a.value).reshape(-1)]
    v = attrs.get(name)
    return None if v is None else [int(x) for x in v]


# Reductions -----------------------------------------------------------------------------------

class ReduceArgs(ctypes.Structure):
    _fields_ = [("rows", ctypes.c_longlong), ("r", ctypes.c_longlong), ("inner", ctypes.c_longlong)]


_REDUCE_TYPES = {"ReduceSum": ("f32", "f16", "bf16", "i32", "i64"), "ReduceMean": ("f32", "f16", "bf16", "i32", "i64"),
                 "ReduceMax": ("f32", "f16", "bf16", "i32", "i64")}
_VEC = {"f32": 4, "f16": 8, "bf16": 8}


def reduce_blocks(shape: Sequence[int], axes, noop: bool) -> tuple[int, int, int] | str:
    """(outer, r, inner) for reducing `axes` of `shape`, or the reason it has no kernel (axes
    that are not adjacent once extent-1 axes are set aside)."""
    rank = len(shape)
    if not axes:
        if noop:
            return _prod(shape), 1, 1
        axes = list(range(rank))
    axes = sorted({a + rank if a < 0 else a for a in axes})
    if any(not 0 <= a < rank for a in axes):
        return f"axes {axes} out of range for rank {rank}"
    big = [d for d in range(rank) if int(shape[d]) != 1]
    reduced = [d for d in big if d in axes]
    if not reduced:
        return _prod(shape), 1, 1
    pos = [big.index(d) for d in reduced]
    if pos != list(range(pos[0], pos[0] + len(pos))):
        return f"reducing axes {axes} of a rank-{rank} input (not adjacent)"
    first, last = reduced[0], reduced[-1]
    outer = _prod(shape[d] for d in range(first) if d not in axes)
    r = _prod(shape[d] for d in reduced)
    inner = _prod(shape[d] for d in range(last + 1, rank))
    return outer, r, inner


def _reduce_check(op_type):
    def check(attrs, dtypes, shapes, values):
        if not dtypes or _DT.get(dtypes[0]) not in _REDUCE_TYPES[op_type]:
            return f"element type {dtypes[0] if dtypes else '?'}"
        x = shapes[0] if shapes else None
        axes = attrs.get("axes")
        if len(values) > 1 and values[1] is not None:
            axes = [int(v) for v in np.asarray(values[1]).reshape(-1)]
        elif len(dtypes) > 1 and dtypes[1] and axes is None:
            return None  # axes from an input whose value is known only at run time
        if x is None or any(d is None for d in x):
            if x is not None and axes is not None and len(x) > 0:
                # Adjacency does not depend on the extents unless some are 1: check with placeholders.
                res = reduce_blocks([2] * len(x), axes, bool(attrs.get("noop_with_empty_axes", 0)))
                return res if isinstance(res, str) else None
            return None
        res = reduce_blocks(x, axes, bool(attrs.get("noop_with_empty_axes", 0)))
        return res if isinstance(res, str) else None
    return check


def _reduce_bind(op_type: str):
    kind = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max"}[op_type]

    def bind(ins, outs, attrs, target):
        x, y = ins[0], outs[0]
        dt = _dt(x.dtype, op_type)
        if dt not in _REDUCE_TYPES[op_type]:
            raise NoKernel(f"{op_type} on {x.dtype.name}")
        axes = _values_or_attr(ins, 1, attrs, "axes")
        res = reduce_blocks(x.shape, axes or [], bool(attrs.get("noop_with_empty_axes", 0)))
        if isinstance(res, str):
            raise NoKernel(res)
        outer, r, inner = res
        if y.size != outer * inner:
            raise HipepError(f"{op_type}: output of {y.size} elements for a reduction to {outer * inner}")
        if y.size == 0:
            return []
        params = [ptr(x), ptr(y), ReduceArgs(outer * inner, r, inner)]
        if inner == 1:
            vec = _VEC.get(dt, 1)
            use_vec = _vec_ok([x], r, vec, x.dtype.itemsize)
            grid, block = row_config(outer, _cdiv(r, vec) if use_vec else r, target.warp_size)
            entry = f"hipep_reduce_{kind}_{dt}_rows" + ("_vec" if use_vec else "")
            return [KernelOp(entry, grid, block, params, module="reduce")]
        if dt in ("i32", "i64") and kind == "max":  # one thread per output (kept in the element type)
            grid, block = flat_config(outer * inner, target, per_sm=32)
        else:  # 32 outputs per block, the reduced extent split among up to 32 row groups
            groups = min(32, _pow2_at_least(_cdiv(r, 4)))
            grid, block = (_cdiv(inner, 32), min(outer, 65535), 1), (32, groups, 1)
        return [KernelOp(f"hipep_reduce_{kind}_{dt}_cols", grid, block, params, module="reduce")]
    return bind


for _op in ("ReduceSum", "ReduceMean", "ReduceMax"):
    _binding(f"::{_op}", check=_reduce_check(_op), reads_values=True, modules=("reduce",))(_reduce_bind(_op))


# Softmax --------------------------------------------------------------------------------------

class SoftmaxArgs(ctypes.Structure):
    _fields_ = [("rows", ctypes.c_longlong), ("cols", ctypes.c_longlong)]


def _softmax_axis(attrs) -> int:
    axis = attrs.get("axis")
    if axis is None:
        axis = -1 if int(attrs.get(SINCE_VERSION, 13)) >= 13 else 1
    return int(axis)


def _softmax_check(attrs, dtypes, shapes, values):
    if not dtypes or dtypes[0] not in ("float32", "float16"):
        return f"element type {dtypes[0] if dtypes else '?'}"
    x = shapes[0] if shapes else None
    if x is None or int(attrs.get(SINCE_VERSION, 13)) < 13:
        return None
    axis = _softmax_axis(attrs)
    axis = axis + len(x) if axis < 0 else axis
    trailing = x[axis + 1:]
    if any(d is None for d in trailing) or _prod(trailing) != 1:
        if all(d is not None for d in trailing) or axis != len(x) - 1:
            return f"Softmax over axis {axis} of a rank-{len(x)} input (only the last axis has a kernel)"
    return None


@_binding("::Softmax", check=_softmax_check, modules=("softmax",))
def _softmax_bind(ins, outs, attrs, target):
    x, y = ins[0], outs[0]
    dt = _dt(x.dtype, "Softmax")
    rank = x.ndim
    if rank == 0:
        raise HipepError("Softmax: input must have rank >= 1, got a scalar")
    axis = _softmax_axis(attrs)
    axis = axis + rank if axis < 0 else axis
    if int(attrs.get(SINCE_VERSION, 13)) >= 13 and _prod(x.shape[axis + 1:]) != 1:
        raise NoKernel(f"Softmax over axis {axis} of a rank-{rank} input (only the last axis has a kernel)")
    rows, cols = _prod(x.shape[:axis]), _prod(x.shape[axis:])
    if rows * cols == 0:
        return []
    vec = _VEC.get(dt, 1)
    use_vec = _vec_ok([x, y], cols, vec, x.dtype.itemsize)
    grid, block = row_config(rows, _cdiv(cols, vec) if use_vec else cols, target.warp_size)
    return [KernelOp(f"hipep_softmax_{dt}" + ("_vec" if use_vec else ""), grid, block,
                     [ptr(x), ptr(y), SoftmaxArgs(rows, cols)], module="softmax")]


# RMS normalization ----------------------------------------------------------------------------

class RmsArgs(ctypes.Structure):
    _fields_ = [("rows", ctypes.c_longlong), ("n", ctypes.c_longlong), ("skip_rows", ctypes.c_longlong),
                ("eps", ctypes.c_float)]


def _float_check(attrs, dtypes, shapes, values):
    if not dtypes or dtypes[0] not in ("float32", "float16"):
        return f"element type {dtypes[0] if dtypes else '?'}"
    return None


# f32 rows run kernels bit-identical to ORT's CPU EP (kernels/rms_norm.hip, its f32 section): a
# group of 8 threads per row (MLAS's 8 lanes), up to 16 rows per block; one block holds a decode's
# few rows (all its threads share the output pass), prefill's rows spread over the multiprocessors.
_RMS_EXACT_LANES = 8
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
        if dt == "f32":
            grid, block = _rms_exact_config(rows, target)
            entry = "hipep_rms_norm_f32_exact"
        else:
            grid, block = row_config(rows, _cdiv(n, vec) if use_vec else n, target.warp_size)
            entry = f"hipep_rms_norm_{dt}"
        return [KernelOp(entry + ("_vec" if use_vec else ""), grid, block, params, module="rms_norm")]
    return bind


for _op in ("SimplifiedLayerNormalization", "RMSNormalization"):
    _binding(f"::{_op}", check=_float_check, modules=("rms_norm",))(_rms_bind(_op))


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
    if dt == "f32":
        grid, block = _rms_exact_config(rows, target)
        entry = "hipep_skip_rms_norm_f32_exact"
    else:
        grid, block = row_config(rows, _cdiv(h, vec) if use_vec else h, target.warp_size)
        entry = f"hipep_skip_rms_norm_{dt}"
    return [KernelOp(entry + ("_vec" if use_vec else ""), grid, block, params, module="rms_norm")]


# Gather ---------------------------------------------------------------------------------------

class GatherArgs(ctypes.Structure):
    _fields_ = [("rows", ctypes.c_longlong), ("inner", ctypes.c_longlong), ("n_idx", ctypes.c_longlong),
                ("n_axis", ctypes.c_longlong)]


def _gather_check(attrs, dtypes, shapes, values):
    if len(dtypes) > 1 and dtypes[1] not in ("int32", "int64"):
        return f"indices of type {dtypes[1]}"
    return None


@_binding("::Gather", check=_gather_check, modules=("gather",))
def _gather_bind(ins, outs, attrs, target):
    data, idx, out = ins[0], ins[1], outs[0]
    if data.ndim == 0:
        raise HipepError("Gather: data must have rank >= 1")
    axis = int(attrs.get("axis", 0))
    axis = axis + data.ndim if axis < 0 else axis
    outer, n_axis = _prod(data.shape[:axis]), int(data.shape[axis])
    inner = _prod(data.shape[axis + 1:])
    n_idx = idx.size
    if out.size == 0:
        return []
    e = data.dtype.itemsize
    word = _word(e, [data.ptr, out.ptr], [inner * e])
    words = inner * e // word
    rows = outer * n_idx
    bx = min(256, _cdiv(max(words, 1), 32) * 32)
    by = max(1, 256 // bx)
    grid = (max(1, min(_cdiv(words, bx), 65535)), max(1, min(_cdiv(rows, by), 65535)), 1)
    it = {"int32": "i32", "int64": "i64"}.get(idx.dtype.name)
    if it is None:
        raise NoKernel(f"Gather with {idx.dtype.name} indices")
    # An index out of range: zeros in the output, and the stream's fault record names it.
    fault = fault_param(target, f"input 1 (indices) into data axis {axis}")
    return [KernelOp(f"hipep_gather_w{word}_{it}", grid, (bx, by, 1),
                     [ptr(data), ptr(idx), ptr(out), GatherArgs(rows, words, n_idx, n_axis), fault], module="gather")]


# Transpose, Slice, Expand, Split, Concat --------------------------------------------------------

@_binding("::Transpose", modules=("copy",))
def _transpose_bind(ins, outs, attrs, target):
    x, y = ins[0], outs[0]
    perm = attrs.get("perm")
    perm = list(range(x.ndim))[::-1] if perm is None else [int(p) for p in perm]
    st = contiguous_strides(x.shape)
    return strided_copy(x, y, [x.shape[p] for p in perm], [st[p] for p in perm], 0, target)


def _slice_params(ins, attrs):
    from ..ops.shape import _slice_for  # the reference's own bound rules

    x = ins[0]
    if len(ins) > 2 and ins[1] is not None:
        starts = _values_or_attr(ins, 1, attrs, "starts")
        ends = _values_or_attr(ins, 2, attrs, "ends")
        axes = _values_or_attr(ins, 3, attrs, "axes") if len(ins) > 3 else None
        steps = _values_or_attr(ins, 4, attrs, "steps") if len(ins) > 4 else None
    else:
        starts, ends, axes, steps = attrs.get("starts"), attrs.get("ends"), attrs.get("axes"), None
    if axes is None:
        axes = list(range(len(starts)))
    if steps is None:
        steps = [1] * len(starts)
    begin = [0] * x.ndim
    step = [1] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        a = int(a) + x.ndim if int(a) < 0 else int(a)
        lo, _, by = _slice_for(int(s), int(e), int(st), int(x.shape[a])).indices(int(x.shape[a]))
        begin[a], step[a] = lo, by
    return begin, step


@_binding("::Slice", reads_values=True, modules=("copy",))
def _slice_bind(ins, outs, attrs, target):
    x, y = ins[0], outs[0]
    begin, step = _slice_params(ins, attrs)
    st = contiguous_strides(x.shape)
    if y.size == 0:
        return []
    offset = sum(b * s for b, s in zip(begin, st))
    return strided_copy(x, y, y.shape, [s * k for s, k in zip(st, step)], offset, target)


@_binding("::Expand", modules=("copy",))
def _expand_bind(ins, outs, attrs, target):
    x, y = ins[0], outs[0]
    st = contiguous_strides(x.shape)
    pad = y.ndim - x.ndim
    strides = [0] * pad + [0 if int(d) == 1 else s for d, s in zip(x.shape, st)]
    return strided_copy(x, y, y.shape, strides, 0, target)


@_binding("::Split", reads_values=True, modules=("copy",))
def _split_bind(ins, outs, attrs, target):
    from ..graph import TensorType, elem_type_of

    op = lookup("", "Split")
    n_out = len(outs)
    x = ins[0]
    types = [None if a is None else TensorType(elem_type_of(a.dtype), tuple(a.shape)) for a in ins]
    values = [None if a is None else a.value for a in ins]
    shapes = [t.shape for t in op.shape_rule(types, values, attrs, n_out)]
    axis = int(attrs.get("axis", 0))
    axis = axis + x.ndim if axis < 0 else axis
    st = contiguous_strides(x.shape)
    ops, start = [], 0
    for out, shape in zip(outs, shapes):
        if out is not None:
            ops += strided_copy(x, out, out.shape, st, start * st[axis], target)
        start += int(shape[axis])
    return ops


class ConcatArgs(ctypes.Structure):
    _fields_ = [("src", ctypes.c_uint64 * CONCAT_MAX), ("len", ctypes.c_longlong * CONCAT_MAX),
                ("offset", ctypes.c_longlong * CONCAT_MAX), ("outer", ctypes.c_longlong),
                ("total", ctypes.c_longlong)]


@_binding("::Concat", modules=("copy",))
def _concat_bind(ins, outs, attrs, target):
    y = outs[0]
    ins = [a for a in ins if a is not None]
    axis = int(attrs["axis"])
    axis = axis + y.ndim if axis < 0 else axis
    if y.size == 0:
        return []
    e = y.dtype.itemsize
    outer = _prod(y.shape[:axis])
    inner = _prod(y.shape[axis + 1:])
    parts, offset = [], 0
    for a in ins:
        length = int(a.shape[axis]) * inner
        if length:
            parts.append((a, offset, length))
        offset += length
    total = offset
    word = _word(e, [y.ptr] + [a.ptr for a, _, _ in parts], [total * e] + [n * e for _, o, n in parts] +
                 [o * e for _, o, _ in parts])
    r = word // e
    ops = []
    for i in range(0, len(parts), CONCAT_MAX):
        chunk = parts[i:i + CONCAT_MAX]
        c = ConcatArgs()
        for k, (a, o, n) in enumerate(chunk):
            c.src[k], c.len[k], c.offset[k] = a.ptr, n // r, o // r
        c.outer, c.total = outer, total // r
        longest = max(n // r for _, _, n in chunk) * outer
        grid, block = flat_config(longest, target, per_sm=8)
        ops.append(KernelOp(f"hipep_concat_w{word}", (grid[0], len(chunk), 1), block, [ptr(y), c], module="copy"))
    return ops


# Views that got storage of their own: a copy --------------------------------------------------

def _copy_bind(ins, outs, attrs, target):
    x, y = ins[0], outs[0]
    if y is None or x is None or y.ptr == x.ptr or y.nbytes == 0:
        return []
    if x.nbytes != y.nbytes:
        raise HipepError(f"copies {x.nbytes} bytes into {y.nbytes}")
    return [CopyOp(y.ptr, x.ptr, y.nbytes)]


COPY = Binding("copy", _copy_bind)


# ---- pointwise ---------------------------------------------------------------------------------

class _Rendered:
    def __init__(self, name: str, source: str, n_in: int):
        self.name, self.source, self.n_in = name, source, n_in
        self.args_type = _pointwise_args_type(max(n_in, 1))


@functools.lru_cache(maxsize=None)
def _pointwise_args_type(n_in: int):
    from ..ops.pointwise import MAX_RANK

    class PointwiseArgs(ctypes.Structure):
        _fields_ = [("n", ctypes.c_longlong), ("rank", ctypes.c_int), ("dims", ctypes.c_longlong * MAX_RANK),
                    ("strides", (ctypes.c_longlong * MAX_RANK) * n_in)]
    return PointwiseArgs


_RENDERED: dict[str, _Rendered] = {}


def render_pointwise(expr, input_dtypes: Sequence[str], output_dtypes: Sequence[str]) -> _Rendered:
    """The rendered kernel for an expression and its dtypes (named by their hash, so the same
    program always has the same source and the kernel cache finds it)."""
    from ..ops.pointwise import render_hip_kernel
    from .kernel_cache import pointwise_source

    data = json.dumps([expr.to_data(), list(input_dtypes), list(output_dtypes)], sort_keys=True)
    key = hashlib.sha1(data.encode()).hexdigest()[:16]
    r = _RENDERED.get(key)
    if r is None:
        name = f"hipep_pw_{key}"
        r = _RENDERED[key] = _Rendered(name, pointwise_source(render_hip_kernel(expr, name, input_dtypes, output_dtypes)),
                                       len(input_dtypes))
    return r


def pointwise_expression(op_key: str, attrs: dict, operands: Sequence):
    """The expression a pointwise launch computes (None where the op's semantics for these
    operands do not fit one: integer Pow, an exponent known only at run time)."""
    from ..ops.elementwise import fused_expr

    if op_key == FUSED:
        return fused_expr(attrs)
    domain, op_type = split_op_key(op_key)
    op = lookup(domain, op_type)
    if op is None or op.pointwise is None:
        return None
    return op.pointwise(list(operands), attrs)


def _pointwise_bind(op_key: str):
    def bind(ins, outs, attrs, target):
        from ..ops.pointwise import MAX_RANK, Operand

        # Only constants' values may shape the expression (Pow's exponent): the program is bound
        # once per argument layout, and a constant cannot change under it.
        operands = [None if a is None else Operand(a.dtype, a.value if a.constant and a.size <= 16 else None, a.size)
                    for a in ins]
        expr = pointwise_expression(op_key, attrs, operands)
        if expr is None:
            raise NoKernel(f"{op_key} for inputs {[None if a is None else a.dtype.name for a in ins]}")
        out_dtypes = [expr.nodes[o][1] for o in expr.outputs]
        in_dtypes = ["uint8" if a is None else a.dtype.name for a in ins]
        rendered = render_pointwise(expr, in_dtypes, out_dtypes)
        shape = next(o.shape for o in outs if o is not None)
        n = _prod(shape)
        if n == 0:
            return []
        out_ptrs = []
        for o, dt in zip(outs, out_dtypes):
            if o is not None:
                out_ptrs.append(ptr(o))
            else:  # a result nobody reads: the kernel still writes it somewhere
                out_ptrs.append(ctypes.c_uint64(target.scratch(n * np.dtype(dt).itemsize)))
        rank = len(shape)
        per_input = []
        for k, a in enumerate(ins):
            if a is None or k not in expr.broadcast:
                per_input.append([0] * rank)
                continue
            pad = rank - a.ndim
            st = contiguous_strides(a.shape)
            per_input.append([0] * pad + [0 if int(d) == 1 else s for d, s in zip(a.shape, st)])
        dims, strides = merge_dims(shape, per_input)
        if len(dims) > MAX_RANK:
            raise NoKernel(f"{op_key} over {len(dims)} broadcast axes (at most {MAX_RANK})")
        args_struct = rendered.args_type()
        args_struct.n, args_struct.rank = n, len(dims)
        for d, v in enumerate(dims):
            args_struct.dims[d] = v
        for k, s in enumerate(strides):
            for d, v in enumerate(s):
                args_struct.strides[k][d] = v
        grid, block = flat_config(n, target)
        return [KernelOp(rendered.name, grid, block, [ptr(a) for a in ins] + out_ptrs + [args_struct],
                         source=rendered.source)]
    return bind


# Range ------------------------------------------------------------------------------------------

_RANGE_TYPES = {"int16": "i16", "int32": "i32", "int64": "i64", "float32": "f32"}


def _range_check(attrs, dtypes, shapes, values):
    if dtypes and dtypes[0] and dtypes[0] not in _RANGE_TYPES:
        return f"element type {dtypes[0]}"
    # The output's length comes from the shape program, which reasons over integers only: float
    # bounds must be constants (run-time ones would need the step-by-step interpreter).
    if dtypes and dtypes[0] and np.dtype(dtypes[0]).kind == "f":
        values = list(values or [])
        if len(values) < 3 or any(v is None for v in values[:3]):
            return "float bounds known only at run time"
    return None


@_binding("::Range", check=_range_check, modules=("range",))
def _range_bind(ins, outs, attrs, target):
    # The output's length is the shape program's (start, limit and delta are host values where
    # Range is planned); the kernel reads start and delta from memory.
    start, delta, out = ins[0], ins[2], outs[0]
    t = _RANGE_TYPES.get(out.dtype.name)
    if t is None:
        raise NoKernel(f"Range of element type {out.dtype.name}")
    n = out.size
    if n == 0:
        return []
    if t == "f32":  # one thread: each step rounds, as ORT's running sum does (kernels/range.hip)
        grid, block = (1, 1, 1), (1, 1, 1)
    else:
        grid, block = flat_config(n, target)
    return [KernelOp(f"hipep_range_{t}", grid, block, [ptr(start), ptr(delta), ptr(out), ctypes.c_longlong(n)],
                     module="range")]


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
    module, and each registry pointwise op alone on `float_types` (fused groups depend on the
    model, so they are compiled when first launched)."""
    from ..ops.registry import REQUIRED, all_ops
    from ..ops.pointwise import Operand
    from .kernel_cache import kernel_sources, read_source

    out = [(name, read_source(path)) for name, path in kernel_sources().items()]
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
from . import gpu_attention, gpu_linalg, gpu_quant  # noqa: E402,F401
