"""hip-emit-plan: the bufferized function → the launch plan (hipep.plan.Plan), plain data.

Function arguments become "input" values (the compiler marks ORT-provided weights), hip.constant
results "constant" values, allocs "buffer" values in their memory space and slot, views buffers
that alias their source, tensor.cast-style views of arguments the same value. Launches, host ops,
syncs, loops and ifs become plan steps in program order. The plan is what Compute executes and
what EPContext will store; the pass keeps it in `last_plan` and, for hipep-opt, attaches its
listing to the module as the `hip.plan` attribute.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ..ir.api import (ArrayAttr, Block, Context, DenseIntOrFPElementsAttr, DictionaryAttr, FloatAttr, IntegerAttr,
                      ModuleOp, ModulePass, SSAValue, StringAttr, func)

from .. import plan as P
from ..graph import numpy_dtype
from ..ir.types import dense_value, onnx_elem_type, shaped_dims
from ..ir.buffer_ops import (AllocOp, BufferIfOp, BufferLoopOp, BufferYieldOp, HostOp, LaunchOp, SyncOp,
                             ViewOp, memory_space)
from ..ops.registry import OUTPUT_COUNT, REQUIRED, SINCE_VERSION
from ..ir.buffer_ops import HOST_VISIBLE
from .buffer_effects import host_reads, loop_condition_yield, positions, registry_op, walk

_emitted: dict[int, P.Plan] = {}


def _static(v: SSAValue) -> tuple | None:
    """ValueSpec.static of an IR value: its type's extents, -1 for dynamic ones."""
    dims = shaped_dims(v.type)
    return None if dims is None else tuple(-1 if d is None else d for d in dims)


def attribute_value(a):
    """A builtin attribute as the plain Python value ONNX attributes have in the registry."""
    if isinstance(a, IntegerAttr):
        return int(a.value.data)
    if isinstance(a, FloatAttr):
        return float(a.value.data)
    if isinstance(a, StringAttr):
        return a.data
    if isinstance(a, ArrayAttr):
        return [attribute_value(x) for x in a.data]
    if isinstance(a, DenseIntOrFPElementsAttr):
        return dense_value(a)
    if isinstance(a, DictionaryAttr):
        return {k: attribute_value(v) for k, v in a.data.items()}
    raise TypeError(f"cannot convert attribute {a} to a plain value")


@dataclass(frozen=True)
class EmitPlanPass(ModulePass):
    name = "hip-emit-plan"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for f in op.ops:
            if isinstance(f, func.FuncOp):
                plan = PlanEmitter(f).emit()
                _emitted[id(op)] = plan
                op.attributes["hip.plan"] = StringAttr(plan.format())


def take_plan(module: ModuleOp) -> P.Plan:
    """The plan hip-emit-plan made for `module` (once)."""
    return _emitted.pop(id(module))


