"""Native replay on the GPU (csrc/native_replay.cc, hipep.runtime.native_replay): decode steps that
Compute replays without calling Python give the logits the Python path gives, every natively
replayed step's kernel-node parameters are what Python binds for its tensors, and a kernel's
fault in a native run is the Python path's error (the node, the input, the index and the range),
the session running on after it. tests/unit/test_native_replay.py checks the same records on the
host stand-in driver."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from hipep.runtime.cuda import cuda_status

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

import hipep  # noqa: E402
from hipep.runtime import native_replay  # noqa: E402
from hipep.tools import model_zoo  # noqa: E402
from helpers import cpu_session, make_model, tensor  # noqa: E402

STEPS = 40
PROMPT = 9


class _Decoder:
    """Greedy-free decoding on given tokens through IOBinding, KV caches and logits in device memory."""

    def __init__(self, path: str, head_size: int, max_len: int, **options):
        self.sess = hipep.InferenceSession(path, device="cuda", strict=True, **options)
        ins = {i.name: i for i in self.sess.get_inputs()}
        self.binding = self.sess.io_binding()
        out = {o.name: o for o in self.sess.get_outputs()}
        self.logits_type = np.float16 if "float16" in out["logits"].type else np.float32
        cache_type = np.float16 if "float16" in ins[next(n for n in ins if n.startswith("past_"))].type else np.float32
        self.vocab = out["logits"].shape[-1]
        self.caches = []
        for name, i in ins.items():
            if name.startswith("past_key_values."):
                cache = ort.OrtValue.ortvalue_from_numpy(np.zeros((1, i.shape[1], max_len, head_size), cache_type),
                                                         "cuda", 0)
                self.caches.append(cache)
                self.binding.bind_ortvalue_input(name, cache)
                self.binding.bind_ortvalue_output(name.replace("past_key_values.", "present."), cache)
        self.logits = {}

    def step(self, tokens: np.ndarray, total: int) -> np.ndarray:
        n = tokens.shape[1]
        self.binding.bind_cpu_input("input_ids", tokens.astype(np.int64))
        self.binding.bind_cpu_input("attention_mask", np.ones((1, total), np.int64))
        if n not in self.logits:
            self.logits[n] = ort.OrtValue.ortvalue_from_shape_and_type([1, n, self.vocab], self.logits_type, "cuda", 0)
        self.binding.bind_ortvalue_output("logits", self.logits[n])
        self.sess.run_with_iobinding(self.binding)
        return self.logits[n].numpy()[0, -1].astype(np.float32)


@pytest.mark.parametrize("precision", ["fp32", "int4-f16"])
def test_natively_replayed_decode_steps_give_the_python_paths_logits(precision):
    from teacher_forcing import decoder_geometry

    try:
        folder = model_zoo.decoder("llama", precision)
    except Exception as e:  # no builder on this machine and no cached model
        pytest.skip(f"the llama {precision} decoder cannot be built here: {type(e).__name__}: {e}")
    path, head_size, _ = decoder_geometry(folder)
    max_len = PROMPT + STEPS + 4
    earlier = {id(r) for r in native_replay.records()}
    native = _Decoder(path, head_size, max_len)
    python = _Decoder(path, head_size, max_len, native_replay="off")
    tokens = np.random.default_rng(1).integers(3, native.vocab, PROMPT + STEPS)
    natively = 0
    for total in range(PROMPT, PROMPT + STEPS):
        ids = tokens[None, :PROMPT] if total == PROMPT else tokens[None, total - 1:total]
        before = hipep.stats().get("native_runs", 0)
        a = native.step(ids, total)
        ran_natively = hipep.stats().get("native_runs", 0) - before
        b = python.step(ids, total)
        assert hipep.stats().get("native_runs", 0) - before == ran_natively  # the other session never does
        err = np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30)
        # the same kernels with the same parameters (a reduction's order may differ run to run)
        assert err <= (1e-5 if precision == "fp32" else 1e-3), \
            f"step {total}: logits differ from the Python path's by relative L2 {err:.2e}"
        if ran_natively:
            natively += 1
            (rec,) = [r for r in native_replay.records() if id(r) not in earlier and r.native.runs]
            assert rec.check_last_run() == [], total
    assert natively >= STEPS - 5


def _embedding_model(vocab: int = 10, width: int = 8):
    table = np.arange(vocab * width, dtype=np.float32).reshape(vocab, width) / 7
    return make_model([helper.make_node("Gather", ["table", "ids"], ["e"], axis=0, name="embed"),
                       helper.make_node("Mul", ["e", "two"], ["y"], name="scale")],
                      [tensor("ids", TP.INT64, [1, "s"])], [tensor("y", TP.FLOAT, None)],
                      [numpy_helper.from_array(table, "table"), numpy_helper.from_array(np.array(2, np.float32), "two")],
                      opset=13)


def test_a_fault_in_a_native_run_names_the_node_and_the_session_runs_on():
    """ids alternating between two device buffers (so the record follows their address), then a
    third holding an index out of range: the native run's closing sync finds the kernel's fault
    and raises the Python path's error; the next good run replays natively and is right."""
    model = _embedding_model()
    sess = hipep.InferenceSession(model, device="cuda")
    good = np.array([[1, 2, 3, -1]], np.int64)
    values = [ort.OrtValue.ortvalue_from_numpy(good, "cuda", 0) for _ in range(2)]
    out = ort.OrtValue.ortvalue_from_shape_and_type([1, 4, 8], np.float32, "cuda", 0)
    binding = sess.io_binding()
    binding.bind_ortvalue_output("y", out)
    want = cpu_session(model).run(None, {"ids": good})[0]
    for k in range(8):
        binding.bind_ortvalue_input("ids", values[k % 2])
        sess.run_with_iobinding(binding)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)
    bad = ort.OrtValue.ortvalue_from_numpy(np.array([[1, 10, 3, 0]], np.int64), "cuda", 0)
    binding.bind_ortvalue_input("ids", bad)
    before = hipep.stats().get("native_runs", 0)
    with pytest.raises(Exception, match=r"node 'embed' \(Gather\): input 1 \(indices\) into data axis 0: index 10 "
                                        r"is out of data bounds"):
        sess.run_with_iobinding(binding)
    assert hipep.stats().get("native_runs", 0) - before == 1
    binding.bind_ortvalue_input("ids", values[0])
    sess.run_with_iobinding(binding)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)
    assert hipep.stats().get("native_runs", 0) - before == 2
