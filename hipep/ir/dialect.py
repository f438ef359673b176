"""The `hip` dialect, derived from the op registry (hipep.ops).

Every registry entry (domain, op_type) becomes one IRDL op class named `hip.<op_name>` (see
`op_name`), with
  * variadic operands `args` (the ONNX inputs that are present, in input order),
  * variadic results `outs` (the ONNX outputs that are present, in output order),
  * properties
      node          StringAttr      the ONNX node's label (name, else op type + first output)
      since_version IntegerAttr i64 the since-version of the schema ORT resolved for the node
      onnx          DictionaryAttr  the ONNX attributes as builtin attributes (`onnx_to_attr`):
                                    int -> i64 IntegerAttr, float -> f32 FloatAttr, string ->
                                    StringAttr, lists -> ArrayAttr, tensor -> dense elements
      positions     ArrayAttr       the ONNX input index each operand fills (omitted optional
                                    inputs are skipped, so operand i is input positions[i])
      result_positions (optional)   the ONNX output index of each result; present only when
                                    some output is omitted (absent: result i is output i)
  * trait Pure (tensor semantics: no memory effects).
ONNX opset forms are kept as they are (attributes stay attributes, operands stay operands); the
registry's shape rules and references understand each form.

Structural ops written by hand: hip.constant (a small dense value), hip.weight (a typed handle
to a session initializer, never its data), hip.loop, hip.if and hip.yield.

Printed form of a generated op:
    %2 = hip.add "n1"(%0, %1) {since_version = 14 : i64, onnx = {}, positions = [0 : i64, 1 : i64]}
         : (tensor<2x?xf32>, tensor<2x?xf32>) -> tensor<2x?xf32>
"""
from __future__ import annotations

import functools
import re
import threading
from typing import Any, ClassVar

import numpy as np

from xdsl.dialects.builtin import (ArrayAttr, DenseIntOrFPElementsAttr, DictionaryAttr, FloatAttr,
                                   IntegerAttr, StringAttr, f32, i64)
from xdsl.ir import Attribute, Dialect, Operation, Region, SSAValue
from xdsl.irdl import (AnyAttr, AttrSizedOperandSegments, IRDLOperation, ParamAttrConstraint,
                       ParsePropInAttrDict, VarConstraint, irdl_op_definition, lazy_traits_def,
                       operand_def, opt_operand_def, opt_prop_def, prop_def, region_def, result_def,
                       traits_def, var_operand_def, var_result_def)
from xdsl.traits import HasParent, IsTerminator, Pure, RecursiveMemoryEffect

from .. import ops as _ops
from ..ops.registry import OpDef
from .types import dense_attr, dense_value

# Small constants (at most this many elements) are held in the IR as dense attributes
# (hip.constant); larger ones never are: they stay session initializers (hip.weight handles).
MAX_DENSE_ELEMENTS = 1024

# ---- op names --------------------------------------------------------------------------------

# Words that read better joined than split at every capital.
_JOINED_WORDS = {"MatMul": "Matmul"}
# Names the hand-written structural ops use: a registry entry with that snake name gets "onnx_".
_RESERVED = frozenset({"constant", "weight", "loop", "if", "yield"})
# Domain prefixes: the default domain has none; com.microsoft is "ms."; others their own name.
_DOMAIN_PREFIX = {"": "", "ai.onnx": "", "com.microsoft": "ms."}


def snake_case(op_type: str) -> str:
    """ONNX op type -> readable snake case: a word starts at each capital that follows a lower
    case letter or digit, and at the last capital of a run of capitals followed by a lower case
    letter; "MatMul" counts as one word. MatMul -> matmul, LayerNormalization ->
    layer_normalization, ReduceSum -> reduce_sum, GreaterOrEqual -> greater_or_equal,
    MatMulNBits -> matmul_n_bits, GatherND -> gather_nd, QLinearConv -> q_linear_conv."""
    for word, joined in _JOINED_WORDS.items():
        op_type = op_type.replace(word, joined)
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", op_type)
    return s.lower()


def op_name(domain: str, op_type: str) -> str:
    """The IR name of registry entry (domain, op_type): `hip.` + domain prefix + snake case;
    reserved structural names (constant, weight, loop, if, yield) get an `onnx_` prefix, so the
    registry's Constant is hip.onnx_constant. com.microsoft::Gelu -> hip.ms.gelu."""
    prefix = _DOMAIN_PREFIX.get(domain)
    if prefix is None:
        prefix = re.sub(r"[^A-Za-z0-9_]", "_", domain) + "."
    snake = snake_case(op_type)
    if not prefix and snake in _RESERVED:
        snake = "onnx_" + snake
    return f"hip.{prefix}{snake}"


