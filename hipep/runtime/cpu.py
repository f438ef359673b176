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
import time
from collections import deque
from typing import Callable, TypeVar

import numpy as np

from ..errors import HipepError, RuntimeShapeError
from ..ops.registry import lookup
from ..plan import split_op_key
from ..symbolic import compiled
from .device import Device, Event, Graph, Kernel, Stream, check_patch, freeze, named_error, step_failure

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
        self.issued = 0  # pieces of device work queued so far (events count against it)
        self.done = 0  # ... and run (or dropped after a failure)
        self.kernel_ns = 0  # time inside programs, for hipep.stats()'s kernel_us

    def begin_run(self, run_index: int) -> None:
        if self.schedule == "random":
            self._rng = random.Random(f"{self.seed}/{run_index}")

    @property
    def pending(self) -> int:
        return len(self._queue)

    def enqueue(self, label: str, work: Callable[[], None]) -> None:
        self.issued += 1
        if self._error is not None:  # a failed stream runs nothing more until sync reports it
            self.done += 1
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
        self.done += len(self._queue)
        self._queue.clear()
        self._error = None

    def record_event(self) -> "CpuEvent":
        return CpuEvent(self, self.issued)

    def _run(self, n: int) -> None:
        for _ in range(n):
            label, work = self._queue.popleft()
            self.done += 1
            try:
                work()
            except Exception as e:  # recorded, raised at the next sync; the rest is dropped
                self._error = e if isinstance(e, HipepError) else step_failure(label, e)
                self.done += len(self._queue)
                self._queue.clear()
                return


    def _raise_recorded(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error


class CpuEvent(Event):
    def __init__(self, stream: CpuStream, target: int):
        self.stream, self.target = stream, target

    def query(self) -> bool:
        return self.stream.done >= self.target

    def wait(self) -> None:
        s = self.stream
        if s.done < self.target:
            s._run(min(len(s._queue), self.target - s.done))
        s._raise_recorded()


class CpuDevice(Device):
    name = "cpu"
    addresses_host_memory = True

    def __init__(self, schedule: str = "inline", seed: int = 0):
        if schedule not in SCHEDULES:
            raise ValueError(f"unknown CPU schedule {schedule!r}; expected one of {', '.join(SCHEDULES)}")
        self.schedule = schedule
        self.seed = int(seed)
        self._programs: dict = {}

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
    def copy_async(self, stream: CpuStream, dst: np.ndarray, src: np.ndarray, label: str = "copy") -> None:
        if dst.nbytes != src.nbytes:
            raise HipepError(f"{label}: copies {src.nbytes} bytes into {dst.nbytes}")
        stream.enqueue(label, lambda: np.copyto(dst.reshape(-1).view(np.uint8), src.reshape(-1).view(np.uint8)))

    # ---- programs ----------------------------------------------------------------------------

    def compile(self, kernel: Kernel) -> "CpuProgram":
        key = (kernel.name, kernel.label, kernel.dtypes, freeze(kernel.constants))
        program = self._programs.get(key)
        if program is None:
            program = self._programs[key] = CpuProgram(kernel)
        return program

    def launch(self, stream: CpuStream, program: "CpuProgram", args, label: str = "") -> None:
        label = label or program.label
        stream.enqueue(label, _timed(stream, program.run, args, label))

    def replay(self, stream: CpuStream, graph: Graph, patches: list) -> None:
        for node, k, new in patches:
            args = node.args
            old = args[k]
            # the same dtype object and rank pass at once; anything else gets the full check
            if old is not None and (old.dtype is not new.dtype or old.ndim != new.ndim):
                check_patch(node, k, new)
            args[k] = new
        if stream.schedule == "inline" and not stream._queue and stream._error is None:
            # Everything would run at once anyway: call the programs directly, in one generated
            # function per captured graph (patches change the argument lists it holds in place).
            run_all = graph.__dict__.get("inline")
            if run_all is None:
                run_all = graph.inline = _InlineReplay(graph)
            run_all(stream)
            return
        for node in graph.nodes:
            if node.kind == "launch":
                stream.enqueue(node.label, _timed(stream, node.program.run, node.args, node.label))
            elif node.kind == "host":
                stream.run_host(node.label, _timed(stream, node.program.run, node.args, node.label))
            else:
                stream.sync()

    def bind_replay(self, graph: Graph, sites, patches):
        """f(stream, inputs, outputs, view shapes) that replays `graph` with a run's ORT memory, or
        None where the generic replay must run. `sites` are (node, argument position, (kind,
        index, view)) with kind "in"/"out", `patches(inputs, outputs, view shapes)` the patches
        replay would take. Under the inline schedule the programs are called with ORT's arrays
        directly; the captured argument lists keep the arrays of the capturing run. The patch
        check replay does per run holds by construction here: the executor checks every run's
        inputs against the plan's dtypes and ranks and allocates outputs of the plan's dtypes and
        the traced ranks, so each patched argument's dtype and rank are the captured one's."""
        if self.schedule != "inline":
            return None
        inline = _InlineReplay(graph, sites)

        def replay_bound(stream: CpuStream, ins, outs, ext) -> None:
            if stream._queue or stream._error is not None:  # (not at a run's start: kept for safety)
                self.replay(stream, graph, patches(ins, outs, ext))
            else:
                inline(stream, ins, outs, ext)
        return replay_bound

    def finish_outputs(self, stream: CpuStream, staged: list, arrays: list) -> None:
        # outputs are the arrays kernels wrote; only queued work (deferred or random schedules)
        # or a recorded failure needs the sync
        if stream._queue or stream._error is not None:
            stream.sync()

    def kernel_ns(self, stream: CpuStream) -> int:
        ns, stream.kernel_ns = stream.kernel_ns, 0
        return ns


class _InlineReplay:
    """A captured graph's programs called one after another in straight-line generated code: no
    loop, no per-launch lookups, each program timed on its own by two clock reads kept in locals
    and summed at the end into the stream's kernel time. A failing program is named from the line
    it failed on.

    With `sites` (see CpuDevice.bind_replay) the function takes the run's ORT memory itself:
    f(inputs, outputs, view shapes), and a launch that reads or writes ORT's memory gets a fresh
    argument list built before its clock read; without, f() and replay's patches have already
    changed the captured argument lists."""

    CHUNK = 64  # launches per partial sum (a sum of thousands of terms nests too deep to compile)

    def __init__(self, graph: Graph, sites=None):
        self.nodes = [n for n in graph.nodes if n.kind != "sync"]
        ort_args: dict[int, dict[int, str]] = {}  # id(node) → argument position → source code
        for node, k, (kind, index, view) in sites or ():
            a = f"{'ins' if kind == 'in' else 'outs'}[{index}]"
            ort_args.setdefault(id(node), {})[k] = a if view < 0 else f"{a}.reshape(ext[{view}])"
        scope: dict = {"clock": time.perf_counter_ns}
        lines = ["def run_all(ins, outs, ext):" if sites is not None else "def run_all():"]
        self.line_of: dict[int, int] = {}  # the line of each launch's call → its index
        for i, node in enumerate(self.nodes):
            scope[f"r{i}"] = node.program.run
            given = ort_args.get(id(node))
            if given:
                items = []
                for k, arg in enumerate(node.args):
                    if k in given:
                        items.append(given[k])
                    else:
                        scope[f"c{i}_{k}"] = arg
                        items.append(f"c{i}_{k}")
                lines.append(f"    a{i} = [{', '.join(items)}]")
            else:
                scope[f"a{i}"] = node.args
            lines += [f"    s{i} = clock()", f"    r{i}(a{i})", f"    e{i} = clock()"]
            self.line_of[len(lines) - 1] = i  # (line numbers count from 1: the def is line 1)
        n = len(self.nodes)
        lines.append("    ns = 0")
        for start in range(0, n, self.CHUNK):
            lines.append("    ns += " + " + ".join(f"(e{i} - s{i})" for i in range(start, min(n, start + self.CHUNK))))
        lines.append("    return ns")
        exec(compiled("\n".join(lines) + "\n", "<hipep cpu replay>"), scope)
        self._run = scope["run_all"]

    def __call__(self, stream: CpuStream, *ort_memory) -> None:
        try:
            stream.kernel_ns += self._run(*ort_memory)
        except Exception as e:
            tb = e.__traceback__.tb_next  # the generated function's frame
            i = self.line_of.get(tb.tb_lineno)
            if i is None:  # building an argument list failed: a bug, not a program's error
                raise
            times = tb.tb_frame.f_locals  # the launches before the failing one still count
            stream.kernel_ns += sum(times[f"e{j}"] - times[f"s{j}"] for j in range(i))
            label = self.nodes[i].label
            raise step_failure(label, e) from (None if isinstance(e, (HipepError, MemoryError)) else e)


def _timed(stream: CpuStream, run, args, label: str):
    def work():
        t = time.perf_counter_ns()
        try:
            run(args)
        except HipepError as e:
            raise named_error(label, e) from None
        finally:
            stream.kernel_ns += time.perf_counter_ns() - t
    return work


# numpy ufuncs that compute exactly what the registry reference does for these dtypes (same-dtype
# float operands: numpy rounds once per element as ORT's CPU kernels do).
_UFUNCS = {"::Add": np.add, "::Sub": np.subtract, "::Mul": np.multiply, "::Div": np.divide}
_UFUNC_DTYPES = {"float32", "float64"}


class CpuProgram:
    """The CPU device's program for a kernel: the op's numpy reference (the oracle), called with
    the launch's arguments (inputs, then outputs), its results written into the outputs."""

    def __init__(self, kernel: Kernel):
        domain, op_type = split_op_key(kernel.name)
        op = lookup(domain, op_type)
        if op is None:
            raise HipepError(f"{kernel.label or kernel.name}: no program for kernel {kernel.name}")
        self.kernel = kernel
        self.label = kernel.label or kernel.name
        self.reference = op.reference
        self.attrs = kernel.constants
        self.n_in = kernel.arity
        ufunc = _UFUNCS.get(kernel.name)
        if ufunc is not None and len(kernel.dtypes) == 3 and set(kernel.dtypes) <= _UFUNC_DTYPES \
                and len(set(kernel.dtypes)) == 1:
            self._ufunc = ufunc
            self.run = self._run_ufunc
        else:
            self.run = self._run_reference

    def __call__(self, args) -> None:
        self.run(args)

    def _run_ufunc(self, args) -> None:
        self._ufunc(args[0], args[1], out=args[2])

    def _run_reference(self, args) -> None:
        n = self.n_in
        outs = args[n:]
        results = self.reference(args[:n], self.attrs)
        for j, dst in enumerate(outs):
            if dst is None:
                continue
            if j >= len(results):
                raise HipepError(f"the reference produced {len(results)} outputs, the launch writes {len(outs)}")
            r = results[j]
            if not isinstance(r, np.ndarray):
                r = np.asarray(r)
            if r.shape != dst.shape:
                raise RuntimeShapeError(f"output {j} came out with shape {list(r.shape)}, but the shape rule "
                                        f"said {list(dst.shape)}")
            if r.dtype != dst.dtype:
                raise HipepError(f"output {j} came out as {r.dtype}, the plan declares {dst.dtype}")
            np.copyto(dst, r)
