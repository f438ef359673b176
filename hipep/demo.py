"""A small self-attention block, run on hipep's default device and on ORT's CPU EP.

`python -m hipep demo [--device auto|cpu|cuda]` prints hipep's partition report for it, runs both
sessions on the same random inputs with dynamic batch and sequence extents, and compares the
outputs. The default device is the GPU where hipep's plugin found one (an NVIDIA driver and
hipep's CUDA runtime load), else the CPU reference device.
"""
from __future__ import annotations

import numpy as np

OPSET = 17
IR_VERSION = 10  # what every onnxruntime >= 1.24 reads


def build_attention_block(hidden: int = 32, heads: int = 4, seed: int = 0):
    """An onnx.ModelProto: x[batch, seq, hidden] → LayerNorm → QKV → softmax attention → out proj
    → residual. Uses MatMul, Add, Reshape, Transpose, Div, Softmax, LayerNormalization, Shape,
    Gather, Concat, Unsqueeze, Cast, Where, Mul, Sub, Equal and Constant."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    head = hidden // heads

    def w(name, *shape, scale=0.2):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [
        w("ln_scale", hidden, scale=1.0), w("ln_bias", hidden), w("w_qkv", hidden, 3 * hidden),
        w("b_qkv", 3 * hidden), w("w_out", hidden, hidden), w("b_out", hidden),
        numpy_helper.from_array(np.array([0, 0, 3, heads, head], np.int64), "qkv_shape"),
        numpy_helper.from_array(np.array([0, 0, hidden], np.int64), "out_shape"),
        numpy_helper.from_array(np.array(np.sqrt(head), np.float32), "scale"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
    ]
    n = helper.make_node
    nodes = [
        n("LayerNormalization", ["x", "ln_scale", "ln_bias"], ["h"], name="ln", axis=-1, epsilon=1e-5),
        n("MatMul", ["h", "w_qkv"], ["qkv0"], name="qkv_matmul"),
        n("Add", ["qkv0", "b_qkv"], ["qkv1"], name="qkv_bias"),
        n("Reshape", ["qkv1", "qkv_shape"], ["qkv2"], name="qkv_split_heads"),
        n("Transpose", ["qkv2"], ["qkv"], name="qkv_to_heads", perm=[2, 0, 3, 1, 4]),
        n("Split", ["qkv"], ["q0", "k0", "v0"], name="qkv_split", axis=0, num_outputs=3),
        n("Squeeze", ["q0", "axis0"], ["q"], name="q_squeeze"),
        n("Squeeze", ["k0", "axis0"], ["k"], name="k_squeeze"),
        n("Squeeze", ["v0", "axis0"], ["v"], name="v_squeeze"),
        n("Constant", [], ["axis0"], name="axis0_const", value=helper.make_tensor("a", TensorProto.INT64, [1], [0])),
        n("Transpose", ["k"], ["kt"], name="k_transpose", perm=[0, 1, 3, 2]),
        n("MatMul", ["q", "kt"], ["scores0"], name="scores"),
        n("Div", ["scores0", "scale"], ["scores1"], name="scale_scores"),
        # A padding mask from the input itself: positions whose first feature is exactly 0.
        n("Gather", ["x", "feat0"], ["x0"], name="first_feature", axis=2),
        n("Constant", [], ["feat0"], name="feat0_const", value=helper.make_tensor("f", TensorProto.INT64, [], [0])),
        n("Equal", ["x0", "zero"], ["pad"], name="is_pad"),
        n("Unsqueeze", ["pad", "mask_axes"], ["pad4"], name="mask_unsqueeze"),
        n("Constant", [], ["mask_axes"], name="mask_axes_const",
          value=helper.make_tensor("m", TensorProto.INT64, [2], [1, 2])),
        n("Constant", [], ["neg"], name="neg_const", value=helper.make_tensor("n", TensorProto.FLOAT, [], [-1e4])),
        n("Where", ["pad4", "neg", "scores1"], ["scores"], name="apply_mask"),
        n("Softmax", ["scores"], ["probs"], name="softmax", axis=-1),
        n("MatMul", ["probs", "v"], ["ctx0"], name="context"),
        n("Transpose", ["ctx0"], ["ctx1"], name="ctx_from_heads", perm=[0, 2, 1, 3]),
        n("Reshape", ["ctx1", "out_shape"], ["ctx"], name="ctx_merge_heads"),
        n("MatMul", ["ctx", "w_out"], ["o0"], name="out_matmul"),
        n("Add", ["o0", "b_out"], ["o1"], name="out_bias"),
        n("Add", ["o1", "x"], ["y"], name="residual"),
        n("ReduceMean", ["y", "mean_axes"], ["y_mean"], name="pooled", keepdims=0),
        n("Constant", [], ["mean_axes"], name="mean_axes_const",
          value=helper.make_tensor("r", TensorProto.INT64, [1], [1])),
    ]
    graph = helper.make_graph(
        nodes, "attention_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", hidden]),
         helper.make_tensor_value_info("y_mean", TensorProto.FLOAT, ["batch", hidden])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)
    _sort_topologically(model)
    onnx.checker.check_model(model)
    return model


def _sort_topologically(model) -> None:
    """Constants above are declared next to their use; ONNX wants producers first."""
    g = model.graph
    produced = {o: i for i, nd in enumerate(g.node) for o in nd.output}
    done, order = set(), []

    def visit(i):
        if i in done:
            return
        done.add(i)
        for v in g.node[i].input:
            if v in produced:
                visit(produced[v])
        order.append(g.node[i])

    for i in range(len(g.node)):
        visit(i)
    nodes = [type(n)() for n in order]
    for dst, src in zip(nodes, order):
        dst.CopyFrom(src)
    del g.node[:]
    g.node.extend(nodes)


# allclose's tolerances per device: the reference device sums as the CPU EP does, to f32 rounding;
# a GPU's f32 products are summed in other orders (about 1e-6 of the operands' magnitudes here)
_TOLERANCE = {"cpu": (1e-5, 1e-6), "cuda": (1e-5, 1e-5)}


def run_demo(out=print, device: str = "auto") -> bool:
    """Runs the demo on `device` ("auto": the GPU where hipep's plugin found one, else "cpu");
    True when every output matches the CPU EP's."""
    import onnxruntime as ort

    import hipep

    if device == "auto":
        device = "cuda" if hipep.gpu_memory_offered() else "cpu"
    model = build_attention_block()
    report = hipep.explain(model, device=device)
    out("== hipep partition report ==")
    out(report.format())
    data = model.SerializeToString()
    hip = hipep.InferenceSession(data, device=device)
    cpu = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    ok = True
    rtol, atol = _TOLERANCE[device]
    out(f"== hipep ({'the GPU' if device == 'cuda' else 'CPU reference device'}) vs ONNX Runtime CPU EP ==")
    for batch, seq in [(1, 5), (2, 7), (3, 16)]:
        x = rng.standard_normal((batch, seq, 32)).astype(np.float32)
        x[:, -1, 0] = 0.0  # one padded position per sequence
        got = hip.run(None, {"x": x})
        want = cpu.run(None, {"x": x})
        for name, g, w_ in zip(["y", "y_mean"], got, want):
            err = float(np.max(np.abs(g - w_)))
            match = np.allclose(g, w_, rtol=rtol, atol=atol)
            ok &= match
            out(f"batch={batch} seq={seq:<3} {name:<7} shape={list(g.shape)!s:<12} max|diff|={err:.2e} "
                f"{'OK' if match else 'MISMATCH'}")
    out(f"compiled subgraphs so far: {hipep.stats().get('compiled_subgraphs', 0)} (one compile per session)")
    out("PASS: outputs match the CPU EP" if ok else "FAIL: outputs differ from the CPU EP")
    return ok
