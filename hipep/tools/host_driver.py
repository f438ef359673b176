"""A stand-in for cuda-bindings' driver module on host memory: hipep's cuda device, whole, without a GPU.

    from hipep.tools import host_driver
    host_driver.install()          # before the first session on device="cuda"

The cuda device (hipep.runtime.cuda) and everything above it run as on a GPU -- kernels compiled by
NVRTC for the stand-in's architecture (sm_90 by default), launches bound, segments captured into
"graphs", graph nodes updated, memory allocated, copied and poisoned -- but a device pointer is a
host address and a kernel launch runs nothing. Copies and memsets do run (at once, or when a graph
replays them), so host-visible values staged by copies read back as they would on a GPU; a value
a kernel would compute keeps whatever the memory held.

What it is for: measuring and testing the host side of the cuda device where there is no GPU
(benchmarks/decode_host.py --host-driver, tests/unit/test_host_driver.py): how many launches, graph
launches and node updates a decode step makes, and the host time hipep's own code takes per step.
Driver calls here cost a Python call each, less than the real driver's, so host times measured
through the stand-in are hipep's share of a step, not the whole of it.

install() also sets HIPEP_EMULATE_GPU_MEMORY=addresses (unless set): when ORT loads the plugin
after it, the plugin offers ORT "GPU" memory that is host memory (csrc/gpu_runtime.cc) and hands
tensors in it to the cuda device as device addresses, as on a GPU; the stand-in reads and writes
them as the host addresses they are. Not thread-safe beyond what the cuda device itself
serializes; one stand-in per process.
"""
from __future__ import annotations

import ctypes
import enum
import itertools
import os
from types import SimpleNamespace

# The stand-in device's attributes: an H200's (sm_90, 132 SMs, 50 MiB of L2 as the driver reports it)
ARCH = (9, 0)
ATTRIBUTES = {"COMPUTE_CAPABILITY_MAJOR": ARCH[0], "COMPUTE_CAPABILITY_MINOR": ARCH[1],
              "MULTIPROCESSOR_COUNT": 132, "WARP_SIZE": 32, "L2_CACHE_SIZE": 50 << 20,
              "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 227 << 10, "MAX_SHARED_MEMORY_PER_BLOCK": 48 << 10,
              "MAX_THREADS_PER_BLOCK": 1024, "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 228 << 10,
              "MAX_REGISTERS_PER_BLOCK": 65536, "CAN_MAP_HOST_MEMORY": 1, "UNIFIED_ADDRESSING": 1}
NAME = b"host stand-in"
DRIVER_VERSION = 13000
_CONTEXT = 0x10  # the primary context's handle


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_INVALID_HANDLE = 400
    CUDA_ERROR_NOT_FOUND = 500
    CUDA_ERROR_NOT_READY = 600
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900


OK = CUresult.CUDA_SUCCESS


class _Fields:
    """A driver struct (CUlaunchConfig, CUDA_KERNEL_NODE_PARAMS): attributes set by the caller."""

    def __init__(self):
        self.value = SimpleNamespace()


CUdevice_attribute = enum.IntEnum("CUdevice_attribute",
                                  {f"CU_DEVICE_ATTRIBUTE_{k}": i for i, k in enumerate(ATTRIBUTES, 1)})


