"""GraphView: the one graph format the compiler reads.

It is built either from ORT's OrtGraph (by the native bridge, during GetCapability/Compile, as
plain dicts handed to `GraphView.from_native`) or from an ONNX ModelProto (`GraphView.from_onnx`,
used by `hipep.explain` and tests). Both give the same objects, so `explain()` and a session decide
alike. OrtGraph is only valid during ORT's call: everything here is copied into Python objects,
except large initializers, which keep only their name and type here (Compile copies their data
separately, into the subgraph's hipep.weights.WeightStore).
"""
from __future__ import annotations

import heapq as _heapq
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np

from .dtypes import elem_type_for, numpy_dtype_for

# Initializers up to this many elements are copied into the GraphView (shape operands, axes,
# small constants that claim predicates and shape rules read). Larger ones are weights: the
# GraphView names them; only Compile copies their data (for the weight store, not the graph).
SMALL_CONSTANT_ELEMENTS = 1 << 16

Dim = Union[int, str, None]  # static extent, symbolic name, or unknown


@dataclass(frozen=True)
class TensorType:
    """Type of one value. `kind` is 'tensor' for tensors; other ONNX kinds ('sequence', 'map',
    'optional', 'sparse_tensor', 'unknown') are carried so the partitioner can reject them with
    a reason. elem_type is ONNX's TensorProto enum (0 = unknown); shape None = unranked."""

    elem_type: int = 0
    shape: tuple[Dim, ...] | None = None
    kind: str = "tensor"

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    @property
    def dtype_name(self) -> str:
        return elem_type_name(self.elem_type)

    def __str__(self) -> str:
        if self.kind != "tensor":
            return self.kind
        if self.shape is None:
            return f"tensor<*x{self.dtype_name}>"
        dims = "x".join("?" if d is None else str(d) for d in self.shape)
        return f"tensor<{dims + 'x' if dims else ''}{self.dtype_name}>"


@dataclass
class Node:
    index: int
    name: str
    op_type: str
    domain: str  # "" for the default ONNX domain
    since_version: int  # since-version of the operator schema ORT resolved for this node
    inputs: list[str]  # "" marks an omitted optional input
    outputs: list[str]
    attributes: dict[str, Any] = field(default_factory=dict)
    subgraphs: dict[str, "GraphView"] = field(default_factory=dict)
    implicit_inputs: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """How reports name a node: its name, else op type plus first output."""
        if self.name:
            return self.name
        first = next((o for o in self.outputs if o), "?")
        return f"{self.op_type}({first})"

    @property
    def qualified_op(self) -> str:
        return f"{self.domain or 'ai.onnx'}::{self.op_type}"


