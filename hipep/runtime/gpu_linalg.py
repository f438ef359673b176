"""GPU bindings: MatMul and Gemm, Conv, LayerNormalization and SkipLayerNormalization (the pools,
which share Conv's window copy, are in gpu_pool).

Registered into the kernel table (hipep.runtime.gpu_kernels) when it is imported.

MatMul and Gemm become one `GemmProblem`: m, n, k, each operand's element strides (a transpose is
a swap of strides), the broadcast batch axes and Gemm's alpha, beta and C. kernels/gemm.hip runs
it: a GEMV for few rows (m <= 8, the decode case; B read 16 bytes at a time along whichever axis
it is contiguous), else the shared-memory tiled GEMM. A batched MatMul whose B has no batch of
its own folds A's batch into m (A [B, S, K] @ W [K, N] is one [B*S, K] @ [K, N] product).

Conv (1 to 3 spatial axes, any stride, dilation, padding and group) is im2col and a GEMM: the
windows, a strided view of X, are copied into the stream's workspace as [N, C * kernel, out] (by
the strided-copy kernel; where they reach into the padding, by the copy that fills zeros there),
and W [M, C/G * kernel] times them writes Y [N, M, out] directly, the bias as the GEMM's C (a
group's bias needs a product of its own). The patch embeddings of vision transformers (stride
equal to the kernel) and 1x1 convolutions are a plain copy, or none.

Det (kernels/det.hip) is an LU decomposition with partial pivoting in f64, a block per matrix at a
time, each block's matrix in a region of the stream's workspace.
"""
from __future__ import annotations

import ctypes
import logging
import os
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..errors import HipepError
from .gpu_binding_core import fill_copy, strided_copy, workspace_after, workspace_regions
from .gpu_kernels import (_VEC, Arg, BlasOp, KernelOp, NoKernel, Target, _binding, _cdiv, _dt, _prod, _vec_ok,
                          contiguous_strides, flat_config, merge_dims, ptr, row_config)

log = logging.getLogger("hipep")

GEMM_MAX_BATCH_RANK = 4
GEMV_MAX_ROWS = 8
GEMV_ROW_TILES = (1, 2, 4, 8)
GEMV_THREADS = 256
GEMV_MAX_COLS = 256  # kernels/gemm.hip's HIPEP_GEMV_MAX_COLS: columns one gemv_n block covers at most
GEMV_LOADS = 8  # kernels/gemm.hip's HIPEP_GEMV_LOADS: loads of B in flight per thread
GEMV_MAX_SPLITS = 32
GEMM_THREADS = 256
MAX_GRID_YZ = 65535
_FLOAT_TYPES = ("float32", "float16", "bfloat16")
_PRODUCT_TYPES = _FLOAT_TYPES + ("float64",)  # MatMul and Gemm: f64 through gemm_f64
GEMM_F64_TILE = 16  # kernels/gemm.hip's HIPEP_GEMM_F64_TILE


class GemmArgs(ctypes.Structure):
    _fields_ = [("m", ctypes.c_longlong), ("n", ctypes.c_longlong), ("k", ctypes.c_longlong),
                ("a_sm", ctypes.c_longlong), ("a_sk", ctypes.c_longlong),
                ("b_sk", ctypes.c_longlong), ("b_sn", ctypes.c_longlong),
                ("c_sm", ctypes.c_longlong), ("c_sn", ctypes.c_longlong),
                ("batch", ctypes.c_longlong),
                ("batch_dims", ctypes.c_longlong * GEMM_MAX_BATCH_RANK),
                ("a_batch", ctypes.c_longlong * GEMM_MAX_BATCH_RANK),
                ("b_batch", ctypes.c_longlong * GEMM_MAX_BATCH_RANK),
                ("k_chunk", ctypes.c_longlong), ("k_splits", ctypes.c_longlong),
                ("batch_rank", ctypes.c_int), ("alpha", ctypes.c_float), ("beta", ctypes.c_float)]


