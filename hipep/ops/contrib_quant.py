"""Block-quantized contrib ops (com.microsoft): MatMulNBits, GatherBlockQuantized (QMoE, whose
experts are MatMulNBits-like GEMMs, lives with MoE in moe.py).

Semantics follow ONNX Runtime 1.31's CPU EP (the oracle):

MatMulNBits. B is [N, n_blocks, blob] uint8, each row of N holding K (padded to n_blocks *
block_size) `bits`-bit unsigned values, low bits first; scales [N * n_blocks]; zero points either
uint8 packed like B (default 2^(bits-1)) or floats of A's type. ORT computes one of two ways:
  * f32 (accuracy_level != 4, float zero points, or weights ORT cannot prepack): B dequantized in
    f32 -- (q - zp) * scale for uint8 zero points, q * scale + (-scale * zp) for float ones --
    then an f32 GEMM (plus bias). The reference dequantizes identically and does the GEMM in f64,
    rounded once to f32: it differs from MLAS's f32 GEMM only by MLAS's own summation rounding.
  * int8 activations (accuracy_level 4 with constant B, scales and uint8 zero points: MLAS's
    SQNBIT_CompInt8): each row of A is cut into block_size blocks along K; per block
    amax = max|a|, scale_a = amax / 127, q_a = round_half_even(a * (127 / amax)) in f32 (0 where
    amax = 0), exactly as MLAS's QuantizeARow_CompInt8; then Y = sum over blocks of
    scale_a * scale_b * dot(q_a, q_b - zp) (+ bias). For bits=4, block_size=32 (what the
    onnxruntime-genai model builder emits) the reference replays MLAS's AVX512-VNNI kernel
    operation by operation (`mlas._mnb_int8_blk32`: its lane layout, fma order, horizontal sums
    and the separate block-sum GEMM for the zero points) and is bit-identical to ORT 1.31 on x86-64 with
    AVX512-VNNI -- so the int8 codes of the next MatMulNBits cannot flip. Other block sizes and
    bits=8 evaluate the sum in f64 (exact integer dot products and scale products), rounded once
    to f32: within f32 rounding of MLAS (~2e-7 of max|Y| measured on AVX512-VNNI).
f16 A/scales/bias are converted to f32 first and the result rounded once to f16, as ORT does on
x86; bf16 alike (ORT's CUDA EP computes so: its CPU EP has no bf16 kernel). Which of the two applies is decided per node by the claim predicate (it sees whether the
weights are initializers) and cannot be told at run time, so a level-4 node whose weights are not
all constant is not claimed.

GatherBlockQuantized (uint8 data, bits 2/4/8, gather_axis 0, quantize_axis last): gathers rows of
`data`, unpacks them (low bits first) and dequantizes (q - zp) * scale in f32, rounded once to the
scales' type. Out-of-range indices give zero rows (ORT's behavior); negative ones count from the end.
"""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ..graph import elem_type_of
from ._common import (at, elem_of, has_input, input_rank, input_type, kernel, normalize_axis, product, pshape_str,
                      result, shape_of, shape_rule, shape_str, tensor_type, type_name)
from .mlas import _mnb_int8_blk32, quantize_rows_int8
from .registry import F32, I32, INTS, LLM_FLOATS, REQUIRED, U8, OpDef, register

MS = "com.microsoft"
f32 = np.float32
f64 = np.float64
U8S = frozenset({U8})
F32S = frozenset({F32})


def unpack_bits(packed: np.ndarray, bits: int) -> np.ndarray:
    """uint8 [..., n] -> uint8 [..., n * 8 / bits]: `bits`-bit fields, least significant first."""
    packed = np.asarray(packed, dtype=np.uint8)
    if bits == 8:
        return packed.copy()
    per = 8 // bits
    mask = np.uint8((1 << bits) - 1)
    fields = [(packed >> np.uint8(bits * i)) & mask for i in range(per)]
    return np.stack(fields, axis=-1).reshape(packed.shape[:-1] + (packed.shape[-1] * per,))


def _pow2(v: int) -> bool:
    return v > 0 and (v & (v - 1)) == 0


# ---- MatMulNBits -----------------------------------------------------------------------------

def _mnb_layout(attrs):
    k, n, bits, bs = int(attrs["K"]), int(attrs["N"]), int(attrs["bits"]), int(attrs["block_size"])
    nb = (k + bs - 1) // bs
    return k, n, bits, bs, nb, bs * bits // 8


