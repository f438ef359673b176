"""The device interface every backend implements, shaped like a GPU runtime's.

One file per backend (cpu.py here; GPU backends beside it), each owning its allocator, streams,
programs and launch, in the manner of tinygrad's `runtime/ops_*.py`:

  * memory: `alloc`/`free` in a memory space ("device" or "host_visible"), typed `view`s of an
    allocation (what a kernel argument points at) and `subview`s of an array's bytes, `wrap` of
    memory ORT owns, synchronous `copy` (the interpreter's pool growth), asynchronous `copy_async`
    on a stream, and `read`, a host copy of an array after the work queued before it;
  * streams and events: device work queued in order (`Stream.enqueue`), host work run at once
    (`Stream.run_host`), `sync`, and events recorded on a stream and waited for;
  * programs: `compile(kernel)` once per kernel and its specialization constants, `launch(stream,
    program, args)` (the device chooses the configuration), and `run_host_step` for a plan's host work;
  * capture and replay: `capture()` records launches, host work and syncs into a `Graph`;
    `replay(stream, graph, patches)` issues it again with some arguments replaced (ORT's input
    and output memory, which changes every run). Nothing else may change between replays.

The executor owns everything above that: the plan walk, shapes, memory layout. It never calls
numpy itself; the CPU device's programs are numpy, a GPU device's are kernels.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, TypeVar

T = TypeVar("T")


class Event(ABC):
    @abstractmethod
    def wait(self) -> None:
        """Blocks the host until the work queued before the event was recorded has run."""

    @abstractmethod
    def query(self) -> bool:
        """Whether that work has run."""


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

    @abstractmethod
    def record_event(self) -> Event:
        """An event that completes when the work queued so far has run."""


class ShapedBuffer:
    """size, nbytes and ndim of a buffer that has `shape` (a sequence of dims) and `dtype` (a numpy
    dtype): what device arrays and kernel arguments share."""
    __slots__ = ()

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= int(d)
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class Kernel:
    """What a launch runs: an entry point with its specialization constants. `name` is the
    registry key of the op ("::Add", "com.microsoft::GroupQueryAttention", "hipep::FusedElementwise")
    naming the kernels/ entry a GPU backend compiles (or `source`, a generated one); `constants`
    are the node's attributes, fixed at compile time."""
    name: str
    constants: dict = field(default_factory=dict, hash=False, compare=False)
    arity: int = 0  # how many of the launch's buffer arguments are inputs (the rest are outputs)
    dtypes: tuple = ()  # the buffer arguments' dtypes (inputs, then outputs)
    source: str = ""
    label: str = ""  # the node it runs, for messages


@dataclass
class GraphNode:
    kind: str  # "launch" | "host" | "sync"
    program: Any = None
    args: list = field(default_factory=list)
    label: str = ""


@dataclass
class Graph:
    """A captured sequence of launches, host work and syncs, with its arguments bound."""
    nodes: list[GraphNode] = field(default_factory=list)


