"""`python -m hipep.tools.fuzz`: a campaign, a replay of a saved case, or one case shown."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .cases import DEFAULT_OUT
from .mutations import gen_case
from .workers import execute, limit_memory, worker_main
from .campaign import campaign, format_summary, load_case

DESCRIPTION = "Differential fuzzing of hipep's CPU device against ONNX Runtime's CPU EP."


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hipep.tools.fuzz", description=DESCRIPTION)
    p.add_argument("--cases", type=int, default=200)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0, help="first case's seed (case i has seed + i)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per case before it counts as a hang")
    p.add_argument("--out", default=DEFAULT_OUT, help="where findings and the summary go")
    p.add_argument("--replay", metavar="FOLDER", help="run a saved case again in this process and print the verdict")
    p.add_argument("--show", type=int, metavar="SEED", help="print case SEED's model and feeds")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker_main(float(os.environ.get("HIPEP_FUZZ_MEMORY_GIB", "6")))
    if args.replay:
        limit_memory(float(os.environ.get("HIPEP_FUZZ_MEMORY_GIB", "6")))
        case = load_case(Path(args.replay))
        print(f"seed {case.seed}: {case.kind}: {case.what}")
        o = execute(case)
        print(f"{o.verdict}: {o.category}: {o.detail}")
        return 0 if o.verdict == "pass" else 1
    if args.show is not None:
        case = gen_case(args.show)
        print(f"seed {case.seed}: {case.kind}: {case.what}\n{_model_text(case.model)}")
        for i, run in enumerate(case.runs):
            for k, v in run.items():
                print(f"run {i} {k}: {v.dtype} {v.shape}\n{v}")
        return 0
    s = campaign(args.cases, args.workers, args.seed, args.out, args.timeout,
                 progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(format_summary(s))
    return 1 if s["findings"] else 0


def _model_text(data: bytes) -> str:
    from onnx import ModelProto, printer

    m = ModelProto()
    try:
        m.ParseFromString(data)
        return printer.to_text(m)
    except Exception as e:  # noqa: BLE001 - a mutated model need not parse
        return f"(does not parse: {e})"
