"""NonMaxSuppression on hipep's CPU reference device in a real ORT session: ORT's CPU EP's
selections on random boxes (both box formats, flipped corners, degenerate boxes, with and without
the score threshold, limits from 0 up), the inputs fed at run time. On a GPU it is claimed where the
host reads every input (small inputs handed in, constants): the claimed plan binds its launch of
kernels/nms.hip as the cuda device would (tests/unit/test_nms_on_host.py runs that kernel); inputs
larger than the host reads, or more boxes than the kernel's shared memory holds, leave it to other
EPs with the reason."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T, helper as h

import hipep
from hipep.runtime.gpu_detection import MAX_BOXES
from hipep.tools.cuda_dry_run import dry_run

from helpers import assignment, cpu_ep, cpu_session, make_model, session, tensor


def nms_model(center: int, with_threshold: bool, batches: int = 2, classes: int = 3, boxes: int = 30):
    inputs = ["boxes", "scores", "max_out", "iou"] + (["score_floor"] if with_threshold else [])
    node = h.make_node("NonMaxSuppression", inputs, ["selected"], center_point_box=center, name="nms")
    return make_model([node], [tensor("boxes", T.FLOAT, [batches, boxes, 4]),
                               tensor("scores", T.FLOAT, [batches, classes, boxes]),
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


@pytest.mark.parametrize("center", [0, 1])
def test_on_a_gpu_it_is_claimed_where_the_host_reads_its_inputs(rng, center):
    """Boxes and scores of at most 64 elements each (what the host reads of a value handed in):
    claimed, the plan traced before its launches and its launch bound as the cuda device binds it."""
    model = nms_model(center, True, batches=2, classes=3, boxes=8)
    report = hipep.explain(model, device="cuda")
    assert report.claimed_count == 1 and not report.rejections
    boxes = np.ascontiguousarray(random_boxes(rng, center)[:, :8])
    for limit in (0, 2, 8):
        feeds = {"boxes": boxes, "scores": rng.uniform(0, 1, (2, 3, 8)).astype(np.float32),
                 "max_out": np.array([limit], np.int64), "iou": np.array([0.4], np.float32),
                 "score_floor": np.array([0.2], np.float32)}
        assert dry_run(model, feeds) == 1


def test_on_a_gpu_inputs_the_host_does_not_read_leave_it_with_the_reason():
    (rejection,) = hipep.explain(nms_model(0, True), device="cuda").rejections
    assert rejection.reason.startswith("its output's shape depends on the value of input 0 'boxes', a float32 "
                                       "tensor of 240 elements, more than the host reads")


def test_on_a_gpu_more_boxes_than_the_kernel_holds_leave_it_with_the_reason():
    (rejection,) = hipep.explain(nms_model(0, False, batches=1, classes=1, boxes=MAX_BOXES + 1),
                                 device="cuda").rejections
    assert "node 'nms'" in rejection.line()
    assert rejection.reason.startswith(f"no kernel for cuda: NonMaxSuppression (spatial_dimension {MAX_BOXES + 1}: "
                                       f"the kernel keeps 8 bytes a box in a block's shared memory, at most "
                                       f"{MAX_BOXES} boxes")