def _mnb_unpack(B, scales, zp, attrs):
    """(q int32 [N, nb, bs], scales f32 [N, nb], zero points: int32 [N, nb] for uint8/default ones,
    f32 [N, nb] for float ones) after checking the operands' sizes as ORT's CheckInputs does."""
    op = "MatMulNBits"
    k, n, bits, bs, nb, blob = _mnb_layout(attrs)
    if B.size != n * nb * blob:
        raise RuntimeShapeError(f"{op}: B must be [N, n_blocks, blob] = [{n}, {nb}, {blob}] "
                                f"(K={k}, block_size={bs}, bits={bits}), got shape {shape_str(B.shape)}")
    if scales.size != n * nb:
        raise RuntimeShapeError(f"{op}: scales must have N * n_blocks = {n} * {nb} elements, "
                                f"got shape {shape_str(scales.shape)}")
    q = unpack_bits(B.reshape(n, nb * blob), bits).astype(np.int32).reshape(n, nb, bs)
    s = scales.astype(f32).reshape(n, nb)
    if zp is None:
        z = np.full((n, nb), 1 << (bits - 1), np.int32)
    elif zp.dtype == np.uint8:
        row = (nb * bits + 7) // 8
        if zp.size != n * row:
            raise RuntimeShapeError(f"{op}: uint8 zero_points must have N * ceil(n_blocks * bits / 8) = "
                                    f"{n} * {row} elements, got shape {shape_str(zp.shape)}")
        z = unpack_bits(zp.reshape(n, row), bits)[:, :nb].astype(np.int32)
    else:
        if zp.size != n * nb:
            raise RuntimeShapeError(f"{op}: float zero_points must have N * n_blocks = {n} * {nb} "
                                    f"elements, got shape {shape_str(zp.shape)}")
        z = zp.astype(f32).reshape(n, nb)
    return q, s, z


def _mnb_dequant(q, s, z):
    """B as ORT dequantizes it for its f32 path, [N, nb * bs] f32."""
    n, nb, bs = q.shape
    if z.dtype == np.int32:  # MlasDequantizeBlockwise: (q - zp) * scale
        w = (q - z[:, :, None]).astype(f32) * s[:, :, None]
    else:  # float zero points: q * scale + (-scale * zp)
        w = (q.astype(f32) * s[:, :, None]).astype(f32) + (-s * z).astype(f32)[:, :, None]
    return w.astype(f32).reshape(n, nb * bs)


_N_CHUNK = 2048  # rows of B dequantized at a time (bounds the reference's f64 working set)

def _mnb_matmul(a2: np.ndarray, q, s, z, int8_a: bool, block_size: int) -> np.ndarray:
    """f64 [M, N] products for f32 rows a2 [M, K]."""
    m, k = a2.shape
    n = q.shape[0]
    out = np.empty((m, n), f64)
    if int8_a:
        qa, sa = quantize_rows_int8(a2, block_size)
        lhs = (qa.astype(f64) * sa[:, :, None]).reshape(m, -1)  # exact in f64
    else:
        lhs = a2.astype(f64)
    for lo in range(0, n, _N_CHUNK):
        hi = min(n, lo + _N_CHUNK)
        if int8_a:
            rhs = ((q[lo:hi] - z[lo:hi, :, None]).astype(f64) * s[lo:hi, :, None]).reshape(hi - lo, -1)
        else:
            rhs = _mnb_dequant(q[lo:hi], s[lo:hi], z[lo:hi])[:, :k].astype(f64)
        out[:, lo:hi] = lhs @ rhs.T
    return out


