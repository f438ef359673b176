"""Bad input at run time on the CUDA device: a clear error naming what is wrong, and the session
stays usable (the next good run gives ONNX Runtime's CPU EP answer).

  * a wrong element type is rejected by ORT before hipep runs;
  * a shape mismatch found at run time (symbolic dims) is a RuntimeShapeError from hipep's shape
    program, naming the node, before anything is launched;
  * a Gather index out of range is seen only by the kernel: it writes zeros and fills its
    stream's fault record (hipep.runtime.gpu_faults), which the run's closing sync turns into an
    error naming the node, the input, the index and the valid range; the record is cleared, so
    later runs (bound replays and CUDA graph replays, which keep the record's address) report
    again or run clean;
  * so are a RotaryEmbedding or GroupQueryAttention rotary position past the cos/sin cache and a
    GroupQueryAttention seqlens_k that does not fit the KV cache (tests/attention_bad_inputs.py;
    the kernels clamp them and report);
  * a launch the driver refuses names its node.
Host feeds and IOBinding with device inputs and outputs alike."""
from __future__ import annotations

import threading

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import hipep

from hipep.runtime.cuda import cuda_status, get_device
from attention_bad_inputs import F16, F32 as NP_F32, gqa_cases, mrope_position_case, rotary_position_case
from helpers import cpu_session, make_model, tensor
from quant_helpers import gather_block_quantized_model

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)
device = get_device(0)

F32, I64, I32 = TP.FLOAT, TP.INT64, TP.INT32
TOL = dict(rtol=1e-5, atol=1e-6)
n = helper.make_node


def init(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def out_of_range(index: int, extent: int, node: str = "embed", axis: int = 0) -> str:
    """The message (as a regex) of a Gather index fault."""
    return (rf"node '{node}' \(Gather\): input 1 \(indices\) into data axis {axis}: index {index} is out of data "
            rf"bounds: it must be within the inclusive range \[{-extent}, {extent - 1}\]")


def embedding_model(vocab=10, width=8, idx_elem=I64):
    """Gather over a constant table, then a pointwise Mul: two launches in one segment, so from
    the third run on the segment replays as a CUDA graph."""
    table = np.arange(vocab * width, dtype=np.float32).reshape(vocab, width) / 7
    return make_model([n("Gather", ["table", "ids"], ["e"], axis=0, name="embed"),
                       n("Mul", ["e", "two"], ["y"], name="scale")],
                      [tensor("ids", idx_elem, [1, "s"])], [tensor("y", F32, None)],
                      [init("table", table), init("two", np.array(2, np.float32))], opset=13)


def assert_cpu_answer(got, model, feeds):
    want = cpu_session(model).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, **TOL)


# ---- wrong element type -----------------------------------------------------------------------------

def test_a_wrong_dtype_is_rejected_and_the_session_runs_on(rng):
    model = make_model([n("Add", ["x", "y"], ["z"], name="the_add")],
                       [tensor("x", F32, ["a", 3]), tensor("y", F32, ["a", 3])], [tensor("z", F32, None)], opset=17)
    sess = hipep.InferenceSession(model, device="cuda")
    good = {"x": rng.standard_normal((2, 3)).astype(np.float32), "y": rng.standard_normal((2, 3)).astype(np.float32)}
    assert_cpu_answer(sess.run(None, good), model, good)
    with pytest.raises(Exception, match=r"Unexpected input data type.*tensor\(double\).*expected.*tensor\(float\)"):
        sess.run(None, {"x": good["x"].astype(np.float64), "y": good["y"]})
    assert_cpu_answer(sess.run(None, good), model, good)
    # device inputs of the wrong type (IOBinding)
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(good["x"].astype(np.float64), "cuda", 0))
    binding.bind_ortvalue_input("y", ort.OrtValue.ortvalue_from_numpy(good["y"], "cuda", 0))
    binding.bind_output("z", "cuda", 0)
    with pytest.raises(Exception, match=r"tensor\(double\)"):
        sess.run_with_iobinding(binding)
    binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(good["x"], "cuda", 0))
    sess.run_with_iobinding(binding)
    assert_cpu_answer([binding.get_outputs()[0].numpy()], model, good)


# ---- shapes that disagree at run time ---------------------------------------------------------------

