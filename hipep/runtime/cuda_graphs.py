"""Programs and graph replay of the NVIDIA device (hipep.runtime.cuda): the ops a binding produces
made ready to issue (`_Launch`, `_Copy`, `_Blas`), a Kernel's program (`CudaProgram`), what replay
keeps per captured graph: bound launches per node (`_NodeState`) and the runs of launches between
host work and syncs that become CUDA graphs (`_Segment`, `_GraphState`), and the replay itself
(`GraphReplay`, the part of CudaDevice that walks a graph and captures, updates and launches its
segments)."""
from __future__ import annotations

import ctypes
import logging
import struct
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import HipepError
from . import gpu_kernels as table
from .cuda_driver import CudaError, _check, _driver, _error_text
from .cuda_memory import DeviceArray
from .cuda_stream import CudaStream
from .device import Graph, Kernel, check_patch, named_error

if TYPE_CHECKING:
    from .cuda import CudaDevice

log = logging.getLogger("hipep")

class _Launch:
    """A kernel launch made ready: the function and configuration, and one buffer holding the
    parameter array cuLaunchKernel takes (`argv_addr`: a pointer per parameter) and the parameters'
    bytes it points at, each at an 8-byte aligned offset. One buffer, not a ctypes object per
    parameter, and a bytearray, which the garbage collector does not track (a ctypes array it
    does): a plan keeps a launch per kernel for every specialization it holds, and fewer tracked
    objects keep its full passes short. The buffer is never resized, so its address holds.
    `config`: the cuLaunchKernelEx configuration of a launch that may overlap the previous kernel
    (see KernelOp.overlaps_previous), else None."""
    __slots__ = ("func", "grid", "block", "smem", "buffer", "argv_addr", "offsets", "sizes", "key", "entry", "config",
                 "provisional", "_params")

    def __init__(self, func, op: table.KernelOp, overlap: bool = False):
        self.func = func
        self.entry = op.entry
        self.grid, self.block = _dim3(op.grid), _dim3(op.block)
        self.smem = int(op.smem)
        parts = tuple([bytes(v) for v in op.params])
        self.sizes = tuple([len(b) for b in parts])
        layout, self.offsets, total = _param_layout(self.sizes)
        self.buffer = bytearray(total)
        base = self.argv_addr = ctypes.addressof(ctypes.c_char.from_buffer(self.buffer))
        layout.pack_into(self.buffer, 0, *[base + o for o in self.offsets], *parts)
        self.config = _overlap_config(self.grid, self.block, self.smem) if overlap and op.overlaps_previous else None
        self.key = (op.entry, id(func), self.grid, self.block, self.smem, parts, self.config is not None)
        self.provisional = op.provisional
        self._params = None

    def param_address(self, index: int) -> int:
        """Where parameter `index`'s bytes are (native replay writes moving addresses there)."""
        return self.argv_addr + self.offsets[index]

    def param_bytes(self, index: int) -> bytes:
        """Parameter `index`'s bytes as they are now."""
        return ctypes.string_at(self.argv_addr + self.offsets[index], self.sizes[index])

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


_LAYOUTS: dict[tuple[int, ...], tuple] = {}  # parameter sizes -> _param_layout's answer


def _param_layout(sizes: tuple[int, ...]) -> tuple[struct.Struct, tuple[int, ...], int]:
    """A launch buffer's layout for parameters of these byte sizes: one Struct that packs the
    pointer per parameter and then the parameters' bytes, each at an 8-byte aligned offset; the
    offsets; the buffer's bytes. Made once per sizes (a model has a few dozen)."""
    layout = _LAYOUTS.get(sizes)
    if layout is None:
        fmt, offsets, at = [f"<{len(sizes)}Q"], [], 8 * len(sizes)
        for n in sizes:
            offsets.append(at)
            fmt.append(f"{n}s{-n % 8}x")
            at += n + -n % 8
        layout = _LAYOUTS[sizes] = (struct.Struct("".join(fmt)), tuple(offsets), max(at, 8))
    return layout


