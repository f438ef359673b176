"""The core of the GPU kernel table (hipep.runtime.gpu_kernels): what a binding sees (`Arg`,
`Target`) and produces (`KernelOp`, `CopyOp`, `BlasOp`), launch configurations (`row_config`,
`flat_config`), the strided copy kernel's helpers (`merge_dims`, `strided_copy`) and the registry
of hand-written bindings (`Binding`, `BINDINGS`, `_binding`). Plain Python: no GPU runtime."""
from __future__ import annotations

import dataclasses

import ctypes
from dataclasses import dataclass
from typing import Callable, Sequence

import ml_dtypes  # noqa: F401  (registers numpy's 'bfloat16' dtype name)
import numpy as np

from ..errors import HipepError
from .device import ShapedBuffer


FUSED = "hipep::FusedElementwise"
MAX_BLOCK = 1024
COPY_MAX_RANK = 8
CONCAT_MAX = 8
_WORDS = (16, 8, 4, 2, 1)
_DT = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "int32": "i32", "int64": "i64"}
_VEC = {"f32": 4, "f16": 8, "bf16": 8}


# ---- what a binding sees and produces ----------------------------------------------------------

@dataclass
class Arg(ShapedBuffer):
    """One buffer argument of a launch as a binding sees it."""
    ptr: int
    shape: tuple
    dtype: np.dtype
    value: np.ndarray | None = None  # the contents, where the host can read them (constants, host-visible)
    constant: bool = False  # a plan constant: the value never changes between runs


@dataclass
class KernelOp:
    """One kernel launch: `module` is a kernels/*.hip module name, or None with `source` a
    generated one; `params` are the kernel's parameters in order (ctypes values). `element_type`
    (f32, f16, bf16), for a module the device compiles per element type
    (kernel_cache.TYPED_MODULES): the type whose compile holds the entry point."""
    entry: str
    grid: tuple
    block: tuple
    params: list
    module: str | None = None
    source: str = ""
    smem: int = 0
    # The kernel calls hipep_grid_wait() before it touches memory earlier kernels write or read,
    # and reads only the session's weights before that (kernels/hipep_device.h): the device may
    # launch it to start while the previous kernel of the stream finishes (programmatic dependent
    # launch), so its first loads of weights overlap that kernel's tail.
    overlaps_previous: bool = False
    element_type: str = ""
    # Chosen only because the target's first_run asked for a path with no first-use setup: the
    # launch is bound again, as usual, for the run that captures it (cuda_graphs._NodeState).
    provisional: bool = False


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
    input reports a bad value of `what` (hipep.runtime.gpu_faults; None: no report).
    `counters(nbytes) -> pointer`: device memory of the launch's own for arrival counters, zero
    when first handed out; a kernel using it must leave it zero when it ends (None: not offered).
    `tensor_cores`: the device runs mma.sync m16n8k16 on fp16 (kernels/hipep_device.h HIPEP_HAS_MMA:
    NVIDIA compute capability 8.0 and newer). `first_run`: the launch is bound for a segment's first
    run, which issues it once, one launch at a time, while the host binds the rest (never captured):
    a binding may take a path whose first use costs the host nothing over one that plans and loads
    a library's kernels at a new shape (MatMulNBits' tensor-core GEMM over cuBLASLt), marking such
    ops `provisional`."""
    sm_count: int = 132
    warp_size: int = 32
    tensor_cores: bool = False
    scratch: Callable[[int], int] | None = None
    workspace: Callable[[int], int] | None = None
    fault: Callable[[str], object] | None = None
    counters: Callable[[int], int] | None = None
    first_run: bool = False


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


# The same by dtype object: a binding asks for every launch it binds (a decode step binds some
# launches again every run), and numpy computes a dtype's name in Python each time it is read.
_DT_OF = {np.dtype(name): short for name, short in _DT.items()}


def _dt(dtype: np.dtype, what: str) -> str:
    short = _DT_OF.get(dtype)
    if short is None:
        name = np.dtype(dtype).name
        if name not in _DT:
            raise NoKernel(f"{what} has no kernel for element type {name}")
        short = _DT[name]
    return short


class NoKernel(HipepError):
    """The launch's op, dtypes or shapes have no GPU program."""


# ---- launch configurations ---------------------------------------------------------------------

def row_config(rows: int, words: int, target: Target) -> tuple[tuple, tuple]:
    """(grid, block) for a row kernel reading `words` loads per row (in two passes or more: a sum,
    then the output): one warp per row and several rows per block for short rows; one block per
    row for long ones, with 4 loads a thread where the rows fill the multiprocessors, and a thread
    per load (up to a block's limit) where they leave some idle, as a decode step's one row does:
    each pass is then one round trip instead of four (1 x 2048 fp16: 256 threads, not 64)."""
    warp = target.warp_size
    if rows < target.sm_count and words > warp:
        return (rows, 1, 1), (min(MAX_BLOCK, max(warp, _pow2_at_least(words))), 1, 1)
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


