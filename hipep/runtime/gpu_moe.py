"""GPU bindings of com.microsoft MoE with float experts and QMoE with 4- or 8-bit ones
(kernels/moe.hip: routing, the two expert GEMVs with the activation between them, the weighted
combine; five launches over the stream's workspace, seven for QMoE's int8-activation path, which
quantizes each GEMV's input first). Registered in hipep.runtime.gpu_kernels' table on import."""
from __future__ import annotations

import ctypes

from ..errors import HipepError
from ..ops.moe import _QMOE_FC3, _QMOE_FP_ONLY, _qmoe_int8
from .gpu_binding_core import KernelOp, NoKernel, _binding, _cdiv, flat_config, ptr, workspace_regions

MODULE = "moe"
_DT = {"float32": "f32", "float16": "f16"}
MOE_ROWS = 8  # HIPEP_MOE_ROWS
MOE_MAX_K = 32  # HIPEP_MOE_MAX_K
# kernels/moe.hip's HIPEP_MOE_* activations
_ACTIVATIONS = {"relu": 0, "gelu": 1, "silu": 2, "swiglu": 3, "identity": 4}


class MoeArgs(ctypes.Structure):
    """kernels/moe.hip's hipep_moe_args."""
    _fields_ = ([(n, ctypes.c_int) for n in ("tokens", "experts", "k", "hidden", "n1", "inter", "normalize",
                                             "activation", "has_limit")]
                + [(n, ctypes.c_float) for n in ("limit", "alpha", "beta")])


def _k_and_type(op: str, attrs, experts: int, x) -> tuple[int, str]:
    """The node's k, checked against the experts and the routing's limit, and the kernels' type name."""
    k = int(attrs.get("k", 1))
    if not 1 <= k <= experts:
        raise HipepError(f"{op}: k={k} must be between 1 and the number of experts {experts}")
    if k > MOE_MAX_K:
        raise NoKernel(f"{op} with k={k} (at most {MOE_MAX_K})")
    dt = _DT.get(x.dtype.name)
    if dt is None:
        raise NoKernel(f"{op} on {x.dtype.name}")
    return k, dt


def _moe_check(attrs, dtypes, shapes, values):
    dtypes = list(dtypes or [])
    present = [d for d in dtypes[:6] if d]
    if not present or any(d not in _DT for d in present) or len(set(present)) > 1:
        return f"element types {dtypes[:6]}"
    if attrs.get("activation_type", "relu") not in _ACTIVATIONS:
        return f"activation_type '{attrs.get('activation_type')}'"
    if int(attrs.get("k", 1)) > MOE_MAX_K:
        return f"k={attrs.get('k')} above {MOE_MAX_K}"
    return None


@_binding("com.microsoft::MoE", check=_moe_check, modules=(MODULE,))
def _moe_bind(ins, outs, attrs, target):
    op = "MoE"
    ins = list(ins) + [None] * (6 - len(ins))
    x, router, w1, b1, w2, b2 = ins[:6]
    y = outs[0]
    act = attrs.get("activation_type", "relu")
    swiglu = act == "swiglu"
    if x.ndim not in (2, 3) or w1.ndim != 3 or w2 is None or w2.ndim != 3:
        raise HipepError(f"{op}: input {list(x.shape)} must be 2-D or 3-D and the expert weights 3-D")
    hidden, experts = int(x.shape[-1]), int(w1.shape[0])
    tokens = x.size // hidden if hidden else 0
    n1, inter = int(w1.shape[1]), int(w2.shape[2])
    if (w1.shape[2] != hidden or tuple(w2.shape[:2]) != (experts, hidden) or n1 != inter * (2 if swiglu else 1)
            or tuple(router.shape) != (tokens, experts)):
        raise HipepError(f"{op}: fc1 {list(w1.shape)}, fc2 {list(w2.shape)} and router_probs {list(router.shape)} "
                         f"do not fit the input {list(x.shape)}")
    k, dt = _k_and_type(op, attrs, experts, x)
    if tokens == 0 or y is None:
        return []
    limit = attrs.get("swiglu_limit")
    args = MoeArgs(tokens, experts, k, hidden, n1, inter, int(attrs.get("normalize_routing_weights", 0)),
                   _ACTIVATIONS[act], int(limit is not None), float(limit or 0.0),
                   float(attrs.get("activation_alpha", 1.0)), float(attrs.get("activation_beta", 0.0)))
    slots = tokens * k
    ids, weights, h, a, out = workspace_regions(target, op, [slots * 4, slots * 4, slots * n1 * 4, slots * inter * 4,
                                                             slots * hidden * 4])
    c = ctypes.c_uint64
    warp = target.warp_size
    grid, block = flat_config(tokens, target, block=64)
    ops = [KernelOp(f"hipep_moe_route_{dt}", grid, block, [ptr(router), c(ids), c(weights), args], module=MODULE),
           KernelOp(f"hipep_moe_fc1_{dt}", (slots, _cdiv(n1, MOE_ROWS), 1), (warp, MOE_ROWS, 1),
                    [ptr(x), c(ids), ptr(w1), ptr(b1), c(h), args], module=MODULE)]
    grid, block = flat_config(slots * inter, target)
    ops.append(KernelOp("hipep_moe_act", grid, block, [c(ids), c(h), c(a), args], module=MODULE))
    ops.append(KernelOp(f"hipep_moe_fc2_{dt}", (slots, _cdiv(hidden, MOE_ROWS), 1), (warp, MOE_ROWS, 1),
                        [c(a), c(ids), ptr(w2), ptr(b2), c(out), args], module=MODULE))
    grid, block = flat_config(tokens * hidden, target)
    ops.append(KernelOp(f"hipep_moe_combine_{dt}", grid, block, [c(ids), c(weights), c(out), ptr(y), args],
                        module=MODULE))
    return ops


