"""Where a replayed CUDA graph fetches weights into L2 (hipep.runtime.cuda_prefetch.plan): a branch
before each run of launches that stream no weights, requesting the weights of the launches after
it up to a budget of bytes requested and not yet read; and which launches say they stream weights
(KernelOp.streams: the plan constants a GEMV reads)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from hipep.runtime import cuda_prefetch as prefetch
from hipep.runtime.cuda_prefetch import Prefetch
from hipep.runtime.gpu_binding_core import Arg, Target

MB = 1 << 20


def _layer(base: int):
    """A decode layer's launches: norm, qkv GEMV, attention, o GEMV, norm, gated GEMV, down GEMV."""
    return [(), ((base, 3 * MB),), (), ((base + 4 * MB, 2 * MB),), (), ((base + 8 * MB, 16 * MB),),
            ((base + 32 * MB, 8 * MB),)]


def test_a_branch_starts_each_run_of_latency_bound_launches_and_fetches_what_follows():
    streams = _layer(1 << 30) + _layer(2 << 30)
    plan = prefetch.plan(streams, budget=24 * MB)
    base = 1 << 30
    # the segment's start: qkv, o, gated and 3 MB of the down projection's weights (24 MB)
    assert plan[0] == Prefetch(-1, ((base, 3 * MB), (base + 4 * MB, 2 * MB), (base + 8 * MB, 16 * MB),
                                    (base + 32 * MB, 3 * MB)))
    # after the qkv GEMV read its 3 MB, 3 MB more of the down projection's; after the o GEMV, 2 MB
    assert plan[1] == Prefetch(1, ((base + 35 * MB, 3 * MB),))
    assert plan[2] == Prefetch(3, ((base + 38 * MB, 2 * MB),))
    assert [p.after for p in plan] == [-1, 1, 3, 6, 8, 10]
    requested = {}
    for p in plan:
        for a, n in p.ranges:
            requested[a] = requested.get(a, 0) + n
    # every weight byte requested exactly once, in order, none twice
    want = {a: n for s in streams for a, n in s}
    for a, n in want.items():
        got = sum(m for b, m in (x for p in plan for x in p.ranges) if a <= b < a + n)
        assert got == n, hex(a)


def test_the_budget_counts_bytes_requested_for_launches_not_yet_reached():
    streams = [(), ((0x1000, 10 * MB),), ((0x10000000, 10 * MB),), (), ((0x20000000, 10 * MB),)]
    plan = prefetch.plan(streams, budget=12 * MB)
    # at the start: the first GEMV's 10 MB and 2 MB of the second
    assert plan[0] == Prefetch(-1, ((0x1000, 10 * MB), (0x10000000, 2 * MB)))
    # before op 3 both GEMVs ran: the budget is whole again; the second GEMV's rest was passed
    assert plan[1] == Prefetch(2, ((0x20000000, 10 * MB),))
    assert len(plan) == 2


def test_no_branch_without_a_latency_bound_run_or_weights_after_it():
    assert prefetch.plan([((0x1000, MB),), ((0x2000000, MB),)], budget=64 * MB) == []  # GEMVs back to back
    assert prefetch.plan([(), (), ()], budget=64 * MB) == []
    assert prefetch.plan([((0x1000, MB),), ()], budget=64 * MB) == []  # nothing after the run
    assert prefetch.plan([(), ((0x1000, MB),)], budget=8) == []  # a budget under one aligned unit


def test_ranges_are_cut_to_the_bulk_prefetchs_16_byte_grain():
    plan = prefetch.plan([(), ((0x1003, 100),), ((0x2000, 15),)], budget=MB)
    assert plan == [Prefetch(-1, ((0x1010, 80),))]  # [0x1003, 0x1067) -> [0x1010, 0x1060); 15 bytes: none
    for p in plan:
        assert all(a % 16 == 0 and n % 16 == 0 for a, n in p.ranges)


def test_more_ranges_than_one_launch_takes_go_to_several_launches_of_one_branch():
    streams = [()] + [((0x100000 * (k + 1), 4096),) for k in range(prefetch.MAX_RANGES + 3)]
    plan = prefetch.plan(streams, budget=64 * MB)
    assert [p.after for p in plan] == [-1, -1]
    assert [len(p.ranges) for p in plan] == [prefetch.MAX_RANGES, 3]


def test_launch_params_match_the_kernels_struct_and_spread_a_thread_per_chunk():
    # hipep_prefetch_ranges: 16 pointers, 16 sizes, count, chunk
    assert ctypes.sizeof(prefetch.PrefetchRanges) == 16 * 8 * 2 + 8
    p = Prefetch(-1, ((0x1000, 3 * prefetch.CHUNK + 16), (0x900000, 16)))
    grid, block, r = prefetch.launch_params(p, sm_count=132)
    assert block == (prefetch.THREADS, 1, 1) and grid == (1, 1, 1)
    assert (r.count, r.chunk) == (2, prefetch.CHUNK)
    assert (r.ptr[0], r.bytes[0], r.ptr[1], r.bytes[1]) == (0x1000, 3 * prefetch.CHUNK + 16, 0x900000, 16)
    big = Prefetch(-1, ((0x1000, 1 << 30),))
    assert prefetch.launch_params(big, sm_count=132)[0] == (132, 1, 1)  # at most a block per SM


def _arg(ptr, shape, dtype, constant=True):
    return Arg(ptr, tuple(shape), np.dtype(dtype), None, constant)


@pytest.mark.parametrize("constant", [True, False])
def test_matmulnbits_gemv_streams_its_constant_weights_only(constant):
    from hipep.runtime import gpu_kernels as table

    k, n, bs = 2048, 512, 32
    nb = k // bs
    A = _arg(0x10000, (1, k), "float16", constant=False)
    B = _arg(0x200000, (n, nb, bs // 2), "uint8", constant)
    scales = _arg(0x400000, (n * nb,), "float16", constant)
    y = _arg(0x600000, (1, n), "float16", constant=False)
    attrs = {"K": k, "N": n, "bits": 4, "block_size": bs, "accuracy_level": 0}
    ops = table.binding_for("com.microsoft::MatMulNBits").bind([A, B, scales], [y], attrs, Target())
    (op,) = ops
    if constant:
        assert op.streams == ((0x200000, n * nb * bs // 2), (0x400000, n * nb * 2))
    else:
        assert op.streams == ()  # produced by earlier launches: nothing to fetch ahead


def test_the_float_gemv_streams_a_constant_b():
    from hipep.runtime import gpu_kernels as table

    k, n = 256, 128
    A = _arg(0x10000, (1, k), "float16", constant=False)
    W = _arg(0x200000, (k, n), "float16")
    y = _arg(0x600000, (1, n), "float16", constant=False)
    ops = table.binding_for("::MatMul").bind([A, W], [y], {}, Target())
    assert ops[0].streams == ((0x200000, k * n * 2),)
