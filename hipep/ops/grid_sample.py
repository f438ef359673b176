"""AffineGrid (opset 20) and GridSample (opsets 16, 20, 22): a spatial transformer's grid and its
sampling. AffineGrid is an ONNX function, but ONNX Runtime's CPU EP runs its own kernel for it
(f32 and f64), so ORT never replaces the node by its body; hipep follows that kernel (as of
onnxruntime 1.32): the base grid along each axis is Eigen's LinSpaced(L, -1, 1) in the element
type (-1 + i * (2 / (L - 1)), the last point 1, a one-point axis 1), times (L - 1) / L without
align_corners, each operation rounded; then, in the element type, a component is
(r0 * x + r1 * y) + t in 2-D and, in 3-D, (r0 * x + (r1 * y + r2 * z)) + t for f32 but
((r0 * x + r1 * y) + r2 * z) + t for f64 (Eigen's sums as ORT's kernel gets them, measured bit for
bit), each product and sum rounded. The grid size is a host input.

GridSample follows ONNX Runtime's CPU kernel operation for operation, so
that results agree with it bit for bit (measured against onnxruntime 1.32: every mode, padding mode
and align_corners, f32, f16, f64 and mixed f16/f32, 4-D and 5-D, grids far outside [-1, 1]).

What ORT does, and so what this does:
  * coordinates: GsDenormalize in the compute type (f32; f64 for f64 inputs), one rounding per
    operation: align_corners ((g + 1) / 2 * (L - 1)), else (((g + 1) * L - 1) / 2). Grid
    component 0 is x (the last axis of X), 1 is y, 2 is z;
  * nearest: std::nearbyint (round half to even) of the coordinate, one pixel;
  * linear: taps floor(c) and floor(c) + 1, weights (floor(c) + 1 - c) and (c - floor(c));
    cubic: taps floor(c) - 1 .. floor(c) + 2, Keys coefficients (a = -0.75) of (c - base) - 1;
  * padding is applied to each tap's integer index, not to the coordinate: zeros reads 0 outside,
    border clamps the index, reflection reflects the index (as a float, GsReflect) by the borders
    [-0.5, L - 0.5] (align_corners=0) or [0, L - 1] (align_corners=1), then truncates it;
  * the sums nest innermost axis first: dy2 * (dx2 * p11 + dx1 * p12) + dy1 * (...) and, for cubic,
    four row sums then one column sum, each left to right. One exception: 2-D linear with zeros
    padding and align_corners=0 takes ORT's precomputed-plan path, which multiplies the weights
    first (w11 = dy2 * dx2, ...) and sums w11 * p11 + w12 * p12 + w21 * p21 + w22 * p22, giving
    +0 where no tap is inside;
  * f16 runs in f32, rounded once at the end (ORT inserts casts to f32 around its float kernel,
    for X and for the grid alike).
Where ORT's C++ is undefined (a float index beyond int64's range or NaN, reflection on a
one-pixel axis with align_corners=1, which divides by zero), both hipep devices clamp an index
to +-INDEX_BOUND before converting it, and reflect a one-pixel axis to its one pixel.

ORT's CPU EP runs 2 and 3 spatial dims, cubic on 2 only, X and grid of one type (f16 going
through f32), f64 from opset 20; the claim refuses the rest with that reason. ONNX's opset 16 takes 4-D X only.
"""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ._common import elem_of, input_type, kernel, pshape_str, result, shape_of, shape_rule, tensor_type, type_name
from .registry import F16, F32, F64, I64, OpDef, register

# The mode names of each since-version (ONNX renamed them at opset 20), and the canonical names
# the references and kernels use.
MODES = {16: ("bilinear", "nearest", "bicubic"), 20: ("linear", "nearest", "cubic"), 22: ("linear", "nearest", "cubic")}
_CANONICAL = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "nearest": "nearest", "cubic": "cubic"}
PADDING_MODES = ("zeros", "border", "reflection")
SPATIAL_RANKS = (2, 3)  # ORT's CPU EP: 4-D and 5-D X
CUBIC_SPATIAL_RANKS = (2,)  # ORT's CPU EP: cubic on 4-D X only
# Float indices are clamped to this before conversion to int64 (kernels/grid_sample.hip uses the
# same bound): far beyond any extent, so a clamped tap is outside whatever the mode does with it.
INDEX_BOUND = 9.0e18
_CUBIC_A = -0.75  # ORT's GsGetCubicCoeffs: a fixed Keys coefficient (no attribute)


