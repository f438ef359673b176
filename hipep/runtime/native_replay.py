"""Runs replayed from Compute in native code, without calling Python (csrc/native_replay.cc).

A run on the cuda device with ORT's tensors in device memory (IOBinding, device OrtValues) is
checks, a few kernel-node updates and graph launches once its layout is captured; in Python that
host work costs more than a decode step's kernels can hide. Here Python records what such runs
look like, and Compute then does only the lookups and driver calls:

- The record owns one of the executor's run contexts (stream, arenas, captured graphs): the
  Python path never touches its graphs again, so what native code sets in them stays true. Where
  the context the runs used is much larger than the specialization needs or serves other layouts
  (a decode step's after a prompt's), the specialization first gets a context of its own and the
  record is made from runs there (Executor.wants_home): the prompts keep theirs.
- Per set of input shapes (a variant): the output shapes, the host values the graphs read (the
  plan's values computed from symbols), and for each kernel node whose launch depends on the run
  the parameters Python's binding made for those shapes. Variants are made for the shapes seen
  and for those a steady growth predicts (a decode step's attention mask grows by one).
- Tensors ORT moves between runs (IOBinding copies host inputs to a new address each step) are
  followed without binding again: the parameter fields that hold their addresses were found by
  binding once more with every such tensor moved by its own distance (a field that moved by
  exactly that distance holds that tensor's address; a launch with any other difference is not
  followed, and its tensors must stay put). The fields are found once per node and launch
  structure (kernels, grids, blocks, parameter sizes) and taken for a later binding of that
  structure where each still holds the same tensor at the same offset. Moved tensors keep their
  address's low 8 bits (bindings choose vector widths by alignment), and which tensors share an
  address must not change (bindings test for in-place operands).
- A learner thread (hipep.runtime.native_recorder, with the recorder that builds and drops records)
  stays a window of variants ahead of the runs (native code wakes it through a pipe), learning
  while the decode loop waits for the GPU.
- Anything else (new shapes, a tensor in host memory, a tensor moved that was not followed, a
  run in flight on the record) misses: the run goes through Python on another context, and the
  record learns that run's shapes for next time.
Built for the stand-in driver (hipep.tools.host_driver) as for the real one: native code calls
the entry points either gives through cuGetProcAddress."""
from __future__ import annotations

import itertools
import logging
import weakref

import numpy as np

from .. import counters
from ..dtypes import elem_type_for
from ..errors import HipepError
from .cuda_driver import CudaError, _check, _driver, _error_text
from .cuda_graphs import _arg_signature, _Launch, _updatable
from .cuda_memory import OrtDeviceArray
from .gpu_faults import take_fault
from .host_values import write as write_host_values

log = logging.getLogger("hipep")

WINDOW = 32          # input shapes predicted ahead of the latest run's
MAX_VARIANTS = 4096  # past this many, a record forgets the variants it learned first
_ENTRY_POINTS = ("cuGraphLaunch", "cuGraphExecKernelNodeSetParams", "cuStreamSynchronize", "cuEventRecord",
                 "cuEventElapsedTime", "cuCtxGetCurrent", "cuCtxSetCurrent")
_ENTRY_POINT_VERSION = 12000  # CUDA 12.0's ABI: cuGraphExecKernelNodeSetParams takes CUDA_KERNEL_NODE_PARAMS_v2
_TALLY = (counters.Tally.LAUNCHES, counters.Tally.HITS, counters.Tally.HOST_READS, counters.Tally.KERNEL_NS,
          counters.Tally.GRAPHS, counters.Tally.NODE_UPDATES, counters.Tally.RUN_NS, counters.Tally.SYNC_WAIT_NS,
          counters.Tally.NATIVE_RUNS)  # the order csrc/native_replay.cc adds in


_RECORDS: "weakref.WeakSet[Record]" = weakref.WeakSet()


