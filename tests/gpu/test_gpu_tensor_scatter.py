"""TensorScatter (kernels/indexing.hip, hipep/runtime/gpu_indexing.py) on the CUDA device, end to end:
single-node models through hipep.InferenceSession(device="cuda"), claimed whole, present_cache compared
exactly with ONNX Runtime's CPU EP over three runs (first run, bound replay, CUDA graph replay): both
modes, sequence axes next to batch, in the middle and last, with and without write_indices, several
element types. Decode steps with present_cache bound to past_cache's own buffer through IOBinding
(the in-place update), also before an Attention-25 that reads the updated caches, with a mask of the
valid rows or with nonpad_kv_seqlen (the standard external-cache decoder step, claimed whole, its caches
in device memory). A write index or a count of valid keys out of range is an error naming the node,
and the session runs on."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper

import hipep

from hipep.runtime.cuda import cuda_status, get_device
from gpu_checks import check_on_cuda
from helpers import cpu_session, external_cache_model, make_model, tensor

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)
device = get_device(0)

n = helper.make_node
I64 = TP.INT64


def _elem(dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _values(rng, shape, dtype):
    if np.dtype(dtype) == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    return (rng.standard_normal(shape) * 20).astype(dtype)


def scatter_model(past, update, with_indices=True, **attrs):
    f = _elem(past.dtype)
    names = ["past", "update"] + (["write_indices"] if with_indices else [])
    inputs = [tensor("past", f, list(past.shape)), tensor("update", f, list(update.shape))]
    if with_indices:
        inputs.append(tensor("write_indices", I64, [past.shape[0]]))
    return make_model([n("TensorScatter", names, ["present"], name="cache_update", **attrs)], inputs,
                      [tensor("present", f, None)], opset=24)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.uint8, np.bool_])
@pytest.mark.parametrize("mode,starts", [("linear", [0, 60, 17]), ("circular", [63, 200, 5])])
def test_kv_cache_rows_land_at_the_write_indices(rng, dtype, mode, starts):
    """[batch 3, heads 8, capacity 64, head 128]: a prefill-sized update of 4 rows."""
    past, update = _values(rng, (3, 8, 64, 128), dtype), _values(rng, (3, 8, 4, 128), dtype)
    feeds = {"past": past, "update": update, "write_indices": np.array(starts, np.int64)}
    check_on_cuda(scatter_model(past, update, mode=mode), feeds, _elem(dtype), exact=True, claimed=True)


@pytest.mark.parametrize("past_shape,update_shape,axis", [
    ((2, 50, 4, 64), (2, 7, 4, 64), 1),
    ((2, 4, 6, 33), (2, 4, 6, 5), -1),  # rows of one element
    ((3, 2, 5, 40, 3), (3, 2, 5, 40, 3), 3),  # an update as long as the cache
])
@pytest.mark.parametrize("with_indices", [True, False])
def test_sequence_axes(rng, past_shape, update_shape, axis, with_indices):
    past, update = _values(rng, past_shape, np.float16), _values(rng, update_shape, np.float16)
    seq, cap = update_shape[axis], past_shape[axis]
    feeds = {"past": past, "update": update}
    if with_indices:
        feeds["write_indices"] = rng.integers(0, cap - seq + 1, past_shape[0]).astype(np.int64)
    for mode in ("linear", "circular"):
        model = scatter_model(past, update, with_indices, mode=mode, axis=axis)
        check_on_cuda(model, feeds, TP.FLOAT16, exact=True, claimed=True)


def _bound_step(sess, cache: dict, feeds: dict, outs: dict):
    """One run with each cache bound as both its past input and its present output (host memory)."""
    io = sess.io_binding()
    for name, value in feeds.items():
        io.bind_cpu_input(name, value)
    for past_name, (present_name, buffer) in cache.items():
        value = ort.OrtValue.ortvalue_from_numpy(buffer)
        io.bind_ortvalue_input(past_name, value)
        io.bind_ortvalue_output(present_name, value)
    for name, buffer in outs.items():
        io.bind_ortvalue_output(name, ort.OrtValue.ortvalue_from_numpy(buffer))
    sess.run_with_iobinding(io)


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_decode_steps_update_the_cache_in_place(rng, mode):
    past = _values(rng, (2, 4, 24, 64), np.float16)
    model = scatter_model(past, past[:, :, :1], mode=mode)
    sessions = {"mine": hipep.InferenceSession(model, device="cuda"), "theirs": cpu_session(model)}
    buffers = {who: past.copy() for who in sessions}
    starts = np.array([3, 20], np.int64)
    for step in range(10 if mode == "circular" else 4):
        update = _values(rng, (2, 4, 1, 64), np.float16)
        for who, sess in sessions.items():
            _bound_step(sess, {"past": ("present", buffers[who])}, {"update": update, "write_indices": starts}, {})
        np.testing.assert_array_equal(buffers["mine"], buffers["theirs"], err_msg=f"step {step}")
        starts = starts + 1


def test_decode_steps_of_cache_updates_then_attention_25(rng):
    """TensorScatter writes a step's keys and values into the caches in place; Attention-25 reads
    the caches with a bool mask of the valid rows (the external-cache layout without
    nonpad_kv_seqlen)."""
    batch, heads, kv_heads, cap, head = 2, 8, 2, 40, 64
    f = TP.FLOAT16
    cache = ["batch", kv_heads, cap, head]
    nodes = [n("TensorScatter", ["past_key", "k", "write_indices"], ["present_key"], name="key_update"),
             n("TensorScatter", ["past_value", "v", "write_indices"], ["present_value"], name="value_update"),
             n("Attention", ["q", "present_key", "present_value", "valid"], ["y"], name="attention")]
    model = make_model(nodes, [tensor("q", f, ["batch", heads, 1, head]), tensor("k", f, ["batch", kv_heads, 1, head]),
                               tensor("v", f, ["batch", kv_heads, 1, head]), tensor("past_key", f, cache),
                               tensor("past_value", f, cache), tensor("write_indices", I64, ["batch"]),
                               tensor("valid", TP.BOOL, ["batch", 1, 1, cap])],
                       [tensor("y", f, ["batch", heads, 1, head]), tensor("present_key", f, cache),
                        tensor("present_value", f, cache)], opset=25)
    sessions = {"mine": hipep.InferenceSession(model, device="cuda"), "theirs": cpu_session(model)}
    first = [_values(rng, (batch, kv_heads, cap, head), np.float16) / 20 for _ in range(2)]
    buffers = {who: [a.copy() for a in first] for who in sessions}
    lens = np.array([17, 9], np.int64)
    for step in range(5):
        q, k, v = (_values(rng, (batch, h, 1, head), np.float16) / 20 for h in (heads, kv_heads, kv_heads))
        valid = (np.arange(cap)[None, :] <= lens[:, None]).reshape(batch, 1, 1, cap)
        ys = {}
        for who, sess in sessions.items():
            ys[who] = np.zeros((batch, heads, 1, head), np.float16)
            _bound_step(sess, {"past_key": ("present_key", buffers[who][0]),
                               "past_value": ("present_value", buffers[who][1])},
                        {"q": q, "k": k, "v": v, "write_indices": lens, "valid": valid}, {"y": ys[who]})
        np.testing.assert_allclose(ys["mine"].astype(np.float32), ys["theirs"].astype(np.float32), rtol=2e-2,
                                   atol=4e-3, err_msg=f"step {step}")
        for a, b in zip(buffers["mine"], buffers["theirs"]):
            np.testing.assert_array_equal(a, b, err_msg=f"step {step}")
        lens = lens + 1


@pytest.mark.parametrize("graphs", [True, False])
@pytest.mark.parametrize("mode,bad,message", [
    ("linear", 22, r"write index 22 is out of range \[0, 21\]: write index \+ sequence_length must not exceed "
                   r"max_sequence_length"),
    ("linear", -1, r"write index -1 is negative"),
    ("circular", -5, r"write index -5 is negative"),
])
def test_a_write_index_out_of_range_names_the_node_and_the_session_runs_on(monkeypatch, rng, graphs, mode, bad,
                                                                          message):
    if not graphs:
        monkeypatch.setattr(device, "use_graphs", False)
    past, update = _values(rng, (2, 4, 24, 64), np.float32), _values(rng, (2, 4, 3, 64), np.float32)
    model = scatter_model(past, update, mode=mode)
    sess = hipep.InferenceSession(model, device="cuda")
    good = {"past": past, "update": update, "write_indices": np.array([0, 21], np.int64)}
    want = cpu_session(model).run(None, good)[0]
    for _ in range(3):  # first run, bound replay, CUDA graph replay
        np.testing.assert_array_equal(sess.run(None, good)[0], want)
    where = (rf"node 'cache_update' \(TensorScatter\): input 2 \(write_indices\) in {mode} mode, sequence_length 3 "
             rf"into max_sequence_length 24: ")
    with pytest.raises(Exception, match=where + message):
        sess.run(None, {**good, "write_indices": np.array([bad, 0], np.int64)})
    np.testing.assert_array_equal(sess.run(None, good)[0], want)  # the record was cleared


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("attention", [dict(is_causal=1), dict(is_causal=1, left_window_size=5)])
def test_external_cache_decoder_steps_with_nonpad_kv_seqlen(rng, dtype, attention):
    """A right-padded prompt (7 and 5 valid of 7 tokens), then decode steps; hipep's caches are
    device OrtValues bound as both past and present (updated in place, never copied), the CPU EP's
    host arrays fed back. y within f16 / f32 rounding of the CPU EP's at every step, the caches
    equal bit for bit."""
    batch, heads, kv_heads, cap, head = 2, 8, 2, 48, 64
    model = external_cache_model(dtype, kv_heads, cap, head, heads, **attention)
    assert not hipep.explain(model, device="cuda").rejections
    mine, theirs = hipep.InferenceSession(model, device="cuda"), cpu_session(model)
    first = [(_values(rng, (batch, kv_heads, cap, head), dtype) / 20).astype(dtype) for _ in range(2)]
    device_caches = [ort.OrtValue.ortvalue_from_numpy(a, "cuda", 0) for a in first]
    host_caches = [a.copy() for a in first]
    lens, seq = np.zeros(batch, np.int64), 7
    tol = dict(rtol=2e-2, atol=4e-3) if dtype == np.float16 else dict(rtol=1e-4, atol=1e-5)
    for step in range(6):
        q, k, v = ((_values(rng, (batch, h, seq, head), dtype) / 20).astype(dtype) for h in (heads, kv_heads, kv_heads))
        valid = np.array([7, 5], np.int64) if step == 0 else np.ones(batch, np.int64)
        feeds = {"q": q, "k": k, "v": v, "write_indices": lens, "nonpad": lens + valid}
        io = mine.io_binding()
        for name, value in feeds.items():
            io.bind_cpu_input(name, value)
        for name, value in zip(("past_key", "past_value"), device_caches):
            io.bind_ortvalue_input(name, value)
        io.bind_output("y", "cuda", 0)  # first: get_outputs() lists the outputs in binding order
        for name, value in zip(("present_key", "present_value"), device_caches):
            io.bind_ortvalue_output(name, value)
        mine.run_with_iobinding(io)
        y = io.get_outputs()[0]
        assert y.device_name() == "cuda" and y.shape() == [batch, heads, seq, head]
        got = y.numpy()
        want, pk, pv = theirs.run(None, {**feeds, "past_key": host_caches[0], "past_value": host_caches[1]})
        host_caches = [pk, pv]
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), err_msg=f"step {step}", **tol)
        for value, want_cache in zip(device_caches, host_caches):
            np.testing.assert_array_equal(value.numpy(), want_cache, err_msg=f"step {step}")
        lens, seq = lens + valid, 1


@pytest.mark.parametrize("graphs", [True, False])
@pytest.mark.parametrize("bad", [25, -2])
def test_a_count_of_valid_keys_out_of_range_names_the_node_and_the_session_runs_on(monkeypatch, rng, graphs, bad):
    if not graphs:
        monkeypatch.setattr(device, "use_graphs", False)
    f = TP.FLOAT
    model = make_model([n("Attention", ["q", "k", "v", "", "", "", "nonpad"], ["y"], name="attention", is_causal=1)],
                       [tensor("q", f, [2, 4, 1, 32]), tensor("k", f, [2, 2, 24, 32]), tensor("v", f, [2, 2, 24, 32]),
                        tensor("nonpad", I64, [2])], [tensor("y", f, None)], opset=24)
    good = {"q": _values(rng, (2, 4, 1, 32), np.float32) / 20, "k": _values(rng, (2, 2, 24, 32), np.float32) / 20,
            "v": _values(rng, (2, 2, 24, 32), np.float32), "nonpad": np.array([24, 3], np.int64)}
    sess = hipep.InferenceSession(model, device="cuda")
    want = cpu_session(model).run(None, good)[0]
    for _ in range(3):  # first run, bound replay, CUDA graph replay
        np.testing.assert_allclose(sess.run(None, good)[0], want, rtol=1e-4, atol=1e-5)
    message = (rf"node 'attention' \(Attention\): input 6 \(nonpad_kv_seqlen\): {bad} valid keys is out of range "
               rf"\[0, 24\]: a batch entry has at most the 24 keys of K and V")
    with pytest.raises(Exception, match=message):
        sess.run(None, {**good, "nonpad": np.array([3, bad], np.int64)})
    np.testing.assert_allclose(sess.run(None, good)[0], want, rtol=1e-4, atol=1e-5)  # the record was cleared
