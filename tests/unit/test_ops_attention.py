"""Attention family (hipep/ops/contrib_attention.py) against ONNX Runtime's CPU EP.

Single-node models: com.microsoft GroupQueryAttention / MultiHeadAttention / RotaryEmbedding /
MRotaryEmbedding and ai.onnx RotaryEmbedding-23 / Attention-23/24. For each case the registry's reference must give
ORT's outputs (dtype, shape, values), the claim predicate must accept the node, and the shape rule
must give exactly the reference's output shapes from the static input shapes plus the values of
the op's host inputs (and never invent an extent when dims or host values are hidden).
(A decoder layer around GroupQueryAttention end to end through hipep: test_ops_attention_layer.py.)
"""
from __future__ import annotations

import zlib

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import hipep
from hipep.errors import RuntimeShapeError
from hipep.graph import GraphView, TensorType, elem_type_of
from hipep.ops import check_node, lookup, resolve_attributes

from helpers import window_end

MS = "com.microsoft"
IR_VERSION = 10
f32, f16, i32, i64 = np.float32, np.float16, np.int32, np.int64
TOL = {np.dtype(f32): (1e-5, 1e-6), np.dtype(f16): (2e-3, 1e-3)}


# ---- harness -------------------------------------------------------------------------------------

def build(op, inputs, attrs, n_out, domain, opset, out_dtypes=None):
    names = [f"x{i}" if a is not None else "" for i, a in enumerate(inputs)]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op, names, [f"y{i}" for i in range(n_out)], domain=domain, **attrs)
    g_in = [helper.make_tensor_value_info(f"x{i}", helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for i, a in enumerate(inputs) if a is not None]
    if out_dtypes is None:
        g_out = [helper.make_empty_tensor_value_info(f"y{i}") for i in range(n_out)]
    else:
        g_out = [helper.make_tensor_value_info(f"y{i}", helper.np_dtype_to_tensor_dtype(np.dtype(d)), None)
                 for i, d in enumerate(out_dtypes)]
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(helper.make_graph([node], "g", g_in, g_out), opset_imports=opsets,
                             ir_version=IR_VERSION)


def ort_run(op, inputs, attrs, n_out, domain, opset):
    model = build(op, inputs, attrs, n_out, domain, opset)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {f"x{i}": a for i, a in enumerate(inputs) if a is not None})


def node_of(op, inputs, attrs, n_out, domain, opset, out_dtypes=None):
    model = build(op, inputs, attrs, n_out, domain, opset, out_dtypes or [inputs[0].dtype] * n_out)
    graph = GraphView.from_onnx(model, infer_shapes=False)
    node = graph.nodes[0]
    return node, graph, lookup(node.domain, node.op_type)


def rule_args(opdef, inputs):
    types = [None if a is None else TensorType(elem_type_of(a.dtype), a.shape) for a in inputs]
    values = [a if (a is not None and i in opdef.host_inputs) else None for i, a in enumerate(inputs)]
    return types, values


def partial_variants(types, values):
    for i, t in enumerate(types):
        if t is None:
            continue
        for j in range(len(t.shape)):
            shape = t.shape[:j] + (None,) + t.shape[j + 1:]
            yield f"input {i} dim {j} dynamic", [TensorType(t.elem_type, shape) if k == i else u
                                                 for k, u in enumerate(types)], values
        yield f"input {i} unranked", [TensorType(t.elem_type, None) if k == i else u for k, u in enumerate(types)], \
            [None if k == i else v for k, v in enumerate(values)]
        if values[i] is not None:
            yield f"input {i} value unknown", types, [None if k == i else v for k, v in enumerate(values)]


def check(op, inputs, attrs=None, n_out=1, domain=MS, opset=21, tol=None):
    """Reference vs ORT's CPU EP; claim; shape rule (static and partial). Returns the outputs."""
    attrs = attrs or {}
    expected = ort_run(op, inputs, attrs, n_out, domain, opset)
    node, graph, opdef = node_of(op, inputs, attrs, n_out, domain, opset, [e.dtype for e in expected])
    assert check_node(node, graph) is None, check_node(node, graph)
    resolved = resolve_attributes(opdef, node)
    before = [None if a is None else a.copy() for a in inputs]
    got = opdef.reference(list(inputs), resolved)
    assert len(got) >= len(expected)
    for k, (e, g) in enumerate(zip(expected, got)):
        assert isinstance(g, np.ndarray) and g.flags.c_contiguous
        assert g.dtype == e.dtype, f"output {k}: dtype {g.dtype} != ORT's {e.dtype}"
        assert g.shape == e.shape, f"output {k}: shape {g.shape} != ORT's {e.shape}"
        assert not any(a is not None and np.shares_memory(g, a) for a in inputs)
        rtol, atol = tol or TOL[e.dtype]
        np.testing.assert_allclose(g.astype(f32), e.astype(f32), rtol=rtol, atol=atol, err_msg=f"{op} output {k}")
    for a, c in zip(inputs, before):
        assert a is None or np.array_equal(a, c), "input modified"
    # shape rule: exact at run time
    types, values = rule_args(opdef, inputs)
    full = opdef.shape_rule(types, values, resolved, n_out)
    assert len(full) == n_out
    for k, (r, g) in enumerate(zip(full, got)):
        assert r.shape == g.shape and all(type(d) is int for d in r.shape), f"output {k}: rule {r} vs {g.shape}"
        assert r.elem_type == elem_type_of(g.dtype)
    # and never inventing an extent on less information
    for label, ptypes, pvalues in partial_variants(types, values):
        for k, (p, r) in enumerate(zip(opdef.shape_rule(ptypes, pvalues, resolved, n_out), full)):
            if p.shape is None:
                continue
            assert len(p.shape) == len(r.shape), f"{label}: output {k} rank"
            assert all(a is None or a == b for a, b in zip(p.shape, r.shape)), f"{label}: output {k} {p} vs {r}"
    return got


