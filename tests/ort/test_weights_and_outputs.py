"""hipep holds the weights itself, and writes ORT's outputs in place.

Weights: GetCapability sets drop_constant_initializers, so ORT passes no constant initializer to
Compute; Compile copies the ones the subgraph reads (external data included) into arrays hipep
owns, and the plan names them as "weight" values with index -1.

Outputs: Compute hands Python `allocate_outputs(shapes)`, which obtains ORT's output buffers;
the executor calls it as soon as it knows the shapes (for a static-shape plan: before its first
launch) and the kernels write there.
"""
from __future__ import annotations

import contextlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper

import hipep
import hipep.bridge as bridge
from hipep.ops.registry import lookup

from helpers import assert_matches_cpu, cpu_session, make_model, tensor


def weights_model(batch="n"):
    """x[batch, 64] @ W[64, 2048] (a weight) + B[2048] (a mid-sized constant, not an IR constant)
    → * k (a scalar the IR holds) → Relu → y."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((64, 2048)).astype(np.float32)
    b = rng.standard_normal(2048).astype(np.float32)
    k = np.array(0.5, np.float32)
    nodes = [h.make_node("MatMul", ["x", "W"], ["xw"], name="mm"),
             h.make_node("Add", ["xw", "B"], ["xb"], name="bias"),
             h.make_node("Mul", ["xb", "k"], ["xs"], name="scale"),
             h.make_node("Relu", ["xs"], ["y"], name="act")]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B"), numpy_helper.from_array(k, "k")]
    model = make_model(nodes, [tensor("x", T.FLOAT, [batch, 64])], [tensor("y", T.FLOAT, [batch, 2048])], inits)
    return model, {"W": w, "B": b}


@contextlib.contextmanager
def watch_compute(monkeypatch):
    """Records what each Compute call hands Python (inputs, the allocate_outputs calls and the
    arrays they returned) and what Compile built (the CompiledSubgraph)."""
    seen = {"compiled": [], "runs": []}
    compile_, run_ = bridge.EpState.compile, bridge.CompiledSubgraph.run

    def compile(self, desc, *args):
        result = compile_(self, desc, *args)
        seen["compiled"].append(result[0])
        return result

    def run(self, inputs, allocate_outputs=None):
        record = {"inputs": list(inputs), "allocations": []}
        seen["runs"].append(record)
        events = seen.setdefault("events", [])

        def allocate(shapes):
            arrays = allocate_outputs(shapes)
            events.append("allocate")
            record["allocations"].append((list(shapes), arrays))
            return arrays
        return run_(self, inputs, None if allocate_outputs is None else allocate)

    monkeypatch.setattr(bridge.EpState, "compile", compile)
    monkeypatch.setattr(bridge.CompiledSubgraph, "run", run)
    yield seen


@contextlib.contextmanager
def watch_kernels(seen, *ops):
    """Records an event each time the CPU device runs the reference of one of `ops` (test-only:
    the registry's entries are frozen, so the attribute is swapped underneath and put back)."""
    defs = [lookup("", op) for op in ops]
    saved = [d.reference for d in defs]
    events = seen.setdefault("events", [])

    def recording(op, reference):
        def run(inputs, attrs):
            events.append(op)
            return reference(inputs, attrs)
        return run
    try:
        for d, ref in zip(defs, saved):
            object.__setattr__(d, "reference", recording(d.op_type, ref))
        yield
    finally:
        for d, ref in zip(defs, saved):
            object.__setattr__(d, "reference", ref)


def _ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


# ---- weights -----------------------------------------------------------------------------------

def test_weights_are_not_fused_node_inputs_and_hipep_owns_copies(monkeypatch, rng):
    model, data = weights_model()
    with watch_compute(monkeypatch) as seen:
        sess = hipep.InferenceSession(model, device="cpu")
        x = rng.standard_normal((3, 64)).astype(np.float32)
        assert_matches_cpu(sess, model, {"x": x}, rtol=1e-4, atol=1e-4)
    # Compute received the activation only: ORT passed neither W nor B.
    assert [a.shape for a in seen["runs"][0]["inputs"]] == [(3, 64)]
    plan = bridge.compiled_plans()[-1]
    assert [plan.values[v].name for v in plan.inputs] == ["x"]
    weights = {v.name: v.index for v in plan.values.values() if v.kind == "weight"}
    assert weights == {"W": -1, "B": -1}
    assert "k" not in weights and any(a.size == 1 for a in plan.constants.values())  # the scalar is an IR constant
    # The store holds hipep's own read-only copies, equal to the initializers.
    (compiled,) = seen["compiled"]
    assert set(compiled.weights.arrays) == {"W", "B"}
    for name, a in compiled.weights.arrays.items():
        assert a.flags.owndata and not a.flags.writeable, name
        np.testing.assert_array_equal(a, data[name])
    assert compiled.weights.nbytes == data["W"].nbytes + data["B"].nbytes


def test_weights_survive_repeated_and_concurrent_sessions(rng):
    model, _ = weights_model()
    sessions = [hipep.InferenceSession(model, device="cpu") for _ in range(2)]
    del sessions[0]  # one session's weights going does not touch another's
    x = rng.standard_normal((2, 64)).astype(np.float32)
    for _ in range(2):
        assert_matches_cpu(sessions[-1], model, {"x": x}, rtol=1e-4, atol=1e-4)


def test_external_data_weights_are_copied_at_compile(tmp_path, rng):
    model, data = weights_model()
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=1024)
    assert (tmp_path / "weights.bin").stat().st_size >= data["W"].nbytes
    sess = hipep.InferenceSession(str(path), device="cpu")
    x = rng.standard_normal((2, 64)).astype(np.float32)
    want = cpu_session(str(path)).run(None, {"x": x})[0]
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-4)
    plan = bridge.compiled_plans()[-1]
    assert {v.name for v in plan.values.values() if v.kind == "weight"} == {"W", "B"}
    # hipep reads its own copy, not ORT's mapping of the file: overwriting the file in place
    # (same size, so nothing that still maps it faults) changes nothing.
    with open(tmp_path / "weights.bin", "r+b") as f:
        size = f.seek(0, 2)
        f.seek(0)
        f.write(b"\0" * size)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-4)


