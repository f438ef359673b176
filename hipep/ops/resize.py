"""Resize and Upsample, following ONNX Runtime's CPU kernels (coordinates and weights in f32 with
ORT's expressions, see the section below)."""
from __future__ import annotations

import math

import numpy as np

from ..errors import RuntimeShapeError
from ._common import (at, elem_of, input_rank, input_type, kernel, known_value, normalize_axis, operand_length,
                      pshape_str, result, shape_of, shape_rule, tensor_type, type_name, upcast)
from .registry import F32, FLOATS, I32, I64, I8, U8, OpDef, register

I64S = frozenset({I64})
_F32 = np.float32


# ---- Resize / Upsample -----------------------------------------------------------------------
# Coordinates and weights are computed in f32 with ONNX Runtime's expressions (its output sizes
# truncate an f32 product, its nearest rounding works on f32 coordinates), so that rounding
# boundaries fall where ORT's do. Interpolation is separable, applied one axis at a time, on any
# rank (ORT's CPU EP does linear on 2- to 5-D and cubic on 2-/4-D inputs only). Where ORT and
# ONNX's own test data disagree, this follows ORT: align_corners divides by the integer output
# extent minus one (ONNX's tests use scale * input extent), and axes may be negative (ORT's
# keep_aspect_ratio_policy mishandles them). Resize-10 and Upsample use ORT's legacy rules:
# asymmetric coordinates, and nearest rounding that truncates upsampled and ceils downsampled
# coordinates.

MODES = ("nearest", "linear", "cubic")
COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
               "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
ASPECT_POLICIES = ("stretch", "not_larger", "not_smaller")
LEGACY = "legacy"  # Resize-10 / Upsample: asymmetric coordinates, ORT's "simple" nearest rounding


def _resize_operands(inputs, attrs):
    """(roi, scales, sizes, legacy) from a Resize/Upsample node's inputs (any may be None). The
    opset-10 form (X, scales) is told apart by its two inputs: from opset 11 a node has roi at
    position 1 and scales or sizes at position 2 or 3."""
    if attrs.get("_upsample"):
        scales = at(inputs, 1)
        if scales is None and attrs.get("scales") is not None:
            scales = np.array(attrs["scales"], np.float32)
        return None, scales, None, True
    if len(inputs) == 2:
        return None, inputs[1], None, True
    roi, scales, sizes = at(inputs, 1), at(inputs, 2), at(inputs, 3)
    if scales is not None and np.asarray(scales).size == 0:
        scales = None
    if sizes is not None and np.asarray(sizes).size == 0:
        sizes = None
    if roi is not None and np.asarray(roi).size == 0:
        roi = None
    return roi, scales, sizes, False


