"""`explain`: which nodes of a model hipep would run, and why it leaves the others.

Importable on its own (no native extension): it reads the model with onnx, builds the same
GraphView the ORT bridge builds, and runs the same partitioner.
"""
from __future__ import annotations

import os

from .errors import ModelError
from .graph import SMALL_CONSTANT_ELEMENTS, GraphView
from .partition import PartitionReport, partition


def explain(model_or_path) -> PartitionReport:
    """Partition a model as a hipep session would and return the report.

    `model_or_path` is an onnx.ModelProto, a path to a .onnx file, or the serialized bytes of
    one. External data is located relative to the model's folder (for a ModelProto or bytes,
    relative to the working directory, as ORT does for a model loaded from memory). The contents
    of large external tensors are never read, only their types; small external initializers (the
    constants claim predicates may read, such as shape operands) are read, as the ORT bridge
    copies them too.

    The report equals what a session decides under
    ``GraphOptimizationLevel.ORT_DISABLE_ALL``: ORT runs its own graph optimizations (constant
    folding, fusions, layout rewrites) *before* it calls GetCapability, so with optimizations on
    a session may see fused or rewritten nodes and claim differently.

    Raises hipep.errors.ModelError, naming the model and the problem, when the file is missing
    or unreadable, the bytes are not an ONNX model, or the model fails onnx.checker.
    """
    import onnx

    if isinstance(model_or_path, onnx.ModelProto):
        where = "<ModelProto>"
        model = model_or_path
        folder, checked = "", model
    elif isinstance(model_or_path, (bytes, bytearray, memoryview)):
        where = "<bytes>"
        model = _parse(bytes(model_or_path), where)
        folder, checked = "", model
    elif isinstance(model_or_path, (str, os.PathLike)):
        path = os.fspath(model_or_path)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        where = path
        model = _load_file(path)
        folder, checked = os.path.dirname(os.path.abspath(path)), path
    else:
        raise TypeError(f"explain() takes an onnx.ModelProto, a path or bytes, "
                        f"not {type(model_or_path).__name__}")

    # By path, the checker resolves external data against the model's folder (it checks the
    # files exist, without reading them); in memory, against the working directory.
    _check(checked, where)
    model = _load_small_external_tensors(model, folder, where)
    try:
        graph = GraphView.from_onnx(model)
    except Exception as e:  # a model onnx accepted but hipep cannot read
        raise ModelError(f"cannot read ONNX model {_quote(where)}: {type(e).__name__}: {e}") from e
    return partition(graph)


def _quote(where: str) -> str:
    return where if where.startswith("<") else f"'{where}'"


def _load_file(path: str):
    import onnx

    if not os.path.exists(path):
        raise ModelError(f"cannot read ONNX model '{path}': no such file")
    if os.path.isdir(path):
        raise ModelError(f"cannot read ONNX model '{path}': is a directory")
    if os.path.getsize(path) == 0:
        raise ModelError(f"cannot read ONNX model '{path}': the file is empty")
    try:
        model = onnx.load(path, load_external_data=False)
    except OSError as e:
        raise ModelError(f"cannot read ONNX model '{path}': {e.strerror or e}") from e
    except Exception as e:  # protobuf DecodeError and friends
        raise ModelError(f"cannot read ONNX model '{path}': not a valid ONNX protobuf "
                         f"({type(e).__name__}: {e})") from e
    return _require_graph(model, path)


def _parse(data: bytes, where: str):
    import onnx

    if not data:
        raise ModelError(f"cannot read ONNX model {_quote(where)}: no data")
    try:
        model = onnx.load_model_from_string(data)
    except Exception as e:  # protobuf DecodeError and friends
        raise ModelError(f"cannot read ONNX model {_quote(where)}: not a valid ONNX protobuf "
                         f"({type(e).__name__}: {e})") from e
    return _require_graph(model, where)


def _require_graph(model, where: str):
    if not model.HasField("graph"):
        raise ModelError(f"cannot read ONNX model {_quote(where)}: no graph (not an ONNX model?)")
    return model


def _check(model_or_path, where: str) -> None:
    import onnx

    try:
        onnx.checker.check_model(model_or_path)
    except onnx.checker.ValidationError as e:
        # ONNX Runtime runs ops ONNX's own schemas do not know (its contrib ops, some in the
        # default domain, like SimplifiedLayerNormalization): those are not invalid models.
        # Nor are graph outputs declared without a shape, which ORT takes.
        if "No Op registered for" in str(e) or "Field 'shape' of 'type' is required" in str(e):
            return
        raise ModelError(f"cannot read ONNX model {_quote(where)}: invalid model: {e}") from e
    except ValueError as e:
        if "too large" in str(e):  # an in-memory proto over 2 GiB: the checker only takes
            return  # such models by path; leave the verdict to parsing and ORT
        raise ModelError(f"cannot read ONNX model {_quote(where)}: invalid model: {e}") from e
    except Exception as e:  # noqa: BLE001
        raise ModelError(f"cannot read ONNX model {_quote(where)}: invalid model: {e}") from e


def _load_small_external_tensors(model, folder: str, where: str):
    """Read the data of small external initializers (GraphView copies small constants); leave
    large ones external, as GraphView only reads their type. Never mutates the caller's proto."""
    import onnx
    from onnx import external_data_helper as edh

    def small_external(m):
        for t in edh._get_all_tensors(m):
            if edh.uses_external_data(t):
                count = 1
                for d in t.dims:
                    count *= int(d)
                if count <= SMALL_CONSTANT_ELEMENTS:
                    yield t

    if next(small_external(model), None) is None:
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for t in small_external(copy):
        try:
            edh.load_external_data_for_tensor(t, folder)
        except Exception as e:  # noqa: BLE001
            raise ModelError(f"cannot read ONNX model {_quote(where)}: external data of "
                             f"initializer '{t.name}': {e}") from e
    return copy
