"""cuBLASLt through ctypes: the few calls hipep needs to run a matrix product on NVIDIA GPUs.

The library comes from the nvidia-cublas wheel or a CUDA install, found by
`cuda.pathfinder.load_nvidia_dynamic_lib("cublasLt")`. A `MatmulPlan` holds one product's
descriptors and the algorithm cuBLASLt's heuristic picked for it (made once per shape, strides
and pointer alignment, on the host); `MatmulPlan.run` issues it on a stream with the workspace
the caller owns. cuBLASLt's matmul may be captured into a CUDA graph: it launches kernels only,
and the workspace address is fixed when the plan is bound.

Products are row-major in hipep and column-major in cuBLASLt: Y = A @ B (Y [m, n] row-major) is
computed as Y^T = B^T @ A^T, i.e. cuBLASLt's "A" is hipep's B and its "B" hipep's A, each read
through the layout and transpose its strides give. Accumulation is in f32 for every element
type (CUBLAS_COMPUTE_32F: no TF32, no f16 accumulation), as the own kernels do.
"""
from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict

# Values from cublasLt.h, cublas_api.h and library_types.h (stable across CUDA 11-13).
CUBLAS_STATUS_SUCCESS = 0
CUBLAS_COMPUTE_32F = 68
CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF = 0, 2, 14
CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
DESC_TRANSA, DESC_TRANSB, DESC_EPILOGUE, DESC_BIAS_POINTER = 3, 4, 7, 8
EPILOGUE_BIAS = 4
LAYOUT_BATCH_COUNT, LAYOUT_STRIDED_BATCH_OFFSET = 5, 6
PREF_MAX_WORKSPACE_BYTES = 1
PREF_MIN_ALIGNMENT_A, PREF_MIN_ALIGNMENT_B, PREF_MIN_ALIGNMENT_C, PREF_MIN_ALIGNMENT_D = 5, 6, 7, 8

MAX_WORKSPACE = 32 << 20  # what cuBLASLt's documentation suggests for Hopper
_DATA_TYPES = {"f32": CUDA_R_32F, "f16": CUDA_R_16F, "bf16": CUDA_R_16BF}
_PLANS_KEPT = 256

_void_p = ctypes.c_void_p


