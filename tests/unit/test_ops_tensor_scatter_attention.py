"""TensorScatter and Attention-25 (the KV-cache update and the windowed attention of standard ONNX LLM
exports) through real onnxruntime sessions on hipep's CPU device, against ONNX Runtime's CPU EP on
the same models and feeds: single nodes, and decoder steps whose caches TensorScatter updates
(prompt, then decode steps; also with present bound to past's own buffer, ORT's in-place pair).
Also what the claims refuse and why, and the errors bad feeds raise (the single-node comparisons of
the references: test_ops_attention.py and test_ops_vision_indexing.py)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper

import hipep
from hipep.ops import check_node

from helpers import assignment, cpu_session, external_cache_model, make_model, tensor
from unit.test_ops_attention import U, attention_inputs, node_of

f32, f16, i64 = np.float32, np.float16, np.int64
TOL = {np.dtype(f32): dict(rtol=1e-5, atol=1e-6), np.dtype(f16): dict(rtol=2e-3, atol=1e-3)}
ATTN_INPUTS = ("Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen")


def _elem(dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def single_node(op: str, names, feeds: dict, n_out: int, opset: int, **attrs):
    """A one-node model named 'node' over the inputs `names` (None: omitted), outputs y0..y{n-1}."""
    names = list(names)
    while names and names[-1] is None:
        names.pop()
    node = helper.make_node(op, [x or "" for x in names], [f"y{i}" for i in range(n_out)], name="node", **attrs)
    inputs = [tensor(x, _elem(feeds[x].dtype), list(feeds[x].shape)) for x in names if x]
    outputs = [tensor(f"y{i}", _elem(feeds[names[0]].dtype), None) for i in range(n_out)]
    return make_model([node], inputs, outputs, opset=opset)


def hipep_session(model):
    """A session on hipep's CPU device (CPU fallback off) that must have been given every node."""
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    sess = hipep.InferenceSession(model, so, device="cpu")
    assert set(assignment(sess)) == {hipep.provider_for("cpu")}
    return sess


def assert_hipep_matches_cpu_ep(model, feeds: dict, runs: int = 2):
    """hipep's CPU device runs every node and gives the CPU EP's outputs (dtype, shape, values)."""
    sess = hipep_session(model)
    want = cpu_session(model).run(None, feeds)
    for _ in range(runs):
        got = sess.run(None, feeds)
        assert len(got) == len(want)
        for k, (g, w) in enumerate(zip(got, want)):
            assert g.dtype == w.dtype and g.shape == w.shape, k
            if g.dtype.kind == "f":
                np.testing.assert_allclose(g.astype(f32), w.astype(f32), err_msg=f"output {k}", **TOL[g.dtype])
            else:
                np.testing.assert_array_equal(g, w, err_msg=f"output {k}")
    return sess


# ---- Attention-25 ---------------------------------------------------------------------------------

ATTENTION_25 = {
    "causal-window": dict(spec=dict(seq=6, kv_seq=9), attrs=dict(is_causal=1, left_window_size=2)),
    "bidirectional-window-3d": dict(spec=dict(rank=3, seq=5, heads=4, kv_heads=1),
                                    attrs=dict(q_num_heads=4, kv_num_heads=1, left_window_size=1,
                                               right_window_size=2)),
    "window-past-present": dict(spec=dict(seq=2, past=7), n_out=3, attrs=dict(is_causal=1, left_window_size=3)),
    "window-ext-cache-mask": dict(spec=dict(seq=3, kv_seq=8, nonpad=[5, 8], mask=("float", [1, 6])),
                                  attrs=dict(is_causal=1, left_window_size=2)),
    "f16-window-rank1-mask": dict(spec=dict(dtype=f16, mask=("bool", ["T"])), attrs=dict(right_window_size=0)),
    "window-probs": dict(spec=dict(mask=("bool-dead-row", ["S", "T"])), n_out=4,
                         attrs=dict(is_causal=1, left_window_size=1, qk_matmul_output_mode=3)),
}


