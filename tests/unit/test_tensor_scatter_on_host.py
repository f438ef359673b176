"""TensorScatter's GPU launches (hipep/runtime/gpu_indexing.py, kernels/indexing.hip) on the CPU: g++
compiles the unchanged kernel source against the host stand-in for the CUDA headers, the launches the
binding gives run over host memory (past_cache's copy as a memmove), and present_cache is compared
bit for bit with the registry reference (hipep/ops/indexing.py). Every element size and the widened
words, sequence axes in the middle and last, both modes with and without write_indices, and
present_cache in past_cache's own buffer (a decode step in place). A write index out of range fills
the stream's fault record, which reads as an error naming the node; its batch entry keeps past's
rows and nothing is written outside the cache. Skipped without g++."""
from __future__ import annotations

import ctypes
import shutil

import ml_dtypes
import numpy as np
import pytest

from hipep.errors import HipepError
from hipep.ops.registry import OUTPUT_COUNT, SINCE_VERSION
from hipep.runtime import gpu_faults as gf
from hipep.runtime import gpu_kernels as gk

from unit.host_kernels import HostMemory, compile_module, launch, run_on_host

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")

TS = "::TensorScatter"
SM = 1  # small launches: each GPU thread of a block is a host thread


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    return {"warp": 32, "indexing": compile_module(tmp_path_factory.mktemp("tensor_scatter"), "indexing", 32)}


def _values(rng, shape, dtype):
    if np.dtype(dtype) == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(0, 100, shape).astype(dtype)


def _entries(ops):
    return [o.entry for o in ops if isinstance(o, gk.KernelOp)]


