"""hip-bufferize: tensors → buffers; every op becomes a device op or a host op.

Each hip op result gets a `hip.alloc`ed buffer (memory space "device" for now: the late,
backend-specific `hip-assign-memory-spaces` moves what the host touches) and the op becomes a
`hip.launch` (queued on the stream) or a `hip.host` (run by the host when it reaches it) writing
into it. An op is a host op when it is shape arithmetic: its results are integers or
booleans and every input it reads the data of is a host value (a constant or a host op's result;
inputs the registry marks extent-only, like Shape's, do not count). Ops the registry marks as
views (Reshape, Squeeze, ...) write into a `hip.view` of their input's buffer. tensor.extract_slice becomes a Slice launch with constant bounds;
tensor.cast is a compile-time type assertion and disappears. Loops and ifs become hip.buffer_loop
and hip.buffer_if with the same bodies, bufferized.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.api import (Block, Context, FunctionType, MemRefType, ModuleOp, ModulePass, Region, SSAValue,
                      StringAttr, TensorType, UnrankedMemRefType, UnrankedTensorType, func)
from ..ir.buffer_ops import (DEVICE, AllocOp, BufferIfOp, BufferLoopOp, BufferYieldOp, HostOp, LaunchOp,
                             ViewOp)
from ..ir.dialect import ConstantOp, HipOnnxOp, IfOp, LoopOp, WeightOp, YieldOp
from ..ir.types import dense_attr

_INTEGER_KINDS = "iub"
_SLICE_TO_END = np.iinfo(np.int64).max


def buffer_type(t, space: str = DEVICE):
    """The memref type for a tensor type, in `space`."""
    if isinstance(t, (MemRefType, UnrankedMemRefType)):
        return t
    if isinstance(t, UnrankedTensorType):
        return UnrankedMemRefType.from_type(t.element_type, StringAttr(space))
    if isinstance(t, TensorType):
        return MemRefType(t.element_type, t.get_shape(), memory_space=StringAttr(space))
    raise TypeError(f"hip-bufferize: cannot bufferize a value of type {t}")


def _is_integer(t) -> bool:
    from ..graph import numpy_dtype
    from ..ir.types import onnx_elem_type

    try:
        return numpy_dtype(onnx_elem_type(t.element_type)).kind in _INTEGER_KINDS
    except Exception:
        return False


@dataclass(frozen=True)
class BufferizePass(ModulePass):
    name = "hip-bufferize"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for f in list(op.ops):
            if isinstance(f, func.FuncOp):
                _Bufferizer().function(f)


class _Bufferizer:
    def __init__(self):
        self.map: dict[int, SSAValue] = {}  # id(tensor value) -> buffer value
        self.host: set[int] = set()  # id(buffer value) of host values (constants, host results)

    def get(self, v: SSAValue) -> SSAValue:
        return self.map[id(v)]

    def function(self, f: func.FuncOp) -> None:
        old = f.body.block
        new = Block(arg_types=[buffer_type(a.type) for a in old.args])
        for a, b in zip(old.args, new.args):
            self.map[id(a)] = b
            if a.name_hint:
                b.name_hint = a.name_hint
        self.block(old, new)
        ret = new.last_op
        f.body.detach_block(old)
        f.body.add_block(new)
        f.function_type = FunctionType.from_lists([a.type for a in new.args], [v.type for v in ret.operands])

    def block(self, old: Block, new: Block) -> None:
        for op in old.ops:
            if isinstance(op, ConstantOp):
                c = ConstantOp(op.value)
                c.result.name_hint = op.result.name_hint
                new.add_op(c)
                self.map[id(op.result)] = c.result
                self.host.add(id(c.result))
            elif isinstance(op, WeightOp):
                raise ValueError(f"hip-bufferize: weight '{op.weight_name.data}' must reach Compute as an input")
            elif isinstance(op, HipOnnxOp):
                self.onnx_op(op, new)
            # tensor and arith ops by name: their dialects are imported only where a model's IR has
            # them (hip-lower-slices), and no op of a dialect never imported can be here.
            elif op.name == "tensor.extract_slice":
                self.extract_slice(op, new)
            elif op.name == "tensor.cast":
                self.map[id(op.results[0])] = self.get(op.source)
            elif op.name in ("tensor.dim", "arith.constant"):
                pass  # sizes for extract_slice: the run-time shape rules size buffers instead
            elif isinstance(op, LoopOp):
                self.loop(op, new)
            elif isinstance(op, IfOp):
                self.if_(op, new)
            elif isinstance(op, YieldOp):
                new.add_op(BufferYieldOp([self.get(v) for v in op.args]))
            elif isinstance(op, func.ReturnOp):
                new.add_op(func.ReturnOp(*[self.get(v) for v in op.arguments]))
            else:
                raise ValueError(f"hip-bufferize: unexpected op {op.name}")

    def _alloc(self, t, name: str, new: Block, hint: str | None = None) -> SSAValue:
        a = AllocOp(buffer_type(t), name)
        try:
            a.result.name_hint = hint or None
        except ValueError:  # a name xDSL cannot print (ONNX allows any string): the IR numbers it
            a.result.name_hint = None
        new.add_op(a)
        return a.result

    def onnx_op(self, op: HipOnnxOp, new: Block) -> None:
        domain, op_type = op.REGISTRY_KEY
        opdef = op.op_def
        ins = [self.get(v) for v in op.operands]
        # Shape arithmetic runs on the host: integer results from host values only (inputs read
        # for their extents alone, like Shape's, need not be host values).
        extent_only = set(opdef.extent_only_inputs) if opdef is not None else set()
        data_ins = [v for v, p in zip(ins, op.operand_positions()) if p not in extent_only]
        host = all(id(v) in self.host for v in data_ins) and all(_is_integer(r.type) for r in op.results)
        outs = []
        for i, r in enumerate(op.results):
            name = r.name_hint or op.label
            if i == 0 and opdef is not None and opdef.view and ins and isinstance(ins[0].owner, (AllocOp, ViewOp)):
                view = ViewOp(ins[0], buffer_type(r.type))
                view.result.name_hint = r.name_hint
                new.add_op(view)
                outs.append(view.result)
            else:
                outs.append(self._alloc(r.type, name, new, r.name_hint))
        kind = HostOp if host else LaunchOp
        step = kind(f"{domain}::{op_type}", op.label, int(op.since_version.value.data),
                    op.onnx, ins, op.operand_positions(), outs, op.output_positions())
        new.add_op(step)
        for r, b in zip(op.results, outs):
            self.map[id(r)] = b
            if host:
                self.host.add(id(b))

    def extract_slice(self, op, new: Block) -> None:  # a tensor.ExtractSliceOp
        src = self.get(op.source)
        offsets = list(op.static_offsets.get_values())
        sizes = list(op.static_sizes.get_values())
        strides = list(op.static_strides.get_values())
        shape = op.source.type.get_shape()
        starts, ends, axes, steps = [], [], [], []
        for axis, (o, s, st) in enumerate(zip(offsets, sizes, strides)):
            full = o == 0 and st == 1 and (s < 0 or (shape[axis] >= 0 and s == shape[axis]))
            if full:
                continue
            starts.append(o)
            ends.append(_SLICE_TO_END if s < 0 else o + s * st)
            axes.append(axis)
            steps.append(st)
        consts = []
        for values in (starts, ends, axes, steps):
            c = ConstantOp(dense_attr(np.array(values, np.int64)))
            new.add_op(c)
            self.host.add(id(c.result))
            consts.append(c.result)
        out = self._alloc(op.result.type, op.result.name_hint or "slice", new)
        new.add_op(LaunchOp("::Slice", op.result.name_hint or "extract_slice", 13, _empty_dict(),
                            [src, *consts], [0, 1, 2, 3, 4], [out], [0]))
        self.map[id(op.result)] = out

    def loop(self, op: LoopOp, new: Block) -> None:
        old_body = op.body.block
        body = Block(arg_types=[buffer_type(a.type) for a in old_body.args])
        for a, b in zip(old_body.args, body.args):
            self.map[id(a)] = b
        self.block(old_body, body)
        loop = BufferLoopOp(op.label, self.get(op.trip_count) if op.trip_count is not None else None,
                            self.get(op.cond) if op.cond is not None else None,
                            [self.get(v) for v in op.v_init], [buffer_type(r.type) for r in op.outs],
                            Region(body))
        new.add_op(loop)
        for r, b in zip(op.outs, loop.outputs):
            self.map[id(r)] = b

    def if_(self, op: IfOp, new: Block) -> None:
        regions = []
        for region in (op.then_region, op.else_region):
            block = Block()
            self.block(region.block, block)
            regions.append(Region(block))
        branch = BufferIfOp(op.label, self.get(op.cond), [buffer_type(r.type) for r in op.outs], *regions)
        new.add_op(branch)
        for r, b in zip(op.outs, branch.outputs):
            self.map[id(r)] = b


def _empty_dict():
    from ..ir.api import DictionaryAttr

    return DictionaryAttr({})
