"""benchmarks/decode.py's greedy choice: the same index as np.argmax for every logits row, float16
rows ranked by their bits (ties, signed zeros, infinities, NaN)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "benchmarks"))
import decode  # noqa: E402


@pytest.mark.parametrize("seed", range(20))
def test_random_rows_match_numpy(seed):
    rng = np.random.default_rng(seed)
    row = (rng.standard_normal(32000) * rng.uniform(0.1, 30)).astype(np.float16)
    row[rng.integers(0, row.size, 50)] = row.max()  # ties: the first index wins
    assert decode.greedy_token(row) == int(np.argmax(row))
    assert decode.greedy_token(row.astype(np.float32)) == int(np.argmax(row))


@pytest.mark.parametrize("values", [
    [-0.0, 0.0, -1.0],                    # signed zeros tie: the first
    [0.0, -0.0, -3.0],
    [-5.0, -2.0, -2.0, -7.0],             # all negative
    [-np.inf, -np.inf],
    [1.0, np.inf, 65504.0, np.inf],
    [-1.0, -65504.0, -6e-8, -1e-4],       # subnormals and the extremes
    [1.0, np.nan, 2.0, np.nan],           # NaN: the first NaN, as numpy
    [-1.0, -np.nan],                      # a NaN with the sign bit set
])
def test_edge_rows_match_numpy(values):
    row = np.array(values, np.float16)
    assert decode.greedy_token(row) == int(np.argmax(row))