def _class_name(domain: str, op_type: str) -> str:
    prefix = "" if domain in ("", "ai.onnx") else "".join(p.capitalize() for p in re.split(r"[^A-Za-z0-9]", domain))
    return f"{prefix}{op_type}Op"


# ---- ONNX attributes <-> builtin attributes ---------------------------------------------------

def onnx_to_attr(value: Any) -> Attribute | None:
    """An ONNX attribute value (as GraphView holds it) -> a builtin attribute; None for values
    the IR does not carry (subgraphs: they become regions)."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        return IntegerAttr(int(value), i64)
    if isinstance(value, (int, np.integer)):
        return IntegerAttr(int(value), i64)
    if isinstance(value, (float, np.floating)):
        return FloatAttr(float(value), f32)
    if isinstance(value, str):
        return StringAttr(value)
    if isinstance(value, bytes):
        return StringAttr(value.decode("utf-8", "replace"))
    if isinstance(value, np.ndarray):
        return dense_attr(value)
    if isinstance(value, (list, tuple)):
        items = [onnx_to_attr(v) for v in value]
        return ArrayAttr([a for a in items if a is not None])
    raise TypeError(f"cannot represent attribute value {value!r} in the IR")


def attr_to_onnx(attr: Attribute) -> Any:
    """The inverse of `onnx_to_attr`: builtin attribute -> plain Python / numpy value."""
    if isinstance(attr, IntegerAttr):
        return int(attr.value.data)
    if isinstance(attr, FloatAttr):
        return float(attr.value.data)
    if isinstance(attr, StringAttr):
        return attr.data
    if isinstance(attr, ArrayAttr):
        return [attr_to_onnx(a) for a in attr.data]
    if isinstance(attr, DenseIntOrFPElementsAttr):
        return dense_value(attr)
    raise TypeError(f"not an ONNX attribute value: {attr}")


def _int_array(values) -> ArrayAttr:
    return ArrayAttr([IntegerAttr(int(v), i64) for v in values])


# ---- generated ops ---------------------------------------------------------------------------

class HipOnnxOp(IRDLOperation):
    """Base of every op derived from the registry (not an op itself)."""

    REGISTRY_KEY: ClassVar[tuple[str, str]]

    args = var_operand_def()
    outs = var_result_def()
    node = prop_def(StringAttr)
    since_version = prop_def(IntegerAttr)
    onnx = prop_def(DictionaryAttr)
    positions = prop_def(ArrayAttr)
    result_positions = opt_prop_def(ArrayAttr)

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$node `(` $args `)` attr-dict `:` functional-type($args, $outs)"

    @classmethod
    def make(cls, operands, result_types, node: str, since_version: int, onnx: dict | None = None,
              positions=None, result_positions=None):
        """A new op. `onnx` maps names to ONNX attribute values (plain Python/numpy) or builtin
        attributes; `positions` defaults to 0..n-1; `result_positions` is only stored when it is
        not 0..m-1."""
        attrs = {}
        for k, v in (onnx or {}).items():
            a = v if isinstance(v, Attribute) else onnx_to_attr(v)
            if a is not None:
                attrs[k] = a
        operands = list(operands)
        result_types = list(result_types)
        props: dict[str, Attribute] = {
            "node": StringAttr(node),
            "since_version": IntegerAttr(int(since_version), i64),
            "onnx": DictionaryAttr(attrs),
            "positions": _int_array(range(len(operands)) if positions is None else positions),
        }
        if result_positions is not None and list(result_positions) != list(range(len(result_types))):
            props["result_positions"] = _int_array(result_positions)
        return cls(operands=[operands], result_types=[result_types], properties=props)

    @property
    def label(self) -> str:
        return self.node.data

    @property
    def op_def(self) -> OpDef | None:
        """The registry entry (looked up each time: the registry is the one truth)."""
        return _ops.lookup(*self.REGISTRY_KEY)

    def onnx_attributes(self) -> dict[str, Any]:
        """The node's ONNX attributes as plain Python/numpy values."""
        return {k: attr_to_onnx(v) for k, v in self.onnx.data.items()}

    def resolved_attributes(self) -> dict[str, Any]:
        """Like registry.resolve_attributes: the op's declared attributes, defaults filled in."""
        from ..ops.registry import REQUIRED

        op = self.op_def
        given = self.onnx_attributes()
        if op is None:
            return given
        out = {}
        for name, default in op.attributes.items():
            if name in given:
                out[name] = given[name]
            elif default is not REQUIRED:
                out[name] = default
        return out

    def operand_positions(self) -> list[int]:
        return [int(a.value.data) for a in self.positions.data]

    def output_positions(self) -> list[int]:
        rp = self.result_positions
        if rp is None:
            return list(range(len(self.results)))
        return [int(a.value.data) for a in rp.data]

    def operand_at(self, position: int) -> SSAValue | None:
        """The operand filling ONNX input `position`, or None if that input is omitted."""
        for i, p in enumerate(self.operand_positions()):
            if p == position:
                return self.operands[i]
        return None


