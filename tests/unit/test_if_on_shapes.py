"""An If whose condition follows from input shapes (the model builder's LongRoPE: two rotary caches
as Constant nodes of an If's branches, picked by `Shape(attention_mask)[1] > original_max`) is
decided by the shape program's guards and replayed like any other step; the GPU partition claims
it when both branches have kernels. An If on a condition computed from data still runs step by
step on the CPU device and is left to other EPs on a GPU."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import hipep
from hipep.compiler import compile_subgraph, hold_body_weights
from hipep.graph import GraphView
from hipep.partition import partition
from hipep.runtime.cpu import CpuDevice
from hipep.runtime.executor import Executor
from hipep.weights import WeightStore

ORIGINAL_MAX = 16
ROWS, WIDTH = 40, 4  # each cache: ROWS positions of WIDTH values (over 64 elements: weights, not IR constants)


def _caches():
    rng = np.random.default_rng(7)
    return (rng.standard_normal((ROWS, WIDTH)).astype(np.float32),
            rng.standard_normal((ROWS, WIDTH)).astype(np.float32))


def _model(condition: str = "shape") -> onnx.ModelProto:
    """y = x + cache[positions], cache = If(S > ORIGINAL_MAX, large, small), S = Shape(mask)[1] (or,
    with condition="data", ReduceSum(x) > 0: a value only the device knows)."""
    large, small = _caches()

    def branch(name, cache):
        out = helper.make_tensor_value_info(f"{name}_cache", TensorProto.FLOAT, [ROWS, WIDTH])
        node = helper.make_node("Constant", [], [f"{name}_cache"], value=numpy_helper.from_array(cache))
        return helper.make_graph([node], f"{name}_caches", [], [out])

    nodes = [helper.make_node("Shape", ["mask"], ["mask_shape"]),
             helper.make_node("Gather", ["mask_shape", "one"], ["length"], axis=0)]
    if condition == "shape":
        nodes.append(helper.make_node("Greater", ["length", "original_max"], ["use_large"]))
    else:
        nodes += [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
                  helper.make_node("Greater", ["total", "zero"], ["use_large"])]
    nodes += [helper.make_node("If", ["use_large"], ["cache"], then_branch=branch("large", large),
                               else_branch=branch("small", small)),
              helper.make_node("Gather", ["cache", "positions"], ["rows"], axis=0),
              helper.make_node("Add", ["x", "rows"], ["y"])]
    inits = [numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(ORIGINAL_MAX, np.int64), "original_max"),
             numpy_helper.from_array(np.array(0, np.float32), "zero")]
    graph = helper.make_graph(nodes, "long_rope_like", [
        helper.make_tensor_value_info("mask", TensorProto.INT64, [1, "S"]),
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["S", WIDTH]),
        helper.make_tensor_value_info("positions", TensorProto.INT64, ["S"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["S", WIDTH])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(length: int, sign: float = 1.0):
    x = sign * np.abs(np.random.default_rng(length).standard_normal((length, WIDTH))).astype(np.float32)
    return {"mask": np.ones((1, length), np.int64), "x": x, "positions": np.arange(length, dtype=np.int64)}


def _expected(length: int, x) -> np.ndarray:
    large, small = _caches()
    return x + (large if length > ORIGINAL_MAX else small)[:length]  # positions 0..length-1


def _executor(model):
    """The whole graph compiled as one subgraph and run by the executor on the CPU device."""
    graph = GraphView.from_onnx(model)
    body, copied = hold_body_weights(graph)
    held = sorted(set(graph.constants) | body)
    plan = compile_subgraph(graph, "if_on_shapes", ["mask", "x", "positions"], ["y"], held=held)
    weights = WeightStore.for_plan(plan, graph, copied).arrays
    return Executor(plan, CpuDevice(), weights=weights)


def test_a_shape_condition_is_decided_by_guards_and_replayed():
    ex = _executor(_model("shape"))
    for length in (5, 16, 17, 30, 8, 17, 40, 1):
        feeds = _feeds(length)
        got = ex.run([feeds["mask"], feeds["x"], feeds["positions"]])[0]
        np.testing.assert_array_equal(got, _expected(length, feeds["x"]))
        assert not ex.step_by_step
    programs = [p for family in ex._programs.values() for p in family]
    # one program a branch (each holds for every length on its side of ORIGINAL_MAX), besides the
    # compile-time one
    taken = [tuple(p.shape.branches.values()) for p in programs]
    assert sorted(taken) == [(False,), (False,), (True,)] or sorted(taken) == [(False,), (True,)], taken
    guard = [g for p in programs for g in p.shape.guards if g[0] == ">" and g[2] == ORIGINAL_MAX]
    assert guard, "the branch rests on a guard over the length, not on its exact value"


def test_the_taken_branchs_weight_is_read_in_place():
    """The cache a branch yields is a weight: the If's output reads it where it lies, no copy."""
    ex = _executor(_model("shape"))
    for length in (5, 20):
        feeds = _feeds(length)
        ex.run([feeds["mask"], feeds["x"], feeds["positions"]])
    programs = [p for family in ex._programs.values() for p in family if p.shape.branches]
    assert programs and all(p.aliases for p in programs)
    assert all(not (isinstance(key, tuple) and key[0] == "move") for p in programs for key, _ in p.steps)