def grid_sample_mode(attrs) -> str:
    """The canonical mode ('linear', 'nearest', 'cubic') of resolved attributes; the attribute
    default depends on the opset (bilinear / linear), so an absent mode is linear."""
    mode = attrs.get("mode")
    return "linear" if mode is None else _CANONICAL.get(mode, mode)


def weights_first(mode: str, padding: str, align_corners: bool, spatial: int) -> bool:
    """Whether ORT takes its 2-D bilinear zeros-padding path (weights multiplied first)."""
    return mode == "linear" and padding == "zeros" and not align_corners and spatial == 2


def _expected_grid(x) -> str:
    """The grid shape X of partial shape x takes, in words: [N, *output extents, r]."""
    r = len(x) - 2
    names = {2: ["H_out", "W_out"], 3: ["D_out", "H_out", "W_out"]}.get(r, [f"out_{k}" for k in range(r)])
    return f"[{'N' if x[0] is None else x[0]}, {', '.join(names)}, {r}]"


def grid_sample_shape(x, grid):
    """The output shape (N, C, *grid's spatial extents) of partial shapes x and grid (dims int or
    None, a shape None where unranked), or RuntimeShapeError where they disagree: grid must be
    [N, *output extents, r] for X [N, C, *r input extents]."""
    if x is not None and len(x) < 3:
        raise RuntimeShapeError(f"GridSample: X has shape {pshape_str(x)}; it must be [N, C, *spatial] with at "
                                f"least one spatial axis")
    if grid is not None and len(grid) < 3:
        raise RuntimeShapeError(f"GridSample: grid has shape {pshape_str(grid)}; it must be [N, *output spatial, "
                                f"spatial rank]")
    if x is None and grid is None:
        return None
    if x is not None and grid is not None:
        r = len(x) - 2
        want = _expected_grid(x)
        if len(grid) != len(x):
            raise RuntimeShapeError(f"GridSample: grid has shape {pshape_str(grid)} (rank {len(grid)}), expected "
                                    f"{want} (rank {len(x)}) for X of shape {pshape_str(x)}")
        if grid[-1] is not None and grid[-1] != r:
            raise RuntimeShapeError(f"GridSample: grid has shape {pshape_str(grid)}, its last extent must be {r} "
                                    f"(X of shape {pshape_str(x)} has {r} spatial axes): expected {want}")
        if x[0] is not None and grid[0] is not None and x[0] != grid[0]:
            raise RuntimeShapeError(f"GridSample: grid has shape {pshape_str(grid)}, its batch {grid[0]} differs "
                                    f"from X's {x[0]} (X has shape {pshape_str(x)}): expected {want}")
    if grid is None:
        return (x[0], x[1]) + (None,) * (len(x) - 2)
    n = grid[0] if x is None or x[0] is None else x[0]
    return (n, None if x is None else x[1]) + tuple(grid[1:-1])


# ---- the reference -----------------------------------------------------------------------------

def _denormalize(g, length: int, align_corners: bool, ct):
    one, two = ct(1), ct(2)
    if align_corners:
        return ((g + one) / two * ct(length - 1)).astype(ct)
    return (((g + one) * ct(length) - one) / two).astype(ct)


def _to_index(f, ct):
    """static_cast<int64_t>(f) made total: NaN and values beyond +-INDEX_BOUND clamped first."""
    bound = ct(INDEX_BOUND)
    return np.where(np.isnan(f), -bound, np.clip(f, -bound, bound)).astype(np.int64)


def _borders(length: int, align_corners: bool, ct):
    """ORT's reflection borders, computed in f32 (its `W_in - 0.5f`) whatever the compute type."""
    f = np.float32(length)
    if align_corners:
        return ct(np.float32(0)), ct(f - np.float32(1))
    return ct(np.float32(-0.5)), ct(f - np.float32(0.5))


