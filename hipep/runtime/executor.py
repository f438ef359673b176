"""Runs a Plan on a Device. Stateless per run, so one executor serves concurrent runs."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import HipepError, RuntimeShapeError
from ..graph import numpy_dtype
from ..ops.registry import lookup
from ..plan import Plan
from .device import Device


class Executor:
    def __init__(self, plan: Plan, device: Device):
        self.plan = plan
        self.device = device
        self._ops = []
        for step in plan.steps:
            op = lookup(step.domain, step.op_type)
            if op is None:  # the compiler only emits registered ops; a plan from elsewhere may not
                raise HipepError(f"plan '{plan.name}' uses unknown op {step.domain or 'ai.onnx'}::{step.op_type}")
            self._ops.append(op)
        self._out_dtypes = [numpy_dtype(t) for t in plan.output_elem_types]

    def run(self, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        plan = self.plan
        if len(inputs) != len(plan.inputs):
            raise HipepError(f"{plan.name}: got {len(inputs)} inputs, the plan expects {len(plan.inputs)}")
        env: dict[str, np.ndarray | None] = dict(plan.constants)
        env.update(zip(plan.inputs, inputs))
        keep = set(plan.outputs)
        for step, op, dead in zip(plan.steps, self._ops, plan.release_after):
            args = [env[name] if name else None for name in step.inputs]
            try:
                results = self.device.run_op(op, args, step.attributes)
            except HipepError as e:
                raise type(e)(f"node '{step.node}' ({step.op_type}): {e}") from None
            except (ValueError, IndexError, TypeError) as e:
                shapes = ", ".join("None" if a is None else f"{list(np.shape(a))}:{np.asarray(a).dtype}" for a in args)
                raise RuntimeShapeError(f"node '{step.node}' ({step.op_type}) failed on inputs ({shapes}): {e}") from None
            for name, value in zip(step.outputs, results):
                if name:
                    env[name] = value
            for name in dead:
                if name not in keep:
                    env.pop(name, None)
        outs = []
        for name, dtype in zip(plan.outputs, self._out_dtypes):
            value = np.ascontiguousarray(self.device.to_host(env[name]))
            if value.dtype != dtype:
                raise HipepError(f"{plan.name}: output '{name}' came out as {value.dtype}, the graph declares {dtype}")
            outs.append(value)
        return outs
