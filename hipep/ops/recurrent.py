"""Recurrent ops: RNN, GRU and LSTM (opsets 7, 14 and 22), as ONNX Runtime's CPU kernels compute
them: directions forward, reverse and bidirectional, the optional bias, sequence lengths, initial
state (and cell, and peepholes for LSTM), the activations the spec lists with their alpha and beta,
clip, GRU's linear_before_reset, LSTM's input_forget, and layout 1 (batch first; ORT's CPU EP
refuses it, hipep computes the same steps on the transposed views).

Math runs in f32 for f16 inputs (ORT's f16 kernels widen to f32, keep the state in f32 and round
each output once), in the input's type otherwise. Per time step, per direction:
  RNN   H = f(x W^T + H R^T + Wb + Rb)
  GRU   z = f(.. z rows ..), r = f(.. r rows ..),
        h = g(x Wh^T + (r * H) Rh^T + Rbh + Wbh), or with linear_before_reset
        h = g(x Wh^T + r * (H Rh^T + Rbh) + Wbh);  H = (1 - z) * h + z * H
  LSTM  i = f(.. + Pi * C), f = f(.. + Pf * C) (or 1 - i with input_forget), c = g(..),
        C = f * C + i * c, o = f(.. + Po * C), H = o * h(C)
where clip (when given) bounds each gate's input to its activation. A batch entry's sequence runs
over its first sequence_lens steps only (backwards from its last for the reverse direction): Y is
zero past them, and Y_h (Y_c) is the state after its last step, zero for an empty sequence (ORT's
answer; the spec says nothing of empty ones).
"""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ._common import (at, compute_dtype, elem_of, input_type, kernel, pshape_str, result, shape_of, shape_rule,
                      tensor_type)
from .registry import F16, F32, F64, I32, REQUIRED, OpDef, register

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
# The activations of one direction, in the attribute's order: RNN f; GRU f (z, r) and g (h); LSTM
# f (i, o, f), g (c) and h (the output's).
DEFAULT_ACTIVATIONS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"), "LSTM": ("Sigmoid", "Tanh", "Tanh")}
# The spec's activation names; the position is the GPU kernel's code (kernels/recurrent.hip).
ACTIVATIONS = ("Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh", "HardSigmoid",
               "Elu", "Softsign", "Softplus")
# Which of alpha and beta each activation takes.
_TAKES = {"Affine": (True, True), "LeakyRelu": (True, False), "ThresholdedRelu": (True, False),
          "ScaledTanh": (True, True), "HardSigmoid": (True, True), "Elu": (True, False)}
# Where the values run out: the spec takes the defaults of the ONNX ops of those names (ScaledTanh has
# none); ORT's GRU and LSTM take their own table, 0 elsewhere, and its RNN 0 for everything.
_SPEC_DEFAULTS = {"Affine": (1.0, 0.0), "LeakyRelu": (0.01, None), "ThresholdedRelu": (1.0, None),
                  "ScaledTanh": (None, None), "HardSigmoid": (0.2, 0.5), "Elu": (1.0, None)}
_ORT_DEFAULTS = {"LeakyRelu": (0.01, 0.0), "HardSigmoid": (0.2, 0.5), "Elu": (1.0, 0.0)}
DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}
# Inputs: X, W, R, B, sequence_lens, initial_h (LSTM: initial_c, P).
X, W, R, B, LENS, INITIAL_H, INITIAL_C, P = range(8)


def num_directions(op_type: str, attrs) -> int:
    direction = attrs.get("direction", "forward")
    if direction not in DIRECTIONS:
        raise RuntimeShapeError(f"{op_type}: direction must be forward, reverse or bidirectional, got {direction!r}")
    return DIRECTIONS[direction]


