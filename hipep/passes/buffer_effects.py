"""What each bufferized op does to memory, and who does it: the facts the late passes share.

A buffer's *storage* is the value that owns its bytes: a `hip.alloc`, a function argument (ORT's
memory) or a constant; `hip.view` results alias their source's storage. The host reads the
operands of `hip.host` ops (except inputs the registry marks extent-only: Shape's, Size's), the
host inputs of `hip.launch` ops (registry `host_inputs`: values a launch needs to be sized), loop
trip counts and conditions, and if conditions; it writes the outputs of `hip.host` ops. Device
work reads and writes the other operands of `hip.launch`.
"""
from __future__ import annotations

from collections.abc import Iterator

from ..ir.api import Block, Operation, SSAValue

from ..ir.buffer_ops import BufferIfOp, BufferLoopOp, BufferYieldOp, HostOp, LaunchOp, ViewOp
from ..ops.registry import OpDef, lookup

def registry_op(key: str) -> OpDef:
    domain, _, op_type = key.partition("::")
    op = lookup(domain, op_type)
    if op is None:
        raise KeyError(f"no registry entry for {key}")
    return op


def storage(value: SSAValue) -> SSAValue:
    """The value owning `value`'s bytes (follows hip.view chains)."""
    while isinstance(value.owner, ViewOp):
        value = value.owner.source
    return value


def positions(op: HostOp | LaunchOp, which: str) -> list[int]:
    return list((op.in_positions if which == "ins" else op.out_positions).get_values())


def host_reads(op: Operation) -> list[SSAValue]:
    """Operands whose data the host reads when it reaches `op`."""
    if isinstance(op, HostOp):
        extent_only = set(registry_op(op.op.data).extent_only_inputs)
        return [v for v, p in zip(op.ins, positions(op, "ins")) if p not in extent_only]
    if isinstance(op, LaunchOp):
        host_inputs = set(registry_op(op.op.data).host_inputs)
        return [v for v, p in zip(op.ins, positions(op, "ins")) if p in host_inputs]
    if isinstance(op, BufferLoopOp):
        return [v for v in (op.trip_count, op.cond) if v is not None]
    if isinstance(op, BufferIfOp):
        return [op.cond]
    return []


def host_writes(op: Operation) -> list[SSAValue]:
    return list(op.outs) if isinstance(op, HostOp) else []


def device_reads(op: Operation) -> list[SSAValue]:
    if not isinstance(op, LaunchOp):
        return []
    host = {id(v) for v in host_reads(op)}
    extent_only = set(registry_op(op.op.data).extent_only_inputs)
    return [v for v, p in zip(op.ins, positions(op, "ins")) if id(v) not in host and p not in extent_only]


def device_writes(op: Operation) -> list[SSAValue]:
    return list(op.outs) if isinstance(op, LaunchOp) else []


def loop_condition_yield(loop: BufferLoopOp) -> SSAValue | None:
    """The condition a loop body yields, which the host reads after every iteration; None where
    there is none, or where the body yields its condition argument as it is (a Scan's loop): the
    host wrote that value itself before the iteration and reads nothing."""
    term = loop.body.block.last_op
    if not isinstance(term, BufferYieldOp) or not len(term.values):
        return None
    args = loop.body.block.args
    return None if len(args) > 1 and term.values[0] is args[1] else term.values[0]


def walk(block: Block) -> Iterator[Operation]:
    """Every op in program order, nested regions included (pre-order)."""
    for op in block.ops:
        yield op
        for region in op.regions:
            for inner in region.blocks:
                yield from walk(inner)


def function_blocks(module) -> Iterator[Block]:
    """Every block of the module's functions: their bodies and the regions nested in them."""
    from ..ir.api import func

    for f in module.ops:
        if isinstance(f, func.FuncOp):
            yield f.body.block
            yield from (b for inner in walk(f.body.block) for r in inner.regions for b in r.blocks)