# ---- QMoE ---------------------------------------------------------------------------------------

class QMoeArgs(ctypes.Structure):
    """kernels/moe.hip's hipep_qmoe_args."""
    _fields_ = [("m", MoeArgs), ("bits", ctypes.c_int), ("block_size", ctypes.c_int)]


_QMOE_FLOAT_INPUTS = (0, 1, 3, 4, 6, 7, 14)  # x, router, scales, biases, router_weights: type T
_QMOE_BYTE_INPUTS = (2, 5, 11, 12)  # packed weights and zero points


def _qmoe_check(attrs, dtypes, shapes, values):
    dtypes = list(dtypes or [])
    at = [dtypes[i] if i < len(dtypes) else "" for i in range(21)]
    present = [at[i] for i in _QMOE_FLOAT_INPUTS if at[i]]
    if not present or any(d not in _DT for d in present) or len(set(present)) > 1:
        return f"element types {dtypes[:15]}"
    if any(at[i] and at[i] != "uint8" for i in _QMOE_BYTE_INPUTS):
        return f"element types {dtypes[:15]} (weights and zero points must be uint8)"
    if any(at[i] for i in _QMOE_FC3 + _QMOE_FP_ONLY):
        return "fc3 or fp4/fp8 scale inputs"
    if attrs.get("quant_type", "int") != "int":
        return f"quant_type '{attrs.get('quant_type')}'"
    bits = int(attrs.get("expert_weight_bits", 4))
    if bits not in (4, 8):
        return f"expert_weight_bits={bits}"
    bs = int(attrs.get("block_size") or 0)
    if bs < 0 or (bits == 4 and bs % 2):  # a packed byte's two values must share a block
        return f"block_size={bs}"
    if int(attrs.get("weights_prepacked", 0) or 0) == 1:
        return "weights_prepacked=1"
    if attrs.get("activation_type", "relu") not in _ACTIVATIONS:
        return f"activation_type '{attrs.get('activation_type')}'"
    if int(attrs.get("k", 1)) > MOE_MAX_K:
        return f"k={attrs.get('k')} above {MOE_MAX_K}"
    return None


def _qmoe_operand(op, a, want: int, what: str):
    if a is not None and a.size != want:
        raise HipepError(f"{op}: {what} must have {want} elements, got shape {list(a.shape)}")


