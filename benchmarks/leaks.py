"""Host memory over many runs of one session and over many session create/destroy cycles, hipep
on its CPU reference device, with ORT's CPU EP doing the same as the reference.

Workloads, each in a fresh process (nothing a previous workload left behind is counted):

- runs: one session, 10,000 runs, RSS sampled every 1,000. The attention block of hipep.demo
  with x alternating between [2, 5, 32] and [3, 8, 32] (two layout signatures, both replayed);
  the same block over 80 sequence lengths in turn (more signatures than the specialization
  cache holds: every run specializes and evicts one); the tiny builder decoder (llama fp32)
  with two decode steps alternating (past 5 and past 6).
- cycles: 100 times create a session, run it (3 runs; prefill and one decode step for the
  decoder), drop it; RSS sampled every 10 cycles.

RSS is VmRSS from /proc/self/status, read after gc.collect() so that garbage waiting for the
cycle collector is not counted. The first half of each loop is its warm-up: RSS settles in steps
there (arenas, specializations, the allocator's pools, ORT's and numpy's caches; a step of about
0.6 MiB within the first 5,000 runs, with the CPU EP too), so the slope is the least squares fit
of the samples from the half on, in KiB per 1,000 runs or per 10 cycles; the growth from the
first sample to the half is reported beside it.

Then, for hipep's workloads, the same loop again under tracemalloc (one frame per allocation):
the Python heap's growth between the second sample and the end, and the source lines whose live
allocations grew most — where to look when RSS grows. Last, hipep's loops again and longer
(5x the runs, 3x the cycles: the slope of a longer second half), and the cycles once more with
the bridge's history of recent plans turned off (`hipep.bridge._recent_plans`, 32 plans kept
for tests and debugging after their sessions are gone), to tell that history from a leak.

Writes benchmarks/results/<date>-leaks-cpu.md.

    python benchmarks/leaks.py [--runs 10000] [--cycles 100] [--no-trace] [--no-extend]
                               [--models attention,attention-lru,decoder]
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time

# the reference kernels' matmuls on one BLAS thread: a spinning BLAS pool would only add noise
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/machine.py, also when loaded by path
from machine import machine_info  # noqa: E402
RESULTS = os.path.join(ROOT, "benchmarks", "results")
EPS = ("hipep", "cpu_ep")
NO_HISTORY = "hipep, no plan history"  # hipep with hipep.bridge._recent_plans holding nothing
MODELS = ("attention", "attention-lru", "decoder")
CYCLED = ("attention", "decoder")  # the models of the create/destroy cycles
# A slope under this many KiB per 1,000 runs (per 10 cycles) is read as flat: RSS moves in pages,
# and the allocator's pools settle over the first samples after the warm-up.
FLAT_KIB = 64


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def slope(xs, ys) -> float:
    """Least squares slope of ys over xs."""
    n = len(xs)
    if n < 2:
        return float("nan")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else float("nan")


# ---- the models ----------------------------------------------------------------------------------

class Workload:
    """A model and how to drive it: `feeds` (the runs, cycled) and `first` (a cycle's runs)."""

    def __init__(self, name: str):
        import numpy as np

        self.name = name
        if name == "attention":
            from hipep.demo import build_attention_block

            self.model = build_attention_block(seed=1).SerializeToString()
            rng = np.random.default_rng(0)
            self.feeds = [{"x": rng.standard_normal((b, s, 32)).astype(np.float32)} for b, s in ((2, 5), (3, 8))]
            self.cycle_feeds = self.feeds + self.feeds[:1]
            self.label = "attention block (hipep.demo), x [2,5,32] / [3,8,32] alternating"
        elif name == "attention-lru":
            from hipep.demo import build_attention_block
            from hipep.runtime.executor import SPECIALIZATION_CACHE

            self.model = build_attention_block(seed=1).SerializeToString()
            # more sequence lengths than the specialization cache holds, taken in turn: every run
            # misses, specializes and evicts the least recently used one
            lengths = range(1, SPECIALIZATION_CACHE + 17)
            self.feeds = [{"x": np.full((1, n, 32), 0.1 * (n % 7), np.float32)} for n in lengths]
            self.cycle_feeds = self.feeds[:3]
            self.label = (f"the same block, x [1, n, 32] for n = 1..{len(lengths)} in turn: more layout "
                          f"signatures than the {SPECIALIZATION_CACHE}-entry specialization cache, every run specializes")
        elif name == "decoder":
            from hipep.tools import model_zoo

            folder = model_zoo.decoder("llama", "fp32")
            self.model = os.path.join(folder, "model.onnx")
            steps = model_zoo.decoder_steps(self.model, model_zoo.genai_config(folder)["model"]["decoder"]["head_size"])
            self.feeds = steps[1:]  # decode steps at past 5 and past 6
            self.cycle_feeds = steps[:2]  # prefill and the first decode step
            self.label = "tiny builder decoder (llama fp32), decode steps at past 5 / 6 alternating"
        else:
            raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")

    def session(self, ep: str):
        import onnxruntime as ort

        if ep.startswith("hipep"):
            import hipep

            return hipep.InferenceSession(self.model, device="cpu")
        return ort.InferenceSession(self.model, providers=["CPUExecutionProvider"])


# ---- one measurement (in a child process) --------------------------------------------------------

def measure(kind: str, model: str, ep: str, total: int, every: int, trace: bool) -> dict:
    """Samples RSS every `every` runs or cycles up to `total`. With `trace`, tracemalloc starts at
    the first sample; the second is the baseline (a loop's transient objects, allocated before
    tracing began, are then traced at both ends) and the lines whose live allocations grew most
    from it to the last sample are reported, with the traced size at each sample."""
    import tracemalloc

    if ep.startswith("hipep"):
        import collections

        import hipep
        import hipep.bridge

        hipep.register()
        if ep == NO_HISTORY:
            hipep.bridge._recent_plans = collections.deque(maxlen=0)
    w = Workload(model)
    sess = w.session(ep) if kind == "runs" else None
    start = rss_kib()
    samples, traced, snapshots = [], [], []
    t0 = time.perf_counter()
    feeds = w.feeds if kind == "runs" else w.cycle_feeds
    for i in range(1, total + 1):
        if kind == "runs":
            sess.run(None, feeds[i % len(feeds)])
        else:
            s = w.session(ep)
            for f in feeds:
                s.run(None, f)
            del s
        if i % every == 0:
            gc.collect()
            samples.append((i, rss_kib()))
            if trace:
                if not tracemalloc.is_tracing():
                    tracemalloc.start(1)
                else:
                    traced.append((i, tracemalloc.get_traced_memory()[0] // 1024))
                    snapshots.append(tracemalloc.take_snapshot())
    out = {"kind": kind, "model": model, "label": w.label, "ep": ep, "total": total, "every": every,
           "start_kib": start, "samples": samples, "seconds": time.perf_counter() - t0}
    if trace and len(snapshots) >= 2:
        keep = [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, __file__)]
        diff = snapshots[-1].filter_traces(keep).compare_to(snapshots[0].filter_traces(keep), "lineno")
        out["traced"] = traced
        out["traced_growth_kib"] = sum(d.size_diff for d in diff) / 1024
        out["traced_top"] = [{"where": f"{_short(d.traceback[0].filename)}:{d.traceback[0].lineno}",
                              "kib": d.size_diff / 1024, "blocks": d.count_diff}
                             for d in diff[:8] if d.size_diff > 0]
    return out


def _short(path: str) -> str:
    for marker in (os.sep + "site-packages" + os.sep, ROOT + os.sep):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def run_child(kind: str, model: str, ep: str, total: int, every: int, trace: bool) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kind, model, ep, str(total), str(every)]
    if trace:
        cmd.append("--trace")
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[2:])} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---- the report ----------------------------------------------------------------------------------