@kernel("MatMulNBits")
def _matmul_nbits(inputs, attrs):
    a, B, scales = inputs[0], inputs[1], inputs[2]
    zp, g_idx, bias = at(inputs, 3), at(inputs, 4), at(inputs, 5)
    k, n, bits, bs, nb, blob = _mnb_layout(attrs)
    if g_idx is not None:
        raise RuntimeShapeError("MatMulNBits: g_idx is not supported")
    if a.ndim < 1 or a.shape[-1] != k:
        raise RuntimeShapeError(f"MatMulNBits: A must have K = {k} as its last dimension, "
                                f"got shape {shape_str(a.shape)}")
    if bias is not None and bias.size != n:
        raise RuntimeShapeError(f"MatMulNBits: bias must have N = {n} elements, got shape {shape_str(bias.shape)}")
    q, s, z = _mnb_unpack(B, scales, zp, attrs)
    # Float zero points always take ORT's f32 path (MLAS cannot prepack them).
    int8_a = int(attrs["accuracy_level"]) == 4 and z.dtype == np.int32
    a2 = a.astype(f32).reshape(-1, k)
    if int8_a and bits == 4 and bs == 32:
        y = _mnb_int8_blk32(a2, q, s, z, None if bias is None else bias.astype(f32).reshape(n))
        return [result(y.reshape(a.shape[:-1] + (n,)), a.dtype)]
    y = _mnb_matmul(a2, q, s, z, int8_a, bs)
    if bias is not None:
        y = y + bias.astype(f32).reshape(1, n)
    return [result(y.astype(f32).reshape(a.shape[:-1] + (n,)), a.dtype)]


@shape_rule("MatMulNBits", symbolic=True)
def _matmul_nbits_shape(types, values, attrs, num_outputs):
    k, n, bits, bs, nb, blob = _mnb_layout(attrs)
    a = shape_of(types[0])
    if a is not None:
        if len(a) < 1:
            raise RuntimeShapeError(f"MatMulNBits: A must have rank >= 1, got {pshape_str(a)}")
        if a[-1] is not None and a[-1] != k:
            raise RuntimeShapeError(f"MatMulNBits: A must have K = {k} as its last dimension, "
                                    f"got shape {pshape_str(a)}")
        a = tuple(a[:-1]) + (n,)
    b = shape_of(at(types, 1))
    if b is not None and all(d is not None for d in b) and product(b) != n * nb * blob:
        raise RuntimeShapeError(f"MatMulNBits: B must be [N, n_blocks, blob] = [{n}, {nb}, {blob}], "
                                f"got shape {pshape_str(b)}")
    return [tensor_type(elem_of(types[0]), a)]


def _claim_matmul_nbits(node, graph, attrs):
    bits, bs, level = int(attrs["bits"]), int(attrs["block_size"]), int(attrs["accuracy_level"])
    if bits not in (4, 8):
        return f"attribute bits={bits} is not supported (hipep implements 4 and 8)"
    if not (_pow2(bs) and 16 <= bs <= 256):
        return f"attribute block_size={bs} is not supported (a power of two from 16 to 256)"
    if int(attrs["weight_prepacked"]) != 0:
        return (f"attribute weight_prepacked={attrs['weight_prepacked']}: B is in an EP-specific "
                f"prepacked layout hipep does not read")
    if int(attrs["K"]) <= 0 or int(attrs["N"]) <= 0:
        return f"attributes K={attrs['K']}, N={attrs['N']} must be positive"
    if has_input(node, 4):
        return "input g_idx (act-order reordering of K) is not supported"
    a_t = input_type(node, graph, 0)
    zp_t = input_type(node, graph, 3)
    float_zp = zp_t is not None and zp_t.elem_type != U8
    if float_zp:
        if a_t is not None and zp_t.elem_type != a_t.elem_type:
            return (f"float zero_points of type {type_name(zp_t.elem_type)} with A of type "
                    f"{type_name(a_t.elem_type)}: ORT's CPU EP takes float zero points of A's type only")
        if bits != 4:
            return f"float zero_points with bits={bits}: ORT's CPU EP runs float zero points with 4 bits only"
    if level == 4 and not float_zp:
        # ORT quantizes A to int8 only when it could prepack the weights at session creation;
        # with run-time weights it silently takes its f32 path instead (and with constant B but
        # run-time scales its packed block sums would be stale). The reference cannot tell.
        names = [("B", 1), ("scales", 2)] + ([("zero_points", 3)] if zp_t is not None else [])
        fed = [name for name, i in names if not graph.is_initializer(node.inputs[i])]
        if fed:
            return (f"accuracy_level=4 with {', '.join(fed)} not a constant initializer: ORT's CPU EP "
                    f"then ignores the accuracy level, which hipep cannot follow")
    return None


