"""The launch plan: what a compiled subgraph does at run time, as plain data.

The last pass (`hip-emit-plan`) writes it and the runtime executes it without importing the
compiler; later EPContext stores it. Everything here is plain Python data (ints, strs, tuples,
dicts, small numpy constants), so a plan can be printed, compared and serialised.

Values. Every SSA value of the compiled function has an integer id and a `ValueSpec`:
  * kind "input": the fused node's input `index` (ORT's memory, read-only; on the CPU device a
    host array, on a GPU device memory: it is in the "device" space);
  * kind "constant": a small constant from `Plan.constants[name]` (host-visible);
  * kind "weight": a large initializer: held by hipep (`index` -1, bound by `name` from the
    executor's weight store, copied at Compile) or handed in by ORT as fused-node input `index`;
  * kind "buffer": storage the plan allocates: slot `slot` of the pool of memory space `space`
    ("device" or "host_visible"), or a view of another value's storage (`view_of`, same bytes
    from its start, other shape: Reshape/Squeeze/Unsqueeze/Identity/Flatten results may be
    views). A slot may hold several buffers whose lifetimes do not overlap; slots are shared
    within one memory space only, never across spaces (the host-buffer rule).
Shapes. `shape_programs` holds the shape program derived at compile time
(hipep.runtime.shapes): every value's shape as expressions (hipep.symbolic) over the inputs' dims,
with the guards — constraint expressions from the registry's shape rules — under which they hold.
The runtime evaluates them per run; a run that breaks a guard is traced again from the rules.

Steps, executed in order by the executor:
  * Launch: a device op, queued on the stream (runs later, in stream order);
  * HostStep: the same, run by the host at once, on host-visible buffers only;
  * Sync: the host waits until all queued device work is done;
  * Loop / If: control flow with nested step lists (ONNX Loop and If semantics).
Launches name their kernel (the registry op, or a generated one) with the node's attributes as
specialization constants (the device's binding chooses the launch configuration); `aliases` declares the
in-place updates ORT may ask for (present in past's buffer).

Syncs are the plan's business, not the executor's: a host step or host read (host_inputs, Loop
trip count and conditions, If condition) sees memory as it is when the host reaches it. A plan
that does not end with a Sync returns whatever memory holds at that point.

A plan round-trips through bytes (`to_bytes`/`from_bytes`, hipep.plan_io) and runs without the
compiler: what EPContext stores.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np

PLAN_VERSION = 3
DEVICE = "device"
HOST_VISIBLE = "host_visible"
MEMORY_SPACES = (DEVICE, HOST_VISIBLE)


@dataclass(frozen=True)
class ValueSpec:
    kind: str  # "input" | "weight" | "constant" | "buffer"
    dtype: str  # numpy dtype name, e.g. "float32", "int64", "bool"
    name: str = ""  # the ONNX value name (messages, dumps)
    index: int = -1  # input/weight: position among the fused node's inputs
    constant: str = ""  # constant: key in Plan.constants
    space: str = DEVICE  # buffer: memory space of its storage
    slot: int = -1  # buffer: slot in its space's pool (-1 for views)
    view_of: int = -1  # buffer: id of the value whose storage this one views (-1: owns a slot)
    # input or buffer: the extents the compiled plan took as known (-1 where it took none), None when
    # unranked. Stored types refine what the rules derive (a model's value_info, its declared outputs),
    # so a run whose inputs contradict them is refused, not computed with the wrong extents.
    static: tuple | None = None

    @property
    def owns_slot(self) -> bool:
        return self.kind == "buffer" and self.view_of < 0


@dataclass(frozen=True)
class Launch:
    """A device op: queued on the stream; runs when the stream reaches it.

    The kernel is `kernel` (default: the registry op `op`, i.e. its entry point in kernels/ or,
    on the CPU device, its numpy reference) with the attributes as specialization constants. Its
    arguments are the input buffers, the output buffers, then `scalars`. The device's binding of the
    op chooses the launch configuration from the bound shapes (hipep.runtime.gpu_kernels)."""
    op: str  # registry key "domain::op_type" ("::Add" for the default domain)
    node: str  # ONNX node label, for error messages
    attributes: dict[str, Any]
    inputs: tuple[int, ...]  # value ids, -1 for an omitted optional input
    outputs: tuple[int, ...]  # value ids, -1 for an output nobody reads
    kernel: str = ""
    scalars: tuple = ()

    @property
    def op_type(self) -> str:
        return op_type_of(self.op)


@dataclass(frozen=True)
class HostStep:
    """A host op (shape arithmetic, host-side index computation): runs at once on the host."""
    op: str
    node: str
    attributes: dict[str, Any]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]

    @property
    def op_type(self) -> str:
        return op_type_of(self.op)


@dataclass(frozen=True)
class Sync:
    """The host waits for all queued device work. `reason` says which hazard it guards."""
    reason: str


@dataclass(frozen=True)
class Loop:
    """ONNX Loop. `trip_count`/`cond` are value ids or -1 (absent). Body arguments are bound to
    (iteration number, condition, carried values...); the body's results are (condition,
    carried values..., scan outputs...). `carried` are the initial values; `outputs` receive the
    final carried values, then the stacked scan outputs (-1: nobody reads it). The host reads the
    trip count and condition before the first iteration and the body's condition result after
    each one, unless that result is the condition argument itself (a Scan's loop: the host
    wrote it, and the iterations queue without a sync between them); the iteration number and
    condition arguments (-1 where the body does not read them) and the carried values are
    written by device copies queued on the stream."""
    node: str
    trip_count: int
    cond: int
    carried: tuple[int, ...]
    body: "Block"
    body_args: tuple[int, ...]
    body_results: tuple[int, ...]
    outputs: tuple[int, ...]
    # Per stacked output, the shape of its rows where the body's types fix it (None: not known
    # before an iteration runs): a loop that runs no iteration gives (0, *rows), else (0,).
    scan_rows: tuple = ()


@dataclass(frozen=True)
class If:
    """ONNX If: the host reads `cond`, runs one branch, and device copies queued on the stream
    move that branch's results into `outputs`."""
    node: str
    cond: int  # a host-visible bool value
    then_body: "Block"
    then_results: tuple[int, ...]
    else_body: "Block"
    else_results: tuple[int, ...]
    outputs: tuple[int, ...]