def _resize_plan(op_type, in_shape, roi, scales, sizes, attrs, legacy):
    """(output shape, f32 scale per axis, (roi start, roi end) per axis) of a Resize, from static
    input extents. in_shape entries may be None (dynamic) only for the output shape."""
    rank = len(in_shape)
    axes = list(range(rank))
    if not legacy and attrs.get("axes") is not None:
        axes = [normalize_axis(op_type, int(a), rank, "axis") for a in attrs["axes"]]
        if len(set(axes)) != len(axes):
            raise RuntimeShapeError(f"{op_type}: axes {list(attrs['axes'])} repeat an axis")
    if (scales is None) == (sizes is None):
        raise RuntimeShapeError(f"{op_type}: exactly one of 'scales' and 'sizes' must be given "
                                f"(non-empty), got {'both' if scales is not None else 'neither'}")
    scale = [_F32(1.0)] * rank
    out = list(in_shape)
    if scales is not None:
        sc = np.asarray(scales, np.float32).reshape(-1)
        if sc.size != len(axes):
            raise RuntimeShapeError(f"{op_type}: 'scales' has {sc.size} values, expected {len(axes)} "
                                    f"(X is {pshape_str(in_shape)})")
        if np.any(~(sc > 0)):
            raise RuntimeShapeError(f"{op_type}: scales {sc.tolist()} must be positive")
        if legacy and attrs.get("_upsample") and np.any(sc < 1):
            raise RuntimeShapeError(f"{op_type}: scales {sc.tolist()} must be >= 1 (Upsample)")
        for a, s in zip(axes, sc):
            scale[a] = _F32(s)
            out[a] = None if in_shape[a] is None else int(_F32(s) * _F32(in_shape[a]))
    else:
        sz = [int(v) for v in np.asarray(sizes).reshape(-1)]
        if len(sz) != len(axes):
            raise RuntimeShapeError(f"{op_type}: 'sizes' has {len(sz)} values, expected {len(axes)} "
                                    f"(X is {pshape_str(in_shape)})")
        if any(v < 0 for v in sz):
            raise RuntimeShapeError(f"{op_type}: sizes {sz} must be non-negative")
        policy = attrs.get("keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            for a, v in zip(axes, sz):
                out[a] = v
                if in_shape[a] == 0 and v != 0:
                    raise RuntimeShapeError(f"{op_type}: axis {a} has extent 0, so its size must be "
                                            f"0, got {v} (X is {pshape_str(in_shape)})")
                if in_shape[a] is not None:
                    scale[a] = _F32(v) / _F32(in_shape[a]) if in_shape[a] else _F32(1.0)
        else:
            if any(in_shape[a] is None for a in axes):
                for a in axes:
                    out[a] = None
            else:
                ratios = [_F32(v) / _F32(in_shape[a]) for a, v in zip(axes, sz)]
                r = min(ratios) if policy == "not_larger" else max(ratios)
                for a in axes:
                    scale[a] = _F32(r)
                    out[a] = int(math.floor(float(_F32(r) * _F32(in_shape[a])) + 0.5))
    starts, ends = [_F32(0.0)] * rank, [_F32(1.0)] * rank
    crop = not legacy and attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize"
    if roi is not None and crop:  # other modes ignore roi, whatever it holds (as ORT does)
        rv = np.asarray(roi, np.float32).reshape(-1)
        if rv.size != 2 * len(axes):
            raise RuntimeShapeError(f"{op_type}: 'roi' has {rv.size} values, expected {2 * len(axes)}")
        for j, a in enumerate(axes):
            starts[a], ends[a] = _F32(rv[j]), _F32(rv[len(axes) + j])
    return out, scale, list(zip(starts, ends))


def _original_coords(mode, out_len, in_len, scale, roi):
    """ORT's get_original_coordinate for every output index of one axis, in f32."""
    x = np.arange(out_len, dtype=np.float32)
    half = _F32(0.5)
    lr, lo = _F32(out_len), _F32(in_len)
    if mode in ("half_pixel", LEGACY + "_hp"):
        return (x + half) / scale - half
    if mode == "half_pixel_symmetric":  # ORT adds the f32 offset in double precision
        adjustment = lr / (scale * lo)
        offset = (lo / _F32(2)) * (_F32(1) - adjustment)
        orig = np.float64(offset) + (x.astype(np.float64) + 0.5) / np.float64(scale) - 0.5
        return orig.astype(np.float32)
    if mode == "pytorch_half_pixel":
        return (x + half) / scale - half if out_len > 1 else np.zeros_like(x)
    if mode == "align_corners":
        return np.zeros_like(x) if out_len == 1 else x * (lo - _F32(1)) / (lr - _F32(1))
    if mode in ("asymmetric", LEGACY):
        return x / scale
    if mode == "tf_half_pixel_for_nn":
        return (x + half) / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        if out_len > 1:
            return start * (lo - _F32(1)) + (x * (end - start) * (lo - _F32(1))) / (lr - _F32(1))
        return np.full_like(x, _F32(0.5 * (float(start) + float(end)) * (float(lo) - 1)))
    raise RuntimeShapeError(f"Resize: unknown coordinate_transformation_mode '{mode}'")


def _nearest_index(c, mode, downsample):
    if mode == LEGACY:  # ORT's "simple": ceil when downsampling, truncation otherwise
        return np.ceil(c).astype(np.int64) if downsample else np.trunc(c).astype(np.int64)
    if mode == "round_prefer_floor":
        tie = c == np.trunc(c).astype(np.int64) + _F32(0.5)
        return np.where(tie, np.floor(c), _round_away(c)).astype(np.int64)
    if mode == "round_prefer_ceil":
        return _round_away(c).astype(np.int64)
    if mode == "floor":
        return np.floor(c).astype(np.int64)
    if mode == "ceil":
        return np.ceil(c).astype(np.int64)
    raise RuntimeShapeError(f"Resize: unknown nearest_mode '{mode}'")


def _round_away(c):
    return np.sign(c) * np.floor(np.abs(c) + _F32(0.5))


def _cubic_coeffs(s, a):
    """ORT's GetCubicCoeffs for fractions s (f32 array): (len(s), 4)."""
    a = _F32(a)
    s = np.abs(s).astype(np.float32)
    one, two = _F32(1), _F32(2)
    c0 = ((a * (s + one) - _F32(5) * a) * (s + one) + _F32(8) * a) * (s + one) - _F32(4) * a
    c1 = ((a + two) * s - (a + _F32(3))) * s * s + one
    c2 = ((a + two) * (one - s) - (a + _F32(3))) * (one - s) * (one - s) + one
    c3 = ((a * (two - s) - _F32(5) * a) * (two - s) + _F32(8) * a) * (two - s) - _F32(4) * a
    return np.stack([c0, c1, c2, c3], axis=1).astype(np.float32)


def _interp_axis(x, axis, c, in_len, mode, attrs):
    """Linear or cubic interpolation of f32 array x along `axis` at coordinates c."""
    def take(idx):
        return np.take(x, idx, axis=axis)

    def along(w):  # weights (out,) shaped to broadcast along `axis`
        return w.reshape((-1,) + (1,) * (x.ndim - axis - 1))

    if mode == "linear":
        cc = np.clip(c, _F32(0), _F32(in_len - 1))
        i1 = np.minimum(cc.astype(np.int64), in_len - 1)
        i2 = np.minimum(i1 + 1, in_len - 1)
        d1 = np.abs(cc - i1.astype(np.float32))
        d2 = np.abs(cc - i2.astype(np.float32))
        same = i1 == i2
        d1 = np.where(same, _F32(0.5), d1).astype(np.float32)
        d2 = np.where(same, _F32(0.5), d2).astype(np.float32)
        return along(d2) * take(i1) + along(d1) * take(i2)
    base = np.floor(c).astype(np.int64)
    coeffs = _cubic_coeffs(c - base.astype(np.float32), attrs["cubic_coeff_a"])
    taps = base[:, None] + np.arange(-1, 3)[None, :]
    if int(attrs.get("exclude_outside", 0)):
        inside = (taps >= 0) & (taps < in_len)
        coeffs = np.where(inside, coeffs, _F32(0)).astype(np.float32)
        total = coeffs.sum(axis=1, keepdims=True, dtype=np.float32)
        coeffs = (coeffs / np.where(total == 0, _F32(1), total)).astype(np.float32)
    taps = np.clip(taps, 0, in_len - 1)
    y = None
    for j in range(4):
        term = along(coeffs[:, j]) * take(taps[:, j])
        y = term if y is None else y + term
    return y


# ---- antialias (Resize-18 and later, linear and cubic) -----------------------------------------
# ONNX Runtime's CPU kernel (upsample_antialias.h), which follows Pillow: per resized axis, from the
# innermost outward, each output index i takes a window of input indices around its center
# 0.5 + coordinate(i) (i itself where the axis' scale is 1), the filter stretched by 1 / scale when
# shrinking (linear: 1 - |t| over a support of 2; cubic: Keys' kernel with cubic_coeff_a over 4);
# with exclude_outside=0 the weights of indices outside the axis fold into its first and last ones;
# the weights are normalized by their sum, and the window summed left to right in f32 (f16 is
# computed in f32 and rounded once, as ORT casts it around its float kernel). An axis keeping its
# extent is copied.
# (tf_crop_and_resize is not claimed with antialias: ORT writes its extrapolation_value at NCHW
# positions whatever the layout.)
AA_SUPPORT = {"linear": _F32(2.0), "cubic": _F32(4.0)}


def _aa_filter(t, mode, a):
    t = abs(t)
    if mode == "linear":
        return _F32(1) - t if t < _F32(1) else _F32(0)
    if t < _F32(1):
        return ((a + _F32(2)) * t - (a + _F32(3))) * t * t + _F32(1)
    if t < _F32(2):
        return (((t - _F32(5)) * t + _F32(8)) * t - _F32(4)) * a
    return _F32(0)


def antialias_weights(in_len, out_len, scale, coords, mode, a, exclude_outside):
    """Per output index of one axis: (first input index, weights over the following ones), ORT's
    SetupUpsampleFilterAntiAlias in f32."""
    a = _F32(a)
    inv = _F32(1) / _F32(scale)  # ORT's `scale`: input pixels per output pixel
    support = AA_SUPPORT[mode] * _F32(0.5) * (inv if inv >= _F32(1) else _F32(1))
    stretch = _F32(1) / inv if inv >= _F32(1) else _F32(1)
    rows = []
    for i in range(out_len):
        center = _F32(0.5) + (_F32(i) if inv == _F32(1) else _F32(coords[i]))
        lo, hi = int(math.floor(center - support + _F32(0.5))), int(math.floor(center + support + _F32(0.5)))
        lo_cut, hi_cut = max(lo, 0), min(hi, in_len)
        first, last = (lo_cut, hi_cut) if exclude_outside else (lo, hi)
        w = [_aa_filter((_F32(x) - center + _F32(0.5)) * stretch, mode, a) for x in range(first, last)]
        total = _F32(0)
        for v in w:
            total = _F32(total + v)
        count = max(hi_cut - lo_cut, 0)
        if not exclude_outside and count:
            below = -first if first < 0 else 0
            above = last - in_len if last > in_len else 0
            for k in range(below):
                w[below] = _F32(w[below] + w[k])
            n = len(w)
            for k in range(n - above, n):
                w[n - above - 1] = _F32(w[n - above - 1] + w[k])
            w = w[below:below + count]
        scale_by = _F32(1) if total == _F32(0) else _F32(1) / total
        rows.append((lo_cut, np.array([_F32(v * scale_by) for v in w[:count]], np.float32)))
    return rows


def _antialias_axis(y, axis, rows):
    """One pass: y's `axis` through the windows `rows`, each summed left to right in f32."""
    moved = np.moveaxis(y, axis, 0)
    out = np.zeros((len(rows),) + moved.shape[1:], np.float32)
    for i, (first, weights) in enumerate(rows):
        acc = np.zeros(moved.shape[1:], np.float32)
        for k, w in enumerate(weights):
            acc = acc + moved[first + k] * w
        out[i] = acc
    return np.moveaxis(out, 0, axis)


def antialias_axes(shape, scale, mode) -> list[int]:
    """The axes an antialiased Resize resizes, in ORT's order (innermost first), or raises where ONNX
    Runtime's kernels take no such form (linear: 2-D, 3-D, 4-D NCHW or NHWC, 5-D NCDHW; cubic: 2-D,
    4-D NCHW or NHWC)."""
    rank = len(shape)
    one = [scale[a] == _F32(1) for a in range(rank)]
    forms = {2: [[0, 1]], 3: [[0, 1, 2]], 4: [[2, 3], [1, 2]], 5: [[2, 3, 4]]} if mode == "linear" else {
        2: [[0, 1]], 4: [[2, 3], [1, 2]]}
    for axes in forms.get(rank, []):
        if all(one[a] for a in range(rank) if a not in axes):
            return sorted(axes, reverse=True)
    raise RuntimeShapeError(f"Resize: antialias with mode='{mode}' resizes 2-D, 4-D (NCHW or NHWC)"
                            f"{', 3-D and 5-D (NCDHW)' if mode == 'linear' else ''} inputs only (as ONNX "
                            f"Runtime), got X {pshape_str(shape)} with scales {[float(v) for v in scale]}")


def _antialias_compute(x, out, scale, coords, attrs):
    mode = attrs["mode"]
    y = upcast(x).astype(np.float32)
    for a in antialias_axes(x.shape, scale, mode):
        if out[a] != x.shape[a]:
            rows = antialias_weights(x.shape[a], out[a], scale[a], coords[a], mode, attrs["cubic_coeff_a"],
                                     int(attrs.get("exclude_outside", 0)))
            y = _antialias_axis(y, a, rows)
    return y


def _resize_compute(op_type, x, roi, scales, sizes, attrs, legacy):
    out, scale, rois = _resize_plan(op_type, x.shape, roi, scales, sizes, attrs, legacy)
    mode = attrs.get("mode", "nearest")
    coord = LEGACY if legacy else attrs.get("coordinate_transformation_mode", "half_pixel")
    extrapolate = coord == "tf_crop_and_resize"
    ev = float(attrs.get("extrapolation_value", 0.0))
    if x.size == 0 or 0 in out:
        return np.zeros(out, x.dtype)
    coords = [_original_coords(coord, out[a], x.shape[a], scale[a], rois[a]) for a in range(x.ndim)]
    if mode != "nearest" and int(attrs.get("antialias", 0)):
        return _antialias_compute(x, out, scale, coords, attrs)
    # Axes left as they are: for nearest, every axis of scale 1 (as in ORT); for linear/cubic,
    # those whose coordinates map each index to itself.
    if mode == "nearest":
        identity = [scale[a] == 1 and out[a] == x.shape[a] for a in range(x.ndim)]
    else:
        identity = [out[a] == x.shape[a] and scale[a] == 1
                    and (coord != "tf_crop_and_resize" or (rois[a][0] == 0 and rois[a][1] == 1))
                    for a in range(x.ndim)]
    outside = None
    if extrapolate:
        for a in range(x.ndim):
            if identity[a]:
                continue
            m = (coords[a] < 0) | (coords[a] > _F32(x.shape[a] - 1))
            m = m.reshape((-1,) + (1,) * (x.ndim - a - 1))
            outside = m if outside is None else (outside | m)
    if mode == "nearest":
        nmode = LEGACY if legacy else attrs.get("nearest_mode", "round_prefer_floor")
        idx = [np.arange(x.shape[a]) if identity[a] else
               np.clip(_nearest_index(coords[a], nmode, bool(scale[a] < 1)), 0, x.shape[a] - 1)
               for a in range(x.ndim)]
        y = x[np.ix_(*idx)]
        if outside is not None:
            y = np.where(outside, np.asarray(ev).astype(x.dtype), y)
        return y
    y = upcast(x).astype(np.float32)
    for a in reversed(range(x.ndim)):  # innermost axis first, as ORT's bicubic does
        if identity[a]:
            continue
        y = _interp_axis(y, a, coords[a], x.shape[a], mode, attrs)
    if outside is not None:
        y = np.where(outside, _F32(ev), y)
    return y


@kernel("Resize")
def _resize(inputs, attrs):
    x = inputs[0]
    roi, scales, sizes, legacy = _resize_operands(inputs, attrs)
    if legacy and scales is None:
        raise RuntimeShapeError("Resize: 'scales' is required")
    return [result(_resize_compute("Resize", x, roi, scales, sizes, attrs, legacy), x.dtype)]


def _resize_shape_rule(op_type):
    @shape_rule(op_type)
    def rule(types, values, attrs, num_outputs):
        elem = elem_of(types[0])
        x = shape_of(types[0])
        if attrs.get("_upsample"):
            legacy = True
            roi = sizes = None
            scales = known_value(types, values, 1) if at(types, 1) is not None else (
                None if attrs.get("scales") is None else np.array(attrs["scales"], np.float32))
            known = scales is not None
        elif len(types) == 2:
            legacy, roi, sizes = True, None, None
            scales = known_value(types, values, 1)
            known = scales is not None
        else:
            legacy = False
            roi, scales, sizes = (known_value(types, values, i) for i in (1, 2, 3))
            # An operand given but of unknown value leaves the output unknown; an empty one is absent.
            known = all(at(types, i) is None or known_value(types, values, i) is not None
                        or operand_length(at(types, i)) == 0 for i in (2, 3))
            if scales is not None and scales.size == 0:
                scales = None
            if sizes is not None and sizes.size == 0:
                sizes = None
            if roi is not None and roi.size == 0:
                roi = None
        rank = None if x is None else len(x)
        if rank is None and not legacy and sizes is not None and attrs.get("axes") is None:
            rank = sizes.size
        if rank is None and scales is not None and (legacy or attrs.get("axes") is None):
            rank = scales.size
        if not known or rank is None:
            return [tensor_type(elem, None if rank is None else (None,) * rank)]
        shape = x if x is not None else (None,) * rank
        out, _, _ = _resize_plan(op_type, shape, roi, scales, sizes, attrs, legacy)
        return [tensor_type(elem, tuple(out))]
    return rule


def _claim_resize(node, graph, attrs):
    v = node.since_version
    mode = attrs.get("mode", "nearest")
    if mode not in MODES or (v == 10 and mode == "cubic"):
        return (f"attribute mode='{mode}' is not supported (Resize-{v} takes "
                f"{', '.join(MODES[:3 if v > 10 else 2])})")
    t = input_type(node, graph, 0)
    if t is not None and t.elem_type not in FLOATS and mode != "nearest":
        return (f"mode='{mode}' on {type_name(t.elem_type)} input: ONNX Runtime truncates integer "
                f"interpolation results in an evaluation order (and, for NHWC-shaped 8-bit inputs, a "
                f"fixed-point scheme) that hipep does not reproduce; hipep resizes integers with "
                f"mode='nearest' only")
    if v == 10:
        if len(node.inputs) != 2:
            return f"Resize-10 takes inputs (X, scales), got {len(node.inputs)} inputs"
        return None
    if len(node.inputs) < 3 or not any(i < len(node.inputs) and node.inputs[i] for i in (2, 3)):
        return f"Resize-{v} needs input 'scales' or 'sizes' (neither is given)"
    coord = attrs["coordinate_transformation_mode"]
    allowed = [c for c in COORD_MODES if (c != "tf_half_pixel_for_nn" or v < 13)
               and (c != "half_pixel_symmetric" or v >= 19)]
    if coord not in allowed:
        return (f"attribute coordinate_transformation_mode='{coord}' is not one of "
                f"{', '.join(allowed)} (Resize-{v})")
    if mode == "nearest" and attrs["nearest_mode"] not in NEAREST_MODES:
        return f"attribute nearest_mode='{attrs['nearest_mode']}' is not one of {', '.join(NEAREST_MODES)}"
    if int(attrs.get("antialias", 0)):
        if mode == "nearest":
            return "attribute antialias=1 with mode='nearest' (antialiasing applies to linear and cubic only)"
        if coord == "tf_crop_and_resize":
            return ("attribute antialias=1 with coordinate_transformation_mode='tf_crop_and_resize': ONNX Runtime "
                    "writes extrapolation_value at NCHW positions whatever the layout; hipep leaves it to ORT")
        why = _antialias_form(node, graph, mode)
        if why:
            return why
    if attrs.get("keep_aspect_ratio_policy", "stretch") not in ASPECT_POLICIES:
        return (f"attribute keep_aspect_ratio_policy='{attrs['keep_aspect_ratio_policy']}' is not one "
                f"of {', '.join(ASPECT_POLICIES)}")
    if coord == "tf_crop_and_resize" and not (len(node.inputs) > 1 and node.inputs[1]):
        return "coordinate_transformation_mode='tf_crop_and_resize' needs input 'roi'"
    sizes_given = len(node.inputs) > 3 and node.inputs[3]
    if coord == "align_corners" and not sizes_given:
        # Downsampling by scales: ORT's CPU EP maps coordinates with the rounded output size, the
        # ONNX spec with the scale itself, and their results differ (ONNX's own test cases
        # test_resize_downsample_scales_*_align_corners fail on ORT). hipep takes neither side.
        scales = graph.constant(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        if scales is None or (np.asarray(scales) < 1).any():
            return ("coordinate_transformation_mode='align_corners' with scales that shrink (or are not "
                    "constant): ONNX Runtime and the ONNX spec compute different results there")
    rank = input_rank(node, graph)
    if attrs.get("axes") is not None and rank is not None:
        if any(not -rank <= int(a) < rank for a in attrs["axes"]):
            return f"attribute axes={list(attrs['axes'])} is out of range for a rank-{rank} input"
    return None


def _antialias_form(node, graph, mode) -> str | None:
    """Why an antialiased Resize's constant scales and known rank take no form ORT's kernels run."""
    t = input_type(node, graph, 0)
    scales = graph.constant(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    if t is None or t.shape is None or scales is None or np.asarray(scales).size != len(t.shape):
        return None
    try:
        antialias_axes(t.shape, [_F32(v) for v in np.asarray(scales).reshape(-1)], mode)
    except RuntimeShapeError as e:
        return str(e)
    return None


_RESIZE_TYPES = FLOATS | {I8, U8, I32}
register(OpDef("Resize", (10, 11, 13, 18, 19), ("T", "R", "S", "I"), ("T",),
               {"T": _RESIZE_TYPES, "R": FLOATS, "S": frozenset({F32}), "I": I64S}, _resize,
               attributes={"mode": "nearest", "coordinate_transformation_mode": "half_pixel",
                           "cubic_coeff_a": -0.75, "exclude_outside": 0, "extrapolation_value": 0.0,
                           "nearest_mode": "round_prefer_floor", "antialias": 0, "axes": None,
                           "keep_aspect_ratio_policy": "stretch"},
               claim=_claim_resize, min_inputs=1, shape_rule=_resize_shape_rule("Resize"),
               host_inputs=(1, 2, 3)))


@kernel("Upsample")
def _upsample(inputs, attrs):
    x = inputs[0]
    attrs = {**attrs, "_upsample": True}
    _, scales, _, _ = _resize_operands(inputs, attrs)
    if scales is None:
        raise RuntimeShapeError("Upsample: 'scales' is required")
    return [result(_resize_compute("Upsample", x, None, scales, None, attrs, True), x.dtype)]


def _claim_upsample(node, graph, attrs):
    mode = attrs.get("mode", "nearest")
    if mode not in ("nearest", "linear"):
        return f"attribute mode='{mode}' is not supported (Upsample takes nearest, linear)"
    t = input_type(node, graph, 0)
    if t is not None and t.elem_type not in FLOATS and mode != "nearest":
        return (f"mode='{mode}' on {type_name(t.elem_type)} input: hipep upsamples integers with "
                f"mode='nearest' only (ONNX Runtime truncates its float interpolation)")
    if node.since_version == 7:
        if attrs.get("scales") is None:
            return "Upsample-7 requires attribute 'scales'"
        if len(node.inputs) != 1:
            return "Upsample-7 takes a single input (scales is an attribute)"
    elif len(node.inputs) != 2 or not node.inputs[1]:
        return f"Upsample-{node.since_version} takes inputs (X, scales)"
    rank = input_rank(node, graph)
    if attrs.get("scales") is not None and rank is not None and len(attrs["scales"]) != rank:
        return f"attribute scales={list(attrs['scales'])} needs {rank} values"
    return None


_upsample_rule = _resize_shape_rule("Upsample")


def _upsample_shape(types, values, attrs, num_outputs):
    return _upsample_rule(types, values, {**attrs, "_upsample": True}, num_outputs)


register(OpDef("Upsample", (7, 9), ("T", "S"), ("T",), {"T": _RESIZE_TYPES, "S": frozenset({F32})},
               _upsample, attributes={"mode": "nearest", "scales": None}, claim=_claim_upsample,
               min_inputs=1, shape_rule=_upsample_shape, host_inputs=(1,)))
