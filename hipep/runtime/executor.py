"""Runs a launch plan on a Device: specialize once per layout signature, then replay.

A run goes through three levels, each cached:

1. **Shape program** (hipep.runtime.shapes): every value's shape as expressions over the inputs'
   dims, with the guards the shape rules' decisions rest on. Traced from the registry's rules the
   first time inputs of a given rank pattern arrive, and again only when a guard breaks — which is
   also where a dimension mismatch is found, by the rule, naming the node, before any launch.
2. **Specialization**, one per *layout signature*: the values of the symbols that size buffers
   (the arena's memory). Symbols used only as values (a sequence length a kernel loops to,
   total_sequence_length) are not part of it. Per specialization the executor evaluates buffer
   sizes, lays memory out once (one arena per memory space and per concurrent run, sized to the
   maximum over specializations, grown geometrically: the same signature gets the same
   addresses), and records the plan as a flat list of launches with their arguments bound
   (`Device.capture`). Cached, LRU.
3. **Replay**: `Device.replay` with the run's ORT pointers patched in: the inputs, and the
   outputs, which ORT hands out before the first launch (`allocate_outputs`) so kernels write
   them directly. Per run the host computes the symbols from the input shapes (one generated
   function, hipep.runtime.run_functions), compares the bytes of the small float and bool inputs
   the program pinned (hipep.runtime.shapes), checks the guards that involve value-only symbols,
   writes the results of host steps that are shape arithmetic from them (hipep.runtime.host_values:
   those steps are not captured), and replays.

An If whose condition follows from shapes (the builder's LongRoPE: `Shape(mask)[1] > original_max`)
replays: the shape program's guards decide the branch, and its steps are captured in the If's place.
Plans whose shapes depend on values computed on the device (Loop, an If on a device-computed
condition, a shape read back from a kernel's result) or that end without a Sync run through the
step-by-step interpreter.
"""
from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict
from typing import Callable, Sequence

import ml_dtypes  # noqa: F401  (registers numpy's 'bfloat16' dtype name used by plans)
import numpy as np

from .. import counters
from ..errors import HipepError, RuntimeShapeError
from ..plan import MEMORY_SPACES, HostStep, If, Launch, Loop, Plan, Sync, walk
from ..symbolic import compile_exprs, compile_guards, format_guard, symbols_of
from .device import Device, GraphNode
from .host_values import HostValues, exclusive_host_slots
from .host_values import enabled as host_values_enabled
from .host_values import write as write_host_values
from .interpreter import Interpreter, _check_plan, bound_weight
from .kernels import kernel_of
from .memory import ALIGN, allocation_failure, byte_size, round_up
from .run_functions import (alias_function, exact_outputs_function, patch_function, picker, plain_inputs_function,
                            probe_function, signature_function)
from .shapes import DataDependent, ShapeProgram, branch_key, check_bytes, oversize, trace_shapes

SPECIALIZATION_CACHE = 64  # layout signatures kept per compiled subgraph (LRU)
TRACES_PER_RANKS = 8  # shape programs kept per rank pattern before the oldest goes
LAYOUTS_REMEMBERED = 1024  # layout signatures per shape program whose guards are known to hold
# A specialization whose runs are recorded for native replay gets a context of its own (a home)
# where the context its runs used holds more than twice its bytes and this much beside
# (Executor.wants_home).
HOME_SLACK = 64 * 1024


def step_label(step) -> str:
    """How launches and host steps are named in messages, and the label of their kernels."""
    return f"node '{step.node}' ({step.op_type})"


