"""`explain`: which nodes of a model hipep would run, and why it leaves the others.

Importable on its own (no native extension): it reads the model with onnx, builds the same
GraphView the ORT bridge builds, and runs the same partitioner.
"""
from __future__ import annotations

import os

from .errors import ModelError
from .graph import SMALL_CONSTANT_ELEMENTS, GraphView
from .partition import PartitionReport, partition


def explain(model_or_path, device: str = "cpu") -> PartitionReport:
    """Partition a model as a hipep session on `device` ("cpu", or "cuda": nodes without a GPU
    kernel are left to other EPs) would, and return the report.

    `model_or_path` is an onnx.ModelProto, a path to a .onnx file, or the serialized bytes of
    one. External data is located relative to the model's folder (for a ModelProto or bytes,
    relative to the working directory, as ORT does for a model loaded from memory), under ORT's
    rules: a relative location whose resolved path (symbolic links followed) stays inside that
    folder and names an existing file holding the bytes it claims; anything else is a ModelError
    naming the initializer and the location, and nothing outside the folder is opened. The
    contents of large external tensors are never read, only their types; small external
    initializers (the constants claim predicates may read, such as shape operands) are read, as
    the ORT bridge copies them too.

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

    # External data first, under ORT's rules (the checker's differ: it refuses every symbolic
    # link, where ORT follows one that stays inside the folder).
    _check_external_data(model, folder, where)
    _check(checked, where)
    model = _load_small_external_tensors(model, folder, where)
    try:
        graph = GraphView.from_onnx(model)
    except Exception as e:  # a model onnx accepted but hipep cannot read
        raise ModelError(f"cannot read ONNX model {_quote(where)}: {type(e).__name__}: {e}") from e
    if device not in ("cpu", "cuda"):
        raise ValueError(f"explain: device must be 'cpu' or 'cuda', not {device!r}")
    return partition(graph, device=device, expands=ort_expands)


def ort_expands(node, graph=None) -> bool:
    """Whether ORT replaces `node`, a node of a function op no EP took, by the op's function body:
    it does unless its CPU EP has a kernel for the op at the node's version and, given the node's
    graph, for its element types (AffineGrid has f32 and f64 kernels, not f16; Swish and the losses
    have none). Asked of the installed onnxruntime."""
    kernels = _cpu_kernels()
    if kernels is None:  # no onnxruntime to ask: what ORT does for ops without kernels
        return True
    defs = [c for lo, hi, c in kernels.get((node.domain, node.op_type), ()) if lo <= node.since_version <= hi]
    if not defs:
        return True
    types = None if graph is None else _constraint_types(node, graph)
    if not types:  # types unknown: the version's kernel is taken to run it
        return False
    return not any(all(t in c[name] for name, t in types.items() if name in c) for c in defs)


def _constraint_types(node, graph) -> dict[str, str] | None:
    """The node's element type per type constraint of its op's schema ({"T1": "tensor(float16)"}),
    in ORT's kernel-definition spelling; None where the schema or a type is unknown."""
    import onnx

    try:
        schema = onnx.defs.get_schema(node.op_type, node.since_version, node.domain)
    except Exception:  # noqa: BLE001 - an op onnx does not know
        return None
    types: dict[str, str] = {}
    for formals, values in ((schema.inputs, node.inputs), (schema.outputs, node.outputs)):
        for i, value in enumerate(values):
            if not value or not formals:
                continue
            formal = formals[min(i, len(formals) - 1)]
            elem = graph.type_of(value).elem_type
            if not elem:
                return None
            # ORT spells a type as ONNX's schemas do: tensor(<TensorProto name in lower case>)
            types.setdefault(formal.type_str, f"tensor({onnx.TensorProto.DataType.Name(elem).lower()})")
    return types


_CPU_KERNELS: dict | None = None


def _cpu_kernels() -> dict | None:
    """(domain, op type) -> (first version, last version, type constraints) of each of ORT's CPU EP's
    kernels, or None."""
    global _CPU_KERNELS
    if _CPU_KERNELS is None:
        try:
            from onnxruntime.capi import _pybind_state

            defs = _pybind_state.get_all_opkernel_def()
        except Exception:  # noqa: BLE001 - an onnxruntime without the listing
            return None
        table: dict = {}
        for k in defs:
            if k.provider == "CPUExecutionProvider":
                domain = "" if k.domain == "ai.onnx" else k.domain
                lo, hi = k.version_range
                table.setdefault((domain, k.op_name), []).append((lo, hi, dict(k.type_constraints)))
        _CPU_KERNELS = table
    return _CPU_KERNELS


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
        # A symbolic link to external data inside the model's folder: ORT takes it, and
        # _check_external_data has already refused any that leads outside.
        if "but it is a symbolic link" in str(e):
            return
        raise ModelError(f"cannot read ONNX model {_quote(where)}: invalid model: {e}") from e
    except ValueError as e:
        if "too large" in str(e):  # an in-memory proto over 2 GiB: the checker only takes
            return  # such models by path; leave the verdict to parsing and ORT
        raise ModelError(f"cannot read ONNX model {_quote(where)}: invalid model: {e}") from e
    except Exception as e:  # noqa: BLE001
        raise ModelError(f"cannot read ONNX model {_quote(where)}: invalid model: {e}") from e