@dataclass
class GemmProblem:
    """Y[z] (m x n, contiguous) = alpha * A[z] @ B[z] (+ beta * C), every operand by element
    strides: A(i, l) = A[a_off(z) + i * a_sm + l * a_sk], B(l, j) = B[b_off(z) + l * b_sk + j * b_sn],
    C(i, j) = C[i * c_sm + j * c_sn]; a_off/b_off from z through `batch_dims` (row-major) and the
    per-axis strides `a_batch`/`b_batch` (0 where that operand broadcasts)."""
    m: int
    n: int
    k: int
    a_sm: int
    a_sk: int
    b_sk: int
    b_sn: int
    batch_dims: list = field(default_factory=list)
    a_batch: list = field(default_factory=list)
    b_batch: list = field(default_factory=list)
    c_sm: int = 0
    c_sn: int = 0
    has_c: bool = False
    alpha: float = 1.0
    beta: float = 0.0

    @property
    def batch(self) -> int:
        return _prod(self.batch_dims)

    def args(self) -> GemmArgs:
        g = GemmArgs()
        g.m, g.n, g.k = self.m, self.n, self.k
        g.a_sm, g.a_sk, g.b_sk, g.b_sn = self.a_sm, self.a_sk, self.b_sk, self.b_sn
        g.c_sm, g.c_sn = (self.c_sm, self.c_sn) if self.has_c else (0, 0)
        g.batch = self.batch
        g.k_chunk, g.k_splits = self.k, 1
        g.batch_rank = len(self.batch_dims)
        for d, (e, sa, sb) in enumerate(zip(self.batch_dims, self.a_batch, self.b_batch)):
            g.batch_dims[d], g.a_batch[d], g.b_batch[d] = e, sa, sb
        g.alpha, g.beta = self.alpha, self.beta
        return g


def matmul_problem(a_shape: Sequence[int], b_shape: Sequence[int]) -> GemmProblem:
    """The product numpy's matmul computes for A and B of these (C-contiguous) shapes."""
    a_shape, b_shape = [int(d) for d in a_shape], [int(d) for d in b_shape]
    if not a_shape or not b_shape:
        raise HipepError(f"MatMul: inputs must have rank >= 1: A is {a_shape}, B is {b_shape}")
    a2 = [1] + a_shape if len(a_shape) == 1 else a_shape
    b2 = b_shape + [1] if len(b_shape) == 1 else b_shape
    m, k = a2[-2:]
    k_b, n = b2[-2:]
    if k != k_b:
        raise HipepError(f"MatMul: inner dimensions disagree: A is {a_shape}, B is {b_shape}")
    batch_a, batch_b = a2[:-2], b2[:-2]
    try:
        batch = [int(d) for d in np.broadcast_shapes(tuple(batch_a), tuple(batch_b))]
    except ValueError:
        raise HipepError(f"MatMul: batch dimensions cannot be broadcast: A is {a_shape}, B is {b_shape}") from None
    if _prod(batch_b) == 1:
        # B is one matrix: A's batch rows are rows of one product (A and Y are contiguous).
        return GemmProblem(_prod(batch) * m, n, k, a_sm=k, a_sk=1, b_sk=n, b_sn=1)

    def batch_strides(own: list, matrix: int) -> list:
        pad = len(batch) - len(own)
        st = contiguous_strides(own)
        return [0] * pad + [0 if d == 1 else s * matrix for d, s in zip(own, st)]

    out_strides = [s * m * n for s in contiguous_strides(batch)]
    dims, (sa, sb, _) = merge_dims(batch, [batch_strides(batch_a, m * k), batch_strides(batch_b, k * n), out_strides])
    if len(dims) > GEMM_MAX_BATCH_RANK:
        raise NoKernel(f"MatMul over {len(dims)} batch axes that do not merge (at most {GEMM_MAX_BATCH_RANK})")
    return GemmProblem(m, n, k, a_sm=k, a_sk=1, b_sk=n, b_sn=1, batch_dims=dims, a_batch=sa, b_batch=sb)


def gemm_problem(attrs: dict, a_shape: Sequence[int], b_shape: Sequence[int],
                 c_shape: Sequence[int] | None) -> GemmProblem:
    """ONNX Gemm: op(A) @ op(B) with transA/transB as strides, alpha, and beta * C broadcast
    to [M, N] (C is left out where beta is 0, as ONNX Runtime does)."""
    a_shape, b_shape = [int(d) for d in a_shape], [int(d) for d in b_shape]
    if len(a_shape) != 2 or len(b_shape) != 2:
        raise HipepError(f"Gemm: A and B must be 2-D: A is {a_shape}, B is {b_shape}")
    ta, tb = int(attrs.get("transA", 0)), int(attrs.get("transB", 0))
    if ta:
        k, m = a_shape
        a_sm, a_sk = 1, m
    else:
        m, k = a_shape
        a_sm, a_sk = k, 1
    if tb:
        n, k_b = b_shape
        b_sk, b_sn = 1, k_b
    else:
        k_b, n = b_shape
        b_sk, b_sn = n, 1
    if k != k_b:
        raise HipepError(f"Gemm: inner dimensions disagree: A is {a_shape} (transA={ta}), B is {b_shape} "
                         f"(transB={tb}) (K from A is {k}, K from B is {k_b})")
    p = GemmProblem(m, n, k, a_sm, a_sk, b_sk, b_sn, alpha=float(attrs.get("alpha", 1.0)),
                    beta=float(attrs.get("beta", 1.0)))
    if c_shape is not None and p.beta != 0.0:
        c = [int(d) for d in c_shape]
        if len(c) > 2:
            raise HipepError(f"Gemm: C of shape {c} cannot be broadcast to the output shape {[m, n]}")
        cm, cn = ([1] * (2 - len(c)) + c)
        if cm not in (1, m) or cn not in (1, n):
            raise HipepError(f"Gemm: C of shape {c} cannot be broadcast to the output shape {[m, n]}")
        p.has_c = True
        p.c_sm = 0 if cm == 1 else cn
        p.c_sn = 0 if cn == 1 else 1
    return p


