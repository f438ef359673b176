"""hip-fuse-pointwise: chains and DAGs of pointwise launches become one fused launch.

Runs on the bufferized IR, right after hip-bufferize. A launch is pointwise when its registry op
declares a scalar expression for its operands (`OpDef.pointwise`, hipep.ops.pointwise). Within a
block, a group grows backwards from a pointwise launch (its root) over the producers of its
operands: a pointwise launch joins when every other reader of its result is already in the group
and reads it as a broadcasting operand (so the result is an intermediate no one else sees: not a
function or region result, not viewed, not read by the host). A group of two or more launches
becomes one `hip.launch "hipep::FusedElementwise"` at the root's place, writing the root's
buffer; the other launches and the buffers of the intermediates disappear, so they never get a
slot. Host steps never join (shape arithmetic stays on the host). Each group has one result: a
value also read outside is the boundary of the group that made it.

The fused expression inlines each op's expression as it is, so every intermediate is rounded to
its ONNX type exactly where the op alone would round it: results are bit-identical to running
the ops one by one. A small constant operand (one element, not raising the output's rank) becomes
an expression constant (`fold_constants`; off, it stays an operand of the fused launch).

The fused launch's attributes (plain data, see hipep.ops.elementwise): `nodes`, `outputs`,
`broadcast` (the expression), `input_dtypes`, `output_dtypes` and `covers` (the labels of the
nodes it replaces); its label is `fused[<covers>]`, so plan listings show what each kernel covers.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.api import (ArrayAttr, Block, Context, DictionaryAttr, IntegerAttr, MemRefType, ModuleOp, ModulePass,
                      SSAValue, StringAttr, TensorType)
from ..ir.buffer_ops import AllocOp, LaunchOp
from ..ir.dialect import ConstantOp
from ..ir.types import onnx_elem_type
from ..graph import numpy_dtype
from ..ops.elementwise import FUSED_DOMAIN, FUSED_ELEMENTWISE
from ..ops.pointwise import Builder, Expr, Operand
from ..ops.registry import OUTPUT_COUNT, REQUIRED, SINCE_VERSION
from .buffer_effects import function_blocks, positions, registry_op
from .emit_plan import attribute_value

FUSED_KEY = f"{FUSED_DOMAIN}::{FUSED_ELEMENTWISE}"


@dataclass(frozen=True)
class FusePointwisePass(ModulePass):
    name = "hip-fuse-pointwise"
    fold_constants: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for block in list(function_blocks(op)):
            _fuse_block(block, self.fold_constants)


@dataclass
class _Pointwise:
    """A pointwise launch: its expression and its operands by ONNX input position."""
    op: LaunchOp
    expr: Expr
    operands: list[SSAValue | None]
    out: SSAValue
    covers: list[str]

    def reads_broadcasting(self, v: SSAValue) -> bool:
        """Whether every read of `v` by this launch is a broadcasting operand of its expression."""
        return all(p in self.expr.broadcast for p, w in enumerate(self.operands) if w is v)


def _dtype(v: SSAValue) -> np.dtype | None:
    try:
        return numpy_dtype(onnx_elem_type(v.type.element_type))
    except Exception:
        return None


def _shape(v: SSAValue) -> tuple[int, ...] | None:
    """The extents (-1 for dynamic ones), None when unranked."""
    if isinstance(v.type, (MemRefType, TensorType)):
        return tuple(v.type.get_shape())
    return None


def _constant(v: SSAValue) -> np.ndarray | None:
    return v.owner.numpy() if isinstance(v.owner, ConstantOp) else None


def _operand(v: SSAValue | None) -> Operand | None:
    if v is None:
        return None
    value = _constant(v)
    if value is not None:
        return Operand(value.dtype, value, int(value.size))
    shape = _shape(v)
    size = int(np.prod(shape, dtype=np.int64)) if shape is not None and all(d >= 0 for d in shape) else None
    return Operand(_dtype(v), None, size)


def _attributes(op: LaunchOp, opdef) -> dict:
    """The launch's resolved attributes, as its reference sees them in a plan."""
    attrs = {k: attribute_value(v) for k, v in op.onnx.data.items()}
    for k, default in opdef.attributes.items():
        if k not in attrs and default is not REQUIRED:
            attrs[k] = default
    attrs[OUTPUT_COUNT] = 1
    attrs[SINCE_VERSION] = int(op.since_version.value.data)
    return attrs


