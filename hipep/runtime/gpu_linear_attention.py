"""GPU bindings of the Gated DeltaNet linear-attention ops (Qwen3.5): CausalConvWithState,
LinearAttentionGate, LinearAttention and GatedRMSNorm, one launch each of kernels/linear_attention.hip
(what each launch computes is written there). The ai.onnx (opset 27) CausalConvWithState and
LinearAttention are subsets of the contrib forms (hipep/ops/linear_attention.py says which), so
they share the contrib bindings. Registered in hipep.runtime.gpu_kernels' table on import."""
from __future__ import annotations

import ctypes

from ..errors import HipepError
from ..ops.linear_attention import key_head_counts
from .gpu_binding_core import KernelOp, NoKernel, _binding, flat_config, ptr, row_config

MODULE = "linear_attention"
_DT = {"float32": "f32", "float16": "f16"}
LA_MAX_DK = 256  # HIPEP_LA_MAX_DK
LA_MAX_DV = 1024  # threads of a block: one per value column


def _types_check(count: int):
    def check(attrs, dtypes, shapes, values):
        present = [d for d in list(dtypes or [])[:count] if d]
        if not present or any(d not in _DT for d in present):
            return f"element types {list(dtypes or [])[:count]}"
        return None
    return check


def _dt(a, op: str) -> str:
    dt = _DT.get(a.dtype.name)
    if dt is None:
        raise NoKernel(f"{op} on {a.dtype.name}")
    return dt


class ConvArgs(ctypes.Structure):
    """kernels/linear_attention.hip's hipep_conv_args."""
    _fields_ = [("batch", ctypes.c_longlong), ("channels", ctypes.c_longlong), ("length", ctypes.c_longlong),
                ("k", ctypes.c_int), ("dilation", ctypes.c_int), ("silu", ctypes.c_int)]


def _conv_check(attrs, dtypes, shapes, values):
    why = _types_check(4)(attrs, dtypes, shapes, values)
    if why:
        return why
    if int(attrs.get("ndim", 1)) != 1 or int(attrs.get("channels_last", 0)) or int(attrs.get("state_window", 0)):
        return "a layout other than ndim=1, channels first, no state window"
    return None


@_binding("::CausalConvWithState", check=_conv_check, modules=(MODULE,))
@_binding("com.microsoft::CausalConvWithState", check=_conv_check, modules=(MODULE,))
def _causal_conv_bind(ins, outs, attrs, target):
    op = "CausalConvWithState"
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    past = ins[3] if len(ins) > 3 else None
    y = outs[0]
    present = outs[1] if len(outs) > 1 else None
    if x.ndim != 3 or w.ndim != 3 or w.shape[0] != x.shape[1] or w.shape[1] != 1:
        raise HipepError(f"{op}: input must be [batch, channels, length] and weight [channels, 1, k], got "
                         f"{list(x.shape)} and {list(w.shape)}")
    b, c, length = (int(d) for d in x.shape)
    k, d = int(w.shape[2]), int(attrs.get("dilation", 1))
    keep = (k - 1) * d
    if past is not None and tuple(past.shape) != (b, c, keep):
        raise HipepError(f"{op}: past_state must be {[b, c, keep]}, got {list(past.shape)}")
    if bias is not None and tuple(bias.shape) != (c,):
        raise HipepError(f"{op}: bias must be [{c}], got {list(bias.shape)}")
    dt = _dt(x, op)
    n = b * c * length + (b * c * keep if present is not None else 0)
    if n == 0 or y is None:
        return []
    grid, block = flat_config(n, target)
    silu = 1 if attrs.get("activation", "none") in ("silu", "swish") else 0
    return [KernelOp(f"hipep_causal_conv_{dt}", grid, block,
                     [ptr(x), ptr(w), ptr(bias), ptr(past), ptr(y), ptr(present), ConvArgs(b, c, length, k, d, silu)],
                     module=MODULE)]