@_binding("com.microsoft::QMoE", check=_qmoe_check, modules=(MODULE,))
def _qmoe_bind(ins, outs, attrs, target):
    op = "QMoE"
    ins = list(ins) + [None] * (15 - len(ins))
    x, router, w1, s1, b1, w2, s2, b2 = ins[:8]
    z1, z2, rw = ins[11], ins[12], ins[14]
    y = outs[0]
    act = attrs.get("activation_type", "relu")
    swiglu = act == "swiglu"
    bits, bs = int(attrs.get("expert_weight_bits", 4)), int(attrs.get("block_size") or 0)
    per = 8 // bits
    if x.ndim not in (2, 3) or w1.ndim != 3 or w2 is None or w2.ndim != 3 or s1 is None or s2 is None:
        raise HipepError(f"{op}: input {list(x.shape)} must be 2-D or 3-D, the expert weights 3-D, with scales")
    hidden, experts = int(x.shape[-1]), int(w1.shape[0])
    tokens = x.size // hidden if hidden else 0
    n1, inter = int(w1.shape[1]), int(w2.shape[2]) * per
    if (w1.shape[2] * per != hidden or tuple(w2.shape[:2]) != (experts, hidden)
            or n1 != inter * (2 if swiglu else 1) or tuple(router.shape) != (tokens, experts)):
        raise HipepError(f"{op}: fc1 {list(w1.shape)}, fc2 {list(w2.shape)} and router_probs {list(router.shape)} "
                         f"do not fit the input {list(x.shape)} (expert_weight_bits={bits})")
    for rows, cols, s, z, b, what in ((n1, hidden, s1, z1, b1, "fc1"), (hidden, inter, s2, z2, b2, "fc2")):
        if bs and cols % bs:
            raise HipepError(f"{op}: {what} input size {cols} is not a multiple of block_size={bs}")
        nb = cols // bs if bs else 1
        _qmoe_operand(op, s, experts * rows * nb, f"{what}_scales")
        _qmoe_operand(op, z, experts * (rows * -(-nb // per) if bs else -(-rows // per)), f"{what}_zero_points")
        _qmoe_operand(op, b, experts * rows, f"{what}_experts_bias")
    _qmoe_operand(op, rw, tokens * experts, "router_weights")
    k, dt = _k_and_type(op, attrs, experts, x)
    if tokens == 0 or y is None:
        return []
    limit = attrs.get("swiglu_limit")
    # Without router_weights the weights are the softmax over the k whatever normalize_routing_weights says.
    normalize = int(attrs.get("normalize_routing_weights", 0)) if rw is not None else 1
    m = MoeArgs(tokens, experts, k, hidden, n1, inter, normalize, _ACTIVATIONS[act], int(limit is not None),
                float(limit or 0.0), float(attrs.get("activation_alpha", 1.0)),
                float(attrs.get("activation_beta", 0.0)))
    args = QMoeArgs(m, bits, bs)
    # The reference's own rule for which GEMM ORT runs (its claim already required constant weights there).
    int8 = _qmoe_int8({"block_size": bs, "expert_weight_bits": bits,
                       "accuracy_level": attrs.get("accuracy_level", 0)})
    slots = tokens * k
    sizes = [slots * 4, slots * 4, slots * n1 * 4, slots * inter * 4, slots * hidden * 4]
    if int8:
        sizes += [tokens * hidden * 8, slots * inter * 8]
    ids, weights, h, a, out, *quantized = workspace_regions(target, op, sizes)
    c = ctypes.c_uint64
    warp = target.warp_size
    fc1_grid, fc2_grid = (slots, _cdiv(n1, MOE_ROWS), 1), (slots, _cdiv(hidden, MOE_ROWS), 1)
    gemv_block = (warp, MOE_ROWS, 1)
    grid, block = flat_config(tokens, target, block=64)
    ops = [KernelOp(f"hipep_qmoe_route_{dt}", grid, block, [ptr(router), ptr(rw), c(ids), c(weights), m],
                    module=MODULE)]
    fc1_in, fc2_in, q8 = ptr(x), c(a), ""
    if int8:
        qx, qa = quantized
        fc1_in, fc2_in, q8 = c(qx), c(qa), "_q8"
        grid, block = flat_config(tokens * (hidden // bs), target, block=64)
        ops.append(KernelOp(f"hipep_qmoe_quant_{dt}", grid, block, [ptr(x), c(qx), args], module=MODULE))
    ops.append(KernelOp(f"hipep_qmoe_fc1{q8}_{dt}", fc1_grid, gemv_block,
                        [fc1_in, c(ids), ptr(w1), ptr(s1), ptr(z1), ptr(b1), c(h), args], module=MODULE))
    grid, block = flat_config(slots * inter, target)
    ops.append(KernelOp("hipep_moe_act", grid, block, [c(ids), c(h), c(a), m], module=MODULE))
    if int8:
        grid, block = flat_config(slots * (inter // bs), target, block=64)
        ops.append(KernelOp("hipep_qmoe_quant_act", grid, block, [c(a), c(ids), c(qa), args], module=MODULE))
    ops.append(KernelOp(f"hipep_qmoe_fc2{q8}_{dt}", fc2_grid, gemv_block,
                        [fc2_in, c(ids), ptr(w2), ptr(s2), ptr(z2), ptr(b2), c(out), args], module=MODULE))
    grid, block = flat_config(tokens * hidden, target)
    ops.append(KernelOp(f"hipep_moe_combine_{dt}", grid, block, [c(ids), c(weights), c(out), ptr(y), m],
                        module=MODULE))
    return ops