def _dim3(dims) -> tuple[int, int, int]:
    """A grid or block as the driver's three dimensions (the missing ones 1)."""
    n = len(dims)
    return int(dims[0]), int(dims[1]) if n > 1 else 1, int(dims[2]) if n > 2 else 1


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

    def bind(self, args: list, stream: CudaStream | None = None, first_run: bool = False) -> list:
        """The launch's ops, ready to issue on `stream`, for these arguments (DeviceArrays, numpy
        constants); `first_run`: for a segment's first run (Target.first_run)."""
        if self.binding is None:
            raise table.NoKernel(f"no kernel for cuda: {self.kernel.name.lstrip(':')}")
        dev = self.device
        converted = [dev._arg(a) for a in args]
        target = dev.target if stream is None else dev.stream_target(stream, self.label, first_run)
        ops = self.binding.bind(converted[:self.arity], converted[self.arity:], self.attrs, target)
        if dev.debug_spin is not None and self.kernel.name.rsplit("::", 1)[-1] == dev.debug_spin[0]:
            ops = [table.KernelOp("hipep_debug_spin", (1,), (1,), [ctypes.c_longlong(dev.debug_spin[1])],
                                  module="debug")] + list(ops)
        return [dev._ready(op) for op in ops]

    def run(self, args: list) -> None:
        # The CPU device's way of running a program (numpy, on the calling thread). The
        # step-by-step interpreter issues this device's launches through CudaDevice.launch.
        raise HipepError(f"{self.label}: a GPU program runs through its device's launch, not on the host")

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


_RECENT_BINDINGS = 4  # bindings a launch keeps for argument signatures it may see again


class _NodeState:
    """A captured launch's ops, bound for the arguments it had when last bound; rebound when a
    patch changes an argument's memory or shape, or every run when its binding reads values.

    The last few bindings are kept by argument signature: ORT copies a host input bound through
    IOBinding into device memory when it is bound, while the previous step's copy is still held,
    so a decode step's input_ids alternate between two addresses, and binding the embedding's
    Gather again on every step would cost more host time than the rest of its replay. A binding
    is a function of its arguments' signatures (addresses, shapes, dtypes and, where it reads
    them, host-visible values), the attributes and the device, so one kept for an equal signature
    is the one binding again would make: scratch and workspace memory it points at is never freed
    while the stream lives (CudaDevice._scratch, _workspace).

    A binding for a segment's first run may be provisional (Target.first_run): it is issued once and
    neither kept nor taken as the binding of its signature, so the next run binds the node again.

    `recent` holds the earlier bindings only (the current one is `sig` and `ops`), and is made when
    the first one is set aside: a prompt length's launches, bound once, keep no dict each (the
    garbage collector walks every one a session holds, see Executor's SPECIALIZATION_CACHE)."""
    __slots__ = ("program", "sig", "ops", "version", "reads_values", "recent", "provisional")

    def __init__(self, program: CudaProgram):
        self.program = program
        self.sig = None
        self.ops: list = []
        self.version = 0
        self.reads_values = program.binding is not None and program.binding.reads_values
        self.recent: dict | None = None  # earlier signature -> ops, oldest first
        self.provisional = False  # self.ops are a first run's provisional binding

    def prepare(self, args: list, stream: CudaStream | None = None, first_run: bool = False) -> list:
        sig = tuple(_arg_signature(a, self.reads_values) for a in args)
        if sig != self.sig:
            recent = self.recent
            ops = recent.pop(sig, None) if recent else None
            if ops is None:
                ops = self.program.bind(args, stream, first_run)
            if self.sig is not None:  # the current binding (never a provisional one) set aside
                if recent is None:
                    recent = self.recent = {}
                recent[self.sig] = self.ops  # (re)inserted as the newest
                if len(recent) >= _RECENT_BINDINGS:
                    del recent[next(iter(recent))]
            self.provisional = first_run and any(getattr(o, "provisional", False) for o in ops)
            if [o.key for o in ops] != [o.key for o in self.ops]:
                self.version += 1
            self.ops, self.sig = ops, (None if self.provisional else sig)
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
    __slots__ = ("nodes", "members", "position", "value_nodes", "spans", "exec", "graph", "ops", "kernel_nodes",
                 "captured", "last", "captures", "direct", "label", "bound", "provisional")

    def __init__(self, nodes: list[int]):
        self.nodes = nodes
        self.members = set(nodes)
        self.position = {node: k for k, node in enumerate(nodes)}  # node -> its place in `nodes`
        self.value_nodes: list[int] = []  # launches whose binding reads values: bound again every run
        self.spans: dict[int, tuple[int, int]] = {}  # node -> (first, count) of its ops in `ops`
        self.label = ""
        self.bound = False  # every launch has been bound once
        self.provisional: list[int] = []  # launches the first run bound provisionally: bound again next run
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
        self.ops, self.kernel_nodes, self.captured, self.spans = [], [], None, {}


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
                seg.value_nodes = [i for i in seg.nodes if self.nodes[i].reads_values]
                first, last = graph.nodes[seg.nodes[0]].label, graph.nodes[seg.nodes[-1]].label
                seg.label = first if first == last else f"{first} .. {last}"

    def __del__(self):
        try:
            for kind, seg in self.plan:
                if kind == "launch":
                    seg.release()
        except Exception:  # noqa: BLE001 - at interpreter exit the driver may be gone
            pass


