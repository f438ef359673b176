"""Pointwise fusion through real ORT sessions: fusion=on compiles a pointwise DAG to one
hipep::FusedElementwise launch whose results are bit-identical to fusion=off.

The property test draws random DAGs of five or more pointwise nodes (f32, f16 and integer
families; broadcasting inputs, scalar and vector constants, Casts, comparisons feeding Where)
whose only graph output is the last node's, so that every intermediate is read inside the DAG.
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import TensorProto as T, helper as h, numpy_helper

import hipep
from hipep import bridge
from hipep.plan import Launch, walk

# The inputs hold infinities and NaN on purpose: numpy's warnings about them are noise here.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

OPSET = 20
BASE = (2, 3, 4)
SHAPES = [(2, 3, 4), (3, 4), (4,), (1, 4), (2, 1, 4), (3, 1), (), (2, 3, 1)]
ELEM = {np.dtype(np.float32): T.FLOAT, np.dtype(np.float16): T.FLOAT16, np.dtype(np.int32): T.INT32,
        np.dtype(np.int64): T.INT64, np.dtype(np.bool_): T.BOOL}


def _model(nodes, inputs, output, inits, opset=OPSET):
    graph = h.make_graph(nodes, "pointwise", inputs, [output], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], ir_version=10)


def _session(model, **options):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the graph as built
    return hipep.InferenceSession(model, sess_options=so, device="cpu", **options)


def _launches(plan):
    return [s for s in walk(plan.steps) if isinstance(s, Launch)]


def _run_both(model, feeds):
    """(fused outputs, fused plan, unfused outputs, unfused plan)."""
    on = _session(model)
    plan_on = bridge.compiled_plans()[-1]
    off = _session(model, fusion="off")
    plan_off = bridge.compiled_plans()[-1]
    return on.run(None, feeds), plan_on, off.run(None, feeds), plan_off


def assert_same_bits(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype.kind == "f":
        nan = np.isnan(got)
        np.testing.assert_array_equal(nan, np.isnan(want))
        got, want = np.where(nan, 0, got), np.where(nan, 0, want)
    assert got.tobytes() == want.tobytes(), (got, want)


# ---- random pointwise DAGs -----------------------------------------------------------------------

class _Dag:
    def __init__(self, draw, family):
        self.draw, self.family = draw, family
        self.dtype = np.dtype({"f32": np.float32, "f16": np.float16, "int": draw(st.sampled_from([np.int32, np.int64]))}[family])
        self.nodes, self.inits, self.inputs, self.feeds = [], [], [], {}
        self.values = []  # (name, dtype) of tensors ops may read
        self.read: dict[str, int] = {}
        self.made: list[str] = []  # op results, in order
        self.rng = np.random.default_rng(draw(st.integers(0, 2 ** 31)))

    def name(self, prefix):
        return f"{prefix}{len(self.nodes) + len(self.inits) + len(self.inputs)}"

    def add_input(self, shape):
        name = self.name("x")
        if self.dtype.kind == "f":
            a = np.asarray(self.rng.standard_normal(shape) * 2, np.float32)
            special = np.array([0.0, -0.0, 0.5, -3.0, 40.0, np.inf, -np.inf, np.nan], np.float32)
            flat = a.reshape(-1)
            if flat.size:
                flat[self.rng.integers(0, flat.size, size=min(3, flat.size))] = self.rng.choice(special, min(3, flat.size))
            a = a.astype(self.dtype)
        else:
            a = self.rng.integers(-50, 51, size=shape).astype(self.dtype)
        self.inputs.append(h.make_tensor_value_info(name, ELEM[self.dtype], list(shape)))
        self.feeds[name] = np.asarray(a, self.dtype)
        self.values.append((name, self.dtype))
        return name

    def const(self, dtype, shape=()):
        """A constant initializer; integers are never zero (divisors)."""
        name = self.name("c")
        if np.dtype(dtype).kind == "f":
            a = np.asarray(self.rng.uniform(0.25, 2.0, size=shape) * self.rng.choice([-1, 1], size=shape))
        else:
            a = np.asarray(self.rng.integers(1, 7, size=shape) * self.rng.choice([-1, 1], size=shape))
        self.inits.append(numpy_helper.from_array(np.asarray(a, dtype), name))
        return name

    def node(self, op, ins, dtype, **attrs):
        out = self.name("v")
        self.nodes.append(h.make_node(op, ins, [out], name=f"n{len(self.nodes)}_{op.lower()}", **attrs))
        for i in ins:
            self.read[i] = self.read.get(i, 0) + 1
        self.made.append(out)
        self.values.append((out, np.dtype(dtype)))
        return out

    def pick(self, dtype=None):
        dtype = np.dtype(dtype or self.dtype)
        choices = [n for n, d in self.values if d == dtype]
        # the newest values more often, so that chains grow deep
        return choices[max(0, len(choices) - 1 - self.draw(st.integers(0, len(choices) - 1)))]

    def operand(self):
        """A second operand: a tensor, or a scalar / one-element / vector constant."""
        kind = self.draw(st.sampled_from(["value", "value", "scalar", "one", "vector"]))
        if kind == "value":
            return self.pick()
        return self.const(self.dtype, {"scalar": (), "one": (1,), "vector": (BASE[-1],)}[kind])

    def float_step(self):
        t = self.dtype
        op = self.draw(st.sampled_from(
            ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "Neg", "Abs", "Relu", "Exp", "Log", "Sqrt",
             "Sigmoid", "Tanh", "Erf", "Softplus", "LeakyRelu", "HardSigmoid", "Gelu", "Floor", "Reciprocal",
             "Clip", "Where", "CastRound"]))
        x = self.pick()
        if op in ("Add", "Sub", "Mul", "Div", "Max", "Min"):
            return self.node(op, [x, self.operand()], t)
        if op == "Pow":
            exponent = np.asarray(self.draw(st.sampled_from([2.0, 3.0, 0.5])), t)
            name = self.name("c")
            self.inits.append(numpy_helper.from_array(exponent, name))
            return self.node("Pow", [x, name], t)
        if op == "LeakyRelu":
            return self.node(op, [x], t, alpha=0.1)
        if op == "Gelu":
            return self.node(op, [x], t, approximate=self.draw(st.sampled_from(["none", "tanh"])))
        if op == "Clip":
            return self.node(op, [x, self.const(t), self.const(t)], t)
        if op == "Where":
            cond = self.node(self.draw(st.sampled_from(["Greater", "Less", "Equal"])), [x, self.operand()], np.bool_)
            return self.node("Where", [cond, self.pick(), self.operand()], t)
        if op == "CastRound":  # through another type and back
            other = self.draw(st.sampled_from([np.float16 if t == np.float32 else np.float32, np.int64, np.int32]))
            mid = self.node("Cast", [x], other, to=ELEM[np.dtype(other)])
            if self.draw(st.booleans()):
                mid = self.node(self.draw(st.sampled_from(["Neg", "Abs"])), [mid], other)
            return self.node("Cast", [mid], t, to=ELEM[t])
        return self.node(op, [x], t)

    def int_step(self):
        t = self.dtype
        op = self.draw(st.sampled_from(["Add", "Sub", "Mul", "Max", "Min", "Neg", "Abs", "Div", "Mod", "Where",
                                        "ViaFloat"]))
        x = self.pick()
        if op in ("Add", "Sub", "Mul", "Max", "Min"):
            return self.node(op, [x, self.operand()], t)
        if op in ("Div", "Mod"):  # divisors that are never zero: constants
            divisor = self.const(t, self.draw(st.sampled_from([(), (1,), (BASE[-1],)])))
            attrs = {"fmod": self.draw(st.sampled_from([0, 1]))} if op == "Mod" else {}
            return self.node(op, [x, divisor], t, **attrs)
        if op == "Where":
            cond = self.node(self.draw(st.sampled_from(["Greater", "LessOrEqual"])), [x, self.operand()], np.bool_)
            return self.node("Where", [cond, self.pick(), self.operand()], t)
        if op == "ViaFloat":
            f = self.node("Cast", [x], np.float32, to=T.FLOAT)
            f = self.node(self.draw(st.sampled_from(["Sqrt", "Exp", "Sigmoid", "Neg"])), [f], np.float32)
            return self.node("Cast", [f], t, to=ELEM[t])
        return self.node(op, [x], t)

    def finish(self):
        """Every op result is read: results nobody reads join the last one."""
        last = self.made[-1]
        for v in self.made[:-1]:
            if self.read.get(v, 0) == 0:
                dtype = dict(self.values)[v]
                if dtype != self.dtype:
                    v = self.node("Cast", [v], self.dtype, to=ELEM[self.dtype])
                last = self.node("Add", [last, v], self.dtype)
        return last


@st.composite
def pointwise_dags(draw):
    family = draw(st.sampled_from(["f32", "f32", "f16", "int"]))
    dag = _Dag(draw, family)
    for shape in draw(st.lists(st.sampled_from(SHAPES), min_size=1, max_size=3)):
        dag.add_input(shape)
    size = draw(st.integers(5, 9))
    while len(dag.nodes) < size:
        dag.float_step() if family != "int" else dag.int_step()
    out = dag.finish()
    output = h.make_tensor_value_info(out, ELEM[dag.dtype], None)
    return _model(dag.nodes, dag.inputs, output, dag.inits), dag.feeds, [n.name for n in dag.nodes]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(pointwise_dags())
def test_random_pointwise_dags_fuse_into_one_bit_identical_launch(case):
    model, feeds, names = case
    assert len(names) >= 5
    fused, plan_on, plain, plan_off = _run_both(model, feeds)
    launches = _launches(plan_on)
    assert len(launches) == 1, plan_on.format()
    assert launches[0].op == "hipep::FusedElementwise"
    covers = launches[0].attributes["covers"]  # in the order ORT lists the nodes
    assert sorted(covers) == sorted(names) and launches[0].node == f"fused[{', '.join(covers)}]"
    assert len(_launches(plan_off)) == len(names)
    for got, want in zip(fused, plain):
        assert_same_bits(got, want)


# ---- the builder's SiLU gate and the option ---------------------------------------------------

def _silu_gate_model():
    """SiLU(x) * up as onnxruntime-genai's model builder writes it: Mul(Mul(x, Sigmoid(x)), up)."""
    nodes = [h.make_node("Sigmoid", ["x"], ["sig"], name="mlp_act_sigmoid"),
             h.make_node("Mul", ["x", "sig"], ["act"], name="mlp_act_mul"),
             h.make_node("Mul", ["act", "up"], ["y"], name="mlp_gate_mul")]
    f = T.FLOAT
    return _model(nodes, [h.make_tensor_value_info("x", f, [1, "seq", 64]), h.make_tensor_value_info("up", f, [1, "seq", 64])],
                  h.make_tensor_value_info("y", f, [1, "seq", 64]), [])


