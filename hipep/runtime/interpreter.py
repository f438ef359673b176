"""Runs a launch plan step by step: the executor's path for plans whose shapes depend on values
computed on the device (Loop, If, a shape read from a kernel's result) or that leave work queued
after Compute. Plans without such steps are specialized and replayed (hipep.runtime.executor).

Per run: ORT's inputs and the weights are bound as read-only arrays (device-space values), the
plan's constants as host-visible ones; then the steps are walked in order. For each Launch and
HostStep the executor computes the output shapes *when it issues the step*, from the inputs'
shapes and the values of the op's host inputs (read by the host now: if the plan lacks a sync
the value may be stale, exactly as on a GPU), makes each output's slot big enough (growing a
pool syncs the stream first and re-lays it out), and hands a closure to the stream (Launch) or
runs it at once on the host (HostStep). The closure reads and writes memory through views when
it runs. Shapes live in a per-run table (value id → shape); views are made from the current pool
whenever needed, so a re-layout never leaves one stale.

On a device whose kernels cannot address host memory (a GPU), the run's values live in the
device's memory: ORT's host inputs are staged into it, launches are bound and issued on the run's
stream (Device.launch), host steps run the device's host path (Device.run_host_step), what the host
reads (a loop's condition, a shape rule's host input) comes back through Device.read, copies are
the device's, and the outputs are copied into ORT's buffers before the final sync. The CPU device
computes in place on numpy views.

Runs of one plan may be concurrent (ORT calls Compute from several threads): each run takes a
PoolSet (pools + stream) from a free list and gives it back at the end, so concurrent runs never
share memory while sequential runs reuse it — which is why the plan's final Sync matters.
"""
from __future__ import annotations

import functools
import threading
from typing import Callable, Sequence

import ml_dtypes  # noqa: F401  (registers numpy's 'bfloat16' dtype name used by plans)
import numpy as np

from ..errors import HipepError, RuntimeShapeError
from ..graph import TensorType, elem_type_of
from ..ops.registry import OpDef, lookup
from ..plan import MEMORY_SPACES, HostStep, If, Launch, Loop, Plan, Sync, split_op_key, walk
from .. import counters
from .device import Device, step_failure
from .kernels import kernel_of
from .memory import PoolSet, allocation_failure, byte_size, round_up
from .shapes import check_static, oversize


