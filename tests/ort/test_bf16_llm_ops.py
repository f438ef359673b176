"""The ops of bf16 decoders (the model builder's `-p bf16` and `-p int4` with use_cuda_bf16) in bf16:
MatMul, the RMS norms, the SiLU and residual arithmetic, MatMulNBits and GatherBlockQuantized with
bf16 scales, and the activations LLMs use. ORT's CPU EP has no bf16 kernels for them, so each is
compared with the CPU EP running the same model in f32 with every bf16 result rounded to bf16
(hipep.tools.model_zoo.bf16_as_f32: a Cast to bf16 and back after each op, kernels the CPU EP
has): the same arithmetic on the same values, rounded where a bf16 device rounds. The feeds are f32
(ORT's Python binding takes no bf16) and the models cast them in and the results out."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper

from hipep.tools.model_zoo import bf16_as_f32

from helpers import assignment, cpu_ep, make_model, session, tensor

CPU_EP = cpu_ep()
B = T.BFLOAT16
MS = "com.microsoft"


def _with_casts(core_nodes, inputs, outputs, inits=(), opset=21):
    """A model of `core_nodes` on bf16 values: each (name, shape) input arrives in f32 and is cast to
    bf16 as `name`_b; each output `name`_b leaves as f32 `name`."""
    nodes = [h.make_node("Cast", [n], [f"{n}_b"], to=B, name=f"in_{n}") for n, _ in inputs]
    nodes += core_nodes
    nodes += [h.make_node("Cast", [f"{n}_b"], [n], to=T.FLOAT, name=f"out_{n}") for n in outputs]
    return make_model(nodes, [tensor(n, T.FLOAT, s) for n, s in inputs], [tensor(n, T.FLOAT, None) for n in outputs],
                      list(inits), opset=opset, extra_opsets=[(MS, 1)])


def _oracle(model):
    f32 = type(model)()
    f32.CopyFrom(model)
    bf16_as_f32(f32)
    return ort.InferenceSession(f32.SerializeToString(), providers=["CPUExecutionProvider"])


def _check(model, feeds, ulps=1):
    """hipep (CPU device, whole, no fallback) against the oracle, to `ulps` bf16 ulps (2^-8 each)."""
    sess = session(model, disable_fallback=True)
    assert set(assignment(sess)) == {CPU_EP}
    got, want = sess.run(None, feeds), _oracle(model).run(None, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        scale = np.maximum(np.abs(w), np.abs(w).max() * 1e-3)
        worst = float(np.max(np.abs(g - w) / scale)) if w.size else 0.0
        assert worst <= ulps * 2.0 ** -8, f"{worst / 2.0 ** -8:.2f} bf16 ulps"
    return got


def _bf16_init(name, values):
    import ml_dtypes

    return numpy_helper.from_array(np.asarray(values, np.float32).astype(ml_dtypes.bfloat16), name)


@pytest.mark.parametrize("a_shape,b_shape", [((4, 64), (64, 48)), ((2, 3, 32), (32, 40)), ((1, 1, 256), (256, 8))])
def test_matmul(rng, a_shape, b_shape):
    model = _with_casts([h.make_node("MatMul", ["a_b", "b_b"], ["y_b"])], [("a", a_shape), ("b", b_shape)], ["y"])
    _check(model, {"a": rng.standard_normal(a_shape).astype(np.float32),
                   "b": rng.standard_normal(b_shape).astype(np.float32)}, ulps=2)


def test_rms_norms_and_the_residual_sum(rng):
    """SimplifiedLayerNormalization, then SkipSimplifiedLayerNormalization with its residual sum
    (output 3), as a decoder layer chains them."""
    h_ = 64
    nodes = [h.make_node("SimplifiedLayerNormalization", ["x_b", "g1"], ["n1_b"], axis=-1, epsilon=1e-5),
             h.make_node("SkipSimplifiedLayerNormalization", ["n1_b", "r_b", "g2"], ["n2_b", "", "", "s_b"],
                         domain=MS, epsilon=1e-6)]
    model = _with_casts(nodes, [("x", [3, 5, h_]), ("r", [3, 5, h_])], ["n1", "n2", "s"],
                        [_bf16_init("g1", rng.uniform(0.5, 1.5, h_)), _bf16_init("g2", rng.uniform(0.5, 1.5, h_))])
    _check(model, {"x": rng.standard_normal((3, 5, h_)).astype(np.float32) * 3,
                   "r": rng.standard_normal((3, 5, h_)).astype(np.float32)})


def test_silu_gate_and_activations(rng):
    """x * Sigmoid(x) * up (a SwiGLU MLP's middle), and the activations' bf16 forms."""
    nodes = [h.make_node("Sigmoid", ["x_b"], ["sg_b"]), h.make_node("Mul", ["x_b", "sg_b"], ["silu_b"]),
             h.make_node("Mul", ["silu_b", "u_b"], ["y_b"]), h.make_node("Add", ["y_b", "u_b"], ["z_b"]),
             h.make_node("Sub", ["z_b", "x_b"], ["d_b"]), h.make_node("Div", ["d_b", "u_b"], ["q_b"]),
             h.make_node("Tanh", ["x_b"], ["t_b"]), h.make_node("Erf", ["x_b"], ["e_b"]),
             h.make_node("Gelu", ["x_b"], ["g_b"], approximate="tanh"), h.make_node("Relu", ["x_b"], ["r_b"]),
             h.make_node("Neg", ["x_b"], ["n_b"]), h.make_node("Exp", ["x_b"], ["x2_b"]),
             h.make_node("Sqrt", ["x2_b"], ["sq_b"]), h.make_node("Reciprocal", ["x2_b"], ["rc_b"])]
    outs = ["y", "z", "q", "t", "e", "g", "r", "n", "sq", "rc"]
    model = _with_casts(nodes, [("x", [4, 96]), ("u", [4, 96])], outs)
    _check(model, {"x": rng.standard_normal((4, 96)).astype(np.float32) * 2,
                   "u": rng.uniform(0.5, 2.0, (4, 96)).astype(np.float32) * np.sign(rng.standard_normal((4, 96)))
                   .astype(np.float32)}, ulps=2)


def _int4_weights(rng, n, k, block):
    blocks = k // block
    q = rng.integers(0, 16, (n, blocks, block // 2), dtype=np.uint8)
    scales = rng.uniform(0.01, 0.05, (n * blocks,))
    return q, scales


def test_matmul_nbits_with_bf16_scales(rng):
    k, n, block = 64, 48, 32
    q, scales = _int4_weights(rng, n, k, block)
    node = h.make_node("MatMulNBits", ["a_b", "w", "s"], ["y_b"], domain=MS, K=k, N=n, bits=4, block_size=block,
                       accuracy_level=0)
    model = _with_casts([node], [("a", [2, 3, k])], ["y"], [numpy_helper.from_array(q, "w"), _bf16_init("s", scales)])
    _check(model, {"a": rng.standard_normal((2, 3, k)).astype(np.float32)}, ulps=2)


def test_gather_block_quantized_with_bf16_scales(rng):
    """The int4-bf16 build's embedding: rows of 4-bit codes dequantized with bf16 scales."""
    vocab, hidden, block = 40, 64, 32
    codes = rng.integers(0, 256, (vocab, hidden // 2), dtype=np.uint8)
    scales = rng.uniform(0.01, 0.05, (vocab, hidden // block))
    node = h.make_node("GatherBlockQuantized", ["w", "ids", "s"], ["y_b"], domain=MS, bits=4, block_size=block,
                       quantize_axis=1, gather_axis=0)
    model = _with_casts([node], [], ["y"], [numpy_helper.from_array(codes, "w"), _bf16_init("s", scales)])
    model.graph.input.append(tensor("ids", T.INT64, [2, 5]))
    _check(model, {"ids": rng.integers(0, vocab, (2, 5))})
