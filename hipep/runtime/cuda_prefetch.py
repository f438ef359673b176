"""Where a replayed CUDA graph fetches weights into L2 ahead of the launches that read them
(kernels/prefetch.hip).

A decode step alternates launches that stream the session's weights at memory bandwidth (the
GEMVs: KernelOp.streams) with launches bound by latency (attention over a few hundred cache rows,
the norms of one row), during which memory sits idle: on the H200, a 1.1B model's layer spends
about a third of its kernel time in those. Where such a run of launches begins, the captured graph
forks a branch that requests the weights of the launches after it into L2, up to a budget of bytes
requested and not yet read, so the GEMVs that follow read from L2 and memory works while the
latency-bound kernels run. The branch depends on the launch before the run (so it does not compete
with that launch's reads) and nothing waits for it but the graph's end; its kernel only issues
requests and exits.

`plan` is plain Python over the launches' ranges (tests check it without a GPU); the device turns
its result into launches (`launch_params`) and the capture places them (cuda_graphs.GraphReplay).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Sequence

MAX_RANGES = 16  # kernels/prefetch.hip: HIPEP_PREFETCH_MAX
ALIGN = 16  # the bulk prefetch's address and size granularity
CHUNK = 8192  # bytes one request covers (a thread issues one request per chunk it owns)
THREADS = 32  # a block is one warp: the branch's blocks spread over the multiprocessors


class PrefetchRanges(ctypes.Structure):
    """kernels/prefetch.hip's hipep_prefetch_ranges."""
    _fields_ = [("ptr", ctypes.c_uint64 * MAX_RANGES), ("bytes", ctypes.c_uint64 * MAX_RANGES),
                ("count", ctypes.c_uint32), ("chunk", ctypes.c_uint32)]


@dataclass(frozen=True)
class Prefetch:
    """One branch's requests: `after` is the index of the op whose completion starts it (-1: the
    segment's start), `ranges` the (address, bytes) to fetch, at most MAX_RANGES, each aligned."""
    after: int
    ranges: tuple


def _aligned(address: int, nbytes: int) -> tuple[int, int] | None:
    """The part of [address, address + nbytes) the bulk prefetch can name: 16-byte aligned ends
    inside the range (a few bytes at either end are left to the launch itself)."""
    start = -(-address // ALIGN) * ALIGN
    end = (address + nbytes) // ALIGN * ALIGN
    return (start, end - start) if end > start else None


def plan(streams: Sequence[tuple], budget: int) -> list[Prefetch]:
    """The branches for a segment whose ops read `streams[i]` ((address, bytes), ...; () for an
    op that streams no weights), in issue order. A branch starts before each op that streams
    nothing and follows one that does (or starts the segment): it requests the ranges of the ops
    after it, in order, that no earlier branch requested, while the bytes requested for ops not
    yet reached stay within `budget` (a range is cut where the budget ends, and the next branch
    goes on from there)."""
    queue = [(i, r) for i, ranges in enumerate(streams) for a, n in ranges
             if (r := _aligned(int(a), int(n))) is not None]
    out: list[Prefetch] = []
    requested: list[tuple[int, int]] = []  # (op index, bytes) requested so far
    at, done = 0, 0  # the next queue entry to request, and bytes of it already requested
    for i, ranges in enumerate(streams):
        if ranges or (i > 0 and not streams[i - 1]):
            continue  # not the start of a run of launches that leave memory idle
        while at < len(queue) and queue[at][0] <= i:
            at, done = at + 1, 0  # reached before this branch could help
        left = budget - sum(n for op, n in requested if op > i)
        taken: list[tuple[int, int]] = []
        while at < len(queue) and left >= ALIGN:
            op, (address, nbytes) = queue[at]
            take = min(nbytes - done, left // ALIGN * ALIGN)
            taken.append((address + done, take))
            requested.append((op, take))
            left -= take
            done += take
            if done == nbytes:
                at, done = at + 1, 0
        for k in range(0, len(taken), MAX_RANGES):
            out.append(Prefetch(i - 1, tuple(taken[k:k + MAX_RANGES])))
    return out


def launch_params(p: Prefetch, sm_count: int) -> tuple[tuple, tuple, PrefetchRanges]:
    """(grid, block, parameter) of the branch's hipep_l2_prefetch launch: a thread per chunk of
    the longest range, at most a warp per multiprocessor."""
    r = PrefetchRanges()
    for k, (address, nbytes) in enumerate(p.ranges):
        r.ptr[k], r.bytes[k] = address, nbytes
    r.count, r.chunk = len(p.ranges), CHUNK
    chunks = max(-(-n // CHUNK) for _, n in p.ranges)
    blocks = max(1, min(sm_count, -(-chunks // THREADS)))
    return (blocks, 1, 1), (THREADS, 1, 1), r
