"""AffineGrid (opset 20) on hipep's CPU device through ONNX Runtime: the CPU EP's grid bit for bit
(f32 and f64, 2-D and 3-D, align_corners 0 and 1, one-point axes, an empty batch) with the CPU
fallback disabled and the size a graph input the host reads, the grid feeding a GridSample in one
subgraph, and clear errors for a size and theta that do not agree. The GPU claims the node (its
kernel's runs are tests/gpu/test_gpu_grid_sample.py's)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T, helper as h

import hipep

from helpers import assignment, cpu_ep, cpu_session, make_model, session, tensor
from ort_differences import FOLLOWED, ORT_VERSION

CPU_EP = cpu_ep()
SIZES = [(2, 3, 4, 5), (1, 1, 1, 1), (3, 2, 7, 1), (1, 2, 17, 33), (0, 1, 2, 3), (2, 3, 2, 3, 4), (1, 1, 1, 5, 1),
         (2, 1, 5, 7, 9)]


def affine_model(elem, rank):
    r = rank - 2
    node = h.make_node("AffineGrid", ["theta", "size"], ["grid"], name="affine")
    return make_model([node], [tensor("theta", elem, [None, r, r + 1]), tensor("size", T.INT64, [rank])],
                      [tensor("grid", elem, None)], opset=20)


def feeds(size, dtype, seed=0):
    r = len(size) - 2
    theta = np.random.default_rng(seed).standard_normal((size[0], r, r + 1)).astype(dtype)
    return {"theta": theta, "size": np.array(size, np.int64)}


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("elem", [T.FLOAT, T.DOUBLE], ids=["f32", "f64"])
@pytest.mark.parametrize("rank", [4, 5])
def test_the_cpu_eps_grid_bit_for_bit(elem, rank, align_corners):
    model = affine_model(elem, rank)
    model.graph.node[0].attribute.append(h.make_attribute("align_corners", align_corners))
    sess = session(model, disable_fallback=True)
    assert assignment(sess) == {CPU_EP: [["affine"]]}
    cpu = cpu_session(model)
    dtype = np.float32 if elem == T.FLOAT else np.float64
    for k, size in enumerate(s for s in SIZES if len(s) == rank):
        feed = feeds(size, dtype, k)
        got, want = sess.run(None, feed)[0], cpu.run(None, feed)[0]
        assert got.dtype == want.dtype and got.shape == want.shape == (size[0], *size[2:], rank - 2)
        np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


def test_the_grid_feeds_a_grid_sample_in_one_subgraph():
    """A spatial transformer's sampling step: AffineGrid of a constant size, then GridSample."""
    nodes = [h.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=0, name="affine"),
             h.make_node("GridSample", ["x", "grid"], ["y"], mode="linear", name="sample")]
    size = h.make_tensor("size", T.INT64, [4], [2, 3, 6, 7])
    model = make_model(nodes, [tensor("x", T.FLOAT, [2, 3, 8, 9]), tensor("theta", T.FLOAT, [2, 2, 3])],
                       [tensor("y", T.FLOAT, None)], [size], opset=20)
    sess = session(model, disable_fallback=True)
    assert assignment(sess) == {CPU_EP: [["affine", "sample"]]}
    rng = np.random.default_rng(4)
    feed = {"x": rng.standard_normal((2, 3, 8, 9)).astype(np.float32),
            "theta": (np.eye(2, 3) + 0.2 * rng.standard_normal((2, 2, 3))).astype(np.float32)}
    got, want = sess.run(None, feed)[0], cpu_session(model).run(None, feed)[0]
    assert got.shape == want.shape == (2, 3, 6, 7)
    if ORT_VERSION >= FOLLOWED:
        np.testing.assert_array_equal(got, want)
    else:  # GridSample's bilinear sums in another order before 1.32 (ort_differences.GRID_SAMPLE_ORDER)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert not hipep.explain(model, device="cuda").rejections


def test_a_size_and_theta_that_disagree_are_clear_errors_and_the_session_goes_on():
    sess = hipep.InferenceSession(affine_model(T.FLOAT, 4), device="cpu", strict=True)
    with pytest.raises(Exception, match=r"theta of shape \[3, 2, 3\] for size \[2, 1, 4, 4\]: expected \[2, 2, 3\]"):
        sess.run(None, {"theta": np.zeros((3, 2, 3), np.float32), "size": np.array([2, 1, 4, 4], np.int64)})
    with pytest.raises(Exception, match=r"size\[2\] \(H=0\) must be positive"):
        sess.run(None, {"theta": np.zeros((2, 2, 3), np.float32), "size": np.array([2, 1, 0, 4], np.int64)})
    assert sess.run(None, feeds((2, 1, 4, 4), np.float32))[0].shape == (2, 4, 4, 2)


def test_a_size_of_another_length_than_4_or_5_is_a_clear_error():
    model = affine_model(T.FLOAT, 4)
    model.graph.input[1].type.tensor_type.shape.dim[0].dim_param = "k"
    sess = hipep.InferenceSession(model, device="cpu", strict=True)
    with pytest.raises(Exception, match=r"size must hold 4 extents \(N, C, H, W\) or 5 \(N, C, D, H, W\), got 3"):
        sess.run(None, {"theta": np.zeros((2, 2, 3), np.float32), "size": np.array([2, 4, 4], np.int64)})


@pytest.mark.parametrize("elem", [T.FLOAT, T.DOUBLE])
def test_a_gpu_claims_it(elem):
    report = hipep.explain(affine_model(elem, 5), device="cuda")
    assert report.all_claimed and not report.rejections


def test_f16_runs_through_the_function_body():
    """ORT's CPU EP has no f16 kernel (ORT inlines the body): hipep claims the node whole on the
    CPU device and compiles its function body, as for an op without an entry."""
    model = affine_model(T.FLOAT16, 4)
    report = hipep.explain(model)
    assert report.all_claimed and [e.direct for e in report.expansions] == [True]
    sess = session(model, disable_fallback=True)
    assert assignment(sess) == {CPU_EP: [["affine"]]}
    feed = feeds((2, 1, 4, 5), np.float16)
    got, want = sess.run(None, feed)[0], cpu_session(model).run(None, feed)[0]
    assert got.dtype == np.float16 and got.shape == want.shape == (2, 4, 5, 2)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=0, atol=2e-3)


def test_ort_is_asked_whether_it_has_a_kernel_for_the_nodes_types():
    """ORT replaces a function node by its body where its CPU EP has no kernel for the node's
    version and element types: f32 and f64 AffineGrid have one, f16 not."""
    from hipep.explain import ort_expands
    from hipep.graph import GraphView

    for elem, expanded in ((T.FLOAT, False), (T.DOUBLE, False), (T.FLOAT16, True)):
        graph = GraphView.from_onnx(affine_model(elem, 4))
        assert ort_expands(graph.nodes[0], graph) is expanded, elem
        assert ort_expands(graph.nodes[0]) is False  # types unknown: the version's kernel is taken


def test_f16_on_a_gpu_is_left_for_ort_to_expand():
    """Its body reads the size on the host, so a GPU does not claim the node itself; ORT inlines it
    (no f16 kernel) and hipep claims the body's nodes in the next round."""
    report = hipep.explain(affine_model(T.FLOAT16, 4), device="cuda")
    assert report.all_claimed and report.claimed_count == 0 and not report.expansions[0].direct
    assert "left for ORT to expand (1)" in report.format()
