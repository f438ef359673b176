"""Host steps whose results follow from shapes alone, written from a run's symbols.

A host step of shape arithmetic (Shape → Gather → Cast: a decoder's total_sequence_length from its
attention mask) has results the shape program already knows as expressions over the run's symbols
(`ShapeProgram.host_values`). Such a step is left out of the captured graph, and the executor
writes its results before the replay: one generated function for all of them, in place of each
step's numpy reference run between launches. With no host step between them, the launches around
it form one segment (one CUDA graph launch on the cuda device).

Writing a result before the run's first launch instead of at the step's place is what the step
would have written, as long as no launch of the run touches its memory before the step: the result
must be host-visible memory that no other buffer of the plan shares (its slot its own; the plan's
host-visible scratch is otherwise reused), and not ORT's (an output). The run before on the same
context is done: every replayed plan ends with a sync (ORT reads the outputs when Compute returns).
A step with any other result runs as before. `HIPEP_HOST_VALUES=0` (read when an executor is made)
runs every host step where the plan puts it, as the host-buffer rule's tests need.
"""
from __future__ import annotations

import numpy as np

from ..options import env_flag
from ..plan import HOST_VISIBLE, HostStep, Plan
from ..symbolic import compile_exprs


def enabled() -> bool:
    """Whether host steps' results are written from symbols (HIPEP_HOST_VALUES, default on)."""
    return env_flag("HIPEP_HOST_VALUES", True)


def exclusive_host_slots(plan: Plan) -> set[int]:
    """Storage roots in host-visible memory whose slot no other root shares."""
    by_slot: dict[int, list[int]] = {}
    for vid, v in plan.values.items():
        if v.owns_slot and v.space == HOST_VISIBLE:
            by_slot.setdefault(v.slot, []).append(vid)
    return {roots[0] for roots in by_slot.values() if len(roots) == 1}


class HostValues:
    """For one shape program: which of its steps are written from symbols (`skipped`, their keys in
    the program's step list), and the values they write (`targets`: value id, first element and
    element count in `values(env)`)."""

    def __init__(self, plan: Plan, steps, host_values: dict[int, tuple], symbols: list[str],
                 exclusive: set[int], external: dict):
        self.skipped: set = set()
        self.targets: list[tuple[int, int, int]] = []
        exprs: list = []
        for key, step in steps:
            if not isinstance(step, HostStep):
                continue
            outs = [vid for vid in step.outputs if vid >= 0]
            if not outs or not all(vid in host_values and _own_memory(plan, vid, exclusive, external)
                                   for vid in outs):
                continue
            self.skipped.add(key)
            for vid in outs:
                self.targets.append((vid, len(exprs), len(host_values[vid])))
                exprs.extend(host_values[vid])
        self.values = compile_exprs(exprs, symbols, "host_values")


def _own_memory(plan: Plan, vid: int, exclusive: set[int], external: dict) -> bool:
    root = plan.storage_of(vid)
    return root in exclusive and root not in external


def write(fills, values) -> None:
    """Stores the run's values into the captured host arrays: `fills` holds (flat host array,
    first element, count) per target."""
    for flat, first, count in fills:
        if count == 1:
            try:
                flat[0] = values[first]
                continue
            except OverflowError:  # past the element type: wrap as the step's Cast would
                pass
        flat[:] = np.asarray(values[first:first + count], dtype=np.int64).astype(flat.dtype)
