"""hip-fuse-norm-matmul: a skip norm and the MatMulNBits that reads its output become one launch.

A decoder layer normalizes its hidden state twice (the input norm before the QKV projection, the
post-attention norm before the MLP), each as com.microsoft::SkipSimplifiedLayerNormalization,
whose normalized output is the A of one int4 projection: MatMulNBits (QKV, the LM head) or, after
hip-fuse-gated-matmul, GatedMatMulNBits (the MLP's gate and up). In decoding the norm of one row is
a launch of its own that moves ~12 kB: on a GPU it costs a kernel's latency, not bandwidth. This
pass makes the pair one `hip.launch "hipep::SkipNormMatMulNBits"` (hipep.ops.contrib_quant): on a
GPU every GEMV block computes the norm of the row it stages, and the norm's other outputs (the
residual sum the next norm adds to) come from the first block.

Runs on the bufferized IR after hip-fuse-gated-matmul. A norm launch S joins a launch M when:
  * S's normalized output (output 0) is a buffer of its own (no view, not a function result) that
    S writes and only M reads, as its A (input 0) and nothing else;
  * M is a MatMulNBits (not prepacked; A, B, scales, zero points, g_idx, bias) or a
    GatedMatMulNBits with one output, in S's block after S;
  * no launch between S and M writes what either reads, and none reads or writes S's other
    outputs (the fused launch writes them where M was).
The new launch takes M's place: inputs S's (0-3) then M's after A; outputs M's result, then S's
outputs other than the normalized one that the plan keeps. S, M and the normalized buffer
disappear. The reference runs both ops as the nodes would: the unfused plan's bits. Left out with
the option `fusion=off`, as the other fusions are.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.api import Block, Context, DictionaryAttr, ModuleOp, ModulePass, StringAttr
from ..ir.buffer_ops import AllocOp, LaunchOp
from ..ir.dialect import onnx_to_attr
from ..ops.contrib_quant import GATED_MATMUL_NBITS, NORM_INPUTS, SKIP_NORM_MATMUL_NBITS
from .buffer_effects import device_writes, function_blocks, host_writes, positions, registry_op, storage

NORM_KEY = "com.microsoft::SkipSimplifiedLayerNormalization"
MATMUL_KEYS = {"com.microsoft::MatMulNBits": "MatMulNBits", f"hipep::{GATED_MATMUL_NBITS}": GATED_MATMUL_NBITS}
FUSED_KEY = f"hipep::{SKIP_NORM_MATMUL_NBITS}"


@dataclass(frozen=True)
class FuseNormMatMulPass(ModulePass):
    name = "hip-fuse-norm-matmul"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for block in list(function_blocks(op)):
            for s in [o for o in list(block.ops) if isinstance(o, LaunchOp) and o.op.data == NORM_KEY]:
                _fuse(block, s)


def _reader(s: LaunchOp) -> LaunchOp | None:
    """The one launch reading S's normalized output, as its A only, where the buffer is S's own."""
    outs = dict(zip(positions(s, "outs"), s.outs))
    y = outs.get(0)
    if y is None or not isinstance(y.owner, AllocOp):
        return None
    users = list({id(use.operation): use.operation for use in y.uses}.values())
    if len(users) != 2 or s not in users:
        return None
    (m,) = [u for u in users if u is not s]
    if not isinstance(m, LaunchOp) or m.op.data not in MATMUL_KEYS or len(m.outs) != 1:
        return None
    ins = list(zip(positions(m, "ins"), m.ins))
    if [p for p, v in ins if v is y] != [0] or any(w is y for w in m.outs):
        return None
    if m.op.data == "com.microsoft::MatMulNBits":
        attrs = m.onnx.data
        if "weight_prepacked" in attrs and int(attrs["weight_prepacked"].value.data) != 0:
            return None
    return m


def _fuse(block: Block, s: LaunchOp) -> None:
    m = _reader(s)
    if m is None or m.parent_block() is not block:
        return
    order = {id(o): i for i, o in enumerate(block.ops)}
    if order[id(m)] < order[id(s)]:
        return
    y = dict(zip(positions(s, "outs"), s.outs))[0]
    s_outs = [(p, v) for p, v in zip(positions(s, "outs"), s.outs) if p != 0]
    m_ins = [(p, v) for p, v in zip(positions(m, "ins"), m.ins) if p != 0]
    read = {id(storage(v)) for v in list(s.ins) + [v for _, v in m_ins]}
    kept = {id(storage(v)) for _, v in s_outs}
    # Between S and M: nothing may write what the fused launch reads (it reads where M is), nor
    # touch S's other outputs (it writes them where M is).
    for o in list(block.ops)[order[id(s)] + 1:order[id(m)]]:
        if o.regions:  # control flow between: its bodies' effects are not looked into
            return
        written = {id(storage(v)) for v in device_writes(o) + host_writes(o)}
        if written & read or any(id(storage(v)) in kept for v in o.operands):
            return

    data = dict(m.onnx.data)
    norm_attrs = s.onnx.data
    eps = norm_attrs["epsilon"] if "epsilon" in norm_attrs else onnx_to_attr(
        registry_op(NORM_KEY).attributes["epsilon"])
    data.update({"matmul": StringAttr(MATMUL_KEYS[m.op.data]), "epsilon": eps})
    operands = list(s.ins) + [v for _, v in m_ins]
    where = positions(s, "ins") + [NORM_INPUTS - 1 + p for p, _ in m_ins]
    outs = list(m.outs) + [v for _, v in s_outs]
    out_where = [0] + [p + 1 for p, _ in s_outs]
    fused = LaunchOp(FUSED_KEY, f"normed[{s.node.data}, {m.node.data}]", 1, DictionaryAttr(data), operands, where,
                     outs, out_where)
    block.insert_op_before(fused, m)
    block.erase_op(m)
    block.erase_op(s)
    block.erase_op(y.owner)
