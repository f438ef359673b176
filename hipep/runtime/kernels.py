"""Which kernel a plan step launches: the step's registry op as the entry point, its attributes
as specialization constants, its buffer arguments' dtypes (inputs, then outputs)."""
from __future__ import annotations

from ..plan import HostStep, Launch, Plan
from .device import Kernel


def kernel_of(plan: Plan, step: Launch | HostStep, label: str) -> Kernel:
    dtypes = tuple("" if vid < 0 else plan.values[vid].dtype for vid in (*step.inputs, *step.outputs))
    return Kernel(name=step.kernel if isinstance(step, Launch) and step.kernel else step.op,
                  constants=step.attributes, arity=len(step.inputs), dtypes=dtypes, label=label)
