"""Host steps of shape arithmetic written from the run's symbols (hipep.runtime.host_values).

A decoder's total_sequence_length is Cast(Gather(Shape(attention_mask), 1)): three host steps whose
results the shape program knows as expressions. The executor leaves such steps out of the captured
graph and writes their results before the replay; a step whose results are not all such values, or
whose memory is shared or ORT's, runs as before. Results are checked under the CPU device's three
schedules (a late device stream would expose an early write into memory a launch still uses).
"""
from __future__ import annotations

import numpy as np
import pytest

from hipep.plan import HOST_VISIBLE, HostStep, Launch, Sync
from hipep.runtime.cpu import CpuDevice
from hipep.runtime.executor import Executor
from hipep.runtime.host_values import write
from hipep.runtime.shapes import ShapeProgram, trace_shapes

from plan_builder import Builder

SCHEDULES = ("inline", "deferred", "random")
# the attributes as the compiler gives them (defaults filled in)
_SHAPE = {"start": 0, "end": None, "_num_outputs": 1, "_since_version": 21}
_GATHER = {"axis": 0, "_num_outputs": 1, "_since_version": 13}
_CAST = {"to": 6, "saturate": 1, "round_mode": "up", "_num_outputs": 1, "_since_version": 21}
_ADD = {"_num_outputs": 1, "_since_version": 14}
_SUM = {"keepdims": 0, "axes": None, "noop_with_empty_axes": 0, "_num_outputs": 1, "_since_version": 13}


def _total_length_plan(output_cast=False, shared_slot=False):
    """y = x + Cast(Gather(Shape(mask), 1)) as int32: the total-length preamble of a decoder, its
    three steps on the host, then a launch that reads the result. `output_cast`: the cast value is
    a plan output too (ORT's memory); `shared_slot`: the Gather result shares its host-visible slot
    with another buffer the host writes later."""
    p = Builder()
    x = p.input("int32", "x")
    mask = p.input("int64", "attention_mask")
    one = p.const(np.array(1, np.int64), "one")
    shape = p.buf("int64", HOST_VISIBLE, name="shape")
    length = p.buf("int64", HOST_VISIBLE, name="length")
    total = p.buf("int32", HOST_VISIBLE, name="total")
    y = p.buf("int32", name="y")
    steps = [HostStep("::Shape", "shape", _SHAPE, (mask,), (shape,)),
             HostStep("::Gather", "gather", _GATHER, (shape, one), (length,)),
             HostStep("::Cast", "cast", _CAST, (length,), (total,)),
             Launch("::Add", "add", _ADD, (x, total), (y,))]
    outputs = [y]
    if shared_slot:
        again = p.buf("int64", HOST_VISIBLE, slot=p.values[length].slot, name="again")
        steps.append(HostStep("::Gather", "gather_again", _GATHER, (shape, one), (again,)))
    if output_cast:
        outputs.append(total)
    steps.append(Sync("outputs"))
    return p.plan(steps, outputs)


def _host_nodes(ex: Executor) -> list[str]:
    (spec,) = ex.specializations()
    (bound,) = spec.graphs.values()
    return [n.label for n in bound[1].nodes if n.kind == "host"]


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_shape_arithmetic_is_written_from_the_symbols_under_every_schedule(schedule):
    ex = Executor(_total_length_plan(), CpuDevice(schedule, 5))
    rng = np.random.default_rng(1)
    for total in (7, 3, 12, 12, 1):
        x = rng.integers(-50, 50, (2, 3)).astype(np.int32)
        (y,) = ex.run([x, np.ones((2, total), np.int64)])
        np.testing.assert_array_equal(y, x + total)
    # every specialization's graph has no host node left: the three steps were written
    for spec in ex.specializations():
        assert spec.program.host.skipped and len(spec.program.host.targets) == 3
        for bound in spec.graphs.values():
            assert [n.kind for n in bound[1].nodes] == ["launch", "sync"]


