"""Mixture of experts (com.microsoft): MoE (float expert weights) and QMoE (4- or 8-bit quantized
ones), as ONNX Runtime's CPU EP computes them (the oracle); on a GPU both run kernels/moe.hip. Both
route each token to k experts, run each selected expert's fc1 (+ bias), activation and fc2 (+ bias),
and sum the experts' outputs weighted by the routing weights; they differ in the experts' GEMMs
(QMoE's are MatMulNBits', from contrib_quant.py) and in the routing weights without
normalize_routing_weights."""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ..graph import elem_type_name
from ._common import at, elem_of, has_input, kernel, pshape_str, result, shape_of, shape_rule, shape_str, tensor_type
from .contrib_quant import _mnb_matmul, _pow2, unpack_bits
from .registry import F32, FLOATS, U8, OpDef, register

MS = "com.microsoft"
f32 = np.float32
f64 = np.float64
F32S = frozenset({F32})
F8E4M3FN, F8E8M0 = 17, 24  # ONNX element types of the fp8 / MXFP4 operands
# QMoE's schema types (onnxruntime 1.32): weights and zero points T1, scales T2. Wider than what the
# reference runs so that a node of another quant type reaches `_claim_qmoe`, whose reason names the
# quant type rather than an operand's element type.
QMOE_T1 = frozenset({U8, F8E4M3FN})
QMOE_T2 = FLOATS | {F8E4M3FN, F8E8M0}


# ---- QMoE ------------------------------------------------------------------------------------
# ORT 1.31's CPU QMoE (quant_type 'int'), as measured against the CPU EP:
#  * routing: the k largest router logits per token (ties: the larger expert index first); the
#    mixing weights are the softmax over those k logits (normalize_routing_weights changes
#    nothing there). With router_weights, the weights are router_weights at the selected experts,
#    divided by their sum when normalize_routing_weights=1. Weights <= 1e-8 are skipped.
#  * each selected expert: fc1 (+ bias), activation, fc2 (+ bias); output = sum of weight * fc2.
#    Activations: relu, identity, silu (x * sigmoid(x)), gelu (tanh approximation), swiglu
#    (fused, interleaved: g = even columns, l = odd; clamp by swiglu_limit; g * sigmoid(alpha * g)
#    * (l + beta)). activation_alpha/beta only affect swiglu.
#  * weights: [E, N, K * bits / 8] (low bits first), scales [E, N] (one per output row) or
#    [E, N, K / block_size]; zero points packed along the last axis (default 2^(bits-1)).
#    Row-wise weights and block-wise 4-bit weights below accuracy_level 4 run dequantize + f32
#    GEMM; block-wise 8-bit weights (any level) and 4-bit at level 4 run MLAS's int8-activation
#    GEMM when the weights are constant (see MatMulNBits; the reference quantizes each GEMM's input
#    rows exactly as MLAS does). fp32 math throughout, f16 in and out converted once.
#    Scales may be f32 or f16 whatever the activations' type (ORT converts them to f32 first).
# Because fc2's int8 input is fc1's f32 output after the activation, a difference of an f32 ulp
# there (ORT's own summation order, MLAS's logistic) can move a value across an int8 rounding
# boundary: the int8 paths agree with ORT up to such single-code flips.
#
# The other quant types of the schema ('fp4' = MXFP4, 'nvfp4', 'wfp4afp8', 'fp8') have no CPU
# implementation in ORT 1.32 (its kernels are CUDA's), so there is no oracle and hipep refuses
# them. Measured on the CPU EP: its QMoE kernel never reads quant_type or inputs 15-20 -- a node
# with any quant_type (even an unknown one) and f32/f16 scales computes exactly the 'int' result;
# with the schema's block scales (float8e8m0 for MXFP4, float8e4m3fn for NVFP4) it fails reading
# them as floats ("Tensor type mismatch", at session creation for constant scales, else at run
# time); and float8e4m3fn weights (fp8) have no CPU kernel registered at all.

_QMOE_ACTS = ("relu", "gelu", "silu", "swiglu", "identity")
# The schema's non-integer quant types, in words (for the claim's reason).
_QMOE_FP_TYPES = {
    "fp4": "MXFP4: e2m1 weights with float8e8m0 block scales",
    "nvfp4": "NVFP4: e2m1 weights with float8e4m3fn block scales",
    "wfp4afp8": "MXFP4 weights with fp8 activations",
    "fp8": "float8e4m3fn weights",
}
_QMOE_FLOAT_OPERANDS = ((3, "fc1_scales"), (6, "fc2_scales"))
_QMOE_BYTE_OPERANDS = ((2, "fc1_experts_weights"), (5, "fc2_experts_weights"), (11, "fc1_zero_points"),
                       (12, "fc2_zero_points"))
