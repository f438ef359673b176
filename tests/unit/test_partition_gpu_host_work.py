"""Partitioning for a GPU device: a node without a GPU program is claimed only where it runs as
host work, and host work needs host values of its own subgraph (values crossing subgraphs arrive
from ORT in device memory). Runs without a GPU: the claims read the kernel table only.

Compress stands for an op without a GPU program here: the tests that need one take it out of the
kernel table (`no_gpu_compress`), since every registry op outside control flow and shape queries
has a program now."""
from __future__ import annotations

import pytest
from onnx import TensorProto as T, helper as h

import hipep
from hipep.graph import GraphView
from hipep.partition import partition
from hipep.runtime import gpu_kernels

from helpers import make_model, tensor


@pytest.fixture
def no_gpu_compress(monkeypatch):
    monkeypatch.delitem(gpu_kernels.BINDINGS, "::Compress")


def _labels(report, graph):
    by_index = {n.index: n for n in graph.nodes}
    return [[by_index[i].op_type for i in c] for c in report.clusters]


def _rejected(report) -> dict[str, str]:
    return {r.node.op_type: r.reason for r in report.rejections}


def if_outputs_feed_host_work_model(condition: str = "data"):
    """An If yields integers that a Compress (no GPU program) reads (AffineGrid's expanded
    form feeds Range from such an If). condition="data": the If's condition is computed from x's
    values (ReduceSum > 0), so a GPU leaves the If to another EP and its results come from there;
    "shape": from x's size, so a GPU claims the If, whose results are then device values."""
    then = h.make_graph([h.make_node("Constant", [], ["a"], value=h.make_tensor("va", T.INT64, [2], [3, 4]))],
                        "then", [], [tensor("a", T.INT64, [2])])
    other = h.make_graph([h.make_node("Constant", [], ["b"], value=h.make_tensor("vb", T.INT64, [2], [5, 6]))],
                         "else", [], [tensor("b", T.INT64, [2])])
    if condition == "shape":
        test = [h.make_node("Size", ["x"], ["n"]), h.make_node("Equal", ["n", "four"], ["is_four"])]
    else:
        test = [h.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
                h.make_node("Greater", ["total", "zero"], ["is_four"])]
    nodes = test + [
        h.make_node("If", ["is_four"], ["dims"], then_branch=then, else_branch=other),
        h.make_node("Compress", ["dims", "keep"], ["y"], axis=0),
    ]
    inits = [h.make_tensor("four", T.INT64, [], [4]), h.make_tensor("keep", T.BOOL, [2], [1, 1]),
             h.make_tensor("zero", T.FLOAT, [], [0.0])]
    return make_model(nodes, [tensor("x", T.FLOAT, [2, 2])], [tensor("y", T.INT64, [2])], inits)


def host_value_crossing_subgraphs_model():
    """Shape(x) lands in one subgraph; the Concat reading it is pushed into a second one by a path
    through an unclaimed GlobalLpPool; the Compress (no GPU program) after the Concat reads a value that
    reached the second subgraph in device memory."""
    nodes = [
        h.make_node("Shape", ["x"], ["xs"]),
        h.make_node("Relu", ["x"], ["r"]),
        h.make_node("GlobalLpPool", ["r"], ["d"]),  # no hipep implementation: another EP runs it
        h.make_node("Shape", ["d"], ["ds"]),
        h.make_node("Concat", ["xs", "ds"], ["cat"], axis=0),
        h.make_node("Compress", ["cat", "keep"], ["y"], axis=0),
    ]
    return make_model(nodes, [tensor("x", T.FLOAT, [1, 3, 3])], [tensor("y", T.INT64, [2])],
                      [h.make_tensor("keep", T.BOOL, [2], [1, 1])])


def test_results_of_a_rejected_node_are_no_host_values(no_gpu_compress):
    g = GraphView.from_onnx(if_outputs_feed_host_work_model("data"))
    report = partition(g, device="cuda")
    rejected = _rejected(report)
    assert "depends on the value of input 0 'is_four', computed on the device" in rejected["If"], rejected
    assert rejected["Compress"].startswith("no kernel for cuda: Compress")
    # on the CPU device everything is claimed
    assert not partition(g, device="cpu").rejections