class GateArgs(ctypes.Structure):
    """kernels/linear_attention.hip's hipep_la_gate_args."""
    _fields_ = [("n", ctypes.c_longlong), ("heads", ctypes.c_int)]


@_binding("com.microsoft::LinearAttentionGate", check=_types_check(1), modules=(MODULE,))
def _gate_bind(ins, outs, attrs, target):
    op = "LinearAttentionGate"
    a, dt_bias, scale = ins[0], ins[1], ins[2]
    b = ins[3] if len(ins) > 3 else None
    decay = outs[0]
    beta = outs[1] if len(outs) > 1 else None
    h = int(a.shape[-1]) if a.ndim else 0
    if dt_bias.size != h or scale.size != h or dt_bias.dtype.name != "float32" or scale.dtype.name != "float32":
        raise HipepError(f"{op}: dt_bias and decay_scale must be float32 [{h}], got {list(dt_bias.shape)} and "
                         f"{list(scale.shape)}")
    if beta is not None and (b is None or tuple(b.shape) != tuple(a.shape)):
        raise HipepError(f"{op}: the beta output needs b of a's shape {list(a.shape)}")
    dt = _dt(a, op)
    if a.size == 0 or decay is None:
        return []
    grid, block = flat_config(a.size, target)
    return [KernelOp(f"hipep_la_gate_{dt}", grid, block,
                     [ptr(a), ptr(dt_bias), ptr(scale), ptr(b if beta is not None else None), ptr(decay), ptr(beta),
                      GateArgs(a.size, h)], module=MODULE)]


class LinearAttentionArgs(ctypes.Structure):
    """kernels/linear_attention.hip's hipep_la_args."""
    _fields_ = ([(n, ctypes.c_int) for n in ("batch", "tokens", "q_heads", "kv_heads", "key_heads", "dk", "dv",
                                             "gated", "delta", "decay_per_key", "beta_shared", "has_past")]
                + [("scale", ctypes.c_float)])


def _la_check(attrs, dtypes, shapes, values):
    dtypes = list(dtypes or [])
    why = _types_check(6)(attrs, dtypes, shapes, values)
    if why:
        return why
    if len({d for d in dtypes[:6] if d}) > 1:
        return f"mixed element types {dtypes[:6]} (a state type other than the activations')"
    if int(attrs.get("state_window", 0)):
        return "state_window > 0"
    hq, hkv = int(attrs.get("q_num_heads", 0)), int(attrs.get("kv_num_heads", 0))
    q = shapes[0] if shapes else None
    v = shapes[2] if len(shapes) > 2 else None
    if hq > 0 and q is not None and len(q) == 3 and q[2] is not None and q[2] // hq > LA_MAX_DK:
        return f"a key head size {q[2] // hq} above {LA_MAX_DK}"
    if hkv > 0 and v is not None and len(v) == 3 and v[2] is not None and v[2] // hkv > LA_MAX_DV:
        return f"a value head size {v[2] // hkv} above {LA_MAX_DV}"
    return None


