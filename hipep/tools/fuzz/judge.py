"""Verdicts: how hipep's session and the CPU EP's are compared (`judge`, `compare`), what makes an
error clear (`error_clarity`), and the findings already known (`KNOWN`)."""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .cases import Case, Check, Outcome


# ---- judging --------------------------------------------------------------------------------------

HIPEP_ERRORS = {"HipepError", "OptionError", "ModelError", "RuntimeShapeError", "FallbackError", "DataDependent",
                "NoKernel", "KernelCompileError", "CudaError"}
_STATUS = re.compile(r"hipep: (.*?) failed(?: with)?:? (.*)", re.S)
_PYERR = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Warning|Interrupt|Exit))\b")


@dataclass
class Result:
    """What one step (session creation, one run) did, in plain data."""
    ok: bool
    outputs: list | None = None
    etype: str = ""
    message: str = ""

    @classmethod
    def error(cls, e: BaseException) -> "Result":
        return cls(False, None, type(e).__name__ if not _is_hipep(e) else "hipep." + type(e).__name__, str(e))


def _is_hipep(e) -> bool:
    from ...errors import HipepError

    return isinstance(e, HipepError)


def error_clarity(r: Result) -> tuple[str, bool, str]:
    """(origin, clear, why) for a failed step of hipep's session: origin "hipep" when hipep raised
    it (directly, or through ORT with hipep's status), else "ort" (ORT's own checks: the model,
    the feeds)."""
    if r.etype.startswith("hipep."):
        inner = _inner_error(r.message)
        if inner:
            return "hipep", False, f"{r.etype} wrapping an internal {inner}"
        return "hipep", True, r.etype
    msg = r.message
    m = _STATUS.search(msg)
    if m:
        detail = m.group(2)
        if "\nAt:\n" in detail or "Traceback (most recent call last)" in detail:
            return "hipep", False, "a Python traceback in hipep's error"
        name = _PYERR.match(detail)
        if name:
            base = name.group(1).rsplit(".", 1)[-1]
            if base not in HIPEP_ERRORS:
                return "hipep", False, f"{base} (not a hipep error) from hipep"
            inner = _inner_error(detail)
            if inner:
                return "hipep", False, f"{base} wrapping an internal {inner}"
            return "hipep", True, base
        if "unknown C++ exception" in detail:
            return "hipep", False, "an unknown C++ exception"
        return "hipep", True, "hipep's bridge"
    if "Traceback (most recent call last)" in msg:
        return "ort", False, "a Python traceback"
    return "ort", True, f"{r.etype} from ONNX Runtime"


def _inner_error(text: str) -> str:
    """The name of a Python exception other than hipep's that a hipep error quotes ("compiling
    failed: AttributeError: ..."): an internal error dressed as a clear one."""
    for m in re.finditer(r"(?:failed|error|\))(?: with)?: ([A-Za-z_][\w.]*(?:Error|Exception))\b", text, re.I):
        name = m.group(1).rsplit(".", 1)[-1]
        if name not in HIPEP_ERRORS:
            return name
    return ""


def compare(got: np.ndarray, want: np.ndarray, check: Check) -> str | None:
    """None if `got` agrees with `want` under `check`, else what differs."""
    if not isinstance(got, np.ndarray) or not isinstance(want, np.ndarray):
        return f"not tensors: {type(got).__name__} vs {type(want).__name__}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} vs {want.dtype}"
    if got.shape != want.shape:
        return f"shape {got.shape} vs {want.shape}"
    if check.mode == "shape" or got.size == 0:
        return None
    if got.dtype.kind == "f":
        gn, wn = np.isnan(got), np.isnan(want)
        if check.nan == "skip":  # NaN and infinities on either side
            gn = wn = gn | wn | np.isinf(got) | np.isinf(want)
        if not np.array_equal(gn, wn):
            i = np.argwhere(gn != wn)[0]
            return f"NaN positions differ first at {tuple(int(j) for j in i)}: {got[tuple(i)]} vs {want[tuple(i)]}"
        g64, w64 = np.where(gn, 0, got).astype(np.float64), np.where(wn, 0, want).astype(np.float64)
        if check.mode == "exact":
            bad = g64 != w64
        else:
            finite = np.isfinite(w64)
            scale = np.max(np.abs(w64[finite])) if finite.any() else 0.0
            with np.errstate(invalid="ignore"):
                diff = np.abs(g64 - w64)
                bad = np.where(np.isfinite(g64) & finite, diff > check.atol + check.rtol * (np.abs(w64) + scale),
                               g64 != w64)
    else:
        bad = got != want
    if np.any(bad):
        i = tuple(int(j) for j in np.argwhere(bad)[0])
        return (f"{int(np.count_nonzero(bad))} of {got.size} elements differ ({check.mode}"
                f"{'' if check.mode == 'exact' else f' rtol {check.rtol:g}'}), first at {i}: {got[i]!r} vs {want[i]!r}")
    return None


