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

    python benchmarks/overhead.py [--quick] [--out DIR] [--no-profile]
"""
from __future__ import annotations

import argparse
import cProfile
import dataclasses
import os
import pstats
import sys
import time

# numpy's BLAS (the reference kernels' matmuls) on one thread unless the caller chose: with one
# BLAS thread per core on a small machine that other work shares, a BLAS thread spinning for a
# descheduled partner made a decode step's kernels 10x slower at random, and its leftover spinning
# slowed the CPU EP's next run. Overhead is host time and does not depend on it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

import hipep  # noqa: E402
from hipep.options import ProviderOptions  # noqa: E402
from hipep.tools import model_zoo  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/machine.py, also when loaded by path
from machine import machine_info  # noqa: E402
RESULTS = os.path.join(ROOT, "benchmarks", "results")

CHAIN_LENGTHS = (1, 10, 100, 1000)
CHAIN_SHAPE = (1, 16)
PREFILL = 32  # prompt tokens
DECODE_STEPS = 32  # growing-past decode steps per pass
SHARED_STEPS = 100  # shared-buffer decode steps measured (after one warm-up step)
BLOCK = 50  # runs per interleaved block of the Add chains

# Targets (from the issue that asked for this benchmark)
TARGET_CHAIN = 100  # the chain length the per-op targets apply to
TARGET_US_PER_OP = 3.0  # (hipep − CPU EP) per Add node, fusion off
TARGET_OVERHEAD_MS = 0.3  # per decode step of the medium decoder
REL_L2 = {"fp32": 1e-4, "int4": 1e-2}  # logits vs the CPU EP, per precision

# (label, architecture, precision, size) of the decoders measured
DECODERS = (("llama-fp32", "llama", "fp32", "tiny"), ("llama-int4", "llama", "int4", "tiny"),
            ("llama-medium-fp32", "llama", "fp32", "medium"))
MEDIUM = "llama-medium-fp32"

CPU_EP = ["CPUExecutionProvider"]


# ---- the machine ---------------------------------------------------------------------------------

def fusion_available() -> bool:
    return "fusion" in {f.name for f in dataclasses.fields(ProviderOptions)}


# ---- Add chains -----------------------------------------------------------------------------------

def add_chain(n: int) -> bytes:
    """x + c_0 + c_1 + ... + c_{n-1}: a plain chain of n Add nodes, each with its own small constant."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits, prev = [], [], "x"
    for i in range(n):
        out = "y" if i == n - 1 else f"t{i}"
        inits.append(numpy_helper.from_array(np.full(CHAIN_SHAPE, 1e-3 * (i % 7 + 1), np.float32), f"c{i}"))
        nodes.append(helper.make_node("Add", [prev, f"c{i}"], [out], name=f"add{i}"))
        prev = out
    graph = helper.make_graph(nodes, f"add_chain_{n}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, CHAIN_SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, CHAIN_SHAPE)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10).SerializeToString()


def _counters() -> tuple[int, int, int, int]:
    s = hipep.stats()
    return s.get("launches", 0), s.get("kernel_us", 0), s.get("specializations", 0), s.get("host_reads", 0)


class _Chain:
    """One chain on hipep (with one fusion setting) and on the CPU EP; `measure` adds samples."""

    def __init__(self, n: int, fusion: str, warmup: int = 50):
        self.n, self.fusion = n, fusion
        model = add_chain(n)
        options = {"fusion": fusion} if fusion_available() else {}
        self.hip = hipep.InferenceSession(model, device="cpu", **options)
        self.cpu = ort.InferenceSession(model, providers=CPU_EP)
        self.feeds = {"x": np.random.default_rng(n).standard_normal(CHAIN_SHAPE).astype(np.float32)}
        self.equal = bool(np.array_equal(self.hip.run(None, self.feeds)[0], self.cpu.run(None, self.feeds)[0]))
        for _ in range(warmup):
            self.hip.run(None, self.feeds)
            self.cpu.run(None, self.feeds)
        self.wall: list[int] = []
        self.kernel: list[int] = []
        self.cpu_wall: list[int] = []
        self.launches = 0

    def measure(self, runs: int) -> None:
        """`runs` runs of each, alternating in blocks of BLOCK."""
        hip, cpu, feeds, clock = self.hip, self.cpu, self.feeds, time.perf_counter_ns
        launches0 = _counters()[0]
        done = 0
        while done < runs:
            block = min(BLOCK, runs - done)
            for _ in range(block):
                k0 = _counters()[1]
                t0 = clock()
                hip.run(None, feeds)
                t1 = clock()
                self.wall.append(t1 - t0)
                self.kernel.append((_counters()[1] - k0) * 1000)
            for _ in range(block):
                t0 = clock()
                cpu.run(None, feeds)
                t1 = clock()
                self.cpu_wall.append(t1 - t0)
            done += block
        self.launches += _counters()[0] - launches0

    def row(self) -> dict:
        wall, kernel, cpu_wall = (np.asarray(v, np.int64) for v in (self.wall, self.kernel, self.cpu_wall))
        hip_us, cpu_us = np.median(wall) / 1e3, np.median(cpu_wall) / 1e3
        return {"ops": self.n, "fusion": self.fusion, "runs": len(wall), "hipep_us": hip_us, "cpu_us": cpu_us,
                "per_op_us": (hip_us - cpu_us) / self.n, "launches": self.launches / len(wall),
                "kernel_us": np.median(kernel) / 1e3, "overhead_us": np.median(wall - kernel) / 1e3,
                "equal": self.equal}


def measure_chain(n: int, fusion: str, runs: int) -> dict:
    """Per-run medians of one chain on hipep (with that fusion setting) and on the CPU EP."""
    if fusion == "on" and not fusion_available():
        return {"ops": n, "fusion": fusion, "runs": runs, "na": True}
    chain = _Chain(n, fusion)
    chain.measure(runs)
    return chain.row()


def chain_rows(lengths=CHAIN_LENGTHS, runs_short: int = 2000, runs_long: int = 300, rounds: int = 4,
               verbose: bool = True) -> list[dict]:
    """Every chain and fusion setting, measured in `rounds` rounds over all of them, each round a
    share of the runs: a burst of other work on the machine then falls on a share of every row's
    samples, not on all of one row's."""
    chains, rows = [], {}
    for n in lengths:
        for fusion in ("off", "on"):
            if fusion == "on" and not fusion_available():
                rows[(n, fusion)] = {"ops": n, "fusion": fusion, "runs": 0, "na": True}
            else:
                chains.append((_Chain(n, fusion), runs_short if n < 1000 else runs_long))
    for r in range(rounds):
        for chain, runs in chains:
            chain.measure(runs // rounds + (1 if r < runs % rounds else 0))
    for chain, _runs in chains:
        rows[(chain.n, chain.fusion)] = chain.row()
    out = [rows[(n, fusion)] for n in lengths for fusion in ("off", "on")]
    if verbose:
        for r in out:
            print(_chain_line(r), flush=True)
    return out


def _chain_line(r: dict) -> str:
    if r.get("na"):
        return f"Add x{r['ops']:<5} fusion={r['fusion']:<3} n/a (no fusion option)"
    return (f"Add x{r['ops']:<5} fusion={r['fusion']:<3} hipep {r['hipep_us']:9.1f} us  CPU EP {r['cpu_us']:8.1f} us  "
            f"(diff)/op {r['per_op_us']:6.2f} us  launches {r['launches']:6.0f}  kernel {r['kernel_us']:8.1f} us  "
            f"overhead {r['overhead_us']:8.1f} us")


# ---- decoders -------------------------------------------------------------------------------------

def rel_l2(got: np.ndarray, want: np.ndarray) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    den = np.linalg.norm(want)
    return float(np.linalg.norm(got - want) / den) if den else float(np.linalg.norm(got - want))


def _folder(arch: str, precision: str, size: str) -> str:
    from hipep.tools import model_zoo

    return model_zoo.decoder(arch, precision, size=size)


def _decoder_config(folder: str) -> dict:
    from hipep.tools import model_zoo

    return model_zoo.genai_config(folder)


def _tokens(decode_steps: int, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    # Fixed tokens, not greedy ones: both EPs see the same inputs whatever their logits say.
    rng = np.random.default_rng(seed)
    return (rng.integers(3, 256, size=(1, PREFILL)).astype(np.int64),
            rng.integers(3, 256, size=(decode_steps, 1, 1)).astype(np.int64))


def measure_decoder(label: str, folder: str, precision: str, decode_steps: int = DECODE_STEPS,
                    repeats: int = 5) -> dict:
    """Prefill, then `decode_steps` decode steps with a growing past, `repeats` passes, each pass
    on hipep and then on the CPU EP. Whole passes alternate, not single steps: on a machine of few
    cores, the threads one EP leaves spinning (ORT's pool, numpy's BLAS) would slow the other's
    next step. Specializations and host reads are those of the first pass's decode steps (later
    passes only replay); times are medians over the decode steps of the passes after the first."""
    path = os.path.join(folder, "model.onnx")
    cfg = _decoder_config(folder)["model"]["decoder"]
    layers, head_size = cfg["num_hidden_layers"], cfg["head_size"]
    hip = hipep.InferenceSession(path, device="cpu")
    cpu = ort.InferenceSession(path, providers=CPU_EP)
    inputs, outputs = hip.get_inputs(), [o.name for o in hip.get_outputs()]
    logits_at = outputs.index("logits")
    prompt, tokens = _tokens(decode_steps)
    clock = time.perf_counter_ns
    steps = decode_steps + 1  # index 0 is the prefill
    wall = {"hip": np.zeros((repeats, steps), np.int64), "cpu": np.zeros((repeats, steps), np.int64)}
    kernel = np.zeros((repeats, steps), np.int64)
    launches = np.zeros((repeats, steps), np.int64)
    first_pass = {"specializations": 0, "host_reads": 0}
    worst = 0.0
    for rep in range(repeats):
        logits = {}
        for name, sess in (("hip", hip), ("cpu", cpu)):
            prev, logits[name] = None, []
            for k in range(steps):
                ids, past_len = (prompt, 0) if k == 0 else (tokens[k - 1], PREFILL + k - 1)
                f = model_zoo.decoder_feeds(inputs, head_size, ids, past_len, prev)
                c0 = _counters()
                t0 = clock()
                got = sess.run(None, f)
                t1 = clock()
                c1 = _counters()
                wall[name][rep, k] = t1 - t0
                prev = dict(zip(outputs, got))
                logits[name].append(got[logits_at])
                if name == "hip":
                    kernel[rep, k] = (c1[1] - c0[1]) * 1000
                    launches[rep, k] = c1[0] - c0[0]
                    if rep == 0 and k > 0:
                        first_pass["specializations"] += c1[2] - c0[2]
                        first_pass["host_reads"] += c1[3] - c0[3]
        worst = max([worst] + [rel_l2(a, b) for a, b in zip(logits["hip"], logits["cpu"])])
    timed = slice(1, None) if repeats > 1 else slice(None)  # the first pass also traces and captures
    hip_wall, cpu_wall = wall["hip"][timed], wall["cpu"][timed]
    dec = slice(1, None)
    return {"model": label, "layers": layers, "steps": decode_steps, "repeats": repeats,
            "prefill_hipep_ms": np.median(hip_wall[:, 0]) / 1e6, "prefill_cpu_ms": np.median(cpu_wall[:, 0]) / 1e6,
            "hipep_ms": np.median(hip_wall[:, dec]) / 1e6, "cpu_ms": np.median(cpu_wall[:, dec]) / 1e6,
            "kernel_ms": np.median(kernel[timed, dec]) / 1e6,
            "overhead_ms": np.median((hip_wall - kernel[timed])[:, dec]) / 1e6,
            # the first pass: every decode step a shape this session never saw (no repeat helps it)
            "first_pass_overhead_ms": np.median((wall["hip"] - kernel)[0, dec]) / 1e6,
            "launches_per_layer": float(np.mean(launches[:, dec])) / layers,
            "launches": float(np.mean(launches[:, dec])),
            "specializations": first_pass["specializations"], "host_reads": first_pass["host_reads"],
            "worst_rel_l2": worst, "threshold": REL_L2[precision],
            # per decode step, medians over the passes: for the plot
            "series": {"hipep_ms": np.median(hip_wall[:, dec], axis=0) / 1e6,
                       "cpu_ms": np.median(cpu_wall[:, dec], axis=0) / 1e6,
                       "kernel_ms": np.median(kernel[timed, dec], axis=0) / 1e6,
                       "overhead_ms": np.median((hip_wall - kernel[timed])[:, dec], axis=0) / 1e6}}


class _SharedBuffer:
    """One EP's session with past and present bound to the same [1, kv, max_len, head] buffers."""

    def __init__(self, sess, head_size: int, max_len: int):
        self.sess = sess
        self.binding = sess.io_binding()
        self.caches = {}
        for i in sess.get_inputs():
            if i.name.startswith("past_key_values."):
                dtype = np.float16 if "float16" in i.type else np.float32
                buf = np.zeros((1, i.shape[1], max_len, head_size), dtype)
                value = ort.OrtValue.ortvalue_from_numpy(buf)  # wraps buf's memory, no copy
                self.caches[i.name] = (buf, value)
                self.binding.bind_ortvalue_input(i.name, value)
                self.binding.bind_ortvalue_output(i.name.replace("past_key_values.", "present."), value)

    def bind(self, ids: np.ndarray, total: int) -> None:
        self.binding.bind_cpu_input("input_ids", ids)
        self.binding.bind_cpu_input("attention_mask", np.ones((1, total), np.int64))
        self.binding.bind_output("logits")

    def run(self) -> None:
        self.sess.run_with_iobinding(self.binding)

    def logits(self) -> np.ndarray:
        return self.binding.get_outputs()[0].numpy().copy()  # ORT may reuse the memory next run


def measure_shared(label: str, folder: str, precision: str, steps: int = SHARED_STEPS, block: int = 10) -> dict:
    """Prefill and one warm-up decode step, then `steps` decode steps on a shared KV buffer of the
    model's max_length; counts what those steps add. The EPs alternate in blocks of `block` steps
    (each keeps its own buffers), for the reason measure_decoder gives."""
    path = os.path.join(folder, "model.onnx")
    full = _decoder_config(folder)
    cfg = full["model"]["decoder"]
    max_len = full["search"]["max_length"]
    if PREFILL + 1 + steps > max_len:
        raise ValueError(f"{label}: {steps} decode steps do not fit in max_length {max_len}")
    eps = {"hip": _SharedBuffer(hipep.InferenceSession(path, device="cpu"), cfg["head_size"], max_len),
           "cpu": _SharedBuffer(ort.InferenceSession(path, providers=CPU_EP), cfg["head_size"], max_len)}
    prompt, tokens = _tokens(steps + 1, seed=11)
    clock = time.perf_counter_ns
    n = steps + 2  # index 0: the prefill; 1: the first decode step; then the measured steps
    wall = {name: np.zeros(n, np.int64) for name in eps}
    kernel, specs, reads = (np.zeros(n, np.int64) for _ in range(3))
    logits: dict = {name: [] for name in eps}
    for first in [0, 2] + list(range(2 + block, n, block)):
        last = 2 if first == 0 else min(first + block, n)
        for name, ep in eps.items():
            for k in range(first, last):
                ids, total = (prompt, PREFILL) if k == 0 else (tokens[k - 1], PREFILL + k)
                ep.bind(ids, total)
                c0 = _counters()
                t0 = clock()
                ep.run()
                t1 = clock()
                c1 = _counters()
                wall[name][k] = t1 - t0
                logits[name].append(ep.logits())
                if name == "hip":
                    kernel[k], specs[k], reads[k] = (c1[1] - c0[1]) * 1000, c1[2] - c0[2], c1[3] - c0[3]
    worst = max(rel_l2(a, b) for a, b in zip(logits["hip"], logits["cpu"]))
    m = slice(2, None)
    return {"model": label, "steps": steps, "max_len": max_len, "hipep_ms": np.median(wall["hip"][m]) / 1e6,
            "cpu_ms": np.median(wall["cpu"][m]) / 1e6, "kernel_ms": np.median(kernel[m]) / 1e6,
            "overhead_ms": np.median((wall["hip"] - kernel)[m]) / 1e6,
            "specializations": int(specs[m].sum()), "host_reads": int(reads[m].sum()),
            # the first decode step: a new shape after the prompt's
            "warmup_specializations": int(specs[1]), "warmup_host_reads": int(reads[1]),
            "worst_rel_l2": worst, "threshold": REL_L2[precision]}


def decoder_rows(decoders=DECODERS, decode_steps: int = DECODE_STEPS, repeats: int = 5,
                 shared_steps: int = SHARED_STEPS, verbose: bool = True) -> tuple[list[dict], list[dict]]:
    growing, shared = [], []
    for label, arch, precision, size in decoders:
        folder = _folder(arch, precision, size)
        r = measure_decoder(label, folder, precision, decode_steps, repeats)
        growing.append(r)
        if verbose:
            print(f"{label:<18} growing past: hipep {r['hipep_ms']:8.3f} ms/step  CPU EP {r['cpu_ms']:7.3f}  "
                  f"kernel {r['kernel_ms']:8.3f}  overhead {r['overhead_ms']:6.3f}  "
                  f"launches/layer {r['launches_per_layer']:.2f}  specializations {r['specializations']}  "
                  f"worst rel L2 {r['worst_rel_l2']:.2e}", flush=True)
        s = measure_shared(label, folder, precision, shared_steps)
        shared.append(s)
        if verbose:
            print(f"{label:<18} shared buffer: hipep {s['hipep_ms']:8.3f} ms/step  CPU EP {s['cpu_ms']:7.3f}  "
                  f"kernel {s['kernel_ms']:8.3f}  overhead {s['overhead_ms']:6.3f}  "
                  f"specializations {s['specializations']}  host reads {s['host_reads']}  "
                  f"worst rel L2 {s['worst_rel_l2']:.2e}", flush=True)
    return growing, shared


# ---- where the host time goes --------------------------------------------------------------------

def profile_decode(folder: str, runs: int = 300, top: int = 25) -> dict:
    """cProfile over `runs` identical decode steps (past of PREFILL tokens) of one hipep session,
    split into kernel time (under the CPU device's program entry points, which kernel_us times)
    and host time (everything else under ORT's `run`). Lists the host's functions by own time."""
    path = os.path.join(folder, "model.onnx")
    cfg = _decoder_config(folder)["model"]["decoder"]
    hip = hipep.InferenceSession(path, device="cpu")
    inputs, outputs = hip.get_inputs(), [o.name for o in hip.get_outputs()]
    prompt, tokens = _tokens(1)
    prev = dict(zip(outputs, hip.run(None, model_zoo.decoder_feeds(inputs, cfg["head_size"], prompt, 0, None))))
    feeds = model_zoo.decoder_feeds(inputs, cfg["head_size"], tokens[0], PREFILL, prev)
    for _ in range(5):
        hip.run(None, feeds)
    clock = time.perf_counter_ns
    wall = np.empty(runs, np.int64)
    kernel = np.empty(runs, np.int64)
    for i in range(runs):
        k0 = _counters()[1]
        t0 = clock()
        hip.run(None, feeds)
        wall[i] = clock() - t0
        kernel[i] = (_counters()[1] - k0) * 1000
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(runs):
        hip.run(None, feeds)
    prof.disable()
    return {"runs": runs, "plain_ms": np.median(wall) / 1e6, "plain_kernel_ms": np.median(kernel) / 1e6,
            "plain_overhead_ms": np.median(wall - kernel) / 1e6, **host_profile(pstats.Stats(prof), runs, top)}


# The CPU device's program entry points: kernel_us is the time inside them. (Replays call a
# program's `run`, one of these; cpu.py's `__call__`s are the inline replay's, which is host code.)
KERNEL_ENTRIES = {("hipep/runtime/cpu.py", "_run_reference"), ("hipep/runtime/cpu.py", "_run_ufunc")}
ROOT_FUNCTION = ("onnxruntime/capi/onnxruntime_inference_collection.py", "run")


def host_profile(st: pstats.Stats, runs: int, top: int) -> dict:
    """Host time from a profile of `runs` session runs. A function is host code when a host function
    calls it other than through a kernel entry point; its host time is the own time of the calls made
    from host code (a numpy function that kernels call too counts only for the host's calls)."""
    stats = st.stats
    key = {k: (_short(k[0]), k[2]) for k in stats}
    roots = [k for k in stats if key[k] == ROOT_FUNCTION]
    entries = [k for k in stats if key[k] in KERNEL_ENTRIES]
    callees: dict = {}
    for f, (_cc, _nc, _tt, _ct, callers) in stats.items():
        for c in callers:
            callees.setdefault(c, []).append(f)
    host, todo = set(roots), list(roots)
    while todo:
        for g in callees.get(todo.pop(), ()):
            if g not in host and key[g] not in KERNEL_ENTRIES:
                host.add(g)
                todo.append(g)
    total_us = sum(stats[k][3] for k in roots) / runs * 1e6
    kernel_us = sum(stats[k][3] for k in entries) / runs * 1e6
    funcs, files = [], {}
    for f in host:
        callers = stats[f][4]
        edges = [v for c, v in callers.items() if c in host] if f not in roots else [stats[f][:4]]
        calls = sum(e[0] for e in edges)
        own = sum(e[2] for e in edges)
        if not calls:
            continue
        where, line = key[f][0], f[1]
        funcs.append({"function": key[f][1], "where": f"{where}:{line}" if line else where,
                      "calls_per_run": calls / runs,
                      "us_per_call": own / calls * 1e6, "own_us_per_run": own / runs * 1e6})
        files[where] = files.get(where, 0.0) + own / runs * 1e6
    funcs.sort(key=lambda r: -r["own_us_per_run"])
    return {"profiled_ms": total_us / 1e3, "profiled_kernel_ms": kernel_us / 1e3,
            "profiled_host_us": sum(r["own_us_per_run"] for r in funcs), "functions": funcs[:top],
            "files": sorted(files.items(), key=lambda kv: -kv[1])[:12]}


def _short(file: str) -> str:
    if file == "~":
        return "(built-in)"
    for marker in ("/site-packages/", ROOT + os.sep):
        if marker in file:
            return file.split(marker, 1)[1]
    return os.path.basename(file)


# Steps of a run timed one by one (module, class or None, function): wrapped for the measurement and
# restored after. Names that a runtime no longer has are skipped.
SPLIT_STEPS = tuple(("hipep.runtime.executor", "Executor", name) for name in (
    "_check_inputs", "_program", "_outputs", "_specialization")) + (
    ("hipep.runtime.cpu", "CpuDevice", "finish_outputs"), ("hipep.counters", None, "bump_many"),)


def _where(func) -> str:
    code = getattr(func, "__code__", None)
    return f"{_short(code.co_filename)}:{code.co_firstlineno}" if code else "?"


def host_split(run, runs: int) -> dict:
    """A run's host time, step by step, with timers instead of a profiler (a timed step costs about
    1 µs more: a Python wrapper and two clock reads; the profiler inflates every call): ORT and the
    plugin up to hipep's entry (the fused node's CompiledSubgraph.run), each executor step in
    SPLIT_STEPS, the replay loop less the kernels, the rest of the executor, and ORT after hipep
    returns. Medians over `runs` calls of `run`."""
    import importlib

    from hipep import bridge
    from hipep.runtime import cpu

    clock = time.perf_counter_ns
    times: dict[str, list[int]] = {}
    restore = []

    def timed(owner, name, label):
        orig = getattr(owner, name)

        def wrapper(*a, **k):
            t = clock()
            try:
                return orig(*a, **k)
            finally:
                times.setdefault(label, []).append(clock() - t)

        setattr(owner, name, wrapper)
        restore.append((owner, name, orig))

    where = {}
    for module, cls, name in SPLIT_STEPS:
        owner = importlib.import_module(module)
        owner = getattr(owner, cls, None) if cls else owner
        if owner is not None and callable(getattr(owner, name, None)):
            label = f"{cls}.{name}" if cls else f"{module.rsplit('.', 1)[1]}.{name}"
            where[label] = _where(getattr(owner, name))
            timed(owner, name, label)
    entry = bridge.CompiledSubgraph.run
    replay = cpu._InlineReplay.__call__  # the CPU device's inline replay, with or without bind_replay
    where["CompiledSubgraph.run"], where["CpuDevice.replay"] = _where(entry), _where(replay)

    def entry_timed(self, *a, **k):
        t = clock()
        times.setdefault("enter", []).append(t)
        try:
            return entry(self, *a, **k)
        finally:
            e = clock()
            times.setdefault("leave", []).append(e)
            times.setdefault("hipep", []).append(e - t)

    def replay_timed(self, stream, *ort_memory):
        t, k0 = clock(), stream.kernel_ns
        try:
            return replay(self, stream, *ort_memory)
        finally:
            times.setdefault("replay", []).append(clock() - t - (stream.kernel_ns - k0))
            times.setdefault("kernels", []).append(stream.kernel_ns - k0)
            times.setdefault("nodes", []).append(len(self.nodes))

    bridge.CompiledSubgraph.run, cpu._InlineReplay.__call__ = entry_timed, replay_timed
    restore += [(bridge.CompiledSubgraph, "run", entry), (cpu._InlineReplay, "__call__", replay)]
    try:
        for _ in range(5):
            run()
        times.clear()
        start, end = np.empty(runs, np.int64), np.empty(runs, np.int64)
        for i in range(runs):
            start[i] = clock()
            run()
            end[i] = clock()
    finally:
        for owner, name, orig in reversed(restore):
            setattr(owner, name, orig)
    if len(times.get("enter", ())) != runs:
        raise RuntimeError(f"expected one hipep subgraph run per session run, got {len(times.get('enter', ()))}")
    arr = {k: np.asarray(v, np.int64) for k, v in times.items()}
    steps = [label for label in where if label in arr and label not in ("CompiledSubgraph.run", "CpuDevice.replay")]
    rest = arr["hipep"] - arr["replay"] - arr["kernels"] - sum(arr[label] for label in steps)
    rows = [("ORT and the plugin, up to hipep", f"→ {where['CompiledSubgraph.run']}", arr["enter"] - start)]
    # a step this workload never takes (no in-place outputs: no _alias_state) is a row of None
    rows += [(label, where[label], arr.get(label)) for label in where
             if label not in ("CompiledSubgraph.run", "CpuDevice.replay")]
    nodes = int(arr["nodes"][0])  # launches and host steps
    rows += [("replay loop, less the kernels", where["CpuDevice.replay"], arr["replay"]),
             ("the rest of the run (Executor.run's own lines, the bridge)", where["CompiledSubgraph.run"], rest),
             ("ORT after hipep returns (outputs to numpy)", "", end - arr["leave"])]
    wall = end - start
    return {"runs": runs, "wall_us": np.median(wall) / 1e3, "kernel_us": np.median(arr["kernels"]) / 1e3,
            "overhead_us": np.median(wall - arr["kernels"]) / 1e3, "nodes": nodes,
            "rows": [(what, loc, None if v is None else float(np.median(v)) / 1e3) for what, loc, v in rows]}


def cold_cache_control(folder: str, runs: int, flush_mib: int = 48) -> dict:
    """The overhead of one decode step of a small decoder, with the caches as the previous run
    left them and after streaming `flush_mib` MiB through them (as the medium decoder's kernels
    do, reading its 48 MiB of weights): how much of a big model's overhead on the CPU device is
    the host's code running with caches its kernels evicted."""
    cfg = _decoder_config(folder)["model"]["decoder"]
    hip = hipep.InferenceSession(os.path.join(folder, "model.onnx"), device="cpu")
    inputs, outputs = hip.get_inputs(), [o.name for o in hip.get_outputs()]
    prompt, tokens = _tokens(1)
    prev = dict(zip(outputs, hip.run(None, model_zoo.decoder_feeds(inputs, cfg["head_size"], prompt, 0, None))))
    feeds = model_zoo.decoder_feeds(inputs, cfg["head_size"], tokens[0], PREFILL, prev)
    big = np.ones(flush_mib * 2**20 // 4, np.float32)
    clock = time.perf_counter_ns
    out = {"flush_mib": flush_mib, "runs": runs}
    for name, flush in (("warm", False), ("flushed", True)):
        overhead = np.empty(runs, np.int64)
        for i in range(runs):
            if flush:
                big += 1.0
            k0 = _counters()[1]
            t0 = clock()
            hip.run(None, feeds)
            overhead[i] = clock() - t0 - (_counters()[1] - k0) * 1000
        out[name + "_us"] = np.median(overhead) / 1e3
    return out


def ort_floor(folder: str, runs: int, flush_mib: int = 48) -> dict:
    """ORT's own cost of a plain `run` with a decoder's inputs and outputs: the CPU EP on a model of
    the same inputs and outputs that only concatenates one zero row to each past (the presents)
    and returns constant logits. With warm caches, and after `flush_mib` MiB streamed through them
    (as a decode step's kernels leave them)."""
    from onnx import TensorProto, helper, numpy_helper

    cfg = _decoder_config(folder)["model"]["decoder"]
    real = ort.InferenceSession(os.path.join(folder, "model.onnx"), providers=CPU_EP)
    inputs, outputs = real.get_inputs(), real.get_outputs()
    kv, head = cfg["num_key_value_heads"], cfg["head_size"]
    logits_shape = [1, 1, int(outputs[[o.name for o in outputs].index("logits")].shape[-1])]
    inits = [numpy_helper.from_array(np.zeros((1, kv, 1, head), np.float32), "row"),
             numpy_helper.from_array(np.zeros(logits_shape, np.float32), "zeros")]
    nodes = [helper.make_node("Identity", ["zeros"], ["logits"]) if o.name == "logits" else
             helper.make_node("Concat", [o.name.replace("present.", "past_key_values."), "row"], [o.name], axis=2)
             for o in outputs]
    elem = {"tensor(int64)": TensorProto.INT64, "tensor(float)": TensorProto.FLOAT}
    graph = helper.make_graph(nodes, "io_only", [helper.make_tensor_value_info(i.name, elem[i.type], None)
                                                 for i in inputs],
                              [helper.make_tensor_value_info(o.name, TensorProto.FLOAT, None) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    sess = ort.InferenceSession(model.SerializeToString(), providers=CPU_EP)
    prompt, tokens = _tokens(1)
    prev = dict(zip([o.name for o in outputs], real.run(None, model_zoo.decoder_feeds(inputs, head, prompt, 0, None))))
    feeds = model_zoo.decoder_feeds(inputs, head, tokens[0], PREFILL, prev)
    big = np.ones(flush_mib * 2**20 // 4, np.float32)
    clock = time.perf_counter_ns
    out = {"flush_mib": flush_mib, "runs": runs}
    for name, flush in (("warm", False), ("flushed", True)):
        wall = np.empty(runs, np.int64)
        for i in range(runs):
            if flush:
                big += 1.0
            t0 = clock()
            sess.run(None, feeds)
            wall[i] = clock() - t0
        out[name + "_us"] = np.median(wall) / 1e3
    return out


def ort_side(folder: str, runs: int, flush_mib: int = 48) -> dict:
    """What ORT and the plugin cost per run with hipep doing nothing: a hipep session of the decoder
    whose fused node's run only obtains the decode step's outputs (allocate_outputs with the shapes a
    real run asked for) and returns. ORT's time up to the Compute call and after it, with warm caches
    and with `flush_mib` MiB streamed through them before the run and inside Compute (where a real
    run's kernels stream the weights)."""
    from hipep import bridge

    cfg = _decoder_config(folder)["model"]["decoder"]
    hip = hipep.InferenceSession(os.path.join(folder, "model.onnx"), device="cpu")
    inputs, outputs = hip.get_inputs(), [o.name for o in hip.get_outputs()]
    prompt, tokens = _tokens(1)
    prev = dict(zip(outputs, hip.run(None, model_zoo.decoder_feeds(inputs, cfg["head_size"], prompt, 0, None))))
    feeds = model_zoo.decoder_feeds(inputs, cfg["head_size"], tokens[0], PREFILL, prev)
    clock = time.perf_counter_ns
    big = np.ones(flush_mib * 2**20 // 4, np.float32)
    seen: dict = {"flush": False}
    real = bridge.CompiledSubgraph.run

    def record_shapes(self, ins, allocate_outputs=None):
        def allocate(shapes):
            seen["shapes"] = [tuple(x) for x in shapes]
            return allocate_outputs(shapes)
        return real(self, ins, allocate)

    def only_outputs(self, ins, allocate_outputs=None):
        seen["enter"] = clock()
        if seen["flush"]:
            np.add(big, 1.0, out=big)
        allocate_outputs(seen["shapes"])
        seen["leave"] = clock()

    out = {"flush_mib": flush_mib, "runs": runs}
    try:
        bridge.CompiledSubgraph.run = record_shapes
        hip.run(None, feeds)
        bridge.CompiledSubgraph.run = only_outputs
        for _ in range(20):
            hip.run(None, feeds)
        for name, flush in (("warm", False), ("flushed", True)):
            seen["flush"] = flush
            before, after = np.empty(runs, np.int64), np.empty(runs, np.int64)
            for i in range(runs):
                if flush:
                    np.add(big, 1.0, out=big)
                t0 = clock()
                hip.run(None, feeds)
                t1 = clock()
                before[i], after[i] = seen["enter"] - t0, t1 - seen["leave"]
            out[name] = (np.median(before) / 1e3, np.median(after) / 1e3, np.median(before + after) / 1e3)
    finally:
        bridge.CompiledSubgraph.run = real
    return out


def split_workloads(folder: str | None, runs: int) -> dict:
    """host_split on the Add x100 chain (fusion off) and, given its folder, the medium decode step."""
    out = {}
    model = add_chain(TARGET_CHAIN)
    options = {"fusion": "off"} if fusion_available() else {}
    hip = hipep.InferenceSession(model, device="cpu", **options)
    feeds = {"x": np.ones(CHAIN_SHAPE, np.float32)}
    out[f"Add x{TARGET_CHAIN}, fusion=off"] = host_split(lambda: hip.run(None, feeds), runs * 5)
    if folder is not None:
        cfg = _decoder_config(folder)["model"]["decoder"]
        dec = hipep.InferenceSession(os.path.join(folder, "model.onnx"), device="cpu")
        inputs, outputs = dec.get_inputs(), [o.name for o in dec.get_outputs()]
        prompt, tokens = _tokens(1)
        prev = dict(zip(outputs, dec.run(None, model_zoo.decoder_feeds(inputs, cfg["head_size"], prompt, 0, None))))
        step = model_zoo.decoder_feeds(inputs, cfg["head_size"], tokens[0], PREFILL, prev)
        out[f"{MEDIUM} decode step"] = host_split(lambda: dec.run(None, step), runs)
    return out


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


# ---- the report ----------------------------------------------------------------------------------

def _f(v, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def targets(chains: list[dict], growing: list[dict], shared: list[dict]) -> list[tuple[str, str, bool | None]]:
    """(target, measured, met) — met is None where the row could not be measured."""
    out: list = []
    by = {(r["ops"], r["fusion"]): r for r in chains}
    off, on = by.get((TARGET_CHAIN, "off")), by.get((TARGET_CHAIN, "on"))
    if off is not None:
        out.append((f"Add x{TARGET_CHAIN}, fusion=off: {TARGET_CHAIN} launches per run",
                    f"{off['launches']:.0f}", off["launches"] == TARGET_CHAIN))
        out.append((f"Add x{TARGET_CHAIN}, fusion=off: (hipep − CPU EP) ≤ {TARGET_US_PER_OP:g} µs per op",
                    f"{off['per_op_us']:.2f} µs", off["per_op_us"] <= TARGET_US_PER_OP))
    if on is not None:
        out.append((f"Add x{TARGET_CHAIN}, fusion=on: 1 launch per run",
                    "n/a (no fusion option)" if on.get("na") else f"{on['launches']:.0f}",
                    None if on.get("na") else on["launches"] == 1))
    for r in growing:
        if r["model"] == MEDIUM:
            out.append((f"{MEDIUM} decode step (growing past): overhead ≤ {TARGET_OVERHEAD_MS:g} ms",
                        f"{r['overhead_ms']:.3f} ms", r["overhead_ms"] <= TARGET_OVERHEAD_MS))
    for r in shared:
        if r["model"] == MEDIUM:
            out.append((f"{MEDIUM} decode step (shared buffer): overhead ≤ {TARGET_OVERHEAD_MS:g} ms",
                        f"{r['overhead_ms']:.3f} ms", r["overhead_ms"] <= TARGET_OVERHEAD_MS))
    for r in shared:
        out.append((f"{r['model']}, shared buffer: 0 specializations and 0 host reads over {r['steps']} steps",
                    f"{r['specializations']} and {r['host_reads']}",
                    r["specializations"] == 0 and r["host_reads"] == 0))
    for r in growing + shared:
        kind = "shared buffer" if "max_len" in r else "growing past"
        out.append((f"{r['model']} ({kind}): logits rel L2 ≤ {r['threshold']:g} on every step",
                    f"{r['worst_rel_l2']:.2e}", r["worst_rel_l2"] <= r["threshold"]))
    # numpy's booleans are not `False`: callers test `met is False`
    return [(what, measured, None if met is None else bool(met)) for what, measured, met in out]


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="few repetitions: a smoke test, not numbers to keep")
    ap.add_argument("--out", default=RESULTS, help="folder for <date>-overhead-cpu.md and .png")
    ap.add_argument("--no-profile", action="store_true", help="skip the cProfile of the medium decode step")
    args = ap.parse_args(argv)
    info = machine_info()
    print(f"{info['date']} {info['commit']} {info['cpu']} ({info['cores']} cores, load {info['load']:.2f}); "
          f"onnxruntime {info['onnxruntime']}, numpy {info['numpy']}", flush=True)
    medium = _folder("llama", "fp32", "medium")
    if args.quick:
        chains = chain_rows(runs_short=100, runs_long=20)
        growing, shared = decoder_rows(decode_steps=4, repeats=2, shared_steps=4)
        split = split_workloads(medium, runs=10)
        cold = cold_cache_control(_folder("llama", "fp32", "tiny"), runs=20)
        floor = ort_floor(medium, runs=20)
        side = ort_side(medium, runs=20)
        profile = None if args.no_profile else profile_decode(medium, runs=10)
    else:
        chains = chain_rows()
        growing, shared = decoder_rows()
        split = split_workloads(medium, runs=300)
        cold = cold_cache_control(_folder("llama", "fp32", "tiny"), runs=300)
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
