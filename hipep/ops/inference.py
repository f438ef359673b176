"""Filling in value shapes ORT's graph leaves ambiguous, with the registry's shape rules.

Through the API version hipep asks for (23), a value whose shape ORT does not know reports rank 0,
like a scalar. Claim predicates that look at ranks would then refuse good nodes (or, worse, trust
a wrong rank). So after the bridge copies ORT's graph, every rank-0 value produced by a node is
re-derived in topological order from the node's shape rule: a scalar stays a scalar, and anything
else takes the rule's (possibly partial or unranked) type.
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
        if op is None or op.shape_rule is None or op.control_flow:
            continue
        types = [graph.type_of(v) if v else None for v in node.inputs]
        values = [graph.constants.get(v) if v else None for v in node.inputs]
        try:
            inferred = op.shape_rule(types, values, resolve_attributes(op, node), len(node.outputs))
        except Exception:  # noqa: BLE001 - a rule that cannot decide leaves ORT's type as it was
            continue
        for name, t in zip(node.outputs, inferred):
            if name in ambiguous and t is not None and t.shape != ():
                stored = graph.type_of(name)
                graph.types[name] = TensorType(stored.elem_type or t.elem_type, t.shape, "tensor")
    for sub in (g for n in graph.nodes for g in n.subgraphs.values()):
        fill_ambiguous_shapes(sub)