class HeuristicResult(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspace_size", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves_count", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


class CublasLtError(Exception):
    """A cuBLASLt call failed (the caller falls back to hipep's own kernels or reports it)."""


_LOCK = threading.Lock()
_LIB = None
_LOAD_ERROR: str | None = None
_HANDLES: dict[int, int] = {}
_PLANS: OrderedDict = OrderedDict()


def _library():
    """The loaded libcublasLt with its prototypes, or raises CublasLtError saying why not."""
    global _LIB, _LOAD_ERROR
    with _LOCK:
        if _LIB is not None:
            return _LIB
        if _LOAD_ERROR is not None:
            raise CublasLtError(_LOAD_ERROR)
        try:
            from cuda.pathfinder import load_nvidia_dynamic_lib

            loaded = load_nvidia_dynamic_lib("cublasLt")
            lib = ctypes.CDLL(loaded.abs_path) if loaded.abs_path else ctypes.CDLL("libcublasLt.so")
        except Exception as e:  # noqa: BLE001 - any failure to load means: not available
            _LOAD_ERROR = f"libcublasLt could not be loaded ({type(e).__name__}: {e})"
            raise CublasLtError(_LOAD_ERROR) from None
        i32, u64, i64, size_t = ctypes.c_int, ctypes.c_uint64, ctypes.c_int64, ctypes.c_size_t
        protos = {
            "cublasLtCreate": [ctypes.POINTER(_void_p)],
            "cublasLtMatmulDescCreate": [ctypes.POINTER(_void_p), i32, i32],
            "cublasLtMatmulDescSetAttribute": [_void_p, i32, _void_p, size_t],
            "cublasLtMatmulDescDestroy": [_void_p],
            "cublasLtMatrixLayoutCreate": [ctypes.POINTER(_void_p), i32, u64, u64, i64],
            "cublasLtMatrixLayoutSetAttribute": [_void_p, i32, _void_p, size_t],
            "cublasLtMatrixLayoutDestroy": [_void_p],
            "cublasLtMatmulPreferenceCreate": [ctypes.POINTER(_void_p)],
            "cublasLtMatmulPreferenceSetAttribute": [_void_p, i32, _void_p, size_t],
            "cublasLtMatmulPreferenceDestroy": [_void_p],
            "cublasLtMatmulAlgoGetHeuristic": [_void_p, _void_p, _void_p, _void_p, _void_p, _void_p, _void_p, i32,
                                               ctypes.POINTER(HeuristicResult), ctypes.POINTER(i32)],
            "cublasLtMatmulAlgoCheck": [_void_p, _void_p, _void_p, _void_p, _void_p, _void_p, _void_p,
                                        ctypes.POINTER(HeuristicResult)],
            "cublasLtMatmul": [_void_p, _void_p, _void_p, _void_p, _void_p, _void_p, _void_p, _void_p, _void_p,
                               _void_p, _void_p, _void_p, _void_p, _void_p, size_t, _void_p],
        }
        try:
            for name, args in protos.items():
                fn = getattr(lib, name)
                fn.argtypes, fn.restype = args, ctypes.c_int
            status_name = lib.cublasLtGetStatusName
            status_name.argtypes, status_name.restype = [ctypes.c_int], ctypes.c_char_p
        except AttributeError as e:
            _LOAD_ERROR = f"libcublasLt lacks a function hipep needs ({e})"
            raise CublasLtError(_LOAD_ERROR) from None
        _LIB = lib
        return lib


def tried() -> bool:
    """Whether this process has tried to load the library (status() answers at once then)."""
    return _LIB is not None or _LOAD_ERROR is not None


def status() -> tuple[bool, str]:
    """(True, the library's path) when cuBLASLt loads; else (False, why not)."""
    try:
        lib = _library()
    except CublasLtError as e:
        return False, str(e)
    return True, getattr(lib, "_name", "libcublasLt")


def _check(result: int, what: str) -> None:
    if result != CUBLAS_STATUS_SUCCESS:
        try:
            name = _LIB.cublasLtGetStatusName(result).decode()
        except Exception:  # noqa: BLE001
            name = f"status {result}"
        raise CublasLtError(f"{what} failed: {name}")


def _handle(device_key: int) -> int:
    """One cuBLASLt handle per device (created with that device's context current)."""
    lib = _library()
    with _LOCK:
        h = _HANDLES.get(device_key)
        if h is None:
            out = _void_p()
            _check(lib.cublasLtCreate(ctypes.byref(out)), "cublasLtCreate")
            h = _HANDLES[device_key] = out.value
        return h


def _alignment(pointer: int) -> int:
    """The largest power of two up to 256 dividing `pointer` (cuBLASLt's heuristic otherwise
    assumes 256-byte aligned operands)."""
    a = 256
    while a > 1 and pointer % a:
        a //= 2
    return a


class MatmulPlan:
    """One product D = alpha * op(A) @ op(B) + beta * C in cuBLASLt's column-major terms, its
    descriptors and the algorithm to run (kept while any bound launch refers to it)."""

    def __init__(self, lib, handle: int, dtype: int, rows: int, cols: int, depth: int,
                 a_layout: tuple, b_layout: tuple, trans_a: int, trans_b: int, batch: int,
                 strides: tuple, alignments: tuple, bias: int = 0):
        self.lib, self.handle = lib, handle
        self.desc = _void_p()
        self.layouts: list = []
        self.pref = _void_p()
        try:
            _check(lib.cublasLtMatmulDescCreate(ctypes.byref(self.desc), CUBLAS_COMPUTE_32F, CUDA_R_32F),
                   "cublasLtMatmulDescCreate")
            for attr, value in ((DESC_TRANSA, trans_a), (DESC_TRANSB, trans_b)):
                v = ctypes.c_int32(value)
                _check(lib.cublasLtMatmulDescSetAttribute(self.desc, attr, ctypes.addressof(v), ctypes.sizeof(v)),
                       "cublasLtMatmulDescSetAttribute")
            if bias:  # D += bias[row] (a row of cuBLASLt's D is a column of hipep's Y)
                epilogue, pointer = ctypes.c_uint32(EPILOGUE_BIAS), ctypes.c_uint64(bias)
                _check(lib.cublasLtMatmulDescSetAttribute(self.desc, DESC_EPILOGUE, ctypes.addressof(epilogue), 4),
                       "cublasLtMatmulDescSetAttribute(epilogue)")
                _check(lib.cublasLtMatmulDescSetAttribute(self.desc, DESC_BIAS_POINTER, ctypes.addressof(pointer), 8),
                       "cublasLtMatmulDescSetAttribute(bias pointer)")
            # A, B, C and D; C is D's layout (C, when given, is a full matrix like D).
            shapes = [a_layout, b_layout, (rows, cols, rows), (rows, cols, rows)]
            for (r, c, ld), stride in zip(shapes, strides):
                lay = _void_p()
                _check(lib.cublasLtMatrixLayoutCreate(ctypes.byref(lay), dtype, r, c, ld), "cublasLtMatrixLayoutCreate")
                self.layouts.append(lay)
                if batch > 1:
                    count, offset = ctypes.c_int32(batch), ctypes.c_int64(stride)
                    _check(lib.cublasLtMatrixLayoutSetAttribute(lay, LAYOUT_BATCH_COUNT, ctypes.addressof(count), 4),
                           "cublasLtMatrixLayoutSetAttribute(batch count)")
                    _check(lib.cublasLtMatrixLayoutSetAttribute(lay, LAYOUT_STRIDED_BATCH_OFFSET, ctypes.addressof(offset),
                                                                8), "cublasLtMatrixLayoutSetAttribute(batch stride)")
            _check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(self.pref)), "cublasLtMatmulPreferenceCreate")
            prefs = [(PREF_MAX_WORKSPACE_BYTES, ctypes.c_uint64(MAX_WORKSPACE))]
            prefs += [(attr, ctypes.c_uint32(al)) for attr, al in
                      zip((PREF_MIN_ALIGNMENT_A, PREF_MIN_ALIGNMENT_B, PREF_MIN_ALIGNMENT_C, PREF_MIN_ALIGNMENT_D),
                          alignments)]
            for attr, v in prefs:
                _check(lib.cublasLtMatmulPreferenceSetAttribute(self.pref, attr, ctypes.addressof(v), ctypes.sizeof(v)),
                       "cublasLtMatmulPreferenceSetAttribute")
            self.result = HeuristicResult()
            found = ctypes.c_int(0)
            la, lb, lc, ld_ = self.layouts
            _check(lib.cublasLtMatmulAlgoGetHeuristic(handle, self.desc, la, lb, lc, ld_, self.pref, 1,
                                                      ctypes.byref(self.result), ctypes.byref(found)),
                   "cublasLtMatmulAlgoGetHeuristic")
            if found.value < 1 or self.result.state != CUBLAS_STATUS_SUCCESS:
                raise CublasLtError("cuBLASLt has no algorithm for this product")
        except BaseException:
            self.release()
            raise
        self.workspace_size = int(self.result.workspace_size)

    def run(self, stream: int, alpha: ctypes.c_float, beta: ctypes.c_float, a: int, b: int, c: int, d: int,
            workspace: int) -> str | None:
        """Issues the product on `stream`; None, or what went wrong."""
        la, lb, lc, ld_ = self.layouts
        # The heuristic result starts with the algorithm: its address is the algorithm's.
        status_code = self.lib.cublasLtMatmul(self.handle, self.desc, ctypes.addressof(alpha), a, la, b, lb,
                                              ctypes.addressof(beta), c, lc, d, ld_, ctypes.addressof(self.result),
                                              workspace or None, self.workspace_size if workspace else 0, stream)
        if status_code == CUBLAS_STATUS_SUCCESS:
            return None
        try:
            name = self.lib.cublasLtGetStatusName(status_code).decode()
        except Exception:  # noqa: BLE001
            name = f"status {status_code}"
        return f"cublasLtMatmul failed: {name}"

    def release(self, _void_p=_void_p) -> None:
        # (_void_p bound here: at interpreter exit the module's globals may already be None)
        lib = self.lib
        try:
            if self.pref:
                lib.cublasLtMatmulPreferenceDestroy(self.pref)
            for lay in self.layouts:
                lib.cublasLtMatrixLayoutDestroy(lay)
            if self.desc:
                lib.cublasLtMatmulDescDestroy(self.desc)
        except Exception:  # noqa: BLE001 - at interpreter exit the library may be gone
            pass
        self.pref, self.layouts, self.desc = _void_p(), [], _void_p()

    def __del__(self):
        self.release()