class Executor:
    def __init__(self, plan: Plan, device: Device, weights: dict | None = None,
                 cache_size: int = SPECIALIZATION_CACHE):
        _check_plan(plan)
        self.plan = plan
        self.device = device
        self.weights = weights
        self.cache_size = cache_size
        self._lock = threading.Lock()  # for what changes rarely: programs, specializations, new contexts
        self._run_index = itertools.count()  # next() is atomic: no lock per run
        self._interpreter: Interpreter | None = None
        # An If replays too: its condition, where the host knows it from shapes, is decided by the
        # shape program's guards (hipep.runtime.shapes), which then names the branch taken.
        self.replays = not any(isinstance(s, Loop) for s in walk(plan.steps)) and \
            bool(plan.steps) and isinstance(plan.steps[-1], Sync)
        # the device may start compiling the plan's kernels now (a GPU's first use on a machine)
        device.prepare_kernels(kernel_of(plan, s, step_label(s)) for s in walk(plan.steps) if isinstance(s, Launch))
        if not self.replays:
            self._interpreter = Interpreter(plan, device, weights)
            return
        self._constants: dict[int, np.ndarray] = {}
        for vid, v in plan.values.items():
            if v.kind == "constant":
                a = np.array(plan.constants[v.constant], dtype=v.dtype, order="C")
                a.flags.writeable = False
                self._constants[vid] = a
            elif v.kind == "weight" and v.index < 0:
                self._constants[vid] = bound_weight(plan, vid, weights)
        # The weights and constants launches read go to the device now, as ORT's own GPU EPs
        # copy initializers when the session is made (the ~1.1B model's 715 MB took 0.1 s of its
        # first run on the H100 otherwise).
        read = sorted({v for s in walk(plan.steps) if isinstance(s, Launch) for v in s.inputs if v in self._constants})
        try:
            device.prepare_constants(self._constants[v] for v in read)
        except HipepError as e:
            total = sum(self._constants[v].nbytes for v in read)
            size = f"{total / 2**20:.1f} MiB" if total >= 2**17 else f"{total} bytes"
            arrays = f"{len(read)} array{'s' * (len(read) != 1)}"
            raise HipepError(f"plan '{plan.name}': copying the weights and constants its launches read "
                             f"({arrays}, {size}) to {device.name} failed: {e}") from None
        self._layout = _StaticLayout(plan)
        # host-visible roots with a slot of their own, where host steps' results may be written
        # from symbols (none when HIPEP_HOST_VALUES=0: every host step runs where the plan puts it)
        self._exclusive_host = exclusive_host_slots(plan) if host_values_enabled() else set()
        self._step_index = {id(step): i for i, step in enumerate(walk(plan.steps))}  # kernels' cache keys
        self._programs: dict[tuple, list[_Program]] = {}
        for data in plan.shape_programs:  # derived at compile time
            try:
                program = _Program(self, ShapeProgram.from_data(data))
            except (KeyError, TypeError, ValueError) as e:
                raise HipepError(f"plan '{plan.name}': malformed shape program: {type(e).__name__}: {e}") from None
            self._programs.setdefault(program.shape.ranks, []).append(program)
        self._specs: OrderedDict = OrderedDict()
        self._contexts: list[_Context] = []  # idle ones (list.pop and append are atomic)
        self._all_contexts: list[_Context] = []
        self._kernels: dict[int, object] = {}  # step index → device program
        self._in_dtypes = [np.dtype(plan.values[v].dtype) for v in plan.inputs]
        self._out_dtypes = [np.dtype(plan.values[v].dtype) for v in plan.outputs]
        self._alias_pairs = [(plan.outputs.index(out), plan.values[src].index,
                              f"output '{plan.values[out].name}' and input '{plan.values[src].name}'")
                             for out, src in plan.aliases if out in plan.outputs]
        # Generated once, called every run (hipep.runtime.run_functions).
        self._device_arrays = frozenset(device.array_types)
        self._inputs_plain = plain_inputs_function(self._in_dtypes, self._device_arrays)
        self._outputs_exact = exact_outputs_function(self._out_dtypes)
        self._aliases_of = alias_function(plan.name, self._alias_pairs) if self._alias_pairs else None
        self._recent: _Program | None = None  # the shape program the latest run used: tried first
        self.last_run: tuple | None = None  # (spec, context, inputs, outputs, env) of the latest replay

    @property
    def step_by_step(self) -> bool:
        """Whether runs go through the step-by-step interpreter (control flow, or shapes that
        need device values): plans a GPU device does not run."""
        return self._interpreter is not None

    @property
    def runs(self) -> int:
        if self._interpreter is not None:
            return self._interpreter.runs
        with self._lock:
            return sum(c.runs for c in self._all_contexts)

    def pool_sets(self):
        """The interpreter's idle pool sets (tests look at their pools)."""
        return [] if self._interpreter is None else self._interpreter.pool_sets()

    def idle_contexts(self) -> list["_Context"]:
        """The streams and arenas of runs not in flight (tests look at their memory)."""
        with self._lock:
            return list(self._contexts)

    def specializations(self) -> list["_Specialization"]:
        with self._lock:
            return list(self._specs.values())

    # ---- a run -----------------------------------------------------------------------------

    def run(self, inputs: Sequence[np.ndarray | None], allocate_outputs=None) -> list[np.ndarray]:
        started = time.perf_counter_ns()
        plan = self.plan
        if len(inputs) != len(plan.inputs):
            raise HipepError(f"{plan.name}: got {len(inputs)} inputs, the plan expects {len(plan.inputs)}")
        if self._interpreter is not None:
            return self._interpreter.run(inputs, allocate_outputs)
        if not self._inputs_plain(inputs):
            inputs = self._check_inputs(inputs)
        # The common run: the latest shape program holds for these inputs and knows their layout
        # signature; one generated call gives the symbols, the guards' verdict and the output shapes.
        program = self._recent
        found = None if program is None else program.probe(inputs)
        if found is not None and found[1] in program.layouts:
            env, layout, shapes = found
        else:
            try:
                program, env, layout = self._program(inputs)
            except _Retry:
                return self._interpreter.run(inputs, allocate_outputs)
            shapes = program.output_shapes(env)
            self._check_output_bytes(shapes)
            self._recent = program
        outputs = self._outputs(shapes, allocate_outputs)
        alias = () if self._aliases_of is None or allocate_outputs is None else self._aliases_of(inputs, outputs)
        spec, hit = self._specialization((id(program), layout, alias), program, env)
        index = next(self._run_index)
        context = None
        if spec.home:  # (a specialization native replay records runs on a context of its own)
            try:
                context = spec.home.pop()
            except IndexError:  # in flight on another thread
                pass
        if context is None:
            try:
                context = self._contexts.pop()
            except IndexError:  # every context is in flight (or none was made yet)
                context = _Context(self.device)
                with self._lock:
                    self._all_contexts.append(context)
        context.runs += 1
        ok = False
        device, stream = self.device, context.stream
        try:
            context.stream.begin_run(index)
            # ORT's memory as kernel arguments: the CPU device takes it as it is; a device that
            # cannot address it stages it through buffers of its own (copies on the stream)
            if device.addresses_host_memory:
                staged_in, staged_out = inputs, outputs
            else:  # (the device's own arrays, ORT's tensors in its memory, pass as they are)
                own = self._device_arrays
                staged_in = [a if a is None or a.__class__ in own else device.stage_input(stream, pos, a)
                             for pos, a in enumerate(inputs)]
                staged_out = [a if a.__class__ in own else device.stage_output(stream, j, a)
                              for j, a in enumerate(outputs)]
            self._replay(spec, context, staged_in, staged_out, env)
            for j, src in spec.copied_outputs:  # outputs that are not kernels' own results
                device.copy_async(stream, staged_out[j],
                                  self._value_array(src, context, staged_in, staged_out, env, spec), "output copy")
            device.finish_outputs(stream, staged_out, outputs)
            ok = True
            # what a native replay record is built from (hipep.runtime.native_replay)
            self.last_run = (spec, context, staged_in, staged_out, env)
            return outputs
        finally:
            if not ok:
                context.stream.discard()
            tally, T = context.tally.values, counters.Tally
            tally[T.LAUNCHES] += spec.launches
            tally[T.HITS if hit else T.SPECIALIZATIONS] += 1
            tally[T.HOST_READS] += spec.reads
            tally[T.KERNEL_NS] += device.kernel_ns(stream)
            direct, graphs, updates = device.issue_counts(stream)
            tally[T.DIRECT] += direct
            tally[T.GRAPHS] += graphs
            tally[T.NODE_UPDATES] += updates
            tally[T.SYNC_WAIT_NS] += device.sync_wait_ns(stream)
            tally[T.RUN_NS] += time.perf_counter_ns() - started
            (spec.home if context.home_of is spec else self._contexts).append(context)

    def _check_inputs(self, inputs):
        out = list(inputs)
        for pos, (a, dtype) in enumerate(zip(inputs, self._in_dtypes)):
            if a is None:
                continue
            if not isinstance(a, np.ndarray) and hasattr(a, "ptr"):
                pass  # a device array (ORT's tensor in device memory), used in place
            elif type(a) is not np.ndarray or not a.flags.c_contiguous:
                a = out[pos] = np.asarray(a, order="C")  # (0-d stays 0-d)
            if a.dtype != dtype:
                spec = self.plan.values[self.plan.inputs[pos]]
                raise HipepError(f"{self.plan.name}: input {pos} ('{spec.name}') is {a.dtype}, "
                                 f"the plan expects {spec.dtype}")
        return out

    def _check_output_bytes(self, shapes) -> None:
        for s, v in zip(shapes, self.plan.outputs):
            check_bytes(f"plan '{self.plan.name}' output", self.plan.values[v], s)

    def _outputs(self, shapes, allocate_outputs):
        try:
            if allocate_outputs is None:
                return [np.empty(s, dtype=dtype) for s, dtype in zip(shapes, self._out_dtypes)]
            arrays = allocate_outputs(shapes)
        except (MemoryError, ValueError, RuntimeError) as e:  # numpy's or ORT's allocator said no
            names = [self.plan.values[v].name for v in self.plan.outputs]
            wanted = ", ".join(f"'{n}' {list(s)}:{d}" for n, s, d in zip(names, shapes, self._out_dtypes))
            raise HipepError(f"{self.plan.name}: could not allocate the outputs ({wanted}): "
                             f"{allocation_failure(e)}") from None
        if type(arrays) is not list:
            arrays = list(arrays)
        if self._outputs_exact(arrays, shapes):
            return arrays
        if len(arrays) != len(shapes):
            raise HipepError(f"{self.plan.name}: allocate_outputs returned {len(arrays)} arrays for "
                             f"{len(shapes)} outputs")
        for j, (a, s, dtype) in enumerate(zip(arrays, shapes, self._out_dtypes)):
            if a.shape != s or (a.dtype is not dtype and a.dtype != dtype):
                raise HipepError(f"{self.plan.name}: output {j} was allocated as {list(a.shape)}:{a.dtype}, "
                                 f"expected {list(s)}:{dtype}")
        return arrays

    # ---- specialization --------------------------------------------------------------------

    def _program(self, inputs):
        """The shape program whose guards this run's inputs satisfy (traced anew if none), the
        run's symbol values, and its layout signature."""
        ranks = tuple(None if a is None else a.ndim for a in inputs)
        for program in self._programs.get(ranks, ()):
            env = program.signature(inputs)
            if env is None or not program.value_guards(env):
                continue
            layout = program.layout_key(env)
            if layout in program.layouts or program.layout_guards(env):
                if len(program.layouts) < LAYOUTS_REMEMBERED:  # past that, check the guards again
                    program.layouts.add(layout)
                return program, env, layout
        try:
            shape = trace_shapes(self.plan, inputs, self._constants)
        except DataDependent:
            # shapes need device values: this plan runs step by step from now on
            self._interpreter = Interpreter(self.plan, self.device, self.weights)
            raise _Retry() from None
        program = _Program(self, shape)
        env = program.signature(inputs)
        if env is None or not program.value_guards(env) or not program.layout_guards(env):
            raise HipepError(f"{self.plan.name}: the traced shape program does not hold for its own inputs "
                             f"({program.explain_guards(env)})")
        with self._lock:
            family = self._programs.setdefault(ranks, [])
            family.insert(0, program)
            del family[TRACES_PER_RANKS:]
        layout = program.layout_key(env)
        program.layouts.add(layout)
        return program, env, layout

    def _specialization(self, key, program, env):
        # OrderedDict's get and move_to_end are single atomic calls; insertion and eviction take
        # the lock. A key evicted between the two calls only loses its place in the LRU order.
        spec = self._specs.get(key)
        if spec is not None:
            try:
                self._specs.move_to_end(key)
            except KeyError:
                pass
            return spec, True
        return self._new_specialization(key, program, env), False

    def _new_specialization(self, key, program: "_Program", env) -> "_Specialization":
        spec = _Specialization(self, program, env)
        with self._lock:
            self._specs[key] = spec
            while len(self._specs) > self.cache_size:
                _, evicted = self._specs.popitem(last=False)
                for context in [c for c in self._all_contexts if c.home_of is evicted]:
                    self._retire(context)  # (one in flight goes back to a list nothing reads)
        return spec

    # ---- contexts native replay takes ------------------------------------------------------

    def wants_home(self, spec: "_Specialization", context: "_Context") -> bool:
        """Whether native replay, about to record `spec` on the context its runs used, should
        record it on a context of its own instead. A record keeps its context for good: the
        Python path then makes another for the other layouts. So where the context is much larger
        than `spec` needs (a decode step's after a long prompt's: the new one would grow as large),
        or holds other layouts' captured graphs (a prompt length seen again would be captured
        again), `spec` gets a home sized for itself, and the context stays in the pool."""
        need = spec.arena_bytes
        if any(size > 2 * need.get(space, 0) + HOME_SLACK for space, size in context.sizes.items()):
            return True
        with self._lock:
            specs = list(self._specs.values())
        return any(other is not spec and (bound := other.graphs.get(context.key)) is not None
                   and bound[0] == context.generation for other in specs)

    def give_home(self, spec: "_Specialization") -> None:
        """A new context only `spec`'s runs take (Executor.run), for native replay to record on."""
        context = _Context(self.device, home_of=spec)
        with self._lock:
            self._all_contexts.append(context)
        spec.home.append(context)

    def retire(self, context: "_Context") -> None:
        """The context leaves the executor, with every graph captured on it (a native replay
        record's, when the record ends: native code changed what they hold)."""
        with self._lock:
            self._retire(context)

    def _retire(self, context: "_Context") -> None:
        if context in self._all_contexts:
            self._all_contexts.remove(context)
        for spec in self._specs.values():
            spec.graphs.pop(context.key, None)
        home = context.home_of
        if home is not None and context in home.home:
            home.home.remove(context)

    def _largest_buffer(self, spec: "_Specialization", space: str) -> str:
        """The largest buffer of `space` in the specialization's layout and the node writing it
        (what an allocation error names)."""
        values, root = self.plan.values, self._layout.root
        sized = [(_nbytes(self.plan, vid, shape), vid) for vid, shape in spec.shapes.items()
                 if values[root[vid]].space == space]
        if not sized:
            return ""
        nbytes, vid = max(sized)
        v = values[vid]
        return (f"the largest: '{v.name}' {list(spec.shapes[vid])}:{v.dtype}, {byte_size(nbytes)}, "
                f"{_writer(self.plan, vid)}")

    # ---- binding ---------------------------------------------------------------------------

    def _kernel(self, index, step, label: str):
        program = self._kernels.get(index)
        if program is None:
            program = self._kernels[index] = self.device.compile(kernel_of(self.plan, step, label))
        return program

    def _replay(self, spec: "_Specialization", context: "_Context", inputs, outputs, env) -> None:
        """Replays the specialization's captured graph for this context (capturing it the first
        time, or after the context's arena moved) with this run's ORT memory."""
        bound = spec.graphs.get(context.key)
        # A graph captured at the context's current generation was captured after reserving this
        # specialization's bytes, and the arena has not moved since: nothing to reserve.
        if bound is None or bound[0] != context.generation:
            context.reserve(spec.arena_bytes, lambda space: self._largest_buffer(spec, space))
            graph, sites, fills = self._capture(spec, context, inputs, outputs, env)
            patches = patch_function(sites)
            # a device may take ORT's memory straight into the launches (CpuDevice.bind_replay)
            bind = getattr(self.device, "bind_replay", None)
            bound = (context.generation, graph, patches, None if bind is None else bind(graph, sites, patches), fills)
            spec.graphs[context.key] = bound
        if bound[4]:  # host steps' results that follow from the symbols (hipep.runtime.host_values)
            write_host_values(bound[4], spec.program.host.values(env))
        ext_shapes = spec.program.external_shapes(env) if spec.program.external else ()
        if bound[3] is not None:
            bound[3](context.stream, inputs, outputs, ext_shapes)
        else:
            self.device.replay(context.stream, bound[1], bound[2](inputs, outputs, ext_shapes))

    def _capture(self, spec: "_Specialization", context: "_Context", inputs, outputs, env):
        values, layout = self.plan.values, self._layout
        graph = self.device.capture()
        sites = []
        ext_shapes = spec.program.external_shapes(env) if spec.program.external else ()
        arrays: dict[int, object] = dict(self._constants)
        aliases = spec.program.aliases

        def arg(vid, node, k):
            if vid < 0:
                return None
            vid = aliases.get(vid, vid)
            if vid in arrays:
                return arrays[vid]
            root = layout.root[vid] if values[vid].kind == "buffer" else vid
            if root in layout.external:
                kind, index = layout.external[root]
                view = spec.program.external_index.get(vid, -1)
                sites.append((node, k, (kind, index, view)))
                a = inputs[index] if kind == "in" else outputs[index]
                return a if view < 0 else a.reshape(ext_shapes[view])
            rspec = values[root]
            offset = spec.offsets[rspec.space][rspec.slot]
            a = self.device.view(context.arenas[rspec.space], offset, values[vid].dtype, spec.shapes[vid])
            arrays[vid] = a
            return a

        skipped = spec.program.host.skipped
        for index, step in spec.program.steps:
            if isinstance(step, Sync):
                graph.nodes.append(GraphNode("sync", label=f"sync ({step.reason})"))
                continue
            if index in skipped:
                continue
            label = step_label(step)
            node = GraphNode("launch" if isinstance(step, Launch) else "host", self._kernel(index, step, label),
                             label=label)
            node.args = [arg(v, node, k) for k, v in enumerate((*step.inputs, *step.outputs))]
            graph.nodes.append(node)
        fills = []
        for vid, first, count in spec.program.host.targets:
            a = arg(vid, None, -1)
            host = a if isinstance(a, np.ndarray) else a.host_view()
            fills.append((host.reshape(-1), first, count))
        return graph, sites, fills

    def _value_array(self, vid, context: "_Context", inputs, outputs, env, spec: "_Specialization"):
        """A value's array after the run (for outputs that are copies)."""
        values = self.plan.values
        if vid in self._constants:
            return self._constants[vid]
        root = self._layout.root.get(vid, vid)
        if root in self._layout.external:
            kind, index = self._layout.external[root]
            a = inputs[index] if kind == "in" else outputs[index]
            view = spec.program.external_index.get(vid, -1)
            return a if view < 0 else a.reshape(spec.program.external_shapes(env)[view])
        rspec = values[root]
        offset = spec.offsets[rspec.space][rspec.slot]
        return self.device.view(context.arenas[rspec.space], offset, values[vid].dtype, spec.shapes[vid])