def records() -> list["Record"]:
    """The records of this process's live sessions (tests check what they set)."""
    return list(_RECORDS)


class NotRecordable(Exception):
    """Why a run's layout cannot be replayed natively (said in the debug log)."""


class NotYet(NotRecordable):
    """The layout's graphs are not captured and stable yet: a later run may record it."""


def entry_points() -> dict[str, int]:
    """The driver's C entry points native code calls, by name."""
    d = _driver()
    out = {}
    for name in _ENTRY_POINTS:
        res = d.cuGetProcAddress(name.encode(), _ENTRY_POINT_VERSION, 0)
        if res[0] != d.CUresult.CUDA_SUCCESS or not res[1]:
            raise NotRecordable(f"the driver has no {name} for CUDA {_ENTRY_POINT_VERSION // 1000}")
        out[name] = int(res[1])
    return out


def _params_address(launch: _Launch) -> int:
    p = launch.node_params()
    get = getattr(p, "getPtr", None)
    return int(get()) if get is not None else id(p)  # the stand-in's parameters are a Python object


def _key(shapes) -> list[int]:
    out: list[int] = []
    for s in shapes:
        if s is None:
            out.append(-1)
        else:
            out.append(len(s))
            out.extend(s)
    return out


class _Wording:
    """Native code's errors, worded as the Python path words them (raised here, returned to ORT).
    Holds no reference to the record (native code holds this)."""

    def __init__(self, labels: list[str], stream, device):
        self.labels, self.stream, self.device = labels, stream, device

    def __call__(self, what: str, code: int, index: int):
        text = _error_text(_driver().CUresult(code)) if code else ""
        if what == "fault":
            fault = take_fault(self.stream.fault_record.host_ptr, self.device.fault_sites)
            raise fault if fault is not None else HipepError("a kernel reported a fault the record does not hold")
        if what == "launch":
            raise CudaError(f"{self.labels[index]}: CUDA graph launch failed: {text}")
        if what == "sync":
            raise CudaError(f"one of the launches of {', '.join(self.labels)}: the GPU reported {text}")
        raise CudaError(f"native replay: {what} failed: {text}")


class _Events:
    """A pair of timing events, destroyed with the record."""

    def __init__(self):
        d = _driver()
        self.start = _check(d.cuEventCreate(d.CUevent_flags.CU_EVENT_DEFAULT), "cuEventCreate")
        self.end = _check(d.cuEventCreate(d.CUevent_flags.CU_EVENT_DEFAULT), "cuEventCreate")

    def __del__(self):
        try:
            d = _driver()
            d.cuEventDestroy(self.start)
            d.cuEventDestroy(self.end)
        except Exception:  # noqa: BLE001 - at interpreter exit the driver may be gone
            pass


class _Slot:
    """One kernel node a record sets: where it is and the launch the graph holds at first."""
    __slots__ = ("exec", "node", "at", "graph_node", "base", "base_fields", "serial")

    def __init__(self, exec_handle, node_handle, at, graph_node, base, serial: int):
        self.exec, self.node, self.at = exec_handle, node_handle, at
        self.graph_node, self.base, self.serial = graph_node, base, serial
        self.base_fields: list = []  # relocations of `base`: (field address, base value, position)


