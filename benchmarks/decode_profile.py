"""Where a decode step's GPU time goes: one decode step of the ~1.1B builder llama (decode.py's
model and loop) under NVIDIA's Nsight Compute (ncu), each kernel's duration and DRAM traffic, summed
by kernel and grid (so the MatMulNBits projections of different shapes stay apart). With
--prompt-step, the prompt's step instead (the 128-token prefill behind the time to the first
token), run again at the same positions after the warm-up steps (and twice more, so that the
measured and profiled runs replay its captured CUDA graph).

ncu runs every kernel alone, one after the other (no overlap with the kernel ahead, no gaps
between graph nodes), at the GPU's own clocks (--clock-control none) and with the caches flushed
before each kernel (its default), so the durations add up to less than the step's replay time
that decode.py measures; that time (hipep.stats()'s kernel_us of the same step, measured in a run
of its own without ncu, which slows every launch of a process it is attached to) is printed beside
the sum. The weights stream from HBM in a real step too (the model's
weights are ten times the L2), so the flush changes little but for small activations.

Writes benchmarks/results/<date>-decode-profile-<gpu>[-int4-f16][-prompt].md.

    python benchmarks/decode_profile.py [--precision int4|int4-f16|int4-bf16] [--model DIR] [--prompt-step]
                                        [--ncu PATH] [--out DIR]
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # machine.py, gpu_harness.py, decode.py
import gpu_harness as gh  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
PROMPT, WARM_STEPS = 128, 20
METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum")
# ncu's units for the metrics above, to nanoseconds and bytes
_TIME_UNITS = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9}
_BYTE_UNITS = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def find_ncu(explicit: str | None) -> str | None:
    for c in (explicit, shutil.which("ncu"), "/usr/local/cuda/bin/ncu"):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def kernel_family(name: str) -> str:
    """A kernel's name without what only tells instances apart: the generated pointwise kernels'
    hashes, C++ argument lists."""
    name = name.split("(", 1)[0].strip()
    return re.sub(r"^hipep_pw_[0-9a-f]+$", "hipep_pw_* (generated pointwise)", name)


def parse_ncu_csv(text: str) -> list[dict]:
    """ncu --csv rows (one per kernel and metric) as one dict per kernel launch: name, grid,
    block, ns, dram_read, dram_write."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    launches: dict[str, dict] = {}
    table = [line for line in lines[start:] if line.startswith('"')]  # ncu's own log lines may follow
    for row in csv.DictReader(io.StringIO("\n".join(table))):
        k = launches.setdefault(row["ID"], {"name": row["Kernel Name"], "grid": row.get("Grid Size", ""),
                                            "block": row.get("Block Size", ""), "ns": 0.0, "dram_read": 0.0,
                                            "dram_write": 0.0})
        value = float(row["Metric Value"].replace(",", "") or 0)
        unit, metric = row["Metric Unit"], row["Metric Name"]
        if metric == "gpu__time_duration.sum":
            k["ns"] = value * _TIME_UNITS.get(unit, 1.0)
        elif metric == "dram__bytes_read.sum":
            k["dram_read"] = value * _BYTE_UNITS.get(unit, 1.0)
        elif metric == "dram__bytes_write.sum":
            k["dram_write"] = value * _BYTE_UNITS.get(unit, 1.0)
    return [launches[i] for i in sorted(launches, key=int)]


def summarize(launches: list[dict]) -> list[dict]:
    """Launches summed by (kernel family, grid), the largest total first."""
    groups: dict[tuple, dict] = {}
    for k in launches:
        g = groups.setdefault((kernel_family(k["name"]), k["grid"], k["block"]),
                              {"kernel": kernel_family(k["name"]), "grid": k["grid"], "block": k["block"], "launches": 0,
                               "ns": 0.0, "dram": 0.0})
        g["launches"] += 1
        g["ns"] += k["ns"]
        g["dram"] += k["dram_read"] + k["dram_write"]
    return sorted(groups.values(), key=lambda g: -g["ns"])