def test_silu_times_up_is_one_launch(rng, tmp_path):
    model = _silu_gate_model()
    feeds = {"x": rng.standard_normal((1, 5, 64)).astype(np.float32) * 4,
             "up": rng.standard_normal((1, 5, 64)).astype(np.float32)}
    sess = _session(model, dump_ir=str(tmp_path))
    plan = bridge.compiled_plans()[-1]
    (launch,) = _launches(plan)
    assert launch.op == "hipep::FusedElementwise"
    assert launch.attributes["covers"] == ["mlp_act_sigmoid", "mlp_act_mul", "mlp_gate_mul"]
    assert "mlas_logistic" in [n[0] for n in launch.attributes["nodes"]]  # ORT's f32 Sigmoid, bit for bit
    # the intermediates have no buffers
    assert [v.name for v in plan.values.values() if v.kind == "buffer"] == ["y"]
    listing = next(tmp_path.rglob("plan.txt")).read_text()
    assert "launch hipep::FusedElementwise(" in listing
    assert "# fused[mlp_act_sigmoid, mlp_act_mul, mlp_gate_mul]" in listing
    (got,) = sess.run(None, feeds)
    fused, _, plain, plan_off = _run_both(model, feeds)
    assert [s.op for s in _launches(plan_off)] == ["::Sigmoid", "::Mul", "::Mul"]
    assert_same_bits(got, plain[0])
    x, up = feeds["x"], feeds["up"]
    np.testing.assert_allclose(got, x / (1 + np.exp(-x)) * up, rtol=1e-5, atol=1e-6)


