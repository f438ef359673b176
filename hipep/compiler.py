"""Compile: a claimed subgraph (GraphView) → a launch Plan (hipep.plan), through the IR pipeline.

GraphView → frontend (hip dialect) → hip-infer-shapes → hip-lower-slices → hip-bufferize →
hip-fuse-pointwise → hip-fuse-gated-matmul → hip-fuse-norm-matmul → hip-assign-memory-spaces →
hip-materialize-host-scalars → hip-reuse-buffers → hip-insert-syncs → hip-emit-plan → Plan. With the
option `fusion=off` the three fusions are left out (every node stays a launch of its own). With the `dump_ir` option the IR after each pass and the plan are written
to `<dump_ir>/<subgraph>/NN-<pass>.mlir` and `plan.txt`. The `pass_options` option overrides
passes' options (tests use it to switch a rule off and see it matter).
"""
from __future__ import annotations

import dataclasses
import os
import re

import numpy as np

from .errors import ModelError, OptionError
from .graph import GraphView
from .plan import Plan


def compile_subgraph(graph: GraphView, name: str, inputs: list[str], outputs: list[str], options=None,
                     held: list[str] = ()) -> Plan:
    """`inputs` are the fused node's inputs (what Compute receives), `held` the constant
    initializers hipep keeps itself (ORT does not pass them): they become plan values of kind
    "weight" with index -1, bound by name at run time, unless the IR holds them as constants."""
    from .frontend import import_graph
    from .functions import expand_function_nodes
    from .ir.api import print_ir
    from .passes import pipeline_with_overrides, run_pipeline
    from .passes.emit_plan import take_plan

    try:
        leave_out = ("hip-fuse-pointwise", "hip-fuse-gated-matmul", "hip-fuse-norm-matmul") if getattr(options, "fusion", "on") == "off" else ()
        spec = pipeline_with_overrides(getattr(options, "pass_options", "") or "", leave_out)
    except ValueError as e:
        raise OptionError(f"option 'pass_options': {e}") from None
    dump = getattr(options, "dump_ir", "") or ""
    folder = os.path.join(dump, re.sub(r"[^A-Za-z0-9_.-]", "_", name)) if dump else ""
    # Function nodes the partitioner claimed whole (hipep.partition) are compiled as their bodies.
    graph = expand_function_nodes(graph)
    extra = _weight_arguments(graph, inputs, held)
    module = import_graph(graph, list(inputs) + extra, outputs, name)
    after_each = None
    if folder:
        os.makedirs(folder, exist_ok=True)
        _write(folder, "00-frontend.mlir", print_ir(module))
        counter = iter(range(1, 100))

        def after_each(p, module):
            _write(folder, f"{next(counter):02d}-{p.name}.mlir", print_ir(module))
    try:
        run_pipeline(module, spec, after_each)
    except ModelError:
        raise
    except Exception as e:  # a pass failed on this subgraph: say which, with the IR dumped
        hint = f" (IR dumped in {folder})" if folder else " (set the dump_ir option to see the IR)"
        raise ModelError(f"{name}: compiling failed: {type(e).__name__}: {e}{hint}") from e
    plan = take_plan(module)
    plan.name = name
    # Weights are not activations. Held ones are function arguments after ORT's inputs, but no
    # fused-node input: the executor binds them by name. A caller that passes a weight in as an
    # input (ORT did, before hipep held them) gets it marked at its input position.
    n = len(inputs)
    for vid in plan.inputs:
        spec_ = plan.values[vid]
        if spec_.index >= n:
            plan.values[vid] = dataclasses.replace(spec_, kind="weight", index=-1, name=extra[spec_.index - n])
        elif inputs[spec_.index] in graph.weights:
            plan.values[vid] = dataclasses.replace(spec_, kind="weight", name=inputs[spec_.index])
        else:
            plan.values[vid] = dataclasses.replace(spec_, name=inputs[spec_.index])
    plan.inputs = plan.inputs[:n]
    plan.shape_programs = _shape_programs(plan, graph, inputs)
    if folder:
        _write(folder, "plan.txt", plan.format() + "\n")
    return plan


def _shape_programs(plan: Plan, graph: GraphView, inputs: list[str]) -> tuple:
    """The plan's shape program for generic extents of its symbolic dims, where one follows."""
    from .runtime.shapes import compile_time_program

    constants = {pos: graph.constants[name] for pos, name in enumerate(inputs) if name in graph.constants}
    weights = _held_weights(plan, graph)
    if weights is None:
        return ()
    program = compile_time_program(plan, [graph.type_of(name) for name in inputs], constants, weights)
    return () if program is None else (program.to_data(),)


def _held_weights(plan: Plan, graph: GraphView) -> dict | None:
    """For the compile-time shape program: each held weight (value id → its data where the graph
    has it, else a Placeholder of its static shape); None when one's shape is not static."""
    from .runtime.shapes import Placeholder

    out = {}
    for vid, v in plan.values.items():
        if v.kind == "weight" and v.index < 0:
            c = graph.constants.get(v.name)
            t = graph.type_of(v.name)
            if c is None and not t.is_static:
                return None
            out[vid] = c if c is not None else Placeholder(t.shape, v.dtype)
    return out


def body_weights(graph: GraphView) -> dict:
    """The initializers of `graph`'s Loop/If bodies (nested) that the frontend would make weights
    rather than IR constants: name -> (data, type), data None for a large one (Compile copies
    those). The fused node's function takes them as arguments, as it does the graph's own held
    weights, so a body reads them as values of the enclosing function (an If choosing between two
    rotary caches held as Constant nodes of its branches, say)."""
    out = {}
    for node in graph.nodes:
        for body in node.subgraphs.values():
            for name in body.weights:
                out.setdefault(name, (None, body.type_of(name)))
            for name, c in body.constants.items():
                if not ir_constant(c):
                    out.setdefault(name, (c, body.type_of(name)))
            for name, entry in body_weights(body).items():
                out.setdefault(name, entry)
    return out


def hold_body_weights(graph: GraphView) -> tuple[set[str], dict]:
    """Makes the Loop/If bodies' own weights (`body_weights`) values of `graph` (their types
    declared), for the caller to hold with the graph's: (their names, name -> data for those whose
    data the bodies carry; Compile copies the others)."""
    body = body_weights(graph)
    copied = {}
    for name, (data, value_type) in body.items():
        graph.types.setdefault(name, value_type)
        if data is not None:
            copied[name] = data
    return set(body), copied


def ir_constant(c) -> bool:
    """Whether the frontend makes constant data an IR constant (hip.constant): at most
    MAX_DENSE_ELEMENTS elements of a type the IR holds."""
    from .ir.dialect import MAX_DENSE_ELEMENTS, ConstantOp

    if c.size > MAX_DENSE_ELEMENTS:
        return False
    try:
        ConstantOp(np.asarray(c))
        return True
    except ModelError:
        return False


def _weight_arguments(graph: GraphView, inputs: list[str], held) -> list[str]:
    """The held initializers the plan reads from the weight store: all but the ones ORT passes
    anyway and the small ones the frontend makes IR constants (its rule, hip.constant when
    the value has at most MAX_DENSE_ELEMENTS elements of a type the IR holds)."""
    given = set(inputs)
    out = []
    for name in held:
        if name in given or name in out:
            continue
        c = graph.constants.get(name)
        if c is not None and ir_constant(c):
            continue
        out.append(name)
    return out


def _write(folder: str, file: str, text: str) -> None:
    with open(os.path.join(folder, file), "w") as f:
        f.write(text)