@pytest.mark.parametrize("name", list(ATTENTION_25))
def test_attention_25_session_matches_cpu_ep(name):
    case = ATTENTION_25[name]
    rng = np.random.default_rng(len(name))
    ins = attention_inputs(rng, **case["spec"])
    feeds = {n: a for n, a in zip(ATTN_INPUTS, ins) if a is not None}
    names = [n if n in feeds else None for n in ATTN_INPUTS]
    model = single_node("Attention", names, feeds, case.get("n_out", 1), 25, **case["attrs"])
    assert_hipep_matches_cpu_ep(model, feeds)


# ---- TensorScatter ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [f32, f16, np.int64, np.bool_])
@pytest.mark.parametrize("mode,starts", [("linear", [0, 6, 3]), ("circular", [6, 15, 0])])
def test_tensor_scatter_session_matches_cpu_ep(dtype, mode, starts):
    rng = np.random.default_rng(3)
    past = (rng.standard_normal((3, 2, 8, 4)) * 9).astype(dtype)
    update = (rng.standard_normal((3, 2, 2, 4)) * 9).astype(dtype)
    feeds = {"past": past, "update": update, "write_indices": np.array(starts, i64)}
    model = single_node("TensorScatter", list(feeds), feeds, 1, 24, mode=mode)
    assert_hipep_matches_cpu_ep(model, feeds)
    del feeds["write_indices"]
    assert_hipep_matches_cpu_ep(single_node("TensorScatter", list(feeds), feeds, 1, 24, mode=mode, axis=2), feeds)


@pytest.mark.parametrize("dtype", [f32, f16])
@pytest.mark.parametrize("attention", [dict(is_causal=1), dict(is_causal=1, left_window_size=3)])
def test_decoder_steps_on_an_external_cache(dtype, attention):
    """A prompt of 5 and 4 tokens (batch 2, right-padded), then decode steps, each side feeding its
    own present caches back as past."""
    rng = np.random.default_rng(7)
    batch, heads, kv_heads, cap, head = 2, 4, 2, 12, 8
    model = external_cache_model(dtype, kv_heads, cap, head, heads, **attention)
    mine = hipep_session(model)
    theirs = cpu_session(model)
    caches = {who: [np.zeros((batch, kv_heads, cap, head), dtype) for _ in range(2)] for who in ("mine", "theirs")}
    lens, seq = np.zeros(batch, i64), 5
    for step in range(5):
        new = [U(rng, batch, h, seq, head, dtype=dtype) for h in (heads, kv_heads, kv_heads)]
        valid = np.array([seq, seq - 1]) if step == 0 else np.ones(batch, i64)
        for who, sess in (("mine", mine), ("theirs", theirs)):
            feeds = dict(zip(("q", "k", "v"), new), past_key=caches[who][0], past_value=caches[who][1],
                         write_indices=lens, nonpad=lens + valid)
            y, pk, pv = sess.run(None, feeds)
            caches[who] = [pk, pv]
            if who == "mine":
                got = y
        np.testing.assert_allclose(got.astype(f32), y.astype(f32), err_msg=f"step {step}", **TOL[np.dtype(dtype)])
        for a, b in zip(caches["mine"], caches["theirs"]):
            np.testing.assert_array_equal(a, b, err_msg=f"step {step}")
        lens, seq = lens + valid, 1


def test_present_bound_to_past_buffer_is_updated_in_place():
    """ORT's in-place pair: present_cache bound to past_cache's OrtValue through IOBinding, decode steps
    in linear and circular mode; the buffer holds what the CPU EP's does after every step."""
    rng = np.random.default_rng(9)
    for mode in ("linear", "circular"):
        feeds = {"past": np.zeros((2, 3, 6, 4), f32), "update": U(rng, 2, 3, 1, 4), "write_indices": np.zeros(2, i64)}
        model = single_node("TensorScatter", list(feeds), feeds, 1, 24, mode=mode)
        sessions = {"mine": hipep_session(model), "theirs": cpu_session(model)}
        buffers = {who: U(rng, 2, 3, 6, 4) for who in sessions}
        buffers["theirs"][...] = buffers["mine"]
        starts = np.array([0, 2], i64)
        for step in range(8 if mode == "circular" else 4):
            update = U(rng, 2, 3, 1, 4)
            for who, sess in sessions.items():
                io = sess.io_binding()
                cache = ort.OrtValue.ortvalue_from_numpy(buffers[who])
                io.bind_ortvalue_input("past", cache)
                io.bind_cpu_input("update", update)
                io.bind_cpu_input("write_indices", starts)
                io.bind_ortvalue_output("y0", cache)
                sess.run_with_iobinding(io)
            np.testing.assert_array_equal(buffers["mine"], buffers["theirs"], err_msg=f"{mode} step {step}")
            assert (buffers["mine"][np.arange(2), :, starts % 6] == update[:, :, 0]).all()
            starts = starts + 1


