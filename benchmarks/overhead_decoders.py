"""Workloads 2 and 3 of benchmarks/overhead.py: the model builder's llama decoders, fed as a plain
`run` caller does (a prefill, then decode steps whose past is the previous step's present), and
with past and present bound to one max-length buffer through io_binding, as onnxruntime-genai runs
them. Logits are checked against the CPU EP on every step."""
from __future__ import annotations

import os
import time

import numpy as np
import onnxruntime as ort

import hipep
from hipep.tools import model_zoo
from overhead_sessions import CPU_EP, counters

PREFILL = 32  # prompt tokens
DECODE_STEPS = 32  # growing-past decode steps per pass
SHARED_STEPS = 100  # shared-buffer decode steps measured (after one warm-up step)
REL_L2 = {"fp32": 1e-4, "int4": 1e-2}  # the limit on logits vs the CPU EP, per precision

# (label, architecture, precision, size) of the decoders measured
DECODERS = (("llama-fp32", "llama", "fp32", "tiny"), ("llama-int4", "llama", "int4", "tiny"),
            ("llama-medium-fp32", "llama", "fp32", "medium"))
MEDIUM = "llama-medium-fp32"


def rel_l2(got: np.ndarray, want: np.ndarray) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    den = np.linalg.norm(want)
    return float(np.linalg.norm(got - want) / den) if den else float(np.linalg.norm(got - want))


def decoder_folder(arch: str, precision: str, size: str) -> str:
    return model_zoo.decoder(arch, precision, size=size)


def decoder_config(folder: str) -> dict:
    return model_zoo.genai_config(folder)


def fixed_tokens(decode_steps: int, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
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
    cfg = decoder_config(folder)["model"]["decoder"]
    layers, head_size = cfg["num_hidden_layers"], cfg["head_size"]
    hip = hipep.InferenceSession(path, device="cpu")
    cpu = ort.InferenceSession(path, providers=CPU_EP)
    inputs, outputs = hip.get_inputs(), [o.name for o in hip.get_outputs()]
    logits_at = outputs.index("logits")
    prompt, tokens = fixed_tokens(decode_steps)
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
                c0 = counters()
                t0 = clock()
                got = sess.run(None, f)
                t1 = clock()
                c1 = counters()
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
    full = decoder_config(folder)
    cfg = full["model"]["decoder"]
    max_len = full["search"]["max_length"]
    if PREFILL + 1 + steps > max_len:
        raise ValueError(f"{label}: {steps} decode steps do not fit in max_length {max_len}")
    eps = {"hip": _SharedBuffer(hipep.InferenceSession(path, device="cpu"), cfg["head_size"], max_len),
           "cpu": _SharedBuffer(ort.InferenceSession(path, providers=CPU_EP), cfg["head_size"], max_len)}
    prompt, tokens = fixed_tokens(steps + 1, seed=11)
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
                c0 = counters()
                t0 = clock()
                ep.run()
                t1 = clock()
                c1 = counters()
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
        folder = decoder_folder(arch, precision, size)
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
