"""The op registry: one entry per (domain, op_type), declaring everything hipep knows of an op.

An `OpDef` holds the schema since-versions hipep implements, type constraints (as in ONNX
schemas: each input/output position names a constraint, each constraint lists allowed element
types), the attributes it understands with their defaults, an optional extra claim predicate,
and the numpy reference kernel the CPU device runs. The partitioner claims with `check_node`,
the compiler resolves attributes with `resolve_attributes`, and the CPU device calls
`reference`, so "claimed" and "runnable" read one declaration and cannot disagree.
Plain Python: nothing here imports the compiler.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..graph import GraphView, Node, elem_type_name

# ONNX TensorProto element types used in constraints.
F32, U8, I8, U16, I16, I32, I64, STRING, BOOL, F16, F64, U32, U64 = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13
BF16 = 16
I8S = frozenset({I8})
U8S = frozenset({U8})
ALL_INTS = frozenset({I8, U8, I16, U16, I32, I64, U32, U64})
# Every element type a data-movement op (Reshape, Transpose, Gather, Concat, ...) can carry.
ANY_TENSOR = frozenset({F32, F16, F64, BOOL}) | ALL_INTS
# The same plus bf16, for the data-movement ops ONNX Runtime's CPU EP runs in bf16 (the oracle).
ANY_TENSOR_BF16 = ANY_TENSOR | {BF16}
FLOATS = frozenset({F32, F16})
# The float types of LLMs' activations: bf16 too, for the ops of bf16 decoders. ORT's CPU EP has no
# bf16 kernels for most of them; their references compute in f32 and round each result once, as
# ORT's CUDA EP does, and tests compare them with the CPU EP on the same model in f32.
LLM_FLOATS = FLOATS | {BF16}
INTS = frozenset({I32, I64})
NUMERIC = FLOATS | INTS
ALL = NUMERIC | {BOOL}

REQUIRED = object()  # attribute default marker: the attribute must be present
# Reserved key `resolve_attributes` adds: the node's number of outputs (references are told
# nothing else about the node; Split without sizes splits into that many pieces).
OUTPUT_COUNT = "_num_outputs"
# Also set by resolve_attributes: the node's schema since-version, for references whose semantics
# change between opsets in ways the attributes do not show (Softmax's coerce-to-2D before 13).
SINCE_VERSION = "_since_version"

# reference(inputs, attrs) -> outputs. Inputs are numpy arrays (None for omitted optionals),
# attrs are the node's attributes with declared defaults filled in.
Reference = Callable[[list, dict], Sequence[np.ndarray]]
# claim(node, graph, attrs) -> None to claim, or a reason string to reject.
ClaimPredicate = Callable[[Node, GraphView, dict], "str | None"]
# shape_rule(types, values, attrs, num_outputs) -> output types.
#   types: one TensorType per input position (None for an omitted optional input); dims are int
#          (static) or None (dynamic: unknown at compile time); shape None = unranked.
#   values: the input's value where known (np.ndarray), else None: constants, and at run time the
#          values of the op's host_inputs.
#   Returns one TensorType per output (num_outputs of them), as precise as the inputs allow: a
#   static extent wherever it follows, None where it does not, shape None if even the rank is
#   unknown. With fully static input shapes (and host_inputs values given) every output extent
#   must be static: the runtime sizes buffers with it before a launch.
ShapeRule = Callable[[list, list, dict, int], list]


@dataclass(frozen=True)
class OpDef:
    op_type: str
    since_versions: tuple[int, ...]
    inputs: tuple[str, ...]  # constraint name per input position ("" = not type-checked)
    outputs: tuple[str, ...]
    constraints: dict[str, frozenset[int]]
    reference: Reference
    attributes: dict[str, Any] = field(default_factory=dict)
    claim: ClaimPredicate | None = None
    domain: str = ""
    min_inputs: int | None = None  # default: all declared inputs are required
    # Positions below min_inputs that may still be omitted ("" in the node): Loop's M and cond.
    optional_inputs: tuple[int, ...] = ()
    variadic: bool = False  # the last input position repeats (Concat, Max, ...)
    shape_rule: ShapeRule | None = None
    # Input positions whose *values* the shape rule needs (Reshape's shape, Slice's bounds,
    # axes operands, ...): the host reads them before the op is issued.
    host_inputs: tuple[int, ...] = ()
    # Output 0 may share input 0's storage (same bytes, another shape): Reshape, Squeeze, ...
    view: bool = False
    # Loop/If: the node's bodies are compiled as regions and run as plan control flow.
    control_flow: bool = False
    # Input positions whose data the op never reads, only their extents (Shape, Size): such an
    # input may stay in device memory when the host runs the op.
    extent_only_inputs: tuple[int, ...] = ()
    # In-place updates: output position → input position whose memory the output may share
    # (GroupQueryAttention's present_key/value in past_key/value's max-length buffer, as
    # onnxruntime-genai binds them). Kernels must then be correct with the two aliased.
    inplace: dict = field(default_factory=dict)
    # Pointwise ops: (operands, attrs) -> the op's scalar expression (hipep.ops.pointwise: one
    # hipep.ops.pointwise.Operand per input position, None for omitted ones), or None where the
    # op's semantics for those operands do not fit one. The reference evaluates it and
    # hip-fuse-pointwise fuses chains of such ops into one kernel.
    pointwise: Callable[[list, dict], Any] | None = None
    # An ONNX function op whose entry takes some element types only (those ORT's CPU kernel has):
    # a node of other types runs through the op's function body, as an op without an entry does
    # (hipep.functions.is_function_candidate).
    body_for_other_types: bool = False
    # False where the stored output types (ONNX's shape inference, which ORT's graph carries) give
    # extents ORT's kernel does not produce: the frontend keeps their rank only and the shape rule
    # gives the extents (NonZero of a scalar: [0, n] inferred, [1, n] run).
    stored_extents: bool = True
    # Inputs the compiler needs as compile-time constants are not required here: the CPU
    # reference reads every operand at run time.

    @property
    def key(self) -> tuple[str, str]:
        return (self.domain, self.op_type)


_REGISTRY: dict[tuple[str, str], OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.key in _REGISTRY:
        raise RuntimeError(f"op {op.domain or 'ai.onnx'}::{op.op_type} registered twice")
    _REGISTRY[op.key] = op
    return op


def lookup(domain: str, op_type: str) -> OpDef | None:
    _load_families()
    return _REGISTRY.get((domain if domain != "ai.onnx" else "", op_type))


def all_ops() -> list[OpDef]:
    _load_families()
    return sorted(_REGISTRY.values(), key=lambda o: (o.domain, o.op_type))


def resolve_attributes(op: OpDef, node: Node) -> dict:
    """The node's attributes with the op's declared defaults filled in, plus OUTPUT_COUNT and
    SINCE_VERSION."""
    attrs = {}
    for name, default in op.attributes.items():
        if name in node.attributes:
            attrs[name] = node.attributes[name]
        elif default is not REQUIRED:
            attrs[name] = default
    attrs[OUTPUT_COUNT] = len(node.outputs)
    attrs[SINCE_VERSION] = node.since_version
    return attrs


def check_node(node: Node, graph: GraphView) -> str | None:
    """None if hipep can run `node`; otherwise the reason it cannot, in words."""
    op = lookup(node.domain, node.op_type)
    if node.subgraphs and (op is None or not op.control_flow):
        return (f"{node.op_type} has subgraph attributes ({', '.join(node.subgraphs)}); hipep compiles "
                f"only Loop and If bodies (its body graphs are partitioned on their own)")
    if op is None:
        return f"operator {node.qualified_op} is not implemented by hipep"
    if node.since_version not in op.since_versions:
        return (f"{node.qualified_op} opset version {node.since_version} is not implemented "
                f"(hipep implements since-versions {', '.join(map(str, op.since_versions))})")
    for name in node.attributes:
        if name not in op.attributes:
            return f"attribute '{name}' is not supported"
    for name, default in op.attributes.items():
        if default is REQUIRED and name not in node.attributes:
            return f"required attribute '{name}' is missing"
    reason = _check_arity(op, node) or check_types(op, node, graph)
    if reason:
        return reason
    if op.claim is not None:
        return op.claim(node, graph, resolve_attributes(op, node))
    return None


def _check_arity(op: OpDef, node: Node) -> str | None:
    present = len(node.inputs)
    need = op.min_inputs if op.min_inputs is not None else len(op.inputs)
    if present < need:
        return f"expects at least {need} inputs, got {present}"
    omitted = [i for i in range(need) if not node.inputs[i] and i not in op.optional_inputs]
    if omitted:
        return f"input {omitted[0]} is omitted, which the op requires"
    if not op.variadic and present > len(op.inputs):
        return f"expects at most {len(op.inputs)} inputs, got {present}"
    if len([o for o in node.outputs if o]) > len(op.outputs):
        return f"expects at most {len(op.outputs)} outputs, got {len(node.outputs)}"
    return None


def check_types(op: OpDef, node: Node, graph: GraphView) -> str | None:
    bound: dict[str, int] = {}
    positions = [("input", i, name, op.inputs[min(i, len(op.inputs) - 1)] if op.inputs else "")
                 for i, name in enumerate(node.inputs)]
    positions += [("output", i, name, op.outputs[i] if i < len(op.outputs) else "")
                  for i, name in enumerate(node.outputs)]
    for role, i, value, constraint in positions:
        if not value:
            continue
        t = graph.type_of(value)
        if t.kind != "tensor":
            return f"{role} {i} '{value}' is a {t.kind}; hipep supports tensors only"
        if not constraint:
            continue
        if t.elem_type == 0:
            return f"{role} {i} '{value}' has an unknown element type"
        allowed = op.constraints[constraint]
        if t.elem_type not in allowed:
            names = ", ".join(sorted(elem_type_name(e) for e in allowed))
            return f"{role} {i} '{value}' has element type {t.dtype_name}; supported: {names}"
        if bound.setdefault(constraint, t.elem_type) != t.elem_type:
            return (f"{role} {i} '{value}' is {t.dtype_name} but constraint {constraint} "
                    f"is already {elem_type_name(bound[constraint])}")
    return None


_LOADED = False
_LOADING = False  # the thread holding _LOAD_LOCK is importing the families (their own lookups return)
_LOAD_LOCK = threading.RLock()


def _load_families() -> None:
    """Import every op family module once; each registers its entries on import. The registry is
    marked loaded only when all are in: a thread that looks an op up meanwhile waits."""
    global _LOADED, _LOADING
    if _LOADED:
        return
    with _LOAD_LOCK:
        if _LOADED or _LOADING:
            return
        _LOADING = True
        try:
            from . import _import_families

            _import_families()
        finally:
            _LOADING = False
        _LOADED = True
