"""Control flow: Loop, If and Scan. Their bodies are graphs; hipep claims the node when every node
of every body is claimable, and runs it as plan control flow (the executor's Loop/If steps), so
these entries have no numpy reference of their own. Scan has no step of its own: the frontend
lowers it to a hip.loop (trip count = the scan axis extent, each scan input's slice a Gather at
the iteration index inside the body, scan outputs flipped / transposed after the loop)."""
from __future__ import annotations

from ..errors import HipepError
from ..graph import GraphView, Node, TensorType
from .registry import BOOL, I64, REQUIRED, OpDef, check_node, register

VERSIONS = (11, 13, 16, 19, 21, 23, 24, 25)


def _run_as_plan(inputs, attrs):
    raise HipepError("control flow runs as plan steps, not as a kernel")


def _claim_bodies(node: Node, graph: GraphView, attrs: dict) -> str | None:
    for attr, body in node.subgraphs.items():
        for inner in body.nodes:
            reason = check_node(inner, body)
            if reason is not None and not _runs_as_function_body(inner, body):
                return f"its {attr} graph has a node hipep cannot run: node '{inner.label}' ({inner.qualified_op}): {reason}"
    return None


def _runs_as_function_body(node: Node, graph: GraphView) -> bool:
    """A node of an ONNX function op without a registry entry whose body the partitioner claims
    whole (the compiler substitutes the body: hipep.functions.expand_function_nodes)."""
    from ..functions import function_body, is_function_candidate
    from ..partition import partition

    body = function_body(node, graph) if is_function_candidate(node, graph) else None
    return body is not None and partition(body).all_claimed


def _loop_types(types, values, attrs, num_outputs):
    carried = list(types[2:])
    scans = [TensorType(0, None)] * max(0, num_outputs - len(carried))
    return (carried + scans)[:num_outputs]


def _if_types(types, values, attrs, num_outputs):
    return [TensorType(0, None)] * num_outputs


register(OpDef("Loop", VERSIONS, ("I", "B", ""), ("",) * 64, {"I": frozenset({I64}), "B": frozenset({BOOL})},
               _run_as_plan, attributes={"body": None}, claim=_claim_bodies, min_inputs=2, optional_inputs=(0, 1),
               variadic=True,
               shape_rule=_loop_types, host_inputs=(0, 1), control_flow=True))
register(OpDef("If", VERSIONS, ("B",), ("",) * 64, {"B": frozenset({BOOL})}, _run_as_plan,
               attributes={"then_branch": None, "else_branch": None}, claim=_claim_bodies,
               shape_rule=_if_types, host_inputs=(0,), control_flow=True))


# Scan: the forms ORT's CPU EP runs from opset 9 on (opset 8's batch axis and sequence_lens are not).
SCAN_VERSIONS = (9, 11, 16, 19, 21, 23, 24, 25)


def _int_list(attrs: dict, name: str, n: int, default: int) -> list[int] | str:
    v = attrs.get(name)
    if v is None:
        return [default] * n
    v = [int(x) for x in v]
    if len(v) != n:
        return f"attribute '{name}' has {len(v)} entries, expected {n}"
    return v


def scan_layout(node: Node, attrs: dict):
    """(n_state, n_scan_in, n_scan_out, in_axes, in_dirs, out_axes, out_dirs) of a Scan node, or a
    reason string for forms hipep does not run. Axes are as given (possibly negative)."""
    body = node.subgraphs.get("body")
    if body is None:
        return "Scan has no 'body' graph"
    m = int(attrs.get("num_scan_inputs", 0))
    n_in = len(node.inputs)
    if m < 1 or m > n_in:
        return f"num_scan_inputs = {m} with {n_in} inputs: hipep needs 1 to {n_in} scan inputs"
    n = n_in - m
    if any(not v for v in node.inputs):
        return "an input of the Scan is omitted"
    if len(body.inputs) != n_in:
        return f"its body has {len(body.inputs)} inputs, the node {n_in}"
    k = len(body.outputs) - n
    if k < 0 or len(node.outputs) > len(body.outputs):
        return f"its body has {len(body.outputs)} outputs, the node {len(node.outputs)} with {n} state values"
    in_axes = _int_list(attrs, "scan_input_axes", m, 0)
    in_dirs = _int_list(attrs, "scan_input_directions", m, 0)
    out_axes = _int_list(attrs, "scan_output_axes", k, 0)
    out_dirs = _int_list(attrs, "scan_output_directions", k, 0)
    for x in (in_axes, in_dirs, out_axes, out_dirs):
        if isinstance(x, str):
            return x
    for name, dirs in (("scan_input_directions", in_dirs), ("scan_output_directions", out_dirs)):
        if any(d not in (0, 1) for d in dirs):
            return f"attribute '{name}' = {dirs}: directions are 0 or 1"
    return n, m, k, in_axes, in_dirs, out_axes, out_dirs


def _claim_scan(node: Node, graph: GraphView, attrs: dict) -> str | None:
    """Opset 9+ forms only (not opset 8's batch axis / sequence_lens); at least one scan input;
    no omitted inputs; attribute lists of the right lengths, directions 0 or 1, axes in range
    (a non-zero scan_output_axes entry needs the body output's rank); every body node claimable."""
    layout = scan_layout(node, attrs)
    if isinstance(layout, str):
        return layout
    n, m, k, in_axes, _, out_axes, _ = layout
    body = node.subgraphs["body"]
    for j, a in enumerate(in_axes):
        r = graph.type_of(node.inputs[n + j]).rank
        if r is not None and not -r <= a < r:
            return f"scan_input_axes[{j}] = {a} is out of range for scan input {j} of rank {r}"
        if r == 0:
            return f"scan input {j} '{node.inputs[n + j]}' is a scalar"
    for j, a in enumerate(out_axes):
        r = body.type_of(body.outputs[n + j]).rank
        if r is None:
            if a != 0:
                return (f"scan_output_axes[{j}] = {a} but the rank of body output "
                        f"'{body.outputs[n + j]}' is unknown")
        elif not -(r + 1) <= a <= r:
            return f"scan_output_axes[{j}] = {a} is out of range for scan output {j} of rank {r + 1}"
    return _claim_bodies(node, graph, attrs)


register(OpDef("Scan", SCAN_VERSIONS, ("",), ("",) * 64, {}, _run_as_plan,
               attributes={"body": None, "num_scan_inputs": REQUIRED, "scan_input_axes": None,
                           "scan_input_directions": None, "scan_output_axes": None,
                           "scan_output_directions": None},
               claim=_claim_scan, min_inputs=1, variadic=True, shape_rule=_if_types, control_flow=True))