def _external_tensors(model):
    from onnx import external_data_helper as edh

    return (t for t in edh._get_all_tensors(model) if edh.uses_external_data(t))


def _external_location(tensor) -> tuple[str, int, int | None]:
    """(location, offset, length or None) of an external tensor's data."""
    info = {e.key: e.value for e in tensor.external_data}
    try:
        offset = int(info.get("offset") or 0)
        length = int(info["length"]) if info.get("length") else None
    except ValueError as e:
        raise ValueError(f"offset/length are not integers ({info.get('offset')!r}, {info.get('length')!r})") from e
    if offset < 0 or (length is not None and length < 0):
        raise ValueError(f"negative offset or length ({offset}, {length})")
    return info.get("location", ""), offset, length


def _external_data_file(tensor, folder: str, where: str, check_size: bool = True) -> tuple[str, int, int]:
    """(real path, offset, length) of `tensor`'s external data, checked as ORT checks it
    (tensorprotoutils.cc, ValidateExternalDataPathFromDir): a relative location, whose path with
    symbolic links resolved lies inside `folder`, naming a regular file that holds offset +
    length bytes (with `check_size`). Raises ModelError naming the initializer and the location
    otherwise."""
    def refuse(why: str):
        return ModelError(f"cannot read ONNX model {_quote(where)}: external data of initializer "
                          f"'{tensor.name}': {why}")

    # a model in memory reads its external data from the working directory, as ORT's does
    base = os.path.realpath(folder or os.getcwd())
    inside = f"the model's folder '{base}'" if folder else f"the working directory '{base}' (a model in memory)"

    try:
        location, offset, length = _external_location(tensor)
    except ValueError as e:
        raise refuse(str(e)) from None
    if not location:
        raise refuse("no location given")
    if os.path.isabs(location) or os.path.splitdrive(location)[0]:
        raise refuse(f"location '{location}' is an absolute path; it must be relative to {inside}")
    real = os.path.realpath(os.path.join(base, location))
    if os.path.commonpath([base, real]) != base:
        raise refuse(f"location '{location}' resolves to '{real}', outside {inside}")
    if not os.path.exists(real):
        raise refuse(f"location '{location}': no such file '{real}'")
    if not os.path.isfile(real):
        raise refuse(f"location '{location}': '{real}' is not a regular file")
    size = os.path.getsize(real)
    if length is None:
        length = max(0, size - offset)
    if check_size and offset + length > size:
        raise refuse(f"location '{location}': offset {offset} + length {length} is past the end of "
                     f"the file ({size} bytes)")
    return real, offset, length


def _check_external_data(model, folder: str, where: str, sizes: bool = False) -> None:
    """Every external location under ORT's rules; file sizes too with `sizes` (explain checks
    only the sizes of what it reads, _load_small_external_tensors)."""
    for t in _external_tensors(model):
        _external_data_file(t, folder, where, check_size=sizes)


def check_external_data(model: str | bytes, failure: Exception | None = None) -> None:
    """Raises ModelError naming the first initializer whose external data breaks ORT's rules
    (see explain), with `failure` (what ORT said) appended; returns when they all hold or the
    model cannot be parsed (the caller's own error then stands). `model` is a path or bytes."""
    import onnx

    try:
        if isinstance(model, str):
            where, folder = model, os.path.dirname(os.path.abspath(model))
            parsed = onnx.load(model, load_external_data=False)
        else:
            where, folder = "<bytes>", ""
            parsed = onnx.load_model_from_string(bytes(model))
    except Exception:  # noqa: BLE001 - not this check's concern
        return
    try:
        _check_external_data(parsed, folder, where, sizes=True)
    except ModelError as e:
        if failure is None:
            raise
        raise ModelError(f"{e}\n(onnxruntime said: {failure})") from failure


def _load_small_external_tensors(model, folder: str, where: str):
    """Read the data of small external initializers (GraphView copies small constants); leave
    large ones external, as GraphView only reads their type. Never mutates the caller's proto."""
    import onnx
    from onnx import TensorProto

    def small_external(m):
        for t in _external_tensors(m):
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
        # read from the checked real path only (onnx's own reader refuses every symbolic link)
        real, offset, length = _external_data_file(t, folder, where)
        try:
            with open(real, "rb") as f:
                f.seek(offset)
                data = f.read(length)
        except OSError as e:
            raise ModelError(f"cannot read ONNX model {_quote(where)}: external data of initializer "
                             f"'{t.name}': cannot read '{real}': {e.strerror or e}") from e
        t.raw_data = data
        t.data_location = TensorProto.DEFAULT
        del t.external_data[:]
    return copy
