"""benchmarks/accuracy_1b.py's model edits on a small two-MatMulNBits model with external data:
copies load their weights, the one-ulp noise moves every value by at most one ulp, traced
tensors come out in graph order; and the whole script on the tiny builder decoder (that part
needs the `models` extra)."""
from __future__ import annotations

import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from helpers import load_script, make_model, tensor
from quant_helpers import quantize_blockwise

K, N = 64, 96
MS = ("com.microsoft", 1)


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/accuracy_1b.py", "accuracy_1b_benchmark")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """model.onnx with weights in model.onnx.data: X [M, K] -> MatMulNBits (N) -> Mul -> MatMulNBits (K)."""
    rng = np.random.default_rng(5)
    inits, nodes = [], []
    for i, (k, n) in enumerate(((K, N), (N, K))):
        B, scales, _ = quantize_blockwise(rng.standard_normal((n, k)).astype(np.float32), 4, 32, "none")
        inits += [numpy_helper.from_array(B, f"B{i}"), numpy_helper.from_array(scales.reshape(-1), f"S{i}")]
        nodes.append(helper.make_node("MatMulNBits", ["X" if i == 0 else "h", f"B{i}", f"S{i}"], [f"y{i}"],
                                      domain="com.microsoft", name=f"/model/layers.{i}/mlp/proj", K=k, N=n,
                                      bits=4, block_size=32, accuracy_level=4))
        if i == 0:
            inits.append(numpy_helper.from_array(np.full(n, 0.5, np.float32), "half"))
            nodes.append(helper.make_node("Mul", ["y0", "half"], ["h"], name="/model/layers.0/mlp/Mul"))
    model = make_model(nodes, [tensor("X", shape=["M", K])], [tensor("y1")], inits, opset=21, extra_opsets=[MS])
    out = tmp_path_factory.mktemp("accuracy_1b")
    onnx.save(model, str(out / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="model.onnx.data", size_threshold=0)
    return str(out)


def _run(path, outputs=None):
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(9).standard_normal((6, K)).astype(np.float32)
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(outputs, {"X": x})))


def test_a_copy_reads_the_weights_of_the_original(bench, folder):
    copies = bench.Copies(folder)
    try:
        assert copies.data_files == ["model.onnx.data"]
        path = copies.save(copies.fresh())
        assert os.path.dirname(path) != folder or os.path.basename(path).startswith(".")
        np.testing.assert_array_equal(_run(path)["y1"], _run(os.path.join(folder, "model.onnx"))["y1"])
    finally:
        copies.close()
    assert not os.path.exists(path) and not os.path.exists(copies.work)
    assert sorted(os.listdir(folder)) == ["model.onnx", "model.onnx.data"]


def test_traced_tensors_are_every_traced_op_output_in_graph_order(bench, folder):
    copies = bench.Copies(folder)
    try:
        traced = bench.traced_tensors(copies.proto)
        assert traced == [("y0", "layers.0/mlp/proj"), ("h", "layers.0/mlp/Mul")]  # y1 is a graph output
        rows_path = copies.save(bench.with_outputs(copies.fresh(), [n for n, _ in traced]))
        got = _run(rows_path)
        rows = bench.layer_errors(traced, got, got)
        assert [(r["layer"], r["rel_l2"]) for r in rows] == [(0, 0.0), (0, 0.0)]
    finally:
        copies.close()


def test_ulp_noise_moves_each_value_by_at_most_one_ulp(bench, folder):
    copies = bench.Copies(folder, accuracy_level=0)  # f32 A: no int8 code can flip downstream
    try:
        assert all(a.i == 0 for node in copies.proto.graph.node for a in node.attribute
                   if a.name == "accuracy_level")
        clean = _run(copies.save(bench.with_outputs(copies.fresh(), ["y0"])))["y0"]
        noisy_model = bench.with_ulp_noise(bench.with_outputs(copies.fresh(), ["y0"]), seed=1)
        assert sum(node.name.endswith("/noise") for node in noisy_model.graph.node) == 2
        noisy = _run(copies.save(noisy_model))["y0"]
        first_only = bench.with_ulp_noise(copies.fresh(), seed=1, first_only=True)
        assert [node.name for node in first_only.graph.node if node.name.endswith("/noise")] == \
            ["/model/layers.0/mlp/proj/noise"]
    finally:
        copies.close()
    moved = noisy != clean
    assert (noisy > clean).any() and (noisy < clean).any() and not moved.all()
    assert np.all(np.abs(noisy - clean) <= np.spacing(np.abs(clean)))


def test_the_script_on_the_tiny_decoder(bench, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("onnxruntime_genai")
    from hipep.tools import model_zoo

    folder = model_zoo.decoder("llama", "int4")
    out = tmp_path / "report.json"
    assert bench.main(["--model", folder, "--prompt", "4", "--layers", "--sensitivity", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["logits"]["rel_l2"] < 1e-3 and report["logits"]["top1"] == report["logits"]["top1_cpu_ep"]
    n_traced = len(bench.traced_tensors(onnx.load(os.path.join(folder, "model.onnx"), load_external_data=False)))
    assert len(report["layers"]) == n_traced > 0
    assert max(r["rel_l2"] for r in report["layers"]) < 1e-3
    sens = report["sensitivity"]
    assert len(sens["noise"]) == 3 and 0 < sens["level0_noise"]["rel_l2"] < 1e-4
    assert sens["threads_1_vs_2"]["rel_l2"] < 1e-5
    assert sorted(os.listdir(folder)) == sorted(f for f in os.listdir(folder) if not f.startswith(".accuracy_1b"))
