"""ONNX ops that are functions, and the body ONNX Runtime expands them into.

Some ONNX ops are defined as functions of other ops: Swish, NegativeLogLikelihoodLoss,
SoftmaxCrossEntropyLoss, CenterCropPad, Bernoulli, ... ONNX Runtime's partitioner gives every
node no EP took to the EPs again after it has replaced each such node whose op has a function
body with that body (its CPU EP has kernels for some of these ops, AffineGrid and the window
functions among them; for the others the body is what runs). So hipep need not implement such an
op: it runs the node through its body, or leaves it for ORT to inline and claims the body's nodes
in the next GetCapability call (hipep.partition says which).

`function_body` builds the graph ORT inlines for a node, as a GraphView, so the partitioner can
tell whether hipep would claim all of it (and say so instead of reporting the node as a node
hipep cannot run). The body is the op schema's function at the model's opset for the op's domain
(the newest function version not above it, as ORT picks), built for the node's input types where
the schema's function depends on them (context-dependent functions), with the node's attributes
(and the schema's defaults) substituted.

`expand_function_nodes` substitutes the bodies of such nodes in a subgraph hipep compiles: the
partitioner claims a function node whole where its body can run where the subgraph runs (hipep
then fuses it with its neighbours, where ORT's inlining would leave it a subgraph of its own).

Plain Python: imports only onnx, graph and (for the expansion) the registry.
"""
from __future__ import annotations

from .graph import GraphView, Node, TensorType, _graph_from_proto

# The domain the node becomes a call of while onnx's inliner substitutes its body.
_CALL_DOMAIN = "hipep.function"


def is_function_candidate(node: Node, graph: GraphView | None = None) -> bool:
    """A node hipep can run only as a function body: it holds no graph attribute (control flow has
    entries; other ops with bodies, SequenceMap, are not run) and its op has no registry entry, or
    (given the node's graph) an entry that takes other element types only and says such nodes run
    through the body (OpDef.body_for_other_types: AffineGrid in f16)."""
    from .ops.registry import check_types, lookup

    if node.subgraphs:
        return False
    op = lookup(node.domain, node.op_type)
    if op is None:
        return True
    return graph is not None and op.body_for_other_types and check_types(op, node, graph) is not None


