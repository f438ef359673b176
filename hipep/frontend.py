"""GraphView -> hip dialect: one `func.func` per fused subgraph.

The function's arguments are the fused node's inputs in ORT's order (ORT passes every
initializer the subgraph reads, weights included, as a fused-node input, so they are arguments),
its results the fused node's outputs in order. Value types come from the GraphView and keep
every static extent ONNX/ORT knows (symbolic dims become `?`, unknown ranks unranked tensors,
an unknown element type of a node result `none`); shape inference (hip-infer-shapes) only ever
refines them. Arguments and initializers must have known element types.

Constants: a small constant initializer (at most MAX_DENSE_ELEMENTS elements) becomes a
`hip.constant` at the top of the block of the scope it belongs to, so passes see its value;
a larger one becomes a `hip.weight` handle (by name, never its data). With
`fold_small_constant_inputs` (the default) this also holds for small constants ORT passes in as
inputs: the argument stays (the signature is ORT's) but the body reads the hip.constant, so
Slice bounds, Reshape shapes and axes are known at compile time.

ONNX opset forms are kept as they are: attributes stay attributes (`onnx`), operands stay
operands (`positions` records which input each fills), `since_version` is recorded. Loop and If
become hip.loop / hip.if with their bodies as regions; body graph inputs become block arguments
and outer-scope values are referenced directly. Errors are ModelErrors naming the node.
"""
from __future__ import annotations

import re

import numpy as np

from .errors import ModelError
from .graph import GraphView, Node
from .ir.api import Block, ModuleOp, Operation, Region, SSAValue, func
from .ir.dialect import (MAX_DENSE_ELEMENTS, ConstantOp, HipOnnxOp, IfOp, LoopOp, WeightOp,
                         YieldOp, op_class_for)
from .ir.types import dims_of, make_tensor_type, to_ir_type
from .graph import topological_order

__all__ = ["import_graph", "MAX_DENSE_ELEMENTS"]


def import_graph(graph: GraphView, inputs: list[str], outputs: list[str], name: str, *,
                 fold_small_constant_inputs: bool = True, verify: bool = False) -> ModuleOp:
    """The module holding one func.func named `name` (see the module docstring)."""
    imp = _Importer(fold_small_constant_inputs)
    fn = imp.function(graph, list(inputs), list(outputs), name)
    module = ModuleOp([fn])
    if verify:
        module.verify()
    return module


_BAD_NAME_CHARS = re.compile(r"[^A-Za-z0-9_$.-]")


def _name_hint(name: str) -> str | None:
    """A printable SSA name close to the ONNX value name (or None)."""
    if not name:
        return None
    s = _BAD_NAME_CHARS.sub("_", name)
    if not (s[0].isalpha() or s[0] in "_$.-"):
        s = "v" + s
    return s


class _Scope:
    """One graph level (the function body or a Loop/If body): its values by ONNX name, and the
    constants materialised at the top of its block."""

    def __init__(self, graph: GraphView, block: Block, parent: "_Scope | None"):
        self.graph = graph
        self.block = block
        self.parent = parent
        self.values: dict[str, SSAValue] = {}
        self.prelude: list[Operation] = []

    def finish(self) -> None:
        if not self.prelude:
            return
        first = self.block.first_op
        if first is None:
            self.block.add_ops(self.prelude)
        else:
            self.block.insert_ops_before(self.prelude, first)


