"""Control flow: Loop and If. Their bodies are graphs; hipep claims the node when every node of
every body is claimable, and runs it as plan control flow (the executor's Loop/If steps), so
these entries have no numpy reference of their own."""
from __future__ import annotations

from ..errors import HipepError
from ..graph import GraphView, Node, TensorType
from .registry import BOOL, I64, OpDef, check_node, register

VERSIONS = (11, 13, 16, 19, 21, 23, 24, 25)


def _run_as_plan(inputs, attrs):
    raise HipepError("control flow runs as plan steps, not as a kernel")


def _claim_bodies(node: Node, graph: GraphView, attrs: dict) -> str | None:
    for attr, body in node.subgraphs.items():
        for inner in body.nodes:
            reason = check_node(inner, body)
            if reason is not None:
                return f"its {attr} graph has a node hipep cannot run: node '{inner.label}' ({inner.qualified_op}): {reason}"
    return None


def _loop_types(types, values, attrs, num_outputs):
    carried = list(types[2:])
    scans = [TensorType(0, None)] * max(0, num_outputs - len(carried))
    return (carried + scans)[:num_outputs]


def _if_types(types, values, attrs, num_outputs):
    return [TensorType(0, None)] * num_outputs


register(OpDef("Loop", VERSIONS, ("I", "B", ""), ("",) * 64, {"I": frozenset({I64}), "B": frozenset({BOOL})},
               _run_as_plan, attributes={"body": None}, claim=_claim_bodies, min_inputs=2, variadic=True,
               shape_rule=_loop_types, host_inputs=(0, 1), control_flow=True))
register(OpDef("If", VERSIONS, ("B",), ("",) * 64, {"B": frozenset({BOOL})}, _run_as_plan,
               attributes={"then_branch": None, "else_branch": None}, claim=_claim_bodies,
               shape_rule=_if_types, host_inputs=(0,), control_flow=True))
