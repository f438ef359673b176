"""Compile: a claimed subgraph (GraphView) → a launch Plan (hipep.plan).

The pipeline is GraphView → frontend → IR passes → plan. Until the IR pipeline lands, this module
lowers a GraphView straight to a plan, with no optimisation:

  * every node is a Launch, in topological order; a Loop or If node becomes a plan Loop/If
    whose bodies are lowered the same way;
  * every node output that something reads is its own buffer in its own slot (no slot sharing,
    so slot reuse cannot cause a hazard). Its memory space is "device", except for values the
    host reads: an op's `host_inputs`, Loop trip counts and conditions (the body's condition
    result too), If conditions. Those go to "host_visible";
  * a Sync goes right before the first step at which the host reads such a value while queued
    device work may still be writing it, and one at the end (the host reads the outputs then);
  * constants become kind "constant", fused-node inputs kind "input", except large initializers
    ORT hands in (graph.weights): kind "weight";
  * every plan output is a fresh buffer: an output that is a fused-node input or a constant
    passed straight through, or a value listed twice, is copied by an Identity launch.
"""
from __future__ import annotations

import dataclasses
import os
import re

from .errors import ModelError
from .graph import GraphView, Node, numpy_dtype
from .ops.registry import OpDef, check_node, lookup, resolve_attributes
from .partition import topological_order
from .plan import (DEVICE, HOST_VISIBLE, HostStep, If, Launch, Loop, Plan, Sync, ValueSpec, op_key,
                   walk)

CONTROL_FLOW = ("Loop", "If")


def compile_subgraph(graph: GraphView, name: str, inputs: list[str], outputs: list[str], options=None) -> Plan:
    plan = _Lowering(graph, name).plan(inputs, outputs)
    dump = getattr(options, "dump_ir", "") if options is not None else ""
    if dump:
        os.makedirs(dump, exist_ok=True)
        with open(os.path.join(dump, re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".plan"), "w") as f:
            f.write(plan.format() + "\n")
    return plan


class _Scope:
    """Names visible in one graph (a body sees its enclosing graphs' names too)."""

    def __init__(self, graph: GraphView, parent: "_Scope | None" = None):
        self.graph = graph
        self.parent = parent
        self.names: dict[str, int] = {}


