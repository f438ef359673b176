"""NonMaxSuppression on the CUDA device (kernels/nms.hip, hipep/runtime/gpu_detection.py): the host
reads the inputs (small ones handed in, their float values pinned so that a run with other values
is specialized anew; constants), sizes the output, and the kernel selects on the device. Each model
runs whole (disable_cpu_ep_fallback) through ORT several times per input (first run, bound replay,
CUDA graph replay), with several inputs in turn, against ORT's CPU EP, selection for selection:
both box formats with flipped corners and boxes of zero or negative size, ties in score, with and
without the score threshold, limits of 0 up to more than the boxes, IoU thresholds 0 to 1, several
batches and classes, scalars of rank 0 and inputs left out, the ONNX backend test's cases, hundreds
of overlapping constant boxes (a block of the largest size), inputs bound as device OrtValues; boxes
computed on the device leave the node to ORT's CPU EP, and the rest of the model runs here. An
IoU threshold outside [0, 1] is an error naming the node, and the session runs on."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import hipep
from hipep.runtime.cuda import cuda_status

from gpu_checks import assert_claimed_whole
from helpers import check_runs_against_cpu_ep, cpu_session, make_model, tensor
from selection_inputs import clustered_boxes, random_boxes, tied_scores

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

INPUTS = ("boxes", "scores", "max_out", "iou", "score_threshold")


def nms_model(center: int, batches: int, classes: int, n: int, present=INPUTS, scalar_rank: int = 1,
              constants: dict | None = None):
    """One NonMaxSuppression node: boxes [batches, n, 4], scores [batches, classes, n]; inputs not in
    `present` left out; `constants` (name -> array) as initializers instead of graph inputs."""
    constants = constants or {}
    shapes = {"boxes": [batches, n, 4], "scores": [batches, classes, n]}
    elem = {"max_out": TP.INT64}
    names = [name if name in present else "" for name in INPUTS]
    while not names[-1]:
        names.pop()
    node = helper.make_node("NonMaxSuppression", names, ["selected"], center_point_box=center, name="nms")
    inputs = [tensor(name, elem.get(name, TP.FLOAT), shapes.get(name, [1] * scalar_rank))
              for name in names if name and name not in constants]
    inits = [numpy_helper.from_array(v, k) for k, v in constants.items()]
    return make_model([node], inputs, [tensor("selected", TP.INT64, None)], inits, opset=11)


def feeds_for(rng, center, batches, classes, n, limit, iou, threshold=None, scalar_rank=1):
    shape = [1] * scalar_rank
    out = {"boxes": random_boxes(rng, batches, n, center), "scores": tied_scores(rng, batches, classes, n),
           "max_out": np.full(shape, limit, np.int64), "iou": np.full(shape, iou, np.float32)}
    if threshold is not None:
        out["score_threshold"] = np.full(shape, threshold, np.float32)
    return out


# At most 64 elements each: what the host reads of a value handed in.
SHAPES = [(1, 4, 16), (2, 3, 8), (1, 1, 1), (2, 2, 5)]
LIMITS = [(3, 0.5), (1, 0.3), (0, 0.5), (100, 0.0), (100, 1.0), (4, 0.7)]


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("with_threshold", [False, True], ids=["no-threshold", "threshold"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_selections_follow_the_cpu_ep(center, with_threshold, shape):
    present = INPUTS if with_threshold else INPUTS[:4]
    model = nms_model(center, *shape, present=present)
    assert_claimed_whole(model)
    rng = np.random.default_rng(sum(shape) + center)
    check_runs_against_cpu_ep(model, [feeds_for(rng, center, *shape, limit, iou, 0.3 if with_threshold else None)
                                      for limit, iou in LIMITS])


def test_scalars_of_rank_0_and_inputs_left_out():
    rng = np.random.default_rng(1)
    model = nms_model(0, 2, 3, 8, present=("boxes", "scores", "max_out", "score_threshold"), scalar_rank=0)
    assert_claimed_whole(model)
    feeds = [feeds_for(rng, 0, 2, 3, 8, limit, 0.0, 0.25, scalar_rank=0) for limit in (2, 8, 0)]
    check_runs_against_cpu_ep(model, [{k: v for k, v in f.items() if k != "iou"} for f in feeds])
    # no max_output_boxes_per_class: nothing selected
    model = nms_model(1, 1, 2, 8, present=("boxes", "scores"))
    assert_claimed_whole(model)
    check_runs_against_cpu_ep(model, [{k: v for k, v in feeds_for(rng, 1, 1, 2, 8, 0, 0.0).items()
                                       if k in ("boxes", "scores")}])


def _backend_cases():
    from conformance import support

    return sorted((i for i in support.catalog().values() if i.name.startswith("test_nonmaxsuppression")),
                  key=lambda i: i.name)


@pytest.mark.parametrize("info", _backend_cases(), ids=lambda i: i.name)
def test_the_onnx_backend_cases(info):
    from conformance import support

    model, data_sets = support.load_case(info)
    assert_claimed_whole(model)
    names = [i.name for i in model.graph.input]
    sess = check_runs_against_cpu_ep(model, [dict(zip(names, map(np.asarray, ins))) for ins, _ in data_sets])
    for ins, outs in data_sets:
        np.testing.assert_array_equal(sess.run(None, dict(zip(names, map(np.asarray, ins))))[0], outs[0])


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("shape", [(1, 4, 256), (2, 4, 128)], ids=lambda s: "x".join(map(str, s)))
def test_hundreds_of_constant_overlapping_boxes(center, shape):
    """Boxes and scores as initializers of up to 1024 elements (constants of the plan, which the
    host reads): a block of the binding's largest size, most boxes overlapping some other."""
    batches, classes, n = shape
    rng = np.random.default_rng(7 + center + n)
    constants = {"boxes": clustered_boxes(rng, batches, n, center),
                 "scores": tied_scores(rng, batches, classes, n, levels=100)}
    model = nms_model(center, batches, classes, n, constants=constants)
    assert_claimed_whole(model)
    feeds = [{"max_out": np.array([limit], np.int64), "iou": np.array([iou], np.float32),
              "score_threshold": np.array([threshold], np.float32)}
             for limit, iou, threshold in ((1000, 0.5, 0.0), (1000, 0.1, 0.5), (5, 0.7, 0.2), (0, 0.5, 0.0),
                                           (1000, 1.0, 0.9))]
    check_runs_against_cpu_ep(model, feeds)