def test_a_result_in_orts_memory_runs_its_step():
    ex = Executor(_total_length_plan(output_cast=True), CpuDevice("random", 2))
    for total in (4, 9):
        x = np.arange(6, dtype=np.int32).reshape(2, 3)
        y, t = ex.run([x, np.ones((1, total), np.int64)])
        np.testing.assert_array_equal(y, x + total)
        assert int(t) == total
    assert _host_nodes(ex) == ["node 'cast' (Cast)"]


def test_a_result_in_a_shared_slot_runs_its_step():
    ex = Executor(_total_length_plan(shared_slot=True), CpuDevice("deferred", 0))
    for total in (4, 9):
        x = np.zeros((1, 2), np.int32)
        (y,) = ex.run([x, np.ones((1, total), np.int64)])
        np.testing.assert_array_equal(y, x + total)
    # Shape and Cast have memory of their own; the Gathers share one slot and run in order
    assert _host_nodes(ex) == ["node 'gather' (Gather)", "node 'gather_again' (Gather)"]


def _sum_then_host_add(dtype):
    """z = 2 * (s + s), s = ReduceSum(x) on the device, s + s a host step."""
    p = Builder()
    x = p.input(dtype, "x")
    s = p.buf(dtype, HOST_VISIBLE, name="s")
    t = p.buf(dtype, HOST_VISIBLE, name="t")
    z = p.buf(dtype, name="z")
    plan = p.plan([Launch("::ReduceSum", "sum", _SUM, (x,), (s,)), Sync("the host reads s"),
                   HostStep("::Add", "add", _ADD, (s, s), (t,)), Launch("::Add", "twice", _ADD, (t, t), (z,)),
                   Sync("outputs")], [z])
    return Executor(plan, CpuDevice("random", 3))


def test_a_host_step_on_device_data_runs_as_before():
    """A host step reading what a launch computed from float data has no expression: it stays in
    the graph."""
    ex = _sum_then_host_add("float32")
    for n in (3, 5):
        (z,) = ex.run([np.arange(n, dtype=np.float32)])
        assert float(z) == 4 * sum(range(n))
    assert _host_nodes(ex) == ["node 'add' (Add)"]


def test_values_read_from_an_inputs_elements_hold_for_its_length_only():
    """The host follows a small integer input's elements (symbols `d<input>.<k>`) through a
    launch; a longer input has elements no symbol of the program stands for, so the program holds
    for that length only (its dims are pinned) and a longer run is traced anew."""
    ex = _sum_then_host_add("int64")
    for n in (3, 5, 3, 4):
        (z,) = ex.run([np.arange(n, dtype=np.int64)])
        assert int(z) == 4 * sum(range(n)), n


def test_the_shape_program_keeps_the_host_values_through_its_data():
    plan = _total_length_plan()
    constants = {vid: np.asarray(plan.constants[v.constant], v.dtype) for vid, v in plan.values.items()
                 if v.kind == "constant"}
    program = trace_shapes(plan, [np.zeros((2, 3), np.int32), np.ones((2, 5), np.int64)], constants)
    assert len(program.host_values) == 3
    again = ShapeProgram.from_data(program.to_data())
    assert again.host_values == program.host_values and again.symbols == program.symbols


