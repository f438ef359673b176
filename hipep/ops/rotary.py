"""Rotary embeddings: com.microsoft RotaryEmbedding and MRotaryEmbedding (the Qwen vision-language
models' multimodal rotary: three position streams) and ai.onnx RotaryEmbedding-23, as ONNX Runtime's
CPU EP computes them (MLAS's fused f32 kernel, `_rope(..., fused=True)`: bit-exact in f32). The
rotation itself (`_rope`, `_rotate_heads`) is shared with GroupQueryAttention's do_rotary and lives
in contrib_attention.py."""
from __future__ import annotations

import numpy as np

from ..errors import RuntimeShapeError
from ._common import at, elem_of, input_type, kernel, pshape_str, result, shape_of, shape_rule, shape_str, tensor_type
from .contrib_attention import _f32, _rotate_heads
from .registry import F16, F32, I64, REQUIRED, OpDef, register

FLOATS = frozenset({F32, F16})
I64S = frozenset({I64})


# ---- RotaryEmbedding (com.microsoft and ai.onnx-23) ------------------------------------------

def _rope_layout(op, x, num_heads, head_size_of):
    """x as f32 [B, S, N, H] plus a function mapping such an array back to x's layout.
    3-D inputs are [B, S, N*H]; 4-D inputs are [B, N, S, H]."""
    if x.ndim == 3:
        b, s, hidden = x.shape
        h = head_size_of(hidden)
        n = num_heads or (hidden // h if h else 0)
        if h <= 0 or n <= 0 or n * h != hidden:
            raise RuntimeShapeError(f"{op}: input hidden size {hidden} is not num_heads ({n}) * head_size ({h})")
        return _f32(x).reshape(b, s, n, h), lambda y: y.reshape(b, s, hidden)
    if x.ndim == 4:
        b, n, s, h = x.shape
        return _f32(x).transpose(0, 2, 1, 3), lambda y: y.transpose(0, 2, 1, 3)
    raise RuntimeShapeError(f"{op}: input must be 3-D [batch, sequence, hidden] or 4-D [batch, heads, sequence, "
                            f"head_size], got {shape_str(x.shape)}")


def _rope_apply(op, x4, cos, sin, rotary_dim, interleaved, fused=False):
    """x4 [B, S, N, H] f32; cos/sin [B, S, R/2] f32 (R = rotary_dim). fused: MLAS's f32 kernel."""
    h = x4.shape[-1]
    if rotary_dim <= 0 or rotary_dim > h or rotary_dim % 2:
        raise RuntimeShapeError(f"{op}: rotary_embedding_dim {rotary_dim} must be even and at most the head "
                                f"size {h}")
    if cos.shape[-1] != rotary_dim // 2:
        raise RuntimeShapeError(f"{op}: cos_cache/sin_cache last dim must be rotary_embedding_dim / 2 = "
                                f"{rotary_dim // 2}, got {cos.shape[-1]}")
    return _rotate_heads(x4, cos[:, :, None], sin[:, :, None], rotary_dim, interleaved, fused)


def _gather_cache(op, cache, pos, cols=None):
    """cache's rows at positions `pos` (f32), or with `cols`, element [pos, cols] (broadcast)."""
    if pos.size and (pos.min() < 0 or pos.max() >= cache.shape[0]):
        bad = int(pos.max()) if pos.max() >= cache.shape[0] else int(pos.min())
        raise RuntimeShapeError(f"{op}: position id {bad} "
                                f"is out of range for a cache of {cache.shape[0]} positions")
    return _f32(cache)[pos] if cols is None else _f32(cache)[pos, cols]


MS_ROPE = "RotaryEmbedding"


def _ms_layout(op, x, cos, sin, n: int, rd: int):
    """com.microsoft's rotary layouts (RotaryEmbedding, MRotaryEmbedding): x as f32 [B, S, N, H],
    the function back to x's layout, and the head size H (the caches' width x 2 without
    rotary_embedding_dim, else hidden / num_heads)."""
    if cos.ndim != 2 or sin.shape != cos.shape:
        raise RuntimeShapeError(f"{op}: cos_cache and sin_cache must both be 2-D [max_position, rotary_dim / 2], "
                                f"got {shape_str(cos.shape)} and {shape_str(sin.shape)}")
    if x.ndim not in (3, 4):
        raise RuntimeShapeError(f"{op}: input must be 3-D or 4-D, got {shape_str(x.shape)}")
    hidden = x.shape[2] if x.ndim == 3 else x.shape[1] * x.shape[3]
    h = 2 * cos.shape[1] if rd == 0 else (hidden // n if n else 0)
    if x.ndim == 4 and n and n != x.shape[1]:
        raise RuntimeShapeError(f"{op}: num_heads={n} differs from the input's {x.shape[1]} heads")
    if x.ndim == 4 and h != x.shape[3]:
        raise RuntimeShapeError(f"{op}: head size {h} (from the caches / attributes) differs from the input's "
                                f"{x.shape[3]}")
    x4, back = _rope_layout(op, x, n, lambda hidden: h)
    return x4, back, h


@kernel(MS_ROPE)
def _ms_rope(inputs, attrs):
    x, pos_ids, cos, sin = inputs[:4]
    op = MS_ROPE
    n, rd = int(attrs["num_heads"]), int(attrs["rotary_embedding_dim"])
    x4, back, h = _ms_layout(op, x, cos, sin, n, rd)
    b, s = x4.shape[:2]
    if s > cos.shape[0]:
        raise RuntimeShapeError(f"{op}: sequence length {s} exceeds the caches' {cos.shape[0]} positions")
    if pos_ids.size == 1 and pos_ids.ndim <= 1:
        pos = int(pos_ids.reshape(-1)[0]) + np.arange(s)[None, :].repeat(b, 0)
    elif pos_ids.shape == (b, s):
        pos = pos_ids.astype(np.int64)
    else:
        raise RuntimeShapeError(f"{op}: position_ids must be one element or [batch, sequence] = {shape_str((b, s))}, "
                                f"got {shape_str(pos_ids.shape)}")
    out = _rope_apply(op, x4, _gather_cache(op, cos, pos), _gather_cache(op, sin, pos), rd or h,
                      bool(int(attrs["interleaved"])), x.dtype == np.float32)
    return [result(back(out), x.dtype)]


def _same_shape_rule(op):
    @shape_rule(op, symbolic=True)
    def rule(types, values, attrs, num_outputs):
        x = shape_of(types[0])
        if x is not None and len(x) not in (3, 4):
            raise RuntimeShapeError(f"{op}: input must be 3-D or 4-D, got {pshape_str(x)}")
        return [tensor_type(elem_of(types[0]), x)]
    return rule


def _claim_ms_rope(node, graph, attrs):
    if int(attrs["is_packed_batching"]):
        return "attribute is_packed_batching=1 is not implemented"
    if int(attrs["rotary_embedding_dim"]) > 0 and int(attrs["num_heads"]) <= 0:
        return "rotary_embedding_dim needs num_heads"
    t = input_type(node, graph, 0)
    if t is not None and t.rank is not None and t.rank not in (3, 4):
        return f"input rank {t.rank} is not supported (3-D or 4-D only)"
    return None


register(OpDef(MS_ROPE, (1,), ("T", "M", "T", "T"), ("T",), {"T": FLOATS, "M": I64S}, _ms_rope,
               domain="com.microsoft",
               attributes={"num_heads": 0, "rotary_embedding_dim": 0, "interleaved": 0, "scale": 1.0,
                           "is_packed_batching": 0},
               claim=_claim_ms_rope, shape_rule=_same_shape_rule("RotaryEmbedding")))


# ---- MRotaryEmbedding (com.microsoft) ----------------------------------------------------------
# Each token has three positions (temporal, height, width: position_ids [3, B, S]); the half-rotary
# axis of cos/sin takes its values from the three gathers section by section, in contiguous chunks
# (mrope_layout 0: Qwen2-VL, Qwen2.5-VL) or interleaved (1: Qwen3-VL, Qwen3.5: T everywhere, then H
# at 1, 4, 7, ... below 3 * section_h and W at 2, 5, 8, ... below 3 * section_w); then the rotation
# is RotaryEmbedding's. For text tokens the three positions agree and this is plain RoPE.

MROPE = "MRotaryEmbedding"


def mrope_stream(half: int, section, layout: int) -> np.ndarray:
    """For each index of the half-rotary axis, the position stream (0 T, 1 H, 2 W) it takes."""
    stream = np.zeros(half, np.int64)
    if layout == 0:
        stream[section[0]:section[0] + section[1]] = 1
        stream[section[0] + section[1]:] = 2
    else:
        stream[1:3 * section[1]:3] = 1
        stream[2:3 * section[2]:3] = 2
    return stream


def _mrope_check_attrs(op, section, layout, half):
    if len(section) != 3 or any(v < 0 for v in section):
        raise RuntimeShapeError(f"{op}: mrope_section must be 3 non-negative integers, got {list(section)}")
    if sum(section) != half:
        raise RuntimeShapeError(f"{op}: mrope_section {list(section)} must sum to rotary_embedding_dim / 2 = {half}, "
                                f"got {sum(section)}")
    if layout not in (0, 1):
        raise RuntimeShapeError(f"{op}: mrope_layout must be 0 (chunked) or 1 (interleaved), got {layout}")


@kernel(MROPE)
def _mrope(inputs, attrs):
    x, pos_ids, cos, sin = inputs[:4]
    op = MROPE
    n, rd = int(attrs["num_heads"]), int(attrs["rotary_embedding_dim"])
    section, layout = [int(v) for v in attrs["mrope_section"]], int(attrs["mrope_layout"])
    x4, back, h = _ms_layout(op, x, cos, sin, n, rd)
    b, s = x4.shape[:2]
    if pos_ids.shape != (3, b, s):
        raise RuntimeShapeError(f"{op}: position_ids must be [3, batch, sequence] = {shape_str((3, b, s))}, got "
                                f"{shape_str(pos_ids.shape)}")
    half = cos.shape[1]
    _mrope_check_attrs(op, section, layout, (rd or h) // 2)
    pos = pos_ids.astype(np.int64)
    stream = mrope_stream(half, section, layout)
    cols = np.arange(half)
    # [B, S, R/2]: index j takes column j of the cache row of its stream's position
    rows = np.moveaxis(pos[stream], 0, -1)
    c, sn = _gather_cache(op, cos, rows, cols), _gather_cache(op, sin, rows, cols)
    scale = np.float32(attrs["scale"])
    if scale != 1:  # on cos and sin, as ORT's kernel does (so the rotated lanes only; RotaryEmbedding ignores it)
        c, sn = (c * scale).astype(np.float32), (sn * scale).astype(np.float32)
    out = _rope_apply(op, x4, c, sn, rd or h, bool(int(attrs["interleaved"])), x.dtype == np.float32)
    return [result(back(out), x.dtype)]


def _claim_mrope(node, graph, attrs):
    if int(attrs["is_packed_batching"]):
        return "attribute is_packed_batching=1 is not implemented"
    if int(attrs["rotary_embedding_dim"]) > 0 and int(attrs["num_heads"]) <= 0:
        return "rotary_embedding_dim needs num_heads"
    section = attrs.get("mrope_section")
    if section is None or len(section) != 3 or any(int(v) < 0 for v in section):
        return f"mrope_section must be 3 non-negative integers, got {section if section is None else list(section)}"
    if int(attrs["mrope_layout"]) not in (0, 1):
        return f"mrope_layout {int(attrs['mrope_layout'])} is not 0 (chunked) or 1 (interleaved)"
    t = input_type(node, graph, 0)
    if t is not None and t.rank is not None and t.rank not in (3, 4):
        return f"input rank {t.rank} is not supported (3-D or 4-D only)"
    return None


register(OpDef(MROPE, (1,), ("T", "M", "T", "T"), ("T",), {"T": FLOATS, "M": I64S}, _mrope,
               domain="com.microsoft",
               attributes={"num_heads": 0, "rotary_embedding_dim": 0, "interleaved": 0, "scale": 1.0,
                           "is_packed_batching": 0, "mrope_section": REQUIRED, "mrope_layout": 0},
               claim=_claim_mrope, shape_rule=_same_shape_rule(MROPE)))


@kernel("RotaryEmbedding")
def _onnx_rope(inputs, attrs):
    x, cos, sin = inputs[:3]
    pos_ids = at(inputs, 3)
    op = "RotaryEmbedding"
    n, rd = int(attrs["num_heads"]), int(attrs["rotary_embedding_dim"])
    if x.ndim == 3 and n <= 0:
        raise RuntimeShapeError(f"{op}: a 3-D input needs the num_heads attribute")
    x4, back = _rope_layout(op, x, n if x.ndim == 3 else 0, lambda hidden: hidden // n)
    b, s = x4.shape[:2]
    if sin.shape != cos.shape:
        raise RuntimeShapeError(f"{op}: cos_cache {shape_str(cos.shape)} and sin_cache {shape_str(sin.shape)} differ")
    if pos_ids is None:
        if cos.ndim != 3 or cos.shape[:2] != (b, s):
            raise RuntimeShapeError(f"{op}: without position_ids, cos_cache must be [batch, sequence, rotary_dim / 2] "
                                    f"with batch, sequence = {b}, {s}, got {shape_str(cos.shape)}")
        c, sn = _f32(cos), _f32(sin)
    else:
        if cos.ndim != 2:
            raise RuntimeShapeError(f"{op}: with position_ids, cos_cache must be 2-D [max_position, rotary_dim / 2], "
                                    f"got {shape_str(cos.shape)}")
        if pos_ids.shape != (b, s):
            raise RuntimeShapeError(f"{op}: position_ids must be [batch, sequence] = {shape_str((b, s))}, got "
                                    f"{shape_str(pos_ids.shape)}")
        pos = pos_ids.astype(np.int64)
        c, sn = _gather_cache(op, cos, pos), _gather_cache(op, sin, pos)
    out = _rope_apply(op, x4, c, sn, rd or x4.shape[-1], bool(int(attrs["interleaved"])), x.dtype == np.float32)
    return [result(back(out), x.dtype)]


def _claim_onnx_rope(node, graph, attrs):
    t = input_type(node, graph, 0)
    if t is not None and t.rank is not None:
        if t.rank not in (3, 4):
            return f"input rank {t.rank} is not supported (3-D or 4-D only)"
        if t.rank == 3 and int(attrs["num_heads"]) <= 0:
            return "a 3-D input needs the num_heads attribute"
    return None


register(OpDef("RotaryEmbedding", (23,), ("T", "T", "T", "M"), ("T",), {"T": FLOATS, "M": I64S}, _onnx_rope,
               attributes={"num_heads": 0, "rotary_embedding_dim": 0, "interleaved": 0},
               claim=_claim_onnx_rope, min_inputs=3, shape_rule=_same_shape_rule("RotaryEmbedding")))
