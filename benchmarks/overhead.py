"""Runtime overhead per run: hipep on its CPU reference device against ONNX Runtime's CPU EP, in one
process, on the same models and inputs.

hipep.stats() counts, per run, the kernel launches issued and `kernel_us`, the time inside device
programs (on the CPU device: inside the numpy reference kernels). What is left of a run's wall
time, run − kernel_us, is the runtime's overhead: ORT's call into the EP, the shape program,
guards, patching the captured graph, replay. Three workloads:

1. Add chains on [1, 16] fp32 (x + c_i) of 1, 10, 100 and 1000 nodes, fusion off and on: the
   per-node cost, where every kernel is next to free.
2. The model builder's llama decoders (tiny fp32 and int4, and the medium fp32 one: hidden 512,
   4 layers), fed as a plain `run` caller does: a prefill of 32 tokens, then decode steps whose
   past is the previous step's present (the past grows), logits checked against the CPU EP.
3. The same decoders with past and present bound to one max-length buffer through io_binding, as
   onnxruntime-genai runs them (past_present_share_buffer): after the first decode step no step
   may specialize again or read a value back to the host.

hipep and the CPU EP are measured interleaved (blocks of runs, or step by step), so a load that
comes and goes on the machine falls on both. Then where the host time goes: the runtime's steps
timed one by one on the Add x100 chain and the medium decode step, a cold-cache control, and a
cProfile of the medium decode step. Writes benchmarks/results/<date>-overhead-cpu.md and
.png (the plot needs matplotlib: the `bench` extra).

This file is the command line; the modules beside it hold the parts: overhead_chains.py and
overhead_decoders.py the workloads, overhead_host_time.py where the host time goes,
overhead_targets.py and overhead_report.py the targets and the report (overhead_sessions.py: what
they share about the sessions).

    python benchmarks/overhead.py [--quick] [--out DIR] [--no-profile]
"""
from __future__ import annotations

import argparse
import os
import sys

# numpy's BLAS (the reference kernels' matmuls) on one thread unless the caller chose: with one
# BLAS thread per core on a small machine that other work shares, a BLAS thread spinning for a
# descheduled partner made a decode step's kernels 10x slower at random, and its leftover spinning
# slowed the CPU EP's next run. Overhead is host time and does not depend on it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the overhead_*.py modules and machine.py beside this file, also when it is loaded by path
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_info  # noqa: E402
# fusion_available and measure_chain: one chain measured on its own, for callers that load this file
from overhead_chains import chain_rows, fusion_available, measure_chain  # noqa: E402,F401
from overhead_decoders import decoder_folder, decoder_rows  # noqa: E402
from overhead_host_time import cold_cache_control, ort_floor, ort_side, profile_decode, split_workloads  # noqa: E402
from overhead_report import plot, render  # noqa: E402
from overhead_targets import targets  # noqa: E402

RESULTS = os.path.join(ROOT, "benchmarks", "results")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="few repetitions: a smoke test, not numbers to keep")
    ap.add_argument("--out", default=RESULTS, help="folder for <date>-overhead-cpu.md and .png")
    ap.add_argument("--no-profile", action="store_true", help="skip the cProfile of the medium decode step")
    args = ap.parse_args(argv)
    info = machine_info()
    print(f"{info['date']} {info['commit']} {info['cpu']} ({info['cores']} cores, load {info['load']:.2f}); "
          f"onnxruntime {info['onnxruntime']}, numpy {info['numpy']}", flush=True)
    medium = decoder_folder("llama", "fp32", "medium")
    if args.quick:
        chains = chain_rows(runs_short=100, runs_long=20)
        growing, shared = decoder_rows(decode_steps=4, repeats=2, shared_steps=4)
        split = split_workloads(medium, runs=10)
        cold = cold_cache_control(decoder_folder("llama", "fp32", "tiny"), runs=20)
        floor = ort_floor(medium, runs=20)
        side = ort_side(medium, runs=20)
        profile = None if args.no_profile else profile_decode(medium, runs=10)
    else:
        chains = chain_rows()
        growing, shared = decoder_rows()
        split = split_workloads(medium, runs=300)
        cold = cold_cache_control(decoder_folder("llama", "fp32", "tiny"), runs=300)
        floor = ort_floor(medium, runs=300)
        side = ort_side(medium, runs=300)
        profile = None if args.no_profile else profile_decode(medium, runs=300)
    for name, v in split.items():
        print(f"{name}: overhead {v['overhead_us']:.1f} us: " +
              ", ".join(f"{what} {us:.1f}" for what, _loc, us in v["rows"] if us is not None), flush=True)
    if hasattr(os, "getloadavg"):
        info["load_end"] = os.getloadavg()[0]
    command = "python benchmarks/overhead.py" + (" --quick" if args.quick else "")
    text = render(info, chains, growing, shared, profile, command, split, cold, floor, side)
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"{info['date']}-overhead-cpu")
    with open(stem + ".md", "w") as f:
        f.write(text)
    if plot(stem + ".png", chains, growing, shared):
        with open(stem + ".md", "a") as f:
            f.write(f"\n![per-run and per-step times]({os.path.basename(stem)}.png)\n")
    missed = [what for what, _m, met in targets(chains, growing, shared) if met is False]
    print(f"\nwrote {stem}.md" + (f"\nmissed: {'; '.join(missed)}" if missed else "\nall targets met"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
