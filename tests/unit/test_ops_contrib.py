"""Contrib ops (hipep/ops/contrib_quant.py, moe.py, contrib_norm.py) against ONNX Runtime's CPU EP.

Each case is a single-node model whose weights (B, scales, zero points, expert weights, gathered
data) are initializers -- ORT's int8-activation MatMulNBits/QMoE paths exist only for constant
weights -- and whose activations are graph inputs. The registry's reference runs on the node that
`GraphView.from_onnx` sees; dtypes and shapes must equal ORT's, f32 values agree within the
tolerance given per case and f16 values within one f16 ulp. Every case also checks the shape rule
on static shapes (== the reference's shapes) and on partial ones (never an invented extent).
End to end: a tiny int4 MLP (SkipSimplifiedLayerNormalization -> MatMulNBits -> SiLU ->
MatMulNBits), a GatherBlockQuantized embedding and a QMoE run through hipep.InferenceSession.
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from hipep.errors import RuntimeShapeError
from hipep.graph import GraphView, TensorType, elem_type_of
from hipep.ops import check_node, lookup, resolve_attributes

from helpers import cpu_flags

IR_VERSION = 10
MS = "com.microsoft"
f32, f16, i32, i64, u8 = np.float32, np.float16, np.int32, np.int64, np.uint8
RNG = np.random.default_rng(20250611)


def N(*shape, dtype=f32, scale=1.0):
    return (RNG.normal(size=shape) * scale).astype(dtype)


def U(lo, hi, *shape, dtype=f32):
    return RNG.uniform(lo, hi, size=shape).astype(dtype)


class W:
    """An operand that becomes an initializer (a constant weight) rather than a graph input."""

    def __init__(self, value):
        self.value = np.asarray(value)


def build(op, domain, inputs, attrs=None, n_out=1, opset=21, out_names=None, out_dtypes=None):
    names, g_in, inits = [], [], []
    for i, a in enumerate(inputs):
        if a is None:
            names.append("")
        elif isinstance(a, W):
            names.append(f"w{i}")
            inits.append(numpy_helper.from_array(a.value, f"w{i}"))
        else:
            names.append(f"x{i}")
            g_in.append(helper.make_tensor_value_info(f"x{i}", elem_type_of(a.dtype), a.shape))
    while names and not names[-1]:
        names.pop()
    outs = out_names or [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, names, outs, domain=domain or None, **(attrs or {}))
    present = [o for o in outs if o]
    if out_dtypes is None:
        g_out = [helper.make_empty_tensor_value_info(o) for o in present]
    else:  # typed outputs (onnx's shape inference knows no contrib op), as ORT reports them
        g_out = [helper.make_tensor_value_info(o, elem_type_of(d), None) for o, d in zip(present, out_dtypes)]
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(MS, 1)] if domain == MS else [])
    graph = helper.make_graph([node], "g", g_in, g_out, inits)
    return helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION)


def values(inputs):
    return [None if a is None else (a.value if isinstance(a, W) else a) for a in inputs]


def ort_run(model, inputs):
    feeds = {f"x{i}": a for i, a in enumerate(inputs) if a is not None and not isinstance(a, W)}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def reference(model, inputs):
    graph = GraphView.from_onnx(model)
    node = graph.nodes[0]
    reason = check_node(node, graph)
    assert reason is None, reason
    op = lookup(node.domain, node.op_type)
    attrs = resolve_attributes(op, node)
    return node, op, attrs, op.reference(values(inputs), attrs)


def assert_close(got, want, tol, what):
    assert isinstance(got, np.ndarray) and got.flags.c_contiguous, what
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != ORT's {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != ORT's {want.shape}"
    if want.dtype == f16:  # one f16 ulp (f32-level differences may flip the final rounding) + atol
        ulp = np.spacing(np.abs(want)).astype(f32) + f32(tol[1])
        err = np.abs(got.astype(f32) - want.astype(f32))
        assert np.all(err <= ulp), f"{what}: {np.count_nonzero(err > ulp)} values differ by more than an ulp"
    elif want.dtype.kind == "f":
        rtol, atol = tol
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def check_shape_rule(op, attrs, inputs, got):
    """Static shapes give exactly the reference's shapes; partial ones never invent an extent."""
    vals = values(inputs)
    types = [None if a is None else TensorType(elem_type_of(a.dtype), a.shape) for a in vals]
    n = len(got)
    static = op.shape_rule(types, [None] * len(types), attrs, n)
    for k, (s, g) in enumerate(zip(static, got)):
        assert s.shape == g.shape and s.elem_type == elem_type_of(g.dtype), f"rule output {k}: {s} vs {g.shape}"
    for i, t in enumerate(types):
        if t is None:
            continue
        variants = [TensorType(t.elem_type, None), TensorType(t.elem_type, (None,) * len(t.shape))]
        variants += [TensorType(t.elem_type, t.shape[:j] + (None,) + t.shape[j + 1:]) for j in range(len(t.shape))]
        for v in variants:
            partial = op.shape_rule(types[:i] + [v] + types[i + 1:], [None] * len(types), attrs, n)
            for p, s in zip(partial, static):
                if p.elem_type:
                    assert p.elem_type == s.elem_type
                if p.shape is not None:
                    agree = len(p.shape) == len(s.shape) and all(a is None or a == b for a, b in zip(p.shape, s.shape))
                    assert agree, f"input {i} as {v}: {p} invents an extent of {s}"