COPY_MAX_CHECKS = 8  # kernels/copy.hip's HIPEP_COPY_MAX_CHECKS


class CopyFillArgs(ctypes.Structure):
    _fields_ = [("n", ctypes.c_longlong), ("offset", ctypes.c_longlong),
                ("dims", ctypes.c_longlong * COPY_MAX_RANK), ("strides", ctypes.c_longlong * COPY_MAX_RANK),
                ("coef", (ctypes.c_longlong * COPY_MAX_RANK) * COPY_MAX_CHECKS),
                ("bias", ctypes.c_longlong * COPY_MAX_CHECKS), ("limit", ctypes.c_longlong * COPY_MAX_CHECKS),
                ("fill", ctypes.c_uint64), ("rank", ctypes.c_int), ("checks", ctypes.c_int)]


def permuted_copy(src: Arg, dst: Arg, perm: Sequence[int], target: Target, view_shape=None) -> list:
    """Ops writing into dst the axes of src (read as `view_shape`, default its shape) in the order
    `perm`: dst's axis k is src's axis perm[k] (ONNX Transpose's rule)."""
    shape = src.shape if view_shape is None else view_shape
    st = contiguous_strides(shape)
    return strided_copy(src, dst, [int(shape[p]) for p in perm], [st[p] for p in perm], 0, target)


def fill_copy(src: Arg, dst: Arg, dims: Sequence[int], strides: Sequence[int], offset: int,
              checks: Sequence[tuple[Sequence[int], int, int]], target: Target, fill: bytes = b"",
              fill_src: Arg | None = None) -> list:
    """Ops computing dst[i] = src[offset + sum_d coord_d(i) * strides[d]] where every check
    (coef, bias, limit) has 0 <= bias + sum_d coef[d] * coord_d < limit, else the fill element:
    *fill_src where given, else the bytes `fill` (zeros by default). Without checks, a strided
    copy."""
    if not checks:
        return strided_copy(src, dst, dims, strides, offset, target)
    n = _prod(dims)
    if n == 0:
        return []
    e = dst.dtype.itemsize
    if e not in (1, 2, 4, 8):
        raise NoKernel(f"a padded copy of {e}-byte elements")
    if len(dims) > COPY_MAX_RANK or len(checks) > COPY_MAX_CHECKS:
        raise NoKernel(f"a padded copy of rank {len(dims)} with {len(checks)} checked axes "
                       f"(at most {COPY_MAX_RANK} and {COPY_MAX_CHECKS})")
    args = CopyFillArgs()
    args.n, args.offset, args.rank, args.checks = n, offset, len(dims), len(checks)
    for d, (extent, stride) in enumerate(zip(dims, strides)):
        args.dims[d], args.strides[d] = int(extent), int(stride)
    for k, (coef, bias, limit) in enumerate(checks):
        for d, v in enumerate(coef):
            args.coef[k][d] = int(v)
        args.bias[k], args.limit[k] = int(bias), int(limit)
    args.fill = int.from_bytes(bytes(fill[:e]).ljust(8, b"\0"), "little")
    grid, block = flat_config(n, target)
    return [KernelOp(f"hipep_copy_fill_w{e}", grid, block, [ptr(src), ptr(fill_src), ptr(dst), args], module="copy")]


def fill_ops(dst: Arg, fill: bytes, target: Target) -> list:
    """Ops writing the element `fill` (its bytes) to every element of dst: the padded copy with
    one check that always fails, so its source is never read."""
    if dst.size == 0:
        return []
    flat = Arg(dst.ptr, (dst.size,), dst.dtype)
    return fill_copy(flat, flat, [dst.size], [0], 0, [([0], -1, 1)], target, fill=fill)


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


WORKSPACE_ALIGN = 256  # workspace regions start on this boundary (any vector load of the kernels fits)


def _regions_bytes(sizes) -> list[int]:
    return [-(-max(int(nbytes), 1) // WORKSPACE_ALIGN) * WORKSPACE_ALIGN for nbytes in sizes]


def workspace_regions(target, what: str, sizes) -> list[int]:
    """Pointers to regions of the stream's workspace of the given byte sizes, in one request (the
    workspace is one buffer per stream: asking twice would return the same memory). `what` names
    the op in the error where the target has no workspace."""
    if target.workspace is None:
        raise NoKernel(f"{what} needs a stream workspace for its intermediate results")
    offsets, total = [], 0
    for nbytes in _regions_bytes(sizes):
        offsets.append(total)
        total += nbytes
    base = target.workspace(total)
    return [base + o for o in offsets]


def workspace_after(target, sizes):
    """`target` with its workspace moved past the regions workspace_regions gives for `sizes`:
    for launches bound after those (a product's own workspace, cuBLASLt's or the split GEMV's),
    which run later on the same stream while the regions still hold their inputs."""
    if target.workspace is None:
        return target
    front = sum(_regions_bytes(sizes))
    return dataclasses.replace(target, workspace=lambda nbytes: target.workspace(front + nbytes) + front)
