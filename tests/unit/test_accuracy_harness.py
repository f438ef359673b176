"""The accuracy harness itself: its comparison rules, and one synthetic model end to end."""
from __future__ import annotations

import numpy as np

from hipep.tools.accuracy import compare, main


def test_compare_flags_nonfinite_mismatch_and_threshold():
    ok, = compare("m", "s", ["y"], [np.array([1.0, np.inf])], [np.array([1.0, np.inf])], 1e-3)
    assert ok.passed and ok.nonfinite_equal and ok.rel_l2 == 0
    bad, = compare("m", "s", ["y"], [np.array([1.0, np.nan])], [np.array([1.0, 2.0])], 1e-3)
    assert not bad.nonfinite_equal and not bad.passed
    far, = compare("m", "s", ["y"], [np.array([1.0, 2.1])], [np.array([1.0, 2.0])], 1e-3)
    assert far.rel_l2 > 1e-3 and not far.passed


def test_synthetic_models_pass(capsys):
    assert main(["--models", "vit-block", "conv-net", "matmulnbits", "qmoe", "gqa-seq256"]) == 0
    out = capsys.readouterr().out
    assert "| vit-block | run | y |" in out and out.strip().endswith("s") and "PASS" in out