class _Importer:
    def __init__(self, fold_small_constant_inputs: bool):
        self.fold_inputs = fold_small_constant_inputs

    # ---- function ------------------------------------------------------------------------

    def function(self, graph: GraphView, inputs: list[str], outputs: list[str], name: str) -> func.FuncOp:
        arg_types = [self.value_type(graph, v, f"input '{v}' of subgraph '{name}'") for v in inputs]
        block = Block(arg_types=arg_types)
        scope = _Scope(graph, block, None)
        for v, arg in zip(inputs, block.args):
            arg.name_hint = _name_hint(v)
            scope.values[v] = arg
            c = graph.constants.get(v)
            if self.fold_inputs and c is not None and c.size <= MAX_DENSE_ELEMENTS:
                op = self.constant_op(v, c)
                if op is not None:
                    scope.prelude.append(op)
                    scope.values[v] = op.results[0]
        self.nodes(scope)
        ret = [self.lookup(scope, v, f"subgraph '{name}' output") for v in outputs]
        block.add_op(func.ReturnOp(*ret))
        scope.finish()
        # The result types are the returned values' types: the graph's types of those values.
        return func.FuncOp(name, (arg_types, [v.type for v in ret]), Region(block))

    # ---- values --------------------------------------------------------------------------

    @staticmethod
    def value_type(graph: GraphView, v: str, what: str, allow_unknown_element: bool = False):
        try:
            return to_ir_type(graph.type_of(v), allow_unknown_element)
        except ModelError as e:
            raise ModelError(f"{what}: {e}") from None

    def constant_op(self, v: str, value: np.ndarray) -> Operation | None:
        """hip.constant for a small value whose dtype the IR holds, else None."""
        try:
            op = ConstantOp(np.asarray(value))
        except ModelError:
            return None
        op.results[0].name_hint = _name_hint(v)
        return op

    def lookup(self, scope: _Scope, v: str, user: str) -> SSAValue:
        """The SSA value of ONNX value `v` seen from `scope`: scope values inner to outer, then
        initializers (materialised in the scope that owns them)."""
        s: _Scope | None = scope
        while s is not None:
            if v in s.values:
                return s.values[v]
            s = s.parent
        s = scope
        while s is not None:
            g = s.graph
            if v in g.constants or v in g.weights:
                return self.materialise(s, v)
            s = s.parent
        raise ModelError(f"{user} reads '{v}', which is neither an input of the subgraph nor "
                         f"produced before it")

    def materialise(self, scope: _Scope, v: str) -> SSAValue:
        g = scope.graph
        op: Operation | None = None
        c = g.constants.get(v)
        if c is not None and c.size <= MAX_DENSE_ELEMENTS:
            op = self.constant_op(v, c)
        if op is None:
            op = WeightOp(v, self.value_type(g, v, f"initializer '{v}'"))
            op.results[0].name_hint = _name_hint(v)
        scope.prelude.append(op)
        scope.values[v] = op.results[0]
        return op.results[0]

    # ---- nodes ---------------------------------------------------------------------------

    def nodes(self, scope: _Scope) -> None:
        g = scope.graph
        for pos in topological_order(g):
            node = g.nodes[pos]
            try:
                if node.domain in ("", "ai.onnx") and node.op_type == "Loop":
                    self.loop(scope, node)
                elif node.domain in ("", "ai.onnx") and node.op_type == "If":
                    self.if_(scope, node)
                else:
                    self.plain(scope, node)
            except ModelError as e:
                msg = str(e)
                if f"'{node.label}'" in msg:
                    raise
                raise ModelError(f"node '{node.label}' ({node.qualified_op}): {msg}") from None

    def result_types(self, scope: _Scope, node: Node):
        out = []
        for i, o in enumerate(node.outputs):
            if o:
                # unknown element types are allowed here: hip-infer-shapes fills them in
                out.append((i, o, self.value_type(scope.graph, o, f"output {i} '{o}'", True)))
        return out

    def bind_results(self, scope: _Scope, op: Operation, names: list[str]) -> None:
        for r, o in zip(op.results, names):
            if o:
                r.name_hint = _name_hint(o)
                scope.values[o] = r

    def plain(self, scope: _Scope, node: Node) -> None:
        cls = op_class_for(node.domain, node.op_type)
        if cls is None or not issubclass(cls, HipOnnxOp):
            raise ModelError(f"node '{node.label}' ({node.qualified_op}): the operator is not in "
                             f"hipep's op registry")
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            value = node.attributes.get("value")
            if isinstance(value, np.ndarray) and value.size <= MAX_DENSE_ELEMENTS and node.outputs:
                op = self.constant_op(node.outputs[0], value)
                if op is not None:
                    scope.block.add_op(op)
                    self.bind_results(scope, op, [node.outputs[0]])
                    return
        operands, positions = [], []
        for i, v in enumerate(node.inputs):
            if v:
                operands.append(self.lookup(scope, v, f"input {i}"))
                positions.append(i)
        results = self.result_types(scope, node)
        try:
            op = cls.make(operands, [t for _, _, t in results], node.label, node.since_version,
                           {k: v for k, v in node.attributes.items() if v is not None},
                           positions, [i for i, _, _ in results])
        except (TypeError, ValueError) as e:
            raise ModelError(f"node '{node.label}' ({node.qualified_op}): cannot represent it: {e}") from None
        scope.block.add_op(op)
        self.bind_results(scope, op, [o for _, o, _ in results])

    def loop(self, scope: _Scope, node: Node) -> None:
        body = node.subgraphs.get("body")
        if body is None:
            raise ModelError(f"node '{node.label}' (Loop) has no 'body' subgraph")
        ins = list(node.inputs) + [""] * max(0, 2 - len(node.inputs))
        trip = self.lookup(scope, ins[0], "input 0 (M)") if ins[0] else None
        cond = self.lookup(scope, ins[1], "input 1 (cond)") if ins[1] else None
        if any(not v for v in ins[2:]):
            raise ModelError(f"node '{node.label}' (Loop): a loop-carried initial value is omitted")
        v_init = [self.lookup(scope, v, f"input {i + 2}") for i, v in enumerate(ins[2:])]
        n = len(v_init)
        if len(body.inputs) != 2 + n:
            raise ModelError(f"node '{node.label}' (Loop): body has {len(body.inputs)} inputs, "
                             f"expected {2 + n} (iteration, cond and {n} carried values)")
        n_scan = len(body.outputs) - 1 - n
        if n_scan < 0:
            raise ModelError(f"node '{node.label}' (Loop): body has {len(body.outputs)} outputs, "
                             f"expected at least {1 + n}")
        arg_types = [to_ir_type(_scalar(7)), to_ir_type(_scalar(9))]
        for i, v in enumerate(body.inputs[2:]):
            arg_types.append(self._usable_type(body, v) or v_init[i].type)
        block = Block(arg_types=arg_types)
        inner = _Scope(body, block, scope)
        for v, arg in zip(body.inputs, block.args):
            arg.name_hint = _name_hint(v)
            inner.values[v] = arg
        self.nodes(inner)
        yields = [self.lookup(inner, v, f"body output '{v}'") for v in body.outputs]
        block.add_op(YieldOp(*yields))
        inner.finish()
        outs = list(node.outputs) + [""] * max(0, n + n_scan - len(node.outputs))
        res_types = []
        for i, o in enumerate(outs[: n + n_scan]):
            t = self._usable_type(scope.graph, o) if o else None
            if t is None:
                if i < n:
                    t = v_init[i].type
                else:
                    y = yields[1 + i].type
                    d = dims_of(y)
                    t = make_tensor_type(y.element_type, None if d is None else (None, *d))
            res_types.append(t)
        op = LoopOp(trip, cond, v_init, res_types, Region(block), node.label, node.since_version)
        scope.block.add_op(op)
        self.bind_results(scope, op, outs[: n + n_scan])

    def if_(self, scope: _Scope, node: Node) -> None:
        if not node.inputs or not node.inputs[0]:
            raise ModelError(f"node '{node.label}' (If) has no condition input")
        cond = self.lookup(scope, node.inputs[0], "input 0 (cond)")
        regions = []
        for branch in ("then_branch", "else_branch"):
            g = node.subgraphs.get(branch)
            if g is None:
                raise ModelError(f"node '{node.label}' (If) has no '{branch}' subgraph")
            if len(g.outputs) != len(node.outputs):
                raise ModelError(f"node '{node.label}' (If): {branch} has {len(g.outputs)} outputs, "
                                 f"the node {len(node.outputs)}")
            block = Block()
            inner = _Scope(g, block, scope)
            self.nodes(inner)
            block.add_op(YieldOp(*[self.lookup(inner, v, f"{branch} output") for v in g.outputs]))
            inner.finish()
            regions.append(Region(block))
        res_types = [self.value_type(scope.graph, o, f"output {i} '{o}'", True) for i, o in enumerate(node.outputs)]
        op = IfOp(cond, res_types, regions[0], regions[1], node.label, node.since_version)
        scope.block.add_op(op)
        self.bind_results(scope, op, list(node.outputs))

    @staticmethod
    def _usable_type(graph: GraphView, v: str):
        try:
            return to_ir_type(graph.type_of(v))
        except ModelError:
            return None


def _scalar(elem: int):
    from .graph import TensorType

    return TensorType(elem, ())
