"""Compiled plans on disk: a session whose subgraphs were compiled before loads their plans and
never imports the compiler.

With the provider option `plan_cache=<folder>`, Compile looks its subgraph up in the folder
before compiling and stores the plan it compiles there (`Plan.to_bytes`, the same bytes an
EPContext payload carries). A loaded plan runs with hipep.plan, hipep.runtime and hipep.ops
alone, so a process that finds every plan keeps xDSL, the hip dialect and the passes out of its
memory (~10 MiB of modules) and skips compiling.

A plan is found by a hash of everything that decides it: the subgraph exactly as ORT described
it (nodes, attributes, value types, small constants with their values, the names of the weights
hipep holds; not the weights' bytes, which the plan binds by name at run time), the fused node's
inputs and outputs, the options the compiler reads, the device kind, and hipep's own source (any
edit to hipep's Python code misses the cache rather than loading a plan an older compiler made).
Files are written to a temporary name and renamed into place, so concurrent sessions never read
half a plan; a file that does not load is compiled again and replaced.
"""
from __future__ import annotations

import logging
import os
import struct
import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np

from .errors import OptionError
from .plan import Plan

try:  # hashlib's own blake2b, without hashlib: importing hashlib maps OpenSSL's libcrypto (~3.5 MiB)
    from _blake2 import blake2b
except ImportError:  # an interpreter built without it
    from hashlib import blake2b

SUFFIX = ".hipep-plan"


def check_folder(folder: str) -> None:
    """Creates the cache folder if needed; OptionError when it cannot hold plans."""
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise OptionError(f"option 'plan_cache' = {folder!r} is not a usable folder: {e.strerror}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OptionError(f"option 'plan_cache' = {folder!r} is not writable")


def plan_key(desc: dict, inputs: list[str], outputs: list[str], device_kind: str, options) -> str:
    """The cache key of one Compile call. `desc` is ORT's subgraph description without its
    copied weights (csrc/graph_view.cc)."""
    h = blake2b(digest_size=20)
    h.update(_source_digest())
    _feed(h, {"graph": desc, "inputs": list(inputs), "outputs": list(outputs), "device": device_kind,
              "fusion": options.fusion, "pass_options": options.pass_options})
    return h.hexdigest()


def load(folder: str, key: str, name: str) -> Plan | None:
    """The stored plan for `key`, renamed to this session's fused node `name`; None when there is
    none or it does not load (then it is compiled again and the file replaced)."""
    path = Path(folder) / (key + SUFFIX)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        plan = Plan.from_bytes(data)
    except Exception as e:  # a damaged or foreign file: compiling again is always correct
        logging.getLogger("hipep").warning("hipep: stored plan %s does not load (%s: %s); compiling again",
                                           path, type(e).__name__, e)
        return None
    plan.name = name
    return plan


def store(folder: str, key: str, plan: Plan) -> None:
    path = Path(folder) / (key + SUFFIX)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(plan.to_bytes())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


@lru_cache(maxsize=1)
def _source_digest() -> bytes:
    """A hash of hipep's Python sources (tools excluded): what the compiler is."""
    package = Path(__file__).resolve().parent
    h = blake2b(digest_size=20)
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel.startswith("tools/"):
            continue
        h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.digest()


def _feed(h, x) -> None:
    """Feeds `x` (plain data: dicts, lists, tuples, str, bytes, numbers, None, numpy arrays) into
    `h` unambiguously: every item is tagged with its type and, where it varies, its length."""
    if x is None or isinstance(x, bool):
        h.update(b"N" if x is None else (b"T" if x else b"F"))
    elif isinstance(x, int):
        _tagged(h, b"i", str(x).encode())
    elif isinstance(x, float):
        _tagged(h, b"f", x.hex().encode())
    elif isinstance(x, str):
        _tagged(h, b"s", x.encode("utf-8", "surrogatepass"))
    elif isinstance(x, (bytes, bytearray)):
        _tagged(h, b"b", bytes(x))
    elif isinstance(x, (list, tuple)):
        _tagged(h, b"l" if isinstance(x, list) else b"t", b"")
        h.update(struct.pack("<q", len(x)))
        for v in x:
            _feed(h, v)
    elif isinstance(x, dict):
        items = sorted(x.items(), key=lambda kv: (type(kv[0]).__name__, repr(kv[0])))
        _tagged(h, b"d", b"")
        h.update(struct.pack("<q", len(items)))
        for k, v in items:
            _feed(h, k)
            _feed(h, v)
    elif isinstance(x, (np.ndarray, np.generic)):
        a = np.asarray(x)
        _tagged(h, b"a", f"{a.dtype.str}{a.shape}".encode())
        if a.dtype.hasobject:  # strings: their values, not the pointers
            _feed(h, a.ravel().tolist())
        else:
            h.update(np.ascontiguousarray(a).tobytes())
    else:
        raise TypeError(f"plan cache key: cannot hash a {type(x).__name__} in the subgraph description")


def _tagged(h, tag: bytes, payload: bytes) -> None:
    h.update(tag + struct.pack("<q", len(payload)) + payload)