def _make_op_class(op: OpDef) -> type[HipOnnxOp]:
    ns = {
        "name": op_name(op.domain, op.op_type),
        "REGISTRY_KEY": op.key,
        "__annotations__": {"REGISTRY_KEY": "ClassVar[tuple[str, str]]"},
        "__module__": __name__,
        "__qualname__": _class_name(op.domain, op.op_type),
        "__doc__": f"{op.domain or 'ai.onnx'}::{op.op_type} (since-versions "
                   f"{', '.join(map(str, op.since_versions))}), derived from the op registry.",
    }
    return irdl_op_definition(type(ns["__qualname__"], (HipOnnxOp,), ns))


# ---- structural ops --------------------------------------------------------------------------

@irdl_op_definition
class ConstantOp(IRDLOperation):
    """A small constant (at most MAX_DENSE_ELEMENTS elements): `%c = hip.constant dense<[1, 2]> :
    tensor<2xi64>`. Its result type is the value's type."""

    name = "hip.constant"
    _T: ClassVar = VarConstraint("T", AnyAttr())
    result = result_def(_T)
    value = prop_def(ParamAttrConstraint(DenseIntOrFPElementsAttr, (_T, AnyAttr())))

    traits = traits_def(Pure())
    assembly_format = "attr-dict $value"

    def __init__(self, value: DenseIntOrFPElementsAttr | np.ndarray):
        if not isinstance(value, DenseIntOrFPElementsAttr):
            value = dense_attr(np.asarray(value))
        super().__init__(result_types=[value.type], properties={"value": value})

    def numpy(self) -> np.ndarray | None:
        return dense_value(self.value)