class _Retry(Exception):
    pass


class _StaticLayout:
    """What the plan fixes about memory: each value's storage root, which roots are ORT's memory
    (inputs; outputs that own a slot are redirected into ORT's output tensors), which are arena."""

    def __init__(self, plan: Plan):
        values = plan.values
        self.root = {vid: plan.storage_of(vid) for vid, v in values.items() if v.kind == "buffer"}
        self.external: dict[int, tuple[str, int]] = {}
        for pos, vid in enumerate(plan.inputs):
            if values[vid].kind in ("input", "weight"):
                self.external[vid] = ("in", pos)
        # An output that owns a slot is computed straight into ORT's output memory; an output
        # listed twice, or that is an input, constant or view, is copied at the end instead.
        self.copied: list[tuple[int, int]] = []
        for j, vid in enumerate(plan.outputs):
            if values[vid].owns_slot and plan.outputs.count(vid) == 1:
                self.external[vid] = ("out", j)
            else:
                self.copied.append((j, vid))
        self.arena = [vid for vid, v in values.items()
                      if v.kind == "buffer" and self.root[vid] not in self.external]
        self.external_views = [vid for vid, v in values.items()
                               if v.kind == "buffer" and self.root[vid] in self.external and vid != self.root[vid]]


class _Program:
    """A shape program compiled to Python: the run's symbols from its inputs, the guards, the
    layout signature, and shapes."""

    def __init__(self, ex: Executor, shape: ShapeProgram):
        self.shape = shape
        plan, layout = ex.plan, ex._layout
        symbols = shape.symbols
        self.signature = signature_function(plan, shape)
        layout_names: set = set()
        for vid in layout.arena:
            for e in shape.shapes.get(vid, ()):
                symbols_of(e, layout_names)
        self.layout_symbols = [s for s in symbols if s in layout_names]
        idx = {s: i for i, s in enumerate(symbols)}
        self.layout_key = picker([idx[s] for s in self.layout_symbols])
        layout_guards, value_guards = {}, {}
        for g, r in shape.guards.items():
            names = symbols_of(g[1]) | symbols_of(g[2])
            (layout_guards if names <= layout_names else value_guards)[g] = r
        self.guards = shape.guards
        self.layouts: set = set()  # layout signatures whose guards were checked
        self.layout_guards = compile_guards(layout_guards, symbols, "layout_guards")
        self.value_guards = compile_guards(value_guards, symbols, "value_guards")
        self.symbols = symbols
        outs = [shape.shapes[v] if v in shape.shapes else () for v in plan.outputs]
        self._out_ranks = [len(s) for s in outs]
        self._outputs = compile_exprs([e for s in outs for e in s], symbols, "output_shapes")
        self.external = list(layout.external_views)
        self.external_index = {vid: i for i, vid in enumerate(self.external)}
        ext = [shape.shapes[v] for v in self.external]
        self._ext_ranks = [len(s) for s in ext]
        self._ext = compile_exprs([e for s in ext for e in s], symbols, "external_shapes")
        self.probe = probe_function(plan, shape, value_guards, [idx[s] for s in self.layout_symbols], outs)
        self.steps, self.aliases = _taken_steps(plan, layout, shape.branches, ex._step_index)
        self.host = HostValues(plan, self.steps, shape.host_values, symbols, ex._exclusive_host, layout.external)

    def output_shapes(self, env):
        return _split(self._outputs(env), self._out_ranks)

    def external_shapes(self, env):
        return _split(self._ext(env), self._ext_ranks)

    def explain_guards(self, env) -> str:
        if env is None:
            return "the inputs' ranks differ"
        one = compile_guards
        broken = [format_guard(g, r) for g, r in self.guards.items()
                  if not one({g: r}, self.symbols)(env)]
        return "; ".join(broken[:5]) or "no guard broken"


