"""Filling in value shapes ORT's graph leaves ambiguous, with the registry's shape rules.

Through the API version hipep asks for (23), a value whose shape ORT does not know reports rank 0,
like a scalar. Claim predicates that look at ranks would then refuse good nodes (or, worse, trust
a wrong rank). So after the bridge copies ORT's graph, every rank-0 value produced by a node is
re-derived in topological order from the node's shape rule: it stays a scalar only when the rule
says so, and otherwise takes the rule's (possibly partial) type, or no rank at all.
"""
from __future__ import annotations

from ..graph import GraphView, TensorType, topological_order
from .registry import lookup, resolve_attributes


def fill_ambiguous_shapes(graph: GraphView) -> None:
    for pos in topological_order(graph):
        node = graph.nodes[pos]
        ambiguous = [o for o in node.outputs if o and graph.type_of(o).kind == "tensor"
                     and graph.type_of(o).shape == ()]
        if not ambiguous:
            continue
        op = lookup(node.domain, node.op_type)
        inferred: list = []
        if op is not None and op.shape_rule is not None and not op.control_flow:
            types = [graph.type_of(v) if v else None for v in node.inputs]
            values = [graph.constants.get(v) if v else None for v in node.inputs]
            try:
                inferred = list(op.shape_rule(types, values, resolve_attributes(op, node), len(node.outputs)))
            except Exception:  # noqa: BLE001 - a rule that cannot decide proves nothing
                inferred = []
        inferred += [None] * (len(node.outputs) - len(inferred))
        for name, t in zip(node.outputs, inferred):
            if name not in ambiguous:
                continue
            # Only a rule that says "rank 0" makes it a scalar; otherwise the rank is unknown.
            shape = () if t is not None and t.shape == () else (t.shape if t is not None else None)
            stored = graph.type_of(name)
            graph.types[name] = TensorType(stored.elem_type or (t.elem_type if t else 0), shape, "tensor")
    for sub in (g for n in graph.nodes for g in n.subgraphs.values()):
        fill_ambiguous_shapes(sub)
