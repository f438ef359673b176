"""Blockwise quantization for MatMulNBits and GatherBlockQuantized tests: weights quantized the
way ONNX Runtime's quantizers and the onnxruntime-genai builder do (per block of `block_size`
values along K: asymmetric min/max with a uint8 zero point, symmetric around 2^(bits-1) without
one, or a float zero point), packed least significant bits first."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from helpers import make_model, tensor

MS = ("com.microsoft", 1)


def pack_bits(q: np.ndarray, bits: int) -> np.ndarray:
    """uint values [..., n] (n a multiple of 8 / bits) -> uint8 [..., n * bits / 8], low bits first."""
    q = np.asarray(q, np.uint8)
    if bits == 8:
        return q.copy()
    per = 8 // bits
    q = q.reshape(q.shape[:-1] + (q.shape[-1] // per, per))
    out = np.zeros(q.shape[:-1], np.uint8)
    for i in range(per):
        out |= (q[..., i] << np.uint8(bits * i)).astype(np.uint8)
    return out


def quantize_blockwise(w: np.ndarray, bits: int, block_size: int, zp_kind: str, rng=None):
    """w f32 [N, K] -> (B uint8 [N, nb, blob], scales f32 [N, nb], zero points or None).
    zp_kind: "none" (symmetric, zero point 2^(bits-1) implied), "uint8" (packed
    [N, ceil(nb * bits / 8)]) or "float" (f32 [N, nb], fractional)."""
    n, k = w.shape
    nb = -(-k // block_size)
    padded = np.zeros((n, nb * block_size), np.float32)
    padded[:, :k] = w
    blocks = padded.reshape(n, nb, block_size)
    top = (1 << bits) - 1
    mid = 1 << (bits - 1)
    if zp_kind == "none":
        amax = np.abs(blocks).max(axis=-1)
        scale = np.where(amax > 0, amax / mid, 1.0).astype(np.float32)
        q = np.clip(np.rint(blocks / scale[..., None]) + mid, 0, top)
        zp = None
    else:
        lo = np.minimum(blocks.min(axis=-1), 0.0)
        hi = np.maximum(blocks.max(axis=-1), 0.0)
        scale = np.where(hi > lo, (hi - lo) / top, 1.0).astype(np.float32)
        z = np.clip(np.rint(-lo / scale), 0, top)
        if zp_kind == "float":
            rng = rng or np.random.default_rng(0)
            zf = (z + rng.uniform(-0.4, 0.4, z.shape)).astype(np.float32)
            q = np.clip(np.rint(blocks / scale[..., None] + zf[..., None]), 0, top)
            zp = zf
        else:
            q = np.clip(np.rint(blocks / scale[..., None]) + z[..., None], 0, top)
            zrow = -(-nb * bits // 8)
            zq = np.zeros((n, zrow * (8 // bits)), np.uint8)
            zq[:, :nb] = z.astype(np.uint8)
            zp = pack_bits(zq, bits)
    B = pack_bits(q.astype(np.uint8).reshape(n, nb * block_size), bits).reshape(n, nb, block_size * bits // 8)
    return B, scale, zp


def matmul_nbits_model(m_shape, k, n, bits, block_size, elem=TP.FLOAT, zp_kind="none", bias=False,
                       accuracy_level=0, seed=0, fed_weights=False):
    """A single MatMulNBits node with random weights quantized blockwise, and its feeds.
    m_shape: A's leading dims (ints, or names for symbolic ones). Returns (model, feeds,
    (B, scales, zp, bias))."""
    rng = np.random.default_rng(seed)
    npt = helper.tensor_dtype_to_np_dtype(elem)
    w = rng.standard_normal((n, k)).astype(np.float32)
    B, scales, zp = quantize_blockwise(w, bits, block_size, zp_kind, rng)
    scales = scales.astype(npt)
    if zp is not None and zp.dtype != np.uint8:
        zp = zp.astype(npt)
    b = rng.standard_normal(n).astype(npt) if bias else None
    inputs = ["A", "B", "scales", "zp" if zp is not None else ""] + (["", "bias"] if bias else [])
    while inputs and inputs[-1] == "":
        inputs.pop()
    inits = [numpy_helper.from_array(B, "B"), numpy_helper.from_array(scales.reshape(-1), "scales")]
    if zp is not None:
        inits.append(numpy_helper.from_array(zp.reshape(-1), "zp"))
    if b is not None:
        inits.append(numpy_helper.from_array(b, "bias"))
    node = helper.make_node("MatMulNBits", inputs, ["Y"], domain="com.microsoft", name="mnb", K=k, N=n, bits=bits,
                            block_size=block_size, accuracy_level=accuracy_level)
    feed_dims = tuple(d if isinstance(d, int) else 1 for d in m_shape)  # a named dim is fed as 1
    a = (rng.standard_normal(feed_dims + (k,)) * 0.5).astype(npt)
    model = make_model([node], [tensor("A", elem, list(m_shape) + [k])], [tensor("Y", elem, None)],
                       inits, opset=21, extra_opsets=[MS])
    return model, {"A": a}, (B, scales, zp, b)


def gather_block_quantized_model(vocab, hidden, bits, block_size, idx_shape, elem=TP.FLOAT, zp=True,
                                 idx_elem=TP.INT64, seed=0, middle=()):
    """A single GatherBlockQuantized node as the builder emits it for the embedding table: uint8
    data [vocab, *middle, hidden * bits / 8], gather_axis 0, quantize_axis last."""
    rng = np.random.default_rng(seed)
    npt = helper.tensor_dtype_to_np_dtype(elem)
    rows = vocab * int(np.prod(middle, dtype=np.int64))
    w = rng.standard_normal((rows, hidden)).astype(np.float32)
    B, scales, z = quantize_blockwise(w, bits, block_size, "uint8" if zp else "none", rng)
    nb = scales.shape[1]
    data = B.reshape((vocab, *middle, -1))[..., :hidden * bits // 8]
    inits = [numpy_helper.from_array(np.ascontiguousarray(data), "data"),
             numpy_helper.from_array(scales.astype(npt).reshape((vocab, *middle, nb)), "scales")]
    inputs = ["data", "ids", "scales"]
    if zp:
        inits.append(numpy_helper.from_array(z.reshape((vocab, *middle, -1)), "zp"))
        inputs.append("zp")
    rank = 2 + len(middle)
    node = helper.make_node("GatherBlockQuantized", inputs, ["Y"], domain="com.microsoft", name="gbq", bits=bits,
                            block_size=block_size, gather_axis=0, quantize_axis=rank - 1)
    ids = rng.integers(-vocab, vocab, idx_shape).astype({TP.INT64: np.int64, TP.INT32: np.int32}[idx_elem])
    model = make_model([node], [tensor("ids", idx_elem, list(idx_shape))], [tensor("Y", elem, None)], inits,
                       opset=21, extra_opsets=[MS])
    return model, {"ids": ids}


def gated_mlp_model(m_shape, k, n, block_size=32, elem=TP.FLOAT16, zp_kind="none", accuracy_level=0, seed=0,
                    activation="silu", bias_on_up=False, extra_output=False):
    """A gated MLP's front as onnxruntime-genai's model builder writes it: gate and up MatMulNBits
    (4 bits) of one A, then act(gate) * up -- SiLU as Sigmoid and Mul, or GELU's tanh form -- and its
    feeds. `bias_on_up` gives the up projection a bias, `extra_output` makes the up projection's
    result a graph output too (both keep hip-fuse-gated-matmul away)."""
    rng = np.random.default_rng(seed)
    npt = helper.tensor_dtype_to_np_dtype(elem)
    inits, nodes = [], []
    for name in ("gate", "up"):
        B, scales, zp = quantize_blockwise(rng.standard_normal((n, k)).astype(np.float32), 4, block_size, zp_kind, rng)
        inputs = ["A", f"{name}_B", f"{name}_scales", f"{name}_zp" if zp is not None else ""]
        inits += [numpy_helper.from_array(B, f"{name}_B"), numpy_helper.from_array(scales.astype(npt).reshape(-1),
                                                                                    f"{name}_scales")]
        if zp is not None:
            inits.append(numpy_helper.from_array((zp if zp.dtype == np.uint8 else zp.astype(npt)).reshape(-1),
                                                 f"{name}_zp"))
        if name == "up" and bias_on_up:
            inputs += ["", "up_bias"]
            inits.append(numpy_helper.from_array(rng.standard_normal(n).astype(npt), "up_bias"))
        while inputs[-1] == "":
            inputs.pop()
        nodes.append(helper.make_node("MatMulNBits", inputs, [f"{name}_out"], domain="com.microsoft",
                                      name=f"{name}_proj", K=k, N=n, bits=4, block_size=block_size,
                                      accuracy_level=accuracy_level))
    if activation == "silu":
        nodes += [helper.make_node("Sigmoid", ["gate_out"], ["sig"], name="act_sigmoid"),
                  helper.make_node("Mul", ["gate_out", "sig"], ["act"], name="act_mul")]
    else:  # GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        c = {name: numpy_helper.from_array(np.array(v, npt), name)
             for name, v in (("c_half", 0.5), ("c_one", 1.0), ("c_s", 0.7978845608), ("c_k", 0.044715))}
        inits += list(c.values())
        nodes += [helper.make_node("Mul", ["gate_out", "gate_out"], ["x2"], name="g_x2"),
                  helper.make_node("Mul", ["x2", "gate_out"], ["x3"], name="g_x3"),
                  helper.make_node("Mul", ["x3", "c_k"], ["kx3"], name="g_kx3"),
                  helper.make_node("Add", ["gate_out", "kx3"], ["inner"], name="g_inner"),
                  helper.make_node("Mul", ["inner", "c_s"], ["scaled"], name="g_scaled"),
                  helper.make_node("Tanh", ["scaled"], ["t"], name="g_tanh"),
                  helper.make_node("Add", ["t", "c_one"], ["t1"], name="g_t1"),
                  helper.make_node("Mul", ["gate_out", "t1"], ["xt"], name="g_xt"),
                  helper.make_node("Mul", ["xt", "c_half"], ["act"], name="g_half")]
    nodes.append(helper.make_node("Mul", ["act", "up_out"], ["Y"], name="gate_mul_up"))
    outputs = [tensor("Y", elem, None)] + ([tensor("up_out", elem, None)] if extra_output else [])
    feed_dims = tuple(d if isinstance(d, int) else 1 for d in m_shape)
    a = (rng.standard_normal(feed_dims + (k,)) * 0.5).astype(npt)
    model = make_model(nodes, [tensor("A", elem, list(m_shape) + [k])], outputs, inits, opset=21, extra_opsets=[MS])
    return model, {"A": a}


def with_skip_norm(model, feeds, k, residual=True, norm_bias=False, seed=1, epsilon=1e-6):
    """`model` (a projection of the graph input "A", as the builders above make) behind a
    com.microsoft::SkipSimplifiedLayerNormalization of inputs "x" and "skip", as a decoder layer
    normalizes its hidden state before a projection: the norm's output is A; its residual sum
    (input_skip_bias_sum) is the graph output "residual" where `residual`. Returns (model, feeds)."""
    rng = np.random.default_rng(seed)
    g = model.graph
    (a_in,) = [i for i in g.input if i.name == "A"]
    elem = a_in.type.tensor_type.elem_type
    dims = [d.dim_param or d.dim_value for d in a_in.type.tensor_type.shape.dim]
    npt = helper.tensor_dtype_to_np_dtype(elem)
    inits = [numpy_helper.from_array((1 + 0.1 * rng.standard_normal(k)).astype(npt), "norm_gamma")]
    norm_inputs = ["x", "skip", "norm_gamma"]
    if norm_bias:
        inits.append(numpy_helper.from_array((0.1 * rng.standard_normal(k)).astype(npt), "norm_bias"))
        norm_inputs.append("norm_bias")
    norm = helper.make_node("SkipSimplifiedLayerNormalization", norm_inputs,
                            ["A", "", "", "residual" if residual else ""], domain="com.microsoft",
                            name="input_norm", epsilon=epsilon)
    nodes = [norm] + list(g.node)
    outputs = list(g.output) + ([tensor("residual", elem, None)] if residual else [])
    new = make_model(nodes, [tensor("x", elem, dims), tensor("skip", elem, dims)], outputs,
                     list(g.initializer) + inits, opset=21, extra_opsets=[MS])
    shape = feeds["A"].shape
    return new, {"x": rng.standard_normal(shape).astype(npt), "skip": rng.standard_normal(shape).astype(npt)}