def _reflect(i, length: int, align_corners: bool, ct):
    """ORT's GsReflect of integer indices i (as floats), truncated back to indices (and clamped to
    the axis: only the undefined cases of ORT's arithmetic ever need it)."""
    lo, hi = _borders(length, align_corners, ct)
    span = ct(hi - lo)
    if span == 0:  # one pixel with align_corners=1: ORT divides by zero; the pixel is the answer
        return np.zeros_like(i)
    f = i.astype(ct)
    below, above = f < lo, f > hi
    dx = np.where(below, lo - f, f - hi).astype(ct)
    turns = np.trunc(dx / span).astype(np.int64)  # ORT: int n = static_cast<int>(dx / range)
    rest = (dx - turns.astype(ct) * span).astype(ct)
    even = turns % 2 == 0
    low_side, high_side = (lo + rest).astype(ct), (hi - rest).astype(ct)
    f = np.where(below, np.where(even, low_side, high_side), np.where(above, np.where(even, high_side, low_side), f))
    return np.clip(np.trunc(f).astype(np.int64), 0, length - 1)


def _resolve(i, length: int, padding: str, align_corners: bool, ct):
    """(index into the axis, inside mask or None) of tap indices i under the padding mode."""
    if padding == "zeros":
        return np.clip(i, 0, length - 1), (i >= 0) & (i < length)
    if padding == "border":
        return np.clip(i, 0, length - 1), None
    return _reflect(i, length, align_corners, ct), None


def _cubic_coeffs(t, ct):
    """ORT's GsGetCubicCoeffs of fractions t, in its evaluation order (5a, 8a, 4a, a + 2, a + 3
    are exact constants)."""
    a, one, two = ct(_CUBIC_A), ct(1), ct(2)
    s = np.abs(t)
    s1, u, s2 = s + one, one - s, two - s
    c0 = ((a * s1 - ct(5 * _CUBIC_A)) * s1 + ct(8 * _CUBIC_A)) * s1 - ct(4 * _CUBIC_A)
    c1 = ((ct(_CUBIC_A + 2) * s - ct(_CUBIC_A + 3)) * s) * s + one
    c2 = ((ct(_CUBIC_A + 2) * u - ct(_CUBIC_A + 3)) * u) * u + one
    c3 = ((a * s2 - ct(5 * _CUBIC_A)) * s2 + ct(8 * _CUBIC_A)) * s2 - ct(4 * _CUBIC_A)
    return [c.astype(ct) for c in (c0, c1, c2, c3)]


def grid_sample_compute(x, grid, mode: str, padding: str, align_corners: bool) -> np.ndarray:
    """GridSample of X [N, C, *S_in] at grid [N, *S_out, r] in the compute type (f64 for f64 X,
    else f32); the caller rounds to X's type."""
    ct = np.float64 if x.dtype == np.float64 else np.float32
    n, c = x.shape[:2]
    extents = x.shape[2:]
    r = len(extents)
    out_shape = (n, c) + grid.shape[1:-1]
    if 0 in out_shape:
        return np.zeros(out_shape, ct)
    if 0 in extents:
        if padding != "zeros":
            raise RuntimeShapeError(f"GridSample: X has shape {list(x.shape)}, an empty spatial axis: "
                                    f"padding_mode='{padding}' has no pixel to take (zeros gives 0)")
        return np.zeros(out_shape, ct)
    # Channels last, so one fancy index per tap gathers every channel: [N, *S_out, C].
    image = np.moveaxis(x.astype(ct), 1, -1)
    g = grid.astype(ct)
    batch = np.arange(n).reshape((n,) + (1,) * (grid.ndim - 2))
    coords = [_denormalize(g[..., r - 1 - k], extents[k], align_corners, ct) for k in range(r)]

    def pixel(taps):  # taps: one int64 array [N, *S_out] per axis -> values [N, *S_out, C]
        index, inside = [batch], None
        for k, i in enumerate(taps):
            idx, ok = _resolve(i, extents[k], padding, align_corners, ct)
            index.append(idx)
            if ok is not None:
                inside = ok if inside is None else inside & ok
        v = image[tuple(index)]
        return v if inside is None else np.where(inside[..., None], v, ct(0)).astype(ct)

    if mode == "nearest":
        y = pixel([_to_index(np.rint(cc), ct) for cc in coords])
    else:
        if mode == "linear":
            low = [_to_index(np.floor(cc), ct) for cc in coords]
            taps = [[lo, lo + 1] for lo in low]
            weights = [[((lo + 1).astype(ct) - cc).astype(ct), (cc - lo.astype(ct)).astype(ct)]
                       for lo, cc in zip(low, coords)]
        else:
            base = [_to_index(np.floor(cc), ct) - 1 for cc in coords]
            taps = [[b + j for j in range(4)] for b in base]
            weights = [_cubic_coeffs(((cc - b.astype(ct)) - ct(1)).astype(ct), ct) for b, cc in zip(base, coords)]
        if weights_first(mode, padding, align_corners, r):
            y, anywhere = None, None
            for jh in range(2):
                for jw in range(2):
                    w = (weights[0][jh] * weights[1][jw]).astype(ct)
                    term = (w[..., None] * pixel([taps[0][jh], taps[1][jw]])).astype(ct)
                    y = term if y is None else (y + term).astype(ct)
                    ok = ((taps[0][jh] >= 0) & (taps[0][jh] < extents[0])
                          & (taps[1][jw] >= 0) & (taps[1][jw] < extents[1]))
                    anywhere = ok if anywhere is None else anywhere | ok
            y = np.where(anywhere[..., None], y, ct(0)).astype(ct)
        else:
            def nested(k, chosen):  # the sum over axis k's taps of its weights times the inner sums
                if k == r:
                    return pixel(chosen)
                acc = None
                for j in range(len(taps[k])):
                    term = (weights[k][j][..., None] * nested(k + 1, chosen + [taps[k][j]])).astype(ct)
                    acc = term if acc is None else (acc + term).astype(ct)
                return acc
            y = nested(0, [])
    return np.moveaxis(y, -1, 1)


