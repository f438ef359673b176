"""explain(): model loading, error reporting, and the `python -m hipep explain` command."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hipep.errors import ModelError
from hipep.explain import explain

F32 = TensorProto.FLOAT
ROOT = Path(__file__).resolve().parents[2]


def add_model(with_foo: bool = False) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", F32, [2, 3])
    y = helper.make_tensor_value_info("y", F32, [2, 3])
    nodes = [helper.make_node("Add", ["x", "x"], ["a"], name="add0")]
    if with_foo:
        nodes.append(helper.make_node("Foo", ["a"], ["b"], name="foo", domain="com.example"))
    nodes.append(helper.make_node("Add", ["b" if with_foo else "a", "x"], ["y"], name="add1"))
    g = helper.make_graph(nodes, "main", [x], [y],
                          value_info=[helper.make_tensor_value_info("b", F32, [2, 3])] if with_foo else [])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid("com.example", 1)])


def facts(report):
    return (report.graph_name, report.total_nodes, report.clusters, report.rejection_lines(), report.format())


def test_modelproto_path_and_bytes_agree(tmp_path):
    m = add_model(with_foo=True)
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    from_proto = explain(m)
    assert from_proto.summary() == "claimed 2 of 3 nodes in 2 subgraphs"
    assert from_proto.rejection_lines() == [
        "node 'foo' (com.example::Foo, opset 1): operator com.example::Foo is not implemented by hipep"]
    assert facts(explain(path)) == facts(from_proto)
    assert facts(explain(str(path))) == facts(from_proto)
    assert facts(explain(path.read_bytes())) == facts(from_proto)


def test_all_claimed():
    r = explain(add_model())
    assert r.clusters == [[0, 1]] and r.all_claimed


def test_corrupt_file_names_the_path(tmp_path):
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"\x08\x07\x12\xff\xff\xff\xff garbage, not a protobuf")
    with pytest.raises(ModelError) as e:
        explain(path)
    assert f"cannot read ONNX model '{path}'" in str(e.value)


def test_corrupt_bytes():
    with pytest.raises(ModelError, match="cannot read ONNX model <bytes>"):
        explain(b"\xff\xfe this is not onnx")
    with pytest.raises(ModelError):
        explain(b"")


def test_missing_file(tmp_path):
    path = tmp_path / "nope.onnx"
    with pytest.raises(ModelError, match="no such file") as e:
        explain(path)
    assert str(path) in str(e.value)


def test_empty_file_and_directory(tmp_path):
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(ModelError, match="empty"):
        explain(empty)
    with pytest.raises(ModelError, match="directory"):
        explain(tmp_path)


def test_model_failing_the_checker(tmp_path):
    m = add_model(with_foo=True)
    del m.opset_import[1]  # com.example is used but not imported
    path = tmp_path / "invalid.onnx"
    onnx.save(m, path)
    with pytest.raises(ModelError, match="invalid model") as e:
        explain(path)
    assert str(path) in str(e.value)
    with pytest.raises(ModelError, match="invalid model"):
        explain(m)


def test_wrong_argument_type():
    with pytest.raises(TypeError):
        explain(42)


def external_model(tmp_path: Path) -> Path:
    """A model whose small shape operand and large weight (stored in that order) both live in
    one external file."""
    shape = numpy_helper.from_array(np.array([3, 2], np.int64), "shape")
    big = numpy_helper.from_array(np.ones((300, 300), np.float32), "w")  # > SMALL_CONSTANT_ELEMENTS
    x = helper.make_tensor_value_info("x", F32, [2, 3])
    y = helper.make_tensor_value_info("y", F32, [3, 2])
    g = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape"),
                           helper.make_node("Add", ["w", "w"], ["w2"], name="addw")],
                          "ext", [x], [y, helper.make_tensor_value_info("w2", F32, [300, 300])],
                          initializer=[shape, big])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    folder = tmp_path / "model"
    folder.mkdir()
    onnx.save(m, folder / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.data", size_threshold=0)
    return folder / "m.onnx"


def test_external_data_relative_to_model_folder(tmp_path, monkeypatch):
    path = external_model(tmp_path)
    monkeypatch.chdir(tmp_path)  # not the model's folder
    r = explain(path)
    assert r.total_nodes == 2
    assert "addw" in r.format()
    assert "addw" not in "\n".join(r.rejection_lines())  # w is typed from its dims


def test_large_external_data_is_not_read(tmp_path):
    path = external_model(tmp_path)
    data = path.parent / "m.data"
    tensors = {t.name: t for t in onnx.load(path, load_external_data=False).graph.initializer}
    info = {e.key: e.value for e in tensors["shape"].external_data}
    end = int(info.get("offset", 0)) + int(info["length"])
    assert end < data.stat().st_size
    with open(data, "r+b") as f:
        f.truncate(end)  # the large tensor's bytes are gone: reading them would fail
    assert explain(path).total_nodes == 2


def test_missing_external_data_file(tmp_path):
    path = external_model(tmp_path)
    (path.parent / "m.data").unlink()
    with pytest.raises(ModelError) as e:
        explain(path)
    assert str(path) in str(e.value) and "m.data" in str(e.value)


def run_cli(*args, cwd=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "hipep", *args], capture_output=True, text=True,
                          env=env, cwd=cwd or ROOT, timeout=120)


def test_cli_exit_codes(tmp_path):
    good, partial, corrupt = tmp_path / "good.onnx", tmp_path / "partial.onnx", tmp_path / "corrupt.onnx"
    onnx.save(add_model(), good)
    onnx.save(add_model(with_foo=True), partial)
    corrupt.write_bytes(b"\xff\xfe not onnx")

    p = run_cli("explain", str(good))
    assert p.returncode == 0, p.stderr
    assert "claimed 2 of 2 nodes in 1 subgraphs" in p.stdout

    p = run_cli("explain", str(partial))
    assert p.returncode == 1, p.stderr
    assert "node 'foo' (com.example::Foo, opset 1)" in p.stdout

    for bad in (corrupt, tmp_path / "missing.onnx"):
        p = run_cli("explain", str(bad))
        assert p.returncode == 2
        assert str(bad) in p.stderr and "Traceback" not in p.stderr
        assert p.stdout == ""

    p = run_cli()
    assert p.returncode == 2 and "usage" in p.stderr


def test_a_long_subgraph_is_summarized_and_listed_in_full_on_request():
    h = helper
    nodes = [h.make_node("Relu", ["x" if i == 0 else f"r{i - 1}"], [f"r{i}"], name=f"relu_{i}") for i in range(50)]
    model = h.make_model(h.make_graph(nodes, "chain", [h.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                                      [h.make_tensor_value_info("r49", TensorProto.FLOAT, [4])]),
                         opset_imports=[h.make_opsetid("", 17)])
    report = explain(model)
    short, full = report.format(), report.format(all_nodes=True)
    assert "subgraph 1 (50 nodes)" in short and "relu_7" in short and "relu_8," not in short
    assert "and 42 more (all of them: explain --all)" in short
    assert all(f"relu_{i}" in full for i in range(50)) and "more" not in full
