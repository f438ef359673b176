"""hip-reuse-buffers: liveness-based slot reuse, within one memory space only.

Generic: it knows nothing of host and device. Buffers (allocs) whose live ranges in program
order are disjoint may share a slot, if they are in the same memory space; `hip-assign-memory-
spaces` has already put everything the host touches in its own space, which is what makes this
safe. A live range runs from the alloc to the last use of the buffer or of any view of it; a
buffer used inside a loop or if is live across the whole region op, and a buffer defined in a
loop body is live for the whole loop (iterations reuse nothing); function results live to the
end. Scratch buffers (host scalars) keep a slot of their own.

`reuse=false` gives every buffer its own slot.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.api import Context, IntegerAttr, ModuleOp, ModulePass, Operation, func

from ..ir.buffer_ops import AllocOp, memory_space
from .buffer_effects import storage, walk


@dataclass(frozen=True)
class ReuseBuffersPass(ModulePass):
    name = "hip-reuse-buffers"
    reuse: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for f in op.ops:
            if isinstance(f, func.FuncOp):
                assign_slots(f, self.reuse)


def _spans(f: func.FuncOp) -> dict[Operation, tuple[int, int]]:
    """Program-order index range [first, last] of every op, nested ops included."""
    order = list(walk(f.body.block))
    index = {id(op): i for i, op in enumerate(order)}
    spans = {}
    for op in order:
        last = index[id(op)]
        for region in op.regions:
            for block in region.blocks:
                for inner in walk(block):
                    last = max(last, index[id(inner)])
        spans[op] = (index[id(op)], last)
    return spans


def _enclosing_loop_span(op: Operation, f: func.FuncOp, spans) -> tuple[int, int] | None:
    """The span of the outermost region op (below the function) that contains `op`."""
    outer = None
    parent = op.parent_op()
    while parent is not None and parent is not f:
        outer = parent
        parent = parent.parent_op()
    return spans[outer] if outer is not None else None


def assign_slots(f: func.FuncOp, reuse: bool = True) -> None:
    spans = _spans(f)
    end = max(s[1] for s in spans.values()) + 1 if spans else 0
    returned = {id(storage(v)) for v in f.body.block.last_op.operands} if f.body.block.last_op else set()
    live: dict[int, list] = {}  # id(alloc result) -> [alloc op, start, end]
    for op, (first, last) in spans.items():
        if isinstance(op, AllocOp):
            region_span = _enclosing_loop_span(op, f, spans)
            start, stop = region_span if region_span else (first, first)
            live[id(op.result)] = [op, start, stop]
    for op, (first, last) in spans.items():
        region_span = _enclosing_loop_span(op, f, spans)
        for v in op.operands:
            root = storage(v)
            entry = live.get(id(root))
            if entry is None:
                continue
            use_end = region_span[1] if region_span else last
            entry[2] = max(entry[2], use_end)
    for key in returned:
        if key in live:
            live[key][2] = end
    free: dict[str, list[tuple[int, int]]] = {}  # space -> [(slot, busy_until)]
    next_slot: dict[str, int] = {}
    for alloc, start, stop in sorted(live.values(), key=lambda e: (e[1], e[2])):
        space = memory_space(alloc.result.type)
        slots = free.setdefault(space, [])
        chosen = None
        if reuse and alloc.scratch is None:
            for i, (slot, busy_until) in enumerate(slots):
                if busy_until < start:
                    chosen = slot
                    slots[i] = (slot, stop)
                    break
        if chosen is None:
            chosen = next_slot.get(space, 0)
            next_slot[space] = chosen + 1
            if alloc.scratch is None:
                slots.append((chosen, stop))
        alloc.properties["slot"] = IntegerAttr(chosen, 64)