@kernel("GridSample")
def _grid_sample(inputs, attrs):
    x, grid = inputs[0], inputs[1]
    grid_sample_shape(x.shape, grid.shape)  # the shapes' agreement, with a message naming both
    mode = grid_sample_mode(attrs)
    padding = attrs.get("padding_mode", "zeros")
    if mode not in ("linear", "nearest", "cubic") or padding not in PADDING_MODES:
        raise RuntimeShapeError(f"GridSample: mode='{attrs.get('mode')}' / padding_mode='{padding}' is not supported")
    y = grid_sample_compute(x, grid, mode, padding, bool(int(attrs.get("align_corners", 0))))
    return [result(y, x.dtype)]


@shape_rule("GridSample")
def _grid_sample_rule(types, values, attrs, num_outputs):
    return [tensor_type(elem_of(types[0]), grid_sample_shape(shape_of(types[0]), shape_of(types[1])))]


def _claim_grid_sample(node, graph, attrs):
    v = node.since_version
    modes = MODES[v]
    mode = attrs.get("mode")
    if mode is not None and mode not in modes:
        return f"attribute mode='{mode}' is not one of {', '.join(modes)} (GridSample-{v})"
    padding = attrs.get("padding_mode", "zeros")
    if padding not in PADDING_MODES:
        return f"attribute padding_mode='{padding}' is not one of {', '.join(PADDING_MODES)}"
    xt, gt = input_type(node, graph, 0), input_type(node, graph, 1)
    if xt is not None and gt is not None and F64 in (xt.elem_type, gt.elem_type) and xt.elem_type != gt.elem_type:
        return (f"X is {type_name(xt.elem_type)} and grid {type_name(gt.elem_type)}: ONNX Runtime's CPU EP has "
                f"GridSample kernels for f32 and f64 with a grid of the same type (f16 runs as f32), none "
                f"mixing f64 with another type")
    if v == 16 and xt is not None and xt.elem_type == F64:
        return "X is f64: ONNX Runtime's CPU EP has no f64 GridSample-16 kernel (f64 runs from opset 20)"
    rank = xt.rank if xt is not None and xt.rank is not None else (gt.rank if gt is not None else None)
    if rank is None:
        return None
    spatial = rank - 2
    if v == 16 and rank != 4:
        return f"input X has rank {rank}; GridSample-16 takes 4-D (N, C, H, W) inputs (5-D came with opset 20)"
    if spatial not in SPATIAL_RANKS:
        return (f"GridSample over {spatial} spatial dims (X of rank {rank}): ONNX Runtime's CPU EP has kernels "
                f"for 2 and 3 spatial dims only")
    if grid_sample_mode(attrs) == "cubic" and spatial not in CUBIC_SPATIAL_RANKS:
        return (f"mode='cubic' over {spatial} spatial dims: ONNX Runtime has no kernel (its CPU EP runs cubic on "
                f"4-D X only)")
    return None


# ---- AffineGrid --------------------------------------------------------------------------------