def test_a_data_condition_runs_step_by_step_on_the_cpu_device():
    ex = _executor(_model("data"))
    for length, sign in ((20, 1.0), (20, -1.0), (3, 1.0)):
        feeds = _feeds(length, sign)
        got = ex.run([feeds["mask"], feeds["x"], feeds["positions"]])[0]
        large, small = _caches()
        np.testing.assert_array_equal(got, feeds["x"] + (large if sign > 0 else small)[:length])
    assert ex.step_by_step


@pytest.mark.parametrize("condition", ["shape", "data"])
def test_through_ort_the_cpu_device_matches_the_cpu_ep(condition):
    model = _model(condition).SerializeToString()
    sess = hipep.InferenceSession(model, device="cpu")
    cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for length, sign in ((4, 1.0), (17, 1.0), (33, -1.0), (16, -1.0), (25, 1.0)):
        feeds = _feeds(length, sign)
        np.testing.assert_array_equal(sess.run(None, feeds)[0], cpu.run(None, feeds)[0])


def test_the_gpu_partition_claims_an_if_on_shapes_only():
    on_shapes = partition(GraphView.from_onnx(_model("shape")), device="cuda")
    assert on_shapes.all_claimed, "\n".join(on_shapes.rejection_lines())
    on_data = partition(GraphView.from_onnx(_model("data")), device="cuda")
    rejected = {r.node.op_type: r.line() for r in on_data.rejections}
    assert set(rejected) == {"If"}
    assert "depends on the value of input 0" in rejected["If"] and "computed on the device" in rejected["If"]


def test_the_gpu_partition_names_a_branch_node_without_a_kernel():
    """A branch with a node the GPU has no kernel for: the If is left to other EPs, naming it."""
    model = _model("shape")
    node = model.graph.node[3]
    assert node.op_type == "If"
    then = next(a.g for a in node.attribute if a.name == "then_branch")
    then.node[0].output[0] = "raw"
    then.node.append(helper.make_node("GlobalLpPool", ["raw"], ["pooled"]))  # no kernel (no implementation)
    then.node.append(helper.make_node("Expand", ["pooled", "shape"], ["large_cache"]))
    then.node.append(helper.make_node("Constant", [], ["shape"],
                                      value=numpy_helper.from_array(np.array([ROWS, WIDTH], np.int64))))
    report = partition(GraphView.from_onnx(model), device="cuda")
    lines = [r.line() for r in report.rejections if r.node.op_type == "If"]
    assert lines and "then_branch" in lines[0] and "GlobalLpPool" in lines[0], report.rejection_lines()