register(OpDef("MatMulNBits", (1,), ("T1", "T2", "T1", "T3", "T4", "T1"), ("T1",),
               {"T1": LLM_FLOATS, "T2": U8S, "T3": LLM_FLOATS | {U8}, "T4": frozenset({I32})}, _matmul_nbits,
               attributes={"K": REQUIRED, "N": REQUIRED, "bits": 4, "block_size": REQUIRED,
                           "accuracy_level": 0, "weight_prepacked": 0},
               claim=_claim_matmul_nbits, domain=MS, min_inputs=3, shape_rule=_matmul_nbits_shape))


# ---- hipep::GatedMatMulNBits -------------------------------------------------------------------
# Two MatMulNBits of one A -- the gate and up projections of a gated MLP -- and the pointwise
# program that joins their results (SwiGLU's x * sigmoid(x) * up, GELU's), made by the compiler
# (hip-fuse-gated-matmul), never found in a model. Inputs: A, then B, scales and zero points of
# the first ("gate", positions 1-3) and of the second ("up", 4-6); attributes: the two nodes'
# shared MatMulNBits attributes and the pointwise program as hipep::FusedElementwise carries it
# (`nodes`, `outputs`, `broadcast`, `input_dtypes`, `output_dtypes`, `covers`), whose inputs 0 and 1
# are the gate's and the up projection's results. The reference runs the three steps as the nodes
# alone would: the same bits. On a GPU one kernel computes both dot products of an output column
# and applies the program to them, so the projections' results never reach memory.

GATED_MATMUL_NBITS = "GatedMatMulNBits"
MNB_ATTRIBUTES = ("K", "N", "bits", "block_size", "accuracy_level")


@kernel(GATED_MATMUL_NBITS)
def _gated_matmul_nbits(inputs, attrs):
    from .elementwise import fused_expr
    from .pointwise import evaluate

    a = inputs[0]
    mnb = {k: attrs[k] for k in MNB_ATTRIBUTES}
    (gate,) = _matmul_nbits([a, inputs[1], inputs[2], at(inputs, 3)], mnb)
    (up,) = _matmul_nbits([a, inputs[4], inputs[5], at(inputs, 6)], mnb)
    return evaluate(fused_expr(attrs), [gate, up], GATED_MATMUL_NBITS, ["gate", "up"])


@shape_rule(GATED_MATMUL_NBITS, symbolic=True)
def _gated_matmul_nbits_shape(types, values, attrs, num_outputs):
    (y,) = _matmul_nbits_shape([types[0], at(types, 1)], values, attrs, 1)
    return [tensor_type(elem_type_of(np.dtype(attrs["output_dtypes"][0])), y.shape)]


def _claim_gated(node, graph, attrs):
    """Made by the compiler from two MatMulNBits of one input and the pointwise nodes joining them;
    never claimed from a model."""
    return (f"hipep::{GATED_MATMUL_NBITS} is made by hipep's compiler from two MatMulNBits of one input "
            f"and the pointwise nodes that join them; a model cannot use it")


register(OpDef(GATED_MATMUL_NBITS, (1,), ("", "", "", "", "", "", ""), ("",), {}, _gated_matmul_nbits,
               attributes={"K": REQUIRED, "N": REQUIRED, "bits": 4, "block_size": REQUIRED, "accuracy_level": 0,
                           "nodes": REQUIRED, "outputs": REQUIRED, "broadcast": REQUIRED,
                           "input_dtypes": REQUIRED, "output_dtypes": REQUIRED, "covers": []},
               claim=_claim_gated, domain="hipep", min_inputs=6, shape_rule=_gated_matmul_nbits_shape))


# ---- SkipNormMatMulNBits (hipep; made by hip-fuse-norm-matmul) ------------------------------
# A com.microsoft::SkipSimplifiedLayerNormalization whose normalized output is A of one
# MatMulNBits or GatedMatMulNBits (`matmul`): a decoder layer's input and post-attention norms and
# the projections after them. Inputs: the norm's x, skip, gamma, bias (0-3), then the matmul's
# inputs after A (4 on); outputs: the matmul's result (0), then the norm's y, mean, inv_std_var and
# input_skip_bias_sum (1-4) where the plan keeps them. Attributes: the norm's `epsilon`, the
# matmul's own. The reference runs the two ops as the nodes would: the unfused plan's bits. On a GPU
# each GEMV block computes the norm of the one row it stages (kernels/matmul_nbits_row.h,
# hipep_mnb_skip_norm_src), so the norm is no launch of its own.