def affine_grid_shape(theta_shape, size) -> tuple:
    """The grid's shape (N, *spatial, r) for `size` [N, C, *spatial] (r = 2 or 3 spatial axes),
    with theta [N, r, r + 1] (theta_shape None: not checked)."""
    size = [int(v) for v in size]
    if len(size) not in (4, 5):
        raise RuntimeShapeError(f"AffineGrid: size must hold 4 extents (N, C, H, W) or 5 (N, C, D, H, W), got "
                                f"{len(size)}: {size}")
    if min(size[:2]) < 0:
        raise RuntimeShapeError(f"AffineGrid: size {size} has a negative extent")
    for k in range(2, len(size)):
        if size[k] <= 0:  # as ORT's CPU kernel: N and C may be 0, a spatial extent not
            raise RuntimeShapeError(f"AffineGrid: size[{k}] ({'DHW'[k - len(size)]}={size[k]}) must be positive "
                                    f"(size {size})")
    r = len(size) - 2
    if theta_shape is not None and tuple(int(d) for d in theta_shape) != (size[0], r, r + 1):
        raise RuntimeShapeError(f"AffineGrid: theta of shape {pshape_str(theta_shape)} for size {size}: expected "
                                f"[{size[0]}, {r}, {r + 1}] (N, {r}, {r + 1} for {r} spatial axes)")
    return (size[0], *size[2:], r)


def affine_base(length: int, align_corners: bool, dtype) -> np.ndarray:
    """ORT's base coordinates along one axis of `length` (> 0) points, in `dtype` (module doc)."""
    t = np.dtype(dtype).type
    v = np.ones(1, dtype)
    if length > 1:
        v = t(-1) + np.arange(length, dtype=dtype) * (t(2) / t(length - 1))
        v[-1] = t(1)
    if not align_corners:
        v = v * t(length - 1) / t(length)
    return v.astype(dtype)


@kernel("AffineGrid")
def _affine_grid(inputs, attrs):
    theta, size = inputs[0], np.asarray(inputs[1]).reshape(-1)
    shape = affine_grid_shape(theta.shape, size)  # theta [N, r, r + 1], or the error naming both
    r = shape[-1]
    align = bool(int(attrs.get("align_corners", 0)))
    # base coordinates in the element type, x along the last spatial axis, broadcast over the grid
    axes = [affine_base(n, align, theta.dtype) for n in shape[1:-1]]  # outer (D or H) to inner (W)
    coords = [a.reshape([1] + [-1 if k == d else 1 for k in range(r)])
              for d, a in enumerate(axes)][::-1]  # x, y(, z)
    grid = np.empty(shape, theta.dtype)
    for c in range(r):
        row = theta[:, c].reshape([-1, r + 1] + [1] * r)
        products = [row[:, k] * coords[k] for k in range(r)]
        if r == 2:
            acc = products[0] + products[1]
        elif theta.dtype == np.float32:  # Eigen's sums of three, as ORT's kernel gets them: f32 pairs the last two
            acc = products[0] + (products[1] + products[2])
        else:  # f64 adds left to right
            acc = (products[0] + products[1]) + products[2]
        grid[..., c] = acc + row[:, r]
    return [result(grid, theta.dtype)]


@shape_rule("AffineGrid")
def _affine_grid_rule(types, values, attrs, num_outputs):
    size = values[1] if len(values) > 1 else None
    elem = elem_of(types[0])
    if size is not None:
        return [tensor_type(elem, affine_grid_shape(None, np.asarray(size).reshape(-1)))]
    n = shape_of(types[1])
    rank = None if not n or n[0] is None else int(n[0])
    return [tensor_type(elem, None if rank is None else (None,) * rank)]


register(OpDef("AffineGrid", (20,), ("T1", "T2"), ("T1",), {"T1": frozenset({F32, F64}), "T2": frozenset({I64})},
               _affine_grid, attributes={"align_corners": 0}, shape_rule=_affine_grid_rule, host_inputs=(1,),
               body_for_other_types=True))  # f16: ORT's CPU EP has no kernel and inlines the body


# ---- GridSample ---------------------------------------------------------------------------------

_GS_TYPES = frozenset({F32, F16, F64})
register(OpDef("GridSample", (16, 20, 22), ("T1", "T2"), ("T1",), {"T1": _GS_TYPES, "T2": _GS_TYPES}, _grid_sample,
               attributes={"mode": None, "padding_mode": "zeros", "align_corners": 0},
               claim=_claim_grid_sample, shape_rule=_grid_sample_rule))