def _taken_steps(plan: Plan, layout: _StaticLayout, branches: dict, index_of: dict):
    """The plan's steps as runs of one shape program issue them, each with its kernel's cache key:
    every If replaced by the branch the program's guards decide, then the moves of that branch's
    results into the If's outputs. A result that is a weight or constant (LongRoPE's two rotary
    caches) is not moved: the output is read where the result lies (`aliases`: output → result),
    unless the output is the plan's own or shares its storage with a view. A moved result is an
    Identity launch (a device copy)."""
    viewed = {root for vid, root in layout.root.items() if root != vid}
    steps: list = []
    aliases: dict[int, int] = {}

    def add(block):
        for step in block:
            if not isinstance(step, If):
                steps.append((index_of[id(step)], step))
                continue
            taken = branches.get(branch_key(step))
            if taken is None:
                raise HipepError(f"plan '{plan.name}': its shape program does not say which branch If "
                                 f"'{step.node}' takes")
            body, results = (step.then_body, step.then_results) if taken else (step.else_body, step.else_results)
            add(body)
            for result, out in zip(results, step.outputs):
                if out < 0:
                    continue
                result = aliases.get(result, result)
                if plan.values[result].kind != "buffer" and plan.values[out].owns_slot and \
                        out not in plan.outputs and out not in viewed:
                    aliases[out] = result
                else:
                    steps.append((("move", result, out), Launch("::Identity", step.node, {}, (result,), (out,))))

    add(plan.steps)
    return steps, aliases


