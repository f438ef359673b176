"""The CPU reference device: real memory and a stream, in numpy.

Each allocation is one numpy uint8 array; views are numpy arrays over its bytes, so values that
share storage share bytes exactly as on a GPU. Device work waits in the stream's queue and reads
and writes memory when it runs, not when it was queued, so a plan that lets the host overwrite
storage that queued work still uses, or reads a result before the work that writes it has run,
computes wrong results here too. When queued work runs is the schedule:

  * inline: at once, when queued (the stream behaves as if synchronous);
  * deferred: only at a sync (and so at the executor's growth points, which sync);
  * random: a seeded scheduler runs 0..all queued pieces at every enqueue and before every piece
    of host work; each run draws its schedule from (seed, run index).

deferred and random are how tests prove the host-buffer rule and a plan's syncs.
"""
from __future__ import annotations

import random
from collections import deque
from typing import Callable, TypeVar

import numpy as np

from ..errors import HipepError
from .device import Device, Stream

T = TypeVar("T")

SCHEDULES = ("inline", "deferred", "random")
# Fresh memory is filled with 0xFF bytes (NaN floats, -1 integers), not zeros, so a read of
# storage nothing wrote yet shows in results instead of passing for a plausible zero.
POISON = 0xFF


class CpuStream(Stream):
    def __init__(self, schedule: str = "inline", seed: int = 0):
        if schedule not in SCHEDULES:
            raise ValueError(f"unknown CPU schedule {schedule!r}; expected one of {', '.join(SCHEDULES)}")
        self.schedule = schedule
        self.seed = seed
        self._queue: deque[tuple[str, Callable[[], None]]] = deque()
        self._error: BaseException | None = None
        self._rng = random.Random(f"{seed}/0")

    def begin_run(self, run_index: int) -> None:
        self._rng = random.Random(f"{self.seed}/{run_index}")

    @property
    def pending(self) -> int:
        return len(self._queue)

    def enqueue(self, label: str, work: Callable[[], None]) -> None:
        if self._error is not None:  # a failed stream runs nothing more until sync reports it
            return
        self._queue.append((label, work))
        if self.schedule == "inline":
            self._run(len(self._queue))
        elif self.schedule == "random":
            self._run(self._rng.randint(0, len(self._queue)))

    def run_host(self, label: str, work: Callable[[], T]) -> T:
        if self.schedule == "random" and self._queue:
            self._run(self._rng.randint(0, len(self._queue)))
        # A GPU reports a failed kernel at the next sync; the CPU device knows at once, and
        # reporting it before host work that would read its garbage gives the real cause.
        self._raise_recorded()
        return work()

    def sync(self) -> None:
        self._run(len(self._queue))
        self._raise_recorded()

    def discard(self) -> None:
        self._queue.clear()
        self._error = None

    def _run(self, n: int) -> None:
        for _ in range(n):
            label, work = self._queue.popleft()
            try:
                work()
            except Exception as e:  # recorded, raised at the next sync; the rest is dropped
                self._error = e if isinstance(e, HipepError) else HipepError(f"{label}: {type(e).__name__}: {e}")
                self._queue.clear()
                return

    def _raise_recorded(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error


class CpuDevice(Device):
    name = "cpu"

    def __init__(self, schedule: str = "inline", seed: int = 0):
        if schedule not in SCHEDULES:
            raise ValueError(f"unknown CPU schedule {schedule!r}; expected one of {', '.join(SCHEDULES)}")
        self.schedule = schedule
        self.seed = int(seed)

    def alloc(self, space: str, nbytes: int) -> np.ndarray:
        return np.full(int(nbytes), POISON, np.uint8)

    def view(self, memory: np.ndarray, offset: int, dtype, shape) -> np.ndarray:
        dtype = np.dtype(dtype)
        shape = tuple(int(d) for d in shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if offset < 0 or offset + nbytes > memory.nbytes:
            raise HipepError(f"view of {nbytes} bytes at offset {offset} exceeds an allocation of "
                             f"{memory.nbytes} bytes")
        return memory[offset:offset + nbytes].view(dtype).reshape(shape)

    def copy(self, dst: np.ndarray, dst_offset: int, src: np.ndarray, src_offset: int, nbytes: int) -> None:
        dst[dst_offset:dst_offset + nbytes] = src[src_offset:src_offset + nbytes]

    def new_stream(self) -> CpuStream:
        return CpuStream(self.schedule, self.seed)
