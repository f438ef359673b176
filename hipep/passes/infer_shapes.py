"""hip-infer-shapes: THE shape engine. Registry shape rules, merged by refine_type.

Walks every op in program order, regions included (hip.loop / hip.if bodies). For each op
derived from the registry it calls the entry's `shape_rule(types, values, attrs, num_outputs)`:
  types   one hipep TensorType per ONNX input position (None for an omitted input), dims int or
          None (dynamic), shape None if unranked;
  values  the numpy value of each input defined by hip.constant, else None;
  attrs   the node's attributes as `registry.resolve_attributes` gives them;
and writes each result type back through `refine_type` (refine, never widen). A missing rule is
"no information": the types stay as they are. A conflict (or a rule that raises) leaves the type
unchanged and records a diagnostic on the op, in the discardable attribute `hip.diagnostics`
(an array of strings; `diagnostics(module)` collects them).

Structural ops:
  * hip.loop: body block arguments take the v_init types (iteration tensor<i64>, cond
    tensor<i1>), the body is inferred, then the carried results take the v_init types as well
    (a loop result type always equals its v_init type) and scan outputs refine with
    tensor<N x yielded type> (N static only for a constant trip count and no cond input).
    Because the carried types come from v_init and not from the body, one walk is a fixed point.
  * hip.if: both branches are inferred, then each result refines with the join of the two
    yielded types.
  * func.func: after its body, the function type's results follow the returned values.

SSA value types are immutable in xDSL: a new type means `Rewriter.replace_value_with_new_type`,
which makes a new value; this pass always re-reads `op.results[i]` and `block.args[i]` after a
replacement and never keeps old values around.

Option `refine=False` is FOR TESTS ONLY: it replaces each type with the rule's result, which is
the field bug (widening known extents) that the refine rule exists to prevent.
"""
from __future__ import annotations

from dataclasses import dataclass


from ..graph import Node
from ..graph import TensorType as HipTensorType
from ..ir.api import (ArrayAttr, Attribute, Block, Context, FunctionType, ModuleOp, ModulePass,
                      Operation, Rewriter, SSAValue, StringAttr, TensorType, UnrankedTensorType,
                      func)
from ..ir.dialect import ConstantOp, HipOnnxOp, IfOp, LoopOp, YieldOp
from ..ir.types import (UNKNOWN_ELEMENT, dims_of, from_ir_type, join_types, make_tensor_type,
                        refine_type, to_ir_type)
from ..ops.registry import resolve_attributes

DIAGNOSTICS_ATTR = "hip.diagnostics"

_TENSOR_TYPES = (TensorType, UnrankedTensorType)


@dataclass(frozen=True)
class InferShapesPass(ModulePass):
    """Infer result types with the registry's shape rules; refine stored types, never widen."""

    name = "hip-infer-shapes"

    refine: bool = True  # False: FOR TESTS ONLY (replace types with the rule's result)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        _Engine(self.refine).region_ops(op)


def infer_shapes(module: ModuleOp, refine: bool = True) -> list[str]:
    """Run the pass on `module` in place; returns the diagnostics it recorded."""
    _Engine(refine).region_ops(module)
    return diagnostics(module)


def diagnostics(module: Operation) -> list[str]:
    """Every diagnostic recorded on ops of `module` (by this pass or others), in walk order."""
    out = []
    for op in module.walk():
        attr = op.attributes.get(DIAGNOSTICS_ATTR)
        if isinstance(attr, ArrayAttr):
            out += [a.data for a in attr.data if isinstance(a, StringAttr)]
    return out


def add_diagnostic(op: Operation, message: str) -> None:
    """Record `message` on `op` (once)."""
    old = op.attributes.get(DIAGNOSTICS_ATTR)
    items = list(old.data) if isinstance(old, ArrayAttr) else []
    if any(isinstance(a, StringAttr) and a.data == message for a in items):
        return
    op.attributes[DIAGNOSTICS_ATTR] = ArrayAttr(items + [StringAttr(message)])


