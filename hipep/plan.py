"""The launch plan: what a compiled subgraph does at run time, as plain data.

A plan names its inputs and outputs (the fused node's, in ORT's order), holds the small constants
it needs, and lists steps in execution order. Each step runs one registry op on named values.
Nothing here refers to the compiler, so a plan runs without it (and can be serialised later).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Step:
    domain: str
    op_type: str
    node: str  # the ONNX node's label, for error messages
    attributes: dict[str, Any]  # resolved (defaults filled in)
    inputs: tuple[str, ...]  # value names; "" for an omitted optional input
    outputs: tuple[str, ...]  # value names; "" for an output nobody reads


@dataclass
class Plan:
    name: str
    inputs: list[str]
    outputs: list[str]
    output_elem_types: list[int]
    steps: list[Step]
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    # For each step, the values whose last reader it is (freed after it runs).
    release_after: list[tuple[str, ...]] = field(default_factory=list)
