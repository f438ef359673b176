"""Where a decode step's host time goes: decode.py's greedy IOBinding loop on the ~1.1B builder
llama, each step split into its parts on the host, and a cProfile of the same steps.

A greedy step cannot start before the previous step's token is known, so its host work and its
kernels add up: at ~0.8 ms of kernels a step, every 0.1 ms of host work is ~10 % of the tok/s.

1. Parts, timed with perf_counter around each (no profiler): binding the step's host inputs
   (input_ids, attention_mask, position_ids) and the logits output, ORT's run_with_iobinding, the
   logits row read back, the argmax. Inside the run, from hipep.stats(): hipep's own run (run_us),
   of it the waits for the device (sync_wait_us), and the replay's kernel time (kernel_us).
2. cProfile over the same number of steps: the functions with the most own time per step, and the
   cumulative time per step of hipep's entry points. The profiler roughly doubles the cost of a
   Python call, so its times rank the work; part 1's are the ones to quote.

Writes benchmarks/results/<date>-decode-host-<gpu>[-int4-f16].md.

    python benchmarks/decode_host.py [--precision int4|int4-f16|int4-bf16] [--model DIR] [--steps N] [--out DIR] [--pstats FILE]
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # machine.py, gpu_harness.py, decode.py
import decode as D  # noqa: E402
import gpu_harness as gh  # noqa: E402
from machine import machine_info  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
PROMPT, STEPS, TOP = 128, 96, 30
PARTS = ("bind inputs", "run_with_iobinding", "logits row read back", "argmax")


def timed_steps(dec: "D.Decoder", first: int, tokens: list[int], steps: int) -> dict:
    """`steps` greedy steps after `first` tokens, each split into PARTS (ns arrays) plus hipep's
    counters' deltas per step."""
    parts = {p: np.empty(steps, np.int64) for p in PARTS}
    stats = []
    clock = time.perf_counter_ns
    b, sess = dec.binding, dec.sess
    out = dec.logits.get(1)
    if out is None:
        out = dec.logits[1] = dec.place.empty((1, 1, dec.vocab), dec.logits_dtype)
    for k in range(steps):
        total = first + k + 1
        c0 = D._counters()
        t0 = clock()
        b.bind_cpu_input("input_ids", np.array([[tokens[-1]]], np.int64))
        b.bind_cpu_input("attention_mask", np.ones((1, total), np.int64))
        if "position_ids" in dec.inputs:
            b.bind_cpu_input("position_ids", np.array([[total - 1]], np.int64))
        b.bind_ortvalue_output("logits", out)
        t1 = clock()
        sess.run_with_iobinding(b)
        t2 = clock()
        row = gh.to_host(out)[0, -1]
        t3 = clock()
        tokens.append(D.greedy_token(row))
        t4 = clock()
        c1 = D._counters()
        for p, (a, z) in zip(PARTS, ((t0, t1), (t1, t2), (t2, t3), (t3, t4))):
            parts[p][k] = z - a
        stats.append({key: c1[key] - c0[key] for key in c0})
    return {"parts": parts, "stats": stats}


def measure(path: str, facts: dict, steps: int, device_id: int, top: int) -> dict:
    import hipep

    sess = hipep.InferenceSession(path, device="cuda", device_id=device_id)
    max_len = PROMPT + 3 * steps + 8
    dec = D.Decoder(sess, facts["head_size"], max_len, gh.Placement(device_id))
    prompt = np.random.default_rng(0).integers(3, facts["vocab"], PROMPT).astype(np.int64)
    tokens = [D.greedy_token(dec.step(prompt[None], PROMPT))]
    timed_steps(dec, PROMPT, tokens, steps)  # warm-up: every layout traced and captured
    plain = timed_steps(dec, PROMPT + steps, tokens, steps)
    prof = cProfile.Profile()
    prof.enable()
    timed_steps(dec, PROMPT + 2 * steps, tokens, steps)
    prof.disable()
    return {"plain": plain, "profile": pstats.Stats(prof), "steps": steps}


def _where(func: tuple) -> str:
    file, line, name = func
    if file == "~":
        return name  # a builtin
    for marker in ("site-packages" + os.sep, ROOT + os.sep):
        if marker in file:
            file = file.split(marker, 1)[1]
            break
    return f"{name} ({file}:{line})"