@dataclass
class GraphView:
    name: str
    nodes: list[Node]  # topological order
    inputs: list[str]
    outputs: list[str]
    types: dict[str, TensorType]  # every value whose type is known
    constants: dict[str, np.ndarray]  # small constant initializers (copied)
    weights: set[str]  # names of large constant initializers (data not in the view)
    opsets: dict[str, int] = field(default_factory=dict)
    # By Node.index: what of the node is not valid UTF-8 (its name, op type, a value name, ...),
    # e.g. "node name 'n3_matm\\x8el'". ONNX requires UTF-8; partition leaves such nodes unclaimed.
    invalid_utf8: dict[int, list[str]] = field(default_factory=dict)

    def type_of(self, name: str) -> TensorType:
        return self.types.get(name, TensorType())

    def is_initializer(self, name: str) -> bool:
        return name in self.constants or name in self.weights

    def constant(self, name: str) -> np.ndarray | None:
        return self.constants.get(name)

    def producers(self) -> dict[str, Node]:
        return {o: n for n in self.nodes for o in n.outputs if o}

    def consumers(self) -> dict[str, list[Node]]:
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in list(n.inputs) + list(n.implicit_inputs):
                if i:
                    out.setdefault(i, []).append(n)
        return out

    # ---- builders -------------------------------------------------------------------------

    @staticmethod
    def from_native(d: dict) -> "GraphView":
        """From the dict the C++ bridge builds out of an OrtGraph (see csrc/graph_view.cc)."""
        types = {name: _type_from_native(t) for name, t in d["types"].items()}
        nodes = []
        for i, nd in enumerate(d["nodes"]):
            nodes.append(Node(
                index=i, name=nd["name"], op_type=nd["op_type"], domain=nd["domain"],
                since_version=int(nd["since_version"]), inputs=list(nd["inputs"]),
                outputs=list(nd["outputs"]), attributes=dict(nd["attributes"]),
                subgraphs={k: GraphView.from_native(g) for k, g in nd["subgraphs"].items()},
                implicit_inputs=list(nd["implicit_inputs"]),
            ))
        return GraphView(
            name=d["name"], nodes=nodes, inputs=list(d["inputs"]), outputs=list(d["outputs"]),
            types=types, constants=dict(d["constants"]), weights=set(d["weights"]),
            opsets=dict(d["opsets"]),
            invalid_utf8={i: list(nd["invalid_utf8"]) for i, nd in enumerate(d["nodes"]) if nd.get("invalid_utf8")},
        )

    @staticmethod
    def from_onnx(model, infer_shapes: bool = True, constant_nodes_as_initializers: bool = True) -> "GraphView":
        """From an onnx.ModelProto. Runs ONNX shape inference so value types match what ORT's
        graph carries for a model loaded without optimizations, and (like ORT when it loads a
        model) turns Constant nodes into initializers unless told not to."""
        import onnx

        if infer_shapes:
            try:
                model = onnx.shape_inference.infer_shapes(model, strict_mode=False)
            except Exception:  # inference is best effort; claim predicates see unknown types
                pass
        opsets = {(o.domain if o.domain != "ai.onnx" else ""): o.version for o in model.opset_import}
        return _graph_from_proto(model.graph, opsets, {}, constant_nodes_as_initializers)


# ---- order -------------------------------------------------------------------------------------

def topological_order(graph: GraphView) -> list[int]:
    """Positions (into graph.nodes) in a topological order of the value edges, implicit inputs
    included. Ties go to the lower position, so a graph already in order keeps its order. Nodes
    caught in a cycle (an invalid graph) are appended in graph order rather than dropped."""
    nodes = graph.nodes
    succs, preds = value_edges(graph)
    indegree = [len(p) for p in preds]
    ready = [pos for pos, d in enumerate(indegree) if d == 0]
    _heapq.heapify(ready)
    order: list[int] = []
    while ready:
        pos = _heapq.heappop(ready)
        order.append(pos)
        for s in succs[pos]:
            indegree[s] -= 1
            if indegree[s] == 0:
                _heapq.heappush(ready, s)
    if len(order) < len(nodes):
        placed = set(order)
        order += [pos for pos in range(len(nodes)) if pos not in placed]
    return order


def value_edges(graph: GraphView) -> tuple[list[list[int]], list[list[int]]]:
    """Successor and predecessor lists by position, deduplicated, in first-seen order."""
    producer: dict[str, int] = {}
    for pos, node in enumerate(graph.nodes):
        for o in node.outputs:
            if o:
                producer.setdefault(o, pos)
    n = len(graph.nodes)
    succs: list[list[int]] = [[] for _ in range(n)]
    preds: list[list[int]] = [[] for _ in range(n)]
    for pos, node in enumerate(graph.nodes):
        seen = set()
        for v in list(node.inputs) + list(node.implicit_inputs):
            p = producer.get(v) if v else None
            if p is None or p == pos or p in seen:
                continue
            seen.add(p)
            preds[pos].append(p)
            succs[p].append(pos)
    return succs, preds



# ---- ONNX element types ----------------------------------------------------------------------