# ---- claims and errors ------------------------------------------------------------------------------

def _claim(op, ins, attrs, n_out=1, opset=25):
    node, graph, _ = node_of(op, ins, attrs, n_out, "", opset)
    return check_node(node, graph)


def test_tensor_scatter_claims():
    rng = np.random.default_rng(11)
    past, update, starts = U(rng, 2, 3, 6, 4), U(rng, 2, 3, 2, 4), np.array([0, 1], i64)
    assert _claim("TensorScatter", [past, update, starts], {}, opset=24) is None
    assert _claim("TensorScatter", [past, update], {"mode": "circular", "axis": -3}, opset=24) is None
    assert "mode='ring' is not one of linear, circular" in _claim("TensorScatter", [past, update], {"mode": "ring"},
                                                                  opset=24)
    assert "axis=0 is the batch axis" in _claim("TensorScatter", [past, update], {"axis": 0}, opset=24)
    assert "axis=-4 is the batch axis" in _claim("TensorScatter", [past, update], {"axis": -4}, opset=24)
    assert "axis=4 is out of range for rank-4" in _claim("TensorScatter", [past, update], {"axis": 4}, opset=24)
    assert "past_cache of rank 1" in _claim("TensorScatter", [past[0, 0, :, 0], update[0, 0, :, 0]], {}, opset=24)
    why = _claim("TensorScatter", [past, update, starts.astype(np.int32)], {}, opset=24)
    assert "input 2 'x2' has element type i32; supported: i64" in why


def test_attention_25_claims():
    rng = np.random.default_rng(12)
    ins = attention_inputs(rng)
    assert _claim("Attention", ins, {"left_window_size": 0, "right_window_size": 4}) is None
    assert "left_window_size=-2 must be -1 (unbounded) or non-negative" in _claim("Attention", ins,
                                                                                   {"left_window_size": -2})
    assert "right_window_size" in _claim("Attention", ins, {"right_window_size": -5})
    assert "'left_window_size' is not supported by Attention-24" in _claim("Attention", ins, {"left_window_size": 1},
                                                                            opset=24)
    rank1 = attention_inputs(rng, mask=("bool", ["T"]))
    assert _claim("Attention", rank1, {}) is None
    assert "attn_mask of rank 1 is not supported (2-D to 4-D)" in _claim("Attention", rank1, {}, opset=24)
    # Attention-25 writes -inf at masked positions as the spec does: its masked scores are claimed
    assert _claim("Attention", ins, {"is_causal": 1, "qk_matmul_output_mode": 2}, n_out=4) is None
    assert "lowest float vs -inf" in _claim("Attention", ins, {"is_causal": 1, "qk_matmul_output_mode": 2}, n_out=4,
                                            opset=24)


def test_cuda_claims_windows_and_the_external_cache():
    """The cuda device's kernel runs Attention-25's windows (with a past too) and nonpad_kv_seqlen,
    so a decoder step on an external cache (TensorScatter, then Attention) is claimed whole."""
    rng = np.random.default_rng(13)
    ins = attention_inputs(rng, seq=2, past=5, head=16)
    feeds = {n: a for n, a in zip(ATTN_INPUTS, ins) if a is not None}
    names = [n if n in feeds else None for n in ATTN_INPUTS]
    model = single_node("Attention", names, feeds, 3, 25, is_causal=1, left_window_size=2, right_window_size=0)
    assert not hipep.explain(model, device="cuda").rejections
    for attention in (dict(is_causal=1), dict(is_causal=1, left_window_size=3)):
        report = hipep.explain(external_cache_model(f16, 2, 12, 16, 4, **attention), device="cuda")
        assert not report.rejections, [(r.node.name, r.reason) for r in report.rejections]