def judge(case: Case, h_create: Result, c_create: Result, runs: list[tuple[Result, Result | None]],
          out_names: list[str]) -> Outcome:
    """The verdict for one case from what hipep's and the CPU EP's sessions did (c is None for a
    run when the CPU EP has no session)."""
    if not h_create.ok:
        if h_create.etype == "hipep.FallbackError":
            return Outcome("pass", "hipep-leaves-nodes", _first_line(h_create.message, 2))
        origin, clear, why = error_clarity(h_create)
        if origin == "hipep" and not clear:
            return Outcome("finding", "unclear-error", f"session creation: {why}: {_clip(h_create.message)}",
                           "hipep-create")
        if not c_create.ok:
            return Outcome("pass", "both-reject", _first_line(h_create.message))
        if origin == "hipep":
            return Outcome("pass", "hipep-rejects", _first_line(h_create.message))
        return Outcome("finding", "ort-rejects-hipep-session",
                       f"session creation: ORT refuses hipep's session only: {_clip(h_create.message)}", "hipep-create")
    cpu_missing = not c_create.ok and ("NOT_IMPLEMENTED" in c_create.message
                                       or "Could not find an implementation" in c_create.message)
    if not c_create.ok and not cpu_missing:
        # ORT's CPU EP refuses what hipep's session accepted: hipep must not then answer
        answered = [i for i, (h, _) in enumerate(runs) if h.ok]
        if answered:
            return Outcome("finding", "accepts-invalid",
                           f"the CPU EP refuses the model ({_first_line(c_create.message)}) but hipep answers "
                           f"run {answered[0]}", "hipep-run")
    category, detail = "match", ""
    for i, (h, c) in enumerate(runs):
        if not h.ok:
            origin, clear, why = error_clarity(h)
            if not clear:
                return Outcome("finding", "unclear-error", f"run {i}: {why}: {_clip(h.message)}", "hipep-run")
            if c is not None and c.ok:
                if origin == "ort":  # ORT's own checks refuse hipep's run only: hipep's outputs, say
                    return Outcome("finding", "ort-rejects-hipep-run", f"run {i}: {_clip(h.message)}", "hipep-run")
                category, detail = "hipep-rejects-run", f"run {i}: {_hipep_reason(h.message)}"
            elif category == "match":
                category, detail = "both-reject-run", f"run {i}: {_hipep_reason(h.message)}"
            continue
        if c is None:
            if category == "match":
                category, detail = "hipep-only", _first_line(c_create.message)
            continue
        if not c.ok:
            return Outcome("finding", "accepts-invalid",
                           f"run {i}: the CPU EP rejects the run ({_first_line(c.message)}) but hipep answers",
                           "hipep-run")
        if len(h.outputs) != len(c.outputs):
            return Outcome("finding", "mismatch", f"run {i}: {len(h.outputs)} outputs vs {len(c.outputs)}")
        for name, got, want in zip(out_names, h.outputs, c.outputs):
            why = compare(got, want, case.checks.get(name, Check("close", 1e-4, 1e-5)))
            if why:
                return Outcome("finding", "mismatch", f"run {i}: output '{name}': {why}", "hipep-run")
    return Outcome("pass", category, detail)


