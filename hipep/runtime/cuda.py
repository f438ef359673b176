"""The NVIDIA GPU device: cuda-bindings' driver API for memory, streams and launches, NVRTC (through
hipep.runtime.kernel_cache) for programs, kernels from kernels/*.hip and the pointwise renderer.

Memory: "device" allocations are cuMemAlloc; "host_visible" ones are pinned host memory mapped
into the device's address space (cuMemHostAlloc with DEVICEMAP), so kernels write there and the
host reads the small values a plan puts there (shapes, sequence lengths) without a copy. A view
is a `DeviceArray` (pointer, shape, dtype). Plan constants and hipep-held weights reach the
device as numpy arrays; each is copied to device memory once, when a launch first uses it.

ORT's memory: when hipep's EP device offers this GPU's memory (csrc/device_memory.cc), ORT keeps
the EP's inputs and outputs in device memory and Compute hands over their addresses:
`wrap_device_memory` makes them `OrtDeviceArray`s that kernels read and write in place (no
copy; `finish_outputs` only syncs). Tensors in host memory (an EP device without GPU memory) are
copied into stable per-position device buffers of the run's stream (`stage_input`), kernels write
outputs into the stream's output buffers (`stage_output`, the input's buffer for an in-place
pair), and `finish_outputs` copies them back and syncs. Stable buffers keep a signature's pointers fixed from run to run, which is what lets a
replay reuse its bound launches and its CUDA graphs.

Launch: every plan launch has a GPU program from the kernel table (hipep.runtime.gpu_kernels); a
binding turns its arguments into kernel launches with a ctypes parameter array prepared once per
argument layout, whose address goes to cuLaunchKernel as it is (no marshalling per launch).
Replay issues a captured graph's launches segment by segment (runs of launches between host work
and syncs); a segment whose launches come out the same on two replays is captured into a CUDA
graph (stream capture) and later replayed with one cuGraphLaunch. `HIPEP_CUDA_GRAPHS=0` turns
that off; `HIPEP_CUDA_SYNC=1` syncs after every launch, so an asynchronous kernel fault names the
node that caused it. `HIPEP_DEBUG_SPIN_BEFORE=<op type>:<microseconds>` (tests only, read when the
device is made) queues a spin kernel (kernels/debug.hip) before every launch of that op type.

Errors: a launch the driver refuses is recorded on its stream with the node's label and raised at
the next sync (later work on that stream is not issued); a fault while kernels run surfaces at the
sync, naming the launches issued since the last one. Bad input only a kernel sees (a Gather index
out of range) goes into the stream's fault record (hipep.runtime.gpu_faults: pinned host memory the
kernels write, one per stream, at a fixed address that CUDA graphs keep); every sync reads it and
raises an error naming the node, input, value and valid range, and clears it. Every run ends with
a sync (device outputs too), so the run that faulted raises; a fault not yet seen by a sync is
raised at the latest when the next run starts on that stream.
"""
from __future__ import annotations

import ctypes
import dataclasses
import logging
import os
import threading
import weakref
from typing import Any, Callable, TypeVar

import ml_dtypes  # noqa: F401  (registers numpy's 'bfloat16' dtype name)
import numpy as np

from ..errors import HipepError
from . import gpu_kernels as table
from . import kernel_cache
from .gpu_faults import FAULT_RECORD_BYTES, FaultSite, FaultSites, take_fault
from .device import Device, Event, Graph, Kernel, Stream, check_patch, freeze, named_error

T = TypeVar("T")
log = logging.getLogger("hipep")

POISON = 0xFF  # fresh memory reads as NaN / -1, as on the CPU device
_RECENT_LABELS = 16  # launches remembered per stream for fault messages
_GRAPH_MIN_LAUNCHES = 2
_GRAPH_MAX_CAPTURES = 8  # a segment re-captured this often runs launch by launch from then on


def _env_flag(name: str, default: bool) -> bool:
    v = os.environ.get(name)
    return default if v is None else v.strip().lower() not in ("0", "false", "no", "off", "")


def _debug_spin_setting() -> tuple[str, float] | None:
    """HIPEP_DEBUG_SPIN_BEFORE=<op type>:<microseconds>, FOR TESTS ONLY: (op type, microseconds)
    or None. A spin kernel queued before that op's launches makes later device work run late, so
    host work that fails to wait for it overtakes it every time (tests/gpu/test_gpu_hazard.py)."""
    value = os.environ.get("HIPEP_DEBUG_SPIN_BEFORE", "").strip()
    if not value:
        return None
    op_type, _, us = value.rpartition(":")
    try:
        micros = float(us)
    except ValueError:
        micros = 0.0
    if not op_type or not micros > 0:
        raise HipepError(f"HIPEP_DEBUG_SPIN_BEFORE={value!r}: expected <op type>:<microseconds>, e.g. ReduceSum:200")
    return op_type, micros


# ---- the driver ---------------------------------------------------------------------------------

_DRIVER = None
_INIT_LOCK = threading.Lock()


def _driver():
    global _DRIVER
    if _DRIVER is None:
        from cuda.bindings import driver

        _DRIVER = driver
    return _DRIVER


class CudaError(HipepError):
    """A CUDA driver call failed."""


def _error_text(err) -> str:
    d = _driver()
    try:
        _, name = d.cuGetErrorName(err)
        _, text = d.cuGetErrorString(err)
        name = name.decode() if isinstance(name, bytes) else str(name)
        text = text.decode() if isinstance(text, bytes) else str(text)
        return f"{name}: {text}"
    except Exception:  # noqa: BLE001 - the code alone still says something
        return str(err)


def _check(result, what: str):
    """Unpacks a cuda-bindings result tuple, raising CudaError unless it succeeded."""
    err = result[0]
    if err != _driver().CUresult.CUDA_SUCCESS:
        raise CudaError(f"{what} failed: {_error_text(err)}")
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


_STICKY = ("CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_INSTRUCTION",
           "CUDA_ERROR_MISALIGNED_ADDRESS", "CUDA_ERROR_HARDWARE_STACK_ERROR", "CUDA_ERROR_INVALID_PC",
           "CUDA_ERROR_ASSERT", "CUDA_ERROR_LAUNCH_TIMEOUT")


