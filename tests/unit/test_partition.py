"""Partitioner: claims, rejections with reasons, and convex clustering."""
from __future__ import annotations

import random

import onnx
from onnx import TensorProto, helper

from hipep.graph import GraphView, Node
from hipep.partition import PartitionReport, partition, topological_order

F32 = TensorProto.FLOAT


# ---- helpers --------------------------------------------------------------------------------

def node(index, op, inputs, outputs, name=None, domain="", implicit=()):
    return Node(index=index, name=f"n{index}" if name is None else name, op_type=op, domain=domain,
                since_version=1, inputs=list(inputs), outputs=list(outputs),
                implicit_inputs=list(implicit))


def graph(nodes, inputs=("x",), outputs=None, name="g"):
    outputs = list(outputs) if outputs is not None else [nodes[-1].outputs[0]]
    return GraphView(name=name, nodes=list(nodes), inputs=list(inputs), outputs=outputs,
                     types={}, constants={}, weights=set())


def claim_ops(*ops):
    """A claim function: claims nodes whose op_type is in `ops`, rejects the rest."""
    def claim(n, g):
        return None if n.op_type in ops else f"{n.op_type} is not supported here"
    return claim


claim_c = claim_ops("C")


def successors(g: GraphView) -> dict[int, set[int]]:
    prod = {o: n.index for n in g.nodes for o in n.outputs if o}
    succ: dict[int, set[int]] = {n.index: set() for n in g.nodes}
    for n in g.nodes:
        for v in list(n.inputs) + list(n.implicit_inputs):
            if v in prod and prod[v] != n.index:
                succ[prod[v]].add(n.index)
    return succ


def is_convex(members: set[int], succ: dict[int, set[int]]) -> bool:
    """No path from a member through at least one non-member back to a member."""
    stack = [s for m in members for s in succ[m] if s not in members]
    seen = set(stack)
    while stack:
        v = stack.pop()
        for s in succ[v]:
            if s in members:
                return False
            if s not in seen:
                seen.add(s)
                stack.append(s)
    return True


def check_report(g: GraphView, report: PartitionReport, claim) -> None:
    """Every invariant a report must hold, for any graph and claim function."""
    succ = successors(g)
    claimed = {n.index for n in g.nodes if claim(n, g) is None}
    in_clusters = [i for c in report.clusters for i in c]
    assert sorted(in_clusters) == sorted(claimed), "each claimed node in exactly one cluster"
    assert all(report.clusters), "no empty clusters"
    assert [r.node.index for r in report.rejections] == [n.index for n in g.nodes if n.index not in claimed]
    assert report.total_nodes == len(g.nodes)
    assert report.claimed_count == len(claimed)
    for c in report.clusters:
        assert is_convex(set(c), succ), f"cluster {c} is not convex"
        # members listed in topological order: no member feeds an earlier-listed member
        pos = {i: k for k, i in enumerate(c)}
        for i in c:
            assert all(pos[s] > pos[i] for s in succ[i] if s in pos)
    # maximal: no two clusters can be merged and stay convex
    for a in range(len(report.clusters)):
        for b in range(a + 1, len(report.clusters)):
            merged = set(report.clusters[a]) | set(report.clusters[b])
            assert not is_convex(merged, succ), f"clusters {a} and {b} could be fused"


# ---- shapes of graphs ------------------------------------------------------------------------

def test_linear_chain_is_one_cluster():
    g = graph([node(0, "C", ["x"], ["a"]), node(1, "C", ["a"], ["b"]), node(2, "C", ["b"], ["y"])])
    r = partition(g, claim=claim_c)
    assert r.clusters == [[0, 1, 2]]
    assert r.rejections == []
    assert r.summary() == "claimed 3 of 3 nodes in 1 subgraphs"
    assert r.all_claimed
    check_report(g, r, claim_c)


def test_unsupported_node_in_the_middle_splits_the_chain():
    g = graph([node(0, "C", ["x"], ["a"]), node(1, "C", ["a"], ["b"]),
               node(2, "Foo", ["b"], ["c"], name="the_foo", domain="com.example"),
               node(3, "C", ["c"], ["d"]), node(4, "C", ["d"], ["y"])])
    r = partition(g, claim=claim_c)
    assert r.clusters == [[0, 1], [3, 4]]
    assert r.rejection_lines() == [
        "node 'the_foo' (com.example::Foo, opset 1): Foo is not supported here"]
    assert r.summary() == "claimed 4 of 5 nodes in 2 subgraphs"
    assert not r.all_claimed
    text = r.format()
    assert r.summary() in text and "the_foo" in text and "n0, n1" in text and "n3, n4" in text
    check_report(g, r, claim_c)


