"""A plan as bytes and back: JSON for the structure, base64 .npy for arrays.

Plain data only: dataclasses become tagged objects, tuples stay tuples (symbolic expressions are
tuples), numpy arrays and scalars keep their dtype. Nothing here imports the compiler, so a plan
loaded from bytes (an EPContext node's payload) runs with the runtime alone.
"""
from __future__ import annotations

import base64
import io
import json

import numpy as np

from . import plan as P

MAGIC = "hipep-plan"
_STEPS = {"Launch": P.Launch, "HostStep": P.HostStep, "Sync": P.Sync, "Loop": P.Loop, "If": P.If}


def _encode(x):
    if isinstance(x, (bool, str)) or x is None:
        return x
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        if x != x or x in (float("inf"), float("-inf")):
            return {"$float": repr(x)}
        return x
    if isinstance(x, np.ndarray) or isinstance(x, np.generic):
        buf = io.BytesIO()
        np.save(buf, np.asarray(x), allow_pickle=False)
        return {"$npy": base64.b64encode(buf.getvalue()).decode("ascii"), "scalar": isinstance(x, np.generic)}
    if isinstance(x, tuple):
        return {"$tuple": [_encode(v) for v in x]}
    if isinstance(x, list):
        return [_encode(v) for v in x]
    if isinstance(x, dict):
        if all(isinstance(k, str) for k in x):
            return {"$dict": {k: _encode(v) for k, v in x.items()}}
        return {"$items": [[_encode(k), _encode(v)] for k, v in x.items()]}
    if isinstance(x, P.ValueSpec):
        return {"$value": {f: _encode(getattr(x, f)) for f in x.__dataclass_fields__}}
    for name, cls in _STEPS.items():
        if type(x) is cls:
            return {"$step": name, "fields": {f: _encode(getattr(x, f)) for f in x.__dataclass_fields__}}
    raise TypeError(f"a plan cannot hold {type(x).__name__} values")


def _decode(x):
    if isinstance(x, list):
        return [_decode(v) for v in x]
    if not isinstance(x, dict):
        return x
    if "$float" in x:
        return float(x["$float"])
    if "$npy" in x:
        a = np.load(io.BytesIO(base64.b64decode(x["$npy"])), allow_pickle=False)
        return a[()] if x.get("scalar") else a
    if "$tuple" in x:
        return tuple(_decode(v) for v in x["$tuple"])
    if "$dict" in x:
        return {k: _decode(v) for k, v in x["$dict"].items()}
    if "$items" in x:
        return {_decode(k): _decode(v) for k, v in x["$items"]}
    if "$value" in x:
        return P.ValueSpec(**{k: _decode(v) for k, v in x["$value"].items()})
    if "$step" in x:
        cls = _STEPS[x["$step"]]
        return cls(**{k: _decode(v) for k, v in x["fields"].items()})
    raise ValueError(f"unknown plan object {sorted(x)}")


def plan_to_bytes(plan: P.Plan) -> bytes:
    doc = {"magic": MAGIC, "version": plan.version, "name": plan.name,
           "values": _encode({int(k): v for k, v in plan.values.items()}),
           "inputs": list(plan.inputs), "outputs": list(plan.outputs),
           "steps": _encode(tuple(plan.steps)), "constants": _encode(dict(plan.constants)),
           "aliases": _encode(tuple(plan.aliases)), "shape_programs": _encode(tuple(plan.shape_programs))}
    return json.dumps(doc, separators=(",", ":")).encode("utf-8")


def plan_from_bytes(data: bytes) -> P.Plan:
    from .errors import HipepError

    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise HipepError(f"not a hipep plan: {e}") from None
    if not isinstance(doc, dict) or doc.get("magic") != MAGIC:
        raise HipepError("not a hipep plan (no 'hipep-plan' header)")
    if doc.get("version") != P.PLAN_VERSION:
        raise HipepError(f"plan version {doc.get('version')} cannot be run by this hipep (it runs version "
                         f"{P.PLAN_VERSION}); compile the model again")
    try:
        return P.Plan(name=doc["name"], values=_decode(doc["values"]), inputs=list(doc["inputs"]),
                      outputs=list(doc["outputs"]), steps=_decode(doc["steps"]),
                      constants=_decode(doc["constants"]), aliases=_decode(doc["aliases"]),
                      shape_programs=_decode(doc.get("shape_programs", {"$tuple": []})))
    except (KeyError, TypeError, ValueError) as e:
        raise HipepError(f"malformed hipep plan: {type(e).__name__}: {e}") from None