class Interpreter:
    def __init__(self, plan: Plan, device: Device, weights=None):
        self.plan = plan
        self.device = device
        self._ops: dict[str, OpDef] = {}
        for step in walk(plan.steps):
            if isinstance(step, (Launch, HostStep)) and step.op not in self._ops:
                domain, op_type = split_op_key(step.op)
                op = lookup(domain, op_type)
                if op is None:  # the compiler only emits registered ops; a plan from elsewhere may not
                    raise HipepError(f"plan '{plan.name}' uses unknown op {domain or 'ai.onnx'}::{op_type}")
                self._ops[step.op] = op
        _check_plan(plan)
        self._storage = {vid: plan.storage_of(vid) for vid, v in plan.values.items() if v.kind == "buffer"}
        self._slot_counts = plan.slot_counts()
        self._constants: dict[int, np.ndarray] = {}
        for vid, v in plan.values.items():
            if v.kind == "constant":
                self._constants[vid] = _read_only(np.array(plan.constants[v.constant], dtype=v.dtype, order="C"))
            elif v.kind == "weight" and v.index < 0:  # held by hipep, not handed in by ORT
                self._constants[vid] = _read_only(bound_weight(plan, vid, weights))
        self._programs: dict[int, object] = {}
        # ORT's input memory is valid during Compute only. A plan that ends with a Sync leaves no
        # queued work behind, so it may read ORT's arrays in place; one that does not may leave
        # work that runs in a later run, so it gets copies.
        self._copy_inputs = not (plan.steps and isinstance(plan.steps[-1], Sync))
        self._lock = threading.Lock()
        self._free: list[PoolSet] = []
        self._runs = 0
        # Whether values live in memory the host cannot address (a GPU's): see the module doc.
        self.device_memory = not device.addresses_host_memory
        self._constant_views: dict[tuple, object] = {}  # (value, shape) -> its view of a constant

    @property
    def runs(self) -> int:
        return self._runs

    def pool_sets(self) -> list[PoolSet]:
        """The idle pool sets (tests look at their pools)."""
        with self._lock:
            return list(self._free)

    def program(self, step, label: str):
        program = self._programs.get(id(step))
        if program is None:
            program = self._programs[id(step)] = self.device.compile(kernel_of(self.plan, step, label))
        return program

    def run(self, inputs: Sequence[np.ndarray | None], allocate_outputs=None) -> list[np.ndarray]:
        plan = self.plan
        if len(inputs) != len(plan.inputs):
            raise HipepError(f"{plan.name}: got {len(inputs)} inputs, the plan expects {len(plan.inputs)}")
        with self._lock:
            index = self._runs
            self._runs += 1
            pools = self._free.pop() if self._free else None
        if pools is None:
            pools = PoolSet(self.device, self._slot_counts)
        ok = False
        run = None
        try:
            if not pools.stream.pending:  # nothing queued from a run before: slots may move
                for pool in pools.pools.values():
                    pool.compact()
            pools.stream.begin_run(index)
            run = _Run(self, pools)
            try:
                outputs = run.execute(inputs, allocate_outputs)
            finally:
                counters.bump_many(launches=run.launches, host_reads=run.host_reads,
                                   kernel_us=self.device.kernel_ns(pools.stream) // 1000)
            ok = True
            return outputs
        finally:
            if not ok:  # queued work of a failed run would only read garbage: drop it
                pools.stream.discard()
            for memory in run.scratch if run is not None else ():  # the stream has no work left that reads it
                self.device.free(memory)
            with self._lock:
                self._free.append(pools)


class _Run:
    """One run's state: the shape table, the bound arrays, the pools and stream it holds."""

    def __init__(self, ex: Interpreter, pools: PoolSet):
        self.ex = ex
        self.plan = ex.plan
        self.values = ex.plan.values
        self.pools = pools.pools
        self.stream = pools.stream
        self.shapes: dict[int, tuple[int, ...]] = {}  # buffer id → shape it has in this run
        self.arrays: dict[int, np.ndarray | None] = dict(ex._constants)  # inputs, weights, constants
        self.where = plan_label = f"plan '{ex.plan.name}'"  # the step being issued, for messages
        self._plan_label = plan_label
        self.launches = 0
        self.host_reads = 0
        self.dev = ex.device
        self.device_memory = ex.device_memory
        self.scratch: list = []  # allocations of staged copies, the newest last; freed when the run ends

    def execute(self, inputs, allocate_outputs=None) -> list:
        self._bind(inputs)
        self._block(self.plan.steps)
        if self.device_memory:
            return self._copy_out(allocate_outputs)
        outputs = self.stream.run_host("outputs", self._collect)
        if allocate_outputs is not None:  # shapes known only now: ORT's outputs get copies
            allocated = list(allocate_outputs([o.shape for o in outputs]))
            for dst, a in zip(allocated, outputs):
                np.copyto(dst, a)
            outputs = allocated  # ORT's own buffers: nothing left for Compute to copy
        return outputs

    # ---- values --------------------------------------------------------------------------------

    def _bind(self, inputs) -> None:
        for pos, (vid, a) in enumerate(zip(self.plan.inputs, inputs)):
            spec = self.values[vid]
            if spec.kind not in ("input", "weight"):
                continue  # the plan holds this one itself
            if a is None:
                self.arrays[vid] = None
                continue
            check_static(f"{self.plan.name}: input {pos}", spec, a.shape)
            if self.device_memory:
                # ORT's tensors in the device's memory are used in place; host ones are staged
                if a.__class__ not in self.dev.array_types:
                    a = self.dev.stage_input(self.stream, pos, np.asarray(a, order="C"))
                if a.dtype != np.dtype(spec.dtype):
                    raise HipepError(f"{self.plan.name}: input {pos} ('{spec.name}') is {a.dtype}, "
                                     f"the plan expects {spec.dtype}")
                self.arrays[vid] = a
                continue
            a = np.asarray(a)
            if a.dtype != np.dtype(spec.dtype):
                raise HipepError(f"{self.plan.name}: input {pos} ('{spec.name}') is {a.dtype}, "
                                 f"the plan expects {spec.dtype}")
            if self.ex._copy_inputs or not a.flags.c_contiguous:
                a = np.array(a, order="C")
            self.arrays[vid] = _read_only(a)

    def shape(self, vid: int) -> tuple[int, ...]:
        spec = self.values[vid]
        if spec.kind != "buffer":
            a = self.arrays[vid]
            if a is None:
                raise HipepError(f"{self.where}: value %{vid} ('{spec.name}') is an omitted input")
            return a.shape
        try:
            return self.shapes[vid]
        except KeyError:
            raise HipepError(f"{self.where}: value %{vid} ('{spec.name}') is read before any step "
                             f"produced it") from None

    def array(self, vid: int, shape: tuple[int, ...] | None = None):
        """The value as an array over its current storage (a view into the pool for buffers)."""
        spec = self.values[vid]
        if spec.kind != "buffer":
            return self.arrays[vid]
        shape = self.shape(vid) if shape is None else shape
        dtype = np.dtype(spec.dtype)
        nbytes = _nbytes(shape, dtype)
        root = self.ex._storage[vid]
        rspec = self.values[root]
        if rspec.kind == "buffer":
            pool = self.pools[rspec.space]
            if not pool.fits(rspec.slot, nbytes):
                raise RuntimeShapeError(
                    f"{self.where}: value %{vid} ('{spec.name}') needs {nbytes} bytes for shape {list(shape)}, but its "
                    f"storage (slot {rspec.slot} of {rspec.space}) holds {pool.capacity[rspec.slot]}")
            return pool.view(rspec.slot, dtype, shape)
        base = self.arrays[root]  # a view of an input, weight or constant
        if nbytes > base.nbytes:
            raise RuntimeShapeError(f"{self.where}: value %{vid} ('{spec.name}') needs {nbytes} bytes for shape "
                                    f"{list(shape)}, but the value it views ('{rspec.name}') has {base.nbytes}")
        if self.device_memory and isinstance(base, np.ndarray):
            # a constant's view: the same array each time, so the device uploads it once
            key = (vid, tuple(shape))
            view = self.ex._constant_views.get(key)
            if view is None:  # (the interpreter holds its constants for its whole life)
                view = self.ex._constant_views[key] = self.dev.subview(base, 0, dtype, shape)
            return view
        return self.dev.subview(base, 0, dtype, shape)

    def host_read(self, label: str, vid: int) -> np.ndarray:
        """A copy of the value as the host sees it now (no sync: a missing one shows). Counted
        among the run's host reads: a buffer's, and on a device with its own memory any value
        there (ORT's inputs staged or handed over in device memory)."""
        spec = self.values[vid]
        if spec.kind == "buffer" or (self.device_memory and spec.kind in ("input", "weight")):
            self.host_reads += 1
        return self.stream.run_host(label, lambda: self.dev.read(self.stream, self.array(vid)))

    def _prepare(self, outputs: list[tuple[int, tuple[int, ...]]], label: str, step: bool = False) -> None:
        """Records the outputs' shapes, growing their slots first where too small. `step`: the
        outputs of a launch or host step, checked against the extents the plan was compiled with
        (control flow's copies are not: a loop's results are typed like its initial values)."""
        needs: dict[str, dict[int, int]] = {}
        for vid, shape in outputs:
            spec = self.values[vid]
            try:
                _nbytes(shape, np.dtype(spec.dtype))
            except RuntimeShapeError as e:
                raise RuntimeShapeError(f"{label}: output '{spec.name}': {e}") from None
            if spec.kind != "buffer":
                raise HipepError(f"{label}: writes %{vid} ('{spec.name}'), which is a {spec.kind}, not a buffer")
            if step:
                check_static(label, spec, shape)
            if spec.owns_slot:
                nbytes = _nbytes(shape, np.dtype(spec.dtype))
                if not self.pools[spec.space].fits(spec.slot, nbytes):
                    slots = needs.setdefault(spec.space, {})
                    slots[spec.slot] = max(slots.get(spec.slot, 0), nbytes)
        if needs:
            if any(self.pools[space].moves_memory(slots) for space, slots in needs.items()):
                self.stream.sync()  # bytes queued work may use are about to move
            for space, slots in needs.items():
                try:
                    self.pools[space].grow(slots)
                except (MemoryError, HipepError) as e:  # numpy's or the driver's allocation said no
                    wanted = ", ".join(f"'{self.values[vid].name}' {list(shape)}:{self.values[vid].dtype}"
                                       for vid, shape in outputs)
                    raise HipepError(f"{label}: could not allocate {byte_size(sum(slots.values()))} of {space} memory "
                                     f"for its outputs ({wanted}): {allocation_failure(e)}") from None
        for vid, shape in outputs:
            self.shapes[vid] = shape

    def _collect(self) -> list[np.ndarray]:
        self.where = self._plan_label + " outputs"
        return [np.array(self.array(vid), order="C", copy=True) for vid in self.plan.outputs]

    def _copy_out(self, allocate_outputs) -> list:
        """The outputs copied out of the device's memory (into ORT's buffers where given), once
        the stream's work is done."""
        self.where = self._plan_label + " outputs"
        results = [self.array(vid) for vid in self.plan.outputs]
        shapes = [tuple(a.shape) for a in results]
        if allocate_outputs is not None:
            outputs = list(allocate_outputs(shapes))
        else:
            outputs = [np.empty(s, np.dtype(self.values[vid].dtype)) for s, vid in zip(shapes, self.plan.outputs)]
        for dst, src in zip(outputs, results):
            self.dev.copy_async(self.stream, dst, src, self.where)
        self.stream.sync()
        return outputs

    # ---- steps ---------------------------------------------------------------------------------

    def _block(self, block) -> None:
        for step in block:
            if isinstance(step, Launch):
                self._op(step, host=False)
            elif isinstance(step, HostStep):
                self._op(step, host=True)
            elif isinstance(step, Sync):
                self.stream.sync()
            elif isinstance(step, Loop):
                self._loop(step)
            elif isinstance(step, If):
                self._if(step)
            else:
                raise HipepError(f"{self.plan.name}: unknown plan step {step!r}")

    def _op(self, step: Launch | HostStep, host: bool) -> None:
        op = self.ex._ops[step.op]
        label = self.where = f"node '{step.node}' ({op.op_type})"
        shapes = self._output_shapes(step, op, label)
        self._prepare([(vid, s) for vid, s in zip(step.outputs, shapes) if vid >= 0], label, step=True)
        ins = [None if vid < 0 else self.array(vid) for vid in step.inputs]
        outs = [None if vid < 0 else self.array(vid) for vid in step.outputs]
        program = self.ex.program(step, label)
        args = ins + outs
        if self.device_memory:  # bound and issued now; the stream runs it in order
            if host:
                self.stream.run_host(label, lambda: _named_call(
                    label, lambda: self.dev.run_host_step(self.stream, program, args), ins))
            else:
                self.launches += 1
                _named_call(label, lambda: self.dev.launch(self.stream, program, args, label), ins)
            return

        def work():  # reads the inputs and writes the outputs when it runs, not when issued
            _named_call(label, lambda: program.run(args), ins)

        if host:
            self.stream.run_host(label, work)
        else:
            self.launches += 1
            self.stream.enqueue(label, work)

    def _output_shapes(self, step, op: OpDef, label: str) -> list[tuple[int, ...] | None]:
        n_out = len(step.outputs)
        if op.shape_rule is None:
            # Transitional, while shape rules are being added to the registry: an op without
            # one cannot be sized before it runs, so the host waits for the stream, runs the
            # reference on the current inputs and takes the shapes it produced. The sync hides
            # any missing sync before this step; ops with a rule get the real treatment.
            self.stream.sync()
            ins = [None if vid < 0 else self.array(vid) for vid in step.inputs]
            if self.device_memory:  # the reference runs on host copies
                ins = [None if a is None else self.dev.read(self.stream, a) for a in ins]
            results = self.stream.run_host(
                label, lambda: _named_call(label, lambda: op.reference(ins, step.attributes), ins))
            return [tuple(np.shape(results[j])) if j < len(results) else None for j in range(n_out)]
        types, values, described = [], [], []
        for pos, vid in enumerate(step.inputs):
            if vid < 0 or (self.values[vid].kind in ("input", "weight") and self.arrays.get(vid) is None):
                types.append(None)  # omitted optional input (ORT passes None)
                values.append(None)
                described.append(None)
                continue
            spec = self.values[vid]
            shape = self.shape(vid)
            types.append(TensorType(_elem_type(spec.dtype), tuple(shape)))
            described.append(_Described(shape, spec.dtype))
            if pos in op.host_inputs:  # the host reads it now
                values.append(self.host_read(label, vid))
            elif spec.kind == "constant":  # known to the host anyway
                values.append(self.arrays[vid])
            else:
                values.append(None)
        result = _named_call(label, lambda: op.shape_rule(types, values, step.attributes, n_out), described)
        shapes: list[tuple[int, ...] | None] = []
        for j, vid in enumerate(step.outputs):
            if vid < 0:
                shapes.append(None)
                continue
            t = result[j] if j < len(result) else None
            dims = None if t is None else t.shape
            if dims is None or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0
                                       for d in dims):
                got = "no type" if t is None else str(t)
                ins = ", ".join(_describe(d) for d in described)
                raise RuntimeShapeError(f"{label}: the shape rule gave output {j} {got}, not a static shape, "
                                        f"for inputs ({ins})")
            shapes.append(tuple(int(d) for d in dims))
        return shapes

    # ---- control flow --------------------------------------------------------------------------

    def _host_scalar(self, label: str, vid: int, what: str):
        v = self.host_read(label, vid)
        if v.size != 1:
            raise RuntimeShapeError(f"{label}: the {what} must have one element, got shape {list(v.shape)}")
        return v.reshape(()).item()

    def _fill(self, label: str, vid: int, value) -> None:
        """Queues a write of a host value into a buffer (a host-to-device copy)."""
        spec = self.values[vid]
        self._prepare([(vid, ())], label)
        self.dev.copy_async(self.stream, self.array(vid), np.array(value, dtype=spec.dtype), label)

    def _copies(self, label: str, pairs) -> None:
        """Queues copies src → dst (device work). All sources are read before any destination is
        written, so carried values that swap places stay right."""
        pairs = [(s, d) for s, d in pairs if d >= 0]
        if not pairs:
            return
        src_shapes = [self.shape(s) for s, _ in pairs]
        for (s, d) in pairs:
            if np.dtype(self.values[s].dtype) != np.dtype(self.values[d].dtype):
                raise HipepError(f"{label}: copies %{s} ({self.values[s].dtype}) into %{d} ({self.values[d].dtype})")
        self._prepare([(d, shape) for (_, d), shape in zip(pairs, src_shapes)], label)
        srcs = [self.array(s, shape) for (s, _), shape in zip(pairs, src_shapes)]
        dsts = [self.array(d) for _, d in pairs]
        if _overlapping(srcs, dsts):
            # a destination is a later copy's source (carried values that swap places): every
            # source goes to scratch memory first. The run's scratch is reused from one set of
            # copies to the next (an iteration's): the stream runs them in order, so the next
            # set's copies into it start after this set's copies out of it.
            total = sum(round_up(a.nbytes) for a in srcs)
            if not self.scratch or self.scratch[-1].nbytes < total:
                self.scratch.append(self.dev.alloc("device", max(total, 2 * self.scratch[-1].nbytes)
                                                   if self.scratch else total))
            memory = self.scratch[-1]
            staged, at = [], 0
            for a in srcs:
                view = self.dev.view(memory, at, a.dtype, a.shape)
                self.dev.copy_async(self.stream, view, a, label)
                staged.append(view)
                at += round_up(a.nbytes)
            srcs = staged
        for dst, a in zip(dsts, srcs):
            if _address(dst) != _address(a):  # (a value carried onto its own bytes stays)
                self.dev.copy_async(self.stream, dst, a, label)

    def _append(self, label: str, src: int, dst: int, i: int) -> None:
        """Queues the copy of iteration i's scan value into row i of the stacked output."""
        row = tuple(self.shape(src))
        if i > 0 and self.shapes[dst][1:] != row:
            raise RuntimeShapeError(f"{label}: scan output '{self.values[dst].name}' has shape {list(row)} in "
                                    f"iteration {i} but {list(self.shapes[dst][1:])} before")
        self._prepare([(dst, (i + 1,) + row)], label)
        s = self.array(src)
        dtype = np.dtype(self.values[dst].dtype)
        d = self.dev.subview(self.array(dst), i * _nbytes(row, dtype), dtype, row)  # a view, also for 0-d rows
        self.dev.copy_async(self.stream, d, s, label)

    def _loop(self, s: Loop) -> None:
        label = self.where = f"node '{s.node}' (Loop)"
        n = len(s.carried)
        trip = None if s.trip_count < 0 else int(self._host_scalar(label, s.trip_count, "trip count"))
        cond = True if s.cond < 0 else bool(self._host_scalar(label, s.cond, "condition"))
        iter_arg, cond_arg, carried_args = s.body_args[0], s.body_args[1], s.body_args[2:]
        cond_result, carried_results, scan_results = s.body_results[0], s.body_results[1:1 + n], s.body_results[1 + n:]
        final_outputs, scan_outputs = s.outputs[:n], s.outputs[n:]
        self._copies(label, zip(s.carried, carried_args))
        i = 0
        while (trip is None or i < trip) and cond:
            if iter_arg >= 0:
                self._fill(label, iter_arg, i)
            if cond_arg >= 0:
                self._fill(label, cond_arg, cond)
            self._block(s.body)
            self.where = label
            if cond_result != cond_arg:  # (a body that yields its condition argument keeps the host's value)
                cond = bool(self._host_scalar(label, cond_result, "condition result"))  # the host reads it now
            for src, dst in zip(scan_results, scan_outputs):
                if dst >= 0:
                    self._append(label, src, dst, i)
            self._copies(label, zip(carried_results, carried_args))
            i += 1
        if i == 0:  # no iteration: rows of the shape the body's types give, else an empty vector
            rows = list(s.scan_rows) + [None] * (len(scan_outputs) - len(s.scan_rows))
            self._prepare([(dst, (0,) + tuple(row or ())) for dst, row in zip(scan_outputs, rows) if dst >= 0],
                          label)
        self._copies(label, zip(carried_args, final_outputs))

    def _if(self, s: If) -> None:
        label = self.where = f"node '{s.node}' (If)"
        cond = bool(self._host_scalar(label, s.cond, "condition"))
        block, results = (s.then_body, s.then_results) if cond else (s.else_body, s.else_results)
        self._block(block)
        self.where = label
        self._copies(label, zip(results, s.outputs))


