"""RNN, GRU and LSTM cases the tests share (tests/unit/test_ops_recurrent.py on the CPU device,
tests/unit/test_recurrent_on_host.py for the GPU kernel on the host, tests/gpu/test_gpu_recurrent.py):
the node's attributes and which optional inputs and outputs it has, inputs drawn from a seeded
generator, the one-node model, and ORT's CPU EP's outputs for it. ORT's CPU EP refuses layout 1
(batch first): for such a case it runs the same node with layout 0 on the transposed inputs, and its
outputs are transposed back."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnxruntime as ort
from onnx import helper

from helpers import make_model

INPUTS = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")
OUTPUTS = {"RNN": ("Y", "Y_h"), "GRU": ("Y", "Y_h"), "LSTM": ("Y", "Y_h", "Y_c")}
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


@dataclass
class Case:
    op: str
    id: str
    attrs: dict = field(default_factory=dict)
    seq: int = 4
    batch: int = 3
    input: int = 5
    hidden: int = 4
    bias: bool = True
    lens: tuple | None = None  # sequence_lens, or None: omitted
    initial: bool = False  # initial_h (LSTM: and initial_c)
    peepholes: bool = False  # LSTM's P
    outputs: tuple | None = None  # the outputs the node has (indices into OUTPUTS[op]); None: all
    dtype: type = np.float32
    opset: int = 22
    # W and R drawn from [-scale, scale] (None: [-1, 1]); 1 / sqrt(input + hidden) keeps a wide
    # layer's gate inputs near 1, where they are neither saturated nor exploding, as in trained models
    scale: float | None = None

    @property
    def directions(self) -> int:
        return 2 if self.attrs.get("direction") == "bidirectional" else 1

    @property
    def layout(self) -> int:
        return int(self.attrs.get("layout", 0))

    @property
    def output_names(self) -> list[str]:
        names = OUTPUTS[self.op]
        keep = range(len(names)) if self.outputs is None else self.outputs
        out = [n if i in keep else "" for i, n in enumerate(names)]
        while out and not out[-1]:
            out.pop()
        return out

    def node_attrs(self) -> dict:
        return {"hidden_size": self.hidden, **self.attrs}

    def inputs(self, seed: int = 0) -> list:
        """[X, W, R, B, sequence_lens, initial_h, (initial_c, P)], None where omitted."""
        rng = np.random.default_rng(seed)
        d, g, h = self.directions, GATES[self.op], self.hidden

        def u(*shape, scale=1.0):
            return rng.uniform(-scale, scale, shape).astype(self.dtype)

        ws = 1.0 if self.scale is None else self.scale

        state = (self.batch, d, h) if self.layout else (d, self.batch, h)
        out = [u(*((self.batch, self.seq, self.input) if self.layout else (self.seq, self.batch, self.input))),
               u(d, g * h, self.input, scale=ws), u(d, g * h, h, scale=ws), u(d, 2 * g * h) if self.bias else None,
               None if self.lens is None else np.array(self.lens, np.int32), u(*state) if self.initial else None]
        if self.op == "LSTM":
            out += [u(*state) if self.initial else None, u(d, 3 * h) if self.peepholes else None]
        while out[-1] is None:
            out.pop()
        return out

    def model(self, layout: int | None = None):
        """The one-node model (named 'rnn'); `layout` 0 gives the layout-0 model of a layout-1 case."""
        from onnx import TensorProto as TP

        ins = self.inputs()
        attrs = self.node_attrs()
        if layout == 0 and self.layout:
            attrs.pop("layout", None)
            ins = _to_layout0(ins)
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(self.dtype))
        names = [INPUTS[i] if a is not None else "" for i, a in enumerate(ins)]
        node = helper.make_node(self.op, names, self.output_names, name="rnn", **attrs)
        graph_in = [helper.make_tensor_value_info(INPUTS[i], TP.INT32 if i == 4 else elem, list(a.shape))
                    for i, a in enumerate(ins) if a is not None]
        graph_out = [helper.make_tensor_value_info(n, elem, None) for n in self.output_names if n]
        return make_model([node], graph_in, graph_out, opset=self.opset)

    def feeds(self, ins: list) -> dict:
        return {INPUTS[i]: a for i, a in enumerate(ins) if a is not None}

    def ort_outputs(self, ins: list) -> list:
        """ORT's CPU EP's outputs (those the node has) for the inputs `ins`."""
        sess = ort.InferenceSession(self.model(layout=0).SerializeToString(), providers=["CPUExecutionProvider"])
        outs = sess.run(None, self.feeds(_to_layout0(ins) if self.layout else ins))
        if self.layout:
            outs = [np.ascontiguousarray(o.transpose(2, 0, 1, 3) if o.ndim == 4 else o.transpose(1, 0, 2))
                    for o in outs]
        return outs


def _to_layout0(ins: list) -> list:
    out = list(ins)
    for i in (0, 5, 6):  # X, initial_h, initial_c: batch first -> time (directions) first
        if i < len(out) and out[i] is not None:
            out[i] = np.ascontiguousarray(out[i].transpose(1, 0, 2))
    return out


BI = {"direction": "bidirectional"}
REV = {"direction": "reverse"}
CASES = [
    Case("RNN", "rnn-defaults", bias=False, opset=7),
    Case("RNN", "rnn-reverse-lengths", REV, lens=(4, 1, 3), initial=True, opset=14),
    Case("RNN", "rnn-bidirectional-empty-entry", {**BI, "activations": ["Relu", "Tanh"], "clip": 1.5},
         lens=(4, 0, 2), initial=True),
    Case("RNN", "rnn-batch-first", {**BI, "layout": 1}, lens=(2, 4, 3), initial=True, opset=14),
    Case("RNN", "rnn-leaky-relu", {"activations": ["LeakyRelu"], "activation_alpha": [0.3]}, seq=6),
    Case("RNN", "rnn-hard-sigmoid-y-h-only", {"activations": ["HardSigmoid"], "activation_alpha": [0.4],
                                             "activation_beta": [0.6]}, lens=(3, 2, 4), outputs=(1,)),
    Case("RNN", "rnn-f16", BI, lens=(4, 1, 3), initial=True, dtype=np.float16),
    Case("GRU", "gru-defaults", bias=False, opset=7),
    Case("GRU", "gru-linear-before-reset", {**BI, "linear_before_reset": 1}, lens=(3, 1, 4), initial=True),
    Case("GRU", "gru-reverse-clip", {**REV, "clip": 0.8, "activations": ["HardSigmoid", "Softsign"]},
         lens=(2, 4, 0), initial=True, opset=14),
    Case("GRU", "gru-batch-first", {"layout": 1, "linear_before_reset": 1}, lens=(4, 2, 3), initial=True),
    Case("GRU", "gru-y-only", BI, lens=(1, 4), outputs=(0,), seq=5, batch=2, hidden=6, input=3),
    Case("GRU", "gru-f16", {**BI, "linear_before_reset": 1}, lens=(4, 0, 3), initial=True, dtype=np.float16),
    Case("LSTM", "lstm-defaults", bias=False, opset=7),
    Case("LSTM", "lstm-peepholes-lengths", BI, lens=(4, 0, 2), initial=True, peepholes=True, opset=14),
    Case("LSTM", "lstm-input-forget-clip", {"input_forget": 1, "clip": 0.7}, initial=True, peepholes=True),
    Case("LSTM", "lstm-activations", {"activations": ["HardSigmoid", "Softsign", "Softplus"],
                                      "activation_alpha": [0.3], "activation_beta": [0.4]}, seq=3),
    Case("LSTM", "lstm-batch-first", {**BI, "layout": 1}, lens=(3, 4, 1), initial=True, peepholes=True),
    Case("LSTM", "lstm-y-c-only", REV, lens=(2, 3, 4), initial=True, outputs=(2,)),
    Case("LSTM", "lstm-f16", {**BI, "input_forget": 1}, lens=(4, 2, 3), initial=True, peepholes=True,
         dtype=np.float16),
]
