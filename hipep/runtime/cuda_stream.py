"""Streams and events of the NVIDIA device (hipep.runtime.cuda): `CudaStream` is a CUDA stream
plus what hipep keeps per stream (the first failure since the last sync, recent launch labels for
fault messages, timing events, staging buffers and the stream's fault record, hipep.runtime.gpu_faults)."""
from __future__ import annotations

import ctypes
import time
from typing import TYPE_CHECKING, Callable, TypeVar

from ..errors import HipepError
from .cuda_driver import _STICKY, CudaError, _check, _driver, _error_text
from .cuda_memory import CudaMemory, DeviceArray
from .device import Event, Stream, step_failure
from .gpu_faults import FAULT_RECORD_BYTES, take_fault

if TYPE_CHECKING:
    from .cuda import CudaDevice

T = TypeVar("T")
_RECENT_LABELS = 16  # launches remembered per stream for fault messages
WORKSPACE_MIN = 1 << 16
WORKSPACE_EXTRA_MAX = 64 << 20


def workspace_bytes(last: int, nbytes: int) -> int:
    """The size of a stream's next workspace buffer (CudaDevice._workspace) for a request of `nbytes`
    that its last buffer of `last` bytes (0: none yet) cannot hold. Every buffer handed out stays
    while the stream lives (captured graphs keep its address), and prompts of lengths the session has
    not seen ask for a little more each time (split-K and split-KV partials scale with the rows): grown
    by half again, a run of growing lengths allocates a logarithmic number of buffers whose sum stays
    within 3x the largest, instead of one buffer a length. The extra is at most WORKSPACE_EXTRA_MAX
    past the request, so a large request (a weight dequantized for cuBLASLt) wastes little."""
    if last <= 0:
        return max(nbytes, WORKSPACE_MIN)
    return max(nbytes, min(last + last // 2, nbytes + WORKSPACE_EXTRA_MAX))


class CudaEvent(Event):
    def __init__(self, device: "CudaDevice", stream: "CudaStream"):
        d = _driver()
        self.device = device
        self.handle = _check(d.cuEventCreate(d.CUevent_flags.CU_EVENT_DISABLE_TIMING), "cuEventCreate")
        _check(d.cuEventRecord(self.handle, stream.handle), "cuEventRecord")

    def wait(self) -> None:
        _check(_driver().cuEventSynchronize(self.handle), "cuEventSynchronize")

    def query(self) -> bool:
        d = _driver()
        (err,) = d.cuEventQuery(self.handle)
        if err == d.CUresult.CUDA_ERROR_NOT_READY:
            return False
        _check((err,), "cuEventQuery")
        return True

    def __del__(self):
        try:
            _driver().cuEventDestroy(self.handle)
        except Exception:  # noqa: BLE001 - at interpreter exit the driver may be gone
            pass


class CudaStream(Stream):
    """A non-blocking CUDA stream plus what hipep keeps per stream: the first failure recorded
    since the last sync, the labels of recent launches (for fault messages), timing events around
    replays, and the stable buffers ORT's inputs and outputs are staged through."""

    def __init__(self, device: "CudaDevice"):
        d = _driver()
        self.device = device
        device._current()
        self.handle = _check(d.cuStreamCreate(d.CUstream_flags.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
        self._error: HipepError | None = None
        self._recent: list[str] = []
        self._since_sync = 0
        self._timing: list[tuple] = []  # (start, end) events of replays not yet read by kernel_ns
        self._event_pool: list = []
        # How this stream's replays reached the driver since `issue_counts` last read them: kernel
        # launches issued one by one, CUDA graph launches, graph kernel nodes updated in place.
        self.counts = [0, 0, 0]
        self.wait_ns = 0  # host time blocked in syncs since `sync_wait_ns` last read it
        self.staging: dict[tuple[str, int], CudaMemory] = {}
        self.staged_inputs: list[tuple[int, int, DeviceArray]] = []  # (host address, bytes, device copy)
        self.workspace: list[CudaMemory] = []  # Target.workspace buffers, newest last (CudaDevice._workspace)
        self.targets: dict = {}  # per launch label (and first run), its Target (CudaDevice.stream_target)
        self.counters: dict[str, list[CudaMemory]] = {}  # per launch label, Target.counters buffers, newest last
        self.bound: dict = {}  # per program, its recent bindings on this stream (CudaDevice.launch)
        # Kernels that validate their input report here (gpu_faults); cleared, then read per sync.
        self.fault_record = device.alloc("host_visible", FAULT_RECORD_BYTES)
        ctypes.memset(self.fault_record.host_ptr, 0, FAULT_RECORD_BYTES)

    # -- the Stream interface

    def begin_run(self, run_index: int) -> None:
        self.staged_inputs = []
        # A fault of earlier work that no sync has seen yet (its outputs stayed on the device).
        fault = take_fault(self.fault_record.host_ptr, self.device.fault_sites)
        if fault is not None:
            raise type(fault)(f"{fault} (found when the next run started on the stream: an earlier run's "
                              f"device outputs are not valid)")

    def enqueue(self, label: str, work: Callable[[], None]) -> None:
        """Host work in stream order: it runs once the work queued before it is done (a GPU stream
        cannot run Python, so the host waits here)."""
        if self._error is not None:
            return
        try:
            self._wait_idle()
            work()
        except Exception as e:  # noqa: BLE001 - recorded like a failed kernel
            self._error = step_failure(label, e)

    def run_host(self, label: str, work: Callable[[], T]) -> T:
        self._raise_recorded()
        return work()

    def sync(self) -> None:
        self._wait_idle()
        fault = take_fault(self.fault_record.host_ptr, self.device.fault_sites)
        if fault is not None:
            # The kernel's fault came before any failure recorded since: work after a refused
            # launch is never issued. Both belong to this run, which fails with the first.
            self._error = None
            raise fault
        self._raise_recorded()

    def discard(self) -> None:
        try:
            self._wait_idle()
        except HipepError:
            pass
        take_fault(self.fault_record.host_ptr, self.device.fault_sites)  # the failed run's, if any
        self._error = None
        self._recent.clear()
        self._since_sync = 0

    @property
    def pending(self) -> int:
        if not self._since_sync:
            return 0
        d = _driver()
        (err,) = d.cuStreamQuery(self.handle)
        return 0 if err == d.CUresult.CUDA_SUCCESS else self._since_sync

    def record_event(self) -> CudaEvent:
        self.device._current()
        return CudaEvent(self.device, self)

    # -- hipep's own

    @property
    def failed(self) -> bool:
        return self._error is not None

    def issued(self, label: str) -> None:
        self._since_sync += 1
        self._recent.append(label)
        if len(self._recent) > _RECENT_LABELS:
            del self._recent[0]

    def record_failure(self, error: HipepError) -> None:
        if self._error is None:
            self._error = error

    def _wait_idle(self) -> None:
        d = _driver()
        self.device._current()
        t0 = time.perf_counter_ns()
        (err,) = d.cuStreamSynchronize(self.handle)
        self.wait_ns += time.perf_counter_ns() - t0
        recent, self._recent = self._recent, []
        self._since_sync = 0
        if err != d.CUresult.CUDA_SUCCESS:
            text = _error_text(err)
            if len(recent) == 1:
                where = recent[0]
            elif recent:
                where = (f"one of the launches since the last sync ({', '.join(recent[-6:])}; set "
                         f"HIPEP_CUDA_SYNC=1 to name it)")
            else:
                where = "a launch"
            sticky = any(s in text for s in _STICKY)
            raise CudaError(f"{where}: the GPU reported {text}" +
                            ("; the CUDA context cannot be used after this error: restart the process" if sticky else ""))

    def _raise_recorded(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def timing_events(self):
        d = _driver()
        if len(self._event_pool) < 2:
            self._event_pool += [_check(d.cuEventCreate(d.CUevent_flags.CU_EVENT_DEFAULT), "cuEventCreate")
                                 for _ in range(2)]
        return self._event_pool.pop(), self._event_pool.pop()

    def __del__(self):
        try:
            d = _driver()
            for e in self._event_pool:
                d.cuEventDestroy(e)
            for s, e in self._timing:
                d.cuEventDestroy(s)
                d.cuEventDestroy(e)
            d.cuStreamDestroy(self.handle)
            for mem in [*self.staging.values(), *self.workspace, *(m for held in self.counters.values() for m in held),
                        self.fault_record]:
                self.device.free(mem)
        except Exception:  # noqa: BLE001 - at interpreter exit the driver may be gone
            pass