class Counts:
    """What the stand-in was asked to do, since install() or the last reset()."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.launches = 0          # kernels launched one by one (not through a graph)
        self.captured = 0          # kernel nodes captured into graphs
        self.graph_launches = 0
        self.node_updates = 0
        self.copies = 0            # copies run (one by one or replayed from a graph)
        self.modules = 0


class HostDriver:
    """The driver calls hipep's cuda device makes (hipep.runtime.cuda*), with cuda-bindings' calling
    convention: each returns a tuple whose first item is a CUresult."""

    CUresult = CUresult
    CUdevice_attribute = CUdevice_attribute
    CUstream = int
    CUlaunchAttribute = _Fields
    CUlaunchConfig = _Fields
    CUDA_KERNEL_NODE_PARAMS = _Fields
    CUstream_flags = SimpleNamespace(CU_STREAM_DEFAULT=0, CU_STREAM_NON_BLOCKING=1)
    CUevent_flags = SimpleNamespace(CU_EVENT_DEFAULT=0, CU_EVENT_BLOCKING_SYNC=1, CU_EVENT_DISABLE_TIMING=2)
    CUstreamCaptureMode = SimpleNamespace(CU_STREAM_CAPTURE_MODE_GLOBAL=0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL=1,
                                          CU_STREAM_CAPTURE_MODE_RELAXED=2)
    CUlaunchAttributeID = SimpleNamespace(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION=5)
    CUfunction_attribute = SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES=8)
    CU_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTREGISTER_DEVICEMAP = 1, 2, 2

    def __init__(self):
        self.counts = Counts()
        self._handles = itertools.count(0x1000)
        self._memory: dict[int, ctypes.Array] = {}   # address -> its buffer (device and pinned memory alike)
        self._capturing: dict[int, list] = {}          # stream -> the nodes captured so far
        self._graphs: dict[int, list] = {}             # graph or executable graph -> its nodes
        self._procs: dict[str, object] = {}            # C entry points made by cuGetProcAddress

    def _handle(self) -> int:
        return next(self._handles)

    # ---- the device and its context ----
    def cuInit(self, flags):
        return (OK,)

    def cuDriverGetVersion(self):
        return OK, DRIVER_VERSION

    def cuDeviceGetCount(self):
        return OK, 1

    def cuDeviceGet(self, ordinal):
        return (OK, ordinal) if ordinal == 0 else (CUresult.CUDA_ERROR_INVALID_VALUE, None)

    def cuDeviceGetAttribute(self, attribute, device):
        name = CUdevice_attribute(attribute).name.removeprefix("CU_DEVICE_ATTRIBUTE_")
        return OK, ATTRIBUTES[name]

    def cuDeviceGetName(self, length, device):
        return OK, NAME[:length]

    def cuDevicePrimaryCtxRetain(self, device):
        return OK, _CONTEXT

    def cuCtxSetCurrent(self, ctx):
        return (OK,)

    def cuCtxGetDevice(self):
        return OK, 0

    def cuGetErrorName(self, err):
        return OK, CUresult(err).name.encode() if err in CUresult._value2member_map_ else b"CUDA_ERROR_UNKNOWN"

    def cuGetErrorString(self, err):
        return OK, b"reported by hipep's host stand-in driver"

    # ---- memory: device pointers are host addresses ----
    def _alloc(self, nbytes):
        buf = (ctypes.c_ubyte * max(int(nbytes), 1))()
        addr = ctypes.addressof(buf)
        self._memory[addr] = buf
        return OK, addr

    def cuMemAlloc(self, nbytes):
        return self._alloc(nbytes)

    def cuMemHostAlloc(self, nbytes, flags):
        return self._alloc(nbytes)

    def cuMemHostGetDevicePointer(self, host, flags):
        return OK, int(host)

    def cuMemFree(self, ptr):
        return (OK,) if self._memory.pop(int(ptr), None) is not None else (CUresult.CUDA_ERROR_INVALID_VALUE,)

    cuMemFreeHost = cuMemFree

    def cuMemHostRegister(self, addr, nbytes, flags):
        return (OK,)

    def cuMemHostUnregister(self, addr):
        return (OK,)

    def _queue(self, node, stream):
        """Runs a copy or memset now, or records it into the stream's capture."""
        nodes = self._capturing.get(int(stream))
        if nodes is not None:
            nodes.append(node)
        else:
            self._run(node)
        return (OK,)

    def _run(self, node):
        kind, dst, *rest = node
        if kind == "copy":
            ctypes.memmove(dst, rest[0], rest[1])
            self.counts.copies += 1
        elif kind == "memset":
            ctypes.memset(dst, rest[0], rest[1])

    def cuMemcpyAsync(self, dst, src, nbytes, stream):
        return self._queue(("copy", int(dst), int(src), int(nbytes)), stream)

    # every direction is a host memmove here
    cuMemcpyHtoDAsync = cuMemcpyDtoHAsync = cuMemcpyDtoDAsync = cuMemcpyAsync

    def cuMemcpyHtoD(self, dst, src, nbytes):
        return self.cuMemcpyAsync(dst, src, nbytes, 0)

    cuMemcpyDtoH = cuMemcpyHtoD

    def cuMemsetD8Async(self, dst, value, nbytes, stream):
        return self._queue(("memset", int(dst), int(value), int(nbytes)), stream)

    # ---- streams and events: everything has run by the time a call returns ----
    def cuStreamCreate(self, flags):
        return OK, self._handle()

    def cuStreamDestroy(self, stream):
        return (OK,)

    def cuStreamSynchronize(self, stream):
        return (OK,)

    def cuCtxSynchronize(self):
        return (OK,)

    def cuStreamQuery(self, stream):
        return (OK,)

    def cuEventCreate(self, flags):
        return OK, self._handle()

    def cuEventDestroy(self, event):
        return (OK,)

    def cuEventRecord(self, event, stream):
        return (OK,)

    def cuEventSynchronize(self, event):
        return (OK,)

    def cuEventQuery(self, event):
        return (OK,)

    def cuEventElapsedTime(self, start, end):
        return OK, 0.0  # no kernel runs: no kernel time

    # ---- programs and launches ----
    def cuModuleLoadData(self, image):
        self.counts.modules += 1
        return OK, self._handle()

    def cuModuleGetFunction(self, module, name):
        return OK, self._handle()

    def cuFuncSetAttribute(self, func, attribute, value):
        return (OK,)

    def _launch(self, func, stream):
        nodes = self._capturing.get(int(stream))
        if nodes is not None:
            node = ["kernel", self._handle(), func]
            nodes.append(node)
            self.counts.captured += 1
        else:
            self.counts.launches += 1
        return (OK,)

    def cuLaunchKernel(self, func, gx, gy, gz, bx, by, bz, smem, stream, argv, extra):
        return self._launch(func, stream)

    def cuLaunchKernelEx(self, config, func, argv, extra):
        return self._launch(func, config.hStream)

    # ---- graphs: stream capture records the stream's work, a launch replays its copies ----
    def cuStreamBeginCapture(self, stream, mode):
        if int(stream) in self._capturing:
            return (CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,)
        self._capturing[int(stream)] = []
        return (OK,)

    def cuStreamGetCaptureInfo(self, stream):
        nodes = self._capturing.get(int(stream))
        if not nodes:
            return OK, 0, 0, None, [], 0
        last = nodes[-1]
        return OK, 1, 1, None, [last[1]] if last[0] == "kernel" else [], 1

    def cuStreamEndCapture(self, stream):
        nodes = self._capturing.pop(int(stream), None)
        if nodes is None:
            return CUresult.CUDA_ERROR_INVALID_VALUE, None
        graph = self._handle()
        self._graphs[graph] = nodes
        return OK, graph

    def cuGraphInstantiate(self, graph, flags):
        exe = self._handle()
        self._graphs[exe] = list(self._graphs[int(graph)])
        return OK, exe

    def cuGraphLaunch(self, exe, stream):
        nodes = self._graphs.get(int(exe))
        if nodes is None:
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        self.counts.graph_launches += 1
        for node in nodes:
            if node[0] != "kernel":
                self._run(node)
        return (OK,)

    def cuGraphExecKernelNodeSetParams(self, exe, node, params):
        if int(exe) not in self._graphs:
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        self.counts.node_updates += 1
        return (OK,)

    def cuGraphExecDestroy(self, exe):
        self._graphs.pop(int(exe), None)
        return (OK,)

    cuGraphDestroy = cuGraphExecDestroy

    def cuProfilerStart(self):
        return (OK,)

    cuProfilerStop = cuProfilerStart

    # ---- entry points for native code (hipep.runtime.native_replay): the same calls in C form ----
    def cuGetProcAddress(self, symbol, version, flags):
        name = symbol.decode() if isinstance(symbol, bytes) else str(symbol)
        fn = self._procs.get(name)
        if fn is None:
            made = _c_entry_point(self, name)
            if made is None:
                return CUresult.CUDA_ERROR_NOT_FOUND, 0, 0
            fn = self._procs[name] = made
        return OK, ctypes.cast(fn, ctypes.c_void_p).value, 0