_QMOE_FC3 = (8, 9, 10, 13)         # fc3 weights/scales/bias/zero points: not run by ORT's CPU EP
_QMOE_FP_ONLY = tuple(range(15, 21))  # global / activation scales of the fp4/fp8 quant types
_QMOE_FP_NAMES = ("fc1_global_scale", "fc2_global_scale", "fc1_act_scale", "fc2_act_scale",
                  "fc1_act_block_scale", "fc2_act_block_scale")


def _qmoe_bits(attrs):
    return int(attrs["expert_weight_bits"])


def _qmoe_dims(op, x, router, w1, w2, bits, swiglu):
    """(tokens, hidden, inter, experts) from the operand shapes, checked like ORT's moe_helper
    (bits 8 for MoE's float weights: one value per element)."""
    per = 8 // bits
    if len(x) not in (2, 3):
        raise RuntimeShapeError(f"{op}: input must be 2-D [tokens, hidden] or 3-D [batch, seq, hidden], "
                                f"got shape {pshape_str(x)}")
    if len(w1) != 3 or len(w2) != 3:
        raise RuntimeShapeError(f"{op}: expert weights must be 3-D, got fc1 {pshape_str(w1)}, fc2 {pshape_str(w2)}")
    hidden = x[-1]
    experts = w1[0]
    inter = None if w2[2] is None else w2[2] * per
    if hidden is not None and w1[2] is not None and w1[2] * per != hidden:
        raise RuntimeShapeError(f"{op}: fc1_experts_weights {pshape_str(w1)} must be "
                                f"[E, N, hidden{' * bits / 8' if per > 1 else ''}] with hidden = {hidden}"
                                + (f" (bits={bits})" if per > 1 else ""))
    if hidden is not None and w2[1] is not None and w2[1] != hidden:
        raise RuntimeShapeError(f"{op}: fc2_experts_weights {pshape_str(w2)} must be [E, hidden={hidden}, ...]")
    if inter is not None and w1[1] is not None and w1[1] != inter * (2 if swiglu else 1):
        raise RuntimeShapeError(f"{op}: fc1_experts_weights {pshape_str(w1)} has {w1[1]} output rows; fc2 "
                                f"{pshape_str(w2)} implies inter_size {inter}"
                                f"{' (x2 for fused swiglu)' if swiglu else ''}")
    if experts is not None and w2[0] is not None and w2[0] != experts:
        raise RuntimeShapeError(f"{op}: fc1 and fc2 weights disagree on the number of experts "
                                f"({pshape_str(w1)} vs {pshape_str(w2)})")
    tokens = None
    if all(d is not None for d in x[:-1]):
        tokens = int(np.prod(x[:-1], dtype=np.int64))
    if router is not None:
        if len(router) != 2:
            raise RuntimeShapeError(f"{op}: router_probs must be 2-D [tokens, experts], got {pshape_str(router)}")
        for got, want, what in ((router[0], tokens, "tokens"), (router[1], experts, "experts")):
            if got is not None and want is not None and got != want:
                raise RuntimeShapeError(f"{op}: router_probs {pshape_str(router)} must be [tokens={tokens}, "
                                        f"experts={experts}] ({what} differ; input {pshape_str(x)})")
    return tokens, hidden, inter, experts