CASES = []


def case(op, domain, inputs, attrs=None, n_out=1, opset=21, tol=(1e-5, 1e-6), out_names=None, id=None):
    CASES.append(pytest.param(op, domain, inputs, attrs or {}, n_out, opset, tol, out_names,
                              id=id or f"{op}-{len(CASES)}"))


def run_case(op_type, domain, inputs, attrs, n_out, opset, tol, out_names):
    want = ort_run(build(op_type, domain, inputs, attrs, n_out, opset, out_names), inputs)
    model = build(op_type, domain, inputs, attrs, n_out, opset, out_names, [w.dtype for w in want])
    before = [None if a is None else a.copy() for a in values(inputs)]
    node, op, rattrs, got = reference(model, inputs)
    assert node.since_version == since_version(op_type, domain, opset)
    present = [i for i, o in enumerate(node.outputs) if o]
    assert len(got) >= len(node.outputs)
    for k, (i, w) in enumerate(zip(present, want)):
        assert_close(got[i], w, tol, f"{op_type} output {i}")
        for a in values(inputs):
            assert a is None or not np.shares_memory(got[i], a), "output aliases an input"
    for a, b in zip(values(inputs), before):
        assert a is None or np.array_equal(a, b), "input modified"
    check_shape_rule(op, rattrs, inputs, got[:len(node.outputs)])
    return node, got


# ---- normalization ---------------------------------------------------------------------------
for _dt in (f32, f16):
    for _h in (7, 16, 37, 300):  # < 16 takes ORT's scalar loop, >= 16 MLAS's AVX2 kernel
        case("SimplifiedLayerNormalization", "", [N(2, 3, _h, dtype=_dt), N(_h, dtype=_dt)],
             {"epsilon": 1e-6}, n_out=2, id=f"SLN-{np.dtype(_dt).name}-{_h}")
        case("RMSNormalization", "", [N(2, 3, _h, dtype=_dt), N(_h, dtype=_dt)], {}, opset=23,
             id=f"RMSNorm-{np.dtype(_dt).name}-{_h}")
case("SimplifiedLayerNormalization", "", [N(2, 3, 8), N(3, 8)], {"axis": 1}, n_out=2, id="SLN-axis1")
for _v in range(1, 27):  # every default-domain opset ORT 1.31 loads (GraphView reports it as the since-version)
    case("SimplifiedLayerNormalization", "", [N(2, 20), W(N(20))], opset=_v, id=f"SLN-opset{_v}")
case("SimplifiedLayerNormalization", "", [N(4, 24), W(N(24))], {}, opset=17, id="SLN-opset17-Y-only")
case("SimplifiedLayerNormalization", "", [N(4, 24), W(N(24))], {}, n_out=2, opset=23, id="SLN-opset23")
case("RMSNormalization", "", [N(2, 5, 6), N(5, 6)], {"axis": -2, "epsilon": 1e-3}, opset=23, id="RMSNorm-axis-2")
case("RMSNormalization", "", [N(3, 40), N(40)], {}, opset=24, id="RMSNorm-opset24")

for _dt in (f32, f16):
    _n = np.dtype(_dt).name
    for _h in (7, 64, 300):
        x, g = N(2, 3, _h, dtype=_dt), N(_h, dtype=_dt)
        case("SkipSimplifiedLayerNormalization", MS, [x, N(2, 3, _h, dtype=_dt), g, N(_h, dtype=_dt)],
             {"epsilon": 1e-6}, n_out=4, id=f"SSLN-{_n}-{_h}")
        case("SkipLayerNormalization", MS, [x, N(2, 3, _h, dtype=_dt), g, N(_h, dtype=_dt), N(_h, dtype=_dt)],
             {"epsilon": 1e-5}, n_out=4, id=f"SkipLN-{_n}-{_h}")
    case("SkipSimplifiedLayerNormalization", MS, [N(2, 3, 32, dtype=_dt), N(3, 32, dtype=_dt), N(32, dtype=_dt)],
         n_out=1, id=f"SSLN-{_n}-skip-SH")
    case("SkipLayerNormalization", MS, [N(2, 3, 32, dtype=_dt), N(1, 3, 32, dtype=_dt), N(32, dtype=_dt)],
         n_out=4, id=f"SkipLN-{_n}-skip-1SH-no-beta")
