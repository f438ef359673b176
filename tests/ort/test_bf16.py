"""bf16 where ONNX Runtime's CPU EP runs it (Cast, LayerNormalization and data movement): whole
on hipep, bit-identical to the CPU EP. ORT's Python binding takes no bf16 feeds, so the model
casts in and out."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto as T, helper as h

import hipep
from helpers import assignment, cpu_ep, cpu_session, make_model, session, tensor

CPU_EP = cpu_ep()  # hipep's CPU reference device (HipCpuExecutionProvider beside a GPU)


def bf16_model():
    B = T.BFLOAT16
    n = h.make_node
    nodes = [
        n("Cast", ["x"], ["xb"], to=B, name="to_bf16"),
        n("Transpose", ["xb"], ["xt"], perm=[1, 0, 2], name="transpose"),
        n("Reshape", ["xt", "flat"], ["xr"], name="reshape"),
        n("Concat", ["xr", "xr"], ["xc"], axis=-1, name="concat"),
        n("LayerNormalization", ["xc", "scale", "bias"], ["ln"], axis=-1, epsilon=1e-5, name="ln"),
        n("Slice", ["ln", "start", "end", "axis"], ["sl"], name="slice"),
        n("Unsqueeze", ["sl", "axis0"], ["us"], name="unsqueeze"),
        n("Cast", ["us"], ["y"], to=T.FLOAT, name="to_f32"),
    ]
    inits = [h.make_tensor("flat", T.INT64, [2], [0, -1]),
             h.make_tensor("scale", B, [32], list(np.linspace(0.5, 1.5, 32))),
             h.make_tensor("bias", B, [32], list(np.linspace(-0.2, 0.2, 32))),
             h.make_tensor("start", T.INT64, [1], [3]), h.make_tensor("end", T.INT64, [1], [20]),
             h.make_tensor("axis", T.INT64, [1], [1]), h.make_tensor("axis0", T.INT64, [1], [0])]
    return make_model(nodes, [tensor("x", T.FLOAT, [2, "n", 8])], [tensor("y", T.FLOAT, None)], inits, opset=21)


def test_bf16_graph_runs_whole_and_bit_identical(rng):
    model = bf16_model()
    sess = session(model, disable_fallback=True, optimization=ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    assert set(assignment(sess)) == {CPU_EP}
    cpu = cpu_session(model)
    for n in (3, 5):
        x = (rng.standard_normal((2, n, 8)) * 3).astype(np.float32)
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], cpu.run(None, {"x": x})[0])
    rand = hipep.InferenceSession(model, cpu_schedule="random", seed="3", device="cpu")
    x = rng.standard_normal((2, 4, 8)).astype(np.float32)
    np.testing.assert_array_equal(rand.run(None, {"x": x})[0], cpu.run(None, {"x": x})[0])
