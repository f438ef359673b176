"""Every ONNX conformance case the cuda device would claim (partly or whole), run without a GPU
through tests/cuda_dry_run.py: each claimed subgraph is compiled and run on the CPU device while
every launch's GPU program is bound to its arguments as the cuda device would bind it. A binding
that fails for arguments its claim accepted, or a claimed plan that would run step by step, fails
here in CI instead of on the GPU machine (the GPU conformance run checks the numbers). And the
fuzzer's random graphs, a bounded run (python -m hipep.tools.cuda_dry_run --fuzz N runs more)."""
from __future__ import annotations

import numpy as np
import pytest

from conformance import support
from hipep.errors import HipepError
from hipep.tools.cuda_dry_run import NoInputs, dry_run, fuzz_case

_CASES = sorted((info for info in support.catalog().values() if not info.needs_download),
                key=lambda i: (i.category, i.name))


@pytest.mark.parametrize("info", _CASES, ids=[f"{i.category}/{i.name}" for i in _CASES])
def test_cuda_bindings_accept_what_the_cuda_device_claims(info):
    import hipep

    try:
        model, data_sets = support.load_case(info)
    except Exception as e:  # noqa: BLE001 - a case the loader cannot build: the conformance suite reports it
        pytest.skip(f"case not loadable: {support.first_line(e)}")
    try:
        report = hipep.explain(model, device="cuda")
    except Exception as e:  # noqa: BLE001 - a model hipep rejects outright: nothing is claimed
        pytest.skip(f"not claimed: {support.first_line(e)}")
    if report.claimed_count == 0:
        pytest.skip("the cuda device claims no node")
    inits = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    ins, _ = data_sets[0]
    # scalars load as numpy scalars (Range's bounds, OneHot's depth): 0-d tensors as ORT takes them
    ins = [np.asarray(x) if isinstance(x, np.generic) else x for x in ins]
    if any(not isinstance(x, np.ndarray) for x in ins):
        pytest.skip("sequence or optional inputs")
    try:
        dry_run(model, dict(zip(names, ins)))
    except NoInputs as e:
        pytest.skip(f"ORT's CPU EP cannot compute the subgraphs' inputs: {e}")
    except HipepError:
        # A case whose inputs the op itself refuses (an attn_mask whose keys disagree with K's) is
        # one the conformance suite does not run either: ORT's CPU EP refuses it too.
        tc = info.test_case
        probe = support.probe_ort_cpu(model, data_sets, tc.rtol, tc.atol)
        if probe["runnable"]:
            raise
        pytest.skip(f"not runnable by ORT's CPU EP either: {probe['error']}")


def test_random_graphs_bind_as_claimed():
    findings = [(seed, fuzz_case(seed)) for seed in range(400)]
    assert sum(v == "ok" for _, (v, _) in findings) > 200  # most graphs are claimed and run
    assert [(seed, d) for seed, (v, d) in findings if v == "finding"] == []