_ELEM_NAMES = {
    0: "unknown", 1: "f32", 2: "u8", 3: "i8", 4: "u16", 5: "i16", 6: "i32", 7: "i64", 8: "string",
    9: "i1", 10: "f16", 11: "f64", 12: "u32", 13: "u64", 14: "complex64", 15: "complex128",
    16: "bf16", 17: "f8e4m3fn", 18: "f8e4m3fnuz", 19: "f8e5m2", 20: "f8e5m2fnuz", 21: "u4", 22: "i4",
    23: "f4e2m1",
}


def elem_type_name(elem_type: int) -> str:
    return _ELEM_NAMES.get(elem_type, f"elem{elem_type}")


def numpy_dtype(elem_type: int) -> np.dtype:
    """numpy dtype for an ONNX element type (raises ValueError for types numpy lacks)."""
    try:
        return numpy_dtype_for(elem_type)
    except KeyError as e:
        raise ValueError(f"element type {elem_type_name(elem_type)} has no numpy equivalent") from e


def elem_type_of(dtype) -> int:
    try:
        return elem_type_for(dtype)
    except KeyError:
        raise ValueError(f"numpy dtype {np.dtype(dtype)} has no ONNX element type") from None


def _type_from_native(t) -> TensorType:
    kind, elem, shape = t
    return TensorType(int(elem), None if shape is None else tuple(shape), kind)


def _type_from_proto(tp) -> TensorType:
    which = tp.WhichOneof("value")
    if which == "tensor_type":
        tt = tp.tensor_type
        shape = None
        if tt.HasField("shape"):
            dims: list[Dim] = []
            for d in tt.shape.dim:
                if d.HasField("dim_value"):
                    dims.append(int(d.dim_value))
                elif d.HasField("dim_param"):
                    dims.append(d.dim_param)
                else:
                    dims.append(None)
            shape = tuple(dims)
        return TensorType(tt.elem_type, shape, "tensor")
    kinds = {"sequence_type": "sequence", "map_type": "map", "optional_type": "optional",
             "sparse_tensor_type": "sparse_tensor"}
    return TensorType(0, None, kinds.get(which, "unknown"))


def _attr_value(a, opsets):
    import onnx
    from onnx import numpy_helper

    A = onnx.AttributeProto
    if a.type == A.INT:
        return int(a.i)
    if a.type == A.FLOAT:
        return float(a.f)
    if a.type == A.STRING:
        return a.s.decode("utf-8", "replace")
    if a.type == A.INTS:
        return [int(x) for x in a.ints]
    if a.type == A.FLOATS:
        return [float(x) for x in a.floats]
    if a.type == A.STRINGS:
        return [s.decode("utf-8", "replace") for s in a.strings]
    if a.type == A.TENSOR:
        return numpy_helper.to_array(a.t)
    if a.type in (A.GRAPH, A.GRAPHS):
        return None  # subgraphs are carried in Node.subgraphs
    return None


def _since_version(op_type: str, domain: str, opsets: dict[str, int]) -> int:
    import onnx.defs

    version = opsets.get(domain, opsets.get("ai.onnx", 0) if domain == "" else 0)
    try:
        return onnx.defs.get_schema(op_type, version, domain).since_version
    except Exception:
        return version


def _value_name(s) -> str:
    """A value name of an onnx proto. protobuf hands a string field that is not valid UTF-8 over as
    bytes: such a name decodes losslessly (surrogate escapes), so different names stay different
    and a value's producer and consumers still meet, as csrc/graph_view.cc decodes ORT's."""
    return s.decode("utf-8", "surrogateescape") if isinstance(s, bytes) else s


def _text(s) -> str:
    """Any other string field of an onnx proto: bytes that are not UTF-8 with \\x escapes."""
    return s.decode("utf-8", "backslashreplace") if isinstance(s, bytes) else s