@_binding("::LinearAttention", check=_la_check, modules=(MODULE,))
@_binding("com.microsoft::LinearAttention", check=_la_check, modules=(MODULE,))
def _linear_attention_bind(ins, outs, attrs, target):
    op = "LinearAttention"
    ins = list(ins) + [None] * (6 - len(ins))
    q, k, v, past, decay, beta = ins[:6]
    out, present = (list(outs) + [None, None])[:2]
    hq, hkv = int(attrs["q_num_heads"]), int(attrs["kv_num_heads"])
    rule = attrs.get("update_rule", "gated_delta")
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        raise HipepError(f"{op}: update_rule '{rule}'")
    if q.ndim != 3 or k.ndim != 3 or v.ndim != 3 or hq <= 0 or hkv <= 0 or (hq % hkv and hkv % hq):
        raise HipepError(f"{op}: query {list(q.shape)}, key {list(k.shape)}, value {list(v.shape)} with "
                         f"q_num_heads={hq}, kv_num_heads={hkv}")
    b, t = int(q.shape[0]), int(q.shape[1])
    dk, dv = int(q.shape[2]) // hq, int(v.shape[2]) // hkv
    nk = int(k.shape[2]) // dk if dk else 0
    if nk not in key_head_counts(hq, hkv) or nk * dk != k.shape[2] or dk * hq != q.shape[2] or dv * hkv != v.shape[2]:
        heads = "kv_num_heads" + (" (or q_num_heads)" if hkv > hq else "")
        raise HipepError(f"{op}: key {list(k.shape)} must hold {heads} heads of {dk} (q_num_heads={hq}, "
                         f"kv_num_heads={hkv})")
    if dk > LA_MAX_DK or dv > LA_MAX_DV:
        raise NoKernel(f"{op} with heads of d_k={dk}, d_v={dv} (at most {LA_MAX_DK} and {LA_MAX_DV})")
    if past is not None and tuple(past.shape) != (b, hkv, dk, dv):
        raise HipepError(f"{op}: past_state must be {[b, hkv, dk, dv]}, got {list(past.shape)}")
    if gated and (decay is None or tuple(decay.shape) not in ((b, t, hkv), (b, t, hkv * dk))):
        raise HipepError(f"{op}: update_rule '{rule}' needs decay [{b}, {t}, {hkv}] or [{b}, {t}, {hkv * dk}]")
    if delta and (beta is None or tuple(beta.shape) not in ((b, t, hkv), (b, t, 1))):
        raise HipepError(f"{op}: update_rule '{rule}' needs beta [{b}, {t}, {hkv}] or [{b}, {t}, 1]")
    dt = _dt(q, op)
    if out is None or present is None:
        raise NoKernel(f"{op} without its present_state output")
    if b * hkv == 0 or dv == 0:
        return []
    scale = float(attrs.get("scale", 0.0)) or dk ** -0.5
    args = LinearAttentionArgs(b, t, hq, hkv, nk, dk, dv, int(gated), int(delta),
                               int(gated and decay.shape[2] == hkv * dk), int(delta and beta.shape[2] == 1),
                               int(past is not None), scale)
    threads = max(target.warp_size, -(-dv // target.warp_size) * target.warp_size)
    return [KernelOp(f"hipep_linear_attention_{dt}", (hkv, b, 1), (threads, 1, 1),
                     [ptr(q), ptr(k), ptr(v), ptr(past), ptr(decay if gated else None), ptr(beta if delta else None),
                      ptr(out), ptr(present), args], module=MODULE)]


class GatedRmsArgs(ctypes.Structure):
    """kernels/linear_attention.hip's hipep_grn_args."""
    _fields_ = [("rows", ctypes.c_longlong), ("c", ctypes.c_int), ("sigmoid", ctypes.c_int), ("eps", ctypes.c_float)]


@_binding("com.microsoft::GatedRMSNorm", check=_types_check(3), modules=(MODULE,))
def _gated_rms_norm_bind(ins, outs, attrs, target):
    op = "GatedRMSNorm"
    x, scale, gate = ins[:3]
    y = outs[0]
    c = int(scale.size)
    if x.ndim == 0 or c == 0 or x.shape[-1] % c or tuple(gate.shape) != tuple(x.shape):
        raise HipepError(f"{op}: X {list(x.shape)} must have a last dim that scale's {c} divides, and gate X's shape")
    dt = _dt(x, op)
    rows = x.size // c
    if rows == 0 or y is None:
        return []
    grid, block = row_config(rows, c, target)
    sigmoid = 1 if attrs.get("activation", "silu") == "sigmoid" else 0
    return [KernelOp(f"hipep_gated_rms_norm_{dt}", grid, block,
                     [ptr(x), ptr(scale), ptr(gate), ptr(y), GatedRmsArgs(rows, c, sigmoid, float(attrs["epsilon"]))],
                     module=MODULE)]
