"""Bad external data: an initializer whose `location` leaves the model's folder (../x.bin, an
absolute path, a symbolic link to a file outside) or names a missing or too short file.

Through hipep.InferenceSession, a plain ort.InferenceSession on hipep's CPU reference device and
hipep.explain (by path and in memory), each gives a clear error naming the initializer and the
location. ORT validates external data itself before it asks any EP, so for sessions ORT's own
error is what the user sees and hipep compiles nothing (a file too short for an initializer ORT
reads only when hipep asks for it: hipep refuses first, and ORT logs hipep's error naming the file
and the bytes expected and found); explain reads the model in Python and
applies ORT's rules (a symbolic link that stays inside the folder is fine, one that leaves it is
not). Python never opens a file outside the folder (an audit hook records every open), and the
process goes on: a good session made right after works.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import hipep
from hipep.errors import ModelError
from helpers import ORT_1_24, cpu_ep, cpu_session, plain_ort_session

# explain reads initializers of up to SMALL_CONSTANT_ELEMENTS (65,536) elements, only the type of
# larger ones; ORT reads small ones when it loads the model, large ones when an EP asks for them
SMALL, LARGE = 8, 70_000

_opened: list[str] | None = None


def _audit(event, args):
    if event == "open" and _opened is not None and isinstance(args[0], (str, bytes, os.PathLike)):
        _opened.append(os.path.realpath(os.fsdecode(args[0])))


sys.addaudithook(_audit)


class OpenedFiles:
    """The real paths Python opens inside the `with` block."""

    def __enter__(self):
        global _opened
        _opened = []
        return _opened

    def __exit__(self, *exc):
        global _opened
        _opened = None


def _model(folder: str, location: str, n: int, offset: int = 0, length: int | None = None) -> str:
    """y = x + w with w [n] f32 stored externally at `location`; returns the model's path."""
    w = numpy_helper.from_array(np.zeros(n, np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(4 * n if length is None
                                                                                         else length))):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "external",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    path = os.path.join(folder, "model.onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path


def _weights(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.float32) * np.float32(0.5)


@pytest.fixture
def layout(tmp_path):
    """A model folder `tmp_path/model` and, beside it, a file outside the folder holding the
    weights (what a hostile location would reach)."""
    folder = tmp_path / "model"
    folder.mkdir()
    outside = {n: str(tmp_path / f"outside{n}.bin") for n in (SMALL, LARGE)}
    for n, p in outside.items():
        _weights(n).tofile(p)
    return str(folder), outside


def _bad_model(kind: str, n: int, folder: str, outside: dict) -> tuple[str, str]:
    """(model path, the location it names) for one kind of bad external data."""
    if kind == "parent":
        location = f"../outside{n}.bin"
    elif kind == "absolute":
        location = outside[n]
    elif kind == "symlink":
        location = "link.bin"
        os.symlink(outside[n], os.path.join(folder, location))
    elif kind == "missing":
        location = "nothere.bin"
    elif kind == "short":  # the file holds fewer bytes than offset + length
        location = "short.bin"
        _weights(n // 2).tofile(os.path.join(folder, location))
    else:
        raise AssertionError(kind)
    return _model(folder, location, n), location


# What ORT itself says: it validates every external location before any EP sees the graph. The
# words onnxruntime 1.24 and the newest share; 1.24 reports a missing file as the filesystem error
# it met, without the initializer's name.
ORT_SAYS = {
    "parent": "escapes model directory",
    "absolute": "not allowed for external data location",
    "symlink": "escapes model directory",
    "missing": "No such file or directory" if ORT_1_24 else "External data path does not exist",
    "short": "are out of bounds or can not be read in full",
}
# What hipep.explain says (hipep.errors.ModelError).
EXPLAIN_SAYS = {
    "parent": "resolves to",
    "absolute": "is an absolute path",
    "symlink": "resolves to",
    "missing": "no such file",
    "short": "is past the end of the file",
}
KINDS = tuple(ORT_SAYS)


def _good_session_still_works(tmp_path, make_session):
    folder = tmp_path / "good"
    folder.mkdir()
    _weights(LARGE).tofile(folder / "w.bin")
    path = _model(str(folder), "w.bin", LARGE)
    x = np.linspace(-1, 1, LARGE, dtype=np.float32)
    got = make_session(path).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, cpu_session(onnx.load(path)).run(None, {"x": x})[0])


def _sessions():
    return {
        "hipep.InferenceSession": lambda p: hipep.InferenceSession(p, device="cpu"),
        "ort.InferenceSession": lambda p: plain_ort_session(p, cpu_ep()),
    }


@pytest.mark.parametrize("n", (SMALL, LARGE))
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("entry", tuple(_sessions()))
def test_session_refuses_bad_external_data(layout, tmp_path, capfd, entry, kind, n):
    folder, outside = layout
    path, location = _bad_model(kind, n, folder, outside)
    make_session = _sessions()[entry]
    compiled = hipep.stats().get("compiled_subgraphs", 0)
    with OpenedFiles() as opened, pytest.raises(Exception) as info:
        make_session(path)
    message = str(info.value)
    if (kind, n) == ("short", LARGE):
        # hipep's GetCapability reads the initializer first and refuses before ORT maps the file:
        # ORT logs hipep's error, which names the file and the bytes expected and found
        have, need = 4 * (n // 2), 4 * n
        assert (f"external data of initializer 'w': file '{os.path.join(folder, location)}' holds {have} bytes, "
                f"but the initializer's offset 0 + length {need} needs {need} ({need - have} bytes missing)"
                in capfd.readouterr().err)
    # (onnxruntime 1.24 does not look for a large initializer's missing file at load time either)
    if (n, entry) == (LARGE, "hipep.InferenceSession") and (kind == "short" or (ORT_1_24 and kind == "missing")):
        # ORT reads a large initializer only when hipep's GetCapability asks for it, and only logs
        # that failure; the session then fails for the fallback, and hipep says why
        assert info.type is ModelError, message
        assert f"external data of initializer 'w': location '{location}'" in message, message
        assert EXPLAIN_SAYS[kind] in message and ORT_SAYS[kind] not in message, message
    else:
        # ORT's error reaches the user as it is: it names the initializer and what is wrong
        assert ORT_SAYS[kind] in message, message
        assert "initializer: w" in message or (ORT_1_24 and kind == "missing"), message
        if kind in ("parent", "symlink", "missing"):
            assert os.path.basename(location) in message, message
    # hipep compiled nothing and Python opened nothing outside the folder
    assert hipep.stats().get("compiled_subgraphs", 0) == compiled
    assert not [p for p in opened if not p.startswith(os.path.realpath(folder)) and "outside" in p], opened
    _good_session_still_works(tmp_path, make_session)


@pytest.mark.parametrize("n", (SMALL, LARGE))
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("given", ("path", "proto", "bytes"))
def test_explain_refuses_bad_external_data(layout, tmp_path, monkeypatch, given, kind, n):
    folder, outside = layout
    path, location = _bad_model(kind, n, folder, outside)
    monkeypatch.chdir(folder)  # a model in memory reads external data from the working directory
    model = {"path": path, "proto": onnx.load(path, load_external_data=False),
             "bytes": open(path, "rb").read()}[given]
    if (kind, n) == ("short", LARGE):  # explain never reads these bytes, so it does not miss them
        assert hipep.explain(model).all_claimed
        return
    with OpenedFiles() as opened, pytest.raises(ModelError) as info:
        hipep.explain(model)
    message = str(info.value)
    assert "external data of initializer 'w'" in message and f"location '{location}'" in message, message
    assert EXPLAIN_SAYS[kind] in message, message
    assert not [p for p in opened if "outside" in p], opened
    good = tmp_path / "good"
    good.mkdir()
    _weights(n).tofile(good / "w.bin")
    assert hipep.explain(_model(str(good), "w.bin", n)).all_claimed


@pytest.mark.parametrize("n", (SMALL, LARGE))
@pytest.mark.parametrize("location", ("inside_link.bin", "sub/../w.bin", "./w.bin"))
def test_locations_that_stay_inside_the_folder_work_everywhere(tmp_path, location, n):
    """A symbolic link that stays in the folder and a path through a subfolder: ORT takes them,
    and explain agrees (onnx's checker alone would refuse every symbolic link)."""
    _weights(n).tofile(tmp_path / "w.bin")
    (tmp_path / "sub").mkdir()
    os.symlink(tmp_path / "w.bin", tmp_path / "inside_link.bin")
    path = _model(str(tmp_path), location, n)
    x = np.ones(n, np.float32)
    want = _weights(n) + x
    for make_session in _sessions().values():
        np.testing.assert_array_equal(make_session(path).run(None, {"x": x})[0], want)
    assert hipep.explain(path).all_claimed
