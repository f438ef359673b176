"""The prompt's step (the time to the first token) of the ~1.1B builder llama at several prompt
lengths, run after run: what a request of a length the session has not seen waits for, and what
the same length costs once its CUDA graph is captured.

A new input shape is traced and its launches issued one by one from Python the first time, the
launches are captured into a CUDA graph the next time they come out the same, and later runs
replay the graph. For each length (`--lengths`) the prompt's step runs `--runs` times, each run
followed by three decode steps (as a request would continue), and each run's wall time and
hipep.stats() deltas are recorded: kernel_us (from the first launch to the last end: the GPU busy
or waiting on the host), hipep's runtime (run_us less sync_wait_us), launches one by one,
graph launches, new specializations; and the cuBLASLt calls the run issues one by one (their
count and summed host time, each call timed around cuBLASLt's own: a new GEMM shape's first calls
are where cuBLASLt sets itself up), and the time Python's full garbage collections took during the
step. Lengths repeat to tell a new length from one seen before.

Writes benchmarks/results/<date>-prompt-steps-<gpu>[-<precision>].md.

    python benchmarks/prompt_steps.py [--precision int4|int4-f16|int4-bf16] [--model DIR]
                                      [--lengths 128,100,77,512,1024] [--runs 4] [--settle S] [--gc-freeze]
                                      [--host-driver]
                                      [--out DIR]

--settle S waits S seconds after the process's first prompt step (a server's first request, then a
pause before the next): time for work hipep does in the background meanwhile (HIPEP_CUBLASLT_WARM=1's
worker, hipep/runtime/cublaslt_warm.py) to finish before the lengths that follow.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # machine.py, gpu_harness.py, decode.py
import decode as D  # noqa: E402
import gpu_harness as gh  # noqa: E402
from machine import machine_info  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
LENGTHS, RUNS, DECODE_AFTER = (128, 100, 77, 512, 1024), 4, 3


class BlasTimer:
    """Times each cuBLASLt call hipep issues one by one (hipep.runtime.cublaslt.MatmulPlan.run; a
    replayed graph's calls are inside the graph and not seen here), from the thread that runs the
    session (not the warm-up worker's)."""

    def __init__(self):
        from hipep.runtime import cublaslt

        self.calls: list[float] = []
        self._plan, self._run = cublaslt.MatmulPlan, cublaslt.MatmulPlan.run
        timer = self

        def run(plan, *args, **kwargs):
            if threading.current_thread() is not threading.main_thread():
                return timer._run(plan, *args, **kwargs)
            t0 = time.perf_counter_ns()
            try:
                return timer._run(plan, *args, **kwargs)
            finally:
                timer.calls.append((time.perf_counter_ns() - t0) / 1e3)
        self._plan.run = run

    def take(self) -> list[float]:
        calls, self.calls = self.calls, []
        return calls

    def close(self) -> None:
        self._plan.run = self._run


class GcTimer:
    """Times Python's full (generation 2) garbage collections while a step runs (gc.callbacks).
    A full collection walks every object the process holds, a session's bindings of every prompt
    length it keeps among them, and lands in whichever step happens to allocate when it is due."""

    def __init__(self):
        self.ms: list[float] = []
        self._start = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.ms.append((time.perf_counter() - self._start) * 1e3)

    def take(self) -> list[float]:
        ms, self.ms = self.ms, []
        return ms

    def close(self) -> None:
        gc.callbacks.remove(self._callback)


def measure(path: str, facts: dict, lengths: list[int], runs: int, device_id: int, settle: float = 0.0,
            gc_freeze: bool = False) -> list[dict]:
    """One row per prompt step: its length, which run of that length it was, wall ms and the
    counters' deltas."""
    import hipep

    sess = hipep.InferenceSession(path, device="cuda", device_id=device_id)
    dec = D.Decoder(sess, facts["head_size"], max(lengths) + DECODE_AFTER + 1, gh.Placement(device_id))
    rng = np.random.default_rng(0)
    seen: dict[int, int] = {}
    blas = BlasTimer()
    collections = GcTimer()
    rows = []
    try:
        for n in lengths:
            for _ in range(runs):
                prompt = rng.integers(3, facts["vocab"], n).astype(np.int64)
                blas.take()
                collections.take()
                token, wall, d = D.timed_step(dec, prompt[None], n)
                calls = blas.take()
                full_gc = collections.take()
                seen[n] = seen.get(n, 0) + 1
                rows.append({"n": n, "run": seen[n], "wall_ms": wall / 1e6, "kernel_ms": d["kernel_us"] / 1e3,
                             "runtime_ms": (d["run_us"] - d["sync_wait_us"]) / 1e3,
                             "direct": d["direct_launches"], "graphs": d["graph_launches"],
                             "specializations": d["specializations"], "arena_moves": d["arena_moves"],
                             "blas_calls": len(calls),
                             "blas_ms": sum(calls) / 1e3, "blas_first_ms": max(calls, default=0.0) / 1e3,
                             "gc_ms": sum(full_gc)})
                for k in range(DECODE_AFTER):  # the request goes on decoding
                    token, step_ns, _ = D.timed_step(dec, np.array([[token]], np.int64), n + 1 + k)
                    if k == 0:
                        rows[-1]["decode_ms"] = step_ns / 1e6
                if len(rows) == 1 and settle > 0:
                    time.sleep(settle)
                if len(rows) == 1 and gc_freeze:  # as a server would once its sessions are warm
                    gc.collect()
                    gc.freeze()
    finally:
        blas.close()
        collections.close()
    return rows


def warm_line(settle: float) -> str:
    from hipep.runtime import cublaslt_warm

    if not cublaslt_warm.enabled():
        return "off"
    done = cublaslt_warm.wait(0)
    return (f"on; {len(cublaslt_warm.warmed())} algorithms run by it"
            f"{'' if done else ' (still running at the end)'}; {settle:g} s waited after the first prompt step")


def render(info: dict, facts: dict, folder: str, rows: list[dict], command: str, settle: float = 0.0,
           gc_freeze: bool = False) -> str:
    L = gh.header_lines(f"The prompt's step by length and run: {os.path.basename(folder.rstrip(os.sep))} "
                        f"on {info['gpu']}", info, command)
    L += [f"- model: `{folder}` ({facts['layers']} layers, hidden {facts['hidden']}, {facts['quantization']}, "
          f"{facts['activations']} activations)",
          f"- each prompt step followed by {DECODE_AFTER} decode steps; lengths in the order run",
          f"- cuBLASLt's warm-up worker (HIPEP_CUBLASLT_WARM=1): {warm_line(settle)}",
          "- gc.freeze() after the first prompt step: " + ("yes" if gc_freeze else "no"),
          "",
          "| prompt tokens | run of that length | wall ms | kernel ms | hipep's runtime ms | launches one by one "
          "| graph launches | new specializations | arena moves | cuBLASLt calls one by one | their ms "
          "| the slowest one, ms | Python's full collections, ms | the next decode step, ms |",
          "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        L.append(f"| {r['n']} | {r['run']} | {r['wall_ms']:.2f} | {r['kernel_ms']:.2f} | {r['runtime_ms']:.2f} | "
                 f"{r['direct']} | {r['graphs']} | {r['specializations']} | {r['arena_moves']} | "
                 f"{r['blas_calls']} | {r['blas_ms']:.2f} | "
                 f"{r['blas_first_ms']:.2f} | {r['gc_ms']:.2f} | {r['decode_ms']:.2f} |")
    L += ["", "kernel ms: hipep.stats()'s kernel_us, from a run's first launch to its last end (the GPU busy or "
              "waiting for the host's launches); hipep's runtime: run_us less sync_wait_us; cuBLASLt calls: "
              "those issued one by one (a replayed graph holds its own), each timed around cuBLASLt's call; "
              "arena moves: hipep.stats()'s arena_moves (the run's memory allocated anew, larger); Python's full "
              "collections: the time generation-2 garbage collections took during the step (gc.callbacks; they "
              "walk every object of the process, and land in whichever step allocates when one is due); the next "
              "decode step: the wall time of the first decode step after that prompt step (its graph is captured "
              "again when the prompt moved the arena).", ""]
    first = [r for r in rows if r["run"] == 1 and r is not rows[0]]
    later = [r for r in rows if r["run"] >= 3]
    if first and later:
        new_ms = np.median([r["wall_ms"] for r in first])
        new_runtime = np.median([r["runtime_ms"] for r in first])
        seen_ms = np.median([r["wall_ms"] for r in later])
        after_new = np.median([r["decode_ms"] for r in first])
        L += [f"A length not seen before (the process's first step aside): median {new_ms:.2f} ms, "
              f"{new_runtime:.2f} ms of it in hipep's runtime, and {after_new:.2f} ms for the decode step after it; "
              f"a length seen twice before: median {seen_ms:.2f} ms.", ""]
    return "\n".join(L)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model",
                    help="a builder model folder (default: model_zoo's llama '1b' of --precision, built once)")
    ap.add_argument("--precision", choices=("int4", "int4-f16", "int4-bf16"), default="int4-f16")
    ap.add_argument("--lengths", default=",".join(map(str, LENGTHS)),
                    help="prompt lengths, in order (default %(default)s)")
    ap.add_argument("--runs", type=int, default=RUNS, help=f"runs of each length (default {RUNS})")
    ap.add_argument("--gc-freeze", action="store_true",
                    help="gc.freeze() after the process's first prompt step: what it holds then (modules, the "
                         "session, its first bindings) leaves the garbage collector's full passes")
    ap.add_argument("--settle", type=float, default=0.0,
                    help="seconds to wait after the process's first prompt step (default 0)")
    ap.add_argument("--device-id", type=int, default=0)
    ap.add_argument("--out", default=RESULTS, help="folder for <date>-prompt-steps-<gpu>.md")
    ap.add_argument("--host-driver", action="store_true",
                    help="no GPU: the cuda device on hipep.tools.host_driver's stand-in (kernels do not run; the "
                         "host's share is what it measures)")
    args = ap.parse_args(argv)
    try:
        lengths = [int(x) for x in args.lengths.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--lengths: comma-separated token counts, got {args.lengths!r}")
    if not lengths or min(lengths) < 1 or args.runs < 1:
        ap.error("--lengths and --runs must be positive")
    if args.settle < 0:
        ap.error("--settle: seconds, at least 0")
    if args.host_driver:
        from hipep.tools import host_driver

        host_driver.install()
    found = D.gpu_and_model("prompt_steps.py", args.device_id, args.model, args.precision)
    if isinstance(found, int):
        return found
    device, folder, path = found
    facts = D.model_facts(folder)
    if max(lengths) + DECODE_AFTER + 1 > facts["context"]:
        ap.error(f"--lengths: at most {facts['context'] - DECODE_AFTER - 1} tokens for the model's context")
    info = {**machine_info(), **gh.gpu_info(device)}
    rows = measure(path, facts, lengths, args.runs, args.device_id, args.settle, args.gc_freeze)
    given = argv if argv is not None else sys.argv[1:]
    command = "python benchmarks/prompt_steps.py" + (" " + " ".join(given)).rstrip()
    os.makedirs(args.out, exist_ok=True)
    suffix = "" if args.model else f"-{args.precision}"
    text = render(info, facts, folder, rows, command, args.settle, args.gc_freeze)
    name = f"{info['date']}-prompt-steps-{gh.device_slug(info['gpu'])}{suffix}.md"
    with open(os.path.join(args.out, name), "w") as f:
        f.write(text)
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
