"""The device interface every backend implements (cpu here; cuda and hip later).

Small and shaped like a GPU runtime: memory (one allocation per pool, in a memory space, typed
views into it, copies between allocations) and streams (device work queued in order, host work
run at once, sync). The executor owns everything above that: pool layout, shapes, the plan walk.
Work handed to a stream is a closure; a GPU backend's closures launch kernels.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, TypeVar

T = TypeVar("T")


class Stream(ABC):
    """An in-order queue of device work, used by one run at a time.

    Errors: device work that fails does not raise where it was queued; the stream records the
    first failure, drops the rest of its queue (it would read garbage), and raises the failure at
    the next `sync` (the CPU device also at the next `run_host`), then is empty and usable."""

    def begin_run(self, run_index: int) -> None:
        """A run of a plan starts on this stream (the CPU device's random schedule reseeds from
        (seed, run_index) here; GPU streams ignore it)."""

    @abstractmethod
    def enqueue(self, label: str, work: Callable[[], None]) -> None:
        """Queues device work; it runs after all work queued before it. `label` names it in errors."""

    @abstractmethod
    def run_host(self, label: str, work: Callable[[], T]) -> T:
        """Runs host work now, without waiting for queued device work, and returns its result."""

    @abstractmethod
    def sync(self) -> None:
        """Waits until all queued work has run; raises the first failure among it."""

    @abstractmethod
    def discard(self) -> None:
        """Drops queued work and any recorded failure (after a failed run), leaving it empty."""

    @property
    @abstractmethod
    def pending(self) -> int:
        """How many queued pieces of work have not run yet."""


class Device(ABC):
    name: str

    @abstractmethod
    def alloc(self, space: str, nbytes: int) -> Any:
        """One allocation of `nbytes` in memory space `space` ("device" or "host_visible")."""

    def free(self, memory: Any) -> None:
        """Releases an allocation (nothing may still read or write it)."""

    @abstractmethod
    def view(self, memory: Any, offset: int, dtype, shape: tuple[int, ...]):
        """A typed, C-contiguous view of `memory`'s bytes from `offset` (no copy)."""

    @abstractmethod
    def copy(self, dst: Any, dst_offset: int, src: Any, src_offset: int, nbytes: int) -> None:
        """Copies bytes between allocations now (the caller has synced the streams using them)."""

    @abstractmethod
    def new_stream(self) -> Stream:
        """A new stream."""


def open_device(kind: str, device_id: int = 0, cpu_schedule: str = "inline", seed: int = 0) -> Device:
    """The device for a resolved `device` option (`cpu_schedule` and `seed` configure the CPU device)."""
    if kind == "cpu":
        from .cpu import CpuDevice

        return CpuDevice(schedule=cpu_schedule, seed=seed)
    raise ValueError(f"device '{kind}' has no backend in this build of hipep")
