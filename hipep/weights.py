"""hipep's own copies of the weights: the constant initializers a compiled subgraph reads.

GetCapability asks ORT not to pass constant initializers to Compute
(`drop_constant_initializers = true`), so ORT frees its copies once the session is set up, and
the OrtGraph Compile sees — with every initializer value it hands out — is gone when Compile
returns. So Compile copies them (csrc/graph_view.cc: straight from ORT's memory, or from ORT's
mapping of an external-data file, into numpy arrays Python owns), and each compiled subgraph
keeps the ones its plan reads in a WeightStore. The plan names them as values of kind "weight"
with index -1; the executor binds each by name: `Executor(plan, device, weights=store.arrays)`.

Compile-time transforms of weights that the plan owns (upload to device memory, repacking into a
kernel's layout, dequantization) belong here, in `WeightStore.for_plan`: it is the one place
where the initializers become what the plan's kernels read.
"""
from __future__ import annotations

import numpy as np

from .errors import ModelError
from .graph import GraphView
from .plan import Plan


class WeightStore:
    """The weights of one compiled subgraph: initializer name → read-only numpy array."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.arrays: dict[str, np.ndarray] = {name: _read_only(a) for name, a in arrays.items()}

    @staticmethod
    def for_plan(plan: Plan, graph: GraphView, copied: dict[str, np.ndarray]) -> "WeightStore":
        """The arrays `plan`'s weight values name, taken from what Compile copied: large
        initializers in `copied`, small ones in `graph.constants`. Nothing else is kept, so the
        copies the plan does not read are freed with the graph description."""
        arrays: dict[str, np.ndarray] = {}
        for spec in plan.values.values():
            if spec.kind != "weight" or spec.index >= 0 or spec.name in arrays:
                continue
            a = copied.get(spec.name)
            if a is None:
                a = graph.constants.get(spec.name)
            if a is None:
                t = graph.type_of(spec.name)
                raise ModelError(f"{plan.name}: initializer '{spec.name}' ({t}) could not be copied: numpy has "
                                 f"no {t.dtype_name} element type")
            arrays[spec.name] = a
        return WeightStore(arrays)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays.values())

    def __len__(self) -> int:
        return len(self.arrays)


def _read_only(a: np.ndarray) -> np.ndarray:
    """The array itself (no copy), C-contiguous and no longer writable: kernels only read weights."""
    a = np.ascontiguousarray(a)
    if a.flags.writeable:
        a.flags.writeable = False
    return a