class Record:
    """What native code replays for one specialization of an executor, and how it learns variants."""

    def __init__(self, executor, spec, context, ins, outs, env, moving: set[int]):
        from .._native import NativeReplay

        self.executor, self.spec, self.context = executor, spec, context
        _RECORDS.add(self)
        device = executor.device
        self.device = device
        bound = spec.graphs.get(context.key)
        if bound is None or bound[0] != context.generation or bound[3] is not None:
            raise NotYet("the run's graph is not the context's captured one")
        self.graph, self.patches, self.fills = bound[1], bound[2], bound[4]
        state = getattr(self.graph, "_cuda_state", None)
        if state is None:
            raise NotYet("the graph was never replayed")
        self.state = state
        if spec.copied_outputs:
            raise NotRecordable("outputs are copies of other values")
        program = spec.program
        if not all(s.startswith("i") for s in program.symbols) or program.shape.pins:
            raise NotRecordable("the shapes depend on input values")
        self.program = program
        self.layout = program.layout_key(env)
        self.alias = self._alias(ins, outs)
        segments = []
        for kind, item in state.plan:
            if kind == "host":
                raise NotRecordable("the plan has host steps")
            if kind == "launch":
                if item.direct:
                    raise NotRecordable(f"{item.label}: launched one by one (captures failed or kept changing)")
                if item.exec is None or item.captured != item.last:
                    raise NotYet(f"{item.label}: not replayed as one CUDA graph yet")
                segments.append(item)
        if not segments:
            raise NotRecordable("no CUDA graph")
        self.segments = segments
        self.ins_dtypes = [None if a is None else a.dtype for a in ins]
        self.outs_dtypes = [a.dtype for a in outs]
        self.in_ptrs = [0 if a is None else a.ptr for a in ins]
        self.out_ptrs = [a.ptr for a in outs]
        self.n_in = len(ins)
        self.moving = set(moving)
        self._wrappers: dict[tuple, OrtDeviceArray] = {}  # (position, shape) -> ORT's tensor at the record's address
        self.base_shapes = [None if a is None else tuple(a.shape) for a in (*ins, *outs)]
        self.value_nodes = [i for seg in segments for i in seg.value_nodes]
        # graph node index -> (segment, first op, op count)
        self.spans = {i: (seg, *seg.spans[i]) for seg in segments for i in seg.nodes}
        self.slots: list[_Slot] = []
        self._new_slots = False  # slots added since native code last got the list
        self.slot_of: dict[tuple[int, int], int] = {}  # (id(segment), op position) -> slot
        self.variants: dict[tuple, dict] = {}  # key (flattened input shapes) -> what _variant made
        # the growth last predicted with, its last shapes and their ordinal, and the next line's first
        self.growth, self.predicted, self.frontier, self.next_ordinal = None, None, -1, 0
        # Each launch a node may be set from has a serial number native code compares (never an
        # address: a forgotten variant's memory may be reused); serial -> launch, for checks.
        self._serials = itertools.count(1)
        self._launches: dict[int, _Launch] = {}
        self.launch_count = spec.launches
        self.events = _Events()
        self.tally = counters.Tally(np.zeros(len(counters.Tally.FIELDS), np.int64))
        stream = context.stream
        labels = [seg.label for seg in segments]
        self.native = NativeReplay(
            executor.plan.name, entry_points(), int(device.ctx), int(stream.handle), int(self.events.start),
            int(self.events.end), int(stream.fault_record.host_ptr), int(self.tally.values.ctypes.data),
            list(_TALLY), _Wording(labels, stream, device))
        for keep in (context, self.graph, spec, self.events, self.tally):
            self.native.keep(keep)
        self._check_value_nodes()
        self._io(ins, outs)
        base = self._arguments(ins, outs, {})
        # position -> the graph nodes taking that tensor (where no view of ORT's tensors has shapes
        # of its own, a variant binds again only the users of tensors whose shapes changed)
        self.users = {p: self._users_of({p}, base) for p in range(len(self.base_shapes))}
        # graph node -> (argument, position) of each ORT tensor it takes whole (not as a view)
        tensors = {id(a): p for p, a in enumerate((*ins, *outs)) if a is not None}
        self.sites_of: dict[int, list] = {}
        index = self.state.index
        for node, k, new in self.patches(ins, outs, program.external_shapes(env) if program.external else ()):
            if id(new) in tensors:
                self.sites_of.setdefault(index[id(node)], []).append((k, tensors[id(new)]))
        self._fields: dict[tuple, list] = {}  # (graph node, launches' structure) -> relocation fields found
        for i in self._users_of(self.moving, base):
            self._manage(i)
        for i in self.value_nodes:
            self._manage(i)

    # ---- layout ----------------------------------------------------------------------------------

    def _alias(self, ins, outs):
        f = self.executor._aliases_of
        return () if f is None else f(ins, outs)

    def _check_value_nodes(self) -> None:
        """Bindings that read host values may read only what no run writes: constants, not the
        host values the plan writes from symbols (a variant binds before its run writes them)."""
        written = [(flat.ctypes.data, flat.ctypes.data + flat.nbytes) for flat, _, _ in self.fills]
        for i in self.value_nodes:
            for a in self.graph.nodes[i].args:
                if getattr(a, "host_visible", False):
                    lo = a.ptr
                    if any(s < lo + a.nbytes and lo < e for s, e in written):
                        raise NotRecordable(f"{self.graph.nodes[i].label} binds on values the run writes")

    def _io(self, ins, outs) -> None:
        first: dict[int, int] = {}
        items = []
        for p, a in enumerate([*ins, *outs]):
            if a is None:
                items.append(None)
                continue
            if type(a) is not OrtDeviceArray:
                raise NotRecordable(f"{'input' if p < self.n_in else 'output'} {p if p < self.n_in else p - self.n_in} "
                                    f"is not ORT's tensor in device memory")
            alias = first.setdefault(a.ptr, p)
            items.append((elem_type_for(a.dtype), a.ptr, p in self.moving, alias))
        self.native.set_io(items[:self.n_in], items[self.n_in:])

    def _fake(self, shapes_in, shapes_out=None, ptrs: list[int] | None = None):
        """ORT's tensors as a run with these shapes would hand them over, at the record's addresses
        (or at `ptrs`: inputs', then outputs')."""
        if ptrs is None:  # at the record's addresses: the wrappers are kept (most shapes never change)
            made = self._wrappers
            wrap = self._wrap_at_base
        else:
            made, wrap = {}, lambda p, s: self.device.wrap_device_memory(ptrs[p], s, self._dtype(p))
        ins = [None if s is None else (made.get((p, s)) or wrap(p, s)) for p, s in enumerate(shapes_in)]
        outs = None
        if shapes_out is not None:
            outs = [made.get((self.n_in + j, s)) or wrap(self.n_in + j, s) for j, s in enumerate(shapes_out)]
        return ins, outs

    def _dtype(self, p: int):
        return self.ins_dtypes[p] if p < self.n_in else self.outs_dtypes[p - self.n_in]

    def _wrap_at_base(self, p: int, shape):
        ptr = self.in_ptrs[p] if p < self.n_in else self.out_ptrs[p - self.n_in]
        a = self._wrappers[(p, shape)] = self.device.wrap_device_memory(ptr, shape, self._dtype(p))
        return a

    def _arguments(self, ins, outs, env_or_ext) -> dict[int, list]:
        """Graph node index -> its arguments for these tensors (only nodes that take ORT's tensors)."""
        ext = env_or_ext if isinstance(env_or_ext, (list, tuple)) else (
            self.program.external_shapes(env_or_ext) if self.program.external and env_or_ext else ())
        index = self.state.index
        out: dict[int, list] = {}
        for node, k, new in self.patches(ins, outs, ext):
            i = index[id(node)]
            args = out.get(i)
            if args is None:
                args = out[i] = list(node.args)
            args[k] = new
        return out

    def _users_of(self, positions: set[int], base: dict[int, list]) -> set[int]:
        """Graph nodes taking any of these ORT tensor positions."""
        ptrs = {self.in_ptrs[p] if p < self.n_in else self.out_ptrs[p - self.n_in] for p in positions}
        users = set()
        for i, args in base.items():
            if any(isinstance(a, OrtDeviceArray) and a.ptr in ptrs for a in args):
                users.add(i)
        return users

    # ---- slots -----------------------------------------------------------------------------------

    def _manage(self, i: int) -> None:
        seg, first, count = self.spans[i]
        for k in range(count):
            at = first + k
            if (id(seg), at) in self.slot_of:
                continue
            op, node = seg.ops[at], seg.kernel_nodes[at]
            if type(op) is not _Launch or node is None:
                raise NotRecordable(f"{self.graph.nodes[i].label}: a copy or library call whose tensors change")
            slot = _Slot(int(seg.exec), int(node), at, i, op, next(self._serials))
            self.slot_of[(id(seg), at)] = len(self.slots)
            self.slots.append(slot)
            self._new_slots = True

    def _push_graphs(self) -> None:
        """The graphs and managed nodes to native code, and every variant again (a new slot takes
        its first launch in the variants made before it)."""
        # the base launches' relocations, found once per slot
        for i in sorted({s.graph_node for s in self.slots if not s.base_fields}):
            self._base_relocations(i)
        self._new_slots = False
        managed = []
        for s in self.slots:
            self._launches[s.serial] = s.base
            managed.append((s.exec, s.node, _params_address(s.base), s.serial, [f for f, _, _ in s.base_fields]))
        self.native.set_graphs([int(seg.exec) for seg in self.segments], managed)
        for key in self.variants:
            self._push_variant(key)

    def _base_relocations(self, i: int) -> None:
        """Where the launches the graph holds for node `i` keep its moving tensors' addresses."""
        node = self.graph.nodes[i]
        seg, first, count = self.spans[i]
        moving = self._moving_of(node.args)
        if not moving:
            return
        ops, fields = self._bind_relocatable(i, list(node.args), moving)
        if len(ops) != count or any(op.key != seg.ops[first + k].key for k, op in enumerate(ops)):
            raise NotRecordable(f"{node.label}: binding again does not give the launches its graph holds")
        for k in range(count):
            slot = self.slots[self.slot_of[(id(seg), first + k)]]
            slot.base_fields = [(slot.base.param_address(vi) + o, base, p) for vi, o, base, p in fields[k]]

    # ---- variants --------------------------------------------------------------------------------

    def learn(self, shapes: tuple, previous: tuple | None) -> None:
        """Variants for `shapes` and, where `previous` (the run before's input shapes) grew into
        them steadily, for the shapes the same growth gives next (a line of WINDOW more)."""
        if self.growth is not None and _grown(self.predicted, self.growth, 1) == shapes:
            self.extend()  # right after the shapes predicted last (`previous` is older then)
            return
        step = _growth(previous, shapes)
        if step is None:
            self._learn([shapes], [-1])
            return
        self.growth = step
        first = self.next_ordinal
        self.next_ordinal += 1 << 20  # a line of its own: runs on older lines ask for nothing
        self._learn([shapes] + [_grown(shapes, step, k) for k in range(1, WINDOW + 1)],
                    list(range(first, first + WINDOW + 1)))
        self.native.set_frontier(self.frontier, WINDOW)

    def extend(self) -> None:
        """WINDOW more variants along the growth predicted last (native code asks for them when a run
        comes within WINDOW of the last: the learner thread stays a window ahead)."""
        todo = self.extension()
        self._learn([s for s, _ in todo], [o for _, o in todo])
        self.native.set_frontier(self.frontier, WINDOW)

    def extension(self) -> list[tuple]:
        """The next WINDOW (shapes, ordinal) along the growth predicted last."""
        if self.growth is None or self.predicted is None:
            return []
        return [(_grown(self.predicted, self.growth, k), self.frontier + k) for k in range(1, WINDOW + 1)]

    def _learn(self, todo: list, ordinals: list[int]) -> bool:
        """Variants for these shapes, in order; False where one left the specialization."""
        for s, ordinal in zip(todo, ordinals):
            key = tuple(_key(s))
            if key not in self.variants:
                try:
                    made = self._variant(s)
                except NotRecordable as e:
                    log.debug("hipep: native replay: no variant for input shapes %s: %s", s, e)
                    made = None
                if made is None:
                    return False  # the growth left the specialization: the shapes after it will too
                made["ordinal"] = ordinal
                while len(self.variants) >= MAX_VARIANTS:
                    self._forget(next(iter(self.variants)))
                self.variants[key] = made
                if self._new_slots:
                    self._push_graphs()  # every variant again, with the new slots
                else:
                    self._push_variant(key)
            if ordinal >= 0:
                self.predicted, self.frontier = s, ordinal
        return True

    def _variant(self, shapes_in) -> dict | None:
        ins, _ = self._fake(shapes_in)
        found = self.program.probe(ins)
        if found is None:
            return None
        env, layout, shapes_out = found
        if layout != self.layout:
            return None
        shapes_out = [tuple(s) for s in shapes_out]
        _, outs = self._fake((), shapes_out)
        if self._alias(ins, outs) != self.alias:
            return None
        rebind = set(self.value_nodes)
        if self.program.external:  # views whose shapes follow the symbols: compare every argument
            args = self._arguments(ins, outs, env)
            for i, new in args.items():
                old = self.graph.nodes[i].args
                if any(_arg_signature(a, False) != _arg_signature(b, False) for a, b in zip(new, old)):
                    rebind.add(i)
        else:
            for p, shape in enumerate((*shapes_in, *shapes_out)):
                if shape != self.base_shapes[p]:
                    rebind |= self.users[p]
            tensors = (*ins, *outs)
            args = {}
            for i in rebind:
                node_args = args[i] = list(self.graph.nodes[i].args)
                for k, p in self.sites_of.get(i, ()):
                    node_args[k] = tensors[p]
        settings: dict[int, tuple] = {}  # slot -> (launch, relocations)
        for i in sorted(rebind):
            node_args = args.get(i, list(self.graph.nodes[i].args))
            moving = self._moving_of(node_args)
            ops, fields = self._bind_relocatable(i, node_args, moving)
            seg, first, count = self.spans[i]
            if len(ops) != count:
                raise NotRecordable(f"{self.graph.nodes[i].label}: {len(ops)} launches for shapes {shapes_in}, "
                                    f"{count} captured")
            self._manage(i)
            for k, op in enumerate(ops):
                old = seg.ops[first + k]
                if op.key != old.key and not _updatable(op, old, seg.kernel_nodes[first + k]):
                    raise NotRecordable(f"{self.graph.nodes[i].label}: a launch that cannot update its node")
                slot = self.slot_of[(id(seg), first + k)]
                settings[slot] = (op, [(op.param_address(vi) + o, base, p) for vi, o, base, p in fields[k]])
        fills = []
        if self.fills:
            values = self.program.host.values(env)
            copies = [(flat.copy(), first, count) for flat, first, count in self.fills]
            write_host_values(copies, values)
            fills = [(flat.ctypes.data, copy.tobytes()) for (flat, _, _), (copy, _, _) in zip(self.fills, copies)]
        return {"shapes_out": shapes_out, "fills": fills, "settings": settings}

    def _push_variant(self, key) -> None:
        v = self.variants[key]
        nodes = []
        keep = []
        serials = v.setdefault("serials", {})
        for n, slot in enumerate(self.slots):
            if n in v["settings"]:
                op, relocations = v["settings"][n]
                serial = serials.get(n) or serials.setdefault(n, next(self._serials))
            else:
                (op, relocations), serial = (slot.base, slot.base_fields), slot.serial
            self._launches[serial] = op
            nodes.append((_params_address(op), serial, relocations))
            keep.append(op)
        # native code holds the launches (their parameters) as long as it holds the variant
        self.native.add_variant(list(key), [list(s) for s in v["shapes_out"]], v["fills"], nodes, self.launch_count,
                                v.get("ordinal", -1), keep)

    def _forget(self, key) -> None:
        v = self.variants.pop(key)
        self.native.remove_variant(list(key))
        for serial in v.get("serials", {}).values():
            self._launches.pop(serial, None)

    def _moving_of(self, args) -> dict[int, int]:
        """Positions among `args` (ORT tensors at the record's addresses) that may move: position ->
        the distance a relocation check moves it (its own, so a field that moved by it holds it)."""
        out = {}
        for p in self.moving:
            ptr = self.in_ptrs[p] if p < self.n_in else self.out_ptrs[p - self.n_in]
            if any(isinstance(a, OrtDeviceArray) and a.ptr == ptr for a in args):
                out[p] = (p + 1) << 40  # a multiple of 256: alignments stay as they were
        return out

    def _bind_relocatable(self, i: int, args: list, moving: dict[int, int]):
        """The node's launches for `args`, and per launch the fields that hold moving tensors'
        addresses: [(value index, byte offset, field value, position)]. Raises NotRecordable where
        moving the tensors changes the launches in any other way."""
        node = self.graph.nodes[i]
        program = self.state.nodes[i].program
        stream = self.context.stream
        try:
            ops = program.bind(args, stream)
            if not moving:
                return ops, [[] for _ in ops]
            # Launches of one structure keep the moving tensors' addresses in the fields found for
            # it before: taken when each of those fields holds what it held then (the same tensor
            # at the same offset), else found again.
            structure = (i, tuple((type(op), getattr(op, "entry", None), getattr(op, "grid", None),
                                   getattr(op, "block", None), getattr(op, "sizes", ()))
                                  for op in ops), tuple(sorted(moving)))
            known = self._fields.get(structure)
            if known is not None and all(int.from_bytes(op.param_bytes(vi)[o:o + 8], "little") == x
                                         for op, found in zip(ops, known) for vi, o, x, _ in found):
                return ops, known
            moved_ptr = {}
            for p, d in moving.items():
                ptr = self.in_ptrs[p] if p < self.n_in else self.out_ptrs[p - self.n_in]
                moved_ptr[ptr] = d
            moved_args = [a.__class__(a.device, a.ptr + moved_ptr[a.ptr], a.shape, a.dtype)
                          if isinstance(a, OrtDeviceArray) and a.ptr in moved_ptr else a for a in args]
            moved = program.bind(moved_args, stream)
        except HipepError as e:
            raise NotRecordable(f"{node.label}: {e}") from None
        if len(moved) != len(ops):
            raise NotRecordable(f"{node.label}: moving its tensors changes its launches")
        by_distance = {d: p for p, d in moving.items()}
        fields = []
        for a, b in zip(ops, moved):
            if type(a) is not _Launch or type(b) is not _Launch:
                raise NotRecordable(f"{node.label}: a copy or library call on tensors that move")
            if (a.entry, a.grid, a.block, a.smem, a.config is None) != (b.entry, b.grid, b.block, b.smem, b.config is None) \
                    or a.sizes != b.sizes:
                raise NotRecordable(f"{node.label}: moving its tensors changes its launch configuration")
            found = []
            for vi in range(len(a.sizes)):
                ba, bb = a.param_bytes(vi), b.param_bytes(vi)
                if ba == bb:
                    continue
                if len(ba) != len(bb) or len(ba) % 8:
                    raise NotRecordable(f"{node.label}: parameter {vi} changes with its tensors' addresses")
                for o in range(0, len(ba), 8):
                    x, y = int.from_bytes(ba[o:o + 8], "little"), int.from_bytes(bb[o:o + 8], "little")
                    if x == y:
                        continue
                    p = by_distance.get((y - x) % (1 << 64))
                    if p is None:
                        raise NotRecordable(f"{node.label}: parameter {vi} changes with its tensors' addresses "
                                            f"other than by holding one")
                    found.append((vi, o, x, p))
            fields.append(found)
        self._fields[structure] = fields
        return ops, fields

    # ---- checks ----------------------------------------------------------------------------------

    def check_last_run(self) -> list[str]:
        """What native code set for its last run against what Python's bindings make for that run's
        tensors (their addresses and shapes): each managed launch's kernel, configuration and
        parameter bytes, and the host values. The differences, worded (none: they agree)."""
        ptrs, key = self.native.last_run()
        shapes_in, at = [], 0
        while at < len(key):
            rank = key[at]
            shapes_in.append(None if rank < 0 else tuple(key[at + 1:at + 1 + rank]))
            at += 1 + max(rank, 0)
        ins, _ = self._fake(shapes_in, None, list(ptrs))
        env, _, shapes_out = self.program.probe(ins)
        ins, outs = self._fake(shapes_in, [tuple(s) for s in shapes_out], list(ptrs))
        args = self._arguments(ins, outs, env)
        set_now = dict(zip(self.slots, self.native.node_serials()))
        wrong = []
        for slot in self.slots:
            node = self.graph.nodes[slot.graph_node]
            ops = self.state.nodes[slot.graph_node].program.bind(args.get(slot.graph_node, list(node.args)),
                                                                 self.context.stream)
            seg, first, _ = self.spans[slot.graph_node]
            want = ops[slot.at - first]
            have = self._launches.get(set_now[slot])
            if have is None:
                wrong.append(f"{node.label}: the node holds parameters the record did not make")
            elif (want.entry, want.grid, want.block, want.smem) != (have.entry, have.grid, have.block, have.smem):
                wrong.append(f"{node.label}: {have.entry} {have.grid} {have.block} set, {want.entry} {want.grid} "
                             f"{want.block} bound")
            elif [want.param_bytes(i) for i in range(len(want.sizes))] != \
                    [have.param_bytes(i) for i in range(len(have.sizes))]:
                wrong.append(f"{node.label}: parameter bytes differ")
        if self.fills:
            copies = [(flat.copy(), first, count) for flat, first, count in self.fills]
            write_host_values(copies, self.program.host.values(env))
            if any(not np.array_equal(c, flat) for (c, _, _), (flat, _, _) in zip(copies, self.fills)):
                wrong.append("host values differ")
        return wrong

    # ---- the record's use ----------------------------------------------------------------------

    def holds(self, spec, ins, outs) -> bool:
        """Whether a run of `spec` with these tensors is one the record could have replayed but for
        its shapes (its fixed tensors where the record's are)."""
        return spec is self.spec and not (self.moved(ins, outs) - self.moving)

    def moved(self, ins, outs) -> set[int]:
        """The positions (inputs, then outputs) of the tensors not where the record's were."""
        bases = (*self.in_ptrs, *self.out_ptrs)
        return {p for p, a in enumerate((*ins, *outs)) if (0 if a is None else a.ptr) != bases[p]}

    def close(self) -> None:
        """Stops native runs on this record; its context leaves the executor (its graphs hold what
        native code set)."""
        self.executor.retire(self.context)


def _growth(previous, shapes):
    """Per input, how each extent grew from `previous` to `shapes` (None where nothing grew, an
    extent shrank, or ranks differ)."""
    if previous is None or len(previous) != len(shapes):
        return None
    step, grew = [], False
    for a, b in zip(previous, shapes):
        if a is None or b is None:
            if (a is None) != (b is None):
                return None
            step.append(None)
            continue
        if len(a) != len(b):
            return None
        d = tuple(y - x for x, y in zip(a, b))
        if any(v < 0 for v in d):
            return None
        grew = grew or any(d)
        step.append(d)
    return step if grew else None


def _grown(shapes, step, k: int):
    out = list(shapes)
    for p, ds in enumerate(step):
        if ds is not None and any(ds):
            out[p] = tuple(x + k * d for x, d in zip(shapes[p], ds))
    return tuple(out)