def column_major_operands(m: int, n: int, k: int, a_sm: int, a_sk: int, b_sk: int, b_sn: int):
    """cuBLASLt's A and B for row-major Y [m, n] = A @ B: ((rows, cols, ld), op) of each stored
    column-major matrix. Its A is hipep's B seen column-major, B'(j, l) = B(l, j) (n x k after
    op); its B is hipep's A, A'(l, i) = A(i, l) (k x m after op); the output is Y^T, n x m, ld n."""
    if b_sn == 1:
        lt_a, trans_a = (n, k, b_sk), CUBLAS_OP_N  # stored n x k, ld b_sk
    else:
        lt_a, trans_a = (k, n, b_sn), CUBLAS_OP_T  # stored k x n, ld b_sn, transposed
    if a_sk == 1:
        lt_b, trans_b = (k, m, a_sm), CUBLAS_OP_N
    else:
        lt_b, trans_b = (m, k, a_sk), CUBLAS_OP_T
    # A degenerate ld (a single row or column) must still be at least the row count.
    lt_a = (lt_a[0], lt_a[1], max(lt_a[2], lt_a[0], 1))
    lt_b = (lt_b[0], lt_b[1], max(lt_b[2], lt_b[0], 1))
    return lt_a, trans_a, lt_b, trans_b


