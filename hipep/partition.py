"""Partition a GraphView: claim nodes through the op registry and fuse claimed nodes into
maximal convex subgraphs; every node hipep leaves to other EPs carries the reason, in words.

Convexity is what makes a fused subgraph legal: if a claimed A feeds an unclaimed B that feeds
a claimed C, and A also feeds C, then fusing {A, C} into one node would need B's output before
the fused node runs and the fused node's output before B runs, a cycle. So a cluster never
contains two members joined by a path through a non-member.

The algorithm is greedy over a topological order (computed here from value edges, implicit
inputs of control-flow nodes included; graph order is not trusted). For every node it keeps,
as bit sets of cluster ids, the clusters that reach it (`reach`) and the clusters that reach it
along a path that left the cluster (`dirty`). A claimed node may join cluster C only if C is not
dirty for it: then no path from C to the node passes outside C, and since every ancestor of the
node is already placed, joining cannot close a cycle. It prefers the cluster of a claimed
producer, then any other non-dirty cluster (independent claimed branches fuse too, so ORT sees
fewer, larger subgraphs), else it opens a new cluster.

Control-flow bodies (If/Loop/Scan) are partitioned on their own into `nested`, as ORT calls
GetCapability separately for each nested subgraph.

A node of an ONNX op hipep has no registry entry for, whose schema defines it as a function
(Swish, NegativeLogLikelihoodLoss, ...), is no rejection when hipep would claim every node of its
function body (hipep.functions) and ORT would inline that body (no EP has a kernel for the op).
hipep claims it whole and compiles its body, fused with its neighbours ("direct"), where the body
runs on the device with no host read but of constants (always on the CPU device); otherwise it
leaves the node, and ORT replaces it by its body when no EP takes it and asks again, and hipep
claims the body then. The report lists both under `expansions`, with the body's own report.

Plain Python: imports only graph, functions and ops.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

from .functions import function_body, is_function_candidate
from .graph import GraphView, Node, topological_order, value_edges
from .ops.registry import check_node, lookup

# claim(node, graph) -> None to claim the node, or the reason it is not claimed.
Claim = Callable[[Node, GraphView], "str | None"]
# expands(node, graph) -> whether ORT replaces an unclaimed node of a function op by its body (it
# does unless one of its EPs has a kernel for the op and the node's types: hipep.explain asks ORT's
# CPU EP).
Expands = Callable[[Node, GraphView], bool]


@dataclass
class Rejection:
    node: Node
    reason: str

    def line(self) -> str:
        n = self.node
        return (f"node '{n.label}' ({n.domain or 'ai.onnx'}::{n.op_type}, "
                f"opset {n.since_version}): {self.reason}")


@dataclass
class Expansion:
    """A node of an ONNX function op hipep has no entry for, whose body hipep claims whole. `direct`:
    hipep claims the node itself and compiles its body (hipep.functions.expand_function_nodes),
    fused with its neighbours; else (a GPU body that needs host reads) it leaves the node, and ORT
    replaces it by its body and asks again."""
    node: Node
    body: "PartitionReport"
    body_ops: tuple[str, ...] = ()  # the op types of the body's nodes, first appearance first
    direct: bool = False

    def line(self) -> str:
        n = self.node
        ops = ", ".join(self.body_ops)
        head = f"node '{n.label}' ({n.domain or 'ai.onnx'}::{n.op_type}, opset {n.since_version}): a function"
        if self.direct:
            return f"{head}, run as its body ({ops}: {self.body.claimed_total} nodes)"
        return (f"{head}; ONNX Runtime replaces it by its body ({ops}) when no EP has a kernel for it, and "
                f"hipep claims all {self.body.claimed_total} nodes of that")


SHOWN_NODES = 8  # claimed nodes a report's subgraph line names before it counts the rest


@dataclass
class PartitionReport:
    graph_name: str
    total_nodes: int
    clusters: list[list[int]]  # Node.index of each fused subgraph's members, topological order
    rejections: list[Rejection]  # every unclaimed node, graph order
    nested: list["PartitionReport"] = field(default_factory=list)
    # Where a nested report's graph lives, e.g. "attribute 'then_branch' of node 'If_0'";
    # empty for the main graph.
    context: str = ""
    labels: dict[int, str] = field(default_factory=dict)  # Node.index -> Node.label
    # Function nodes whose bodies hipep claims whole (graph order): run as those bodies, or left
    # for ORT to replace by them.
    expansions: list[Expansion] = field(default_factory=list)

    @property
    def claimed_count(self) -> int:
        return sum(len(c) for c in self.clusters)

    @property
    def claimed_total(self) -> int:
        """Nodes hipep runs: claimed here, in nested graphs and in the bodies ORT expands."""
        return (self.claimed_count + sum(r.claimed_total for r in self.nested)
                + sum(e.body.claimed_total for e in self.expansions if not e.direct))

    @property
    def all_claimed(self) -> bool:
        """True when no node is rejected here or in any nested graph (a function node whose body
        hipep claims is no rejection)."""
        return not self.rejections and all(r.all_claimed for r in self.nested)

    def summary(self) -> str:
        text = f"claimed {self.claimed_count} of {self.total_nodes} nodes in {len(self.clusters)} subgraphs"
        left = sum(not e.direct for e in self.expansions)
        if left:
            text += f", {left} left for ORT to expand into nodes hipep claims"
        return text

    def rejection_lines(self) -> list[str]:
        return [r.line() for r in self.rejections]

    def format(self, indent: str = "", all_nodes: bool = False) -> str:
        """The report as text. A subgraph lists its first SHOWN_NODES claimed nodes and counts the
        rest (a real model claims thousands); `all_nodes=True` lists every one. Unclaimed nodes
        are always listed, each with its reason."""
        title = f"graph '{self.graph_name}'" if self.graph_name else "graph (unnamed)"
        if self.context:
            title += f" ({self.context})"
        lines = [f"{indent}{title}: {self.summary()}"]
        for k, cluster in enumerate(self.clusters, 1):
            shown = cluster if all_nodes else cluster[:SHOWN_NODES]
            names = ", ".join(self.labels.get(i, f"#{i}") for i in shown)
            if len(shown) < len(cluster):
                names += f", ... and {len(cluster) - len(shown)} more (all of them: explain --all)"
            lines.append(f"{indent}  subgraph {k} ({len(cluster)} "
                         f"{'node' if len(cluster) == 1 else 'nodes'}): {names}")
        direct = [e for e in self.expansions if e.direct]
        left = [e for e in self.expansions if not e.direct]
        if direct:
            lines.append(f"{indent}  functions run as their bodies ({len(direct)}):")
            lines += [f"{indent}    {e.line()}" for e in direct]
        if left:
            lines.append(f"{indent}  left for ORT to expand ({len(left)}):")
            lines += [f"{indent}    {e.line()}" for e in left]
        if self.rejections:
            lines.append(f"{indent}  not claimed ({len(self.rejections)}):")
            lines += [f"{indent}    {line}" for line in self.rejection_lines()]
        for sub in self.nested:
            lines.append(sub.format(indent + "  ", all_nodes))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


def _claim_safely(claim: Claim, node: Node, graph: GraphView) -> str | None:
    """A failing claim predicate rejects its node instead of failing GetCapability. A node with a
    name, op type or value name that is not valid UTF-8 (GraphView.invalid_utf8) is not claimed."""
    bad = graph.invalid_utf8.get(node.index)
    if bad:
        return f"{', '.join(bad)} {'is' if len(bad) == 1 else 'are'} not valid UTF-8 (ONNX requires UTF-8 names)"
    try:
        reason = claim(node, graph)
    except Exception as e:  # noqa: BLE001 - reported as the rejection reason
        return f"claim check failed: {type(e).__name__}: {e}"
    if reason is None:
        return None
    return str(reason) or "not claimed (no reason given)"


@dataclass
class _DeviceFacts:
    """What `device_claim` learned about the nodes it claimed on a GPU device, by Node.index:
    whether the node has a GPU program, whether its outputs are all integers, the inputs it
    reads the data of that are not constant initializers, and those its output shapes depend on
    the values of (the op's host_inputs: Reshape's shape, Range's bounds, ...), with their
    positions."""
    has_kernel: dict[int, bool] = field(default_factory=dict)
    integer_outputs: dict[int, bool] = field(default_factory=dict)
    data_inputs: dict[int, list[str]] = field(default_factory=dict)
    shape_inputs: dict[int, list[tuple[int, str]]] = field(default_factory=dict)


def device_claim(claim: Claim, device: str, refused: dict[int, str] | None = None,
                 facts: _DeviceFacts | None = None) -> Claim:
    """`claim`, narrowed to the nodes device `device` can run: a node whose op has no GPU program
    is left to other EPs ("no kernel for cuda: ..."), unless it will run as host work there
    (integer shape arithmetic on host values, the rule hip-bufferize applies: every input it
    reads the data of is a small constant initializer or a result of such host work). Nodes must
    be asked in topological order (partition does), so producers are known before consumers.
    `refused`: nodes not to claim, with the reason (see `partition`); `facts` is filled in."""
    if device == "cpu":
        return claim
    from .ops.registry import lookup, resolve_attributes
    from .plan import op_key
    from .runtime.gpu_kernels import kernel_reason

    host_values: set[str] = set()
    refused = refused or {}

    def claim_on_device(node: Node, graph: GraphView) -> str | None:
        reason = claim(node, graph)
        if reason is not None:
            return reason
        if node.index in refused:
            return refused[node.index]
        op = lookup(node.domain, node.op_type)
        if op is None:  # a custom claim function's op: nothing to check against
            return None
        attrs = resolve_attributes(op, node)
        types = [graph.type_of(v) if v else None for v in node.inputs]
        dtypes = [_dtype_name(t) for t in types]
        # Symbolic dims (names) and unknown ones are None: the kernel table reads static extents only.
        shapes = _static_shapes(types)
        values = [graph.constant(v) if v else None for v in node.inputs]
        data_inputs = _data_inputs(op, node)
        outputs_integer = _integer_outputs(node, graph)
        host = _host_work(op, node, graph, host_values)
        # An If runs its branch's kernels; the branch is chosen before any launch, so its condition
        # must be a value the host knows (the host-input check of _shapes_from_device_values). A
        # Loop or Scan runs its body's kernels once per iteration, step by step (its subgraph's
        # plan goes through the interpreter, which reads the conditions as the device computes them).
        why = _body_kernel_reason(node, device) if op.control_flow else \
            kernel_reason(op_key(node.domain or "", node.op_type), attrs, dtypes, shapes, values)
        if why is not None and not host:
            return why.replace("cuda", device, 1) if device != "cuda" else why
        # Claimed: only now are its results host values for the nodes after it (a rejected
        # node's results reach hipep from another EP, in device memory).
        if host:
            host_values.update(o for o in node.outputs if o)
        if facts is not None:
            facts.has_kernel[node.index] = why is None
            facts.integer_outputs[node.index] = outputs_integer
            facts.data_inputs[node.index] = [v for v in data_inputs if v not in graph.constants]
            facts.shape_inputs[node.index] = [(i, node.inputs[i]) for i in op.host_inputs
                                              if i < len(node.inputs) and node.inputs[i]
                                              and not _plan_constant(graph, node.inputs[i])]
        return None

    return claim_on_device


def _static_shapes(types) -> list:
    """Per input, its static extents (symbolic and unknown dims None), as the kernel table reads them."""
    return [None if t is None or t.shape is None else
            tuple(d if isinstance(d, int) and not isinstance(d, bool) else None for d in t.shape) for t in types]


def _data_inputs(op, node: Node) -> list[str]:
    """The inputs whose data `node` reads (not those it reads the extents of only)."""
    extent_only = set(op.extent_only_inputs)
    return [v for i, v in enumerate(node.inputs) if v and i not in extent_only]


def _integer_outputs(node: Node, graph: GraphView) -> bool:
    return all(_dtype_name(graph.type_of(o)) in _HOST_TYPES for o in node.outputs if o)


def _host_work(op, node: Node, graph: GraphView, host_values: set[str]) -> bool:
    """Whether a GPU device runs `node` as host work (hip-bufferize's rule): integer results of
    inputs whose data are `graph`'s small constants or `host_values`. An If's results are device
    values (its branch's kernels, or copies, write them), even where they are integers the host
    knows when it traces shapes."""
    return not op.control_flow and _integer_outputs(node, graph) and \
        all(v in graph.constants or v in host_values for v in _data_inputs(op, node))


def _body_kernel_reason(node: Node, device: str) -> str | None:
    """Why a control-flow node's bodies (an If's branches, a Loop's or Scan's body) cannot run on a
    GPU device, or None: every node of every body (nested control flow included) has a GPU kernel,
    or runs as host work there by the main graph's rule (_host_work, over the body's constants and
    host results: a Shape of a device value reads its extents only); Constant nodes are weights and
    need none."""
    from .ops.registry import lookup, resolve_attributes
    from .plan import op_key
    from .runtime.gpu_kernels import kernel_reason

    for attr, body in node.subgraphs.items():
        host_values: set[str] = set()
        for inner in body.nodes:
            if inner.op_type == "Constant" and not inner.domain:
                continue
            op = lookup(inner.domain, inner.op_type)
            if op is None:
                why = "not a registered op"
            elif op.control_flow:
                why = _body_kernel_reason(inner, device)
            else:
                types = [body.type_of(v) if v else None for v in inner.inputs]
                why = kernel_reason(op_key(inner.domain or "", inner.op_type), resolve_attributes(op, inner),
                                    [_dtype_name(t) for t in types], _static_shapes(types),
                                    [body.constant(v) if v else None for v in inner.inputs])
                if _host_work(op, inner, body, host_values):
                    host_values.update(o for o in inner.outputs if o)
                    why = None
            if why is not None:
                why = why.replace("cuda", device, 1) if device != "cuda" else why
                return f"its {attr} graph has a node the {device} device cannot run: node '{inner.label}' " \
                       f"({inner.op_type}): {why}"
    return None


def _host_work_without_host_inputs(graph: GraphView, clusters: list[list[int]], facts: _DeviceFacts,
                                   device: str) -> dict[int, str]:
    """Nodes claimed only as host work (no GPU program) that their subgraph cannot run on the
    host: a value crossing from another subgraph arrives in device memory, so within each
    subgraph host values are what hip-bufferize finds there (integer results of members whose
    data inputs are constants or such host values)."""
    nodes = graph.nodes
    bad: dict[int, str] = {}
    for members in clusters:
        host_values: set[str] = set()
        for pos in members:
            node = nodes[pos]
            if node.index not in facts.has_kernel:
                continue  # claimed by a custom claim function: nothing known
            ins = facts.data_inputs[node.index]
            # an If's results are device values (see claim_on_device), known to the tracer only
            host = facts.integer_outputs[node.index] and node.op_type != "If" and all(v in host_values for v in ins)
            if host:
                host_values.update(o for o in node.outputs if o)
            elif not facts.has_kernel[node.index]:
                away = [v for v in ins if v not in host_values]
                bad[node.index] = (f"no kernel for {device}: {node.op_type}, and it cannot run as host work: "
                                   f"{', '.join(repr(v) for v in away)} would reach its subgraph in device memory")
    return bad


def _shapes_from_device_values(graph: GraphView, clusters: list[list[int]], facts: _DeviceFacts,
                               device: str) -> dict[int, str]:
    """Claimed nodes whose output shapes would depend on values known only once the device has
    computed them. A GPU device replays plans whose shapes follow, before any launch, from the
    input shapes and from values the host knows (hipep.runtime.shapes traces them); it runs a plan
    step by step only where a Loop or Scan makes that necessary (subgraphs holding one are not
    checked: the interpreter reads what it needs as the device computes it). Within a subgraph the
    host knows: constant initializers the plan holds as constants (at most the IR's
    MAX_DENSE_ELEMENTS elements: a larger one is a weight in device memory); small values handed
    in from outside, which the host reads at run time (integers element by element as symbols;
    floats and bools whole, their values pinned, so that a run with other values is traced anew);
    and the integer results of members whose data inputs it knows (shape arithmetic, evaluated on
    the host). Small means at most
    MAX_READ_ELEMENTS elements: a value whose static extents hold more is not read, and one of
    unknown extents that holds more at run time is an error there. Like the tracer, it also follows the launches that only move or
    re-type known integers (TRACKED_ON_DEVICE: Cast of a Shape to float is known), but no
    arithmetic on a float or bool value from outside, and no result of device arithmetic on data:
    a node reading such a value is left to other EPs, which run it after the value exists."""
    from .runtime.shapes import TRACKED_ON_DEVICE

    nodes = graph.nodes
    bad: dict[int, str] = {}
    for members in clusters:
        if any(nodes[pos].op_type in _STEP_BY_STEP and not nodes[pos].domain for pos in members):
            continue  # a Loop's subgraph runs step by step: its shapes are found as its values are
        produced = {o: nodes[pos] for pos in members for o in nodes[pos].outputs if o}
        known: set[str] = set()

        def from_outside(v: str) -> bool:
            """A value handed in that the host may read (its static extents small enough)."""
            return v not in graph.constants and v not in produced and _read_elements(graph, v) is None

        def is_known(v: str) -> bool:  # as integers the host follows through shape arithmetic
            if _plan_constant(graph, v) or v in known:
                return True
            return from_outside(v) and _integer(graph, v)

        def is_read(v: str) -> bool:  # what a rule may read: those, and floats and bools pinned
            return is_known(v) or (from_outside(v) and _pinnable(graph, v))

        for pos in members:
            node = nodes[pos]
            if node.index not in facts.has_kernel:  # claimed by a custom claim function: nothing known
                known.update(o for o in node.outputs if o)
                continue
            for i, v in facts.shape_inputs[node.index]:
                if is_read(v):
                    continue
                dtype = _dtype_name(graph.type_of(v))
                if v in produced:
                    p = produced[v]
                    where = f"computed on the device by node '{p.label}' ({p.op_type})"
                elif v in graph.constants:
                    where = (f"a {dtype} initializer of {graph.constants[v].size} elements, which the plan holds in "
                             f"device memory (the host reads initializers of at most {_max_constant()} elements)")
                elif _read_elements(graph, v) is not None:
                    where = (f"a {dtype} tensor of {_read_elements(graph, v)} elements, more than the host reads "
                             f"({_max_read()})")
                else:
                    where = f"a {dtype or 'non-numeric'} tensor, read on the device only"
                what = "the branch it takes" if node.op_type == "If" and not node.domain else "its output's shape"
                bad[node.index] = (f"{what} depends on the value of input {i} '{v}', {where}; "
                                   f"the {device} device runs plans whose shapes are known before their launches")
                # another EP computes its results: they reach the nodes after it from outside
                for o in node.outputs:
                    produced.pop(o, None)
                break
            ins = facts.data_inputs[node.index]
            if all(is_known(v) for v in ins) and (facts.integer_outputs[node.index] or (
                    node.op_type in TRACKED_ON_DEVICE and not node.domain
                    and all(_integer(graph, v) for v in ins))):
                known.update(o for o in node.outputs if o)
    return bad


# Ops whose subgraph's plan runs step by step on every device (Scan becomes a loop too).
_STEP_BY_STEP = frozenset({"Loop", "Scan"})


def _plan_constant(graph: GraphView, v: str) -> bool:
    """Whether `v` is a constant initializer the plan holds as a constant, whose value its shape
    program reads (hipep.compiler's rule for IR constants); a larger one is a weight, which the
    plan keeps in device memory only."""
    from .compiler import ir_constant

    c = graph.constants.get(v)
    return c is not None and ir_constant(c)


def _max_constant() -> int:
    from .ir.dialect import MAX_DENSE_ELEMENTS

    return MAX_DENSE_ELEMENTS


def _max_read() -> int:
    from .runtime.shapes import MAX_READ_ELEMENTS

    return MAX_READ_ELEMENTS


def _read_elements(graph: GraphView, v: str) -> int | None:
    """`v`'s element count where its static extents say it is more than the host reads of a
    value handed in (hipep.runtime.shapes.MAX_READ_ELEMENTS), else None."""
    t = graph.type_of(v)
    if t is None or t.shape is None or not all(isinstance(d, int) and not isinstance(d, bool) for d in t.shape):
        return None
    n = 1
    for d in t.shape:
        n *= d
    return n if n > _max_read() else None


def _pinnable(graph: GraphView, v: str) -> bool:
    """Whether `v` is a float or bool, which the host reads whole and pins (hipep.runtime.shapes)."""
    from .runtime.shapes import pinnable

    name = _dtype_name(graph.type_of(v))
    return bool(name) and pinnable(name)


def _integer(graph: GraphView, v: str) -> bool:
    """Whether `v`'s element type is an integer (not bool): what the host can read as a shape."""
    return _dtype_name(graph.type_of(v)).startswith(("int", "uint"))


_HOST_TYPES = {"bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"}


def _dtype_name(t) -> str:
    """The numpy name of a value type's element type ("" where unknown or not numeric)."""
    from .graph import numpy_dtype

    if t is None or not t.elem_type:
        return ""
    try:
        return numpy_dtype(t.elem_type).name
    except ValueError:
        return ""


def partition(graph: GraphView, claim: Claim = check_node, device: str = "cpu",
              expands: Expands | None = None, fused_domain: str | None = None) -> PartitionReport:
    """Claim or reject every node of `graph` and cluster the claimed ones (see module doc).
    `device`: the device kind the EP runs on; on a GPU, nodes without a GPU program are left to
    other EPs (see `device_claim`), and so are host work whose host inputs end up in another
    subgraph (they would arrive in device memory) and nodes whose output shapes would depend on
    values computed on the device (see `_shapes_from_device_values`): such nodes are refused and
    the graph is partitioned again, until every claimed node can run where its subgraph puts it.
    `expands`: which unclaimed function nodes ORT replaces by their bodies (default: all of them,
    the ORT partitioner's rule where no other EP has a kernel for the op).
    `fused_domain`: the domain of the nodes the EP fused in earlier GetCapability calls on this
    graph (ORT asks again after expanding function nodes): they are hipep's already, so neither
    claimed nor rejected."""
    refused: dict[int, str] = {}
    while True:
        facts = _DeviceFacts()
        report = _partition_once(graph, claim, device, refused, facts, expands, fused_domain)
        if device == "cpu":
            return report
        position = {n.index: pos for pos, n in enumerate(graph.nodes)}
        clusters = [[position[i] for i in c] for c in report.clusters]
        bad = _host_work_without_host_inputs(graph, clusters, facts, device)
        bad.update(_shapes_from_device_values(graph, clusters, facts, device))
        if not bad:
            return report
        refused.update(bad)


def _expansion(node: Node, graph: GraphView, claim: Claim, device: str,
               expands: Expands | None) -> Expansion | str | None:
    """The node's Expansion when it is a function node of an op hipep has no entry for and hipep
    would claim that whole body, claimed as the node (direct) or left for ORT to replace by the body
    (only where ORT does: `expands`; an op ORT has a kernel of, such as AffineGrid,
    stays a node); the reason it is left where only that stands in the way; else None."""
    if not is_function_candidate(node, graph):
        return None
    body = function_body(node, graph)
    if body is None:
        return None
    report = partition(body, claim, device, expands)
    if not report.all_claimed or report.claimed_total == 0:
        return None
    direct = device == "cpu" or _runs_on_device_alone(body, report)
    ops = tuple(dict.fromkeys(n.op_type for n in body.nodes))
    if not direct and expands is not None and not expands(node, graph):
        return (f"a function whose body ({', '.join(ops)}) runs on {device} only with host reads of its values, "
                f"and ONNX Runtime runs its own kernel for it instead of that body")
    return Expansion(node, report, ops, direct=direct)


def _runs_on_device_alone(body: GraphView, report: "PartitionReport") -> bool:
    """Whether a function body hipep claims on a GPU runs with no value the host must read but
    constants (no host inputs of data, no control flow; nested functions likewise), so its node
    can join any subgraph: the partitioner's checks on host work and shapes see the node, not its
    body."""
    direct = {e.node.index for e in report.expansions if e.direct}
    for n in body.nodes:
        op = lookup(n.domain, n.op_type)
        if op is None:
            if n.index not in direct:
                return False
            continue
        if op.control_flow or any(i < len(n.inputs) and n.inputs[i] and n.inputs[i] not in body.constants
                                  for i in op.host_inputs):
            return False
    return True


def _partition_once(graph: GraphView, claim: Claim, device: str, refused: dict[int, str],
                    facts: _DeviceFacts, expands: Expands | None = None,
                    fused_domain: str | None = None) -> PartitionReport:
    base_claim, claim = claim, device_claim(claim, device, refused, facts)
    nodes = graph.nodes
    order = topological_order(graph)
    _, preds = value_edges(graph)

    reasons: dict[int, str] = {}  # position -> rejection reason
    expansions: dict[int, Expansion] = {}  # position -> the function body ORT puts in its place
    cluster_of: dict[int, int] = {}  # position -> cluster id
    clusters: list[list[int]] = []  # cluster id -> member positions, topological order
    reach = [0] * len(nodes)  # bit c set: cluster c reaches this node
    dirty = [0] * len(nodes)  # bit c set: cluster c reaches it along a path that left c

    for pos in order:
        node = nodes[pos]
        r = d = 0
        producer_clusters = 0
        for p in preds[pos]:
            c = cluster_of.get(p)
            if c is None:
                r |= reach[p]
                d |= dirty[p] | reach[p]  # p is outside every cluster
            else:
                bit = 1 << c
                r |= reach[p] | bit
                d |= dirty[p] | (reach[p] & ~bit)  # paths into p from other clusters left them
                producer_clusters |= bit
        if fused_domain is not None and node.domain == fused_domain:
            # fused by an earlier call: outside every new cluster, as a rejected node, unlisted
            reach[pos], dirty[pos] = r, d
            continue
        reason = _claim_safely(claim, node, graph)
        if reason is not None:
            expansion = _expansion(node, graph, base_claim, device, expands)
            if isinstance(expansion, str):
                reasons[pos] = expansion
            elif expansion is not None:
                expansions[pos] = expansion
                if expansion.direct:  # claimed whole: compiled through its body
                    reason = None
                    if device != "cpu":  # a device op of its data inputs, reading none on the host
                        facts.has_kernel[node.index] = True
                        facts.integer_outputs[node.index] = _integer_outputs(node, graph)
                        facts.data_inputs[node.index] = [v for v in node.inputs if v and v not in graph.constants]
                        facts.shape_inputs[node.index] = []
            else:
                reasons[pos] = reason
        if reason is None:
            eligible = producer_clusters & ~d
            if not eligible:
                eligible = ((1 << len(clusters)) - 1) & ~d
            if eligible:
                c = (eligible & -eligible).bit_length() - 1  # lowest id: deterministic
            else:
                c = len(clusters)
                clusters.append([])
            clusters[c].append(pos)
            cluster_of[pos] = c
        reach[pos], dirty[pos] = r, d

    nested: list[PartitionReport] = []
    for node in nodes:
        for attr, sub in node.subgraphs.items():
            # Values the body reads from the enclosing scope keep the types they have there.
            sub_view = dataclasses.replace(sub, types={**graph.types, **sub.types})
            report = partition(sub_view, base_claim, device, expands)
            report.context = f"attribute '{attr}' of node '{node.label}'"
            nested.append(report)

    return PartitionReport(
        graph_name=graph.name,
        total_nodes=len(nodes),
        clusters=[[nodes[pos].index for pos in members] for members in clusters if members],
        rejections=[Rejection(nodes[pos], reasons[pos]) for pos in range(len(nodes)) if pos in reasons],
        nested=nested,
        labels={n.index: n.label for n in nodes},
        expansions=[expansions[pos] for pos in range(len(nodes)) if pos in expansions],
    )