def _qmoe_weights(op, w, scales, zp, bits, bs, rows, cols, what):
    """One projection's operands -> (q int32 [E, rows, nb, blk], s f32 [E, rows, nb],
    z int32 [E, rows, nb]) with blk = block_size (or cols for row-wise scales)."""
    e = w.shape[0]
    blk = bs if bs else cols
    nb = cols // blk
    if bs and cols % bs:
        raise RuntimeShapeError(f"{op}: {what} input size {cols} is not a multiple of block_size={bs}")
    want_s = (e, rows, nb) if bs else (e, rows)
    if scales is None or scales.size != int(np.prod(want_s)):
        got = "none" if scales is None else shape_str(scales.shape)
        raise RuntimeShapeError(f"{op}: {what}_scales must be {shape_str(want_s)}, got {got}")
    q = unpack_bits(w.reshape(e, rows, -1), bits).astype(np.int32).reshape(e, rows, nb, blk)
    s = scales.astype(f32).reshape(e, rows, nb)
    if zp is None:
        z = np.full((e, rows, nb), 1 << (bits - 1), np.int32)
    else:
        per = 8 // bits
        want_z = (e, rows, (nb + per - 1) // per) if bs else (e, (rows + per - 1) // per)
        if zp.size != int(np.prod(want_z)):
            raise RuntimeShapeError(f"{op}: {what}_zero_points must be {shape_str(want_z)}, got {shape_str(zp.shape)}")
        if bs:
            z = unpack_bits(zp.reshape(want_z), bits)[:, :, :nb].astype(np.int32)
        else:
            z = unpack_bits(zp.reshape(want_z), bits)[:, :rows].astype(np.int32).reshape(e, rows, 1)
    return q, s, z


def _qmoe_activation(h: np.ndarray, attrs) -> np.ndarray:
    act = attrs["activation_type"]
    if act == "identity":
        return h
    if act == "relu":
        return np.maximum(h, f32(0))
    v = h.astype(f64)
    if act == "silu":
        out = v / (1.0 + np.exp(-v))
    elif act == "gelu":
        out = 0.5 * v * (1.0 + np.tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)))
    else:  # fused interleaved swiglu
        g, lin = v[:, 0::2], v[:, 1::2]
        limit = attrs.get("swiglu_limit")
        if limit is not None:
            g = np.minimum(g, float(f32(limit)))
            lin = np.clip(lin, -float(f32(limit)), float(f32(limit)))
        alpha, beta = float(f32(attrs["activation_alpha"])), float(f32(attrs["activation_beta"]))
        out = g / (1.0 + np.exp(-alpha * g)) * (lin + beta)
    return out.astype(f32)


def _qmoe_route(logits: np.ndarray, weights, k: int, normalize: bool):
    """(experts int [T, k], mixing weights f32 [T, k]) as ORT's CPU QMoE routes (MoE: `_moe_route`)."""
    t, e = logits.shape
    idx = np.broadcast_to(np.arange(e), (t, e))
    order = np.lexsort((-idx, -logits), axis=-1)[:, :k]  # value desc, then larger index first
    if weights is None:
        top = np.take_along_axis(logits, order, axis=-1)
        ex = np.exp((top - top[:, :1]).astype(f32)).astype(f32)
        total = np.add.accumulate(ex, axis=-1, dtype=f32)[:, -1]
        inv = np.where(total == 0, f32(0), f32(1) / np.where(total == 0, f32(1), total)).astype(f32)
        return order, (ex * inv[:, None]).astype(f32)
    w = np.take_along_axis(weights, order, axis=-1)
    if normalize:
        total = np.add.accumulate(w, axis=-1, dtype=f32)[:, -1]
        inv = np.where(total == 0, f32(0), f32(1) / np.where(total == 0, f32(1), total)).astype(f32)
        w = (w * inv[:, None]).astype(f32)
    return order, w


def _claim_experts(attrs) -> str | None:
    """What MoE and QMoE share in their claims: the activation, SwiGLU's layout, the router."""
    act = attrs["activation_type"]
    if act not in _QMOE_ACTS:
        return f"attribute activation_type='{act}' is not supported ({', '.join(_QMOE_ACTS)})"
    fusion = int(attrs["swiglu_fusion"])
    if act == "swiglu" and fusion != 1:
        return f"swiglu with swiglu_fusion={fusion}: ORT's CPU EP runs only fused, interleaved SwiGLU (1)"
    if act != "swiglu" and fusion != 0:
        return f"attribute swiglu_fusion={fusion} with activation_type='{act}' is not supported"
    if int(attrs.get("swiglu_limit_after_activation", 0)) != 0:
        return "attribute swiglu_limit_after_activation=1 is not supported (hipep clamps before the activation only)"
    if int(attrs["use_sparse_mixer"]) != 0:
        return "attribute use_sparse_mixer=1 is not supported"
    return None


def _check_experts(op, attrs, experts: int, n1: int, hidden: int, b1, b2) -> int:
    """k (checked against the number of experts), with the biases' sizes checked."""
    k = int(attrs["k"])
    if not 1 <= k <= experts:
        raise RuntimeShapeError(f"{op}: k={k} must be between 1 and the number of experts {experts}")
    for b, n, what in ((b1, n1, "fc1"), (b2, hidden, "fc2")):
        if b is not None and b.size != experts * n:
            raise RuntimeShapeError(f"{op}: {what}_experts_bias must be [{experts}, {n}], got {shape_str(b.shape)}")
    return k