def cuda_status(device_id: int = 0) -> tuple[bool, str]:
    """(True, a description of the GPU) when cuda-bindings imports, a driver loads and device
    `device_id` exists; else (False, why not)."""
    try:
        d = _driver()
    except ImportError as e:
        return False, f"cuda-bindings is not installed ({e}); install hipep's 'cuda13' extra"
    except Exception as e:  # noqa: BLE001 - a broken install says so
        return False, f"cuda-bindings failed to import: {type(e).__name__}: {e}"
    try:
        (err,) = d.cuInit(0)
    except Exception as e:  # noqa: BLE001 - no driver library: cuda-pathfinder raises
        return False, f"no NVIDIA driver could be loaded ({type(e).__name__}: {e})"
    if err != d.CUresult.CUDA_SUCCESS:
        return False, f"cuInit failed: {_error_text(err)}"
    err, count = d.cuDeviceGetCount()
    if err != d.CUresult.CUDA_SUCCESS or count == 0:
        return False, "the NVIDIA driver reports no GPU"
    if not 0 <= device_id < count:
        return False, f"device_id {device_id} is out of range: the driver reports {count} GPU(s)"
    return True, f"{count} GPU(s)"


def cuda_available(device_id: int = 0) -> bool:
    return cuda_status(device_id)[0]


# ---- memory -------------------------------------------------------------------------------------

class CudaMemory:
    """One allocation: `ptr` is its device address (for host_visible memory the device mapping of
    the pinned host memory at `host_ptr`)."""
    __slots__ = ("ptr", "nbytes", "space", "host_ptr", "freed", "__weakref__")

    def __init__(self, ptr: int, nbytes: int, space: str, host_ptr: int = 0):
        self.ptr, self.nbytes, self.space, self.host_ptr, self.freed = int(ptr), int(nbytes), space, int(host_ptr), False

    @property
    def host_visible(self) -> bool:
        return self.space == "host_visible"

    def __repr__(self) -> str:
        return f"CudaMemory({self.space}, {self.nbytes} bytes at {self.ptr:#x})"


class DeviceArray:
    """A typed, C-contiguous view of device-addressable memory: what a kernel argument points at.
    Holds the allocation it views, so the memory outlives the view."""
    __slots__ = ("memory", "ptr", "shape", "dtype", "_host")

    def __init__(self, memory: CudaMemory | None, ptr: int, shape, dtype):
        self.memory = memory
        self.ptr = int(ptr)
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self._host = None

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def host_visible(self) -> bool:
        return self.memory is not None and self.memory.host_visible

    def reshape(self, *shape) -> "DeviceArray":
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = [int(d) for d in shape]
        if shape.count(-1) == 1:
            known = 1
            for d in shape:
                if d != -1:
                    known *= d
            shape[shape.index(-1)] = self.size // known if known else 0
        n = 1
        for d in shape:
            n *= d
        if n != self.size:
            raise HipepError(f"cannot reshape a device array of shape {list(self.shape)} into {shape}")
        return DeviceArray(self.memory, self.ptr, shape, self.dtype)

    def host_view(self) -> np.ndarray:
        """The contents as a numpy array over the pinned host memory (host_visible memory only):
        what the host reads and writes, live."""
        if not self.host_visible:
            raise HipepError("device memory has no host view; copy it to the host first")
        if self._host is None:
            nbytes = self.nbytes
            addr = self.memory.host_ptr + (self.ptr - self.memory.ptr)
            if nbytes:
                buf = (ctypes.c_uint8 * nbytes).from_address(addr)
                self._host = np.frombuffer(buf, np.uint8).view(self.dtype).reshape(self.shape)
            else:
                self._host = np.empty(self.shape, self.dtype)
        return self._host

    def __repr__(self) -> str:
        where = "host_visible" if self.host_visible else "device"
        return f"DeviceArray({list(self.shape)}:{self.dtype}, {where} at {self.ptr:#x})"


class OrtDeviceArray(DeviceArray):
    """A tensor ORT keeps in this GPU's device memory (hipep's EP device offers it; IOBinding and
    device OrtValues put the caller's tensors there), used in place as a kernel argument. The
    host may read single elements of a 1-D view: a shape program reading an input's values
    (Reshape's shape as a graph input), counted among the run's host reads."""
    __slots__ = ("device",)

    def __init__(self, device: "CudaDevice", ptr: int, shape, dtype):
        super().__init__(None, ptr, shape, dtype)
        self.device = device

    def reshape(self, *shape) -> "OrtDeviceArray":
        view = super().reshape(*shape)
        return OrtDeviceArray(self.device, view.ptr, view.shape, view.dtype)

    def __array__(self, dtype=None, copy=None):
        # numpy would otherwise take this object for a 0-d array of dtype object. Whole device
        # tensors reach the host only through a plan's copies; what reads them as arrays is the
        # step-by-step interpreter, which this device does not run.
        raise HipepError(f"a tensor of shape {list(self.shape)} ({self.dtype}) is in GPU memory, which the host "
                         f"reads one element at a time only; plans that run step by step (Loop, If, or shapes "
                         f"computed on the device) are not supported on the cuda device yet")

    def __getitem__(self, k):
        if self.ndim != 1 or not isinstance(k, (int, np.integer)):
            raise HipepError(f"a device tensor of shape {list(self.shape)} is read by the host one element of a "
                             f"1-D view at a time, not with [{k!r}]")
        n = self.size
        if not -n <= k < n:
            raise IndexError(f"index {k} is out of bounds for a device tensor of {n} elements")
        k = int(k) % n
        out = np.empty(1, self.dtype)
        dev = self.device
        dev._current()
        # On the device's own stream, waited for (the legacy stream's implicit syncs are not
        # wanted beside other threads' captures). ORT's copies into its tensors are complete
        # (hipep's data transfer waits for them) and hipep's own runs end with a sync.
        d, aux = _driver(), dev._aux()
        _check(d.cuMemcpyDtoHAsync(out.ctypes.data, self.ptr + k * self.dtype.itemsize, self.dtype.itemsize, aux),
               "cuMemcpyDtoHAsync")
        _check(d.cuStreamSynchronize(aux), "cuStreamSynchronize")
        return out[0]


