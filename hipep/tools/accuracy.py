"""The accuracy harness: hipep against ONNX Runtime's CPU EP, output by output.

For every model it runs both on the same inputs and compares every output (for decoders: the
logits and the present KV cache, at prefill and at one decode step). It prints a Markdown table —
model, stage, output, relative L2, max |diff|, elements, NaN/Inf positions equal, threshold, pass —
and for the decoders also compares 32 greedy tokens through onnxruntime-genai (batch 1, and a
batch of two left-padded prompts of different lengths). Exit status 1 when anything fails.

    python -m hipep accuracy [--models NAME ...] [--list]
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

FP32_THRESHOLD = 1e-3
LOW_PRECISION_THRESHOLD = 1e-2  # fp16 and int4 models


@dataclass
class Row:
    model: str
    stage: str
    output: str
    rel_l2: float
    max_abs: float
    elements: int
    nonfinite_equal: bool
    threshold: float

    @property
    def passed(self) -> bool:
        return self.nonfinite_equal and self.rel_l2 <= self.threshold


@dataclass
class Case:
    name: str
    threshold: float
    # -> (model path or bytes, [(stage, feeds or feeds(cpu_session, previous_outputs)), ...])
    build: Callable[[], tuple]
    genai_folder: Callable[[], str] | None = None
    # trim(stage, output name, array) -> the part of the output that is defined (ORT leaves some
    # rows of a fixed-capacity KV cache unwritten: their bytes are whatever memory held)
    trim: Callable[[str, str, np.ndarray], np.ndarray] | None = None
    notes: list[str] = field(default_factory=list)


def compare(model: str, stage: str, names, got, want, threshold: float) -> list[Row]:
    rows = []
    for name, g, w in zip(names, got, want):
        g64, w64 = np.asarray(g, np.float64), np.asarray(w, np.float64)
        finite = np.isfinite(g64) & np.isfinite(w64)
        same_nonfinite = bool(np.array_equal(np.isnan(g64), np.isnan(w64)) and
                              np.array_equal(np.isposinf(g64), np.isposinf(w64)) and
                              np.array_equal(np.isneginf(g64), np.isneginf(w64)))
        diff = (g64 - w64)[finite]
        ref = w64[finite]
        norm = float(np.linalg.norm(ref))
        rel = float(np.linalg.norm(diff) / norm) if norm > 0 else float(np.linalg.norm(diff))
        rows.append(Row(model, stage, name, rel, float(np.max(np.abs(diff))) if diff.size else 0.0,
                        int(g64.size), same_nonfinite, threshold))
    return rows


def run_case(case: Case) -> list[Row]:
    import onnxruntime as ort

    import hipep

    model, stages = case.build()
    hip = hipep.InferenceSession(model)
    cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    names = [o.name for o in cpu.get_outputs()]
    rows = []
    previous = None  # the CPU EP's outputs of the stage before (a decode step feeds on them)
    for stage, feeds in stages:
        feeds = feeds(cpu, previous) if callable(feeds) else feeds
        want = cpu.run(None, feeds)
        got = hip.run(None, feeds)
        previous = dict(zip(names, want))
        if case.trim is not None:
            got = [case.trim(stage, n, a) for n, a in zip(names, got)]
            want = [case.trim(stage, n, a) for n, a in zip(names, want)]
        rows += compare(case.name, stage, names, got, want, case.threshold)
    return rows


def token_rows(case: Case) -> list[tuple[str, str, bool]]:
    from .generate import greedy

    folder = case.genai_folder()
    out = []
    for label, prompts in (("batch 1", [[1, 20, 21, 22, 23, 24]]), ("batch 2", [[1, 14, 15], [1, 30, 31, 32, 33, 34, 35, 36]])):
        want = greedy(folder, prompts, 32, ep="cpu")
        got = greedy(folder, prompts, 32, ep="hipep", provider_options={"device": "cpu", "strict": "1"})
        out.append((case.name, label, got == want))
    return out


def _table(rows: list[Row]) -> str:
    lines = ["| model | stage | output | rel L2 | max abs diff | elements | NaN/Inf equal | threshold | pass |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.model} | {r.stage} | {r.output} | {r.rel_l2:.2e} | {r.max_abs:.2e} | {r.elements} | "
                     f"{'yes' if r.nonfinite_equal else 'NO'} | {r.threshold:.0e} | {'pass' if r.passed else 'FAIL'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from .accuracy_models import CASES

    ap = argparse.ArgumentParser(prog="hipep accuracy", description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", help="run only these (default: all)")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    ap.add_argument("--no-tokens", action="store_true", help="skip the onnxruntime-genai token comparison")
    args = ap.parse_args(argv)
    cases = [c for c in CASES() if not args.models or c.name in args.models]
    if args.list:
        print("\n".join(c.name for c in cases))
        return 0
    rows: list[Row] = []
    tokens: list[tuple[str, str, bool]] = []
    errors: list[str] = []
    start = time.time()
    for case in cases:
        try:
            rows += run_case(case)
            if case.genai_folder is not None and not args.no_tokens:
                tokens += token_rows(case)
        except Exception as e:  # noqa: BLE001 - a model that does not run is a failure, reported
            errors.append(f"{case.name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    print(_table(rows))
    if tokens:
        print("\n| model | greedy 32 tokens (onnxruntime-genai) | equal to the CPU EP |\n|---|---|---|")
        for model, label, same in tokens:
            print(f"| {model} | {label} | {'yes' if same else 'NO'} |")
    for e in errors:
        print(f"\nERROR {e}")
    ok = not errors and all(r.passed for r in rows) and all(t[2] for t in tokens)
    print(f"\n{'PASS' if ok else 'FAIL'}: {len(rows)} outputs, {len(tokens)} token comparisons, "
          f"{len(errors)} errors in {time.time() - start:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