@irdl_op_definition
class WeightOp(IRDLOperation):
    """A typed handle to the session's initializer `name` (its data never enters the IR):
    `%w = hip.weight "w0" : tensor<4096x4096xf16>`."""

    name = "hip.weight"
    weight_name = prop_def(StringAttr, prop_name="name")
    result = result_def()

    traits = traits_def(Pure())
    assembly_format = "$name attr-dict `:` type($result)"

    def __init__(self, name: str, result_type: Attribute):
        super().__init__(result_types=[result_type], properties={"name": StringAttr(name)})


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Terminator of hip.loop and hip.if bodies."""

    name = "hip.yield"
    args = var_operand_def()

    traits = lazy_traits_def(lambda: (IsTerminator(), HasParent(LoopOp, IfOp), Pure()))
    assembly_format = "attr-dict ($args^ `:` type($args))?"

    def __init__(self, *args: SSAValue | Operation):
        super().__init__(operands=[list(args)])


@irdl_op_definition
class LoopOp(IRDLOperation):
    """ONNX Loop. Operands: optional trip_count (tensor<i64>), optional cond (tensor<i1>),
    v_init (loop-carried initial values). One single-block region whose arguments are
    (iteration: tensor<i64>, cond: tensor<i1>, carried values...) and whose hip.yield yields
    (cond, carried values..., scan outputs...). Results: final carried values (their types always
    equal the v_init types), then scan outputs (per-iteration values stacked on a new axis 0).
    Outer-scope values are referenced directly from the body."""

    name = "hip.loop"
    REGISTRY_KEY: ClassVar[tuple[str, str]] = ("", "Loop")

    trip_count = opt_operand_def()
    cond = opt_operand_def()
    v_init = var_operand_def()
    outs = var_result_def()
    body = region_def("single_block")
    node = prop_def(StringAttr)
    since_version = prop_def(IntegerAttr)

    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    traits = traits_def(RecursiveMemoryEffect())

    def __init__(self, trip_count: SSAValue | None, cond: SSAValue | None, v_init, result_types,
                 body: Region, node: str, since_version: int):
        super().__init__(
            operands=[[trip_count] if trip_count is not None else [],
                      [cond] if cond is not None else [], list(v_init)],
            result_types=[list(result_types)], regions=[body],
            properties={"node": StringAttr(node), "since_version": IntegerAttr(since_version, i64)})

    @property
    def label(self) -> str:
        return self.node.data

    @property
    def num_carried(self) -> int:
        return len(self.v_init)

    def verify_(self) -> None:
        from xdsl.utils.exceptions import VerifyException

        block = self.body.block
        n = len(self.v_init)
        if len(block.args) != 2 + n:
            raise VerifyException(f"hip.loop body takes {2 + n} arguments (iteration, cond and "
                                  f"{n} carried values), got {len(block.args)}")
        if len(self.outs) < n:
            raise VerifyException(f"hip.loop has {n} carried values but only {len(self.outs)} results")
        last = block.last_op
        if isinstance(last, YieldOp) and len(last.args) != 1 + len(self.outs):
            raise VerifyException(f"hip.loop body yields {len(last.args)} values; expected "
                                  f"{1 + len(self.outs)} (cond, carried values, scan outputs)")


@irdl_op_definition
class IfOp(IRDLOperation):
    """ONNX If: operand cond (tensor<i1>), then/else single-block regions ending in hip.yield,
    results (the yielded values of the branch taken)."""

    name = "hip.if"
    REGISTRY_KEY: ClassVar[tuple[str, str]] = ("", "If")

    cond = operand_def()
    outs = var_result_def()
    then_region = region_def("single_block")
    else_region = region_def("single_block")
    node = prop_def(StringAttr)
    since_version = prop_def(IntegerAttr)

    traits = traits_def(RecursiveMemoryEffect())

    def __init__(self, cond: SSAValue, result_types, then_region: Region, else_region: Region,
                 node: str, since_version: int):
        super().__init__(
            operands=[cond], result_types=[list(result_types)], regions=[then_region, else_region],
            properties={"node": StringAttr(node), "since_version": IntegerAttr(since_version, i64)})

    @property
    def label(self) -> str:
        return self.node.data


# ---- the dialect -----------------------------------------------------------------------------

# Structural ops hip.loop / hip.if stand for ONNX Loop / If (whether or not the registry has them).
_STRUCTURAL = {LoopOp.REGISTRY_KEY: LoopOp, IfOp.REGISTRY_KEY: IfOp}
STRUCTURAL_OPS = (ConstantOp, WeightOp, YieldOp, LoopOp, IfOp)
# (domain, op_type) -> generated op class, made on first use: a compile needs the classes of its
# model's ops only, and all ~200 of them cost ~3 MiB that every serving process would hold. The
# whole dialect (all classes) is built when text IR is parsed (hipep-opt, lit, parse_ir).
_REGISTRY_OPS: dict[tuple[str, str], type[HipOnnxOp]] = {}
_CLASS_LOCK = threading.Lock()


def _registry_op_class(key: tuple[str, str]) -> type[HipOnnxOp] | None:
    cls = _REGISTRY_OPS.get(key)
    if cls is not None or key in _STRUCTURAL:
        return cls
    op = _ops.lookup(*key)
    if op is None:
        return None
    with _CLASS_LOCK:
        cls = _REGISTRY_OPS.get(key)
        if cls is None:
            cls = _REGISTRY_OPS[key] = _make_op_class(op)
    return cls


def registry_op_classes() -> dict[tuple[str, str], type[HipOnnxOp]]:
    """Every registry entry's op class (Loop and If excepted), by registry key. Two keys mapping
    to one op name would make parsing ambiguous: that is an error."""
    classes: dict[tuple[str, str], type[HipOnnxOp]] = {}
    names: dict[str, tuple[str, str]] = {}
    for op in _ops.all_ops():
        if op.key in _STRUCTURAL:  # Loop / If are hip.loop / hip.if (regions, not attributes)
            continue
        cls = _registry_op_class(op.key)
        if cls.name in names:
            raise RuntimeError(f"op name {cls.name} is derived from both {names[cls.name]} and {op.key}")
        names[cls.name] = op.key
        classes[op.key] = cls
    return classes


@functools.cache
def hip_dialect() -> Dialect:
    """The whole hip dialect: structural, registry-derived and bufferized ops."""
    from .buffer_ops import BUFFER_OPS  # the bufferized half of the dialect

    ops = [*STRUCTURAL_OPS, *registry_op_classes().values(), *BUFFER_OPS]
    seen: dict[str, type] = {}
    for op in ops:
        if op.name in seen and seen[op.name] is not op:
            raise RuntimeError(f"two op classes are named {op.name}: {seen[op.name]} and {op}")
        seen[op.name] = op
    return Dialect("hip", list(seen.values()), [])


def __getattr__(name: str):
    if name == "HipDialect":
        return hip_dialect()
    if name == "REGISTRY_OPS":
        return registry_op_classes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def op_class_for(domain: str, op_type: str) -> type[IRDLOperation] | None:
    """The op class for ONNX (domain, op_type): hip.loop / hip.if for Loop / If, else the class
    derived from the registry entry; None if hipep has no such op."""
    key = ("" if domain == "ai.onnx" else domain, op_type)
    return _STRUCTURAL.get(key) or _registry_op_class(key)


def registry_key_of(op: Operation) -> tuple[str, str] | None:
    """The registry key (domain, op_type) an op stands for; None for ops that stand for no ONNX
    op (hip.constant, hip.weight, hip.yield, other dialects)."""
    return getattr(type(op), "REGISTRY_KEY", None)
