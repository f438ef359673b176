"""Process-wide counters (plain data), read through `hipep.stats()`.

Events that happen a few times per session bump the shared counters under a lock. Per-run counts
(launches, kernel time, ...) go to a `Tally` owned by whatever runs (one per concurrent run, so
only one thread writes it): a run adds to plain ints, and `snapshot` sums the live tallies in. A
tally's counts join the shared ones when it is dropped.
"""
from __future__ import annotations

import threading
import weakref
from collections import Counter

_lock = threading.Lock()
_counters: Counter = Counter()
_tallies: "weakref.WeakSet[Tally]" = weakref.WeakSet()


def bump(name: str, by: int = 1) -> None:
    with _lock:
        _counters[name] += by


def bump_many(**amounts: int) -> None:
    with _lock:
        for name, by in amounts.items():
            if by:
                _counters[name] += by


class Tally:
    """Per-run counters written by one thread at a time without a lock: `values` is a list, in
    the order of FIELDS (kernel time in nanoseconds), that the finalizer can merge on its own."""

    FIELDS = ("launches", "specializations", "specialization_hits", "host_reads", "kernel_ns",
              "direct_launches", "graph_launches", "graph_node_updates", "run_ns", "sync_wait_ns",
              "native_runs")
    (LAUNCHES, SPECIALIZATIONS, HITS, HOST_READS, KERNEL_NS, DIRECT, GRAPHS, NODE_UPDATES, RUN_NS,
     SYNC_WAIT_NS, NATIVE_RUNS) = range(11)

    def __init__(self, values=None):
        # `values`: storage native code adds to (hipep.runtime.native_replay's int64 array)
        self.values = [0] * len(self.FIELDS) if values is None else values
        with _lock:
            _tallies.add(self)
        weakref.finalize(self, _merge, self.values)


def _counts(values) -> dict[str, int]:
    out = {name: int(v) for name, v in zip(Tally.FIELDS, values)}
    for name in ("kernel", "run", "sync_wait"):
        out[f"{name}_us"] = out.pop(f"{name}_ns") // 1000
    return out


def _merge(values) -> None:
    """A dropped tally's counts become shared ones."""
    bump_many(**_counts(values))


def snapshot() -> dict[str, int]:
    with _lock:
        out = Counter(_counters)
        tallies = list(_tallies)
    for t in tallies:
        for name, v in _counts(t.values).items():
            if v:
                out[name] += v
    if out["native_runs"]:  # runs Compute replayed without calling Python are runs too
        out["runs"] += out["native_runs"]
    return dict(out)