# ---- streams and events -------------------------------------------------------------------------

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
        self.staging: dict[tuple[str, int], CudaMemory] = {}
        self.staged_inputs: list[tuple[int, int, DeviceArray]] = []  # (host address, bytes, device copy)
        self.workspace: list[CudaMemory] = []  # Target.workspace buffers, newest last (CudaDevice._workspace)
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
        except HipepError as e:
            self._error = e if str(e).startswith(label) else HipepError(f"{label}: {e}")
        except Exception as e:  # noqa: BLE001 - recorded like a failed kernel
            self._error = HipepError(f"{label}: {type(e).__name__}: {e}")

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
        (err,) = d.cuStreamSynchronize(self.handle)
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
            for mem in [*self.staging.values(), *self.workspace, self.fault_record]:
                self.device.free(mem)
        except Exception:  # noqa: BLE001 - at interpreter exit the driver may be gone
            pass


# ---- programs -----------------------------------------------------------------------------------

class _Launch:
    """A kernel launch made ready: the function and configuration, and the parameter array whose
    address cuLaunchKernel takes (kept alive with the values it points at)."""
    __slots__ = ("func", "grid", "block", "smem", "values", "argv", "argv_addr", "key", "entry")

    def __init__(self, func, op: table.KernelOp):
        self.func = func
        self.entry = op.entry
        self.grid = tuple(int(g) for g in op.grid) + (1,) * (3 - len(op.grid))
        self.block = tuple(int(b) for b in op.block) + (1,) * (3 - len(op.block))
        self.smem = int(op.smem)
        self.values = list(op.params)
        self.argv = (ctypes.c_void_p * max(len(self.values), 1))(*[ctypes.addressof(v) for v in self.values])
        self.argv_addr = ctypes.addressof(self.argv)
        self.key = (op.entry, id(func), self.grid, self.block, self.smem, b"".join(bytes(v) for v in self.values))

    def issue(self, stream: CudaStream, label: str) -> None:
        d = _driver()
        g, b = self.grid, self.block
        (err,) = d.cuLaunchKernel(self.func, g[0], g[1], g[2], b[0], b[1], b[2], self.smem, stream.handle,
                                  self.argv_addr, 0)
        if err != d.CUresult.CUDA_SUCCESS:
            stream.record_failure(CudaError(f"{label}: launch of {self.entry} (grid {list(g)}, block {list(b)}, "
                                            f"{self.smem} bytes shared) failed: {_error_text(err)}"))


class _Copy:
    __slots__ = ("dst", "src", "nbytes", "key")

    def __init__(self, op: table.CopyOp):
        self.dst, self.src, self.nbytes = op.dst, op.src, op.nbytes
        self.key = ("copy", op.dst, op.src, op.nbytes)

    def issue(self, stream: CudaStream, label: str) -> None:
        d = _driver()
        (err,) = d.cuMemcpyAsync(self.dst, self.src, self.nbytes, stream.handle)
        if err != d.CUresult.CUDA_SUCCESS:
            stream.record_failure(CudaError(f"{label}: device copy of {self.nbytes} bytes failed: {_error_text(err)}"))


class _Blas:
    """A library call (table.BlasOp: cuBLASLt's matmul) queued on the stream; it launches kernels
    only, so a CUDA graph captures it like a launch."""
    __slots__ = ("call", "key")

    def __init__(self, op: table.BlasOp):
        self.call, self.key = op.call, op.key

    def issue(self, stream: CudaStream, label: str) -> None:
        why = self.call(int(stream.handle))
        if why is not None:
            stream.record_failure(CudaError(f"{label}: {why}"))


class CudaProgram:
    """The device's program for a Kernel: its binding in the kernel table (None: the op has no
    GPU program and may only run as host work, on host-visible memory)."""

    def __init__(self, device: "CudaDevice", kernel: Kernel, binding: table.Binding | None):
        self.device = device
        self.kernel = kernel
        self.binding = binding
        self.label = kernel.label or kernel.name
        self.attrs = kernel.constants
        self.arity = kernel.arity
        self._host = None

    def bind(self, args: list, stream: CudaStream | None = None) -> list:
        """The launch's ops, ready to issue on `stream`, for these arguments (DeviceArrays, numpy
        constants)."""
        if self.binding is None:
            raise table.NoKernel(f"no kernel for cuda: {self.kernel.name.lstrip(':')}")
        dev = self.device
        converted = [dev._arg(a) for a in args]
        target = dev.target if stream is None else dev.stream_target(stream, self.label)
        ops = self.binding.bind(converted[:self.arity], converted[self.arity:], self.attrs, target)
        if dev.debug_spin is not None and self.kernel.name.rsplit("::", 1)[-1] == dev.debug_spin[0]:
            ops = [table.KernelOp("hipep_debug_spin", (1,), (1,), [ctypes.c_longlong(dev.debug_spin[1])],
                                  module="debug")] + list(ops)
        return [dev._ready(op) for op in ops]

    def run(self, args: list) -> None:
        # The step-by-step interpreter calls programs with numpy views of its pools; on a GPU the
        # memory is the device's, so such plans are not run here yet.
        raise HipepError(f"{self.label}: plans that run step by step (Loop, If, or shapes computed on the device) "
                         f"are not supported on the cuda device yet; use device=cpu for this model")

    def run_host(self, args: list, stream: CudaStream) -> None:
        """Runs the op's reference on the host (a plan host step): host-visible memory is read
        and written in place; device-space inputs are passed by shape only (a host step reads
        only the extents of those, like Shape's); a device-space output is computed into host
        memory and queued to the device."""
        from ..ops.registry import lookup
        from ..plan import split_op_key
        from .cpu import CpuProgram

        if self._host is None:
            self._host = CpuProgram(self.kernel)
            op = lookup(*split_op_key(self.kernel.name))
            self._extent_only = set(op.extent_only_inputs) if op is not None else set()
        host_args, uploads = [], []
        for k, a in enumerate(args):
            if isinstance(a, DeviceArray):
                if a.host_visible:
                    host_args.append(a.host_view())
                elif k < self.arity:
                    if k not in self._extent_only:
                        # The plan copies device values the host reads into host-visible memory
                        # first (hip-assign-memory-spaces); reading them here would read zeros.
                        raise HipepError(f"host work reads input {k} from device memory; the plan should have "
                                         f"copied it to host-visible memory")
                    host_args.append(np.broadcast_to(np.zeros((), a.dtype), a.shape))
                else:
                    tmp = np.empty(a.shape, a.dtype)
                    uploads.append((a, tmp))
                    host_args.append(tmp)
            else:
                host_args.append(a)
        self._host.run(host_args)
        for dst, tmp in uploads:
            self.device._upload_to(stream, dst, tmp)

    def __repr__(self) -> str:
        return f"CudaProgram({self.label})"


