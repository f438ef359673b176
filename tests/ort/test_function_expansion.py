"""ONNX function ops hipep has no entry for (Swish, the losses, CenterCropPad), which ORT replaces by
their function bodies when no EP takes them: hipep claims such a node whole and compiles its body,
fused with its neighbours, where the body runs on its device with no host read but of constants;
otherwise (on a GPU, bodies with shape arithmetic) it leaves the node for ORT to inline and claims
the body then. explain says which, strict=1 accepts both, and results are the CPU EP's.

A function op ORT's CPU EP has a kernel for is never inlined by ORT: hipep runs such a node through
its body where it can, else leaves it with the reason. AffineGrid was such an op until hipep gave
it a registry entry (hipep.ops.grid_sample); the tests of that path take hipep without the entry
(the `without_affine_grid_entry` fixture), the partitioner's rules being the same for any such op."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T, helper as h

import hipep
import hipep.bridge
from hipep.functions import function_body
from hipep.graph import GraphView
from hipep.ops import registry
from hipep.ops.registry import lookup
from hipep.partition import partition

from helpers import assert_matches_cpu, assignment, cpu_ep, make_model, plain_ort_session, session, tensor

CPU_EP = cpu_ep()


def swish_model(alpha=1.5, elem=T.FLOAT):
    return make_model([h.make_node("Swish", ["x"], ["y"], alpha=alpha, name="swish")],
                      [tensor("x", elem, [3, 4])], [tensor("y", elem, [3, 4])], opset=24)


def cross_entropy_model(reduction="mean", weighted=True, ignore_index=2):
    """SoftmaxCrossEntropyLoss: its body holds a NegativeLogLikelihoodLoss, itself a function."""
    inputs = ["x", "t"] + (["w"] if weighted else [])
    node = h.make_node("SoftmaxCrossEntropyLoss", inputs, ["loss", "log_prob"], reduction=reduction,
                       ignore_index=ignore_index, name="sce")
    return make_model([node], [tensor("x", T.FLOAT, [2, 3, 4]), tensor("t", T.INT64, [2, 4]),
                               tensor("w", T.FLOAT, [3])][:len(inputs)],
                      [tensor("loss", T.FLOAT, None), tensor("log_prob", T.FLOAT, [2, 3, 4])], opset=13)


def hann_model(op="HannWindow", **attrs):
    """HannWindow (or another window): a function op ORT's CPU EP has a kernel for, so ORT never
    expands it; hipep has a registry entry of its own for it."""
    return make_model([h.make_node(op, ["n"], ["y"], name="window", **attrs)], [tensor("n", T.INT64, [])],
                      [tensor("y", T.FLOAT, None)], opset=17)


def affine_grid_model(dims, align_corners):
    """AffineGrid: a function op ORT's CPU EP has a kernel for, whose body branches (If) on the
    grid's rank and reads the body's values from inside its branches."""
    n, rank = 2, len(dims)
    node = h.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align_corners, name="affine")
    return make_model([node], [tensor("theta", T.FLOAT, [n, rank, rank + 1])], [tensor("grid", T.FLOAT, None)],
                      [h.make_tensor("size", T.INT64, [rank + 2], [n, 3, *dims])], opset=20)


@pytest.fixture
def without_affine_grid_entry(monkeypatch):
    """hipep as it is without its AffineGrid entry: a function op ORT's CPU EP has a kernel for,
    whose body branches (If) on the grid's rank and reads the grid's size on the host."""
    assert lookup("", "AffineGrid") is not None
    monkeypatch.delitem(registry._REGISTRY, ("", "AffineGrid"))


def test_the_ops_are_functions_hipep_has_no_entry_for(without_affine_grid_entry):
    for op in ("Swish", "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss", "AffineGrid"):
        assert lookup("", op) is None, f"{op} has a registry entry now; these tests need another op"


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_with_its_entry_affine_grid_is_an_op_of_its_own(device):
    report = hipep.explain(affine_grid_model((4, 5), 0), device=device)
    assert report.all_claimed and not report.expansions and not report.rejections


def test_function_body_substitutes_attributes_and_follows_input_types():
    graph = GraphView.from_onnx(swish_model(alpha=2.5))
    body = function_body(graph.nodes[0], graph)
    assert [n.op_type for n in body.nodes] == ["CastLike", "Mul", "Sigmoid", "Mul"]
    assert body.inputs == ["x"] and body.outputs == ["y"]
    alpha = [v for v in body.constants.values() if v.dtype == np.float32]
    assert [float(a) for a in alpha] == [2.5]
    # a context-dependent body: the weighted mean divides by the gathered weights' sum
    nll = make_model([h.make_node("NegativeLogLikelihoodLoss", ["x", "t", "w"], ["y"], ignore_index=1)],
                     [tensor("x", T.FLOAT, [2, 3]), tensor("t", T.INT64, [2]), tensor("w", T.FLOAT, [3])],
                     [tensor("y", T.FLOAT, [])], opset=13)
    graph = GraphView.from_onnx(nll)
    ops = [n.op_type for n in function_body(graph.nodes[0], graph).nodes]
    assert "GatherElements" in ops and ops.count("ReduceSum") == 2 and ops[-1] == "Div"
    # not a function: no body
    plain = GraphView.from_onnx(make_model([h.make_node("Det", ["x"], ["y"])], [tensor("x", T.FLOAT, [2, 2])],
                                           [tensor("y", T.FLOAT, [])]))
    assert function_body(plain.nodes[0], plain) is None


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_explain_claims_function_nodes_whose_bodies_hipep_runs(device):
    report = hipep.explain(swish_model(), device=device)
    assert report.all_claimed and not report.rejections and report.claimed_count == 1
    (expansion,) = report.expansions
    assert expansion.node.name == "swish" and expansion.direct and expansion.body.claimed_total == 4
    assert "node 'swish' (ai.onnx::Swish, opset 24): a function, run as its body" in report.format()


def test_a_body_that_needs_host_reads_on_a_gpu_is_left_for_ort_to_expand():
    """SoftmaxCrossEntropyLoss's body reshapes by a Shape of its input: host work on shapes, which
    the partitioner's GPU checks would have to see node by node. On the GPU hipep leaves the node
    for ORT to inline and claims the body then; on the CPU device it claims the node whole, and
    the NegativeLogLikelihoodLoss inside its body is a function run as its body in turn."""
    report = hipep.explain(cross_entropy_model(), device="cuda")
    assert report.all_claimed and report.claimed_count == 0 and not report.expansions[0].direct
    assert "left for ORT to expand (1)" in report.format()
    report = hipep.explain(cross_entropy_model(), device="cpu")
    (outer,) = report.expansions
    assert outer.direct and report.claimed_count == 1
    (inner,) = outer.body.expansions
    assert inner.node.op_type == "NegativeLogLikelihoodLoss" and inner.direct


def test_a_function_op_ort_has_a_kernel_for_is_claimed_whole_or_left_with_the_reason(without_affine_grid_entry):
    """ORT never replaces AffineGrid by its body (its CPU EP has a kernel), so hipep claims the node
    whole where its body runs alone on the device (the CPU device), and leaves it on a GPU, where
    the body's If on the grid's rank is control flow the host runs, saying so."""
    model = affine_grid_model((4, 5), 0)
    report = hipep.explain(model)
    assert report.all_claimed and report.expansions[0].direct
    report = hipep.explain(model, device="cuda")
    assert not report.all_claimed and not report.expansions
    line = report.rejections[0].line()
    assert "runs on cuda only with host reads" in line and "ONNX Runtime runs its own kernel" in line
    # told that ORT would expand it, the partitioner leaves it for ORT to expand instead
    graph = GraphView.from_onnx(model)
    expansion, = partition(graph, device="cuda").expansions
    assert not expansion.direct
    assert not partition(graph, device="cuda", expands=lambda node, graph: False).expansions


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
def test_window_functions_run_on_hipep_with_the_cpu_eps_window(op, periodic):
    """The window functions have registry entries (hipep.ops.signal): the node is hipep's, no body,
    and the window the CPU EP's bit for bit."""
    model = hann_model(op, periodic=periodic, output_datatype=T.FLOAT)
    assert not hipep.explain(model).expansions
    sess = session(model, disable_fallback=True)
    assert assignment(sess) == {CPU_EP: [["window"]]}
    for n in (1, 8, 33):
        assert_matches_cpu(sess, model, {"n": np.array(n, np.int64)}, rtol=0, atol=0)