def test_path_through_unclaimed_node_keeps_ends_apart():
    # A -> B(unclaimed) -> C and A -> C: {A, C} fused would be a cycle through B.
    g = graph([node(0, "C", ["x"], ["a"], name="A"), node(1, "U", ["a"], ["b"], name="B"),
               node(2, "C", ["a", "b"], ["y"], name="C")])
    r = partition(g, claim=claim_c)
    assert r.clusters == [[0], [2]]
    assert [x.node.name for x in r.rejections] == ["B"]
    check_report(g, r, claim_c)


def test_cycle_through_implicit_input_is_seen():
    # The unclaimed control-flow node reads `a` only through its body (implicit input).
    g = graph([node(0, "C", ["x"], ["a"]), node(1, "If", ["x"], ["b"], implicit=["a"]),
               node(2, "C", ["a", "b"], ["y"])])
    r = partition(g, claim=claim_c)
    assert r.clusters == [[0], [2]]


def test_diamond_all_claimed_is_one_cluster():
    g = graph([node(0, "C", ["x"], ["a"]), node(1, "C", ["a"], ["b"]), node(2, "C", ["a"], ["c"]),
               node(3, "C", ["b", "c"], ["y"])])
    r = partition(g, claim=claim_c)
    assert r.clusters == [[0, 1, 2, 3]]
    check_report(g, r, claim_c)


def test_diamond_with_one_unclaimed_arm():
    g = graph([node(0, "C", ["x"], ["a"]), node(1, "U", ["a"], ["b"]), node(2, "C", ["a"], ["c"]),
               node(3, "C", ["b", "c"], ["y"])])
    r = partition(g, claim=claim_c)
    # 0 and 2 fuse; 3 is reached from that cluster through 1, so it starts its own.
    assert r.clusters == [[0, 2], [3]]
    check_report(g, r, claim_c)


def test_independent_branches_fuse():
    g = graph([node(0, "C", ["x"], ["a"]), node(1, "C", ["a"], ["b"]),
               node(2, "C", ["z"], ["c"]), node(3, "C", ["c"], ["d"])],
              inputs=["x", "z"], outputs=["b", "d"])
    r = partition(g, claim=claim_c)
    assert r.clusters == [[0, 1, 2, 3]]
    check_report(g, r, claim_c)


def test_multiple_outputs():
    g = graph([node(0, "C", ["x"], ["a", "b"]), node(1, "C", ["a"], ["c"]), node(2, "U", ["b"], ["d"]),
               node(3, "C", ["c"], ["e"]), node(4, "C", ["d", "e"], ["y"])])
    r = partition(g, claim=claim_c)
    assert r.clusters == [[0, 1, 3], [4]]
    check_report(g, r, claim_c)


def test_unnamed_node_label():
    g = graph([node(0, "Foo", ["x"], ["", "out7"], name="", domain="com.example")])
    r = partition(g, claim=claim_c)
    assert r.rejection_lines() == [
        "node 'Foo(out7)' (com.example::Foo, opset 1): Foo is not supported here"]


def test_graph_order_is_not_trusted():
    # Nodes listed consumer-first; clusters still come out in topological order.
    g = graph([node(2, "C", ["b"], ["y"]), node(1, "C", ["a"], ["b"]), node(0, "C", ["x"], ["a"])],
              outputs=["y"])
    assert [g.nodes[p].index for p in topological_order(g)] == [0, 1, 2]
    r = partition(g, claim=claim_c)
    assert r.clusters == [[0, 1, 2]]


def test_failing_claim_predicate_rejects_instead_of_raising():
    def claim(n, g):
        if n.op_type == "Boom":
            raise KeyError("missing")
        return None
    g = graph([node(0, "C", ["x"], ["a"]), node(1, "Boom", ["a"], ["y"])])
    r = partition(g, claim=claim)
    assert r.clusters == [[0]]
    assert "claim check failed: KeyError" in r.rejections[0].reason


def test_empty_graph():
    r = partition(GraphView("e", [], [], [], {}, {}, set()), claim=claim_c)
    assert r.clusters == [] and r.rejections == [] and r.summary() == "claimed 0 of 0 nodes in 0 subgraphs"