Step = Union[Launch, HostStep, Sync, Loop, If]
Block = tuple  # tuple[Step, ...]


def op_key(domain: str, op_type: str) -> str:
    """The registry key a Launch/HostStep names: "domain::op_type" ("::Add" for ai.onnx)."""
    return f"{'' if domain == 'ai.onnx' else domain}::{op_type}"


def split_op_key(key: str) -> tuple[str, str]:
    domain, _, op_type = key.rpartition("::")
    return domain, op_type


def op_type_of(key: str) -> str:
    return key.rpartition("::")[2]


def walk(block):
    """Every step of a block, nested blocks included (a Loop/If before its bodies' steps)."""
    for s in block:
        yield s
        if isinstance(s, Loop):
            yield from walk(s.body)
        elif isinstance(s, If):
            yield from walk(s.then_body)
            yield from walk(s.else_body)


@dataclass
class Plan:
    name: str
    values: dict[int, ValueSpec]
    inputs: list[int]  # value ids of the fused node's inputs, in ORT's order (inputs and weights;
    #                    values[inputs[i]].index == i)
    outputs: list[int]  # value ids of the fused node's outputs, in ORT's order
    steps: Block
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    # In-place updates ORT may ask for: (output value id, input value id) pairs a kernel can run
    # with the output in the input's memory (GroupQueryAttention's present in past's buffer when
    # onnxruntime-genai binds both to one max-length buffer). The runtime checks each run whether
    # ORT's pointers for a pair agree and specializes on it.
    aliases: tuple = ()
    # Shape programs derived at compile time (hipep.runtime.shapes.ShapeProgram.to_data): every
    # value's shape as expressions over the inputs' dims, with the guards they hold under.
    shape_programs: tuple = ()
    version: int = PLAN_VERSION

    def to_bytes(self) -> bytes:
        """The plan as bytes (plain data: no Python callables); `Plan.from_bytes` reads it back."""
        from .plan_io import plan_to_bytes

        return plan_to_bytes(self)

    @staticmethod
    def from_bytes(data: bytes) -> "Plan":
        from .plan_io import plan_from_bytes

        return plan_from_bytes(data)

    def buffers_in_slot(self, space: str, slot: int) -> list[int]:
        return [i for i, v in self.values.items() if v.kind == "buffer" and v.space == space and v.slot == slot]

    def slot_counts(self) -> dict[str, int]:
        """Per memory space, the number of slots its pool holds."""
        counts = {space: 0 for space in MEMORY_SPACES}
        for v in self.values.values():
            if v.owns_slot:
                counts[v.space] = max(counts[v.space], v.slot + 1)
        return counts

    def storage_of(self, value_id: int) -> int:
        """The id of the buffer that owns the storage `value_id` lives in (follows views)."""
        v = self.values[value_id]
        while v.kind == "buffer" and v.view_of >= 0:
            value_id = v.view_of
            v = self.values[value_id]
        return value_id

    def format(self) -> str:
        """A readable listing (dump_ir writes it)."""
        from .symbolic import format_expr, format_guard

        lines = [f"plan {self.name}"]
        shapes = self.shape_programs[0]["shapes"] if self.shape_programs else {}
        for i, v in sorted(self.values.items()):
            where = {"input": f"input {v.index}", "weight": f"weight (input {v.index})" if v.index >= 0 else "weight",
                     "constant": f"constant {v.constant!r}",
                     "buffer": f"{v.space} slot {v.slot}" if v.view_of < 0 else f"view of %{v.view_of}"}[v.kind]
            shape = f" [{', '.join(format_expr(e) for e in shapes[i])}]" if i in shapes else ""
            lines.append(f"  %{i}: {v.dtype}{shape} {where}  # {v.name}")
        lines.append(f"  inputs {_refs(self.inputs)} -> outputs {_refs(self.outputs)}")
        for out, src in self.aliases:
            lines.append(f"  may alias %{out} with %{src}")
        for program in self.shape_programs:
            guards = [format_guard((op, a, b), r) for op, a, b, r in program["guards"]]
            lines.append(f"  shapes hold where: {'; '.join(guards) if guards else 'always'}")
        _format_block(self.steps, lines, "  ")
        return "\n".join(lines)