def _pointwise(op) -> _Pointwise | None:
    if not isinstance(op, LaunchOp) or len(op.outs) != 1 or positions(op, "outs") != [0]:
        return None
    try:
        opdef = registry_op(op.op.data)
    except KeyError:
        return None
    if opdef.pointwise is None:
        return None
    ins = positions(op, "ins")
    operands: list[SSAValue | None] = [None] * (max(ins, default=-1) + 1)
    for v, p in zip(op.ins, ins):
        operands[p] = v
    infos = [_operand(v) for v in operands]
    if any(i is not None and i.dtype is None for i in infos):
        return None
    attrs = _attributes(op, opdef)
    try:
        expr = opdef.pointwise(infos, attrs)
    except Exception:  # operands the op's expression does not cover: the launch stays as it is
        return None
    out = op.outs[0]
    if expr is None or len(expr.outputs) != 1 or expr.dtype_of(expr.outputs[0]) != getattr(_dtype(out), "name", None):
        return None
    covers = list(attrs.get("covers", [])) if op.op.data == FUSED_KEY else [op.node.data]
    return _Pointwise(op, expr, operands, out, covers)


def _fuse_block(block: Block, fold_constants: bool) -> None:
    candidates = [p for p in (_pointwise(op) for op in block.ops) if p is not None]
    if len(candidates) < 2:
        return
    producer = {id(p.out): p for p in candidates}
    assigned: set[int] = set()
    groups: list[list[_Pointwise]] = []
    for root in reversed(candidates):
        if id(root.op) in assigned:
            continue
        group, members = [root], {id(root.op): root}
        # Producers are looked at when a reader joins; one with readers still outside waits until
        # the group stops growing, then is looked at again (a diamond's other arm may have joined).
        pending, waiting = [root], {}
        while pending:
            while pending:
                for v in pending.pop().operands:
                    p = producer.get(id(v)) if v is not None else None
                    if p is None or id(p.op) in assigned or id(p.op) in members:
                        continue
                    if _only_read_in(p, members):
                        group.append(p)
                        members[id(p.op)] = p
                        pending.append(p)
                        waiting.pop(id(p.op), None)
                    else:
                        waiting[id(p.op)] = p
            for key, p in list(waiting.items()):
                if _only_read_in(p, members):
                    del waiting[key]
                    group.append(p)
                    members[key] = p
                    pending.append(p)
        assigned.update(members)
        if len(group) >= 2:
            groups.append(group)
    order = {id(op): i for i, op in enumerate(block.ops)}
    for group in groups:
        _rewrite(block, sorted(group, key=lambda m: order[id(m.op)]), fold_constants)


def _only_read_in(p: _Pointwise, members: dict[int, _Pointwise]) -> bool:
    """Whether p's result is read by group members only, each reading it as a broadcasting
    operand, and nothing else touches its buffer."""
    v = p.out
    if not isinstance(v.owner, AllocOp):
        return False
    readers = [use.operation for use in v.uses if use.operation is not p.op]
    if not readers:
        return False
    for r in readers:
        m = members.get(id(r))
        if m is None or any(v is w for w in m.op.outs) or not m.reads_broadcasting(v):
            return False
    return True


