"""Rotary positions (RotaryEmbedding, MRotaryEmbedding) and GroupQueryAttention lengths out of range:
single-node models, each with a good feed and a bad one, and the errors both of hipep's devices must
raise for the bad one.

The CPU reference device checks the values on the host (hipep/ops/rotary.py, contrib_attention.py);
the CUDA device's kernels clamp them (no access leaves a buffer) and report them in the stream's
fault record (hipep/runtime/gpu_faults.py), which the run turns into an error naming the node, the
input, the value and its range. tests/gpu/test_gpu_bad_input.py runs these on the GPU and
tests/unit/test_gpu_attention_faults.py on the CPU device."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import helper

from helpers import make_model, tensor

F32, F16 = np.float32, np.float16
GQA_INPUTS = ("query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length",
              "cos_cache", "sin_cache", "position_ids")


@dataclass
class BadInputCase:
    name: str
    model: object  # onnx.ModelProto
    good: dict
    bad: dict
    gpu_error: str  # regex: the CUDA device's fault report
    cpu_error: str  # regex: the CPU reference device's check
    dtype: type


def _node_model(op, feeds: dict, n_out: int, **attrs):
    """A one-node com.microsoft model named 'node' whose inputs are `feeds` (None: an omitted input)."""
    names = list(feeds)
    while feeds[names[-1]] is None:
        names.pop()
    node = helper.make_node(op, [n if feeds[n] is not None else "" for n in names],
                            [f"y{i}" for i in range(n_out)], domain="com.microsoft", name="node", **attrs)
    inputs = [tensor(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)) for n, a in feeds.items()
              if a is not None]
    elem = helper.np_dtype_to_tensor_dtype(next(a for a in feeds.values() if a is not None).dtype)
    outputs = [tensor(f"y{i}", elem, None) for i in range(n_out)]
    return make_model([node], inputs, outputs, opset=21, extra_opsets=[("com.microsoft", 1)])


def _present(feeds: dict) -> dict:
    return {n: a for n, a in feeds.items() if a is not None}


def _position_error(node: str, op: str, what: str, position: int, rows: int) -> str:
    return (rf"node '{node}' \({op}\): {what}: position {position} is out of range for cos_cache of {rows} rows: "
            rf"it must be within \[0, {rows - 1}\]")


def rotary_position_case(dtype, offset_form: bool) -> BadInputCase:
    """com.microsoft RotaryEmbedding, [2, 3, 2 * 16] input, a 16-row cos/sin cache: position_ids of
    one element (the first token's position) or [batch, sequence], one position past the cache."""
    rng = np.random.default_rng(21)
    rows = 16
    angles = rng.uniform(0, 6, (rows, 8))
    x = rng.uniform(-1, 1, (2, 3, 32)).astype(dtype)
    cos, sin = np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)
    if offset_form:  # tokens at 13, 14, 15; then 14, 15, 16
        good_ids, bad_ids, bad = np.array([13], np.int64), np.array([14], np.int64), 16
    else:
        good_ids = np.array([[0, 5, 15], [3, 4, 9]], np.int64)
        bad_ids, bad = np.array([[0, 5, 15], [3, 20, 9]], np.int64), 20
    model = _node_model("RotaryEmbedding", {"x": x, "position_ids": good_ids, "cos": cos, "sin": sin}, 1)
    return BadInputCase(
        f"rotary-{'offset' if offset_form else 'ids'}-{np.dtype(dtype).name}", model,
        {"x": x, "position_ids": good_ids, "cos": cos, "sin": sin},
        {"x": x, "position_ids": bad_ids, "cos": cos, "sin": sin},
        _position_error("node", "RotaryEmbedding", r"input 1 \(position_ids\)", bad, rows),
        rf"node 'node' \(RotaryEmbedding\).*position id {bad} is out of range for a cache of {rows} positions",
        dtype)


def mrope_position_case(dtype) -> BadInputCase:
    """com.microsoft MRotaryEmbedding, [2, 3, 2 * 16] input, a 16-row cos/sin cache, chunked sections
    [4, 2, 2]: one width position (stream 2, read by the last two pairs only) past the cache."""
    rng = np.random.default_rng(22)
    rows = 16
    angles = rng.uniform(0, 6, (rows, 8))
    x = rng.uniform(-1, 1, (2, 3, 32)).astype(dtype)
    cos, sin = np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)
    good_ids = rng.integers(0, rows, (3, 2, 3)).astype(np.int64)
    bad_ids = good_ids.copy()
    bad_ids[2, 1, 1] = 20
    model = _node_model("MRotaryEmbedding", {"x": x, "position_ids": good_ids, "cos": cos, "sin": sin}, 1,
                        num_heads=2, mrope_section=[4, 2, 2])
    return BadInputCase(
        f"mrope-ids-{np.dtype(dtype).name}", model,
        {"x": x, "position_ids": good_ids, "cos": cos, "sin": sin},
        {"x": x, "position_ids": bad_ids, "cos": cos, "sin": sin},
        _position_error("node", "MRotaryEmbedding", r"input 1 \(position_ids\)", 20, rows),
        rf"node 'node' \(MRotaryEmbedding\).*position id 20 is out of range for a cache of {rows} positions",
        dtype)


