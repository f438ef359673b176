"""Inputs for the tests of the ops whose output length depends on their values, shared by the host
stand-in's tests and the GPU's: NonMaxSuppression's boxes and scores (degenerate boxes, clusters of
overlaps, ties in score) and Unique's values (repeats, a repeated slice along every axis, -0 beside
0)."""
from __future__ import annotations

import numpy as np


def random_boxes(rng, batches: int, n: int, center: int, size=(0.5, 4.0), degenerate=0.1) -> np.ndarray:
    """Boxes over a 10 x 10 field: corners in either order (center 0) or a center and a size
    (center 1); a share `degenerate` of them of zero or negative width or height."""
    lo, hi = size
    if center:
        xy = rng.uniform(0, 10, (batches, n, 2))
        wh = rng.uniform(lo, hi, (batches, n, 2))
        bad = rng.random((batches, n, 2)) < degenerate
        wh[bad] = rng.choice([0.0, -1.0], bad.sum())
        return np.concatenate([xy, wh], -1).astype(np.float32)
    a = rng.uniform(0, 10, (batches, n, 2))
    b = a + rng.uniform(lo, hi, (batches, n, 2)) * rng.choice([-1, 1], (batches, n, 2))  # either corner first
    bad = rng.random((batches, n)) < degenerate
    b[bad, 0] = a[bad, 0]  # zero height
    return np.concatenate([a, b], -1).astype(np.float32)


def clustered_boxes(rng, batches: int, n: int, center: int, clusters: int = 4) -> np.ndarray:
    """Boxes jittered around a few anchors: most pairs overlap, at every IoU."""
    anchors = rng.uniform(2, 8, (batches, clusters, 2))
    pick = rng.integers(0, clusters, (batches, n))
    xy = np.take_along_axis(anchors, pick[..., None], 1) + rng.normal(0, 0.3, (batches, n, 2))
    wh = rng.uniform(1.0, 2.0, (batches, n, 2))
    if center:
        return np.concatenate([xy, wh], -1).astype(np.float32)
    lo, hi = xy - wh / 2, xy + wh / 2
    return np.concatenate([lo[..., ::-1], hi[..., ::-1]], -1).astype(np.float32)  # [y1, x1, y2, x2]


def tied_scores(rng, batches: int, classes: int, n: int, levels: int | None = None) -> np.ndarray:
    s = rng.uniform(0, 1, (batches, classes, n))
    if levels:
        s = np.round(s * levels) / levels  # few distinct values: ties everywhere
    s = s.astype(np.float32)
    s[0, 0, 1:4] = s[0, 0, 0]  # equal scores: the lower box index first
    return s


def repeated_values(rng, shape, dtype, signed_zeros=True):
    """Small integers (many repeats), a repeated slice along every axis, and -0 beside 0 in floats."""
    x = np.asarray(rng.integers(-2, 3, shape)).astype(dtype)
    for axis, n in enumerate(x.shape):
        if n > 2:
            idx = [slice(None)] * x.ndim
            src = list(idx)
            idx[axis], src[axis] = n - 1, 0
            x[tuple(idx)] = x[tuple(src)]
    if signed_zeros and np.dtype(dtype).kind == "f":
        x[x == 0] = np.where(rng.random(int((x == 0).sum())) < 0.5, -0.0, 0.0)
    return x