def _same_bits(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


@pytest.mark.parametrize("dtype,word", [(np.float32, 16), (np.float16, 16), (ml_dtypes.bfloat16, 16), (np.int64, 16),
                                        (np.uint8, 8), (np.bool_, 8), (np.float64, 16), (np.int8, 8)])
@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_rows_land_at_the_write_indices(libraries, dtype, word, mode):
    """[batch 3, heads 2, cache 9, head 8]: rows of 8 elements, moved as the widest word they allow."""
    rng = np.random.default_rng(1)
    past, update = _values(rng, (3, 2, 9, 8), dtype), _values(rng, (3, 2, 4, 8), dtype)
    starts = np.array([0, 5, 2] if mode == "linear" else [7, 30, 8], np.int64)
    (got,), (want,), ops = run_on_host(libraries, TS, [past, update, starts], {"mode": mode}, sm_count=SM)
    _same_bits(got, want)
    assert _entries(ops) == [f"hipep_tensor_scatter_w{word}"]
    assert isinstance(ops[0], gk.CopyOp)  # past_cache into present_cache first


@pytest.mark.parametrize("past_shape,update_shape,axis", [
    ((2, 7, 3, 5), (2, 3, 3, 5), 1),  # the sequence axis next to batch, rows of 15 elements
    ((2, 3, 5, 7), (2, 3, 5, 2), -1),  # the last axis: one element a row
    ((4, 6), (4, 6), 1),  # an update as long as the cache
    ((2, 3, 4, 6, 5), (2, 3, 4, 1, 5), -2),  # several axes between batch and the sequence axis
])
@pytest.mark.parametrize("with_indices", [True, False])
def test_sequence_axes_and_omitted_write_indices(libraries, past_shape, update_shape, axis, with_indices):
    rng = np.random.default_rng(2)
    past, update = _values(rng, past_shape, np.float16), _values(rng, update_shape, np.float16)
    seq, max_seq = update_shape[axis], past_shape[axis]
    inputs = [past, update]
    if with_indices:
        inputs.append(rng.integers(0, max_seq - seq + 1, past_shape[0]).astype(np.int64))
    for mode in ("linear", "circular"):
        (got,), (want,), _ = run_on_host(libraries, TS, inputs, {"mode": mode, "axis": axis}, sm_count=SM)
        _same_bits(got, want)


def test_misaligned_rows_move_element_by_element(libraries):
    rng = np.random.default_rng(3)
    past, update = _values(rng, (2, 9, 6), np.float32), _values(rng, (2, 2, 6), np.float32)
    starts = np.array([3, 7], np.int64)
    (got,), (want,), ops = run_on_host(libraries, TS, [past, update, starts], {"axis": 1}, sm_count=SM,
                                       offsets={1: 4})
    _same_bits(got, want)
    assert _entries(ops) == ["hipep_tensor_scatter_w4"]


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_present_in_past_buffer_updates_the_cache_in_place(libraries, mode):
    """ORT's in-place pair (the registry's `inplace`): present_cache is past_cache's buffer, no copy
    is issued, and the buffer ends as the reference's present_cache."""
    rng = np.random.default_rng(4)
    past, update = _values(rng, (2, 4, 10, 16), np.float16), _values(rng, (2, 4, 3, 16), np.float16)
    starts = np.array([7, 6] if mode == "linear" else [9, 18], np.int64)
    (got,), (want,), ops = run_on_host(libraries, TS, [past.copy(), update, starts], {"mode": mode}, sm_count=SM,
                                       alias={0: 0})
    _same_bits(got, want)
    assert not any(isinstance(o, gk.CopyOp) for o in ops)


def test_binding_checks_claim_and_shapes():
    f16 = "float16"
    assert gk.kernel_reason(TS, {"mode": "linear", "axis": -2}, [f16, f16, "int64"]) is None
    assert gk.kernel_reason(TS, {"mode": "circular", "axis": 1}, ["bfloat16", "bfloat16"]) is None
    assert "mode 'ring'" in gk.kernel_reason(TS, {"mode": "ring", "axis": 1}, [f16, f16])
    assert "write_indices of type int32" in gk.kernel_reason(TS, {"mode": "linear", "axis": 1}, [f16, f16, "int32"])
    assert "element type" in gk.kernel_reason(TS, {"mode": "linear", "axis": 1}, ["complex128", "complex128"])


@pytest.mark.parametrize("past_shape,update_shape,idx_shape,axis,message", [
    ((2, 4, 8), (2, 4, 9), (2,), -1, r"sequence_length 9 exceeds past_cache's max_sequence_length 8"),
    ((2, 4, 8), (2, 3, 2), (2,), -1, r"must match past_cache \[2, 4, 8\] on every axis but the sequence axis 2"),
    ((2, 4, 8), (2, 4, 2), (3,), -1, r"write_indices must be \[batch\] = \[2\], got \[3\]"),
    ((2, 4, 8), (2, 4, 2), (2,), 0, r"axis 0 is the batch axis"),
])
def test_bad_shapes_are_refused_by_the_binding(past_shape, update_shape, idx_shape, axis, message):
    args = [gk.Arg(64, past_shape, np.dtype(np.float32)), gk.Arg(4096, update_shape, np.dtype(np.float32)),
            gk.Arg(8192, idx_shape, np.dtype(np.int64))]
    out = gk.Arg(16384, past_shape, np.dtype(np.float32))
    attrs = {"mode": "linear", "axis": axis, OUTPUT_COUNT: 1, SINCE_VERSION: 24}
    with pytest.raises(HipepError, match=message):
        gk.binding_for(TS).bind(args, [out], attrs, gk.Target())


# ---- write indices out of range: the fault record --------------------------------------------------

@pytest.mark.parametrize("mode,starts,bad,bound", [
    ("linear", [2, 7], 7, 6),  # 7 + 3 rows > 9
    ("linear", [-1, 0], -1, 6),
    ("circular", [4, -3], -3, -1),  # circular wraps any index but a negative one
])
@pytest.mark.parametrize("in_place", [False, True])
def test_a_write_index_out_of_range_is_reported_for_the_node(libraries, mode, starts, bad, bound, in_place):
    rng = np.random.default_rng(5)
    past, update = _values(rng, (2, 2, 9, 4), np.float32), _values(rng, (2, 2, 3, 4), np.float32)
    starts = np.array(starts, np.int64)
    mem = HostMemory()
    record = mem.put(np.zeros(gf.FAULT_RECORD_BYTES, np.uint8))[0].ptr
    sites = gf.FaultSites()
    label = "node 'cache_update' (TensorScatter)"
    guard = 8
    cache_full, cache_view = mem.put(np.concatenate([np.full(guard, -7, np.float32), past.reshape(-1),
                                                     np.full(guard, -7, np.float32)]))
    cache = gk.Arg(cache_full.ptr + guard * 4, past.shape, past.dtype)
    src = cache if in_place else mem.put(past)[0]
    ins = [src, mem.put(update)[0], mem.put(starts)[0]]
    if not in_place:
        cache_view[guard:-guard] = 99  # present's buffer holds nothing of past until the copy
    target = gk.Target(sm_count=SM, warp_size=32, fault=lambda w: gf.FaultSite(record, sites.site(label, w)))
    attrs = {"mode": mode, "axis": -2, OUTPUT_COUNT: 1, SINCE_VERSION: 24}
    for op in gk.binding_for(TS).bind(ins, [cache], attrs, target):
        if isinstance(op, gk.CopyOp):
            ctypes.memmove(op.dst, op.src, op.nbytes)
        else:
            launch(libraries[op.module], op)
    error = gf.take_fault(record, sites)
    assert isinstance(error, gf.IndexFault)
    where = f"{label}: input 2 (write_indices) in {mode} mode, sequence_length 3 into max_sequence_length 9"
    if bad < 0:
        assert str(error) == f"{where}: write index {bad} is negative"
    else:
        assert str(error) == (f"{where}: write index {bad} is out of range [0, {bound}]: write index + "
                              f"sequence_length must not exceed max_sequence_length")
    assert gf.take_fault(record, sites) is None
    assert (cache_view[:guard] == -7).all() and (cache_view[-guard:] == -7).all()
    got = cache_view[guard:-guard].reshape(past.shape)
    good = 1 - int(np.flatnonzero(starts == bad)[0])
    np.testing.assert_array_equal(got[1 - good], past[1 - good])  # the bad entry keeps past's rows
    rows = (starts[good] + np.arange(3)) % 9
    want = past[good].copy()
    want[:, rows] = update[good]
    np.testing.assert_array_equal(got[good], want)