def test_inputs_bound_as_device_values():
    """The inputs as device OrtValues and the output bound to the device: the host still reads the
    values, which size the output, and the kernel selects from the device's copies."""
    model = nms_model(1, 2, 3, 8)
    data = model.SerializeToString()
    sess = hipep.InferenceSession(data, device="cuda", disable_cpu_ep_fallback=True)
    ref = cpu_session(data)
    rng = np.random.default_rng(11)
    for limit, iou in ((3, 0.5), (8, 0.2), (0, 0.5)):
        feeds = feeds_for(rng, 1, 2, 3, 8, limit, iou, 0.1)
        want = ref.run(None, feeds)[0]
        binding = sess.io_binding()
        for k, v in feeds.items():
            binding.bind_ortvalue_input(k, ort.OrtValue.ortvalue_from_numpy(v, "cuda", 0))
        binding.bind_output("selected", "cuda", 0)
        sess.run_with_iobinding(binding)
        np.testing.assert_array_equal(binding.get_outputs()[0].numpy(), want)


def test_boxes_computed_on_the_device_leave_it_to_ort():
    """Boxes from a device kernel (an Add) are not values the host knows before the launches: ORT's
    CPU EP runs the NonMaxSuppression, hipep the Add, and the selection is ORT's."""
    node = helper.make_node("NonMaxSuppression", ["moved", "scores", "max_out", "iou"], ["selected"], name="nms")
    add = helper.make_node("Add", ["boxes", "offset"], ["moved"], name="move")
    model = make_model([add, node], [tensor("boxes", TP.FLOAT, [1, 8, 4]), tensor("offset", TP.FLOAT, [1, 8, 4]),
                                     tensor("scores", TP.FLOAT, [1, 2, 8]), tensor("max_out", TP.INT64, [1]),
                                     tensor("iou", TP.FLOAT, [1])],
                       [tensor("selected", TP.INT64, None)], opset=11)
    report = hipep.explain(model, device="cuda")
    assert [r.node.name for r in report.rejections] == ["nms"]
    assert "computed on the device by node 'move'" in report.rejections[0].reason
    rng = np.random.default_rng(12)
    feeds = [{**{k: v for k, v in feeds_for(rng, 0, 1, 2, 8, 4, 0.4).items()},
              "offset": rng.uniform(-0.5, 0.5, (1, 8, 4)).astype(np.float32)} for _ in range(2)]
    check_runs_against_cpu_ep(model, feeds, whole=False)


def test_an_iou_threshold_out_of_range_is_an_error_and_the_session_runs_on():
    model = nms_model(0, 2, 3, 8)
    sess = hipep.InferenceSession(model.SerializeToString(), device="cuda", disable_cpu_ep_fallback=True)
    rng = np.random.default_rng(13)
    feeds = feeds_for(rng, 0, 2, 3, 8, 3, 1.5, 0.2)
    with pytest.raises(Exception, match=r"node 'nms' \(NonMaxSuppression\).*iou_threshold must be within \[0, 1\]"):
        sess.run(None, feeds)
    feeds["iou"] = np.array([0.5], np.float32)
    np.testing.assert_array_equal(sess.run(None, feeds)[0], cpu_session(model).run(None, feeds)[0])