# ---- outputs -----------------------------------------------------------------------------------

def test_static_outputs_are_obtained_before_the_first_launch_and_written_in_place(monkeypatch, rng):
    model, _ = weights_model(batch=2)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    want = cpu_session(model).run(None, {"x": x})[0]
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # MatMul stays MatMul
    with watch_compute(monkeypatch) as seen, watch_kernels(seen, "MatMul"):  # the first launch
        sess = hipep.InferenceSession(model, so, device="cpu")
        # The caller's own buffer, bound as the output: ORT hands it to hipep's fused node.
        out = np.full((2, 2048), np.nan, np.float32)
        binding = sess.io_binding()
        binding.bind_cpu_input("x", x)
        binding.bind_ortvalue_output("y", ort.OrtValue.ortvalue_from_numpy(out))
        for _ in range(2):
            seen["events"].clear()
            sess.run_with_iobinding(binding)
            assert seen["events"] == ["allocate", "MatMul"]
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    for record in seen["runs"]:
        ((shapes, arrays),) = record["allocations"]
        assert [tuple(s) for s in shapes] == [(2, 2048)]
        assert _ptr(arrays[0]) == _ptr(out) and arrays[0].flags.writeable  # ORT's (the caller's) memory


def test_data_dependent_outputs_are_obtained_late(monkeypatch, rng):
    """NonZero: the output shape is known only after the device has run; the executor asks for
    ORT's outputs then, and the results still land there."""
    model = make_model([h.make_node("NonZero", ["x"], ["nz"], name="nz"),
                        h.make_node("Transpose", ["nz"], ["y"], name="tr")],
                       [tensor("x", T.FLOAT, [4, 5])], [tensor("y", T.INT64, None)])
    x = (rng.standard_normal((4, 5)) > 0).astype(np.float32)
    with watch_compute(monkeypatch) as seen:
        sess = hipep.InferenceSession(model, device="cpu")
        assert_matches_cpu(sess, model, {"x": x})
    ((shapes, _),) = seen["runs"][0]["allocations"]
    assert [tuple(s) for s in shapes] == [(int(np.count_nonzero(x)), 2)]


