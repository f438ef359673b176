"""benchmarks/overhead.py's report: the markdown file (tables of every workload, the targets, where
the host time goes) and its plot (matplotlib, the `bench` extra)."""
from __future__ import annotations

import sys

import numpy as np

from overhead_chains import CHAIN_SHAPE
from overhead_decoders import MEDIUM, PREFILL
from overhead_targets import TARGET_OVERHEAD_MS, targets


def _split_text(split: dict, cold: dict | None, floor: dict | None = None, side: dict | None = None) -> list[str]:
    names = list(split)
    L = ["", "## Where the host time goes: timers around the runtime's steps", "",
         "Each step of a run timed on its own (medians, µs per run; no profiler: each timed step adds about "
         "1 µs of its own, so these walls sit a little above the tables'). "
         + "; ".join(f"{n}: wall {v['wall_us']:.1f} µs, kernel_us {v['kernel_us']:.1f}, overhead "
                     f"{v['overhead_us']:.1f}, over {v['runs']} runs" for n, v in split.items()) + ".", "",
         "| step | where | " + " | ".join(f"{n} µs/run" for n in names) + " |",
         "|---|---|" + "---|" * len(names)]
    by_step = [{what: us for what, _loc, us in split[n]["rows"]} for n in names]
    for what, loc, _us in split[names[0]]["rows"]:
        cells = ["—" if b.get(what) is None else f"{b[what]:.1f}" for b in by_step]
        if what.startswith("replay"):
            what += " (" + " / ".join(str(split[n]["nodes"]) for n in names) + " launches and host steps)"
        L.append(f"| {what} | {loc} | " + " | ".join(cells) + " |")
    if cold:
        L += ["", f"Cold caches: the tiny llama-fp32's decode step has an overhead of {cold['warm_us']:.1f} µs as the "
                  f"previous run left the caches, and {cold['flushed_us']:.1f} µs after {cold['flush_mib']} MiB were "
                  f"streamed through them before each run ({cold['runs']} runs each) — the medium decoder's kernels "
                  f"read its 48 MiB of weights every step, so its host code runs on evicted caches."]
    if floor:
        L += ["", f"ORT's own share: the CPU EP runs a model with the {MEDIUM} decode step's inputs and outputs that "
                  f"only concatenates the presents in {floor['warm_us']:.1f} µs with warm caches and "
                  f"{floor['flushed_us']:.1f} µs after {floor['flush_mib']} MiB were streamed through them "
                  f"({floor['runs']} runs each): that much of the rows 'ORT … up to hipep' and 'ORT after hipep "
                  f"returns' any EP pays."]
    if side:
        w, f = side["warm"], side["flushed"]
        L += ["", f"ORT's side with hipep doing nothing: a hipep session of {MEDIUM} whose Compute only obtains "
                  f"the decode step's outputs and returns spends {w[0]:.1f} µs in ORT and the plugin up to Compute "
                  f"and {w[1]:.1f} µs after it ({w[2]:.1f} µs) with warm caches, and {f[0]:.1f} + {f[1]:.1f} = "
                  f"{f[2]:.1f} µs with {side['flush_mib']} MiB streamed through the caches before the run and inside "
                  f"Compute, as a real run's kernels leave them ({side['runs']} runs each; the output allocation "
                  f"counts as Compute's here). In a separate check, session options (intra-op threads, spinning, the memory arena, "
                  f"memory patterns) moved this by less than the run-to-run noise."]
    return L


