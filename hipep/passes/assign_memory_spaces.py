"""hip-assign-memory-spaces: every buffer the host loads or stores lives in host-visible memory.

The late, backend-specific half of host-buffer safety. Device ops are queued; host steps run when
the host reaches them, possibly before earlier device work ran. A buffer the host touches must
therefore never share storage with a device buffer whose lifetime merely looks over in op order:
this pass gives every such buffer — and every alias of it, through views — the `host_visible`
memory space, and `hip-reuse-buffers` (generic, no host/device knowledge of its own) only shares
slots within one memory space. A function argument (ORT's memory) the host must read is first
copied into a host-visible buffer by a device copy.

Function results are ORT's memory too: the executor computes a result that owns its buffer
straight into ORT's output tensor, which on a GPU is device memory. A result the host reads
(shape arithmetic that is also a subgraph output, read again by later host work) therefore stays
a host-visible buffer of the plan's own, and a device copy of it at the end is the result.

`host_rule=false` switches the rule off: FOR TESTS ONLY (it recreates the field bug).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.api import (BlockArgument, Context, DictionaryAttr, FunctionType, InsertPoint, MemRefType, ModuleOp, ModulePass,
                      Rewriter, SSAValue, func)

from ..ir.buffer_ops import DEVICE, HOST_VISIBLE, AllocOp, BufferLoopOp, LaunchOp, ViewOp, memory_space, with_memory_space
from .buffer_effects import host_reads, host_writes, loop_condition_yield, storage, walk


@dataclass(frozen=True)
class AssignMemorySpacesPass(ModulePass):
    name = "hip-assign-memory-spaces"
    host_rule: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not self.host_rule:
            return
        for f in op.ops:
            if isinstance(f, func.FuncOp):
                _assign(f)


def _host_touched(f: func.FuncOp) -> list[SSAValue]:
    touched: list[SSAValue] = []
    for op in walk(f.body.block):
        touched += host_reads(op) + host_writes(op)
        if isinstance(op, BufferLoopOp):
            cond = loop_condition_yield(op)
            if cond is not None:
                touched.append(cond)
    return touched


def _assign(f: func.FuncOp) -> None:
    rewriter = Rewriter()
    # Storage owners (allocs) the host touches, through any alias.
    owners: dict[int, SSAValue] = {}
    copied: set[int] = set()
    for v in _host_touched(f):
        root = storage(v)
        if isinstance(root, BlockArgument) and isinstance(root.owner.parent_op(), func.FuncOp):
            if id(v) not in copied:
                copied.add(id(v))
                _copy_argument_for_host(f, v, rewriter)
            continue
        if isinstance(root.owner, AllocOp):
            owners[id(root)] = root
    for root in owners.values():
        _move_to_host_visible(root, rewriter)
    read = {id(storage(v)) for op in walk(f.body.block) for v in host_reads(op)}
    _copy_results_the_host_reads(f, read, rewriter)


def _move_to_host_visible(root: SSAValue, rewriter: Rewriter) -> None:
    """Gives `root` and every view of it (transitively) the host-visible space."""
    pending = [root]
    while pending:
        v = pending.pop()
        if not isinstance(v.type, MemRefType) or memory_space(v.type) == HOST_VISIBLE:
            views = [u.operation for u in v.uses if isinstance(u.operation, ViewOp)]
        else:
            v = rewriter.replace_value_with_new_type(v, with_memory_space(v.type, HOST_VISIBLE))
            views = [u.operation for u in v.uses if isinstance(u.operation, ViewOp)]
        pending += [view.result for view in views]


def _copy_results_the_host_reads(f: func.FuncOp, read: set[int], rewriter: Rewriter) -> None:
    """A result whose storage the host reads gets a device buffer of its own, filled by a device
    copy just before the return: ORT's output memory is never where host work reads."""
    ret = f.body.block.last_op
    if not isinstance(ret, func.ReturnOp):
        return
    copies: dict[int, SSAValue] = {}
    for k, v in enumerate(list(ret.operands)):
        if not isinstance(v.owner, AllocOp) or id(v) not in read:
            continue
        copy = copies.get(id(v))
        if copy is None:
            name = v.owner.value_name.data if v.owner.value_name is not None else "result"
            alloc = AllocOp(with_memory_space(v.type, DEVICE), name)
            launch = LaunchOp("::Identity", f"result copy of {name}", 16, DictionaryAttr({}), [v], [0],
                              [alloc.result], [0])
            rewriter.insert_op([alloc, launch], InsertPoint.before(ret))
            copy = copies[id(v)] = alloc.result
        ret.operands[k] = copy
    # The signature says where each result lives (results only the host writes are host-visible).
    f.function_type = FunctionType.from_lists(list(f.function_type.inputs.data), [v.type for v in ret.operands])


def _copy_argument_for_host(f: func.FuncOp, use: SSAValue, rewriter: Rewriter) -> None:
    """The host cannot touch ORT's (device) memory: a device copy into a host-visible buffer
    takes its place for every host use of `use`."""
    t = use.type
    copy = AllocOp(with_memory_space(t, HOST_VISIBLE), "host copy")
    launch = LaunchOp("::Identity", "host copy", 16, DictionaryAttr({}), [use], [0], [copy.result], [0])
    anchor = use.owner if not isinstance(use, BlockArgument) else None
    where = InsertPoint.after(anchor) if anchor is not None else InsertPoint.at_start(f.body.block)
    rewriter.insert_op([copy, launch], where)
    for u in list(use.uses):
        user = u.operation
        if user is launch:
            continue
        if any(r is use for r in host_reads(user)):
            user.operands[u.index] = copy.result