def test_a_broadcast_mismatch_found_at_run_time_names_the_node(rng):
    model = make_model([n("Add", ["x", "y"], ["z"], name="the_add"), n("Relu", ["z"], ["r"], name="relu")],
                       [tensor("x", F32, ["a", 3]), tensor("y", F32, ["b", 3])], [tensor("r", F32, None)], opset=17)
    sess = hipep.InferenceSession(model, device="cuda")
    x, y = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    good = {"x": x, "y": y[:2]}
    for _ in range(3):  # the bad run comes after the good shape's launches are bound and captured
        assert_cpu_answer(sess.run(None, good), model, good)
    message = r"node 'the_add' \(Add\).*A is \[2, 3\], B is \[4, 3\]"
    with pytest.raises(Exception, match=message):
        sess.run(None, {"x": x, "y": y})
    assert_cpu_answer(sess.run(None, good), model, good)
    # the same with device tensors
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0))
    binding.bind_ortvalue_input("y", ort.OrtValue.ortvalue_from_numpy(y, "cuda", 0))
    binding.bind_output("r", "cuda", 0)
    with pytest.raises(Exception, match=message):
        sess.run_with_iobinding(binding)
    binding.bind_ortvalue_input("y", ort.OrtValue.ortvalue_from_numpy(y[:2].copy(), "cuda", 0))
    sess.run_with_iobinding(binding)
    assert_cpu_answer([binding.get_outputs()[0].numpy()], model, good)


def test_a_matmul_inner_dim_mismatch_names_the_node(rng):
    w = rng.standard_normal((4, 5)).astype(np.float32)
    model = make_model([n("MatMul", ["x", "y"], ["m"], name="mm"), n("Relu", ["m"], ["z"], name="relu")],
                       [tensor("x", F32, ["r", "k"]), tensor("y", F32, ["k2", 5])], [tensor("z", F32, None)], opset=17)
    sess = hipep.InferenceSession(model, device="cuda")
    good = {"x": rng.standard_normal((3, 4)).astype(np.float32), "y": w}
    assert_cpu_answer(sess.run(None, good), model, good)
    with pytest.raises(Exception, match=r"node 'mm' \(MatMul\).*\[3, 6\].*\[4, 5\]"):
        sess.run(None, {"x": rng.standard_normal((3, 6)).astype(np.float32), "y": w})
    assert_cpu_answer(sess.run(None, good), model, good)


# ---- Gather indices out of range (the kernel's fault report) ------------------------------------------

@pytest.mark.parametrize("mode", ["graphs", "no graphs", "sync every launch"])
@pytest.mark.parametrize("idx_elem", [I64, I32])
def test_gather_index_out_of_range_with_host_outputs(monkeypatch, mode, idx_elem):
    if mode == "no graphs":
        monkeypatch.setattr(device, "use_graphs", False)
    elif mode == "sync every launch":
        monkeypatch.setattr(device, "sync_launches", True)
    model = embedding_model(idx_elem=idx_elem)
    npi = np.int64 if idx_elem == I64 else np.int32
    sess = hipep.InferenceSession(model, device="cuda")
    good = {"ids": np.array([[0, 9, -1, -10, 4]], npi)}
    for _ in range(3):  # first run, bound replay, CUDA graph replay
        assert_cpu_answer(sess.run(None, good), model, good)
    for bad_index in (10, -11, 1 << 40 if idx_elem == I64 else (1 << 31) - 1):
        bad = {"ids": np.array([[0, 3, bad_index, 2, 1]], npi)}  # the same shape: the same graph replays
        with pytest.raises(Exception, match=out_of_range(bad_index, 10)):
            sess.run(None, bad)
        assert_cpu_answer(sess.run(None, good), model, good)  # the record was cleared
        assert_cpu_answer(sess.run(None, good), model, good)
    # every index bad: one report (the first that wins), still a clear error
    with pytest.raises(Exception, match=r"node 'embed' \(Gather\): .*index -?\d+ is out of data bounds"):
        sess.run(None, {"ids": np.array([[10, 11, -11, 12, 99]], npi)})
    # another shape (a new specialization) after the fault
    other = {"ids": np.array([[3, 1, 2]], npi)}
    assert_cpu_answer(sess.run(None, other), model, other)


