"""The launch plan: what a compiled subgraph does at run time, as plain data.

The last pass (`hip-emit-plan`) writes it and the runtime executes it without importing the
compiler; later EPContext stores it. Everything here is plain Python data (ints, strs, tuples,
dicts, small numpy constants), so a plan can be printed, compared and serialised.

Values. Every SSA value of the compiled function has an integer id and a `ValueSpec`:
  * kind "input": the fused node's input `index` (ORT's memory, read-only; on the CPU device a
    host array, on a GPU device memory: it is in the "device" space);
  * kind "constant": a small constant from `Plan.constants[name]` (host-visible);
  * kind "weight": a large initializer ORT hands in as fused-node input `index` ("device" space);
  * kind "buffer": storage the plan allocates: slot `slot` of the pool of memory space `space`
    ("device" or "host_visible"), or a view of another buffer's storage (`view_of`, same bytes,
    other shape: Reshape/Squeeze/Unsqueeze/Identity/Flatten results may be views).
Shapes are not in the plan: the executor computes each step's output shapes when it issues the
step, from its input shapes and the values of the op's host inputs (registry `host_inputs`),
using the registry shape rule — as a GPU runtime must, to size a launch before it is queued.

Steps, executed in order by the executor:
  * Launch: a device op, queued on the stream (runs later, in stream order);
  * HostStep: the same, run by the host at once, on host-visible buffers only;
  * Sync: the host waits until all queued device work is done;
  * Loop / If: control flow with nested step lists (ONNX Loop and If semantics).
Slot sizes are not fixed at compile time (extents are dynamic): the executor grows a slot when a
buffer needs more bytes than it holds, after a sync, keeping the live contents.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np

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
    view_of: int = -1  # buffer: id of the buffer whose storage this one views (-1: owns a slot)


@dataclass(frozen=True)
class Launch:
    """A device op: queued on the stream; runs when the stream reaches it."""
    op: str  # registry key "domain::op_type" ("::Add" for the default domain)
    node: str  # ONNX node label, for error messages
    attributes: dict[str, Any]
    inputs: tuple[int, ...]  # value ids, -1 for an omitted optional input
    outputs: tuple[int, ...]  # value ids, -1 for an output nobody reads


@dataclass(frozen=True)
class HostStep:
    """A host op (shape arithmetic, host-side index computation): runs at once on the host."""
    op: str
    node: str
    attributes: dict[str, Any]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


@dataclass(frozen=True)
class Sync:
    """The host waits for all queued device work. `reason` says which hazard it guards."""
    reason: str


@dataclass(frozen=True)
class Loop:
    """ONNX Loop. `trip_count`/`cond` are value ids or -1 (absent). Body arguments are bound to
    (iteration number, condition, carried values...); the body's results are (condition,
    carried values..., scan outputs...). `carried` are the initial values; `outputs` receive the
    final carried values, then the stacked scan outputs."""
    node: str
    trip_count: int
    cond: int
    carried: tuple[int, ...]
    body: "Block"
    body_args: tuple[int, ...]
    body_results: tuple[int, ...]
    outputs: tuple[int, ...]


@dataclass(frozen=True)
class If:
    node: str
    cond: int  # a host-visible bool value
    then_body: "Block"
    then_results: tuple[int, ...]
    else_body: "Block"
    else_results: tuple[int, ...]
    outputs: tuple[int, ...]


Step = Union[Launch, HostStep, Sync, Loop, If]
Block = tuple  # tuple[Step, ...]


@dataclass
class Plan:
    name: str
    values: dict[int, ValueSpec]
    inputs: list[int]  # value ids of the fused node's inputs, in ORT's order (inputs and weights)
    outputs: list[int]  # value ids of the fused node's outputs, in ORT's order
    steps: Block
    constants: dict[str, np.ndarray] = field(default_factory=dict)

    def buffers_in_slot(self, space: str, slot: int) -> list[int]:
        return [i for i, v in self.values.items() if v.kind == "buffer" and v.space == space and v.slot == slot]

    def storage_of(self, value_id: int) -> int:
        """The id of the buffer that owns the storage `value_id` lives in (follows views)."""
        v = self.values[value_id]
        while v.kind == "buffer" and v.view_of >= 0:
            value_id = v.view_of
            v = self.values[value_id]
        return value_id

    def format(self) -> str:
        """A readable listing (dump_ir writes it)."""
        lines = [f"plan {self.name}"]
        for i, v in sorted(self.values.items()):
            where = {"input": f"input {v.index}", "weight": f"weight (input {v.index})",
                     "constant": f"constant {v.constant!r}",
                     "buffer": f"{v.space} slot {v.slot}" if v.view_of < 0 else f"view of %{v.view_of}"}[v.kind]
            lines.append(f"  %{i}: {v.dtype} {where}  # {v.name}")
        lines.append(f"  inputs {self.inputs} -> outputs {self.outputs}")
        _format_block(self.steps, lines, "  ")
        return "\n".join(lines)


def _format_block(block, lines, indent):
    for s in block:
        if isinstance(s, (Launch, HostStep)):
            kind = "launch" if isinstance(s, Launch) else "host"
            ins = ", ".join("-" if i < 0 else f"%{i}" for i in s.inputs)
            outs = ", ".join("-" if i < 0 else f"%{i}" for i in s.outputs)
            lines.append(f"{indent}{kind} {s.op}({ins}) -> {outs}  # {s.node}")
        elif isinstance(s, Sync):
            lines.append(f"{indent}sync  # {s.reason}")
        elif isinstance(s, Loop):
            lines.append(f"{indent}loop {s.node} trip=%{s.trip_count} cond=%{s.cond} carried={list(s.carried)} "
                         f"args={list(s.body_args)} -> {list(s.outputs)}")
            _format_block(s.body, lines, indent + "  ")
            lines.append(f"{indent}  yield {list(s.body_results)}")
        elif isinstance(s, If):
            lines.append(f"{indent}if {s.node} %{s.cond} -> {list(s.outputs)}")
            _format_block(s.then_body, lines, indent + "  ")
            lines.append(f"{indent}  then yield {list(s.then_results)}")
            _format_block(s.else_body, lines, indent + "  ")
            lines.append(f"{indent}  else yield {list(s.else_results)}")
