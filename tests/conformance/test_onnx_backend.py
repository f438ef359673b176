"""ONNX's own backend conformance suite, run on hipep through `hipep.backend`.

`onnx.backend.test.BackendTest` builds every node case (generated in memory from
onnx.backend.test.case.node: the wheel ships no data for them) and every model case shipped in the
onnx wheel: the "light" real models (AlexNet, DenseNet-121, Inception v1/v2, ResNet-50, ShuffleNet,
SqueezeNet, VGG-19, ZFNet-512, from onnx/backend/test/data/light, fed deterministic dummy inputs),
and the simple and PyTorch-exported models. Real models that would have to be downloaded are
excluded; nothing else is. Each case keeps its own rtol/atol (the runner's).

Before a case runs, support.run_case sorts it (see tests/conformance/support.py): a model ORT's own
CPU EP cannot load or run is skipped as "not runnable by ORT"; one hipep claims no node of is
skipped as "unclaimed" (hipep.backend.is_compatible, or the session's assignment info). Every
other case is a test: a wrong or failing result FAILS it (no expected-failure lists). conftest.py
prints the counts at the end and writes them as JSON (docs/conformance.md tells where).

HIPEP_CONFORMANCE_OPT_LEVEL=ORT_ENABLE_ALL (or another GraphOptimizationLevel name) runs the cases
with ORT's graph optimizations on; the backend's default is ORT_DISABLE_ALL.
"""
from __future__ import annotations

import functools
import os
import re

import onnx.backend.test

import hipep.backend as backend
from conformance import support

_catalog = support.catalog()  # first: it generates the node cases with their numpy warnings silenced
_opt_level = os.environ.get("HIPEP_CONFORMANCE_OPT_LEVEL")
_test_kwargs = {info.name: {"graph_optimization_level": _opt_level} for info in _catalog.values()} if _opt_level else None

def _compare_sequences_elementwise() -> None:
    """onnx's Runner.assert_similar_outputs recurses into a sequence output by passing one tensor
    where it expects a list of outputs, so any sequence of tensors (test_loop16_seq_none) fails
    with "len() of unsized object" whatever the backend computed. Compare such sequences element
    by element with the runner's own tensor comparison instead; tensors are untouched."""
    from onnx.backend.test.runner import Runner

    original = Runner.assert_similar_outputs.__func__

    def assert_similar_outputs(cls, ref_outputs, outputs, rtol, atol, model_dir=None):
        override = support.TOLERANCE_OVERRIDES.get(support.current_case.get("name", ""))
        if override is not None:
            rtol, atol = max(rtol, override[0]), max(atol, override[1])
        ref_outputs, outputs = list(ref_outputs), list(outputs)
        for i, (r, o) in enumerate(zip(ref_outputs, outputs)):
            if isinstance(o, (list, tuple)) and isinstance(r, (list, tuple)):
                assert len(r) == len(o), f"output {i}: sequence of {len(o)} items, expected {len(r)}"
                for rj, oj in zip(r, o):
                    original(cls, [rj], [oj], rtol, atol, model_dir)
                ref_outputs[i] = outputs[i] = None
        kept = [(r, o) for r, o in zip(ref_outputs, outputs) if o is not None]
        if len(ref_outputs) != len(outputs) or kept:
            original(cls, [r for r, _ in kept] if len(ref_outputs) == len(outputs) else ref_outputs,
                     [o for _, o in kept] if len(ref_outputs) == len(outputs) else outputs, rtol, atol, model_dir)

    Runner.assert_similar_outputs = classmethod(assert_similar_outputs)


_compare_sequences_elementwise()
backend_test = onnx.backend.test.BackendTest(backend, __name__, _test_kwargs)

# One device per run (support.DEVICE): the other device's copies of the cases are not run.
backend_test.exclude(r"_cuda$" if support.DEVICE == "CPU" else r"_cpu$")

# Real models fetched from the network are not part of this suite (the light ones are local).
for _name in sorted(info.name for info in _catalog.values() if info.needs_download):
    backend_test.exclude(rf"^{re.escape(_name)}_(cpu|cuda)$")


def _classified(category: str, method_name: str, func):
    @functools.wraps(func)  # keeps the runner's skip marks (devices hipep's backend lacks, excludes)
    def test(self):
        return support.run_case(category, method_name, func, self)

    return test


def _install() -> None:
    # (a function, so no TestCase class is left in a module-level loop variable for pytest to
    # collect twice)
    for class_name, cls in backend_test.test_cases.items():
        category = class_name[len("OnnxBackend"):-len("Test")]
        for attr in [a for a in vars(cls) if a.startswith("test_")]:
            setattr(cls, attr, _classified(category, attr, getattr(cls, attr)))
        globals()[class_name] = cls


_install()