def test_a_large_integer_result_is_not_followed_element_by_element():
    """ConstantOfShape(Shape(x)) on the host: a small result is shape arithmetic, followed as
    expressions; past MAX_SYMBOLIC_ELEMENTS it runs as the host step it is (no Python object per
    element, no generated function as long: a 2^23-element result once took a minute to compile)."""
    from hipep.runtime.shapes import MAX_SYMBOLIC_ELEMENTS

    p = Builder()
    x = p.input("float32", "x")
    shape = p.buf("int64", HOST_VISIBLE, name="shape")
    zeros = p.buf("int32", HOST_VISIBLE, name="zeros")
    fill = {"value": np.array([0], np.int32), "_num_outputs": 1, "_since_version": 21}
    plan = p.plan([HostStep("::Shape", "shape", _SHAPE, (x,), (shape,)),
                   HostStep("::ConstantOfShape", "fill", fill, (shape,), (zeros,)), Sync("outputs")], [zeros])
    for dims, followed in (((3, 4), True), ((MAX_SYMBOLIC_ELEMENTS + 1,), False)):
        program = trace_shapes(plan, [np.zeros(dims, np.float32)], {})
        assert (zeros in program.host_values) == followed, dims
        assert shape in program.host_values
    ex = Executor(plan, CpuDevice())
    (z,) = ex.run([np.zeros((MAX_SYMBOLIC_ELEMENTS + 1,), np.float32)])
    assert z.shape == (MAX_SYMBOLIC_ELEMENTS + 1,) and not z.any()


def test_write_wraps_a_value_past_the_element_type_as_cast_does():
    flat = np.zeros(1, np.int32)
    write([(flat, 0, 1)], (2**31 + 5,))
    assert flat[0] == np.array([2**31 + 5], np.int64).astype(np.int32)[0]
    many = np.zeros(3, np.int32)
    write([(many, 1, 3)], (0, 1, 2**32 + 2, 3))
    np.testing.assert_array_equal(many, [1, 2, 3])


def test_the_compilers_total_length_preamble_is_written_from_the_symbols():
    """The model builder's preamble as ONNX (total_sequence_length = Cast(Gather(Shape(mask), 1))),
    compiled: the compiler puts the three host steps' results in host-visible slots of their own, so
    the replayed graph keeps only the launches."""
    from onnx import TensorProto, helper, numpy_helper

    from hipep.compiler import compile_subgraph
    from hipep.graph import GraphView

    nodes = [helper.make_node("Shape", ["mask"], ["mask_shape"]),
             helper.make_node("Gather", ["mask_shape", "one"], ["length"], axis=0),
             helper.make_node("Cast", ["length"], ["total"], to=TensorProto.INT32),
             helper.make_node("ReduceSum", ["mask"], ["seen"], keepdims=0),
             helper.make_node("Cast", ["seen"], ["seen32"], to=TensorProto.INT32),
             helper.make_node("Sub", ["total", "seen32"], ["gap"]),
             helper.make_node("Add", ["x", "gap"], ["y"])]
    graph = helper.make_graph(nodes, "preamble", [
        helper.make_tensor_value_info("mask", TensorProto.INT64, [1, "T"]),
        helper.make_tensor_value_info("x", TensorProto.INT32, [3])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [3])],
        [numpy_helper.from_array(np.array(1, np.int64), "one")])
    view = GraphView.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    plan = compile_subgraph(view, "preamble", ["mask", "x"], ["y"], held=sorted(view.constants))
    assert sum(isinstance(s, HostStep) for s in plan.steps) == 3
    ex = Executor(plan, CpuDevice("random", 11))
    x = np.array([1, 2, 3], np.int32)
    for total in (4, 9, 2, 9):
        mask = np.zeros((1, total), np.int64)
        mask[0, :total // 2] = 1
        (y,) = ex.run([mask, x])
        np.testing.assert_array_equal(y, x + (total - total // 2))
    assert _host_nodes(ex) == []


def test_host_values_off_runs_every_host_step_where_the_plan_puts_it(monkeypatch):
    monkeypatch.setenv("HIPEP_HOST_VALUES", "0")
    ex = Executor(_total_length_plan(), CpuDevice("random", 5))
    for total in (7, 3):
        x = np.arange(6, dtype=np.int32).reshape(2, 3)
        (y,) = ex.run([x, np.ones((2, total), np.int64)])
        np.testing.assert_array_equal(y, x + total)
    assert _host_nodes(ex) == ["node 'shape' (Shape)", "node 'gather' (Gather)", "node 'cast' (Cast)"]