def test_a_body_whose_branches_read_its_values_keeps_their_names_joined(without_affine_grid_entry):
    """The body's values get the node's prefix inside its If branches too: every value a branch
    reads is the body's input, one of its values or the branch's own."""
    graph = GraphView.from_onnx(affine_grid_model((4, 5), 0))
    body = function_body(graph.nodes[0], graph)
    known = set(body.inputs) | set(body.constants) | {v for n in body.nodes for v in n.outputs}
    branches = [b for n in body.nodes for b in n.subgraphs.values()]
    assert branches
    for b in branches:
        own = set(b.inputs) | set(b.constants) | {v for n in b.nodes for v in n.outputs}
        reads = {v for n in b.nodes for v in n.inputs if v}
        assert reads <= known | own, reads - known - own
        assert all(v.startswith("grid/AffineGrid/") for v in reads - own - {"theta", "size"})


@pytest.mark.parametrize("dims", [(4, 5), (2, 3, 4)])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_affine_grid_runs_on_hipep_through_its_body(rng, dims, align_corners, without_affine_grid_entry):
    model = affine_grid_model(dims, align_corners)
    sess = session(model, disable_fallback=True)
    assert assignment(sess) == {CPU_EP: [["affine"]]}
    theta = rng.standard_normal((2, len(dims), len(dims) + 1)).astype(np.float32)
    assert_matches_cpu(sess, model, {"theta": theta}, rtol=1e-5, atol=1e-6)