# ---- helpers ------------------------------------------------------------------------------------

class _Described:
    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), dtype

    def __str__(self):
        return f"{list(self.shape)}:{self.dtype}"


def _describe(a) -> str:
    if a is None:
        return "None"
    if isinstance(a, _Described):
        return str(a)
    return f"{list(np.shape(a))}:{np.asarray(a).dtype}"


def _named_call(label: str, fn: Callable, inputs):
    """fn(), with any exception it raises re-raised as a hipep error naming the node."""
    try:
        return fn()
    except HipepError as e:
        try:
            named = type(e)(f"{label}: {e}")
        except Exception:
            named = HipepError(f"{label}: {e}")
        raise named from None
    except (ValueError, IndexError, TypeError) as e:
        shapes = ", ".join(_describe(a) for a in inputs)
        raise RuntimeShapeError(f"{label} failed on inputs ({shapes}): {e}") from None
    except Exception as e:
        raise step_failure(label, e) from (None if isinstance(e, MemoryError) else e)


def bound_weight(plan: Plan, vid: int, weights) -> np.ndarray:
    """The array of a weight hipep holds (a plan value of kind "weight" that is no input)."""
    spec = plan.values[vid]
    if weights is None or spec.name not in weights:
        raise HipepError(f"plan '{plan.name}': weight '{spec.name}' was not given to the executor")
    a = np.asarray(weights[spec.name])
    if a.dtype != np.dtype(spec.dtype):
        raise HipepError(f"plan '{plan.name}': weight '{spec.name}' is {a.dtype}, the plan expects {spec.dtype}")
    return np.ascontiguousarray(a)


