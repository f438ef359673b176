"""Small float and bool inputs a shape rule reads, on the GPU: Resize's and Upsample's run-time scales
and roi, Range over float bounds, OneHot's float depth, an If on a bool input, and Col2Im's
run-time image_shape and block_shape. The shape program pins the floats and bools
(hipep.runtime.shapes): a run with the same values replays (a specialization hit, no new trace), a
run with other values is traced anew (a new specialization) and its launches bound to the new
values, which the bindings read from the plan's host-visible copy. Every result is compared with
ORT's CPU EP (nearest resizes, Range, OneHot and If exactly; interpolation and Col2Im's sums within
f32 or f16 rounding); every node must be claimed by the cuda device.
tests/unit/test_pinned_host_values.py runs the same rules without a GPU."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper

import hipep
from hipep.runtime.cuda import cuda_status
import gpu_checks
from gpu_checks import assert_claimed_whole
from helpers import cpu_session, make_model, tensor

pytestmark = pytest.mark.gpu
_ok, _why = cuda_status(0)
if not _ok:
    pytest.skip(f"no CUDA device: {_why}", allow_module_level=True)

F32, F16, I64, BOOL = TP.FLOAT, TP.FLOAT16, TP.INT64, TP.BOOL
n = helper.make_node
_COUNTS = ("specializations", "specialization_hits", "host_reads")


class Session:
    """The model on the cuda device (every node claimed) and on ORT's CPU EP."""

    def __init__(self, model):
        assert_claimed_whole(model)
        self.sess = hipep.InferenceSession(model, device="cuda")
        self.cpu = cpu_session(model)

    def run(self, tol: dict | None = None, **feeds) -> dict:
        """One run compared with ORT's CPU EP (exactly, or within `tol`); the run's
        specializations, hits and host reads."""
        feeds = {k: np.asarray(v) for k, v in feeds.items()}
        before = hipep.stats()
        got = self.sess.run(None, feeds)
        after = hipep.stats()
        for g, w in zip(got, self.cpu.run(None, feeds)):
            assert g.dtype == w.dtype and g.shape == w.shape
            if tol is None or g.dtype.kind != "f":
                np.testing.assert_array_equal(g, w)
            else:
                np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), **tol)
        return {k: after.get(k, 0) - before.get(k, 0) for k in _COUNTS}


def _retraces_on_new_values(s: Session, first: dict, second: dict, tol: dict | None = None, reads: int | None = None):
    """first (three runs: the first, a bound replay, a CUDA graph replay), then second (traced
    anew), then first again (its program still holds: no new specialization)."""
    counts = [s.run(tol, **first) for _ in range(3)]
    assert counts[0]["specializations"] == 1 and counts[0]["specialization_hits"] == 0, counts
    assert all(c["specializations"] == 0 and c["specialization_hits"] == 1 for c in counts[1:]), counts
    if reads is not None:
        assert all(c["host_reads"] == reads for c in counts), counts
    again = [s.run(tol, **second) for _ in range(2)]
    assert again[0]["specializations"] == 1 and again[1]["specialization_hits"] == 1, again
    back = s.run(tol, **first)
    assert back["specializations"] == 0 and back["specialization_hits"] == 1, back


def _x(shape, elem=F32):
    return np.random.default_rng(5).uniform(-2, 2, shape).astype(np.float16 if elem == F16 else np.float32)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("elem", [F32, F16])
def test_resize_with_run_time_scales(mode, elem):
    model = make_model([n("Resize", ["x", "", "scales"], ["y"], mode=mode)],
                       [tensor("x", elem, [1, 2, 5, 6]), tensor("scales", F32, [4])], [tensor("y", elem, None)],
                       opset=19)
    x = _x((1, 2, 5, 6), elem)
    tol = None if mode == "nearest" else gpu_checks.tolerance(elem)
    _retraces_on_new_values(Session(model), {"x": x, "scales": np.array([1, 1, 2, 1.5], np.float32)},
                            {"x": x, "scales": np.array([1, 1, 0.6, 0.5], np.float32)}, tol, reads=4)


def test_the_same_extents_from_other_scales_rebind():
    # 2.0 and 2.1 both give floor(5 * s) = 10 rows, with other source coordinates: the binding
    # must take the new scales
    model = make_model([n("Resize", ["x", "", "scales"], ["y"], mode="linear")],
                       [tensor("x", F32, [1, 1, 5, 5]), tensor("scales", F32, [4])], [tensor("y", F32, None)], opset=19)
    x = _x((1, 1, 5, 5))
    _retraces_on_new_values(Session(model), {"x": x, "scales": np.array([1, 1, 2, 2], np.float32)},
                            {"x": x, "scales": np.array([1, 1, 2.1, 2.1], np.float32)}, gpu_checks.tolerance(F32))


def test_resize_tf_crop_and_resize_with_a_run_time_roi():
    model = make_model([n("Resize", ["x", "roi", "scales"], ["y"], mode="linear",
                          coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-3.0)],
                       [tensor("x", F32, [1, 1, 6, 6]), tensor("roi", F32, [8]), tensor("scales", F32, [4])],
                       [tensor("y", F32, None)], opset=19)
    x, scales = _x((1, 1, 6, 6)), np.array([1, 1, 1.5, 1.5], np.float32)
    _retraces_on_new_values(Session(model), {"x": x, "roi": np.array([0, 0, 0.2, 0.1, 1, 1, 0.8, 0.9], np.float32),
                                             "scales": scales},
                            {"x": x, "roi": np.array([0, 0, -0.4, 0, 1, 1, 1.3, 1], np.float32), "scales": scales},
                            gpu_checks.tolerance(F32), reads=12)