def optimizer_explains(case: Case, outcome: Outcome, runs: list[tuple[Result, Result | None]],
                       optimized: list[Result], out_names: list[str]) -> Outcome:
    """A mismatch in a case run with ORT's graph optimizations, where ORT's CPU EP with the same
    optimizations gives hipep's answers in every run: the optimized graph ORT hands hipep computes
    something else than the model (ExpandElimination of an Expand to a zero extent, say); hipep runs
    the graph it is given. Any other outcome is returned as it is."""
    if outcome.category != "mismatch" or not case.optimize or len(optimized) != len(runs):
        return outcome
    for (h, _), o in zip(runs, optimized):
        if h.ok != o.ok or (h.ok and len(h.outputs) != len(o.outputs)):
            return outcome
        for name, got, want in zip(out_names, h.outputs if h.ok else (), o.outputs if o.ok else ()):
            if compare(got, want, case.checks.get(name, Check("close", 1e-4, 1e-5))):
                return outcome
    return Outcome("pass", "ort-optimizer-differs", f"{outcome.detail}; ORT's CPU EP with the same graph "
                   f"optimizations answers as hipep")


def _hipep_reason(message: str) -> str:
    """The part of an error that says why: hipep's own text after ORT's wrapping."""
    m = _STATUS.search(message)
    return _first_line(m.group(2) if m else message)


# Findings described in docs/reliability.md whose fixes lie outside the op registry (the runtime,
# the bridge) or that are deliberate: (name, pattern over "category: detail"). A campaign counts
# them apart from new findings; once fixed they simply stop matching.
KNOWN = [
    ("alloc-error-traceback", r"^unclear-error: .*(Failed to allocate memory|MemoryError: Unable to allocate|"
                              r"ValueError: array is too big|allocate_outputs: shape \d+ = )"),
    ("signature-reads-missing-element", r"^unclear-error: .*IndexError: index \d+ is out of bounds.*signature"),
    ("prelu-slope-wider-than-x", r"^accepts-invalid: .*running PRelu node"),
    ("bufferize-castop-result", r"^unclear-error: .*AttributeError: 'CastOp' object has no attribute 'result'"),
    ("bufferize-empty-name-hint", r"^unclear-error: .*ValueError: \('Invalid OpResult name format ``"),
    # deliberate: ONNX 20 defines an empty bool ReduceMax/Min (false/true), ORT's CPU EP refuses it
    ("reduce-empty-bool", r"^accepts-invalid: .*Reduce(Max|Min) is not defined for empty set with bool type"),
    # not hipep's: the CPU EP refuses an empty Tile result whose other extents are huge
    ("tile-empty-beyond-4gib", r"^accepts-invalid: .*Tile output tensor would require more than"),
    ("capability-non-utf8-name", r"^ort-rejects-hipep-session: .*assigned to the default CPU EP"),
    # not hipep's: ORT's basic optimizations remove an Expand to a zero extent (ExpandElimination) and its
    # ArgMax then fails with an empty message; hipep runs the graph ORT hands it, without that Expand
    ("ort-expand-elimination-argmax", r"^accepts-invalid: .*running ArgMax node\. Name:'[^']*' Status Message:\)"),
    # not hipep's: the CPU EP alone inserts f16->f32 casts around an opset-1 node it has no f16 kernel for and
    # then finds its own graph invalid; with hipep claiming the node no cast is inserted
    ("ort-inserted-cast-invalid", r"^accepts-invalid: .*InsertedPrecisionFreeCast"),
]


def known_finding(o: Outcome) -> str:
    if o.verdict != "finding":
        return ""
    text = f"{o.category}: {o.detail}"
    return next((name for name, pattern in KNOWN if re.search(pattern, text, re.S)), "")


def _first_line(s: str, n: int = 1) -> str:
    return " / ".join(s.strip().splitlines()[:n])[:300]


def _clip(s: str, n: int = 1500) -> str:
    return s if len(s) <= n else s[:n] + " ..."