def _rewrite(block: Block, group: list[_Pointwise], fold_constants: bool) -> None:
    root = group[-1]
    made = {id(m.out) for m in group[:-1]}

    def foldable(v: SSAValue) -> bool:
        value = _constant(v)
        return fold_constants and value is not None and value.size == 1

    # A one-element constant may become an expression constant where it cannot change the output
    # shape: read as a scalar, rank 0, or a rank the other broadcasting operands reach anyway.
    ranks = [_shape(v) for m in group for p, v in enumerate(m.operands)
             if v is not None and id(v) not in made and p in m.expr.broadcast and not foldable(v)]
    reach = None if any(s is None for s in ranks) else max((len(s) for s in ranks), default=0)

    b = Builder()
    node_of: dict[int, object] = {}
    inputs: list[SSAValue] = []
    index: dict[int, int] = {}
    broadcast: set[int] = set()
    step_of: dict[int, int] = {}
    steps = []  # per launch: label, op type, its broadcasting operands (see hipep.ops.elementwise)
    for m in group:
        read = {n[2] for n in m.expr.nodes if n[0] in ("in", "scalar")}
        args, shaping = [], []
        for p, v in enumerate(m.operands):
            broadcasting = p in m.expr.broadcast
            if v is None or (not broadcasting and p not in read):
                args.append(None)
            elif id(v) in node_of:
                args.append(node_of[id(v)])
                shaping.append(-step_of[id(v)] - 1)
            elif foldable(v) and (not broadcasting or _constant(v).ndim == 0 or
                                  (reach is not None and _constant(v).ndim <= reach)):
                value = _constant(v)
                args.append(b.const(value.reshape(-1)[0], value.dtype))
            else:
                if id(v) not in index:
                    index[id(v)] = len(inputs)
                    inputs.append(v)
                k = index[id(v)]
                if broadcasting:
                    broadcast.add(k)
                    args.append(b.input(k, _dtype(v)))
                    shaping.append(k)
                else:
                    args.append(b.scalar_input(k, _dtype(v)))
        (node_of[id(m.out)],) = b.inline(m.expr, args)
        step_of[id(m.out)] = len(steps)
        steps.append([m.op.node.data, m.op.op.data.rpartition("::")[2], *shaping])
    expr = b.pruned([node_of[id(root.out)]], sorted(broadcast))
    covers = [label for m in group for label in m.covers]
    attrs = {
        **expression_attributes(expr, [_dtype(v) for v in inputs], _dtype(root.out), covers),
        "steps": ArrayAttr([ArrayAttr([StringAttr(s[0]), StringAttr(s[1]), *[IntegerAttr(r, 64) for r in s[2:]]])
                            for s in steps]),
    }
    fused = LaunchOp(FUSED_KEY, f"fused[{', '.join(covers)}]", 1, DictionaryAttr(attrs),
                     inputs, range(len(inputs)), [root.out], [0])
    block.insert_op_before(fused, root.op)
    for m in reversed(group):
        block.erase_op(m.op)
    for m in group[:-1]:
        block.erase_op(m.out.owner)


def expression_attributes(expr: Expr, input_dtypes, output_dtype, covers) -> dict:
    """A fused program as launch attributes (plain data, see hipep.ops.elementwise): `nodes`,
    `outputs`, `broadcast`, `input_dtypes`, `output_dtypes` and `covers`."""
    return {
        "nodes": ArrayAttr([ArrayAttr([StringAttr(n[0]), StringAttr(n[1]),
                                       *[IntegerAttr(a, 64) if isinstance(a, int) else StringAttr(a) for a in n[2:]]])
                            for n in expr.nodes]),
        "outputs": ArrayAttr([IntegerAttr(o, 64) for o in expr.outputs]),
        "broadcast": ArrayAttr([IntegerAttr(k, 64) for k in expr.broadcast]),
        "input_dtypes": ArrayAttr([StringAttr(np.dtype(d).name) for d in input_dtypes]),
        "output_dtypes": ArrayAttr([StringAttr(np.dtype(output_dtype).name)]),
        "covers": ArrayAttr([StringAttr(c) for c in covers]),
    }