def _ort_values(op_type: str, names, alphas, betas) -> list:
    """(alpha, beta) per activation as ORT's CPU kernels read them: GRU and LSTM consume the lists
    in order, each activation taking the values it uses (its defaults where they run out); RNN
    reads entry d for direction d, 0 without the attribute (None: past a list's end, which ORT reads
    out of bounds)."""
    out = []
    if op_type == "RNN":
        for d, name in enumerate(names):
            takes = _TAKES.get(name, (False, False))
            values = []
            for used, given in zip(takes, (alphas, betas)):
                values.append(0.0 if not used or given is None else (given[d] if d < len(given) else None))
            out.append(tuple(values))
        return out
    return _consumed_in_order(names, alphas, betas, _ORT_DEFAULTS, (0.0, 0.0))


def _spec_values(names, alphas, betas) -> list:
    """(alpha, beta) per activation as the spec says: the lists consumed in order of the activations
    that take a value, the defaults of the ONNX ops of those names where they run out (None where
    there is none); 0.0 for a value an activation does not use."""
    return _consumed_in_order(names, alphas, betas, _SPEC_DEFAULTS, (None, None))


def _consumed_in_order(names, alphas, betas, defaults: dict, missing: tuple) -> list:
    """(alpha, beta) per activation, the lists consumed in order of the activations that take a
    value, `defaults` (else `missing`) where they run out; 0.0 for a value an activation does not use."""
    out, ia, ib = [], 0, 0
    for name in names:
        (ta, tb), (da, db) = _TAKES.get(name, (False, False)), defaults.get(name, missing)
        alpha = beta = 0.0
        if ta:
            alpha, ia = (alphas[ia], ia + 1) if alphas and ia < len(alphas) else (da, ia)
        if tb:
            beta, ib = (betas[ib], ib + 1) if betas and ib < len(betas) else (db, ib)
        out.append((alpha, beta))
    return out


def activations(op_type: str, attrs) -> tuple[list | None, str | None]:
    """The activations of each direction as [(name, alpha, beta), ...] (DEFAULT_ACTIVATIONS' count
    per direction, directions in order), and None; or None and why hipep does not run them: a name
    the spec does not list, a count that is not one list per direction, or alpha/beta values that
    ORT's kernels and the spec read differently (hipep computes only what both agree on)."""
    dirs = num_directions(op_type, attrs)
    k = len(DEFAULT_ACTIVATIONS[op_type])
    names = attrs.get("activations")
    if not names:
        names = list(DEFAULT_ACTIVATIONS[op_type]) * dirs
    names = list(names)
    if op_type == "RNN" and dirs == 1 and len(names) == 2:
        names = names[:1]  # the schema's default lists two; ORT takes the first for one direction
    if len(names) != k * dirs:
        return None, (f"activations lists {len(names)} functions; {op_type} with {dirs} direction(s) takes "
                      f"{k * dirs} ({k} per direction)")
    unknown = [n for n in names if n not in ACTIVATIONS]
    if unknown:
        return None, f"activation {unknown[0]!r} is not one the ONNX spec lists ({', '.join(ACTIVATIONS)})"
    alphas, betas = attrs.get("activation_alpha"), attrs.get("activation_beta")
    alphas = None if alphas is None else [float(v) for v in alphas]
    betas = None if betas is None else [float(v) for v in betas]
    spec, ort = _spec_values(names, alphas, betas), _ort_values(op_type, names, alphas, betas)
    for name, s, o in zip(names, spec, ort):
        if None in s or None in o or s != o:
            return None, (f"{name}'s alpha/beta: ONNX Runtime's {op_type} reads {_pair(o)} from activation_alpha "
                          f"{alphas or []} and activation_beta {betas or []}, the ONNX spec {_pair(s)}")
    return [(n, float(a), float(b)) for n, (a, b) in zip(names, spec)], None


def _pair(values) -> str:
    return "(" + ", ".join("none" if v is None else f"{v:g}" for v in values) + ")"


