"""cuBLASLt's kernels loaded before the prompts that need them, by a background worker.

cuBLASLt's kernels load the first time they run (CUDA's lazy module loading): 1.6-3.5 ms a
kernel on the H100, measured for the ~1.1B model's products (benchmarks/results/
2026-12-06-prompt-step-host-study-h100.md). Its heuristic picks another kernel for many prompt
lengths, so early in a process a prompt of a length not seen before waited 5-15 ms on them,
a third of that step's host time. (A length's first run now takes MatMulNBits' tensor-core GEMM
instead, gpu_quant.GEMM_TC_FIRST_RUN_ROWS: the wait moved to the length's second run, the one
captured into a CUDA graph.)

When a product's family (element type, N, K, operand layouts, bias epilogue, alignment) gets
its first plan (cublaslt.matmul_plan), a worker thread asks the heuristic for that family at
prompt lengths from 9 to 4096 (WARM_ROWS) and runs each algorithm no plan of the process has
picked once, on a small problem of its own (at most WARM_M rows and WARM_N columns, the
algorithm confirmed for it by cublasLtMatmulAlgoCheck) in memory and on a stream of its own.
A later prompt's plan then finds its kernel loaded. The worker uses its own cuBLASLt handle and
makes no call that synchronizes the device (stream-ordered allocation).

The worker is off unless HIPEP_CUBLASLT_WARM=1 (tests/gpu/test_gpu_cublaslt_warm.py is its test). On an H100
it cut cuBLASLt's share of a new prompt length from 6-13 ms to about 1 ms, but the two lengths right after
the first prompt took 26 ms longer (benchmarks/results/2026-12-06-gqa-prefill-tc-65221b1-h100.md), which is
not explained yet.
"""
from __future__ import annotations

import atexit
import ctypes
import logging
import os
import threading

from . import cublaslt

log = logging.getLogger("hipep")

WARM_ENV = "HIPEP_CUBLASLT_WARM"
# Prompt lengths the heuristic is asked about: every one up to 64, then 5 % apart up to 4096.
WARM_ROWS = tuple(sorted(set(range(9, 65)) | {int(64 * 1.05 ** i) for i in range(86)}))
WARM_M, WARM_N = 64, 1024  # the warming problem's largest rows and columns (K is the family's)
_ALIGN = 256

_LOCK = threading.Lock()
_FAMILIES: set = set()
_QUEUE: list = []
_SEEN: set = set()     # algorithms some plan of the process picked (their kernels load when it runs)
_WARMED: set = set()   # algorithms the worker ran
_WORKER: threading.Thread | None = None
_STOP = threading.Event()
_HANDLES: dict = {}


def enabled() -> bool:
    """HIPEP_CUBLASLT_WARM=1 (see the module's docstring)."""
    return os.environ.get(WARM_ENV, "0").strip() == "1"


def algorithm_key(result: cublaslt.HeuristicResult) -> bytes:
    return bytes(result.algo)


def plan_made(device_key: int, dtype: str, n: int, k: int, layout: tuple, batch: int, alignments: tuple, bias: int,
              result: cublaslt.HeuristicResult) -> None:
    """A new plan (cublaslt.matmul_plan): its algorithm is seen; a family seen for the first time
    is queued for the worker. `layout`: (a_sm, a_sk, b_sk, b_sn) as matmul_plan takes them."""
    with _LOCK:
        _SEEN.add(algorithm_key(result))
    if batch != 1 or not enabled():
        return
    family = (device_key, dtype, n, k, layout, alignments, bool(bias))
    try:
        from cuda.bindings import driver

        err, ctx = driver.cuCtxGetCurrent()
        if err != driver.CUresult.CUDA_SUCCESS or not int(ctx):
            return
    except Exception:  # noqa: BLE001 - no driver: nothing to warm
        return
    global _WORKER
    with _LOCK:
        if family in _FAMILIES:
            return
        _FAMILIES.add(family)
        _QUEUE.append((ctx, family))
        if _WORKER is None or not _WORKER.is_alive():
            _WORKER = threading.Thread(target=_work, name="hipep-cublaslt-warm", daemon=True)
            _WORKER.start()


def wait(timeout: float | None = None) -> bool:
    """Waits for the worker to finish its queue; False where `timeout` came first."""
    worker = _WORKER
    if worker is not None:
        worker.join(timeout)
        return not worker.is_alive()
    return True


def warmed() -> frozenset:
    """The algorithms (algorithm_key) the worker ran."""
    with _LOCK:
        return frozenset(_WARMED)


def _stop() -> None:
    _STOP.set()
    wait(10.0)


atexit.register(_stop)


def _work() -> None:
    global _WORKER
    while not _STOP.is_set():
        with _LOCK:
            if not _QUEUE:
                # (under the lock: a family queued after this starts a worker of its own)
                _WORKER = None
                return
            ctx, family = _QUEUE.pop(0)
        try:
            _warm_family(ctx, family)
        except Exception as e:  # noqa: BLE001 - warming is an optimization: a failure only costs time later
            log.debug("hipep: warming cuBLASLt's kernels for %s failed: %s", family, e)