def test_gather_index_out_of_range_on_another_axis(rng):
    data = rng.standard_normal((3, 4, 5)).astype(np.float32)
    model = make_model([n("Gather", ["data", "idx"], ["g"], axis=1, name="pick"), n("Neg", ["g"], ["y"], name="neg")],
                       [tensor("data", F32, [3, 4, 5]), tensor("idx", I64, [2])], [tensor("y", F32, None)], opset=13)
    sess = hipep.InferenceSession(model, device="cuda")
    good = {"data": data, "idx": np.array([3, -4], np.int64)}
    assert_cpu_answer(sess.run(None, good), model, good)
    for bad_index in (4, -5):
        with pytest.raises(Exception, match=out_of_range(bad_index, 4, node="pick", axis=1)):
            sess.run(None, {"data": data, "idx": np.array([0, bad_index], np.int64)})
        assert_cpu_answer(sess.run(None, good), model, good)


def test_gather_index_out_of_range_with_device_outputs():
    """IOBinding with the indices and the output in device memory: the run's closing sync reads
    the fault record, so the faulting run itself raises."""
    model = embedding_model()
    sess = hipep.InferenceSession(model, device="cuda")
    good_ids = np.array([[1, 2, 3, -1]], np.int64)
    good_value = ort.OrtValue.ortvalue_from_numpy(good_ids, "cuda", 0)
    binding = sess.io_binding()
    binding.bind_ortvalue_input("ids", good_value)
    binding.bind_output("y", "cuda", 0)
    for _ in range(3):
        sess.run_with_iobinding(binding)
    assert_cpu_answer([binding.get_outputs()[0].numpy()], model, {"ids": good_ids})
    for bad_index in (10, -11):
        bad_value = ort.OrtValue.ortvalue_from_numpy(np.array([[1, bad_index, 3, 0]], np.int64), "cuda", 0)
        binding.bind_ortvalue_input("ids", bad_value)
        with pytest.raises(Exception, match=out_of_range(bad_index, 10)):
            sess.run_with_iobinding(binding)
        binding.bind_ortvalue_input("ids", good_value)
        sess.run_with_iobinding(binding)
        assert_cpu_answer([binding.get_outputs()[0].numpy()], model, {"ids": good_ids})
    # a preallocated device output, the bad run between good ones
    out = ort.OrtValue.ortvalue_from_shape_and_type([1, 4, 8], np.float32, "cuda", 0)
    binding.bind_ortvalue_output("y", out)
    sess.run_with_iobinding(binding)
    binding.bind_ortvalue_input("ids", ort.OrtValue.ortvalue_from_numpy(np.array([[0, 0, 0, 10]], np.int64), "cuda", 0))
    with pytest.raises(Exception, match=out_of_range(10, 10)):
        sess.run_with_iobinding(binding)
    binding.bind_ortvalue_input("ids", good_value)
    sess.run_with_iobinding(binding)
    assert_cpu_answer([out.numpy()], model, {"ids": good_ids})


def test_a_fault_stays_with_the_run_that_made_it():
    """Concurrent runs of one session use one stream (and fault record) each: threads feeding bad
    indices fail, the others' runs on other streams match the CPU EP."""
    model = embedding_model(vocab=50)
    sess = hipep.InferenceSession(model, device="cuda")
    cpu = cpu_session(model)
    errors: list[str] = []

    def worker(seed: int):
        r = np.random.default_rng(seed)
        try:
            for it in range(40):
                ids = r.integers(-50, 50, (1, 6)).astype(np.int64)
                bad = (seed + it) % 3 == 0
                if bad:
                    ids[0, int(r.integers(0, 6))] = 50 + int(r.integers(0, 5))
                try:
                    got = sess.run(None, {"ids": ids})
                except Exception as e:  # noqa: BLE001
                    if not bad or "out of data bounds" not in str(e):
                        errors.append(f"thread {seed}, run {it}: {e}")
                    continue
                if bad:
                    errors.append(f"thread {seed}, run {it}: a bad index ran without an error")
                else:
                    np.testing.assert_allclose(got[0], cpu.run(None, {"ids": ids})[0], **TOL)
        except Exception as e:  # noqa: BLE001
            errors.append(f"thread {seed}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]


def test_gather_block_quantized_out_of_range_gives_zeros_as_ort_does():
    """ORT's CPU EP 1.32 gives a row of zeros for a GatherBlockQuantized index out of range (it
    does not raise), so hipep's kernel does the same and reports nothing. Older ORT (1.30) raises
    instead: there only the in-range feeds are compared."""
    model, _ = gather_block_quantized_model(64, 64, 4, 32, (1, 4))
    sess = hipep.InferenceSession(model, device="cuda")
    for ids in ([[1, 64, -65, 2]], [[0, 1, 2, 3]], [[1000, -1, 5, -64]]):
        feeds = {"ids": np.array(ids, np.int64)}
        got = sess.run(None, feeds)[0]
        try:
            want = cpu_session(model).run(None, feeds)[0]
        except Exception as e:  # noqa: BLE001 - this ORT raises for an index out of range
            assert "out of data bounds" in str(e)
            in_range = np.all((feeds["ids"] >= -64) & (feeds["ids"] < 64), axis=0)
            assert not in_range.all()
            continue
        np.testing.assert_array_equal(got, want)


# ---- rotary positions and attention lengths out of range (the kernels' fault reports) -------------------

ATTENTION_CASES = ([rotary_position_case(dt, offset) for dt in (NP_F32, F16) for offset in (False, True)]
                   + [mrope_position_case(dt) for dt in (NP_F32, F16)] + gqa_cases(NP_F32) + gqa_cases(F16))


def assert_close_to_cpu(got, want, dtype):
    t = dict(rtol=1e-5, atol=2e-5) if dtype == NP_F32 else dict(rtol=1e-2, atol=2e-3)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), **t)


