"""Compile: a claimed subgraph (GraphView) → a Plan.

The pipeline is GraphView → frontend → IR passes → plan; this module is its driver. The plan's
steps follow the subgraph's topological order and carry each op's resolved attributes; values
are freed after their last reader.
"""
from __future__ import annotations

from .errors import ModelError
from .graph import GraphView
from .ops.registry import check_node, lookup, resolve_attributes
from .partition import topological_order
from .plan import Plan, Step


def compile_subgraph(graph: GraphView, name: str, inputs: list[str], outputs: list[str]) -> Plan:
    available = set(inputs) | set(graph.constants)
    steps: list[Step] = []
    for node in (graph.nodes[pos] for pos in topological_order(graph)):
        reason = check_node(node, graph)
        if reason is not None:  # ORT handed us a node we did not claim: say so, never guess
            raise ModelError(f"{name}: node '{node.label}' ({node.qualified_op}) cannot be compiled: {reason}")
        for v in node.inputs:
            if v and v not in available:
                where = "a weight ORT did not pass in" if v in graph.weights else "not produced in this subgraph"
                raise ModelError(f"{name}: node '{node.label}' reads '{v}', which is {where}")
        op = lookup(node.domain, node.op_type)
        steps.append(Step(node.domain, node.op_type, node.label, resolve_attributes(op, node),
                          tuple(node.inputs), tuple(node.outputs)))
        available.update(o for o in node.outputs if o)
    for o in outputs:
        if o not in available:
            raise ModelError(f"{name}: output '{o}' is not produced by the subgraph")
    elem_types = []
    for o in outputs:
        t = graph.type_of(o)
        if t.kind != "tensor" or t.elem_type == 0:
            raise ModelError(f"{name}: output '{o}' has no known tensor element type")
        elem_types.append(t.elem_type)
    constants = {k: v for k, v in graph.constants.items() if k not in inputs}
    return Plan(name, list(inputs), list(outputs), elem_types, steps, constants, _last_uses(steps))


def _last_uses(steps: list[Step]) -> list[tuple[str, ...]]:
    last: dict[str, int] = {}
    for i, s in enumerate(steps):
        for v in s.inputs:
            if v:
                last[v] = i
    per_step: list[list[str]] = [[] for _ in steps]
    for v, i in last.items():
        per_step[i].append(v)
    return [tuple(x) for x in per_step]