class _NodeState:
    """A captured launch's ops, bound for the arguments it had when last bound; rebound when a
    patch changes an argument's memory or shape, or every run when its binding reads values."""
    __slots__ = ("program", "sig", "ops", "version", "reads_values")

    def __init__(self, program: CudaProgram):
        self.program = program
        self.sig = None
        self.ops: list = []
        self.version = 0
        self.reads_values = program.binding is not None and program.binding.reads_values

    def prepare(self, args: list, stream: CudaStream | None = None) -> list:
        sig = tuple(_arg_signature(a, self.reads_values) for a in args)
        if sig != self.sig:
            ops = self.program.bind(args, stream)
            if [o.key for o in ops] != [o.key for o in self.ops]:
                self.version += 1
            self.ops, self.sig = ops, sig
        return self.ops


def _arg_signature(a, with_values: bool):
    if a is None:
        return None
    if isinstance(a, DeviceArray):
        if with_values and a.host_visible:
            return (a.ptr, a.shape, a.dtype.str, a.host_view().tobytes())
        return (a.ptr, a.shape, a.dtype.str)
    return ("host", id(a), a.shape)


class _Segment:
    """A run of launches between host work and syncs, and its CUDA graph once it is stable."""
    __slots__ = ("nodes", "exec", "captured", "last", "captures", "direct", "reads_values", "label", "bound")

    def __init__(self, nodes: list[int]):
        self.nodes = nodes
        self.reads_values = False  # some launch's binding reads values: bound again every run
        self.label = ""
        self.bound = False  # every launch has been bound once
        self.exec = None
        self.captured = None
        self.last = None
        self.captures = 0
        self.direct = False

    def release(self) -> None:
        if self.exec is not None:
            try:
                _driver().cuGraphExecDestroy(self.exec)
            except Exception:  # noqa: BLE001
                pass
            self.exec = None


class _GraphState:
    def __init__(self, graph: Graph):
        self.n = len(graph.nodes)
        self.nodes: list[_NodeState | None] = []
        self.plan: list[tuple[str, Any]] = []  # ("launch", _Segment) | ("host", index) | ("sync", index)
        run: list[int] = []
        for i, node in enumerate(graph.nodes):
            if node.kind == "launch":
                self.nodes.append(_NodeState(node.program))
                run.append(i)
                continue
            self.nodes.append(None)
            if run:
                self.plan.append(("launch", _Segment(run)))
                run = []
            self.plan.append((node.kind, i))
        if run:
            self.plan.append(("launch", _Segment(run)))
        self.index = {id(node): i for i, node in enumerate(graph.nodes)}
        for kind, seg in self.plan:
            if kind == "launch":
                seg.reads_values = any(self.nodes[i].reads_values for i in seg.nodes)
                first, last = graph.nodes[seg.nodes[0]].label, graph.nodes[seg.nodes[-1]].label
                seg.label = first if first == last else f"{first} .. {last}"

    def __del__(self):
        for kind, seg in self.plan:
            if kind == "launch":
                seg.release()


# ---- the device ---------------------------------------------------------------------------------