def test_results_of_a_claimed_if_are_device_values(no_gpu_compress):
    """An If on a shape condition is claimed on a GPU, but its results are written by its branch
    (device memory): the host work after it cannot read them, and is left to another EP."""
    g = GraphView.from_onnx(if_outputs_feed_host_work_model("shape"))
    rejected = _rejected(partition(g, device="cuda"))
    assert set(rejected) == {"Compress"} and rejected["Compress"].startswith("no kernel for cuda: Compress"), rejected


def test_host_work_whose_host_input_is_in_another_subgraph_is_not_claimed(no_gpu_compress):
    g = GraphView.from_onnx(host_value_crossing_subgraphs_model())
    cpu = partition(g, device="cpu")
    assert "Compress" not in _rejected(cpu)
    report = partition(g, device="cuda")
    reason = _rejected(report).get("Compress", "")
    assert "cannot run as host work" in reason and "'cat'" in reason, report.format()
    assert len(report.clusters) == 2, report.format()
    # the rest stays claimed as before
    assert set(_rejected(report)) == {"GlobalLpPool", "Compress"}


def test_host_work_within_its_subgraph_stays_claimed():
    # Shape -> Gather -> Range (host work on a GPU) in one subgraph: nothing to refuse.
    nodes = [
        h.make_node("Shape", ["x"], ["s"]),
        h.make_node("Gather", ["s", "one"], ["n"], axis=0),
        h.make_node("CumSum", ["s", "zero"], ["c"]),
        h.make_node("Add", ["c", "n"], ["y"]),
    ]
    model = make_model(nodes, [tensor("x", T.FLOAT, [2, 3])], [tensor("y", T.INT64, [2])],
                       [h.make_tensor("one", T.INT64, [], [1]), h.make_tensor("zero", T.INT64, [], [0])])
    report = hipep.explain(model, device="cuda")
    assert report.all_claimed, report.format()
    assert len(report.clusters) == 1


def shape_inside_a_branch_model(then_tail: str = "Reshape"):
    """An If on x's size (a shape condition) whose then-branch reads x's extents: Shape(x), the two
    extents swapped (Gather: host work on integers), then x reshaped to them. With
    then_tail="Compress" the branch ends in an op without a GPU kernel whose result is float."""
    then_nodes = [h.make_node("Shape", ["x"], ["s"]),
                  h.make_node("Gather", ["s", "swap"], ["swapped"], axis=0),
                  h.make_node("Reshape", ["x", "swapped"], ["t"])]
    if then_tail == "Compress":
        then_nodes.append(h.make_node("Compress", ["t", "keep"], ["c"], axis=0))
    out = "c" if then_tail == "Compress" else "t"
    then = h.make_graph(then_nodes, "then", [], [tensor(out, T.FLOAT, None)],
                        initializer=[h.make_tensor("swap", T.INT64, [2], [1, 0]),
                                     h.make_tensor("keep", T.BOOL, [3], [1, 0, 1])])
    other = h.make_graph([h.make_node("Identity", ["x"], ["i"])], "else", [], [tensor("i", T.FLOAT, None)])
    nodes = [h.make_node("Size", ["x"], ["size"]), h.make_node("Equal", ["size", "six"], ["is_six"]),
             h.make_node("If", ["is_six"], ["y"], then_branch=then, else_branch=other)]
    return make_model(nodes, [tensor("x", T.FLOAT, [None, None])], [tensor("y", T.FLOAT, None)],
                      [h.make_tensor("six", T.INT64, [], [6])])


def test_host_work_inside_an_if_branch_is_claimed_with_the_if(no_gpu_compress):
    """Shape of a device value inside a GPU branch reads its extents only, and integer work on its
    result is host work there too (AffineGrid's expanded form): the If is claimed; a branch node
    without a kernel that is no such host work still keeps the If off the GPU, named."""
    report = hipep.explain(shape_inside_a_branch_model(), device="cuda")
    assert report.all_claimed, report.format()
    rejected = _rejected(partition(GraphView.from_onnx(shape_inside_a_branch_model("Compress")), device="cuda"))
    assert "its then_branch graph has a node the cuda device cannot run" in rejected["If"], rejected
    assert "(Compress): no kernel for cuda: Compress" in rejected["If"]
