"""ReverseSequence's kernel (kernels/indexing.hip) on the CPU: g++ compiles the unchanged source
against the host stand-in for the CUDA headers and the launches the binding gives run over host
memory, against the registry's reference (hipep.ops.indexing, which follows ORT's CPU EP), for
both axis orders, every element size, lengths of 0 and of the whole time axis; a length out of
range fills the fault record with an error naming the node, and that entry is copied as it is.
Skipped without g++."""
from __future__ import annotations

import shutil

import ml_dtypes
import numpy as np
import pytest

from hipep.ops.registry import OUTPUT_COUNT, SINCE_VERSION
from hipep.runtime import gpu_faults as gf
from hipep.runtime import gpu_kernels as gk

from unit.host_kernels import HostMemory, compile_module, launch, run_on_host

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    return {"warp": 32, "indexing": compile_module(tmp_path_factory.mktemp("reverse_sequence"), "indexing", 32)}


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.int64, np.bool_, np.uint8])
@pytest.mark.parametrize("shape,batch_axis,time_axis", [((5, 3), 1, 0), ((3, 5), 0, 1), ((4, 3, 2, 3), 1, 0),
                                                          ((3, 6, 4), 0, 1)])
def test_reverse_sequence_follows_the_reference(libraries, dtype, shape, batch_axis, time_axis):
    rng = np.random.default_rng(sum(shape))
    x = rng.integers(0, 100, shape).astype(dtype)
    steps, batch = shape[time_axis], shape[batch_axis]
    lens = rng.integers(0, steps + 1, batch).astype(np.int64)
    lens[0], lens[-1] = 0, steps  # nothing reversed, and all of it
    (got,), (want,), ops = run_on_host(libraries, "::ReverseSequence", [x, lens],
                                       {"batch_axis": batch_axis, "time_axis": time_axis}, sm_count=1)
    assert [o.entry for o in ops] == [f"hipep_reverse_sequence_w{np.dtype(dtype).itemsize}"]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("bad", [4, -1])
def test_a_length_out_of_range_is_reported_for_the_node(libraries, bad):
    x = np.arange(24, dtype=np.float32).reshape(3, 2, 4)  # time 3, batch 2 (batch_axis 1, time_axis 0)
    lens = np.array([2, bad], np.int64)
    mem = HostMemory()
    record = mem.put(np.zeros(gf.FAULT_RECORD_BYTES, np.uint8))[0].ptr
    sites = gf.FaultSites()
    label = "node 'rs' (ReverseSequence)"
    ins = [mem.put(v)[0] for v in (x, lens)]
    out, view = mem.put(np.full(x.shape, -1, np.float32))
    target = gk.Target(sm_count=1, warp_size=32, fault=lambda what: gf.FaultSite(record, sites.site(label, what)))
    attrs = {"batch_axis": 1, "time_axis": 0, OUTPUT_COUNT: 1, SINCE_VERSION: 10}
    for op in gk.binding_for("::ReverseSequence").bind(ins, [out], attrs, target):
        launch(libraries["indexing"], op)
    error = gf.take_fault(record, sites)
    assert isinstance(error, gf.RangeFault)
    assert str(error) == (f"{label}: input 1 (sequence_lens): sequence length {bad} is out of range [0, 3] (the time "
                          f"axis' extent)")
    want = x.copy()
    want[:2, 0] = x[1::-1, 0]  # entry 0 reversed over its 2 steps; entry 1 as it is
    np.testing.assert_array_equal(view, want)
