"""Vision ops: convolutions, pooling, depth/space rearrangement and Col2Im (Resize and Upsample are
in resize.py).

Float math runs in f32 (f16 inputs upcast, results rounded once), except that convolutions sum
their products in f64 before rounding once: identical filters then give bit-identical channels
whatever BLAS tile computes them (the light model zoo's constant-weight models softmax logits of
~1e9, where one ulp decides the answer). Convolutions are im2col + matmul (grouped and depthwise
convolutions batch their groups); pools read sliding-window views of the padded input.

Window geometry follows ONNX Runtime's CPU kernels where ONNX's spec leaves room: ceil_mode drops
a last window that would start in the end padding; AveragePool's count_include_pad counts the
explicit padding but not ceil_mode's overhang; ConvTranspose splits output_shape/SAME padding
with the odd one first except for SAME_UPPER.
"""
from __future__ import annotations

import itertools

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..errors import RuntimeShapeError
from ._common import (at, elem_of, input_rank, input_type, int_list, kernel, known_value, operand_length, pshape_str,
                      result, shape_of, shape_rule, shape_str, tensor_type, type_name, upcast)
from .registry import ANY_TENSOR, FLOATS, I64, I8, OUTPUT_COUNT, REQUIRED, U8, OpDef, register

I64S = frozenset({I64})
AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
SAME = ("SAME_UPPER", "SAME_LOWER")
_F32 = np.float32


# ---- window geometry -------------------------------------------------------------------------

def _spatial(op_type: str, attrs: dict, name: str, n: int, default: int) -> list[int]:
    """A per-spatial-axis attribute (strides, dilations, ...) with its default filled in."""
    v = attrs.get(name)
    if v is None:
        return [default] * n
    v = [int(a) for a in v]
    if len(v) != n:
        raise RuntimeShapeError(f"{op_type}: attribute {name}={v} has {len(v)} values, expected "
                                f"{n} (one per spatial axis)")
    return v


def _pads(op_type: str, attrs: dict, n: int) -> list[int]:
    v = attrs.get("pads")
    if v is None:
        return [0] * (2 * n)
    v = [int(a) for a in v]
    if len(v) != 2 * n:
        raise RuntimeShapeError(f"{op_type}: attribute pads={v} has {len(v)} values, expected "
                                f"{2 * n} (begin and end for each of {n} spatial axes)")
    return v


