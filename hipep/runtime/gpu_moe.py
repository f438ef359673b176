"""GPU binding of com.microsoft MoE with float experts (kernels/moe.hip: routing, the two expert
GEMVs with the activation between them, the weighted combine; five launches over the stream's
workspace). Registered in hipep.runtime.gpu_kernels' table on import."""
from __future__ import annotations

import ctypes

from ..errors import HipepError
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
    k = int(attrs.get("k", 1))
    if not 1 <= k <= experts:
        raise HipepError(f"{op}: k={k} must be between 1 and the number of experts {experts}")
    if k > MOE_MAX_K:
        raise NoKernel(f"{op} with k={k} (at most {MOE_MAX_K})")
    dt = _DT.get(x.dtype.name)
    if dt is None:
        raise NoKernel(f"{op} on {x.dtype.name}")
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