class _Specialization:
    """One layout signature: concrete shapes of the arena's values, slot offsets per memory space,
    and per context the captured graph."""

    def __init__(self, ex: Executor, program: _Program, env):
        plan, values, layout = ex.plan, ex.plan.values, ex._layout
        self.program = program
        self.key_values = dict(zip(program.symbols, env))
        arena = layout.arena
        exprs = [e for vid in arena for e in program.shape.shapes.get(vid, ())]
        ranks = [len(program.shape.shapes.get(vid, ())) for vid in arena]
        flat = compile_exprs(exprs, program.symbols, "arena_shapes")(env)
        self.shapes = dict(zip(arena, _split(flat, ranks)))
        for vid in arena:
            if vid not in program.shape.shapes:
                self.shapes.pop(vid, None)  # never written in this plan (an unused result)
        slot_bytes: dict[str, dict[int, int]] = {space: {} for space in MEMORY_SPACES}
        for vid, shape in self.shapes.items():
            nbytes = _nbytes(plan, vid, shape)
            root = values[layout.root[vid]]
            slots = slot_bytes[root.space]
            slots[root.slot] = max(slots.get(root.slot, 0), nbytes)
        self.offsets: dict[str, dict[int, int]] = {}
        self.arena_bytes: dict[str, int] = {}
        for space, slots in slot_bytes.items():
            offset, offsets = 0, {}
            for slot in sorted(slots):
                offsets[slot] = offset
                offset += round_up(max(slots[slot], 1), ALIGN)
            self.offsets[space], self.arena_bytes[space] = offsets, offset
        self.copied_outputs = layout.copied
        # elements read by the host this run: the integer reads and the pinned inputs' elements
        self.reads = len(program.shape.reads) + program.shape.pinned_elements(
            [plan.values[vid].dtype for vid in plan.inputs])
        self.launches = sum(1 for _, s in program.steps if isinstance(s, Launch))
        self.graphs: dict[int, tuple] = {}  # _Context.key -> what _replay captured on that context
        self.home: list[_Context] = []  # its own context while idle (Executor.give_home)