def _c_entry_point(driver: HostDriver, name: str):
    """A C function (ctypes callback, which takes the GIL itself) calling the stand-in's `name`
    with integer handles, as native code calls the driver; None for a name it does not offer."""
    vp, res = ctypes.c_void_p, ctypes.c_int

    def handle(h) -> int:
        return int(h or 0)

    if name == "cuGraphLaunch":
        return ctypes.CFUNCTYPE(res, vp, vp)(lambda exe, stream: int(driver.cuGraphLaunch(handle(exe), handle(stream))[0]))
    if name == "cuGraphExecKernelNodeSetParams":
        return ctypes.CFUNCTYPE(res, vp, vp, vp)(
            lambda exe, node, params: int(driver.cuGraphExecKernelNodeSetParams(handle(exe), handle(node), params)[0]))
    if name == "cuStreamSynchronize":
        return ctypes.CFUNCTYPE(res, vp)(lambda stream: int(driver.cuStreamSynchronize(handle(stream))[0]))
    if name == "cuEventRecord":
        return ctypes.CFUNCTYPE(res, vp, vp)(lambda event, stream: int(driver.cuEventRecord(event, stream)[0]))
    if name == "cuEventElapsedTime":
        def elapsed(ms, start, end):
            err, value = driver.cuEventElapsedTime(start, end)
            ms[0] = value
            return int(err)
        return ctypes.CFUNCTYPE(res, ctypes.POINTER(ctypes.c_float), vp, vp)(elapsed)
    if name == "cuCtxGetCurrent":
        def current(out):
            out[0] = _CONTEXT
            return int(OK)
        return ctypes.CFUNCTYPE(res, ctypes.POINTER(ctypes.c_void_p))(current)
    if name == "cuCtxSetCurrent":
        return ctypes.CFUNCTYPE(res, vp)(lambda ctx: int(driver.cuCtxSetCurrent(ctx)[0]))
    return None


_INSTALLED: HostDriver | None = None


def installed() -> bool:
    """Whether the stand-in is the driver of hipep's cuda device in this process (the plugin asks
    before it hands emulated GPU memory over as device addresses)."""
    return _INSTALLED is not None


def install() -> HostDriver:
    """Makes the stand-in the driver hipep's cuda device uses (before any session on it) and, where
    hipep's native library is not loaded yet, has the plugin present host memory as GPU memory.
    Returns the stand-in (its `counts` say what was asked of it). Installing twice returns the first."""
    global _INSTALLED
    from hipep.runtime import cuda_driver

    if _INSTALLED is not None:
        return _INSTALLED
    if cuda_driver._DRIVER is not None and not isinstance(cuda_driver._DRIVER, HostDriver):
        raise RuntimeError("hipep's cuda device already uses the real driver in this process: "
                           "install the host stand-in before the first session on device='cuda'")
    os.environ.setdefault("HIPEP_EMULATE_GPU_MEMORY", "addresses")
    _INSTALLED = HostDriver()
    cuda_driver._DRIVER = _INSTALLED
    return _INSTALLED