class Device(ABC):
    name: str
    # Whether kernels take ORT's host memory as it is (stage_input/stage_output are identities
    # then, and the executor skips them).
    addresses_host_memory: bool = False
    # The device's own array classes: ORT's tensors in its memory arrive as these, are used in
    # place (stage_input/stage_output return them as they are) and need no input check beyond
    # their dtype.
    array_types: tuple = ()

    # ---- memory ------------------------------------------------------------------------------

    @abstractmethod
    def alloc(self, space: str, nbytes: int) -> Any:
        """One allocation of `nbytes` in memory space `space` ("device" or "host_visible")."""

    def free(self, memory: Any) -> None:
        """Releases an allocation (nothing may still read or write it)."""

    @abstractmethod
    def view(self, memory: Any, offset: int, dtype, shape: tuple[int, ...]):
        """A typed, C-contiguous view of `memory`'s bytes from `offset` (no copy): what a kernel
        argument points at."""

    def wrap(self, array: Any) -> Any:
        """A kernel argument for memory ORT owns (an input or output tensor)."""
        return array

    def stage_input(self, stream: Stream, position: int, array: Any) -> Any:
        """The kernel argument for ORT's input `position` of this run (host memory from ORT's
        Python API): the array itself where kernels can read it, else a copy queued into a
        stable buffer of the device's own."""
        return array

    def stage_output(self, stream: Stream, position: int, array: Any) -> Any:
        """The kernel argument kernels write ORT's output `position` into (see `stage_input`)."""
        return array

    def finish_outputs(self, stream: Stream, staged: list, arrays: list) -> None:
        """After the run's work is queued: the outputs' bytes are in `arrays` when this returns
        (copies back from staging buffers, then a sync)."""
        stream.sync()

    def subview(self, array: Any, offset: int, dtype, shape: tuple[int, ...]) -> Any:
        """A typed, C-contiguous view of `array`'s bytes from byte `offset` (no copy): a value that
        views an input or constant, a row of a stacked loop output. Host memory (numpy arrays)
        here; a GPU device also takes its own arrays."""
        import numpy as np

        dtype = np.dtype(dtype)
        n = 1
        for d in shape:
            n *= int(d)
        flat = np.asarray(array).reshape(-1).view(np.uint8)
        return flat[offset:offset + n * dtype.itemsize].view(dtype).reshape(tuple(int(d) for d in shape))

    def read(self, stream: Stream, array: Any):
        """A host copy (numpy) of `array`'s contents: device memory after the work queued on
        `stream` so far (a copy on the stream, waited for); host memory as it is now (no sync: the
        plan's syncs order the host's reads)."""
        import numpy as np

        return np.array(array)

    def run_host_step(self, stream: Stream, program: Any, args: list) -> None:
        """Runs a plan host step's program now, on the host, over `args` (the interpreter's)."""
        program.run(args)

    @abstractmethod
    def copy(self, dst: Any, dst_offset: int, src: Any, src_offset: int, nbytes: int) -> None:
        """Copies bytes between allocations now (the caller has synced the streams using them)."""

    @abstractmethod
    def copy_async(self, stream: Stream, dst: Any, src: Any, label: str = "copy") -> None:
        """Queues a copy between two views of equal size (host→device, device→host or
        device→device, by where the views live) on `stream`."""

    # ---- streams -----------------------------------------------------------------------------

    @abstractmethod
    def new_stream(self) -> Stream:
        """A new stream."""

    # ---- programs ----------------------------------------------------------------------------

    @abstractmethod
    def compile(self, kernel: Kernel) -> Any:
        """The loaded program for `kernel` (backends cache compiled code)."""

    def prepare_constants(self, arrays: Iterable[Any]) -> None:
        """A plan's constants and weights that its launches read, told when its executor is made,
        before any run: a backend with memory of its own may copy them there now, so that a
        session's first run copies none and a device short of memory fails the session, not a
        run. Nothing here for a backend that reads host memory."""

    def prepare_kernels(self, kernels: Iterable[Kernel]) -> None:
        """A plan's kernels (an iterable made as it is read), told when its executor is made,
        before any run: a backend that compiles code may start on it now (the first run then waits
        only for what it still lacks). Nothing here, and nothing read, for a backend without such
        work."""

    @abstractmethod
    def launch(self, stream: Stream, program: Any, args: list, label: str = "") -> None:
        """Queues one launch of `program` over `args` (views and scalars) on `stream` (the device
        chooses its configuration)."""

    # ---- capture and replay ------------------------------------------------------------------

    def capture(self) -> Graph:
        """An empty graph to record into (`Graph.nodes` are appended by the executor)."""
        return Graph()

    @abstractmethod
    def replay(self, stream: Stream, graph: Graph, patches: list) -> None:
        """Issues `graph` on `stream`. `patches` are (node, argument position, value) triples that
        replace arguments for this replay (ORT's input and output memory); anything else must be
        what was captured."""

    # ---- time ------------------------------------------------------------------------------

    def kernel_ns(self, stream: Stream) -> int:
        """Nanoseconds spent inside programs on `stream` since the last call (then reset)."""
        return 0

    def sync_wait_ns(self, stream: Stream) -> int:
        """Nanoseconds the host spent blocked waiting for `stream`'s work since the last call (then
        reset). A device whose programs run on the calling thread never waits."""
        return 0

    def issue_counts(self, stream: Stream) -> tuple[int, int, int]:
        """How `stream`'s launches reached the hardware since the last call (then reset): kernel
        launches issued one by one, graph launches, graph nodes updated in place. A device that
        calls its programs itself (the CPU device) issues nothing."""
        return 0, 0, 0


def named_error(label: str, e: Exception):
    """`e` with the launch's label in front (unless it already starts with it), same type."""
    from ..errors import HipepError

    if not label or str(e).startswith(label):
        return e
    try:
        return type(e)(f"{label}: {e}")
    except Exception:  # noqa: BLE001  (an error type whose constructor takes other arguments)
        return HipepError(f"{label}: {e}")


def step_failure(label: str, e: Exception):
    """The hipep error for a step's work that raised `e`, naming the step: a hipep error keeps its
    type; the host running out of memory for what the step computes with says so in words."""
    from ..errors import HipepError

    if isinstance(e, HipepError):
        return named_error(label, e)
    if isinstance(e, MemoryError):
        return HipepError(f"{label}: out of host memory: {e}")
    return HipepError(f"{label}: {type(e).__name__}: {e}")


def check_patch(node: "GraphNode", k: int, new) -> None:
    """A replay patch may change the memory behind argument k and value-only extents (a mask's
    length), nothing else: a different dtype or rank means the caller replays the wrong graph."""
    old = node.args[k]
    if old is not None and (old.dtype != new.dtype or old.ndim != new.ndim):
        from ..errors import HipepError

        raise HipepError(f"{node.label}: replay changes argument {k} from {list(old.shape)}:{old.dtype} to "
                         f"{list(new.shape)}:{new.dtype}; only the memory behind it and value-only "
                         f"extents may change")


def freeze(x):
    """A hashable form of specialization constants (nested dicts, lists, numpy arrays), for
    program caches."""
    if isinstance(x, dict):
        return tuple(sorted((k, freeze(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return tuple(freeze(v) for v in x)
    if hasattr(x, "dtype") and hasattr(x, "tobytes"):
        return (x.dtype.str, x.shape, x.tobytes())
    return x


def open_device(kind: str, device_id: int = 0, cpu_schedule: str = "inline", seed: int = 0) -> Device:
    """The device for a resolved `device` option (`cpu_schedule` and `seed` configure the CPU device)."""
    if kind == "cpu":
        from .cpu import CpuDevice

        return CpuDevice(schedule=cpu_schedule, seed=seed)
    if kind == "cuda":
        from .cuda import get_device

        return get_device(device_id)
    raise ValueError(f"device '{kind}' has no backend in this build of hipep")