def _gqa_feeds(rng, dtype, seq, capacity, seqlens, total, cos_rows, position_ids=None, batch=None):
    batch = batch or len(seqlens)
    heads, kv_heads, head = 4, 2, 16

    def u(*shape):
        return rng.uniform(-1, 1, shape).astype(dtype)

    angles = rng.uniform(0, 6, (cos_rows, head // 2)) if cos_rows else None
    values = [u(batch, seq, heads * head), u(batch, seq, kv_heads * head), u(batch, seq, kv_heads * head),
              u(batch, kv_heads, capacity, head), u(batch, kv_heads, capacity, head),
              np.array(seqlens, np.int32), np.array(total, np.int32),
              None if angles is None else np.cos(angles).astype(dtype),
              None if angles is None else np.sin(angles).astype(dtype),
              None if position_ids is None else np.array(position_ids, np.int64)]
    return dict(zip(GQA_INPUTS, values))


def _gqa_case(name, dtype, good: dict, bad: dict, gpu_error: str, cpu_error: str) -> BadInputCase:
    rotary = good["cos_cache"] is not None
    model = _node_model("GroupQueryAttention", good, 3, num_heads=4, kv_num_heads=2, do_rotary=int(rotary))
    return BadInputCase(f"gqa-{name}-{np.dtype(dtype).name}", model, _present(good), _present(bad), gpu_error,
                        cpu_error, dtype)


def _with(feeds: dict, **changes) -> dict:
    out = dict(feeds)
    for n, v in changes.items():
        out[n] = np.array(v, out[n].dtype)
    return out


def gqa_cases(dtype) -> list[BadInputCase]:
    """GroupQueryAttention (4 heads, 2 KV heads, head size 16) whose bad feed's seqlens_k or rotary
    position the reference rejects, each the only bad value of its feed (so the kernels' one report
    is that value's, whichever thread reports first)."""
    rng = np.random.default_rng(22)
    node = r"node 'node' \(GroupQueryAttention\)"
    seqlens_in = r"input 5 \(seqlens_k\)"
    cases = []
    # A decode step with position_ids: batch row 1's position is past the 32-row cos/sin cache.
    good = _gqa_feeds(rng, dtype, 1, 6, [6, 4], 7, 32, position_ids=[[6], [4]])
    cases.append(_gqa_case("position-ids", dtype, good, _with(good, position_ids=[[6], [35]]),
                           _position_error("node", "GroupQueryAttention", r"input 9 \(position_ids\)", 35, 32),
                           rf"{node}.*rotary position 35 is out of range for cos_cache of shape \[32, 8\]"))
    # The position seqlens_k gives (the shared KV buffer's decode step, capacity 6): past the 4-row cache.
    good = _gqa_feeds(rng, dtype, 1, 6, [3], 4, 4)
    cases.append(_gqa_case("seqlens-position", dtype, good, _with(good, seqlens_k=[5], total_sequence_length=6),
                           _position_error("node", "GroupQueryAttention",
                                           r"input 5 \(seqlens_k\) as rotary positions", 5, 4),
                           rf"{node}.*rotary position 5 is out of range for cos_cache of shape \[4, 8\]"))
    # seqlens_k past the KV cache (present holds max(total, capacity) = 7 rows), and negative.
    good = _gqa_feeds(rng, dtype, 1, 6, [6, 4], 7, 0)
    cases.append(_gqa_case("seqlens-past-cache", dtype, good, _with(good, seqlens_k=[6, 7]),
                           rf"{node}: {seqlens_in}: seqlens_k 7 is out of range \[0, 7\): seqlens_k \+ 1 = 8 keys "
                           rf"do not fit the KV cache of 7 rows",
                           rf"{node}.*seqlens_k\[1\] = 7 is out of range \[0, 7\)"))
    cases.append(_gqa_case("seqlens-negative", dtype, good, _with(good, seqlens_k=[-1, 4]),
                           rf"{node}: {seqlens_in}: seqlens_k -1 is out of range \[0, 7\): a length is never "
                           rf"negative",
                           rf"{node}.*seqlens_k\[0\] = -1 is out of range \[0, 7\)"))
    # Three new tokens after a 5-row past: seqlens_k + 1 must cover them.
    good = _gqa_feeds(rng, dtype, 3, 5, [7], 8, 0)
    cases.append(_gqa_case("seqlens-short", dtype, good, _with(good, seqlens_k=[1]),
                           rf"{node}: {seqlens_in}: seqlens_k 1 is too small for sequence_length 3: it must be at "
                           rf"least 2",
                           rf"{node}.*seqlens_k\[0\] = 1 is too small for sequence_length 3"))
    return cases