@pytest.mark.parametrize("case", ATTENTION_CASES, ids=lambda c: c.name)
def test_a_position_or_length_out_of_range_names_the_node_and_the_session_runs_on(case):
    """A rotary position past the cos/sin cache, a seqlens_k past the KV cache or short of the new
    tokens: the run raises naming the node, the input and the value's range (as the CPU device and
    ORT's CPU EP reject it), never a clamped answer; the same session then runs the good feed
    (same shapes: the bound launches and the CUDA graph replay) as ORT's CPU EP does."""
    sess = hipep.InferenceSession(case.model, device="cuda")
    want = cpu_session(case.model).run(None, case.good)
    for _ in range(3):  # first run, bound replay, CUDA graph replay
        assert_close_to_cpu(sess.run(None, case.good), want, case.dtype)
    for _ in range(2):  # the record was cleared: the bad feed reports again, the good one runs clean
        with pytest.raises(Exception, match=case.gpu_error):
            sess.run(None, case.bad)
        assert_close_to_cpu(sess.run(None, case.good), want, case.dtype)


def test_a_rotary_position_out_of_range_with_device_inputs_and_outputs():
    """IOBinding with position_ids and the output in device memory: the faulting run raises."""
    case = rotary_position_case(F16, False)
    sess = hipep.InferenceSession(case.model, device="cuda")
    want = cpu_session(case.model).run(None, case.good)
    binding = sess.io_binding()
    for name, value in case.good.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value, "cuda", 0))
    binding.bind_output("y0", "cuda", 0)
    for _ in range(3):
        sess.run_with_iobinding(binding)
    assert_close_to_cpu([binding.get_outputs()[0].numpy()], want, F16)
    bad = ort.OrtValue.ortvalue_from_numpy(case.bad["position_ids"], "cuda", 0)
    binding.bind_ortvalue_input("position_ids", bad)
    with pytest.raises(Exception, match=case.gpu_error):
        sess.run_with_iobinding(binding)
    binding.bind_ortvalue_input("position_ids", ort.OrtValue.ortvalue_from_numpy(case.good["position_ids"], "cuda", 0))
    sess.run_with_iobinding(binding)
    assert_close_to_cpu([binding.get_outputs()[0].numpy()], want, F16)


# ---- a launch the driver refuses ----------------------------------------------------------------------

def test_a_refused_launch_names_its_node_and_the_session_recovers(rng, monkeypatch):
    from hipep.runtime import gpu_kernels as gk

    model = make_model([n("Relu", ["x"], ["r"], name="first"), n("Softmax", ["r"], ["s"], axis=-1, name="the_softmax"),
                        n("Transpose", ["s"], ["y"], perm=[1, 0], name="last")],
                       [tensor("x", F32, ["b", 77])], [tensor("y", F32, None)], opset=13)
    sess = hipep.InferenceSession(model, device="cuda")
    monkeypatch.setattr(gk, "row_config", lambda rows, words, warp: ((rows, 1, 1), (2048, 1, 1)))
    with pytest.raises(Exception, match=r"node 'the_softmax' \(Softmax\): launch of hipep_softmax_f32.*block \[2048"):
        sess.run(None, {"x": rng.standard_normal((3, 77)).astype(np.float32)})
    monkeypatch.undo()
    good = {"x": rng.standard_normal((4, 77)).astype(np.float32)}  # a new shape: bound again
    for _ in range(3):
        assert_cpu_answer(sess.run(None, good), model, good)