def _address(a) -> tuple[int, int]:
    """(start, end) of an array's bytes: a device array's address, else a numpy array's."""
    start = a.ptr if hasattr(a, "ptr") else a.__array_interface__["data"][0]
    return start, start + a.nbytes


def _overlapping(srcs, dsts) -> bool:
    """Whether a copy's destination shares bytes with a source (other than its own, exactly the
    same bytes: a copy onto itself changes nothing)."""
    spans = [_address(a) for a in srcs]
    for k, d in enumerate(dsts):
        lo, hi = _address(d)
        if hi == lo:
            continue
        for j, (s_lo, s_hi) in enumerate(spans):
            if s_lo < hi and lo < s_hi and not (j == k and (s_lo, s_hi) == (lo, hi)):
                return True
    return False


def _read_only(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v


def _nbytes(shape, dtype: np.dtype) -> int:
    dims = [int(d) for d in shape]
    nbytes, why = oversize(dims, dtype.itemsize)
    if why:
        raise RuntimeShapeError(f"a tensor of shape {dims} ({dtype}) {why}")
    return nbytes


@functools.lru_cache(maxsize=None)
def _elem_type(dtype: str) -> int:
    return elem_type_of(np.dtype(dtype))


def _check_plan(plan: Plan) -> None:
    """Structural checks, so a malformed plan fails when it is loaded rather than mid-run."""
    def bad(msg):
        return HipepError(f"plan '{plan.name}': {msg}")

    for vid, v in plan.values.items():
        if v.kind not in ("input", "weight", "constant", "buffer"):
            raise bad(f"value %{vid} has unknown kind {v.kind!r}")
        if v.kind == "constant" and v.constant not in plan.constants:
            raise bad(f"value %{vid} names constant {v.constant!r}, which the plan does not hold")
        if v.kind == "buffer":
            if v.space not in MEMORY_SPACES:
                raise bad(f"value %{vid} is in unknown memory space {v.space!r}")
            if v.view_of >= 0:
                seen = {vid}
                src = v.view_of
                while True:
                    if src not in plan.values:
                        raise bad(f"value %{vid} views %{src}, which does not exist")
                    if src in seen:
                        raise bad(f"value %{vid} is a view of itself (a cycle of views)")
                    seen.add(src)
                    sv = plan.values[src]
                    if sv.kind != "buffer" or sv.view_of < 0:
                        break
                    src = sv.view_of
            elif v.slot < 0:
                raise bad(f"buffer %{vid} has neither a slot nor a value it views")
        try:
            np.dtype(v.dtype)
        except TypeError:
            raise bad(f"value %{vid} has unknown dtype {v.dtype!r}") from None
    for pos, vid in enumerate(plan.inputs):
        if vid not in plan.values:
            raise bad(f"input {pos} is %{vid}, which does not exist")
    ids = set(plan.values)

    def known(vid, what):
        if vid >= 0 and vid not in ids:
            raise bad(f"{what} refers to %{vid}, which does not exist")

    for vid in plan.outputs:
        known(vid, "the outputs")
    for s in walk(plan.steps):
        if isinstance(s, (Launch, HostStep)):
            for vid in (*s.inputs, *s.outputs):
                known(vid, f"node '{s.node}'")
        elif isinstance(s, Loop):
            n = len(s.carried)
            if len(s.body_args) != n + 2 or len(s.body_results) < n + 1 or len(s.outputs) != len(s.body_results) - 1:
                raise bad(f"Loop '{s.node}' has {n} carried values, {len(s.body_args)} body arguments, "
                          f"{len(s.body_results)} body results and {len(s.outputs)} outputs (expected "
                          f"{n + 2} arguments and one output per body result after the condition)")
            if any(a < 0 for a in s.body_args[2:]):
                raise bad(f"Loop '{s.node}' has a carried body argument without a buffer")
            for vid in (s.trip_count, s.cond, *s.carried, *s.body_args, *s.body_results, *s.outputs):
                known(vid, f"Loop '{s.node}'")
        elif isinstance(s, If):
            if not (len(s.then_results) == len(s.else_results) == len(s.outputs)):
                raise bad(f"If '{s.node}' has {len(s.then_results)} then-results, {len(s.else_results)} "
                          f"else-results and {len(s.outputs)} outputs")
            for vid in (s.cond, *s.then_results, *s.else_results, *s.outputs):
                known(vid, f"If '{s.node}'")