class _Lowering:
    def __init__(self, graph: GraphView, name: str):
        self.graph = graph
        self.name = name
        self.specs: dict[int, dict] = {}  # value id → ValueSpec fields (space/slot set at the end)
        self.constants: dict = {}
        self.host_read: set[int] = set()
        self.ops: dict[str, OpDef] = {}
        self.used = _used_names(graph)

    # ---- values --------------------------------------------------------------------------------

    def _new(self, **fields) -> int:
        vid = len(self.specs)
        self.specs[vid] = fields
        return vid

    def _dtype(self, graph: GraphView, value: str, default: str = "") -> str:
        t = graph.type_of(value)
        if t.kind != "tensor" or t.elem_type == 0:
            if default:
                return default
            raise ModelError(f"{self.name}: value '{value}' has no known tensor element type")
        try:
            return numpy_dtype(t.elem_type).name
        except ValueError as e:
            raise ModelError(f"{self.name}: value '{value}': {e}") from None

    def define(self, scope: _Scope, value: str, default_dtype: str = "") -> int:
        """A new buffer for `value`, produced in `scope`."""
        vid = self._new(kind="buffer", dtype=self._dtype(scope.graph, value, default_dtype), name=value)
        scope.names[value] = vid
        return vid

    def read(self, scope: _Scope, value: str, node: Node | None = None) -> int:
        s = scope
        while s is not None:
            if value in s.names:
                return s.names[value]
            if value in s.graph.constants:
                array = s.graph.constants[value]
                key = value
                while key in self.constants and self.constants[key] is not array:
                    key += "'"  # a body constant named like an outer one
                self.constants[key] = array
                vid = self._new(kind="constant", dtype=array.dtype.name, name=value, constant=key)
                s.names[value] = vid
                return vid
            s = s.parent
        where = "a weight ORT did not pass in" if value in self.graph.weights else "not produced in this subgraph"
        who = f"node '{node.label}'" if node is not None else "the subgraph"
        raise ModelError(f"{self.name}: {who} reads '{value}', which is {where}")

    # ---- lowering ------------------------------------------------------------------------------

    def plan(self, inputs: list[str], outputs: list[str]) -> Plan:
        top = _Scope(self.graph)
        plan_inputs = []
        for i, value in enumerate(inputs):
            kind = "weight" if value in self.graph.weights else "input"
            vid = self._new(kind=kind, dtype=self._dtype(self.graph, value), name=value, index=i)
            top.names[value] = vid
            plan_inputs.append(vid)
        steps = self.lower(self.graph, top)
        plan_outputs: list[int] = []
        identity = lookup("", "Identity")
        for value in outputs:
            vid = top.names.get(value)
            if vid is None:
                if value in self.graph.constants:
                    vid = self.read(top, value)
                else:
                    raise ModelError(f"{self.name}: output '{value}' is not produced by the subgraph")
            if self.specs[vid]["kind"] != "buffer" or vid in plan_outputs:
                copy = self._new(kind="buffer", dtype=self.specs[vid]["dtype"], name=value)
                self.ops["::Identity"] = identity
                steps.append(Launch("::Identity", f"{value} (output copy)", resolve_attributes_for(identity),
                                    (vid,), (copy,)))
                vid = copy
            plan_outputs.append(vid)
        steps.append(Sync("the host reads the outputs"))
        values = self._finish_values()
        steps, _ = self._place_syncs(tuple(steps), set())
        # the final Sync is kept even when nothing is pending: the caller reads memory after it
        if not steps or not isinstance(steps[-1], Sync):
            steps = steps + (Sync("the host reads the outputs"),)
        return Plan(self.name, values, plan_inputs, plan_outputs, steps, dict(self.constants))

    def lower(self, graph: GraphView, scope: _Scope) -> list:
        steps = []
        for pos in topological_order(graph):
            node = graph.nodes[pos]
            if node.domain in ("", "ai.onnx") and node.op_type in CONTROL_FLOW and node.subgraphs:
                steps.append(self._loop(node, scope) if node.op_type == "Loop" else self._if(node, scope))
                continue
            reason = check_node(node, graph)
            if reason is not None:  # ORT handed us a node we did not claim: say so, never guess
                raise ModelError(f"{self.name}: node '{node.label}' ({node.qualified_op}) cannot be compiled: {reason}")
            op = lookup(node.domain, node.op_type)
            key = op_key(node.domain, node.op_type)
            self.ops[key] = op
            ins = tuple(self.read(scope, v, node) if v else -1 for v in node.inputs)
            for p in op.host_inputs:
                if p < len(ins) and ins[p] >= 0:
                    self.host_read.add(ins[p])
            outs = tuple(self.define(scope, o) if o and o in self.used else -1 for o in node.outputs)
            steps.append(Launch(key, node.label, resolve_attributes(op, node), ins, outs))
        return steps

    def _loop(self, node: Node, scope: _Scope) -> Loop:
        body = node.subgraphs.get("body")
        if body is None:
            raise ModelError(f"{self.name}: Loop '{node.label}' has no body")
        trip = self.read(scope, node.inputs[0], node) if len(node.inputs) > 0 and node.inputs[0] else -1
        cond = self.read(scope, node.inputs[1], node) if len(node.inputs) > 1 and node.inputs[1] else -1
        self.host_read.update(v for v in (trip, cond) if v >= 0)
        carried = tuple(self.read(scope, v, node) for v in node.inputs[2:])
        n = len(carried)
        if len(body.inputs) != n + 2 or len(body.outputs) < n + 1 or len(node.outputs) != len(body.outputs) - 1:
            raise ModelError(f"{self.name}: Loop '{node.label}' has {n} carried values, a body with "
                             f"{len(body.inputs)} inputs and {len(body.outputs)} outputs, and "
                             f"{len(node.outputs)} outputs")
        inner = _Scope(body, scope)
        args = []
        for k, value in enumerate(body.inputs):
            if k < 2 and value not in self.used:
                args.append(-1)
            else:
                args.append(self.define(inner, value, ("int64", "bool")[k] if k < 2 else ""))
        steps = self.lower(body, inner)
        results = tuple(self.read(inner, v, node) for v in body.outputs)
        self.host_read.add(results[0])
        outs = tuple(self.define(scope, o) if o and o in self.used else -1 for o in node.outputs)
        return Loop(node.label, trip, cond, carried, tuple(steps), tuple(args), results, outs)

    def _if(self, node: Node, scope: _Scope) -> If:
        then_graph, else_graph = node.subgraphs.get("then_branch"), node.subgraphs.get("else_branch")
        if then_graph is None or else_graph is None:
            raise ModelError(f"{self.name}: If '{node.label}' lacks a branch")
        cond = self.read(scope, node.inputs[0], node)
        self.host_read.add(cond)
        branches = []
        for g in (then_graph, else_graph):
            if len(g.outputs) != len(node.outputs):
                raise ModelError(f"{self.name}: If '{node.label}' has {len(node.outputs)} outputs but a branch "
                                 f"yields {len(g.outputs)}")
            inner = _Scope(g, scope)
            steps = self.lower(g, inner)
            branches.append((tuple(steps), tuple(self.read(inner, v, node) for v in g.outputs)))
        outs = tuple(self.define(scope, o) if o and o in self.used else -1 for o in node.outputs)
        (then_steps, then_results), (else_steps, else_results) = branches
        return If(node.label, cond, then_steps, then_results, else_steps, else_results, outs)

    # ---- memory spaces, slots, syncs -----------------------------------------------------------

    def _finish_values(self) -> dict[int, ValueSpec]:
        slots = {DEVICE: 0, HOST_VISIBLE: 0}
        values = {}
        for vid, f in self.specs.items():
            if f["kind"] == "buffer":
                space = HOST_VISIBLE if vid in self.host_read else DEVICE
                f = dict(f, space=space, slot=slots[space])
                slots[space] += 1
            values[vid] = ValueSpec(**f)
        self.values = values
        return values

    def _host_reads(self, step) -> set[int]:
        if isinstance(step, (Launch, HostStep)):
            op = self.ops[step.op]
            return {step.inputs[p] for p in op.host_inputs if p < len(step.inputs) and step.inputs[p] >= 0}
        if isinstance(step, Loop):
            return {v for v in (step.trip_count, step.cond) if v >= 0}
        if isinstance(step, If):
            return {step.cond}
        return set()

    def _sync_for(self, reads: set[int], step_name: str) -> Sync:
        names = ", ".join(sorted(f"'{self.values[v].name}'" for v in reads))
        return Sync(f"the host reads {names} for '{step_name}'")

    def _place_syncs(self, block: tuple, dirty: set[int]) -> tuple[tuple, set[int]]:
        """`dirty`: values queued device work may still be writing. Returns the block with the
        syncs it needs and what is dirty after it."""
        out = []
        dirty = set(dirty)
        for s in block:
            if isinstance(s, Sync):
                if out and isinstance(out[-1], Sync):
                    continue
                out.append(s)
                dirty = set()
                continue
            pending = self._host_reads(s) & dirty
            if pending:
                out.append(self._sync_for(pending, s.node))
                dirty = set()
            if isinstance(s, Launch):
                out.append(s)
                dirty |= {v for v in s.outputs if v >= 0}
            elif isinstance(s, HostStep):
                out.append(s)
            elif isinstance(s, Loop):
                queued = {v for v in s.body_args if v >= 0} | {v for v in s.outputs if v >= 0}
                written = {v for t in walk(s.body) if isinstance(t, Launch) for v in t.outputs if v >= 0}
                written |= {v for t in walk(s.body) if isinstance(t, (Loop, If)) for v in t.outputs if v >= 0}
                # an iteration starts after the previous one's queued work and copies
                body, end = self._place_syncs(s.body, dirty | written | queued)
                if s.body_results[0] in end:
                    body = body + (Sync(f"the host reads the condition of loop '{s.node}'"),)
                    end = set()
                out.append(dataclasses.replace(s, body=body))
                dirty = dirty | end | written | queued
            elif isinstance(s, If):
                then_body, then_end = self._place_syncs(s.then_body, dirty)
                else_body, else_end = self._place_syncs(s.else_body, dirty)
                out.append(dataclasses.replace(s, then_body=then_body, else_body=else_body))
                dirty = then_end | else_end | {v for v in s.outputs if v >= 0}
        return tuple(out), dirty


def resolve_attributes_for(op: OpDef) -> dict:
    """The declared defaults of an op the compiler adds itself (no ONNX node behind it)."""
    node = Node(index=-1, name="", op_type=op.op_type, domain=op.domain, since_version=op.since_versions[-1],
                inputs=[""] * len(op.inputs), outputs=[""] * len(op.outputs))
    return resolve_attributes(op, node)


def _used_names(graph: GraphView) -> set[str]:
    """Every value name something reads: node inputs, implicit inputs, graph and body outputs."""
    used = set(graph.outputs)
    for node in graph.nodes:
        used.update(v for v in list(node.inputs) + list(node.implicit_inputs) if v)
        for body in node.subgraphs.values():
            used |= _used_names(body)
    return used