def matmul_plan(device_key: int, dtype: str, m: int, n: int, k: int, a_sm: int, a_sk: int, b_sk: int, b_sn: int,
                batch: int, a_batch: int, b_batch: int, pointers: tuple, bias: int = 0) -> MatmulPlan:
    """The plan for Y[z] = A[z] @ B[z] (+ bias[j]) (row-major Y [m, n], z < batch; A(i, l) at
    i * a_sm + l * a_sk and B(l, j) at l * b_sk + j * b_sn, each one of them 1; batch strides
    a_batch/b_batch, 0: broadcast) with operands at `pointers` (A, B, Y: only their alignment
    matters); `bias`: the address of n values added to every row (cuBLASLt's bias epilogue; the
    descriptor holds it, so it is part of the plan). Raises CublasLtError when cuBLASLt cannot
    run it."""
    lib = _library()
    handle = _handle(device_key)
    lt_a, trans_a, lt_b, trans_b = column_major_operands(m, n, k, a_sm, a_sk, b_sk, b_sn)
    alignments = (_alignment(pointers[1]), _alignment(pointers[0]), _alignment(pointers[2]), _alignment(pointers[2]))
    strides = (b_batch, a_batch, m * n, m * n)
    key = (device_key, dtype, m, n, k, lt_a, lt_b, trans_a, trans_b, batch, strides, alignments, bias)
    with _LOCK:
        plan = _PLANS.get(key)
        if plan is not None:
            _PLANS.move_to_end(key)
            return plan
    plan = MatmulPlan(lib, handle, _DATA_TYPES[dtype], n, m, k, lt_a, lt_b, trans_a, trans_b, batch, strides,
                      alignments, bias)
    with _LOCK:
        _PLANS[key] = plan
        while len(_PLANS) > _PLANS_KEPT:
            _PLANS.popitem(last=False)  # bound launches keep their own reference
    from . import cublaslt_warm  # (it imports this module)

    # the other prompt lengths' kernels of this product, loaded in the background
    cublaslt_warm.plan_made(device_key, dtype, n, k, (a_sm, a_sk, b_sk, b_sn), batch, alignments, bias, plan.result)
    return plan
