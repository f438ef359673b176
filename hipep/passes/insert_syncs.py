"""hip-insert-syncs: a `hip.sync` exactly where a host/device hazard needs one, nowhere else.

Device ops are queued; the host runs ahead. Walking the program in order, the pass tracks which
storage queued device work may still write and read. The host must wait (a sync, which empties
the queue) before it
  * reads what queued device work writes: a host op's input, a launch's host input (sizes), a loop
    trip count or condition (also the condition each iteration yields), an if condition;
  * writes what queued device work may still read or write: within a block, in the next loop
    iteration (a loop body is walked a second time from the state its end leaves), in reused
    host-visible scratch (another buffer of the same host-visible slot), or in the next run (the
    plan always ends with a sync: ORT reads the outputs when Compute returns).
Hazards are tracked per buffer, through views, and per slot only within the host-visible space
(the host's own scratch). Device slots that a host buffer shares are a bug that the memory
spaces rule out (`hip-assign-memory-spaces`), not something a sync should paper over.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.api import Block, Context, InsertPoint, ModuleOp, ModulePass, Operation, Rewriter, SSAValue, func

from ..ir.buffer_ops import HOST_VISIBLE, AllocOp, BufferIfOp, BufferLoopOp, BufferYieldOp, SyncOp, memory_space
from .buffer_effects import device_reads, device_writes, host_reads, host_writes, loop_condition_yield, storage, walk


@dataclass
class _Queued:
    writes: set[int] = field(default_factory=set)  # id(storage) that queued device work writes
    reads: set[int] = field(default_factory=set)
    names: dict[int, str] = field(default_factory=dict)

    def copy(self) -> "_Queued":
        return _Queued(set(self.writes), set(self.reads), dict(self.names))

    def merge(self, other: "_Queued") -> None:
        self.writes |= other.writes
        self.reads |= other.reads
        self.names.update(other.names)

    def clear(self) -> None:
        self.writes.clear()
        self.reads.clear()


def _key(v: SSAValue, q: _Queued) -> int:
    root = storage(v)
    if id(root) not in q.names:
        q.names[id(root)] = f"'{_describe(v, root)}'"
    return id(root)


def _describe(v: SSAValue, root: SSAValue) -> str:
    """The ONNX value name of a buffer (its alloc's `name`), else its IR name."""
    owner = root.owner
    if isinstance(owner, AllocOp) and owner.value_name is not None:
        return owner.value_name.data
    return v.name_hint or root.name_hint or "a buffer"


@dataclass(frozen=True)
class InsertSyncsPass(ModulePass):
    name = "hip-insert-syncs"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for f in op.ops:
            if isinstance(f, func.FuncOp):
                _Inserter(_host_visible_slot_mates(f)).block(f.body.block, _Queued())


def _host_visible_slot_mates(f: func.FuncOp) -> dict[int, list[int]]:
    """id(storage) -> ids of the other host-visible buffers in the same slot (reused scratch)."""
    by_slot: dict[int, list[int]] = {}
    for op in walk(f.body.block):
        if isinstance(op, AllocOp) and op.slot is not None and memory_space(op.result.type) == HOST_VISIBLE:
            by_slot.setdefault(op.slot.value.data, []).append(id(op.result))
    return {b: [o for o in group if o != b] for group in by_slot.values() for b in group}


class _Inserter:
    def __init__(self, slot_mates: dict[int, list[int]]):
        self.rewriter = Rewriter()
        self.slot_mates = slot_mates

    def sync_before(self, op: Operation, reason: str, q: _Queued) -> None:
        prev = op.prev_op
        if not isinstance(prev, SyncOp):
            self.rewriter.insert_op(SyncOp(reason), InsertPoint.before(op))
        q.clear()

    def host_access(self, op: Operation, reads: list[SSAValue], writes: list[SSAValue], q: _Queued,
                    what: str) -> None:
        for v in reads:
            k = _key(v, q)
            if k in q.writes:
                self.sync_before(op, f"{what} reads {q.names[k]}, written by queued device work", q)
                return
        for v in writes:
            k = _key(v, q)
            if k in q.reads or k in q.writes:
                self.sync_before(op, f"{what} writes {q.names[k]}, which queued device work may still use", q)
                return
            mate = next((m for m in self.slot_mates.get(k, ()) if m in q.reads or m in q.writes), None)
            if mate is not None:
                self.sync_before(op, f"{what} writes {q.names[k]} into host-visible scratch that queued device "
                                     f"work on {q.names.get(mate, 'another buffer')} may still use", q)
                return

    def block(self, block: Block, q: _Queued) -> _Queued:
        for op in list(block.ops):
            if isinstance(op, SyncOp):
                q.clear()
            elif isinstance(op, func.ReturnOp):
                self.sync_before(op, "end of Compute: ORT reads the outputs", q)
            elif isinstance(op, BufferYieldOp):
                parent = op.parent_op()
                cond = loop_condition_yield(parent) if isinstance(parent, BufferLoopOp) else None
                if cond is not None:
                    self.host_access(op, [cond], [], q, "the loop condition check")
            elif isinstance(op, BufferLoopOp):
                self.host_access(op, host_reads(op), [], q, f"loop '{op.node.data}'")
                body = op.body.block
                # Queued copies bind the body's arguments (the iteration number, the condition,
                # the carried values) before every iteration.
                entry = q.copy()
                entry.writes |= {_key(a, entry) for a in body.args}
                first = self.block(body, entry)
                # The next iteration starts with what the last one left queued.
                again = first.copy()
                again.writes |= {_key(a, again) for a in body.args}
                second = self.block(body, again)
                q.merge(first)
                q.merge(second)
                q.writes |= {_key(r, q) for r in op.outputs}  # final values: queued copies
            elif isinstance(op, BufferIfOp):
                self.host_access(op, host_reads(op), [], q, f"if '{op.node.data}'")
                then_q = self.block(op.then_region.block, q.copy())
                else_q = self.block(op.else_region.block, q.copy())
                q.merge(then_q)
                q.merge(else_q)
                q.writes |= {_key(r, q) for r in op.outputs}  # the branch's results: queued copies
            else:
                node = op.node.data if hasattr(op, "node") and hasattr(op.node, "data") else op.name
                self.host_access(op, host_reads(op), host_writes(op), q, f"'{node}'")
                for v in device_writes(op):
                    q.writes.add(_key(v, q))
                for v in device_reads(op):
                    q.reads.add(_key(v, q))
        return q