def _not_utf8(n) -> list[str]:
    """What of node proto `n` is not valid UTF-8, as csrc/graph_view.cc lists it for ORT's nodes."""
    fields = [("node name", n.name), ("op type", n.op_type), ("domain", n.domain)]
    fields += [("value name", v) for v in list(n.input) + list(n.output)]
    fields += [("attribute name", a.name) for a in n.attribute]
    return list(dict.fromkeys(f"{what} '{_text(v)}'" for what, v in fields if isinstance(v, bytes)))


def _graph_from_proto(g, opsets, outer_types, fold_constants=True) -> GraphView:
    from onnx import numpy_helper

    # Values read from enclosing scopes keep the types they have there.
    types: dict[str, TensorType] = dict(outer_types)
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        types[_value_name(vi.name)] = _type_from_proto(vi.type)
    constants: dict[str, np.ndarray] = {}
    weights: set[str] = set()
    for init in g.initializer:
        name = _value_name(init.name)
        dims = tuple(int(d) for d in init.dims)
        types.setdefault(name, TensorType(init.data_type, dims))
        if int(np.prod(dims, dtype=np.int64)) <= SMALL_CONSTANT_ELEMENTS:
            constants[name] = numpy_helper.to_array(init)
        else:
            weights.add(name)
    init_names = {_value_name(i.name) for i in g.initializer}
    nodes = []
    invalid: dict[int, list[str]] = {}
    for n in g.node:
        value = _constant_node_value(n) if fold_constants else None
        if value is not None:  # ORT loads Constant nodes as initializers; so does this view
            out = _value_name(n.output[0])
            types[out] = TensorType(elem_type_of(value.dtype), tuple(value.shape))
            constants[out] = value
            init_names.add(out)
            continue
        i = len(nodes)
        subgraphs = {_text(a.name): _graph_from_proto(a.g, opsets, {**outer_types, **types}, fold_constants)
                     for a in n.attribute if a.type == a.GRAPH}
        implicit = []
        for sg in subgraphs.values():
            implicit += [v for v in _free_values(sg) if v not in implicit]
        domain = _text(n.domain)
        domain = "" if domain == "ai.onnx" else domain
        nodes.append(Node(
            index=i, name=_text(n.name), op_type=_text(n.op_type), domain=domain,
            since_version=_since_version(_text(n.op_type), domain, opsets),
            inputs=[_value_name(v) for v in n.input], outputs=[_value_name(v) for v in n.output],
            attributes={_text(a.name): _attr_value(a, opsets) for a in n.attribute},
            subgraphs=subgraphs, implicit_inputs=implicit,
        ))
        if bad := _not_utf8(n):
            invalid[i] = bad
    inputs = [_value_name(vi.name) for vi in g.input if _value_name(vi.name) not in init_names]
    return GraphView(
        name=_text(g.name), nodes=nodes, inputs=inputs, outputs=[_value_name(vi.name) for vi in g.output],
        types=types, constants=constants, weights=weights, opsets=dict(opsets), invalid_utf8=invalid,
    )


def _constant_node_value(n) -> np.ndarray | None:
    """The value of a Constant node in the default domain, or None (other nodes, sparse values)."""
    if n.op_type != "Constant" or n.domain not in ("", "ai.onnx") or len(n.attribute) != 1:
        return None
    from onnx import numpy_helper

    a = n.attribute[0]
    if a.name == "value":
        return numpy_helper.to_array(a.t)
    if a.name == "value_float":
        return np.array(a.f, np.float32)
    if a.name == "value_floats":
        return np.array(list(a.floats), np.float32)
    if a.name == "value_int":
        return np.array(a.i, np.int64)
    if a.name == "value_ints":
        return np.array(list(a.ints), np.int64)
    return None


def _free_values(g: GraphView) -> list[str]:
    """Values a subgraph reads from its enclosing scope."""
    defined = set(g.inputs) | set(g.constants) | set(g.weights)
    free: list[str] = []
    for n in g.nodes:
        for v in list(n.inputs) + list(n.implicit_inputs):
            if v and v not in defined and v not in free:
                free.append(v)
        defined.update(o for o in n.outputs if o)
    return free
