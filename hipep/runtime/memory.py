"""Pools: one allocation per memory space, holding the plan's slots at aligned offsets.

A slot is an (offset, capacity) range of its pool. Capacities start at zero and grow as runs need
more; growing re-lays out the whole pool (a new allocation, offsets recomputed, every slot's bytes
copied over), so the caller must have synced the stream first and must re-create its views from
the pool afterwards (views into the old allocation are stale).
"""
from __future__ import annotations

from typing import Any

from .device import Device

ALIGN = 256  # slot offsets and capacities: a multiple of every dtype's size, as a GPU allocator


def round_up(n: int, to: int = ALIGN) -> int:
    return -(-n // to) * to


class Pool:
    def __init__(self, device: Device, space: str, n_slots: int):
        self.device = device
        self.space = space
        self.capacity = [0] * n_slots
        self.offset = [0] * n_slots
        self.memory: Any = device.alloc(space, 0)
        self.nbytes = 0
        self.relayouts = 0  # how often it grew (tests and stats read it)

    def view(self, slot: int, dtype, shape):
        return self.device.view(self.memory, self.offset[slot], dtype, shape)

    def fits(self, slot: int, nbytes: int) -> bool:
        return nbytes <= self.capacity[slot]

    def grow(self, needs: dict[int, int]) -> None:
        """Gives each slot in `needs` at least that many bytes, keeping every slot's contents.
        A slot grows by half its capacity at least, so a run whose extents creep up does not
        re-lay out the pool at every step."""
        capacity = list(self.capacity)
        for slot, nbytes in needs.items():
            if nbytes > capacity[slot]:
                capacity[slot] = round_up(max(nbytes, capacity[slot] + capacity[slot] // 2))
        offset, total = [], 0
        for c in capacity:
            offset.append(total)
            total += c
        memory = self.device.alloc(self.space, total)
        for slot, old in enumerate(self.capacity):
            if old:
                self.device.copy(memory, offset[slot], self.memory, self.offset[slot], old)
        self.device.free(self.memory)
        self.memory, self.capacity, self.offset, self.nbytes = memory, capacity, offset, total
        self.relayouts += 1


class PoolSet:
    """What one run works in: a pool per memory space and the stream its device work goes on.
    Runs in flight at the same time each hold their own; sequential runs reuse one, so queued
    work a run leaves behind (a plan without a final Sync) still meets the next run's memory."""

    def __init__(self, device: Device, slot_counts: dict[str, int]):
        self.pools = {space: Pool(device, space, n) for space, n in slot_counts.items()}
        self.stream = device.new_stream()
