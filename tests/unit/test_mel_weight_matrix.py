"""MelWeightMatrix on the CPU device: ORT's CPU kernel's matrix bit for bit (its corners' placement
and its per-type arithmetic), a clear error where an edge or a triangle falls outside the
spectrogram; a GPU claims it (kernels/dft.hip) up to the mel bins its launch arguments hold and
leaves a larger constant count to ORT with the reason."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

import hipep
from helpers import cpu_session, make_model, tensor


def mel_model(out=TP.FLOAT, index=TP.INT64):
    node = helper.make_node("MelWeightMatrix", ["bins", "n", "rate", "lo", "hi"], ["y"], output_datatype=out,
                            name="mel")
    inputs = [tensor(x, index, []) for x in ("bins", "n", "rate")] + [tensor(x, TP.FLOAT, []) for x in ("lo", "hi")]
    return make_model([node], inputs, [tensor("y", out, None)], opset=17)


def feeds(bins, n, rate, lo, hi, index=np.int64):
    return {"bins": np.array(bins, index), "n": np.array(n, index), "rate": np.array(rate, index),
            "lo": np.array(lo, np.float32), "hi": np.array(hi, np.float32)}


@pytest.mark.parametrize("out", [TP.FLOAT, TP.DOUBLE, TP.INT32, TP.UINT8], ids=["f32", "f64", "i32", "u8"])
@pytest.mark.parametrize("case", [(8, 16, 8192, 0, 4096), (40, 512, 16000, 20, 8000), (80, 400, 16000, 0, 8000),
                                  (128, 2048, 44100, 30, 11025), (3, 64, 100, 1, 40)])
def test_matches_the_cpu_ep_bit_for_bit(out, case):
    model = mel_model(out)
    sess = hipep.InferenceSession(model, device="cpu", strict=True)
    got, want = sess.run(None, feeds(*case))[0], cpu_session(model).run(None, feeds(*case))[0]
    assert got.dtype == want.dtype and got.shape == want.shape == (case[1] // 2 + 1, case[0])
    np.testing.assert_array_equal(got, want)


def test_an_edge_past_the_spectrogram_is_a_clear_error_and_the_session_goes_on():
    sess = hipep.InferenceSession(mel_model(), device="cpu", strict=True)
    with pytest.raises(Exception, match=r"upper_edge_hertz=9000.0 gives spectrogram bin 9, outside \[0, 9\)"):
        sess.run(None, feeds(4, 16, 16000, 0, 9000))
    assert sess.run(None, feeds(4, 16, 16000, 0, 7000))[0].shape == (9, 4)


def test_a_gpu_claims_it_up_to_the_mel_bins_its_launch_holds():
    assert not hipep.explain(mel_model(), device="cuda").rejections
    node = helper.make_node("MelWeightMatrix", ["bins", "n", "rate", "lo", "hi"], ["y"], name="mel")
    consts = [helper.make_tensor("bins", TP.INT64, [], [999]), helper.make_tensor("n", TP.INT64, [], [4096]),
              helper.make_tensor("rate", TP.INT64, [], [48000]), helper.make_tensor("lo", TP.FLOAT, [], [0.0]),
              helper.make_tensor("hi", TP.FLOAT, [], [24000.0])]
    model = make_model([node], [], [tensor("y", TP.FLOAT, None)], consts, opset=17)
    line = hipep.explain(model, device="cuda").rejections[0].line()
    assert "node 'mel'" in line and "num_mel_bins 999" in line and "at most 998 mel bins" in line, line
