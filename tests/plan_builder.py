"""Hand-written plans for the runtime's tests: values, inputs, constants and buffers in memory
spaces and slots, then a Plan of the steps given."""
from __future__ import annotations

import numpy as np

from hipep.plan import DEVICE, HOST_VISIBLE, Plan, ValueSpec


class Builder:
    def __init__(self):
        self.values: dict[int, ValueSpec] = {}
        self.inputs: list[int] = []
        self.constants: dict[str, np.ndarray] = {}
        self.slots = {DEVICE: 0, HOST_VISIBLE: 0}

    def input(self, dtype="float32", name="x"):
        vid = len(self.values)
        self.values[vid] = ValueSpec("input", dtype, name, index=len(self.inputs))
        self.inputs.append(vid)
        return vid

    def const(self, array, name=None):
        vid = len(self.values)
        key = name or f"c{vid}"
        self.constants[key] = np.asarray(array)
        self.values[vid] = ValueSpec("constant", np.asarray(array).dtype.name, key, constant=key)
        return vid

    def buf(self, dtype="float32", space=DEVICE, slot=None, name=None):
        vid = len(self.values)
        if slot is None:
            slot = self.slots[space]
            self.slots[space] += 1
        self.values[vid] = ValueSpec("buffer", dtype, name or f"v{vid}", space=space, slot=slot)
        return vid

    def plan(self, steps, outputs, name="p"):
        return Plan(name, dict(self.values), list(self.inputs), list(outputs), tuple(steps), dict(self.constants))
