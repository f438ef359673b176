"""NonMaxSuppression's GPU launch (kernels/nms.hip, hipep/runtime/gpu_detection.py) run on the host
stand-in (g++ over the unchanged kernel source, a block's threads as host threads, the _rn
intrinsics as single IEEE operations) against the registry's reference (hipep.ops.detection) and
ORT's CPU EP, selection for selection: the ONNX backend test's cases, random boxes in both formats
(corners in either order, boxes of zero or negative size), clusters of heavily overlapping boxes,
ties in score (equal values, -0 and 0), NaN scores, with and without the score threshold, limits
of 0, 1, a few and more than the boxes, IoU thresholds 0 to 1 and exactly at a pair's IoU, several
batches and classes, inputs left out, and a block of 64-wide warps. And what the binding leaves:
a spatial dimension past the launch's shared memory, with the reason. Skipped without g++."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from onnx import TensorProto as T, helper as h

from hipep.runtime import gpu_kernels as gk
from hipep.runtime.gpu_detection import MAX_BOXES, MAX_THREADS

from helpers import cpu_session, make_model, tensor
from selection_inputs import clustered_boxes, random_boxes, tied_scores
from unit.host_kernels import EXACT_FLAGS, compile_module, run_on_host

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")

NMS = "::NonMaxSuppression"
INPUTS = ("boxes", "scores", "max_out", "iou", "score_threshold")
ELEM = (T.FLOAT, T.FLOAT, T.INT64, T.FLOAT, T.FLOAT)


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    out = tmp_path_factory.mktemp("host_nms")
    return {"warp": 32, "nms": compile_module(out, "nms", 32, EXACT_FLAGS)}


@pytest.fixture(scope="module")
def libs64(tmp_path_factory):
    out = tmp_path_factory.mktemp("host_nms64")
    return {"warp": 64, "nms": compile_module(out, "nms", 64, EXACT_FLAGS)}


def ort_selection(inputs, center: int) -> np.ndarray:
    """ORT's CPU EP's selection for `inputs` (None: left out)."""
    names = [n if x is not None else "" for n, x in zip(INPUTS, inputs)]
    while names and not names[-1]:
        names.pop()
    node = h.make_node("NonMaxSuppression", names, ["selected"], center_point_box=center)
    model = make_model([node], [tensor(n, e, list(x.shape)) for n, e, x in zip(INPUTS, ELEM, inputs) if x is not None],
                       [tensor("selected", T.INT64, None)], opset=11)
    return cpu_session(model).run(None, {n: x for n, x in zip(INPUTS, inputs) if x is not None})[0]


def check(libs, inputs, center: int = 0, ort: bool = True):
    """The launch's selection equals the reference's and (where `ort`) ORT's CPU EP's; the ops."""
    inputs = list(inputs) + [None] * (5 - len(inputs))
    got, want, ops = run_on_host(libs, NMS, inputs, {"center_point_box": center})
    assert got[0].shape == want[0].shape and got[0].dtype == np.int64
    np.testing.assert_array_equal(got[0], want[0])
    if ort:
        np.testing.assert_array_equal(got[0], ort_selection(inputs, center))
    if want[0].size:
        assert [o.entry for o in ops] == ["hipep_nms"]
    else:
        assert ops == []
    return got[0], ops


def scalars(limit, iou, threshold=None):
    return [np.array([limit], np.int64), np.array([iou], np.float32),
            None if threshold is None else np.array([threshold], np.float32)]


# ---- the ONNX backend test's cases ----------------------------------------------------------------

def _backend_cases():
    from conformance import support

    return sorted((i for i in support.catalog().values() if i.name.startswith("test_nonmaxsuppression")),
                  key=lambda i: i.name)


@pytest.mark.parametrize("info", _backend_cases(), ids=lambda i: i.name)
def test_the_onnx_backend_cases(libs, info):
    from conformance import support

    model, data_sets = support.load_case(info)
    center = next((a.i for a in model.graph.node[0].attribute if a.name == "center_point_box"), 0)
    for ins, outs in data_sets:
        got, _ = check(libs, [np.asarray(x) for x in ins], center)
        np.testing.assert_array_equal(got, outs[0])


# ---- random boxes ---------------------------------------------------------------------------------

@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("threshold", [None, 0.4], ids=["no-threshold", "threshold"])
@pytest.mark.parametrize("limit,iou", [(1, 0.5), (3, 0.3), (40, 0.0), (40, 1.0), (7, 0.6)],
                         ids=["limit1", "limit3", "iou0", "iou1", "limit7"])
def test_random_boxes_in_both_formats(libs, center, threshold, limit, iou):
    rng = np.random.default_rng(limit * 10 + center + (threshold is not None) * 100)
    boxes = random_boxes(rng, 2, 30, center)
    check(libs, [boxes, tied_scores(rng, 2, 3, 30), *scalars(limit, iou, threshold)], center)


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("iou", [0.1, 0.5, 0.9])
def test_clusters_of_overlapping_boxes(libs, center, iou):
    rng = np.random.default_rng(int(iou * 10) + center)
    boxes = clustered_boxes(rng, 2, 150, center)
    got, ops = check(libs, [boxes, tied_scores(rng, 2, 2, 150, levels=20), *scalars(1000, iou)], center)
    assert ops[0].block == (160, 1, 1) and ops[0].smem == 8 * 150
    assert len(got) > 4  # not one box a cluster: the greedy pass runs long


def test_a_block_of_the_largest_size_loops_over_the_boxes(libs):
    rng = np.random.default_rng(3)
    n = MAX_THREADS + 44
    _, ops = check(libs, [random_boxes(rng, 1, n, 0, size=(0.2, 1.5)), tied_scores(rng, 1, 2, n, levels=50),
                          *scalars(n, 0.3, 0.2)])
    assert ops[0].block == (MAX_THREADS, 1, 1)


def test_a_block_of_64_wide_warps(libs64):
    rng = np.random.default_rng(4)
    _, ops = check(libs64, [clustered_boxes(rng, 1, 70, 1), tied_scores(rng, 1, 3, 70, levels=10),
                            *scalars(20, 0.4, 0.1)], center=1)
    assert ops[0].block == (128, 1, 1)


def test_many_batches_and_classes_in_order(libs):
    rng = np.random.default_rng(5)
    got, _ = check(libs, [random_boxes(rng, 4, 12, 0), tied_scores(rng, 4, 5, 12), *scalars(3, 0.5, 0.3)])
    assert (np.diff(got[:, 0] * 5 + got[:, 1]) >= 0).all()  # pairs in order, their boxes by rank


# ---- scores -----------------------------------------------------------------------------------------

def test_ties_take_the_lower_box_first_and_zeros_of_either_sign_tie(libs):
    boxes = np.array([[[0, 0, 1, 1], [5, 5, 6, 6], [0, 0, 1, 1], [5, 5, 6, 6], [9, 9, 10, 10], [0, 0, 1, 1]]],
                     np.float32)
    scores = np.array([[[0.5, 0.5, 0.5, 0.5, 0.0, -0.0], [-0.0, 0.0, -0.0, 0.0, -0.0, 0.0]]], np.float32)
    got, _ = check(libs, [boxes, scores, *scalars(6, 0.5)])
    np.testing.assert_array_equal(got[:, 2], [0, 1, 4, 0, 1, 4])


def test_nan_scores_come_last_without_a_threshold_and_never_pass_one(libs):
    rng = np.random.default_rng(6)
    boxes = random_boxes(rng, 1, 10, 0, degenerate=0)
    scores = rng.uniform(0, 1, (1, 2, 10)).astype(np.float32)
    scores[0, :, [1, 4, 7]] = np.nan
    # ORT's CPU EP orders NaN scores as its priority queue happens to: the reference's order only.
    got, _ = check(libs, [boxes, scores, *scalars(10, 1.0)], ort=False)
    assert list(got[:10, 2][-3:]) == [1, 4, 7]
    got, _ = check(libs, [boxes, scores, *scalars(10, 1.0, 0.0)])
    assert not set(got[:, 2]) & {1, 4, 7}


def test_scores_below_or_at_the_threshold_are_no_candidates(libs):
    boxes = np.array([[[0, 0, 1, 1], [2, 2, 3, 3], [4, 4, 5, 5]]], np.float32)
    scores = np.array([[[0.3, np.nextafter(np.float32(0.3), np.float32(1)), 0.9]]], np.float32)
    got, _ = check(libs, [boxes, scores, *scalars(3, 0.5, 0.3)])
    np.testing.assert_array_equal(got, [[0, 0, 2], [0, 0, 1]])
    got, _ = check(libs, [boxes, scores, *scalars(3, 0.5, 0.9)])
    assert got.shape == (0, 3)


# ---- the IoU ----------------------------------------------------------------------------------------

def test_an_iou_exactly_at_the_threshold_does_not_suppress(libs):
    # [0, 0, 1, 1] and [0, 0.25, 1, 1.25]: intersection 0.75, union 1.25, IoU 0.6 in f32
    boxes = np.array([[[0, 0, 1, 1], [0, 0.25, 1, 1.25]]], np.float32)
    scores = np.array([[[0.9, 0.8]]], np.float32)
    at = np.float32(0.75) / np.float32(1.25)
    assert check(libs, [boxes, scores, *scalars(2, at)])[0].shape == (2, 3)
    assert check(libs, [boxes, scores, *scalars(2, np.nextafter(at, np.float32(0)))])[0].shape == (1, 3)


def test_degenerate_boxes_never_suppress(libs):
    boxes = np.array([[[0, 0, 1, 1], [0, 0, 0, 1], [0.5, 0, 0.5, 1], [0, 0, 1, 1], [1, 1, 0, 0]]], np.float32)
    scores = np.array([[[0.1, 0.9, 0.8, 0.7, 0.6]]], np.float32)
    got, _ = check(libs, [boxes, scores, *scalars(5, 0.0)])
    np.testing.assert_array_equal(got[:, 2], [1, 2, 3])  # the flipped copy of box 3 is suppressed by it
    cboxes = np.array([[[0.5, 0.5, 1, 1], [0.5, 0.5, 0, 1], [0.5, 0.5, 1, -1], [0.5, 0.5, 1, 1]]], np.float32)
    got, _ = check(libs, [cboxes, scores[:, :, :4], *scalars(4, 0.0)], center=1)
    np.testing.assert_array_equal(got[:, 2], [1, 2, 3])


# ---- limits and inputs left out --------------------------------------------------------------------

@pytest.mark.parametrize("limit", [0, -2])
def test_no_positive_limit_selects_nothing_and_launches_nothing(libs, limit):
    rng = np.random.default_rng(7)
    got, ops = check(libs, [random_boxes(rng, 1, 8, 0), tied_scores(rng, 1, 2, 8), *scalars(limit, 0.5)])
    assert got.shape == (0, 3) and ops == []


def test_a_limit_past_the_boxes_keeps_every_box_left(libs):
    rng = np.random.default_rng(8)
    boxes = random_boxes(rng, 1, 9, 0, degenerate=0)
    got, _ = check(libs, [boxes, tied_scores(rng, 1, 1, 9), *scalars(2 ** 40, 1.0)])
    assert sorted(got[:, 2]) == list(range(9))  # IoU threshold 1: nothing suppresses


def test_inputs_left_out(libs):
    rng = np.random.default_rng(9)
    boxes, scores = random_boxes(rng, 1, 8, 0), tied_scores(rng, 1, 2, 8)
    got, ops = check(libs, [boxes, scores])  # no max_output_boxes_per_class: nothing
    assert got.shape == (0, 3) and ops == []
    check(libs, [boxes, scores, np.array([4], np.int64)])  # IoU threshold 0, no score threshold
    check(libs, [boxes, scores, np.array(4, np.int64), None, np.array(0.5, np.float32)])  # scalars of rank 0


# ---- what the binding leaves -----------------------------------------------------------------------

def test_a_spatial_dimension_past_shared_memory_is_left_with_the_reason():
    dtypes = ["float32", "float32", "int64", "float32"]
    assert gk.kernel_reason(NMS, {"center_point_box": 0}, dtypes, [(1, MAX_BOXES, 4), (1, 2, MAX_BOXES)]) is None
    assert gk.kernel_reason(NMS, {"center_point_box": 0}, dtypes, [(1, None, 4), None]) is None
    why = gk.kernel_reason(NMS, {"center_point_box": 0}, dtypes, [(1, MAX_BOXES + 1, 4), (1, 2, MAX_BOXES + 1)])
    assert why == (f"no kernel for cuda: NonMaxSuppression (spatial_dimension {MAX_BOXES + 1}: the kernel keeps 8 "
                   f"bytes a box in a block's shared memory, at most {MAX_BOXES} boxes in the 48 KiB a launch gets)")
    arg = gk.Arg(0x1000, (1, MAX_BOXES + 1, 4), np.dtype(np.float32))
    scores = gk.Arg(0x2000, (1, 1, MAX_BOXES + 1), np.dtype(np.float32))
    out = gk.Arg(0x3000, (1, 3), np.dtype(np.int64))
    with pytest.raises(gk.NoKernel, match=f"spatial_dimension {MAX_BOXES + 1}"):
        gk.binding_for(NMS).bind([arg, scores], [out], {"center_point_box": 0}, gk.Target())


def test_shapes_that_disagree_are_an_error_naming_them():
    boxes = gk.Arg(0x1000, (1, 6, 4), np.dtype(np.float32))
    scores = gk.Arg(0x2000, (1, 1, 5), np.dtype(np.float32))
    out = gk.Arg(0x3000, (1, 3), np.dtype(np.int64))
    with pytest.raises(Exception, match=r"boxes \[1, 6, 4\] and scores \[1, 1, 5\] disagree on spatial_dimension"):
        gk.binding_for(NMS).bind([boxes, scores], [out], {"center_point_box": 0}, gk.Target())