ARENA_GROWTH = 1.5  # an arena that grows takes at least this times its old size (_Context.reserve)


_CONTEXT_KEYS = itertools.count(1)


class _Context:
    """What one run in flight holds: a stream and one arena per memory space."""

    def __init__(self, device: Device, home_of: "_Specialization | None" = None):
        self.device = device
        # What keys its graphs (_Specialization.graphs): never reused, where id() of a context
        # freed after a native replay record ended could be a new context's.
        self.key = next(_CONTEXT_KEYS)
        self.home_of = home_of  # the specialization whose runs alone it takes (Executor.give_home)
        self.stream = device.new_stream()
        self.tally = counters.Tally()  # this run's counts: one run at a time holds a context
        self.runs = 0  # runs that held this context
        self.arenas = {space: device.alloc(space, 0) for space in MEMORY_SPACES}
        self.sizes = {space: 0 for space in MEMORY_SPACES}
        self.generation = 0

    def reserve(self, need: dict[str, int], describe: Callable[[str], str] | None = None) -> None:
        """Makes each arena hold `need` bytes (nothing is queued between runs: it may move);
        `describe(space)` names what needs them when they cannot be had.

        An arena that must grow takes at least ARENA_GROWTH times its old size. Moving the arena
        invalidates every graph this context captured, the decode step's included, so that step
        is bound and captured again on its next run; prompts of rising lengths (a chat, a
        server's requests) would otherwise pay that on nearly every request. Where the larger
        size cannot be had, the exact need is tried."""
        for space, n in need.items():
            old = self.sizes[space]
            if n > old:
                if old:
                    counters.bump("arena_moves")  # a context's first arenas move nothing
                self.device.free(self.arenas[space])
                wanted = max(n, round_up(int(old * ARENA_GROWTH), ALIGN))
                for size in (wanted, n) if wanted > n else (n,):
                    try:
                        self.arenas[space] = self.device.alloc(space, size)
                        break
                    except (MemoryError, ValueError, HipepError) as e:  # HipepError: the driver's out of memory
                        error = e
                else:
                    self.arenas[space], self.sizes[space] = self.device.alloc(space, 0), 0
                    self.generation += 1
                    what = describe(space) if describe is not None else ""
                    what = f" ({what})" if what else ""
                    raise HipepError(f"could not allocate {byte_size(n)} of {space} memory for this run's buffers"
                                     f"{what}: {allocation_failure(error)}") from None
                self.sizes[space] = size
                self.generation += 1


def _nbytes(plan: Plan, vid: int, shape) -> int:
    spec = plan.values[vid]
    dims = [int(d) for d in shape]
    nbytes, why = oversize(dims, np.dtype(spec.dtype).itemsize)
    if why:
        raise RuntimeShapeError(f"{_writer(plan, vid)}: output '{spec.name}' of shape {dims} ({spec.dtype}) {why}")
    return nbytes


def _writer(plan: Plan, vid: int) -> str:
    return next((f"node '{s.node}'" for s in walk(plan.steps)
                 if isinstance(s, (Launch, HostStep)) and vid in s.outputs), "the plan")


def _split(flat, ranks):
    out, i = [], 0
    for r in ranks:
        out.append(tuple(flat[i:i + r]))
        i += r
    return out