def test_default_claim_uses_the_op_registry():
    x = helper.make_tensor_value_info("x", F32, [2, 3])
    y = helper.make_tensor_value_info("y", F32, [2, 3])
    g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["a"], name="add0"),
                           helper.make_node("Foo", ["a"], ["b"], name="foo", domain="com.example"),
                           helper.make_node("Add", ["b", "b"], ["y"])], "main", [x], [y],
                          value_info=[helper.make_tensor_value_info("b", F32, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    r = partition(GraphView.from_onnx(m))
    assert r.clusters == [[0], [2]]
    assert r.rejection_lines() == [
        "node 'foo' (com.example::Foo, opset 1): operator com.example::Foo is not implemented by hipep"]
    assert "Add(y)" in r.format()


# ---- randomized convexity ------------------------------------------------------------------

def random_graph(rng: random.Random) -> GraphView:
    n = rng.randint(1, 24)
    values = ["in0", "in1"]
    nodes = []
    for i in range(n):
        k = rng.randint(1, 3)
        ins = [rng.choice(values[-8:] if rng.random() < 0.7 else values) for _ in range(k)]
        implicit = [rng.choice(values)] if rng.random() < 0.1 else []
        outs = [f"v{i}_{j}" for j in range(rng.choice((1, 1, 1, 2)))]
        op = "C" if rng.random() < rng.choice((0.5, 0.8)) else "U"
        nodes.append(node(i, op, ins, outs, implicit=implicit))
        values += outs
    if rng.random() < 0.5:
        rng.shuffle(nodes)  # partition must not rely on graph order
    return graph(nodes, inputs=["in0", "in1"], outputs=[values[-1]])


def test_random_dags_give_convex_maximal_clusters():
    rng = random.Random(20240607)
    for _ in range(200):
        g = random_graph(rng)
        r = partition(g, claim=claim_c)
        check_report(g, r, claim_c)
        assert partition(g, claim=claim_c).clusters == r.clusters  # deterministic


def test_convexity_checker_catches_a_bad_cluster():
    g = graph([node(0, "C", ["x"], ["a"]), node(1, "U", ["a"], ["b"]), node(2, "C", ["a", "b"], ["y"])])
    succ = successors(g)
    assert not is_convex({0, 2}, succ)
    assert is_convex({0}, succ) and is_convex({0, 1, 2}, succ)


# ---- nested subgraphs ----------------------------------------------------------------------

def test_if_bodies_are_partitioned_on_their_own():
    x = helper.make_tensor_value_info("x", F32, [4])
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", F32, [4])
    then_g = helper.make_graph([helper.make_node("Add", ["a", "a"], ["t"], name="then_add")],
                               "then_body", [], [helper.make_tensor_value_info("t", F32, [4])])
    else_g = helper.make_graph([helper.make_node("Add", ["a", "x"], ["e1"], name="else_add"),
                                helper.make_node("Foo", ["e1"], ["e"], name="else_foo", domain="com.example")],
                               "else_body", [], [helper.make_tensor_value_info("e", F32, [4])])
    main = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["a"], name="pre"),
         helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_g, else_branch=else_g)],
        "main", [x, cond], [y])
    m = helper.make_model(main, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    onnx.checker.check_model(m)
    r = partition(GraphView.from_onnx(m))

    assert r.clusters == [[0]]
    assert len(r.rejections) == 1 and r.rejections[0].node.name == "branch"
    assert r.rejection_lines()[0].startswith("node 'branch' (ai.onnx::If, opset 16): ")
    nested = {rep.context: rep for rep in r.nested}
    assert len(nested) == 2
    then_r = nested["attribute 'then_branch' of node 'branch'"]
    else_r = nested["attribute 'else_branch' of node 'branch'"]
    assert then_r.graph_name == "then_body" and else_r.graph_name == "else_body"
    assert then_r.summary() == "claimed 1 of 1 nodes in 1 subgraphs"
    assert else_r.summary() == "claimed 1 of 2 nodes in 1 subgraphs"
    assert else_r.rejection_lines() == [
        "node 'else_foo' (com.example::Foo, opset 1): operator com.example::Foo is not implemented by hipep"]
    assert not r.all_claimed
    text = r.format()
    assert "then_body" in text and "else_foo" in text


def test_nested_reports_use_the_injected_claim():
    body = graph([node(0, "C", ["x"], ["y"])], name="body")
    outer = graph([node(0, "Loop", ["x"], ["y"])])
    outer.nodes[0].subgraphs["body"] = body
    r = partition(outer, claim=claim_c)
    assert r.clusters == [] and r.nested[0].clusters == [[0]]