def test_outputs_returned_the_old_way_are_copied(monkeypatch, rng):
    """A run that ignores allocate_outputs and returns its own arrays still works: C++ copies."""
    model, _ = weights_model()
    run_ = bridge.CompiledSubgraph.run
    monkeypatch.setattr(bridge.CompiledSubgraph, "run", lambda self, inputs, allocate_outputs=None: run_(self, inputs))
    sess = hipep.InferenceSession(model, device="cpu")
    assert_matches_cpu(sess, model, {"x": rng.standard_normal((3, 64)).astype(np.float32)}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("misuse, message", [
    (lambda allocate, plan_run: allocate([(3, 2048), (1,)]), "allocate_outputs got 2 shapes, the node has 1 outputs"),
    (lambda allocate, plan_run: allocate([(3, -1)]), "is not a list of extents >= 0"),
    (lambda allocate, plan_run: (allocate([(3, 2048)]), allocate([(3, 2048)])), "allocate_outputs was called twice"),
    (lambda allocate, plan_run: [np.zeros((3, 7), np.float32)] if allocate([(3, 2048)]) else None,
     "came out with shape \\[3, 7\\], but allocate_outputs was given \\[3, 2048\\]"),
    (lambda allocate, plan_run: None, "returned no outputs and did not call allocate_outputs"),
])
def test_output_protocol_errors_are_clear_and_leave_the_process_usable(monkeypatch, rng, misuse, message):
    model, _ = weights_model()
    x = rng.standard_normal((3, 64)).astype(np.float32)
    run_ = bridge.CompiledSubgraph.run
    monkeypatch.setattr(bridge.CompiledSubgraph, "run",
                        lambda self, inputs, allocate_outputs=None: misuse(allocate_outputs, run_))
    sess = hipep.InferenceSession(model, device="cpu")
    with pytest.raises(Exception, match=message):
        sess.run(None, {"x": x})
    monkeypatch.setattr(bridge.CompiledSubgraph, "run", run_)
    assert_matches_cpu(sess, model, {"x": x}, rtol=1e-4, atol=1e-4)


def test_allocate_outputs_refuses_to_run_after_its_compute_call(monkeypatch, rng):
    model, _ = weights_model()
    kept = []
    run_ = bridge.CompiledSubgraph.run

    def run(self, inputs, allocate_outputs=None):
        kept.append(allocate_outputs)
        return run_(self, inputs, allocate_outputs)
    monkeypatch.setattr(bridge.CompiledSubgraph, "run", run)
    sess = hipep.InferenceSession(model, device="cpu")
    sess.run(None, {"x": rng.standard_normal((1, 64)).astype(np.float32)})
    with pytest.raises(RuntimeError, match="allocate_outputs was called after its run ended"):
        kept[0]([(1, 2048)])


@pytest.mark.parametrize("length", [3, 6], ids=["else", "then"])
def test_if_branches_read_their_own_large_constants(length):
    """An If whose branches hold their own large Constant nodes (the model builder's LongRoPE: two
    rotary caches, picked by the sequence length): ORT makes them initializers of the branch
    graphs, which Compile copies and the fused function takes as arguments with the rest of the
    held weights; both branches against the CPU EP."""
    caches = [np.arange(4096, dtype=np.float32).reshape(512, 8) / 7, -np.arange(1024, dtype=np.float32).reshape(128, 8)]

    def branch(name, value):
        node = h.make_node("Constant", [], [name], value=numpy_helper.from_array(value))
        return h.make_graph([node], name, [], [tensor(name, T.FLOAT, list(value.shape))])

    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "one"], ["n"], axis=0),
             h.make_node("Greater", ["n", "limit"], ["long"]),
             h.make_node("If", ["long"], ["cache"], then_branch=branch("large", caches[0]),
                         else_branch=branch("small", caches[1])),
             h.make_node("Gather", ["cache", "positions"], ["rows"], axis=0),
             h.make_node("ReduceSum", ["x"], ["total"], keepdims=1),
             h.make_node("Mul", ["rows", "total"], ["y"])]
    inits = [numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(4, np.int64), "limit")]
    model = make_model(nodes, [tensor("x", T.FLOAT, [1, "n"]), tensor("positions", T.INT64, [3])],
                       [tensor("y", T.FLOAT, None)], inits, opset=21)
    feeds = {"x": np.arange(1, length + 1, dtype=np.float32)[None], "positions": np.array([0, 5, 100], np.int64)}
    sess = hipep.InferenceSession(model, device="cpu", strict="1")
    got = assert_matches_cpu(sess, model, feeds)
    assert got[0][2, 0] == pytest.approx(caches[0 if length > 4 else 1][100, 0] * sum(range(1, length + 1)))
