"""What a compiling process imports: the xDSL dialects only some models' IR holds load on first
use, so a model without slices compiles without them, and one with slices gets them."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    from onnx import TensorProto as T, helper as h
    import hipep
    slice_model = {with_slice}
    nodes = [h.make_node("Relu", ["x"], ["r"])]
    if slice_model:
        nodes.append(h.make_node("Slice", ["r", "starts", "ends", "axes"], ["y"]))
        inits = [h.make_tensor(n, T.INT64, [1], [v]) for n, v in (("starts", 1), ("ends", 3), ("axes", 1))]
    else:
        nodes.append(h.make_node("Neg", ["r"], ["y"]))
        inits = []
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["n", 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 18)], ir_version=10)
    x = np.arange(8, dtype=np.float32).reshape(2, 4) - 3
    y = hipep.InferenceSession(model, device="cpu").run(None, {{"x": x}})[0]
    want = np.maximum(x, 0)[:, 1:3] if slice_model else -np.maximum(x, 0)
    assert np.array_equal(y, want), (y, want)
    loaded = sorted(d for d in ("tensor", "arith", "memref", "scf") if "xdsl.dialects." + d in sys.modules)
    print("loaded:", ",".join(loaded))
    """)


def _dialects_loaded(with_slice: bool) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-P", "-c", SCRIPT.format(with_slice=with_slice)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_a_model_without_slices_compiles_without_the_tensor_and_arith_dialects():
    assert _dialects_loaded(False) == "loaded:"


def test_a_lowered_slice_loads_the_tensor_and_arith_dialects():
    assert _dialects_loaded(True) == "loaded: arith,tensor"