def summarize(r: dict) -> dict:
    """The growth from the first sample to the half, and the slope from the half on, per `every`
    runs or cycles."""
    half = r["total"] // 2
    tail = [(i, kib) for i, kib in r["samples"] if i >= half]
    r["first_kib"] = r["samples"][0][1]
    r["half_kib"], r["end_kib"] = tail[0][1], tail[-1][1]
    r["settle_kib"] = r["half_kib"] - r["first_kib"]
    r["growth_kib"] = r["end_kib"] - r["half_kib"]
    r["slope_kib"] = slope([i for i, _ in tail], [kib for _, kib in tail]) * r["unit"]
    return r


def _what(r: dict) -> str:
    return f"{r['total']:,} runs" if r["kind"] == "runs" else f"{r['total']} cycles"


def render(info: dict, rows: list[dict], traced: list[dict], command: str) -> str:
    lines = [
        "# Host memory over runs and over session create/destroy cycles (CPU device)", "",
        f"- date: {info['date']}",
        f"- commit: {info['commit']}",
        f"- machine: {info['cpu']}, {info['cores']} cores, {info['memory']}, no GPU (hipep's CPU reference device); "
        f"onnxruntime {info['onnxruntime']}, numpy {info['numpy']}, Python {info['python']}",
        f"- command: `{command}`",
        "- RSS: VmRSS after gc.collect(), each workload in a fresh process. Warm-up: the first half of the loop; "
        "slope: least squares over the samples from the half on, per 1,000 runs or per 10 cycles; "
        f"flat: |slope| < {FLAT_KIB} KiB", "",
        "| workload | model | EP | samples | RSS at 1st sample (MiB) | at half | at end | first → half (KiB) "
        "| half → end (KiB) | slope after warm-up | flat | time (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        unit = "KiB / 1,000 runs" if r["kind"] == "runs" else "KiB / 10 cycles"
        lines.append(f"| {_what(r)} | {r['model']} | {r['ep']} | {len(r['samples'])} every {r['every']:,} "
                     f"| {r['first_kib'] / 1024:.1f} | {r['half_kib'] / 1024:.1f} | {r['end_kib'] / 1024:.1f} "
                     f"| {r['settle_kib']:+d} | {r['growth_kib']:+d} | {r['slope_kib']:+.1f} {unit} "
                     f"| {'yes' if abs(r['slope_kib']) < FLAT_KIB else 'NO'} | {r['seconds']:.0f} |")
    lines += ["", "Models:", ""]
    for model in dict.fromkeys(r["model"] for r in rows):
        label = next(r["label"] for r in rows if r["model"] == model)
        lines.append(f"- {model}: {label}")
    lines += ["", "RSS samples (KiB; `start` is before the session or the first cycle):", "", "```"]
    for r in rows:
        lines.append(f"{_what(r):>12} {r['model']:13} {r['ep']:21} start {r['start_kib']:7d}  " +
                     " ".join(f"{kib}" for _, kib in r["samples"]))
    lines.append("```")
    if traced:
        lines += ["", "## Python heap under tracemalloc (hipep)", "",
                  "The same loops again with tracemalloc on from the first sample (one frame per allocation; "
                  "its own bookkeeping filtered out): the live Python allocations at each later sample, their net "
                  "growth from the second sample to the end, and the lines whose live allocations grew most.", ""]
        for r in traced:
            lines.append(f"- {_what(r)}, {r['model']}: {r.get('traced_growth_kib', 0):+.1f} KiB; traced KiB by sample: "
                         + " ".join(f"{kib}" for _, kib in r.get("traced", [])))
            for t in r.get("traced_top", [])[:5]:
                lines.append(f"  - `{t['where']}`: {t['kib']:+.1f} KiB, {t['blocks']:+d} blocks")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--runs-every", type=int, default=1_000)
    ap.add_argument("--cycles", type=int, default=100)
    ap.add_argument("--cycles-every", type=int, default=10)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--no-trace", action="store_true", help="skip the tracemalloc passes")
    ap.add_argument("--no-extend", action="store_true", help="skip the longer loops and the control")
    ap.add_argument("--out", default=RESULTS, help="folder for <date>-leaks-cpu.md ('-': print only)")
    ap.add_argument("--child", nargs=5, metavar=("KIND", "MODEL", "EP", "TOTAL", "EVERY"), help=argparse.SUPPRESS)
    ap.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        kind, model, ep, total, every = args.child
        print(json.dumps(measure(kind, model, ep, int(total), int(every), args.trace)))
        return 0
    info = machine_info()
    print(f"{info['date']} {info['commit']} {info['cpu']} ({info['cores']} cores)", flush=True)
    models = args.models.split(",")
    plain, traced = [], []
    for model in models:
        for kind, total, every in (("runs", args.runs, args.runs_every), ("cycles", args.cycles, args.cycles_every)):
            if kind == "cycles" and model not in CYCLED:
                continue
            plain += [(kind, model, ep, total, every) for ep in EPS]
            if not args.no_trace:
                # a fifth of the runs where every run specializes: under tracemalloc that is slow
                traced.append((kind, model, "hipep", total // 5 if model == "attention-lru" else total,
                               every // 5 if model == "attention-lru" else every))
    if not args.no_extend:
        for model in (m for m in models if m in CYCLED):
            plain += [("runs", model, "hipep", args.runs * 5, args.runs_every * 5),
                      ("cycles", model, "hipep", args.cycles * 3, args.cycles_every * 3),
                      ("cycles", model, NO_HISTORY, args.cycles, args.cycles_every)]
    rows = []
    for kind, model, ep, total, every in plain:
        r = run_child(kind, model, ep, total, every, False)
        r["unit"] = (1000 if kind == "runs" else 10)
        rows.append(summarize(r))
        print(f"{_what(r):>12} {model:13} {ep:21} first {r['first_kib'] / 1024:6.1f} half {r['half_kib'] / 1024:6.1f} "
              f"end {r['end_kib'] / 1024:6.1f} MiB, slope {r['slope_kib']:+7.1f} KiB ({r['seconds']:.0f} s)", flush=True)
    traced_rows = []
    for kind, model, ep, total, every in traced:
        t = run_child(kind, model, ep, total, every, True)
        traced_rows.append(t)
        print(f"traced {_what(t):>12} {model:13}: {t.get('traced_growth_kib', 0):+.1f} KiB; " +
              "; ".join(f"{x['where']} {x['kib']:+.1f}" for x in t.get("traced_top", [])[:3]), flush=True)
    command = "python benchmarks/leaks.py" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    text = render(info, rows, traced_rows, command)
    if args.out == "-":
        print(text)
        return 0
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{info['date']}-leaks-cpu.md")
    with open(path, "w") as f:
        f.write(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
