"""The device interface every backend implements (cpu here; cuda and hip later)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

import numpy as np

from ..ops.registry import OpDef


class Device(ABC):
    name: str

    @abstractmethod
    def run_op(self, op: OpDef, inputs: Sequence[np.ndarray | None], attributes: dict) -> Sequence[np.ndarray]:
        """Runs one op and returns its outputs."""

    @abstractmethod
    def to_host(self, value) -> np.ndarray:
        """A host numpy array with the value's contents (a sync point)."""


def open_device(kind: str, device_id: int = 0) -> Device:
    """The device for a resolved `device` option."""
    if kind == "cpu":
        from .cpu import CpuDevice

        return CpuDevice()
    raise ValueError(f"device '{kind}' has no backend in this build of hipep")
