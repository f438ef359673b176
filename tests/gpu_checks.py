"""What the tests/gpu files share: a model run on the CUDA device several times (first run, bound
replay, CUDA graph replay), every output compared with ORT's CPU EP (or a given oracle)."""
from __future__ import annotations

import functools

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP

import hipep

from helpers import cpu_session
from ort_differences import FOLLOWED, ORT_VERSION


@functools.lru_cache(maxsize=1)
def _schema_attributes() -> dict:
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    known: dict = {}
    for schema in C.get_all_operator_schema():
        known.setdefault((schema.domain, schema.name), set()).update(schema.attributes)
    return known


def unknown_attributes(model) -> list[str]:
    """The nodes' attributes this onnxruntime's schemas do not have (newer ones: such a model does
    not load on it, whatever the EP)."""
    known = _schema_attributes()
    return [f"{node.op_type}'s attribute '{a.name}'" for node in model.graph.node
            if (node.domain or "", node.op_type) in known
            for a in node.attribute if a.name not in known[(node.domain or "", node.op_type)]]


def reference_outputs(model, feeds, newest: bool = False) -> list:
    """ORT's CPU EP's outputs for `feeds`. With `newest` (ops whose references mirror the newest
    release: MoE, QMoE, the linear-attention ops), where this onnxruntime is older than that release
    (its CPU EP lacks their newer attributes or computes them otherwise: tests/ort_differences.py),
    hipep's CPU reference device's instead: the numpy references, tested against that release's
    CPU EP in tests/unit."""
    if newest and ORT_VERSION < FOLLOWED:
        return hipep.InferenceSession(model, device="cpu").run(None, feeds)
    return cpu_session(model).run(None, feeds)


def tolerance(elem) -> dict:
    """Float outputs: f32 to 1e-5, f16/bf16 to 1e-2."""
    return dict(rtol=1e-5, atol=1e-6) if elem == TP.FLOAT else dict(rtol=1e-2, atol=1e-3)


def assert_claimed_whole(model) -> None:
    report = hipep.explain(model, device="cuda")
    assert not report.rejections, [(r.node.name, r.reason) for r in report.rejections]


def check_on_cuda(model, feeds, elem=TP.FLOAT, runs=3, *, exact=False, bits=False, want=None, claimed=False,
                  tol: dict | None = None, newest: bool = False):
    """Runs `model` on the CUDA device `runs` times and compares each run's outputs with `want`
    (default: reference_outputs(model, feeds, newest)): bit for bit where `bits`, equal values where
    `exact` or the output is not float, else within `tol` (default tolerance(elem)). `claimed`:
    first asserts that the cuda device claims every node. Returns the session."""
    gaps = unknown_attributes(model)
    if gaps:
        pytest.skip(f"onnxruntime {ort.__version__} does not know {', '.join(gaps)}: the model does not load on it")
    if claimed:
        assert_claimed_whole(model)
    sess = hipep.InferenceSession(model, device="cuda")
    want = reference_outputs(model, feeds, newest) if want is None else want
    tol = tolerance(elem) if tol is None else tol
    for _ in range(runs):
        got = sess.run(None, feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            if bits:
                np.testing.assert_array_equal(g.view(f"u{g.itemsize}"), w.view(f"u{w.itemsize}"))
            elif exact or g.dtype.kind != "f":
                np.testing.assert_array_equal(g, w)
            else:
                np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), **tol)
    return sess
