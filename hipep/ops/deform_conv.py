"""DeformConv (opsets 19, 22): a 2-D convolution whose kernel taps sample X at learned fractional
offsets, bilinearly, each sample scaled by an optional mask (deformable convolution v1 and v2).

X [N, C, H, W], W [M, C/group, kH, kW], offset [N, offset_group * 2 * kH * kW, oH, oW] (for tap
k = i * kW + j of offset group g, channel g * 2 * kH * kW + 2 * k is its row offset and the next
its column offset), B [M] and mask [N, offset_group * kH * kW, oH, oW] optional. Tap (i, j) of
output position (y, x) samples channel c of offset group c // (C / offset_group) at
  h = (y * stride_h + (i * dilation_h - pad_top)) + offset_h,  w = likewise along the columns,
as ONNX Runtime's CPU kernel adds them: zero where h <= -1, h >= H, w <= -1 or w >= W (NaN too),
else the bilinear mix (1-lh)(1-lw) X[h0, w0] + (1-lh) lw X[h0, w0+1] + lh (1-lw) X[h0+1, w0]
+ lh lw X[h0+1, w0+1] (lh = h - floor(h)), a corner outside X counting as zero. The samples
[N, C * kH * kW, oH * oW] (im2col) times W, per group, plus B, give Y [N, M, oH, oW];
oH = (H + pads - dilation * (kH - 1) - 1) // stride + 1.

Computed in the element type (f16 in f32, rounded once), as ORT's kernel; its GEMM sums in another
order. ONNX defines DeformConv over any number of spatial axes; ONNX Runtime runs two, and so
does hipep (others are left to ORT, which refuses them too).
"""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ._common import compute_dtype, elem_of, input_type, kernel, pshape_str, result, shape_of, shape_rule, tensor_type
from .registry import F16, F32, F64, OpDef, register
from .vision import _pads, _spatial

_TYPES = frozenset({F32, F16, F64})