def _warm_family(ctx, family) -> None:
    from cuda.bindings import driver as d

    device_key, dtype, n, k, (a_sm, a_sk, b_sk, b_sn), alignments, has_bias = family
    lib = cublaslt._library()
    d.cuCtxSetCurrent(ctx)
    handle = _HANDLES.get(device_key)
    if handle is None:
        out = ctypes.c_void_p()
        cublaslt._check(lib.cublasLtCreate(ctypes.byref(out)), "cublasLtCreate")
        handle = _HANDLES[device_key] = out.value
    dt = cublaslt._DATA_TYPES[dtype]
    picks = {}
    for m in WARM_ROWS:
        if _STOP.is_set():
            return
        lt_a, trans_a, lt_b, trans_b = cublaslt.column_major_operands(m, n, k, a_sm, a_sk, b_sk, b_sn)
        try:
            plan = cublaslt.MatmulPlan(lib, handle, dt, n, m, k, lt_a, lt_b, trans_a, trans_b, 1, (0, 0, m * n, m * n),
                                       alignments, _ALIGN if has_bias else 0)
        except cublaslt.CublasLtError:
            continue
        key = algorithm_key(plan.result)
        plan.release()
        with _LOCK:
            new = key not in _SEEN and key not in picks
        if new:
            picks[key] = m
    if not picks:
        return
    err, stream = d.cuStreamCreate(d.CUstream_flags.CU_STREAM_NON_BLOCKING)
    if err != d.CUresult.CUDA_SUCCESS:
        return
    try:
        _run_picks(d, lib, handle, dt, dtype, n, k, (a_sm, a_sk, b_sk, b_sn), alignments, has_bias, picks, stream)
    finally:
        d.cuStreamSynchronize(stream)
        d.cuStreamDestroy(stream)


def _run_picks(d, lib, handle, dt, dtype, n, k, layout, alignments, has_bias, picks, stream) -> None:
    """Runs each picked algorithm once on a WARM_M x WARM_N problem (its kernel loaded)."""
    a_sm, a_sk, b_sk, b_sn = layout
    m2, n2 = WARM_M, min(n, WARM_N)
    itemsize = {"f32": 4, "f16": 2, "bf16": 2}[dtype]
    sizes = [m2 * k * itemsize, n2 * k * itemsize, m2 * n2 * itemsize, n2 * itemsize, cublaslt.MAX_WORKSPACE]
    sizes = [-(-s // _ALIGN) * _ALIGN for s in sizes]
    err, base = d.cuMemAllocAsync(sum(sizes), stream)
    if err != d.CUresult.CUDA_SUCCESS:
        return
    base = int(base)
    try:
        ptrs, at = [], base
        for s in sizes:
            ptrs.append(at)
            at += s
        a, b, y, bias, ws = ptrs
        # the small problem's own strides: A [m2, k] and B as the family lays them out, n2 columns
        a_sm2 = k if a_sk == 1 else a_sm
        a_sk2 = 1 if a_sk == 1 else m2
        b_sk2, b_sn2 = (1, k) if b_sk == 1 else (n2, 1)
        lt_a, trans_a, lt_b, trans_b = cublaslt.column_major_operands(m2, n2, k, a_sm2, a_sk2, b_sk2, b_sn2)
        plan = cublaslt.MatmulPlan(lib, handle, dt, n2, m2, k, lt_a, lt_b, trans_a, trans_b, 1,
                                   (0, 0, m2 * n2, m2 * n2), alignments, bias if has_bias else 0)
        alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
        try:
            for key, m in picks.items():
                if _STOP.is_set():
                    return
                picked, checked = cublaslt.HeuristicResult(), cublaslt.HeuristicResult()
                ctypes.memmove(ctypes.addressof(picked), key, len(key))  # the algorithm leads the result
                la, lb, lc, ld_ = plan.layouts
                status = lib.cublasLtMatmulAlgoCheck(handle, plan.desc, la, lb, lc, ld_, ctypes.addressof(picked),
                                                     ctypes.byref(checked))
                if (status != cublaslt.CUBLAS_STATUS_SUCCESS or checked.state != cublaslt.CUBLAS_STATUS_SUCCESS
                        or checked.workspace_size > cublaslt.MAX_WORKSPACE):
                    log.debug("hipep: cuBLASLt's algorithm for %d rows does not run the warming problem", m)
                    continue
                ctypes.memmove(ctypes.addressof(plan.result), key, len(key))
                plan.workspace_size = int(checked.workspace_size)
                why = plan.run(int(stream), alpha, beta, b, a, y, y, ws)
                if why is None:
                    with _LOCK:
                        _WARMED.add(key)
                        _SEEN.add(key)
        finally:
            plan.release()
    finally:
        d.cuMemFreeAsync(base, stream)
