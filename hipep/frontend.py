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
and outer-scope values are referenced directly. Scan (opset 9+) is lowered to a hip.loop: the
trip count is the first scan input's extent on its scan axis (hip.shape + hip.gather), the state
variables are the carried values, each scan input's slice is a hip.gather at the iteration index
(extent-1-index when reversed) at the top of the body, and each stacked scan output is flipped
(hip.slice, step -1) and/or transposed (hip.transpose) after the loop for
scan_output_directions / scan_output_axes. These ops carry labels "<scan label>/<role>". Errors
are ModelErrors naming the node.
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
                elif node.domain in ("", "ai.onnx") and node.op_type == "Scan":
                    self.scan(scope, node)
                else:
                    self.plain(scope, node)
            except ModelError as e:
                msg = str(e)
                if f"'{node.label}'" in msg:
                    raise
                raise ModelError(f"node '{node.label}' ({node.qualified_op}): {msg}") from None

    def result_types(self, scope: _Scope, node: Node):
        from .ops import lookup

        op = lookup(node.domain, node.op_type)
        out = []
        for i, o in enumerate(node.outputs):
            if o:
                # unknown element types are allowed here: hip-infer-shapes fills them in
                t = self.value_type(scope.graph, o, f"output {i} '{o}'", True)
                d = dims_of(t)
                if op is not None and not op.stored_extents and d is not None:
                    t = make_tensor_type(t.element_type, (None,) * len(d))  # the rule gives them
                out.append((i, o, t))
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

    # ---- Scan -> hip.loop ----------------------------------------------------------------------

    @staticmethod
    def _add(block: Block, op_type: str, operands, result_type, label: str, onnx: dict | None = None) -> SSAValue:
        """A plain registry op (`op_type` at the newest since-version the registry has) appended
        to `block`; its single result."""
        from .ops import lookup

        cls = op_class_for("", op_type)
        version = max(lookup("", op_type).since_versions)
        op = cls.make(list(operands), [result_type], label, version, onnx or {})
        block.add_op(op)
        return op.results[0]

    @staticmethod
    def _const(block: Block, value) -> SSAValue:
        op = ConstantOp(np.asarray(value, dtype=np.int64))
        block.add_op(op)
        return op.results[0]

    def scan(self, scope: _Scope, node: Node) -> None:
        from .ops.control_flow import scan_layout
        from .ops.registry import lookup, resolve_attributes

        attrs = resolve_attributes(lookup("", "Scan"), node)
        layout = scan_layout(node, attrs)
        if isinstance(layout, str):
            raise ModelError(f"node '{node.label}' (Scan): {layout}")
        n, m, k, in_axes, in_dirs, out_axes, out_dirs = layout
        body = node.subgraphs["body"]
        label = node.label
        outer = scope.block
        i64 = to_ir_type(_scalar(7)).element_type
        scalar_i64 = make_tensor_type(i64, ())
        state = [self.lookup(scope, v, f"input {i} (initial state)") for i, v in enumerate(node.inputs[:n])]
        xs = [self.lookup(scope, v, f"input {n + j} (scan input)") for j, v in enumerate(node.inputs[n:])]
        # trip count: the scan inputs' extent on their scan axes, on the host
        lengths = []
        for j, x in enumerate(xs):
            d = dims_of(x.type)
            shape = self._add(outer, "Shape", [x], make_tensor_type(i64, (None,) if d is None else (len(d),)),
                              f"{label}/scan_shape_{j}")
            lengths.append(self._add(outer, "Gather", [shape, self._const(outer, in_axes[j])], scalar_i64,
                                     f"{label}/scan_length_{j}", {"axis": 0}))
        # ORT rejects scan inputs of different lengths, and an empty scan: Range(0, L0) reshaped
        # to [Lj] for each further input, and its last element read, fail alike (run-time shape
        # errors); the trip count is computed from them so the checks cannot be dropped.
        vec = make_tensor_type(i64, (None,))
        check = self._add(outer, "Range", [self._const(outer, 0), lengths[0], self._const(outer, 1)], vec,
                          f"{label}/scan_positions")
        for j in range(1, m):
            want = self._add(outer, "Reshape", [lengths[j], self._const(outer, [1])],
                             make_tensor_type(i64, (1,)), f"{label}/scan_length_{j}_as_shape")
            check = self._add(outer, "Reshape", [check, want], vec,
                              f"{label}/scan_input_{j}_length_equals_scan_input_0_length")
        last = self._add(outer, "Gather", [check, self._const(outer, -1)], scalar_i64,
                         f"{label}/scan_last_position_of_nonempty_scan", {"axis": 0})
        trip = self._add(outer, "Add", [last, self._const(outer, 1)], scalar_i64, f"{label}/scan_length")
        # the body: (iteration, cond, states...) -> (cond, states..., scan outputs...)
        arg_types = [scalar_i64, to_ir_type(_scalar(9))]
        for i, v in enumerate(body.inputs[:n]):
            arg_types.append(self._usable_type(body, v) or state[i].type)
        block = Block(arg_types=arg_types)
        inner = _Scope(body, block, scope)
        block.args[0].name_hint = "iteration"
        for v, arg in zip(body.inputs[:n], block.args[2:]):
            arg.name_hint = _name_hint(v)
            inner.values[v] = arg
        reversed_index = None
        for j, v in enumerate(body.inputs[n:]):
            index = block.args[0]
            if in_dirs[j]:
                if reversed_index is None:
                    reversed_index = self._add(block, "Sub", [last, block.args[0]], scalar_i64,
                                               f"{label}/reversed_index")
                index = reversed_index
            t = self._usable_type(body, v)
            if t is None:
                d = dims_of(xs[j].type)
                a = in_axes[j]
                if d is not None:
                    a = a + len(d) if a < 0 else a
                    d = d[:a] + d[a + 1:]
                t = make_tensor_type(xs[j].type.element_type, d)
            inner.values[v] = self._add(block, "Gather", [xs[j], index], t, f"{label}/scan_input_{j}",
                                        {"axis": in_axes[j]})
            inner.values[v].name_hint = _name_hint(v)
        self.nodes(inner)
        yields = [self.lookup(inner, v, f"body output '{v}'") for v in body.outputs]
        block.add_op(YieldOp(block.args[1], *yields))
        inner.finish()
        # carried results are typed like v_init; scan outputs stack the body's on a new axis 0
        res_types = [s.type for s in state]
        for y in yields[n:]:
            d = dims_of(y.type)
            res_types.append(make_tensor_type(y.type.element_type, None if d is None else (None, *d)))
        loop = LoopOp(trip, None, state, res_types, Region(block), label, max(lookup("", "Loop").since_versions))
        outer.add_op(loop)
        outs = list(node.outputs) + [""] * (n + k - len(node.outputs))
        self.bind_results(scope, loop, outs[:n])
        for j in range(k):
            o = outs[n + j]
            if not o:
                continue
            v = loop.results[n + j]
            d = dims_of(v.type)
            if out_dirs[j]:
                v = self._add(outer, "Slice", [v, self._const(outer, [-1]), self._const(outer, [np.iinfo(np.int64).min]),
                                               self._const(outer, [0]), self._const(outer, [-1])],
                              v.type, f"{label}/scan_output_{j}_reversed")
            a = out_axes[j]
            if d is not None and a < 0:
                a += len(d)
            if a != 0:
                perm = list(range(1, a + 1)) + [0] + list(range(a + 1, len(d)))
                t = make_tensor_type(v.type.element_type, [d[p] for p in perm])
                v = self._add(outer, "Transpose", [v], t, f"{label}/scan_output_{j}_axis", {"perm": perm})
            v.name_hint = _name_hint(o)
            scope.values[o] = v

    @staticmethod
    def _usable_type(graph: GraphView, v: str):
        try:
            return to_ir_type(graph.type_of(v))
        except ModelError:
            return None


def _scalar(elem: int):
    from .graph import TensorType

    return TensorType(elem, ())