# The (op, since-version) pairs this file compares with ORT's CPU EP, in test_ops_reference.py's
# case layout (op first, since-version sixth) for its coverage guard (COVERAGE_MODULES).
CASES = [pytest.param(op, opset, None, None, None, since, None, id=f"{op}-{since}")
         for op, opset, since in (("GroupQueryAttention", 21, 1), ("MultiHeadAttention", 21, 1),
                                  ("RotaryEmbedding", 21, 1), ("MRotaryEmbedding", 21, 1),
                                  ("RotaryEmbedding", 23, 23),
                                  ("Attention", 23, 23), ("Attention", 24, 24), ("Attention", 25, 25))]


def U(rng, *shape, dtype=f32):
    return rng.uniform(-1, 1, shape).astype(dtype)


# ---- GroupQueryAttention -------------------------------------------------------------------------

def gqa_inputs(rng, batch=1, seq=4, total=None, past=None, capacity=None, lens=None, heads=4, kv_heads=2, head=16,
               packed=False, rotary=None, dtype=f32, position_ids=False, attention_bias=False, head_sink=False):
    """past: valid past length (decode: total = past + seq); capacity: past's sequence extent
    (default: past, a growing cache). lens: per-entry valid total length (seqlens_k + 1)."""
    total = total if total is not None else (past or 0) + seq
    capacity = capacity if capacity is not None else (past or 0)
    lens = lens if lens is not None else [total] * batch
    if packed:
        q, k, v = U(rng, batch, seq, (heads + 2 * kv_heads) * head, dtype=dtype), None, None
    else:
        q = U(rng, batch, seq, heads * head, dtype=dtype)
        k, v = U(rng, batch, seq, kv_heads * head, dtype=dtype), U(rng, batch, seq, kv_heads * head, dtype=dtype)
    ins = [q, k, v, U(rng, batch, kv_heads, capacity, head, dtype=dtype),
           U(rng, batch, kv_heads, capacity, head, dtype=dtype),
           np.array([n - 1 for n in lens], i32), np.array(total, i32)]
    if rotary is not None:
        angles = rng.uniform(0, 6, (max(32, total), rotary // 2))  # a row for every position
        ins += [np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)]
    else:
        ins += [None, None]
    ins.append(rng.integers(0, 32, (batch, seq)).astype(i64) if position_ids else None)
    ins.append(U(rng, batch, heads, seq, total, dtype=dtype) if attention_bias else None)
    ins.append(U(rng, heads, dtype=dtype) if head_sink else None)
    while ins[-1] is None:
        ins.pop()
    return ins


def mask_lengths(mask):
    """OGA's preamble: seqlens_k + 1 = sum(mask) per entry, total_sequence_length = mask width."""
    return [int(x) for x in mask.sum(axis=1)], mask.shape[1]


LEFT_PADDED = np.array([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
RIGHT_PADDED = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])

GQA_CASES = {
    # prompts (past length 0)
    "prompt-b1": dict(seq=4),
    "prompt-b1-no-past": dict(seq=4, capacity=None),
    "prompt-b2-left-padded": dict(batch=2, seq=5, lens=mask_lengths(LEFT_PADDED)[0], total=5),
    "prompt-b2-right-padded-rotary": dict(batch=2, seq=5, lens=mask_lengths(RIGHT_PADDED)[0], total=5, rotary=16),
    # decode with a growing cache
    "decode": dict(seq=1, past=6),
    "decode-b2-ragged": dict(batch=2, seq=1, past=7, lens=[8, 5]),
    # shared-buffer layout: past/present capacity 16, valid lengths below it
    "shared-decode": dict(batch=2, seq=1, total=11, capacity=16, lens=[11, 6]),
    "shared-decode-full": dict(batch=2, seq=1, total=16, capacity=16, lens=[16, 9], rotary=16),
    "shared-prompt": dict(batch=2, seq=4, total=4, capacity=16, lens=[4, 2]),
    "growing-past-capacity": dict(batch=2, seq=1, total=17, capacity=16, lens=[17, 12]),
    # rotary
    "rotary": dict(seq=4, rotary=16),
    "rotary-interleaved": dict(seq=4, rotary=16, attrs=dict(rotary_interleaved=1)),
    "rotary-decode-interleaved": dict(batch=2, seq=1, past=9, lens=[10, 6], rotary=16,
                                      attrs=dict(rotary_interleaved=1)),
    "rotary-partial": dict(seq=5, head=32, rotary=16),
    "rotary-partial-interleaved-decode": dict(batch=2, seq=1, past=7, lens=[8, 5], head=32, rotary=16,
                                              attrs=dict(rotary_interleaved=1)),
    "rotary-position-ids-decode": dict(batch=2, seq=1, past=9, lens=[10, 6], rotary=16, position_ids=True),
    "rotary-position-ids-prompt": dict(seq=4, rotary=16, position_ids=True),
    "subsequent-prompt": dict(seq=3, past=5, rotary=16),
    # masking variants
    "local-window": dict(seq=6, attrs=dict(local_window_size=3)),
    "local-window-decode": dict(batch=2, seq=1, past=8, lens=[9, 4], attrs=dict(local_window_size=3)),
    "local-window-padded-prompt": dict(batch=2, seq=6, lens=[3, 6], attrs=dict(local_window_size=2)),
    "local-window-padded-prompt-softcap": dict(batch=2, seq=6, lens=[3, 6],
                                               attrs=dict(local_window_size=2, softcap=3.0)),
    "softcap": dict(seq=4, attrs=dict(softcap=2.0)),
    "softcap-decode": dict(batch=2, seq=1, past=5, lens=[6, 3], attrs=dict(softcap=1.5)),
    "smooth-softmax": dict(seq=4, attrs=dict(smooth_softmax=1)),
    "head-sink-decode": dict(batch=2, seq=1, past=5, lens=[6, 3], head_sink=True),
    "attention-bias": dict(batch=2, seq=1, past=5, lens=[6, 3], attention_bias=True),
    "scale": dict(seq=4, attrs=dict(scale=0.3)),
    # head layouts
    "packed": dict(seq=4, packed=True),
    "packed-rotary-decode": dict(batch=2, seq=1, past=5, lens=[6, 4], packed=True, rotary=16),
    "mqa": dict(seq=3, heads=8, kv_heads=1),
    "mha-like": dict(seq=3, heads=2, kv_heads=2, head=8),
    # f16
    "f16-prompt": dict(seq=4, dtype=f16),
    "f16-padded-prompt-rotary": dict(batch=2, seq=5, lens=[5, 3], rotary=16, dtype=f16),
    "f16-decode-rotary": dict(batch=2, seq=1, past=9, lens=[10, 6], rotary=16, dtype=f16),
    "f16-shared-decode-window-softcap": dict(batch=2, seq=1, total=11, capacity=16, lens=[11, 6], dtype=f16,
                                             attrs=dict(local_window_size=4, softcap=2.0)),
    "f16-packed-interleaved": dict(seq=6, packed=True, rotary=16, dtype=f16, attrs=dict(rotary_interleaved=1)),
}


@pytest.mark.parametrize("name", list(GQA_CASES))
def test_group_query_attention(name):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    spec = dict(GQA_CASES[name])
    attrs = dict(num_heads=spec.get("heads", 4), kv_num_heads=spec.get("kv_heads", 2), **spec.pop("attrs", {}))
    no_past = "capacity" in spec and spec["capacity"] is None
    ins = gqa_inputs(rng, **{k: v for k, v in spec.items() if not (k == "capacity" and v is None)})
    if "rotary" in spec:
        attrs["do_rotary"] = 1
    if no_past:
        ins[3] = ins[4] = None
    got = check("GroupQueryAttention", ins, attrs, n_out=3)
    b, s = ins[0].shape[:2]
    total = int(ins[6])
    capacity = 0 if ins[3] is None else ins[3].shape[2]
    assert got[1].shape == (b, attrs["kv_num_heads"], max(total, capacity), got[1].shape[3])


def test_gqa_present_layout_and_padding_rows():
    # New K/V land at each entry's position; rows past it are zeros; past rows beyond p_b are not copied.
    rng = np.random.default_rng(0)
    ins = gqa_inputs(rng, batch=2, seq=1, total=11, capacity=16, lens=[11, 6])
    opdef = lookup(MS, "GroupQueryAttention")
    out, pk, pv = opdef.reference(ins, {**{k: v for k, v in opdef.attributes.items() if k not in
                                           ("num_heads", "kv_num_heads")}, "num_heads": 4, "kv_num_heads": 2,
                                        "_num_outputs": 3})
    k_new = ins[1].reshape(2, 1, 2, 16).transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(pk[0, :, :10], ins[3][0, :, :10])
    np.testing.assert_array_equal(pk[0, :, 10:11], k_new[0])
    np.testing.assert_array_equal(pk[1, :, 5:6], k_new[1])
    assert not pk[0, :, 11:].any() and not pk[1, :, 6:].any()


def test_gqa_total_sequence_length_must_fit_the_cache():
    rng = np.random.default_rng(1)
    ins = gqa_inputs(rng, seq=1, total=8, capacity=6, lens=[8])
    opdef = lookup(MS, "GroupQueryAttention")
    attrs = {**{k: v for k, v in opdef.attributes.items() if k not in ("num_heads", "kv_num_heads")},
             "num_heads": 4, "kv_num_heads": 2, "_num_outputs": 3}
    with pytest.raises(RuntimeShapeError, match=r"total_sequence_length \(8\)"):
        opdef.reference(ins, attrs)
    types, values = rule_args(opdef, ins)
    with pytest.raises(RuntimeShapeError, match=r"total_sequence_length \(8\)"):
        opdef.shape_rule(types, values, attrs, 3)
    with pytest.raises(RuntimeShapeError, match="seqlens_k"):
        opdef.reference(gqa_inputs(rng, seq=1, past=4, lens=[9]), attrs)
    with pytest.raises(Exception):  # ORT rejects it too
        ort_run("GroupQueryAttention", ins, dict(num_heads=4, kv_num_heads=2), 3, MS, 21)


def test_gqa_shape_rule_partial():
    opdef = lookup(MS, "GroupQueryAttention")
    attrs = {**{k: v for k, v in opdef.attributes.items() if k not in ("num_heads", "kv_num_heads")},
             "num_heads": 8, "kv_num_heads": 2, "_num_outputs": 3}
    F, I = TP.FLOAT, TP.INT32
    q, k = TensorType(F, (None, None, 512)), TensorType(F, (None, None, 128))
    past = TensorType(F, (None, 2, None, 64))
    types = [q, k, k, past, past, TensorType(I, (None,)), TensorType(I, ())]
    out, pk, pv = opdef.shape_rule(types, [None] * 7, attrs, 3)
    assert out.shape == (None, None, 512) and pk.shape == (None, 2, None, 64) == pv.shape
    # the host value of total_sequence_length sizes present once the past capacity is known
    types[3] = types[4] = TensorType(F, (1, 2, 16, 64))
    types[0] = TensorType(F, (1, 1, 512))
    _, pk, _ = opdef.shape_rule(types, [None] * 6 + [np.array(9, i32)], attrs, 3)
    assert pk.shape == (1, 2, 16, 64)
    _, pk, _ = opdef.shape_rule(types, [None] * 6 + [np.array(17, i32)], attrs, 3)
    assert pk.shape == (1, 2, 17, 64)
    # packed QKV: head size from (num_heads + 2 * kv_num_heads)
    packed = [TensorType(F, (1, 3, 768)), None, None, None, None, TensorType(I, (1,)), TensorType(I, (1,))]
    out, pk, _ = opdef.shape_rule(packed, [None] * 6 + [np.array([3], i32)], attrs, 3)
    assert out.shape == (1, 3, 512) and pk.shape == (1, 2, 3, 64)
    assert opdef.host_inputs == (6,)


def _gqa_node(extra_inputs=(), outputs=3, **attrs):
    rng = np.random.default_rng(2)
    ins = gqa_inputs(rng, seq=2) + list(extra_inputs)
    a = dict(num_heads=4, kv_num_heads=2, **attrs)
    node, graph, _ = node_of("GroupQueryAttention", ins, a, outputs, MS, 21)
    return check_node(node, graph)


@pytest.mark.parametrize("attrs,outputs,extra,pattern", [
    (dict(qk_output=1), 4, (), "qk_output=1"),
    ({}, 4, (), "output_qk"),
    (dict(k_quant_type="PER_TENSOR"), 3, (), "quantized KV cache"),
    (dict(kv_cache_bit_width=8), 3, (), "kv_cache_bit_width"),
    (dict(sliding_window_cache=1), 3, (), "needs local_window_size > 0"),
    (dict(sliding_window_cache=1, local_window_size=2), 3, [None] * 3 + [np.zeros((1, 4, 2, 6), f32)],
     "attention_bias together with sliding_window_cache"),
    (dict(causal=0), 3, (), "causal=0"),
    ({}, 3, [None] * 5 + [np.ones(1, f32)], r"input 12 \(k_scale\)"),
    (dict(num_heads=3), 3, (), "multiple of kv_num_heads"),
    (dict(do_rotary=1), 3, (), "cos_cache"),
    ({}, 1, (), "present_key/present_value outputs"),
])
def test_gqa_claim_rejections(attrs, outputs, extra, pattern):
    import re
    if "num_heads" in attrs:
        rng = np.random.default_rng(3)
        ins = gqa_inputs(rng, seq=2)
        node, graph, _ = node_of("GroupQueryAttention", ins, dict(kv_num_heads=2, **attrs), outputs, MS, 21)
        reason = check_node(node, graph)
    else:
        reason = _gqa_node(extra_inputs=extra, outputs=outputs, **attrs)
    assert reason and re.search(pattern, reason), reason


def check_windowed_step(ins, attrs, capacity, window):
    """sliding_window_cache=1: output exact, present compared on the rows ORT writes (it leaves
    the others unwritten); the shape rule gives present = the cache capacity."""
    want = ort_run("GroupQueryAttention", ins, attrs, 3, MS, 21)
    node, graph, opdef = node_of("GroupQueryAttention", ins, attrs, 3, MS, 21)
    assert check_node(node, graph) is None, check_node(node, graph)
    resolved = resolve_attributes(opdef, node)
    got = opdef.reference(list(ins), resolved)
    rtol, atol = TOL[want[0].dtype]
    np.testing.assert_allclose(got[0].astype(f32), want[0].astype(f32), rtol=rtol, atol=atol)
    for b, n in enumerate(ins[5]):
        rows = window_end(int(n) + 1, capacity, window)
        for k in (1, 2):
            np.testing.assert_allclose(got[k][b, :, :rows].astype(f32), want[k][b, :, :rows].astype(f32),
                                       rtol=rtol, atol=atol)
    types, values = rule_args(opdef, ins)
    assert [t.shape for t in opdef.shape_rule(types, values, resolved, 3)] == [g.shape for g in got]
    assert got[1].shape[2] == capacity
    return want


@pytest.mark.parametrize("dtype,window,capacity,prompt,extra", [
    (f32, 4, 6, 3, {}),
    (f32, 4, 6, 9, dict(softcap=50.0)),  # a prompt longer than the cache: staged, tail written back
    (f32, 3, 3, 5, dict(do_rotary=1)),  # capacity == window: every full step compacts
    (f16, 4, 5, 2, dict(do_rotary=1, softcap=5.0)),
    (f32, 2, 6, 4, dict(smooth_softmax=1)),
])
def test_gqa_sliding_window_cache(dtype, window, capacity, prompt, extra):
    """gemma2's sliding-window layers (onnxruntime-genai emits sliding_window_cache=1): a prompt,
    then decode steps feeding present back as past, with absolute lengths running past the
    capacity."""
    rng = np.random.default_rng(15)
    attrs = dict(num_heads=4, kv_num_heads=2, local_window_size=window, sliding_window_cache=1, **extra)
    batch, seq, total = 2, prompt, prompt
    past = U(rng, batch, 2, capacity, 16, dtype=dtype), U(rng, batch, 2, capacity, 16, dtype=dtype)
    for _ in range(8):
        ins = gqa_inputs(rng, batch=batch, seq=seq, total=total, capacity=capacity, lens=[total] * batch,
                         rotary=16 if extra.get("do_rotary") else None, dtype=dtype)
        ins[3], ins[4] = past
        want = check_windowed_step(ins, attrs, capacity, window)
        past = want[1], want[2]
        seq, total = 1, total + 1


def test_gqa_sliding_window_cache_ragged_batch():
    rng = np.random.default_rng(16)
    attrs = dict(num_heads=4, kv_num_heads=2, local_window_size=3, sliding_window_cache=1)
    for lens in ([7, 2], [5, 12], [1, 9]):
        ins = gqa_inputs(rng, batch=2, seq=1, total=max(lens), capacity=4, lens=lens)
        check_windowed_step(ins, attrs, 4, 3)
    ins = gqa_inputs(rng, batch=1, seq=3, total=3, capacity=4, lens=[3])
    ins[3] = ins[3][:, :, :2]
    ins[4] = ins[4][:, :, :2]
    opdef = lookup(MS, "GroupQueryAttention")
    node, graph, _ = node_of("GroupQueryAttention", ins, attrs, 3, MS, 21)
    with pytest.raises(RuntimeShapeError, match="capacity"):
        opdef.reference(ins, resolve_attributes(opdef, node))


# ---- RotaryEmbedding (com.microsoft and ai.onnx-23) ------------------------------------------------

def caches(rng, width, dtype, positions=24):
    angles = rng.uniform(0, 6, (positions, width))
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


@pytest.mark.parametrize("dtype", [f32, f16])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("form", ["3d", "3d-offset", "3d-partial", "4d", "4d-partial"])
def test_ms_rotary_embedding(form, interleaved, dtype):
    rng = np.random.default_rng(7)
    ids = rng.integers(0, 24, (2, 5)).astype(i64)
    attrs = dict(interleaved=interleaved)
    if form == "3d":
        cos, sin = caches(rng, 16, dtype)
        ins = [U(rng, 2, 5, 64, dtype=dtype), ids, cos, sin]
    elif form == "3d-offset":
        cos, sin = caches(rng, 16, dtype)
        ins = [U(rng, 2, 5, 64, dtype=dtype), np.array([3], i64), cos, sin]
    elif form == "3d-partial":
        cos, sin = caches(rng, 8, dtype)
        ins = [U(rng, 2, 5, 64, dtype=dtype), ids, cos, sin]
        attrs.update(num_heads=2, rotary_embedding_dim=16)
    elif form == "4d":
        cos, sin = caches(rng, 16, dtype)
        ins = [U(rng, 2, 3, 5, 32, dtype=dtype), ids, cos, sin]
    else:
        cos, sin = caches(rng, 8, dtype)
        ins = [U(rng, 2, 3, 5, 32, dtype=dtype), ids, cos, sin]
        attrs.update(num_heads=3, rotary_embedding_dim=16)
    # f32 is bit-exact: MLAS's fused rotation (and its interleaved tail)
    check("RotaryEmbedding", ins, attrs, domain=MS, tol=(0, 0) if dtype == f32 else None)


@pytest.mark.parametrize("dtype", [f32, f16])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("form", ["3d", "3d-partial", "4d", "4d-partial", "3d-no-ids", "4d-no-ids-partial"])
def test_onnx_rotary_embedding_23(form, interleaved, dtype):
    rng = np.random.default_rng(8)
    ids = rng.integers(0, 24, (2, 5)).astype(i64)
    attrs = dict(interleaved=interleaved)
    width = 8 if "partial" in form else 16
    if "partial" in form:
        attrs["rotary_embedding_dim"] = 16
    cos, sin = caches(rng, width, dtype)
    x = U(rng, 2, 5, 64, dtype=dtype) if form.startswith("3d") else U(rng, 2, 3, 5, 32, dtype=dtype)
    if form.startswith("3d"):
        attrs["num_heads"] = 2
    ins = [x, cos[ids], sin[ids]] if "no-ids" in form else [x, cos, sin, ids]
    check("RotaryEmbedding", ins, attrs, domain="", opset=23, tol=(0, 0) if dtype == f32 else None)


def test_rotary_claims():
    rng = np.random.default_rng(9)
    cos, sin = caches(rng, 16, f32)
    node, graph, _ = node_of("RotaryEmbedding", [U(rng, 1, 2, 64), np.array([0], i64), cos, sin],
                             dict(is_packed_batching=1), 1, MS, 21)
    assert "is_packed_batching" in check_node(node, graph)
    node, graph, _ = node_of("RotaryEmbedding", [U(rng, 1, 2, 64), cos, sin, np.zeros((1, 2), i64)], {}, 1, "", 23)
    assert "num_heads" in check_node(node, graph)


def ort_has(op: str, domain: str = MS) -> bool:
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    return any(s.name == op and s.domain == domain for s in C.get_all_operator_schema())


def mrope_inputs(rng, batch=2, seq=5, heads=4, head=16, rotary=0, dtype=f32, four_d=False, text=False,
                 positions=32):
    x = U(rng, batch, heads, seq, head, dtype=dtype) if four_d else U(rng, batch, seq, heads * head, dtype=dtype)
    pos = rng.integers(0, positions, (3, batch, seq)).astype(i64)
    if text:  # a text token's three positions agree
        pos[1:] = pos[0]
    cos, sin = caches(rng, (rotary or head) // 2, dtype, positions)
    return [x, pos, cos, sin]


MROPE_CASES = {
    # Qwen2-VL / Qwen2.5-VL: chunked sections
    "chunked": dict(attrs=dict(num_heads=4, mrope_section=[2, 3, 3])),
    "chunked-head64": dict(head=64, attrs=dict(num_heads=4, mrope_section=[16, 8, 8])),
    "chunked-text": dict(text=True, attrs=dict(num_heads=4, mrope_section=[2, 3, 3])),
    "chunked-4d": dict(four_d=True, attrs=dict(mrope_section=[4, 2, 2])),
    "chunked-partial-interleaved": dict(rotary=8, attrs=dict(num_heads=4, rotary_embedding_dim=8,
                                                             mrope_section=[2, 1, 1], interleaved=1)),
    # Qwen3-VL / Qwen3.5: interleaved sections
    "interleaved": dict(attrs=dict(num_heads=4, mrope_section=[2, 3, 3], mrope_layout=1)),
    "interleaved-head64": dict(head=64, attrs=dict(num_heads=4, mrope_section=[12, 10, 10], mrope_layout=1)),
    "interleaved-one-section": dict(attrs=dict(num_heads=4, mrope_section=[8, 0, 0], mrope_layout=1)),
    # scale multiplies the rotated lanes only
    "scale": dict(attrs=dict(num_heads=4, mrope_section=[2, 3, 3], scale=0.5)),
    "scale-partial": dict(rotary=8, attrs=dict(num_heads=4, rotary_embedding_dim=8, mrope_section=[1, 2, 1],
                                               scale=0.3)),
}


@pytest.mark.skipif(not ort_has("MRotaryEmbedding"), reason="this onnxruntime has no MRotaryEmbedding to compare with")
@pytest.mark.parametrize("dtype", [f32, f16])
@pytest.mark.parametrize("name", list(MROPE_CASES))
def test_mrotary_embedding(name, dtype):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    spec = dict(MROPE_CASES[name])
    attrs = spec.pop("attrs")
    ins = mrope_inputs(rng, dtype=dtype, **spec)
    # f32 is bit-exact: the same fused rotation as RotaryEmbedding's, then the scale
    check("MRotaryEmbedding", ins, attrs, domain=MS, tol=(0, 0) if dtype == f32 else None)


def test_mrotary_embedding_errors_and_claims():
    rng = np.random.default_rng(10)
    opdef = lookup(MS, "MRotaryEmbedding")
    ins = mrope_inputs(rng)
    base = {k: v for k, v in opdef.attributes.items() if k != "mrope_section"}

    def run(inputs, **attrs):
        return opdef.reference(inputs, {**base, "num_heads": 4, "mrope_section": [2, 3, 3], **attrs})

    with pytest.raises(RuntimeShapeError, match=r"must sum to rotary_embedding_dim / 2 = 8, got 9"):
        run(ins, mrope_section=[3, 3, 3])
    with pytest.raises(RuntimeShapeError, match=r"position_ids must be \[3, batch, sequence\] = \[3, 2, 5\]"):
        run([ins[0], ins[1][0], ins[2], ins[3]])
    bad = ins[1].copy()
    bad[2, 1, 3] = 40
    with pytest.raises(RuntimeShapeError, match="position id 40 is out of range for a cache of 32 positions"):
        run([ins[0], bad, ins[2], ins[3]])
    node, graph, _ = node_of("MRotaryEmbedding", ins, dict(num_heads=4, mrope_section=[2, 3, 3],
                                                            is_packed_batching=1), 1, MS, 21)
    assert "is_packed_batching" in check_node(node, graph)
    node, graph, _ = node_of("MRotaryEmbedding", ins, dict(num_heads=4, mrope_section=[2, 3, 3], mrope_layout=2),
                             1, MS, 21)
    assert "mrope_layout 2" in check_node(node, graph)
    node, graph, _ = node_of("MRotaryEmbedding", ins, dict(num_heads=4), 1, MS, 21)
    assert "mrope_section" in check_node(node, graph)


# ---- MultiHeadAttention ----------------------------------------------------------------------------

def mha_inputs(rng, batch=2, seq=3, kv_seq=None, past=None, heads=2, head=8, v_head=None, bias=False,
               mask=False, attention_bias=None, dtype=f32):
    kv_seq = seq if kv_seq is None else kv_seq
    v_head = v_head or head
    total = kv_seq + (past or 0)
    ins = [U(rng, batch, seq, heads * head, dtype=dtype), U(rng, batch, kv_seq, heads * head, dtype=dtype),
           U(rng, batch, kv_seq, heads * v_head, dtype=dtype),
           U(rng, 2 * heads * head + heads * v_head, dtype=dtype) if bias else None,
           (rng.random((batch, total)) < 0.7).astype(i32) if mask else None,
           U(rng, *attention_bias, seq, total, dtype=dtype) if attention_bias else None]
    if past is not None:
        ins += [U(rng, batch, heads, past, head, dtype=dtype), U(rng, batch, heads, past, v_head, dtype=dtype)]
    while ins[-1] is None:
        ins.pop()
    return ins


MHA_CASES = {
    "self": dict(),
    "cross": dict(kv_seq=5),
    "v-head": dict(v_head=16),
    "bias": dict(bias=True),
    "key-padding-mask": dict(mask=True),
    "unidirectional": dict(seq=4, attrs=dict(unidirectional=1)),
    "past": dict(past=3),
    "past-decode-causal": dict(seq=1, past=4, attrs=dict(unidirectional=1)),
    "past-bias-mask-causal": dict(seq=2, past=3, bias=True, mask=True, attrs=dict(unidirectional=1)),
    "attention-bias": dict(attention_bias=(2, 2)),
    "attention-bias-broadcast-past": dict(attention_bias=(1, 2), past=2),
    "scale-filter": dict(mask=True, attrs=dict(scale=0.5, mask_filter_value=-50.0)),
    "f16": dict(dtype=f16),
    "f16-bias-past-mask": dict(dtype=f16, bias=True, past=3, mask=True, seq=2, attrs=dict(unidirectional=1)),
}


@pytest.mark.parametrize("name", list(MHA_CASES))
def test_multi_head_attention(name):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    spec = dict(MHA_CASES[name])
    attrs = dict(num_heads=2, **spec.pop("attrs", {}))
    ins = mha_inputs(rng, **spec)
    check("MultiHeadAttention", ins, attrs, n_out=3 if "past" in spec else 1)


def test_mha_claims():
    rng = np.random.default_rng(10)
    ins = mha_inputs(rng)
    packed = [U(rng, 2, 3, 2, 3, 8)]
    node, graph, _ = node_of("MultiHeadAttention", packed, dict(num_heads=2), 1, MS, 21)
    assert "required" in check_node(node, graph) or "rank" in check_node(node, graph)
    node, graph, _ = node_of("MultiHeadAttention", ins + [None] * 5 + [np.array([1], i32)], dict(num_heads=2), 1,
                             MS, 21)
    assert "past_sequence_length" in check_node(node, graph)
    node, graph, _ = node_of("MultiHeadAttention", ins[:3] + [None, np.array([3, 3], i32)], dict(num_heads=2), 1,
                             MS, 21)
    assert "key_padding_mask of rank 1" in check_node(node, graph)


# ---- Attention (ai.onnx 23, 24) --------------------------------------------------------------------

def attention_inputs(rng, batch=2, seq=3, kv_seq=None, past=None, heads=4, kv_heads=2, head=8, v_head=None,
                     rank=4, mask=None, dtype=f32, nonpad=None):
    kv_seq = seq if kv_seq is None else kv_seq
    v_head = v_head or head
    total = kv_seq + (past or 0)
    if rank == 4:
        ins = [U(rng, batch, heads, seq, head, dtype=dtype), U(rng, batch, kv_heads, kv_seq, head, dtype=dtype),
               U(rng, batch, kv_heads, kv_seq, v_head, dtype=dtype)]
    else:
        ins = [U(rng, batch, seq, heads * head, dtype=dtype), U(rng, batch, kv_seq, kv_heads * head, dtype=dtype),
               U(rng, batch, kv_seq, kv_heads * v_head, dtype=dtype)]
    if mask is None:
        ins.append(None)
    else:
        kind, shape = mask
        shape = [total if d == "T" else seq if d == "S" else d for d in shape]
        m = rng.random(shape) < 0.7
        if kind == "bool-dead-row":
            m[..., 0, :] = False
        ins.append(m if kind.startswith("bool") else U(rng, *shape, dtype=dtype))
    if past is not None:
        ins += [U(rng, batch, kv_heads, past, head, dtype=dtype), U(rng, batch, kv_heads, past, v_head, dtype=dtype)]
    else:
        ins += [None, None]
    if nonpad is not None:
        ins.append(np.array(nonpad, i64))
    while ins[-1] is None:
        ins.pop()
    return ins


ATTENTION_CASES = {
    "4d": dict(),
    "3d": dict(rank=3),
    "cross-v-head": dict(kv_seq=5, v_head=16),
    "3d-cross-v-head": dict(rank=3, kv_seq=5, v_head=16),
    "causal": dict(seq=4, kv_seq=6, attrs=dict(is_causal=1)),
    "past": dict(past=3),
    "past-decode-causal": dict(seq=1, past=3, attrs=dict(is_causal=1)),
    "3d-past-causal": dict(rank=3, seq=2, past=2, attrs=dict(is_causal=1)),
    "bool-mask": dict(mask=("bool", ["S", "T"])),
    "float-mask-4d": dict(mask=("float", [2, 1, "S", "T"])),
    "bool-mask-heads": dict(mask=("bool", [4, "S", "T"])),
    "dead-row": dict(mask=("bool-dead-row", ["S", "T"])),
    "mask-causal-past": dict(mask=("bool", ["S", "T"]), past=2, attrs=dict(is_causal=1)),
    "softcap-mask-causal": dict(mask=("bool", ["S", "T"]), attrs=dict(softcap=1.5, is_causal=1)),
    "scale": dict(attrs=dict(scale=0.3)),
    "mqa": dict(heads=6, kv_heads=1),
    "qk-raw": dict(mask=("float", ["S", "T"]), n_out=4, attrs=dict(qk_matmul_output_mode=0, softcap=1.0)),
    "qk-softcap": dict(mask=("float", ["S", "T"]), n_out=4, attrs=dict(qk_matmul_output_mode=1, softcap=1.0)),
    "qk-masked": dict(n_out=4, attrs=dict(qk_matmul_output_mode=2)),  # causal + masked scores: not claimed (ORT and ONNX differ)
    "qk-probs": dict(mask=("bool", ["S", "T"]), n_out=4, attrs=dict(qk_matmul_output_mode=3)),
    "f16": dict(dtype=f16),
    "f16-float-mask-causal": dict(dtype=f16, mask=("float", [2, 4, "S", "T"]), attrs=dict(is_causal=1)),
    "f16-3d-past-softcap": dict(dtype=f16, rank=3, past=2, attrs=dict(softcap=2.0)),
    "f16-qk-probs": dict(dtype=f16, n_out=4, mask=("bool", ["S", "T"]), attrs=dict(qk_matmul_output_mode=3)),
    "24-nonpad": dict(opset=24, nonpad=[2, 3]),
    "24-nonpad-causal": dict(opset=24, seq=2, kv_seq=4, nonpad=[3, 4], attrs=dict(is_causal=1)),
    "24-nonpad-empty": dict(opset=24, nonpad=[0, 3]),
    # Attention-25: windows aligned as the causal frontier, -inf as the sentinel, masks broadcast
    # right-aligned from rank 1 and shorter in keys (the rest masked out)
    "25-causal-window": dict(opset=25, seq=4, kv_seq=6, attrs=dict(is_causal=1, left_window_size=2)),
    "25-bidirectional-window": dict(opset=25, seq=5, attrs=dict(left_window_size=1, right_window_size=2)),
    "25-window-past-3d": dict(opset=25, rank=3, seq=2, past=5, attrs=dict(is_causal=1, left_window_size=3)),
    "25-window-no-key": dict(opset=25, seq=6, kv_seq=2, attrs=dict(left_window_size=0, right_window_size=0)),
    "25-window-nonpad": dict(opset=25, seq=3, kv_seq=7, nonpad=[2, 6], attrs=dict(is_causal=1, left_window_size=1)),
    "25-f16-window-mask": dict(opset=25, dtype=f16, mask=("float", ["S", "T"]),
                               attrs=dict(is_causal=1, left_window_size=1)),
    "25-rank1-mask": dict(opset=25, mask=("bool", ["T"]), attrs=dict(right_window_size=0)),
    "25-short-mask": dict(opset=25, kv_seq=6, mask=("float", [2, 1, 1, 4]), attrs=dict(left_window_size=3)),
    "25-qk-masked-causal": dict(opset=25, n_out=4, mask=("float", ["S", "T"]),
                                attrs=dict(qk_matmul_output_mode=2, is_causal=1, left_window_size=1)),
    "25-qk-probs-dead-row": dict(opset=25, n_out=4, mask=("bool-dead-row", ["S", "T"]),
                                 attrs=dict(qk_matmul_output_mode=3, left_window_size=1)),
}


@pytest.mark.parametrize("name", list(ATTENTION_CASES))
def test_attention(name):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    spec = dict(ATTENTION_CASES[name])
    attrs = spec.pop("attrs", {})
    opset = spec.pop("opset", 23)
    n_out = spec.pop("n_out", 3 if "past" in spec else 1)
    if spec.get("rank") == 3:
        attrs = dict(attrs, q_num_heads=spec.get("heads", 4), kv_num_heads=spec.get("kv_heads", 2))
    ins = attention_inputs(rng, **spec)
    check("Attention", ins, attrs, n_out=n_out, domain="", opset=opset)


def test_attention_claims():
    rng = np.random.default_rng(11)
    ins = attention_inputs(rng, rank=3)
    node, graph, _ = node_of("Attention", ins, {}, 1, "", 23)
    assert "q_num_heads" in check_node(node, graph)
    ins = attention_inputs(rng, mask=("float", ["S", "T"])) + [U(rng, 2, 2, 1, 8)]
    node, graph, _ = node_of("Attention", ins, {}, 3, "", 23)
    assert "past_key and past_value" in check_node(node, graph)
    ins = attention_inputs(rng)
    node, graph, _ = node_of("Attention", ins, {"qk_matmul_output_mode": 2, "is_causal": 1}, 4, "", 23)
    assert "lowest float vs -inf" in check_node(node, graph)


# ---- GroupQueryAttention's fused per-head Q/K RMS norm (Qwen3) --------------------------------------
# ORT's CPU EP has no kernel for GroupQueryAttention with q_norm_weight / k_norm_weight; the fused
# inputs stand for Reshape -> SimplifiedLayerNormalization -> Reshape on Q and K (the pattern the
# fusion folds), so the oracle is the CPU EP on that unfused graph.

def _gqa_qk_norm_models(ins, attrs, h, eps, packed):
    """(the fused one-node model, the unfused model the CPU EP runs) over the same graph inputs."""
    q = ins[0]
    n, nkv = attrs["num_heads"], attrs["kv_num_heads"]
    b, s = q.shape[:2]
    dt = helper.np_dtype_to_tensor_dtype(q.dtype)
    names = ["q", "" if packed else "k", "" if packed else "v", "pk", "pv", "sk", "tot"]
    rest = ins[7:]
    names += [f"x{7 + i}" if a is not None else "" for i, a in enumerate(rest)]
    feeds = {nm: a for nm, a in zip(names, ins) if nm}
    inputs = [helper.make_tensor_value_info(nm, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
              for nm, a in feeds.items()]
    qw, kw = U(np.random.default_rng(5), h, dtype=q.dtype) + 1, U(np.random.default_rng(6), h, dtype=q.dtype) + 1
    inits = [numpy_helper.from_array(qw, "qw"), numpy_helper.from_array(kw, "kw")]
    outs = [helper.make_tensor_value_info(o, dt, None) for o in ("out", "present_k", "present_v")]
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)]
    # inputs 14 and 15 are q_norm_weight and k_norm_weight
    fused = helper.make_node("GroupQueryAttention", (names + [""] * 14)[:14] + ["qw", "kw"],
                             ["out", "present_k", "present_v"], domain=MS, qk_norm_epsilon=eps, **attrs)
    fused_model = helper.make_model(helper.make_graph([fused], "g", inputs, outs, inits), opset_imports=opsets,
                                    ir_version=IR_VERSION)
    # the unfused graph: per-head SimplifiedLayerNormalization of Q and K, then GroupQueryAttention
    nodes, shape_inits = [], [numpy_helper.from_array(np.array([b, s, -1, h], i64), "heads"),
                              numpy_helper.from_array(np.array([b, s, -1], i64), "flat")]
    if packed:
        nodes.append(helper.make_node("Split", ["q", "split"], ["q0", "k0", "v0"], axis=2))
        shape_inits.append(numpy_helper.from_array(np.array([n * h, nkv * h, nkv * h], i64), "split"))
        srcs = {"q": "q0", "k": "k0"}
    else:
        srcs = {"q": "q", "k": "k"}
    for which, w in (("q", "qw"), ("k", "kw")):
        nodes += [helper.make_node("Reshape", [srcs[which], "heads"], [f"{which}_heads"]),
                  helper.make_node("SimplifiedLayerNormalization", [f"{which}_heads", w], [f"{which}_normed"],
                                   axis=-1, epsilon=eps),
                  helper.make_node("Reshape", [f"{which}_normed", "flat"], [f"{which}_n"])]
    gqa_in = list(names)
    if packed:
        nodes.append(helper.make_node("Concat", ["q_n", "k_n", "v0"], ["qkv_n"], axis=2))
        gqa_in[0] = "qkv_n"
    else:
        gqa_in[0], gqa_in[1] = "q_n", "k_n"
    nodes.append(helper.make_node("GroupQueryAttention", gqa_in, ["out", "present_k", "present_v"], domain=MS,
                                  **attrs))
    unfused = helper.make_model(helper.make_graph(nodes, "g", inputs, outs, inits + shape_inits),
                                opset_imports=opsets, ir_version=IR_VERSION)
    return fused_model, unfused, feeds


def ort_gqa_inputs() -> int:
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    return max((len(s.inputs) for s in C.get_all_operator_schema() if s.name == "GroupQueryAttention"), default=0)


@pytest.mark.skipif(ort_gqa_inputs() < 16, reason="this onnxruntime's GroupQueryAttention has no q_norm_weight input")
@pytest.mark.parametrize("name", ["prompt", "decode", "decode-b2-ragged", "packed-rotary-decode", "f16-decode-rotary",
                                  "shared-decode", "rotary"])
def test_gqa_qk_norm_follows_the_unfused_graph(name):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    spec = dict(GQA_CASES.get(name, dict(seq=4)))
    attrs = dict(num_heads=spec.get("heads", 4), kv_num_heads=spec.get("kv_heads", 2), **spec.pop("attrs", {}))
    if "rotary" in spec:
        attrs["do_rotary"] = 1
    ins = gqa_inputs(rng, **spec)
    h = spec.get("head", 16)
    fused, unfused, feeds = _gqa_qk_norm_models(ins, attrs, h, 1e-6, bool(spec.get("packed")))
    want = ort.InferenceSession(unfused.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = hipep.InferenceSession(fused, device="cpu", strict="1").run(None, feeds)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if w.dtype == f32:  # the same per-head norm (bit-exact), then the same attention
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
        else:
            np.testing.assert_allclose(g.astype(f32), w.astype(f32), rtol=2e-3, atol=1e-3)


def test_gqa_qk_norm_claims_and_errors():
    rng = np.random.default_rng(3)
    ins = gqa_inputs(rng, seq=1, past=4)
    opdef = lookup(MS, "GroupQueryAttention")
    attrs = {**{k: v for k, v in opdef.attributes.items() if k not in ("num_heads", "kv_num_heads")},
             "num_heads": 4, "kv_num_heads": 2, "_num_outputs": 3}
    full = ins + [None] * (14 - len(ins))
    with pytest.raises(RuntimeShapeError, match=r"q_norm_weight must be \[head_size\] = \[16\], got \[8\]"):
        opdef.reference(full + [np.ones(8, f32), np.ones(16, f32)], attrs)
    fused, _, _ = _gqa_qk_norm_models(ins, dict(num_heads=4, kv_num_heads=2), 16, 1e-6, False)
    graph = GraphView.from_onnx(fused)
    assert check_node(graph.nodes[0], graph) is None
    fused.graph.node[0].input[15] = ""
    graph = GraphView.from_onnx(fused)
    assert "both be present" in check_node(graph.nodes[0], graph)
