"""The bufferized half of the hip dialect: what `hip-bufferize` produces and the later passes
(memory spaces, scalar scratch, slot reuse, syncs, plan emission) work on.

Buffers are memrefs whose memory-space attribute says where their storage lives:
`"device"` (device memory; only device ops touch it) or `"host_visible"` (memory the host can load
and store; device ops may use it too). Extents stay as the tensor types had them (dynamic ones are
sized at run time).

* `hip.alloc`   a buffer; property `slot` once `hip-reuse-buffers` assigned one, `scratch` for a
                host scalar given its own place by `hip-materialize-host-scalars`.
* `hip.view`    the same bytes as its source, another shape (Reshape, Squeeze, tensor.cast, ...).
* `hip.launch`  a device op, queued on the stream: registry op `op` on `ins`, writing `outs`.
* `hip.host`    the same, run by the host when it reaches it.
* `hip.sync`    the host waits for all queued device work; `reason` names the hazard.
"""
from __future__ import annotations

from xdsl.dialects.builtin import (DenseArrayBase, DictionaryAttr, IntegerAttr, MemRefType, StringAttr, UnitAttr,
                                   UnrankedMemRefType, i64)
from xdsl.ir import Region
from xdsl.irdl import (
    AttrSizedOperandSegments,
    ParsePropInAttrDict,
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import IsTerminator

DEVICE = "device"
HOST_VISIBLE = "host_visible"


def memory_space(t) -> str:
    """The memory space of a memref type ("device" when none is set)."""
    ms = getattr(t, "memory_space", None)
    return ms.data if isinstance(ms, StringAttr) else DEVICE


def with_memory_space(t, space: str):
    if isinstance(t, UnrankedMemRefType):
        return UnrankedMemRefType.from_type(t.element_type, StringAttr(space))
    return MemRefType(t.element_type, t.get_shape(), memory_space=StringAttr(space))


@irdl_op_definition
class AllocOp(IRDLOperation):
    name = "hip.alloc"
    result = result_def()
    value_name = opt_prop_def(StringAttr, prop_name="name")
    slot = opt_prop_def(IntegerAttr)
    scratch = opt_prop_def(UnitAttr)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self, t: MemRefType, value_name: str = ""):
        props = {"name": StringAttr(value_name)} if value_name else {}
        super().__init__(result_types=[t], properties=props)


@irdl_op_definition
class ViewOp(IRDLOperation):
    name = "hip.view"
    source = operand_def()
    result = result_def()
    assembly_format = "$source attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source, t: MemRefType):
        super().__init__(operands=[source], result_types=[t])


class _OpOnBuffers(IRDLOperation):
    op = prop_def(StringAttr)
    node = prop_def(StringAttr)
    since_version = prop_def(IntegerAttr)
    onnx = prop_def(DictionaryAttr)
    in_positions = prop_def(DenseArrayBase)  # ONNX input index each `ins` operand fills
    out_positions = prop_def(DenseArrayBase)  # ONNX output index each `outs` operand receives
    ins = var_operand_def()
    outs = var_operand_def()
    irdl_options = (AttrSizedOperandSegments(as_property=True), ParsePropInAttrDict())
    assembly_format = ("$op $node `(` $ins `)` `outs` `(` $outs `)` attr-dict "
                       "`:` `(` type($ins) `)` `->` `(` type($outs) `)`")

    def __init__(self, op: str, node: str, since_version: int, onnx: DictionaryAttr,
                 ins, in_positions, outs, out_positions):
        super().__init__(operands=[list(ins), list(outs)], properties={
            "op": StringAttr(op), "node": StringAttr(node),
            "since_version": IntegerAttr(since_version, 64), "onnx": onnx,
            "in_positions": DenseArrayBase.from_list(i64, list(in_positions)),
            "out_positions": DenseArrayBase.from_list(i64, list(out_positions))})


@irdl_op_definition
class LaunchOp(_OpOnBuffers):
    name = "hip.launch"


@irdl_op_definition
class HostOp(_OpOnBuffers):
    name = "hip.host"


@irdl_op_definition
class SyncOp(IRDLOperation):
    name = "hip.sync"
    reason = prop_def(StringAttr)
    assembly_format = "$reason attr-dict"

    def __init__(self, reason: str):
        super().__init__(properties={"reason": StringAttr(reason)})


BUFFER_OPS = [AllocOp, ViewOp, LaunchOp, HostOp, SyncOp]


@irdl_op_definition
class BufferYieldOp(IRDLOperation):
    """Ends a buffer_loop body (condition, carried values..., scan outputs...) or a buffer_if branch."""
    name = "hip.buffer_yield"
    values = var_operand_def()
    traits = traits_def(IsTerminator())

    def __init__(self, values):
        super().__init__(operands=[list(values)])


@irdl_op_definition
class BufferLoopOp(IRDLOperation):
    """ONNX Loop on buffers. Block arguments: (iteration, condition, carried values...); the
    yield gives (condition, carried values..., scan outputs...). The host reads trip_count and
    cond (and each iteration's yielded condition)."""
    name = "hip.buffer_loop"
    trip_count = opt_operand_def()
    cond = opt_operand_def()
    carried = var_operand_def()
    outputs = var_result_def()
    body = region_def("single_block")
    node = prop_def(StringAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, node: str, trip_count, cond, carried, result_types, body: Region):
        super().__init__(operands=[[trip_count] if trip_count is not None else [],
                                   [cond] if cond is not None else [], list(carried)],
                         result_types=[list(result_types)], regions=[body],
                         properties={"node": StringAttr(node)})


@irdl_op_definition
class BufferIfOp(IRDLOperation):
    """ONNX If on buffers; the host reads `cond`."""
    name = "hip.buffer_if"
    cond = operand_def()
    outputs = var_result_def()
    then_region = region_def("single_block")
    else_region = region_def("single_block")
    node = prop_def(StringAttr)

    def __init__(self, node: str, cond, result_types, then_region: Region, else_region: Region):
        super().__init__(operands=[cond], result_types=[list(result_types)],
                         regions=[then_region, else_region], properties={"node": StringAttr(node)})


BUFFER_OPS += [BufferYieldOp, BufferLoopOp, BufferIfOp]