# ---- replay ----------------------------------------------------------------------------------------

_GRAPH_MIN_LAUNCHES = 2
_GRAPH_MAX_CAPTURES = 8  # a segment re-captured this often runs launch by launch from then on


class GraphReplay:
    """The CUDA device's replay of a captured plan graph (a part of CudaDevice): launch segments
    bound once and captured into CUDA graphs, launches whose arguments changed updated inside their
    graph, host work and syncs in between, CUDA events around each replay (kernel_ns) and how the
    launches reached the driver (issue_counts). Uses the device's use_graphs, sync_launches,
    update_graphs, _capture_lock, _current and _issue."""

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
            old = node.args[k]
            if old is new:  # the same tensor as last run (the bridge keeps ORT's tensors' wrappers)
                continue
            check_patch(node, k, new)
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
        if not seg.bound:  # (never captured either: a capture follows a bound run)
            self._first_run(stream, graph, state, seg)
            return
        touched = dirty & seg.members if dirty else ()
        rebind = bool(seg.value_nodes) or bool(touched) or bool(seg.provisional)
        if seg.exec is not None and seg.captured == seg.last:
            # the common cases: one call for the whole segment, after updating the nodes of the
            # few launches bound again (a decode step's mask length), if any changed
            if not rebind or (self.update_graphs and self._update_nodes(stream, graph, state, seg, touched)):
                self._launch_graph(stream, seg)
                return
        work: list[tuple[str, list]] = []
        for i in seg.nodes:
            node = graph.nodes[i]
            st = state.nodes[i]
            if not rebind or not (st.sig is None or st.reads_values or i in dirty):
                work.append((node.label, st.ops))
                continue
            work.append((node.label, _bind(st, node, stream)))
        seg.provisional = []  # (their signatures were None: the walk bound them again)
        versions = _versions(state, seg)
        count = sum(len(ops) for _, ops in work)
        if not self.use_graphs or self.sync_launches or seg.direct or count < _GRAPH_MIN_LAUNCHES:
            for label, ops in work:
                self._issue(stream, ops, label)
            return
        if seg.exec is not None and seg.captured == versions:
            seg.last = versions
            self._launch_graph(stream, seg)
            return
        if seg.exec is not None and self.update_graphs and self._update_graph(stream, seg, work):
            seg.captured = seg.last = versions
            self._launch_graph(stream, seg)
            return
        seen, stable = seg.last is not None, seg.last == versions
        seg.last = versions
        # A segment is captured once its launches came out the same on two runs; where graphs
        # are updated in place, on its second run already (a segment whose arguments change on
        # every run, like the attention mask's in decoding, is then updated, not relaunched).
        if not stable and not (self.update_graphs and seen and seg.captures == 0):
            for label, ops in work:
                self._issue(stream, ops, label)
            return
        self._capture_segment(stream, seg, work, versions)

    def _first_run(self, stream: CudaStream, graph: Graph, state: _GraphState, seg: _Segment) -> None:
        """A segment's first run (a new shape's, a new context's): its launches are issued one by
        one whatever they are (it is captured once a second run binds them the same way), so each
        node's are issued as soon as they are bound, and the GPU runs them while the host binds the
        rest; binding the whole segment first left the GPU idle for all of that time. Issuing
        early is safe because no binding in a segment reads what a launch of the same segment
        writes: the host reads device results only after a sync, which ends the segment.
        The bindings are the first run's (Target.first_run): one made provisional, for a path with no
        first-use cost on the host, is bound again on the next run, the one that captures."""
        provisional = []
        for i in seg.nodes:
            node, st = graph.nodes[i], state.nodes[i]
            self._issue(stream, _bind(st, node, stream, first_run=True), node.label)
            if stream.failed:
                return
            if st.provisional:
                provisional.append(i)
        seg.bound, seg.provisional = True, provisional
        seg.last = _versions(state, seg)

    def _capture_segment(self, stream: CudaStream, seg: _Segment, work, versions) -> None:
        d = _driver()
        seg.release()
        seg.captures += 1
        if seg.captures > _GRAPH_MAX_CAPTURES:
            seg.direct = True
        try:
            with self._capture_lock:
                seg.graph, nodes, failed = self._record(stream, work)
            if failed is not None:
                raise CudaError(f"{failed[0]}: capture failed: {_error_text(failed[1])}")
            seg.exec = _check(d.cuGraphInstantiate(seg.graph, 0), "cuGraphInstantiate")
            seg.captured = versions
            seg.ops, seg.kernel_nodes = [op for _, ops in work for op in ops], nodes
            seg.spans, at = {}, 0
            for i, (_, ops) in zip(seg.nodes, work):
                seg.spans[i] = (at, len(ops))
                at += len(ops)
        except HipepError as e:
            # This run's launches go one by one and the next run captures again, up to
            # _GRAPH_MAX_CAPTURES captures: a library kernel CUDA loads the first time it runs (a
            # cuBLASLt call new to the process) fails a capture on drivers before CUDA 12.3, and
            # the run one by one loads it.
            log.debug("hipep: cuda graph capture failed, launching directly: %s", e)
            seg.release()
            for label, ops in work:
                self._issue(stream, ops, label)
            return
        self._launch_graph(stream, seg)

    def _update_nodes(self, stream: CudaStream, graph: Graph, state: _GraphState, seg: _Segment,
                      touched) -> bool:
        """Binds again only the segment's launches a patch touched or whose binding reads values,
        and updates the kernel nodes of those whose launches changed; False (nothing updated) where
        that cannot be done, for the caller's walk over the whole segment."""
        changed = []
        rebound = (*seg.value_nodes, *(j for j in touched if j not in seg.value_nodes))
        for i in rebound:
            st = state.nodes[i]
            version = st.version
            ops = _bind(st, graph.nodes[i], stream)
            if st.version == version:
                continue  # the same launches as captured
            first, count = seg.spans.get(i, (0, -1))
            if len(ops) != count:
                return False
            for k, new in enumerate(ops):
                if new.key != seg.ops[first + k].key:
                    if not _updatable(new, seg.ops[first + k], seg.kernel_nodes[first + k]):
                        return False
                    changed.append((first + k, new))
        if not changed:
            return True
        if not _set_nodes(stream, seg, changed):
            return False
        # Only the launches bound again here can have a new version since the segment's versions
        # were last taken (every other binding happens in _run_segment's walk, which takes them).
        versions = list(seg.captured)
        for i in rebound:
            versions[seg.position[i]] = state.nodes[i].version
        seg.captured = seg.last = tuple(versions)
        return True

    def _update_graph(self, stream: CudaStream, seg: _Segment, work) -> bool:
        """Brings `seg`'s executable graph up to this run's launches by updating the kernel nodes
        whose launch changed (arguments, grid, kernel); False where that cannot be done (a copy or
        library call changed, launches were added or removed: the executable stays as captured) or
        the driver refuses an update (the executable is gone, see _set_nodes)."""
        ops = [op for _, ops in work for op in ops]
        if len(ops) != len(seg.ops) or len(seg.kernel_nodes) != len(ops):
            return False
        changed = []
        for at, (new, old, node) in enumerate(zip(ops, seg.ops, seg.kernel_nodes)):
            if new.key != old.key:
                if not _updatable(new, old, node):
                    return False
                changed.append((at, new))
        return _set_nodes(stream, seg, changed)

    @staticmethod
    def _record(stream: CudaStream, work):
        """Captures `work` on `stream` into a CUDA graph: (graph, each op's kernel node or None,
        the first launch that failed)."""
        d = _driver()
        _check(d.cuStreamBeginCapture(stream.handle, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
               "cuStreamBeginCapture")
        failed = None
        nodes: list = []
        try:
            for label, ops in work:
                for op in ops:
                    if isinstance(op, _Launch):
                        err = op.launch(stream.handle)
                        nodes.append(_last_captured(stream.handle) if err == d.CUresult.CUDA_SUCCESS else None)
                    elif isinstance(op, _Blas):
                        why = op.call(int(stream.handle))
                        err = d.CUresult.CUDA_SUCCESS if why is None else why  # _error_text shows a text as it is
                    else:
                        (err,) = d.cuMemcpyAsync(op.dst, op.src, op.nbytes, stream.handle)
                    if not isinstance(op, _Launch):
                        nodes.append(None)
                    if err != d.CUresult.CUDA_SUCCESS and failed is None:
                        failed = (label, err)
        finally:
            graph = _check(d.cuStreamEndCapture(stream.handle), "cuStreamEndCapture")  # always leaves capture mode
        return graph, nodes, failed

    def _launch_graph(self, stream: CudaStream, seg: _Segment) -> None:
        d = _driver()
        (err,) = d.cuGraphLaunch(seg.exec, stream.handle)
        if err != d.CUresult.CUDA_SUCCESS:
            stream.record_failure(CudaError(f"{seg.label}: CUDA graph launch failed: {_error_text(err)}"))
        stream.issued(seg.label)
        stream.counts[1] += 1

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

    def sync_wait_ns(self, stream: CudaStream) -> int:
        ns, stream.wait_ns = stream.wait_ns, 0
        return ns

    def issue_counts(self, stream: CudaStream) -> tuple[int, int, int]:
        counts, stream.counts = stream.counts, [0, 0, 0]
        return counts[0], counts[1], counts[2]


def _versions(state: _GraphState, seg: _Segment) -> tuple:
    """The binding versions of the segment's launches (a segment is captured once they repeat)."""
    return tuple(state.nodes[i].version for i in seg.nodes)


def _bind(st: _NodeState, node, stream: CudaStream, first_run: bool = False) -> list:
    """The node's launches for its current arguments, a binding's error named by the node."""
    try:
        return st.prepare(node.args, stream, first_run)
    except HipepError as e:
        raise named_error(node.label, e) from None
    except Exception as e:  # noqa: BLE001 - a binding's bug still names its node
        raise HipepError(f"{node.label}: {type(e).__name__}: {e}") from e


def _updatable(new, old, kernel_node) -> bool:
    """Whether captured op `old` (kernel node `kernel_node`, None for copies and library calls)
    can become `new` by updating its node: kernel launches both, both overlapping the kernel ahead
    of them or neither (an overlap is an edge of the graph, not a node parameter)."""
    return (kernel_node is not None and type(new) is _Launch and type(old) is _Launch
            and (new.config is None) == (old.config is None))


def _set_nodes(stream: CudaStream, seg: _Segment, changed: list) -> bool:
    """Updates the kernel nodes of `seg`'s executable graph for `changed`: (position in seg.ops,
    new launch) pairs. False where the driver refuses one; the executable is gone then (an
    update may have changed some of its nodes already) and the segment is captured again."""
    d = _driver()
    ok = d.CUresult.CUDA_SUCCESS
    for at, launch in changed:
        (err,) = d.cuGraphExecKernelNodeSetParams(seg.exec, seg.kernel_nodes[at], launch.node_params())
        if err != ok:
            log.debug("hipep: %s: updating a CUDA graph node failed (%s), capturing again", seg.label,
                      _error_text(err))
            seg.release()
            return False
        seg.ops[at] = launch
    stream.counts[2] += len(changed)
    return True


def _last_captured(stream_handle):
    """The node the launch just captured on `stream_handle` added (the capture's one current
    dependency: a stream captures a chain), or None where the driver says otherwise."""
    d = _driver()
    # cuda-bindings 12 keeps the query that reports edge data (which overlapping launches' edges
    # carry; without it the query refuses) under its _v3 name; 13's plain name is that query
    query = getattr(d, "cuStreamGetCaptureInfo_v3", None) or d.cuStreamGetCaptureInfo
    res = query(stream_handle)
    deps = res[4] if res[0] == d.CUresult.CUDA_SUCCESS and len(res) > 4 else None
    return deps[0] if deps is not None and len(deps) == 1 else None


def _host_call(node, stream: CudaStream):
    try:
        node.program.run_host(node.args, stream)
    except HipepError as e:
        raise named_error(node.label, e) from None
    except Exception as e:  # noqa: BLE001 - named like the CPU device's host work
        raise HipepError(f"{node.label}: {type(e).__name__}: {e}") from e