def _claim(node, graph, attrs):
    """Activations the ONNX spec lists, one list per direction (RNN forward or reverse: two, the
    first used, as ORT does), with alpha/beta values that ONNX Runtime's kernels and the spec read
    alike (ORT's RNN reads entry d of activation_alpha for direction d and 0 without the attribute;
    its GRU and LSTM default ThresholdedRelu, Affine and ScaledTanh to 0); hidden_size above 0; clip,
    when given, above 0 (ORT's GRU and LSTM refuse others, its RNN reads one below 0 as none);
    layout 0 or 1."""
    op_type = node.op_type
    if attrs.get("direction", "forward") not in DIRECTIONS:
        return f"direction {attrs.get('direction')!r} (forward, reverse or bidirectional)"
    if int(attrs.get("hidden_size", 0)) < 1:
        return f"hidden_size {attrs.get('hidden_size')} (it must be at least 1)"
    if attrs.get("clip") is not None and not float(attrs["clip"]) > 0:
        return f"clip {attrs['clip']} (it must be above 0)"
    if int(attrs.get("layout", 0)) not in (0, 1):
        return f"layout {attrs.get('layout')} (0 or 1)"
    _, why = activations(op_type, attrs)
    if why is not None:
        return why
    x = input_type(node, graph, X)
    if x is not None and x.shape is not None and len(x.shape) != 3:
        return f"X of rank {len(x.shape)} (it must be 3-D)"
    return None


# ---- shapes ----------------------------------------------------------------------------------------

def _merge(op_type: str, what: str, known, d, shape):
    """known extent and d (either may be None): the one extent, or RuntimeShapeError."""
    if d is None:
        return known
    if known is not None and known != d:
        raise RuntimeShapeError(f"{op_type}: {what} {pshape_str(shape)} does not fit: its extent {d} should be "
                                f"{known}")
    return d


def dims(op_type: str, attrs, shapes) -> tuple:
    """(seq_length, batch, input_size, hidden_size, directions) from the inputs' partial shapes (one
    per input position, None for an omitted or unranked input; dims None where dynamic), each None
    where unknown. Static extents that do not fit each other raise RuntimeShapeError."""
    g, dirs, hidden = GATES[op_type], num_directions(op_type, attrs), int(attrs["hidden_size"])
    layout = int(attrs.get("layout", 0))
    x = at(shapes, X)
    if x is not None and len(x) != 3:
        order = "[batch, seq_length, input_size]" if layout else "[seq_length, batch, input_size]"
        raise RuntimeShapeError(f"{op_type}: X must be 3-D {order}, got {pshape_str(x)}")
    seq, batch, inp = (None, None, None) if x is None else ((x[1], x[0], x[2]) if layout else tuple(x))
    state = (lambda: [batch, dirs, hidden]) if layout else (lambda: [dirs, batch, hidden])
    expect = {W: ("W", lambda: [dirs, g * hidden, inp]), R: ("R", lambda: [dirs, g * hidden, hidden]),
              B: ("B", lambda: [dirs, 2 * g * hidden]), LENS: ("sequence_lens", lambda: [batch]),
              INITIAL_H: ("initial_h", state), INITIAL_C: ("initial_c", state), P: ("P", lambda: [dirs, 3 * hidden])}
    for pos, (name, want) in expect.items():
        shape = at(shapes, pos)
        if shape is None:
            continue
        full = want()
        if len(shape) != len(full):
            raise RuntimeShapeError(f"{op_type}: {name} must be {pshape_str(full)}, got {pshape_str(shape)}")
        for k, (w, d) in enumerate(zip(full, shape)):
            merged = _merge(op_type, name, w, d, shape)
            if w is None and merged is not None:  # an extent X left unknown
                if pos == W and k == 2:
                    inp = merged
                elif (pos == LENS and k == 0) or (pos in (INITIAL_H, INITIAL_C) and k == (0 if layout else 1)):
                    batch = merged
    return seq, batch, inp, hidden, dirs


def output_shapes(seq, batch, hidden, dirs, layout: int) -> tuple:
    """(Y, Y_h, Y_c) shapes."""
    if layout:
        return (batch, seq, dirs, hidden), (batch, dirs, hidden), (batch, dirs, hidden)
    return (seq, dirs, batch, hidden), (dirs, batch, hidden), (dirs, batch, hidden)


def _shape(op_type: str):
    @shape_rule(op_type)
    def rule(types, values, attrs, num_outputs):
        elem = elem_of(types[X])
        seq, batch, _, hidden, dirs = dims(op_type, attrs, [shape_of(t) for t in types])
        shapes = output_shapes(seq, batch, hidden, dirs, int(attrs.get("layout", 0)))
        return [tensor_type(elem, s) for s in shapes[:3 if op_type == "LSTM" else 2]]
    return rule


