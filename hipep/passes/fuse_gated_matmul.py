"""hip-fuse-gated-matmul: two MatMulNBits of one A joined by a pointwise launch become one launch.

A gated MLP (Llama's, Qwen's, Gemma's) computes gate = A @ W_gate and up = A @ W_up, both int4
MatMulNBits of the same normalized hidden state, then act(gate) * up -- after hip-fuse-pointwise one
`hipep::FusedElementwise` launch of the two. In decoding each is a GEMV streaming its weights, and
the pointwise launch a third kernel: three launches and two intermediates written and read back. This
pass makes them one `hip.launch "hipep::GatedMatMulNBits"` (hipep.ops.contrib_quant): on a GPU one
kernel reads both weights' columns for an output, stages A once and writes only act(gate) * up.

Runs on the bufferized IR after hip-fuse-pointwise. A pointwise launch P joins two launches when:
  * P's operands are exactly two buffers, each read as a broadcasting operand of P's program, of
    P's result shape (no constants beyond the ones folded into the program);
  * each is the result of a com.microsoft::MatMulNBits launch in P's block, with the same A, the
    same attributes (K, N, bits, block_size, accuracy_level; not prepacked), and neither g_idx nor
    bias;
  * each result's only reader is P (no view, no host read, not a function result), and no launch
    between the first MatMulNBits and P writes A or the weights (reading them later is the same).
The new launch takes P's place and P's result buffer; the three launches and the two intermediate
buffers disappear. Its program is P's with input 0 the first MatMulNBits' result (in block order)
and input 1 the second's. The reference computes the three steps as the nodes would: results are
bit-identical to the unfused plan. Left out with the option `fusion=off`, as hip-fuse-pointwise is.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.api import Block, Context, DictionaryAttr, IntegerAttr, ModuleOp, ModulePass, SSAValue
from ..ir.buffer_ops import AllocOp, LaunchOp
from ..ops.contrib_quant import GATED_MATMUL_NBITS, MNB_ATTRIBUTES
from ..ops.pointwise import Builder
from .buffer_effects import device_writes, function_blocks, host_writes, positions, registry_op, storage
from .fuse_pointwise import _attributes, _dtype, _pointwise, _shape, expression_attributes

MNB_KEY = "com.microsoft::MatMulNBits"
GATED_KEY = f"hipep::{GATED_MATMUL_NBITS}"


@dataclass(frozen=True)
class FuseGatedMatMulPass(ModulePass):
    name = "hip-fuse-gated-matmul"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for block in list(function_blocks(op)):
            for p in [p for p in (_pointwise(o) for o in list(block.ops)) if p is not None]:
                _fuse(block, p)


def _writer(v: SSAValue) -> LaunchOp | None:
    """The MatMulNBits launch whose only output is `v`, where `v` is a buffer of its own that the
    launch writes and one other op reads."""
    if not isinstance(v.owner, AllocOp):
        return None
    users = list({id(use.operation): use.operation for use in v.uses}.values())
    writers = [u for u in users if isinstance(u, LaunchOp) and any(w is v for w in u.outs)]
    if len(writers) != 1 or len(users) != 2:
        return None
    m = writers[0]
    if m.op.data != MNB_KEY or len(m.outs) != 1 or not set(positions(m, "ins")) <= {0, 1, 2, 3}:
        return None
    return m


def _mnb_attributes(m: LaunchOp) -> tuple | None:
    attrs = _attributes(m, registry_op(MNB_KEY))
    if int(attrs.get("weight_prepacked", 0)) != 0:
        return None
    return tuple(int(attrs[k]) for k in MNB_ATTRIBUTES)


def _inputs(m: LaunchOp) -> dict[int, SSAValue]:
    return dict(zip(positions(m, "ins"), m.ins))


def _fuse(block: Block, p) -> None:
    present = [(k, v) for k, v in enumerate(p.operands) if v is not None]
    values = {id(v): v for _, v in present}
    if len(values) != 2 or any(k not in p.expr.broadcast for k, _ in present):
        return
    out_shape = _shape(p.out)
    if out_shape is None or any(_shape(v) != out_shape for v in values.values()):
        return
    mnbs = [_writer(v) for v in values.values()]
    if any(m is None or m.parent_block() is not block for m in mnbs):
        return
    order = {id(o): i for i, o in enumerate(block.ops)}
    mnbs.sort(key=lambda m: order[id(m)])
    first, second = mnbs
    ins = [_inputs(m) for m in mnbs]
    attrs = [_mnb_attributes(m) for m in mnbs]
    if attrs[0] is None or attrs[0] != attrs[1] or ins[0][0] is not ins[1][0]:
        return
    if _dtype(first.outs[0]) != _dtype(second.outs[0]):
        return
    # The fused launch reads A and the weights where P is: nothing between may write them.
    read = {id(storage(v)) for d in ins for v in d.values()}
    for o in list(block.ops)[order[id(first)]:order[id(p.op)]]:
        if any(id(storage(v)) in read for v in device_writes(o) + host_writes(o)):
            return

    # P's program with input 0 the first MatMulNBits' result and input 1 the second's.
    which = {id(first.outs[0]): 0, id(second.outs[0]): 1}
    b = Builder()
    dtype = _dtype(first.outs[0])
    args = [None if v is None else b.input(which[id(v)], dtype) for v in p.operands]
    (out,) = b.inline(p.expr, args)
    expr = b.pruned([out], [0, 1])
    covers = [first.node.data, second.node.data] + p.covers
    k, n, bits, block_size, level = attrs[0]
    data = {"K": IntegerAttr(k, 64), "N": IntegerAttr(n, 64), "bits": IntegerAttr(bits, 64),
            "block_size": IntegerAttr(block_size, 64), "accuracy_level": IntegerAttr(level, 64),
            **expression_attributes(expr, [dtype, dtype], _dtype(p.out), covers)}
    operands, where = [ins[0][0]], [0]
    for base, d in ((1, ins[0]), (4, ins[1])):
        for j in (1, 2, 3):
            if j in d:
                operands.append(d[j])
                where.append(base + j - 1)
    fused = LaunchOp(GATED_KEY, f"gated[{', '.join(covers)}]", 1, DictionaryAttr(data), operands, where,
                     [p.out], [0])
    block.insert_op_before(fused, p.op)
    gone = [m.outs[0].owner for m in mnbs]
    for o in (p.op, second, first):
        block.erase_op(o)
    for a in gone:
        block.erase_op(a)