def _ref(i: int) -> str:
    return "-" if i < 0 else f"%{i}"


def _refs(ids) -> str:
    return "[" + ", ".join(_ref(i) for i in ids) + "]"


def _format_block(block, lines, indent):
    for s in block:
        if isinstance(s, (Launch, HostStep)):
            kind = "launch" if isinstance(s, Launch) else "host"
            ins = ", ".join(_ref(i) for i in s.inputs)
            outs = ", ".join(_ref(i) for i in s.outputs)
            kernel = f" kernel={s.kernel}" if isinstance(s, Launch) and s.kernel and s.kernel != s.op else ""
            lines.append(f"{indent}{kind} {s.op}({ins}) -> {outs}{kernel}  # {s.node}")
        elif isinstance(s, Sync):
            lines.append(f"{indent}sync  # {s.reason}")
        elif isinstance(s, Loop):
            lines.append(f"{indent}loop {s.node} trip={_ref(s.trip_count)} cond={_ref(s.cond)} "
                         f"carried={_refs(s.carried)} args={_refs(s.body_args)} -> {_refs(s.outputs)}")
            _format_block(s.body, lines, indent + "  ")
            lines.append(f"{indent}  yield {_refs(s.body_results)}")
        elif isinstance(s, If):
            lines.append(f"{indent}if {s.node} {_ref(s.cond)} -> {_refs(s.outputs)}")
            _format_block(s.then_body, lines, indent + "  ")
            lines.append(f"{indent}  then yield {_refs(s.then_results)}")
            _format_block(s.else_body, lines, indent + "  ")
            lines.append(f"{indent}  else yield {_refs(s.else_results)}")
