"""Pools: one allocation per memory space, holding the plan's slots at aligned offsets.

A slot is an (offset, capacity) range of its pool. Capacities start at zero and grow as runs need
more: a grown slot moves to a new range at the end of the allocation (which doubles when full),
and `compact` packs the slots again between runs. When a grow moves bytes queued work may use,
the caller syncs first and re-creates its views from the pool afterwards.
"""
from __future__ import annotations

import re
from typing import Any

from .device import Device

ALIGN = 256  # slot offsets and capacities: a multiple of every dtype's size, as a GPU allocator


def round_up(n: int, to: int = ALIGN) -> int:
    return -(-n // to) * to


def byte_size(nbytes: int) -> str:
    """A byte count as an error message gives it."""
    return f"{nbytes} bytes ({nbytes / 2**30:.1f} GiB)" if nbytes >= 2**30 else f"{nbytes} bytes"


def allocation_failure(e: BaseException) -> str:
    """Why an allocation failed, for an error that names what wanted it: numpy's MemoryError
    and ValueError, ONNX Runtime's allocator (a RuntimeError quoting its source), the driver's
    out of memory (a HipepError)."""
    if isinstance(e, MemoryError):
        return "out of memory"
    text = str(e)
    m = re.search(r"Failed to allocate memory[^\n]*", text)
    return f"ONNX Runtime's allocator: {m.group(0)}" if m else text


class Pool:
    def __init__(self, device: Device, space: str, n_slots: int):
        self.device = device
        self.space = space
        self.capacity = [0] * n_slots
        self.offset = [0] * n_slots
        self.memory: Any = device.alloc(space, 0)
        self.nbytes = 0  # size of the allocation
        self.used = 0  # bytes handed out (slots that grew leave their old range behind)
        self.relayouts = 0  # how often the allocation itself was replaced (tests and stats read it)

    def view(self, slot: int, dtype, shape):
        return self.device.view(self.memory, self.offset[slot], dtype, shape)

    def fits(self, slot: int, nbytes: int) -> bool:
        return nbytes <= self.capacity[slot]

    def _new_capacity(self, slot: int, nbytes: int) -> int:
        # At least half again what the slot had, so extents that creep up do not grow it each run.
        old = self.capacity[slot]
        return round_up(max(nbytes, old + old // 2))

    def moves_memory(self, needs: dict[int, int]) -> bool:
        """Whether grow(needs) would move bytes that queued work may use (so the caller must sync
        first): it moves a slot that holds something, or replaces the allocation."""
        grown = [(slot, self._new_capacity(slot, n)) for slot, n in needs.items() if not self.fits(slot, n)]
        if any(self.capacity[slot] for slot, _ in grown):
            return True
        return self.used + sum(c for _, c in grown) > self.nbytes

    def grow(self, needs: dict[int, int]) -> None:
        """Gives each slot in `needs` at least that many bytes, keeping every slot's contents. A
        grown slot takes a new range at the end of the allocation, and the allocation itself at
        least doubles when it must be replaced, so growing costs amortized constant copies per
        byte. Views made before a grow that moved memory (see moves_memory) are stale."""
        for slot, nbytes in needs.items():
            if self.fits(slot, nbytes):
                continue
            capacity = self._new_capacity(slot, nbytes)
            if self.used + capacity > self.nbytes:
                self._reallocate(max(2 * self.nbytes, self.used + capacity))
            start = self.used
            if self.capacity[slot]:
                self.device.copy(self.memory, start, self.memory, self.offset[slot], self.capacity[slot])
            self.offset[slot], self.capacity[slot] = start, capacity
            self.used = start + capacity

    def compact(self) -> None:
        """Lays the slots out back to back again (between runs, when nothing is queued)."""
        live = sum(self.capacity)
        if self.used <= 2 * live + ALIGN:
            return
        memory = self.device.alloc(self.space, live)
        total = 0
        for slot, c in enumerate(self.capacity):
            if c:
                self.device.copy(memory, total, self.memory, self.offset[slot], c)
            self.offset[slot] = total
            total += c
        self.device.free(self.memory)
        self.memory, self.nbytes, self.used = memory, live, live
        self.relayouts += 1

    def _reallocate(self, total: int) -> None:
        memory = self.device.alloc(self.space, total)
        if self.used:
            self.device.copy(memory, 0, self.memory, 0, self.used)
        self.device.free(self.memory)
        self.memory, self.nbytes = memory, total
        self.relayouts += 1


class PoolSet:
    """What one run works in: a pool per memory space and the stream its device work goes on.
    Runs in flight at the same time each hold their own; sequential runs reuse one, so queued
    work a run leaves behind (a plan without a final Sync) still meets the next run's memory."""

    def __init__(self, device: Device, slot_counts: dict[str, int]):
        self.pools = {space: Pool(device, space, n) for space, n in slot_counts.items()}
        self.stream = device.new_stream()