def _run_experts(xs, order, mix, attrs, experts: int, b1, b2, fc1, fc2) -> np.ndarray:
    """Each picked expert e over its tokens' rows: fc1(e, rows) (+ bias), the activation, fc2
    (+ bias); the outputs summed in f64 with the mixing weights, then rounded to f32 [T, hidden].
    Weights <= 1e-8 skip their expert, as ORT does."""
    out = np.zeros((xs.shape[0], xs.shape[1]), f64)
    for e in np.unique(order):
        rows, slots = np.nonzero((order == e) & (mix > f32(1e-8)))
        if rows.size == 0:
            continue
        h = fc1(e, xs[rows])
        if b1 is not None:
            h = h + b1.astype(f32).reshape(experts, -1)[e]
        y = fc2(e, _qmoe_activation(h.astype(f32), attrs))
        if b2 is not None:
            y = y + b2.astype(f32).reshape(experts, -1)[e]
        np.add.at(out, rows, mix[rows, slots][:, None].astype(f64) * y.astype(f32))
    return out.astype(f32)


def _qmoe_int8(attrs) -> bool:
    bs = int(attrs.get("block_size") or 0)
    return bs > 0 and (_qmoe_bits(attrs) == 8 or int(attrs["accuracy_level"]) == 4)


@kernel("QMoE")
def _qmoe(inputs, attrs):
    op = "QMoE"
    x, router = inputs[0], inputs[1]
    w1, s1, b1 = inputs[2], at(inputs, 3), at(inputs, 4)
    w2, s2, b2 = inputs[5], at(inputs, 6), at(inputs, 7)
    z1, z2, rw = at(inputs, 11), at(inputs, 12), at(inputs, 14)
    bits, bs = _qmoe_bits(attrs), int(attrs.get("block_size") or 0)
    swiglu = attrs["activation_type"] == "swiglu"
    tokens, hidden, inter, experts = _qmoe_dims(op, x.shape, router.shape, w1.shape, w2.shape, bits, swiglu)
    k = _check_experts(op, attrs, experts, w1.shape[1], hidden, b1, b2)
    n1 = w1.shape[1]
    q1, sc1, zz1 = _qmoe_weights(op, w1, s1, z1, bits, bs, n1, hidden, "fc1")
    q2, sc2, zz2 = _qmoe_weights(op, w2, s2, z2, bits, bs, hidden, inter, "fc2")
    if rw is not None and rw.size != tokens * experts:
        raise RuntimeShapeError(f"{op}: router_weights must be [{tokens}, {experts}], got {shape_str(rw.shape)}")
    xs = x.astype(f32).reshape(tokens, hidden)
    order, mix = _qmoe_route(router.astype(f32).reshape(tokens, experts),
                             None if rw is None else rw.astype(f32).reshape(tokens, experts),
                             k, bool(attrs["normalize_routing_weights"]))
    int8 = _qmoe_int8(attrs)
    out = _run_experts(xs, order, mix, attrs, experts, b1, b2,
                       lambda e, a: _mnb_matmul(a, q1[e], sc1[e], zz1[e], int8, bs),
                       lambda e, a: _mnb_matmul(a, q2[e], sc2[e], zz2[e], int8, bs))
    return [result(out.reshape(x.shape), x.dtype)]


