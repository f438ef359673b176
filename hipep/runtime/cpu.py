"""The CPU reference device: runs each op's numpy reference from the registry. It is the oracle
that GPU backends are tested against, and the device CI runs everything on."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..ops.registry import OpDef
from .device import Device


class CpuDevice(Device):
    name = "cpu"

    def run_op(self, op: OpDef, inputs: Sequence[np.ndarray | None], attributes: dict) -> Sequence[np.ndarray]:
        return op.reference(list(inputs), attributes)

    def to_host(self, value) -> np.ndarray:
        return np.asarray(value)