def deform_params(x, w, offset, b=None, mask=None, attrs=None) -> dict:
    """The convolution's geometry from the inputs' shapes (None extents unknown) and attributes, its
    shapes checked as ONNX Runtime checks them: kernel, strides, dilations, pads (top, left, bottom,
    right), group, offset_group, out (oH, oW; None where unknown)."""
    attrs = attrs or {}
    if len(x) != 4:
        raise RuntimeShapeError(f"DeformConv: X must be [N, C, H, W] (rank 4), got {pshape_str(x)}")
    if len(w) != 4:
        raise RuntimeShapeError(f"DeformConv: W must be [M, C/group, kH, kW] (rank 4), got {pshape_str(w)}")
    if len(offset) != 4:
        raise RuntimeShapeError(f"DeformConv: offset must be [N, offset_group * 2 * kH * kW, oH, oW] (rank 4), "
                                f"got {pshape_str(offset)}")
    kernel = list(w[2:]) if attrs.get("kernel_shape") is None else _spatial("DeformConv", attrs, "kernel_shape", 2, 1)
    if None not in w[2:] and list(w[2:]) != kernel:
        raise RuntimeShapeError(f"DeformConv: kernel_shape {kernel} is not W's {pshape_str(w[2:])}")
    strides = _spatial("DeformConv", attrs, "strides", 2, 1)
    dilations = _spatial("DeformConv", attrs, "dilations", 2, 1)
    pads = _pads("DeformConv", attrs, 2)
    group, offset_group = int(attrs.get("group", 1)), int(attrs.get("offset_group", 1))
    if (min(strides) < 1 or min(dilations) < 1 or min((k for k in kernel if k is not None), default=1) < 1
            or group < 1 or offset_group < 1):
        raise RuntimeShapeError(f"DeformConv: strides {strides}, dilations {dilations}, kernel {kernel}, group "
                                f"{group} and offset_group {offset_group} must be positive")
    out = []
    for d in range(2):
        length = x[2 + d]
        if length is None or kernel[d] is None:
            out.append(None)
            continue
        span = length + pads[d] + pads[2 + d] - dilations[d] * (kernel[d] - 1) - 1
        extent = (span // strides[d] if span >= 0 else -(-span // strides[d])) + 1  # C's division, as ORT's
        if extent < 0:
            raise RuntimeShapeError(f"DeformConv: X {pshape_str(x)} with pads {pads}, dilations {dilations} and "
                                    f"kernel {kernel} leaves a negative output extent")
        out.append(extent)
    taps = None if None in kernel else kernel[0] * kernel[1]
    n, c, m = x[0], x[1], w[0]

    def need(ok, what):
        if not ok:
            raise RuntimeShapeError(f"DeformConv: {what} (X {pshape_str(x)}, W {pshape_str(w)}, offset "
                                    f"{pshape_str(offset)}, group {group}, offset_group {offset_group})")

    def same(a, b_):
        return a is None or b_ is None or a == b_

    need(same(offset[0], n), "offset's batch must be X's")
    if taps is not None:
        need(same(offset[1], offset_group * 2 * taps), f"offset must have offset_group * 2 * kH * kW = "
                                                       f"{offset_group * 2 * taps} channels")
    need(same(offset[2], out[0]) and same(offset[3], out[1]), f"offset's extents must be the output's {out}")
    need(c is None or c % offset_group == 0, "X's channels must divide by offset_group")
    need(c is None or w[1] is None or c == w[1] * group, "X's channels must be W's channels times group")
    need(m is None or m % group == 0, "W's output channels must divide by group")
    if b is not None:
        need(len(b) == 1 and same(b[0], m), f"B must be [M] (M = {m}), got {pshape_str(b)}")
    if mask is not None:
        need(len(mask) == 4 and same(mask[0], n) and (taps is None or same(mask[1], offset_group * taps))
             and same(mask[2], out[0]) and same(mask[3], out[1]),
             f"mask must be [N, offset_group * kH * kW, oH, oW] = [{n}, "
             f"{None if taps is None else offset_group * taps}, {out[0]}, {out[1]}], "
             f"got {pshape_str(mask)}")
    return {"kernel": kernel, "strides": strides, "dilations": dilations, "pads": pads, "group": group,
            "offset_group": offset_group, "out": out}


def sample_columns(x, offset, mask, p) -> np.ndarray:
    """The bilinear samples [N, C, kH * kW, oH * oW] in x's dtype (the columns a GEMM with W takes)."""
    n, c, height, width = x.shape
    kh, kw = p["kernel"]
    oh, ow = p["out"]
    og, taps, positions = p["offset_group"], kh * kw, oh * ow
    ct = x.dtype.type
    off = offset.reshape(n, og, taps, 2, positions)
    i, j = np.divmod(np.arange(taps), kw)
    base_h = (i * p["dilations"][0] - p["pads"][0]).astype(ct)[:, None]  # [taps, 1]
    base_w = (j * p["dilations"][1] - p["pads"][1]).astype(ct)[:, None]
    y, xo = np.divmod(np.arange(positions), ow)
    h = ((y * p["strides"][0]).astype(ct) + base_h) + off[:, :, :, 0]  # [N, og, taps, P]
    w = ((xo * p["strides"][1]).astype(ct) + base_w) + off[:, :, :, 1]
    with np.errstate(invalid="ignore"):
        inside = (h > -1) & (h < height) & (w > -1) & (w < width)
    h, w = np.where(inside, h, ct(0)), np.where(inside, w, ct(0))
    h0, w0 = np.floor(h), np.floor(w)
    lh, lw = h - h0, w - w0
    hh, hw = ct(1) - lh, ct(1) - lw
    h0, w0 = h0.astype(np.int64), w0.astype(np.int64)
    planes = x.reshape(n, og, c // og, height * width)
    total = None
    for dh, dw, weight in ((0, 0, hh * hw), (0, 1, hh * lw), (1, 0, lh * hw), (1, 1, lh * lw)):
        hc, wc = h0 + dh, w0 + dw
        valid = inside & (hc >= 0) & (hc < height) & (wc >= 0) & (wc < width)
        index = np.where(valid, hc * width + wc, 0).reshape(n, og, 1, taps * positions)
        values = np.take_along_axis(planes, index, axis=3).reshape(n, og, c // og, taps, positions)
        term = np.where(valid[:, :, None], weight[:, :, None] * values, ct(0))
        total = term if total is None else total + term
    if mask is not None:
        total = total * mask.reshape(n, og, 1, taps, positions)
    return total.reshape(n, c, taps, positions)


@kernel("DeformConv")
def _deform_conv(inputs, attrs):
    x, w, offset = inputs[0], inputs[1], inputs[2]
    b = inputs[3] if len(inputs) > 3 else None
    mask = inputs[4] if len(inputs) > 4 else None
    p = deform_params(x.shape, w.shape, offset.shape, None if b is None else b.shape,
                      None if mask is None else mask.shape, attrs)
    ct = compute_dtype(x.dtype)
    cols = sample_columns(x.astype(ct), offset.astype(ct), None if mask is None else mask.astype(ct), p)
    n, c = x.shape[:2]
    m, group = w.shape[0], p["group"]
    oh, ow = p["out"]
    cols = cols.reshape(n, group, (c // group) * cols.shape[2], oh * ow)
    weights = w.astype(ct).reshape(group, m // group, -1)
    y = np.matmul(weights[None], cols).reshape(n, m, oh, ow)
    if b is not None:
        y = y + b.astype(ct).reshape(1, m, 1, 1)
    return [result(y, x.dtype)]


@shape_rule("DeformConv")
def _deform_conv_shape(types, values, attrs, num_outputs):
    elem = elem_of(types[0])
    x, w, offset = shape_of(types[0]), shape_of(types[1]), shape_of(types[2])
    b = shape_of(types[3]) if len(types) > 3 and types[3] is not None else None
    mask = shape_of(types[4]) if len(types) > 4 and types[4] is not None else None
    if x is None or w is None or offset is None:
        return [tensor_type(elem, None if x is None else (x[0], None if w is None else w[0], None, None))]
    p = deform_params(x, w, offset, b, mask, attrs)
    return [tensor_type(elem, (x[0], w[0], *p["out"]))]


def _claim_deform_conv(node, graph, attrs):
    """Two spatial axes (X of rank 4), as ONNX Runtime runs it."""
    t = input_type(node, graph, 0)
    if t is not None and t.rank is not None and t.rank != 4:
        return f"X of rank {t.rank}: DeformConv over {t.rank - 2} spatial axes (2 are implemented, as in ONNX Runtime)"
    return None


register(OpDef("DeformConv", (19, 22), ("T", "T", "T", "T", "T"), ("T",), {"T": _TYPES}, _deform_conv,
               attributes={"dilations": None, "group": 1, "kernel_shape": None, "offset_group": 1, "pads": None,
                           "strides": None},
               claim=_claim_deform_conv, shape_rule=_deform_conv_shape, min_inputs=3))