def _aligned(pointer: int, strides: Sequence[int], vec: int, itemsize: int) -> bool:
    return pointer % (vec * itemsize) == 0 and all(int(s) % vec == 0 for s in strides)


def gemm_ops(p: GemmProblem, a: Arg, b: Arg, c: Arg | None, y: Arg, target: Target) -> list:
    """The launches computing `p` into y."""
    f64 = y.dtype == np.float64
    dt = "f64" if f64 else _dt(y.dtype, "MatMul/Gemm")
    if dt not in ("f32", "f16", "bf16", "f64"):
        raise NoKernel(f"MatMul/Gemm on {y.dtype.name}")
    if p.m * p.n * p.batch == 0:
        return []
    if y.size != p.batch * p.m * p.n:
        raise HipepError(f"output of {y.size} elements for a product of {p.batch} x {p.m} x {p.n}")
    if f64:
        return _f64_ops(p, a, b, c, y)
    blas = _blas_ops(p, a, b, c, y, dt, target)
    if blas is not None:
        return blas
    params = [ptr(a), ptr(b), ptr(c if p.has_c else None), ptr(y), p.args()]
    e = y.dtype.itemsize
    vec = _VEC[dt]
    gz = min(p.batch, MAX_GRID_YZ)  # the kernels loop over batches past 65535
    warp = target.warp_size
    if p.m <= GEMV_MAX_ROWS and (p.b_sk == 1 or p.b_sn == 1):
        rows = next(t for t in GEMV_ROW_TILES if t >= p.m)
        if p.b_sk == 1:  # B contiguous along k: one warp per column
            use_vec = (p.k % vec == 0 and p.a_sk == 1 and _aligned(b.ptr, [p.b_sn if p.n > 1 else 0, *p.b_batch], vec, e)
                       and _aligned(a.ptr, [p.a_sm if p.m > 1 else 0, *p.a_batch], vec, e))
            per_block = GEMV_THREADS // warp
            grid = (_cdiv(p.n, per_block), 1, gz)
            entry = f"hipep_gemv_t_{dt}_m{rows}" + ("_vec" if use_vec else "")
            return [KernelOp(entry, grid, (warp, per_block, 1), params, module="gemm")]
        use_vec = p.n % vec == 0 and _aligned(b.ptr, [p.b_sk if p.k > 1 else 0, *p.b_batch], vec, e)
        v = vec if use_vec else 1
        # Column lanes per block: the most (longer runs of B per k row) that still give every
        # multiprocessor two blocks; at least 4 lanes (64 contiguous bytes of a row at VEC).
        lanes = min(32, warp, GEMV_MAX_COLS // v)
        while lanes > 4 and _cdiv(p.n, lanes * v) * p.batch < 2 * target.sm_count:
            lanes //= 2
        gx, groups = _cdiv(p.n, lanes * v), GEMV_THREADS // lanes
        splits = 1
        if use_vec and target.workspace is not None and gx * p.batch < target.sm_count:
            # Too few column blocks to fill the GPU (a narrow B): K is split among blocks too,
            # each split at least one round of loads per thread.
            splits = min(GEMV_MAX_SPLITS, _cdiv(2 * target.sm_count, gx * p.batch), p.k // (groups * GEMV_LOADS))
        if splits > 1:
            return _split_gemv_ops(p, a, b, c, y, dt, rows, splits, (gx, gz), (lanes, groups), target)
        entry = f"hipep_gemv_n_{dt}_m{rows}" + ("_vec" if use_vec else "")
        return [KernelOp(entry, (gx, 1, gz), (lanes, groups, 1), params, module="gemm")]
    tile = 128
    if _cdiv(p.m, 128) * _cdiv(p.n, 128) * p.batch < target.sm_count:
        tile = 64  # too few 128-wide tiles to fill the GPU
    gy = _cdiv(p.m, tile)
    if gy > MAX_GRID_YZ:
        raise NoKernel(f"a product of {p.m} rows (at most {MAX_GRID_YZ * tile})")
    return [KernelOp(f"hipep_gemm_{dt}_{tile}", (_cdiv(p.n, tile), gy, gz), (GEMM_THREADS, 1, 1), params,
                     module="gemm")]


def _f64_ops(p: GemmProblem, a: Arg, b: Arg, c: Arg | None, y: Arg) -> list:
    """kernels/gemm.hip's gemm_f64: a thread an output, 16 x 16 tiles."""
    gy = _cdiv(p.m, GEMM_F64_TILE)
    if gy > MAX_GRID_YZ:
        raise NoKernel(f"a double product of {p.m} rows (at most {MAX_GRID_YZ * GEMM_F64_TILE})")
    return [KernelOp("hipep_gemm_f64", (_cdiv(p.n, GEMM_F64_TILE), gy, min(p.batch, MAX_GRID_YZ)),
                     (GEMM_F64_TILE, GEMM_F64_TILE, 1),
                     [ptr(a), ptr(b), ptr(c if p.has_c else None), ptr(y), p.args()], module="gemm")]


# ---- cuBLASLt on NVIDIA --------------------------------------------------------------------------

GEMM_ENV = "HIPEP_GEMM"
_GEMM_MODES = ("auto", "own", "blas")
_blas_warned: set[str] = set()


def gemm_mode() -> str:
    """HIPEP_GEMM: `own` (hipep's kernels only), `blas` (cuBLASLt for every product it can take,
    its failures raised), `auto` (the default: cuBLASLt for products of more than GEMV_MAX_ROWS
    rows where it loads, hipep's kernels otherwise). Read at each bind, so a new session sees
    a change."""
    mode = os.environ.get(GEMM_ENV, "auto").strip().lower() or "auto"
    if mode not in _GEMM_MODES:
        raise HipepError(f"{GEMM_ENV}={mode!r}: expected one of {', '.join(_GEMM_MODES)}")
    return mode


def _blas_ops(p: GemmProblem, a: Arg, b: Arg, c: Arg | None, y: Arg, dt: str, target: Target) -> list | None:
    """The product as one cuBLASLt matmul on the launch's stream, or None where hipep's own
    kernels run it: mode `own`, no stream workspace (a target without a CUDA stream), cuBLASLt
    missing, few rows in mode `auto`, or a product cuBLASLt cannot express (more than one batch
    axis, K = 0, a C that broadcasts other than one value per column with beta 1)."""
    mode = gemm_mode()
    if mode == "own" or target.workspace is None or p.k == 0:
        return None
    if mode == "auto" and p.m <= GEMV_MAX_ROWS:
        return None
    full_c = p.c_sm == p.n and p.c_sn == 1 and p.m * p.n == (c.size if c is not None else 0)
    # C of one value per column with beta 1 (a Linear layer's bias): cuBLASLt's bias epilogue.
    bias_c = p.has_c and p.c_sm == 0 and p.c_sn == 1 and p.beta == 1.0 and c is not None and c.size == p.n
    if len(p.batch_dims) > 1 or (p.has_c and (not (full_c or bias_c) or p.batch > 1)):
        return None
    from . import cublaslt

    ok, why = cublaslt.status()
    if not ok:
        if mode == "blas":
            raise HipepError(f"{GEMM_ENV}=blas: {why}")
        return None
    try:
        from cuda.bindings import driver

        err, device = driver.cuCtxGetDevice()  # one cuBLASLt handle per device
        device_key = int(device) if err == driver.CUresult.CUDA_SUCCESS else 0
    except Exception:  # noqa: BLE001 - no current context: the handle of device 0
        device_key = 0
    c_ptr = c.ptr if full_c and p.has_c else y.ptr
    bias = c.ptr if bias_c else 0
    try:
        plan = cublaslt.matmul_plan(device_key, dt, p.m, p.n, p.k, p.a_sm, p.a_sk, p.b_sk, p.b_sn, p.batch,
                                    p.a_batch[0] if p.a_batch else 0, p.b_batch[0] if p.b_batch else 0,
                                    (a.ptr, b.ptr, y.ptr | c_ptr), bias)
    except cublaslt.CublasLtError as e:
        if mode == "blas":
            raise HipepError(f"{GEMM_ENV}=blas: {e}") from None
        if str(e) not in _blas_warned:
            _blas_warned.add(str(e))
            log.warning("hipep: cuBLASLt cannot run a %s product of %d x %d x %d (%s); hipep's own kernel runs it",
                        dt, p.m, p.n, p.k, e)
        return None
    workspace = target.workspace(plan.workspace_size) if plan.workspace_size else 0
    beta_value = p.beta if full_c and p.has_c else 0.0
    alpha, beta = ctypes.c_float(p.alpha), ctypes.c_float(beta_value)
    # cuBLASLt's A is B, its B is A (column-major Y^T = B^T A^T); C is Y itself when there is none.
    lt_a, lt_b, d = b.ptr, a.ptr, y.ptr

    def call(stream: int, plan=plan, alpha=alpha, beta=beta) -> str | None:
        return plan.run(stream, alpha, beta, lt_a, lt_b, c_ptr, d, workspace)

    key = ("cublasLt", id(plan), lt_a, lt_b, c_ptr, d, workspace, p.alpha, beta_value)
    return [BlasOp(call, key, name=f"cublasLt matmul {p.m}x{p.n}x{p.k}")]


def _split_gemv_ops(p: GemmProblem, a: Arg, b: Arg, c: Arg | None, y: Arg, dt: str, rows: int, splits: int,
                    grid_xz: tuple, block_xy: tuple, target: Target) -> list:
    """gemv_n over `splits` chunks of K (grid.y), f32 partial sums in the stream's workspace,
    then the reduction that adds them and applies the epilogue."""
    groups = block_xy[1]
    k_chunk = _cdiv(_cdiv(p.k, splits), groups) * groups
    splits = _cdiv(p.k, k_chunk)
    args = p.args()
    args.k_chunk, args.k_splits = k_chunk, splits
    total = p.batch * p.m * p.n
    partial = ctypes.c_uint64(target.workspace(splits * total * 4))
    gx, gz = grid_xz
    grid, block = flat_config(total, target)
    return [KernelOp(f"hipep_gemv_n_{dt}_m{rows}_vec_split", (gx, splits, gz), (*block_xy, 1),
                     [ptr(a), ptr(b), partial, args], module="gemm"),
            KernelOp(f"hipep_gemm_split_reduce_{dt}", grid, block, [partial, ptr(c if p.has_c else None), ptr(y), args],
                     module="gemm")]


def _float_type(dtypes, types=_FLOAT_TYPES) -> str | None:
    if not dtypes or dtypes[0] not in types:
        return f"element type {dtypes[0] if dtypes else '?'}"
    return None


def _matmul_check(attrs, dtypes, shapes, values):
    why = _float_type(dtypes, _PRODUCT_TYPES)
    if why is not None:
        return why
    a = shapes[0] if shapes else None
    b = shapes[1] if len(shapes) > 1 else None
    if a is None or b is None or len(a) < 3 and len(b) < 3:
        return None
    return matmul_shape_reason(a, b)


def matmul_shape_reason(a, b) -> str | None:
    """Why the product of operands of these claim-time shapes has no launch (unknown extents as
    None), or None: their batch axes, once merged, exceed what the kernels take."""
    # Unknown extents stand in as 2 (not 1: a broadcast axis would merge away).
    fill = [[2 if d is None else int(d) for d in s] for s in (a, b)]
    if any(len(s) < 1 for s in fill):
        return None
    try:
        matmul_problem(*fill)
    except NoKernel as e:
        return str(e)
    except HipepError:
        return None  # a shape error: the shape rule reports it
    return None


@_binding("::MatMul", check=_matmul_check, modules=("gemm",))
def _matmul_bind(ins, outs, attrs, target):
    a, b, y = ins[0], ins[1], outs[0]
    if y is None:
        return []
    return gemm_ops(matmul_problem(a.shape, b.shape), a, b, None, y, target)


def _gemm_check(attrs, dtypes, shapes, values):
    return _float_type(dtypes, _PRODUCT_TYPES)


@_binding("::Gemm", check=_gemm_check, modules=("gemm",))
def _gemm_bind(ins, outs, attrs, target):
    a, b, y = ins[0], ins[1], outs[0]
    c = ins[2] if len(ins) > 2 else None
    if y is None:
        return []
    p = gemm_problem(attrs, a.shape, b.shape, None if c is None else c.shape)
    return gemm_ops(p, a, b, c, y, target)


# ---- Conv: im2col by a (padded) strided copy, then one GEMM -----------------------------------

CONV_MAX_SPATIAL = 3  # the windows' copy has 2 + 2 * spatial axes (kernels/copy.hip: at most 8)
CONV_MAX_BIAS_GROUPS = 8  # a grouped convolution with bias runs a product per image and group


def conv_window(attrs, x_shape, w_shape):
    from ..ops.vision import _Window

    return _Window("Conv", x_shape[2:], [int(k) for k in w_shape[2:]], attrs)


def conv_cols_elements(win, n: int, c: int) -> int:
    """The elements of a convolution's windows' copy [N, C, *kernel, *out] (im2col)."""
    return n * c * _prod(win.kernel) * _prod(win.out)


def conv_product_problem(win, n: int, c: int, m: int, group: int) -> GemmProblem:
    """The product after im2col, one per (image, group): Y[i, g] [M/G, out] = W[g] [M/G, C/G * kernel]
    @ windows[i, g] [C/G * kernel, out], W shared by the images (Conv's and the integer
    convolutions')."""
    cg, mg = c // group, m // group
    kp, p = _prod(win.kernel), _prod(win.out)
    kg = cg * kp
    batch, a_batch, b_batch = [n], [0], [c * kp * p]
    if group > 1:
        batch, a_batch, b_batch = [n, group], [0, mg * kg], [c * kp * p, kg * p]
    return GemmProblem(mg, p, kg, a_sm=kg, a_sk=1, b_sk=p, b_sn=1, batch_dims=batch, a_batch=a_batch,
                       b_batch=b_batch)


def _window_reach(win, i: int) -> int:
    """How far into spatial axis i (from the padding's start) the last window reaches."""
    return (win.out[i] - 1) * win.strides[i] + (win.kernel[i] - 1) * win.dilations[i] + 1


def _conv_reads_padding(win) -> bool:
    return any(win.pb[i] or _window_reach(win, i) > length for i, length in enumerate(win.lengths))


def window_ops(x: Arg, dst: Arg, win, taps_first: bool, fill: bytes, target: Target,
                fill_src: Arg | None = None) -> list:
    """Ops copying X's sliding windows into dst, laid out [N, C, *kernel, *out] (taps_first: Conv's
    im2col) or [N, C, *out, *kernel] (a pool's rows): a strided view of X, and where a window
    reaches past the input (padding, ceil_mode's overhang) a copy that writes `fill` there (the
    element *fill_src instead where given: a zero point in device memory). Spatial axis d of window
    position o_d and tap k_d reads o_d * stride + k_d * dilation - pad_begin."""
    n, c = int(x.shape[0]), int(x.shape[1])
    nsp = len(win.kernel)
    xs = contiguous_strides(x.shape)
    taps = [d * s for d, s in zip(win.dilations, xs[2:])]
    steps = [st * s for st, s in zip(win.strides, xs[2:])]
    first, second = (win.kernel, win.out) if taps_first else (win.out, win.kernel)
    dims = [n, c] + first + second
    strides = [xs[0], xs[1]] + (taps + steps if taps_first else steps + taps)
    if not _conv_reads_padding(win):
        return strided_copy(x, dst, dims, strides, 0, target)
    checks = []
    for d in range(nsp):
        coef = [0] * (2 + 2 * nsp)
        tap_at, step_at = (2 + d, 2 + nsp + d) if taps_first else (2 + nsp + d, 2 + d)
        coef[tap_at], coef[step_at] = win.dilations[d], win.strides[d]
        checks.append((coef, -win.pb[d], win.lengths[d]))
    offset = -sum(pb * s for pb, s in zip(win.pb, xs[2:]))
    return fill_copy(x, dst, dims, strides, offset, checks, target, fill=fill, fill_src=fill_src)


def _conv_check(attrs, dtypes, shapes, values):
    why = _float_type(dtypes)
    if why is not None:
        return why
    x = shapes[0] if shapes else None
    if x is not None and len(x) - 2 > CONV_MAX_SPATIAL:
        return f"Conv over {len(x) - 2} spatial axes (at most {CONV_MAX_SPATIAL})"
    group = int(attrs.get("group", 1))
    if group > CONV_MAX_BIAS_GROUPS and len(dtypes) > 2 and dtypes[2]:
        return f"Conv of {group} groups with a bias (at most {CONV_MAX_BIAS_GROUPS})"
    return None


@_binding("::Conv", check=_conv_check, modules=("copy", "gemm"))
def _conv_bind(ins, outs, attrs, target):
    x, w, y = ins[0], ins[1], outs[0]
    b = ins[2] if len(ins) > 2 else None
    if y is None or y.size == 0:
        return []
    win = conv_window(attrs, x.shape, w.shape)
    n, c = int(x.shape[0]), int(x.shape[1])
    group = int(attrs.get("group", 1))
    # The windows [N, C, *kernel, *out] (= [N, G, Kg, P]), zeros where they reach into the padding
    cols_bytes = conv_cols_elements(win, n, c) * x.dtype.itemsize
    (cols_at,) = workspace_regions(target, "Conv", [cols_bytes])
    cols = Arg(cols_at, (conv_cols_elements(win, n, c),), x.dtype)
    ops = window_ops(x, cols, win, True, b"", target)
    # The products run after the copy on the same stream; their own workspace lies past the windows.
    return ops + window_products(win, n, c, w, cols, b, y, group, workspace_after(target, [cols_bytes]))


def window_products(win, n: int, c: int, w: Arg, cols: Arg, b: Arg | None, y: Arg, group: int, target: Target) -> list:
    """Y [N, M, *out] = W [M, C/G * kernel] @ the windows `cols` [N, C * kernel, *out] per image and
    group, plus the bias B [M] (Conv's product after im2col, DeformConv's after its sampling)."""
    m = int(w.shape[0])
    if b is None or group == 1:
        problem = conv_product_problem(win, n, c, m, group)
        if b is not None:  # the bias [M] down the rows
            problem.has_c, problem.c_sm, problem.c_sn, problem.beta = True, 1, 0, 1.0
        return gemm_ops(problem, w, cols, b, y, target)
    # A bias per group: C carries no batch offset, so each (image, group) is a product of its own
    # with the group's part of the bias.
    cg, mg = c // group, m // group
    kp, p = _prod(win.kernel), _prod(win.out)
    kg, e = cg * kp, cols.dtype.itemsize
    ops = []
    for i in range(n):
        for g in range(group):
            problem = GemmProblem(mg, p, kg, a_sm=kg, a_sk=1, b_sk=p, b_sn=1, has_c=True, c_sm=1, c_sn=0, beta=1.0)
            ops += gemm_ops(problem, Arg(w.ptr + g * mg * kg * e, (mg, kg), w.dtype),
                            Arg(cols.ptr + (i * c * kp * p + g * kg * p) * e, (kg, p), cols.dtype),
                            Arg(b.ptr + g * mg * e, (mg,), b.dtype),
                            Arg(y.ptr + (i * m * p + g * mg * p) * e, (mg, p), y.dtype), target)
    return ops


# ---- LayerNormalization, SkipLayerNormalization ------------------------------------------------

class LayerNormArgs(ctypes.Structure):
    _fields_ = [("rows", ctypes.c_longlong), ("n", ctypes.c_longlong), ("skip_rows", ctypes.c_longlong),
                ("scale_step", ctypes.c_longlong), ("bias_step", ctypes.c_longlong), ("eps", ctypes.c_float)]


def norm_step(what: str, shape: Sequence[int | None], x_shape: Sequence[int | None], axis: int) -> int | str:
    """How LayerNormalization's scale or bias runs along a row of the normalized axes: 1 (one
    value per element: its trailing extents are X's), 0 (one value for all), or why neither. Its
    leading axes, if any, do not matter: the reference reads index 0 there."""
    pad = [1] * (len(x_shape) - len(shape)) + list(shape)
    tail, x_tail = pad[axis:], list(x_shape[axis:])
    if all(d == 1 for d in tail):
        return 0
    if all(d == x or d is None or x is None for d, x in zip(tail, x_tail)) and all(d != 1 or x == 1 for d, x in
                                                                                  zip(tail, x_tail)):
        return 1
    return f"{what} of shape {list(shape)} broadcasts within the normalized axes of X {list(x_shape)}"


def _layer_norm_check(attrs, dtypes, shapes, values):
    why = _float_type(dtypes)
    if why is not None or not shapes or shapes[0] is None:
        return why
    x = shapes[0]
    if len(x) == 0:
        return None
    axis = int(attrs.get("axis", -1))
    axis = axis + len(x) if axis < 0 else axis
    for i, what in ((1, "Scale"), (2, "B")):
        s = shapes[i] if len(shapes) > i else None
        if s is not None and len(s) <= len(x) and 0 <= axis < len(x):
            step = norm_step(what, s, x, axis)
            if isinstance(step, str):
                return step
    return None


@_binding("::LayerNormalization", check=_layer_norm_check, modules=("layer_norm",))
def _layer_norm_bind(ins, outs, attrs, target):
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    y, mean, inv = (list(outs) + [None] * 3)[:3]
    dt = _dt(x.dtype, "LayerNormalization")
    if x.ndim == 0:
        raise HipepError("LayerNormalization: X must have rank >= 1, got a scalar")
    axis = int(attrs.get("axis", -1))
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis < x.ndim:
        raise HipepError(f"LayerNormalization: axis {attrs.get('axis')} is out of range for X of rank {x.ndim}")
    rows, n = _prod(x.shape[:axis]), _prod(x.shape[axis:])
    if n == 0:
        raise HipepError(f"LayerNormalization: X.shape[axis:] must hold at least one element, got "
                         f"{list(x.shape[axis:])} (X is {list(x.shape)}, axis {axis})")
    steps = []
    for what, t in (("Scale", scale), ("B", bias)):
        if t is None:
            steps.append(0)
            continue
        if t.ndim > x.ndim:
            raise HipepError(f"LayerNormalization: {what} of shape {list(t.shape)} has a higher rank than X "
                             f"{list(x.shape)}")
        step = norm_step(what, t.shape, x.shape, axis)
        if isinstance(step, str):
            raise NoKernel(step)
        steps.append(step)
    if rows == 0 or y is None:
        return []
    vec = _VEC.get(dt, 1)
    use_vec = all(s == 1 for s, t in zip(steps, (scale, bias)) if t is not None) and \
        _vec_ok([x, scale, bias, y], n, vec, x.dtype.itemsize)
    grid, block = row_config(rows, _cdiv(n, vec) if use_vec else n, target)
    params = [ptr(x), ptr(scale), ptr(bias), ptr(y), ptr(mean), ptr(inv),
              LayerNormArgs(rows, n, 0, steps[0], steps[1], float(attrs.get("epsilon", 1e-5)))]
    return [KernelOp(f"hipep_layer_norm_{dt}" + ("_vec" if use_vec else ""), grid, block, params, module="layer_norm")]


def _skip_check(attrs, dtypes, shapes, values):
    if not dtypes or dtypes[0] not in _FLOAT_TYPES:  # kernels/layer_norm.hip has bf16 entries too
        return f"element type {dtypes[0] if dtypes else '?'}"
    return None


@_binding("com.microsoft::SkipLayerNormalization", check=_skip_check, modules=("layer_norm",))
def _skip_layer_norm_bind(ins, outs, attrs, target):
    x, skip, gamma = ins[0], ins[1], ins[2]
    beta = ins[3] if len(ins) > 3 else None
    bias = ins[4] if len(ins) > 4 else None
    y, mean, inv, total = (list(outs) + [None] * 4)[:4]
    dt = _dt(x.dtype, "SkipLayerNormalization")
    if x.ndim == 0:
        raise HipepError("SkipLayerNormalization: input must have rank 2 or 3, got a scalar")
    h = int(x.shape[-1])
    rows = x.size // h if h else 0
    if rows * h == 0:
        return []
    skip_rows = skip.size // h
    if skip_rows == 0 or skip.size % h or rows % skip_rows or gamma.size != h or \
            any(t is not None and t.size != h for t in (beta, bias)):
        raise HipepError(f"SkipLayerNormalization: skip {list(skip.shape)}, gamma {list(gamma.shape)}"
                         + ("" if beta is None else f", beta {list(beta.shape)}")
                         + ("" if bias is None else f", bias {list(bias.shape)}")
                         + f" do not fit the input {list(x.shape)}")
    vec = _VEC.get(dt, 1)
    use_vec = _vec_ok([x, skip, gamma, beta, bias, y, total], h, vec, x.dtype.itemsize)
    grid, block = row_config(rows, _cdiv(h, vec) if use_vec else h, target)
    params = [ptr(x), ptr(skip), ptr(gamma), ptr(beta), ptr(bias), ptr(y), ptr(mean), ptr(inv), ptr(total),
              LayerNormArgs(rows, h, skip_rows, 1, 1, float(attrs.get("epsilon", 1e-12)))]
    return [KernelOp(f"hipep_skip_layer_norm_{dt}" + ("_vec" if use_vec else ""), grid, block, params,
                     module="layer_norm")]


# ---- Det ---------------------------------------------------------------------------------------

class DetArgs(ctypes.Structure):
    """kernels/det.hip's hipep_det_args."""
    _fields_ = [("batch", ctypes.c_longlong), ("n", ctypes.c_longlong)]


DET_THREADS = 128
DET_BLOCKS_PER_SM = 4
DET_MAX_WORKSPACE = 1 << 30  # bytes of f64 matrices in flight at most
_DET_TYPES = {"float32": "f32", "float16": "f16"}


def _det_check(attrs, dtypes, shapes, values):
    if not dtypes or dtypes[0] not in _DET_TYPES:
        return f"element type {dtypes[0] if dtypes else '?'}"
    return None


@_binding("::Det", check=_det_check, modules=("det",))
def _det_bind(ins, outs, attrs, target):
    x, y = ins[0], outs[0]
    if y is None or y.size == 0:
        return []
    n, batch = int(x.shape[-1]), int(y.size)
    region = n * n * 8
    if region > DET_MAX_WORKSPACE:
        raise NoKernel(f"Det of {n} x {n} matrices (an f64 copy of one takes over {DET_MAX_WORKSPACE >> 20} MiB)")
    blocks = max(1, min(batch, target.sm_count * DET_BLOCKS_PER_SM, DET_MAX_WORKSPACE // max(region, 1)))
    (work,) = workspace_regions(target, "Det", [blocks * region])
    return [KernelOp(f"hipep_det_{_DET_TYPES[x.dtype.name]}", (blocks, 1, 1), (DET_THREADS, 1, 1),
                     [ptr(x), ptr(y), ctypes.c_uint64(work), DetArgs(batch, n)], module="det")]