SKIP_NORM_MATMUL_NBITS = "SkipNormMatMulNBits"
NORM_INPUTS = 4  # x, skip, gamma, bias: the matmul's input j (j >= 1) is input NORM_INPUTS - 1 + j


def _skip_norm_def():
    from .registry import lookup

    return lookup(MS, "SkipSimplifiedLayerNormalization")


def matmul_attributes(attrs) -> dict:
    """A SkipNormMatMulNBits launch's attributes as its matmul's own (all but the norm's)."""
    return {k: v for k, v in attrs.items() if k not in ("matmul", "epsilon")}


@kernel(SKIP_NORM_MATMUL_NBITS)
def _skip_norm_matmul_nbits(inputs, attrs):
    norm = _skip_norm_def().reference(list(inputs[:NORM_INPUTS]), {"epsilon": attrs["epsilon"]})
    inner = _matmul_nbits if attrs["matmul"] == "MatMulNBits" else _gated_matmul_nbits
    (y,) = inner([norm[0]] + list(inputs[NORM_INPUTS:]), matmul_attributes(attrs))
    return [y] + list(norm)


@shape_rule(SKIP_NORM_MATMUL_NBITS, symbolic=True)
def _skip_norm_matmul_nbits_shape(types, values, attrs, num_outputs):
    norm = _skip_norm_def().shape_rule(list(types[:NORM_INPUTS]), list(values[:NORM_INPUTS]),
                                       {"epsilon": attrs["epsilon"]}, 4)
    inner = _matmul_nbits_shape if attrs["matmul"] == "MatMulNBits" else _gated_matmul_nbits_shape
    (y,) = inner([norm[0]] + list(types[NORM_INPUTS:]), [None] + list(values[NORM_INPUTS:]), matmul_attributes(attrs), 1)
    return ([y] + list(norm))[:num_outputs]


def _claim_skip_norm_matmul(node, graph, attrs):
    """Made by the compiler from a SkipSimplifiedLayerNormalization and the MatMulNBits (or gated
    MLP) reading its normalized output; never claimed from a model."""
    return (f"hipep::{SKIP_NORM_MATMUL_NBITS} is made by hipep's compiler from a SkipSimplifiedLayerNormalization "
            f"and the MatMulNBits that reads its output; a model cannot use it")


register(OpDef(SKIP_NORM_MATMUL_NBITS, (1,), ("",) * 10, ("", "", "", "", ""), {}, _skip_norm_matmul_nbits,
               attributes={"matmul": REQUIRED, "epsilon": REQUIRED, "K": REQUIRED, "N": REQUIRED, "bits": 4,
                           "block_size": REQUIRED, "accuracy_level": 0, "nodes": [], "outputs": [], "broadcast": [],
                           "input_dtypes": [], "output_dtypes": [], "covers": []},
               claim=_claim_skip_norm_matmul, domain="hipep", min_inputs=6,
               shape_rule=_skip_norm_matmul_nbits_shape))


# ---- GatherBlockQuantized --------------------------------------------------------------------

def _gbq_check(op, data, idx, scales, zp, bits, bs):
    """Shape checks on partial shapes (None dims unchecked); returns the output shape or None."""
    if data is None:
        return None
    r = len(data)
    if r < 1:
        raise RuntimeShapeError(f"{op}: data must have rank >= 1, got a scalar")
    comp = 8 // bits
    if scales is not None:
        if len(scales) != r:
            raise RuntimeShapeError(f"{op}: scales must have data's rank {r}, got shape {pshape_str(scales)}")
        for i, (d, s) in enumerate(zip(data, scales)):
            if d is None or s is None:
                continue
            want = (d * comp + bs - 1) // bs if i == r - 1 else d
            if s != want:
                raise RuntimeShapeError(
                    f"{op}: scales of shape {pshape_str(scales)} do not match data of shape {pshape_str(data)} "
                    f"(dimension {i} must be {want}; bits={bits}, block_size={bs})")
    if zp is not None and scales is not None:
        if len(zp) != len(scales):
            raise RuntimeShapeError(f"{op}: zero_points must have scales' rank {len(scales)}, "
                                    f"got shape {pshape_str(zp)}")
        for i, (z, s) in enumerate(zip(zp, scales)):
            if z is None or s is None:
                continue
            want = (s + comp - 1) // comp if i == r - 1 else s
            if z != want:
                raise RuntimeShapeError(
                    f"{op}: zero_points of shape {pshape_str(zp)} do not match scales of shape "
                    f"{pshape_str(scales)} (dimension {i} must be {want}; bits={bits})")
    if idx is None:
        return None
    last = None if data[-1] is None else data[-1] * comp
    return tuple(idx) + tuple(data[1:-1]) + (last,) if r > 1 else tuple(idx) + (last,)


