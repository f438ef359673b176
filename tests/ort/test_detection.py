"""NonMaxSuppression on hipep's CPU reference device in a real ORT session: ORT's CPU EP's
selections on random boxes (both box formats, flipped corners, degenerate boxes, with and without
the score threshold, limits from 0 up), the inputs fed at run time; the GPU leaves it (no kernel)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T, helper as h

import hipep

from helpers import assignment, cpu_ep, cpu_session, make_model, session, tensor


def nms_model(center: int, with_threshold: bool):
    inputs = ["boxes", "scores", "max_out", "iou"] + (["score_floor"] if with_threshold else [])
    node = h.make_node("NonMaxSuppression", inputs, ["selected"], center_point_box=center, name="nms")
    return make_model([node], [tensor("boxes", T.FLOAT, [2, 30, 4]), tensor("scores", T.FLOAT, [2, 3, 30]),
                               tensor("max_out", T.INT64, [1]), tensor("iou", T.FLOAT, [1])]
                      + ([tensor("score_floor", T.FLOAT, [1])] if with_threshold else []),
                      [tensor("selected", T.INT64, None)], opset=11)


def random_boxes(rng, center: int) -> np.ndarray:
    if center:
        xy = rng.uniform(0, 10, (2, 30, 2))
        wh = rng.uniform(-0.5, 4, (2, 30, 2))  # some of zero or negative size: they never suppress
        return np.concatenate([xy, wh], -1).astype(np.float32)
    a, b = rng.uniform(0, 10, (2, 30, 2)), rng.uniform(0, 10, (2, 30, 2))  # corners in either order
    return np.concatenate([a, b], -1).astype(np.float32)


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("with_threshold", [False, True])
def test_selections_are_the_cpu_eps(rng, center, with_threshold):
    model = nms_model(center, with_threshold)
    sess = session(model, disable_fallback=True)
    assert assignment(sess) == {cpu_ep(): [["nms"]]}
    oracle = cpu_session(model)
    for limit, iou in ((0, 0.5), (1, 0.5), (5, 0.3), (30, 0.0), (30, 1.0)):
        scores = rng.uniform(0, 1, (2, 3, 30)).astype(np.float32)
        scores[0, 0, 5:9] = scores[0, 0, 4]  # ties
        feeds = {"boxes": random_boxes(rng, center), "scores": scores, "max_out": np.array([limit], np.int64),
                 "iou": np.array([iou], np.float32)}
        if with_threshold:
            feeds["score_floor"] = np.array([0.4], np.float32)
        got, want = sess.run(None, feeds)[0], oracle.run(None, feeds)[0]
        assert got.dtype == np.int64 and got.shape[1:] == (3,)
        np.testing.assert_array_equal(got, want, err_msg=f"limit {limit}, iou {iou}")


def test_an_iou_threshold_out_of_range_is_an_error_and_the_session_runs_on(rng):
    model = nms_model(0, False)
    sess = session(model, disable_fallback=True)
    feeds = {"boxes": random_boxes(rng, 0), "scores": rng.uniform(0, 1, (2, 3, 30)).astype(np.float32),
             "max_out": np.array([3], np.int64), "iou": np.array([1.5], np.float32)}
    with pytest.raises(Exception, match=r"node 'nms' \(NonMaxSuppression\).*iou_threshold must be within \[0, 1\]"):
        sess.run(None, feeds)
    feeds["iou"] = np.array([0.5], np.float32)
    np.testing.assert_array_equal(sess.run(None, feeds)[0], cpu_session(model).run(None, feeds)[0])


def test_on_a_gpu_it_is_left_with_the_reason():
    (rejection,) = hipep.explain(nms_model(0, True), device="cuda").rejections
    assert "no kernel for cuda" in rejection.line()