def render(info: dict, facts: dict, folder: str, step: dict, launches: list[dict], copy_gbps: float,
           command: str, prompt_step: bool = False) -> str:
    rows = summarize(launches)
    total_ns = sum(k["ns"] for k in launches) or 1.0
    what = "the prompt's step" if prompt_step else "a decode step"
    lines = gh.header_lines(f"Where {what}'s GPU time goes: {os.path.basename(folder)} on {info['gpu']}", info,
                            command)
    profiled = (f"the prompt's step ({PROMPT} tokens), run again at the same positions after {WARM_STEPS} decode "
                f"steps and twice more (its CUDA graph captured)"
                if prompt_step else f"decode step {WARM_STEPS + 1} after a {PROMPT}-token prompt")
    lines += [f"- model: `{folder}` ({facts['layers']} layers, hidden {facts['hidden']}, {facts['quantization']}, "
              f"{facts['activations']} activations); {gh.bytes_text(facts['weights_per_step'])} of weights read per step",
              f"- the profiled step: {profiled}",
              f"- that step unprofiled: {step['kernel_us']:.0f} µs of kernel time (hipep.stats()'s kernel_us: the "
              f"replay from its first launch to its last end; a run of its own, without ncu), {step['launches']:.0f} launches",
              f"- under ncu: {len(launches)} kernels, {total_ns / 1e3:.0f} µs summed (each kernel alone, caches "
              f"flushed, no overlap between kernels, the GPU's own clocks)",
              f"- device-to-device copy in this run: {copy_gbps:.0f} GB/s (read and write counted)", "",
              "| kernel | grid | block | launches | µs | % of summed | µs/launch | DRAM bytes | GB/s | % of copy |",
              "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for g in rows:
        gbps = g["dram"] / g["ns"] if g["ns"] else 0.0
        lines.append(f"| {g['kernel']} | {g['grid']} | {g['block']} | {g['launches']} | {g['ns'] / 1e3:.1f} | "
                     f"{100 * g['ns'] / total_ns:.1f} % | {g['ns'] / 1e3 / g['launches']:.2f} | "
                     f"{gh.bytes_text(g['dram'])} | {gbps:.0f} | {100 * gbps / copy_gbps:.0f} % |")
    return "\n".join(lines) + "\n"


def child(args) -> int:
    """Runs under ncu: decodes the prompt and WARM_STEPS tokens unprofiled, measures the next step's
    kernel time, then profiles one more step (cuProfilerStart/Stop around it). With --prompt-step
    the measured and the profiled steps are the prompt's, again at its positions."""
    import decode as D
    from cuda.bindings import driver

    import hipep

    facts = D.model_facts(args.model)
    sess = hipep.InferenceSession(os.path.join(args.model, "model.onnx"), device="cuda", device_id=args.device_id)
    dec = D.Decoder(sess, facts["head_size"], PROMPT + WARM_STEPS + 4, gh.Placement(args.device_id))
    prompt = np.random.default_rng(0).integers(3, facts["vocab"], PROMPT).astype(np.int64)
    total = PROMPT
    tok = D.greedy_token(dec.step(prompt[None], total))
    for _ in range(WARM_STEPS):
        total += 1
        tok = D.greedy_token(dec.step(np.array([[tok]]), total))
    def next_step():
        nonlocal tok, total
        if args.prompt_step:  # the same prompt at the same positions: the cache's rows rewritten alike
            return dec.step(prompt[None], PROMPT)
        total += 1
        tok = D.greedy_token(dec.step(np.array([[tok]]), total))
        return None

    if args.prompt_step:
        # A shape's second run is launched one by one and its third captured into a CUDA graph:
        # two more, so that the measured and the profiled runs replay the graph, as a prompt of a
        # length seen before does (decode.py reports a length not seen before apart).
        next_step()
        next_step()
    c0 = D._counters()
    next_step()
    c1 = D._counters()
    with open(args.child, "w") as f:
        json.dump({"kernel_us": c1["kernel_us"] - c0["kernel_us"], "launches": c1["launches"] - c0["launches"]}, f)
    driver.cuProfilerStart()  # the driver API hipep itself uses (cuda-bindings' runtime module needs libcudart)
    next_step()
    driver.cuProfilerStop()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="a builder model folder (default: model_zoo's llama '1b' of --precision, built once)")
    ap.add_argument("--precision", choices=("int4", "int4-f16", "int4-bf16"), default="int4-f16",
                    help="int4-f16 (default): f16 activations, MatMulNBits at level 0; int4-bf16: the same in bf16; int4: f32, level 4")
    ap.add_argument("--ncu", help="Nsight Compute's command line tool (default: ncu on PATH, /usr/local/cuda/bin/ncu)")
    ap.add_argument("--device-id", type=int, default=0)
    ap.add_argument("--out", default=RESULTS, help="folder for <date>-decode-profile-<gpu>.md")
    ap.add_argument("--prompt-step", action="store_true", help="profile the prompt's step (prefill) instead")
    ap.add_argument("--child", help=argparse.SUPPRESS)  # the profiled process: where it writes its step's numbers
    args = ap.parse_args(argv)
    if args.child:
        return child(args)
    try:
        device = gh.require_gpu(args.device_id)
    except gh.Unavailable as e:
        return gh.fail("decode_profile.py", str(e))
    ncu = find_ncu(args.ncu)
    if ncu is None:
        return gh.fail("decode_profile.py", "Nsight Compute (ncu) was not found: pass --ncu PATH")
    import decode as D
    from machine import machine_info

    folder = args.model
    if folder is None:
        folder, why = D.build_model(args.precision)
        if folder is None:
            return gh.fail("decode_profile.py", f"could not build the ~1.1B model: {why}")
    facts = D.model_facts(folder)
    info = {**machine_info(), **gh.gpu_info(device)}
    copy = gh.copy_bandwidth(device)
    with tempfile.TemporaryDirectory() as tmp:
        step_file, log = os.path.join(tmp, "step.json"), os.path.join(tmp, "ncu.csv")
        # The step's own kernel time comes from a run without ncu: attached, ncu slows every launch
        # of the process, profiled or not (the same child; cuProfilerStart/Stop do nothing there).
        child_flags = ["--prompt-step"] if args.prompt_step else []
        plain = subprocess.run([sys.executable, "-P", os.path.abspath(__file__), "--model", folder, "--device-id",
                                str(args.device_id), *child_flags, "--child", step_file],
                               capture_output=True, text=True)
        if plain.returncode != 0 or not os.path.exists(step_file):
            tail = (plain.stderr or plain.stdout).strip().splitlines()[-3:]
            return gh.fail("decode_profile.py", f"the unprofiled step failed (exit {plain.returncode}): "
                                                + " | ".join(tail))
        with open(step_file) as f:
            step = json.load(f)
        cmd = [ncu, "--csv", "--print-units", "base", "--profile-from-start", "off", "--clock-control", "none",
               "--target-processes", "all",
               "--metrics", ",".join(METRICS), "--log-file", log,
               sys.executable, "-P", os.path.abspath(__file__), "--model", folder, "--device-id", str(args.device_id),
               *child_flags, "--child", os.path.join(tmp, "profiled-step.json")]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0 or not os.path.exists(log):
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return gh.fail("decode_profile.py", f"the profiled step failed (ncu exit {done.returncode}): "
                                                + " | ".join(tail))
        with open(log) as f:
            launches = parse_ncu_csv(f.read())
    if not launches:
        return gh.fail("decode_profile.py", "ncu reported no kernels for the profiled step")
    command = "python benchmarks/decode_profile.py " + " ".join(argv if argv is not None else sys.argv[1:])
    os.makedirs(args.out, exist_ok=True)
    suffix = "" if args.precision == "int4" or args.model else f"-{args.precision}"
    suffix += "-prompt" if args.prompt_step else ""
    path = os.path.join(args.out, f"{info['date']}-decode-profile-{gh.device_slug(info['gpu'])}{suffix}.md")
    with open(path, "w") as f:
        f.write(render(info, facts, folder, step, launches, copy["gbps"], command.strip(), args.prompt_step))
    total = sum(k["ns"] for k in launches) / 1e3
    print(f"{len(launches)} kernels, {total:.0f} µs summed under ncu; the step unprofiled: {step['kernel_us']:.0f} µs")
    for g in summarize(launches)[:12]:
        print(f"  {g['ns'] / 1e3:8.1f} µs  {g['launches']:4d} x  {g['kernel']}  grid {g['grid']}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