def test_diamonds_fuse_whole_and_values_read_outside_end_a_group(rng):
    # silu is read by two nodes of one diamond: everything fuses into one launch...
    f = T.FLOAT
    nodes = [h.make_node("Sigmoid", ["x"], ["s"], name="sig"), h.make_node("Mul", ["x", "s"], ["silu"], name="silu"),
             h.make_node("Neg", ["silu"], ["z"], name="neg"), h.make_node("Exp", ["z"], ["ez"], name="exp"),
             h.make_node("Add", ["silu", "b"], ["a"], name="bias"), h.make_node("Mul", ["a", "ez"], ["y"], name="out")]
    inputs = [h.make_tensor_value_info("x", f, ["n"]), h.make_tensor_value_info("b", f, ["m"])]
    model = _model(nodes, inputs, h.make_tensor_value_info("y", f, None), [])
    feeds = {"x": rng.standard_normal(6).astype(np.float32), "b": rng.standard_normal(6).astype(np.float32)}
    fused, plan_on, plain, _ = _run_both(model, feeds)
    assert [s.node for s in _launches(plan_on)] == ["fused[sig, silu, bias, neg, exp, out]"]
    assert_same_bits(fused[0], plain[0])
    # ... and shapes that do not broadcast are reported at the node where they meet
    with pytest.raises(Exception, match=r"node 'bias' \(Add\): Add: shapes cannot be broadcast together"):
        _session(model).run(None, {"x": feeds["x"], "b": np.ones(4, np.float32)})
    # silu also a graph output: it keeps its buffer and ends the group that makes it
    graph = model.graph
    graph.output.append(h.make_tensor_value_info("silu", f, None))
    fused, plan_on, plain, _ = _run_both(model, feeds)
    assert [s.node for s in _launches(plan_on)] == ["fused[sig, silu]", "fused[bias, neg, exp, out]"]
    for got, want in zip(fused, plain):
        assert_same_bits(got, want)


def test_fusion_option_is_validated():
    with pytest.raises(hipep.OptionError, match="option 'fusion' = 'maybe' is invalid; expected one of on, off"):
        _session(_silu_gate_model(), fusion="maybe")