case("SkipSimplifiedLayerNormalization", MS, [N(5, 48), N(5, 48), W(N(48))],
     out_names=["y", "", "", "sum"], id="SSLN-2d-y-and-sum")
case("SkipLayerNormalization", MS, [N(5, 48), N(5, 48), W(N(48)), None, W(N(48))],
     out_names=["y", "mean", "inv"], id="SkipLN-2d-bias-no-beta")

# ORT evaluates tanh / logistic / erf with MLAS's approximations (a few f32 ulps from the exact
# values this reference rounds): in the negative tails, where 1 + tanh(.) cancels, that is a few
# 1e-7 absolute.
GELU_TOL = (1e-5, 4e-6)
for _dt in (f32, f16):
    _n = np.dtype(_dt).name
    x, b = U(-6, 6, 3, 4, 37, dtype=_dt), U(-1, 1, 37, dtype=_dt)
    case("FastGelu", MS, [x], tol=GELU_TOL, id=f"FastGelu-{_n}")
    case("FastGelu", MS, [x, b], tol=GELU_TOL, id=f"FastGelu-bias-{_n}")
    case("QuickGelu", MS, [x], tol=GELU_TOL, id=f"QuickGelu-{_n}")
    case("QuickGelu", MS, [x], {"alpha": 1.3}, tol=GELU_TOL, id=f"QuickGelu-alpha-{_n}")
    case("BiasGelu", MS, [x, b], tol=GELU_TOL, id=f"BiasGelu-{_n}")


# ---- MatMulNBits -----------------------------------------------------------------------------