def function_body(node: Node, graph: GraphView) -> GraphView | None:
    """The graph ORT inlines for `node`: its inputs are the node's inputs (constant ones as the
    graph's constants), its outputs the node's outputs, every other value named after the node.
    None when the op has no function body or the body cannot be built for this node (an input of
    unknown type where the body depends on types, attributes the function builder refuses)."""
    import onnx
    from onnx import helper

    schema = _schema(node, graph)
    if schema is None or not (schema.has_function or schema.has_context_dependent_function):
        return None
    version = _opset(node.domain, graph)
    try:
        call = _node_proto(node, schema)
    except (TypeError, ValueError):
        return None
    input_types = [_type_proto(graph.type_of(v)) if v else onnx.TypeProto() for v in node.inputs]
    # the newest function version not above the model's opset (onnx asks for one it has exactly)
    versions = (schema.context_dependent_function_opset_versions if schema.has_context_dependent_function
                else schema.function_opset_versions)
    version = max((v for v in versions if v <= version), default=version)
    try:
        if schema.has_context_dependent_function:
            raw = schema.get_context_dependent_function_with_opset_version(
                version, call.SerializeToString(), [t.SerializeToString() for t in input_types])
        else:
            raw = schema.get_function_with_opset_version(version)
    except Exception:  # noqa: BLE001 - onnx's builder refuses this node (its types or attributes)
        return None
    if not raw:
        return None
    function = onnx.FunctionProto()
    function.ParseFromString(raw if isinstance(raw, bytes) else raw.SerializeToString())
    function.domain, function.name = _CALL_DOMAIN, node.op_type
    call.domain, call.op_type = _CALL_DOMAIN, node.op_type

    present = [v for v in dict.fromkeys(node.inputs) if v]
    initializers = [onnx.numpy_helper.from_array(graph.constants[v], v) for v in present if v in graph.constants]
    inputs = [helper.make_value_info(v, _type_proto(graph.type_of(v))) for v in present if v not in graph.constants]
    outputs = [helper.make_value_info(v, onnx.TypeProto()) for v in node.outputs if v]
    opsets = {o.domain: o.version for o in function.opset_import}
    opsets.setdefault("", version if node.domain == "" else _opset("", graph))
    model = helper.make_model(
        helper.make_graph([call], f"{node.op_type} body", inputs, outputs, initializer=initializers),
        opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()] + [helper.make_opsetid(_CALL_DOMAIN, 1)],
        functions=[function])
    try:
        from onnx import inliner

        inlined = inliner.inline_local_functions(model)
        _prefix_inner_values(inlined.graph, set(present) | {v for v in node.outputs if v},
                             f"{next((v for v in node.outputs if v), node.name)}/{node.op_type}/")
        inlined = onnx.shape_inference.infer_shapes(inlined, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - a body onnx cannot inline is one hipep does not claim
        return None
    # Large constants stay weights of the enclosing graph; they are named, not copied, here.
    view = _graph_from_proto(inlined.graph, {("" if d == "ai.onnx" else d): v for d, v in opsets.items()},
                             {v: graph.type_of(v) for v in present})
    view.weights |= {v for v in present if v in graph.weights}
    view.inputs = [v for v in view.inputs if v not in view.weights]
    return view


def expand_function_nodes(graph: GraphView) -> GraphView:
    """`graph` with every node of an op hipep has no registry entry for (or whose entry sends the
    node's types to the body: is_function_candidate) replaced by its function body (and those
    bodies' function nodes by theirs): what ORT would inline, for hipep's compiler, which the
    partitioner let claim such a node whole (hipep.partition). Other nodes as they are."""
    import dataclasses

    from .errors import ModelError

    def has_function(g: GraphView) -> bool:
        return any(any(has_function(b) for b in n.subgraphs.values()) if n.subgraphs
                   else is_function_candidate(n, g) for n in g.nodes)

    if not has_function(graph):
        return graph
    nodes, types, constants = [], dict(graph.types), dict(graph.constants)
    for node in graph.nodes:
        if node.subgraphs:  # an If's or Loop's bodies hold claimed function nodes of their own
            nodes.append(dataclasses.replace(
                node, subgraphs={k: expand_function_nodes(b) for k, b in node.subgraphs.items()}))
            continue
        if not is_function_candidate(node, graph):
            nodes.append(node)
            continue
        body = function_body(node, graph)
        if body is None:
            raise ModelError(f"node '{node.label}' ({node.qualified_op}): hipep has no kernel for it and "
                             f"cannot build its function body")
        body = expand_function_nodes(body)
        nodes += body.nodes
        types.update(body.types)
        constants.update(body.constants)
    nodes = [dataclasses.replace(n, index=i) for i, n in enumerate(nodes)]
    return dataclasses.replace(graph, nodes=nodes, types=types, constants=constants, invalid_utf8={})


def _prefix_inner_values(g, keep: set, prefix: str) -> None:
    """Renames the values of an inlined body that are not the node's own inputs and outputs:
    `prefix` + name, so two bodies of one graph never share a name. The bodies of its If and Loop
    nodes too: their references to the body's values, and their own values."""

    def subgraphs(n):
        for a in n.attribute:
            yield from ([a.g] if a.HasField("g") else []) + list(a.graphs)

    def values(graph) -> set:
        out = {i.name for i in graph.initializer}
        for n in graph.node:
            out |= {v for v in list(n.input) + list(n.output) if v}
            for sub in subgraphs(n):
                out |= values(sub) | {v.name for v in list(sub.input) + list(sub.output)}
        return out

    inner = values(g) - keep

    def rename(v):
        return prefix + v if v in inner else v

    def rename_in(graph) -> None:
        for n in graph.node:
            n.input[:] = [rename(v) for v in n.input]
            n.output[:] = [rename(v) for v in n.output]
            for sub in subgraphs(n):
                rename_in(sub)
                for vi in list(sub.input) + list(sub.output):
                    vi.name = rename(vi.name)
        for i in graph.initializer:
            i.name = rename(i.name)
        for vi in graph.value_info:
            vi.name = rename(vi.name)

    rename_in(g)


def _opset(domain: str, graph: GraphView) -> int:
    if domain == "":
        return int(graph.opsets.get("", graph.opsets.get("ai.onnx", 0)))
    return int(graph.opsets.get(domain, 0))


def _schema(node: Node, graph: GraphView):
    import onnx.defs

    try:
        return onnx.defs.get_schema(node.op_type, _opset(node.domain, graph), node.domain)
    except Exception:  # noqa: BLE001 - no such op in this onnx: no function either
        return None


def _node_proto(node: Node, schema):
    """The node as a NodeProto with its attributes typed as the schema declares them, and the
    schema's defaults for those it leaves out (a function body's attribute references read them)."""
    import copy

    import numpy as np
    from onnx import helper, numpy_helper
    from onnx.defs import OpSchema

    proto = helper.make_node(node.op_type, node.inputs, node.outputs, name=node.name, domain=node.domain)
    for name, value in node.attributes.items():
        if value is None:  # a graph attribute: such ops are not expanded here
            raise ValueError(f"attribute '{name}' is a graph")
        spec = schema.attributes.get(name)
        if spec is None:
            raise ValueError(f"attribute '{name}' is not in the schema")
        if isinstance(value, np.ndarray) and spec.type == OpSchema.AttrType.TENSOR:
            value = numpy_helper.from_array(value)
        elif isinstance(value, np.generic):
            value = value.item()
        proto.attribute.append(helper.make_attribute(name, value, attr_type=spec.type))
    for name, spec in schema.attributes.items():
        if name not in node.attributes and spec.default_value.type != 0:
            default = copy.deepcopy(spec.default_value)
            default.name = name
            proto.attribute.append(default)
    return proto


def _type_proto(t: TensorType):
    from onnx import helper

    if t.kind != "tensor" or t.elem_type == 0:
        import onnx

        return onnx.TypeProto()
    shape = None if t.shape is None else [d if isinstance(d, (int, str)) else None for d in t.shape]
    return helper.make_tensor_type_proto(t.elem_type, shape)
