"""Compile: a claimed subgraph (GraphView) → a launch Plan (hipep.plan), through the IR pipeline.

GraphView → frontend (hip dialect) → hip-infer-shapes → hip-lower-slices → hip-bufferize →
hip-fuse-pointwise → hip-assign-memory-spaces → hip-materialize-host-scalars → hip-reuse-buffers →
hip-insert-syncs → hip-emit-plan → Plan. With the option `fusion=off` hip-fuse-pointwise is left
out (every pointwise node stays a launch of its own). With the `dump_ir` option the IR after each pass and the plan are written
to `<dump_ir>/<subgraph>/NN-<pass>.mlir` and `plan.txt`. The `pass_options` option overrides
passes' options (tests use it to switch a rule off and see it matter).
"""
from __future__ import annotations

import dataclasses
import os
import re

from .errors import ModelError, OptionError
from .graph import GraphView
from .plan import Plan


def compile_subgraph(graph: GraphView, name: str, inputs: list[str], outputs: list[str], options=None) -> Plan:
    from .frontend import import_graph
    from .ir.api import print_ir
    from .passes import pipeline_with_overrides, run_pipeline
    from .passes.emit_plan import take_plan

    try:
        leave_out = ("hip-fuse-pointwise",) if getattr(options, "fusion", "on") == "off" else ()
        spec = pipeline_with_overrides(getattr(options, "pass_options", "") or "", leave_out)
    except ValueError as e:
        raise OptionError(f"option 'pass_options': {e}") from None
    dump = getattr(options, "dump_ir", "") or ""
    folder = os.path.join(dump, re.sub(r"[^A-Za-z0-9_.-]", "_", name)) if dump else ""
    module = import_graph(graph, inputs, outputs, name)
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
    # ORT hands large initializers in as inputs: they are weights, not activations.
    for vid in plan.inputs:
        spec_ = plan.values[vid]
        if spec_.index < len(inputs) and inputs[spec_.index] in graph.weights:
            plan.values[vid] = dataclasses.replace(spec_, kind="weight", name=inputs[spec_.index])
        else:
            plan.values[vid] = dataclasses.replace(spec_, name=inputs[spec_.index])
    plan.shape_programs = _shape_programs(plan, graph, inputs)
    if folder:
        _write(folder, "plan.txt", plan.format() + "\n")
    return plan


def _shape_programs(plan: Plan, graph: GraphView, inputs: list[str]) -> tuple:
    """The plan's shape program for generic extents of its symbolic dims, where one follows."""
    from .runtime.shapes import compile_time_program

    constants = {pos: graph.constants[name] for pos, name in enumerate(inputs) if name in graph.constants}
    program = compile_time_program(plan, [graph.type_of(name) for name in inputs], constants)
    return () if program is None else (program.to_data(),)


def _write(folder: str, file: str, text: str) -> None:
    with open(os.path.join(folder, file), "w") as f:
        f.write(text)