def test_upsample_9_with_run_time_scales():
    model = make_model([n("Upsample", ["x", "scales"], ["y"], mode="nearest")],
                       [tensor("x", F32, [1, 2, 3, 4]), tensor("scales", F32, [4])], [tensor("y", F32, None)], opset=9)
    x = _x((1, 2, 3, 4))
    _retraces_on_new_values(Session(model), {"x": x, "scales": np.array([1, 1, 2, 3], np.float32)},
                            {"x": x, "scales": np.array([1, 2, 1.5, 1], np.float32)})


@pytest.mark.parametrize("elem, dtype", [(F32, np.float32), (F16, np.float16)])
def test_range_over_float_bounds(elem, dtype):
    model = make_model([n("Range", ["start", "limit", "delta"], ["y"])],
                       [tensor(k, elem, []) for k in ("start", "limit", "delta")], [tensor("y", elem, None)],
                       opset=11 if elem == F32 else 27)
    bounds = {"start": dtype(-1.5), "limit": dtype(7), "delta": dtype(0.75)}
    _retraces_on_new_values(Session(model), bounds, {**bounds, "delta": dtype(0.25)}, reads=3)


def test_one_hot_with_a_float_depth():
    model = make_model([n("OneHot", ["indices", "depth", "values"], ["y"], axis=1)],
                       [tensor("indices", I64, [2, 3]), tensor("depth", F32, []), tensor("values", F32, [2])],
                       [tensor("y", F32, None)], opset=11)
    idx, values = np.array([[0, 3, -1], [5, -7, 2]], np.int64), np.array([-1, 4], np.float32)
    _retraces_on_new_values(Session(model), {"indices": idx, "depth": np.float32(4), "values": values},
                            {"indices": idx, "depth": np.float32(6.7), "values": values})


def test_if_on_a_bool_input():
    def branch(name, op):
        return helper.make_graph([n(op, ["x", "one"], [f"{name}_y"])], name, [], [tensor(f"{name}_y", F32, [2, 3])])

    model = make_model([n("If", ["cond"], ["y"], then_branch=branch("then", "Add"), else_branch=branch("else", "Mul"))],
                       [tensor("x", F32, [2, 3]), tensor("cond", BOOL, [])], [tensor("y", F32, [2, 3])],
                       [helper.make_tensor("one", F32, [], [3.0])], opset=17)
    x = _x((2, 3))
    _retraces_on_new_values(Session(model), {"x": x, "cond": np.array(True)}, {"x": x, "cond": np.array(False)},
                            reads=1)


def test_col2im_with_run_time_image_and_block_shapes():
    model = make_model([n("Col2Im", ["x", "image_shape", "block_shape"], ["y"], strides=[1, 1])],
                       [tensor("x", F32, [1, "ck", "l"]), tensor("image_shape", I64, [2]),
                        tensor("block_shape", I64, [2])], [tensor("y", F32, None)], opset=18)
    rng = np.random.default_rng(9)
    # 2 channels of 2 x 2 blocks over 3 x 4 windows of a 4 x 5 image, then of 2 x 3 blocks over 4 x 3
    # windows of a 5 x 5 image: 12 windows each
    first = {"x": rng.uniform(-1, 1, (1, 8, 12)).astype(np.float32), "image_shape": np.array([4, 5], np.int64),
             "block_shape": np.array([2, 2], np.int64)}
    second = {"x": rng.uniform(-1, 1, (1, 12, 12)).astype(np.float32), "image_shape": np.array([5, 5], np.int64),
              "block_shape": np.array([2, 3], np.int64)}
    _retraces_on_new_values(Session(model), first, second, gpu_checks.tolerance(F32))


def test_scales_bound_in_device_memory_are_read_by_the_host():
    """IOBinding with the scales as a device OrtValue: the shape program reads them from device
    memory each run (host reads), and a new value bound there is traced anew."""
    model = make_model([n("Resize", ["x", "", "scales"], ["y"], mode="nearest")],
                       [tensor("x", F32, [1, 1, 3, 3]), tensor("scales", F32, [4])], [tensor("y", F32, None)],
                       opset=19)
    sess, cpu = hipep.InferenceSession(model, device="cuda"), cpu_session(model)
    x = _x((1, 1, 3, 3))
    for scales in ([1, 1, 2, 2], [1, 1, 2, 2], [1, 1, 3, 1]):
        scales = np.array(scales, np.float32)
        binding = sess.io_binding()
        binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0))
        binding.bind_ortvalue_input("scales", ort.OrtValue.ortvalue_from_numpy(scales, "cuda", 0))
        binding.bind_output("y", "cuda", 0)
        before = hipep.stats().get("host_reads", 0)
        sess.run_with_iobinding(binding)
        assert hipep.stats().get("host_reads", 0) - before == 4
        np.testing.assert_array_equal(binding.get_outputs()[0].numpy(),
                                      cpu.run(None, {"x": x, "scales": scales})[0])