def _describe(op: Operation) -> str:
    label = getattr(op, "label", None)
    return f"{op.name} '{label}'" if label else op.name


class _Engine:
    def __init__(self, refine: bool):
        self.refine = refine

    # ---- walking -------------------------------------------------------------------------

    def region_ops(self, op: Operation) -> None:
        for region in op.regions:
            for block in region.blocks:
                self.block(block)

    def block(self, block: Block) -> None:
        for op in list(block.ops):
            if isinstance(op, HipOnnxOp):
                self.registry_op(op)
            elif isinstance(op, LoopOp):
                self.loop(op)
            elif isinstance(op, IfOp):
                self.if_(op)
            elif isinstance(op, func.FuncOp):
                self.region_ops(op)
                self.function_type(op)
            elif op.regions:
                self.region_ops(op)

    # ---- merging -------------------------------------------------------------------------

    def set_type(self, value: SSAValue, inferred: Attribute, owner: Operation, what: str) -> SSAValue:
        """Merge `inferred` into `value`'s type (refine, or replace when refine=False); returns
        the value now standing for it (a new one if the type changed)."""
        stored = value.type
        if not isinstance(stored, _TENSOR_TYPES) or not isinstance(inferred, _TENSOR_TYPES):
            return value
        if self.refine:
            new, diag = refine_type(stored, inferred)
            if diag is not None:
                add_diagnostic(owner, f"{_describe(owner)} {what}: {diag}")
                return value
        else:
            same = inferred.element_type == stored.element_type or stored.element_type == UNKNOWN_ELEMENT
            new = inferred if same else stored
        if new == stored:
            return value
        return Rewriter.replace_value_with_new_type(value, new)

    # ---- registry ops --------------------------------------------------------------------

    def registry_op(self, op: HipOnnxOp) -> None:
        opdef = op.op_def
        rule = None if opdef is None else opdef.shape_rule
        if rule is None:
            return  # no information: the types stay as they are
        positions = op.operand_positions()
        n_in = (max(positions) + 1) if positions else 0
        types: list = [None] * n_in
        values: list = [None] * n_in
        names = [""] * n_in
        for p, v in zip(positions, op.operands):
            types[p] = from_ir_type(v.type)
            names[p] = f"in{p}"
            owner = v.owner
            if isinstance(owner, ConstantOp):
                values[p] = owner.numpy()
        out_positions = op.output_positions()
        n_out = (max(out_positions) + 1) if out_positions else 0
        outputs = [""] * n_out
        for p in out_positions:
            outputs[p] = f"out{p}"
        node = Node(index=0, name=op.label, op_type=opdef.op_type, domain=opdef.domain,
                    since_version=int(op.since_version.value.data), inputs=names, outputs=outputs,
                    attributes=op.onnx_attributes())
        try:
            inferred = list(rule(types, values, resolve_attributes(opdef, node), n_out))
        except Exception as e:  # a rule that cannot decide (or a rule bug): say so, change nothing
            add_diagnostic(op, f"{_describe(op)}: shape rule raised {type(e).__name__}: {e}; types left unchanged")
            return
        for i, p in enumerate(out_positions):
            if p >= len(inferred) or not isinstance(inferred[p], HipTensorType):
                continue
            t = self.ir_type(inferred[p], op.results[i].type)
            if t is not None:
                self.set_type(op.results[i], t, op, f"result {i}")

    @staticmethod
    def ir_type(t: HipTensorType, stored: Attribute):
        """The rule's result as an IR type; an unknown element type is the stored one's."""
        if t.kind != "tensor":
            return None
        if t.elem_type == 0:
            if not isinstance(stored, _TENSOR_TYPES):
                return None
            return make_tensor_type(stored.element_type, None if t.shape is None else
                                    [d if isinstance(d, int) and d >= 0 else None for d in t.shape])
        try:
            return to_ir_type(t)
        except Exception:
            return None

    # ---- structural ops ------------------------------------------------------------------

    def loop(self, op: LoopOp) -> None:
        block = op.body.block
        n = len(op.v_init)
        # Body arguments: iteration count and condition are scalars; carried values are v_init's.
        fixed = [to_ir_type(HipTensorType(7, ())), to_ir_type(HipTensorType(9, ()))]
        for i, want in enumerate(fixed + [v.type for v in op.v_init]):
            arg = block.args[i]
            if arg.type != want:
                self.force(arg, want, op, f"body argument {i}")
        self.block(block)
        yielded = block.last_op
        if isinstance(yielded, YieldOp):
            for i in range(n):
                y, a = yielded.args[1 + i].type, block.args[2 + i].type
                if isinstance(y, _TENSOR_TYPES) and isinstance(a, _TENSOR_TYPES) and refine_type(a, y)[1]:
                    add_diagnostic(op, f"{_describe(op)} carried value {i}: the body yields {y} for "
                                       f"a value that enters as {a}")
        for i in range(min(n, len(op.outs))):
            want = op.v_init[i].type
            if op.outs[i].type != want:
                self.force(op.outs[i], want, op, f"result {i}")
        if not isinstance(yielded, YieldOp):
            return
        trips = self.static_trip_count(op)
        for k in range(n, len(op.outs)):
            if 1 + k >= len(yielded.args):
                break
            y = yielded.args[1 + k].type
            d = dims_of(y)
            if not isinstance(y, _TENSOR_TYPES):
                continue
            scan = make_tensor_type(y.element_type, None if d is None else (trips, *d))
            self.set_type(op.outs[k], scan, op, f"result {k} (scan output)")

    def force(self, value: SSAValue, want: Attribute, owner: Operation, what: str) -> None:
        """Give `value` exactly type `want` (loop-carried values); a stored static extent that
        `want` contradicts is reported, and the value still takes `want` (the loop rule)."""
        stored = value.type
        if isinstance(stored, _TENSOR_TYPES) and isinstance(want, _TENSOR_TYPES) and refine_type(stored, want)[1]:
            add_diagnostic(owner, f"{_describe(owner)} {what}: stored type {stored} conflicts with the "
                                  f"v_init type {want}; it takes the v_init type")
        Rewriter.replace_value_with_new_type(value, want)

    @staticmethod
    def static_trip_count(op: LoopOp) -> int | None:
        if op.cond is not None or op.trip_count is None:
            return None
        owner = op.trip_count.owner
        if not isinstance(owner, ConstantOp):
            return None
        v = owner.numpy()
        if v is None or v.size != 1:
            return None
        return max(int(v.reshape(-1)[0]), 0)

    def if_(self, op: IfOp) -> None:
        self.block(op.then_region.block)
        self.block(op.else_region.block)
        then_y, else_y = op.then_region.block.last_op, op.else_region.block.last_op
        if not isinstance(then_y, YieldOp) or not isinstance(else_y, YieldOp):
            return
        for i in range(len(op.outs)):
            if i >= len(then_y.args) or i >= len(else_y.args):
                break
            joined = join_types(then_y.args[i].type, else_y.args[i].type)
            if joined is not None:
                self.set_type(op.outs[i], joined, op, f"result {i}")

    @staticmethod
    def function_type(fn: func.FuncOp) -> None:
        """Make the signature follow the body: argument types from the entry block, result types
        from the func.return operands."""
        block = fn.body.blocks.first
        if block is None:
            return
        ret = block.last_op
        ins = [a.type for a in block.args]
        outs = list(fn.function_type.outputs.data)
        if isinstance(ret, func.ReturnOp):
            outs = [v.type for v in ret.arguments]
        new = FunctionType.from_lists(ins, outs)
        if new != fn.function_type:
            fn.function_type = new
