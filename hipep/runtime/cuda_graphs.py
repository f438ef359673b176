"""Programs and graph replay state of the NVIDIA device (hipep.runtime.cuda): the ops a binding
produces made ready to issue (`_Launch`, `_Copy`, `_Blas`), a Kernel's program (`CudaProgram`),
and what replay keeps per captured graph: bound launches per node (`_NodeState`) and the runs of
launches between host work and syncs that become CUDA graphs (`_Segment`, `_GraphState`)."""
from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import HipepError
from . import gpu_kernels as table
from .cuda_driver import CudaError, _driver, _error_text
from .cuda_memory import DeviceArray
from .cuda_stream import CudaStream
from .device import Graph, Kernel

if TYPE_CHECKING:
    from .cuda import CudaDevice

class _Launch:
    """A kernel launch made ready: the function and configuration, and the parameter array whose
    address cuLaunchKernel takes (kept alive with the values it points at). `config`: the
    cuLaunchKernelEx configuration of a launch that may overlap the previous kernel (see
    KernelOp.overlaps_previous), else None."""
    __slots__ = ("func", "grid", "block", "smem", "values", "argv", "argv_addr", "key", "entry", "config", "_params")

    def __init__(self, func, op: table.KernelOp, overlap: bool = False):
        self.func = func
        self.entry = op.entry
        self.grid = tuple(int(g) for g in op.grid) + (1,) * (3 - len(op.grid))
        self.block = tuple(int(b) for b in op.block) + (1,) * (3 - len(op.block))
        self.smem = int(op.smem)
        self.values = list(op.params)
        self.argv = (ctypes.c_void_p * max(len(self.values), 1))(*[ctypes.addressof(v) for v in self.values])
        self.argv_addr = ctypes.addressof(self.argv)
        self.config = _overlap_config(self.grid, self.block, self.smem) if overlap and op.overlaps_previous else None
        self.key = (op.entry, id(func), self.grid, self.block, self.smem, b"".join(bytes(v) for v in self.values),
                    self.config is not None)
        self._params = None

    def node_params(self):
        """The launch as a CUDA graph kernel node's parameters (for updating a captured node in
        place: the node copies the values the parameter array points at)."""
        if self._params is None:
            p = _driver().CUDA_KERNEL_NODE_PARAMS()
            p.func = self.func
            p.gridDimX, p.gridDimY, p.gridDimZ = self.grid
            p.blockDimX, p.blockDimY, p.blockDimZ = self.block
            p.sharedMemBytes = self.smem
            p.kernelParams = self.argv_addr
            self._params = p
        return self._params

    def launch(self, stream_handle):
        """Queues the launch on the stream (or into the stream's capture): the driver's result."""
        d = _driver()
        if self.config is not None:
            # A bound launch belongs to one run context's graph, so to one stream at a time.
            self.config.hStream = stream_handle
            return d.cuLaunchKernelEx(self.config, self.func, self.argv_addr, 0)[0]
        g, b = self.grid, self.block
        return d.cuLaunchKernel(self.func, g[0], g[1], g[2], b[0], b[1], b[2], self.smem, stream_handle,
                                self.argv_addr, 0)[0]

    def issue(self, stream: CudaStream, label: str) -> None:
        err = self.launch(stream.handle)
        if err != _driver().CUresult.CUDA_SUCCESS:
            g, b = self.grid, self.block
            stream.record_failure(CudaError(f"{label}: launch of {self.entry} (grid {list(g)}, block {list(b)}, "
                                            f"{self.smem} bytes shared) failed: {_error_text(err)}"))


def _overlap_config(grid: tuple, block: tuple, smem: int):
    """cuLaunchKernelEx's configuration with programmatic stream serialization allowed: the grid
    may be scheduled once every block of the previous kernel has called hipep_grid_release (or
    exited), and waits for that kernel's completion where it calls hipep_grid_wait."""
    d = _driver()
    attr = d.CUlaunchAttribute()
    attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value.programmaticStreamSerializationAllowed = 1
    config = d.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.sharedMemBytes = smem
    config.attrs = [attr]
    config.numAttrs = 1
    return config


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
    """A run of launches between host work and syncs, and its CUDA graph once it is stable.

    `graph` and `exec`: the captured graph and its executable; `ops`: the ops captured, in order,
    and `kernel_nodes`: each one's kernel node in `graph` (None for copies and library calls), so
    that a launch whose arguments changed since the capture updates its node in `exec` in place
    instead of the whole segment being captured again."""
    __slots__ = ("nodes", "exec", "graph", "ops", "kernel_nodes", "captured", "last", "captures", "direct",
                 "reads_values", "label", "bound")

    def __init__(self, nodes: list[int]):
        self.nodes = nodes
        self.reads_values = False  # some launch's binding reads values: bound again every run
        self.label = ""
        self.bound = False  # every launch has been bound once
        self.exec = None
        self.graph = None
        self.ops: list = []
        self.kernel_nodes: list = []
        self.captured = None
        self.last = None
        self.captures = 0
        self.direct = False

    def release(self) -> None:
        if self.exec is None and self.graph is None:
            return
        d = _driver()
        if self.exec is not None:
            try:
                d.cuGraphExecDestroy(self.exec)
            except Exception:  # noqa: BLE001
                pass
            self.exec = None
        if self.graph is not None:  # after its executable: node handles name the graph's nodes
            try:
                d.cuGraphDestroy(self.graph)
            except Exception:  # noqa: BLE001
                pass
            self.graph = None
        self.ops, self.kernel_nodes, self.captured = [], [], None


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
        try:
            for kind, seg in self.plan:
                if kind == "launch":
                    seg.release()
        except Exception:  # noqa: BLE001 - at interpreter exit the driver may be gone
            pass