def _gbq_axes(op, attrs, rank):
    g = normalize_axis(op, int(attrs["gather_axis"]), rank, "gather_axis")
    qa = normalize_axis(op, int(attrs["quantize_axis"]), rank, "quantize_axis")
    if g != 0 or qa != rank - 1 or rank < 2:
        raise RuntimeShapeError(f"{op}: uint8 data needs gather_axis 0 and quantize_axis the last of "
                                f"rank >= 2 data; got gather_axis={attrs['gather_axis']}, "
                                f"quantize_axis={attrs['quantize_axis']} for rank {rank}")


@kernel("GatherBlockQuantized")
def _gather_block_quantized(inputs, attrs):
    op = "GatherBlockQuantized"
    data, idx, scales = inputs[0], inputs[1], inputs[2]
    zp = at(inputs, 3)
    bits, bs = int(attrs["bits"]), int(attrs["block_size"])
    _gbq_axes(op, attrs, data.ndim)
    out_shape = _gbq_check(op, data.shape, idx.shape, scales.shape, None if zp is None else zp.shape, bits, bs)
    comp = 8 // bits
    vocab = data.shape[0]
    flat = idx.reshape(-1).astype(np.int64)
    valid = (flat >= -vocab) & (flat < vocab)
    rows = np.where(flat < 0, flat + vocab, flat)
    rows = np.where(valid, rows, 0)
    width = data.shape[-1] * comp
    q = unpack_bits(data[rows], bits).astype(np.int32)            # [n, ..., width]
    k_blk = np.arange(width) // bs
    s = scales[rows][..., k_blk].astype(f32)
    if zp is None:
        z = np.int32(1 << (bits - 1))
    else:
        z = unpack_bits(zp[rows], bits)[..., k_blk].astype(np.int32)
    y = ((q - z).astype(f32) * s).astype(f32)
    y[~valid] = 0
    return [result(y.reshape(out_shape), scales.dtype)]


@shape_rule("GatherBlockQuantized", symbolic=True)
def _gather_block_quantized_shape(types, values, attrs, num_outputs):
    op = "GatherBlockQuantized"
    bits, bs = int(attrs["bits"]), int(attrs["block_size"])
    data = shape_of(types[0])
    if data is not None:
        _gbq_axes(op, attrs, len(data))
    out = _gbq_check(op, data, shape_of(at(types, 1)), shape_of(at(types, 2)), shape_of(at(types, 3)), bits, bs)
    return [tensor_type(elem_of(at(types, 2)), out)]


def _claim_gbq(node, graph, attrs):
    bits, bs = int(attrs["bits"]), int(attrs["block_size"])
    if bits not in (2, 4, 8):
        return f"attribute bits={bits} is not supported for uint8 data (2, 4 or 8)"
    if not (_pow2(bs) and bs >= 16):
        return f"attribute block_size={bs} is not supported (a power of two >= 16)"
    rank = input_rank(node, graph, 0)
    if rank is not None:
        if rank < 2:
            return f"data has rank {rank}; uint8 data needs rank >= 2"
        g, qa = int(attrs["gather_axis"]), int(attrs["quantize_axis"])
        if not (-rank <= g < rank and -rank <= qa < rank):
            return f"attribute gather_axis={g} or quantize_axis={qa} is out of range for rank-{rank} data"
        if g % rank != 0 or qa % rank != rank - 1:
            return (f"gather_axis={g}, quantize_axis={qa}: with uint8 data ORT needs gather_axis 0 and "
                    f"quantize_axis the last axis")
    return None


register(OpDef("GatherBlockQuantized", (1,), ("T1", "Tind", "T2", "T1"), ("T2",),
               {"T1": U8S, "Tind": INTS, "T2": LLM_FLOATS}, _gather_block_quantized,
               attributes={"bits": 4, "block_size": 128, "quantize_axis": 1, "gather_axis": 0},
               claim=_claim_gbq, domain=MS, min_inputs=3, shape_rule=_gather_block_quantized_shape))