def test_swish_runs_on_hipep_under_strict_with_the_cpu_eps_results(rng):
    model = swish_model()
    sess = plain_ort_session(model, CPU_EP, strict="1")
    x = rng.standard_normal((3, 4)).astype(np.float32) * 4
    got = assert_matches_cpu(sess, model, {"x": x}, rtol=0, atol=0)
    assert got[0].dtype == np.float32
    # hipep runs the node itself (ORT has nothing left to inline)
    sess = session(model, disable_fallback=True)
    assert assignment(sess) == {CPU_EP: [["swish"]]}


def test_function_nodes_fuse_with_their_neighbours(rng):
    """A chain of Swish and Add nodes is one subgraph on hipep (compiled through the Swish bodies),
    not a subgraph per node as ORT's inlining round would leave it."""
    nodes, prev = [], "x"
    for i in range(6):
        nodes += [h.make_node("Swish", [prev], [f"s{i}"], alpha=1.0 + i / 8, name=f"swish{i}"),
                  h.make_node("Add", [f"s{i}", "x"], [f"a{i}"], name=f"add{i}")]
        prev = f"a{i}"
    model = make_model(nodes, [tensor("x", T.FLOAT, [4, 16])], [tensor(prev, T.FLOAT, [4, 16])], opset=24)
    for device in ("cpu", "cuda"):
        assert [len(c) for c in hipep.explain(model, device=device).clusters] == [12]
    sess = session(model, disable_fallback=True)
    assert [len(sub) for sub in assignment(sess)[CPU_EP]] == [12]
    assert_matches_cpu(sess, model, {"x": rng.standard_normal((4, 16)).astype(np.float32)}, rtol=0, atol=0)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [True, False])
def test_a_function_inside_a_function_body_runs_as_its_body_too(rng, reduction, weighted):
    model = cross_entropy_model(reduction, weighted)
    feeds = {"x": rng.standard_normal((2, 3, 4)).astype(np.float32), "t": rng.integers(0, 3, (2, 4))}
    if weighted:
        feeds["w"] = rng.random(3).astype(np.float32)
    sess = hipep.InferenceSession(model, device="cpu", strict="1")
    assert_matches_cpu(sess, model, feeds, rtol=1e-6, atol=0)  # the mean's sums: another order