def render(info: dict, facts: dict, folder: str, m: dict, top: int, command: str) -> str:
    steps = m["steps"]
    parts = {p: np.median(v) / 1e3 for p, v in m["plain"]["parts"].items()}
    stat = {k: np.median([s[k] for s in m["plain"]["stats"]]) for k in m["plain"]["stats"][0]}
    step_us = sum(parts.values())
    run_us, wait_us, kernel_us = stat["run_us"], stat["sync_wait_us"], stat["kernel_us"]
    L = gh.header_lines(f"Where a decode step's host time goes: {os.path.basename(folder.rstrip(os.sep))} "
                        f"on {info['gpu']}", info, command)
    L += [f"- model: `{folder}` ({facts['layers']} layers, hidden {facts['hidden']}, {facts['quantization']}, "
          f"{facts['activations']} activations)",
          f"- {steps} greedy decode steps after a {PROMPT}-token prompt and {steps} warm-up steps, IOBinding with "
          f"the KV caches and logits in device memory (decode.py's loop); medians per step", "",
          "| part of the step | µs |", "|---|---:|"]
    for p in PARTS:
        L.append(f"| {p} | {parts[p]:.1f} |")
    L += [f"| **the step** | **{step_us:.1f}** |", "",
          "Inside run_with_iobinding (hipep.stats() deltas):", "",
          "| | µs |", "|---|---:|",
          f"| ORT's run, outside hipep's Compute | {parts['run_with_iobinding'] - run_us:.1f} |",
          f"| hipep's Compute (run_us) | {run_us:.1f} |",
          f"| hipep's Compute, mean over the steps (a step through Python among native ones shows here) | "
          f"{np.mean([s['run_us'] for s in m['plain']['stats']]):.1f} |",
          f"| run_with_iobinding, mean over the steps | "
          f"{np.mean(m['plain']['parts']['run_with_iobinding']) / 1e3:.1f} |",
          f"| of it, waiting for the device (sync_wait_us) | {wait_us:.1f} |",
          f"| of it, hipep's host work (run_us − sync_wait_us) | {run_us - wait_us:.1f} |",
          f"| the replay's kernel time (kernel_us) | {kernel_us:.1f} |",
          f"| launches | {stat['launches']:.0f} |",
          f"| steps Compute replayed in native code (native_runs) | "
          f"{100 * np.mean([s.get('native_runs', 0) > 0 for s in m['plain']['stats']]):.0f} % |",
          f"| CUDA graph launches / kernel nodes updated / direct launches | {stat['graph_launches']:.0f} / "
          f"{stat['graph_node_updates']:.0f} / {stat['direct_launches']:.0f} |", "",
          f"cProfile over {steps} more steps (times per step; the profiler's own cost inflates every Python "
          f"call, so these rank the work):", "",
          f"Functions by own time (top {top}):", "",
          "| function | calls/step | own µs/step | cumulative µs/step |", "|---|---:|---:|---:|"]
    st = m["profile"].stats  # {func: (cc, nc, tt, ct, callers)}
    rows = sorted(st.items(), key=lambda kv: -kv[1][2])[:top]
    for func, (cc, nc, tt, ct, _) in rows:
        L.append(f"| `{_where(func)}` | {nc / steps:.1f} | {tt / steps * 1e6:.1f} | {ct / steps * 1e6:.1f} |")
    L += ["", f"hipep's functions by cumulative time (top {top}):", "",
          "| function | calls/step | own µs/step | cumulative µs/step |", "|---|---:|---:|---:|"]
    mine = [(f, v) for f, v in st.items() if f"{os.sep}hipep{os.sep}" in f[0]]
    for func, (cc, nc, tt, ct, _) in sorted(mine, key=lambda kv: -kv[1][3])[:top]:
        L.append(f"| `{_where(func)}` | {nc / steps:.1f} | {tt / steps * 1e6:.1f} | {ct / steps * 1e6:.1f} |")
    return "\n".join(L) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="a builder model folder (default: model_zoo's llama '1b' of --precision, built once)")
    ap.add_argument("--precision", choices=("int4", "int4-f16", "int4-bf16"), default="int4-f16",
                    help="the builder's CPU target (int4) or its CUDA target (int4-f16, default)")
    ap.add_argument("--steps", type=int, default=STEPS, help=f"steps timed, and as many profiled (default {STEPS})")
    ap.add_argument("--top", type=int, default=TOP, help=f"profile rows listed (default {TOP})")
    ap.add_argument("--device-id", type=int, default=0)
    ap.add_argument("--out", default=RESULTS, help="folder for <date>-decode-host-<gpu>.md")
    ap.add_argument("--pstats", help="also write the profile's raw statistics to this file (pstats format)")
    ap.add_argument("--host-driver", action="store_true",
                    help="no GPU: run the cuda device on hipep.tools.host_driver's stand-in (kernels do not run; "
                         "hipep's host work per step is what it measures)")
    args = ap.parse_args(argv)
    if args.host_driver:
        from hipep.tools import host_driver

        host_driver.install()
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    found = D.gpu_and_model("decode_host.py", args.device_id, args.model, args.precision)
    if isinstance(found, int):
        return found
    device, folder, path = found
    facts = D.model_facts(folder)
    if PROMPT + 3 * args.steps + 8 > facts["context"]:
        ap.error(f"--steps too many for the model's {facts['context']}-token context")
    info = {**machine_info(), **gh.gpu_info(device)}
    m = measure(path, facts, args.steps, args.device_id, args.top)
    command = "python benchmarks/decode_host.py" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    os.makedirs(args.out, exist_ok=True)
    suffix = "" if args.precision == "int4" or args.model else f"-{args.precision}"
    stem = os.path.join(args.out, f"{info['date']}-decode-host-{gh.device_slug(info['gpu'])}{suffix}")
    text = render(info, facts, folder, m, args.top, command)
    with open(stem + ".md", "w") as f:
        f.write(text)
    if args.pstats:
        m["profile"].dump_stats(args.pstats)
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