def _axis_window(op_type: str, axis: int, length: int, k: int, s: int, d: int, pb: int, pe: int,
                 auto_pad: str, ceil_mode: int) -> tuple[int, int, int]:
    """(output extent, pad begin, pad end) of one spatial axis of a sliding-window op."""
    dk = (k - 1) * d + 1
    if auto_pad in SAME:
        out = -(-length // s)
        total = max(0, (out - 1) * s + dk - length)
        pb = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        return out, pb, total - pb
    if auto_pad == "VALID":
        pb = pe = 0
    span = length + pb + pe - dk
    if span < 0:
        raise RuntimeShapeError(
            f"{op_type}: spatial axis {axis} of extent {length} with pads ({pb}, {pe}) is smaller "
            f"than the (dilated) kernel extent {dk}")
    if ceil_mode:
        out = -(-span // s) + 1
        if (out - 1) * s >= length + pb:  # the last window would start in the end padding
            out -= 1
    else:
        out = span // s + 1
    return out, pb, pe


class _Window:
    """Sliding-window geometry of an N-D op over spatial extents `lengths`."""

    def __init__(self, op_type, lengths, kernel, attrs, ceil_mode=0):
        n = len(kernel)
        self.kernel = [int(k) for k in kernel]
        self.strides = _spatial(op_type, attrs, "strides", n, 1)
        self.dilations = _spatial(op_type, attrs, "dilations", n, 1)
        pads = _pads(op_type, attrs, n)
        auto_pad = attrs.get("auto_pad", "NOTSET")
        self.out, self.pb, self.pe = [], [], []
        for i, length in enumerate(lengths):
            o, b, e = _axis_window(op_type, i, int(length), self.kernel[i], self.strides[i],
                                   self.dilations[i], pads[i], pads[n + i], auto_pad, ceil_mode)
            self.out.append(o)
            self.pb.append(b)
            self.pe.append(e)
        self.lengths = [int(v) for v in lengths]

    def padded(self, x: np.ndarray, fill) -> np.ndarray:
        """x padded for the windows: explicit pads, plus any ceil_mode overhang at the end."""
        widths = [(0, 0)] * (x.ndim - len(self.out))
        for i, length in enumerate(self.lengths):
            need = (self.out[i] - 1) * self.strides[i] + (self.kernel[i] - 1) * self.dilations[i] + 1
            widths.append((self.pb[i], max(self.pe[i], need - length - self.pb[i], 0)))
        return np.pad(x, widths, mode="constant", constant_values=fill)

    def windows(self, xp: np.ndarray) -> np.ndarray:
        """A read-only view (*batch, *out, *kernel) of the padded input."""
        n = len(self.out)
        lead = xp.ndim - n
        st = xp.strides
        shape = xp.shape[:lead] + tuple(self.out) + tuple(self.kernel)
        strides = (st[:lead] + tuple(st[lead + i] * self.strides[i] for i in range(n))
                   + tuple(st[lead + i] * self.dilations[i] for i in range(n)))
        return as_strided(xp, shape, strides, writeable=False)

    def counts(self, include_pad: bool) -> np.ndarray:
        """Per output position, how many window taps fall inside the input (or, with
        include_pad, inside the input and its explicit padding): shape `out`."""
        total = np.ones((), np.int64)
        for i, length in enumerate(self.lengths):
            taps = (np.arange(self.out[i])[:, None] * self.strides[i] - self.pb[i]
                    + np.arange(self.kernel[i])[None, :] * self.dilations[i])
            lo, hi = (-self.pb[i], length + self.pe[i]) if include_pad else (0, length)
            c = ((taps >= lo) & (taps < hi)).sum(axis=1)
            total = np.multiply.outer(total, c)
        return total


def _window_extents(op_type, lengths, kernel, attrs, ceil_mode=0):
    """Partial output extents of a sliding-window op (None where the input extent is unknown)."""
    n = len(lengths)
    strides = _spatial(op_type, attrs, "strides", n, 1)
    dilations = _spatial(op_type, attrs, "dilations", n, 1)
    pads = _pads(op_type, attrs, n)
    auto_pad = attrs.get("auto_pad", "NOTSET")
    out = []
    for i, length in enumerate(lengths):
        k = None if kernel is None else kernel[i]
        if length is None or (k is None and auto_pad not in SAME):
            out.append(None)
            continue
        out.append(_axis_window(op_type, i, length, 1 if k is None else k, strides[i], dilations[i],
                                pads[i], pads[n + i], auto_pad, ceil_mode)[0])
    return out


def _claim_window_attrs(node, graph, attrs):
    """Shared claim checks of convolution and pooling attributes."""
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad not in AUTO_PADS:
        return f"attribute auto_pad='{auto_pad}' is not one of {', '.join(AUTO_PADS)}"
    for name in ("strides", "dilations", "kernel_shape"):
        v = attrs.get(name)
        if v is not None and any(int(a) < 1 for a in v):
            return f"attribute {name}={list(v)} must be positive"
    if attrs.get("pads") is not None and any(int(a) < 0 for a in attrs["pads"]):
        return f"attribute pads={list(attrs['pads'])} has negative values"
    dilations = attrs.get("dilations")
    if auto_pad in SAME and dilations is not None and any(int(d) != 1 for d in dilations):
        return (f"auto_pad={auto_pad} with dilations={list(attrs['dilations'])}: ONNX and ONNX "
                f"Runtime size the padding differently; hipep implements it for dilation 1 only")
    rank = input_rank(node, graph)
    if rank is not None and rank < 3:
        return f"input X has rank {rank}; {node.op_type} needs (N, C, D1, ...) with at least one spatial axis"
    n = None if rank is None else rank - 2
    if n is not None:
        for name in ("strides", "dilations", "kernel_shape"):
            if attrs.get(name) is not None and len(attrs[name]) != n:
                return f"attribute {name}={list(attrs[name])} needs {n} values (one per spatial axis)"
        if attrs.get("pads") is not None and len(attrs["pads"]) != 2 * n:
            return f"attribute pads={list(attrs['pads'])} needs {2 * n} values"
    return None


# ---- Conv ------------------------------------------------------------------------------------

def _conv_check(op_type, x_shape, w_shape, b_shape, attrs, transpose=False):
    """Validates Conv/ConvTranspose operand shapes (partial: checks what the known extents
    decide); returns (group, kernel, output channels), None where unknown."""
    if len(x_shape) < 3:
        raise RuntimeShapeError(f"{op_type}: X must have rank >= 3 (N, C, D1, ...), got "
                                f"{pshape_str(x_shape)}")
    if len(w_shape) != len(x_shape):
        raise RuntimeShapeError(f"{op_type}: W must have the rank of X: X is {pshape_str(x_shape)}, "
                                f"W is {pshape_str(w_shape)}")
    group = int(attrs["group"])
    c = x_shape[1]
    kernel = list(w_shape[2:])
    ks = attrs.get("kernel_shape")
    if ks is not None and (len(ks) != len(kernel)
                           or any(k is not None and int(a) != k for a, k in zip(ks, kernel))):
        raise RuntimeShapeError(f"{op_type}: attribute kernel_shape={list(ks)} disagrees with W's spatial "
                                f"extents {pshape_str(kernel)} (W is {pshape_str(w_shape)})")
    if transpose:
        if (c is not None and w_shape[0] is not None and w_shape[0] != c) or (c is not None and c % group):
            raise RuntimeShapeError(
                f"{op_type}: W's first extent must equal X's channels {c} (divisible by group={group}): "
                f"X is {pshape_str(x_shape)}, W is {pshape_str(w_shape)}")
        m = None if w_shape[1] is None else w_shape[1] * group
    else:
        m = w_shape[0]
        if ((c is not None and c % group) or (m is not None and m % group)
                or (c is not None and w_shape[1] is not None and w_shape[1] * group != c)):
            raise RuntimeShapeError(
                f"{op_type}: X has {c} channels, so W (M, C/group, ...) needs C/group = "
                f"{c // group if c is not None and c % group == 0 else '?'} and M divisible by "
                f"group={group}: X is {pshape_str(x_shape)}, W is {pshape_str(w_shape)}")
    if b_shape is not None and (len(b_shape) != 1
                                or (m is not None and b_shape[0] is not None and b_shape[0] != m)):
        raise RuntimeShapeError(f"{op_type}: B must have shape [{'?' if m is None else m}] (one per output "
                                f"channel), got {pshape_str(b_shape)}")
    return group, kernel, m


def conv_products(xs: np.ndarray, ws: np.ndarray, win: _Window, group: int) -> np.ndarray:
    """Y [N, M, *out] = the convolution of xs [N, C, *in] with ws [M, C/group, *kernel] over
    `win`'s windows (padding with zeros), both already of the type the products are summed in:
    im2col and one matmul per group, batched over the images."""
    n, c = xs.shape[:2]
    m = ws.shape[0]
    kern = win.kernel
    cg, mg = c // group, m // group
    nsp = len(kern)
    kp = int(np.prod(kern, dtype=np.int64))
    p = int(np.prod(win.out, dtype=np.int64))
    view = win.windows(win.padded(xs, 0)).reshape((n, group, cg) + tuple(win.out) + tuple(kern))
    perm = (0, 1) + tuple(range(3, 3 + nsp)) + (2,) + tuple(range(3 + nsp, 3 + 2 * nsp))
    cols = np.ascontiguousarray(view.transpose(perm)).reshape(n, group, p, cg * kp)
    wt = ws.reshape(group, mg, cg * kp).transpose(0, 2, 1)
    y = np.matmul(cols, wt)  # (N, G, P, Mg)
    return y.transpose(0, 1, 3, 2).reshape((n, m) + tuple(win.out))


@kernel("Conv")
def _conv(inputs, attrs):
    x, w = inputs[0], inputs[1]
    b = at(inputs, 2)
    group, kern, m = _conv_check("Conv", x.shape, w.shape, None if b is None else b.shape, attrs)
    win = _Window("Conv", x.shape[2:], kern, attrs)
    # Products are summed in f64 and rounded once: every output channel then gets the same
    # rounding whatever BLAS tile it lands in (identical filters give identical channels).
    y = conv_products(x.astype(np.float64), w.astype(np.float64), win, group)
    if b is not None:
        y = y + b.astype(np.float64).reshape((m,) + (1,) * len(kern))
    return [result(y, x.dtype)]


def _claim_conv(node, graph, attrs):
    if int(attrs["group"]) < 1:
        return f"attribute group={attrs['group']} must be positive"
    return _claim_window_attrs(node, graph, attrs)


def _conv_rule(op_type, transpose=False, operands=(0, 1, 2), elem_type=None):
    """Conv's shape rule for `op_type`, whose X, W and B are the inputs at positions `operands`
    (B's None where the op has none); the output's element type is X's, or `elem_type(types)`."""
    xi, wi, bi = operands

    @shape_rule(op_type)
    def rule(types, values, attrs, num_outputs):
        elem = elem_of(types[xi]) if elem_type is None else elem_type(types)
        x, w = shape_of(types[xi]), shape_of(types[wi])
        b = None if bi is None else shape_of(at(types, bi))
        rank = len(x) if x is not None else (len(w) if w is not None else None)
        if rank is None:
            return [tensor_type(elem, None)]
        if x is not None and w is not None:
            _conv_check(op_type, x, w, b, attrs, transpose)
        elif rank < 3:
            raise RuntimeShapeError(f"{op_type}: X must have rank >= 3 (N, C, D1, ...), got rank {rank}")
        nsp = rank - 2
        kern = None
        if attrs.get("kernel_shape") is not None:
            kern = [int(k) for k in attrs["kernel_shape"]]
        elif w is not None and all(d is not None for d in w[2:]):
            kern = list(w[2:])
        group = int(attrs["group"])
        if transpose:
            m = None if w is None or w[1] is None else w[1] * group
        else:
            m = None if w is None else w[0]
        if m is None and b is not None:
            m = b[0]
        lengths = [None] * nsp if x is None else list(x[2:])
        if transpose:
            spatial = _transpose_extents(op_type, lengths, kern, attrs)
        else:
            spatial = _window_extents(op_type, lengths, kern, attrs)
        return [tensor_type(elem, (None if x is None else x[0], m) + tuple(spatial))]
    return rule


# Conv's attributes (ConvInteger's and QLinearConv's too: conv_integer.py)
CONV_ATTRIBUTES = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None, "pads": None,
                   "strides": None}
register(OpDef("Conv", (1, 11, 22), ("T", "T", "T"), ("T",), {"T": FLOATS}, _conv, attributes=dict(CONV_ATTRIBUTES),
               claim=_claim_conv, min_inputs=2, shape_rule=_conv_rule("Conv")))


# ---- ConvTranspose ---------------------------------------------------------------------------

def _transpose_axis(op_type, axis, length, k, s, d, op, pb, pe, auto_pad, out_shape):
    """(output extent, pad begin, pad end) of one spatial axis of ConvTranspose. With output_shape
    or SAME padding the total padding is split as ONNX Runtime does: an odd one goes to the end
    for SAME_UPPER, to the beginning otherwise."""
    full = s * (length - 1) + op + (k - 1) * d + 1
    if out_shape is not None:
        total = full - out_shape
        if total < 0:  # a longer output (by less than a stride) is zero-extended at the end
            if (out_shape - op - (k - 1) * d - 1) // s + 1 != length:
                raise RuntimeShapeError(
                    f"{op_type}: output_shape extent {out_shape} of spatial axis {axis} does not fit "
                    f"input extent {length} (the full output is {full}; at most {full + s - 1 - op} "
                    f"with stride {s})")
            return out_shape, 0, total
        pb = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        return out_shape, pb, total - pb
    if auto_pad in SAME:  # output length * stride, or the full output where that is shorter
        total = max(0, full - length * s)
        pb = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        return full - total, pb, total - pb
    if auto_pad == "VALID":
        pb = pe = 0
    out = full - pb - pe
    if out < 0:
        raise RuntimeShapeError(f"{op_type}: pads ({pb}, {pe}) of spatial axis {axis} exceed its "
                                f"full output extent {full}")
    return out, pb, pe


def _transpose_geometry(op_type, lengths, kern, attrs):
    n = len(lengths)
    strides = _spatial(op_type, attrs, "strides", n, 1)
    dilations = _spatial(op_type, attrs, "dilations", n, 1)
    out_pad = _spatial(op_type, attrs, "output_padding", n, 0)
    pads = _pads(op_type, attrs, n)
    out_shape = attrs.get("output_shape")
    if out_shape is not None:
        out_shape = [int(v) for v in out_shape]
        if len(out_shape) != n:
            raise RuntimeShapeError(f"{op_type}: attribute output_shape={out_shape} needs {n} values "
                                    f"(one per spatial axis)")
    auto_pad = attrs.get("auto_pad", "NOTSET")
    geo = []
    for i in range(n):
        if lengths[i] is None or kern is None:
            geo.append(None)
            continue
        geo.append(_transpose_axis(op_type, i, lengths[i], kern[i], strides[i], dilations[i],
                                   out_pad[i], pads[i], pads[n + i], auto_pad,
                                   None if out_shape is None else out_shape[i]))
    return geo, strides, dilations


def _transpose_extents(op_type, lengths, kern, attrs):
    geo, _, _ = _transpose_geometry(op_type, lengths, kern, attrs)
    out_shape = attrs.get("output_shape")
    return [g[0] if g is not None else (None if out_shape is None else int(out_shape[i]))
            for i, g in enumerate(geo)]


@kernel("ConvTranspose")
def _conv_transpose(inputs, attrs):
    x, w = inputs[0], inputs[1]
    b = at(inputs, 2)
    group, kern, m = _conv_check("ConvTranspose", x.shape, w.shape, None if b is None else b.shape,
                                 attrs, transpose=True)
    lengths = list(x.shape[2:])
    geo, strides, dilations = _transpose_geometry("ConvTranspose", lengths, kern, attrs)
    n, c = x.shape[:2]
    nsp = len(kern)
    cg, mg = c // group, m // group
    kp = int(np.prod(kern, dtype=np.int64))
    p = int(np.prod(lengths, dtype=np.int64))
    xs, ws = x.astype(np.float64), w.astype(np.float64)  # summed in f64, rounded once (as Conv)
    xg = xs.reshape(n, group, cg, p).transpose(0, 1, 3, 2)  # (N, G, P, Cg)
    wg = ws.reshape(group, cg, mg * kp)  # (G, Cg, Mg*K)
    t = np.matmul(xg, wg).reshape((n, group) + tuple(lengths) + (mg,) + tuple(kern))
    t = np.moveaxis(t, 2 + nsp, 2)  # (N, G, Mg, *I, *K)
    full = [max((lengths[i] - 1) * strides[i] + (kern[i] - 1) * dilations[i] + 1, geo[i][1] + geo[i][0])
            for i in range(nsp)]
    y = np.zeros((n, group, mg) + tuple(full), np.float64)
    for ks in itertools.product(*[range(k) for k in kern]):
        index = tuple(slice(ks[i] * dilations[i], ks[i] * dilations[i] + (lengths[i] - 1) * strides[i] + 1,
                            strides[i]) for i in range(nsp))
        y[(Ellipsis,) + index] += t[(Ellipsis,) + tuple(ks)]
    crop = tuple(slice(g[1], g[1] + g[0]) for g in geo)
    y = y[(Ellipsis,) + crop].reshape((n, m) + tuple(g[0] for g in geo))
    if b is not None:
        y = y + b.astype(np.float64).reshape((m,) + (1,) * nsp)
    return [result(y, x.dtype)]


def _claim_conv_transpose(node, graph, attrs):
    why = _claim_conv(node, graph, attrs)
    if why:
        return why
    rank = input_rank(node, graph)
    n = None if rank is None else rank - 2
    if attrs.get("output_padding") is not None:
        if n is not None and len(attrs["output_padding"]) != n:
            return f"attribute output_padding={list(attrs['output_padding'])} needs {n} values"
        if any(int(v) < 0 for v in attrs["output_padding"]):
            return f"attribute output_padding={list(attrs['output_padding'])} has negative values"
    if attrs.get("output_shape") is not None and n is not None and len(attrs["output_shape"]) != n:
        return (f"attribute output_shape={list(attrs['output_shape'])} must give the {n} spatial "
                f"extents (hipep does not take the N, C-prefixed form)")
    return None


register(OpDef("ConvTranspose", (1, 11, 22), ("T", "T", "T"), ("T",), {"T": FLOATS}, _conv_transpose,
               attributes={"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
                           "output_padding": None, "output_shape": None, "pads": None, "strides": None},
               claim=_claim_conv_transpose, min_inputs=2, shape_rule=_conv_rule("ConvTranspose", True)))


# ---- MaxPool / AveragePool / LpPool ----------------------------------------------------------

def _pool_check(op_type, shape, kern):
    if len(shape) < 3:
        raise RuntimeShapeError(f"{op_type}: X must have rank >= 3 (N, C, D1, ...), got {pshape_str(shape)}")
    if len(kern) != len(shape) - 2:
        raise RuntimeShapeError(f"{op_type}: kernel_shape={kern} needs {len(shape) - 2} values for X of "
                                f"shape {pshape_str(shape)}")


def _pool_window(op_type, x, attrs):
    kern = [int(k) for k in attrs["kernel_shape"]]
    _pool_check(op_type, x.shape, kern)
    return _Window(op_type, x.shape[2:], kern, attrs, int(attrs.get("ceil_mode", 0)))


def _kernel_axes(x, win):
    return tuple(range(x.ndim, x.ndim + len(win.kernel)))


@kernel("MaxPool")
def _max_pool(inputs, attrs):
    x = inputs[0]
    win = _pool_window("MaxPool", x, attrs)
    xs = upcast(x)
    fill = -np.inf if xs.dtype.kind == "f" else np.iinfo(xs.dtype).min
    view = win.windows(win.padded(xs, fill))
    y = result(view.max(axis=_kernel_axes(x, win)) if view.size else
               np.full(view.shape[:x.ndim], fill, xs.dtype), x.dtype)
    if int(attrs.get(OUTPUT_COUNT, 1)) < 2:
        return [y]
    # Indices: the first maximum in window scan order, as a flat index into X (storage_order 0:
    # row-major spatial extents, 1: column-major), like ONNX Runtime.
    # Padding never wins, even against an equal real value (an int8 -128, a float -inf).
    nsp = len(win.kernel)
    lead = view.shape[:x.ndim]
    flat = view.reshape(lead + (-1,))
    real = win.windows(win.padded(np.ones((1, 1) + tuple(win.lengths), bool), False))
    real = real.reshape(real.shape[:x.ndim] + (-1,))
    if xs.dtype.kind == "f" and flat.shape[-1]:
        # ORT's kernel with Indices takes the window's first input and replaces it only by a
        # strictly greater one: a NaN wins only as the first input, later NaNs never do.
        real_all = np.broadcast_to(real, flat.shape)
        first = np.argmax(real_all, axis=-1)[..., None]
        first_value = np.take_along_axis(flat, first, axis=-1)[..., 0]
        numbers = np.where(real_all & ~np.isnan(flat), flat, -np.inf)
        top = np.where(np.isnan(first_value), first_value, numbers.max(axis=-1))
        y = result(top, x.dtype)
        hit = np.where(np.isnan(top)[..., None], np.arange(flat.shape[-1]) == first, (flat == top[..., None]) & real)
    else:
        top = y.astype(xs.dtype)[..., None]
        hit = (flat == top) & real
    arg = np.argmax(hit, axis=-1) if flat.shape[-1] else np.zeros(lead, np.int64)
    offsets = np.unravel_index(arg, win.kernel)
    lengths = win.lengths
    spatial = 0
    coords = []
    for i in range(nsp):
        o = np.arange(win.out[i]).reshape((-1,) + (1,) * (nsp - 1 - i))
        coords.append(o * win.strides[i] - win.pb[i] + offsets[i] * win.dilations[i])
    if int(attrs.get("storage_order", 0)):
        mult = 1
        for i in range(nsp):
            spatial = spatial + coords[i] * mult
            mult *= lengths[i]
    else:
        for i in range(nsp):
            spatial = spatial * lengths[i] + coords[i]
    nc = np.arange(x.shape[0] * x.shape[1]).reshape(x.shape[:2] + (1,) * nsp)
    index = nc * int(np.prod(lengths, dtype=np.int64)) + spatial
    return [y, result(index, np.int64)]


@kernel("AveragePool")
def _average_pool(inputs, attrs):
    x = inputs[0]
    win = _pool_window("AveragePool", x, attrs)
    view = win.windows(win.padded(upcast(x), 0))
    s = view.sum(axis=_kernel_axes(x, win), dtype=np.float32)
    counts = win.counts(bool(int(attrs.get("count_include_pad", 0))))
    return [result(s / counts.astype(np.float32), x.dtype)]


@kernel("LpPool")
def _lp_pool(inputs, attrs):
    x = inputs[0]
    win = _pool_window("LpPool", x, attrs)
    p = float(attrs["p"])
    view = win.windows(win.padded(upcast(x), 0))
    s = np.sum(np.abs(view) ** _F32(p), axis=_kernel_axes(x, win), dtype=np.float32)
    return [result(s ** _F32(1.0 / p), x.dtype)]


def _pool_claim(node, graph, attrs):
    why = _claim_window_attrs(node, graph, attrs)
    if why:
        return why
    rank = input_rank(node, graph)
    if rank is not None and len(attrs["kernel_shape"]) != rank - 2:
        return f"attribute kernel_shape={list(attrs['kernel_shape'])} needs {rank - 2} values"
    if int(attrs.get("ceil_mode", 0)) not in (0, 1):
        return f"attribute ceil_mode={attrs['ceil_mode']} must be 0 or 1"
    t = input_type(node, graph, 0)
    if node.op_type == "MaxPool" and t is not None and t.elem_type in (I8, U8) and node.since_version < 12:
        return f"MaxPool opset {node.since_version} does not take {type_name(t.elem_type)} (since 12)"
    if node.op_type == "MaxPool":
        if int(attrs.get("storage_order", 0)) not in (0, 1):
            return f"attribute storage_order={attrs['storage_order']} must be 0 or 1"
    if node.op_type == "LpPool" and float(attrs["p"]) <= 0:
        return f"attribute p={attrs['p']} must be positive"
    return None


def _pool_rule(op_type):
    @shape_rule(op_type)
    def rule(types, values, attrs, num_outputs):
        elem = elem_of(types[0])
        x = shape_of(types[0])
        kern = [int(k) for k in attrs["kernel_shape"]]
        if x is None:
            shape = (None,) * (len(kern) + 2)
        else:
            _pool_check(op_type, x, kern)
            shape = tuple(x[:2]) + tuple(_window_extents(op_type, list(x[2:]), kern, attrs,
                                                         int(attrs.get("ceil_mode", 0))))
        return [tensor_type(elem, shape), tensor_type(I64, shape)][:max(num_outputs, 1)]
    return rule


_POOL_ATTRS = {"auto_pad": "NOTSET", "kernel_shape": REQUIRED, "pads": None, "strides": None}
register(OpDef("MaxPool", (1, 8, 10, 11, 12, 22), ("T",), ("T", "I"),
               {"T": FLOATS | {I8, U8}, "I": I64S}, _max_pool,
               attributes={**_POOL_ATTRS, "ceil_mode": 0, "dilations": None, "storage_order": 0},
               claim=_pool_claim, shape_rule=_pool_rule("MaxPool")))
register(OpDef("AveragePool", (7, 10, 11, 19, 22), ("T",), ("T",), {"T": FLOATS}, _average_pool,
               attributes={**_POOL_ATTRS, "ceil_mode": 0, "count_include_pad": 0, "dilations": None},
               claim=_pool_claim, shape_rule=_pool_rule("AveragePool")))
register(OpDef("LpPool", (2, 11, 18, 22), ("T",), ("T",), {"T": FLOATS}, _lp_pool,
               attributes={**_POOL_ATTRS, "ceil_mode": 0, "dilations": None, "p": 2},
               claim=_pool_claim, shape_rule=_pool_rule("LpPool")))


# ---- GlobalAveragePool / GlobalMaxPool -------------------------------------------------------

def _global_pool(op_type, fn):
    @kernel(op_type)
    def reference(inputs, attrs):
        x = inputs[0]
        if x.ndim < 3:
            raise RuntimeShapeError(f"{op_type}: X must have rank >= 3 (N, C, D1, ...), got "
                                    f"{shape_str(x.shape)}")
        axes = tuple(range(2, x.ndim))
        if any(x.shape[a] == 0 for a in axes):
            raise RuntimeShapeError(f"{op_type}: X of shape {shape_str(x.shape)} has an empty spatial axis")
        return [result(fn(upcast(x), axes), x.dtype)]
    return reference


@shape_rule("GlobalPool")
def _global_pool_shape(types, values, attrs, num_outputs):
    x = shape_of(types[0])
    if x is not None and len(x) < 3:
        raise RuntimeShapeError(f"GlobalPool: X must have rank >= 3 (N, C, D1, ...), got {pshape_str(x)}")
    return [tensor_type(elem_of(types[0]), None if x is None else tuple(x[:2]) + (1,) * (len(x) - 2))]


def _claim_global(node, graph, attrs):
    rank = input_rank(node, graph)
    if rank is not None and rank < 3:
        return f"input X has rank {rank}; {node.op_type} needs (N, C, D1, ...)"
    return None


register(OpDef("GlobalAveragePool", (1, 22), ("T",), ("T",), {"T": FLOATS},
               _global_pool("GlobalAveragePool",
                            lambda x, axes: np.sum(x, axis=axes, keepdims=True, dtype=np.float32)
                            / _F32(np.prod([x.shape[a] for a in axes]))),
               claim=_claim_global, shape_rule=_global_pool_shape))
register(OpDef("GlobalMaxPool", (1, 22), ("T",), ("T",), {"T": FLOATS},
               _global_pool("GlobalMaxPool", lambda x, axes: np.max(x, axis=axes, keepdims=True)),
               claim=_claim_global, shape_rule=_global_pool_shape))


# ---- DepthToSpace / SpaceToDepth -------------------------------------------------------------

def _block_check(op_type, shape, b, what):
    if len(shape) != 4:
        raise RuntimeShapeError(f"{op_type}: input must be 4-D (N, C, H, W), got {shape_str(shape)}")
    if b < 1:
        raise RuntimeShapeError(f"{op_type}: blocksize={b} must be positive")


@kernel("DepthToSpace")
def _depth_to_space(inputs, attrs):
    x = inputs[0]
    b = int(attrs["blocksize"])
    _block_check("DepthToSpace", x.shape, b, "C")
    n, c, h, w = x.shape
    if c % (b * b):
        raise RuntimeShapeError(f"DepthToSpace: channels {c} are not divisible by blocksize^2 = {b * b} "
                                f"(input is {shape_str(x.shape)})")
    if attrs.get("mode", "DCR") == "CRD":
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    return [result(y.reshape(n, c // (b * b), h * b, w * b))]


@kernel("SpaceToDepth")
def _space_to_depth(inputs, attrs):
    x = inputs[0]
    b = int(attrs["blocksize"])
    _block_check("SpaceToDepth", x.shape, b, "HW")
    n, c, h, w = x.shape
    if h % b or w % b:
        raise RuntimeShapeError(f"SpaceToDepth: spatial extents {shape_str(x.shape[2:])} are not "
                                f"divisible by blocksize={b} (input is {shape_str(x.shape)})")
    blocks = x.reshape(n, c, h // b, b, w // b, b)
    if attrs.get("mode", "DCR") == "CRD":  # opset 28: DepthToSpace's CRD order undone
        y = blocks.transpose(0, 1, 3, 5, 2, 4)
    else:
        y = blocks.transpose(0, 3, 5, 1, 2, 4)
    return [result(y.reshape(n, c * b * b, h // b, w // b))]


def _block_rule(op_type, to_space):
    @shape_rule(op_type)
    def rule(types, values, attrs, num_outputs):
        elem = elem_of(types[0])
        x = shape_of(types[0])
        b = int(attrs["blocksize"])
        if x is None:
            return [tensor_type(elem, (None,) * 4)]
        if len(x) != 4:
            raise RuntimeShapeError(f"{op_type}: input must be 4-D (N, C, H, W), got {pshape_str(x)}")
        n, c, h, w = x
        if to_space:
            if c is not None and c % (b * b):
                raise RuntimeShapeError(f"{op_type}: channels {c} are not divisible by blocksize^2 = "
                                        f"{b * b} (input is {pshape_str(x)})")
            out = (n, None if c is None else c // (b * b), None if h is None else h * b,
                   None if w is None else w * b)
        else:
            for d in (h, w):
                if d is not None and d % b:
                    raise RuntimeShapeError(f"{op_type}: spatial extents {pshape_str(x[2:])} are not "
                                            f"divisible by blocksize={b} (input is {pshape_str(x)})")
            out = (n, None if c is None else c * b * b, None if h is None else h // b,
                   None if w is None else w // b)
        return [tensor_type(elem, out)]
    return rule


def _claim_block(node, graph, attrs):
    if int(attrs["blocksize"]) < 1:
        return f"attribute blocksize={attrs['blocksize']} must be positive"
    if attrs.get("mode", "DCR") not in ("DCR", "CRD"):
        return f"attribute mode='{attrs['mode']}' is not DCR or CRD"
    rank = input_rank(node, graph)
    if rank is not None and rank != 4:
        return f"input has rank {rank}; {node.op_type} takes 4-D (N, C, H, W) inputs"
    return None


register(OpDef("DepthToSpace", (1, 11, 13, 28), ("T",), ("T",), {"T": ANY_TENSOR}, _depth_to_space,
               attributes={"blocksize": REQUIRED, "mode": "DCR"}, claim=_claim_block,
               shape_rule=_block_rule("DepthToSpace", True)))
register(OpDef("SpaceToDepth", (1, 13, 28), ("T",), ("T",), {"T": ANY_TENSOR}, _space_to_depth,
               attributes={"blocksize": REQUIRED, "mode": "DCR"}, claim=_claim_block,
               shape_rule=_block_rule("SpaceToDepth", False)))


# ---- Col2Im ----------------------------------------------------------------------------------

def _col2im_geometry(op_type, in_shape, image, block, attrs):
    n = len(image)
    if len(block) != n:
        raise RuntimeShapeError(f"{op_type}: image_shape {image} and block_shape {block} must have "
                                f"the same length")
    if any(v < 1 for v in block) or any(v < 0 for v in image):
        raise RuntimeShapeError(f"{op_type}: block_shape {block} must be positive and image_shape "
                                f"{image} non-negative")
    win = _Window(op_type, image, block, attrs)
    kp = int(np.prod(block, dtype=np.int64))
    lp = int(np.prod(win.out, dtype=np.int64))
    if in_shape is not None:
        if len(in_shape) != 3:
            raise RuntimeShapeError(f"{op_type}: input must be 3-D (N, C*prod(block_shape), L), got "
                                    f"{pshape_str(in_shape)}")
        if in_shape[1] is not None and in_shape[1] % kp:
            raise RuntimeShapeError(f"{op_type}: input's extent {in_shape[1]} is not divisible by "
                                    f"prod(block_shape) = {kp} (input is {pshape_str(in_shape)})")
        if in_shape[2] is not None and in_shape[2] != lp:
            raise RuntimeShapeError(f"{op_type}: input has {in_shape[2]} blocks (L), but image_shape "
                                    f"{image} with block_shape {block} gives {lp}")
    return win


@kernel("Col2Im")
def _col2im(inputs, attrs):
    x, image, block = inputs
    image = int_list("Col2Im", "image_shape", image)
    block = int_list("Col2Im", "block_shape", block)
    win = _col2im_geometry("Col2Im", x.shape, image, block, attrs)
    n, ck, _ = x.shape
    kp = int(np.prod(block, dtype=np.int64))
    c = ck // kp
    nsp = len(image)
    t = upcast(x).reshape((n, c) + tuple(block) + tuple(win.out))
    full = [max(image[i] + win.pb[i] + win.pe[i],
                (win.out[i] - 1) * win.strides[i] + (block[i] - 1) * win.dilations[i] + 1)
            for i in range(nsp)]
    y = np.zeros((n, c) + tuple(full), np.float32)
    for ks in itertools.product(*[range(k) for k in block]):
        index = tuple(slice(ks[i] * win.dilations[i],
                            ks[i] * win.dilations[i] + (win.out[i] - 1) * win.strides[i] + 1,
                            win.strides[i]) for i in range(nsp))
        y[(Ellipsis,) + index] += t[(slice(None), slice(None)) + tuple(ks)]
    crop = tuple(slice(win.pb[i], win.pb[i] + image[i]) for i in range(nsp))
    return [result(y[(Ellipsis,) + crop], x.dtype)]


@shape_rule("Col2Im")
def _col2im_shape(types, values, attrs, num_outputs):
    elem = elem_of(types[0])
    x = shape_of(types[0])
    image = int_list("Col2Im", "image_shape", known_value(types, values, 1))
    block = int_list("Col2Im", "block_shape", known_value(types, values, 2))
    nsp = operand_length(types[1]) if image is None else len(image)
    if nsp is None and block is not None:
        nsp = len(block)
    c = None
    if block is not None and x is not None and len(x) == 3 and x[1] is not None:
        kp = int(np.prod(block, dtype=np.int64))
        c = x[1] // kp if kp and x[1] % kp == 0 else None
    if image is not None and block is not None:
        _col2im_geometry("Col2Im", x, image, block, attrs)
    n = None if x is None else x[0]
    if nsp is None:
        return [tensor_type(elem, None)]
    return [tensor_type(elem, (n, c) + (tuple(image) if image is not None else (None,) * nsp))]


def _claim_col2im(node, graph, attrs):
    for name in ("strides", "dilations"):
        v = attrs.get(name)
        if v is not None and any(int(a) < 1 for a in v):
            return f"attribute {name}={list(v)} must be positive"
    if attrs.get("pads") is not None and any(int(a) < 0 for a in attrs["pads"]):
        return f"attribute pads={list(attrs['pads'])} has negative values"
    return None


register(OpDef("Col2Im", (18,), ("T", "I", "I"), ("T",), {"T": FLOATS, "I": I64S}, _col2im,
               attributes={"dilations": None, "pads": None, "strides": None}, claim=_claim_col2im,
               shape_rule=_col2im_shape, host_inputs=(1, 2)))
