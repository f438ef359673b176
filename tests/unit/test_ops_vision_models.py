"""Models of the vision files' ops end to end through hipep.InferenceSession (CPU fallback disabled)
against ONNX Runtime's CPU EP, also under the random CPU schedule: a small CNN, indexing, quantization,
data movement of every element type, and ONNX's "light" model zoo with random weights."""
from __future__ import annotations

import pathlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from ops_vision_harness import A, f32, i64, i8, u8

F, I64 = TP.FLOAT, TP.INT64


def _init(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def _cnn_model():
    n = helper.make_node
    rng = np.random.default_rng(5)
    w = lambda *s: (rng.standard_normal(s) / np.sqrt(np.prod(s[1:]))).astype(f32)  # noqa: E731
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["r1"]),
        n("MaxPool", ["r1"], ["p1", "idx"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Conv", ["p1", "w2"], ["c2"], group=8, pads=[1, 1, 1, 1]),
        n("AveragePool", ["c2"], ["a2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        n("ConvTranspose", ["a2", "w3"], ["t3"], strides=[2, 2]),
        n("Pad", ["t3", "pads"], ["p3"], mode="reflect"),
        n("Resize", ["p3", "", "scales"], ["z3"], mode="linear"),
        n("SpaceToDepth", ["z3"], ["s4"], blocksize=3),
        n("DepthToSpace", ["s4"], ["d4"], blocksize=3, mode="CRD"),
        n("GlobalAveragePool", ["d4"], ["g5"]),
        n("Flatten", ["g5"], ["y"]),
    ]
    inits = [_init("w1", w(8, 3, 3, 3)), _init("b1", w(8)), _init("w2", w(8, 1, 3, 3)), _init("w3", w(8, 4, 2, 2)),
             _init("pads", A([0, 0, 1, 1, 0, 0, 1, 1], i64)), _init("scales", A([1, 1, 0.5, 0.5], f32))]
    T = helper.make_tensor_value_info
    return helper.make_model(
        helper.make_graph(nodes, "cnn", [T("x", F, ["N", 3, 16, 16])],
                          [T("y", F, ["N", 4]), T("d4", F, None), T("idx", I64, None)], inits),
        opset_imports=[helper.make_opsetid("", 19)], ir_version=10)


def _index_model():
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["shape"]),
        n("Slice", ["shape", "zero", "one"], ["batch"]),
        n("Concat", ["batch", "two"], ["repeats"], axis=0),
        n("Tile", ["x", "repeats"], ["tiled"]),  # repeats computed on the device, read by the host
        n("Concat", ["zeros3", "batch"], ["pads"], axis=0),
        n("Pad", ["x", "pads", "half"], ["padded"]),
        n("GatherElements", ["x", "gidx"], ["gathered"], axis=1),
        n("ScatterND", ["x", "sidx", "supd"], ["scattered"], reduction="add"),
        n("OneHot", ["labels", "depth", "onoff"], ["hot"], axis=-1),
        n("GatherND", ["hot", "nidx"], ["picked"]),
    ]
    inits = [_init("zero", A([0], i64)), _init("one", A([1], i64)), _init("two", A([2], i64)),
             _init("zeros3", A([0, 0, 0], i64)), _init("half", A(0.5, f32)),
             _init("gidx", A([[5, 0, -1]], i64)), _init("sidx", A([[0, 1], [0, 1], [0, 5]], i64)),
             _init("supd", A([1.0, 2.0, 3.0], f32)), _init("depth", A(5, i64)), _init("onoff", A([-1.0, 4.0], f32)),
             _init("nidx", A([[0, 2], [0, 4]], i64))]
    T = helper.make_tensor_value_info
    outs = [T("tiled", F, None), T("padded", F, None), T("gathered", F, None), T("scattered", F, None),
            T("hot", F, None), T("picked", F, None)]
    return helper.make_model(
        helper.make_graph(nodes, "index", [T("x", F, ["N", 6]), T("labels", I64, ["N"])], outs, inits),
        opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def _quant_model():
    n = helper.make_node
    nodes = [
        n("DynamicQuantizeLinear", ["x"], ["q", "qs", "qz"]),
        n("DequantizeLinear", ["q", "qs", "qz"], ["dq"]),
        n("QuantizeLinear", ["x", "axis_scale", "axis_zp"], ["q2"], axis=1),
        n("DequantizeLinear", ["q2", "axis_scale", "axis_zp"], ["dq2"], axis=1),
        n("Reshape", ["w_u8", "wshape"], ["w_r"]),  # the int4 model builder's uint8 weight reshape
        n("DequantizeLinear", ["w_r", "w_scale", "w_zp"], ["w"], axis=1, block_size=8),
    ]
    rng = np.random.default_rng(9)
    inits = [_init("axis_scale", rng.uniform(0.01, 0.1, 8).astype(f32)), _init("axis_zp", A(np.arange(-4, 4), i8)),
             _init("w_u8", rng.integers(0, 256, (4, 8)).astype(u8)), _init("wshape", A([2, 16], i64)),
             _init("w_scale", rng.uniform(0.01, 0.1, (2, 2)).astype(f32)), _init("w_zp", A([[8, 7], [9, 6]], u8))]
    T = helper.make_tensor_value_info
    return helper.make_model(
        helper.make_graph(nodes, "quant", [T("x", F, ["N", 8])],
                          [T("dq", F, None), T("dq2", F, None), T("q2", TP.INT8, None), T("w", F, None),
                           T("qs", F, None), T("qz", TP.UINT8, None)], inits),
        opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def _feeds(model, batch, rng):
    out = {}
    for vi in model.graph.input:
        tt = vi.type.tensor_type
        shape = [batch if d.dim_param else d.dim_value for d in tt.shape.dim]
        if tt.elem_type == TP.INT64:
            out[vi.name] = rng.integers(-6, 6, shape).astype(i64)
        else:
            out[vi.name] = rng.uniform(-3, 3, shape).astype(f32)
    return out


def _compare_with_cpu(model, feeds_list, rtol=1e-4, atol=1e-5, **options):
    import hipep

    data = model.SerializeToString()
    cpu = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    sess = hipep.InferenceSession(data, device="cpu", **options)
    for feeds in feeds_list:
        want = cpu.run(None, feeds)
        got = sess.run(None, feeds)
        for k, (g, w) in enumerate(zip(got, want)):
            assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, g.shape, w.dtype, w.shape)
            if w.dtype.kind == "f":
                assert np.isfinite(w).all(), f"output {k}: the model is not a meaningful check"
                np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {k}")
            else:
                np.testing.assert_array_equal(g, w, err_msg=f"output {k}")


def _movement_model(elem):
    """Data movement of any element type: Reshape, Transpose, Slice, Concat, Gather, Expand,
    Unsqueeze/Squeeze, Flatten, Tile, Pad, DepthToSpace, GatherElements, ScatterND, Identity."""
    n = helper.make_node
    nodes = [
        n("Reshape", ["x", "shape"], ["r"]),
        n("Transpose", ["r"], ["t"], perm=[1, 0, 2]),
        n("Slice", ["t", "starts", "ends"], ["s"]),
        n("Concat", ["s", "t"], ["c"], axis=0),
        n("Gather", ["c", "gidx"], ["g"], axis=2),
        n("Expand", ["g", "eshape"], ["e"]),
        n("Unsqueeze", ["e", "ax0"], ["u"]),
        n("Squeeze", ["u", "ax0"], ["q"]),
        n("Flatten", ["q"], ["f"], axis=1),
        n("Tile", ["f", "reps"], ["ti"]),
        n("Pad", ["ti", "pads"], ["p"], mode="edge"),
        n("Reshape", ["p", "shape4"], ["p4"]),
        n("DepthToSpace", ["p4"], ["d"], blocksize=2),
        n("GatherElements", ["d", "geidx"], ["ge"], axis=3),
        n("ScatterND", ["ge", "sidx", "supd"], ["sc"]),
        n("Identity", ["sc"], ["y"]),
    ]
    dt = helper.tensor_dtype_to_np_dtype(elem)
    inits = [_init("shape", A([3, 2, -1], i64)), _init("starts", A([1], i64)), _init("ends", A([2], i64)),
             _init("gidx", A([3, 0, 1], i64)), _init("eshape", A([2, 1, 1, 1], i64)), _init("ax0", A([0], i64)),
             _init("reps", A([1, 2], i64)), _init("pads", A([1, 0, 1, 2], i64)), _init("shape4", A([1, 8, 4, 7], i64)),
             _init("geidx", A(np.tile([[[[1, 0, 13]]]], (1, 2, 8, 1)), i64)), _init("sidx", A([[0, 1, 5, 2]], i64)),
             _init("supd", A([1], dt))]
    T = helper.make_tensor_value_info
    return helper.make_model(
        helper.make_graph(nodes, "movement", [T("x", elem, [4, 6])], [T("y", elem, None)], inits),
        opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


@pytest.mark.parametrize("elem", [TP.UINT8, TP.INT16, TP.UINT32, TP.UINT64, TP.DOUBLE, TP.BOOL],
                         ids=["u8", "i16", "u32", "u64", "f64", "bool"])
def test_data_movement_of_every_type_end_to_end(elem):
    import hipep

    model = _movement_model(elem)
    dt = helper.tensor_dtype_to_np_dtype(elem)
    x = (np.arange(24).reshape(4, 6) % 7 > 2) if dt == np.bool_ else (np.arange(24).reshape(4, 6) * 3).astype(dt)
    # ORT lacks kernels for some of these types (DepthToSpace, Tile, Pad): it runs the model in
    # f64 (u8 for bool), which holds these small values exactly.
    via = np.uint8 if dt == np.bool_ else np.float64
    ref = _movement_model(helper.np_dtype_to_tensor_dtype(np.dtype(via)))
    want = ort.InferenceSession(ref.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x.astype(via)})[0].astype(dt)
    for options in ({}, {"cpu_schedule": "random", "seed": "3"}):
        (got,) = hipep.InferenceSession(model.SerializeToString(), device="cpu", **options).run(None, {"x": x})
        assert got.dtype == dt
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("build_model", [_cnn_model, _index_model, _quant_model], ids=["cnn", "index", "quant"])
@pytest.mark.parametrize("options", [{}, {"cpu_schedule": "random", "seed": "3"}], ids=["inline", "random"])
def test_models_end_to_end(build_model, options):
    rng = np.random.default_rng(17)
    model = build_model()
    _compare_with_cpu(model, [_feeds(model, b, rng) for b in (2, 1, 3)], **options)


# ---- ONNX's "light" model zoo ----------------------------------------------------------------

LIGHT = pathlib.Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
LIGHT_MODELS = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
                "squeezenet", "vgg19", "zfnet512")


def test_light_models_claims():
    """Which light-zoo nodes hipep leaves unclaimed: none of the ops this family adds."""
    import hipep

    mine = {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool",
            "Resize", "Upsample", "DepthToSpace", "SpaceToDepth", "Flatten", "Pad", "Tile", "Reshape", "Transpose",
            "Concat", "Unsqueeze", "Squeeze", "Gather", "Slice", "Split"}
    for name in LIGHT_MODELS:
        report = hipep.explain(str(LIGHT / f"light_{name}.onnx"))
        text = str(report)
        for line in text.splitlines():
            if "(ai.onnx::" in line:
                op = line.split("(ai.onnx::", 1)[1].split(",", 1)[0]
                assert op not in mine, f"{name}: {line.strip()}"


def _light_with_random_weights(name, rng):
    """The light model with its ConstantOfShape-made weights (all 0.02) replaced by random
    initializers (fan-in scaled), so the outputs tell classes and channels apart."""
    model = onnx.load(str(LIGHT / f"light_{name}.onnx"))
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    keep = []
    for node in model.graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in consts:
            shape = [int(d) for d in consts[node.input[0]]]
            if len(shape) > 1:  # weights
                value = (rng.standard_normal(shape) * np.sqrt(2.0 / int(np.prod(shape[1:])))).astype(f32)
            else:  # biases and batch-norm statistics (variances must be positive)
                value = rng.uniform(0.5, 1.5, shape).astype(f32)
            model.graph.initializer.append(numpy_helper.from_array(value, node.output[0]))
        else:
            keep.append(node)
    del model.graph.node[:]
    model.graph.node.extend(keep)
    # The logits too: with random weights the softmax saturates to one-hot.
    logits = next(node.input[0] for node in keep if node.op_type == "Softmax")
    model.graph.output.append(helper.make_empty_tensor_value_info(logits))
    return model


@pytest.mark.parametrize("name", ["shufflenet", pytest.param("resnet50", marks=pytest.mark.slow)])
def test_light_model_end_to_end(name):
    rng = np.random.default_rng(23)
    model = _light_with_random_weights(name, rng)
    inits = {i.name for i in model.graph.initializer}
    feeds = {vi.name: rng.uniform(0, 1, [d.dim_value for d in vi.type.tensor_type.shape.dim]).astype(f32)
             for vi in model.graph.input if vi.name not in inits}
    import hipep

    data = model.SerializeToString()
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = hipep.InferenceSession(data, device="cpu").run(None, feeds)
    probs, logits = want
    assert np.isfinite(logits).all() and np.ptp(logits) > 1.0  # the random weights tell classes apart
    np.testing.assert_allclose(got[1], logits, rtol=1e-4, atol=1e-4 * np.abs(logits).max())
    np.testing.assert_allclose(got[0], probs, atol=1e-4)
    assert got[0].argmax() == probs.argmax()