def render(info: dict, chains: list[dict], growing: list[dict], shared: list[dict], profile: dict | None = None,
           command: str = "python benchmarks/overhead.py", split: dict | None = None, cold: dict | None = None,
           floor: dict | None = None, side: dict | None = None) -> str:
    L = [f"# Runtime overhead per run: hipep (CPU reference device) vs ORT's CPU EP", "",
         f"- date: {info['date']}",
         f"- commit: {info['commit']}",
         f"- machine: {info['cpu']}, {info['cores']} cores; load average {info['load']:.2f} at the start"
         + (f", {info['load_end']:.2f} at the end" if "load_end" in info else ""),
         f"- onnxruntime {info['onnxruntime']}, numpy {info['numpy']} (BLAS threads: "
         f"{info.get('blas_threads', 'default')}), Python {info['python']}; the CPU EP with its default threads",
         f"- command: `{command}`",
         "- overhead = a run's wall time − kernel_us (hipep.stats(): the time inside the numpy reference kernels); "
         "times are medians (`time.perf_counter_ns` around `run`), hipep and the CPU EP interleaved", ""]
    L += [f"## Add chains: x + c_i on {list(CHAIN_SHAPE)} fp32, plain `run`", "",
          "| Add nodes | fusion | runs | hipep µs/run | CPU EP µs/run | (hipep − CPU EP) µs/op | launches/run | "
          "kernel µs/run | overhead µs/run |",
          "|---|---|---|---|---|---|---|---|---|"]
    for r in chains:
        if r.get("na"):
            L.append(f"| {r['ops']} | {r['fusion']} | n/a | n/a | n/a | n/a | n/a | n/a | n/a |")
            continue
        L.append(f"| {r['ops']} | {r['fusion']} | {r['runs']} | {r['hipep_us']:.1f} | {r['cpu_us']:.1f} | "
                 f"{r['per_op_us']:.2f} | {r['launches']:.0f} | {r['kernel_us']:.1f} | {r['overhead_us']:.1f} |")
    if chains:
        L += ["", "kernel_us is counted in whole microseconds per run (each run's kernel time is truncated), so a "
                  "kernel under 1 µs shows as 0 and its time as overhead."]
    if any(r.get("na") for r in chains):
        L += ["", "n/a: this hipep has no `fusion` provider option yet."]
    if growing:
        steps = growing[0]["steps"]
        L += ["", f"## Decoders, growing past: prefill {PREFILL} tokens, then {steps} decode steps, plain `run`", "",
              "Each step's past is the previous step's present. Times are per decode step, medians over the "
              "passes after the first; specializations and host reads are those the first pass's decode steps "
              "added (the first decode step is a new shape after the prompt's). The first pass's own overhead "
              "(every step a new input shape) is shown beside: the runtime caches nothing per input-shape "
              "tuple, so the two agree within noise.", "",
              "| model | layers | prefill hipep ms | prefill CPU EP ms | hipep ms/step | CPU EP ms/step | "
              "kernel ms/step | overhead ms/step | first pass: overhead ms/step | launches/layer | "
              "specializations | host reads | worst logits rel L2 (limit) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in growing:
            L.append(f"| {r['model']} | {r['layers']} | {r['prefill_hipep_ms']:.2f} | {r['prefill_cpu_ms']:.2f} | "
                     f"{r['hipep_ms']:.3f} | {r['cpu_ms']:.3f} | {r['kernel_ms']:.3f} | {r['overhead_ms']:.3f} | "
                     f"{r['first_pass_overhead_ms']:.3f} | {r['launches_per_layer']:.2f} | {r['specializations']} | {r['host_reads']} | "
                     f"{r['worst_rel_l2']:.2e} ({r['threshold']:g}) |")
    if shared:
        L += ["", "## Decoders, shared KV buffer: io_binding, as onnxruntime-genai runs them", "",
              "past_key_values.i and present.i bound to one [1, kv, max_length, head] buffer; attention_mask of the "
              "growing length. Prefill and one decode step first; the counts are what the next steps added.", "",
              "| model | steps | max_length | hipep ms/step | CPU EP ms/step | kernel ms/step | overhead ms/step | "
              "specializations | host reads | first decode step: specializations, host reads | "
              "worst logits rel L2 (limit) |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in shared:
            L.append(f"| {r['model']} | {r['steps']} | {r['max_len']} | {r['hipep_ms']:.3f} | {r['cpu_ms']:.3f} | "
                     f"{r['kernel_ms']:.3f} | {r['overhead_ms']:.3f} | {r['specializations']} | {r['host_reads']} | "
                     f"{r['warmup_specializations']}, {r['warmup_host_reads']} | "
                     f"{r['worst_rel_l2']:.2e} ({r['threshold']:g}) |")
    rows = targets(chains, growing, shared)
    if rows:
        L += ["", "## Targets", "", "| target | measured | met |", "|---|---|---|"]
        for what, measured, met in rows:
            L.append(f"| {what} | {measured} | {'n/a' if met is None else 'yes' if met else '**no**'} |")
    if split:
        L += _split_text(split, cold, floor, side)
    if profile is not None:
        L += ["", f"## Where the host time goes: {MEDIUM}, one decode step (past {PREFILL}) repeated "
                  f"{profile['runs']} times", "",
              f"Without the profiler (medians): {profile['plain_ms']:.3f} ms per run, kernel_us "
              f"{profile['plain_kernel_ms']:.3f} ms, overhead {profile['plain_overhead_ms']:.3f} ms. Under cProfile: "
              f"{profile['profiled_ms']:.3f} ms per run, {profile['profiled_kernel_ms']:.3f} ms of it inside the "
              f"kernels' entry points, {profile['profiled_host_us']:.0f} µs of host code (the profiler's own cost "
              f"inflates every call, the many small ones most). Host functions by their own time (for functions "
              f"kernels call too, only the host's calls):", "",
              "| function | where | calls/run | own µs/call | own µs/run |", "|---|---|---|---|---|"]
        for f in profile["functions"]:
            L.append(f"| `{f['function']}` | {f['where']} | {f['calls_per_run']:.1f} | {f['us_per_call']:.2f} | "
                     f"{f['own_us_per_run']:.1f} |")
        L += ["", "Host time per file (µs per run):", "", "| file | own µs/run |", "|---|---|"]
        for where, us in profile["files"]:
            L.append(f"| {where} | {us:.1f} |")
    return "\n".join(L) + "\n"


def plot(path: str, chains: list[dict], growing: list[dict], shared: list[dict]) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install '.[bench]'): no plot", file=sys.stderr)
        return False
    fig, axes = plt.subplots(1, 2, figsize=(15, 5.5), gridspec_kw={"width_ratios": [1, 1.25]})
    ax = axes[0]
    for fusion, marker, color in (("off", "o", "C0"), ("on", "s", "C2")):
        rs = [r for r in chains if r["fusion"] == fusion and not r.get("na")]
        if rs:
            n = [r["ops"] for r in rs]
            ax.plot(n, [r["hipep_us"] for r in rs], marker + "-", color=color, label=f"hipep, fusion={fusion}")
            ax.plot(n, [r["overhead_us"] for r in rs], marker + ":", color=color, alpha=0.6,
                    label=f"hipep overhead (run − kernel_us), fusion={fusion}")
    rs = [r for r in chains if r["fusion"] == "off" and not r.get("na")]
    if rs:
        ax.plot([r["ops"] for r in rs], [r["cpu_us"] for r in rs], "k^--", label="CPU EP")
    ax.set(xscale="log", yscale="log", xlabel="Add nodes in the chain", ylabel="µs per run (median)",
           title=f"Add chains, {list(CHAIN_SHAPE)} fp32")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax = axes[1]
    for i, r in enumerate(growing):
        s = r["series"]
        x = PREFILL + np.arange(len(s["hipep_ms"]))
        color = f"C{i}"
        ax.plot(x, s["hipep_ms"], "-", color=color, label=f"{r['model']} hipep")
        ax.plot(x, s["overhead_ms"], ":", color=color, label=f"{r['model']} hipep overhead")
        ax.plot(x, s["cpu_ms"], "--", color=color, alpha=0.6, label=f"{r['model']} CPU EP")
    ax.axhline(TARGET_OVERHEAD_MS, color="gray", lw=0.8, label=f"target: overhead {TARGET_OVERHEAD_MS:g} ms ({MEDIUM})")
    ax.set(yscale="log", xlabel="past length (tokens)", ylabel="ms per decode step (median over passes)",
           title="Decode steps, growing past")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