@pytest.mark.parametrize("mode,starts,message", [
    ("linear", [4, 0], r"write_indices\[0\] = 4 is out of range \[0, 3\] in linear mode: write_indices\[0\] \+ "
                       r"sequence_length \(4 \+ 3\) exceeds max_sequence_length 6"),
    ("linear", [0, -2], r"write_indices\[1\] = -2 is negative"),
    ("circular", [-1, 0], r"write_indices\[0\] = -1 is negative"),
])
def test_tensor_scatter_write_index_out_of_range_raises_and_the_session_runs_on(mode, starts, message):
    rng = np.random.default_rng(14)
    feeds = {"past": U(rng, 2, 3, 6, 4), "update": U(rng, 2, 3, 3, 4), "write_indices": np.zeros(2, i64)}
    model = single_node("TensorScatter", list(feeds), feeds, 1, 24, mode=mode)
    sess = assert_hipep_matches_cpu_ep(model, feeds, runs=1)
    with pytest.raises(Exception, match=r"node 'node' \(TensorScatter\).*" + message):
        sess.run(None, {**feeds, "write_indices": np.array(starts, i64)})
    np.testing.assert_array_equal(sess.run(None, feeds)[0], cpu_session(model).run(None, feeds)[0])


@pytest.mark.parametrize("update_shape,indices_shape,message", [
    ((2, 3, 7, 4), (2,), r"update's sequence_length 7 exceeds past_cache's max_sequence_length 6"),
    ((2, 2, 1, 4), (2,), r"update \[2, 2, 1, 4\] must match past_cache \[2, 3, 6, 4\] on every axis but the "
                         r"sequence axis 2 \(axis 1: 2 != 3\)"),
    ((2, 3, 1, 4), (3,), r"write_indices must be \[batch\] = \[2\], got \[3\]"),
])
def test_tensor_scatter_shapes_that_do_not_fit_raise(update_shape, indices_shape, message):
    """Symbolic dims: the shapes meet only at run time, where hipep's shape check names the node."""
    f = TP.FLOAT
    node = helper.make_node("TensorScatter", ["past", "update", "write_indices"], ["y"], name="node")
    model = make_model([node], [tensor("past", f, ["b", 3, "m", 4]), tensor("update", f, ["b2", "h", "s", 4]),
                                tensor("write_indices", TP.INT64, ["n"])], [tensor("y", f, None)], opset=24)
    sess = hipep_session(model)
    rng = np.random.default_rng(15)
    with pytest.raises(Exception, match=message):
        sess.run(None, {"past": U(rng, 2, 3, 6, 4), "update": U(rng, *update_shape),
                        "write_indices": np.zeros(indices_shape, i64)})


def test_attention_25_mask_with_more_keys_than_the_cache_raises():
    rng = np.random.default_rng(16)
    q, k, v = attention_inputs(rng, seq=3, kv_seq=5)[:3]
    f = TP.FLOAT
    node = helper.make_node("Attention", ["Q", "K", "V", "attn_mask"], ["y"], name="node", left_window_size=1)
    model = make_model([node], [tensor("Q", f, list(q.shape)), tensor("K", f, list(k.shape)),
                                tensor("V", f, list(v.shape)), tensor("attn_mask", TP.BOOL, ["s", "keys"])],
                       [tensor("y", f, None)], opset=25)
    feeds = {"Q": q, "K": k, "V": v, "attn_mask": rng.random((3, 5)) < 0.8}
    sess = assert_hipep_matches_cpu_ep(model, feeds, runs=1)
    with pytest.raises(Exception, match=r"node 'node' \(Attention\).*attn_mask \[3, 6\] has more keys than "
                                        r"total_sequence 5"):
        sess.run(None, {**feeds, "attn_mask": np.ones((3, 6), bool)})