def test_without_ort_to_ask_hipep_runs_a_function_op_through_its_body(monkeypatch, without_affine_grid_entry):
    """Where hipep cannot ask ORT's CPU EP (a host other than onnxruntime's Python module), it
    counts on ORT expanding function nodes, so it claims AffineGrid (which ORT's CPU EP has a
    kernel for) through its body: the CPU EP's grid, to f32 rounding."""
    monkeypatch.setattr(hipep.bridge, "_ort_expands", lambda: None)
    model = affine_grid_model((4, 5), 1)
    sess = plain_ort_session(model, CPU_EP, strict="1")
    theta = np.random.default_rng(5).standard_normal((2, 2, 3)).astype(np.float32)
    assert_matches_cpu(sess, model, {"theta": theta}, rtol=1e-5, atol=1e-6)


def test_nodes_fused_by_an_earlier_call_are_neither_claimed_nor_rejected():
    """ORT asks again about a graph after expanding a function node; the nodes hipep fused before
    are then nodes of its own domain. A path through one keeps clusters apart (convexity)."""
    nodes = [h.make_node("Relu", ["x"], ["a"], name="A"),
             h.make_node("Fused_0", ["a"], ["f"], domain=hipep.EP_NAME, name="F"),
             h.make_node("Add", ["a", "f"], ["c"], name="C")]
    model = make_model(nodes, [tensor("x", T.FLOAT, [4])], [tensor("c", T.FLOAT, [4])],
                       extra_opsets=[(hipep.EP_NAME, 1)])
    graph = GraphView.from_onnx(model, infer_shapes=False)
    graph.types.update({v: graph.types["x"] for v in ("a", "f")})
    report = partition(graph, fused_domain=hipep.EP_NAME)
    assert not report.rejections
    assert sorted(len(c) for c in report.clusters) == [1, 1]


def test_the_body_is_the_newest_function_version_not_above_the_model_opset(rng):
    """NegativeLogLikelihoodLoss's function is defined for opset 22: a model at opset 24 gets that
    body (onnx hands a function out only for a version it defines), as ORT picks it."""
    model = make_model([h.make_node("Swish", ["x"], ["y"], name="sw"),
                        h.make_node("NegativeLogLikelihoodLoss", ["y", "t"], ["loss"], name="nll")],
                       [tensor("x", T.FLOAT, [3, 4]), tensor("t", T.INT64, [3])], [tensor("loss", T.FLOAT, [])],
                       opset=24)
    report = hipep.explain(model)
    assert report.all_claimed and [e.node.name for e in report.expansions if e.direct] == ["sw", "nll"]
    sess = session(model, disable_fallback=True)
    assert assignment(sess) == {CPU_EP: [["sw", "nll"]]}
    assert_matches_cpu(sess, model, {"x": rng.standard_normal((3, 4)).astype(np.float32),
                                     "t": rng.integers(0, 4, 3)}, rtol=1e-6, atol=0)


def test_a_function_node_in_a_branch_runs_as_its_body(rng):
    """An If whose branches hold a Swish: the branch's function node is claimed with the If and
    compiled through its body too."""
    def branch(name, alpha):
        return h.make_graph([h.make_node("Swish", ["x"], [f"{name}_y"], alpha=alpha, name=f"{name}_swish")], name,
                            [], [tensor(f"{name}_y", T.FLOAT, [3, 4])])

    nodes = [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum"),
             h.make_node("Greater", ["s", "zero"], ["c"], name="positive"),
             h.make_node("If", ["c"], ["y"], then_branch=branch("then", 1.0), else_branch=branch("else", 2.0),
                         name="branch")]
    model = make_model(nodes, [tensor("x", T.FLOAT, [3, 4])], [tensor("y", T.FLOAT, [3, 4])],
                       [h.make_tensor("zero", T.FLOAT, [], [0.0])], opset=24)
    assert hipep.explain(model).all_claimed
    sess = session(model, disable_fallback=True)
    for sign in (1.0, -1.0):
        x = (np.abs(rng.standard_normal((3, 4))) * sign).astype(np.float32)
        assert_matches_cpu(sess, model, {"x": x}, rtol=0, atol=0)