def quantized_weights(k, n, bits, bs, zp, dtype=f32):
    """(B, scales, zero_points) for a random [N, K] weight quantized like the model builder does."""
    nb = (k + bs - 1) // bs
    w = RNG.normal(size=(n, nb, bs)) * 0.05
    top = 2 ** bits - 1
    if zp is None:
        s = np.abs(w).max(-1) / (2 ** (bits - 1) - 1)
        z = np.full((n, nb), 2 ** (bits - 1))
    else:
        lo, hi = w.min(-1), w.max(-1)
        s = (hi - lo) / top
        z = np.clip(np.round(-lo / s), 0, top)
    q = np.clip(np.round(w / s[..., None] + z[..., None]), 0, top).astype(u8).reshape(n, nb * bs)
    q[:, k:] = 0
    B = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(n, nb, bs // 2) if bits == 4 else q.reshape(n, nb, bs)
    if zp == "u8":
        zz = z.astype(u8)
        if bits == 4:
            zz = np.concatenate([zz, np.zeros((n, nb % 2), u8)], axis=1)
            zz = zz[:, 0::2] | (zz[:, 1::2] << 4)
        zp_val = zz.reshape(-1)
    elif zp == "float":
        zp_val = (z + RNG.uniform(-0.5, 0.5, z.shape)).astype(dtype).reshape(-1)
    else:
        zp_val = None
    return B, s.astype(dtype).reshape(-1), zp_val


MNB_TOL = (1e-5, 1e-5)  # f32 (MLAS's f32 accumulation vs exact sums), both accuracy levels
for _bits in (4, 8):
    for _bs in (16, 32, 64, 128, 256):
        for _zp in (None, "u8", "float"):
            if _zp == "float" and _bits == 8:
                continue  # ORT's CPU EP runs float zero points with 4 bits only
            for _level in (0, 4):
                _k = 300 if _bs != 256 else 520  # a partial last block
                B, s, z = quantized_weights(_k, 40, _bits, _bs, _zp)
                bias = W(N(40)) if _bs == 64 else None
                a = N(2, 3, _k) if _bs in (32, 128) else N(5, _k)
                case("MatMulNBits", MS, [a, W(B), W(s), None if z is None else W(z), None, bias],
                     {"K": _k, "N": 40, "bits": _bits, "block_size": _bs, "accuracy_level": _level},
                     tol=MNB_TOL, id=f"MatMulNBits-b{_bits}-bs{_bs}-{_zp}-L{_level}")
for _bits, _zp, _level in ((4, "u8", 4), (4, "float", 0), (8, None, 4), (4, None, 0)):
    B, s, z = quantized_weights(256, 24, _bits, 32, _zp, f16)
    case("MatMulNBits", MS, [N(3, 256, dtype=f16), W(B), W(s), None if z is None else W(z), None, W(N(24, dtype=f16))],
         {"K": 256, "N": 24, "bits": _bits, "block_size": 32, "accuracy_level": _level},
         id=f"MatMulNBits-f16-b{_bits}-{_zp}-L{_level}")
B, s, z = quantized_weights(64, 16, 4, 32, "u8")
case("MatMulNBits", MS, [N(64), W(B), W(s), W(z)], {"K": 64, "N": 16, "bits": 4, "block_size": 32, "accuracy_level": 4},
     tol=MNB_TOL, id="MatMulNBits-1d-A")
case("MatMulNBits", MS, [N(4, 64), B, s, z],  # run-time weights: ORT's f32 path
     {"K": 64, "N": 16, "bits": 4, "block_size": 32}, tol=MNB_TOL, id="MatMulNBits-runtime-weights-L0")


# ---- GatherBlockQuantized --------------------------------------------------------------------
for _bits in (2, 4, 8):
    _per = 8 // _bits
    for _h, _bs in ((64, 32), (40, 16), (96, 64)):
        _nb = (_h + _bs - 1) // _bs
        data = RNG.integers(0, 256, size=(11, _h // _per)).astype(u8)
        zp = RNG.integers(0, 256, size=(11, (_nb + _per - 1) // _per)).astype(u8)
        for _sdt in (f32, f16):
            scales = U(0.01, 0.1, 11, _nb, dtype=_sdt)
            case("GatherBlockQuantized", MS, [W(data), np.array([[1, 10], [-1, 3]], i64), W(scales), W(zp)],
                 {"bits": _bits, "block_size": _bs}, id=f"GBQ-b{_bits}-h{_h}-{np.dtype(_sdt).name}")
        case("GatherBlockQuantized", MS, [W(data), np.array([0, 11, -12, 5], i32), W(U(0.01, 0.1, 11, _nb))],
             {"bits": _bits, "block_size": _bs, "quantize_axis": -1}, id=f"GBQ-b{_bits}-h{_h}-oob-nozp")
case("GatherBlockQuantized", MS, [W(RNG.integers(0, 256, size=(5, 3, 16)).astype(u8)), np.array(4, i64),
                                  W(U(0.1, 1, 5, 3, 2)), W(RNG.integers(0, 256, size=(5, 3, 1)).astype(u8))],
     {"block_size": 16, "quantize_axis": 2}, id="GBQ-3d-scalar-index")


# ---- QMoE ------------------------------------------------------------------------------------

def pack(q, bits):
    per = 8 // bits
    q = q.reshape(q.shape[:-1] + (-1, per)).astype(u8)
    return np.bitwise_or.reduce([q[..., i] << (bits * i) for i in range(per)], axis=0).astype(u8)


def qmoe_inputs(bits, bs, act, dtype=f32, zp=False, bias=True, k=2, extra=None, router_weights=False,
                shape=(5,), E=4, H=64, I=32, scale_dtype=None):
    """(inputs, attrs, id) of a QMoE node with random quantized experts (scales of `scale_dtype`,
    default the activations' type)."""
    sdt = dtype if scale_dtype is None else scale_dtype
    n1 = I * (2 if act == "swiglu" else 1)
    ins = [N(*shape, H, dtype=dtype), N(int(np.prod(shape)), E, dtype=dtype)]
    weights = {}
    for name, rows, cols in (("fc1", n1, H), ("fc2", H, I)):
        nb = cols // bs if bs else 1
        weights[name] = W(pack(RNG.integers(0, 2 ** bits, size=(E, rows, cols)), bits))
        scale = 2.0 ** (4 - bits)  # weights of about +-0.15 for 4 and 8 bits alike
        weights[name + "_s"] = W(U(0.005 * scale, 0.02 * scale, *((E, rows, nb) if bs else (E, rows)), dtype=sdt))
        weights[name + "_b"] = W(N(E, rows, dtype=dtype, scale=0.1)) if bias else None
        if zp:
            per = 8 // bits
            zq = RNG.integers(0, 2 ** bits, size=(E, rows, nb) if bs else (E, rows))
            pad = (-zq.shape[-1]) % per
            zq = np.concatenate([zq, np.zeros(zq.shape[:-1] + (pad,), zq.dtype)], axis=-1)
            weights[name + "_z"] = W(pack(zq, bits))
        else:
            weights[name + "_z"] = None
    ins += [weights["fc1"], weights["fc1_s"], weights["fc1_b"], weights["fc2"], weights["fc2_s"], weights["fc2_b"],
            None, None, None, weights["fc1_z"], weights["fc2_z"], None,
            U(0, 1, int(np.prod(shape)), E, dtype=dtype) if router_weights else None]
    attrs = {"k": k, "activation_type": act, "expert_weight_bits": bits, "normalize_routing_weights": 1}
    if act == "swiglu":
        attrs["swiglu_fusion"] = 1
    if bs:
        attrs["block_size"] = bs
    attrs.update(extra or {})
    return ins, attrs, (f"QMoE-b{bits}-bs{bs}-{act}-{np.dtype(dtype).name}{'-zp' if zp else ''}"
                        f"{'' if sdt == dtype else '-scales_' + np.dtype(sdt).name}{'' if E == 4 else f'-k{k}-E{E}'}"
                        f"{'-rw' if router_weights else ''}{''.join(f'-{k}{v}' for k, v in (extra or {}).items())}")


def qmoe_case(*args, **kwargs):
    ins, attrs, name = qmoe_inputs(*args, **kwargs)
    case("QMoE", MS, ins, attrs, tol=(1e-5, 1e-5), id=name)


qmoe_case(4, 0, "silu")
qmoe_case(8, 0, "gelu", zp=True)
qmoe_case(4, 32, "swiglu", zp=True)
qmoe_case(4, 32, "swiglu", extra={"accuracy_level": 4})                     # int8 activations
qmoe_case(8, 32, "relu", bias=False, extra={"normalize_routing_weights": 0})  # int8 at every level
qmoe_case(8, 16, "identity", zp=True, k=4)
qmoe_case(4, 0, "swiglu", extra={"swiglu_limit": 0.3, "activation_alpha": 1.702, "activation_beta": 1.0})
qmoe_case(4, 0, "silu", router_weights=True, k=1)
qmoe_case(4, 0, "relu", router_weights=True, extra={"normalize_routing_weights": 0})
qmoe_case(4, 32, "silu", dtype=f16, shape=(2, 3))
qmoe_case(8, 32, "swiglu", dtype=f16)
# Scales of the other float type than the activations (ORT converts them to f32 first).
qmoe_case(4, 32, "silu", scale_dtype=f16)
qmoe_case(8, 32, "relu", scale_dtype=f16)                                      # int8 activations
qmoe_case(4, 0, "gelu", dtype=f16, scale_dtype=f32, zp=True)
# gpt-oss as onnxruntime-genai's builder writes it for the CPU EP (moe_quant_type int4 / int8: the
# MXFP4 checkpoint dequantized and requantized to 'int'): block-wise symmetric experts, scales of
# the model's I/O type, fused interleaved SwiGLU with limit 7, alpha 1.702, beta 1, top-4.
GPT_OSS = {"swiglu_limit": 7.0, "activation_alpha": 1.702, "activation_beta": 1.0}
qmoe_case(4, 32, "swiglu", k=4, E=8, shape=(7,), extra=GPT_OSS)
qmoe_case(4, 32, "swiglu", k=1, E=8, shape=(2, 3), extra=GPT_OSS)
qmoe_case(4, 32, "swiglu", dtype=f16, k=4, E=8, shape=(7,), extra=GPT_OSS)
qmoe_case(8, 32, "swiglu", k=4, E=8, shape=(7,), extra=GPT_OSS)


# ---- MoE (float experts) -----------------------------------------------------------------------

def moe_inputs(act, dtype=f32, bias=True, k=2, extra=None, shape=(5,), E=4, H=64, I=32, constant=True):
    """(inputs, attrs, id) of a MoE node with random float experts ([E, N, K] weights)."""
    n1 = I * (2 if act == "swiglu" else 1)
    weight = W if constant else (lambda a: a)
    ins = [N(*shape, H, dtype=dtype), N(int(np.prod(shape)), E, dtype=dtype),
           weight(N(E, n1, H, dtype=dtype, scale=0.15)), weight(N(E, n1, dtype=dtype, scale=0.1)) if bias else None,
           weight(N(E, H, I, dtype=dtype, scale=0.15)), weight(N(E, H, dtype=dtype, scale=0.1)) if bias else None]
    while ins[-1] is None:
        ins.pop()
    attrs = {"k": k, "activation_type": act, "normalize_routing_weights": 1}
    if act == "swiglu":
        attrs["swiglu_fusion"] = 1
    attrs.update(extra or {})
    return ins, attrs, (f"MoE-{act}-{np.dtype(dtype).name}-k{k}{'' if bias else '-nobias'}"
                        f"{''.join(f'-{k}{v}' for k, v in (extra or {}).items())}")


def moe_case(*args, **kwargs):
    ins, attrs, name = moe_inputs(*args, **kwargs)
    case("MoE", MS, ins, attrs, tol=(1e-5, 1e-6), id=name)


# gpt-oss's experts: fused interleaved SwiGLU with a limit, k = 2 (or 4) of the experts, normalized
moe_case("swiglu", extra={"swiglu_limit": 7.0, "activation_alpha": 1.702, "activation_beta": 1.0})
moe_case("swiglu", dtype=f16, shape=(2, 3), extra={"swiglu_limit": 7.0, "activation_alpha": 1.702,
                                                    "activation_beta": 1.0})
moe_case("silu", extra={"normalize_routing_weights": 0})  # softmax over every expert, taken at the k
moe_case("relu", bias=False, k=1)
moe_case("gelu", k=3, E=8, extra={"normalize_routing_weights": 0})
moe_case("identity", k=4)
moe_case("silu", dtype=f16, extra={"normalize_routing_weights": 0})
moe_case("relu", constant=False)  # expert weights fed at run time


def since_version(op_type, domain, opset):
    """The since-version GraphView.from_onnx reports: 1 for com.microsoft ops, the ONNX schema's
    for ONNX ops, the model's opset for ORT's own default-domain ops (onnx has no schema)."""
    import onnx

    if domain:
        return 1
    try:
        return onnx.defs.get_schema(op_type, opset, "").since_version
    except Exception:
        return opset


# (op_type, since-version) pairs compared with ORT's CPU EP here, for registry-wide coverage checks.
COVERED = {(p.values[0], since_version(p.values[0], p.values[1], p.values[5])) for p in CASES}


@pytest.mark.parametrize("op_type,domain,inputs,attrs,n_out,opset,tol,out_names", CASES)
def test_matches_ort(op_type, domain, inputs, attrs, n_out, opset, tol, out_names):
    run_case(op_type, domain, inputs, attrs, n_out, opset, tol, out_names)


@pytest.mark.skipif("avx2" not in cpu_flags(), reason="ORT's MLAS LayerNorm kernel emulated here is the x86 AVX2 one")
@pytest.mark.parametrize("h", [9, 16, 37, 256])
def test_norms_are_bit_exact_on_x86(h):
    x, g, skip, b, beta = N(3, 4, h), N(h), N(3, 4, h), N(h), N(h)
    for op, domain, ins, n_out, opset in (
            ("SimplifiedLayerNormalization", "", [x, g], 2, 21), ("RMSNormalization", "", [x, g], 1, 23),
            ("SkipSimplifiedLayerNormalization", MS, [x, skip, g, b], 4, 21),
            ("SkipLayerNormalization", MS, [x, skip, g, beta, b], 4, 21)):
        want = ort_run(build(op, domain, ins, {"epsilon": 1e-6}, n_out, opset), ins)
        model = build(op, domain, ins, {"epsilon": 1e-6}, n_out, opset, out_dtypes=[w.dtype for w in want])
        got = reference(model, ins)[3]
        for k, w in enumerate(want):
            np.testing.assert_array_equal(got[k].reshape(w.shape), w, err_msg=f"{op} output {k}")


def test_every_contrib_op_is_covered():
    ours = {("", "SimplifiedLayerNormalization"), ("", "RMSNormalization")} | {
        (MS, o) for o in ("SkipSimplifiedLayerNormalization", "SkipLayerNormalization", "FastGelu", "QuickGelu",
                          "BiasGelu", "MatMulNBits", "GatherBlockQuantized", "QMoE", "MoE")}
    for domain, op_type in ours:
        op = lookup(domain, op_type)
        missing = [v for v in op.since_versions if (op_type, v) not in COVERED]
        assert not missing, f"{op_type}: since-versions {missing} have no ORT comparison"


# ---- since-versions --------------------------------------------------------------------------

@pytest.mark.parametrize("opset", [17, 21, 22, 23])
def test_simplified_layer_norm_since_versions(opset):
    # ORT reports its contrib schema's since-version 1; GraphView.from_onnx (onnx has no schema)
    # reports the model's opset. Both are claimed.
    model = build("SimplifiedLayerNormalization", "", [N(2, 16), W(N(16))], opset=opset, out_dtypes=[f32])
    graph = GraphView.from_onnx(model)
    node = graph.nodes[0]
    assert node.since_version == opset
    assert check_node(node, graph) is None
    assert 1 in lookup("", "SimplifiedLayerNormalization").since_versions
    # and a session (whose node ORT reports as since-version 1) runs it whole
    hipep_vs_cpu(model, {"x0": N(2, 16)}, lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7))


# ---- claim predicates ------------------------------------------------------------------------

def claim(op, domain, inputs, attrs=None, n_out=1, out_dtype=f32):
    model = build(op, domain, inputs, attrs, n_out, out_dtypes=[out_dtype] * n_out)
    graph = GraphView.from_onnx(model)
    return check_node(graph.nodes[0], graph)


def test_matmul_nbits_claims():
    B, s, z = quantized_weights(64, 16, 4, 32, "u8")
    a = N(2, 64)
    base = {"K": 64, "N": 16, "bits": 4, "block_size": 32}
    assert claim("MatMulNBits", MS, [a, W(B), W(s), W(z)], {**base, "accuracy_level": 4}) is None
    assert "g_idx" in claim("MatMulNBits", MS, [a, W(B), W(s), W(z), W(np.arange(64, dtype=i32) // 32)], base)
    assert "bits=2" in claim("MatMulNBits", MS, [a, W(B), W(s)], {**base, "bits": 2})
    assert "block_size=512" in claim("MatMulNBits", MS, [a, W(B), W(s)], {**base, "block_size": 512})
    assert "weight_prepacked" in claim("MatMulNBits", MS, [a, W(B), W(s)], {**base, "weight_prepacked": 1})
    reason = claim("MatMulNBits", MS, [a, B, W(s), W(z)], {**base, "accuracy_level": 4})
    assert "accuracy_level=4" in reason and "B" in reason
    assert claim("MatMulNBits", MS, [a, B, W(s), W(z)], base) is None  # level 0: f32 path either way
    B8, s8, z8 = quantized_weights(64, 16, 8, 32, "float")
    assert "4 bits only" in claim("MatMulNBits", MS, [a, W(B8), W(s8), W(z8)], {**base, "bits": 8})
    assert "A's type" in claim("MatMulNBits", MS, [N(2, 64, dtype=f16), W(B), W(s.astype(f16)),
                                                   W(z8.astype(f32))], base, out_dtype=f16)


def test_gather_block_quantized_claims():
    data, s = W(RNG.integers(0, 256, size=(4, 16)).astype(u8)), W(U(0.1, 1, 4, 1))
    idx = np.array([1], i64)
    assert claim("GatherBlockQuantized", MS, [data, idx, s], {"block_size": 32}) is None
    assert "gather_axis" in claim("GatherBlockQuantized", MS, [data, idx, s], {"block_size": 32, "gather_axis": 1})
    assert "bits=3" in claim("GatherBlockQuantized", MS, [data, idx, s], {"block_size": 32, "bits": 3})
    assert "block_size=8" in claim("GatherBlockQuantized", MS, [data, idx, s], {"block_size": 8})


def test_qmoe_claims():
    inputs, attrs, _ = qmoe_inputs(4, 0, "silu")

    def reason(ins=inputs, **kw):
        return claim("QMoE", MS, ins, {**attrs, **kw})

    assert reason() is None
    assert "quant_type" in reason(quant_type="fp8")
    assert "swiglu_fusion=2" in reason(activation_type="swiglu", swiglu_fusion=2)
    assert "activation_type='tanh'" in reason(activation_type="tanh")
    assert "use_sparse_mixer" in reason(use_sparse_mixer=1)
    assert "expert_weight_bits=2" in reason(expert_weight_bits=2)
    assert "fc2_expert_weight_bits" in reason(fc2_expert_weight_bits=8)
    fc3 = inputs[:8] + [inputs[2]]
    assert "fc3" in reason(fc3)
    runtime = inputs[:2] + [inputs[2].value] + inputs[3:]
    assert reason(runtime) is None  # row-wise: the f32 path with run-time weights too


def test_moe_claims():
    inputs, attrs, _ = moe_inputs("silu")

    def reason(ins=inputs, **kw):
        return claim("MoE", MS, ins, {**attrs, **kw})

    assert reason() is None
    assert "swiglu_fusion=2" in reason(activation_type="swiglu", swiglu_fusion=2)
    assert "activation_type='relu2'" in reason(activation_type="relu2")
    assert "use_sparse_mixer" in reason(use_sparse_mixer=1)
    assert "swiglu_limit_after_activation" in reason(activation_type="swiglu", swiglu_fusion=1,
                                                     swiglu_limit_after_activation=1)
    assert "fc3" in reason(inputs + [inputs[2]])


def test_moe_errors_name_shapes():
    inputs, attrs, _ = moe_inputs("relu", constant=False)
    opdef = lookup(MS, "MoE")
    full = {**opdef.attributes, **attrs}
    with pytest.raises(RuntimeShapeError, match=r"k=5 must be between 1 and the number of experts 4"):
        opdef.reference(inputs, {**full, "k": 5})
    bad = inputs[:4] + [inputs[4][:, :, :16]] + inputs[5:]
    with pytest.raises(RuntimeShapeError, match=r"fc1_experts_weights \[4, 32, 64\] has 32 output rows; fc2"):
        opdef.reference(bad, full)
    with pytest.raises(RuntimeShapeError, match=r"router_probs \[5, 3\] must be \[tokens=5, experts=4\]"):
        opdef.reference([inputs[0], inputs[1][:, :3]] + inputs[2:], full)


def test_qmoe_int8_needs_constant_weights():
    inputs, attrs, _ = qmoe_inputs(8, 32, "silu")
    inputs[2] = inputs[2].value  # fc1 weights as a graph input
    got = claim("QMoE", MS, inputs, attrs)
    assert "fc1_experts_weights" in got and "not constant" in got


# ---- run-time errors -------------------------------------------------------------------------

def test_reference_errors_name_shapes():
    op = lookup(MS, "MatMulNBits")
    attrs = {"K": 64, "N": 16, "bits": 4, "block_size": 32, "accuracy_level": 0, "weight_prepacked": 0}
    B, s, _ = quantized_weights(64, 16, 4, 32, None)
    with pytest.raises(RuntimeShapeError, match=r"K = 64 .* got shape \[2, 63\]"):
        op.reference([N(2, 63), B, s], attrs)
    with pytest.raises(RuntimeShapeError, match=r"K = 64 .* got shape \[\?, 65\]"):
        op.shape_rule([TensorType(1, (None, 65)), TensorType(2, B.shape), TensorType(1, s.shape)], [None] * 3, attrs, 1)
    sk = lookup(MS, "SkipSimplifiedLayerNormalization")
    with pytest.raises(RuntimeShapeError, match=r"skip of shape \[2, 4\] must equal the input's shape \[3, 4\]"):
        sk.reference([N(3, 4), N(2, 4), N(4)], {"epsilon": 1e-6})
    rms = lookup("", "RMSNormalization")
    with pytest.raises(RuntimeShapeError, match=r"scale must have .* got shape \[3\]"):
        rms.reference([N(2, 4), N(3)], {"axis": -1, "epsilon": 1e-5, "stash_type": 1})


# ---- end to end through hipep ----------------------------------------------------------------

def mlp_model(level, hidden=64, inter=96):
    b1, s1, z1 = quantized_weights(hidden, inter, 4, 32, "u8")
    b2, s2, _ = quantized_weights(inter, hidden, 4, 32, None)
    n = helper.make_node
    nodes = [
        n("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma"], ["normed", "", "", "resid"], domain=MS,
          epsilon=1e-6, name="norm"),
        n("MatMulNBits", ["normed", "b1", "s1", "z1"], ["h"], domain=MS, K=hidden, N=inter, bits=4, block_size=32,
          accuracy_level=level, name="up"),
        n("Sigmoid", ["h"], ["sig"], name="sigmoid"),
        n("Mul", ["h", "sig"], ["act"], name="silu"),
        n("MatMulNBits", ["act", "b2", "s2"], ["y"], domain=MS, K=inter, N=hidden, bits=4, block_size=32,
          accuracy_level=level, name="down"),
    ]
    inits = [numpy_helper.from_array(v, k) for k, v in
             {"b1": b1, "s1": s1, "z1": z1, "b2": b2, "s2": s2, "gamma": U(0.5, 1.5, hidden)}.items()]
    t = TensorProto.FLOAT
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", t, ["b", "s", hidden]),
                                             helper.make_tensor_value_info("skip", t, ["b", "s", hidden])],
                              [helper.make_tensor_value_info("y", t, ["b", "s", hidden]),
                               helper.make_tensor_value_info("resid", t, ["b", "s", hidden])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)],
                             ir_version=IR_VERSION)


def hipep_vs_cpu(model, feeds, check):
    import hipep

    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for options in ({}, {"cpu_schedule": "random", "seed": "3"}):
        got = hipep.InferenceSession(model.SerializeToString(), device="cpu", **options).run(None, feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            check(g, w)


@pytest.mark.parametrize("level", [4, 0])
def test_int4_mlp_end_to_end(level):
    feeds = {"x": N(2, 5, 64), "skip": N(2, 5, 64)}

    def check(g, w):
        if level == 0:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
            return
        # The second MatMulNBits quantizes SiLU's output to int8; an f32 ulp of difference there
        # (ORT's logistic, summation order) can flip one int8 code: allow such rare flips.
        err = np.abs(g - w)
        assert np.count_nonzero(err > 1e-5 + 1e-5 * np.abs(w)) <= 0.01 * w.size and err.max() < 5e-3

    hipep_vs_cpu(mlp_model(level), feeds, check)


def test_gather_block_quantized_embedding_end_to_end():
    vocab, hidden, bs = 50, 64, 32
    data = RNG.integers(0, 256, size=(vocab, hidden // 2)).astype(u8)
    scales = U(0.01, 0.1, vocab, hidden // bs, dtype=f16)
    zp = RNG.integers(0, 256, size=(vocab, 1)).astype(u8)
    n = helper.make_node
    nodes = [n("GatherBlockQuantized", ["emb", "ids", "scales", "zp"], ["h"], domain=MS, bits=4, block_size=bs,
               name="embed"),
             n("Mul", ["h", "h"], ["y"], name="square")]
    inits = [numpy_helper.from_array(data, "emb"), numpy_helper.from_array(scales, "scales"),
             numpy_helper.from_array(zp, "zp")]
    graph = helper.make_graph(nodes, "embed", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["b", "s"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["b", "s", hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)],
                              ir_version=IR_VERSION)
    hipep_vs_cpu(model, {"ids": RNG.integers(0, vocab, size=(2, 7)).astype(i64)},
                 lambda g, w: np.testing.assert_array_equal(g, w))


def test_qmoe_end_to_end():
    inputs, attrs, _ = qmoe_inputs(4, 32, "swiglu", zp=True)
    model = build("QMoE", MS, inputs, attrs)
    feeds = {f"x{i}": a for i, a in enumerate(inputs) if a is not None and not isinstance(a, W)}
    hipep_vs_cpu(model, feeds, lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5))