# ---- the reference -------------------------------------------------------------------------------

def activate(name: str, x: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """One of the spec's activations, in x's type, as ORT's kernels write them (Softplus as
    log(1 + e^x), which is inf past e^x's range, as there)."""
    t = x.dtype.type
    alpha, beta = t(alpha), t(beta)
    if name == "Relu":
        return np.maximum(x, t(0))
    if name == "Tanh":
        return np.tanh(x)
    if name == "Sigmoid":
        return t(1) / (t(1) + np.exp(-x))
    if name == "Affine":
        return alpha * x + beta
    if name == "LeakyRelu":
        return np.where(x >= 0, x, alpha * x)
    if name == "ThresholdedRelu":
        return np.where(x > alpha, x, t(0))
    if name == "ScaledTanh":
        return alpha * np.tanh(beta * x)
    if name == "HardSigmoid":
        return np.minimum(t(1), np.maximum(t(0), alpha * x + beta))
    if name == "Elu":
        return np.where(x >= 0, x, alpha * (np.exp(x) - t(1)))
    if name == "Softsign":
        return x / (t(1) + np.abs(x))
    if name == "Softplus":
        return np.log(t(1) + np.exp(x))
    raise RuntimeShapeError(f"unknown activation {name!r}")


def check_lengths(op_type: str, lens: np.ndarray, seq: int) -> np.ndarray:
    lens = lens.astype(np.int64)
    bad = np.flatnonzero((lens < 0) | (lens > seq))
    if bad.size:
        b = int(bad[0])
        raise RuntimeShapeError(f"{op_type}: sequence_lens: sequence length {int(lens[b])} of batch entry {b} is "
                                f"out of range [0, {seq}] (seq_length, X's time axis)")
    return lens


def _direction(op_type, attrs, xw, r, rb, p, h, c, lens, acts, backward):
    """One direction over the whole batch: xw [seq, batch, gates * hidden] (x W^T + Wb), r and rb
    the direction's R and Rb, p its peepholes (None: none), h and c the initial state [batch,
    hidden]. Returns (Y [seq, batch, hidden], H, C)."""
    seq, batch, _ = xw.shape
    hidden = r.shape[1]
    clip = attrs.get("clip")
    lo, hi = (None, None) if clip is None else (xw.dtype.type(-float(clip)), xw.dtype.type(float(clip)))

    def f(j, v):  # activation j of the direction, on a gate's clipped input
        return activate(acts[j][0], v if clip is None else np.clip(v, lo, hi), acts[j][1], acts[j][2])

    y = np.zeros((seq, batch, hidden), xw.dtype)
    cols = np.arange(batch)
    hs = slice(0, hidden)
    for s in range(int(lens.max(initial=0))):
        active = s < lens
        t = np.where(active, lens - 1 - s if backward else s, 0)
        g = xw[t, cols]
        if op_type == "RNN":
            h_new = f(0, g + h @ r.T + rb)
        elif op_type == "GRU":
            zr = g[:, :2 * hidden] + h @ r[:2 * hidden].T + rb[:2 * hidden]
            z, reset = f(0, zr[:, hs]), f(0, zr[:, hidden:])
            rh, rbh = r[2 * hidden:], rb[2 * hidden:]
            if attrs.get("linear_before_reset", 0):
                cand = f(1, g[:, 2 * hidden:] + reset * (h @ rh.T + rbh))
            else:
                cand = f(1, g[:, 2 * hidden:] + (reset * h) @ rh.T + rbh)
            h_new = (1 - z) * cand + z * h
        else:
            a = g + h @ r.T + rb
            pi, po, pf = (0, 0, 0) if p is None else (p[hs], p[hidden:2 * hidden], p[2 * hidden:])
            i = f(0, a[:, hs] + pi * c)
            forget = 1 - i if attrs.get("input_forget", 0) else f(0, a[:, 2 * hidden:3 * hidden] + pf * c)
            c_new = forget * c + i * f(1, a[:, 3 * hidden:])
            o = f(0, a[:, hidden:2 * hidden] + po * c_new)
            h_new = o * activate(acts[2][0], c_new, acts[2][1], acts[2][2])
            c = np.where(active[:, None], c_new, c)
        h = np.where(active[:, None], h_new, h)
        y[t[active], cols[active]] = h[active]
    empty = lens == 0
    h[empty] = 0
    if c is not None:
        c[empty] = 0
    return y, h, c


def _reference(op_type: str):
    @kernel(op_type)
    def reference(inputs, attrs):
        x = inputs[X]
        shapes = [None if a is None else a.shape for a in inputs]
        seq, batch, _, hidden, dirs = dims(op_type, attrs, shapes)
        acts, why = activations(op_type, attrs)
        if why is not None:
            raise RuntimeShapeError(f"{op_type}: {why}")
        layout = int(attrs.get("layout", 0))
        cd = compute_dtype(x.dtype)
        g, k = GATES[op_type], len(DEFAULT_ACTIVATIONS[op_type])

        def state(i):  # an initial state as [directions, batch, hidden] in the compute type
            v = at(inputs, i)
            if v is None:
                return np.zeros((dirs, batch, hidden), cd)
            return (v.transpose(1, 0, 2) if layout else v).astype(cd)

        xs = (x.transpose(1, 0, 2) if layout else x).astype(cd)
        lens = at(inputs, LENS)
        lens = np.full(batch, seq, np.int64) if lens is None else check_lengths(op_type, lens, seq)
        h0, c0 = state(INITIAL_H), state(INITIAL_C) if op_type == "LSTM" else None
        bias, peep = at(inputs, B), at(inputs, P)
        y = np.zeros((seq, dirs, batch, hidden), cd)
        yh, yc = np.zeros((dirs, batch, hidden), cd), np.zeros((dirs, batch, hidden), cd)
        for d in range(dirs):
            wb = np.zeros(g * hidden, cd) if bias is None else bias[d, :g * hidden].astype(cd)
            rb = np.zeros(g * hidden, cd) if bias is None else bias[d, g * hidden:].astype(cd)
            xw = xs @ inputs[W][d].astype(cd).T + wb
            backward = attrs.get("direction", "forward") == "reverse" or d == 1
            out, h, c = _direction(op_type, attrs, xw, inputs[R][d].astype(cd), rb,
                                   None if peep is None else peep[d].astype(cd), h0[d], None if c0 is None else c0[d],
                                   lens, acts[d * k:(d + 1) * k], backward)
            y[:, d], yh[d] = out, h
            if c is not None:
                yc[d] = c
        outs = [y, yh, yc] if op_type == "LSTM" else [y, yh]
        if layout:
            outs = [y.transpose(2, 0, 1, 3)] + [o.transpose(1, 0, 2) for o in outs[1:]]
        return [result(o, x.dtype) for o in outs]
    return reference


_ATTRIBUTES = {"activation_alpha": None, "activation_beta": None, "activations": None, "clip": None,
               "direction": "forward", "hidden_size": REQUIRED, "layout": 0}
_EXTRA = {"RNN": {}, "GRU": {"linear_before_reset": 0}, "LSTM": {"input_forget": 0}}

# ONNX Runtime's CPU EP runs f32 and f16 (its f16 through f32); f64 is the numpy reference's own
# (ORT's kernels refuse it), bf16 (opset 22) no one's. Opset 14 adds layout; opset 22 bf16.
for _op in ("RNN", "GRU", "LSTM"):
    _inputs = ("T", "T", "T", "T", "T1", "T") + (("T", "T") if _op == "LSTM" else ())
    register(OpDef(_op, (7, 14, 22), _inputs, ("T",) * (3 if _op == "LSTM" else 2),
                   {"T": frozenset({F16, F32, F64}), "T1": frozenset({I32})}, _reference(_op),
                   attributes={**_ATTRIBUTES, **_EXTRA[_op]}, claim=_claim, shape_rule=_shape(_op), min_inputs=3))