class CudaDevice(Device):
    name = "cuda"

    def __init__(self, device_id: int = 0):
        ok, why = cuda_status(device_id)
        if not ok:
            raise HipepError(f"device 'cuda' is not available: {why}")
        d = _driver()
        self.device_id = device_id
        self.dev = _check(d.cuDeviceGet(device_id), "cuDeviceGet")
        self.ctx = _check(d.cuDevicePrimaryCtxRetain(self.dev), "cuDevicePrimaryCtxRetain")
        self._tls = threading.local()
        self._current()

        def attr(a):
            return int(_check(d.cuDeviceGetAttribute(a, self.dev), "cuDeviceGetAttribute"))

        A = d.CUdevice_attribute
        self.capability = (attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                           attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
        self.arch = f"sm_{self.capability[0]}{self.capability[1]}"
        self.sm_count = attr(A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        self.warp_size = attr(A.CU_DEVICE_ATTRIBUTE_WARP_SIZE)
        raw = _check(d.cuDeviceGetName(128, self.dev), "cuDeviceGetName")
        self.gpu_name = raw.split(b"\0", 1)[0].decode(errors="replace") if isinstance(raw, bytes) else str(raw)
        self.driver_version = int(_check(d.cuDriverGetVersion(), "cuDriverGetVersion"))
        self.nvrtc_version = kernel_cache.nvrtc_version()
        driver = (self.driver_version // 1000, (self.driver_version % 1000) // 10)
        if self.nvrtc_version > driver:
            raise HipepError(
                f"NVRTC {self.nvrtc_version[0]}.{self.nvrtc_version[1]} is newer than the NVIDIA driver supports "
                f"(CUDA {driver[0]}.{driver[1]}, driver API version {self.driver_version}): kernels it compiles may not "
                f"load; install nvidia-cuda-nvrtc=={driver[0]}.{driver[1]}.* or update the driver")
        self.defines = {"HIPEP_WARP_SIZE": self.warp_size}
        self.target = table.Target(sm_count=self.sm_count, warp_size=self.warp_size, scratch=self._scratch)
        self.sync_launches = _env_flag("HIPEP_CUDA_SYNC", False)
        self.use_graphs = _env_flag("HIPEP_CUDA_GRAPHS", True)
        spin = _debug_spin_setting()  # (op type, clock cycles): microseconds at the reported clock (kHz)
        self.debug_spin = None if spin is None else (
            spin[0], int(spin[1] * attr(A.CU_DEVICE_ATTRIBUTE_CLOCK_RATE) / 1000))
        self._lock = threading.RLock()
        self._modules: dict[str, Any] = {}
        self._functions: dict[tuple[str, str], Any] = {}
        self._programs: dict[tuple, CudaProgram] = {}
        self._uploads: dict[int, tuple[Any, DeviceArray]] = {}
        self._released: list[CudaMemory] = []
        self._finalizers: dict[int, weakref.finalize] = {}  # id(allocation) -> its release when it dies
        # The driver allocations not yet freed, by address: an allocation can be released twice
        # (its finalizer queues it while an owner's __del__ frees it in the same collection), and
        # freeing an address again would be an error, or free someone else's later allocation.
        self._live: set[int] = set()
        self._scratch_mem: list[CudaMemory] = []
        self._aux_stream = None
        self.fault_sites = FaultSites()  # what a fault record's site means (gpu_faults)
        # Held while a stream captures a CUDA graph, and by the calls that may synchronize the
        # device (allocation, freeing, module loading): those fail, and can spoil the capture,
        # while any stream of the context is capturing (concurrent runs on other threads).
        self._capture_lock = threading.RLock()
        log.info("hipep: cuda device %d: %s (%s, %d SMs), driver CUDA %d.%d, NVRTC %d.%d", device_id, self.gpu_name,
                 self.arch, self.sm_count, *driver, *self.nvrtc_version)

    def __repr__(self) -> str:
        return f"CudaDevice({self.device_id}: {self.gpu_name}, {self.arch})"

    def _current(self) -> None:
        """Makes the device's primary context current on the calling thread (ORT calls from
        several threads)."""
        if getattr(self._tls, "ctx", None) is not self.ctx:
            _check(_driver().cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
            self._tls.ctx = self.ctx

    # ---- memory ------------------------------------------------------------------------------

    def alloc(self, space: str, nbytes: int) -> CudaMemory:
        nbytes = int(nbytes)
        if nbytes <= 0:
            return CudaMemory(0, 0, space)
        self._current()
        self._release_pending()
        with self._capture_lock:
            mem = self._alloc(space, nbytes)
        with self._lock:
            self._live.add(mem.host_ptr if mem.host_visible else mem.ptr)
        # Memory nobody frees explicitly (a run's arenas, when their executor goes with its
        # session) goes back to the driver once its last view dies: queued, and freed at the next
        # allocation (a finalizer may run on any thread, inside another thread's capture).
        key = id(mem)
        fin = weakref.finalize(mem, self._collect, key, CudaMemory(mem.ptr, mem.nbytes, space, mem.host_ptr))
        fin.atexit = False  # the process frees everything anyway
        with self._lock:
            self._finalizers[key] = fin
        return mem

    def _collect(self, key: int, detached: CudaMemory) -> None:
        with self._lock:
            self._finalizers.pop(key, None)
            self._released.append(detached)

    def _alloc(self, space: str, nbytes: int) -> CudaMemory:
        d = _driver()
        if space == "host_visible":
            flags = d.CU_MEMHOSTALLOC_DEVICEMAP | d.CU_MEMHOSTALLOC_PORTABLE
            host = int(_check(d.cuMemHostAlloc(nbytes, flags), f"cuMemHostAlloc({nbytes})"))
            dev = int(_check(d.cuMemHostGetDevicePointer(host, 0), "cuMemHostGetDevicePointer"))
            ctypes.memset(host, POISON, nbytes)
            return CudaMemory(dev, nbytes, space, host)
        if space != "device":
            raise HipepError(f"unknown memory space {space!r}")
        ptr = int(_check(d.cuMemAlloc(nbytes), f"cuMemAlloc({nbytes})"))
        # Poisoned like the CPU device's memory, so a read of storage nothing wrote shows. On the
        # device's own stream, waited for here: the legacy stream would not order it before the
        # non-blocking streams' work, and a context-wide sync fails while another thread's
        # stream is capturing a CUDA graph.
        aux = self._aux()
        _check(d.cuMemsetD8Async(ptr, POISON, nbytes, aux), "cuMemsetD8Async")
        _check(d.cuStreamSynchronize(aux), "cuStreamSynchronize")
        return CudaMemory(ptr, nbytes, space)

    def _aux(self):
        """The device's own stream for allocation-time work (poisoning, constant uploads)."""
        if self._aux_stream is None:
            d = _driver()
            with self._lock:
                if self._aux_stream is None:
                    self._aux_stream = _check(d.cuStreamCreate(d.CUstream_flags.CU_STREAM_NON_BLOCKING),
                                              "cuStreamCreate")
        return self._aux_stream

    def free(self, memory: Any) -> None:
        if not isinstance(memory, CudaMemory) or memory.freed or not memory.nbytes:
            return
        d = _driver()
        self._current()
        memory.freed = True
        with self._lock:
            fin = self._finalizers.pop(id(memory), None)
            address = memory.host_ptr if memory.host_visible else memory.ptr
            live = address in self._live
            self._live.discard(address)
        if fin is not None:
            fin.detach()
        if not live:  # released already (see _live)
            return
        with self._capture_lock:
            if memory.host_visible:
                _check(d.cuMemFreeHost(memory.host_ptr), "cuMemFreeHost")
            else:
                _check(d.cuMemFree(memory.ptr), "cuMemFree")

    def _release_pending(self) -> None:
        """Frees uploads whose numpy arrays died and allocations nothing views any more (their
        finalizers only queue them: a finalizer may run on any thread, at any time)."""
        with self._lock:
            released, self._released = self._released, []
        for m in released:
            self.free(m)

    def view(self, memory: CudaMemory, offset: int, dtype, shape) -> DeviceArray:
        dtype = np.dtype(dtype)
        shape = tuple(int(d) for d in shape)
        n = 1
        for s in shape:
            n *= s
        nbytes = n * dtype.itemsize
        if offset < 0 or offset + nbytes > memory.nbytes:
            raise HipepError(f"view of {nbytes} bytes at offset {offset} exceeds an allocation of "
                             f"{memory.nbytes} bytes")
        return DeviceArray(memory, memory.ptr + offset, shape, dtype)

    def wrap(self, array: Any) -> Any:
        """Memory ORT owns as a kernel argument: device arrays as they are; host arrays are
        registered with the driver (pinned and mapped in place), so kernels read and write them
        directly, over the bus."""
        if isinstance(array, DeviceArray) or array is None:
            return array
        a = np.asarray(array)
        if not a.flags.c_contiguous:
            raise HipepError("wrap: host memory must be C-contiguous")
        if a.nbytes == 0:
            return DeviceArray(None, 0, a.shape, a.dtype)
        d = _driver()
        self._current()
        addr = a.ctypes.data
        (err,) = d.cuMemHostRegister(addr, a.nbytes, d.CU_MEMHOSTREGISTER_DEVICEMAP)
        if err == d.CUresult.CUDA_SUCCESS:
            weakref.finalize(a, _unregister, addr)
        elif err != d.CUresult.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:  # already pinned: used as it is
            _check((err,), "cuMemHostRegister")
        dev = int(_check(d.cuMemHostGetDevicePointer(addr, 0), "cuMemHostGetDevicePointer"))
        mem = CudaMemory(dev, a.nbytes, "host_visible", addr)
        mem.freed = True  # ORT's memory: never freed by hipep, only unregistered
        return DeviceArray(mem, dev, a.shape, a.dtype)

    def copy(self, dst: CudaMemory, dst_offset: int, src: CudaMemory, src_offset: int, nbytes: int) -> None:
        if nbytes <= 0:
            return
        self._current()
        _check(_driver().cuMemcpy(dst.ptr + dst_offset, src.ptr + src_offset, nbytes), "cuMemcpy")

    def copy_async(self, stream: CudaStream, dst: Any, src: Any, label: str = "copy") -> None:
        if dst.nbytes != src.nbytes:
            raise HipepError(f"{label}: copies {src.nbytes} bytes into {dst.nbytes}")
        n = dst.nbytes
        if n == 0 or stream.failed:
            return
        d = _driver()
        self._current()
        if isinstance(dst, DeviceArray) and isinstance(src, DeviceArray):
            res = d.cuMemcpyAsync(dst.ptr, src.ptr, n, stream.handle)
        elif isinstance(dst, DeviceArray):
            src = np.ascontiguousarray(src)
            res = d.cuMemcpyHtoDAsync(dst.ptr, src.ctypes.data, n, stream.handle)
        elif isinstance(src, DeviceArray):
            if not (isinstance(dst, np.ndarray) and dst.flags.c_contiguous and dst.flags.writeable):
                raise HipepError(f"{label}: the destination must be a writable C-contiguous array")
            res = d.cuMemcpyDtoHAsync(dst.ctypes.data, src.ptr, n, stream.handle)
        else:
            stream.sync()
            np.copyto(np.asarray(dst).reshape(-1).view(np.uint8), np.asarray(src).reshape(-1).view(np.uint8))
            return
        if res[0] != d.CUresult.CUDA_SUCCESS:
            stream.record_failure(CudaError(f"{label}: copy of {n} bytes failed: {_error_text(res[0])}"))
        else:
            stream.issued(label)

    def _upload_to(self, stream: CudaStream, dst: DeviceArray, src: np.ndarray) -> None:
        """Queues host bytes into device memory on `stream` (pageable source: the driver stages
        it before returning, so `src` may go right after)."""
        self.copy_async(stream, dst, np.ascontiguousarray(src, dtype=dst.dtype), "host step result")

    def _device_constant(self, a: np.ndarray) -> DeviceArray:
        """The device copy of a plan constant or held weight (made once per array: they are
        read-only and live as long as their executor)."""
        key = id(a)
        with self._lock:
            hit = self._uploads.get(key)
        if hit is not None and hit[0]() is a:
            return hit[1]
        src = np.ascontiguousarray(a)
        mem = self.alloc("device", max(src.nbytes, 1))
        d = _driver()
        if src.nbytes:
            aux = self._aux()
            _check(d.cuMemcpyHtoDAsync(mem.ptr, src.ctypes.data, src.nbytes, aux), "cuMemcpyHtoDAsync")
            _check(d.cuStreamSynchronize(aux), "cuStreamSynchronize")
        arr = DeviceArray(mem, mem.ptr, a.shape, a.dtype)
        try:
            ref = weakref.ref(a)
            weakref.finalize(a, self._forget_upload, key, mem)
        except TypeError:  # not weak-referenceable: kept for the device's life
            ref = lambda keep=a: keep  # noqa: E731
        with self._lock:
            self._uploads[key] = (ref, arr)
        return arr

    def _forget_upload(self, key: int, mem: CudaMemory) -> None:
        with self._lock:
            entry = self._uploads.get(key)
            if entry is not None and entry[1].memory is mem:
                del self._uploads[key]
            self._released.append(mem)

    def _scratch(self, nbytes: int) -> int:
        """Device memory for results nobody reads (kernels still write them). Grown, never
        shrunk; old buffers stay allocated, since captured launches may point at them."""
        with self._lock:
            if not self._scratch_mem or self._scratch_mem[-1].nbytes < nbytes:
                self._scratch_mem.append(self.alloc("device", max(nbytes, 1 << 16)))
            return self._scratch_mem[-1].ptr

    def stream_target(self, stream: CudaStream, label: str = "") -> table.Target:
        """The device's Target with a workspace private to `stream`, and fault reports into the
        stream's fault record naming the launch `label`."""
        def fault(what: str) -> FaultSite:
            return FaultSite(stream.fault_record.ptr, self.fault_sites.site(label or "a launch", what))

        return dataclasses.replace(self.target, workspace=lambda nbytes: self._workspace(stream, nbytes), fault=fault)

    def _workspace(self, stream: CudaStream, nbytes: int) -> int:
        """Device memory for a launch's intermediate results (split-KV partials, rotated queries),
        private to `stream`, so runs in flight on other streams never share it; launches on one
        stream run in order and share it. Grown, never freed while the stream lives: captured
        launches and CUDA graphs keep the address of every buffer handed out."""
        if not stream.workspace or stream.workspace[-1].nbytes < nbytes:
            stream.workspace.append(self.alloc("device", max(nbytes, 1 << 16)))
        return stream.workspace[-1].ptr

    def _arg(self, a):
        if a is None:
            return None
        if isinstance(a, DeviceArray):
            return table.Arg(a.ptr, a.shape, a.dtype, a.host_view() if a.host_visible else None)
        if isinstance(a, np.ndarray):
            da = self._device_constant(a)
            return table.Arg(da.ptr, a.shape, a.dtype, a, constant=True)
        raise HipepError(f"a kernel argument of type {type(a).__name__}")

    # ---- ORT's memory --------------------------------------------------------------------------

    def _staging(self, stream: CudaStream, role: str, position: int, nbytes: int) -> CudaMemory:
        key = (role, position)
        mem = stream.staging.get(key)
        if mem is None or mem.nbytes < nbytes:
            if mem is not None:
                stream.sync()  # the old buffer may still be read by the stream's work
                self.free(mem)
            mem = stream.staging[key] = self.alloc("device", max(nbytes, 256))
        return mem

    def wrap_device_memory(self, ptr: int, shape, dtype) -> OrtDeviceArray:
        """ORT's tensor at `ptr` in this GPU's device memory (Compute hands those over when the
        EP device offers device memory): a kernel argument as it is, no copy."""
        return OrtDeviceArray(self, ptr, shape, dtype)

    def stage_input(self, stream: CudaStream, position: int, array: Any) -> Any:
        if isinstance(array, DeviceArray) or array is None:
            return array
        a = np.ascontiguousarray(array)
        mem = self._staging(stream, "in", position, a.nbytes)
        dst = DeviceArray(mem, mem.ptr, a.shape, a.dtype)
        self.copy_async(stream, dst, a, f"input {position}")
        stream.staged_inputs.append((a.ctypes.data, a.nbytes, dst))
        return dst

    def stage_output(self, stream: CudaStream, position: int, array: Any) -> Any:
        if isinstance(array, DeviceArray) or array is None:
            return array
        a = np.asarray(array)
        addr = a.ctypes.data
        for host, nbytes, staged in stream.staged_inputs:
            if host == addr and nbytes == a.nbytes and a.nbytes:
                # ORT gave the output in an input's memory (an in-place pair): kernels update
                # the input's device copy, which goes back into that memory at the end.
                return DeviceArray(staged.memory, staged.ptr, a.shape, a.dtype)
        mem = self._staging(stream, "out", position, a.nbytes)
        return DeviceArray(mem, mem.ptr, a.shape, a.dtype)

    def finish_outputs(self, stream: CudaStream, staged: list, arrays: list) -> None:
        for s, a in zip(staged, arrays):
            if isinstance(s, DeviceArray) and isinstance(a, np.ndarray) and a.nbytes:
                self.copy_async(stream, a, s, "output copy")
        stream.sync()

    # ---- streams -------------------------------------------------------------------------------

    def new_stream(self) -> CudaStream:
        return CudaStream(self)

    # ---- programs ------------------------------------------------------------------------------

    def compile(self, kernel: Kernel) -> CudaProgram:
        key = (kernel.name, kernel.label, kernel.arity, kernel.dtypes, freeze(kernel.constants))
        with self._lock:
            program = self._programs.get(key)
        if program is not None:
            return program
        binding = table.binding_for(kernel.name)
        if binding is None:
            outs = [d for d in kernel.dtypes[kernel.arity:] if d]
            if any(np.dtype(d).kind not in "biu" for d in outs):
                # Only integer shape arithmetic can run as host work: this is a device op.
                raise table.NoKernel(f"{kernel.label or kernel.name}: no kernel for cuda: {kernel.name.lstrip(':')}")
        program = CudaProgram(self, kernel, binding)
        if binding is not None:
            for module in binding.modules:
                self._module(module)
        with self._lock:
            self._programs[key] = program
        return program

    def _module(self, name: str, source: str | None = None):
        """The loaded module of kernels/<name>.hip, or of a generated `source` named `name`."""
        key = name if source is None else f"src:{name}"
        with self._lock:
            module = self._modules.get(key)
        if module is not None:
            return module
        text = kernel_cache.module_source(name) if source is None else source
        cubin, _ = kernel_cache.compile_cubin(text, name, self.arch, self.defines)
        self._current()
        with self._capture_lock:
            module = _check(_driver().cuModuleLoadData(cubin), f"cuModuleLoadData({name})")
        with self._lock:
            self._modules.setdefault(key, module)
            return self._modules[key]

    def _function(self, op: table.KernelOp):
        key = (op.module or f"src:{op.entry}", op.entry)
        with self._lock:
            f = self._functions.get(key)
        if f is None:
            module = self._module(op.module) if op.module else self._module(op.entry, op.source)
            f = _check(_driver().cuModuleGetFunction(module, op.entry.encode()), f"cuModuleGetFunction({op.entry})")
            with self._lock:
                self._functions[key] = f
        return f

    def _ready(self, op):
        if isinstance(op, table.CopyOp):
            return _Copy(op)
        if isinstance(op, table.BlasOp):
            return _Blas(op)
        return _Launch(self._function(op), op)

    def launch(self, stream: CudaStream, program: CudaProgram, grid, block, smem, args, label: str = "") -> None:
        """Binds and issues one launch now (the binding chooses the configuration: `grid`,
        `block` and `smem` from the plan are not used)."""
        label = label or program.label
        self._current()
        try:
            ops = program.bind(list(args), stream)
        except HipepError as e:
            raise named_error(label, e) from None
        self._issue(stream, ops, label)

    def _issue(self, stream: CudaStream, ops: list, label: str) -> None:
        if stream.failed:
            return
        for op in ops:
            op.issue(stream, label)
            stream.issued(label)
            if stream.failed:
                return
        if self.sync_launches and ops:
            try:
                stream._wait_idle()
            except HipepError as e:
                stream.record_failure(named_error(label, e))

    # ---- capture and replay ----------------------------------------------------------------------

    def replay(self, stream: CudaStream, graph: Graph, patches: list) -> None:
        self._current()
        state = getattr(graph, "_cuda_state", None)
        if state is None or state.n != len(graph.nodes):
            state = _GraphState(graph)
            graph._cuda_state = state
        # Launches whose arguments a patch really changed (ORT's memory is staged through stable
        # buffers, so most runs change none) are bound again; the others replay as bound.
        dirty: set[int] = set()
        for node, k, new in patches:
            check_patch(node, k, new)
            old = node.args[k]
            if old is None or _arg_signature(old, False) != _arg_signature(new, False):
                dirty.add(state.index.get(id(node), -1))
            node.args[k] = new
        d = _driver()
        start, end = stream.timing_events()
        d.cuEventRecord(start, stream.handle)
        try:
            for kind, item in state.plan:
                if kind == "launch":
                    self._run_segment(stream, graph, state, item, dirty)
                elif kind == "host":
                    node = graph.nodes[item]
                    stream.run_host(node.label, lambda node=node: _host_call(node, stream))
                else:
                    stream.sync()
        finally:
            d.cuEventRecord(end, stream.handle)
            stream._timing.append((start, end))

    def _run_segment(self, stream: CudaStream, graph: Graph, state: _GraphState, seg: _Segment,
                     dirty: set) -> None:
        if stream.failed:
            return
        rebind = not seg.bound or seg.reads_values or any(i in dirty for i in seg.nodes)
        if not rebind and seg.exec is not None and seg.captured == seg.last:
            self._launch_graph(stream, seg)  # the common case: one call for the whole segment
            return
        work: list[tuple[str, list]] = []
        for i in seg.nodes:
            node = graph.nodes[i]
            st = state.nodes[i]
            if not rebind or not (st.sig is None or st.reads_values or i in dirty):
                work.append((node.label, st.ops))
                continue
            try:
                ops = st.prepare(node.args, stream)
            except HipepError as e:
                raise named_error(node.label, e) from None
            except Exception as e:  # noqa: BLE001 - a binding's bug still names its node
                raise HipepError(f"{node.label}: {type(e).__name__}: {e}") from e
            work.append((node.label, ops))
        seg.bound = True
        versions = tuple(state.nodes[i].version for i in seg.nodes)
        count = sum(len(ops) for _, ops in work)
        if not self.use_graphs or self.sync_launches or seg.direct or count < _GRAPH_MIN_LAUNCHES:
            for label, ops in work:
                self._issue(stream, ops, label)
            return
        if seg.exec is not None and seg.captured == versions:
            seg.last = versions
            self._launch_graph(stream, seg)
            return
        stable = seg.last == versions
        seg.last = versions
        if not stable:
            for label, ops in work:
                self._issue(stream, ops, label)
            return
        self._capture_segment(stream, seg, work, versions)

    def _capture_segment(self, stream: CudaStream, seg: _Segment, work, versions) -> None:
        d = _driver()
        seg.release()
        seg.captures += 1
        if seg.captures > _GRAPH_MAX_CAPTURES:
            seg.direct = True
        graph = None
        try:
            with self._capture_lock:
                graph, failed = self._record(stream, work)
            if failed is not None:
                raise CudaError(f"{failed[0]}: capture failed: {_error_text(failed[1])}")
            seg.exec = _check(d.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
            seg.captured = versions
        except HipepError as e:
            log.debug("hipep: cuda graph capture failed, launching directly: %s", e)
            seg.direct = True
            seg.release()
            for label, ops in work:
                self._issue(stream, ops, label)
            return
        finally:
            if graph is not None:
                d.cuGraphDestroy(graph)
        self._launch_graph(stream, seg)

    @staticmethod
    def _record(stream: CudaStream, work):
        """Captures `work` on `stream` into a CUDA graph: (graph, the first launch that failed)."""
        d = _driver()
        _check(d.cuStreamBeginCapture(stream.handle, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
               "cuStreamBeginCapture")
        failed = None
        try:
            for label, ops in work:
                for op in ops:
                    if isinstance(op, _Launch):
                        g, b = op.grid, op.block
                        (err,) = d.cuLaunchKernel(op.func, g[0], g[1], g[2], b[0], b[1], b[2], op.smem, stream.handle,
                                                  op.argv_addr, 0)
                    elif isinstance(op, _Blas):
                        why = op.call(int(stream.handle))
                        err = d.CUresult.CUDA_SUCCESS if why is None else why  # _error_text shows a text as it is
                    else:
                        (err,) = d.cuMemcpyAsync(op.dst, op.src, op.nbytes, stream.handle)
                    if err != d.CUresult.CUDA_SUCCESS and failed is None:
                        failed = (label, err)
        finally:
            graph = _check(d.cuStreamEndCapture(stream.handle), "cuStreamEndCapture")  # always leaves capture mode
        return graph, failed

    def _launch_graph(self, stream: CudaStream, seg: _Segment) -> None:
        d = _driver()
        (err,) = d.cuGraphLaunch(seg.exec, stream.handle)
        if err != d.CUresult.CUDA_SUCCESS:
            stream.record_failure(CudaError(f"{seg.label}: CUDA graph launch failed: {_error_text(err)}"))
        stream.issued(seg.label)

    # ---- time ----------------------------------------------------------------------------------

    def kernel_ns(self, stream: CudaStream) -> int:
        d = _driver()
        total = 0.0
        for start, end in stream._timing:
            if d.cuEventSynchronize(end)[0] == d.CUresult.CUDA_SUCCESS:
                err, ms = d.cuEventElapsedTime(start, end)
                if err == d.CUresult.CUDA_SUCCESS:
                    total += ms
            stream._event_pool += [start, end]
        stream._timing = []
        return int(total * 1e6)


def _host_call(node, stream: CudaStream):
    try:
        node.program.run_host(node.args, stream)
    except HipepError as e:
        raise named_error(node.label, e) from None
    except Exception as e:  # noqa: BLE001 - named like the CPU device's host work
        raise HipepError(f"{node.label}: {type(e).__name__}: {e}") from e


def _unregister(addr: int) -> None:
    try:
        _driver().cuMemHostUnregister(addr)
    except Exception:  # noqa: BLE001
        pass


# One device object per GPU in a process: sessions share its compiled modules and uploads.
_DEVICES: dict[int, CudaDevice] = {}


def get_device(device_id: int = 0) -> CudaDevice:
    with _INIT_LOCK:
        dev = _DEVICES.get(device_id)
        if dev is None:
            dev = _DEVICES[device_id] = CudaDevice(device_id)
        return dev