@shape_rule("QMoE")
def _qmoe_shape(types, values, attrs, num_outputs):
    x = shape_of(types[0])
    r, w1, w2 = shape_of(at(types, 1)), shape_of(at(types, 2)), shape_of(at(types, 5))
    if x is not None and w1 is not None and w2 is not None:
        _, hidden, _, _ = _qmoe_dims("QMoE", x, r, w1, w2, _qmoe_bits(attrs), attrs["activation_type"] == "swiglu")
        if x[-1] is None and hidden is None and w1[2] is not None:
            x = tuple(x[:-1]) + (w1[2] * (8 // _qmoe_bits(attrs)),)
    elif x is not None and len(x) not in (2, 3):
        raise RuntimeShapeError(f"QMoE: input must be 2-D or 3-D, got shape {pshape_str(x)}")
    return [tensor_type(elem_of(types[0]), x)]


def _claim_qmoe(node, graph, attrs):
    """quant_type 'int' only (uint8 weights, f32/f16 scales): ORT's CPU EP runs no other quant type."""
    qt = attrs["quant_type"]
    if qt != "int":
        if qt in _QMOE_FP_TYPES:
            return (f"attribute quant_type='{qt}' ({_QMOE_FP_TYPES[qt]}) is not supported: ORT's CPU EP, "
                    f"hipep's reference, has no kernel for it (it computes 'int' whatever quant_type says), "
                    f"so there is no oracle")
        return (f"attribute quant_type='{qt}' is not supported (only 'int'; the schema also names "
                f"{', '.join(_QMOE_FP_TYPES)})")
    for i, what in _QMOE_BYTE_OPERANDS:
        if has_input(node, i) and graph.type_of(node.inputs[i]).elem_type != U8:
            return (f"input {i} {what} is {elem_type_name(graph.type_of(node.inputs[i]).elem_type)}; "
                    f"quant_type 'int' takes packed uint8")
    for i, what in _QMOE_FLOAT_OPERANDS:
        if has_input(node, i) and graph.type_of(node.inputs[i]).elem_type not in FLOATS:
            return (f"input {i} {what} is {elem_type_name(graph.type_of(node.inputs[i]).elem_type)}; "
                    f"quant_type 'int' takes f32 or f16 scales")
    bits = _qmoe_bits(attrs)
    if bits not in (4, 8):
        return f"attribute expert_weight_bits={bits} is not supported (4 or 8)"
    for name in ("fc1_expert_weight_bits", "fc2_expert_weight_bits", "fc3_expert_weight_bits"):
        if attrs.get(name) is not None and int(attrs[name]) != bits:
            return f"attribute {name}={attrs[name]} differs from expert_weight_bits={bits}; not supported"
    why = _claim_experts(attrs)
    if why:
        return why
    if int(attrs["weights_prepacked"]) == 1:
        return "attribute weights_prepacked=1: expert weights are in an EP-specific layout hipep does not read"
    if int(attrs["k"]) < 1:
        return f"attribute k={attrs['k']} must be >= 1"
    bs = int(attrs.get("block_size") or 0)
    if bs and not (_pow2(bs) and 16 <= bs <= 256):
        return f"attribute block_size={bs} is not supported (a power of two from 16 to 256)"
    for i in _QMOE_FC3:
        if has_input(node, i):
            return "fc3 (unfused gated projection) inputs are not supported (ORT's CPU EP does not run them)"
    for i in _QMOE_FP_ONLY:
        if has_input(node, i):
            return (f"input {i} ({_QMOE_FP_NAMES[i - _QMOE_FP_ONLY[0]]}, a scale of the fp4/fp8 quant types) "
                    f"is not supported with quant_type 'int'")
    for i, what in ((3, "fc1_scales"), (5, "fc2_experts_weights"), (6, "fc2_scales")):
        if not has_input(node, i):
            return f"input {what} is required for quant_type 'int'"
    if _qmoe_int8(attrs):
        operands = [(2, "fc1_experts_weights"), (3, "fc1_scales"), (5, "fc2_experts_weights"),
                    (6, "fc2_scales"), (11, "fc1_zero_points"), (12, "fc2_zero_points")]
        fed = [what for i, what in operands if has_input(node, i) and not graph.is_initializer(node.inputs[i])]
        if fed:
            return (f"block-wise {bits}-bit experts at accuracy_level={attrs['accuracy_level']} with "
                    f"{', '.join(fed)} not constant: ORT's CPU EP then dequantizes instead of using "
                    f"int8 activations, which hipep cannot follow")
    return None


register(OpDef("QMoE", (1,), ("T", "T", "T1", "T2", "T", "T1", "T2", "T", "T1", "T2", "T", "T1", "T1", "T1", "T",
                           "T4", "T4", "T4", "T4", "T2", "T2"), ("T",),
               {"T": FLOATS, "T1": QMOE_T1, "T2": QMOE_T2, "T4": F32S}, _qmoe,
               attributes={"weights_prepacked": -1, "k": 1, "block_size": None, "swiglu_limit": None,
                           "fc1_expert_weight_bits": None, "fc2_expert_weight_bits": None,
                           "fc3_expert_weight_bits": None, "accuracy_level": 0, "quant_type": "int",
                           "activation_type": "relu", "use_sparse_mixer": 0, "swiglu_fusion": 0,
                           # onnxruntime 1.32 adds it (filled with its default 0 on every node)
                           "swiglu_limit_after_activation": 0,
                           "activation_alpha": 1.0, "normalize_routing_weights": 0,
                           "expert_weight_bits": 4, "activation_beta": 0.0},
               claim=_claim_qmoe, domain=MS, min_inputs=3, shape_rule=_qmoe_shape))


# ---- MoE --------------------------------------------------------------------------------------
# ORT's CPU MoE, as measured against the CPU EP: the experts and activations are QMoE's (above),
# with float weights [E, N, K] (fc1: N = inter, x2 for fused interleaved SwiGLU, the only SwiGLU
# layout its CPU kernel runs) and f32 GEMMs (f16 in and out converted once). Routing: the k largest
# router logits per token as QMoE picks them; with normalize_routing_weights=1 the weights are the
# softmax over those k logits (as QMoE's), with 0 the softmax over all experts' logits taken at the
# k picked ones (they do not sum to 1).

MOE = "MoE"


def _moe_route(logits: np.ndarray, k: int, normalize: bool):
    order, mix = _qmoe_route(logits, None, k, True)
    if normalize:
        return order, mix
    ex = np.exp((logits - logits.max(axis=-1, keepdims=True)).astype(f32)).astype(f32)
    total = np.add.accumulate(ex, axis=-1, dtype=f32)[:, -1:]
    return order, np.take_along_axis((ex / total).astype(f32), order, axis=-1)


def _gemm_f32(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """a [M, K] @ w [N, K]^T in f64, rounded once to f32 (MLAS's f32 GEMM up to its summation order)."""
    return (a.astype(f64) @ w.astype(f64).T).astype(f32)


@kernel(MOE)
def _moe(inputs, attrs):
    op = MOE
    x, router, w1, b1, w2, b2 = inputs[0], inputs[1], inputs[2], at(inputs, 3), at(inputs, 4), at(inputs, 5)
    if w2 is None:
        raise RuntimeShapeError(f"{op}: input fc2_experts_weights is required")
    swiglu = attrs["activation_type"] == "swiglu"
    tokens, hidden, inter, experts = _qmoe_dims(op, x.shape, router.shape, w1.shape, w2.shape, 8, swiglu)
    k = _check_experts(op, attrs, experts, w1.shape[1], hidden, b1, b2)
    xs = x.astype(f32).reshape(tokens, hidden)
    order, mix = _moe_route(router.astype(f32).reshape(tokens, experts), k, bool(attrs["normalize_routing_weights"]))
    w1f, w2f = w1.astype(f32), w2.astype(f32)
    out = _run_experts(xs, order, mix, attrs, experts, b1, b2, lambda e, a: _gemm_f32(a, w1f[e]),
                       lambda e, a: _gemm_f32(a, w2f[e]))
    return [result(out.reshape(x.shape), x.dtype)]


@shape_rule(MOE)
def _moe_shape(types, values, attrs, num_outputs):
    x = shape_of(types[0])
    r, w1, w2 = shape_of(at(types, 1)), shape_of(at(types, 2)), shape_of(at(types, 4))
    if x is not None and w1 is not None and w2 is not None:
        _, hidden, _, _ = _qmoe_dims(MOE, x, r, w1, w2, 8, attrs["activation_type"] == "swiglu")
        if x[-1] is None and hidden is None and w1[2] is not None:
            x = tuple(x[:-1]) + (w1[2],)
    elif x is not None and len(x) not in (2, 3):
        raise RuntimeShapeError(f"{MOE}: input must be 2-D or 3-D, got shape {pshape_str(x)}")
    return [tensor_type(elem_of(types[0]), x)]


def _claim_moe(node, graph, attrs):
    why = _claim_experts(attrs)
    if why:
        return why
    if int(attrs["k"]) < 1:
        return f"attribute k={attrs['k']} must be >= 1"
    if not has_input(node, 4):
        return "input fc2_experts_weights is required"
    for i in (6, 7):
        if has_input(node, i):
            return "fc3 (unfused gated projection) inputs are not supported (ORT's CPU EP does not run them)"
    return None


register(OpDef(MOE, (1,), ("T",) * 8, ("T",), {"T": FLOATS}, _moe,
               attributes={"k": 1, "activation_type": "relu", "normalize_routing_weights": 0, "use_sparse_mixer": 0,
                           "swiglu_fusion": 0, "swiglu_limit": None, "activation_alpha": 1.0,
                           "activation_beta": 0.0,
                           # onnxruntime 1.32 adds it (filled with its default 0 on every node)
                           "swiglu_limit_after_activation": 0},
               claim=_claim_moe, domain=MS, min_inputs=3, shape_rule=_moe_shape))