class PlanEmitter:
    def __init__(self, f: func.FuncOp):
        self.f = f
        self.dtype_of = lambda v: numpy_dtype(onnx_elem_type(v.type.element_type)).name
        self.ids: dict[int, int] = {}
        self.values: dict[int, P.ValueSpec] = {}
        self.constants: dict[str, np.ndarray] = {}
        # Control flow binds values of its own (loop body arguments, loop and if results): each
        # gets a slot of its own after the allocs' slots.
        self.next_slot: dict[str, int] = {}
        for op in walk(f.body.block):
            if isinstance(op, AllocOp) and op.slot is not None:
                space = memory_space(op.result.type)
                self.next_slot[space] = max(self.next_slot.get(space, 0), op.slot.value.data + 1)
        self.host_read: set[int] = {id(v) for op in walk(f.body.block) for v in host_reads(op)}
        for op in walk(f.body.block):
            if isinstance(op, BufferLoopOp):
                cond = loop_condition_yield(op)
                if cond is not None:
                    self.host_read.add(id(cond))

    def bound(self, v: SSAValue, name: str) -> int:
        """A value control flow writes (by queued copies): a buffer with a slot of its own."""
        space = HOST_VISIBLE if id(v) in self.host_read else memory_space(v.type)
        slot = self.next_slot.get(space, 0)
        self.next_slot[space] = slot + 1
        return self.define(v, P.ValueSpec("buffer", self.dtype_of(v), v.name_hint or name, space=space, slot=slot,
                                          static=_static(v)))

    def vid(self, v: SSAValue | None) -> int:
        return -1 if v is None else self.ids[id(v)]

    def define(self, v: SSAValue, spec: P.ValueSpec) -> int:
        i = len(self.values)
        self.ids[id(v)] = i
        self.values[i] = spec
        return i

    def emit(self) -> P.Plan:
        f = self.f
        name = f.sym_name.data
        inputs = [self.define(a, P.ValueSpec("input", self.dtype_of(a), a.name_hint or f"arg{i}", index=i,
                                             static=_static(a)))
                  for i, a in enumerate(f.body.block.args)]
        steps = self.block(f.body.block)
        ret = f.body.block.last_op
        outputs = [self.vid(v) for v in ret.operands]
        return P.Plan(name, self.values, inputs, outputs, tuple(steps), self.constants,
                      aliases=self.aliases(steps, outputs))

    def aliases(self, steps, outputs) -> tuple:
        """The in-place updates ORT may ask for: an op's output that its registry entry lets share
        an input's memory (`inplace`), when the output is a subgraph output and the input a
        subgraph input (ORT's memory on both sides)."""
        pairs = []
        for step in P.walk(steps):
            if not isinstance(step, P.Launch):
                continue
            op = registry_op(step.op)
            for out_pos, in_pos in (op.inplace.items() if op is not None else ()):
                if out_pos >= len(step.outputs) or in_pos >= len(step.inputs):
                    continue
                out, src = step.outputs[out_pos], step.inputs[in_pos]
                if out in outputs and src >= 0 and self.values[src].kind == "input":
                    pairs.append((out, src))
        return tuple(pairs)

    def block(self, block: Block) -> list:
        steps: list = []
        for op in block.ops:
            if isinstance(op, AllocOp):
                hint = op.value_name.data if op.value_name else (op.result.name_hint or "")
                self.define(op.result, P.ValueSpec("buffer", self.dtype_of(op.result), hint,
                                                   space=memory_space(op.result.type), slot=op.slot.value.data,
                                                   static=_static(op.result)))
            elif isinstance(op, ViewOp):
                self.define(op.result, P.ValueSpec("buffer", self.dtype_of(op.result), op.result.name_hint or "",
                                                   space=memory_space(op.result.type), view_of=self.vid(op.source),
                                                   static=_static(op.result)))
            elif op.name == "hip.constant":
                key = op.results[0].name_hint or f"c{len(self.constants)}"
                while key in self.constants:
                    key += "'"
                self.constants[key] = dense_value(op.value)
                self.define(op.results[0], P.ValueSpec("constant", self.constants[key].dtype.name, key, constant=key,
                                                       space=P.HOST_VISIBLE))
            elif isinstance(op, (LaunchOp, HostOp)):
                steps.append(self.launch(op))
            elif isinstance(op, SyncOp):
                steps.append(P.Sync(op.reason.data))
            elif isinstance(op, BufferLoopOp):
                steps.append(self.loop(op))
            elif isinstance(op, BufferIfOp):
                steps.append(self.if_(op))
            elif isinstance(op, (BufferYieldOp, func.ReturnOp)):
                pass
            else:
                raise ValueError(f"hip-emit-plan: unexpected op {op.name} in a bufferized function")
        return steps

    def launch(self, op):
        key = op.op.data
        registered = registry_op(key)
        attrs = {k: attribute_value(v) for k, v in op.onnx.data.items()}
        for k, default in registered.attributes.items():
            if k not in attrs and default is not REQUIRED:
                attrs[k] = default
        ins_pos, outs_pos = positions(op, "ins"), positions(op, "outs")
        n_in = max(ins_pos, default=-1) + 1
        n_out = max(outs_pos, default=-1) + 1
        attrs.setdefault(OUTPUT_COUNT, n_out)
        attrs.setdefault(SINCE_VERSION, int(op.since_version.value.data))
        inputs = [-1] * n_in
        for v, p in zip(op.ins, ins_pos):
            inputs[p] = self.vid(v)
        outputs = [-1] * n_out
        for v, p in zip(op.outs, outs_pos):
            outputs[p] = self.vid(v)
        kind = P.Launch if isinstance(op, LaunchOp) else P.HostStep
        return kind(key, op.node.data, attrs, tuple(inputs), tuple(outputs))

    def loop(self, op: BufferLoopOp):
        body = op.body.block
        args = [self.bound(a, "loop argument") for a in body.args]
        steps = self.block(body)
        results = [self.vid(v) for v in body.last_op.operands]
        outs = [self.bound(r, "loop result") for r in op.outputs]
        # a stacked output's rows, where its type fixes them: the shape a loop that runs no
        # iteration gives it ((0, *rows); else (0,))
        rows = []
        for r in op.outputs[len(op.carried):]:
            shape = tuple(int(d) for d in r.type.get_shape())
            rows.append(shape[1:] if shape and all(d >= 0 for d in shape[1:]) else None)
        return P.Loop(op.node.data, self.vid(op.trip_count), self.vid(op.cond),
                      tuple(self.vid(v) for v in op.carried), tuple(steps), tuple(args), tuple(results), tuple(outs),
                      tuple(rows))

    def if_(self, op: BufferIfOp):
        then_steps = self.block(op.then_region.block)
        then_results = [self.vid(v) for v in op.then_region.block.last_op.operands]
        else_steps = self.block(op.else_region.block)
        else_results = [self.vid(v) for v in op.else_region.block.last_op.operands]
        outs = [self.bound(r, "if result") for r in op.outputs]
        return P.If(op.node.data, self.vid(op.cond), tuple(then_steps), tuple(then_results),
                    tuple(else_steps), tuple(else_results), tuple(outs))
