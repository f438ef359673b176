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

This module holds the device itself (`CudaDevice`, `get_device`); its parts live beside it and
are re-exported here: the driver and its errors (cuda_driver), memory objects (cuda_memory),
streams and events (cuda_stream), programs and the replay of captured graphs (cuda_graphs).
"""
from __future__ import annotations

import ctypes
import dataclasses
import logging
import os
import threading
import weakref
from typing import Any, Iterable

import ml_dtypes  # noqa: F401  (registers numpy's 'bfloat16' dtype name)
import numpy as np

from ..errors import HipepError
from ..options import env_flag
from . import gpu_kernels as table  # (first: the table imports the binding modules, gpu_linalg among them)
from . import cublaslt, gpu_linalg, kernel_cache
from .gpu_binding_core import NoKernel
from .gpu_faults import FAULT_RECORD_BYTES, FaultSite, FaultSites, take_fault  # noqa: F401
from .device import Device, Event, Graph, Kernel, Stream, check_patch, freeze, named_error  # noqa: F401
from .cuda_driver import (_DRIVER, _INIT_LOCK, _STICKY, CudaError, _check, _driver, _error_text,  # noqa: F401
                          cuda_available, cuda_status)
from .cuda_memory import CudaMemory, DeviceArray, OrtDeviceArray  # noqa: F401
from .cuda_stream import _RECENT_LABELS, CudaEvent, CudaStream, workspace_bytes  # noqa: F401
from .cuda_graphs import (_arg_signature, _Blas, _Copy, _GraphState, _Launch, _NodeState,  # noqa: F401
                          _Segment, CudaProgram, GraphReplay, _GRAPH_MAX_CAPTURES, _GRAPH_MIN_LAUNCHES)

log = logging.getLogger("hipep")

POISON = 0xFF  # fresh memory reads as NaN / -1, as on the CPU device


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


# ---- the device ---------------------------------------------------------------------------------

# Modules whose bindings may hand a product to cuBLASLt (gpu_linalg's GEMMs, MatMulNBits' prompts).
_BLAS_MODULES = frozenset({"gemm", "matmul_nbits_dequant"})


def _blas_may_run() -> bool:
    """Whether HIPEP_GEMM lets products reach cuBLASLt (a bad value is the bindings' to report)."""
    try:
        return gpu_linalg.gemm_mode() != "own"
    except HipepError:
        return False


def _binding_modules(binding, kernel: Kernel) -> list[str]:
    """The modules a kernel's binding loads: those compiled per element type (kernel_cache.TYPED_MODULES)
    for the kernel's first input's type."""
    if binding is None:
        return []
    tag = kernel_cache.TYPE_TAGS.get(kernel.dtypes[0], "") if kernel.dtypes else ""
    return [kernel_cache.typed_module(m, tag) for m in binding.modules]


class CudaDevice(GraphReplay, Device):
    name = "cuda"
    array_types = (DeviceArray, OrtDeviceArray)

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
        self.target = table.Target(sm_count=self.sm_count, warp_size=self.warp_size, scratch=self._scratch,
                                   tensor_cores=self.capability >= (8, 0) and self.warp_size == 32)
        self.sync_launches = env_flag("HIPEP_CUDA_SYNC", False)
        self.use_graphs = env_flag("HIPEP_CUDA_GRAPHS", True)
        # A captured launch whose arguments changed (a growing attention mask's length, memory ORT
        # moved) is updated in its graph's executable instead of the segment running launch by
        # launch until it is captured again; HIPEP_CUDA_GRAPH_UPDATE=0 turns that off.
        self.update_graphs = env_flag("HIPEP_CUDA_GRAPH_UPDATE", True)
        # Kernels that wait for their predecessor in their own code start early (programmatic
        # dependent launch, compute capability 9.0 and newer): KernelOp.overlaps_previous.
        self.overlap_launches = self.capability >= (9, 0) and env_flag("HIPEP_CUDA_OVERLAP", True)
        spin = _debug_spin_setting()  # (op type, clock cycles): microseconds at the reported clock (kHz)
        self.debug_spin = None if spin is None else (
            spin[0], int(spin[1] * attr(A.CU_DEVICE_ATTRIBUTE_CLOCK_RATE) / 1000))
        self._lock = threading.RLock()
        self._modules: dict[str, Any] = {}
        self._module_locks: dict[str, threading.Lock] = {}  # one load of each module at a time (_module)
        self.preloads: list[threading.Thread] = []  # the background loads sessions started (prepare_kernels)
        self._functions: dict[tuple[str | None, str, str], Any] = {}  # (module, element type, entry)
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

    def alloc(self, space: str, nbytes: int, fill: int = POISON) -> CudaMemory:
        """`nbytes` of `space`, every byte `fill` (by default poisoned: see _alloc)."""
        nbytes = int(nbytes)
        if nbytes <= 0:
            return CudaMemory(0, 0, space)
        self._current()
        self._release_pending()
        with self._capture_lock:
            mem = self._alloc(space, nbytes, fill)
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

    def _alloc(self, space: str, nbytes: int, fill: int) -> CudaMemory:
        d = _driver()
        if space == "host_visible":
            flags = d.CU_MEMHOSTALLOC_DEVICEMAP | d.CU_MEMHOSTALLOC_PORTABLE
            host = int(_check(d.cuMemHostAlloc(nbytes, flags), f"cuMemHostAlloc({nbytes})"))
            dev = int(_check(d.cuMemHostGetDevicePointer(host, 0), "cuMemHostGetDevicePointer"))
            ctypes.memset(host, fill, nbytes)
            return CudaMemory(dev, nbytes, space, host)
        if space != "device":
            raise HipepError(f"unknown memory space {space!r}")
        ptr = int(_check(d.cuMemAlloc(nbytes), f"cuMemAlloc({nbytes})"))
        # Poisoned like the CPU device's memory, so a read of storage nothing wrote shows. On the
        # device's own stream, waited for here: the legacy stream would not order it before the
        # non-blocking streams' work, and a context-wide sync fails while another thread's
        # stream is capturing a CUDA graph.
        aux = self._aux()
        _check(d.cuMemsetD8Async(ptr, fill, nbytes, aux), "cuMemsetD8Async")
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
        d = _driver()
        # cuMemcpy between device allocations returns before the copy ends, and work queued next
        # on a non-blocking stream does not wait for the legacy stream it ran on: finish it here.
        _check(d.cuMemcpyAsync(dst.ptr + dst_offset, src.ptr + src_offset, nbytes, d.CUstream(0)), "cuMemcpyAsync")
        _check(d.cuStreamSynchronize(d.CUstream(0)), "cuStreamSynchronize")

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

    def subview(self, array: Any, offset: int, dtype, shape) -> Any:
        if not isinstance(array, DeviceArray):
            return super().subview(array, offset, dtype, shape)
        view = DeviceArray(array.memory, array.ptr + offset, shape, dtype)
        if offset < 0 or offset + view.nbytes > array.nbytes:
            raise HipepError(f"a view of {view.nbytes} bytes at offset {offset} exceeds a device array of "
                             f"{array.nbytes} bytes")
        return view

    def read(self, stream: CudaStream, array: Any) -> np.ndarray:
        if not isinstance(array, DeviceArray):
            return super().read(stream, array)
        if array.host_visible:
            return np.array(array.host_view())
        out = np.empty(array.shape, array.dtype)
        self.copy_async(stream, out, array, "host read")
        stream.sync()
        return out

    def run_host_step(self, stream: CudaStream, program: CudaProgram, args: list) -> None:
        program.run_host(args, stream)

    def _upload_to(self, stream: CudaStream, dst: DeviceArray, src: np.ndarray) -> None:
        """Queues host bytes into device memory on `stream` (pageable source: the driver stages
        it before returning, so `src` may go right after)."""
        self.copy_async(stream, dst, np.ascontiguousarray(src, dtype=dst.dtype), "host step result")

    def prepare_constants(self, arrays) -> None:
        """Uploads them now (each copy kept while its array lives: _device_constant)."""
        self._current()
        for a in arrays:
            self._device_constant(a)

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

    def stream_target(self, stream: CudaStream, label: str = "", first_run: bool = False) -> table.Target:
        """The device's Target with a workspace private to `stream`, and fault reports into the
        stream's fault record naming the launch `label` (made once per stream and label: launches
        bound again every run, a decode step's, ask for it each time); `first_run`: for a segment's
        first run (Target.first_run)."""
        if first_run:
            target = stream.targets.get((label, True))
            if target is None:
                target = stream.targets[(label, True)] = dataclasses.replace(self.stream_target(stream, label),
                                                                              first_run=True)
            return target
        target = stream.targets.get(label)
        if target is not None:
            return target
        # The stream keeps its targets: they reach it only weakly, so that a stream no run holds
        # any more is freed (its memory with it) as soon as it is dropped, not at a cycle collection.
        record, ref = stream.fault_record.ptr, weakref.ref(stream)

        def fault(what: str) -> FaultSite:
            return FaultSite(record, self.fault_sites.site(label or "a launch", what))

        target = dataclasses.replace(self.target, workspace=lambda nbytes: self._workspace(ref(), nbytes), fault=fault,
                                     counters=lambda nbytes: self._launch_counters(ref(), label, nbytes))
        stream.targets[label] = target
        return target

    def _launch_counters(self, stream: CudaStream, label: str, nbytes: int) -> int:
        """Device memory for the arrival counters of launch `label` on `stream` (Target.counters):
        zeroed once when made; the kernels that count in it leave it zero. Launches on one stream
        run in order, so even two launches sharing a label share it safely. Grown, never freed
        while the stream lives (captured launches keep its address)."""
        held = stream.counters.setdefault(label, [])
        if not held or held[-1].nbytes < nbytes:
            held.append(self.alloc("device", max(nbytes, 256), fill=0))
        return held[-1].ptr

    def _workspace(self, stream: CudaStream, nbytes: int) -> int:
        """Device memory for a launch's intermediate results (split-KV partials, rotated queries),
        private to `stream`, so runs in flight on other streams never share it; launches on one
        stream run in order and share it. Grown, never freed while the stream lives: captured
        launches and CUDA graphs keep the address of every buffer handed out."""
        if not stream.workspace or stream.workspace[-1].nbytes < nbytes:
            last = stream.workspace[-1].nbytes if stream.workspace else 0
            stream.workspace.append(self.alloc("device", workspace_bytes(last, nbytes)))
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
        a = np.asarray(array, order="C")  # (ascontiguousarray would make a 0-d input 1-d)
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

    def prepare_kernels(self, kernels: Iterable[Kernel]) -> None:
        """Compiles the kernels/*.hip modules the kernels' bindings use and this process has not
        loaded, on background threads, the largest sources first (kernel_cache.compile_in_background).
        A module takes from a fraction of a second to most of a minute, so on a machine whose
        kernel cache is empty the first run waits for the slowest module instead of for the sum
        of all of them. Then loads them, and cuBLASLt, on another (_preload). Kernels without a
        GPU program are left for compile() to report."""
        names: set[str] = set()
        for kernel in kernels:
            try:
                binding = table.program_binding(kernel)
            except NoKernel:
                continue
            names.update(_binding_modules(binding, kernel))
        blas = any(n.partition("@")[0] in _BLAS_MODULES for n in names)
        with self._lock:
            names -= {k for k in self._modules if not k.startswith("src:")}
        sources = sorted(((n, kernel_cache.module_source(n)) for n in names), key=lambda s: -len(s[1]))
        todo = [(n, src) for n, src in sources if not kernel_cache.is_cached(src, self.arch, self.defines)]
        if todo:
            log.info("compiling %d GPU kernel module(s) for %s in the background (%s); kept in %s for later "
                     "sessions (`python -m hipep precompile` compiles them all ahead)", len(todo), self.arch,
                     ", ".join(n for n, _ in todo), kernel_cache.cache_dir())
            kernel_cache.compile_in_background(todo, self.arch, self.defines)
        compiling = {n for n, _ in todo}
        # the cached modules first: a module still compiling is waited for where it comes
        self._preload([n for n, _ in sources if n not in compiling] + [n for n, _ in todo], blas)

    def _preload(self, names: list[str], blas: bool) -> None:
        """Loads modules into the device's context, and cuBLASLt where `blas` says the plan's
        products may call it, on a daemon thread while the session is being made and the caller
        readies its first run, which otherwise does it all itself, on its critical path (on the
        H100 machine, the ~1.1B llama's first prompt spent ~60 ms reading, hashing and loading
        cached modules and 63 ms loading cuBLASLt). The driver and the loader release the GIL
        while they work. A module that fails to load is left for the binding that needs it to
        raise; a run that needs a module being loaded waits for that load (_module)."""
        blas = blas and not cublaslt.tried() and _blas_may_run()
        if not names and not blas:
            return

        def work():
            for name in names:
                try:
                    self._module(name)
                except Exception:  # noqa: BLE001 - raised again where the kernel is bound
                    pass
            if blas:
                cublaslt.status()

        thread = threading.Thread(target=work, name="hipep-module-load", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # no new threads (interpreter shutdown): the bindings load what they need
            return
        with self._lock:
            self.preloads = [t for t in self.preloads if t.is_alive()] + [thread]

    def compile(self, kernel: Kernel) -> CudaProgram:
        key = (kernel.name, kernel.label, kernel.arity, kernel.dtypes, freeze(kernel.constants))
        with self._lock:
            program = self._programs.get(key)
        if program is not None:
            return program
        binding = table.program_binding(kernel)
        program = CudaProgram(self, kernel, binding)
        for module in _binding_modules(binding, kernel):
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
            loading = self._module_locks.setdefault(key, threading.Lock())
        with loading:  # a load in flight on another thread (a session's preload) is waited for
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
                self._modules[key] = module
            return module

    def _function(self, op: table.KernelOp):
        # (keyed by what the op names, read without the lock: a dict lookup is atomic, and a new
        # prompt length asks for every launch's function again)
        key = (op.module, op.element_type, op.entry)
        f = self._functions.get(key)
        if f is None:
            module_name = kernel_cache.typed_module(op.module, op.element_type) if op.module else None
            module = self._module(module_name) if module_name else self._module(op.entry, op.source)
            f = _check(_driver().cuModuleGetFunction(module, op.entry.encode()), f"cuModuleGetFunction({op.entry})")
            with self._lock:
                self._functions[key] = f
        return f

    def _ready(self, op):
        if isinstance(op, table.CopyOp):
            return _Copy(op)
        if isinstance(op, table.BlasOp):
            return _Blas(op)
        return _Launch(self._function(op), op, self.overlap_launches)

    def launch(self, stream: CudaStream, program: CudaProgram, args, label: str = "") -> None:
        """Binds and issues one launch now (the binding chooses the configuration). The stream keeps
        the program's recent bindings by argument signature (_NodeState), as replay does: a loop's
        body launches the same way every iteration, and binding again would cost more host time
        than the launch."""
        label = label or program.label
        self._current()
        state = stream.bound.get(program)
        if state is None:
            state = stream.bound[program] = _NodeState(program)
        try:
            ops = state.prepare(list(args), stream)
        except HipepError as e:
            raise named_error(label, e) from None
        self._issue(stream, ops, label)
        if stream.failed:  # a launch the driver refused: the next one binds afresh
            stream.bound.pop(program, None)

    def _issue(self, stream: CudaStream, ops: list, label: str) -> None:
        if stream.failed:
            return
        for op in ops:
            op.issue(stream, label)
            stream.issued(label)
            stream.counts[0] += 1
            if stream.failed:
                return
        if self.sync_launches and ops:
            try:
                stream._wait_idle()
            except HipepError as e:
                stream.record_failure(named_error(label, e))

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
