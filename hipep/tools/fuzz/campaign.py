"""Campaigns: many cases through a `Pool`, findings saved as reproducers (`save_case`,
`load_case`) and grouped by signature into a summary."""
from __future__ import annotations

import dataclasses
import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Callable

import numpy as np

from .cases import Case, Check, DEFAULT_OUT, Outcome
from .mutations import gen_case
from .workers import Pool


# ---- campaigns, findings, reports --------------------------------------------------------------------

def save_case(case: Case, outcome: Outcome | None, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.onnx").write_bytes(case.model)
    arrays = {f"run{i}/{k}": v for i, run in enumerate(case.runs) for k, v in run.items()}
    np.savez(folder / "feeds.npz", **arrays)
    meta = {"seed": case.seed, "kind": case.kind, "what": case.what, "optimize": case.optimize,
            "options": case.options, "runs": [sorted(r) for r in case.runs],
            "checks": {k: dataclasses.asdict(c) for k, c in case.checks.items()},
            "outcome": dataclasses.asdict(outcome) if outcome else None,
            "replay": f"python -m hipep.tools.fuzz --replay {folder}"}
    (folder / "case.json").write_text(json.dumps(meta, indent=1, default=str))
    return folder


def load_case(folder: Path) -> Case:
    folder = Path(folder)
    meta = json.loads((folder / "case.json").read_text())
    feeds = np.load(folder / "feeds.npz")
    runs = [{} for _ in meta["runs"]]
    for key in feeds.files:
        run, name = key.split("/", 1)
        runs[int(run[3:])][name] = feeds[key]
    checks = {k: Check(**c) for k, c in meta["checks"].items()}
    return Case(meta["seed"], meta["kind"], meta["what"], (folder / "model.onnx").read_bytes(), runs, checks,
                meta["optimize"], meta["options"])


def signature(case: Case, o: Outcome) -> str:
    """Findings that are one problem share this: category, stage and the message without numbers
    and names."""
    text = re.sub(r"'[^']*'", "'_'", o.detail)
    text = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "#", text)
    text = re.sub(r"HipExecutionProvider_\S+", "HipExecutionProvider_#", text)
    return f"{o.category} | {o.stage.split(' ')[0]} | {text[:160]}"


def campaign(cases: int, workers: int = 2, seed: int = 0, out: Path | str = DEFAULT_OUT, timeout: float = 30.0,
             progress: Callable[[str], None] | None = None) -> dict:
    """Runs cases seed .. seed+cases-1; saves every finding; returns (and writes) the summary."""
    out = Path(out)
    found = out / "findings"
    counts: Counter = Counter()
    kinds: Counter = Counter()
    sigs: dict[str, dict] = {}
    start = time.monotonic()
    done = 0

    def on_outcome(case: Case, o: Outcome):
        nonlocal done
        done += 1
        counts[("known" if o.known else o.verdict, o.known or o.category)] += 1
        kinds[case.kind] += 1
        if o.verdict != "pass":
            folder = save_case(case, o, found / case.name)
            s = signature(case, o)
            entry = sigs.setdefault(s, {"count": 0, "seeds": [], "example": str(folder), "what": case.what,
                                        "detail": o.detail[:600], "verdict": o.verdict, "known": o.known})
            entry["count"] += 1
            entry["seeds"].append(case.seed)
        if progress and (done % 500 == 0 or (o.verdict != "pass" and not o.known)):
            progress(f"[{done}/{cases} {time.monotonic() - start:.0f}s] "
                     + (f"{o.verdict}: {case.name}: {o.category}: {o.detail[:200]}" if o.verdict != "pass" else "ok"))

    with Pool(workers, timeout) as pool:
        pool.run((gen_case(s) for s in range(seed, seed + cases)), on_outcome)
        restarts = pool.restarts
    summary = {"cases": done, "seed": seed, "workers": workers, "seconds": round(time.monotonic() - start, 1),
               "outcomes": {f"{v}/{c}": n for (v, c), n in sorted(counts.items())},
               "kinds": dict(sorted(kinds.items())), "worker_restarts": restarts,
               "findings": sum(n for (v, _), n in counts.items() if v == "finding"),
               "known": sum(n for (v, _), n in counts.items() if v == "known"),
               "signatures": dict(sorted(sigs.items(), key=lambda kv: -kv[1]["count"]))}
    out.mkdir(parents=True, exist_ok=True)
    (out / f"summary-{seed}-{cases}.json").write_text(json.dumps(summary, indent=1))
    return summary


def format_summary(s: dict) -> str:
    lines = [f"{s['cases']} cases (seeds {s['seed']}..{s['seed'] + s['cases'] - 1}) on {s['workers']} workers in "
             f"{s['seconds']} s; {s['findings']} new findings, {s['known']} known; {s['worker_restarts']} workers "
             f"lost to a crash or hang"]
    lines += [f"  {k}: {n}" for k, n in s["outcomes"].items()]
    for sig, e in s["signatures"].items():
        tag = f" [known: {e['known']}]" if e["known"] else ""
        lines.append(f"- {e['count']}x{tag} {sig}\n    e.g. seed {e['seeds'][0]}: {e['what'][:200]}\n"
                     f"    {e['example']}")
    return "\n".join(lines)
